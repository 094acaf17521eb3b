// print.c — the IR as text: one line per param/input, one line per node.
#include "ir.h"

static void tensor_line(FILE *f, const IrGraph *g, const IrTensor *t) {
    (void)g;
    char s[128];
    ir_shape_str(s, sizeof s, t);
    fprintf(f, "%%%-4d %-44s %-28s %-11s", t->id, t->name, s, mem_category_name(t->cat));
    if (t->kind == TK_PARAM)
        fprintf(f, " %s \"%s\"", t->trainable ? "trainable" : "frozen", t->hf_name ? t->hf_name : "");
    fputc('\n', f);
}

static const char *phase_name[] = {"forward", "backward", "optimizer"};

void ir_print(FILE *f, const IrGraph *g) {
    fprintf(f, "# ir: B=%lld S=%lld, %d tensors, %d nodes\n", (long long)g->batch,
            (long long)g->seq, g->tensors.len, g->nodes.len);
    for (int i = 0; i < g->tensors.len; i++) {
        const IrTensor *t = &g->tensors.at[i];
        if (t->kind != TK_VALUE)
            tensor_line(f, g, t);
    }
    int phase = -1;
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        if ((int)n->phase != phase)
            fprintf(f, "# %s\n", phase_name[phase = (int)n->phase]);
        char s[128];
        for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++)
            fprintf(f, "%s%s%%%d", k ? ", " : "", (n->update >> k) & 1 ? "+" : "", n->out[k]);
        fprintf(f, " = %-13s", op_info(n->op)->name);
        for (int k = 0; k < n->nin; k++)
            fprintf(f, "%s%s", k ? ", " : " ", n->in[k] >= 0 ? g->tensors.at[n->in[k]].name : "_");
        switch (n->op) {
        case OP_RMSNORM: case OP_LAYERNORM: fprintf(f, "; eps=%g", n->attr.f); break;
        case OP_ROPE: case OP_ROPE_BWD: fprintf(f, "; theta=%g", n->attr.f); break;
        case OP_SCALE: fprintf(f, "; c=%g", n->attr.f); break;
        case OP_DROPOUT: case OP_DROPOUT_BWD: fprintf(f, "; p=%g", n->attr.f); break;
        case OP_CROSS_ENTROPY_BWD: fprintf(f, "; scale=%g", n->attr.f); break;
        case OP_ATTENTION: case OP_ATTENTION_BWD:
            fprintf(f, "; causal=%s", n->attr.causal ? "true" : "false");
            break;
        case OP_TRANSPOSE: fprintf(f, "; dims=%d,%d", n->attr.perm[0], n->attr.perm[1]); break;
        default: break;
        }
        fprintf(f, "  ->");
        for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++) {
            const IrTensor *o = &g->tensors.at[n->out[k]];
            ir_shape_str(s, sizeof s, o);
            fprintf(f, "%s %s%s %s", k ? "," : "", (n->update >> k) & 1 ? "+=" : "", o->name, s);
        }
        if (n->loc.file)
            fprintf(f, "  @%d:%d", n->loc.line, n->loc.col);
        fputc('\n', f);
    }
}
