// main.c — the ftc command-line driver: dispatches commands, parses their arguments,
// prints results. Exit status: 0 success, 1 the request cannot be met (bad input, does
// not fit), 2 usage error. Nothing reaches stdout unless the command succeeds. The
// compile command is compile.c.
#include "driver.h"
#include "../runtime/data.h"
#include "../runtime/dataset.h"

#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f) {
    fputs("usage: ftc <command> [options]\n"
          "\n"
          "commands:\n"
          "  compile FILE.ft [--budget SIZE] [--gpu PRESET] [--micro-batch N] [-o DIR]\n"
          "                  [--dump-ir] [--dump-after PASS]\n"
          "                            counts, the memory of one training step, and the plan\n"
          "  run DIR --data FILE [--weights PATH] [--steps N] [--save DIR] [--save-every N]\n"
          "      [--resume DIR] [--seed N] [--poison] [--sync-check] [--device cuda|cpu|emu]\n"
          "                            train: execute the plan in DIR (on the GPU where one is)\n"
          "  inspect DIR [--at peak|N] [--buffer NAME] [--top K] [--json] [--kernels]\n"
          "                            the memory schedule of a plan\n"
          "  data (--bytes|--u16|--u32) FILE -o OUT\n"
          "  data --tokenizer tokenizer.json FILE.jsonl -o OUT [--template T] [--pack SEQ]\n"
          "                            make a token file\n"
          "  import CONFIG.json        write a .ft for a Hugging Face config on stdout\n"
          "  help [COMMAND]            this text, or one command's\n"
          "\n"
          "sizes: 40G and 40GiB are 40*2^30 bytes, 40GB is 40*10^9 (K, M, G, T alike)\n",
          f);
}

static void usage_run(FILE *f) {
    fputs("usage: ftc run DIR --data FILE [--weights PATH] [--steps N] [--save DIR]\n"
          "                   [--save-every N] [--keep K] [--resume DIR] [--seed N] [--poison]\n"
          "                   [--unplanned] [--merge] [--skip-nonfinite] [--device cuda|cpu|emu]\n"
          "                   [--sync-check] [--gemm-first] [--no-graphs]\n"
          "                   [--comm-timeout SECONDS]\n"
          "                   [--eval-data FILE [--eval-every N] [--eval-batches K]]\n"
          "                   [--report DIR] [--log-every N] [--profile FILE]\n"
          "\n"
          "  --data FILE       token file (ftc data makes one)\n"
          "  --weights PATH    Hugging Face safetensors: a file, or a directory (sharded too);\n"
          "                    without it, seeded initialisation\n"
          "  --steps N         optimizer steps (default: the train section's steps, else 10)\n"
          "  --save DIR        write DIR/model.safetensors at the end (and every N steps with\n"
          "                    --save-every N, with the whole training state in\n"
          "                    DIR/checkpoint-STEP, the last step's too, the K latest kept:\n"
          "                    --keep K, default 2)\n"
          "  --resume DIR      continue from the latest checkpoint in DIR (or DIR itself, a\n"
          "                    checkpoint): its weights, optimizer state, step and seed;\n"
          "                    --steps is the total, counted from the start\n"
          "  --seed N          initialisation, data order and dropout (default 1234)\n"
          "  --poison          fill each buffer with NaN when its lifetime ends\n"
          "  --sync-check      on a GPU, wait for each instruction and check it: a fault names\n"
          "                    the instruction, its kernel and its .ft line (slow: for finding one)\n"
          "  --gemm-first      on a GPU, take cuBLASLt's first choice of algorithm for every\n"
          "                    product; by default its first 8 candidates are timed before step\n"
          "                    one and the fastest kept, cached per GPU (~/.cache/ftc/gemm) so\n"
          "                    that a rerun takes the same ones and computes the same bits\n"
          "  --no-graphs       on a GPU, issue every kernel of every phase one by one; by default\n"
          "                    the forward, backward and eval phases are each captured once as\n"
          "                    a CUDA graph and launched whole (not with --poison, --profile,\n"
          "                    --sync-check, host-stream work or several ranks)\n"
          "  --unplanned       every buffer its own allocation instead of the planned arena\n"
          "  --merge           with LoRA: also save the merged weights, in DIR/merged/ (not\n"
          "                    beside the adapter, which a loader would apply again);\n"
          "                    --save alone writes the adapters in PEFT's layout\n"
          "  --skip-nonfinite  a step whose loss or gradients are not finite is skipped (its\n"
          "                    update not taken) and counted; without it the run stops there\n"
          "                    (refused for a plan that updates inside backward: ftc compile\n"
          "                    --update step)\n"
          "  --device D        cuda (the GPU: the plan's kernels, cuBLASLt), cpu (the reference\n"
          "                    kernels) or emu (the plan's kernels compiled for and run on the\n"
          "                    CPU); default: cuda where the driver sees a GPU, else cpu\n"
          "  --comm-timeout S  on a job of several ranks, how long a rank waits for the others\n"
          "                    in one exchange before it ends the job (default 600)\n"
          "  --eval-data FILE  a token file for evaluation: the plan's eval phase (forward only,\n"
          "                    nothing saved for a backward) prints its loss and perplexity\n"
          "                    after the last step, and every N steps with --eval-every N\n"
          "  --eval-batches K  evaluate its first K micro-batches (default: every window)\n"
          "  --report DIR      write DIR/run.jsonl (a record a step: loss, eval loss, gradient\n"
          "                    norm, lr, tokens/s, loss scale, skipped) and DIR/run.html (the\n"
          "                    curves, planned and measured memory); default: the --save DIR\n"
          "  --log-every N     a progress line every N steps (default 1); on a terminal the\n"
          "                    line is rewritten in place, with the time left, and kept every N\n"
          "  --profile FILE    time the device's work instruction by instruction after the first\n"
          "                    step (on a GPU by CUDA events) and write FILE: per kernel and GEMM\n"
          "                    shape its calls and time a step beside the plan's estimate\n"
          "\n"
          "A plan compiled with --ranks N runs as N processes: mpirun -np N ftc run DIR ...\n"
          "(or srun -n N); each is one rank, rank 0 prints, saves and writes the report; each\n"
          "evaluates the same windows (no eval phase at --zero 3).\n",
          f);
}

// A preset's card memory, for ftc run's memory line: nvidia-smi's total and the driver's.
static bool preset_card(const char *name, int64_t *nominal, int64_t *driver) {
    const GpuPreset *g = gpu_preset(name);
    if (!g)
        return false;
    *nominal = g->mem_bytes, *driver = g->driver_bytes;
    return true;
}

static int cmd_run(Cmdline *cl, int argc, char **argv, int first) {
    RunOptions o = {.seed = 1234, .layout = LAYOUT_PLANNED, .out = stdout, .card = preset_card};
    int64_t v;
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        bool takes = strcmp(s, "--data") == 0 || strcmp(s, "--weights") == 0 ||
                     strcmp(s, "--steps") == 0 || strcmp(s, "--save") == 0 ||
                     strcmp(s, "--save-every") == 0 || strcmp(s, "--resume") == 0 ||
                     strcmp(s, "--keep") == 0 || strcmp(s, "--comm-timeout") == 0 ||
                     strcmp(s, "--eval-data") == 0 ||
                     strcmp(s, "--eval-every") == 0 || strcmp(s, "--eval-batches") == 0 ||
                     strcmp(s, "--report") == 0 || strcmp(s, "--log-every") == 0 ||
                     strcmp(s, "--profile") == 0 ||
                     strcmp(s, "--seed") == 0 || strcmp(s, "--device") == 0;
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            usage_run(stdout);
            return 0;
        }
        if (takes && i + 1 >= argc) {
            arg_error(cl, i, "%s needs a value", s);
            return EXIT_USAGE;
        }
        if (strcmp(s, "--data") == 0)
            o.data = argv[++i];
        else if (strcmp(s, "--weights") == 0)
            o.weights = argv[++i];
        else if (strcmp(s, "--save") == 0)
            o.save = argv[++i];
        else if (strcmp(s, "--resume") == 0)
            o.resume = argv[++i];
        else if (strcmp(s, "--eval-data") == 0)
            o.eval_data = argv[++i];
        else if (strcmp(s, "--report") == 0)
            o.report = argv[++i];
        else if (strcmp(s, "--profile") == 0)
            o.profile = argv[++i];
        else if (strcmp(s, "--log-every") == 0) {
            i++;
            if (!arg_count(cl, i, argv[i], &o.log_every))
                return EXIT_USAGE;
            if (o.log_every < 1) {
                arg_error(cl, i, "--log-every must be at least 1");
                return EXIT_USAGE;
            }
        }
        else if (strcmp(s, "--eval-every") == 0 || strcmp(s, "--eval-batches") == 0) {
            i++;
            int64_t *to = s[7] == 'e' ? &o.eval_every : &o.eval_batches;
            if (!arg_count(cl, i, argv[i], to))
                return EXIT_USAGE;
            if (*to < 1) {
                arg_error(cl, i, "%s must be at least 1", s);
                return EXIT_USAGE;
            }
        }
        else if (strcmp(s, "--keep") == 0) {
            i++;
            if (!arg_count(cl, i, argv[i], &v))
                return EXIT_USAGE;
            if (v < 1 || v > 1000000) {
                arg_error(cl, i, "--keep takes 1 to 1000000 checkpoints");
                return EXIT_USAGE;
            }
            o.keep = (int)v;
        }
        else if (strcmp(s, "--comm-timeout") == 0) {
            i++;
            if (!arg_count(cl, i, argv[i], &v))
                return EXIT_USAGE;
            if (v < 1 || v > 1000000) {
                arg_error(cl, i, "--comm-timeout takes 1 to 1000000 seconds");
                return EXIT_USAGE;
            }
            o.comm_timeout_s = (double)v;
        }
        else if (strcmp(s, "--steps") == 0) {
            i++;
            if (!arg_count(cl, i, argv[i], &o.steps))
                return EXIT_USAGE;
            if (o.steps < 1) {
                arg_error(cl, i, "--steps must be at least 1");
                return EXIT_USAGE;
            }
        } else if (strcmp(s, "--save-every") == 0) {
            i++;
            if (!arg_count(cl, i, argv[i], &o.save_every))
                return EXIT_USAGE;
        } else if (strcmp(s, "--seed") == 0) {
            i++;
            if (!arg_count(cl, i, argv[i], &v))
                return EXIT_USAGE;
            o.seed = (uint64_t)v, o.seed_given = true;
        } else if (strcmp(s, "--device") == 0) {
            const char *d = argv[++i];
            o.device = !strcmp(d, "cpu") ? DEVICE_CPU : !strcmp(d, "emu") ? DEVICE_EMU
                       : !strcmp(d, "cuda") ? DEVICE_CUDA : DEVICE_AUTO;
            if (o.device == DEVICE_AUTO) {
                arg_error(cl, i, "--device takes cuda, cpu or emu");
                return EXIT_USAGE;
            }
        } else if (strcmp(s, "--poison") == 0)
            o.poison = true;
        else if (strcmp(s, "--sync-check") == 0)
            o.sync_check = true;
        else if (strcmp(s, "--gemm-first") == 0)
            o.gemm_first = true;
        else if (strcmp(s, "--no-graphs") == 0)
            o.no_graphs = true;
        else if (strcmp(s, "--unplanned") == 0)
            o.layout = LAYOUT_UNPLANNED;
        else if (strcmp(s, "--merge") == 0)
            o.merge = true;
        else if (strcmp(s, "--skip-nonfinite") == 0)
            o.skip_nonfinite = true;
        else if (s[0] == '-' && s[1]) {
            arg_error(cl, i, "unknown option '%s' (see ftc help run)", s);
            return EXIT_USAGE;
        } else if (o.plan_dir) {
            arg_error(cl, i, "one plan directory at a time");
            return EXIT_USAGE;
        } else
            o.plan_dir = s;
    }
    if (!o.plan_dir || !o.data) {
        usage_run(stderr);
        return EXIT_USAGE;
    }
    if ((o.eval_every || o.eval_batches) && !o.eval_data) {
        fprintf(stderr, "ftc run: error: %s needs --eval-data FILE\n",
                o.eval_every ? "--eval-every" : "--eval-batches");
        return EXIT_USAGE;
    }
    return rt_train(&o);
}

// A Hugging Face model directory given where a file of it is meant: DIR/name, in buf;
// anything else as it is.
static const char *in_model_dir(const char *path, const char *name, char *buf, size_t cap) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return path;
    size_t n = strlen(path);
    snprintf(buf, cap, "%s%s%s", path, n && path[n - 1] == '/' ? "" : "/", name);
    return buf;
}

static void usage_data(FILE *f) {
    fputs("usage: ftc data (--bytes|--u16|--u32) FILE -o OUT.bin\n"
          "       ftc data --tokenizer tokenizer.json FILE.jsonl -o OUT.bin [--template T]\n"
          "                [--eos TOKEN] [--pack SEQ [--drop-long]] [--threads N] [--show N]\n"
          "\n"
          "  --bytes           every byte of FILE is a token (vocab 256)\n"
          "  --u16, --u32      FILE holds little-endian token ids of 2 or 4 bytes\n"
          "  --tokenizer F     encode the records of FILE.jsonl with a Hugging Face tokenizer.json\n"
          "                    (or a model directory's)\n"
          "                    (byte-level BPE: GPT-2, Qwen2, Llama 3, Mistral-Nemo); one JSON\n"
          "                    object a line: {\"text\"}, {\"prompt\", \"completion\"} (only the\n"
          "                    completion trained), {\"messages\": [{\"role\", \"content\"}]} (only\n"
          "                    the assistant's content trained), Alpaca's {\"instruction\",\n"
          "                    \"input\", \"output\"} (a user and an assistant message; without\n"
          "                    --template Alpaca's own prompt) or ShareGPT's {\"conversations\":\n"
          "                    [{\"from\", \"value\"}]} (human, gpt, system)\n"
          "  --template T      how messages are rendered: chatml, llama3, or a string holding\n"
          "                    {content} once and {role} (\\n, \\t read as such)\n"
          "  --eos TOKEN       the end-of-sequence token after each record (default: the\n"
          "                    tokenizer_config.json beside the tokenizer, else <|endoftext|>,\n"
          "                    <|end_of_text|> or </s>)\n"
          "  --pack SEQ        pack records into windows of SEQ tokens that none crosses (train\n"
          "                    with seq = SEQ); a longer record is cut to SEQ, or with\n"
          "                    --drop-long dropped\n"
          "  --threads N       encoding threads (default: one per CPU)\n"
          "  --show N          then print the first N records as the tokenizer renders them\n"
          "                    back, the trained tokens between \xe2\x9f\xa6 and \xe2\x9f\xa7\n"
          "  -o OUT.bin        the token file to write (format in runtime/data.h)\n",
          f);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmd_data(Cmdline *cl, int argc, char **argv, int first) {
    const char *in = NULL, *out = NULL;
    int mode = -1, mode_at = 0, pack_at = 0, drop_at = 0, show_at = 0;
    int64_t show = 0;   // --show N: the first N records rendered back, the trained spans marked
    DsOptions ds = {0};
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            usage_data(stdout);
            return 0;
        }
        bool value = strcmp(s, "-o") == 0 || strcmp(s, "--tokenizer") == 0 || strcmp(s, "--template") == 0 ||
                     strcmp(s, "--eos") == 0 || strcmp(s, "--pack") == 0 || strcmp(s, "--threads") == 0;
        if (value && i + 1 >= argc) {
            arg_error(cl, i, "%s needs a value", s);
            return EXIT_USAGE;
        }
        int64_t v;
        if (strcmp(s, "--bytes") == 0 || strcmp(s, "--u16") == 0 || strcmp(s, "--u32") == 0 ||
            strcmp(s, "--tokenizer") == 0) {
            if (mode >= 0) {
                arg_error(cl, i, "one of --bytes, --u16, --u32, --tokenizer");
                return EXIT_USAGE;
            }
            mode = s[2] == 'b' ? DATA_BYTES : s[2] == 't' ? 3 : s[3] == '1' ? DATA_U16 : DATA_U32;
            mode_at = i;
            static char tok_path[4096];
            if (mode == 3)   // (a model directory: its tokenizer.json)
                ds.tokenizer = in_model_dir(argv[++i], "tokenizer.json", tok_path, sizeof tok_path);
        } else if (strcmp(s, "-o") == 0) {
            out = argv[++i];
        } else if (strcmp(s, "--template") == 0) {
            ds.template_text = argv[++i];
        } else if (strcmp(s, "--eos") == 0) {
            ds.eos = argv[++i];
        } else if (strcmp(s, "--pack") == 0) {
            if (!arg_count(cl, i + 1, argv[i + 1], &v))
                return EXIT_USAGE;
            if (v < 1 || v > (1 << 30)) {
                arg_error(cl, i + 1, "--pack needs a sequence length from 1 to 2^30");
                return EXIT_USAGE;
            }
            ds.pack = v;
            pack_at = ++i;
        } else if (strcmp(s, "--threads") == 0) {
            if (!arg_count(cl, i + 1, argv[i + 1], &v))
                return EXIT_USAGE;
            ds.threads = v > 64 ? 64 : (int)v;
            i++;
        } else if (strcmp(s, "--show") == 0) {
            if (!arg_count(cl, i + 1, argv[i + 1], &v))
                return EXIT_USAGE;
            show = v, show_at = ++i;
        } else if (strcmp(s, "--drop-long") == 0) {
            ds.drop_long = true;
            drop_at = i;
        } else if (s[0] == '-' && s[1]) {
            arg_error(cl, i, "unknown option '%s'", s);
            return EXIT_USAGE;
        } else if (in) {
            arg_error(cl, i, "one input file at a time");
            return EXIT_USAGE;
        } else {
            in = s;
        }
    }
    if (mode < 0 || !in || !out) {
        usage_data(stderr);
        return EXIT_USAGE;
    }
    if (mode != 3 && (ds.template_text || ds.eos || ds.pack || ds.threads || show_at)) {
        arg_error(cl, mode_at, "--template, --eos, --pack, --threads and --show go with --tokenizer");
        return EXIT_USAGE;
    }
    if (drop_at && !pack_at) {
        arg_error(cl, drop_at, "--drop-long goes with --pack");
        return EXIT_USAGE;
    }
    char err[1024];
    if (mode == 3) {
        DsSummary sm;
        double t0 = now_s();
        if (ds_convert(in, out, &ds, &sm, err, sizeof err) != 0) {
            fprintf(stderr, "ftc data: error: %s\n", err);
            return EXIT_NOFIT;
        }
        double dt = now_s() - t0;
        char a[32], b[32], c[32], d[32], e[32];
        printf("%s: %s tokens, %s trained, from %s of %s records in %s (vocab %s, %d bytes a token; "
               "end of sequence %s = %d)\n",
               out, commas(a, (int64_t)sm.tokens), commas(b, (int64_t)sm.trained), commas(c, (int64_t)sm.written),
               commas(e, (int64_t)sm.records), in, commas(d, sm.vocab), sm.token_bytes, sm.eos_text, (int)sm.eos);
        if (ds.pack)
            printf("packed into %s windows of %lld tokens: %s padding tokens (%.1f%%)\n",
                   commas(a, (int64_t)sm.windows), (long long)ds.pack, commas(b, (int64_t)sm.padding),
                   sm.tokens ? 100.0 * (double)sm.padding / (double)sm.tokens : 0.0);
        uint64_t nlong = sm.cut + sm.dropped_long;
        if (nlong)
            printf("%s record%s longer than %lld tokens: %s\n", commas(a, (int64_t)nlong), nlong == 1 ? "" : "s",
                   (long long)ds.pack, sm.cut ? "cut to the first of them" : "dropped (--drop-long)");
        if (sm.dropped_untrained)
            printf("%s record%s dropped: no token of %s is trained\n", commas(a, (int64_t)sm.dropped_untrained),
                   sm.dropped_untrained == 1 ? "" : "s", sm.dropped_untrained == 1 ? "it" : "theirs");
        printf("%s: %.1f MB in %.2f s, %.1f MB/s\n", in, (double)sm.input_bytes / 1e6, dt,
               dt > 0 ? (double)sm.input_bytes / 1e6 / dt : 0.0);
        if (show > 0) {
            putchar('\n');
            if (ds_show(out, ds.tokenizer, show, stdout, err, sizeof err) != 0) {
                fprintf(stderr, "ftc data: error: %s\n", err);
                return EXIT_NOFIT;
            }
        }
        return 0;
    }
    uint64_t n = 0;
    if (data_convert(in, out, (DataMode)mode, &n, err, sizeof err) != 0) {
        fprintf(stderr, "ftc data: error: %s\n", err);
        return EXIT_NOFIT;
    }
    printf("%s: %llu tokens (%s)\n", out, (unsigned long long)n,
           mode == DATA_BYTES ? "bytes, vocab 256" : mode == DATA_U16 ? "u16" : "u32");
    return 0;
}

static void usage_inspect(FILE *f) {
    fputs("usage: ftc inspect DIR [--at peak|N] [--buffer NAME] [--top K] [--json] [--kernels]\n"
          "\n"
          "  (no option)       the summary: budget, peak and where, breakdown, largest buffers,\n"
          "                    timeline, and the host arena's own (what DIR/memory.txt holds)\n"
          "  --at peak|N       what is live at the device's peak or at instruction N, on the\n"
          "                    device and on the host\n"
          "  --buffer NAME     one buffer: place, lifetime, the instructions touching it\n"
          "  --top K           how many buffers to list (default 20)\n"
          "  --json            everything, for programs (what DIR/memory.json holds)\n"
          "  --kernels         the generated kernels: registers, shared memory, stack and spills\n"
          "                    of each, as NVRTC compiled DIR/kernels.cu (DIR/kernels.txt)\n",
          f);
}

static int cmd_inspect(Cmdline *cl, int argc, char **argv, int first) {
    const char *dir = NULL, *at = NULL, *buffer = NULL;
    int64_t top = 20;
    bool json = false, kernels = false;
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            usage_inspect(stdout);
            return 0;
        }
        bool takes = strcmp(s, "--at") == 0 || strcmp(s, "--buffer") == 0 || strcmp(s, "--top") == 0;
        if (takes && i + 1 >= argc) {
            arg_error(cl, i, "%s needs a value", s);
            return EXIT_USAGE;
        }
        if (strcmp(s, "--at") == 0)
            at = argv[++i];
        else if (strcmp(s, "--buffer") == 0)
            buffer = argv[++i];
        else if (strcmp(s, "--top") == 0) {
            i++;
            if (!arg_count(cl, i, argv[i], &top))
                return EXIT_USAGE;
        } else if (strcmp(s, "--json") == 0)
            json = true;
        else if (strcmp(s, "--kernels") == 0)
            kernels = true;
        else if (s[0] == '-' && s[1]) {
            arg_error(cl, i, "unknown option '%s' (see ftc help inspect)", s);
            return EXIT_USAGE;
        } else if (dir) {
            arg_error(cl, i, "one plan directory at a time");
            return EXIT_USAGE;
        } else
            dir = s;
    }
    if (!dir) {
        usage_inspect(stderr);
        return EXIT_USAGE;
    }
    char path[4096], err[1024];
    if (kernels) {   // the resource report ftc compile wrote beside kernels.cu
        snprintf(path, sizeof path, "%s/kernels.txt", dir);
        FILE *f = fopen(path, "r");
        if (!f) {
            fprintf(stderr, "ftc inspect: error: %s: %s (a plan from before kernels.cu?)\n", path,
                    strerror(errno));
            return EXIT_NOFIT;
        }
        char buf[4096];
        for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;)
            fwrite(buf, 1, n, stdout);
        fclose(f);
        return 0;
    }
    snprintf(path, sizeof path, "%s/plan", dir);
    Plan *p;
    if (plan_load(&p, path, err, sizeof err) != 0) {
        fprintf(stderr, "ftc inspect: error: %s\n", err);
        return EXIT_NOFIT;
    }
    const GpuPreset *gpu = p->gpu ? gpu_preset(p->gpu) : NULL;
    const LinkPreset *link = p->link ? link_preset(p->link) : NULL;
    MemMeta mm = {p->budget_bytes, p->reserve_bytes, gpu ? gpu->bf16_tflops * 1e12 : 312e12,
                  gpu ? gpu->hbm_gbps * 1e9 : 1555e9,
                  p->host_link > 0 ? p->host_link : gpu ? gpu->link_gbps * 1e9 : 25e9,
                  link ? link->gbps * 1e9 : 0, link ? link->latency_us : 0};
    MemView v;
    mv_init(&v, p);
    int rc = 0;
    if (at) {
        char *end;
        long n = strcmp(at, "peak") == 0 ? v.peak_at : strtol(at, &end, 10);
        if (strcmp(at, "peak") != 0 && (*end || n < 0 || n >= v.n)) {
            fprintf(stderr, "ftc inspect: error: --at takes 'peak' or an instruction 0..%d\n", v.n - 1);
            rc = EXIT_USAGE;
        } else {
            mv_print_at(stdout, &v, (int)n, (int)top);
        }
    } else if (buffer) {
        rc = mv_print_buffer(stdout, &v, buffer) == 0 ? 0 : EXIT_NOFIT;
    } else if (json) {
        mv_write_json(stdout, &v, &mm);
    } else {
        mv_write_txt(stdout, &v, &mm);
    }
    mv_free(&v);
    plan_free(p);
    return rc;
}

static void usage_import(FILE *f) { fputs("usage: ftc import CONFIG.json|MODEL_DIR > MODEL.ft\n", f); }

static int cmd_import(Cmdline *cl, int argc, char **argv, int first) {
    if (argc - first != 1 || argv[first][0] == '-') {
        if (argc - first == 1 && (strcmp(argv[first], "--help") == 0 || strcmp(argv[first], "-h") == 0)) {
            usage_import(stdout);
            return 0;
        }
        if (argc - first > 1)
            arg_error(cl, first + 1, "import takes one config.json");
        else
            usage_import(stderr);
        return EXIT_USAGE;
    }
    char cfg[4096];   // a model directory: its config.json
    const char *path = in_model_dir(argv[first], "config.json", cfg, sizeof cfg);
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        arg_error(cl, first, "cannot open '%s': %s", path, strerror(errno));
        return EXIT_NOFIT;
    }
    fclose(probe);
    return fe_import(path, stdout);
}

int main(int argc, char **argv) {
    // The planner builds and frees a graph per candidate, tens of megabytes each: kept
    // in the heap rather than mapped and unmapped each time, their pages fault in once.
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    Cmdline cl;
    cmdline_init(&cl, argc, argv);
    int rc;
    const char *cmd = argc > 1 ? argv[1] : NULL;
    if (!cmd || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
        (strcmp(cmd, "help") == 0 && argc == 2)) {
        usage(cmd ? stdout : stderr);
        rc = cmd ? 0 : EXIT_USAGE;
    } else if (strcmp(cmd, "help") == 0) {
        rc = 0;
        if (strcmp(argv[2], "compile") == 0)
            usage_compile(stdout);
        else if (strcmp(argv[2], "run") == 0)
            usage_run(stdout);
        else if (strcmp(argv[2], "inspect") == 0)
            usage_inspect(stdout);
        else if (strcmp(argv[2], "data") == 0)
            usage_data(stdout);
        else if (strcmp(argv[2], "import") == 0)
            usage_import(stdout);
        else if (strcmp(argv[2], "help") == 0)
            usage(stdout);
        else
            arg_error(&cl, 2, "no such command '%s' (compile, run, inspect, data, import, help)",
                      argv[2]), rc = EXIT_USAGE;
    } else if (strcmp(cmd, "compile") == 0) {
        rc = cmd_compile(&cl, argc, argv, 2);
    } else if (strcmp(cmd, "import") == 0) {
        rc = cmd_import(&cl, argc, argv, 2);
    } else if (strcmp(cmd, "run") == 0) {
        rc = cmd_run(&cl, argc, argv, 2);
    } else if (strcmp(cmd, "data") == 0) {
        rc = cmd_data(&cl, argc, argv, 2);
    } else if (strcmp(cmd, "inspect") == 0) {
        rc = cmd_inspect(&cl, argc, argv, 2);
    } else {
        arg_error(&cl, 1, "unknown command '%s' (compile, run, inspect, data, import, help)", cmd);
        rc = EXIT_USAGE;
    }
    cmdline_free(&cl);
    // What a command wrote to standard output must have arrived: a full disk or a closed
    // pipe under `ftc import cfg.json > model.ft` is an error here, not a syntax error later.
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "ftc: error: cannot write standard output: %s\n",
                errno ? strerror(errno) : "write error");
        return rc == 0 ? EXIT_FAILURE : rc;
    }
    return rc;
}
