// weights.c — where parameters come from and go: seeded initialisation (the scheme
// is the plan's per-parameter init, which the compiler takes from each parameter's
// role: norm weights ones, biases zeros, LoRA A kaiming-uniform, LoRA B zeros, the
// rest normal(0, 0.02) as Hugging Face initialises Qwen2 and Llama), checkpoint
// loading by Hugging Face name, and saving.
#include "runtime.h"
#include "comm.h"
#include "safetensors.h"
#include "fileio.h"
#include "cpu/kernels.h"

#include <jansson.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Uniform in (0, 1): 53 random bits, never 0.
static double uniform(uint64_t *s) { return ((double)(splitmix64(s) >> 11) + 0.5) * 0x1p-53; }

// Values [lo, hi) of a buffer's stream. The stream depends only on (seed, buffer id):
// splitmix64's k-th draw mixes s + k·γ, so value i, which takes `draws` draws, starts
// from s + i·draws·γ wherever the range begins.
typedef struct FillPart {
    float *v;
    int64_t lo, hi;
    PlanInit init;
    double scale;
    uint64_t s;
} FillPart;

static void *fill_part(void *arg) {
    const FillPart *f = arg;
    int draws = f->init == PINIT_NORMAL ? 2 : f->init == PINIT_KAIMING_UNIFORM ? 1 : 0;
    uint64_t s = f->s + (uint64_t)f->lo * (uint64_t)draws * 0x9e3779b97f4a7c15ull;
    float *v = f->v;
    double scale = f->scale;
    PlanInit init = f->init;
    for (int64_t i = f->lo; i < f->hi; i++) {
        switch (init) {
        case PINIT_ONES: v[i] = 1.0f; break;
        case PINIT_ZEROS: v[i] = 0.0f; break;
        case PINIT_KAIMING_UNIFORM: v[i] = (float)((2 * uniform(&s) - 1) * scale); break;
        case PINIT_NORMAL: {   // Box-Muller, one value per pair of draws
            double u1 = uniform(&s), u2 = uniform(&s);
            v[i] = (float)(scale * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
            break;
        }
        }
    }
    return NULL;
}

void rt_weights_fill(float *v, int64_t n, PlanInit init, double scale, uint64_t seed, int id, int parts) {
    enum { MAX_PARTS = 64 };
    FillPart part[MAX_PARTS];
    pthread_t tid[MAX_PARTS];
    if (parts <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        parts = n < (1 << 20) || cores < 2 ? 1 : (int)cores;
    }
    int64_t nparts = parts < MAX_PARTS ? parts : MAX_PARTS;
    uint64_t s = seed ^ ((uint64_t)id * 0xd1b54a32d192ed03ull);
    int started = 0;
    for (int64_t k = 0; k < nparts; k++) {
        part[k] = (FillPart){v, n * k / nparts, n * (k + 1) / nparts, init, scale, s};
        if (k == 0 || pthread_create(&tid[started], NULL, fill_part, &part[k]) != 0)
            fill_part(&part[k]);   // the first part here; any thread that cannot start too
        else
            started++;
    }
    for (int k = 0; k < started; k++)
        pthread_join(tid[k], NULL);
}

// The tensor a buffer holds all or (shard=) this rank's slice of: its elements and shape.
static int64_t whole_elems(const PlanBuffer *b) {
    if (!b->shard_ndim)
        return plan_elems(b);
    int64_t n = 1;
    for (int d = 0; d < b->shard_ndim; d++)
        n *= b->shard[d];
    return n;
}

static int whole_ndim(const PlanBuffer *b) { return b->shard_ndim ? b->shard_ndim : b->ndim; }
static const int64_t *whole_shape(const PlanBuffer *b) { return b->shard_ndim ? b->shard : b->shape; }

// Writes a whole tensor's values into buffer `id`: all of them, or this rank's slice.
static void write_whole(Exec *x, int id, const float *whole) {
    const PlanBuffer *b = &x->plan->buf[id];
    rt_write_f32(x, id, whole + (b->shard_ndim ? (int64_t)x->rank * plan_elems(b) : 0));
}

// Master copies start equal to their (loaded or initialised) parameter: a sharded master
// to this rank's slice of a whole parameter.
static void sync_masters(Exec *x) {
    const Plan *p = x->plan;
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->kind != PK_STATE || strcmp(b->category, "master") != 0 || b->of < 0)
            continue;
        const PlanBuffer *w = &p->buf[b->of];
        bool slice = b->shard_ndim && !w->shard_ndim;
        float *tmp = xmalloc(sizeof(float) * (size_t)plan_elems(w));
        rt_read_f32(x, b->of, tmp);
        rt_write_f32(x, i, tmp + (slice ? (int64_t)x->rank * plan_elems(b) : 0));
        free(tmp);
    }
}

//
// Whole tensors of sharded buffers, for saving: rank 0 reads them while every other rank
// serves (rt_weights_serve), giving its slice of each buffer rank 0 names.
//

enum { SERVE_DONE = -1, SERVE_FAILED = -2 };

// Every rank's raw slice of buffer `id` into whole (bytes of the whole tensor).
static int gather_slices(Exec *x, int id, void *whole, char *err, size_t errlen) {
    const PlanBuffer *b = &x->plan->buf[id];
    int64_t bytes = plan_dtype_bytes(b->dtype, plan_elems(b));
    void *mine = malloc((size_t)bytes + 1);
    if (!mine)
        return rt_fail(err, errlen, "out of memory gathering %s", b->name);
    rt_read_raw(x, id, mine);
    int rc = rt_comm_allgather(x->comm, mine, whole, bytes, err, errlen);
    free(mine);
    return rc;
}

static float raw_f32(PlanDType t, const void *raw, int64_t i) {
    return t == PDT_F32    ? ((const float *)raw)[i]
           : t == PDT_BF16 ? cpu_bf16_to_f32(((const uint16_t *)raw)[i])
                           : cpu_f16_to_f32(((const uint16_t *)raw)[i]);
}

// Buffer `id`'s whole tensor as fp32 into dst (whole_elems values); -1 with err.
static int read_whole(Exec *x, int id, float *dst, char *err, size_t errlen) {
    const PlanBuffer *b = &x->plan->buf[id];
    if (!b->shard_ndim || !x->comm || x->comm->ranks == 1) {
        rt_read_f32(x, id, dst);
        return 0;
    }
    int64_t n = whole_elems(b), msg = id;
    void *raw = malloc((size_t)plan_dtype_bytes(b->dtype, n) + 1);
    int rc = raw ? rt_comm_bcast(x->comm, &msg, sizeof msg, 0, err, errlen)
                 : rt_fail(err, errlen, "out of memory gathering %s", b->name);
    if (rc == 0)
        rc = gather_slices(x, id, raw, err, errlen);
    for (int64_t i = 0; rc == 0 && i < n; i++)
        dst[i] = raw_f32(b->dtype, raw, i);
    free(raw);
    return rc;
}

int rt_weights_serve(Exec *x, char *err, size_t errlen) {
    for (;;) {
        int64_t id = SERVE_DONE;
        if (rt_comm_bcast(x->comm, &id, sizeof id, 0, err, errlen) != 0)
            return -1;
        if (id == SERVE_DONE)
            return 0;
        if (id < 0 || id >= x->plan->nbuf)
            return rt_fail(err, errlen, "rank 0 could not save the weights");
        const PlanBuffer *b = &x->plan->buf[id];
        void *whole = malloc((size_t)plan_dtype_bytes(b->dtype, whole_elems(b)) + 1);
        int rc = whole ? gather_slices(x, (int)id, whole, err, errlen)
                       : rt_fail(err, errlen, "out of memory gathering %s", b->name);
        free(whole);
        if (rc != 0)
            return -1;
    }
}

int rt_weights_serve_end(Exec *x, bool ok, char *err, size_t errlen) {
    int64_t msg = ok ? SERVE_DONE : SERVE_FAILED;
    if (!x->comm || x->comm->ranks == 1)
        return 0;
    return rt_comm_bcast(x->comm, &msg, sizeof msg, 0, err, errlen);
}

// Zeroes gradients and optimizer moments.
static void zero_state(Exec *x) {
    const Plan *p = x->plan;
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->view < 0 && (b->kind == PK_GRAD || (b->kind == PK_STATE && strcmp(b->category, "master"))))
            rt_zero(x, i);
    }
}

// Per buffer the random stream its initialisation draws from: its index among the buffers
// that are not a frozen copy, so that a plan holding a reference's copies (a preference
// loss's `copy`) initialises everything else as the plan without them does (malloc'd).
static int *init_streams(const Plan *p) {
    int *s = xmalloc(sizeof(int) * (size_t)(p->nbuf + 1));
    for (int i = 0, k = 0; i < p->nbuf; i++)
        s[i] = k, k += p->buf[i].copy_of < 0;
    return s;
}

void rt_weights_init(Exec *x, uint64_t seed) {
    const Plan *p = x->plan;
    int *stream = init_streams(p);
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->kind != PK_PARAM)
            continue;
        int64_t n = whole_elems(b);   // a shard: the whole tensor's stream, this rank's slice
        int from = b->copy_of >= 0 ? b->copy_of : i;   // (a frozen copy: its parameter's values)
        float *v = xmalloc(sizeof(float) * (size_t)n);
        rt_weights_fill(v, n, p->buf[from].init, p->buf[from].init_scale, seed, stream[from], 0);
        write_whole(x, i, v);
        free(v);
    }
    free(stream);
    zero_state(x);
    sync_masters(x);
}

// Per buffer: the id of its fp32 master copy, or -1 (malloc'd).
static int *masters(const Plan *p) {
    int *m = xmalloc(sizeof(int) * (size_t)(p->nbuf + 1));
    for (int i = 0; i < p->nbuf; i++)
        m[i] = -1;
    for (int i = 0; i < p->nbuf; i++)
        if (p->buf[i].kind == PK_STATE && strcmp(p->buf[i].category, "master") == 0 && p->buf[i].of >= 0)
            m[p->buf[i].of] = i;
    return m;
}

// A parameter's values (its whole tensor's): into the parameter in its own dtype, and into
// its fp32 master copy as they are, so a master starts from the checkpoint's own precision
// and not from the weight's rounding of it; each of them sharded takes this rank's slice.
static void put_param(Exec *x, int id, int master, const float *v) {
    write_whole(x, id, v);
    if (master >= 0)
        write_whole(x, master, v);
}

// A parameter's tensor in a checkpoint: by its name, else by the name another version of
// transformers writes it under (GPT-NeoX's head is embed_out.weight, lm_head.weight from
// transformers 5 on). *as is the name found.
static const StTensor *find_param(StSet *st, const char *hf, const char **as) {
    static const char *const alias[][2] = {{"embed_out.weight", "lm_head.weight"}};
    *as = hf;
    const StTensor *t = st_find(st, hf);
    for (size_t i = 0; !t && i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(hf, alias[i][0]) && (t = st_find(st, alias[i][1])) != NULL)
            *as = alias[i][1];
    return t;
}

// Tensor t of st, found under name `as`, into parameter id (and its master copy `master`):
// of the parameter's whole shape; its dtype kept for saving alike. -1 with err.
static int load_param(Exec *x, StSet *st, const StTensor *t, const char *as, int id, int master, char *err,
                      size_t errlen) {
    const Plan *p = x->plan;
    const PlanBuffer *b = &p->buf[id];
    int nd = whole_ndim(b);
    const int64_t *shape = whole_shape(b);
    bool same = t->ndim == nd;
    for (int d = 0; same && d < nd; d++)
        same = t->shape[d] == shape[d];
    if (!same) {
        char want[128] = "", got[128] = "";
        for (int d = 0; d < nd; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "", (long long)shape[d]);
        for (int d = 0; d < t->ndim; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        return rt_fail(err, errlen, "%s: tensor '%s' has shape [%s], the model expects [%s]",
                       st_file_path(st, t->file), as, got, want);
    }
    int64_t n = whole_elems(b);
    float *v = xmalloc(sizeof(float) * (size_t)n);
    int rc = st_read_f32(st, t, v, n, err, errlen);
    if (rc == 0) {
        put_param(x, id, master, v);
        if (!x->source_dtype)
            x->source_dtype = xcalloc((size_t)p->nbuf + 1, 1);
        x->source_dtype[id] = (uint8_t)(1 + t->dtype);
    }
    free(v);
    return rc;
}

static bool is_adapter(const PlanBuffer *b) {
    return b->hf && (strstr(b->hf, ".lora_A.weight") || strstr(b->hf, ".lora_B.weight"));
}

int rt_weights_load(Exec *x, const char *path, uint64_t seed, int *fresh, char *err, size_t errlen) {
    const Plan *p = x->plan;
    StSet *st;
    if (st_open(&st, path, err, errlen) != 0)
        return -1;
    int rc = 0, *master = masters(p), *stream = init_streams(p), read = 0, made = 0;
    for (int i = 0; i < p->nbuf && rc == 0; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->kind != PK_PARAM)
            continue;
        const char *as;
        const StTensor *t = find_param(st, b->hf, &as);
        if (t) {
            rc = load_param(x, st, t, as, i, master[i], err, errlen);
            read++;
        } else if (is_adapter(b)) {   // a LoRA adapter is new: its seeded initialisation
            int64_t n = whole_elems(b);
            float *v = xmalloc(sizeof(float) * (size_t)n);
            rt_weights_fill(v, n, b->init, b->init_scale, seed, stream[i], 0);
            put_param(x, i, master[i], v);
            free(v);
            made++;
        } else {
            rc = rt_fail(err, errlen, "%s: no tensor '%s' (parameter %s of the plan)", path, b->hf, b->name);
        }
    }
    st_close(st);
    free(master), free(stream);
    if (rc != 0)
        return -1;
    zero_state(x);
    if (fresh)
        *fresh = made;
    return read;
}

// An adapter's directory's adapter_config.json, where there is one, against the plan's
// LoRA: its r and alpha (alpha / r scales what the adapters add), neither rank-stabilised
// scaling (alpha / sqrt(r)) nor ranks or alphas of their own for some modules. -1 with err.
static int check_adapter_config(const Plan *p, const char *dir, char *err, size_t errlen) {
    char path[4200];
    size_t bytes;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *text = rt_read_whole(path, &bytes);
    if (!text && errno == ENOENT)
        return 0;
    if (!text)
        return rt_fail(err, errlen, "%s: %s", path, strerror(errno));
    json_error_t je;
    json_t *cfg = json_loadb(text, bytes, 0, &je);
    free(text);
    if (!cfg)
        return rt_fail(err, errlen, "%s:%d:%d: not valid JSON: %s", path, je.line, je.column, je.text);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return rt_fail(err, errlen, "%s: not a JSON object", path);
    }
    json_t *r = json_object_get(cfg, "r"), *alpha = json_object_get(cfg, "lora_alpha");
    bool rs = json_is_true(json_object_get(cfg, "use_rslora"));
    bool own = json_object_size(json_object_get(cfg, "rank_pattern")) ||
               json_object_size(json_object_get(cfg, "alpha_pattern"));
    int rc = 0;
    if (json_integer_value(r) != p->lora_r || json_number_value(alpha) != p->lora_alpha || rs || own)
        rc = rt_fail(err, errlen, "%s: an adapter of r %lld, lora_alpha %g%s%s; the plan's LoRA has r %lld, alpha %g",
                     path, (long long)json_integer_value(r), json_number_value(alpha),
                     rs ? ", rank-stabilised (use_rslora)" : "", own ? ", other ranks or alphas for some modules "
                     "(rank_pattern, alpha_pattern)" : "", (long long)p->lora_r, p->lora_alpha);
    json_decref(cfg);
    return rc;
}

// Whether `name` is PEFT's name of one of the plan's adapters.
static bool adapter_of_plan(const Plan *p, const char *name) {
    size_t n = strlen("base_model.model.");
    for (int i = 0; i < p->nbuf && !strncmp(name, "base_model.model.", n); i++)
        if (p->buf[i].kind == PK_PARAM && is_adapter(&p->buf[i]) && !strcmp(p->buf[i].hf, name + n))
            return true;
    return false;
}

int rt_adapters_load(Exec *x, const char *path, char *err, size_t errlen) {
    const Plan *p = x->plan;
    char dir[4096], file[4200];
    struct stat sb;
    bool is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!is_dir && slash)   // the file: its directory's config ("/x" is in "/")
        slash[slash == dir] = '\0';
    else if (!is_dir)
        snprintf(dir, sizeof dir, ".");
    snprintf(file, sizeof file, is_dir ? "%s/adapter_model.safetensors" : "%s", path);
    StSet *st;
    if (check_adapter_config(p, dir, err, errlen) != 0 || st_open(&st, file, err, errlen) != 0)
        return -1;
    int rc = 0, *master = masters(p), read = 0;
    for (int i = 0; i < p->nbuf && rc == 0; i++) {
        if (p->buf[i].kind != PK_PARAM || !is_adapter(&p->buf[i]))
            continue;
        char name[1024];   // PEFT's: base_model.model.<module>.lora_A.weight
        snprintf(name, sizeof name, "base_model.model.%s", p->buf[i].hf);
        const StTensor *t = st_find(st, name);
        rc = t ? load_param(x, st, t, name, i, master[i], err, errlen)
               : rt_fail(err, errlen, "%s: no tensor '%s' (the adapter of %s; the plan's targets: %s)", file, name,
                         p->buf[i].name, p->lora_targets ? p->lora_targets : "none");
        read++;
    }
    for (int k = 0; rc == 0 && k < st_count(st) && read < st_count(st); k++)
        if (!adapter_of_plan(p, st_at(st, k)->name))
            rc = rt_fail(err, errlen, "%s: tensor '%s' adapts nothing of the plan (its targets: %s)", file,
                         st_at(st, k)->name, p->lora_targets ? p->lora_targets : "none");
    st_close(st);
    free(master);
    return rc != 0 ? -1 : read;
}

// Parameter id's values (fp32, w->data, malloc'd) in the dtype its --weights tensor had:
// bf16 and fp16 rounded to nearest even into a new array that replaces (and frees) the
// floats, anything else fp32. The data w holds after.
static void *as_source_dtype(const Exec *x, int id, StWrite *w) {
    int d = x->source_dtype ? x->source_dtype[id] - 1 : -1;
    int64_t n = 1;
    for (int k = 0; k < w->ndim; k++)
        n *= w->shape[k];
    uint16_t *h = d == ST_BF16 || d == ST_F16 ? xmalloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1)) : NULL;
    if (!h)   // (fp32 kept, also when out of memory)
        return (void *)w->data;
    const float *f = w->data;
    for (int64_t i = 0; i < n; i++)
        h[i] = d == ST_BF16 ? cpu_f32_to_bf16(f[i]) : cpu_f32_to_f16(f[i]);
    free((void *)w->data);
    w->data = h, w->dtype = (StDType)d;
    return h;
}

int rt_weights_save(Exec *x, const char *dir, bool trainable_only, int64_t shard_bytes, int *shards, char *err,
                    size_t errlen) {
    const Plan *p = x->plan;
    int n = 0;
    bool gathered = true;
    StWrite *w = xcalloc((size_t)p->nbuf + 1, sizeof *w);
    void **data = xcalloc((size_t)p->nbuf + 1, sizeof(void *));
    // The fp32 master copy where the plan keeps one: the most exact value trained.
    int *master = xmalloc(sizeof(int) * (size_t)p->nbuf);
    for (int i = 0; i < p->nbuf; i++)
        master[i] = -1;
    for (int i = 0; i < p->nbuf; i++)
        if (p->buf[i].kind == PK_STATE && strcmp(p->buf[i].category, "master") == 0 && p->buf[i].of >= 0)
            master[p->buf[i].of] = i;
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->kind != PK_PARAM || b->copy_of >= 0 || (trainable_only && !b->trainable))
            continue;
        int src = master[i] >= 0 ? master[i] : i;
        float *v = xmalloc(sizeof(float) * (size_t)whole_elems(b));
        data[n] = v;
        w[n] = (StWrite){.name = b->hf, .dtype = ST_F32, .ndim = whole_ndim(b), .shape = whole_shape(b),
                         .data = v};
        n++;
        if (read_whole(x, src, v, err, errlen) != 0) {
            gathered = false;
            break;
        }
        data[n - 1] = as_source_dtype(x, i, &w[n - 1]);
    }
    char step[32];   // which step these weights are from, for every saved file
    snprintf(step, sizeof step, "%lld", (long long)x->step);
    const char *meta[] = {"format", "pt", "producer", "ftc", "step", step, NULL};
    int rc = !gathered ? -1 : st_write_model(dir, w, n, meta, shard_bytes, shards, err, errlen);
    for (int i = 0; i < n; i++)
        free(data[i]);
    free(data), free(w), free(master);
    return rc;
}

// The adapter pair of base parameter `id` (its lora_A and lora_B), or false.
static bool adapters_of(const Plan *p, int id, int *a, int *b) {
    const char *hf = p->buf[id].hf;
    size_t len = strlen(hf), sfx = strlen(".weight");
    if (len <= sfx || strcmp(hf + len - sfx, ".weight") != 0)
        return false;
    *a = *b = -1;
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *x = &p->buf[i];
        if (x->kind != PK_PARAM || !x->hf || strncmp(x->hf, hf, len - sfx) != 0)
            continue;
        if (!strcmp(x->hf + len - sfx, ".lora_A.weight"))
            *a = i;
        else if (!strcmp(x->hf + len - sfx, ".lora_B.weight"))
            *b = i;
    }
    return *a >= 0 && *b >= 0;
}

// A parameter's most exact value, whole: its fp32 master copy where the plan keeps one;
// NULL with err when gathering it failed.
static float *param_values(Exec *x, int id, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int src = id;
    for (int i = 0; i < p->nbuf; i++)
        if (p->buf[i].kind == PK_STATE && p->buf[i].of == id && !strcmp(p->buf[i].category, "master"))
            src = i;
    float *v = xmalloc(sizeof(float) * (size_t)whole_elems(&p->buf[id]));
    if (v && read_whole(x, src, v, err, errlen) != 0) {
        free(v);
        return NULL;
    }
    return v;
}

int rt_adapters_save(Exec *x, const char *dir, const char *base_model, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int n = 0;
    StWrite *w = xcalloc((size_t)p->nbuf + 1, sizeof *w);
    char **names = xcalloc((size_t)p->nbuf + 1, sizeof(char *));
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->kind != PK_PARAM || !is_adapter(b))
            continue;
        // PEFT's names: base_model.model.<module>.lora_A.weight
        size_t len = strlen(b->hf) + 32;
        names[n] = xmalloc(len);
        snprintf(names[n], len, "base_model.model.%s", b->hf);
        w[n] = (StWrite){.name = names[n], .dtype = ST_F32, .ndim = whole_ndim(b), .shape = whole_shape(b),
                         .data = param_values(x, i, err, errlen)};
        if (!w[n++].data)
            break;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    char step[32];   // which step these weights are from, for every saved file
    snprintf(step, sizeof step, "%lld", (long long)x->step);
    const char *meta[] = {"format", "pt", "producer", "ftc", "step", step, NULL};
    int rc = n > 0 && !w[n - 1].data ? -1 : st_write(path, w, n, meta, err, errlen);
    for (int i = 0; i < n; i++)
        free(names[i]), free((void *)w[i].data);
    free(names), free(w);
    if (rc != 0)
        return rc;
    // adapter_config.json, as PEFT's LoraConfig writes it
    json_t *cfg = json_object(), *targets = json_array();
    char *list = xstrdup(p->lora_targets ? p->lora_targets : "");
    for (char *save, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
        json_array_append_new(targets, json_string(t));
    free(list);
    json_object_set_new(cfg, "peft_type", json_string("LORA"));
    json_object_set_new(cfg, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(cfg, "r", json_integer(p->lora_r));
    json_object_set_new(cfg, "lora_alpha", json_real(p->lora_alpha));
    json_object_set_new(cfg, "lora_dropout", json_real(p->lora_dropout));
    json_object_set_new(cfg, "target_modules", targets);
    json_object_set_new(cfg, "bias", json_string("none"));
    json_object_set_new(cfg, "fan_in_fan_out", p->lora_fan_in_fan_out ? json_true() : json_false());
    json_object_set_new(cfg, "inference_mode", json_true());
    json_object_set_new(cfg, "base_model_name_or_path", json_string(base_model ? base_model : p->model));
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char tmp[4400];
    int fd = rt_tmp_create(path, tmp, sizeof tmp);
    char *text = json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(9));
    rc = fd >= 0 && text && rt_write_full(fd, text, strlen(text)) == 0 ? 0 : -1;
    if (fd >= 0 && close(fd) != 0)
        rc = -1;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -1;
    if (rc != 0 && fd >= 0)
        unlink(tmp);
    free(text);
    json_decref(cfg);
    if (rc != 0)
        snprintf(err, errlen, "cannot write %s", path);
    return rc;
}

int rt_weights_save_merged(Exec *x, const char *dir, int64_t shard_bytes, int *shards, char *err, size_t errlen) {
    const Plan *p = x->plan;
    double scale = p->lora_r > 0 ? p->lora_alpha / (double)p->lora_r : 0;
    int n = 0;
    bool gathered = true;
    StWrite *w = xcalloc((size_t)p->nbuf + 1, sizeof *w);
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->kind != PK_PARAM || b->copy_of >= 0 || is_adapter(b))
            continue;
        float *v = param_values(x, i, err, errlen);
        if (!(gathered = v != NULL))
            break;
        int a, bb;
        const int64_t *shape = whole_shape(b);
        if (whole_ndim(b) == 2 && adapters_of(p, i, &a, &bb)) {   // W += scale · B A (its transpose [in, out])
            float *A = param_values(x, a, err, errlen), *B = A ? param_values(x, bb, err, errlen) : NULL;
            if (!B) {
                free(A), free(v);
                gathered = false;
                break;
            }
            bool t = p->lora_fan_in_fan_out;
            int64_t outs = shape[t ? 1 : 0], ins = shape[t ? 0 : 1], r = whole_shape(&p->buf[a])[0];
            for (int64_t o = 0; o < outs; o++)
                for (int64_t c = 0; c < ins; c++) {
                    double s = 0;
                    for (int64_t k = 0; k < r; k++)
                        s += (double)B[o * r + k] * A[k * ins + c];
                    v[t ? c * outs + o : o * ins + c] += (float)(scale * s);
                }
            free(A), free(B);
        }
        w[n] = (StWrite){.name = b->hf, .dtype = ST_F32, .ndim = whole_ndim(b), .shape = shape, .data = v};
        as_source_dtype(x, i, &w[n++]);
    }
    char step[32];   // which step these weights are from, for every saved file
    snprintf(step, sizeof step, "%lld", (long long)x->step);
    const char *meta[] = {"format", "pt", "producer", "ftc", "step", step, NULL};
    int rc = !gathered ? -1 : st_write_model(dir, w, n, meta, shard_bytes, shards, err, errlen);
    for (int i = 0; i < n; i++)
        free((void *)w[i].data);
    free(w);
    return rc;
}
