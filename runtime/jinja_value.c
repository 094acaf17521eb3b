// jinja_value.c — the template engine's values as Python has them: built from JSON, written
// as str(), repr() and json.dumps() write them, compared as Python compares them; and the
// arena they live in.
#include "jinja_int.h"
#include "xalloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jerr_fail(JErr *e, int line, int col, const char *fmt, ...) {
    int k = line ? snprintf(e->msg, sizeof e->msg, "%s:%d:%d: ", e->name, line, col)
                 : snprintf(e->msg, sizeof e->msg, "%s: ", e->name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg + k, sizeof e->msg - (size_t)k, fmt, ap);
    va_end(ap);
    longjmp(e->jb, 1);
}

void jctx_fail(JCtx *c, const JNode *n, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jerr_fail(&c->err, n ? n->line : 0, n ? n->col : 0, "%s", msg);
}

// ---------------------------------------------------------------------------------------------
// The arena

typedef struct JChunk {
    struct JChunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
} JChunk;

void *jarena_alloc(JArena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    JChunk *c = a->chunk;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > (64u << 10) ? n : (64u << 10);
        if (a->used_bytes + cap > JINJA_MAX_MEMORY)
            jerr_fail(a->err, 0, 0, "the template needs more than %d MiB", JINJA_MAX_MEMORY >> 20);
        c = xmalloc(sizeof *c + cap);
        c->next = a->chunk, c->used = 0, c->cap = cap;
        a->chunk = c;
        a->used_bytes += cap;
    }
    void *p = c->mem + c->used;
    c->used += n;
    return p;
}

void jarena_free(JArena *a) {
    for (JChunk *c = a->chunk, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->chunk = NULL;
    a->used_bytes = 0;
}

// ---------------------------------------------------------------------------------------------
// Strings, lists, dicts

JStr *jstr_new(JArena *a, const char *s, size_t n) {
    JStr *r = jarena_alloc(a, sizeof *r + n + 1);
    r->n = n;
    if (n)
        memcpy(r->s, s, n);
    r->s[n] = '\0';
    return r;
}

JVal jv_str(JArena *a, const char *s, size_t n) { return (JVal){.k = JV_STR, .s = jstr_new(a, s, n)}; }

JVal jv_list(JArena *a, size_t n) {
    JList *l = jarena_alloc(a, sizeof *l);
    l->n = n;
    l->v = jarena_alloc(a, (n ? n : 1) * sizeof *l->v);
    l->tuple = false;
    for (size_t i = 0; i < n; i++)
        l->v[i] = jv_none();
    return (JVal){.k = JV_LIST, .l = l};
}

JDict *jdict_new(JArena *a) {
    JDict *d = jarena_alloc(a, sizeof *d);
    memset(d, 0, sizeof *d);
    return d;
}

JVal *jdict_get(const JDict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->key[i].k == JV_STR && d->key[i].s->n == n && memcmp(d->key[i].s->s, key, n) == 0)
            return &d->val[i];
    return NULL;
}

void jdict_set(JArena *a, JDict *d, JVal key, JVal val) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->key[i], key)) {
            d->val[i] = val;
            return;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        JVal *k = jarena_alloc(a, cap * sizeof *k), *v = jarena_alloc(a, cap * sizeof *v);
        if (d->n) {
            memcpy(k, d->key, d->n * sizeof *k);
            memcpy(v, d->val, d->n * sizeof *v);
        }
        d->key = k, d->val = v, d->cap = cap;
    }
    d->key[d->n] = key;
    d->val[d->n++] = val;
}

JVal jv_from_json(JArena *a, json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        JDict *d = jdict_new(a);
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v)
            jdict_set(a, d, jv_str(a, k, strlen(k)), jv_from_json(a, v));
        return (JVal){.k = JV_DICT, .d = d};
    }
    case JSON_ARRAY: {
        JVal l = jv_list(a, json_array_size(j));
        for (size_t i = 0; i < l.l->n; i++)
            l.l->v[i] = jv_from_json(a, json_array_get(j, i));
        return l;
    }
    case JSON_STRING: return jv_str(a, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jv_int(json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    default: return jv_none();
    }
}

const char *jv_type_name(JVal v) {
    static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list",
                                        "dict", "Namespace", "LoopContext", "method", "function", "Macro"};
    return names[v.k];
}

bool jv_truth(JVal v) {
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STR: return v.s->n != 0;
    case JV_LIST: return v.l->n != 0;
    case JV_DICT: return v.d->n != 0;
    default: return true;
    }
}

bool jv_is_number(JVal v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }

double jv_to_double(JVal v) { return v.k == JV_FLOAT ? v.f : v.k == JV_INT ? (double)v.i : (double)v.b; }

static bool dict_equal(const JDict *a, const JDict *b) {
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++) {
        size_t j = 0;
        while (j < b->n && !jv_equal(a->key[i], b->key[j]))
            j++;
        if (j == b->n || !jv_equal(a->val[i], b->val[j]))
            return false;
    }
    return true;
}

// Python's ==: numbers (bools among them) by value, containers item by item, other kinds
// never equal; Undefined equals only Undefined.
bool jv_equal(JVal a, JVal b) {
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT)
            return (a.k == JV_INT ? a.i : a.b) == (b.k == JV_INT ? b.i : b.b);
        return jv_to_double(a) == jv_to_double(b);
    }
    if (a.k != b.k)
        return false;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.s->n == b.s->n && memcmp(a.s->s, b.s->s, a.s->n) == 0;
    case JV_LIST:
        if (a.l->n != b.l->n)
            return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!jv_equal(a.l->v[i], b.l->v[i]))
                return false;
        return true;
    case JV_DICT: return dict_equal(a.d, b.d);
    case JV_NS: return a.d == b.d;
    case JV_FUNC: return a.fn == b.fn;
    case JV_MACRO: return a.macro == b.macro;
    default: return false;
    }
}

// Python's order: numbers, strings (by code point, which is UTF-8's byte order), lists item
// by item; anything else is a TypeError as Python words it.
int jv_compare(JErr *e, int line, int col, JVal a, JVal b) {
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.k == JV_INT && b.k == JV_INT)
            return (a.i > b.i) - (a.i < b.i);
        double x = jv_to_double(a), y = jv_to_double(b);
        return (x > y) - (x < y);
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t n = a.s->n < b.s->n ? a.s->n : b.s->n;
        int r = memcmp(a.s->s, b.s->s, n);
        return r ? r : (a.s->n > b.s->n) - (a.s->n < b.s->n);
    }
    if (a.k == JV_LIST && b.k == JV_LIST) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++)
            if (!jv_equal(a.l->v[i], b.l->v[i]))
                return jv_compare(e, line, col, a.l->v[i], b.l->v[i]);
        return (a.l->n > b.l->n) - (a.l->n < b.l->n);
    }
    if (a.k == JV_UNDEF || b.k == JV_UNDEF)
        jerr_fail(e, line, col, "%s", a.k == JV_UNDEF ? a.why : b.why);
    jerr_fail(e, line, col, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
              jv_type_name(b));
}

// ---------------------------------------------------------------------------------------------
// Writing values

void jbuf_put(JBuf *b, const char *s, size_t n) {
    if (n > JINJA_MAX_OUTPUT || b->n + n > JINJA_MAX_OUTPUT)
        jerr_fail(b->err, 0, 0, "the template writes more than %d MiB", JINJA_MAX_OUTPUT >> 20);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        if (b->arena) {
            char *p = jarena_alloc(b->arena, cap);
            if (b->n)
                memcpy(p, b->p, b->n);
            b->p = p;
        } else {
            b->p = xrealloc(b->p, cap);
        }
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void jbuf_putc(JBuf *b, char c) { jbuf_put(b, &c, 1); }

JVal jbuf_value(JBuf *b) { return jv_str(b->arena, b->n ? b->p : "", b->n); }

// repr() of a float, as Python writes it: the shortest digits that read back as the same
// double, fixed-point for exponents from -4 to 15 (with ".0" when whole), else d.ddde+XX.
static void write_float(JBuf *b, double f) {
    if (isnan(f) || isinf(f)) {
        jbuf_put(b, isnan(f) ? "nan" : f > 0 ? "inf" : "-inf", isnan(f) ? 3 : f > 0 ? 3 : 4);
        return;
    }
    char e[40], out[64];
    for (int p = 0; p < 17; p++) {   // %.{p}e: p + 1 significant digits
        snprintf(e, sizeof e, "%.*e", p, f);
        if (strtod(e, NULL) == f)
            break;
    }
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *q = e + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            digits[nd++] = *q;
    int exp = atoi(q + 1), k = 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    if (neg)
        out[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            k += snprintf(out + k, sizeof out - (size_t)k, "0.");
            for (int i = -1; i > exp; i--)
                out[k++] = '0';
            memcpy(out + k, digits, (size_t)nd), k += nd;
        } else {
            for (int i = 0; i <= exp; i++)
                out[k++] = i < nd ? digits[i] : '0';
            out[k++] = '.';
            if (nd > exp + 1)
                memcpy(out + k, digits + exp + 1, (size_t)(nd - exp - 1)), k += nd - exp - 1;
            else
                out[k++] = '0';
        }
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            memcpy(out + k, digits + 1, (size_t)(nd - 1)), k += nd - 1;
        }
        k += snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    jbuf_put(b, out, (size_t)k);
}

static void write_int(JBuf *b, int64_t i) {
    char t[24];
    jbuf_put(b, t, (size_t)snprintf(t, sizeof t, "%lld", (long long)i));
}

// repr() of a string: single quotes unless it holds one and no double quote; escapes for
// the quote, backslash, and control characters.
static void repr_str(JBuf *b, const JStr *s) {
    char q = memchr(s->s, '\'', s->n) && !memchr(s->s, '"', s->n) ? '"' : '\'';
    jbuf_putc(b, q);
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->s[i];
        char t[8];
        if (c == (unsigned char)q || c == '\\')
            jbuf_putc(b, '\\'), jbuf_putc(b, (char)c);
        else if (c == '\n' || c == '\r' || c == '\t')
            jbuf_put(b, c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t", 2);
        else if (c < 0x20 || c == 0x7f)
            jbuf_put(b, t, (size_t)snprintf(t, sizeof t, "\\x%02x", c));
        else
            jbuf_putc(b, (char)c);
    }
    jbuf_putc(b, q);
}

void jv_write_repr(JBuf *b, JVal v) {
    switch (v.k) {
    case JV_STR: repr_str(b, v.s); return;
    case JV_LIST:
        jbuf_putc(b, v.l->tuple ? '(' : '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                jbuf_put(b, ", ", 2);
            jv_write_repr(b, v.l->v[i]);
        }
        jbuf_put(b, v.l->tuple ? ",)" + (v.l->n != 1) : "]", v.l->tuple && v.l->n == 1 ? 2 : 1);
        return;
    case JV_DICT:
        jbuf_putc(b, '{');
        for (size_t i = 0; i < v.d->n; i++) {
            if (i)
                jbuf_put(b, ", ", 2);
            jv_write_repr(b, v.d->key[i]);
            jbuf_put(b, ": ", 2);
            jv_write_repr(b, v.d->val[i]);
        }
        jbuf_putc(b, '}');
        return;
    default: jv_write_str(b, v);
    }
}

void jv_write_str(JBuf *b, JVal v) {
    switch (v.k) {
    case JV_UNDEF: return;
    case JV_NONE: jbuf_put(b, "None", 4); return;
    case JV_BOOL: jbuf_put(b, v.b ? "True" : "False", v.b ? 4 : 5); return;
    case JV_INT: write_int(b, v.i); return;
    case JV_FLOAT: write_float(b, v.f); return;
    case JV_STR: jbuf_put(b, v.s->s, v.s->n); return;
    case JV_LIST: case JV_DICT: jv_write_repr(b, v); return;
    case JV_NS: jbuf_put(b, "<Namespace>", 11); return;
    default: {
        char t[48];
        jbuf_put(b, t, (size_t)snprintf(t, sizeof t, "<%s>", jv_type_name(v)));
    }
    }
}

// A JSON string as Python's json.dumps(ensure_ascii=False) writes it.
static void json_str(JBuf *b, const char *s, size_t n) {
    jbuf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        static const char esc[] = "\b\f\n\r\t", letter[] = "bfnrt";
        const char *e = c ? strchr(esc, c) : NULL;
        char t[8];
        if (c == '"' || c == '\\')
            jbuf_putc(b, '\\'), jbuf_putc(b, (char)c);
        else if (e)
            jbuf_putc(b, '\\'), jbuf_putc(b, letter[e - esc]);
        else if (c < 0x20)
            jbuf_put(b, t, (size_t)snprintf(t, sizeof t, "\\u%04x", c));
        else
            jbuf_putc(b, (char)c);
    }
    jbuf_putc(b, '"');
}

typedef struct JsonFmt {
    int indent;
    const char *item_sep, *key_sep;
    bool sort_keys;
} JsonFmt;

static void json_newline(JBuf *b, const JsonFmt *f, int level) {
    jbuf_putc(b, '\n');
    for (int i = 0; i < f->indent * level; i++)
        jbuf_putc(b, ' ');
}

static int json_value(JBuf *b, JVal v, const JsonFmt *f, int level);

// A dict key as json.dumps turns it into a string: strings as they are, numbers, booleans
// and None as JSON writes them.
static int json_key(JBuf *b, JVal k) {
    if (k.k == JV_STR) {
        json_str(b, k.s->s, k.s->n);
        return 0;
    }
    if (k.k != JV_INT && k.k != JV_FLOAT && k.k != JV_BOOL && k.k != JV_NONE)
        return -1;
    JBuf t = {.arena = b->arena, .err = b->err};
    if (k.k == JV_BOOL || k.k == JV_NONE)
        jbuf_put(&t, k.k == JV_NONE ? "null" : k.b ? "true" : "false", k.k == JV_NONE ? 4 : k.b ? 4 : 5);
    else
        jv_write_str(&t, k);
    json_str(b, t.p, t.n);
    return 0;
}

static int json_dict(JBuf *b, const JDict *d, const JsonFmt *f, int level) {
    size_t *order = jarena_alloc(b->arena, (d->n ? d->n : 1) * sizeof *order);
    for (size_t i = 0; i < d->n; i++)
        order[i] = i;
    for (size_t i = 1; f->sort_keys && i < d->n; i++)   // insertion sort: dicts are small
        for (size_t j = i; j > 0 && jv_compare(b->err, 0, 0, d->key[order[j - 1]], d->key[order[j]]) > 0; j--) {
            size_t t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    jbuf_putc(b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i)
            jbuf_put(b, f->item_sep, strlen(f->item_sep));
        if (f->indent >= 0)
            json_newline(b, f, level + 1);
        if (json_key(b, d->key[order[i]]) != 0)
            return -1;
        jbuf_put(b, f->key_sep, strlen(f->key_sep));
        if (json_value(b, d->val[order[i]], f, level + 1) != 0)
            return -1;
    }
    if (f->indent >= 0 && d->n)
        json_newline(b, f, level);
    jbuf_putc(b, '}');
    return 0;
}

static int json_value(JBuf *b, JVal v, const JsonFmt *f, int level) {
    if (level > JINJA_MAX_DEPTH)
        return -1;
    switch (v.k) {
    case JV_NONE: jbuf_put(b, "null", 4); return 0;
    case JV_BOOL: jbuf_put(b, v.b ? "true" : "false", v.b ? 4 : 5); return 0;
    case JV_INT: write_int(b, v.i); return 0;
    case JV_FLOAT:
        if (isnan(v.f) || isinf(v.f))
            jbuf_put(b, isnan(v.f) ? "NaN" : v.f > 0 ? "Infinity" : "-Infinity",
                     isnan(v.f) ? 3 : v.f > 0 ? 8 : 9);
        else
            write_float(b, v.f);
        return 0;
    case JV_STR: json_str(b, v.s->s, v.s->n); return 0;
    case JV_LIST:
        jbuf_putc(b, '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                jbuf_put(b, f->item_sep, strlen(f->item_sep));
            if (f->indent >= 0)
                json_newline(b, f, level + 1);
            if (json_value(b, v.l->v[i], f, level + 1) != 0)
                return -1;
        }
        if (f->indent >= 0 && v.l->n)
            json_newline(b, f, level);
        jbuf_putc(b, ']');
        return 0;
    case JV_DICT: return json_dict(b, v.d, f, level);
    default: return -1;
    }
}

int jv_write_json(JBuf *b, JVal v, int indent, const char *item_sep, const char *key_sep, bool sort_keys) {
    JsonFmt f = {indent, item_sep ? item_sep : indent >= 0 ? "," : ", ", key_sep ? key_sep : ": ", sort_keys};
    return json_value(b, v, &f, 0);
}

// ---------------------------------------------------------------------------------------------
// UTF-8 as code points

size_t utf8_decode(const char *s, size_t n, uint32_t *c) {
    const unsigned char *u = (const unsigned char *)s;
    size_t len = u[0] < 0x80 ? 1 : u[0] >= 0xf0 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc0 ? 2 : 1;
    if (len > n)
        len = 1;
    uint32_t v = len == 1 ? u[0] : u[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++)
        v = v << 6 | (u[i] & 0x3f);
    *c = v;
    return len;
}

size_t utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

size_t utf8_offset(const char *s, size_t n, size_t cp) {
    size_t i = 0;
    for (size_t k = 0; i < n && k < cp; k++) {
        uint32_t c;
        i += utf8_decode(s + i, n - i, &c);
    }
    return i;
}

bool py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}
