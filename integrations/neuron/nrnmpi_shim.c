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
 * The exchange (shim_exchange.c), as src/nrnmpi/mpispike.cpp at 9.0.2 does it over MPI
 * (nrn_spikebuf_size 0):
 * - nrnmpi_spike_exchange: MPI_Allgather of the counts + MPI_Allgatherv of the spikes, here
 *   one ballast_allgatherv of this rank's spikes;
 * - nrnmpi_spike_exchange_compressed: the same over the fixed-size byte buffers and their
 *   overflow, here one ballast_allgatherv of the fixed part followed by this rank's overflow;
 * - multisend: nrnmpi_multisend_multisend is one ballast_isend (tag 1) per target host, kept
 *   and reaped when complete (NEURON frees its MPI requests unwaited); single_advance a
 *   ballast_iprobe (any source) and ballast_recv; conserve the sum over the ranks of
 *   (sent - received), an all-gather of one int. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <stddef.h>

#include <dlfcn.h>

#include "shim_common.h"

extern const struct shim_forward nrn_forward_table[]; /* nrn_forward.c (generated) */

/* Set by NEURON after it loads this library; handed on to the wheel's own library (whose
 * bbs unpack functions allocate with it) in nrnmpi_init. */
EXPORT char *(*p_cxx_char_alloc)(size_t);

static struct shim_state S = {.simulator = "neuron", .lib = "libnrnmpi_ompi.so", .world_rank = -1};

static void *original;                            /* the wheel's libnrnmpi_ompi.so */
static MPI_Comm *nrnmpi_comm_of_original;         /* its nrnmpi_comm */
static char *(**original_cxx_char_alloc)(size_t); /* its p_cxx_char_alloc */
static void (*context_wait)(void);                /* libnrniv's nrnbbs_context_wait() */

/* The original functions this library wraps. */
static void (*orig_init)(int, int *, char ***);
static void (*orig_terminate)(void);
static void (*orig_subworld_size)(int);

__attribute__((constructor)) static void load(void) {
    original = shim_load_original(S.lib, nrn_forward_table, (const void *)&load);
    nrnmpi_comm_of_original = shim_must_sym(&S, original, "nrnmpi_comm");
    original_cxx_char_alloc = shim_must_sym(&S, original, "p_cxx_char_alloc");
    orig_init = shim_must_sym(&S, original, "f_nrnmpi_init");
    orig_terminate = shim_must_sym(&S, original, "f_nrnmpi_terminate");
    orig_subworld_size = shim_must_sym(&S, original, "f_nrnmpi_subworld_size");
    /* C++ `void nrnbbs_context_wait()` of libnrniv (already loaded, global). */
    context_wait = (void (*)(void))dlsym(RTLD_DEFAULT, "_Z19nrnbbs_context_waitv");
}

static void make_comm(void) {
    MPI_Comm c = *nrnmpi_comm_of_original;
    int up = 0;
    MPI_Initialized(&up);
    if (!up || c == NULL || c == MPI_COMM_NULL) return; /* NEURON runs without MPI */
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

EXPORT int f_nrnmpi_spike_exchange(int *ovfl, int *nout, int *nin, NRNMPI_Spike *spikeout, NRNMPI_Spike **spikein,
                                   int *icapacity) {
    (void)ovfl; /* only used with nrn_spikebuf_size > 0 */
    wait_context();
    return shim_spike_exchange(&S, "nrnmpi_spike_exchange", nin, spikeout, *nout, spikein, icapacity);
}

EXPORT int f_nrnmpi_spike_exchange_compressed(int localgid_size, int ag_send_size, int ag_send_nspike,
                                              int *ovfl_capacity, int *ovfl, unsigned char *spfixout,
                                              unsigned char *spfixin, unsigned char **spfixin_ovfl, int *nin) {
    wait_context();
    return shim_spike_exchange_compressed(&S, "nrnmpi_spike_exchange_compressed", localgid_size, ag_send_size,
                                          ag_send_nspike, ovfl_capacity, ovfl, spfixout, spfixin, spfixin_ovfl, nin);
}

/* The multisend communicator is the one made in nrnmpi_init. */
EXPORT void f_nrnmpi_multisend_comm(void) { (void)shim_comm(&S, "nrnmpi_multisend_comm"); }

EXPORT void f_nrnmpi_multisend_multisend(NRNMPI_Spike *spk, int n, int *hosts) {
    shim_multisend(&S, "nrnmpi_multisend_multisend", spk, n, hosts);
}

EXPORT int f_nrnmpi_multisend_single_advance(NRNMPI_Spike *spk) {
    return shim_multisend_advance(&S, "nrnmpi_multisend_single_advance", spk);
}

EXPORT int f_nrnmpi_multisend_conserve(int nsend, int nrecv) {
    return shim_multisend_conserve(&S, "nrnmpi_multisend_conserve", nsend, nrecv);
}
