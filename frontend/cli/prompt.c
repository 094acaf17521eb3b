// prompt.c — what ftc generate feeds the model and how it reads the reply: the prompt's
// token ids (a text through the tokenizer, or a conversation through the model's chat
// template with the generation prompt, as transformers' apply_chat_template(...,
// add_generation_prompt=True)), the ids that end a reply, and ids back to text. With
// --bytes a byte-level model's tokens are the bytes themselves.
#include "cli.h"
#include "../../runtime/chat.h"
#include "../../runtime/tokenizer.h"

#include <errno.h>
#include <string.h>

// The directory of path (with its '/'), or "" for a bare name.
static void dir_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    snprintf(dir, cap, "%.*s", slash ? (int)(slash - path + 1) : 0, path);
}

// A conversation file: a JSON list of messages, or an object with "messages" (a record as
// ftc data reads one, its other keys the template's variables). NULL with err.
static json_t *read_messages(const char *path, json_t **rec, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        if (je.line < 1)
            snprintf(err, errlen, "cannot read '%s': %s", path, je.text);
        else
            snprintf(err, errlen, "%s:%d:%d: not valid JSON: %s", path, je.line, je.column, je.text);
        return NULL;
    }
    json_t *m = json_is_array(j) ? j : json_is_object(j) ? json_object_get(j, "messages") : NULL;
    if (!json_is_array(m) || json_array_size(m) == 0) {
        snprintf(err, errlen, "%s: expected a list of messages ([{\"role\": \"user\", \"content\": \"...\"}]) or "
                 "an object with \"messages\"", path);
        json_decref(j);
        return NULL;
    }
    *rec = json_is_object(j) ? json_incref(j) : json_object();
    json_incref(m);
    json_decref(j);
    return m;
}

// The conversation in ga->messages rendered for a reply into *text (malloc'd).
static int render_messages(const GenPrompt *ga, const char *dir, json_t *cfg, char **text, char *err,
                           size_t errlen) {
    ChatTemplate ct;
    int rc = chat_template_load(&ct, ga->template_text, dir, cfg, chat_config_token(cfg, "eos_token"), err, errlen);
    if (rc == 0)
        snprintf(err, errlen, "%s: no chat template to render --messages with (no chat_template.jinja, nor a "
                 "chat_template in tokenizer_config.json beside the tokenizer): give one with --template",
                 ga->tokenizer);
    if (rc != 1)
        return -1;
    json_t *rec = NULL, *msgs = read_messages(ga->messages, &rec, err, errlen);
    JinjaOutput out = {0};
    rc = msgs ? chat_prompt(&ct, rec, msgs, &out, err, errlen) : -1;
    if (rc == 0)
        *text = strndup(out.text, out.len);
    jinja_output_free(&out);
    json_decref(msgs);
    json_decref(rec);
    chat_template_free(&ct);
    return rc == 0 && *text ? 0 : -1;
}

// The ids a config names under "eos_token_id": a number or a list of them (0 when none).
static int config_eos(const char *path, int32_t *ids, int cap) {
    json_t *j = json_load_file(path, 0, NULL), *e = j ? json_object_get(j, "eos_token_id") : NULL;
    int n = 0;
    if (json_is_integer(e))
        ids[n++] = (int32_t)json_integer_value(e);
    for (size_t k = 0; json_is_array(e) && k < json_array_size(e) && n < cap; k++)
        if (json_is_integer(json_array_get(e, k)))
            ids[n++] = (int32_t)json_integer_value(json_array_get(e, k));
    json_decref(j);
    return n;
}

// The ids that end a reply: --eos's token; else generation_config.json's, then config.json's
// (transformers' generate reads them so), beside the weights, then beside the tokenizer;
// else tokenizer_config.json's eos_token.
static int find_eos(GenPrompt *ga, const Tokenizer *tok, json_t *cfg, char *err, size_t errlen) {
    if (ga->eos) {
        int32_t id = tok ? tok_find(tok, ga->eos, strlen(ga->eos)) : strlen(ga->eos) == 1 ? (uint8_t)ga->eos[0] : -1;
        if (id < 0)
            return snprintf(err, errlen, "--eos \"%s\" is not a token of %s", ga->eos,
                            tok ? ga->tokenizer : "the byte vocabulary (one byte)"), -1;
        ga->eos_ids[ga->neos++] = id;
        return 0;
    }
    const char *dirs[2] = {ga->weights_dir, ga->tokenizer_dir}, *files[2] = {"generation_config.json", "config.json"};
    for (int d = 0; d < 2 && !ga->neos; d++)
        for (int f = 0; f < 2 && !ga->neos && dirs[d] && dirs[d][0]; f++) {
            char path[4400];
            snprintf(path, sizeof path, "%s%s", dirs[d], files[f]);
            ga->neos = config_eos(path, ga->eos_ids, GEN_MAX_EOS);
        }
    const char *name = chat_config_token(cfg, "eos_token");
    int32_t id = tok && name && !ga->neos ? tok_find(tok, name, strlen(name)) : -1;
    if (id >= 0)
        ga->eos_ids[ga->neos++] = id;
    return 0;
}

// The prompt's ids: the post-processor's leading ids (a BOS) before a plain text, none
// before a rendered conversation (its template writes them), as transformers tokenizes each.
static int encode(GenPrompt *ga, const Tokenizer *tok, const char *text, bool chat, char *err, size_t errlen) {
    TokScratch *s = tok_scratch_new(tok);
    size_t npre = 0;
    const int32_t *pre = tok_prefix(tok, &npre);
    int rc = s ? 0 : TOK_ERR_MEMORY;
    if (rc == 0 && !chat)
        rc = tok_ids_push(&ga->ids, pre, npre);
    if (rc == 0)
        rc = tok_encode(tok, s, text, strlen(text), &ga->ids);
    tok_scratch_free(s);
    if (rc != 0)
        return snprintf(err, errlen, "the prompt: %s", tok_strerror(rc)), -1;
    return 0;
}

int gen_prompt_open(GenPrompt *ga, char *err, size_t errlen) {
    if (ga->bytes) {
        for (const char *c = ga->prompt; *c; c++) {
            int32_t id = (uint8_t)*c;
            tok_ids_push(&ga->ids, &id, 1);
        }
        return find_eos(ga, NULL, NULL, err, errlen);
    }
    if (tok_load(&ga->tok, ga->tokenizer, err, errlen) != 0)
        return -1;
    dir_of(ga->tokenizer, ga->tokenizer_dir, sizeof ga->tokenizer_dir);
    char path[4400], *text = NULL;
    snprintf(path, sizeof path, "%stokenizer_config.json", ga->tokenizer_dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    int rc = find_eos(ga, ga->tok, cfg, err, errlen);
    if (rc == 0 && ga->messages)
        rc = render_messages(ga, ga->tokenizer_dir, cfg, &text, err, errlen);
    if (rc == 0)
        rc = encode(ga, ga->tok, ga->messages ? text : ga->prompt, ga->messages != NULL, err, errlen);
    free(text);
    json_decref(cfg);
    return rc;
}

void gen_prompt_text(const GenPrompt *ga, const int32_t *ids, int64_t n, FILE *out) {
    TokPieces *pc = ga->tok ? tok_pieces_new(ga->tok) : NULL;
    for (int64_t i = 0; i < n; i++) {
        size_t len = 1;
        char byte = (char)ids[i];
        const char *s = pc ? tok_piece(pc, ids[i], &len) : ga->bytes ? &byte : NULL;
        if (s)
            fwrite(s, 1, len, out);
    }
    tok_pieces_free(pc);
}

void gen_prompt_free(GenPrompt *ga) {
    tok_ids_free(&ga->ids);
    tok_free(ga->tok);
    ga->tok = NULL;
}
