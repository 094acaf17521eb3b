// plan_write.c — the plan file (format in runtime/plan.h) and the plan directory.
// Offsets and lifetimes come from the liveness and alloc passes.
#include "codegen.h"
#include "../runtime/fileio.h"
#include "../runtime/nvrtc.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_name(TensorKind k) {
    static const char *n[] = {"param", "input", "value", "grad", "state", "workspace", "quant", "cache"};
    return n[k];
}

static const char *init_name(IrInit i) {
    static const char *n[] = {"normal", "ones", "zeros", "kaiming_uniform"};
    return n[i];
}

static void shape_str(FILE *f, const IrTensor *t) {
    if (t->ndim == 0)
        fputc('-', f);
    for (int i = 0; i < t->ndim; i++)
        fprintf(f, "%s%lld", i ? "x" : "", (long long)t->shape[i]);
}

static void list(FILE *f, const char *key, const int *v, int n) {
    fprintf(f, " %s=", key);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%d", i ? "," : "", v[i]);
}

// The vocabulary: the logits' last dim, or with the loss fused the rows of its W.
static int64_t plan_vocab(const IrGraph *g) {
    int64_t vocab = 0;
    if (g->logits >= 0)
        vocab = g->tensors.at[g->logits].shape[g->tensors.at[g->logits].ndim - 1];
    for (int j = 0; j < g->nodes.len && !vocab; j++)
        if (op_desc(g->nodes.at[j].op)->cls == OPC_LOSS_GEMM)
            vocab = g->tensors.at[g->nodes.at[j].in[1]].shape[0];
    return vocab;
}

// The header's training settings: optimizer, schedule, loss scaling, the estimate, the
// host model, LoRA and the ranks.
static void write_settings(FILE *f, const IrGraph *g, const PlanMeta *meta) {
    fprintf(f, "optimizer %s lr=%.17g beta1=%.17g beta2=%.17g eps=%.17g weight_decay=%.17g\n",
            meta->optimizer, meta->lr, meta->beta1, meta->beta2, meta->eps, meta->weight_decay);
    fprintf(f, "schedule %s warmup=%lld steps=%lld min_lr=%.17g\n",
            meta->lr_schedule ? meta->lr_schedule : "constant", (long long)meta->warmup_steps,
            (long long)meta->steps, meta->min_lr);
    if (meta->scale_init > 0)
        fprintf(f, "loss_scale init=%.17g growth=%.17g backoff=%.17g interval=%lld\n", meta->scale_init,
                meta->scale_growth, meta->scale_backoff, (long long)meta->scale_interval);
    if (meta->model_flops > 0)
        fprintf(f, "estimate model_flops=%lld step_us=%.1f\n", (long long)meta->model_flops, meta->step_us);
    if (meta->host_cores > 0)
        fprintf(f, "host cores=%d adamw_per_core=%.6g link=%.6g adamw_holds=%.6g,%.6g link_holds=%.6g,%.6g\n",
                meta->host_cores, meta->host_adamw_per_core, meta->host_link, meta->adamw_lo,
                meta->adamw_hi, meta->link_lo, meta->link_hi);
    if (meta->lora_r > 0)
        fprintf(f, "lora r=%lld alpha=%.17g dropout=%.17g targets=%s%s\n", (long long)meta->lora_r,
                meta->lora_alpha, meta->lora_dropout, meta->lora_targets,
                g->lora_fan_in_fan_out ? " fan_in_fan_out=1" : "");
    fprintf(f, "ranks %d", g->ranks > 0 ? g->ranks : 1);
    if (meta->zero >= 0 && g->ranks > 1)
        fprintf(f, " zero=%d", meta->zero);
    if (meta->link && g->ranks > 1)
        fprintf(f, " link=%s", meta->link);
}

// The header, up to and including "buffers N".
static void write_header(FILE *f, const IrGraph *g, const PlanMeta *meta) {
    fprintf(f, "ftc-plan %d\n", PLAN_VERSION);
    fprintf(f, "# written by ftc compile from %s\n", meta->source);
    fprintf(f, "model %s\nsource %s\ngpu %s\nbudget %lld\nreserve %lld\n", meta->model, meta->source,
            meta->gpu, (long long)meta->budget_bytes, (long long)meta->reserve_bytes);
    fprintf(f, "seq %lld\nmicro_batch %lld\naccum %lld\nvocab %lld\nprecision %s\n",
            (long long)g->seq, (long long)g->batch, (long long)meta->accum, (long long)plan_vocab(g),
            meta->precision);
    if (g->packing)
        fprintf(f, "packing 1\n");
    if (g->pairs)
        fprintf(f, "pairs 1\n");
    write_settings(f, g, meta);
    fprintf(f, "\narena device %lld device\narena host %lld pinned\nevents %d\nbuffers %d\n",
            (long long)meta->arena_bytes, (long long)meta->host_bytes, g->events, g->tensors.len);
}

// The role the training loop knows tensor i by, or PR_NONE.
static PlanRole buffer_role(const IrGraph *g, int i) {
    PlanRole role = i == g->loss          ? PR_LOSS
                    : i == g->eval_loss   ? PR_EVAL_LOSS
                    : i == g->decode_logits ? PR_DECODE_LOGITS
                    : i == g->logits      ? PR_LOGITS
                    : i == g->grad_stats  ? PR_GRAD_STATS
                    : i == g->grad_factor ? PR_GRAD_FACTOR
                    : i == g->pref_stats  ? PR_PREF_STATS
                    : i == g->ref_out     ? PR_REF_OUT
                                          : PR_NONE;
    if (g->tensors.at[i].kind == TK_INPUT && !plan_role_parse(g->tensors.at[i].name, &role))
        role = PR_TOKENS;   // (the batch's inputs by name)
    return role;
}

// "buffer I NAME CATEGORY ARENA OFFSET BYTES DTYPE SHAPE FIRST LAST KEY=VALUE ...".
static void write_buffer(FILE *f, const IrGraph *g, int i) {
    const IrTensor *t = &g->tensors.at[i];
    int base = ir_tensor_base(g, i);
    const IrTensor *b = &g->tensors.at[base];
    IR_ASSERT(b->offset >= 0 || t->virt);
    fprintf(f, "buffer %d %s %s %s %lld %lld %s ", i, t->name, mem_category_name(t->cat),
            b->arena ? "host" : "device",
            (long long)(t->virt ? 0 : b->offset + (t->alias_of >= 0 ? t->alias_offset : 0)),
            (long long)ir_tensor_bytes(t), dtype_name(t->dtype));
    shape_str(f, t);
    int first = b->first < 0 ? 0 : b->first, last = b->last < 0 ? 0 : b->last;
    if (t->virt)   // live inside the fused instruction that makes it
        first = last = t->producer;
    fprintf(f, " %d %d kind=%s", first, last, kind_name(t->kind));
    if (t->virt)
        fprintf(f, " virtual=1");
    if (t->alias_of >= 0)
        fprintf(f, " view=%d", t->alias_of);
    if (t->alias_of >= 0 && t->alias_offset)
        fprintf(f, " at=%lld", (long long)t->alias_offset);
    if (t->reuse >= 0)
        fprintf(f, " reuse=%d", t->reuse);
    if (t->shard_of >= 0) {   // this rank's slice of a tensor of that shape
        fprintf(f, " shard=");
        shape_str(f, &g->tensors.at[t->shard_of]);
    }
    if (t->kind == TK_PARAM)
        fprintf(f, " hf=%s init=%s scale=%.17g train=%d", t->hf_name, init_name(t->init),
                t->init_scale, t->trainable ? 1 : 0);
    if (t->of >= 0)
        fprintf(f, " of=%d", t->of);
    if (t->kind == TK_PARAM && t->copy_of >= 0)
        fprintf(f, " copy_of=%d", t->copy_of);
    if (t->kind == TK_QUANT)
        fprintf(f, " role=%s", t->decl);
    if (t->layer >= 0)
        fprintf(f, " layer=%d", t->layer);
    PlanRole role = buffer_role(g, i);
    if (role != PR_NONE)
        fprintf(f, " role=%s", plan_role_name(role));
    fputc('\n', f);
}

// Node j's kernel launches and its place in a grouped launch (instr: node -> instruction).
static void write_launches(FILE *f, const KernelSet *ks, int j, const int *instr) {
    if (!ks || !ks->node)
        return;
    for (int l = 0; l < ks->node[j].n; l++) {
        const KernelLaunch *k = &ks->node[j].at[l];
        fprintf(f, " launch=%s:%u,%u,%u:%u,%u,%u", k->name, k->grid[0], k->grid[1],
                k->grid[2], k->block[0], k->block[1], k->block[2]);
        if (k->smem)
            fprintf(f, ":%u", k->smem);
    }
    if (ks->node[j].group)
        fprintf(f, " group=%d", ks->node[j].group);
    if (ks->node[j].by >= 0)
        fprintf(f, " by=%d", instr[ks->node[j].by]);
}

// Node j as instruction `id`, and the step lines of a fused one.
static void write_instr(FILE *f, const IrGraph *g, const KernelSet *ks, int j, int id, const int *instr) {
    const IrNode *n = &g->nodes.at[j];
    fprintf(f, "%d %s", id, op_desc(n->op)->name);
    const IrFused *fz = n->fused >= 0 ? &g->fused.at[n->fused] : NULL;
    if (fz)
        fprintf(f, " steps=%d", fz->n);
    list(f, "out", n->out, ir_node_nout(n));
    list(f, "in", n->in, n->nin);
    if (n->update)
        fprintf(f, " update=%u", n->update);
    char attrs[256];
    op_attr_format(attrs, sizeof attrs, n->op, &n->attr, true);
    fputs(attrs, f);
    if (n->stream != STREAM_COMPUTE)
        fprintf(f, " stream=%s", stream_name((Stream)n->stream));
    if (n->nwait > 0)
        list(f, "wait", n->wait, n->nwait);
    if (n->record >= 0)
        fprintf(f, " record=%d", n->record);
    if (n->ws >= 0)
        fprintf(f, " ws=%d", n->ws);
    write_launches(f, ks, j, instr);
    if (n->recompute)
        fprintf(f, " recompute=1");
    if (n->last)
        fprintf(f, " last=1");
    fprintf(f, " flops=%lld bytes=%lld", (long long)op_flops(g, n),
            (long long)(op_bytes_read(g, n) + op_bytes_written(g, n)));
    if (n->est_us > 0)
        fprintf(f, " us=%.2f", n->est_us);
    if (n->layer >= 0)
        fprintf(f, " layer=%d", n->layer);
    if (n->loc.line)
        fprintf(f, " loc=%d:%d", n->loc.line, n->loc.col);
    fputc('\n', f);
    for (int s = 0; fz && s < fz->n; s++) {
        const IrNode *st = &fz->step[s];
        fprintf(f, "  step %s out=%d", op_desc(st->op)->name, st->out[0]);
        list(f, "in", st->in, st->nin);
        op_attr_format(attrs, sizeof attrs, st->op, &st->attr, true);
        fprintf(f, "%s\n", attrs);
    }
}

// The phases: "phase NAME N" and the nodes of each in order (an empty eval or decode phase
// left out).
static void write_phases(FILE *f, const IrGraph *g, const KernelSet *ks) {
    static const char *phases[] = {"forward", "backward", "optimizer", "eval", "decode", "reference"};
    int nn = g->nodes.len;
    int *instr = xmalloc(sizeof(int) * (size_t)(nn + 1));   // node -> instruction id
    for (int ph = PHASE_FORWARD, i = 0; ph <= PHASE_REFERENCE; ph++)
        for (int j = 0; j < nn; j++)
            if (g->nodes.at[j].phase == (IrPhase)ph)
                instr[j] = i++;
    int i = 0;
    for (int ph = PHASE_FORWARD; ph <= PHASE_REFERENCE; ph++) {
        int count = 0;
        for (int j = 0; j < nn; j++)
            count += g->nodes.at[j].phase == (IrPhase)ph;
        if (ph >= PHASE_EVALUATION && count == 0)   // (the phases are optional)
            continue;
        fprintf(f, "phase %s %d\n", phases[ph], count);
        for (int j = 0; j < nn; j++)
            if (g->nodes.at[j].phase == (IrPhase)ph)
                write_instr(f, g, ks, j, i++, instr);
    }
    free(instr);
}

int codegen_plan_write(FILE *f, const IrGraph *g, const PlanMeta *meta, const KernelSet *ks) {
    write_header(f, g, meta);
    for (int i = 0; i < g->tensors.len; i++)
        write_buffer(f, g, i);
    write_phases(f, g, ks);
    fprintf(f, "end\n");
    return 0;
}

// Removes a directory of plain files (a plan directory we wrote).
// The files ftc compile writes in a plan directory; anything else there is the user's
// (weights saved beside the plan, notes) and is never deleted.
static bool own_file(const char *name) {
    static const char *const names[] = {"plan",        "kernels.cu",  "ftc_emu.h",  "kernels.txt",
                                        "memory.txt",  "memory.json", "memory.html", "trace.json",
                                        "report.txt",  "config.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    size_t n = strlen(name);   // kernels.sm_XX.cubin
    return strncmp(name, "kernels.sm_", 11) == 0 && n > 17 && strcmp(name + n - 6, ".cubin") == 0;
}

// Removes ftc's own files from dir, then dir if that left it empty.
static void remove_dir(const char *dir) { rt_remove_dir(dir, own_file); }

// Whether dir is a plan directory: its `plan` file starts as every plan does.
static bool is_plan_dir(const char *dir) {
    char path[4200], head[16] = "";
    snprintf(path, sizeof path, "%s/plan", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool ok = fgets(head, sizeof head, f) && strncmp(head, "ftc-plan ", 9) == 0;
    fclose(f);
    return ok;
}

// Moves the entries of `from` that are not ftc's own into `to` (up to max names, kept in
// moved[] for moving back); -1 with err when one cannot be moved (those moved went back).
static int move_foreign(const char *from, const char *to, char (*moved)[256], int max, int *nmoved,
                        char *err, size_t errlen) {
    *nmoved = 0;
    DIR *d = opendir(from);
    if (!d) {
        snprintf(err, errlen, "cannot read %s: %s", from, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || own_file(e->d_name))
            continue;
        char a[4400], b[4400];
        snprintf(a, sizeof a, "%s/%s", from, e->d_name);
        snprintf(b, sizeof b, "%s/%s", to, e->d_name);
        if (*nmoved == max || strlen(e->d_name) >= 256 || rename(a, b) != 0) {
            snprintf(err, errlen, "cannot keep %s while replacing the plan: %s", a,
                     *nmoved == max ? "too many files of one's own there" : strerror(errno));
            rc = -1;
        } else {
            snprintf(moved[(*nmoved)++], 256, "%s", e->d_name);
        }
    }
    closedir(d);
    if (rc != 0) {
        for (int i = 0; i < *nmoved; i++) {
            char a[4400], b[4400];
            snprintf(a, sizeof a, "%.4096s/%.255s", to, moved[i]);
            snprintf(b, sizeof b, "%.4096s/%.255s", from, moved[i]);
            rename(a, b);
        }
        *nmoved = 0;
    }
    return rc;
}

// The first entry of dir, or "" when it has none.
static void first_entry(const char *dir, char *name, size_t len) {
    *name = '\0';
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(name, len, "%s", e->d_name);
            break;
        }
    closedir(d);
}

// Removes what an ftc killed while writing DIR left beside it: DIR.tmp.PID and
// DIR.old.PID whose process is gone (only ftc's own files in them, as remove_dir does).
static void clean_leftovers(const char *dir) {
    static const char *const tags[] = {".tmp.", ".old."};
    rt_clean_leftovers(dir, tags, 2, false, remove_dir);
}

// Kernels in the order kernels.cu defines them: k0_..., k1_..., ...
static int by_kernel_number(const void *a, const void *b) {
    const NvrtcKernel *x = a, *y = b;
    long nx = strtol(x->name + (x->name[0] == 'k'), NULL, 10);
    long ny = strtol(y->name + (y->name[0] == 'k'), NULL, 10);
    return nx < ny ? -1 : nx > ny ? 1 : strcmp(x->name, y->name);
}

// The launch of kernel `name` (its first, where several nodes share it), or NULL; with g, its
// estimated time over a step's nodes whose work it does (their main launch: the others only
// prepare or finish it), a micro-step's nodes once per micro-step, the eval phase's not at
// all, in *us.
static const KernelLaunch *launch_of(const KernelSet *ks, const char *name, int nnodes,
                                     const IrGraph *g, int64_t accum, double *us) {
    const KernelLaunch *first = NULL;
    *us = 0;
    for (int i = 0; i < nnodes; i++)
        for (int l = 0; l < ks->node[i].n; l++)
            if (strcmp(ks->node[i].at[l].name, name) == 0) {
                first = first ? first : &ks->node[i].at[l];
                const IrNode *n = &g->nodes.at[i];
                if (n->phase < PHASE_EVALUATION && l == ks->node[i].main)
                    *us += n->est_us * (n->phase == PHASE_OPTIMIZER ? 1 : (double)accum);
            }
    return first;
}

// kernels.txt's table: per kernel ptxas' resources, the blocks and warps an SM of `arch` holds
// at its launch's size, and its PTX's facts (tensor-core instructions, ldmatrix, cp.async,
// global loads and stores by width, FP64); then the totals.
static void write_kernel_table(FILE *f, const KernelSet *ks, const NvrtcResult *r, const char *arch,
                               const IrGraph *g, int64_t accum) {
    fprintf(f, "%-28s %4s %6s %7s %6s %9s %4s %5s %5s %14s %14s %4s %6s %10s\n", "kernel", "regs", "smem",
            "threads", "blocks", "warps/SM", "mma", "ldmat", "cpasy", "loads 16/8/<=4", "stores 16/8/<=4",
            "fp64", "spills", "ms a step");
    double total_us = 0;
    int64_t spills = 0;
    int tensor = 0, fp64 = 0, wide = 0, with_loads = 0, async = 0;
    for (int k = 0; k < r->nkernels; k++) {
        const NvrtcKernel *kn = &r->kernels[k];
        const PtxFacts *x = &kn->ptx;
        double us;
        const KernelLaunch *l = launch_of(ks, kn->name, ks->nnodes, g, accum, &us);
        total_us += us;
        int threads = l ? (int)(l->block[0] * l->block[1] * l->block[2]) : 0;
        int64_t smem = kn->smem_bytes + (l ? l->smem : 0);
        int blocks = threads ? rt_sm_blocks(arch, kn->registers, threads, smem) : 0;
        char lw[32], sw[32];
        snprintf(lw, sizeof lw, "%d/%d/%d", x->load[2], x->load[1], x->load[0]);
        snprintf(sw, sizeof sw, "%d/%d/%d", x->store[2], x->store[1], x->store[0]);
        fprintf(f, "%-28s %4d %6lld %7d %6d %9d %4d %5d %5d %14s %14s %4d %6lld %10.3f\n", kn->name,
                kn->registers, (long long)smem, threads, blocks, blocks * ((threads + 31) / 32), x->mma,
                x->ldmatrix, x->cp_async, lw, sw, x->fp64,
                (long long)(kn->spill_store_bytes + kn->spill_load_bytes), us * 1e-3);
        spills += kn->spill_store_bytes + kn->spill_load_bytes;
        tensor += x->mma > 0;
        async += x->cp_async > 0 && x->ldmatrix > 0;
        fp64 += x->fp64 > 0;
        // per-element kernels: those over more than one block that read global memory by
        // loads (not a finishing reduction of one block; not a tiled one fed by cp.async)
        bool wide_grid = l && (uint64_t)l->grid[0] * l->grid[1] * l->grid[2] > 1;
        if (wide_grid && !x->cp_async && x->load[0] + x->load[1] + x->load[2] > 0) {
            with_loads++;
            wide += x->load[1] + x->load[2] > 0;
        }
    }
    fprintf(f, "\n%d kernels: %d on tensor cores (%d of them fed by cp.async and ldmatrix); %d of the %d "
               "per-element kernels (more than one block, loads from global memory) with vector (8- or "
               "16-byte) loads; %d with FP64 instructions\n%s\n", r->nkernels, tensor, async, wide,
            with_loads, fp64, spills ? "some kernels spill registers to local memory" : "no kernel spills");
    fprintf(f, "the generated kernels' estimated time: %.1f ms a step (the cost model's; a node of several "
               "launches counted on the one doing its work, the fused loss's with its GEMMs; other "
               "GEMMs, copies and host work are not generated kernels)\n",
            total_us * 1e-3);
}

// The CUBIN of kernels.cu for `arch` (DIR/kernels.ARCH.cubin) and the resource report of
// its kernels (DIR/kernels.txt), when NVRTC is at hand; else a report that says why
// there is none. -1 with err when the kernels do not compile (an internal error).
static int compile_kernels(const char *dir, const KernelSet *ks, const IrGraph *g, int64_t accum,
                           const char *arch, char *err,
                           size_t errlen) {
    NvrtcInfo info;
    char path[4200];
    snprintf(path, sizeof path, "%s/kernels.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    // $FTC_NO_CUBIN leaves the compile to ftc run, as a machine without NVRTC does: plans
    // made only to be read or run on the CPU skip NVRTC's second or so.
    const char *skip = getenv("FTC_NO_CUBIN");
    bool skipped = skip && *skip && strcmp(skip, "0") != 0;
    if (skipped || !rt_nvrtc_available(&info)) {
        fprintf(f, "kernels.cu: %d kernels; not compiled here (%s); ftc run compiles it on "
                   "the GPU's machine\n", ks->nkernels,
                skipped ? "$FTC_NO_CUBIN is set" : rt_nvrtc_load_error());
        return fclose(f) == 0 ? 0 : -1;
    }
    const char *opts[] = {"--fmad=false"};
    NvrtcResult r;
    char why[2048];
    if (rt_nvrtc_compile_cached(NULL, ks->source, "kernels.cu", arch, opts, 1, &r, why, sizeof why) != 0) {
        fclose(f);
        snprintf(err, errlen, "internal error: the generated kernels do not compile: %s", why);
        return -1;
    }
    fprintf(f, "kernels.cu: %d kernels, compiled for %s by NVRTC %d.%d%s\n\n", ks->nkernels, arch,
            info.major, info.minor, r.cache_hit ? " (from the cache)" : "");
    qsort(r.kernels, (size_t)r.nkernels, sizeof *r.kernels, by_kernel_number);
    write_kernel_table(f, ks, &r, arch, g, accum);
    int rc = ferror(f) | fclose(f);
    snprintf(path, sizeof path, "%s/kernels.%s.cubin", dir, arch);
    FILE *c = fopen(path, "wb");
    if (!c || fwrite(r.cubin, 1, r.cubin_bytes, c) != r.cubin_bytes || fclose(c) != 0)
        rc = -1;
    rt_nvrtc_result_free(&r);
    if (rc != 0)
        snprintf(err, errlen, "cannot write the kernels' CUBIN or report in %s", dir);
    return rc;
}

// Writes `text` to DIR/NAME; -1 with err.
static int write_text(const char *dir, const char *name, const char *text, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

// Whether the plan may go to dir: a new path, an empty directory or a plan directory;
// -1 with err for a file or a directory of something else.
int codegen_plan_dir_check(const char *dir, char *err, size_t errlen) {
    struct stat st;
    if (stat(dir, &st) != 0)
        return 0;
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "cannot write the plan to %s: it is a file, not a directory", dir);
        return -1;
    }
    char first[256];
    first_entry(dir, first, sizeof first);
    if (*first && !is_plan_dir(dir)) {
        snprintf(err, errlen, "%s is a directory that is not empty and holds no plan (it has %s); "
                 "ftc compile -o writes a new directory, an empty one or a plan directory", dir, first);
        return -1;
    }
    return 0;
}

// Puts the complete plan directory tmp in place of dir: an existing plan directory is
// renamed to old (and removed), the user's other files in it carried over to the new
// one; an empty directory or a new path just takes it. 0, or -1 with err (tmp removed).
static int swap_in(const char *dir, const char *tmp, const char *old, char *err, size_t errlen) {
    char why[1024];
    struct stat st;
    bool had = stat(dir, &st) == 0;
    enum { MAX_KEPT = 256 };
    static char kept[MAX_KEPT][256];
    int nkept = 0;
    if (had) {
        if (codegen_plan_dir_check(dir, err, errlen) != 0) {
            remove_dir(tmp);
            return -1;
        }
        if (move_foreign(dir, tmp, kept, MAX_KEPT, &nkept, err, errlen) != 0) {
            remove_dir(tmp);
            return -1;
        }
        if (rename(dir, old) != 0) {
            snprintf(err, errlen, "cannot replace %s: %s", dir, strerror(errno));
            move_foreign(tmp, dir, kept, MAX_KEPT, &nkept, why, sizeof why);
            remove_dir(tmp);
            return -1;
        }
    }
    if (rename(tmp, dir) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        if (had) {
            rename(old, dir);
            move_foreign(tmp, dir, kept, MAX_KEPT, &nkept, why, sizeof why);
        }
        remove_dir(tmp);
        return -1;
    }
    if (had)
        remove_dir(old);
    return 0;
}

// tmp/plan, the plan that launches the kernels of ks; -1 with err.
static int write_plan(const char *tmp, const IrGraph *g, const PlanMeta *meta, const KernelSet *ks,
                      char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/plan", tmp);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    codegen_plan_write(f, g, meta, ks);
    if (ferror(f) | fclose(f)) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

// The kernels in tmp: kernels.cu, the header that compiles it on the CPU (--device emu),
// its CUBIN and report where meta->arch asks; then the plan that launches them. -1 with err.
static int write_kernels_and_plan(const char *tmp, const IrGraph *g, const PlanMeta *meta, char *err,
                                  size_t errlen) {
    KernelSet ks;
    KernelHyper hyper = {meta->beta1, meta->beta2, meta->eps};
    if (codegen_kernels(g, &hyper, &ks, err, errlen) != 0)
        return -1;
    const char *emu = codegen_cuda_file("ftc_emu.h");
    int rc = 0;
    if (write_text(tmp, "kernels.cu", ks.source, err, errlen) != 0 ||
        (emu && write_text(tmp, "ftc_emu.h", emu, err, errlen) != 0) ||
        (meta->arch && compile_kernels(tmp, &ks, g, meta->accum, meta->arch, err, errlen) != 0) ||
        write_plan(tmp, g, meta, &ks, err, errlen) != 0)
        rc = -1;
    codegen_kernels_free(&ks);
    return rc;
}

// tmp/NAME holding `text` (report.txt: the compile's report; config.json: the model's),
// where there is one; -1 with err.
static int write_optional(const char *tmp, const char *name, const char *text, char *err, size_t errlen) {
    if (!text)
        return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *r = fopen(path, "w");
    if (!r || fputs(text, r) < 0 || fclose(r) != 0) {
        snprintf(err, errlen, "cannot write %s", path);
        return -1;
    }
    return 0;
}

// Reads tmp/plan back as the runtime will and verifies it independently of the
// allocator; then the report and the memory dumps beside it. -1 with err.
static int check_and_describe(const char *tmp, const PlanMeta *meta, char *err, size_t errlen) {
    char path[4200], why[1024];
    snprintf(path, sizeof path, "%s/plan", tmp);
    Plan *p = NULL;
    if (plan_load(&p, path, why, sizeof why) != 0) {
        snprintf(err, errlen, "internal error: the plan does not read back: %s", why);
        return -1;
    }
    int problems = plan_verify(p, stderr), rc = -1;
    MemMeta mm = {meta->budget_bytes, meta->reserve_bytes, meta->flops_per_s, meta->bytes_per_s,
                  meta->link_bytes_per_s, meta->comm_bytes_per_s, meta->comm_latency_us};
    if (problems)
        snprintf(err, errlen, "internal error: the plan failed verification (%d problems)", problems);
    else if (write_optional(tmp, "report.txt", meta->report, err, errlen) == 0 &&
             write_optional(tmp, "config.json", meta->hf_config, err, errlen) == 0)
        rc = codegen_dumps(tmp, p, &mm, err, errlen) != 0 ? -1 : 0;
    plan_free(p);
    return rc;
}

// Two compiles into one DIR take turns at the swap (a lock on the directory that
// holds it), so neither sees the other's rename half done.
static int swap_in_locked(const char *dir, const char *tmp, const char *old, char *err, size_t errlen) {
    char parent[4096];
    const char *slash = strrchr(dir, '/');
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - dir) + (slash == dir) : 1, slash ? dir : ".");
    int lk = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (lk >= 0)
        flock(lk, LOCK_EX);
    int rc = swap_in(dir, tmp, old, err, errlen);
    if (lk >= 0)
        close(lk);
    return rc;
}

int codegen_plan_dir(const char *dir, const IrGraph *g, const PlanMeta *meta, char *err,
                     size_t errlen) {
    char tmp[4096], old[4096];
    if (codegen_plan_dir_check(dir, err, errlen) != 0)
        return -1;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", dir, (int)getpid());
    snprintf(old, sizeof old, "%s.old.%d", dir, (int)getpid());
    remove_dir(tmp);
    if (mkdir(tmp, 0777) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (write_kernels_and_plan(tmp, g, meta, err, errlen) != 0 ||
        check_and_describe(tmp, meta, err, errlen) != 0) {
        remove_dir(tmp);
        return -1;
    }
    if (swap_in_locked(dir, tmp, old, err, errlen) != 0)
        return -1;
    clean_leftovers(dir);
    return 0;
}
