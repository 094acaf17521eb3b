// import_write.c — the .ft of an imported model (ImportModel, import.c), laid out as
// models/qwen2.ft is: a header comment saying what it is, the constants, the parameters by
// their checkpoint names, one decoder block, forward, and a train section to edit. What
// differs by layer (a sliding window on some layers, Gemma 3's two ropes, GPT-2's scale by
// layer) is a list indexed by the block's `layer`.
#include "import.h"

#include <math.h>

// Writes `v` so that strtod reads it back exactly and the .ft lexer sees a float:
// 1e-06 as "1e-6", 1000000 as "1000000.0".
static void put_float(FILE *f, double v) {
    char s[48];
    if (v < 1e15 && v == (double)(long long)v) {
        snprintf(s, sizeof s, "%.1f", v);
        fputs(s, f);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, v);
        if (strtod(s, NULL) == v)
            break;
    }
    char *e = strchr(s, 'e');
    if (!e) {
        fputs(s, f);
        return;
    }
    fwrite(s, 1, (size_t)(e - s), f);
    fputc('e', f);
    e++;
    if (*e == '-')
        fputc(*e, f);
    if (*e == '-' || *e == '+')
        e++;
    while (*e == '0' && e[1])
        e++;
    fputs(e, f);
}

static bool some_sliding(const ImportModel *m) { return m->window > 0; }

static bool all_sliding(const ImportModel *m) {
    for (int64_t i = 0; i < m->layers; i++)
        if (!m->sliding[i])
            return false;
    return true;
}

// Whether the layers differ in their attention: some through the window, some not (Gemma 3's
// ropes follow the same split).
static bool mixed_layers(const ImportModel *m) { return some_sliding(m) && !all_sliding(m); }

static bool is_gemma(const ImportModel *m) {
    return m->fam == FAM_GEMMA || m->fam == FAM_GEMMA2 || m->fam == FAM_GEMMA3;
}

static const char *family_name(ImportFamily f) {
    static const char *n[FAM_COUNT] = {"Llama", "Qwen2", "Qwen3", "Mistral", "Gemma", "Gemma 2",
                                       "Gemma 3", "Phi-3", "GPT-2", "GPT-NeoX"};
    return n[f];
}

// The header: the source, then what the architecture is, in a line or two.
static void put_header(FILE *f, const ImportModel *m, const char *file) {
    const char *attn = m->kv_heads == m->heads ? "MHA" : m->kv_heads == 1 ? "MQA" : "GQA";
    fprintf(f, "# Imported by `ftc import` from %s (%s).\n# %s: %s", file, m->class_name,
            family_name(m->fam), attn);
    if (m->kv_heads != m->heads && m->kv_heads != 1)
        fprintf(f, " %lld:1", (long long)(m->heads / m->kv_heads));
    if (m->o_bias && m->mlp_bias)
        fputs(", linear biases", f);
    else if (m->o_bias)
        fputs(", q/k/v/o bias", f);
    else if (m->qkv_bias)
        fputs(", q/k/v bias", f);
    if (m->mlp_bias && !m->o_bias)
        fputs(", MLP bias", f);
    if (m->fam == FAM_GPT2) {
        fputs(", learned positions", f);
    } else {
        fputs(", RoPE", f);
        if (m->rope.r.scaling != ROPE_PLAIN)
            fprintf(f, " (%s scaling)", rope_scaling_name(m->rope.r.scaling));
        if (m->rope.r.rotary)
            fprintf(f, " on %lld of %lld dims", (long long)m->rope.r.rotary,
                    (long long)(m->head_dim ? m->head_dim : m->dim / m->heads));
    }
    static const char *mlp[] = {"SwiGLU", "GeGLU (tanh)", "GeGLU"};
    const char *kind = m->fam == FAM_GPT2 || m->fam == FAM_NEOX
                           ? (m->act == ACT_GELU_EXACT ? "GeLU MLP" : "GeLU (tanh) MLP")
                           : mlp[m->act];
    fprintf(f, ", %s", kind);
    if (is_gemma(m))
        fputs(", (1 + w) RMSNorm, embeddings scaled by sqrt(dim)", f);
    if (m->parallel_residual)
        fputs(", parallel residual", f);
    if (m->attn_softcap > 0 || m->final_softcap > 0)
        fputs(", soft-capping", f);
    if (mixed_layers(m)) {
        int64_t n = 0;
        for (int64_t i = 0; i < m->layers; i++)
            n += m->sliding[i];
        fprintf(f, ", sliding window %lld on %lld of %lld layers", (long long)m->window,
                (long long)n, (long long)m->layers);
    } else if (some_sliding(m)) {
        fprintf(f, ", sliding window %lld", (long long)m->window);
    }
    fprintf(f, ", %s lm_head", m->tied ? "tied" : "untied");
    if (m->max_pos)
        fprintf(f, "; max_position_embeddings = %lld", (long long)m->max_pos);
    fputs(".\n", f);
}

// `name = value`, aligned as in models/qwen2.ft.
static void put_const(FILE *f, const char *name, long long v) { fprintf(f, "  %-8s = %lld\n", name, v); }

static void put_const_f(FILE *f, const char *name, double v) {
    fprintf(f, "  %-8s = ", name);
    put_float(f, v);
    fputc('\n', f);
}

static void put_constants(FILE *f, const ImportModel *m) {
    put_const(f, "vocab", m->vocab);
    put_const(f, "dim", m->dim);
    put_const(f, "layers", m->layers);
    put_const(f, "heads", m->heads);
    if (m->fam != FAM_GPT2 && m->fam != FAM_NEOX)
        put_const(f, "kv_heads", m->kv_heads);
    if (m->head_dim)
        put_const(f, "head_dim", m->head_dim);
    else
        fputs("  head_dim = dim / heads\n", f);
    put_const(f, "ffn", m->ffn);
    if (m->fam == FAM_GPT2)
        put_const(f, "context", m->max_pos);
    else if (m->max_pos)   // read by no op: the config a save writes carries it
        put_const(f, "max_pos", m->max_pos);
    put_const_f(f, "eps", m->eps);
    if (m->fam == FAM_GEMMA3 && some_sliding(m) && !mixed_layers(m))   // every layer local
        put_const_f(f, "theta", m->rope_local.theta);
    else if (m->fam != FAM_GPT2)
        put_const_f(f, "theta", m->rope.theta);
    if (m->fam == FAM_GEMMA3 && mixed_layers(m))
        put_const_f(f, "theta_l", m->rope_local.theta);
    fputc('\n', f);
}

// A block's parameter, or (indent "  ") a model-level one with its name and shape in columns.
static void put_param(FILE *f, const char *indent, const char *decl, const char *hf) {
    const char *sp = strchr(decl, ' ');
    if (strcmp(indent, "  ") == 0 && sp)
        fprintf(f, "  param %-10.*s %-12s as \"%s\"\n", (int)(sp - decl), decl, sp + 1, hf);
    else
        fprintf(f, "%sparam %-38s as \"%s\"\n", indent, decl, hf);
}

// Which list element a layer takes: 1 for the full-attention layers, 0 for the sliding ones.
static void put_full_list(FILE *f, const ImportModel *m) {
    fputs("    full = [", f);
    for (int64_t i = 0; i < m->layers; i++)
        fprintf(f, "%s%d", i ? ", " : "", m->sliding[i] ? 0 : 1);
    fputs("][layer]\n", f);
}

// rope's attributes after theta: what differs from the plain one.
static void put_rope_attrs(FILE *f, const OpRope *r, const char *factor) {
    if (r->rotary)
        fprintf(f, ", rotary = %lld", (long long)r->rotary);
    if (r->scaling == ROPE_PLAIN && !factor)
        return;
    fprintf(f, ", scaling = %s, factor = ", factor ? "linear" : rope_scaling_name(r->scaling));
    if (factor)
        fputs(factor, f);
    else
        put_float(f, r->factor);
    if (r->scaling == ROPE_LLAMA3) {
        fputs(", low_freq_factor = ", f);
        put_float(f, r->low);
        fputs(", high_freq_factor = ", f);
        put_float(f, r->high);
    }
    if (r->scaling == ROPE_YARN && r->low != 0) {
        fputs(", beta_fast = ", f);
        put_float(f, r->low);
    }
    if (r->scaling == ROPE_YARN && r->high != 0) {
        fputs(", beta_slow = ", f);
        put_float(f, r->high);
    }
    if (r->scaling == ROPE_LLAMA3 || r->scaling == ROPE_YARN || r->scaling == ROPE_DYNAMIC)
        fprintf(f, ", original_max = %lld", (long long)r->original);
    if (r->scaling == ROPE_YARN && r->attn_factor != 0) {
        fputs(", attention_factor = ", f);
        put_float(f, r->attn_factor);
    }
    if (r->scaling == ROPE_YARN && r->no_truncate)
        fputs(", truncate = false", f);
}

// rope(x, positions, theta, ...): Gemma 3's local and global layers differ in theta and,
// where one scales linearly, in the factor (1 for the other: the same frequencies).
static void put_rope(FILE *f, const ImportModel *m, const char *x) {
    fprintf(f, "rope(%s, positions, ", x);
    if (m->fam == FAM_GEMMA3 && mixed_layers(m)) {
        fputs("[theta_l, theta][full]", f);
        const OpRope *g = &m->rope.r, *l = &m->rope_local.r;
        if (g->scaling == ROPE_LINEAR || l->scaling == ROPE_LINEAR) {
            char factor[96], a[40], b[40];
            snprintf(a, sizeof a, "%.17g", l->scaling == ROPE_LINEAR ? l->factor : 1.0);
            snprintf(b, sizeof b, "%.17g", g->scaling == ROPE_LINEAR ? g->factor : 1.0);
            snprintf(factor, sizeof factor, "[%s%s, %s%s][full]", a, strchr(a, '.') ? "" : ".0", b,
                     strchr(b, '.') ? "" : ".0");
            put_rope_attrs(f, g, factor);
        } else {
            put_rope_attrs(f, g, NULL);
        }
    } else {
        fputs("theta", f);
        const ImportRope *r = m->fam == FAM_GEMMA3 && some_sliding(m) ? &m->rope_local : &m->rope;
        put_rope_attrs(f, &r->r, NULL);
    }
    fputc(')', f);
}

// attention(q, k, v, causal = true, ...) with the window, soft cap and scale the model has.
static void put_attention(FILE *f, const ImportModel *m) {
    fputs("attention(q, k, v, causal = true", f);
    if (mixed_layers(m))
        fprintf(f, ", window = [%lld, 0][full]", (long long)m->window);
    else if (some_sliding(m))
        fprintf(f, ", window = %lld", (long long)m->window);
    if (m->attn_softcap > 0) {
        fputs(", softcap = ", f);
        put_float(f, m->attn_softcap);
    }
    if (m->scale_by_layer) {   // GPT-2: 1 / sqrt(head_dim), / (layer + 1)
        double s = m->attn_scale > 0 ? m->attn_scale : 1.0 / sqrt((double)(m->dim / m->heads));
        fputs(", scale = [", f);
        for (int64_t i = 0; i < m->layers; i++) {
            fputs(i ? ", " : "", f);
            put_float(f, s / (double)(i + 1));
        }
        fputs("][layer]", f);
    } else if (m->attn_scale > 0) {
        fputs(", scale = ", f);
        put_float(f, m->attn_scale);
    }
    fputc(')', f);
}

// `expr`, through dropout(expr, p) when p > 0.
static void put_drop_open(FILE *f, double p) { fputs(p > 0 ? "dropout(" : "", f); }
static void put_drop_close(FILE *f, double p) {
    if (p > 0) {
        fputs(", ", f);
        put_float(f, p);
        fputc(')', f);
    }
}

// A weight with its bias when it has one: ", wX)" or ", wX, bX)".
// The attention's separate q, k and v projections, each with its bias where the config
// has them.
static void put_qkv_params(FILE *f, const ImportModel *m) {
    static const struct { char w, rows[20]; } proj[] = {
        {'q', "heads"}, {'k', "kv_heads"}, {'v', "kv_heads"}};
    for (int i = 0; i < 3; i++) {
        char decl[64], hf[64];
        snprintf(decl, sizeof decl, "w%c [%s * head_dim, dim]", proj[i].w, proj[i].rows);
        snprintf(hf, sizeof hf, "self_attn.%c_proj.weight", proj[i].w);
        put_param(f, "    ", decl, hf);
        if (m->qkv_bias) {
            snprintf(decl, sizeof decl, "b%c [%s * head_dim]", proj[i].w, proj[i].rows);
            snprintf(hf, sizeof hf, "self_attn.%c_proj.bias", proj[i].w);
            put_param(f, "    ", decl, hf);
        }
    }
}

// The output projection (and its bias), then the q and k norms of a model that has them.
static void put_o_params(FILE *f, const ImportModel *m, bool qk_norm) {
    put_param(f, "    ", "wo [dim, heads * head_dim]", "self_attn.o_proj.weight");
    if (m->o_bias)
        put_param(f, "    ", "bo [dim]", "self_attn.o_proj.bias");
    if (qk_norm) {
        put_param(f, "    ", "q_norm [head_dim]", "self_attn.q_norm.weight");
        put_param(f, "    ", "k_norm [head_dim]", "self_attn.k_norm.weight");
    }
}

// q and k from their projections' expressions: normalised over head_dim first where the
// model has q/k norms (with the norm's own arguments `norm_args`), then rotated.
static void put_qk(FILE *f, const ImportModel *m, const char *qx, const char *kx, bool qk_norm,
                   const char *norm_args) {
    char nq[240], nk[240];
    if (qk_norm) {
        snprintf(nq, sizeof nq, "rmsnorm(%s, q_norm, %s)", qx, norm_args);
        snprintf(nk, sizeof nk, "rmsnorm(%s, k_norm, %s)", kx, norm_args);
    } else {
        snprintf(nq, sizeof nq, "%s", qx);
        snprintf(nk, sizeof nk, "%s", kx);
    }
    fputs("    q = ", f);
    put_rope(f, m, nq);
    fputs("\n    k = ", f);
    put_rope(f, m, nk);
}

static void put_w(FILE *f, const char *w, const char *b, bool bias) {
    if (bias)
        fprintf(f, ", %s, %s)", w, b);
    else
        fprintf(f, ", %s)", w);
}

//
// Llama, Qwen2, Qwen3, Mistral, Phi-3: pre-norm decoders with RMSNorm and SwiGLU.
//

static void put_llama_block(FILE *f, const ImportModel *m) {
    bool phi = m->fam == FAM_PHI3, qk_norm = m->fam == FAM_QWEN3, qb = m->qkv_bias, mb = m->mlp_bias;
    fputs("  block decoder(x [B, S, dim]) as \"model.layers.{i}\" {\n", f);
    put_param(f, "    ", "attn_norm [dim]", "input_layernorm.weight");
    if (phi) {
        put_param(f, "    ", "wqkv [(heads + 2 * kv_heads) * head_dim, dim]", "self_attn.qkv_proj.weight");
    } else {
        put_qkv_params(f, m);
    }
    put_o_params(f, m, qk_norm);
    put_param(f, "    ", "mlp_norm [dim]", "post_attention_layernorm.weight");
    if (phi) {
        put_param(f, "    ", "wgu [2 * ffn, dim]", "mlp.gate_up_proj.weight");
    } else {
        put_param(f, "    ", "wg [ffn, dim]", "mlp.gate_proj.weight");
        if (mb)
            put_param(f, "    ", "bg [ffn]", "mlp.gate_proj.bias");
        put_param(f, "    ", "wu [ffn, dim]", "mlp.up_proj.weight");
        if (mb)
            put_param(f, "    ", "bu [ffn]", "mlp.up_proj.bias");
    }
    put_param(f, "    ", "wd [dim, ffn]", "mlp.down_proj.weight");
    if (mb)
        put_param(f, "    ", "bd [dim]", "mlp.down_proj.bias");
    fputc('\n', f);
    if (mixed_layers(m))
        put_full_list(f, m);
    fputs("    h = rmsnorm(x, attn_norm, eps)\n", f);
    char qx[160], kx[160];
    if (phi) {
        fputs("    qkv = linear(h, wqkv)\n", f);
        snprintf(qx, sizeof qx, "view(slice(qkv, 2, 0, heads * head_dim), [B, S, heads, head_dim])");
        snprintf(kx, sizeof kx, "view(slice(qkv, 2, heads * head_dim, kv_heads * head_dim), "
                                "[B, S, kv_heads, head_dim])");
    } else {
        snprintf(qx, sizeof qx, "view(linear(h, wq%s), [B, S, heads, head_dim])", qb ? ", bq" : "");
        snprintf(kx, sizeof kx, "view(linear(h, wk%s), [B, S, kv_heads, head_dim])", qb ? ", bk" : "");
    }
    put_qk(f, m, qx, kx, qk_norm, "eps");
    if (phi)
        fputs("\n    v = view(slice(qkv, 2, (heads + kv_heads) * head_dim, kv_heads * head_dim), "
              "[B, S, kv_heads, head_dim])\n", f);
    else
        fprintf(f, "\n    v = view(linear(h, wv%s), [B, S, kv_heads, head_dim])\n", qb ? ", bv" : "");
    fputs("    a = ", f);
    put_attention(f, m);
    fputs("\n    x = x + ", f);
    put_drop_open(f, m->resid_drop);
    fputs("linear(view(a, [B, S, heads * head_dim])", f);
    put_w(f, "wo", "bo", m->o_bias);
    put_drop_close(f, m->resid_drop);
    fputs("\n    h = rmsnorm(x, mlp_norm, eps)\n", f);
    if (phi)
        fputs("    gu = linear(h, wgu)\n", f);
    fputs("    return x + ", f);
    put_drop_open(f, m->resid_drop);
    if (phi) {
        fputs("linear(silu(slice(gu, 2, 0, ffn)) * slice(gu, 2, ffn, ffn), wd)", f);
    } else {
        fputs("linear(silu(linear(h", f);
        put_w(f, "wg", "bg", mb);
        fputs(") * linear(h", f);
        put_w(f, "wu", "bu", mb);
        put_w(f, "wd", "bd", mb);
    }
    put_drop_close(f, m->resid_drop);
    fputs("\n  }\n\n", f);
}

//
// Gemma, Gemma 2, Gemma 3: (1 + w) norms, GeGLU; Gemma 2 and 3 norm each branch's output.
//

static void put_gemma_block(FILE *f, const ImportModel *m) {
    bool two = m->fam != FAM_GEMMA, qk_norm = m->fam == FAM_GEMMA3, qb = m->qkv_bias;
    fputs("  block decoder(x [B, S, dim]) as \"model.layers.{i}\" {\n", f);
    put_param(f, "    ", "attn_norm [dim]", "input_layernorm.weight");
    put_qkv_params(f, m);
    put_o_params(f, m, qk_norm);
    if (two) {
        put_param(f, "    ", "post_attn_norm [dim]", "post_attention_layernorm.weight");
        put_param(f, "    ", "mlp_norm [dim]", "pre_feedforward_layernorm.weight");
        put_param(f, "    ", "post_mlp_norm [dim]", "post_feedforward_layernorm.weight");
    } else {
        put_param(f, "    ", "mlp_norm [dim]", "post_attention_layernorm.weight");
    }
    put_param(f, "    ", "wg [ffn, dim]", "mlp.gate_proj.weight");
    put_param(f, "    ", "wu [ffn, dim]", "mlp.up_proj.weight");
    put_param(f, "    ", "wd [dim, ffn]", "mlp.down_proj.weight");
    fputc('\n', f);
    if (mixed_layers(m))
        put_full_list(f, m);
    fputs("    h = rmsnorm(x, attn_norm, eps, offset = 1.0)\n", f);
    char qx[160], kx[160];
    snprintf(qx, sizeof qx, "view(linear(h, wq%s), [B, S, heads, head_dim])", qb ? ", bq" : "");
    snprintf(kx, sizeof kx, "view(linear(h, wk%s), [B, S, kv_heads, head_dim])", qb ? ", bk" : "");
    put_qk(f, m, qx, kx, qk_norm, "eps, offset = 1.0");
    fprintf(f, "\n    v = view(linear(h, wv%s), [B, S, kv_heads, head_dim])\n", qb ? ", bv" : "");
    fputs("    a = linear(view(", f);
    put_attention(f, m);
    fputs(", [B, S, heads * head_dim])", f);
    put_w(f, "wo", "bo", m->o_bias);
    const char *act = m->act == ACT_GELU_EXACT ? "gelu_exact" : "gelu";
    if (two) {
        fputs("\n    x = x + rmsnorm(a, post_attn_norm, eps, offset = 1.0)\n", f);
        fputs("    h = rmsnorm(x, mlp_norm, eps, offset = 1.0)\n", f);
        fprintf(f, "    return x + rmsnorm(linear(%s(linear(h, wg)) * linear(h, wu), wd), post_mlp_norm, "
                   "eps, offset = 1.0)\n", act);
    } else {
        fputs("\n    x = x + a\n", f);
        fputs("    h = rmsnorm(x, mlp_norm, eps, offset = 1.0)\n", f);
        fprintf(f, "    return x + linear(%s(linear(h, wg)) * linear(h, wu), wd)\n", act);
    }
    fputs("  }\n\n", f);
}

//
// GPT-2 and GPT-NeoX: LayerNorm with biases, a GeLU MLP, fused qkv.
//

static void put_gpt2_block(FILE *f, const ImportModel *m) {
    const char *act = m->act == ACT_GELU_EXACT ? "gelu_exact" : "gelu";
    fputs("  block decoder(x [B, S, dim]) as \"transformer.h.{i}\" {\n", f);
    put_param(f, "    ", "ln1_w [dim]", "ln_1.weight");
    put_param(f, "    ", "ln1_b [dim]", "ln_1.bias");
    put_param(f, "    ", "attn_w [dim, 3 * dim]", "attn.c_attn.weight");
    put_param(f, "    ", "attn_b [3 * dim]", "attn.c_attn.bias");
    put_param(f, "    ", "proj_w [dim, dim]", "attn.c_proj.weight");
    put_param(f, "    ", "proj_b [dim]", "attn.c_proj.bias");
    put_param(f, "    ", "ln2_w [dim]", "ln_2.weight");
    put_param(f, "    ", "ln2_b [dim]", "ln_2.bias");
    put_param(f, "    ", "fc_w [dim, ffn]", "mlp.c_fc.weight");
    put_param(f, "    ", "fc_b [ffn]", "mlp.c_fc.bias");
    put_param(f, "    ", "out_w [ffn, dim]", "mlp.c_proj.weight");
    put_param(f, "    ", "out_b [dim]", "mlp.c_proj.bias");
    fputs("\n    # Conv1D weights are stored [in, out]: y = x W + b\n", f);
    fputs("    qkv = matmul(layernorm(x, ln1_w, ln1_b, eps), attn_w) + attn_b\n", f);
    fputs("    q = view(slice(qkv, 2, 0, dim), [B, S, heads, head_dim])\n", f);
    fputs("    k = view(slice(qkv, 2, dim, dim), [B, S, heads, head_dim])\n", f);
    fputs("    v = view(slice(qkv, 2, 2 * dim, dim), [B, S, heads, head_dim])\n", f);
    fputs("    a = ", f);
    put_attention(f, m);
    fputs("\n    x = x + ", f);
    put_drop_open(f, m->resid_drop);
    fputs(m->resid_drop > 0 ? "" : "(", f);
    fputs("matmul(view(a, [B, S, dim]), proj_w) + proj_b", f);
    fputs(m->resid_drop > 0 ? "" : ")", f);
    put_drop_close(f, m->resid_drop);
    fputs("\n    h = layernorm(x, ln2_w, ln2_b, eps)\n", f);
    fputs("    return x + ", f);
    put_drop_open(f, m->resid_drop);
    fputs(m->resid_drop > 0 ? "" : "(", f);
    fprintf(f, "matmul(%s(matmul(h, fc_w) + fc_b), out_w) + out_b", act);
    fputs(m->resid_drop > 0 ? "" : ")", f);
    put_drop_close(f, m->resid_drop);
    fputs("\n  }\n\n", f);
}

static void put_neox_block(FILE *f, const ImportModel *m) {
    const char *act = m->act == ACT_GELU_EXACT ? "gelu_exact" : "gelu";
    bool b = m->qkv_bias;
    fputs("  block decoder(x [B, S, dim]) as \"gpt_neox.layers.{i}\" {\n", f);
    put_param(f, "    ", "ln1_w [dim]", "input_layernorm.weight");
    put_param(f, "    ", "ln1_b [dim]", "input_layernorm.bias");
    put_param(f, "    ", "wqkv [3 * dim, dim]", "attention.query_key_value.weight");
    if (b)
        put_param(f, "    ", "bqkv [3 * dim]", "attention.query_key_value.bias");
    put_param(f, "    ", "wo [dim, dim]", "attention.dense.weight");
    if (b)
        put_param(f, "    ", "bo [dim]", "attention.dense.bias");
    put_param(f, "    ", "ln2_w [dim]", "post_attention_layernorm.weight");
    put_param(f, "    ", "ln2_b [dim]", "post_attention_layernorm.bias");
    put_param(f, "    ", "w1 [ffn, dim]", "mlp.dense_h_to_4h.weight");
    put_param(f, "    ", "b1 [ffn]", "mlp.dense_h_to_4h.bias");
    put_param(f, "    ", "w2 [dim, ffn]", "mlp.dense_4h_to_h.weight");
    put_param(f, "    ", "b2 [dim]", "mlp.dense_4h_to_h.bias");
    fputs("\n    # q, k and v interleaved by head: [B, S, heads, 3 * head_dim]\n", f);
    fprintf(f, "    qkv = view(linear(layernorm(x, ln1_w, ln1_b, eps), wqkv%s), "
               "[B, S, heads, 3 * head_dim])\n", b ? ", bqkv" : "");
    fputs("    q = ", f);
    put_rope(f, m, "slice(qkv, 3, 0, head_dim)");
    fputs("\n    k = ", f);
    put_rope(f, m, "slice(qkv, 3, head_dim, head_dim)");
    fputs("\n    v = slice(qkv, 3, 2 * head_dim, head_dim)\n", f);
    fputs("    a = ", f);
    put_drop_open(f, m->resid_drop);
    fputs("linear(view(", f);
    put_attention(f, m);
    fputs(", [B, S, dim])", f);
    put_w(f, "wo", "bo", b);
    put_drop_close(f, m->resid_drop);
    fputc('\n', f);
    // parallel: both branches read the block's input; else the MLP reads x + a
    fputs(m->parallel_residual ? "    return x + a + " : "    x = x + a\n    return x + ", f);
    put_drop_open(f, m->resid_drop);
    fprintf(f, "linear(%s(linear(layernorm(x, ln2_w, ln2_b, eps), w1, b1)), w2, b2)", act);
    put_drop_close(f, m->resid_drop);
    fputs("\n  }\n\n", f);
}

// The model-level parameters and forward of each family.
static void put_model(FILE *f, const ImportModel *m) {
    const char *embed = "embed", *head = m->tied ? "embed" : "lm_head";
    switch (m->fam) {
    case FAM_GPT2:
        put_param(f, "  ", "wte [vocab, dim]", "transformer.wte.weight");
        put_param(f, "  ", "wpe [context, dim]", "transformer.wpe.weight");
        put_param(f, "  ", "lnf_w [dim]", "transformer.ln_f.weight");
        put_param(f, "  ", "lnf_b [dim]", "transformer.ln_f.bias");
        if (!m->tied)
            put_param(f, "  ", "lm_head [vocab, dim]", "lm_head.weight");
        fputc('\n', f);
        put_gpt2_block(f, m);
        embed = "wte", head = m->tied ? "wte" : "lm_head";
        break;
    case FAM_NEOX:
        put_param(f, "  ", "embed [vocab, dim]", "gpt_neox.embed_in.weight");
        put_param(f, "  ", "final_w [dim]", "gpt_neox.final_layer_norm.weight");
        put_param(f, "  ", "final_b [dim]", "gpt_neox.final_layer_norm.bias");
        if (!m->tied)
            put_param(f, "  ", "lm_head [vocab, dim]", "embed_out.weight");
        fputc('\n', f);
        put_neox_block(f, m);
        break;
    default:
        put_param(f, "  ", "embed [vocab, dim]", "model.embed_tokens.weight");
        put_param(f, "  ", "final_norm [dim]", "model.norm.weight");
        if (!m->tied)
            put_param(f, "  ", "lm_head [vocab, dim]", "lm_head.weight");
        fputc('\n', f);
        if (is_gemma(m))
            put_gemma_block(f, m);
        else
            put_llama_block(f, m);
        break;
    }
    fputs("  forward(tokens i32[B, S]) {\n    x = repeat(layers) decoder(", f);
    put_drop_open(f, m->embd_drop);
    if (m->fam == FAM_GPT2)
        fputs("wte[tokens] + wpe[positions]", f);
    else if (m->pad)   // the padding id's rows take no gradient
        fprintf(f, "embed(%s, tokens, padding = %lld)", embed, (long long)(m->pad - 1));
    else
        fprintf(f, "%s[tokens]", embed);
    if (m->embed_scale > 0) {
        fputs(" * ", f);
        put_float(f, m->embed_scale);
    }
    put_drop_close(f, m->embd_drop);
    fputs(")\n    return ", f);
    if (m->final_softcap > 0)
        fputs("softcap(", f);
    if (m->fam == FAM_GPT2)
        fprintf(f, "linear(layernorm(x, lnf_w, lnf_b, eps), %s)", head);
    else if (m->fam == FAM_NEOX)
        fprintf(f, "linear(layernorm(x, final_w, final_b, eps), %s)", head);
    else if (is_gemma(m))
        fprintf(f, "linear(rmsnorm(x, final_norm, eps, offset = 1.0), %s)", head);
    else
        fprintf(f, "linear(rmsnorm(x, final_norm, eps), %s)", head);
    if (m->final_softcap > 0) {
        fputs(", ", f);
        put_float(f, m->final_softcap);
        fputc(')', f);
    }
    fputs("\n  }\n}\n\n", f);
}

enum { TRAIN_SEQ = 2048 };

// The modules LoRA adapts in the recipe: every projection of attention and the MLP, by the
// names the family's checkpoints give them.
static const char *lora_targets(ImportFamily f) {
    switch (f) {
    case FAM_PHI3: return "qkv_proj, o_proj, gate_up_proj, down_proj";
    case FAM_GPT2: return "c_attn, c_proj, c_fc";
    case FAM_NEOX: return "query_key_value, dense, dense_h_to_4h, dense_4h_to_h";
    default: return "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj";
    }
}

// The train section: a fine-tuning recipe, said so at its top, with LoRA's line to uncomment.
static void put_train(FILE *f, const ImportModel *m) {
    int64_t seq = m->max_pos && m->max_pos < TRAIN_SEQ ? m->max_pos : TRAIN_SEQ;
    fprintf(f, "train {\n"
               "  # A fine-tuning recipe to edit: records packed into windows of seq tokens, each\n"
               "  # attending to itself alone (ftc data --pack %lld); full fine-tuning at lr 2e-5 in\n"
               "  # bf16, a linear warm-up over the first 3%% of the steps, then a cosine decay;\n"
               "  # gradients clipped to a norm of 1. Set steps to the run's length: the data's\n"
               "  # windows over batch, times the epochs.\n"
               "  seq          = %lld\n"
               "  batch        = 16\n"
               "  packing      = true\n"
               "  loss         = cross_entropy(forward(tokens), next(tokens))\n"
               "  precision    = bf16\n"
               "  optimizer    = adamw(lr = 2e-5, betas = (0.9, 0.999), eps = 1e-8, weight_decay = 0.0)\n"
               "  lr_schedule  = cosine\n"
               "  warmup_steps = 30\n"
               "  steps        = 1000\n"
               "  clip         = 1.0\n"
               "  # LoRA instead: uncomment the line below and set lr = 2e-4 above\n"
               "  # lora(r = 16, alpha = 32, dropout = 0.05, targets = [%s])\n"
               "}\n", (long long)seq, (long long)seq, lora_targets(m->fam));
}

void import_write(FILE *f, const ImportModel *m, const char *file) {
    put_header(f, m, file);
    fprintf(f, "model %s {\n", m->model_type);
    put_constants(f, m);
    put_model(f, m);
    put_train(f, m);
}
