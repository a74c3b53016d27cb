/* Issue 35's collectives from C over the local transport (collectives_body.h): every check
 * on worlds of 1, 2, 3, 4 and 7 ranks as threads (ballast_local_run), then a call on a
 * communicator handle whose run returned (stale: BALLAST_EINVAL), and a result that two
 * ranks share (BALLAST_EUNSUPPORTED while one writes it). Built with
 * -fsanitize=address,undefined by capi/tests/c_collectives.rs. Prints "capi collectives: N
 * passed, M failed" and exits non-zero if a check failed. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

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

/* One result shared by two ranks (threads), which the header forbids while
 * ballast_alltoallv_into writes it: rank 0 is inside ballast_alltoallv_into on the shared
 * result (waiting for rank 1 in the collective) when rank 1 reads it and calls
 * ballast_alltoallv_into on it too; both of rank 1's calls are BALLAST_EUNSUPPORTED, not a
 * double free. Then rank 1 joins with its own result and rank 0's call completes. */
static ballast_gathered *_Atomic shared_result;
static atomic_int rank0_inside;

static int shared_main(ballast_comm *comm, void *user) {
    (void)user;
    int me = -1;
    OK(ballast_rank(comm, &me));
    size_t lens[2] = {3, 5};
    const char send[8] = "abcdefgh";
    if (me == 0) {
        ballast_gathered *g = NULL;
        OK(ballast_alltoallv(comm, send, lens, &g));
        atomic_store(&shared_result, g);
        atomic_store(&rank0_inside, 1);
        OK(ballast_alltoallv_into(comm, send, lens, g));
        size_t n = 0;
        OK(ballast_gathered_count(g, &n));
        CHECK(n == 2);
        OK(ballast_gathered_free(g));
    } else {
        ballast_gathered *own = NULL;
        OK(ballast_alltoallv(comm, send, lens, &own));
        while (!atomic_load(&rank0_inside)) {
        }
        /* Rank 0 needs this rank to finish its call: it is inside now, or soon. */
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        ballast_gathered *g = atomic_load(&shared_result);
        size_t n = 0;
        EXPECT_ERR(ballast_gathered_count(g, &n), BALLAST_EUNSUPPORTED, "in use by ballast_alltoallv_into on another thread");
        EXPECT_ERR(ballast_alltoallv_into(comm, send, lens, g), BALLAST_EUNSUPPORTED,
                   "ballast_alltoallv_into: the result is in use");
        OK(ballast_alltoallv_into(comm, send, lens, own));
        const void *p = NULL;
        size_t len = 0;
        OK(ballast_gathered_part(own, 0, &p, &len));
        CHECK(len == 5 && memcmp(p, "defgh", 5) == 0);
        OK(ballast_gathered_free(own));
    }
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
    CHECK(ballast_local_run(2, cfg, shared_main, NULL) == 0);
    printf("capi collectives: a result shared by two ranks: %s\n", atomic_load(&failed) == 0 ? "ok" : "FAILED");
    OK(ballast_config_free(cfg));
    int p = atomic_load(&passed), f = atomic_load(&failed);
    printf("capi collectives: %d passed, %d failed\n", p, f);
    return f == 0 ? 0 : 1;
}
