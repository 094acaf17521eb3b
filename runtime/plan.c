// plan.c — reads a plan file (the format is in plan.h) and checks what the runtime
// relies on: every id in range, every buffer inside its arena, every instruction's
// operands present.
#include "plan.h"
#include "fileio.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// A plan is text of a few lines per buffer and instruction: tens of MiB for the largest
// models; a file far larger than that is not a plan.
#define PLAN_MAX_BYTES (1 << 30)

static const char *phase_names[PHASE_COUNT] = {"forward", "backward", "optimizer", "eval", "decode", "reference"};

const char *plan_phase_name(PlanPhase p) { return phase_names[p]; }

PlanPhase plan_instr_phase(const Plan *p, int id) {
    for (int ph = 0; ph < PHASE_COUNT; ph++) {
        if (id < p->nins[ph])
            return (PlanPhase)ph;
        id -= p->nins[ph];
    }
    return PHASE_OPT;
}

const char *fmt_bytes(char *buf, size_t cap, int64_t b) {
    double x = (double)b;
    if (b >= (1LL << 30) || b <= -(1LL << 30))
        snprintf(buf, cap, "%.2f GiB", x / 0x1p30);
    else if (b >= (1LL << 20) || b <= -(1LL << 20))
        snprintf(buf, cap, "%.1f MiB", x / 0x1p20);
    else if (b >= (1LL << 10) || b <= -(1LL << 10))
        snprintf(buf, cap, "%.1f KiB", x / 0x1p10);
    else
        snprintf(buf, cap, "%lld B", (long long)b);
    return buf;
}

int64_t plan_elems(const PlanBuffer *b) {
    int64_t n = 1;
    for (int i = 0; i < b->ndim; i++)
        n *= b->shape[i];
    return n;
}

typedef struct Reader {
    FILE *f;
    const char *path;
    int line;
    char *buf;
    size_t cap;
    char *err;
    size_t errlen;
} Reader;

static int bad(Reader *r, const char *fmt, ...) {
    int n = snprintf(r->err, r->errlen, "%s:%d: ", r->path, r->line);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < r->errlen)
        vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

// Reads the next non-empty, non-comment line; NULL at end of file.
static char *next_line(Reader *r) {
    for (;;) {
        ssize_t n = getline(&r->buf, &r->cap, r->f);
        if (n < 0)
            return NULL;
        r->line++;
        while (n > 0 && (r->buf[n - 1] == '\n' || r->buf[n - 1] == '\r'))
            r->buf[--n] = '\0';
        char *p = r->buf;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p && *p != '#')
            return p;
    }
}

// Splits `s` at spaces into at most `max` words (in place).
static int words(char *s, char **w, int max) {
    int n = 0;
    for (char *p = strtok(s, " \t"); p && n < max; p = strtok(NULL, " \t"))
        w[n++] = p;
    return n;
}


static bool parse_int(const char *s, int *v) {
    int64_t x;
    if (!ops_parse_i64(s, &x) || x < -1 || x > 1 << 30)
        return false;
    *v = (int)x;
    return true;
}

static bool parse_f64(const char *s, double *v) {
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return !errno && end != s && !*end;
}

// "8x64x64" or "-" (a scalar).
static bool parse_shape(const char *s, int *ndim, int64_t *shape) {
    *ndim = 0;
    if (strcmp(s, "-") == 0)
        return true;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", s);
    int64_t elems = 1;   // at most 2^50 elements: no product of dims or bytes overflows
    for (char *save, *p = strtok_r(tmp, "x", &save); p; p = strtok_r(NULL, "x", &save)) {
        if (*ndim == PLAN_MAX_DIMS || !ops_parse_i64(p, &shape[*ndim]) || shape[*ndim] <= 0 ||
            shape[*ndim] > (INT64_C(1) << 50) / elems)
            return false;
        elems *= shape[*ndim];
        (*ndim)++;
    }
    return *ndim > 0;
}

// "3,4,-1" into at most `max` ints.
static int parse_list(const char *s, int *v, int max) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", s);
    int n = 0;
    for (char *save, *p = strtok_r(tmp, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (n == max || !parse_int(p, &v[n]))
            return -1;
        n++;
    }
    return n;
}

// A header setting's outcome: 1 fine, 0 a bad value (reported as such by read_header),
// -1 an error already reported.
typedef int SettingFn(Reader *r, Plan *p, char *key, char *v);

// The key=value settings w[from..n) of header line `w[0]`, each given to fn.
static int read_settings(Reader *r, Plan *p, char **w, int from, int n, SettingFn *fn) {
    int ok = 1;
    for (int i = from; ok > 0 && i < n; i++) {
        char *eq = strchr(w[i], '=');
        if (!eq)
            return bad(r, "%s settings are key=value", w[0]);
        *eq = '\0';
        ok = fn(r, p, w[i], eq + 1);
    }
    return ok;
}

// estimate model_flops=N step_us=X
static int estimate_setting(Reader *r, Plan *p, char *key, char *v) {
    if (!strcmp(key, "model_flops"))
        return ops_parse_i64(v, &p->model_flops) && p->model_flops >= 0;
    if (!strcmp(key, "step_us"))
        return parse_f64(v, &p->est_step_us) && isfinite(p->est_step_us) && p->est_step_us >= 0;
    return bad(r, "unknown estimate setting '%s'", key);
}

// "LO,HI": a range of the host model's holds, 0 <= LO <= HI.
static bool parse_holds(char *v, double *lo, double *hi) {
    char *comma = strchr(v, ',');
    if (!comma)
        return false;
    *comma = '\0';
    return parse_f64(v, lo) && parse_f64(comma + 1, hi) && *lo >= 0 && *hi >= *lo && !isnan(*lo) &&
           !isnan(*hi);
}

// host cores=N adamw_per_core=X link=X adamw_holds=LO,HI link_holds=LO,HI
static int host_setting(Reader *r, Plan *p, char *key, char *v) {
    if (!strcmp(key, "cores"))
        return parse_int(v, &p->host_cores) && p->host_cores > 0;
    if (!strcmp(key, "adamw_per_core"))
        return parse_f64(v, &p->host_adamw_per_core) && isfinite(p->host_adamw_per_core) &&
               p->host_adamw_per_core > 0;
    if (!strcmp(key, "link"))
        return parse_f64(v, &p->host_link) && isfinite(p->host_link) && p->host_link > 0;
    if (!strcmp(key, "adamw_holds"))
        return parse_holds(v, &p->adamw_lo, &p->adamw_hi);
    if (!strcmp(key, "link_holds"))
        return parse_holds(v, &p->link_lo, &p->link_hi);
    return bad(r, "unknown host setting '%s'", key);
}

// lora r=N alpha=X dropout=X targets=A,B fan_in_fan_out=0|1 (other keys are skipped)
static int lora_setting(Reader *r, Plan *p, char *key, char *v) {
    (void)r;
    if (!strcmp(key, "r"))
        return ops_parse_i64(v, &p->lora_r) && p->lora_r > 0;
    if (!strcmp(key, "alpha"))
        return parse_f64(v, &p->lora_alpha);
    if (!strcmp(key, "dropout"))
        return parse_f64(v, &p->lora_dropout);
    if (!strcmp(key, "targets"))
        free(p->lora_targets), p->lora_targets = xstrdup(v);
    else if (!strcmp(key, "fan_in_fan_out")) {
        if (strcmp(v, "0") && strcmp(v, "1"))
            return 0;
        p->lora_fan_in_fan_out = v[0] == '1';
    }
    return 1;
}

// schedule KIND warmup=N steps=N min_lr=X
static int schedule_setting(Reader *r, Plan *p, char *key, char *v) {
    if (!strcmp(key, "warmup"))
        return ops_parse_i64(v, &p->warmup_steps) && p->warmup_steps >= 0;
    if (!strcmp(key, "steps"))
        return ops_parse_i64(v, &p->steps) && p->steps >= 0;
    if (!strcmp(key, "min_lr"))
        return parse_f64(v, &p->min_lr) && isfinite(p->min_lr) && p->min_lr >= 0;
    return bad(r, "unknown schedule setting '%s'", key);
}

// loss_scale init=X growth=X backoff=X interval=N
static int loss_scale_setting(Reader *r, Plan *p, char *key, char *v) {
    if (!strcmp(key, "interval"))
        return ops_parse_i64(v, &p->scale_interval) && p->scale_interval >= 1;
    if (strcmp(key, "init") && strcmp(key, "growth") && strcmp(key, "backoff"))
        return bad(r, "unknown loss_scale setting '%s'", key);
    double *dst = key[0] == 'i' ? &p->scale_init : key[0] == 'g' ? &p->scale_growth : &p->scale_backoff;
    return parse_f64(v, dst) && isfinite(*dst) && *dst > 0;
}

// ranks N zero=Z link=NAME
static int ranks_setting(Reader *r, Plan *p, char *key, char *v) {
    if (!strcmp(key, "zero"))
        return parse_int(v, &p->zero) && p->zero >= 0 && p->zero <= 3;
    if (!strcmp(key, "link")) {
        free(p->link), p->link = xstrdup(v);
        return 1;
    }
    return bad(r, "unknown ranks setting '%s'", key);
}

// optimizer NAME lr=X beta1=X beta2=X eps=X weight_decay=X (an unknown key is a bad value)
static int optimizer_setting(Reader *r, Plan *p, char *key, char *v) {
    (void)r;
    double *dst = strcmp(key, "lr") == 0             ? &p->lr
                  : strcmp(key, "beta1") == 0        ? &p->beta1
                  : strcmp(key, "beta2") == 0        ? &p->beta2
                  : strcmp(key, "eps") == 0          ? &p->eps
                  : strcmp(key, "weight_decay") == 0 ? &p->weight_decay
                                                     : NULL;
    return dst && parse_f64(v, dst);
}

// schedule constant|linear|cosine SETTINGS: a decaying schedule needs its steps.
static int read_schedule(Reader *r, Plan *p, char **w, int n) {
    static const char *const kinds[] = {"constant", "linear", "cosine"};
    int ok = 0;
    for (int k = 0; k < 3; k++)
        if (!strcmp(w[1], kinds[k]))
            p->schedule = (PlanSchedule)k, ok = 1;
    if (ok)
        ok = read_settings(r, p, w, 2, n, schedule_setting);
    return ok < 0 ? -1 : ok && (p->schedule == SCHED_CONSTANT || p->steps > 0);
}

// loss_scale SETTINGS, in their ranges together.
static int read_loss_scale(Reader *r, Plan *p, char **w, int n) {
    int ok = read_settings(r, p, w, 1, n, loss_scale_setting);
    return ok < 0 ? -1
                  : ok && p->scale_init > 0 && p->scale_growth >= 1 && p->scale_backoff > 0 &&
                        p->scale_backoff < 1 && p->scale_interval >= 1 && p->scale_init < 1e38;
}

// ranks N SETTINGS, or the form before data parallelism: "rank 0 ranks 1".
static int read_ranks(Reader *r, Plan *p, char **w, int n) {
    if (strcmp(w[0], "rank") == 0) {
        int rank = 0;
        return n == 4 && parse_int(w[1], &rank) && rank == 0 && strcmp(w[2], "ranks") == 0 &&
               parse_int(w[3], &p->ranks) && p->ranks == 1;
    }
    if (!parse_int(w[1], &p->ranks) || p->ranks < 1 || p->ranks > 65536)
        return 0;
    return read_settings(r, p, w, 2, n, ranks_setting);
}

// arena NAME BYTES KIND: device memory, or pinned host memory
static int read_arena(Plan *p, char **w, int n) {
    PlanArena a = strcmp(w[1], "device") == 0 ? ARENA_DEVICE : ARENA_HOST;
    if (n != 4 || (a != ARENA_DEVICE && strcmp(w[1], "host") != 0) ||
        !ops_parse_i64(w[2], &p->arena_bytes[a]) || p->arena_bytes[a] < 0)
        return 0;
    if (strcmp(w[3], "device") == 0)
        p->arena_kind[a] = MEMK_DEVICE;
    else if (strcmp(w[3], "pinned") == 0)
        p->arena_kind[a] = MEMK_PINNED;
    else
        return 0;
    return 1;
}

// optimizer adamw|adamw8bit|sgd SETTINGS
static int read_optimizer(Reader *r, Plan *p, char **w, int n) {
    p->optimizer = !strcmp(w[1], "adamw")       ? PO_ADAMW
                   : !strcmp(w[1], "adamw8bit") ? PO_ADAMW8BIT
                   : !strcmp(w[1], "sgd")       ? PO_SGD
                                                : PO_NONE;
    if (p->optimizer == PO_NONE)
        return bad(r, "unknown optimizer '%.64s' (adamw, adamw8bit or sgd)", w[1]);
    return read_settings(r, p, w, 2, n, optimizer_setting);
}

// A header line of one value (n >= 2); other keys are for people: skipped.
static int read_value(Plan *p, char **w, int n) {
    const char *k = w[0], *v = w[1];
    if (strcmp(k, "model") == 0)
        free(p->model), p->model = xstrdup(v);
    else if (strcmp(k, "gpu") == 0)
        free(p->gpu), p->gpu = xstrdup(v);
    else if (strcmp(k, "source") == 0)
        free(p->source), p->source = xstrdup(v);
    else if (strcmp(k, "precision") == 0)
        free(p->precision), p->precision = xstrdup(v);
    else if (strcmp(k, "budget") == 0)
        return ops_parse_i64(v, &p->budget_bytes) && p->budget_bytes >= 0;
    else if (strcmp(k, "reserve") == 0)
        return ops_parse_i64(v, &p->reserve_bytes) && p->reserve_bytes >= 0;
    else if (strcmp(k, "seq") == 0)
        return ops_parse_i64(v, &p->seq) && p->seq > 0;
    else if (strcmp(k, "micro_batch") == 0)
        return ops_parse_i64(v, &p->micro_batch) && p->micro_batch > 0;
    else if (strcmp(k, "accum") == 0)
        return ops_parse_i64(v, &p->accum) && p->accum > 0;
    else if (strcmp(k, "vocab") == 0)
        return ops_parse_i64(v, &p->vocab) && p->vocab > 0;
    else if (strcmp(k, "packing") == 0) {
        p->packing = v[0] == '1';
        return n == 2 && (strcmp(v, "0") == 0 || strcmp(v, "1") == 0);
    } else if (strcmp(k, "pairs") == 0) {
        p->pairs = v[0] == '1';
        return n == 2 && (strcmp(v, "0") == 0 || strcmp(v, "1") == 0);
    } else if (strcmp(k, "events") == 0) {
        int64_t e = 0;
        bool ok = ops_parse_i64(v, &e) && e >= 0 && e <= 100000000;
        p->events = (int)e;
        return ok;
    }
    return 1;
}

// One header line before 'buffers' (n >= 2).
static int read_setting(Reader *r, Plan *p, char **w, int n) {
    if (strcmp(w[0], "estimate") == 0)
        return read_settings(r, p, w, 1, n, estimate_setting);
    if (strcmp(w[0], "host") == 0)
        return read_settings(r, p, w, 1, n, host_setting);
    if (strcmp(w[0], "lora") == 0)
        return read_settings(r, p, w, 1, n, lora_setting);
    if (strcmp(w[0], "schedule") == 0)
        return read_schedule(r, p, w, n);
    if (strcmp(w[0], "loss_scale") == 0)
        return read_loss_scale(r, p, w, n);
    if (strcmp(w[0], "rank") == 0 || strcmp(w[0], "ranks") == 0)
        return read_ranks(r, p, w, n);
    if (strcmp(w[0], "arena") == 0)
        return read_arena(p, w, n);
    if (strcmp(w[0], "optimizer") == 0)
        return read_optimizer(r, p, w, n);
    return read_value(p, w, n);
}

// The header: settings up to and including the 'buffers N' line.
static int read_header(Reader *r, Plan *p) {
    char *line;
    while ((line = next_line(r))) {
        char *w[16] = {0};
        int n = words(line, w, 16);
        if (strcmp(w[0], "buffers") == 0) {
            int64_t nb;
            if (n != 2 || !ops_parse_i64(w[1], &nb) || nb < 0 || nb > 50000000)
                return bad(r, "bad buffer count");
            p->nbuf = (int)nb;
            return 0;
        }
        if (n < 2)
            return bad(r, "'%s' needs a value", w[0]);
        int ok = read_setting(r, p, w, n);
        if (ok < 0)
            return -1;
        if (!ok)
            return bad(r, "bad value for '%s'", w[0]);
    }
    return bad(r, "unexpected end of file before 'buffers'");
}

static int read_buffer(Reader *r, Plan *p, int i, char *line) {
    char *w[32] = {0};
    int n = words(line, w, 32);
    PlanBuffer *b = &p->buf[i];
    *b = (PlanBuffer){.id = i, .of = -1, .copy_of = -1, .view = -1, .reuse = -1, .layer = -1, .kind = PK_VALUE,
                      .init_scale = 0.02};
    int64_t id;
    if (n < 11 || strcmp(w[0], "buffer") != 0 || !ops_parse_i64(w[1], &id) || id != i)
        return bad(r, "expected 'buffer %d NAME CATEGORY ARENA OFFSET BYTES DTYPE SHAPE FIRST LAST'", i);
    b->name = xstrdup(w[2]);
    b->category = xstrdup(w[3]);
    if (strcmp(w[4], "device") == 0)
        b->arena = ARENA_DEVICE;
    else if (strcmp(w[4], "host") == 0)
        b->arena = ARENA_HOST;
    else
        return bad(r, "buffer %s: unknown arena '%s'", b->name, w[4]);
    if (!ops_parse_i64(w[5], &b->offset) || !ops_parse_i64(w[6], &b->bytes) || b->offset < 0 || b->bytes < 0)
        return bad(r, "buffer %s: bad offset or size", b->name);
    if (!op_dtype_parse(w[7], &b->dtype))
        return bad(r, "buffer %s: unknown dtype '%s'", b->name, w[7]);
    if (!parse_shape(w[8], &b->ndim, b->shape))
        return bad(r, "buffer %s: bad shape '%s'", b->name, w[8]);
    if (!parse_int(w[9], &b->first) || !parse_int(w[10], &b->last))
        return bad(r, "buffer %s: bad lifetime", b->name);
    for (int k = 11; k < n; k++) {
        char *eq = strchr(w[k], '=');
        if (!eq)
            return bad(r, "buffer %s: '%s' is not key=value", b->name, w[k]);
        *eq = '\0';
        const char *key = w[k], *v = eq + 1;
        bool ok = true;
        if (strcmp(key, "kind") == 0) {
            static const char *kinds[] = {"param", "grad", "state", "input", "value", "workspace",
                                          "quant", "cache"};
            ok = false;
            for (int j = 0; j < 8; j++)
                if (strcmp(v, kinds[j]) == 0)
                    b->kind = (PlanKind)j, ok = true;
        } else if (strcmp(key, "hf") == 0) {
            free(b->hf), b->hf = xstrdup(v);
        } else if (strcmp(key, "init") == 0) {
            static const char *inits[] = {"normal", "ones", "zeros", "kaiming_uniform"};
            ok = false;
            for (int j = 0; j < 4; j++)
                if (strcmp(v, inits[j]) == 0)
                    b->init = (PlanInit)j, ok = true;
        } else if (strcmp(key, "scale") == 0) {
            ok = parse_f64(v, &b->init_scale);
        } else if (strcmp(key, "train") == 0) {
            b->trainable = strcmp(v, "1") == 0;
        } else if (strcmp(key, "of") == 0) {
            ok = parse_int(v, &b->of);
        } else if (strcmp(key, "copy_of") == 0) {
            ok = parse_int(v, &b->copy_of) && b->copy_of >= 0 && b->copy_of != i;
        } else if (strcmp(key, "view") == 0) {
            ok = parse_int(v, &b->view);
        } else if (strcmp(key, "at") == 0) {
            ok = ops_parse_i64(v, &b->view_at) && b->view_at >= 0 && b->view_at <= (1LL << 52);
        } else if (strcmp(key, "reuse") == 0) {
            ok = parse_int(v, &b->reuse) && b->reuse >= 0 && b->reuse != i;
        } else if (strcmp(key, "layer") == 0) {
            ok = parse_int(v, &b->layer);
        } else if (strcmp(key, "role") == 0) {
            ok = plan_role_parse(v, &b->role);
        } else if (strcmp(key, "virtual") == 0) {
            b->virt = strcmp(v, "1") == 0;
            ok = b->virt || strcmp(v, "0") == 0;
        } else if (strcmp(key, "shard") == 0) {
            ok = parse_shape(v, &b->shard_ndim, b->shard);
        }
        if (!ok)
            return bad(r, "buffer %s: bad %s", b->name, key);
    }
    return 0;
}

// "NAME:GX,GY,GZ:BX,BY,BZ[:SMEM]": a kernel name of letters, digits and '_', positive sizes,
// and the bytes of dynamic shared memory, where it has any (at most PLAN_MAX_SMEM).
static bool parse_launch(const char *s, PlanLaunch *l) {
    const char *c1 = strchr(s, ':');
    if (!c1 || c1 == s || (size_t)(c1 - s) >= sizeof l->name)
        return false;
    for (const char *p = s; p < c1; p++)
        if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9')))
            return false;
    memcpy(l->name, s, (size_t)(c1 - s));
    l->name[c1 - s] = '\0';
    int used = 0;
    if (sscanf(c1, ":%u,%u,%u:%u,%u,%u%n", &l->grid[0], &l->grid[1], &l->grid[2], &l->block[0],
               &l->block[1], &l->block[2], &used) != 6)
        return false;
    l->smem = 0;
    if (c1[used] == ':') {
        int more = 0;
        if (sscanf(c1 + used, ":%u%n", &l->smem, &more) != 1 || !l->smem || l->smem > PLAN_MAX_SMEM)
            return false;
        used += more;
    }
    if (c1[used] != '\0')
        return false;
    for (int d = 0; d < 3; d++)
        if (!l->grid[d] || !l->block[d])
            return false;
    return (uint64_t)l->block[0] * l->block[1] * l->block[2] <= 1024;
}

// One key=value of instruction `in` that is not its op's attribute: 1 fine, 0 a bad
// value, -1 an unknown key (reported).
static int instr_setting(Reader *r, Plan *p, PlanInstr *in, const char *key, const char *v) {
    int tmp;
    if (strcmp(key, "out") == 0)
        return (in->nout = parse_list(v, in->out, PLAN_MAX_OUT)) > 0;
    if (strcmp(key, "in") == 0)
        return (in->nin = parse_list(v, in->in, PLAN_MAX_IN)) >= 0;
    if (strcmp(key, "update") == 0)
        return parse_int(v, &tmp) && tmp >= 0 && (in->update = (unsigned)tmp, true);
    if (strcmp(key, "stream") == 0)
        return stream_find(v, &in->stream);
    if (strcmp(key, "wait") == 0)
        return (in->nwait = parse_list(v, in->wait, PLAN_MAX_WAITS)) > 0;
    if (strcmp(key, "record") == 0)
        return parse_int(v, &in->record) && in->record >= 0;
    if (strcmp(key, "layer") == 0)
        return parse_int(v, &in->layer);
    if (strcmp(key, "steps") == 0)
        return parse_int(v, &in->nstep) && in->nstep >= 2 && in->nstep <= 64;
    if (strcmp(key, "launch") == 0)
        return in->nlaunch < PLAN_MAX_LAUNCHES && parse_launch(v, &in->launch[in->nlaunch++]);
    if (strcmp(key, "group") == 0)
        return parse_int(v, &in->group) && in->group >= 2 && in->group <= PLAN_GROUP_MAX;
    if (strcmp(key, "by") == 0)
        return parse_int(v, &in->by) && in->by >= 0 && in->by < in->id;
    if (strcmp(key, "ws") == 0)
        return parse_int(v, &in->ws) && in->ws >= 0 && in->ws < p->nbuf;
    if (strcmp(key, "us") == 0)
        return parse_f64(v, &in->est_us) && in->est_us >= 0 && in->est_us < 1e12;
    if (strcmp(key, "flops") == 0)
        return ops_parse_i64(v, &in->flops);
    if (strcmp(key, "recompute") == 0) {
        in->recompute = strcmp(v, "1") == 0;
        return 1;
    }
    if (strcmp(key, "last") == 0)
        return (in->last = strcmp(v, "1") == 0) || strcmp(v, "0") == 0;
    if (strcmp(key, "bytes") == 0)
        return ops_parse_i64(v, &in->bytes);
    if (strcmp(key, "loc") == 0)
        return sscanf(v, "%d:%d", &in->line, &in->col) == 2;
    return bad(r, "instruction %d (%s): unknown key '%s'", in->id, op_desc(in->op)->name, key);
}

// The instruction's operand counts fit its op, and every buffer and event it names exists.
static int check_operands(Reader *r, const Plan *p, const PlanInstr *in) {
    const OpDesc *d = op_desc(in->op);
    int id = in->id;
    const char *opname = d->name;
    if (in->nout == 0)
        return bad(r, "instruction %d (%s) has no outputs", id, opname);
    if (in->nin < d->min_in || in->nin > d->max_in)
        return bad(r, "instruction %d (%s) has %d inputs; the op takes %d to %d", id, opname,
                   in->nin, d->min_in, d->max_in);
    for (int k = 0; k < in->nin; k++)
        if (in->in[k] >= p->nbuf || (in->in[k] < 0 && k < d->min_in))
            return bad(r, "instruction %d (%s): input %d names buffer %d of %d", id, opname, k,
                       in->in[k], p->nbuf);
    for (int k = 0; k < in->nout; k++)
        if (in->out[k] < 0 || in->out[k] >= p->nbuf)
            return bad(r, "instruction %d (%s): output %d names buffer %d of %d", id, opname, k,
                       in->out[k], p->nbuf);
    for (int k = 0; k < in->nwait; k++)
        if (in->wait[k] < 0 || in->wait[k] >= p->events)
            return bad(r, "instruction %d (%s): waits for event %d of %d", id, opname,
                       in->wait[k], p->events);
    if (in->record >= p->events)
        return bad(r, "instruction %d (%s): records event %d of %d", id, opname, in->record,
                   p->events);
    return 0;
}

// "ID OP KEY=VALUE ...": instruction want_id, its attributes and operands.
static int read_instr(Reader *r, Plan *p, PlanInstr *in, int want_id, char *line) {
    char *w[40] = {0};
    int n = words(line, w, 40);
    int id;
    *in = (PlanInstr){.layer = -1, .ws = -1, .record = -1, .by = -1, .stream = STREAM_COMPUTE};
    if (n < 3 || !parse_int(w[0], &id) || id != want_id)
        return bad(r, "expected instruction %d", want_id);
    in->id = id;
    if (!op_find(w[1], &in->op))
        return bad(r, "instruction %d: unknown op '%s'", id, w[1]);
    const char *opname = op_desc(in->op)->name;
    for (int k = 2; k < n; k++) {
        char *eq = strchr(w[k], '=');
        if (!eq)
            return bad(r, "instruction %d: '%s' is not key=value", id, w[k]);
        *eq = '\0';
        const char *key = w[k], *v = eq + 1;
        int attr = op_attr_parse(in->op, key, v, &in->attr);
        if (attr < 0)
            return bad(r, "instruction %d (%s): bad %s", id, opname, key);
        if (attr > 0)
            continue;
        int ok = instr_setting(r, p, in, key, v);
        if (ok < 0)
            return -1;
        if (!ok)
            return bad(r, "instruction %d (%s): bad %s", id, opname, key);
    }
    return check_operands(r, p, in);
}

// The step lines of a fused instruction: "step OP out=V in=A,B [ATTR=VALUE ...]".
static int read_steps(Reader *r, Plan *p, PlanInstr *in) {
    if ((in->op == OP_FUSED) != (in->nstep > 0))
        return bad(r, "instruction %d: a fused instruction, and only one, has steps=N", in->id);
    if (!in->nstep)
        return 0;
    in->step = xcalloc((size_t)in->nstep, sizeof(PlanStep));
    for (int s = 0; s < in->nstep; s++) {
        char *line = next_line(r), *w[24] = {0};
        if (!line)
            return bad(r, "instruction %d: unexpected end of file in its steps", in->id);
        int n = words(line, w, 24);
        PlanStep *st = &in->step[s];
        st->out = -1;
        if (n < 3 || strcmp(w[0], "step") != 0 || !op_find(w[1], &st->op))
            return bad(r, "instruction %d: step %d: expected 'step OP out=V in=...'", in->id, s);
        const OpDesc *d = op_desc(st->op);
        if (d->cls != OPC_ELEMENTWISE || st->op == OP_FUSED)
            return bad(r, "instruction %d: step %d: %s is not an elementwise op", in->id, s, d->name);
        for (int k = 2; k < n; k++) {
            char *eq = strchr(w[k], '=');
            if (!eq)
                return bad(r, "instruction %d: step %d: '%s' is not key=value", in->id, s, w[k]);
            *eq = '\0';
            int attr = op_attr_parse(st->op, w[k], eq + 1, &st->attr);
            bool ok = attr > 0;
            if (attr == 0 && strcmp(w[k], "out") == 0)
                ok = parse_list(eq + 1, &st->out, 1) == 1;
            else if (attr == 0 && strcmp(w[k], "in") == 0)
                ok = (st->nin = parse_list(eq + 1, st->in, PLAN_MAX_IN)) >= d->min_in && st->nin <= d->max_in;
            else if (attr == 0)
                ok = false;
            if (!ok)
                return bad(r, "instruction %d: step %d: bad %s", in->id, s, w[k]);
        }
        bool last = s == in->nstep - 1;
        if (st->out < 0 || st->out >= p->nbuf || (last ? st->out != in->out[0] : !p->buf[st->out].virt))
            return bad(r, "instruction %d: step %d writes buffer %d: %s", in->id, s, st->out,
                       last ? "not the instruction's output" : "not a virtual buffer");
        for (int k = 0; k < st->nin; k++) {
            int b = st->in[k];
            bool known = false;   // an operand of the instruction, or an earlier step's output
            for (int j = 0; j < in->nin && !known; j++)
                known = in->in[j] == b;
            for (int j = 0; j < s && !known; j++)
                known = in->step[j].out == b;
            if (b < 0 || b >= p->nbuf || !known)
                return bad(r, "instruction %d: step %d reads buffer %d, which neither the "
                           "instruction nor an earlier step provides", in->id, s, b);
        }
    }
    return 0;
}
// The buffers the training loop reads and writes itself agree with the header: tokens,
// targets and position ids i32 [micro_batch, seq] (it writes that many), the target count
// one i32, the loss and the eval loss one f32, the logits' last dimension the vocabulary.
static int check_roles(Reader *r, const Plan *p) {
    if (p->seq > (1 << 24) || p->micro_batch > (1 << 20) || p->vocab > (1 << 30))
        return bad(r, "seq %lld, micro_batch %lld or vocab %lld is beyond any model", (long long)p->seq,
                   (long long)p->micro_batch, (long long)p->vocab);
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (!b->role)
            continue;
        if (b->role == PR_TOKENS || b->role == PR_TARGETS || b->role == PR_POSITIONS) {
            if (b->dtype != PDT_I32 || b->virt || plan_elems(b) != p->micro_batch * p->seq)
                return bad(r, "buffer %s (%s): %lld %s elements, the header's micro_batch x seq is "
                           "%lld i32", b->name, plan_role_name(b->role), (long long)plan_elems(b),
                           plan_dtype_name(b->dtype), (long long)(p->micro_batch * p->seq));
        } else if (b->role == PR_TARGET_COUNT) {   // (with pairs: the pairs, the chosen targets)
            if (b->dtype != PDT_I32 || b->virt || plan_elems(b) != (p->pairs ? 2 : 1))
                return bad(r, "buffer %s (target_count): must be %s i32", b->name, p->pairs ? "two (pairs 1)" : "one");
        } else if (b->role == PR_LOSS || b->role == PR_EVAL_LOSS) {
            if (b->dtype != PDT_F32 || b->virt || plan_elems(b) != 1)
                return bad(r, "buffer %s (%s): must be one f32", b->name, plan_role_name(b->role));
        } else if (b->role == PR_REF_LOGPS || b->role == PR_REF_OUT) {
            int64_t want = b->role == PR_REF_LOGPS ? p->micro_batch : p->micro_batch * p->seq;
            if (b->dtype != PDT_F32 || b->virt || plan_elems(b) != want)
                return bad(r, "buffer %s (%s): must be %lld f32", b->name, plan_role_name(b->role), (long long)want);
        } else if (b->role == PR_PREF_STATS) {
            if (b->dtype != PDT_F32 || b->virt || plan_elems(b) != PREF_STATS)
                return bad(r, "buffer %s (pref_stats): must be %d f32", b->name, PREF_STATS);
        } else if (b->role == PR_GRAD_STATS || b->role == PR_GRAD_FACTOR) {
            if (b->dtype != PDT_F32 || b->virt || b->view >= 0 || plan_elems(b) != 2)
                return bad(r, "buffer %s (%s): must be two f32", b->name, plan_role_name(b->role));
        } else if (b->role == PR_DECODE_TOKEN || b->role == PR_DECODE_POS) {
            if (b->dtype != PDT_I32 || b->virt || plan_elems(b) != 1)
                return bad(r, "buffer %s (%s): must be one i32", b->name, plan_role_name(b->role));
        } else if (b->role == PR_LOGITS || b->role == PR_DECODE_LOGITS) {
            if (b->ndim < 1 || b->shape[b->ndim - 1] != p->vocab || (b->role == PR_DECODE_LOGITS &&
                                                                       plan_elems(b) != p->vocab))
                return bad(r, "buffer %s (%s): last dimension %lld, the header's vocab is %lld",
                           b->name, plan_role_name(b->role), b->ndim ? (long long)b->shape[b->ndim - 1] : 0LL,
                           (long long)p->vocab);
        }
    }
    return 0;
}

// An NF4 buffer is a parameter with its scales: an f32 absmax per 64-value block, or the
// double-quantised u8 codes, f32 scales per 256 blocks and one f32 mean; each scale
// buffer belongs to an NF4 parameter.
static int check_nf4(Reader *r, const Plan *p) {
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->kind == PK_QUANT && (b->of < 0 || p->buf[b->of].dtype != PDT_NF4))
            return bad(r, "buffer %s: NF4 scales of %d, which is not an NF4 parameter", b->name, b->of);
        if (b->dtype != PDT_NF4)
            continue;
        if (b->view >= 0 || b->virt || (b->kind != PK_PARAM && b->kind != PK_VALUE))
            return bad(r, "buffer %s: only a parameter's own buffer, or a copy of one, can be NF4",
                       b->name);
        if (b->kind == PK_VALUE)   // a streamed base's device copy: its dequant reads its scales' copies
            continue;
        int64_t blocks = (plan_elems(b) + 63) / 64;
        const PlanBuffer *am = NULL, *codes = NULL, *scales = NULL, *mean = NULL;
        for (int k = 0; k < p->nbuf; k++) {
            const PlanBuffer *q = &p->buf[k];
            if (q->kind != PK_QUANT || q->of != i || !q->role)
                continue;
            if (q->role == PR_NF4_ABSMAX)
                am = q;
            else if (q->role == PR_NF4_ABSMAX_CODES)
                codes = q;
            else if (q->role == PR_NF4_ABSMAX_SCALES)
                scales = q;
            else if (q->role == PR_NF4_ABSMAX_MEAN)
                mean = q;
        }
        bool single = am && am->dtype == PDT_F32 && plan_elems(am) == blocks;
        bool dbl = codes && scales && mean && codes->dtype == PDT_U8 && plan_elems(codes) == blocks &&
                   scales->dtype == PDT_F32 && plan_elems(scales) == (blocks + 255) / 256 &&
                   mean->dtype == PDT_F32 && plan_elems(mean) == 1;
        if (!single && !dbl)
            return bad(r, "buffer %s: an NF4 parameter without its scales (an f32 absmax of %lld "
                       "blocks, or codes, scales and mean)", b->name, (long long)blocks);
    }
    return 0;
}


// Grouped launches: a first instruction with one launch and group=N, then N-1 of its
// phase with by= its id, and no by= elsewhere. (The verifier checks what they may do.)
static int check_groups(Reader *r, Plan *p) {
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < p->nins[ph]; i++) {
            const PlanInstr *in = &p->ins[ph][i];
            if (in->by >= 0 && (in->group || in->nlaunch))
                return bad(r, "instruction %d: by=%d, and a launch or group of its own", in->id,
                           in->by);
            if (in->by >= 0) {   // its first must be before it in the phase and cover it
                int at = i - (in->id - in->by);
                const PlanInstr *first = at >= 0 ? &p->ins[ph][at] : NULL;
                if (!first || first->group <= i - at)
                    return bad(r, "instruction %d: by=%d, which does not cover it", in->id, in->by);
            }
            if (!in->group)
                continue;
            // a bucket of collectives is one call of the communicator, not a kernel
            bool bucket = op_desc(in->op)->cls == OPC_COLLECTIVE && in->nlaunch == 0;
            if ((!bucket && in->nlaunch != 1) || i + in->group > p->nins[ph])
                return bad(r, "instruction %d: group=%d needs one launch and %d instructions after "
                           "it in its phase", in->id, in->group, in->group - 1);
            for (int k = 1; k < in->group; k++)
                if (p->ins[ph][i + k].by != in->id)
                    return bad(r, "instruction %d: in the group of instruction %d, without by=%d",
                               p->ins[ph][i + k].id, in->id, in->id);
        }
    return 0;
}

// View and reuse links end at a base buffer: follow each link once (0 unvisited,
// 1 on the current path, 2 known to end well).
static int check_links(Reader *r, const Plan *p) {
    char *state = xcalloc((size_t)p->nbuf + 1, 1);
    int *path = xmalloc(sizeof(int) * (size_t)(p->nbuf + 1));
    for (int i = 0; i < p->nbuf; i++) {
        int n = 0, id = i;
        while (state[id] == 0) {
            state[id] = 1;
            path[n++] = id;
            const PlanBuffer *b = &p->buf[id];
            int next = b->view >= 0 ? b->view : b->reuse;
            if (next < 0)
                break;
            if (next >= p->nbuf) {
                free(state), free(path);
                return bad(r, "buffer %s: links to buffer %d of %d", b->name, next, p->nbuf);
            }
            id = next;
        }
        if (state[id] == 1 && n > 0 && id != path[n - 1]) {   // came back onto the path
            free(state), free(path);
            return bad(r, "buffer %s: its view/reuse links form a cycle", p->buf[i].name);
        }
        const PlanBuffer *end = &p->buf[id];
        if (state[id] == 1 && (end->view >= 0 || end->reuse >= 0)) {   // a self-loop
            free(state), free(path);
            return bad(r, "buffer %s: its view/reuse links form a cycle", p->buf[i].name);
        }
        while (n > 0)
            state[path[--n]] = 2;
    }
    free(state), free(path);
    return 0;
}

// A shard: ranks slices of its tensor, on bytes of its own or a view of that tensor.
static int check_shards(Reader *r, const Plan *p) {
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (!b->shard_ndim)
            continue;
        int64_t whole = 1;
        for (int d = 0; d < b->shard_ndim; d++)
            whole *= b->shard[d];
        if (whole != (int64_t)p->ranks * plan_elems(b))
            return bad(r, "buffer %s: %lld elements are not one of %d slices of a tensor of %lld",
                       b->name, (long long)plan_elems(b), p->ranks, (long long)whole);
        if (b->virt || b->reuse >= 0)
            return bad(r, "buffer %s: a shard is neither virtual nor written over another", b->name);
        if (b->view >= 0 && b->view < p->nbuf) {
            const PlanBuffer *base = &p->buf[b->view];
            bool same = base->ndim == b->shard_ndim && base->dtype == b->dtype;
            for (int d = 0; same && d < base->ndim; d++)
                same = base->shape[d] == b->shard[d];
            if (!same)
                return bad(r, "buffer %s: a shard of %s, which is not a %s tensor of its shape=", b->name,
                           base->name, plan_dtype_name(b->dtype));
        }
    }
    return 0;
}

// Every buffer's bytes hold its elements inside its arena (a view's inside its base).
static int check_placement(Reader *r, const Plan *p) {
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->view >= 0) {
            if (b->view >= p->nbuf || p->buf[b->view].view >= 0)
                return bad(r, "buffer %s: view of %d, which is not a base buffer", b->name, b->view);
            const PlanBuffer *base = &p->buf[b->view];
            if (plan_dtype_bytes(b->dtype, plan_elems(b)) * (b->shard_ndim ? p->ranks : 1) >
                base->bytes - b->view_at)
                return bad(r, "buffer %s: larger than its base %s from byte %lld", b->name, base->name,
                           (long long)b->view_at);
            continue;
        }
        if (b->virt) {   // a fused kernel's intermediate: it has no bytes to check
            if (b->bytes != 0 || b->reuse >= 0)
                return bad(r, "buffer %s: a virtual buffer has no bytes and no reuse", b->name);
            continue;
        }
        if (b->bytes < plan_dtype_bytes(b->dtype, plan_elems(b)))
            return bad(r, "buffer %s: %lld bytes cannot hold %lld %s elements", b->name,
                       (long long)b->bytes, (long long)plan_elems(b), plan_dtype_name(b->dtype));
        if (b->reuse >= 0 && p->buf[b->reuse].offset != b->offset)
            return bad(r, "buffer %s: reuses %s but lies elsewhere", b->name, p->buf[b->reuse].name);
        if (b->offset < 0 || b->bytes < 0 || b->offset > p->arena_bytes[b->arena] ||
            b->bytes > p->arena_bytes[b->arena] - b->offset)
            return bad(r, "buffer %s: [%lld, +%lld) lies past the end of the %s arena (%lld bytes)",
                       b->name, (long long)b->offset, (long long)b->bytes,
                       b->arena == ARENA_DEVICE ? "device" : "host",
                       (long long)p->arena_bytes[b->arena]);
        if (b->of >= p->nbuf)
            return bad(r, "buffer %s: of=%d out of range", b->name, b->of);
        if (b->copy_of >= 0 && (b->kind != PK_PARAM || b->copy_of >= p->nbuf || p->buf[b->copy_of].kind != PK_PARAM ||
                                p->buf[b->copy_of].copy_of >= 0 || plan_elems(&p->buf[b->copy_of]) != plan_elems(b)))
            return bad(r, "buffer %s: copy_of=%d is not a parameter of its size", b->name, b->copy_of);
    }
    return 0;
}

// The buffer table as a whole: links, shards, placement, roles and NF4 scales.
static int check_buffers(Reader *r, Plan *p) {
    if (check_links(r, p) != 0 || check_shards(r, p) != 0 || check_placement(r, p) != 0)
        return -1;
    return check_roles(r, p) != 0 || check_nf4(r, p) != 0 ? -1 : 0;
}

// path opened for reading when it is a regular file of a plan's size; NULL with err.
static FILE *open_plan(const char *path, char *err, size_t errlen) {
    struct stat st;
    int fd = rt_open_regular(path, &st);
    if (fd == -2) {
        snprintf(err, errlen, "%s: not a regular file", path);
        return NULL;
    }
    if (fd >= 0 && st.st_size > PLAN_MAX_BYTES) {
        close(fd);
        snprintf(err, errlen, "%s: %lld bytes, more than any plan (at most %d MiB)", path,
                 (long long)st.st_size, PLAN_MAX_BYTES >> 20);
        return NULL;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return f;
}

// The buffer list: nbuf lines, then the checks of the table as a whole.
static int read_buffers(Reader *r, Plan *p) {
    p->buf = xcalloc((size_t)p->nbuf + 1, sizeof *p->buf);
    for (int i = 0; i < p->nbuf; i++) {
        char *line = next_line(r);
        if (!line)
            return bad(r, "unexpected end of file in the buffer list");
        if (read_buffer(r, p, i, line) != 0)
            return -1;
    }
    return check_buffers(r, p);
}

// Instruction i of phase ph (its id `id`) with its steps, checked against its op.
static int read_phase_instr(Reader *r, Plan *p, int ph, int i, int id) {
    char *line = next_line(r);
    if (!line)
        return bad(r, "unexpected end of file in phase %s", phase_names[ph]);
    if (read_instr(r, p, &p->ins[ph][i], id, line) != 0 || read_steps(r, p, &p->ins[ph][i]) != 0)
        return -1;
    char why[512];   // its operands as its kernels take them (op_check)
    const PlanInstr *in = &p->ins[ph][i];
    if (in->last && ph == PHASE_OPT)
        return bad(r, "instruction %d (%s): last=1 (the last micro-step only) in the optimizer "
                   "phase, which runs once a step", in->id, op_desc(in->op)->name);
    if (plan_check_instr(p, in, why, sizeof why) != 0)
        return bad(r, "instruction %d (%s): %s", in->id, op_desc(in->op)->name, why);
    return 0;
}

// Whether `line` ("phase NAME N") names a phase other than `name` that may follow it.
static bool words_phase(const char *line, const char *name) {
    size_t k = strlen(name);
    if (strncmp(line, "phase ", 6) != 0 || (strncmp(line + 6, name, k) == 0 && line[6 + k] == ' '))
        return false;
    for (int ph = PHASE_EVAL; ph < PHASE_COUNT; ph++) {
        size_t m = strlen(phase_names[ph]);
        if (strcmp(phase_names[ph], name) != 0 && strncmp(line + 6, phase_names[ph], m) == 0 && line[6 + m] == ' ')
            return true;
    }
    return false;
}

// The phases, each "phase NAME N" and its N instructions (the eval, decode and reference
// phases optional, in that order), then "end".
static int read_phases(Reader *r, Plan *p) {
    int next_id = 0;
    char *line = next_line(r), *w[4] = {0};
    for (int ph = 0; ph < PHASE_COUNT; ph++, line = next_line(r)) {
        int64_t n;
        if (ph >= PHASE_EVAL && line && strcmp(line, "end") == 0)
            break;   // (the eval, decode and reference phases are optional)
        while (ph >= PHASE_EVAL && ph < PHASE_COUNT - 1 && line && words_phase(line, phase_names[ph]))
            ph++;   // a later optional phase: this one absent
        if (!line || words(line, w, 4) != 3 || strcmp(w[0], "phase") != 0 ||
            strcmp(w[1], phase_names[ph]) != 0 || !ops_parse_i64(w[2], &n) || n < 0 || n > 100000000)
            return bad(r, ph == PHASE_EVAL     ? "expected 'phase eval N', 'phase decode N', 'phase reference N' or 'end'"
                          : ph == PHASE_DECODE ? "expected 'phase decode N', 'phase reference N' or 'end'"
                          : ph == PHASE_REF    ? "expected 'phase reference N' or 'end'"
                                               : "expected 'phase %s N'",
                       phase_names[ph]);
        p->nins[ph] = (int)n;
        p->ins[ph] = xcalloc((size_t)n + 1, sizeof(PlanInstr));
        for (int i = 0; i < n; i++)
            if (read_phase_instr(r, p, ph, i, next_id++) != 0)
                return -1;
    }
    if (!line || strcmp(line, "end") != 0)
        return bad(r, "expected 'end'");
    return 0;
}

// The plan after its open: the version line, header, buffers, phases and groups.
static int read_plan(Reader *r, Plan *p) {
    char *line = next_line(r), *w[4] = {0};
    if (!line || words(line, w, 4) != 2 || strcmp(w[0], "ftc-plan") != 0)
        return bad(r, "not an ftc plan (no 'ftc-plan VERSION' line)");
    p->version = atoi(w[1]);
    if (p->version != PLAN_VERSION)
        return bad(r, "plan version %s; this runtime reads version %d", w[1], PLAN_VERSION);
    if (read_header(r, p) != 0)
        return -1;
    if (!p->model || !p->seq || !p->micro_batch || !p->accum || p->optimizer == PO_NONE || !p->precision)
        return bad(r, "the header lacks model, seq, micro_batch, accum, precision or optimizer");
    if (read_buffers(r, p) != 0 || read_phases(r, p) != 0)
        return -1;
    return check_groups(r, p);
}

int plan_load(Plan **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    Reader r = {.path = path, .err = err, .errlen = errlen};
    if (!(r.f = open_plan(path, err, errlen)))
        return -1;
    Plan *p = xcalloc(1, sizeof *p);
    p->ranks = 1;
    p->zero = -1;
    p->arena_kind[ARENA_DEVICE] = MEMK_DEVICE;
    p->arena_kind[ARENA_HOST] = MEMK_PINNED;
    int rc = read_plan(&r, p) != 0 ? -1 : 0;
    free(r.buf);
    fclose(r.f);
    if (rc == 0)
        *out = p;
    else
        plan_free(p);
    return rc;
}

void plan_free(Plan *p) {
    if (!p)
        return;
    for (int i = 0; i < p->nbuf && p->buf; i++) {
        PlanBuffer *b = &p->buf[i];
        free(b->name), free(b->category), free(b->hf);
    }
    free(p->buf);
    for (int ph = 0; ph < PHASE_COUNT; ph++) {
        for (int i = 0; i < p->nins[ph] && p->ins[ph]; i++)
            free(p->ins[ph][i].step);
        free(p->ins[ph]);
    }
    free(p->model), free(p->gpu), free(p->source), free(p->precision), free(p->lora_targets);
    free(p->link);
    free(p);
}

static const char *const role_names[PR_COUNT] = {
    [PR_NONE] = "",
    [PR_TOKENS] = "tokens", [PR_TARGETS] = "targets", [PR_POSITIONS] = "positions",
    [PR_TARGET_COUNT] = "target_count", [PR_LOSS] = "loss", [PR_EVAL_LOSS] = "eval_loss",
    [PR_LOGITS] = "logits", [PR_GRAD_STATS] = "grad_stats", [PR_GRAD_FACTOR] = "grad_factor",
    [PR_DECODE_TOKEN] = "decode_token", [PR_DECODE_POS] = "decode_pos", [PR_DECODE_LOGITS] = "decode_logits",
    [PR_PREF_STATS] = "pref_stats", [PR_REF_LOGPS] = "ref_logps", [PR_REF_OUT] = "ref_out",
    [PR_NF4_ABSMAX] = "nf4_absmax", [PR_NF4_ABSMAX_CODES] = "nf4_absmax_codes",
    [PR_NF4_ABSMAX_SCALES] = "nf4_absmax_scales", [PR_NF4_ABSMAX_MEAN] = "nf4_absmax_mean",
};

const char *plan_role_name(PlanRole role) { return role > PR_NONE && role < PR_COUNT ? role_names[role] : "none"; }

bool plan_role_parse(const char *name, PlanRole *role) {
    for (int r = PR_NONE + 1; r < PR_COUNT; r++)
        if (strcmp(name, role_names[r]) == 0) {
            *role = (PlanRole)r;
            return true;
        }
    return false;
}

const PlanBuffer *plan_role(const Plan *p, PlanRole role) {
    for (int i = 0; i < p->nbuf; i++)
        if (p->buf[i].role == role)
            return &p->buf[i];
    return NULL;
}

bool plan_updates_in_backward(const Plan *p) {
    for (int i = 0; i < p->nins[PHASE_BWD]; i++)
        if (op_desc(p->ins[PHASE_BWD][i].op)->cls == OPC_OPTIMIZER)
            return true;
    return false;
}

int plan_root(const Plan *p, int id) {
    for (;;) {
        const PlanBuffer *b = &p->buf[id];
        if (b->view >= 0)
            id = b->view;
        else if (b->reuse >= 0)
            id = b->reuse;
        else
            return id;
    }
}

int64_t plan_shard_offset(const Plan *p, int id, int rank) {
    const PlanBuffer *b = &p->buf[id];
    return b->view >= 0 && b->shard_ndim ? (int64_t)rank * plan_dtype_bytes(b->dtype, plan_elems(b)) : 0;
}

int plan_instr_count(const Plan *p) {
    int n = 0;
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        n += p->nins[ph];
    return n;
}

const PlanInstr *plan_instr(const Plan *p, int id) {
    for (int ph = 0; ph < PHASE_COUNT; ph++) {
        if (id < p->nins[ph])
            return id >= 0 ? &p->ins[ph][id] : NULL;
        id -= p->nins[ph];
    }
    return NULL;
}

int *plan_roots(const Plan *p) {
    int n = p->nbuf, *next = xmalloc(sizeof(int) * (size_t)(n + 1)), *r = xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        next[i] = p->buf[i].view >= 0 ? p->buf[i].view : p->buf[i].reuse;
    op_roots(n, next, r);
    free(next);
    return r;
}

//
// The instructions against the op contract (op_check.c: dtypes of the right kind, shapes
// that agree), as each is read, however the file was edited; the fused loss's layout and
// the workspaces the contract's kernels need.
//

static int64_t last_dim(const PlanBuffer *b) { return b->ndim ? b->shape[b->ndim - 1] : 1; }
static int64_t rows_of(const PlanBuffer *b) { return plan_elems(b) / last_dim(b); }

OpOperand plan_operand(const Plan *p, int id) {
    if (id < 0)
        return (OpOperand){0};
    const PlanBuffer *b = &p->buf[id];
    return (OpOperand){b->name, (OpDType)b->dtype, plan_dtype_name(b->dtype), b->ndim, b->shape,
                       plan_elems(b), plan_dtype_bytes(b->dtype, plan_elems(b))};
}

// The op contract's check of `op` over these buffers of p.
static int check(const Plan *p, OpKind op, const OpAttr *attr, const int *in, int nin, const int *out,
                 int nout, char *err, size_t errlen) {
    OpOperand vin[PLAN_MAX_IN], vout[PLAN_MAX_OUT];
    for (int k = 0; k < nin; k++)
        vin[k] = plan_operand(p, in[k]);
    for (int k = 0; k < nout; k++)
        vout[k] = plan_operand(p, out[k]);
    return op_check(op, attr, vin, nin, vout, nout, p->vocab, p->ranks, err, errlen);
}

PlanLoss plan_loss(const Plan *p, const PlanInstr *in) {
    const PlanBuffer *x = &p->buf[in->in[0]], *w = &p->buf[in->in[1]];
    PlanLoss l = {.k = last_dim(x), .vocab = w->shape[0]};
    l.rows = rows_of(x);
    l.chunk = in->attr.chunk_rows ? in->attr.chunk_rows : l.rows;
    l.terms = (plan_dtype_bytes(x->dtype, l.chunk * l.vocab) + 255) / 256 * 256;
    l.count = l.terms + (4 * l.rows + 255) / 256 * 256;
    l.bytes = l.count + 256;
    l.lib_bytes = in->ws >= 0 && p->buf[in->ws].bytes > l.bytes ? p->buf[in->ws].bytes - l.bytes : 0;
    return l;
}

int plan_check_instr(const Plan *p, const PlanInstr *in, char *err, size_t errlen) {
    if (in->op == OP_GRAD_SUMSQ && in->nin == 1 && in->in[0] >= 0) {   // its partials' scratch
        int64_t need = 8 * op_sumsq_blocks(plan_elems(&p->buf[in->in[0]]));
        if (in->ws < 0 || p->buf[in->ws].bytes < need)
            return snprintf(err, errlen, "its workspace is not the %lld bytes of its partial sums",
                            (long long)need), -1;
    }
    if (in->nstep == 0 && op_desc(in->op)->cls == OPC_LOSS_GEMM) {   // and its workspace
        int rc = check(p, in->op, &in->attr, in->in, in->nin, in->out, in->nout, err, errlen);
        if (rc != 0)
            return rc;
        PlanLoss l = plan_loss(p, in);
        if (in->ws < 0 || p->buf[in->ws].bytes < l.bytes)
            return snprintf(err, errlen, "its workspace must hold %lld bytes (a chunk's logits and "
                            "the rows' loss terms)", (long long)l.bytes), -1;
        return 0;
    }
    if (in->nstep == 0)
        return check(p, in->op, &in->attr, in->in, in->nin, in->out, in->nout, err, errlen);
    for (int s = 0; s < in->nstep; s++) {
        const PlanStep *st = &in->step[s];
        char why[400];
        if (op_desc(st->op)->cls != OPC_ELEMENTWISE || st->op == OP_FUSED ||
            check(p, st->op, &st->attr, st->in, st->nin, &st->out, 1, why, sizeof why) != 0)
            return snprintf(err, errlen, "step %d (%s): %s", s, op_desc(st->op)->name,
                            op_desc(st->op)->cls != OPC_ELEMENTWISE || st->op == OP_FUSED
                                ? "not an elementwise op" : why), -1;
    }
    return 0;
}
