// test_verify.c — the plan verifier catches what it must: a compiled plan passes,
// and each injected fault (overlapping offsets, a read before its write, a buffer past
// the arena's end, an early free, a loss freed before the runtime reads it; and on a
// plan with copies and host work: a missing wait, host work on device memory, a copy
// on the compute stream, a wait for an event not yet recorded; and in a grouped launch:
// a member that waits, one that reads what another writes, one whose operand is dead at
// the group's first, a group the reader cannot close; a GEMM made to add into a part it
// assigns, reading it unwritten; and on a plan of two ranks: a collective's missing wait, a
// collective on the compute stream, a reduction skipped on all but the last micro-step
// whose result the micro-step reads) is rejected with a message naming the buffers and the
// instruction.
#include "check.h"
#include "harness.h"
#include "../runtime/fileio.h"

static Harness h;

static const char *tiny_text(void) { return harness_file("models/tiny.ft"); }

// Runs the verifier on a (corrupted) plan; returns its messages.
static char *verify_plan(const Plan *p, int *problems) {
    static char *buf;
    size_t len;
    free(buf);
    buf = NULL;
    FILE *f = open_memstream(&buf, &len);
    *problems = plan_verify(p, f);
    fclose(f);
    return buf;
}

static char *verify(int *problems) { return verify_plan(h.plan, problems); }

// Two transient buffers live at the same time, in different places.
static void pick_overlapping(int *a, int *b) {
    const Plan *p = h.plan;
    for (int i = 0; i < p->nbuf; i++)
        for (int j = i + 1; j < p->nbuf; j++) {
            const PlanBuffer *x = &p->buf[i], *y = &p->buf[j];
            if (x->kind != PK_VALUE || y->kind != PK_VALUE || x->view >= 0 || y->view >= 0 ||
                x->reuse >= 0 || y->reuse >= 0 || x->bytes != y->bytes || x->bytes == 0)
                continue;
            if (x->first < y->last && y->first < x->last && x->offset != y->offset) {
                *a = i, *b = j;
                return;
            }
        }
    *a = *b = -1;
}

static void test_clean_plan_passes(void) {
    int n;
    char *msg = verify(&n);
    CHECK_EQ(0, n);
    if (n)
        printf("%s", msg);
}

static void test_overlapping_offsets(void) {
    int a, b, n;
    pick_overlapping(&a, &b);
    CHECK(a >= 0);
    if (a < 0)
        return;
    int64_t keep = h.plan->buf[b].offset;
    h.plan->buf[b].offset = h.plan->buf[a].offset;
    char *msg = verify(&n);
    h.plan->buf[b].offset = keep;
    CHECK(n > 0);
    CHECK(strstr(msg, "share bytes while both live"));
    CHECK(strstr(msg, h.plan->buf[a].name) && strstr(msg, h.plan->buf[b].name));
}

static void test_read_before_write(void) {
    // Make an early instruction read a buffer that a later instruction first writes.
    PlanInstr *in = &h.plan->ins[PHASE_FWD][1];
    const PlanBuffer *late = NULL;
    for (int i = 0; i < h.plan->nbuf; i++)
        if (h.plan->buf[i].kind == PK_VALUE && h.plan->buf[i].view < 0 && h.plan->buf[i].first > 10) {
            late = &h.plan->buf[i];
            break;
        }
    CHECK(late != NULL);
    if (!late)
        return;
    int keep = in->in[0], n;
    in->in[0] = late->id;
    char *msg = verify(&n);
    in->in[0] = keep;
    CHECK(n > 0);
    char want[256];
    snprintf(want, sizeof want, "instruction 1 (%s) reads %s before any instruction writes it", op_desc(in->op)->name,
             late->name);
    CHECK(strstr(msg, want));
}

static void test_past_arena_end(void) {
    PlanBuffer *b = NULL;
    for (int i = 0; i < h.plan->nbuf && !b; i++)
        if (h.plan->buf[i].view < 0 && h.plan->buf[i].bytes > 256)
            b = &h.plan->buf[i];
    int64_t keep = b->offset;
    b->offset = h.plan->arena_bytes[ARENA_DEVICE] - 128;
    int n;
    char *msg = verify(&n);
    b->offset = keep;
    CHECK(n > 0);
    CHECK(strstr(msg, b->name) && strstr(msg, "lies outside the device arena"));
}

static void test_early_free(void) {
    // A saved activation whose lifetime is cut to its first instruction.
    PlanBuffer *b = NULL;
    for (int i = 0; i < h.plan->nbuf && !b; i++)
        if (!strcmp(h.plan->buf[i].category, "activations") && h.plan->buf[i].view < 0 &&
            h.plan->buf[i].last > h.plan->buf[i].first + 5 && !h.plan->buf[i].role)
            b = &h.plan->buf[i];
    CHECK(b != NULL);
    if (!b)
        return;
    int keep = b->last, n;
    b->last = b->first;
    char *msg = verify(&n);
    b->last = keep;
    CHECK(n > 0);
    CHECK(strstr(msg, b->name) && strstr(msg, "it was freed too early"));
}

static void test_loss_freed_early(void) {
    PlanBuffer *loss = (PlanBuffer *)plan_role(h.plan, PR_LOSS);
    int keep = loss->last, n;
    loss->last = loss->first;
    char *msg = verify(&n);
    loss->last = keep;
    CHECK(n > 0);
    CHECK(strstr(msg, "before the runtime reads it"));
}

static void test_over_budget(void) {
    int64_t keep = h.plan->budget_bytes;
    int n;
    h.plan->budget_bytes = h.plan->arena_bytes[ARENA_DEVICE] - 1;
    char *msg = verify(&n);
    h.plan->budget_bytes = keep;
    CHECK(n > 0);
    CHECK(strstr(msg, "exceed the budget"));
}

// The plan with copies and host work: block inputs swapped out, optimizer state and
// gradients on the host. The streams pass ordered it with events.
static Harness hs;

static char *verify_streams(int *problems) { return verify_plan(hs.plan, problems); }

// The first instruction of class `cls` on stream `s` (any stream when s < 0) that waits
// for an event when `waiting`; NULL if none.
static PlanInstr *find(OpClass cls, int s, bool waiting) {
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < hs.plan->nins[ph]; i++) {
            PlanInstr *in = &hs.plan->ins[ph][i];
            if ((cls == OPC_COUNT || op_desc(in->op)->cls == cls) && (s < 0 || (int)in->stream == s) &&
                (!waiting || in->nwait > 0))
                return in;
        }
    return NULL;
}

static void test_streams_clean(void) {
    int n, streams[STREAM_COUNT] = {0};
    char *msg = verify_streams(&n);
    CHECK_EQ(0, n);
    if (n)
        printf("%s", msg);
    for (int i = 0; i < plan_instr_count(hs.plan); i++)
        streams[plan_instr(hs.plan, i)->stream]++;
    for (int s = 0; s < STREAM_COUNT; s++)   // every stream has work (but the comm stream, of
        CHECK(streams[s] > 0 || s == STREAM_COMM);   // plans of several ranks), events order it
    CHECK(hs.plan->events > 0);
}

// Every wait the streams pass made is needed: dropping any one is a race the verifier
// names (tried on the first waiting instruction of each stream).
static void test_missing_wait(void) {
    for (int s = 0; s < STREAM_COUNT; s++) {
        PlanInstr *in = find(OPC_COUNT, s, true);
        if (!in)
            continue;
        int keep = in->nwait, w = in->wait[0];
        in->wait[0] = in->wait[--in->nwait];
        int n;
        char *msg = verify_streams(&n);
        in->wait[in->nwait++] = in->wait[0];
        in->wait[0] = w;
        in->nwait = keep;
        CHECK(n > 0);
        CHECK(strstr(msg, "with no event ordering them"));
    }
}

// A GEMM that adds into its output (beta = 1) reads it: the weight gradient's GEMM that
// makes a device part of a host gradient (assigning it) is caught reading it before any
// write when it is made to accumulate; the plan's own GEMMs into gradients pass.
static void test_accumulating_gemm_reads(void) {
    PlanInstr *in = NULL;
    int updating = 0;
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < hs.plan->nins[ph]; i++) {
            PlanInstr *x = &hs.plan->ins[ph][i];
            if (op_desc(x->op)->cls != OPC_GEMM)
                continue;
            const PlanBuffer *o = &hs.plan->buf[x->out[0]];
            updating += (x->update & 1u) && o->kind == PK_GRAD;   // none: the gradients are on the host
            if (!in && !(x->update & 1u) && strstr(o->name, ".part") && o->first == x->id)
                in = x;
        }
    CHECK(in != NULL);
    if (!in)
        return;
    in->update |= 1u;
    int n;
    char *msg = verify_streams(&n);
    in->update &= ~1u;
    char want[256];
    snprintf(want, sizeof want, "instruction %d (%s) reads %s before any instruction writes it", in->id,
             op_desc(in->op)->name, hs.plan->buf[in->out[0]].name);
    CHECKF(n > 0 && strstr(msg, want), "want: %s", want);
    // On the device plan every weight gradient's GEMM accumulates, and it verifies clean.
    int clean = 0;
    for (int i = 0; i < plan_instr_count(h.plan); i++) {
        const PlanInstr *x = plan_instr(h.plan, i);
        clean += op_desc(x->op)->cls == OPC_GEMM && (x->update & 1u) && h.plan->buf[x->out[0]].kind == PK_GRAD;
    }
    CHECK(clean > 0 && updating == 0);
    verify(&n);
    CHECK_EQ(0, n);
}

static void test_host_work_on_device_memory(void) {
    PlanInstr *in = find(OPC_OPTIMIZER, STREAM_HOST, false);
    CHECK(in != NULL);
    if (!in)
        return;
    in->stream = STREAM_COMPUTE;   // the update now touches host state from the device
    int n;
    char *msg = verify_streams(&n);
    in->stream = STREAM_HOST;
    CHECK(n > 0);
    CHECK(strstr(msg, "on compute) touches") && strstr(msg, "in host memory"));
}

static void test_copy_on_compute(void) {
    PlanInstr *in = find(OPC_COPY, STREAM_D2H, false);
    CHECK(in != NULL);
    if (!in)
        return;
    in->stream = STREAM_COMPUTE;
    int n;
    char *msg = verify_streams(&n);
    in->stream = STREAM_D2H;
    CHECK(n > 0);
    CHECK(strstr(msg, "(copy) runs on the compute stream"));
}

static void test_wait_before_record(void) {
    PlanInstr *in = find(OPC_COUNT, -1, true);
    CHECK(in != NULL);
    if (!in)
        return;
    int keep = in->wait[0];
    // an event that only a later instruction records
    int later = -1;
    for (int id = in->id + 1; id < plan_instr_count(hs.plan) && later < 0; id++)
        if (plan_instr(hs.plan, id)->record >= 0)
            later = plan_instr(hs.plan, id)->record;
    CHECK(later >= 0);
    in->wait[0] = later;
    int n;
    char *msg = verify_streams(&n);
    in->wait[0] = keep;
    CHECK(n > 0);
    CHECK(strstr(msg, "which no earlier instruction"));
}

// The first instruction of a grouped launch (the optimizer), and its second member.
static PlanInstr *group_first(PlanInstr **member) {
    const Plan *p = h.plan;
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < p->nins[ph]; i++)
            if (p->ins[ph][i].group >= 3 && p->ins[ph][i].op == OP_ADAMW) {
                *member = &p->ins[ph][i + 2];
                return &p->ins[ph][i];
            }
    return *member = NULL;
}

static void test_group_member_waits(void) {
    PlanInstr *m, *first = group_first(&m);
    CHECK(first != NULL);
    if (!first)
        return;
    m->record = 0;   // it would record an event after the launch that already did its work
    int n;
    char *msg = verify(&n);
    m->record = -1;
    CHECK(n > 0);
    CHECK(strstr(msg, "in the group of instruction") && strstr(msg, "waits for or records an event"));
}

static void test_group_member_depends(void) {
    PlanInstr *m, *first = group_first(&m);
    CHECK(first != NULL);
    if (!first)
        return;
    int keep = m->in[0];
    m->in[0] = first->out[0];   // reads the parameter the first member updates
    int n;
    char *msg = verify(&n);
    m->in[0] = keep;
    CHECK(n > 0);
    CHECK(strstr(msg, "one writing"));
}

static void test_group_member_dead_operand(void) {
    PlanInstr *m, *first = group_first(&m);
    CHECK(first != NULL);
    if (!first)
        return;
    int keep = m->in[0], dead = -1;
    for (int i = 0; i < h.plan->nbuf && dead < 0; i++)   // a buffer dead by the optimizer
        if (h.plan->buf[i].kind == PK_VALUE && h.plan->buf[i].last < first->id &&
            h.plan->buf[i].bytes == h.plan->buf[m->in[0]].bytes)
            dead = i;
    if (dead < 0)
        for (int i = 0; i < h.plan->nbuf && dead < 0; i++)
            if (h.plan->buf[i].kind == PK_VALUE && h.plan->buf[i].last < first->id)
                dead = i;
    CHECK(dead >= 0);
    m->in[0] = dead;
    int n;
    char *msg = verify(&n);
    m->in[0] = keep;
    CHECK(n > 0);
    CHECK(strstr(msg, "which is not alive there"));
}

// The reader: a member without by=, and a by= that no group covers.
static void test_group_reader(void) {
    char path[512], *text = NULL;
    snprintf(path, sizeof path, "%s/plan", h.dir);
    FILE *f = fopen(path, "r");
    size_t len = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        len = (size_t)ftell(f);
        rewind(f);
        text = calloc(len + 1, 1);
        len = fread(text, 1, len, f);
        fclose(f);
    }
    PlanInstr *m, *first = group_first(&m);
    CHECK(text && first);
    if (!text || !first) {
        free(text);
        return;
    }
    char by[32];
    snprintf(by, sizeof by, " by=%d ", first->id);
    for (int fault = 0; fault < 2; fault++) {
        char *copy = strdup(text), *at = strstr(copy, by);
        CHECK(at != NULL);
        if (!at) {
            free(copy);
            break;
        }
        if (fault == 0)   // drop the first member's by=
            memmove(at + 1, at + strlen(by), strlen(at + strlen(by)) + 1);
        else {            // shrink the group to two: the third member's by= covers nothing
            char *g = strstr(copy, " group=");
            g += strlen(" group=");
            size_t digits = strspn(g, "0123456789");
            memmove(g + 1, g + digits, strlen(g + digits) + 1);
            g[0] = '2';
        }
        char bad[600];
        snprintf(bad, sizeof bad, "%s/plan.bad", h.dir);
        FILE *o = fopen(bad, "w");
        fputs(copy, o);
        fclose(o);
        Plan *p = NULL;
        char err[512] = "";
        CHECK(plan_load(&p, bad, err, sizeof err) != 0);
        CHECK(strstr(err, fault == 0 ? "without by=" : "which does not cover it") != NULL);
        if (p)
            plan_free(p);
        free(copy);
    }
    free(text);
}

// The reader: the header's estimate line, read back; malformed ones rejected by name.
static void test_estimate_reader(void) {
    char path[512], bad[600];
    snprintf(path, sizeof path, "%s/plan", h.dir);
    snprintf(bad, sizeof bad, "%s/plan.est", h.dir);
    size_t len = 0;
    char *text = rt_read_whole(path, &len);
    char *at = text ? strstr(text, "\nseq ") : NULL;
    CHECK(at != NULL);
    if (!at) {
        free(text);
        return;
    }
    static const struct {
        const char *line, *err;   // err NULL: accepted
    } cases[] = {
        {"estimate model_flops=123456789 step_us=4567.5\n", NULL},
        {"estimate model_flops=-1 step_us=1\n", "bad value"},
        {"estimate model_flops=1 step_us=nan\n", "bad value"},
        {"estimate model_flops=1 step_us=inf\n", "bad value"},
        {"estimate flops=1\n", "unknown estimate setting 'flops'"},
        {"estimate 12\n", "estimate settings are key=value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *o = fopen(bad, "w");
        fwrite(text, 1, (size_t)(at + 1 - text), o);
        fputs(cases[i].line, o);
        fputs(at + 1, o);
        fclose(o);
        Plan *p = NULL;
        char err[512] = "";
        int rc = plan_load(&p, bad, err, sizeof err);
        if (!cases[i].err) {
            CHECKF(rc == 0, "%s: %s", cases[i].line, err);
            if (p)
                CHECK(p->model_flops == 123456789 && p->est_step_us == 4567.5);
        } else {
            CHECKF(rc != 0 && strstr(err, cases[i].err), "%s: '%s'", cases[i].line, err);
        }
        if (p)
            plan_free(p);
    }
    free(text);
}

//
// A plan of two ranks: collectives on the comm stream, in buckets, ordered by events.
//

static Harness hd;

// The first collective instruction that waits for an event, or NULL.
static PlanInstr *waiting_collective(void) {
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        for (int i = 0; i < hd.plan->nins[ph]; i++) {
            PlanInstr *in = &hd.plan->ins[ph][i];
            if (op_desc(in->op)->cls == OPC_COLLECTIVE && in->nwait > 0)
                return in;
        }
    return NULL;
}

static void test_ranks_clean(void) {
    int n, colls = 0, buckets = 0;
    char *msg = verify_plan(hd.plan, &n);
    CHECK_EQ(0, n);
    if (n)
        printf("%s", msg);
    for (int i = 0; i < plan_instr_count(hd.plan); i++) {
        const PlanInstr *in = plan_instr(hd.plan, i);
        colls += op_desc(in->op)->cls == OPC_COLLECTIVE;
        buckets += op_desc(in->op)->cls == OPC_COLLECTIVE && in->group > 1;
        CHECK((op_desc(in->op)->cls == OPC_COLLECTIVE) == (in->stream == STREAM_COMM));
    }
    CHECK(colls > 0 && buckets > 0);
    CHECK(waiting_collective() != NULL);
}

// The waits the streams pass gave the comm stream are needed: dropping one is a race.
static void test_ranks_missing_wait(void) {
    PlanInstr *in = waiting_collective();
    if (!in)
        return;
    int keep = in->nwait, w = in->wait[0], n;
    in->wait[0] = in->wait[--in->nwait];
    char *msg = verify_plan(hd.plan, &n);
    in->wait[in->nwait++] = in->wait[0];
    in->wait[0] = w;
    in->nwait = keep;
    CHECK(n > 0);
    CHECK(strstr(msg, "with no event ordering them"));
}

static void test_collective_on_compute(void) {
    PlanInstr *in = waiting_collective();
    if (!in)
        return;
    int n;
    in->stream = STREAM_COMPUTE;
    char *msg = verify_plan(hd.plan, &n);
    in->stream = STREAM_COMM;
    CHECK(n > 0);
    CHECK(strstr(msg, "runs on the compute stream"));
}

// ZeRO-2 reduce-scatters every micro-step and adds the slice into the shard: skipping it on
// all but the last micro-step (last=1) would leave the accumulation reading stale bytes.
static void test_last_read_later(void) {
    PlanInstr *rs = NULL;
    for (int i = 0; i < hd.plan->nins[PHASE_BWD] && !rs; i++)
        if (hd.plan->ins[PHASE_BWD][i].op == OP_REDUCE_SCATTER)
            rs = &hd.plan->ins[PHASE_BWD][i];
    CHECK(rs != NULL);
    if (!rs)
        return;
    int n;
    rs->last = true;
    char *msg = verify_plan(hd.plan, &n);
    rs->last = false;
    CHECK(n > 0);
    CHECK(strstr(msg, "on the last micro-step only"));
}

int main(int argc, char **argv) {
    if (argc > 1 && chdir(argv[1]) != 0)
        return 2;
    if (!harness_compile(&h, "models/tiny.ft", tiny_text(), 8)) {
        printf("FAIL compile\n");
        return 1;
    }
    RUN(test_clean_plan_passes);
    RUN(test_overlapping_offsets);
    RUN(test_read_before_write);
    RUN(test_past_arena_end);
    RUN(test_early_free);
    RUN(test_loss_freed_early);
    RUN(test_over_budget);
    RUN(test_group_member_waits);
    RUN(test_group_member_depends);
    RUN(test_group_member_dead_operand);
    RUN(test_group_reader);
    RUN(test_estimate_reader);
    PlanChoice c = {.micro = 4, .policy = REMAT_SWAP, .n_policy = 1 << 20, .rest = REMAT_SWAP,
                    .offload = {.optimizer = true, .grads = true}};
    if (!harness_compile_choice(&hs, "models/tiny.ft", tiny_text(), &c)) {
        printf("FAIL compile with copies\n");
        return 1;
    }
    RUN(test_streams_clean);
    RUN(test_missing_wait);
    RUN(test_host_work_on_device_memory);
    RUN(test_copy_on_compute);
    RUN(test_wait_before_record);
    RUN(test_accumulating_gemm_reads);
    harness_free(&hs);
    harness_ranks = 2;   // ZeRO-2, two micro-steps a rank
    PlanChoice z2 = {.micro = 2, .policy = REMAT_KEEP, .rest = REMAT_KEEP, .zero = 2, .bucket_bytes = 64 << 10};
    if (!harness_compile_choice(&hd, "models/tiny.ft", tiny_text(), &z2)) {
        printf("FAIL compile for two ranks\n");
        return 1;
    }
    RUN(test_ranks_clean);
    RUN(test_ranks_missing_wait);
    RUN(test_collective_on_compute);
    RUN(test_last_read_later);
    harness_free(&hd);
    harness_free(&h);
    return CHECK_DONE();
}
