// test_frontend.c — sizes, the parser, checking and elaboration, on strings and on
// the shipped models.
#include "../frontend/frontend.h"
#include "../passes/passes.h"
#include "check.h"

#include <unistd.h>

static const char *srcdir = ".";

static void test_sizes(void) {
    int64_t b;
    char why[200];
    CHECK(fe_size_parse("40G", &b, why, sizeof why) == 0 && b == 40LL << 30);
    CHECK(fe_size_parse("40GiB", &b, why, sizeof why) == 0 && b == 40LL << 30);
    CHECK(fe_size_parse("40GB", &b, why, sizeof why) == 0 && b == 40000000000LL);
    CHECK(fe_size_parse("1.5G", &b, why, sizeof why) == 0 && b == 3LL << 29);
    CHECK(fe_size_parse("512M", &b, why, sizeof why) == 0 && b == 512LL << 20);
    CHECK(fe_size_parse("16MB", &b, why, sizeof why) == 0 && b == 16000000);
    CHECK(fe_size_parse("4096", &b, why, sizeof why) == 0 && b == 4096);
    CHECK(fe_size_parse("2T", &b, why, sizeof why) == 0 && b == 2LL << 40);
    CHECK(fe_size_parse("40Q", &b, why, sizeof why) != 0 && strstr(why, "bad size suffix 'Q'"));
    CHECK(fe_size_parse("40g", &b, why, sizeof why) != 0);     // case matters: g is not G
    CHECK(fe_size_parse("G", &b, why, sizeof why) != 0);
    CHECK(fe_size_parse("1.G", &b, why, sizeof why) != 0);
    CHECK(fe_size_parse("0.1B", &b, why, sizeof why) != 0);    // not whole bytes
    CHECK(fe_size_parse("99999999T", &b, why, sizeof why) != 0);
}

// Parses and checks `text`; returns errors, leaves the model in *m.
static int check_text(const char *text, FtModel *m, Arena *a, FtSource *src) {
    fe_source_from_string(src, "t.ft", text);
    Ast *p = fe_parse(src, a);
    if (!p)
        return src->errors ? src->errors : -1;
    fe_check(src, p, m, a);
    return src->errors;
}

static const char *tiny_model =
    "model m {\n"
    "  v = 16  d = 2 * (3 + 1)  h = 2\n"          // several statements on one line
    "  k = -(d - 10) % 3   # a comment\n"
    "  f = 1.5e-1\n"
    "  param emb [v, d] as \"e.weight\"\n"
    "  param n [d] as \"n.weight\"\n"
    "  block blk(x [B, S, d]) as \"layers.{i}\" {\n"
    "    param w [d, d] as \"mlp.w.weight\"\n"
    "    y = silu(linear(rmsnorm(x, n, 1e-5), w)) * 0.5\n"
    "    return x + y\n"
    "  }\n"
    "  forward(tok i32[B, S]) {\n"
    "    x = repeat(3) blk(emb[tok])\n"
    "    return linear(x, emb)\n"
    "  }\n"
    "}\n"
    "train {\n"
    "  seq = 5  batch = 4  micro_batch = 2\n"
    "  loss = cross_entropy(forward(tok), next(tok))\n"
    "  precision = fp32\n"
    "  optimizer = adamw(lr = 1e-3, betas = (0.9, 0.95), weight_decay = 0.1)\n"
    "  budget = 2GB\n"
    "}\n";

static void test_parse_and_elaborate(void) {
    Arena *a = arena_new();
    FtSource src;
    FtModel m;
    CHECK_EQ(0, check_text(tiny_model, &m, a, &src));
    CHECK_STR("m", m.name);
    CHECK_EQ(5, m.train.seq);
    CHECK_EQ(4, m.train.batch);
    CHECK_EQ(2, m.train.micro_batch);
    CHECK_EQ(PREC_FP32, m.train.precision);
    CHECK(!m.train.master_weights);
    CHECK_CLOSE(0.95, m.train.beta2, 1e-12);
    CHECK_CLOSE(0.1, m.train.weight_decay, 1e-12);
    CHECK_EQ(2000000000LL, m.train.budget_bytes);
    IrGraph *g = fe_elaborate(&src, &m, 2, a);
    CHECK(g != NULL);
    if (g) {
        CHECK_EQ(0, ir_verify(g, stdout));
        CHECK_EQ(2, g->batch);
        ParamCount pc = count_params(g);
        CHECK_EQ(16 * 8 + 8 + 3 * 64, pc.total);
        CHECK_EQ(5, pc.tensors);
        // params named by the .ft path, loaded by their checkpoint names
        bool found = false;
        for (int i = 0; i < g->tensors.len; i++) {
            const IrTensor *t = &g->tensors.at[i];
            if (t->kind == TK_PARAM && strcmp(t->name, "blk.2.w") == 0) {
                found = true;
                CHECK_STR("layers.2.mlp.w.weight", t->hf_name);
                CHECK_EQ(2, t->layer);
                CHECK_EQ(DT_F32, t->dtype);
                CHECK_EQ(8, t->loc.line);
            }
        }
        CHECK(found);
        // the loss: a scalar from the logits [2, 5, 16] and targets
        CHECK(g->loss >= 0 && g->logits >= 0);
        const IrTensor *lg = &g->tensors.at[g->logits];
        CHECK_EQ(3, lg->ndim);
        CHECK_EQ(16, lg->shape[2]);
        // every node points at the line that made it; `* 0.5` became a scale
        int scales = 0;
        for (int i = 0; i < g->nodes.len; i++) {
            CHECK(g->nodes.at[i].loc.line > 0);
            scales += g->nodes.at[i].op == OP_SCALE;
        }
        CHECK_EQ(3, scales);
        ir_graph_free(g);
    }
    fe_source_free(&src);
    arena_free(a);
}

// Constant arithmetic: precedence, unary minus, modulo, floats.
static void test_constants(void) {
    Arena *a = arena_new();
    FtSource src;
    FtModel m;
    char text[4096];
    snprintf(text, sizeof text, "%s", tiny_model);
    // d = 2 * (3 + 1) = 8: the embedding is [16, 8]; k = -(8 - 10) % 3 = 2
    char *p = strstr(text, "param n [d]");
    memcpy(p, "param n [k]", 11);                      // n is [2]: norm of an 8-wide x fails
    CHECK_EQ(0, check_text(text, &m, a, &src));
    FILE *saved = stderr;
    stderr = tmpfile();
    IrGraph *g = fe_elaborate(&src, &m, 2, a);
    fclose(stderr);
    stderr = saved;
    CHECK(g == NULL);
    CHECK_EQ(1, src.errors);
    fe_source_free(&src);
    arena_free(a);
}

// What differs by layer: a block reads its layer index, and a list's element by it. Here
// every third layer attends to all keys, the others through a window, with their own theta.
static const char *layered =
    "model l {\n"
    "  V = 16  D = 8\n"
    "  param e [V, D] as \"e\"\n"
    "  block blk(x [B, S, D]) as \"layers.{i}\" {\n"
    "    w = [4, 4, 0][layer % 3]\n"
    "    q = rope(view(x, [B, S, 2, 4]), positions, [10000.0, 10000.0, 1000000.0][layer % 3])\n"
    "    return x + view(attention(q, q, q, causal = true, window = w), [B, S, D])\n"
    "  }\n"
    "  forward(tokens i32[B, S]) {\n"
    "    return linear(repeat(5) blk(e[tokens]), e)\n"
    "  }\n"
    "}\n"
    "train {\n"
    "  seq = 9  batch = 1\n"
    "  loss = cross_entropy(forward(tokens), next(tokens))\n"
    "}\n";

static void test_layer_index(void) {
    Arena *a = arena_new();
    FtSource src;
    FtModel m;
    CHECK_EQ(0, check_text(layered, &m, a, &src));
    IrGraph *g = fe_elaborate(&src, &m, 1, a);
    CHECK(g != NULL);
    int att = 0, ropes = 0;
    for (int i = 0; g && i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        if (n->op == OP_ATTENTION) {
            CHECK_EQ(n->layer % 3 == 2 ? 0 : 4, n->attr.window);
            att++;
        }
        if (n->op == OP_ROPE) {
            CHECK(n->attr.f == (n->layer % 3 == 2 ? 1e6 : 1e4));
            ropes++;
        }
    }
    CHECK_EQ(5, att);
    CHECK_EQ(5, ropes);
    if (g)
        ir_graph_free(g);
    fe_source_free(&src);
    arena_free(a);
}

static void test_syntax_error_location(void) {
    Arena *a = arena_new();
    FtSource src;
    FtModel m;
    FILE *saved = stderr;
    stderr = tmpfile();
    FILE *cap = stderr;
    int errs = check_text("model m {\n  x = 1 +\n}\n", &m, a, &src);
    rewind(cap);
    char line[256] = "";
    CHECK(fgets(line, sizeof line, cap) != NULL);
    fclose(cap);
    stderr = saved;
    CHECK(errs >= 1);
    CHECK(strncmp(line, "t.ft:3:1: error: syntax error, unexpected '}'", 45) == 0);
    fe_source_free(&src);
    arena_free(a);
}

// Every shipped model parses, checks, elaborates, verifies and has the published count.
static void test_models(void) {
    static const struct { const char *file; int64_t params; } models[] = {
        {"qwen2.ft", 7615616512LL},      {"qwen2-0.5b.ft", 494032768LL},
        {"qwen2-1.5b.ft", 1543714304LL}, {"qwen2-72b.ft", 72706203648LL},
        {"llama2-7b.ft", 6738415616LL},  {"tiny.ft", 125504},
        // transformers' num_parameters() (tests/configs/counts.txt)
        {"gpt2.ft", 124439808LL},          {"llama-3.1-8b.ft", 8030261248LL},
        {"qwen3-8b.ft", 8190735360LL},     {"mistral-7b-v0.1.ft", 7241732096LL},
        {"gemma-7b.ft", 8537680896LL},     {"gemma-2-9b.ft", 9241705984LL},
        {"gemma-3-1b.ft", 999885952LL},    {"phi-3-mini-4k.ft", 3821079552LL},
        {"pythia-160m.ft", 162322944LL},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/models/%s", srcdir, models[i].file);
        Arena *a = arena_new();
        FtSource src;
        FtModel m;
        CHECK_EQ(0, fe_source_read(&src, path));
        Ast *p = fe_parse(&src, a);
        CHECK(p && fe_check(&src, p, &m, a) == 0);
        IrGraph *g = p ? fe_elaborate(&src, &m, 1, a) : NULL;
        CHECK(g != NULL);
        if (g) {
            CHECK_EQ(0, ir_verify(g, stdout));
            ParamCount pc = count_params(g);
            if (pc.total != models[i].params)
                printf("  %s\n", models[i].file);
            CHECK_EQ(models[i].params, pc.total);
            CHECK_EQ(models[i].params, pc.trainable);
            ir_graph_free(g);
        }
        fe_source_free(&src);
        arena_free(a);
    }
}

int main(int argc, char **argv) {
    if (argc > 1)
        srcdir = argv[1];
    RUN(test_sizes);
    RUN(test_parse_and_elaborate);
    RUN(test_constants);
    RUN(test_syntax_error_location);
    RUN(test_layer_index);
    RUN(test_models);
    return CHECK_DONE();
}
