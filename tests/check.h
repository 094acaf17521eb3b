// check.h — the test macros every tests/test_<room>.c uses. A failed check prints
// where and why and is counted; each case prints one line, "ok   name" or "FAIL name"
// (after its failed checks' lines); main returns CHECK_DONE(), non-zero if any case failed.
#ifndef FTC_CHECK_H
#define FTC_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int check_failed_, check_passed_, case_failed_;

// Counts one failed check at file:line and prints why (printf-style), as the macros below
// do; for CHECKF and for a test's helpers that find a failure in a branch of their own.
static inline void check_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void check_fail_at(const char *file, int line, const char *fmt, ...) {
    check_failed_++, case_failed_ = 1;
    printf("  %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
}

#define CHECK(c)                                                                    \
    do {                                                                            \
        if (c) {                                                                    \
            check_passed_++;                                                        \
        } else {                                                                    \
            check_failed_++, case_failed_ = 1;                                      \
            printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);          \
        }                                                                           \
    } while (0)

#define CHECK_EQ(want, got)                                                         \
    do {                                                                            \
        long long w_ = (long long)(want), g_ = (long long)(got);                    \
        if (w_ == g_) {                                                             \
            check_passed_++;                                                        \
        } else {                                                                    \
            check_failed_++, case_failed_ = 1;                                      \
            printf("  %s:%d: %s: want %lld, got %lld\n", __FILE__, __LINE__, #got, w_, g_); \
        }                                                                           \
    } while (0)

#define CHECK_STR(want, got)                                                        \
    do {                                                                            \
        const char *w_ = (want), *g_ = (got);                                       \
        if (g_ && strcmp(w_, g_) == 0) {                                            \
            check_passed_++;                                                        \
        } else {                                                                    \
            check_failed_++, case_failed_ = 1;                                      \
            printf("  %s:%d: %s: want \"%s\", got \"%s\"\n", __FILE__, __LINE__, #got, w_, \
                   g_ ? g_ : "(null)");                                             \
        }                                                                           \
    } while (0)

#define CHECK_CLOSE(want, got, rel)                                                 \
    do {                                                                            \
        double w_ = (want), g_ = (got);                                             \
        if (fabs(w_ - g_) <= (rel) * fmax(fabs(w_), 1e-30)) {                       \
            check_passed_++;                                                        \
        } else {                                                                    \
            check_failed_++, case_failed_ = 1;                                      \
            printf("  %s:%d: %s: want %.9g, got %.9g\n", __FILE__, __LINE__, #got, w_, g_); \
        }                                                                           \
    } while (0)

// CHECK(cond) with a printf-style message instead of the condition's text.
#define CHECKF(c, ...)                                                              \
    do {                                                                            \
        if (c)                                                                      \
            check_passed_++;                                                        \
        else                                                                        \
            check_fail_at(__FILE__, __LINE__, __VA_ARGS__);                         \
    } while (0)

// |got - want| <= atol + rtol * |want|, in double; NaN never passes.
#define CHECK_NEAR(got, want, atol, rtol)                                           \
    do {                                                                            \
        double g_ = (got), w_ = (want), a_ = (atol), r_ = (rtol);                   \
        if (fabs(g_ - w_) <= a_ + r_ * fabs(w_)) {                                  \
            check_passed_++;                                                        \
        } else {                                                                    \
            check_failed_++, case_failed_ = 1;                                      \
            printf("  %s:%d: %s: want %.9g, got %.9g (atol %g, rtol %g)\n",         \
                   __FILE__, __LINE__, #got, w_, g_, a_, r_);                       \
        }                                                                           \
    } while (0)

// True once a check of the running case has failed (to stop a case early).
#define CASE_FAILED() (case_failed_ != 0)

static int cases_passed_, cases_failed_;

// The cases a run is limited to (check_only), or every case where none is named: a long
// test splits into several ctest entries this way, each under its own time limit.
static char *const *check_only_;
static int check_only_n_;

// Runs only the cases named in names[0..n) from here on; n = 0 runs all of them.
static inline void check_only(char *const *names, int n) { check_only_ = names, check_only_n_ = n; }

static inline int check_wanted_(const char *name) {
    for (int i = 0; i < check_only_n_; i++)
        if (strcmp(check_only_[i], name) == 0)
            return 1;
    return check_only_n_ == 0;
}

// Runs `call` (usually a call of the case's function) as one test case called `name` (a
// string) and prints one line for it; nothing where check_only leaves the case out.
#define RUN_NAMED(name, call)                                                       \
    do {                                                                            \
        if (!check_wanted_(name))                                                   \
            break;                                                                  \
        case_failed_ = 0;                                                           \
        call;                                                                       \
        printf("%s %s\n", case_failed_ ? "FAIL" : "ok  ", name);                    \
        fflush(stdout);                                                             \
        if (case_failed_) cases_failed_++; else cases_passed_++;                    \
    } while (0)

// Runs one test case function, named after it, and prints one line for it.
#define RUN(fn) RUN_NAMED(#fn, fn())

// Prints the count and gives main's status: 1 if a case failed, or if check_only named a
// case that never ran (a misspelt name must not pass as an empty run).
#define CHECK_DONE()                                                                \
    (printf("%d passed, %d failed\n", cases_passed_, cases_failed_),                \
     check_only_n_ && cases_passed_ + cases_failed_ != check_only_n_                \
         ? (printf("%d of the %d cases named ran\n", cases_passed_ + cases_failed_,  \
                   check_only_n_), 1)                                               \
         : cases_failed_ ? 1 : 0)

#endif
