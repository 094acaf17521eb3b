// comm_mpi.c — libftc_mpi.so: the runtime's exchanges over MPI (ftc_mpi.h). Built only where
// an MPI is installed, and loaded by the runtime with dlopen; this is the only file of ftc
// that includes mpi.h. Every exchange is a non-blocking MPI call polled until it completes
// or its deadline passes: a dead or hung rank becomes a timeout the runtime reports, then
// it ends the job with MPI_Abort. Errors are returned (MPI_ERRORS_RETURN), not fatal, so
// that the runtime can say which instruction of which step failed.
#include "ftc_mpi.h"

#include <mpi.h>

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int mpi_fail(int rc, const char *what, char *err, size_t errlen) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    snprintf(err, errlen, "%s: %s", what, text);
    return -1;
}

// Polls `req` until it completes (0), fails (-1) or `timeout_s` passes (1), sleeping a
// little longer between tests as it waits (from 2 µs up to 1 ms).
static int wait_for(MPI_Request *req, double timeout_s, const char *what, char *err, size_t errlen) {
    double end = now_s() + timeout_s;
    long nap = 2000;
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return mpi_fail(rc, what, err, errlen);
        if (done)
            return 0;
        if (now_s() > end) {
            snprintf(err, errlen, "%s: no answer from the other ranks in %.0f s", what, timeout_s);
            return 1;
        }
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        if (nap < 1000000)
            nap *= 2;
    }
}

// `bytes` as a count of a contiguous type (MPI counts are ints): the type to free after,
// or MPI_BYTE; -1 with err when no unit of at most 1 MiB makes the count fit.
static int as_count(int64_t bytes, int *count, MPI_Datatype *type, char *err, size_t errlen) {
    *type = MPI_BYTE;
    if (bytes <= INT_MAX) {
        *count = (int)bytes;
        return 0;
    }
    for (int64_t unit = 1 << 20; unit >= 2; unit /= 2)
        if (bytes % unit == 0 && bytes / unit <= INT_MAX) {
            if (MPI_Type_contiguous((int)unit, MPI_BYTE, type) != MPI_SUCCESS ||
                MPI_Type_commit(type) != MPI_SUCCESS)
                break;
            *count = (int)(bytes / unit);
            return 0;
        }
    snprintf(err, errlen, "%lld bytes per rank cannot be sent as one MPI message", (long long)bytes);
    return -1;
}

static void done_with(MPI_Datatype *type) {
    if (*type != MPI_BYTE)
        MPI_Type_free(type);
}

static int m_init(int *rank, int *size, char *err, size_t errlen) {
    int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS)
        return mpi_fail(rc, "MPI_Init_thread", err, errlen);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}

// An all-gather (each rank's `bytes` into `recv` in rank order) or an all-to-all (the
// r-th `bytes` of `send` to rank r), non-blocking and waited for against the deadline.
static int exchange(bool to_all, const void *send, void *recv, int64_t bytes, double timeout_s, char *err,
                    size_t errlen) {
    int count;
    MPI_Datatype t;
    if (as_count(bytes, &count, &t, err, errlen) != 0)
        return -1;
    MPI_Request req;
    int rc = to_all ? MPI_Ialltoall(send, count, t, recv, count, t, MPI_COMM_WORLD, &req)
                    : MPI_Iallgather(send, count, t, recv, count, t, MPI_COMM_WORLD, &req);
    rc = rc != MPI_SUCCESS ? mpi_fail(rc, to_all ? "MPI_Ialltoall" : "MPI_Iallgather", err, errlen)
                           : wait_for(&req, timeout_s, to_all ? "an all-to-all" : "an all-gather", err, errlen);
    done_with(&t);
    return rc;
}

static int m_allgather(const void *mine, void *all, int64_t bytes, double timeout_s, char *err,
                       size_t errlen) {
    return exchange(false, mine, all, bytes, timeout_s, err, errlen);
}

static int m_alltoall(const void *send, void *recv, int64_t bytes, double timeout_s, char *err,
                      size_t errlen) {
    return exchange(true, send, recv, bytes, timeout_s, err, errlen);
}

static int m_bcast(void *buf, int64_t bytes, int root, double timeout_s, char *err, size_t errlen) {
    int count;
    MPI_Datatype t;
    if (as_count(bytes, &count, &t, err, errlen) != 0)
        return -1;
    MPI_Request req;
    int rc = MPI_Ibcast(buf, count, t, root, MPI_COMM_WORLD, &req);
    rc = rc != MPI_SUCCESS ? mpi_fail(rc, "MPI_Ibcast", err, errlen)
                           : wait_for(&req, timeout_s, "a broadcast", err, errlen);
    done_with(&t);
    return rc;
}

static int m_sum_f64(double *v, int n, double timeout_s, char *err, size_t errlen) {
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
    return rc != MPI_SUCCESS ? mpi_fail(rc, "MPI_Iallreduce", err, errlen)
                             : wait_for(&req, timeout_s, "a sum", err, errlen);
}

static int m_barrier(double timeout_s, char *err, size_t errlen) {
    MPI_Request req;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
    return rc != MPI_SUCCESS ? mpi_fail(rc, "MPI_Ibarrier", err, errlen)
                             : wait_for(&req, timeout_s, "a barrier", err, errlen);
}

static void m_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static void m_finalize(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin)
        MPI_Finalize();
}

static const FtcMpi table = {FTC_MPI_ABI, m_init, m_allgather, m_alltoall, m_bcast, m_sum_f64,
                             m_barrier, m_abort, m_finalize};

__attribute__((visibility("default"))) const FtcMpi *ftc_mpi_open(void) { return &table; }
