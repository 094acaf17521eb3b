// run_errors.c — the error lines of `ftc run` (and `ftc eval`): each one write to stderr, so
// that the lines of ranks sharing a terminal do not interleave, naming the command and, on a
// job of several, the rank; and every error of the run kept, in order, for its report.
#include "session.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

// Which rank an error comes from, on a job of several ("rank 1 of 4: "); empty otherwise.
static char who[64];
static char command[32] = "ftc run";
static char errors[4096];   // the run's errors so far, for its report

int rt_run_error(const char *fmt, ...) {
    char line[4096];
    int head = (int)strlen(command) + (int)strlen(": error: ");
    int n = snprintf(line, sizeof line, "%s: error: %s", command, who);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof line - 1)
        n += vsnprintf(line + n, sizeof line - 1 - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    // (kept for the run's report: every error of the run, in order)
    size_t k = strlen(errors), m = (size_t)(n - 1 - head);
    if (k + m + 2 < sizeof errors)
        snprintf(errors + k, sizeof errors - k, "%s%.*s", k ? " " : "", (int)m, line + head);
    fflush(stderr);
    ssize_t w = write(2, line, (size_t)n);
    (void)w;
    return 1;
}

const char *rt_run_errors(void) { return errors; }

void rt_run_errors_begin(const char *cmd, int rank, int ranks) {
    errors[0] = '\0';
    snprintf(command, sizeof command, "%s", cmd);
    if (ranks > 1)
        snprintf(who, sizeof who, "rank %d of %d: ", rank, ranks);
    else
        who[0] = '\0';
}

const char *rt_run_who(void) { return who; }

const char *rt_run_command(void) { return command; }
