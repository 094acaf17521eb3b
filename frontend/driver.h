// driver.h — the ftc command-line driver's own header (main.c, cmdline.c, compile.c):
// the one place in frontend/ that reaches the passes, the code generator and the
// runtime. The rest of frontend/ (lexer, parser, elaboration, import) sees only ir.h.
#ifndef FTC_DRIVER_H
#define FTC_DRIVER_H

#include "frontend.h"
#include "../passes/passes.h"
#include "../codegen/codegen.h"
#include "../runtime/runtime.h"

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
// Reads a non-negative integer option value at argument i; false after reporting.
bool arg_count(Cmdline *cl, int i, const char *v, int64_t *out);
// "7,615,616,512"
const char *commas(char *buf, int64_t v);

//
// compile.c — ftc compile, and the pipeline of a checked program (tests use it too).
//

void usage_compile(FILE *f);
int cmd_compile(Cmdline *cl, int argc, char **argv, int first);

// What Pipeline.elaborate reads: the source and its checked model, which must outlive
// the pipeline.
typedef struct DriverSource {
    FtSource *src;
    const FtModel *m;
} DriverSource;

// The pipeline of `ds`: its elaboration callback and its train section's spec (names in
// arena `a`); passes report user errors at the source's lines, counted in diag.
Pipeline driver_pipeline(DriverSource *ds, Arena *a, PassDiag *diag);
// A PassDiag printing to stderr against `src`.
PassDiag driver_diag(FtSource *src);
// Fills what the plan header says of the train section (precision, optimizer and its
// hyperparameters, the schedule) into `meta`; strings are static or the spec's.
void driver_meta_train(PlanMeta *meta, const TrainSpec *t);

#endif
