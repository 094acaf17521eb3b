// test_lora.c — LoRA and QLoRA on tiny.ft, end to end on the cpu backend: the loss
// falls, the frozen base (bf16, or NF4 bytes and their scales) is bitwise unchanged
// after training, the NF4 storage is exactly what the plan says, and the adapters are
// written with PEFT's names and config.
#include "../runtime/safetensors.h"
#include "check.h"
#include "harness.h"

static char *tiny_with(const char *extra) {
    static char text[16384];
    FILE *f = fopen("models/tiny.ft", "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    char *end = strrchr(text, '}');   // the train section's closing brace
    memmove(end + strlen(extra), end, strlen(end) + 1);
    memcpy(end, extra, strlen(extra));
    return text;
}

// Trains `steps` steps on windows of a fixed byte text; returns the mean loss of the
// first and of the last three steps.
static void train(Harness *h, int steps, double *first, double *last) {
    static const char text[] = "the planner places every byte of the step before anything runs; "
                               "the runtime executes the plan and the loss falls. ";
    const Plan *p = h->plan;
    const PlanBuffer *tok = plan_role(p, PR_TOKENS), *tgt = plan_role(p, PR_TARGETS);
    int64_t S = p->seq, B = p->micro_batch, len = (int64_t)strlen(text);
    char err[512];
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * S)), *next = malloc(sizeof(int32_t) * (size_t)(B * S));
    *first = *last = 0;
    for (int step = 1; step <= steps; step++) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < S; s++) {
                int64_t at = (step * 7 + b * 13 + s) % (len - 1);
                ids[b * S + s] = (unsigned char)text[at];
                next[b * S + s] = (unsigned char)text[at + 1];
            }
        rt_write_raw(&h->x, tok->id, ids);
        rt_write_raw(&h->x, tgt->id, next);
        rt_write_positions(&h->x, NULL);
        rt_write_target_count(&h->x, -1);
        h->x.step = step;
        CHECK(rt_exec_phase(&h->x, PHASE_FWD, err, sizeof err) == 0);
        CHECK(rt_exec_phase(&h->x, PHASE_BWD, err, sizeof err) == 0);
        double l = harness_loss(h);
        CHECK(rt_exec_phase(&h->x, PHASE_OPT, err, sizeof err) == 0);
        if (step <= 3)
            *first += l / 3;
        if (step > steps - 3)
            *last += l / 3;
    }
    free(ids), free(next);
}

// A copy of the bytes of every frozen parameter and its quantisation data.
static char *snapshot(Harness *h, size_t *len) {
    size_t n = 0;
    for (int i = 0; i < h->plan->nbuf; i++) {
        const PlanBuffer *b = &h->plan->buf[i];
        if ((b->kind == PK_PARAM && !b->trainable) || b->kind == PK_QUANT)
            n += (size_t)b->bytes;
    }
    char *s = malloc(n + 1), *p = s;
    for (int i = 0; i < h->plan->nbuf; i++) {
        const PlanBuffer *b = &h->plan->buf[i];
        if ((b->kind == PK_PARAM && !b->trainable) || b->kind == PK_QUANT) {
            rt_read_raw(&h->x, i, p);
            p += b->bytes;
        }
    }
    *len = n;
    return s;
}

static void run(const char *extra, bool nf4) {
    Harness h;
    CHECK(harness_compile(&h, "tiny+lora", tiny_with(extra), 8));
    if (!h.plan) {
        harness_free(&h);
        return;
    }
    rt_weights_init(&h.x, 42);
    int quantised = 0;
    for (int i = 0; i < h.plan->nbuf; i++) {
        const PlanBuffer *b = &h.plan->buf[i];
        if (b->dtype != PDT_NF4)
            continue;
        quantised++;
        int64_t n = plan_elems(b), blocks = (n + 63) / 64, parts = 0;
        CHECK_EQ((n + 1) / 2, b->bytes);   // two codes a byte
        for (int k = 0; k < h.plan->nbuf; k++)
            if (h.plan->buf[k].kind == PK_QUANT && h.plan->buf[k].of == i)
                parts += h.plan->buf[k].bytes;
        CHECK_EQ(blocks + 4 * ((blocks + 255) / 256) + 4, parts);   // double quantisation
    }
    CHECK_EQ(nf4 ? 2 * 7 : 0, quantised);   // every linear weight of both blocks
    size_t n0, n1;
    char *before = snapshot(&h, &n0);
    double first, last;
    train(&h, 40, &first, &last);
    char *after = snapshot(&h, &n1);
    CHECK(n0 == n1 && n0 > 0 && memcmp(before, after, n0) == 0);
    printf("  %s: loss %.4f -> %.4f over 40 steps, %zu frozen bytes unchanged\n",
           nf4 ? "qlora" : "lora", first, last, n0);
    CHECK(last < first - 0.2);
    // The adapters in PEFT's layout.
    char dir[600], err[512], path[700];
    snprintf(dir, sizeof dir, "%s/adapters", h.dir);
    CHECK(mkdir(dir, 0777) == 0);
    CHECK(rt_adapters_save(&h.x, dir, "tiny", err, sizeof err) == 0);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    StSet *st;
    CHECK(st_open(&st, path, err, sizeof err) == 0);
    if (st) {
        CHECK_EQ(2 * 2 * 2, st_count(st));
        const StTensor *t = st_find(st, "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight");
        CHECK(t && t->ndim == 2 && t->shape[0] == 32 && t->shape[1] == 8);
        CHECK(st_find(st, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight") != NULL);
        st_close(st);
    }
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "r");
    char cfg[2048] = "";
    if (f) {
        size_t k = fread(cfg, 1, sizeof cfg - 1, f);
        cfg[k] = '\0';
        fclose(f);
    }
    CHECK(strstr(cfg, "\"peft_type\": \"LORA\"") && strstr(cfg, "\"r\": 8") &&
          strstr(cfg, "\"lora_alpha\": 16") && strstr(cfg, "\"q_proj\"") && strstr(cfg, "\"v_proj\""));
    free(before), free(after);
    harness_free(&h);
}

static void test_lora(void) {
    run("  lora(r = 8, alpha = 16, dropout = 0.05, targets = [q_proj, v_proj])\n", false);
}

static void test_qlora(void) {
    run("  lora(r = 8, alpha = 16, dropout = 0.05, targets = [q_proj, v_proj])\n"
        "  quantize(nf4, double_quant = true)\n", true);
}

int main(int argc, char **argv) {
    if (argc > 1 && chdir(argv[1]) != 0)
        return 2;
    RUN(test_lora);
    RUN(test_qlora);
    return CHECK_DONE();
}
