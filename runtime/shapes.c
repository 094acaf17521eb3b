// shapes.c — a plan's instructions checked against the op contract (op_check.c: dtypes of
// the right kind, shapes that agree) as the plan is read, however the file was edited;
// the fused loss's layout and the workspaces the contract's kernels need.
#include "plan.h"

_Static_assert(PDT_F32 == (int)OPD_F32 && PDT_NF4 == (int)OPD_NF4 && PDT_COUNT == (int)OPD_COUNT,
               "a plan's dtypes are the op contract's, in its order");

#include <stdio.h>
#include <string.h>

static int64_t L(const PlanBuffer *b) { return b->ndim ? b->shape[b->ndim - 1] : 1; }
static int64_t R(const PlanBuffer *b) { return plan_elems(b) / L(b); }
static int64_t D(const PlanBuffer *b, int k) { return k < 0 ? b->shape[b->ndim + k] : b->shape[k]; }

OpOperand plan_operand(const Plan *p, int id) {
    if (id < 0)
        return (OpOperand){0};
    const PlanBuffer *b = &p->buf[id];
    return (OpOperand){b->name, (OpDType)b->dtype, plan_dtype_name(b->dtype), b->ndim, b->shape,
                       plan_elems(b), plan_dtype_bytes(b->dtype, plan_elems(b))};
}

// The op contract's check of `op` over these buffers of p.
static int check(const Plan *p, OpKind op, const OpAttr *attr, const int *in, int nin, const int *out,
                 int nout, char *err, size_t errlen) {
    OpOperand vin[PLAN_MAX_IN], vout[PLAN_MAX_OUT];
    for (int k = 0; k < nin; k++)
        vin[k] = plan_operand(p, in[k]);
    for (int k = 0; k < nout; k++)
        vout[k] = plan_operand(p, out[k]);
    return op_check(op, attr, vin, nin, vout, nout, p->vocab, p->ranks, err, errlen);
}

PlanLoss plan_loss(const Plan *p, const PlanInstr *in) {
    const PlanBuffer *x = &p->buf[in->in[0]], *w = &p->buf[in->in[1]];
    PlanLoss l = {.k = L(x), .vocab = D(w, 0)};
    l.rows = R(x);
    l.chunk = in->attr.chunk_rows ? in->attr.chunk_rows : l.rows;
    l.terms = (plan_dtype_bytes(x->dtype, l.chunk * l.vocab) + 255) / 256 * 256;
    l.count = l.terms + (4 * l.rows + 255) / 256 * 256;
    l.bytes = l.count + 256;
    l.lib_bytes = in->ws >= 0 && p->buf[in->ws].bytes > l.bytes ? p->buf[in->ws].bytes - l.bytes : 0;
    return l;
}

int plan_check_instr(const Plan *p, const PlanInstr *in, char *err, size_t errlen) {
    if (in->op == OP_GRAD_SUMSQ && in->nin == 1 && in->in[0] >= 0) {   // its partials' scratch
        int64_t need = 8 * op_sumsq_blocks(plan_elems(&p->buf[in->in[0]]));
        if (in->ws < 0 || p->buf[in->ws].bytes < need)
            return snprintf(err, errlen, "its workspace is not the %lld bytes of its partial sums",
                            (long long)need), -1;
    }
    if (in->nstep == 0 && op_desc(in->op)->cls == OPC_LOSS_GEMM) {   // and its workspace
        int rc = check(p, in->op, &in->attr, in->in, in->nin, in->out, in->nout, err, errlen);
        if (rc != 0)
            return rc;
        PlanLoss l = plan_loss(p, in);
        if (in->ws < 0 || p->buf[in->ws].bytes < l.bytes)
            return snprintf(err, errlen, "its workspace must hold %lld bytes (a chunk's logits and "
                            "the rows' loss terms)", (long long)l.bytes), -1;
        return 0;
    }
    if (in->nstep == 0)
        return check(p, in->op, &in->attr, in->in, in->nin, in->out, in->nout, err, errlen);
    for (int s = 0; s < in->nstep; s++) {
        const PlanStep *st = &in->step[s];
        char why[400];
        if (op_desc(st->op)->cls != OPC_ELEMENTWISE || st->op == OP_FUSED ||
            check(p, st->op, &st->attr, st->in, st->nin, &st->out, 1, why, sizeof why) != 0)
            return snprintf(err, errlen, "step %d (%s): %s", s, op_desc(st->op)->name,
                            op_desc(st->op)->cls != OPC_ELEMENTWISE || st->op == OP_FUSED
                                ? "not an elementwise op" : why), -1;
    }
    return 0;
}
