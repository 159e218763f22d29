/* A simulated hang seen through the C API: 4 ranks of one process on the
 * simulator (HCCL_BACKEND=sim), whose fault plan (HCCL_SIM_FAULTS, set by
 * the test) crashes rank 1 at its op 1. Every rank enqueues two
 * AllReduces; op 0 succeeds, op 1 hangs: each stream's synchronize fails,
 * aclGetRecentErrMsg then names the failed op, and HcclGetCommAsyncError
 * is HCCL_E_TIMEOUT, as a TCP op that waits past HCCL_EXEC_TIMEOUT. */
#include "common.h"

#define N 4
#define COUNT 256 /* fp32 elements */

static double one(int r, size_t i) { (void)r; (void)i; return 1.0; }

int main(void)
{
    int32_t devices[N] = {0, 1, 2, 3};
    HcclComm comms[N];
    aclrtStream s[N];
    void *in[N], *out[N];
    int r, k;
    const HcclDataType t = HCCL_DATA_TYPE_FP32;
    MUST(aclInit(NULL), ACL_SUCCESS);
    for (r = 0; r < N; r++) {
        MUST(aclrtCreateStream(&s[r]), ACL_SUCCESS);
        in[r] = dev_fill(t, COUNT, one, r);
        out[r] = dev_alloc(t, COUNT);
    }
    MUST(HcclCommInitAll(N, devices, comms), HCCL_SUCCESS);
    for (k = 0; k < 2; k++)
        for (r = 0; r < N; r++)
            MUST(HcclAllReduce(in[r], out[r], COUNT, t, HCCL_REDUCE_SUM, comms[r], s[r]), HCCL_SUCCESS);
    for (r = 0; r < N; r++) {
        HcclResult async = HCCL_SUCCESS;
        const char *msg;
        EXPECT(aclrtSynchronizeStream(s[r]) == ACL_ERROR_RT_INTERNAL_ERROR, "rank %d: the hung op fails its stream", r);
        msg = aclGetRecentErrMsg();
        EXPECT(msg != NULL && strstr(msg, "aclrtSynchronizeStream") && strstr(msg, "comm 'world' AllReduce #1: ") &&
                   strstr(msg, "the simulated op hung"),
               "rank %d: aclGetRecentErrMsg names the failed op: %s", r, msg ? msg : "(null)");
        MUST(HcclGetCommAsyncError(comms[r], &async), HCCL_SUCCESS);
        EXPECT(async == HCCL_E_TIMEOUT, "rank %d: async error %d, want HCCL_E_TIMEOUT", r, (int)async);
    }
    for (r = 0; r < N; r++) {
        HcclCommDestroy(comms[r]);
        MUST(aclrtFree(in[r]), ACL_SUCCESS);
        MUST(aclrtFree(out[r]), ACL_SUCCESS);
        MUST(aclrtDestroyStream(s[r]), ACL_SUCCESS);
    }
    MUST(aclFinalize(), ACL_SUCCESS);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("sim_hang: every rank's stream failed with the hung op named, async error HCCL_E_TIMEOUT: ok\n");
    return 0;
}
