// frontend.h — from .ft text to the IR: diagnostics, sizes, the AST, the parser,
// elaboration, `ftc import`, and the command-line driver.
#ifndef FTC_FRONTEND_H
#define FTC_FRONTEND_H

#include "../ir/ir.h"
#include "../passes/passes.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

//
// diag.c — user errors: "file:line:col: error: message", the source line, a caret.
//

typedef struct FtSource {
    const char *path;       // as the user wrote it
    char *text;             // NUL-terminated contents (heap)
    size_t len;
    int errors;             // errors reported against this source
} FtSource;

// Reads `path`; returns 0, or -1 with errno set.
int fe_source_read(FtSource *src, const char *path);
// Wraps a string (e.g. the command line) as a source; `text` is copied.
void fe_source_from_string(FtSource *src, const char *path, const char *text);
void fe_source_free(FtSource *src);

// Prints an error at `loc` of `src` to stderr and counts it.
void fe_error(FtSource *src, SrcLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// Prints a note (no count) at `loc`; used after an error to point at a second place.
void fe_note(FtSource *src, SrcLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

//
// size.c — "40G", "40GiB" (2^30), "40GB" (10^9), "512M", "1.5T", plain bytes.
//

// Parses a size; returns 0, or -1 with a reason in `why`.
int fe_size_parse(const char *s, int64_t *bytes, char *why, size_t whylen);
// Formats bytes as GiB with two decimals ("15.23 GiB").
const char *fe_gib(char *buf, size_t cap, int64_t bytes);

//
// ast.c — the syntax tree. One node type; the kind says which fields are valid.
//

typedef enum AstKind {
    // expressions
    AST_INT,        // ival
    AST_FLOAT,      // fval
    AST_SIZE,       // ival (bytes)
    AST_BOOL,       // ival
    AST_STR,        // name (the string)
    AST_IDENT,      // name
    AST_BINOP,      // op ('+' '-' '*' '/' '%'), lhs, rhs
    AST_NEG,        // lhs
    AST_CALL,       // name, args (AST_ARG list)
    AST_INDEX,      // lhs (the table), args
    AST_TUPLE,      // args
    AST_LIST,       // args
    AST_REPEAT,     // lhs (count), name (block), args
    AST_ARG,        // name (keyword, or NULL), lhs (value)
    // declarations and statements
    AST_ASSIGN,     // name, lhs (value)
    AST_PARAM,      // name, dtype (or NULL), args (dims), str (checkpoint name)
    AST_RETURN,     // lhs
    AST_EXPR_STMT,  // lhs (a call: lora(...), quantize(...))
    AST_BLOCK,      // name, inputs (AST_INPUT list), str (name prefix), body
    AST_INPUT,      // name, dtype (or NULL), args (dims)
    AST_FORWARD,    // inputs, body
    AST_MODEL,      // name, body (assign, param, block, forward)
    AST_TRAIN,      // body
    AST_PROGRAM,    // body (model, train)
} AstKind;

typedef struct Ast Ast;
struct Ast {
    AstKind kind;
    SrcLoc loc;
    const char *name;
    const char *str;
    const char *dtype;
    SrcLoc dtype_loc;
    int64_t ival;
    double fval;
    char op;
    Ast *lhs, *rhs;
    Ast *args;      // first of a list linked by next
    Ast *inputs;
    Ast *body;
    Ast *next;
};

Ast *ast_new(Arena *a, AstKind kind, SrcLoc loc);
Ast *ast_append(Ast *list, Ast *item);      // returns the list head
int ast_count(const Ast *list);

//
// parse.c (parser.y + lexer.l) — text to AST.
//

struct FtLexExtra {                 // the lexer's state, shared with the parser
    FtSource *src;
    Arena *arena;
    int line, col;
};

// Parses `src`; returns the program, or NULL after reporting errors to stderr.
Ast *fe_parse(FtSource *src, Arena *a);

//
// elaborate.c — AST to IR for a micro-batch B and sequence length S.
//

typedef enum Precision {
    PREC_BF16,      // bf16 weights/grads/compute, fp32 master weights and optimizer state
    PREC_FP16,      // fp16 likewise
    PREC_FP32,      // fp32 everything
    PREC_BF16_PURE, // bf16 everything, optimizer state included, no master
} Precision;

typedef struct LoraTarget {
    const char *name;   // as written: a param of the .ft or an HF module name (q_proj)
    SrcLoc loc;
} LoraTarget;

typedef struct TrainSpec {
    int64_t seq, batch;         // sequence length, global batch (sequences per optimizer step)
    int64_t micro_batch;        // 0 when not given: the global batch, no accumulation
    Precision precision;
    bool master_weights;        // fp32 master copies (default: mixed precision only)
    DType optim_dtype;          // AdamW m, v
    const char *optimizer;      // "adamw" or "sgd"
    double lr, beta1, beta2, eps, weight_decay;
    int64_t budget_bytes, host_mem_bytes;   // 0 when not given
    // lora(...)
    bool lora;
    int64_t lora_r;
    double lora_alpha, lora_dropout;
    LoraTarget *lora_targets;
    int n_lora_targets;
    SrcLoc lora_loc;
    // quantize(...)
    bool quantize, double_quant;
    SrcLoc loss_loc;
} TrainSpec;

typedef struct FtModel {
    const char *name;
    Ast *program;
    TrainSpec train;
    int64_t n_layers;           // largest repeat count, for reports
} FtModel;

// Checks the model and train sections and reads the train spec (allocated in `a`,
// like the AST); 0, or -1 after reporting errors.
int fe_check(FtSource *src, Ast *program, FtModel *m, Arena *a);
// Builds the forward graph and loss for micro-batch `batch`; NULL after errors.
IrGraph *fe_elaborate(FtSource *src, const FtModel *m, int64_t batch, Arena *a);

//
// pipeline.c — the compile pipeline and the planner's report.
//

typedef struct BuildStats {
    QuantStats quant;
    RematStats remat;
    OffloadStats offload;
    ScheduleStats schedule;
    AllocStats alloc;
} BuildStats;

// Runs elaborate → lora → autodiff → quantize → chunked loss → remat → offload → schedule →
// liveness → alloc for choice `c` in arena `a` (printing the IR after each pass to
// `dump_to` if not NULL). NULL after reporting errors.
IrGraph *fe_build(FtSource *src, const FtModel *m, const PlanChoice *c, Arena *a, BuildStats *bs,
                  FILE *dump_to);

// What the planner's build function needs: the program, its spec, the GPU, the cost model.
typedef struct FePlanCtx {
    FtSource *src;
    FtModel m;
    const GpuPreset *gpu;
    CostModel cm;
} FePlanCtx;

// PlannerInput.build for ftc: builds choice `c` with fe_build and fills `out` (device
// bytes with the context reserve, host bytes, cost, recompute, the peak's breakdown).
// `ctx` is an FePlanCtx. 0, or -1 when the program does not build.
int fe_plan_choice(void *ctx, const PlanChoice *c, PlanOutcome *out);

typedef struct CompileOptions {
    int64_t budget_bytes, host_bytes;
    int64_t micro;          // fixed by the user, else 0
    int remat, offload;     // fixed by the user (RematPolicy, offload level 0..2), else -1
    int nlayers;
    MemBreakdown states;    // weights, grads, optimizer, master of the model
} CompileOptions;

// Searches for the fastest plan that fits; prints the decision and the candidates to
// `out` (and `report`, if not NULL). Returns 0 with *chosen set, or -1 after printing
// why nothing fits and what would.
int fe_compile_plan(FtSource *src, const FtModel *m, const GpuPreset *gpu, const CompileOptions *o,
                    FILE *out, FILE *report, PlanChoice *chosen);

//
// import.c — Hugging Face config.json to .ft.
//

// Writes a .ft for the config at `path` to `out`; returns 0, or 1 after an error.
int fe_import(const char *path, FILE *out);

//
// ftc.c — the driver.
//

int ftc_main(int argc, char **argv);

#endif
