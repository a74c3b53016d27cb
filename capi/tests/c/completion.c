/* Completion and the caller's buffer (issue 35, points 2 and 3), over the local transport on
 * 2 ranks: ballast_irecv_into (the message in the caller's buffer; a longer one refused
 * with BALLAST_ETRUNC and left queued, whether it was queued already or arrives later),
 * ballast_request_cancel (a posted receive withdrawn with BALLAST_ECANCELED and the message
 * that comes later received by the next receive; a matched receive, a send, a completed or
 * cancelled request refused with BALLAST_EINVAL and nothing changed), ballast_waitany
 * (NULL entries skipped, a request completed before counted, the lowest complete index,
 * SIZE_MAX when all are NULL) and ballast_testsome (ascending indices, statuses[k] of
 * indices[k], requests completed before given again). Every received message is checked
 * byte for byte against what the sender computed. Built with -fsanitize=address,undefined
 * by capi/tests/c_programs.rs. Prints "capi completion: N passed, M failed". */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ballast.h"
#include "check.h"

/* The bytes rank 1 sends with `tag`: `len` of them, a pattern of the tag. */
static void fill(uint8_t *buf, size_t len, uint32_t tag) {
    for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)(i * 31u + tag * 7u + 1u);
}

static int same(const uint8_t *got, size_t len, uint32_t tag) {
    uint8_t want[256];
    fill(want, len, tag);
    return memcmp(got, want, len) == 0;
}

static void send_tag(ballast_comm *c, uint32_t tag, size_t len) {
    uint8_t buf[256];
    fill(buf, len, tag);
    OK(ballast_send(c, 0, tag, buf, len));
}

/* Rank 0: waits until a message from rank 1 with `tag` is queued (matched by no receive). */
static void until_queued(ballast_comm *c, uint32_t tag) {
    int found = 0;
    ballast_status st;
    while (!found) OK(ballast_iprobe(c, 1, tag, &found, &st));
}

static void receiver(ballast_comm *c) {
    uint8_t buf[256];
    ballast_status st;
    ballast_request *r = NULL;
    int done = 0;

    /* 1. irecv_into, posted before the message: in the caller's buffer. */
    memset(buf, 0xAA, sizeof buf);
    OK(ballast_irecv_into(c, 1, 5, buf, 16, &r));
    OK(ballast_barrier(c)); /* B1: rank 1 sends tag 5 (8 B) */
    OK(ballast_wait(r, &st));
    CHECK(st.source == 1 && st.tag == 5 && st.len == 8 && st.error == 0);
    CHECK(same(buf, 8, 5) && buf[8] == 0xAA); /* nothing past the message written */
    const void *data = NULL;
    size_t len = 0;
    OK(ballast_request_data(r, &data, &len));
    CHECK(data == buf && len == 8);
    OK(ballast_request_free(r));

    /* 2. A longer message arriving after the post: BALLAST_ETRUNC, the buffer untouched,
     * the message still there for the next receive. */
    memset(buf, 0xAA, sizeof buf);
    OK(ballast_irecv_into(c, 1, 6, buf, 16, &r));
    OK(ballast_barrier(c)); /* B2: rank 1 sends tag 6 (40 B) */
    EXPECT_ERR(ballast_wait(r, &st), BALLAST_ETRUNC, "40 bytes");
    CHECK(st.source == 1 && st.tag == 6 && st.len == 40 && st.error == BALLAST_ETRUNC);
    CHECK(buf[0] == 0xAA && buf[15] == 0xAA);
    EXPECT_ERR(ballast_request_data(r, &data, &len), BALLAST_EINVAL, "failed");
    OK(ballast_request_free(r));
    OK(ballast_recv(c, 1, 6, buf, sizeof buf, &st));
    CHECK(st.len == 40 && same(buf, 40, 6));

    /* 3. A longer message queued before the post: refused at its first test. */
    OK(ballast_barrier(c)); /* B3: rank 1 sends tag 7 (24 B) */
    until_queued(c, 7);
    OK(ballast_irecv_into(c, 1, 7, buf, 23, &r));
    EXPECT_ERR(ballast_test(r, &done, &st), BALLAST_ETRUNC, "24 bytes");
    CHECK(done == 1 && st.len == 24 && st.tag == 7);
    EXPECT_ERR(ballast_request_cancel(r), BALLAST_EINVAL, "completed already");
    OK(ballast_request_free(r));
    OK(ballast_irecv_into(c, 1, 7, buf, 24, &r)); /* exactly its length: taken */
    OK(ballast_wait(r, &st));
    CHECK(st.len == 24 && same(buf, 24, 7));
    OK(ballast_request_free(r));

    /* 4. Cancel a posted receive that nothing matched: it completes as cancelled, and the
     * message sent afterwards goes to the next receive. */
    ballast_request *plain = NULL, *into = NULL;
    OK(ballast_irecv(c, 1, 8, &plain));
    OK(ballast_irecv_into(c, 1, 8, buf, sizeof buf, &into));
    OK(ballast_request_cancel(plain));
    OK(ballast_request_cancel(into));
    EXPECT_ERR(ballast_test(plain, &done, &st), BALLAST_ECANCELED, "cancelled");
    CHECK(done == 1 && st.error == BALLAST_ECANCELED && st.len == 0);
    EXPECT_ERR(ballast_wait(into, &st), BALLAST_ECANCELED, "cancelled");
    CHECK(st.error == BALLAST_ECANCELED);
    EXPECT_ERR(ballast_request_cancel(plain), BALLAST_EINVAL, "it was cancelled");
    EXPECT_ERR(ballast_request_data(plain, &data, &len), BALLAST_EINVAL, "failed");
    OK(ballast_request_free(plain));
    OK(ballast_request_free(into));
    OK(ballast_barrier(c)); /* B4: rank 1 sends tag 8 (12 B) */
    OK(ballast_recv(c, 1, 8, buf, sizeof buf, &st));
    CHECK(st.len == 12 && same(buf, 12, 8));

    /* 5. A receive a message has matched, and a send: not cancelled, nothing changed. */
    OK(ballast_barrier(c)); /* B5: rank 1 sends tag 9 (3 B) */
    until_queued(c, 9);
    OK(ballast_irecv(c, 1, 9, &r));
    EXPECT_ERR(ballast_request_cancel(r), BALLAST_EINVAL, "matched");
    OK(ballast_wait(r, &st));
    CHECK(st.len == 3);
    OK(ballast_request_data(r, &data, &len));
    CHECK(len == 3 && same(data, 3, 9));
    OK(ballast_request_free(r));
    ballast_request *s = NULL;
    OK(ballast_isend(c, 0, 99, "self", 4, &s));
    EXPECT_ERR(ballast_request_cancel(s), BALLAST_EINVAL, "a send");
    OK(ballast_wait(s, &st));
    CHECK(st.source == 0 && st.tag == 99 && st.len == 4);
    OK(ballast_request_free(s));
    OK(ballast_recv(c, 0, 99, buf, sizeof buf, &st));
    CHECK(st.len == 4 && memcmp(buf, "self", 4) == 0);
    EXPECT_ERR(ballast_request_cancel(NULL), BALLAST_EINVAL, "request is NULL");

    /* 6. waitany: NULL entries skipped, the lowest complete index, SIZE_MAX when all NULL. */
    ballast_request *reqs[4] = {NULL, NULL, NULL, NULL};
    OK(ballast_irecv(c, 1, 10, &reqs[0]));
    OK(ballast_irecv(c, 1, 11, &reqs[2]));
    OK(ballast_irecv(c, 1, 12, &reqs[3]));
    size_t index = 77;
    OK(ballast_barrier(c)); /* B6: rank 1 sends tag 11 (5 B) */
    OK(ballast_waitany(4, reqs, &index, &st));
    CHECK(index == 2 && st.tag == 11 && st.len == 5 && st.source == 1);
    OK(ballast_waitany(4, reqs, &index, &st)); /* completed before, not freed: again */
    CHECK(index == 2 && st.tag == 11);
    OK(ballast_request_data(reqs[2], &data, &len));
    CHECK(len == 5 && same(data, 5, 11));
    OK(ballast_request_free(reqs[2]));
    reqs[2] = NULL;
    OK(ballast_barrier(c)); /* B7: rank 1 sends tags 12 then 10, delivered before it returns */
    OK(ballast_barrier(c)); /* B8 */
    OK(ballast_waitany(4, reqs, &index, &st));
    CHECK(index == 0 && st.tag == 10); /* both complete: the lowest index */
    OK(ballast_request_free(reqs[0]));
    reqs[0] = NULL;
    OK(ballast_waitany(4, reqs, &index, NULL));
    CHECK(index == 3);
    OK(ballast_request_free(reqs[3]));
    reqs[3] = NULL;
    index = 77;
    OK(ballast_waitany(4, reqs, &index, &st));
    CHECK(index == SIZE_MAX);
    index = 77;
    OK(ballast_waitany(0, NULL, &index, &st));
    CHECK(index == SIZE_MAX);
    EXPECT_ERR(ballast_waitany(4, reqs, NULL, &st), BALLAST_EINVAL, "index is NULL");
    EXPECT_ERR(ballast_waitany(2, NULL, &index, &st), BALLAST_EINVAL, "reqs is NULL");
    ballast_request *stale = NULL;
    OK(ballast_isend(c, 0, 98, "x", 1, &stale));
    OK(ballast_wait(stale, &st));
    OK(ballast_request_free(stale));
    OK(ballast_recv(c, 0, 98, buf, sizeof buf, &st));
    ballast_request *bad[2] = {NULL, stale};
    EXPECT_ERR(ballast_waitany(2, bad, &index, &st), BALLAST_EINVAL, "request 1");
    CHECK(index == SIZE_MAX);

    /* 7. testsome: ascending indices, statuses[k] of indices[k], given again until freed. */
    ballast_request *some[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < 5; i++) OK(ballast_irecv_into(c, 1, 20 + i, buf + 40 * i, 40, &some[i]));
    size_t idx[5], count = 99;
    ballast_status sts[5];
    OK(ballast_testsome(5, some, idx, &count, sts));
    CHECK(count == 0);
    OK(ballast_barrier(c)); /* B9: rank 1 sends tags 23, 21 (7 B each) and 24 (41 B) */
    OK(ballast_barrier(c)); /* B10 */
    EXPECT_ERR(ballast_testsome(5, some, idx, &count, sts), BALLAST_ETRUNC, "request 4");
    CHECK(count == 3 && idx[0] == 1 && idx[1] == 3 && idx[2] == 4);
    CHECK(sts[0].tag == 21 && sts[0].len == 7 && sts[0].error == 0 && same(buf + 40, 7, 21));
    CHECK(sts[1].tag == 23 && sts[1].len == 7 && sts[1].error == 0 && same(buf + 120, 7, 23));
    CHECK(sts[2].tag == 24 && sts[2].len == 41 && sts[2].error == BALLAST_ETRUNC);
    OK(ballast_request_free(some[1]));
    some[1] = NULL;
    OK(ballast_request_free(some[4]));
    some[4] = NULL;
    EXPECT_ERR(ballast_testsome(5, some, idx, NULL, sts), BALLAST_EINVAL, "count is NULL");
    OK(ballast_testsome(5, some, idx, &count, NULL)); /* 23, completed before, again */
    CHECK(count == 1 && idx[0] == 3);
    OK(ballast_request_free(some[3]));
    some[3] = NULL;
    OK(ballast_request_cancel(some[2]));
    OK(ballast_barrier(c)); /* B11: rank 1 sends tag 20 (9 B) */
    OK(ballast_barrier(c)); /* B12 */
    EXPECT_ERR(ballast_testsome(5, some, idx, &count, sts), BALLAST_ECANCELED, "request 2");
    CHECK(count == 2 && idx[0] == 0 && idx[1] == 2);
    CHECK(sts[0].tag == 20 && sts[0].len == 9 && same(buf, 9, 20));
    CHECK(sts[1].error == BALLAST_ECANCELED);
    OK(ballast_request_free(some[0]));
    OK(ballast_request_free(some[2]));
    OK(ballast_recv(c, 1, 24, buf, sizeof buf, &st)); /* the refused message stayed */
    CHECK(st.len == 41 && same(buf, 41, 24));
    count = 99;
    OK(ballast_testsome(0, NULL, NULL, &count, NULL));
    CHECK(count == 0);
}

static void sender(ballast_comm *c) {
    OK(ballast_barrier(c)); /* B1 */
    send_tag(c, 5, 8);
    OK(ballast_barrier(c)); /* B2 */
    send_tag(c, 6, 40);
    OK(ballast_barrier(c)); /* B3 */
    send_tag(c, 7, 24);
    OK(ballast_barrier(c)); /* B4 */
    send_tag(c, 8, 12);
    OK(ballast_barrier(c)); /* B5 */
    send_tag(c, 9, 3);
    OK(ballast_barrier(c)); /* B6 */
    send_tag(c, 11, 5);
    OK(ballast_barrier(c)); /* B7 */
    send_tag(c, 12, 6);
    send_tag(c, 10, 6);
    OK(ballast_barrier(c)); /* B8 */
    OK(ballast_barrier(c)); /* B9 */
    send_tag(c, 23, 7);
    send_tag(c, 21, 7);
    send_tag(c, 24, 41);
    OK(ballast_barrier(c)); /* B10 */
    OK(ballast_barrier(c)); /* B11 */
    send_tag(c, 20, 9);
    OK(ballast_barrier(c)); /* B12 */
}

static int rank_main(ballast_comm *c, void *user) {
    (void)user;
    int rank = -1;
    OK(ballast_rank(c, &rank));
    if (rank == 0) {
        receiver(c);
    } else {
        sender(c);
    }
    return 0;
}

int main(void) {
    ballast_config *cfg = NULL;
    OK(ballast_config_new(&cfg));
    OK(ballast_config_set(cfg, "transport", "local"));
    int rc = ballast_local_run(2, cfg, rank_main, NULL);
    if (rc != 0) {
        char msg[1024];
        ballast_last_error(msg, sizeof msg);
        fprintf(stderr, "ballast_local_run: %d: %s\n", rc, msg);
    }
    CHECK(rc == 0);
    OK(ballast_config_free(cfg));
    const char *name = NULL;
    OK(ballast_strerror(BALLAST_ECANCELED, &name));
    CHECK(strncmp(name, "BALLAST_ECANCELED:", 18) == 0);
    int p = atomic_load(&passed), f = atomic_load(&failed);
    printf("capi completion: %d passed, %d failed\n", p, f);
    return f == 0 ? 0 : 1;
}
