/* What the C benchmark programs share (included after ballast.h; found beside the including
 * file, so no -I is needed): TRY(call), which ends the program when a call does not return
 * 0, naming the call, its code and ballast_last_error; CLOCK_MONOTONIC in nanoseconds; the
 * median of the blocks' timings. The includer defines BENCH_NAME (the program's name, the
 * prefix of its error messages) and may define BENCH_EXIT(code) (default exit(code); under
 * MPI, MPI_Abort so that the other rank does not wait forever). */
#ifndef BALLAST_BENCH_COMMON_H
#define BALLAST_BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ballast.h"

#ifndef BENCH_EXIT
#define BENCH_EXIT(code) exit(code)
#endif

static void die(int rc, const char *what) {
    char msg[512];
    ballast_last_error(msg, sizeof msg);
    fprintf(stderr, "%s: %s: %d: %s\n", BENCH_NAME, what, rc, msg);
    BENCH_EXIT(1);
}
#define TRY(call)                      \
    do {                               \
        int rc_ = (call);              \
        if (rc_ != 0) die(rc_, #call); \
    } while (0)

/* CLOCK_MONOTONIC, in nanoseconds. */
static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n values (sorted in place). */
static double median(double *v, long n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

#endif
