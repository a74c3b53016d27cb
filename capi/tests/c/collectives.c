/* Issue 35's collectives from C over the local transport (collectives_body.h): every check
 * on worlds of 1, 2, 3, 4 and 7 ranks as threads (ballast_local_run), then a call on a
 * communicator handle whose run returned (stale: BALLAST_EINVAL). Built with
 * -fsanitize=address,undefined by capi/tests/c_collectives.rs. Prints "capi collectives: N
 * passed, M failed" and exits non-zero if a check failed. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ballast.h"
#include "check.h"

#include "collectives_body.h"

struct run {
    int seed;
    ballast_comm *kept; /* rank 0's handle, kept past the run */
};

static int rank_main(ballast_comm *comm, void *user) {
    struct run *run = user;
    int me = -1;
    OK(ballast_rank(comm, &me));
    if (me == 0) run->kept = comm;
    collectives_suite(comm, run->seed);
    return 0;
}

int main(void) {
    ballast_config *cfg = NULL;
    OK(ballast_config_new(&cfg));
    OK(ballast_config_set(cfg, "transport", "local"));
    OK(ballast_config_set(cfg, "buffer_size", "16K"));
    OK(ballast_config_set(cfg, "buffer_count", "32"));
    const int worlds[5] = {1, 2, 3, 4, 7};
    for (int w = 0; w < 5; w++) {
        struct run run = {100 + worlds[w], NULL};
        int before = atomic_load(&failed);
        int rc = ballast_local_run(worlds[w], cfg, rank_main, &run);
        if (rc != 0) {
            char msg[512];
            ballast_last_error(msg, sizeof msg);
            fprintf(stderr, "ballast_local_run(%d): %d: %s\n", worlds[w], rc, msg);
        }
        CHECK(rc == 0);
        printf("capi collectives: %d ranks: %s\n", worlds[w], atomic_load(&failed) == before ? "ok" : "FAILED");
        /* The handle of a run that returned is refused by every new call. */
        double d = 1;
        ballast_gathered *g = NULL;
        size_t len = 0;
        EXPECT_ERR(ballast_allreduce(run.kept, &d, &d, 1, BALLAST_DOUBLE, BALLAST_SUM), BALLAST_EINVAL,
                   "not a live communicator");
        EXPECT_ERR(ballast_bcast(run.kept, 0, &d, 8), BALLAST_EINVAL, "not a live communicator");
        EXPECT_ERR(ballast_gather(run.kept, 0, &d, 8, &g), BALLAST_EINVAL, "not a live communicator");
        EXPECT_ERR(ballast_alltoallv(run.kept, &d, &len, &g), BALLAST_EINVAL, "not a live communicator");
        EXPECT_ERR(ballast_exchange_sparse(run.kept, 0, NULL, NULL, NULL, &g), BALLAST_EINVAL,
                   "not a live communicator");
        CHECK(g == NULL);
    }
    OK(ballast_config_free(cfg));
    int p = atomic_load(&passed), f = atomic_load(&failed);
    printf("capi collectives: %d passed, %d failed\n", p, f);
    return f == 0 ? 0 : 1;
}
