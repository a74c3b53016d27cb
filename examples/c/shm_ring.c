/* Processes of one node over shared memory, with no MPI call: each rank passes a greeting
 * to the next and sums the ranks with ballast_allreduce. Start it with any launcher:
 *
 *   cc shm_ring.c $(pkg-config --cflags --libs ballast) -o shm_ring
 *   BALLAST_TRANSPORT=shm mpirun -n 4 ./shm_ring
 *   BALLAST_TRANSPORT=shm srun -n 4 ./shm_ring
 *
 * The ranks meet through mpirun's MPI (a libballast built with mpi) or at this node's
 * abstract socket named by the launcher's job (SLURM_JOB_ID, Open MPI's job id), then the
 * bytes move through shared segments only. Rank 0 prints the sum and its footprint.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <ballast.h>

static int fail(const char *what, int rc) {
    char err[512];
    ballast_last_error(err, sizeof err);
    fprintf(stderr, "shm_ring: %s: error %d: %s\n", what, rc, err);
    return 1;
}

int main(void) {
    ballast_comm *comm = NULL;
    int rc = ballast_comm_from_env(NULL, &comm); /* BALLAST_TRANSPORT=shm */
    if (rc != 0) return fail("ballast_comm_from_env", rc);
    int rank = 0, size = 0;
    ballast_rank(comm, &rank);
    ballast_world_size(comm, &size);
    char msg[64], got[64];
    snprintf(msg, sizeof msg, "hello from rank %d", rank);
    ballast_request *req = NULL;
    rc = ballast_isend(comm, (rank + 1) % size, 7, msg, strlen(msg) + 1, &req);
    if (rc == 0) rc = ballast_recv(comm, (rank + size - 1) % size, 7, got, sizeof got, NULL);
    if (rc == 0) rc = ballast_wait(req, NULL);
    ballast_request_free(req);
    int64_t mine = rank, sum = 0;
    if (rc == 0) rc = ballast_allreduce(comm, &mine, &sum, 1, BALLAST_INT64, BALLAST_SUM);
    ballast_footprint fp;
    if (rc == 0) rc = ballast_comm_footprint(comm, &fp);
    if (rc != 0) {
        fail("the exchange", rc);
        ballast_comm_free(comm);
        return 1;
    }
    if (rank == 0)
        printf("%d ranks over shm: got \"%s\"; sum of ranks %" PRId64 "; segment %" PRIu64
               " B shared, %u peer segments mapped\n",
               size, got, sum, fp.shm_segment, fp.shm_peers_mapped);
    rc = ballast_comm_free(comm); /* collective: waits for every rank */
    return rc == 0 ? 0 : fail("ballast_comm_free", rc);
}
