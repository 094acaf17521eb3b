// fake_nccl.h — a simulated NCCL behind nccl.h's table, over the simulated driver
// (fake_cuda.h), for the cuda backend in a job of several ranks without GPUs: each
// collective is a host operation on its stream that, when the stream reaches it, exchanges
// the simulated device bytes through the job's communicator (comm.h, MPI) and sums each
// element over the ranks as a ring does: in ring order from its chunk's first rank, the
// partial sum stored in the collective's dtype at every hop (bf16 rounded R - 1 times). A
// bucket's calls between group start and end are counted as one group.
#ifndef FTC_TEST_FAKE_NCCL_H
#define FTC_TEST_FAKE_NCCL_H

#include "../runtime/cuda/nccl.h"
#include "../runtime/comm.h"

typedef enum FakeNcclFault {
    FAKE_NCCL_OK,
    FAKE_NCCL_HANG,         // from the n-th collective on, none completes (a peer gone quiet)
    FAKE_NCCL_ERROR,        // the n-th collective fails: the asynchronous error is a remote one
} FakeNcclFault;

typedef struct FakeNcclStats {
    int calls, groups;      // collectives issued, and the groups they came in
    int exchanged;          // collectives that ran
    int aborted;            // communicators aborted
} FakeNcclStats;

// The sum a ring makes of one element's values v[0..R) (each already in `dtype`): from rank
// j + 1 around to rank j, stored in the dtype at every hop.
float fake_nccl_ring_sum(int dtype, const float *v, int R, int j);
// Fills `api` with the simulation over the job's communicator c.
void fake_nccl_open(NcclApi *api, Comm *c);
// Device memory each communicator takes from the simulated GPU when it is made (0 unless set).
void fake_nccl_memory(int64_t bytes);
// From this rank's n-th collective (1-based) on, `fault`.
void fake_nccl_fault(FakeNcclFault fault, int n);
const FakeNcclStats *fake_nccl_stats(void);

#endif
