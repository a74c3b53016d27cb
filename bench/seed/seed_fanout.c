/* The seed's fanout program, in C (the measurement Ballast was started to improve on):
 * rank 0 sends 10 integers to each of the N-1 other ranks with MPI_Send; each of them
 * receives its 10 integers with MPI_Recv and checks them. Rank 0 reads its own VmPin, VmLck,
 * VmRSS and VmData from /proc/self/status before MPI_Init, after MPI_Init and after the
 * sends, and prints one line per point:
 *   seed_fanout stage=before_init ranks=N vm_pin_kb=.. vm_lck_kb=.. vm_rss_kb=.. vm_data_kb=..
 * Exit code 0 when every rank got its integers. Build: mpicc -O2 -o seed_fanout seed_fanout.c
 * Used by ci/verbs_mpi.sh and bench/seed/compare.sh (see docs/BENCHMARKS.md). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INTS 10

struct status {
    long pin, lck, rss, data;
};

static long field(const char *text, const char *key) {
    const char *p = strstr(text, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static struct status read_status(void) {
    struct status s = {-1, -1, -1, -1};
    char buf[8192];
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return s;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    s.pin = field(buf, "\nVmPin:");
    s.lck = field(buf, "\nVmLck:");
    s.rss = field(buf, "\nVmRSS:");
    s.data = field(buf, "\nVmData:");
    return s;
}

static void print_status(const char *stage, int ranks, struct status s) {
    printf("seed_fanout stage=%s ranks=%d vm_pin_kb=%ld vm_lck_kb=%ld vm_rss_kb=%ld vm_data_kb=%ld\n", stage, ranks,
           s.pin, s.lck, s.rss, s.data);
}

int main(int argc, char **argv) {
    struct status before = read_status();
    MPI_Init(&argc, &argv);
    struct status after_init = read_status();
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int data[INTS];
    int ok = 1;
    if (rank == 0) {
        for (int i = 0; i < INTS; i++) data[i] = i;
        for (int p = 1; p < size; p++) MPI_Send(data, INTS, MPI_INT, p, 77, MPI_COMM_WORLD);
        struct status after_sends = read_status();
        print_status("before_init", size, before);
        print_status("after_init", size, after_init);
        print_status("after_sends", size, after_sends);
    } else {
        MPI_Recv(data, INTS, MPI_INT, 0, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < INTS; i++) ok &= data[i] == i;
    }
    int all_ok = 0;
    MPI_Reduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("seed_fanout ranks=%d received=%s\n", size, all_ok ? "ok" : "WRONG");
    MPI_Finalize();
    return rank == 0 && !all_ok ? 1 : 0;
}
