/* Memory of the processes of one node: Ballast's shm transport beside Open MPI's vader, the
 * C half of bench/shm_vs_vader.sh (issue 36). One source, two programs:
 *
 *   mpicc -DSHM_MEMORY_MPI shm_memory.c -o shm_memory_mpi                     (modes mpi, none)
 *   cc -DSHM_MEMORY_BALLAST shm_memory.c $(pkg-config ... ballast) -o shm_memory_ballast (modes ballast, none)
 *     (against a libballast built WITHOUT mpi: no MPI in the process at all)
 *
 *   mpirun --mca pml ob1 --mca btl self,vader -n N shm_memory_mpi mpi ROUNDS SIZE DIR
 *   BALLAST_TRANSPORT=shm mpirun -n N shm_memory_ballast ballast ROUNDS SIZE DIR
 *   mpirun -n N shm_memory_{mpi,ballast} none ROUNDS SIZE DIR
 *
 * Modes:
 *   mpi      MPI_Init; ROUNDS rounds in which every rank sends SIZE bytes to every other rank
 *            and receives SIZE bytes from each (MPI_Sendrecv with the partners r + k and
 *            r - k, k = 1 .. N-1), so every pairwise structure exists (vader makes a fast box
 *            for a peer after btl_vader_fbox_threshold sends to it, 16 by default: ROUNDS
 *            must pass it); MPI_Barrier; each rank reads its own /proc/self/smaps_rollup;
 *            MPI_Gather to rank 0; MPI_Barrier; MPI_Finalize.
 *   ballast  ballast_comm_from_env(NULL) (BALLAST_TRANSPORT=shm: the ranks meet at the node's
 *            socket named by the launcher's job id, PMIX_NAMESPACE under Open MPI's mpirun;
 *            no MPI), the same exchange with ballast_isend + ballast_recv + ballast_wait,
 *            ballast_barrier, the reading, ballast_gather to rank 0, ballast_barrier,
 *            ballast_comm_free.
 *   none     nothing but the reading: no MPI_Init, no Ballast (the baseline of each program).
 *            The ranks wait for each other through files in DIR (each writes DIR/ready.R and
 *            waits for N of them, reads, writes DIR/pss.R and waits for N of them; rank 0
 *            sums them), so that every rank is alive while any reads (a shared page's Pss
 *            is divided among the processes mapping it at the time).
 * The rank and world size of `none` come from the launcher (OMPI_COMM_WORLD_RANK/SIZE, else
 * SLURM_PROCID/NTASKS, else BALLAST_RANK/SIZE). DIR must be empty and only this run's.
 *
 * Rank 0 prints one line (kB as the kernel counts them, 1 kB = 1024 B; footprints in B):
 *   shm_memory MODE N ROUNDS SIZE PSS PSS_ANON PSS_FILE PSS_SHMEM RSS FP0_TOTAL FP0_SHM FP_TOTAL_SUM FP_SHM_SUM
 * PSS .. RSS: the sums over the ranks of smaps_rollup's Pss, Pss_Anon, Pss_File, Pss_Shmem
 * and Rss (the sum of Pss is the memory of the ranks, each page counted once; Rss counts a
 * shared page once per process mapping it); FP0_TOTAL, FP0_SHM: rank 0's
 * ballast_comm_footprint total and shm_segment; FP_TOTAL_SUM, FP_SHM_SUM: their sums over
 * the ranks (a node's shared memory is the sum of its ranks' shm_segment); 0 outside
 * `ballast`. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(SHM_MEMORY_MPI) == defined(SHM_MEMORY_BALLAST)
#error "define exactly one of SHM_MEMORY_MPI and SHM_MEMORY_BALLAST"
#endif

#ifdef SHM_MEMORY_MPI
#include <mpi.h>
#define PROGRAM "shm_memory_mpi"
#define TRANSPORT_MODE "mpi"
#else
#include "ballast.h"
#define PROGRAM "shm_memory_ballast"
#define TRANSPORT_MODE "ballast"
#define BENCH_NAME PROGRAM
#include "common.h"
#endif

/* One rank's reading, and its footprint (ballast mode). */
struct reading {
    uint64_t pss, pss_anon, pss_file, pss_shmem, rss; /* kB */
    uint64_t fp_total, fp_shm;                        /* B */
};
enum { FIELDS = 7 };

static void fail(const char *what) {
    fprintf(stderr, "%s: %s: %s\n", PROGRAM, what, strerror(errno));
    exit(1);
}

/* This process's smaps_rollup (Pss_Shmem and the others are 0 when the kernel lacks them). */
static struct reading read_smaps(void) {
    struct reading r = {0};
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) fail("/proc/self/smaps_rollup");
    char line[256];
    while (fgets(line, sizeof line, f)) {
        const struct {
            const char *key;
            uint64_t *into;
        } keys[] = {{"Pss:", &r.pss}, {"Pss_Anon:", &r.pss_anon}, {"Pss_File:", &r.pss_file},
                    {"Pss_Shmem:", &r.pss_shmem}, {"Rss:", &r.rss}};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            size_t n = strlen(keys[k].key);
            if (strncmp(line, keys[k].key, n) == 0) *keys[k].into = strtoull(line + n, NULL, 10);
        }
    }
    fclose(f);
    if (r.pss == 0 || r.rss == 0) {
        fprintf(stderr, "%s: no Pss or Rss in /proc/self/smaps_rollup\n", PROGRAM);
        exit(1);
    }
    return r;
}

static void print_sum(const char *mode, int n, long rounds, size_t size, const struct reading *all) {
    uint64_t s[FIELDS] = {0};
    for (int i = 0; i < n; i++) {
        const uint64_t v[FIELDS] = {all[i].pss,    all[i].pss_anon, all[i].pss_file, all[i].pss_shmem,
                                    all[i].rss,    all[i].fp_total, all[i].fp_shm};
        for (int k = 0; k < FIELDS; k++) s[k] += v[k];
    }
    printf("shm_memory %s %d %ld %zu %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
           " %" PRIu64 " %" PRIu64 "\n",
           mode, n, rounds, size, s[0], s[1], s[2], s[3], s[4], all[0].fp_total, all[0].fp_shm, s[5], s[6]);
    fflush(stdout);
}

/* The launcher's rank and size, for `none`. */
static int env_pair(int *rank, int *size) {
    const char *pairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                              {"SLURM_PROCID", "SLURM_NTASKS"},
                              {"BALLAST_RANK", "BALLAST_SIZE"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const char *r = getenv(pairs[i][0]), *s = getenv(pairs[i][1]);
        if (r && s) {
            *rank = atoi(r);
            *size = atoi(s);
            return 0;
        }
    }
    return -1;
}

/* Writes DIR/NAME.RANK (its content: `text`, written to a temporary name and renamed, so that
 * a reader never sees half of it), then waits until DIR/NAME.0 .. NAME.N-1 all exist. */
static void file_barrier(const char *dir, const char *name, int rank, int n, const char *text) {
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/%s.%d", dir, name, rank);
    snprintf(tmp, sizeof tmp, "%s/.%s.%d.tmp", dir, name, rank);
    FILE *f = fopen(tmp, "w");
    if (!f) fail(tmp);
    fputs(text, f);
    if (fclose(f) != 0 || rename(tmp, path) != 0) fail(path);
    struct timespec nap = {0, 2000000}; /* 2 ms */
    double waited = 0;
    for (int i = 0; i < n;) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s.%d", dir, name, i);
        if (stat(path, &st) == 0) {
            i++;
            continue;
        }
        nanosleep(&nap, NULL);
        waited += 0.002;
        if (waited > 600) {
            fprintf(stderr, "%s: rank %d waited 600 s for %s\n", PROGRAM, rank, path);
            exit(1);
        }
    }
}

static int run_none(long rounds, size_t size, const char *dir) {
    int rank, n;
    if (env_pair(&rank, &n) != 0 || n < 1 || rank < 0 || rank >= n) {
        fprintf(stderr, "%s: none: no launcher rank and size (OMPI_COMM_WORLD_RANK/SIZE, ...)\n", PROGRAM);
        return 2;
    }
    file_barrier(dir, "ready", rank, n, "");
    struct reading r = read_smaps();
    char text[256];
    snprintf(text, sizeof text, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", r.pss, r.pss_anon,
             r.pss_file, r.pss_shmem, r.rss);
    file_barrier(dir, "pss", rank, n, text);
    if (rank == 0) {
        struct reading *all = calloc((size_t)n, sizeof *all);
        for (int i = 0; i < n; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/pss.%d", dir, i);
            FILE *f = fopen(path, "r");
            if (!f || fscanf(f, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &all[i].pss,
                             &all[i].pss_anon, &all[i].pss_file, &all[i].pss_shmem, &all[i].rss) != 5)
                fail(path);
            fclose(f);
        }
        print_sum("none", n, rounds, size, all);
        free(all);
    }
    return 0;
}

#ifdef SHM_MEMORY_MPI
static int run_transport(int argc, char **argv, long rounds, size_t size) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    char *out = calloc(size ? size : 1, 1), *in = calloc(size ? size : 1, 1);
    for (long round = 0; round < rounds; round++)
        for (int k = 1; k < n; k++)
            MPI_Sendrecv(out, (int)size, MPI_BYTE, (rank + k) % n, 1, in, (int)size, MPI_BYTE, (rank + n - k) % n, 1,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    struct reading r = read_smaps();
    struct reading *all = rank == 0 ? calloc((size_t)n, sizeof *all) : NULL;
    MPI_Gather(&r, FIELDS, MPI_UINT64_T, all, FIELDS, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) print_sum(TRANSPORT_MODE, n, rounds, size, all);
    free(all);
    free(out);
    free(in);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
#else
static int run_transport(int argc, char **argv, long rounds, size_t size) {
    (void)argc;
    (void)argv;
    (void)now_ns; /* common.h's, unused here */
    (void)median;
    ballast_comm *comm;
    TRY(ballast_comm_from_env(NULL, &comm)); /* BALLAST_TRANSPORT=shm */
    int rank, n;
    TRY(ballast_rank(comm, &rank));
    TRY(ballast_world_size(comm, &n));
    char *out = calloc(size ? size : 1, 1), *in = calloc(size ? size : 1, 1);
    for (long round = 0; round < rounds; round++)
        for (int k = 1; k < n; k++) {
            ballast_request *req;
            ballast_status st;
            TRY(ballast_isend(comm, (rank + k) % n, 1, out, size, &req));
            TRY(ballast_recv(comm, (rank + n - k) % n, 1, in, size, &st));
            TRY(ballast_wait(req, NULL));
            TRY(ballast_request_free(req));
        }
    TRY(ballast_barrier(comm));
    struct reading r = read_smaps();
    ballast_footprint fp;
    TRY(ballast_comm_footprint(comm, &fp));
    r.fp_total = fp.total;
    r.fp_shm = fp.shm_segment;
    if (n > 1 && (fp.shm_segment == 0 || fp.shm_peers_mapped != (uint32_t)(n - 1))) {
        fprintf(stderr, "%s: rank %d: shm_segment %" PRIu64 ", %u peer segments mapped of %d: not over shm?\n",
                PROGRAM, rank, fp.shm_segment, fp.shm_peers_mapped, n - 1);
        ballast_abort(comm, 1);
        return 1;
    }
    ballast_gathered *g = NULL;
    TRY(ballast_gather(comm, 0, &r, sizeof r, &g));
    if (rank == 0) {
        struct reading *all = calloc((size_t)n, sizeof *all);
        for (int i = 0; i < n; i++) {
            const void *data;
            size_t len;
            TRY(ballast_gathered_part(g, i, &data, &len));
            if (len != sizeof r) {
                fprintf(stderr, "%s: rank %d's part is %zu B\n", PROGRAM, i, len);
                return 1;
            }
            memcpy(&all[i], data, sizeof r);
        }
        print_sum(TRANSPORT_MODE, n, rounds, size, all);
        free(all);
    }
    TRY(ballast_gathered_free(g));
    free(out);
    free(in);
    TRY(ballast_barrier(comm));
    TRY(ballast_comm_free(comm));
    return 0;
}
#endif

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[1], TRANSPORT_MODE) != 0 && strcmp(argv[1], "none") != 0)) {
        fprintf(stderr, "usage: mpirun -n N %s %s|none ROUNDS SIZE DIR\n", PROGRAM, TRANSPORT_MODE);
        return 2;
    }
    long rounds = strtol(argv[2], NULL, 10);
    size_t size = strtoull(argv[3], NULL, 10);
    if (rounds < 0 || size > (size_t)INT32_MAX) {
        fprintf(stderr, "%s: ROUNDS at least 0, SIZE below 2^31\n", PROGRAM);
        return 2;
    }
    if (strcmp(argv[1], "none") == 0) return run_none(rounds, size, argv[4]);
    return run_transport(argc, argv, rounds, size);
}
