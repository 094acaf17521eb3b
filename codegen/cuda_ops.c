// cuda_ops.c — the CUDA backend's column of the op table: for each op that runs as a
// generated kernel, the template functions it launches (codegen/cuda/*.cuh, one a launch,
// in order), the constant arguments that specialise them for the node's shapes, and the
// grid and block of each launch. Elementwise ops need no row here: their kernels are made
// from the op's device code (OpInfo.device). GEMMs have none either: a BLAS library
// (cuBLASLt on a GPU) serves them; views move nothing; copies are plan copies.
#include "codegen.h"
#include "../runtime/cpu/kernels.h"

#include <math.h>
#include <string.h>

bool codegen_aligned16(const IrGraph *g, int t) {
    int64_t at = 0;
    while (g->tensors.at[t].alias_of >= 0)
        at += g->tensors.at[t].alias_offset, t = g->tensors.at[t].alias_of;
    return (g->tensors.at[t].offset + at) % 16 == 0;
}

#define T(id) (&g->tensors.at[(id)])
#define IN(k) T(n->in[k])
#define OUT(k) T(n->out[k])
#define DT(t) ((int)(t)->dtype)

static int64_t last_dim(const IrTensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }
static int64_t rows_of(const IrTensor *t) { return ir_tensor_elems(t) / last_dim(t); }
static int upd(const IrNode *n) { return n->update & 1u; }

// What an argument or geometry function sees: the node, which of its launches, and the
// optimizer's hyperparameters.
#define CTX(x)                                                                             \
    const IrGraph *g = (x)->g;                                                             \
    const IrNode *n = (x)->n;                                                              \
    int l = (x)->launch;                                                                   \
    (void)g, (void)n, (void)l

// A float literal that reads back as exactly (float)v.
static void flit(FILE *f, double v) { fprintf(f, "%af", (double)(float)v); }

//
// Geometry.
//

enum { EW_BLOCK = 256, EW_MAX_GRID = 4096 };

static void ew_geometry(int64_t n, unsigned *grid, unsigned *block) {
    int64_t b = (n + EW_BLOCK - 1) / EW_BLOCK;
    grid[0] = (unsigned)(b < 1 ? 1 : b > EW_MAX_GRID ? EW_MAX_GRID : b);
    block[0] = EW_BLOCK;
}

// One block a row; a block of 32 threads for short rows, 128 or 256 for longer ones.
static void row_geometry(int64_t rows, int64_t cols, unsigned *grid, unsigned *block) {
    grid[0] = (unsigned)rows;
    block[0] = cols <= 64 ? 32 : cols <= 2048 ? 128 : 256;
}

// One warp per row, four warps a block.
static void warp_geometry(int64_t rows, unsigned *grid, unsigned *block) {
    grid[0] = (unsigned)((rows + 3) / 4);
    block[0] = 128;
}

// codegen/cuda/norm.cuh's FTC_COLSUM: 16 columns a block of 1024 threads.
static void colsum_geometry(int64_t cols, unsigned *grid, unsigned *block) {
    grid[0] = (unsigned)((cols + 15) / 16);
    block[0] = 1024;
}

static void one_block(unsigned *grid, unsigned *block, unsigned threads) {
    grid[0] = 1;
    block[0] = threads;
}

//
// Per op: arguments and geometry.
//

// The embedding eight elements of a row a thread: rows of a multiple of eight, the table and
// the output 16-byte aligned.
static int embed_v8(const IrGraph *g, const IrNode *n) {
    return IN(0)->shape[1] % 8 == 0 && codegen_aligned16(g, n->in[0]) && codegen_aligned16(g, n->out[0]);
}
static void a_embed(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    fprintf(f, "%lldLL, %lld, %lldLL, %d, %d, %d", (long long)ir_tensor_elems(IN(1)),
            (long long)IN(0)->shape[1], (long long)IN(0)->shape[0], DT(IN(0)), DT(OUT(0)), embed_v8(g, n));
}
static void g_embed(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    ew_geometry(ir_tensor_elems(OUT(0)) / (embed_v8(g, n) ? 8 : 1), grid, block);
}

static void a_embed_bwd(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    int64_t N = ir_tensor_elems(IN(1)), V = OUT(0)->shape[0], C = OUT(0)->shape[1];
    if (l == 0)
        fprintf(f, "%lldLL, %lldLL", (long long)N, (long long)V);
    else
        fprintf(f, "%lldLL, %lld, %d, %lldLL, %d, %d", (long long)V, (long long)C, upd(n),
                (long long)(n->attr.pad - 1), DT(IN(0)), DT(OUT(0)));
}
static void g_embed_bwd(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    if (l == 0)
        one_block(grid, block, 32);
    else
        row_geometry(OUT(0)->shape[0], OUT(0)->shape[1], grid, block);
}

// Norms: rows and width from the input x (in[0] forward, in[1] in dx/dw: dy comes first).
// Whether a row kernel over rows of C elements reads and writes its row operands (every
// input, out[0]) eight elements at a time (ld8, st8): C % 8 == 0, each 16-byte aligned.
static int rows_v8(const IrGraph *g, const IrNode *n, int64_t C) {
    bool ok = C % 8 == 0 && codegen_aligned16(g, n->out[0]) &&
              (n->op != OP_ADD_RMSNORM || codegen_aligned16(g, n->out[2]));
    for (int i = 0; i < n->nin; i++)
        ok &= n->in[i] < 0 || codegen_aligned16(g, n->in[i]);
    return ok;
}

static void a_norm(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const IrTensor *x = IN(0);
    fprintf(f, "%lldLL, %lld, ", (long long)rows_of(x), (long long)last_dim(x));
    flit(f, n->attr.f);
    if (n->op == OP_RMSNORM) {
        fprintf(f, ", ");
        flit(f, n->attr.offset);
    }
    fprintf(f, ", %d, %d", DT(x), DT(IN(1)));
    if (n->op == OP_LAYERNORM)
        fprintf(f, ", %d", DT(IN(2)));
    fprintf(f, ", %d, %d", DT(OUT(0)), rows_v8(g, n, last_dim(x)));
}
static void a_add_norm(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const IrTensor *x = IN(0);
    fprintf(f, "%lldLL, %lld, ", (long long)rows_of(x), (long long)last_dim(x));
    flit(f, n->attr.f);
    fprintf(f, ", ");
    flit(f, n->attr.offset);
    fprintf(f, ", %d, %d, %d, %d, %d, %d", DT(x), DT(IN(1)), DT(IN(2)), DT(OUT(2)), DT(OUT(0)),
            rows_v8(g, n, last_dim(x)));
}
static void g_rows_in0(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    row_geometry(rows_of(IN(0)), last_dim(IN(0)), grid, block);
}

static void a_norm_dx(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const IrTensor *x = IN(1);
    fprintf(f, "%lldLL, %lld, ", (long long)rows_of(x), (long long)last_dim(x));
    if (n->op == OP_RMSNORM_DX) {
        flit(f, n->attr.offset);
        fprintf(f, ", ");
    }
    fprintf(f, "%d, %d, %d, %d, %d", DT(OUT(0)), DT(IN(0)), DT(x), DT(IN(2)), rows_v8(g, n, last_dim(x)));
    if (n->op == OP_RMSNORM_DX)   // the sum it adds into (-1: none)
        fprintf(f, ", %d", n->nin > 4 && n->in[4] >= 0 ? DT(IN(4)) : -1);
}
static void g_rows_in1(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    row_geometry(rows_of(IN(1)), last_dim(IN(1)), grid, block);
}

static void a_norm_dw(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const IrTensor *x = IN(1);
    fprintf(f, "%lldLL, %lld, %d, %d, %d, %d", (long long)rows_of(x), (long long)last_dim(x),
            upd(n), DT(OUT(0)), DT(IN(0)), DT(x));
}
static void g_colsum_out0(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    colsum_geometry(ir_tensor_elems(OUT(0)), grid, block);
}

// The rotary dims of a rope (its rotary= or every dim of x) or of a rope_table (rotary=).
static int64_t rope_dims(const IrGraph *g, const IrNode *n) {
    return n->attr.rope.rotary ? n->attr.rope.rotary : IN(0)->shape[3];
}

// The table's frequencies, computed by the cpu backend's own function, as the kernel's.
static void p_rope_table(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    float inv[4096], mscale;
    int64_t d = n->attr.rope.rotary;
    IR_ASSERT(d / 2 <= 4096 && cpu_rope_freqs(inv, &mscale, (size_t)d, n->attr.f, &n->attr.rope) == CPU_OK);
    fprintf(f, "FTC_TABLE float $K_inv[%lld] = {", (long long)(d / 2));
    for (int64_t i = 0; i < d / 2; i++)
        fprintf(f, "%s%s%af", i ? "," : "", i % 4 ? " " : "\n    ", (double)inv[i]);
    fprintf(f, "};\n");
}
static void a_rope_table(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    float inv[4096], mscale;
    IR_ASSERT(cpu_rope_freqs(inv, &mscale, (size_t)n->attr.rope.rotary, n->attr.f, &n->attr.rope) == CPU_OK);
    fprintf(f, "%lldLL, %lld, $K_inv, ", (long long)n->attr.shape[0], (long long)(n->attr.rope.rotary / 2));
    flit(f, mscale);
}
static void g_rope_table(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    ew_geometry(n->attr.shape[0] * (n->attr.rope.rotary / 2), grid, block);
}

// Rope eight pairs a thread: every dim rotating, half of them a multiple of eight, x, out
// and the table 16-byte aligned.
static int rope_v8(const IrGraph *g, const IrNode *n) {
    int64_t d = rope_dims(g, n);
    return d == IN(0)->shape[3] && (d / 2) % 8 == 0 && codegen_aligned16(g, n->in[0]) &&
           codegen_aligned16(g, n->out[0]) && codegen_aligned16(g, n->in[2]);
}

// (The elaborator gives every rope its table: the kernel has no other source of angles.)
static void a_rope(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const int64_t *s = IN(0)->shape;
    IR_ASSERT(n->nin > 2 && n->in[2] >= 0);
    fprintf(f, "%lldLL, %lldLL, %lldLL, %lld, %lld, %s, %d, %d, %d, %d", (long long)s[0], (long long)s[1],
            (long long)s[2], (long long)s[3], (long long)rope_dims(g, n), n->op == OP_ROPE ? "1.0f" : "-1.0f",
            n->in[1] >= 0, DT(IN(0)), DT(OUT(0)), rope_v8(g, n));
}
// One thread a rotated pair or a passed-through element.
static void g_rope(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    const int64_t *s = IN(0)->shape;
    int64_t d = rope_dims(g, n);
    ew_geometry(s[0] * s[1] * s[2] * (rope_v8(g, n) ? d / 16 : d / 2 + s[3] - d), grid, block);
}

static void a_softmax(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const IrTensor *x = IN(n->op == OP_SOFTMAX ? 0 : 1);
    fprintf(f, "%lldLL, %lld, ", (long long)rows_of(x), (long long)last_dim(x));
    if (n->op == OP_SOFTMAX)
        fprintf(f, "%d, %d", DT(IN(0)), DT(OUT(0)));
    else
        fprintf(f, "%d, %d, %d", DT(OUT(0)), DT(IN(0)), DT(IN(1)));
}

// Attention: q is in[0] forward and in[1] backward (after dy); tiled (attention.cuh) where
// every operand and result is bf16 and runtime/ops.h's op_attention_tiled takes the head dim.
static bool att_tiled(const IrGraph *g, const IrNode *n) { return ir_attention_tiled(g, n); }

static void a_attention(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    bool fwd = n->op == OP_ATTENTION;
    const IrTensor *q = IN(fwd ? 0 : 1), *k = IN(fwd ? 1 : 2);
    fprintf(f, "%lldLL, %lldLL, %lldLL, %lldLL, %lld, %d, %lldLL, ", (long long)q->shape[0],
            (long long)q->shape[1], (long long)q->shape[2], (long long)k->shape[2],
            (long long)q->shape[3], n->attr.causal ? 1 : 0, (long long)n->attr.window);
    flit(f, n->attr.softcap);
    fprintf(f, ", ");
    flit(f, n->attr.scale > 0 ? n->attr.scale : 1.0 / sqrt((double)q->shape[3]));
    int docs = fwd ? n->nin > 3 && n->in[3] >= 0 : n->nin > 6 && n->in[6] >= 0;   // position ids
    if (fwd) {
        fprintf(f, ", %d, %d, %d, %d, %d", DT(q), DT(k), DT(IN(2)), DT(OUT(0)), docs);
        return;
    }
    int64_t off[5];   // the workspace's parts
    op_attention_bwd_layout(q->shape[0], q->shape[1], q->shape[2], k->shape[2], q->shape[3],
                            att_tiled(g, n), off);
    fprintf(f, ", %d, %d, %d, %lldLL, %lldLL, %lldLL, %lldLL", DT(q), DT(IN(0)), docs, (long long)off[1],
            (long long)off[2], (long long)off[3], (long long)off[4]);
}

// Tiled: forward a block of 128 threads a tile of 64 query rows, grid (tiles, H, B); the
// backward's pre a warp a query row, main a block of 256 threads a tile of keys (grid (tiles,
// H, B)), post a grid-stride pass over dq (and GQA's dK, dV). Else a warp a row: forward and
// dq query rows, dk/dv key rows, and a last launch of one warp that does nothing.
static void g_attention(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    bool fwd = n->op == OP_ATTENTION;
    const IrTensor *q = IN(fwd ? 0 : 1), *k = IN(fwd ? 1 : 2);
    int64_t B = q->shape[0], S = q->shape[1], H = q->shape[2], D = q->shape[3];
    if (!att_tiled(g, n)) {
        if (l == 2)
            one_block(grid, block, 32);
        else
            warp_geometry(B * (l == 1 ? k->shape[2] : H) * S, grid, block);
        return;
    }
    int64_t tile = fwd ? 64 : op_attention_tile(D);
    if (fwd || l == 1) {
        grid[0] = (unsigned)((S + tile - 1) / tile), grid[1] = (unsigned)H, grid[2] = (unsigned)B;
        block[0] = fwd ? 128 : 256;
    } else if (l == 0) {
        grid[0] = (unsigned)((B * H * S + 7) / 8), block[0] = 256;
    } else {
        int64_t n4 = (B * S * H * D + (k->shape[2] < H ? 2 * B * S * k->shape[2] * D : 0)) / 4;
        ew_geometry(n4, grid, block);
    }
}

// attention.cuh's att_fwd_smem and att_bwd_smem: its tiles of Q, K, V (and dy, P, dS, lse, Di),
// rows padded by 8 elements.
static unsigned s_attention(const CudaCtx *cx) {
    CTX(cx);
    bool fwd = n->op == OP_ATTENTION;
    int64_t D = IN(fwd ? 0 : 1)->shape[3], tile = op_attention_tile(D), ld = D + 8;
    if (!att_tiled(g, n) || (!fwd && l != 1))
        return 0;
    return (unsigned)(fwd ? (64 + 2 * tile) * ld * 2 : 4 * tile * ld * 2 + 2 * tile * (tile + 8) * 2 + 2 * tile * 4);
}

// The decode step's attention (decode.cuh): a warp a query head, over the cache's rows.
static void a_attention_decode(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const IrTensor *q = IN(0), *kc = OUT(1);
    IR_ASSERT(q->shape[3] <= 32 * 8 && IN(1)->dtype == kc->dtype);   // (decode.cuh: FTC_ATT_LANE a lane)
    fprintf(f, "%lldLL, %lldLL, %lldLL, %lldLL, %lld, %lldLL, ", (long long)q->shape[0], (long long)kc->shape[1],
            (long long)q->shape[2], (long long)kc->shape[2], (long long)q->shape[3], (long long)n->attr.window);
    flit(f, n->attr.softcap);
    fprintf(f, ", ");
    flit(f, n->attr.scale > 0 ? n->attr.scale : 1.0 / sqrt((double)q->shape[3]));
    fprintf(f, ", %d, %d, %d", DT(q), DT(kc), DT(OUT(0)));
}
static void g_attention_decode(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    warp_geometry(IN(0)->shape[0] * IN(0)->shape[2], grid, block);
}

static void a_transpose(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const IrTensor *x = IN(0);
    int pad = IR_MAX_DIMS - x->ndim;
    for (int d = 0; d < IR_MAX_DIMS; d++)
        fprintf(f, "%lldLL, ", (long long)(d < pad ? 1 : x->shape[d - pad]));
    fprintf(f, "%d, %d, %d, %d", n->attr.perm[0] + pad, n->attr.perm[1] + pad, DT(x), DT(OUT(0)));
}
static void g_ew_out0(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    ew_geometry(ir_tensor_elems(OUT(0)), grid, block);
}

// A tensor as (outer, dim, inner) around dimension `axis`.
static void around(const IrTensor *t, int axis, int64_t *outer, int64_t *dim, int64_t *inner) {
    *outer = *inner = 1;
    for (int d = 0; d < t->ndim; d++)
        if (d < axis)
            *outer *= t->shape[d];
        else if (d > axis)
            *inner *= t->shape[d];
    *dim = t->shape[axis];
}

// slice_bwd's mode (movement.cuh): 0 writes its output, 1 adds into the output's range (a
// gradient it updates, or a sum so far whose bytes the output took), 2 adds the range to a
// sum so far elsewhere.
static int slice_bwd_mode(const CudaCtx *cx) {
    CTX(cx);
    if (upd(n))
        return 1;
    if (n->nin < 2 || n->in[1] < 0)
        return 0;
    const IrTensor *acc = IN(1), *o = OUT(0);
    return acc->arena == o->arena && acc->offset == o->offset ? 1 : 2;
}

// slice: around its input; slice_bwd: around its output (the input's shape).
static void a_slice(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    int64_t outer, dim, inner;
    around(n->op == OP_SLICE ? IN(0) : OUT(0), n->attr.axis, &outer, &dim, &inner);
    fprintf(f, "%lldLL, %lldLL, %lldLL, %lldLL, %lldLL, ", (long long)outer, (long long)dim,
            (long long)inner, (long long)n->attr.start, (long long)n->attr.size);
    if (n->op == OP_SLICE_BWD)
        fprintf(f, "%d, ", slice_bwd_mode(cx));
    fprintf(f, "%d, %d", DT(n->op == OP_SLICE ? IN(0) : OUT(0)), DT(n->op == OP_SLICE ? OUT(0) : IN(0)));
}
// One thread an element written: the range alone when a slice_bwd adds into its output.
static void g_slice(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    ew_geometry(n->op == OP_SLICE_BWD && slice_bwd_mode(cx) == 1 ? ir_tensor_elems(IN(0)) : ir_tensor_elems(OUT(0)),
                grid, block);
}

static void a_concat(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    int64_t outer, dim, inner, end = 0;
    around(OUT(0), n->attr.axis, &outer, &dim, &inner);
    fprintf(f, "%lldLL, %lldLL, %d", (long long)outer, (long long)inner, n->nin);
    for (int k = 0; k < 6; k++) {
        end += k < n->nin ? IN(k)->shape[n->attr.axis] : 0;
        fprintf(f, ", %lldLL", (long long)end);
    }
    fprintf(f, ", %d", DT(OUT(0)));
}

// An elementwise template eight elements a thread: out[0]'s size a multiple of eight, every
// operand of at least eight elements 16-byte aligned.
static int elems_v8(const IrGraph *g, const IrNode *n) {
    bool ok = ir_tensor_elems(OUT(0)) % 8 == 0 && ir_tensor_elems(IN(0)) % 8 == 0;
    for (int i = 0; i < ir_node_nout(n); i++)
        ok &= n->out[i] < 0 || codegen_aligned16(g, n->out[i]);
    for (int i = 0; i < n->nin; i++)
        ok &= n->in[i] < 0 || ir_tensor_elems(IN(i)) < 8 || codegen_aligned16(g, n->in[i]);
    return ok;
}
// Dropout: a thread an element, or eight.
static void g_dropout(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    ew_geometry(ir_tensor_elems(OUT(0)) / (elems_v8(g, n) ? 8 : 1), grid, block);
}
static void a_dropout(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    float p = (float)n->attr.f;
    double t = floor((double)p * 4294967296.0);   // the cpu backend's threshold
    fprintf(f, "%lldLL, %uu, ", (long long)ir_tensor_elems(IN(0)),
            t >= 4294967295.0 ? 4294967295u : (unsigned)t);
    flit(f, 1.0f / (1.0f - p));
    fprintf(f, ", %d, %d, %d", DT(IN(0)), DT(OUT(0)), elems_v8(g, n));
}

static void a_ce(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const IrTensor *lg = IN(0);
    long long N = (long long)rows_of(lg), V = (long long)last_dim(lg);
    int counted = n->nin > 2 && n->in[2] >= 0;   // the step's target count is an operand
    if (n->op == OP_CROSS_ENTROPY) {
        if (l == 0)
            fprintf(f, "%lldLL, %lldLL, %d, %d, %d", N, V, DT(lg), counted, rows_v8(g, n, V));
        else
            fprintf(f, "%lldLL, %d", N, counted);
        return;
    }
    if (l == 0) {
        fprintf(f, "%lldLL, %d", N, counted);
        return;
    }
    fprintf(f, "%lldLL, %lldLL, ", N, V);
    flit(f, n->attr.f);
    fprintf(f, ", %d, %d, %d, %d", DT(lg), DT(OUT(0)), counted, rows_v8(g, n, V));
}
static void g_ce(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    bool rows = n->op == OP_CROSS_ENTROPY ? l == 0 : l == 1;
    if (rows)
        row_geometry(rows_of(IN(0)), last_dim(IN(0)), grid, block);
    else
        one_block(grid, block, 256);
}

// The targets' log-probabilities (pref.cuh): logits [N, V] in[0], or in[1] for the backward.
static void a_lp(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const IrTensor *lg = IN(n->op == OP_LOGPROBS ? 0 : 1);
    long long N = (long long)rows_of(lg), V = (long long)last_dim(lg);
    int v8 = rows_v8(g, n, V);
    if (n->op == OP_LOGPROBS)
        fprintf(f, "%lldLL, %lldLL, %d, %d", N, V, DT(lg), v8);
    else
        fprintf(f, "%lldLL, %lldLL, %d, %d, %d", N, V, DT(lg), DT(OUT(0)), v8);
}
static void g_lp(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    const IrTensor *lg = IN(n->op == OP_LOGPROBS ? 0 : 1);
    row_geometry(rows_of(lg), last_dim(lg), grid, block);
}

// A preference loss and its gradient (pref.cuh), one block: B rows of S targets, the
// reference none (0), a log-probability a target (1) or a sum a row (2), the workspace
// operand, then the loss's form and constants.
static void a_pref(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    const IrTensor *lp = IN(0);
    long long B = (long long)lp->shape[0], S = (long long)(ir_tensor_elems(lp) / lp->shape[0]);
    int ref = n->nin > 3 && n->in[3] >= 0 ? (ir_tensor_elems(IN(3)) == ir_tensor_elems(lp) ? 1 : 2) : 0;
    const OpPref *p = &n->attr.pref;
    fprintf(f, "%lldLL, %lldLL, %d, %d, %d, %.17g, %.17g, %.17g, %.17g", B, S, ref, ir_node_nout(n) + n->nin,
            p->kind, n->attr.f, p->smoothing, p->gamma, p->alpha);
}
static void g_pref(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    (void)cx;
    one_block(grid, block, 256);
}

// The fused loss: x [rows, K], W [V, K], C rows a chunk; its operands reach a launch as
// outputs, then x, W, targets, then the workspace (plan.h's plan_loss: the chunk's logits,
// then the rows' terms, then the count).
static void lce_dims(const IrGraph *g, const IrNode *n, long long *rows, long long *C, long long *V,
                     long long *terms, long long *count) {
    const IrTensor *x = IN(0);
    *rows = (long long)rows_of(x), *V = (long long)IN(1)->shape[0];
    *C = n->attr.chunk_rows > 0 && n->attr.chunk_rows < *rows ? (long long)n->attr.chunk_rows : *rows;
    *terms = (long long)((dtype_bytes(x->dtype, *C * *V) + 255) / 256 * 256);
    *count = *terms + (4 * *rows + 255) / 256 * 256;
}

// lce_count, lce_step per chunk, lce_mean; the step's target count an operand when the
// loss has one.
static void a_lce(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    long long rows, C, V, terms, count;
    lce_dims(g, n, &rows, &C, &V, &terms, &count);
    int nout = ir_node_nout(n), ptg = nout + 2, pws = nout + n->nin;
    int pcnt = n->nin > 3 && n->in[3] >= 0 ? nout + 3 : -1;
    if (l == 0) {
        fprintf(f, "%lldLL, %d, %d, %d, %lldLL", rows, ptg, pcnt, pws, count);
    } else if (l == 2) {
        fprintf(f, "%lldLL, %d, %lldLL, %lldLL", rows, pws, terms, count);
    } else {
        fprintf(f, "%lldLL, %lldLL, ", C, V);
        flit(f, n->attr.f);
        // (the chunk's logits at the start of the workspace: rows of V aligned when V % 8 == 0)
        fprintf(f, ", %d, %d, %lldLL, %lldLL, %d, %d", ptg, pws, terms, count, DT(IN(0)),
                V % 8 == 0 && n->ws >= 0 && codegen_aligned16(g, n->ws));
    }
}
static void g_lce(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    long long rows, C, V, terms, count;
    lce_dims(g, n, &rows, &C, &V, &terms, &count);
    if (l == 1)
        row_geometry(C, V, grid, block);
    else
        one_block(grid, block, 256);
}

// The fused linear + logprobs (pref.cuh): one launch a chunk, its logits at the start of
// the workspace; the targets (and backward dlp, after them) among the inputs.
static void a_llp(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    long long rows, C, V, terms, count;
    lce_dims(g, n, &rows, &C, &V, &terms, &count);
    int nout = ir_node_nout(n), ptg = nout + 2, pws = nout + n->nin;
    int v8 = V % 8 == 0 && n->ws >= 0 && codegen_aligned16(g, n->ws);
    if (n->op == OP_LINEAR_LOGPROBS)
        fprintf(f, "%lldLL, %lldLL, %d, %d, %d, %d", C, V, ptg, pws, DT(IN(0)), v8);
    else
        fprintf(f, "%lldLL, %lldLL, %d, %d, %d, %d, %d", C, V, ptg, ptg + 1, pws, DT(IN(0)), v8);
}
static void g_llp(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    long long rows, C, V, terms, count;
    lce_dims(g, n, &rows, &C, &V, &terms, &count);
    row_geometry(C, V, grid, block);
}

static void a_sum_to(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    int64_t out = ir_tensor_elems(OUT(0));
    fprintf(f, "%lldLL, %lldLL, %d, %d, %d", (long long)(ir_tensor_elems(IN(0)) / out),
            (long long)out, upd(n), DT(OUT(0)), DT(IN(0)));
}

static void a_dequant(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    fprintf(f, "%lldLL, %d, %d", (long long)ir_tensor_elems(OUT(0)), n->nin == 4, DT(OUT(0)));
}

// The gradients' reduction: partial sums per block, then their sum in order.
static void a_grad_sumsq(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    int64_t n_el = ir_tensor_elems(IN(0));
    if (l == 0)
        fprintf(f, "%lldLL, %lldLL, %d, %d", (long long)n_el, (long long)op_sumsq_blocks(n_el), DT(IN(0)),
                n_el % 8 == 0 && codegen_aligned16(g, n->in[0]));
    else
        fprintf(f, "%lldLL, %d", (long long)op_sumsq_blocks(n_el), upd(n));
}
static void g_grad_sumsq(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    if (l == 0) {
        grid[0] = (unsigned)op_sumsq_blocks(ir_tensor_elems(IN(0)));
        block[0] = 256;
    } else {
        one_block(grid, block, 256);
    }
}

static void a_grad_factor(FILE *f, const CudaCtx *cx) { flit(f, cx->n->attr.f); }
static void g_one_thread(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    (void)cx;
    one_block(grid, block, 32);
}

// The optimizers: the element count, then the constants a group shares (the tensor's
// weight decay among them).
// An update eight elements a thread (optim.cuh's v8): its size a multiple of eight, every
// operand but the factor 16-byte aligned.
static int update_v8(const IrGraph *g, const IrNode *n) {
    bool ok = ir_tensor_elems(OUT(0)) % 8 == 0;
    for (int i = 0; i < ir_node_nout(n); i++)
        ok &= codegen_aligned16(g, n->out[i]);
    for (int i = 0; i < n->nin; i++)
        ok &= n->in[i] < 0 || ir_tensor_elems(IN(i)) < 8 || codegen_aligned16(g, n->in[i]);
    return ok;
}
static void ga_adamw(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    // the fourth output: none (0), the fp32 master (1) or the Kahan compensation (2)
    int mode = ir_node_nout(n) < 4 ? 0 : OUT(3)->cat == MEM_MASTER ? 1 : 2;
    fprintf(f, "%d, %.17g, %.17g, %.17g, %.17g, %d, %d, %d, %d", mode, cx->hyper->beta1,
            cx->hyper->beta2, cx->hyper->eps, n->attr.f, DT(OUT(0)), DT(IN(0)), DT(OUT(1)),
            update_v8(g, n));
}
// A thread an element, or eight (update_v8).
static void g_update(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    ew_geometry(ir_tensor_elems(OUT(0)) / (update_v8(g, n) ? 8 : 1), grid, block);
}
static int pt_update(const CudaCtx *cx) {
    CTX(cx);
    return update_v8(g, n) ? 8 : 1;
}
static void a_adamw(FILE *f, const CudaCtx *cx) {
    fprintf(f, "%lldLL, ", (long long)ir_tensor_elems(&cx->g->tensors.at[cx->n->out[0]]));
    ga_adamw(f, cx);
}

// AdamW8bit: 8-bit moments (q8) when its second state is the codes; a tensor with a
// partial block of 256 launches alone (its constants name it: no group shares them).
static int adam8_q8(const CudaCtx *cx) { return cx->g->tensors.at[cx->n->out[1]].dtype == DT_U8; }
static void ga_adamw8bit(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    int mode = ir_node_nout(n) < 4 ? 0 : OUT(3)->cat == MEM_MASTER ? 1 : 2;
    fprintf(f, "%d, %d, %.17g, %.17g, %.17g, %.17g, %d, %d", adam8_q8(cx), mode, cx->hyper->beta1,
            cx->hyper->beta2, cx->hyper->eps, n->attr.f, DT(OUT(0)), DT(IN(0)));
    if (adam8_q8(cx) && ir_tensor_elems(OUT(0)) % 256)
        fprintf(f, " /* node %d: a partial block, alone */", n->id);
}
static void a_adamw8bit(FILE *f, const CudaCtx *cx) {
    fprintf(f, "%lldLL, ", (long long)ir_tensor_elems(&cx->g->tensors.at[cx->n->out[0]]));
    ga_adamw8bit(f, cx);
}
// A block of 256 threads a block of 256 elements with 8-bit moments, else one an element.
static void g_adamw8bit(const CudaCtx *cx, unsigned *grid, unsigned *block) {
    CTX(cx);
    int64_t e = ir_tensor_elems(OUT(0)), nb = (e + 255) / 256;
    if (!adam8_q8(cx)) {
        ew_geometry(e, grid, block);
        return;
    }
    grid[0] = (unsigned)(nb > EW_MAX_GRID ? EW_MAX_GRID : nb);
    block[0] = 256;
}

static void ga_sgd(FILE *f, const CudaCtx *cx) {
    CTX(cx);
    fprintf(f, "%d, %d, %d", ir_node_nout(n) == 2, DT(OUT(0)), DT(IN(0)));
}
static void a_sgd(FILE *f, const CudaCtx *cx) {
    fprintf(f, "%lldLL, ", (long long)ir_tensor_elems(&cx->g->tensors.at[cx->n->out[0]]));
    ga_sgd(f, cx);
}

//
// The column.
//

static const CudaOp column[OP_COUNT] = {
    [OP_EMBED] = {{"embed_fwd"}, {0}, a_embed, g_embed},
    [OP_EMBED_BWD] = {{"embed_bwd_index", "embed_bwd_sum"}, {1, 0}, a_embed_bwd, g_embed_bwd, .main_launch = 1},
    [OP_RMSNORM] = {{"rmsnorm_fwd"}, {1}, a_norm, g_rows_in0},
    [OP_ADD_RMSNORM] = {{"add_rmsnorm_fwd"}, {1}, a_add_norm, g_rows_in0},
    [OP_LAYERNORM] = {{"layernorm_fwd"}, {1}, a_norm, g_rows_in0},
    [OP_RMSNORM_DX] = {{"rmsnorm_dx"}, {1}, a_norm_dx, g_rows_in1},
    [OP_LAYERNORM_DX] = {{"layernorm_dx"}, {1}, a_norm_dx, g_rows_in1},
    [OP_RMSNORM_DW] = {{"rmsnorm_dw"}, {1}, a_norm_dw, g_colsum_out0},
    [OP_LAYERNORM_DW] = {{"layernorm_dw"}, {1}, a_norm_dw, g_colsum_out0},
    [OP_ROPE] = {{"rope"}, {0}, a_rope, g_rope},
    [OP_ROPE_BWD] = {{"rope"}, {0}, a_rope, g_rope},
    [OP_ROPE_TABLE] = {{"rope_table"}, {0}, a_rope_table, g_rope_table, .prefix = p_rope_table},
    [OP_SOFTMAX] = {{"softmax_fwd"}, {1}, a_softmax, g_rows_in0},
    [OP_SOFTMAX_BWD] = {{"softmax_bwd"}, {1}, a_softmax, g_rows_in1},
    [OP_ATTENTION] = {{"attention_fwd"}, {1}, a_attention, g_attention, .smem = s_attention},
    [OP_ATTENTION_DECODE] = {{"attention_decode"}, {1}, a_attention_decode, g_attention_decode},
    [OP_ATTENTION_BWD] = {{"attention_bwd_pre", "attention_bwd_main", "attention_bwd_post"}, {1, 1, 1},
                          a_attention, g_attention, .smem = s_attention, .main_launch = 1},
    [OP_TRANSPOSE] = {{"transpose"}, {0}, a_transpose, g_ew_out0},
    [OP_SLICE] = {{"slice_fwd"}, {0}, a_slice, g_slice},
    [OP_SLICE_BWD] = {{"slice_bwd"}, {0}, a_slice, g_slice},
    [OP_CONCAT] = {{"concat_fwd"}, {0}, a_concat, g_ew_out0},
    [OP_DROPOUT] = {{"dropout_fwd"}, {0}, a_dropout, g_dropout},
    [OP_CROSS_ENTROPY] = {{"ce_rows", "ce_mean"}, {1, 1}, a_ce, g_ce},
    [OP_CROSS_ENTROPY_BWD] = {{"ce_count", "ce_grad"}, {1, 1}, a_ce, g_ce, .main_launch = 1},
    [OP_LINEAR_CE_GRAD] = {{"lce_count", "lce_step", "lce_mean"}, {1, 1, 1}, a_lce, g_lce, .main_launch = 1},
    // (the loss alone: the same kernels, the gradient they form in the workspace unread)
    [OP_LINEAR_CE] = {{"lce_count", "lce_step", "lce_mean"}, {1, 1, 1}, a_lce, g_lce, .main_launch = 1},
    [OP_LOGPROBS] = {{"lp_rows"}, {1}, a_lp, g_lp},
    [OP_LINEAR_LOGPROBS] = {{"llp_rows"}, {1}, a_llp, g_llp},
    [OP_LINEAR_LOGPROBS_BWD] = {{"llp_grad"}, {1}, a_llp, g_llp},
    [OP_LOGPROBS_BWD] = {{"lp_grad"}, {1}, a_lp, g_lp},
    [OP_PREFERENCE] = {{"pref_loss"}, {1}, a_pref, g_pref},
    [OP_PREFERENCE_BWD] = {{"pref_grad"}, {1}, a_pref, g_pref},
    [OP_SUM_TO] = {{"sum_to"}, {1}, a_sum_to, g_colsum_out0},
    [OP_DEQUANT] = {{"dequant"}, {0}, a_dequant, g_ew_out0},
    [OP_ADAMW] = {{"adamw"}, {0}, a_adamw, g_update, "adamw_group", ga_adamw, .per_thread = pt_update},
    [OP_ADAMW8BIT] = {{"adamw8bit"}, {1}, a_adamw8bit, g_adamw8bit, "adamw8bit_group", ga_adamw8bit},
    [OP_SGD] = {{"sgd"}, {0}, a_sgd, g_ew_out0, "sgd_group", ga_sgd},
    [OP_GRAD_SUMSQ] = {{"grad_sumsq_part", "grad_sumsq_final"}, {1, 1}, a_grad_sumsq, g_grad_sumsq},
    [OP_GRAD_FACTOR] = {{"grad_factor"}, {0}, a_grad_factor, g_one_thread},
};

const CudaOp *cuda_op(OpKind op) {
    const CudaOp *c = &column[op];
    return c->fn[0] ? c : NULL;
}
