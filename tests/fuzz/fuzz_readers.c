// fuzz_readers.c — libFuzzer harnesses for the files ftc reads besides .ft sources and
// plans: a safetensors checkpoint, a token file, and a Hugging Face config.json for
// `ftc import`. One binary per reader, chosen at compile time (-DFUZZ_READER=1, 2, 3):
//   1 st      st_open on the input as a file, then every tensor read as f32 (capped)
//   2 tokens  data_open, the window count at seq 16, every window read, vocab 50000
//   3 import  fe_import on the input as config.json, the .ft written to /dev/null
// The property: a bad file is refused with a message (or, for import, an error exit),
// never a crash, a hang, a leak or undefined behaviour.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if FUZZ_READER == 1
#include "safetensors.h"
#elif FUZZ_READER == 2
#include "data.h"
#elif FUZZ_READER == 3
#include "frontend.h"
#else
#error "FUZZ_READER must be 1 (safetensors), 2 (tokens) or 3 (import)"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *quiet;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *v = getenv("FTC_FUZZ_VERBOSE");
    quiet = v && *v && strcmp(v, "0") != 0 ? stdout : fopen("/dev/null", "w");
#if FUZZ_READER == 3 && defined(__GLIBC__)
    if (quiet != stdout)
        stderr = quiet;   // fe_import reports on stderr
#endif
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!quiet)
        LLVMFuzzerInitialize(NULL, NULL);
    int fd = memfd_create("input", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64], err[1024] = "";
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
#if FUZZ_READER == 1
    StSet *s = NULL;
    if (st_open(&s, path, err, sizeof err) == 0) {
        for (int i = 0; i < st_count(s); i++) {
            const StTensor *t = st_at(s, i);
            int64_t n = 1;   // at most 2^20 values read, without overflow on the way
            for (int d = 0; d < t->ndim && n >= 0; d++)
                n = t->shape[d] <= (1 << 20) / (n ? n : 1) ? n * t->shape[d] : -1;
            if (n < 0 || n > (1 << 20))
                continue;
            float *v = malloc(sizeof(float) * (size_t)(n + 1));
            st_read_f32(s, t, v, n, err, sizeof err);
            free(v);
        }
        st_close(s);
    }
#elif FUZZ_READER == 2
    DataFile *d = NULL;
    uint64_t nwin;
    if (data_open(&d, path, err, sizeof err) == 0) {
        if (data_window_count(d, 16, &nwin, err, sizeof err) == 0 &&
            data_check_vocab(d, 50000, err, sizeof err) == 0) {
            int32_t w[17];
            for (uint64_t i = 0; i < nwin && i < 4096; i++)
                data_read_window(d, i, 16, w, 50000, err, sizeof err);
        }
        data_close(d);
    }
#else
    fe_import(path, quiet);
#endif
    fprintf(quiet, "%s\n", err);
    close(fd);
    return 0;
}
