/* The smallest libballast program: two ranks as threads of this process; rank 0 sends a
 * greeting to rank 1, which prints it.
 *
 *   cc hello.c $(pkg-config --cflags --libs ballast) -o hello && ./hello
 */
#include <stdio.h>
#include <string.h>

#include <ballast.h>

static int rank_main(ballast_comm *comm, void *user) {
    (void)user;
    int rank = 0, size = 0;
    if (ballast_rank(comm, &rank) != 0 || ballast_world_size(comm, &size) != 0) return 1;
    if (rank == 0) {
        const char msg[] = "hello from rank 0";
        return ballast_send(comm, 1, 7, msg, sizeof msg);
    }
    char buf[64];
    ballast_status st;
    int rc = ballast_recv(comm, BALLAST_ANY_SOURCE, 7, buf, sizeof buf, &st);
    if (rc != 0) return rc;
    printf("rank %d of %d got \"%s\" (%zu bytes from rank %d, tag %u)\n", rank, size, buf, st.len,
           st.source, st.tag);
    return 0;
}

int main(void) {
    ballast_config *cfg = NULL;
    int rc = ballast_config_new(&cfg);
    if (rc == 0) rc = ballast_config_set(cfg, "transport", "local");
    if (rc == 0) rc = ballast_local_run(2, cfg, rank_main, NULL);
    if (rc != 0) {
        char err[512];
        ballast_last_error(err, sizeof err);
        fprintf(stderr, "hello: error %d: %s\n", rc, err);
    }
    if (cfg) ballast_config_free(cfg);
    return rc == 0 ? 0 : 1;
}
