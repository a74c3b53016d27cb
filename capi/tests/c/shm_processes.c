/* The shm transport from C, one rank per process (issue 36): started N times by a
 * launcher (mpirun, srun, or capi/tests/shm_processes.rs with srun's variables) with
 * BALLAST_TRANSPORT=shm, no MPI call. Point to point (a ring of 10 B and 1 MiB, any
 * source, truncation), credits under a flood (3,000 messages each, 8 B and 40 KiB,
 * before any receive), the collectives (allreduce, bcast, gather, alltoallv, the sparse
 * exchange), and the footprint's shm fields against ballast_predict. Every rank prints
 * "capi shm rank R of N: P passed, F failed" and exits non-zero on a failure. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

static unsigned char byte_of(int from, int to, size_t i) { return (unsigned char)(i * 31 + from * 7 + to); }

static void ring(ballast_comm *comm, int rank, int size) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    size_t lens[] = {10, (size_t)1 << 20, 0};
    for (int k = 0; k < 3; k++) {
        size_t len = lens[k];
        unsigned char *out = malloc(len + 1), *in = malloc(len + 1);
        for (size_t i = 0; i < len; i++) out[i] = byte_of(rank, next, i);
        ballast_request *req = NULL;
        OK(ballast_isend(comm, next, (uint32_t)k, out, len, &req));
        ballast_status st;
        OK(ballast_recv(comm, prev, k, in, len + 1, &st));
        CHECK(st.source == prev && st.tag == (uint32_t)k && st.len == len);
        int same = 1;
        for (size_t i = 0; i < len; i++) same &= in[i] == byte_of(prev, rank, i);
        CHECK(same);
        OK(ballast_wait(req, NULL));
        OK(ballast_request_free(req));
        free(out);
        free(in);
    }
}

static void any_source_and_truncation(ballast_comm *comm, int rank, int size) {
    if (rank != 0) {
        int v = rank;
        OK(ballast_send(comm, 0, 20, &v, sizeof v));
    } else {
        int seen = 0;
        for (int i = 1; i < size; i++) {
            int v = -1;
            ballast_status st;
            OK(ballast_recv(comm, BALLAST_ANY_SOURCE, 20, &v, sizeof v, &st));
            CHECK(v == st.source && v > 0 && v < size);
            seen |= 1 << v;
        }
        CHECK(seen == ((1 << size) - 2));
    }
    if (size < 2) return;
    char big[100], small[10];
    if (rank == 1) {
        memset(big, 'x', sizeof big);
        OK(ballast_send(comm, 0, 21, big, sizeof big));
    } else if (rank == 0) {
        ballast_status st;
        EXPECT_ERR(ballast_recv(comm, 1, 21, small, sizeof small, &st), BALLAST_ETRUNC, "");
        OK(ballast_recv(comm, 1, 21, big, sizeof big, &st));
        CHECK(st.len == sizeof big && big[99] == 'x');
    }
}

/* Credits under a flood: every rank sends 3,000 messages (8 B, and every 100th 40 KiB, by
 * CMA unless BALLAST_SHM_CMA=off) to the next rank with blocking sends before it receives
 * any; the ring of each rank holds 64 cells, so senders wait for credits while their
 * receivers, sending too, take what arrives. Every message comes, in order. */
static void flood(ballast_comm *comm, int rank, int size) {
    if (size < 2) return;
    enum { N = 3000, BIG = 40 << 10 };
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    unsigned char *buf = malloc(BIG);
    CHECK(buf != NULL);
    if (buf == NULL) return;
    for (int k = 0; k < N; k++) {
        size_t len = k % 100 == 99 ? BIG : 8;
        memset(buf, (unsigned char)(k + rank), len);
        memcpy(buf, &k, sizeof k);
        OK(ballast_send(comm, next, 30, buf, len));
    }
    int in_order = 1, intact = 1;
    for (int k = 0; k < N; k++) {
        ballast_status st;
        OK(ballast_recv(comm, prev, 30, buf, BIG, &st));
        int got = -1;
        memcpy(&got, buf, sizeof got);
        in_order &= got == k && st.len == (k % 100 == 99 ? (size_t)BIG : 8);
        intact &= buf[st.len - 1] == (unsigned char)(k + prev);
    }
    CHECK(in_order);
    CHECK(intact);
    free(buf);
}

static void collectives(ballast_comm *comm, int rank, int size) {
    int64_t mine[3] = {rank, rank, rank}, sum = 0, mn = 0, mx = 0;
    OK(ballast_allreduce(comm, &mine[0], &sum, 1, BALLAST_INT64, BALLAST_SUM));
    OK(ballast_allreduce(comm, &mine[1], &mn, 1, BALLAST_INT64, BALLAST_MIN));
    OK(ballast_allreduce(comm, &mine[2], &mx, 1, BALLAST_INT64, BALLAST_MAX));
    CHECK(sum == (int64_t)size * (size - 1) / 2 && mn == 0 && mx == size - 1);
    double d = 0.5 * rank, dsum = 0;
    OK(ballast_allreduce(comm, &d, &dsum, 1, BALLAST_DOUBLE, BALLAST_SUM));
    CHECK(dsum == 0.25 * size * (size - 1));
    char b[16] = {0};
    if (rank == size - 1) strcpy(b, "from the last");
    OK(ballast_bcast(comm, size - 1, b, sizeof b));
    CHECK(strcmp(b, "from the last") == 0);
    ballast_gathered *g = NULL;
    OK(ballast_gather(comm, 0, &rank, sizeof rank, &g));
    CHECK((rank == 0) == (g != NULL));
    if (g) {
        size_t n = 0;
        OK(ballast_gathered_count(g, &n));
        CHECK(n == (size_t)size);
        for (size_t i = 0; i < n; i++) {
            const void *p = NULL;
            size_t len = 0;
            OK(ballast_gathered_at(g, i, &p, &len));
            int v = -1;
            if (len == sizeof v) memcpy(&v, p, sizeof v);
            CHECK(len == sizeof v && v == (int)i);
        }
        OK(ballast_gathered_free(g));
    }
    /* alltoallv: rank r sends r + d + 1 bytes to rank d. */
    size_t *lens = calloc((size_t)size, sizeof *lens), total = 0;
    for (int dd = 0; dd < size; dd++) total += lens[dd] = (size_t)(rank + dd + 1);
    unsigned char *send = malloc(total), *at = send;
    for (int dd = 0; dd < size; dd++)
        for (size_t i = 0; i < lens[dd]; i++) *at++ = byte_of(rank, dd, i);
    OK(ballast_alltoallv(comm, send, lens, &g));
    for (int s = 0; s < size; s++) {
        const void *p = NULL;
        size_t len = 0;
        OK(ballast_gathered_part(g, s, &p, &len));
        int same = len == (size_t)(s + rank + 1);
        for (size_t i = 0; same && i < len; i++) same &= ((const unsigned char *)p)[i] == byte_of(s, rank, i);
        CHECK(same);
    }
    OK(ballast_gathered_free(g));
    free(send);
    free(lens);
    /* The sparse exchange: rank r sends its rank to r + 1 and r + 3 (when another rank). */
    int dests[2], n = 0;
    for (int k = 1; k <= 3; k += 2)
        if (k % size != 0 && (n == 0 || dests[0] != (rank + k) % size)) dests[n++] = (rank + k) % size;
    const void *bufs[2] = {&rank, &rank};
    size_t blens[2] = {sizeof rank, sizeof rank};
    OK(ballast_exchange_sparse(comm, (size_t)n, dests, bufs, blens, &g));
    size_t count = 0;
    OK(ballast_gathered_count(g, &count));
    size_t want = 0;
    int last = -1, sorted = 1;
    for (int s = 0; s < size; s++)
        for (int k = 1; k <= 3; k += 2)
            if (s != rank && (s + k) % size == rank && !(k == 3 && (s + 1) % size == rank)) want++;
    CHECK(count == want);
    for (size_t i = 0; i < count; i++) {
        int src = -1, v = -1;
        const void *p = NULL;
        size_t len = 0;
        OK(ballast_gathered_source(g, i, &src));
        OK(ballast_gathered_at(g, i, &p, &len));
        if (len == sizeof v) memcpy(&v, p, sizeof v);
        CHECK(v == src);
        sorted &= src > last;
        last = src;
    }
    CHECK(sorted);
    OK(ballast_gathered_free(g));
}

static void footprint(ballast_comm *comm, int size) {
    ballast_footprint fp, pred;
    OK(ballast_comm_footprint(comm, &fp));
    CHECK(fp.shm_segment > 0 && fp.shm_segment == fp.shared_receive_queue);
    CHECK(fp.shm_peers_mapped == fp.peers_connected);
    CHECK(fp.shm_mapped == (uint64_t)fp.shm_peers_mapped * fp.shm_segment);
    ballast_config *cfg = NULL;
    OK(ballast_config_new(&cfg));
    OK(ballast_config_set(cfg, "transport", "shm"));
    OK(ballast_predict(cfg, fp.peers_connected, (uint32_t)size, 1, &pred));
    CHECK(pred.total == fp.total && pred.shm_segment == fp.shm_segment && pred.shm_mapped == fp.shm_mapped);
    OK(ballast_config_free(cfg));
}

int main(void) {
    ballast_comm *comm = NULL;
    int rc = ballast_comm_from_env(NULL, &comm);
    if (rc != 0) {
        char msg[512];
        ballast_last_error(msg, sizeof msg);
        fprintf(stderr, "capi shm: ballast_comm_from_env: %d: %s\n", rc, msg);
        return 2;
    }
    int rank = -1, size = 0;
    OK(ballast_rank(comm, &rank));
    OK(ballast_world_size(comm, &size));
    check_rank = rank;
    ring(comm, rank, size);
    any_source_and_truncation(comm, rank, size);
    flood(comm, rank, size);
    collectives(comm, rank, size);
    footprint(comm, size);
    OK(ballast_comm_free(comm));
    printf("capi shm rank %d of %d: %d passed, %d failed\n", rank, size, atomic_load(&passed), atomic_load(&failed));
    return atomic_load(&failed) == 0 ? 0 : 1;
}
