/* libnrnmpi_ompi.so for NEURON 9.0.x: the spike exchange over Ballast, everything else
 * forwarded to the wheel's own libnrnmpi_ompi.so (see README.md).
 *
 * NEURON (src/nrnmpi/nrnmpi_dynam.cpp) dlopens $NRNHOME/lib/libnrnmpi_<impl>.so and dlsyms the
 * 82 f_nrnmpi_* functions of src/nrnmpi/nrnmpidec.h and the variable p_cxx_char_alloc. This
 * library defines the 9 functions marked 'ballast' in nrnmpi_functions.txt here; the 73 others
 * are trampolines (gen_forward.sh) into the wheel's own library, which the constructor opens
 * from beside libnrniv.so. The Ballast communicator is made over NEURON's nrnmpi_comm (the
 * wheel's variable: never defined here, or it would shadow the original's) at the end of
 * nrnmpi_init, on NEURON's main thread, and freed in nrnmpi_terminate before MPI_Finalize.
 *
 * The exchange, as src/nrnmpi/mpispike.cpp at 9.0.2 does it over MPI (nrn_spikebuf_size 0):
 * - nrnmpi_spike_exchange: MPI_Allgather of the counts + MPI_Allgatherv of the spikes, here
 *   one ballast_allgatherv of this rank's spikes;
 * - nrnmpi_spike_exchange_compressed: the same over the fixed-size byte buffers and their
 *   overflow, here one ballast_allgatherv of the fixed part followed by this rank's overflow;
 * - multisend: nrnmpi_multisend_multisend is one ballast_isend (tag 1) per target host, kept
 *   and reaped when complete (NEURON frees its MPI requests unwaited); single_advance a
 *   ballast_iprobe (any source) and ballast_recv; conserve the sum over the ranks of
 *   (sent - received), an all-gather of one int. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlfcn.h>

#include "shim_common.h"

#define EXPORT __attribute__((visibility("default")))

/* NEURON's spike record (src/nrnmpi/nrnmpi.h). */
typedef struct {
    int gid;
    double spiketime;
} NRNMPI_Spike;

/* The multisend tag: NEURON's own (mpispike.cpp). */
#define MULTISEND_TAG 1u

extern const struct shim_forward nrn_forward_table[]; /* nrn_forward.c (generated) */

/* Set by NEURON after it loads this library; handed on to the wheel's own library (whose
 * bbs unpack functions allocate with it) in nrnmpi_init. */
EXPORT char *(*p_cxx_char_alloc)(size_t);

static struct shim_state S = {.simulator = "neuron", .lib = "libnrnmpi_ompi.so", .world_rank = -1};

static void *original;                          /* the wheel's libnrnmpi_ompi.so */
static MPI_Comm *nrnmpi_comm_of_original;       /* its nrnmpi_comm */
static char *(**original_cxx_char_alloc)(size_t); /* its p_cxx_char_alloc */
static void (*context_wait)(void);              /* libnrniv's nrnbbs_context_wait() */

/* The original functions this library wraps. */
static void (*orig_init)(int, int *, char ***);
static void (*orig_terminate)(void);
static void (*orig_subworld_size)(int);

/* Multisend's sends in flight. */
static ballast_request **sends;
static size_t nsends, capsends;

static void *must_sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (p == NULL) {
        fprintf(stderr, "ballast %s shim: the wheel's library has no %s (re-run ci/install-neuron.sh)\n", S.lib,
                name);
        abort();
    }
    return p;
}

__attribute__((constructor)) static void load(void) {
    original = shim_load_original(S.lib, nrn_forward_table, (const void *)&load);
    nrnmpi_comm_of_original = must_sym(original, "nrnmpi_comm");
    original_cxx_char_alloc = must_sym(original, "p_cxx_char_alloc");
    orig_init = must_sym(original, "f_nrnmpi_init");
    orig_terminate = must_sym(original, "f_nrnmpi_terminate");
    orig_subworld_size = must_sym(original, "f_nrnmpi_subworld_size");
    /* C++ `void nrnbbs_context_wait()` of libnrniv (already loaded, global). */
    context_wait = (void (*)(void))dlsym(RTLD_DEFAULT, "_Z19nrnbbs_context_waitv");
}

/* Tests every send in flight once; frees the completed ones. */
static void reap_sends(void) {
    size_t i = 0;
    while (i < nsends) {
        int done = 0;
        int rc = ballast_test(sends[i], &done, NULL);
        if (rc != 0) shim_die(&S, "ballast_test (multisend send)", rc);
        if (done) {
            rc = ballast_request_free(sends[i]);
            if (rc != 0) shim_die(&S, "ballast_request_free (multisend send)", rc);
            sends[i] = sends[--nsends];
        } else {
            i++;
        }
    }
}

/* Waits for and frees every send in flight (before the communicator is freed). */
static void finish_sends(struct shim_state *s) {
    for (size_t i = 0; i < nsends; i++) {
        int rc = ballast_wait(sends[i], NULL);
        if (rc != 0) shim_die(s, "ballast_wait (multisend send)", rc);
        rc = ballast_request_free(sends[i]);
        if (rc != 0) shim_die(s, "ballast_request_free (multisend send)", rc);
    }
    nsends = 0;
}

static void make_comm(void) {
    MPI_Comm c = *nrnmpi_comm_of_original;
    int up = 0;
    MPI_Initialized(&up);
    if (!up || c == NULL || c == MPI_COMM_NULL) return; /* NEURON runs without MPI */
    S.before_finish = finish_sends;
    shim_comm_make(&S, c);
}

EXPORT void f_nrnmpi_init(int under_nrncontrol, int *pargc, char ***pargv) {
    if (original_cxx_char_alloc != NULL) *original_cxx_char_alloc = p_cxx_char_alloc;
    orig_init(under_nrncontrol, pargc, pargv);
    if (S.comm == NULL) make_comm();
}

EXPORT void f_nrnmpi_terminate(void) {
    shim_comm_finish(&S);
    orig_terminate();
}

/* Subworlds replace nrnmpi_comm: the communicator follows (collective over the world). */
EXPORT void f_nrnmpi_subworld_size(int n) {
    int had = S.comm != NULL;
    shim_comm_finish(&S);
    orig_subworld_size(n);
    if (had) make_comm();
}

static void wait_context(void) {
    if (context_wait != NULL) context_wait();
}

/* Grows a malloc'd buffer NEURON owns (it frees it with free). */
static void *regrow(void *old, size_t bytes, const char *call) {
    free(old);
    void *p = malloc(bytes > 0 ? bytes : 1);
    if (p == NULL) shim_fail(&S, call);
    return p;
}

EXPORT int f_nrnmpi_spike_exchange(int *ovfl, int *nout, int *nin, NRNMPI_Spike *spikeout, NRNMPI_Spike **spikein,
                                   int *icapacity) {
    static const char F[] = "nrnmpi_spike_exchange";
    (void)ovfl; /* only used with nrn_spikebuf_size > 0 */
    wait_context();
    int np = 0;
    if (*nout < 0) shim_fail(&S, "nrnmpi_spike_exchange: negative nout");
    size_t mine = (size_t)*nout * sizeof(NRNMPI_Spike);
    ballast_gathered *g = shim_allgatherv(&S, F, spikeout, mine, &np);
    int rank = 0;
    int rc = ballast_rank(S.comm, &rank);
    if (rc != 0) shim_die(&S, F, rc);
    size_t total = 0;
    for (int i = 0; i < np; i++) {
        const void *d = NULL;
        size_t len = 0;
        rc = ballast_gathered_part(g, i, &d, &len);
        if (rc != 0) shim_die(&S, F, rc);
        if (len % sizeof(NRNMPI_Spike) != 0) shim_fail(&S, "nrnmpi_spike_exchange: a part is not whole spikes");
        nin[i] = (int)(len / sizeof(NRNMPI_Spike));
        total += (size_t)nin[i];
        if (i != rank) S.n.bytes_received += len;
    }
    if (total > (size_t)INT32_MAX - 10) shim_fail(&S, "nrnmpi_spike_exchange: more than 2^31 spikes");
    int n = (int)total;
    if (n > 0) {
        if (*icapacity < n) {
            *icapacity = n + 10;
            *spikein = regrow(*spikein, (size_t)*icapacity * sizeof(NRNMPI_Spike),
                              "nrnmpi_spike_exchange: out of memory for the spikes received");
        }
        size_t at = 0;
        for (int i = 0; i < np; i++) {
            const void *d = NULL;
            size_t len = 0;
            ballast_gathered_part(g, i, &d, &len);
            if (len > 0) memcpy((char *)*spikein + at, d, len);
            at += len;
        }
    }
    ballast_gathered_free(g);
    S.n.spike_exchanges++;
    S.n.spikes_sent += (uint64_t)*nout;
    S.n.spikes_received += (uint64_t)(n - nin[rank]);
    S.n.bytes_sent += mine;
    return n;
}

EXPORT int f_nrnmpi_spike_exchange_compressed(int localgid_size, int ag_send_size, int ag_send_nspike,
                                              int *ovfl_capacity, int *ovfl, unsigned char *spfixout,
                                              unsigned char *spfixin, unsigned char **spfixin_ovfl, int *nin) {
    static const char F[] = "nrnmpi_spike_exchange_compressed";
    wait_context();
    if (ag_send_size < 2 || localgid_size < 0 || ag_send_nspike < 0) shim_fail(&S, "nrnmpi_spike_exchange_compressed: bad sizes");
    size_t rec = 1 + (size_t)localgid_size; /* bytes per spike */
    int nmine = spfixout[0] * 256 + spfixout[1];
    size_t ovmine = nmine > ag_send_nspike ? 2 + (size_t)nmine * rec - (size_t)ag_send_size : 0;
    size_t mine = (size_t)ag_send_size + ovmine;
    int np = 0;
    ballast_gathered *g = shim_allgatherv(&S, F, spfixout, mine, &np);
    int rank = 0;
    int rc = ballast_rank(S.comm, &rank);
    if (rc != 0) shim_die(&S, F, rc);
    int ntot = 0, novfl = 0;
    size_t bstot = 0;
    for (int i = 0; i < np; i++) {
        const unsigned char *d = NULL;
        size_t len = 0;
        rc = ballast_gathered_part(g, i, (const void **)&d, &len);
        if (rc != 0) shim_die(&S, F, rc);
        if (len < (size_t)ag_send_size) shim_fail(&S, "nrnmpi_spike_exchange_compressed: a part is shorter than ag_send_size");
        memcpy(spfixin + (size_t)i * (size_t)ag_send_size, d, (size_t)ag_send_size);
        int n = d[0] * 256 + d[1];
        size_t bs = n > ag_send_nspike ? 2 + (size_t)n * rec - (size_t)ag_send_size : 0;
        if (len != (size_t)ag_send_size + bs) shim_fail(&S, "nrnmpi_spike_exchange_compressed: a part's length does not match its spike count");
        nin[i] = n;
        ntot += n;
        if (n > ag_send_nspike) novfl += n - ag_send_nspike;
        bstot += bs;
        if (i != rank) {
            S.n.bytes_received += len;
            S.n.spikes_received += (uint64_t)n;
        }
    }
    if (novfl > 0) {
        if (*ovfl_capacity < novfl) {
            *ovfl_capacity = novfl + 10;
            *spfixin_ovfl = regrow(*spfixin_ovfl, (size_t)*ovfl_capacity * rec,
                                   "nrnmpi_spike_exchange_compressed: out of memory for the overflow");
        }
        if (bstot > (size_t)*ovfl_capacity * rec) shim_fail(&S, "nrnmpi_spike_exchange_compressed: overflow larger than its buffer");
        size_t at = 0;
        for (int i = 0; i < np; i++) {
            const unsigned char *d = NULL;
            size_t len = 0;
            ballast_gathered_part(g, i, (const void **)&d, &len);
            size_t bs = len - (size_t)ag_send_size;
            if (bs > 0) memcpy(*spfixin_ovfl + at, d + ag_send_size, bs);
            at += bs;
        }
    }
    ballast_gathered_free(g);
    *ovfl = novfl;
    S.n.spike_exchanges++;
    S.n.spikes_sent += (uint64_t)nmine;
    S.n.bytes_sent += mine;
    return ntot;
}

/* The multisend communicator is the one made in nrnmpi_init. */
EXPORT void f_nrnmpi_multisend_comm(void) { (void)shim_comm(&S, "nrnmpi_multisend_comm"); }

EXPORT void f_nrnmpi_multisend_multisend(NRNMPI_Spike *spk, int n, int *hosts) {
    static const char F[] = "nrnmpi_multisend_multisend";
    ballast_comm *c = shim_comm(&S, F);
    for (int i = 0; i < n; i++) {
        if (nsends == capsends) {
            size_t cap = capsends ? 2 * capsends : 64;
            ballast_request **p = realloc(sends, cap * sizeof *p);
            if (p == NULL) shim_fail(&S, "nrnmpi_multisend_multisend: out of memory for the send requests");
            sends = p;
            capsends = cap;
        }
        ballast_request *r = NULL;
        int rc;
        while ((rc = ballast_isend(c, hosts[i], MULTISEND_TAG, spk, sizeof *spk, &r)) == BALLAST_EAGAIN) {
            /* Every pool buffer is in flight: complete some. */
            reap_sends();
            rc = ballast_progress(c);
            if (rc != 0) shim_die(&S, "ballast_progress (multisend)", rc);
        }
        if (rc != 0) shim_die(&S, "ballast_isend (multisend)", rc);
        sends[nsends++] = r;
        S.n.multisend_sent++;
        S.n.spikes_sent++;
        S.n.bytes_sent += sizeof *spk;
    }
}

EXPORT int f_nrnmpi_multisend_single_advance(NRNMPI_Spike *spk) {
    static const char F[] = "nrnmpi_multisend_single_advance";
    ballast_comm *c = shim_comm(&S, F);
    if (nsends > 0) reap_sends();
    int found = 0;
    ballast_status st;
    int rc = ballast_iprobe(c, BALLAST_ANY_SOURCE, MULTISEND_TAG, &found, &st);
    if (rc != 0) shim_die(&S, "ballast_iprobe (multisend)", rc);
    if (!found) return 0;
    rc = ballast_recv(c, st.source, MULTISEND_TAG, spk, sizeof *spk, &st);
    if (rc != 0) shim_die(&S, "ballast_recv (multisend)", rc);
    if (st.len != sizeof *spk) shim_fail(&S, "nrnmpi_multisend_single_advance: a message is not one spike");
    S.n.multisend_received++;
    S.n.spikes_received++;
    S.n.bytes_received += sizeof *spk;
    return 1;
}

EXPORT int f_nrnmpi_multisend_conserve(int nsend, int nrecv) {
    static const char F[] = "nrnmpi_multisend_conserve";
    if (nsends > 0) reap_sends();
    int mine = nsend - nrecv, np = 0;
    ballast_gathered *g = shim_allgatherv(&S, F, &mine, sizeof mine, &np);
    long sum = 0;
    for (int i = 0; i < np; i++) {
        const void *d = NULL;
        size_t len = 0;
        int rc = ballast_gathered_part(g, i, &d, &len);
        if (rc != 0) shim_die(&S, F, rc);
        if (len != sizeof(int)) shim_fail(&S, "nrnmpi_multisend_conserve: a part is not one int");
        int v;
        memcpy(&v, d, sizeof v);
        sum += v;
    }
    ballast_gathered_free(g);
    return (int)sum;
}
