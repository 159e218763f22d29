/* A peer that dies: two processes, rank 0 and rank 1, joined through a
 * root info passed in a file (argv[2]); after one AllReduce rank 1 exits
 * without destroying its communicator. Rank 0 sees it in
 * HcclGetCommAsyncError while no op runs, and its next op fails on the
 * stream.   peer_dies RANK FILE */
#define _POSIX_C_SOURCE 200809L
#include <time.h>
#include <unistd.h>
#include "common.h"

static double one(int r, size_t i) { (void)r; (void)i; return 1; }

static void nap(long ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    int rank, i;
    HcclRootInfo root;
    HcclComm comm;
    aclrtStream s;
    HcclResult async = HCCL_SUCCESS;
    void *send, *recv;
    FILE *f;
    if (argc != 3) return 2;
    rank = atoi(argv[1]);
    MUST(aclInit(NULL), ACL_SUCCESS);
    MUST(aclrtSetDevice(rank), ACL_SUCCESS);
    MUST(aclrtCreateStream(&s), ACL_SUCCESS);
    if (rank == 0) {
        char tmp[4096];
        MUST(HcclGetRootInfo(&root), HCCL_SUCCESS);
        snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
        f = fopen(tmp, "wb");
        if (!f || fwrite(&root, sizeof root, 1, f) != 1) return 3;
        fclose(f);
        rename(tmp, argv[2]); /* appears whole */
    } else {
        for (i = 0; i < 1000 && !(f = fopen(argv[2], "rb")); i++) nap(10);
        if (!f || fread(&root, sizeof root, 1, f) != 1) return 3;
        fclose(f);
    }
    MUST(HcclCommInitRootInfo(2, &root, (uint32_t)rank, &comm), HCCL_SUCCESS);
    send = dev_fill(HCCL_DATA_TYPE_FP32, 4, one, rank);
    recv = dev_alloc(HCCL_DATA_TYPE_FP32, 4);
    MUST(HcclAllReduce(send, recv, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, s), HCCL_SUCCESS);
    MUST(aclrtSynchronizeStream(s), ACL_SUCCESS);
    if (rank == 1) {
        _exit(0); /* dies: no HcclCommDestroy */
    }
    MUST(HcclGetCommAsyncError(comm, &async), HCCL_SUCCESS);
    for (i = 0; i < 500 && async == HCCL_SUCCESS; i++) {
        nap(20);
        MUST(HcclGetCommAsyncError(comm, &async), HCCL_SUCCESS);
    }
    printf("async error %d (%s)\n", (int)async, HcclGetErrorString(async));
    EXPECT(async != HCCL_SUCCESS, "rank 0 saw no async error within 10 s of rank 1's exit");
    /* The next op is accepted (its arguments are fine) and fails on the stream. */
    MUST(HcclAllReduce(send, recv, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, s), HCCL_SUCCESS);
    EXPECT(aclrtSynchronizeStream(s) == ACL_ERROR_RT_INTERNAL_ERROR, "the op after the peer died fails on the stream");
    HcclCommDestroy(comm);
    MUST(aclrtDestroyStream(s), ACL_SUCCESS);
    MUST(aclFinalize(), ACL_SUCCESS);
    return failures ? 1 : 0;
}
