// dumps.c — the memory schedule, for people and for tools, computed from the plan
// itself (so `ftc inspect` and `ftc compile` print the same thing): memory.txt,
// memory.json, memory.html (self-contained SVG, nothing fetched) and trace.json
// (Chrome/Perfetto). Live bytes count each buffer that owns bytes over its lifetime; a
// buffer written in place over another counts from the instruction after it takes over.
#include "codegen.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *cat_names[MV_CATS] = {
    "weights", "grads", "optimizer", "master", "activations", "recompute",
    "temporaries", "workspace", "io", "reserve", "kv_cache", "reference", "other"};

static const char *cat_colors[MV_CATS] = {
    "#4e79a7", "#f28e2b", "#e15759", "#b07aa1", "#59a14f", "#9c755f",
    "#edc948", "#bab0ac", "#76b7b2", "#555555", "#86bcb6", "#a0cbe8", "#ff9da7"};

static const char cat_letters[MV_CATS + 1] = "WGOMARTXIZKF?";

int mv_category(const char *name) {
    for (int c = 0; c < MV_CATS - 1; c++)
        if (strcmp(name, cat_names[c]) == 0)
            return c;
    return MV_CATS - 1;
}

const char *mv_category_name(int c) { return cat_names[c]; }

static bool owns(const PlanBuffer *b) { return b->view < 0 && b->bytes > 0; }

// The instructions over which b's bytes are counted.
static int count_from(const PlanBuffer *b) { return b->first + (b->reuse >= 0 ? 1 : 0); }

// Live bytes per instruction and category of the buffers in arena `a`; the peak.
static void live_of(const Plan *p, int n, PlanArena a, int64_t *live, int64_t *total, int64_t *peak,
                    int *peak_at) {
    int64_t *delta = xcalloc((size_t)(n + 1) * MV_CATS, sizeof(int64_t));
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (!owns(b) || b->arena != a || count_from(b) > b->last)
            continue;
        int c = mv_category(b->category);
        delta[(size_t)count_from(b) * MV_CATS + c] += b->bytes;
        delta[(size_t)(b->last + 1) * MV_CATS + c] -= b->bytes;
    }
    int64_t run[MV_CATS] = {0};
    *peak = 0, *peak_at = 0;
    for (int i = 0; i < n; i++) {
        for (int c = 0; c < MV_CATS; c++) {
            run[c] += delta[(size_t)i * MV_CATS + c];
            live[(size_t)i * MV_CATS + c] = run[c];
            total[i] += run[c];
        }
        if (total[i] > *peak)
            *peak = total[i], *peak_at = i;
    }
    free(delta);
}

int mv_init(MemView *v, const Plan *p) {
    memset(v, 0, sizeof *v);
    v->p = p;
    v->n = plan_instr_count(p);
    int n = v->n > 0 ? v->n : 1;
    v->live = xcalloc((size_t)n * MV_CATS, sizeof(int64_t));
    v->total = xcalloc((size_t)n, sizeof(int64_t));
    v->hlive = xcalloc((size_t)n * MV_CATS, sizeof(int64_t));
    v->htotal = xcalloc((size_t)n, sizeof(int64_t));
    live_of(p, v->n, ARENA_DEVICE, v->live, v->total, &v->peak, &v->peak_at);
    live_of(p, v->n, ARENA_HOST, v->hlive, v->htotal, &v->hpeak, &v->hpeak_at);
    for (int ph = 0, base = 0; ph < PHASE_COUNT; base += p->nins[ph], ph++) {
        v->phase_peak_at[ph] = -1;
        for (int i = base; i < base + p->nins[ph]; i++)
            if (v->phase_peak_at[ph] < 0 || v->total[i] > v->phase_peak[ph])
                v->phase_peak[ph] = v->total[i], v->phase_peak_at[ph] = i;
    }
    return 0;
}

void mv_free(MemView *v) {
    free(v->live);
    free(v->total);
    free(v->hlive);
    free(v->htotal);
    memset(v, 0, sizeof *v);
}

static const char *gib(char *buf, int64_t b) { return fmt_bytes(buf, 32, b); }

#define OPNAME(in) op_desc((in)->op)->name

static void shape(FILE *f, const PlanBuffer *b) {
    fputc('[', f);
    for (int d = 0; d < b->ndim; d++)
        fprintf(f, "%s%lld", d ? ", " : "", (long long)b->shape[d]);
    fputc(']', f);
}

static void instr_desc(FILE *f, const Plan *p, int id) {
    const PlanInstr *in = plan_instr(p, id);
    fprintf(f, "instruction %d (%s %s", id, plan_phase_name(plan_instr_phase(p, id)), OPNAME(in));
    if (in->nout > 0)
        fprintf(f, " -> %s", p->buf[in->out[0]].name);
    if (in->line)
        fprintf(f, ", .ft line %d", in->line);
    fputc(')', f);
}

static int by_bytes_desc(const void *x, const void *y, void *ctx) {
    const Plan *p = ctx;
    int a = *(const int *)x, b = *(const int *)y;
    int64_t ba = p->buf[a].bytes, bb = p->buf[b].bytes;
    return ba != bb ? (ba < bb ? 1 : -1) : a - b;   // ties in id order
}

// Buffers sorted by bytes, largest first (ids into p->buf).
static int *largest(const Plan *p, int *count) {
    int *ids = xmalloc(sizeof(int) * (size_t)(p->nbuf + 1)), n = 0;
    for (int i = 0; i < p->nbuf; i++)
        if (owns(&p->buf[i]))
            ids[n++] = i;
    qsort_r(ids, (size_t)n, sizeof(int), by_bytes_desc, (void *)p);
    *count = n;
    return ids;
}

// The `top` largest buffers of arena `a` live at instruction `at` (ids: largest first).
static void live_list(FILE *f, const Plan *p, const int *ids, int n, int at, PlanArena a, int top) {
    char s[32];
    for (int k = 0, shown = 0; k < n && shown < top; k++) {
        const PlanBuffer *x = &p->buf[ids[k]];
        if (count_from(x) > at || x->last < at || x->arena != a)
            continue;
        fprintf(f, "    %-44s %-12s %12s  %s ", x->name, x->category, gib(s, x->bytes),
                plan_dtype_name(x->dtype));
        shape(f, x);
        fprintf(f, "  [%d, %d]\n", x->first, x->last);
        shown++;
    }
}

void mv_print_at(FILE *f, const MemView *v, int at, int top) {
    const Plan *p = v->p;
    char a[32], b[32];
    if (at < 0 || at >= v->n) {
        fprintf(f, "no instruction %d (the plan has %d)\n", at, v->n);
        return;
    }
    fprintf(f, "live at ");
    instr_desc(f, p, at);
    fprintf(f, ": %s\n", gib(a, v->total[at]));
    for (int c = 0; c < MV_CATS; c++) {
        int64_t x = v->live[(size_t)at * MV_CATS + c];
        if (x)
            fprintf(f, "  %-12s %12s  %5.1f%%\n", cat_names[c], gib(b, x),
                    100.0 * (double)x / (double)(v->total[at] ? v->total[at] : 1));
    }
    int n, *ids = largest(p, &n);
    fprintf(f, "  largest device buffers live there:\n");
    live_list(f, p, ids, n, at, ARENA_DEVICE, top);
    if (p->arena_bytes[ARENA_HOST] > 0) {
        fprintf(f, "on the host at instruction %d: %s of the %s pinned arena\n", at, gib(a, v->htotal[at]),
                gib(b, p->arena_bytes[ARENA_HOST]));
        for (int c = 0; c < MV_CATS; c++) {
            int64_t x = v->hlive[(size_t)at * MV_CATS + c];
            if (x)
                fprintf(f, "  %-12s %12s  %5.1f%%\n", cat_names[c], gib(b, x),
                        100.0 * (double)x / (double)(v->htotal[at] ? v->htotal[at] : 1));
        }
        fprintf(f, "  largest host buffers live there:\n");
        live_list(f, p, ids, n, at, ARENA_HOST, top);
    }
    free(ids);
}

int mv_print_buffer(FILE *f, const MemView *v, const char *name) {
    const Plan *p = v->p;
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (strcmp(b->name, name) != 0)
            continue;
        char a[32];
        fprintf(f, "buffer %s\n  category %s, %s ", b->name, b->category, plan_dtype_name(b->dtype));
        shape(f, b);
        fprintf(f, ", %lld bytes (%s)\n", (long long)b->bytes, gib(a, b->bytes));
        const PlanBuffer *base = b->view >= 0 ? &p->buf[b->view] : b;
        fprintf(f, "  %s arena, offset %lld", base->arena == ARENA_DEVICE ? "device" : "host",
                (long long)base->offset);
        if (b->view >= 0)
            fprintf(f, " (a view of %s)", base->name);
        if (b->reuse >= 0)
            fprintf(f, " (written in place over %s)", p->buf[b->reuse].name);
        fprintf(f, "\n  lives from instruction %d to %d\n", base->first, base->last);
        if (b->hf)
            fprintf(f, "  checkpoint name %s%s\n", b->hf, b->trainable ? ", trainable" : ", frozen");
        fprintf(f, "  touched by:\n");
        for (int id = 0; id < v->n; id++) {
            const PlanInstr *in = plan_instr(p, id);
            for (int k = 0; k < in->nin + in->nout; k++) {
                int x = k < in->nin ? in->in[k] : in->out[k - in->nin];
                if (x != i)
                    continue;
                fprintf(f, "    %s ", k < in->nin ? "read by   " : "written by");
                instr_desc(f, p, id);
                fputc('\n', f);
                break;
            }
        }
        return 0;
    }
    fprintf(f, "no buffer named %s\n", name);
    return -1;
}

// The `top` largest buffers of arena `a`, with their lifetimes (ids: largest first).
static void largest_table(FILE *f, const Plan *p, const int *ids, int n, PlanArena a, int top) {
    char s[32];
    fprintf(f, "  %-44s %-12s %12s  %-9s %s\n", "name", "category", "bytes", "lifetime", "shape");
    for (int k = 0, shown = 0; k < n && shown < top; k++) {
        const PlanBuffer *x = &p->buf[ids[k]];
        if (x->arena != a)
            continue;
        char life[32];
        snprintf(life, sizeof life, "%d..%d", x->first, x->last);
        fprintf(f, "  %-44s %-12s %12s  %-9s %s ", x->name, x->category, gib(s, x->bytes), life,
                plan_dtype_name(x->dtype));
        shape(f, x);
        fputc('\n', f);
        shown++;
    }
}

// The host arena's own view: its size and peak, by category there, its largest buffers.
static void host_txt(FILE *f, const MemView *v) {
    const Plan *p = v->p;
    char a[32], b[32];
    if (p->arena_bytes[ARENA_HOST] <= 0)
        return;
    fprintf(f, "\nhost memory (the pinned host arena: offloaded state, swapped activations, staging)\n");
    fprintf(f, "host arena    %s\n", gib(a, p->arena_bytes[ARENA_HOST]));
    fprintf(f, "peak live     %s at ", gib(b, v->hpeak));
    instr_desc(f, p, v->hpeak_at);
    fprintf(f, "\n\non the host at its peak, by category\n");
    for (int k = 0; k < MV_CATS; k++) {
        int64_t x = v->hlive[(size_t)v->hpeak_at * MV_CATS + k];
        if (x)
            fprintf(f, "  %-12s %12s  %5.1f%%\n", cat_names[k], gib(a, x),
                    100.0 * (double)x / (double)(v->hpeak ? v->hpeak : 1));
    }
    int n, *ids = largest(p, &n), nh = 0;
    for (int k = 0; k < n; k++)
        nh += p->buf[ids[k]].arena == ARENA_HOST;
    fprintf(f, "\nthe %d largest host buffers\n", nh < 10 ? nh : 10);
    largest_table(f, p, ids, n, ARENA_HOST, 10);
    free(ids);
}

void mv_write_txt(FILE *f, const MemView *v, const MemMeta *m) {
    const Plan *p = v->p;
    char a[32], b[32], c[32];
    int64_t device = p->arena_bytes[ARENA_DEVICE];
    fprintf(f, "memory schedule of %s (micro-batch %lld x seq %lld, accumulation %lld)\n",
            p->model, (long long)p->micro_batch, (long long)p->seq, (long long)p->accum);
    if (p->ranks > 1) {
        int colls = 0;
        for (int i = 0; i < v->n; i++)
            colls += op_desc(plan_instr(p, i)->op)->cls == OPC_COLLECTIVE;
        fprintf(f, "one rank of %d", p->ranks);
        if (p->zero >= 0)
            fprintf(f, " (ZeRO-%d)", p->zero);
        fprintf(f, ": every figure below is a rank's; %d collectives on the comm stream%s%s\n", colls,
                p->link ? " over " : "", p->link ? p->link : "");
    }
    fputc('\n', f);
    fprintf(f, "budget        %s (%lld bytes)\n", gib(a, m->budget_bytes), (long long)m->budget_bytes);
    fprintf(f, "device arena  %s, plus %s context reserve = %s: %s\n", gib(a, device),
            gib(b, m->reserve_bytes), gib(c, device + m->reserve_bytes),
            device + m->reserve_bytes <= m->budget_bytes ? "fits" : "DOES NOT FIT");
    fprintf(f, "peak live     %s at ", gib(a, v->peak));
    instr_desc(f, p, v->peak_at);
    fprintf(f, "\nlower bound   %s (the most bytes live at one instruction); arena is %.2f%% above it\n",
            gib(a, v->peak), v->peak ? 100.0 * (double)(device - v->peak) / (double)v->peak : 0.0);
    fprintf(f, "\npeak by phase\n");
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        if (v->phase_peak_at[ph] >= 0)
            fprintf(f, "  %-10s %12s at instruction %d%s\n", plan_phase_name((PlanPhase)ph),
                    gib(a, v->phase_peak[ph]), v->phase_peak_at[ph],
                    ph == PHASE_EVAL     ? "  (between steps, when asked: forward only, nothing saved)"
                    : ph == PHASE_DECODE ? "  (ftc generate: one token over the KV cache, apart from training)"
                    : ph == PHASE_REF    ? "  (the reference model over the data, before the first step)"
                                         : "");
    fprintf(f, "\nat the peak, by category\n");
    for (int k = 0; k < MV_CATS; k++) {
        int64_t x = v->live[(size_t)v->peak_at * MV_CATS + k];
        if (x)
            fprintf(f, "  %-12s %12s  %5.1f%%\n", cat_names[k], gib(a, x),
                    100.0 * (double)x / (double)(v->peak ? v->peak : 1));
    }
    int n, *ids = largest(p, &n);
    int nd = 0;
    for (int k = 0; k < n; k++)
        nd += p->buf[ids[k]].arena == ARENA_DEVICE;
    fprintf(f, "\nthe %d largest device buffers\n", nd < 20 ? nd : 20);
    largest_table(f, p, ids, n, ARENA_DEVICE, 20);
    free(ids);
    // The timeline: one row per slice of instructions, its peak as a bar of letters.
    int rows = v->n < 48 ? v->n : 48, width = 64;
    fprintf(f, "\ntimeline (each row a slice of instructions, its most live bytes; each character "
               "%s)\n", gib(a, (v->peak + width - 1) / width));
    fprintf(f, "  W weights  G grads  O optimizer  M master  A activations  R recompute  "
               "T temporaries  X workspace  I io\n");
    for (int r = 0; r < rows; r++) {
        int lo = (int)((int64_t)r * v->n / rows), hi = (int)((int64_t)(r + 1) * v->n / rows);
        int at = lo;
        for (int i = lo; i < hi; i++)
            if (v->total[i] > v->total[at])
                at = i;
        fprintf(f, "  %6d %-9s %10s |", lo, plan_phase_name(plan_instr_phase(p, at)), gib(a, v->total[at]));
        double per = (double)(v->peak ? v->peak : 1) / width, acc = 0;
        int drawn = 0;
        for (int k = 0; k < MV_CATS; k++) {
            acc += (double)v->live[(size_t)at * MV_CATS + k];
            int upto = (int)floor(acc / per + 0.5);
            for (; drawn < upto && drawn < width; drawn++)
                fputc(cat_letters[k], f);
        }
        fprintf(f, "%s\n", lo <= v->peak_at && v->peak_at < hi ? "  <- peak" : "");
    }
    host_txt(f, v);
}

// "name": {"weights": [bytes per instruction], ...} of one arena.
static void live_json(FILE *f, const char *name, const int64_t *live, int n) {
    fprintf(f, "  \"%s\": {\n", name);
    for (int c = 0; c < MV_CATS; c++) {
        fprintf(f, "    \"%s\": [", cat_names[c]);
        for (int i = 0; i < n; i++)
            fprintf(f, "%s%lld", i ? "," : "", (long long)live[(size_t)i * MV_CATS + c]);
        fprintf(f, "]%s\n", c + 1 < MV_CATS ? "," : "");
    }
    fprintf(f, "  }");
}

void mv_write_json(FILE *f, const MemView *v, const MemMeta *m) {
    const Plan *p = v->p;
    fprintf(f, "{\n  \"model\": ");
    ir_json_str(f, p->model);
    fprintf(f, ",\n  \"budget_bytes\": %lld,\n  \"reserve_bytes\": %lld,\n  \"peak_bytes\": %lld,\n"
               "  \"peak_instruction\": %d,\n  \"lower_bound_bytes\": %lld,\n"
               "  \"arena_bytes\": {\"device\": %lld, \"host\": %lld},\n",
            (long long)m->budget_bytes, (long long)m->reserve_bytes, (long long)v->peak, v->peak_at,
            (long long)v->peak, (long long)p->arena_bytes[ARENA_DEVICE],
            (long long)p->arena_bytes[ARENA_HOST]);
    // The cost model's estimate, what a measured step is compared with (MFU is
    // model_flops / measured seconds / peak_flops_per_s); absent from an older plan.
    if (p->model_flops > 0)
        fprintf(f, "  \"estimate\": {\"peak_flops_per_s\": %.6g, \"model_flops\": %lld, "
                   "\"tokens_per_step\": %lld, \"step_us\": %.1f},\n",
                m->flops_per_s, (long long)p->model_flops,
                (long long)(p->seq * p->micro_batch * p->accum), p->est_step_us);
    fprintf(f, "  \"phases\": [");
    for (int ph = 0, base = 0; ph < PHASE_COUNT; base += p->nins[ph], ph++)
        fprintf(f, "%s{\"name\": \"%s\", \"first\": %d, \"count\": %d, \"peak_bytes\": %lld}",
                ph ? ", " : "", plan_phase_name((PlanPhase)ph), base, p->nins[ph],
                (long long)v->phase_peak[ph]);
    fprintf(f, "],\n  \"categories\": [");
    for (int c = 0; c < MV_CATS; c++)
        fprintf(f, "%s\"%s\"", c ? ", " : "", cat_names[c]);
    fprintf(f, "],\n  \"buffers\": [\n");
    bool first = true;
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        const PlanBuffer *base = b->view >= 0 ? &p->buf[b->view] : b;
        if (b->virt)   // a fused kernel's intermediate: never in memory
            continue;
        fprintf(f, "%s    {\"id\": %d, \"name\": ", first ? "" : ",\n", i);
        first = false;
        ir_json_str(f, b->name);
        fprintf(f, ", \"category\": \"%s\", \"arena\": \"%s\", \"offset\": %lld, \"bytes\": %lld, "
                   "\"first\": %d, \"last\": %d, \"dtype\": \"%s\", \"shape\": [",
                b->category, base->arena == ARENA_DEVICE ? "device" : "host", (long long)base->offset,
                (long long)(b->view >= 0 ? 0 : b->bytes), base->first, base->last,
                plan_dtype_name(b->dtype));
        for (int d = 0; d < b->ndim; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)b->shape[d]);
        fprintf(f, "]");
        if (b->view >= 0)
            fprintf(f, ", \"view_of\": %d", b->view);
        if (b->reuse >= 0)
            fprintf(f, ", \"reuses\": %d", b->reuse);
        fprintf(f, "}");
    }
    fprintf(f, "\n");
    fprintf(f, "  ],\n  \"instructions\": [\n");
    for (int id = 0; id < v->n; id++) {
        const PlanInstr *in = plan_instr(p, id);
        fprintf(f, "    {\"id\": %d, \"op\": \"%s\", \"phase\": \"%s\", \"layer\": %d, \"line\": %d}%s\n",
                id, OPNAME(in), plan_phase_name(plan_instr_phase(p, id)), in->layer, in->line,
                id + 1 < v->n ? "," : "");
    }
    fprintf(f, "  ],\n");
    live_json(f, "live_bytes", v->live, v->n);
    fprintf(f, ",\n  \"host_peak_bytes\": %lld,\n  \"host_peak_instruction\": %d,\n", (long long)v->hpeak,
            v->hpeak_at);
    live_json(f, "host_live_bytes", v->hlive, v->n);
    fprintf(f, "\n}\n");
}

static void xml_str(FILE *f, const char *s) {
    for (; *s; s++)
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

enum { HTML_W = 1100, HTML_H = 420, HTML_H2 = 220, HTML_L = 70 };   // plot sizes, left margin

// A coordinate with two decimals, as "%.2f" writes it (but rounding halves away from
// zero): the plots have tens of thousands, and a float conversion in printf costs more
// than all the rest of the page.
static void put_xy(FILE *f, double v) {
    char buf[32], *p = buf + sizeof buf;
    long long c = llround(v * 100);
    bool neg = c < 0;
    unsigned long long u = neg ? (unsigned long long)-c : (unsigned long long)c;
    *--p = (char)('0' + u % 10), u /= 10;
    *--p = (char)('0' + u % 10), u /= 10;
    *--p = '.';
    do
        *--p = (char)('0' + u % 10), u /= 10;
    while (u);
    if (neg)
        *--p = '-';
    fwrite(p, 1, (size_t)(buf + sizeof buf - p), f);
}

// Address over time in arena `a`: each buffer owning bytes there a rectangle
// (instructions x offsets).
static void svg_addr(FILE *f, const MemView *v, PlanArena a, const char *id) {
    const Plan *p = v->p;
    char s[32];
    const double W = HTML_W, H = HTML_H, L = HTML_L;
    int n = v->n > 0 ? v->n : 1;
    int64_t arena = p->arena_bytes[a] > 0 ? p->arena_bytes[a] : 1;
    double xs = W / n;
    int peak_at = a == ARENA_DEVICE ? v->peak_at : v->hpeak_at;
    fprintf(f, "<svg id=\"%s\" class=\"addr\" width=\"%.0f\" height=\"%.0f\" "
               "xmlns=\"http://www.w3.org/2000/svg\">\n", id, W + L + 10, H + 30);
    fprintf(f, "<g transform=\"translate(%.0f,5)\">\n<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" "
               "fill=\"#fafafa\" stroke=\"#ccc\"/>\n", L, W, H);
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *x = &p->buf[i];
        if (!owns(x) || x->arena != a)
            continue;
        double x0 = x->first * xs, w = (x->last - x->first + 1) * xs;
        double y1 = H - (double)x->offset / (double)arena * H;
        double h = (double)x->bytes / (double)arena * H;
        fputs("<rect class=\"buf\" x=\"", f);
        put_xy(f, x0);
        fputs("\" y=\"", f);
        put_xy(f, y1 - h);
        fputs("\" width=\"", f);
        put_xy(f, w > 0.4 ? w : 0.4);
        fputs("\" height=\"", f);
        put_xy(f, h > 0.3 ? h : 0.3);
        fprintf(f, "\" fill=\"%s\" data-n=\"", cat_colors[mv_category(x->category)]);
        xml_str(f, x->name);
        fprintf(f, "\" data-c=\"%s\" data-s=\"%s ", x->category, plan_dtype_name(x->dtype));
        fputc('[', f);
        for (int d = 0; d < x->ndim; d++)
            fprintf(f, "%s%lld", d ? ", " : "", (long long)x->shape[d]);
        fprintf(f, "]\" data-b=\"%lld\" data-l=\"%d..%d\" data-o=\"%lld\"><title>", (long long)x->bytes,
                x->first, x->last, (long long)x->offset);
        xml_str(f, x->name);
        fprintf(f, " (%s, %s, instructions %d..%d)</title></rect>\n", x->category, gib(s, x->bytes),
                x->first, x->last);
    }
    fprintf(f, "<line class=\"peak\" x1=\"%.2f\" y1=\"0\" x2=\"%.2f\" y2=\"%.0f\"/>\n",
            (peak_at + 0.5) * xs, (peak_at + 0.5) * xs, H);
    fprintf(f, "<text x=\"-6\" y=\"%.0f\" text-anchor=\"end\">0</text>"
               "<text x=\"-6\" y=\"12\" text-anchor=\"end\">%s</text>"
               "<text x=\"0\" y=\"%.0f\">instruction 0</text>"
               "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"end\">%d</text>\n",
            H, gib(s, arena), H + 18, W, H + 18, v->n - 1);
    fprintf(f, "</g></svg>\n");
}

// Live bytes of one arena stacked by category over time.
static void svg_cats(FILE *f, const MemView *v, const int64_t *live, int64_t peak, int peak_at) {
    char s[32];
    const double W = HTML_W, H2 = HTML_H2, L = HTML_L;
    int n = v->n > 0 ? v->n : 1;
    double xs = W / n;
    fprintf(f, "<svg class=\"cats\" width=\"%.0f\" height=\"%.0f\" "
               "xmlns=\"http://www.w3.org/2000/svg\">\n<g transform=\"translate(%.0f,5)\">\n",
            W + L + 10, H2 + 30, L);
    int step = v->n > 2000 ? v->n / 2000 : 1;
    double ys = H2 / (double)(peak ? peak : 1);
    for (int c = MV_CATS - 1; c >= 0; c--) {   // draw from the top of the stack down
        fprintf(f, "<path fill=\"%s\" d=\"M0,%.0f", cat_colors[c], H2);
        for (int i = 0; i < v->n;) {   // a step per run of equal heights
            int64_t below = 0;
            for (int k = 0; k <= c; k++)
                below += live[(size_t)i * MV_CATS + k];
            int end = i + step;
            for (; end < v->n; end += step) {
                int64_t next = 0;
                for (int k = 0; k <= c; k++)
                    next += live[(size_t)end * MV_CATS + k];
                if (next != below)
                    break;
            }
            fputs(" L", f), put_xy(f, i * xs), fputc(',', f), put_xy(f, H2 - below * ys);
            fputs(" L", f), put_xy(f, end * xs), fputc(',', f), put_xy(f, H2 - below * ys);
            i = end;
        }
        fprintf(f, " L%.0f,%.0f Z\"><title>%s</title></path>\n", W, H2, cat_names[c]);
    }
    fprintf(f, "<line class=\"peak\" x1=\"%.2f\" y1=\"0\" x2=\"%.2f\" y2=\"%.0f\"/>\n",
            (peak_at + 0.5) * xs, (peak_at + 0.5) * xs, H2);
    fprintf(f, "<text x=\"-6\" y=\"12\" text-anchor=\"end\">%s</text></g></svg>\n", gib(s, peak));
}

// What one arena's peak is made of, largest category first, and its largest buffers
// live there: the answer to "why this much".
static void peak_story(FILE *f, const MemView *v, const int64_t *live, int64_t peak, int at, PlanArena a) {
    const Plan *p = v->p;
    char s[32];
    fprintf(f, "<p>At the peak:");
    bool used[MV_CATS] = {0};
    for (int r = 0; r < MV_CATS; r++) {
        int best = -1;
        for (int k = 0; k < MV_CATS; k++)
            if (!used[k] && (best < 0 || live[(size_t)at * MV_CATS + k] > live[(size_t)at * MV_CATS + best]))
                best = k;
        int64_t x = live[(size_t)at * MV_CATS + best];
        used[best] = true;
        if (!x)
            break;
        fprintf(f, "%s <span style=\"color:%s\">&#9632;</span> %s %s (%.1f%%)", r ? "," : "",
                cat_colors[best], cat_names[best], gib(s, x), 100.0 * (double)x / (double)(peak ? peak : 1));
    }
    int nl, *ids = largest(p, &nl), shown = 0;
    fprintf(f, ".<br>Largest %s buffers live there:", a == ARENA_DEVICE ? "device" : "host");
    for (int k = 0; k < nl && shown < 5; k++) {
        const PlanBuffer *x = &p->buf[ids[k]];
        if (x->arena != a || count_from(x) > at || x->last < at)
            continue;
        fprintf(f, "%s <code>", shown ? "," : "");
        xml_str(f, x->name);
        fprintf(f, "</code> %s", gib(s, x->bytes));
        shown++;
    }
    free(ids);
    fprintf(f, ".</p>\n");
}

void mv_write_html(FILE *f, const MemView *v, const MemMeta *m) {
    const Plan *p = v->p;
    char a[32], b[32], c[32];
    int64_t arena = p->arena_bytes[ARENA_DEVICE] > 0 ? p->arena_bytes[ARENA_DEVICE] : 1;
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n<title>ftc memory: ");
    xml_str(f, p->model);
    fprintf(f, "</title>\n<style>\n"
               "body{font:13px sans-serif;margin:16px;color:#222}\n"
               "rect.buf{stroke:#0003;stroke-width:0.3}\nrect.buf:hover{stroke:#000;stroke-width:1.5}\n"
               "#info{font-family:monospace;white-space:pre;min-height:3em;background:#f6f6f6;padding:6px}\n"
               ".peak{stroke:#d00;stroke-width:1.5;stroke-dasharray:4 3}\n"
               ".lg span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}\n"
               "</style></head><body>\n");
    fprintf(f, "<h2>");
    xml_str(f, p->model);
    fprintf(f, ": micro-batch %lld &times; seq %lld, accumulation %lld</h2>\n", (long long)p->micro_batch,
            (long long)p->seq, (long long)p->accum);
    fprintf(f, "<p><b>Device peak %s</b> at instruction %d (%s <code>%s</code>, %s phase) &mdash; "
               "device arena %s, budget %s. The red line marks the peak; hover over a rectangle "
               "for its buffer.</p>\n",
            gib(a, v->peak), v->peak_at, plan_instr(p, v->peak_at) ? "op" : "", plan_instr(p, v->peak_at) ?
            OPNAME(plan_instr(p, v->peak_at)) : "", plan_phase_name(plan_instr_phase(p, v->peak_at)),
            gib(b, arena), gib(c, m->budget_bytes));
    peak_story(f, v, v->live, v->peak, v->peak_at, ARENA_DEVICE);
    fprintf(f, "<p id=\"phases\">Device peak by phase:");
    for (int ph = 0, k = 0; ph < PHASE_COUNT; ph++)
        if (v->phase_peak_at[ph] >= 0)
            fprintf(f, "%s %s <b>%s</b> at instruction %d", k++ ? ";" : "", plan_phase_name((PlanPhase)ph),
                    gib(a, v->phase_peak[ph]), v->phase_peak_at[ph]);
    fprintf(f, "%s%s%s.</p>\n", v->phase_peak_at[PHASE_EVAL] >= 0
                                    ? " (eval: the forward alone, between steps, nothing saved for a backward)"
                                    : "",
            v->phase_peak_at[PHASE_DECODE] >= 0 ? " (decode: one token of ftc generate over the KV cache)" : "",
            v->phase_peak_at[PHASE_REF] >= 0 ? " (reference: the reference model over the data, before the first step)"
                                             : "");
    fprintf(f, "<div class=\"lg\">");
    for (int k = 0; k < MV_CATS - 1; k++)
        fprintf(f, "<span style=\"background:%s\"></span>%s", cat_colors[k], cat_names[k]);
    fprintf(f, "</div>\n<div id=\"info\">hover over a buffer</div>\n");
    fprintf(f, "<h3>Device: address over time</h3>\n");
    svg_addr(f, v, ARENA_DEVICE, "addr");
    fprintf(f, "<h3>Device: live bytes by category</h3>\n");
    svg_cats(f, v, v->live, v->peak, v->peak_at);
    if (p->arena_bytes[ARENA_HOST] > 0) {
        fprintf(f, "<h3>Host memory: the pinned host arena</h3>\n<p><b>Host peak %s</b> at instruction %d "
                   "(%s phase) &mdash; host arena %s: offloaded optimizer state and master weights, "
                   "gradients, swapped activations, streamed weights and their staging.</p>\n",
                gib(a, v->hpeak), v->hpeak_at, plan_phase_name(plan_instr_phase(p, v->hpeak_at)),
                gib(b, p->arena_bytes[ARENA_HOST]));
        peak_story(f, v, v->hlive, v->hpeak, v->hpeak_at, ARENA_HOST);
        fprintf(f, "<h3>Host: address over time</h3>\n");
        svg_addr(f, v, ARENA_HOST, "host-addr");
        fprintf(f, "<h3>Host: live bytes by category</h3>\n");
        svg_cats(f, v, v->hlive, v->hpeak, v->hpeak_at);
    }
    fprintf(f, "<script>\n"
               "const info = document.getElementById('info');\n"
               "for (const svg of document.querySelectorAll('svg.addr'))\n"
               "  svg.addEventListener('mouseover', e => {\n"
               "    const d = e.target.dataset;\n"
               "    if (!d || !d.n) return;\n"
               "    info.textContent = d.n + '  (' + d.c + ', ' + (svg.id === 'addr' ? 'device' : 'host') + ')\\n' +\n"
               "      d.s + ', ' + Number(d.b).toLocaleString() + ' bytes at offset ' +\n"
               "      Number(d.o).toLocaleString() + ', live over instructions ' + d.l;\n"
               "  });\n</script>\n</body></html>\n");
}

// Estimated duration of an instruction: the cost model's, which the plan carries, else the
// roofline of its FLOPs and bytes.
static double est_us(const PlanInstr *in, const MemMeta *m) {
    if (in->est_us > 0)
        return in->est_us;
    // without a preset, an A100's peak rates
    double fl = m->flops_per_s > 0 ? m->flops_per_s : 312e12, by = m->bytes_per_s > 0 ? m->bytes_per_s : 1555e9;
    double t = fmax((double)in->flops / fl, (double)in->bytes / by);
    return t * 1e6 + 2.0;   // a kernel launch
}

// A collective over the plan's ranks: the link's latency, and the ring's bytes through it
// (2(R-1)/R of the tensor for a sum, (R-1)/R for a reduce-scatter or an all-gather).
static double coll_us(const Plan *p, const PlanInstr *in, const MemMeta *m) {
    const PlanBuffer *t = &p->buf[in->op == OP_ALL_GATHER ? in->out[0] : in->in[0]];
    double r = p->ranks, bytes = (double)plan_dtype_bytes(t->dtype, plan_elems(t));
    double bw = m->comm_bytes_per_s > 0 ? m->comm_bytes_per_s : 25e9;
    return (in->op == OP_ALL_REDUCE ? 2 : 1) * (r - 1) / r * bytes / bw * 1e6 + m->comm_latency_us;
}

void mv_write_trace(FILE *f, const MemView *v, const MemMeta *m) {
    const Plan *p = v->p;
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    char title[256];
    snprintf(title, sizeof title, "ftc plan %s (estimated)", p->model);
    fprintf(f, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"args\": {\"name\": ");
    ir_json_str(f, title);
    fprintf(f, "}},\n");
    static const char *streams[STREAM_COUNT] = {"compute stream", "copy stream to the host",
                                                "copy stream to the device", "host (CPU)",
                                                "collectives across ranks"};
    for (int t = 0; t < STREAM_COUNT; t++)
        fprintf(f, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %d, "
                   "\"args\": {\"name\": \"%s\"}},\n", t + 1, streams[t]);
    // Each stream runs in order; an instruction also waits for the events it names
    // (the end of the instruction recording each). Copies take the link, host work a
    // few GFLOP/s of CPU. Phases end with every stream drained.
    double ts[STREAM_COUNT] = {0}, *done_at = xcalloc((size_t)p->events + 1, sizeof(double));
    double link = m->link_bytes_per_s > 0 ? m->link_bytes_per_s : 25e9;
    PlanPhase phase = PHASE_FWD;
    for (int id = 0; id < v->n; id++) {
        const PlanInstr *in = plan_instr(p, id);
        if (plan_instr_phase(p, id) != phase) {
            phase = plan_instr_phase(p, id);
            double drained = 0;
            for (int s = 0; s < STREAM_COUNT; s++)
                drained = fmax(drained, ts[s]);
            for (int s = 0; s < STREAM_COUNT; s++)
                ts[s] = drained;
        }
        int tid = (int)in->stream;
        double dur = op_desc(in->op)->cls == OPC_COLLECTIVE ? coll_us(p, in, m)
                     : op_desc(in->op)->cls == OPC_COPY ? (double)in->bytes / 2 / link * 1e6
                     : in->stream == STREAM_HOST      ? (double)in->flops / 1e9 * 1e6 / 4
                                                      : est_us(in, m);
        double start = ts[tid];
        for (int k = 0; k < in->nwait; k++)
            start = fmax(start, done_at[in->wait[k]]);
        fprintf(f, "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, "
                   "\"pid\": 1, \"tid\": %d, \"args\": {\"instruction\": %d, \"out\": ",
                OPNAME(in), plan_phase_name(plan_instr_phase(p, id)), start, dur, tid + 1, id);
        ir_json_str(f, in->nout ? p->buf[in->out[0]].name : "");
        fprintf(f, ", \"flops\": %lld, \"bytes\": %lld}},\n", (long long)in->flops, (long long)in->bytes);
        fprintf(f, "{\"name\": \"memory\", \"ph\": \"C\", \"ts\": %.3f, \"pid\": 1, \"args\": {", start);
        for (int c = 0; c < MV_CATS; c++)
            fprintf(f, "%s\"%s\": %lld", c ? ", " : "", cat_names[c],
                    (long long)v->live[(size_t)id * MV_CATS + c]);
        fprintf(f, "}},\n");
        ts[tid] = start + dur;
        if (in->record >= 0)
            done_at[in->record] = ts[tid];
    }
    free(done_at);
    double end = 0;
    for (int s = 0; s < STREAM_COUNT; s++)
        end = fmax(end, ts[s]);
    fprintf(f, "{\"name\": \"end of step\", \"ph\": \"i\", \"s\": \"g\", \"ts\": %.3f, \"pid\": 1, \"tid\": 1}\n]}\n", end);
}

int codegen_dumps(const char *dir, const Plan *p, const MemMeta *m, char *err, size_t errlen) {
    MemView v;
    mv_init(&v, p);
    static const char *names[] = {"memory.txt", "memory.json", "memory.html", "trace.json"};
    void (*writers[])(FILE *, const MemView *, const MemMeta *) = {mv_write_txt, mv_write_json,
                                                                    mv_write_html, mv_write_trace};
    int rc = 0;
    for (int k = 0; k < 4 && rc == 0; k++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        FILE *f = fopen(path, "w");
        if (!f) {
            snprintf(err, errlen, "cannot write %s", path);
            rc = -1;
            break;
        }
        writers[k](f, &v, m);
        if (ferror(f) | fclose(f)) {
            snprintf(err, errlen, "cannot write %s", path);
            rc = -1;
        }
    }
    mv_free(&v);
    return rc;
}
