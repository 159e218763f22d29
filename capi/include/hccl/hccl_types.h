/*
 * hccl-rs: HCCL's public types, written for hccl-rs's C API.
 *
 * Every value is CANN's, so that programs compiled against CANN's headers
 * run against hccl-rs's libhccl.so and the other way round. Source of the
 * values: CANN's hccl/hccl_types.h as published in CANN's open-source HCCL
 * (e.g. github.com/Ascend/pytorch third_party/hccl/inc/hccl/hccl_types.h,
 * and the 2024 CANN open software copy cann-hccl inc/hccl/hccl_types.h).
 * CANN declares its constants as `const uint32_t`, which C cannot use in
 * array sizes; here they are macros with the same names and values, so
 * this header compiles as C99 and as C++.
 */
#ifndef HCCL_TYPES_H_
#define HCCL_TYPES_H_

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* HcclResult: hccl_types.h, HCCL_SUCCESS = 0 .. HCCL_E_SUSPENDING = 22. */
typedef enum {
    HCCL_SUCCESS = 0,              /* success */
    HCCL_E_PARA = 1,               /* parameter error */
    HCCL_E_PTR = 2,                /* empty pointer */
    HCCL_E_MEMORY = 3,             /* memory error */
    HCCL_E_INTERNAL = 4,           /* internal error */
    HCCL_E_NOT_SUPPORT = 5,        /* not supported */
    HCCL_E_NOT_FOUND = 6,          /* resource not found */
    HCCL_E_UNAVAIL = 7,            /* resource unavailable */
    HCCL_E_SYSCALL = 8,            /* system call failed */
    HCCL_E_TIMEOUT = 9,            /* timeout */
    HCCL_E_OPEN_FILE_FAILURE = 10, /* cannot open a file */
    HCCL_E_TCP_CONNECT = 11,       /* TCP connect failed */
    HCCL_E_ROCE_CONNECT = 12,      /* RoCE connect failed */
    HCCL_E_TCP_TRANSFER = 13,      /* TCP transfer failed */
    HCCL_E_ROCE_TRANSFER = 14,     /* RoCE transfer failed */
    HCCL_E_RUNTIME = 15,           /* a runtime call failed */
    HCCL_E_DRV = 16,               /* a driver call failed */
    HCCL_E_PROFILING = 17,         /* a profiling call failed */
    HCCL_E_CCE = 18,               /* a CCE call failed */
    HCCL_E_NETWORK = 19,           /* a network call failed */
    HCCL_E_AGAIN = 20,             /* try again */
    HCCL_E_REMOTE = 21,            /* error on a remote rank (error CQE) */
    HCCL_E_SUSPENDING = 22,        /* the communicator is suspending */
    HCCL_E_RESERVED                /* reserved */
} HcclResult;

/* A communicator handle (opaque). */
typedef void *HcclComm;

/* HcclReduceOp: hccl_types.h. */
typedef enum {
    HCCL_REDUCE_SUM = 0,
    HCCL_REDUCE_PROD = 1,
    HCCL_REDUCE_MAX = 2,
    HCCL_REDUCE_MIN = 3,
    HCCL_REDUCE_RESERVED
} HcclReduceOp;

/* HcclDataType: hccl_types.h. 0..11 are supported by hccl-rs; INT128 (12)
 * and later values give HCCL_E_NOT_SUPPORT. */
typedef enum {
    HCCL_DATA_TYPE_INT8 = 0,
    HCCL_DATA_TYPE_INT16 = 1,
    HCCL_DATA_TYPE_INT32 = 2,
    HCCL_DATA_TYPE_FP16 = 3,
    HCCL_DATA_TYPE_FP32 = 4,
    HCCL_DATA_TYPE_INT64 = 5,
    HCCL_DATA_TYPE_UINT64 = 6,
    HCCL_DATA_TYPE_UINT8 = 7,
    HCCL_DATA_TYPE_UINT16 = 8,
    HCCL_DATA_TYPE_UINT32 = 9,
    HCCL_DATA_TYPE_FP64 = 10,
    HCCL_DATA_TYPE_BFP16 = 11,
    HCCL_DATA_TYPE_INT128 = 12,
    HCCL_DATA_TYPE_RESERVED
} HcclDataType;

/* HcclConfig / HcclConfigValue (HcclSetConfig): hccl_types.h. */
typedef enum {
    HCCL_DETERMINISTIC = 0, /* 0: non-deterministic, 1: deterministic */
    HCCL_CONFIG_RESERVED
} HcclConfig;

union HcclConfigValue {
    int32_t value;
};
#ifndef __cplusplus
typedef union HcclConfigValue HcclConfigValue;
#endif

/* HcclRootInfo: 4108 bytes (hccl_types.h: HCCL_ROOT_INFO_BYTES = 4108). */
#define HCCL_ROOT_INFO_BYTES 4108
#define MAX_GROUP_NAME 128
typedef struct HcclRootInfoDef {
    char internal[HCCL_ROOT_INFO_BYTES];
} HcclRootInfo;

/* HcclCommConfig: a 24-byte header written by HcclCommConfigInit (size_t
 * size, uint32_t magicWord, uint32_t version, uint64_t reserved), then the
 * fields of config version 2 (hccl_types.h). A newer CANN header's larger
 * struct works too: the library reads only as far as `size` says. */
#define HCCL_COMM_CONFIG_INFO_BYTES 24
#define HCCL_COMM_CONFIG_MAGIC_WORD 0xf0f0f0f0u
#define HCCL_COMM_CONFIG_VERSION 2
#define HCCL_COMM_DEFAULT_BUFFSIZE 200      /* MB */
#define HCCL_COMM_DEFAULT_DETERMINISTIC 0
#define COMM_NAME_MAX_LENGTH 128

typedef struct HcclCommConfigDef {
    char reserved[HCCL_COMM_CONFIG_INFO_BYTES];
    uint32_t hcclBufferSize;
    uint32_t hcclDeterministic;
    char hcclCommName[COMM_NAME_MAX_LENGTH];
} HcclCommConfig;

/* HcclCommConfigCapability (HcclGetCommConfigCapability): hccl_types.h. */
typedef enum {
    HCCL_COMM_CONFIG_BUFFER_SIZE = 0,
    HCCL_COMM_CONFIG_DETERMINISTIC = 1,
    HCCL_COMM_CONFIG_COMM_NAME = 2,
    HCCL_COMM_CONFIG_RESERVED
} HcclCommConfigCapability;

/* HcclSendRecvType / HcclSendRecvItem (HcclBatchSendRecv): hccl_types.h. */
typedef enum {
    HCCL_SEND = 0,
    HCCL_RECV = 1,
    HCCL_SEND_RECV_RESERVED
} HcclSendRecvType;

typedef struct HcclSendRecvItemDef {
    HcclSendRecvType sendRecvType;
    void *buf;
    uint64_t count;
    HcclDataType dataType;
    uint32_t remoteRank;
} HcclSendRecvItem;

#ifdef __cplusplus
}
#endif
#endif /* HCCL_TYPES_H_ */
