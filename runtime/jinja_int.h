// jinja_int.h — what the files of the template engine share (jinja.h is its interface):
// the arena everything of a parse or a render lives in, errors as a jump to the entry point
// with a located message, values, the syntax tree, and each file's exports.
//
//   jinja_value.c  values: from JSON, str()/repr()/tojson, truth, equality, order, UTF-8;
//                  the arena and failing
//   jinja_lib.c    attributes, filters, tests, methods and globals, each a row of a table
//   jinja_parse.c  lexer (whitespace control as jinja2's) and parser: text -> JNode tree
//   jinja_eval.c   the renderer: statements, expressions, scopes, loops, macros
// each using only those above it.
#ifndef FTC_RUNTIME_JINJA_INT_H
#define FTC_RUNTIME_JINJA_INT_H

#include "jinja.h"

#include <setjmp.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

enum {
    JINJA_MAX_DEPTH = 200,               // nesting of the tree and of calls while rendering
    JINJA_MAX_OUTPUT = 64 << 20,         // bytes a render writes
    JINJA_MAX_MEMORY = 256 << 20,        // bytes a parse or a render allocates
    JINJA_MAX_STEPS = 10 * 1000 * 1000,  // loop iterations and calls of a render
    JINJA_MAX_RANGE = 100000,            // items of range(), as jinja2's sandbox
};

// ---------------------------------------------------------------------------------------------
// Errors and memory

// Where a failure goes: jerr_fail formats the message at (line, col) and jumps to jb, set by
// the entry point, which frees the arena and returns the message.
typedef struct JErr {
    jmp_buf jb;
    const char *name;         // the template's name, first in every message
    char msg[512];
} JErr;

_Noreturn void jerr_fail(JErr *e, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

// Bump allocation in chunks, all freed at once; more than JINJA_MAX_MEMORY fails through err.
typedef struct JArena {
    struct JChunk *chunk;
    size_t used_bytes;
    JErr *err;
} JArena;

void *jarena_alloc(JArena *a, size_t n);
void jarena_free(JArena *a);

// ---------------------------------------------------------------------------------------------
// Values

typedef enum JKind {
    JV_UNDEF,   // jinja2's Undefined: .why is the message its misuse gives
    JV_NONE,
    JV_BOOL,    // .b
    JV_INT,     // .i
    JV_FLOAT,   // .f
    JV_STR,     // .s
    JV_LIST,    // .l (tuples too)
    JV_DICT,    // .d
    JV_NS,      // .d: a namespace(), whose attributes `set` may change
    JV_LOOP,    // .loop: the `loop` of a for
    JV_METHOD,  // .m: a method of a value, bound to it
    JV_FUNC,    // .fn: a global function (jinja_lib.c's table)
    JV_MACRO,   // .macro: a {% macro %} node
} JKind;

typedef struct JStr {
    size_t n;                 // bytes, not counting the NUL after them
    char s[];
} JStr;

typedef struct JVal {
    JKind k;
    union {
        bool b;
        int64_t i;
        double f;
        JStr *s;
        struct JList *l;
        struct JDict *d;
        struct JLoop *loop;
        struct JMethod *m;
        int fn;
        const struct JNode *macro;
        const char *why;
    };
} JVal;

typedef struct JList {
    size_t n;
    JVal *v;
    bool tuple;               // written (a, b) by repr()
} JList;

// Keys in insertion order (Python's dicts), looked up linearly: a message has a few.
typedef struct JDict {
    size_t n, cap;
    JVal *key, *val;
} JDict;

typedef struct JLoop {
    const JList *items;
    size_t at;
} JLoop;

typedef struct JMethod {
    JVal self;
    const char *name;
} JMethod;

static inline JVal jv_none(void) { return (JVal){.k = JV_NONE}; }
static inline JVal jv_bool(bool b) { return (JVal){.k = JV_BOOL, .b = b}; }
static inline JVal jv_int(int64_t i) { return (JVal){.k = JV_INT, .i = i}; }
static inline JVal jv_float(double f) { return (JVal){.k = JV_FLOAT, .f = f}; }
static inline JVal jv_undef(const char *why) { return (JVal){.k = JV_UNDEF, .why = why}; }

// A name of the tree (a variable, a target, an attribute) as a string value: the parser makes
// every such name with jstr_new, so its length sits before its text.
static inline JVal jv_name(const char *name) {
    return (JVal){.k = JV_STR, .s = (JStr *)(void *)(name - offsetof(JStr, s))};
}

// jinja_value.c
JStr *jstr_new(JArena *a, const char *s, size_t n);
JVal jv_str(JArena *a, const char *s, size_t n);
JVal jv_list(JArena *a, size_t n);                        // n items, all none
JDict *jdict_new(JArena *a);
JVal *jdict_get(const JDict *d, const char *key, size_t n);   // NULL when absent
void jdict_set(JArena *a, JDict *d, JVal key, JVal val);
JVal jv_from_json(JArena *a, json_t *j);
const char *jv_type_name(JVal v);                         // Python's: 'str', 'dict', ...
bool jv_truth(JVal v);
bool jv_equal(JVal a, JVal b);
int jv_compare(JErr *e, int line, int col, JVal a, JVal b);   // <0, 0, >0, or fails
bool jv_is_number(JVal v);
double jv_to_double(JVal v);

// A growing byte string: in the arena (captures, results) or, for a render's output, on the
// heap (arena NULL). Past JINJA_MAX_OUTPUT it fails through err.
typedef struct JBuf {
    char *p;
    size_t n, cap;
    JArena *arena;
    JErr *err;
} JBuf;

void jbuf_put(JBuf *b, const char *s, size_t n);
void jbuf_putc(JBuf *b, char c);
JVal jbuf_value(JBuf *b);                                 // the bytes as a string value
void jv_write_str(JBuf *b, JVal v);                       // str(v), Undefined as nothing
void jv_write_repr(JBuf *b, JVal v);                      // repr(v)
// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys): indent < 0 is None; item
// and key separators NULL for the defaults. -1 when v holds what JSON cannot.
int jv_write_json(JBuf *b, JVal v, int indent, const char *item_sep, const char *key_sep, bool sort_keys);

// UTF-8 as Python's str sees it: code points.
size_t utf8_len(const char *s, size_t n);                 // code points in s
size_t utf8_offset(const char *s, size_t n, size_t cp);   // the byte where code point cp starts
size_t utf8_decode(const char *s, size_t n, uint32_t *c); // bytes of the code point at s
bool py_isspace(uint32_t c);                              // str.isspace()

// ---------------------------------------------------------------------------------------------
// The syntax tree

typedef enum JNodeKind {
    // expressions
    JN_CONST,     // v
    JN_NAME,      // name
    JN_ATTR,      // a.name
    JN_ITEM,      // a[b]
    JN_SLICE,     // a[b:c:d], absent parts NULL
    JN_CALL,      // a(args), kwargs named by kw
    JN_FILTER,    // a | name(args)
    JN_TEST,      // a is name(args); op: 1 for `is not`
    JN_BINARY,    // a op b, op one of + - * / // % ** ~ (T_ codes)
    JN_NEG,       // -a
    JN_POS,       // +a
    JN_NOT,       // not a
    JN_AND,       // a and b
    JN_OR,        // a or b
    JN_COMPARE,   // a op b, op a comparison or in / not in
    JN_COND,      // b if a else c (c NULL: undefined)
    JN_LIST,      // [args]
    JN_TUPLE,     // (args)
    JN_DICT,      // {args[2k]: args[2k+1]}
    // statements
    JN_DATA,      // the template's own text: v
    JN_OUTPUT,    // {{ a }}
    JN_IF,        // if a: body, else body2 (an elif is an if alone in body2)
    JN_FOR,       // for targets in a if b: body, else body2
    JN_SET,       // set targets = b, or set a.name = b (a namespace), or set targets: body
    JN_MACRO,     // macro name(targets = args (NULL: no default)): body
    JN_BREAK,
    JN_CONTINUE,
    JN_BLOCK,     // body (a generation block)
} JNodeKind;

typedef struct JNodes {
    struct JNode **at;
    int n, cap;
} JNodes;

typedef struct JNode {
    JNodeKind kind;
    int op;
    int line, col;
    const char *name;         // NUL-terminated, made by jstr_new (see jv_name)
    struct JNode *a, *b, *c, *d;
    JNodes args, body, body2;
    const char **kw;          // JN_CALL, JN_FILTER, JN_TEST: the names of the last nkw args
    int nkw;
    const char **targets;     // JN_FOR, JN_SET, JN_MACRO: names bound (as name)
    int ntargets;
    bool unpack;              // JN_FOR, JN_SET: targets as a tuple (even of one)
    JVal v;
    intptr_t fn;              // JN_FILTER, JN_TEST, JN_CALL of a method: the table row
} JNode;

// Operator codes (JNode.op), also the lexer's token codes for them.
enum {
    T_ADD = 1, T_SUB, T_MUL, T_DIV, T_FLOORDIV, T_MOD, T_POW, T_TILDE,
    T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE, T_IN, T_NOTIN,
};

struct JinjaTemplate {
    JArena arena;
    JNodes body;
    char name[256];
};

// jinja_lib.c: the tables, looked up by name when parsing (-1: no such row) and run when
// rendering. A call's arguments: pos[0..npos), then kw[k] = kwv[k].
typedef struct JArgs {
    JVal *pos;
    int npos;
    const char **kw;
    JVal *kwv;
    int nkw;
} JArgs;

typedef struct JCtx JCtx;
int jlib_filter(const char *name);
int jlib_test(const char *name);
int jlib_global(const char *name);
JVal jlib_run_filter(JCtx *c, const JNode *n, int fn, JVal x, JArgs *a);
bool jlib_run_test(JCtx *c, const JNode *n, int fn, JVal x, JArgs *a);
JVal jlib_run_global(JCtx *c, const JNode *n, int fn, JArgs *a);
JVal jlib_run_method(JCtx *c, const JNode *n, JMethod *m, JArgs *a);
bool jlib_has_method(JVal self, const char *name);
JVal jlib_loop_attr(JCtx *c, JLoop *l, const char *name);
// obj.name as jinja2 resolves it: a method, a dict's item, a loop's attribute, else
// Undefined saying what has no such attribute (jlib_no_attr); taking one of Undefined fails.
JVal jlib_getattr(JCtx *c, const JNode *n, JVal obj, const char *name, size_t len);
JVal jlib_no_attr(JCtx *c, JVal obj, const char *name, size_t len);

// A render's state (jinja_eval.c runs it; the library reaches its arena and error).
enum { CTL_NONE, CTL_BREAK, CTL_CONTINUE };

struct JCtx {
    JErr err;
    JArena arena;
    JDict *vars;              // the variables given, then the globals
    JStr *loop_name;          // "loop", made once
    JDict **scope;            // scope[0] the template's; kept for reuse when popped
    int nscope, scope_cap;
    JBuf *out;                // where text goes now
    JBuf top;                 // the render's output (on the heap)
    JinjaOutput *result;
    int depth;
    long steps;
    int ctl;                  // a break or continue on its way out of the loop body
};

// Fails the render at node n (its line and column; none when n is NULL), printf-style.
_Noreturn void jctx_fail(JCtx *c, const JNode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static inline JArena *jctx_arena(JCtx *c) { return &c->arena; }
static inline JErr *jctx_err(JCtx *c) { return &c->err; }

// Counts one loop iteration or call against the render's bound.
static inline void jctx_step(JCtx *c, const JNode *n) {
    if (++c->steps > JINJA_MAX_STEPS)
        jctx_fail(c, n, "the template runs more than %d loop iterations and calls", JINJA_MAX_STEPS);
}

#endif
