// chat.h — a conversation through a model's own chat template (runtime/jinja.h), as
// transformers' apply_chat_template renders it, and which of the rendered text trains.
//
// The template's variables: every key of the record (so a record may carry tools,
// enable_thinking, date_string, ...), then `messages` as apply_chat_template passes them
// (keys whose value is null dropped; reasoning_content, thinking or reasoning copied to both
// thinking and reasoning_content), `bos_token` and `eos_token` from tokenizer_config.json
// (strings or AddedToken objects; a record's own win), `tools` and `documents` null unless
// given, and add_generation_prompt.
//
// The trained spans, one per assistant message i (role "assistant"), derived from renderings:
//   before = messages[:i] with add_generation_prompt, upto = messages[:i+1] without;
//   the turn = what upto adds after before: the assistant's text and the template's end of
//   turn after it, not its header (when upto does not start with before, what follows the
//   last place upto holds the longest end of before).
// In the whole rendering the span starts where `before` ends, when the whole starts with
// it, and runs as far as the whole agrees with the turn read from its start (to the end of
// a piece the template emitted: Phi-3 ends only the last turn with eos) or from its end
// (Qwen3 drops the thinking of earlier turns), whichever reaches further. When the whole
// does not start with `before` (Mistral v0.3 moves the system message to the last user
// turn), the turn is looked up whole in the rendering after the previous span. A turn
// found nowhere is an error, as is a template that renders nothing for it.
#ifndef FTC_RUNTIME_CHAT_H
#define FTC_RUNTIME_CHAT_H

#include "jinja.h"

#include <stdbool.h>

typedef struct ChatTemplate {
    JinjaTemplate *jinja;
    json_t *special;          // {"bos_token", "eos_token"} as far as known
    char from[4200];          // where it came from, for the summary
} ChatTemplate;

// A token tokenizer_config.json (cfg, or NULL) names under key: a string, or an
// AddedToken object's content; NULL when it names none.
const char *chat_config_token(json_t *cfg, const char *key);

// Reads the template --template names (spec): NULL or "model" for the model's own
// (chat_template.jinja in the tokenizer's directory dir, "" or ending in '/', else cfg's
// chat_template — cfg its tokenizer_config.json, or NULL —, the "default" one of a list), a
// path to a file, or a template's text (holding {{ or {%). 1 with ct filled; 0 when spec
// names no Jinja template (chatml, llama3, a {role}/{content} string, or NULL with no
// template beside the tokenizer); -1 with err. eos: the end-of-sequence token's text for
// eos_token when cfg names none.
int chat_template_load(ChatTemplate *ct, const char *spec, const char *dir, json_t *cfg, const char *eos,
                       char *err, size_t errlen);
void chat_template_free(ChatTemplate *ct);

// One thread's renderings, reused record after record.
typedef struct ChatRender {
    JinjaOutput whole, before, upto;
    size_t (*span)[2];        // [start, end) byte offsets in whole.text, in order
    size_t nspan, cap;
} ChatRender;

// Renders the record rec's conversation `messages` (a list of objects) into r->whole and
// finds its trained spans. -1 with "NAME:LINE:COL: message" (the template's error) or
// "messages[i]: ..." in err.
int chat_render(const ChatTemplate *ct, json_t *rec, json_t *messages, ChatRender *r, char *err, size_t errlen);
void chat_render_free(ChatRender *r);

// The conversation `messages` of record rec rendered for a reply (add_generation_prompt,
// as apply_chat_template(..., add_generation_prompt=True) for generation) into out; -1 with
// err as chat_render's.
int chat_prompt(const ChatTemplate *ct, json_t *rec, json_t *messages, JinjaOutput *out, char *err, size_t errlen);

#endif
