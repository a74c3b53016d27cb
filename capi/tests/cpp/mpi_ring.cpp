// A C++ host of the MPI install of libballast, built with a plain C++ compiler (not mpicxx)
// and the install's flags, by pkg-config or by CMake (ci/capi.sh): ballast.h includes
// <mpi.h>, whose C++ bindings the install's flags skip (OMPI_SKIP_MPICXX, MPICH_SKIP_MPICXX),
// so the program links with MPI's C library alone. Under mpirun -n 2 or more: a ring of one
// message per rank over ballast_comm_from_mpi, checked against what the left neighbour
// sent. Prints "capi mpi c++ ring: rank R of N: ok" and exits 0, or says what failed.
#include <cstdio>
#include <cstring>
#include <string>

#include "ballast.h"

#ifndef BALLAST_HAVE_MPI
#error "build with the flags of an mpi install (pkg-config --cflags ballast, or Ballast::ballast)"
#endif

static int fail(const char *what, int rc) {
    char msg[512];
    ballast_last_error(msg, sizeof msg);
    std::fprintf(stderr, "%s returned %d: %s\n", what, rc, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    ballast_comm *comm = nullptr;
    int rc = ballast_comm_from_mpi(MPI_COMM_WORLD, nullptr, &comm);
    if (rc != 0) return fail("ballast_comm_from_mpi", rc);
    int me = -1, n = -1;
    if ((rc = ballast_rank(comm, &me)) != 0) return fail("ballast_rank", rc);
    if ((rc = ballast_world_size(comm, &n)) != 0) return fail("ballast_world_size", rc);
    std::string out = "from rank " + std::to_string(me);
    char in[64] = {0};
    ballast_request *r = nullptr;
    if ((rc = ballast_irecv_into(comm, (me + n - 1) % n, 1, in, sizeof in, &r)) != 0)
        return fail("ballast_irecv_into", rc);
    if ((rc = ballast_send(comm, (me + 1) % n, 1, out.data(), out.size())) != 0) return fail("ballast_send", rc);
    ballast_status st;
    if ((rc = ballast_wait(r, &st)) != 0) return fail("ballast_wait", rc);
    if ((rc = ballast_request_free(r)) != 0) return fail("ballast_request_free", rc);
    std::string want = "from rank " + std::to_string((me + n - 1) % n);
    if (st.len != want.size() || std::memcmp(in, want.data(), want.size()) != 0) {
        std::fprintf(stderr, "rank %d got \"%.*s\", want \"%s\"\n", me, (int)st.len, in, want.c_str());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if ((rc = ballast_comm_free(comm)) != 0) return fail("ballast_comm_free", rc);
    std::printf("capi mpi c++ ring: rank %d of %d: ok\n", me, n);
    MPI_Finalize();
    return 0;
}
