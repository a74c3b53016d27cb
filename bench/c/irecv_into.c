/* The non-blocking receive into the caller's buffer (issue 35, point 3), the C half of
 * bench/capi_irecv_into.sh: under mpirun with an even number of processes (2 for the
 * targets; 4 and 8 recorded), an mpi build of libballast with the bench-twin feature,
 * compiled with -DBALLAST_BENCH_TWIN:
 *
 *   mpirun -n 2 irecv_into SIZE ITERS BLOCKS [one:c|one:rust|one:mpi]
 *
 * Ranks run in pairs, 0 with 1, 2 with 3, ... (every pair at once; the even rank leads),
 * so that -n 4 and -n 8 show the loops with other pairs running beside them.
 *
 * Three loops of ITERS round trips of SIZE bytes, in every block, in an order that rotates
 * from block to block (as bench/c/pingpong.c's `pair`), after one warm-up round trip each:
 *   c     ballast_irecv_into posted, ballast_isend, ballast_wait of both (rank 0; rank 1
 *         waits for its receive, then sends the message back from its buffer), frees;
 *   rust  the same through the Rust API (ballast_bench_twin mode 3: irecv_within, isend,
 *         wait, the message copied into the buffer);
 *   mpi   MPI_Irecv, MPI_Isend, MPI_Wait of both, on a duplicate of MPI_COMM_WORLD.
 * Ballast runs on ballast_comm_from_mpi(MPI_COMM_WORLD): the MPI native path (unless
 * BALLAST_MPI_NATIVE=off). Timed on rank 0 (its pair) with CLOCK_MONOTONIC; prints "irecv_into SIZE
 * <c> <rust> <mpi> <c/rust> <c/mpi>": each loop's median block (ns per half round trip)
 * and the medians of the per-block ratios. With `one:LOOP`, only that loop runs (its warm-up
 * round trip, then BLOCKS blocks) and nothing is printed: for instruction counts under
 * `valgrind --tool=callgrind`, where two BLOCKS values give the cost per round trip by
 * difference (bench/capi_irecv_into.sh's header). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "ballast.h"
#define BENCH_NAME "irecv_into"
#define BENCH_EXIT(code) MPI_Abort(MPI_COMM_WORLD, code)
#include "common.h"

#ifndef BALLAST_BENCH_TWIN
#error "build with -DBALLAST_BENCH_TWIN against an install with --features mpi,bench-twin"
#endif
/* libballast's bench-twin export (not in ballast.h). */
int ballast_bench_twin(ballast_comm *comm, int mode, const void *buf, size_t size, uint64_t iters);

enum { C_INTO, RUST_WITHIN, RAW_MPI, LOOPS };

static void c_loop(ballast_comm *comm, int me, uint8_t *out, uint8_t *in, size_t size, long n) {
    int peer = me ^ 1;
    ballast_status st;
    for (long i = 0; i < n; i++) {
        ballast_request *r, *s;
        TRY(ballast_irecv_into(comm, peer, 1, in, size, &r));
        if (me % 2 == 0) {
            TRY(ballast_isend(comm, peer, 1, out, size, &s));
            TRY(ballast_wait(s, NULL));
            TRY(ballast_wait(r, &st));
        } else {
            TRY(ballast_wait(r, &st));
            TRY(ballast_isend(comm, peer, 1, in, st.len, &s));
            TRY(ballast_wait(s, NULL));
        }
        TRY(ballast_request_free(r));
        TRY(ballast_request_free(s));
    }
}

static void mpi_loop(MPI_Comm comm, int me, uint8_t *out, uint8_t *in, size_t size, long n) {
    int peer = me ^ 1;
    for (long i = 0; i < n; i++) {
        MPI_Request r, s;
        MPI_Status st;
        MPI_Irecv(in, (int)size, MPI_BYTE, peer, 1, comm, &r);
        if (me % 2 == 0) {
            MPI_Isend(out, (int)size, MPI_BYTE, peer, 1, comm, &s);
            MPI_Wait(&s, MPI_STATUS_IGNORE);
            MPI_Wait(&r, &st);
        } else {
            MPI_Wait(&r, &st);
            int len;
            MPI_Get_count(&st, MPI_BYTE, &len);
            MPI_Isend(in, len, MPI_BYTE, peer, 1, comm, &s);
            MPI_Wait(&s, MPI_STATUS_IGNORE);
        }
    }
}

static void one_loop(int which, ballast_comm *comm, MPI_Comm raw, int me, uint8_t *out, uint8_t *in, size_t size,
                     long n) {
    switch (which) {
    case C_INTO: c_loop(comm, me, out, in, size, n); break;
    case RUST_WITHIN: TRY(ballast_bench_twin(comm, 3, out, size, (uint64_t)n)); break;
    default: mpi_loop(raw, me, out, in, size, n); break;
    }
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int only = -1;
    if (argc == 5) {
        const char *names[LOOPS] = {"one:c", "one:rust", "one:mpi"};
        for (int w = 0; w < LOOPS; w++)
            if (strcmp(argv[4], names[w]) == 0) only = w;
    }
    if ((argc != 4 && !(argc == 5 && only >= 0)) || n < 2 || n % 2 != 0) {
        if (me == 0)
            fprintf(stderr, "usage: mpirun -n 2 (or another even number) irecv_into SIZE ITERS BLOCKS "
                            "[one:c|one:rust|one:mpi]\n");
        MPI_Finalize();
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 10);
    long iters = strtol(argv[2], NULL, 10), blocks = strtol(argv[3], NULL, 10);
    if (iters < 1 || blocks < 1 || size > (size_t)1 << 30) {
        if (me == 0) fprintf(stderr, "irecv_into: ITERS and BLOCKS at least 1, SIZE at most 1 GiB\n");
        MPI_Finalize();
        return 2;
    }
    ballast_comm *comm;
    TRY(ballast_comm_from_mpi(MPI_COMM_WORLD, NULL, &comm));
    MPI_Comm raw;
    MPI_Comm_dup(MPI_COMM_WORLD, &raw);
    uint8_t *out = malloc(size ? size : 1), *in = malloc(size ? size : 1);
    memset(out, 7, size);
    double *ns = calloc((size_t)blocks * LOOPS, sizeof(double));
    if (only >= 0) {
        one_loop(only, comm, raw, me, out, in, size, 1); /* warm-up */
        for (long b = 0; b < blocks; b++) one_loop(only, comm, raw, me, out, in, size, iters);
        blocks = 0; /* nothing timed or printed */
    }
    for (int w = 0; w < LOOPS && only < 0; w++) one_loop(w, comm, raw, me, out, in, size, 1); /* warm-up */
    for (long b = 0; b < blocks; b++) {
        for (int k = 0; k < LOOPS; k++) {
            int which = (int)((b + k) % LOOPS); /* every loop goes first in turn */
            double t0 = now_ns();
            one_loop(which, comm, raw, me, out, in, size, iters);
            ns[b * LOOPS + which] = (now_ns() - t0) / (2.0 * (double)iters);
        }
    }
    if (me == 0 && only < 0) {
        double *col = calloc((size_t)blocks, sizeof(double)), med[LOOPS], ratio[2];
        for (int w = 0; w < LOOPS; w++) {
            for (long b = 0; b < blocks; b++) col[b] = ns[b * LOOPS + w];
            med[w] = median(col, blocks);
        }
        const int den[2] = {RUST_WITHIN, RAW_MPI};
        for (int k = 0; k < 2; k++) {
            for (long b = 0; b < blocks; b++) col[b] = ns[b * LOOPS + C_INTO] / ns[b * LOOPS + den[k]];
            ratio[k] = median(col, blocks);
        }
        printf("irecv_into %zu %.1f %.1f %.1f %.4f %.4f\n", size, med[C_INTO], med[RUST_WITHIN], med[RAW_MPI],
               ratio[0], ratio[1]);
        free(col);
    }
    free(ns);
    free(out);
    free(in);
    MPI_Comm_free(&raw);
    TRY(ballast_comm_free(comm));
    MPI_Finalize();
    return 0;
}
