/* The MPI part of libballast's C conformance (an `mpi` build, under mpirun -n 1, 2 or 3;
 * without the sanitizers, which clash with MPI and UCX): a host that calls MPI_Init_thread
 * itself, then ballast_comm_from_mpi on MPI_COMM_WORLD and on a sub-communicator (even and
 * odd world ranks), with a host message in flight on MPI_COMM_WORLD that Ballast must not
 * take; point to point with any source, any tag, ETRUNC and iprobe; allgatherv; the thread
 * rule below MPI_THREAD_MULTIPLE; ballast_comm_from_env over MPI; the failures (NULL, MPI_COMM_NULL,
 * free after MPI_Finalize). Prints "capi mpi conformance: N passed, M failed" on every
 * process and exits non-zero if a check failed. Build:
 *   mpicc mpi_conformance.c $(pkg-config --cflags --libs ballast)   (BALLAST_HAVE_MPI set by the .pc) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "ballast.h"
#include "check.h"

#ifndef BALLAST_HAVE_MPI
#error "build with the flags of an mpi install's ballast.pc (-DBALLAST_HAVE_MPI)"
#endif

static int world_rank;

static uint8_t pattern(size_t i, int seed) { return (uint8_t)((i * 151u + (unsigned)seed * 13u) & 0xff); }

/* Issue 35 over MPI (both paths): ballast_irecv_into (in the caller's buffer; a longer
 * message refused with BALLAST_ETRUNC and left for the next receive), ballast_request_cancel
 * of a receive nothing matched (MPI_Cancel on the native path), ballast_waitany and
 * ballast_testsome, on a ring. */
static void completion(ballast_comm *comm, int me, int left, int right) {
    uint8_t out[64], buf[64];
    for (size_t k = 0; k < sizeof out; k++) out[k] = pattern(k, right + 7);
    ballast_status st;
    ballast_request *reqs[3] = {NULL, NULL, NULL};
    size_t index = 0;
    memset(buf, 0xAA, sizeof buf);
    OK(ballast_irecv_into(comm, left, 80, buf, 32, &reqs[0]));
    OK(ballast_isend(comm, right, 80, out, 16, &reqs[2]));
    int left_done = 0, seen = 0;
    while (seen < 2) {
        OK(ballast_waitany(3, reqs, &index, &st));
        if (index == 0) {
            const void *data = NULL;
            size_t len = 0;
            OK(ballast_request_data(reqs[0], &data, &len));
            CHECK(data == buf && len == 16 && st.source == left && st.tag == 80 && buf[16] == 0xAA);
            int same = 1;
            for (size_t k = 0; k < 16; k++) same = same && buf[k] == pattern(k, me + 7); /* the sender's `right + 7` */
            CHECK(same);
            left_done = 1;
        } else {
            CHECK(index == 2 && st.source == right && st.len == 16);
        }
        OK(ballast_request_free(reqs[index]));
        reqs[index] = NULL;
        seen++;
    }
    CHECK(left_done);
    OK(ballast_waitany(3, reqs, &index, &st));
    CHECK(index == SIZE_MAX);

    /* Longer than the buffer: ETRUNC, then the message whole for the next receive. */
    ballast_request *r = NULL;
    memset(buf, 0xAA, sizeof buf);
    OK(ballast_irecv_into(comm, left, 81, buf, 8, &r));
    OK(ballast_send(comm, right, 81, out, 20));
    EXPECT_ERR(ballast_wait(r, &st), BALLAST_ETRUNC, "20 bytes");
    CHECK(st.len == 20 && st.source == left && st.tag == 81 && buf[0] == 0xAA);
    OK(ballast_request_free(r));
    OK(ballast_recv(comm, left, 81, buf, sizeof buf, &st));
    CHECK(st.len == 20);

    /* Cancel a receive nothing matched; the message sent afterwards goes to the next one. */
    OK(ballast_irecv(comm, left, 82, &r));
    OK(ballast_request_cancel(r));
    int done = 0;
    EXPECT_ERR(ballast_test(r, &done, &st), BALLAST_ECANCELED, "cancelled");
    CHECK(done == 1 && st.error == BALLAST_ECANCELED);
    OK(ballast_request_free(r));
    OK(ballast_barrier(comm));
    OK(ballast_send(comm, right, 82, out, 5));
    OK(ballast_recv(comm, left, 82, buf, sizeof buf, &st));
    CHECK(st.len == 5 && st.source == left);

    /* testsome until both complete: ascending indices, statuses[k] of indices[k]. */
    ballast_request *two[2] = {NULL, NULL};
    OK(ballast_irecv_into(comm, left, 83, buf, 32, &two[0]));
    OK(ballast_irecv_into(comm, left, 84, buf + 32, 32, &two[1]));
    OK(ballast_send(comm, right, 84, out, 4));
    OK(ballast_send(comm, right, 83, out, 3));
    size_t idx[2], count = 0;
    ballast_status sts[2];
    int rc = 0;
    while (rc == 0 && count < 2) rc = ballast_testsome(2, two, idx, &count, sts);
    OK(rc);
    CHECK(count == 2 && idx[0] == 0 && idx[1] == 1 && sts[0].tag == 83 && sts[0].len == 3 && sts[1].tag == 84 &&
          sts[1].len == 4);
    OK(ballast_request_free(two[0]));
    OK(ballast_request_free(two[1]));
}

/* A ring over `comm`: every rank sends `rounds` messages of varied sizes to its right
 * neighbour and receives from any source with the matching tag; then ETRUNC and iprobe on
 * a message from the left, and an allgatherv. `seed` tells the communicators apart. */
static void ring(ballast_comm *comm, int seed) {
    int me = -1, n = -1;
    OK(ballast_rank(comm, &me));
    OK(ballast_world_size(comm, &n));
    if (me < 0 || n < 1) return;
    int right = (me + 1) % n, left = (me + n - 1) % n;
    for (int i = 0; i < 20; i++) {
        size_t len = ((size_t)i * 7919u) % 70000u;
        uint8_t *out = malloc(len + 1);
        for (size_t k = 0; k < len; k++) out[k] = pattern(k, me * 100 + i + seed);
        ballast_request *rr = NULL, *sr = NULL;
        OK(ballast_irecv(comm, BALLAST_ANY_SOURCE, (int64_t)i, &rr));
        OK(ballast_isend(comm, right, (uint32_t)i, out, len, &sr));
        memset(out, 0, len); /* the buffer may be reused as soon as isend returns */
        ballast_status st[2];
        ballast_request *both[2] = {rr, sr};
        OK(ballast_waitall(2, both, st));
        const void *data = NULL;
        size_t got = 0;
        OK(ballast_request_data(rr, &data, &got));
        int same = got == len && st[0].source == left && st[0].tag == (uint32_t)i;
        for (size_t k = 0; same && k < len; k++) same = ((const uint8_t *)data)[k] == pattern(k, left * 100 + i + seed);
        CHECK(same);
        CHECK(st[1].source == right && st[1].len == len);
        OK(ballast_request_free(rr));
        OK(ballast_request_free(sr));
        free(out);
    }
    /* A message longer than the buffer: ETRUNC, its length in the status, nothing consumed. */
    char big[100];
    memset(big, 'b', sizeof big);
    OK(ballast_send(comm, right, 77, big, sizeof big));
    int found = 0;
    ballast_status st;
    int rc = 0;
    while (!found && rc == 0) rc = ballast_iprobe(comm, left, 77, &found, &st);
    OK(rc);
    CHECK(st.len == sizeof big && st.source == left);
    char small[10];
    EXPECT_ERR(ballast_recv(comm, left, 77, small, sizeof small, &st), BALLAST_ETRUNC, "is 100 bytes, the buffer 10");
    CHECK(st.len == sizeof big);
    /* A cap no C object can have: refused naming it before anything is received (an abort
     * in slice::from_raw_parts_mut before), on both MPI paths. */
    EXPECT_ERR(ballast_recv(comm, left, 77, small, SIZE_MAX, &st), BALLAST_EINVAL,
               "cap is 18446744073709551615 bytes");
    EXPECT_ERR(ballast_recv(comm, BALLAST_ANY_SOURCE, 77, small, (size_t)PTRDIFF_MAX + 1, &st), BALLAST_EINVAL,
               "above the largest message");
    char whole[100];
    OK(ballast_recv(comm, left, BALLAST_ANY_TAG, whole, sizeof whole, &st));
    CHECK(st.len == sizeof big && st.tag == 77 && memcmp(whole, big, sizeof big) == 0);

    completion(comm, me, left, right);

    char mine[32];
    snprintf(mine, sizeof mine, "r%d.%d", me, seed % 10);
    ballast_gathered *g = NULL;
    OK(ballast_allgatherv(comm, mine, strlen(mine), &g));
    for (int r = 0; r < n; r++) {
        const void *p = NULL;
        size_t plen = 0;
        OK(ballast_gathered_part(g, r, &p, &plen));
        char want[32];
        snprintf(want, sizeof want, "r%d.%d", r, seed % 10);
        CHECK(plen == strlen(want) && memcmp(p, want, plen) == 0);
    }
    OK(ballast_gathered_free(g));
    OK(ballast_barrier(comm));
    ballast_footprint fp;
    OK(ballast_comm_footprint(comm, &fp));
    CHECK(fp.total >= fp.pool && fp.peers_connected <= (uint32_t)n);
}

/* ballast_predict against ballast_comm_footprint with no request in flight (issue 35,
 * point 8): equal on the MPI native path; on the engine path an upper bound, above by at
 * most buffer_count x (buffer_size + 176) bytes (the send buffers the fabric keeps when
 * every pool buffer is in flight; a rank keeps as many as it had in flight, each as large
 * as the largest message it carried). */
static void predicted_against_measured(ballast_comm *comm, ballast_config *cfg, int n) {
    ballast_footprint fp, pred;
    OK(ballast_comm_footprint(comm, &fp));
    OK(ballast_config_set(cfg, "transport", "mpi"));
    OK(ballast_predict(cfg, fp.peers_connected, (uint32_t)n, 1, &pred));
    char notes[1024];
    size_t full = 0;
    OK(ballast_comm_notes(comm, notes, sizeof notes, &full));
    if (strstr(notes, "path: native") != NULL) {
        CHECK(fp.total == pred.total && fp.control == pred.control && fp.shared_receive_queue == pred.shared_receive_queue);
    } else {
        const uint64_t bound = 64 * (8192 + 176);
        CHECK(fp.total <= pred.total && pred.total - fp.total <= bound);
        if (!(fp.total <= pred.total && pred.total - fp.total <= bound))
            fprintf(stderr, "[%d] measured %llu (endpoint %llu, srq %llu, control %llu, peers %u), predicted %llu (endpoint %llu)\n",
                    world_rank, (unsigned long long)fp.total, (unsigned long long)fp.endpoint_queues,
                    (unsigned long long)fp.shared_receive_queue, (unsigned long long)fp.control, fp.peers_connected,
                    (unsigned long long)pred.total, (unsigned long long)pred.endpoint_queues);
        CHECK(fp.pool == pred.pool && fp.pool == 64 * 8192);
    }
}

struct other_thread {
    ballast_comm *comm;
    int rc;
    char msg[512];
};

static void *call_from_other_thread(void *p) {
    struct other_thread *t = p;
    int rank;
    t->rc = ballast_rank(t->comm, &rank);
    ballast_last_error(t->msg, sizeof t->msg);
    return NULL;
}

/* Rank 0's second thread under MPI_THREAD_MULTIPLE: once the main thread is waiting in
 * ballast_recv (100 ms), a call on the communicator, then rank 1 is told to send. */
static void *call_while_inside(void *p) {
    struct other_thread *t = p;
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    int rank;
    t->rc = ballast_rank(t->comm, &rank);
    ballast_last_error(t->msg, sizeof t->msg);
    int go = 1;
    MPI_Send(&go, 1, MPI_INT, 1, 77, MPI_COMM_WORLD);
    return NULL;
}

int main(int argc, char **argv) {
    /* `--multiple`: the host asks for MPI_THREAD_MULTIPLE, and other threads may call. */
    int want = argc > 1 && strcmp(argv[1], "--multiple") == 0 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED;
    int provided = 0;
    MPI_Init_thread(&argc, &argv, want, &provided);
    int n;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    check_rank = world_rank;
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    /* A host message in flight on MPI_COMM_WORLD, tag 0, while Ballast runs. */
    int host_out = 4242 + world_rank, host_in = -1;
    MPI_Request host_send;
    MPI_Isend(&host_out, 1, MPI_INT, (world_rank + 1) % n, 0, MPI_COMM_WORLD, &host_send);

    ballast_config *cfg = NULL;
    OK(ballast_config_new(&cfg));
    OK(ballast_config_set(cfg, "buffer_size", "8K"));
    OK(ballast_config_set(cfg, "lock_pool", "false"));

    ballast_comm *comm = NULL;
    /* A NULL configuration is the defaults. */
    OK(ballast_comm_from_mpi(MPI_COMM_WORLD, NULL, &comm));
    OK(ballast_comm_free(comm));
    comm = NULL;
    EXPECT_ERR(ballast_comm_from_mpi(MPI_COMM_WORLD, cfg, NULL), BALLAST_EINVAL, "out is NULL");
    EXPECT_ERR(ballast_comm_from_mpi(MPI_COMM_NULL, cfg, &comm), BALLAST_EINVAL, "MPI_COMM_NULL");
    CHECK(comm == NULL);

    /* Over the world. */
    OK(ballast_comm_from_mpi(MPI_COMM_WORLD, cfg, &comm));
    int me = -1, size = -1;
    OK(ballast_rank(comm, &me));
    OK(ballast_world_size(comm, &size));
    CHECK(me == world_rank && size == n);
    ring(comm, 1);
    predicted_against_measured(comm, cfg, n);

    /* Below MPI_THREAD_MULTIPLE, another thread may not call on it; with it, it may. */
    {
        struct other_thread t = {comm, 0, {0}};
        pthread_t th;
        pthread_create(&th, NULL, call_from_other_thread, &t);
        pthread_join(th, NULL);
        if (provided < MPI_THREAD_MULTIPLE) {
            CHECK(t.rc == BALLAST_EUNSUPPORTED && strstr(t.msg, "MPI_THREAD_MULTIPLE") != NULL);
        } else {
            CHECK(t.rc == 0);
        }
        if (want == MPI_THREAD_MULTIPLE) CHECK(provided == MPI_THREAD_MULTIPLE);
    }
    /* With MPI_THREAD_MULTIPLE, still one thread at a time per communicator (issue 35):
     * rank 0's second thread calls while the main thread waits in ballast_recv, gets
     * BALLAST_EUNSUPPORTED naming both threads, then tells rank 1 (over MPI) to send. */
    if (provided == MPI_THREAD_MULTIPLE && n > 1 && world_rank < 2) {
        if (world_rank == 0) {
            struct other_thread t = {comm, 0, {0}};
            pthread_t th;
            pthread_create(&th, NULL, call_while_inside, &t);
            char got[8];
            ballast_status st;
            OK(ballast_recv(comm, 1, 90, got, sizeof got, &st));
            CHECK(st.len == 2 && memcmp(got, "in", 2) == 0);
            pthread_join(th, NULL);
            CHECK(t.rc == BALLAST_EUNSUPPORTED && strstr(t.msg, "ballast_rank: called from thread 0x") == t.msg &&
                  strstr(t.msg, "while thread 0x") != NULL);
        } else {
            int go = 0;
            MPI_Recv(&go, 1, MPI_INT, 0, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            OK(ballast_send(comm, 0, 90, "in", 2));
        }
    }

    /* Over a sub-communicator: even and odd world ranks, each its own Ballast world. */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
    int half_rank, half_size;
    MPI_Comm_rank(half, &half_rank);
    MPI_Comm_size(half, &half_size);
    ballast_comm *sub = NULL;
    OK(ballast_comm_from_mpi(half, cfg, &sub));
    OK(ballast_rank(sub, &me));
    OK(ballast_world_size(sub, &size));
    CHECK(me == half_rank && size == half_size);
    ring(sub, 2 + world_rank % 2);
    OK(ballast_comm_free(sub));
    MPI_Comm_free(&half);

    /* ballast_comm_from_env over MPI reuses the host's MPI (and does not finalise it). */
    ballast_config *envcfg = NULL;
    OK(ballast_config_new(&envcfg));
    OK(ballast_config_set(envcfg, "transport", "mpi"));
    OK(ballast_config_set(envcfg, "lock_pool", "false"));
    ballast_comm *from_env = NULL;
    OK(ballast_comm_from_env(envcfg, &from_env));
    OK(ballast_rank(from_env, &me));
    CHECK(me == world_rank);
    ring(from_env, 4);
    OK(ballast_comm_free(from_env));
    /* A freed handle is refused, without calling MPI (a second free, a call). */
    EXPECT_ERR(ballast_comm_free(from_env), BALLAST_EINVAL, "not a live communicator");
    OK(ballast_config_free(envcfg));

    OK(ballast_comm_free(comm));
    EXPECT_ERR(ballast_comm_free(comm), BALLAST_EINVAL, "not a live communicator");
    EXPECT_ERR(ballast_barrier(comm), BALLAST_EINVAL, "not a live communicator");

    /* The host's own message is still there, untouched. */
    MPI_Recv(&host_in, 1, MPI_INT, (world_rank + n - 1) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&host_send, MPI_STATUS_IGNORE);
    CHECK(host_in == 4242 + (world_rank + n - 1) % n);

    /* A communicator still live at MPI_Finalize: its free is refused without calling MPI. */
    ballast_comm *late = NULL;
    OK(ballast_comm_from_mpi(MPI_COMM_WORLD, cfg, &late));
    OK(ballast_barrier(late));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    EXPECT_ERR(ballast_comm_free(late), BALLAST_EINVAL, "before MPI_Finalize");
    /* Its MPI state abandoned, its handle ended: a second free is refused as stale. */
    EXPECT_ERR(ballast_comm_free(late), BALLAST_EINVAL, "not a live communicator");
    EXPECT_ERR(ballast_comm_from_mpi(MPI_COMM_WORLD, cfg, &late), BALLAST_EINVAL, "not initialised");
    OK(ballast_config_free(cfg));

    printf("capi mpi conformance: rank %d of %d (%s): %d passed, %d failed\n", world_rank, n,
           provided == MPI_THREAD_MULTIPLE ? "MPI_THREAD_MULTIPLE" : "MPI_THREAD_SERIALIZED", atomic_load(&passed), atomic_load(&failed));
    return atomic_load(&failed) == 0 ? 0 : 1;
}
