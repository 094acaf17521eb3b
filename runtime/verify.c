// verify.c — the plan verifier. It knows nothing of how offsets were chosen: it
// replays the instruction list against the buffer table and checks the invariants
// execution relies on. ftc compile runs it on every plan it writes; tests corrupt
// plans on purpose and expect each fault to be named.
#include "plan.h"
#include "overlap.h"

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

#define OPNAME(in) op_desc((in)->op)->name

static int check_streams(const Plan *p, const int *root, FILE *out);
static int check_groups(const Plan *p, const int *root, FILE *out);
static int check_last(const Plan *p, const int *root, FILE *out);

// Two buffers on shared bytes: a problem when both are alive at once.
typedef struct Clash {
    const Plan *p;
    const int *root;
    FILE *out;
    int bad;
} Clash;

static void clash(int x, int y, void *ctx) {
    Clash *c = ctx;
    const PlanBuffer *a = &c->p->buf[x], *b = &c->p->buf[y];   // a held the bytes before b
    if (a->last < b->first || reuse_pair(c->root, a, b))
        return;
    FILE *out = c->out;
    int bad = 0;
    PROBLEM("buffers %s [%lld, %lld) and %s [%lld, %lld) share bytes while both live "
            "(instructions %d..%d and %d..%d)",
            a->name, (long long)a->offset, (long long)(a->offset + a->bytes), b->name,
            (long long)b->offset, (long long)(b->offset + b->bytes), a->first, a->last, b->first, b->last);
    c->bad += bad;
}

// The budget holds the device arena and the context reserve; every buffer lies inside
// its arena, with a sane lifetime.
static int check_placement(const Plan *p, FILE *out) {
    int bad = 0, nbuf = p->nbuf, ni = plan_instr_count(p);
    if (p->budget_bytes > 0 && p->arena_bytes[ARENA_DEVICE] + p->reserve_bytes > p->budget_bytes)
        PROBLEM("the device arena (%lld bytes) and the context reserve (%lld) exceed the budget "
                "(%lld)", (long long)p->arena_bytes[ARENA_DEVICE], (long long)p->reserve_bytes,
                (long long)p->budget_bytes);
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
    return bad;
}

// The runtime reads the loss after the micro-step's last instruction (nothing reads
// the logits after their last reader), the eval loss after the eval phase's, the decode
// logits after the decode phase's; a KV cache keeps its rows from one run of the decode
// phase to the next, so it lives through the whole phase.
static int check_loss_reads(const Plan *p, FILE *out) {
    int bad = 0, nbuf = p->nbuf;
    int end = p->nins[PHASE_FWD] + p->nins[PHASE_BWD] - 1;
    int eval_end = end + p->nins[PHASE_OPT] + p->nins[PHASE_EVAL];
    int decode_start = eval_end + 1, decode_end = decode_start + p->nins[PHASE_DECODE] - 1;
    int ref_end = plan_instr_count(p) - 1;
    for (int i = 0; i < nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        bool eval = b->role && b->role == PR_EVAL_LOSS, decode = b->role && b->role == PR_DECODE_LOGITS;
        if (b->role == PR_REF_OUT && (p->nins[PHASE_REF] == 0 || (b->view >= 0 ? p->buf[b->view].last : b->last) < ref_end))
            PROBLEM("buffer %s (the ref_out) must live to the reference phase's end, instruction %d", b->name, ref_end);
        if ((eval && p->nins[PHASE_EVAL] == 0) || (decode && p->nins[PHASE_DECODE] == 0))
            PROBLEM("buffer %s is the %s of a plan without an %s phase", b->name, plan_role_name(b->role),
                    eval ? "eval" : "decode");
        const PlanBuffer *base = b->view >= 0 && b->view < nbuf ? &p->buf[b->view] : b;
        int until = eval ? eval_end : decode ? decode_end : end;
        if (b->role && (eval || decode || b->role == PR_LOSS) && base->last < until)
            PROBLEM("buffer %s (the %s) dies at instruction %d, before the runtime reads it "
                    "after instruction %d", b->name, plan_role_name(b->role), base->last, until);
        if (b->kind == PK_CACHE && (p->nins[PHASE_DECODE] == 0 || b->view >= 0 || b->first > decode_start ||
                                    b->last < decode_end))
            PROBLEM("buffer %s (a KV cache) must live through the decode phase [%d, %d], not [%d, %d]", b->name,
                    decode_start, decode_end, b->first, b->last);
    }
    return bad;
}

// No two buffers live at once share bytes, but for a declared in-place reuse. Each
// buffer is born on bytes others held last; if those are dead by then, every
// earlier holder is (their lifetimes were apart too), so successions find any clash.
static int check_clashes(const Plan *p, const int *root, FILE *out) {
    ByteSpan *own = xmalloc(sizeof *own * (size_t)(p->nbuf + 1));
    int nown = 0;
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (owns_bytes(b) && b->first >= 0 && b->last >= b->first)
            own[nown++] = (ByteSpan){i, b->arena, b->offset, b->bytes, b->first};
    }
    Clash cl = {.p = p, .root = root, .out = out};
    byte_successions(own, nown, clash, &cl);
    free(own);
    return cl.bad;
}

// Instruction id's operands at its place in the replay: each exists, is written before
// it is read, and is touched inside its lifetime.
static int replay_operands(const Plan *p, int id, const bool *written, FILE *out) {
    int bad = 0, nbuf = p->nbuf;
    const PlanInstr *in = plan_instr(p, id);
    for (int k = 0; k < in->nin + in->nout + 1; k++) {
        bool is_in = k < in->nin, is_ws = k == in->nin + in->nout;
        int bid = is_in ? in->in[k] : is_ws ? in->ws : in->out[k - in->nin];
        if (bid < 0)
            continue;   // an absent optional input, or no workspace
        if (bid >= nbuf) {
            PROBLEM("instruction %d (%s) names buffer %d, which does not exist", id, OPNAME(in), bid);
            continue;
        }
        const PlanBuffer *b = &p->buf[bid];
        const PlanBuffer *base = b->view >= 0 && b->view < nbuf ? &p->buf[b->view] : b;
        bool update = !is_in && !is_ws && ((in->update >> (k - in->nin)) & 1u);
        if ((is_in || update) && !written[base->id] && !written[bid])
            PROBLEM("instruction %d (%s) reads %s before any instruction writes it", id,
                    OPNAME(in), b->name);
        if (id < base->first || id > base->last)
            PROBLEM("instruction %d (%s) touches %s outside its lifetime [%d, %d]%s", id,
                    OPNAME(in), b->name, base->first, base->last,
                    id > base->last ? ": it was freed too early" : "");
    }
    return bad;
}

// Replay: operands exist, reads follow writes, touches fall inside lifetimes.
static int check_replay(const Plan *p, FILE *out) {
    int bad = 0, nbuf = p->nbuf, ni = plan_instr_count(p);
    bool *written = xcalloc((size_t)nbuf + 1, sizeof(bool));
    for (int i = 0; i < nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        // (the runtime writes the batch, the decode phase's token and position, and zeroes the
        // KV caches before a sequence)
        written[i] = whole_step(b) || b->kind == PK_CACHE ||
                     (b->role && (b->role == PR_TOKENS || b->role == PR_TARGETS || b->role == PR_POSITIONS ||
                                  b->role == PR_TARGET_COUNT || b->role == PR_DECODE_TOKEN ||
                                  b->role == PR_DECODE_POS || b->role == PR_REF_LOGPS));
    }
    for (int id = 0; id < ni; id++) {
        const PlanInstr *in = plan_instr(p, id);
        bad += replay_operands(p, id, written, out);
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

// Virtual buffers: made by one step of one fused instruction and living in it alone.
static int check_virtual(const Plan *p, FILE *out) {
    int bad = 0, nbuf = p->nbuf, ni = plan_instr_count(p);
    int *maker = xmalloc(sizeof(int) * (size_t)(nbuf + 1));
    for (int i = 0; i < nbuf; i++)
        maker[i] = -1;
    for (int id = 0; id < ni; id++) {
        const PlanInstr *in = plan_instr(p, id);
        for (int k = 0; k < in->nin + in->nout; k++) {
            int b = k < in->nin ? in->in[k] : in->out[k - in->nin];
            if (b >= 0 && b < nbuf && p->buf[b].virt)
                PROBLEM("instruction %d (%s) names %s, a virtual buffer, as an operand", id,
                        OPNAME(in), p->buf[b].name);
        }
        for (int s = 0; s < in->nstep; s++) {
            int o = in->step[s].out;
            if (o < 0 || o >= nbuf || !p->buf[o].virt)
                continue;
            if (maker[o] >= 0)
                PROBLEM("virtual buffer %s is made twice (instructions %d and %d)", p->buf[o].name,
                        maker[o], id);
            maker[o] = id;
            if (p->buf[o].first != id || p->buf[o].last != id)
                PROBLEM("virtual buffer %s lives over [%d, %d], not inside instruction %d",
                        p->buf[o].name, p->buf[o].first, p->buf[o].last, id);
        }
    }
    for (int i = 0; i < nbuf; i++)
        if (p->buf[i].virt && (maker[i] < 0 || p->buf[i].bytes != 0 || p->buf[i].view >= 0 ||
                               p->buf[i].reuse >= 0))
            PROBLEM("virtual buffer %s is %s", p->buf[i].name,
                    maker[i] < 0 ? "made by no fused step" : "given bytes, a view or a reuse");
    free(maker);
    return bad;
}

int plan_verify(const Plan *p, FILE *out) {
    int bad = check_placement(p, out);
    bad += check_loss_reads(p, out);
    int *root = plan_roots(p);
    bad += check_clashes(p, root, out);
    bad += check_streams(p, root, out) + check_groups(p, root, out) + check_last(p, root, out);
    free(root);
    bad += check_replay(p, out);
    bad += check_virtual(p, out);
    return bad;
}

// Instructions of the last micro-step only (last=1) are skipped on the others, so nothing
// after one in the micro-step (forward and backward) may touch what it writes, but another
// of the last micro-step: only the optimizer phase reads it.
static int check_last(const Plan *p, const int *root, FILE *out) {
    int bad = 0, micro = p->nins[PHASE_FWD] + p->nins[PHASE_BWD];
    int *by = xmalloc(sizeof(int) * (size_t)(p->nbuf + 1));   // per root: the last-only writer
    for (int i = 0; i < p->nbuf; i++)
        by[i] = -1;
    for (int id = 0; id < micro; id++) {
        const PlanInstr *in = plan_instr(p, id);
        for (int k = 0; k < in->nin + in->nout && !in->last; k++) {
            int b = k < in->nin ? in->in[k] : in->out[k - in->nin];
            if (b >= 0 && b < p->nbuf && by[root[b]] >= 0)
                PROBLEM("instruction %d (%s) touches %s, which instruction %d (%s) writes on the "
                        "last micro-step only", id, OPNAME(in), p->buf[b].name, by[root[b]],
                        OPNAME(plan_instr(p, by[root[b]])));
        }
        for (int k = 0; k < in->nout && in->last; k++)
            if (in->out[k] >= 0 && in->out[k] < p->nbuf)
                by[root[in->out[k]]] = id;
    }
    free(by);
    return bad;
}

// Grouped launches: the first instruction's launch does every member's work at the
// first's place. That is the members' own order as long as nothing on another stream
// can come between: members wait for and record no event, share the first's op and
// stream, every operand a member touches is alive at the first, and no member touches
// bytes another member writes (each would otherwise see the other's result, or not).
static int check_groups(const Plan *p, const int *root, FILE *out) {
    int bad = 0;
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < p->nins[ph]; i++) {
            const PlanInstr *first = &p->ins[ph][i];
            for (int k = 1; k < first->group && i + k < p->nins[ph]; k++) {
                const PlanInstr *m = &p->ins[ph][i + k];
                if (m->op != first->op || m->stream != first->stream || m->nwait || m->record >= 0)
                    PROBLEM("instruction %d (%s), in the group of instruction %d (%s), %s", m->id,
                            OPNAME(m), first->id, OPNAME(first),
                            m->nwait || m->record >= 0 ? "waits for or records an event"
                                                       : "has another op or stream");
                if (m->nin + m->nout > PLAN_GROUP_OPERANDS)
                    PROBLEM("instruction %d (%s) has %d operands; a grouped launch takes %d", m->id,
                            OPNAME(m), m->nin + m->nout, PLAN_GROUP_OPERANDS);
                for (int j = 0; j < m->nin + m->nout; j++) {
                    int b = j < m->nin ? m->in[j] : m->out[j - m->nin];
                    if (b < 0 || b >= p->nbuf)
                        continue;
                    const PlanBuffer *x = &p->buf[b];
                    const PlanBuffer *base = x->view >= 0 && x->view < p->nbuf ? &p->buf[x->view] : x;
                    if (base->first > first->id || base->last < first->id)
                        PROBLEM("instruction %d (%s), in the group of instruction %d, touches %s, "
                                "which is not alive there ([%d, %d])", m->id, OPNAME(m), first->id,
                                x->name, base->first, base->last);
                }
                for (int l = 0; l < k; l++) {
                    const PlanInstr *o = &p->ins[ph][i + l];
                    for (int a = 0; a < m->nin + m->nout; a++)
                        for (int b = 0; b < o->nin + o->nout; b++) {
                            int x = a < m->nin ? m->in[a] : m->out[a - m->nin];
                            int y = b < o->nin ? o->in[b] : o->out[b - o->nin];
                            if (x >= 0 && y >= 0 && x < p->nbuf && y < p->nbuf &&
                                (a >= m->nin || b >= o->nin) && root[x] == root[y])
                                PROBLEM("instructions %d and %d, in the group of instruction %d, "
                                        "touch %s and %s, one writing", o->id, m->id, first->id,
                                        p->buf[y].name, p->buf[x].name);
                        }
                }
            }
        }
    return bad;
}

//
// Streams and events. Within a stream instructions run in plan order; across streams
// only events order them. Happens-before is tracked with vector clocks: clock[s] of an
// instruction is the position on stream s of the latest instruction of s known to be
// done when it starts. Two instructions touching the same bytes, one writing, must be
// ordered: on one buffer (through views and in-place reuse), and across buffers that
// take each other's bytes within a phase (the allocator's reuse).
//

enum { S = STREAM_COUNT };

typedef struct Hist {           // per root buffer, within the phase being replayed
    int write;                  // the last instruction writing it, or -1
    int read[S];                // per stream, the last instruction reading it since
} Hist;

typedef struct Replay {
    const Plan *p;
    const int *root;
    FILE *out;
    int bad;
    int *pos;                   // per instruction: its position on its stream
    int *clock;                 // per instruction: S positions (-1 none)
    Hist *hist;                 // per buffer (used for roots)
} Replay;

#define RPROBLEM(...)                                                                   \
    do {                                                                                \
        if (r->out) {                                                                   \
            fprintf(r->out, "plan: ");                                                  \
            fprintf(r->out, __VA_ARGS__);                                               \
            fputc('\n', r->out);                                                        \
        }                                                                               \
        r->bad++;                                                                       \
    } while (0)

// Whether instruction i is done before instruction j starts (i earlier in the plan).
static bool before(const Replay *r, int i, int j) {
    const PlanInstr *a = plan_instr(r->p, i), *b = plan_instr(r->p, j);
    if (a->stream == b->stream)
        return i <= j;
    return r->clock[(size_t)j * S + a->stream] >= r->pos[i];
}

static void unordered(Replay *r, int i, int j, int buf, const char *how) {
    const PlanInstr *a = plan_instr(r->p, i), *b = plan_instr(r->p, j);
    RPROBLEM("instruction %d (%s on %s) and instruction %d (%s on %s) %s %s with no event "
             "ordering them", i, OPNAME(a), stream_name(a->stream), j, OPNAME(b),
             stream_name(b->stream), how, r->p->buf[buf].name);
}

// One touch of root buffer `rt` by instruction j.
static void touch(Replay *r, int j, int rt, bool write) {
    Hist *h = &r->hist[rt];
    if (h->write >= 0 && !before(r, h->write, j))
        unordered(r, h->write, j, rt, write ? "both write" : "write and read");
    if (write) {
        for (int s = 0; s < S; s++)
            if (h->read[s] >= 0 && !before(r, h->read[s], j))
                unordered(r, h->read[s], j, rt, "read and write");
        h->write = j;
        for (int s = 0; s < S; s++)
            h->read[s] = -1;
    } else {
        h->read[plan_instr(r->p, j)->stream] = j;
    }
}

// Which arena kind a stream may touch: compute device memory, host the host arena, and
// the copy streams one of each, in their direction.
static void check_arenas(Replay *r, const PlanInstr *in) {
    const Plan *p = r->p;
    bool copy = op_desc(in->op)->cls == OPC_COPY, coll = op_desc(in->op)->cls == OPC_COLLECTIVE;
    if (copy != (in->stream == STREAM_D2H || in->stream == STREAM_H2D) ||
        coll != (in->stream == STREAM_COMM)) {
        RPROBLEM("instruction %d (%s) runs on the %s stream", in->id, OPNAME(in),
                 stream_name(in->stream));
        return;
    }
    for (int k = 0; k < in->nin + in->nout + 1; k++) {
        bool is_in = k < in->nin, is_ws = k == in->nin + in->nout;
        int id = is_in ? in->in[k] : is_ws ? in->ws : in->out[k - in->nin];
        if (id < 0 || id >= p->nbuf)
            continue;
        MemKind kind = p->arena_kind[p->buf[r->root[id]].arena], want;
        if (in->stream == STREAM_COMPUTE || in->stream == STREAM_COMM)
            want = MEMK_DEVICE;
        else if (in->stream == STREAM_HOST)
            want = MEMK_PINNED;
        else   // d2h reads device memory into the host arena; h2d the other way
            want = (in->stream == STREAM_D2H) == is_in ? MEMK_DEVICE : MEMK_PINNED;
        if (kind != want)
            RPROBLEM("instruction %d (%s on %s) touches %s in %s memory", in->id, OPNAME(in),
                     stream_name(in->stream), p->buf[id].name,
                     kind == MEMK_DEVICE ? "device" : "host");
    }
    const PlanBuffer *cs = copy && in->nin == 1 && in->in[0] >= 0 ? &p->buf[in->in[0]] : NULL,
                     *cd = copy && in->nout == 1 ? &p->buf[in->out[0]] : NULL;
    if (cs && cd && plan_dtype_bytes(cs->dtype, plan_elems(cs)) != plan_dtype_bytes(cd->dtype, plan_elems(cd)))
        RPROBLEM("instruction %d (copy) moves %s into %s of another size", in->id,
                 p->buf[in->in[0]].name, p->buf[in->out[0]].name);
}

static bool lifelong(const PlanBuffer *b) {
    return b->kind == PK_PARAM || b->kind == PK_GRAD || b->kind == PK_STATE || b->kind == PK_QUANT;
}

// A root and the one that held its bytes last, one of them touched off compute.
typedef struct Shared {
    const bool *cross;
    struct {
        int a, b;
    } *pair;
    int n, cap;
} Shared;

static void shared_pair(int a, int b, void *ctx) {
    Shared *s = ctx;
    if (!s->cross[a] && !s->cross[b])
        return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->pair = xrealloc(s->pair, sizeof *s->pair * (size_t)s->cap);
    }
    s->pair[s->n].a = a, s->pair[s->n].b = b;
    s->n++;
}

// Per root: the span [first, last] of instructions touching it or anything sharing its
// bytes through views and reuse, and whether a stream other than compute touches it;
// each instruction's stream checked against the arenas it touches on the way.
static void root_spans(Replay *r, int *first, int *last, bool *cross) {
    const Plan *p = r->p;
    int ni = plan_instr_count(p);
    for (int i = 0; i < p->nbuf; i++)
        first[i] = ni, last[i] = -1;
    for (int id = 0; id < ni; id++) {
        const PlanInstr *in = plan_instr(p, id);
        check_arenas(r, in);
        for (int k = 0; k < in->nin + in->nout + 1; k++) {
            int b = k < in->nin ? in->in[k] : k < in->nin + in->nout ? in->out[k - in->nin] : in->ws;
            if (b < 0 || b >= p->nbuf)
                continue;
            int rt = r->root[b];
            first[rt] = id < first[rt] ? id : first[rt];
            last[rt] = id > last[rt] ? id : last[rt];
            cross[rt] |= in->stream != STREAM_COMPUTE;
        }
    }
}

// Roots born on bytes another root held last, one of the two touched off the
// compute stream (a succession of holders orders them all when each pair is).
static void shared_roots(const Plan *p, const int *root, const int *first, const int *last,
                         Shared *sh) {
    ByteSpan *br = xmalloc(sizeof *br * (size_t)(p->nbuf + 1));
    int nbr = 0;
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        if (root[i] == i && owns_bytes(b) && !lifelong(b) && last[i] >= 0)
            br[nbr++] = (ByteSpan){i, b->arena, b->offset, b->bytes, first[i]};
    }
    byte_successions(br, nbr, shared_pair, sh);
    free(br);
}

// Instruction j's clock on starting: the previous one of its stream's, advanced by
// the clocks of the instructions recording the events it waits for (of this phase).
static void start_clock(Replay *r, int j, int ph, int base, const int *last_on, const int *recorder) {
    const PlanInstr *in = plan_instr(r->p, j);
    int *c = &r->clock[(size_t)j * S];
    if (last_on[in->stream] >= 0)
        memcpy(c, &r->clock[(size_t)last_on[in->stream] * S], sizeof(int) * S);
    else
        for (int s = 0; s < S; s++)
            c[s] = -1;
    for (int k = 0; k < in->nwait; k++) {
        int e = in->wait[k], w = recorder[e];
        if (w < base) {
            RPROBLEM("instruction %d (%s) waits for event %d, which no earlier "
                     "instruction of the %s phase records", j, OPNAME(in), e,
                     plan_phase_name((PlanPhase)ph));
            continue;
        }
        for (int s = 0; s < S; s++)
            if (r->clock[(size_t)w * S + s] > c[s])
                c[s] = r->clock[(size_t)w * S + s];
    }
}

// Instruction j's touches: reads first, then writes (an update is both); the workspace
// is written. A group's members do their work in its first's launch or call: at its place.
static void touch_operands(Replay *r, int j, int base) {
    const PlanInstr *in = plan_instr(r->p, j);
    const int *root = r->root;
    int at = in->by >= 0 && in->by >= base && in->by < j ? in->by : j;
    for (int k = 0; k < in->nin; k++)
        if (in->in[k] >= 0)
            touch(r, at, root[in->in[k]], false);
    for (int k = 0; k < in->nout; k++)
        if ((in->update >> k) & 1u)
            touch(r, at, root[in->out[k]], false);
    for (int k = 0; k < in->nout; k++)
        touch(r, at, root[in->out[k]], true);
    if (in->ws >= 0)
        touch(r, at, root[in->ws], true);
}

// Replays phase ph (instructions [base, base + n)) on fresh histories: clocks, events
// recorded (once each), and every touch ordered after the last conflicting one.
static void replay_phase(Replay *r, int ph, int base, int *recorder) {
    int n = r->p->nins[ph], count[S] = {0}, last_on[S];
    for (int i = 0; i < r->p->nbuf; i++) {
        r->hist[i].write = -1;
        for (int s = 0; s < S; s++)
            r->hist[i].read[s] = -1;
    }
    for (int s = 0; s < S; s++)
        last_on[s] = -1;
    for (int j = base; j < base + n; j++) {
        const PlanInstr *in = plan_instr(r->p, j);
        start_clock(r, j, ph, base, last_on, recorder);
        r->pos[j] = count[in->stream]++;
        r->clock[(size_t)j * S + in->stream] = r->pos[j];
        last_on[in->stream] = j;
        if (in->record >= 0) {
            if (recorder[in->record] >= 0)
                RPROBLEM("event %d is recorded by instructions %d and %d", in->record,
                         recorder[in->record], j);
            recorder[in->record] = j;
        }
        touch_operands(r, j, base);
    }
}

// Buffers whose bytes another takes over later in this phase: everything the first did
// must be done before the second's first touch. Only pairs with a stream other than
// compute can be out of order.
static void check_takeovers(Replay *r, const Shared *sh, const int *first, const int *last, int base,
                            int n) {
    for (int k = 0; k < sh->n; k++) {
        int x = sh->pair[k].a, y = sh->pair[k].b;
        int e = last[x] < first[y] ? x : y, l = e == x ? y : x;
        if (last[e] >= first[l] || last[e] < base || first[l] >= base + n)
            continue;   // live at once (checked above), or in different phases
        const Hist *h = &r->hist[e];
        int j = first[l];
        if (h->write >= 0 && !before(r, h->write, j))
            unordered(r, h->write, j, e, "write (and reuse the bytes of)");
        for (int s = 0; s < S; s++)
            if (h->read[s] >= 0 && !before(r, h->read[s], j))
                unordered(r, h->read[s], j, e, "read (and reuse the bytes of)");
    }
}

// Replays the plan phase by phase on its streams; the number of problems found.
static int check_streams(const Plan *p, const int *root, FILE *out) {
    int ni = plan_instr_count(p), nbuf = p->nbuf;
    Replay rr = {.p = p, .root = root, .out = out}, *r = &rr;
    r->pos = xmalloc(sizeof(int) * (size_t)(ni + 1));
    r->clock = xmalloc(sizeof(int) * S * (size_t)(ni + 1));
    r->hist = xmalloc(sizeof(Hist) * (size_t)(nbuf + 1));
    int *recorder = xmalloc(sizeof(int) * (size_t)(p->events + 1));
    for (int e = 0; e < p->events; e++)
        recorder[e] = -1;
    int *first = xmalloc(sizeof(int) * (size_t)(nbuf + 1)), *last = xmalloc(sizeof(int) * (size_t)(nbuf + 1));
    bool *cross = xcalloc((size_t)nbuf + 1, sizeof(bool));
    root_spans(r, first, last, cross);
    Shared sh = {.cross = cross};
    shared_roots(p, root, first, last, &sh);
    int base = 0;
    for (int ph = 0; ph < PHASE_COUNT; ph++) {
        replay_phase(r, ph, base, recorder);
        check_takeovers(r, &sh, first, last, base, p->nins[ph]);
        base += p->nins[ph];
    }
    free(r->pos), free(r->clock), free(r->hist), free(recorder), free(first), free(last), free(cross);
    free(sh.pair);
    return r->bad;
}
