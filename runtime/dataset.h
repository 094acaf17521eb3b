// dataset.h — JSONL datasets to token files, through the model's own tokenizer.
//
// Each non-blank line of the JSONL file is one record, a JSON object of one of three kinds:
//   {"text": "..."}                       every token trained
//   {"prompt": "...", "completion": "..."}  only the completion trained
//   {"messages": [{"role": "...", "content": "..."}, ...]}
//                                         rendered by a template (DsOptions.template_text);
//                                         only the assistant messages' turns trained
// or of a fourth, a preference pair (TRL's shapes), a chosen and a rejected completion of one
// prompt:
//   {"prompt": "...", "chosen": "...", "rejected": "..."}
//                                         each sequence as a prompt and completion record
//   {"chosen": "...", "rejected": "..."}  each as a text record (all of it the completion)
//   {"prompt": [messages], "chosen": [messages], "rejected": [messages]}
//                                         prompt + chosen and prompt + rejected as messages
//                                         records, only the completion's assistant turns
//                                         trained (not the prompt's own)
//   {"chosen": [messages], "rejected": [messages]}
//                                         the same, the prompt the messages both begin with
//                                         (each keeping one message at least)
// A file holds pairs alone or none. Pairs need packing: each sequence has a window of its
// own (chosen, then rejected: a paired token file, runtime/data.h), cut to it or with
// drop_long the pair dropped; a pair either of whose sequences trains nothing is dropped.
// Other keys are ignored. A record's tokens are the tokenizer post-processor's ids before it
// (e.g. Llama 3's BOS), its parts each encoded on their own (so where training starts is a
// token boundary), the post-processor's ids after it, then the end-of-sequence token unless
// the record already ends with it; that token is trained when the one before it is. A
// record's first token is never trained (nothing of the record comes before it). The token
// file gets one info byte per token (runtime/data.h): trained, and record start.
//
// The model's chat template (runtime/chat.h): with template_text NULL or "model", the one
// beside the tokenizer (chat_template.jinja, else tokenizer_config.json's chat_template), or
// a file's or a text's (holding {{ or {%). A conversation through it is rendered as
// transformers' apply_chat_template renders it and its record is the rendering's tokens
// alone, encoded as transformers encodes that text (no post-processor ids, no end-of-sequence
// token after it: the template ends the turn); the text of each assistant message's turn
// (chat.h's rule) is trained, each part encoded on its own. Alpaca and ShareGPT records go
// through it as the messages they stand for. A template's error (its raise_exception) is the
// record's, at the template's line and column.
//
// Message template: a string holding {content} once and {role} any number of times, rendered
// for every message in order, with \n, \t and \\ read as the characters they name; `chatml`
// stands for "<|im_start|>{role}\n{content}<|im_end|>\n" and `llama3` for
// "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>". For a message whose
// role is "assistant", the content and the template's text after it are trained; the text
// before it (with the role) is not.
//
// Packing (DsOptions.pack = seq): records are laid end to end in windows of seq tokens and
// none crosses a window's end: a record that does not fit in what is left of a window starts
// the next, and the rest is padding (the end-of-sequence token, never trained, a record of
// its own). A record longer than seq is cut to its first seq tokens, or dropped
// (DsOptions.drop_long). Without packing records follow each other across windows. Either
// way a record with no trained token is dropped.
//
// Records are parsed and encoded on several threads, chunk by chunk, and written in order.
#ifndef FTC_RUNTIME_DATASET_H
#define FTC_RUNTIME_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct DsOptions {
    const char *tokenizer;     // tokenizer.json
    const char *eos;           // the end-of-sequence token's text, or NULL: tokenizer_config.json
                               // beside the tokenizer names it, else the first of
                               // <|endoftext|>, <|end_of_text|>, </s> the tokenizer has
    const char *template_text; // `model`, a .jinja file, a Jinja template's text, `chatml`,
                               // `llama3`, a {role}/{content} string, or NULL: the model's
                               // template if it has one (else a messages record is an error)
    int64_t pack;              // seq to pack for, or 0
    bool drop_long;            // with pack: drop a record longer than seq instead of cutting it
    int threads;               // 0: one per online CPU
} DsOptions;

typedef struct DsSummary {
    bool pairs;                // the records were preference pairs: records, written, dropped_long
                               // and dropped_untrained count pairs, cut counts sequences
    uint64_t lines, records;   // lines read, records among them (the rest blank)
    uint64_t written;          // records in the file
    uint64_t tokens, trained;  // tokens in the file, and how many of them are trained
    uint64_t windows, padding; // with pack: windows, and padding tokens in them
    uint64_t cut, dropped_long, dropped_untrained;
    uint64_t input_bytes;
    int64_t vocab;
    int32_t eos;
    char eos_text[64];
    char template_from[4200]; // where the chat template came from, when messages went through one
    int token_bytes;
} DsSummary;

// Converts the JSONL file at in_path into the token file out_path (atomically: nothing is
// left there on failure). 0, or -1 with the reason in err: "PATH:LINE:COL: ..." for a line
// that is not valid JSON, "PATH:LINE: ..." for a record that is not one of the three kinds,
// and the tokenizer's, the template's or the output's own errors.
int ds_convert(const char *in_path, const char *out_path, const DsOptions *o, DsSummary *sum,
               char *err, size_t errlen);

// Prints the first n records of token file `path` (of a paired file, n pairs: the chosen
// and the rejected sequence each) to out as the tokenizer at tok_path renders them back, each
// token's bytes as they are, the trained ones between ⟦ and ⟧ (ftc data --show N): what a
// user checks a template and its mask by. -1 with err.
int ds_show(const char *path, const char *tok_path, int64_t n, FILE *out, char *err, size_t errlen);

#endif
