/*
 * hccl-rs: ACL's runtime API (acl/acl_rt.h) on the host: devices, contexts,
 * streams, events and memory. Declarations and enum values follow CANN's
 * acl/acl_rt.h (e.g. github.com/Ascend/pytorch
 * third_party/acl/inc/acl/acl_rt.h). Device memory is host memory here,
 * kept in a registry; a stream is a FIFO run by a thread of its own.
 */
#ifndef HCCL_RS_ACL_RT_H_
#define HCCL_RS_ACL_RT_H_

#include <stdint.h>
#include <stddef.h>
#include "acl_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *aclrtDrvMemHandle;

typedef enum aclrtRunMode {
    ACL_DEVICE = 0,
    ACL_HOST = 1
} aclrtRunMode;

typedef enum aclrtMemcpyKind {
    ACL_MEMCPY_HOST_TO_HOST = 0,
    ACL_MEMCPY_HOST_TO_DEVICE = 1,
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
    ACL_MEMCPY_DEVICE_TO_DEVICE = 3,
    ACL_MEMCPY_DEFAULT = 4,
    ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE = 5,
    ACL_MEMCPY_INNER_DEVICE_TO_DEVICE = 6,
    ACL_MEMCPY_INTER_DEVICE_TO_DEVICE = 7
} aclrtMemcpyKind;

typedef enum aclrtMemMallocPolicy {
    ACL_MEM_MALLOC_HUGE_FIRST = 0,
    ACL_MEM_MALLOC_HUGE_ONLY = 1,
    ACL_MEM_MALLOC_NORMAL_ONLY = 2,
    ACL_MEM_MALLOC_HUGE_FIRST_P2P = 3,
    ACL_MEM_MALLOC_HUGE_ONLY_P2P = 4,
    ACL_MEM_MALLOC_NORMAL_ONLY_P2P = 5,
    ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100,
    ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000
} aclrtMemMallocPolicy;

typedef enum aclrtMemAttr {
    ACL_DDR_MEM = 0,
    ACL_HBM_MEM = 1,
    ACL_DDR_MEM_HUGE = 2,
    ACL_DDR_MEM_NORMAL = 3,
    ACL_HBM_MEM_HUGE = 4,
    ACL_HBM_MEM_NORMAL = 5,
    ACL_DDR_MEM_P2P_HUGE = 6,
    ACL_DDR_MEM_P2P_NORMAL = 7,
    ACL_HBM_MEM_P2P_HUGE = 8,
    ACL_HBM_MEM_P2P_NORMAL = 9
} aclrtMemAttr;

typedef enum aclrtEventStatus {
    ACL_EVENT_STATUS_COMPLETE = 0,
    ACL_EVENT_STATUS_NOT_READY = 1,
    ACL_EVENT_STATUS_RESERVED = 2
} aclrtEventStatus;

typedef enum aclrtEventRecordedStatus {
    ACL_EVENT_RECORDED_STATUS_NOT_READY = 0,
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1
} aclrtEventRecordedStatus;

typedef enum aclrtStreamStatus {
    ACL_STREAM_STATUS_COMPLETE = 0,
    ACL_STREAM_STATUS_NOT_READY = 1,
    ACL_STREAM_STATUS_RESERVED = 0xFFFF
} aclrtStreamStatus;

typedef enum aclrtFloatOverflowMode {
    ACL_RT_OVERFLOW_MODE_SATURATION = 0,
    ACL_RT_OVERFLOW_MODE_INFNAN = 1,
    ACL_RT_OVERFLOW_MODE_UNDEF = 2
} aclrtFloatOverflowMode;

/* aclrtSetStreamFailureMode */
#define ACL_CONTINUE_ON_FAILURE 0x00000000u
#define ACL_STOP_ON_FAILURE 0x00000001u
/* aclrtCreateEventWithFlag */
#define ACL_EVENT_SYNC 0x00000001u
#define ACL_EVENT_CAPTURE_STREAM_PROGRESS 0x00000002u
#define ACL_EVENT_TIME_LINE 0x00000008u

/* devices and contexts */
extern aclError aclrtSetDevice(int32_t deviceId);
extern aclError aclrtResetDevice(int32_t deviceId);
extern aclError aclrtGetDevice(int32_t *deviceId);
extern aclError aclrtGetDeviceCount(uint32_t *count);
extern const char *aclrtGetSocName(void);
extern aclError aclrtGetRunMode(aclrtRunMode *runMode);
extern aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode mode);
extern aclError aclrtGetDeviceSatMode(aclrtFloatOverflowMode *mode);
extern aclError aclrtSynchronizeDevice(void);
extern aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId);
extern aclError aclrtDestroyContext(aclrtContext context);
extern aclError aclrtSetCurrentContext(aclrtContext context);
extern aclError aclrtGetCurrentContext(aclrtContext *context);
extern aclError aclrtDeviceCanAccessPeer(int32_t *canAccessPeer, int32_t deviceId, int32_t peerDeviceId);
extern aclError aclrtDeviceEnablePeerAccess(int32_t peerDeviceId, uint32_t flags);
extern aclError aclrtGetVersion(int32_t *majorVersion, int32_t *minorVersion, int32_t *patchVersion);

/* memory */
extern aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
extern aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
extern aclError aclrtFree(void *devPtr);
extern aclError aclrtMallocHost(void **hostPtr, size_t size);
extern aclError aclrtFreeHost(void *hostPtr);
extern aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count);
extern aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count,
    aclrtStream stream);
extern aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
    aclrtMemcpyKind kind);
extern aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
    aclrtMemcpyKind kind, aclrtStream stream);
extern aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total);

/* streams */
extern aclError aclrtCreateStream(aclrtStream *stream);
extern aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag);
extern aclError aclrtDestroyStream(aclrtStream stream);
extern aclError aclrtDestroyStreamForce(aclrtStream stream);
extern aclError aclrtSynchronizeStream(aclrtStream stream);
extern aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout);
extern aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status);
extern aclError aclrtSetStreamFailureMode(aclrtStream stream, uint64_t mode);
extern aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event);

/* events */
extern aclError aclrtCreateEvent(aclrtEvent *event);
extern aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag);
extern aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag);
extern aclError aclrtDestroyEvent(aclrtEvent event);
extern aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
extern aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream);
extern aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus *status);
extern aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status);
extern aclError aclrtSynchronizeEvent(aclrtEvent event);
extern aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent);

#ifdef __cplusplus
}
#endif
#endif /* HCCL_RS_ACL_RT_H_ */
