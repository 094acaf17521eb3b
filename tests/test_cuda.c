// test_cuda.c — the cuda backend without a GPU: its host-side logic run against a
// simulated driver (fake_cuda.c), which executes the plan's own kernels on the CPU,
// computes cuBLASLt's GEMMs from their descriptors, runs every stream as late as a GPU
// might and reports any operation that runs unordered with an earlier one touching its
// bytes. Checked: tiny.ft trains on it as on the cpu backend (kept on the device; with
// swapped activations, offloaded gradients and CPU AdamW on the host stream; with the
// weights streamed from the host, full and QLoRA), without a race; dropping the backend's stream waits is caught; kernels launch in plan order; a
// GPU of another architecture gets kernels.cu compiled by NVRTC; a plan too large for the
// free memory is refused before anything is allocated, with the budget to re-plan for;
// resuming from a checkpoint zeroes the gradients on the device; the phases captured as
// CUDA graphs and replayed compute the bits of the same run launched one by one.
#include "check.h"
#include "../runtime/fileio.h"
#include "fake_cuda.h"
#include "harness.h"
#include "../runtime/nvrtc.h"

#include <math.h>

static const char *tiny(void) { return harness_file("models/tiny.ft"); }

// Runs `steps` optimizer steps of the plan on `be` from seed 7 with fixed tokens; the
// mean loss of each step in losses[]. False after printing why.
// --profile's timing, when set: from the second step on (test_profile).
static Profile *train_profile;
static bool train_tune;                 // train() times cuBLASLt's candidates first ...
static char train_note[2048];           // ... and keeps what rt_cuda_tune_gemms said
static int train_tune_gemms;            // with the GEMMs the simulated GPU ran for it

static char train_err[1024];   // why the last train() stopped ("" when it did not)
static bool train_eager;       // train() issues every phase launch by launch (no graphs)

static bool train(const Plan *p, Backend *be, int steps, double *losses, double *evals, bool poison) {
    char err[1024];
    Backend *host = rt_cpu_backend();
    Exec x;
    bool ok = rt_exec_init(&x, p, be, host, LAYOUT_PLANNED, err, sizeof err) == 0;
    if (ok && train_tune) {
        int before = fake_cuda_stats()->gemms;
        rt_cuda_tune_gemms(be, &x, train_note, sizeof train_note);
        train_tune_gemms = fake_cuda_stats()->gemms - before;
    }
    if (ok) {
        x.poison = poison;
        x.graphs = !train_eager;
        x.seed = 7;
        rt_weights_init(&x, 7);
    }
    int64_t n = p->micro_batch * p->seq;
    int32_t *tok = malloc(sizeof *tok * (size_t)n), *tgt = malloc(sizeof *tgt * (size_t)n);
    for (int step = 1; ok && step <= steps; step++) {
        if (step == 2 && train_profile)
            rt_profile_on(&x, train_profile, true);
        x.step = step;
        x.lr = rt_lr_at(p, step);
        losses[step - 1] = 0;
        for (int64_t m = 0; ok && m < p->accum; m++) {
            x.micro = m;
            x.last = m == p->accum - 1;
            for (int64_t i = 0; i < n; i++) {
                tok[i] = (int32_t)((i * 31 + m * 7 + step * 3) % p->vocab);
                tgt[i] = (int32_t)((i * 17 + m * 5 + 11) % p->vocab);
            }
            rt_write_raw(&x, plan_role(p, PR_TOKENS)->id, tok);
            rt_write_raw(&x, plan_role(p, PR_TARGETS)->id, tgt);
            rt_write_positions(&x, NULL);
            rt_write_target_count(&x, n * p->accum);   // every target of the step trained
            ok = rt_exec_phase(&x, PHASE_FWD, err, sizeof err) == 0 &&
                 rt_exec_phase(&x, PHASE_BWD, err, sizeof err) == 0;
            float l = NAN;
            if (ok)
                rt_read_f32(&x, plan_role(p, PR_LOSS)->id, &l);
            losses[step - 1] += l;   // each micro-step's share of the step's mean
        }
        ok = ok && rt_exec_phase(&x, PHASE_OPT, err, sizeof err) == 0;
        double norm;
        bool bad = false;
        if (ok && rt_grad_stats(&x, &norm, &bad) && bad)
            x.skipped++;
        if (ok && p->scale_init > 0)   // fp16: the loss scale moves as the training loop moves it
            rt_scale_update(&x, bad);
        // The eval phase after the last step, on a batch of its own.
        evals[step - 1] = 0;
        if (step < steps)
            continue;
        for (int64_t i = 0; i < n; i++) {
            tok[i] = (int32_t)((i * 13 + step * 5) % p->vocab);
            tgt[i] = (int32_t)((i * 7 + 3) % p->vocab);
        }
        rt_write_raw(&x, plan_role(p, PR_TOKENS)->id, tok);
        rt_write_raw(&x, plan_role(p, PR_TARGETS)->id, tgt);
        rt_write_positions(&x, NULL);
        rt_write_target_count(&x, n);
        ok = ok && rt_exec_phase(&x, PHASE_EVAL, err, sizeof err) == 0;
        float e = NAN;
        if (ok)
            rt_read_f32(&x, plan_role(p, PR_EVAL_LOSS)->id, &e);
        evals[step - 1] = e;
    }
    if (!ok)
        printf("  %s: %s\n", be->name, err);
    snprintf(train_err, sizeof train_err, "%s", ok ? "" : err);
    free(tok), free(tgt);
    if (x.plan)
        rt_exec_free(&x);
    host->destroy(host);
    return ok;
}

static FakeOptions options(const Harness *h) {
    return (FakeOptions){.plan_dir = h->dir, .cc_major = 8, .cc_minor = 0,
                         .total_bytes = 40339ll << 20, .context_bytes = 500ll << 20};   // an A100-40GB's
}

static char last_device[1024];   // trains_like_cpu's GPU, as rt_cuda_describe says
static FakeStats last_stats;      // and the simulated driver's counts
static int last_fill_waits;       // and its poison fills of pinned memory that waited for
static int last_pinned_fills, last_fills_queued;   // host work, of all, of those with some queued

// The plan on the simulated GPU against the cpu backend: every loss within 2e-3 (GEMMs
// sum in another order), and no race.
static void trains_like_cpu(Harness *h, const FakeOptions *o, int steps, const char *what,
                            bool streams) {
    enum { MAX_STEPS = 16 };
    double gpu[MAX_STEPS], cpu[MAX_STEPS], egpu[MAX_STEPS], ecpu[MAX_STEPS];
    CudaApi api;
    char err[1024];
    if (fake_cuda_open(&api, o, err, sizeof err) != 0) {
        printf("  %s: %s\n", what, err);
        CHECK(!"the simulated driver opens");
        return;
    }
    Backend *be = rt_cuda_backend(h->dir, h->plan, &api, 0, err, sizeof err);
    CHECKF(be != NULL, "%s: %s", what, err);
    if (!be)
        return;
    Backend *ref = rt_cpu_backend();
    bool ok = train(h->plan, be, steps, gpu, egpu, true) && train(h->plan, ref, steps, cpu, ecpu, true);
    rt_cuda_describe(be, last_device, sizeof last_device);
    last_fill_waits = rt_cuda_fill_waits(be, &last_pinned_fills, &last_fills_queued);
    be->destroy(be);
    ref->destroy(ref);
    CHECK(ok);
    double worst = 0, eworst = 0;
    for (int i = 0; ok && i < steps; i++) {
        worst = fmax(worst, fabs(gpu[i] - cpu[i]));
        eworst = fmax(eworst, fabs(egpu[i] - ecpu[i]));
    }
    const FakeStats *st = fake_cuda_stats();
    printf("  %-28s %d steps: worst loss difference %.2g (eval %.2g); %d launches (%d grouped), %d GEMMs, "
           "%d copies, %d waits, %d host syncs (%d of the whole device)\n",
           what, steps, worst, eworst, st->launches, st->group_launches, st->gemms, st->copies, st->waits,
           st->host_syncs, st->ctx_syncs);
    CHECKF(ok && worst < 2e-3, "%s: loss %g (cuda) vs %g (cpu) at step 1", what, gpu[0], cpu[0]);
    CHECKF(ok && eworst < 2e-3, "%s: eval loss %g (cuda) vs %g (cpu) after step 1", what, egpu[0], ecpu[0]);
    CHECKF(st->races == 0, "%s: %s", what, st->first_race);
    CHECK(st->launches > 0 && st->gemms > 0);
    if (streams)   // copies both ways, waits across streams, the host worker waiting
        CHECK(st->copies > 0 && st->waits > 0 && st->host_syncs > steps * 3);
    else           // the optimizer on the device, many tensors a launch
        CHECK(st->group_launches > 0);
    last_stats = *st;
    last_stats.launch_log = NULL;
    fake_cuda_close();
}

// tiny.ft's plan with its CUBIN for sm_80 (the simulated GPU's SM): micro-batch 8, or
// the choice c.
static bool compile_tiny(Harness *h, const PlanChoice *c) {
    harness_arch = "sm_80";
    bool ok = c ? harness_compile_choice(h, "models/tiny.ft", tiny(), c)
                : harness_compile(h, "models/tiny.ft", tiny(), 8);
    harness_arch = NULL;
    return ok;
}

static void test_device_resident(void) {
    Harness h;
    bool ok = compile_tiny(&h, NULL);
    CHECK(ok);
    if (ok) {
        FakeOptions o = options(&h);
        trains_like_cpu(&h, &o, 6, "tiny, on the device", false);
        // the batch's writes wait for their staging slot, not for the device (216 of the 217
        // host syncs drained it when each write did)
        CHECKF(last_stats.ctx_syncs * 3 < last_stats.host_syncs, "%d of %d host syncs drain the device",
               last_stats.ctx_syncs, last_stats.host_syncs);
        CHECK_EQ(0, last_stats.ctx_flags);   // no host work: the driver's own scheduling
        CHECK_EQ(-5, last_stats.top_priority);   // the comm stream, first in line
        CHECK_EQ(STREAM_COMM - (STREAM_HOST < STREAM_COMM), last_stats.top_priority_stream);   // (no host stream made)
    }
    harness_free(&h);
}

// fp16 on the device with its loss scale (overflowing at first, then backed off), a
// schedule and clipping (bf16_pure's kernels are checked one by one: kernels-cuda-sim).
static void test_precisions(void) {
    static const char *const with[][2] = {
        {"fp16\n  grad_scaler(init_scale = 524288)\n  clip = 0.5\n  lr_schedule = cosine\n  steps = 4",
         "tiny fp16, loss scale, clip"},
    };
    for (size_t i = 0; i < sizeof with / sizeof with[0]; i++) {
        char text[8192];
        const char *t = tiny(), *at = strstr(t, "precision = bf16");
        snprintf(text, sizeof text, "%.*sprecision = %s%s", (int)(at - t), t, with[i][0],
                 at + strlen("precision = bf16"));
        Harness h;
        harness_arch = "sm_80";
        bool ok = harness_compile(&h, with[i][1], text, 8);
        harness_arch = NULL;
        CHECK(ok);
        if (ok) {
            FakeOptions o = options(&h);
            trains_like_cpu(&h, &o, 4, with[i][1], false);
        }
        harness_free(&h);
    }
}

// Swapped activations, gradients and AdamW on the host: copies on d2h/h2d, host work on
// the worker thread, events both ways.
static PlanChoice offloaded(void) {
    return (PlanChoice){.micro = 4, .policy = REMAT_SWAP, .n_policy = 1 << 20, .rest = REMAT_SWAP,
                        .offload = {.optimizer = true, .grads = true}};
}

static void test_offloaded(void) {
    Harness h;
    PlanChoice c = offloaded();
    bool ok = compile_tiny(&h, &c);
    CHECK(ok);
    if (ok) {
        FakeOptions o = options(&h);
        trains_like_cpu(&h, &o, 4, "tiny, swapped and offloaded", true);
        // The poison of dead pinned memory waits for host instructions on that memory only,
        // not for the whole host queue (which the host AdamW keeps busy).
        printf("  poison fills of pinned memory: %d; %d issued with host work queued; %d waited for it\n",
               last_pinned_fills, last_fills_queued, last_fill_waits);
        CHECK(last_pinned_fills > 0 && last_fills_queued > 0 && last_fill_waits < last_fills_queued);
        // AdamW on the host: the host's threads wait for the GPU asleep, not spinning
        CHECK_EQ(CUX_CTX_SCHED_BLOCKING_SYNC, last_stats.ctx_flags);
    }
    harness_free(&h);
}

// AdamW8bit: its update on the device (the generated kernels: 8-bit blocks, grouped where
// the tensors have whole blocks), and on the host (the worker thread's cpu kernels) with
// the moments' codes and absmaxes in pinned memory.
static void test_adamw8bit(void) {
    char text[8192];
    const char *t = tiny(), *at = strstr(t, "optimizer = adamw(");
    snprintf(text, sizeof text, "%.*soptimizer = adamw8bit(%s", (int)(at - t), t, at + strlen("optimizer = adamw("));
    for (int host = 0; host < 2; host++) {
        Harness h;
        PlanChoice c = offloaded(), dev = {.micro = 8, .policy = REMAT_KEEP, .rest = REMAT_KEEP};
        harness_arch = "sm_80";
        bool ok = harness_compile_choice(&h, "tiny adamw8bit", text, host ? &c : &dev);
        harness_arch = NULL;
        CHECK(ok);
        if (ok) {
            FakeOptions o = options(&h);
            trains_like_cpu(&h, &o, 4, host ? "tiny adamw8bit, on the host" : "tiny adamw8bit, on the device",
                            host);
        }
        harness_free(&h);
    }
}

// tiny.ft with `lines` added to its train section after the optimizer line, into text.
static bool tiny_with(const char *lines, char *text, size_t cap) {
    snprintf(text, cap, "%s", tiny());
    char *opt = strstr(text, "  optimizer =");
    char *eol = opt ? strchr(opt, '\n') : NULL;
    if (!eol)
        return false;
    char rest[4096];
    snprintf(rest, sizeof rest, "%s", eol + 1);
    snprintf(eol + 1, cap - (size_t)(eol + 1 - text), "%s%s", lines, rest);
    return true;
}

// The weight matrices streamed from pinned host memory a block ahead of their use (full
// fine-tuning: every one, CPU AdamW updating them where they live; QLoRA: the NF4 bases and
// their scales, dequantised on the device from their copies), without a race.
static void test_streamed(void) {
    Harness h;
    PlanChoice c = {.micro = 4, .policy = REMAT_SWAP, .n_policy = 1 << 20, .rest = REMAT_SWAP,
                    .offload = {.optimizer = true, .grads = true, .weights = true}};
    bool ok = compile_tiny(&h, &c);
    CHECK(ok);
    if (ok) {
        FakeOptions o = options(&h);
        trains_like_cpu(&h, &o, 4, "tiny, weights streamed", true);
    }
    harness_free(&h);
    char text[8192];
    bool made = tiny_with("  lora(r = 4, alpha = 8, targets = [wq, wv])\n  quantize(nf4, double_quant = true)\n",
                          text, sizeof text);
    CHECK(made);
    if (!made)
        return;
    c.policy = c.rest = REMAT_KEEP;
    harness_arch = "sm_80";
    ok = harness_compile_choice(&h, "models/tiny.ft", text, &c);
    harness_arch = NULL;
    CHECK(ok);
    if (ok) {
        FakeOptions o = options(&h);
        trains_like_cpu(&h, &o, 4, "tiny QLoRA, bases streamed", true);
    }
    harness_free(&h);
}

// Without its cuStreamWaitEvent calls the same run (poison off: only the plan's events
// order the streams) has races, which the simulator names: the check can fail.
static void test_missing_waits_caught(void) {
    Harness h;
    PlanChoice c = offloaded();
    bool ok = compile_tiny(&h, &c);
    CHECK(ok);
    CudaApi api;
    char err[1024];
    FakeOptions o = options(&h);
    o.ignore_waits = true;
    if (ok && fake_cuda_open(&api, &o, err, sizeof err) == 0) {
        Backend *be = rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err);
        double loss[2], evals[2];
        if (be) {
            train(h.plan, be, 2, loss, evals, false);
            be->destroy(be);
        }
        const FakeStats *st = fake_cuda_stats();
        printf("  without waits: %d races; the first: %s\n", st->races, st->first_race);
        CHECK(st->races > 0 && strstr(st->first_race, "had not"));
        fake_cuda_close();
    }
    harness_free(&h);
}

// One step's launches, in issue order, are the plan's compute-stream launches in order
// (a grouped launch once, at its first instruction).
static void test_launch_order(void) {
    Harness h;
    bool ok = compile_tiny(&h, NULL);
    CudaApi api;
    char err[1024];
    FakeOptions o = options(&h);
    if (ok && fake_cuda_open(&api, &o, err, sizeof err) == 0) {
        Backend *be = rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err);
        Backend *host = rt_cpu_backend();
        Exec x;
        ok = be && rt_exec_init(&x, h.plan, be, host, LAYOUT_PLANNED, err, sizeof err) == 0;
        char *want = calloc(1, 1 << 20);
        size_t used = 0;
        for (int ph = 0; ok && ph < PHASE_COUNT; ph++)
            for (int i = 0; i < h.plan->nins[ph]; i++)
                for (int l = 0; l < h.plan->ins[ph][i].nlaunch; l++)
                    used += (size_t)snprintf(want + used, (1 << 20) - used, "%s\n",
                                             h.plan->ins[ph][i].launch[l].name);
        if (ok) {
            x.step = 1;
            rt_weights_init(&x, 3);
            fake_cuda_reset_log();
            for (int ph = 0; ok && ph < PHASE_COUNT; ph++)
                ok = rt_exec_phase(&x, (PlanPhase)ph, err, sizeof err) == 0;
        }
        const char *got = fake_cuda_stats()->launch_log;
        CHECKF(ok && got && strcmp(got, want) == 0, "%s", ok ? "launches out of plan order" : err);
        if (x.plan)
            rt_exec_free(&x);
        free(want);
        if (be)
            be->destroy(be);
        host->destroy(host);
        fake_cuda_close();
    }
    CHECK(ok);
    harness_free(&h);
}

// A GPU of another architecture than the plan's CUBIN: kernels.cu is compiled for it.
static void test_other_architecture(void) {
    Harness h;
    bool ok = harness_compile(&h, "models/tiny.ft", tiny(), 8);   // no CUBIN at all
    CHECK(ok);
    if (ok) {
        FakeOptions o = options(&h);
        o.cc_major = 9;
        trains_like_cpu(&h, &o, 2, "tiny, sm_90 from kernels.cu", false);
        CHECKF(strstr(last_device, "kernels: kernels.cu compiled by NVRTC for sm_90"), "%s", last_device);
        // A GPU newer than this NVRTC knows: PTX for the newest virtual architecture it has.
        o.cc_major = 13;
        trains_like_cpu(&h, &o, 2, "tiny, sm_130 from PTX", false);
        CHECKF(strstr(last_device, "kernels: kernels.cu as PTX for compute_120"), "%s", last_device);
        // A driver older than NVRTC, which refuses what it makes: said, with the remedies.
        o.cc_major = 8, o.driver_version = 12080;
        CudaApi api;
        char err[1024];
        if (fake_cuda_open(&api, &o, err, sizeof err) == 0) {
            Backend *be = rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err);
            if (be && be->prepare(be, h.plan, 0, err, sizeof err) != 0) {
                be->destroy(be);
                be = NULL;
            }
            printf("  driver 12.8: %s\n", be ? "loaded" : err);
            CHECKF(!be && strstr(err, "driver 12.8") && strstr(err, "CUDA error 222") && strstr(err, "FTC_NVRTC"),
                   "%s", err);
            if (be)
                be->destroy(be);
            fake_cuda_close();
        }
        // sm_86 takes the plan's sm_80 CUBIN, not a compile of its own.
        char *src = NULL, path[600];
        size_t len = 0;
        snprintf(path, sizeof path, "%s/kernels.cu", h.dir);
        src = rt_read_whole(path, &len);
        const char *opts[] = {"--fmad=false"};
        NvrtcResult r = {0};
        if (src && rt_nvrtc_compile_cached(NULL, src, "kernels.cu", "sm_80", opts, 1, &r, err, sizeof err) == 0) {
            snprintf(path, sizeof path, "%s/kernels.sm_80.cubin", h.dir);
            FILE *f = fopen(path, "wb");
            CHECK(f && fwrite(r.cubin, 1, r.cubin_bytes, f) == r.cubin_bytes && fclose(f) == 0);
            o = options(&h);
            o.cc_minor = 6;
            trains_like_cpu(&h, &o, 2, "tiny, sm_86, the plan's sm_80", false);
            CHECKF(strstr(last_device, "kernels: the plan's kernels.sm_80.cubin"), "%s", last_device);
        } else {
            CHECKF(0, "%s", err);
        }
        rt_nvrtc_result_free(&r);
        free(src);
        // Below compute capability 8.0 (no bf16 tensor cores): refused, saying so.
        o = options(&h);
        o.cc_major = 7, o.cc_minor = 5;
        if (fake_cuda_open(&api, &o, err, sizeof err) == 0) {
            Backend *be = rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err);
            printf("  compute capability 7.5: %s\n", be ? "opened" : err);
            CHECKF(!be && strstr(err, "compute capability 7.5") && strstr(err, "8.0 or later"), "%s", err);
            if (be)
                be->destroy(be);
            fake_cuda_close();
        }
    }
    harness_free(&h);
}

// Preflight: a plan larger than the free memory is refused before any allocation, naming
// both figures and the budget to re-plan with.
static void test_preflight(void) {
    Harness h;
    bool ok = compile_tiny(&h, NULL);
    CudaApi api;
    char err[1024] = "";
    FakeOptions o = options(&h);
    o.total_bytes = (int64_t)h.plan->arena_bytes[ARENA_DEVICE] + o.context_bytes + (63ll << 20);
    h.plan->reserve_bytes = 512ll << 20;   // as a preset's: the planner's context reserve
    if (ok && fake_cuda_open(&api, &o, err, sizeof err) == 0) {
        Backend *be = rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err);
        CHECK(be == NULL);
        printf("  refused: %s\n", err);
        char budget[64];   // what is free, less the margin, plus the reserve
        snprintf(budget, sizeof budget, "--budget %lldM",
                 (long long)((h.plan->arena_bytes[ARENA_DEVICE] + (63ll << 20) - (64ll << 20) +
                              h.plan->reserve_bytes) >> 20));
        CHECKF(strstr(err, "of device memory") && strstr(err, "free of") && strstr(err, budget),
               "want %s", budget);
        if (be)
            be->destroy(be);
        fake_cuda_close();
    }
    CHECK(ok);
    harness_free(&h);
}

// Card totals (issue 33, item 6): the driver reports less than nvidia-smi's figure, the
// preset's memory, and the context takes its share before the plan's start-up check. For
// each preset, a plan that fills its budget exactly (arena + the preset's reserve = the card)
// on a simulated card whose driver reports the total its users publish (the figures below,
// gpu.c's sources; not read from the preset, which must agree with them) and whose context
// takes 500 MiB: it starts. With the old flat 512 MiB reserve every one of them was refused.
static void test_card_totals(void) {
    static const struct { const char *name; int64_t driver_mib; } cards[] = {
        {"a100-40g", 40339}, {"a100-80g", 81050}, {"h100-80g", 81079},
        {"h200", 143155},    {"l4", 22702},       {"rtx4090", 24218},
    };
    Harness h;
    bool ok = compile_tiny(&h, NULL);
    for (size_t i = 0; ok && i < sizeof cards / sizeof cards[0]; i++) {
        const GpuPreset *g = gpu_preset(cards[i].name);
        CHECKF(g && g->driver_bytes <= cards[i].driver_mib << 20, "%s", cards[i].name);
        if (!g)
            continue;
        h.plan->reserve_bytes = g->reserve_bytes;
        int64_t card = (int64_t)h.plan->arena_bytes[ARENA_DEVICE] + g->reserve_bytes;
        FakeOptions o = options(&h);
        o.total_bytes = card - (g->mem_bytes - (cards[i].driver_mib << 20));
        CudaApi api;
        char err[1024] = "";
        if (fake_cuda_open(&api, &o, err, sizeof err) != 0)
            break;
        Backend *be = rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err);
        if (be)
            CHECKF(be->prepare(be, h.plan, 0, err, sizeof err) == 0, "%s: %s", cards[i].name, err);
        printf("  %-9s reserve %lld MiB (nominal %lld - driver %lld + context and module): %s\n", cards[i].name,
               (long long)(g->reserve_bytes >> 20), (long long)(g->mem_bytes >> 20), (long long)(g->driver_bytes >> 20),
               be ? "starts" : err);
        CHECKF(be != NULL, "%s: %s", cards[i].name, err);
        if (be)
            be->destroy(be);
        fake_cuda_close();
    }
    CHECK(ok);
    harness_free(&h);
}

// A kernel that faults (the simulated driver's illegal address, which every later wait
// returns): noticed by some later call and said to be a kernel's fault; with --sync-check
// named by its instruction, kernel and .ft line.
static void test_sync_check(void) {
    Harness h;
    bool ok = compile_tiny(&h, NULL);
    CudaApi api;
    char err[1024] = "";
    FakeOptions o = options(&h);
    o.fault_kernel = "_rmsnorm_dx";
    double l[2], e[2];
    for (int check = 0; ok && check < 2; check++) {
        if (fake_cuda_open(&api, &o, err, sizeof err) != 0)
            break;
        Backend *be = rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err);
        CHECKF(be != NULL, "%s", err);
        if (be) {
            rt_cuda_sync_check(be, check);
            CHECK(!train(h.plan, be, 1, l, e, false));
            if (check)
                CHECKF(strstr(train_err, "(rmsnorm_dx, from .ft line ") && strstr(train_err, "): kernel k") &&
                           strstr(train_err, "_rmsnorm_dx failed on the GPU: CUDA error 700"), "%s", train_err);
            else
                CHECKF(strstr(train_err, "CUDA error 700") && strstr(train_err, "--sync-check names the instruction"),
                       "%s", train_err);
            be->destroy(be);
        }
        fake_cuda_close();
    }
    CHECK(ok);
    harness_free(&h);
}

// A rank's GPU among those its process sees: the only one when a launcher bound one to each
// rank (CUDA_VISIBLE_DEVICES per rank: "no GPU 1" on local rank 1 before), else its local
// rank's; a rank past the GPUs it sees is told so, naming CUDA_VISIBLE_DEVICES.
static int count_commas(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == ',';
    return n;
}
static void test_rank_devices(void) {
    Harness h;
    bool ok = compile_tiny(&h, NULL);
    CudaApi api;
    char err[1024] = "";
    FakeOptions o = options(&h);
    const char *old = getenv("CUDA_VISIBLE_DEVICES");
    char *saved = old ? strdup(old) : NULL;
    static const struct { const char *visible; int local_rank, want; } cases[] = {
        {"5", 3, 0}, {"2,3", 1, 1}, {"0,1,2,3", 3, 3}, {"0,1", 2, -1}, {"", 0, -1},
    };
    for (size_t i = 0; ok && i < sizeof cases / sizeof cases[0]; i++) {
        setenv("CUDA_VISIBLE_DEVICES", cases[i].visible, 1);
        if (fake_cuda_open(&api, &o, err, sizeof err) != 0) {
            CHECKF(0, "%s", err);
            break;
        }
        err[0] = '\0';
        Backend *be = rt_cuda_backend(h.dir, h.plan, &api, cases[i].local_rank, err, sizeof err);
        printf("  CUDA_VISIBLE_DEVICES=\"%s\", local rank %d: %s\n", cases[i].visible, cases[i].local_rank,
               be ? "opened" : err);
        CHECKF((be != NULL) == (cases[i].want >= 0), "%s", err);
        if (cases[i].want >= 0)
            CHECK_EQ(cases[i].want, rt_cuda_ordinal(cases[i].local_rank, 1 + count_commas(cases[i].visible), err, sizeof err));
        else if (cases[i].visible[0])
            CHECKF(strstr(err, "CUDA_VISIBLE_DEVICES = \"0,1\"") && strstr(err, "local rank 2"), "%s", err);
        if (be)
            be->destroy(be);
        fake_cuda_close();
    }
    if (saved)
        setenv("CUDA_VISIBLE_DEVICES", saved, 1);
    else
        unsetenv("CUDA_VISIBLE_DEVICES");
    free(saved);
    CHECK(ok);
    harness_free(&h);
}

// --profile on the GPU: each instruction between two timing events on its stream (the
// simulated driver counts a microsecond an operation between them), the kernels and GEMMs of
// a step summed by kernel and shape beside the plan's estimates.
static void test_profile(void) {
    Harness h;
    bool ok = compile_tiny(&h, NULL);
    CudaApi api;
    char err[1024] = "", path[600];
    FakeOptions o = options(&h);
    double l[4], e[4];
    snprintf(path, sizeof path, "%s/profile.txt", h.dir);
    if (ok && fake_cuda_open(&api, &o, err, sizeof err) == 0) {
        Backend *be = rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err);
        CHECKF(be != NULL, "%s", err);
        train_profile = rt_profile_new(h.plan);
        ok = be && train(h.plan, be, 3, l, e, false) &&
             rt_profile_write(train_profile, h.plan, path, "the simulated GPU", 2, err, sizeof err) == 0;
        CHECKF(ok, "%s", err);
        size_t n = 0;
        char *text = ok ? rt_read_whole(path, &n) : NULL;
        // one attention forward a layer a step, its backward of three launches as one row, the
        // GEMMs by shape, every row's estimate from the plan, the measured sum
        CHECKF(text && strstr(text, "# ftc run --profile: plan tiny on the simulated GPU, 2 steps timed") &&
                   strstr(text, "       2.0 ") && strstr(text, "attention k") &&
                   strstr(text, "attention_bwd k") && strstr(text, "+k") && strstr(text, "linear_dw ") &&
                   !strstr(text, " 0.000 ms a step measured"),
               "%s", text ? text : "(no file)");
        for (const char *t = text; t && *t && t < text + 1000;) {   // its head
            const char *eol = strchr(t, '\n');
            printf("  %.*s\n", (int)(eol ? eol - t : (long)strlen(t)), t);
            t = eol ? eol + 1 : t + strlen(t);
        }
        free(text);
        // cuBLASLt's algorithm for each product, as tests/gpu/run.sh prints it
        char *report = NULL;
        size_t rn = 0;
        FILE *f = open_memstream(&report, &rn);
        if (be && f) {
            rt_cuda_gemm_report(be, f);
            fclose(f);
            int lines = 0;
            for (const char *t = report; (t = strchr(t, '\n')); t++)
                lines++;
            printf("  %d products, the first: %.*s\n", lines, (int)strcspn(report, "\n"), report);
            CHECKF(lines > 2 && strstr(report, "gemm ") && strstr(report, ": cuBLASLt algorithm 1, tile 18, split-k 1, "
                                                                      "stages 8; operands aligned to 256 bytes"),
                   "%s", report);
        }
        free(report);
        rt_profile_free(train_profile);
        train_profile = NULL;
        if (be)
            be->destroy(be);
        fake_cuda_close();
    }
    CHECK(ok);
    harness_free(&h);
}

// One run of tiny on the simulated GPU with cuBLASLt's candidates timed first (or not):
// its losses, what the tuning said, and the backend's GEMM report.
static bool tuned_run(Harness *h, bool tune, double *losses, char **report) {
    CudaApi api;
    char err[1024];
    FakeOptions o = options(h);
    double evals[1];
    *report = NULL;
    train_note[0] = '\0';
    if (fake_cuda_open(&api, &o, err, sizeof err) != 0)
        return false;
    Backend *be = rt_cuda_backend(h->dir, h->plan, &api, 0, err, sizeof err);
    train_tune = tune;
    bool ok = be && train(h->plan, be, 1, losses, evals, false);
    train_tune = false;
    size_t n = 0;
    FILE *f = open_memstream(report, &n);
    if (be && f)
        rt_cuda_gemm_report(be, f);
    if (f)
        fclose(f);
    if (be)
        be->destroy(be);
    CHECKF(fake_cuda_stats()->races == 0, "%s", fake_cuda_stats()->first_race);
    fake_cuda_close();
    return ok && *report;
}

// cuBLASLt's candidates timed before step one (the simulated GPU runs the heuristic's first
// in 3 us, its second in 1): the second kept for every product and cached; a second run
// takes the cache's without running a GEMM to time; a cache naming candidates cuBLASLt does
// not offer, or holding garbage, is timed again; the losses the same in every run, tuned or
// not (the arenas held nothing yet, and nothing is left in them).
static void test_gemm_tuning(void) {
    Harness h;
    PlanChoice c = {.micro = 1, .policy = REMAT_KEEP, .n_policy = 1 << 20, .rest = REMAT_KEEP};
    bool ok = compile_tiny(&h, &c);   // (micro-batch 1: every product timed is small)
    CHECK(ok);
    char cache[600], file[1200] = "";
    const char *was = getenv("FTC_CACHE_DIR");
    char *saved_env = was ? strdup(was) : NULL;
    snprintf(cache, sizeof cache, "%s/gemm-cache", h.dir);
    setenv("FTC_CACHE_DIR", cache, 1);
    double plain[1], l[1];
    char *report = NULL;
    ok = ok && tuned_run(&h, false, plain, &report);
    CHECKF(ok && strstr(report, "cuBLASLt's first choice, untimed") && !strstr(report, "timed fastest"), "%s",
           report ? report : "");
    free(report);
    // 1: timed, and cached
    ok = ok && tuned_run(&h, true, l, &report);
    printf("  %s\n", train_note);
    int products = 0;   // (every distinct one timed)
    CHECK(sscanf(train_note, "gemm: %d distinct products, %*d timed", &products) == 1 && products > 8);
    char all_timed[64];
    snprintf(all_timed, sizeof all_timed, "%d timed (", products);
    CHECKF(ok && strstr(train_note, "timed (cuBLASLt's first 8 candidates") &&
               strstr(train_note, "faster than its first choice, the timed products 0.33x the first choices' time") &&
               strstr(train_note, "; cached in ") && train_tune_gemms > 0,
           "%s (%d GEMMs)", train_note, train_tune_gemms);
    CHECKF(ok && strstr(report, "candidate 2 of 4 timed fastest, 1.0 us (the first 3.0 us)") && !strstr(report, "untimed") &&
               strstr(report, "cuBLASLt algorithm 2,"),
           "%s", report ? report : "");
    CHECK(ok && l[0] == plain[0]);
    const char *at = strstr(train_note, "cached in ");
    if (at)
        snprintf(file, sizeof file, "%s", at + strlen("cached in "));
    free(report);
    // 2: from the cache, nothing timed
    ok = ok && tuned_run(&h, true, l, &report);
    printf("  %s\n", train_note);
    CHECKF(ok && strstr(train_note, "each cuBLASLt's candidate timed fastest here before") && train_tune_gemms == 0,
           "%s (%d GEMMs)", train_note, train_tune_gemms);
    CHECKF(ok && strstr(report, "candidate 2 of 4, the cache's (1.0 us when timed)") && !strstr(report, "timed fastest"),
           "%s", report ? report : "");
    CHECK(ok && l[0] == plain[0]);
    free(report);
    // 3: every entry's algorithm naming candidate 8 (data[5] = 7), which cuBLASLt does not
    // offer: timed again (garbage in the file: test_gemm_cache)
    size_t n = 0;
    char *text = file[0] ? rt_read_whole(file, &n) : NULL;
    CHECKF(text && n > 100 && !strncmp(text, "ftc-gemm-cache 1\n", 17), "%s", file);
    FILE *f = text ? fopen(file, "w") : NULL;
    if (f) {
        for (char *line = strchr(text, '\n') + 1; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
            if (strlen(line) > 17 + 16 * 6)
                line[17 + 16 * 6 - 1] = '7';
        fputs(text, f);
        fclose(f);
        ok = ok && tuned_run(&h, true, l, &report);
        CHECKF(ok && strstr(train_note, all_timed) && train_tune_gemms > 0 &&
                   strstr(report, "candidate 2 of 4 timed fastest"),
               "%s", train_note);
        CHECK(ok && l[0] == plain[0]);
        free(report);
    }
    free(text);
    if (saved_env)
        setenv("FTC_CACHE_DIR", saved_env, 1);
    else
        unsetenv("FTC_CACHE_DIR");
    free(saved_env);
    CHECK(ok);
    harness_free(&h);
}

// A checkpoint holds no gradients (they are zero between steps); resuming zeroes them on
// the device, whatever its memory held, since the first micro-step's GEMMs add into them.
static void test_resume_zeroes_gradients(void) {
    Harness h;
    bool ok = compile_tiny(&h, NULL);
    CHECK(ok);
    CudaApi api;
    char dir[512], ckpt[4400], err[1024] = "";
    FakeOptions o = options(&h);
    snprintf(dir, sizeof dir, "%s/ckpt", h.dir);
    ok = ok && mkdir(dir, 0755) == 0 && rt_checkpoint_save(&h.x, dir, 3, 7, 1, err, sizeof err) == 0 &&
         fake_cuda_open(&api, &o, err, sizeof err) == 0;
    Backend *be = ok ? rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err) : NULL;
    Backend *host = rt_cpu_backend();
    Exec x = {0};
    ok = be && rt_exec_init(&x, h.plan, be, host, LAYOUT_PLANNED, err, sizeof err) == 0;
    int grads = 0, dirty = 0;
    for (int i = 0; ok && i < h.plan->nbuf; i++) {   // what a step before left, or any bytes
        const PlanBuffer *b = &h.plan->buf[i];
        if (b->kind != PK_GRAD || b->view >= 0)
            continue;
        float *v = malloc(sizeof(float) * (size_t)plan_elems(b));
        for (int64_t k = 0; k < plan_elems(b); k++)
            v[k] = 0.25f;
        rt_write_f32(&x, i, v);
        free(v);
    }
    int64_t step = 0;
    uint64_t seed = 0;
    ok = ok && rt_checkpoint_find(dir, ckpt, sizeof ckpt, err, sizeof err) == 0 &&
         rt_checkpoint_load(&x, ckpt, &step, &seed, err, sizeof err) == 0;
    for (int i = 0; ok && i < h.plan->nbuf; i++) {
        const PlanBuffer *b = &h.plan->buf[i];
        if (b->kind != PK_GRAD || b->view >= 0)
            continue;
        float *v = malloc(sizeof(float) * (size_t)plan_elems(b));
        rt_read_f32(&x, i, v);
        for (int64_t k = 0; k < plan_elems(b); k++)
            dirty += v[k] != 0.0f;
        free(v);
        grads++;
    }
    if (!ok)
        printf("  %s\n", err);
    CHECK(ok && step == 3 && seed == 7);
    CHECKF(grads > 0 && dirty == 0, "%d of the gradients' elements not zero after resuming", dirty);
    if (x.plan)
        rt_exec_free(&x);
    if (be) {
        be->destroy(be);
        fake_cuda_close();
    }
    host->destroy(host);
    harness_free(&h);
}

// On a machine without a driver the probe says so and ftc runs on the cpu backend.
static void test_probe(void) {
    char why[512] = "";
    int r = rt_cuda_probe(why, sizeof why);
    printf("  probe: %d (%s)\n", r, r == 1 ? "a GPU" : why);
    CHECK(r >= -1 && r <= 1);
    CHECK(r == 1 || why[0]);
}

// CUDA graphs: without the poison, the forward, backward and evaluation phases are each
// captured once (per last micro-step or not) and launched whole after; the losses are
// the bits of the same run issued launch by launch, the kernels run the same, no race.
// LoRA with dropout on two micro-steps a step: the dropout nodes get each micro-step's
// stream. Swapped activations: the copy streams forked from and joined to the capture.
// A capture the driver refuses leaves the run launch by launch, with the same bits.
static void test_graphs(void) {
    char text[8192];
    bool made = tiny_with("  lora(r = 4, alpha = 8, dropout = 0.1, targets = [wq, wv])\n", text, sizeof text);
    CHECK(made);
    if (!made)
        return;
    static const struct {
        bool lora;
        PlanChoice c;
        const char *what;
    } cases[] = {
        {true, {.micro = 4, .policy = REMAT_KEEP, .n_policy = 1 << 20, .rest = REMAT_KEEP}, "tiny LoRA, dropout"},
        {false, {.micro = 8, .policy = REMAT_SWAP, .n_policy = 1 << 20, .rest = REMAT_SWAP, .early_update = true},
         "tiny, swapped, updates in backward"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Harness h;
        harness_arch = "sm_80";
        bool ok = harness_compile_choice(&h, cases[i].what, cases[i].lora ? text : tiny(), &cases[i].c);
        harness_arch = NULL;
        CHECK(ok);
        enum { STEPS = 3 };   // at most
        // (the updates inside backward: the third step's loss reads the second step's updates)
        int steps = cases[i].c.early_update ? 3 : 2;
        double loss[3][STEPS] = {{0}}, eval[3][STEPS] = {{0}};   // launch by launch; graphs; capture refused
        FakeStats st[3];
        for (int run = 0; ok && run < (cases[i].lora ? 3 : 2); run++) {
            FakeOptions o = options(&h);
            o.refuse_capture = run == 2;
            CudaApi api;
            char err[1024];
            CHECK(fake_cuda_open(&api, &o, err, sizeof err) == 0);
            Backend *be = rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err);
            CHECKF(be != NULL, "%s", err);
            train_eager = run == 0;
            CHECK(be && train(h.plan, be, steps, loss[run], eval[run], false));
            train_eager = false;
            if (be)
                be->destroy(be);
            st[run] = *fake_cuda_stats();
            st[run].launch_log = NULL;
            CHECKF(st[run].races == 0, "%s: %s", cases[i].what, st[run].first_race);
            fake_cuda_close();
            printf("  %-34s %-20s %d captures, %d graph launches, %d kernel nodes given new arguments; "
                   "%d launches\n", cases[i].what, run == 0 ? "launch by launch:" : run == 1 ? "graphs:" : "capture refused:",
                   st[run].captures, st[run].graph_launches, st[run].node_updates, st[run].launches);
            CHECK(!memcmp(loss[run], loss[0], sizeof loss[0]) && !memcmp(eval[run], eval[0], sizeof eval[0]));
            CHECK_EQ(st[0].launches, st[run].launches);   // the same kernels ran
        }
        int64_t micro = h.plan->accum * steps;
        CHECK_EQ(0, st[0].captures + st[0].graph_launches);
        // forward and backward, each on the last micro-step of a step and on the others; eval
        CHECK_EQ(h.plan->accum > 1 ? 5 : 3, st[1].captures);
        CHECK_EQ(2 * micro + 1, st[1].graph_launches);
        CHECK(st[1].node_updates > 0);   // (dropout's streams; the updates' steps)
        CHECK(cases[i].lora || st[1].copies > 0);
        if (cases[i].lora)
            CHECK_EQ(0, st[2].captures + st[2].graph_launches);
        harness_free(&h);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && chdir(argv[1]) != 0)
        return 2;
    if (argc > 2)   // the cases named after the source directory, for one ctest entry each
        check_only(argv + 2, argc - 2);
    RUN(test_probe);
    if (!rt_nvrtc_available(NULL)) {   // no CUBIN can be made, so no simulated GPU either
        printf("skip: NVRTC not found: %s\n", rt_nvrtc_load_error());
        return cases_failed_ ? 1 : 77;
    }
    RUN(test_device_resident);
    RUN(test_offloaded);
    RUN(test_adamw8bit);
    RUN(test_precisions);
    RUN(test_streamed);
    RUN(test_missing_waits_caught);
    RUN(test_launch_order);
    RUN(test_other_architecture);
    RUN(test_preflight);
    RUN(test_card_totals);
    RUN(test_rank_devices);
    RUN(test_sync_check);
    RUN(test_resume_zeroes_gradients);
    RUN(test_profile);
    RUN(test_gemm_tuning);
    RUN(test_graphs);
    return CHECK_DONE();
}
