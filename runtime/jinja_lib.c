// jinja_lib.c — what templates call: jinja2's filters and tests that chat templates use,
// transformers' tojson, raise_exception, strftime_now and namespace, Python's string and
// dict methods, and a loop's attributes. Each is a row of a table; the parser looks filters
// and tests up by name (an unknown one is an error there, as in jinja2).
#include "jinja_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

typedef JVal (*FilterFn)(JCtx *c, const JNode *n, JVal x, JArgs *a);
typedef bool (*TestFn)(JCtx *c, const JNode *n, JVal x, JArgs *a);

// The argument at position pos, else the one named name, else dflt.
static JVal arg(const JArgs *a, int pos, const char *name, JVal dflt) {
    if (pos >= 0 && pos < a->npos)
        return a->pos[pos];
    for (int k = 0; name && k < a->nkw; k++)
        if (!strcmp(a->kw[k], name))
            return a->kwv[k];
    return dflt;
}

static JBuf buf(JCtx *c) { return (JBuf){.arena = jctx_arena(c), .err = jctx_err(c)}; }

static JVal str_of(JCtx *c, JVal v) {
    if (v.k == JV_STR)
        return v;
    JBuf b = buf(c);
    jv_write_str(&b, v);
    return jbuf_value(&b);
}

static JStr *need_str(JCtx *c, const JNode *n, JVal v, const char *what) {
    if (v.k == JV_UNDEF)
        jctx_fail(c, n, "%s", v.why);
    if (v.k != JV_STR)
        jctx_fail(c, n, "%s must be a string, not '%s'", what, jv_type_name(v));
    return v.s;
}

static int64_t need_int(JCtx *c, const JNode *n, JVal v, const char *what) {
    if (v.k == JV_INT || v.k == JV_BOOL)
        return v.k == JV_INT ? v.i : v.b;
    if (v.k == JV_UNDEF)
        jctx_fail(c, n, "%s", v.why);
    jctx_fail(c, n, "%s must be an integer, not '%s'", what, jv_type_name(v));
}

// The items of a sequence for filters: a list's, a dict's keys, a string's characters.
static JList *seq_of(JCtx *c, const JNode *n, JVal v) {
    static JList empty;
    if (v.k == JV_LIST)
        return v.l;
    if (v.k == JV_UNDEF || v.k == JV_NONE) {
        if (v.k == JV_NONE)
            jctx_fail(c, n, "'NoneType' object is not iterable");
        return &empty;
    }
    if (v.k == JV_DICT) {
        JVal l = jv_list(jctx_arena(c), v.d->n);
        memcpy(l.l->v, v.d->key, v.d->n * sizeof(JVal));
        return l.l;
    }
    if (v.k != JV_STR)
        jctx_fail(c, n, "'%s' object is not iterable", jv_type_name(v));
    JVal l = jv_list(jctx_arena(c), utf8_len(v.s->s, v.s->n));
    for (size_t i = 0, p = 0; i < l.l->n; i++) {
        uint32_t cp;
        size_t k = utf8_decode(v.s->s + p, v.s->n - p, &cp);
        l.l->v[i] = jv_str(jctx_arena(c), v.s->s + p, k);
        p += k;
    }
    return l.l;
}

// ---------------------------------------------------------------------------------------------
// Strings as Python's str methods treat them

static bool in_chars(const JStr *chars, uint32_t c) {
    if (!chars)
        return py_isspace(c);
    for (size_t i = 0; i < chars->n;) {
        uint32_t d;
        i += utf8_decode(chars->s + i, chars->n - i, &d);
        if (d == c)
            return true;
    }
    return false;
}

// s stripped of chars (NULL: white space) on the left, the right, or both.
static JVal strip(JCtx *c, const JStr *s, const JStr *chars, bool left, bool right) {
    size_t a = 0, b = s->n;
    while (left && a < b) {
        uint32_t cp;
        size_t k = utf8_decode(s->s + a, b - a, &cp);
        if (!in_chars(chars, cp))
            break;
        a += k;
    }
    while (right && b > a) {
        size_t p = b - 1;
        while (p > a && ((unsigned char)s->s[p] & 0xc0) == 0x80)
            p--;
        uint32_t cp;
        utf8_decode(s->s + p, b - p, &cp);
        if (!in_chars(chars, cp))
            break;
        b = p;
    }
    return jv_str(jctx_arena(c), s->s + a, b - a);
}

// Each code point through f (utf8proc's case maps); title case follows Python's rule: a
// character after a cased one is lowered, any other titled.
enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE };

static JVal recase(JCtx *c, const JStr *s, int mode) {
    JBuf b = buf(c);
    bool prev_cased = false;
    for (size_t i = 0, first = 1; i < s->n; first = 0) {
        uint32_t cp;
        i += utf8_decode(s->s + i, s->n - i, &cp);
        utf8proc_int32_t x = (utf8proc_int32_t)cp, r = x;
        if (mode == CASE_UPPER)
            r = utf8proc_toupper(x);
        else if (mode == CASE_LOWER)
            r = utf8proc_tolower(x);
        else if (mode == CASE_CAPITALIZE)
            r = first ? utf8proc_totitle(x) : utf8proc_tolower(x);
        else
            r = prev_cased ? utf8proc_tolower(x) : utf8proc_totitle(x);
        prev_cased = utf8proc_tolower(x) != x || utf8proc_toupper(x) != x;
        utf8proc_uint8_t o[4];
        jbuf_put(&b, (const char *)o, (size_t)utf8proc_encode_char(r, o));
    }
    return jbuf_value(&b);
}

static JVal replace(JCtx *c, const JStr *s, const JStr *old, const JStr *new, int64_t count) {
    JBuf b = buf(c);
    size_t i = 0;
    for (int64_t done = 0; i <= s->n && (count < 0 || done < count); done++) {
        const char *hit = old->n ? memmem(s->s + i, s->n - i, old->s, old->n) : s->s + i;
        if (!hit)
            break;
        size_t at = (size_t)(hit - s->s);
        jbuf_put(&b, s->s + i, at - i);
        jbuf_put(&b, new->s, new->n);
        if (!old->n) {   // '' is found before every character and at the end
            if (at >= s->n)
                return i = s->n + 1, jbuf_value(&b);
            uint32_t cp;
            size_t k = utf8_decode(s->s + at, s->n - at, &cp);
            jbuf_put(&b, s->s + at, k);
            i = at + k;
        } else {
            i = at + old->n;
        }
    }
    if (i < s->n)
        jbuf_put(&b, s->s + i, s->n - i);
    return jbuf_value(&b);
}

// str.split(sep, maxsplit): at every sep, or around runs of white space when sep is None
// (then no empty parts); at most maxsplit cuts, counted from the right for rsplit.
static JVal split(JCtx *c, const JNode *n, const JStr *s, JVal sepv, int64_t maxsplit, bool from_right) {
    JStr *sep = sepv.k == JV_NONE ? NULL : need_str(c, n, sepv, "split's separator");
    if (sep && !sep->n)
        jctx_fail(c, n, "empty separator");
    size_t (*r)[2] = jarena_alloc(jctx_arena(c), (s->n + 2) * sizeof *r), k = 0;
    for (size_t a = 0; sep;) {
        const char *hit = memmem(s->s + a, s->n - a, sep->s, sep->n);
        size_t at = hit ? (size_t)(hit - s->s) : s->n;
        r[k][0] = a, r[k++][1] = at;
        if (!hit)
            break;
        a = at + sep->n;
    }
    for (size_t p = 0; !sep && p < s->n;) {
        uint32_t cp;
        size_t w = utf8_decode(s->s + p, s->n - p, &cp), start = p;
        if (py_isspace(cp)) {
            p += w;
            continue;
        }
        while (p < s->n && !py_isspace(cp))
            p += w, w = p < s->n ? utf8_decode(s->s + p, s->n - p, &cp) : 0;
        r[k][0] = start, r[k++][1] = p;
    }
    if (maxsplit >= 0 && (size_t)maxsplit + 1 <= k) {
        size_t keep = (size_t)maxsplit + 1;
        if (from_right) {
            memmove(r, r + (k - keep), keep * sizeof *r);
            r[0][0] = 0;
        } else {
            r[keep - 1][1] = s->n;
        }
        k = keep;
    }
    JVal out = jv_list(jctx_arena(c), k);
    for (size_t i = 0; i < k; i++)
        out.l->v[i] = jv_str(jctx_arena(c), s->s + r[i][0], r[i][1] - r[i][0]);
    return out;
}

static bool affix(JCtx *c, const JNode *n, const JStr *s, JVal what, bool end) {
    if (what.k == JV_LIST) {
        for (size_t i = 0; i < what.l->n; i++)
            if (affix(c, n, s, what.l->v[i], end))
                return true;
        return false;
    }
    const JStr *p = need_str(c, n, what, end ? "endswith's argument" : "startswith's argument");
    return p->n <= s->n && memcmp(s->s + (end ? s->n - p->n : 0), p->s, p->n) == 0;
}

// ---------------------------------------------------------------------------------------------
// Methods

static JVal m_str(JCtx *c, const JNode *n, JVal self, const char *name, JArgs *a) {
    const JStr *s = self.s;
    JVal none = jv_none();
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        JVal ch = arg(a, 0, "chars", none);
        JStr *chars = ch.k == JV_NONE ? NULL : need_str(c, n, ch, "strip's argument");
        return strip(c, s, chars, name[0] != 'r', name[0] != 'l');
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit"))
        return split(c, n, s, arg(a, 0, "sep", none), need_int(c, n, arg(a, 1, "maxsplit", jv_int(-1)), "maxsplit"),
                     name[0] == 'r');
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith"))
        return jv_bool(affix(c, n, s, arg(a, 0, NULL, none), name[0] == 'e'));
    if (!strcmp(name, "replace"))
        return replace(c, s, need_str(c, n, arg(a, 0, NULL, none), "replace's first argument"),
                       need_str(c, n, arg(a, 1, NULL, none), "replace's second argument"),
                       need_int(c, n, arg(a, 2, "count", jv_int(-1)), "replace's count"));
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") || !strcmp(name, "capitalize"))
        return recase(c, s, name[0] == 'u' ? CASE_UPPER : name[0] == 'l' ? CASE_LOWER : name[0] == 't' ? CASE_TITLE
                                                                                                     : CASE_CAPITALIZE);
    if (!strcmp(name, "find") || !strcmp(name, "count")) {
        const JStr *sub = need_str(c, n, arg(a, 0, NULL, none), "the substring");
        const char *hit = memmem(s->s, s->n, sub->s, sub->n);
        if (name[0] == 'f')
            return jv_int(hit ? (int64_t)utf8_len(s->s, (size_t)(hit - s->s)) : -1);
        int64_t k = 0;
        for (size_t i = 0; sub->n && (hit = memmem(s->s + i, s->n - i, sub->s, sub->n)); k++)
            i = (size_t)(hit - s->s) + sub->n;
        return jv_int(sub->n ? k : (int64_t)utf8_len(s->s, s->n) + 1);
    }
    // join
    JList *items = seq_of(c, n, arg(a, 0, NULL, none));
    JBuf b = buf(c);
    for (size_t i = 0; i < items->n; i++) {
        if (i)
            jbuf_put(&b, s->s, s->n);
        jbuf_put(&b, need_str(c, n, items->v[i], "join's items")->s, items->v[i].s->n);
    }
    return jbuf_value(&b);
}

static JVal m_dict(JCtx *c, const JNode *n, JVal self, const char *name, JArgs *a) {
    const JDict *d = self.d;
    if (!strcmp(name, "get")) {
        JVal key = arg(a, 0, NULL, jv_none());
        for (size_t i = 0; i < d->n; i++)
            if (jv_equal(d->key[i], key))
                return d->val[i];
        return arg(a, 1, NULL, jv_none());
    }
    JVal l = jv_list(jctx_arena(c), d->n);
    for (size_t i = 0; i < d->n; i++) {
        if (name[0] == 'k' || name[0] == 'v') {
            l.l->v[i] = name[0] == 'k' ? d->key[i] : d->val[i];
            continue;
        }
        JVal pair = jv_list(jctx_arena(c), 2);
        pair.l->v[0] = d->key[i], pair.l->v[1] = d->val[i];
        l.l->v[i] = pair;
    }
    (void)n;
    return l;
}

static const char *const STR_METHODS[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
                                          "replace", "upper", "lower", "title", "capitalize", "find", "count",
                                          "join", NULL};
static const char *const DICT_METHODS[] = {"items", "keys", "values", "get", NULL};

static bool listed(const char *const *names, const char *name) {
    for (int k = 0; names[k]; k++)
        if (!strcmp(names[k], name))
            return true;
    return false;
}

bool jlib_has_method(JVal self, const char *name) {
    return (self.k == JV_STR && listed(STR_METHODS, name)) || (self.k == JV_DICT && listed(DICT_METHODS, name));
}

JVal jlib_run_method(JCtx *c, const JNode *n, JMethod *m, JArgs *a) {
    if (m->self.k == JV_STR)
        return m_str(c, n, m->self, m->name, a);
    if (m->self.k == JV_DICT)
        return m_dict(c, n, m->self, m->name, a);
    // loop.cycle(a, b, ...)
    if (a->npos == 0)
        jctx_fail(c, n, "loop.cycle needs at least one item");
    return a->pos[m->self.loop->at % (size_t)a->npos];
}

JVal jlib_loop_attr(JCtx *c, JLoop *l, const char *name) {
    size_t n = l->items->n, i = l->at;
    static const char *const names[] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                                        "depth", "depth0", "previtem", "nextitem", "cycle"};
    int k = 0;
    while (k < 12 && strcmp(names[k], name))
        k++;
    switch (k) {
    case 0: return jv_int((int64_t)i + 1);
    case 1: return jv_int((int64_t)i);
    case 2: return jv_int((int64_t)(n - i));
    case 3: return jv_int((int64_t)(n - i - 1));
    case 4: return jv_bool(i == 0);
    case 5: return jv_bool(i + 1 == n);
    case 6: return jv_int((int64_t)n);
    case 7: return jv_int(1);
    case 8: return jv_int(0);
    case 9: return i ? l->items->v[i - 1] : jv_undef("there is no previous item");
    case 10: return i + 1 < n ? l->items->v[i + 1] : jv_undef("there is no next item");
    case 11: {
        JMethod *m = jarena_alloc(jctx_arena(c), sizeof *m);
        m->self = (JVal){.k = JV_LOOP, .loop = l}, m->name = "cycle";
        return (JVal){.k = JV_METHOD, .m = m};
    }
    default: return jv_undef("'LoopContext object' has no such attribute");
    }
}

// ---------------------------------------------------------------------------------------------
// Attributes

// jinja2's Undefined for a missing attribute: "'dict object' has no attribute 'x'".
JVal jlib_no_attr(JCtx *c, JVal obj, const char *name, size_t len) {
    JBuf b = buf(c);
    if (obj.k == JV_NONE) {
        jbuf_put(&b, "'None'", 6);
    } else {
        jbuf_putc(&b, '\'');
        jbuf_put(&b, jv_type_name(obj), strlen(jv_type_name(obj)));
        jbuf_put(&b, obj.k == JV_NS ? "' object" : " object'", 8);
    }
    jbuf_put(&b, " has no attribute '", 19), jbuf_put(&b, name, len), jbuf_putc(&b, '\'');
    return jv_undef(b.p);
}

JVal jlib_getattr(JCtx *c, const JNode *n, JVal obj, const char *name, size_t len) {
    if (obj.k == JV_UNDEF)
        jctx_fail(c, n, "%s", obj.why);
    if (obj.k == JV_LOOP)
        return jlib_loop_attr(c, obj.loop, name);
    if (jlib_has_method(obj, name)) {
        JMethod *m = jarena_alloc(jctx_arena(c), sizeof *m);
        m->self = obj, m->name = name;
        return (JVal){.k = JV_METHOD, .m = m};
    }
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        JVal *v = jdict_get(obj.d, name, len);
        if (v)
            return *v;
    }
    return jlib_no_attr(c, obj, name, len);
}

// ---------------------------------------------------------------------------------------------
// Tests

static bool t_defined(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, x.k != JV_UNDEF; }
static bool t_undefined(JCtx *c, const JNode *n, JVal x, JArgs *a) { return !t_defined(c, n, x, a); }
static bool t_none(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, x.k == JV_NONE; }
static bool t_string(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, x.k == JV_STR; }
static bool t_mapping(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, x.k == JV_DICT; }
static bool t_number(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, jv_is_number(x); }
static bool t_integer(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, x.k == JV_INT; }
static bool t_float(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, x.k == JV_FLOAT; }
static bool t_boolean(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, x.k == JV_BOOL; }
static bool t_true(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, x.k == JV_BOOL && x.b; }
static bool t_false(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, x.k == JV_BOOL && !x.b; }
static bool t_callable(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    return (void)c, (void)n, (void)a, x.k == JV_FUNC || x.k == JV_METHOD || x.k == JV_MACRO;
}
// str, list and dict (and Undefined, which iterates as empty and has a length of 0)
static bool t_iterable(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    return (void)c, (void)n, (void)a, x.k == JV_STR || x.k == JV_LIST || x.k == JV_DICT || x.k == JV_UNDEF;
}
static bool t_odd(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)a, need_int(c, n, x, "odd's value") % 2 != 0; }
static bool t_even(JCtx *c, const JNode *n, JVal x, JArgs *a) { return !t_odd(c, n, x, a); }
static bool t_divisibleby(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    int64_t d = need_int(c, n, arg(a, 0, "num", jv_none()), "divisibleby's argument");
    if (!d)
        jctx_fail(c, n, "integer division or modulo by zero");
    return need_int(c, n, x, "divisibleby's value") % d == 0;
}
static bool t_eq(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, jv_equal(x, arg(a, 0, NULL, jv_none())); }
static bool t_ne(JCtx *c, const JNode *n, JVal x, JArgs *a) { return !t_eq(c, n, x, a); }
static bool t_order(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    int r = jv_compare(jctx_err(c), n->line, n->col, x, arg(a, 0, NULL, jv_none()));
    return n->name[0] == 'l' ? (n->name[1] == 't' ? r < 0 : r <= 0) : (n->name[1] == 't' ? r > 0 : r >= 0);
}
static bool t_in(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    JList *l = seq_of(c, n, arg(a, 0, NULL, jv_none()));
    JVal hay = arg(a, 0, NULL, jv_none());
    if (hay.k == JV_STR && x.k == JV_STR)
        return memmem(hay.s->s, hay.s->n, x.s->s, x.s->n) != NULL;
    for (size_t i = 0; i < l->n; i++)
        if (jv_equal(l->v[i], x))
            return true;
    return false;
}
static bool t_sameas(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    JVal y = arg(a, 0, NULL, jv_none());
    return (void)c, (void)n, x.k == y.k && (x.k == JV_NONE || x.k == JV_UNDEF || jv_equal(x, y));
}
static bool t_lower(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    return (void)n, (void)a, x.k == JV_STR && jv_equal(x, recase(c, x.s, CASE_LOWER));
}
static bool t_upper(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    return (void)n, (void)a, x.k == JV_STR && jv_equal(x, recase(c, x.s, CASE_UPPER));
}

static const struct { const char *name; TestFn fn; } TESTS[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"string", t_string},
    {"mapping", t_mapping}, {"iterable", t_iterable}, {"sequence", t_iterable}, {"number", t_number},
    {"integer", t_integer}, {"float", t_float}, {"boolean", t_boolean}, {"true", t_true}, {"false", t_false},
    {"callable", t_callable}, {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby},
    {"equalto", t_eq}, {"eq", t_eq}, {"ne", t_ne}, {"lt", t_order}, {"le", t_order}, {"gt", t_order},
    {"ge", t_order}, {"in", t_in}, {"sameas", t_sameas}, {"lower", t_lower}, {"upper", t_upper},
};

int jlib_test(const char *name) {
    for (size_t k = 0; k < sizeof TESTS / sizeof TESTS[0]; k++)
        if (!strcmp(TESTS[k].name, name))
            return (int)k;
    return -1;
}

bool jlib_run_test(JCtx *c, const JNode *n, int fn, JVal x, JArgs *a) { return TESTS[fn].fn(c, n, x, a); }

// A test named by a string at run time (select, selectattr): its row, or an error.
static int test_named(JCtx *c, const JNode *n, JVal name) {
    int k = jlib_test(need_str(c, n, name, "a test's name")->s);
    if (k < 0)
        jctx_fail(c, n, "no test named '%s'", name.s->s);
    return k;
}

// ---------------------------------------------------------------------------------------------
// Filters

static JVal f_trim(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    JVal ch = arg(a, 0, "chars", jv_none());
    return strip(c, str_of(c, x).s, ch.k == JV_NONE ? NULL : need_str(c, n, ch, "trim's argument"), true, true);
}

static JVal f_length(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    (void)a;
    switch (x.k) {
    case JV_UNDEF: return jv_int(0);
    case JV_STR: return jv_int((int64_t)utf8_len(x.s->s, x.s->n));
    case JV_LIST: return jv_int((int64_t)x.l->n);
    case JV_DICT: return jv_int((int64_t)x.d->n);
    default: jctx_fail(c, n, "object of type '%s' has no len()", jv_type_name(x));
    }
}

// json.dumps' ensure_ascii: every code point past ASCII escaped, é as \u00e9 (past the BMP a surrogate pair: \ud83d\ude00).
static JVal ascii_only(JCtx *c, JVal s) {
    JBuf b = buf(c);
    for (size_t i = 0; i < s.s->n;) {
        uint32_t cp;
        size_t k = utf8_decode(s.s->s + i, s.s->n - i, &cp);
        char t[16];
        if (cp < 0x80)
            jbuf_put(&b, s.s->s + i, k);
        else if (cp < 0x10000)
            jbuf_put(&b, t, (size_t)snprintf(t, sizeof t, "\\u%04x", cp));
        else
            jbuf_put(&b, t, (size_t)snprintf(t, sizeof t, "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10),
                                              0xdc00 + ((cp - 0x10000) & 0x3ff)));
        i += k;
    }
    return jbuf_value(&b);
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), which writes non-ASCII text as it is and escapes no HTML.
static JVal f_tojson(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    JVal ind = arg(a, 1, "indent", jv_none()), sep = arg(a, 2, "separators", jv_none());
    int64_t indent = ind.k == JV_NONE ? -1 : need_int(c, n, ind, "tojson's indent");
    const char *item_sep = NULL, *key_sep = NULL;
    if (sep.k != JV_NONE) {
        if (sep.k != JV_LIST || sep.l->n != 2)
            jctx_fail(c, n, "tojson's separators must be a pair of strings");
        item_sep = need_str(c, n, sep.l->v[0], "a separator")->s;
        key_sep = need_str(c, n, sep.l->v[1], "a separator")->s;
    }
    JBuf b = buf(c);
    if (jv_write_json(&b, x, indent < 0 ? -1 : indent > 64 ? 64 : (int)indent, item_sep, key_sep,
                      jv_truth(arg(a, 3, "sort_keys", jv_bool(false)))) != 0)
        jctx_fail(c, n, "tojson: the value holds what JSON cannot (Undefined, a namespace, a function, or "
                  "nesting past %d)", JINJA_MAX_DEPTH);
    JVal s = jbuf_value(&b);
    return jv_truth(arg(a, 0, "ensure_ascii", jv_bool(false))) ? ascii_only(c, s) : s;
}

static JVal f_string(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)n, (void)a, str_of(c, x); }
static JVal f_lower(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)n, (void)a, recase(c, str_of(c, x).s, CASE_LOWER); }
static JVal f_upper(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)n, (void)a, recase(c, str_of(c, x).s, CASE_UPPER); }
static JVal f_title(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)n, (void)a, recase(c, str_of(c, x).s, CASE_TITLE); }
static JVal f_capitalize(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    return (void)n, (void)a, recase(c, str_of(c, x).s, CASE_CAPITALIZE);
}
static JVal f_safe(JCtx *c, const JNode *n, JVal x, JArgs *a) { return (void)c, (void)n, (void)a, x; }

static JVal f_first(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    JList *l = seq_of(c, n, x);
    bool last = n->name[0] == 'l';
    (void)a;
    return l->n ? l->v[last ? l->n - 1 : 0] : jv_undef(last ? "No last item, sequence was empty"
                                                              : "No first item, sequence was empty");
}

static JVal f_list(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    JList *l = seq_of(c, n, x);
    JVal r = jv_list(jctx_arena(c), l->n);
    (void)a;
    if (l->n)
        memcpy(r.l->v, l->v, l->n * sizeof(JVal));
    return r;
}

static JVal f_reverse(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    JList *l = seq_of(c, n, x);
    JVal r = jv_list(jctx_arena(c), l->n);
    for (size_t i = 0; i < l->n; i++)
        r.l->v[i] = l->v[l->n - 1 - i];
    if (x.k != JV_STR)
        return r;
    JBuf b = buf(c);
    for (size_t i = 0; i < l->n; i++)
        jbuf_put(&b, r.l->v[i].s->s, r.l->v[i].s->n);
    return (void)a, jbuf_value(&b);
}

// The attribute (or item) path "a.b" of v, as jinja2's attribute= arguments read it.
static JVal attr_path(JCtx *c, const JNode *n, JVal v, const JStr *path) {
    for (size_t i = 0; i <= path->n;) {
        const char *dot = memchr(path->s + i, '.', path->n - i);
        size_t end = dot ? (size_t)(dot - path->s) : path->n;
        char *part = jstr_new(jctx_arena(c), path->s + i, end - i)->s;
        if (v.k == JV_LIST && part[0] >= '0' && part[0] <= '9') {
            size_t k = (size_t)strtoull(part, NULL, 10);
            v = k < v.l->n ? v.l->v[k] : jv_undef("no such item");
        } else {
            v = jlib_getattr(c, n, v, part, end - i);
        }
        i = end + 1;
    }
    return v;
}

static JVal f_join(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    JList *l = seq_of(c, n, x);
    JVal sep = str_of(c, arg(a, 0, "d", jv_str(jctx_arena(c), "", 0))), attr = arg(a, 1, "attribute", jv_none());
    JBuf b = buf(c);
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            jbuf_put(&b, sep.s->s, sep.s->n);
        jv_write_str(&b, attr.k == JV_NONE ? l->v[i] : attr_path(c, n, l->v[i], need_str(c, n, attr, "attribute")));
    }
    return jbuf_value(&b);
}

static JVal f_default(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    bool boolean = jv_truth(arg(a, 1, "boolean", jv_bool(false)));
    (void)n;
    if (x.k == JV_UNDEF || (boolean && !jv_truth(x)))
        return arg(a, 0, "default_value", jv_str(jctx_arena(c), "", 0));
    return x;
}

static JVal f_items(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    if (x.k == JV_UNDEF)
        return jv_list(jctx_arena(c), 0);
    if (x.k != JV_DICT)
        jctx_fail(c, n, "can only get item pairs from a mapping, not '%s'", jv_type_name(x));
    return m_dict(c, n, x, "items", a);
}

// select / reject (a test of each item) and selectattr / rejectattr (of an attribute of each).
static JVal f_select(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    bool attr = strstr(n->name, "attr") != NULL, keep = n->name[0] == 's';
    JList *l = seq_of(c, n, x);
    int first = attr ? 1 : 0, test = a->npos > first ? test_named(c, n, a->pos[first]) : -1;
    JArgs rest = {a->pos + first + 1, a->npos > first + 1 ? a->npos - first - 1 : 0, NULL, NULL, 0};
    JVal out = jv_list(jctx_arena(c), l->n);
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        JVal v = attr ? attr_path(c, n, l->v[i], need_str(c, n, arg(a, 0, NULL, jv_none()), "the attribute"))
                      : l->v[i];
        bool pass = test < 0 ? jv_truth(v) : jlib_run_test(c, n, test, v, &rest);
        if (pass == keep)
            out.l->v[k++] = l->v[i];
    }
    out.l->n = k;
    return out;
}

static JVal f_map(JCtx *c, const JNode *n, JVal x, JArgs *a);

static JVal f_replace(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    JVal count = arg(a, 2, "count", jv_none());
    return replace(c, str_of(c, x).s, need_str(c, n, str_of(c, arg(a, 0, "old", jv_none())), "old"),
                   need_str(c, n, str_of(c, arg(a, 1, "new", jv_none())), "new"),
                   count.k == JV_NONE ? -1 : need_int(c, n, count, "replace's count"));
}

// int() and float() as jinja2's filters: the default when the value does not read as one.
static JVal f_int(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    bool is_float = n->name[0] == 'f';
    JVal dflt = arg(a, 0, "default", is_float ? jv_float(0.0) : jv_int(0));
    (void)c;
    if (x.k == JV_INT || x.k == JV_BOOL)
        return is_float ? jv_float((double)(x.k == JV_INT ? x.i : x.b)) : jv_int(x.k == JV_INT ? x.i : x.b);
    if (x.k == JV_FLOAT)
        return is_float ? x : (isfinite(x.f) && fabs(x.f) < 9.2e18 ? jv_int((int64_t)x.f) : dflt);
    if (x.k != JV_STR)
        return dflt;
    char *end;
    errno = 0;
    double f = strtod(x.s->s, &end);
    while (*end && py_isspace((unsigned char)*end))
        end++;
    if (end == x.s->s || *end || errno)
        return dflt;
    if (is_float)
        return jv_float(f);
    long long i = strtoll(x.s->s, &end, 10);
    return !*end || py_isspace((unsigned char)*end) ? jv_int(i) : fabs(f) < 9.2e18 ? jv_int((int64_t)f) : dflt;
}

static JVal f_abs(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    (void)a;
    if (x.k == JV_INT && x.i != INT64_MIN)
        return jv_int(x.i < 0 ? -x.i : x.i);
    if (x.k == JV_FLOAT)
        return jv_float(fabs(x.f));
    jctx_fail(c, n, "bad operand type for abs(): '%s'", jv_type_name(x));
}

static JVal f_round(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    int64_t p = need_int(c, n, arg(a, 0, "precision", jv_int(0)), "round's precision");
    if (!jv_is_number(x))
        jctx_fail(c, n, "round needs a number, not '%s'", jv_type_name(x));
    double m = pow(10.0, (double)(p > 15 ? 15 : p < -15 ? -15 : p)), v = jv_to_double(x) * m;
    const char *method = arg(a, 1, "method", jv_none()).k == JV_STR ? arg(a, 1, "method", jv_none()).s->s : "common";
    v = !strcmp(method, "floor") ? floor(v) : !strcmp(method, "ceil") ? ceil(v) : round(v);
    return jv_float(v / m);
}

static const struct { const char *name; FilterFn fn; } FILTERS[] = {
    {"trim", f_trim}, {"length", f_length}, {"count", f_length}, {"tojson", f_tojson}, {"string", f_string},
    {"lower", f_lower}, {"upper", f_upper}, {"title", f_title}, {"capitalize", f_capitalize},
    {"first", f_first}, {"last", f_first}, {"join", f_join}, {"default", f_default}, {"d", f_default},
    {"items", f_items}, {"list", f_list}, {"reverse", f_reverse}, {"select", f_select}, {"reject", f_select},
    {"selectattr", f_select}, {"rejectattr", f_select}, {"map", f_map}, {"replace", f_replace},
    {"int", f_int}, {"float", f_int}, {"abs", f_abs}, {"round", f_round}, {"safe", f_safe},
};

int jlib_filter(const char *name) {
    for (size_t k = 0; k < sizeof FILTERS / sizeof FILTERS[0]; k++)
        if (!strcmp(FILTERS[k].name, name))
            return (int)k;
    return -1;
}

JVal jlib_run_filter(JCtx *c, const JNode *n, int fn, JVal x, JArgs *a) {
    jctx_step(c, n);
    return FILTERS[fn].fn(c, n, x, a);
}

// map(attribute='a', default=d), or map('filter', args...): each item through it.
static JVal f_map(JCtx *c, const JNode *n, JVal x, JArgs *a) {
    JList *l = seq_of(c, n, x);
    JVal attr = arg(a, -1, "attribute", jv_none()), dflt = arg(a, -1, "default", jv_undef("no default"));
    int fn = -1;
    if (attr.k == JV_NONE) {
        fn = jlib_filter(need_str(c, n, arg(a, 0, NULL, jv_none()), "map's filter")->s);
        if (fn < 0)
            jctx_fail(c, n, "no filter named '%s'", a->pos[0].s->s);
    }
    JArgs rest = {a->pos + 1, a->npos > 1 ? a->npos - 1 : 0, NULL, NULL, 0};
    JVal out = jv_list(jctx_arena(c), l->n);
    for (size_t i = 0; i < l->n; i++) {
        if (fn >= 0) {
            out.l->v[i] = jlib_run_filter(c, n, fn, l->v[i], &rest);
            continue;
        }
        JVal v = attr_path(c, n, l->v[i], need_str(c, n, attr, "attribute"));
        out.l->v[i] = v.k == JV_UNDEF && dflt.k != JV_UNDEF ? dflt : v;
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// Globals

static JVal g_raise(JCtx *c, const JNode *n, JArgs *a) {
    jctx_fail(c, n, "%s", str_of(c, arg(a, 0, "message", jv_str(jctx_arena(c), "", 0))).s->s);
}

static JVal g_strftime(JCtx *c, const JNode *n, JArgs *a) {
    const JStr *fmt = need_str(c, n, arg(a, 0, "format", jv_none()), "strftime_now's format");
    time_t now = time(NULL);
    struct tm tm;
    char out[512];
    localtime_r(&now, &tm);
    size_t k = fmt->n && fmt->n < 256 ? strftime(out, sizeof out, fmt->s, &tm) : 0;
    if (!k && fmt->n)
        jctx_fail(c, n, "strftime_now: the format gives nothing or too much");
    return jv_str(jctx_arena(c), out, k);
}

// namespace(d, k=v, ...) and dict(d, k=v, ...): a dict's items, then the keyword arguments.
static JDict *make_dict(JCtx *c, const JNode *n, JArgs *a) {
    JDict *d = jdict_new(jctx_arena(c));
    if (a->npos > 1 || (a->npos && a->pos[0].k != JV_DICT))
        jctx_fail(c, n, "namespace() and dict() take one dict and keyword arguments");
    for (size_t i = 0; a->npos && i < a->pos[0].d->n; i++)
        jdict_set(jctx_arena(c), d, a->pos[0].d->key[i], a->pos[0].d->val[i]);
    for (int k = 0; k < a->nkw; k++)
        jdict_set(jctx_arena(c), d, jv_str(jctx_arena(c), a->kw[k], strlen(a->kw[k])), a->kwv[k]);
    return d;
}

static JVal g_namespace(JCtx *c, const JNode *n, JArgs *a) { return (JVal){.k = JV_NS, .d = make_dict(c, n, a)}; }
static JVal g_dict(JCtx *c, const JNode *n, JArgs *a) { return (JVal){.k = JV_DICT, .d = make_dict(c, n, a)}; }

static JVal g_range(JCtx *c, const JNode *n, JArgs *a) {
    if (a->npos < 1 || a->npos > 3)
        jctx_fail(c, n, "range expected 1 to 3 arguments, got %d", a->npos);
    int64_t lo = 0, hi, step = 1;
    if (a->npos == 1)
        hi = need_int(c, n, a->pos[0], "range's argument");
    else
        lo = need_int(c, n, a->pos[0], "range's start"), hi = need_int(c, n, a->pos[1], "range's stop");
    if (a->npos == 3 && !(step = need_int(c, n, a->pos[2], "range's step")))
        jctx_fail(c, n, "range() arg 3 must not be zero");
    double count = step > 0 ? ceil(((double)hi - (double)lo) / (double)step) : ceil(((double)lo - (double)hi) / (double)-step);
    if (count > JINJA_MAX_RANGE)
        jctx_fail(c, n, "range too big: more than %d items", JINJA_MAX_RANGE);
    JVal l = jv_list(jctx_arena(c), count > 0 ? (size_t)count : 0);
    for (size_t i = 0; i < l.l->n; i++)
        l.l->v[i] = jv_int(lo + (int64_t)i * step);
    return l;
}

static const struct { const char *name; JVal (*fn)(JCtx *, const JNode *, JArgs *); } GLOBALS[] = {
    {"raise_exception", g_raise}, {"strftime_now", g_strftime}, {"namespace", g_namespace},
    {"range", g_range}, {"dict", g_dict},
};

int jlib_global(const char *name) {
    for (size_t k = 0; k < sizeof GLOBALS / sizeof GLOBALS[0]; k++)
        if (!strcmp(GLOBALS[k].name, name))
            return (int)k;
    return -1;
}

JVal jlib_run_global(JCtx *c, const JNode *n, int fn, JArgs *a) { return GLOBALS[fn].fn(c, n, a); }
