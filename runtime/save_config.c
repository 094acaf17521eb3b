// save_config.c — a saved model's config files as transformers reads them back: JSON written
// aside and renamed into place with its numbers as they were written, and the token ids
// that end generation. transformers' generate stops at generation_config.json's
// eos_token_id (else config.json's); a source that names its end token only in
// tokenizer_config.json (or has no generation_config.json) would give a save whose
// from_pretrained(save).generate runs on to max_new_tokens. So a save's config.json gets
// the bos and eos ids it lacks, and its generation_config.json (written where the source
// had none, as GenerationConfig.from_model_config makes one) the bos, eos and pad ids it
// lacks: each from generation_config.json, then config.json, then tokenizer_config.json's
// token through tokenizer.json. It never changes an id that is there, nor config.json's
// pad_token_id (an embedding's padding row, which changes training).
#include "runtime.h"
#include "fileio.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// The fewest significant digits (15 at least) that write every number of `v` back exactly,
// as the compiler or transformers wrote them (1e-06, not 9.9999999999999995e-07).
static int real_digits(json_t *v) {
    int most = 15;
    char s[40];
    while (json_is_real(v) && most < 17 &&
           (snprintf(s, sizeof s, "%.*g", most, json_real_value(v)), strtod(s, NULL) != json_real_value(v)))
        most++;
    const char *key;
    json_t *e;
    size_t i;
    json_object_foreach(v, key, e) {
        int d = real_digits(e);
        most = d > most ? d : most;
    }
    json_array_foreach(v, i, e) {
        int d = real_digits(e);
        most = d > most ? d : most;
    }
    return most;
}

int rt_json_save(const char *path, struct json_t *j, char *err, size_t errlen) {
    char tmp[4500];
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(real_digits(j)));
    int fd = text ? rt_tmp_create(path, tmp, sizeof tmp) : -1;
    bool ok = fd >= 0 && rt_write_full(fd, text, strlen(text)) == 0 && rt_write_full(fd, "\n", 1) == 0;
    if (fd >= 0 && close(fd) != 0)
        ok = false;
    if (ok && rename(tmp, path) != 0)
        ok = false;
    if (!ok && fd >= 0)
        unlink(tmp);
    free(text);
    return ok ? 0 : rt_fail(err, errlen, "cannot write %s", path);
}

// DIR/NAME's JSON object, or NULL where there is none (absent, or not an object).
static json_t *load_object(const char *dir, const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    json_t *j = json_load_file(path, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

// v when it names token ids: an id, or a non-empty list of ids; else NULL.
static json_t *ids_of(json_t *v) {
    if (json_is_integer(v) && json_integer_value(v) >= 0)
        return v;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return NULL;
    }
    return json_is_array(v) && json_array_size(v) > 0 ? v : NULL;
}

// The id of tokenizer_config.json's token `key` ("eos_token": a string, or an object with
// "content" as older files write it) in tokenizer.json: its added tokens, then the model's
// vocabulary. A new reference, or NULL where either file or the token is missing.
static json_t *tokenizer_id(json_t *tok_cfg, json_t *tok, const char *key) {
    json_t *t = json_object_get(tok_cfg, key);
    const char *name = json_is_object(t) ? json_string_value(json_object_get(t, "content")) : json_string_value(t);
    if (!name || !tok)
        return NULL;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(tok, "added_tokens"), i, e) {
        const char *c = json_string_value(json_object_get(e, "content"));
        if (c && !strcmp(c, name) && ids_of(json_object_get(e, "id")))
            return json_incref(json_object_get(e, "id"));
    }
    json_t *id = ids_of(json_object_get(json_object_get(json_object_get(tok, "model"), "vocab"), name));
    return json_is_integer(id) ? json_incref(id) : NULL;
}

// The token ids a saved model's files name, by key: "bos_token_id", "eos_token_id",
// "pad_token_id" (each a new reference, or NULL where unknown).
enum { ID_BOS, ID_EOS, ID_PAD, NID };
static const char *const id_key[NID] = {"bos_token_id", "eos_token_id", "pad_token_id"};
static const char *const token_key[NID] = {"bos_token", "eos_token", NULL};

static void known_ids(const char *dir, json_t *cfg, json_t *gen, json_t *ids[NID]) {
    json_t *tok_cfg = load_object(dir, "tokenizer_config.json"), *tok = NULL;
    for (int k = 0; k < NID; k++) {
        json_t *v = ids_of(json_object_get(gen, id_key[k]));
        v = v ? v : ids_of(json_object_get(cfg, id_key[k]));
        ids[k] = v ? json_incref(v) : NULL;
        if (!ids[k] && token_key[k] && tok_cfg) {
            tok = tok ? tok : load_object(dir, "tokenizer.json");
            ids[k] = tokenizer_id(tok_cfg, tok, token_key[k]);
        }
    }
    json_decref(tok_cfg);
    json_decref(tok);
}

// Sets into o the ids of keys [0, n) it lacks (absent or null); whether it set one.
static bool complete(json_t *o, json_t *ids[NID], int n) {
    bool changed = false;
    for (int k = 0; k < n; k++) {
        json_t *have = json_object_get(o, id_key[k]);
        if (ids[k] && (!have || json_is_null(have))) {
            json_object_set(o, id_key[k], ids[k]);
            changed = true;
        }
    }
    return changed;
}

int rt_save_token_ids(const char *dir, bool *made_gen, char *err, size_t errlen) {
    *made_gen = false;
    json_t *cfg = load_object(dir, "config.json"), *gen = load_object(dir, "generation_config.json");
    if (!cfg) {   // (weights alone: nothing transformers would load as a model)
        json_decref(gen);
        return 0;
    }
    json_t *ids[NID];
    known_ids(dir, cfg, gen, ids);
    char path[4400];
    int rc = 0;
    if (complete(cfg, ids, ID_PAD)) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        rc = rt_json_save(path, cfg, err, errlen);
    }
    bool any = ids[ID_BOS] || ids[ID_EOS];
    if (!gen && any) {   // (GenerationConfig.from_model_config: the pad id the model's config names)
        gen = json_object();
        json_decref(ids[ID_PAD]);
        json_t *pad = ids_of(json_object_get(cfg, id_key[ID_PAD]));
        ids[ID_PAD] = pad ? json_incref(pad) : NULL;
        *made_gen = true;
    }
    if (rc == 0 && gen && (complete(gen, ids, NID) || *made_gen)) {
        snprintf(path, sizeof path, "%s/generation_config.json", dir);
        rc = rt_json_save(path, gen, err, errlen);
    }
    for (int k = 0; k < NID; k++)
        json_decref(ids[k]);
    json_decref(cfg);
    json_decref(gen);
    return rc;
}
