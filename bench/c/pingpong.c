/* Ping-pong through libballast's C ABI, the C half of bench/capi_pingpong.sh.
 *
 *   pingpong local SIZE ITERS BLOCKS [recv|pair|one:LOOP]   2 ranks as threads (ballast_local_run)
 *   pingpong self SIZE ITERS BLOCKS [recv|pair|one:LOOP]    1 rank sending to itself: the calls' own cost
 *   mpirun -n 2 pingpong mpi SIZE ITERS BLOCKS [recv|pair|one:LOOP]   (an mpi build: MPI_Init_thread,
 *                                             then ballast_comm_from_mpi on MPI_COMM_WORLD)
 *
 * Rank 0 sends SIZE bytes with ballast_send; rank 1 receives them with ballast_irecv +
 * ballast_wait (the message's bytes read in place with ballast_request_data, as the Rust
 * API hands over the message's own buffer) and sends them back; rank 0 receives the echo
 * the same way. With `recv`, both receive with the blocking ballast_recv into a buffer of
 * SIZE bytes instead. One warm-up round trip, then BLOCKS blocks of ITERS round trips, each
 * timed on rank 0 with CLOCK_MONOTONIC. Prints "c|c-recv <transport> <SIZE> <ns>" from
 * rank 0: the median block's half round trip (with `self`, one send and its receive).
 *
 * `pair` (a library installed with --features bench-twin, compiled with
 * -DBALLAST_BENCH_TWIN) runs five loops in every block, in an order that rotates from block
 * to block, on the same communicator: `c` and `c-recv` as above, and their Rust-API twins
 * (ballast_bench_twin: `rust-irecv` = irecv + wait, `rust` = recv, `rust-into` = recv_into
 * a buffer of SIZE bytes, the Rust form of ballast_recv). Adjacent blocks share the host's
 * load, so the per-block ratios cancel most of it. Prints "pair <transport> <SIZE> <c>
 * <rust-irecv> <c-recv> <rust> <rust-into> <c/rust-irecv> <c-recv/rust> <c-recv/rust-into>":
 * the median block of each loop (ns per half round trip) and the medians of the per-block
 * ratios. `one:LOOP` (LOOP one of c, rust-irecv, c-recv, rust, rust-into) runs only that
 * loop of `pair`, BLOCKS blocks, and prints "one LOOP <transport> <SIZE> <ns>": for counting
 * one loop's instructions (e.g. callgrind, 2 blocks against 4). The configuration is the environment's (BALLAST_*), as the Rust half's. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ballast.h"
#ifdef BALLAST_HAVE_MPI
#include <mpi.h>
#endif
#define BENCH_NAME "pingpong"
#include "common.h"

#ifdef BALLAST_BENCH_TWIN
/* libballast's bench-twin export (not in ballast.h): ITERS round trips of this loop through
 * the Rust API; mode 0 receives with recv, 1 with irecv + wait, 2 with recv_into. */
int ballast_bench_twin(ballast_comm *comm, int mode, const void *buf, size_t size, uint64_t iters);
#endif

enum { C_IRECV, RUST_IRECV, C_RECV, RUST_RECV, RUST_INTO, LOOPS };
static const char *const LOOP_NAMES[LOOPS] = {"c", "rust-irecv", "c-recv", "rust", "rust-into"};

struct plan {
    int blocking; /* receive with ballast_recv into a buffer instead of irecv + wait */
    int pair;     /* the five loops in every block (ns has LOOPS entries per block) */
    int only;     /* with `one:LOOP`: that loop alone, else -1 */
    size_t size;
    long iters, blocks;
    double *ns; /* per block, filled by rank 0 */
};

/* N round trips of the C loop (ballast_recv into `buf` when `blocking`). */
static void c_loop(ballast_comm *comm, int me, int peer, int blocking, uint8_t *buf, size_t size, long n) {
    ballast_status st;
    for (long i = 0; i < n; i++) {
        ballast_request *r;
        const void *data;
        size_t len;
        if (blocking) {
            if (me == 0) TRY(ballast_send(comm, peer, 1, buf, size));
            TRY(ballast_recv(comm, peer, 1, buf, size, &st));
            if (me == 1) TRY(ballast_send(comm, peer, 1, buf, st.len));
            continue;
        }
        if (me == 0) TRY(ballast_send(comm, peer, 1, buf, size));
        TRY(ballast_irecv(comm, peer, 1, &r));
        TRY(ballast_wait(r, &st));
        TRY(ballast_request_data(r, &data, &len));
        if (me == 1) TRY(ballast_send(comm, peer, 1, data, len));
        TRY(ballast_request_free(r));
    }
}

/* N round trips of loop `which` (C_IRECV .. RUST_INTO). */
static void one_loop(ballast_comm *comm, int me, int peer, int which, uint8_t *buf, size_t size, long n) {
    if (which == C_IRECV || which == C_RECV) {
        c_loop(comm, me, peer, which == C_RECV, buf, size, n);
        return;
    }
#ifdef BALLAST_BENCH_TWIN
    TRY(ballast_bench_twin(comm, which == RUST_IRECV ? 1 : which == RUST_INTO ? 2 : 0, buf, size, (uint64_t)n));
#else
    fprintf(stderr, "pingpong: pair needs -DBALLAST_BENCH_TWIN and a bench-twin install\n");
    exit(2);
#endif
}

static int rank_main(ballast_comm *comm, void *user) {
    struct plan *p = user;
    int me;
    TRY(ballast_rank(comm, &me));
    int n_ranks;
    TRY(ballast_world_size(comm, &n_ranks));
    int peer = n_ranks == 1 ? 0 : 1 - me; /* a world of one ("self"): to itself */
    uint8_t *buf = malloc(p->size ? p->size : 1);
    memset(buf, 7, p->size);
    double legs = n_ranks == 1 ? 1.0 : 2.0;
    if (p->only >= 0) {
        one_loop(comm, me, peer, p->only, buf, p->size, 1); /* warm-up */
        for (long b = 0; b < p->blocks; b++) {
            double t0 = now_ns();
            one_loop(comm, me, peer, p->only, buf, p->size, p->iters);
            if (me == 0) p->ns[b] = (now_ns() - t0) / (legs * (double)p->iters);
        }
        free(buf);
        return 0;
    }
    if (p->pair) {
        for (int w = 0; w < LOOPS; w++) one_loop(comm, me, peer, w, buf, p->size, 1); /* warm-up */
        for (long b = 0; b < p->blocks; b++) {
            for (int k = 0; k < LOOPS; k++) {
                int which = (int)((b + k) % LOOPS); /* every loop goes first in turn */
                double t0 = now_ns();
                one_loop(comm, me, peer, which, buf, p->size, p->iters);
                if (me == 0) p->ns[b * LOOPS + which] = (now_ns() - t0) / (legs * (double)p->iters);
            }
        }
        free(buf);
        return 0;
    }
    for (long b = -1; b < p->blocks; b++) {
        long n = b < 0 ? 1 : p->iters; /* block -1: the warm-up round trip */
        double t0 = now_ns();
        one_loop(comm, me, peer, p->blocking ? C_RECV : C_IRECV, buf, p->size, n);
        if (b >= 0 && me == 0) p->ns[b] = (now_ns() - t0) / (legs * (double)n);
    }
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int self = argc >= 5 && strcmp(argv[1], "self") == 0;
    int blocking = argc == 6 && strcmp(argv[5], "recv") == 0;
    int pair = argc == 6 && strcmp(argv[5], "pair") == 0;
    int only = -1;
    for (int w = 0; argc == 6 && strncmp(argv[5], "one:", 4) == 0 && w < LOOPS; w++)
        if (strcmp(argv[5] + 4, LOOP_NAMES[w]) == 0) only = w;
    if ((argc != 5 && !blocking && !pair && only < 0) || (strcmp(argv[1], "local") != 0 && strcmp(argv[1], "mpi") != 0 && !self)) {
        fprintf(stderr, "usage: pingpong local|self|mpi SIZE ITERS BLOCKS [recv|pair|one:c|rust-irecv|c-recv|rust|rust-into]\n");
        return 2;
    }
    struct plan p = {blocking, pair, only, strtoull(argv[2], NULL, 10), strtol(argv[3], NULL, 10), strtol(argv[4], NULL, 10), NULL};
    if (p.iters < 1 || p.blocks < 1) {
        fprintf(stderr, "pingpong: ITERS and BLOCKS must be at least 1\n");
        return 2;
    }
    p.ns = calloc((size_t)p.blocks * (pair ? LOOPS : 1), sizeof(double));
    ballast_config *cfg;
    TRY(ballast_config_new(&cfg));
    int me = 0;
    if (strcmp(argv[1], "local") == 0 || self) {
        TRY(ballast_config_set(cfg, "transport", "local"));
        TRY(ballast_local_run(self ? 1 : 2, cfg, rank_main, &p));
    } else {
#ifdef BALLAST_HAVE_MPI
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
        ballast_comm *comm;
        TRY(ballast_comm_from_mpi(MPI_COMM_WORLD, cfg, &comm));
        TRY(ballast_rank(comm, &me));
        rank_main(comm, &p);
        TRY(ballast_comm_free(comm));
        MPI_Finalize();
#else
        fprintf(stderr, "pingpong: built without BALLAST_HAVE_MPI (use an mpi install's ballast.pc)\n");
        return 2;
#endif
    }
    TRY(ballast_config_free(cfg));
    if (me == 0 && pair) {
        double *col = calloc((size_t)p.blocks, sizeof(double)), med[LOOPS], ratio[3];
        /* c / rust-irecv, c-recv / rust, c-recv / rust-into: per block, then the median */
        const int num[3] = {C_IRECV, C_RECV, C_RECV}, den[3] = {RUST_IRECV, RUST_RECV, RUST_INTO};
        for (int w = 0; w < LOOPS; w++) {
            for (long b = 0; b < p.blocks; b++) col[b] = p.ns[b * LOOPS + w];
            med[w] = median(col, p.blocks);
        }
        for (int k = 0; k < 3; k++) {
            for (long b = 0; b < p.blocks; b++) col[b] = p.ns[b * LOOPS + num[k]] / p.ns[b * LOOPS + den[k]];
            ratio[k] = median(col, p.blocks);
        }
        printf("pair %s %zu %.1f %.1f %.1f %.1f %.1f %.4f %.4f %.4f\n", argv[1], p.size, med[C_IRECV],
               med[RUST_IRECV], med[C_RECV], med[RUST_RECV], med[RUST_INTO], ratio[0], ratio[1], ratio[2]);
        free(col);
    } else if (me == 0 && only >= 0) {
        printf("one %s %s %zu %.1f\n", LOOP_NAMES[only], argv[1], p.size, median(p.ns, p.blocks));
    } else if (me == 0) {
        printf("%s %s %zu %.1f\n", blocking ? "c-recv" : "c", argv[1], p.size, median(p.ns, p.blocks));
    }
    free(p.ns);
    return 0;
}
