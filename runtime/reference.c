// reference.c — a preference loss's reference, precomputed (reference = precomputed): the
// plan's reference phase over every window of the training and eval files, before the
// first step, on the weights the run starts from; each window's trained targets'
// log-probabilities summed (in double, in target order) into one float, which the step's
// batches and the eval phase's read back (ref_logps, runtime/feed.c).
//
// The sums are kept in SAVE/reference_logps.bin (with --save), which a resumed run reads:
// by then the weights have moved, and the reference is the model the run started from.
// Its layout, little-endian: "FTCREFLP", u32 version 1, u32 0, u64 the training file's
// windows, u64 the eval file's (0: none), u64 the training file's fingerprint
// (data_fingerprint), u64 the eval file's (0: none), then a float a window of each.
#include "session.h"
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { REF_HEADER = 48 };

// Each window's sum over `nwin` windows of file d (file order), a micro-batch at a time: the
// rows past its end are ignored targets, their sums not kept.
static int sums_of(Exec *x, Feed *f, DataFile *d, uint64_t nwin, float *out, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int64_t B = p->micro_batch, S = p->seq;
    const PlanBuffer *ro = plan_role(p, PR_REF_OUT);
    float *lp = xmalloc(sizeof(float) * (size_t)(B * S));
    int rc = 0;
    for (uint64_t w0 = 0; w0 < nwin && rc == 0; w0 += (uint64_t)B) {
        if ((rc = rt_feed_file_batch(x, f, d, nwin, w0, err, errlen)) != 0 ||
            (rc = rt_exec_phase(x, PHASE_REF, err, errlen)) != 0)
            break;
        rt_read_f32(x, ro->id, lp);
        for (int64_t b = 0; b < B && w0 + (uint64_t)b < nwin; b++) {
            double s = 0.0;
            for (int64_t t = 0; t < S; t++)
                if (f->targets[b * S + t] >= 0)
                    s += lp[b * S + t];
            out[w0 + (uint64_t)b] = (float)s;
        }
    }
    free(lp);
    return rc;
}

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

// The header of the sums of f's files.
static void header(const Feed *f, unsigned char *h) {
    memset(h, 0, REF_HEADER);
    memcpy(h, "FTCREFLP", 8);
    h[8] = 1;
    put_u64(h + 16, f->nwin);
    put_u64(h + 24, f->eval ? f->eval_nwin : 0);
    put_u64(h + 32, data_fingerprint(f->d));
    put_u64(h + 40, f->eval ? data_fingerprint(f->eval) : 0);
}

static int save_sums(const Feed *f, const char *dir, char *err, size_t errlen) {
    char path[4200], tmp[4400];
    snprintf(path, sizeof path, "%s/reference_logps.bin", dir);
    int fd = rt_tmp_create(path, tmp, sizeof tmp);
    if (fd < 0)
        return rt_fail(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    unsigned char h[REF_HEADER];
    header(f, h);
    bool ok = rt_write_full(fd, h, sizeof h) == 0 && rt_write_full(fd, f->ref, sizeof(float) * f->nwin) == 0 &&
              (!f->eval || rt_write_full(fd, f->eval_ref, sizeof(float) * f->eval_nwin) == 0) && fsync(fd) == 0;
    ok &= close(fd) == 0;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return rt_fail(err, errlen, "%s: cannot write: %s", path, strerror(e));
    }
    return 0;
}

// The sums SAVE/reference_logps.bin holds for f's files: 1 read, 0 none there, -1 with err
// when it is there but of other data.
static int load_sums(Feed *f, const char *dir, char *err, size_t errlen) {
    char path[4200];
    snprintf(path, sizeof path, "%s/reference_logps.bin", dir);
    size_t bytes;
    unsigned char *b = (unsigned char *)rt_read_whole(path, &bytes);
    if (!b)
        return errno == ENOENT ? 0 : rt_fail(err, errlen, "%s: cannot read: %s", path, strerror(errno));
    unsigned char h[REF_HEADER];
    header(f, h);
    size_t want = REF_HEADER + sizeof(float) * (f->nwin + (f->eval ? f->eval_nwin : 0));
    bool same = bytes == want && memcmp(b, h, 16) == 0 && get_u64(b + 16) == get_u64(h + 16) &&
                get_u64(b + 32) == get_u64(h + 32);
    bool eval_same = same && get_u64(b + 24) == get_u64(h + 24) && get_u64(b + 40) == get_u64(h + 40);
    if (!eval_same) {
        free(b);
        return rt_fail(err, errlen, "%s holds the reference's log-probabilities of other data (or another "
                       "eval file) than this run's: resume with the run's own --data and --eval-data", path);
    }
    memcpy(f->ref, b + REF_HEADER, sizeof(float) * f->nwin);
    if (f->eval)
        memcpy(f->eval_ref, b + REF_HEADER + sizeof(float) * f->nwin, sizeof(float) * f->eval_nwin);
    free(b);
    return 1;
}

int rt_reference_sums(Exec *x, Feed *f, const char *save, bool resumed, bool lora, bool *computed, char *err,
                      size_t errlen) {
    *computed = false;
    if (!x->plan->nins[PHASE_REF])
        return 0;
    f->ref = xcalloc(f->nwin + 1, sizeof(float));
    f->eval_ref = f->eval ? xcalloc(f->eval_nwin + 1, sizeof(float)) : NULL;
    int had = save ? load_sums(f, save, err, errlen) : 0;
    if (had != 0)
        return had < 0 ? -1 : 0;
    // A resumed full fine-tune's weights are no longer those it started from; with LoRA the
    // reference is the frozen base, the same as at the start.
    if (resumed && !lora)
        return rt_fail(err, errlen, "the reference's log-probabilities (reference = precomputed) are not in %s: "
                       "a resumed full fine-tune cannot compute them again, its weights have moved",
                       save ? save : "the run's --save directory");
    if (sums_of(x, f, f->d, f->nwin, f->ref, err, errlen) != 0 ||
        (f->eval && sums_of(x, f, f->eval, f->eval_nwin, f->eval_ref, err, errlen) != 0))
        return -1;
    *computed = true;
    return save ? save_sums(f, save, err, errlen) : 0;
}
