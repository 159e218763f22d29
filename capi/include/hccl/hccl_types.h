/*
 * hccl-rs: HCCL's public types, written for hccl-rs's C API.
 *
 * Every value is CANN's, so that programs compiled against CANN's headers
 * run against hccl-rs's libhccl.so and the other way round. Reference:
 * CANN 8.1.RC1's include/hccl/hccl_types.h (toolkit copy in the public repo
 * github.com/leideng/CANN-8.1.RC1, commit 4332a013); newer values (the FP8
 * data types) from github.com/hicann/hcomm include/hccl/hccl_types.h
 * (commit 2b912e7d) and github.com/Ascend/pytorch
 * third_party/hccl/inc/hccl/hccl_types.h.
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
    HCCL_REDUCE_RESERVED = 255
} HcclReduceOp;

/* HcclDataType: hccl_types.h (8.1.RC1 up to INT128; HIF8 and the FP8 types
 * from later CANN). 0..11 are supported by hccl-rs; the others give
 * HCCL_E_NOT_SUPPORT, as CANN's HCCL answers a type it does not take. */
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
    HCCL_DATA_TYPE_HIF8 = 14,
    HCCL_DATA_TYPE_FP8E4M3 = 15,
    HCCL_DATA_TYPE_FP8E5M2 = 16,
    HCCL_DATA_TYPE_FP8E8M0 = 17,
    HCCL_DATA_TYPE_RESERVED = 255
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

/* HcclCommConfig, version 5 (CANN 8.1.RC1; 300 bytes): a 24-byte header
 * written by HcclCommConfigInit (size_t size, uint32_t magicWord, uint32_t
 * version, uint64_t reserved), then the fields. A program built with an
 * older or newer CANN header passes its own size and version: the library
 * reads no more than `size` bytes, and only the fields that version has. */
#define HCCL_COMM_CONFIG_INFO_BYTES 24
#define HCCL_COMM_CONFIG_MAGIC_WORD 0xf0f0f0f0u
#define HCCL_COMM_CONFIG_VERSION 5
#define HCCL_COMM_DEFAULT_BUFFSIZE 200 /* MB */
#define HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_DEFAULT_DETERMINISTIC 0
#define HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_DEFAULT_OP_EXPANSION_MODE 0
#define HCCL_COMM_TRAFFIC_CLASS_CONFIG_NOT_SET 0xffffffffu
#define HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET 0xffffffffu
#define COMM_NAME_MAX_LENGTH 128
#define UDI_MAX_LENGTH 128

typedef struct HcclCommConfigDef {
    char reserved[HCCL_COMM_CONFIG_INFO_BYTES]; /* header, offset 0 */
    uint32_t hcclBufferSize;                    /* MB, offset 24 */
    uint32_t hcclDeterministic;                 /* 0 or 1, offset 28 */
    char hcclCommName[COMM_NAME_MAX_LENGTH];    /* offset 32 (version >= 2) */
    char hcclUdi[UDI_MAX_LENGTH];               /* offset 160 (version >= 3) */
    uint32_t hcclOpExpansionMode;               /* offset 288 (version >= 4) */
    uint32_t hcclRdmaTrafficClass;              /* offset 292 (version >= 5) */
    uint32_t hcclRdmaServiceLevel;              /* offset 296 (version >= 5) */
} HcclCommConfig;

/* HcclCommConfigCapability (HcclGetCommConfigCapability): hccl_types.h. */
typedef enum {
    HCCL_COMM_CONFIG_BUFFER_SIZE = 0,
    HCCL_COMM_CONFIG_DETERMINISTIC = 1,
    HCCL_COMM_CONFIG_COMM_NAME = 2,
    HCCL_COMM_CONFIG_OP_EXPANSION_MODE = 3,
    HCCL_COMM_CONFIG_SUPPORT_INIT_BY_ENV = 4,
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
