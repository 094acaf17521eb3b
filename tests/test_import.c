// test_import.c — `ftc import`: each fixture config.json against its golden .ft byte for byte,
// small configs for the options the fixtures lack, and bad configs whose error (location and
// text) is pinned and which must leave the output empty.
// Usage: test_import FIXTURES_DIR   (exits non-zero on any failure)
#include "frontend.h"

#include "check.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/test_import.XXXXXX";

// Counts and prints the case `name` (tests/check.h), which passes when `ok`; `why` says what
// went wrong.
static void report(const char *name, bool ok, const char *why) {
    RUN_NAMED(name, CHECKF(ok, "%s", why));
}

// Reads the file at `path` into a NUL-terminated heap buffer; NULL when unreadable.
static char *slurp(const char *path, size_t *len) {
    FtSource src;
    if (fe_source_read(&src, path) != 0)
        return NULL;
    if (len)
        *len = src.len;
    return src.text;
}

// Writes `text` to `name` in the temp dir; returns its path, valid until the next call.
static const char *write_tmp(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
    return path;
}

typedef struct Run {
    int rc;
    char *out;          // what fe_import wrote to its stream
    size_t out_len;
    char *err;          // what it wrote to stderr
} Run;

// Calls fe_import on `path` with stdout going to memory and stderr captured in a file.
static Run run_import(const char *path) {
    Run r = {0};
    char errpath[512];
    snprintf(errpath, sizeof errpath, "%s/stderr", tmpdir);
    int fd = open(errpath, O_RDWR | O_CREAT | O_TRUNC, 0600), saved = dup(2);
    FILE *mem = open_memstream(&r.out, &r.out_len);
    if (fd < 0 || saved < 0 || !mem) {
        perror("test_import: capture");
        exit(2);
    }
    fflush(stderr);
    dup2(fd, 2);
    r.rc = fe_import(path, mem);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    fclose(mem);
    r.err = slurp(errpath, NULL);
    if (!r.err)
        r.err = calloc(1, 1);
    return r;
}

static void run_free(Run *r) {
    free(r->out);
    free(r->err);
}

// Compares `got` with `want`; on a mismatch describes the first differing line in `why`.
static bool same_text(const char *got, size_t got_len, const char *want, size_t want_len,
                      char *why, size_t cap) {
    size_t i = 0;
    int line = 1;
    while (i < got_len && i < want_len && got[i] == want[i])
        if (got[i++] == '\n')
            line++;
    if (i == got_len && i == want_len)
        return true;
    snprintf(why, cap, "differs at line %d (byte %zu; lengths %zu vs %zu expected)", line, i,
             got_len, want_len);
    return false;
}

// Imports fixture `name`.config.json and compares it with `name`.expected.ft.
static void check_golden(const char *dir, const char *name) {
    char cfg[512], ft[512], why[1024] = "";
    snprintf(cfg, sizeof cfg, "%s/%s.config.json", dir, name);
    snprintf(ft, sizeof ft, "%s/%s.expected.ft", dir, name);
    size_t want_len;
    char *want = slurp(ft, &want_len);
    Run r = run_import(cfg);
    bool ok = false;
    if (!want)
        snprintf(why, sizeof why, "cannot read %s", ft);
    else if (r.rc != 0)
        snprintf(why, sizeof why, "returned %d: %s", r.rc, r.err);
    else if (r.err[0])
        snprintf(why, sizeof why, "wrote to stderr: %s", r.err);
    else
        ok = same_text(r.out, r.out_len, want, want_len, why, sizeof why);
    report(name, ok, why);
    free(want);
    run_free(&r);
}

// Removes every line that starts with '#' from `s` in place, and the train section (from a
// line "train {" on); returns the new length.
static size_t model_section(char *s) {
    char *train = strstr(s, "\ntrain {");
    if (train)
        train[1] = '\0';
    char *w = s;
    for (const char *p = s; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
        if (*p != '#') {
            memmove(w, p, n);
            w += n;
        }
        p += n;
    }
    *w = '\0';
    return (size_t)(w - s);
}

// The Qwen2-7B import's model section must be models/qwen2.ft's apart from the header
// comment (its train section is the planning reference's, seq 2048 and a global batch of 32,
// not the import's fine-tuning recipe).
static void check_matches_model(const char *dir) {
    char cfg[512], model[512], why[1024] = "";
    snprintf(cfg, sizeof cfg, "%s/qwen2-7b.config.json", dir);
    snprintf(model, sizeof model, "%s/../../models/qwen2.ft", dir);
    char *want = slurp(model, NULL);
    if (!want) {
        printf("skip qwen2-7b-is-models-qwen2 (no %s)\n", model);
        return;
    }
    Run r = run_import(cfg);
    bool ok = r.rc == 0;
    if (ok) {
        char *got = realloc(r.out, r.out_len + 1);
        got[r.out_len] = '\0';
        r.out = got;
        size_t got_len = model_section(got), want_len = model_section(want);
        ok = same_text(got, got_len, want, want_len, why, sizeof why);
    } else {
        snprintf(why, sizeof why, "returned %d", r.rc);
    }
    report("qwen2-7b-is-models-qwen2", ok, why);
    free(want);
    run_free(&r);
}

// Imports `json` (written to NAME.json) into *r, its output NUL-terminated; whether it
// succeeded without a message, else why.
static bool import_ok(const char *name, const char *json, Run *r, char *why, size_t cap) {
    char file[128];
    snprintf(file, sizeof file, "%s.json", name);
    *r = run_import(write_tmp(file, json));
    r->out = realloc(r->out, r->out_len + 1);
    r->out[r->out_len] = '\0';
    bool ok = r->rc == 0 && !r->err[0];
    if (!ok)
        snprintf(why, cap, "returned %d: %s", r->rc, r->err);
    return ok;
}

// Imports `json` and checks that the output contains each of the NULL-terminated `wants`.
static void check_contains(const char *name, const char *json, const char *const *wants) {
    char why[1024] = "";
    Run r;
    bool ok = import_ok(name, json, &r, why, sizeof why);
    for (const char *const *w = wants; ok && *w; w++)
        if (!strstr(r.out, *w)) {
            snprintf(why, sizeof why, "no \"%s\" in the output", *w);
            ok = false;
        }
    report(name, ok, why);
    run_free(&r);
}

// Imports `json` and checks that the output does not contain `unwanted`.
static void check_lacks(const char *name, const char *json, const char *unwanted) {
    char why[1024] = "";
    Run r;
    bool ok = import_ok(name, json, &r, why, sizeof why);
    if (ok && strstr(r.out, unwanted)) {
        snprintf(why, sizeof why, "\"%s\" in the output", unwanted);
        ok = false;
    }
    report(name, ok, why);
    run_free(&r);
}

// Counts the occurrences of `needle` in `s`.
static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

// Imports `json` (or the file `path` when `json` is NULL) and checks that it fails with
// exactly one error, at `line`:`col`, whose text contains `text`, writing no output.
static void check_error(const char *name, const char *json, const char *path, int line, int col,
                        const char *text) {
    char file[128], where[640], why[1024] = "";
    snprintf(file, sizeof file, "%s.json", name);
    if (json)
        path = write_tmp(file, json);
    if (line > 0)
        snprintf(where, sizeof where, "%s:%d:%d: error: ", path, line, col);
    else
        snprintf(where, sizeof where, "%s: error: ", path);
    Run r = run_import(path);
    if (r.rc != 1)
        snprintf(why, sizeof why, "returned %d, want 1", r.rc);
    else if (r.out_len != 0)
        snprintf(why, sizeof why, "wrote %zu bytes of output", r.out_len);
    else if (!strstr(r.err, where) || !strstr(r.err, text))
        snprintf(why, sizeof why, "want \"%s...%s\", got: %s", where, text, r.err);
    else if (count(r.err, ": error: ") != 1)
        snprintf(why, sizeof why, "want one error, got: %s", r.err);
    report(name, !why[0], why);
    run_free(&r);
}

static void golden_tests(const char *dir) {
    check_golden(dir, "qwen2-7b");
    check_golden(dir, "qwen2-0.5b");
    check_golden(dir, "llama2-7b");
    check_golden(dir, "mistral-7b");
    check_matches_model(dir);
}

static void option_tests(void) {
    check_contains("llama-biases",
                   "{\"model_type\": \"llama\", \"vocab_size\": 32000, \"hidden_size\": 4096,\n"
                   " \"intermediate_size\": 11008, \"num_hidden_layers\": 32,\n"
                   " \"num_attention_heads\": 32, \"num_key_value_heads\": 8,\n"
                   " \"attention_bias\": true, \"mlp_bias\": true}\n",
                   (const char *const[]){
                       "# Llama: GQA 4:1, linear biases, RoPE, SwiGLU, untied lm_head.\n",
                       "    param bo [dim]                               as "
                       "\"self_attn.o_proj.bias\"\n",
                       "    param bd [dim]                               as "
                       "\"mlp.down_proj.bias\"\n",
                       "q = rope(view(linear(h, wq, bq), [B, S, heads, head_dim]), positions, theta)\n",
                       "x = x + linear(view(a, [B, S, heads * head_dim]), wo, bo)\n",
                       "return x + linear(silu(linear(h, wg, bg)) * linear(h, wu, bu), wd, bd)\n",
                       "  eps      = 1e-6\n  theta    = 10000.0\n",
                       NULL});
    check_contains("by-architectures",
                   "{\"architectures\": [\"LlamaForCausalLM\"], \"vocab_size\": 128256,\n"
                   " \"hidden_size\": 2048, \"intermediate_size\": 8192,\n"
                   " \"num_hidden_layers\": 16,\n"
                   " \"num_attention_heads\": 32, \"head_dim\": 64, \"rms_norm_eps\": 1.5e-06,\n"
                   " \"rope_theta\": 500000, \"tie_word_embeddings\": true,\n"
                   " \"max_position_embeddings\": 1024, \"rope_scaling\": null}\n",
                   (const char *const[]){
                       "from by-architectures.json (LlamaForCausalLM).\n",
                       "# Llama: MHA, RoPE, SwiGLU, tied lm_head; max_position_embeddings = 1024.\n",
                       "model llama {\n",
                       "  kv_heads = 32\n  head_dim = dim / heads\n",
                       "  eps      = 1.5e-6\n  theta    = 500000.0\n",
                       "return linear(rmsnorm(x, final_norm, eps), embed)\n",
                       "  seq          = 1024\n",
                       "(ftc data --pack 1024)", "  packing      = true\n", "  lr_schedule  = cosine\n",
                       NULL});
    check_contains("head-dim-literal",
                   "{\"model_type\": \"mistral\", \"vocab_size\": 131072, \"hidden_size\": 5120,\n"
                   " \"intermediate_size\": 14336, \"num_hidden_layers\": 40,\n"
                   " \"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"head_dim\": 128,\n"
                   " \"rope_theta\": 1000000.0, \"sliding_window\": null}\n",
                   (const char *const[]){
                       "# Mistral: GQA 4:1, RoPE, SwiGLU, untied lm_head.\nmodel mistral {\n",
                       "  head_dim = 128\n",
                       NULL});
}

static void error_tests(void) {
    check_error("syntax",
                "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 4096\n"
                "  \"vocab_size\": 32000\n}\n",
                NULL, 4, 3, "invalid JSON: '}' expected near '\"vocab_size\"'");
    check_error("missing-hidden-size",
                "{\n  \"model_type\": \"llama\",\n  \"vocab_size\": 32000,\n"
                "  \"intermediate_size\": 11008,\n  \"num_hidden_layers\": 32,\n"
                "  \"num_attention_heads\": 32\n}\n",
                NULL, 1, 1, "missing key \"hidden_size\"");
    check_error("model-type-bert",
                "{\n  \"architectures\": [\"BertForMaskedLM\"],\n  \"model_type\": \"bert\",\n"
                "  \"hidden_size\": 768\n}\n",
                NULL, 3, 3, "unsupported model_type \"bert\"");
    check_error("rope-longrope",
                "{\n  \"model_type\": \"llama\",\n  \"vocab_size\": 32000,\n"
                "  \"hidden_size\": 4096,\n  \"intermediate_size\": 11008,\n"
                "  \"num_hidden_layers\": 32,\n  \"num_attention_heads\": 32,\n"
                "  \"rope_scaling\": {\"type\": \"longrope\", \"factor\": 2.0}\n}\n",
                NULL, 8, 20, "rope type \"longrope\" is not modelled");
    check_error("hidden-act-gelu",
                "{\n  \"model_type\": \"mistral\",\n"
                "  \"vocab_size\": 32000, \"hidden_size\": 4096, \"intermediate_size\": 14336,\n"
                "  \"num_hidden_layers\": 32, \"num_attention_heads\": 32,\n"
                "  \"num_key_value_heads\": 8,   \"hidden_act\": \"gelu\"\n}\n",
                NULL, 5, 31, "\"hidden_act\" = \"gelu\" is not modelled");
    check_error("kv-heads-divide",
                "{\"model_type\": \"qwen2\", \"vocab_size\": 32000, \"hidden_size\": 4096,\n"
                " \"intermediate_size\": 11008, \"num_hidden_layers\": 32,\n"
                " \"num_attention_heads\": 32, \"num_key_value_heads\": 5}\n",
                NULL, 3, 29, "is not a multiple of num_key_value_heads (5)");
    check_error("hidden-size-string",
                "{\"model_type\": \"qwen2\", \"vocab_size\": 32000, \"hidden_size\": \"4096\",\n"
                " \"intermediate_size\": 11008, \"num_hidden_layers\": 32,\n"
                " \"num_attention_heads\": 32}\n",
                NULL, 1, 46, "\"hidden_size\" must be a positive integer");
    check_error("arch-mismatch",
                "{\"model_type\": \"llama\",\n \"architectures\": [\"Qwen2ForCausalLM\"]}\n", NULL,
                2, 2, "architecture \"Qwen2ForCausalLM\" does not match model_type \"llama\"");
    check_error("not-an-object", "\n  [1, 2]\n", NULL, 2, 3, "expected a JSON object");
}

// A small Llama-like config of family `type` with `extra` keys (JSON members, may be empty).
static const char *config_with(const char *type, const char *extra) {
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "{\"model_type\": \"%s\", \"vocab_size\": 1000, \"hidden_size\": 64,\n"
             " \"intermediate_size\": 96, \"num_hidden_layers\": 4, \"num_attention_heads\": 4,\n"
             " \"num_key_value_heads\": 2%s%s}\n", type, *extra ? ",\n " : "", extra);
    return buf;
}

// What a config asks for that the .ft cannot say: an error at the key, naming it.
static void unsupported_tests(const char *dir) {
    check_error("unknown-key", config_with("llama", "\"rope_foo\": 1"), NULL, 4, 2,
                "\"rope_foo\" is not modelled by ftc import for llama");
    check_error("llama-sliding-window", config_with("llama", "\"sliding_window\": 4096"), NULL, 4, 2,
                "\"sliding_window\" is not modelled by ftc import for llama");
    char gpt2[600];
    snprintf(gpt2, sizeof gpt2, "%s/../configs/gpt2.json", dir);
    check_error("gpt2-published", NULL, gpt2, 6, 3,
                "\"attn_pdrop\" = 0.1 is not modelled: ftc's attention drops no attention weights");
    check_error("attention-dropout", config_with("qwen2", "\"attention_dropout\": 0.1"), NULL, 4, 2,
                "\"attention_dropout\" = 0.1 is not modelled");
    check_error("quantized", config_with("mistral", "\"quantization_config\": {\"bits\": 4}"), NULL,
                4, 2, "\"quantization_config\": the checkpoint is quantised");
    check_error("bidirectional", config_with("gemma3_text", "\"use_bidirectional_attention\": true"),
                NULL, 4, 2, "\"use_bidirectional_attention\": true is not modelled");
    check_error("rope-key", config_with("llama", "\"rope_parameters\": {\"rope_type\": \"default\",\n"
                                                "   \"rope_theta\": 10000.0, \"beta_fast\": 32}"),
                NULL, 5, 27, "\"beta_fast\" is not modelled for rope type \"default\"");
    check_error("gemma3-ropes",
                config_with("gemma3_text", "\"rope_parameters\": {\"full_attention\": {\"rope_type\": \"yarn\",\n"
                            "   \"factor\": 4.0, \"original_max_position_embeddings\": 512},\n"
                            "   \"sliding_attention\": {\"rope_type\": \"default\"}}"),
                NULL, 4, 2, "the full and sliding layers' ropes differ");
    check_error("layer-types", config_with("qwen3", "\"sliding_window\": 8, \"layer_types\": [\"full_attention\"]"),
                NULL, 4, 23, "\"layer_types\" must list the 4 layers' types");
    check_error("window-none", config_with("gemma2", "\"sliding_window\": null"), NULL, 4, 2,
                "layers attend through a sliding window, but \"sliding_window\" gives none");
    check_error("pad-id", config_with("phi3", "\"pad_token_id\": 1000"), NULL, 4, 2,
                "\"pad_token_id\" must be a token id below vocab_size");
    check_error("cross-attention", "{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 64,\n"
                " \"n_layer\": 2, \"n_head\": 4, \"n_positions\": 64, \"attn_pdrop\": 0.0,\n"
                " \"add_cross_attention\": true}\n", NULL, 3, 2,
                "\"add_cross_attention\": true is not modelled");
    check_error("dropout-one", "{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 64,\n"
                " \"n_layer\": 2, \"n_head\": 4, \"n_positions\": 64, \"attn_pdrop\": 0.0,\n"
                " \"resid_pdrop\": 1.0}\n", NULL, 3, 2, "\"resid_pdrop\" must be below 1");
    check_error("partial-odd", "{\"model_type\": \"gpt_neox\", \"vocab_size\": 100, \"hidden_size\": 64,\n"
                " \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,\n"
                " \"rotary_pct\": 0.1}\n", NULL, 3, 2, "a partial rotary factor of 0.1 leaves 1 of "
                "head_dim 16 dims rotating");
    // (out of range before any arithmetic on it: the fuzzer's 6.7e24 once overflowed the
    // dims' integer; Gemma 3's two ropes give one message for the factor they share)
    check_error("partial-huge", config_with("gemma3_text", "\"partial_rotary_factor\": 6.7e24"), NULL, 4, 2,
                "a partial rotary factor of 6.7e+24 is not in (0, 1]");
    check_error("gelu-llama", config_with("llama", "\"hidden_act\": \"gelu_new\""), NULL, 4, 2,
                "\"hidden_act\" = \"gelu_new\" is not modelled: llama's MLP is SwiGLU");
}

// What each family's .ft says for what its config asks.
static void family_tests(void) {
    check_contains("llama3-rope", config_with("llama", "\"rope_scaling\": {\"rope_type\": \"llama3\", "
                   "\"factor\": 8.0,\n   \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                   "\"original_max_position_embeddings\": 8192}, \"rope_theta\": 500000.0"),
                   (const char *const[]){
                       "positions, theta, scaling = llama3, factor = 8.0, low_freq_factor = 1.0, "
                       "high_freq_factor = 4.0, original_max = 8192)\n",
                       "  theta    = 500000.0\n", NULL});
    check_contains("qwen2-window", config_with("qwen2", "\"use_sliding_window\": true, \"sliding_window\": 1024,\n"
                   " \"max_window_layers\": 2"),
                   (const char *const[]){
                       "    full = [1, 1, 0, 0][layer]\n",
                       "a = attention(q, k, v, causal = true, window = [1024, 0][full])\n",
                       "sliding window 1024 on 2 of 4 layers", NULL});
    check_contains("qwen2-no-window", config_with("qwen2", "\"use_sliding_window\": false, \"sliding_window\": 1024"),
                   (const char *const[]){"a = attention(q, k, v, causal = true)\n", NULL});
    check_contains("yarn", config_with("qwen2", "\"max_position_embeddings\": 131072, \"rope_scaling\": {\"type\": \"yarn\",\n"
                   "   \"factor\": 4.0, \"original_max_position_embeddings\": 32768}"),
                   (const char *const[]){"scaling = yarn, factor = 4.0, original_max = 32768)", NULL});
    check_contains("yarn-mscale", config_with("llama", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 40.0,\n"
                   "   \"mscale\": 0.707, \"mscale_all_dim\": 1.0, \"beta_fast\": 24, \"truncate\": false,\n"
                   "   \"original_max_position_embeddings\": 4096}"),
                   (const char *const[]){"scaling = yarn, factor = 40.0, beta_fast = 24.0, original_max = 4096, "
                                         "attention_factor = 0.92104235531633", ", truncate = false)", NULL});
    check_contains("dynamic", config_with("mistral", "\"max_position_embeddings\": 4096, \"sliding_window\": null,\n"
                   " \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}"),
                   (const char *const[]){"scaling = dynamic, factor = 2.0, original_max = 4096)",
                                         "a = attention(q, k, v, causal = true)\n", NULL});
    check_contains("qwen3-norms", config_with("qwen3", "\"head_dim\": 32"),
                   (const char *const[]){"q = rope(rmsnorm(view(linear(h, wq), [B, S, heads, head_dim]), q_norm, eps), positions, theta)\n",
                                         "  head_dim = 32\n", NULL});
    check_contains("gemma-pad", config_with("gemma", "\"head_dim\": 32, \"pad_token_id\": 0, \"hidden_act\": \"gelu\""),
                   (const char *const[]){"decoder(embed(embed, tokens, padding = 0) * 8.0)\n",
                                         "return x + linear(gelu(linear(h, wg)) * linear(h, wu), wd)\n",
                                         "return linear(rmsnorm(x, final_norm, eps, offset = 1.0), embed)\n", NULL});
    // pad_token_id absent: the config class's default (Gemma's 0, Phi-3's 32000); null: none.
    check_contains("gemma-pad-default", config_with("gemma", "\"head_dim\": 32, \"hidden_act\": \"gelu\""),
                   (const char *const[]){"decoder(embed(embed, tokens, padding = 0) * 8.0)\n", NULL});
    check_contains("gemma3-pad-default", config_with("gemma3_text", "\"head_dim\": 16"),
                   (const char *const[]){"embed(embed, tokens, padding = 0)", NULL});
    check_lacks("gemma-pad-null", config_with("gemma", "\"head_dim\": 32, \"pad_token_id\": null, \"hidden_act\": \"gelu\""),
                "padding =");
    check_contains("phi3-pad-default", "{\"model_type\": \"phi3\", \"vocab_size\": 32064, \"hidden_size\": 64,\n"
                   " \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,\n"
                   " \"num_key_value_heads\": 4}\n",
                   (const char *const[]){"embed(embed, tokens, padding = 32000)", NULL});
    check_lacks("qwen2-no-pad", config_with("qwen2", ""), "padding =");
    check_contains("gemma2", config_with("gemma2", "\"head_dim\": 16, \"query_pre_attn_scalar\": 16, \"sliding_window\": 64,\n"
                   " \"attn_logit_softcapping\": 50.0, \"final_logit_softcapping\": 30.0"),
                   (const char *const[]){"    full = [0, 1, 0, 1][layer]\n",
                                         "attention(q, k, v, causal = true, window = [64, 0][full], softcap = 50.0, scale = 0.25)",
                                         "x = x + rmsnorm(a, post_attn_norm, eps, offset = 1.0)\n",
                                         "return softcap(linear(rmsnorm(x, final_norm, eps, offset = 1.0), embed), 30.0)\n", NULL});
    check_contains("gemma3", config_with("gemma3_text", "\"head_dim\": 16, \"sliding_window\": 64, \"sliding_window_pattern\": 2,\n"
                   " \"rope_local_base_freq\": 10000.0, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}"),
                   (const char *const[]){"positions, [theta_l, theta][full], scaling = linear, factor = [1.0, 8.0][full])",
                                         "q_norm, eps, offset = 1.0)", "  theta_l  = 10000.0\n", NULL});
    check_contains("phi3", config_with("phi3", "\"partial_rotary_factor\": 0.5, \"sliding_window\": 2047, "
                   "\"resid_pdrop\": 0.1"),
                   (const char *const[]){"param wqkv [(heads + 2 * kv_heads) * head_dim, dim]",
                                         "positions, theta, rotary = 8)",
                                         "return x + dropout(linear(silu(slice(gu, 2, 0, ffn)) * slice(gu, 2, ffn, ffn), wd), 0.1)\n",
                                         "window = 2047", NULL});
    // Keys absent: the config class's defaults, as transformers reads them (Mistral's 8 kv
    // heads, Qwen3's head_dim 128, Gemma 2's 256 and 4 kv heads, Phi-3's eps 1e-5); null
    // kv heads: as many as the query heads.
    check_contains("qwen3-head-dim-default", config_with("qwen3", ""),
                   (const char *const[]){"  head_dim = 128\n", "  eps      = 1e-6\n", NULL});
    check_contains("mistral-kv-default", "{\"model_type\": \"mistral\", \"vocab_size\": 1000, \"hidden_size\": 64,\n"
                   " \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 16}\n",
                   (const char *const[]){"  kv_heads = 8\n", "  head_dim = dim / heads\n", NULL});
    check_contains("mistral-kv-null", "{\"model_type\": \"mistral\", \"vocab_size\": 1000, \"hidden_size\": 64,\n"
                   " \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 16,\n"
                   " \"num_key_value_heads\": null}\n",
                   (const char *const[]){"  kv_heads = 16\n", NULL});
    check_contains("gemma2-defaults", "{\"model_type\": \"gemma2\", \"vocab_size\": 1000, \"hidden_size\": 64,\n"
                   " \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 8}\n",
                   (const char *const[]){"  kv_heads = 4\n", "  head_dim = 256\n", NULL});
    check_contains("phi3-eps-default", config_with("phi3", ""), (const char *const[]){"  eps      = 1e-5\n", NULL});
    check_error("mistral-kv-default-divide",
                "{\"model_type\": \"mistral\", \"vocab_size\": 1000, \"hidden_size\": 60,\n"
                " \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 12}\n",
                NULL, 2, 51, "num_attention_heads (12) is not a multiple of num_key_value_heads (8), "
                "mistral's default");
    check_contains("gpt2", "{\"model_type\": \"gpt2\", \"vocab_size\": 100, \"n_embd\": 64, \"n_layer\": 3,\n"
                   " \"n_head\": 4, \"n_positions\": 128, \"attn_pdrop\": 0.0, \"embd_pdrop\": 0.1,\n"
                   " \"resid_pdrop\": 0.0, \"scale_attn_by_inverse_layer_idx\": true}\n",
                   (const char *const[]){"decoder(dropout(wte[tokens] + wpe[positions], 0.1))\n",
                                         "scale = [0.25, 0.125, 0.08333333333333333][layer])\n",
                                         "  seq          = 128\n", NULL});
    check_contains("neox-sequential", "{\"model_type\": \"gpt_neox\", \"vocab_size\": 100, \"hidden_size\": 64,\n"
                   " \"intermediate_size\": 96, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,\n"
                   " \"use_parallel_residual\": false, \"rotary_pct\": 0.5, \"tie_word_embeddings\": true}\n",
                   (const char *const[]){"    x = x + a\n    return x + linear(gelu_exact(",
                                         "rope(slice(qkv, 3, 0, head_dim), positions, theta, rotary = 8)",
                                         "return linear(layernorm(x, final_w, final_b, eps), embed)\n", NULL});
    char absent[600];
    snprintf(absent, sizeof absent, "%s/absent.json", tmpdir);
    check_error("unreadable", NULL, absent, 0, 0, "cannot read");
}

// Removes the temp dir and the files the tests wrote in it.
static void remove_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
        if (e->d_name[0] != '.')
            unlink(path);
    }
    if (d)
        closedir(d);
    if (rmdir(tmpdir) != 0)
        perror(tmpdir);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    golden_tests(argv[1]);
    option_tests();
    error_tests();
    unsupported_tests(argv[1]);
    family_tests();
    remove_tmpdir();
    return CHECK_DONE();
}
