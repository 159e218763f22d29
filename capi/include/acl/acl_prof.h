/*
 * hccl-rs: ACL's profiling API (acl/acl_prof.h). Accepted and recorded
 * nowhere: HCCL_PROFILING_ENABLE=1 gives hccl-rs's own per-op records.
 * Declarations follow CANN's acl/acl_prof.h (e.g. github.com/Ascend/pytorch
 * third_party/acl/inc/acl/acl_prof.h; CANN 8.1.RC1's include/acl/acl_prof.h).
 */
#ifndef HCCL_RS_ACL_PROF_H_
#define HCCL_RS_ACL_PROF_H_

#include <stdint.h>
#include <stddef.h>
#include "acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* data types of aclprofCreateConfig's dataTypeConfig (acl_prof.h) */
#define ACL_PROF_ACL_API 0x00000001ULL
#define ACL_PROF_TASK_TIME 0x00000002ULL
#define ACL_PROF_AICORE_METRICS 0x00000004ULL
#define ACL_PROF_AICPU 0x00000008ULL
#define ACL_PROF_L2CACHE 0x00000010ULL
#define ACL_PROF_HCCL_TRACE 0x00000020ULL
#define ACL_PROF_TRAINING_TRACE 0x00000040ULL
#define ACL_PROF_MSPROFTX 0x00000080ULL
#define ACL_PROF_RUNTIME_API 0x00000100ULL
#define ACL_PROF_TASK_TIME_L0 0x00000800ULL
#define ACL_PROF_TASK_MEMORY 0x00001000ULL
#define ACL_PROF_OP_ATTR 0x00004000ULL

typedef enum {
    ACL_AICORE_ARITHMETIC_UTILIZATION = 0,
    ACL_AICORE_PIPE_UTILIZATION = 1,
    ACL_AICORE_MEMORY_BANDWIDTH = 2,
    ACL_AICORE_L0B_AND_WIDTH = 3,
    ACL_AICORE_RESOURCE_CONFLICT_RATIO = 4,
    ACL_AICORE_MEMORY_UB = 5,
    ACL_AICORE_L2_CACHE = 6,
    ACL_AICORE_PIPE_EXECUTE_UTILIZATION = 7,
    ACL_AICORE_MEMORY_ACCESS = 8,
    ACL_AICORE_NONE = 0xFF
} aclprofAicoreMetrics;

typedef struct aclprofConfig aclprofConfig;
typedef struct aclprofAicoreEvents aclprofAicoreEvents;

extern aclError aclprofInit(const char *profilerResultPath, size_t length);
extern aclError aclprofFinalize(void);
extern aclprofConfig *aclprofCreateConfig(uint32_t *deviceIdList, uint32_t deviceNums,
    aclprofAicoreMetrics aicoreMetrics, const aclprofAicoreEvents *aicoreEvents, uint64_t dataTypeConfig);
extern aclError aclprofDestroyConfig(const aclprofConfig *profilerConfig);
extern aclError aclprofStart(const aclprofConfig *profilerConfig);
extern aclError aclprofStop(const aclprofConfig *profilerConfig);

#ifdef __cplusplus
}
#endif
#endif /* HCCL_RS_ACL_PROF_H_ */
