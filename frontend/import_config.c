// import_config.c — the config.json of a .ft, ftc import's inverse: the model recognised by
// its section's name (a model_type of import.c's family table), its sizes, biases, ropes,
// windows and the rest read back from its forward graph into an ImportModel, then written
// as transformers writes a config of that family, under the table's keys. What ftc import
// reads, this writes, so that importing the written config gives the .ft again.
#include "import.h"

#include <jansson.h>
#include <math.h>

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static const ImportFamilyInfo *family_named(const char *model_type) {
    for (int i = 0; i < FAM_COUNT; i++)
        if (strcmp(model_type, import_families[i].model_type) == 0)
            return &import_families[i];
    return NULL;
}

// The integer constant `name` of the model section (max_pos: max_position_embeddings,
// which no op reads), or 0.
static int64_t constant(const FtModel *ft, const char *name) {
    for (const Ast *s = ft->program->body; s; s = s->next)
        for (const Ast *i = s->kind == AST_MODEL ? s->body : NULL; i; i = i->next)
            if (i->kind == AST_ASSIGN && strcmp(i->name, name) == 0 && i->lhs->kind == AST_INT)
                return i->lhs->ival;
    return 0;
}

// What the parameters say: the vocabulary and width (the embedding), the MLP's width, the
// head tied or not, which projections have biases, GPT-2's positions.
static void read_params(const IrGraph *g, ImportModel *m) {
    m->tied = true;
    for (int i = 0; i < g->tensors.len; i++) {
        const IrTensor *t = &g->tensors.at[i];
        const char *n = t->hf_name;
        if (t->kind != TK_PARAM || !n || t->layer > 0)   // (layer 0's stand for every layer's)
            continue;
        if (ends_with(n, "embed_tokens.weight") || ends_with(n, "wte.weight") || ends_with(n, "embed_in.weight"))
            m->vocab = t->shape[0], m->dim = t->shape[1];
        else if (!strcmp(n, "lm_head.weight") || !strcmp(n, "embed_out.weight"))
            m->tied = false;
        else if (ends_with(n, "wpe.weight"))
            m->max_pos = t->shape[0];
        else if (ends_with(n, "mlp.gate_proj.weight") || ends_with(n, "dense_h_to_4h.weight"))
            m->ffn = t->shape[0];
        else if (ends_with(n, "mlp.gate_up_proj.weight"))
            m->ffn = t->shape[0] / 2;
        else if (ends_with(n, "mlp.c_fc.weight"))
            m->ffn = t->shape[1];
        m->qkv_bias |= ends_with(n, "q_proj.bias") || ends_with(n, "query_key_value.bias");
        m->o_bias |= ends_with(n, "o_proj.bias") || ends_with(n, "attention.dense.bias");
        m->mlp_bias |= ends_with(n, "gate_proj.bias") || ends_with(n, "down_proj.bias");
    }
    if (m->fam == FAM_GPT2)
        m->qkv_bias = m->o_bias = m->mlp_bias = true;
    if (m->fam == FAM_NEOX)
        m->mlp_bias = true;
}

// One attention node: the heads of its query and keys, and its layer's window and scale.
static void read_attention(const IrGraph *g, const IrNode *n, ImportModel *m, double *scale) {
    const IrTensor *q = &g->tensors.at[n->in[0]], *k = &g->tensors.at[n->in[1]];
    m->heads = q->shape[2], m->kv_heads = k->shape[2], m->head_dim = q->shape[3];
    m->sliding[n->layer] = n->attr.window > 0;
    if (n->attr.window > m->window)
        m->window = n->attr.window;
    m->attn_softcap = n->attr.softcap;
    scale[n->layer] = n->attr.scale;
}

// A rope: the full-attention layers' in m->rope, the sliding ones' in m->rope_local (Gemma 3;
// the other families have one).
static void read_rope_node(const IrNode *n, ImportModel *m) {
    ImportRope r = {.theta = n->attr.f, .r = n->attr.rope};
    r.r.length = 0;
    if (m->fam == FAM_GEMMA3 && n->layer >= 0 && n->layer < IMPORT_MAX_LAYERS && m->sliding[n->layer])
        m->rope_local = r;
    else
        m->rope = r;
}

// The ops of the forward graph; the ropes after every layer's window is known (Gemma 3's
// sliding layers have a rope of their own).
static void read_nodes(const IrGraph *g, ImportModel *m, double *scale) {
    int norms = 0, ln_in[2] = {-1, -1};
    for (int i = 0; i < g->nodes.len; i++) {
        const IrNode *n = &g->nodes.at[i];
        if (n->phase != PHASE_FORWARD)
            continue;
        switch (n->op) {
        case OP_ATTENTION:
            if (n->layer < 0 || n->layer >= IMPORT_MAX_LAYERS) {
                m->layers = IMPORT_MAX_LAYERS + 1;   // (refused by model_of)
                return;
            }
            read_attention(g, n, m, scale);
            m->layers = n->layer + 1;
            break;
        case OP_RMSNORM:
        case OP_LAYERNORM:
            m->eps = n->attr.f;
            if (n->layer == 0 && norms < 2)
                ln_in[norms++] = n->in[0];
            break;
        case OP_GELU: m->act = ACT_GELU_TANH; break;
        case OP_GELU_EXACT: m->act = ACT_GELU_EXACT; break;
        case OP_EMBED: m->pad = n->layer < 0 ? n->attr.pad : m->pad; break;
        case OP_DROPOUT: *(n->layer < 0 ? &m->embd_drop : &m->resid_drop) = n->attr.f; break;
        case OP_SOFTCAP: m->final_softcap = n->layer < 0 ? n->attr.f : m->final_softcap; break;
        default: break;
        }
    }
    for (int i = 0; i < g->nodes.len; i++)
        if (g->nodes.at[i].op == OP_ROPE && g->nodes.at[i].phase == PHASE_FORWARD)
            read_rope_node(&g->nodes.at[i], m);
    m->parallel_residual = m->fam == FAM_NEOX && ln_in[0] >= 0 && ln_in[0] == ln_in[1];
}

// The scale of the scores: GPT-2's by layer (scale / (layer + 1)), or one for every layer.
static void read_scale(ImportModel *m, const double *scale) {
    double base = 1.0 / sqrt((double)m->head_dim);
    m->scale_by_layer = m->fam == FAM_GPT2 && m->layers > 1 && scale[0] > 0 && scale[1] == scale[0] / 2;
    m->attn_scale = scale[0] == base && m->scale_by_layer ? 0 : scale[0];
}

// Reads the model `ft` and its forward graph `g` into m; -1 with why when it is of no
// family ftc import writes, or lacks what a config needs.
static int model_of(const FtModel *ft, const IrGraph *g, ImportModel *m, char *why, size_t len) {
    const ImportFamilyInfo *f = family_named(ft->name);
    if (!f)
        return snprintf(why, len, "model %s is of no family ftc import writes (llama, qwen2, qwen3, mistral, "
                        "gemma, gemma2, gemma3_text, phi3, gpt2, gpt_neox)", ft->name), -1;
    memset(m, 0, sizeof *m);
    m->fam = f->fam, m->model_type = f->model_type, m->class_name = f->class_name;
    double *scale = xcalloc(IMPORT_MAX_LAYERS, sizeof(double));
    read_params(g, m);
    read_nodes(g, m, scale);
    if (m->layers > IMPORT_MAX_LAYERS)
        return free(scale), snprintf(why, len, "model %s: an attention outside the layers, or more than %d layers",
                                     ft->name, IMPORT_MAX_LAYERS), -1;
    if (m->layers > 0)
        read_scale(m, scale);
    free(scale);
    if (!m->vocab || !m->layers || !m->heads || !m->ffn)
        return snprintf(why, len, "model %s: no embedding, attention or MLP of a %s model found", ft->name,
                        f->model_type), -1;
    if (m->head_dim * m->heads == m->dim)
        m->head_dim = 0;
    if (m->fam != FAM_GPT2)
        m->max_pos = constant(ft, "max_pos");
    if (m->rope.r.scaling == ROPE_DYNAMIC && !m->max_pos)
        m->max_pos = m->rope.r.original;   // (what dynamic grows past)
    if (m->fam == FAM_GEMMA || m->fam == FAM_GEMMA2 || m->fam == FAM_GEMMA3)
        m->embed_scale = sqrt((double)m->dim);
    return 0;
}

//
// The config, as transformers writes one of the family.
//

static void set_int(json_t *o, const char *key, int64_t v) { json_object_set_new(o, key, json_integer(v)); }
static void set_real(json_t *o, const char *key, double v) { json_object_set_new(o, key, json_real(v)); }
static void set_bool(json_t *o, const char *key, bool v) { json_object_set_new(o, key, json_boolean(v)); }
static void set_str(json_t *o, const char *key, const char *v) { json_object_set_new(o, key, json_string(v)); }
// A positive number, or null for none.
static void set_opt(json_t *o, const char *key, double v) {
    json_object_set_new(o, key, v > 0 ? json_real(v) : json_null());
}

static int64_t head_dim(const ImportModel *m) { return m->head_dim ? m->head_dim : m->dim / m->heads; }

// The sizes, under the family's keys.
static void put_sizes(json_t *o, const ImportModel *m, const ImportFamilyInfo *f) {
    set_int(o, "vocab_size", m->vocab);
    set_int(o, f->dim, m->dim);
    set_int(o, f->ffn, m->ffn);
    set_int(o, f->layers, m->layers);
    set_int(o, f->heads, m->heads);
    if (f->kv_heads)
        set_int(o, f->kv_heads, m->kv_heads);
    if (m->fam != FAM_PHI3 && m->fam != FAM_GPT2 && m->fam != FAM_NEOX)
        set_int(o, "head_dim", head_dim(m));
    set_real(o, f->eps, m->eps);
    if (m->max_pos)
        set_int(o, f->max_pos, m->max_pos);
    set_bool(o, "tie_word_embeddings", m->tied);
}

// The activation, under the family's key and in its spelling.
static void put_act(json_t *o, const ImportModel *m) {
    bool exact = m->act == ACT_GELU_EXACT;
    switch (m->fam) {
    case FAM_GEMMA: set_str(o, "hidden_act", "gelu_pytorch_tanh"); break;
    case FAM_GEMMA2:
    case FAM_GEMMA3: set_str(o, "hidden_activation", exact ? "gelu" : "gelu_pytorch_tanh"); break;
    case FAM_GPT2: set_str(o, "activation_function", exact ? "gelu" : "gelu_new"); break;
    case FAM_NEOX: set_str(o, "hidden_act", exact ? "gelu" : "gelu_new"); break;
    default: set_str(o, "hidden_act", "silu"); break;
    }
}

// A rope's scaling, as transformers 4's rope_scaling dict (null for none).
static json_t *rope_scaling(const OpRope *r) {
    if (r->scaling == ROPE_PLAIN)
        return json_null();
    json_t *d = json_object();
    set_str(d, "rope_type", rope_scaling_name(r->scaling));
    set_real(d, "factor", r->factor);
    if (r->scaling == ROPE_LLAMA3)
        set_real(d, "low_freq_factor", r->low), set_real(d, "high_freq_factor", r->high);
    if (r->scaling == ROPE_YARN && r->low > 0)
        set_real(d, "beta_fast", r->low);
    if (r->scaling == ROPE_YARN && r->high > 0)
        set_real(d, "beta_slow", r->high);
    if (r->scaling == ROPE_LLAMA3 || r->scaling == ROPE_YARN)
        set_int(d, "original_max_position_embeddings", r->original);
    if (r->scaling == ROPE_YARN && r->attn_factor > 0)
        set_real(d, "attention_factor", r->attn_factor);
    if (r->scaling == ROPE_YARN && r->no_truncate)
        set_bool(d, "truncate", false);
    return d;
}

// The share of head_dim that rotates, as a factor ftc import turns back into the same dims
// (transformers' int(head_dim * factor)).
static double rotary_factor(const OpRope *r, int64_t hd) {
    if (!r->rotary)
        return 1.0;
    double f = (double)r->rotary / (double)hd;
    while ((int64_t)((double)hd * f) < r->rotary)
        f = nextafter(f, 2.0);
    return f;
}

static void put_rope(json_t *o, const ImportModel *m) {
    if (m->fam == FAM_GPT2)
        return;
    if (m->rope.theta > 0)
        set_real(o, "rope_theta", m->rope.theta);
    json_object_set_new(o, "rope_scaling", rope_scaling(&m->rope.r));
    const ImportRope *r = m->fam == FAM_GEMMA3 && m->rope.theta == 0 ? &m->rope_local : &m->rope;
    double partial = rotary_factor(&r->r, head_dim(m));
    if (m->fam == FAM_NEOX)
        set_real(o, "rotary_pct", partial);
    else if (partial != 1.0)
        set_real(o, "partial_rotary_factor", partial);
    if (m->fam == FAM_GEMMA3)
        set_real(o, "rope_local_base_freq", m->rope_local.theta > 0 ? m->rope_local.theta : 10000.0);
}

// Whether layer i's window follows `pattern` for every layer: Qwen's from the layer
// max_window_layers (kind 0), Gemma's all but every pattern-th (kind 1).
static bool windows_follow(const ImportModel *m, int kind, int64_t pattern) {
    for (int64_t i = 0; i < m->layers; i++)
        if (m->sliding[i] != (kind == 0 ? i >= pattern : (i + 1) % pattern != 0))
            return false;
    return true;
}

// layer_types: each layer's "sliding_attention" or "full_attention".
static json_t *layer_types(const ImportModel *m) {
    json_t *a = json_array();
    for (int64_t i = 0; i < m->layers; i++)
        json_array_append_new(a, json_string(m->sliding[i] ? "sliding_attention" : "full_attention"));
    return a;
}

// The sliding window, and which layers attend through it, in the family's keys.
static void put_windows(json_t *o, const ImportModel *m) {
    bool any = m->window > 0;
    switch (m->fam) {
    case FAM_QWEN2:
    case FAM_QWEN3: {
        int64_t from = 0;
        while (from < m->layers && !m->sliding[from])
            from++;
        set_bool(o, "use_sliding_window", any);
        set_opt(o, "sliding_window", 0);
        if (!any)
            break;
        set_int(o, "sliding_window", m->window);
        set_int(o, "max_window_layers", from);
        if (!windows_follow(m, 0, from))
            json_object_set_new(o, "layer_types", layer_types(m));
        break;
    }
    case FAM_MISTRAL:
    case FAM_PHI3: json_object_set_new(o, "sliding_window", any ? json_integer(m->window) : json_null()); break;
    case FAM_GEMMA2:
    case FAM_GEMMA3: {
        json_object_set_new(o, "sliding_window", any ? json_integer(m->window) : json_null());
        int64_t pattern = m->fam == FAM_GEMMA2 ? 2 : 6;   // (Gemma 3's: the first that fits)
        for (int64_t p = 1; m->fam == FAM_GEMMA3 && p <= m->layers + 1 && !windows_follow(m, 1, pattern); p++)
            pattern = p;
        if (m->fam == FAM_GEMMA3 && windows_follow(m, 1, pattern))
            set_int(o, "sliding_window_pattern", pattern);
        if (!windows_follow(m, 1, pattern))
            json_object_set_new(o, "layer_types", layer_types(m));
        break;
    }
    default: break;
    }
}

// Biases, the padding row, dropouts, soft caps and scales: each family's own keys.
static void put_details(json_t *o, const ImportModel *m) {
    if (m->fam == FAM_LLAMA || m->fam == FAM_QWEN3 || m->fam == FAM_GEMMA || m->fam == FAM_GEMMA2 ||
        m->fam == FAM_GEMMA3 || m->fam == FAM_NEOX || m->fam == FAM_PHI3)
        set_bool(o, "attention_bias", m->qkv_bias);
    if (m->fam == FAM_LLAMA)
        set_bool(o, "mlp_bias", m->mlp_bias);
    if (m->fam != FAM_GPT2 && m->fam != FAM_NEOX)
        json_object_set_new(o, "pad_token_id", m->pad ? json_integer(m->pad - 1) : json_null());
    if (m->fam == FAM_PHI3 || m->fam == FAM_GPT2)
        set_real(o, "embd_pdrop", m->embd_drop), set_real(o, "resid_pdrop", m->resid_drop);
    if (m->fam == FAM_NEOX)
        set_real(o, "hidden_dropout", m->resid_drop), set_bool(o, "use_parallel_residual", m->parallel_residual);
    set_real(o, m->fam == FAM_GPT2 ? "attn_pdrop" : "attention_dropout", 0.0);
    if (m->fam == FAM_GEMMA2 || m->fam == FAM_GEMMA3) {
        set_opt(o, "attn_logit_softcapping", m->attn_softcap);
        set_opt(o, "final_logit_softcapping", m->final_softcap);
        if (m->attn_scale > 0)
            set_int(o, "query_pre_attn_scalar", llround(1.0 / (m->attn_scale * m->attn_scale)));
    }
    if (m->fam == FAM_GPT2) {
        set_bool(o, "scale_attn_weights", m->attn_scale != 1.0);
        set_bool(o, "scale_attn_by_inverse_layer_idx", m->scale_by_layer);
    }
}

// The fewest significant digits that write every number of `v` back exactly (so 1e-06
// reads as transformers writes it, and a computed factor keeps every bit).
static int digits_needed(json_t *v) {
    int most = 15;   // (at least: 1000000.0 stays that, not 1e+06)
    if (json_is_real(v)) {
        char s[40];
        double x = json_real_value(v);
        while (most < 17 && (snprintf(s, sizeof s, "%.*g", most, x), strtod(s, NULL) != x))
            most++;
    }
    const char *key;
    json_t *e;
    size_t i;
    if (json_is_object(v))
        json_object_foreach(v, key, e) {
            int d = digits_needed(e);
            most = d > most ? d : most;
        }
    if (json_is_array(v))
        json_array_foreach(v, i, e) {
            int d = digits_needed(e);
            most = d > most ? d : most;
        }
    return most;
}

int fe_hf_config(const FtModel *ft, const IrGraph *g, FILE *out, char *why, size_t whylen) {
    ImportModel *m = xcalloc(1, sizeof *m);
    if (model_of(ft, g, m, why, whylen) != 0)
        return free(m), 1;
    const ImportFamilyInfo *f = family_named(m->model_type);
    json_t *o = json_object(), *arch = json_array();
    json_array_append_new(arch, json_string(m->class_name));
    json_object_set_new(o, "architectures", arch);
    set_str(o, "model_type", m->model_type);
    set_str(o, "torch_dtype", "float32");
    put_sizes(o, m, f);
    put_act(o, m);
    put_rope(o, m);
    put_windows(o, m);
    put_details(o, m);
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(digits_needed(o)));
    int rc = text && fputs(text, out) >= 0 && fputc('\n', out) != EOF ? 0 : 1;
    if (rc)
        snprintf(why, whylen, "cannot write the config: %s", text ? strerror(errno) : "out of memory");
    free(text);
    json_decref(o);
    free(m);
    return rc;
}
