// fuzz_readers.c — libFuzzer harnesses for the files ftc reads besides .ft sources and
// plans: a safetensors checkpoint, a token file, a Hugging Face config.json for
// `ftc import`, a tokenizer.json and a JSONL dataset. One binary per reader, chosen at
// compile time (-DFUZZ_READER=1 .. 5):
//   1 st      st_open on the input as a file, then every tensor read as f32 (capped)
//   2 tokens  data_open, the window count at seq 16, every window read, vocab 50000
//   3 import  fe_import on the input as config.json, the .ft written to /dev/null
//   4 tok     tok_load on the input as tokenizer.json, then a text of every kind of
//             character encoded (special tokens, Unicode, digits, white space)
//   5 jsonl   ds_convert of the input as JSONL with the tokenizer FUZZ_TOKENIZER names
//             (the Qwen2-style fixture), the chatml template, on two threads: packed
//             for seq 16 and not, into a temporary directory
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
#elif FUZZ_READER == 4
#include "tokenizer.h"
#elif FUZZ_READER == 5
#include "dataset.h"
#ifndef FUZZ_TOKENIZER
#error "FUZZ_TOKENIZER must name a tokenizer.json"
#endif
#else
#error "FUZZ_READER must be 1 (safetensors), 2 (tokens), 3 (import), 4 (tok) or 5 (jsonl)"
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
            data_check_vocab(d, 50000, NULL, err, sizeof err) == 0) {
            int32_t w[17];
            uint8_t info[17];
            for (uint64_t i = 0; i < nwin && i < 4096; i++)
                data_read_window(d, i, 16, w, info, 50000, err, sizeof err);
        }
        data_close(d);
    }
#elif FUZZ_READER == 3
    fe_import(path, quiet);
#elif FUZZ_READER == 4
    Tokenizer *t = NULL;
    if (tok_load(&t, path, err, sizeof err) == 0) {
        static const char text[] = "Hello  world\n\n\t<|endoftext|>caf\xc3\xa9 cafe\xcc\x81 12345 "
                                   "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80<|im_start|>it's <mask> \xc2\x85 ";
        TokScratch *s = tok_scratch_new(t);
        TokIds ids = {0};
        if (s) {
            tok_encode(t, s, text, sizeof text - 1, &ids);
            tok_encode(t, s, text, sizeof text - 1, &ids);   // through the cache
        }
        tok_ids_free(&ids);
        tok_scratch_free(s);
        tok_free(t);
    }
#else
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_jsonl.XXXXXX");
        if (!mkdtemp(dir))
            abort();
    }
    char out[128];
    snprintf(out, sizeof out, "%s/out.tok", dir);
    DsSummary sum;
    for (int pack = 0; pack <= 16; pack += 16) {
        DsOptions o = {.tokenizer = FUZZ_TOKENIZER, .template_text = "chatml", .pack = pack, .threads = 2};
        ds_convert(path, out, &o, &sum, err, sizeof err);
        fprintf(quiet, "%s\n", err);
    }
    unlink(out);
#endif
    fprintf(quiet, "%s\n", err);
    close(fd);
    return 0;
}
