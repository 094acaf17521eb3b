// check.h — the test macros every tests/test_<room>.c uses. A failed check prints
// where and why and is counted; main returns non-zero if any check failed.
#ifndef FTC_CHECK_H
#define FTC_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failed_, check_passed_, case_failed_;

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

static int cases_passed_, cases_failed_;

// Runs one test case function and prints one line for it.
#define RUN(fn)                                                                     \
    do {                                                                            \
        case_failed_ = 0;                                                           \
        fn();                                                                       \
        printf("%s %s\n", case_failed_ ? "FAIL" : "ok  ", #fn);                     \
        if (case_failed_) cases_failed_++; else cases_passed_++;                    \
    } while (0)

#define CHECK_DONE()                                                                \
    (printf("%d passed, %d failed\n", cases_passed_, cases_failed_), cases_failed_ ? 1 : 0)

#endif
