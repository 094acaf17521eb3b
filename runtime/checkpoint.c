// checkpoint.c — the whole training state at the end of a step, and resuming from it.
//
// A checkpoint is a directory DIR/checkpoint-STEP holding state.safetensors: every
// buffer that lives across steps (parameters, NF4 codes and scales, optimizer moments,
// master weights) as its raw bytes under its plan name, with metadata: the step, the
// seed, the steps whose update was skipped (AdamW's bias correction), and a fingerprint of those buffers' names, dtypes and sizes. Gradients are zero
// between steps and the data order, dropout masks and AdamW's bias correction follow
// from (seed, step), so nothing else is needed to continue bitwise. It is written into
// DIR/.checkpoint-STEP.tmp.PID and renamed into place when complete: a kill leaves
// either the whole checkpoint or none (and a temporary directory the next save removes).
// A job of several ranks writes one state file a rank, state-rankRRRRR-of-NNNNN.safetensors
// (each rank's shards and what it holds whole), into one temporary directory that rank 0
// renames once every rank has written its file: resumable on the same number of ranks.
#include "runtime.h"
#include "comm.h"
#include "fileio.h"
#include "safetensors.h"

#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool carried(const PlanBuffer *b) {
    return b->view < 0 && !b->virt && b->bytes > 0 &&
           (b->kind == PK_PARAM || b->kind == PK_STATE || b->kind == PK_QUANT);
}

// "BF16 [64, 256]"
static void shape_text(char *buf, size_t len, const char *dtype, const int64_t *shape, int ndim) {
    size_t n = (size_t)snprintf(buf, len, "%s [", dtype);
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

// How a buffer is saved in a state file: its dtype and its shape (*whole), or NF4 as its
// bytes (u8, one dimension). The loader takes nothing else.
static StDType saved_as(const PlanBuffer *b, bool *whole) {
    StDType t = b->dtype == PDT_F32 ? ST_F32 : b->dtype == PDT_BF16 ? ST_BF16
              : b->dtype == PDT_F16 ? ST_F16 : b->dtype == PDT_I32 ? ST_I32 : ST_U8;
    *whole = t != ST_U8 || b->dtype == PDT_U8;
    return t;
}

// What the state must fit: the carried buffers' names, dtypes and sizes.
static uint64_t fingerprint(const Plan *p) {
    uint64_t h = RT_FNV_BASIS;
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (!carried(b))
            continue;
        int64_t n = plan_dtype_bytes(b->dtype, plan_elems(b));
        h = rt_fnv1a64(h, b->name, strlen(b->name) + 1);
        h = rt_fnv1a64(h, &b->dtype, sizeof b->dtype);
        h = rt_fnv1a64(h, &n, sizeof n);
    }
    return h;
}

static void remove_tree(const char *dir) { rt_remove_dir(dir, NULL); }   // files only

// The step of a checkpoint directory's name, or -1.
static int64_t step_of(const char *name) {
    if (strncmp(name, "checkpoint-", 11) != 0)
        return -1;
    char *end;
    long long s = strtoll(name + 11, &end, 10);
    return end != name + 11 && !*end && s > 0 ? s : -1;
}

void rt_checkpoint_prune(const char *dir, int keep) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    int64_t *steps = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t s = step_of(e->d_name);
        if (s > 0) {
            steps = xrealloc(steps, sizeof *steps * (size_t)(n + 1));
            steps[n++] = s;
        }
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++)
            newer += steps[j] > steps[i];
        if (newer >= keep) {
            char p[4300];
            snprintf(p, sizeof p, "%s/checkpoint-%06" PRId64, dir, steps[i]);
            remove_tree(p);
        }
    }
    free(steps);
}

static void drop_dir(const char *p) { remove_tree(p); }

// The state file of `rank` in a checkpoint of a job of `ranks`.
static void state_name(char *buf, size_t len, int rank, int ranks) {
    if (ranks <= 1)
        snprintf(buf, len, "state.safetensors");
    else
        snprintf(buf, len, "state-rank%05d-of-%05d.safetensors", rank, ranks);
}

static int write_state(Exec *x, const char *tmp, int64_t step, uint64_t seed, char *err, size_t errlen);

// Every rank's status summed: 0 when all are 0; -1 with err (this rank's own failure, or
// which rank failed) otherwise.
static int all_ok(Comm *c, int rc, const char *what, char *err, size_t errlen) {
    if (!c || c->ranks == 1)
        return rc;
    double v[2] = {rc != 0, rc != 0 ? c->rank : 0};
    char why[512];
    if (rt_comm_sum(c, v, 2, why, sizeof why) != 0)
        return rc != 0 ? -1 : rt_fail(err, errlen, "%s", why);
    if (v[0] == 0 || rc != 0)
        return v[0] == 0 ? 0 : -1;
    return rt_fail(err, errlen, "%s: %.0f rank%s failed (rank %.0f%s)", what, v[0], v[0] == 1 ? "" : "s",
                   v[0] == 1 ? v[1] : 0, v[0] == 1 ? "" : " among them");
}

// Directory `from`'s files into `to` (made), as hard links where they can be (no bytes
// written twice), else copies; its directories (merged/) alike.
static int link_tree(const char *from, const char *to, char *err, size_t errlen) {
    char a[4400], b[4400];
    DIR *d = opendir(from);
    if (!d)
        return rt_fail(err, errlen, "cannot read %s: %s", from, strerror(errno));
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        struct stat st;
        snprintf(a, sizeof a, "%s/%s", from, e->d_name);
        snprintf(b, sizeof b, "%s/%s", to, e->d_name);
        if (e->d_name[0] == '.' || stat(a, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            rc = mkdir(b, 0777) != 0 ? rt_fail(err, errlen, "cannot create %s: %s", b, strerror(errno))
                                     : link_tree(a, b, err, errlen);
        else if (S_ISREG(st.st_mode) && link(a, b) != 0)
            rc = rt_copy_file(a, b, err, errlen);
    }
    closedir(d);
    return rc;
}

// The weights saved at this step (save.c's set) into the checkpoint too, so that
// checkpoint-N loads in transformers as DIR does; none when no set of this step is there.
static int link_weights(const char *dir, const char *tmp, int64_t step, char *err, size_t errlen) {
    char set[4400];
    return rt_saved_set(dir, step, set, sizeof set) ? link_tree(set, tmp, err, errlen) : 0;
}

int rt_checkpoint_save(Exec *x, const char *dir, int64_t step, uint64_t seed, int keep, char *err,
                       size_t errlen) {
    Comm *c = x->comm;
    bool lead = !c || c->rank == 0;
    char tmp[4300], final[4300];
    snprintf(final, sizeof final, "%s/checkpoint-%06" PRId64, dir, step);
    int64_t pid = getpid();   // rank 0's: every rank writes into its temporary directory
    if (rt_comm_bcast(c, &pid, sizeof pid, 0, err, errlen) != 0)
        return -1;
    snprintf(tmp, sizeof tmp, "%s/.checkpoint-%06" PRId64 ".tmp.%lld", dir, step, (long long)pid);
    int rc = 0;
    if (lead) {
        char probe[4300];   // what killed saves left: .checkpoint-N.tmp.PID of dead processes
        snprintf(probe, sizeof probe, "%s/.checkpoint-%06" PRId64, dir, step);
        static const char *const tag[] = {".tmp."};
        rt_clean_leftovers(probe, tag, 1, false, drop_dir);
        remove_tree(tmp);
        if (mkdir(tmp, 0777) != 0)
            rc = rt_fail(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
    }
    if (all_ok(c, rc, "making the checkpoint's directory", err, errlen) != 0)
        return -1;
    rc = write_state(x, tmp, step, seed, err, errlen);
    if (lead && rc == 0)
        rc = link_weights(dir, tmp, step, err, errlen);
    rc = all_ok(c, rc, "writing the checkpoint's state", err, errlen);
    if (lead && rc == 0) {   // the same step twice (a run resumed and saved again): replace it
        remove_tree(final);
        if (rename(tmp, final) != 0)
            rc = rt_fail(err, errlen, "cannot create %s: %s", final, strerror(errno));
    }
    if (lead && rc != 0)
        remove_tree(tmp);
    if (lead && rc == 0)
        rt_checkpoint_prune(dir, keep);
    return all_ok(c, rc, "completing the checkpoint", err, errlen);
}

// The StDType each buffer's --weights tensor had, one hex digit a buffer (0: none; else 1 +
// the dtype), for a checkpoint's metadata; NULL when the weights were not loaded from one.
static char *source_dtypes(const Exec *x) {
    if (!x->source_dtype)
        return NULL;
    int n = x->plan->nbuf;
    char *s = xmalloc((size_t)n + 1);
    for (int i = 0; i < n; i++)
        s[i] = "0123456789abcdef"[x->source_dtype[i] & 15];
    s[n] = '\0';
    return s;
}

// This rank's state file into directory tmp.
static int write_state(Exec *x, const char *tmp, int64_t step, uint64_t seed, char *err, size_t errlen) {
    const Plan *p = x->plan;
    char path[4400], name[64];
    StWrite *w = xcalloc((size_t)p->nbuf + 1, sizeof *w);
    void **data = xcalloc((size_t)p->nbuf + 1, sizeof *data);
    int64_t *len = xcalloc((size_t)p->nbuf + 1, sizeof *len);
    int n = 0, rc = 0;
    for (int i = 0; i < p->nbuf && rc == 0; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (!carried(b))
            continue;
        len[n] = plan_dtype_bytes(b->dtype, plan_elems(b));
        data[n] = xmalloc((size_t)len[n] + 1);
        if (!data[n]) {
            rc = rt_fail(err, errlen, "out of memory saving %s", b->name);
            break;
        }
        rt_read_raw(x, i, data[n]);
        bool whole;
        StDType t = saved_as(b, &whole);
        w[n] = (StWrite){.name = b->name, .dtype = t, .ndim = whole ? b->ndim : 1,
                         .shape = whole ? b->shape : &len[n], .data = data[n]};
        n++;
    }
    char sstep[32], sseed[32], sfp[32], sskip[32], sscale[40], strack[32];
    snprintf(sstep, sizeof sstep, "%" PRId64, step);
    snprintf(sskip, sizeof sskip, "%" PRId64, x->skipped);
    snprintf(sseed, sizeof sseed, "%" PRIu64, seed);
    snprintf(sfp, sizeof sfp, "%016" PRIx64, fingerprint(p));
    snprintf(sscale, sizeof sscale, "%.17g", x->loss_scale);   // round-trips the double
    snprintf(strack, sizeof strack, "%" PRId64, x->scale_tracker);
    char srank[32], sranks[32];
    int rank = x->comm ? x->comm->rank : 0, ranks = x->comm ? x->comm->ranks : 1;
    snprintf(srank, sizeof srank, "%d", rank);
    snprintf(sranks, sizeof sranks, "%d", ranks);
    char sdata[32];
    snprintf(sdata, sizeof sdata, "%016" PRIx64, x->data_print);
    char *sources = source_dtypes(x);
    // (where the weights came from, so that a resumed run saves as the first would have)
    const char *meta[] = {"producer", "ftc", "kind", "training state", "step", sstep,
                          "seed", sseed, "skipped", sskip, "plan", sfp, "loss_scale", sscale,
                          "scale_tracker", strack, "rank", srank, "ranks", sranks,
                          "base_model", x->base_model, "source_dtypes", sources ? sources : "",
                          x->data_print ? "data" : NULL, sdata, NULL};
    state_name(name, sizeof name, rank, ranks);
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    if (rc == 0)
        rc = st_write(path, w, n, meta, err, errlen);
    for (int i = 0; i < n; i++)
        free(data[i]);
    free(data), free(w), free(len), free(sources);
    return rc;
}

// Whether dir holds a training state: one rank's (state.safetensors) or rank 0's of a job of
// several (their directory is renamed into place only once every rank's file is in it).
static bool has_state(const char *dir) {
    char probe[4400];
    snprintf(probe, sizeof probe, "%s/state.safetensors", dir);
    struct stat st;
    if (stat(probe, &st) == 0)
        return true;
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *e; d && !found && (e = readdir(d));)
        found = strncmp(e->d_name, "state-rank00000-of-", 19) == 0;
    if (d)
        closedir(d);
    return found;
}

int rt_checkpoint_find(const char *path, char *out, size_t len, char *err, size_t errlen) {
    char probe[4400];
    if (has_state(path)) {   // a checkpoint directory itself
        snprintf(out, len, "%s", path);
        return 0;
    }
    DIR *d = opendir(path);
    if (!d)
        return rt_fail(err, errlen, "--resume %s: cannot open: %s", path, strerror(errno));
    int64_t best = -1;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t s = step_of(e->d_name);
        if (s > best) {
            snprintf(probe, sizeof probe, "%s/%s", path, e->d_name);
            if (has_state(probe))
                best = s;
        }
    }
    closedir(d);
    if (best < 0)
        return rt_fail(err, errlen, "--resume %s: no checkpoint in it (checkpoint-STEP/state.safetensors, "
                       "written by --save-every)", path);
    snprintf(out, len, "%s/checkpoint-%06" PRId64, path, best);
    return 0;
}

// The state file's "__metadata__" (its header alone is read), or NULL with err.
static json_t *state_meta(const char *path, char *err, size_t errlen) {
    struct stat st;
    int fd = rt_open_regular(path, &st);
    if (fd < 0) {
        rt_fail(err, errlen, "%s: %s", path, fd == -2 ? "not a regular file" : strerror(errno));
        return NULL;
    }
    unsigned char b[8];
    uint64_t hlen = 0;
    char *text = NULL;
    if (rt_pread_full(fd, b, 8, 0) == 0) {
        for (int i = 7; i >= 0; i--)
            hlen = hlen << 8 | b[i];
        if (hlen <= (uint64_t)st.st_size - 8 && hlen < 100000000 && (text = xmalloc((size_t)hlen + 1)) &&
            rt_pread_full(fd, text, (size_t)hlen, 8) != 0) {
            free(text);
            text = NULL;
        }
    }
    close(fd);
    json_t *root = text ? json_loadb(text, (size_t)hlen, 0, NULL) : NULL;
    free(text);
    json_t *meta = root ? json_incref(json_object_get(root, "__metadata__")) : NULL;
    json_decref(root);
    if (!json_is_object(meta)) {
        json_decref(meta);
        rt_fail(err, errlen, "%s: not a training state (no metadata)", path);
        return NULL;
    }
    return meta;
}

// A metadata value as an unsigned integer written in digits of base 10 or 16 alone (no sign,
// no space: strtoull would take "-1" as 2^64 - 1), from lo to hi.
static int meta_u64(json_t *meta, const char *path, const char *key, int base, uint64_t lo, uint64_t hi,
                    uint64_t *v, char *err, size_t errlen) {
    const char *s = json_string_value(json_object_get(meta, key));
    if (!s)
        return rt_fail(err, errlen, "%s: no \"%s\" in its metadata: not a training state", path, key);
    size_t n = strspn(s, base == 16 ? "0123456789abcdefABCDEF" : "0123456789");
    char *end;
    errno = 0;
    *v = n > 0 && !s[n] ? strtoull(s, &end, base) : 0;
    if (n == 0 || s[n] || errno || *v < lo || *v > hi)
        return rt_fail(err, errlen, "%s: \"%s\" is \"%.40s\" in its metadata, not a %s from %" PRIu64
                       " to %" PRIu64 ": not a state ftc wrote", path, key, s,
                       base == 16 ? "hexadecimal number" : "whole number", lo, hi);
    return 0;
}

// When the state file path is missing: an error if ckpt holds the state of a job of another
// number of ranks (else the opening of path reports it).
static int check_ranks(const char *ckpt, const char *path, int ranks, char *err, size_t errlen) {
    struct stat fst;
    if (stat(path, &fst) == 0)
        return 0;
    DIR *d = opendir(ckpt);
    int other = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, "state.safetensors"))
            other = 1;
        else if (!strncmp(e->d_name, "state-rank", 10) && strstr(e->d_name, "-of-"))
            other = atoi(strstr(e->d_name, "-of-") + 4);
    }
    if (d)
        closedir(d);
    if (other > 0 && other != ranks)
        return rt_fail(err, errlen, "%s: a checkpoint of a job of %d rank%s; this one has %d (resume "
                       "on as many ranks as saved it)", ckpt, other, other == 1 ? "" : "s", ranks);
    return 0;
}

// What a state's metadata records of the run.
typedef struct StateMeta {
    uint64_t step, seed, plan;   // plan: the fingerprint of the plan that saved it
    uint64_t skipped, tracker, data;
    double scale;                // fp16's loss scale; left as it was where none is recorded
} StateMeta;

// The metadata of the state file at path (meta, NULL when it did not read) into *m, each
// value checked.
static int read_meta(json_t *meta, const char *path, StateMeta *m, char *err, size_t errlen) {
    // (a state is saved after a step: step 1 at least; at most 2^53, where the schedule's
    // arithmetic in double is still exact)
    const uint64_t most = (uint64_t)1 << 53;
    int bad = !meta || meta_u64(meta, path, "step", 10, 1, most, &m->step, err, errlen) != 0 ||
              meta_u64(meta, path, "seed", 10, 0, UINT64_MAX, &m->seed, err, errlen) != 0 ||
              meta_u64(meta, path, "plan", 16, 0, UINT64_MAX, &m->plan, err, errlen) != 0 ||
              (json_object_get(meta, "skipped") &&   // absent: a state from before skipping
               meta_u64(meta, path, "skipped", 10, 0, most, &m->skipped, err, errlen) != 0) ||
              (json_object_get(meta, "data") &&   // absent: a state from before it was recorded
               meta_u64(meta, path, "data", 16, 1, UINT64_MAX, &m->data, err, errlen) != 0);
    if (!bad && m->skipped > m->step)
        bad = rt_fail(err, errlen, "%s: %" PRIu64 " steps skipped of %" PRIu64, path, m->skipped, m->step);
    // fp16's loss scale and its growth tracker (absent: a state from before loss scaling)
    const char *ls = meta ? json_string_value(json_object_get(meta, "loss_scale")) : NULL;
    if (!bad && ls) {
        char *end;
        m->scale = strtod(ls, &end);
        if (end == ls || *end || !(m->scale > 0 && m->scale < 1e38) ||
            meta_u64(meta, path, "scale_tracker", 10, 0, most, &m->tracker, err, errlen) != 0)
            bad = rt_fail(err, errlen, "%s: a bad loss scale in its metadata", path);
    }
    return bad ? -1 : 0;
}

// A resumed run takes where its weights came from as the checkpoint recorded it: the
// model's directory (its saves copy its config and tokenizer files, its adapter names it)
// and each tensor's dtype there (its saves are in it); absent from a state of before.
static int read_origin(Exec *x, json_t *meta, const char *path, char *err, size_t errlen) {
    const char *base = json_string_value(json_object_get(meta, "base_model"));
    const char *src = json_string_value(json_object_get(meta, "source_dtypes"));
    int n = x->plan->nbuf, bad = 0;
    if (base && (strlen(base) >= sizeof x->base_model || (base[0] && base[0] != '/')))
        bad = rt_fail(err, errlen, "%s: a bad base_model in its metadata", path);
    for (int i = 0; !bad && src && src[0] && i <= n; i++)
        if (i == n ? src[i] != '\0' : !src[i] || !strchr("0123456", src[i]))
            bad = rt_fail(err, errlen, "%s: a bad source_dtypes in its metadata (one of 0 to 6 a buffer)", path);
    if (!bad && base && base[0])
        snprintf(x->base_model, sizeof x->base_model, "%s", base);
    if (!bad && src && src[0]) {
        free(x->source_dtype);
        x->source_dtype = xcalloc((size_t)n + 1, 1);
        for (int i = 0; i < n; i++)
            x->source_dtype[i] = (uint8_t)(src[i] - '0');
    }
    return bad ? -1 : 0;
}

// Buffer i from the tensor of its name in the state file set (at path), which must have the
// dtype and shape the buffer is saved with.
static int load_buffer(Exec *x, StSet *set, const char *path, int i, char *err, size_t errlen) {
    const PlanBuffer *b = &x->plan->buf[i];
    const StTensor *t = st_find(set, b->name);
    size_t bytes = (size_t)plan_dtype_bytes(b->dtype, plan_elems(b));
    void *v = xmalloc(bytes + 1);
    bool whole;
    StDType want = saved_as(b, &whole);
    int64_t flat = (int64_t)bytes;
    const int64_t *shape = whole ? b->shape : &flat;
    int ndim = whole ? b->ndim : 1;
    bool same = t && t->dtype == want && t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = t->shape[d] == shape[d];
    int rc = 0;
    if (!t) {
        rc = rt_fail(err, errlen, "%s: no '%s'", path, b->name);
    } else if (!same) {
        char got[160], exp[160];
        shape_text(got, sizeof got, st_dtype_name(t->dtype), t->shape, t->ndim);
        shape_text(exp, sizeof exp, st_dtype_name(want), shape, ndim);
        rc = rt_fail(err, errlen, "%s: '%s' is %s, this plan's buffer %s: not a state of this plan",
                     path, b->name, got, exp);
    } else if (!v || st_read_raw(set, t, v, bytes, err, errlen) != 0) {
        rc = -1;
    } else {
        rt_write_raw(x, i, v);
    }
    free(v);
    return rc;
}

int rt_checkpoint_load(Exec *x, const char *ckpt, int64_t *step, uint64_t *seed, char *err, size_t errlen) {
    const Plan *p = x->plan;
    char path[4400], name[64];
    int rank = x->comm ? x->comm->rank : 0, ranks = x->comm ? x->comm->ranks : 1;
    state_name(name, sizeof name, rank, ranks);
    snprintf(path, sizeof path, "%s/%s", ckpt, name);
    if (check_ranks(ckpt, path, ranks, err, errlen) != 0)
        return -1;
    StateMeta m = {.scale = x->loss_scale};
    json_t *meta = state_meta(path, err, errlen);   // (read once: its values, then its origin)
    int rc = read_meta(meta, path, &m, err, errlen);
    if (rc == 0 && m.plan != fingerprint(p))
        rc = rt_fail(err, errlen, "%s: the state of another plan (its buffers differ from this plan's)", path);
    StSet *set = NULL;
    if (rc == 0)
        rc = st_open(&set, path, err, errlen);
    for (int i = 0; i < p->nbuf && rc == 0; i++)
        if (carried(&p->buf[i]))
            rc = load_buffer(x, set, path, i, err, errlen);
    if (set)
        st_close(set);
    if (rc == 0)
        rc = read_origin(x, meta, path, err, errlen);
    json_decref(meta);
    // Gradients are zero between steps, so a checkpoint holds none; the step's first
    // micro-step adds into them (GEMMs with beta = 1), so they start at zero here too.
    for (int i = 0; i < p->nbuf && rc == 0; i++)
        if (p->buf[i].kind == PK_GRAD && p->buf[i].view < 0)
            rt_zero(x, i);
    if (rc == 0)
        *step = (int64_t)m.step, *seed = m.seed, x->skipped = (int64_t)m.skipped, x->loss_scale = m.scale,
        x->scale_tracker = (int64_t)m.tracker, x->data_print = m.data;
    return rc;
}
