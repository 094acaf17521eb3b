// test_generate.c — the decode phase (passes/decode.c, runtime/generate.c) against the
// training forward it is derived from, on tiny.ft in fp32 and bf16:
//   - each decode step's logits against the full forward's logits at that position (the
//     sequence in row 0 of a micro-batch, the forward's unfused logits): fp32 within 1e-5 of
//     the logits' largest magnitude, bf16 within 3e-2 (GEMV against GEMM rounding of bf16
//     activations);
//   - greedy generation with the KV cache (rt_generate_ids) against the argmax of the full
//     forward re-run on the growing sequence: every token equal in fp32; in bf16 equal, or
//     a near tie (the two logits within the bf16 tolerance) counted and said;
//   - sampling: the same seed the same reply, top_p small enough to keep one token greedy;
//   - a position past the cache refused.
// The decode runs on the cpu backend, on the emu backend (the generated kernels, decode.cuh
// among them) and on the cuda backend over the simulated driver (where NVRTC is present);
// the reference forward always on the cpu backend.
#include "check.h"
#include "harness.h"
#include "fake_cuda.h"

#include <math.h>

static const char *src_dir;
enum { NPOS = 40, PROMPT = 5, NEW = 30 };

// tiny.ft at `precision`, its decode phase 64 tokens long (its seq).
static bool compile(Harness *h, const char *precision, const char *arch) {
    static char text[65536];
    char path[600];
    snprintf(path, sizeof path, "%s/models/tiny.ft", src_dir);
    snprintf(text, sizeof text, "%s", harness_file(path));
    char *at = strstr(text, "precision = bf16");
    if (!at)
        return false;
    char rest[256];
    snprintf(rest, sizeof rest, "%s", at + strlen("precision = bf16"));
    snprintf(at, sizeof text - (size_t)(at - text), "precision = %s%s", precision, rest);
    harness_unfused_loss = true, harness_decode_len = 64, harness_arch = arch;
    bool ok = harness_compile(h, "tiny.ft", text, 8);
    harness_unfused_loss = false, harness_decode_len = 0, harness_arch = NULL;
    return ok;
}

// The full forward over seq[0..n) (row 0; the rest of the micro-batch zeros) on the cpu
// backend: its logits at positions 0..n-1 into out (n x vocab floats). (It runs on bytes the
// decode phase's caches share: never between two decode steps of one sequence.)
static bool forward_rows(Harness *h, const int32_t *seq, int n, float *out) {
    const Plan *p = h->plan;
    int64_t ntok = p->micro_batch * p->seq, V = p->vocab;
    int32_t *tok = calloc((size_t)ntok, sizeof(int32_t));
    float *logits = malloc(sizeof(float) * (size_t)(ntok * V));
    memcpy(tok, seq, sizeof(int32_t) * (size_t)n);
    rt_write_raw(&h->x, plan_role(p, PR_TOKENS)->id, tok);
    rt_write_raw(&h->x, plan_role(p, PR_TARGETS)->id, tok);
    rt_write_positions(&h->x, NULL);
    rt_write_target_count(&h->x, -1);
    char err[1024];
    bool ok = rt_exec_phase(&h->x, PHASE_FWD, err, sizeof err) == 0;
    if (ok)
        rt_read_f32(&h->x, plan_role(p, PR_LOGITS)->id, logits), memcpy(out, logits, sizeof(float) * (size_t)(n * V));
    else
        printf("  forward: %s\n", err);
    free(tok), free(logits);
    return ok;
}

static int argmax(const float *v, int64_t n) {
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[b])
            b = (int)i;
    return b;
}

// Each decode step's logits against the forward's at its position: the worst difference
// over the logits' largest magnitude.
static double logits_diff(Harness *h, Exec *x, const int32_t *seq) {
    int64_t V = h->plan->vocab;
    float *d = malloc(sizeof(float) * (size_t)(NPOS * V)), *f = malloc(sizeof(float) * (size_t)(NPOS * V));
    char err[1024];
    double worst = 0;
    rt_decode_reset(x);
    for (int t = 0; t < NPOS && worst < INFINITY; t++)
        if (rt_decode_step(x, seq[t], t, d + t * V, err, sizeof err) != 0) {
            printf("  decode step %d: %s\n", t, err);
            worst = INFINITY;
        }
    if (worst < INFINITY && !forward_rows(h, seq, NPOS, f))
        worst = INFINITY;
    for (int t = 0; t < NPOS && worst < INFINITY; t++) {
        double big = 0, diff = 0;
        for (int64_t v = t * V; v < (t + 1) * V; v++)
            big = fmax(big, fabs(f[v])), diff = fmax(diff, fabs((double)d[v] - f[v]));
        worst = big > 0 && diff == diff ? fmax(worst, diff / big) : INFINITY;   // (logits of zeros prove nothing)
    }
    free(d), free(f);
    return worst;
}

// Greedy with the cache against the forward's argmax on the growing sequence; tokens that
// differ where the forward's two logits are within `tol` of its largest are near ties.
static void greedy(Harness *h, Exec *x, const int32_t *prompt, double tol, const char *what) {
    int64_t V = h->plan->vocab;
    GenRequest q = {.prompt = prompt, .nprompt = PROMPT, .max_new = NEW};
    GenResult r = {0};
    char err[1024];
    int ok = rt_generate_ids(x, &q, &r, err, sizeof err) == 0;
    CHECKF(ok && r.n == NEW, "%s: %s", what, ok ? "fewer tokens" : err);
    int32_t seq[PROMPT + NEW];
    memcpy(seq, prompt, sizeof(int32_t) * PROMPT);
    float *all = malloc(sizeof(float) * (size_t)((PROMPT + NEW) * V));
    int same = 0, ties = 0;
    for (int k = 0; ok && k < r.n; k++) {
        if (!forward_rows(h, seq, PROMPT + k, all))
            break;
        const float *f = all + (PROMPT + k - 1) * V;
        int want = argmax(f, V), got = r.ids[k];
        double big = fabs(f[want]);
        same += want == got;
        bool tie = want != got && fabs((double)f[want] - f[got]) <= tol * big;
        ties += tie;
        CHECKF(want == got || tie, "%s: token %d is %d with the cache, %d by the full forward (logits %g, %g)",
               what, k, got, want, f[got], f[want]);
        seq[PROMPT + k] = got;
    }
    printf("  %-34s greedy: %d of %d tokens as the full forward's argmax, %d near ties\n", what, same, NEW, ties);
    free(all), free(r.ids);
}

// Sampling: reproducible by its seed; a nucleus of one token is greedy.
static void sampling(Exec *x, const int32_t *prompt) {
    GenRequest q = {.prompt = prompt, .nprompt = PROMPT, .max_new = 12};
    GenResult g = {0}, a = {0}, b = {0}, one = {0};
    char err[1024];
    CHECK(rt_generate_ids(x, &q, &g, err, sizeof err) == 0);
    q.sampling = (GenSampling){.temperature = 1.5, .top_p = 1, .seed = 7};
    CHECK(rt_generate_ids(x, &q, &a, err, sizeof err) == 0 && rt_generate_ids(x, &q, &b, err, sizeof err) == 0);
    CHECK(a.n == b.n && memcmp(a.ids, b.ids, sizeof(int32_t) * (size_t)a.n) == 0);
    q.sampling.top_p = 1e-9;
    CHECK(rt_generate_ids(x, &q, &one, err, sizeof err) == 0);
    CHECK(one.n == g.n && memcmp(one.ids, g.ids, sizeof(int32_t) * (size_t)g.n) == 0);
    int differ = 0;
    for (int64_t i = 0; i < a.n && i < g.n; i++)
        differ += a.ids[i] != g.ids[i];
    CHECKF(differ > 0, "temperature 1.5 chose the greedy tokens %lld times of %lld", (long long)a.n, (long long)a.n);
    float logits[256];
    CHECK(rt_decode_step(x, 1, 64, logits, err, sizeof err) != 0 && strstr(err, "outside the KV cache"));
    free(g.ids), free(a.ids), free(b.ids), free(one.ids);
}

// The decode phase on backend `be` (NULL: the harness's cpu executor) against the cpu forward.
static void against_forward(Harness *h, Backend *be, const char *what, double tol, bool exact_greedy) {
    Exec xe, *x = &h->x;
    char err[1024];
    if (be) {
        Backend *host = rt_cpu_backend();
        if (rt_exec_init(&xe, h->plan, be, host, LAYOUT_PLANNED, err, sizeof err) != 0) {
            printf("  %s: %s\n", what, err);
            CHECK(!"the backend starts");
            host->destroy(host);
            return;
        }
        rt_weights_init(&xe, 11);
        x = &xe;
    }
    int32_t seq[NPOS];
    for (int t = 0; t < NPOS; t++)
        seq[t] = (int32_t)((t * 37 + 11) % h->plan->vocab);
    double worst = logits_diff(h, x, seq);
    printf("  %-34s decode logits against the forward's: worst %.3g of the largest (bound %g)\n", what, worst, tol);
    CHECKF(worst <= tol, "%s: decode logits %.3g off the forward's", what, worst);
    greedy(h, x, seq, exact_greedy ? 0 : tol, what);
    if (!be)
        sampling(x, seq);
    if (be) {   // (the caller's backend)
        Backend *host = xe.host;
        rt_exec_free(&xe);
        host->destroy(host);
    }
}

static void on_cpu_and_emu(const char *precision, double tol) {
    Harness h;
    bool ok = compile(&h, precision, NULL);
    CHECKF(ok, "tiny.ft at %s compiles with a decode phase", precision);
    if (ok) {
        h.x.poison = false;   // (the forward's logits read after its phase)
        rt_weights_init(&h.x, 11);
        CHECK(rt_decode_len(h.plan) == 64);
        char what[64], err[1024];
        snprintf(what, sizeof what, "tiny %s, cpu", precision);
        against_forward(&h, NULL, what, tol, tol < 1e-4);
        Backend *emu = rt_emu_backend(h.dir, err, sizeof err);
        snprintf(what, sizeof what, "tiny %s, emu", precision);
        CHECKF(emu != NULL, "%s: %s", what, err);
        if (emu)
            against_forward(&h, emu, what, tol, tol < 1e-4), emu->destroy(emu);
    }
    harness_free(&h);
}

// The cuda backend over the simulated driver (its kernels through NVRTC's CUBIN for sm_80).
static void on_simulated_cuda(void) {
    Harness h;
    if (!compile(&h, "bf16", "sm_80")) {
        harness_free(&h);
        printf("  cuda (simulated): skipped, the plan did not compile for sm_80 (no NVRTC?)\n");
        return;
    }
    h.x.poison = false;
    rt_weights_init(&h.x, 11);
    CudaApi api;
    char err[1024];
    FakeOptions o = {.plan_dir = h.dir, .cc_major = 8, .cc_minor = 0, .total_bytes = 40339ll << 20,
                     .context_bytes = 500ll << 20};
    Backend *be = fake_cuda_open(&api, &o, err, sizeof err) == 0 ? rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err)
                                                                 : NULL;
    if (!be)
        printf("  cuda (simulated): skipped, %s\n", err);
    else {
        against_forward(&h, be, "tiny bf16, cuda (simulated)", 3e-2, false);
        CHECKF(fake_cuda_stats()->races == 0, "%s", fake_cuda_stats()->first_race);
        be->destroy(be);
        fake_cuda_close();
    }
    harness_free(&h);
}

int main(int argc, char **argv) {
    src_dir = argc > 1 ? argv[1] : ".";
    RUN_NAMED("fp32, cpu and emu", on_cpu_and_emu("fp32", 1e-5));
    RUN_NAMED("bf16, cpu and emu", on_cpu_and_emu("bf16", 3e-2));
    RUN_NAMED("bf16, cuda (simulated)", on_simulated_cuda());
    return CHECK_DONE();
}
