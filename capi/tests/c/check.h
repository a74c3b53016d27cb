/* The checks every C test of libballast shares (included after ballast.h, found beside the
 * including file, so no -I is needed):
 * - CHECK(cond): counts a passed or a failed check; a failure is printed on stderr with its
 *   file, line and condition;
 * - OK(call): the call returned 0; a failure prints the line, the call, its return code and
 *   ballast_last_error;
 * - EXPECT_ERR(call, code, needle): the call returned `code` and the thread's last error
 *   contains `needle`.
 * The counters `passed` and `failed` are atomic (ranks run as threads); the test prints them
 * in its summary line. An MPI test sets `check_rank` to its world rank, which then prefixes
 * every failure as "[R] ". */
#ifndef BALLAST_TESTS_CHECK_H
#define BALLAST_TESTS_CHECK_H

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ballast.h"

static atomic_int passed, failed;

/* The world rank printed before each failure, or -1 (none: a single-process test). */
static int check_rank = -1;

static inline void check_where(void) {
    if (check_rank >= 0) fprintf(stderr, "[%d] ", check_rank);
}

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            atomic_fetch_add(&passed, 1);                                            \
        } else {                                                                     \
            atomic_fetch_add(&failed, 1);                                            \
            check_where();                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define OK(call) ok_or_say((call), __LINE__, #call)
static inline void ok_or_say(int rc, int line, const char *what) {
    if (rc == 0) {
        atomic_fetch_add(&passed, 1);
        return;
    }
    char msg[512];
    ballast_last_error(msg, sizeof msg);
    atomic_fetch_add(&failed, 1);
    check_where();
    fprintf(stderr, "line %d: %s returned %d: %s\n", line, what, rc, msg);
}

/* rc must be `code`, and the thread's last error must contain `needle`. */
#define EXPECT_ERR(call, code, needle) expect_err((call), (code), (needle), __LINE__, #call)
static inline void expect_err(int rc, int code, const char *needle, int line, const char *what) {
    char msg[1024];
    int n = ballast_last_error(msg, sizeof msg);
    if (rc == code && n > 0 && strstr(msg, needle) != NULL) {
        atomic_fetch_add(&passed, 1);
    } else {
        atomic_fetch_add(&failed, 1);
        check_where();
        fprintf(stderr, "line %d: %s returned %d (want %d), last error \"%s\" (want it to name \"%s\")\n", line,
                what, rc, code, msg, needle);
    }
}

#endif
