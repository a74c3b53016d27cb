/* The C conformance program of libballast (over the local transport): calls every function
 * of include/ballast.h, the failures included (NULL handles and pointers, an unknown key, a
 * bad value, ranks and tags out of range, a message over the buffer, a pool exhausted), with
 * any source and any tag, 0-byte and 64 MiB messages, and checks ballast_last_error after
 * each failure. Built with -fsanitize=address,undefined by capi/tests/c_programs.rs. Prints
 * "capi conformance: N passed, M failed" and exits non-zero if a check failed. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ballast.h"
#include "check.h"

static uint8_t pattern(size_t i, int seed) { return (uint8_t)((i * 131u + (unsigned)seed * 7u) & 0xff); }

/* The requests a rank could not do without: a failed check in them stops the rank. */
static int ranks_main(ballast_comm *comm, void *user) {
    int *seen_user = user;
    int rank = -1, n = -1;
    OK(ballast_rank(comm, &rank));
    OK(ballast_world_size(comm, &n));
    CHECK(n == 3 && rank >= 0 && rank < 3);
    if (rank == 0) *seen_user = 1;
    EXPECT_ERR(ballast_rank(comm, NULL), BALLAST_EINVAL, "out is NULL");
    EXPECT_ERR(ballast_rank(NULL, &rank), BALLAST_EINVAL, "comm is NULL");
    EXPECT_ERR(ballast_world_size(NULL, &n), BALLAST_EINVAL, "comm is NULL");
    EXPECT_ERR(ballast_comm_free(comm), BALLAST_EINVAL, "ballast_local_run");
    OK(ballast_comm_free(NULL)); /* as free(NULL) */

    /* Argument checks. */
    ballast_request *req = (ballast_request *)&req; /* must be set to NULL on failure */
    char byte = 1;
    EXPECT_ERR(ballast_isend(comm, 3, 1, &byte, 1, &req), BALLAST_EINVAL,
               "ballast_isend: rank 3 is out of range: the world has 3 ranks (0 to 2)");
    CHECK(req == NULL);
    EXPECT_ERR(ballast_isend(comm, -1, 1, &byte, 1, &req), BALLAST_EINVAL, "rank -1");
    EXPECT_ERR(ballast_isend(comm, 0, 0x80000000u, &byte, 1, &req), BALLAST_EINVAL,
               "ballast_isend: tag 2147483648 is above BALLAST_TAG_MAX (2147483647)");
    EXPECT_ERR(ballast_isend(comm, 0, 1, NULL, 1, &req), BALLAST_EINVAL, "buf is NULL");
    EXPECT_ERR(ballast_isend(comm, 0, 1, &byte, 1, NULL), BALLAST_EINVAL, "out is NULL");
    EXPECT_ERR(ballast_isend(NULL, 0, 1, &byte, 1, &req), BALLAST_EINVAL, "comm is NULL");
    EXPECT_ERR(ballast_irecv(comm, 0, -2, &req), BALLAST_EINVAL, "tag -2 is negative and not BALLAST_ANY_TAG (-1)");
    EXPECT_ERR(ballast_irecv(comm, 0, (int64_t)1 << 31, &req), BALLAST_EINVAL,
               "tag 2147483648 is above BALLAST_TAG_MAX (2147483647)");
    EXPECT_ERR(ballast_irecv(comm, 5, 1, &req), BALLAST_EINVAL, "rank 5 is out of range: the world has 3 ranks (0 to 2)");
    EXPECT_ERR(ballast_irecv(comm, -2, 1, &req), BALLAST_EINVAL, "rank -2");
    EXPECT_ERR(ballast_send(comm, 0, 0xffffffffu, &byte, 1), BALLAST_EINVAL, "tag 4294967295");
    EXPECT_ERR(ballast_recv(comm, 0, 1, NULL, 4, NULL), BALLAST_EINVAL, "buf is NULL");
    EXPECT_ERR(ballast_test(NULL, NULL, NULL), BALLAST_EINVAL, "request is NULL");
    EXPECT_ERR(ballast_wait(NULL, NULL), BALLAST_EINVAL, "request is NULL");
    OK(ballast_request_free(NULL)); /* as free(NULL) */
    EXPECT_ERR(ballast_request_data(NULL, NULL, NULL), BALLAST_EINVAL, "request is NULL");
    EXPECT_ERR(ballast_progress(NULL), BALLAST_EINVAL, "comm is NULL");
    EXPECT_ERR(ballast_barrier(NULL), BALLAST_EINVAL, "comm is NULL");
    int found = 7;
    EXPECT_ERR(ballast_iprobe(comm, 0, 1, NULL, NULL), BALLAST_EINVAL, "found is NULL");
    OK(ballast_iprobe(comm, BALLAST_ANY_SOURCE, 23, &found, NULL));
    CHECK(found == 0);
    OK(ballast_progress(comm));

    /* A ring: isend right, irecv from the left, waitall, statuses, data, repeated waits. */
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    uint8_t out[100];
    for (size_t i = 0; i < sizeof out; i++) out[i] = pattern(i, rank);
    ballast_request *reqs[2] = {NULL, NULL};
    OK(ballast_irecv(comm, left, 1, &reqs[0]));
    OK(ballast_isend(comm, right, 1, out, sizeof out, &reqs[1]));
    memset(out, 0, sizeof out); /* the buffer may be reused at once */
    ballast_status st[2];
    memset(st, 0x7f, sizeof st);
    OK(ballast_waitall(2, reqs, st));
    CHECK(st[0].source == left && st[0].tag == 1 && st[0].len == 100 && st[0].error == 0);
    CHECK(st[1].source == right && st[1].tag == 1 && st[1].len == 100 && st[1].error == 0);
    const void *data = NULL;
    size_t len = 0;
    OK(ballast_request_data(reqs[0], &data, &len));
    CHECK(len == 100);
    int same = 1;
    for (size_t i = 0; i < len; i++) same &= ((const uint8_t *)data)[i] == pattern(i, left);
    CHECK(same);
    EXPECT_ERR(ballast_request_data(reqs[1], &data, &len), BALLAST_EINVAL, "is a send");
    EXPECT_ERR(ballast_request_data(reqs[0], NULL, &len), BALLAST_EINVAL, "data is NULL");
    ballast_status again;
    OK(ballast_wait(reqs[0], &again));
    CHECK(memcmp(&again, &st[0], sizeof again) == 0);
    int done = 0;
    OK(ballast_test(reqs[1], &done, &again));
    CHECK(done == 1 && again.source == right && again.len == 100);
    EXPECT_ERR(ballast_test(reqs[1], NULL, NULL), BALLAST_EINVAL, "done is NULL");
    OK(ballast_wait(reqs[1], NULL));
    OK(ballast_request_free(reqs[0]));
    OK(ballast_request_free(reqs[1]));
    /* waitall waits for every request and returns the first error; each status has its own. */
    ballast_request *mixed[3] = {NULL, NULL, NULL};
    OK(ballast_isend(comm, rank, 2, out, 10, &mixed[0]));
    OK(ballast_irecv(comm, rank, 2, &mixed[2]));
    ballast_status three[3];
    memset(three, 0x7f, sizeof three);
    EXPECT_ERR(ballast_waitall(3, mixed, three), BALLAST_EINVAL, "request is NULL");
    CHECK(three[0].error == 0 && three[0].source == rank && three[0].len == 10);
    CHECK(three[1].error == BALLAST_EINVAL);
    CHECK(three[2].error == 0 && three[2].source == rank && three[2].tag == 2 && three[2].len == 10);
    OK(ballast_request_free(mixed[0]));
    OK(ballast_request_free(mixed[2]));
    EXPECT_ERR(ballast_waitall(1, NULL, NULL), BALLAST_EINVAL, "reqs is NULL");
    OK(ballast_waitall(0, NULL, NULL));

    /* Any source and any tag; test until done; a receive not complete cannot be freed. */
    if (rank == 0) {
        int sources = 0;
        for (int k = 0; k < 2; k++) {
            ballast_request *r = NULL;
            OK(ballast_irecv(comm, BALLAST_ANY_SOURCE, BALLAST_ANY_TAG, &r));
            if (k == 0) {
                EXPECT_ERR(ballast_request_data(r, &data, &len), BALLAST_EINVAL, "not completed");
                EXPECT_ERR(ballast_request_free(r), BALLAST_EINVAL, "not completed");
            }
            ballast_status s;
            done = 0;
            int rc = 0;
            while (!done && rc == 0) rc = ballast_test(r, &done, &s);
            CHECK(rc == 0);
            CHECK((s.source == 1 || s.source == 2) && s.tag == (uint32_t)(10 + s.source) && s.len == 1);
            sources |= 1 << s.source;
            OK(ballast_request_free(r));
        }
        CHECK(sources == 6);
    } else {
        char b = (char)rank;
        OK(ballast_send(comm, 0, (uint32_t)(10 + rank), &b, 1));
    }
    OK(ballast_barrier(comm)); /* nothing else is sent before rank 0 took both */

    /* A message over the buffer: BALLAST_ETRUNC, the status tells its length, nothing is
     * consumed; iprobe sees it; a receive with room takes it. 0-byte messages. */
    if (rank == 0) {
        char small[10];
        ballast_status s;
        EXPECT_ERR(ballast_recv(comm, 1, 20, small, sizeof small, &s), BALLAST_ETRUNC, "100 bytes");
        CHECK(s.source == 1 && s.tag == 20 && s.len == 100 && s.error == BALLAST_ETRUNC);
        found = 0;
        OK(ballast_iprobe(comm, BALLAST_ANY_SOURCE, 20, &found, &s));
        CHECK(found == 1 && s.source == 1 && s.len == 100);
        uint8_t big[100];
        OK(ballast_recv(comm, BALLAST_ANY_SOURCE, 20, big, sizeof big, &s));
        CHECK(s.source == 1 && s.tag == 20 && s.len == 100 && big[99] == pattern(99, 1));
        OK(ballast_recv(comm, 2, 21, NULL, 0, &s));
        CHECK(s.source == 2 && s.tag == 21 && s.len == 0);
        /* A 0-byte receive's data is NULL with length 0. */
        ballast_request *z = NULL;
        OK(ballast_irecv(comm, 2, 23, &z));
        OK(ballast_wait(z, &s));
        const void *zd = (const void *)&s;
        size_t zl = 99;
        OK(ballast_request_data(z, &zd, &zl));
        CHECK(zd == NULL && zl == 0 && s.len == 0);
        OK(ballast_request_free(z));
    } else if (rank == 1) {
        uint8_t m[100];
        for (size_t i = 0; i < sizeof m; i++) m[i] = pattern(i, 1);
        OK(ballast_send(comm, 0, 20, m, sizeof m));
    } else {
        OK(ballast_send(comm, 0, 21, NULL, 0));
        OK(ballast_send(comm, 0, 23, NULL, 0));
    }

    /* 64 MiB from rank 0 to rank 1. */
    const size_t huge = (size_t)64 << 20;
    if (rank == 0) {
        uint8_t *m = malloc(huge);
        CHECK(m != NULL);
        if (m == NULL) return 1;
        for (size_t i = 0; i < huge; i++) m[i] = pattern(i, 3);
        ballast_request *r = NULL;
        OK(ballast_isend(comm, 1, 22, m, huge, &r));
        free(m); /* the library holds what it needs */
        ballast_status s;
        OK(ballast_wait(r, &s));
        CHECK(s.len == huge && s.source == 1);
        OK(ballast_request_free(r));
    } else if (rank == 1) {
        ballast_request *r = NULL;
        OK(ballast_irecv(comm, 0, 22, &r));
        ballast_status s;
        OK(ballast_wait(r, &s));
        CHECK(s.len == huge && s.source == 0 && s.tag == 22);
        OK(ballast_request_data(r, &data, &len));
        size_t bad = 0;
        for (size_t i = 0; i < len; i++) bad += ((const uint8_t *)data)[i] != pattern(i, 3);
        CHECK(len == huge && bad == 0);
        OK(ballast_request_free(r));
    }

    /* Back-pressure: isend without progress until every pool buffer is in flight. */
    if (rank == 0) {
        ballast_request *sent[64];
        uint8_t chunk[4096];
        memset(chunk, 5, sizeof chunk);
        int k = 0, rc = 0;
        while (k < 64) {
            ballast_request *r = (ballast_request *)&r;
            rc = ballast_isend(comm, 2, 30, chunk, sizeof chunk, &r);
            if (rc != 0) {
                CHECK(r == NULL);
                break;
            }
            sent[k++] = r;
        }
        EXPECT_ERR(rc, BALLAST_EAGAIN, "exhausted");
        CHECK(k >= 1 && k <= 16);
        ballast_status sts[64];
        OK(ballast_waitall((size_t)k, sent, sts));
        for (int i = 0; i < k; i++) {
            CHECK(sts[i].source == 2 && sts[i].len == sizeof chunk);
            OK(ballast_request_free(sent[i]));
        }
        int32_t count = k;
        OK(ballast_send(comm, 2, 31, &count, sizeof count));
    } else if (rank == 2) {
        int32_t count = 0;
        ballast_status s;
        OK(ballast_recv(comm, 0, 31, &count, sizeof count, &s));
        CHECK(s.len == sizeof count && count >= 1);
        uint8_t chunk[4096];
        for (int i = 0; i < count; i++) {
            OK(ballast_recv(comm, 0, 30, chunk, sizeof chunk, &s));
            CHECK(s.len == sizeof chunk && chunk[4095] == 5);
        }
    }

    /* Collectives. */
    OK(ballast_barrier(comm));
    uint8_t mine[3];
    memset(mine, rank, sizeof mine);
    ballast_gathered *g = (ballast_gathered *)&g;
    EXPECT_ERR(ballast_allgatherv(comm, mine, (size_t)rank + 1, NULL), BALLAST_EINVAL, "out is NULL");
    OK(ballast_allgatherv(comm, mine, (size_t)rank, &g));
    for (int r = 0; r < n; r++) {
        OK(ballast_gathered_part(g, r, &data, &len));
        CHECK(len == (size_t)r && (len == 0 || ((const uint8_t *)data)[len - 1] == r));
    }
    EXPECT_ERR(ballast_gathered_part(g, n, &data, &len), BALLAST_EINVAL, "rank 3 is out of range: the world has 3 ranks (0 to 2)");
    EXPECT_ERR(ballast_gathered_part(NULL, 0, &data, &len), BALLAST_EINVAL, "gathered is NULL");
    EXPECT_ERR(ballast_gathered_part(g, 0, &data, NULL), BALLAST_EINVAL, "len is NULL");
    OK(ballast_gathered_free(g));
    OK(ballast_gathered_free(NULL)); /* as free(NULL) */

    /* Memory. */
    ballast_footprint fp;
    OK(ballast_comm_footprint(comm, &fp));
    CHECK(fp.pool == 16 * 4096 && fp.total >= fp.pool && fp.peers_connected >= 1);
    CHECK(fp.endpoints_peak >= fp.endpoints_live && fp.endpoints_opened >= fp.endpoints_peak);
    EXPECT_ERR(ballast_comm_footprint(comm, NULL), BALLAST_EINVAL, "out is NULL");
    EXPECT_ERR(ballast_comm_footprint(NULL, &fp), BALLAST_EINVAL, "comm is NULL");
    return 0;
}

/* Rank 1 fails with a real error; rank 2 returns a code of its own. */
static int failing_main(ballast_comm *comm, void *user) {
    (void)user;
    int rank = -1;
    ballast_rank(comm, &rank);
    if (rank == 1) {
        char b = 0;
        return ballast_send(comm, 99, 1, &b, 1);
    }
    return rank == 2 ? 42 : 0;
}

/* Rank 0 fails without a Ballast error while rank 1 waits for a message from it that
 * never comes: the run must end (rank 1 is aborted, its receive BALLAST_EPEER). */
static int abandoning_main(ballast_comm *comm, void *user) {
    int *peer_rc = user;
    int rank = -1;
    ballast_rank(comm, &rank);
    if (rank == 0) return 7;
    char b[8];
    ballast_status st;
    *peer_rc = ballast_recv(comm, 0, 1, b, sizeof b, &st);
    return *peer_rc;
}

/* Leaves a completed request unfreed. */
static int leaking_main(ballast_comm *comm, void *user) {
    (void)user;
    int rank = -1;
    ballast_rank(comm, &rank);
    ballast_request *r = NULL;
    char b = 0;
    if (ballast_isend(comm, rank, 3, &b, 1, &r) != 0) return 1;
    return ballast_wait(r, NULL);
}

/* ballast_comm_from_env over local: a world of one process (no launcher). */
static void from_env_checks(const ballast_config *cfg) {
    ballast_comm *c = NULL;
    EXPECT_ERR(ballast_comm_from_env(cfg, NULL), BALLAST_EINVAL, "out is NULL");
    OK(ballast_comm_from_env(cfg, &c));
    CHECK(c != NULL);
    if (c == NULL) return;
    int rank = -1, n = -1;
    OK(ballast_rank(c, &rank));
    OK(ballast_world_size(c, &n));
    CHECK(rank == 0 && n == 1);
    OK(ballast_send(c, 0, 5, "self", 4));
    char buf[8] = {0};
    ballast_status st;
    OK(ballast_recv(c, BALLAST_ANY_SOURCE, 5, buf, sizeof buf, &st));
    CHECK(st.source == 0 && st.tag == 5 && st.len == 4 && memcmp(buf, "self", 4) == 0);
    EXPECT_ERR(ballast_send(c, 1, 5, "x", 1), BALLAST_EINVAL, "rank 1 is out of range: the world has 1 rank (0 to 0)");
    ballast_footprint fp;
    OK(ballast_comm_footprint(c, &fp));
    CHECK(fp.pool == 16 * 4096);
    OK(ballast_comm_free(c));

    /* A request still live at the free is cancelled and reported; the free completes. */
    c = NULL;
    OK(ballast_comm_from_env(cfg, &c));
    ballast_request *r = NULL;
    OK(ballast_irecv(c, 0, 9, &r));
    EXPECT_ERR(ballast_comm_free(c), BALLAST_EINVAL, "1 request(s) still live were cancelled");

    /* local is one process: a launcher of two is refused, naming the size. */
    setenv("BALLAST_RANK", "0", 1);
    setenv("BALLAST_SIZE", "2", 1);
    ballast_config *two = NULL;
    OK(ballast_config_new(&two));
    OK(ballast_config_set(two, "transport", "local"));
    c = (ballast_comm *)&st; /* set to NULL by the failing call */
    EXPECT_ERR(ballast_comm_from_env(two, &c), BALLAST_EINVAL, "launched as one of 2");
    CHECK(c == NULL);
    OK(ballast_config_free(two));
    unsetenv("BALLAST_RANK");
    unsetenv("BALLAST_SIZE");
#ifndef BALLAST_TEST_HAVE_MPI
    ballast_config *mpi = NULL;
    OK(ballast_config_new(&mpi));
    OK(ballast_config_set(mpi, "transport", "mpi"));
    EXPECT_ERR(ballast_comm_from_env(mpi, &c), BALLAST_EUNSUPPORTED, "not built into this libballast");
    OK(ballast_config_free(mpi));
#endif
}

int main(void) {
    char msg[256];
    CHECK(ballast_last_error(NULL, 0) == 0); /* nothing failed on this thread yet */

    /* The library's version is the header's; every code has a name. */
    int major = -1, minor = -1, patch = -1;
    OK(ballast_version(&major, &minor, &patch));
    CHECK(major == BALLAST_VERSION_MAJOR && minor == BALLAST_VERSION_MINOR && patch == BALLAST_VERSION_PATCH);
    OK(ballast_version(NULL, &minor, NULL));
    const char *name = NULL;
    OK(ballast_strerror(0, &name));
    CHECK(strncmp(name, "BALLAST_SUCCESS:", 16) == 0);
    OK(ballast_strerror(BALLAST_ETRUNC, &name));
    CHECK(strncmp(name, "BALLAST_ETRUNC:", 15) == 0 && strstr(name, "longer than the buffer") != NULL);
    const int codes[] = {BALLAST_EINVAL, BALLAST_ENOMEM, BALLAST_EAGAIN, BALLAST_EPEER,
                         BALLAST_EUNSUPPORTED, BALLAST_EINTERNAL, BALLAST_ETRUNC};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        OK(ballast_strerror(codes[i], &name));
        CHECK(strncmp(name, "BALLAST_E", 9) == 0);
    }
    EXPECT_ERR(ballast_strerror(-99, &name), BALLAST_EINVAL, "-99 is not a Ballast return code");
    CHECK(strcmp(name, "unknown Ballast return code") == 0);
    EXPECT_ERR(ballast_strerror(0, NULL), BALLAST_EINVAL, "out is NULL");

    ballast_config *cfg = NULL;
    EXPECT_ERR(ballast_config_new(NULL), BALLAST_EINVAL, "out is NULL");
    OK(ballast_config_new(&cfg));
    CHECK(cfg != NULL);
    EXPECT_ERR(ballast_config_set(NULL, "buffer_size", "4K"), BALLAST_EINVAL, "config is NULL");
    EXPECT_ERR(ballast_config_set(cfg, NULL, "4K"), BALLAST_EINVAL, "key is NULL");
    EXPECT_ERR(ballast_config_set(cfg, "buffer_size", NULL), BALLAST_EINVAL, "value is NULL");
    EXPECT_ERR(ballast_config_set(cfg, "buffer_sise", "4K"), BALLAST_EINVAL, "unknown key `buffer_sise` (did you mean `buffer_size`?); the keys are transport, buffer_count");
    EXPECT_ERR(ballast_config_set(cfg, "buffer-count", "4"), BALLAST_EINVAL, "(did you mean `buffer_count`?)");
    EXPECT_ERR(ballast_config_set(cfg, "endpoint_overfow", "evict"), BALLAST_EINVAL, "(did you mean `endpoint_overflow`?)");
    EXPECT_ERR(ballast_config_set(cfg, "BALLAST_RECV_SHARING", "shared"), BALLAST_EINVAL, "(did you mean `recv_sharing`?)");
    EXPECT_ERR(ballast_config_set(cfg, "lazy_connect", "maybe"), BALLAST_EINVAL, "lazy_connect");
    EXPECT_ERR(ballast_config_set(cfg, "buffer_size", "0"), BALLAST_EINVAL, "buffer_size");
    EXPECT_ERR(ballast_config_set(cfg, "recv_sharing", "everyone"), BALLAST_EINVAL, "recv_sharing");
    EXPECT_ERR(ballast_config_set(cfg, "transport", "carrier-pigeon"), BALLAST_EINVAL, "transport");

    /* snprintf semantics: the full length, at most len - 1 bytes and a NUL. */
    int full = ballast_last_error(msg, sizeof msg);
    CHECK(full > 8 && (size_t)full == strlen(msg));
    char cut[8];
    memset(cut, 'x', sizeof cut);
    CHECK(ballast_last_error(cut, sizeof cut) == full);
    CHECK(cut[7] == '\0' && strlen(cut) == 7 && strncmp(cut, msg, 7) == 0);
    CHECK(ballast_last_error(NULL, 4) == BALLAST_EINVAL);
    OK(ballast_config_set(cfg, "transport", "local"));
    OK(ballast_config_set(cfg, "buffer_size", "4K"));
    OK(ballast_config_set(cfg, "buffer_count", "16"));
    OK(ballast_config_set(cfg, "recv_sharing", "shared"));
    CHECK(ballast_last_error(NULL, 0) == full); /* a success does not clear it */

    /* The model's prediction. */
    ballast_footprint fp;
    OK(ballast_predict(cfg, 2, 3, 1, &fp));
    CHECK(fp.pool == 16 * 4096 && fp.total >= fp.pool + fp.shared_receive_queue);
    EXPECT_ERR(ballast_predict(cfg, 2, 0, 1, &fp), BALLAST_EINVAL, "world_size");
    EXPECT_ERR(ballast_predict(cfg, 3, 3, 1, &fp), BALLAST_EINVAL, "at most 2 peers");
    EXPECT_ERR(ballast_predict(cfg, 2, 3, 0, &fp), BALLAST_EINVAL, "ranks_per_node is 0");
    EXPECT_ERR(ballast_predict(NULL, 2, 3, 1, &fp), BALLAST_EINVAL, "config is NULL");
    EXPECT_ERR(ballast_predict(cfg, 2, 3, 1, NULL), BALLAST_EINVAL, "out is NULL");

    /* ballast_local_run's own failures. */
    int seen = 0;
    EXPECT_ERR(ballast_local_run(0, cfg, ranks_main, &seen), BALLAST_EINVAL, "nranks");
    EXPECT_ERR(ballast_local_run(3, cfg, NULL, &seen), BALLAST_EINVAL, "rank_main is NULL");
    ballast_config *mpi = NULL;
    OK(ballast_config_new(&mpi));
    OK(ballast_config_set(mpi, "transport", "mpi"));
    EXPECT_ERR(ballast_local_run(2, mpi, ranks_main, &seen), BALLAST_EINVAL, "needs local");
    OK(ballast_config_free(mpi));
    OK(ballast_config_free(NULL)); /* as free(NULL) */

    /* The lowest-numbered failing rank's result and message. */
    EXPECT_ERR(ballast_local_run(3, cfg, failing_main, NULL), BALLAST_EINVAL, "rank 1: ballast_send: rank 99");
    EXPECT_ERR(ballast_local_run(2, cfg, leaking_main, NULL), BALLAST_EINVAL, "not freed");
    int peer_rc = 0;
    EXPECT_ERR(ballast_local_run(2, cfg, abandoning_main, &peer_rc), 7,
               "rank 0: rank_main returned 7 (no Ballast call had failed on its thread)");
    CHECK(peer_rc == BALLAST_EPEER);

    /* Everything else, on 3 ranks. */
    int rc = ballast_local_run(3, cfg, ranks_main, &seen);
    if (rc != 0) {
        ballast_last_error(msg, sizeof msg);
        fprintf(stderr, "ranks_main: %d: %s\n", rc, msg);
    }
    CHECK(rc == 0 && seen == 1);
    from_env_checks(cfg);
    OK(ballast_config_free(cfg));

    int p = atomic_load(&passed), f = atomic_load(&failed);
    printf("capi conformance: %d passed, %d failed\n", p, f);
    return f == 0 ? 0 : 1;
}
