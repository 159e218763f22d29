/* HcclCommInitClusterInfo: one rank of a job whose ranks are processes,
 * each started as `cluster RANK_TABLE RANK`, all reading the same HCCL
 * rank table (rank 0 serves the bootstrap at its server's address and
 * HCCL_IF_BASE_PORT). Each runs an AllReduce of (rank + 1) and checks
 * the sum n(n+1)/2; the config form names the communicator. */
#include "common.h"

#define COUNT 4096 /* fp32 elements */

static double one_based(int r, size_t i) { (void)i; return (double)(r + 1); }

int main(int argc, char **argv)
{
    HcclComm comm;
    HcclCommConfig config;
    aclrtStream s;
    uint32_t size = 0, rank = 99;
    char name[COMM_NAME_MAX_LENGTH];
    void *in, *out, *h;
    size_t i;
    int r;
    double want;
    const HcclDataType t = HCCL_DATA_TYPE_FP32;
    if (argc != 3) {
        fprintf(stderr, "usage: cluster RANK_TABLE RANK\n");
        return 2;
    }
    r = atoi(argv[2]);
    MUST(aclInit(NULL), ACL_SUCCESS);
    MUST(aclrtSetDevice(0), ACL_SUCCESS);
    MUST(aclrtCreateStream(&s), ACL_SUCCESS);
    HcclCommConfigInit(&config);
    strcpy(config.hcclCommName, "from_table");
    MUST(HcclCommInitClusterInfoConfig(argv[1], (uint32_t)r, &config, &comm), HCCL_SUCCESS);
    MUST(HcclGetRankSize(comm, &size), HCCL_SUCCESS);
    MUST(HcclGetRankId(comm, &rank), HCCL_SUCCESS);
    EXPECT(rank == (uint32_t)r, "rank %d is rank %u", r, rank);
    MUST(HcclGetCommName(comm, name), HCCL_SUCCESS);
    EXPECT(strcmp(name, "from_table") == 0, "rank %d: comm name %s", r, name);
    in = dev_fill(t, COUNT, one_based, r);
    out = dev_alloc(t, COUNT);
    MUST(HcclAllReduce(in, out, COUNT, t, HCCL_REDUCE_SUM, comm, s), HCCL_SUCCESS);
    MUST(aclrtSynchronizeStream(s), ACL_SUCCESS);
    h = dev_read(t, out, COUNT);
    want = size * (size + 1) / 2.0;
    for (i = 0; i < COUNT; i++)
        if (get(t, h, i) != want) {
            EXPECT(0, "rank %d element %zu is %g, want %g", r, i, get(t, h, i), want);
            break;
        }
    free(h);
    MUST(aclrtFree(in), ACL_SUCCESS);
    MUST(aclrtFree(out), ACL_SUCCESS);
    MUST(HcclCommDestroy(comm), HCCL_SUCCESS);
    MUST(aclrtDestroyStream(s), ACL_SUCCESS);
    MUST(aclFinalize(), ACL_SUCCESS);
    if (failures) return 1;
    printf("cluster: rank %u of %u allreduced %g: ok\n", rank, size, want);
    return 0;
}
