// main.c — the ftc command-line driver: dispatches commands, parses their arguments,
// prints results. Exit status: 0 success, 1 the request cannot be met (bad input, does
// not fit), 2 usage error. Nothing reaches stdout unless the command succeeds. The
// compile command is compile.c.
#include "driver.h"
#include "../runtime/data.h"

#include <stdarg.h>
#include <unistd.h>

static void usage(FILE *f) {
    fputs("usage: ftc <command> [options]\n"
          "\n"
          "commands:\n"
          "  compile FILE.ft [--budget SIZE] [--gpu PRESET] [--micro-batch N] [-o DIR]\n"
          "                  [--dump-ir] [--dump-after PASS]\n"
          "                            counts, the memory of one training step, and the plan\n"
          "  run DIR --data FILE [--weights PATH] [--steps N] [--save DIR] [--save-every N]\n"
          "      [--resume DIR] [--seed N] [--poison] [--device cuda|cpu|emu]\n"
          "                            train: execute the plan in DIR (on the GPU where one is)\n"
          "  inspect DIR [--at peak|N] [--buffer NAME] [--top K] [--json] [--kernels]\n"
          "                            the memory schedule of a plan\n"
          "  data (--bytes|--u16|--u32) FILE -o OUT\n"
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
          "\n"
          "  --data FILE       token file (ftc data makes one)\n"
          "  --weights PATH    Hugging Face safetensors: a file, or a directory (sharded too);\n"
          "                    without it, seeded initialisation\n"
          "  --steps N         optimizer steps (default 10)\n"
          "  --save DIR        write DIR/model.safetensors at the end (and every N steps with\n"
          "                    --save-every N, with the whole training state in\n"
          "                    DIR/checkpoint-STEP, the K latest kept: --keep K, default 2)\n"
          "  --resume DIR      continue from the latest checkpoint in DIR (or DIR itself, a\n"
          "                    checkpoint): its weights, optimizer state, step and seed;\n"
          "                    --steps is the total, counted from the start\n"
          "  --seed N          initialisation, data order and dropout (default 1234)\n"
          "  --poison          fill each buffer with NaN when its lifetime ends\n"
          "  --unplanned       every buffer its own allocation instead of the planned arena\n"
          "  --merge           with LoRA: also save the merged weights (model.safetensors);\n"
          "                    --save alone writes the adapters in PEFT's layout\n"
          "  --skip-nonfinite  a step whose loss is not finite is skipped (its update not\n"
          "                    taken) and counted; without it the run stops there\n"
          "  --device D        cuda (the GPU: the plan's kernels, cuBLASLt), cpu (the reference\n"
          "                    kernels) or emu (the plan's kernels compiled for and run on the\n"
          "                    CPU); default: cuda where the driver sees a GPU, else cpu\n",
          f);
}

static int cmd_run(Cmdline *cl, int argc, char **argv, int first) {
    RunOptions o = {.steps = 10, .seed = 1234, .layout = LAYOUT_PLANNED, .out = stdout};
    int64_t v;
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        bool takes = strcmp(s, "--data") == 0 || strcmp(s, "--weights") == 0 ||
                     strcmp(s, "--steps") == 0 || strcmp(s, "--save") == 0 ||
                     strcmp(s, "--save-every") == 0 || strcmp(s, "--resume") == 0 ||
                     strcmp(s, "--keep") == 0 ||
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
        else if (strcmp(s, "--steps") == 0) {
            i++;
            if (!arg_count(cl, i, argv[i], &o.steps))
                return EXIT_USAGE;
        } else if (strcmp(s, "--save-every") == 0) {
            i++;
            if (!arg_count(cl, i, argv[i], &o.save_every))
                return EXIT_USAGE;
        } else if (strcmp(s, "--seed") == 0) {
            i++;
            if (!arg_count(cl, i, argv[i], &v))
                return EXIT_USAGE;
            o.seed = (uint64_t)v;
        } else if (strcmp(s, "--device") == 0) {
            o.device = argv[++i];
            if (strcmp(o.device, "cpu") != 0 && strcmp(o.device, "emu") != 0 &&
                strcmp(o.device, "cuda") != 0) {
                arg_error(cl, i, "--device takes cuda, cpu or emu");
                return EXIT_USAGE;
            }
        } else if (strcmp(s, "--poison") == 0)
            o.poison = true;
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
    return rt_train(&o);
}

static void usage_data(FILE *f) {
    fputs("usage: ftc data (--bytes|--u16|--u32) FILE -o OUT.bin\n"
          "\n"
          "  --bytes           every byte of FILE is a token (vocab 256)\n"
          "  --u16, --u32      FILE holds little-endian token ids of 2 or 4 bytes\n"
          "  -o OUT.bin        the token file to write (format in runtime/data.h)\n",
          f);
}

static int cmd_data(Cmdline *cl, int argc, char **argv, int first) {
    const char *in = NULL, *out = NULL;
    int mode = -1;
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            usage_data(stdout);
            return 0;
        }
        if (strcmp(s, "--bytes") == 0 || strcmp(s, "--u16") == 0 || strcmp(s, "--u32") == 0) {
            if (mode >= 0) {
                arg_error(cl, i, "one of --bytes, --u16, --u32");
                return EXIT_USAGE;
            }
            mode = s[2] == 'b' ? DATA_BYTES : s[3] == '1' ? DATA_U16 : DATA_U32;
        } else if (strcmp(s, "-o") == 0) {
            if (i + 1 >= argc) {
                arg_error(cl, i, "-o needs a file");
                return EXIT_USAGE;
            }
            out = argv[++i];
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
    char err[1024];
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
          "                    timeline (what DIR/memory.txt holds)\n"
          "  --at peak|N       what is live at the peak or at instruction N\n"
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
    MemMeta mm = {p->budget_bytes, p->reserve_bytes, gpu ? gpu->bf16_tflops * 1e12 : 312e12,
                  gpu ? gpu->hbm_gbps * 1e9 : 1555e9, gpu ? gpu->link_gbps * 1e9 : 25e9};
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

static void usage_import(FILE *f) { fputs("usage: ftc import CONFIG.json > MODEL.ft\n", f); }

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
    FILE *probe = fopen(argv[first], "rb");
    if (!probe) {
        arg_error(cl, first, "cannot open '%s': %s", argv[first], strerror(errno));
        return EXIT_NOFIT;
    }
    fclose(probe);
    return fe_import(argv[first], stdout);
}

int main(int argc, char **argv) {
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
    return rc;
}
