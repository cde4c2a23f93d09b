// How this process was started, shared by both builds of distributed/ (internal to it, not
// installed): whether an MPI launcher started it and with how many processes (defined in
// common.cpp, read by each world's Environment), and whether MPI lets a second thread
// communicate (defined by each world, read by data_parallel.cpp).
#pragma once

namespace ag::dist {

// True when an MPI launcher (Open MPI's mpirun, or a PMI-based one such as srun or MPICH's
// mpiexec) started this process.
bool launched_by_mpi();
// The number of processes the launcher started, or 1 when there is none.
int launcher_world_size();

namespace detail {
// Whether a second thread may call MPI while the main thread computes (MPI gave at least
// MPI_THREAD_SERIALIZED): DataParallel then reduces during backward.
bool background_communication();
}  // namespace detail

}  // namespace ag::dist
