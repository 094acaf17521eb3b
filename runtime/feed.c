// feed.c — what a run feeds the plan: token files opened and checked against it before step
// one, and each micro-batch written into its buffers: the tokens, the targets (one that is
// not trained IGNORED_TARGET), the position ids (with packing restarting at every record,
// as transformers' position_ids of packed sequences; else 0..seq-1 along each window), and
// the count of the step's trained targets, the loss's divisor. Training windows come in
// the seeded shuffled order; the eval file's in file order. A pairs plan (a preference
// loss) reads a paired file: rows 2j and 2j+1 are one pair's chosen and rejected windows,
// the order is over pairs, and the count is the step's pairs and their chosen rows' trained
// targets (rt_write_pair_counts).
#include "session.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// A target the loss ignores (PyTorch's ignore_index): every negative target is.
enum { IGNORED_TARGET = -100 };

// Whether plan p reads pairs but its micro-batch cannot hold whole ones (the compiler's
// business; the feed refuses it rather than split a pair), with why in err naming `path`.
static bool odd_rows(const Plan *p, const char *path, char *err, size_t errlen) {
    if (!p->pairs || p->micro_batch % 2 == 0)
        return false;
    snprintf(err, errlen, "%s: the plan reads preference pairs, two rows each, but its micro-batch is %lld rows",
             path, (long long)p->micro_batch);
    return true;
}

// Why token file d at `path` cannot feed plan p, into err; 0 when it can.
static int check_tokens(const Plan *p, DataFile *d, const char *path, uint64_t *nwin, char *err,
                        size_t errlen) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX, trained = 0;
    if (data_window_count(d, (int)p->seq, nwin, err, errlen) != 0)
        return -1;
    if (*nwin > ram / 4 / sizeof(uint64_t))
        return snprintf(err, errlen, "%s: %llu windows of %lld tokens; their shuffled order would take "
                        "more than a quarter of this machine's memory", path, (unsigned long long)*nwin,
                        (long long)p->seq + 1), -1;
    if (p->packing && !data_has_info(d))
        return snprintf(err, errlen, "%s has no record starts, but the plan packs records (packing = true): "
                        "make it with ftc data --tokenizer", path), -1;
    if (data_packed_window(d) && data_packed_window(d) != (uint64_t)p->seq)
        return snprintf(err, errlen, "%s was packed for seq %llu (ftc data --pack %llu), but the plan's seq "
                        "is %lld: records would cross windows", path, (unsigned long long)data_packed_window(d),
                        (unsigned long long)data_packed_window(d), (long long)p->seq), -1;
    if (p->pairs && !data_paired(d))
        return snprintf(err, errlen, "%s holds no preference pairs, but the plan trains on pairs (a preference "
                        "loss): make it with ftc data from records with \"chosen\" and \"rejected\"", path), -1;
    if (!p->pairs && data_paired(d))
        return snprintf(err, errlen, "%s holds preference pairs; train it with a preference loss (dpo, ipo, "
                        "orpo, simpo)", path), -1;
    if (odd_rows(p, path, err, errlen))
        return -1;
    if (data_check_vocab(d, (int32_t)p->vocab, &trained, err, errlen) != 0)
        return -1;
    if (trained == 0)
        return snprintf(err, errlen, "%s: no token is trained (every target is masked)", path), -1;
    return 0;
}

int rt_feed_open(const Plan *p, const char *path, DataFile **out, uint64_t *nwin, char *err, size_t errlen) {
    DataFile *d = NULL;
    if (data_open(&d, path, err, errlen) != 0)
        return -1;
    if (check_tokens(p, d, path, nwin, err, errlen) != 0) {
        data_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

bool rt_feed_stage(Feed *f, const Plan *p) {
    size_t batch_ids = (size_t)(p->micro_batch * p->seq);
    f->order = malloc(sizeof(uint64_t) * (f->nwin + 1));   // (no training file: none)
    f->window = malloc(sizeof(int32_t) * (size_t)(p->seq + 1));
    f->info = malloc((size_t)(p->seq + 1));
    f->tokens = malloc(sizeof(int32_t) * batch_ids), f->targets = malloc(sizeof(int32_t) * batch_ids);
    f->positions = malloc(sizeof(int32_t) * batch_ids);
    f->ref_rows = calloc((size_t)p->micro_batch + 1, sizeof(float));
    return f->order && f->window && f->info && f->tokens && f->targets && f->positions && f->ref_rows;
}

void rt_feed_shuffle(Feed *f, const Plan *p, uint64_t seed) {
    data_shuffle(f->order, p->pairs ? f->nwin / 2 : f->nwin, seed);
}

// The training window of row r of the run (counted from the order's start, wrapping at its
// end): with pairs, rows 2j and 2j+1 the chosen and rejected windows of pair order[j].
static uint64_t row_window(const Feed *f, bool pairs, uint64_t r) {
    if (!pairs)
        return f->order[r % f->nwin];
    return 2 * f->order[(r / 2) % (f->nwin / 2)] + r % 2;
}

// ranks x accum x micro_batch windows (every rank's micro-batches: the count is the whole
// global step's, so each rank's loss is its share of the step's mean and the ranks'
// gradients sum to it), the loss their mean over the whole step, whatever the micro-batch
// and the number of ranks; with pairs, half as many pairs.
int rt_feed_count(const Exec *x, Feed *f, uint64_t first, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int64_t ranks = p->ranks > 1 ? p->ranks : 1, rows = ranks * p->accum * p->micro_batch;
    if (odd_rows(p, data_path(f->d), err, errlen))
        return -1;
    f->count = f->chosen = 0;
    f->pairs = p->pairs ? rows / 2 : 0;
    for (int64_t k = 0; k < rows; k++) {
        uint64_t n, r = first + (uint64_t)k;
        if (data_window_trained(f->d, row_window(f, p->pairs, r), (int)p->seq, &n, err, errlen) != 0)
            return -1;
        f->count += (int64_t)n;
        if (p->pairs && r % 2 == 0)
            f->chosen += (int64_t)n;
    }
    return 0;
}

// Row b of the micro-batch from the window in f->window and f->info: its tokens, targets
// and position ids; the trained targets it adds.
static int64_t put_row(Feed *f, int64_t b, int S) {
    int64_t trained = 0;
    memcpy(f->tokens + b * S, f->window, sizeof(int32_t) * (size_t)S);
    for (int j = 0; j < S; j++) {
        bool t = f->info[j + 1] & DATA_TRAIN;
        f->targets[b * S + j] = t ? f->window[j + 1] : IGNORED_TARGET;
        f->positions[b * S + j] = j == 0 || (f->info[j] & DATA_START) ? 0 : f->positions[b * S + j - 1] + 1;
        trained += t;
    }
    return trained;
}

// The staged micro-batch into the plan's buffers, with the step's count of trained
// targets, or with pairs its pairs and their chosen rows' trained targets (and with a
// precomputed reference, its rows' sums).
static void write_batch(Exec *x, const Feed *f, int64_t count, int64_t pairs, int64_t chosen) {
    const Plan *p = x->plan;
    const PlanBuffer *ref = plan_role(p, PR_REF_LOGPS);
    if (ref)
        rt_write_raw(x, ref->id, f->ref_rows);
    rt_write_raw(x, plan_role(p, PR_TOKENS)->id, f->tokens);
    rt_write_raw(x, plan_role(p, PR_TARGETS)->id, f->targets);
    rt_write_positions(x, p->packing ? f->positions : NULL);
    if (p->pairs)
        rt_write_pair_counts(x, pairs, chosen);
    else
        rt_write_target_count(x, count);
}

int rt_feed_batch(Exec *x, Feed *f, uint64_t first, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int S = (int)p->seq;
    if (odd_rows(p, data_path(f->d), err, errlen))
        return -1;
    for (int64_t b = 0; b < p->micro_batch; b++) {
        uint64_t w = row_window(f, p->pairs, first + (uint64_t)b);
        if (data_read_window(f->d, w, S, f->window, f->info, (int32_t)p->vocab, err, errlen) != 0)
            return -1;
        put_row(f, b, S);
        f->ref_rows[b] = f->ref ? f->ref[w] : 0.0f;
    }
    write_batch(x, f, f->count, f->pairs, f->chosen);
    return 0;
}

// A row past the eval file's last window is all ignored targets (with pairs, no pair: the
// file's windows are whole pairs, and `first` and the micro-batch are even).
// Windows first .. of file d in file order (its sums `ref`, or NULL) into the plan's
// buffers; the count the loss divides by into *count.
static int file_batch(Exec *x, Feed *f, DataFile *d, uint64_t nwin, const float *ref, uint64_t first,
                      int64_t *count, char *err, size_t errlen) {
    const Plan *p = x->plan;
    int S = (int)p->seq;
    int64_t trained = 0, pairs = 0, chosen = 0;
    *count = 0;
    if (odd_rows(p, data_path(d), err, errlen))
        return -1;
    for (int64_t b = 0; b < p->micro_batch; b++) {
        uint64_t w = first + (uint64_t)b;
        f->ref_rows[b] = ref && w < nwin ? ref[w] : 0.0f;
        if (w >= nwin) {
            memset(f->tokens + b * S, 0, sizeof(int32_t) * (size_t)S);
            for (int j = 0; j < S; j++)
                f->targets[b * S + j] = IGNORED_TARGET, f->positions[b * S + j] = j;
            continue;
        }
        if (data_read_window(d, w, S, f->window, f->info, (int32_t)p->vocab, err, errlen) != 0)
            return -1;
        int64_t n = put_row(f, b, S);
        trained += n;
        if (w % 2 == 0)
            pairs++, chosen += n;
    }
    write_batch(x, f, trained, pairs, chosen);
    *count = p->pairs ? pairs : trained;
    return 0;
}

int rt_feed_eval_batch(Exec *x, Feed *f, uint64_t first, int64_t *count, char *err, size_t errlen) {
    return file_batch(x, f, f->eval, f->eval_nwin, f->eval_ref, first, count, err, errlen);
}

int rt_feed_file_batch(Exec *x, Feed *f, DataFile *d, uint64_t nwin, uint64_t first, char *err, size_t errlen) {
    int64_t count;
    return file_batch(x, f, d, nwin, NULL, first, &count, err, errlen);
}

void rt_feed_close(Feed *f) {
    free(f->order);
    free(f->window), free(f->info);
    free(f->tokens), free(f->targets), free(f->positions);
    free(f->ref), free(f->eval_ref), free(f->ref_rows);
    data_close(f->d);
    data_close(f->eval);
}
