// import.c — `ftc import`: a Hugging Face config.json read into an ImportModel, which
// import_write.c turns into a .ft. Families: llama (Llama 1 to 3.x), qwen2, qwen3, mistral,
// gemma, gemma2, gemma3_text, phi3, gpt2, gpt_neox. Every key of the config is one the
// family's .ft models (its value changes what the .ft says, and a value the ops cannot say
// is an error at it), one that changes nothing a training step computes (token ids, caches,
// inference settings, the init of weights a checkpoint replaces), or an error at its place
// naming it: nothing is dropped in silence. The rope parameters are read in both forms,
// transformers 4's (rope_theta, rope_scaling) and 5's (rope_parameters, nested per layer
// type for Gemma 3). Nothing reaches `out` unless the whole import succeeds.
#include "import.h"

#include <jansson.h>
#include <math.h>

typedef ImportFamilyInfo Family;

// The one table between a config.json and a .ft: each family's model_type, class and the
// keys of its sizes, which ftc import reads and import_config.c writes back.
const ImportFamilyInfo import_families[FAM_COUNT] = {
#define LLAMA_KEYS "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", \
                   "num_key_value_heads", "rms_norm_eps", "max_position_embeddings"
    {"llama", "LlamaForCausalLM", FAM_LLAMA, LLAMA_KEYS},
    {"qwen2", "Qwen2ForCausalLM", FAM_QWEN2, LLAMA_KEYS},
    {"qwen3", "Qwen3ForCausalLM", FAM_QWEN3, LLAMA_KEYS},
    {"mistral", "MistralForCausalLM", FAM_MISTRAL, LLAMA_KEYS},
    {"gemma", "GemmaForCausalLM", FAM_GEMMA, LLAMA_KEYS},
    {"gemma2", "Gemma2ForCausalLM", FAM_GEMMA2, LLAMA_KEYS},
    {"gemma3_text", "Gemma3ForCausalLM", FAM_GEMMA3, LLAMA_KEYS},
    {"phi3", "Phi3ForCausalLM", FAM_PHI3, LLAMA_KEYS},
    {"gpt2", "GPT2LMHeadModel", FAM_GPT2, "n_embd", "n_inner", "n_layer", "n_head", NULL, "layer_norm_epsilon",
     "n_positions"},
    {"gpt_neox", "GPTNeoXForCausalLM", FAM_NEOX, "hidden_size", "intermediate_size", "num_hidden_layers",
     "num_attention_heads", NULL, "layer_norm_eps", "max_position_embeddings"},
#undef LLAMA_KEYS
};
enum { NFAMILIES = FAM_COUNT };

// Keys that change nothing a training step computes, in every family: names and versions,
// token ids, inference and output switches, labels of classification heads, the init of
// weights a checkpoint replaces (ftc's own initialisation is its own), and layouts that
// compute the same (pretraining_tp: a matmul cut in slices).
static const char *const inert[] = {
    "_name_or_path", "architectures", "model_type", "transformers_version", "dtype", "torch_dtype",
    "bos_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id",
    "use_cache", "cache_implementation", "output_attentions", "output_hidden_states",
    "return_dict", "id2label", "label2id", "problem_type", "num_labels", "finetuning_task",
    "task_specific_params", "tokenizer_class", "prefix", "initializer_range",
    "chunk_size_feed_forward", "pretraining_tp", "torchscript", "use_return_dict",
    "classifier_dropout", "is_decoder", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "n_ctx", "auto_map",
};

// The config and what has been read of it, for the keys left over at the end.
typedef struct Cfg {
    FtSource *src;
    json_t *root;
    const Family *fam;
    VEC(const char *) used;     // top-level keys read (the strings belong to root)
} Cfg;

//
// Locations in the JSON text.
//

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

static size_t skip_space(const char *t, size_t len, size_t i) {
    while (i < len && strchr(" \t\r\n", t[i]))
        i++;
    return i;
}

// Where member `key` of the (valid) JSON object opening at t[obj] starts (its quote), or
// `len` when it has none.
static size_t member_at(const char *t, size_t len, size_t obj, const char *key) {
    size_t klen = strlen(key);
    int depth = 0;
    for (size_t i = obj; i < len; i++) {
        if (t[i] == '{' || t[i] == '[') {
            depth++;
        } else if (t[i] == '}' || t[i] == ']') {
            if (--depth == 0)
                return len;
        } else if (t[i] == '"') {
            size_t end = string_end(t, len, i), j = skip_space(t, len, end);
            if (depth == 1 && j < len && t[j] == ':' && end - i == klen + 2 &&
                memcmp(t + i + 1, key, klen) == 0)
                return i;
            i = end - 1;
        }
    }
    return len;
}

// The location of the key `path[n - 1]`, the member of the object at path[0..n-1) from the
// top-level object; the innermost of them found when the path does not reach it (1:1 when
// not even the first).
static SrcLoc path_loc(const FtSource *src, const char *const *path, int n) {
    const char *t = src->text;
    size_t len = src->len, obj = skip_space(t, len, 0), at = len;
    SrcLoc l = loc_at(src, 0, 1);
    for (int k = 0; k < n && obj < len && t[obj] == '{'; k++) {
        at = member_at(t, len, obj, path[k]);
        if (at == len)
            break;
        l = loc_at(src, at, (int)strlen(path[k]) + 2);
        obj = skip_space(t, len, skip_space(t, len, string_end(t, len, at)) + 1);
    }
    return l;
}

static SrcLoc key_loc(const FtSource *src, const char *key) { return path_loc(src, &key, 1); }

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

//
// Reading keys. Each reader marks its key read, present or not; a key absent or null
// takes its default (an error where it is required).
//

static void mark(Cfg *c, const char *key) {
    for (int i = 0; i < c->used.len; i++)
        if (strcmp(c->used.at[i], key) == 0)
            return;
    vec_push(&c->used, key);
}

// The value of `key` in `obj` (NULL when absent or null).
static json_t *get(json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_null(v) ? NULL : v;
}

static json_t *top(Cfg *c, const char *key) {
    mark(c, key);
    return get(c->root, key);
}

static int missing(Cfg *c, const char *key) {
    fe_error(c->src, loc_at(c->src, 0, 1), "missing key \"%s\"", key);
    return -1;
}

// A positive integer at `key` of the top level (or at `path` inside it when path has more).
static int read_int(Cfg *c, const char *key, bool required, json_int_t dflt, int64_t *out) {
    json_t *v = top(c, key);
    if (!v) {
        if (required)
            return missing(c, key);
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) <= 0) {
        fe_error(c->src, key_loc(c->src, key), "\"%s\" must be a positive integer", key);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

// A number at `key` (`positive`: more than 0; else at least 0).
static int read_real(Cfg *c, const char *key, bool positive, double dflt, double *out) {
    json_t *v = top(c, key);
    *out = v ? json_number_value(v) : dflt;
    if (v && (!json_is_number(v) || !(positive ? *out > 0 : *out >= 0) || !isfinite(*out))) {
        fe_error(c->src, key_loc(c->src, key), "\"%s\" must be a %s number", key,
                 positive ? "positive" : "non-negative");
        return -1;
    }
    return 0;
}

static int read_bool(Cfg *c, const char *key, bool dflt, bool *out) {
    json_t *v = top(c, key);
    *out = v ? json_is_true(v) : dflt;
    if (v && !json_is_boolean(v)) {
        fe_error(c->src, key_loc(c->src, key), "\"%s\" must be true or false", key);
        return -1;
    }
    return 0;
}

static int read_str(Cfg *c, const char *key, const char **out) {
    json_t *v = top(c, key);
    *out = json_string_value(v);
    if (v && !*out) {
        fe_error(c->src, key_loc(c->src, key), "\"%s\" must be a string", key);
        return -1;
    }
    return 0;
}

// A key whose only value ftc models is `want` (absent or null counts as it): anything else
// is an error saying what the .ft cannot do.
static void require_bool(Cfg *c, const char *key, bool want, const char *why) {
    bool v;
    if (read_bool(c, key, want, &v) == 0 && v != want)
        fe_error(c->src, key_loc(c->src, key), "\"%s\": %s is not modelled: %s", key,
                 v ? "true" : "false", why);
}

// A dropout probability of attention weights: ftc's attention has none, so only 0 reads.
static void require_no_attn_dropout(Cfg *c, const char *key) {
    double p;
    if (read_real(c, key, false, 0, &p) == 0 && p != 0)
        fe_error(c->src, key_loc(c->src, key),
                 "\"%s\" = %g is not modelled: ftc's attention drops no attention weights "
                 "(set it to 0.0 to train without)", key, p);
}

// A dropout probability the .ft applies with dropout(x, p): below 1.
static void read_dropout(Cfg *c, const char *key, double *out) {
    if (read_real(c, key, false, 0, out) == 0 && *out >= 1)
        fe_error(c->src, key_loc(c->src, key), "\"%s\" must be below 1", key);
}

//
// The architecture.
//

static const Family *read_family(Cfg *c) {
    const char *type, *cls = NULL;
    if (read_str(c, "model_type", &type) != 0)
        return NULL;
    json_t *list = top(c, "architectures");
    if (list && !(cls = json_string_value(json_array_get(list, 0)))) {
        fe_error(c->src, key_loc(c->src, "architectures"), "\"architectures\" must be a list of class names");
        return NULL;
    }
    if (!type && !cls) {
        missing(c, "model_type");
        return NULL;
    }
    const Family *by_type = NULL, *by_class = NULL;
    for (int i = 0; i < NFAMILIES; i++) {
        if (type && strcmp(type, import_families[i].model_type) == 0)
            by_type = &import_families[i];
        if (cls && strcmp(cls, import_families[i].class_name) == 0)
            by_class = &import_families[i];
    }
    if (type && !by_type) {
        fe_error(c->src, key_loc(c->src, "model_type"),
                 "unsupported model_type \"%s\": ftc import knows llama, qwen2, qwen3, mistral, "
                 "gemma, gemma2, gemma3_text, phi3, gpt2 and gpt_neox", type);
        return NULL;
    }
    if (cls && !by_class) {
        fe_error(c->src, key_loc(c->src, "architectures"),
                 "unsupported architecture \"%s\": ftc import writes causal LMs of llama, qwen2, "
                 "qwen3, mistral, gemma, gemma2, gemma3_text, phi3, gpt2 and gpt_neox", cls);
        return NULL;
    }
    if (by_type && by_class && by_type != by_class) {
        fe_error(c->src, key_loc(c->src, "architectures"),
                 "architecture \"%s\" does not match model_type \"%s\"", cls, type);
        fe_note(c->src, key_loc(c->src, "model_type"), "model_type is given here");
        return NULL;
    }
    return by_type ? by_type : by_class;
}

// Head counts and head_dim (`dim_key`, `heads_key`, `kv_key` as the family spells them;
// kv_key NULL: as many as the query heads; head_dim_key NULL: always dim / heads).
// The heads, the kv heads and head_dim. An absent key is the config class's default as
// transformers reads it (`kv_dflt`, `head_dim_dflt`; 0: the heads' number, dim / heads), not
// a null one, which is those: Mistral's 8 kv heads, Qwen2 and Qwen3's 32, Gemma's 16, Gemma
// 2 and 3's 4; Qwen3's head_dim 128, Gemma's 256.
static void read_heads(Cfg *c, ImportModel *m, const char *heads_key, const char *kv_key,
                       const char *head_dim_key, int64_t kv_dflt, int64_t head_dim_dflt, bool dim_ok) {
    if (read_int(c, heads_key, true, 0, &m->heads) != 0)
        return;
    m->kv_heads = m->heads;
    bool kv_absent = kv_key && !json_object_get(c->root, kv_key) && kv_dflt;
    if (kv_key && read_int(c, kv_key, false, kv_absent ? kv_dflt : m->heads, &m->kv_heads) == 0 &&
        m->heads % m->kv_heads != 0) {
        if (kv_absent)
            fe_error(c->src, key_loc(c->src, heads_key), "%s (%lld) is not a multiple of %s (%lld), "
                     "%s's default, which transformers takes where the config has none",
                     heads_key, (long long)m->heads, kv_key, (long long)m->kv_heads, c->fam->model_type);
        else
            fe_error(c->src, key_loc(c->src, kv_key),
                     "%s (%lld) is not a multiple of %s (%lld)", heads_key, (long long)m->heads, kv_key,
                     (long long)m->kv_heads);
    }
    m->head_dim = 0;
    bool hd_absent = head_dim_key && !json_object_get(c->root, head_dim_key);
    if (head_dim_key && read_int(c, head_dim_key, false, hd_absent ? head_dim_dflt : 0, &m->head_dim) != 0)
        return;
    if (!dim_ok)
        return;
    if (m->head_dim == 0 && m->dim % m->heads != 0)
        fe_error(c->src, key_loc(c->src, heads_key),
                 "the width (%lld) is not a multiple of %s (%lld) and there is no head_dim",
                 (long long)m->dim, heads_key, (long long)m->heads);
    if (m->dim % m->heads == 0 && m->head_dim == m->dim / m->heads)
        m->head_dim = 0;
}

static int64_t head_dim_of(const ImportModel *m) { return m->head_dim ? m->head_dim : m->dim / m->heads; }

// An activation by its transformers name. `gelu_is_tanh`: Gemma's legacy "gelu" means the
// tanh approximation (transformers reads it so).
static void read_act(Cfg *c, const char *key, const char *dflt, bool gelu_is_tanh, ImportAct *out) {
    const char *a;
    if (read_str(c, key, &a) != 0)
        return;
    if (!a)
        a = dflt;
    if (strcmp(a, "silu") == 0 || strcmp(a, "swish") == 0)
        *out = ACT_SILU;
    else if (strcmp(a, "gelu_new") == 0 || strcmp(a, "gelu_pytorch_tanh") == 0 ||
             strcmp(a, "gelu_fast") == 0 || (gelu_is_tanh && strcmp(a, "gelu") == 0))
        *out = ACT_GELU_TANH;
    else if (strcmp(a, "gelu") == 0)
        *out = ACT_GELU_EXACT;
    else
        fe_error(c->src, key_loc(c->src, key), "\"%s\" = \"%s\" is not modelled: the .ft has silu, "
                 "gelu (tanh) and gelu_exact", key, a);
}

//
// Rope. The parameters of one rope dict (transformers 4's rope_scaling, 5's rope_parameters,
// or one layer type's of a nested one), every key of it checked.
//

// The rope type of dict `d` (rope_type, or type; "default" when absent) into *type, and its
// scaling; -1 after an error. `p`: the dict's path (n keys deep), with room for one more.
static int rope_dict_type(Cfg *c, json_t *d, const char **p, int n, const char **type) {
    *type = "default";
    json_t *t = get(d, "rope_type");
    if (!t)
        t = get(d, "type");
    if (t && !(*type = json_string_value(t))) {
        p[n] = get(d, "rope_type") ? "rope_type" : "type";
        fe_error(c->src, path_loc(c->src, p, n + 1), "the rope type must be a string");
        return -1;
    }
    static const struct { const char *name; int scaling; } types[] = {
        {"default", ROPE_PLAIN}, {"linear", ROPE_LINEAR}, {"dynamic", ROPE_DYNAMIC},
        {"llama3", ROPE_LLAMA3}, {"yarn", ROPE_YARN}};
    int scaling = -1;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(*type, types[i].name) == 0)
            scaling = types[i].scaling;
    if (scaling < 0) {
        p[n] = get(d, "rope_type") ? "rope_type" : "type";
        fe_error(c->src, path_loc(c->src, p, n + 1),
                 "rope type \"%s\" is not modelled: the .ft's rope scales linear, dynamic, llama3 "
                 "and yarn", *type);
    }
    return scaling;
}

// An error at every non-null key of dict `d` that rope type `type` (`scaling`) does not read.
static void check_rope_keys(Cfg *c, json_t *d, const char **p, int n, int scaling,
                            const char *type) {
    // Every key, by the types it belongs to (bit k: the rope scaling k of ops.h).
    static const struct { const char *key; unsigned types; } keys[] = {
        {"rope_type", 31}, {"type", 31}, {"rope_theta", 31}, {"partial_rotary_factor", 31},
        {"factor", 2 | 4 | 8 | 16}, {"original_max_position_embeddings", 8 | 16},
        {"low_freq_factor", 8}, {"high_freq_factor", 8}, {"beta_fast", 16}, {"beta_slow", 16},
        {"mscale", 16}, {"mscale_all_dim", 16}, {"attention_factor", 16}, {"truncate", 16}};
    const char *key;
    json_t *v;
    json_object_foreach(d, key, v) {
        size_t i = 0;
        while (i < sizeof keys / sizeof keys[0] && strcmp(keys[i].key, key) != 0)
            i++;
        unsigned bit = 1u << (scaling == ROPE_PLAIN ? 0 : scaling);
        if (i < sizeof keys / sizeof keys[0] && (keys[i].types & bit))
            continue;
        if (json_is_null(v))
            continue;
        p[n] = key;
        fe_error(c->src, path_loc(c->src, p, n + 1), "\"%s\" is not modelled for rope type \"%s\"",
                 key, type);
    }
}

// The values given in dict `d` into *r and *partial, an error at each one of the wrong kind.
static void read_rope_values(Cfg *c, json_t *d, const char **p, int n, ImportRope *r,
                             double *partial) {
    // The numbers, each positive where given.
    struct { const char *key; double *dst; } nums[] = {
        {"rope_theta", &r->theta}, {"partial_rotary_factor", partial}, {"factor", &r->r.factor},
        {"low_freq_factor", &r->r.low}, {"high_freq_factor", &r->r.high},
        {"beta_fast", &r->r.low}, {"beta_slow", &r->r.high}, {"attention_factor", &r->r.attn_factor}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        json_t *x = get(d, nums[i].key);
        if (!x)
            continue;
        if (!json_is_number(x) || !(json_number_value(x) > 0)) {
            p[n] = nums[i].key;
            fe_error(c->src, path_loc(c->src, p, n + 1), "\"%s\" must be a positive number", nums[i].key);
            continue;
        }
        *nums[i].dst = json_number_value(x);
    }
    json_t *o = get(d, "original_max_position_embeddings");
    if (o) {
        if (!json_is_integer(o) || json_integer_value(o) <= 0) {
            p[n] = "original_max_position_embeddings";
            fe_error(c->src, path_loc(c->src, p, n + 1), "\"original_max_position_embeddings\" must "
                     "be a positive integer");
        } else {
            r->r.original = json_integer_value(o);
        }
    }
    json_t *tr = get(d, "truncate");
    if (tr) {
        if (!json_is_boolean(tr)) {
            p[n] = "truncate";
            fe_error(c->src, path_loc(c->src, p, n + 1), "\"truncate\" must be true or false");
        }
        r->r.no_truncate = json_is_false(tr);
    }
}

// What transformers derives when a key of dict `d` is absent.
static void derive_rope(json_t *d, const ImportModel *m, int scaling, ImportRope *r) {
    if (scaling == ROPE_DYNAMIC)
        r->r.original = m->max_pos;   // dynamic grows past max_position_embeddings
    if ((scaling == ROPE_LLAMA3 || scaling == ROPE_YARN) && !r->r.original)
        r->r.original = m->max_pos;
    if (scaling == ROPE_YARN && r->r.factor == 0 && r->r.original)
        r->r.factor = (double)m->max_pos / (double)r->r.original;
    if (scaling == ROPE_YARN && r->r.attn_factor == 0) {
        json_t *ms = get(d, "mscale"), *ma = get(d, "mscale_all_dim");
        double f = r->r.factor;
        if (ms && ma && json_number_value(ms) != 0 && json_number_value(ma) != 0 && f > 1)
            r->r.attn_factor = (0.1 * json_number_value(ms) * log(f) + 1.0) /
                               (0.1 * json_number_value(ma) * log(f) + 1.0);
    }
}

// An error at the dict when rope type `type` (`scaling`) lacks a value it needs; -1 then.
static int check_rope_needs(Cfg *c, const char **p, int n, int scaling, const char *type,
                            const ImportRope *r) {
    if (scaling != ROPE_PLAIN && !(r->r.factor > 0)) {
        p[n] = "factor";
        fe_error(c->src, path_loc(c->src, p, n), "rope type \"%s\" needs \"factor\"", type);
        return -1;
    }
    if (scaling == ROPE_LLAMA3 && !(r->r.low > 0 && r->r.high > r->r.low)) {
        fe_error(c->src, path_loc(c->src, p, n), "rope type \"llama3\" needs low_freq_factor below "
                 "high_freq_factor");
        return -1;
    }
    if ((scaling == ROPE_LLAMA3 || scaling == ROPE_YARN || scaling == ROPE_DYNAMIC) && !r->r.original) {
        fe_error(c->src, path_loc(c->src, p, n), "rope type \"%s\" needs "
                 "original_max_position_embeddings (or max_position_embeddings)", type);
        return -1;
    }
    return 0;
}

// Reads the rope dict `d` found at `path` (n keys deep) into *r; theta and partial rotary
// come in as their defaults from the top level. -1 after an error.
static int read_rope_dict(Cfg *c, json_t *d, const char *const *path, int n, const ImportModel *m,
                          ImportRope *r, double *partial) {
    const char *p[4];
    for (int i = 0; i < n; i++)
        p[i] = path[i];
    int errors = c->src->errors;
    if (!json_is_object(d)) {
        fe_error(c->src, path_loc(c->src, p, n), "\"%s\" must be an object", path[n - 1]);
        return -1;
    }
    const char *type;
    int scaling = rope_dict_type(c, d, p, n, &type);
    if (scaling < 0)
        return -1;
    r->r.scaling = scaling;
    check_rope_keys(c, d, p, n, scaling, type);
    read_rope_values(c, d, p, n, r, partial);
    if (c->src->errors != errors)
        return -1;
    derive_rope(d, m, scaling, r);
    return check_rope_needs(c, p, n, scaling, type, r);
}

// The rotary dims of a partial rotary factor: int(head_dim * factor), transformers' rounding.
static int read_partial(Cfg *c, const char *where, double partial, const ImportModel *m, int64_t *rotary) {
    int64_t hd = head_dim_of(m);
    if (!(partial > 0 && partial <= 1)) {
        fe_error(c->src, key_loc(c->src, where), "a partial rotary factor of %g is not in (0, 1]: it is "
                 "the share of head_dim's dims that rotate", partial);
        return -1;
    }
    int64_t d = (int64_t)((double)hd * partial);
    if (d < 2 || d % 2) {
        fe_error(c->src, key_loc(c->src, where), "a partial rotary factor of %g leaves %lld of "
                 "head_dim %lld dims rotating; it must be an even number, at least 2", partial,
                 (long long)d, (long long)hd);
        return -1;
    }
    *rotary = d == hd ? 0 : d;
    return 0;
}

// The model's rope(s): rope_parameters (flat, or nested by layer type), or rope_theta and
// rope_scaling; partial rotary from partial_rotary_factor (or GPT-NeoX's rotary_pct), theta
// from rope_theta (or rotary_emb_base, rope_local_base_freq for Gemma 3's local layers).
static void read_rope(Cfg *c, ImportModel *m, double default_theta) {
    bool nested = m->fam == FAM_GEMMA3;
    double theta = default_theta, partial = 1.0, local_theta = 10000.0;
    read_real(c, "rope_theta", true, theta, &theta);
    if (m->fam == FAM_NEOX) {
        read_real(c, "rotary_emb_base", true, theta, &theta);
        read_real(c, "rotary_pct", true, 0.25, &partial);
    }
    read_real(c, "partial_rotary_factor", true, partial, &partial);
    if (nested)
        read_real(c, "rope_local_base_freq", true, local_theta, &local_theta);
    m->rope = (ImportRope){.theta = theta};
    m->rope_local = (ImportRope){.theta = local_theta};
    // transformers takes rope_scaling over rope_parameters when both are there
    json_t *params = top(c, "rope_parameters"), *scaling = top(c, "rope_scaling");
    const char *which = scaling ? "rope_scaling" : "rope_parameters";
    json_t *d = scaling ? scaling : params;
    double part = partial, part_local = partial;
    if (d && nested && json_is_object(d) &&
        (json_object_get(d, "full_attention") || json_object_get(d, "sliding_attention"))) {
        // per layer type: full_attention's and sliding_attention's
        const char *key;
        json_t *v;
        json_object_foreach(d, key, v) {
            const char *path[2] = {which, key};
            if (strcmp(key, "full_attention") && strcmp(key, "sliding_attention"))
                fe_error(c->src, path_loc(c->src, path, 2), "\"%s\" is not a layer type of this "
                         "model (full_attention, sliding_attention)", key);
            else if (!json_is_null(v))
                read_rope_dict(c, v, path, 2, m, key[0] == 'f' ? &m->rope : &m->rope_local,
                               key[0] == 'f' ? &part : &part_local);
        }
    } else if (d) {
        const char *path[1] = {which};
        read_rope_dict(c, d, path, 1, m, &m->rope, &part);
    }
    const char *pk = m->fam == FAM_NEOX && !get(c->root, "partial_rotary_factor") ? "rotary_pct"
                                                                                  : "partial_rotary_factor";
    int bad = 0;   // (one message for a factor both ropes take from the top level)
    if (part != 1.0 || partial != 1.0)
        bad = read_partial(c, get(c->root, pk) ? pk : which, part, m, &m->rope.r.rotary);
    // Phi-3 keeps the pretrained length outside the rope dict; transformers prefers it there.
    int64_t orig = 0;
    if (m->fam == FAM_PHI3 && read_int(c, "original_max_position_embeddings", false, 0, &orig) == 0 &&
        orig && (m->rope.r.scaling == ROPE_LLAMA3 || m->rope.r.scaling == ROPE_YARN))
        m->rope.r.original = orig;
    if (nested && (part_local != 1.0 || partial != 1.0) && !(bad && part_local == part))
        read_partial(c, get(c->root, pk) ? pk : which, part_local, m, &m->rope_local.r.rotary);
    // Gemma 3's two ropes are one rope(...) line whose theta (and linear factor) is indexed
    // by the layer's type: they may differ in nothing else.
    if (nested && c->src->errors == 0) {
        OpRope g = m->rope.r, l = m->rope_local.r;
        if (g.scaling == ROPE_PLAIN && l.scaling == ROPE_LINEAR)
            g.scaling = ROPE_LINEAR, g.factor = 1;
        if (l.scaling == ROPE_PLAIN && g.scaling == ROPE_LINEAR)
            l.scaling = ROPE_LINEAR, l.factor = 1;
        if (g.scaling == ROPE_LINEAR)
            g.factor = l.factor;
        bool same = g.rotary == l.rotary && g.scaling == l.scaling && g.factor == l.factor &&
                    g.low == l.low && g.high == l.high && g.original == l.original &&
                    g.attn_factor == l.attn_factor && g.no_truncate == l.no_truncate;
        if (!same)
            fe_error(c->src, key_loc(c->src, which), "the full and sliding layers' ropes differ in "
                     "more than theta and a linear factor, which one rope(...) line cannot say");
    }
}

//
// Sliding windows: which layers attend through one.
//

// layer_types (transformers 5), each "full_attention" or "sliding_attention"; false when absent.
static bool read_layer_types(Cfg *c, ImportModel *m) {
    json_t *lt = top(c, "layer_types");
    if (!lt)
        return false;
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != m->layers) {
        fe_error(c->src, key_loc(c->src, "layer_types"), "\"layer_types\" must list the %lld layers' "
                 "types", (long long)m->layers);
        return true;
    }
    for (size_t i = 0; i < json_array_size(lt); i++) {
        const char *t = json_string_value(json_array_get(lt, i));
        if (t && strcmp(t, "sliding_attention") == 0) {
            m->sliding[i] = true;
        } else if (!t || strcmp(t, "full_attention") != 0) {
            fe_error(c->src, key_loc(c->src, "layer_types"), "layer %zu's type is not "
                     "full_attention or sliding_attention", i);
            return true;
        }
    }
    return true;
}

// The window and the layers it applies to. `window_dflt`: transformers' default size when
// the key is absent (0: none).
static void read_windows(Cfg *c, ImportModel *m, int64_t window_dflt) {
    json_t *w = top(c, "sliding_window");
    m->window = window_dflt;
    if (w && (!json_is_integer(w) || json_integer_value(w) <= 0)) {
        fe_error(c->src, key_loc(c->src, "sliding_window"), "\"sliding_window\" must be a positive "
                 "integer or null");
        return;
    }
    if (w)
        m->window = json_integer_value(w);
    else if (json_object_get(c->root, "sliding_window"))   // null: none
        m->window = 0;
    bool types = false;
    switch (m->fam) {
    case FAM_QWEN2:
    case FAM_QWEN3: {   // the top layers from max_window_layers, when use_sliding_window
        bool on;
        int64_t from;
        read_bool(c, "use_sliding_window", false, &on);
        read_int(c, "max_window_layers", false, 28, &from);
        if (!on)
            m->window = 0;
        types = read_layer_types(c, m);
        for (int64_t i = 0; !types && m->window && i < m->layers; i++)
            m->sliding[i] = i >= from;
        break;
    }
    case FAM_MISTRAL:
    case FAM_PHI3:
        for (int64_t i = 0; m->window && i < m->layers; i++)
            m->sliding[i] = true;
        break;
    case FAM_GEMMA2:   // every other layer, from the first
        types = read_layer_types(c, m);
        for (int64_t i = 0; !types && i < m->layers; i++)
            m->sliding[i] = (i + 1) % 2 != 0;
        break;
    case FAM_GEMMA3: {   // five of every six, unless layer_types says
        int64_t pattern = 6;
        types = read_layer_types(c, m);
        if (read_int(c, "sliding_window_pattern", false, 6, &pattern) == 0 &&
            read_int(c, "_sliding_window_pattern", false, pattern, &pattern) == 0)
            for (int64_t i = 0; !types && i < m->layers; i++)
                m->sliding[i] = (i + 1) % pattern != 0;
        break;
    }
    default:
        break;
    }
    bool any = false;
    for (int64_t i = 0; i < m->layers; i++)
        any |= m->sliding[i];
    if (any && !m->window)
        fe_error(c->src, key_loc(c->src, json_object_get(c->root, "layer_types") ? "layer_types"
                                                                                 : "sliding_window"),
                 "layers attend through a sliding window, but \"sliding_window\" gives none");
    if (!any)
        m->window = 0;
}

//
// The families.
//

// The common shape of the decoders with rope and RMSNorm (Llama's keys).
static void read_decoder(Cfg *c, ImportModel *m) {
    const Family *f = c->fam;
    read_int(c, "vocab_size", true, 0, &m->vocab);
    bool dim_ok = read_int(c, f->dim, true, 0, &m->dim) == 0;
    read_int(c, f->ffn, true, 0, &m->ffn);
    read_int(c, f->layers, true, 0, &m->layers);
    bool gemma = m->fam == FAM_GEMMA || m->fam == FAM_GEMMA2 || m->fam == FAM_GEMMA3;
    int64_t kv_dflt = m->fam == FAM_MISTRAL ? 8 : m->fam == FAM_QWEN2 || m->fam == FAM_QWEN3 ? 32
                    : m->fam == FAM_GEMMA ? 16 : gemma ? 4 : 0;
    int64_t head_dim_dflt = m->fam == FAM_QWEN3 ? 128 : gemma ? 256 : 0;
    read_heads(c, m, f->heads, f->kv_heads, m->fam == FAM_PHI3 ? NULL : "head_dim", kv_dflt, head_dim_dflt,
               dim_ok);
    read_real(c, f->eps, true, m->fam == FAM_PHI3 ? 1e-5 : 1e-6, &m->eps);   // (Phi3Config's 1e-5)
    read_int(c, f->max_pos, false, 0, &m->max_pos);
    require_no_attn_dropout(c, "attention_dropout");
    // The embedding is built with padding_idx = pad_token_id: that row takes no gradient.
    // Absent, it is the family's config class's default, as transformers reads it: Gemma's
    // 0, Phi-3's 32000 (where the vocabulary holds it), the others' none; null is none.
    json_t *pad = top(c, "pad_token_id");
    if (pad && (!json_is_integer(pad) || json_integer_value(pad) < 0 ||
                json_integer_value(pad) >= m->vocab))
        fe_error(c->src, key_loc(c->src, "pad_token_id"), "\"pad_token_id\" must be a token id "
                 "below vocab_size, or null");
    else if (pad)
        m->pad = json_integer_value(pad) + 1;
    else if (!json_object_get(c->root, "pad_token_id")) {
        int64_t dflt = gemma ? 0 : m->fam == FAM_PHI3 ? 32000 : -1;
        if (dflt >= 0 && dflt < m->vocab)
            m->pad = dflt + 1;
    }
}

static void read_llama_like(Cfg *c, ImportModel *m) {
    read_decoder(c, m);
    const char *act;
    if (read_str(c, "hidden_act", &act) == 0 && act && strcmp(act, "silu") != 0)
        fe_error(c->src, key_loc(c->src, "hidden_act"), "\"hidden_act\" = \"%s\" is not modelled: "
                 "%s's MLP is SwiGLU (silu)", act, c->fam->model_type);
    bool tied_dflt = false;
    read_bool(c, "tie_word_embeddings", tied_dflt, &m->tied);
    if (m->fam == FAM_LLAMA || m->fam == FAM_QWEN3) {   // q, k, v and o
        read_bool(c, "attention_bias", false, &m->qkv_bias);
        m->o_bias = m->qkv_bias;
    }
    if (m->fam == FAM_PHI3)
        require_bool(c, "attention_bias", false, "Phi-3's projections have no biases");
    if (m->fam == FAM_LLAMA)
        read_bool(c, "mlp_bias", false, &m->mlp_bias);
    if (m->fam == FAM_QWEN2)
        m->qkv_bias = true;
    if (m->fam == FAM_PHI3) {
        read_dropout(c, "embd_pdrop", &m->embd_drop);
        read_dropout(c, "resid_pdrop", &m->resid_drop);
    }
}

static void read_gemma(Cfg *c, ImportModel *m) {
    read_decoder(c, m);
    // Gemma's MLP applies hidden_act (its legacy "gelu" meaning the tanh approximation), Gemma 2
    // and 3's hidden_activation; configs of transformers 4 carry both, and the other is unread.
    const char *act = m->fam == FAM_GEMMA ? "hidden_act" : "hidden_activation";
    read_act(c, act, "gelu_pytorch_tanh", m->fam == FAM_GEMMA, &m->act);
    mark(c, m->fam == FAM_GEMMA ? "hidden_activation" : "hidden_act");
    if (m->act == ACT_SILU)
        fe_error(c->src, key_loc(c->src, act), "\"%s\": silu is not modelled in Gemma's GeGLU MLP", act);
    read_bool(c, "tie_word_embeddings", true, &m->tied);
    read_bool(c, "attention_bias", false, &m->qkv_bias);
    m->o_bias = m->qkv_bias;
    require_bool(c, "use_bidirectional_attention", false, "the .ft's attention is causal");
    m->embed_scale = sqrt((double)m->dim);
    if (m->fam != FAM_GEMMA) {
        int64_t scalar;
        if (read_int(c, "query_pre_attn_scalar", false, 0, &scalar) == 0 && scalar)
            m->attn_scale = 1.0 / sqrt((double)scalar);
        read_real(c, "attn_logit_softcapping", true, 0, &m->attn_softcap);
        read_real(c, "final_logit_softcapping", true, 0, &m->final_softcap);
    }
}

static void read_gpt2(Cfg *c, ImportModel *m) {
    const Family *f = c->fam;
    read_int(c, "vocab_size", true, 0, &m->vocab);
    bool dim_ok = read_int(c, f->dim, true, 0, &m->dim) == 0;
    read_int(c, f->layers, true, 0, &m->layers);
    read_heads(c, m, f->heads, NULL, NULL, 0, 0, dim_ok);
    read_int(c, f->ffn, false, 4 * m->dim, &m->ffn);
    read_int(c, f->max_pos, true, 0, &m->max_pos);
    read_real(c, f->eps, true, 1e-5, &m->eps);
    read_act(c, "activation_function", "gelu_new", false, &m->act);
    if (m->act == ACT_SILU)
        fe_error(c->src, key_loc(c->src, "activation_function"), "\"activation_function\": silu is "
                 "not modelled in GPT-2's MLP");
    read_dropout(c, "embd_pdrop", &m->embd_drop);
    read_dropout(c, "resid_pdrop", &m->resid_drop);
    require_no_attn_dropout(c, "attn_pdrop");
    bool scaled;
    read_bool(c, "scale_attn_weights", true, &scaled);
    if (!scaled)
        m->attn_scale = 1.0;
    read_bool(c, "scale_attn_by_inverse_layer_idx", false, &m->scale_by_layer);
    bool upcast;   // attention in fp32 either way: ftc's attention computes in fp32
    read_bool(c, "reorder_and_upcast_attn", false, &upcast);
    require_bool(c, "add_cross_attention", false, "a causal LM has no encoder to attend to");
    mark(c, "pad_token_id");   // GPT-2's embeddings have no padding row
    read_bool(c, "tie_word_embeddings", true, &m->tied);
    m->qkv_bias = m->o_bias = m->mlp_bias = true;
}

static void read_neox(Cfg *c, ImportModel *m) {
    const Family *f = c->fam;
    read_int(c, "vocab_size", true, 0, &m->vocab);
    bool dim_ok = read_int(c, f->dim, true, 0, &m->dim) == 0;
    read_int(c, f->ffn, true, 0, &m->ffn);
    read_int(c, f->layers, true, 0, &m->layers);
    read_heads(c, m, f->heads, NULL, NULL, 0, 0, dim_ok);
    read_int(c, f->max_pos, false, 0, &m->max_pos);
    read_real(c, f->eps, true, 1e-5, &m->eps);
    read_act(c, "hidden_act", "gelu", false, &m->act);
    if (m->act == ACT_SILU)
        fe_error(c->src, key_loc(c->src, "hidden_act"), "\"hidden_act\": silu is not modelled in "
                 "GPT-NeoX's MLP");
    read_bool(c, "use_parallel_residual", true, &m->parallel_residual);
    read_bool(c, "attention_bias", true, &m->qkv_bias);
    m->o_bias = m->qkv_bias;
    m->mlp_bias = true;
    read_dropout(c, "hidden_dropout", &m->resid_drop);
    m->embd_drop = m->resid_drop;
    require_no_attn_dropout(c, "attention_dropout");
    read_bool(c, "tie_word_embeddings", false, &m->tied);
    mark(c, "pad_token_id");   // GPT-NeoX's embeddings have no padding row
}

// Keys left unread: an error at each that is not inert.
static void leftover_keys(Cfg *c) {
    const char *key;
    json_t *v;
    json_object_foreach(c->root, key, v) {
        bool known = false;
        for (int i = 0; !known && i < c->used.len; i++)
            known = strcmp(c->used.at[i], key) == 0;
        for (size_t i = 0; !known && i < sizeof inert / sizeof inert[0]; i++)
            known = strcmp(inert[i], key) == 0;
        if (!known)
            fe_error(c->src, key_loc(c->src, key), "\"%s\" is not modelled by ftc import for %s",
                     key, c->fam->model_type);
    }
}

// Fills `m` from the config, reporting every problem found; 0 or -1.
static int read_config(Cfg *c, ImportModel *m) {
    if (!json_is_object(c->root)) {
        fe_error(c->src, loc_at(c->src, strspn(c->src->text, " \t\r\n"), 1),
                 "expected a JSON object (a config.json)");
        return -1;
    }
    memset(m, 0, sizeof *m);
    if (!(c->fam = read_family(c)))
        return -1;
    m->fam = c->fam->fam;
    m->model_type = c->fam->model_type;
    m->class_name = c->fam->class_name;
    require_bool(c, "is_encoder_decoder", false, "a causal LM has no encoder");
    json_t *q = top(c, "quantization_config");
    if (q)
        fe_error(c->src, key_loc(c->src, "quantization_config"), "\"quantization_config\": the "
                 "checkpoint is quantised; ftc loads bf16, fp16 or fp32 weights (quantize(nf4) "
                 "in train quantises them itself)");
    switch (m->fam) {
    case FAM_GEMMA:
    case FAM_GEMMA2:
    case FAM_GEMMA3: read_gemma(c, m); break;
    case FAM_GPT2: read_gpt2(c, m); break;
    case FAM_NEOX: read_neox(c, m); break;
    default: read_llama_like(c, m); break;
    }
    if (c->src->errors)
        return -1;
    if (m->layers > IMPORT_MAX_LAYERS) {
        fe_error(c->src, key_loc(c->src, c->fam->layers),
                 "more than %d layers", IMPORT_MAX_LAYERS);
        return -1;
    }
    if (m->fam != FAM_GPT2)
        read_rope(c, m, m->fam == FAM_GEMMA3 ? 1000000.0 : 10000.0);
    int64_t window_dflt = m->fam == FAM_MISTRAL || m->fam == FAM_GEMMA2 || m->fam == FAM_GEMMA3 ? 4096 : 0;
    if (m->fam == FAM_QWEN2 || m->fam == FAM_QWEN3)
        window_dflt = 4096;
    if (m->fam != FAM_LLAMA && m->fam != FAM_GEMMA && m->fam != FAM_GPT2 && m->fam != FAM_NEOX)
        read_windows(c, m, window_dflt);
    if (c->src->errors == 0)
        leftover_keys(c);
    return c->src->errors ? -1 : 0;
}

// Renders the .ft for `m` into a heap buffer (`*len` bytes); NULL after reporting an error.
static char *render(FtSource *src, const ImportModel *m, const char *file, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) {
        fe_error(src, (SrcLoc){0}, "cannot render the .ft: %s", strerror(errno));
        return NULL;
    }
    import_write(f, m, file);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        fe_error(src, (SrcLoc){0}, "cannot render the .ft: out of memory");
        free(buf);
        return NULL;
    }
    return buf;
}

int fe_import(const char *path, FILE *out) {
    FtSource src;
    if (fe_source_read(&src, path) != 0) {
        fe_error(&src, (SrcLoc){0}, "cannot read: %s", strerror(errno));
        return 1;
    }
    json_error_t jerr;
    json_t *root = json_loadb(src.text, src.len, JSON_REJECT_DUPLICATES, &jerr);
    ImportModel *m = xcalloc(1, sizeof *m);
    Cfg c = {.src = &src, .root = root};
    char *text = NULL;
    size_t len = 0;
    const char *slash = strrchr(path, '/');
    if (!root)
        syntax_error(&src, &jerr);
    else if (read_config(&c, m) == 0)
        text = render(&src, m, slash ? slash + 1 : path, &len);
    if (text && fwrite(text, 1, len, out) != len)
        fe_error(&src, (SrcLoc){0}, "cannot write the .ft: %s", strerror(errno));
    int rc = src.errors ? 1 : 0;
    free(text);
    free(m);
    vec_free(&c.used);
    json_decref(root);
    fe_source_free(&src);
    return rc;
}
