// exec.c — the executor: lays the plan's buffers out in memory, runs phases
// instruction by instruction through a backend, and poisons buffers whose
// lifetime has ended so that a liveness bug shows up as a wrong loss.
#include "runtime.h"
#include "cpu/kernels.h"
#include "cpu/nf4.h"

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
        int *slot = !strcmp(b->role, "nf4_absmax")          ? absmax
                    : !strcmp(b->role, "nf4_absmax_codes")  ? codes
                    : !strcmp(b->role, "nf4_absmax_scales") ? scales
                    : !strcmp(b->role, "nf4_absmax_mean")   ? mean
                                                            : NULL;
        if (slot)
            *slot = i;
    }
}

int rt_exec_init(Exec *x, const Plan *p, Backend *be, ExecLayout layout, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    x->plan = p;
    x->be = be;
    x->layout = layout;
    if (be->prepare(be, p, err, errlen) != 0)
        return -1;
    x->ptr = calloc((size_t)p->nbuf + 1, sizeof(void *));
    x->root = plan_roots(p);
    if (layout == LAYOUT_PLANNED) {
        for (int a = 0; a < ARENA_COUNT; a++) {
            if (!p->arena_bytes[a])
                continue;
            x->arena[a] = be->alloc(be, p->arena_bytes[a]);
            if (!x->arena[a]) {
                snprintf(err, errlen, "cannot allocate the %s arena (%lld bytes)",
                         a == ARENA_DEVICE ? "device" : "host", (long long)p->arena_bytes[a]);
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
        } else {
            x->ptr[i] = be->alloc(be, b->bytes ? b->bytes : 1);
            if (!x->ptr[i]) {
                snprintf(err, errlen, "cannot allocate buffer %s (%lld bytes)", b->name,
                         (long long)b->bytes);
                return -1;
            }
        }
    }
    for (int i = 0; i < p->nbuf; i++)
        if (p->buf[i].view >= 0)
            x->ptr[i] = x->ptr[p->buf[i].view];
    return 0;
}

void rt_exec_free(Exec *x) {
    if (!x->plan)
        return;
    if (x->layout == LAYOUT_UNPLANNED)
        for (int i = 0; i < x->plan->nbuf; i++)
            if (x->plan->buf[i].view < 0 && x->ptr[i])
                x->be->free(x->be, x->ptr[i]);
    for (int a = 0; a < ARENA_COUNT; a++)
        if (x->arena[a])
            x->be->free(x->be, x->arena[a]);
    free(x->ptr);
    free(x->root);
    memset(x, 0, sizeof *x);
}

// Fills a dead buffer with NaN in its own dtype (integers with 0x7f bytes).
static void poison(Exec *x, const PlanBuffer *b) {
    int64_t n = plan_elems(b);
    void *p = x->ptr[b->id];
    switch (b->dtype) {
    case PDT_F32:
        for (int64_t i = 0; i < n; i++)
            ((uint32_t *)p)[i] = 0x7fc00000u;
        break;
    case PDT_BF16:
    case PDT_F16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)p)[i] = b->dtype == PDT_BF16 ? 0x7fc0 : 0x7e00;
        break;
    default:
        memset(p, 0x7f, (size_t)b->bytes);
        break;
    }
}

int rt_exec_phase(Exec *x, PlanPhase ph, char *err, size_t errlen) {
    const Plan *p = x->plan;
    for (int i = 0; i < p->nins[ph]; i++) {
        const PlanInstr *in = &p->ins[ph][i];
        char why[400];
        if (x->be->run(x->be, x, in, why, sizeof why) != 0) {
            snprintf(err, errlen, "instruction %d (%s, from .ft line %d:%d): %s", in->id, in->op,
                     in->line, in->col, why);
            return -1;
        }
        if (!x->poison)
            continue;
        if (in->ws >= 0)
            poison(x, &p->buf[in->ws]);
        // A buffer whose last use this was is dead: its bytes must never be read again.
        for (int k = 0; k < in->nin + in->nout; k++) {
            int id = k < in->nin ? in->in[k] : in->out[k - in->nin];
            if (id < 0)
                continue;
            const PlanBuffer *b = &p->buf[id];
            const PlanBuffer *base = b->view >= 0 ? &p->buf[b->view] : b;
            if (base->last != in->id || persistent(base) || base->role)
                continue;
            // An output written in place over it now owns these bytes.
            bool taken = false;
            for (int o = 0; o < in->nout; o++)
                taken |= in->out[o] >= 0 && in->out[o] != base->id &&
                         x->root[in->out[o]] == x->root[base->id];
            if (!taken)
                poison(x, base);
        }
    }
    return 0;
}

void rt_read_f32(const Exec *x, int id, float *dst) {
    const PlanBuffer *b = &x->plan->buf[id];
    int64_t n = plan_elems(b);
    const void *p = x->ptr[id];
    if (b->dtype == PDT_NF4) {   // dequantise through its scales
        int am, codes, scales, mean;
        nf4_parts(x, id, &am, &codes, &scales, &mean);
        size_t blocks = cpu_nf4_blocks((size_t)n);
        float *absmax = malloc(sizeof(float) * blocks);
        if (am >= 0)
            memcpy(absmax, x->ptr[am], sizeof(float) * blocks);
        else
            cpu_nf4_dequantize_absmax(absmax, x->ptr[codes], x->ptr[scales], *(float *)x->ptr[mean],
                                      blocks);
        cpu_nf4_dequantize(dst, p, absmax, (size_t)n);
        free(absmax);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = b->dtype == PDT_F32    ? ((const float *)p)[i]
                 : b->dtype == PDT_BF16 ? cpu_bf16_to_f32(((const uint16_t *)p)[i])
                 : b->dtype == PDT_F16  ? cpu_f16_to_f32(((const uint16_t *)p)[i])
                 : b->dtype == PDT_I32  ? (float)((const int32_t *)p)[i]
                                        : 0.0f;
}

void rt_write_f32(Exec *x, int id, const float *src) {
    const PlanBuffer *b = &x->plan->buf[id];
    int64_t n = plan_elems(b);
    void *p = x->ptr[id];
    if (b->dtype == PDT_NF4) {   // quantise, as bitsandbytes does on load
        int am, codes, scales, mean;
        nf4_parts(x, id, &am, &codes, &scales, &mean);
        size_t blocks = cpu_nf4_blocks((size_t)n);
        float *absmax = am >= 0 ? x->ptr[am] : malloc(sizeof(float) * blocks);
        cpu_nf4_quantize(p, absmax, src, (size_t)n);
        if (am < 0) {
            cpu_nf4_quantize_absmax(x->ptr[codes], x->ptr[scales], x->ptr[mean], absmax, blocks);
            free(absmax);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        if (b->dtype == PDT_F32)
            ((float *)p)[i] = src[i];
        else if (b->dtype == PDT_BF16)
            ((uint16_t *)p)[i] = cpu_f32_to_bf16(src[i]);
        else if (b->dtype == PDT_F16)
            ((uint16_t *)p)[i] = cpu_f32_to_f16(src[i]);
    }
}
