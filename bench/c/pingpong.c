/* Ping-pong through libballast's C ABI, the C half of bench/capi_pingpong.sh (the Rust half
 * is the bench crate's `capi_twin`, the same loop through the Rust API).
 *
 *   pingpong local SIZE ITERS BLOCKS [recv]   2 ranks as threads (ballast_local_run)
 *   pingpong self SIZE ITERS BLOCKS [recv]    1 rank sending to itself: the calls' own cost
 *   mpirun -n 2 pingpong mpi SIZE ITERS BLOCKS [recv]   (an mpi build: MPI_Init_thread,
 *                                             then ballast_comm_from_mpi on MPI_COMM_WORLD)
 *
 * Rank 0 sends SIZE bytes with ballast_send; rank 1 receives them with ballast_irecv +
 * ballast_wait (the message's bytes read in place with ballast_request_data, as the Rust
 * API hands over the message's own buffer) and sends them back; rank 0 receives the echo
 * the same way. With `recv`, both receive with the blocking ballast_recv into a buffer of
 * SIZE bytes instead. One warm-up round trip, then BLOCKS blocks of ITERS round trips, each
 * timed on rank 0 with CLOCK_MONOTONIC. Prints "c|c-recv <transport> <SIZE> <ns>" from
 * rank 0: the median block's half round trip (with `self`, one send and its receive). The
 * configuration is the environment's (BALLAST_*), as the Rust half's. */
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

struct plan {
    int blocking; /* receive with ballast_recv into a buffer instead of irecv + wait */
    size_t size;
    long iters, blocks;
    double *ns; /* per block, filled by rank 0 */
};

static void die(int rc, const char *what) {
    char msg[512];
    ballast_last_error(msg, sizeof msg);
    fprintf(stderr, "pingpong: %s: %d: %s\n", what, rc, msg);
    exit(1);
}
#define TRY(call)                     \
    do {                              \
        int rc_ = (call);             \
        if (rc_ != 0) die(rc_, #call); \
    } while (0)

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
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
    ballast_status st;
    for (long b = -1; b < p->blocks; b++) {
        long n = b < 0 ? 1 : p->iters; /* block -1: the warm-up round trip */
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            ballast_request *r;
            const void *data;
            size_t len;
            if (p->blocking) {
                if (me == 0) TRY(ballast_send(comm, peer, 1, buf, p->size));
                TRY(ballast_recv(comm, peer, 1, buf, p->size, &st));
                if (me == 1) TRY(ballast_send(comm, peer, 1, buf, st.len));
                continue;
            }
            if (me == 0) TRY(ballast_send(comm, peer, 1, buf, p->size));
            TRY(ballast_irecv(comm, peer, 1, &r));
            TRY(ballast_wait(r, &st));
            TRY(ballast_request_data(r, &data, &len));
            if (me == 1) TRY(ballast_send(comm, peer, 1, data, len));
            TRY(ballast_request_free(r));
        }
        if (b >= 0 && me == 0) p->ns[b] = (now_ns() - t0) / ((n_ranks == 1 ? 1.0 : 2.0) * (double)n);
    }
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int self = argc >= 5 && strcmp(argv[1], "self") == 0;
    int blocking = argc == 6 && strcmp(argv[5], "recv") == 0;
    if ((argc != 5 && !blocking) || (strcmp(argv[1], "local") != 0 && strcmp(argv[1], "mpi") != 0 && !self)) {
        fprintf(stderr, "usage: pingpong local|self|mpi SIZE ITERS BLOCKS [recv]\n");
        return 2;
    }
    struct plan p = {blocking, strtoull(argv[2], NULL, 10), strtol(argv[3], NULL, 10), strtol(argv[4], NULL, 10), NULL};
    if (p.iters < 1 || p.blocks < 1) {
        fprintf(stderr, "pingpong: ITERS and BLOCKS must be at least 1\n");
        return 2;
    }
    p.ns = calloc((size_t)p.blocks, sizeof(double));
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
    if (me == 0) {
        qsort(p.ns, (size_t)p.blocks, sizeof(double), cmp_double);
        printf("%s %s %zu %.1f\n", blocking ? "c-recv" : "c", argv[1], p.size, p.ns[p.blocks / 2]);
    }
    free(p.ns);
    return 0;
}
