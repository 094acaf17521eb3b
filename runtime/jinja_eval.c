// jinja_eval.c — rendering a parsed template: statements write to the output (or to a
// capture, for a macro or a block set), expressions evaluate to values with Python's
// semantics, names resolve through a stack of scopes (the template's, one per loop
// iteration, one per macro call) and then the variables given. Every error jumps back to
// jinja_render with its location; everything a render allocates is in its arena.
#include "jinja_int.h"
#include "xalloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static JVal eval(JCtx *c, const JNode *n);
static void exec(JCtx *c, const JNodes *body);

// ---------------------------------------------------------------------------------------------
// Scopes

static void scope_push(JCtx *c) {
    if (c->nscope == c->scope_cap) {
        int cap = c->scope_cap ? 2 * c->scope_cap : 16;
        JDict **s = jarena_alloc(&c->arena, (size_t)cap * sizeof *s);
        memset(s, 0, (size_t)cap * sizeof *s);
        if (c->nscope)
            memcpy(s, c->scope, (size_t)c->nscope * sizeof *s);
        c->scope = s, c->scope_cap = cap;
    }
    if (!c->scope[c->nscope])
        c->scope[c->nscope] = jdict_new(&c->arena);
    c->scope[c->nscope++]->n = 0;
}

// Binds a name of the tree (see jv_name) in the innermost scope.
static void scope_set(JCtx *c, const char *name, JVal v) {
    jdict_set(&c->arena, c->scope[c->nscope - 1], jv_name(name), v);
}

static JVal lookup(JCtx *c, const char *name) {
    size_t n = strlen(name);
    for (int k = c->nscope - 1; k >= 0; k--) {
        JVal *v = jdict_get(c->scope[k], name, n);
        if (v)
            return *v;
    }
    JVal *v = jdict_get(c->vars, name, n);
    if (v)
        return *v;
    JBuf b = {.arena = &c->arena, .err = &c->err};
    jbuf_put(&b, "'", 1), jbuf_put(&b, name, n), jbuf_put(&b, "' is undefined", 14);
    return jv_undef(b.p);
}

static void deeper(JCtx *c, const JNode *n) {
    if (++c->depth > JINJA_MAX_DEPTH)
        jctx_fail(c, n, "the template nests calls deeper than %d", JINJA_MAX_DEPTH);
}

// ---------------------------------------------------------------------------------------------
// Attributes, items, slices

// Python's slice bounds for a sequence of n items: start, stop, step (not 0) and the count.
static size_t slice_bounds(JCtx *c, const JNode *n, JVal lo, JVal hi, JVal st, size_t len, int64_t *start,
                           int64_t *step) {
    int64_t L = (int64_t)len, s = 1, a, b;
    JVal parts[3] = {lo, hi, st};
    for (int k = 0; k < 3; k++)
        if (parts[k].k != JV_NONE && parts[k].k != JV_INT && parts[k].k != JV_BOOL)
            jctx_fail(c, n, "slice indices must be integers or None, not '%s'", jv_type_name(parts[k]));
    if (st.k != JV_NONE && (s = st.k == JV_INT ? st.i : st.b) == 0)
        jctx_fail(c, n, "slice step cannot be zero");
    if (s == INT64_MIN)
        s = -INT64_MAX;
    int64_t dlo = s > 0 ? 0 : L - 1, dhi = s > 0 ? L : -1;
    a = lo.k == JV_NONE ? dlo : lo.k == JV_INT ? lo.i : lo.b;
    b = hi.k == JV_NONE ? dhi : hi.k == JV_INT ? hi.i : hi.b;
    if (lo.k != JV_NONE)
        a = a < 0 ? (a + L < 0 ? (s > 0 ? 0 : -1) : a + L) : (a >= L ? (s > 0 ? L : L - 1) : a);
    if (hi.k != JV_NONE)
        b = b < 0 ? (b + L < 0 ? (s > 0 ? 0 : -1) : b + L) : (b >= L ? (s > 0 ? L : L - 1) : b);
    *start = a, *step = s;
    if (s > 0)
        return b > a ? (size_t)((b - a - 1) / s + 1) : 0;
    return a > b ? (size_t)((a - b - 1) / -s + 1) : 0;
}

static JVal eval_slice(JCtx *c, const JNode *n) {
    JVal obj = eval(c, n->a);
    JVal lo = n->b ? eval(c, n->b) : jv_none(), hi = n->c ? eval(c, n->c) : jv_none();
    JVal st = n->d ? eval(c, n->d) : jv_none();
    if (obj.k == JV_UNDEF)
        jctx_fail(c, n, "%s", obj.why);
    int64_t start, step;
    if (obj.k == JV_LIST) {
        size_t k = slice_bounds(c, n, lo, hi, st, obj.l->n, &start, &step);
        JVal r = jv_list(&c->arena, k);
        for (size_t i = 0; i < k; i++)
            r.l->v[i] = obj.l->v[start + (int64_t)i * step];
        return r;
    }
    if (obj.k != JV_STR)
        jctx_fail(c, n, "'%s' object is not subscriptable", jv_type_name(obj));
    size_t len = utf8_len(obj.s->s, obj.s->n), k = slice_bounds(c, n, lo, hi, st, len, &start, &step);
    size_t *at = jarena_alloc(&c->arena, (len + 1) * sizeof *at);
    for (size_t i = 0, p = 0; i <= len; i++) {
        at[i] = p;
        uint32_t cp;
        if (p < obj.s->n)
            p += utf8_decode(obj.s->s + p, obj.s->n - p, &cp);
    }
    JBuf b = {.arena = &c->arena, .err = &c->err};
    for (size_t i = 0; i < k; i++) {
        size_t j = (size_t)(start + (int64_t)i * step);
        jbuf_put(&b, obj.s->s + at[j], at[j + 1] - at[j]);
    }
    return jbuf_value(&b);
}

static JVal getitem(JCtx *c, const JNode *n, JVal obj, JVal key) {
    if (obj.k == JV_UNDEF)
        jctx_fail(c, n, "%s", obj.why);
    if ((obj.k == JV_LIST || obj.k == JV_STR) && (key.k == JV_INT || key.k == JV_BOOL)) {
        int64_t i = key.k == JV_INT ? key.i : key.b;
        size_t len = obj.k == JV_LIST ? obj.l->n : utf8_len(obj.s->s, obj.s->n);
        if (i < 0)
            i += (int64_t)len;
        if (i < 0 || i >= (int64_t)len) {
            char t[64];
            snprintf(t, sizeof t, "'%s object' has no element %lld", jv_type_name(obj), (long long)key.i);
            return jv_undef(jstr_new(&c->arena, t, strlen(t))->s);
        }
        if (obj.k == JV_LIST)
            return obj.l->v[i];
        size_t at = utf8_offset(obj.s->s, obj.s->n, (size_t)i);
        uint32_t cp;
        return jv_str(&c->arena, obj.s->s + at, utf8_decode(obj.s->s + at, obj.s->n - at, &cp));
    }
    if (obj.k == JV_DICT) {
        for (size_t i = 0; i < obj.d->n; i++)
            if (jv_equal(obj.d->key[i], key))
                return obj.d->val[i];
    }
    if (key.k == JV_STR)
        return obj.k == JV_DICT ? jlib_no_attr(c, obj, key.s->s, key.s->n) : jlib_getattr(c, n, obj, key.s->s, key.s->n);
    JBuf b = {.arena = &c->arena, .err = &c->err};
    jv_write_repr(&b, key);
    return jlib_no_attr(c, obj, b.p, b.n);
}

// ---------------------------------------------------------------------------------------------
// Operators

static JVal as_int(JVal v) { return v.k == JV_BOOL ? jv_int(v.b) : v; }

_Noreturn static void bad_operands(JCtx *c, const JNode *n, const char *op, JVal a, JVal b) {
    if (a.k == JV_UNDEF || b.k == JV_UNDEF)
        jctx_fail(c, n, "%s", a.k == JV_UNDEF ? a.why : b.why);
    if (a.k == JV_STR && !strcmp(op, "+"))
        jctx_fail(c, n, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    jctx_fail(c, n, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

// a * k for a string or list and an int k: repeated, within the output bound.
static JVal repeat(JCtx *c, const JNode *n, JVal a, int64_t k) {
    size_t unit = a.k == JV_STR ? a.s->n : a.l->n * sizeof(JVal);
    if (k <= 0)
        return a.k == JV_STR ? jv_str(&c->arena, "", 0) : jv_list(&c->arena, 0);
    if (unit && (uint64_t)k > (uint64_t)JINJA_MAX_OUTPUT / unit)
        jctx_fail(c, n, "a repetition of more than %d MiB", JINJA_MAX_OUTPUT >> 20);
    if (a.k == JV_LIST) {
        JVal r = jv_list(&c->arena, a.l->n * (size_t)k);
        for (int64_t i = 0; i < k; i++)
            memcpy(r.l->v + (size_t)i * a.l->n, a.l->v, a.l->n * sizeof(JVal));
        return r;
    }
    JBuf b = {.arena = &c->arena, .err = &c->err};
    for (int64_t i = 0; i < k; i++)
        jbuf_put(&b, a.s->s, a.s->n);
    return jbuf_value(&b);
}

static JVal concat(JCtx *c, JVal a, JVal b) {
    if (a.k == JV_STR) {
        JBuf r = {.arena = &c->arena, .err = &c->err};
        jbuf_put(&r, a.s->s, a.s->n), jbuf_put(&r, b.s->s, b.s->n);
        return jbuf_value(&r);
    }
    JVal r = jv_list(&c->arena, a.l->n + b.l->n);
    if (a.l->n)
        memcpy(r.l->v, a.l->v, a.l->n * sizeof(JVal));
    if (b.l->n)
        memcpy(r.l->v + a.l->n, b.l->v, b.l->n * sizeof(JVal));
    return r;
}

static int64_t int_pow(JCtx *c, const JNode *n, int64_t base, int64_t e) {
    int64_t r = 1;
    for (; e > 0; e--)
        if (__builtin_mul_overflow(r, base, &r))
            jctx_fail(c, n, "integer overflow in **");
    return r;
}

// Two ints under op, with Python's floor division and modulo; overflow is an error.
static JVal int_op(JCtx *c, const JNode *n, int op, int64_t x, int64_t y) {
    int64_t r = 0;
    bool over = false;
    switch (op) {
    case T_ADD: over = __builtin_add_overflow(x, y, &r); break;
    case T_SUB: over = __builtin_sub_overflow(x, y, &r); break;
    case T_MUL: over = __builtin_mul_overflow(x, y, &r); break;
    case T_DIV:
        if (!y)
            jctx_fail(c, n, "division by zero");
        return jv_float((double)x / (double)y);
    case T_FLOORDIV: case T_MOD:
        if (!y)
            jctx_fail(c, n, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1)
            jctx_fail(c, n, "integer overflow");
        r = op == T_FLOORDIV ? x / y - ((x % y != 0) && ((x < 0) != (y < 0))) : (x % y + y) % y;
        if (op == T_MOD && x % y == 0)
            r = 0;
        break;
    case T_POW:
        if (y < 0)
            return jv_float(pow((double)x, (double)y));
        if (y > 64 && x != 0 && x != 1 && x != -1)
            jctx_fail(c, n, "integer overflow in **");
        return jv_int(int_pow(c, n, x, y));
    }
    if (over)
        jctx_fail(c, n, "integer overflow");
    return jv_int(r);
}

static JVal float_op(JCtx *c, const JNode *n, int op, double x, double y) {
    if ((op == T_DIV || op == T_FLOORDIV || op == T_MOD) && y == 0.0)
        jctx_fail(c, n, "float division by zero");
    switch (op) {
    case T_ADD: return jv_float(x + y);
    case T_SUB: return jv_float(x - y);
    case T_MUL: return jv_float(x * y);
    case T_DIV: return jv_float(x / y);
    case T_FLOORDIV: return jv_float(floor(x / y));
    case T_MOD: {
        double m = fmod(x, y);
        return jv_float(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
    }
    default: return jv_float(pow(x, y));
    }
}

static const char *op_text(int op) {
    static const char *const t[] = {"", "+", "-", "*", "/", "//", "%", "**", "~"};
    return op <= T_TILDE ? t[op] : "?";
}

static JVal eval_binary(JCtx *c, const JNode *n) {
    JVal a = eval(c, n->a), b = eval(c, n->b);
    if (n->op == T_TILDE) {
        JBuf r = {.arena = &c->arena, .err = &c->err};
        jv_write_str(&r, a), jv_write_str(&r, b);
        return jbuf_value(&r);
    }
    a = as_int(a), b = as_int(b);
    if (a.k == JV_INT && b.k == JV_INT)
        return int_op(c, n, n->op, a.i, b.i);
    if (jv_is_number(a) && jv_is_number(b))
        return float_op(c, n, n->op, jv_to_double(a), jv_to_double(b));
    if (n->op == T_ADD && a.k == b.k && (a.k == JV_STR || a.k == JV_LIST))
        return concat(c, a, b);
    if (n->op == T_MUL && (a.k == JV_STR || a.k == JV_LIST) && b.k == JV_INT)
        return repeat(c, n, a, b.i);
    if (n->op == T_MUL && (b.k == JV_STR || b.k == JV_LIST) && a.k == JV_INT)
        return repeat(c, n, b, a.i);
    bad_operands(c, n, op_text(n->op), a, b);
}

// `item in container`, as Python answers it.
static bool contains(JCtx *c, const JNode *n, JVal container, JVal item) {
    switch (container.k) {
    case JV_STR:
        if (item.k != JV_STR)
            jctx_fail(c, n, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        return item.s->n == 0 || memmem(container.s->s, container.s->n, item.s->s, item.s->n) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < container.l->n; i++)
            if (jv_equal(container.l->v[i], item))
                return true;
        return false;
    case JV_DICT: case JV_NS:
        for (size_t i = 0; i < container.d->n; i++)
            if (jv_equal(container.d->key[i], item))
                return true;
        return false;
    case JV_UNDEF: return false;
    default: jctx_fail(c, n, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

static JVal eval_compare(JCtx *c, const JNode *n) {
    JVal a = eval(c, n->a), b = eval(c, n->b);
    switch (n->op) {
    case T_EQ: return jv_bool(jv_equal(a, b));
    case T_NE: return jv_bool(!jv_equal(a, b));
    case T_IN: return jv_bool(contains(c, n, b, a));
    case T_NOTIN: return jv_bool(!contains(c, n, b, a));
    }
    int r = jv_compare(&c->err, n->line, n->col, a, b);
    return jv_bool(n->op == T_LT ? r < 0 : n->op == T_LE ? r <= 0 : n->op == T_GT ? r > 0 : r >= 0);
}

// ---------------------------------------------------------------------------------------------
// Calls

// The arguments of a call, filter or test node (its args from `first` on), evaluated.
static JArgs eval_args(JCtx *c, const JNode *n, int first) {
    JArgs a = {0};
    int total = n->args.n - first;
    a.npos = total - n->nkw, a.nkw = n->nkw, a.kw = n->kw;
    a.pos = jarena_alloc(&c->arena, (size_t)(total > 0 ? total : 1) * sizeof *a.pos);
    for (int i = 0; i < total; i++)
        a.pos[i] = eval(c, n->args.at[first + i]);
    a.kwv = a.pos + a.npos;
    return a;
}

// A macro called: its parameters bound from the arguments (or their defaults, or Undefined),
// its body rendered into a string of its own.
static JVal call_macro(JCtx *c, const JNode *n, const JNode *m, JArgs *a) {
    if (a->npos > m->ntargets)
        jctx_fail(c, n, "macro '%s' takes not more than %d argument(s)", m->name, m->ntargets);
    deeper(c, n);
    JVal *bound = jarena_alloc(&c->arena, (size_t)(m->ntargets ? m->ntargets : 1) * sizeof *bound);
    for (int i = 0; i < m->ntargets; i++) {
        bound[i] = i < a->npos ? a->pos[i] : jv_undef("a macro's parameter was not given");
        for (int k = 0; k < a->nkw; k++)
            if (!strcmp(a->kw[k], m->targets[i]))
                bound[i] = a->kwv[k];
        if (bound[i].k == JV_UNDEF && m->args.at[i])
            bound[i] = eval(c, m->args.at[i]);
    }
    JBuf capture = {.arena = &c->arena, .err = &c->err}, *saved = c->out;
    c->out = &capture;
    scope_push(c);
    for (int i = 0; i < m->ntargets; i++)
        scope_set(c, m->targets[i], bound[i]);
    exec(c, &m->body);
    c->nscope--;
    c->out = saved;
    c->depth--;
    return jbuf_value(&capture);
}

static JVal call(JCtx *c, const JNode *n, JVal fn, JArgs *a) {
    jctx_step(c, n);
    switch (fn.k) {
    case JV_FUNC: return jlib_run_global(c, n, fn.fn, a);
    case JV_METHOD: return jlib_run_method(c, n, fn.m, a);
    case JV_MACRO: return call_macro(c, n, fn.macro, a);
    case JV_UNDEF: jctx_fail(c, n, "%s", fn.why);
    default: jctx_fail(c, n, "'%s' object is not callable", jv_type_name(fn));
    }
}

static JVal eval_call(JCtx *c, const JNode *n) {
    JVal fn = n->a->kind == JN_ATTR ? jlib_getattr(c, n->a, eval(c, n->a->a), n->a->name, strlen(n->a->name))
                                    : eval(c, n->a);
    JArgs a = eval_args(c, n, 0);
    return call(c, n, fn, &a);
}

static JVal eval_items(JCtx *c, const JNode *n) {
    if (n->kind == JN_DICT) {
        JDict *d = jdict_new(&c->arena);
        for (int i = 0; i + 1 < n->args.n; i += 2) {
            JVal k = eval(c, n->args.at[i]);
            jdict_set(&c->arena, d, k, eval(c, n->args.at[i + 1]));
        }
        return (JVal){.k = JV_DICT, .d = d};
    }
    JVal l = jv_list(&c->arena, (size_t)n->args.n);
    for (int i = 0; i < n->args.n; i++)
        l.l->v[i] = eval(c, n->args.at[i]);
    l.l->tuple = n->kind == JN_TUPLE;
    return l;
}

static JVal eval(JCtx *c, const JNode *n) {
    switch (n->kind) {
    case JN_CONST: return n->v;
    case JN_NAME: return lookup(c, n->name);
    case JN_ATTR: return jlib_getattr(c, n, eval(c, n->a), n->name, strlen(n->name));
    case JN_ITEM: {
        JVal obj = eval(c, n->a);
        return getitem(c, n, obj, eval(c, n->b));
    }
    case JN_SLICE: return eval_slice(c, n);
    case JN_CALL: return eval_call(c, n);
    case JN_FILTER: {
        JVal x = eval(c, n->a);
        JArgs a = eval_args(c, n, 0);
        return jlib_run_filter(c, n, (int)n->fn, x, &a);
    }
    case JN_TEST: {
        JVal x = eval(c, n->a);
        JArgs a = eval_args(c, n, 0);
        return jv_bool(jlib_run_test(c, n, (int)n->fn, x, &a) != (n->op == 1));
    }
    case JN_BINARY: return eval_binary(c, n);
    case JN_NEG: case JN_POS: {
        JVal v = as_int(eval(c, n->a));
        if (v.k == JV_INT && v.i != INT64_MIN)
            return jv_int(n->kind == JN_NEG ? -v.i : v.i);
        if (v.k == JV_FLOAT)
            return jv_float(n->kind == JN_NEG ? -v.f : v.f);
        if (v.k == JV_UNDEF)
            jctx_fail(c, n, "%s", v.why);
        jctx_fail(c, n, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+', jv_type_name(v));
    }
    case JN_NOT: return jv_bool(!jv_truth(eval(c, n->a)));
    case JN_AND: case JN_OR: {
        JVal a = eval(c, n->a);
        return jv_truth(a) == (n->kind == JN_OR) ? a : eval(c, n->b);
    }
    case JN_COMPARE: return eval_compare(c, n);
    case JN_COND:
        if (jv_truth(eval(c, n->a)))
            return eval(c, n->b);
        return n->c ? eval(c, n->c) : jv_undef("the inline if expression's condition was false and it has no else");
    default: return eval_items(c, n);
    }
}

// ---------------------------------------------------------------------------------------------
// Statements

static void put_piece(JCtx *c, JVal v) {
    jv_write_str(c->out, v);
    if (c->out != &c->top)
        return;
    JinjaOutput *o = c->result;
    if (o->npieces == o->pieces_cap) {
        o->pieces_cap = o->pieces_cap ? 2 * o->pieces_cap : 64;
        o->piece_end = xrealloc(o->piece_end, o->pieces_cap * sizeof *o->piece_end);
    }
    o->piece_end[o->npieces++] = c->top.n;
}

// The items a for loop walks: a list's, a dict's keys, a string's characters; Undefined
// has none.
static const JList *iter_items(JCtx *c, const JNode *n, JVal v) {
    static const JList empty = {0, NULL, false};
    if (v.k == JV_LIST)
        return v.l;
    if (v.k == JV_UNDEF)
        return &empty;
    if (v.k == JV_DICT) {
        JVal l = jv_list(&c->arena, v.d->n);
        memcpy(l.l->v, v.d->key, v.d->n * sizeof(JVal));
        return l.l;
    }
    if (v.k != JV_STR)
        jctx_fail(c, n, "'%s' object is not iterable", jv_type_name(v));
    JVal l = jv_list(&c->arena, utf8_len(v.s->s, v.s->n));
    for (size_t i = 0, p = 0; i < l.l->n; i++) {
        uint32_t cp;
        size_t k = utf8_decode(v.s->s + p, v.s->n - p, &cp);
        l.l->v[i] = jv_str(&c->arena, v.s->s + p, k);
        p += k;
    }
    return l.l;
}

// Binds the targets of a for or set to v: one name, or a tuple of them from a sequence of
// as many items.
static void bind(JCtx *c, const JNode *n, JVal v) {
    if (!n->unpack) {
        scope_set(c, n->targets[0], v);
        return;
    }
    const JList *items = iter_items(c, n, v);
    if (items->n != (size_t)n->ntargets)
        jctx_fail(c, n, "%s values to unpack (expected %d, got %zu)", items->n > (size_t)n->ntargets
                  ? "too many" : "not enough", n->ntargets, items->n);
    for (int i = 0; i < n->ntargets; i++)
        scope_set(c, n->targets[i], items->v[i]);
}

static void exec_for(JCtx *c, const JNode *n) {
    const JList *items = iter_items(c, n, eval(c, n->a));
    if (n->b) {   // for x in xs if cond: the loop sees only the items that pass
        JVal kept = jv_list(&c->arena, items->n);
        size_t k = 0;
        for (size_t i = 0; i < items->n; i++) {
            scope_push(c);
            bind(c, n, items->v[i]);
            if (jv_truth(eval(c, n->b)))
                kept.l->v[k++] = items->v[i];
            c->nscope--;
        }
        kept.l->n = k;
        items = kept.l;
    }
    JLoop *loop = jarena_alloc(&c->arena, sizeof *loop);
    loop->items = items;
    for (loop->at = 0; loop->at < items->n; loop->at++) {
        jctx_step(c, n);
        scope_push(c);
        bind(c, n, items->v[loop->at]);
        jdict_set(&c->arena, c->scope[c->nscope - 1], (JVal){.k = JV_STR, .s = c->loop_name},
                  (JVal){.k = JV_LOOP, .loop = loop});
        exec(c, &n->body);
        c->nscope--;
        int ctl = c->ctl;
        c->ctl = CTL_NONE;
        if (ctl == CTL_BREAK)
            break;
    }
    if (items->n == 0)
        exec(c, &n->body2);
}

static void exec_set(JCtx *c, const JNode *n) {
    JVal v;
    if (n->b) {
        v = eval(c, n->b);
    } else {
        JBuf capture = {.arena = &c->arena, .err = &c->err}, *saved = c->out;
        c->out = &capture;
        exec(c, &n->body);
        c->out = saved;
        v = jbuf_value(&capture);
    }
    if (!n->a) {
        bind(c, n, v);
        return;
    }
    JVal ns = eval(c, n->a);
    if (ns.k != JV_NS)
        jctx_fail(c, n, "cannot assign attribute on non-namespace object ('%s')", jv_type_name(ns));
    if (n->name[0] == '_')
        jctx_fail(c, n, "a namespace's attribute may not start with '_' ('%s')", n->name);
    jdict_set(&c->arena, ns.d, jv_str(&c->arena, n->name, strlen(n->name)), v);
}

static void exec_node(JCtx *c, const JNode *n) {
    switch (n->kind) {
    case JN_DATA: put_piece(c, n->v); return;
    case JN_OUTPUT: put_piece(c, eval(c, n->a)); return;
    case JN_IF: exec(c, jv_truth(eval(c, n->a)) ? &n->body : &n->body2); return;
    case JN_FOR: exec_for(c, n); return;
    case JN_SET: exec_set(c, n); return;
    case JN_MACRO: scope_set(c, n->name, (JVal){.k = JV_MACRO, .macro = n}); return;
    case JN_BREAK: c->ctl = CTL_BREAK; return;
    case JN_CONTINUE: c->ctl = CTL_CONTINUE; return;
    case JN_BLOCK: exec(c, &n->body); return;
    default: jctx_fail(c, n, "not a statement");
    }
}

static void exec(JCtx *c, const JNodes *body) {
    if (body->n)
        deeper(c, body->at[0]);
    for (int i = 0; i < body->n && c->ctl == CTL_NONE; i++)
        exec_node(c, body->at[i]);
    c->depth -= body->n > 0;
}

// ---------------------------------------------------------------------------------------------
// The entry points

// The variables of a render: the globals (raise_exception, namespace, range, ...), then the
// given ones over them.
static void set_vars(JCtx *c, json_t *vars) {
    static const char *const globals[] = {"raise_exception", "strftime_now", "namespace", "range", "dict"};
    c->vars = jdict_new(&c->arena);
    for (size_t k = 0; k < sizeof globals / sizeof globals[0]; k++)
        jdict_set(&c->arena, c->vars, jv_str(&c->arena, globals[k], strlen(globals[k])),
                  (JVal){.k = JV_FUNC, .fn = jlib_global(globals[k])});
    const char *key;
    json_t *v;
    json_object_foreach(vars, key, v)
        jdict_set(&c->arena, c->vars, jv_str(&c->arena, key, strlen(key)), jv_from_json(&c->arena, v));
}

static int render_guarded(JCtx *c, const JinjaTemplate *t, json_t *vars) {
    if (setjmp(c->err.jb))
        return -1;
    set_vars(c, vars);
    c->loop_name = jstr_new(&c->arena, "loop", 4);
    scope_push(c);
    jbuf_put(&c->top, "", 0);
    exec(c, &t->body);
    return 0;
}

int jinja_render(const JinjaTemplate *t, json_t *vars, JinjaOutput *out, char *err, size_t errlen) {
    JCtx *c = xcalloc(1, sizeof *c);
    c->err.name = t->name;
    c->arena.err = &c->err;
    c->top = (JBuf){.p = out->text, .cap = out->cap, .err = &c->err};
    c->out = &c->top;
    c->result = out;
    out->npieces = 0;
    int rc = render_guarded(c, t, vars);
    if (rc != 0)
        snprintf(err, errlen, "%s", c->err.msg);
    out->text = c->top.p, out->len = rc ? 0 : c->top.n, out->cap = c->top.cap;
    jarena_free(&c->arena);
    free(c);
    return rc;
}

void jinja_output_free(JinjaOutput *out) {
    free(out->text), free(out->piece_end);
    memset(out, 0, sizeof *out);
}
