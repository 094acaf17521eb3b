// cli.h — the command-line room: ftc's commands, their option tables, and the text they
// print. The one place in frontend/ that reaches the passes (compile_plan), the code
// generator (the plan writer) and the runtime (train, inspect); the rest of frontend/
// (lexer, parser, elaboration, import) sees only ir.h.
#ifndef FTC_CLI_H
#define FTC_CLI_H

#include "../frontend.h"
#include "../../passes/passes.h"
#include "../../codegen/codegen.h"
#include "../../runtime/runtime.h"
#include "../../runtime/tokenizer.h"

enum { EXIT_NOFIT = 1, EXIT_USAGE = 2 };

//
// cmdline.c — the command line as a source, so argument errors get a caret too.
//

typedef struct Cmdline {
    FtSource src;
    int *col;               // 1-based column of each argv[i]
    int argc;
    char **argv;
} Cmdline;

void cmdline_init(Cmdline *c, int argc, char **argv);
void cmdline_free(Cmdline *c);
// Reports an error at argument i.
void arg_error(Cmdline *c, int i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// "7,615,616,512"
const char *commas(char *buf, int64_t v);
// A Hugging Face model directory given where a file of it is meant: DIR/name, in buf;
// anything else as it is.
const char *in_model_dir(const char *path, const char *name, char *buf, size_t cap);

//
// options.c — one table a command: it parses the command's arguments and prints its help.
//

typedef enum OptKind {
    OPT_SECTION,            // a heading in the help; parses nothing
    OPT_FLAG,               // bool true
    OPT_TEXT,               // const char *: the value as given
    OPT_COUNT,              // int64_t: a whole number in [lo, hi]
    OPT_SIZE,               // int64_t: bytes ("40G"), at least lo
    OPT_CHOICE,             // int: the index of the value among choices (or values[index])
    OPT_CALL,               // call(): a value unless arg is NULL
} OptKind;

typedef struct Option {
    OptKind kind;
    const char *flag;       // "--budget"
    const char *arg;        // the value's name in the help ("SIZE"); NULL: none
    size_t off;             // where the value goes in the command's arguments struct
    const char *help;       // continued lines begin with '\n' (OPT_SECTION: the heading)
    int64_t lo, hi;         // OPT_COUNT, OPT_SIZE: the range (hi 0: no upper end)
    const char *const *choices;     // OPT_CHOICE: the names, NULL-terminated
    const int *values;      // OPT_CHOICE: what each name stores (NULL: its index)
    const char *bad;        // what a refused value is told (NULL: the kind's own message)
    // OPT_CALL: takes the value (NULL when arg is); false after writing why into `why`.
    bool (*call)(void *args, const char *value, char *why, size_t cap);
    void (*more)(FILE *f);  // prints the rest of the help's first line (a preset list)
    bool in_operands;       // shown in the command's operands, not again in the synopsis
} Option;

// A row of a table: kind, flag, the value's name, its place, the help; then what the kind
// needs (.lo, .choices, .call ...).
#define OPT(k, f, a, o, h, ...) {.kind = k, .flag = f, .arg = a, .off = o, .help = h, __VA_ARGS__}
#define SECTION(h) {.kind = OPT_SECTION, .help = h}

typedef struct Command {
    const char *name;
    const char *operands;   // the synopsis before the options: "FILE.ft"
    const char *summary;    // ftc help's line
    const char *positional; // the one positional argument's kind: "one .ft file"
    bool needs_positional;  // without it, the help on stderr and a usage error
    const Option *opts;
    int nopts;
    const char *epilogue;   // after the options in the help, or NULL
    int (*run)(Cmdline *cl, int first);
} Command;

// Where parse_options put what it read: the argv index of each option's value (of the
// flag itself for one without a value; 0: not given) and of the positional argument.
enum { OPT_MAX = 64 };   // options a command's table may have

typedef struct Parsed {
    int at[OPT_MAX];
    const char *positional;
    int positional_at;
} Parsed;

// Reads argv[first..] by c's table into `args` and *p. Returns 0, -1 after printing the
// help for --help (the command then succeeds), or EXIT_USAGE after reporting (the help on
// stderr when a positional argument the command needs is missing).
int parse_options(Cmdline *cl, int first, const Command *c, void *args, Parsed *p);
// The command's help, all from its table.
void print_usage(FILE *f, const Command *c);
// The argv index of `flag` as parsed, or 0.
int parsed_at(const Command *c, const Parsed *p, const char *flag);

//
// The commands (compile.c, run.c, eval.c, data.c, inspect.c; import and help in main.c).
//

extern const Command cmd_compile, cmd_run, cmd_eval, cmd_generate, cmd_data, cmd_inspect;
// --device's names and the RunDevice each stands for (run.c; ftc eval's too).
extern const char *const cli_devices[];
extern const int cli_device_kinds[];
// The .ft train section's reference, frontend/README.md's (help_topic.cmake): `ftc help ft`.
extern const char *const cli_help_ft;


//
// program.c — a checked .ft program as the passes see it.
//

// What Pipeline.elaborate reads (fe_elaborate_at): the source and its checked model,
// which must outlive the pipeline.
typedef FtProgram DriverSource;

// The pipeline of `ds`: its elaboration callback and its train section's spec (names in
// arena `a`); passes report user errors at the source's lines, counted in diag.
Pipeline driver_pipeline(DriverSource *ds, Arena *a, PassDiag *diag);
// The program of `ds` for compile_plan.
CompileProgram driver_program(DriverSource *ds, Arena *a);
// Whether ir_verify runs between passes: debug builds, and tests (FTC_VERIFY_PASSES=1).
bool driver_verify(void);
// A PassDiag printing to stderr against `src`.
PassDiag driver_diag(FtSource *src);
// Fills what the plan header says of the train section (precision, optimizer and its
// hyperparameters, the schedule) into `meta`; strings are static or the spec's.
void driver_meta_train(PlanMeta *meta, const TrainSpec *t);
// The precision regimes the compile report compares (the model states of each).
typedef struct DriverModes {
    int n;
    FtModel m[8];
    DriverSource ds[8];
    CompileProgram program[8];
    char name[8][96];
    bool ours[8];           // the train section's own
} DriverModes;
void driver_modes(DriverModes *dm, FtSource *src, const FtModel *m, Arena *a);

//
// compile.c — ftc compile's work for another command.
//

// The plan of the program in `src` (parsed and checked here), as ftc compile plans it with
// its defaults, its decode phase's KV cache max_len tokens (< 0: the train section's seq,
// as ftc compile without --max-len), written to the new directory `dir`. Nothing printed
// unless it fails: then why (the program's errors at its lines, or why nothing fits) to
// stderr. The exit status.
int compile_quietly(FtSource *src, int64_t max_len, const char *dir);

//
// compile_report.c — what ftc compile prints: the counts and the naive step, the model
// states per precision, the planner's decision and candidates, or why nothing fits and
// what would.
//

void report_compile(FILE *out, const char *path, const FtModel *m, const CompileResult *r);
void report_modes(FILE *out, const FtModel *m, const DriverModes *dm, const CompileResult *r);
void report_planner(FILE *f, const CompileResult *r, const FtModel *m, const HostSpec *host);
void report_nofit(FILE *out, const CompileResult *r, const FtModel *m);
void report_plan_written(FILE *out, const CompileResult *r, const char *dir, bool time_passes);

// A preference loss's reference (dpo, ipo with reference = auto), each way it can be had
// planned in full: what each plan needs and takes, and which one ftc compile chose.
typedef struct RefOption {
    RefMode mode;
    bool planned, fits;         // planned: the program built (false: refused, why unknown)
    int64_t device, host;       // the plan's (the smallest tried where none fits)
    int64_t micro;
    double step_us;             // its step
    double pass_us;             // precomputed: the reference's pass over the data, a step's
                                // share over one epoch (0 for the others)
} RefOption;
typedef struct RefChoice {
    int n, chosen;              // options, and the one chosen (-1: none fits)
    RefOption opt[3];
} RefChoice;
void report_references(FILE *out, const RefChoice *rc, RefMode used);

//
// gen_model.c — what ftc generate's operand names, and the plan it runs.
//

typedef enum GenModelKind {
    GEN_PLAN,           // a plan directory (DIR/plan), run as it is
    GEN_MODEL_DIR,      // a Hugging Face model directory (DIR/config.json): imported and planned
    GEN_ADAPTER_DIR,    // an adapter (DIR/adapter_config.json) over the model directory it names
    GEN_FT,             // a .ft file: planned as ftc compile plans it
} GenModelKind;

typedef struct GenModel {
    GenModelKind kind;
    char model_dir[4096];   // GEN_MODEL_DIR, GEN_ADAPTER_DIR: the model's directory
    char adapter[4096];     // GEN_ADAPTER_DIR: the adapter's
    char plan[4200];        // the plan made for it (gen_model_plan)
    bool tmp;               // the plan is in a temporary directory of its own
} GenModel;

// What the operand `path` (argv[at]) is; EXIT_NOFIT after saying why at it.
int gen_model_open(Cmdline *cl, int at, const char *path, GenModel *gm);
// Whether a model directory holds its weights (model.safetensors, or a sharded set's index).
bool gen_model_has_weights(const char *dir);
// The model's max_position_embeddings (GPT-2: n_positions), 0 when not a model directory's
// or not given.
int64_t gen_model_max_pos(const GenModel *gm);
// The plan of a model directory (with the LoRA of `adapter`, a directory or its
// safetensors, where not NULL) or of the .ft at ft_path, its KV cache max_len tokens (a .ft:
// < 0 the train section's seq), into gm->plan, a temporary directory; the exit status
// after saying why (the importer's error, the program's, why nothing fits).
int gen_model_plan(GenModel *gm, const char *ft_path, const char *adapter, int64_t max_len);
// Removes the temporary directory, if any (a signal that ends the process removes it too).
void gen_model_close(GenModel *gm);

//
// prompt.c — ftc generate's prompt as token ids, and the reply's ids as text.
//

enum { GEN_MAX_EOS = 8 };

typedef struct GenPrompt {
    const char *tokenizer;      // a tokenizer.json (a model directory's); NULL with bytes
    bool bytes;                 // a byte-level model: each byte a token (vocab 256)
    const char *prompt;         // the text, or with messages NULL
    const char *messages;       // a conversation's JSON file, rendered by the chat template
    const char *template_text;  // --template (NULL: the model's own)
    const char *eos;            // --eos: the token that ends a reply (NULL: the model's)
    const char *weights_dir;    // where the model's generation_config.json may be ("" or "DIR/")
    // what gen_prompt_open finds
    Tokenizer *tok;
    char tokenizer_dir[4096];
    TokIds ids;                 // the prompt's
    int32_t eos_ids[GEN_MAX_EOS];
    int neos;
} GenPrompt;

// Loads the tokenizer (and the chat template for a conversation), finds the ids that end a
// reply and encodes the prompt into ga->ids; -1 with err (the file, and the JSON error's line
// and column, or the template's).
int gen_prompt_open(GenPrompt *ga, char *err, size_t errlen);
// The text of ids (the tokens' bytes in order) to out.
void gen_prompt_text(const GenPrompt *ga, const int32_t *ids, int64_t n, FILE *out);
void gen_prompt_free(GenPrompt *ga);

#endif
