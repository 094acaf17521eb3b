// test_passes.c — parameter counts, the naive memory breakdown, the LoRA pass, the GPU
// presets and the ZeRO stages of the shard pass, on the shipped models.
#include "../frontend/cli/cli.h"
#include "check.h"

static const char *srcdir = ".";

typedef struct Loaded {
    Arena *a;
    FtSource src;
    FtModel m;
    IrGraph *g;
} Loaded;

// Loads `rel` (relative to the source dir), appending `extra` to the train section.
static bool load(Loaded *l, const char *rel, const char *extra, int64_t batch) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", srcdir, rel);
    memset(l, 0, sizeof *l);
    l->a = arena_new();
    if (fe_source_read(&l->src, path) != 0)
        return false;
    if (extra) {   // insert before the file's last '}' (the train section's)
        char *end = strrchr(l->src.text, '}');
        size_t head = (size_t)(end - l->src.text);
        char *t = malloc(l->src.len + strlen(extra) + 2);
        sprintf(t, "%.*s%s\n%s", (int)head, l->src.text, extra, end);
        free(l->src.text);
        l->src.text = t;
        l->src.len = strlen(t);
    }
    Ast *p = fe_parse(&l->src, l->a);
    if (!p || fe_check(&l->src, p, &l->m, l->a) != 0)
        return false;
    l->g = fe_elaborate(&l->src, &l->m, batch, l->a);
    if (l->g && l->m.train.lora) {
        const char *names[8];
        SrcLoc locs[8];
        for (int i = 0; i < l->m.train.n_lora_targets && i < 8; i++)
            names[i] = l->m.train.lora_targets[i].name, locs[i] = l->m.train.lora_targets[i].loc;
        LoraSpec s = {l->m.train.lora_r, l->m.train.lora_alpha, l->m.train.lora_dropout,
                      l->m.train.n_lora_targets, names, locs};
        PassDiag d = {0};
        if (lora_apply(l->g, &s, &d) != 0)
            return false;
    }
    return l->g != NULL;
}

static void unload(Loaded *l) {
    if (l->g)
        ir_graph_free(l->g);
    fe_source_free(&l->src);
    arena_free(l->a);
}

static int64_t states(const MemBreakdown *m) {
    return m->bytes[MEM_WEIGHTS] + m->bytes[MEM_GRADS] + m->bytes[MEM_OPTIMIZER] +
           m->bytes[MEM_MASTER];
}

// bf16 mixed-precision AdamW: 2 + 2 + 4 + 8 = 16 bytes per parameter.
static void test_bytes_per_param(void) {
    static const struct { const char *extra; int64_t per_param; } cases[] = {
        {NULL, 16},                                         // bf16 + fp32 master + fp32 m, v
        {"precision = fp32", 16},                           // 4 + 4 + 8, no master
        {"precision = bf16_pure", 10},                      // 2 + 2 + 2 + 2 + Kahan 2
        {"precision = fp16", 16},                           // 2 + 2 + 8 + master 4
        {"precision = bf16\n master_weights = false", 12},  // 2 + 2 + 8
        {"optimizer = sgd(lr = 0.1)", 8},                   // 2 + 2 + master 4
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Loaded l;
        CHECK(load(&l, "models/qwen2.ft", cases[i].extra, 1));
        if (l.g) {
            MemBreakdown m = count_naive_memory(l.g, 0);
            CHECK_EQ(cases[i].per_param * 7615616512LL, states(&m));
        }
        unload(&l);
    }
}

// AdamW8bit's state, exactly: per tensor of n >= min_8bit_size elements two u8 codes an
// element and two fp32 absmaxes a block of 256 (u8 [2, n], f32 [2, ceil(n/256)]), per
// smaller one fp32 m and v. Qwen2-7B: every matrix a multiple of 256, 7,615,283,200
// elements in them; 333,312 in the 28 x 5 + 1 norm weights and biases below 4096 (3584 x
// 3 + 512 x 2 a layer, and the final norm): 7,615,283,200 x (2 + 8/256) + 333,312 x 8.
// With min_8bit_size = 0 those are 8-bit too (14 blocks of 3584, 2 of 512); past every
// tensor, AdamW's 8 bytes an element.
static void test_adamw8bit_state(void) {
    static const struct { const char *opt; int64_t bytes; } cases[] = {
        {"optimizer = adamw8bit(lr = 1e-4)", 7615283200LL * 2 + 7615283200LL / 32 + 333312LL * 8},
        {"optimizer = adamw8bit(lr = 1e-4, min_8bit_size = 0)", 7615283200LL * 2 + 7615283200LL / 32 +
                                                                 333312LL * 2 + 8 * (28 * (14 * 3 + 2 * 2) + 14)},
        {"optimizer = adamw8bit(lr = 1e-4, min_8bit_size = 1000000000000)", 7615616512LL * 8},
    };
    CHECK_EQ(15471210496LL, cases[0].bytes);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Loaded l;
        CHECK(load(&l, "models/qwen2.ft", cases[i].opt, 1));
        if (!l.g) {
            unload(&l);
            continue;
        }
        MemBreakdown m = count_naive_memory(l.g, 0);
        CHECK_EQ(cases[i].bytes, m.bytes[MEM_OPTIMIZER]);
        // the graph's state tensors are what was counted
        CHECK(autodiff_apply(l.g, 1, false, NULL) == 0);
        int64_t sum = 0, q8 = 0;
        for (int t = 0; t < l.g->tensors.len; t++) {
            const IrTensor *x = &l.g->tensors.at[t];
            if (x->kind != TK_STATE || x->cat != MEM_OPTIMIZER)
                continue;
            sum += ir_tensor_bytes(x);
            if (x->dtype == DT_U8) {
                int64_t n = ir_tensor_elems(&l.g->tensors.at[x->of]);
                CHECK(x->ndim == 2 && x->shape[0] == 2 && x->shape[1] == n);
                q8++;
            }
        }
        CHECK_EQ(cases[i].bytes, sum);
        CHECK_EQ(i == 2 ? 0 : i == 1 ? 339 : 339 - 141, q8);
        unload(&l);
    }
}

// The field report: 7B fp16 + AdamW = 14 + 14 + 56 = 84 GB, without a master copy (a
// regime ftc refuses: tests/errors/fp16-adamw-no-master.ft); with the fp32 master that
// fp16 AdamW needs, 28 GB more.
static void test_seed_84gb(void) {
    Loaded l;
    CHECK(load(&l, "tests/ft/seed-7b.ft", NULL, 1));
    if (l.g) {
        MemBreakdown m = count_naive_memory(l.g, 0);
        CHECK_EQ(7000000000LL, count_params(l.g).total);
        CHECK_EQ(14000000000LL, m.bytes[MEM_WEIGHTS]);
        CHECK_EQ(14000000000LL, m.bytes[MEM_GRADS]);
        CHECK_EQ(56000000000LL, m.bytes[MEM_OPTIMIZER]);
        CHECK_EQ(84000000000LL, m.bytes[MEM_WEIGHTS] + m.bytes[MEM_GRADS] + m.bytes[MEM_OPTIMIZER]);
        CHECK_EQ(28000000000LL, m.bytes[MEM_MASTER]);
        CHECK_EQ(112000000000LL, states(&m));
    }
    unload(&l);
}

// Saved activations of a Qwen2 block: 12h + 4·g·d + 8·I bytes per token in bf16
// (REFERENCE.md §3), plus two fp32 norm statistics and one fp32 logsumexp per head; and
// once, the rope's fp32 table of cos and sin, S x head_dim.
static void test_activation_formula(void) {
    Loaded l;
    int64_t B = 2, S = 2048, h = 3584, gd = 4 * 128, I = 18944, H = 28, L = 28, V = 152064;
    CHECK(load(&l, "models/qwen2.ft", NULL, B));
    if (l.g) {
        MemBreakdown m = count_naive_memory(l.g, 0);
        int64_t per_layer = 12 * h + 4 * gd + 8 * I + 2 * 4 + 4 * H;
        int64_t final = 2 * h + 4 + 2 * h;          // final norm input, rstd, lm_head input
        CHECK_EQ(B * S * (L * per_layer + final) + S * 128 * 4, m.bytes[MEM_ACTIVATIONS]);
        CHECK_EQ(B * S * V * (2 + 4), m.logits_bytes);   // bf16 logits + fp32 gradient
        CHECK_EQ(3 * B * S * 4 + 4, m.bytes[MEM_IO]);    // tokens, targets, positions, the step's target count
    }
    unload(&l);
}

static void test_lora(void) {
    Loaded l;
    CHECK(load(&l, "models/qwen2.ft", "lora(r = 8, alpha = 16, targets = [q_proj, v_proj])", 1));
    if (l.g) {
        CHECK_EQ(0, ir_verify(l.g, stdout));
        ParamCount pc = count_params(l.g);
        CHECK_EQ(2523136, pc.trainable);
        CHECK_EQ(7615616512LL + 2523136, pc.total);
        int adapters = 0;
        for (int i = 0; i < l.g->tensors.len; i++) {
            const IrTensor *t = &l.g->tensors.at[i];
            if (t->kind != TK_PARAM)
                continue;
            if (strstr(t->name, "lora_")) {
                adapters++;
                CHECK(t->trainable);
                if (strcmp(t->name, "decoder.5.wv.lora_A") == 0) {
                    CHECK_STR("model.layers.5.self_attn.v_proj.lora_A.weight", t->hf_name);
                    CHECK_EQ(8, t->shape[0]);
                    CHECK_EQ(3584, t->shape[1]);
                }
            } else {
                CHECK(!t->trainable);
            }
        }
        CHECK_EQ(2 * 2 * 28, adapters);
        // No gradient, no optimizer state, no master copy for the frozen base; only the
        // adapters carry them: 2,523,136 x (2 + 8 + 4) bytes.
        MemBreakdown m = count_naive_memory(l.g, 0);
        CHECK_EQ(2 * (7615616512LL + 2523136), m.bytes[MEM_WEIGHTS]);
        CHECK_EQ(2523136LL * 2, m.bytes[MEM_GRADS]);
        CHECK_EQ(2523136LL * 8, m.bytes[MEM_OPTIMIZER]);
        CHECK_EQ(2523136LL * 4, m.bytes[MEM_MASTER]);
        // The scale alpha/r sits on the adapter path: B's product, added into the base's output.
        int accs = 0;
        for (int i = 0; i < l.g->nodes.len; i++)
            accs += l.g->nodes.at[i].op == OP_LINEAR_ACC && l.g->nodes.at[i].attr.f == 2.0;
        CHECK_EQ(2 * 28, accs);
        // Backward: LoRA's scale is its GEMMs' alpha (no kernel scales dy); a linear's dx
        // adds the gradient summed so far as its GEMM's C, an RMSNorm's dx the residual
        // stream's. A block's adds: none left but the dropout's (the LoRA input's mask).
        CHECK_EQ(0, autodiff_apply(l.g, 1, false, NULL));
        int scales = 0, dx_acc = 0, norm_acc = 0, adds = 0, scaled = 0;
        for (int i = 0; i < l.g->nodes.len; i++) {
            const IrNode *n = &l.g->nodes.at[i];
            if (n->phase != PHASE_BACKWARD)
                continue;
            scales += n->op == OP_SCALE;
            adds += n->op == OP_ADD;
            dx_acc += n->op == OP_LINEAR_DX && n->nin == 3;
            norm_acc += n->op == OP_RMSNORM_DX && n->nin == 5;
            scaled += (n->op == OP_LINEAR_DX || n->op == OP_LINEAR_DW) && n->attr.f == 2.0;
        }
        printf("  Qwen2-7B LoRA backward: %d scale, %d add, %d linear_dx adding in, %d rmsnorm_dx adding in, "
               "%d products scaled by alpha/r\n", scales, adds, dx_acc, norm_acc, scaled);
        CHECK_EQ(0, scales);
        CHECK_EQ(28 * 2 * 2, scaled);   // q's and v's B: dx and dW
        // k's, v's and both LoRA inputs' onto q's, up's onto gate's; in the first block only
        // up's (its input, the frozen embedding's output, takes no gradient), and every
        // norm's but that block's first.
        CHECK_EQ(27 * 5 + 1, dx_acc);
        CHECK_EQ(28 * 2 - 1, norm_acc);
        CHECK_EQ(0, adds);
    }
    unload(&l);
    // Llama-2-7B, r = 8 on q, v: 4,194,304 (REFERENCE.md §1)
    CHECK(load(&l, "models/llama2-7b.ft", "lora(r = 8, targets = [wq, wv])", 1));
    if (l.g)
        CHECK_EQ(4194304, count_params(l.g).trainable);
    unload(&l);
}

static void test_lora_errors(void) {
    Loaded l;
    memset(&l, 0, sizeof l);
    CHECK(load(&l, "models/tiny.ft", NULL, 1));
    const char *names[2] = {"nope", "attn_norm"};
    SrcLoc locs[2] = {{"x.ft", 3, 4, 4}, {"x.ft", 3, 10, 9}};
    LoraSpec s = {4, 8, 0, 2, names, locs};
    PassDiag d = {0};
    FILE *saved = stderr;
    stderr = tmpfile();
    CHECK_EQ(-1, lora_apply(l.g, &s, &d));
    fclose(stderr);
    stderr = saved;
    CHECK_EQ(2, d.errors);
    CHECK_EQ(0, ir_verify(l.g, stdout));         // the graph is untouched on error
    CHECK_EQ(125504, count_params(l.g).trainable);
    unload(&l);
}

// NF4 storage of n weights: packed codes, then an fp32 absmax per 64 (plain), or 8-bit
// absmax codes, an fp32 scale per 256 of them and their mean (double quantisation).
static int64_t nf4_bytes(int64_t n, bool dq) {
    int64_t blocks = (n + 63) / 64;
    return (n + 1) / 2 + (dq ? blocks + 4 * ((blocks + 255) / 256) + 4 : 4 * blocks);
}

// Qwen2-7B QLoRA: the weights are exactly the packed blocks' linear weights plus the
// bf16 remainder (embeddings, lm_head, norms, biases) and the bf16 adapters.
static void test_qlora_weights_exact(void) {
    for (int dq = 0; dq < 2; dq++) {
        Loaded l;
        memset(&l, 0, sizeof l);
        char path[1024];
        snprintf(path, sizeof path, "%s/models/qwen2.ft", srcdir);
        l.a = arena_new();
        CHECK_EQ(0, fe_source_read(&l.src, path));
        char *end = strrchr(l.src.text, '}');
        const char *extra = dq ? "  lora(r = 8, alpha = 16, targets = [q_proj, v_proj])\n  quantize(nf4, double_quant = true)\n"
                               : "  lora(r = 8, alpha = 16, targets = [q_proj, v_proj])\n  quantize(nf4, double_quant = false)\n";
        char *t = malloc(l.src.len + strlen(extra) + 2);
        sprintf(t, "%.*s%s%s", (int)(end - l.src.text), l.src.text, extra, end);
        free(l.src.text);
        l.src.text = t;
        l.src.len = strlen(t);
        Ast *p = fe_parse(&l.src, l.a);
        CHECK(p && fe_check(&l.src, p, &l.m, l.a) == 0);
        PlanChoice c = {.micro = 1, .policy = REMAT_KEEP, .n_policy = 0, .rest = REMAT_KEEP,
                        .offload = {.optimizer = false, .grads = false}};
        BuildStats bs;
        DriverSource ds = {&l.src, &l.m};
        Pipeline pipe = driver_pipeline(&ds, l.a, NULL);
        pipe.verify = true;
        l.g = pipeline_build(&pipe, &c, l.a, &bs);
        CHECK(l.g != NULL);
        if (l.g) {
            int64_t dim = 3584, kv = 512, ffn = 18944, layers = 28;
            int64_t mats[7] = {dim * dim, kv * dim, kv * dim, dim * dim, ffn * dim, ffn * dim, dim * ffn};
            int64_t quant = 0, packed = 0;
            for (int k = 0; k < 7; k++)
                quant += mats[k] * layers, packed += nf4_bytes(mats[k], dq) * layers;
            int64_t rest = 7615616512LL + 2523136 - quant;   // bf16: everything else
            MemBreakdown mb = count_naive_memory(l.g, 0);
            CHECK_EQ(packed + 2 * rest, mb.bytes[MEM_WEIGHTS]);
            CHECK_EQ(2523136, count_params(l.g).trainable);
            CHECK_EQ(quant, bs.quant.weights);
            double bits = 8.0 * (double)packed / (double)quant;
            printf("  %s: %lld weights as NF4, %.4f bits each; all weights %lld bytes\n",
                   dq ? "double quant" : "plain", (long long)quant, bits, (long long)mb.bytes[MEM_WEIGHTS]);
            CHECK(dq ? fabs(bits - 4.127) < 0.001 : fabs(bits - 4.5) < 0.001);
        }
        unload(&l);
    }
}

// The keep chain of per-tensor recompute: from everything kept to nothing, one candidate
// dropped a step; applied through remat, each mask keeps exactly what it says (a tensor a
// mask drops is saved for backward no more), and the saved bytes fall along the chain.
// Best fit by start, the plain way: each block, in order of its first use (larger first
// among equals), goes into the smallest gap among the blocks placed and live with it
// (ties: the lowest), else above them all. Returns the arena's top.
static int64_t best_fit_reference(const int *first, const int *last, const int64_t *size, int n, int64_t *at) {
    int *order = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        int k = i;
        while (k > 0 && (first[order[k - 1]] > first[i] ||
                         (first[order[k - 1]] == first[i] && size[order[k - 1]] < size[i])))
            order[k] = order[k - 1], k--;
        order[k] = i;
    }
    int64_t top = 0;
    for (int oi = 0; oi < n; oi++) {
        int b = order[oi];
        int64_t best = -1, best_gap = 0, prev_end = 0;
        for (;;) {   // the live placed blocks from the bottom: the lowest start above prev_end
            int next = -1;
            for (int pj = 0; pj < oi; pj++) {
                int p = order[pj];
                if (last[p] < first[b] || at[p] < prev_end)
                    continue;
                if (next < 0 || at[p] < at[next])
                    next = p;
            }
            if (next < 0)
                break;
            int64_t gap = at[next] - prev_end;
            if (gap >= size[b] && (best < 0 || gap < best_gap))
                best = prev_end, best_gap = gap;
            prev_end = at[next] + size[next];
        }
        at[b] = best >= 0 ? best : prev_end;
        if (at[b] + size[b] > top)
            top = at[b] + size[b];
    }
    free(order);
    return top;
}

// The placement by start order equals the plain best fit on random lifetimes, and no
// two blocks live at once share a byte in the arena alloc keeps.
static void test_alloc_by_start(void) {
    uint64_t seed = 12345;
    for (int round = 0; round < 40; round++) {
        Arena *a = arena_new();
        IrGraph *g = ir_graph_new(a);
        int nodes = 8 + round * 4, n = 10 + round * 6;
        for (int i = 0; i < nodes; i++)
            vec_push(&g->nodes, ((IrNode){.id = i, .fused = -1, .ws = -1, .record = -1, .bucket = -1}));
        int *first = malloc(sizeof(int) * (size_t)n), *last = malloc(sizeof(int) * (size_t)n);
        int64_t *size = malloc(sizeof(int64_t) * (size_t)n), *at = malloc(sizeof(int64_t) * (size_t)n);
        for (int i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            int f = (int)((seed >> 33) % (uint64_t)(nodes - 1)), len = (int)((seed >> 17) % 7);
            int64_t elems = 64 * (int64_t)(1 + (seed >> 45) % (round % 3 ? 5 : 40));   // ties when few sizes
            char name[16];
            snprintf(name, sizeof name, "t%d", i);
            int t = ir_tensor_add(g, name, TK_VALUE, DT_F32, 1, &elems, (SrcLoc){0});
            first[i] = g->tensors.at[t].first = f;
            last[i] = g->tensors.at[t].last = f + len < nodes - 1 ? f + len : nodes - 2;
            size[i] = elems * 4;   // (multiples of the 256-byte alignment)
        }
        AllocStats st;
        CHECK_EQ(0, alloc_apply(g, &st));
        CHECK_EQ(best_fit_reference(first, last, size, n, at), st.tried[2]);
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                if (first[i] <= last[j] && first[j] <= last[i])
                    CHECK(g->tensors.at[i].offset + size[i] <= g->tensors.at[j].offset ||
                          g->tensors.at[j].offset + size[j] <= g->tensors.at[i].offset);
        CHECK(st.arena_bytes >= st.lower_bound);
        free(first), free(last), free(size), free(at);
        ir_graph_free(g);
        arena_free(a);
    }
}

static void test_keep_chain(void) {
    Loaded l;
    CHECK(load(&l, "models/tiny.ft", NULL, 2));
    if (!l.g) {
        unload(&l);
        return;
    }
    CHECK_EQ(0, autodiff_apply(l.g, 1, false, NULL));
    uint8_t *chain = NULL;
    int m = 0, n = remat_keep_chain(l.g, 0, &chain, &m);
    CHECK(m > 4 && n == m + 1);
    int64_t bytes[64];
    CHECK_EQ(m, remat_candidates(l.g, 0, bytes, NULL, 64));
    int64_t prev = -1;
    for (int k = 0; k < n && chain; k++) {
        int kept = 0;
        for (int j = 0; j < m; j++)
            kept += chain[(size_t)k * (size_t)m + j];
        CHECK_EQ(m - k, kept);
        IrGraph *g = ir_graph_clone(l.g, l.a);
        RematPolicy pol[2] = {REMAT_TENSORS, REMAT_TENSORS};
        RematStats st;
        uint8_t masks[2 * 64];
        memcpy(masks, chain + (size_t)k * (size_t)m, (size_t)m);
        memcpy(masks + m, chain + (size_t)k * (size_t)m, (size_t)m);
        CHECK_EQ(0, remat_apply(g, pol, 2, masks, m, &st));
        CHECK_EQ(0, liveness_apply(g, false));
        int64_t saved = 0;
        for (int i = 0; i < g->tensors.len; i++)
            if (g->tensors.at[i].cat == MEM_ACTIVATIONS && g->tensors.at[i].layer >= 0)
                saved += ir_tensor_bytes(&g->tensors.at[i]);
        CHECK(prev < 0 || saved <= prev);
        if (k == 0 || k == n - 1)   // everything kept: nothing re-runs; nothing kept: some does
            CHECK(k == 0 ? st.recompute_nodes == 0 : st.recompute_nodes > 0);
        CHECK_EQ(0, ir_verify(g, stdout));
        prev = saved;
        ir_graph_free(g);
    }
    // A mask per block: block 0 keeps nothing, block 1 everything: only block 0 re-runs
    // anything, and only block 1 saves more than its output.
    IrGraph *g = ir_graph_clone(l.g, l.a);
    RematPolicy pol[2] = {REMAT_TENSORS, REMAT_TENSORS};
    uint8_t masks[2 * 64];
    memcpy(masks, chain + (size_t)(n - 1) * (size_t)m, (size_t)m);
    memcpy(masks + m, chain, (size_t)m);
    RematStats st;
    CHECK_EQ(0, remat_apply(g, pol, 2, masks, m, &st));
    int rerun[2] = {0, 0};
    for (int i = 0; i < g->nodes.len; i++)
        if (g->nodes.at[i].recompute && g->nodes.at[i].layer >= 0 && g->nodes.at[i].layer < 2)
            rerun[g->nodes.at[i].layer]++;
    CHECK(rerun[0] > 0);
    CHECK_EQ(0, rerun[1]);
    CHECK_EQ(0, ir_verify(g, stdout));
    ir_graph_free(g);
    free(chain);
    unload(&l);
}

// Adds a node; its out[0].
static int add(IrGraph *g, OpKind op, int nin, const int *in, const char *name, SrcLoc loc) {
    IrShapeErr err;
    int id = ir_node_add(g, op, nin, in, (OpAttr){0}, name, -1, loc, &err);
    CHECK(id >= 0);
    return id >= 0 ? g->nodes.at[id].out[0] : -1;
}

static void collect(void *ctx, SrcLoc loc, const char *msg) {
    snprintf(ctx, 256, "%d:%d: %s", loc.line, loc.col, msg);
}

// An op without a derivative rule between a trainable weight and the loss is an error
// at its line: autodiff must not leave the weight training on no gradient.
static void test_missing_derivative_rule(void) {
    Arena *a = arena_new();
    IrGraph *g = ir_graph_new(a);
    g->step = (IrStep){.weight_dt = DT_F32, .compute_dt = DT_F32, .grad_dt = DT_F32, .optim_dt = DT_F32, .optim_states = 2};
    SrcLoc at = {"m.ft", 1, 1, 1}, mid = {"m.ft", 7, 12, 4};
    int64_t ids[2] = {2, 4}, tab[2] = {16, 8};
    int tok = ir_tensor_add(g, "tokens", TK_INPUT, DT_I32, 2, ids, at);
    int tgt = ir_tensor_add(g, "targets", TK_INPUT, DT_I32, 2, ids, at);
    int w = ir_tensor_add(g, "w", TK_PARAM, DT_F32, 2, tab, at);
    ir_tensor(g, w)->hf_name = "w";
    ir_tensor(g, w)->decl = "w";
    ir_tensor(g, w)->trainable = true;
    int in[2] = {w, tok};
    int e = add(g, OP_EMBED, 2, in, "e", at);
    int c = add(g, OP_COPY, 1, &e, "c", mid);
    int in2[2] = {c, w};
    int lg = add(g, OP_LINEAR, 2, in2, "lg", at);
    int in3[2] = {lg, tgt};
    g->loss = add(g, OP_CROSS_ENTROPY, 2, in3, "loss", at);
    g->logits = lg;
    ir_mark_requires_grad(g);
    char msg[256] = "";
    PassDiag d = {collect, msg, 0};
    CHECK_EQ(-1, autodiff_apply(g, 1, false, &d));
    CHECK_EQ(1, d.errors);
    CHECK_STR("7:12: 'copy' has no derivative rule, so 'w' would train on no gradient through it", msg);
    ir_graph_free(g);
    arena_free(a);
}

// Weight decay where Hugging Face's Trainer puts it: on every trainable parameter but the
// biases and the norm weights (by their checkpoint names here, those holding `norm`; ftc
// takes them from the op table's roles and the parameters' ranks), unless decay_all asks
// for all. Model `path` with `optimizer`: each AdamW update's decay checked, the decayed
// and the spared counted.
static void check_decays(const char *path, const char *optimizer, const char *norm, bool all, int want_decayed,
                         int want_kept) {
    Loaded l;
    CHECK(load(&l, path, optimizer, 1));
    if (!l.g || autodiff_apply(l.g, 1, false, NULL) != 0) {
        CHECK(!"autodiff");
        unload(&l);
        return;
    }
    int decayed = 0, kept = 0;
    for (int i = 0; i < l.g->nodes.len; i++) {
        const IrNode *n = &l.g->nodes.at[i];
        if (n->op != OP_ADAMW)
            continue;
        const char *hf = l.g->tensors.at[n->out[0]].hf_name;
        size_t len = strlen(hf);
        bool exempt = !all && ((len > 5 && !strcmp(hf + len - 5, ".bias")) || strstr(hf, norm));
        CHECKF(n->attr.f == (exempt ? 0.0 : 0.1), "%s: weight decay %g", hf, n->attr.f);
        decayed += n->attr.f > 0, kept += n->attr.f == 0;
    }
    CHECK_EQ(want_decayed, decayed);
    CHECK_EQ(want_kept, kept);
    unload(&l);
}

// GPT-2 adds its biases with `+` after a matmul: no op reads them in a bias's place. 12
// layers: 4 matrices each, plus wte and wpe; 6 biases and 2 norm weights each, plus ln_f's 2.
static void test_weight_decay_gpt2(void) {
    check_decays("models/gpt2.ft", "optimizer = adamw(lr = 1e-4, weight_decay = 0.1)", "ln_", false, 12 * 4 + 2,
                 12 * 8 + 2);
}

// Qwen2-7B, 28 layers: 7 matrices each, plus embed and lm_head; 3 biases and 2 norms each,
// plus the final norm.
static void test_weight_decay_roles(void) {
    check_decays("models/qwen2.ft", "optimizer = adamw(lr = 1e-4, weight_decay = 0.1)", "norm", false, 28 * 7 + 2,
                 28 * 5 + 1);
    check_decays("models/qwen2.ft", "optimizer = adamw(lr = 1e-4, weight_decay = 0.1, decay_all = true)", "norm",
                 true, 339, 0);
}

// One rank of eight of Qwen2-7B full fine-tuning at each ZeRO stage: the model states a
// rank holds are exactly the stage's share of 2 + 2 + 12 bytes a parameter (every tensor
// divides by 8), and the collectives are the stage's: stage 0 all-reduces every gradient,
// 1 reduce-scatters and all-gathers (its reductions on the last micro-step only, as 0's),
// 2 reduce-scatters every micro-step and adds into the shards, 3 gathers each parameter
// once in forward and once more in backward where backward reads it; the cost model's collectives take time on the
// comm stream, and what compute does not hide of them is between none and all of it.
static void test_shard_stages(void) {
    Loaded l;
    CHECK(load(&l, "models/qwen2.ft", NULL, 1));
    int64_t W = 15231233024LL, S = 60924932096LL + 30462466048LL, P = 7615616512LL;
    const GpuPreset *gpu = gpu_preset("h100-80g");
    CostModel cm = {gpu, 1e9, 1e9, 0, link_preset("nvlink")};
    for (int z = 0; z < 4; z++) {
        PlanChoice c = {.micro = 1, .policy = REMAT_KEEP, .rest = REMAT_KEEP, .zero = z, .bucket_bytes = 32 << 20};
        BuildStats bs;
        DriverSource ds = {&l.src, &l.m};
        Pipeline pipe = driver_pipeline(&ds, l.a, NULL);
        pipe.verify = true;
        pipe.spec.ranks = 8;
        IrGraph *g = pipeline_build(&pipe, &c, l.a, &bs);
        CHECK(g != NULL);
        if (!g)
            continue;
        int64_t held = 0, params = 0;
        int ops[OP_COUNT] = {0}, last = 0, acc = 0, fwd_gathers = 0;
        for (int i = 0; i < g->tensors.len; i++) {
            const IrTensor *t = &g->tensors.at[i];
            if (t->kind == TK_PARAM || t->kind == TK_GRAD || t->kind == TK_STATE)
                held += ir_tensor_bytes(t);
            if (t->kind == TK_PARAM)
                params += ir_tensor_elems(t);
        }
        for (int i = 0; i < g->nodes.len; i++) {
            const IrNode *n = &g->nodes.at[i];
            ops[n->op]++;
            last += n->last;
            acc += n->op == OP_ACC && n->phase == PHASE_BACKWARD;
            fwd_gathers += n->op == OP_ALL_GATHER && n->phase == PHASE_FORWARD;
        }
        int64_t want = z == 0 ? 2 * W + S : z == 1 ? 2 * W + S / 8 : z == 2 ? W + (W + S) / 8 : (2 * W + S) / 8;
        CHECK_EQ(want, held);
        CHECK_EQ(z == 3 ? P / 8 : P, params);
        int np = 339;   // trainable tensors, one gradient each
        CHECK_EQ(z == 0 ? np : 0, ops[OP_ALL_REDUCE] - (z >= 1));   // (the gradients' statistics)
        CHECK_EQ(z == 0 ? 0 : np, ops[OP_REDUCE_SCATTER]);
        // stage 3 gathers every parameter for forward, and for backward those it reads
        // there (linear and norm weights; not biases, nor the embedding table, nor lm_head,
        // whose gradient the fused loss makes in forward)
        CHECK_EQ(z == 0 ? 0 : z <= 2 ? np : np + np - 28 * 3 - 2, ops[OP_ALL_GATHER]);
        CHECK_EQ(z == 3 ? np : 0, fwd_gathers);
        CHECK_EQ(z <= 1 ? np : 0, last);
        CHECK_EQ(z >= 2 ? np : 0, acc);
        CHECK(bs.buckets.buckets > 0 && bs.buckets.collectives == bs.shard.collectives);
        StepCost k = cost_step(g, &cm, 4, 32 * 2048);
        printf("  ZeRO-%d: model states %.2f GB a rank; %d collectives in %d buckets, %.0f ms of them "
               "a step, %.0f ms not hidden\n", z, (double)held / 1e9, bs.buckets.collectives,
               bs.buckets.buckets, k.comm_us * 1e-3, k.comm_exposed_us * 1e-3);
        CHECK(k.comm_us > 0 && k.comm_exposed_us >= 0 && k.comm_exposed_us <= k.comm_us + 1);
        ir_graph_free(g);
    }
    unload(&l);
}

// AdamW8bit over two ranks: a tensor with 8-bit state stays whole at every stage (its
// codes and absmaxes go by blocks, not by a rank's flat slice), the 32-bit ones shard; the
// gradients' sums of squares of the whole ones come after the sum over the ranks of the
// shards' (each rank holds the same whole gradient: counted once), wherever the buckets
// pass places that sum.
static void test_adamw8bit_ranks(void) {
    Loaded l;
    CHECK(load(&l, "models/tiny.ft", "optimizer = adamw8bit(lr = 1e-3)\n clip = 1.0", 1));
    for (int z = 1; l.g && z < 4; z++) {
        PlanChoice c = {.micro = 4, .policy = REMAT_KEEP, .rest = REMAT_KEEP, .zero = z, .bucket_bytes = 1 << 20};
        BuildStats bs;
        DriverSource ds = {&l.src, &l.m};
        Pipeline pipe = driver_pipeline(&ds, l.a, NULL);
        pipe.verify = true;
        pipe.final = true;
        pipe.spec.ranks = 2;
        IrGraph *g = pipeline_build(&pipe, &c, l.a, &bs);
        CHECK(g != NULL);
        if (!g)
            continue;
        int q8 = 0, sharded = 0, sum = -1, last_shard = -1, first_whole = 1 << 30;
        for (int i = 0; i < g->tensors.len; i++) {
            const IrTensor *t = &g->tensors.at[i];
            if (t->kind == TK_STATE && t->dtype == DT_U8)
                q8 += t->shard_of < 0 && t->ndim == 2 && t->shape[1] == ir_tensor_elems(&g->tensors.at[t->of]);
            sharded += t->kind == TK_STATE && t->shard_of >= 0;
        }
        for (int i = 0; i < g->nodes.len; i++) {
            const IrNode *n = &g->nodes.at[i];
            if (n->phase != PHASE_OPTIMIZER)
                continue;
            if (n->op == OP_ALL_REDUCE && n->out[0] == g->grad_stats)
                sum = i;
            if (n->op == OP_GRAD_SUMSQ) {
                bool shard = g->tensors.at[n->in[0]].shard_of >= 0;
                if (shard && i > last_shard)
                    last_shard = i;
                if (!shard && i < first_whole)
                    first_whole = i;
            }
        }
        CHECK_EQ(2 * 5 + 2, q8);   // wq, wo, wg, wu, wd a layer, embed and lm_head
        CHECK(sharded > 0);
        CHECKF(sum > last_shard && sum < first_whole, "ZeRO-%d: the sum over the ranks at %d, the shards' "
               "sums of squares up to %d, the whole ones' from %d", z, sum, last_shard, first_whole);
        ir_graph_free(g);
    }
    unload(&l);
}

// Each update inside backward (early_update.c), on tiny.ft at one micro-step: the optimizer
// phase empty, every gradient a value whose life ends at its update, which comes after
// every node touching the weight or state it writes (the schedule's write-after-read
// edges: backward's re-run forward under full recompute reads the weights too); the first
// contribution to each gradient assigns it, and the arena is smaller than with the
// updates after backward by at least the gradients the step no longer holds at once.
static void test_early_update(void) {
    Loaded l;
    CHECK(load(&l, "models/tiny.ft", NULL, 8));
    for (int remat = REMAT_KEEP; remat <= REMAT_FULL; remat += REMAT_FULL - REMAT_KEEP) {
        int64_t arena[2] = {0, 0}, grads = 0;
        for (int early = 0; early < 2; early++) {
            PlanChoice c = {.micro = 8, .policy = (RematPolicy)remat, .n_policy = 2, .rest = (RematPolicy)remat,
                            .early_update = early};
            BuildStats bs;
            DriverSource ds = {&l.src, &l.m};
            Pipeline pipe = driver_pipeline(&ds, l.a, NULL);
            pipe.verify = true;
            IrGraph *g = pipeline_build(&pipe, &c, l.a, &bs);
            CHECK(g != NULL);
            if (!g)
                continue;
            arena[early] = bs.alloc.arena_bytes;
            if (!early) {
                for (int i = 0; i < g->tensors.len; i++)
                    grads += g->tensors.at[i].kind == TK_GRAD ? ir_tensor_bytes(&g->tensors.at[i]) : 0;
                ir_graph_free(g);
                continue;
            }
            CHECK_EQ(27, bs.early.moved);
            CHECK_EQ(grads, bs.early.transient_bytes);
            int updates = 0, misplaced = 0, opt = 0, kept = 0, adds = 0;
            for (int i = 0; i < g->tensors.len; i++)
                CHECK(g->tensors.at[i].kind != TK_GRAD);
            for (int i = 0; i < g->nodes.len; i++) {
                const IrNode *u = &g->nodes.at[i];
                opt += u->phase == PHASE_OPTIMIZER;
                if (op_desc(u->op)->cls != OPC_OPTIMIZER)
                    continue;
                updates++;
                const IrTensor *gr = &g->tensors.at[u->in[0]];
                const IrNode *end = gr->last >= 0 ? &g->nodes.at[gr->last] : NULL;   // its update, or its sum of squares
                kept += !end || (gr->last != i && !(end->op == OP_GRAD_SUMSQ && end->in[0] == u->in[0]));
                // its gradient's first writer assigns it
                adds += (g->nodes.at[gr->first].update & 1u) && g->nodes.at[gr->first].out[0] == u->in[0];
                for (int j = i + 1; j < g->nodes.len; j++) {
                    const IrNode *r = &g->nodes.at[j];
                    if (r->phase != PHASE_BACKWARD && r->phase != PHASE_FORWARD)
                        continue;
                    for (int k = 0; k < r->nin; k++)
                        for (int o = 0; o < IR_MAX_OUTPUTS && u->out[o] >= 0; o++)
                            misplaced += r->in[k] >= 0 &&
                                         ir_tensor_base(g, r->in[k]) == ir_tensor_base(g, u->out[o]);
                }
            }
            CHECK_EQ(27, updates);
            CHECK_EQ(0, opt);
            CHECK_EQ(0, misplaced);
            CHECK_EQ(0, kept);
            CHECK_EQ(0, adds);
            ir_graph_free(g);
        }
        printf("  tiny, recompute %s: arena %lld B with the updates after backward, %lld B inside it "
               "(gradients %lld B)\n", remat_policy_name((RematPolicy)remat), (long long)arena[0],
               (long long)arena[1], (long long)grads);
        CHECK(arena[1] > 0 && arena[1] < arena[0]);
    }
    unload(&l);
}

static void test_presets(void) {
    const GpuPreset *p = gpu_preset("a100-40g");
    CHECK(p && p->mem_bytes == 40LL << 30);
    CHECK(gpu_preset("h100-80g") && gpu_preset("h100-80g")->bf16_tflops == 989);
    // What each card reports as its total (nvidia-smi, in MiB): a "24 GB" RTX 4090 has
    // 24564 MiB, less than 24 GiB.
    CHECK(gpu_preset("l4") && gpu_preset("l4")->mem_bytes == 23034LL << 20);
    CHECK(gpu_preset("rtx4090") && gpu_preset("rtx4090")->mem_bytes == 24564LL << 20);
    CHECK(gpu_preset("rtx4090")->mem_bytes < 24LL << 30);
    CHECK(gpu_preset("h100-80g")->mem_bytes == 81559LL << 20);
    CHECK(gpu_preset("h200")->mem_bytes == 143771LL << 20);
    // The cost model's host: a training server's figures, the same on every compiling machine.
    HostSpec h = host_default();
    CHECK_EQ(32, h.cores);
    CHECK(host_adamw_rate(&h) == 32 * 2e8);
    CHECK(host_link_bytes_per_s(&h, p) == 25e9);
    h.link_gbps = 12.5;
    CHECK(host_link_bytes_per_s(&h, p) == 12.5e9);
    CHECK(gpu_preset("a100") == NULL);
    int n;
    gpu_presets(&n);
    CHECK_EQ(6, n);
}

int main(int argc, char **argv) {
    if (argc > 1)
        srcdir = argv[1];
    RUN(test_bytes_per_param);
    RUN(test_adamw8bit_state);
    RUN(test_seed_84gb);
    RUN(test_activation_formula);
    RUN(test_lora);
    RUN(test_lora_errors);
    RUN(test_qlora_weights_exact);
    RUN(test_missing_derivative_rule);
    RUN(test_weight_decay_gpt2);
    RUN(test_weight_decay_roles);
    RUN(test_presets);
    RUN(test_shard_stages);
    RUN(test_adamw8bit_ranks);
    RUN(test_keep_chain);
    RUN(test_alloc_by_start);
    RUN(test_early_update);
    return CHECK_DONE();
}
