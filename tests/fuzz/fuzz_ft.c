// fuzz_ft.c — the libFuzzer harness for the .ft frontend.
//
// One input is one .ft file. It runs the pipeline `ftc compile` runs up to the IR:
//
//   fe_source_from_string -> fe_parse -> fe_check -> fe_elaborate(micro-batch 1)
//     -> ir_verify -> lora_apply (when the train section asks for LoRA) -> ir_verify
//
// and frees everything, so ASan's leak checker sees a leak in any stage. Besides
// the sanitizers it checks these invariants and abort()s when one breaks:
//   - a stage that fails (parse NULL, check -1, elaborate NULL, lora -1) has reported
//     at least one error: failing silently leaves the user with exit 1 and no message;
//   - a graph the elaborator (or the LoRA pass) accepted passes ir_verify.
//
// Elaboration is skipped (parse and check still run) when it could be slow for
// reasons that are not bugs: train seq > FUZZ_MAX_SEQ, batch or micro_batch >
// FUZZ_MAX_BATCH, or the product of all repeat counts in the model, each bounded by
// folding integer constants (see repeat_work), > FUZZ_MAX_LAYERS. Plain block calls
// are not capped: the elaborator's own depth limit is what bounds them.
//
// Diagnostics go to stderr; LLVMFuzzerInitialize points `stderr` at /dev/null unless
// FTC_FUZZ_VERBOSE is set. Sanitizer reports and libFuzzer's own output write to
// file descriptor 2 and are not affected; this harness's own abort messages go to
// the original stderr.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "frontend.h"
#include "passes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    FUZZ_MAX_SEQ = 4096,
    FUZZ_MAX_BATCH = 64,
    FUZZ_MAX_LAYERS = 4096,     // product of the repeat counts
    FUZZ_FOLD_STEPS = 10000,    // work allowed to bound the repeat counts
    FUZZ_FOLD_DEPTH = 32,       // identifier chain length followed while folding
};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *fuzz_err;          // the real stderr, for this harness's own messages

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_err = stderr;
    const char *v = getenv("FTC_FUZZ_VERBOSE");
    if (v && *v && strcmp(v, "0") != 0)
        return 0;
#if defined(__GLIBC__)
    // glibc's stderr is an assignable FILE *: the frontend's fprintf(stderr, ...) goes
    // to /dev/null while fd 2 (libFuzzer, ASan, UBSan) stays as it was.
    FILE *null = fopen("/dev/null", "w");
    if (null)
        stderr = null;
#endif
    return 0;
}

_Noreturn static void bug(const char *what, const FtSource *src) {
    FILE *f = fuzz_err ? fuzz_err : stderr;
    fprintf(f, "fuzz_ft: BUG: %s (%d errors reported)\n", what, src->errors);
    fflush(f);
    abort();
}

//
// The repeat cap: an upper bound on each repeat count, by folding integer constants.
//

typedef struct Fold {
    const Ast *model;
    int64_t seq;
    int steps;
} Fold;

static const int64_t HUGE_BOUND = INT64_MAX;

static int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? HUGE_BOUND : r;
}

static int64_t sat_mul(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? HUGE_BOUND : r;
}

static int64_t bound(Fold *f, const Ast *x, int depth);

// The largest bound of any assignment to `name` anywhere in the model (constants,
// block bodies, forward): names are scoped, so any of them may be the one in use.
static int64_t bound_ident(Fold *f, const char *name, int depth) {
    if (strcmp(name, "B") == 0)
        return 1;                       // the harness elaborates micro-batch 1
    if (strcmp(name, "S") == 0)
        return f->seq;
    if (depth > FUZZ_FOLD_DEPTH)
        return HUGE_BOUND;
    int64_t best = 0;
    for (const Ast *it = f->model->body; it; it = it->next) {
        const Ast *lists[2] = {it, it->kind == AST_BLOCK || it->kind == AST_FORWARD ? it->body : NULL};
        for (int k = 0; k < 2; k++)
            for (const Ast *s = lists[k]; s; s = k ? s->next : NULL) {
                if (s->kind != AST_ASSIGN || strcmp(s->name, name) != 0)
                    continue;
                int64_t b = bound(f, s->lhs, depth + 1);
                if (b > best)
                    best = b;
            }
    }
    return best;
}

// An upper bound on |x| when x folds to an integer; 0 when it cannot be one (the
// elaborator then rejects it as a count); HUGE_BOUND when folding gives up.
static int64_t bound(Fold *f, const Ast *x, int depth) {
    if (!x || ++f->steps > FUZZ_FOLD_STEPS)
        return x ? HUGE_BOUND : 0;
    switch (x->kind) {
    case AST_INT: return x->ival;
    case AST_NEG: return bound(f, x->lhs, depth);
    case AST_IDENT: return bound_ident(f, x->name, depth);
    case AST_BINOP: {
        int64_t a = bound(f, x->lhs, depth), b = bound(f, x->rhs, depth);
        switch (x->op) {
        case '+':
        case '-': return sat_add(a, b);
        case '*': return sat_mul(a, b);
        default: return a;              // |a / b| and |a % b| are at most |a|
        }
    }
    default: return 0;                  // floats, sizes, tensors: not a count
    }
}

// The product of the bounds of every repeat count in `x` and below.
static int64_t repeat_work(Fold *f, const Ast *x) {
    int64_t work = 1;
    for (; x; x = x->next) {
        if (x->kind == AST_REPEAT) {
            int64_t n = bound(f, x->lhs, 0);
            work = sat_mul(work, n > 1 ? n : 1);
        }
        const Ast *kids[5] = {x->lhs, x->rhs, x->args, x->inputs, x->body};
        for (int k = 0; k < 5; k++)
            work = sat_mul(work, repeat_work(f, kids[k]));
        if (work == HUGE_BOUND)
            break;
    }
    return work;
}

static bool cheap_to_elaborate(const FtModel *m) {
    const TrainSpec *t = &m->train;
    if (t->seq > FUZZ_MAX_SEQ || t->batch > FUZZ_MAX_BATCH || t->micro_batch > FUZZ_MAX_BATCH)
        return false;
    const Ast *model = NULL;
    for (const Ast *s = m->program->body; s; s = s->next)
        if (s->kind == AST_MODEL)
            model = s;
    if (!model)
        return false;
    Fold f = {.model = model, .seq = t->seq};
    return repeat_work(&f, model->body) <= FUZZ_MAX_LAYERS;
}

//
// The pipeline.
//

static void pass_to_fe(void *ctx, SrcLoc loc, const char *msg) { fe_error(ctx, loc, "%s", msg); }

static void verify_or_abort(const IrGraph *g, const FtSource *src, const char *after) {
    FILE *f = fuzz_err ? fuzz_err : stderr;
    if (ir_verify(g, f) != 0) {
        fprintf(f, "fuzz_ft: the graph after %s failed ir_verify\n", after);
        bug("ir_verify failed on an accepted graph", src);
    }
}

static void run_lora(IrGraph *g, const FtModel *m, FtSource *src, Arena *a) {
    const TrainSpec *t = &m->train;
    int n = t->n_lora_targets;
    const char **names = arena_alloc(a, sizeof(char *) * (size_t)(n > 0 ? n : 1));
    SrcLoc *locs = arena_alloc(a, sizeof(SrcLoc) * (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++)
        names[i] = t->lora_targets[i].name, locs[i] = t->lora_targets[i].loc;
    LoraSpec ls = {t->lora_r, t->lora_alpha, t->lora_dropout, n, names, locs};
    PassDiag d = {pass_to_fe, src, 0};
    int before = src->errors;
    if (lora_apply(g, &ls, &d) != 0) {
        if (d.errors == 0 || src->errors == before)
            bug("lora_apply failed without reporting an error", src);
        return;
    }
    verify_or_abort(g, src, "lora");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // fe_source_from_string takes a C string: the text ends at the first NUL byte.
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    FtSource src;
    fe_source_from_string(&src, "fuzz.ft", text);
    free(text);

    Arena *arena = arena_new();
    Ast *prog = fe_parse(&src, arena);
    if (!prog) {
        if (src.errors == 0)
            bug("fe_parse returned NULL without reporting an error", &src);
        goto done;
    }
    if (prog->kind != AST_PROGRAM)
        bug("fe_parse returned something other than a program", &src);
    FtModel m;
    if (fe_check(&src, prog, &m, arena) != 0) {
        if (src.errors == 0)
            bug("fe_check failed without reporting an error", &src);
        goto done;
    }
    if (src.errors != 0)
        bug("fe_check passed after reporting errors", &src);
    if (!cheap_to_elaborate(&m))
        goto done;
    IrGraph *g = fe_elaborate(&src, &m, 1, arena);
    if (!g) {
        if (src.errors == 0)
            bug("fe_elaborate returned NULL without reporting an error", &src);
        goto done;
    }
    if (src.errors != 0)
        bug("fe_elaborate returned a graph after reporting errors", &src);
    verify_or_abort(g, &src, "elaborate");
    if (m.train.lora)
        run_lora(g, &m, &src, arena);
    ir_graph_free(g);
done:
    arena_free(arena);
    fe_source_free(&src);
    return 0;
}
