/* The headers' ABI facts, checked when this file compiles (as C99 and as
 * C++11): sizes, offsets and enum values that must equal CANN 8.1.RC1's
 * (cann_headers research: HcclRootInfo 4108 bytes, HcclCommConfig 300,
 * HcclSendRecvItem 32, aclrtPhysicalMemProp 32). */
#include <stddef.h>
#include "hccl/hccl.h"
#include "hccl/hccl_types.h"
#include "acl/acl.h"
#include "acl/acl_prof.h"

#ifdef __cplusplus
#define CHECK(cond, what) static_assert(cond, what)
#else
#define CHECK(cond, what) _Static_assert(cond, what)
#endif

CHECK(sizeof(HcclRootInfo) == 4108, "HcclRootInfo is 4108 bytes");
CHECK(HCCL_ROOT_INFO_BYTES == 4108, "HCCL_ROOT_INFO_BYTES");
CHECK(sizeof(HcclCommConfig) == 300, "HcclCommConfig (version 5) is 300 bytes");
CHECK(offsetof(HcclCommConfig, hcclBufferSize) == 24, "config header is 24 bytes");
CHECK(offsetof(HcclCommConfig, hcclCommName) == 32, "hcclCommName at 32");
CHECK(offsetof(HcclCommConfig, hcclRdmaServiceLevel) == 296, "hcclRdmaServiceLevel at 296");
CHECK(sizeof(HcclSendRecvItem) == 32, "HcclSendRecvItem is 32 bytes");
CHECK(offsetof(HcclSendRecvItem, dataType) == 24, "HcclSendRecvItem.dataType at 24");
CHECK(sizeof(HcclResult) == 4 && sizeof(HcclDataType) == 4 && sizeof(HcclReduceOp) == 4, "enums are ints");
CHECK(sizeof(union HcclConfigValue) == 4, "HcclConfigValue");
CHECK(sizeof(aclrtPhysicalMemProp) == 32, "aclrtPhysicalMemProp is 32 bytes");
CHECK(HCCL_E_REMOTE == 21 && HCCL_E_SUSPENDING == 22 && HCCL_E_RESERVED == 23, "HcclResult");
CHECK(HCCL_DATA_TYPE_BFP16 == 11 && HCCL_DATA_TYPE_INT128 == 12 && HCCL_DATA_TYPE_RESERVED == 255, "HcclDataType");
CHECK(HCCL_REDUCE_MIN == 3 && HCCL_REDUCE_RESERVED == 255, "HcclReduceOp");
CHECK(HCCL_COMM_CONFIG_VERSION == 5 && HCCL_COMM_CONFIG_RESERVED == 5, "config version 5");
CHECK(ACL_MEMCPY_DEVICE_TO_HOST == 2 && ACL_MEMCPY_INTER_DEVICE_TO_DEVICE == 7, "aclrtMemcpyKind");
CHECK(ACL_ERROR_RT_MEMORY_ALLOCATION == 207001 && ACL_ERROR_INVALID_PARAM == 100000, "aclError");
CHECK(ACL_HBM_MEM_HUGE == 4 && ACL_EVENT_RECORDED_STATUS_COMPLETE == 1, "ACL enums");

int abi_probe_ok(void);
int abi_probe_ok(void)
{
    HcclCommConfig c;
    HcclCommConfigInit(&c);
    return c.hcclBufferSize == HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET;
}
