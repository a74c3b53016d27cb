/* The C ABI sequence fuzzer (issue 33): random sequences of calls on a few handles of
 * every kind (configurations, communicators, requests, collective results), frees
 * included, with the freed (stale) handles, handles of another kind and made-up values
 * given back to the library among the live ones. Checks that nothing crashes, that every
 * misuse is refused with BALLAST_EINVAL (a stale, foreign or made-up handle; a length no
 * buffer can have; NULL), and that a call on a live handle with good arguments returns one
 * of the codes it may return (never BALLAST_EINTERNAL: no panic). Every message is sent to
 * the sending rank itself (a world of one from ballast_comm_from_env, and each rank of a
 * ballast_local_run of 2 talking to itself), so no call waits on another rank.
 *
 *   fuzz SEED ITERATIONS      one sequence; prints "capi fuzz SEED: N calls, ok"
 *
 * Built with -fsanitize=address,undefined (the C side) and run under valgrind (which also
 * sees the Rust side read freed memory) by ci/capi.sh; capi/tests/c_programs.rs runs a few
 * seeds under the sanitizers. A failure prints the seed and the call. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ballast.h"

#define NCFG 2
#define NCOMM 3
#define NREQ 8
#define NGATH 3
#define NSTALE 32
#define BUF (1 << 16)

static atomic_int failures;
static atomic_long calls;
static uint64_t seed0;

typedef struct {
    uint64_t s;
} rng;

static uint64_t next(rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}
static unsigned pick(rng *r, unsigned n) { return (unsigned)(next(r) % n); }

/* rc must be one of the codes in `ok` (terminated by 1). */
static void expect_in(int rc, const int *ok, const char *what, int line) {
    atomic_fetch_add(&calls, 1);
    for (const int *c = ok; *c != 1; c++)
        if (rc == *c) return;
    char msg[512];
    ballast_last_error(msg, sizeof msg);
    atomic_fetch_add(&failures, 1);
    fprintf(stderr, "seed %llu: line %d: %s returned %d (%s)\n", (unsigned long long)seed0, line, what, rc, msg);
}
#define EXPECT(call, ...)                                    \
    do {                                                     \
        const int ok_[] = {__VA_ARGS__, 1};                  \
        expect_in((call), ok_, #call, __LINE__);             \
    } while (0)
#define STALE(call) EXPECT(call, BALLAST_EINVAL)

/* The handles of one sequence: live ones in slots (NULL when empty), and stale ones. */
typedef struct {
    rng r;
    ballast_comm *comm[NCOMM];
    int owned; /* the communicators are this sequence's (from_env), else one lent comm */
    ballast_request *req[NREQ];
    int req_comm[NREQ];
    ballast_gathered *gath[NGATH];
    void *stale[NSTALE]; /* freed handles of any kind */
    unsigned nstale;
    unsigned char buf[BUF];
    unsigned char into[NREQ][64]; /* the buffer of slot q's ballast_irecv_into */
} state;

static void bury(state *s, void *h) { s->stale[s->nstale++ % NSTALE] = h; }

/* A handle that is not live: freed, or made up (with an even generation, which no live
 * handle has, or the generation 2^32 - 1, which none reaches: made up is never live). */
static void *dead(state *s) {
    unsigned n = s->nstale < NSTALE ? s->nstale : NSTALE;
    if (n > 0 && pick(&s->r, 4) != 0) return s->stale[pick(&s->r, n)];
    static const uint64_t made_up[] = {1, 0x200000001ull, 0xffffffffffffffffull, 0x7ffffffe00000001ull,
                                       0x400000007ull};
    if (pick(&s->r, 2)) return (void *)(uintptr_t)made_up[pick(&s->r, 5)];
    return (void *)(uintptr_t)((next(&s->r) & ~(1ull << 32)) | 1);
}

static ballast_comm *any_comm(state *s) {
    ballast_comm *c = s->comm[pick(&s->r, NCOMM)];
    return c;
}

static size_t any_len(state *s) {
    switch (pick(&s->r, 8)) {
    case 0: return 0;
    case 1: return BUF;
    case 2: return 4096;
    default: return pick(&s->r, 300);
    }
}

/* One random call. `cfgs` are the configurations of this sequence. */
static void step(state *s, ballast_config **cfgs) {
    unsigned op = pick(&s->r, 26);
    int q = (int)pick(&s->r, NREQ);
    ballast_comm *c = any_comm(s);
    int tag = (int)pick(&s->r, 4);
    ballast_status st;
    switch (op) {
    case 0: /* isend to itself */
        if (c != NULL && s->req[q] == NULL) {
            ballast_request *r = NULL;
            int rank = 0;
            ballast_rank(c, &rank);
            int rc = ballast_isend(c, rank, (uint32_t)tag, s->buf, any_len(s), &r);
            EXPECT(rc, 0, BALLAST_EAGAIN);
            if (rc == 0) {
                s->req[q] = r;
                s->req_comm[q] = (int)(c == s->comm[0] ? 0 : c == s->comm[1] ? 1 : 2);
            }
        }
        break;
    case 1: /* irecv from itself or anyone */
        if (c != NULL && s->req[q] == NULL) {
            ballast_request *r = NULL;
            int rank = 0;
            ballast_rank(c, &rank);
            int src = pick(&s->r, 2) ? BALLAST_ANY_SOURCE : rank;
            int64_t t = pick(&s->r, 3) ? tag : BALLAST_ANY_TAG;
            int rc = pick(&s->r, 3) ? ballast_irecv(c, src, t, &r)
                                    : ballast_irecv_into(c, src, t, s->into[q], pick(&s->r, 65), &r);
            EXPECT(rc, 0);
            if (rc == 0) {
                s->req[q] = r;
                s->req_comm[q] = (int)(c == s->comm[0] ? 0 : c == s->comm[1] ? 1 : 2);
            }
        }
        break;
    case 2: { /* test a live request */
        int done = 0;
        if (s->req[q] != NULL) EXPECT(ballast_test(s->req[q], &done, &st), 0, BALLAST_ETRUNC, BALLAST_ECANCELED);
        break;
    }
    case 3: { /* wait, only once it is known to complete (a send to itself, or tested done) */
        int done = 0;
        if (s->req[q] != NULL && ballast_test(s->req[q], &done, NULL) == 0 && done)
            EXPECT(ballast_wait(s->req[q], &st), 0);
        break;
    }
    case 4: { /* data of a live request */
        const void *d = NULL;
        size_t len = 0;
        if (s->req[q] != NULL) EXPECT(ballast_request_data(s->req[q], &d, &len), 0, BALLAST_EINVAL);
        break;
    }
    case 5: /* free a live request: refused until it completed */
        if (s->req[q] != NULL) {
            int rc = ballast_request_free(s->req[q]);
            EXPECT(rc, 0, BALLAST_EINVAL);
            if (rc == 0) {
                bury(s, s->req[q]);
                s->req[q] = NULL;
            }
        }
        break;
    case 6: { /* every call on a stale or made-up request */
        ballast_request *r = dead(s);
        int done = 0;
        const void *d = NULL;
        size_t len = 0;
        STALE(ballast_test(r, &done, &st));
        STALE(ballast_wait(r, &st));
        STALE(ballast_request_data(r, &d, &len));
        STALE(ballast_request_free(r));
        ballast_request *two[2] = {r, r};
        STALE(ballast_waitall(2, two, NULL));
        STALE(ballast_request_cancel(r));
        size_t idx = 0, ix[2], cnt = 0;
        STALE(ballast_waitany(2, two, &idx, &st));
        STALE(ballast_testsome(2, two, ix, &cnt, NULL));
        break;
    }
    case 7: { /* every call on a stale or made-up communicator */
        ballast_comm *d = dead(s);
        int v = 0;
        ballast_request *r = NULL;
        ballast_gathered *g = NULL;
        ballast_footprint fp;
        STALE(ballast_rank(d, &v));
        STALE(ballast_world_size(d, &v));
        STALE(ballast_send(d, 0, 1, s->buf, 1));
        STALE(ballast_isend(d, 0, 1, s->buf, 1, &r));
        STALE(ballast_irecv(d, 0, 1, &r));
        STALE(ballast_irecv_into(d, 0, 1, s->buf, 1, &r));
        STALE(ballast_recv(d, 0, 1, s->buf, 1, &st));
        STALE(ballast_iprobe(d, 0, 1, &v, &st));
        STALE(ballast_progress(d));
        STALE(ballast_barrier(d));
        STALE(ballast_allgatherv(d, s->buf, 1, &g));
        STALE(ballast_comm_footprint(d, &fp));
        STALE(ballast_comm_free(d));
        break;
    }
    case 8: { /* configuration calls on a stale one */
        ballast_config *d = dead(s);
        ballast_footprint fp;
        ballast_comm *o = NULL;
        STALE(ballast_config_set(d, "buffer_size", "4K"));
        STALE(ballast_config_free(d));
        STALE(ballast_predict(d, 1, 2, 1, &fp));
        STALE(ballast_comm_from_env(d, &o));
        STALE(ballast_local_run(1, d, NULL, NULL));
        break;
    }
    case 9: { /* all-gather result calls on a stale one */
        ballast_gathered *d = dead(s);
        const void *p = NULL;
        size_t len = 0;
        STALE(ballast_gathered_part(d, 0, &p, &len));
        STALE(ballast_gathered_free(d));
        break;
    }
    case 10: /* a handle of another kind */
        if (c != NULL) {
            STALE(ballast_config_free((ballast_config *)c));
            STALE(ballast_request_free((ballast_request *)c));
            STALE(ballast_gathered_free((ballast_gathered *)c));
        }
        if (s->req[q] != NULL) {
            int v = 0;
            STALE(ballast_rank((ballast_comm *)s->req[q], &v));
            STALE(ballast_config_set((ballast_config *)s->req[q], "buffer_size", "4K"));
        }
        STALE(ballast_barrier((ballast_comm *)cfgs[0]));
        break;
    case 11: /* lengths no buffer can have */
        if (c != NULL) {
            ballast_request *r = NULL;
            ballast_gathered *g = NULL;
            size_t huge = pick(&s->r, 2) ? (size_t)-1 : (size_t)PTRDIFF_MAX + 1 + pick(&s->r, 1000);
            STALE(ballast_send(c, 0, 1, s->buf, huge));
            STALE(ballast_isend(c, 0, 1, s->buf, huge, &r));
            if (s->owned) STALE(ballast_allgatherv(c, s->buf, huge, &g));
        }
        break;
    case 12: /* blocking send to itself */
        if (c != NULL) {
            int rank = 0;
            ballast_rank(c, &rank);
            EXPECT(ballast_send(c, rank, (uint32_t)tag, s->buf, any_len(s)), 0);
        }
        break;
    case 13: { /* probe, then receive what is there (maybe into too small a buffer) */
        int found = 0;
        if (c != NULL && ballast_iprobe(c, BALLAST_ANY_SOURCE, tag, &found, &st) == 0 && found) {
            size_t cap = pick(&s->r, 2) ? BUF : pick(&s->r, 64);
            EXPECT(ballast_recv(c, BALLAST_ANY_SOURCE, tag, s->buf, cap, &st), 0, BALLAST_ETRUNC);
        }
        break;
    }
    case 14: /* progress, footprint, queries */
        if (c != NULL) {
            ballast_footprint fp;
            int v = 0;
            EXPECT(ballast_progress(c), 0);
            EXPECT(ballast_comm_footprint(c, &fp), 0);
            EXPECT(ballast_world_size(c, &v), 0);
        }
        break;
    case 15: /* all-gather (a world of one: collective over this rank alone) */
        if (c != NULL && s->owned) {
            unsigned k = pick(&s->r, NGATH);
            if (s->gath[k] == NULL) {
                EXPECT(ballast_allgatherv(c, s->buf, any_len(s), &s->gath[k]), 0);
            } else {
                const void *p = NULL;
                size_t len = 0;
                EXPECT(ballast_gathered_part(s->gath[k], (int)pick(&s->r, 3) - 1, &p, &len), 0, BALLAST_EINVAL);
            }
        }
        break;
    case 16: { /* free an all-gather result */
        unsigned k = pick(&s->r, NGATH);
        if (s->gath[k] != NULL) {
            EXPECT(ballast_gathered_free(s->gath[k]), 0);
            bury(s, s->gath[k]);
            s->gath[k] = NULL;
        }
        break;
    }
    case 17: { /* free a communicator (its live requests are cancelled: stale now) and make another */
        if (!s->owned) break;
        unsigned k = pick(&s->r, NCOMM);
        if (s->comm[k] != NULL) {
            int live = 0;
            for (int i = 0; i < NREQ; i++) live += s->req[i] != NULL && s->req_comm[i] == (int)k;
            EXPECT(ballast_comm_free(s->comm[k]), live ? BALLAST_EINVAL : 0);
            for (int i = 0; i < NREQ; i++)
                if (s->req[i] != NULL && s->req_comm[i] == (int)k) {
                    bury(s, s->req[i]);
                    s->req[i] = NULL;
                }
            bury(s, s->comm[k]);
            s->comm[k] = NULL;
        } else {
            /* A configuration set to sizes that do not fit is refused (ENOMEM), or to a bad
             * combination (EINVAL). */
            EXPECT(ballast_comm_from_env(cfgs[pick(&s->r, NCFG)], &s->comm[k]), 0, BALLAST_ENOMEM, BALLAST_EINVAL);
        }
        break;
    }
    case 18: { /* configurations: set (good and bad), predict (with huge values) */
        static const char *kv[][2] = {{"buffer_size", "4K"}, {"buffer_size", "0"},      {"srq_depth", "2147483647"},
                                      {"recv_depth", "1048576"}, {"recv_sharing", "per-peer"}, {"buffer_count", "x"},
                                      {"nonsense", "1"},        {"buffer_size", "1G"},     {"recv_sharing", "shared"}};
        ballast_config *cf = cfgs[pick(&s->r, NCFG)];
        unsigned k = pick(&s->r, 9);
        EXPECT(ballast_config_set(cf, kv[k][0], kv[k][1]), 0, BALLAST_EINVAL);
        ballast_footprint fp;
        uint32_t w = pick(&s->r, 2) ? 4 : 0xffffffffu;
        EXPECT(ballast_predict(cf, w - 1, w, 1, &fp), 0, BALLAST_EINVAL);
        break;
    }
    case 19: { /* NULLs */
        int v = 0;
        STALE(ballast_rank(NULL, &v));
        EXPECT(ballast_request_free(NULL), 0); /* as free(NULL) */
        EXPECT(ballast_gathered_free(NULL), 0);
        EXPECT(ballast_config_free(NULL), 0);
        EXPECT(ballast_comm_free(NULL), 0);
        if (c != NULL) STALE(ballast_rank(c, NULL));
        break;
    }
    case 24: /* cancel a live request: a posted receive nothing matched, else refused */
        if (s->req[q] != NULL) EXPECT(ballast_request_cancel(s->req[q]), 0, BALLAST_EINVAL);
        break;
    case 25: { /* testsome over the live slots (NULL entries skipped) */
        size_t ix[NREQ], cnt = 0;
        ballast_status sts[NREQ];
        EXPECT(ballast_testsome(NREQ, s->req, ix, &cnt, pick(&s->r, 2) ? sts : NULL), 0, BALLAST_ETRUNC,
               BALLAST_ECANCELED);
        for (size_t k = 1; k < cnt; k++)
            if (ix[k - 1] >= ix[k]) EXPECT(BALLAST_EINTERNAL, 0); /* ascending, or a failure */
        break;
    }
    default: /* a live request waited and freed, to keep the slots turning over */
        if (s->req[q] != NULL) {
            int done = 0;
            if (ballast_test(s->req[q], &done, NULL) == 0 && done) {
                EXPECT(ballast_request_free(s->req[q]), 0);
                bury(s, s->req[q]);
                s->req[q] = NULL;
            }
        }
        break;
    }
}

/* Frees what is live (requests: drained first, by sending what a receive waits for). */
static void drain(state *s) {
    for (int i = 0; i < NREQ; i++) {
        if (s->req[i] == NULL) continue;
        int done = 0;
        if (ballast_test(s->req[i], &done, NULL) == 0 && !done) {
            /* A receive still waiting: send it messages of every tag (receives posted
             * before it may take some) until it completes. */
            ballast_comm *c = s->comm[s->req_comm[i]];
            int rank = 0;
            ballast_rank(c, &rank);
            for (int round = 0; round < 4 * NREQ && !done; round++) {
                ballast_send(c, rank, (uint32_t)(round % 4), s->buf, 1);
                ballast_test(s->req[i], &done, NULL);
            }
        }
        EXPECT(ballast_request_free(s->req[i]), 0);
        s->req[i] = NULL;
    }
    for (int k = 0; k < NGATH; k++)
        if (s->gath[k] != NULL) {
            EXPECT(ballast_gathered_free(s->gath[k]), 0);
            s->gath[k] = NULL;
        }
}

typedef struct {
    uint64_t seed;
    long iters;
    ballast_comm *kept[2];
} run_args;

/* Each rank of a ballast_local_run fuzzes its own communicator, talking to itself. */
static int rank_main(ballast_comm *comm, void *user) {
    run_args *a = user;
    int rank = 0;
    ballast_rank(comm, &rank);
    a->kept[rank] = comm;
    state *s = calloc(1, sizeof *s);
    if (s == NULL) return 1;
    s->r.s = a->seed * 2654435761u + (uint64_t)rank + 1;
    for (int k = 0; k < NCOMM; k++) s->comm[k] = comm;
    /* Configurations of its own: a configuration is used by one thread at a time. */
    ballast_config *cfgs[NCFG];
    for (int i = 0; i < NCFG; i++) {
        cfgs[i] = NULL;
        EXPECT(ballast_config_new(&cfgs[i]), 0);
    }
    for (long i = 0; i < a->iters; i++) step(s, cfgs);
    /* Whatever is left in the queue of the communicator is received. */
    int found = 1;
    ballast_status st;
    while (ballast_iprobe(comm, BALLAST_ANY_SOURCE, BALLAST_ANY_TAG, &found, &st) == 0 && found)
        ballast_recv(comm, BALLAST_ANY_SOURCE, BALLAST_ANY_TAG, s->buf, BUF, &st);
    drain(s);
    for (int i = 0; i < NCFG; i++) EXPECT(ballast_config_free(cfgs[i]), 0);
    free(s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: fuzz SEED ITERATIONS\n");
        return 2;
    }
    seed0 = strtoull(argv[1], NULL, 10);
    long iters = strtol(argv[2], NULL, 10);
    ballast_config *cfgs[NCFG];
    for (int i = 0; i < NCFG; i++) {
        cfgs[i] = NULL;
        if (ballast_config_new(&cfgs[i]) != 0 || ballast_config_set(cfgs[i], "transport", "local") != 0 ||
            ballast_config_set(cfgs[i], "buffer_count", "8") != 0 || ballast_config_set(cfgs[i], "buffer_size", "4K") != 0 ||
            ballast_config_set(cfgs[i], "lock_pool", "off") != 0) {
            fprintf(stderr, "fuzz: cannot make a configuration\n");
            return 2;
        }
    }
    /* Communicators of ballast_comm_from_env (worlds of one), freed and remade. */
    state *s = calloc(1, sizeof *s);
    if (s == NULL) return 2;
    s->r.s = seed0 * 0x9e3779b97f4a7c15ull + 1;
    s->owned = 1;
    for (int k = 0; k < NCOMM; k++) EXPECT(ballast_comm_from_env(cfgs[k % NCFG], &s->comm[k]), 0);
    for (long i = 0; i < iters; i++) {
        step(s, cfgs);
        if (atomic_load(&failures) > 20) break;
    }
    drain(s);
    for (int k = 0; k < NCOMM; k++)
        if (s->comm[k] != NULL) {
            int found = 1;
            ballast_status st;
            while (ballast_iprobe(s->comm[k], BALLAST_ANY_SOURCE, BALLAST_ANY_TAG, &found, &st) == 0 && found)
                ballast_recv(s->comm[k], BALLAST_ANY_SOURCE, BALLAST_ANY_TAG, s->buf, BUF, &st);
            EXPECT(ballast_comm_free(s->comm[k]), 0);
            STALE(ballast_comm_free(s->comm[k]));
        }
    free(s);

    /* Two ranks as threads, each on its own communicator; their handles are stale after. */
    ballast_config *run_cfg = NULL;
    EXPECT(ballast_config_new(&run_cfg), 0);
    EXPECT(ballast_config_set(run_cfg, "transport", "local"), 0);
    EXPECT(ballast_config_set(run_cfg, "lock_pool", "off"), 0);
    run_args a = {seed0, iters / 4, {NULL, NULL}};
    EXPECT(ballast_local_run(2, run_cfg, rank_main, &a), 0);
    for (int r = 0; r < 2; r++) {
        int v = 0;
        STALE(ballast_rank(a.kept[r], &v));
        STALE(ballast_send(a.kept[r], 0, 1, "x", 1));
    }
    EXPECT(ballast_config_free(run_cfg), 0);
    for (int i = 0; i < NCFG; i++) {
        EXPECT(ballast_config_free(cfgs[i]), 0);
        STALE(ballast_config_free(cfgs[i]));
    }
    int f = atomic_load(&failures);
    printf("capi fuzz %llu: %ld calls, %s\n", (unsigned long long)seed0, atomic_load(&calls), f == 0 ? "ok" : "FAILED");
    return f == 0 ? 0 : 1;
}
