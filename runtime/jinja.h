// jinja.h — chat templates: the subset of Jinja that the published chat templates of the
// major model families use, rendered as transformers' apply_chat_template renders them
// (jinja2 3.1 with trim_blocks and lstrip_blocks, the loop-control extension, its
// tojson, raise_exception, strftime_now and namespace).
//
// What a template may hold:
//   {{ expr }}, {% statement %}, {# comment #}, {% raw %}; whitespace control with - and +
//   statements  if / elif / else, for (targets unpacked, `if` filter, else, loop.index,
//               index0, revindex, revindex0, first, last, length, previtem, nextitem,
//               cycle), break, continue, set (names, a namespace's attribute, a block),
//               macro (called like a function), generation (rendered as its body)
//   expressions strings with Python's escapes, ints, floats, true/false/none, lists,
//               tuples, dicts, attribute and item access, slices, calls, filters, tests,
//               + - * / // % ** ~, comparisons (chained), in, not in, and, or, not,
//               `a if c else b`
//   methods     of strings (strip, lstrip, rstrip, split, rsplit, startswith, endswith,
//               replace, upper, lower, title, capitalize, find, count, join, format is not),
//               of dicts (items, keys, values, get)
//   filters and tests: the tables in jinja_lib.c
// Values are Python's: None prints "None", True "True", a float as repr() writes it; a name
// that is not defined is jinja2's Undefined (prints nothing, is false, iterates as empty;
// taking its attribute, adding to it or calling it is an error). Unknown filters, tests and
// tags are errors when the template is read, as in jinja2.
//
// Errors are "NAME:LINE:COL: message" at the template's text that caused them; a template's
// raise_exception('text') gives its text as the message. Templates are input: nesting,
// output, memory and loop iterations are bounded, and no template crashes the reader or
// the renderer.
//
// A parsed template is read-only: threads render it at once, each with its own output.
#ifndef FTC_RUNTIME_JINJA_H
#define FTC_RUNTIME_JINJA_H

#include <jansson.h>
#include <stddef.h>

typedef struct JinjaTemplate JinjaTemplate;

// What a render wrote: the text (NUL-terminated, len bytes) and the offsets in it where
// each piece the template emitted at its top level (a run of its own text, an {{ }})
// ended, in order. Reused across renders; jinja_output_free releases it.
typedef struct JinjaOutput {
    char *text;
    size_t len, cap;
    size_t *piece_end;
    size_t npieces, pieces_cap;
} JinjaOutput;

// Parses the template src[0..len) called name (a path, or where it came from); NULL with
// "name:LINE:COL: message" in err when it is not one this engine reads.
JinjaTemplate *jinja_parse(const char *name, const char *src, size_t len, char *err, size_t errlen);
void jinja_free(JinjaTemplate *t);

// Renders t with the variables of vars (a JSON object: each key a variable, JSON's values as
// Python's) into out (its earlier text replaced). 0, or -1 with "name:LINE:COL: message" in err.
int jinja_render(const JinjaTemplate *t, json_t *vars, JinjaOutput *out, char *err, size_t errlen);
void jinja_output_free(JinjaOutput *out);

#endif
