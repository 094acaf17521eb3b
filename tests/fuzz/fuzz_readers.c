// fuzz_readers.c — libFuzzer harnesses for the files ftc reads besides .ft sources and
// plans: a safetensors checkpoint, a token file, a Hugging Face config.json for
// `ftc import`, a tokenizer.json, a JSONL dataset and a training checkpoint's state. One
// binary per reader, chosen at compile time (-DFUZZ_READER=1 .. 6):
//   1 st      st_open on the input as a file, then every tensor read as f32 (capped)
//   2 tokens  data_open, the window count at seq 16, every window read, vocab 50000
//   3 import  fe_import on the input as config.json, the .ft written to /dev/null
//   4 tok     tok_load on the input as tokenizer.json, then a text of every kind of
//             character encoded (special tokens, Unicode, digits, white space)
//   5 jsonl   ds_convert of the input as JSONL with the tokenizer FUZZ_TOKENIZER names
//             (the Qwen2-style fixture), the chatml template, on two threads: packed
//             for seq 16 and not (preference pairs need it), into a temporary directory
//   6 ckpt    the input as DIR/checkpoint-000001/state.safetensors of a temporary DIR,
//             rt_checkpoint_load into an executor on the cpu backend of the plan
//             FUZZ_CKPT_PLAN names (tests/fuzz/ckpt-plan/plan), read once
// The property: a bad file is refused with a message (or, for import, an error exit),
// never a crash, a hang, a leak or undefined behaviour. For ckpt, besides: the refusal
// is -1 with a message, and a state that loads is of a step from 1 on, with at most that
// many steps skipped and a positive, finite loss scale (what the loader promises the
// training loop); otherwise the harness aborts with a `fuzz_ckpt: BUG:` line.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
#elif FUZZ_READER == 6
#include "runtime.h"
#ifndef FUZZ_CKPT_PLAN
#error "FUZZ_CKPT_PLAN must name the plan file the checkpoints are of"
#endif
#else
#error "FUZZ_READER must be 1 (safetensors), 2 (tokens), 3 (import), 4 (tok), 5 (jsonl) or 6 (ckpt)"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *quiet;

#if FUZZ_READER == 6
// The plan, its executor (every buffer an allocation of its own, so AddressSanitizer sees
// a write past one) and the checkpoint directory every input is written into: made once,
// since reading and placing the plan costs far more than loading a state; freed at exit.
static struct {
    Plan *plan;
    Backend *be, *host;
    Exec x;
    double scale;   // the executor's loss scale as made
    char dir[64], ckpt[96], state[128];
} ck;

static void ckpt_free(void) {
    rt_exec_free(&ck.x);
    ck.be->destroy(ck.be);
    ck.host->destroy(ck.host);
    plan_free(ck.plan);
    unlink(ck.state);
    rmdir(ck.ckpt);
    rmdir(ck.dir);
}

static void ckpt_init(void) {
    char err[1024] = "";
    ck.be = rt_cpu_backend(), ck.host = rt_cpu_backend();
    // (a plan that does not load or verify is the harness's setup failing, not a finding:
    // ftc's plan format changed, and ckpt-plan/ wants compiling again, its seeds saving again)
    if (plan_load(&ck.plan, FUZZ_CKPT_PLAN, err, sizeof err) != 0 || plan_verify(ck.plan, stderr) != 0 ||
        rt_exec_init(&ck.x, ck.plan, ck.be, ck.host, LAYOUT_UNPLANNED, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_ckpt: %s: %s\n", FUZZ_CKPT_PLAN, err[0] ? err : "the plan failed verification");
        exit(1);
    }
    ck.scale = ck.x.loss_scale;
    // In memory where there is a tmpfs (as the other readers' inputs are memfds): on a disk,
    // writing each input's file takes as long as loading it.
    const char *tmp = getenv("TMPDIR");
    const char *where[] = {tmp && *tmp && strlen(tmp) < 40 ? tmp : "/dev/shm", "/dev/shm", "/tmp"};
    int made = 0;
    for (int i = 0; i < 3 && !made; i++) {
        snprintf(ck.dir, sizeof ck.dir, "%s/fuzz_ckpt.XXXXXX", where[i]);
        made = mkdtemp(ck.dir) != NULL;
    }
    snprintf(ck.ckpt, sizeof ck.ckpt, "%s/checkpoint-000001", ck.dir);
    snprintf(ck.state, sizeof ck.state, "%s/state.safetensors", ck.ckpt);
    if (!made || mkdir(ck.ckpt, 0700) != 0) {
        fprintf(stderr, "fuzz_ckpt: cannot make %s: %s\n", made ? ck.ckpt : ck.dir, strerror(errno));
        exit(1);
    }
    atexit(ckpt_free);
}

static void bug(const char *what, const char *err) {
    fprintf(stderr, "fuzz_ckpt: BUG: %s (%s)\n", what, err);
    abort();
}
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *v = getenv("FTC_FUZZ_VERBOSE");
    quiet = v && *v && strcmp(v, "0") != 0 ? stdout : fopen("/dev/null", "w");
#if FUZZ_READER == 3 && defined(__GLIBC__)
    if (quiet != stdout)
        stderr = quiet;   // fe_import reports on stderr
#endif
#if FUZZ_READER == 6
    ckpt_init();
#endif
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!quiet)
        LLVMFuzzerInitialize(NULL, NULL);
#if FUZZ_READER == 6
    // The loader takes a checkpoint directory and finds the state file in it by name.
    int fd = open(ck.state, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
#else
    int fd = memfd_create("input", MFD_CLOEXEC);
#endif
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
#elif FUZZ_READER == 5
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
#elif FUZZ_READER == 6
    (void)path;
    // Every input starts from the executor as made (a state that loads sets these).
    ck.x.loss_scale = ck.scale, ck.x.skipped = 0, ck.x.scale_tracker = 0;
    int64_t step = 0;
    uint64_t seed = 0;
    int rc = rt_checkpoint_load(&ck.x, ck.ckpt, &step, &seed, err, sizeof err);
    if (rc != 0 && (rc != -1 || !err[0]))
        bug("a state refused with a status other than -1, or no message", err);
    if (rc == 0 && step < 1)
        bug("a state of step 0 or less loaded", "");
    if (rc == 0 && (ck.x.skipped < 0 || ck.x.skipped > step))
        bug("a state with more steps skipped than taken loaded", "");
    if (rc == 0 && (!(ck.x.loss_scale > 0 && ck.x.loss_scale < 1e38) || ck.x.scale_tracker < 0))
        bug("a state with a bad loss scale loaded", "");
    if (rc == 0)   // (what FTC_FUZZ_VERBOSE shows)
        snprintf(err, sizeof err, "loaded: step %lld, seed %llu", (long long)step, (unsigned long long)seed);
#endif
    fprintf(quiet, "%s\n", err);
    close(fd);
    return 0;
}
