/* ballast_mpi_run_ranks (an `mpi` build, under mpirun -n 2; no sanitizers, which clash with
 * MPI): 4 Ballast ranks on the MPI processes, rank r in process r % size, as threads. Each
 * rank checks its rank, the world size, its process and the notes (transport mpi, engine
 * path), sends every other rank a message of its own length and pattern (chunked: larger
 * than the 4 KiB buffer_size), receives each rank's and checks its bytes, then two
 * barriers. Modes (argv[1]):
 *   (none)      Ballast initialises MPI (MPI_THREAD_MULTIPLE) and finalises it before
 *               returning;
 *   host        the host initialises MPI at MPI_THREAD_MULTIPLE first, and finalises it;
 *   serialized  the host initialises MPI at MPI_THREAD_SERIALIZED: 4 ranks on 2 processes
 *               are refused (BALLAST_EUNSUPPORTED naming MPI_THREAD_MULTIPLE), one rank
 *               per process runs (on the calling thread).
 * Prints "capi mpi_run_ranks: N passed, M failed" on every process and exits non-zero if a
 * check failed. Build: mpicc mpi_run_ranks.c $(pkg-config --cflags --libs ballast) */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "ballast.h"
#include "check.h"

#ifndef BALLAST_HAVE_MPI
#error "build with the flags of an mpi install's ballast.pc (-DBALLAST_HAVE_MPI)"
#endif

/* The length and bytes of the message from rank `src` to rank `dst`. */
static size_t len_of(int src, int dst) { return 5000u + 1000u * (size_t)src + 37u * (size_t)dst; }
static uint8_t byte_of(size_t i, int src, int dst) { return (uint8_t)((i * 31u + (unsigned)src * 7u + (unsigned)dst) & 0xff); }

static int rank_main(ballast_comm *comm, void *user) {
    int want_ranks = *(int *)user;
    int r = -1, n = -1, procs = 0, me = -1;
    OK(ballast_rank(comm, &r));
    OK(ballast_world_size(comm, &n));
    CHECK(n == want_ranks);
    if (r < 0 || n != want_ranks) return 1;
    MPI_Comm_size(MPI_COMM_WORLD, &procs);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    CHECK(procs > 0 && r % procs == me); /* rank r runs in process r % size */
    char notes[1024];
    OK(ballast_comm_notes(comm, notes, sizeof notes, NULL));
    CHECK(strncmp(notes, "transport: mpi\npath: engine\n", 28) == 0);

    ballast_request **sends = calloc((size_t)n, sizeof *sends);
    for (int d = 0; d < n; d++) {
        if (d == r) continue;
        size_t len = len_of(r, d);
        uint8_t *out = malloc(len);
        for (size_t i = 0; i < len; i++) out[i] = byte_of(i, r, d);
        int rc;
        while ((rc = ballast_isend(comm, d, (uint32_t)r, out, len, &sends[d])) == BALLAST_EAGAIN)
            OK(ballast_progress(comm));
        OK(rc);
        free(out); /* copied by ballast_isend */
    }
    uint8_t *in = malloc(len_of(n, n));
    for (int s = 0; s < n; s++) {
        if (s == r) continue;
        ballast_status st;
        OK(ballast_recv(comm, s, s, in, len_of(n, n), &st));
        size_t want = len_of(s, r), bad = 0;
        CHECK(st.source == s && st.tag == (uint32_t)s && st.len == want);
        for (size_t i = 0; i < want && i < st.len; i++) bad += in[i] != byte_of(i, s, r);
        CHECK(bad == 0);
    }
    free(in);
    for (int d = 0; d < n; d++) {
        if (d == r) continue;
        OK(ballast_wait(sends[d], NULL));
        OK(ballast_request_free(sends[d]));
    }
    free(sends);
    OK(ballast_barrier(comm));
    OK(ballast_barrier(comm));
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    int host = strcmp(mode, "host") == 0, serialized = strcmp(mode, "serialized") == 0;
    int provided = 0;
    if (host) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (serialized) MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    int procs = 2;
    if (host || serialized) MPI_Comm_size(MPI_COMM_WORLD, &procs);

    ballast_config *cfg = NULL;
    OK(ballast_config_new(&cfg));
    OK(ballast_config_set(cfg, "buffer_size", "4K"));
    int nranks = 4;
    if (serialized && provided < MPI_THREAD_MULTIPLE && procs < nranks) {
        char msg[512];
        CHECK(ballast_mpi_run_ranks(nranks, cfg, rank_main, &nranks) == BALLAST_EUNSUPPORTED);
        ballast_last_error(msg, sizeof msg);
        CHECK(strstr(msg, "initialise MPI with MPI_THREAD_MULTIPLE") != NULL);
        nranks = procs;
    }
    OK(ballast_mpi_run_ranks(nranks, cfg, rank_main, &nranks));
    CHECK(ballast_mpi_run_ranks(0, cfg, rank_main, &nranks) == BALLAST_EINVAL);
    CHECK(ballast_mpi_run_ranks(nranks, cfg, NULL, &nranks) == BALLAST_EINVAL);
    OK(ballast_config_free(cfg));
    int finalized = 0;
    MPI_Finalized(&finalized);
    CHECK(finalized == !(host || serialized)); /* Ballast finalises only the MPI it started */
    if (host || serialized) MPI_Finalize();
    printf("capi mpi_run_ranks: %d passed, %d failed\n", atomic_load(&passed), atomic_load(&failed));
    return atomic_load(&failed) == 0 ? 0 : 1;
}
