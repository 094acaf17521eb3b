// main.c — the ftc command-line driver: parses arguments, runs the pipeline,
// prints results. Exit status: 0 success, 1 the request cannot be met (bad input,
// does not fit), 2 usage error. Nothing reaches stdout unless the command succeeds.
#include "frontend.h"
#include "../passes/passes.h"
#include "../codegen/codegen.h"
#include "../runtime/runtime.h"
#include "../runtime/data.h"

#include <stdarg.h>
#include <unistd.h>

enum { EXIT_NOFIT = 1, EXIT_USAGE = 2 };

// The command line as a source, so argument errors get a caret too.
typedef struct Cmdline {
    FtSource src;
    int *col;               // 1-based column of each argv[i]
    int argc;
    char **argv;
} Cmdline;

static void cmdline_init(Cmdline *c, int argc, char **argv) {
    size_t len = 4;
    for (int i = 1; i < argc; i++)
        len += strlen(argv[i]) + 1;
    char *text = malloc(len + 1), *p = text;
    c->col = malloc(sizeof(int) * (size_t)(argc + 1));
    for (int i = 0; i < argc; i++) {
        // argv[0] shows as "ftc" so messages read the same however ftc was started
        const char *arg = i ? argv[i] : "ftc";
        c->col[i] = (int)(p - text) + 1;
        p += sprintf(p, "%s%s", i ? " " : "", arg);
        if (i)
            c->col[i]++;
    }
    *p = '\0';
    fe_source_from_string(&c->src, "<command line>", text);
    free(text);
    c->argc = argc;
    c->argv = argv;
}

static void cmdline_free(Cmdline *c) {
    fe_source_free(&c->src);
    free(c->col);
}

__attribute__((format(printf, 3, 4)))
static void arg_error(Cmdline *c, int i, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    SrcLoc loc = {c->src.path, 1, c->col[i], (int)strlen(c->argv[i])};
    fe_error(&c->src, loc, "%s", msg);
}

static const char *commas(char *buf, int64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)(v < 0 ? -v : v)), o = 0;
    if (v < 0)
        buf[o++] = '-';
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = '\0';
    return buf;
}

static void usage(FILE *f) {
    fputs("usage: ftc <command> [options]\n"
          "\n"
          "commands:\n"
          "  compile FILE.ft [--budget SIZE] [--gpu PRESET] [--micro-batch N] [-o DIR] [--dump-ir]\n"
          "                            counts, the memory of one training step, and the plan\n"
          "  run DIR --data FILE [--weights PATH] [--steps N] [--save DIR] [--seed N] [--poison]\n"
          "                            train: execute the plan in DIR on the cpu\n"
          "  inspect DIR [--at peak|N] [--buffer NAME] [--top K] [--json]\n"
          "                            the memory schedule of a plan\n"
          "  data (--bytes|--u16|--u32) FILE -o OUT\n"
          "                            make a token file\n"
          "  import CONFIG.json        write a .ft for a Hugging Face config on stdout\n"
          "  help [COMMAND]            this text, or one command's\n"
          "\n"
          "sizes: 40G and 40GiB are 40*2^30 bytes, 40GB is 40*10^9 (K, M, G, T alike)\n",
          f);
}

static void usage_compile(FILE *f) {
    int n;
    const GpuPreset *p = gpu_presets(&n);
    fputs("usage: ftc compile FILE.ft [--budget SIZE] [--gpu PRESET] [--host-mem SIZE] [-o DIR]\n"
          "                   [--micro-batch N] [--remat P] [--offload L] [--dump-ir]\n"
          "\n"
          "  --budget SIZE     device memory the step must fit (default: the preset's memory)\n"
          "  --host-mem SIZE   host memory for offloaded state (default: this machine's RAM)\n"
          "  --gpu PRESET      GPU preset (default a100-40g):",
          f);
    for (int i = 0; i < n; i++)
        fprintf(f, " %s", p[i].name);
    fputs("\n"
          "  -o DIR            the plan directory to write (default: NAME.plan, NAME the file's stem)\n"
          "  --dump-ir         print the IR after each pass of the chosen plan\n"
          "  --emit-graph F    write the training graph (FLOPs, bytes, edges) as JSON to F\n"
          "The planner chooses these; each fixes one:\n"
          "  --micro-batch N   sequences per micro-batch (the rest of the global batch accumulates)\n"
          "  --remat P         keep, selective, full (recompute from the block's input) or swap\n"
          "                    (full, with the block's input waiting in host memory) in every block\n"
          "  --offload L       none, optimizer (moments and master weights on the host, CPU AdamW)\n"
          "                    or grads (the gradients too)\n"
          "Exit status 1 when nothing fits: the smallest plan and what would fit are printed.\n",
          f);
}


static const char *precision_name(const TrainSpec *t) {
    switch (t->precision) {
    case PREC_BF16: return t->master_weights ? "bf16 mixed (fp32 master weights and optimizer state)"
                                             : "bf16 weights, fp32 optimizer state, no master copy";
    case PREC_FP16: return t->master_weights ? "fp16 mixed (fp32 master weights and optimizer state)"
                                             : "fp16 weights, fp32 optimizer state, no master copy";
    case PREC_FP32: return "fp32";
    default: return "pure bf16";
    }
}

// Prints the counts and the naive memory breakdown for `g` to `out`.
static void report_compile(FILE *out, const char *path, const FtModel *m, const IrGraph *g,
                           const GpuPreset *gpu, int64_t budget) {
    char a[32], b[32], c[32];
    ParamCount pc = count_params(g);
    MemBreakdown mb = count_naive_memory(g, gpu->reserve_bytes);
    const TrainSpec *t = &m->train;
    fprintf(out, "ftc: %s: model %s, seq %lld, global batch %lld, micro-batch %lld, %s, %s\n",
            path, m->name, (long long)t->seq, (long long)t->batch, (long long)g->batch,
            precision_name(t), t->optimizer);
    if (t->lora)
        fprintf(out, "lora: r=%lld alpha=%g dropout=%g on %d target%s\n", (long long)t->lora_r,
                t->lora_alpha, t->lora_dropout, t->n_lora_targets, t->n_lora_targets == 1 ? "" : "s");
    fprintf(out, "\nparameters: %s in %lld tensors\n", commas(a, pc.total), (long long)pc.tensors);
    fprintf(out, "trainable params: %s || all params: %s || trainable%%: %.4f\n",
            commas(a, pc.trainable), commas(b, pc.total),
            pc.total ? 100.0 * (double)pc.trainable / (double)pc.total : 0.0);

    fprintf(out, "\nmemory of one step with no technique applied (micro-batch %lld x seq %lld):\n",
            (long long)g->batch, (long long)g->seq);
    fprintf(out, "  %-12s %22s %12s %12s\n", "category", "bytes", "GiB", "GB");
    static const MemCategory order[] = {MEM_WEIGHTS, MEM_GRADS, MEM_OPTIMIZER, MEM_MASTER,
                                        MEM_ACTIVATIONS, MEM_COUNT, MEM_IO, MEM_RESERVE};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        // MEM_COUNT marks the logits row: the logits and the loss's fp32 gradient
        int64_t v = order[i] == MEM_COUNT ? mb.logits_bytes : mb.bytes[order[i]];
        const char *name = order[i] == MEM_COUNT ? "logits" : mem_category_name(order[i]);
        fprintf(out, "  %-12s %22s %12.2f %12.2f\n", name, commas(a, v), (double)v / 0x1p30,
                (double)v / 1e9);
    }
    fprintf(out, "  %-12s %22s %12.2f %12.2f\n", "total", commas(a, mb.total),
            (double)mb.total / 0x1p30, (double)mb.total / 1e9);

    int64_t states = mb.bytes[MEM_WEIGHTS] + mb.bytes[MEM_GRADS] + mb.bytes[MEM_OPTIMIZER] +
                     mb.bytes[MEM_MASTER];
    fprintf(out, "\nmodel states (weights + grads + optimizer + master): %s bytes = %.2f GB, "
                 "%.2f bytes/param\n",
            commas(a, states), (double)states / 1e9, pc.total ? (double)states / (double)pc.total : 0.0);
    if (mb.total <= budget)
        fprintf(out, "budget %s bytes = %s (%s): fits, %s to spare\n", commas(b, budget),
                fe_gib(a, sizeof a, budget), gpu->name, fe_gib(c, sizeof c, budget - mb.total));
    else
        fprintf(out, "budget %s bytes = %s (%s): does not fit with no technique applied "
                     "(needs %s, %.1fx the budget)\n",
                commas(b, budget), fe_gib(a, sizeof a, budget), gpu->name,
                fe_gib(c, sizeof c, mb.total), (double)mb.total / (double)budget);
}

static int cmd_compile(Cmdline *cl, int argc, char **argv, int first) {
    const char *path = NULL, *gpu_name = "a100-40g", *outdir = NULL, *emit = NULL;
    int path_arg = 0, gpu_arg = 0, remat = -1, offload = -1;
    int64_t budget = 0, host = 0, micro = 0;
    bool dump_ir = false;
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            usage_compile(stdout);
            return 0;
        }
        bool takes = !strcmp(s, "--budget") || !strcmp(s, "--gpu") || !strcmp(s, "--micro-batch") ||
                     !strcmp(s, "-o") || !strcmp(s, "--remat") || !strcmp(s, "--offload") ||
                     !strcmp(s, "--host-mem") || !strcmp(s, "--emit-graph");
        if (takes && i + 1 >= argc) {
            arg_error(cl, i, "%s needs a value", s);
            return EXIT_USAGE;
        }
        if (!strcmp(s, "--budget") || !strcmp(s, "--host-mem")) {
            char why[160] = "";
            int64_t *dst = s[2] == 'b' ? &budget : &host;
            i++;
            if (fe_size_parse(argv[i], dst, why, sizeof why) != 0 || *dst <= 0) {
                arg_error(cl, i, "%s", why[0] ? why : "a size must be positive");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--gpu")) {
            gpu_name = argv[++i];
            gpu_arg = i;
        } else if (!strcmp(s, "--micro-batch")) {
            char *end;
            errno = 0;
            micro = strtoll(argv[++i], &end, 10);
            if (errno || *end || micro < 1) {
                arg_error(cl, i, "--micro-batch needs a positive integer");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "-o")) {
            outdir = argv[++i];
        } else if (!strcmp(s, "--emit-graph")) {
            emit = argv[++i];
        } else if (!strcmp(s, "--remat")) {
            i++;
            for (int p = REMAT_KEEP; p <= REMAT_SWAP; p++)
                if (strcmp(argv[i], remat_policy_name((RematPolicy)p)) == 0)
                    remat = p;
            if (remat < 0) {
                arg_error(cl, i, "--remat takes keep, selective, full or swap");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--offload")) {
            i++;
            static const char *lv[] = {"none", "optimizer", "grads"};
            for (int k = 0; k < 3; k++)
                if (strcmp(argv[i], lv[k]) == 0)
                    offload = k;
            if (offload < 0) {
                arg_error(cl, i, "--offload takes none, optimizer or grads");
                return EXIT_USAGE;
            }
        } else if (!strcmp(s, "--dump-ir")) {
            dump_ir = true;
        } else if (s[0] == '-' && s[1]) {
            arg_error(cl, i, "unknown option '%s' (see ftc help compile)", s);
            return EXIT_USAGE;
        } else if (path) {
            arg_error(cl, i, "one .ft file at a time (already have '%s')", path);
            return EXIT_USAGE;
        } else {
            path = s;
            path_arg = i;
        }
    }
    if (!path) {
        usage_compile(stderr);
        return EXIT_USAGE;
    }
    const GpuPreset *gpu = gpu_preset(gpu_name);
    if (!gpu) {
        int n;
        const GpuPreset *p = gpu_presets(&n);
        char list[256] = "";
        for (int i = 0; i < n; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", p[i].name);
        arg_error(cl, gpu_arg, "unknown GPU preset '%s' (one of: %s)", gpu_name, list);
        return EXIT_USAGE;
    }

    FtSource src;
    if (fe_source_read(&src, path) != 0) {
        arg_error(cl, path_arg, "cannot open '%s': %s", path, strerror(errno));
        return EXIT_NOFIT;
    }
    Arena *arena = arena_new();
    char *text = NULL, *rtext = NULL;
    size_t text_len = 0, rlen = 0;
    FILE *out = open_memstream(&text, &text_len), *rep = open_memstream(&rtext, &rlen);
    int rc = EXIT_NOFIT;
    bool show = false;   // print `out` even though the request failed (nothing fits)
    FtModel m;
    IrGraph *g = NULL, *naive = NULL;
    Ast *prog = fe_parse(&src, arena);
    if (!prog || fe_check(&src, prog, &m, arena) != 0)
        goto done;
    if (!budget)
        budget = m.train.budget_bytes ? m.train.budget_bytes : gpu->mem_bytes;
    if (!host)
        host = m.train.host_mem_bytes ? m.train.host_mem_bytes
                                      : (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE);
    if (!micro)
        micro = m.train.micro_batch;
    if (micro && m.train.batch % micro) {
        arg_error(cl, path_arg, "micro-batch %lld does not divide the global batch %lld",
                  (long long)micro, (long long)m.train.batch);
        goto done;
    }
    // The step with no technique applied: the whole global batch at once, all on the device.
    PlanChoice none = {micro ? micro : m.train.batch, REMAT_KEEP, 0, REMAT_KEEP, {false, false}, NULL};
    BuildStats bs;
    Arena *na = arena_new();
    naive = fe_elaborate(&src, &m, none.micro, na);
    if (naive && m.train.lora) {
        ir_graph_free(naive);
        arena_free(na);
        na = arena_new();
        naive = fe_build(&src, &m, &none, na, &bs, NULL);
    }
    if (!naive) {
        arena_free(na);
        goto done;
    }
    report_compile(out, path, &m, naive, gpu, budget);
    CompileOptions co = {.budget_bytes = budget, .host_bytes = host, .micro = micro,
                         .remat = remat, .offload = offload, .nlayers = ir_layers(naive),
                         .states = count_naive_memory(naive, 0)};
    ir_graph_free(naive);
    arena_free(na);
    naive = NULL;
    PlanChoice best;
    if (fe_compile_plan(&src, &m, gpu, &co, out, rep, &best) != 0) {
        show = true;   // the analysis of why nothing fits is the answer
        goto done;
    }
    g = fe_build(&src, &m, &best, arena, &bs, dump_ir ? out : NULL);
    if (!g)
        goto done;
    if (ir_verify(g, stderr) != 0) {
        fprintf(stderr, "%s: internal error: the IR failed verification\n", path);
        goto done;
    }
    char dir[4096], err[1024];
    if (emit) {   // the training graph before remat and offload, for external solvers
        Arena *ea = arena_new();
        PlanChoice plain = {best.micro, REMAT_KEEP, 0, REMAT_KEEP, {false, false}, NULL};
        BuildStats ebs;
        IrGraph *eg = fe_build(&src, &m, &plain, ea, &ebs, NULL);
        char tmp[4200];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", emit, (int)getpid());
        FILE *ef = eg ? fopen(tmp, "w") : NULL;
        bool ok = ef != NULL;
        if (ef) {
            ir_write_json(ef, eg);
            ok = !ferror(ef) & !fclose(ef) && rename(tmp, emit) == 0;
        }
        if (eg)
            ir_graph_free(eg);
        arena_free(ea);
        if (!ok) {
            unlink(tmp);
            fprintf(stderr, "ftc compile: error: cannot write %s\n", emit);
            goto done;
        }
    }
    if (outdir) {
        snprintf(dir, sizeof dir, "%s", outdir);
    } else {   // NAME.plan in the current directory
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        const char *dot = strrchr(base, '.');
        snprintf(dir, sizeof dir, "%.*s.plan", (int)(dot && dot != base ? dot - base : (long)strlen(base)), base);
    }
    fclose(rep);
    rep = NULL;
    static const char *prec[] = {"bf16", "fp16", "fp32", "bf16_pure"};
    PlanMeta meta = {.model = m.name, .source = path, .gpu = gpu->name, .budget_bytes = budget,
                     .accum = m.train.batch / best.micro, .precision = prec[m.train.precision],
                     .optimizer = m.train.optimizer, .lr = m.train.lr, .beta1 = m.train.beta1,
                     .beta2 = m.train.beta2, .eps = m.train.eps, .weight_decay = m.train.weight_decay,
                     .arena_bytes = bs.alloc.arena_bytes, .host_bytes = bs.alloc.host_bytes,
                     .reserve_bytes = gpu->reserve_bytes, .flops_per_s = gpu->bf16_tflops * 1e12,
                     .bytes_per_s = gpu->hbm_gbps * 1e9, .link_bytes_per_s = gpu->link_gbps * 1e9,
                     .report = rtext};
    char targets[1024] = "";
    if (m.train.lora) {   // the module names the adapters attach to, for adapter_config.json
        for (int i = 0; i < g->tensors.len; i++) {
            const char *hf = g->tensors.at[i].hf_name, *a = hf ? strstr(hf, ".lora_A.weight") : NULL;
            if (!a)
                continue;
            const char *s0 = a;
            while (s0 > hf && s0[-1] != '.')
                s0--;
            char mod[128];
            snprintf(mod, sizeof mod, "%.*s", (int)(a - s0), s0);
            bool seen = false;
            for (char *t = strstr(targets, mod); t; t = strstr(t + 1, mod))
                seen |= (t == targets || t[-1] == ',') && (t[strlen(mod)] == ',' || !t[strlen(mod)]);
            if (!seen)
                snprintf(targets + strlen(targets), sizeof targets - strlen(targets), "%s%s",
                         targets[0] ? "," : "", mod);
        }
        meta.lora_r = m.train.lora_r, meta.lora_alpha = m.train.lora_alpha;
        meta.lora_dropout = m.train.lora_dropout, meta.lora_targets = targets;
    }
    if (codegen_plan_dir(dir, g, &meta, err, sizeof err) != 0) {
        fprintf(stderr, "ftc compile: error: %s\n", err);
        goto done;
    }
    char a1[32], a2[32];
    fprintf(out, "\ndevice arena %s, liveness lower bound %s (%.2f%% above it)\n",
            fe_gib(a1, sizeof a1, bs.alloc.arena_bytes), fe_gib(a2, sizeof a2, bs.alloc.lower_bound),
            bs.alloc.lower_bound ? 100.0 * (double)(bs.alloc.arena_bytes - bs.alloc.lower_bound) /
                                       (double)bs.alloc.lower_bound
                                 : 0.0);
    fprintf(out, "plan: %s/plan (memory.txt, memory.html, report.txt beside it)\n", dir);
    rc = 0;
done:
    fclose(out);
    if (rep)
        fclose(rep);
    if (rc == 0 || show)
        fwrite(text, 1, text_len, stdout);
    free(text);
    free(rtext);
    if (g)
        ir_graph_free(g);
    arena_free(arena);
    fe_source_free(&src);
    return rc;
}

// Reads a non-negative integer option value; reports at argument i.
static bool arg_count(Cmdline *cl, int i, const char *v, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v || x < 0) {
        arg_error(cl, i, "'%s' needs a non-negative integer", cl->argv[i - 1]);
        return false;
    }
    *out = x;
    return true;
}

static int cmd_run(Cmdline *cl, int argc, char **argv, int first) {
    RunOptions o = {.steps = 10, .seed = 1234, .layout = LAYOUT_PLANNED, .out = stdout};
    int64_t v;
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        bool takes = strcmp(s, "--data") == 0 || strcmp(s, "--weights") == 0 ||
                     strcmp(s, "--steps") == 0 || strcmp(s, "--save") == 0 ||
                     strcmp(s, "--save-every") == 0 ||
                     strcmp(s, "--seed") == 0 || strcmp(s, "--device") == 0;
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            fputs("usage: ftc run DIR --data FILE [--weights PATH] [--steps N] [--save DIR]\n"
                  "                   [--save-every N] [--seed N] [--poison] [--unplanned] [--device cpu]\n"
                  "\n"
                  "  --data FILE       token file (ftc data makes one)\n"
                  "  --weights PATH    Hugging Face safetensors: a file, or a directory (sharded too);\n"
                  "                    without it, seeded initialisation\n"
                  "  --steps N         optimizer steps (default 10)\n"
                  "  --save DIR        write DIR/model.safetensors at the end (and every N steps with\n"
                  "                    --save-every N)\n"
                  "  --seed N          initialisation, data order and dropout (default 1234)\n"
                  "  --poison          fill each buffer with NaN when its lifetime ends\n"
                  "  --unplanned       every buffer its own allocation instead of the planned arena\n"
                  "  --merge           with LoRA: also save the merged weights (model.safetensors);\n"
                  "                    --save alone writes the adapters in PEFT's layout\n",
                  stdout);
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
            if (strcmp(argv[++i], "cpu") != 0) {
                arg_error(cl, i, "this build runs plans on the cpu only (--device cpu)");
                return EXIT_USAGE;
            }
        } else if (strcmp(s, "--poison") == 0)
            o.poison = true;
        else if (strcmp(s, "--unplanned") == 0)
            o.layout = LAYOUT_UNPLANNED;
        else if (strcmp(s, "--merge") == 0)
            o.merge = true;
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
        fputs("usage: ftc run DIR --data FILE [--weights PATH] [--steps N] [--save DIR] [--seed N]\n", stderr);
        return EXIT_USAGE;
    }
    return rt_train(&o);
}

static int cmd_data(Cmdline *cl, int argc, char **argv, int first) {
    const char *in = NULL, *out = NULL;
    int mode = -1, mode_arg = 0;
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--bytes") == 0 || strcmp(s, "--u16") == 0 || strcmp(s, "--u32") == 0) {
            if (mode >= 0) {
                arg_error(cl, i, "one of --bytes, --u16, --u32");
                return EXIT_USAGE;
            }
            mode = s[2] == 'b' ? DATA_BYTES : s[3] == '1' ? DATA_U16 : DATA_U32;
            mode_arg = i;
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
    (void)mode_arg;
    if (mode < 0 || !in || !out) {
        fputs("usage: ftc data (--bytes|--u16|--u32) FILE -o OUT.bin\n", stderr);
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
    fputs("usage: ftc inspect DIR [--at peak|N] [--buffer NAME] [--top K] [--json]\n"
          "\n"
          "  (no option)       the summary: budget, peak and where, breakdown, largest buffers,\n"
          "                    timeline (what DIR/memory.txt holds)\n"
          "  --at peak|N       what is live at the peak or at instruction N\n"
          "  --buffer NAME     one buffer: place, lifetime, the instructions touching it\n"
          "  --top K           how many buffers to list (default 20)\n"
          "  --json            everything, for programs (what DIR/memory.json holds)\n",
          f);
}

static int cmd_inspect(Cmdline *cl, int argc, char **argv, int first) {
    const char *dir = NULL, *at = NULL, *buffer = NULL;
    int64_t top = 20;
    bool json = false;
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

static int cmd_import(Cmdline *cl, int argc, char **argv, int first) {
    if (argc - first != 1 || argv[first][0] == '-') {
        if (argc - first == 1 && (strcmp(argv[first], "--help") == 0 || strcmp(argv[first], "-h") == 0)) {
            fputs("usage: ftc import CONFIG.json > MODEL.ft\n", stdout);
            return 0;
        }
        if (argc - first > 1)
            arg_error(cl, first + 1, "import takes one config.json");
        else
            fputs("usage: ftc import CONFIG.json > MODEL.ft\n", stderr);
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
        if (strcmp(argv[2], "compile") == 0)
            usage_compile(stdout), rc = 0;
        else if (strcmp(argv[2], "inspect") == 0)
            usage_inspect(stdout), rc = 0;
        else if (strcmp(argv[2], "import") == 0)
            fputs("usage: ftc import CONFIG.json > MODEL.ft\n", stdout), rc = 0;
        else
            arg_error(&cl, 2, "no such command '%s'", argv[2]), rc = EXIT_USAGE;
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
