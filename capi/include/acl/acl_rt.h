/*
 * hccl-rs: ACL's runtime API (acl/acl_rt.h) on the host: devices, contexts,
 * streams, events and memory. Declarations and enum values follow CANN's
 * acl/acl_rt.h (e.g. github.com/Ascend/pytorch
 * third_party/acl/inc/acl/acl_rt.h; CANN 8.1.RC1's include/acl/acl_rt.h in
 * github.com/leideng/CANN-8.1.RC1). Device memory is host memory here,
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
    ACL_MEM_MALLOC_HUGE1G_ONLY = 6,
    ACL_MEM_MALLOC_HUGE1G_ONLY_P2P = 7,
    ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100,
    ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000,
    ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000
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
    ACL_HBM_MEM_P2P_NORMAL = 9,
    ACL_HBM_MEM_HUGE1G = 10,
    ACL_HBM_MEM_P2P_HUGE1G = 11
} aclrtMemAttr;

/* Virtual memory (hccl_test -z 1): declared for programs that reference
 * them; the functions return ACL_ERROR_API_NOT_SUPPORT here. */
typedef enum aclrtMemHandleType {
    ACL_MEM_HANDLE_TYPE_NONE = 0
} aclrtMemHandleType;

typedef enum aclrtMemAllocationType {
    ACL_MEM_ALLOCATION_TYPE_PINNED = 0
} aclrtMemAllocationType;

typedef enum aclrtMemLocationType {
    ACL_MEM_LOCATION_TYPE_HOST = 0,
    ACL_MEM_LOCATION_TYPE_DEVICE = 1
} aclrtMemLocationType;

typedef struct aclrtMemLocation {
    uint32_t id;
    aclrtMemLocationType type;
} aclrtMemLocation;

typedef struct aclrtPhysicalMemProp {
    aclrtMemHandleType handleType;
    aclrtMemAllocationType allocationType;
    aclrtMemAttr memAttr;
    aclrtMemLocation location;
    uint64_t reserve;
} aclrtPhysicalMemProp;

typedef enum aclrtMemGranularityOptions {
    ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
    ACL_RT_MEM_ALLOC_GRANULARITY_UNDEF = 0xFFFF
} aclrtMemGranularityOptions;

typedef enum aclrtCallbackBlockType {
    ACL_CALLBACK_NO_BLOCK = 0,
    ACL_CALLBACK_BLOCK = 1
} aclrtCallbackBlockType;

typedef void (*aclrtCallback)(void *userData);

typedef enum aclrtEventWaitStatus {
    ACL_EVENT_WAIT_STATUS_COMPLETE = 0,
    ACL_EVENT_WAIT_STATUS_NOT_READY = 1,
    ACL_EVENT_WAIT_STATUS_RESERVED = 0xFFFF
} aclrtEventWaitStatus;

typedef enum aclrtDeviceStatus {
    ACL_RT_DEVICE_STATUS_NORMAL = 0,
    ACL_RT_DEVICE_STATUS_ABNORMAL = 1,
    ACL_RT_DEVICE_STATUS_END = 0xFFFF
} aclrtDeviceStatus;

typedef enum aclrtLastErrLevel {
    ACL_RT_THREAD_LEVEL = 0
} aclrtLastErrLevel;

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
#define ACL_EVENT_EXTERNAL 0x00000020u
/* aclrtCreateStreamWithConfig */
#define ACL_STREAM_FAST_LAUNCH 0x00000001u
#define ACL_STREAM_FAST_SYNC 0x00000002u

/* devices and contexts */
extern aclError aclrtSetDevice(int32_t deviceId);
extern aclError aclrtResetDevice(int32_t deviceId);
extern aclError aclrtGetDevice(int32_t *deviceId);
extern aclError aclrtGetDeviceCount(uint32_t *count);
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
extern aclError aclrtResetDeviceForce(int32_t deviceId);
extern aclError aclrtSynchronizeDeviceWithTimeout(int32_t timeout);
extern aclError aclrtQueryDeviceStatus(int32_t deviceId, aclrtDeviceStatus *deviceStatus);
extern aclError aclrtDeviceDisablePeerAccess(int32_t peerDeviceId);
extern aclError aclrtSetOpWaitTimeout(uint32_t timeout);
extern aclError aclrtSetOpExecuteTimeOut(uint32_t timeout);
extern aclError aclrtGetLastError(aclrtLastErrLevel level);
extern aclError aclrtPeekAtLastError(aclrtLastErrLevel level);

/* memory */
extern aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
extern aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
extern aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
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
/* not supported (ACL_ERROR_API_NOT_SUPPORT) */
extern aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr,
    uint64_t flags);
extern aclError aclrtReleaseMemAddress(void *virPtr);
extern aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size, const aclrtPhysicalMemProp *prop,
    uint64_t flags);
extern aclError aclrtFreePhysical(aclrtDrvMemHandle handle);
extern aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle, uint64_t flags);
extern aclError aclrtUnmapMem(void *virPtr);
extern aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop, aclrtMemGranularityOptions option,
    size_t *granularity);

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
extern aclError aclrtStreamGetId(aclrtStream stream, int32_t *streamId);
/* fn(userData) runs on the stream's thread when the stream reaches it
 * (either block type). */
extern aclError aclrtLaunchCallback(aclrtCallback fn, void *userData, aclrtCallbackBlockType blockType,
    aclrtStream stream);

/* events */
extern aclError aclrtCreateEvent(aclrtEvent *event);
extern aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag);
extern aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag);
extern aclError aclrtDestroyEvent(aclrtEvent event);
extern aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream);
extern aclError aclrtResetEvent(aclrtEvent event, aclrtStream stream);
extern aclError aclrtQueryEvent(aclrtEvent event, aclrtEventStatus *status);
extern aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status);
extern aclError aclrtQueryEventWaitStatus(aclrtEvent event, aclrtEventWaitStatus *status);
extern aclError aclrtSynchronizeEvent(aclrtEvent event);
extern aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout);
/* Microseconds since an arbitrary start, when the stream reached it. */
extern aclError aclrtEventGetTimestamp(aclrtEvent event, uint64_t *timestamp);
extern aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent);

#ifdef __cplusplus
}
#endif
#endif /* HCCL_RS_ACL_RT_H_ */
