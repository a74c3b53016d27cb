/* The loop of issue 35's point 3 from C allocates nothing once warm: under mpirun -n 2 (the
 * MPI native path, one rank per process), rank 0 runs round trips of 8 B with
 * ballast_irecv_into posted, ballast_isend, the two completed (the receive by ballast_wait in
 * one loop, by a ballast_test loop in the other) and the two frees, and rank 1 answers each
 * with ballast_recv + ballast_send; rank 0 counts the allocation calls its own thread makes
 * over 100 round trips of each loop after 50 to warm up, and asserts none (every byte it
 * received checked). The count comes from this program's malloc, calloc, realloc,
 * posix_memalign, aligned_alloc and memalign, which the dynamic linker binds every call in
 * the process to (libballast's Rust allocator included) and which forward to glibc's
 * __libc_* functions; a thread-local count in the executable costs no allocation. A control
 * first checks that the count sees libballast's allocations (ballast_config_new allocates
 * its handle). Also the same 8 B sent where the buffer holds 4: each receive completes with
 * BALLAST_ETRUNC, the buffer untouched, and the message is then taken whole by a
 * ballast_recv. Prints "capi mpi lean: N passed, M failed" on every process. Build:
 *   mpicc mpi_lean.c $(pkg-config --cflags --libs ballast)   (an mpi install) */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "ballast.h"
#include "check.h"

#ifndef BALLAST_HAVE_MPI
#error "build with the flags of an mpi install's ballast.pc (-DBALLAST_HAVE_MPI)"
#endif

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static __thread unsigned long allocations;

void *malloc(size_t n) {
    allocations++;
    return __libc_malloc(n);
}
void *calloc(size_t k, size_t n) {
    allocations++;
    return __libc_calloc(k, n);
}
void *realloc(void *p, size_t n) {
    allocations++;
    return __libc_realloc(p, n);
}
void *memalign(size_t align, size_t n) {
    allocations++;
    return __libc_memalign(align, n);
}
void *aligned_alloc(size_t align, size_t n) {
    allocations++;
    return __libc_memalign(align, n);
}
int posix_memalign(void **out, size_t align, size_t n) {
    allocations++;
    if (align < sizeof(void *) || (align & (align - 1)) != 0) return EINVAL;
    void *p = __libc_memalign(align, n);
    if (p == NULL) return ENOMEM;
    *out = p;
    return 0;
}
void free(void *p) { __libc_free(p); }

enum { WARM = 50, ROUNDS = 100 };

/* Rank 0's round trip `i` with the receive completed by ballast_wait (`test` 0) or by a
 * ballast_test loop (`test` 1). */
static void round_trip(ballast_comm *comm, int peer, uint64_t i, int test) {
    uint64_t got = UINT64_MAX;
    ballast_request *r = NULL, *s = NULL;
    ballast_status st;
    OK(ballast_irecv_into(comm, peer, 7, &got, sizeof got, &r));
    OK(ballast_isend(comm, peer, 7, &i, sizeof i, &s));
    OK(ballast_wait(s, NULL));
    if (test) {
        int done = 0;
        while (!done) OK(ballast_test(r, &done, &st));
    } else {
        OK(ballast_wait(r, &st));
    }
    CHECK(got == i + 1 && st.len == sizeof got && st.source == peer && st.tag == 7);
    OK(ballast_request_free(r));
    OK(ballast_request_free(s));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    check_rank = me;
    if (n != 2) {
        if (me == 0) fprintf(stderr, "mpi_lean: run under mpirun -n 2 (got %d processes)\n", n);
        MPI_Finalize();
        return 2;
    }
    ballast_comm *comm = NULL;
    OK(ballast_comm_from_mpi(MPI_COMM_WORLD, NULL, &comm));
    int peer = 1 - me;
    char notes[1024];
    size_t full = 0;
    OK(ballast_comm_notes(comm, notes, sizeof notes, &full));
    /* The engine path's notes name the native path too ("MPI native path off"). */
    CHECK(strstr(notes, "path: native") != NULL);
    if (strstr(notes, "path: native") == NULL) fprintf(stderr, "mpi_lean: not on the native path: %s\n", notes);
    if (me == 0) {
        /* Control: the count sees libballast's (Rust's) allocations. */
        unsigned long at = allocations;
        ballast_config *cfg = NULL;
        OK(ballast_config_new(&cfg));
        OK(ballast_config_free(cfg));
        CHECK(allocations > at);
        for (int test = 0; test < 2; test++) {
            unsigned long before = 0;
            for (uint64_t i = 0; i < WARM + ROUNDS; i++) {
                if (i == WARM) before = allocations;
                round_trip(comm, peer, i, test);
            }
            unsigned long grown = allocations - before;
            if (grown != 0)
                fprintf(stderr, "mpi_lean: %lu allocations in %d round trips (%s)\n", grown, ROUNDS,
                        test ? "ballast_test" : "ballast_wait");
            CHECK(grown == 0);
        }
        /* Longer than the buffer: ETRUNC from the wait, the message kept for a receive that fits. */
        for (uint64_t i = 0; i < 3; i++) {
            uint32_t small = 0;
            ballast_request *r = NULL;
            ballast_status st;
            OK(ballast_irecv_into(comm, peer, 8, &small, sizeof small, &r));
            OK(ballast_send(comm, peer, 8, &i, sizeof i));
            CHECK(ballast_wait(r, &st) == BALLAST_ETRUNC);
            CHECK(small == 0);
            CHECK(st.error == BALLAST_ETRUNC && st.len == 8 && st.source == peer && st.tag == 8);
            OK(ballast_request_free(r));
            uint64_t got = 0;
            OK(ballast_recv(comm, peer, 8, &got, sizeof got, &st));
            CHECK(st.len == 8 && got == i + 100);
        }
    } else {
        for (int i = 0; i < 2 * (WARM + ROUNDS); i++) {
            uint64_t v = 0;
            ballast_status st;
            OK(ballast_recv(comm, peer, 7, &v, sizeof v, &st));
            CHECK(st.len == sizeof v && v == (uint64_t)(i % (WARM + ROUNDS)));
            v += 1;
            OK(ballast_send(comm, peer, 7, &v, sizeof v));
        }
        for (uint64_t i = 0; i < 3; i++) {
            uint64_t v = 0;
            ballast_status st;
            OK(ballast_recv(comm, peer, 8, &v, sizeof v, &st));
            CHECK(st.len == 8 && v == i);
            v = i + 100;
            OK(ballast_send(comm, peer, 8, &v, sizeof v));
        }
    }
    OK(ballast_barrier(comm));
    OK(ballast_comm_free(comm));
    printf("capi mpi lean: rank %d: %d passed, %d failed\n", me, atomic_load(&passed), atomic_load(&failed));
    MPI_Finalize();
    return atomic_load(&failed) == 0 ? 0 : 1;
}
