/* Streams and events: on each of 2 ranks, an AllReduce on stream A
 * between two events, then stream B waits for A's second event and
 * copies the result and runs an AllGather of it; only B is synchronized,
 * so B's results prove the order. Events give non-negative elapsed
 * times in order; a callback runs on its stream. */
#include "common.h"

#define R 2
#define COUNT 65536 /* fp32 elements: 256 KiB */

static int called[R];
static void mark(void *p) { *(int *)p = 1; }
static double v(int r, size_t i) { return (double)((r + i) % 3 + 1); }

int main(void)
{
    int32_t devices[R] = {0, 1};
    HcclComm comms[R];
    aclrtStream a[R], b[R];
    aclrtEvent e0[R], e1[R], e2[R];
    void *send[R], *sum[R], *copy[R], *gathered[R];
    int r, q;
    size_t i;
    const HcclDataType t = HCCL_DATA_TYPE_FP32;
    MUST(aclInit(NULL), ACL_SUCCESS);
    for (r = 0; r < R; r++) {
        MUST(aclrtCreateStream(&a[r]), ACL_SUCCESS);
        MUST(aclrtCreateStream(&b[r]), ACL_SUCCESS);
        MUST(aclrtCreateEvent(&e0[r]), ACL_SUCCESS);
        MUST(aclrtCreateEvent(&e1[r]), ACL_SUCCESS);
        MUST(aclrtCreateEventWithFlag(&e2[r], ACL_EVENT_TIME_LINE), ACL_SUCCESS);
        send[r] = dev_fill(t, COUNT, v, r);
        sum[r] = dev_alloc(t, COUNT);
        copy[r] = dev_alloc(t, COUNT);
        gathered[r] = dev_alloc(t, R * COUNT);
    }
    MUST(HcclCommInitAll(R, devices, comms), HCCL_SUCCESS);
    for (r = 0; r < R; r++) {
        MUST(aclrtRecordEvent(e0[r], a[r]), ACL_SUCCESS);
        MUST(HcclAllReduce(send[r], sum[r], COUNT, t, HCCL_REDUCE_SUM, comms[r], a[r]), HCCL_SUCCESS);
        MUST(aclrtRecordEvent(e1[r], a[r]), ACL_SUCCESS);
        MUST(aclrtStreamWaitEvent(b[r], e1[r]), ACL_SUCCESS);
        MUST(aclrtMemcpyAsync(copy[r], COUNT * 4, sum[r], COUNT * 4, ACL_MEMCPY_DEVICE_TO_DEVICE, b[r]), ACL_SUCCESS);
        MUST(HcclAllGather(copy[r], gathered[r], COUNT, t, comms[r], b[r]), HCCL_SUCCESS);
        MUST(aclrtLaunchCallback(mark, &called[r], ACL_CALLBACK_BLOCK, b[r]), ACL_SUCCESS);
        MUST(aclrtRecordEvent(e2[r], b[r]), ACL_SUCCESS);
    }
    for (r = 0; r < R; r++) MUST(aclrtSynchronizeStream(b[r]), ACL_SUCCESS);
    for (r = 0; r < R; r++) {
        aclrtEventRecordedStatus st = ACL_EVENT_RECORDED_STATUS_NOT_READY;
        float t01 = -1, t02 = -1;
        void *h = dev_read(t, gathered[r], R * COUNT);
        for (q = 0; q < R; q++)
            for (i = 0; i < COUNT; i++) {
                double want = v(0, i) + v(1, i);
                if (get(t, h, q * COUNT + i) != want) {
                    EXPECT(0, "rank %d block %d element %zu: got %g want %g", r, q, i, get(t, h, q * COUNT + i), want);
                    q = R;
                    break;
                }
            }
        free(h);
        MUST(aclrtQueryEventStatus(e1[r], &st), ACL_SUCCESS);
        EXPECT(st == ACL_EVENT_RECORDED_STATUS_COMPLETE, "rank %d: A's event is complete once B ran past its wait", r);
        MUST(aclrtEventElapsedTime(&t01, e0[r], e1[r]), ACL_SUCCESS);
        MUST(aclrtEventElapsedTime(&t02, e0[r], e2[r]), ACL_SUCCESS);
        EXPECT(t01 >= 0 && t02 >= t01, "rank %d: elapsed %f ms then %f ms", r, t01, t02);
        EXPECT(called[r] == 1, "rank %d: the callback ran", r);
    }
    for (r = 0; r < R; r++) {
        MUST(aclrtSynchronizeStream(a[r]), ACL_SUCCESS);
        MUST(HcclCommDestroy(comms[r]), HCCL_SUCCESS);
        MUST(aclrtDestroyEvent(e0[r]), ACL_SUCCESS);
        MUST(aclrtDestroyEvent(e1[r]), ACL_SUCCESS);
        MUST(aclrtDestroyEvent(e2[r]), ACL_SUCCESS);
        MUST(aclrtDestroyStream(a[r]), ACL_SUCCESS);
        MUST(aclrtDestroyStream(b[r]), ACL_SUCCESS);
    }
    MUST(aclFinalize(), ACL_SUCCESS);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("streams: ordered by events, timed, called back: ok\n");
    return 0;
}
