// test_reference.c — ftc against PyTorch, without PyTorch: for each fixture of
// tests/fixtures/ref (made by make_ref.py with transformers), import its
// config.json, compile the step, load model.safetensors through the normal
// checkpoint path, run one forward/backward on the cpu backend and compare the
// logits, the loss and every parameter gradient; then one AdamW step from torch's
// gradients against torch.optim.AdamW. And the training loop's parts against torch and
// transformers (tests/fixtures/train, made by make_train_ref.py): the learning rate
// schedules, and ten steps with the gradients clipped by their global norm. And the
// preference losses (dpo, ipo, orpo, simpo; ref/qwen2_pref, made by make_ref_pref.py from
// their papers' formulas): the loss and rewards at three steps, the gradients at the first,
// the weights after the third.
// Tolerances, per tensor: fp32 plans 1e-4 in max |ftc - torch| / max |torch| (the
// AdamW step 1e-6). bf16 plans, in ||ftc - exact||₂ / ||exact||₂ with exact the fp32
// result: 2e-2, or 1.5x PyTorch's own bf16 error where that is larger. Comparing two
// bf16 runs with each other measures noise: PyTorch's bf16 run is itself up to 4.4%
// (L2) from exact on these fixtures, whose weights (std 0.2) make the attention sharp.
#include "../runtime/safetensors.h"
#include "check.h"

#include <jansson.h>
#include "harness.h"

static const char *refdir = ".", *traindir = ".";
// The train section's loss line in place of the import's cross entropy (NULL: that one).
static const char *loss_line;

// Replaces the first line starting with `key` (after spaces) in text with `line`.
static char *set_line(char *text, const char *key, const char *line) {
    char *p = text;
    while ((p = strstr(p, key))) {
        char *bol = p;
        while (bol > text && bol[-1] == ' ')
            bol--;
        if (bol == text || bol[-1] == '\n')
            break;
        p++;
    }
    if (!p)
        return text;
    char *bol = p;
    while (bol > text && bol[-1] == ' ')
        bol--;
    char *eol = strchr(p, '\n');
    size_t head = (size_t)(bol - text), tail = strlen(eol);
    char *out = malloc(head + strlen(line) + tail + 2);
    sprintf(out, "%.*s%s%s", (int)head, text, line, eol);
    free(text);
    return out;
}

typedef struct Run {
    Harness h;
    Plan *plan;             // h.plan
    Exec x;                 // a copy of h.x's addresses, for brevity
    StSet *expect;
} Run;

// Imports, compiles and loads case `name` at `precision`, its optimizer line `opt` (NULL:
// the fixtures' AdamW, decay on every parameter as their single torch param group) and
// `lora`, more lines of the train section, or NULL, at the sequence of its tokens, for a
// global batch of `batch` windows (0: its tokens' rows) in micro-batches of `micro` (0:
// the batch); false on failure. The batch is written only when it is one micro-batch.
static bool setup_full(Run *r, const char *name, const char *precision, const char *opt_line,
                       const char *lora, int batch, int micro) {
    char path[1024], err[1024];
    memset(r, 0, sizeof *r);
    snprintf(path, sizeof path, "%s/%s/expect.safetensors", refdir, name);
    if (st_open(&r->expect, path, err, sizeof err) != 0)
        return printf("  %s\n", err), false;
    const StTensor *tok = st_find(r->expect, "tokens");
    if (!tok || tok->ndim != 2)
        return printf("  %s: no tokens [B, S]\n", path), false;
    int64_t B = tok->shape[0], S = tok->shape[1];
    snprintf(path, sizeof path, "%s/%s/config.json", refdir, name);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int rc = fe_import(path, f);
    fclose(f);
    if (rc != 0)
        return free(text), false;
    if (batch == 0)
        batch = (int)B;
    if (micro == 0)
        micro = batch;
    char line[64];
    snprintf(line, sizeof line, "  seq = %lld", (long long)S);
    text = set_line(text, "seq ", line);
    snprintf(line, sizeof line, "  batch = %d", batch);
    text = set_line(text, "batch ", line);
    char prec[64];
    snprintf(prec, sizeof prec, "  precision = %s", precision);
    text = set_line(text, "precision ", prec);
    if (loss_line)
        text = set_line(text, "loss ", loss_line);
    // The import's recipe (packing, the schedule, clipping) out: the fixtures' windows are
    // unpacked and each case sets its own optimizer.
    static const char *const recipe[] = {"packing ", "lr_schedule ", "warmup_steps ", "steps ", "clip "};
    for (size_t k = 0; k < sizeof recipe / sizeof *recipe; k++)
        text = set_line(text, recipe[k], "");
    char opt[1024];
    snprintf(opt, sizeof opt, "  optimizer = %s%s%s",
             opt_line ? opt_line
                      : "adamw(lr = 1e-2, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.1, decay_all = true)",
             lora ? "\n" : "", lora ? lora : "");
    text = set_line(text, "optimizer ", opt);
    bool ok = harness_compile(&r->h, name, text, micro);
    free(text);
    if (!ok)
        return false;
    r->plan = r->h.plan;
    r->x = r->h.x;
    snprintf(path, sizeof path, "%s/%s/model.safetensors", refdir, name);
    if (rt_weights_load(&r->x, path, 0, NULL, err, sizeof err) < 0)
        return printf("  %s\n", err), false;
    if (micro != batch)
        return true;
    // the batch
    const char *roles[2] = {"tokens", "targets"};
    for (int k = 0; k < 2; k++) {
        const PlanBuffer *b = plan_role(r->plan, k ? PR_TARGETS : PR_TOKENS);
        const StTensor *t = st_find(r->expect, roles[k]);
        CHECK(b && t);
        void *ids = b ? malloc((size_t)b->bytes) : NULL;
        bool read = b && t && st_read_raw(r->expect, t, ids, (size_t)b->bytes, err, sizeof err) == 0;
        if (read)
            rt_write_raw(&r->x, b->id, ids);
        free(ids);
        if (!read)
            return false;
    }
    rt_write_positions(&r->x, NULL);
    rt_write_target_count(&r->x, -1);
    return true;
}

static bool setup(Run *r, const char *name, const char *precision, const char *lora) {
    return setup_full(r, name, precision, NULL, lora, 0, 0);
}

static bool setup_opt(Run *r, const char *name, const char *precision, const char *opt_line,
                      const char *lora) {
    return setup_full(r, name, precision, opt_line, lora, 0, 0);
}

static void teardown(Run *r) {
    if (r->expect)
        st_close(r->expect);
    free(r->x.source_dtype);   // (r->x is a copy of h.x that loaded the weights: its own)
    r->x.source_dtype = NULL;
    harness_free(&r->h);
}

// Relative error of buffer `id` against tensor `name`: ||ftc - torch||₂ / ||torch||₂ when
// `l2`, else max |ftc - torch| / max |torch|.
static double rel_err(Run *r, int id, const char *name, bool l2) {
    const StTensor *t = st_find(r->expect, name);
    if (!t)
        return printf("  no expected tensor %s\n", name), 1e9;
    int64_t n = plan_elems(&r->plan->buf[id]);
    if (st_elems(t) != n)
        return printf("  %s: %lld elements, expected %lld\n", name, (long long)n,
                      (long long)st_elems(t)), 1e9;
    float *got = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)n);
    char err[512];
    rt_read_f32(&r->x, id, got);
    st_read_f32(r->expect, t, want, n, err, sizeof err);
    double diff = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        if (l2) {
            diff += d * d;
            mag += (double)want[i] * want[i];
        } else {
            diff = fmax(diff, fabs(d));
            mag = fmax(mag, fabs((double)want[i]));
        }
    }
    if (l2)
        diff = sqrt(diff), mag = sqrt(mag);
    free(got), free(want);
    return mag > 0 ? diff / mag : diff;
}

// ||a - b||₂ / ||b||₂ for two expected tensors.
static double ref_l2(Run *r, const char *a, const char *b) {
    const StTensor *ta = st_find(r->expect, a), *tb = st_find(r->expect, b);
    if (!ta || !tb || st_elems(ta) != st_elems(tb))
        return 1e9;
    int64_t n = st_elems(ta);
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    char err[512];
    st_read_f32(r->expect, ta, x, n, err, sizeof err);
    st_read_f32(r->expect, tb, y, n, err, sizeof err);
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++)
        d += ((double)x[i] - y[i]) * ((double)x[i] - y[i]), m += (double)y[i] * y[i];
    free(x), free(y);
    return m > 0 ? sqrt(d / m) : sqrt(d);
}

// A bf16 plan is held to what bf16 can do: its distance from the exact (fp32) result
// must be within 2e-2, or within 1.5x the distance of PyTorch's own bf16 run from it.
static void expect_bf16(Run *r, int id, const char *name, double *worst, double *worst_torch) {
    const char *exact = name + strlen("bf16.");
    double e = rel_err(r, id, exact, true), t = ref_l2(r, name, exact);
    double tol = fmax(2e-2, 1.5 * t);
    if (e > *worst)
        *worst = e, *worst_torch = t;
    if (e > tol)
        printf("  %-60s L2 rel err %.3g > %.3g (torch bf16: %.3g)\n", exact, e, tol, t);
    CHECK(e <= tol);
}

// Checks one tensor and prints its error, so the note can quote each. fp32 plans must
// meet the tolerance elementwise (max-normalised); bf16 plans in the L2 sense, since a
// single element's bf16 rounding path is not PyTorch's.
static void expect_close(Run *r, int id, const char *name, double tol, double *worst) {
    double e = rel_err(r, id, name, false);
    if (e > *worst)
        *worst = e;
    if (e > tol)
        printf("  %-60s rel err %.3g > %.0e\n", name, e, tol);
    CHECK(e <= tol);
}

// Case `name` at `precision` with the lora(...) line `lora` (or none), its expected tensors
// under `keys` ("" or "lora.": logits, loss, grad.NAME) or bf16's.
static void run_case_keys(const char *name, const char *precision, double tol, const char *lora,
                          const char *keys) {
    Run r;
    char err[1024];
    bool ok = setup(&r, name, precision, lora);
    CHECK(ok);
    if (!ok) {
        teardown(&r);
        return;
    }
    bool bf16 = strcmp(precision, "bf16") == 0;
    const char *pre = bf16 ? "bf16." : keys;
    CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_FWD, err, sizeof err));
    // The logits die at the loss's backward: read them between the phases. The fused loss
    // never has them whole: its loss and gradients are what it is checked on.
    char key[512];
    double worst = 0, worst_torch = 0;
    const PlanBuffer *lg = plan_role(r.plan, PR_LOGITS);
    CHECK(lg != NULL || !harness_unfused_loss);   // fused where the logits are a linear's alone
    snprintf(key, sizeof key, "%slogits", pre);
    if (lg && bf16)
        expect_bf16(&r, lg->id, key, &worst, &worst_torch);
    else if (lg)
        expect_close(&r, lg->id, key, tol, &worst);
    CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_BWD, err, sizeof err));
    int ids[512], n = 0;
    const char *names[512];
    ids[n] = plan_role(r.plan, PR_LOSS)->id, names[n++] = "loss";
    int grads = 0;
    for (int i = 0; i < r.plan->nbuf && n < 512; i++) {
        const PlanBuffer *b = &r.plan->buf[i];
        if (b->kind != PK_GRAD)
            continue;
        ids[n] = i, names[n++] = strdup(r.plan->buf[b->of].hf);
        grads++;
    }
    for (int k = 0; k < n; k++) {
        snprintf(key, sizeof key, "%s%s%s", pre, k < 1 ? "" : "grad.", names[k]);
        if (bf16)
            expect_bf16(&r, ids[k], key, &worst, &worst_torch);
        else
            expect_close(&r, ids[k], key, tol, &worst);
        if (k >= 1)
            free((char *)names[k]);
    }
    int params = 0;
    snprintf(key, sizeof key, "%sgrad.", keys);
    for (int i = 0; i < st_count(r.expect); i++)
        params += strncmp(st_at(r.expect, i)->name, key, strlen(key)) == 0;
    CHECK_EQ(params, grads);   // every parameter's gradient was compared
    double worst_after = 0;
    bool adamw = false;   // the case has torch's AdamW step (make_ref.py's cases)
    for (int i = 0; i < st_count(r.expect) && !adamw; i++)
        adamw = strncmp(st_at(r.expect, i)->name, "after.", 6) == 0;
    if (!bf16 && !lora && adamw) {
        // The optimizer alone: torch's gradients in, torch's AdamW step out.
        for (int i = 0; i < r.plan->nbuf; i++) {
            const PlanBuffer *b = &r.plan->buf[i];
            if (b->kind != PK_GRAD)
                continue;
            snprintf(key, sizeof key, "grad.%s", r.plan->buf[b->of].hf);
            const StTensor *t = st_find(r.expect, key);
            float *v = malloc(sizeof(float) * (size_t)plan_elems(b));
            CHECK(t && st_read_f32(r.expect, t, v, plan_elems(b), err, sizeof err) == 0);
            rt_write_f32(&r.x, i, v);
            free(v);
        }
        r.x.step = 1;
        CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_OPT, err, sizeof err));
        for (int i = 0; i < r.plan->nbuf; i++) {
            const PlanBuffer *b = &r.plan->buf[i];
            if (b->kind != PK_PARAM)
                continue;
            snprintf(key, sizeof key, "after.%s", b->hf);
            expect_close(&r, i, key, 1e-6, &worst_after);
        }
    }
    char what[64] = "logits, loss";
    if (!lg)
        snprintf(what, sizeof what, harness_loss_chunk ? "fused loss (chunks of %lld rows)" : "fused loss",
                 (long long)harness_loss_chunk);
    if (bf16)
        printf("  %s bf16: %s, %d gradients: worst L2 rel err from exact %.2e "
               "(torch bf16 there: %.2e)", name, what, grads, worst, worst_torch);
    else
        printf("  %s fp32: %s, %d gradients: worst max rel err %.2e (tolerance %.0e)",
               name, what, grads, worst, tol);
    if (!bf16 && !lora && adamw)
        printf(", AdamW step worst %.2e (tolerance 1e-06)", worst_after);
    printf("\n");
    teardown(&r);
}

static void run_case_lora(const char *name, const char *precision, double tol, const char *lora) {
    run_case_keys(name, precision, tol, lora, "");
}

// Each case twice: with the loss as the .ft writes it (the logits compared too), and with
// the projection and loss fused, in chunks of 4 of the 16 rows.
static void run_both(const char *name, const char *precision, double tol, const char *lora) {
    harness_unfused_loss = true;
    run_case_lora(name, precision, tol, lora);
    harness_unfused_loss = false;
    harness_loss_chunk = 4;
    run_case_lora(name, precision, tol, lora);
    harness_loss_chunk = 0;
}

static void run_case(const char *name, const char *precision, double tol) {
    run_both(name, precision, tol, NULL);
}

// The learning rate at every step of transformers' schedulers (train/schedules.json).
static void test_schedules(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/schedules.json", traindir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je), *cases = json_object_get(root, "cases");
    CHECKF(json_is_array(cases), "%s: %s", path, je.text);
    size_t i, n = 0;
    json_t *c;
    json_array_foreach(cases, i, c) {
        static const char *const kinds[] = {"constant", "linear", "cosine"};
        Plan p = {.lr = json_number_value(json_object_get(c, "lr")),
                  .warmup_steps = json_integer_value(json_object_get(c, "warmup")),
                  .steps = json_integer_value(json_object_get(c, "steps")),
                  .min_lr = json_number_value(json_object_get(c, "min_lr"))};
        for (int k = 0; k < 3; k++)
            if (!strcmp(json_string_value(json_object_get(c, "schedule")), kinds[k]))
                p.schedule = (PlanSchedule)k;
        json_t *lrs = json_object_get(c, "lrs");
        double worst = 0;
        for (size_t s = 0; s < json_array_size(lrs); s++, n++) {
            double want = json_number_value(json_array_get(lrs, s)), got = rt_lr_at(&p, (int64_t)s + 1);
            worst = fmax(worst, fabs(got - want) / fmax(want, 1e-30));
            CHECK_NEAR(got, want, 0, 1e-12);
        }
        printf("  %-18s %2zu steps, worst relative difference %.2g\n",
               json_string_value(json_object_get(c, "name")), json_array_size(lrs), worst);
    }
    CHECK(n > 40);
    json_decref(root);
}

// fp16's loss scale over 24 steps, some overflowing, against torch.amp.GradScaler's
// (train/gradscaler.json): the scale after each step, exactly.
static void test_gradscaler(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/gradscaler.json", traindir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    json_t *over = json_object_get(root, "overflow"), *after = json_object_get(root, "scale_after");
    CHECKF(json_is_array(over) && json_array_size(over) == json_array_size(after), "%s: %s", path, je.text);
    Plan p = {.scale_init = json_number_value(json_object_get(root, "init_scale")),
              .scale_growth = json_number_value(json_object_get(root, "growth_factor")),
              .scale_backoff = json_number_value(json_object_get(root, "backoff_factor")),
              .scale_interval = json_integer_value(json_object_get(root, "growth_interval"))};
    Exec x = {.plan = &p, .loss_scale = p.scale_init};
    int changes = 0;
    for (size_t s = 0; s < json_array_size(over); s++) {
        double before = x.loss_scale, want = json_number_value(json_array_get(after, s));
        rt_scale_update(&x, json_is_true(json_array_get(over, s)));
        CHECKF(x.loss_scale == want, "step %zu: scale %g, torch's %g", s + 1, x.loss_scale, want);
        changes += x.loss_scale != before;
    }
    printf("  %zu steps, %d scale changes (backoffs and growths), every scale torch's\n",
           json_array_size(over), changes);
    CHECK(changes >= 6);
    json_decref(root);
}

// Ten AdamW steps of qwen2_tiny in fp32 against torch (train/clip10): the cosine schedule
// with warm-up, the gradients clipped by their global norm (which is over 5: the clip
// acts at every step), weight decay on all but biases and norm weights. Each step's loss,
// learning rate and gradient norm, and every weight after the ten steps.
static void test_clip10(void) {
    Run r;
    char err[1024], path[1024], key[512];
    bool ok = setup_opt(&r, "qwen2_tiny", "fp32",
                        "adamw(lr = 1e-2, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.1)",
                        "  lr_schedule = cosine\n  warmup_steps = 3\n  steps = 10\n  clip = 1.0");
    CHECK(ok);
    StSet *ex = NULL;
    snprintf(path, sizeof path, "%s/clip10/expect.safetensors", traindir);
    if (ok && st_open(&ex, path, err, sizeof err) != 0)
        ok = false, printf("  %s\n", err);
    CHECK(ok);
    if (!ok) {
        teardown(&r);
        return;
    }
    float loss[10], norm[10], lr[10];   // lr: torch's double as f32
    CHECK_EQ(0, st_read_f32(ex, st_find(ex, "loss"), loss, 10, err, sizeof err));
    CHECK_EQ(0, st_read_f32(ex, st_find(ex, "grad_norm"), norm, 10, err, sizeof err));
    CHECK_EQ(0, st_read_f32(ex, st_find(ex, "lr"), lr, 10, err, sizeof err));
    double worst_loss = 0, worst_norm = 0;
    for (int s = 1; s <= 10 && !CASE_FAILED(); s++) {
        const char *roles[2] = {"tokens", "targets"};
        for (int k = 0; k < 2; k++) {
            const PlanBuffer *b = plan_role(r.plan, k ? PR_TARGETS : PR_TOKENS);
            snprintf(key, sizeof key, "%s.%d", roles[k], s);
            int32_t ids[64];
            CHECK(b->bytes <= (int64_t)sizeof ids &&
                  st_read_raw(ex, st_find(ex, key), ids, (size_t)b->bytes, err, sizeof err) == 0);
            rt_write_raw(&r.x, b->id, ids);
        }
        rt_write_target_count(&r.x, -1);
        CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_FWD, err, sizeof err));
        CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_BWD, err, sizeof err));
        float l;
        rt_read_f32(&r.x, plan_role(r.plan, PR_LOSS)->id, &l);
        r.x.step = s;
        r.x.lr = rt_lr_at(r.plan, s);
        CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_OPT, err, sizeof err));
        double gn;
        bool bad;
        CHECK(rt_grad_stats(&r.x, &gn, &bad) && !bad);
        worst_loss = fmax(worst_loss, fabs(l - loss[s - 1]) / loss[s - 1]);
        worst_norm = fmax(worst_norm, fabs(gn - norm[s - 1]) / norm[s - 1]);
        CHECK_NEAR(l, loss[s - 1], 0, 1e-5);
        CHECK_NEAR(gn, norm[s - 1], 0, 1e-5);
        CHECK_NEAR((float)r.x.lr, lr[s - 1], 0, 0);
    }
    double worst_w = 0;
    int params = 0;
    StSet *ref = r.expect;
    for (int i = 0; i < r.plan->nbuf; i++) {
        const PlanBuffer *b = &r.plan->buf[i];
        if (b->kind != PK_PARAM)
            continue;
        snprintf(key, sizeof key, "after.%s", b->hf);
        r.expect = ex;   // compare against this fixture
        expect_close(&r, i, key, 1e-4, &worst_w);
        params++;
    }
    r.expect = ref;
    printf("  qwen2_tiny fp32, 10 steps: loss %.2g, gradient norm %.2g, lr as torch's; %d weights "
           "after: worst max rel err %.2e (tolerance 1e-4)\n", worst_loss, worst_norm, params, worst_w);
    st_close(ex);
    teardown(&r);
}
// The architectures of tests/fixtures/make_ref_arch.py: fp32 logits, loss and every gradient
// within 1e-4 of transformers; then PEFT's LoRA on the family's targets (the adapters'
// gradients).
static void run_arch(const char *name, const char *targets) {
    run_case(name, "fp32", 1e-4);
    char lora[256];
    snprintf(lora, sizeof lora, "  lora(r = 4, alpha = 8, dropout = 0.0, targets = [%s])", targets);
    run_case_keys(name, "fp32", 1e-4, lora, "lora.");
}

static void test_llama3(void) { run_arch("llama3_tiny", "q_proj, v_proj"); }
static void test_qwen2_window(void) { run_arch("qwen2_window", "q_proj, v_proj"); }
static void test_qwen3(void) { run_arch("qwen3_tiny", "q_proj, v_proj"); }
static void test_mistral_window(void) { run_arch("mistral_window", "q_proj, v_proj"); }
static void test_gemma(void) { run_arch("gemma_tiny", "q_proj, v_proj"); }
static void test_gemma2(void) { run_arch("gemma2_tiny", "q_proj, v_proj"); }
static void test_gemma3(void) { run_arch("gemma3_tiny", "q_proj, v_proj"); }
static void test_phi3(void) { run_arch("phi3_tiny", "qkv_proj"); }
static void test_gpt2(void) { run_arch("gpt2_tiny", "c_attn"); }
static void test_neox(void) { run_arch("neox_tiny", "query_key_value"); }

static void test_qwen2_fp32(void) { run_case("qwen2_tiny", "fp32", 1e-4); }

// The masked fixture's batch: two micro-batches of 16 tokens and targets (-100 where
// untrained), and the count of trained targets over both.
static void read_masked_batch(Run *r, int32_t tokens[32], int32_t targets[32], int32_t count[1]) {
    char err[1024];
    const char *names[3] = {"tokens", "targets", "count"};
    int32_t *into[3] = {tokens, targets, count};
    for (int k = 0; k < 3; k++) {
        const StTensor *t = st_find(r->expect, names[k]);
        CHECK(t && st_read_raw(r->expect, t, into[k], (size_t)st_elems(t) * 4, err, sizeof err) == 0);
    }
}

// Masked targets over a step of two micro-batches (make_ref_masked.py): each micro-step's
// loss is its sum of terms over the step's trained targets, as transformers' loss with
// num_items_in_batch; the step's loss their sum, the gradients accumulated over both.
static void test_qwen2_masked_accumulated_fp32(void) {
    Run r;
    char err[1024];
    bool ok = setup_full(&r, "qwen2_tiny_masked", "fp32", NULL, NULL, 4, 2);
    CHECK(ok);
    CHECK(!ok || r.plan->accum == 2);
    if (!ok || r.plan->accum != 2) {
        teardown(&r);
        return;
    }
    int32_t tokens[32], targets[32], count[1];
    read_masked_batch(&r, tokens, targets, count);
    double loss = 0, worst = 0;
    for (int m = 0; m < 2; m++) {   // rows 2m and 2m + 1
        r.x.micro = m;
        rt_write_raw(&r.x, plan_role(r.plan, PR_TOKENS)->id, tokens + 16 * m);
        rt_write_raw(&r.x, plan_role(r.plan, PR_TARGETS)->id, targets + 16 * m);
        rt_write_positions(&r.x, NULL);
        CHECK_EQ(count[0], rt_write_target_count(&r.x, count[0]));
        CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_FWD, err, sizeof err));
        CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_BWD, err, sizeof err));
        char key[32];
        snprintf(key, sizeof key, "loss.micro%d", m);
        expect_close(&r, plan_role(r.plan, PR_LOSS)->id, key, 1e-5, &worst);
        float l;
        rt_read_f32(&r.x, plan_role(r.plan, PR_LOSS)->id, &l);
        loss += l;
    }
    const StTensor *t = st_find(r.expect, "loss");
    float want = 0;
    CHECK(t && st_read_f32(r.expect, t, &want, 1, err, sizeof err) == 0);
    CHECK_NEAR(loss, want, 0, 1e-5);
    int grads = 0;
    for (int i = 0; i < r.plan->nbuf; i++) {
        const PlanBuffer *b = &r.plan->buf[i];
        if (b->kind != PK_GRAD)
            continue;
        char key[512];
        snprintf(key, sizeof key, "grad.%s", r.plan->buf[b->of].hf);
        expect_close(&r, i, key, 1e-4, &worst);
        grads++;
    }
    CHECK(grads > 10);
    printf("  qwen2_tiny_masked fp32, %d of 32 targets trained, 2 micro-batches: loss %.7f (transformers "
           "%.7f), %d gradients: worst max rel err %.2e (tolerance 1e-04)\n", count[0], loss, want, grads, worst);
    teardown(&r);
}
// Packed records (make_ref_packed.py): two windows of whole records, transformers given the
// position ids restarting at each record and no attention mask (its packed-sequence mask);
// ftc with packing = true and the same position ids: logits, loss and every gradient.
static void packed_case(void) {
    Run r;
    char err[1024];
    bool ok = setup_full(&r, "qwen2_tiny_packed", "fp32", NULL, "  packing = true", 2, 2);
    CHECK(ok);
    CHECK(!ok || r.plan->packing);
    if (!ok || !r.plan->packing) {
        teardown(&r);
        return;
    }
    int32_t pos[16];
    const StTensor *t = st_find(r.expect, "positions");
    CHECK(t && st_elems(t) == 16 && st_read_raw(r.expect, t, pos, sizeof pos, err, sizeof err) == 0);
    rt_write_positions(&r.x, pos);
    CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_FWD, err, sizeof err));
    double worst = 0;
    const PlanBuffer *lg = plan_role(r.plan, PR_LOGITS);   // (none whole where the loss is fused)
    CHECK(lg != NULL || !harness_unfused_loss);
    if (lg)
        expect_close(&r, lg->id, "logits", 1e-4, &worst);
    CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_BWD, err, sizeof err));
    expect_close(&r, plan_role(r.plan, PR_LOSS)->id, "loss", 1e-5, &worst);
    int grads = 0;
    for (int i = 0; i < r.plan->nbuf; i++) {
        const PlanBuffer *b = &r.plan->buf[i];
        if (b->kind != PK_GRAD)
            continue;
        char key[512];
        snprintf(key, sizeof key, "grad.%s", r.plan->buf[b->of].hf);
        expect_close(&r, i, key, 1e-4, &worst);
        grads++;
    }
    int params = 0;
    for (int i = 0; i < st_count(r.expect); i++)
        params += strncmp(st_at(r.expect, i)->name, "grad.", 5) == 0;
    CHECK_EQ(params, grads);
    float loss = 0;
    rt_read_f32(&r.x, plan_role(r.plan, PR_LOSS)->id, &loss);
    printf("  qwen2_tiny_packed fp32, records of 3+5 and 2+4+2 tokens, %s: loss %.7f, %s%d gradients: "
           "worst max rel err %.2e against transformers' packed-sequence mask (tolerance 1e-04)\n",
           lg ? "loss unfused" : "fused loss (chunks of 4 rows)", loss, lg ? "logits and " : "", grads, worst);
    teardown(&r);
}
// The packed case with the loss as the .ft writes it (the logits compared too), and fused.
static void test_qwen2_packed_fp32(void) {
    harness_unfused_loss = true;
    packed_case();
    harness_unfused_loss = false;
    harness_loss_chunk = 4;
    packed_case();
    harness_loss_chunk = 0;
}
// The eval phase (forward only, planned apart from the training step) over the masked
// fixture's two micro-batches, each batch's loss the mean over its own trained targets:
// weighted by their counts, transformers' loss over all of them; and each batch's
// bitwise the training forward's on the same batch and count. The eval phase runs first,
// so it can lean on nothing the forward leaves behind (poison is on).
static void test_eval_phase(void) {
    Run r;
    char err[1024];
    bool ok = setup_full(&r, "qwen2_tiny_masked", "fp32", NULL, NULL, 4, 2);
    CHECK(ok);
    CHECK(!ok || r.plan->nins[PHASE_EVAL] > 0);
    if (!ok || r.plan->nins[PHASE_EVAL] == 0) {
        teardown(&r);
        return;
    }
    int32_t tokens[32], targets[32], count[1];
    read_masked_batch(&r, tokens, targets, count);
    double sum = 0;
    int64_t total = 0, same = 0;
    for (int m = 0; m < 2; m++) {
        int64_t n = 0;
        for (int j = 0; j < 16; j++)
            n += targets[16 * m + j] >= 0;
        float le, lf;
        // The batch is written before each phase, as the runtime does: the eval phase's
        // values may take the bytes of the inputs after their last reader.
        for (int ph = 0; ph < 2; ph++) {
            rt_write_raw(&r.x, plan_role(r.plan, PR_TOKENS)->id, tokens + 16 * m);
            rt_write_raw(&r.x, plan_role(r.plan, PR_TARGETS)->id, targets + 16 * m);
            rt_write_positions(&r.x, NULL);
            rt_write_target_count(&r.x, n);
            if (ph == 0) {
                CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_EVAL, err, sizeof err));
                rt_read_f32(&r.x, plan_role(r.plan, PR_EVAL_LOSS)->id, &le);
            } else {
                r.x.micro = 0;
                CHECK_EQ(0, rt_exec_phase(&r.x, PHASE_FWD, err, sizeof err));
            }
        }
        rt_read_f32(&r.x, plan_role(r.plan, PR_LOSS)->id, &lf);
        same += memcmp(&le, &lf, sizeof le) == 0;
        CHECK(memcmp(&le, &lf, sizeof le) == 0);
        sum += (double)le * (double)n;
        total += n;
    }
    const StTensor *t = st_find(r.expect, "loss");
    float want = 0;
    CHECK(t && st_read_f32(r.expect, t, &want, 1, err, sizeof err) == 0);
    CHECK_EQ(count[0], total);
    CHECK_NEAR(sum / (double)total, want, 0, 1e-5);
    printf("  qwen2_tiny_masked fp32, eval phase (%d instructions) over 2 micro-batches, %lld targets: "
           "loss %.7f (transformers %.7f); %lld of 2 batches bitwise the training forward's\n",
           r.plan->nins[PHASE_EVAL], (long long)total, sum / (double)total, want, (long long)same);
    teardown(&r);
}

// Preference losses against make_ref_pref.py (ref/qwen2_pref): 4 pairs of windows of 12, the
// prompts and the padding untrained, a step of 2 micro-batches of 2 pairs, the same batch at
// each of 3 AdamW steps. The fixture's batch, in rows of the global batch.
typedef struct PrefBatch {
    int32_t tokens[8 * 12], targets[8 * 12], pairs, chosen;
} PrefBatch;

static bool pref_batch(Run *r, PrefBatch *pb) {
    char err[1024];
    const char *names[4] = {"tokens", "targets", "pairs", "chosen"};
    int32_t *into[4] = {pb->tokens, pb->targets, &pb->pairs, &pb->chosen};
    size_t cap[4] = {sizeof pb->tokens, sizeof pb->targets, 4, 4};
    for (int k = 0; k < 4; k++) {
        const StTensor *t = st_find(r->expect, names[k]);
        if (!t || (size_t)st_elems(t) * 4 != cap[k] ||
            st_read_raw(r->expect, t, into[k], cap[k], err, sizeof err) != 0)
            return printf("  qwen2_pref: no %s of %zu elements\n", names[k], cap[k] / 4), false;
    }
    return r->plan->seq * r->plan->micro_batch * r->plan->accum == 8 * 12;
}

// Micro-batch m of pb into r's plan, as the feed writes one (ref_logps: the reference's sums
// of its rows, where the plan reads them).
static void pref_write(Run *r, const PrefBatch *pb, int64_t m, const float *ref_logps) {
    int64_t rows = r->plan->micro_batch, S = r->plan->seq;
    const PlanBuffer *ref = plan_role(r->plan, PR_REF_LOGPS);
    if (ref)
        rt_write_raw(&r->x, ref->id, ref_logps + m * rows);
    rt_write_raw(&r->x, plan_role(r->plan, PR_TOKENS)->id, pb->tokens + m * rows * S);
    rt_write_raw(&r->x, plan_role(r->plan, PR_TARGETS)->id, pb->targets + m * rows * S);
    rt_write_positions(&r->x, NULL);
    rt_write_pair_counts(&r->x, pb->pairs, pb->chosen);
}

// One optimizer step `s` over pb's micro-batches: its loss (their shares summed) and the
// stats of each (summed) into loss and stats; ref_out, when not NULL, gets the reference's
// log-probabilities (ref.logprobs, [rows, S] of the global batch) as the forward leaves them.
static bool pref_step(Run *r, const PrefBatch *pb, int s, const float *ref_logps, double *loss,
                      double stats[PREF_STATS], float *ref_out) {
    char err[1024];
    const PlanBuffer *st = plan_role(r->plan, PR_PREF_STATS), *ro = NULL;
    for (int i = 0; ref_out && i < r->plan->nbuf; i++)
        if (strcmp(r->plan->buf[i].name, "ref.logprobs") == 0)
            ro = &r->plan->buf[i];
    if (!st || (ref_out && !ro))
        return printf("  no %s buffer\n", st ? "ref.logprobs" : "preference stats"), false;
    *loss = 0;
    memset(stats, 0, sizeof(double) * PREF_STATS);
    r->x.step = s;
    for (int64_t m = 0; m < r->plan->accum; m++) {
        r->x.micro = m, r->x.last = m == r->plan->accum - 1;
        pref_write(r, pb, m, ref_logps);
        if (rt_exec_phase(&r->x, PHASE_FWD, err, sizeof err) != 0)
            return printf("  %s\n", err), false;
        if (ref_out)
            rt_read_f32(&r->x, ro->id, ref_out + m * plan_elems(ro));
        if (rt_exec_phase(&r->x, PHASE_BWD, err, sizeof err) != 0)
            return printf("  %s\n", err), false;
        float l, v[PREF_STATS];
        rt_read_f32(&r->x, plan_role(r->plan, PR_LOSS)->id, &l);
        rt_read_f32(&r->x, st->id, v);
        *loss += l;
        for (int i = 0; i < PREF_STATS; i++)
            stats[i] += v[i];
    }
    return true;
}

// The optimizer phase of step s.
static bool pref_update(Run *r, int s) {
    char err[1024];
    r->x.step = s;
    r->x.lr = rt_lr_at(r->plan, s);
    if (rt_exec_phase(&r->x, PHASE_OPT, err, sizeof err) == 0)
        return true;
    printf("  %s\n", err);
    return false;
}

// Compares every buffer of `kind` whose parameter's checkpoint name is P with K.grad.P or
// K.after.P (`what`), within 1e-4 (max-normalised); the number compared.
static int pref_compare(Run *r, PlanKind kind, const char *key, const char *what, double *worst) {
    int n = 0;
    for (int i = 0; i < r->plan->nbuf; i++) {
        const PlanBuffer *b = &r->plan->buf[i];
        if (b->kind != kind || (kind == PK_PARAM && (!b->trainable || b->copy_of >= 0)))
            continue;
        const PlanBuffer *p = kind == PK_GRAD ? &r->plan->buf[b->of] : b;
        char name[512];
        snprintf(name, sizeof name, "%s.%s.%s", key, what, p->hf);
        expect_close(r, i, name, 1e-4, worst);
        n++;
    }
    int want = 0;
    char pre[64];
    snprintf(pre, sizeof pre, "%s.%s.", key, what);
    for (int i = 0; i < st_count(r->expect); i++)
        want += strncmp(st_at(r->expect, i)->name, pre, strlen(pre)) == 0;
    CHECKF(n == want, "%s: %d of the fixture's %d %s compared", key, n, want, what);
    return n;
}

// Case `key` of the fixture: ftc with the loss line `loss` (and `lora`) against torch: the loss
// and the rewards at each of 3 steps, every gradient at step 1, every trained weight after 3.
static void pref_case(const char *key, const char *loss, const char *lora) {
    Run r;
    PrefBatch pb;
    loss_line = loss;
    bool ok = setup_full(&r, "qwen2_pref", "fp32", NULL, lora, 8, 4);
    loss_line = NULL;
    CHECK(ok && r.plan->pairs && r.plan->accum == 2 && pref_batch(&r, &pb));
    if (!ok || CASE_FAILED()) {
        teardown(&r);
        return;
    }
    char name[512], err[1024];
    float want[3], want_st[3][3];
    snprintf(name, sizeof name, "%s.loss", key);
    CHECK(st_read_f32(r.expect, st_find(r.expect, name), want, 3, err, sizeof err) == 0);
    snprintf(name, sizeof name, "%s.stats", key);
    CHECK(st_read_f32(r.expect, st_find(r.expect, name), &want_st[0][0], 9, err, sizeof err) == 0);
    double worst_loss = 0, worst_stat = 0, worst_grad = 0, worst_after = 0;
    int grads = 0;
    for (int s = 1; s <= 3 && !CASE_FAILED(); s++) {
        double l = 0, st[PREF_STATS] = {0};
        CHECK(pref_step(&r, &pb, s, NULL, &l, st, NULL));
        CHECK_NEAR(l, want[s - 1], 0, 1e-5);
        worst_loss = fmax(worst_loss, fabs(l - want[s - 1]) / want[s - 1]);
        static const int stat[3] = {PREF_REWARD_CHOSEN, PREF_REWARD_REJECTED, PREF_ACCURACY};
        for (int k = 0; k < 3; k++) {
            double w = want_st[s - 1][k];
            CHECKF(fabs(st[stat[k]] - w) <= 1e-5 + 1e-4 * fabs(w), "%s step %d stat %d: %.7g, torch %.7g", key,
                   s, k, st[stat[k]], w);
            worst_stat = fmax(worst_stat, fabs(st[stat[k]] - w));
        }
        if (s == 1)
            grads = pref_compare(&r, PK_GRAD, key, "grad", &worst_grad);
        CHECK(pref_update(&r, s));
    }
    int params = pref_compare(&r, PK_PARAM, key, "after", &worst_after);
    printf("  qwen2_pref %-8s loss %.7f %.7f %.7f (max rel err %.1e, tolerance 1e-05), rewards within %.1e; "
           "%d gradients at step 1 worst max rel err %.2e, %d weights after 3 steps %.2e (tolerance 1e-04)\n",
           key, want[0], want[1], want[2], worst_loss, worst_stat, grads, worst_grad, params, worst_after);
    teardown(&r);
}

static void test_pref_dpo(void) {
    pref_case("dpo", "  loss = dpo(forward(tokens), next(tokens), beta = 0.5, label_smoothing = 0.1, reference = copy)",
              NULL);
}
static void test_pref_ipo(void) {
    pref_case("ipo", "  loss = ipo(forward(tokens), next(tokens), beta = 0.5, reference = copy)", NULL);
}
static void test_pref_orpo(void) {
    pref_case("orpo", "  loss = orpo(forward(tokens), next(tokens), beta = 0.5)", NULL);
}
static void test_pref_simpo(void) {
    pref_case("simpo", "  loss = simpo(forward(tokens), next(tokens), beta = 2.0, gamma = 0.5, label_smoothing = 0.1, "
              "alpha = 0.5)", NULL);
}
static void test_pref_dpo_lora(void) {
    pref_case("dpo_lora", "  loss = dpo(forward(tokens), next(tokens), beta = 0.5, reference = lora_off)",
              "  lora(r = 4, alpha = 8, dropout = 0.0, targets = [q_proj, v_proj])");
}

// Every adapter's B zeroed, the frozen copy's as well: LoRA as it starts (PEFT's and ftc's
// initialisation), where the base with its adapters is the base.
static void zero_lora_b(Run *r) {
    for (int i = 0; i < r->plan->nbuf; i++) {
        const PlanBuffer *b = &r->plan->buf[i];
        if (b->kind != PK_PARAM || !strstr(b->hf, "lora_B"))
            continue;
        float *z = calloc((size_t)plan_elems(b), sizeof(float));
        rt_write_f32(&r->x, i, z);
        free(z);
    }
}

// The reference phase of a precomputed reference over pb, each row's sum of its trained
// targets' log-probabilities (in double, as runtime/reference.c sums them) into sums [8];
// its log-probabilities into lp [8, 12].
static bool pref_precompute(Run *r, const PrefBatch *pb, float *sums, float *lp) {
    char err[1024];
    const PlanBuffer *ro = plan_role(r->plan, PR_REF_OUT);
    int64_t rows = r->plan->micro_batch, S = r->plan->seq;
    static const float none[8];
    for (int64_t m = 0; m < r->plan->accum; m++) {
        r->x.micro = m;
        pref_write(r, pb, m, none);
        if (!ro || rt_exec_phase(&r->x, PHASE_REF, err, sizeof err) != 0)
            return printf("  the reference phase: %s\n", ro ? err : "no ref_out"), false;
        rt_read_f32(&r->x, ro->id, lp + m * rows * S);
    }
    for (int64_t b = 0; b < rows * r->plan->accum; b++) {
        double sum = 0;
        for (int64_t t = 0; t < S; t++)
            if (pb->targets[b * S + t] >= 0)
                sum += lp[b * S + t];
        sums[b] = (float)sum;
    }
    return true;
}

// The reference of a LoRA run three ways over 3 steps of dpo (ref/qwen2_pref's batch, its
// adapters' B zero as LoRA starts, the policy moving from the second step): the base without
// its adapters (lora_off) and a frozen copy of the initial weights (copy: the base's, the
// reference running no adapter) give the same log-probabilities bit for bit at every step,
// and so the same loss; the reference phase (precomputed) gives lora_off's log-probabilities
// bit for bit, its loss within the rounding of each row's sum to a float.
static void test_pref_reference_modes(void) {
    static const char *const modes[3] = {"lora_off", "copy", "precomputed"};
    Run r[3];
    PrefBatch pb;
    bool ok = true;
    for (int k = 0; k < 3; k++) {
        char loss[256];
        snprintf(loss, sizeof loss, "  loss = dpo(forward(tokens), next(tokens), beta = 0.5, reference = %s)",
                 modes[k]);
        loss_line = loss;
        ok &= setup_full(&r[k], "qwen2_pref", "fp32", NULL,
                         "  lora(r = 4, alpha = 8, dropout = 0.0, targets = [q_proj, v_proj])", 8, 4);
        loss_line = NULL;
        ok = ok && r[k].plan->accum == 2 && pref_batch(&r[k], &pb);
        if (ok)
            zero_lora_b(&r[k]);
    }
    CHECK(ok);
    float sums[8], pre_lp[8 * 12], lp[2][8 * 12];
    ok = ok && pref_precompute(&r[2], &pb, sums, pre_lp);
    CHECK(ok);
    double worst_pre = 0, loss[3] = {0};
    int same_lp = 0, same_loss = 0;
    for (int s = 1; s <= 3 && ok && !CASE_FAILED(); s++) {
        double st[PREF_STATS];
        for (int k = 0; k < 3; k++) {
            ok &= pref_step(&r[k], &pb, s, sums, &loss[k], st, k < 2 ? lp[k] : NULL);
            ok &= pref_update(&r[k], s);
        }
        CHECK(ok);
        int trained = 0, real = 0;   // (not the poison of a buffer past its lifetime)
        for (int i = 0; i < 8 * 12; i++)
            if (pb.targets[i] >= 0)
                trained++, real += isfinite(lp[0][i]) && lp[0][i] < 0 && isfinite(pre_lp[i]);
        CHECKF(real == trained && trained > 0, "step %d: %d of %d trained targets' reference log-probabilities "
               "finite and negative", s, real, trained);
        same_lp += memcmp(lp[0], lp[1], sizeof lp[0]) == 0;
        same_loss += memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0;
        CHECKF(memcmp(lp[0], lp[1], sizeof lp[0]) == 0, "step %d: lora_off's and copy's ref.logprobs differ", s);
        CHECKF(loss[0] == loss[1], "step %d: lora_off's loss %.9g, copy's %.9g", s, loss[0], loss[1]);
        CHECKF(memcmp(lp[0], pre_lp, sizeof pre_lp) == 0, "step %d: the reference phase's log-probabilities "
               "are not lora_off's", s);
        CHECK_NEAR(loss[2], loss[0], 1e-6, 1e-6);
        worst_pre = fmax(worst_pre, fabs(loss[2] - loss[0]));
    }
    printf("  qwen2_pref dpo, LoRA: the reference's log-probabilities bitwise lora_off's and copy's at %d of 3 "
           "steps (the losses at %d, the last %.7f), the reference phase's lora_off's; precomputed's loss within "
           "%.1e of lora_off's (tolerance 1e-6 + 1e-6 relative)\n", same_lp, same_loss, loss[0], worst_pre);
    for (int k = 0; k < 3; k++)
        teardown(&r[k]);
}

// PEFT's LoRA (r = 4, alpha = 8 on q_proj, v_proj): logits, loss and the adapters' gradients.
static void test_qwen2_peft_lora_fp32(void) {
    run_both("qwen2_tiny_lora", "fp32", 1e-4,
             "  lora(r = 4, alpha = 8, dropout = 0.0, targets = [q_proj, v_proj])");
}
static void test_llama_tied_fp32(void) { run_case("llama_tiny_tied", "fp32", 1e-4); }
static void test_llama_gqa_fp32(void) { run_case("llama_tiny_gqa_untied", "fp32", 1e-4); }
static void test_qwen2_bf16(void) { run_case("qwen2_tiny", "bf16", 0); }
static void test_llama_tied_bf16(void) { run_case("llama_tiny_tied", "bf16", 0); }
static void test_llama_gqa_bf16(void) { run_case("llama_tiny_gqa_untied", "bf16", 0); }

int main(int argc, char **argv) {
    if (argc > 1)
        refdir = argv[1];
    if (argc > 2)
        traindir = argv[2];
    RUN(test_qwen2_fp32);
    RUN(test_qwen2_masked_accumulated_fp32);
    RUN(test_qwen2_packed_fp32);
    RUN(test_eval_phase);
    RUN(test_llama_tied_fp32);
    RUN(test_llama_gqa_fp32);
    RUN(test_qwen2_peft_lora_fp32);
    RUN(test_qwen2_bf16);
    RUN(test_llama_tied_bf16);
    RUN(test_llama_gqa_bf16);
    RUN(test_schedules);
    RUN(test_clip10);
    RUN(test_gradscaler);
    RUN(test_llama3);
    RUN(test_qwen2_window);
    RUN(test_qwen3);
    RUN(test_mistral_window);
    RUN(test_gemma);
    RUN(test_gemma2);
    RUN(test_gemma3);
    RUN(test_phi3);
    RUN(test_gpt2);
    RUN(test_neox);
    RUN(test_pref_dpo);
    RUN(test_pref_ipo);
    RUN(test_pref_orpo);
    RUN(test_pref_simpo);
    RUN(test_pref_dpo_lora);
    RUN(test_pref_reference_modes);
    return CHECK_DONE();
}
