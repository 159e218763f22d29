/* HCCL_TIMING=sim: events measure the simulated time of the collectives
 * between them: 8 ranks (one Atlas 800T A2 server), one AllReduce of 64 KiB
 * between the first two events, two more and a copy (no simulated
 * time) between the next two: the second window is exactly twice the
 * first, whatever the wall clock did. Prints rank 0's first window.
 *   timing [N]   N != 8 does not fill a server: events keep wall times. */
#include "common.h"

#define MAXR 8
#define COUNT 16384 /* fp32: 64 KiB */

static double one(int r, size_t i) { (void)r; (void)i; return 1; }

int main(int argc, char **argv)
{
    int32_t devices[MAXR];
    HcclComm comms[MAXR];
    aclrtStream s[MAXR];
    aclrtEvent e[MAXR][3];
    void *send[MAXR], *recv[MAXR];
    int r, k, R = argc > 1 ? atoi(argv[1]) : 8;
    if (R < 2 || R > MAXR) return 2;
    float t01 = 0, t12 = 0;
    MUST(aclInit(NULL), ACL_SUCCESS);
    for (r = 0; r < R; r++) {
        devices[r] = r;
        MUST(aclrtCreateStream(&s[r]), ACL_SUCCESS);
        for (k = 0; k < 3; k++) MUST(aclrtCreateEvent(&e[r][k]), ACL_SUCCESS);
        send[r] = dev_fill(HCCL_DATA_TYPE_FP32, COUNT, one, r);
        recv[r] = dev_alloc(HCCL_DATA_TYPE_FP32, COUNT);
    }
    MUST(HcclCommInitAll((uint32_t)R, devices, comms), HCCL_SUCCESS);
    for (r = 0; r < R; r++) {
        MUST(aclrtRecordEvent(e[r][0], s[r]), ACL_SUCCESS);
        MUST(HcclAllReduce(send[r], recv[r], COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[r], s[r]), HCCL_SUCCESS);
        MUST(aclrtRecordEvent(e[r][1], s[r]), ACL_SUCCESS);
        MUST(HcclAllReduce(send[r], recv[r], COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[r], s[r]), HCCL_SUCCESS);
        MUST(aclrtMemcpyAsync(send[r], COUNT * 4, recv[r], COUNT * 4, ACL_MEMCPY_DEVICE_TO_DEVICE, s[r]), ACL_SUCCESS);
        MUST(HcclAllReduce(recv[r], send[r], COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comms[r], s[r]), HCCL_SUCCESS);
        MUST(aclrtRecordEvent(e[r][2], s[r]), ACL_SUCCESS);
    }
    for (r = 0; r < R; r++) {
        float a, b;
        void *h;
        MUST(aclrtSynchronizeStream(s[r]), ACL_SUCCESS);
        MUST(aclrtEventElapsedTime(&a, e[r][0], e[r][1]), ACL_SUCCESS);
        MUST(aclrtEventElapsedTime(&b, e[r][1], e[r][2]), ACL_SUCCESS);
        if (R == 8)
            EXPECT(a > 0 && fabsf(b - 2 * a) <= 1e-6f * b, "rank %d: windows %.9f ms and %.9f ms, want the second twice the first", r, a, b);
        else
            EXPECT(a > 0 && b > 0, "rank %d: wall windows %.9f ms and %.9f ms, want both > 0", r, a, b);
        if (r == 0) {
            t01 = a;
            t12 = b;
        }
        /* The data is real: R ranks of 1, summed twice (copy, sum). */
        h = dev_read(HCCL_DATA_TYPE_FP32, send[r], COUNT);
        EXPECT(get(HCCL_DATA_TYPE_FP32, h, COUNT - 1) == R * R, "rank %d: got %g, want %d", r, get(HCCL_DATA_TYPE_FP32, h, COUNT - 1), R * R);
        free(h);
    }
    for (r = 0; r < R; r++) {
        MUST(HcclCommDestroy(comms[r]), HCCL_SUCCESS);
        MUST(aclrtDestroyStream(s[r]), ACL_SUCCESS);
    }
    MUST(aclFinalize(), ACL_SUCCESS);
    printf("allreduce 64 KiB: %.6f ms; three: %.6f ms\n", t01, t12);
    return failures ? 1 : 0;
}
