/* Handle validity and lengths of libballast (issue 33, findings 2 and 4), over the local
 * transport: every kind of handle (configuration, communicator of ballast_comm_from_env and
 * of ballast_local_run, request, collective result) freed twice, used after its free, or
 * given where another kind is expected is refused with BALLAST_EINVAL and a message saying
 * so, never followed; a freed request whose box and slot were reused by a new request does
 * not act on the new one; a length of (size_t)-1 or above PTRDIFF_MAX (send, isend,
 * allgatherv, recv's cap, waitall's count) is refused without poisoning the communicator. Built with -fsanitize=address,undefined by
 * capi/tests/c_programs.rs (and run under valgrind by ci/capi.sh). Prints
 * "capi handles: N passed, M failed" and exits non-zero if a check failed. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ballast.h"
#include "check.h"

/* Requests: a stale handle never reaches the request that reused its box or slot. */
static void request_checks(ballast_comm *c) {
    char byte = 5;
    ballast_request *a = NULL, *b = NULL;
    OK(ballast_isend(c, 0, 1, &byte, 1, &a));
    OK(ballast_wait(a, NULL));
    OK(ballast_request_free(a));
    /* B reuses A's box and slot (freed boxes and slots are reused first). */
    OK(ballast_irecv(c, 0, 1, &b));
    CHECK(a != b);
    EXPECT_ERR(ballast_wait(a, NULL), BALLAST_EINVAL, "request is not a live request handle");
    int done = 0;
    EXPECT_ERR(ballast_test(a, &done, NULL), BALLAST_EINVAL, "not a live request");
    const void *data = NULL;
    size_t len = 0;
    EXPECT_ERR(ballast_request_data(a, &data, &len), BALLAST_EINVAL, "not a live request");
    EXPECT_ERR(ballast_request_free(a), BALLAST_EINVAL, "not a live request");
    ballast_request *both[2] = {b, a};
    ballast_status st[2];
    EXPECT_ERR(ballast_waitall(2, both, st), BALLAST_EINVAL, "request 1 of 2");
    CHECK(st[0].error == 0 && st[0].len == 1 && st[1].error == BALLAST_EINVAL);
    /* B is untouched by the calls on A. */
    OK(ballast_request_data(b, &data, &len));
    CHECK(len == 1 && *(const char *)data == 5);
    OK(ballast_request_free(b));
    EXPECT_ERR(ballast_request_free(b), BALLAST_EINVAL, "not a live request");

    /* More freed requests than the boxes kept for reuse: a second free of each is refused
     * (it read freed memory before). */
    enum { MANY = 1100 };
    static ballast_request *reqs[MANY];
    for (int i = 0; i < MANY; i++) {
        reqs[i] = NULL;
        OK(ballast_isend(c, 0, 2, &byte, 1, &reqs[i]));
    }
    for (int i = 0; i < MANY; i++) OK(ballast_wait(reqs[i], NULL));
    for (int i = 0; i < MANY; i++) OK(ballast_request_free(reqs[i]));
    int refused = 0;
    for (int i = 0; i < MANY; i++) refused += ballast_request_free(reqs[i]) == BALLAST_EINVAL;
    CHECK(refused == MANY);
    char sink[4];
    for (int i = 0; i < MANY; i++) OK(ballast_recv(c, 0, 2, sink, sizeof sink, NULL));

    /* A handle of another kind where a request is expected. */
    EXPECT_ERR(ballast_wait((ballast_request *)c, NULL), BALLAST_EINVAL,
               "request is a communicator handle, not a request handle");
}

/* Lengths no buffer can have: refused, and the communicator still works. */
static void length_checks(ballast_comm *c) {
    char byte = 1;
    ballast_request *r = (ballast_request *)&r;
    EXPECT_ERR(ballast_send(c, 0, 1, &byte, (size_t)-1), BALLAST_EINVAL, "len is 18446744073709551615 bytes");
    EXPECT_ERR(ballast_isend(c, 0, 1, &byte, (size_t)-1, &r), BALLAST_EINVAL, "above the largest message");
    CHECK(r == NULL);
    EXPECT_ERR(ballast_send(c, 0, 1, &byte, (size_t)PTRDIFF_MAX + 1), BALLAST_EINVAL, "above the largest message");
    ballast_gathered *g = (ballast_gathered *)&g;
    EXPECT_ERR(ballast_allgatherv(c, &byte, (size_t)-1, &g), BALLAST_EINVAL, "above the largest message");
    CHECK(g == NULL);
    /* A receive buffer no C object can have: refused before anything is received. */
    ballast_status st = {0};
    EXPECT_ERR(ballast_recv(c, 0, 1, &byte, SIZE_MAX, &st), BALLAST_EINVAL,
               "cap is 18446744073709551615 bytes, above the largest message");
    EXPECT_ERR(ballast_recv(c, BALLAST_ANY_SOURCE, BALLAST_ANY_TAG, &byte, (size_t)PTRDIFF_MAX + 1, &st),
               BALLAST_EINVAL, "cap is 9223372036854775808 bytes");
    /* An array of requests no C object can have: refused before any entry is read. */
    ballast_request *one[1] = {NULL};
    EXPECT_ERR(ballast_waitall(SIZE_MAX, one, NULL), BALLAST_EINVAL, "n is 18446744073709551615 requests");
    EXPECT_ERR(ballast_waitall((size_t)PTRDIFF_MAX / sizeof(ballast_request *) + 1, one, NULL), BALLAST_EINVAL,
               "above the largest array");
    /* Not poisoned. */
    OK(ballast_send(c, 0, 3, &byte, 1));
    char got = 0;
    OK(ballast_recv(c, 0, 3, &got, 1, NULL));
    CHECK(got == 1);
}

/* All-gather results: freed once. */
static void gathered_checks(ballast_comm *c) {
    ballast_gathered *g = NULL;
    OK(ballast_allgatherv(c, "ab", 2, &g));
    const void *data = NULL;
    size_t len = 0;
    OK(ballast_gathered_part(g, 0, &data, &len));
    CHECK(len == 2);
    OK(ballast_gathered_free(g));
    EXPECT_ERR(ballast_gathered_free(g), BALLAST_EINVAL, "gathered is not a live collective result handle");
    EXPECT_ERR(ballast_gathered_part(g, 0, &data, &len), BALLAST_EINVAL, "not a live collective result");
    EXPECT_ERR(ballast_gathered_free((ballast_gathered *)c), BALLAST_EINVAL,
               "gathered is a communicator handle, not a collective result handle");
    ballast_gathered *live = NULL;
    OK(ballast_allgatherv(c, "cd", 2, &live));
    EXPECT_ERR(ballast_request_free((ballast_request *)live), BALLAST_EINVAL,
               "request is a collective result handle, not a request handle");
    OK(ballast_gathered_free(live));
}

/* Saves rank 0's handle, to use it after ballast_local_run returned. */
static int keep_main(ballast_comm *comm, void *user) {
    int rank = -1;
    if (ballast_rank(comm, &rank) != 0) return 1;
    if (rank == 0) *(ballast_comm **)user = comm;
    return ballast_barrier(comm);
}

int main(void) {
    ballast_config *cfg = NULL;
    OK(ballast_config_new(&cfg));
    OK(ballast_config_set(cfg, "transport", "local"));
    OK(ballast_config_set(cfg, "buffer_size", "4K"));
    OK(ballast_config_set(cfg, "buffer_count", "16"));
    OK(ballast_config_set(cfg, "pool_growth", "on"));
    OK(ballast_config_set(cfg, "max_pool_bytes", "64M"));
    OK(ballast_config_set(cfg, "lock_pool", "off"));

    /* A communicator of ballast_comm_from_env: used, freed, then refused. */
    ballast_comm *c = NULL;
    OK(ballast_comm_from_env(cfg, &c));
    if (c != NULL) {
        request_checks(c);
        length_checks(c);
        gathered_checks(c);
        EXPECT_ERR(ballast_barrier((ballast_comm *)cfg), BALLAST_EINVAL,
                   "comm is a configuration handle, not a communicator handle");
        OK(ballast_comm_free(c));
        EXPECT_ERR(ballast_comm_free(c), BALLAST_EINVAL, "comm is not a live communicator handle");
        int rank = -1;
        EXPECT_ERR(ballast_rank(c, &rank), BALLAST_EINVAL, "not a live communicator");
        EXPECT_ERR(ballast_send(c, 0, 1, "x", 1), BALLAST_EINVAL, "not a live communicator");
    }

    /* A request outliving its communicator (cancelled by the free). */
    ballast_request *r = NULL;
    c = NULL;
    OK(ballast_comm_from_env(cfg, &c));
    OK(ballast_irecv(c, 0, 9, &r));
    EXPECT_ERR(ballast_comm_free(c), BALLAST_EINVAL, "cancelled");
    EXPECT_ERR(ballast_wait(r, NULL), BALLAST_EINVAL, "of a communicator that was freed");
    EXPECT_ERR(ballast_request_free(r), BALLAST_EINVAL, "not a live request");

    /* A communicator of ballast_local_run, after the run returned. */
    ballast_comm *kept = NULL;
    OK(ballast_local_run(2, cfg, keep_main, &kept));
    CHECK(kept != NULL);
    int rank = -1;
    EXPECT_ERR(ballast_rank(kept, &rank), BALLAST_EINVAL, "of a ballast_local_run that returned");
    EXPECT_ERR(ballast_barrier(kept), BALLAST_EINVAL, "not a live communicator");
    EXPECT_ERR(ballast_comm_free(kept), BALLAST_EINVAL, "not a live communicator");

    /* Configurations. */
    ballast_config *other = NULL;
    OK(ballast_config_new(&other));
    OK(ballast_config_free(other));
    EXPECT_ERR(ballast_config_free(other), BALLAST_EINVAL, "config is not a live configuration handle");
    EXPECT_ERR(ballast_config_set(other, "buffer_size", "4K"), BALLAST_EINVAL, "not a live configuration");
    ballast_footprint fp;
    EXPECT_ERR(ballast_predict(other, 1, 2, 1, &fp), BALLAST_EINVAL, "not a live configuration");
    EXPECT_ERR(ballast_local_run(2, other, keep_main, &kept), BALLAST_EINVAL, "not a live configuration");
    EXPECT_ERR(ballast_comm_from_env(other, &c), BALLAST_EINVAL, "not a live configuration");
    /* A new configuration reusing the slot is not reached through the old handle. */
    ballast_config *again = NULL;
    OK(ballast_config_new(&again));
    CHECK(again != other);
    EXPECT_ERR(ballast_config_free(other), BALLAST_EINVAL, "not a live configuration");
    OK(ballast_config_set(again, "buffer_size", "8K"));
    OK(ballast_config_free(again));

    OK(ballast_config_free(cfg));
    int p = atomic_load(&passed), f = atomic_load(&failed);
    printf("capi handles: %d passed, %d failed\n", p, f);
    return f == 0 ? 0 : 1;
}
