/*
 * The HCCL guide's first sample, in C: rank 0 makes the root info
 * (HcclGetRootInfo), MPI_Bcast shares it, every rank joins
 * (HcclCommInitRootInfo), and 8 ranks each holding [0, 1, ..., 7]
 * AllReduce (sum) them to [0, 8, 16, ..., 56].
 *
 *   make ASCEND_DIR=$ASCEND_HOME_PATH MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi
 *   mpirun -n 8 ./build/hccl_allreduce
 */
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>
#include "acl/acl.h"
#include "hccl/hccl.h"

#define ACL_CHECK(call)                                                            \
    do {                                                                           \
        aclError r_ = (call);                                                      \
        if (r_ != ACL_SUCCESS) {                                                   \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, r_); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                          \
        }                                                                          \
    } while (0)

#define HCCL_CHECK(call)                                                           \
    do {                                                                           \
        HcclResult r_ = (call);                                                    \
        if (r_ != HCCL_SUCCESS) {                                                  \
            fprintf(stderr, "%s:%d: %s failed: %d (%s)\n", __FILE__, __LINE__,     \
                    #call, (int)r_, HcclGetErrorString(r_));                       \
            MPI_Abort(MPI_COMM_WORLD, 1);                                          \
        }                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    int rank, size, i, ok = 1;
    uint32_t devices;
    const uint64_t count = 8;
    const size_t bytes = count * sizeof(float);
    float host[8];
    void *send = NULL, *recv = NULL;
    aclrtStream stream;
    HcclRootInfo root;
    HcclComm comm;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    ACL_CHECK(aclInit(NULL));
    ACL_CHECK(aclrtGetDeviceCount(&devices));
    ACL_CHECK(aclrtSetDevice(rank % (int)devices));
    ACL_CHECK(aclrtCreateStream(&stream));

    /* Rank 0 makes the root info; MPI carries it to the others. */
    if (rank == 0) {
        HCCL_CHECK(HcclGetRootInfo(&root));
    }
    MPI_Bcast(&root, HCCL_ROOT_INFO_BYTES, MPI_CHAR, 0, MPI_COMM_WORLD);
    HCCL_CHECK(HcclCommInitRootInfo((uint32_t)size, &root, (uint32_t)rank, &comm));

    for (i = 0; i < 8; i++) {
        host[i] = (float)i;
    }
    ACL_CHECK(aclrtMalloc(&send, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    ACL_CHECK(aclrtMalloc(&recv, bytes, ACL_MEM_MALLOC_HUGE_FIRST));
    ACL_CHECK(aclrtMemcpy(send, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE));

    /* Enqueued on the stream; the synchronize waits for it. */
    HCCL_CHECK(HcclAllReduce(send, recv, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream));
    ACL_CHECK(aclrtSynchronizeStream(stream));
    ACL_CHECK(aclrtMemcpy(host, bytes, recv, bytes, ACL_MEMCPY_DEVICE_TO_HOST));

    printf("rank %d:", rank);
    for (i = 0; i < 8; i++) {
        printf(" %g", host[i]);
        if (host[i] != (float)(i * size)) {
            ok = 0;
        }
    }
    printf("%s\n", ok ? "" : "  WRONG");

    ACL_CHECK(aclrtFree(send));
    ACL_CHECK(aclrtFree(recv));
    HCCL_CHECK(HcclCommDestroy(comm));
    ACL_CHECK(aclrtDestroyStream(stream));
    ACL_CHECK(aclrtResetDevice(rank % (int)devices));
    ACL_CHECK(aclFinalize());
    MPI_Finalize();
    return ok ? 0 : 1;
}
