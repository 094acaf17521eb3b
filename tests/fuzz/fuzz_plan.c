// fuzz_plan.c — the libFuzzer harness for plan files: the runtime's reader, the plan
// verifier and one training step on the cpu backend.
//
// One input is one plan file. It is read as `ftc run` reads DIR/plan (plan_load), and
// when the reader accepts it, verified (plan_verify); when that passes too, one step
// runs on the cpu backend: seeded weights, token and target ids 0, forward, backward
// and optimizer, with every buffer in an allocation of its own (LAYOUT_UNPLANNED), so
// that AddressSanitizer sees any access outside a buffer. The property: no plan file,
// however edited, makes the runtime crash, hang or touch memory outside its buffers;
// a plan is either refused with a message or runs.
//
// The step is skipped (the reader and verifier still run) when its buffers total more
// than FUZZ_MAX_BYTES, so the fuzzer spends its time on bugs, not on big valid plans.
// Messages go to /dev/null unless FTC_FUZZ_VERBOSE is set.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runtime.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { FUZZ_MAX_BYTES = 64 << 20 };

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *quiet;   // where the verifier's findings go

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *v = getenv("FTC_FUZZ_VERBOSE");
    quiet = v && *v && strcmp(v, "0") != 0 ? stderr : fopen("/dev/null", "w");
    return 0;
}

// One step with the plan's own buffers, ids 0 as tokens and targets.
static void one_step(const Plan *p) {
    int64_t total = 0;
    for (int i = 0; i < p->nbuf; i++)
        if (p->buf[i].view < 0 && !p->buf[i].virt)
            total += p->buf[i].bytes;
    if (total > FUZZ_MAX_BYTES)
        return;
    Backend *be = rt_cpu_backend(), *host = rt_cpu_backend();
    Exec x = {0};
    char err[1024];
    if (rt_exec_init(&x, p, be, host, LAYOUT_UNPLANNED, err, sizeof err) == 0) {
        rt_weights_init(&x, 1);
        x.step = 1;
        for (int i = 0; i < p->nbuf; i++)
            if (p->buf[i].role == PR_TOKENS || p->buf[i].role == PR_TARGETS)
                rt_zero(&x, i);
        rt_write_target_count(&x, -1);
        if (rt_exec_phase(&x, PHASE_FWD, err, sizeof err) == 0 &&
            rt_exec_phase(&x, PHASE_BWD, err, sizeof err) == 0)
            rt_exec_phase(&x, PHASE_OPT, err, sizeof err);
    }
    rt_exec_free(&x);
    be->destroy(be);
    host->destroy(host);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!quiet)
        LLVMFuzzerInitialize(NULL, NULL);
    // The reader takes a path: the input as an anonymous file.
    int fd = memfd_create("plan", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64], err[1024];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    Plan *p = NULL;
    if (plan_load(&p, path, err, sizeof err) == 0) {
        if (plan_verify(p, quiet) == 0)
            one_step(p);
        plan_free(p);
    } else if (quiet != stderr) {
        (void)err;
    } else {
        fprintf(stderr, "%s\n", err);
    }
    close(fd);
    return 0;
}
