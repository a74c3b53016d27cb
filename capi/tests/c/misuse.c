/* Misuse that must get an error, not a crash (issue 35, point 5), over the local transport:
 * - a second thread calling into a communicator while another thread is inside a call on
 *   it (a blocking receive, and a wait on one of its requests) gets BALLAST_EUNSUPPORTED
 *   naming both threads, and the call inside completes normally afterwards;
 * - a rank's thread calling with another rank's request (wait, test, cancel, free) or
 *   communicator gets BALLAST_EINVAL naming that rank, whether the other rank is inside a
 *   call or not, and the owner completes its request afterwards;
 * - ballast_*_free(NULL) returns 0, as free(NULL) does;
 * - ballast_local_run and ballast_comm_from_env with a NULL configuration use the defaults.
 * Built with -fsanitize=address,undefined -pthread by capi/tests/c_programs.rs. Prints
 * "capi misuse: N passed, M failed". */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ballast.h"
#include "check.h"

static void pause_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* What rank 0's second thread and rank 1 share with rank 0's main thread. */
struct shared {
    ballast_comm *comm;          /* rank 0's */
    ballast_request *req;        /* rank 0's receive, waited for by its main thread */
    atomic_int inside;           /* rank 0's main thread is about to block (1: recv, 2: wait) */
    atomic_int tried;            /* the second thread made its calls (1, 2) */
    int rc_progress, rc_rank, rc_test, rc_free;
    char msg[1024], msg_wait[1024];
};

/* Rank 0's second thread: once the main thread is blocked inside the communicator, calls
 * into it and records what it got. */
static void *intruder(void *arg) {
    struct shared *s = arg;
    while (atomic_load(&s->inside) != 1) pause_ms(1);
    pause_ms(100); /* the main thread is inside ballast_recv, waiting for rank 1 */
    s->rc_progress = ballast_progress(s->comm);
    ballast_last_error(s->msg, sizeof s->msg);
    int r = -1;
    s->rc_rank = ballast_rank(s->comm, &r);
    atomic_store(&s->tried, 1);
    while (atomic_load(&s->inside) != 2) pause_ms(1);
    pause_ms(100); /* the main thread is inside ballast_wait on s->req */
    int done = -1;
    s->rc_test = ballast_test(s->req, &done, NULL);
    ballast_last_error(s->msg_wait, sizeof s->msg_wait);
    s->rc_free = ballast_request_free(s->req);
    atomic_store(&s->tried, 2);
    return NULL;
}

static int rank_main(ballast_comm *c, void *user) {
    struct shared *s = user;
    int rank = -1;
    OK(ballast_rank(c, &rank));
    char buf[16];
    ballast_status st;
    if (rank == 1) {
        while (atomic_load(&s->tried) != 1) pause_ms(1);
        OK(ballast_send(c, 0, 1, "one", 3));
        while (atomic_load(&s->tried) != 2) pause_ms(1);
        OK(ballast_send(c, 0, 2, "two", 3));
        return 0;
    }
    s->comm = c;
    OK(ballast_irecv(c, 1, 2, &s->req));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, intruder, s) == 0);
    atomic_store(&s->inside, 1);
    OK(ballast_recv(c, 1, 1, buf, sizeof buf, &st)); /* completes once the intruder tried */
    CHECK(st.len == 3 && memcmp(buf, "one", 3) == 0);
    atomic_store(&s->inside, 2);
    OK(ballast_wait(s->req, &st)); /* the same, on a request of the communicator */
    CHECK(st.len == 3 && st.tag == 2);
    CHECK(pthread_join(t, NULL) == 0);
    const void *data = NULL;
    size_t len = 0;
    OK(ballast_request_data(s->req, &data, &len));
    CHECK(len == 3 && memcmp(data, "two", 3) == 0);
    OK(ballast_request_free(s->req));
    return 0;
}

/* What the two ranks of the foreign-request run share. */
struct foreign {
    ballast_comm *comm0;   /* rank 0's */
    ballast_request *req0; /* rank 0's receive from rank 1, tag 7 */
    atomic_int posted;     /* rank 0 posted req0 */
    atomic_int tried_idle; /* rank 1 made its calls while rank 0 was outside any call */
    int rc_wait, rc_test, rc_cancel, rc_free, rc_comm, rc_busy;
    char msg_wait[1024], msg_test[1024], msg_cancel[1024], msg_free[1024], msg_comm[1024], msg_busy[1024];
};

static int foreign_main(ballast_comm *c, void *user) {
    struct foreign *s = user;
    int rank = -1;
    OK(ballast_rank(c, &rank));
    ballast_status st;
    if (rank == 0) {
        s->comm0 = c;
        OK(ballast_irecv(c, 1, 7, &s->req0));
        atomic_store(&s->posted, 1);
        while (atomic_load(&s->tried_idle) != 1) pause_ms(1);
        char buf[16];
        /* Inside this call while rank 1 tries again; it sends tag 8 after that. */
        OK(ballast_recv(c, 1, 8, buf, sizeof buf, &st));
        CHECK(st.len == 5 && memcmp(buf, "eight", 5) == 0);
        /* The owner's request was left as it was: it completes with rank 1's message. */
        OK(ballast_wait(s->req0, &st));
        CHECK(st.source == 1 && st.tag == 7 && st.len == 5);
        const void *data = NULL;
        size_t len = 0;
        OK(ballast_request_data(s->req0, &data, &len));
        CHECK(len == 5 && memcmp(data, "seven", 5) == 0);
        OK(ballast_request_free(s->req0));
        return 0;
    }
    while (atomic_load(&s->posted) != 1) pause_ms(1);
    /* Rank 0 is outside any call: nothing stops rank 1's thread but the check. */
    s->rc_wait = ballast_wait(s->req0, &st);
    ballast_last_error(s->msg_wait, sizeof s->msg_wait);
    int done = -1;
    s->rc_test = ballast_test(s->req0, &done, NULL);
    ballast_last_error(s->msg_test, sizeof s->msg_test);
    CHECK(done == -1);
    s->rc_cancel = ballast_request_cancel(s->req0);
    ballast_last_error(s->msg_cancel, sizeof s->msg_cancel);
    s->rc_free = ballast_request_free(s->req0);
    ballast_last_error(s->msg_free, sizeof s->msg_free);
    s->rc_comm = ballast_progress(s->comm0);
    ballast_last_error(s->msg_comm, sizeof s->msg_comm);
    atomic_store(&s->tried_idle, 1);
    pause_ms(100); /* rank 0 is inside ballast_recv, waiting for tag 8 */
    s->rc_busy = ballast_wait(s->req0, &st);
    ballast_last_error(s->msg_busy, sizeof s->msg_busy);
    OK(ballast_send(c, 0, 7, "seven", 5));
    OK(ballast_send(c, 0, 8, "eight", 5));
    return 0;
}

/* `msg` starts with "`func`: the request belongs to another communicator (rank 0), not to
 * this thread's (rank 1)". */
static int names_rank_0(const char *msg, const char *func, const char *whose) {
    char want[256];
    snprintf(want, sizeof want, "%s: %s (rank 0), not to this thread's (rank 1)", func, whose);
    if (strncmp(msg, want, strlen(want)) != 0) {
        fprintf(stderr, "expected \"%s...\", got \"%s\"\n", want, msg);
        return 0;
    }
    return 1;
}

static int defaults_main(ballast_comm *c, void *user) {
    (void)user;
    int n = -1, rank = -1;
    OK(ballast_world_size(c, &n));
    OK(ballast_rank(c, &rank));
    CHECK(n == 2);
    int v = rank + 40;
    OK(ballast_send(c, 1 - rank, 3, &v, sizeof v));
    int got = -1;
    ballast_status st;
    OK(ballast_recv(c, 1 - rank, 3, &got, sizeof got, &st));
    CHECK(got == 1 - rank + 40);
    return 0;
}

int main(void) {
    char msg[1024];

    /* Two threads on one communicator. */
    ballast_config *cfg = NULL;
    OK(ballast_config_new(&cfg));
    OK(ballast_config_set(cfg, "transport", "local"));
    struct shared s;
    memset(&s, 0, sizeof s);
    int rc = ballast_local_run(2, cfg, rank_main, &s);
    if (rc != 0) {
        ballast_last_error(msg, sizeof msg);
        fprintf(stderr, "ballast_local_run: %d: %s\n", rc, msg);
    }
    CHECK(rc == 0);
    CHECK(s.rc_progress == BALLAST_EUNSUPPORTED);
    CHECK(s.rc_rank == BALLAST_EUNSUPPORTED);
    CHECK(strstr(s.msg, "ballast_progress: called from thread 0x") == s.msg);
    CHECK(strstr(s.msg, " while thread 0x") != NULL && strstr(s.msg, "one thread at a time") != NULL);
    CHECK(s.rc_test == BALLAST_EUNSUPPORTED && s.rc_free == BALLAST_EUNSUPPORTED);
    CHECK(strstr(s.msg_wait, "ballast_test: called from thread 0x") == s.msg_wait);
    /* The two thread values differ. */
    unsigned long long a = 0, b = 0;
    CHECK(sscanf(s.msg, "ballast_progress: called from thread %llx while thread %llx", &a, &b) == 2 && a != b &&
          a != 0 && b != 0);

    /* Another rank's request or communicator, from a rank's thread. */
    struct foreign fs;
    memset(&fs, 0, sizeof fs);
    rc = ballast_local_run(2, cfg, foreign_main, &fs);
    if (rc != 0) {
        ballast_last_error(msg, sizeof msg);
        fprintf(stderr, "ballast_local_run(foreign): %d: %s\n", rc, msg);
    }
    CHECK(rc == 0);
    const char *req_of = "the request belongs to another communicator";
    CHECK(fs.rc_wait == BALLAST_EINVAL && names_rank_0(fs.msg_wait, "ballast_wait", req_of));
    CHECK(fs.rc_test == BALLAST_EINVAL && names_rank_0(fs.msg_test, "ballast_test", req_of));
    CHECK(fs.rc_cancel == BALLAST_EINVAL && names_rank_0(fs.msg_cancel, "ballast_request_cancel", req_of));
    CHECK(fs.rc_free == BALLAST_EINVAL && names_rank_0(fs.msg_free, "ballast_request_free", req_of));
    CHECK(fs.rc_busy == BALLAST_EINVAL && names_rank_0(fs.msg_busy, "ballast_wait", req_of));
    CHECK(fs.rc_comm == BALLAST_EINVAL &&
          names_rank_0(fs.msg_comm, "ballast_progress", "the communicator belongs to another rank"));

    /* NULL frees are no-ops, as free(NULL). */
    OK(ballast_config_free(NULL));
    OK(ballast_comm_free(NULL));
    OK(ballast_request_free(NULL));
    OK(ballast_gathered_free(NULL));

    /* A NULL configuration is the defaults (local transport). */
    rc = ballast_local_run(2, NULL, defaults_main, NULL);
    if (rc != 0) {
        ballast_last_error(msg, sizeof msg);
        fprintf(stderr, "ballast_local_run(NULL config): %d: %s\n", rc, msg);
    }
    CHECK(rc == 0);
    ballast_comm *one = NULL;
    rc = ballast_comm_from_env(NULL, &one);
    if (rc != 0) {
        ballast_last_error(msg, sizeof msg);
        fprintf(stderr, "ballast_comm_from_env(NULL config): %d: %s\n", rc, msg);
    }
    CHECK(rc == 0 && one != NULL);
    if (one != NULL) {
        int n = -1;
        OK(ballast_world_size(one, &n));
        CHECK(n == 1);
        OK(ballast_comm_free(one));
    }
    OK(ballast_config_free(cfg));

    int p = atomic_load(&passed), f = atomic_load(&failed);
    printf("capi misuse: %d passed, %d failed\n", p, f);
    return f == 0 ? 0 : 1;
}
