/* HcclCreateSubCommConfig: 4 ranks of one process (HcclCommInitAll), one
 * thread each, since only the members of a sub-communicator call it and
 * the call blocks until they all have. Two disjoint pairs {0,2} and
 * {1,3}, then a trio {0,1,2} named by its config (rank 3 passes NULL and
 * 0xFFFFFFFF: not a member); each does an AllReduce whose sum names its
 * members. Then every bad argument on rank 0 (refused before any
 * exchange, so no other rank is needed). */
#include <pthread.h>
#include "common.h"

#define N 4
#define COUNT 1024 /* fp32 elements */

static HcclComm comms[N];
static const HcclDataType T = HCCL_DATA_TYPE_FP32;

static double one_based(int r, size_t i) { (void)i; return (double)(r + 1); }

/* An AllReduce on `sub`: every element must be the sum of (member + 1). */
static void allreduce_on(HcclComm sub, int r, double want, const char *what)
{
    aclrtStream s;
    void *in = dev_fill(T, COUNT, one_based, r);
    void *out = dev_alloc(T, COUNT);
    void *h;
    size_t i;
    MUST(aclrtCreateStream(&s), ACL_SUCCESS);
    MUST(HcclAllReduce(in, out, COUNT, T, HCCL_REDUCE_SUM, sub, s), HCCL_SUCCESS);
    MUST(aclrtSynchronizeStream(s), ACL_SUCCESS);
    h = dev_read(T, out, COUNT);
    for (i = 0; i < COUNT; i++)
        if (get(T, h, i) != want) {
            EXPECT(0, "%s: rank %d element %zu is %g, want %g", what, r, i, get(T, h, i), want);
            break;
        }
    free(h);
    MUST(aclrtFree(in), ACL_SUCCESS);
    MUST(aclrtFree(out), ACL_SUCCESS);
    MUST(aclrtDestroyStream(s), ACL_SUCCESS);
}

static void *rank_main(void *arg)
{
    int r = (int)(size_t)arg;
    HcclCommConfig config;
    HcclComm pair = NULL, trio = NULL;
    uint32_t ids[2], trio_ids[3] = {0, 1, 2}, size = 0, rank = 99;
    char name[COMM_NAME_MAX_LENGTH];
    char want[64];

    /* The pairs: rankIds in sub-rank order; subCommRankId is the index. */
    ids[0] = (uint32_t)(r % 2);
    ids[1] = (uint32_t)(r % 2 + 2);
    HcclCommConfigInit(&config);
    MUST(HcclCreateSubCommConfig(&comms[r], 2, ids, (uint64_t)(10 + r % 2), (uint32_t)(r / 2), &config, &pair),
         HCCL_SUCCESS);
    MUST(HcclGetRankSize(pair, &size), HCCL_SUCCESS);
    MUST(HcclGetRankId(pair, &rank), HCCL_SUCCESS);
    EXPECT(size == 2 && rank == (uint32_t)(r / 2), "pair of rank %d: rank %u of %u", r, rank, size);
    MUST(HcclGetCommName(pair, name), HCCL_SUCCESS);
    snprintf(want, sizeof want, "world_sub_%d", 10 + r % 2);
    EXPECT(strcmp(name, want) == 0, "pair of rank %d is named %s, want %s", r, name, want);
    /* Members r%2 and r%2+2: (r%2+1) + (r%2+3). */
    allreduce_on(pair, r, (double)(2 * (r % 2) + 4), "pair AllReduce");

    /* The trio, named by its config; rank 3 is not in it. */
    HcclCommConfigInit(&config);
    strcpy(config.hcclCommName, "trio");
    if (r == 3) {
        MUST(HcclCreateSubCommConfig(&comms[r], 0, NULL, 0xFFFFFFFFull, 0, &config, &trio), HCCL_SUCCESS);
        EXPECT(trio == NULL, "a rank outside the trio got a communicator");
    } else {
        MUST(HcclCreateSubCommConfig(&comms[r], 3, trio_ids, 20, (uint32_t)r, &config, &trio), HCCL_SUCCESS);
        MUST(HcclGetRankSize(trio, &size), HCCL_SUCCESS);
        MUST(HcclGetRankId(trio, &rank), HCCL_SUCCESS);
        EXPECT(size == 3 && rank == (uint32_t)r, "trio of rank %d: rank %u of %u", r, rank, size);
        MUST(HcclGetCommName(trio, name), HCCL_SUCCESS);
        EXPECT(strcmp(name, "trio") == 0, "trio of rank %d is named %s", r, name);
        allreduce_on(trio, r, 1 + 2 + 3, "trio AllReduce");
    }

    if (r == 0) {
        /* Bad arguments: each refused on this rank alone. */
        HcclComm bad = NULL, null_comm = NULL;
        uint32_t not_me[2] = {1, 2}, twice[2] = {0, 0}, far[2] = {0, 9}, pair_ids[2] = {0, 2};
        HcclCommConfig unset;
        memset(&unset, 0, sizeof unset);
        HcclCommConfigInit(&config);
        EXPECT(HcclCreateSubCommConfig(&comms[0], 2, not_me, 30, 0, &config, &bad) == HCCL_E_PARA,
               "a rankIds without this rank is HCCL_E_PARA");
        EXPECT(HcclCreateSubCommConfig(&comms[0], 2, twice, 30, 0, &config, &bad) == HCCL_E_PARA,
               "a rank listed twice is HCCL_E_PARA");
        EXPECT(HcclCreateSubCommConfig(&comms[0], 2, far, 30, 0, &config, &bad) == HCCL_E_PARA,
               "a rank out of range is HCCL_E_PARA");
        EXPECT(HcclCreateSubCommConfig(&comms[0], 0, pair_ids, 30, 0, &config, &bad) == HCCL_E_PARA,
               "rankNum 0 is HCCL_E_PARA");
        EXPECT(HcclCreateSubCommConfig(&comms[0], 2, pair_ids, 30, 2, &config, &bad) == HCCL_E_PARA,
               "subCommRankId >= rankNum is HCCL_E_PARA");
        EXPECT(HcclCreateSubCommConfig(&comms[0], 2, NULL, 30, 0, &config, &bad) == HCCL_E_PARA,
               "rankIds NULL with a valid subCommId is HCCL_E_PARA");
        EXPECT(HcclCreateSubCommConfig(&comms[0], 2, pair_ids, 0xFFFFFFFFull, 0, &config, &bad) == HCCL_E_PARA,
               "subCommId 0xFFFFFFFF with rankIds is HCCL_E_PARA");
        EXPECT(HcclCreateSubCommConfig(&comms[0], 2, pair_ids, 10, 0, &config, &bad) == HCCL_E_PARA,
               "a subCommId whose name a live sub-communicator has is HCCL_E_PARA");
        EXPECT(HcclCreateSubCommConfig(&comms[0], 2, pair_ids, 30, 0, &unset, &bad) == HCCL_E_PARA,
               "a config without HcclCommConfigInit is HCCL_E_PARA");
        EXPECT(HcclCreateSubCommConfig(&comms[0], 2, pair_ids, 30, 0, NULL, &bad) == HCCL_E_PTR,
               "config NULL is HCCL_E_PTR");
        EXPECT(HcclCreateSubCommConfig(&comms[0], 2, pair_ids, 30, 0, &config, NULL) == HCCL_E_PTR,
               "subComm NULL is HCCL_E_PTR");
        EXPECT(HcclCreateSubCommConfig(NULL, 2, pair_ids, 30, 0, &config, &bad) == HCCL_E_PTR,
               "comm NULL is HCCL_E_PTR");
        EXPECT(HcclCreateSubCommConfig(&null_comm, 2, pair_ids, 30, 0, &config, &bad) == HCCL_E_PTR,
               "*comm NULL is HCCL_E_PTR");
        EXPECT(bad == NULL, "a refused call wrote subComm");
    }

    MUST(HcclCommDestroy(pair), HCCL_SUCCESS);
    if (trio) MUST(HcclCommDestroy(trio), HCCL_SUCCESS);
    return NULL;
}

int main(void)
{
    int32_t devices[N] = {0, 1, 2, 3};
    pthread_t th[N];
    int r;
    MUST(aclInit(NULL), ACL_SUCCESS);
    MUST(HcclCommInitAll(N, devices, comms), HCCL_SUCCESS);
    for (r = 0; r < N; r++) pthread_create(&th[r], NULL, rank_main, (void *)(size_t)r);
    for (r = 0; r < N; r++) pthread_join(th[r], NULL);
    for (r = 0; r < N; r++) MUST(HcclCommDestroy(comms[r]), HCCL_SUCCESS);
    MUST(aclFinalize(), ACL_SUCCESS);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("subcomm: pairs {0,2} {1,3} and trio {0,1,2} allreduced, bad arguments refused: ok\n");
    return 0;
}
