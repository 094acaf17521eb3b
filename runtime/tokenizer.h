// tokenizer.h — Hugging Face tokenizer.json files of the byte-level BPE kind (GPT-2, Qwen2,
// Qwen2.5, Llama 3, Mistral-Nemo, RoBERTa), encoding text to the ids the `tokenizers`
// library gives, token for token.
//
// What is read, and in what order encoding applies it (as `tokenizers` does):
//   added_tokens  split out of the raw text first (the non-normalized ones), then out of
//                 each normalized piece (the normalized ones); leftmost-longest matching,
//                 with lstrip / rstrip (the token takes the white space beside it) and
//                 single_word (only where no word character touches it)
//   normalizer    null, NFC, NFD, NFKC, NFKD, or a Sequence of them (utf8proc)
//   pre_tokenizer Split (a regex or a string; behaviours Isolated, Removed,
//                 MergedWithPrevious, MergedWithNext, Contiguous; invert), Digits, and
//                 ByteLevel (add_prefix_space, use_regex: GPT-2's regex), alone or in a
//                 Sequence that ends with ByteLevel; regexes through PCRE2 (UTF, Unicode
//                 properties, JIT)
//   model         BPE over the ByteLevel alphabet: merges by rank (lowest first, leftmost
//                 among equal ranks), ignore_merges, unk_token / fuse_unk, byte_fallback;
//                 merges as ["a", "b"] pairs or legacy "a b" strings
//   post_processor null, ByteLevel (no ids), TemplateProcessing (its single template),
//                 RobertaProcessing, or a Sequence of them: ids before and after the text
// Anything else is refused at load with what it is: a model.type other than BPE (e.g.
// "Unigram"), a BPE without a ByteLevel pre-tokenizer (SentencePiece-style, as Llama 2's),
// dropout, subword prefixes or suffixes, other normalizers and pre-tokenizers by type.
//
// A loaded Tokenizer is read-only: threads share it, each with its own TokScratch (the
// regex match data and a cache of encoded pieces).
#ifndef FTC_RUNTIME_TOKENIZER_H
#define FTC_RUNTIME_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct Tokenizer Tokenizer;
typedef struct TokScratch TokScratch;

// A growing array of token ids.
typedef struct TokIds {
    int32_t *id;
    size_t n, cap;
} TokIds;

// Reads the tokenizer.json at path into *out; -1 with "path: message" in err (the JSON
// error's line and column, or the unsupported part and its type). *out is NULL then.
int tok_load(Tokenizer **out, const char *path, char *err, size_t errlen);
void tok_free(Tokenizer *t);

// One more than the largest id of the vocabulary and the added tokens.
int64_t tok_vocab_size(const Tokenizer *t);
// The id of an added token whose content is s (len bytes), else of the vocabulary entry
// whose bytes are s; -1 when there is none.
int32_t tok_find(const Tokenizer *t, const char *s, size_t len);

// Ids back to the bytes they stand for (an added token's content, a vocabulary entry's
// bytes): a table over the vocabulary, built on demand (the Tokenizer stays read-only);
// NULL when out of memory. tok_piece: the bytes of id (*len of them), NULL for an id that
// names nothing.
typedef struct TokPieces TokPieces;
TokPieces *tok_pieces_new(const Tokenizer *t);
const char *tok_piece(const TokPieces *p, int32_t id, size_t *len);
void tok_pieces_free(TokPieces *p);

// The ids the post-processor puts before and after one sequence (*n of them).
const int32_t *tok_prefix(const Tokenizer *t, size_t *n);
const int32_t *tok_suffix(const Tokenizer *t, size_t *n);

// Scratch for one thread's encoding; NULL when out of memory.
TokScratch *tok_scratch_new(const Tokenizer *t);
void tok_scratch_free(TokScratch *s);

enum {
    TOK_ERR_MEMORY = -1,  // out of memory
    TOK_ERR_UTF8 = -2,    // the text is not valid UTF-8
    TOK_ERR_REGEX = -3,   // a pre-tokenizer's regex gave up (PCRE2's match or depth limit)
};

// Appends to out the ids of text (len bytes of UTF-8; NUL bytes are characters like any
// other), without the post-processor's ids. 0, or a TOK_ERR_* (out keeps what it had).
int tok_encode(const Tokenizer *t, TokScratch *s, const char *text, size_t len, TokIds *out);

// Appends n ids to a; -1 when out of memory.
int tok_ids_push(TokIds *a, const int32_t *ids, size_t n);
void tok_ids_free(TokIds *a);
// A message for a TOK_ERR_* code.
const char *tok_strerror(int code);

#endif
