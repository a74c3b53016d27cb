/* A host built with another MPI family than libballast's (ci/capi.sh builds it with MPICH's
 * mpicc.mpich against an Open MPI build of libballast): ballast_comm_from_mpi must refuse
 * with BALLAST_EUNSUPPORTED and name both families, instead of misreading the MPI_Comm
 * (a pointer in Open MPI, an integer in MPICH). Prints the code and message; exits 0 only
 * for that refusal. */
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "ballast.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    ballast_config *cfg = NULL;
    if (ballast_config_new(&cfg) != 0) return 1;
    ballast_comm *comm = NULL;
    int rc = ballast_comm_from_mpi(MPI_COMM_WORLD, cfg, &comm);
    char msg[512];
    ballast_last_error(msg, sizeof msg);
    printf("ballast_comm_from_mpi: %d: %s\n", rc, rc ? msg : "");
    int ok = rc == BALLAST_EUNSUPPORTED && comm == NULL && strstr(msg, "built with Open MPI") != NULL &&
             strstr(msg, "runs MPICH") != NULL;
    if (rc == 0) ballast_comm_free(comm);
    ballast_config_free(cfg);
    MPI_Finalize();
    return ok ? 0 : 1;
}
