// ops.c — the op vocabulary's table (from ops.def) and the text form of op attributes,
// which plans, the plan reader and IR printouts share.
#include "ops.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const OpDesc descs[OP_COUNT] = {
#define OP(id, nm, c, fl, lo, hi, at, fk)                                                    \
    [OP_##id] = {.name = nm, .cls = c, .flags = fl, .min_in = lo, .max_in = hi, .attrs = at, \
                 .f_key = fk},
#include "ops.def"
#undef OP
};

const OpDesc *op_desc(OpKind op) { return (unsigned)op < OP_COUNT ? &descs[op] : NULL; }

bool op_find(const char *name, OpKind *out) {
    for (int i = 0; i < OP_COUNT; i++)
        if (strcmp(descs[i].name, name) == 0) {
            *out = (OpKind)i;
            return true;
        }
    return false;
}

#define PUT(...) (n += snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, __VA_ARGS__))

int op_attr_format(char *buf, size_t cap, OpKind op, const OpAttr *a, bool exact) {
    const OpDesc *d = &descs[op];
    size_t n = 0;
    if (cap)
        buf[0] = '\0';
    if ((d->attrs & ATTR_F) && a->f != 0)
        PUT(exact ? " %s=%.17g" : " %s=%g", d->f_key, a->f);
    if ((d->attrs & ATTR_CAUSAL) && a->causal)
        PUT(" causal=1");
    if (d->attrs & ATTR_PERM)
        PUT(" perm=%d,%d", a->perm[0], a->perm[1]);
    if ((d->attrs & ATTR_SHAPE) && a->ndim > 0) {
        PUT(" shape=");
        for (int i = 0; i < a->ndim && i < OP_MAX_DIMS; i++)
            PUT("%s%lld", i ? "x" : "", (long long)a->shape[i]);
    }
    if ((d->attrs & ATTR_CHUNK) && a->chunk_rows)
        PUT(" chunk=%lld", (long long)a->chunk_rows);
    if ((d->attrs & ATTR_SEED) && a->seed)
        PUT(" seed=%lld", (long long)a->seed);
    const char *g = exact ? "%.17g" : "%g";
#define PUTF(key, v)                                                                               \
    do {                                                                                           \
        PUT(" " key "=");                                                                          \
        PUT(g, (v));                                                                               \
    } while (0)
    if ((d->attrs & ATTR_WINDOW) && a->window)
        PUT(" window=%lld", (long long)a->window);
    if ((d->attrs & ATTR_SOFTCAP) && a->softcap != 0)
        PUTF("softcap", a->softcap);
    if ((d->attrs & ATTR_SCALE) && a->scale != 0)
        PUTF("scale", a->scale);
    if ((d->attrs & ATTR_OFFSET) && a->offset != 0)
        PUTF("offset", a->offset);
    if (d->attrs & (ATTR_SLICE | ATTR_AXIS))
        PUT(" axis=%d", a->axis);
    if (d->attrs & ATTR_SLICE)
        PUT(" start=%lld size=%lld", (long long)a->start, (long long)a->size);
    if (d->attrs & ATTR_ROPE) {
        const OpRope *r = &a->rope;
        if (r->rotary)
            PUT(" rotary=%lld", (long long)r->rotary);
        if (r->scaling != ROPE_PLAIN)
            PUT(" scaling=%s", rope_scaling_name(r->scaling));
        if (r->factor != 0)
            PUTF("factor", r->factor);
        if (r->low != 0)
            PUTF("low", r->low);
        if (r->high != 0)
            PUTF("high", r->high);
        if (r->original)
            PUT(" original=%lld", (long long)r->original);
        if (r->length)
            PUT(" length=%lld", (long long)r->length);
        if (r->attn_factor != 0)
            PUTF("attn_factor", r->attn_factor);
        if (r->no_truncate)
            PUT(" truncate=0");
    }
    if ((d->attrs & ATTR_PAD) && a->pad > 0)
        PUT(" padding=%lld", (long long)(a->pad - 1));
    if (d->attrs & ATTR_PREF) {
        PUT(" loss=%s", pref_kind_name(a->pref.kind));
        if (a->pref.smoothing != 0)
            PUTF("smoothing", a->pref.smoothing);
        if (a->pref.gamma != 0)
            PUTF("gamma", a->pref.gamma);
        if (a->pref.alpha != 0)
            PUTF("alpha", a->pref.alpha);
    }
#undef PUTF
    return (int)n;
}

bool op_attr_equal(OpKind op, const OpAttr *a, const OpAttr *b) {
    char x[512], y[512];
    int nx = op_attr_format(x, sizeof x, op, a, true), ny = op_attr_format(y, sizeof y, op, b, true);
    return nx == ny && nx < (int)sizeof x && strcmp(x, y) == 0;
}

static const char *scaling_names[ROPE_SCALING_COUNT] = {"default", "linear", "dynamic", "llama3", "yarn"};

const char *rope_scaling_name(int scaling) {
    return scaling >= 0 && scaling < ROPE_SCALING_COUNT ? scaling_names[scaling] : "?";
}

bool rope_scaling_find(const char *name, int *out) {
    for (int i = 0; i < ROPE_SCALING_COUNT; i++)
        if (strcmp(scaling_names[i], name) == 0) {
            *out = i;
            return true;
        }
    return false;
}

// A finite double, or false.
static bool parse_real(const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x))
        return false;
    *out = x;
    return true;
}

static const struct { const char *name; int bits; } dtypes[OPD_COUNT] = {
    [OPD_F32] = {"f32", 32}, [OPD_BF16] = {"bf16", 16}, [OPD_F16] = {"f16", 16},
    [OPD_I32] = {"i32", 32}, [OPD_U8] = {"u8", 8},      [OPD_NF4] = {"nf4", 4},
};

const char *op_dtype_name(OpDType t) { return t < OPD_COUNT ? dtypes[t].name : "?"; }

bool op_dtype_parse(const char *s, OpDType *out) {
    for (int i = 0; i < OPD_COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0) {
            *out = (OpDType)i;
            return true;
        }
    return false;
}

int64_t op_dtype_bytes(OpDType t, int64_t elems) { return (elems * dtypes[t].bits + 7) / 8; }

bool ops_parse_i64(const char *s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *v = x;
    return true;
}

// "x,y": the two axes a transpose swaps.
static int parse_perm(const char *v, OpAttr *a) {
    int64_t x, y;
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s", v);
    char *comma = strchr(tmp, ',');
    if (!comma)
        return -1;
    *comma = '\0';
    if (!ops_parse_i64(tmp, &x) || !ops_parse_i64(comma + 1, &y) || x < 0 || y < 0 ||
        x >= OP_MAX_DIMS || y >= OP_MAX_DIMS)
        return -1;
    a->perm[0] = (int)x, a->perm[1] = (int)y;
    return 1;
}

// "8x64": a reshape's positive dims.
static int parse_shape(const char *v, OpAttr *a) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", v);
    a->ndim = 0;
    for (char *save, *p = strtok_r(tmp, "x", &save); p; p = strtok_r(NULL, "x", &save)) {
        if (a->ndim == OP_MAX_DIMS || !ops_parse_i64(p, &a->shape[a->ndim]) || a->shape[a->ndim] <= 0)
            return -1;
        a->ndim++;
    }
    return a->ndim > 0 ? 1 : -1;
}

static const char *pref_names[PREF_KIND_COUNT] = {"dpo", "ipo", "orpo", "simpo"};

const char *pref_kind_name(int kind) {
    return kind >= 0 && kind < PREF_KIND_COUNT ? pref_names[kind] : "?";
}

bool pref_kind_find(const char *name, int *out) {
    for (int i = 0; i < PREF_KIND_COUNT; i++)
        if (strcmp(name, pref_names[i]) == 0)
            return *out = i, true;
    return false;
}

// One key of a preference loss's attributes into *p, as op_attr_parse answers.
static int parse_pref(const char *key, const char *v, OpPref *p) {
    if (strcmp(key, "loss") == 0)
        return pref_kind_find(v, &p->kind) ? 1 : -1;
    double *f = !strcmp(key, "smoothing") ? &p->smoothing
                : !strcmp(key, "gamma")   ? &p->gamma
                : !strcmp(key, "alpha")   ? &p->alpha
                                          : NULL;
    return f ? (parse_real(v, f) ? 1 : -1) : 0;
}

// One key of a rotary embedding's attributes into *r, as op_attr_parse answers.
static int parse_rope(const char *key, const char *v, OpRope *r) {
    if (strcmp(key, "rotary") == 0)
        return ops_parse_i64(v, &r->rotary) && r->rotary >= 0 && r->rotary <= (1 << 20) ? 1 : -1;
    if (strcmp(key, "scaling") == 0)
        return rope_scaling_find(v, &r->scaling) ? 1 : -1;
    double *f = !strcmp(key, "factor")        ? &r->factor
                : !strcmp(key, "low")         ? &r->low
                : !strcmp(key, "high")        ? &r->high
                : !strcmp(key, "attn_factor") ? &r->attn_factor
                                              : NULL;
    if (f)
        return parse_real(v, f) ? 1 : -1;
    int64_t *n = !strcmp(key, "original") ? &r->original : !strcmp(key, "length") ? &r->length : NULL;
    if (n)
        return ops_parse_i64(v, n) && *n >= 0 && *n <= (1LL << 40) ? 1 : -1;
    if (strcmp(key, "truncate") == 0) {
        if (strcmp(v, "0") && strcmp(v, "1"))
            return -1;
        r->no_truncate = v[0] == '0';
        return 1;
    }
    return 0;
}

int op_attr_parse(OpKind op, const char *key, const char *v, OpAttr *a) {
    const OpDesc *d = &descs[op];
    if ((d->attrs & ATTR_F) && strcmp(key, d->f_key) == 0) {
        char *end;
        errno = 0;
        a->f = strtod(v, &end);
        return !errno && end != v && !*end ? 1 : -1;
    }
    if ((d->attrs & ATTR_CAUSAL) && strcmp(key, "causal") == 0) {
        if (strcmp(v, "0") && strcmp(v, "1"))
            return -1;
        a->causal = v[0] == '1';
        return 1;
    }
    if ((d->attrs & ATTR_PERM) && strcmp(key, "perm") == 0)
        return parse_perm(v, a);
    if ((d->attrs & ATTR_SHAPE) && strcmp(key, "shape") == 0)
        return parse_shape(v, a);
    if ((d->attrs & ATTR_CHUNK) && strcmp(key, "chunk") == 0)
        return ops_parse_i64(v, &a->chunk_rows) && a->chunk_rows >= 0 ? 1 : -1;
    if ((d->attrs & ATTR_SEED) && strcmp(key, "seed") == 0)
        return ops_parse_i64(v, &a->seed) ? 1 : -1;
    int64_t i;
    if ((d->attrs & ATTR_WINDOW) && strcmp(key, "window") == 0)
        return ops_parse_i64(v, &a->window) && a->window >= 0 ? 1 : -1;
    if ((d->attrs & ATTR_SOFTCAP) && strcmp(key, "softcap") == 0)
        return parse_real(v, &a->softcap) && a->softcap >= 0 ? 1 : -1;
    if ((d->attrs & ATTR_SCALE) && strcmp(key, "scale") == 0)
        return parse_real(v, &a->scale) && a->scale >= 0 ? 1 : -1;
    if ((d->attrs & ATTR_OFFSET) && strcmp(key, "offset") == 0)
        return parse_real(v, &a->offset) ? 1 : -1;
    if ((d->attrs & (ATTR_SLICE | ATTR_AXIS)) && strcmp(key, "axis") == 0) {
        if (!ops_parse_i64(v, &i) || i < 0 || i >= OP_MAX_DIMS)
            return -1;
        a->axis = (int)i;
        return 1;
    }
    if ((d->attrs & ATTR_SLICE) && (strcmp(key, "start") == 0 || strcmp(key, "size") == 0)) {
        int64_t *dst = key[1] == 't' ? &a->start : &a->size;
        return ops_parse_i64(v, dst) && *dst >= 0 && *dst <= (1LL << 50) ? 1 : -1;
    }
    if ((d->attrs & ATTR_PAD) && strcmp(key, "padding") == 0) {
        if (!ops_parse_i64(v, &i) || i < 0 || i >= (1LL << 40))
            return -1;
        a->pad = i + 1;
        return 1;
    }
    if (d->attrs & ATTR_PREF)
        return parse_pref(key, v, &a->pref);
    return d->attrs & ATTR_ROPE ? parse_rope(key, v, &a->rope) : 0;
}

static const char *stream_names[STREAM_COUNT] = {"compute", "d2h", "h2d", "host", "comm"};

const char *stream_name(Stream s) { return (unsigned)s < STREAM_COUNT ? stream_names[s] : "?"; }

bool stream_find(const char *name, Stream *out) {
    for (int i = 0; i < STREAM_COUNT; i++)
        if (strcmp(stream_names[i], name) == 0) {
            *out = (Stream)i;
            return true;
        }
    return false;
}
