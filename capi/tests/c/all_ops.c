/* Every collective and every data type, point-to-point, groups and the V
 * variants through the C API: N ranks of one process (HcclCommInitAll),
 * one stream each, every rank's op enqueued from this one thread (as HCCL
 * programs loop over their communicators), then the streams synchronized
 * and every output compared with what it must be.
 *   all_ops [N]      (HCCL_BACKEND=sim runs it on the simulator) */
#include "common.h"

#define MAXR 8
static int N = 4;
static HcclComm comms[MAXR];
static aclrtStream streams[MAXR];

static HcclReduceOp cur_op;

/* Rank r's element i: 1..3 (for products 1 or 2, a 2 on at most a quarter
 * of the ranks), so that the reductions of up to 8 ranks fit every type
 * exactly. */
static double v(int r, size_t i)
{
    if (cur_op == HCCL_REDUCE_PROD) return (double)((r + i) % 4 == 0 ? 2 : 1);
    return (double)((r + i) % 3 + 1);
}

static double reduce(HcclReduceOp op, double a, double b)
{
    switch (op) {
    case HCCL_REDUCE_SUM: return a + b;
    case HCCL_REDUCE_PROD: return a * b;
    case HCCL_REDUCE_MAX: return a > b ? a : b;
    default: return a < b ? a : b;
    }
}

/* The reduction over ranks of v(q, i). */
static double over_ranks(HcclReduceOp op, size_t i)
{
    double acc = v(0, i);
    int q;
    for (q = 1; q < N; q++) acc = reduce(op, acc, v(q, i));
    return acc;
}

static void sync_all(const char *what, HcclDataType t)
{
    int r;
    for (r = 0; r < N; r++) {
        aclError e = aclrtSynchronizeStream(streams[r]);
        EXPECT(e == ACL_SUCCESS, "%s dtype %d: rank %d's stream failed: %d", what, (int)t, r, e);
    }
}

static void check(const char *what, HcclDataType t, int r, const void *dev, size_t n,
                  double (*want)(int, size_t))
{
    double *dummy = NULL;
    void *h = dev_read(t, dev, n);
    size_t i;
    (void)dummy;
    for (i = 0; i < n; i++) {
        double got = get(t, h, i), w = want(r, i);
        if (got != w) {
            EXPECT(0, "%s dtype %d rank %d element %zu: got %g, want %g", what, (int)t, r, i, got, w);
            break;
        }
    }
    free(h);
}

static const size_t C = 5; /* elements per block */
static HcclDataType cur_t;
static int cur_root;

static double want_allreduce(int r, size_t i) { (void)r; return over_ranks(cur_op, i); }
static double want_rs(int r, size_t i) { return over_ranks(cur_op, r * C + i); }
static double want_ag(int r, size_t j) { (void)r; return v((int)(j / C), j % C); }
static double want_bcast(int r, size_t i) { (void)r; return v(cur_root, i); }
static double want_scatter(int r, size_t i) { return v(cur_root, r * C + i); }
static double want_a2a(int r, size_t j) { return v((int)(j / C), r * C + j % C); }
static double want_ring(int r, size_t i) { return v((r + N - 1) % N, i); }
static double zero(int r, size_t i) { (void)r; (void)i; return 0; }

static void free_all(void **bufs)
{
    int r;
    for (r = 0; r < N; r++) MUST(aclrtFree(bufs[r]), ACL_SUCCESS);
}

static void test_allreduce(HcclDataType t, HcclReduceOp op)
{
    void *s[MAXR], *d[MAXR];
    int r;
    cur_op = op;
    for (r = 0; r < N; r++) {
        s[r] = dev_fill(t, C, v, r);
        d[r] = dev_alloc(t, C);
        MUST(HcclAllReduce(s[r], d[r], C, t, op, comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("AllReduce", t);
    for (r = 0; r < N; r++) check("AllReduce", t, r, d[r], C, want_allreduce);
    /* in place: recvBuf == sendBuf */
    for (r = 0; r < N; r++) MUST(HcclAllReduce(s[r], s[r], C, t, op, comms[r], streams[r]), HCCL_SUCCESS);
    sync_all("AllReduce in place", t);
    for (r = 0; r < N; r++) check("AllReduce in place", t, r, s[r], C, want_allreduce);
    free_all(s);
    free_all(d);
}

static void test_rooted_and_gathers(HcclDataType t)
{
    void *s[MAXR], *d[MAXR];
    int r;
    cur_op = HCCL_REDUCE_SUM;
    /* ReduceScatter */
    for (r = 0; r < N; r++) {
        s[r] = dev_fill(t, N * C, v, r);
        d[r] = dev_alloc(t, C);
        MUST(HcclReduceScatter(s[r], d[r], C, t, HCCL_REDUCE_SUM, comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("ReduceScatter", t);
    for (r = 0; r < N; r++) check("ReduceScatter", t, r, d[r], C, want_rs);
    free_all(s);
    free_all(d);
    /* AllGather */
    for (r = 0; r < N; r++) {
        s[r] = dev_fill(t, C, v, r);
        d[r] = dev_alloc(t, N * C);
        MUST(HcclAllGather(s[r], d[r], C, t, comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("AllGather", t);
    for (r = 0; r < N; r++) check("AllGather", t, r, d[r], N * C, want_ag);
    free_all(s);
    free_all(d);
    /* Broadcast from the last rank */
    cur_root = N - 1;
    for (r = 0; r < N; r++) {
        s[r] = r == cur_root ? dev_fill(t, C, v, r) : dev_alloc(t, C);
        MUST(HcclBroadcast(s[r], C, t, (uint32_t)cur_root, comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("Broadcast", t);
    for (r = 0; r < N; r++) check("Broadcast", t, r, s[r], C, want_bcast);
    free_all(s);
    /* Reduce to rank 0 */
    for (r = 0; r < N; r++) {
        s[r] = dev_fill(t, C, v, r);
        d[r] = dev_alloc(t, C);
        MUST(HcclReduce(s[r], d[r], C, t, HCCL_REDUCE_SUM, 0, comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("Reduce", t);
    check("Reduce", t, 0, d[0], C, want_allreduce);
    for (r = 1; r < N; r++) check("Reduce (non-root untouched)", t, r, d[r], C, zero);
    free_all(s);
    free_all(d);
    /* Scatter from rank 0 */
    cur_root = 0;
    for (r = 0; r < N; r++) {
        s[r] = r == 0 ? dev_fill(t, N * C, v, r) : dev_alloc(t, 1);
        d[r] = dev_alloc(t, C);
        MUST(HcclScatter(s[r], d[r], C, t, 0, comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("Scatter", t);
    for (r = 0; r < N; r++) check("Scatter", t, r, d[r], C, want_scatter);
    free_all(s);
    free_all(d);
    /* AlltoAll */
    for (r = 0; r < N; r++) {
        s[r] = dev_fill(t, N * C, v, r);
        d[r] = dev_alloc(t, N * C);
        MUST(HcclAlltoAll(s[r], C, t, d[r], C, t, comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("AlltoAll", t);
    for (r = 0; r < N; r++) check("AlltoAll", t, r, d[r], N * C, want_a2a);
    free_all(s);
    free_all(d);
}

/* V variants: rank q's block has q + 1 elements. */
static uint64_t vc(int q) { return (uint64_t)q + 1; }
/* AlltoAllV's counts: rank i sends (i + 2j) % 3 + 1 elements to rank j. */
static uint64_t c2(int i, int j) { return (uint64_t)((i + 2 * j) % 3 + 1); }

static void test_v(HcclDataType t)
{
    void *s[MAXR], *d[MAXR];
    uint64_t counts[MAXR], displs[MAXR], total = 0, gapped = 0;
    int r, q, i, j;
    for (q = 0; q < N; q++) {
        counts[q] = vc(q);
        total += counts[q];
    }
    /* AllGatherV into blocks with a one-element gap between them */
    for (q = 0; q < N; q++) {
        displs[q] = gapped;
        gapped += counts[q] + 1;
    }
    for (r = 0; r < N; r++) {
        s[r] = dev_fill(t, counts[r], v, r);
        d[r] = dev_alloc(t, gapped);
        MUST(HcclAllGatherV(s[r], counts[r], d[r], counts, displs, t, comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("AllGatherV", t);
    for (r = 0; r < N; r++) {
        void *h = dev_read(t, d[r], gapped);
        for (q = 0; q < N; q++)
            for (i = 0; i < (int)counts[q]; i++)
                EXPECT(get(t, h, displs[q] + i) == v(q, i), "AllGatherV dtype %d rank %d block %d", (int)t, r, q);
        EXPECT(get(t, h, displs[0] + counts[0]) == 0, "AllGatherV dtype %d: the gap was written", (int)t);
        free(h);
    }
    free_all(s);
    free_all(d);
    /* ReduceScatterV, packed */
    displs[0] = 0;
    for (q = 1; q < N; q++) displs[q] = displs[q - 1] + counts[q - 1];
    for (r = 0; r < N; r++) {
        s[r] = dev_fill(t, total, v, r);
        d[r] = dev_alloc(t, counts[r]);
        MUST(HcclReduceScatterV(s[r], counts, displs, d[r], counts[r], t, HCCL_REDUCE_SUM, comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("ReduceScatterV", t);
    for (r = 0; r < N; r++) {
        void *h = dev_read(t, d[r], counts[r]);
        for (i = 0; i < (int)counts[r]; i++)
            EXPECT(get(t, h, i) == over_ranks(HCCL_REDUCE_SUM, displs[r] + i), "ReduceScatterV dtype %d rank %d element %d", (int)t, r, i);
        free(h);
    }
    free_all(s);
    free_all(d);
    /* AlltoAllV and AlltoAllVC, packed: rank i's block for j starts at
     * sum_{l<j} c2(i, l); rank j's block from i at sum_{l<i} c2(l, j). */
    {
        uint64_t sc[MAXR][MAXR], sd[MAXR][MAXR], rc[MAXR][MAXR], rd[MAXR][MAXR], st[MAXR], rt[MAXR];
        uint64_t matrix[MAXR * MAXR];
        int vc_pass;
        for (i = 0; i < N; i++) {
            st[i] = rt[i] = 0;
            for (j = 0; j < N; j++) {
                sc[i][j] = c2(i, j);
                sd[i][j] = st[i];
                st[i] += sc[i][j];
                rc[i][j] = c2(j, i);
                rd[i][j] = rt[i];
                rt[i] += rc[i][j];
                matrix[i * N + j] = c2(i, j);
            }
        }
        for (vc_pass = 0; vc_pass < 2; vc_pass++) {
            const char *what = vc_pass ? "AlltoAllVC" : "AlltoAllV";
            for (r = 0; r < N; r++) {
                s[r] = dev_fill(t, st[r], v, r);
                d[r] = dev_alloc(t, rt[r]);
                if (vc_pass)
                    MUST(HcclAlltoAllVC(s[r], matrix, t, d[r], t, comms[r], streams[r]), HCCL_SUCCESS);
                else
                    MUST(HcclAlltoAllV(s[r], sc[r], sd[r], t, d[r], rc[r], rd[r], t, comms[r], streams[r]), HCCL_SUCCESS);
            }
            sync_all(what, t);
            for (r = 0; r < N; r++) {
                void *h = dev_read(t, d[r], rt[r]);
                for (i = 0; i < N; i++)
                    for (j = 0; j < (int)rc[r][i]; j++)
                        EXPECT(get(t, h, rd[r][i] + j) == v(i, sd[i][r] + j), "%s dtype %d rank %d from %d element %d", what, (int)t, r, i, j);
                free(h);
            }
            free_all(s);
            free_all(d);
        }
    }
}

static void test_p2p(HcclDataType t)
{
    void *s[MAXR], *d[MAXR];
    int r;
    /* A ring: send to r + 1, then receive from r - 1 (sends are eager). */
    for (r = 0; r < N; r++) {
        s[r] = dev_fill(t, C, v, r);
        d[r] = dev_alloc(t, C);
        MUST(HcclSend(s[r], C, t, (uint32_t)((r + 1) % N), comms[r], streams[r]), HCCL_SUCCESS);
        MUST(HcclRecv(d[r], C, t, (uint32_t)((r + N - 1) % N), comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("Send/Recv", t);
    for (r = 0; r < N; r++) check("Send/Recv", t, r, d[r], C, want_ring);
    /* Receive first, then send, inside a group: the group's end runs them
     * together, so this does not deadlock. */
    MUST(HcclGroupStart(), HCCL_SUCCESS);
    for (r = 0; r < N; r++) {
        MUST(aclrtMemset(d[r], C * esize(t), 0, C * esize(t)), ACL_SUCCESS);
        MUST(HcclRecv(d[r], C, t, (uint32_t)((r + N - 1) % N), comms[r], streams[r]), HCCL_SUCCESS);
        MUST(HcclSend(s[r], C, t, (uint32_t)((r + 1) % N), comms[r], streams[r]), HCCL_SUCCESS);
    }
    MUST(HcclGroupEnd(), HCCL_SUCCESS);
    sync_all("grouped Recv/Send", t);
    for (r = 0; r < N; r++) check("grouped Recv/Send", t, r, d[r], C, want_ring);
    /* BatchSendRecv: the same ring as one batch per rank. */
    for (r = 0; r < N; r++) {
        HcclSendRecvItem items[2];
        MUST(aclrtMemset(d[r], C * esize(t), 0, C * esize(t)), ACL_SUCCESS);
        items[0].sendRecvType = HCCL_RECV;
        items[0].buf = d[r];
        items[0].count = C;
        items[0].dataType = t;
        items[0].remoteRank = (uint32_t)((r + N - 1) % N);
        items[1].sendRecvType = HCCL_SEND;
        items[1].buf = s[r];
        items[1].count = C;
        items[1].dataType = t;
        items[1].remoteRank = (uint32_t)((r + 1) % N);
        MUST(HcclBatchSendRecv(items, 2, comms[r], streams[r]), HCCL_SUCCESS);
    }
    sync_all("BatchSendRecv", t);
    for (r = 0; r < N; r++) check("BatchSendRecv", t, r, d[r], C, want_ring);
    free_all(s);
    free_all(d);
}

int main(int argc, char **argv)
{
    int32_t devices[MAXR];
    int r, t, op;
    uint32_t size, rank;
    if (argc > 1) N = atoi(argv[1]);
    if (N < 2 || N > MAXR) {
        fprintf(stderr, "N must be 2..%d\n", MAXR);
        return 2;
    }
    MUST(aclInit(NULL), ACL_SUCCESS);
    for (r = 0; r < N; r++) {
        devices[r] = r;
        MUST(aclrtSetDevice(r), ACL_SUCCESS);
        MUST(aclrtCreateStream(&streams[r]), ACL_SUCCESS);
    }
    MUST(HcclCommInitAll((uint32_t)N, devices, comms), HCCL_SUCCESS);
    for (r = 0; r < N; r++) {
        MUST(HcclGetRankSize(comms[r], &size), HCCL_SUCCESS);
        MUST(HcclGetRankId(comms[r], &rank), HCCL_SUCCESS);
        EXPECT(size == (uint32_t)N && rank == (uint32_t)r, "comms[%d] is rank %u of %u", r, rank, size);
    }
    for (t = HCCL_DATA_TYPE_INT8; t <= HCCL_DATA_TYPE_BFP16; t++) {
        cur_t = (HcclDataType)t;
        for (op = HCCL_REDUCE_SUM; op <= HCCL_REDUCE_MIN; op++) test_allreduce(cur_t, (HcclReduceOp)op);
        test_rooted_and_gathers(cur_t);
        test_v(cur_t);
        test_p2p(cur_t);
    }
    for (r = 0; r < N; r++) MUST(HcclBarrier(comms[r], streams[r]), HCCL_SUCCESS);
    sync_all("Barrier", HCCL_DATA_TYPE_INT8);
    for (r = 0; r < N; r++) {
        HcclResult async = HCCL_E_INTERNAL;
        MUST(HcclGetCommAsyncError(comms[r], &async), HCCL_SUCCESS);
        EXPECT(async == HCCL_SUCCESS, "rank %d async error %d", r, (int)async);
        MUST(HcclCommDestroy(comms[r]), HCCL_SUCCESS);
        MUST(aclrtDestroyStream(streams[r]), ACL_SUCCESS);
    }
    MUST(aclFinalize(), ACL_SUCCESS);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("all_ops: %d ranks, every collective and data type: ok\n", N);
    return 0;
}
