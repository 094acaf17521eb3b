// ftc_mpi.h — the interface between the runtime and libftc_mpi.so, the one part of ftc
// linked against MPI. `ftc` never links MPI: a job started by mpirun or srun (or a plan
// for more than one rank) opens the library with dlopen and looks up ftc_mpi_open, so
// ftc starts everywhere, with or without an MPI installed.
//
// Every exchange is non-blocking MPI polled against a deadline, so a rank that died or
// hangs ends the call with a timeout instead of blocking the job for ever. Each call
// returns 0, 1 when `timeout_s` passed first, or -1 with MPI's error in err.
#ifndef FTC_RUNTIME_MPI_H
#define FTC_RUNTIME_MPI_H

#include <stddef.h>
#include <stdint.h>

enum { FTC_MPI_ABI = 1 };

typedef struct FtcMpi {
    int abi;            // FTC_MPI_ABI of the library
    // MPI_Init (thread level multiple where the MPI has it); this process's rank and the
    // job's size.
    int (*init)(int *rank, int *size, char *err, size_t errlen);
    // Every rank's `bytes` (the same on each) into all[rank * bytes ...].
    int (*allgather)(const void *mine, void *all, int64_t bytes, double timeout_s, char *err,
                     size_t errlen);
    // send[q * bytes ...] to rank q, and rank q's into recv[q * bytes ...].
    int (*alltoall)(const void *send, void *recv, int64_t bytes, double timeout_s, char *err,
                    size_t errlen);
    int (*bcast)(void *buf, int64_t bytes, int root, double timeout_s, char *err, size_t errlen);
    // v[0..n) summed over the ranks, in place (doubles: losses, counts, flags).
    int (*sum_f64)(double *v, int n, double timeout_s, char *err, size_t errlen);
    int (*barrier)(double timeout_s, char *err, size_t errlen);
    // Ends every process of the job (MPI_Abort).
    void (*abort)(int code);
    void (*finalize)(void);
} FtcMpi;

typedef const FtcMpi *(*FtcMpiOpenFn)(void);
#define FTC_MPI_OPEN "ftc_mpi_open"

#endif
