/* ballast_abort under MPI (an `mpi` build, under mpirun -n 2): it calls MPI_Abort, so the
 * job ends with the code and the call never returns. ci/capi.sh checks mpirun's exit
 * status (the code) and that no process printed "returned". Modes (argv[1]):
 *   comm   the host initialises MPI; ballast_comm_from_mpi on MPI_COMM_WORLD (the MPI
 *          native path, or the engine path with BALLAST_MPI_NATIVE=off: the process prints
 *          its path); after a barrier rank 0 aborts with code 7 while rank 1 waits in
 *          ballast_recv for a message that never comes;
 *   ranks  ballast_mpi_run_ranks with 4 ranks (2 per process, the engine path): after a
 *          barrier rank 3 aborts with code 9 while the others wait in ballast_recv.
 * A process whose ballast_abort or ballast_recv returns prints "returned" and exits with
 * 90 plus something, which is not the code. Build:
 *   mpicc mpi_abort.c $(pkg-config --cflags --libs ballast) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "ballast.h"

#ifndef BALLAST_HAVE_MPI
#error "build with the flags of an mpi install's ballast.pc (-DBALLAST_HAVE_MPI)"
#endif

static void die(const char *what, int rc, int status) {
    char msg[512];
    ballast_last_error(msg, sizeof msg);
    printf("%s returned %d: %s\n", what, rc, msg);
    fflush(stdout);
    exit(status);
}

/* Rank `aborter` aborts with `code` after a barrier; the others wait in a receive. */
static int body(ballast_comm *comm, int aborter, int code) {
    int r = -1;
    if (ballast_rank(comm, &r) != 0) die("ballast_rank", -1, 91);
    int rc = ballast_barrier(comm);
    if (rc != 0) die("ballast_barrier", rc, 92);
    char buf[8];
    if (r == aborter) {
        rc = ballast_abort(comm, code);
        die("ballast_abort", rc, 93);
    }
    rc = ballast_recv(comm, aborter, 1, buf, sizeof buf, NULL);
    die("ballast_recv", rc, 94);
    return 1;
}

static int rank_main(ballast_comm *comm, void *user) {
    (void)user;
    return body(comm, 3, 9);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    ballast_config *cfg = NULL;
    if (ballast_config_new(&cfg) != 0) die("ballast_config_new", -1, 95);
    if (strcmp(mode, "ranks") == 0) {
        int rc = ballast_mpi_run_ranks(4, cfg, rank_main, NULL);
        die("ballast_mpi_run_ranks", rc, 96);
    }
    if (strcmp(mode, "comm") != 0) {
        fprintf(stderr, "usage: mpi_abort comm|ranks\n");
        return 2;
    }
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    ballast_comm *comm = NULL;
    int rc = ballast_comm_from_mpi(MPI_COMM_WORLD, cfg, &comm);
    if (rc != 0) die("ballast_comm_from_mpi", rc, 97);
    char notes[1024];
    if (ballast_comm_notes(comm, notes, sizeof notes, NULL) != 0) die("ballast_comm_notes", -1, 98);
    int me = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    printf("process %d: %s", me, strstr(notes, "path: ") ? strstr(notes, "path: ") : notes);
    fflush(stdout);
    return body(comm, 0, 7);
}
