/* The spike exchange on Ballast, shared by the NEURON and CoreNEURON shims (see
 * shim_common.h): the same algorithms as src/nrnmpi/mpispike.cpp and
 * src/coreneuron/mpi/lib/mpispike.cpp at 9.0.2 (nrn_spikebuf_size 0), with the
 * MPI_Allgather + MPI_Allgatherv pairs as one ballast_allgatherv, multisend as kept
 * ballast_isend requests, ballast_iprobe + ballast_recv, and an all-gather sum. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim_common.h"

/* The multisend tag: NEURON's own. */
#define MULTISEND_TAG 1u

/* Grows a malloc'd buffer the simulator owns (it frees it with free). */
static void *regrow(struct shim_state *s, void *old, size_t bytes, const char *what) {
    free(old);
    void *p = malloc(bytes > 0 ? bytes : 1);
    if (p == NULL) shim_fail(s, what);
    return p;
}

static int comm_rank(struct shim_state *s, const char *call) {
    int rank = 0;
    int rc = ballast_rank(shim_comm(s, call), &rank);
    if (rc != 0) shim_die(s, call, rc);
    return rank;
}

int shim_spike_exchange(struct shim_state *s, const char *F, int *nin, const NRNMPI_Spike *spikeout, int nout,
                        NRNMPI_Spike **spikein, int *icapacity) {
    if (nout < 0) shim_fail(s, "spike exchange: negative nout");
    size_t mine = (size_t)nout * sizeof(NRNMPI_Spike);
    int np = 0;
    ballast_gathered *g = shim_allgatherv(s, F, spikeout, mine, &np);
    int rank = comm_rank(s, F);
    size_t total = 0;
    for (int i = 0; i < np; i++) {
        const void *d = NULL;
        size_t len = 0;
        int rc = ballast_gathered_part(g, i, &d, &len);
        if (rc != 0) shim_die(s, F, rc);
        if (len % sizeof(NRNMPI_Spike) != 0) shim_fail(s, "spike exchange: a part is not whole spikes");
        nin[i] = (int)(len / sizeof(NRNMPI_Spike));
        total += (size_t)nin[i];
        if (i != rank) s->n.bytes_received += len;
    }
    if (total > (size_t)INT32_MAX - 10) shim_fail(s, "spike exchange: more than 2^31 spikes");
    int n = (int)total;
    if (n > 0) {
        if (*icapacity < n) {
            *icapacity = n + 10;
            *spikein = regrow(s, *spikein, (size_t)*icapacity * sizeof(NRNMPI_Spike),
                              "spike exchange: out of memory for the spikes received");
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
    s->n.spike_exchanges++;
    s->n.spikes_sent += (uint64_t)nout;
    s->n.spikes_received += (uint64_t)(n - nin[rank]);
    s->n.bytes_sent += mine;
    return n;
}

int shim_spike_exchange_compressed(struct shim_state *s, const char *F, int localgid_size, int ag_send_size,
                                   int ag_send_nspike, int *ovfl_capacity, int *ovfl, const unsigned char *spfixout,
                                   unsigned char *spfixin, unsigned char **spfixin_ovfl, int *nin) {
    if (ag_send_size < 2 || localgid_size < 0 || ag_send_nspike < 0) shim_fail(s, "compressed spike exchange: bad sizes");
    size_t rec = 1 + (size_t)localgid_size; /* bytes per spike */
    int nmine = spfixout[0] * 256 + spfixout[1];
    size_t ovmine = nmine > ag_send_nspike ? 2 + (size_t)nmine * rec - (size_t)ag_send_size : 0;
    size_t mine = (size_t)ag_send_size + ovmine;
    int np = 0;
    ballast_gathered *g = shim_allgatherv(s, F, spfixout, mine, &np);
    int rank = comm_rank(s, F);
    int ntot = 0, novfl = 0;
    size_t bstot = 0;
    for (int i = 0; i < np; i++) {
        const void *dv = NULL;
        size_t len = 0;
        int rc = ballast_gathered_part(g, i, &dv, &len);
        if (rc != 0) shim_die(s, F, rc);
        const unsigned char *d = dv;
        if (len < (size_t)ag_send_size) shim_fail(s, "compressed spike exchange: a part is shorter than ag_send_size");
        memcpy(spfixin + (size_t)i * (size_t)ag_send_size, d, (size_t)ag_send_size);
        int n = d[0] * 256 + d[1];
        size_t bs = n > ag_send_nspike ? 2 + (size_t)n * rec - (size_t)ag_send_size : 0;
        if (len != (size_t)ag_send_size + bs) shim_fail(s, "compressed spike exchange: a part's length does not match its spike count");
        nin[i] = n;
        ntot += n;
        if (n > ag_send_nspike) novfl += n - ag_send_nspike;
        bstot += bs;
        if (i != rank) {
            s->n.bytes_received += len;
            s->n.spikes_received += (uint64_t)n;
        }
    }
    if (novfl > 0) {
        if (*ovfl_capacity < novfl) {
            *ovfl_capacity = novfl + 10;
            *spfixin_ovfl = regrow(s, *spfixin_ovfl, (size_t)*ovfl_capacity * rec,
                                   "compressed spike exchange: out of memory for the overflow");
        }
        if (bstot > (size_t)*ovfl_capacity * rec) shim_fail(s, "compressed spike exchange: overflow larger than its buffer");
        size_t at = 0;
        for (int i = 0; i < np; i++) {
            const void *dv = NULL;
            size_t len = 0;
            ballast_gathered_part(g, i, &dv, &len);
            size_t bs = len - (size_t)ag_send_size;
            if (bs > 0) memcpy(*spfixin_ovfl + at, (const unsigned char *)dv + ag_send_size, bs);
            at += bs;
        }
    }
    ballast_gathered_free(g);
    *ovfl = novfl;
    s->n.spike_exchanges++;
    s->n.spikes_sent += (uint64_t)nmine;
    s->n.bytes_sent += mine;
    return ntot;
}

/* Tests every send in flight once; frees the completed ones. */
static void reap_sends(struct shim_state *s) {
    size_t i = 0;
    while (i < s->nsends) {
        int done = 0;
        int rc = ballast_test(s->sends[i], &done, NULL);
        if (rc != 0) shim_die(s, "ballast_test (multisend send)", rc);
        if (done) {
            rc = ballast_request_free(s->sends[i]);
            if (rc != 0) shim_die(s, "ballast_request_free (multisend send)", rc);
            s->sends[i] = s->sends[--s->nsends];
        } else {
            i++;
        }
    }
}

void shim_finish_sends(struct shim_state *s) {
    for (size_t i = 0; i < s->nsends; i++) {
        int rc = ballast_wait(s->sends[i], NULL);
        if (rc != 0) shim_die(s, "ballast_wait (multisend send)", rc);
        rc = ballast_request_free(s->sends[i]);
        if (rc != 0) shim_die(s, "ballast_request_free (multisend send)", rc);
    }
    s->nsends = 0;
    free(s->sends);
    s->sends = NULL;
    s->capsends = 0;
}

void shim_multisend(struct shim_state *s, const char *F, const NRNMPI_Spike *spk, int n, const int *hosts) {
    ballast_comm *c = shim_comm(s, F);
    for (int i = 0; i < n; i++) {
        if (s->nsends == s->capsends) {
            size_t cap = s->capsends ? 2 * s->capsends : 64;
            ballast_request **p = realloc(s->sends, cap * sizeof *p);
            if (p == NULL) shim_fail(s, "multisend: out of memory for the send requests");
            s->sends = p;
            s->capsends = cap;
        }
        ballast_request *r = NULL;
        int rc;
        while ((rc = ballast_isend(c, hosts[i], MULTISEND_TAG, spk, sizeof *spk, &r)) == BALLAST_EAGAIN) {
            /* Every pool buffer is in flight: complete some. */
            reap_sends(s);
            rc = ballast_progress(c);
            if (rc != 0) shim_die(s, "ballast_progress (multisend)", rc);
        }
        if (rc != 0) shim_die(s, "ballast_isend (multisend)", rc);
        s->sends[s->nsends++] = r;
        s->n.multisend_sent++;
        s->n.spikes_sent++;
        s->n.bytes_sent += sizeof *spk;
    }
}

int shim_multisend_advance(struct shim_state *s, const char *F, NRNMPI_Spike *spk) {
    ballast_comm *c = shim_comm(s, F);
    if (s->nsends > 0) reap_sends(s);
    int found = 0;
    ballast_status st;
    int rc = ballast_iprobe(c, BALLAST_ANY_SOURCE, MULTISEND_TAG, &found, &st);
    if (rc != 0) shim_die(s, "ballast_iprobe (multisend)", rc);
    if (!found) return 0;
    rc = ballast_recv(c, st.source, MULTISEND_TAG, spk, sizeof *spk, &st);
    if (rc != 0) shim_die(s, "ballast_recv (multisend)", rc);
    if (st.len != sizeof *spk) shim_fail(s, "multisend: a message is not one spike");
    s->n.multisend_received++;
    s->n.spikes_received++;
    s->n.bytes_received += sizeof *spk;
    return 1;
}

int shim_multisend_conserve(struct shim_state *s, const char *F, int nsend, int nrecv) {
    if (s->nsends > 0) reap_sends(s);
    int mine = nsend - nrecv, np = 0;
    ballast_gathered *g = shim_allgatherv(s, F, &mine, sizeof mine, &np);
    long sum = 0;
    for (int i = 0; i < np; i++) {
        const void *d = NULL;
        size_t len = 0;
        int rc = ballast_gathered_part(g, i, &d, &len);
        if (rc != 0) shim_die(s, F, rc);
        if (len != sizeof(int)) shim_fail(s, "multisend conserve: a part is not one int");
        int v;
        memcpy(&v, d, sizeof v);
        sum += v;
    }
    ballast_gathered_free(g);
    return (int)sum;
}
