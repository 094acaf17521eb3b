// verify.c — the plan verifier. It knows nothing of how offsets were chosen: it
// replays the instruction list against the buffer table and checks the invariants
// execution relies on. ftc compile runs it on every plan it writes; tests corrupt
// plans on purpose and expect each fault to be named.
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#define PROBLEM(...)                                                                    \
    do {                                                                                \
        if (out) {                                                                      \
            fprintf(out, "plan: ");                                                     \
            fprintf(out, __VA_ARGS__);                                                  \
            fputc('\n', out);                                                           \
        }                                                                               \
        bad++;                                                                          \
    } while (0)

static bool whole_step(const PlanBuffer *b) {
    return b->kind == PK_PARAM || b->kind == PK_GRAD || b->kind == PK_STATE || b->kind == PK_QUANT;
}

// A buffer's own bytes: views have none.
static bool owns_bytes(const PlanBuffer *b) { return b->view < 0 && b->bytes > 0; }

// Two byte-sharing buffers may overlap in time only at the instant one is written in
// place over the other (a declared reuse).
static bool reuse_pair(const int *root, const PlanBuffer *a, const PlanBuffer *b) {
    if (root[a->id] != root[b->id])
        return false;
    int lo = a->first > b->first ? a->first : b->first;
    int hi = a->last < b->last ? a->last : b->last;
    return lo == hi && (a->last == b->first || b->last == a->first);
}

static int by_first(const void *x, const void *y, void *ctx) {
    const Plan *p = ctx;
    const PlanBuffer *a = &p->buf[*(const int *)x], *b = &p->buf[*(const int *)y];
    return a->first != b->first ? a->first - b->first : a->id - b->id;
}

int plan_verify(const Plan *p, FILE *out) {
    int bad = 0, nbuf = p->nbuf, ni = plan_instr_count(p);
    if (p->budget_bytes > 0 && p->arena_bytes[ARENA_DEVICE] + p->reserve_bytes > p->budget_bytes)
        PROBLEM("the device arena (%lld bytes) and the context reserve (%lld) exceed the budget "
                "(%lld)", (long long)p->arena_bytes[ARENA_DEVICE], (long long)p->reserve_bytes,
                (long long)p->budget_bytes);
    // Every buffer inside its arena, with a sane lifetime.
    for (int i = 0; i < nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->view >= nbuf || b->reuse >= nbuf || b->of >= nbuf) {
            PROBLEM("buffer %s links to a buffer that does not exist", b->name);
            continue;
        }
        if (!owns_bytes(b))
            continue;
        if (b->offset < 0 || b->offset + b->bytes > p->arena_bytes[b->arena])
            PROBLEM("buffer %s [%lld, %lld) lies outside the %s arena of %lld bytes", b->name,
                    (long long)b->offset, (long long)(b->offset + b->bytes),
                    b->arena == ARENA_DEVICE ? "device" : "host", (long long)p->arena_bytes[b->arena]);
        if (b->first < 0 || b->last < b->first || b->last >= ni)
            PROBLEM("buffer %s has lifetime [%d, %d] outside the %d instructions", b->name,
                    b->first, b->last, ni);
        if (whole_step(b) && (b->first != 0 || b->last != ni - 1))
            PROBLEM("buffer %s (%s) must live for the whole step, not [%d, %d]", b->name,
                    b->category, b->first, b->last);
    }
    // The runtime reads the loss and the logits after the micro-step's last instruction.
    int end = p->nins[PHASE_FWD] + p->nins[PHASE_BWD] - 1;
    for (int i = 0; i < nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (b->role && (!strcmp(b->role, "loss") || !strcmp(b->role, "logits"))) {
            const PlanBuffer *base = b->view >= 0 && b->view < nbuf ? &p->buf[b->view] : b;
            if (base->last < end)
                PROBLEM("buffer %s (the %s) dies at instruction %d, before the runtime reads it "
                        "after instruction %d", b->name, b->role, base->last, end);
        }
    }
    // No two buffers live at once share bytes. Sweep time: two buffers overlapping in
    // time are both alive when the later one starts, so each is checked against the
    // buffers alive then (O(n·k), k the live buffers).
    int *root = plan_roots(p);
    int *ord = malloc(sizeof(int) * (size_t)(nbuf + 1)), n = 0;
    int *alive = malloc(sizeof(int) * (size_t)(nbuf + 1)), na = 0;
    for (int i = 0; i < nbuf; i++)
        if (owns_bytes(&p->buf[i]) && p->buf[i].first >= 0 && p->buf[i].last >= p->buf[i].first)
            ord[n++] = i;
    qsort_r(ord, (size_t)n, sizeof(int), by_first, (void *)p);
    for (int x = 0; x < n; x++) {
        const PlanBuffer *b = &p->buf[ord[x]];
        int keep = 0;
        for (int k = 0; k < na; k++)
            if (p->buf[alive[k]].last >= b->first)
                alive[keep++] = alive[k];
        na = keep;
        for (int k = 0; k < na; k++) {
            const PlanBuffer *a = &p->buf[alive[k]];
            bool bytes = a->arena == b->arena && a->offset < b->offset + b->bytes &&
                         b->offset < a->offset + a->bytes;
            if (bytes && !reuse_pair(root, a, b))
                PROBLEM("buffers %s [%lld, %lld) and %s [%lld, %lld) share bytes while both live "
                        "(instructions %d..%d and %d..%d)",
                        a->name, (long long)a->offset, (long long)(a->offset + a->bytes), b->name,
                        (long long)b->offset, (long long)(b->offset + b->bytes), a->first, a->last,
                        b->first, b->last);
        }
        alive[na++] = ord[x];
    }
    free(ord), free(alive), free(root);
    // Replay: operands exist, reads follow writes, touches fall inside lifetimes.
    bool *written = calloc((size_t)nbuf + 1, sizeof(bool));
    for (int i = 0; i < nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        written[i] = whole_step(b) || (b->role && (!strcmp(b->role, "tokens") || !strcmp(b->role, "targets")));
    }
    for (int id = 0; id < ni; id++) {
        const PlanInstr *in = plan_instr(p, id);
        for (int k = 0; k < in->nin + in->nout + 1; k++) {
            bool is_in = k < in->nin, is_ws = k == in->nin + in->nout;
            int bid = is_in ? in->in[k] : is_ws ? in->ws : in->out[k - in->nin];
            if (bid < 0)
                continue;   // an absent optional input, or no workspace
            if (bid >= nbuf) {
                PROBLEM("instruction %d (%s) names buffer %d, which does not exist", id, in->op, bid);
                continue;
            }
            const PlanBuffer *b = &p->buf[bid];
            const PlanBuffer *base = b->view >= 0 && b->view < nbuf ? &p->buf[b->view] : b;
            bool update = !is_in && !is_ws && ((in->update >> (k - in->nin)) & 1u);
            if ((is_in || update) && !written[base->id] && !written[bid])
                PROBLEM("instruction %d (%s) reads %s before any instruction writes it", id,
                        in->op, b->name);
            if (id < base->first || id > base->last)
                PROBLEM("instruction %d (%s) touches %s outside its lifetime [%d, %d]%s", id,
                        in->op, b->name, base->first, base->last,
                        id > base->last ? ": it was freed too early" : "");
        }
        for (int k = 0; k < in->nout; k++)
            if (in->out[k] >= 0 && in->out[k] < nbuf) {
                written[in->out[k]] = true;
                const PlanBuffer *b = &p->buf[in->out[k]];
                if (b->view >= 0 && b->view < nbuf)
                    written[b->view] = true;
            }
    }
    free(written);
    return bad;
}
