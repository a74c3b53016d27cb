/* Issue 35's collectives from C under MPI (an `mpi` build, under mpirun; no sanitizers, as
 * mpi_conformance.c): the checks of collectives_body.h on a communicator of
 * ballast_comm_from_mpi over MPI_COMM_WORLD on the MPI native path (MPI's own collectives),
 * then on one with mpi_native off (the engine's algorithms over MPI), then on a
 * sub-communicator (even and odd world ranks, native; without the 1 MiB reductions, which
 * the world's runs made), and a call on a freed communicator.
 * Prints "capi mpi collectives: rank R of N: P passed, F failed" on every process and exits
 * non-zero if a check failed. Build:
 *   mpicc mpi_collectives.c $(pkg-config --cflags --libs ballast)   (BALLAST_HAVE_MPI set by the .pc) */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "ballast.h"
#include "check.h"

#ifndef BALLAST_HAVE_MPI
#error "build with the flags of an mpi install's ballast.pc (-DBALLAST_HAVE_MPI)"
#endif

static int world_rank;

#include "collectives_body.h"

/* The notes' path line ("path: native" or "path: engine") contains `want`. */
static void check_path(ballast_comm *comm, const char *want) {
    char notes[2048];
    size_t full = 0;
    OK(ballast_comm_notes(comm, notes, sizeof notes, &full));
    CHECK(strstr(notes, want) != NULL);
}

int main(int argc, char **argv) {
    int provided = 0, n = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    check_rank = world_rank;
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    ballast_config *cfg = NULL;
    OK(ballast_config_new(&cfg));
    OK(ballast_config_set(cfg, "buffer_size", "16K"));
    OK(ballast_config_set(cfg, "lock_pool", "false"));

    /* The MPI native path: MPI's own collectives. */
    ballast_comm *comm = NULL;
    OK(ballast_comm_from_mpi(MPI_COMM_WORLD, cfg, &comm));
    check_path(comm, "path: native");
    native_path = 1;
    collectives_suite(comm, 1);
    native_path = 0;
    OK(ballast_comm_free(comm));

    /* The engine over MPI. */
    OK(ballast_config_set(cfg, "mpi_native", "off"));
    OK(ballast_comm_from_mpi(MPI_COMM_WORLD, cfg, &comm));
    check_path(comm, "path: engine");
    collectives_suite(comm, 2);
    OK(ballast_comm_free(comm));

    /* A sub-communicator, native again: each half is its own world. */
    OK(ballast_config_set(cfg, "mpi_native", "on"));
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
    ballast_comm *sub = NULL;
    OK(ballast_comm_from_mpi(half, cfg, &sub));
    native_path = skip_large = 1;
    collectives_suite(sub, 3 + world_rank % 2);
    native_path = skip_large = 0;
    OK(ballast_comm_free(sub));
    MPI_Comm_free(&half);

    /* A freed communicator is refused without calling MPI. */
    double d = 1;
    EXPECT_ERR(ballast_allreduce(comm, &d, &d, 1, BALLAST_DOUBLE, BALLAST_SUM), BALLAST_EINVAL,
               "not a live communicator");
    EXPECT_ERR(ballast_bcast(comm, 0, &d, 8), BALLAST_EINVAL, "not a live communicator");

    OK(ballast_config_free(cfg));
    MPI_Finalize();
    int p = atomic_load(&passed), f = atomic_load(&failed);
    printf("capi mpi collectives: rank %d of %d: %d passed, %d failed\n", world_rank, n, p, f);
    return f == 0 ? 0 : 1;
}
