// test_codegen.c — the plan writer and the dumps: a written plan reads back with the
// same buffers and instructions, lays every buffer inside its arena, and the dumps say
// the same peak the buffer table implies.
#include "check.h"
#include "harness.h"

#include <jansson.h>

static Harness h;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_plan_round_trip(void) {
    const Plan *p = h.plan;
    CHECK_EQ(PLAN_VERSION, p->version);
    CHECK_STR("tiny", p->model);
    CHECK_EQ(64, p->seq);
    CHECK(p->nbuf > 100);
    CHECK(p->nins[PHASE_FWD] > 20 && p->nins[PHASE_BWD] > 20 && p->nins[PHASE_OPT] > 20);
    // (the loss fused with its projection: no logits buffer)
    CHECK(plan_role(p, PR_TOKENS) && plan_role(p, PR_TARGETS) && plan_role(p, PR_LOSS) &&
          !plan_role(p, PR_LOGITS));
    int params = 0, grads = 0;
    for (int i = 0; i < p->nbuf; i++) {
        const PlanBuffer *b = &p->buf[i];
        params += b->kind == PK_PARAM;
        grads += b->kind == PK_GRAD;
        if (b->view < 0)
            CHECK(b->offset + b->bytes <= p->arena_bytes[b->arena]);
        if (b->kind == PK_GRAD)
            CHECK(b->of >= 0 && p->buf[b->of].kind == PK_PARAM);
    }
    CHECK_EQ(27, params);
    CHECK_EQ(27, grads);
    CHECK_EQ(0, plan_verify(p, stdout));
}

static void test_dumps_agree(void) {
    MemView v;
    mv_init(&v, h.plan);
    CHECK(v.peak > 0 && v.peak <= h.plan->arena_bytes[ARENA_DEVICE]);
    // The peak is the most bytes live: recompute it from the buffer table.
    int64_t most = 0;
    for (int i = 0; i < v.n; i++) {
        int64_t live = 0;
        for (int b = 0; b < h.plan->nbuf; b++) {
            const PlanBuffer *x = &h.plan->buf[b];
            int from = x->first + (x->reuse >= 0);
            if (x->view < 0 && x->arena == ARENA_DEVICE && from <= i && i <= x->last)
                live += x->bytes;
        }
        if (live > most)
            most = live;
    }
    CHECK_EQ(most, v.peak);
    char path[600];
    snprintf(path, sizeof path, "%s/memory.json", h.dir);
    char *json = slurp(path);
    CHECK(json != NULL);
    if (json) {
        const char *keys[] = {"\"budget_bytes\"", "\"peak_bytes\"", "\"lower_bound_bytes\"",
                              "\"arena_bytes\": {\"device\"", "\"buffers\"", "\"live_bytes\"",
                              "\"first\"", "\"last\"", "\"offset\""};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            CHECK(strstr(json, keys[k]) != NULL);
        char want[64];
        snprintf(want, sizeof want, "\"peak_bytes\": %lld,", (long long)v.peak);
        CHECK(strstr(json, want) != NULL);
    }
    snprintf(path, sizeof path, "%s/memory.txt", h.dir);
    char *txt = slurp(path);
    CHECK(txt && strstr(txt, "peak live") && strstr(txt, "at the peak, by category") &&
          strstr(txt, "the 20 largest device buffers") && strstr(txt, "<- peak"));
    // Both JSON dumps parse (jansson), with the keys tools rely on.
    const char *files[] = {"memory.json", "trace.json"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/%s", h.dir, files[k]);
        json_error_t je;
        json_t *j = json_load_file(path, 0, &je);
        if (!j)
            printf("  %s:%d:%d: %s\n", files[k], je.line, je.column, je.text);
        CHECK(j != NULL);
        CHECK(!j || json_object_get(j, k ? "traceEvents" : "buffers") != NULL);
        json_decref(j);
    }
    snprintf(path, sizeof path, "%s/trace.json", h.dir);
    char *trace = slurp(path);
    CHECK(trace && strstr(trace, "\"traceEvents\"") && strstr(trace, "\"ph\": \"C\""));
    mv_free(&v);
}

// The eval phase is planned as a phase of its own: its instructions write only buffers
// born in it (nothing saved for a backward, no gradient, no weight), none of them kept
// past it but its loss, and its peak, below the training step's, is in every dump.
static void test_eval_phase(void) {
    const Plan *p = h.plan;
    CHECK(p->nins[PHASE_EVAL] > 10);
    const PlanBuffer *el = plan_role(p, PR_EVAL_LOSS);
    CHECK(el != NULL);
    int lo = p->nins[PHASE_FWD] + p->nins[PHASE_BWD] + p->nins[PHASE_OPT], hi = lo + p->nins[PHASE_EVAL];
    int bad = 0;
    for (int i = 0; i < p->nins[PHASE_EVAL]; i++) {
        const PlanInstr *in = &p->ins[PHASE_EVAL][i];
        for (int k = 0; k < in->nout; k++) {
            const PlanBuffer *b = &p->buf[in->out[k]];
            const PlanBuffer *base = b->view >= 0 ? &p->buf[b->view] : b;
            bool own = base->first >= lo && base->last < hi && base->kind == PK_VALUE &&
                       (!strcmp(base->category, "temporaries") || !strcmp(base->category, "workspace"));
            if (!own && bad++ < 5)
                printf("  eval instruction %d writes %s (%s, [%d, %d])\n", in->id, b->name, b->category,
                       base->first, base->last);
        }
    }
    CHECK_EQ(0, bad);
    MemView v;
    mv_init(&v, p);
    int64_t train = 0;
    for (int ph = PHASE_FWD; ph <= PHASE_OPT; ph++)
        if (v.phase_peak[ph] > train)
            train = v.phase_peak[ph];
    CHECK(v.phase_peak_at[PHASE_EVAL] >= lo && v.phase_peak_at[PHASE_EVAL] < hi);
    CHECK(v.phase_peak[PHASE_EVAL] > 0 && v.phase_peak[PHASE_EVAL] < train);
    CHECK_EQ(train, v.peak);
    printf("  eval phase: %d instructions, peak %lld bytes against the training step's %lld\n",
           p->nins[PHASE_EVAL], (long long)v.phase_peak[PHASE_EVAL], (long long)train);
    char path[600];
    snprintf(path, sizeof path, "%s/memory.txt", h.dir);
    char *txt = slurp(path);
    CHECK(txt && strstr(txt, "\n  eval  ") && strstr(txt, "forward only, nothing saved"));
    snprintf(path, sizeof path, "%s/memory.json", h.dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je), *phases = j ? json_object_get(j, "phases") : NULL;
    CHECK(phases && json_array_size(phases) == 6);   // (forward, backward, optimizer, eval, decode, reference)
    json_t *dc = phases ? json_array_get(phases, 4) : NULL;
    CHECK(dc && !strcmp(json_string_value(json_object_get(dc, "name")), "decode"));
    json_t *ev = phases ? json_array_get(phases, 3) : NULL;
    CHECK(ev && !strcmp(json_string_value(json_object_get(ev, "name")), "eval"));
    json_t *pk = ev ? json_object_get(ev, "peak_bytes") : NULL;
    CHECK(pk && json_integer_value(pk) == v.phase_peak[PHASE_EVAL]);
    json_decref(j);
    snprintf(path, sizeof path, "%s/memory.html", h.dir);
    char *html = slurp(path);
    CHECK(html && strstr(html, "id=\"phases\"") && strstr(html, " eval <b>"));
    mv_free(&v);
}

// The host arena has its own view: a plan with offloaded state and swapped activations
// shows its host peak (what the buffer table implies) apart, and the device's lists of
// largest buffers name device buffers only.
static void test_host_view(const char *text) {
    Harness o;
    PlanChoice c = {.micro = 1, .policy = REMAT_SWAP, .n_policy = 2, .rest = REMAT_SWAP,
                    .offload = {.optimizer = true, .grads = true}};   // host state the largest
    if (!harness_compile_choice(&o, "models/tiny.ft", text, &c)) {
        CHECK(false);
        harness_free(&o);
        return;
    }
    const Plan *p = o.plan;
    CHECK(p->arena_bytes[ARENA_HOST] > 0);
    MemView v;
    mv_init(&v, p);
    int64_t most = 0;
    for (int i = 0; i < v.n; i++) {
        int64_t live = 0;
        for (int b = 0; b < p->nbuf; b++) {
            const PlanBuffer *x = &p->buf[b];
            if (x->view < 0 && x->arena == ARENA_HOST && x->first + (x->reuse >= 0) <= i && i <= x->last)
                live += x->bytes;
        }
        CHECK_EQ(live, v.htotal[i]);
        if (live > most)
            most = live;
    }
    CHECK_EQ(most, v.hpeak);
    char path[600];
    snprintf(path, sizeof path, "%s/memory.txt", o.dir);
    char *txt = slurp(path);
    CHECK(txt && strstr(txt, "host memory (the pinned host arena") && strstr(txt, "the 10 largest host buffers"));
    // Every buffer the device's table names is a device buffer.
    const char *from = txt ? strstr(txt, "largest device buffers") : NULL, *to = txt ? strstr(txt, "\ntimeline") : NULL;
    int named = 0;
    for (const char *l = from ? strchr(from, '\n') : NULL; l && to && l < to; l = strchr(l + 1, '\n')) {
        char name[128];
        if (sscanf(l + 1, "%127s", name) != 1 || !strcmp(name, "name"))
            continue;
        for (int b = 0; b < p->nbuf; b++)
            if (!strcmp(p->buf[b].name, name)) {
                CHECK(p->buf[b].arena == ARENA_DEVICE);
                named++;
            }
    }
    CHECK(named > 0);
    FILE *f = tmpfile();
    mv_print_at(f, &v, v.peak_at, 1000);
    rewind(f);
    char line[512];
    bool device_part = false;
    int host_named = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "largest device buffers"))
            device_part = true;
        else if (strstr(line, "on the host at instruction"))
            device_part = false;
        char name[128];
        if (sscanf(line, "    %127s", name) != 1)
            continue;
        for (int b = 0; b < p->nbuf; b++)
            if (!strcmp(p->buf[b].name, name)) {
                CHECK(p->buf[b].arena == (device_part ? ARENA_DEVICE : ARENA_HOST));
                host_named += !device_part;
            }
    }
    fclose(f);
    CHECK(host_named > 0);
    snprintf(path, sizeof path, "%s/memory.json", o.dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    CHECK(j && json_integer_value(json_object_get(j, "host_peak_bytes")) == v.hpeak &&
          json_object_get(json_object_get(j, "host_live_bytes"), "optimizer") != NULL);
    json_decref(j);
    snprintf(path, sizeof path, "%s/memory.html", o.dir);
    char *html = slurp(path);
    CHECK(html && strstr(html, "id=\"host-addr\"") && strstr(html, "Host memory"));
    mv_free(&v);
    harness_free(&o);
}

int main(int argc, char **argv) {
    if (argc > 1 && chdir(argv[1]) != 0)
        return 2;
    static char text[8192];
    FILE *f = fopen("models/tiny.ft", "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    if (!harness_compile(&h, "models/tiny.ft", text, 8)) {
        printf("FAIL compile\n");
        return 1;
    }
    RUN(test_plan_round_trip);
    RUN(test_dumps_agree);
    RUN(test_eval_phase);
    harness_free(&h);
    RUN_NAMED("test_host_view", test_host_view(text));
    return CHECK_DONE();
}
