/* The shared half of the NEURON MPI shims (see shim_common.h). */
#define _GNU_SOURCE /* dladdr, dlinfo, RTLD_DI_LINKMAP */
#include "shim_common.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The directory of the loaded libnrniv (the wheel's lib/), in `dir`; 0 or -1. */
static int libnrniv_dir(char *dir, size_t len) {
    static const char *const names[] = {"libnrniv.so", "libnrniv-without-nvidia.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
        if (h == NULL) continue;
        struct link_map *lm = NULL;
        int rc = dlinfo(h, RTLD_DI_LINKMAP, &lm);
        dlclose(h);
        if (rc != 0 || lm == NULL || lm->l_name == NULL || lm->l_name[0] != '/') continue;
        const char *slash = strrchr(lm->l_name, '/');
        size_t n = (size_t)(slash - lm->l_name);
        if (n + 1 > len) return -1;
        memcpy(dir, lm->l_name, n);
        dir[n] = '\0';
        return 0;
    }
    return -1;
}

void *shim_load_original(const char *libname, const struct shim_forward *table, const void *own_symbol) {
    char dir[PATH_MAX], path[PATH_MAX], mine[PATH_MAX], theirs[PATH_MAX];
    if (libnrniv_dir(dir, sizeof dir) != 0) {
        fprintf(stderr,
                "ballast %s shim: libnrniv.so is not loaded in this process, so the wheel's own %s cannot "
                "be found beside it (load the shim through NEURON, with NRNHOME set to the ballast-nrnhome "
                "directory of ci/install-neuron.sh)\n",
                libname, libname);
        abort();
    }
    if (snprintf(path, sizeof path, "%s/%s", dir, libname) >= (int)sizeof path) {
        fprintf(stderr, "ballast %s shim: the path %s/%s is too long\n", libname, dir, libname);
        abort();
    }
    Dl_info info;
    if (dladdr(own_symbol, &info) != 0 && info.dli_fname != NULL && realpath(info.dli_fname, mine) != NULL &&
        realpath(path, theirs) != NULL && strcmp(mine, theirs) == 0) {
        fprintf(stderr,
                "ballast %s shim: the shim is installed beside libnrniv.so in place of the wheel's own %s "
                "(%s); install it with ci/install-neuron.sh into its own directory and set NRNHOME to it\n",
                libname, libname, path);
        abort();
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "ballast %s shim: cannot load the wheel's own %s: %s\n", libname, path, dlerror());
        abort();
    }
    for (const struct shim_forward *f = table; f->name != NULL; f++) {
        void *p = dlsym(h, f->name);
        if (p == NULL) {
            fprintf(stderr,
                    "ballast %s shim: the wheel's %s has no %s: this NEURON is not the one the shim was built "
                    "for (re-run ci/install-neuron.sh)\n",
                    libname, path, f->name);
            abort();
        }
        *f->slot = p;
    }
    return h;
}

void *shim_must_sym(const struct shim_state *s, void *h, const char *name) {
    void *p = dlsym(h, name);
    if (p == NULL) {
        fprintf(stderr, "ballast %s shim: the wheel's library has no %s (re-run ci/install-neuron.sh)\n", s->lib,
                name);
        abort();
    }
    return p;
}

/* The text of a return code. */
static const char *code_name(int rc) {
    const char *s = NULL;
    if (ballast_strerror(rc, &s) != 0 || s == NULL) return "unknown code";
    return s;
}

static int mpi_up(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

__attribute__((noreturn)) static void abort_job(void) {
    fflush(stderr);
    if (mpi_up()) MPI_Abort(MPI_COMM_WORLD, 1);
    abort();
}

void shim_die(const struct shim_state *s, const char *call, int rc) {
    char msg[1024];
    ballast_last_error(msg, sizeof msg);
    fprintf(stderr, "ballast %s shim: rank %d: %s failed with %d (%s): %s\n", s->lib, s->world_rank, call, rc,
            code_name(rc), msg);
    abort_job();
}

void shim_fail(const struct shim_state *s, const char *what) {
    fprintf(stderr, "ballast %s shim: rank %d: %s\n", s->lib, s->world_rank, what);
    abort_job();
}

ballast_comm *shim_comm(const struct shim_state *s, const char *call) {
    if (s->comm == NULL) {
        char what[256];
        snprintf(what, sizeof what,
                 "%s: no Ballast communicator (NEURON's MPI was not initialised through nrnmpi_init, or it "
                 "was already terminated)",
                 call);
        shim_fail(s, what);
    }
    return s->comm;
}

ballast_gathered *shim_allgatherv(struct shim_state *s, const char *call, const void *buf, size_t len, int *world) {
    ballast_comm *c = shim_comm(s, call);
    ballast_gathered *g = NULL;
    int rc = ballast_allgatherv(c, buf, len, &g);
    if (rc != 0) shim_die(s, call, rc);
    rc = ballast_world_size(c, world);
    if (rc != 0) shim_die(s, call, rc);
    return g;
}

/* The MPI_COMM_SELF attribute: its delete callback runs first thing in MPI_Finalize, while
 * MPI still works, and finishes a shim whose host never called its terminate (CoreNEURON
 * with --skip-mpi-finalize, or a program that finalises MPI itself). */
static int finalize_key = MPI_KEYVAL_INVALID;

static int on_finalize(MPI_Comm comm, int key, void *value, void *extra) {
    (void)comm;
    (void)key;
    (void)extra;
    shim_comm_finish((struct shim_state *)value);
    return MPI_SUCCESS;
}

/* The transport named by BALLAST_TRANSPORT when it is one of Ballast's own (verbs, shm, auto),
 * else NULL: unset or `mpi` is Ballast over the host's MPI (ballast_comm_from_mpi). */
static const char *own_transport(void) {
    const char *t = getenv("BALLAST_TRANSPORT");
    return t != NULL && t[0] != '\0' && strcmp(t, "mpi") != 0 ? t : NULL;
}

void shim_comm_make(struct shim_state *s, MPI_Comm host) {
    MPI_Comm_rank(MPI_COMM_WORLD, &s->world_rank);
    ballast_config *cfg = NULL;
    int rc = ballast_config_new(&cfg);
    if (rc != 0) shim_die(s, "ballast_config_new", rc);
    const char *own = own_transport();
    if (own != NULL) {
        /* Ballast's own transport: MPI only starts the job (the addresses are exchanged
         * through it) and carries the forwarded calls. ballast_comm_from_env's ranks are
         * the launcher's, so NEURON's communicator must be the whole world in world order. */
        int same = MPI_UNEQUAL;
        if (MPI_Comm_compare(host, MPI_COMM_WORLD, &same) != MPI_SUCCESS ||
            (same != MPI_IDENT && same != MPI_CONGRUENT)) {
            char what[256];
            snprintf(what, sizeof what,
                     "BALLAST_TRANSPORT=%s runs on MPI_COMM_WORLD's ranks only, and NEURON's communicator "
                     "is another (pc.subworlds?): unset BALLAST_TRANSPORT to run over MPI",
                     own);
            ballast_config_free(cfg);
            shim_fail(s, what);
        }
        rc = ballast_comm_from_env(cfg, &s->comm);
        ballast_config_free(cfg);
        if (rc != 0) shim_die(s, "ballast_comm_from_env", rc);
    } else {
        rc = ballast_comm_from_mpi(host, cfg, &s->comm);
        ballast_config_free(cfg);
        if (rc != 0) shim_die(s, "ballast_comm_from_mpi", rc);
    }
    /* Once per process (setting it again would run the callback on the old value). */
    if (finalize_key != MPI_KEYVAL_INVALID) return;
    if (MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_finalize, &finalize_key, NULL) != MPI_SUCCESS) {
        shim_fail(s, "MPI_Comm_create_keyval failed");
    }
    if (MPI_Comm_set_attr(MPI_COMM_SELF, finalize_key, s) != MPI_SUCCESS) {
        shim_fail(s, "MPI_Comm_set_attr(MPI_COMM_SELF) failed");
    }
}

/* `field` of /proc/self/status in kB, or -1. */
static long proc_status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL) return -1;
    char line[256];
    long kb = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            kb = strtol(line + n + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

/* Reads the transport and the path of s->comm from ballast_comm_notes. */
static void read_notes(struct shim_state *s) {
    char notes[4096];
    size_t full = 0;
    int rc = ballast_comm_notes(s->comm, notes, sizeof notes, &full);
    if (rc != 0) shim_die(s, "ballast_comm_notes", rc);
    s->mpi_native = strstr(notes, "\npath: native\n") != NULL;
    s->transport[0] = '\0';
    if (strncmp(notes, "transport: ", 11) == 0) {
        size_t n = strcspn(notes + 11, "\n");
        if (n >= sizeof s->transport) n = sizeof s->transport - 1;
        memcpy(s->transport, notes + 11, n);
        s->transport[n] = '\0';
    }
}

/* Writes DIR/SIMULATOR_rank{R}.json through a temporary file renamed into place; refuses a
 * path that exists and is not a regular file. */
static void write_report(struct shim_state *s, const char *dir) {
    ballast_footprint fp;
    int rc = ballast_comm_footprint(s->comm, &fp);
    if (rc != 0) shim_die(s, "ballast_comm_footprint", rc);
    read_notes(s);
    char path[PATH_MAX], tmp[PATH_MAX + 32], what[3 * PATH_MAX + 128];
    if (snprintf(path, sizeof path, "%s/%s_rank%d.json", dir, s->simulator, s->world_rank) >= (int)sizeof path) {
        shim_fail(s, "BALLAST_REPORT_DIR is too long");
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        snprintf(what, sizeof what, "BALLAST_REPORT_DIR: cannot create %s: %s", dir, strerror(errno));
        shim_fail(s, what);
    }
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(what, sizeof what, "BALLAST_REPORT_DIR: %s exists and is not a regular file (not replaced)", path);
        shim_fail(s, what);
    }
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        snprintf(what, sizeof what, "BALLAST_REPORT_DIR: cannot write %s: %s", tmp, strerror(errno));
        shim_fail(s, what);
    }
    const struct shim_counters *n = &s->n;
    fprintf(f, "{\n  \"simulator\": \"%s\",\n  \"rank\": %d,\n  \"transport\": \"%s\",\n  \"mpi_native\": %s,\n",
            s->simulator, s->world_rank, s->transport, s->mpi_native ? "true" : "false");
    fprintf(f,
            "  \"spike_exchanges\": %llu,\n  \"multisend_sent\": %llu,\n  \"multisend_received\": %llu,\n"
            "  \"spikes_sent\": %llu,\n  \"spikes_received\": %llu,\n  \"bytes_sent\": %llu,\n"
            "  \"bytes_received\": %llu,\n",
            (unsigned long long)n->spike_exchanges, (unsigned long long)n->multisend_sent,
            (unsigned long long)n->multisend_received, (unsigned long long)n->spikes_sent,
            (unsigned long long)n->spikes_received, (unsigned long long)n->bytes_sent,
            (unsigned long long)n->bytes_received);
    fprintf(f,
            "  \"footprint\": {\"pool\": %llu, \"registered\": %llu, \"locked\": %llu, \"endpoint_queues\": %llu, "
            "\"shared_receive_queue\": %llu, \"control\": %llu, \"total\": %llu, \"peers_connected\": %u, "
            "\"endpoints_live\": %u, \"endpoints_peak\": %u, \"endpoints_opened\": %u, \"datagram_peers\": %u, "
            "\"datagram\": %llu},\n",
            (unsigned long long)fp.pool, (unsigned long long)fp.registered, (unsigned long long)fp.locked,
            (unsigned long long)fp.endpoint_queues, (unsigned long long)fp.shared_receive_queue,
            (unsigned long long)fp.control, (unsigned long long)fp.total, fp.peers_connected, fp.endpoints_live,
            fp.endpoints_peak, fp.endpoints_opened, fp.datagram_peers, (unsigned long long)fp.datagram);
    fprintf(f, "  \"peers_connected\": %u,\n  \"vm_rss_kb\": %ld,\n  \"vm_hwm_kb\": %ld,\n  \"vm_pin_kb\": %ld\n}\n",
            fp.peers_connected, proc_status_kb("VmRSS"), proc_status_kb("VmHWM"), proc_status_kb("VmPin"));
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        unlink(tmp);
        snprintf(what, sizeof what, "BALLAST_REPORT_DIR: writing %s failed", tmp);
        shim_fail(s, what);
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        snprintf(what, sizeof what, "BALLAST_REPORT_DIR: cannot rename %s to %s: %s", tmp, path, strerror(errno));
        shim_fail(s, what);
    }
}

void shim_comm_finish(struct shim_state *s) {
    if (s->comm == NULL) return;
    shim_finish_sends(s);
    const char *dir = getenv("BALLAST_REPORT_DIR");
    if (dir != NULL && dir[0] != '\0') write_report(s, dir);
    ballast_comm *c = s->comm;
    s->comm = NULL;
    int rc = ballast_comm_free(c);
    if (rc != 0) shim_die(s, "ballast_comm_free", rc);
}
