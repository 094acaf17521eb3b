// test_dist_cuda.c — the cuda backend as one rank of a job, without GPUs: run under mpirun,
// each rank drives the simulated driver (fake_cuda.c) and the simulated NCCL (fake_nccl.c),
// whose collectives exchange the simulated device bytes over the job's MPI communicator.
//   test_dist_cuda SRC probe   exit 77 where NVRTC is missing (no CUBIN: no simulated GPU)
//   test_dist_cuda SRC train   tiny.ft at ZeRO-2 (two micro-steps a rank) and ZeRO-3 trains
//                              on the cuda backend as on the cpu backend over the same ranks:
//                              every loss within 2e-3, no race between the comm stream and
//                              the others, buckets issued as NCCL groups
//   test_dist_cuda SRC hang    rank 1's collectives stop completing: its backend gives up
//                              after the deadline (3 s), aborts NCCL and ends the job
//   test_dist_cuda SRC error   rank 0's NCCL reports an asynchronous error: the backend
//                              aborts NCCL and ends the job
// In the last two the job is meant to end with an error, which tests/dist_cuda.sh checks.
#include "check.h"
#include "fake_cuda.h"
#include "fake_nccl.h"
#include "harness.h"
#include "../runtime/nvrtc.h"

#include <math.h>

static Comm *comm;

// Runs `steps` steps of the plan on `be` as this rank, fixed tokens (the micro-batch's
// global index in them); the mean loss over the ranks of each step in losses[]. False with
// the error in err.
static bool train(const Plan *p, Backend *be, int steps, double *losses, char *err, size_t errlen) {
    Backend *host = rt_cpu_backend();
    Exec x;
    bool ok = rt_exec_init(&x, p, be, host, LAYOUT_PLANNED, err, errlen) == 0;
    if (ok) {
        rt_exec_set_comm(&x, comm);
        ok = be->collective || rt_comm_prepare(comm, p, err, errlen) == 0;
        x.seed = 7;
        rt_weights_init(&x, 7);
    }
    int64_t n = p->micro_batch * p->seq;
    int32_t *tok = malloc(sizeof *tok * (size_t)n), *tgt = malloc(sizeof *tgt * (size_t)n);
    for (int step = 1; ok && step <= steps; step++) {
        x.step = step;
        double sum = 0;
        for (int64_t m = 0; ok && m < p->accum; m++) {
            x.micro = m * comm->ranks + comm->rank;
            x.last = m == p->accum - 1;
            for (int64_t i = 0; i < n; i++) {
                tok[i] = (int32_t)((i * 31 + x.micro * 7 + step * 3) % p->vocab);
                tgt[i] = (int32_t)((i * 17 + x.micro * 5 + 11) % p->vocab);
            }
            rt_write_raw(&x, plan_role(p, PR_TOKENS)->id, tok);
            rt_write_raw(&x, plan_role(p, PR_TARGETS)->id, tgt);
            ok = rt_exec_phase(&x, PHASE_FWD, err, errlen) == 0 && rt_exec_phase(&x, PHASE_BWD, err, errlen) == 0;
            float l = NAN;
            if (ok)
                rt_read_f32(&x, plan_role(p, PR_LOSS)->id, &l);
            sum += l;
        }
        ok = ok && rt_comm_sum(comm, &sum, 1, err, errlen) == 0 && rt_exec_phase(&x, PHASE_OPT, err, errlen) == 0;
        losses[step - 1] = sum / (double)(p->accum * comm->ranks);
    }
    free(tok), free(tgt);
    if (x.plan)
        rt_exec_free(&x);
    host->destroy(host);
    return ok;
}

// The "memory" case: the device holds the arena and the start-up margin with this much to
// spare (-1: 40 GiB in all), and NCCL's communicator takes nccl_takes of it.
static int64_t spare = -1, nccl_takes;

static FakeOptions options(const Harness *h) {
    FakeOptions o = {.plan_dir = h->dir, .cc_major = 8, .cc_minor = 0, .total_bytes = 40ll << 30,
                     .context_bytes = 500ll << 20};
    if (spare >= 0)
        o.total_bytes = (int64_t)h->plan->arena_bytes[ARENA_DEVICE] + o.context_bytes + (64ll << 20) + spare;
    return o;
}

// The cuda backend over the simulated driver and NCCL, joined to the job; NULL with err.
static Backend *cuda(Harness *h, char *err, size_t errlen) {
    CudaApi api;
    NcclApi nccl;
    FakeOptions o = options(h);
    if (fake_cuda_open(&api, &o, err, errlen) != 0)
        return NULL;
    fake_nccl_open(&nccl, comm);
    fake_nccl_memory(nccl_takes);
    // (each rank's process sees one GPU, as under a launcher that binds one to each rank)
    Backend *be = rt_cuda_backend(h->dir, h->plan, &api, rt_launch_local_rank(), err, errlen);
    if (be && rt_cuda_set_comm(be, comm, &nccl, err, errlen) != 0) {
        be->destroy(be);
        be = NULL;
    }
    return be;
}

static bool compile(Harness *h, int zero, int64_t micro) {
    harness_arch = "sm_80";
    harness_ranks = comm->ranks;
    PlanChoice c = {.micro = micro, .policy = REMAT_KEEP, .rest = REMAT_KEEP, .zero = zero, .bucket_bytes = 64 << 10};
    bool ok = harness_compile_choice(h, "models/tiny.ft", harness_file("models/tiny.ft"), &c);
    harness_arch = NULL;
    return ok;
}

static void trains_like_cpu(int zero, int64_t micro) {
    enum { STEPS = 4 };
    Harness h;
    char err[1024] = "";
    bool ok = compile(&h, zero, micro);
    CHECK(ok);
    double gpu[STEPS], cpu[STEPS];
    Backend *be = ok ? cuda(&h, err, sizeof err) : NULL;
    CHECKF(be != NULL, "ZeRO-%d: %s", zero, err);
    if (!be) {
        harness_free(&h);
        return;
    }
    ok = train(h.plan, be, STEPS, gpu, err, sizeof err);
    CHECKF(ok, "ZeRO-%d on cuda: %s", zero, err);
    be->destroy(be);
    Backend *ref = rt_cpu_backend();
    bool rok = train(h.plan, ref, STEPS, cpu, err, sizeof err);
    CHECKF(rok, "ZeRO-%d on cpu: %s", zero, err);
    ref->destroy(ref);
    double worst = 0;
    for (int i = 0; ok && rok && i < STEPS; i++)
        worst = fmax(worst, fabs(gpu[i] - cpu[i]));
    const FakeStats *st = fake_cuda_stats();
    const FakeNcclStats *ns = fake_nccl_stats();
    if (comm->rank == 0)
        printf("  ZeRO-%d, micro-batch %lld x %lld: worst loss difference %.2g over %d steps; %d "
               "NCCL collectives in %d groups, %d waits, %d host syncs\n",
               zero, (long long)micro, (long long)h.plan->accum, worst, STEPS, ns->calls, ns->groups,
               st->waits, st->host_syncs);
    CHECKF(ok && rok && worst < 2e-3, "ZeRO-%d: loss %g (cuda) vs %g (cpu) at step 1", zero, gpu[0], cpu[0]);
    CHECKF(st->races == 0, "ZeRO-%d: %s", zero, st->first_race);
    CHECK(ns->calls > 0 && ns->exchanged == ns->calls && ns->groups > 0 && st->waits > 0);
    fake_cuda_close();
    harness_free(&h);
}

// The simulated NCCL rounds bf16 at every hop of its ring, as NCCL does: 1 + 2^-8 + 2^-8 is
// 1 over three ranks (each half-ulp addition a tie, to even), where one rounding at the end
// gives 1 + 2^-7; in fp32 both are exact.
static void nccl_rounds_per_hop(void) {
    float v[3] = {1.0f, 0x1p-8f, 0x1p-8f};
    CHECK_EQ(1.0, (double)fake_nccl_ring_sum(NCCLX_BFLOAT16, v, 3, 2));
    CHECK_EQ(1.0 + 0x1p-7, (double)fake_nccl_ring_sum(NCCLX_FLOAT32, v, 3, 2));
    CHECK_EQ(1.0, (double)fake_nccl_ring_sum(NCCLX_BFLOAT16, v, 2, 1));
}

// A fault on one rank: the backend must end the run with `want` in its error, in bounded time.
static int fault(FakeNcclFault kind, int rank, const char *want) {
    Harness h;
    char err[1024] = "";
    if (!compile(&h, 3, 4))
        return 1;
    Backend *be = cuda(&h, err, sizeof err);
    if (!be)
        return fprintf(stderr, "rank %d: %s\n", comm->rank, err), 1;
    if (comm->rank == rank)
        fake_nccl_fault(kind, 3);
    double losses[4];
    bool ok = train(h.plan, be, 4, losses, err, sizeof err);
    fprintf(stderr, "rank %d: %s%s\n", comm->rank, ok ? "trained" : "error: ", ok ? "" : err);
    if (!ok && strstr(err, want) && fake_nccl_stats()->aborted)
        fprintf(stderr, "rank %d: the fault was detected and NCCL aborted\n", comm->rank);
    rt_comm_abort(comm, 3);   // (as ftc run does: the job ends)
    return 1;
}

// NCCL's communicator takes more than the device had to spare after the start-up check:
// the backend says so before the arena, naming what NCCL took.
static int nccl_memory(void) {
    Harness h;
    char err[1024] = "";
    if (!compile(&h, 0, 4))
        return 1;
    spare = 0, nccl_takes = (64ll << 20) + h.plan->arena_bytes[ARENA_DEVICE] / 2;   // half the arena short
    Backend *be = cuda(&h, err, sizeof err);
    double losses[1];
    bool ok = be && train(h.plan, be, 1, losses, err, sizeof err);
    fprintf(stderr, "rank %d: %s%s\n", comm->rank, ok ? "trained" : "error: ", ok ? "" : err);
    if (be)
        be->destroy(be);
    fake_cuda_close();   // (which checks the teardown after the refusal named no stream or event never made)
    harness_free(&h);
    return ok ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 3 || chdir(argv[1]) != 0)
        return 2;
    if (!rt_nvrtc_available(NULL)) {   // no CUBIN can be made, so no simulated GPU either
        printf("skip: NVRTC not found: %s\n", rt_nvrtc_load_error());
        return 77;
    }
    if (!strcmp(argv[2], "probe"))
        return 0;
    char err[1024];
    // the rank that detects a hang first (3 s) ends the job before the other's deadline
    int launched, ranks;
    const char *launcher;
    rt_launch_env(&launched, &ranks, &launcher);
    bool hang = !strcmp(argv[2], "hang");
    comm = rt_comm_open(ranks, hang && launched == 1 ? 3 : 30, err, sizeof err);
    if (!comm || comm->ranks < 2)
        return printf("FAIL: %s\n", comm ? "not started by mpirun with 2 ranks or more" : err), 1;
    int rc;
    if (hang)
        rc = fault(FAKE_NCCL_HANG, 1, "a collective did not complete in 3 s");
    else if (!strcmp(argv[2], "error"))
        rc = fault(FAKE_NCCL_ERROR, 0, "NCCL: remote process exited or there was a network error");
    else if (!strcmp(argv[2], "memory"))
        rc = nccl_memory();
    else {
        RUN_NAMED("nccl-rounds-per-hop", nccl_rounds_per_hop());
        RUN_NAMED("zero-2-accumulating", trains_like_cpu(2, 2));
        RUN_NAMED("zero-3", trains_like_cpu(3, 4));
        rc = CHECK_DONE();
    }
    rt_comm_close(comm);
    return rc;
}
