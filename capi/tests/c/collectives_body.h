/* The checks of issue 35's collectives from C, on one communicator, shared by
 * collectives.c (ranks as threads, ballast_local_run) and mpi_collectives.c (under mpirun,
 * on the MPI native path and on the engine). Every result is compared with a reference
 * that the rank computes alone from every rank's inputs (each input is a function of the
 * seed, the rank and the index, so any rank can compute all of them): ballast_allreduce for
 * every type x op, counts 0, 1, 1,000 and 1 MiB, in == out; ballast_bcast and ballast_gather
 * with roots 0 and n - 1; ballast_alltoallv with uneven and zero lengths (and
 * ballast_alltoallv_into reusing one result); and
 * ballast_exchange_sparse with seeded random destinations, ranks that send to nobody and
 * ranks that receive from nobody; then the misuse cases (NULL pointers, bad type and op
 * values, bad roots, overflowing sizes, misaligned and overlapping buffers, indices out of
 * range), each BALLAST_EINVAL with its message.
 *
 * The includer includes check.h first (CHECK, OK and EXPECT_ERR, which count passes and
 * failures atomically: ranks may be threads). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ballast.h"

#define MIB ((size_t)1 << 20)

/* Set by the includer while the communicator is on the MPI native path. */
static int native_path;
/* Set by the includer to skip the 1 MiB reductions (a repeat on another communicator). */
static int skip_large;

static uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t key(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    return mix(mix(mix(mix(a) ^ b) ^ c) ^ d);
}

static uint8_t byte_of(size_t i, uint64_t seed) { return (uint8_t)mix(seed * 1000003u + i); }

static void fill(uint8_t *p, size_t len, uint64_t seed) {
    for (size_t i = 0; i < len; i++) p[i] = byte_of(i, seed);
}

static int same_bytes(const uint8_t *p, size_t len, uint64_t seed) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != byte_of(i, seed)) return 0;
    return 1;
}

static const ballast_type TYPES[4] = {BALLAST_INT32, BALLAST_INT64, BALLAST_UINT64, BALLAST_DOUBLE};
static const ballast_op OPS[3] = {BALLAST_SUM, BALLAST_MIN, BALLAST_MAX};

static size_t type_size(ballast_type t) { return t == BALLAST_INT32 ? 4 : 8; }

/* Element j of rank r's input (type t, op o): sums stay exact and without overflow for
 * the signed types and doubles (so any order of combination gives the same bits, as MPI's
 * own order on the native path must); uint64 sums wrap; min and max take any value. */
static void input(void *p, ballast_type t, ballast_op o, int r, size_t j, int seed) {
    uint64_t x = key((uint64_t)seed, (uint64_t)r, j, (uint64_t)(t * 16 + o));
    switch (t) {
    case BALLAST_INT32: {
        uint32_t u = (uint32_t)x;
        int32_t v;
        memcpy(&v, &u, 4);
        if (o == BALLAST_SUM) v = (int32_t)(x % 2000001u) - 1000000;
        memcpy(p, &v, 4);
        break;
    }
    case BALLAST_INT64: {
        int64_t v;
        memcpy(&v, &x, 8);
        if (o == BALLAST_SUM) v = (int64_t)(x % ((uint64_t)1 << 50)) - ((int64_t)1 << 49);
        memcpy(p, &v, 8);
        break;
    }
    case BALLAST_UINT64:
        memcpy(p, &x, 8);
        break;
    default: {
        /* sums: quarters below 2^20 in magnitude (exact); min/max: any finite double */
        double v = o == BALLAST_SUM ? (double)((int64_t)(x % 8000001u) - 4000000) * 0.25
                                    : (double)(int64_t)(x >> 11) * 1e-3 * (x & 1 ? -1.0 : 1.0);
        memcpy(p, &v, 8);
        break;
    }
    }
}

#define COMBINE(T)                                           \
    do {                                                     \
        T a, b;                                              \
        memcpy(&a, acc, sizeof a);                           \
        memcpy(&b, v, sizeof b);                             \
        T c = o == BALLAST_SUM ? (T)(a + b) : o == BALLAST_MIN ? (a < b ? a : b) : (a > b ? a : b); \
        memcpy(acc, &c, sizeof c);                           \
    } while (0)

/* acc = acc op v. */
static void combine(void *acc, const void *v, ballast_type t, ballast_op o) {
    switch (t) {
    case BALLAST_INT32: COMBINE(int32_t); break;
    case BALLAST_INT64: COMBINE(int64_t); break;
    case BALLAST_UINT64: COMBINE(uint64_t); break;
    default: COMBINE(double); break;
    }
}

/* One ballast_allreduce of `count` elements, against the reference computed here. */
static void allreduce_case(ballast_comm *comm, int me, int n, ballast_type t, ballast_op o, size_t count,
                           int in_place, int seed) {
    size_t sz = type_size(t), bytes = count * sz;
    uint8_t *in = malloc(bytes + 8), *out = malloc(bytes + 8), *ref = malloc(bytes + 8);
    if (in == NULL || out == NULL || ref == NULL) {
        CHECK(!"malloc");
        free(in), free(out), free(ref);
        return;
    }
    uint8_t v[8];
    for (size_t j = 0; j < count; j++) {
        input(in + j * sz, t, o, me, j, seed);
        input(ref + j * sz, t, o, 0, j, seed);
        for (int r = 1; r < n; r++) {
            input(v, t, o, r, j, seed);
            combine(ref + j * sz, v, t, o);
        }
    }
    int rc;
    if (in_place) {
        memcpy(out, in, bytes);
        rc = ballast_allreduce(comm, out, out, count, t, o);
    } else {
        memset(out, 0xa5, bytes);
        rc = ballast_allreduce(comm, count == 0 ? NULL : in, count == 0 ? NULL : out, count, t, o);
    }
    OK(rc);
    int good = rc == 0 && memcmp(out, ref, bytes) == 0;
    CHECK(good);
    if (!good)
        fprintf(stderr, "rank %d of %d: allreduce type %d op %d count %zu in_place %d differs from the reference\n",
                me, n, t, o, count, in_place);
    if (!in_place) { /* `in` is untouched */
        uint8_t *again = malloc(bytes + 8);
        for (size_t j = 0; again != NULL && j < count; j++) input(again + j * sz, t, o, me, j, seed);
        CHECK(again != NULL && memcmp(in, again, bytes) == 0);
        free(again);
    }
    free(in), free(out), free(ref);
}

static void allreduce_checks(ballast_comm *comm, int me, int n, int seed) {
    const size_t counts[3] = {0, 1, 1000};
    for (int ti = 0; ti < 4; ti++)
        for (int oi = 0; oi < 3; oi++) {
            for (int ci = 0; ci < 3; ci++)
                for (int ip = 0; ip < 2; ip++) allreduce_case(comm, me, n, TYPES[ti], OPS[oi], counts[ci], ip, seed);
            /* 1 MiB of elements, once in place and once not */
            if (!skip_large)
                allreduce_case(comm, me, n, TYPES[ti], OPS[oi], MIB / type_size(TYPES[ti]), (ti + oi) % 2, seed);
        }

    /* Doubles whose sum rounds: within rounding of the reference, and on the engine
     * paths (fixed order) the same bits on every rank, compared through an all-gather
     * (on the MPI native path MPI's order applies: only the exact sums above are
     * compared bit for bit there). */
    enum { K = 1000 };
    double d[K], ref[K];
    for (size_t j = 0; j < K; j++) {
        ref[j] = 0;
        for (int r = 0; r < n; r++) {
            double x = (double)(key(seed, r, j, 99) >> 11) / 9007199254740992.0 * 3.0 - 1.0;
            if (r == me) d[j] = x;
            ref[j] += x;
        }
    }
    OK(ballast_allreduce(comm, d, d, K, BALLAST_DOUBLE, BALLAST_SUM));
    int close = 1;
    for (size_t j = 0; j < K; j++) close &= d[j] - ref[j] < 1e-12 && ref[j] - d[j] < 1e-12;
    CHECK(close);
    ballast_gathered *all = NULL;
    OK(ballast_allgatherv(comm, d, sizeof d, &all));
    size_t parts = 0;
    OK(ballast_gathered_count(all, &parts));
    CHECK(parts == (size_t)n);
    for (int r = 0; r < n && all != NULL; r++) {
        const void *p = NULL;
        size_t len = 0;
        int src = -1;
        OK(ballast_gathered_at(all, (size_t)r, &p, &len));
        OK(ballast_gathered_source(all, (size_t)r, &src));
        CHECK(src == r && len == sizeof d && p != NULL && (native_path || memcmp(p, d, sizeof d) == 0));
    }
    OK(ballast_gathered_free(all));
}

static void bcast_gather_checks(ballast_comm *comm, int me, int n, int seed) {
    const size_t lens[4] = {0, 1, 1000, MIB};
    uint8_t *buf = malloc(MIB);
    for (int ri = 0; ri < 2 && buf != NULL; ri++) {
        int root = ri == 0 ? 0 : n - 1;
        for (int li = 0; li < 4; li++) {
            uint64_t s = key(seed, root, lens[li], 1);
            if (me == root) fill(buf, lens[li], s);
            else memset(buf, 0, lens[li]);
            OK(ballast_bcast(comm, root, lens[li] == 0 ? NULL : buf, lens[li]));
            CHECK(same_bytes(buf, lens[li], s));
        }
        /* gather: any length per rank (rank r: 0 when r % 3 == 1), 1 MiB from the root */
        for (int big = 0; big < 2; big++) {
            size_t mine = big ? (me == root ? MIB : 10) : (me % 3 == 1 ? 0 : (size_t)(me * 37 + 5));
            fill(buf, mine, key(seed, me, root, 2 + big));
            ballast_gathered *g = (ballast_gathered *)&g; /* must be set */
            OK(ballast_gather(comm, root, mine == 0 ? NULL : buf, mine, &g));
            if (me != root) {
                CHECK(g == NULL);
                continue;
            }
            size_t count = 0;
            OK(ballast_gathered_count(g, &count));
            CHECK(count == (size_t)n);
            for (int r = 0; r < n; r++) {
                size_t want = big ? (r == root ? MIB : 10) : (r % 3 == 1 ? 0 : (size_t)(r * 37 + 5));
                const void *p = NULL;
                size_t len = 99;
                OK(ballast_gathered_part(g, r, &p, &len));
                CHECK(len == want && (want == 0 ? p == NULL : same_bytes(p, len, key(seed, r, root, 2 + big))));
                int src = -1;
                OK(ballast_gathered_source(g, (size_t)r, &src));
                CHECK(src == r);
            }
            OK(ballast_gathered_free(g));
        }
    }
    free(buf);
}

/* The bytes rank `from` sends rank `to` in alltoallv round `k`: uneven, some empty, and
 * 64 KiB per pair in round 2. */
static size_t a2a_len(int from, int to, int k) {
    if (k == 2) return 64 * 1024;
    if (k == 1) return 0; /* nobody sends anything */
    uint64_t x = key(from, to, 7, 3);
    return x % 4 == 0 ? 0 : (size_t)(x % 1500);
}

static void alltoallv_checks(ballast_comm *comm, int me, int n, int seed) {
    for (int k = 0; k < 3; k++) {
        size_t *lens = calloc((size_t)n, sizeof *lens), total = 0;
        for (int d = 0; d < n; d++) total += lens[d] = a2a_len(me, d, k);
        uint8_t *send = malloc(total + 1), *at = send;
        for (int d = 0; d < n; d++) {
            fill(at, lens[d], key(seed, me, d, 4));
            at += lens[d];
        }
        ballast_gathered *g = NULL;
        OK(ballast_alltoallv(comm, total == 0 ? NULL : send, lens, &g));
        size_t count = 0;
        OK(ballast_gathered_count(g, &count));
        CHECK(count == (size_t)n);
        int good = 1;
        for (int r = 0; r < n && g != NULL; r++) {
            const void *p = NULL;
            size_t len = 99;
            int src = -1;
            OK(ballast_gathered_at(g, (size_t)r, &p, &len));
            OK(ballast_gathered_source(g, (size_t)r, &src));
            good &= src == r && len == a2a_len(r, me, k) &&
                    (len == 0 ? p == NULL : same_bytes(p, len, key(seed, r, me, 4)));
        }
        CHECK(good);
        OK(ballast_gathered_free(g));
        free(send), free(lens);
    }
}

/* ballast_alltoallv_into: one result, first an all-gather's, reused over the rounds of
 * alltoallv_checks in the order 2 (64 KiB per pair), 0 (uneven), 1 (empty), 2, 0: each
 * round's parts are right whatever the result held; then NULL, a freed result and a
 * communicator in its place. */
static void alltoallv_into_checks(ballast_comm *comm, int me, int n, int seed) {
    ballast_gathered *g = NULL;
    OK(ballast_allgatherv(comm, "xyz", (size_t)(me % 3), &g));
    static const int order[5] = {2, 0, 1, 2, 0};
    size_t *lens = calloc((size_t)n, sizeof *lens);
    for (int i = 0; i < 5; i++) {
        int k = order[i];
        size_t total = 0;
        for (int d = 0; d < n; d++) total += lens[d] = a2a_len(me, d, k);
        uint8_t *send = malloc(total + 1), *at = send;
        for (int d = 0; d < n; d++) {
            fill(at, lens[d], key(seed, me, d, 40 + i));
            at += lens[d];
        }
        OK(ballast_alltoallv_into(comm, total == 0 ? NULL : send, lens, g));
        size_t count = 0;
        OK(ballast_gathered_count(g, &count));
        CHECK(count == (size_t)n);
        int good = 1;
        for (int r = 0; r < n; r++) {
            const void *p = NULL;
            size_t len = 99;
            OK(ballast_gathered_part(g, r, &p, &len));
            good &= len == a2a_len(r, me, k) &&
                    (len == 0 ? p == NULL : same_bytes(p, len, key(seed, r, me, 40 + i)));
        }
        CHECK(good);
        free(send);
    }
    for (int d = 0; d < n; d++) lens[d] = 0;
    EXPECT_ERR(ballast_alltoallv_into(comm, NULL, lens, NULL), BALLAST_EINVAL,
               "ballast_alltoallv_into: result is NULL");
    EXPECT_ERR(ballast_alltoallv_into(comm, NULL, lens, (ballast_gathered *)comm), BALLAST_EINVAL,
               "result is a communicator handle");
    EXPECT_ERR(ballast_alltoallv_into(comm, NULL, NULL, g), BALLAST_EINVAL, "send_lens is NULL");
    OK(ballast_gathered_free(g));
    EXPECT_ERR(ballast_alltoallv_into(comm, NULL, lens, g), BALLAST_EINVAL, "not a live");
    free(lens);
}

/* Whether rank `from` sends to rank `to` in sparse round `k`: seeded random, except that
 * rank 0 sends to nobody and rank n - 1 receives from nobody (k < 4); round 4: everyone to
 * everyone; round 5: nobody. */
static int sends_to(int from, int to, int n, int k, int seed) {
    if (from == to) return 0;
    if (k == 4) return 1;
    if (k == 5) return 0;
    if (from == 0 || to == n - 1) return 0;
    return key(seed * 10 + k, from, to, 5) % 3 == 0;
}

static size_t sparse_len(int from, int to, int k) { return (size_t)(key(from, to, k, 6) % 300); }

static void exchange_sparse_checks(ballast_comm *comm, int me, int n, int seed) {
    for (int k = 0; k < 6; k++) {
        int *dests = malloc(sizeof(int) * (size_t)n);
        const void **bufs = malloc(sizeof(void *) * (size_t)n);
        size_t *lens = malloc(sizeof(size_t) * (size_t)n), m = 0;
        uint8_t **own = malloc(sizeof(uint8_t *) * (size_t)n);
        /* the destinations in a seeded random order: the result is in source order anyway */
        int start = (int)(key(seed, me, k, 8) % (uint64_t)n);
        for (int i = 0; i < n; i++) {
            int d = (start + i) % n;
            if (!sends_to(me, d, n, k, seed)) continue;
            lens[m] = sparse_len(me, d, k);
            own[m] = malloc(lens[m] + 1);
            fill(own[m], lens[m], key(seed, me, d, 9 + k));
            bufs[m] = lens[m] == 0 && m % 2 ? NULL : own[m];
            dests[m++] = d;
        }
        ballast_gathered *g = NULL;
        OK(ballast_exchange_sparse(comm, m, m == 0 ? NULL : dests, m == 0 ? NULL : bufs, m == 0 ? NULL : lens, &g));
        size_t count = 99, want = 0;
        OK(ballast_gathered_count(g, &count));
        int good = g != NULL;
        for (int r = 0; r < n && g != NULL; r++) {
            if (!sends_to(r, me, n, k, seed)) {
                const void *p;
                size_t len;
                if (r != me) EXPECT_ERR(ballast_gathered_part(g, r, &p, &len), BALLAST_EINVAL, "sent nothing here");
                continue;
            }
            const void *p = NULL;
            size_t len = 99;
            int src = -1;
            OK(ballast_gathered_source(g, want, &src));
            OK(ballast_gathered_at(g, want, &p, &len));
            size_t wl = sparse_len(r, me, k);
            good &= src == r && len == wl && (wl == 0 ? p == NULL : same_bytes(p, len, key(seed, r, me, 9 + k)));
            const void *q = NULL;
            OK(ballast_gathered_part(g, r, &q, &len));
            good &= q == p && len == wl;
            want++;
        }
        CHECK(good && count == want);
        if (k == 5 || (k < 4 && me == n - 1)) CHECK(count == 0);
        if (k == 4) CHECK(count == (size_t)(n - 1));
        if (g != NULL) {
            const void *p;
            size_t len;
            int src;
            EXPECT_ERR(ballast_gathered_at(g, count, &p, &len), BALLAST_EINVAL, "is out of range: the result has");
            EXPECT_ERR(ballast_gathered_source(g, count, &src), BALLAST_EINVAL, "is out of range");
        }
        OK(ballast_gathered_free(g));
        for (size_t i = 0; i < m; i++) free(own[i]);
        free(dests), free(bufs), free(lens), free(own);
    }
}

/* Misuse: each refused with BALLAST_EINVAL before anything is sent (so the ranks stay in
 * step), whatever the other ranks do. */
static void misuse_checks(ballast_comm *comm, int me, int n) {
    double d[4] = {1, 2, 3, 4};
    _Alignas(8) uint8_t raw[40] = {0};
    EXPECT_ERR(ballast_allreduce(NULL, d, d, 4, BALLAST_DOUBLE, BALLAST_SUM), BALLAST_EINVAL, "comm is NULL");
    EXPECT_ERR(ballast_allreduce(comm, d, d, 4, 0, BALLAST_SUM), BALLAST_EINVAL, "type 0 is not a ballast_type");
    EXPECT_ERR(ballast_allreduce(comm, d, d, 4, 5, BALLAST_SUM), BALLAST_EINVAL, "type 5 is not a ballast_type");
    EXPECT_ERR(ballast_allreduce(comm, d, d, 4, BALLAST_DOUBLE, 0), BALLAST_EINVAL, "op 0 is not a ballast_op");
    EXPECT_ERR(ballast_allreduce(comm, d, d, 4, BALLAST_DOUBLE, -7), BALLAST_EINVAL, "op -7 is not a ballast_op");
    EXPECT_ERR(ballast_allreduce(comm, d, d, SIZE_MAX / 4 + 1, BALLAST_INT32, BALLAST_SUM), BALLAST_EINVAL,
               "above PTRDIFF_MAX bytes");
    EXPECT_ERR(ballast_allreduce(comm, d, d, (size_t)PTRDIFF_MAX / 8 + 1, BALLAST_DOUBLE, BALLAST_MAX),
               BALLAST_EINVAL, "above PTRDIFF_MAX bytes");
    EXPECT_ERR(ballast_allreduce(comm, NULL, d, 1, BALLAST_DOUBLE, BALLAST_SUM), BALLAST_EINVAL, "in is NULL");
    EXPECT_ERR(ballast_allreduce(comm, d, NULL, 1, BALLAST_DOUBLE, BALLAST_SUM), BALLAST_EINVAL, "out is NULL");
    EXPECT_ERR(ballast_allreduce(comm, raw + 4, raw + 16, 2, BALLAST_INT64, BALLAST_SUM), BALLAST_EINVAL,
               "in (0x");
    EXPECT_ERR(ballast_allreduce(comm, raw, raw + 17, 2, BALLAST_UINT64, BALLAST_MIN), BALLAST_EINVAL,
               "is not aligned for BALLAST_UINT64 (8 bytes)");
    EXPECT_ERR(ballast_allreduce(comm, raw, raw + 2, 2, BALLAST_INT32, BALLAST_MIN), BALLAST_EINVAL,
               "is not aligned for BALLAST_INT32 (4 bytes)");
    EXPECT_ERR(ballast_allreduce(comm, raw, raw + 8, 2, BALLAST_DOUBLE, BALLAST_SUM), BALLAST_EINVAL,
               "16 bytes each, overlap without being equal");
    EXPECT_ERR(ballast_allreduce(comm, raw + 8, raw, 4, BALLAST_INT32, BALLAST_SUM), BALLAST_EINVAL, "overlap");
    CHECK(d[0] == 1 && d[3] == 4); /* nothing was written */

    char msg[160];
    snprintf(msg, sizeof msg, "root %d is out of range: the world has %d ranks (0 to %d)", n, n, n - 1);
    EXPECT_ERR(ballast_bcast(comm, n, raw, 4), BALLAST_EINVAL, msg);
    EXPECT_ERR(ballast_bcast(comm, -1, raw, 4), BALLAST_EINVAL, "root -1 is out of range");
    EXPECT_ERR(ballast_bcast(comm, 0, NULL, 4), BALLAST_EINVAL, "buf is NULL");
    EXPECT_ERR(ballast_bcast(comm, 0, raw, (size_t)PTRDIFF_MAX + 1), BALLAST_EINVAL, "PTRDIFF_MAX");
    EXPECT_ERR(ballast_bcast(NULL, 0, raw, 4), BALLAST_EINVAL, "comm is NULL");
    ballast_gathered *g = (ballast_gathered *)&g;
    EXPECT_ERR(ballast_gather(comm, n, raw, 4, &g), BALLAST_EINVAL, msg);
    CHECK(g == NULL);
    g = (ballast_gathered *)&g;
    EXPECT_ERR(ballast_gather(comm, INT32_MIN, raw, 4, &g), BALLAST_EINVAL, "root -2147483648 is out of range");
    EXPECT_ERR(ballast_gather(comm, 0, NULL, 4, &g), BALLAST_EINVAL, "buf is NULL");
    EXPECT_ERR(ballast_gather(comm, 0, raw, (size_t)-1, &g), BALLAST_EINVAL, "PTRDIFF_MAX");
    EXPECT_ERR(ballast_gather(comm, 0, raw, 4, NULL), BALLAST_EINVAL, "out is NULL");
    CHECK(g == NULL);

    size_t *lens = calloc((size_t)n, sizeof *lens);
    g = (ballast_gathered *)&g;
    EXPECT_ERR(ballast_alltoallv(comm, raw, NULL, &g), BALLAST_EINVAL, "send_lens is NULL");
    CHECK(g == NULL);
    EXPECT_ERR(ballast_alltoallv(comm, raw, lens, NULL), BALLAST_EINVAL, "out is NULL");
    EXPECT_ERR(ballast_alltoallv(comm, raw, (const size_t *)(raw + 1), &g), BALLAST_EINVAL,
               "send_lens (0x");
    lens[n - 1] = 1;
    EXPECT_ERR(ballast_alltoallv(comm, NULL, lens, &g), BALLAST_EINVAL, "send is NULL");
    lens[n - 1] = (size_t)PTRDIFF_MAX + 1;
    EXPECT_ERR(ballast_alltoallv(comm, raw, lens, &g), BALLAST_EINVAL, "sum above PTRDIFF_MAX");
    if (n > 1) {
        lens[0] = SIZE_MAX;
        lens[n - 1] = 2;
        EXPECT_ERR(ballast_alltoallv(comm, raw, lens, &g), BALLAST_EINVAL, "sum above PTRDIFF_MAX");
    }
    free(lens);

    int dests[3] = {0, 0, 0};
    const void *bufs[3] = {raw, raw, raw};
    size_t slens[3] = {1, 1, 1};
    EXPECT_ERR(ballast_exchange_sparse(comm, 0, NULL, NULL, NULL, NULL), BALLAST_EINVAL, "out is NULL");
    EXPECT_ERR(ballast_exchange_sparse(NULL, 0, NULL, NULL, NULL, &g), BALLAST_EINVAL, "comm is NULL");
    snprintf(msg, sizeof msg, "n is %d, above the %d other ranks", n, n - 1);
    EXPECT_ERR(ballast_exchange_sparse(comm, (size_t)n, dests, bufs, slens, &g), BALLAST_EINVAL, msg);
    EXPECT_ERR(ballast_exchange_sparse(comm, SIZE_MAX, dests, bufs, slens, &g), BALLAST_EINVAL, "other ranks");
    if (n > 1) {
        int other = (me + 1) % n;
        dests[0] = other;
        EXPECT_ERR(ballast_exchange_sparse(comm, 1, NULL, bufs, slens, &g), BALLAST_EINVAL, "dests is NULL");
        EXPECT_ERR(ballast_exchange_sparse(comm, 1, dests, NULL, slens, &g), BALLAST_EINVAL, "bufs is NULL");
        EXPECT_ERR(ballast_exchange_sparse(comm, 1, dests, bufs, NULL, &g), BALLAST_EINVAL, "lens is NULL");
        EXPECT_ERR(ballast_exchange_sparse(comm, 1, (const int *)(raw + 2), bufs, slens, &g), BALLAST_EINVAL,
                   "is not aligned for its elements (4 bytes)");
        dests[0] = me;
        EXPECT_ERR(ballast_exchange_sparse(comm, 1, dests, bufs, slens, &g), BALLAST_EINVAL, "is this rank");
        dests[0] = n;
        EXPECT_ERR(ballast_exchange_sparse(comm, 1, dests, bufs, slens, &g), BALLAST_EINVAL, "is out of range");
        dests[0] = -3;
        EXPECT_ERR(ballast_exchange_sparse(comm, 1, dests, bufs, slens, &g), BALLAST_EINVAL,
                   "dests[0] is -3: out of range");
        dests[0] = other;
        bufs[0] = NULL;
        EXPECT_ERR(ballast_exchange_sparse(comm, 1, dests, bufs, slens, &g), BALLAST_EINVAL,
                   "bufs[0] is NULL with lens[0] = 1");
        bufs[0] = raw;
        slens[0] = (size_t)PTRDIFF_MAX + 1;
        EXPECT_ERR(ballast_exchange_sparse(comm, 1, dests, bufs, slens, &g), BALLAST_EINVAL,
                   "lens[0] to lens[0] sum above PTRDIFF_MAX");
        slens[0] = 1;
    }
    if (n > 2) {
        dests[0] = dests[1] = (me + 1) % n;
        EXPECT_ERR(ballast_exchange_sparse(comm, 2, dests, bufs, slens, &g), BALLAST_EINVAL, "is named twice");
        dests[1] = (me + 2) % n;
        slens[0] = (size_t)PTRDIFF_MAX;
        slens[1] = 2;
        EXPECT_ERR(ballast_exchange_sparse(comm, 2, dests, bufs, slens, &g), BALLAST_EINVAL,
                   "lens[0] to lens[1] sum above PTRDIFF_MAX");
    }
    CHECK(g == NULL);

    /* The accessors: NULL, out of range, a freed result. */
    size_t count = 0;
    const void *p;
    size_t len;
    int src;
    EXPECT_ERR(ballast_gathered_count(NULL, &count), BALLAST_EINVAL, "gathered is NULL");
    EXPECT_ERR(ballast_gathered_source(NULL, 0, &src), BALLAST_EINVAL, "gathered is NULL");
    EXPECT_ERR(ballast_gathered_at(NULL, 0, &p, &len), BALLAST_EINVAL, "gathered is NULL");
    OK(ballast_allgatherv(comm, raw, 3, &g));
    EXPECT_ERR(ballast_gathered_count(g, NULL), BALLAST_EINVAL, "n is NULL");
    EXPECT_ERR(ballast_gathered_source(g, 0, NULL), BALLAST_EINVAL, "rank is NULL");
    EXPECT_ERR(ballast_gathered_at(g, 0, NULL, &len), BALLAST_EINVAL, "data is NULL");
    EXPECT_ERR(ballast_gathered_at(g, 0, &p, NULL), BALLAST_EINVAL, "len is NULL");
    snprintf(msg, sizeof msg, "index %d is out of range: the result has %d parts (0 to %d)", n, n, n - 1);
    EXPECT_ERR(ballast_gathered_at(g, (size_t)n, &p, &len), BALLAST_EINVAL, msg);
    EXPECT_ERR(ballast_gathered_source(g, SIZE_MAX, &src), BALLAST_EINVAL, "is out of range");
    OK(ballast_gathered_free(g));
    EXPECT_ERR(ballast_gathered_count(g, &count), BALLAST_EINVAL, "not a live collective result handle");
    EXPECT_ERR(ballast_gathered_at(g, 0, &p, &len), BALLAST_EINVAL, "not a live");
    EXPECT_ERR(ballast_gathered_source(g, 0, &src), BALLAST_EINVAL, "not a live");
    EXPECT_ERR(ballast_gathered_count((const ballast_gathered *)comm, &count), BALLAST_EINVAL,
               "is a communicator handle");
}

/* Everything above on `comm`; `seed` tells runs apart. */
static void collectives_suite(ballast_comm *comm, int seed) {
    int me = -1, n = -1;
    OK(ballast_rank(comm, &me));
    OK(ballast_world_size(comm, &n));
    if (me < 0 || n < 1) return;
    misuse_checks(comm, me, n);
    allreduce_checks(comm, me, n, seed);
    bcast_gather_checks(comm, me, n, seed);
    alltoallv_checks(comm, me, n, seed);
    alltoallv_into_checks(comm, me, n, seed);
    exchange_sparse_checks(comm, me, n, seed);
}
