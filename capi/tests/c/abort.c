/* ballast_abort from C over the local transport (4 ranks of ballast_local_run): rank 0
 * aborts with code 7 while the others are blocked in ballast_recv, ballast_barrier and
 * ballast_wait; each of those returns BALLAST_EPEER with a message naming rank 0 and the
 * code, soon after the abort (checked against a loose bound, 5 s: timing here is noisy;
 * the target is 1 s); rank 0's own later call fails the same way, naming itself; the run
 * returns BALLAST_EPEER with the aborting rank's message. A second run whose rank 0 returns
 * the code after the abort makes ballast_local_run return that code. Built with
 * -fsanitize=address,undefined by capi/tests/c_programs.rs. Prints
 * "capi abort: N passed, M failed" and exits non-zero if a check failed. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ballast.h"
#include "check.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* When rank 0 called ballast_abort (seconds, CLOCK_MONOTONIC), as bits of a double. */
static _Atomic double aborted_at;

/* The last error names `who` and the code 7. */
static int names(const char *who) {
    char msg[512];
    ballast_last_error(msg, sizeof msg);
    char want[128];
    snprintf(want, sizeof want, "%s aborted the job (abort with code 7)", who);
    if (strstr(msg, want) == NULL) {
        fprintf(stderr, "last error \"%s\" does not contain \"%s\"\n", msg, want);
        return 0;
    }
    return 1;
}

static int rank_main(ballast_comm *comm, void *user) {
    int returns_code = *(int *)user;
    int rank = -1;
    CHECK(ballast_rank(comm, &rank) == 0);
    CHECK(ballast_barrier(comm) == 0);
    char buf[16];
    ballast_status st;
    int rc = 0;
    switch (rank) {
    case 0: {
        struct timespec pause = {0, 300 * 1000 * 1000}; /* the others block meanwhile */
        nanosleep(&pause, NULL);
        atomic_store(&aborted_at, now());
        CHECK(ballast_abort(comm, 7) == 0);
        CHECK(ballast_abort(comm, 8) == 0); /* a second call does nothing */
        CHECK(ballast_recv(comm, 1, 5, buf, sizeof buf, &st) == BALLAST_EPEER);
        CHECK(names("this rank"));
        return returns_code;
    }
    case 1:
        rc = ballast_recv(comm, 0, 5, buf, sizeof buf, &st);
        break;
    case 2:
        rc = ballast_barrier(comm);
        break;
    default: {
        ballast_request *req = NULL;
        CHECK(ballast_irecv(comm, BALLAST_ANY_SOURCE, BALLAST_ANY_TAG, &req) == 0);
        rc = ballast_wait(req, &st);
        CHECK(ballast_request_free(req) == 0);
        break;
    }
    }
    double took = now() - atomic_load(&aborted_at);
    CHECK(rc == BALLAST_EPEER);
    CHECK(names("rank 0"));
    CHECK(took < 5.0);
    /* Every later call fails the same way. */
    CHECK(ballast_progress(comm) == BALLAST_EPEER);
    CHECK(names("rank 0"));
    return 0;
}

int main(void) {
    ballast_config *cfg = NULL;
    if (ballast_config_new(&cfg) != 0) return 2;
    int returns_code = 0;
    CHECK(ballast_local_run(4, cfg, rank_main, &returns_code) == BALLAST_EPEER);
    char msg[512];
    ballast_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "rank 0: this rank aborted the job (abort with code 7)") != NULL);
    returns_code = 7;
    CHECK(ballast_local_run(4, cfg, rank_main, &returns_code) == 7);
    CHECK(ballast_abort(NULL, 1) == BALLAST_EINVAL);
    ballast_config_free(cfg);
    printf("capi abort: %d passed, %d failed\n", atomic_load(&passed), atomic_load(&failed));
    return atomic_load(&failed) == 0 ? 0 : 1;
}
