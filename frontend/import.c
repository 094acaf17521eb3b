// import.c — `ftc import`: a Hugging Face config.json (Qwen2, Llama, Mistral) to a .ft file
// laid out like models/qwen2.ft. What that layout cannot express (rope_scaling, activations
// other than SiLU) is an error, never silently dropped. Nothing reaches `out` unless the
// whole import succeeds.
#include "frontend.h"

#include <jansson.h>

typedef enum WindowRule {
    WIN_NONE,       // the architecture has no sliding window (Llama)
    WIN_KEY,        // "sliding_window" (default 4096) unless null (Mistral)
    WIN_SWITCHED,   // "sliding_window" only when "use_sliding_window" is true (Qwen2)
} WindowRule;

typedef struct Arch {
    const char *model_type;     // config "model_type"; also the .ft model name
    const char *class_name;     // config "architectures"[0]
    bool qkv_bias;              // q/k/v biases always (Qwen2)
    bool reads_biases;          // "attention_bias" (q/k/v/o) and "mlp_bias" apply (Llama)
    WindowRule window;
} Arch;

static const Arch archs[] = {
    {"qwen2", "Qwen2ForCausalLM", true, false, WIN_SWITCHED},
    {"llama", "LlamaForCausalLM", false, true, WIN_NONE},
    {"mistral", "MistralForCausalLM", false, false, WIN_KEY},
};

enum { DEFAULT_WINDOW = 4096, TRAIN_SEQ = 2048 };

typedef struct HfConfig {
    const Arch *arch;
    json_int_t vocab, dim, ffn, layers, heads, kv_heads;
    json_int_t head_dim;        // 0: dim / heads
    double eps, theta;
    bool tied, qkv_bias, o_bias, mlp_bias;
    json_int_t max_pos;         // 0 when not given
    json_int_t window;          // sliding window in effect; 0 for none
} HfConfig;

// The location of byte `off` of `src`, underlining `len` bytes.
static SrcLoc loc_at(const FtSource *src, size_t off, int len) {
    SrcLoc l = {src->path, 1, 1, len > 0 ? len : 1};
    for (size_t i = 0; i < off && i < src->len; i++) {
        if (src->text[i] == '\n') {
            l.line++;
            l.col = 1;
        } else {
            l.col++;
        }
    }
    return l;
}

// The end (one past the closing quote) of the JSON string that opens at `text[i]`.
static size_t string_end(const char *text, size_t len, size_t i) {
    for (i++; i < len && text[i] != '"'; i++)
        if (text[i] == '\\')
            i++;
    return i < len ? i + 1 : len;
}

// The location of `"key"` as a key of the top-level object of the (valid) JSON in `src`;
// 1:1 when it is not there.
static SrcLoc key_loc(const FtSource *src, const char *key) {
    const char *t = src->text;
    size_t klen = strlen(key);
    int depth = 0;
    for (size_t i = 0; i < src->len; i++) {
        if (t[i] == '{' || t[i] == '[') {
            depth++;
        } else if (t[i] == '}' || t[i] == ']') {
            depth--;
        } else if (t[i] == '"') {
            size_t end = string_end(t, src->len, i), j = end;
            while (j < src->len && strchr(" \t\r\n", t[j]))
                j++;
            if (depth == 1 && j < src->len && t[j] == ':' && end - i == klen + 2 &&
                memcmp(t + i + 1, key, klen) == 0)
                return loc_at(src, i, (int)klen + 2);
            i = end - 1;
        }
    }
    return loc_at(src, 0, 1);
}

// Reports jansson's error `e`, underlining the token it names ("... near 'tok'") when that
// token ends where jansson stopped reading.
static void syntax_error(FtSource *src, const json_error_t *e) {
    size_t end = e->position > 0 ? (size_t)e->position : 0;
    if (end > src->len)
        end = src->len;
    size_t start = end > 0 ? end - 1 : 0, tok_len = 1;
    const char *near = strstr(e->text, " near '");
    size_t text_len = strlen(e->text);
    if (near && text_len > 0 && e->text[text_len - 1] == '\'') {
        const char *tok = near + strlen(" near '");
        size_t n = (size_t)(e->text + text_len - 1 - tok);
        if (n > 0 && n <= end && memcmp(src->text + end - n, tok, n) == 0) {
            start = end - n;
            tok_len = n;
        }
    }
    fe_error(src, loc_at(src, start, (int)tok_len), "invalid JSON: %s", e->text);
}

// Reports that the required key `key` is absent, at 1:1.
static int missing(FtSource *src, const char *key) {
    fe_error(src, loc_at(src, 0, 1), "missing key \"%s\"", key);
    return -1;
}

// The value of `key` in `root`, NULL when absent; sets `*is_null` when the value is null.
static json_t *lookup(json_t *root, const char *key, bool *is_null) {
    json_t *v = json_object_get(root, key);
    *is_null = json_is_null(v);
    return *is_null ? NULL : v;
}

// Reads the positive integer `key` of `root` into `*out`; when absent or null, a required
// key is an error and an optional one takes `dflt`. Returns 0 or -1.
static int read_int(FtSource *src, json_t *root, const char *key, bool required,
                    json_int_t dflt, json_int_t *out) {
    bool is_null;
    json_t *v = lookup(root, key, &is_null);
    if (!v && !required) {
        *out = dflt;
        return 0;
    }
    if (!v && !is_null)
        return missing(src, key);
    if (!json_is_integer(v) || json_integer_value(v) <= 0) {
        fe_error(src, key_loc(src, key), "\"%s\" must be a positive integer", key);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

// Reads the positive number `key` of `root` into `*out`, `dflt` when absent or null.
static int read_real(FtSource *src, json_t *root, const char *key, double dflt, double *out) {
    bool is_null;
    json_t *v = lookup(root, key, &is_null);
    *out = v ? json_number_value(v) : dflt;
    if (v && (!json_is_number(v) || !(*out > 0))) {
        fe_error(src, key_loc(src, key), "\"%s\" must be a positive number", key);
        return -1;
    }
    return 0;
}

// Reads the boolean `key` of `root` into `*out`, `dflt` when absent or null.
static int read_bool(FtSource *src, json_t *root, const char *key, bool dflt, bool *out) {
    bool is_null;
    json_t *v = lookup(root, key, &is_null);
    *out = v ? json_is_true(v) : dflt;
    if (v && !json_is_boolean(v)) {
        fe_error(src, key_loc(src, key), "\"%s\" must be true or false", key);
        return -1;
    }
    return 0;
}

// Reads the string `key` of `root` into `*out` (NULL when absent or null).
static int read_str(FtSource *src, json_t *root, const char *key, const char **out) {
    bool is_null;
    json_t *v = lookup(root, key, &is_null);
    *out = json_string_value(v);
    if (v && !*out) {
        fe_error(src, key_loc(src, key), "\"%s\" must be a string", key);
        return -1;
    }
    return 0;
}

// The architecture named by "model_type" and/or "architectures"[0] of `root`, which must
// agree; NULL after an error.
static const Arch *read_arch(FtSource *src, json_t *root) {
    const char *type, *cls = NULL;
    if (read_str(src, root, "model_type", &type) != 0)
        return NULL;
    bool is_null;
    json_t *list = lookup(root, "architectures", &is_null);
    if (list && !(cls = json_string_value(json_array_get(list, 0)))) {
        fe_error(src, key_loc(src, "architectures"),
                 "\"architectures\" must be a list of class names");
        return NULL;
    }
    if (!type && !cls) {
        missing(src, "model_type");
        return NULL;
    }
    const Arch *by_type = NULL, *by_class = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        if (type && strcmp(type, archs[i].model_type) == 0)
            by_type = &archs[i];
        if (cls && strcmp(cls, archs[i].class_name) == 0)
            by_class = &archs[i];
    }
    if (type && !by_type) {
        fe_error(src, key_loc(src, "model_type"),
                 "unsupported model_type \"%s\": ftc import knows qwen2, llama and mistral", type);
        return NULL;
    }
    if (cls && !by_class) {
        fe_error(src, key_loc(src, "architectures"),
                 "unsupported architecture \"%s\": ftc import knows Qwen2ForCausalLM, "
                 "LlamaForCausalLM and MistralForCausalLM", cls);
        return NULL;
    }
    if (by_type && by_class && by_type != by_class) {
        fe_error(src, key_loc(src, "architectures"),
                 "architecture \"%s\" does not match model_type \"%s\"", cls, type);
        fe_note(src, key_loc(src, "model_type"), "model_type is given here");
        return NULL;
    }
    return by_type ? by_type : by_class;
}

// Reads head counts and head_dim into `c`, checking that they divide as attention needs.
static void read_heads(FtSource *src, json_t *root, HfConfig *c, bool dim_ok) {
    if (read_int(src, root, "num_attention_heads", true, 0, &c->heads) != 0)
        return;
    if (read_int(src, root, "num_key_value_heads", false, c->heads, &c->kv_heads) == 0 &&
        c->heads % c->kv_heads != 0)
        fe_error(src, key_loc(src, "num_key_value_heads"),
                 "num_attention_heads (%" JSON_INTEGER_FORMAT ") is not a multiple of "
                 "num_key_value_heads (%" JSON_INTEGER_FORMAT ")", c->heads, c->kv_heads);
    if (read_int(src, root, "head_dim", false, 0, &c->head_dim) != 0 || !dim_ok)
        return;
    if (c->head_dim == 0 && c->dim % c->heads != 0)
        fe_error(src, key_loc(src, "num_attention_heads"),
                 "hidden_size (%" JSON_INTEGER_FORMAT ") is not a multiple of "
                 "num_attention_heads (%" JSON_INTEGER_FORMAT ") and there is no head_dim",
                 c->dim, c->heads);
    if (c->dim % c->heads == 0 && c->head_dim == c->dim / c->heads)
        c->head_dim = 0;
}

// Reads the sliding window that `c->arch` applies, for a comment only.
static void read_window(FtSource *src, json_t *root, HfConfig *c) {
    bool on = c->arch->window == WIN_KEY, is_null;
    if (c->arch->window == WIN_SWITCHED &&
        read_bool(src, root, "use_sliding_window", false, &on) != 0)
        return;
    lookup(root, "sliding_window", &is_null);
    c->window = 0;
    if (on && !is_null)
        read_int(src, root, "sliding_window", false, DEFAULT_WINDOW, &c->window);
}

// Fills `c` from the config `root`, reporting every problem found; 0 or -1.
static int read_config(FtSource *src, json_t *root, HfConfig *c) {
    if (!json_is_object(root)) {
        fe_error(src, loc_at(src, strspn(src->text, " \t\r\n"), 1),
                 "expected a JSON object (a config.json)");
        return -1;
    }
    memset(c, 0, sizeof *c);
    if (!(c->arch = read_arch(src, root)))
        return -1;
    read_int(src, root, "vocab_size", true, 0, &c->vocab);
    bool dim_ok = read_int(src, root, "hidden_size", true, 0, &c->dim) == 0;
    read_int(src, root, "intermediate_size", true, 0, &c->ffn);
    read_int(src, root, "num_hidden_layers", true, 0, &c->layers);
    read_heads(src, root, c, dim_ok);
    read_real(src, root, "rms_norm_eps", 1e-6, &c->eps);
    read_real(src, root, "rope_theta", 10000.0, &c->theta);
    // transformers 5 moved the rotary settings into "rope_parameters"
    json_t *rp = json_object_get(root, "rope_parameters");
    if (rp && !json_is_null(rp)) {
        json_t *type = json_object_get(rp, "rope_type");
        if (!json_is_object(rp) || (type && (!json_is_string(type) ||
                                             strcmp(json_string_value(type), "default") != 0)))
            fe_error(src, key_loc(src, "rope_parameters"),
                     "rope_parameters other than the default rope (rope scaling) are not supported");
        else if (json_object_get(rp, "rope_theta"))
            read_real(src, rp, "rope_theta", 10000.0, &c->theta);
    }
    read_bool(src, root, "tie_word_embeddings", false, &c->tied);
    read_int(src, root, "max_position_embeddings", false, 0, &c->max_pos);
    read_window(src, root, c);
    c->qkv_bias = c->arch->qkv_bias;
    if (c->arch->reads_biases) {
        read_bool(src, root, "attention_bias", false, &c->o_bias);
        c->qkv_bias = c->o_bias;
        read_bool(src, root, "mlp_bias", false, &c->mlp_bias);
    }
    const char *act;
    if (read_str(src, root, "hidden_act", &act) == 0 && act && strcmp(act, "silu") != 0)
        fe_error(src, key_loc(src, "hidden_act"),
                 "hidden_act \"%s\" is not supported: the .ft decoder uses silu (SwiGLU)", act);
    bool is_null;
    if (lookup(root, "rope_scaling", &is_null))
        fe_error(src, key_loc(src, "rope_scaling"),
                 "rope_scaling is not supported: the .ft rope() has no scaling");
    return src->errors ? -1 : 0;
}

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

// Writes what closes a linear call after its input: ", w<x>)", or ", w<x>, b<x>)" with `bias`.
static void put_weights(FILE *f, char x, bool bias) {
    if (bias)
        fprintf(f, ", w%c, b%c)", x, x);
    else
        fprintf(f, ", w%c)", x);
}

// Writes the comment that names the source file, the architecture and what is not modelled.
static void put_header(FILE *f, const HfConfig *c, const char *file) {
    const char *attn = c->kv_heads == c->heads ? "MHA" : c->kv_heads == 1 ? "MQA" : "GQA";
    const char *bias = c->o_bias ? ", q/k/v/o bias" : c->qkv_bias ? ", q/k/v bias" : "";
    fprintf(f, "# Imported by `ftc import` from %s (%s).\n", file, c->arch->class_name);
    fprintf(f, "# %s%s%s, RoPE, SwiGLU, %s lm_head", attn, bias, c->mlp_bias ? ", MLP bias" : "",
            c->tied ? "tied" : "untied");
    if (c->max_pos)
        fprintf(f, "; max_position_embeddings = %" JSON_INTEGER_FORMAT, c->max_pos);
    fputs(".\n", f);
    if (c->window)
        fprintf(f, "# sliding_window = %" JSON_INTEGER_FORMAT " is not modelled: attention is "
                "full causal, the same while seq <= %" JSON_INTEGER_FORMAT ".\n",
                c->window, c->window);
}

// Writes the model's constants, aligned as in models/qwen2.ft.
static void put_constants(FILE *f, const HfConfig *c) {
    fprintf(f, "  vocab    = %" JSON_INTEGER_FORMAT "\n", c->vocab);
    fprintf(f, "  dim      = %" JSON_INTEGER_FORMAT "\n", c->dim);
    fprintf(f, "  layers   = %" JSON_INTEGER_FORMAT "\n", c->layers);
    fprintf(f, "  heads    = %" JSON_INTEGER_FORMAT "\n", c->heads);
    fprintf(f, "  kv_heads = %" JSON_INTEGER_FORMAT "\n", c->kv_heads);
    if (c->head_dim)
        fprintf(f, "  head_dim = %" JSON_INTEGER_FORMAT "\n", c->head_dim);
    else
        fputs("  head_dim = dim / heads\n", f);
    fprintf(f, "  ffn      = %" JSON_INTEGER_FORMAT "\n", c->ffn);
    fputs("  eps      = ", f);
    put_float(f, c->eps);
    fputs("\n  theta    = ", f);
    put_float(f, c->theta);
    fputs("\n\n", f);
}

enum { ALWAYS, IF_QKV_BIAS, IF_O_BIAS, IF_MLP_BIAS };

// The decoder block's params in checkpoint order: declaration, HF name, when present.
static const struct { const char *decl, *hf_name; int when; } block_params[] = {
    {"attn_norm [dim]", "input_layernorm.weight", ALWAYS},
    {"wq [heads * head_dim, dim]", "self_attn.q_proj.weight", ALWAYS},
    {"bq [heads * head_dim]", "self_attn.q_proj.bias", IF_QKV_BIAS},
    {"wk [kv_heads * head_dim, dim]", "self_attn.k_proj.weight", ALWAYS},
    {"bk [kv_heads * head_dim]", "self_attn.k_proj.bias", IF_QKV_BIAS},
    {"wv [kv_heads * head_dim, dim]", "self_attn.v_proj.weight", ALWAYS},
    {"bv [kv_heads * head_dim]", "self_attn.v_proj.bias", IF_QKV_BIAS},
    {"wo [dim, heads * head_dim]", "self_attn.o_proj.weight", ALWAYS},
    {"bo [dim]", "self_attn.o_proj.bias", IF_O_BIAS},
    {"mlp_norm [dim]", "post_attention_layernorm.weight", ALWAYS},
    {"wg [ffn, dim]", "mlp.gate_proj.weight", ALWAYS},
    {"bg [ffn]", "mlp.gate_proj.bias", IF_MLP_BIAS},
    {"wu [ffn, dim]", "mlp.up_proj.weight", ALWAYS},
    {"bu [ffn]", "mlp.up_proj.bias", IF_MLP_BIAS},
    {"wd [dim, ffn]", "mlp.down_proj.weight", ALWAYS},
    {"bd [dim]", "mlp.down_proj.bias", IF_MLP_BIAS},
};

// Writes the decoder block: its params (biases as `c` has them) and its body.
static void put_block(FILE *f, const HfConfig *c) {
    const bool on[] = {[ALWAYS] = true, [IF_QKV_BIAS] = c->qkv_bias, [IF_O_BIAS] = c->o_bias,
                       [IF_MLP_BIAS] = c->mlp_bias};
    fputs("  block decoder(x [B, S, dim]) as \"model.layers.{i}\" {\n", f);
    for (size_t i = 0; i < sizeof block_params / sizeof block_params[0]; i++)
        if (on[block_params[i].when])
            fprintf(f, "    param %-38s as \"%s\"\n", block_params[i].decl,
                    block_params[i].hf_name);
    bool qkv = c->qkv_bias, m = c->mlp_bias;
    fputs("\n    h = rmsnorm(x, attn_norm, eps)\n", f);
    fputs("    q = rope(view(linear(h", f);
    put_weights(f, 'q', qkv);
    fputs(", [B, S, heads, head_dim]), theta)\n", f);
    fputs("    k = rope(view(linear(h", f);
    put_weights(f, 'k', qkv);
    fputs(", [B, S, kv_heads, head_dim]), theta)\n", f);
    fputs("    v = view(linear(h", f);
    put_weights(f, 'v', qkv);
    fputs(", [B, S, kv_heads, head_dim])\n", f);
    fputs("    a = attention(q, k, v, causal = true)\n", f);
    fputs("    x = x + linear(view(a, [B, S, heads * head_dim])", f);
    put_weights(f, 'o', c->o_bias);
    fputs("\n    h = rmsnorm(x, mlp_norm, eps)\n", f);
    fputs("    return x + linear(silu(linear(h", f);
    put_weights(f, 'g', m);
    fputs(") * linear(h", f);
    put_weights(f, 'u', m);
    put_weights(f, 'd', m);
    fputs("\n  }\n\n", f);
}

// Writes the whole .ft for `c`, imported from the file named `file`, to `f`.
static void put_ft(FILE *f, const HfConfig *c, const char *file) {
    put_header(f, c, file);
    fprintf(f, "model %s {\n", c->arch->model_type);
    put_constants(f, c);
    fprintf(f, "  param %-10s %-12s as \"%s\"\n", "embed", "[vocab, dim]",
            "model.embed_tokens.weight");
    fprintf(f, "  param %-10s %-12s as \"%s\"\n", "final_norm", "[dim]", "model.norm.weight");
    if (!c->tied)
        fprintf(f, "  param %-10s %-12s as \"%s\"\n", "lm_head", "[vocab, dim]",
                "lm_head.weight");
    fputs("\n", f);
    put_block(f, c);
    fputs("  forward(tokens i32[B, S]) {\n"
          "    x = repeat(layers) decoder(embed[tokens])\n", f);
    fprintf(f, "    return linear(rmsnorm(x, final_norm, eps), %s)\n",
            c->tied ? "embed" : "lm_head");
    fputs("  }\n}\n\n", f);
    json_int_t seq = c->max_pos && c->max_pos < TRAIN_SEQ ? c->max_pos : TRAIN_SEQ;
    fprintf(f, "train {\n"
               "  seq       = %" JSON_INTEGER_FORMAT "\n"
               "  batch     = 32\n"
               "  loss      = cross_entropy(forward(tokens), next(tokens))\n"
               "  precision = bf16\n"
               "  optimizer = adamw(lr = 2e-4, betas = (0.9, 0.999), eps = 1e-8, "
               "weight_decay = 0.0)\n"
               "}\n", seq);
}

// Renders the .ft for `c` into a heap buffer (`*len` bytes); NULL after reporting an error.
static char *render(FtSource *src, const HfConfig *c, const char *file, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) {
        fe_error(src, (SrcLoc){0}, "cannot render the .ft: %s", strerror(errno));
        return NULL;
    }
    put_ft(f, c, file);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        fe_error(src, (SrcLoc){0}, "cannot render the .ft: out of memory");
        free(buf);
        return NULL;
    }
    return buf;
}

// Imports the config.json at `path`, writing the .ft to `out` only when all went well.
int fe_import(const char *path, FILE *out) {
    FtSource src;
    if (fe_source_read(&src, path) != 0) {
        fe_error(&src, (SrcLoc){0}, "cannot read: %s", strerror(errno));
        return 1;
    }
    json_error_t jerr;
    json_t *root = json_loadb(src.text, src.len, JSON_REJECT_DUPLICATES, &jerr);
    HfConfig c;
    char *text = NULL;
    size_t len = 0;
    const char *slash = strrchr(path, '/');
    if (!root)
        syntax_error(&src, &jerr);
    else if (read_config(&src, root, &c) == 0)
        text = render(&src, &c, slash ? slash + 1 : path, &len);
    if (text && fwrite(text, 1, len, out) != len)
        fe_error(&src, (SrcLoc){0}, "cannot write the .ft: %s", strerror(errno));
    int rc = src.errors ? 1 : 0;
    free(text);
    json_decref(root);
    fe_source_free(&src);
    return rc;
}
