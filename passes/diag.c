// diag.c — the error sink passes report through.
#include "passes.h"

#include <stdarg.h>

void pass_error(PassDiag *d, SrcLoc loc, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    d->errors++;
    if (d->error)
        d->error(d->ctx, loc, msg);
    else
        fprintf(stderr, "error: %s\n", msg);
}
