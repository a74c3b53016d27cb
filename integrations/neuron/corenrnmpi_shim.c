/* libcorenrnmpi_ompi.so for CoreNEURON in NEURON 9.0.x: the spike exchange over Ballast,
 * everything else forwarded to the wheel's own libcorenrnmpi_ompi.so (see README.md).
 *
 * CoreNEURON (src/coreneuron/apps/main1.cpp) dlopens the library NEURON names in --mpi-lib,
 * $NRNHOME/lib/libcorenrnmpi_<impl>.so, and resolves the 26 nrnmpi_*_impl functions of
 * src/coreneuron/mpi/nrnmpidec.h. This library defines the 8 marked 'ballast' in
 * corenrnmpi_functions.txt; the 18 others are trampolines into the wheel's own library. The
 * Ballast communicator is made over CoreNEURON's coreneuron::nrnmpi_comm at the end of
 * nrnmpi_init_impl. Embedded runs pass --skip-mpi-finalize, so nrnmpi_finalize_impl may never
 * come: the communicator is then freed (and the report written) by the MPI_COMM_SELF
 * attribute at MPI_Finalize (shim_common.c). */
#include <stdbool.h>
#include <stddef.h>

#include "shim_common.h"

extern const struct shim_forward core_forward_table[]; /* core_forward.c (generated) */

/* coreneuron::nrnmpi_init_ret_t */
typedef struct {
    int numprocs;
    int myid;
} init_ret;

static struct shim_state S = {.simulator = "coreneuron", .lib = "libcorenrnmpi_ompi.so", .world_rank = -1};

static MPI_Comm *core_comm; /* the wheel's coreneuron::nrnmpi_comm */
static init_ret (*orig_init)(int *, char ***, bool);
static void (*orig_finalize)(void);

__attribute__((constructor)) static void load(void) {
    void *original = shim_load_original(S.lib, core_forward_table, (const void *)&load);
    core_comm = shim_must_sym(&S, original, "_ZN10coreneuron11nrnmpi_commE");
    orig_init = (init_ret(*)(int *, char ***, bool))shim_must_sym(&S, original, "nrnmpi_init_impl");
    orig_finalize = (void (*)(void))shim_must_sym(&S, original, "nrnmpi_finalize_impl");
}

EXPORT init_ret nrnmpi_init_impl(int *pargc, char ***pargv, bool is_quiet) {
    init_ret r = orig_init(pargc, pargv, is_quiet);
    if (S.comm == NULL) shim_comm_make(&S, *core_comm);
    return r;
}

EXPORT void nrnmpi_finalize_impl(void) {
    shim_comm_finish(&S);
    orig_finalize();
}

/* CoreNEURON's exchange starts with a barrier (its "imbalance" phase), then the all-gathers;
 * `icapacity` and `ovfl_capacity` are by value there (the caller keeps its own). */
EXPORT int nrnmpi_spike_exchange_impl(int *nin, NRNMPI_Spike *spikeout, int icapacity, NRNMPI_Spike **spikein,
                                      int *ovfl, int nout, void *spbufout, void *spbufin) {
    static const char F[] = "nrnmpi_spike_exchange_impl";
    (void)spbufout; /* only used with nrn_spikebuf_size > 0 */
    (void)spbufin;
    int rc = ballast_barrier(shim_comm(&S, F));
    if (rc != 0) shim_die(&S, "ballast_barrier (nrnmpi_spike_exchange_impl)", rc);
    *ovfl = 0;
    return shim_spike_exchange(&S, F, nin, spikeout, nout, spikein, &icapacity);
}

EXPORT int nrnmpi_spike_exchange_compressed_impl(int localgid_size, unsigned char **spfixin_ovfl, int send_nspike,
                                                 int *nin, int ovfl_capacity, unsigned char *spikeout_fixed,
                                                 int ag_send_size, unsigned char *spikein_fixed, int *ovfl) {
    return shim_spike_exchange_compressed(&S, "nrnmpi_spike_exchange_compressed_impl", localgid_size, ag_send_size,
                                          send_nspike, &ovfl_capacity, ovfl, spikeout_fixed, spikein_fixed,
                                          spfixin_ovfl, nin);
}

EXPORT void nrnmpi_multisend_comm_impl(void) { (void)shim_comm(&S, "nrnmpi_multisend_comm_impl"); }

EXPORT void nrnmpi_multisend_impl(NRNMPI_Spike *spk, int n, int *hosts) {
    shim_multisend(&S, "nrnmpi_multisend_impl", spk, n, hosts);
}

EXPORT int nrnmpi_multisend_single_advance_impl(NRNMPI_Spike *spk) {
    return shim_multisend_advance(&S, "nrnmpi_multisend_single_advance_impl", spk);
}

EXPORT int nrnmpi_multisend_conserve_impl(int nsend, int nrecv) {
    return shim_multisend_conserve(&S, "nrnmpi_multisend_conserve_impl", nsend, nrecv);
}
