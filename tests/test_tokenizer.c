// test_tokenizer.c: runtime/tokenizer.c against Hugging Face `tokenizers`.
//
//   test_tokenizer FIXTURES_DIR        (tests/fixtures/tok, made by make_tokenizers.py)
//
// For each tokenizer style (qwen2, gpt2, llama3, roberta), every line of corpus.jsonl is
// encoded and its ids, with the post-processor's before and after them, compared with the
// ids `tokenizers` gave (NAME.ids), token for token. Then: the BPE merges of long pieces
// (past the cache) and of repeated ones (through it) agree; invalid UTF-8 is refused;
// tokenizers of other kinds are refused naming what they are; malformed files name the
// field.
#include "tokenizer.h"

#include "check.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *dir;
static char tmp_dir[256];

static Tokenizer *load(const char *name) {
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    Tokenizer *t = NULL;
    if (tok_load(&t, path, err, sizeof err) != 0)
        printf("  %s\n", err);
    return t;
}

// Encodes text as tokenizers' encode() does: the post-processor's ids around it.
static int encode_full(const Tokenizer *t, TokScratch *s, const char *text, size_t len, TokIds *out) {
    size_t n;
    const int32_t *pre = tok_prefix(t, &n);
    out->n = 0;
    if (tok_ids_push(out, pre, n) != 0 || tok_encode(t, s, text, len, out) != 0)
        return -1;
    const int32_t *suf = tok_suffix(t, &n);
    return tok_ids_push(out, suf, n);
}

static void print_ids(const char *what, const int32_t *v, size_t n) {
    printf("    %s:", what);
    for (size_t i = 0; i < n && i < 40; i++)
        printf(" %d", v[i]);
    printf("%s\n", n > 40 ? " ..." : "");
}

static void check_style(const char *name) {
    Tokenizer *t = load(name);
    CHECK(t != NULL);
    if (!t)
        return;
    TokScratch *s = tok_scratch_new(t);
    char path[1024];
    snprintf(path, sizeof path, "%s/corpus.jsonl", dir);
    FILE *corpus = fopen(path, "r");
    snprintf(path, sizeof path, "%s/%s.ids", dir, name);
    FILE *ids = fopen(path, "r");
    CHECK(corpus && ids);
    char *line = NULL, *want = NULL;
    size_t cap = 0, wcap = 0;
    TokIds got = {0};
    int n_lines = 0, n_ids = 0;
    // twice: the second pass goes through the cache of pieces already merged
    for (int pass = 0; pass < 2 && corpus && ids; pass++) {
        rewind(corpus), rewind(ids);
        for (int ln = 1; getline(&line, &cap, corpus) > 0; ln++) {
            json_error_t je;
            json_t *rec = json_loads(line, JSON_ALLOW_NUL, &je);
            json_t *text = json_object_get(rec, "text");
            CHECK(json_is_string(text));
            CHECK(getline(&want, &wcap, ids) > 0);
            if (!json_is_string(text) || !want) {
                json_decref(rec);
                break;
            }
            CHECK(encode_full(t, s, json_string_value(text), json_string_length(text), &got) == 0);
            size_t k = 0;
            bool same = true;
            for (char *p = want, *end; *p && *p != '\n'; p = end) {
                long v = strtol(p, &end, 10);
                if (end == p)
                    break;
                same = same && k < got.n && got.id[k] == v;
                k++;
            }
            same = same && k == got.n;
            CHECKF(same, "%s: corpus line %d: %zu ids, tokenizers gave %zu", name, ln, got.n, k);
            if (!same) {
                printf("    text: %s", line);
                print_ids("ftc", got.id, got.n);
                printf("    tokenizers: %s", want);
            }
            n_lines += pass == 0;
            n_ids += pass == 0 ? (int)got.n : 0;
            json_decref(rec);
        }
    }
    printf("  %s: %d lines, %d ids\n", name, n_lines, n_ids);
    CHECK(n_lines >= 30);
    free(line), free(want);
    tok_ids_free(&got);
    if (corpus)
        fclose(corpus);
    if (ids)
        fclose(ids);
    tok_scratch_free(s);
    tok_free(t);
}

static void test_qwen2(void) { check_style("qwen2"); }
static void test_gpt2(void) { check_style("gpt2"); }
static void test_llama3(void) { check_style("llama3"); }
static void test_roberta(void) { check_style("roberta"); }
static void test_pieces(void) { check_style("pieces"); }

// A piece longer than the cache takes is merged the same way as its parts add up to, and
// the same text gives the same ids from a fresh scratch and from a warm one.
static void test_long_pieces(void) {
    Tokenizer *t = load("gpt2");
    CHECK(t != NULL);
    if (!t)
        return;
    TokScratch *cold = tok_scratch_new(t), *warm = tok_scratch_new(t);
    char text[3000];
    for (size_t i = 0; i < sizeof text - 1; i++)
        text[i] = "abcdeabcdeeeee"[i % 14];
    text[sizeof text - 1] = '\0';
    TokIds a = {0}, b = {0}, c = {0};
    CHECK(tok_encode(t, warm, text, 200, &a) == 0);
    CHECK(tok_encode(t, cold, text, strlen(text), &a) == 0);
    CHECK(tok_encode(t, warm, text, strlen(text), &b) == 0);
    CHECK(tok_encode(t, warm, text, 200, &c) == 0);
    CHECK(tok_encode(t, warm, text, strlen(text), &c) == 0);
    CHECK(a.n == b.n + c.n - b.n && b.n > 0);
    CHECK(c.n == a.n && memcmp(a.id, c.id, a.n * sizeof *a.id) == 0);
    tok_ids_free(&a), tok_ids_free(&b), tok_ids_free(&c);
    tok_scratch_free(cold), tok_scratch_free(warm);
    tok_free(t);
}

static void test_invalid_utf8(void) {
    Tokenizer *t = load("qwen2");
    CHECK(t != NULL);
    if (!t)
        return;
    TokScratch *s = tok_scratch_new(t);
    TokIds ids = {0};
    CHECK_EQ(TOK_ERR_UTF8, tok_encode(t, s, "ab\xff", 3, &ids));
    CHECK_EQ(TOK_ERR_UTF8, tok_encode(t, s, "\xe4\xbd", 2, &ids));
    CHECK_EQ(0, ids.n);
    CHECK_EQ(0, tok_encode(t, s, "a\0b", 3, &ids));   // NUL is a character
    CHECK(ids.n >= 2);
    CHECK_EQ(900, tok_find(t, "<|endoftext|>", 13));
    CHECK_EQ(-1, tok_find(t, "<|nothing|>", 11));
    CHECK_EQ(903, tok_vocab_size(t));
    tok_ids_free(&ids);
    tok_scratch_free(s);
    tok_free(t);
}

// Writes text as tmp_dir/NAME.json; returns the path (static).
static const char *write_tmp(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s.json", tmp_dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static void expect_refused(const char *name, const char *json, const char *want) {
    const char *path = write_tmp(name, json);
    char err[1024] = "";
    Tokenizer *t = NULL;
    CHECK(tok_load(&t, path, err, sizeof err) == -1);
    CHECK(t == NULL);
    CHECKF(strstr(err, want) != NULL, "%s: \"%s\" does not say \"%s\"", name, err, want);
    CHECKF(strncmp(err, path, strlen(path)) == 0, "%s: \"%s\" does not name the file", name, err);
}

#define BYTE_LEVEL "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"

static void test_refused(void) {
    expect_refused("unigram", "{\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0.0]]}," BYTE_LEVEL "}",
                   "model.type is \"Unigram\"");
    expect_refused("wordpiece", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}", "model.type is \"WordPiece\"");
    expect_refused("sentencepiece",
                   "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"x\"}]},"
                   "\"pre_tokenizer\":null,\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,"
                   "\"vocab\":{\"a\":0},\"merges\":[]}}",
                   "no pre_tokenizer: not a byte-level BPE tokenizer");
    expect_refused("metaspace",
                   "{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"x\"},"
                   "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                   "pre_tokenizer Metaspace is not supported");
    expect_refused("lowercase",
                   "{\"normalizer\":{\"type\":\"Lowercase\"}," BYTE_LEVEL ","
                   "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                   "normalizer Lowercase is not supported");
    expect_refused("dropout", "{" BYTE_LEVEL ",\"model\":{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{\"a\":0},\"merges\":[]}}",
                   "model.dropout is set");
    expect_refused("bad_merge", "{" BYTE_LEVEL ",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}",
                   "model.merges[0] (\"a\" \"b\"): what it makes is not in the vocabulary");
    expect_refused("bad_merge_form", "{" BYTE_LEVEL ",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b c\"]}}",
                   "model.merges[0] is neither");
    expect_refused("bad_json", "{\"model\": [1, 2,\n}", ":2:1: not valid JSON");
    expect_refused("bad_regex",
                   "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                   "{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\"}]},"
                   "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                   "the regex does not compile");
    expect_refused("byte_level_first",
                   "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\"},"
                   "{\"type\":\"Digits\",\"individual_digits\":true}]},"
                   "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                   "ByteLevel must come last");
    expect_refused("bad_added", "{" BYTE_LEVEL ",\"added_tokens\":[{\"content\":\"x\"}],"
                   "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                   "added_tokens[0] needs an \"id\"");
    char err[256];
    Tokenizer *t = NULL;
    CHECK(tok_load(&t, "/nonexistent/tokenizer.json", err, sizeof err) == -1);
    CHECK(strstr(err, "cannot read") != NULL);
}

// Split's behaviours and invert on a tokenizer with a one-character pattern, against the
// pieces tokenizers makes (the vocabulary holds only single bytes, so every id is a byte).
static void test_split_behaviours(void) {
    static const struct { const char *behavior; bool invert; const char *want; } cases[] = {
        // "a-b--c" split at '-': the pieces, as tokenizers' Split documents them
        {"Isolated", false, "a|-|b|-|-|c"},
        {"Removed", false, "a|b|c"},
        {"MergedWithPrevious", false, "a-|b-|-|c"},
        {"MergedWithNext", false, "a|-b|-|-c"},
        {"Contiguous", false, "a|-|b|--|c"},
        {"Removed", true, "-|-|-"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char json[4096];
        // Distinct pieces are told apart through a Digits stage that never splits, and a
        // vocabulary of the bytes used: each piece's ids are its bytes, so the pieces show
        // only as where merges could not cross. A merge "a -" would cross, so none exists.
        snprintf(json, sizeof json,
                 "{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":"
                 "{\"String\":\"-\"},\"behavior\":\"%s\",\"invert\":%s},{\"type\":\"ByteLevel\","
                 "\"add_prefix_space\":true,\"use_regex\":false}]},"
                 "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"-\":3,\"\\u0120\":4},\"merges\":[]}}",
                 cases[k].behavior, cases[k].invert ? "true" : "false");
        const char *path = write_tmp("split", json);
        char err[1024];
        Tokenizer *t = NULL;
        CHECKF(tok_load(&t, path, err, sizeof err) == 0, "%s", err);
        if (!t)
            continue;
        TokScratch *s = tok_scratch_new(t);
        TokIds ids = {0};
        CHECK(tok_encode(t, s, "a-b--c", 6, &ids) == 0);
        // add_prefix_space puts a space (id 4) before every piece: the pieces show
        char got[64] = "";
        size_t o = 0;
        for (size_t i = 0; i < ids.n && o + 2 < sizeof got; i++) {
            if (ids.id[i] == 4) {
                if (i > 0)
                    got[o++] = '|';
                continue;
            }
            got[o++] = "abc-"[ids.id[i]];
        }
        got[o] = '\0';
        CHECKF(strcmp(got, cases[k].want) == 0, "%s%s: pieces %s, want %s", cases[k].behavior,
               cases[k].invert ? " inverted" : "", got, cases[k].want);
        tok_ids_free(&ids);
        tok_scratch_free(s);
        tok_free(t);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_tokenizer FIXTURES_DIR\n");
        return 2;
    }
    dir = argv[1];
    snprintf(tmp_dir, sizeof tmp_dir, "%s/test_tokenizer.XXXXXX",
             getenv("TMPDIR") && strlen(getenv("TMPDIR")) < 100 ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 2;
    }
    RUN(test_qwen2);
    RUN(test_gpt2);
    RUN(test_llama3);
    RUN(test_roberta);
    RUN(test_pieces);
    RUN(test_long_pieces);
    RUN(test_invalid_utf8);
    RUN(test_refused);
    RUN(test_split_behaviours);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_tokenizer: could not remove %s\n", tmp_dir);
    return CHECK_DONE();
}
