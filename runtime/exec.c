// exec.c — the executor: lays the plan's buffers out in memory, runs phases
// instruction by instruction through a backend, and poisons buffers whose
// lifetime has ended so that a liveness bug shows up as a wrong loss.
#include "runtime.h"
#include "comm.h"
#include "fileio.h"
#include "kernel_args.h"
#include "cpu/kernels.h"
#include "cpu/adam8.h"
#include "cpu/nf4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool persistent(const PlanBuffer *b) {
    return b->kind == PK_PARAM || b->kind == PK_GRAD || b->kind == PK_STATE || b->kind == PK_INPUT ||
           b->kind == PK_QUANT;
}

// The quantisation buffers of NF4 parameter `id`: absmax (plain), or codes, scales
// and mean (double quantisation); -1 for those absent.
static void nf4_parts(const Exec *x, int id, int *absmax, int *codes, int *scales, int *mean) {
    *absmax = *codes = *scales = *mean = -1;
    for (int i = 0; i < x->plan->nbuf; i++) {
        const PlanBuffer *b = &x->plan->buf[i];
        if (b->kind != PK_QUANT || b->of != id || !b->role)
            continue;
        int *slot = b->role == PR_NF4_ABSMAX          ? absmax
                    : b->role == PR_NF4_ABSMAX_CODES  ? codes
                    : b->role == PR_NF4_ABSMAX_SCALES ? scales
                    : b->role == PR_NF4_ABSMAX_MEAN   ? mean
                                                            : NULL;
        if (slot)
            *slot = i;
    }
}

uint64_t rt_random_stream(const Exec *x, const PlanInstr *in) {
    return x->seed * 0x9e3779b97f4a7c15ull + (uint64_t)x->step * 1000003ull +
           (uint64_t)x->micro * 10007ull + (uint64_t)in->attr.seed;
}

MemKind rt_buf_kind(const Exec *x, int id) {
    return x->plan->arena_kind[x->plan->buf[x->root[id]].arena];
}

// A view reads its base's bytes; a shard view this rank's slice of them.
static void place_views(Exec *x) {
    const Plan *p = x->plan;
    for (int i = 0; i < p->nbuf; i++)
        if (p->buf[i].view >= 0)
            x->ptr[i] = (char *)x->ptr[p->buf[i].view] + p->buf[i].view_at + plan_shard_offset(p, i, x->rank);
}

int rt_exec_init(Exec *x, const Plan *p, Backend *be, Backend *host, ExecLayout layout,
                 char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    x->plan = p;
    x->be = be;
    x->host = host;
    x->layout = layout;
    x->lr = p->lr;
    x->loss_scale = p->scale_init > 0 ? (double)(float)p->scale_init : 1;
    x->graphs = true;
    if (be->prepare(be, p, STREAM_COMPUTE, err, errlen) != 0 ||
        host->prepare(host, p, STREAM_HOST, err, errlen) != 0)
        return -1;
    x->ptr = xcalloc((size_t)p->nbuf + 1, sizeof(void *));
    x->root = plan_roots(p);
    if (layout == LAYOUT_PLANNED) {
        for (int a = 0; a < ARENA_COUNT; a++) {
            if (!p->arena_bytes[a])
                continue;
            x->arena[a] = be->alloc(be, p->arena_kind[a], p->arena_bytes[a]);
            if (!x->arena[a]) {
                char b[32];
                snprintf(err, errlen, "cannot allocate the %s arena (%s)",
                         a == ARENA_DEVICE ? "device" : "host",
                         fmt_bytes(b, sizeof b, p->arena_bytes[a]));
                return -1;
            }
        }
    }
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->view >= 0)
            continue;
        if (layout == LAYOUT_PLANNED) {
            x->ptr[i] = (char *)x->arena[b->arena] + b->offset;
        } else if (!b->virt) {   // (a fused step's intermediate gets its bytes where it runs)
            x->ptr[i] = be->alloc(be, p->arena_kind[b->arena], b->bytes ? b->bytes : 1);
            if (!x->ptr[i]) {
                snprintf(err, errlen, "cannot allocate buffer %s (%lld bytes)", b->name,
                         (long long)b->bytes);
                return -1;
            }
        }
    }
    place_views(x);
    return 0;
}

void rt_exec_set_comm(Exec *x, Comm *comm) {
    x->comm = comm;
    x->rank = comm ? comm->rank : 0;
    place_views(x);
}

void rt_exec_free(Exec *x) {
    if (!x->plan)
        return;
    const Plan *p = x->plan;
    if (x->layout == LAYOUT_UNPLANNED)
        for (int i = 0; i < p->nbuf; i++)
            if (p->buf[i].view < 0 && x->ptr[i])
                x->be->free(x->be, p->arena_kind[p->buf[i].arena], x->ptr[i]);
    for (int a = 0; a < ARENA_COUNT; a++)
        if (x->arena[a])
            x->be->free(x->be, p->arena_kind[a], x->arena[a]);
    free(x->ptr);
    free(x->root);
    free(x->source_dtype);
    memset(x, 0, sizeof *x);
}

// Fills a dead buffer with NaN in its own dtype (integers with 0x7f bytes), on the
// stream of the instruction that last used it.
static void poison(Exec *x, const PlanBuffer *b, Stream stream) {
    uint32_t pattern = 0x7f7f7f7fu;
    int width = 1;
    if (b->dtype == PDT_F32)
        pattern = 0x7fc00000u, width = 4;
    else if (b->dtype == PDT_BF16)
        pattern = 0x7fc0, width = 2;
    else if (b->dtype == PDT_F16)
        pattern = 0x7e00, width = 2;
    int64_t bytes = b->bytes - b->bytes % width;
    if (bytes > 0)
        x->be->fill(x->be, rt_buf_kind(x, b->id), x->ptr[b->id], pattern, width, bytes, stream);
}

// A plan copy: the bytes of in[0] into out[0] (a view: its slice of its base's), across
// arenas, on the copy's stream.
static void copy(Exec *x, const PlanInstr *in) {
    const PlanBuffer *dst = &x->plan->buf[in->out[0]];
    x->be->copy(x->be, x->ptr[dst->id], rt_buf_kind(x, dst->id), x->ptr[in->in[0]],
                rt_buf_kind(x, in->in[0]), plan_dtype_bytes(dst->dtype, plan_elems(dst)), in->stream);
}

// Poisons what died at instruction `in`: its workspace, and every buffer whose last use it
// was (but an input an output now owns in place), on its stream.
static void poison_dead(Exec *x, const PlanInstr *in) {
    const Plan *p = x->plan;
    if (in->ws >= 0)
        poison(x, &p->buf[in->ws], in->stream);
    for (int k = 0; k < in->nin + in->nout; k++) {
        int id = k < in->nin ? in->in[k] : in->out[k - in->nin];
        if (id < 0)
            continue;
        const PlanBuffer *b = &p->buf[id];
        const PlanBuffer *base = b->view >= 0 ? &p->buf[b->view] : b;
        // The runtime reads the loss after the phase; the logits die like any value.
        bool read_after = base->role && base->role != PR_LOGITS;
        if (base->last != in->id || persistent(base) || read_after)
            continue;
        bool taken = false;
        for (int o = 0; o < in->nout; o++)
            taken |= in->out[o] >= 0 && in->out[o] != base->id &&
                     x->root[in->out[o]] == x->root[base->id];
        if (!taken)
            poison(x, base, in->stream);
    }
}

// Waits, the launch or copy, the poison of what died there (before the record, so that
// whatever waits for the record also comes after the poison), the record.
static int run_instr(Exec *x, const PlanInstr *in, bool poison, char *err, size_t errlen) {
    Backend *be = x->be;
    char why[400];
    if (be->event_wait)
        for (int k = 0; k < in->nwait; k++)
            be->event_wait(be, in->stream, in->wait[k]);
    int rc = 0;
    bool skip = (in->last && !x->last) || (op_desc(in->op)->cls == OPC_COLLECTIVE && in->by >= 0);
    if (skip)   // another micro-step's, or its bucket's first did it: waits and record stay
        ;
    else if (op_desc(in->op)->cls == OPC_COLLECTIVE)
        rc = be->collective ? be->collective(be, x, in, why, sizeof why)
                            : rt_comm_collective(x->comm, x, in, why, sizeof why);
    else if (op_desc(in->op)->cls == OPC_COPY)
        copy(x, in);
    else if (in->stream == STREAM_HOST && !be->host_queue)
        rc = x->host->launch(x->host, x, in, why, sizeof why);
    else {
        rt_profile_before(x, in);
        rc = be->launch(be, x, in, why, sizeof why);
        if (rc == 0)
            rt_profile_after(x, in);
    }
    if (rc != 0) {
        snprintf(err, errlen, "instruction %d (%s, from .ft line %d:%d): %s", in->id,
                 op_desc(in->op)->name, in->line, in->col, why);
        return -1;
    }
    if (poison)
        poison_dead(x, in);
    if (in->record >= 0 && be->event_record)
        be->event_record(be, in->record, in->stream);
    return 0;
}

int rt_exec_instr(Exec *x, const PlanInstr *in, char *err, size_t errlen) {
    return run_instr(x, in, false, err, errlen);
}

// Issues every instruction of phase ph to the backend.
static int issue_phase(Exec *x, PlanPhase ph, char *err, size_t errlen) {
    const Plan *p = x->plan;
    for (int i = 0; i < p->nins[ph]; i++)
        if (run_instr(x, &p->ins[ph][i], x->poison, err, errlen) != 0)
            return -1;
    return 0;
}

// Whether phase ph may run as a graph its backend captured once (Backend.run_phase): the
// same work every micro-step, all of it on the device. Not the optimizer's (its scalars
// change every step in every kernel), not with host-stream work (a thread of ours runs
// it) or collectives (NCCL's, waited for by polling), not with the poison (fills ordered
// by host-side waits) or the profiler (its events between launches).
static bool graphable(const Exec *x, PlanPhase ph) {
    if (!x->graphs || ph == PHASE_OPT || x->poison || x->prof || x->comm)
        return false;
    const Plan *p = x->plan;
    for (int i = 0; i < p->nins[ph]; i++) {
        const PlanInstr *in = &p->ins[ph][i];
        if (in->stream == STREAM_HOST || op_desc(in->op)->cls == OPC_COLLECTIVE)
            return false;
    }
    return true;
}

int rt_exec_phase(Exec *x, PlanPhase ph, char *err, size_t errlen) {
    int done = 0;
    if (x->be->run_phase && graphable(x, ph) &&
        (done = x->be->run_phase(x->be, x, ph, issue_phase, err, errlen)) < 0)
        return -1;
    if (!done && issue_phase(x, ph, err, errlen) != 0)
        return -1;
    if (x->be->sync(x->be, err, errlen) != 0)
        return -1;
    rt_profile_collect(x);
    return 0;
}

int rt_exec_phase_find_nonfinite(Exec *x, PlanPhase ph, const PlanInstr **bad, int *out, char *err,
                                 size_t errlen) {
    const Plan *p = x->plan;
    *bad = NULL, *out = -1;
    for (int i = 0; i < p->nins[ph]; i++) {
        const PlanInstr *in = &p->ins[ph][i];
        if (run_instr(x, in, x->poison, err, errlen) != 0 || x->be->sync(x->be, err, errlen) != 0)
            return -1;
        for (int k = 0; k < in->nout; k++) {
            const PlanBuffer *b = &p->buf[in->out[k]];
            if (b->virt || (b->dtype != PDT_F32 && b->dtype != PDT_BF16 && b->dtype != PDT_F16))
                continue;
            int64_t n = plan_elems(b);
            float *v = malloc(sizeof(float) * (size_t)n + 1);
            if (!v)
                return rt_fail(err, errlen, "out of memory reading %s", b->name);
            rt_read_f32(x, in->out[k], v);
            bool finite = true;
            for (int64_t j = 0; j < n && finite; j++)
                finite = isfinite(v[j]);
            free(v);
            if (!finite) {
                *bad = in, *out = in->out[k];
                return x->be->sync(x->be, err, errlen);
            }
        }
    }
    return 0;
}

void rt_read_raw(const Exec *x, int id, void *dst) {
    const PlanBuffer *b = &x->plan->buf[id];
    int64_t bytes = plan_dtype_bytes(b->dtype, plan_elems(b));
    x->be->get(x->be, rt_buf_kind(x, id), dst, x->ptr[id], bytes);
}

void rt_write_raw(Exec *x, int id, const void *src) {
    const PlanBuffer *b = &x->plan->buf[id];
    int64_t bytes = plan_dtype_bytes(b->dtype, plan_elems(b));
    x->be->set(x->be, rt_buf_kind(x, id), x->ptr[id], src, bytes);
}

void rt_zero(Exec *x, int id) {
    const PlanBuffer *b = &x->plan->buf[id];
    void *zeros = xcalloc((size_t)b->bytes + 1, 1);
    x->be->set(x->be, rt_buf_kind(x, id), x->ptr[id], zeros, b->bytes);
    free(zeros);
}

void rt_exec_skip_update(Exec *x) {
    const Plan *p = x->plan;
    x->skipped++;
    for (int i = 0; i < p->nins[PHASE_OPT]; i++)
        if (p->ins[PHASE_OPT][i].op == OP_ZERO)
            rt_zero(x, p->ins[PHASE_OPT][i].out[0]);
}

int64_t rt_write_target_count(Exec *x, int64_t n) {
    const Plan *p = x->plan;
    const PlanBuffer *b = plan_role(p, PR_TARGET_COUNT), *tg = plan_role(p, PR_TARGETS);
    if (n < 0 && tg) {   // the trained targets of the micro-batch in the targets buffer
        int64_t k = plan_elems(tg);
        int32_t *t = xmalloc(sizeof(int32_t) * (size_t)(k + 1));
        rt_read_raw(x, tg->id, t);
        n = 0;
        for (int64_t i = 0; i < k; i++)
            n += t[i] >= 0;
        free(t);
    }
    if (b) {
        int32_t v = n > INT32_MAX ? INT32_MAX : (int32_t)n;
        rt_write_raw(x, b->id, &v);
    }
    return n;
}

void rt_write_pair_counts(Exec *x, int64_t pairs, int64_t chosen) {
    const PlanBuffer *b = plan_role(x->plan, PR_TARGET_COUNT);
    if (!b)
        return;
    // A pairs plan's buffer is i32[2]; staged in one at least that long, so that a plan of
    // another shape reads no byte from beyond it.
    int64_t n = plan_elems(b) > 2 ? plan_elems(b) : 2;
    int32_t *v = xcalloc((size_t)n, sizeof *v);
    v[0] = pairs > INT32_MAX ? INT32_MAX : (int32_t)pairs;
    v[1] = chosen > INT32_MAX ? INT32_MAX : (int32_t)chosen;
    rt_write_raw(x, b->id, v);
    free(v);
}

void rt_write_positions(Exec *x, const int32_t *pos) {
    const Plan *p = x->plan;
    const PlanBuffer *b = plan_role(p, PR_POSITIONS);
    if (!b)
        return;
    if (pos) {
        rt_write_raw(x, b->id, pos);
        return;
    }
    int64_t n = p->micro_batch * p->seq;
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)(i % p->seq);
    rt_write_raw(x, b->id, ids);
    free(ids);
}

bool rt_grad_stats(const Exec *x, double *norm, bool *nonfinite) {
    const PlanBuffer *b = plan_role(x->plan, PR_GRAD_STATS);
    if (!b)
        return false;
    float st[2];
    rt_read_raw(x, b->id, st);
    *norm = sqrt((double)st[0]) / x->loss_scale;
    *nonfinite = st[1] != 0.0f || !isfinite(st[0]);
    return true;
}

// The raw bytes of buffer `id` in host memory (malloc'd).
static void *fetch(const Exec *x, int id) {
    const PlanBuffer *b = &x->plan->buf[id];
    void *h = xmalloc((size_t)plan_dtype_bytes(b->dtype, plan_elems(b)) + 1);
    rt_read_raw(x, id, h);
    return h;
}

void rt_read_f32(const Exec *x, int id, float *dst) {
    const PlanBuffer *b = &x->plan->buf[id];
    int64_t n = plan_elems(b);
    void *p = fetch(x, id);
    if (b->dtype == PDT_NF4) {   // dequantise through its scales
        int am, codes, scales, mean;
        nf4_parts(x, id, &am, &codes, &scales, &mean);
        if (am < 0 && (codes < 0 || scales < 0 || mean < 0)) {   // a copy: its scales are elsewhere
            for (int64_t i = 0; i < n; i++)
                dst[i] = NAN;
            free(p);
            return;
        }
        size_t blocks = cpu_nf4_blocks((size_t)n);
        float *absmax = am >= 0 ? fetch(x, am) : xmalloc(sizeof(float) * blocks);
        if (am < 0) {
            uint8_t *c = fetch(x, codes);
            float *sc = fetch(x, scales), *mu = fetch(x, mean);
            cpu_nf4_dequantize_absmax(absmax, c, sc, *mu, blocks);
            free(c), free(sc), free(mu);
        }
        cpu_nf4_dequantize(dst, p, absmax, (size_t)n);
        free(absmax);
        free(p);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = b->dtype == PDT_F32    ? ((const float *)p)[i]
                 : b->dtype == PDT_BF16 ? cpu_bf16_to_f32(((const uint16_t *)p)[i])
                 : b->dtype == PDT_F16  ? cpu_f16_to_f32(((const uint16_t *)p)[i])
                 : b->dtype == PDT_I32  ? (float)((const int32_t *)p)[i]
                                        : 0.0f;
    free(p);
}

void rt_write_f32(Exec *x, int id, const float *src) {
    const PlanBuffer *b = &x->plan->buf[id];
    int64_t n = plan_elems(b);
    void *p = xmalloc((size_t)plan_dtype_bytes(b->dtype, n) + 1);
    if (b->dtype == PDT_NF4) {   // quantise, as bitsandbytes does on load
        int am, codes, scales, mean;
        nf4_parts(x, id, &am, &codes, &scales, &mean);
        size_t blocks = cpu_nf4_blocks((size_t)n);
        float *absmax = xmalloc(sizeof(float) * blocks);
        cpu_nf4_quantize(p, absmax, src, (size_t)n);
        if (am >= 0) {
            rt_write_raw(x, am, absmax);
        } else {
            uint8_t *c = xmalloc(blocks + 1);
            float *sc = xmalloc(sizeof(float) * (blocks / 256 + 2)), mu;
            cpu_nf4_quantize_absmax(c, sc, &mu, absmax, blocks);
            rt_write_raw(x, codes, c);
            rt_write_raw(x, scales, sc);
            rt_write_raw(x, mean, &mu);
            free(c), free(sc);
        }
        free(absmax);
    } else {
        for (int64_t i = 0; i < n; i++) {
            if (b->dtype == PDT_F32)
                ((float *)p)[i] = src[i];
            else if (b->dtype == PDT_BF16)
                ((uint16_t *)p)[i] = cpu_f32_to_bf16(src[i]);
            else if (b->dtype == PDT_F16)
                ((uint16_t *)p)[i] = cpu_f32_to_f16(src[i]);
        }
    }
    rt_write_raw(x, id, p);
    free(p);
}

// The fp32 reals a launch of `in` reads (kernel_args.h): formed here, on the host, in the
// cpu backend's arithmetic, so that no kernel computes in double.
static void runtime_reals(const Exec *x, const PlanInstr *in, float f[8]) {
    const Plan *p = x->plan;
    int64_t t = x->step - x->skipped;
    f[0] = (float)x->lr;
    f[1] = (float)x->loss_scale;
    if (in->op == OP_ADAMW) {
        CpuAdamwScalars s = cpu_adamw_scalars(x->lr, p->beta1, p->beta2, in->attr.f, t);
        f[2] = s.decay, f[3] = s.neg_step, f[4] = s.bias_c2_sqrt;
    } else if (in->op == OP_ADAMW8BIT) {
        CpuAdam8 s = cpu_adam8_scalars(x->lr, p->beta1, p->beta2, p->eps, in->attr.f, t);
        f[2] = s.decay, f[3] = s.step_size, f[4] = s.correction2;
    }
}

void rt_kernel_args(const Exec *x, const PlanInstr *in, KernelArgs *a) {
    memset(a, 0, sizeof *a);
    int k = 0;
    for (int o = 0; o < in->nout; o++)
        a->p[k++] = x->ptr[in->out[o]];
    for (int i = 0; i < in->nin; i++)
        a->p[k++] = in->in[i] >= 0 ? x->ptr[in->in[i]] : NULL;
    if (in->ws >= 0)
        a->p[k++] = x->ptr[in->ws];
    a->i[0] = x->step - x->skipped;
    a->i[1] = x->micro;
    a->i[2] = (long long)rt_random_stream(x, in);
    runtime_reals(x, in, a->f);
}

bool rt_args_vary(const PlanInstr *in) { return op_desc(in->op)->flags & OPF_STEP_SCALARS; }

void rt_args_update(const Exec *x, const PlanInstr *in, KernelArgs *a) {
    KernelArgs now;
    rt_kernel_args(x, in, &now);
    memcpy(a->i, now.i, 3 * sizeof a->i[0]);
    memcpy(a->f, now.f, sizeof a->f);
}

// A grouped launch's runtime scalars.
static void group_scalars(const Exec *x, const PlanInstr *in, KernelGroupArgs *a) {
    a->i[0] = x->step - x->skipped;
    a->i[1] = x->micro;
    runtime_reals(x, in, a->f);   // (a group's members share their constants: in's are theirs)
}

void rt_kernel_group_args(const Exec *x, const PlanInstr *in, KernelGroupArgs *a) {
    memset(a, 0, sizeof *a);
    for (int k = 0; k < in->group; k++) {
        const PlanInstr *m = plan_instr(x->plan, in->id + k);
        int j = 0;
        for (int o = 0; o < m->nout; o++)
            a->p[k][j++] = x->ptr[m->out[o]];
        for (int i = 0; i < m->nin; i++)
            a->p[k][j++] = m->in[i] >= 0 ? x->ptr[m->in[i]] : NULL;
    }
    group_scalars(x, in, a);
}

void rt_group_args_update(const Exec *x, const PlanInstr *in, KernelGroupArgs *a) { group_scalars(x, in, a); }
