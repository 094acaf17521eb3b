// comm.h — the communicator of a data-parallel job: which rank this process is, and how
// ranks exchange bytes. One process alone needs nothing; a job started by mpirun or srun
// opens libftc_mpi.so (mpi/ftc_mpi.h) with dlopen. The plan's collectives on memory the
// CPU can address (the cpu and emu backends) run here, over MPI; on GPUs the cuda backend
// runs them with NCCL on its comm stream and uses this only to bootstrap NCCL and for the
// runtime's own exchanges (the step's loss, saving, checkpoints).
//
// Sums are exact to a fixed order: each element is summed in fp32 over the ranks in rank
// order and rounded to its dtype once, whatever the collective (an all-reduce and a
// reduce-scatter of the same tensor agree bit for bit). Every exchange has a deadline: a
// rank that died or hangs turns into an error naming what waited, never a hang.
#ifndef FTC_RUNTIME_COMM_H
#define FTC_RUNTIME_COMM_H

#include "runtime.h"

struct Comm {
    int rank, ranks;
    double timeout_s;           // how long an exchange may wait for the other ranks
    const char *launcher;       // "mpirun", "srun", or NULL (one process)
    const struct FtcMpi *mpi;   // NULL: one process
    void *lib;                  // libftc_mpi.so
    unsigned char *scratch;     // staging for the largest bucket (rt_comm_prepare)
    size_t cap;
};

enum { COMM_DEFAULT_TIMEOUT_S = 600 };

// What the launcher says of this process: its rank and the job's size (Open MPI's and
// MPICH's mpirun, Slurm's srun; PMIx), and the launcher's name; rank 0 of 1 and NULL
// when no launcher started it.
void rt_launch_env(int *rank, int *ranks, const char **launcher);
// This process's rank among those of the job on its machine (its GPU: one process a GPU).
int rt_launch_local_rank(void);
// The communicator of a job of `ranks` ranks (the plan's): this process alone when that is
// 1 and no launcher started more; else MPI, through libftc_mpi.so ($FTC_MPI_LIB, else
// beside the ftc binary, else ../lib/ftc/ from it, else the library path). NULL with err
// when the launcher started another number of ranks, or MPI cannot be had.
Comm *rt_comm_open(int ranks, double timeout_s, char *err, size_t errlen);
// Sizes the staging for the largest bucket of collectives in p; -1 with err.
int rt_comm_prepare(Comm *c, const Plan *p, char *err, size_t errlen);
// Runs collective `in` (the first of its bucket: the whole bucket) on the executor's
// buffers, memory the CPU addresses; -1 with err. A NULL comm is one process.
int rt_comm_collective(Comm *c, Exec *x, const PlanInstr *in, char *err, size_t errlen);
// The runtime's own exchanges (blocking, with the deadline): v summed over the ranks; a
// broadcast from `root`; every rank's `bytes` into all[rank * bytes]; a barrier.
int rt_comm_sum(Comm *c, double *v, int n, char *err, size_t errlen);
int rt_comm_bcast(Comm *c, void *buf, int64_t bytes, int root, char *err, size_t errlen);
int rt_comm_allgather(Comm *c, const void *mine, void *all, int64_t bytes, char *err, size_t errlen);
int rt_comm_barrier(Comm *c, char *err, size_t errlen);
// Ends every rank of the job with `code` (MPI_Abort); returns only for one process.
void rt_comm_abort(Comm *c, int code);
void rt_comm_close(Comm *c);

#endif
