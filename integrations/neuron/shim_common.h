/* What the two NEURON MPI shims (libnrnmpi_ompi.so and libcorenrnmpi_ompi.so) share: loading
 * the wheel's own library and filling the forwarding table, the Ballast communicator over the
 * host's MPI communicator, the exchange counters and the per-rank JSON report, and the abort
 * on error. Only libballast's public API (ballast.h) is used. */
#ifndef BALLAST_NEURON_SHIM_COMMON_H
#define BALLAST_NEURON_SHIM_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* One forwarded function: its name in the wheel's library and the pointer its trampoline
 * jumps through (gen_forward.sh). */
struct shim_forward {
    const char *name;
    void **slot;
};

#ifdef BALLAST_HAVE_MPI
#include <mpi.h>

#include "ballast.h"

/* The exchange counters a report gives (one rank). */
struct shim_counters {
    uint64_t spike_exchanges;    /* allgather-mode exchange calls (plain and compressed) */
    uint64_t multisend_sent;     /* point-to-point spike messages sent (multisend) */
    uint64_t multisend_received; /* and received */
    uint64_t spikes_sent;        /* spikes this rank contributed (allgather) or sent (multisend) */
    uint64_t spikes_received;    /* spikes from the other ranks, received */
    uint64_t bytes_sent;         /* bytes given to Ballast */
    uint64_t bytes_received;     /* bytes from the other ranks, received from Ballast */
};

/* NEURON's and CoreNEURON's spike record (src/nrnmpi/nrnmpi.h, src/coreneuron/mpi/nrnmpi.h). */
typedef struct {
    int gid;
    double spiketime;
} NRNMPI_Spike;

#define EXPORT __attribute__((visibility("default")))

/* One shim's state: which simulator it serves, its communicator and counters. */
struct shim_state {
    const char *simulator; /* "neuron" or "coreneuron": the report's name and field */
    const char *lib;       /* the library's file name, for messages */
    ballast_comm *comm;    /* NULL until made, and after it is freed */
    int world_rank;        /* MPI_COMM_WORLD rank, -1 before MPI is up */
    int mpi_native;        /* from ballast_comm_notes, when the report is written */
    char transport[32];
    struct shim_counters n;
    /* Multisend's sends in flight (freed before the communicator). */
    ballast_request **sends;
    size_t nsends, capsends;
};

/* Opens the wheel's own LIBNAME, found beside libnrniv.so (not this shim: that is refused),
 * with RTLD_NOW | RTLD_LOCAL, and fills every pointer of `table` with dlsym. On failure
 * prints what is missing and where it looked, and aborts the process (this runs when NEURON
 * loads the shim, before anything can be returned to it). Returns the handle. */
void *shim_load_original(const char *libname, const struct shim_forward *table, const void *own_symbol);

/* Makes s->comm with ballast_comm_from_mpi(host) (collective over `host`), with the
 * configuration of the BALLAST_* variables, and registers the MPI_COMM_SELF attribute whose
 * delete callback (at MPI_Finalize) finishes the shim if nothing did before. */
void shim_comm_make(struct shim_state *s, MPI_Comm host);

/* Finishes s->comm: writes the report (with BALLAST_REPORT_DIR), then ballast_comm_free
 * (collective). Nothing when there is no communicator. */
void shim_comm_finish(struct shim_state *s);

/* Aborts the job (MPI_Abort on MPI_COMM_WORLD when MPI is up, else abort) with a message
 * naming the rank, the call, the code and ballast_last_error. */
__attribute__((noreturn)) void shim_die(const struct shim_state *s, const char *call, int rc);

/* Aborts the job with a message naming the rank and `what`. */
__attribute__((noreturn)) void shim_fail(const struct shim_state *s, const char *what);

/* The communicator, or abort naming `call` when there is none (MPI not initialised through
 * NEURON, or already terminated). */
ballast_comm *shim_comm(const struct shim_state *s, const char *call);

/* ballast_allgatherv of (buf, len) on s->comm, the world size in *world; read the parts
 * with ballast_gathered_part, free with ballast_gathered_free. Aborts on error. */
ballast_gathered *shim_allgatherv(struct shim_state *s, const char *call, const void *buf, size_t len,
                                  int *world);

/* dlsym(h, name), or abort naming it. */
void *shim_must_sym(const struct shim_state *s, void *h, const char *name);

/* The exchange (shim_exchange.c), `F` naming the simulator's call in messages. */
int shim_spike_exchange(struct shim_state *s, const char *F, int *nin, const NRNMPI_Spike *spikeout, int nout,
                        NRNMPI_Spike **spikein, int *icapacity);
int shim_spike_exchange_compressed(struct shim_state *s, const char *F, int localgid_size, int ag_send_size,
                                   int ag_send_nspike, int *ovfl_capacity, int *ovfl, const unsigned char *spfixout,
                                   unsigned char *spfixin, unsigned char **spfixin_ovfl, int *nin);
void shim_multisend(struct shim_state *s, const char *F, const NRNMPI_Spike *spk, int n, const int *hosts);
int shim_multisend_advance(struct shim_state *s, const char *F, NRNMPI_Spike *spk);
int shim_multisend_conserve(struct shim_state *s, const char *F, int nsend, int nrecv);
/* Waits for and frees the multisend sends in flight. */
void shim_finish_sends(struct shim_state *s);

#endif /* BALLAST_HAVE_MPI */
#endif /* BALLAST_NEURON_SHIM_COMMON_H */
