// data.c — ftc data: its option table; raw token files (runtime/data.c) and JSONL records
// through a tokenizer (runtime/dataset.c), with the summary it prints.
#include "cli.h"
#include "../../runtime/data.h"
#include "../../runtime/dataset.h"

#include <time.h>

enum { MODE_TOKENIZER = 3 };   // after DataMode's

typedef struct DataArgs {
    DsOptions ds;
    const char *out;
    int mode;                  // a DataMode, MODE_TOKENIZER, or -1
    int64_t pack, threads, show;
    char tokenizer[4096];      // --tokenizer, a model directory's tokenizer.json
} DataArgs;

#define ARG(f) offsetof(DataArgs, f)

// --bytes, --u16, --u32 or --tokenizer F: one of them.
static bool set_mode(DataArgs *a, int mode, char *why, size_t cap) {
    if (a->mode >= 0)
        return snprintf(why, cap, "one of --bytes, --u16, --u32, --tokenizer"), false;
    a->mode = mode;
    return true;
}
static bool bytes(void *a, const char *v, char *why, size_t cap) { return (void)v, set_mode(a, DATA_BYTES, why, cap); }
static bool u16(void *a, const char *v, char *why, size_t cap) { return (void)v, set_mode(a, DATA_U16, why, cap); }
static bool u32(void *a, const char *v, char *why, size_t cap) { return (void)v, set_mode(a, DATA_U32, why, cap); }

static bool tokenizer(void *args, const char *v, char *why, size_t cap) {
    DataArgs *a = args;
    if (!set_mode(a, MODE_TOKENIZER, why, cap))
        return false;
    a->ds.tokenizer = in_model_dir(v, "tokenizer.json", a->tokenizer, sizeof a->tokenizer);
    return true;
}

static const Option data_opts[] = {
    OPT(OPT_CALL, "--bytes", NULL, 0, "every byte of FILE is a token (vocab 256)", .call = bytes, .in_operands = true),
    OPT(OPT_CALL, "--u16", NULL, 0, "FILE holds little-endian token ids of 2 bytes", .call = u16, .in_operands = true),
    OPT(OPT_CALL, "--u32", NULL, 0, "FILE holds little-endian token ids of 4 bytes", .call = u32, .in_operands = true),
    OPT(OPT_CALL, "--tokenizer", "F", 0, "encode the records of FILE.jsonl with a Hugging Face tokenizer.json\n"
     "(or a model directory's)\n(byte-level BPE: GPT-2, Qwen2, Llama 3, Mistral-Nemo); one JSON\nobject a line: "
     "{\"text\"}, {\"prompt\", \"completion\"} (only the\ncompletion trained), {\"messages\": [{\"role\", "
     "\"content\"}]} (only\nthe assistant's content trained), Alpaca's {\"instruction\",\n\"input\", \"output\"} "
     "(a user and an assistant message; without\n--template Alpaca's own prompt) or ShareGPT's "
     "{\"conversations\":\n[{\"from\", \"value\"}]} (human, gpt, system); or preference pairs,\n"
     "{\"prompt\", \"chosen\", \"rejected\"} (strings, or lists of messages;\nwithout \"prompt\" the messages "
     "both begin with), a window a\nsequence (--pack)", .call = tokenizer, .in_operands = true),
    OPT(OPT_TEXT, "-o", "OUT.bin", ARG(out), "the token file to write (format in runtime/data.h)", .in_operands = true),
    SECTION("With --tokenizer:"),
    OPT(OPT_TEXT, "--template", "T", ARG(ds.template_text), "how messages are rendered: by default the model's chat\n"
     "template (chat_template.jinja or tokenizer_config.json's beside\nthe tokenizer), as transformers' apply_chat_template "
     "renders\nit; `model` insists on that one; a .jinja file or a Jinja\ntemplate's text; chatml, llama3, or a string "
     "holding {content}\nonce and {role} (\\n, \\t read as such)"),
    OPT(OPT_TEXT, "--eos", "TOKEN", ARG(ds.eos), "the end-of-sequence token after each record (default: the\n"
     "tokenizer_config.json beside the tokenizer, else <|endoftext|>,\n<|end_of_text|> or </s>)"),
    OPT(OPT_COUNT, "--pack", "SEQ", ARG(pack), "pack records into windows of SEQ tokens that none crosses (train\n"
     "with seq = SEQ); a longer record is cut to SEQ, or with\n--drop-long dropped", .lo = 1, .hi = 1 << 30,
     .bad = "--pack needs a sequence length from 1 to 2^30"),
    OPT(OPT_FLAG, "--drop-long", NULL, ARG(ds.drop_long), "with --pack: drop a longer record instead of cutting it"),
    OPT(OPT_COUNT, "--threads", "N", ARG(threads), "encoding threads (default: one per CPU)"),
    OPT(OPT_COUNT, "--show", "N", ARG(show), "then print the first N records (or pairs) as the tokenizer\nrenders them back, "
     "the trained tokens between \xe2\x9f\xa6 and \xe2\x9f\xa7"),
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// The records cut or dropped for the window, and those dropped for training nothing.
static void say_records_dropped(const DsSummary *sm, int64_t pack) {
    char c1[32];
    uint64_t nlong = sm->cut + sm->dropped_long;
    if (nlong)
        printf("%s record%s longer than %lld tokens: %s\n", commas(c1, (int64_t)nlong), nlong == 1 ? "" : "s",
               (long long)pack, sm->cut ? "cut to the first of them" : "dropped (--drop-long)");
    if (sm->dropped_untrained)
        printf("%s record%s dropped: no token of %s is trained\n", commas(c1, (int64_t)sm->dropped_untrained),
               sm->dropped_untrained == 1 ? "" : "s", sm->dropped_untrained == 1 ? "it" : "theirs");
}

// The same of preference pairs: sequences cut, pairs dropped.
static void say_pairs_dropped(const DsSummary *sm, int64_t pack) {
    char c1[32];
    if (sm->cut)
        printf("%s sequence%s longer than %lld tokens: cut to the first of them\n", commas(c1, (int64_t)sm->cut),
               sm->cut == 1 ? "" : "s", (long long)pack);
    if (sm->dropped_long)
        printf("%s pair%s with a sequence longer than %lld tokens: dropped (--drop-long)\n",
               commas(c1, (int64_t)sm->dropped_long), sm->dropped_long == 1 ? "" : "s", (long long)pack);
    if (sm->dropped_untrained)
        printf("%s pair%s dropped: no token of %s chosen or rejected sequence is trained\n",
               commas(c1, (int64_t)sm->dropped_untrained), sm->dropped_untrained == 1 ? "" : "s",
               sm->dropped_untrained == 1 ? "its" : "their");
}

// The records of `in` through the tokenizer into `out`, and what came of them.
static int tokenize(const DataArgs *a, const char *in) {
    char err[1024], c1[32], c2[32], c3[32], c4[32], c5[32];
    DsSummary sm;
    double t0 = now_s();
    if (ds_convert(in, a->out, &a->ds, &sm, err, sizeof err) != 0) {
        fprintf(stderr, "ftc data: error: %s\n", err);
        return EXIT_NOFIT;
    }
    double dt = now_s() - t0;
    const char *what = sm.pairs ? "pairs" : "records";
    printf("%s: %s tokens, %s trained, from %s of %s %s in %s (vocab %s, %d bytes a token; "
           "end of sequence %s = %d)\n",
           a->out, commas(c1, (int64_t)sm.tokens), commas(c2, (int64_t)sm.trained), commas(c3, (int64_t)sm.written),
           commas(c5, (int64_t)sm.records), what, in, commas(c4, sm.vocab), sm.token_bytes, sm.eos_text, (int)sm.eos);
    if (sm.template_from[0])
        printf("messages through the chat template %s\n", sm.template_from);
    if (a->ds.pack)
        printf("packed into %s windows of %lld tokens%s: %s padding tokens (%.1f%%)\n",
               commas(c1, (int64_t)sm.windows), (long long)a->ds.pack, sm.pairs ? ", a sequence each" : "",
               commas(c2, (int64_t)sm.padding), sm.tokens ? 100.0 * (double)sm.padding / (double)sm.tokens : 0.0);
    if (sm.pairs)
        say_pairs_dropped(&sm, a->ds.pack);
    else
        say_records_dropped(&sm, a->ds.pack);
    printf("%s: %.1f MB in %.2f s, %.1f MB/s\n", in, (double)sm.input_bytes / 1e6, dt,
           dt > 0 ? (double)sm.input_bytes / 1e6 / dt : 0.0);
    if (a->show > 0) {
        putchar('\n');
        if (ds_show(a->out, a->ds.tokenizer, a->show, stdout, err, sizeof err) != 0) {
            fprintf(stderr, "ftc data: error: %s\n", err);
            return EXIT_NOFIT;
        }
    }
    return 0;
}

static int data_main(Cmdline *cl, int first) {
    DataArgs a = {.mode = -1};
    Parsed p;
    int rc = parse_options(cl, first, &cmd_data, &a, &p);
    if (rc)
        return rc < 0 ? 0 : rc;
    const char *in = p.positional;
    if (a.mode < 0 || !in || !a.out) {
        print_usage(stderr, &cmd_data);
        return EXIT_USAGE;
    }
    a.ds.pack = a.pack;
    a.ds.threads = a.threads > 64 ? 64 : (int)a.threads;
    const char *mode_flag = a.mode == DATA_BYTES ? "--bytes" : a.mode == DATA_U16 ? "--u16"
                            : a.mode == DATA_U32 ? "--u32" : "--tokenizer";
    if (a.mode != MODE_TOKENIZER && (a.ds.template_text || a.ds.eos || a.pack || a.threads ||
                                     parsed_at(&cmd_data, &p, "--show"))) {
        arg_error(cl, parsed_at(&cmd_data, &p, mode_flag), "--template, --eos, --pack, --threads and --show go "
                  "with --tokenizer");
        return EXIT_USAGE;
    }
    if (a.ds.drop_long && !a.pack) {
        arg_error(cl, parsed_at(&cmd_data, &p, "--drop-long"), "--drop-long goes with --pack");
        return EXIT_USAGE;
    }
    if (a.mode == MODE_TOKENIZER)
        return tokenize(&a, in);
    char err[1024];
    uint64_t n = 0;
    if (data_convert(in, a.out, (DataMode)a.mode, &n, err, sizeof err) != 0) {
        fprintf(stderr, "ftc data: error: %s\n", err);
        return EXIT_NOFIT;
    }
    printf("%s: %llu tokens (%s)\n", a.out, (unsigned long long)n,
           a.mode == DATA_BYTES ? "bytes, vocab 256" : a.mode == DATA_U16 ? "u16" : "u32");
    return 0;
}

const Command cmd_data = {
    "data", "(--bytes|--u16|--u32|--tokenizer F) FILE -o OUT.bin", "make a token file", "one input file", false,
    data_opts, (int)(sizeof data_opts / sizeof data_opts[0]), NULL, data_main};
