/* MPI constants that mpi.h defines as macros and rsmpi does not export, as functions
 * (compiled by runtime/build.rs with the `mpi` feature, with the MPI rsmpi builds against). */
#include <mpi.h>

/* MPI_IN_PLACE: ((void *) 1) in Open MPI, ((void *) -1) in MPICH; a value, never read. */
void *ballast_mpi_in_place(void) { return MPI_IN_PLACE; }
