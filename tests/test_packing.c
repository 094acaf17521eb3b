// test_packing.c: packing = true against the same records run one by one.
//
//   test_packing
//
// A Qwen2-shaped model (RoPE, GQA, q/k/v biases, SwiGLU; fp32) over three records of 5,
// 7 and 4 tokens. Packed: one window of 16 with the position ids restarting at each
// record (0..4, 0..6, 0..3), which rope turns by and attention masks other records' keys
// with. One by one: each record alone in a plan of its own length without packing, its
// rows at positions 0.. as usual. Both divide the loss by the same count of trained
// targets, so the packed loss is the sum of the records' and every packed gradient the
// sum of theirs (to fp32 rounding: within 1e-5 of the largest element, as BLAS kernels
// of other CPUs sum a GEMM's rows in other orders; 1.5e-6 seen). The same window without packing (keys of earlier
// records seen, positions running on) gives another loss: the comparison can fail.
#include "check.h"
#include "harness.h"

#include <math.h>

static const char *model =
    "model pk {\n"
    "  V = 64  dim = 32  heads = 4  kv = 2  hd = dim / heads  ffn = 40\n"
    "  param embed [V, dim] as \"model.embed_tokens.weight\"\n"
    "  param final_norm [dim] as \"model.norm.weight\"\n"
    "  param lm_head [V, dim] as \"lm_head.weight\"\n"
    "  block decoder(x [B, S, dim]) as \"model.layers.{i}\" {\n"
    "    param n1 [dim] as \"input_layernorm.weight\"\n"
    "    param wq [heads * hd, dim] as \"self_attn.q_proj.weight\"\n"
    "    param bq [heads * hd] as \"self_attn.q_proj.bias\"\n"
    "    param wk [kv * hd, dim] as \"self_attn.k_proj.weight\"\n"
    "    param bk [kv * hd] as \"self_attn.k_proj.bias\"\n"
    "    param wv [kv * hd, dim] as \"self_attn.v_proj.weight\"\n"
    "    param wo [dim, heads * hd] as \"self_attn.o_proj.weight\"\n"
    "    param n2 [dim] as \"post_attention_layernorm.weight\"\n"
    "    param wg [ffn, dim] as \"mlp.gate_proj.weight\"\n"
    "    param wu [ffn, dim] as \"mlp.up_proj.weight\"\n"
    "    param wd [dim, ffn] as \"mlp.down_proj.weight\"\n"
    "    h = rmsnorm(x, n1, 1e-6)\n"
    "    q = rope(view(linear(h, wq, bq), [B, S, heads, hd]), 10000.0)\n"
    "    k = rope(view(linear(h, wk, bk), [B, S, kv, hd]), 10000.0)\n"
    "    v = view(linear(h, wv), [B, S, kv, hd])\n"
    "    x = x + linear(view(attention(q, k, v, causal = true), [B, S, dim]), wo)\n"
    "    h = rmsnorm(x, n2, 1e-6)\n"
    "    return x + linear(silu(linear(h, wg)) * linear(h, wu), wd)\n"
    "  }\n"
    "  forward(tokens i32[B, S]) {\n"
    "    x = repeat(2) decoder(embed[tokens])\n"
    "    return linear(rmsnorm(x, final_norm, 1e-6), lm_head)\n"
    "  }\n"
    "}\n"
    "train {\n"
    "  seq = %d  batch = 1\n"
    "  packing = %s\n"
    "  loss = cross_entropy(forward(tokens), next(tokens))\n"
    "  precision = fp32\n"
    "  optimizer = adamw(lr = 1e-3)\n"
    "}\n";

enum { NREC = 3, S = 16 };
static const int LEN[NREC] = {5, 7, 4};
static int32_t tokens[S], targets[S], positions[S];

static bool compile(Harness *h, int seq, bool packing) {
    char text[4096];
    snprintf(text, sizeof text, model, seq, packing ? "true" : "false");
    return harness_compile(h, packing ? "packed.ft" : "record.ft", text, 1);
}

// Copies every parameter of `from` into `to` by checkpoint name.
static void copy_weights(Harness *to, Harness *from) {
    for (int i = 0; i < to->plan->nbuf; i++) {
        const PlanBuffer *b = &to->plan->buf[i];
        if (b->kind != PK_PARAM)
            continue;
        for (int j = 0; j < from->plan->nbuf; j++)
            if (from->plan->buf[j].kind == PK_PARAM && strcmp(from->plan->buf[j].hf, b->hf) == 0) {
                float *v = malloc(sizeof(float) * (size_t)plan_elems(b));
                rt_read_f32(&from->x, j, v);
                rt_write_f32(&to->x, i, v);
                free(v);
            }
    }
}

// One forward and backward of the tokens and targets from `at` (as many as h's seq), with
// position ids `pos` (NULL: 0..seq-1) and the step's target count; the loss.
static float run(Harness *h, int at, const int32_t *pos, int64_t count) {
    rt_write_raw(&h->x, plan_role(h->plan, PR_TOKENS)->id, tokens + at);
    rt_write_raw(&h->x, plan_role(h->plan, PR_TARGETS)->id, targets + at);
    rt_write_positions(&h->x, pos);
    rt_write_target_count(&h->x, count);
    CHECK(harness_step(h));
    return harness_loss(h);
}

// The gradient of parameter `hf` in h (malloc'd, n elements).
static float *grad_of(Harness *h, const char *hf, int64_t *n) {
    for (int i = 0; i < h->plan->nbuf; i++) {
        const PlanBuffer *g = &h->plan->buf[i];
        if (g->kind == PK_GRAD && strcmp(h->plan->buf[g->of].hf, hf) == 0) {
            *n = plan_elems(g);
            float *v = malloc(sizeof(float) * (size_t)*n);
            rt_read_f32(&h->x, i, v);
            return v;
        }
    }
    return NULL;
}

static void test_packed_equals_one_by_one(void) {
    // Records: random tokens; each record's last target masked (in a packed window it
    // would be the next record's first token), and one more inside the second.
    uint32_t r = 12345;
    int64_t count = 0;
    for (int k = 0, at = 0; k < NREC; at += LEN[k++])
        for (int j = 0; j < LEN[k]; j++) {
            r = r * 1103515245u + 12345u;
            tokens[at + j] = (int32_t)((r >> 16) % 64);
            r = r * 1103515245u + 12345u;
            targets[at + j] = j == LEN[k] - 1 || (k == 1 && j == 2) ? -100 : (int32_t)((r >> 16) % 64);
            positions[at + j] = j;
            count += targets[at + j] >= 0;
        }
    Harness packed, rec[NREC], plain;
    memset(&packed, 0, sizeof packed), memset(&plain, 0, sizeof plain), memset(rec, 0, sizeof rec);
    bool ok = compile(&packed, S, true) && compile(&plain, S, false);
    for (int k = 0; k < NREC; k++)
        ok = compile(&rec[k], LEN[k], false) && ok;
    CHECK(ok);
    if (ok) {
        CHECK(packed.plan->packing && !plain.plan->packing);
        // Seeded weights (matrices N(0, 0.02)) scaled up tenfold, so that attention is
        // sharp enough for the keys it sees to matter.
        rt_weights_init(&packed.x, 7);
        for (int i = 0; i < packed.plan->nbuf; i++) {
            const PlanBuffer *b = &packed.plan->buf[i];
            if (b->kind != PK_PARAM || b->ndim != 2)
                continue;
            float *v = malloc(sizeof(float) * (size_t)plan_elems(b));
            rt_read_f32(&packed.x, i, v);
            for (int64_t j = 0; j < plan_elems(b); j++)
                v[j] *= 10.0f;
            rt_write_f32(&packed.x, i, v);
            free(v);
        }
        copy_weights(&plain, &packed);
        for (int k = 0; k < NREC; k++)
            copy_weights(&rec[k], &packed);
        float lp = run(&packed, 0, positions, count), sum = 0;
        for (int k = 0, at = 0; k < NREC; at += LEN[k++])
            sum += run(&rec[k], at, NULL, count);
        float lplain = run(&plain, 0, NULL, count);
        CHECK_NEAR(lp, sum, 0, 1e-5);
        // every gradient: packed against the sum of the records' (and without packing)
        double worst = 0, apart = 0;
        int grads = 0;
        for (int i = 0; i < packed.plan->nbuf; i++) {
            const PlanBuffer *b = &packed.plan->buf[i];
            if (b->kind != PK_PARAM)
                continue;
            int64_t n = 0, m = 0;
            float *gp = grad_of(&packed, b->hf, &n), *acc = calloc((size_t)n, sizeof(float));
            for (int k = 0; k < NREC; k++) {
                float *gk = grad_of(&rec[k], b->hf, &m);
                CHECK(gk && m == n);
                for (int64_t j = 0; gk && j < n && m == n; j++)
                    acc[j] += gk[j];
                free(gk);
            }
            double diff = 0, mag = 0;
            for (int64_t j = 0; gp && j < n; j++)
                diff = fmax(diff, fabs((double)gp[j] - acc[j])), mag = fmax(mag, fabs((double)acc[j]));
            double e = mag > 0 ? diff / mag : diff;
            float *gq = grad_of(&plain, b->hf, &m);
            double dq = 0;
            for (int64_t j = 0; gq && j < n && m == n; j++)
                dq = fmax(dq, fabs((double)gq[j] - acc[j]));
            apart = fmax(apart, mag > 0 ? dq / mag : 0);
            free(gq);
            CHECKF(e <= 1e-5, "%s: packed gradient %.3g (max rel) from the records' sum", b->hf, e);
            worst = fmax(worst, e);
            grads += gp != NULL;
            free(gp), free(acc);
        }
        CHECK(grads >= 20);
        CHECKF(apart > 0.1, "without packing the gradients are %.3g from the records' sum", apart);
        printf("  packed loss %.7f, records one by one %.7f (without packing %.7f); %d gradients: worst max "
               "rel err %.2e (without packing %.2f)\n", lp, sum, lplain, grads, worst, apart);
    }
    harness_free(&packed);
    harness_free(&plain);
    for (int k = 0; k < NREC; k++)
        harness_free(&rec[k]);
}

int main(void) {
    RUN(test_packed_equals_one_by_one);
    return CHECK_DONE();
}
