// lora.c — the LoRA pass. Each targeted linear y = x Wᵀ (+ b) gains a low-rank
// path: y' = y + (alpha/r) · (dropout(x) Aᵀ) Bᵀ, A [r, in], B [out, r]; so does a
// product y = x W by a 2-D weight stored [in, out] (GPT-2's Conv1D; PEFT's
// fan_in_fan_out). Every original parameter is frozen; only A and B train. The path's
// last product and its sum are one op, linear_acc(t, B, y) = y + (alpha/r) · t Bᵀ: the
// GEMM adds into the base's output itself (cuBLASLt's beta = 1, alpha = alpha/r), so the
// product is never stored, nor rounded before it is added, and no kernel adds it.
#include "passes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// The module name of a checkpoint name: "…self_attn.q_proj.weight" -> "q_proj".
static bool module_is(const char *hf, const char *want) {
    const char *end = strrchr(hf, '.');
    if (!end || strcmp(end, ".weight") != 0)
        return false;
    const char *start = end;
    while (start > hf && start[-1] != '.')
        start--;
    return (size_t)(end - start) == strlen(want) && strncmp(start, want, (size_t)(end - start)) == 0;
}

static bool matches(const IrTensor *t, const char *target) {
    return t->kind == TK_PARAM && ((t->decl && strcmp(t->decl, target) == 0) ||
                                   (t->hf_name && module_is(t->hf_name, target)));
}

// Whether node n multiplies by a weight LoRA can adapt: a linear's, or a 2-D parameter a
// matmul applies to every row ([in, out]); *stored_in_out says which.
static bool adaptable(const IrGraph *g, const IrNode *n, bool *stored_in_out) {
    const IrTensor *w = &g->tensors.at[n->in[1]];
    *stored_in_out = n->op == OP_MATMUL;
    return n->op == OP_LINEAR || (n->op == OP_MATMUL && w->kind == TK_PARAM && w->ndim == 2 &&
                                  g->tensors.at[n->in[0]].ndim > 2);
}

// Which target (index) a linear's weight matches, or -1.
static int target_of(const LoraSpec *s, const IrTensor *w) {
    for (int k = 0; k < s->n_targets; k++)
        if (matches(w, s->targets[k]))
            return k;
    return -1;
}

static int add(IrGraph *g, OpKind op, int nin, const int *in, OpAttr attr, const char *name,
               const IrNode *at) {
    IrShapeErr err;
    int id = ir_node_add(g, op, nin, in, attr, name, at->layer, at->loc, &err);
    IR_ASSERT(id >= 0);
    return g->nodes.at[id].out[0];
}

static int add_param(IrGraph *g, const IrTensor *w, const char *which, int64_t d0, int64_t d1) {
    int64_t shape[2] = {d0, d1};
    char *hf = arena_strdup(g->arena, w->hf_name);   // "….q_proj.weight" -> "….q_proj"
    size_t len = strlen(hf), sfx = strlen(".weight");
    if (len > sfx && strcmp(hf + len - sfx, ".weight") == 0)
        hf[len - sfx] = '\0';
    int id = ir_tensor_add(g, arena_printf(g->arena, "%s.lora_%s", w->name, which), TK_PARAM,
                           w->dtype == DT_NF4 ? g->step.weight_dt : w->dtype, 2, shape, w->loc);
    IrTensor *t = ir_tensor(g, id);
    t->hf_name = arena_printf(g->arena, "%s.lora_%s.weight", hf, which);
    t->decl = arena_printf(g->arena, "%s.lora_%s", w->decl, which);
    t->layer = w->layer;
    t->trainable = true;
    return id;
}

// The layouts of the weights `target` names among the products LoRA can adapt (bit 1:
// [out, in], bit 2: [in, out]; 0: none); *param whether it names a parameter at all.
static int target_kind(const IrGraph *g, const char *target, bool *param) {
    int kind = 0;
    *param = false;
    for (int i = 0; i < g->tensors.len; i++)
        *param |= matches(&g->tensors.at[i], target);
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        bool in_out;
        if ((n->op == OP_LINEAR || n->op == OP_MATMUL) && adaptable(g, n, &in_out) &&
            matches(&g->tensors.at[n->in[1]], target))
            kind |= in_out ? 2 : 1;
    }
    return kind;
}

// Every target must name at least one linear weight; PEFT's adapter_config.json has one
// fan_in_fan_out, so the targets' weights are all [out, in] or all [in, out]. Errors into
// d; the layouts found (target_kind's bits).
static int check_targets(const IrGraph *g, const LoraSpec *spec, PassDiag *d) {
    int kinds = 0, first[3] = {-1, -1, -1};   // per layout (1 [out, in], 2 [in, out]): a target
    for (int k = 0; k < spec->n_targets; k++) {
        bool param;
        int kind = target_kind(g, spec->targets[k], &param);
        if (!param) {
            pass_error(d, spec->target_locs[k],
                       "unknown LoRA target '%s': no parameter or module has that name",
                       spec->targets[k]);
        } else if (!kind) {
            pass_error(d, spec->target_locs[k], "LoRA target '%s' is not the weight of a linear "
                       "(or of a matmul by a 2-D weight)", spec->targets[k]);
        } else if ((kinds | kind) == 3) {
            int other = first[kind == 2 ? 1 : 2];
            pass_error(d, spec->target_locs[k], "LoRA target '%s' is stored [%s] and '%s' [%s]: "
                       "PEFT's adapters share one layout (fan_in_fan_out)", spec->targets[k],
                       kind == 2 ? "in, out" : kind == 1 ? "out, in" : "both ways",
                       spec->targets[other >= 0 ? other : k], kind == 2 ? "out, in" : "in, out");
        } else {
            kinds |= kind;
            if (first[kind] < 0)
                first[kind] = k;
        }
    }
    return kinds;
}

// The adapter of the product n (its weight stored [in, out] where in_out): A and B, then
// the path, its last product added into n's output; the sum's tensor.
static int add_adapter(IrGraph *g, const LoraSpec *spec, const IrNode *n, bool in_out) {
    double scale = spec->alpha / (double)spec->r;
    const IrTensor wc = g->tensors.at[n->in[1]];   // a copy: the vector may move as tensors are added
    int64_t in_f = wc.shape[in_out ? 0 : 1], out_f = wc.shape[in_out ? 1 : 0];
    int a = add_param(g, &wc, "A", spec->r, in_f);
    int b = add_param(g, &wc, "B", out_f, spec->r);
    // As PEFT: A ~ kaiming_uniform(a = sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in)); B = 0.
    ir_tensor(g, a)->init = INIT_KAIMING_UNIFORM;
    ir_tensor(g, a)->init_scale = 1.0 / sqrt((double)in_f);
    ir_tensor(g, b)->init = INIT_ZEROS;
    const char *base = g->tensors.at[n->out[0]].name;
    int x = n->in[0];
    if (spec->dropout > 0)
        x = add(g, OP_DROPOUT, 1, &x, (OpAttr){.f = spec->dropout}, arena_printf(g->arena, "%s.lora_drop", base), n);
    int in1[2] = {x, a};
    int t = add(g, OP_LINEAR, 2, in1, (OpAttr){0}, arena_printf(g->arena, "%s.lora_a", base), n);
    // B's product added into the base's output by the GEMM itself (scaled, rounded once)
    int in2[3] = {t, b, n->out[0]};
    return add(g, OP_LINEAR_ACC, 3, in2, (OpAttr){.f = scale}, arena_printf(g->arena, "%s.lora", base), n);
}

int lora_apply(IrGraph *g, const LoraSpec *spec, PassDiag *d) {
    int nt = g->tensors.len;
    int kinds = check_targets(g, spec, d);
    if (d->errors)
        return -1;
    g->lora_fan_in_fan_out = kinds == 2;

    int *remap = xmalloc(sizeof(int) * (size_t)nt);
    for (int i = 0; i < nt; i++)
        remap[i] = i;
    // Rebuild the node list, emitting each adapter right after its linear.
    IrRewrite rw;
    ir_rewrite_begin(&rw, g);
    for (IrNode n; ir_rewrite_next(&rw, &n);) {
        for (int k = 0; k < n.nin; k++)
            if (n.in[k] >= 0 && n.in[k] < nt)
                n.in[k] = remap[n.in[k]];
        if (g->tensors.at[n.out[0]].alias_of >= 0)   // a view of a rewritten linear aliases the new sum
            g->tensors.at[n.out[0]].alias_of = ir_tensor_base(g, n.in[0]);
        ir_rewrite_keep(&rw, &n);
        bool in_out;
        if ((n.op == OP_LINEAR || n.op == OP_MATMUL) && !n.reference && adaptable(g, &n, &in_out) &&
            target_of(spec, &g->tensors.at[n.in[1]]) >= 0)   // (a reference model runs the base alone)
            remap[n.out[0]] = add_adapter(g, spec, &n, in_out);
    }
    ir_rewrite_end(&rw);
    if (g->loss >= 0 && g->loss < nt)
        g->loss = remap[g->loss];
    if (g->logits >= 0 && g->logits < nt)
        g->logits = remap[g->logits];
    free(remap);
    for (int i = 0; i < nt; i++)
        if (g->tensors.at[i].kind == TK_PARAM)
            g->tensors.at[i].trainable = false;
    ir_mark_requires_grad(g);
    return 0;
}
