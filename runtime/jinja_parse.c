// jinja_parse.c — a template's text to its syntax tree: the lexer applies whitespace control
// as jinja2's does under transformers' settings (trim_blocks: the newline after a block or
// comment tag goes; lstrip_blocks: the blanks before one on its line go; `-` strips all
// white space on its side, `+` keeps it), then a recursive-descent parser with jinja2's
// operator precedence builds JNodes in the template's arena.
#include "jinja_int.h"
#include "xalloc.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum TokKind {
    TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STR, TK_INT, TK_FLOAT, TK_OP, TK_EOF,
} TokKind;

// A token: op is a T_ code or a punctuation character; s/n the text of a name, the decoded
// bytes of a string or data.
typedef struct Tok {
    TokKind kind;
    int op;
    int line, col;
    const char *s;
    size_t n;
    int64_t i;
    double f;
} Tok;

typedef struct Lex {
    JErr *e;
    JArena *a;
    const char *src;
    size_t n, pos;
    int line;
    size_t line_at;           // where the current line starts
    bool line_starting;       // the last tag ended a line (lstrip_blocks applies to the next)
    Tok *tok;
    size_t ntok, cap;
} Lex;

// ---------------------------------------------------------------------------------------------
// The lexer

static void advance(Lex *L, size_t to) {
    for (; L->pos < to; L->pos++)
        if (L->src[L->pos] == '\n')
            L->line++, L->line_at = L->pos + 1;
}

static int col_at(const Lex *L, size_t pos) { return (int)(pos - L->line_at) + 1; }

static Tok *push(Lex *L, TokKind kind, size_t at) {
    if (L->ntok == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 256;
        Tok *t = jarena_alloc(L->a, cap * sizeof *t);
        if (L->ntok)
            memcpy(t, L->tok, L->ntok * sizeof *t);
        L->tok = t, L->cap = cap;
    }
    Tok *t = &L->tok[L->ntok++];
    memset(t, 0, sizeof *t);
    t->kind = kind, t->line = L->line, t->col = col_at(L, at);
    return t;
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// The template's text up to the tag at `tag` (or the end), trimmed as the tag asks: `-`
// strips all white space before it; a block or comment tag without `+` strips the blanks
// before it on its line, when nothing else is there (lstrip_blocks).
static void lex_data(Lex *L, size_t tag) {
    const char *s = L->src + L->pos;
    size_t n = tag - L->pos;
    char kind = tag < L->n ? L->src[tag + 1] : 0, sign = tag + 2 < L->n ? L->src[tag + 2] : 0;
    if (kind && sign == '-') {
        while (n && blank(s[n - 1]))
            n--;
    } else if (kind && kind != '{' && sign != '+') {
        size_t l = n;
        while (l && s[l - 1] != '\n')
            l--;
        bool ws = l < n;
        for (size_t k = l; k < n && ws; k++)
            ws = blank(s[k]);
        if (ws && (l > 0 || L->line_starting))
            n = l;
    }
    if (n) {
        Tok *t = push(L, TK_DATA, L->pos);
        t->s = s, t->n = n;
    }
    advance(L, tag);
}

// After a tag's end at L->pos: `-` strips the white space after it; a block or comment tag
// without `+` takes the newline right after it (trim_blocks).
static void after_tag(Lex *L, char sign, bool block) {
    size_t p = L->pos;
    if (sign == '-')
        while (p < L->n && blank(L->src[p]))
            p++;
    else if (block && sign != '+' && p < L->n && L->src[p] == '\n')
        p++;
    L->line_starting = p > 0 && L->src[p - 1] == '\n';
    advance(L, p);
}

static void lex_comment(Lex *L) {
    size_t open = L->pos;
    const char *end = L->pos + 2 <= L->n ? strstr(L->src + L->pos + 2, "#}") : NULL;
    if (!end)
        jerr_fail(L->e, L->line, col_at(L, open), "a comment ({#) is not closed (#})");
    size_t at = (size_t)(end - L->src);
    char sign = at > open + 2 ? L->src[at - 1] : 0;
    advance(L, at + 2);
    after_tag(L, sign, true);
}

// Whether a {% raw %} tag starts at p; *end: just after it.
static bool raw_tag(const Lex *L, size_t p, const char *word, size_t *end, char *sign) {
    if (p + 2 > L->n || L->src[p] != '{' || L->src[p + 1] != '%')
        return false;
    p += 2;
    if (p < L->n && (L->src[p] == '-' || L->src[p] == '+'))
        p++;
    while (p < L->n && blank(L->src[p]))
        p++;
    size_t w = strlen(word);
    if (L->n - p < w || memcmp(L->src + p, word, w) != 0)
        return false;
    p += w;
    while (p < L->n && blank(L->src[p]))
        p++;
    *sign = p < L->n && (L->src[p] == '-' || L->src[p] == '+') ? L->src[p++] : 0;
    if (L->n - p < 2 || L->src[p] != '%' || L->src[p + 1] != '}')
        return false;
    *end = p + 2;
    return true;
}

static void lex_raw(Lex *L, size_t open_end, char sign) {
    int line = L->line, col = col_at(L, L->pos);
    advance(L, open_end);
    if (sign == '-')
        after_tag(L, '-', false);
    size_t p = L->pos, end = 0;
    char esign = 0;
    while (p < L->n && !raw_tag(L, p, "endraw", &end, &esign))
        p++;
    if (p >= L->n)
        jerr_fail(L->e, line, col, "{%% raw %%} is not closed ({%% endraw %%})");
    size_t n = p - L->pos;
    if (p + 2 < L->n && L->src[p + 2] == '-')
        while (n && blank(L->src[L->pos + n - 1]))
            n--;
    if (n) {
        Tok *t = push(L, TK_DATA, L->pos);
        t->s = L->src + L->pos, t->n = n;
    }
    advance(L, end);
    after_tag(L, esign, true);
}

static int hex_digits(JErr *e, int line, int col, const char *s, size_t n, int count, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < count; k++) {
        if ((size_t)k >= n || !isxdigit((unsigned char)s[k]))
            jerr_fail(e, line, col, "a string's \\x, \\u or \\U escape needs %d hex digits", count);
        v = v * 16 + (uint32_t)(isdigit((unsigned char)s[k]) ? s[k] - '0' : (tolower((unsigned char)s[k]) - 'a' + 10));
    }
    *out = v;
    return count;
}

static size_t put_utf8(char *o, uint32_t c) {
    if (c < 0x80)
        return o[0] = (char)c, 1;
    if (c < 0x800)
        return o[0] = (char)(0xc0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3f)), 2;
    if (c < 0x10000)
        return o[0] = (char)(0xe0 | c >> 12), o[1] = (char)(0x80 | (c >> 6 & 0x3f)), o[2] = (char)(0x80 | (c & 0x3f)), 3;
    return o[0] = (char)(0xf0 | c >> 18), o[1] = (char)(0x80 | (c >> 12 & 0x3f)),
           o[2] = (char)(0x80 | (c >> 6 & 0x3f)), o[3] = (char)(0x80 | (c & 0x3f)), 4;
}

// One escape of a string literal at s (after its backslash), decoded into o as Python's
// unicode-escape decodes it; an unknown escape keeps its backslash. Bytes of s used.
static size_t unescape(Lex *L, int line, int col, const char *s, size_t n, char *o, size_t *no) {
    static const char from[] = "\\'\"abfnrtv", to[] = "\\'\"\a\b\f\n\r\t\v";
    const char *k = n ? strchr(from, s[0]) : NULL;
    uint32_t c;
    if (n && s[0] && k) {
        o[(*no)++] = to[k - from];
        return 1;
    }
    if (n && s[0] == '\n')
        return 1;
    if (n && s[0] >= '0' && s[0] <= '7') {
        size_t d = 0;
        for (c = 0; d < 3 && d < n && s[d] >= '0' && s[d] <= '7'; d++)
            c = c * 8 + (uint32_t)(s[d] - '0');
        *no += put_utf8(o + *no, c);
        return d;
    }
    if (n && (s[0] == 'x' || s[0] == 'u' || s[0] == 'U')) {
        int d = hex_digits(L->e, line, col, s + 1, n - 1, s[0] == 'x' ? 2 : s[0] == 'u' ? 4 : 8, &c);
        if (c > 0x10ffff)
            jerr_fail(L->e, line, col, "a string's \\U escape names no character");
        *no += put_utf8(o + *no, c);
        return (size_t)d + 1;
    }
    o[(*no)++] = '\\';
    return 0;
}

static void lex_string(Lex *L, Tok *t) {
    char q = L->src[L->pos];
    size_t p = L->pos + 1;
    while (p < L->n && L->src[p] != q)
        p += L->src[p] == '\\' && p + 1 < L->n ? 2 : 1;
    if (p >= L->n)
        jerr_fail(L->e, t->line, t->col, "a string is not closed (%c)", q);
    const char *s = L->src + L->pos + 1;
    size_t n = p - L->pos - 1, no = 0;
    char *o = jarena_alloc(L->a, n + 1);
    for (size_t i = 0; i < n;) {
        if (s[i] == '\\' && i + 1 < n)
            i += 1 + unescape(L, t->line, t->col, s + i + 1, n - i - 1, o, &no);
        else
            o[no++] = s[i++];
    }
    t->kind = TK_STR, t->s = o, t->n = no;
    advance(L, p + 1);
}

static void lex_number(Lex *L, Tok *t) {
    size_t p = L->pos;
    bool flt = false;
    while (p < L->n && (isdigit((unsigned char)L->src[p]) || L->src[p] == '_'))
        p++;
    if (p + 1 < L->n && L->src[p] == '.' && isdigit((unsigned char)L->src[p + 1])) {
        flt = true;
        for (p++; p < L->n && (isdigit((unsigned char)L->src[p]) || L->src[p] == '_');)
            p++;
    }
    if (p < L->n && (L->src[p] == 'e' || L->src[p] == 'E')) {
        size_t q = p + 1 + (p + 1 < L->n && (L->src[p + 1] == '+' || L->src[p + 1] == '-'));
        if (q < L->n && isdigit((unsigned char)L->src[q])) {
            flt = true;
            for (p = q; p < L->n && isdigit((unsigned char)L->src[p]);)
                p++;
        }
    }
    char buf[64];
    size_t k = 0;
    for (size_t i = L->pos; i < p && k < sizeof buf - 1; i++)
        if (L->src[i] != '_')
            buf[k++] = L->src[i];
    buf[k] = '\0';
    errno = 0;
    if (flt)
        t->kind = TK_FLOAT, t->f = strtod(buf, NULL);
    else
        t->kind = TK_INT, t->i = strtoll(buf, NULL, 10);
    if (errno || p - L->pos >= sizeof buf)
        jerr_fail(L->e, t->line, t->col, "the number %.*s is too large", (int)(p - L->pos), L->src + L->pos);
    advance(L, p);
}

// The operators, longest first; each a T_ code or its own character.
static const struct { const char *text; int op; } OPS[] = {
    {"//", T_FLOORDIV}, {"**", T_POW}, {"==", T_EQ}, {"!=", T_NE}, {"<=", T_LE}, {">=", T_GE},
    {"+", T_ADD}, {"-", T_SUB}, {"*", T_MUL}, {"/", T_DIV}, {"%", T_MOD}, {"~", T_TILDE},
    {"<", T_LT}, {">", T_GT}, {"(", '('}, {")", ')'}, {"[", '['}, {"]", ']'}, {"{", '{'}, {"}", '}'},
    {",", ','}, {".", '.'}, {":", ':'}, {"|", '|'}, {"=", '='},
};

static void lex_token(Lex *L, int *depth) {
    Tok *t = push(L, TK_OP, L->pos);
    char c = L->src[L->pos];
    if (isalpha((unsigned char)c) || c == '_' || (unsigned char)c >= 0x80) {
        size_t p = L->pos;
        while (p < L->n && (isalnum((unsigned char)L->src[p]) || L->src[p] == '_' || (unsigned char)L->src[p] >= 0x80))
            p++;
        t->kind = TK_NAME, t->s = jstr_new(L->a, L->src + L->pos, p - L->pos)->s, t->n = p - L->pos;
        advance(L, p);
        return;
    }
    if (isdigit((unsigned char)c))
        return lex_number(L, t);
    if (c == '\'' || c == '"')
        return lex_string(L, t);
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
        size_t w = strlen(OPS[k].text);
        if (L->n - L->pos >= w && memcmp(L->src + L->pos, OPS[k].text, w) == 0) {
            t->op = OPS[k].op;
            *depth += (c == '(' || c == '[' || c == '{') - (c == ')' || c == ']' || c == '}');
            advance(L, L->pos + w);
            return;
        }
    }
    jerr_fail(L->e, t->line, t->col, "unexpected character '%c' in a tag", c);
}

// Whether the tag of kind var (else block) ends at p; *sign: '-', '+' or 0, *len its bytes.
static bool tag_end(const Lex *L, size_t p, bool var, char *sign, size_t *len) {
    const char *s = L->src + p, *close = var ? "}}" : "%}";
    size_t left = L->n - p;
    *sign = 0;
    if (left >= 3 && (s[0] == '-' || (!var && s[0] == '+')) && s[1] == close[0] && s[2] == close[1])
        return *sign = s[0], *len = 3, true;
    return *len = 2, left >= 2 && s[0] == close[0] && s[1] == close[1];
}

// A {{ }} or {% %} tag from L->pos: its begin, its tokens, its end.
static void lex_tag(Lex *L, bool var) {
    Tok *b = push(L, var ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, L->pos);
    int line = b->line, col = b->col, depth = 0;
    size_t p = L->pos + 2;
    if (p < L->n && (L->src[p] == '-' || (!var && L->src[p] == '+')))
        p++;
    advance(L, p);
    for (;;) {
        while (L->pos < L->n && blank(L->src[L->pos]))
            advance(L, L->pos + 1);
        if (L->pos >= L->n)
            jerr_fail(L->e, line, col, "the tag opened here is not closed (%s)", var ? "}}" : "%}");
        char sign;
        size_t len;
        if (depth <= 0 && tag_end(L, L->pos, var, &sign, &len)) {
            push(L, var ? TK_VAR_END : TK_BLOCK_END, L->pos);
            advance(L, L->pos + len);
            after_tag(L, sign, !var);
            return;
        }
        lex_token(L, &depth);
    }
}

static void lex_all(Lex *L) {
    L->line_starting = true;
    while (L->pos < L->n) {
        size_t t = L->pos;
        while (t + 1 < L->n && !(L->src[t] == '{' && (L->src[t + 1] == '{' || L->src[t + 1] == '%' || L->src[t + 1] == '#')))
            t++;
        if (t + 1 >= L->n)
            t = L->n;
        lex_data(L, t);
        if (t >= L->n)
            break;
        size_t end;
        char sign;
        if (L->src[t + 1] == '#')
            lex_comment(L);
        else if (raw_tag(L, t, "raw", &end, &sign))
            lex_raw(L, end, sign);
        else
            lex_tag(L, L->src[t + 1] == '{');
    }
    push(L, TK_EOF, L->pos);
}

// ---------------------------------------------------------------------------------------------
// The parser

typedef struct Parser {
    JErr *e;
    JArena *a;
    Tok *t;
    size_t i;
    int depth, loops;
} Parser;

static Tok *peek(Parser *P) { return &P->t[P->i]; }
static Tok *peek2(Parser *P) { return P->t[P->i].kind == TK_EOF ? &P->t[P->i] : &P->t[P->i + 1]; }
static Tok *next(Parser *P) { return P->t[P->i].kind == TK_EOF ? &P->t[P->i] : &P->t[P->i++]; }
static bool is_op(const Tok *t, int op) { return t->kind == TK_OP && t->op == op; }
static bool is_name(const Tok *t, const char *s) {
    return t->kind == TK_NAME && t->n == strlen(s) && memcmp(t->s, s, t->n) == 0;
}

static const char *tok_text(Parser *P, const Tok *t) {
    static const char *const kinds[] = {"text", "{{", "}}", "{%", "%}", "", "a string", "a number", "a number", "",
                                        "the end of the template"};
    if (t->kind == TK_NAME)
        return t->s;
    if (t->kind != TK_OP)
        return kinds[t->kind];
    for (size_t k = 0; k < sizeof OPS / sizeof OPS[0]; k++)
        if (OPS[k].op == t->op)
            return OPS[k].text;
    return jstr_new(P->a, "?", 1)->s;
}

_Noreturn static void unexpected(Parser *P, const Tok *t, const char *want) {
    jerr_fail(P->e, t->line, t->col, "expected %s, not '%s'", want, tok_text(P, t));
}

static void expect_op(Parser *P, int op, const char *want) {
    if (!is_op(peek(P), op))
        unexpected(P, peek(P), want);
    next(P);
}

static void expect_end(Parser *P) {
    if (peek(P)->kind != TK_BLOCK_END)
        unexpected(P, peek(P), "'%}'");
    next(P);
}

static const char *expect_name(Parser *P, const char *want) {
    if (peek(P)->kind != TK_NAME)
        unexpected(P, peek(P), want);
    return next(P)->s;
}

static JNode *node(Parser *P, JNodeKind kind, const Tok *at) {
    JNode *n = jarena_alloc(P->a, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = kind, n->line = at->line, n->col = at->col;
    return n;
}

static void nodes_push(JArena *a, JNodes *l, JNode *n) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        JNode **at = jarena_alloc(a, (size_t)cap * sizeof *at);
        if (l->n)
            memcpy(at, l->at, (size_t)l->n * sizeof *at);
        l->at = at, l->cap = cap;
    }
    l->at[l->n++] = n;
}

static void deeper(Parser *P, const Tok *t) {
    if (++P->depth > JINJA_MAX_DEPTH)
        jerr_fail(P->e, t->line, t->col, "the template nests deeper than %d", JINJA_MAX_DEPTH);
}

static JNode *parse_expr(Parser *P);
static JNode *parse_unary(Parser *P, bool with_filter);

// args = "(" [arg ("," arg)*] [","] ")"   arg = expr | NAME "=" expr
static void parse_call_args(Parser *P, JNode *n) {
    expect_op(P, '(', "'('");
    const char *kw[64];
    while (!is_op(peek(P), ')')) {
        if (peek(P)->kind == TK_NAME && is_op(peek2(P), '=')) {
            if (n->nkw == 64)
                jerr_fail(P->e, peek(P)->line, peek(P)->col, "more than 64 keyword arguments");
            kw[n->nkw++] = next(P)->s;
            next(P);
        } else if (n->nkw) {
            unexpected(P, peek(P), "a keyword argument (after the first, all are)");
        }
        nodes_push(P->a, &n->args, parse_expr(P));
        if (!is_op(peek(P), ','))
            break;
        next(P);
    }
    expect_op(P, ')', "',' or ')'");
    n->kw = jarena_alloc(P->a, (size_t)(n->nkw ? n->nkw : 1) * sizeof *n->kw);
    memcpy(n->kw, kw, (size_t)n->nkw * sizeof *kw);
}

// The items of a list, tuple or dict up to `close` (already past the opening bracket).
static void parse_items(Parser *P, JNode *n, int close, bool dict) {
    while (!is_op(peek(P), close)) {
        nodes_push(P->a, &n->args, parse_expr(P));
        if (dict) {
            expect_op(P, ':', "':'");
            nodes_push(P->a, &n->args, parse_expr(P));
        }
        if (!is_op(peek(P), ','))
            break;
        next(P);
    }
    expect_op(P, close, close == ']' ? "',' or ']'" : close == '}' ? "',' or '}'" : "',' or ')'");
}

// primary = NAME | STRING+ | INT | FLOAT | "(" [expr ("," expr)*] ")" | "[" items "]" | "{" pairs "}"
static JNode *parse_primary(Parser *P) {
    Tok *t = next(P);
    JNode *n;
    if (t->kind == TK_NAME) {
        static const char *const consts[] = {"true", "True", "false", "False", "none", "None"};
        for (int k = 0; k < 6; k++)
            if (is_name(t, consts[k])) {
                n = node(P, JN_CONST, t);
                n->v = k < 4 ? jv_bool(k < 2) : jv_none();
                return n;
            }
        n = node(P, JN_NAME, t);
        n->name = t->s;
        return n;
    }
    if (t->kind == TK_STR) {
        n = node(P, JN_CONST, t);
        JBuf b = {.arena = P->a, .err = P->e};
        jbuf_put(&b, t->s, t->n);
        while (peek(P)->kind == TK_STR)   // adjacent strings join, as in Python
            t = next(P), jbuf_put(&b, t->s, t->n);
        n->v = jbuf_value(&b);
        return n;
    }
    if (t->kind == TK_INT || t->kind == TK_FLOAT) {
        n = node(P, JN_CONST, t);
        n->v = t->kind == TK_INT ? jv_int(t->i) : jv_float(t->f);
        return n;
    }
    if (is_op(t, '(')) {
        if (is_op(peek(P), ')')) {
            next(P);
            return node(P, JN_TUPLE, t);
        }
        JNode *e = parse_expr(P);
        if (!is_op(peek(P), ','))
            return expect_op(P, ')', "')'"), e;
        n = node(P, JN_TUPLE, t);
        nodes_push(P->a, &n->args, e);
        next(P);
        parse_items(P, n, ')', false);
        return n;
    }
    if (is_op(t, '[') || is_op(t, '{')) {
        n = node(P, t->op == '[' ? JN_LIST : JN_DICT, t);
        parse_items(P, n, t->op == '[' ? ']' : '}', t->op == '{');
        return n;
    }
    unexpected(P, t, "an expression");
}

// subscript = "[" expr "]" | "[" [expr] ":" [expr] [":" [expr]] "]"
static JNode *parse_subscript(Parser *P, JNode *obj, const Tok *at) {
    JNode *parts[3] = {NULL, NULL, NULL};
    int k = 0;
    while (!is_op(peek(P), ']')) {
        if (is_op(peek(P), ':')) {
            if (++k > 2)
                unexpected(P, peek(P), "']'");
            next(P);
            continue;
        }
        if (parts[k])
            unexpected(P, peek(P), "':' or ']'");
        parts[k] = parse_expr(P);
    }
    next(P);
    JNode *n = node(P, k ? JN_SLICE : JN_ITEM, at);
    n->a = obj, n->b = parts[0], n->c = parts[1], n->d = parts[2];
    if (!k && !parts[0])
        unexpected(P, at, "a subscript");
    return n;
}

// postfix = primary ("." NAME | "." INT | subscript | args)*
static JNode *parse_postfix(Parser *P, JNode *n) {
    for (;;) {
        Tok *t = peek(P);
        if (is_op(t, '.')) {
            next(P);
            Tok *f = next(P);
            JNode *m = node(P, f->kind == TK_INT ? JN_ITEM : JN_ATTR, t);
            if (f->kind == TK_INT) {
                m->b = node(P, JN_CONST, f);
                m->b->v = jv_int(f->i);
            } else if (f->kind == TK_NAME) {
                m->name = f->s;
            } else {
                unexpected(P, f, "an attribute's name");
            }
            m->a = n;
            n = m;
        } else if (is_op(t, '[')) {
            next(P);
            n = parse_subscript(P, n, t);
        } else if (is_op(t, '(')) {
            JNode *m = node(P, JN_CALL, t);
            m->a = n;
            parse_call_args(P, m);
            n = m;
        } else {
            return n;
        }
    }
}

// A test's argument without parentheses: `x is divisibleby 3`, `x is equalto y`.
static bool starts_test_arg(const Tok *t) {
    if (t->kind == TK_NAME)
        return !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and");
    return t->kind == TK_STR || t->kind == TK_INT || t->kind == TK_FLOAT || is_op(t, '(') || is_op(t, '[') ||
           is_op(t, '{');
}

// filtered = postfix ("|" NAME [args] | "is" ["not"] NAME [args | primary])*
static JNode *parse_filters(Parser *P, JNode *n) {
    for (;;) {
        Tok *t = peek(P);
        bool filter = is_op(t, '|');
        if (!filter && !is_name(t, "is"))
            return n;
        next(P);
        JNode *m = node(P, filter ? JN_FILTER : JN_TEST, t);
        if (!filter && is_name(peek(P), "not"))
            next(P), m->op = 1;
        Tok *nt = peek(P);
        m->name = expect_name(P, filter ? "a filter's name" : "a test's name");
        m->fn = filter ? jlib_filter(m->name) : jlib_test(m->name);
        if (m->fn < 0)
            jerr_fail(P->e, nt->line, nt->col, "no %s named '%s'", filter ? "filter" : "test", m->name);
        m->a = n;
        if (is_op(peek(P), '('))
            parse_call_args(P, m);
        else if (!filter && starts_test_arg(peek(P)))
            nodes_push(P->a, &m->args, parse_postfix(P, parse_primary(P)));
        n = m;
    }
}

// unary = ("-" | "+") unary | primary postfix [filters]
static JNode *parse_unary(Parser *P, bool with_filter) {
    Tok *t = peek(P);
    deeper(P, t);
    JNode *n;
    if (is_op(t, T_SUB) || is_op(t, T_ADD)) {
        next(P);
        n = node(P, t->op == T_SUB ? JN_NEG : JN_POS, t);
        n->a = parse_unary(P, false);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter)
        n = parse_filters(P, n);
    P->depth--;
    return n;
}

static JNode *binary(Parser *P, const Tok *t, JNodeKind kind, int op, JNode *a, JNode *b) {
    JNode *n = node(P, kind, t);
    n->op = op, n->a = a, n->b = b;
    return n;
}

// pow = unary ("**" unary)*
static JNode *parse_pow(Parser *P) {
    JNode *n = parse_unary(P, true);
    while (is_op(peek(P), T_POW)) {
        Tok *t = next(P);
        n = binary(P, t, JN_BINARY, T_POW, n, parse_unary(P, true));
    }
    return n;
}

// math2 = pow (("*" | "/" | "//" | "%") pow)*
static JNode *parse_math2(Parser *P) {
    JNode *n = parse_pow(P);
    for (Tok *t; (t = peek(P))->kind == TK_OP && (t->op == T_MUL || t->op == T_DIV || t->op == T_FLOORDIV ||
                                                 t->op == T_MOD);) {
        next(P);
        n = binary(P, t, JN_BINARY, t->op, n, parse_pow(P));
    }
    return n;
}

// concat = math2 ("~" math2)*
static JNode *parse_concat(Parser *P) {
    JNode *n = parse_math2(P);
    while (is_op(peek(P), T_TILDE)) {
        Tok *t = next(P);
        n = binary(P, t, JN_BINARY, T_TILDE, n, parse_math2(P));
    }
    return n;
}

// math1 = concat (("+" | "-") concat)*
static JNode *parse_math1(Parser *P) {
    JNode *n = parse_concat(P);
    for (Tok *t; (t = peek(P))->kind == TK_OP && (t->op == T_ADD || t->op == T_SUB);) {
        next(P);
        n = binary(P, t, JN_BINARY, t->op, n, parse_concat(P));
    }
    return n;
}

// compare = math1 (("==" | "!=" | "<" | "<=" | ">" | ">=" | "in" | "not" "in") math1)*;
// a chain a < b < c is (a < b) and (b < c).
static JNode *parse_compare(Parser *P) {
    JNode *left = parse_math1(P), *chain = NULL;
    for (;;) {
        Tok *t = peek(P);
        int op = 0;
        if (t->kind == TK_OP && t->op >= T_EQ && t->op <= T_GE)
            op = t->op;
        else if (is_name(t, "in"))
            op = T_IN;
        else if (is_name(t, "not") && is_name(peek2(P), "in"))
            op = T_NOTIN, next(P);
        if (!op)
            return chain ? chain : left;
        next(P);
        JNode *right = parse_math1(P), *cmp = binary(P, t, JN_COMPARE, op, left, right);
        chain = chain ? binary(P, t, JN_AND, 0, chain, cmp) : cmp;
        left = right;
    }
}

// not = "not" not | compare
static JNode *parse_not(Parser *P) {
    Tok *t = peek(P);
    if (!is_name(t, "not"))
        return parse_compare(P);
    next(P);
    deeper(P, t);
    JNode *n = node(P, JN_NOT, t);
    n->a = parse_not(P);
    P->depth--;
    return n;
}

// and = not ("and" not)*    or = and ("or" and)*
static JNode *parse_and(Parser *P) {
    JNode *n = parse_not(P);
    while (is_name(peek(P), "and")) {
        Tok *t = next(P);
        n = binary(P, t, JN_AND, 0, n, parse_not(P));
    }
    return n;
}

static JNode *parse_or(Parser *P) {
    JNode *n = parse_and(P);
    while (is_name(peek(P), "or")) {
        Tok *t = next(P);
        n = binary(P, t, JN_OR, 0, n, parse_and(P));
    }
    return n;
}

// expr = or ["if" or ["else" expr]]
static JNode *parse_expr(Parser *P) {
    JNode *n = parse_or(P);
    while (is_name(peek(P), "if")) {
        Tok *t = next(P);
        JNode *c = node(P, JN_COND, t);
        c->b = n;
        c->a = parse_or(P);
        if (is_name(peek(P), "else")) {
            next(P);
            deeper(P, t);
            c->c = parse_expr(P);
            P->depth--;
        }
        n = c;
    }
    return n;
}

// tuple = expr ("," expr)*: a bare tuple where a statement allows one
static JNode *parse_tuple(Parser *P) {
    Tok *t = peek(P);
    JNode *n = parse_expr(P);
    if (!is_op(peek(P), ','))
        return n;
    JNode *tu = node(P, JN_TUPLE, t);
    nodes_push(P->a, &tu->args, n);
    while (is_op(peek(P), ',')) {
        next(P);
        if (peek(P)->kind == TK_VAR_END || peek(P)->kind == TK_BLOCK_END)
            break;
        nodes_push(P->a, &tu->args, parse_expr(P));
    }
    return tu;
}

// ---------------------------------------------------------------------------------------------
// Statements

static int parse_body(Parser *P, JNodes *body, const char *const *ends, const Tok *open);

// targets = NAME ("," NAME)* | "(" NAME ("," NAME)* ")"
static void parse_targets(Parser *P, JNode *n) {
    const char *names[32];
    bool paren = is_op(peek(P), '(');
    if (paren)
        next(P);
    do {
        if (n->ntargets == 32)
            jerr_fail(P->e, peek(P)->line, peek(P)->col, "more than 32 names to unpack");
        names[n->ntargets++] = expect_name(P, "a name");
        if (!is_op(peek(P), ','))
            break;
        next(P);
        n->unpack = true;
    } while (peek(P)->kind == TK_NAME);
    if (paren)
        expect_op(P, ')', "')'"), n->unpack = true;
    n->targets = jarena_alloc(P->a, (size_t)n->ntargets * sizeof *n->targets);
    memcpy(n->targets, names, (size_t)n->ntargets * sizeof *names);
}

static const char *const ENDS_IF[] = {"elif", "else", "endif", NULL};
static const char *const ENDS_ENDIF[] = {"endif", NULL};

// if = "if" expr "%}" body ("elif" expr "%}" body)* ["else" "%}" body] "endif"
static JNode *parse_if(Parser *P, const Tok *kw) {
    JNode *n = node(P, JN_IF, kw), *cur = n;
    for (;;) {
        cur->a = parse_expr(P);
        expect_end(P);
        int k = parse_body(P, &cur->body, ENDS_IF, kw);
        Tok *t = next(P);
        if (k == 0) {
            JNode *elif = node(P, JN_IF, t);
            nodes_push(P->a, &cur->body2, elif);
            cur = elif;
            continue;
        }
        expect_end(P);
        if (k == 1) {
            parse_body(P, &cur->body2, ENDS_ENDIF, kw);
            next(P);
            expect_end(P);
        }
        return n;
    }
}

static const char *const ENDS_FOR[] = {"else", "endfor", NULL};
static const char *const ENDS_ENDFOR[] = {"endfor", NULL};

// for = "for" targets "in" or ["if" expr] "%}" body ["else" "%}" body] "endfor"
static JNode *parse_for(Parser *P, const Tok *kw) {
    JNode *n = node(P, JN_FOR, kw);
    parse_targets(P, n);
    if (!is_name(peek(P), "in"))
        unexpected(P, peek(P), "'in'");
    next(P);
    n->a = parse_or(P);
    if (is_name(peek(P), "if"))
        next(P), n->b = parse_expr(P);
    if (is_name(peek(P), "recursive"))
        jerr_fail(P->e, peek(P)->line, peek(P)->col, "recursive loops are not supported");
    expect_end(P);
    P->loops++;
    int k = parse_body(P, &n->body, ENDS_FOR, kw);
    P->loops--;
    next(P);
    expect_end(P);
    if (k == 0) {
        parse_body(P, &n->body2, ENDS_ENDFOR, kw);
        next(P);
        expect_end(P);
    }
    return n;
}

static const char *const ENDS_SET[] = {"endset", NULL};

// set = "set" NAME "." NAME "=" tuple | "set" targets "=" tuple | "set" NAME "%}" body "endset"
static JNode *parse_set(Parser *P, const Tok *kw) {
    JNode *n = node(P, JN_SET, kw);
    if (peek(P)->kind == TK_NAME && is_op(peek2(P), '.')) {
        n->a = node(P, JN_NAME, peek(P));
        n->a->name = next(P)->s;
        next(P);
        n->name = expect_name(P, "an attribute's name");
    } else {
        parse_targets(P, n);
    }
    if (is_op(peek(P), '=')) {
        next(P);
        n->b = parse_tuple(P);
        expect_end(P);
        return n;
    }
    if (n->a || n->unpack)
        unexpected(P, peek(P), "'='");
    expect_end(P);
    parse_body(P, &n->body, ENDS_SET, kw);
    next(P);
    expect_end(P);
    return n;
}

static const char *const ENDS_MACRO[] = {"endmacro", NULL};

// macro = "macro" NAME "(" [NAME ["=" expr] ("," NAME ["=" expr])*] ")" "%}" body "endmacro"
static JNode *parse_macro(Parser *P, const Tok *kw) {
    JNode *n = node(P, JN_MACRO, kw);
    n->name = expect_name(P, "the macro's name");
    expect_op(P, '(', "'('");
    const char *names[32];
    while (!is_op(peek(P), ')')) {
        if (n->ntargets == 32)
            jerr_fail(P->e, peek(P)->line, peek(P)->col, "more than 32 parameters");
        names[n->ntargets++] = expect_name(P, "a parameter's name");
        JNode *dflt = NULL;
        if (is_op(peek(P), '='))
            next(P), dflt = parse_expr(P);
        nodes_push(P->a, &n->args, dflt);
        if (!is_op(peek(P), ','))
            break;
        next(P);
    }
    expect_op(P, ')', "',' or ')'");
    n->targets = jarena_alloc(P->a, (size_t)(n->ntargets ? n->ntargets : 1) * sizeof *n->targets);
    memcpy(n->targets, names, (size_t)n->ntargets * sizeof *names);
    expect_end(P);
    int loops = P->loops;
    P->loops = 0;
    parse_body(P, &n->body, ENDS_MACRO, kw);
    P->loops = loops;
    next(P);
    expect_end(P);
    return n;
}

static const char *const ENDS_GENERATION[] = {"endgeneration", NULL};

// A statement, after its "{%" and at its keyword.
static JNode *parse_statement(Parser *P) {
    Tok *kw = next(P);
    if (kw->kind != TK_NAME)
        unexpected(P, kw, "a statement");
    if (is_name(kw, "if"))
        return parse_if(P, kw);
    if (is_name(kw, "for"))
        return parse_for(P, kw);
    if (is_name(kw, "set"))
        return parse_set(P, kw);
    if (is_name(kw, "macro"))
        return parse_macro(P, kw);
    if (is_name(kw, "break") || is_name(kw, "continue")) {
        if (!P->loops)
            jerr_fail(P->e, kw->line, kw->col, "'%s' outside a loop", kw->s);
        expect_end(P);
        return node(P, is_name(kw, "break") ? JN_BREAK : JN_CONTINUE, kw);
    }
    if (is_name(kw, "generation")) {
        JNode *n = node(P, JN_BLOCK, kw);
        expect_end(P);
        parse_body(P, &n->body, ENDS_GENERATION, kw);
        next(P);
        expect_end(P);
        return n;
    }
    jerr_fail(P->e, kw->line, kw->col, "unknown tag '%s' (the tags are if, for, set, macro, break, continue, raw, "
              "generation)", kw->s);
}

// Statements and text until one of the tags `ends` (NULL-terminated; the index of the one
// met is returned, the parser at its name) or, with ends NULL, the end of the template.
// open: the tag whose body this is, for the error when it is not closed.
static int parse_body(Parser *P, JNodes *body, const char *const *ends, const Tok *open) {
    deeper(P, peek(P));
    for (;;) {
        Tok *t = next(P);
        if (t->kind == TK_EOF) {
            if (!ends)
                return P->depth--, -1;
            int last = 0;
            while (ends[last + 1])
                last++;
            jerr_fail(P->e, open->line, open->col, "'{%% %s %%}' is not closed (the template ends before "
                      "{%% %s %%})", open->s, ends[last]);
        }
        if (t->kind == TK_DATA) {
            JNode *n = node(P, JN_DATA, t);
            n->v = jv_str(P->a, t->s, t->n);
            nodes_push(P->a, body, n);
        } else if (t->kind == TK_VAR_BEGIN) {
            JNode *n = node(P, JN_OUTPUT, t);
            n->a = parse_tuple(P);
            if (peek(P)->kind != TK_VAR_END)
                unexpected(P, peek(P), "'}}'");
            next(P);
            nodes_push(P->a, body, n);
        } else if (t->kind == TK_BLOCK_BEGIN) {
            Tok *kw = peek(P);
            for (int k = 0; ends && ends[k]; k++)
                if (is_name(kw, ends[k]))
                    return P->depth--, k;
            if (kw->kind == TK_NAME && kw->n > 3 && (memcmp(kw->s, "end", 3) == 0 || is_name(kw, "elif") ||
                                                   is_name(kw, "else")))
                jerr_fail(P->e, kw->line, kw->col, "'{%% %s %%}' without the tag it would close", kw->s);
            nodes_push(P->a, body, parse_statement(P));
        } else {
            unexpected(P, t, "text, '{{' or '{%'");
        }
    }
}

// The source with jinja2's newlines: \r\n and \r read as \n, and one newline at the end
// dropped (keep_trailing_newline is off).
static char *normalize(JArena *a, const char *src, size_t len, size_t *n) {
    char *s = jarena_alloc(a, len + 1);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            i += i + 1 < len && src[i + 1] == '\n';
        } else {
            s[k++] = src[i];
        }
    }
    if (k && s[k - 1] == '\n')
        k--;
    s[k] = '\0';
    *n = k;
    return s;
}

static void jparse(JinjaTemplate *t, JErr *e, const char *src, size_t len) {
    Lex L = {.e = e, .a = &t->arena, .line = 1};
    L.src = normalize(&t->arena, src, len, &L.n);
    lex_all(&L);
    Parser P = {.e = e, .a = &t->arena, .t = L.tok};
    parse_body(&P, &t->body, NULL, NULL);
}

// The parse, with the jump its errors take back here (no local of the caller lives across it).
static int parse_guarded(JinjaTemplate *t, JErr *e, const char *src, size_t len) {
    if (setjmp(e->jb))
        return -1;
    jparse(t, e, src, len);
    return 0;
}

JinjaTemplate *jinja_parse(const char *name, const char *src, size_t len, char *err, size_t errlen) {
    JinjaTemplate *t = xcalloc(1, sizeof *t);
    JErr *e = xcalloc(1, sizeof *e);
    snprintf(t->name, sizeof t->name, "%s", name);
    e->name = t->name;
    t->arena.err = e;
    int rc = parse_guarded(t, e, src, len);
    if (rc != 0) {
        snprintf(err, errlen, "%s", e->msg);
        jarena_free(&t->arena);
        free(t);
        t = NULL;
    } else {
        t->arena.err = NULL;   // the tree is read-only from here; renders allocate in their own arenas
    }
    free(e);
    return t;
}

void jinja_free(JinjaTemplate *t) {
    if (!t)
        return;
    jarena_free(&t->arena);
    free(t);
}
