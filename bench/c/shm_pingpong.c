/* Ping-pong over Ballast's shared-memory transport beside Open MPI's own shared memory
 * (the `sm` BTL, vader), in one job: the C half of bench/shm_vs_vader.sh (issue 36).
 *
 *   BALLAST_TRANSPORT=shm mpirun --mca pml ob1 --mca btl self,vader --bind-to core -n 2 \
 *       ./shm_pingpong SIZE ITERS BLOCKS
 *
 * Built against a libballast installed with --features mpi (ballast.pc defines
 * BALLAST_HAVE_MPI). The program calls MPI_Init itself, then ballast_comm_from_env(NULL):
 * with BALLAST_TRANSPORT=shm the ranks meet through that MPI and every Ballast byte then
 * goes through Ballast's shm segments, while MPI's go through vader. Rank 0 sends SIZE bytes,
 * rank 1 receives them into a buffer of SIZE bytes and sends them back, rank 0 receives the
 * echo; two loops of that round trip:
 *   mpi      MPI_Send + MPI_Recv on MPI_COMM_WORLD (MPI_BYTE)
 *   ballast  ballast_send + ballast_recv into the buffer (the blocking pair)
 * Warm-up: one block of each loop, untimed. Then BLOCKS blocks of ITERS round trips of each
 * loop, which goes first alternating from block to block, each timed on rank 0 with
 * CLOCK_MONOTONIC. Adjacent blocks share the host's load, so the per-block ratio cancels
 * most of it. Prints from rank 0 one line:
 *   shm_pingpong SIZE ITERS BLOCKS MPI_NS BALLAST_NS MPI_MBS BALLAST_MBS RATIO_NS RATIO_MBS
 * MPI_NS / BALLAST_NS: the median block's half round trip (ns); MPI_MBS / BALLAST_MBS: SIZE
 * over that half round trip (MB/s, 1 MB = 10^6 B); RATIO_NS: the median over the blocks of
 * ballast ns / mpi ns (latency: below 1 is Ballast faster); RATIO_MBS: the median of
 * ballast MB/s / mpi MB/s (bandwidth: above 1 is Ballast faster). And on stderr, from rank
 * 0, a line "# ..." with Ballast's notes (which transport ran) and its footprint's shm
 * fields, checked: a run whose communicator is not over shm (shm_segment 0) fails. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ballast.h"
#ifndef BALLAST_HAVE_MPI
#error "shm_pingpong needs an mpi build of libballast (its ballast.pc defines BALLAST_HAVE_MPI)"
#endif
#include <mpi.h>
#define BENCH_NAME "shm_pingpong"
#define BENCH_EXIT(code) MPI_Abort(MPI_COMM_WORLD, code)
#include "common.h"

enum { MPI_LOOP, BALLAST_LOOP, LOOPS };

/* N round trips of MPI's loop between ranks 0 and 1. */
static void mpi_loop(int me, uint8_t *buf, size_t size, long n) {
    for (long i = 0; i < n; i++) {
        if (me == 0) {
            MPI_Send(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)size, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
}

/* N round trips of Ballast's loop: ballast_send, ballast_recv into `buf`. */
static void ballast_loop(ballast_comm *comm, int me, uint8_t *buf, size_t size, long n) {
    ballast_status st;
    int peer = 1 - me;
    for (long i = 0; i < n; i++) {
        if (me == 0) TRY(ballast_send(comm, peer, 1, buf, size));
        TRY(ballast_recv(comm, peer, 1, buf, size, &st));
        if (st.len != size) {
            fprintf(stderr, "shm_pingpong: received %zu B, expected %zu\n", st.len, size);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (me == 1) TRY(ballast_send(comm, peer, 1, buf, size));
    }
}

static void one_loop(ballast_comm *comm, int which, int me, uint8_t *buf, size_t size, long n) {
    if (which == MPI_LOOP)
        mpi_loop(me, buf, size, n);
    else
        ballast_loop(comm, me, buf, size, n);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n_ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n_ranks);
    if (argc != 4 || n_ranks != 2) {
        if (me == 0)
            fprintf(stderr, "usage: BALLAST_TRANSPORT=shm mpirun -n 2 shm_pingpong SIZE ITERS BLOCKS (got %d ranks)\n",
                    n_ranks);
        MPI_Finalize();
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 10);
    long iters = strtol(argv[2], NULL, 10), blocks = strtol(argv[3], NULL, 10);
    if (iters < 1 || blocks < 1 || size > (size_t)INT32_MAX) {
        if (me == 0) fprintf(stderr, "shm_pingpong: ITERS and BLOCKS at least 1, SIZE below 2^31\n");
        MPI_Finalize();
        return 2;
    }

    ballast_comm *comm;
    TRY(ballast_comm_from_env(NULL, &comm)); /* BALLAST_TRANSPORT=shm: meets through this MPI */
    int bme;
    TRY(ballast_rank(comm, &bme));
    if (bme != me) {
        fprintf(stderr, "shm_pingpong: Ballast rank %d is MPI rank %d\n", bme, me);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    uint8_t *buf = malloc(size ? size : 1);
    memset(buf, 7, size);
    double *ns = calloc((size_t)(blocks * LOOPS), sizeof(double));
    for (int w = 0; w < LOOPS; w++) one_loop(comm, w, me, buf, size, iters); /* warm-up */
    MPI_Barrier(MPI_COMM_WORLD);
    for (long b = 0; b < blocks; b++) {
        for (int k = 0; k < LOOPS; k++) {
            int which = (int)((b + k) % LOOPS); /* each loop goes first every other block */
            double t0 = now_ns();
            one_loop(comm, which, me, buf, size, iters);
            if (me == 0) ns[b * LOOPS + which] = (now_ns() - t0) / (2.0 * (double)iters);
        }
    }

    ballast_footprint fp;
    TRY(ballast_comm_footprint(comm, &fp));
    if (me == 0) {
        char notes[1024] = "";
        size_t full = 0;
        TRY(ballast_comm_notes(comm, notes, sizeof notes, &full));
        for (char *c = notes; *c; c++)
            if (*c == '\n') *c = ' ';
        fprintf(stderr, "# rank 0: shm_segment %" PRIu64 " B, shm_peers_mapped %u, total %" PRIu64 " B; notes: %s\n",
                fp.shm_segment, fp.shm_peers_mapped, fp.total, notes[0] ? notes : "(none)");
        if (fp.shm_segment == 0 || fp.shm_peers_mapped != 1) {
            fprintf(stderr, "shm_pingpong: Ballast is not over shm (set BALLAST_TRANSPORT=shm)\n");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        double med[LOOPS], ratio_ns, ratio_bw, *col = calloc((size_t)blocks, sizeof(double));
        for (int w = 0; w < LOOPS; w++) {
            for (long b = 0; b < blocks; b++) col[b] = ns[b * LOOPS + w];
            med[w] = median(col, blocks);
        }
        for (long b = 0; b < blocks; b++) col[b] = ns[b * LOOPS + BALLAST_LOOP] / ns[b * LOOPS + MPI_LOOP];
        ratio_ns = median(col, blocks);
        for (long b = 0; b < blocks; b++) col[b] = ns[b * LOOPS + MPI_LOOP] / ns[b * LOOPS + BALLAST_LOOP];
        ratio_bw = median(col, blocks);
        /* bytes per ns is GB/s: x 1000 for MB/s */
        printf("shm_pingpong %zu %ld %ld %.1f %.1f %.2f %.2f %.4f %.4f\n", size, iters, blocks, med[MPI_LOOP],
               med[BALLAST_LOOP], (double)size / med[MPI_LOOP] * 1000.0, (double)size / med[BALLAST_LOOP] * 1000.0,
               ratio_ns, ratio_bw);
        fflush(stdout);
        free(col);
    }
    free(ns);
    free(buf);
    TRY(ballast_comm_free(comm)); /* collective: before MPI_Finalize */
    MPI_Finalize();
    return 0;
}
