// test_kernels.c — every generated kernel against the cpu backend, instruction by
// instruction (with --device cuda on a GPU, or --device sim on the simulated driver of
// fake_cuda.c, against the cuda backend, GEMMs included). A program is compiled (its plan directory holds kernels.cu and
// ftc_emu.h), its plan laid out twice: on the cpu backend and on the emu backend (the
// generated kernels compiled for the CPU). The cpu run goes through a whole step; before
// each instruction the emu run receives the very bytes the instruction will read, runs
// it through its kernels, and its outputs are compared with the cpu backend's.
//
// Shapes are small and odd on purpose: head_dim 80, sequence 33, vocabulary 300 (not a
// multiple of 32), GQA 2:1, rows not a multiple of any block. One line per op: the worst
// error over all its instructions, scaled by the largest magnitude of the reference
// output, and whether every output was bitwise equal. The tolerance is stated per
// output dtype: 2^-7 for bf16 and f16 (two ulps of the largest element), 1e-5 for f32,
// and 2^-6 for attention's bf16 outputs (its tensor-core path rounds the probabilities
// and the score gradients to bf16 before the second product, as FlashAttention-2 does);
// kernels whose arithmetic is the cpu backend's, operation for operation (elementwise
// ops, the embedding and its gradient, dropout, NF4, the optimizers) must be equal, element
// for element (the same bits but for the sign of a zero, which a GPU's order of operations
// may give otherwise; the table counts the outputs bitwise equal as well). A
// grouped launch (the optimizer over many tensors) runs at its first instruction with
// every member's inputs, and each member's outputs are compared at the member.
//
//     test_kernels SRC [--device emu|sim|cuda] [CASE...]   (the cases named, else all)
#include "check.h"
#include "fake_cuda.h"
#include "harness.h"
#include "../runtime/nvrtc.h"

#include <math.h>

// A Qwen2-shaped block at odd sizes, LoRA with dropout on q and v; q's rope reads the
// position ids, k's its rows' indices.
static const char *qwen_odd =
    "model odd {\n"
    "  vocab = 300  dim = 160  heads = 2  kv_heads = 1  head_dim = 80  ffn = 200\n"
    "  param embed [vocab, dim] as \"model.embed_tokens.weight\"\n"
    "  param final_norm [dim] as \"model.norm.weight\"\n"
    "  param lm_head [vocab, dim] as \"lm_head.weight\"\n"
    "  block decoder(x [B, S, dim]) as \"model.layers.{i}\" {\n"
    "    param attn_norm [dim] as \"input_layernorm.weight\"\n"
    "    param wq [heads * head_dim, dim] as \"self_attn.q_proj.weight\"\n"
    "    param bq [heads * head_dim] as \"self_attn.q_proj.bias\"\n"
    "    param wk [kv_heads * head_dim, dim] as \"self_attn.k_proj.weight\"\n"
    "    param wv [kv_heads * head_dim, dim] as \"self_attn.v_proj.weight\"\n"
    "    param wo [dim, heads * head_dim] as \"self_attn.o_proj.weight\"\n"
    "    param mlp_norm [dim] as \"post_attention_layernorm.weight\"\n"
    "    param wg [ffn, dim] as \"mlp.gate_proj.weight\"\n"
    "    param wu [ffn, dim] as \"mlp.up_proj.weight\"\n"
    "    param wd [dim, ffn] as \"mlp.down_proj.weight\"\n"
    "    h = rmsnorm(x, attn_norm, 1e-6)\n"
    "    q = rope(view(linear(h, wq, bq), [B, S, heads, head_dim]), positions, 10000.0)\n"
    "    k = rope(view(linear(h, wk), [B, S, kv_heads, head_dim]), 10000.0)\n"
    "    v = view(linear(h, wv), [B, S, kv_heads, head_dim])\n"
    "    a = attention(q, k, v, causal = true)\n"
    "    x = x + linear(view(a, [B, S, heads * head_dim]), wo)\n"
    "    h = rmsnorm(x, mlp_norm, 1e-6)\n"
    "    return x + linear(silu(linear(h, wg)) * linear(h, wu), wd)\n"
    "  }\n"
    "  forward(tokens i32[B, S]) {\n"
    "    x = repeat(2) decoder(embed[tokens])\n"
    "    return linear(rmsnorm(x, final_norm, 1e-6), lm_head)\n"
    "  }\n"
    "}\n"
    "train {\n"
    "  seq = 33  batch = 2\n"
    "  loss = cross_entropy(forward(tokens), next(tokens))\n"
    "  precision = bf16\n"
    "  optimizer = adamw(lr = 1e-3, weight_decay = 0.01)\n"
    "%s"
    "}\n";

// The other ops: a position table read at the position ids, LayerNorm with bias, GELU,
// softmax, transpose, matmul, exp, div, sub, scale, a broadcast bias (sum_to), non-causal
// attention; fp16 storage, SGD.
static const char *ops_fp16 =
    "model ops {\n"
    "  V = 300  D = 96  H = 3  HD = 32\n"
    "  param emb [V, D] as \"emb\"\n"
    "  param w1 [D, D] as \"w1\"\n"
    "  param w2 [D, D] as \"w2\"\n"
    "  param b [D] as \"b\"\n"
    "  param n [D] as \"n\"\n"
    "  param pe [40, D] as \"pe\"\n"
    "  param c [D] as \"c\"\n"
    "  forward(tokens i32[B, S]) {\n"
    "    x = emb[tokens] + pe[positions]\n"
    "    h = layernorm(x, n, b, 1e-5)\n"
    "    g = gelu(linear(h, w1)) * exp(c) + b\n"
    "    s = softmax(linear(g, w2))\n"
    "    t = transpose(view(s, [B, S, H, HD]), [1, 2])\n"
    "    m = matmul(t, transpose(t, [2, 3]))\n"
    "    e = view(matmul(exp(m * 0.1) / (exp(m * 0.05) * 2.0), t), [B, S, D]) - x * 0.5\n"
    "    q = view(e, [B, S, H, HD])\n"
    "    y = view(attention(q, q, q), [B, S, D]) + e\n"
    "    return linear(y, emb)\n"
    "  }\n"
    "}\n"
    "train {\n"
    "  seq = 33  batch = 2\n"
    "  loss = cross_entropy(forward(tokens), next(tokens))\n"
    "  precision = fp16\n"
    "  optimizer = sgd(lr = 0.1)\n"
    "}\n";

// The ops of GPT-2, Phi-3 and Gemma at odd sizes: a fused qkv cut into q, k, v (slices
// along the last dim: copies), rows of a weight (a slice along dim 0: a view), concat, a
// product by a 2-D weight [in, out] (and its gradient over every row), GeLU exact and
// tanh, soft-capping, tanh, (1 + w) RMSNorm, rope scaled as Llama 3.1 does and partial with
// YaRN; bf16.
static const char *new_ops =
    "model newops {\n"
    "  V = 300  D = 72  H = 3  HD = 24  F = 50\n"
    "  param emb [V, D] as \"emb\"\n"
    "  param wqkv [3 * D, D] as \"wqkv\"\n"
    "  param wc [D, 2 * F] as \"wc\"\n"
    "  param bc [2 * F] as \"bc\"\n"
    "  param wp [F, D] as \"wp\"\n"
    "  param n [D] as \"n\"\n"
    "  forward(tokens i32[B, S]) {\n"
    "    x = emb[tokens]\n"
    "    h = rmsnorm(x, n, 1e-6, offset = 1.0)\n"
    "    qkv = linear(h, wqkv)\n"
    "    q = rope(view(slice(qkv, 2, 0, D), [B, S, H, HD]), positions, 500000.0, scaling = llama3,\n"
    "             factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max = 16)\n"
    "    k = rope(view(slice(qkv, 2, D, D), [B, S, H, HD]), 10000.0, rotary = 8, scaling = yarn,\n"
    "             factor = 4.0, original_max = 8)\n"
    "    v = view(linear(h, slice(wqkv, 0, 2 * D, D)), [B, S, H, HD])\n"
    "    a = view(attention(q, k, v, causal = true), [B, S, D])\n"
    "    u = matmul(a, wc) + bc\n"
    "    g = gelu_exact(slice(u, 2, 0, F)) * gelu(slice(u, 2, F, F))\n"
    "    y = concat(matmul(g, wp), tanh(x), dim = 2)\n"
    "    z = slice(y, 2, D / 2, D) + x\n"
    "    return softcap(linear(z, emb), 30.0)\n"
    "  }\n"
    "}\n"
    "train {\n"
    "  seq = 33  batch = 2\n"
    "  loss = cross_entropy(forward(tokens), next(tokens))\n"
    "  precision = bf16\n"
    "  optimizer = adamw(lr = 1e-3)\n"
    "}\n";

// GPT-2's block at odd sizes, QLoRA on its Conv1D weights stored [in, out] (c_attn): the
// NF4 base dequantised for a matmul, the adapters as PEFT's fan_in_fan_out.
static const char *gpt2_qlora =
    "model g {\n"
    "  V = 300  D = 72  H = 3  HD = 24  F = 100\n"
    "  param wte [V, D] as \"wte.weight\"\n"
    "  param wpe [40, D] as \"wpe.weight\"\n"
    "  block decoder(x [B, S, D]) as \"h.{i}\" {\n"
    "    param ln_w [D] as \"ln_1.weight\"\n"
    "    param ln_b [D] as \"ln_1.bias\"\n"
    "    param attn_w [D, 3 * D] as \"attn.c_attn.weight\"\n"
    "    param attn_b [3 * D] as \"attn.c_attn.bias\"\n"
    "    param fc_w [D, F] as \"mlp.c_fc.weight\"\n"
    "    param out_w [F, D] as \"mlp.c_proj.weight\"\n"
    "    qkv = matmul(layernorm(x, ln_w, ln_b, 1e-5), attn_w) + attn_b\n"
    "    q = view(slice(qkv, 2, 0, D), [B, S, H, HD])\n"
    "    k = view(slice(qkv, 2, D, D), [B, S, H, HD])\n"
    "    v = view(slice(qkv, 2, 2 * D, D), [B, S, H, HD])\n"
    "    x = x + view(attention(q, k, v, causal = true), [B, S, D])\n"
    "    return x + matmul(gelu(matmul(x, fc_w)), out_w)\n"
    "  }\n"
    "  forward(tokens i32[B, S]) {\n"
    "    return linear(repeat(2) decoder(wte[tokens] + wpe[positions]), wte)\n"
    "  }\n"
    "}\n"
    "train {\n"
    "  seq = 33  batch = 2\n"
    "  loss = cross_entropy(forward(tokens), next(tokens))\n"
    "  precision = bf16\n"
    "  optimizer = adamw(lr = 1e-3)\n"
    "  lora(r = 4, alpha = 8, dropout = 0.1, targets = [c_attn, c_fc])\n"
    "  quantize(nf4, double_quant = true)\n"
    "}\n";

// Attention alone at one head dim: bf16, GQA 2:1, causal (or the attributes given). Head
// dims that are multiples of 16 up to 256 take the tensor-core kernels, the others the
// warp-per-row ones.
static const char *attention_hd =
    "model att {\n"
    "  V = 300  H = 2  KV = 1  HD = %d  D = H * HD\n"
    "  param emb [V, D] as \"emb\"\n"
    "  param wk [KV * HD, D] as \"wk\"\n"
    "  param wv [KV * HD, D] as \"wv\"\n"
    "  forward(tokens i32[B, S]) {\n"
    "    x = emb[tokens]\n"
    "    q = view(x, [B, S, H, HD])\n"
    "    k = view(linear(x, wk), [B, S, KV, HD])\n"
    "    v = view(linear(x, wv), [B, S, KV, HD])\n"
    "    return linear(view(attention(q, k, v, %s), [B, S, D]), emb)\n"
    "  }\n"
    "}\n"
    "train {\n"
    "  seq = 37  batch = 1\n"
    "  loss = cross_entropy(forward(tokens), next(tokens))\n"
    "  precision = bf16\n"
    "  optimizer = adamw(lr = 1e-3)\n"
    "}\n";

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t urand32(void);

// The decode phase's token and a position past its caches' first rows, the caches holding
// earlier tokens' values (random): the kernels then attend to 18 rows each.
static void decode_inputs(Exec *x) {
    const Plan *p = x->plan;
    if (!plan_role(p, PR_DECODE_TOKEN) || !plan_role(p, PR_DECODE_POS))
        return;
    int32_t tok = (int32_t)(urand32() % (uint32_t)p->vocab), pos = 17;
    rt_write_raw(x, plan_role(p, PR_DECODE_TOKEN)->id, &tok);
    rt_write_raw(x, plan_role(p, PR_DECODE_POS)->id, &pos);
    for (int b = 0; b < p->nbuf; b++) {
        if (p->buf[b].kind != PK_CACHE)
            continue;
        int64_t n = plan_elems(&p->buf[b]);
        float *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++)
            v[i] = (float)(urand32() >> 8) / 16777216.0f - 0.5f;
        rt_write_f32(x, b, v);
        free(v);
    }
}

static uint32_t urand32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

typedef struct OpStat {
    int count, bitwise;             // outputs compared, of them bitwise equal
    double worst;                   // max |emu - cpu| / max |cpu|, over the outputs
    double tolerance;               // the loosest tolerance of its outputs
} OpStat;

static OpStat stats[OP_COUNT];
// --device cuda: the kernels and cuBLASLt's GEMMs on a real GPU; --device sim: the cuda
// backend on the simulated driver (tests/fake_cuda.c: the same kernels on the CPU, its
// GEMMs computed from the cuBLASLt descriptors the backend builds).
static bool on_gpu, on_sim;
static int in_fused[OP_COUNT];   // steps of fused kernels, per op
// The next lockstep's gradients overflow (fp16 under a huge loss scale): grad_factor must
// skip the step on both backends, every parameter as it was before the optimizer phase.
static bool expect_skip;
static int grouped[OP_COUNT];    // instructions in grouped launches, per op

// Whether op's kernels compute what the cpu backend computes, operation for operation.
static bool exact(OpKind op) {
    OpClass c = op_desc(op)->cls;
    return c == OPC_ELEMENTWISE || c == OPC_GATHER || c == OPC_OPTIMIZER || c == OPC_MOVEMENT;
}

// Copies buffer `id`'s bytes from the cpu run to the emu run.
static void transfer(Exec *from, Exec *to, int id) {
    const PlanBuffer *b = &from->plan->buf[id];
    size_t n = (size_t)plan_dtype_bytes(b->dtype, plan_elems(b));
    void *tmp = malloc(n + 1);
    rt_read_raw(from, id, tmp);
    rt_write_raw(to, id, tmp);
    free(tmp);
}

// Compares output `id` after instruction `in` ran on both; records it under the op.
static void compare(Exec *cpu, Exec *emu, const PlanInstr *in, int id) {
    const PlanBuffer *b = &cpu->plan->buf[id];
    size_t bytes = (size_t)plan_dtype_bytes(b->dtype, plan_elems(b));
    char *x = malloc(bytes + 1), *y = malloc(bytes + 1);
    rt_read_raw(cpu, id, x);
    rt_read_raw(emu, id, y);
    OpStat *s = &stats[in->op];
    s->count++;
    bool same = memcmp(x, y, bytes) == 0, equal = same;
    s->bitwise += same;
    bool att = op_desc(in->op)->cls == OPC_ATTENTION;
    // The fused loss's dW is rounded to its 16-bit storage after each chunk's add on a GPU
    // (cuBLASLt's C), once after the last on the cpu backend: a rounding more a chunk.
    bool loss_dw = in->op == OP_LINEAR_CE_GRAD && in->nout > 2 && id == in->out[2];
    double tol = b->dtype == PDT_F32 ? 1e-5 : att || loss_dw ? 0x1p-6 : 0x1p-7;
    if (b->dtype == PDT_F32 || b->dtype == PDT_BF16 || b->dtype == PDT_F16) {
        int64_t n = plan_elems(b);
        float *fx = malloc(sizeof(float) * (size_t)n), *fy = malloc(sizeof(float) * (size_t)n);
        rt_read_f32(cpu, id, fx);
        rt_read_f32(emu, id, fy);
        double big = 0, diff = 0;
        for (int64_t i = 0; i < n; i++) {   // (the same infinity, or NaN on both, agree)
            big = isfinite(fx[i]) ? fmax(big, fabs(fx[i])) : big;
            bool agree = fx[i] == fy[i] || (isnan(fx[i]) && isnan(fy[i]));
            double d = agree ? 0 : fabs((double)fx[i] - fy[i]);
            diff = isnan(d) ? INFINITY : fmax(diff, d);
        }
        equal = diff == 0;
        double e = big > 0 ? diff / big : diff;
        s->worst = fmax(s->worst, e);
        if (e > tol)
            printf("  instruction %d (%s) output %s: error %.3g of the largest %.3g\n", in->id,
                   op_desc(in->op)->name, b->name, e, big);
        CHECK(e <= tol);
        free(fx), free(fy);
    } else {
        CHECK(same);
    }
    if (exact(in->op) && !equal)
        printf("  instruction %d (%s) output %s: not equal\n", in->id, op_desc(in->op)->name, b->name);
    if (exact(in->op))
        CHECK(equal);
    s->tolerance = fmax(s->tolerance, exact(in->op) ? 0 : tol);
    free(x), free(y);
}

// The gradients as an earlier micro-step left them, so that every kernel adding into one
// (the GEMMs with beta = 1, the embedding's and the norms' sums) adds into values, not zeros.
static void earlier_grads(Exec *x) {
    const Plan *p = x->plan;
    for (int b = 0; b < p->nbuf; b++) {
        const PlanBuffer *pb = &p->buf[b];
        if (pb->kind != PK_GRAD || pb->view >= 0)
            continue;
        int64_t n = plan_elems(pb);
        float *v = malloc(sizeof(float) * (size_t)(n + 1));
        for (int64_t i = 0; i < n; i++)
            v[i] = ((float)(urand32() >> 8) / 16777216.0f - 0.5f) * 0.02f;
        rt_write_f32(x, b, v);
        free(v);
    }
}

// AdamW8bit's state as several steps leave it, the same on both sides: random codes of
// both moments, positive absmaxes (a few zero: a block whose gradients were all zero),
// and 32-bit moments (v positive) for the tensors below min_8bit_size.
static void earlier_adam8_state(Exec *x) {
    const Plan *p = x->plan;
    if (p->optimizer != PO_ADAMW8BIT)
        return;
    for (int b = 0; b < p->nbuf; b++) {
        const PlanBuffer *pb = &p->buf[b];
        if (pb->kind != PK_STATE || pb->view >= 0 || strncmp(pb->name, "adam_", 5) != 0)
            continue;
        int64_t n = plan_elems(pb);
        if (pb->dtype == PDT_U8) {
            uint8_t *q = malloc((size_t)n + 1);
            for (int64_t i = 0; i < n; i++)
                q[i] = (uint8_t)(urand32() >> 24);
            rt_write_raw(x, b, q);
            free(q);
            continue;
        }
        bool positive = strncmp(pb->name, "adam_m.", 7) != 0;
        float *v = malloc(sizeof(float) * (size_t)(n + 1));
        for (int64_t i = 0; i < n; i++) {
            float u = (float)(urand32() >> 8) / 16777216.0f;
            v[i] = positive ? u * 1e-4f : (u - 0.5f) * 0.02f;
            if (!strncmp(pb->name, "adam_absmax.", 12) && urand32() % 16 == 0)
                v[i] = 0.0f;
        }
        rt_write_f32(x, b, v);
        free(v);
    }
}

// One step of `text` in lockstep on the cpu and emu (or cuda) backends, compared per
// instruction.
static void lockstep_choice(const char *name, const char *text, const PlanChoice *c) {
    Harness h;
    if (!harness_compile_choice(&h, name, text, c)) {
        CHECK(!"compiles");
        harness_free(&h);
        return;
    }
    h.x.poison = false;
    char err[2048];
    Backend *emu = NULL;
    CudaApi api;
    FakeOptions fo = {.plan_dir = h.dir, .cc_major = 8, .total_bytes = 1ll << 32};
    if (on_sim)
        emu = fake_cuda_open(&api, &fo, err, sizeof err) == 0
                  ? rt_cuda_backend(h.dir, h.plan, &api, 0, err, sizeof err)
                  : NULL;
    else if (on_gpu)
        emu = rt_cuda_backend(h.dir, h.plan, NULL, 0, err, sizeof err);
    else
        emu = rt_emu_backend(h.dir, err, sizeof err);
    Backend *host = rt_cpu_backend();
    Exec xe;
    bool ok = emu && rt_exec_init(&xe, h.plan, emu, host, LAYOUT_PLANNED, err, sizeof err) == 0;
    if (!ok) {
        printf("  %s: %s\n", name, err);
        CHECK(!"the backend starts");
        if (emu)
            emu->destroy(emu);
        host->destroy(host);
        harness_free(&h);
        return;
    }
    const Plan *p = h.plan;
    rt_weights_init(&h.x, 7);
    earlier_grads(&h.x);
    earlier_adam8_state(&h.x);
    int64_t ntok = p->seq * p->micro_batch;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)ntok);
    // Targets: one in five ignored (-100, as a masked prompt token), and the step's count
    // larger than this micro-batch's, as when other micro-steps hold trained targets too.
    for (int r = 0; r < 2; r++) {
        for (int64_t i = 0; i < ntok; i++)
            ids[i] = (int32_t)(urand32() % (uint32_t)p->vocab);
        for (int64_t i = 3; r && i < ntok; i += 5)
            ids[i] = -100;
        rt_write_raw(&h.x, plan_role(p, r ? PR_TARGETS : PR_TOKENS)->id, ids);
    }
    // Packed records: position ids restart at records of 1 to 17 tokens, across the rows.
    int32_t *pos = NULL;
    if (p->packing) {
        pos = malloc(sizeof(int32_t) * (size_t)ntok);
        for (int64_t i = 0, len = 0, at = 0; i < ntok; i++, at++) {
            if (at == len || i % p->seq == 0)
                at = 0, len = 1 + (int64_t)(urand32() % 17);
            pos[i] = (int32_t)at;
        }
    }
    rt_write_positions(&h.x, pos);
    free(pos);
    if (p->pairs) {   // a preference loss's: the step's pairs and chosen targets, more than these
        int32_t counts[2] = {(int32_t)(p->micro_batch / 2 + 1), (int32_t)(p->seq + 9)};
        rt_write_raw(&h.x, plan_role(p, PR_TARGET_COUNT)->id, counts);
    } else {
        rt_write_target_count(&h.x, rt_write_target_count(&h.x, -1) + 7);
    }
    free(ids);
    h.x.step = xe.step = 1;
    h.x.seed = xe.seed = 99;
    void **before = calloc((size_t)p->nbuf + 1, sizeof(void *));   // expect_skip: the parameters
    for (int ph = 0; ph < PHASE_COUNT && ok; ph++)
        for (int i = 0; i < p->nins[ph] && ok; i++) {
            const PlanInstr *in = &p->ins[ph][i];
            if (ph == PHASE_DECODE && i == 0)   // (the caches' bytes are the step's temporaries' before)
                decode_inputs(&h.x);
            for (int b = 0; expect_skip && ph == PHASE_OPT && i == 0 && b < p->nbuf; b++)
                if (p->buf[b].kind == PK_PARAM) {
                    before[b] = malloc((size_t)p->buf[b].bytes + 1);
                    rt_read_raw(&h.x, b, before[b]);
                }
            // A grouped launch does its members' work at its own place: their inputs go
            // over with its own, and at each member only the cpu side runs.
            for (int m = 0; in->by < 0 && m < (in->group ? in->group : 1); m++) {
                const PlanInstr *x = &p->ins[ph][i + m];
                for (int k = 0; k < x->nin; k++)
                    if (x->in[k] >= 0)
                        transfer(&h.x, &xe, x->in[k]);
                for (int k = 0; k < x->nout; k++)
                    if ((x->update >> k) & 1u)
                        transfer(&h.x, &xe, x->out[k]);
            }
            grouped[in->op] += in->by >= 0 || in->group;
            ok = rt_exec_instr(&h.x, in, err, sizeof err) == 0 &&
                 rt_exec_instr(&xe, in, err, sizeof err) == 0;
            if (!ok) {
                printf("  %s: %s\n", name, err);
                CHECK(!"runs");
                break;
            }
            bool gemm = op_desc(in->op)->cls == OPC_GEMM;
            if (op_desc(in->op)->cls == OPC_COPY ||
                (in->nlaunch == 0 && in->by < 0 && !(gemm && (on_gpu || on_sim))))
                continue;   // views, and on the emu GEMMs: the cpu backend's own code
            for (int k = 0; k < in->nout; k++)
                compare(&h.x, &xe, in, in->out[k]);
            for (int s = 0; s < in->nstep; s++)
                in_fused[in->step[s].op]++;
        }
    if (expect_skip && ok) {
        float fc[2] = {0, 0};
        rt_read_raw(&xe, plan_role(p, PR_GRAD_FACTOR)->id, fc);
        CHECKF(fc[1] == 1.0f, "%s: the step is not skipped (factor %g, %g)", name, fc[0], fc[1]);
        int same = 0, params = 0;
        for (int b = 0; b < p->nbuf; b++) {
            if (!before[b])
                continue;
            void *now = malloc((size_t)p->buf[b].bytes + 1);
            rt_read_raw(&xe, b, now);
            same += memcmp(now, before[b], (size_t)p->buf[b].bytes) == 0;
            params++;
            free(now);
        }
        CHECKF(params > 0 && same == params, "%s: %d of %d parameters unchanged by the skipped step", name,
               same, params);
        printf("  %s: the gradients overflowed, the step was skipped, %d parameters unchanged\n", name,
               params);
    }
    for (int b = 0; b < p->nbuf; b++)
        free(before[b]);
    free(before);
    rt_exec_free(&xe);
    emu->destroy(emu);
    host->destroy(host);
    if (on_sim) {
        CHECKF(fake_cuda_stats()->races == 0, "%s", fake_cuda_stats()->first_race);
        fake_cuda_close();
    }
    harness_free(&h);
}

static void lockstep(const char *name, const char *text, int64_t micro) {
    PlanChoice c = {.micro = micro, .policy = REMAT_KEEP, .rest = REMAT_KEEP};
    lockstep_choice(name, text, &c);
}

// The fused linear + cross entropy in chunks of 11 rows (2 x 33 rows: 6 chunks), full
// fine-tuning (dW accumulated chunk by chunk) and LoRA (a frozen lm_head: dx alone); and
// the loss unfused, as the .ft writes it.
static void test_loss(void) {
    char text[8192];
    snprintf(text, sizeof text, qwen_odd, "");
    PlanChoice c = {.micro = 2, .policy = REMAT_KEEP, .rest = REMAT_KEEP, .loss_chunk = 11};
    lockstep_choice("qwen-odd-loss-chunks", text, &c);
    snprintf(text, sizeof text, qwen_odd, "  lora(r = 4, alpha = 8, targets = [wq, wv])\n");
    lockstep_choice("qwen-odd-lora-loss-chunks", text, &c);
    harness_unfused_loss = true;
    snprintf(text, sizeof text, qwen_odd, "");
    lockstep("qwen-odd-unfused-loss", text, 2);
    harness_unfused_loss = false;
}

// qwen_odd trained with a preference loss in place of cross entropy, `extra` added.
static void preference(const char *name, const char *loss, const char *extra) {
    char base[8192], text[8192];
    snprintf(base, sizeof base, qwen_odd, extra);
    const char *ce = "cross_entropy(forward(tokens), next(tokens))", *at = strstr(base, ce);
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, loss, at + strlen(ce));
    lockstep(name, text, 2);
}

// The preference losses: the targets' log-probabilities and their backward, the pairs'
// loss and its gradient; the reference a frozen copy, or the base without LoRA.
static void test_preference(void) {
    preference("qwen-odd-dpo-copy", "dpo(forward(tokens), next(tokens), beta = 0.5, reference = copy)", "");
    preference("qwen-odd-ipo-lora-off", "ipo(forward(tokens), next(tokens), reference = lora_off)",
               "  lora(r = 4, alpha = 8, targets = [wq, wv])\n");
    preference("qwen-odd-orpo", "orpo(forward(tokens), next(tokens))", "  lora(r = 4, alpha = 8, targets = [wq, wv])\n");
    preference("qwen-odd-simpo", "simpo(forward(tokens), next(tokens), beta = 2.0, label_smoothing = 0.1, alpha = 0.2)", "");
    harness_unfused_loss = true;   // the logits whole: logprobs and its backward
    preference("qwen-odd-dpo-unfused", "dpo(forward(tokens), next(tokens), reference = copy)", "");
    harness_unfused_loss = false;
}

static void test_qwen_odd_shapes(void) {
    char text[8192];
    snprintf(text, sizeof text, qwen_odd,
             "  lora(r = 4, alpha = 8, dropout = 0.1, targets = [wq, wv])\n");
    lockstep("qwen-odd-lora", text, 2);
}

static void test_qwen_full(void) {
    char text[8192];
    snprintf(text, sizeof text, qwen_odd, "");
    lockstep("qwen-odd-full", text, 2);
}

static void test_qlora(void) {
    char text[8192];
    snprintf(text, sizeof text, qwen_odd,
             "  lora(r = 4, alpha = 8, targets = [wq, wv])\n  quantize(nf4, double_quant = true)\n");
    lockstep("qwen-odd-qlora", text, 2);
    snprintf(text, sizeof text, qwen_odd,
             "  lora(r = 4, alpha = 8, targets = [wq, wv])\n  quantize(nf4, double_quant = false)\n");
    lockstep("qwen-odd-qlora-plain", text, 1);
}

static void test_other_ops_fp16(void) { lockstep("ops-fp16", ops_fp16, 2); }
static void test_new_ops(void) { lockstep("new-ops", new_ops, 2); }
static void test_gpt2_qlora(void) { lockstep("gpt2-qlora", gpt2_qlora, 2); }

// qwen_odd at another precision line (the rest of the train section as written).
static void odd_with(char *text, size_t cap, const char *precision) {
    char base[8192];
    snprintf(base, sizeof base, qwen_odd, "");
    char *at = strstr(base, "precision = bf16\n");
    snprintf(text, cap, "%.*sprecision = %s\n%s", (int)(at - base), base, precision,
             at + strlen("precision = bf16\n"));
}

// bf16_pure: AdamW's moments in bf16 and its updates Kahan-compensated (bitwise).
static void test_bf16_pure(void) {
    char text[8192];
    odd_with(text, sizeof text, "bf16_pure");
    lockstep("qwen-odd-bf16-pure", text, 2);
}

// AdamW8bit (bitwise): 8-bit moments on the matrices (the embedding's and lm_head's last
// block partial: launched alone; the others grouped), 32-bit on norms, biases and LoRA's
// adapters; with the fp32 master (bf16), in place (fp32) and Kahan-compensated
// (bf16_pure); the step's state a random one of several steps.
static void eight_bit(char *text, size_t cap) {   // its adamw( made adamw8bit(
    char *at = strstr(text, "adamw(");
    if (!at || strlen(text) + 5 > cap)
        return;
    memmove(at + 9, at + 5, strlen(at + 5) + 1);
    memcpy(at + 5, "8bit", 4);
}

static void test_adamw8bit(void) {
    static const char *const precisions[] = {"bf16", "fp32", "bf16_pure"};
    char text[8192], name[64];
    for (int i = 0; i < 3; i++) {
        odd_with(text, sizeof text, precisions[i]);
        eight_bit(text, sizeof text);
        snprintf(name, sizeof name, "qwen-odd-adamw8bit-%s", precisions[i]);
        lockstep(name, text, 2);
    }
    snprintf(text, sizeof text, qwen_odd, "  lora(r = 4, alpha = 8, targets = [wq, wv])\n");
    eight_bit(text, sizeof text);
    lockstep("qwen-odd-lora-adamw8bit", text, 2);
}

// fp16 under a loss scale of 2^40: the backward overflows, the reduction finds it, and
// every update (grouped or not) skips the step.
static void test_fp16_overflow(void) {
    char text[8192];
    odd_with(text, sizeof text, "fp16\n  grad_scaler(init_scale = 1099511627776.0)");
    expect_skip = true;
    lockstep("qwen-odd-fp16-overflow", text, 2);
    expect_skip = false;
}

// A train section with packing = true: the same model over packed records (every rope
// turned by the position ids, every attention masking the other records' keys).
static void packed(char *text, size_t cap, const char *model) {
    const char *at = strstr(model, "  loss = ");
    snprintf(text, cap, "%.*s  packing = true\n%s", (int)(at - model), model, at);
}

static void test_packed(void) {
    char text[8192], q[8192];
    snprintf(q, sizeof q, qwen_odd, "");
    packed(text, sizeof text, q);
    lockstep("qwen-odd-packed", text, 2);   // head dim 80: the tensor-core kernels
    packed(text, sizeof text, ops_fp16);
    lockstep("ops-fp16-packed", text, 2);   // fp16, non-causal: the warp-per-row kernels
    snprintf(q, sizeof q, attention_hd, 40, "causal = true");
    packed(text, sizeof text, q);
    lockstep("attention-hd40-packed", text, 1);
    // the mask composed with a sliding window, a soft cap and a scale, on both kernels
    snprintf(q, sizeof q, attention_hd, 64, "causal = true, window = 7, softcap = 5.0, scale = 0.2");
    packed(text, sizeof text, q);
    lockstep("attention-opts-hd64-packed", text, 1);
    snprintf(q, sizeof q, attention_hd, 40, "causal = false, window = 20, softcap = 3.0");
    packed(text, sizeof text, q);
    lockstep("attention-opts-hd40-packed", text, 1);
}

static void test_attention_head_dims(void) {
    static const int hd[] = {40, 64, 96, 128, 256};
    for (size_t i = 0; i < sizeof hd / sizeof hd[0]; i++) {
        char text[4096], name[32];
        snprintf(text, sizeof text, attention_hd, hd[i], "causal = true");
        snprintf(name, sizeof name, "attention-hd%d", hd[i]);
        OpStat f = stats[OP_ATTENTION], b = stats[OP_ATTENTION_BWD];
        stats[OP_ATTENTION].worst = stats[OP_ATTENTION_BWD].worst = 0;
        lockstep(name, text, 1);
        printf("  %-16s attention %.3g, attention_bwd %.3g\n", name, stats[OP_ATTENTION].worst,
               stats[OP_ATTENTION_BWD].worst);
        stats[OP_ATTENTION].worst = fmax(f.worst, stats[OP_ATTENTION].worst);
        stats[OP_ATTENTION_BWD].worst = fmax(b.worst, stats[OP_ATTENTION_BWD].worst);
    }
}

// A sliding window shorter than the sequence (so that it cuts across the 16-row tiles),
// soft-capped scores and a scale of their own; causal and not; on both kernels.
static void test_attention_options(void) {
    static const struct { int hd; const char *attrs; } cases[] = {
        {64, "causal = true, window = 7, softcap = 5.0, scale = 0.2"},
        {40, "causal = true, window = 7, softcap = 5.0, scale = 0.2"},
        {64, "causal = false, window = 5"},
        {40, "causal = false, window = 20, softcap = 3.0"},
        {128, "causal = true, window = 18"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[4096], name[64];
        snprintf(text, sizeof text, attention_hd, cases[i].hd, cases[i].attrs);
        snprintf(name, sizeof name, "attention-opts-%zu", i);
        OpStat f = stats[OP_ATTENTION], b = stats[OP_ATTENTION_BWD];
        stats[OP_ATTENTION].worst = stats[OP_ATTENTION_BWD].worst = 0;
        lockstep(name, text, 1);
        printf("  hd %-3d %-52s attention %.3g, attention_bwd %.3g\n", cases[i].hd, cases[i].attrs,
               stats[OP_ATTENTION].worst, stats[OP_ATTENTION_BWD].worst);
        stats[OP_ATTENTION].worst = fmax(f.worst, stats[OP_ATTENTION].worst);
        stats[OP_ATTENTION_BWD].worst = fmax(b.worst, stats[OP_ATTENTION_BWD].worst);
    }
}

static void report(void) {
    printf("  %-24s %8s %8s %12s %10s %8s %8s\n", "op", "outputs", "bitwise", "worst", "tolerance",
           "in fused", "grouped");
    for (int k = 0; k < OP_COUNT; k++)
        if (stats[k].count || in_fused[k])
            printf("  %-24s %8d %8d %12.3g %10s %8d %8d\n", op_desc((OpKind)k)->name, stats[k].count,
                   stats[k].bitwise, stats[k].worst,
                   exact((OpKind)k)              ? "bitwise"
                   : stats[k].tolerance > 0x1p-7 ? "2^-6"
                   : stats[k].tolerance > 1e-4   ? "2^-7"
                                                 : "1e-5",
                   in_fused[k], grouped[k]);
}

int main(int argc, char **argv) {
    if (argc > 1 && chdir(argv[1]) != 0)
        return 2;
    bool dev_given = argc > 3 && strcmp(argv[2], "--device") == 0;
    const char *dev = dev_given ? argv[3] : "emu";
    int first_case = dev_given ? 4 : 2;
    bool every_case = argc <= first_case;
    if (!every_case)   // the cases named after it
        check_only(argv + first_case, argc - first_case);
    on_gpu = strcmp(dev, "cuda") == 0;
    on_sim = strcmp(dev, "sim") == 0;
    harness_decode_len = 33;   // every plan's decode phase, its caches of an odd length
    if (on_sim && !rt_nvrtc_available(NULL)) {
        printf("skip: the simulated GPU loads a CUBIN, and NVRTC is not found\n");
        return 77;
    }
    printf("  against the cpu backend on %s\n", on_gpu   ? "the GPU (the cuda backend)"
                                                 : on_sim ? "the cuda backend, simulated driver"
                                                          : "the emu backend");
    RUN(test_qwen_odd_shapes);
    RUN(test_qwen_full);
    RUN(test_qlora);
    RUN(test_preference);
    RUN(test_other_ops_fp16);
    RUN(test_bf16_pure);
    RUN(test_fp16_overflow);
    RUN(test_adamw8bit);
    RUN(test_new_ops);
    RUN(test_gpt2_qlora);
    RUN(test_packed);
    RUN(test_attention_head_dims);
    RUN(test_attention_options);
    RUN(test_loss);
    report();
    if (!every_case)
        return CHECK_DONE();
    // Every op the emitter generates a kernel for appeared at least once.
    int missing = 0;
    for (int k = 0; k < OP_COUNT; k++) {
        bool generated = op_info((OpKind)k)->device || cuda_op((OpKind)k);
        if (generated && !stats[k].count && !in_fused[k]) {
            printf("  no instruction exercised %s\n", op_desc((OpKind)k)->name);
            missing++;
        }
    }
    RUN_NAMED("every-kernel-exercised", CHECK_EQ(0, missing));
    // The optimizers and the gradients' zeroing ran in grouped launches (many tensors each).
    RUN_NAMED("grouped-launches", CHECK(grouped[OP_ADAMW] > 1 && grouped[OP_SGD] > 1 &&
                                        grouped[OP_ADAMW8BIT] > 1 && grouped[OP_ZERO] > 1));
    return CHECK_DONE();
}
