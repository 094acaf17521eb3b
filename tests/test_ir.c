// test_ir.c — the op table's shape rules, FLOPs and bytes; views; the verifier.
#include "../ir/ir.h"
#include "check.h"

static SrcLoc here = {"test.ft", 1, 1, 1};

static int param(IrGraph *g, const char *name, DType dt, int nd, int64_t a, int64_t b) {
    int64_t s[2] = {a, b};
    int id = ir_tensor_add(g, name, TK_PARAM, dt, nd, s, here);
    ir_tensor(g, id)->hf_name = name;
    ir_tensor(g, id)->trainable = true;
    ir_tensor(g, id)->requires_grad = true;
    return id;
}

static int input(IrGraph *g, const char *name, DType dt, int nd, const int64_t *s) {
    return ir_tensor_add(g, name, TK_INPUT, dt, nd, s, here);
}

static int node(IrGraph *g, OpKind op, int nin, int a, int b, int c, OpAttr attr, IrShapeErr *err) {
    int in[3] = {a, b, c};
    int id = ir_node_add(g, op, nin, in, attr, "t", -1, here, err);
    return id < 0 ? -1 : g->nodes.at[id].out[0];
}

static void test_dtype_bytes(void) {
    CHECK_EQ(4, dtype_bytes(DT_F32, 1));
    CHECK_EQ(2, dtype_bytes(DT_BF16, 1));
    CHECK_EQ(32, dtype_bytes(DT_NF4, 64));       // two 4-bit values a byte
    CHECK_EQ(1, dtype_bytes(DT_NF4, 1));          // rounds up to whole bytes
    DType t;
    CHECK(dtype_parse("bf16", &t) && t == DT_BF16);
    CHECK(!dtype_parse("f64", &t));
    CHECK_STR("optimizer", mem_category_name(MEM_OPTIMIZER));
}

static void test_linear(void) {
    Arena *a = arena_new();
    IrGraph *g = ir_graph_new(a);
    IrShapeErr err;
    int64_t xs[3] = {2, 16, 64};
    int x = input(g, "x", DT_BF16, 3, xs);
    int w = param(g, "w", DT_BF16, 2, 96, 64), b = param(g, "b", DT_BF16, 1, 96, 0);
    int y = node(g, OP_LINEAR, 3, x, w, b, (OpAttr){0}, &err);
    CHECK(y >= 0);
    const IrTensor *t = ir_tensor(g, y);
    CHECK_EQ(3, t->ndim);
    CHECK_EQ(96, t->shape[2]);
    CHECK_EQ(2 * 16 * 96 * 2, ir_tensor_bytes(t));
    CHECK(t->requires_grad);
    const IrNode *n = &g->nodes.at[0];
    CHECK_EQ(2LL * 32 * 96 * 64 + 32 * 96, op_flops(g, n));
    CHECK_EQ((32 * 64 + 96 * 64 + 96) * 2, op_bytes_read(g, n));
    CHECK_EQ(32 * 96 * 2, op_bytes_written(g, n));
    // mismatch: both shapes in the message, blamed on the weight
    int w2 = param(g, "w2", DT_BF16, 2, 96, 65);
    CHECK_EQ(-1, node(g, OP_LINEAR, 2, x, w2, -1, (OpAttr){0}, &err));
    CHECK(strstr(err.msg, "bf16[2, 16, 64]") && strstr(err.msg, "bf16[96, 65]"));
    CHECK_EQ(1, err.arg);
    CHECK_EQ(0, ir_verify(g, stdout));
    ir_graph_free(g);
    arena_free(a);
}

static void test_attention(void) {
    Arena *a = arena_new();
    IrGraph *g = ir_graph_new(a);
    IrShapeErr err;
    int64_t qs[4] = {2, 8, 4, 16}, ks[4] = {2, 8, 2, 16}, bad[4] = {2, 8, 3, 16};
    int q = input(g, "q", DT_BF16, 4, qs), k = input(g, "k", DT_BF16, 4, ks);
    int kb = input(g, "kb", DT_BF16, 4, bad);
    int o = node(g, OP_ATTENTION, 3, q, k, k, (OpAttr){.causal = true}, &err);
    CHECK(o >= 0);
    const IrNode *n = &g->nodes.at[0];
    CHECK(n->out[1] >= 0);
    const IrTensor *lse = ir_tensor(g, n->out[1]);
    CHECK_EQ(DT_F32, lse->dtype);
    CHECK_EQ(3, lse->ndim);
    CHECK_EQ(4, lse->shape[1]);                   // [B, H, S]
    int64_t pairs = 8 * 9 / 2;
    CHECK_EQ(4 * 2 * 4 * 16 * pairs + 5 * 2 * 4 * pairs, op_flops(g, n));
    CHECK_EQ(-1, node(g, OP_ATTENTION, 3, q, kb, kb, (OpAttr){.causal = true}, &err));
    CHECK(strstr(err.msg, "does not fit q"));
    ir_graph_free(g);
    arena_free(a);
}

static void test_view_aliases(void) {
    Arena *a = arena_new();
    IrGraph *g = ir_graph_new(a);
    IrShapeErr err;
    int64_t xs[3] = {2, 16, 64};
    int x = input(g, "x", DT_BF16, 3, xs);
    int s = node(g, OP_SILU, 1, x, -1, -1, (OpAttr){0}, &err);
    OpAttr v = {.ndim = 4, .shape = {2, 16, 4, 16}};
    int y = node(g, OP_VIEW, 1, s, -1, -1, v, &err);
    CHECK(y >= 0);
    CHECK_EQ(s, ir_tensor(g, y)->alias_of);
    CHECK_EQ(0, ir_tensor_bytes(ir_tensor(g, y)));
    OpAttr v2 = {.ndim = 2, .shape = {32, 16}};
    int z = node(g, OP_VIEW, 1, y, -1, -1, v2, &err);
    CHECK_EQ(-1, z);
    CHECK(strstr(err.msg, "element counts differ"));
    OpAttr v3 = {.ndim = 2, .shape = {32, 64}};
    z = node(g, OP_VIEW, 1, y, -1, -1, v3, &err);
    CHECK_EQ(s, ir_tensor(g, z)->alias_of);       // a view of a view shares the base
    CHECK_EQ(s, ir_tensor_base(g, z));
    ir_graph_free(g);
    arena_free(a);
}

static void test_shape_errors(void) {
    Arena *a = arena_new();
    IrGraph *g = ir_graph_new(a);
    IrShapeErr err;
    int64_t xs[3] = {2, 16, 64}, ys[3] = {2, 16, 32}, ids[2] = {2, 16}, rs[4] = {2, 16, 4, 15};
    int x = input(g, "x", DT_BF16, 3, xs), y = input(g, "y", DT_BF16, 3, ys);
    int tok = input(g, "tok", DT_I32, 2, ids), r = input(g, "r", DT_BF16, 4, rs);
    int w = param(g, "w", DT_BF16, 1, 32, 0), tab = param(g, "tab", DT_BF16, 2, 256, 64);
    CHECK_EQ(-1, node(g, OP_ADD, 2, x, y, -1, (OpAttr){0}, &err));
    CHECK(strstr(err.msg, "bf16[2, 16, 64]") && strstr(err.msg, "bf16[2, 16, 32]"));
    CHECK_EQ(-1, node(g, OP_RMSNORM, 2, x, w, -1, (OpAttr){.f = 1e-6}, &err));
    CHECK_EQ(1, err.arg);
    CHECK_EQ(-1, node(g, OP_ROPE, 1, r, -1, -1, (OpAttr){.f = 1e4}, &err));
    CHECK_EQ(-1, node(g, OP_EMBED, 2, tab, x, -1, (OpAttr){0}, &err));   // float ids
    CHECK_EQ(-1, node(g, OP_SILU, 1, tok, -1, -1, (OpAttr){0}, &err));   // int input
    CHECK_EQ(-1, node(g, OP_DROPOUT, 1, x, -1, -1, (OpAttr){.f = 1.0}, &err));
    int e = node(g, OP_EMBED, 2, tab, tok, -1, (OpAttr){0}, &err);
    CHECK_EQ(64, ir_tensor(g, e)->shape[2]);
    CHECK_EQ(2 * 16 * 64 * 2 + 2 * 16 * 4, op_bytes_read(g, &g->nodes.at[g->nodes.len - 1]));
    int lg = node(g, OP_LINEAR, 2, e, tab, -1, (OpAttr){0}, &err);
    int loss = node(g, OP_CROSS_ENTROPY, 2, lg, tok, -1, (OpAttr){0}, &err);
    CHECK_EQ(0, ir_tensor(g, loss)->ndim);
    CHECK_EQ(-1, node(g, OP_CROSS_ENTROPY, 2, lg, x, -1, (OpAttr){0}, &err));
    // the loss backward's scratch: fp32 rows x vocab, or one chunk of rows (same inputs)
    const IrNode *ce = &g->nodes.at[g->nodes.len - 1];
    CHECK_EQ(32 * 256 * 4, op_info(OP_CROSS_ENTROPY_BWD)->scratch_bytes(g, ce));
    IrNode chunked = *ce;
    chunked.attr.chunk_rows = 8;
    CHECK_EQ(8 * 256 * 4, op_info(OP_CROSS_ENTROPY_BWD)->scratch_bytes(g, &chunked));
    CHECK_EQ(0, ir_verify(g, stdout));
    ir_graph_free(g);
    arena_free(a);
}

// Every row of the vocabulary has its compiler columns; names round-trip; only user ops
// are found from .ft; GEMMs say their dimensions; ops with a row chunk or a random
// stream declare the attribute.
static void test_op_table(void) {
    OpKind k;
    for (int i = 0; i < OP_COUNT; i++) {
        const OpDesc *d = op_desc((OpKind)i);
        const OpInfo *op = op_info((OpKind)i);
        CHECK(d->name && op->shape && op->flops);
        CHECK(d->min_in >= ((d->flags & OPF_USER) ? 1 : 0) && d->max_in <= IR_MAX_INPUTS &&
              d->min_in <= d->max_in);
        CHECK(op_find(d->name, &k) && k == (OpKind)i);
        CHECK(op_lookup_user(d->name, &k) == ((d->flags & OPF_USER) != 0));
        CHECK((d->cls == OPC_GEMM) == (op->gemm != NULL));
        CHECK(!(d->attrs & ATTR_F) || d->f_key);
        // every user op's derivative rule exists: a trainable weight behind it trains
        CHECK(!(d->flags & OPF_USER) || ad_rule((OpKind)i));
    }
    CHECK(!op_find("conv2d", &k));
    CHECK(!op_lookup_user("copy", &k) && !op_lookup_user("scale", &k));
    OpKeyword kw[OP_MAX_KEYWORDS];
    CHECK_EQ(2, op_user_keywords(OP_RMSNORM, kw));
    CHECK_STR("eps", kw[0].word);
    CHECK(kw[0].positional && kw[0].required);
    CHECK_STR("offset", kw[1].word);
    CHECK(!kw[1].positional && !kw[1].required);
    CHECK_EQ(1, op_user_keywords(OP_TRANSPOSE, kw));
    CHECK_STR("dims", kw[0].word);
    CHECK_EQ(0, op_user_keywords(OP_LINEAR, kw));
    int n = op_user_keywords(OP_ATTENTION, kw);
    CHECK(n >= 1 && strcmp(kw[0].word, "causal") == 0 && !kw[0].required);   // optional attributes
    for (int i = 0; i < OP_COUNT; i++) {   // every keyword of an op is a distinct word
        n = op_user_keywords((OpKind)i, kw);
        for (int a = 0; a < n; a++)
            for (int b = 0; b < a; b++)
                CHECK(strcmp(kw[a].word, kw[b].word) != 0);
    }
}

// Attributes print and parse back through the shared text form plans use.
static void test_attr_text(void) {
    char buf[256];
    OpAttr a = {.f = 1e-6}, b = {0};
    op_attr_format(buf, sizeof buf, OP_RMSNORM, &a, true);
    CHECK_STR(" eps=9.9999999999999995e-07", buf);
    CHECK_EQ(1, op_attr_parse(OP_RMSNORM, "eps", buf + 5, &b));
    CHECK(b.f == a.f);
    CHECK_EQ(0, op_attr_parse(OP_RMSNORM, "causal", "1", &b));   // not one of its attributes
    CHECK_EQ(-1, op_attr_parse(OP_ATTENTION, "causal", "yes", &b));
    OpAttr v = {.ndim = 3, .shape = {2, 16, 64}};
    op_attr_format(buf, sizeof buf, OP_VIEW, &v, true);
    CHECK_STR(" shape=2x16x64", buf);
    OpAttr w = {0};
    CHECK_EQ(1, op_attr_parse(OP_VIEW, "shape", "2x16x64", &w));
    CHECK(w.ndim == 3 && w.shape[2] == 64);
    CHECK_EQ(-1, op_attr_parse(OP_VIEW, "shape", "2x0", &w));
    OpAttr t = {.perm = {1, 2}};
    op_attr_format(buf, sizeof buf, OP_TRANSPOSE, &t, false);
    CHECK_STR(" perm=1,2", buf);
    CHECK_EQ(-1, op_attr_parse(OP_TRANSPOSE, "perm", "1,9", &w));
}

// The attributes the architectures added print and parse back, every field exactly.
static void parse_back(OpKind op, const OpAttr *a, OpAttr *b) {
    char buf[512];
    op_attr_format(buf, sizeof buf, op, a, true);
    *b = (OpAttr){0};
    for (char *save, *kv = strtok_r(buf, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        CHECK(eq != NULL);
        if (!eq)
            return;
        *eq = '\0';
        CHECK_EQ(1, op_attr_parse(op, kv, eq + 1, b));
    }
}

static void test_attr_text_more(void) {
    char buf[512];
    OpAttr r = {.f = 500000, .rope = {.rotary = 32, .scaling = ROPE_LLAMA3, .factor = 8, .low = 1,
                                      .high = 4, .original = 8192}}, b;
    op_attr_format(buf, sizeof buf, OP_ROPE, &r, false);
    CHECK_STR(" theta=500000 rotary=32 scaling=llama3 factor=8 low=1 high=4 original=8192", buf);
    parse_back(OP_ROPE, &r, &b);
    CHECK(memcmp(&b.rope, &r.rope, sizeof r.rope) == 0 && b.f == r.f);
    OpAttr y = {.f = 1e6, .rope = {.scaling = ROPE_YARN, .factor = 4, .original = 32768,
                                   .attn_factor = 0.9210423553163399, .no_truncate = true}};
    parse_back(OP_ROPE_BWD, &y, &b);
    CHECK(memcmp(&b.rope, &y.rope, sizeof y.rope) == 0);
    OpAttr d = {.f = 1e4, .rope = {.scaling = ROPE_DYNAMIC, .factor = 2, .original = 2048, .length = 4096}};
    parse_back(OP_ROPE, &d, &b);
    CHECK(memcmp(&b.rope, &d.rope, sizeof d.rope) == 0);
    CHECK_EQ(-1, op_attr_parse(OP_ROPE, "scaling", "longrope", &b));
    OpAttr s = {.axis = 2, .start = 96, .size = 48};
    op_attr_format(buf, sizeof buf, OP_SLICE, &s, true);
    CHECK_STR(" axis=2 start=96 size=48", buf);
    parse_back(OP_SLICE_BWD, &s, &b);
    CHECK(b.axis == 2 && b.start == 96 && b.size == 48);
    CHECK_EQ(-1, op_attr_parse(OP_SLICE, "axis", "6", &b));
    OpAttr n = {.f = 1e-6, .offset = 1};
    parse_back(OP_RMSNORM_DX, &n, &b);
    CHECK(b.offset == 1 && b.f == 1e-6);
    OpAttr c = {.f = 30};
    op_attr_format(buf, sizeof buf, OP_SOFTCAP, &c, false);
    CHECK_STR(" cap=30", buf);
}

static void test_requires_grad(void) {
    Arena *a = arena_new();
    IrGraph *g = ir_graph_new(a);
    IrShapeErr err;
    int64_t xs[2] = {4, 8};
    int x = input(g, "x", DT_F32, 2, xs);
    int w = param(g, "w", DT_F32, 2, 8, 8);
    int h = node(g, OP_SILU, 1, x, -1, -1, (OpAttr){0}, &err);
    int y = node(g, OP_LINEAR, 2, h, w, -1, (OpAttr){0}, &err);
    CHECK(!ir_tensor(g, h)->requires_grad);
    CHECK(ir_tensor(g, y)->requires_grad);
    ir_tensor(g, w)->trainable = false;
    ir_mark_requires_grad(g);
    CHECK(!ir_tensor(g, y)->requires_grad);
    ir_graph_free(g);
    arena_free(a);
}

// The verifier rejects each kind of broken graph, saying what is wrong.
static void test_verify_catches(void) {
    Arena *a = arena_new();
    IrGraph *g = ir_graph_new(a);
    IrShapeErr err;
    int64_t xs[2] = {4, 8};
    int x = input(g, "x", DT_F32, 2, xs);
    int h = node(g, OP_SILU, 1, x, -1, -1, (OpAttr){0}, &err);
    node(g, OP_EXP, 1, h, -1, -1, (OpAttr){0}, &err);
    CHECK_EQ(0, ir_verify(g, stdout));
    FILE *sink = tmpfile();
    IrNode saved = g->nodes.at[0];
    g->nodes.at[0].in[0] = h;                     // reads its own output: before it is made
    CHECK(ir_verify(g, sink) > 0);
    g->nodes.at[0] = saved;
    g->tensors.at[h].shape[1] = 0;                // a zero dimension
    CHECK(ir_verify(g, sink) > 0);
    g->tensors.at[h].shape[1] = 8;
    g->nodes.at[1].out[0] = h;                       // two nodes write one tensor
    CHECK(ir_verify(g, sink) > 0);
    rewind(sink);
    char line[256] = "";
    CHECK(fgets(line, sizeof line, sink) && strstr(line, "ir: "));
    fclose(sink);
    ir_graph_free(g);
    arena_free(a);
}

int main(void) {
    RUN(test_dtype_bytes);
    RUN(test_linear);
    RUN(test_attention);
    RUN(test_view_aliases);
    RUN(test_shape_errors);
    RUN(test_op_table);
    RUN(test_attr_text);
    RUN(test_attr_text_more);
    RUN(test_requires_grad);
    RUN(test_verify_catches);
    return CHECK_DONE();
}
