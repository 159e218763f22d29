/*
 * hccl-rs: ACL's base types and error codes (acl/acl_base.h), written for
 * hccl-rs's host ACL runtime. Values are CANN's: acl/acl_base.h (e.g.
 * github.com/Ascend/pytorch third_party/acl/inc/acl/acl_base.h) and the
 * runtime codes of acl/error_codes/rt_error_codes.h. CANN declares the
 * codes as `static const int`; here they are macros with the same names.
 */
#ifndef HCCL_RS_ACL_BASE_H_
#define HCCL_RS_ACL_BASE_H_

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;
typedef uint16_t aclFloat16;
typedef void *aclrtStream;
typedef void *aclrtEvent;
typedef void *aclrtContext;

#define ACL_SUCCESS 0

/* caller errors (acl_base.h) */
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_UNINITIALIZE 100001
#define ACL_ERROR_REPEAT_INITIALIZE 100002
#define ACL_ERROR_INVALID_FILE 100003
#define ACL_ERROR_WRITE_FILE 100004
#define ACL_ERROR_INVALID_FILE_SIZE 100005
#define ACL_ERROR_PARSE_FILE 100006
#define ACL_ERROR_FILE_MISSING_ATTR 100007
#define ACL_ERROR_FILE_ATTR_INVALID 100008
#define ACL_ERROR_INVALID_DUMP_CONFIG 100009
#define ACL_ERROR_INVALID_PROFILING_CONFIG 100010
/* resource errors (acl_base.h) */
#define ACL_ERROR_BAD_ALLOC 200000
#define ACL_ERROR_API_NOT_SUPPORT 200001
#define ACL_ERROR_INVALID_DEVICE 200002
#define ACL_ERROR_MEMORY_ADDRESS_UNALIGNED 200003
#define ACL_ERROR_RESOURCE_NOT_MATCH 200004
#define ACL_ERROR_INVALID_RESOURCE_HANDLE 200005
#define ACL_ERROR_FEATURE_UNSUPPORTED 200006
#define ACL_ERROR_PROF_MODULES_UNSUPPORTED 200007
#define ACL_ERROR_STORAGE_OVER_LIMIT 300000
/* internal errors (acl_base.h) */
#define ACL_ERROR_INTERNAL_ERROR 500000
#define ACL_ERROR_FAILURE 500001
#define ACL_ERROR_GE_FAILURE 500002
#define ACL_ERROR_RT_FAILURE 500003
#define ACL_ERROR_DRV_FAILURE 500004
#define ACL_ERROR_PROFILING_FAILURE 500005

/* runtime errors (rt_error_codes.h); the ones this runtime returns */
#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_INVALID_DEVICEID 107001
#define ACL_ERROR_RT_CONTEXT_NULL 107002
#define ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID 107006
#define ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL 107007
#define ACL_ERROR_RT_FEATURE_NOT_SUPPORT 207000
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001
#define ACL_ERROR_RT_MEMORY_FREE 207002
#define ACL_ERROR_RT_INTERNAL_ERROR 507000
#define ACL_ERROR_RT_STREAM_NOT_COMPLETE 507004
#define ACL_ERROR_RT_EVENT_NOT_COMPLETE 507006
#define ACL_ERROR_RT_STREAM_SYNC_TIMEOUT 507046

/* aclDataType (acl_base.h) */
typedef enum {
    ACL_DT_UNDEFINED = -1,
    ACL_FLOAT = 0,
    ACL_FLOAT16 = 1,
    ACL_INT8 = 2,
    ACL_INT32 = 3,
    ACL_UINT8 = 4,
    ACL_INT16 = 6,
    ACL_UINT16 = 7,
    ACL_UINT32 = 8,
    ACL_INT64 = 9,
    ACL_UINT64 = 10,
    ACL_DOUBLE = 11,
    ACL_BOOL = 12,
    ACL_STRING = 13,
    ACL_COMPLEX64 = 16,
    ACL_COMPLEX128 = 17,
    ACL_BF16 = 27
} aclDataType;

/* The last failure message of this thread (empty if none). */
extern const char *aclGetRecentErrMsg(void);

#ifdef __cplusplus
}
#endif
#endif /* HCCL_RS_ACL_BASE_H_ */
