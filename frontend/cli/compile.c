// compile.c — ftc compile: its option table, the program read and checked, compile_plan
// (passes/compile.c: the whole computation), and the plan directory written from the
// result; compile_report.c prints it.
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <unistd.h>

typedef struct CompileArgs {
    CompileOptions o;
    const char *outdir, *emit;
} CompileArgs;

#define ARG(f) offsetof(CompileArgs, f)

static bool host_cores(void *args, const char *v, char *why, size_t cap) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || end == v || n < 1 || n > 65536)
        return snprintf(why, cap, "--host-cores needs a whole number of threads from 1 to 65536"), false;
    ((CompileArgs *)args)->o.hs.cores = (int)n;
    return true;
}

// A positive rate; with `units`, a k, M or G suffix multiplies.
static bool rate(const char *v, bool units, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end), unit = 1;
    if (units && *end && !end[1])
        unit = *end == 'k' ? 1e3 : *end == 'M' ? 1e6 : *end == 'G' ? 1e9 : 0, end += unit > 0;
    if (errno || end == v || *end || !isfinite(x) || x <= 0)
        return false;
    *out = x * unit;
    return true;
}

static bool host_adamw(void *args, const char *v, char *why, size_t cap) {
    if (rate(v, true, &((CompileArgs *)args)->o.hs.adamw_per_core))
        return true;
    return snprintf(why, cap, "--host-adamw needs a positive rate in parameters per second (200M, 1.5G)"), false;
}

static bool host_link(void *args, const char *v, char *why, size_t cap) {
    if (rate(v, false, &((CompileArgs *)args)->o.hs.link_gbps))
        return true;
    return snprintf(why, cap, "--host-link needs a positive rate in GB/s (25, 12.5)"), false;
}

// --remat tensors:K1xN1+...+K into *t: whole numbers, each N at least 1, at most
// TENSOR_GROUPS groups, the last without N (the blocks left), each K optionally with
// ^I,J,... (at most TENSOR_FLIPS). Whether it reads so.
static bool tensors_spec(const char *s, TensorsSpec *t) {
    t->n = 0;
    for (;;) {
        char *end;
        errno = 0;
        long k = strtol(s, &end, 10), n = -1;
        if (end == s || errno || k < 0 || k > 1 << 20 || t->n == TENSOR_GROUPS || !isdigit((unsigned char)*s))
            return false;
        t->nflip[t->n] = 0;
        for (char sep = '^'; *end == sep; sep = ',') {
            s = end + 1;
            long f = strtol(s, &end, 10);
            if (end == s || errno || f < 0 || f > 1 << 20 || t->nflip[t->n] == TENSOR_FLIPS || !isdigit((unsigned char)*s))
                return false;
            t->flip[t->n][t->nflip[t->n]++] = (int)f;
        }
        if (*end == 'x') {
            s = end + 1;
            n = strtol(s, &end, 10);
            if (end == s || errno || *end != '+' || n < 1 || n > 1 << 20)
                return false;
        }
        t->kept[t->n] = (int)k, t->blocks[t->n] = (int)n, t->n++;
        if (n < 0)
            return *end == '\0';
        s = end + 1;
    }
}

// --tile T or T1xN1+...+T into o.tile: whole numbers, each T and N at least 1, at most
// TILE_GROUPS groups, the last without N (the blocks left).
static bool tile(void *args, const char *v, char *why, size_t cap) {
    TileSpec *t = &((CompileArgs *)args)->o.tile;
    snprintf(t->text, sizeof t->text, "%s", v);
    t->n = 0;
    for (const char *s = v;;) {
        char *end;
        errno = 0;
        long long k = strtoll(s, &end, 10), n = -1;
        if (end == s || errno || k < 1 || k > 1 << 30 || t->n == TILE_GROUPS || !isdigit((unsigned char)*s))
            break;
        if (*end == 'x') {
            s = end + 1;
            n = strtoll(s, &end, 10);
            if (end == s || errno || *end != '+' || n < 1 || n > 1 << 20 || !isdigit((unsigned char)*s))
                break;
        }
        t->tiles[t->n] = k, t->blocks[t->n] = (int)n, t->n++;
        if (n < 0 && *end == '\0')
            return true;
        if (n < 0)
            break;
        s = end + 1;
    }
    t->n = 0;
    return snprintf(why, cap, "--tile takes a positive tile count N (every block's) or TxN+T2 (the first N "
                    "blocks T tiles, the rest T2; more groups TxN+ before the last; 1: untiled)"), false;
}

static bool remat(void *args, const char *v, char *why, size_t cap) {
    CompileOptions *o = &((CompileArgs *)args)->o;
    o->remat = -1;
    for (int p = REMAT_KEEP; p <= REMAT_SWAP; p++)
        if (strcmp(v, remat_policy_name((RematPolicy)p)) == 0)
            o->remat = p;
    if (o->remat < 0 && !strncmp(v, "tensors:", 8) && tensors_spec(v + 8, &o->tensors))
        o->remat = REMAT_TENSORS;
    if (o->remat >= 0)
        return true;
    return snprintf(why, cap, "--remat takes keep, selective, full, swap, or tensors:K (every block keeps K "
                    "of its tensors, along the planner's chain) or tensors:KxN+J (the first N blocks K, "
                    "the rest J; more groups KxN+ before the last; K^I,J,... flips candidates I, J from the chain's mask)"), false;
}

static bool dump_ir(void *args, const char *v, char *why, size_t cap) {
    (void)v, (void)why, (void)cap;
    ((CompileArgs *)args)->o.dump_after = "all";
    return true;
}

static bool dump_after(void *args, const char *v, char *why, size_t cap) {
    int n;
    const char *const *stages = pipeline_stages(&n);
    char list[256] = "";
    for (int k = 0; k < n; k++) {
        if (strcmp(v, stages[k]) == 0)
            return ((CompileArgs *)args)->o.dump_after = v, true;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", stages[k]);
    }
    return snprintf(why, cap, "unknown pass '%s' (one of: %s)", v, list), false;
}

static void gpu_list(FILE *f) {
    int n;
    const GpuPreset *p = gpu_presets(&n);
    for (int i = 0; i < n; i++)
        fprintf(f, " %s", p[i].name);
}

static const char *const offload_levels[] = {"none", "optimizer", "grads", "weights", NULL};
static const char *const update_when[] = {"step", "backward", NULL};
static const char *const zero_stages[] = {"0", "1", "2", "3", NULL};

static const Option compile_opts[] = {
    OPT(OPT_SIZE, "--budget", "SIZE", ARG(o.budget), "device memory the step must fit (default, and at most: the "
     "card's\nmemory as it reports it, the preset's)", .lo = 1),
    OPT(OPT_SIZE, "--host-mem", "SIZE", ARG(o.host), "host memory for offloaded state (default: this machine's RAM)",
     .lo = 1),
    OPT(OPT_TEXT, "--gpu", "PRESET", ARG(o.gpu), "GPU preset (default a100-40g):", .more = gpu_list),
    OPT(OPT_SIZE, "--reserve", "SIZE", ARG(o.reserve), "the card's memory no plan can have (default: the preset's: "
     "what\nthe driver keeps below the card's total, 512M for the context,\n64M for the kernels and cuBLASLt; "
     "a100-40g 1197M)", .lo = 0),
    SECTION("The training host, for the cost model (defaults: a typical training server):"),
    OPT(OPT_CALL, "--host-cores", "N", 0, "threads the CPU AdamW runs on (default 32)", .call = host_cores),
    OPT(OPT_CALL, "--host-adamw", "RATE", 0, "fp32 AdamW parameters per second per core, every core busy\n"
     "(default 200M; k, M, G multiply by 10^3, 10^6, 10^9)", .call = host_adamw),
    OPT(OPT_CALL, "--host-link", "GBPS", 0, "host-device link, GB/s each way (default: the preset's)",
     .call = host_link),
    SECTION("Output:"),
    OPT(OPT_TEXT, "-o", "DIR", ARG(outdir), "the plan directory to write (default: NAME.plan, NAME the file's stem)"),
    OPT(OPT_CALL, "--dump-ir", NULL, 0, "print the IR after each pass of the chosen plan", .call = dump_ir),
    OPT(OPT_CALL, "--dump-after", "PASS", 0, "print the IR after one pass of the chosen plan: elaborate, lora,\n"
     "tile, fuse_loss, autodiff, quantize, chunk_loss, remat, eval, decode,\nshard, offload, fuse, early_update, schedule, "
     "buckets, liveness, alloc or\nstreams", .call = dump_after),
    OPT(OPT_TEXT, "--emit-graph", "FILE", ARG(emit), "write the training graph (FLOPs, bytes, edges) as JSON to FILE"),
    OPT(OPT_FLAG, "--time-passes", NULL, ARG(o.time_passes), "print the time spent in each pass, over every "
     "candidate planned"),
    OPT(OPT_FLAG, "--exhaustive", NULL, ARG(o.exhaustive), "place every candidate and skip no search by its bound "
     "(slower: the\nreference the bound-first search must match)"),
    OPT(OPT_FLAG, "--no-fusion", NULL, ARG(o.no_fusion), "give every op a kernel of its own (the fuse pass does "
     "nothing)"),
    OPT(OPT_FLAG, "--unfused-loss", NULL, ARG(o.unfused_loss), "keep the projection to the logits and the loss two "
     "ops (the full\nlogits exist; the loss's backward still works in row chunks)"),
    OPT(OPT_COUNT, "--max-len", "N", ARG(o.max_len), "the longest sequence ftc generate runs (prompt and reply): "
     "the\ndecode phase's KV cache holds N tokens (default: the train section's\nseq; 0: no decode phase)",
     .lo = 0, .hi = 1 << 24, .bad = "--max-len needs a token count from 0 to 16777216"),
    OPT(OPT_FLAG, "--grad-temporaries", NULL, ARG(o.grad_temporaries), "each weight gradient's GEMM writes a "
     "temporary that an acc adds\ninto the gradient (the plan without beta = 1, for comparison)"),
    SECTION("Several GPUs:"),
    OPT(OPT_COUNT, "--ranks", "N", ARG(o.ranks), "plan one rank of a data-parallel job of N (one process a GPU, "
     "started\nwith mpirun -np N or srun -n N): the global batch splits over the\nranks, the ZeRO stage shards "
     "optimizer state (1), gradients (2) and\nparameters (3) across them, collectives run on a stream of their "
     "own", .lo = 1, .hi = 65536, .bad = "--ranks needs a rank count from 1 to 65536"),
    OPT(OPT_TEXT, "--link", "PRESET", ARG(o.link), "the link between ranks, for the collectives' time: nvlink "
     "(default\nup to 8 ranks, one node), pcie, ib (default beyond 8)"),
    SECTION("The planner chooses these; each fixes one:"),
    OPT(OPT_COUNT, "--micro-batch", "N", ARG(o.micro), "sequences per micro-batch (the rest of the global batch "
     "accumulates)", .lo = 1, .bad = "--micro-batch needs a positive integer"),
    OPT(OPT_CALL, "--remat", "P", 0, "keep, selective, full (recompute from the block's input), swap\n(full, with "
     "the block's input waiting in host memory) in every block,\nor tensors:K (every block keeps K of its "
     "tensors, the rest recomputed:\nthe first K along the planner's chain, which drops one at a time) or\n"
     "tensors:KxN+J (the first N blocks K, the later ones J; more groups\nKxN+ before the last, up to 64): the "
     "report's\n\"tensors (K of M kept a block xN + J xR ...)\" as it chose them", .call = remat),
    OPT(OPT_CHOICE, "--offload", "L", ARG(o.offload), "none, optimizer (moments and master weights on the host, CPU "
     "AdamW),\ngrads (the gradients too; with several ranks, from --zero 2) or\nweights (the weight matrices "
     "too: LoRA's frozen bases, else all;\neach streamed to the device a block ahead of its use; one rank)",
     .choices = offload_levels, .bad = "--offload takes none, optimizer, grads or weights"),
    OPT(OPT_CHOICE, "--update", "W", ARG(o.update), "step (every update after the whole backward) or backward "
     "(each\nparameter's update as soon as its gradient is complete, which then\ndies: one micro-step, no clip, "
     "no loss scale, one rank, offload none)", .choices = update_when,
     .bad = "--update takes step (after the whole backward) or backward (each parameter's as soon as its "
            "gradient is complete)"),
    OPT(OPT_CHOICE, "--zero", "Z", ARG(o.zero), "with --ranks: the ZeRO stage, 0 (data parallel) to 3",
     .choices = zero_stages, .bad = "--zero takes 0, 1, 2 or 3"),
    OPT(OPT_COUNT, "--loss-chunk", "N", ARG(o.loss_chunk), "rows of logits the fused loss forms at a time (a "
     "divisor of\nmicro-batch x seq; the largest at most N)", .lo = 1,
     .bad = "--loss-chunk needs a positive number of rows"),
    OPT(OPT_CALL, "--tile", "SPEC", 0, "sequence tiles: each block's per-token work after its attention\n"
     "(projections, norms, MLP, LoRA paths, residual adds) runs on N\nslices of seq / N tokens, so a block's "
     "working set is a tile's\n(N divides seq; 1: none); TxN+T2: the first N blocks T, the rest T2\n"
     "(more groups TxN+ before the last)", .call = tile),
};

// Where the plan goes: -o, else NAME.plan in the current directory ("out.plan/" names
// out.plan). Checked before planning (a file, or a directory of other things, is refused).
static int plan_dir(Cmdline *cl, const Parsed *p, const char *outdir, const char *path, char *dir, size_t cap) {
    char err[1024];
    if (outdir) {
        snprintf(dir, cap, "%s", outdir);
        for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--)
            dir[n - 1] = '\0';
    } else {
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        const char *dot = strrchr(base, '.');
        snprintf(dir, cap, "%.*s.plan", (int)(dot && dot != base ? dot - base : (long)strlen(base)), base);
    }
    if (codegen_plan_dir_check(dir, err, sizeof err) == 0)
        return 0;
    if (outdir)
        arg_error(cl, parsed_at(&cmd_compile, p, "-o"), "%s", err);
    else
        fprintf(stderr, "ftc compile: error: %s\n", err);
    return EXIT_NOFIT;
}

// The options the train section gives where the command line does not.
static void from_program(CompileOptions *o, const FtModel *m, DriverSource *ds, const DriverModes *dm,
                         PassDiag *diag, Arena *a) {
    const TrainSpec *t = &m->train;
    o->program = driver_program(ds, a);
    o->train = (CompileTrain){t->batch, t->seq, t->clip, t->precision == PREC_FP16,
                              t->optimizer == OPTIM_ADAMW8BIT};
    o->modes = dm->program, o->nmodes = dm->n;
    if (!o->budget)
        o->budget = t->budget_bytes;
    if (!o->host)
        o->host = t->host_mem_bytes;
    if (!o->micro)
        o->micro = t->micro_batch;
    o->verify = driver_verify();
    o->diag = diag;
}

// A refusal compile_plan explains, pointed at its option (or the file) where it names one
// (cl NULL: no command line, the file's name then).
static void refused(Cmdline *cl, const Parsed *p, const CompileResult *r, const char *path) {
    if (!r->why[0])
        return;
    int at = !r->bad || !cl ? 0 : strcmp(r->bad, "FILE") == 0 ? p->positional_at : parsed_at(&cmd_compile, p, r->bad);
    if (at > 0)
        arg_error(cl, at, "%s", r->why);
    else if (r->bad && cl)
        fprintf(stderr, "ftc compile: error: %s\n", r->why);
    else
        fprintf(stderr, "%s: %s\n", path, r->why);
}

// The training graph before remat and offload, as JSON, for external solvers.
static bool emit_graph(const char *path, const IrGraph *g) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = g ? fopen(tmp, "w") : NULL;
    bool ok = f != NULL;
    if (f) {
        ir_write_json(f, g);
        ok = !ferror(f) & !fclose(f) && rename(tmp, path) == 0;
    }
    if (!ok) {
        unlink(tmp);
        fprintf(stderr, "ftc compile: error: cannot write %s\n", path);
    }
    return ok;
}

// The plan's header: the result's figures, the train section's, the host's.
static PlanMeta plan_meta(const CompileResult *r, const FtModel *m, const CompileOptions *o, const char *path,
                          const char *report, const char *hf_config) {
    const LinkPreset *link = r->link;
    PlanMeta meta = {.model = m->name, .source = path, .gpu = r->gpu.name, .arch = r->gpu.arch,
                     .budget_bytes = r->budget, .accum = r->accum,
                     .zero = o->ranks > 1 ? r->best.zero : -1, .link = link ? link->name : NULL,
                     .comm_bytes_per_s = link ? link->gbps * 1e9 : 0,
                     .comm_latency_us = link ? link->latency_us : 0,
                     .arena_bytes = r->stats.alloc.arena_bytes, .host_bytes = r->stats.alloc.host_bytes,
                     .reserve_bytes = r->reserve, .flops_per_s = r->gpu.bf16_tflops * 1e12,
                     .bytes_per_s = r->gpu.hbm_gbps * 1e9, .link_bytes_per_s = r->pc.cm.link_bytes_per_s,
                     .host_cores = o->hs.cores, .host_adamw_per_core = o->hs.adamw_per_core,
                     .host_link = r->pc.cm.link_bytes_per_s, .adamw_lo = r->holds.adamw_lo,
                     .adamw_hi = r->holds.adamw_hi, .link_lo = r->holds.link_lo, .link_hi = r->holds.link_hi,
                     .report = report, .hf_config = hf_config, .model_flops = r->cost.model_flops, .step_us = r->cost.step_us};
    driver_meta_train(&meta, &m->train);
    if (m->train.lora) {
        meta.lora_r = m->train.lora_r, meta.lora_alpha = m->train.lora_alpha;
        meta.lora_dropout = m->train.lora_dropout, meta.lora_targets = r->adapters;
    }
    return meta;
}

// What ftc compile prints, into `out`: the report, the planner's text (also into
// `report`, report.txt's), the IR dumps asked for (`dumps`), and the plan's last lines.
static int finish(const CompileResult *r, CompileStatus st, const CompileArgs *a, const FtModel *m,
                  const DriverModes *dm, const RefChoice *refs, const char *path, const char *dir, FILE *out,
                  const char *dumps, const char *hf_config) {
    char *rtext = NULL, err[1024];
    size_t rlen = 0;
    FILE *rep = open_memstream(&rtext, &rlen);
    report_compile(out, path, m, r);
    report_modes(out, m, dm, r);
    report_planner(out, r, m, &a->o.hs);
    report_planner(rep, r, m, &a->o.hs);
    report_references(out, refs, m->train.reference);
    report_references(rep, refs, m->train.reference);
    fclose(rep);
    int rc = 0;
    if (st == COMPILE_NOFIT) {
        report_nofit(out, r, m);
        rc = EXIT_NOFIT;
    } else if (a->emit && !emit_graph(a->emit, r->plain)) {
        rc = EXIT_NOFIT;
    } else {
        PlanMeta meta = plan_meta(r, m, &a->o, path, rtext, hf_config);
        if (codegen_plan_dir(dir, r->graph, &meta, err, sizeof err) != 0) {
            fprintf(stderr, "ftc compile: error: %s\n", err);
            rc = EXIT_NOFIT;
        }
        fputs(dumps, out);
        report_plan_written(out, r, dir, a->o.time_passes);
    }
    free(rtext);
    return rc;
}

// The model's Hugging Face config.json (fe_hf_config), for the plan to carry; NULL for a
// model of no family ftc import writes (a save from it says so).
static char *hf_config(FtSource *src, const FtModel *m, Arena *a) {
    char *text = NULL, why[512];
    size_t len = 0;
    IrGraph *g = fe_elaborate(src, m, m->train.pref_kind >= 0 ? 2 : 1, a);   // (pairs: two rows)
    FILE *f = g ? open_memstream(&text, &len) : NULL;
    bool ok = f && fe_hf_config(m, g, f, why, sizeof why) == 0;
    if (f)
        ok &= fclose(f) == 0;
    if (g)
        ir_graph_free(g);
    if (!ok)
        free(text);
    return ok ? text : NULL;
}

// Plans the checked program `m` and writes the plan; the exit status. What ftc compile
// prints goes to stdout; with cl NULL (compile_quietly) nothing, unless nothing fits: then
// the analysis, to stderr.
// The reference's time in a step: its phase's (reference = precomputed) instructions,
// once for each micro-batch of a step (the pass covers every window once an epoch).
static double reference_pass_us(const CompileResult *r) {
    double us = 0;
    for (int i = 0; r->graph && i < r->graph->nodes.len; i++)
        if (r->graph->nodes.at[i].phase == PHASE_REFERENCE)
            us += r->graph->nodes.at[i].est_us;
    return us * (double)r->accum;
}

// With reference = auto, the program planned with each way its loss's reference can be had
// (the base without LoRA where it has LoRA, a frozen copy, a pass before training): the
// fastest plan that fits, the pass's time counted, ties (within 1%) to the earlier (lora_off,
// copy, precomputed: less to hold and nothing to run first). The variants into rc; the chosen
// way, or REF_AUTO when there is nothing to choose.
static RefMode choose_reference(CompileArgs *a, FtSource *src, const FtModel *m, const DriverModes *dm,
                                Arena *arena, RefChoice *rc) {
    *rc = (RefChoice){.chosen = -1};
    if (m->train.reference != REF_AUTO)
        return REF_AUTO;
    const RefMode modes[] = {REF_LORA_OFF, REF_COPY, REF_PRECOMPUTED};
    FILE *dump_to = a->o.dump_to;
    bool emit = a->o.emit_graph;
    a->o.dump_to = NULL, a->o.emit_graph = false;
    for (int i = 0; i < 3; i++) {
        if (modes[i] == REF_LORA_OFF && !m->train.lora)
            continue;
        FtModel mm = *m;
        mm.train.reference = modes[i];
        DriverSource ds = {src, &mm};
        PassDiag diag = driver_diag(src);
        from_program(&a->o, &mm, &ds, dm, &diag, arena);
        CompileResult *r = malloc(sizeof *r);
        CompileStatus st = r ? compile_plan(&a->o, r) : COMPILE_REFUSED;
        RefOption *o = &rc->opt[rc->n++];
        *o = (RefOption){.mode = modes[i], .planned = st == COMPILE_OK || st == COMPILE_NOFIT, .fits = st == COMPILE_OK};
        int at = !r ? -1 : st == COMPILE_OK ? r->search.best : r->search.smallest;
        o->planned &= at >= 0;   // (nothing tried: not even the model states fit)
        if (o->planned) {
            const Candidate *c = &r->search.tried.at[at];
            o->device = c->o.device_bytes, o->host = c->o.host_bytes, o->micro = c->c.micro;
            o->step_us = st == COMPILE_OK ? r->cost.step_us : c->o.cost.step_us;
            o->pass_us = st == COMPILE_OK ? reference_pass_us(r) : 0;
        }
        if (o->fits && (rc->chosen < 0 || o->step_us + o->pass_us <
                                              0.99 * (rc->opt[rc->chosen].step_us + rc->opt[rc->chosen].pass_us)))
            rc->chosen = rc->n - 1;
        if (r)
            compile_result_free(r);
        free(r);
    }
    a->o.dump_to = dump_to, a->o.emit_graph = emit;
    return rc->chosen >= 0 ? rc->opt[rc->chosen].mode : m->train.lora ? REF_LORA_OFF : REF_COPY;
}

static int plan_program(Cmdline *cl, const Parsed *p, CompileArgs *a, FtSource *src, const FtModel *m,
                        const char *dir, Arena *arena) {
    const char *path = cl ? p->positional : src->path;
    DriverSource ds = {src, m};
    DriverModes *dm = malloc(sizeof *dm);
    if (!dm)
        return fprintf(stderr, "ftc: out of memory\n"), EXIT_NOFIT;
    driver_modes(dm, src, m, arena);
    PassDiag diag = driver_diag(src);
    char *dumps = NULL, *text = NULL;
    size_t dlen = 0, tlen = 0;
    FILE *dump_to = open_memstream(&dumps, &dlen), *out = open_memstream(&text, &tlen);
    a->o.dump_to = dump_to;
    a->o.emit_graph = a->emit != NULL;
    RefChoice refs;
    FtModel chosen = *m;   // (with reference = auto: the way chosen)
    RefMode mode = choose_reference(a, src, m, dm, arena, &refs);
    if (mode != REF_AUTO)
        chosen.train.reference = mode, m = &chosen, ds.m = &chosen;
    from_program(&a->o, m, &ds, dm, &diag, arena);
    CompileResult *r = malloc(sizeof *r);
    int rc = EXIT_NOFIT;
    CompileStatus st = r ? compile_plan(&a->o, r) : COMPILE_REFUSED;
    fclose(dump_to);
    if (r && (st == COMPILE_OK || st == COMPILE_NOFIT)) {
        char *config = st == COMPILE_OK ? hf_config(src, m, arena) : NULL;
        rc = finish(r, st, a, m, dm, &refs, path, dir, out, dumps, config);
        free(config);
        fclose(out);
        if (st == COMPILE_NOFIT || (rc == 0 && cl))   // (nothing fits: the analysis is the answer)
            fwrite(text, 1, tlen, cl ? stdout : stderr);
    } else {
        fclose(out);
        if (r)
            refused(cl, p, r, path);
        rc = st == COMPILE_USAGE ? EXIT_USAGE : EXIT_NOFIT;
    }
    if (r)
        compile_result_free(r);
    free(r);
    free(dm);
    free(dumps);
    free(text);
    return rc;
}

// ftc compile's options before its command line: each the planner's or the train section's.
static CompileArgs compile_defaults(void) {
    return (CompileArgs){.o = {.hs = host_default(), .reserve = -1, .ranks = 1, .zero = -1, .remat = -1,
                               .offload = -1, .update = -1, .max_len = -1}};
}

int compile_quietly(FtSource *src, int64_t max_len, const char *dir) {
    CompileArgs a = compile_defaults();
    a.o.max_len = max_len;
    char err[1024];
    if (codegen_plan_dir_check(dir, err, sizeof err) != 0)
        return fprintf(stderr, "ftc: error: %s\n", err), EXIT_NOFIT;
    Arena *arena = arena_new();
    FtModel m;
    Ast *prog = fe_parse(src, arena);
    int rc = !prog || fe_check(src, prog, &m, arena) != 0 ? EXIT_NOFIT
                                                          : plan_program(NULL, NULL, &a, src, &m, dir, arena);
    arena_free(arena);
    return rc;
}

static int compile_main(Cmdline *cl, int first) {
    CompileArgs a = compile_defaults();
    Parsed p;
    int rc = parse_options(cl, first, &cmd_compile, &a, &p);
    if (rc)
        return rc < 0 ? 0 : rc;
    char dir[4096];
    if ((rc = plan_dir(cl, &p, a.outdir, p.positional, dir, sizeof dir)) != 0)
        return rc;
    FtSource src;
    if (fe_source_read(&src, p.positional) != 0) {
        arg_error(cl, p.positional_at, "cannot open '%s': %s", p.positional, strerror(errno));
        return EXIT_NOFIT;
    }
    Arena *arena = arena_new();
    FtModel m;
    Ast *prog = fe_parse(&src, arena);
    rc = !prog || fe_check(&src, prog, &m, arena) != 0 ? EXIT_NOFIT
                                                       : plan_program(cl, &p, &a, &src, &m, dir, arena);
    arena_free(arena);
    fe_source_free(&src);
    return rc;
}

const Command cmd_compile = {
    "compile", "FILE.ft", "counts, the memory of one training step, and the plan", "one .ft file", true,
    compile_opts, (int)(sizeof compile_opts / sizeof compile_opts[0]),
    "Exit status 1 when nothing fits: the smallest plan and what would fit are printed.\n", compile_main};
