// chat.c — the model's chat template found and read, a conversation rendered through it as
// apply_chat_template renders it, and the assistant's spans of the rendering (the rule is in
// chat.h).
#include "chat.h"
#include "fileio.h"
#include "xalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// Finding the template

const char *chat_config_token(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

// tokenizer_config.json's chat_template: the string, or the one named "default" of a list.
static const char *config_template(json_t *cfg) {
    json_t *t = json_object_get(cfg, "chat_template"), *item;
    size_t i;
    if (json_is_string(t))
        return json_string_value(t);
    json_array_foreach(t, i, item) {
        const char *name = json_string_value(json_object_get(item, "name"));
        if (name && !strcmp(name, "default"))
            return json_string_value(json_object_get(item, "template"));
    }
    return NULL;
}

static int parse_into(ChatTemplate *ct, const char *name, const char *text, size_t len, char *err, size_t errlen) {
    ct->jinja = jinja_parse(name, text, len, err, errlen);
    return ct->jinja ? 1 : -1;
}

// The model's own template beside the tokenizer: chat_template.jinja (what transformers saves
// now), else tokenizer_config.json's. 1, 0 when there is none, -1 with err.
static int model_template(ChatTemplate *ct, const char *dir, json_t *cfg, char *err, size_t errlen) {
    snprintf(ct->from, sizeof ct->from, "%schat_template.jinja", dir);
    size_t n;
    char *text = access(ct->from, F_OK) == 0 ? rt_read_whole(ct->from, &n) : NULL;
    if (text) {
        int rc = parse_into(ct, ct->from, text, n, err, errlen);
        free(text);
        return rc;
    }
    if (access(ct->from, F_OK) == 0)
        return rt_fail(err, errlen, "%s: cannot read: %s", ct->from, strerror(errno));
    const char *t = config_template(cfg);
    snprintf(ct->from, sizeof ct->from, "%stokenizer_config.json:chat_template", dir);
    return t ? parse_into(ct, ct->from, t, strlen(t), err, errlen) : 0;
}

// bos_token and eos_token for the template: tokenizer_config.json's, eos else the one given.
static json_t *special_tokens(json_t *cfg, const char *eos) {
    json_t *s = json_object();
    const char *bos = chat_config_token(cfg, "bos_token"), *e = chat_config_token(cfg, "eos_token");
    if (bos)
        json_object_set_new(s, "bos_token", json_string(bos));
    if (e || eos)
        json_object_set_new(s, "eos_token", json_string(e ? e : eos));
    return s;
}

static int load_spec(ChatTemplate *ct, const char *spec, const char *dir, json_t *cfg, char *err, size_t errlen) {
    if (!spec || !strcmp(spec, "model")) {
        int rc = model_template(ct, dir, cfg, err, errlen);
        if (rc == 0 && spec)
            return rt_fail(err, errlen, "--template model: no chat template beside the tokenizer "
                           "(%schat_template.jinja, or chat_template in %stokenizer_config.json)", dir, dir);
        return rc;
    }
    struct stat st;
    int fd = rt_open_regular(spec, &st);
    size_t len = strlen(spec);
    if (fd >= 0) {
        close(fd);
        size_t n;
        char *text = rt_read_whole(spec, &n);
        if (!text)
            return rt_fail(err, errlen, "--template %s: cannot read: %s", spec, strerror(errno));
        snprintf(ct->from, sizeof ct->from, "%s", spec);
        int rc = parse_into(ct, spec, text, n, err, errlen);
        free(text);
        return rc;
    }
    if (len > 6 && !strcmp(spec + len - 6, ".jinja"))
        return rt_fail(err, errlen, "--template %s: %s", spec, fd == -2 ? "not a regular file" : strerror(errno));
    if (!strstr(spec, "{{") && !strstr(spec, "{%"))
        return 0;
    snprintf(ct->from, sizeof ct->from, "--template");
    return parse_into(ct, "--template", spec, len, err, errlen);
}

int chat_template_load(ChatTemplate *ct, const char *spec, const char *dir, json_t *cfg, const char *eos,
                       char *err, size_t errlen) {
    memset(ct, 0, sizeof *ct);
    int rc = load_spec(ct, spec, dir, cfg, err, errlen);
    if (rc == 1)
        ct->special = special_tokens(cfg, eos);
    return rc;
}

void chat_template_free(ChatTemplate *ct) {
    jinja_free(ct->jinja);
    json_decref(ct->special);
    memset(ct, 0, sizeof *ct);
}

// ---------------------------------------------------------------------------------------------
// Rendering

// A message as apply_chat_template passes it: null values dropped, its reasoning (under any
// of its names) as thinking first and reasoning_content.
static json_t *normalized_message(json_t *m) {
    static const char *const names[] = {"reasoning_content", "thinking", "reasoning"};
    json_t *out = json_object(), *reasoning = NULL, *v;
    const char *key;
    for (int k = 0; k < 3 && !reasoning; k++)
        if ((v = json_object_get(m, names[k])) && !json_is_null(v))
            reasoning = v;
    if (reasoning)
        json_object_set(out, "thinking", reasoning);
    json_object_foreach(m, key, v)
        if (!json_is_null(v))
            json_object_set(out, key, v);
    if (reasoning)
        json_object_set(out, "reasoning_content", reasoning);
    return out;
}

static int render(const ChatTemplate *ct, json_t *vars, json_t *all, size_t n, bool prompt, JinjaOutput *out,
                  char *err, size_t errlen) {
    json_t *msgs = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append(msgs, json_array_get(all, i));
    json_object_set_new(vars, "messages", msgs);
    json_object_set_new(vars, "add_generation_prompt", json_boolean(prompt));
    return jinja_render(ct->jinja, vars, out, err, errlen);
}

static size_t common_prefix(const char *a, size_t na, const char *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k])
        k++;
    return k;
}

// The end of turn (k bytes) in whole from s: the bytes that agree with its start, cut back to
// the end of a piece the template emitted, or those that are its end, whichever is longer.
static size_t turn_end(const JinjaOutput *whole, size_t s, const char *turn, size_t k) {
    size_t left = whole->len - s, head = common_prefix(turn, k, whole->text + s, left);
    if (head < k) {
        size_t cut = 0;
        for (size_t p = 0; p < whole->npieces && whole->piece_end[p] <= s + head; p++)
            if (whole->piece_end[p] > s)
                cut = whole->piece_end[p] - s;
        head = cut;
    }
    size_t tail = k < left ? k : left;
    while (tail > head && memcmp(whole->text + s, turn + k - tail, tail) != 0)
        tail--;
    return s + (tail > head ? tail : head);
}

// Where the assistant's turn starts in upto: after `before` when upto starts with it, else
// after the last place upto holds the longest end of `before` (Mistral v0.3 moves the system
// message to the last user turn, so `before` differs earlier on); 0 when it holds none of it.
static size_t turn_start(const JinjaOutput *b, const JinjaOutput *u) {
    if (u->len >= b->len && memcmp(u->text, b->text, b->len) == 0)
        return b->len;
    size_t lo = 0, hi = b->len < u->len ? b->len : u->len;   // a found end's ends are found too
    while (lo < hi) {
        size_t k = (lo + hi + 1) / 2;
        if (memmem(u->text, u->len, b->text + b->len - k, k))
            lo = k;
        else
            hi = k - 1;
    }
    const char *at = NULL;
    for (const char *p = u->text; lo && (p = memmem(p, u->len - (size_t)(p - u->text), b->text + b->len - lo, lo));)
        at = p++;
    return at ? (size_t)(at - u->text) + lo : 0;
}

// Assistant message i's span in r->whole (before and upto rendered); prev: where the last ended.
static int find_span(ChatRender *r, size_t i, size_t prev, char *err, size_t errlen) {
    const JinjaOutput *w = &r->whole, *b = &r->before, *u = &r->upto;
    size_t start = turn_start(b, u);
    if (!start)
        return rt_fail(err, errlen, "messages[%zu]: the template renders the conversation up to this assistant "
                       "message with nothing of how it renders the one before it with add_generation_prompt, so "
                       "which text is the assistant's is unclear", i);
    const char *turn = u->text + start;
    size_t k = u->len - start, s, e;
    if (b->len >= prev && b->len <= w->len && memcmp(w->text, b->text, b->len) == 0) {
        s = b->len;
        e = turn_end(w, s, turn, k);
    } else {
        const char *hit = k ? memmem(w->text + prev, w->len - prev, turn, k) : NULL;
        if (!hit)
            return rt_fail(err, errlen, "messages[%zu]: the assistant's turn as the template renders it alone is "
                           "not in the whole conversation's rendering", i);
        s = (size_t)(hit - w->text), e = s + k;
    }
    if (e <= s)
        return rt_fail(err, errlen, "messages[%zu]: the template renders no text of this assistant message", i);
    if (r->nspan == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 16;
        r->span = xrealloc(r->span, r->cap * sizeof *r->span);
    }
    r->span[r->nspan][0] = s, r->span[r->nspan++][1] = e;
    return 0;
}

static bool is_assistant(json_t *m) {
    const char *speaker = json_string_value(json_object_get(m, "role"));   // (a chat message's)
    return speaker && !strcmp(speaker, "assistant");
}

// The template's variables for rec, its messages normalized (in *msgs); NULL with err.
static json_t *make_vars(const ChatTemplate *ct, json_t *rec, json_t *messages, json_t **msgs, char *err,
                         size_t errlen) {
    *msgs = json_array();
    for (size_t i = 0; i < json_array_size(messages); i++) {
        json_t *m = json_array_get(messages, i);
        if (!json_is_object(m)) {
            json_decref(*msgs);
            return rt_fail(err, errlen, "messages[%zu] is not an object", i), NULL;
        }
        json_array_append_new(*msgs, normalized_message(m));
    }
    json_t *vars = json_object();
    json_object_update(vars, ct->special);
    json_object_update(vars, rec);
    if (!json_object_get(vars, "tools"))
        json_object_set_new(vars, "tools", json_null());
    if (!json_object_get(vars, "documents"))
        json_object_set_new(vars, "documents", json_null());
    return vars;
}

int chat_render(const ChatTemplate *ct, json_t *rec, json_t *messages, ChatRender *r, char *err, size_t errlen) {
    json_t *msgs;
    json_t *vars = make_vars(ct, rec, messages, &msgs, err, errlen);
    if (!vars)
        return -1;
    size_t n = json_array_size(msgs), prev = 0;
    r->nspan = 0;
    int rc = render(ct, vars, msgs, n, false, &r->whole, err, errlen);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!is_assistant(json_array_get(msgs, i)))
            continue;
        rc = render(ct, vars, msgs, i, true, &r->before, err, errlen);
        if (rc == 0)
            rc = render(ct, vars, msgs, i + 1, false, &r->upto, err, errlen);
        if (rc == 0)
            rc = find_span(r, i, prev, err, errlen);
        if (rc == 0)
            prev = r->span[r->nspan - 1][1];
    }
    json_decref(vars);
    json_decref(msgs);
    return rc;
}

int chat_prompt(const ChatTemplate *ct, json_t *rec, json_t *messages, JinjaOutput *out, char *err, size_t errlen) {
    json_t *msgs;
    json_t *vars = make_vars(ct, rec, messages, &msgs, err, errlen);
    if (!vars)
        return -1;
    int rc = render(ct, vars, msgs, json_array_size(msgs), true, out, err, errlen);
    json_decref(vars);
    json_decref(msgs);
    return rc;
}

void chat_render_free(ChatRender *r) {
    jinja_output_free(&r->whole), jinja_output_free(&r->before), jinja_output_free(&r->upto);
    free(r->span);
    memset(r, 0, sizeof *r);
}
