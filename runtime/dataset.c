// dataset.c — JSONL records to a token file; see dataset.h for the record kinds, the mask,
// templates and packing.
//
// The input is read in batches of whole lines, each cut into chunks; worker threads take
// chunks in any order, parse and encode every record of theirs into the chunk's own arrays
// (ids, info bytes, record lengths), and the calling thread then writes the chunks in file
// order, packing as it goes. A chunk that meets a bad line stops there, so the first error in
// file order is the one reported.
#include "dataset.h"
#include "chat.h"
#include "data.h"
#include "fileio.h"
#include "tokenizer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    CHUNK_BYTES = 1 << 19,    // input bytes a worker takes at a time
    CHUNKS_PER_THREAD = 4,    // per batch
    MAX_THREADS = 64,
    MSG = 512,
};

// ---------------------------------------------------------------------------------------------
// Templates

// A template's text around {content}, each part a list of literal runs and {role}s.
typedef struct Part {
    char *text;               // literal bytes, the {role}s removed
    size_t len;
    size_t *role_at;          // offsets in text where the role goes
    int nrole;
} Part;

typedef struct Template {
    Part before, after;
} Template;

static void part_free(Part *p) {
    free(p->text), free(p->role_at);
    memset(p, 0, sizeof *p);
}

// Reads s[0..n) into p: escapes decoded, {role} marked. -1 when out of memory.
static int part_read(Part *p, const char *s, size_t n) {
    p->text = malloc(n + 1);
    p->role_at = malloc((n / 6 + 1) * sizeof *p->role_at);
    if (!p->text || !p->role_at)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n && (s[i + 1] == 'n' || s[i + 1] == 't' || s[i + 1] == '\\')) {
            p->text[p->len++] = s[i + 1] == 'n' ? '\n' : s[i + 1] == 't' ? '\t' : '\\';
            i++;
        } else if (n - i >= 6 && memcmp(s + i, "{role}", 6) == 0) {
            p->role_at[p->nrole++] = p->len;
            i += 5;
        } else {
            p->text[p->len++] = s[i];
        }
    }
    return 0;
}

static int template_read(Template *t, const char *spec, char *err, size_t errlen) {
    if (strcmp(spec, "chatml") == 0)
        spec = "<|im_start|>{role}\\n{content}<|im_end|>\\n";
    else if (strcmp(spec, "llama3") == 0)
        spec = "<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>";
    const char *c = strstr(spec, "{content}");
    if (!c || strstr(c + 9, "{content}"))
        return rt_fail(err, errlen, "--template '%s': a template holds {content} exactly once (or is "
                       "chatml or llama3)", spec);
    if (part_read(&t->before, spec, (size_t)(c - spec)) != 0 ||
        part_read(&t->after, c + 9, strlen(c + 9)) != 0)
        return rt_fail(err, errlen, "out of memory");
    return 0;
}

static void template_free(Template *t) {
    part_free(&t->before);
    part_free(&t->after);
}

// ---------------------------------------------------------------------------------------------
// Encoding records

// What a line holds: a file's are all records, or all preference pairs.
typedef enum RecKind {
    KIND_NONE,                // no record (yet)
    KIND_RECORD,              // a record of one of the five kinds (dataset.h), one record
    KIND_PAIR,                // a preference pair: two records, the chosen then the rejected
} RecKind;

typedef struct Conv {
    Tokenizer *tok;
    const DsOptions *o;
    Template tmpl;            // a {role}/{content} template
    bool have_tmpl;
    ChatTemplate chat;        // the model's own (Jinja) template
    bool have_chat;
    int32_t eos;
    const char *in_path;
} Conv;

// What one chunk of lines became.
typedef struct Chunk {
    const char *text;         // whole lines
    size_t len;
    TokIds ids;
    uint8_t *info;            // one per id
    size_t info_cap;
    uint32_t *rec_len;        // tokens of each record, in order
    size_t nrec, rec_cap;
    uint64_t lines;           // lines in the chunk
    uint64_t records;
    int kind;                 // its first record's RecKind (KIND_NONE: no record)
    uint64_t kind_line;       // and that record's line, 1-based within the chunk
    uint64_t err_line;        // 1-based within the chunk; 0: no error
    int err_col;              // the JSON error's column, or 0
    char err[MSG];
} Chunk;

typedef struct Worker {
    Conv *cv;
    TokScratch *scratch;
    Chunk *chunks;
    int nchunks;
    int *next;                // the next chunk to take (shared)
    char *scratch_text;       // rendered template parts
    size_t scratch_cap;
    ChatRender render;        // conversations through the chat template
} Worker;

static int info_reserve(Chunk *c, size_t n) {
    if (n <= c->info_cap)
        return 0;
    size_t cap = c->info_cap ? c->info_cap : 4096;
    while (cap < n)
        cap *= 2;
    uint8_t *p = realloc(c->info, cap);
    if (!p)
        return -1;
    c->info = p;
    c->info_cap = cap;
    return 0;
}

// Appends the ids of text (trained or not) to the chunk's record being built.
static int put_text(Worker *w, Chunk *c, const char *text, size_t len, bool trained) {
    size_t before = c->ids.n;
    int rc = tok_encode(w->cv->tok, w->scratch, text, len, &c->ids);
    if (rc != 0) {
        snprintf(c->err, sizeof c->err, "%s", tok_strerror(rc));
        return -1;
    }
    if (info_reserve(c, c->ids.n) != 0) {
        snprintf(c->err, sizeof c->err, "out of memory");
        return -1;
    }
    if (c->ids.n > before)
        memset(c->info + before, trained ? DATA_TRAIN : 0, c->ids.n - before);
    return 0;
}

static int put_ids(Chunk *c, const int32_t *ids, size_t n, uint8_t info) {
    size_t before = c->ids.n;
    if (n == 0)
        return 0;
    if (tok_ids_push(&c->ids, ids, n) != 0 || info_reserve(c, c->ids.n) != 0) {
        snprintf(c->err, sizeof c->err, "out of memory");
        return -1;
    }
    memset(c->info + before, info, n);
    return 0;
}

// A template part with the role filled in, encoded.
static int put_part(Worker *w, Chunk *c, const Part *p, const char *role, size_t nrole, bool trained) {
    size_t need = p->len + (size_t)p->nrole * nrole;
    if (need == 0)
        return 0;
    if (need > w->scratch_cap) {
        char *b = realloc(w->scratch_text, need + 64);
        if (!b) {
            snprintf(c->err, sizeof c->err, "out of memory");
            return -1;
        }
        w->scratch_text = b;
        w->scratch_cap = need + 64;
    }
    size_t o = 0, at = 0;
    for (int r = 0; r < p->nrole; r++) {
        memcpy(w->scratch_text + o, p->text + at, p->role_at[r] - at);
        o += p->role_at[r] - at;
        at = p->role_at[r];
        memcpy(w->scratch_text + o, role, nrole);
        o += nrole;
    }
    memcpy(w->scratch_text + o, p->text + at, p->len - at);
    o += p->len - at;
    return put_text(w, c, w->scratch_text, o, trained);
}

static bool is_str(json_t *v) { return json_is_string(v); }

// One message through the template: its content trained when the role is the assistant's,
// unless it is `fixed` (a preference pair's prompt, never trained).
static int put_message(Worker *w, Chunk *c, const char *role, const char *content, size_t ncontent, bool fixed) {
    const Conv *cv = w->cv;
    size_t nr = strlen(role);
    bool train = !fixed && nr == 9 && memcmp(role, "assistant", 9) == 0;   // (a chat message's speaker)
    if (put_part(w, c, &cv->tmpl.before, role, nr, false) != 0 ||
        put_text(w, c, content, ncontent, train) != 0 || put_part(w, c, &cv->tmpl.after, role, nr, train) != 0)
        return -1;
    return 0;
}

static int need_template(const Conv *cv, Chunk *c, const char *what) {
    if (cv->have_tmpl || cv->have_chat)
        return 0;
    snprintf(c->err, sizeof c->err, "a %s record needs a chat template: --template (chatml, llama3, a string "
             "with {role} and {content}, or a .jinja file), or the model's (chat_template in its "
             "tokenizer_config.json)", what);
    return -1;
}

// Whether message m is the assistant's (a chat message's speaker).
static bool is_assistant(json_t *m) {
    json_t *speaker = json_object_get(m, "role");
    return is_str(speaker) && strcmp(json_string_value(speaker), "assistant") == 0;
}

// A conversation through the model's template: the tokens of its rendering as transformers
// tokenizes apply_chat_template's text (added tokens matched in it, no post-processor ids),
// the assistant's spans (chat.h) trained but those of its first `fixed` messages (a
// preference pair's prompt), each part encoded on its own.
static int put_chat(Worker *w, Chunk *c, json_t *rec, json_t *messages, size_t fixed) {
    ChatRender *r = &w->render;
    if (chat_render(&w->cv->chat, rec, messages, r, c->err, sizeof c->err) != 0)
        return -1;
    size_t skip = 0;   // the spans of the fixed messages: one per assistant message among them
    for (size_t i = 0; i < fixed && i < json_array_size(messages); i++)
        skip += is_assistant(json_array_get(messages, i));
    size_t at = 0;
    for (size_t k = 0; k < r->nspan; k++) {
        if (put_text(w, c, r->whole.text + at, r->span[k][0] - at, false) != 0 ||
            put_text(w, c, r->whole.text + r->span[k][0], r->span[k][1] - r->span[k][0], k >= skip) != 0)
            return -1;
        at = r->span[k][1];
    }
    return put_text(w, c, r->whole.text + at, r->whole.len - at, false);
}

// A list of {"role", "content"} through the template: the model's, else the {role}/{content}
// one message by message; nothing of its first `fixed` messages trained.
static int put_conversation(Worker *w, Chunk *c, json_t *rec, json_t *messages, size_t fixed) {
    if (w->cv->have_chat)
        return put_chat(w, c, rec, messages, fixed);
    for (size_t i = 0; i < json_array_size(messages); i++) {
        json_t *m = json_array_get(messages, i), *role = json_object_get(m, "role");
        json_t *content = json_object_get(m, "content");
        if (!is_str(role) || !is_str(content) || strlen(json_string_value(role)) != json_string_length(role)) {
            snprintf(c->err, sizeof c->err, "messages[%zu] needs a \"role\" and a \"content\", both strings", i);
            return -1;
        }
        if (put_message(w, c, json_string_value(role), json_string_value(content), json_string_length(content),
                        i < fixed) != 0)
            return -1;
    }
    return 0;
}

static json_t *message(const char *role, const char *content, size_t n) {
    return json_pack("{s:s, s:s%}", "role", role, "content", content, n);
}

// Stanford Alpaca's prompts, for its records without --template.
static const char ALPACA_INPUT[] =
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request.\n\n### Instruction:\n%s\n\n"
    "### Input:\n%s\n\n### Response:";
static const char ALPACA_NO_INPUT[] =
    "Below is an instruction that describes a task. Write a response that appropriately completes "
    "the request.\n\n### Instruction:\n%s\n\n### Response:";

// An Alpaca record ("instruction", "input" (may be empty or absent), "output"): with --template
// a user message (the instruction, then the input after a blank line) and the assistant's
// output; without, Alpaca's own prompt and the output as its completion.
static int put_alpaca(Worker *w, Chunk *c, json_t *rec) {
    json_t *ins = json_object_get(rec, "instruction"), *in = json_object_get(rec, "input");
    json_t *outp = json_object_get(rec, "output");
    if (!is_str(ins) || !is_str(outp) || (in && !is_str(in))) {
        snprintf(c->err, sizeof c->err, "an Alpaca record needs \"instruction\" and \"output\" (and "
                 "\"input\", if any), strings");
        return -1;
    }
    const char *i = json_string_value(ins), *x = in ? json_string_value(in) : "";
    size_t n = strlen(ALPACA_INPUT) + json_string_length(ins) + (in ? json_string_length(in) : 0) + 1;
    char *p = malloc(n);
    if (!p) {
        snprintf(c->err, sizeof c->err, "out of memory");
        return -1;
    }
    int rc;
    if (w->cv->have_tmpl || w->cv->have_chat) {
        snprintf(p, n, *x ? "%s\n\n%s" : "%s", i, x);
        json_t *msgs = json_array();
        json_array_append_new(msgs, message("user", p, strlen(p)));
        json_array_append_new(msgs, message("assistant", json_string_value(outp), json_string_length(outp)));
        rc = put_conversation(w, c, rec, msgs, 0);
        json_decref(msgs);
    } else {
        if (*x)
            snprintf(p, n, ALPACA_INPUT, i, x);
        else
            snprintf(p, n, ALPACA_NO_INPUT, i);
        rc = put_text(w, c, p, strlen(p), false) != 0 ||
             put_text(w, c, json_string_value(outp), json_string_length(outp), true) != 0 ? -1 : 0;
    }
    free(p);
    return rc;
}

// A ShareGPT record: "conversations", a list of {"from", "value"}, from human (or user),
// gpt (or assistant) and system, as the messages they stand for.
static int put_sharegpt(Worker *w, Chunk *c, json_t *rec, json_t *conv) {
    if (!json_is_array(conv)) {
        snprintf(c->err, sizeof c->err, "\"conversations\" is not a list");
        return -1;
    }
    if (need_template(w->cv, c, "\"conversations\"") != 0)
        return -1;
    static const char *const from[][2] = {{"human", "user"}, {"user", "user"}, {"gpt", "assistant"},
                                          {"assistant", "assistant"}, {"system", "system"}};
    json_t *msgs = json_array();
    for (size_t i = 0; i < json_array_size(conv); i++) {
        json_t *m = json_array_get(conv, i), *f = json_object_get(m, "from"), *v = json_object_get(m, "value");
        const char *role = NULL;
        for (size_t k = 0; is_str(f) && k < sizeof from / sizeof from[0] && !role; k++)
            if (!strcmp(json_string_value(f), from[k][0]))
                role = from[k][1];
        if (!role || !is_str(v)) {
            snprintf(c->err, sizeof c->err, "conversations[%zu] needs a \"from\" (human, gpt or system) and "
                     "a \"value\", a string", i);
            json_decref(msgs);
            return -1;
        }
        json_array_append_new(msgs, message(role, json_string_value(v), json_string_length(v)));
    }
    int rc = put_conversation(w, c, rec, msgs, 0);
    json_decref(msgs);
    return rc;
}

// Whether rec is of exactly one kind; -1 with c->err set when of none or of several.
static int one_kind(Chunk *c, json_t *rec) {
    int kinds = (json_object_get(rec, "text") != NULL) +
                (json_object_get(rec, "prompt") != NULL || json_object_get(rec, "completion") != NULL) +
                (json_object_get(rec, "messages") != NULL) +
                (json_object_get(rec, "instruction") != NULL) +
                (json_object_get(rec, "conversations") != NULL);
    if (kinds == 1)
        return 0;
    snprintf(c->err, sizeof c->err, "%s", kinds == 0
             ? "a record needs \"text\", \"prompt\" and \"completion\", \"messages\", \"instruction\" "
               "and \"output\" (Alpaca) or \"conversations\" (ShareGPT)"
             : "a record has one of \"text\", \"prompt\" and \"completion\", \"messages\", \"instruction\" "
               "or \"conversations\", not several");
    return -1;
}

// A "text" record: all of it trained.
static int put_plain(Worker *w, Chunk *c, json_t *text) {
    if (!is_str(text)) {
        snprintf(c->err, sizeof c->err, "\"text\" is not a string");
        return -1;
    }
    return put_text(w, c, json_string_value(text), json_string_length(text), true);
}

// A "prompt" and "completion" record: only the completion trained.
static int put_prompt(Worker *w, Chunk *c, json_t *prompt, json_t *completion) {
    if (!is_str(prompt) || !is_str(completion)) {
        snprintf(c->err, sizeof c->err, "%s", !prompt ? "a \"completion\" without a \"prompt\""
                 : !completion ? "a \"prompt\" without a \"completion\""
                 : "\"prompt\" and \"completion\" must be strings");
        return -1;
    }
    if (put_text(w, c, json_string_value(prompt), json_string_length(prompt), false) != 0 ||
        put_text(w, c, json_string_value(completion), json_string_length(completion), true) != 0)
        return -1;
    return 0;
}

// A "messages" record: a list of {"role", "content"}, through the template.
static int put_messages(Worker *w, Chunk *c, json_t *rec, json_t *messages) {
    if (!json_is_array(messages)) {
        snprintf(c->err, sizeof c->err, "\"messages\" is not a list");
        return -1;
    }
    if (need_template(w->cv, c, "\"messages\"") != 0)
        return -1;
    return put_conversation(w, c, rec, messages, 0);
}

// The tokens of rec (of one kind) between the tokenizer's prefix and suffix.
static int put_body(Worker *w, Chunk *c, json_t *rec) {
    json_t *text = json_object_get(rec, "text"), *prompt = json_object_get(rec, "prompt");
    json_t *completion = json_object_get(rec, "completion");
    json_t *conv = json_object_get(rec, "conversations");
    if (text)
        return put_plain(w, c, text);
    if (prompt || completion)
        return put_prompt(w, c, prompt, completion);
    if (json_object_get(rec, "instruction"))
        return put_alpaca(w, c, rec);
    if (conv)
        return put_sharegpt(w, c, rec, conv);
    return put_messages(w, c, rec, json_object_get(rec, "messages"));
}

// Ends the record begun at ids[start]: with eos, the end-of-sequence token after it unless it
// ends with one (trained if the token before is); its first token a start, its length noted.
static int end_record(const Conv *cv, Chunk *c, size_t start, bool eos) {
    size_t len = c->ids.n - start;
    if (len == 0 || (eos && c->ids.id[c->ids.n - 1] != cv->eos)) {
        uint8_t last = len ? c->info[c->ids.n - 1] : 0;
        if (put_ids(c, &cv->eos, 1, last & DATA_TRAIN) != 0)
            return -1;
        len++;
    }
    c->info[start] = DATA_START;   // nothing of the record comes before its first token
    if (len > UINT32_MAX) {
        snprintf(c->err, sizeof c->err, "a record of more than 2^32 tokens");
        return -1;
    }
    if (c->nrec == c->rec_cap) {
        size_t cap = c->rec_cap ? 2 * c->rec_cap : 256;
        uint32_t *p = realloc(c->rec_len, cap * sizeof *p);
        if (!p) {
            snprintf(c->err, sizeof c->err, "out of memory");
            return -1;
        }
        c->rec_len = p;
        c->rec_cap = cap;
    }
    c->rec_len[c->nrec++] = (uint32_t)len;
    return 0;
}

// The record rec (a JSON object) appended to c as one record; -1 with c->err set. A
// conversation through the model's template is its rendering's tokens alone, as
// apply_chat_template gives them: the template says how a turn and the conversation end.
static int put_record(Worker *w, Chunk *c, json_t *rec) {
    if (one_kind(c, rec) != 0)
        return -1;
    size_t start = c->ids.n, n;
    if (w->cv->have_chat && !json_object_get(rec, "text") && !json_object_get(rec, "prompt") &&
        !json_object_get(rec, "completion"))
        return put_body(w, c, rec) != 0 ? -1 : end_record(w->cv, c, start, false);
    const int32_t *pre = tok_prefix(w->cv->tok, &n);
    if (put_ids(c, pre, n, 0) != 0 || put_body(w, c, rec) != 0)
        return -1;
    const int32_t *suf = tok_suffix(w->cv->tok, &n);
    if (put_ids(c, suf, n, 0) != 0)
        return -1;
    return end_record(w->cv, c, start, true);
}

// Puts prefix before c->err's message.
static void err_prefix(Chunk *c, const char *prefix) {
    size_t n = strlen(prefix), m = strlen(c->err);
    if (n + 1 >= sizeof c->err)
        return;
    if (m + n + 1 > sizeof c->err)
        m = sizeof c->err - n - 1;
    memmove(c->err + n, c->err, m);
    memcpy(c->err, prefix, n);
    c->err[n + m] = '\0';
}

// A preference pair of strings: each sequence encoded as a "prompt" and "completion" record
// of the prompt and that completion (only it trained), or without a prompt as a "text"
// record of the completion.
static int put_text_pair(Worker *w, Chunk *c, json_t *prompt, json_t *const side[2]) {
    for (int k = 0; k < 2; k++) {
        size_t start = c->ids.n, n;
        const int32_t *pre = tok_prefix(w->cv->tok, &n);
        if (put_ids(c, pre, n, 0) != 0 ||
            (prompt && put_text(w, c, json_string_value(prompt), json_string_length(prompt), false) != 0) ||
            put_text(w, c, json_string_value(side[k]), json_string_length(side[k]), true) != 0)
            return -1;
        const int32_t *suf = tok_suffix(w->cv->tok, &n);
        if (put_ids(c, suf, n, 0) != 0 || end_record(w->cv, c, start, true) != 0)
            return -1;
    }
    return 0;
}

// How many leading messages chosen and rejected share, each keeping one at least: the prompt
// of a pair that has none of its own (TRL's implicit prompt).
static size_t shared_prefix(json_t *chosen, json_t *rejected) {
    size_t nc = json_array_size(chosen), nr = json_array_size(rejected), k = 0;
    while (k + 1 < nc && k + 1 < nr && json_equal(json_array_get(chosen, k), json_array_get(rejected, k)))
        k++;
    return k;
}

// One conversation of a pair as a record, as a "messages" record is one, nothing of its
// first `fixed` messages (the prompt) trained.
static int put_conv_record(Worker *w, Chunk *c, json_t *rec, json_t *msgs, size_t fixed) {
    size_t start = c->ids.n, n;
    if (w->cv->have_chat)
        return put_chat(w, c, rec, msgs, fixed) != 0 ? -1 : end_record(w->cv, c, start, false);
    const int32_t *pre = tok_prefix(w->cv->tok, &n);
    if (put_ids(c, pre, n, 0) != 0 || put_conversation(w, c, rec, msgs, fixed) != 0)
        return -1;
    const int32_t *suf = tok_suffix(w->cv->tok, &n);
    return put_ids(c, suf, n, 0) != 0 ? -1 : end_record(w->cv, c, start, true);
}

// A preference pair of messages: each sequence the prompt's messages then the completion's
// through the template, only the completion's assistant turns trained; without "prompt" the
// prompt is the messages chosen and rejected begin with alike.
static int put_conv_pair(Worker *w, Chunk *c, json_t *rec, json_t *prompt, json_t *const side[2]) {
    static const char *const name[2] = {"chosen", "rejected"};
    if (need_template(w->cv, c, "preference") != 0)
        return -1;
    for (int k = 0; k < 2; k++)
        if (json_array_size(side[k]) == 0) {
            snprintf(c->err, sizeof c->err, "\"%s\" is an empty list: a completion holds one message at least",
                     name[k]);
            return -1;
        }
    size_t fixed = prompt ? json_array_size(prompt) : shared_prefix(side[0], side[1]);
    for (int k = 0; k < 2; k++) {
        json_t *msgs = json_array();
        if (!msgs || (prompt && json_array_extend(msgs, prompt) != 0) || json_array_extend(msgs, side[k]) != 0) {
            json_decref(msgs);
            snprintf(c->err, sizeof c->err, "out of memory");
            return -1;
        }
        int rc = put_conv_record(w, c, rec, msgs, fixed);
        json_decref(msgs);
        if (rc != 0) {
            err_prefix(c, k == 0 ? "the chosen conversation: " : "the rejected conversation: ");
            return -1;
        }
    }
    return 0;
}

// A preference record ("chosen", "rejected", perhaps "prompt"; TRL's standard,
// conversational and implicit-prompt shapes): its chosen and its rejected sequence as two
// records, in that order.
static int put_pair(Worker *w, Chunk *c, json_t *rec) {
    static const char *const other[] = {"text", "completion", "messages", "instruction", "conversations"};
    json_t *prompt = json_object_get(rec, "prompt");
    json_t *side[2] = {json_object_get(rec, "chosen"), json_object_get(rec, "rejected")};
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++)
        if (json_object_get(rec, other[k])) {
            snprintf(c->err, sizeof c->err, "a preference record holds \"chosen\", \"rejected\" and perhaps "
                     "\"prompt\", not \"%s\"", other[k]);
            return -1;
        }
    if (!side[0] || !side[1]) {
        snprintf(c->err, sizeof c->err, "%s", side[0] ? "a \"chosen\" without a \"rejected\""
                                                      : "a \"rejected\" without a \"chosen\"");
        return -1;
    }
    if (w->cv->o->pack <= 0) {
        snprintf(c->err, sizeof c->err, "preference pairs need --pack SEQ: each sequence is padded to its "
                 "own window");
        return -1;
    }
    if (is_str(side[0]) && is_str(side[1]) && (!prompt || is_str(prompt)))
        return put_text_pair(w, c, prompt, side);
    if (json_is_array(side[0]) && json_is_array(side[1]) && (!prompt || json_is_array(prompt)))
        return put_conv_pair(w, c, rec, prompt, side);
    snprintf(c->err, sizeof c->err, "\"chosen\", \"rejected\" and \"prompt\" (if any) are all strings or all "
             "lists of messages");
    return -1;
}

// Why a line of the other kind cannot follow lines of kind `file` (KIND_RECORD, KIND_PAIR).
static const char *mixed_kinds(int file) {
    return file == KIND_PAIR
        ? "a record without \"chosen\" and \"rejected\" after preference records: a file holds preference "
          "pairs alone, or none"
        : "a preference record (\"chosen\" and \"rejected\") after records that are not: a file holds "
          "preference pairs alone, or none";
}

// The record of a line: a preference pair when it has "chosen" or "rejected", else one
// record; of the kind of the chunk's first.
static int put_line(Worker *w, Chunk *c, json_t *rec) {
    int kind = json_object_get(rec, "chosen") || json_object_get(rec, "rejected") ? KIND_PAIR : KIND_RECORD;
    if (c->kind != KIND_NONE && kind != c->kind) {
        snprintf(c->err, sizeof c->err, "%s", mixed_kinds(c->kind));
        return -1;
    }
    if ((kind == KIND_PAIR ? put_pair(w, c, rec) : put_record(w, c, rec)) != 0)
        return -1;
    if (c->kind == KIND_NONE)
        c->kind = kind, c->kind_line = c->lines;
    return 0;
}

// Encodes every line of chunk c; stops at the first bad one.
static void do_chunk(Worker *w, Chunk *c) {
    const char *p = c->text, *end = c->text + c->len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        c->lines++;
        size_t n = (size_t)(le - p);
        if (n && p[n - 1] == '\r')
            n--;
        size_t k = 0;
        while (k < n && (p[k] == ' ' || p[k] == '\t'))
            k++;
        if (k < n) {
            json_error_t je;
            json_t *rec = json_loadb(p, n, JSON_ALLOW_NUL, &je);
            if (!rec) {
                snprintf(c->err, sizeof c->err, "not valid JSON: %s", je.text);
                c->err_col = je.column > 0 ? je.column : 1;
                c->err_line = c->lines;
                return;
            }
            int rc = 0;
            size_t ids_before = c->ids.n, nrec_before = c->nrec;
            if (!json_is_object(rec)) {
                snprintf(c->err, sizeof c->err, "a record is a JSON object, this line is %s",
                         json_is_array(rec) ? "a list" : json_is_string(rec) ? "a string" : "a value");
                rc = -1;
            } else {
                rc = put_line(w, c, rec);
            }
            json_decref(rec);
            if (rc != 0) {   // (a pair whose rejected sequence failed: its chosen goes too)
                c->ids.n = ids_before, c->nrec = nrec_before;
                c->err_line = c->lines;
                return;
            }
            c->records++;
        }
        p = nl ? nl + 1 : end;
    }
}

static void *worker_main(void *arg) {
    Worker *w = arg;
    for (;;) {
        int k = __atomic_fetch_add(w->next, 1, __ATOMIC_RELAXED);
        if (k >= w->nchunks)
            return NULL;
        do_chunk(w, &w->chunks[k]);
    }
}

// ---------------------------------------------------------------------------------------------
// Writing, packing

typedef struct Out {
    DataWriter *w;
    const DsOptions *o;
    DsSummary *sum;
    int32_t eos;
    int64_t fill;             // tokens in the window being packed
    int kind;                 // the file's RecKind: its first record's
} Out;

// Pads the rest of the window being packed.
static int pad_window(Out *out, char *err, size_t errlen) {
    int64_t left = out->o->pack - out->fill;
    if (out->fill == 0)
        return 0;
    int32_t ids[256];
    uint8_t info[256];
    for (int i = 0; i < 256; i++)
        ids[i] = out->eos, info[i] = 0;
    info[0] = DATA_START;
    while (left > 0) {
        size_t k = left < 256 ? (size_t)left : 256;
        if (data_writer_put(out->w, ids, info, k, err, errlen) != 0)
            return -1;
        info[0] = 0;
        left -= (int64_t)k;
        out->sum->padding += k;
    }
    out->fill = 0;
    out->sum->windows++;
    return 0;
}

static int put_out(Out *out, const int32_t *ids, const uint8_t *info, size_t n, char *err, size_t errlen) {
    size_t trained = 0;
    for (size_t i = 0; i < n; i++)
        trained += info[i] & DATA_TRAIN;
    int64_t seq = out->o->pack;
    if (seq > 0 && (int64_t)n > seq) {
        if (out->o->drop_long) {
            out->sum->dropped_long++;
            return 0;
        }
        out->sum->cut++;
        n = (size_t)seq;
        trained = 0;
        for (size_t i = 0; i < n; i++)
            trained += info[i] & DATA_TRAIN;
    }
    if (trained == 0) {
        out->sum->dropped_untrained++;
        return 0;
    }
    if (seq > 0 && out->fill + (int64_t)n > seq && pad_window(out, err, errlen) != 0)
        return -1;
    if (data_writer_put(out->w, ids, info, n, err, errlen) != 0)
        return -1;
    if (seq > 0) {
        out->fill += (int64_t)n;
        if (out->fill == seq)
            out->fill = 0, out->sum->windows++;
    }
    out->sum->written++;
    out->sum->trained += trained;
    return 0;
}

// One sequence of a pair into a window of its own, padded.
static int put_window(Out *out, const int32_t *ids, const uint8_t *info, size_t n, char *err, size_t errlen) {
    if (data_writer_put(out->w, ids, info, n, err, errlen) != 0)
        return -1;
    out->fill = (int64_t)n;
    if (out->fill < out->o->pack)
        return pad_window(out, err, errlen);
    out->fill = 0, out->sum->windows++;
    return 0;
}

// A preference pair, its chosen sequence of len[0] tokens then its rejected of len[1] from
// ids and info, each into a window of its own: one longer than the window cut to it (with
// drop_long, the pair dropped), a pair either of whose sequences trains nothing dropped.
static int put_pair_out(Out *out, const int32_t *ids, const uint8_t *info, const uint32_t len[2], char *err,
                        size_t errlen) {
    size_t seq = (size_t)out->o->pack, n[2] = {len[0], len[1]}, trained[2] = {0, 0};
    const size_t at[2] = {0, len[0]};
    if ((n[0] > seq || n[1] > seq) && out->o->drop_long) {
        out->sum->dropped_long++;
        return 0;
    }
    for (int k = 0; k < 2; k++) {
        if (n[k] > seq)
            n[k] = seq, out->sum->cut++;
        for (size_t i = 0; i < n[k]; i++)
            trained[k] += info[at[k] + i] & DATA_TRAIN;
    }
    if (trained[0] == 0 || trained[1] == 0) {
        out->sum->dropped_untrained++;
        return 0;
    }
    for (int k = 0; k < 2; k++)
        if (put_window(out, ids + at[k], info + at[k], n[k], err, errlen) != 0)
            return -1;
    out->sum->written++;
    out->sum->trained += trained[0] + trained[1];
    return 0;
}

// The records of chunk c: one by one, or two by two for pairs.
static int put_chunk_out(Out *out, const Chunk *c, char *err, size_t errlen) {
    size_t at = 0;
    int step = out->kind == KIND_PAIR ? 2 : 1;
    for (size_t r = 0; r + (size_t)step <= c->nrec; r += (size_t)step) {
        int rc = step == 2 ? put_pair_out(out, c->ids.id + at, c->info + at, c->rec_len + r, err, errlen)
                           : put_out(out, c->ids.id + at, c->info + at, c->rec_len[r], err, errlen);
        if (rc != 0)
            return -1;
        at += c->rec_len[r] + (step == 2 ? c->rec_len[r + 1] : 0);
    }
    return 0;
}

// The file's kind from its first chunk with a record (a paired file marked so); an error at
// the first record of a chunk of the other kind (the chunk itself refused any mixing).
static int check_kind(Out *out, const Chunk *c, uint64_t line0, const char *in_path, char *err, size_t errlen) {
    if (c->kind == KIND_NONE)
        return 0;
    if (out->kind == KIND_NONE) {
        out->kind = c->kind;
        out->sum->pairs = c->kind == KIND_PAIR;
        if (out->sum->pairs)
            data_writer_pairs(out->w);
    }
    if (c->kind == out->kind)
        return 0;
    return rt_fail(err, errlen, "%s:%llu: %s", in_path, (unsigned long long)(line0 + c->kind_line),
                   mixed_kinds(out->kind));
}

// ---------------------------------------------------------------------------------------------
// The conversion

// The end-of-sequence token: given, named by tokenizer_config.json beside the tokenizer (cfg,
// or NULL), or the first of the usual names.
static int find_eos(Conv *cv, json_t *cfg, DsSummary *sum, char *err, size_t errlen) {
    const char *name = cv->o->eos ? cv->o->eos : chat_config_token(cfg, "eos_token");
    if (name && !cv->o->eos && !*name)
        name = NULL;
    static const char *const usual[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
    int32_t id = name ? tok_find(cv->tok, name, strlen(name)) : -1;
    for (int k = 0; !name && k < 3 && id < 0; k++)
        if ((id = tok_find(cv->tok, usual[k], strlen(usual[k]))) >= 0)
            name = usual[k];
    int rc = 0;
    if (id < 0 && name)
        rc = rt_fail(err, errlen, "%s: the end-of-sequence token \"%s\"%s is not in the tokenizer",
                     cv->o->tokenizer, name, cv->o->eos ? " (--eos)" : " (tokenizer_config.json)");
    else if (id < 0)
        rc = rt_fail(err, errlen, "%s: no end-of-sequence token (none of <|endoftext|>, <|end_of_text|>, "
                     "</s>, and no tokenizer_config.json beside it): name one with --eos", cv->o->tokenizer);
    if (rc == 0) {
        cv->eos = id;
        sum->eos = id;
        snprintf(sum->eos_text, sizeof sum->eos_text, "%s", name);
    }
    return rc;
}

static void chunk_reset(Chunk *c) {
    c->ids.n = 0;
    c->nrec = 0;
    c->lines = c->records = c->err_line = 0;
    c->kind = KIND_NONE, c->kind_line = 0;
    c->err_col = 0;
    c->err[0] = '\0';
}

static void chunk_free(Chunk *c) {
    tok_ids_free(&c->ids);
    free(c->info), free(c->rec_len);
}

// Loads the tokenizer, finds the end-of-sequence token and reads the template (the model's
// own, a Jinja file or text, or a {role}/{content} one); the token width follows from the
// vocabulary. Nothing is left to free when it fails.
static int conv_open(Conv *cv, DsSummary *sum, char *err, size_t errlen) {
    if (tok_load(&cv->tok, cv->o->tokenizer, err, errlen) != 0)
        return -1;
    char dir[4096], path[4200];   // tokenizer_config.json beside the tokenizer, read once
    const char *slash = strrchr(cv->o->tokenizer, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - cv->o->tokenizer + 1) : 0, cv->o->tokenizer);
    snprintf(path, sizeof path, "%stokenizer_config.json", dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    int rc = find_eos(cv, cfg, sum, err, errlen);
    if (rc == 0) {
        rc = chat_template_load(&cv->chat, cv->o->template_text, dir, cfg, sum->eos_text, err, errlen);
        cv->have_chat = rc == 1;
        rc = rc < 0 ? -1 : 0;
    }
    json_decref(cfg);
    if (rc == 0 && cv->have_chat)
        snprintf(sum->template_from, sizeof sum->template_from, "%s", cv->chat.from);
    if (rc == 0 && !cv->have_chat && cv->o->template_text) {
        rc = template_read(&cv->tmpl, cv->o->template_text, err, errlen);
        cv->have_tmpl = rc == 0;
    }
    if (rc != 0) {
        template_free(&cv->tmpl);
        chat_template_free(&cv->chat);
        tok_free(cv->tok);
        return -1;
    }
    sum->vocab = tok_vocab_size(cv->tok);
    sum->token_bytes = sum->vocab <= 65536 ? 2 : 4;
    return 0;
}

// The input, read in batches of whole lines.
typedef struct Reader {
    int fd;
    const char *path;
    char *buf;
    size_t cap, have;         // have: the bytes read into buf and not yet used
    bool eof, first;          // first: no batch read yet (a byte order mark may start it)
} Reader;

// The worker threads, and the chunks of a batch they share.
typedef struct Pool {
    int threads, nchunks;
    Chunk *chunks;
    Worker *workers;
    pthread_t *tids;
} Pool;

// A pool of `threads` threads (0: one per CPU), each with its tokenizer scratch, and the
// reader's buffer, a batch for all its chunks; what it got is freed (by pool_free, the buffer
// by the caller) even when it fails.
static int pool_new(Pool *p, Reader *r, const Tokenizer *tok, int threads, char *err, size_t errlen) {
    threads = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    p->threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    p->nchunks = p->threads * CHUNKS_PER_THREAD;
    r->cap = (size_t)p->nchunks * CHUNK_BYTES + 1;
    r->buf = malloc(r->cap);
    p->chunks = calloc((size_t)p->nchunks, sizeof *p->chunks);
    p->workers = calloc((size_t)p->threads, sizeof *p->workers);
    p->tids = calloc((size_t)p->threads, sizeof *p->tids);
    if (!r->buf || !p->chunks || !p->workers || !p->tids)
        return rt_fail(err, errlen, "out of memory");
    for (int k = 0; k < p->threads; k++)
        if (!(p->workers[k].scratch = tok_scratch_new(tok)))
            return rt_fail(err, errlen, "out of memory");
    return 0;
}

static void pool_free(Pool *p) {
    for (int k = 0; p->chunks && k < p->nchunks; k++)
        chunk_free(&p->chunks[k]);
    for (int k = 0; p->workers && k < p->threads; k++) {
        tok_scratch_free(p->workers[k].scratch);
        free(p->workers[k].scratch_text);
        chat_render_free(&p->workers[k].render);
    }
    free(p->chunks), free(p->workers), free(p->tids);
}

// Reads until the buffer is full or the input ends.
static int fill(Reader *r, DsSummary *sum, char *err, size_t errlen) {
    while (!r->eof && r->have < r->cap - 1) {
        ssize_t n = read(r->fd, r->buf + r->have, r->cap - 1 - r->have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return rt_fail(err, errlen, "%s: cannot read: %s", r->path, strerror(errno));
        r->eof = n == 0;
        r->have += (size_t)n;
        sum->input_bytes += (uint64_t)n;
    }
    return 0;
}

// The next batch: *use, the bytes of the buffer up to its last newline (all of them at the
// end of the input); a line longer than the buffer grows it.
static int read_batch(Reader *r, size_t *use, DsSummary *sum, char *err, size_t errlen) {
    for (;;) {
        if (fill(r, sum, err, errlen) != 0)
            return -1;
        // A UTF-8 byte order mark before the first line is not part of it.
        if (r->first && r->have >= 3 && memcmp(r->buf, "\xef\xbb\xbf", 3) == 0) {
            memmove(r->buf, r->buf + 3, r->have - 3);
            r->have -= 3;
        }
        r->first = false;
        if (r->eof) {
            *use = r->have;
            return 0;
        }
        char *nl = memrchr(r->buf, '\n', r->have);
        if (nl) {
            *use = (size_t)(nl - r->buf) + 1;
            return 0;
        }
        // One line longer than the buffer: make room and read on.
        size_t ncap = r->cap * 2;
        char *nb = realloc(r->buf, ncap);
        if (!nb)
            return rt_fail(err, errlen, "%s: out of memory for a line of more than %zu bytes", r->path,
                           r->cap);
        r->buf = nb, r->cap = ncap;
    }
}

// Cuts buf[0..use) into chunks of about CHUNK_BYTES each, ending at newlines; how many.
static int cut_chunks(Pool *p, char *buf, size_t use) {
    int n = 0;
    size_t per = use / (size_t)p->nchunks + 1;
    per = per < CHUNK_BYTES ? CHUNK_BYTES : per;
    for (size_t at = 0; at < use && n < p->nchunks; n++) {
        size_t endp = at + per >= use || n == p->nchunks - 1 ? use : at + per;
        if (endp < use) {
            char *nl = memchr(buf + endp, '\n', use - endp);
            endp = nl ? (size_t)(nl - buf) + 1 : use;
        }
        chunk_reset(&p->chunks[n]);
        p->chunks[n].text = buf + at;
        p->chunks[n].len = endp - at;
        at = endp;
    }
    return n;
}

// Encodes the first n chunks on the pool's threads, the calling one among them.
static void encode_chunks(Pool *p, Conv *cv, int n) {
    int next = 0;
    int nt = p->threads < n ? p->threads : n;
    Worker *ws = p->workers;
    for (int k = 0; k < nt; k++) {
        ws[k] = (Worker){cv, ws[k].scratch, p->chunks, n, &next, ws[k].scratch_text, ws[k].scratch_cap,
                         ws[k].render};
        if (k > 0 && pthread_create(&p->tids[k], NULL, worker_main, &ws[k]) != 0)
            p->tids[k] = 0, worker_main(&ws[k]);
    }
    if (nt > 0)
        worker_main(&ws[0]);
    for (int k = 1; k < nt; k++)
        if (p->tids[k])
            pthread_join(p->tids[k], NULL);
}

// Writes the records of chunks[0..n) in file order, up to the first bad line, whose error
// it reports at its line in the file (*line0: the lines before the batch, advanced).
static int write_chunks(Out *out, const Chunk *chunks, int n, uint64_t *line0, const char *in_path,
                        char *err, size_t errlen) {
    int rc = 0;
    for (int k = 0; rc == 0 && k < n; k++) {
        const Chunk *c = &chunks[k];
        rc = check_kind(out, c, *line0, in_path, err, errlen);
        if (rc == 0)
            rc = put_chunk_out(out, c, err, errlen);
        if (rc == 0 && c->err_line) {
            uint64_t line = *line0 + c->err_line;
            if (c->err_col)
                rc = rt_fail(err, errlen, "%s:%llu:%d: %s", in_path, (unsigned long long)line, c->err_col,
                             c->err);
            else
                rc = rt_fail(err, errlen, "%s:%llu: %s", in_path, (unsigned long long)line, c->err);
        }
        *line0 += c->lines;
        out->sum->lines += c->lines;
        out->sum->records += c->records;
    }
    return rc;
}

// Every batch of the input encoded and written.
static int convert_batches(Conv *cv, Reader *r, Pool *p, Out *out, char *err, size_t errlen) {
    uint64_t line0 = 0;   // lines before the batch
    int rc = 0;
    while (rc == 0 && !(r->eof && r->have == 0)) {
        size_t use = 0;
        if ((rc = read_batch(r, &use, out->sum, err, errlen)) != 0)
            break;
        int n = cut_chunks(p, r->buf, use);
        encode_chunks(p, cv, n);
        rc = write_chunks(out, p->chunks, n, &line0, r->path, err, errlen);
        memmove(r->buf, r->buf + use, r->have - use);
        r->have -= use;
    }
    return rc;
}

// The file finished: an error if no record was read or none written, else the last window
// padded and the token after it (when packing), and the file closed (out->w then NULL).
static int finish(Out *out, const char *in_path, char *err, size_t errlen) {
    DsSummary *sum = out->sum;
    if (sum->records == 0)
        return sum->input_bytes == 0 ? rt_fail(err, errlen, "%s: is empty, there are no records", in_path)
                                     : rt_fail(err, errlen, "%s: has no records (%llu blank lines)", in_path,
                                               (unsigned long long)sum->lines);
    if (sum->written == 0 && sum->pairs)
        return rt_fail(err, errlen, "%s: no pair is left (%llu with a sequence that has no trained token%s)",
                       in_path, (unsigned long long)sum->dropped_untrained,
                       sum->dropped_long ? ", the others with one longer than --pack" : "");
    if (sum->written == 0)
        return rt_fail(err, errlen, "%s: no record has a trained token left (%llu without any%s)", in_path,
                       (unsigned long long)sum->dropped_untrained,
                       sum->dropped_long ? ", the others longer than --pack" : "");
    int rc = 0;
    if (out->o->pack > 0) {
        int32_t one = out->eos;
        uint8_t info = DATA_START;
        rc = pad_window(out, err, errlen);
        if (rc == 0)
            rc = data_writer_put(out->w, &one, &info, 1, err, errlen);
        sum->padding += rc == 0;
    }
    if (rc == 0) {
        sum->tokens = data_writer_count(out->w);
        uint64_t seq = (uint64_t)(out->o->pack > 0 ? out->o->pack : 0);
        rc = data_writer_close(out->w, seq, sum->written, err, errlen);
        out->w = NULL;
    }
    return rc;
}

int ds_convert(const char *in_path, const char *out_path, const DsOptions *o, DsSummary *sum, char *err,
               size_t errlen) {
    memset(sum, 0, sizeof *sum);
    Conv cv = {.o = o, .in_path = in_path};
    if (conv_open(&cv, sum, err, errlen) != 0)
        return -1;
    struct stat st;
    Reader r = {.fd = rt_open_regular(in_path, &st), .path = in_path, .first = true};
    if (r.fd < 0) {
        int e = errno;
        template_free(&cv.tmpl);
        chat_template_free(&cv.chat);
        tok_free(cv.tok);
        return r.fd == -2 ? rt_fail(err, errlen, "%s: not a regular file", in_path)
                          : rt_fail(err, errlen, "%s: cannot open: %s", in_path, strerror(e));
    }
    Pool pool = {0};
    Out out = {.o = o, .sum = sum, .eos = cv.eos};
    int rc = pool_new(&pool, &r, cv.tok, o->threads, err, errlen);
    if (rc == 0)
        rc = data_writer_open(&out.w, out_path, sum->token_bytes, true, err, errlen);
    if (rc == 0)
        rc = convert_batches(&cv, &r, &pool, &out, err, errlen);
    close(r.fd);
    if (rc == 0)
        rc = finish(&out, in_path, err, errlen);
    data_writer_drop(out.w);
    pool_free(&pool);
    free(r.buf);
    template_free(&cv.tmpl);
    chat_template_free(&cv.chat);
    tok_free(cv.tok);
    return rc;
}

// Token i of d and its info byte, through windows of one (seq 1: tokens w and w + 1).
static int token_at(DataFile *d, uint64_t i, int32_t vocab, int32_t *id, uint8_t *info, char *err,
                    size_t errlen) {
    uint64_t w = i + 1 < data_count(d) ? i : i - 1;
    int32_t ids[2];
    uint8_t inf[2];
    if (data_read_window(d, w, 1, ids, inf, vocab, err, errlen) != 0)
        return -1;
    *id = ids[i - w], *info = inf[i - w];
    return 0;
}

// A record's rendering, grown as its tokens come.
typedef struct Shown {
    char *text;
    size_t n, cap;
    uint64_t tokens, trained;
} Shown;

static int shown_put(Shown *s, const char *b, size_t n) {
    if (s->n + n + 1 > s->cap) {
        size_t cap = (s->n + n + 1) * 2;
        char *t = realloc(s->text, cap);
        if (!t)
            return -1;
        s->text = t, s->cap = cap;
    }
    memcpy(s->text + s->n, b, n);
    s->n += n;
    return 0;
}

static const char SPAN_ON[] = "\xe2\x9f\xa6", SPAN_OFF[] = "\xe2\x9f\xa7";   // ⟦ ⟧

// What ds_show reads and renders with.
typedef struct Show {
    DataFile *d;
    TokPieces *pieces;
    int32_t vocab;
    Shown s;
} Show;

// The record of sh->d from token `at` up to the next record start or token `end`, rendered
// into sh->s (emptied first), the trained tokens between ⟦ and ⟧; *next: where it stopped.
static int show_record(Show *sh, uint64_t at, uint64_t end, uint64_t *next, char *err, size_t errlen) {
    Shown *s = &sh->s;
    s->n = 0, s->tokens = s->trained = 0;
    bool in_span = false;
    uint64_t i = at;
    for (; i < end; i++) {
        int32_t id = 0;
        uint8_t info = 0;
        if (token_at(sh->d, i, sh->vocab, &id, &info, err, errlen) != 0)
            return -1;
        if ((info & DATA_START) && i > at)
            break;
        bool train = info & DATA_TRAIN;
        if (train != in_span && shown_put(s, train ? SPAN_ON : SPAN_OFF, 3) != 0)
            goto oom;
        in_span = train;
        size_t len = 0;
        const char *b = tok_piece(sh->pieces, id, &len);
        char unknown[32];
        if (!b)
            len = (size_t)snprintf(unknown, sizeof unknown, "<id %d>", (int)id), b = unknown;
        if (shown_put(s, b, len) != 0)
            goto oom;
        s->tokens++, s->trained += train;
    }
    if (in_span && shown_put(s, SPAN_OFF, 3) != 0)
        goto oom;
    *next = i;
    return 0;
oom:
    return rt_fail(err, errlen, "out of memory");
}

// The record rendered last, under its title.
static void print_shown(const Shown *s, const char *title, FILE *out) {
    fprintf(out, "%s: %llu tokens, %llu trained (between %s and %s)\n", title, (unsigned long long)s->tokens,
            (unsigned long long)s->trained, SPAN_ON, SPAN_OFF);
    fwrite(s->text, 1, s->n, out);
    fputs("\n\n", out);
}

// The first n records of sh->d, every record start beginning one.
static int show_records(Show *sh, int64_t n, FILE *out, char *err, size_t errlen) {
    uint64_t total = data_count(sh->d), recs = data_records(sh->d), at = 0;
    for (int64_t k = 1; k <= n && at < total; k++) {
        if (show_record(sh, at, total, &at, err, errlen) != 0)
            return -1;
        char title[80], of[40] = "";
        if (recs)
            snprintf(of, sizeof of, " of %llu", (unsigned long long)recs);
        snprintf(title, sizeof title, "record %lld%s", (long long)k, of);
        print_shown(&sh->s, title, out);
    }
    return 0;
}

// The first n pairs of the paired file sh->d: each window's record, chosen then rejected.
static int show_pairs(Show *sh, int64_t n, FILE *out, char *err, size_t errlen) {
    uint64_t win = data_packed_window(sh->d), pairs = (data_count(sh->d) - 1) / win / 2, next;
    for (uint64_t j = 0; j < pairs && (int64_t)j < n; j++) {
        fprintf(out, "pair %llu of %llu:\n", (unsigned long long)j + 1, (unsigned long long)pairs);
        for (uint64_t k = 0; k < 2; k++) {
            uint64_t at = (2 * j + k) * win;
            if (show_record(sh, at, at + win, &next, err, errlen) != 0)
                return -1;
            print_shown(&sh->s, k == 0 ? "chosen" : "rejected", out);
        }
    }
    return 0;
}

int ds_show(const char *path, const char *tok_path, int64_t n, FILE *out, char *err, size_t errlen) {
    Tokenizer *tok = NULL;
    Show sh = {0};
    int rc = -1;
    if (tok_load(&tok, tok_path, err, errlen) != 0 || data_open(&sh.d, path, err, errlen) != 0)
        goto done;
    if (!(sh.pieces = tok_pieces_new(tok))) {
        snprintf(err, errlen, "%s: its ids cannot be turned back into text here (out of memory)", tok_path);
        goto done;
    }
    sh.vocab = (int32_t)tok_vocab_size(tok);
    rc = data_paired(sh.d) ? show_pairs(&sh, n, out, err, errlen) : show_records(&sh, n, out, err, errlen);
done:
    free(sh.s.text);
    tok_pieces_free(sh.pieces);
    tok_free(tok);
    data_close(sh.d);
    return rc;
}
