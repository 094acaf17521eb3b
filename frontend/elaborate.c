// elaborate.c — checks a parsed program and builds its IR for a concrete
// micro-batch: constants are folded, blocks instantiated once per repeat, every
// tensor gets a shape and dtype, and every node keeps the location it came from.
//
// Nothing here knows a model architecture: ops come from the op table by name,
// their attribute from the table's `attr` column.
#include "frontend.h"

#include <math.h>
#include <stdarg.h>

// A value while evaluating: a constant, or a tensor of the graph.
typedef enum { V_NONE, V_INT, V_FLOAT, V_BOOL, V_STR, V_SIZE, V_TENSOR, V_LIST } VKind;

typedef struct Value {
    VKind kind;
    int64_t i;      // V_INT, V_BOOL, V_SIZE; V_TENSOR: tensor id
    double f;       // V_FLOAT
    const char *s;  // V_STR
    const Ast *ast; // V_LIST: the first element's AST (elements evaluated on demand)
} Value;

typedef struct Binding {
    const char *name;
    Value v;
    int uses;       // how many times the name was bound, for unique tensor names
} Binding;

// A scope: model constants, a block instance, or the forward function.
typedef struct Scope {
    struct Scope *parent;
    VEC(Binding) vars;
    const char *prefix;     // tensor name prefix: "", "decoder.3."
    const char *hf_prefix;  // checkpoint name prefix: "", "model.layers.3."
    int layer;
} Scope;

typedef struct Elab {
    FtSource *src;
    const FtModel *m;
    IrGraph *g;             // NULL while only checking constants
    Arena *a;
    Scope *model;           // constants and model params
    int depth;              // block call depth, to stop runaway recursion
    int counter;            // for unnamed tensors
    int calls;              // block instances made
    bool too_big;           // a size limit was reported
    int positions;          // the position ids input, once something reads it; else -1
    VEC(int) rope_tables;   // the rope_table nodes made so far (one a rope's attributes)
    bool reference;         // making a preference loss's reference model (reference_logprobs)
    VEC(int) ref_copy;      // reference = copy: per parameter id its frozen copy's, or -1
} Elab;

static Value none(void) { return (Value){.kind = V_NONE}; }

static Binding *lookup(Scope *s, const char *name) {
    for (; s; s = s->parent)
        for (int i = s->vars.len - 1; i >= 0; i--)
            if (strcmp(s->vars.at[i].name, name) == 0)
                return &s->vars.at[i];
    return NULL;
}

static void bind(Scope *s, const char *name, Value v) {
    for (int i = 0; i < s->vars.len; i++)
        if (strcmp(s->vars.at[i].name, name) == 0) {
            s->vars.at[i].v = v;
            s->vars.at[i].uses++;
            return;
        }
    vec_push(&s->vars, ((Binding){.name = name, .v = v, .uses = 1}));
}

static const char *vkind_name(VKind k) {
    static const char *names[] = {"nothing", "an integer", "a number", "a boolean",
                                  "a string", "a size", "a tensor", "a list"};
    return names[k];
}

static const Ast *find_section(const Ast *prog, AstKind kind) {
    for (const Ast *s = prog->body; s; s = s->next)
        if (s->kind == kind)
            return s;
    return NULL;
}

static const Ast *find_block(const Elab *e, const char *name) {
    const Ast *model = find_section(e->m->program, AST_MODEL);
    for (const Ast *it = model->body; it; it = it->next)
        if (it->kind == AST_BLOCK && strcmp(it->name, name) == 0)
            return it;
    return NULL;
}

static const Ast *find_forward(const Ast *prog) {
    const Ast *model = find_section(prog, AST_MODEL);
    for (const Ast *it = model ? model->body : NULL; it; it = it->next)
        if (it->kind == AST_FORWARD)
            return it;
    return NULL;
}

static Value eval(Elab *e, Scope *s, const Ast *x, const char *name);

// Evaluates `x` to an integer dimension; reports and returns -1 otherwise.
static int64_t eval_dim(Elab *e, Scope *s, const Ast *x) {
    Value v = eval(e, s, x, NULL);
    if (v.kind == V_NONE)
        return -1;
    if (v.kind != V_INT) {
        fe_error(e->src, x->loc, "a dimension must be an integer, but this is %s",
                 vkind_name(v.kind));
        return -1;
    }
    if (v.i <= 0) {
        fe_error(e->src, x->loc, "a dimension must be positive, but this is %lld",
                 (long long)v.i);
        return -1;
    }
    return v.i;
}

// Evaluates a list of dims into `shape`; returns the rank, or -1 after an error.
static int eval_dims(Elab *e, Scope *s, const Ast *dims, int64_t *shape, SrcLoc where) {
    int n = 0, bad = 0;
    for (const Ast *d = dims; d; d = d->next) {
        if (n == IR_MAX_DIMS) {
            fe_error(e->src, d->loc, "at most %d dimensions are supported", IR_MAX_DIMS);
            return -1;
        }
        int64_t v = eval_dim(e, s, d);
        bad |= v < 0;
        shape[n++] = v;
    }
    if (n == 0 && !bad) {
        fe_error(e->src, where, "a shape needs at least one dimension");
        return -1;
    }
    // Keep every byte count far from overflow: at most 2^50 elements in one tensor.
    int64_t elems = 1;
    for (int i = 0; !bad && i < n; i++) {
        if (__builtin_mul_overflow(elems, shape[i], &elems) || elems > (1LL << 50)) {
            fe_error(e->src, where, "this shape has more than 2^50 elements");
            return -1;
        }
    }
    return bad ? -1 : n;
}

static double as_float(Value v) { return v.kind == V_FLOAT ? v.f : (double)v.i; }
static bool is_number(Value v) { return v.kind == V_INT || v.kind == V_FLOAT; }

static const char *fresh_name(Elab *e, Scope *s, const char *base) {
    return arena_printf(e->a, "%s%s.%d", s->prefix, base, e->counter++);
}

// The name a new tensor gets: the assigned variable's, made unique on reassignment.
static const char *value_name(Elab *e, Scope *s, const char *var, const char *op) {
    if (!var)
        return fresh_name(e, s, op);
    Binding *b = NULL;
    for (int i = 0; i < s->vars.len; i++)
        if (strcmp(s->vars.at[i].name, var) == 0)
            b = &s->vars.at[i];
    if (!b)
        return arena_printf(e->a, "%s%s", s->prefix, var);
    return arena_printf(e->a, "%s%s.%d", s->prefix, var, b->uses + 1);
}

static Value tensor(int id) { return (Value){.kind = V_TENSOR, .i = id}; }

enum { MAX_NODES = 1000000, MAX_CALLS = 200000 };   // far beyond any real model; stop runaway fan-out

// Adds a node; reports a shape error at `loc` (or at the failing argument).
static Value positions(Elab *e, SrcLoc loc);
static int rope_table(Elab *e, const IrTensor *x, OpAttr attr, SrcLoc loc);

// Parameter id's frozen copy for the reference model (reference = copy), made at its first
// use: loaded from the same checkpoint name, never trained or saved (copy_of).
static int ref_copy(Elab *e, int id) {
    while (e->ref_copy.len <= id)
        vec_push(&e->ref_copy, -1);
    if (e->ref_copy.at[id] >= 0)
        return e->ref_copy.at[id];
    IrTensor p = e->g->tensors.at[id];
    int c = ir_tensor_add(e->g, arena_printf(e->a, "ref.%s", p.name), TK_PARAM, p.dtype, p.ndim, p.shape, p.loc);
    IrTensor *t = ir_tensor(e->g, c);
    t->hf_name = p.hf_name, t->decl = p.decl, t->layer = p.layer;
    t->trainable = t->requires_grad = false;
    t->copy_of = id;
    t->cat = MEM_REFERENCE;
    e->ref_copy.at[id] = c;
    return c;
}

static Value add_node(Elab *e, Scope *s, OpKind op, int nin, const int *in, OpAttr attr,
                      const char *name, SrcLoc loc, const Ast *args) {
    IrShapeErr err;
    if (e->g->nodes.len >= MAX_NODES) {
        if (!e->too_big)
            fe_error(e->src, loc, "the model has more than %d operations", MAX_NODES);
        e->too_big = true;
        return none();
    }
    const char *nm = name ? name : fresh_name(e, s, op_desc(op)->name);
    int with[IR_MAX_INPUTS];
    if (e->reference) {   // the reference model's: named apart, on its frozen copy
        nm = arena_printf(e->a, "ref.%s", nm);
        if (e->g->reference == REF_COPY) {
            memcpy(with, in, sizeof(int) * (size_t)nin);
            for (int k = 0; k < nin; k++)
                if (with[k] >= 0 && e->g->tensors.at[with[k]].kind == TK_PARAM)
                    with[k] = ref_copy(e, with[k]);
            in = with;
        }
    }
    // Packed records: every rope turns by the position ids (which restart at each record)
    // and every attention masks the keys of other records, reading them too.
    if (e->g->packing && ((op == OP_ROPE && nin == 1) || (op == OP_ATTENTION && nin == 3))) {
        memcpy(with, in, sizeof(int) * (size_t)nin);
        with[nin++] = (int)positions(e, loc).i;
        in = with;
    }
    // Every rope reads its angles' cos and sin from a table its attributes and length share
    // (the GPU's kernels then hold no double-precision trigonometry); a rope whose shape is
    // wrong gets none, and its shape rule reports it.
    if (op == OP_ROPE && nin <= 2 && in[0] >= 0) {
        int t = rope_table(e, &e->g->tensors.at[in[0]], attr, loc);
        if (t >= 0) {
            if (in != with)
                memcpy(with, in, sizeof(int) * (size_t)nin);
            if (nin == 1)
                with[nin++] = -1;   // no position ids
            with[nin++] = t;
            in = with;
        }
    }
    int id = ir_node_add(e->g, op, nin, in, attr, nm, s->layer, loc, &err);
    if (id < 0) {
        SrcLoc at = loc;
        const Ast *a = args;
        for (int k = 0; a && k < err.arg; k++)
            a = a->next;
        if (a && err.arg >= 0)
            at = a->loc;
        fe_error(e->src, at, "%s", err.msg);
        return none();
    }
    e->g->nodes.at[id].reference = e->reference;
    return tensor(e->g->nodes.at[id].out[0]);
}

static Value binop_numbers(Elab *e, const Ast *x, Value l, Value r) {
    if (l.kind == V_INT && r.kind == V_INT) {
        int64_t a = l.i, b = r.i, v = 0;
        bool ovf = false;
        switch (x->op) {
        case '+': ovf = __builtin_add_overflow(a, b, &v); break;
        case '-': ovf = __builtin_sub_overflow(a, b, &v); break;
        case '*': ovf = __builtin_mul_overflow(a, b, &v); break;
        case '/':
        case '%':
            if (b == 0) {
                fe_error(e->src, x->loc, "division by zero");
                return none();
            }
            if (a == INT64_MIN && b == -1) {
                ovf = true;
                break;
            }
            if (x->op == '/' && a % b) {
                fe_error(e->src, x->loc, "%lld / %lld is not a whole number", (long long)a,
                         (long long)b);
                return none();
            }
            v = x->op == '/' ? a / b : a % b;
            break;
        }
        if (ovf) {
            fe_error(e->src, x->loc, "integer overflow");
            return none();
        }
        return (Value){.kind = V_INT, .i = v};
    }
    double a = as_float(l), b = as_float(r), v = 0;
    if ((x->op == '/' || x->op == '%') && b == 0) {
        fe_error(e->src, x->loc, "division by zero");
        return none();
    }
    switch (x->op) {
    case '+': v = a + b; break;
    case '-': v = a - b; break;
    case '*': v = a * b; break;
    case '/': v = a / b; break;
    case '%': v = fmod(a, b); break;
    }
    if (!isfinite(v)) {
        fe_error(e->src, x->loc, "this number is not finite");
        return none();
    }
    return (Value){.kind = V_FLOAT, .f = v};
}

static Value eval_binop(Elab *e, Scope *s, const Ast *x, const char *name) {
    Value l = eval(e, s, x->lhs, NULL), r = eval(e, s, x->rhs, NULL);
    if (l.kind == V_NONE || r.kind == V_NONE)
        return none();
    if (is_number(l) && is_number(r))
        return binop_numbers(e, x, l, r);
    if (l.kind == V_TENSOR && r.kind == V_TENSOR && x->op != '%') {
        OpKind op = x->op == '+' ? OP_ADD : x->op == '-' ? OP_SUB : x->op == '*' ? OP_MUL : OP_DIV;
        int in[2] = {(int)l.i, (int)r.i};
        return add_node(e, s, op, 2, in, (OpAttr){0}, value_name(e, s, name, op_desc(op)->name),
                        x->loc, NULL);
    }
    // tensor * c, c * tensor, tensor / c: a scale
    Value t = l.kind == V_TENSOR ? l : r, c = l.kind == V_TENSOR ? r : l;
    if (t.kind == V_TENSOR && is_number(c) &&
        (x->op == '*' || (x->op == '/' && l.kind == V_TENSOR))) {
        double k = as_float(c);
        if (x->op == '/') {
            if (k == 0) {
                fe_error(e->src, x->loc, "division by zero");
                return none();
            }
            k = 1 / k;
        }
        int in[1] = {(int)t.i};
        return add_node(e, s, OP_SCALE, 1, in, (OpAttr){.f = k},
                        value_name(e, s, name, "scale"), x->loc, NULL);
    }
    fe_error(e->src, x->loc, "operator '%c' does not apply to %s and %s", x->op,
             vkind_name(l.kind), vkind_name(r.kind));
    return none();
}

// transpose's pair of dimension indices, [1, 2], into attr->perm; false after an error.
static bool read_pair_kw(Elab *e, Scope *s, const Ast *v, OpAttr *attr) {
    bool pair = (v->kind == AST_TUPLE || v->kind == AST_LIST) && ast_count(v->args) == 2;
    Value a = pair ? eval(e, s, v->args, NULL) : none();
    Value b = a.kind == V_INT ? eval(e, s, v->args->next, NULL) : none();
    if (a.kind != V_INT || b.kind != V_INT || a.i < 0 || b.i < 0 || a.i >= IR_MAX_DIMS ||
        b.i >= IR_MAX_DIMS) {
        fe_error(e->src, v->loc, "transpose needs two dimension indices, e.g. [1, 2]");
        return false;
    }
    attr->perm[0] = (int)a.i;
    attr->perm[1] = (int)b.i;
    return true;
}

// A rope scaling's name (a bare name, or a string) into attr; false after an error.
static bool read_word_kw(Elab *e, const OpKeyword *kw, const Ast *v, OpAttr *attr) {
    const char *w = v->kind == AST_IDENT || v->kind == AST_STR ? v->name : NULL;
    if (!w || !rope_scaling_find(w, &attr->rope.scaling)) {
        fe_error(e->src, v->loc, "'%s' must be default, linear, dynamic, llama3 or yarn", kw->word);
        return false;
    }
    return true;
}

// Whether the value x of number keyword `kw` (written as `v`) is of its kind and range;
// reports at v otherwise.
static bool kw_number_ok(Elab *e, const OpKeyword *kw, const Ast *v, Value x) {
    if (kw->kind == KW_NUMBER ? !is_number(x) : x.kind != V_INT) {
        fe_error(e->src, v->loc, "'%s' must be %s, but this is %s", kw->word,
                 kw->kind == KW_NUMBER ? "a number" : "an integer", vkind_name(x.kind));
        return false;
    }
    if (kw->kind == KW_COUNT && x.i < 0) {
        fe_error(e->src, v->loc, "'%s' must not be negative", kw->word);
        return false;
    }
    if (kw->kind == KW_INT && (x.i < -IR_MAX_DIMS || x.i >= IR_MAX_DIMS)) {
        fe_error(e->src, v->loc, "'%s' %lld is not a dimension index", kw->word, (long long)x.i);
        return false;
    }
    if (kw->kind == KW_COUNT && x.i > (1LL << 50)) {
        fe_error(e->src, v->loc, "'%s' %lld is beyond any tensor", kw->word, (long long)x.i);
        return false;
    }
    return true;
}

// Stores the checked number x into the field of attr that `field` names.
static void set_kw_field(OpKwField field, Value x, OpAttr *attr) {
    double f = as_float(x);
    switch (field) {
    case KF_F: attr->f = f; break;
    case KF_AXIS: attr->axis = (int)x.i; break;   // negative: from the end (the shape rule resolves it)
    case KF_START: attr->start = x.i; break;
    case KF_SIZE: attr->size = x.i; break;
    case KF_WINDOW: attr->window = x.i; break;
    case KF_SOFTCAP: attr->softcap = f; break;
    case KF_SCALE: attr->scale = f; break;
    case KF_OFFSET: attr->offset = f; break;
    case KF_ROTARY: attr->rope.rotary = x.i; break;
    case KF_FACTOR: attr->rope.factor = f; break;
    case KF_LOW: attr->rope.low = f; break;
    case KF_HIGH: attr->rope.high = f; break;
    case KF_ORIGINAL: attr->rope.original = x.i; break;
    case KF_LENGTH: attr->rope.length = x.i; break;
    case KF_ATTN_FACTOR: attr->rope.attn_factor = f; break;
    case KF_PAD: attr->pad = x.i + 1; break;
    default: IR_ASSERT(!"a keyword with no field");
    }
}

// Reads the value `v` (an argument's expression) of keyword `kw` into its field of
// `attr`; false after an error.
static bool read_kw(Elab *e, Scope *s, const OpKeyword *kw, const Ast *v, OpAttr *attr) {
    switch (kw->kind) {
    case KW_SHAPE:
        if (v->kind != AST_LIST) {
            fe_error(e->src, v->loc, "view needs a shape in brackets, e.g. [B, S, dim]");
            return false;
        }
        attr->ndim = eval_dims(e, s, v->args, attr->shape, v->loc);
        return attr->ndim > 0;
    case KW_PAIR: return read_pair_kw(e, s, v, attr);
    case KW_WORD: return read_word_kw(e, kw, v, attr);
    default: break;
    }
    // `causal` alone means causal = true
    if (kw->kind == KW_BOOL && v->kind == AST_IDENT && strcmp(v->name, kw->word) == 0 &&
        !lookup(s, v->name)) {
        attr->causal = true;
        return true;
    }
    Value x = eval(e, s, v, NULL);
    if (x.kind == V_NONE)
        return false;
    if (kw->kind == KW_BOOL) {
        if (x.kind != V_BOOL) {
            fe_error(e->src, v->loc, "'%s' must be true or false", kw->word);
            return false;
        }
        if (kw->field == KF_CAUSAL)
            attr->causal = x.i != 0;
        else
            attr->rope.no_truncate = x.i == 0;
        return true;
    }
    if (!kw_number_ok(e, kw, v, x))
        return false;
    set_kw_field(kw->field, x, attr);
    return true;
}

static Value call_block(Elab *e, Scope *s, const Ast *blk, const Ast *args, int layer,
                        SrcLoc loc);
static int make_params(Elab *e, Scope *s, const Ast *items);

// A call of a name that is not a user op: a block's instance (its layer the count of its
// calls so far), else an error.
static Value eval_block_call(Elab *e, Scope *s, const Ast *x) {
    const Ast *blk = find_block(e, x->name);
    if (blk) {
        Binding *count = lookup(e->model, arena_printf(e->a, "#calls.%s", blk->name));
        int layer = count ? (int)count->v.i : 0;
        bind(e->model, arena_printf(e->a, "#calls.%s", blk->name),
             (Value){.kind = V_INT, .i = layer + 1});
        return call_block(e, s, blk, x->args, layer, x->loc);
    }
    OpKind op;
    if (op_find(x->name, &op))   // an op of the compiler's own, made by its passes
        fe_error(e->src, x->loc, "'%s' is an internal op; it cannot be written in .ft", x->name);
    else
        fe_error(e->src, x->loc, "unknown function '%s'", x->name);
    return none();
}

// An op call's arguments, as they are matched to the op's tensors and keywords.
typedef struct CallArgs {
    const OpDesc *info;
    OpKeyword kws[OP_MAX_KEYWORDS];
    int nkw;
    bool given[OP_MAX_KEYWORDS];    // the keywords given, by name or in place
    OpAttr attr;
    int in[IR_MAX_INPUTS], nin;     // the tensors (-1: a failed argument)
} CallArgs;

// Index of keyword `word` in c->kws, or c->nkw.
static int find_kw(const CallArgs *c, const char *word) {
    int k = 0;
    while (k < c->nkw && strcmp(c->kws[k].word, word) != 0)
        k++;
    return k;
}

// Marks the keywords given by name in c->given: each once, and no field set by two;
// false after an error.
static bool mark_named_args(Elab *e, const Ast *args, CallArgs *c) {
    bool ok = true;
    int setter[KF_COUNT];   // per field, the keyword given for it, or -1
    for (int f = 0; f < KF_COUNT; f++)
        setter[f] = -1;
    for (const Ast *a = args; a; a = a->next) {
        if (!a->name)
            continue;
        int k = find_kw(c, a->name);
        if (k == c->nkw) {
            fe_error(e->src, a->loc, "%s has no argument named '%s'", c->info->name, a->name);
            ok = false;
        } else if (c->given[k]) {
            fe_error(e->src, a->loc, "'%s' is given twice", a->name);
            ok = false;
        } else if (setter[c->kws[k].field] >= 0) {
            fe_error(e->src, a->loc, "'%s' sets what '%s' already set", a->name,
                     c->kws[setter[c->kws[k].field]].word);
            ok = false;
        }
        if (k < c->nkw) {
            c->given[k] = true;
            setter[c->kws[k].field] = k;
        }
    }
    return ok;
}

// Reads call x's arguments into c: named keywords where named; positional ones are the
// tensors (min_in of them, then optional ones while more arguments remain than positional
// attributes), then the attributes in order. False after an error.
static bool read_call_args(Elab *e, Scope *s, const Ast *x, CallArgs *c) {
    const OpDesc *info = c->info;
    int npos = 0, slots = 0, next_kw = 0, k = 0;
    bool ok = true;
    for (const Ast *a = x->args; a; a = a->next)
        npos += !a->name;
    for (int j = 0; j < c->nkw; j++)
        slots += c->kws[j].positional && !c->given[j];
    for (const Ast *a = x->args; a; a = a->next) {
        if (a->name) {
            int j = find_kw(c, a->name);
            if (j < c->nkw)
                ok &= read_kw(e, s, &c->kws[j], a->lhs, &c->attr);
            continue;
        }
        int left = npos - k++;   // this argument and the positional ones after it
        if (c->nin < info->min_in || (c->nin < info->max_in && left > slots)) {
            Value v = eval(e, s, a->lhs, NULL);
            if (v.kind != V_TENSOR && v.kind != V_NONE)
                fe_error(e->src, a->lhs->loc, "argument %d of %s must be a tensor, but this is %s",
                         c->nin + 1, info->name, vkind_name(v.kind));
            ok &= v.kind == V_TENSOR;
            // a failed argument still takes its place
            c->in[c->nin++] = v.kind == V_TENSOR ? (int)v.i : -1;
            continue;
        }
        while (next_kw < c->nkw && (!c->kws[next_kw].positional || c->given[next_kw]))
            next_kw++;
        if (next_kw == c->nkw) {
            fe_error(e->src, a->loc, "too many arguments to %s (takes %d tensor%s%s)", info->name,
                     info->max_in, info->max_in == 1 ? "" : "s", slots ? " and its attributes" : "");
            return false;
        }
        c->given[next_kw] = true;
        ok &= read_kw(e, s, &c->kws[next_kw++], a->lhs, &c->attr);
    }
    return ok;
}

// Whether call x gave the tensors and the keywords its op needs; reports at x otherwise.
static bool call_args_complete(Elab *e, const Ast *x, const CallArgs *c) {
    if (c->nin < c->info->min_in) {
        fe_error(e->src, x->loc, "%s takes at least %d tensor arguments, got %d", c->info->name,
                 c->info->min_in, c->nin);
        return false;
    }
    for (int j = 0; j < c->nkw; j++)
        if (c->kws[j].required && !c->given[j]) {
            fe_error(e->src, x->loc, "%s needs its '%s' argument", c->info->name, c->kws[j].word);
            return false;
        }
    return true;
}

static Value eval_call(Elab *e, Scope *s, const Ast *x, const char *name) {
    OpKind op;
    if (!op_lookup_user(x->name, &op))
        return eval_block_call(e, s, x);
    CallArgs c = {.info = op_desc(op)};
    c.nkw = op_user_keywords(op, c.kws);
    bool named_ok = mark_named_args(e, x->args, &c);
    if (!read_call_args(e, s, x, &c) || !named_ok || !call_args_complete(e, x, &c))
        return none();
    const OpDesc *info = c.info;
    // A dimension counted from the end (-1 the last) is stored as its index.
    if ((info->attrs & (ATTR_SLICE | ATTR_AXIS)) && c.attr.axis < 0 && c.in[0] >= 0)
        c.attr.axis += ir_tensor(e->g, c.in[0])->ndim;
    // A dynamic rope is computed for a fixed length: the sequence's, unless given.
    if ((info->attrs & ATTR_ROPE) && c.attr.rope.scaling == ROPE_DYNAMIC && !c.attr.rope.length)
        c.attr.rope.length = e->g->seq;
    return add_node(e, s, op, c.nin, c.in, c.attr, value_name(e, s, name, info->name), x->loc,
                    x->args);
}

// Whether block `blk` may be instantiated here with `args`; reports at loc otherwise.
static bool block_call_ok(Elab *e, const Ast *blk, const Ast *args, SrcLoc loc) {
    if (!e->g) {
        fe_error(e->src, loc, "a block can only be called from forward");
        return false;
    }
    if (e->depth > 8) {
        fe_error(e->src, loc, "blocks nest too deeply (is '%s' calling itself?)", blk->name);
        return false;
    }
    if (++e->calls > MAX_CALLS) {
        if (!e->too_big)
            fe_error(e->src, loc, "more than %d block instances", MAX_CALLS);
        e->too_big = true;
        return false;
    }
    int nin = ast_count(blk->inputs);
    if (ast_count(args) != nin) {
        fe_error(e->src, loc, "block '%s' takes %d argument%s, got %d", blk->name, nin,
                 nin == 1 ? "" : "s", ast_count(args));
        return false;
    }
    return true;
}

// Evaluates a block call's arguments `args` into vals[] in the caller's scope; false after
// an error.
static bool eval_block_args(Elab *e, Scope *s, const Ast *args, Value *vals) {
    int k = 0;
    bool ok = true;
    for (const Ast *a = args; a; a = a->next, k++) {
        if (a->name) {
            fe_error(e->src, a->loc, "block arguments are positional");
            return false;
        }
        vals[k] = eval(e, s, a->lhs, NULL);
        ok &= vals[k].kind != V_NONE;
    }
    return ok;
}

// Binds block `blk`'s inputs in scope `in` to vals[], each a tensor of its declared shape;
// false after an error (reported at the call, loc).
static bool bind_block_inputs(Elab *e, Scope *in, const Ast *blk, const Value *vals, SrcLoc loc) {
    int k = 0;
    for (const Ast *p = blk->inputs; p; p = p->next, k++) {
        int64_t shape[IR_MAX_DIMS];
        int nd = eval_dims(e, in, p->args, shape, p->loc);
        if (nd < 0)
            return false;
        if (vals[k].kind != V_TENSOR) {
            fe_error(e->src, loc, "argument %d of block '%s' must be a tensor", k + 1, blk->name);
            return false;
        }
        IrTensor *t = ir_tensor(e->g, (int)vals[k].i), want = {.dtype = t->dtype, .ndim = nd};
        memcpy(want.shape, shape, sizeof shape);
        bool same = t->ndim == nd;
        for (int d = 0; same && d < nd; d++)
            same = t->shape[d] == shape[d];
        if (!same) {
            char a[96], b[96];
            ir_shape_str(a, sizeof a, t);
            ir_shape_str(b, sizeof b, &want);
            fe_error(e->src, loc, "block '%s' expects %s as '%s', got %s", blk->name, b, p->name,
                     a);
            fe_note(e->src, p->loc, "'%s' is declared here", p->name);
            return false;
        }
        bind(in, p->name, vals[k]);
    }
    return true;
}

// Runs block `blk`'s body in scope `in` up to its return; the returned value, or none.
static Value run_block_body(Elab *e, Scope *in, const Ast *blk) {
    Value ret = none();
    e->depth++;
    for (const Ast *st = blk->body; st; st = st->next) {
        if (st->kind == AST_ASSIGN) {
            Value v = eval(e, in, st->lhs, st->name);
            if (v.kind == V_NONE)
                break;
            bind(in, st->name, v);
        } else if (st->kind == AST_RETURN) {
            ret = eval(e, in, st->lhs, "out");
            break;
        }
    }
    e->depth--;
    if (ret.kind == V_NONE && e->src->errors == 0)
        fe_error(e->src, blk->loc, "block '%s' does not return a value", blk->name);
    return ret;
}

// Instantiates block `blk` for one call: its params get layer `layer`'s names.
static Value call_block(Elab *e, Scope *s, const Ast *blk, const Ast *args, int layer,
                        SrcLoc loc) {
    if (!block_call_ok(e, blk, args, loc))
        return none();
    // Evaluate the arguments in the caller's scope before entering the block.
    Value vals[IR_MAX_INPUTS * 4];
    if (ast_count(blk->inputs) > (int)(sizeof vals / sizeof vals[0])) {
        fe_error(e->src, loc, "too many block inputs");
        return none();
    }
    if (!eval_block_args(e, s, args, vals))
        return none();
    // "model.layers.{i}" -> "model.layers.3"
    const char *pat = blk->str, *brace = strstr(pat, "{i}");
    const char *hf = brace ? arena_printf(e->a, "%.*s%d%s", (int)(brace - pat), pat, layer, brace + 3)
                           : pat;
    Scope in = {.parent = e->model, .prefix = arena_printf(e->a, "%s.%d.", blk->name, layer),
                .hf_prefix = *hf ? arena_printf(e->a, "%s.", hf) : "", .layer = layer};
    bind(&in, "layer", (Value){.kind = V_INT, .i = layer});   // what differs by layer: [a, b][layer % 2]
    Value ret = none();
    if (bind_block_inputs(e, &in, blk, vals, loc) && make_params(e, &in, blk->body) == 0)
        ret = run_block_body(e, &in, blk);
    vec_free(&in.vars);
    return ret;
}

static Value eval_repeat(Elab *e, Scope *s, const Ast *x, const char *name) {
    (void)name;
    Value n = eval(e, s, x->lhs, NULL);
    if (n.kind == V_NONE)
        return none();
    if (n.kind != V_INT || n.i < 1 || n.i > 100000) {
        fe_error(e->src, x->lhs->loc, "repeat needs a positive integer count");
        return none();
    }
    const Ast *blk = find_block(e, x->name);
    if (!blk) {
        fe_error(e->src, x->loc, "unknown block '%s'", x->name);
        return none();
    }
    if (ast_count(blk->inputs) != 1 || ast_count(x->args) != 1) {
        fe_error(e->src, x->loc, "repeat needs a block of one input, called with one argument");
        return none();
    }
    if (x->args->name) {
        fe_error(e->src, x->args->loc, "block arguments are positional");
        return none();
    }
    Value v = eval(e, s, x->args->lhs, NULL);
    for (int64_t i = 0; i < n.i && v.kind == V_TENSOR; i++) {
        // Feed the previous layer's output in as a one-argument call.
        Scope tmp = {.parent = s, .prefix = s->prefix, .hf_prefix = s->hf_prefix, .layer = s->layer};
        bind(&tmp, "#x", v);
        Ast id = {.kind = AST_IDENT, .loc = x->loc, .name = "#x"};
        Ast arg = {.kind = AST_ARG, .loc = x->args->loc, .lhs = &id};
        v = call_block(e, &tmp, blk, &arg, (int)i, x->loc);
        vec_free(&tmp.vars);
    }
    return v;
}

// Element k of the list `list` indexed by x ([a, b, c][k]): k an integer in range, counted
// from 0; the element is evaluated alone.
static Value list_element(Elab *e, Scope *s, const Ast *list, const Ast *x, const char *name) {
    if (ast_count(x->args) != 1 || x->args->name) {
        fe_error(e->src, x->loc, "a list takes one index");
        return none();
    }
    Value k = eval(e, s, x->args->lhs, NULL);
    if (k.kind == V_NONE)
        return none();
    int n = ast_count(list->args);
    if (k.kind != V_INT || k.i < 0 || k.i >= n) {
        if (k.kind == V_INT)
            fe_error(e->src, x->args->loc, "index %lld is outside this list of %d", (long long)k.i, n);
        else
            fe_error(e->src, x->args->loc, "a list index must be an integer, but this is %s",
                     vkind_name(k.kind));
        return none();
    }
    const Ast *el = list->args;
    for (int64_t i = 0; i < k.i; i++)
        el = el->next;
    return eval(e, s, el, name);
}

// The position ids: an i32 [B, S] batch input the training loop fills (0..S-1 along each
// row of unpacked data), made when the program first reads `positions`.
static Value positions(Elab *e, SrcLoc loc) {
    if (e->positions < 0) {
        int64_t shape[2] = {e->g->batch, e->g->seq};
        e->positions = ir_tensor_add(e->g, "positions", TK_INPUT, DT_I32, 2, shape, loc);
    }
    return tensor(e->positions);
}

// The rope_table node for a rope of x with these attributes: made at the first such rope,
// outside any repeated block, and shared by the others; -1 where x cannot be roped.
static int rope_table(Elab *e, const IrTensor *x, OpAttr attr, SrcLoc loc) {
    int64_t d = attr.rope.rotary ? attr.rope.rotary : x->ndim == 4 ? x->shape[3] : 0;
    if (x->ndim != 4 || d <= 0 || d % 2 || d > x->shape[3] || !(attr.f > 1))
        return -1;
    OpAttr t = {.f = attr.f, .rope = attr.rope, .ndim = 3, .shape = {x->shape[1], 2, d / 2}};
    t.rope.rotary = d;
    for (int i = 0; i < e->rope_tables.len; i++) {
        const IrNode *n = &e->g->nodes.at[e->rope_tables.at[i]];
        if (op_attr_equal(OP_ROPE_TABLE, &n->attr, &t))
            return n->out[0];
    }
    IrShapeErr err;
    int id = ir_node_add(e->g, OP_ROPE_TABLE, 0, NULL, t, fresh_name(e, e->model, "rope_table"), -1,
                         loc, &err);
    if (id < 0)
        return -1;   // (attributes the rope's own shape rule then reports)
    vec_push(&e->rope_tables, id);
    return e->g->nodes.at[id].out[0];
}

// A name's value: its binding, or the position ids while building the graph.
static Value eval_ident(Elab *e, Scope *s, const Ast *x) {
    Binding *b = lookup(s, x->name);
    if (!b && e->g && strcmp(x->name, "positions") == 0)
        return positions(e, x->loc);
    if (!b) {
        fe_error(e->src, x->loc, "unknown identifier '%s'", x->name);
        return none();
    }
    return b->v;
}

// -x: a number negated, or a tensor scaled by -1.
static Value eval_neg(Elab *e, Scope *s, const Ast *x, const char *name) {
    Value v = eval(e, s, x->lhs, NULL);
    if (v.kind == V_INT) {
        if (v.i == INT64_MIN) {
            fe_error(e->src, x->loc, "integer overflow");
            return none();
        }
        return (Value){.kind = V_INT, .i = -v.i};
    }
    if (v.kind == V_FLOAT)
        return (Value){.kind = V_FLOAT, .f = -v.f};
    if (v.kind == V_TENSOR) {
        int in[1] = {(int)v.i};
        return add_node(e, s, OP_SCALE, 1, in, (OpAttr){.f = -1}, value_name(e, s, name, "neg"),
                        x->loc, NULL);
    }
    if (v.kind != V_NONE)
        fe_error(e->src, x->loc, "cannot negate %s", vkind_name(v.kind));
    return none();
}

// t[k]: a list's element, or the rows of embedding table t at a tensor of ids.
static Value eval_index(Elab *e, Scope *s, const Ast *x, const char *name) {
    Value t = eval(e, s, x->lhs, NULL);
    if (t.kind == V_NONE)
        return none();
    if (t.kind == V_LIST && t.ast->kind == AST_LIST)   // a list's element: [a, b, c][k]
        return list_element(e, s, t.ast, x, name);
    if (t.kind != V_TENSOR || ast_count(x->args) != 1 || x->args->name) {
        fe_error(e->src, x->loc, "indexing needs an embedding table and one index tensor");
        return none();
    }
    Value ids = eval(e, s, x->args->lhs, NULL);
    if (ids.kind == V_NONE)
        return none();
    if (ids.kind != V_TENSOR) {
        fe_error(e->src, x->args->loc, "an index must be a tensor of token ids");
        return none();
    }
    // Position ids reach S - 1: a table of fewer rows fails on the first batch.
    const IrTensor *tab = ir_tensor(e->g, (int)t.i);
    if (ids.i == e->positions && tab->ndim == 2 && tab->shape[0] < e->g->seq) {
        fe_error(e->src, x->lhs->loc, "positions go up to %lld (seq = %lld), but this table has %lld "
                 "rows", (long long)e->g->seq - 1, (long long)e->g->seq, (long long)tab->shape[0]);
        return none();
    }
    int in[2] = {(int)t.i, (int)ids.i};
    Ast args = {.kind = AST_ARG, .loc = x->lhs->loc, .next = x->args};
    return add_node(e, s, OP_EMBED, 2, in, (OpAttr){0}, value_name(e, s, name, "embed"), x->loc,
                    &args);
}

static Value eval(Elab *e, Scope *s, const Ast *x, const char *name) {
    switch (x->kind) {
    case AST_INT: return (Value){.kind = V_INT, .i = x->ival};
    case AST_FLOAT: return (Value){.kind = V_FLOAT, .f = x->fval};
    case AST_SIZE: return (Value){.kind = V_SIZE, .i = x->ival};
    case AST_BOOL: return (Value){.kind = V_BOOL, .i = x->ival};
    case AST_STR: return (Value){.kind = V_STR, .s = x->name};
    case AST_LIST:
    case AST_TUPLE: return (Value){.kind = V_LIST, .ast = x};
    case AST_IDENT: return eval_ident(e, s, x);
    case AST_NEG: return eval_neg(e, s, x, name);
    case AST_BINOP: return eval_binop(e, s, x, name);
    case AST_CALL:
        if (!e->g) {
            fe_error(e->src, x->loc, "'%s(...)' is not a constant", x->name);
            return none();
        }
        return eval_call(e, s, x, name);
    case AST_REPEAT:
        if (!e->g) {
            fe_error(e->src, x->loc, "repeat is only allowed in forward");
            return none();
        }
        return eval_repeat(e, s, x, name);
    case AST_INDEX: return eval_index(e, s, x, name);
    default:
        fe_error(e->src, x->loc, "not an expression");
        return none();
    }
}

// The policy's parameter named nm, or -1.
static int policy_param(Elab *e, const char *nm) {
    for (int i = 0; i < e->g->tensors.len; i++)
        if (e->g->tensors.at[i].kind == TK_PARAM && strcmp(e->g->tensors.at[i].name, nm) == 0)
            return i;
    return -1;
}

// Creates the params declared in `items` (a model or block body) in scope `s`.
static int make_params(Elab *e, Scope *s, const Ast *items) {
    int bad = 0;
    for (const Ast *p = items; p; p = p->next) {
        if (p->kind != AST_PARAM)
            continue;
        int64_t shape[IR_MAX_DIMS];
        int nd = eval_dims(e, s, p->args, shape, p->loc);
        DType dt = e->g ? e->g->step.weight_dt : DT_BF16;
        if (p->dtype && !dtype_parse(p->dtype, &dt)) {
            fe_error(e->src, p->dtype_loc, "unknown dtype '%s' (use f32, bf16, f16)", p->dtype);
            bad++;
            continue;
        }
        if (nd < 0) {
            bad++;
            continue;
        }
        if (!e->g)
            continue;
        // The checkpoint name goes into safetensors headers and the plan's text: not
        // empty, no spaces or control characters.
        const char *c = p->str;
        while (*c && (unsigned char)*c > ' ' && *c != 0x7f)
            c++;
        if (!*p->str || *c) {
            fe_error(e->src, p->loc, "parameter %s: checkpoint name \"%s\" %s", p->name, p->str,
                     *p->str ? "has a space or a control character" : "is empty");
            bad++;
            continue;
        }
        const char *nm = arena_printf(e->a, "%s%s", s->prefix, p->name);
        if (e->reference) {   // the reference reads the policy's (add_node swaps in a copy)
            int had = policy_param(e, nm);
            IR_ASSERT(had >= 0);
            bind(s, p->name, tensor(had));
            continue;
        }
        int id = ir_tensor_add(e->g, nm, TK_PARAM, dt, nd, shape, p->loc);
        IrTensor *t = ir_tensor(e->g, id);
        t->hf_name = arena_printf(e->a, "%s%s", s->hf_prefix, p->str);
        t->decl = p->name;
        t->layer = s->layer;
        t->trainable = true;
        t->requires_grad = true;
        bind(s, p->name, tensor(id));
    }
    return bad ? -1 : 0;
}

//
// Checking the sections and reading the train spec.
//

static bool reserved(const char *n) {
    return strcmp(n, "B") == 0 || strcmp(n, "S") == 0 || strcmp(n, "positions") == 0 ||
           strcmp(n, "layer") == 0;
}

// Checks names in a body: no duplicates among params/assignments of a scope.
static void check_names(Elab *e, const Ast *items) {
    for (const Ast *a = items; a; a = a->next) {
        if ((a->kind == AST_PARAM || a->kind == AST_ASSIGN) && reserved(a->name))
            fe_error(e->src, a->loc, "'%s' is reserved for %s", a->name,
                     a->name[0] == 'p'   ? "the position ids"
                     : a->name[0] == 'l' ? "a block's layer index"
                                         : "the micro-batch and sequence sizes");
        if (a->kind != AST_PARAM && a->kind != AST_BLOCK)
            continue;
        for (const Ast *b = items; b != a; b = b->next)
            if ((b->kind == AST_PARAM || b->kind == AST_BLOCK) && strcmp(a->name, b->name) == 0) {
                fe_error(e->src, a->loc, "'%s' is declared twice", a->name);
                fe_note(e->src, b->loc, "first declared here");
                break;
            }
    }
}

static Value want(Elab *e, Scope *s, const Ast *x, VKind k1, VKind k2, const char *what) {
    Value v = eval(e, s, x, NULL);
    if (v.kind == V_NONE)
        return v;
    if (v.kind != k1 && v.kind != k2) {
        fe_error(e->src, x->loc, "%s must be %s, but this is %s", what, vkind_name(k1),
                 vkind_name(v.kind));
        return none();
    }
    return v;
}

static const char *const optimizer_names[] = {[OPTIM_ADAMW] = "adamw", [OPTIM_ADAMW8BIT] = "adamw8bit",
                                               [OPTIM_SGD] = "sgd"};

const char *fe_optimizer_name(OptimizerKind k) { return optimizer_names[k]; }

// optimizer = adamw(...) | adamw8bit(...) | sgd(...), arguments named as torch's and
// bitsandbytes' (adamw8bit's min_8bit_size), each checked where bitsandbytes checks it.
static void read_optimizer(Elab *e, Scope *s, const Ast *x, TrainSpec *t) {
    int k = 0;
    while (x->kind == AST_CALL && k <= OPTIM_SGD && strcmp(x->name, optimizer_names[k]) != 0)
        k++;
    if (x->kind != AST_CALL || k > OPTIM_SGD) {
        fe_error(e->src, x->loc, "optimizer must be adamw(...), adamw8bit(...) or sgd(...)");
        return;
    }
    t->optimizer = (OptimizerKind)k;
    bool adam = fe_adam_like(t->optimizer);
    for (const Ast *a = x->args; a; a = a->next) {
        if (!a->name) {
            fe_error(e->src, a->loc, "optimizer arguments are named: lr = 2e-4, ...");
            continue;
        }
        if (strcmp(a->name, "betas") == 0 && adam) {
            if (a->lhs->kind != AST_TUPLE || ast_count(a->lhs->args) != 2) {
                fe_error(e->src, a->lhs->loc, "betas must be a pair: (0.9, 0.999)");
                continue;
            }
            const Ast *b[2] = {a->lhs->args, a->lhs->args->next};
            double *dst[2] = {&t->beta1, &t->beta2};
            for (int k = 0; k < 2; k++) {
                Value v = want(e, s, b[k], V_FLOAT, V_INT, k ? "beta2" : "beta1");
                if (v.kind == V_NONE)
                    continue;
                if (!(as_float(v) >= 0 && as_float(v) < 1))
                    fe_error(e->src, b[k]->loc, "beta%d must be in [0, 1), not %g", k + 1, as_float(v));
                else
                    *dst[k] = as_float(v);
            }
            continue;
        }
        if (strcmp(a->name, "decay_all") == 0 && adam) {
            Value v = want(e, s, a->lhs, V_BOOL, V_BOOL, "decay_all");
            t->decay_all = v.kind == V_BOOL && v.i;
            continue;
        }
        if (strcmp(a->name, "kahan") == 0 && adam) {
            Value v = want(e, s, a->lhs, V_BOOL, V_BOOL, "kahan");
            if (v.kind == V_BOOL)
                t->kahan = v.i ? 1 : 0, t->kahan_loc = a->loc;
            continue;
        }
        if (strcmp(a->name, "min_8bit_size") == 0) {
            if (t->optimizer != OPTIM_ADAMW8BIT) {
                fe_error(e->src, a->loc, "min_8bit_size is adamw8bit's (the smallest tensor whose "
                         "moments are 8-bit); %s keeps no 8-bit state", x->name);
                continue;
            }
            Value v = want(e, s, a->lhs, V_INT, V_INT, "min_8bit_size");
            if (v.kind == V_INT && (v.i < 0 || v.i > ((int64_t)1 << 40)))
                fe_error(e->src, a->lhs->loc, "min_8bit_size must be a number of elements from 0 to "
                         "2^40, not %lld", (long long)v.i);
            else if (v.kind == V_INT)
                t->min_8bit_size = v.i;
            continue;
        }
        double *dst = strcmp(a->name, "lr") == 0                     ? &t->lr
                      : strcmp(a->name, "eps") == 0 && adam          ? &t->eps
                      : strcmp(a->name, "weight_decay") == 0 && adam ? &t->weight_decay
                                                                     : NULL;
        if (!dst) {
            fe_error(e->src, a->loc, "unknown %s argument '%s' (%s)", x->name, a->name,
                     !adam ? "lr" : t->optimizer == OPTIM_ADAMW8BIT
                                     ? "lr, betas, eps, weight_decay, decay_all, kahan, min_8bit_size"
                                     : "lr, betas, eps, weight_decay, decay_all, kahan");
            continue;
        }
        Value v = want(e, s, a->lhs, V_FLOAT, V_INT, a->name);
        if (v.kind == V_NONE)
            continue;
        if (!(as_float(v) >= 0) || !isfinite(as_float(v)))
            fe_error(e->src, a->lhs->loc, "%s must be 0 or more, not %g", a->name, as_float(v));
        else
            *dst = as_float(v);
    }
}

static void read_lora(Elab *e, Scope *s, const Ast *x, TrainSpec *t) {
    t->lora = true;
    t->lora_loc = x->loc;
    t->lora_r = 8, t->lora_alpha = 16, t->lora_dropout = 0;
    bool have_targets = false;
    for (const Ast *a = x->args; a; a = a->next) {
        if (!a->name) {
            fe_error(e->src, a->loc, "lora arguments are named: r = 8, alpha = 16, ...");
            continue;
        }
        if (strcmp(a->name, "targets") == 0) {
            if (a->lhs->kind != AST_LIST || !a->lhs->args) {
                fe_error(e->src, a->lhs->loc, "targets must be a list of names: [wq, wv]");
                continue;
            }
            have_targets = true;
            t->n_lora_targets = ast_count(a->lhs->args);
            t->lora_targets = arena_alloc(e->a, sizeof(LoraTarget) * (size_t)t->n_lora_targets);
            int k = 0;
            for (const Ast *n = a->lhs->args; n; n = n->next, k++) {
                if (n->kind != AST_IDENT && n->kind != AST_STR) {
                    fe_error(e->src, n->loc, "a LoRA target is a parameter or module name");
                    continue;
                }
                t->lora_targets[k] = (LoraTarget){n->name, n->loc};
            }
            continue;
        }
        if (strcmp(a->name, "r") == 0) {
            Value v = want(e, s, a->lhs, V_INT, V_INT, "r");
            if (v.kind == V_INT && v.i < 1)
                fe_error(e->src, a->lhs->loc, "r must be positive");
            t->lora_r = v.i;
        } else if (strcmp(a->name, "alpha") == 0) {
            t->lora_alpha = as_float(want(e, s, a->lhs, V_FLOAT, V_INT, "alpha"));
        } else if (strcmp(a->name, "dropout") == 0) {
            Value v = want(e, s, a->lhs, V_FLOAT, V_INT, "dropout");
            if (v.kind != V_NONE && !(as_float(v) >= 0 && as_float(v) < 1))
                fe_error(e->src, a->lhs->loc, "dropout must be in [0, 1)");
            t->lora_dropout = as_float(v);
        } else {
            fe_error(e->src, a->loc, "unknown lora argument '%s' (r, alpha, dropout, targets)",
                     a->name);
        }
    }
    if (!have_targets)
        fe_error(e->src, x->loc, "lora needs targets = [...]");
}

static void read_quantize(Elab *e, Scope *s, const Ast *x, TrainSpec *t) {
    t->quantize = true;
    const Ast *a = x->args;
    if (!a || a->name || a->lhs->kind != AST_IDENT || strcmp(a->lhs->name, "nf4") != 0) {
        fe_error(e->src, a ? a->loc : x->loc, "quantize supports nf4: quantize(nf4, double_quant = true)");
        return;
    }
    for (a = a->next; a; a = a->next) {
        if (!a->name || strcmp(a->name, "double_quant") != 0) {
            fe_error(e->src, a->loc, "unknown quantize argument (double_quant = true|false)");
            continue;
        }
        Value v = want(e, s, a->lhs, V_BOOL, V_BOOL, "double_quant");
        t->double_quant = v.kind == V_BOOL && v.i;
    }
}

// grad_scaler(init_scale = 65536, growth_factor = 2.0, backoff_factor = 0.5,
//             growth_interval = 2000) — torch.amp.GradScaler's names and defaults.
static void read_grad_scaler(Elab *e, Scope *s, const Ast *x, TrainSpec *t) {
    for (const Ast *a = x->args; a; a = a->next) {
        if (!a->name) {
            fe_error(e->src, a->loc, "grad_scaler arguments are named: init_scale = 65536, ...");
            continue;
        }
        double *dst = !strcmp(a->name, "init_scale")       ? &t->scale_init
                      : !strcmp(a->name, "growth_factor")  ? &t->scale_growth
                      : !strcmp(a->name, "backoff_factor") ? &t->scale_backoff
                                                           : NULL;
        if (!dst && strcmp(a->name, "growth_interval") != 0) {
            fe_error(e->src, a->loc, "unknown grad_scaler argument '%s' (init_scale, growth_factor, "
                     "backoff_factor, growth_interval)", a->name);
            continue;
        }
        Value v = dst ? want(e, s, a->lhs, V_FLOAT, V_INT, a->name) : want(e, s, a->lhs, V_INT, V_INT, a->name);
        if (v.kind == V_NONE)
            continue;
        double f = as_float(v);
        bool ok = dst == &t->scale_init      ? f > 0 && isfinite(f)
                  : dst == &t->scale_growth  ? f > 1 && isfinite(f)
                  : dst == &t->scale_backoff ? f > 0 && f < 1
                                             : v.i >= 1 && v.i <= (1ll << 40);
        if (!ok) {
            fe_error(e->src, a->lhs->loc, "%s must be %s", a->name,
                     dst == &t->scale_init ? "positive" : dst == &t->scale_growth ? "above 1"
                     : dst == &t->scale_backoff ? "between 0 and 1" : "a positive number of steps");
            continue;
        }
        if (dst)
            *dst = f;
        else
            t->scale_interval = v.i;
    }
}

static void read_precision(Elab *e, const Ast *x, TrainSpec *t) {
    static const struct { const char *name; Precision p; } names[] = {
        {"bf16", PREC_BF16}, {"fp16", PREC_FP16}, {"fp32", PREC_FP32}, {"bf16_pure", PREC_BF16_PURE}};
    for (size_t i = 0; x->kind == AST_IDENT && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(x->name, names[i].name) == 0) {
            t->precision = names[i].p;
            t->master_weights = t->precision == PREC_BF16 || t->precision == PREC_FP16;
            t->optim_dtype = t->precision == PREC_BF16_PURE ? DT_BF16 : DT_F32;
            return;
        }
    fe_error(e->src, x->loc, "precision must be bf16, fp16, fp32 or bf16_pure");
}

static void read_schedule(Elab *e, const Ast *x, TrainSpec *t) {
    static const char *const names[] = {"constant", "linear", "cosine"};
    for (int i = 0; x->kind == AST_IDENT && i < 3; i++)
        if (strcmp(x->name, names[i]) == 0) {
            t->lr_schedule = (LrSchedule)i;
            return;
        }
    fe_error(e->src, x->loc, "lr_schedule must be constant, linear or cosine");
}

// A train setting that is a number: an integer in [lo, hi] (is_int), else a float >= lo.
static void read_number(Elab *e, Scope *s, const Ast *it, bool is_int, double lo, double hi,
                        void *dst) {
    Value v = is_int ? want(e, s, it->lhs, V_INT, V_INT, it->name)
                     : want(e, s, it->lhs, V_FLOAT, V_INT, it->name);
    if (v.kind == V_NONE)
        return;
    double x = as_float(v);
    if (!(x >= lo && x <= hi)) {
        if (is_int)
            fe_error(e->src, it->lhs->loc, "%s must be between %.0f and %.0f", it->name, lo, hi);
        else
            fe_error(e->src, it->lhs->loc, "%s must be at least %g", it->name, lo);
        return;
    }
    if (is_int)
        *(int64_t *)dst = v.i;
    else
        *(double *)dst = x;
}

// What read_train notes beside the spec: which settings were given, and where those that
// later checks point at are.
typedef struct TrainSeen {
    bool seq, batch, loss, scaler;
    SrcLoc schedule, min_lr, warmup, scaler_at;
} TrainSeen;

// A train directive `c`: lora(...), quantize(...) or grad_scaler(...).
static void read_directive(Elab *e, Scope *s, const Ast *c, TrainSpec *t, TrainSeen *seen) {
    if (strcmp(c->name, "lora") == 0)
        read_lora(e, s, c, t);
    else if (strcmp(c->name, "quantize") == 0)
        read_quantize(e, s, c, t);
    else if (strcmp(c->name, "grad_scaler") == 0)
        read_grad_scaler(e, s, c, t), seen->scaler_at = c->loc, seen->scaler = true;
    else
        fe_error(e->src, c->loc, "unknown train directive '%s' (lora, quantize, grad_scaler)",
                 c->name);
}

// seq, batch or micro_batch = N, from 1 to 2^24.
static void read_batch_size(Elab *e, Scope *s, const Ast *it, TrainSpec *t, TrainSeen *seen) {
    const char *k = it->name;
    Value v = want(e, s, it->lhs, V_INT, V_INT, k);
    if (v.kind == V_INT && (v.i < 1 || v.i > (1 << 24))) {
        fe_error(e->src, it->lhs->loc, "%s must be between 1 and %d", k, 1 << 24);
        return;
    }
    if (k[0] == 's')
        t->seq = v.i, seen->seq = v.kind == V_INT;
    else if (k[0] == 'b')
        t->batch = v.i, seen->batch = v.kind == V_INT;
    else
        t->micro_batch = v.i;
}

static const char *const ref_names[REF_COUNT] = {"none", "auto", "copy", "lora_off", "precomputed"};

const char *ref_mode_name(RefMode r) { return r < REF_COUNT ? ref_names[r] : "?"; }

// A preference loss's `key = value` into t.
static void read_pref_arg(Elab *e, Scope *s, const Ast *a, TrainSpec *t) {
    int kind = t->pref_kind;
    const char *name = pref_kind_name(kind);
    bool smooths = kind == PREF_DPO || kind == PREF_SIMPO, simpo = kind == PREF_SIMPO;
    if (strcmp(a->name, "reference") == 0 && pref_needs_reference(kind)) {
        int r = REF_AUTO;
        while (a->lhs->kind == AST_IDENT && r < REF_COUNT && strcmp(a->lhs->name, ref_names[r]) != 0)
            r++;
        if (a->lhs->kind != AST_IDENT || r >= REF_COUNT) {
            fe_error(e->src, a->lhs->loc, "reference must be auto (the planner's choice), copy (a frozen "
                     "copy of the weights), lora_off (the base without its adapters) or precomputed (an "
                     "earlier pass over the data)");
            return;
        }
        t->reference = (RefMode)r, t->reference_loc = a->lhs->loc;
        return;
    }
    double lo = 0, hi = INFINITY, *dst = NULL;
    if (strcmp(a->name, "beta") == 0)
        dst = &t->pref_beta, lo = 1e-12;
    else if (strcmp(a->name, "label_smoothing") == 0 && smooths)
        dst = &t->pref.smoothing, hi = 0.5;
    else if (strcmp(a->name, "gamma") == 0 && simpo)
        dst = &t->pref.gamma, lo = -INFINITY;
    else if (strcmp(a->name, "alpha") == 0 && simpo)
        dst = &t->pref.alpha;
    if (!dst) {
        fe_error(e->src, a->loc, "%s takes beta%s%s%s, not '%s'", name, smooths ? ", label_smoothing" : "",
                 simpo ? ", gamma, alpha" : "", pref_needs_reference(kind) ? ", reference" : "", a->name);
        return;
    }
    Value v = want(e, s, a->lhs, V_FLOAT, V_INT, a->name);
    if (v.kind == V_NONE)
        return;
    if (!(as_float(v) >= lo && as_float(v) <= hi) || !isfinite(as_float(v)))
        fe_error(e->src, a->lhs->loc, "%s must be %s, not %g", a->name,
                 dst == &t->pref_beta ? "positive" : dst == &t->pref.smoothing ? "in [0, 0.5]"
                                                   : dst == &t->pref.alpha ? "non-negative" : "finite",
                 as_float(v));
    else
        *dst = as_float(v);
}

// loss = NAME(forward(...), next(tokens), key = value, ...): cross entropy, or a preference
// loss and its constants (TRL's defaults: beta 0.1, simpo's gamma 0.5). The forward and
// next arguments are build_loss's to check.
static void read_loss(Elab *e, Scope *s, const Ast *x, TrainSpec *t) {
    t->loss_loc = x->loc;
    t->pref_kind = -1;
    t->reference = REF_NONE;
    if (x->kind != AST_CALL || strcmp(x->name, "cross_entropy") == 0)
        return;
    int kind;
    if (!pref_kind_find(x->name, &kind)) {
        fe_error(e->src, x->loc, "unknown loss '%s' (cross_entropy, or the preference losses dpo, ipo, "
                 "orpo and simpo)", x->name);
        return;
    }
    t->pref_kind = kind, t->pref_beta = 0.1;
    t->pref = (OpPref){.kind = kind, .gamma = kind == PREF_SIMPO ? 0.5 : 0.0};
    t->reference = pref_needs_reference(kind) ? REF_AUTO : REF_NONE, t->reference_loc = x->loc;
    int k = 0;
    for (const Ast *a = x->args; a; a = a->next, k++) {
        if (k < 2 && !a->name)
            continue;
        if (!a->name) {
            fe_error(e->src, a->loc, "%s's arguments after forward(...) and next(...) are named: beta = 0.1",
                     x->name);
            continue;
        }
        read_pref_arg(e, s, a, t);
    }
}

// One train setting, `key = value`.
static void read_setting(Elab *e, Scope *s, const Ast *it, TrainSpec *t, TrainSeen *seen) {
    const char *k = it->name;
    if (strcmp(k, "seq") == 0 || strcmp(k, "batch") == 0 || strcmp(k, "micro_batch") == 0) {
        read_batch_size(e, s, it, t, seen);
    } else if (strcmp(k, "budget") == 0 || strcmp(k, "host_mem") == 0) {
        Value v = want(e, s, it->lhs, V_SIZE, V_SIZE, k);
        if (v.kind == V_SIZE)
            *(k[0] == 'b' ? &t->budget_bytes : &t->host_mem_bytes) = v.i;
    } else if (strcmp(k, "loss") == 0) {
        seen->loss = true;
        read_loss(e, s, it->lhs, t);
    } else if (strcmp(k, "precision") == 0) {
        read_precision(e, it->lhs, t);
    } else if (strcmp(k, "master_weights") == 0 || strcmp(k, "packing") == 0) {
        Value v = want(e, s, it->lhs, V_BOOL, V_BOOL, k);
        if (k[0] == 'p') {
            t->packing = v.kind == V_BOOL && v.i;
        } else {
            t->master_weights = v.kind == V_BOOL && v.i;
            t->master_loc = it->lhs->loc;
        }
    } else if (strcmp(k, "optimizer") == 0) {
        read_optimizer(e, s, it->lhs, t);
    } else if (strcmp(k, "lr_schedule") == 0) {
        read_schedule(e, it->lhs, t);
        seen->schedule = it->lhs->loc;
    } else if (strcmp(k, "warmup_steps") == 0) {
        read_number(e, s, it, true, 0, 1e12, &t->warmup_steps);
        seen->warmup = it->lhs->loc;
    } else if (strcmp(k, "steps") == 0) {
        read_number(e, s, it, true, 1, 1e12, &t->steps);
    } else if (strcmp(k, "min_lr") == 0) {
        read_number(e, s, it, false, 0, INFINITY, &t->min_lr);
        seen->min_lr = it->lhs->loc;
    } else if (strcmp(k, "clip") == 0) {
        read_number(e, s, it, false, 0, INFINITY, &t->clip);
    } else {
        fe_error(e->src, it->loc,
                 "unknown train setting '%s' (seq, batch, micro_batch, loss, precision, "
                 "master_weights, packing, optimizer, lr_schedule, warmup_steps, steps, min_lr, clip, "
                 "budget, host_mem)", k);
    }
}

// The checks across settings once all are read: the schedule's, and what train needs.
static void check_train(Elab *e, const Ast *train, const TrainSpec *t, const TrainSeen *seen) {
    if (t->min_lr > t->lr)
        fe_error(e->src, seen->min_lr, "min_lr %g is above the learning rate %g", t->min_lr, t->lr);
    if (t->steps && t->warmup_steps > t->steps)
        fe_error(e->src, seen->warmup, "warmup_steps %lld is more than steps %lld",
                 (long long)t->warmup_steps, (long long)t->steps);
    if (t->lr_schedule != LR_CONSTANT && !t->steps)
        fe_error(e->src, seen->schedule, "lr_schedule = %s decays over the run: it needs steps = N",
                 t->lr_schedule == LR_LINEAR ? "linear" : "cosine");
    if (!seen->seq)
        fe_error(e->src, train->loc, "train needs seq = N");
    if (!seen->batch)
        fe_error(e->src, train->loc, "train needs batch = N");
    if (!seen->loss)
        fe_error(e->src, train->loc, "train needs loss = cross_entropy(forward(tokens), next(tokens))");
    if (t->quantize && !t->lora)
        fe_error(e->src, train->loc, "quantize(nf4) stores frozen weights: add lora(...) to train "
                                     "adapters on the quantised base");
    if (seen->batch && t->micro_batch && t->batch % t->micro_batch)
        fe_error(e->src, train->loc, "micro_batch %lld does not divide batch %lld",
                 (long long)t->micro_batch, (long long)t->batch);
    if (t->pref_kind >= 0) {   // rows in pairs, each pair in one micro-batch
        const char *name = pref_kind_name(t->pref_kind);
        if (seen->batch && (t->batch % 2 || t->micro_batch % 2))
            fe_error(e->src, t->loss_loc, "%s trains on pairs, a chosen and a rejected row in the same "
                     "micro-batch: batch (%lld) and micro_batch (%lld) must be even", name,
                     (long long)t->batch, (long long)t->micro_batch);
        if (t->reference == REF_LORA_OFF && !t->lora)
            fe_error(e->src, t->reference_loc, "reference = lora_off runs the base without its adapters, "
                     "but this train section has no lora(...): use copy or precomputed");
    }
}

// The precision's consequences: fp32 keeps no master copy; the loss scaler, Kahan and
// master weights each only where the precision needs them.
static void check_precision(Elab *e, TrainSpec *t, const TrainSeen *seen) {
    if (t->precision == PREC_FP32)
        t->master_weights = false;
    if (seen->scaler && t->precision != PREC_FP16)
        fe_error(e->src, seen->scaler_at, "grad_scaler scales the loss for fp16, whose gradients "
                 "underflow without it; %s needs none", t->precision == PREC_FP32 ? "fp32"
                 : "bf16 (8 exponent bits, fp32's range)");
    // Kahan compensates bf16 weights that AdamW updates in place; a master copy needs none.
    if (t->kahan == 1 && !(t->precision == PREC_BF16_PURE && !t->master_weights && fe_adam_like(t->optimizer)))
        fe_error(e->src, t->kahan_loc,
                 "kahan compensates bf16 weights that AdamW updates in place (precision = bf16_pure, "
                 "no master weights); %s", t->master_weights ? "here the fp32 master copy takes every "
                 "update whole" : "this precision has no such weights");
    // fp16 weights updated by AdamW in place: an update below half an fp16 ulp (2^-11 of
    // the weight) is lost, and the loss scale has nowhere to be undone exactly.
    if (t->precision == PREC_FP16 && !t->master_weights && fe_adam_like(t->optimizer))
        fe_error(e->src, t->master_loc,
                 "fp16 AdamW needs the fp32 master copy: updated in fp16 itself, a weight loses every "
                 "update below half its ulp (2^-11 of the weight: most of AdamW's at lr 1e-4 and "
                 "below); keep master_weights (the default for fp16), or train in bf16_pure, whose "
                 "updates are Kahan-compensated");
}

static void read_train(Elab *e, Scope *s, const Ast *train, TrainSpec *t) {
    *t = (TrainSpec){.precision = PREC_BF16, .master_weights = true, .optim_dtype = DT_F32,
                     .optimizer = OPTIM_ADAMW, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999,
                     .min_8bit_size = IR_ADAM8_MIN_ELEMS,
                     .eps = 1e-8, .weight_decay = 0.01, .scale_init = 65536.0, .scale_growth = 2.0,
                     .scale_backoff = 0.5, .scale_interval = 2000, .kahan = -1};
    TrainSeen seen = {.schedule = train->loc, .min_lr = train->loc, .warmup = train->loc,
                      .scaler_at = train->loc};
    t->master_loc = train->loc;
    for (const Ast *it = train->body; it; it = it->next) {
        if (it->kind == AST_EXPR_STMT)
            read_directive(e, s, it->lhs, t, &seen);
        else
            read_setting(e, s, it, t, &seen);
    }
    check_train(e, train, t, &seen);
    check_precision(e, t, &seen);
}

// Folds the model's constants into scope `s` (in order; later ones see earlier).
static void fold_constants(Elab *e, Scope *s, const Ast *model) {
    for (const Ast *it = model->body; it; it = it->next) {
        if (it->kind != AST_ASSIGN)
            continue;
        Value v = eval(e, s, it->lhs, NULL);
        if (v.kind == V_NONE)
            continue;
        if (v.kind == V_TENSOR || v.kind == V_LIST) {
            fe_error(e->src, it->lhs->loc, "a model constant must be a number");
            continue;
        }
        if (lookup(s, it->name) && !reserved(it->name)) {
            fe_error(e->src, it->loc, "constant '%s' is defined twice", it->name);
            continue;
        }
        bind(s, it->name, v);
    }
}

int fe_check(FtSource *src, Ast *program, FtModel *m, Arena *a) {
    memset(m, 0, sizeof *m);
    m->program = program;
    Elab e = {.src = src, .m = m, .a = a, .positions = -1};
    const Ast *model = NULL, *train = NULL;
    for (const Ast *s = program->body; s; s = s->next) {
        const Ast **slot = s->kind == AST_MODEL ? &model : &train;
        if (*slot) {
            fe_error(src, s->loc, "only one %s section is allowed", s->kind == AST_MODEL ? "model" : "train");
            fe_note(src, (*slot)->loc, "the first one is here");
        }
        *slot = s;
    }
    if (!model)
        fe_error(src, program->loc, "no model section");
    if (!train)
        fe_error(src, program->loc, "no train section");
    if (!model || !train)
        goto out;
    m->name = model->name;
    check_names(&e, model->body);
    Scope consts = {.prefix = "", .hf_prefix = "", .layer = -1};
    e.model = &consts;
    bind(&consts, "B", (Value){.kind = V_INT, .i = 1});
    bind(&consts, "S", (Value){.kind = V_INT, .i = 1});
    fold_constants(&e, &consts, model);
    make_params(&e, &consts, model->body);
    int forwards = 0;
    for (const Ast *it = model->body; it; it = it->next) {
        if (it->kind == AST_FORWARD && forwards++)
            fe_error(src, it->loc, "only one forward is allowed");
        if (it->kind == AST_BLOCK)
            check_names(&e, it->body);
        if (it->kind == AST_BLOCK && ast_count(it->inputs) == 0)
            fe_error(src, it->loc, "block '%s' needs at least one input", it->name);
    }
    if (!forwards)
        fe_error(src, model->loc, "model '%s' has no forward", model->name);
    read_train(&e, &consts, train, &m->train);
    vec_free(&consts.vars);
out:
    return src->errors ? -1 : 0;
}

//
// Building the graph.
//

static IrStep step_of(const TrainSpec *t) {
    IrStep st = {.optim_dt = t->optim_dtype, .master = t->master_weights, .clip = t->clip,
                 .weight_decay = t->weight_decay, .decay_all = t->decay_all,
                 .kahan = t->precision == PREC_BF16_PURE && !t->master_weights && fe_adam_like(t->optimizer) &&
                          t->kahan != 0,
                 .adam8 = t->optimizer == OPTIM_ADAMW8BIT, .adam8_min_elems = t->min_8bit_size};
    switch (t->precision) {
    case PREC_BF16:
    case PREC_BF16_PURE: st.weight_dt = st.compute_dt = st.grad_dt = DT_BF16; break;
    case PREC_FP16: st.weight_dt = st.compute_dt = st.grad_dt = DT_F16; break;
    case PREC_FP32: st.weight_dt = st.compute_dt = st.grad_dt = DT_F32; break;
    }
    st.optim_states = fe_adam_like(t->optimizer) ? 2 : 0;
    return st;
}

// The forward's body in scope fs (its inputs bound): the tensor it returns, named `name`, or
// none() after an error.
static Value eval_forward(Elab *e, Scope *fs, const Ast *fwd, const char *name) {
    Value logits = none();
    for (const Ast *st = fwd->body; st; st = st->next) {
        if (st->kind == AST_ASSIGN) {
            Value v = eval(e, fs, st->lhs, st->name);
            if (v.kind == V_NONE)
                return none();
            bind(fs, st->name, v);
        } else if (st->kind == AST_RETURN) {
            logits = eval(e, fs, st->lhs, name);
            break;
        }
    }
    if (logits.kind != V_TENSOR && !e->src->errors)
        fe_error(e->src, fwd->loc, "forward must return a tensor of logits");
    return logits.kind == V_TENSOR ? logits : none();
}

// The reference model's log-probabilities of the targets (dpo, ipo): the forward once more,
// its nodes marked as the reference's; with reference = copy on a frozen copy of every
// parameter it reads (add_node swaps them in).
static int reference_logprobs(Elab *e, Scope *fs, const Ast *fwd, int tgt, SrcLoc loc) {
    Scope rs = {.parent = e->model, .prefix = "", .hf_prefix = "", .layer = -1};
    for (int i = 0; i < fs->vars.len; i++)   // the batch inputs alone: bound first
        if (fs->vars.at[i].v.kind == V_TENSOR && e->g->tensors.at[fs->vars.at[i].v.i].kind == TK_INPUT)
            bind(&rs, fs->vars.at[i].name, fs->vars.at[i].v);
    // Its blocks are the policy's layers again: their instances counted from 0 once more.
    for (int i = 0; i < e->model->vars.len; i++)
        if (strncmp(e->model->vars.at[i].name, "#calls.", 7) == 0)
            e->model->vars.at[i].v.i = 0;
    e->reference = true;
    Value logits = eval_forward(e, &rs, fwd, "logits");
    int lp = -1;
    if (logits.kind == V_TENSOR) {
        int in[2] = {(int)logits.i, tgt};
        Value v = add_node(e, &rs, OP_LOGPROBS, 2, in, (OpAttr){0}, "logprobs", loc, NULL);
        lp = v.kind == V_TENSOR ? (int)v.i : -1;
    }
    e->reference = false;
    vec_free(&rs.vars);
    return lp;
}

// loss = cross_entropy(forward(ARGS), next(tokens)), or a preference loss of the same two
// (dpo, ipo, orpo, simpo; read_loss read its constants): the policy's log-probabilities of
// the targets, the reference's where it has one, and the pairs' loss over their rows.
static int build_loss(Elab *e, Scope *train, const Ast *loss) {
    const Ast *fwd = find_forward(e->m->program);
    const TrainSpec *ts = &e->m->train;
    bool pref = ts->pref_kind >= 0;
    int nargs = loss->kind == AST_CALL ? ast_count(loss->args) : 0;
    bool shape_ok = loss->kind == AST_CALL && nargs >= 2 && (pref || nargs == 2) &&
                    loss->args->lhs->kind == AST_CALL && !loss->args->name &&
                    strcmp(loss->args->lhs->name, "forward") == 0 &&
                    loss->args->next->lhs->kind == AST_CALL && !loss->args->next->name &&
                    strcmp(loss->args->next->lhs->name, "next") == 0 &&
                    ast_count(loss->args->next->lhs->args) == 1;
    if (!shape_ok) {
        if (pref)
            fe_error(e->src, loss->loc, "loss must be %s(forward(tokens), next(tokens), ...)", loss->name);
        else
            fe_error(e->src, loss->loc, "loss must be cross_entropy(forward(tokens), next(tokens)), or a "
                     "preference loss (dpo, ipo, orpo, simpo) of the same two");
        return -1;
    }
    const Ast *fcall = loss->args->lhs, *ncall = loss->args->next->lhs;
    if (ast_count(fcall->args) != ast_count(fwd->inputs)) {
        fe_error(e->src, fcall->loc, "forward takes %d argument%s, got %d", ast_count(fwd->inputs),
                 ast_count(fwd->inputs) == 1 ? "" : "s", ast_count(fcall->args));
        return -1;
    }
    // The batch inputs: forward's declared inputs, named as the call names them.
    Scope fs = {.parent = e->model, .prefix = "", .hf_prefix = "", .layer = -1};
    const Ast *a = fcall->args;
    for (const Ast *p = fwd->inputs; p; p = p->next, a = a->next) {
        if (a->name || a->lhs->kind != AST_IDENT) {
            fe_error(e->src, a->loc, "forward's arguments name the batch inputs, e.g. forward(tokens)");
            goto fail;
        }
        int64_t shape[IR_MAX_DIMS];
        int nd = eval_dims(e, &fs, p->args, shape, p->loc);
        DType dt = e->g->step.compute_dt;
        if (p->dtype && !dtype_parse(p->dtype, &dt)) {
            fe_error(e->src, p->dtype_loc, "unknown dtype '%s'", p->dtype);
            goto fail;
        }
        if (nd < 0)
            goto fail;
        int id = ir_tensor_add(e->g, a->lhs->name, TK_INPUT, dt, nd, shape, p->loc);
        bind(train, a->lhs->name, tensor(id));
        bind(&fs, p->name, tensor(id));
    }
    Value logits = eval_forward(e, &fs, fwd, "logits");
    if (logits.kind != V_TENSOR)
        goto fail;
    Value toks = eval(e, train, ncall->args->lhs, NULL);
    if (toks.kind != V_TENSOR || ir_tensor(e->g, (int)toks.i)->kind != TK_INPUT) {
        if (toks.kind != V_NONE)
            fe_error(e->src, ncall->args->loc, "next(...) takes a batch input, e.g. next(tokens)");
        goto fail;
    }
    // Targets are the input shifted by one: the data loader reads seq + 1 tokens.
    IrTensor *tk = ir_tensor(e->g, (int)toks.i);
    int tgt = ir_tensor_add(e->g, "targets", TK_INPUT, tk->dtype, tk->ndim, tk->shape, ncall->loc);
    // The loss is a mean over the whole optimizer step, however many micro-steps it takes:
    // the training loop counts its trained targets (a preference loss: its pairs, and its
    // chosen rows' trained targets) into target_count.
    int64_t two = 2;
    int cnt = ir_tensor_add(e->g, "target_count", TK_INPUT, DT_I32, pref ? 1 : 0, pref ? &two : NULL, loss->loc);
    Value l;
    if (pref) {
        int in[4] = {(int)logits.i, tgt, cnt, -1};
        Value lp = add_node(e, &fs, OP_LOGPROBS, 2, in, (OpAttr){0}, "logprobs", loss->loc, NULL);
        if (lp.kind != V_TENSOR)
            goto fail;
        if (e->g->reference != REF_NONE && (in[3] = reference_logprobs(e, &fs, fwd, tgt, loss->loc)) < 0)
            goto fail;
        in[0] = (int)lp.i;
        OpAttr at = {.f = ts->pref_beta, .pref = ts->pref};
        l = add_node(e, &fs, OP_PREFERENCE, in[3] >= 0 ? 4 : 3, (int[]){in[0], tgt, cnt, in[3]}, at, "loss",
                     loss->loc, NULL);
    } else {
        int in[3] = {(int)logits.i, tgt, cnt};
        l = add_node(e, &fs, OP_CROSS_ENTROPY, 3, in, (OpAttr){0}, "loss", loss->loc, loss->args);
    }
    vec_free(&fs.vars);
    if (l.kind != V_TENSOR)
        return -1;
    e->g->logits = (int)logits.i;
    e->g->loss = (int)l.i;
    if (pref)
        e->g->pref_stats = e->g->nodes.at[e->g->tensors.at[l.i].producer].out[1];
    return 0;
fail:
    vec_free(&fs.vars);
    return -1;
}

static int by_hf_name(const void *a, const void *b) {
    const IrTensor *x = *(const IrTensor *const *)a, *y = *(const IrTensor *const *)b;
    int c = strcmp(x->hf_name, y->hf_name);
    return c ? c : x->id - y->id;
}

// Two parameters under one checkpoint name would load the same tensor and save over each
// other (a block's `as` without {i}, a copied line): an error at the second, once.
static void check_checkpoint_names(Elab *e) {
    IrGraph *g = e->g;
    int n = 0;
    const IrTensor **t = xmalloc(sizeof *t * (size_t)(g->tensors.len + 1));
    for (int i = 0; i < g->tensors.len; i++)
        if (g->tensors.at[i].kind == TK_PARAM && g->tensors.at[i].hf_name && g->tensors.at[i].copy_of < 0)
            t[n++] = &g->tensors.at[i];   // (a reference's frozen copy shares its parameter's)
    qsort(t, (size_t)n, sizeof *t, by_hf_name);
    for (int i = 1; i < n; i++)
        if (strcmp(t[i - 1]->hf_name, t[i]->hf_name) == 0) {
            fe_error(e->src, t[i]->loc, "parameter %s has the checkpoint name \"%s\" of parameter %s "
                     "(line %d)%s", t[i]->name, t[i]->hf_name, t[i - 1]->name, t[i - 1]->loc.line,
                     t[i]->layer >= 0 ? "; a block's `as` needs {i} for the layer number" : "");
            break;
        }
    free(t);
}

IrGraph *fe_elaborate(FtSource *src, const FtModel *m, int64_t batch, Arena *a) {
    const Ast *model = find_section(m->program, AST_MODEL);
    const Ast *train = find_section(m->program, AST_TRAIN);
    IrGraph *g = ir_graph_new(a);
    g->batch = batch;
    g->seq = m->train.seq;
    g->packing = m->train.packing;
    g->pairs = m->train.pref_kind >= 0;
    // (the planner's choice among the references is the copy or, with LoRA, the base itself)
    g->reference = m->train.reference == REF_AUTO ? (m->train.lora ? REF_LORA_OFF : REF_COPY) : m->train.reference;
    g->step = step_of(&m->train);
    Elab e = {.src = src, .m = m, .g = g, .a = a, .positions = -1};
    Scope consts = {.prefix = "", .hf_prefix = "", .layer = -1};
    e.model = &consts;
    bind(&consts, "B", (Value){.kind = V_INT, .i = batch});
    bind(&consts, "S", (Value){.kind = V_INT, .i = m->train.seq});
    int errors = src->errors;
    fold_constants(&e, &consts, model);
    if (src->errors == errors)
        make_params(&e, &consts, model->body);
    const Ast *loss = NULL;
    for (const Ast *it = train->body; it; it = it->next)
        if (it->kind == AST_ASSIGN && strcmp(it->name, "loss") == 0)
            loss = it->lhs;
    if (src->errors == errors && loss) {
        Scope ts = {.parent = &consts, .prefix = "", .hf_prefix = "", .layer = -1};
        build_loss(&e, &ts, loss);
        vec_free(&ts.vars);
    }
    if (src->errors == errors)
        check_checkpoint_names(&e);
    vec_free(&consts.vars);
    vec_free(&e.rope_tables);
    vec_free(&e.ref_copy);
    if (src->errors != errors) {
        ir_graph_free(g);
        return NULL;
    }
    ir_mark_requires_grad(g);
    ir_set_param_init(g);
    return g;
}

IrGraph *fe_elaborate_at(void *ctx, int64_t micro, int64_t seq, Arena *a) {
    const FtProgram *pr = ctx;
    FtSource src = *pr->src;
    FtModel m = *pr->m;
    m.train.seq = seq;
    return fe_elaborate(&src, &m, micro, a);
}
