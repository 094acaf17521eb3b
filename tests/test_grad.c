// test_grad.c — finite differences through the whole pipeline, one case per op:
// a small fp32 program runs the op on trainable parameters; ftc compiles it
// (elaborate, autodiff with the op table's derivative rules, plan), the cpu backend
// runs forward and backward, and every parameter gradient is compared with central
// differences of the loss. This checks the derivative rules (the IR level); the
// kernels' own finite-difference checks are in test_runtime.c.
//
// Step h = 1e-2 on parameters of magnitude ~0.5; a gradient element passes when
// |analytic - numeric| <= 2e-3 + 2e-2 * |numeric| (fp32 forward, O(h²) truncation).
#include "check.h"
#include "harness.h"

static const char *prelude =
    "model g {\n"
    "  V = 7  D = 4\n"
    "  param emb [V, D] as \"emb\"\n"
    "  param w1 [D, D] as \"w1\"\n"
    "  param w2 [D, D] as \"w2\"\n"
    "  param w3 [2, D] as \"w3\"\n"
    "  param b [D] as \"b\"\n"
    "  param n [D] as \"n\"\n"
    "  forward(tokens i32[B, S]) {\n"
    "    x = emb[tokens]\n";

static const char *postlude =
    "    return linear(y, emb)\n"
    "  }\n"
    "}\n"
    "train {\n"
    "  seq = 3  batch = 2\n"
    "  loss = cross_entropy(forward(tokens), next(tokens))\n"
    "  precision = fp32\n"
    "  optimizer = adamw(lr = 1e-3)\n"
    "}\n";

static uint64_t rng = 88172645463325252ull;
static double urand(void) {   // xorshift64, in [0, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}

// Runs the case `body` (statements computing y [B, S, D] from x); returns the worst
// absolute error seen, or -1 after a failure to compile or run.
static const char *train_extra = "";   // lines added to the train section (a case's own)

static const char *loss_expr = NULL;   // the train section's loss in place of cross_entropy's

static double check_case(const char *name, const char *body) {
    char text[4096], post[1024];
    const char *ce = "cross_entropy(forward(tokens), next(tokens))", *l = strstr(postlude, ce);
    snprintf(post, sizeof post, "%.*s%s%s", (int)(l - postlude), postlude, loss_expr ? loss_expr : ce,
             l + strlen(ce));
    const char *at = strstr(post, "  optimizer");
    snprintf(text, sizeof text, "%s%s%.*s%s%s", prelude, body, (int)(at - post), post, train_extra, at);
    Harness h;
    double worst = -1;
    if (!harness_compile(&h, name, text, 2)) {
        CHECK(!"compiles");
        harness_free(&h);
        return -1;
    }
    const Plan *p = h.plan;
    // Parameters uniform in [-0.5, 0.5] (norm weights around 1), a fixed batch.
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->kind != PK_PARAM)
            continue;
        int64_t n = plan_elems(b);
        float *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t k = 0; k < n; k++)
            v[k] = (float)(urand() - 0.5) + (strcmp(b->hf, "n") == 0 ? 1.0f : 0.0f);
        rt_write_f32(&h.x, i, v);
        free(v);
    }
    // The batch; refilled before every forward, as the runtime does each micro-step
    // (the plan may reuse its bytes once backward no longer needs them).
    const PlanRole roles[2] = {PR_TOKENS, PR_TARGETS};
    int32_t batch[2][64];
    for (int r = 0; r < 2; r++)
        for (int64_t k = 0; k < plan_elems(plan_role(p, roles[r])); k++)
            batch[r][k] = (int32_t)(urand() * 7);
    // Pairs (rows 0 and 1 a chosen and a rejected completion): the chosen row's first
    // target untrained, as a prompt's; the counts of the step's pairs and chosen targets.
    int32_t pair_counts[2] = {1, (int32_t)p->seq - 1};
    if (p->pairs)
        batch[1][0] = -100;
#define LOAD_BATCH()                                                                    \
    do {                                                                                \
        for (int r = 0; r < 2; r++)                                                     \
            rt_write_raw(&h.x, plan_role(p, roles[r])->id, batch[r]);                   \
        rt_write_positions(&h.x, NULL);                                                 \
        if (p->pairs)                                                                   \
            rt_write_raw(&h.x, plan_role(p, PR_TARGET_COUNT)->id, pair_counts);         \
        else                                                                            \
            rt_write_target_count(&h.x, -1);                                            \
    } while (0)
    LOAD_BATCH();
    if (!harness_step(&h)) {
        CHECK(!"runs");
        harness_free(&h);
        return -1;
    }
    worst = 0;
    int checked = 0;
    char err[512];
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *g = &p->buf[i];
        if (g->kind != PK_GRAD)
            continue;
        int64_t n = plan_elems(g);
        float *an = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n);
        rt_read_f32(&h.x, i, an);
        rt_read_f32(&h.x, g->of, w);
        for (int64_t k = 0; k < n; k++) {
            const float step = 1e-2f, keep = w[k];
            float l[2];
            for (int s = 0; s < 2; s++) {
                w[k] = keep + (s ? -step : step);
                rt_write_f32(&h.x, g->of, w);
                LOAD_BATCH();
                CHECK(rt_exec_phase(&h.x, PHASE_FWD, err, sizeof err) == 0);
                l[s] = harness_loss(&h);
            }
            w[k] = keep;
            rt_write_f32(&h.x, g->of, w);
            double num = ((double)l[0] - l[1]) / (2.0 * step), e = fabs(an[k] - num);
            if (e > worst)
                worst = e;
            if (e > 2e-3 + 2e-2 * fabs(num))
                printf("  %s: d loss / d %s[%lld]: analytic %.6f, numeric %.6f\n", name,
                       p->buf[g->of].hf, (long long)k, an[k], num);
            CHECK(e <= 2e-3 + 2e-2 * fabs(num));
            checked++;
        }
        free(an), free(w);
    }
    CHECK(checked > 0);
    printf("  %-12s %4d gradient elements, worst |analytic - numeric| %.2e\n", name, checked, worst);
    harness_free(&h);
    return worst;
}

#define CASE(fn, name, body) static void fn(void) { check_case(name, body); }

// LoRA on w1 and w2: each path's B product added into its base output by linear_acc (its
// derivative rule: the output's gradient passed to y, and linear's of scale x dy to x and
// B), A and B checked; alpha / r = 3 so the scale is not a power of two.
static void test_lora_acc(void) {
    train_extra = "  lora(r = 2, alpha = 6, targets = [w1, w2])\n";
    check_case("linear_acc", "    y = linear(x, w1) + linear(silu(x), w2)\n");
    train_extra = "";
}

// The preference losses over one pair (rows 0 and 1); dpo's and ipo's reference a frozen
// copy (perturbing the policy's parameters leaves it as it is: no gradient reaches it), or
// with LoRA the base alone; beta large enough for gradients finite differences resolve.
static void pref_case(const char *name, const char *loss) {
    loss_expr = loss;
    check_case(name, "    y = silu(linear(x, w1)) * linear(x, w2)\n");
    loss_expr = NULL;
}
static void test_dpo(void) {
    pref_case("dpo", "dpo(forward(tokens), next(tokens), beta = 2.0, label_smoothing = 0.1)");
    harness_unfused_loss = true;   // the logits whole: logprobs and its backward, not the fused op
    pref_case("dpo-unfused", "dpo(forward(tokens), next(tokens), beta = 2.0, label_smoothing = 0.1)");
    harness_unfused_loss = false;
}
static void test_ipo(void) { pref_case("ipo", "ipo(forward(tokens), next(tokens), beta = 0.5)"); }
static void test_orpo(void) { pref_case("orpo", "orpo(forward(tokens), next(tokens), beta = 0.5)"); }
static void test_simpo(void) {
    pref_case("simpo", "simpo(forward(tokens), next(tokens), beta = 2.0, gamma = 0.3, label_smoothing = 0.2, alpha = 0.5)");
}
static void test_dpo_lora(void) {   // the reference: the same base, its LoRA paths left out
    train_extra = "  lora(r = 2, alpha = 6, targets = [w1, w2])\n";
    pref_case("dpo-lora", "dpo(forward(tokens), next(tokens), beta = 2.0, reference = lora_off)");
    train_extra = "";
}

CASE(test_linear, "linear", "    y = linear(x, w1) + linear(silu(x), w2)\n")
CASE(test_bias_broadcast, "add+b", "    y = x + b\n")
CASE(test_sub, "sub", "    y = x - linear(x, w1) * 0.5\n")
CASE(test_mul, "mul", "    y = x * linear(x, w1) * b\n")
CASE(test_div, "div", "    y = x / exp(linear(x, w1)) + x / exp(b)\n")
CASE(test_scale_neg, "scale", "    y = -x * 3.0 + x / 4.0\n")
CASE(test_exp, "exp", "    y = exp(linear(x, w1))\n")
CASE(test_gelu, "gelu", "    y = gelu(linear(x, w1))\n")
CASE(test_silu, "silu", "    y = silu(linear(x, w1)) * linear(x, w2)\n")
CASE(test_softmax, "softmax", "    y = softmax(linear(x, w1))\n")
CASE(test_rmsnorm, "rmsnorm", "    y = rmsnorm(linear(x, w1), n, 1e-5)\n")
CASE(test_layernorm, "layernorm", "    y = layernorm(linear(x, w1), n, b, 1e-5)\n")
CASE(test_rope, "rope", "    y = view(rope(view(linear(x, w1), [B, S, 2, 2]), 100.0), [B, S, D])\n")
CASE(test_rope_positions, "rope(pos)",
     "    y = view(rope(view(linear(x, w1), [B, S, 2, 2]), positions, 100.0), [B, S, D])\n")
CASE(test_positions_embed, "emb[pos]", "    y = linear(x + emb[positions], w1)\n")
CASE(test_slice_concat, "slice+cat",
     "    y = concat(slice(linear(x, w1), 2, 2, 2), slice(x, dim = -1, start = 0, size = 2), dim = 2)\n")
CASE(test_slice_view, "slice(view)",   // rows of parameters: views at an offset
     "    y = linear(x, concat(slice(w1, 0, 0, 2), slice(w2, 0, 1, 2), dim = 0)) + x * slice(b, 0, 0, 4)\n")
CASE(test_tanh, "tanh", "    y = tanh(linear(x, w1))\n")
CASE(test_softcap, "softcap", "    y = softcap(linear(x, w1) * 3.0, 2.0)\n")
CASE(test_gelu_exact, "gelu_exact", "    y = gelu_exact(linear(x, w1))\n")
CASE(test_matmul_2d, "matmul[K,N]", "    y = matmul(x, w1) + matmul(silu(x), w2)\n")
CASE(test_rmsnorm_offset, "rmsnorm+1", "    y = rmsnorm(linear(x, w1), b, 1e-5, offset = 1.0)\n")
CASE(test_matmul_transpose, "matmul",
     "    t = transpose(linear(x, w1), [1, 2])\n"
     "    y = matmul(matmul(x, t), linear(x, w2))\n")
CASE(test_attention_gqa, "attention",
     "    q = view(linear(x, w1), [B, S, 2, 2])\n"
     "    k = view(linear(x, w3), [B, S, 1, 2])\n"
     "    v = view(linear(x, w3) * 2.0, [B, S, 1, 2])\n"
     "    y = x + view(attention(q, k, v, causal = true), [B, S, D])\n")
CASE(test_attention_full, "attention-nc",
     "    q = view(linear(x, w1), [B, S, 2, 2])\n"
     "    k = view(linear(x, w2), [B, S, 2, 2])\n"
     "    y = view(attention(q, k, k, causal = false), [B, S, D])\n")
CASE(test_attention_options, "attention-w",   // a window shorter than seq (3), a cap, a scale
     "    q = view(linear(x, w1), [B, S, 2, 2])\n"
     "    k = view(linear(x, w3), [B, S, 1, 2])\n"
     "    v = view(linear(x, w3) * 2.0, [B, S, 1, 2])\n"
     "    y = x + view(attention(q, k, v, causal = true, window = 2, softcap = 0.8, scale = 1.5), [B, S, D])\n")
CASE(test_dropout, "dropout", "    y = dropout(linear(x, w1), 0.3)\n")
CASE(test_reuse, "reuse", "    h = linear(x, w1)\n    y = h * h + h\n")

int main(void) {
    RUN(test_linear);
    RUN(test_bias_broadcast);
    RUN(test_sub);
    RUN(test_mul);
    RUN(test_div);
    RUN(test_scale_neg);
    RUN(test_exp);
    RUN(test_gelu);
    RUN(test_silu);
    RUN(test_softmax);
    RUN(test_rmsnorm);
    RUN(test_layernorm);
    RUN(test_rope);
    RUN(test_rope_positions);
    RUN(test_positions_embed);
    RUN(test_matmul_transpose);
    RUN(test_slice_concat);
    RUN(test_slice_view);
    RUN(test_tanh);
    RUN(test_softcap);
    RUN(test_gelu_exact);
    RUN(test_matmul_2d);
    RUN(test_rmsnorm_offset);
    RUN(test_attention_gqa);
    RUN(test_attention_full);
    RUN(test_attention_options);
    RUN(test_dropout);
    RUN(test_reuse);
    RUN(test_lora_acc);
    RUN(test_dpo);
    RUN(test_ipo);
    RUN(test_orpo);
    RUN(test_simpo);
    RUN(test_dpo_lora);
    return CHECK_DONE();
}
