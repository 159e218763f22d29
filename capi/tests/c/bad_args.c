/* Every bad argument gets its error code (and a log line), never a crash:
 * HCCL's HCCL_E_PTR / HCCL_E_PARA / HCCL_E_NOT_SUPPORT and ACL's codes as
 * CANN gives them. Two ranks of one process (HcclCommInitAll). At the end,
 * ranks that call different collectives: the op fails on its stream, and
 * aclrtSynchronizeStream and HcclGetCommAsyncError say so. With
 * HCCL_BACKEND=ascend, only that no communicator is made. */
#include "common.h"

#define EXPECT_CODE(call, want) \
    do { \
        long got_ = (long)(call); \
        EXPECT(got_ == (long)(want), "%s returned %ld, want %ld", #call, got_, (long)(want)); \
    } while (0)

int main(void)
{
    int32_t devices[2] = {0, 1};
    HcclComm comms[2], stale;
    aclrtStream streams[2];
    void *a, *b, *host = malloc(64), *freed;
    float hostf[16];
    int32_t dev;
    uint32_t n;
    HcclRootInfo root;
    HcclCommConfig config;
    HcclResult async;
    char name[COMM_NAME_MAX_LENGTH];
    aclrtEvent ev;
    float ms;
    HcclSendRecvItem item;
    uint64_t counts[2] = {1, 1}, displs[2] = {0, 1};
    const aclError none = ACL_SUCCESS;

    /* HCCL_BACKEND=ascend: this library's ranks run over TCP or on the
     * simulator, so no communicator is made, and the message says so. */
    if (getenv("HCCL_BACKEND") && strcmp(getenv("HCCL_BACKEND"), "ascend") == 0) {
        EXPECT_CODE(HcclCommInitAll(2, devices, comms), HCCL_E_NOT_SUPPORT);
        printf("bad_args: %s\n", aclGetRecentErrMsg());
        free(host);
        return failures ? 1 : 0;
    }

    /* HCCL_HOST_DEVICES=0: a host without devices. */
    if (getenv("HCCL_HOST_DEVICES") && strcmp(getenv("HCCL_HOST_DEVICES"), "0") == 0) {
        EXPECT_CODE(aclrtGetDeviceCount(&n), none);
        EXPECT(n == 0, "no devices, got %u", n);
        EXPECT_CODE(aclrtSetDevice(0), ACL_ERROR_INVALID_DEVICE);
        free(host);
        printf("bad_args: no devices\n");
        return failures ? 1 : 0;
    }

    /* ACL */
    EXPECT_CODE(aclrtGetDeviceCount(&n), none); /* works before aclInit (hccl_test calls it first) */
    EXPECT(n == 8, "8 devices by default, got %u", n);
    EXPECT_CODE(aclInit(NULL), none);
    EXPECT_CODE(aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
    EXPECT_CODE(aclrtGetDevice(&dev), ACL_ERROR_RT_CONTEXT_NULL);
    EXPECT_CODE(aclrtSetDevice(8), ACL_ERROR_INVALID_DEVICE);
    EXPECT_CODE(aclrtSetDevice(-1), ACL_ERROR_INVALID_DEVICE);
    EXPECT_CODE(aclrtSetDevice(1), none);
    EXPECT_CODE(aclrtGetDevice(&dev), none);
    EXPECT(dev == 1, "current device %d", dev);
    EXPECT(strncmp(aclrtGetSocName(), "Ascend910B", 10) == 0, "SoC %s", aclrtGetSocName());
    EXPECT_CODE(aclrtGetDeviceCount(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtMalloc(NULL, 8, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtMalloc(&a, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtMalloc(&a, 8, (aclrtMemMallocPolicy)99), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtMalloc(&a, (size_t)1 << 40, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_MEMORY_ALLOCATION);
    EXPECT_CODE(aclrtMalloc(&a, 64, ACL_MEM_MALLOC_HUGE_FIRST | ACL_MEM_TYPE_HIGH_BAND_WIDTH), none);
    EXPECT_CODE(aclrtMalloc(&b, 64, ACL_MEM_MALLOC_HUGE_FIRST), none);
    EXPECT_CODE(aclrtMalloc(&freed, 64, ACL_MEM_MALLOC_HUGE_FIRST), none);
    EXPECT_CODE(aclrtFree(freed), none);
    EXPECT_CODE(aclrtFree(freed), ACL_ERROR_RT_MEMORY_FREE);            /* double free */
    EXPECT_CODE(aclrtFree(host), ACL_ERROR_RT_MEMORY_FREE);             /* not ours */
    EXPECT_CODE(aclrtFree((char *)a + 8), ACL_ERROR_RT_MEMORY_FREE);    /* inside one */
    EXPECT_CODE(aclrtFreeHost(a), ACL_ERROR_RT_MEMORY_FREE);            /* wrong kind */
    EXPECT_CODE(aclrtFree(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtMemcpy(a, 64, hostf, 65, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM); /* count > destMax */
    EXPECT_CODE(aclrtMemcpy(a, 128, hostf, 65, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM); /* past the allocation */
    EXPECT_CODE(aclrtMemcpy(host, 64, hostf, 64, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM); /* dst not device memory */
    EXPECT_CODE(aclrtMemcpy(a, 64, hostf, 64, (aclrtMemcpyKind)9), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtMemcpy(a, 64, NULL, 64, ACL_MEMCPY_HOST_TO_DEVICE), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtMemcpy(NULL, 0, NULL, 0, ACL_MEMCPY_HOST_TO_DEVICE), none); /* count 0 */
    EXPECT_CODE(aclrtMemcpy(b, 64, a, 64, ACL_MEMCPY_DEVICE_TO_DEVICE), none);
    EXPECT_CODE(aclrtMemcpy(host, 64, a, 64, ACL_MEMCPY_DEFAULT), none);
    EXPECT_CODE(aclrtMemset(freed, 8, 0, 8), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtMemset(a, 8, 0, 9), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtSynchronizeStream((aclrtStream)0x1234), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtDestroyStream((aclrtStream)0x1234), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtCreateEvent(NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtCreateEvent(&ev), none);
    EXPECT_CODE(aclrtEventElapsedTime(&ms, ev, ev), ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID); /* never recorded */
    EXPECT_CODE(aclrtRecordEvent((aclrtEvent)0x42, NULL), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtDestroyEvent(ev), none);
    EXPECT_CODE(aclrtDestroyEvent(ev), ACL_ERROR_INVALID_PARAM);
    EXPECT_CODE(aclrtReserveMemAddress(&a, 64, 0, NULL, 1), ACL_ERROR_API_NOT_SUPPORT);
    EXPECT(aclFloat16ToFloat(aclFloatToFloat16(1.5f)) == 1.5f, "fp16 round trip");
    EXPECT(aclDataTypeSize(ACL_BF16) == 2 && aclDataTypeSize(ACL_DOUBLE) == 8, "aclDataTypeSize");
    EXPECT(strlen(aclGetRecentErrMsg()) > 0, "aclGetRecentErrMsg after a failure");

    /* HCCL setup */
    EXPECT_CODE(aclrtCreateStream(&streams[0]), none);
    EXPECT_CODE(aclrtCreateStream(&streams[1]), none);
    EXPECT_CODE(HcclCommInitAll(0, devices, comms), HCCL_E_PARA);
    EXPECT_CODE(HcclCommInitAll(2, NULL, comms), HCCL_E_PTR);
    {
        int32_t twice[2] = {3, 3}, far[2] = {0, 9};
        EXPECT_CODE(HcclCommInitAll(2, twice, comms), HCCL_E_PARA);
        EXPECT_CODE(HcclCommInitAll(2, far, comms), HCCL_E_PARA);
    }
    MUST(HcclCommInitAll(2, devices, comms), HCCL_SUCCESS);
    EXPECT_CODE(HcclGetCommName(comms[0], name), HCCL_SUCCESS);
    EXPECT(strlen(name) > 0, "comm name");
    EXPECT_CODE(HcclGetCommName(comms[0], NULL), HCCL_E_PTR);
    EXPECT_CODE(HcclGetRankSize(comms[0], NULL), HCCL_E_PTR);
    EXPECT_CODE(HcclGetRankSize(NULL, &n), HCCL_E_PTR);
    EXPECT_CODE(HcclGetRankSize((HcclComm)0x77, &n), HCCL_E_PARA);   /* unknown handle */
    EXPECT_CODE(HcclGetRankSize((HcclComm)streams[0], &n), HCCL_E_PARA); /* a stream's handle */
    EXPECT(strcmp(HcclGetErrorString(HCCL_E_PARA), "parameter error") == 0, "error string");
    EXPECT(strcmp(HcclGetErrorString((HcclResult)99), "unknow error") == 0, "unknown code's string");
    EXPECT_CODE(HcclGetRootInfo(NULL), HCCL_E_PTR);

    /* collectives' arguments */
    EXPECT_CODE(HcclAllReduce(a, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, NULL, streams[0]), HCCL_E_PTR);
    EXPECT_CODE(HcclAllReduce(a, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], NULL), HCCL_E_PTR);
    EXPECT_CODE(HcclAllReduce(a, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], (aclrtStream)0x99), HCCL_E_PARA);
    EXPECT_CODE(HcclAllReduce(a, b, 4, (HcclDataType)99, HCCL_REDUCE_SUM, comms[0], streams[0]), HCCL_E_NOT_SUPPORT);
    EXPECT_CODE(HcclAllReduce(a, b, 4, HCCL_DATA_TYPE_INT128, HCCL_REDUCE_SUM, comms[0], streams[0]), HCCL_E_NOT_SUPPORT);
    EXPECT_CODE(HcclAllReduce(a, b, 4, HCCL_DATA_TYPE_FP32, (HcclReduceOp)7, comms[0], streams[0]), HCCL_E_NOT_SUPPORT);
    EXPECT_CODE(HcclAllReduce(a, b, 4, HCCL_DATA_TYPE_INT16, HCCL_REDUCE_PROD, comms[0], streams[0]), HCCL_E_NOT_SUPPORT);
    EXPECT_CODE(HcclAllReduce(NULL, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], streams[0]), HCCL_E_PTR);
    EXPECT_CODE(HcclAllReduce(a, NULL, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], streams[0]), HCCL_E_PTR);
    EXPECT_CODE(HcclAllReduce(host, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], streams[0]), HCCL_E_PARA); /* not device memory */
    EXPECT_CODE(HcclAllReduce(freed, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], streams[0]), HCCL_E_PARA); /* freed */
    EXPECT_CODE(HcclAllReduce(a, b, 17, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], streams[0]), HCCL_E_PARA); /* 68 bytes > 64 */
    EXPECT_CODE(HcclAllReduce((char *)a + 2, b, 2, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], streams[0]), HCCL_E_PARA); /* misaligned */
    EXPECT_CODE(HcclAllReduce(NULL, NULL, 0, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], streams[0]), HCCL_SUCCESS); /* count 0 */
    EXPECT_CODE(HcclBroadcast(a, 4, HCCL_DATA_TYPE_FP32, 2, comms[0], streams[0]), HCCL_E_PARA); /* root out of range */
    EXPECT_CODE(HcclReduce(a, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, 5, comms[0], streams[0]), HCCL_E_PARA);
    EXPECT_CODE(HcclAllGather(a, b, 9, HCCL_DATA_TYPE_FP32, comms[0], streams[0]), HCCL_E_PARA); /* 2 x 36 bytes > 64 */
    EXPECT_CODE(HcclAlltoAll(a, 2, HCCL_DATA_TYPE_FP32, b, 3, HCCL_DATA_TYPE_FP32, comms[0], streams[0]), HCCL_E_PARA);
    EXPECT_CODE(HcclAlltoAllV(a, counts, displs, HCCL_DATA_TYPE_FP32, a, counts, displs, HCCL_DATA_TYPE_FP32, comms[0], streams[0]), HCCL_E_PARA);
    EXPECT_CODE(HcclAlltoAllV(a, NULL, displs, HCCL_DATA_TYPE_FP32, b, counts, displs, HCCL_DATA_TYPE_FP32, comms[0], streams[0]), HCCL_E_PTR);
    EXPECT_CODE(HcclAllGatherV(a, 1, b, counts, NULL, HCCL_DATA_TYPE_FP32, comms[0], streams[0]), HCCL_E_PTR);
    EXPECT_CODE(HcclSend(a, 4, HCCL_DATA_TYPE_FP32, 0, comms[0], streams[0]), HCCL_E_PARA); /* to itself */
    EXPECT_CODE(HcclRecv(a, 4, HCCL_DATA_TYPE_FP32, 2, comms[0], streams[0]), HCCL_E_PARA);
    item.sendRecvType = (HcclSendRecvType)5;
    item.buf = a;
    item.count = 1;
    item.dataType = HCCL_DATA_TYPE_FP32;
    item.remoteRank = 1;
    EXPECT_CODE(HcclBatchSendRecv(&item, 1, comms[0], streams[0]), HCCL_E_PARA);
    EXPECT_CODE(HcclBatchSendRecv(&item, 0, comms[0], streams[0]), HCCL_E_PARA);
    EXPECT_CODE(HcclBatchSendRecv(NULL, 1, comms[0], streams[0]), HCCL_E_PTR);
    EXPECT_CODE(HcclGroupEnd(), HCCL_E_PARA);
    EXPECT_CODE(HcclCommSuspend(comms[0]), HCCL_E_NOT_SUPPORT);
    /* rankIds NULL with a subCommId (subcomm.c has the rest) */
    EXPECT_CODE(HcclCreateSubCommConfig(&comms[0], 1, NULL, 0, 0, NULL, &stale), HCCL_E_PARA);

    /* init arguments */
    memset(&root, 0, sizeof root);
    strcpy(root.internal, "invalid");
    EXPECT_CODE(HcclCommInitRootInfo(2, &root, 0, &stale), HCCL_E_PARA); /* not a root info */
    EXPECT_CODE(HcclCommInitRootInfo(2, NULL, 0, &stale), HCCL_E_PTR);
    EXPECT_CODE(HcclCommInitRootInfo(2, &root, 2, &stale), HCCL_E_PARA); /* rank >= nRanks */
    EXPECT_CODE(HcclCommInitRootInfo(0, &root, 0, &stale), HCCL_E_PARA);
    memset(&config, 0, sizeof config);
    EXPECT_CODE(HcclCommInitRootInfoConfig(2, &root, 0, &config, &stale), HCCL_E_PARA); /* no HcclCommConfigInit */
    HcclCommConfigInit(&config);
    config.hcclDeterministic = 2;
    EXPECT_CODE(HcclCommInitRootInfoConfig(2, &root, 0, &config, &stale), HCCL_E_PARA);
    EXPECT_CODE(HcclCommInitClusterInfo(NULL, 0, &stale), HCCL_E_PTR);
    EXPECT_CODE(HcclCommInitClusterInfo("/nonexistent/rank_table.json", 0, &stale), HCCL_E_OPEN_FILE_FAILURE);

    /* Ranks that call different collectives: accepted at the call (each
     * is fine on its own), failed on the stream. */
    EXPECT_CODE(HcclAllReduce(a, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[0], streams[0]), HCCL_SUCCESS);
    EXPECT_CODE(HcclAllReduce(a, b, 8, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[1], streams[1]), HCCL_SUCCESS);
    EXPECT_CODE(aclrtSynchronizeStream(streams[0]), ACL_ERROR_RT_INTERNAL_ERROR);
    EXPECT_CODE(aclrtSynchronizeStream(streams[1]), ACL_ERROR_RT_INTERNAL_ERROR);
    EXPECT_CODE(aclrtSynchronizeStream(streams[0]), none); /* reported once */
    EXPECT_CODE(HcclGetCommAsyncError(comms[0], &async), HCCL_SUCCESS);
    EXPECT(async == HCCL_E_REMOTE, "rank 0's async error %d, want HCCL_E_REMOTE (mismatch)", (int)async);
    EXPECT_CODE(HcclGetCommAsyncError(comms[1], NULL), HCCL_E_PTR);

    stale = comms[1];
    EXPECT_CODE(HcclCommDestroy(comms[0]), HCCL_SUCCESS);
    EXPECT_CODE(HcclCommDestroy(comms[1]), HCCL_SUCCESS);
    EXPECT_CODE(HcclCommDestroy(stale), HCCL_E_PARA); /* destroyed */
    EXPECT_CODE(HcclAllReduce(a, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, stale, streams[1]), HCCL_E_PARA);
    EXPECT_CODE(aclrtFree(a), none);
    EXPECT_CODE(aclrtFree(b), none);
    EXPECT_CODE(aclrtDestroyStream(streams[0]), none);
    EXPECT_CODE(aclrtDestroyStream(streams[1]), none);
    EXPECT_CODE(aclrtSynchronizeStream(streams[1]), ACL_ERROR_INVALID_PARAM); /* destroyed */
    EXPECT_CODE(aclFinalize(), none);
    EXPECT_CODE(aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
    free(host);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("bad_args: every bad argument got its code\n");
    return 0;
}
