// frontend.h — from .ft text to the IR: diagnostics, sizes, the AST, the parser,
// elaboration, and `ftc import`. It knows the IR and nothing of the passes.
#ifndef FTC_FRONTEND_H
#define FTC_FRONTEND_H

#include "../ir/ir.h"

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

// The learning rate over the run: after `warmup_steps` of a linear rise from 0, held
// (constant) or decayed to min_lr at `steps` (linear, cosine), as Hugging Face's
// get_*_schedule_with_warmup.
typedef enum LrSchedule { LR_CONSTANT, LR_LINEAR, LR_COSINE } LrSchedule;

// The optimizer, parsed once from the train section (fe_optimizer_name: its .ft name).
typedef enum OptimizerKind { OPTIM_ADAMW, OPTIM_ADAMW8BIT, OPTIM_SGD } OptimizerKind;
const char *fe_optimizer_name(OptimizerKind k);
// Whether it keeps Adam's two moments (adamw, adamw8bit).
static inline bool fe_adam_like(OptimizerKind k) { return k != OPTIM_SGD; }

typedef struct TrainSpec {
    int64_t seq, batch;         // sequence length, global batch (sequences per optimizer step)
    int64_t micro_batch;        // 0 when not given: the global batch, no accumulation
    Precision precision;
    bool master_weights;        // fp32 master copies (default: mixed precision only)
    DType optim_dtype;          // AdamW m, v
    OptimizerKind optimizer;
    double lr, beta1, beta2, eps, weight_decay;
    int64_t min_8bit_size;      // adamw8bit: tensors of fewer elements keep 32-bit moments
    bool decay_all;             // weight decay on norm weights and biases too (default: not)
    int kahan;                  // AdamW in bf16_pure: each update Kahan-compensated through a
                                // bf16 buffer (1, the default there), or not (0); -1 not given
    SrcLoc kahan_loc;
    LrSchedule lr_schedule;
    int64_t warmup_steps;       // optimizer steps of the linear warm-up
    int64_t steps;              // the run's optimizer steps, 0 when not given
    double min_lr;              // where linear and cosine end
    double clip;                // the gradients' global L2 norm clipped to this, 0: never
    // fp16's dynamic loss scale, as torch.amp.GradScaler: the loss's backward times `scale`,
    // which halves (backoff) at a step whose gradients overflow (the step skipped) and
    // doubles (growth) after `interval` steps without
    double scale_init, scale_growth, scale_backoff;
    int64_t scale_interval;
    SrcLoc master_loc;          // where master_weights was set (for a refusal)
    bool packing;               // packed records: rope and attention read the position ids
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
    // loss = dpo(...), ipo, orpo, simpo: a preference loss over pairs of rows
    int pref_kind;              // PrefKind, or -1: cross entropy
    double pref_beta;
    OpPref pref;
    RefMode reference;          // dpo, ipo: how the reference is had (REF_NONE for the others)
    SrcLoc reference_loc;
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

// A checked program, which the passes elaborate at any micro-batch and sequence length
// (fe_elaborate_at); the source and the model must outlive them.
typedef struct FtProgram {
    FtSource *src;
    const FtModel *m;
} FtProgram;

// The program `ctx` (an FtProgram) at micro-batch `micro` and sequence length `seq`: the
// passes' elaboration callback. Planner threads call it at once: each call counts errors
// in a source of its own.
IrGraph *fe_elaborate_at(void *ctx, int64_t micro, int64_t seq, Arena *a);

//
// import.c — Hugging Face config.json to .ft.
//

// Writes a .ft for the config at `path` to `out`; returns 0, or 1 after an error.
int fe_import(const char *path, FILE *out);

//
// import_config.c — the config.json of a .ft: fe_import's inverse.
//

// Writes the Hugging Face config.json of the checked model `m`, whose forward graph is `g`
// (fe_elaborate's), to `out`, for the families fe_import writes, so that importing it gives
// m's model section again. 0, or 1 with the reason in why: a model of another family (its
// section's name is not one of their model_types), or one whose graph lacks what a config
// needs.
int fe_hf_config(const FtModel *m, const IrGraph *g, FILE *out, char *why, size_t whylen);

// The command-line room, frontend/cli/ (its header cli.h), is the one part of frontend/
// that reaches the passes, codegen and the runtime.

#endif
