// tokenizer.c — byte-level BPE tokenizer.json files, encoding as Hugging Face `tokenizers`
// does; see tokenizer.h for what is read and what is refused.
//
// Encoding one text: the raw text is split at the non-normalized added tokens; each piece
// between them is normalized and split at the normalized added tokens; each piece left
// goes through the pre-tokenizer stages (a Split or ByteLevel each, streamed: a stage
// hands every piece it makes to the next), and the last stage's pieces are BPE-merged
// (through a per-thread cache of pieces already seen). Pieces are kept as raw bytes: the
// ByteLevel alphabet maps each byte to one character, so a vocabulary entry is looked up
// by the bytes its characters stand for.
#define PCRE2_CODE_UNIT_WIDTH 8

#include "tokenizer.h"
#include "fileio.h"
#include "xalloc.h"

#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

enum {
    MAX_STAGES = 8,           // pre-tokenizers in a Sequence
    CACHE_PIECE_BYTES = 256,  // longer pieces are merged every time, as tokenizers does
    CACHE_ENTRIES = 1 << 16,  // per thread; the cache starts over when full
};

// ---------------------------------------------------------------------------------------------
// Hash tables

static uint64_t hash_bytes(const void *p, size_t n) {
    return rt_fnv1a64(RT_FNV_BASIS, p, n);
}

// Byte strings to int32 values, open addressing; the keys live in one pool.
typedef struct StrMap {
    uint32_t *slot;       // entry index + 1, 0 empty; (mask + 1) slots
    size_t mask;
    uint64_t *hash;       // per entry
    uint32_t *key_off, *key_len;
    int32_t *val;
    size_t n, cap;
    char *pool;
    size_t pool_n, pool_cap;
} StrMap;

static void strmap_free(StrMap *m) {
    free(m->slot), free(m->hash), free(m->key_off), free(m->key_len), free(m->val), free(m->pool);
    memset(m, 0, sizeof *m);
}

static int strmap_grow_slots(StrMap *m, size_t want) {
    size_t cap = 16;
    while (cap < want * 2)
        cap <<= 1;
    uint32_t *slot = calloc(cap, sizeof *slot);
    if (!slot)
        return -1;
    for (size_t e = 0; e < m->n; e++) {
        size_t i = m->hash[e] & (cap - 1);
        while (slot[i])
            i = (i + 1) & (cap - 1);
        slot[i] = (uint32_t)e + 1;
    }
    free(m->slot);
    m->slot = slot;
    m->mask = cap - 1;
    return 0;
}

// The entry of key, or -1.
static long strmap_find(const StrMap *m, const void *key, size_t n, uint64_t h) {
    if (!m->slot)
        return -1;
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        uint32_t s = m->slot[i];
        if (!s)
            return -1;
        size_t e = s - 1;
        if (m->hash[e] == h && m->key_len[e] == n && (n == 0 || memcmp(m->pool + m->key_off[e], key, n) == 0))
            return (long)e;
    }
}

static int32_t strmap_get(const StrMap *m, const void *key, size_t n) {
    long e = strmap_find(m, key, n, hash_bytes(key, n));
    return e < 0 ? -1 : m->val[e];
}

// Sets key to val (a later set of the same key wins); -1 when out of memory.
static int strmap_set(StrMap *m, const void *key, size_t n, int32_t val) {
    uint64_t h = hash_bytes(key, n);
    long e = strmap_find(m, key, n, h);
    if (e >= 0) {
        m->val[e] = val;
        return 0;
    }
    if (n > UINT32_MAX || m->n >= UINT32_MAX - 1)
        return -1;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        uint64_t *hh = xrealloc(m->hash, cap * sizeof *hh);
        if (hh)
            m->hash = hh;
        uint32_t *ko = xrealloc(m->key_off, cap * sizeof *ko);
        if (ko)
            m->key_off = ko;
        uint32_t *kl = xrealloc(m->key_len, cap * sizeof *kl);
        if (kl)
            m->key_len = kl;
        int32_t *v = realloc(m->val, cap * sizeof *v);
        if (v)
            m->val = v;
        if (!hh || !ko || !kl || !v)
            return -1;
        m->cap = cap;
    }
    if (m->pool_n + n > m->pool_cap) {
        size_t cap = m->pool_cap ? m->pool_cap : 4096;
        while (cap < m->pool_n + n)
            cap *= 2;
        if (cap > UINT32_MAX)
            return -1;
        char *p = realloc(m->pool, cap);
        if (!p)
            return -1;
        m->pool = p;
        m->pool_cap = cap;
    }
    if ((m->n + 1) * 2 > m->mask + 1 && strmap_grow_slots(m, m->n + 1) != 0)
        return -1;
    e = (long)m->n++;
    if (n)
        memcpy(m->pool + m->pool_n, key, n);
    m->hash[e] = h;
    m->key_off[e] = (uint32_t)m->pool_n;
    m->key_len[e] = (uint32_t)n;
    m->val[e] = val;
    m->pool_n += n;
    size_t i = h & m->mask;
    while (m->slot[i])
        i = (i + 1) & m->mask;
    m->slot[i] = (uint32_t)e + 1;
    return 0;
}

// Merges: the pair (left id, right id) to its rank and the id it makes.
typedef struct PairMap {
    uint64_t *key;        // left << 32 | right; PAIR_EMPTY for none
    uint32_t *rank;
    int32_t *made;
    size_t mask, n;
} PairMap;

#define PAIR_EMPTY UINT64_MAX

static uint64_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static int pairmap_init(PairMap *m, size_t n) {
    size_t cap = 16;
    while (cap < n * 2)
        cap <<= 1;
    m->key = malloc(cap * sizeof *m->key);
    m->rank = malloc(cap * sizeof *m->rank);
    m->made = malloc(cap * sizeof *m->made);
    if (!m->key || !m->rank || !m->made)
        return -1;
    for (size_t i = 0; i < cap; i++)
        m->key[i] = PAIR_EMPTY;
    m->mask = cap - 1;
    m->n = 0;
    return 0;
}

// A later merge of the same pair replaces an earlier one, as tokenizers' map does.
static void pairmap_set(PairMap *m, int32_t a, int32_t b, uint32_t rank, int32_t made) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = pair_hash(k) & m->mask;
    while (m->key[i] != PAIR_EMPTY && m->key[i] != k)
        i = (i + 1) & m->mask;
    if (m->key[i] == PAIR_EMPTY)
        m->n++;
    m->key[i] = k;
    m->rank[i] = rank;
    m->made[i] = made;
}

// The slot of pair (a, b), or -1.
static inline long pairmap_find(const PairMap *m, int32_t a, int32_t b) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = pair_hash(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == k)
            return (long)i;
        if (m->key[i] == PAIR_EMPTY)
            return -1;
    }
}

static void pairmap_free(PairMap *m) {
    free(m->key), free(m->rank), free(m->made);
    memset(m, 0, sizeof *m);
}

// ---------------------------------------------------------------------------------------------
// The tokenizer

// The added tokens of one kind (normalized or not) as a byte trie.
typedef struct TrieNode {
    int32_t first_child, next_sibling;
    int32_t token;        // index into Tokenizer.added ending here, or -1
    unsigned char byte;
} TrieNode;

typedef struct Trie {
    TrieNode *node;       // node 0 is the root
    size_t n, cap;
    bool starts[256];     // bytes a token begins with
} Trie;

typedef struct Added {
    int32_t id;
    bool lstrip, rstrip, single_word;
} Added;

typedef enum Behavior { B_ISOLATED, B_REMOVED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS } Behavior;

typedef struct Stage {
    bool byte_level;      // ByteLevel: the prefix space, then GPT-2's regex if `re`
    bool prefix_space;
    pcre2_code *re;       // the pattern the pieces are split by, or NULL
    Behavior behavior;
    bool invert;
} Stage;

typedef enum Norm { N_NFC, N_NFD, N_NFKC, N_NFKD } Norm;

struct Tokenizer {
    StrMap vocab;             // the raw bytes an entry's characters stand for -> id
    PairMap merges;
    int32_t byte_id[256];     // the id of each byte's character, or -1
    int32_t fallback[256][2]; // byte_fallback: <0xXX> ids of the character's UTF-8 bytes
    int32_t unk;              // unk_token's id, or -1
    bool fuse_unk, byte_fallback, ignore_merges;
    Added *added;
    size_t nadded;
    StrMap added_by_content;
    Trie raw_trie, norm_trie; // non-normalized and normalized added tokens
    Norm norm[4];
    int nnorm;
    Stage stage[MAX_STAGES];
    int nstage;
    pcre2_code *word_re;      // single_word's word characters
    TokIds prefix, suffix;    // the post-processor's ids
    int64_t vocab_size;
};

struct TokScratch {
    const Tokenizer *t;
    pcre2_match_data *md;
    // Per stage: the flagged spans of the piece being split, and the prefixed copy.
    struct { size_t *at; size_t n, cap; char *buf; size_t buf_cap; } depth[MAX_STAGES];
    // BPE working arrays
    int32_t *sym;
    int32_t *prev, *next;
    uint64_t *heap;
    size_t sym_cap, heap_cap;
    // The cache of pieces already merged: piece bytes -> ids[off .. off+len).
    StrMap cache;
    TokIds cache_ids;
};

int tok_ids_push(TokIds *a, const int32_t *ids, size_t n) {
    if (n == 0)
        return 0;
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 64;
        while (cap < a->n + n)
            cap *= 2;
        int32_t *p = realloc(a->id, cap * sizeof *p);
        if (!p)
            return -1;
        a->id = p;
        a->cap = cap;
    }
    memcpy(a->id + a->n, ids, n * sizeof *ids);
    a->n += n;
    return 0;
}

static int ids_push1(TokIds *a, int32_t id) { return tok_ids_push(a, &id, 1); }

void tok_ids_free(TokIds *a) {
    free(a->id);
    memset(a, 0, sizeof *a);
}

int64_t tok_vocab_size(const Tokenizer *t) { return t->vocab_size; }

const int32_t *tok_prefix(const Tokenizer *t, size_t *n) {
    *n = t->prefix.n;
    return t->prefix.id;
}

const int32_t *tok_suffix(const Tokenizer *t, size_t *n) {
    *n = t->suffix.n;
    return t->suffix.id;
}

int32_t tok_find(const Tokenizer *t, const char *s, size_t len) {
    int32_t a = strmap_get(&t->added_by_content, s, len);
    return a >= 0 ? t->added[a].id : strmap_get(&t->vocab, s, len);
}

// The ByteLevel alphabet (GPT-2's bytes_to_unicode): printable bytes stand for
// themselves, the others for U+0100 onwards in byte order.
static uint32_t byte_char(int b) {
    static uint32_t map[256];
    static bool made;
    if (!made) {
        uint32_t n = 0;
        for (int i = 0; i < 256; i++) {
            bool keep = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
            map[i] = keep ? (uint32_t)i : 256 + n++;
        }
        made = true;
    }
    return map[b];
}

// The byte character c stands for, or -1 when c is not in the ByteLevel alphabet.
static int char_byte(uint32_t c) {
    if ((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))
        return (int)c;
    if (c < 256 || c >= 256 + 68)
        return -1;
    for (int b = 0; b < 256; b++)
        if (byte_char(b) == c)
            return b;
    return -1;
}

// Decodes the UTF-8 character at s (n > 0 bytes left, valid UTF-8) into *c; its length.
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *c) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(s, (utf8proc_ssize_t)n, &cp);
    if (k <= 0) {
        *c = 0xFFFD;
        return 1;
    }
    *c = (uint32_t)cp;
    return (size_t)k;
}

// s's characters as the raw bytes they stand for, into out (at least n bytes); its
// length, or -1 when a character is not in the ByteLevel alphabet.
static long unmap_bytes(const char *s, size_t n, unsigned char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        i += utf8_next((const unsigned char *)s + i, n - i, &c);
        int b = char_byte(c);
        if (b < 0)
            return -1;
        out[o++] = (unsigned char)b;
    }
    return (long)o;
}

// ---------------------------------------------------------------------------------------------
// Loading

typedef struct Load {
    const char *path;
    char *err;
    size_t errlen;
} Load;

__attribute__((format(printf, 2, 3)))
static int lfail(Load *l, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rt_fail(l->err, l->errlen, "%s: %s", l->path, msg);
}

static const char *type_of(json_t *o) {
    json_t *t = json_object_get(o, "type");
    return json_is_string(t) ? json_string_value(t) : NULL;
}

static bool is_null(json_t *v) { return !v || json_is_null(v); }

// A boolean field, false when absent; -1 when it is something else.
static int get_bool(Load *l, json_t *o, const char *key, const char *where, bool dflt, bool *out) {
    json_t *v = json_object_get(o, key);
    if (is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v))
        return lfail(l, "%s.%s is not true or false", where, key);
    *out = json_is_true(v);
    return 0;
}

// PCRE2 with UTF and Unicode properties: \s, \w and \d by Unicode, as Oniguruma's are in
// the patterns tokenizers runs (\s takes U+0085 in both; \x1c-\x1f in neither).
static int compile_re(Load *l, const char *pattern, size_t len, bool literal, pcre2_code **out,
                      const char *where) {
    int ec;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &ec, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return lfail(l, "%s: the regex does not compile (%s, at offset %zu)", where, (char *)msg,
                     (size_t)at);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   // the interpreter serves where JIT cannot
    *out = re;
    return 0;
}

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_stage(Load *l, Tokenizer *t, json_t *pre, bool last) {
    const char *type = type_of(pre);
    if (t->nstage == MAX_STAGES)
        return lfail(l, "pre_tokenizer: more than %d pre-tokenizers in its Sequence", MAX_STAGES);
    Stage *s = &t->stage[t->nstage];
    memset(s, 0, sizeof *s);
    if (!type)
        return lfail(l, "pre_tokenizer: a pre-tokenizer without a \"type\"");
    if (strcmp(type, "ByteLevel") == 0) {
        if (!last)
            return lfail(l, "pre_tokenizer: ByteLevel must come last in its Sequence (ftc maps bytes after "
                            "every split)");
        bool use_regex = true;
        s->byte_level = true;
        if (get_bool(l, pre, "add_prefix_space", "pre_tokenizer", true, &s->prefix_space) != 0 ||
            get_bool(l, pre, "use_regex", "pre_tokenizer", true, &use_regex) != 0)
            return -1;
        if (use_regex &&
            compile_re(l, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, false, &s->re, "pre_tokenizer") != 0)
            return -1;
        t->nstage++;
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        json_t *pat = json_object_get(pre, "pattern");
        json_t *rx = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        json_t *beh = json_object_get(pre, "behavior");
        if (!json_is_string(rx) && !json_is_string(str))
            return lfail(l, "pre_tokenizer: Split's pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
        static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                                            "Contiguous"};
        const char *b = json_is_string(beh) ? json_string_value(beh) : "";
        int k = 0;
        while (k < 5 && strcmp(b, names[k]) != 0)
            k++;
        if (k == 5)
            return lfail(l, "pre_tokenizer: Split behavior \"%s\" is not one of Isolated, Removed, "
                            "MergedWithPrevious, MergedWithNext, Contiguous", b);
        s->behavior = (Behavior)k;
        if (get_bool(l, pre, "invert", "pre_tokenizer", false, &s->invert) != 0)
            return -1;
        json_t *v = json_is_string(rx) ? rx : str;
        if (compile_re(l, json_string_value(v), json_string_length(v), v == str, &s->re,
                       "pre_tokenizer Split") != 0)
            return -1;
        t->nstage++;
        return 0;
    }
    if (strcmp(type, "Digits") == 0) {
        bool individual = false;
        if (get_bool(l, pre, "individual_digits", "pre_tokenizer", false, &individual) != 0)
            return -1;
        s->behavior = individual ? B_ISOLATED : B_CONTIGUOUS;
        if (compile_re(l, "\\p{N}", 5, false, &s->re, "pre_tokenizer Digits") != 0)
            return -1;
        t->nstage++;
        return 0;
    }
    return lfail(l, "pre_tokenizer %s is not supported (ftc reads byte-level BPE: Split, Digits and "
                    "ByteLevel)", type);
}

static int load_pre(Load *l, Tokenizer *t, json_t *pre) {
    if (is_null(pre))
        return lfail(l, "no pre_tokenizer: not a byte-level BPE tokenizer (ftc needs a ByteLevel "
                        "pre-tokenizer)");
    const char *type = type_of(pre);
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(pre, "pretokenizers");
        if (!json_is_array(list))
            return lfail(l, "pre_tokenizer: a Sequence without \"pretokenizers\"");
        for (size_t i = 0; i < json_array_size(list); i++)
            if (add_stage(l, t, json_array_get(list, i), i + 1 == json_array_size(list)) != 0)
                return -1;
    } else if (add_stage(l, t, pre, true) != 0) {
        return -1;
    }
    if (t->nstage == 0 || !t->stage[t->nstage - 1].byte_level)
        return lfail(l, "pre_tokenizer has no ByteLevel: not a byte-level BPE tokenizer");
    return 0;
}

static int add_norm(Load *l, Tokenizer *t, json_t *n) {
    const char *type = type_of(n);
    static const char *const names[] = {"NFC", "NFD", "NFKC", "NFKD"};
    for (int k = 0; k < 4 && type; k++)
        if (strcmp(type, names[k]) == 0) {
            if (t->nnorm == 4)
                return lfail(l, "normalizer: more than 4 in its Sequence");
            t->norm[t->nnorm++] = (Norm)k;
            return 0;
        }
    return lfail(l, "normalizer %s is not supported (ftc reads NFC, NFD, NFKC, NFKD and Sequences of them)",
                 type ? type : "without a type");
}

static int load_norm(Load *l, Tokenizer *t, json_t *n) {
    if (is_null(n))
        return 0;
    const char *type = type_of(n);
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return lfail(l, "normalizer: a Sequence without \"normalizers\"");
        for (size_t i = 0; i < json_array_size(list); i++)
            if (add_norm(l, t, json_array_get(list, i)) != 0)
                return -1;
        return 0;
    }
    return add_norm(l, t, n);
}

static int trie_add(Trie *tr, const char *s, size_t n, int32_t token) {
    if (!tr->node) {
        tr->cap = 64;
        tr->node = malloc(tr->cap * sizeof *tr->node);
        if (!tr->node)
            return -1;
        tr->node[0] = (TrieNode){-1, -1, -1, 0};
        tr->n = 1;
    }
    int32_t at = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t c = tr->node[at].first_child;
        while (c >= 0 && tr->node[c].byte != b)
            c = tr->node[c].next_sibling;
        if (c < 0) {
            if (tr->n == tr->cap) {
                TrieNode *p = realloc(tr->node, 2 * tr->cap * sizeof *p);
                if (!p)
                    return -1;
                tr->node = p;
                tr->cap *= 2;
            }
            c = (int32_t)tr->n++;
            tr->node[c] = (TrieNode){-1, tr->node[at].first_child, -1, b};
            tr->node[at].first_child = c;
        }
        at = c;
    }
    tr->node[at].token = token;
    tr->starts[(unsigned char)s[0]] = true;
    return 0;
}

static int load_added(Load *l, Tokenizer *t, json_t *list) {
    if (is_null(list))
        return 0;
    if (!json_is_array(list))
        return lfail(l, "added_tokens is not a list");
    t->added = calloc(json_array_size(list) + 1, sizeof *t->added);
    if (!t->added)
        return lfail(l, "out of memory");
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *a = json_array_get(list, i), *id = json_object_get(a, "id"), *c = json_object_get(a, "content");
        if (!json_is_integer(id) || !json_is_string(c) || json_integer_value(id) < 0 ||
            json_integer_value(id) > INT32_MAX - 1)
            return lfail(l, "added_tokens[%zu] needs an \"id\" (a non-negative integer) and a \"content\"", i);
        Added *ad = &t->added[t->nadded];
        bool normalized = true;
        ad->id = (int32_t)json_integer_value(id);
        if (get_bool(l, a, "lstrip", "added_tokens", false, &ad->lstrip) != 0 ||
            get_bool(l, a, "rstrip", "added_tokens", false, &ad->rstrip) != 0 ||
            get_bool(l, a, "single_word", "added_tokens", false, &ad->single_word) != 0 ||
            get_bool(l, a, "normalized", "added_tokens", true, &normalized) != 0)
            return -1;
        size_t n = json_string_length(c);
        if (n == 0)   // tokenizers never matches an empty token
            continue;
        if (ad->id + 1 > t->vocab_size)
            t->vocab_size = ad->id + 1;
        if (strmap_set(&t->added_by_content, json_string_value(c), n, (int32_t)t->nadded) != 0 ||
            trie_add(normalized ? &t->norm_trie : &t->raw_trie, json_string_value(c), n,
                     (int32_t)t->nadded) != 0)
            return lfail(l, "out of memory");
        t->nadded++;
    }
    return 0;
}

// One merge "a b" or ["a", "b"] into its two halves.
static int merge_halves(json_t *m, const char **a, size_t *na, const char **b, size_t *nb) {
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0)), *na = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1)), *nb = json_string_length(json_array_get(m, 1));
        return 0;
    }
    if (!json_is_string(m))
        return -1;
    const char *s = json_string_value(m), *sp = memchr(s, ' ', json_string_length(m));
    if (!sp || memchr(sp + 1, ' ', json_string_length(m) - (size_t)(sp + 1 - s)))
        return -1;
    *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = json_string_length(m) - *na - 1;
    return 0;
}

// The model's type and options: a BPE model that encodes the same every time.
static int check_model(Load *l, Tokenizer *t, json_t *model) {
    const char *type = type_of(model);
    if (!json_is_object(model))
        return lfail(l, "no \"model\" object");
    if (!type)   // older files leave the type out of a BPE model
        type = json_object_get(model, "merges") ? "BPE" : "(none)";
    if (strcmp(type, "BPE") != 0)
        return lfail(l, "model.type is \"%s\"; ftc reads byte-level BPE tokenizers (model.type \"BPE\" "
                        "with a ByteLevel pre-tokenizer)", type);
    json_t *v = json_object_get(model, "dropout");
    if (!is_null(v) && (!json_is_number(v) || json_number_value(v) != 0.0))
        return lfail(l, "model.dropout is set: BPE dropout makes encoding random, ftc does not apply it");
    if (!is_null(json_object_get(model, "continuing_subword_prefix")) ||
        !is_null(json_object_get(model, "end_of_word_suffix")))
        return lfail(l, "model has a continuing_subword_prefix or end_of_word_suffix: not a byte-level "
                        "BPE tokenizer");
    if (get_bool(l, model, "fuse_unk", "model", false, &t->fuse_unk) != 0 ||
        get_bool(l, model, "byte_fallback", "model", false, &t->byte_fallback) != 0 ||
        get_bool(l, model, "ignore_merges", "model", false, &t->ignore_merges) != 0)
        return -1;
    return 0;
}

// model.vocab: entries by the bytes their characters stand for; an entry with a character
// outside the alphabet cannot come out of a merge and is kept for tok_find by its own text.
static int load_vocab(Load *l, Tokenizer *t, json_t *vocab) {
    if (!json_is_object(vocab))
        return lfail(l, "model.vocab is not an object of token -> id");
    size_t nv = json_object_size(vocab);
    const char *key;
    json_t *val;
    unsigned char *buf = NULL;
    size_t buf_cap = 0;
    int rc = 0;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) > INT32_MAX - 1) {
            rc = lfail(l, "model.vocab[\"%.40s\"] is not a non-negative integer id", key);
            break;
        }
        int32_t id = (int32_t)json_integer_value(val);
        size_t n = strlen(key);
        if (n > buf_cap) {
            free(buf);
            buf_cap = n * 2;
            if (!(buf = malloc(buf_cap))) {
                rc = lfail(l, "out of memory");
                break;
            }
        }
        long k = unmap_bytes(key, n, buf);
        if ((k >= 0 ? strmap_set(&t->vocab, buf, (size_t)k, id) : strmap_set(&t->vocab, key, n, id)) != 0) {
            rc = lfail(l, "out of memory");
            break;
        }
        if (id + 1 > t->vocab_size)
            t->vocab_size = id + 1;
    }
    free(buf);
    if (rc)
        return rc;
    if (nv == 0)
        return lfail(l, "model.vocab is empty");
    return 0;
}

// Each byte's own token, and the byte tokens ("<0x41>" for 'A') byte_fallback uses for it.
static void map_bytes(Tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = strmap_get(&t->vocab, &c, 1);
        // byte_fallback works on the character's UTF-8 bytes, as tokenizers does
        char u[4];
        int nu = (int)utf8proc_encode_char((utf8proc_int32_t)byte_char(b), (utf8proc_uint8_t *)u);
        for (int k = 0; k < 2; k++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", k < nu ? (unsigned char)u[k] : 0);
            t->fallback[b][k] = k < nu ? strmap_get(&t->vocab, name, strlen(name)) : -2;
        }
    }
}

// model.unk_token, if any: a token of the vocabulary.
static int load_unk(Load *l, Tokenizer *t, json_t *v) {
    t->unk = -1;
    if (!json_is_string(v))
        return 0;
    size_t n = json_string_length(v);
    unsigned char *raw = malloc(n + 1);
    if (!raw)
        return lfail(l, "out of memory");
    long k = unmap_bytes(json_string_value(v), n, raw);
    t->unk = k >= 0 ? strmap_get(&t->vocab, raw, (size_t)k) : strmap_get(&t->vocab, json_string_value(v), n);
    free(raw);
    if (t->unk < 0)
        return lfail(l, "model.unk_token \"%.40s\" is not in the vocabulary", json_string_value(v));
    return 0;
}

// model.merges: each pair of tokens and the token it makes, ranked by its place in the list.
static int load_merges(Load *l, Tokenizer *t, json_t *merges) {
    if (!json_is_array(merges))
        return lfail(l, "model.merges is not a list");
    size_t nm = json_array_size(merges);
    if (pairmap_init(&t->merges, nm + 1) != 0)
        return lfail(l, "out of memory");
    unsigned char *joined = NULL;
    size_t joined_cap = 0;
    int rc = 0;
    for (size_t i = 0; i < nm && rc == 0; i++) {
        const char *a, *b;
        size_t na, nb;
        if (merge_halves(json_array_get(merges, i), &a, &na, &b, &nb) != 0) {
            rc = lfail(l, "model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", i);
            break;
        }
        if (na + nb > joined_cap) {
            free(joined);
            joined_cap = 2 * (na + nb) + 16;
            if (!(joined = malloc(joined_cap))) {
                rc = lfail(l, "out of memory");
                break;
            }
        }
        long ka = unmap_bytes(a, na, joined), kb = ka < 0 ? -1 : unmap_bytes(b, nb, joined + ka);
        int32_t ia = ka < 0 ? strmap_get(&t->vocab, a, na) : strmap_get(&t->vocab, joined, (size_t)ka);
        int32_t ib = kb < 0 ? strmap_get(&t->vocab, b, nb) : strmap_get(&t->vocab, joined + ka, (size_t)kb);
        int32_t im = kb < 0 ? -1 : strmap_get(&t->vocab, joined, (size_t)(ka + kb));
        if (ia < 0 || ib < 0 || im < 0)
            rc = lfail(l, "model.merges[%zu] (\"%.*s\" \"%.*s\"): %s is not in the vocabulary", i, (int)(na > 40 ? 40 : na),
                       a, (int)(nb > 40 ? 40 : nb), b, ia < 0 ? "its first half" : ib < 0 ? "its second half" : "what it makes");
        else
            pairmap_set(&t->merges, ia, ib, (uint32_t)i, im);
    }
    free(joined);
    return rc;
}

// model: a byte-level BPE model's vocabulary, unknown token and merges.
static int load_model(Load *l, Tokenizer *t, json_t *model) {
    if (check_model(l, t, model) != 0 || load_vocab(l, t, json_object_get(model, "vocab")) != 0)
        return -1;
    map_bytes(t);
    if (load_unk(l, t, json_object_get(model, "unk_token")) != 0)
        return -1;
    return load_merges(l, t, json_object_get(model, "merges"));
}

// The post-processor's ids before and after a sequence; a Sequence nests them.
static int load_post(Load *l, Tokenizer *t, json_t *p) {
    if (is_null(p))
        return 0;
    const char *type = type_of(p);
    if (!type)
        return lfail(l, "post_processor without a \"type\"");
    if (strcmp(type, "ByteLevel") == 0)
        return 0;
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "processors");
        if (!json_is_array(list))
            return lfail(l, "post_processor: a Sequence without \"processors\"");
        for (size_t i = 0; i < json_array_size(list); i++)
            if (load_post(l, t, json_array_get(list, i)) != 0)
                return -1;
        return 0;
    }
    TokIds pre = {0}, post = {0};
    int rc = 0;
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        json_t *cls = json_object_get(p, "cls"), *sep = json_object_get(p, "sep");
        json_t *ci = json_array_get(cls, 1), *si = json_array_get(sep, 1);
        if (!json_is_integer(ci) || !json_is_integer(si) || json_integer_value(ci) < 0 ||
            json_integer_value(si) < 0 || json_integer_value(ci) > INT32_MAX || json_integer_value(si) > INT32_MAX)
            return lfail(l, "post_processor %s needs \"cls\" and \"sep\" as [token, id]", type);
        if (ids_push1(&pre, (int32_t)json_integer_value(ci)) || ids_push1(&post, (int32_t)json_integer_value(si)))
            rc = lfail(l, "out of memory");
    } else if (strcmp(type, "TemplateProcessing") == 0) {
        json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
        if (!json_is_array(single))
            return lfail(l, "post_processor TemplateProcessing has no \"single\" template");
        int seen = 0;
        for (size_t i = 0; i < json_array_size(single) && rc == 0; i++) {
            json_t *item = json_array_get(single, i), *sp = json_object_get(item, "SpecialToken");
            if (json_object_get(item, "Sequence")) {
                seen++;
                continue;
            }
            json_t *name = json_object_get(sp, "id");
            json_t *ids = json_object_get(json_object_get(specials, json_string_value(name) ? json_string_value(name) : ""), "ids");
            if (!json_is_string(name) || !json_is_array(ids)) {
                rc = lfail(l, "post_processor TemplateProcessing: single[%zu] is not a Sequence or a "
                              "SpecialToken named in special_tokens", i);
                break;
            }
            for (size_t k = 0; k < json_array_size(ids) && rc == 0; k++) {
                json_t *id = json_array_get(ids, k);
                if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX)
                    rc = lfail(l, "post_processor TemplateProcessing: special token %s has an id that is not "
                                  "a non-negative integer", json_string_value(name));
                else if (ids_push1(seen ? &post : &pre, (int32_t)json_integer_value(id)))
                    rc = lfail(l, "out of memory");
            }
        }
        if (rc == 0 && seen != 1)
            rc = lfail(l, "post_processor TemplateProcessing: the single template has %d sequences, not one", seen);
    } else {
        return lfail(l, "post_processor %s is not supported (ftc reads ByteLevel, TemplateProcessing, "
                        "RobertaProcessing and Sequences of them)", type);
    }
    // An outer processor wraps what the inner ones made.
    if (rc == 0 && tok_ids_push(&pre, t->prefix.id, t->prefix.n))
        rc = lfail(l, "out of memory");
    if (rc == 0) {
        TokIds suf = {0};
        if (tok_ids_push(&suf, t->suffix.id, t->suffix.n) || tok_ids_push(&suf, post.id, post.n))
            rc = lfail(l, "out of memory");
        tok_ids_free(&t->prefix);
        tok_ids_free(&t->suffix);
        t->prefix = pre, t->suffix = suf;
        pre = (TokIds){0};
    }
    tok_ids_free(&pre);
    tok_ids_free(&post);
    return rc;
}

int tok_load(Tokenizer **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    Load l = {path, err, errlen};
    size_t bytes;
    char *text = rt_read_whole(path, &bytes);
    if (!text)
        return rt_fail(err, errlen, "%s: cannot read: %s", path, strerror(errno));
    json_error_t je;
    json_t *root = json_loadb(text, bytes, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    free(text);
    if (!root)
        return rt_fail(err, errlen, "%s:%d:%d: not valid JSON: %s", path, je.line, je.column, je.text);
    Tokenizer *t = calloc(1, sizeof *t);
    int rc = !t ? lfail(&l, "out of memory") : !json_is_object(root) ? lfail(&l, "not a JSON object") : 0;
    if (rc == 0)
        rc = load_model(&l, t, json_object_get(root, "model"));
    if (rc == 0)
        rc = load_pre(&l, t, json_object_get(root, "pre_tokenizer"));
    if (rc == 0)
        rc = load_norm(&l, t, json_object_get(root, "normalizer"));
    if (rc == 0)
        rc = load_added(&l, t, json_object_get(root, "added_tokens"));
    if (rc == 0)
        rc = load_post(&l, t, json_object_get(root, "post_processor"));
    if (rc == 0) {   // Rust's \w (single_word's word characters), as near as PCRE2 gets
        static const char word[] = "[\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}\\x{24B6}-\\x{24E9}"
                                   "\\x{1F130}-\\x{1F149}\\x{1F150}-\\x{1F169}\\x{1F170}-\\x{1F189}]";
        rc = compile_re(&l, word, sizeof word - 1, false, &t->word_re, "single_word");
    }
    for (size_t i = 0; rc == 0 && i < t->prefix.n + t->suffix.n; i++) {
        int32_t id = i < t->prefix.n ? t->prefix.id[i] : t->suffix.id[i - t->prefix.n];
        if (id + 1 > t->vocab_size)
            t->vocab_size = (int64_t)id + 1;
    }
    json_decref(root);
    if (rc) {
        tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

struct TokPieces {
    const char **at;
    uint32_t *len;
    int64_t n;
};

TokPieces *tok_pieces_new(const Tokenizer *t) {
    TokPieces *p = calloc(1, sizeof *p);
    if (!p || t->vocab_size > (int64_t)1 << 26) {   // (ids that sparse: not a table)
        free(p);
        return NULL;
    }
    p->n = t->vocab_size;
    p->at = calloc((size_t)p->n + 1, sizeof *p->at);
    p->len = calloc((size_t)p->n + 1, sizeof *p->len);
    if (!p->at || !p->len) {
        tok_pieces_free(p);
        return NULL;
    }
    const StrMap *maps[2] = {&t->vocab, &t->added_by_content};   // an added token's content wins
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < maps[k]->n; i++) {   // (added_by_content holds indices into added)
            int32_t id = k ? t->added[maps[k]->val[i]].id : maps[k]->val[i];
            if (id >= 0 && id < p->n)
                p->at[id] = maps[k]->pool + maps[k]->key_off[i], p->len[id] = maps[k]->key_len[i];
        }
    return p;
}

const char *tok_piece(const TokPieces *p, int32_t id, size_t *len) {
    if (id < 0 || id >= p->n || !p->at[id])
        return NULL;
    *len = p->len[id];
    return p->at[id];
}

void tok_pieces_free(TokPieces *p) {
    if (p)
        free(p->at), free(p->len);
    free(p);
}

static void trie_free(Trie *tr) { free(tr->node); }

void tok_free(Tokenizer *t) {
    if (!t)
        return;
    strmap_free(&t->vocab);
    pairmap_free(&t->merges);
    strmap_free(&t->added_by_content);
    free(t->added);
    trie_free(&t->raw_trie);
    trie_free(&t->norm_trie);
    for (int i = 0; i < MAX_STAGES; i++)
        pcre2_code_free(t->stage[i].re);
    pcre2_code_free(t->word_re);
    tok_ids_free(&t->prefix);
    tok_ids_free(&t->suffix);
    free(t);
}

TokScratch *tok_scratch_new(const Tokenizer *t) {
    TokScratch *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->t = t;
    s->md = pcre2_match_data_create(4, NULL);
    if (!s->md) {
        free(s);
        return NULL;
    }
    return s;
}

void tok_scratch_free(TokScratch *s) {
    if (!s)
        return;
    pcre2_match_data_free(s->md);
    for (int i = 0; i < MAX_STAGES; i++)
        free(s->depth[i].at), free(s->depth[i].buf);
    free(s->sym), free(s->prev), free(s->next), free(s->heap);
    strmap_free(&s->cache);
    tok_ids_free(&s->cache_ids);
    free(s);
}

// ---------------------------------------------------------------------------------------------
// BPE

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

static int reserve_bpe(TokScratch *s, size_t n) {
    if (n <= s->sym_cap)
        return 0;
    size_t cap = s->sym_cap ? s->sym_cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *a = xrealloc(s->sym, cap * sizeof *a);
    if (a)
        s->sym = a;
    int32_t *b = xrealloc(s->prev, cap * sizeof *b);
    if (b)
        s->prev = b;
    int32_t *c = xrealloc(s->next, cap * sizeof *c);
    if (c)
        s->next = c;
    uint64_t *h = realloc(s->heap, 2 * cap * sizeof *h);
    if (h)
        s->heap = h;
    if (!a || !b || !c || !h)
        return -1;
    s->sym_cap = cap;
    s->heap_cap = 2 * cap;
    return 0;
}

// The queue holds rank << 32 | position, so popping the smallest takes the lowest rank,
// the leftmost among equal ranks: tokenizers' order.
static void queue_pair(const Tokenizer *t, TokScratch *s, size_t *nh, int32_t at) {
    int32_t nx = s->next[at];
    if (nx < 0)
        return;
    long slot = pairmap_find(&t->merges, s->sym[at], s->sym[nx]);
    if (slot >= 0 && *nh < s->heap_cap)
        heap_push(s->heap, nh, (uint64_t)t->merges.rank[slot] << 32 | (uint32_t)at);
}

// Merges the piece p (n raw bytes) and appends its ids to out.
static int bpe_merge(const Tokenizer *t, TokScratch *s, const unsigned char *p, size_t n, TokIds *out) {
    if (reserve_bpe(s, n + 1) != 0)
        return -1;
    size_t m = 0;
    bool unk_open = false;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[p[i]];
        if (id >= 0) {
            s->sym[m++] = id;
            unk_open = false;
            continue;
        }
        if (t->byte_fallback && t->fallback[p[i]][0] >= 0 && t->fallback[p[i]][1] != -1) {
            s->sym[m++] = t->fallback[p[i]][0];
            if (t->fallback[p[i]][1] >= 0)
                s->sym[m++] = t->fallback[p[i]][1];
            unk_open = false;
            continue;
        }
        if (t->unk >= 0 && !(unk_open && t->fuse_unk))
            s->sym[m++] = t->unk;
        unk_open = t->unk >= 0;
    }
    if (reserve_bpe(s, m + 1) != 0)
        return -1;
    for (size_t i = 0; i < m; i++)
        s->prev[i] = (int32_t)i - 1, s->next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    size_t nh = 0;
    for (size_t i = 0; i + 1 < m; i++)
        queue_pair(t, s, &nh, (int32_t)i);
    while (nh > 0) {
        uint64_t top = heap_pop(s->heap, &nh);
        int32_t at = (int32_t)(top & 0xffffffffu), nx = s->next[at];
        uint32_t rank = (uint32_t)(top >> 32);
        if (s->sym[at] < 0 || nx < 0)
            continue;
        long slot = pairmap_find(&t->merges, s->sym[at], s->sym[nx]);
        if (slot < 0 || t->merges.rank[slot] != rank)   // the pair changed since it was queued
            continue;
        s->sym[at] = t->merges.made[slot];
        s->sym[nx] = -1;
        s->next[at] = s->next[nx];
        if (s->next[nx] >= 0)
            s->prev[s->next[nx]] = at;
        if (s->prev[at] >= 0)
            queue_pair(t, s, &nh, s->prev[at]);
        queue_pair(t, s, &nh, at);
    }
    for (int32_t i = m ? 0 : -1; i >= 0; i = s->next[i])
        if (ids_push1(out, s->sym[i]) != 0)
            return -1;
    return 0;
}

static int bpe_piece(const Tokenizer *t, TokScratch *s, const char *p, size_t n, TokIds *out) {
    if (n == 0)
        return 0;
    if (t->ignore_merges) {
        int32_t id = strmap_get(&t->vocab, p, n);
        if (id >= 0)
            return ids_push1(out, id);
    }
    if (n > CACHE_PIECE_BYTES)
        return bpe_merge(t, s, (const unsigned char *)p, n, out);
    uint64_t h = hash_bytes(p, n);
    long e = strmap_find(&s->cache, p, n, h);
    if (e >= 0) {   // val = offset of the ids, key_len... the count is stored after them
        const int32_t *ids = s->cache_ids.id + s->cache.val[e];
        return tok_ids_push(out, ids + 1, (size_t)ids[0]);
    }
    size_t before = out->n;
    if (bpe_merge(t, s, (const unsigned char *)p, n, out) != 0)
        return -1;
    if (s->cache.n >= CACHE_ENTRIES || s->cache_ids.n > INT32_MAX / 2) {
        strmap_free(&s->cache);
        s->cache_ids.n = 0;
    }
    size_t off = s->cache_ids.n, k = out->n - before;
    if (ids_push1(&s->cache_ids, (int32_t)k) == 0 && tok_ids_push(&s->cache_ids, out->id + before, k) == 0 &&
        strmap_set(&s->cache, p, n, (int32_t)off) != 0)
        s->cache_ids.n = off;   // out of memory for the cache: the ids are right all the same
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenization

static int stage_run(const Tokenizer *t, TokScratch *s, int k, const char *p, size_t n, TokIds *out);

static int span_push(TokScratch *s, int k, size_t a, size_t b, bool match) {
    __typeof__(s->depth[0]) *d = &s->depth[k];
    if (d->n + 1 > d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 64;
        size_t *x = realloc(d->at, cap * 2 * sizeof *x);
        if (!x)
            return -1;
        d->at = x;
        d->cap = cap;
    }
    d->at[2 * d->n] = a;
    d->at[2 * d->n + 1] = b << 1 | (match ? 1u : 0u);
    d->n++;
    return 0;
}

// Splits piece p (n bytes) by stage k's regex into flagged spans covering it, as
// tokenizers' find_matches: an empty match right after the previous match is skipped.
static int find_spans(const Tokenizer *t, TokScratch *s, int k, const char *p, size_t n) {
    const Stage *st = &t->stage[k];
    s->depth[k].n = 0;
    size_t prev = 0, from = 0;
    bool have_last = false;
    size_t last_end = 0;
    while (from <= n) {
        int rc = pcre2_match(st->re, (PCRE2_SPTR)p, n, from, PCRE2_NO_UTF_CHECK, s->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return TOK_ERR_REGEX;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t a = ov[0], b = ov[1];
        if (a == b && have_last && last_end == b) {
            if (from >= n)
                break;
            uint32_t c;
            from += utf8_next((const unsigned char *)p + from, n - from, &c);
            continue;
        }
        if (prev != a && span_push(s, k, prev, a, st->invert) != 0)
            return -1;
        if (span_push(s, k, a, b, !st->invert) != 0)
            return -1;
        prev = b;
        have_last = true;
        last_end = b;
        from = b;
    }
    if (prev != n && span_push(s, k, prev, n, st->invert) != 0)
        return -1;
    return 0;
}

// Stage k's pieces of p, by its behaviour, each handed to stage k + 1.
static int split_stage(const Tokenizer *t, TokScratch *s, int k, const char *p, size_t n, TokIds *out) {
    int rc = find_spans(t, s, k, p, n);
    if (rc != 0)
        return rc;
    size_t m = s->depth[k].n, *at = s->depth[k].at;
    Behavior b = t->stage[k].behavior;
#define SPAN_A(i) at[2 * (i)]
#define SPAN_B(i) (at[2 * (i) + 1] >> 1)
#define SPAN_M(i) (at[2 * (i) + 1] & 1)
    // Each output piece is a range of spans [i, j); removed matches are skipped.
    for (size_t i = 0; i < m;) {
        size_t j = i + 1;
        if (b == B_REMOVED && SPAN_M(i)) {
            i = j;
            continue;
        }
        if (b == B_CONTIGUOUS)
            while (j < m && SPAN_M(j) == SPAN_M(i))
                j++;
        else if (b == B_MERGED_PREV)   // a match joins the piece before it
            while (j < m && SPAN_M(j) && !SPAN_M(j - 1))
                j++;
        else if (b == B_MERGED_NEXT && SPAN_M(i) && j < m && !SPAN_M(j))   // ... the piece after it
            j++;
        size_t a = SPAN_A(i), e = SPAN_B(j - 1);
        if (e > a && (rc = stage_run(t, s, k + 1, p + a, e - a, out)) != 0)
            return rc;
        i = j;
    }
#undef SPAN_A
#undef SPAN_B
#undef SPAN_M
    return 0;
}

static int stage_run(const Tokenizer *t, TokScratch *s, int k, const char *p, size_t n, TokIds *out) {
    if (k == t->nstage)
        return bpe_piece(t, s, p, n, out);
    const Stage *st = &t->stage[k];
    if (st->byte_level && st->prefix_space && p[0] != ' ') {
        __typeof__(s->depth[0]) *d = &s->depth[k];
        if (n + 1 > d->buf_cap) {
            char *b = realloc(d->buf, 2 * n + 16);
            if (!b)
                return -1;
            d->buf = b;
            d->buf_cap = 2 * n + 16;
        }
        d->buf[0] = ' ';
        memcpy(d->buf + 1, p, n);
        p = d->buf, n++;
    }
    if (!st->re)
        return stage_run(t, s, k + 1, p, n, out);
    return split_stage(t, s, k, p, n, out);
}

// ---------------------------------------------------------------------------------------------
// Added tokens and normalization

static bool is_white_space(uint32_t c) {   // the Unicode White_Space property
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

// The start of the character before position i of p.
static size_t char_before(const char *p, size_t i) {
    while (i > 0 && ((unsigned char)p[--i] & 0xC0) == 0x80) {
    }
    return i;
}

static bool word_char_at(const Tokenizer *t, TokScratch *s, const char *p, size_t n, size_t i) {
    uint32_t c;
    size_t k = utf8_next((const unsigned char *)p + i, n - i, &c);
    return pcre2_match(t->word_re, (PCRE2_SPTR)p + i, k, 0, PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, s->md, NULL) >= 0;
}

// The longest added token of tr starting at p[i], with its end in *end; -1 for none.
static int32_t trie_match(const Trie *tr, const char *p, size_t n, size_t i, size_t *end) {
    int32_t at = 0, best = -1;
    for (size_t j = i; j < n; j++) {
        int32_t c = tr->node[at].first_child;
        while (c >= 0 && tr->node[c].byte != (unsigned char)p[j])
            c = tr->node[c].next_sibling;
        if (c < 0)
            break;
        at = c;
        if (tr->node[at].token >= 0)
            best = tr->node[at].token, *end = j + 1;
    }
    return best;
}

static int encode_normalized(const Tokenizer *t, TokScratch *s, const char *p, size_t n, TokIds *out);

// Splits p at the added tokens of tr (leftmost-longest) and encodes the pieces between
// them with `then`.
static int split_added(const Tokenizer *t, TokScratch *s, const Trie *tr, const char *p, size_t n, TokIds *out,
                       int (*then)(const Tokenizer *, TokScratch *, const char *, size_t, TokIds *)) {
    if (!tr->node)
        return then(t, s, p, n, out);
    size_t done = 0, i = 0;
    while (i < n) {
        if (!tr->starts[(unsigned char)p[i]]) {
            i++;
            continue;
        }
        size_t stop = 0;
        int32_t k = trie_match(tr, p, n, i, &stop);
        if (k < 0) {
            i++;
            continue;
        }
        const Added *a = &t->added[k];
        size_t start = i;
        if (a->single_word && ((start > 0 && word_char_at(t, s, p, n, char_before(p, start))) ||
                               (stop < n && word_char_at(t, s, p, n, stop)))) {
            i = stop;
            continue;
        }
        if (a->lstrip)
            while (start > done) {
                size_t b = char_before(p, start);
                uint32_t c;
                utf8_next((const unsigned char *)p + b, n - b, &c);
                if (!is_white_space(c))
                    break;
                start = b;
            }
        if (a->rstrip)
            while (stop < n) {
                uint32_t c;
                size_t k2 = utf8_next((const unsigned char *)p + stop, n - stop, &c);
                if (!is_white_space(c))
                    break;
                stop += k2;
            }
        int rc = start > done ? then(t, s, p + done, start - done, out) : 0;
        if (rc != 0)
            return rc;
        if (ids_push1(out, a->id) != 0)
            return -1;
        done = i = stop;
    }
    if (n > done)
        return then(t, s, p + done, n - done, out);
    return 0;
}

static int encode_pieces(const Tokenizer *t, TokScratch *s, const char *p, size_t n, TokIds *out) {
    return n ? stage_run(t, s, 0, p, n, out) : 0;
}

static int encode_normalized(const Tokenizer *t, TokScratch *s, const char *p, size_t n, TokIds *out) {
    bool ascii = true;
    for (size_t i = 0; i < n && ascii; i++)
        ascii = (unsigned char)p[i] < 0x80;
    if (t->nnorm == 0 || ascii)   // every normal form of ASCII is itself
        return split_added(t, s, &t->norm_trie, p, n, out, encode_pieces);
    utf8proc_uint8_t *cur = NULL;
    utf8proc_ssize_t len = (utf8proc_ssize_t)n;
    for (int k = 0; k < t->nnorm; k++) {
        static const int opts[] = {[N_NFC] = UTF8PROC_COMPOSE, [N_NFD] = UTF8PROC_DECOMPOSE,
                                   [N_NFKC] = UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                   [N_NFKD] = UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
        utf8proc_uint8_t *next = NULL;
        len = utf8proc_map(cur ? cur : (const utf8proc_uint8_t *)p, len, &next,
                           (utf8proc_option_t)(UTF8PROC_STABLE | opts[t->norm[k]]));
        free(cur);
        if (len < 0)
            return -1;
        cur = next;
    }
    int rc = split_added(t, s, &t->norm_trie, (const char *)cur, (size_t)len, out, encode_pieces);
    free(cur);
    return rc;
}

int tok_encode(const Tokenizer *t, TokScratch *s, const char *text, size_t len, TokIds *out) {
    size_t before = out->n;
    // PCRE2 is run without its own UTF check, so the text is checked once here.
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0)
            return TOK_ERR_UTF8;
        i += (size_t)k;
    }
    int rc = split_added(t, s, &t->raw_trie, text, len, out, encode_normalized);
    if (rc != 0)
        out->n = before;
    return rc;
}

const char *tok_strerror(int code) {
    return code == TOK_ERR_UTF8    ? "the text is not valid UTF-8"
           : code == TOK_ERR_REGEX ? "a pre-tokenizer's regex gave up on it (PCRE2's match limit)"
                                   : "out of memory";
}
