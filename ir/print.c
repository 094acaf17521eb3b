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

static const char *phase_name[] = {"forward", "backward", "optimizer", "eval", "decode", "reference"};

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
        fprintf(f, " = %-13s", op_desc(n->op)->name);
        for (int k = 0; k < n->nin; k++)
            fprintf(f, "%s%s", k ? ", " : " ", n->in[k] >= 0 ? g->tensors.at[n->in[k]].name : "_");
        char attrs[256];
        if (op_attr_format(attrs, sizeof attrs, n->op, &n->attr, false) > 0)
            fprintf(f, ";%s", attrs);
        if (n->stream != STREAM_COMPUTE)
            fprintf(f, " [%s]", stream_name((Stream)n->stream));
        if (n->fused >= 0 && n->fused < g->fused.len) {   // its steps: op(inputs)
            const IrFused *fz = &g->fused.at[n->fused];
            fprintf(f, " {");
            for (int s2 = 0; s2 < fz->n; s2++) {
                const IrNode *st = &fz->step[s2];
                fprintf(f, "%s%s(", s2 ? "; " : " ", op_desc(st->op)->name);
                for (int k = 0; k < st->nin; k++)
                    fprintf(f, "%s%s", k ? ", " : "", st->in[k] >= 0 ? g->tensors.at[st->in[k]].name : "_");
                fprintf(f, ")");
            }
            fprintf(f, " }");
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

void ir_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    fputc('"', f);
}

void ir_write_json(FILE *f, const IrGraph *g) {
    fprintf(f, "{\n  \"batch\": %lld, \"seq\": %lld, \"loss\": %d,\n  \"tensors\": [\n",
            (long long)g->batch, (long long)g->seq, g->loss);
    for (int i = 0; i < g->tensors.len; i++) {
        const IrTensor *t = &g->tensors.at[i];
        fprintf(f, "    {\"id\": %d, \"name\": ", i);
        ir_json_str(f, t->name);
        fprintf(f, ", \"category\": \"%s\", \"dtype\": \"%s\", \"bytes\": %lld, \"producer\": %d, "
                   "\"view_of\": %d, \"layer\": %d}%s\n",
                mem_category_name(t->cat), dtype_name(t->dtype), (long long)ir_tensor_bytes(t),
                t->producer, t->alias_of, t->layer, i + 1 < g->tensors.len ? "," : "");
    }
    fprintf(f, "  ],\n  \"nodes\": [\n");
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        fprintf(f, "    {\"id\": %d, \"op\": \"%s\", \"phase\": \"%s\", \"layer\": %d, \"flops\": %lld, "
                   "\"out_bytes\": %lld, \"inputs\": [",
                i, op_desc(n->op)->name, phase_name[n->phase], n->layer, (long long)op_flops(g, n),
                (long long)op_bytes_written(g, n));
        for (int k = 0; k < n->nin; k++)
            fprintf(f, "%s%d", k ? ", " : "", n->in[k]);
        fprintf(f, "], \"outputs\": [");
        for (int k = 0; k < IR_MAX_OUTPUTS && n->out[k] >= 0; k++)
            fprintf(f, "%s%d", k ? ", " : "", n->out[k]);
        fprintf(f, "], \"updates\": %u}%s\n", n->update, i + 1 < g->nodes.len ? "," : "");
    }
    // Edges: producer node -> consumer node, through a tensor (a view's readers depend
    // on the view node, which depends on its base's producer).
    fprintf(f, "  ],\n  \"edges\": [");
    bool first = true;
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        for (int k = 0; k < n->nin; k++) {
            int t = n->in[k];
            if (t < 0 || g->tensors.at[t].producer < 0)
                continue;
            fprintf(f, "%s\n    [%d, %d, %d]", first ? "" : ",", g->tensors.at[t].producer, i, t);
            first = false;
        }
    }
    fprintf(f, "\n  ]\n}\n");
}
