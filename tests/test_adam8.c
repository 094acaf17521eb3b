// test_adam8.c — the 8-bit AdamW update (runtime/cpu/adam8.c) against bitsandbytes'
// AdamW8bit: tests/fixtures/adamw8bit/adamw8bit.safetensors, made by
// tests/fixtures/make_ref_adamw8bit.py with bitsandbytes 0.50.2 (see it for what each run
// is). Four steps of fixed gradients on tensors of 4320 and 4096 elements (8-bit moments)
// and 4095 and 64 (32-bit moments, below min_8bit_size).
//
//   maps       bitsandbytes' two dynamic maps, bit for bit
//   quantize   the bisection gives the nearest code (ties aside) over a sweep of values
//   kernel     the whole run against bitsandbytes with its CUDA kernels' arithmetic: weights,
//              codes, absmaxes and 32-bit moments bit for bit
//   cpu        one step (the first, from zero state, and the last) against bitsandbytes as
//              installed, its CPU update from the same state: absmaxes and 32-bit moments
//              within 2e-6 relative, weights within 5e-8 (a few ulps: its weight decay comes
//              before the step, its scalars are rounded from Python's doubles); every code
//              it picks is the nearest code to the centre of the scaled value's bin in its
//              quantiser's table of 65536 (or of a neighbour bin, where its value is a few
//              ulps from ftc's across a bin edge), and where that is not the nearest code
//              to the value itself, ftc's differs: the run prints how many
#include "check.h"
#include "adam8.h"
#include "nf4.h"
#include "safetensors.h"

#include <stdint.h>
#include <stdlib.h>

enum { STEPS = 4, NT = 4 };
static const char *const names[NT] = {"a", "b", "c", "d"};
static const char *dir;

typedef struct Tensor {
    size_t n;
    float *w;               // (n)
    uint8_t *qm, *qv;       // (n) 8-bit: codes
    float *am, *av;         // (ceil(n/256)) 8-bit: absmaxes
    float *m, *v;           // (n) 32-bit moments
    bool q8;
} Tensor;

static StSet *open_fixture(void) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/adamw8bit.safetensors", dir);
    StSet *s = NULL;
    if (st_open(&s, path, err, sizeof err) != 0)
        printf("  %s\n", err);
    return s;
}

// Tensor `name` of the fixture as floats (n of them), or NULL after a failed check.
static float *read_f32(StSet *s, const char *name, size_t n) {
    const StTensor *t = st_find(s, name);
    char err[512];
    float *x = malloc(sizeof(float) * (n ? n : 1));
    if (!t || st_read_f32(s, t, x, (int64_t)n, err, sizeof err) != 0) {
        CHECKF(0, "fixture tensor %s: %s", name, t ? err : "missing");
        free(x);
        return NULL;
    }
    return x;
}

static uint8_t *read_u8(StSet *s, const char *name, size_t n) {
    const StTensor *t = st_find(s, name);
    char err[512];
    uint8_t *x = malloc(n ? n : 1);
    if (!t || t->dtype != ST_U8 || st_elems(t) != (int64_t)n ||
        st_read_raw(s, t, x, n, err, sizeof err) != 0) {
        CHECKF(0, "fixture tensor %s: %s", name, t ? "not u8 of the size wanted" : "missing");
        free(x);
        return NULL;
    }
    return x;
}

static size_t elems_of(StSet *s, const char *name) {
    const StTensor *t = st_find(s, name);
    return t ? (size_t)st_elems(t) : 0;
}

// The start: the fixture's parameters, every moment zero.
static void start(StSet *s, Tensor *t) {
    for (int k = 0; k < NT; k++) {
        char nm[64];
        snprintf(nm, sizeof nm, "param.%s", names[k]);
        Tensor *x = &t[k];
        x->n = elems_of(s, nm);
        x->q8 = x->n >= CPU_ADAM8_MIN_ELEMS;
        x->w = read_f32(s, nm, x->n);
        size_t nb = cpu_adam8_blocks(x->n);
        x->qm = calloc(x->n, 1), x->qv = calloc(x->n, 1);
        x->am = calloc(nb, sizeof(float)), x->av = calloc(nb, sizeof(float));
        x->m = calloc(x->n, sizeof(float)), x->v = calloc(x->n, sizeof(float));
    }
}

static void release(Tensor *t) {
    for (int k = 0; k < NT; k++)
        free(t[k].w), free(t[k].qm), free(t[k].qv), free(t[k].am), free(t[k].av), free(t[k].m),
            free(t[k].v);
}

// Step `step` (1-based) of the fixture's run on every tensor.
static void step_all(StSet *s, Tensor *t, int step) {
    float *lr = read_f32(s, "lr", STEPS), *hyper = read_f32(s, "hyper", 4);
    if (!lr || !hyper) {
        free(lr), free(hyper);
        return;
    }
    for (int k = 0; k < NT; k++) {
        Tensor *x = &t[k];
        char nm[64];
        snprintf(nm, sizeof nm, "grad.%s", names[k]);
        float *g = read_f32(s, nm, STEPS * x->n);
        if (!g || !x->w)
            continue;
        // weight decay on the first group (the 8-bit tensors), none on the second
        CpuAdam8 sc = cpu_adam8_scalars(lr[step - 1], hyper[0], hyper[1], hyper[2], k < 2 ? hyper[3] : 0.0,
                                        step);
        const float *gs = g + (size_t)(step - 1) * x->n;
        if (x->q8)
            cpu_adam8_update(x->w, gs, 1.0f, x->qm, x->qv, x->am, x->av, x->n, 0, cpu_adam8_blocks(x->n), &sc);
        else
            cpu_adam32_update(x->w, gs, 1.0f, x->m, x->v, 0, x->n, &sc);
        free(g);
    }
    free(lr), free(hyper);
}

static void maps(void) {
    StSet *s = open_fixture();
    CHECK(s != NULL);
    if (!s)
        return;
    float *sg = read_f32(s, "qmap.signed", 256), *us = read_f32(s, "qmap.unsigned", 256), mine[256];
    CHECK(sg && us && memcmp(sg, cpu_nf4_dynamic_code, sizeof mine) == 0 &&
          memcmp(us, cpu_dynamic_unsigned_code, sizeof mine) == 0);
    cpu_dynamic_map(mine, false);
    CHECK(memcmp(mine, cpu_dynamic_unsigned_code, sizeof mine) == 0);
    cpu_dynamic_map(mine, true);
    CHECK(memcmp(mine, cpu_nf4_dynamic_code, sizeof mine) == 0);
    CHECK(cpu_dynamic_unsigned_code[0] == 0.0f && cpu_dynamic_unsigned_code[255] == 1.0f);
    for (int i = 0; i < 255; i++)
        CHECK(cpu_dynamic_unsigned_code[i] < cpu_dynamic_unsigned_code[i + 1]);
    free(sg), free(us);
    st_close(s);
}

// The bisection against every midpoint (a + b) * 0.5f of the map, as bitsandbytes forms
// them: the code is the count of midpoints below the value, either neighbour on a midpoint
// itself; a NaN (0/0 of an all-zero block) gets code 0.
static void quantize(void) {
    for (int sg = 0; sg < 2; sg++) {
        const float *code = sg ? cpu_nf4_dynamic_code : cpu_dynamic_unsigned_code;
        int bad = 0, ties = 0;
        for (int i = 0; i <= 400000; i++) {
            // values over every scale the maps cover, every code and every midpoint
            float x = i < 200000 ? (float)(exp(-16.0 + 16.0 * i / 200000.0))
                                 : i < 200256 ? code[i - 200000]
                                 : i < 200511 ? (code[i - 200256] + code[i - 200255]) * 0.5f
                                              : (float)(i - 200511) / 199489.0f;
            if (sg && (i & 1))
                x = -x;
            if (!sg && x < 0)
                continue;
            int q = cpu_adam8_quantize(code, x, sg), below = 0;
            bool tie = false;
            for (int j = 0; j < 255; j++) {
                float mid = (code[j] + code[j + 1]) * 0.5f;
                below += mid < x;
                tie |= mid == x;
            }
            if (tie && (q == below || q == below + 1))
                ties++;
            else if (q != below)
                bad += bad < 5 ? printf("  %s x=%a: code %d (%a), nearest %d (%a)\n", sg ? "signed" : "unsigned",
                                        (double)x, q, (double)code[q], below, (double)code[below]) > 0 : 1;
        }
        CHECKF(bad == 0, "%s: %d values off the nearest code", sg ? "signed" : "unsigned", bad);
        CHECK(ties >= 255 && ties < 600);   // the midpoints themselves, and a few of the sweep
        CHECK(cpu_adam8_quantize(code, NAN, sg) == 0);
        CHECK(cpu_adam8_quantize(code, 1.0f, sg) == 255 && cpu_adam8_quantize(code, 2.0f, sg) == 255);
    }
}

// Whether t (ftc's) equals the fixture's `prefix.NAME` bit for bit, tensor by tensor.
static void check_exact(StSet *s, const Tensor *t, const char *prefix) {
    char nm[64];
    for (int k = 0; k < NT; k++) {
        const Tensor *x = &t[k];
        size_t nb = cpu_adam8_blocks(x->n);
        snprintf(nm, sizeof nm, "%s.%s", prefix, names[k]);
        float *w = read_f32(s, nm, x->n);
        CHECKF(w && memcmp(w, x->w, sizeof(float) * x->n) == 0, "%s: the weights differ", nm);
        free(w);
        if (x->q8) {
            const char *part[4] = {"qm", "qv", "am", "av"};
            for (int p = 0; p < 4; p++) {
                snprintf(nm, sizeof nm, "%s.%s.%s", prefix, part[p], names[k]);
                void *want = p < 2 ? (void *)read_u8(s, nm, x->n) : (void *)read_f32(s, nm, nb);
                const void *got = p == 0 ? (const void *)x->qm : p == 1 ? (const void *)x->qv
                                : p == 2 ? (const void *)x->am : (const void *)x->av;
                size_t bytes = p < 2 ? x->n : nb * sizeof(float);
                int diff = 0;
                for (size_t i = 0; want && i < bytes; i++)
                    diff += ((const uint8_t *)want)[i] != ((const uint8_t *)got)[i];
                CHECKF(want && diff == 0, "%s: %d bytes differ", nm, diff);
                free(want);
            }
        } else {
            for (int p = 0; p < 2; p++) {
                snprintf(nm, sizeof nm, "%s.%s.%s", prefix, p ? "v" : "m", names[k]);
                float *want = read_f32(s, nm, x->n);
                CHECKF(want && memcmp(want, p ? x->v : x->m, sizeof(float) * x->n) == 0, "%s differs", nm);
                free(want);
            }
        }
    }
}

static void kernel(void) {
    StSet *s = open_fixture();
    CHECK(s != NULL);
    if (!s)
        return;
    Tensor t[NT];
    start(s, t);
    for (int step = 1; step <= STEPS; step++)
        step_all(s, t, step);
    check_exact(s, t, "kernel");
    release(t);
    st_close(s);
}

// libbitsandbytes_cpu's code for a scaled value x in [-1, 1]: the nearest code to the
// centre of x's bin among 65536 over [-1, 1] (nf4.h's rule for its double quantisation,
// over either map); code 0 for an all-zero block.
static int bnb_cpu_code(const float *code, float y, float absmax, int shift) {
    if (absmax == 0.0f)
        return 0;
    float x = y * (1.0f / absmax);
    x = x < -1.0f ? -1.0f : x > 1.0f ? 1.0f : x;
    int k = (int)fmaf((x + 1.0f) * 0.5f, 65535.0f, 0.5f) + shift;
    k = k < 0 ? 0 : k > 65535 ? 65535 : k;
    float c = (2.0f * (float)k) / 65535.0f - 1.0f;
    int idx = 0;
    while (idx < 255 && 0.5f * (code[idx] + code[idx + 1]) < c)
        idx++;
    return idx;
}

// What the comparison with bitsandbytes' CPU update found, for the run's output.
typedef struct Seen {
    int codes, differ, neighbour;
    double weights, absmax, moment;   // worst: absolute, relative, in units of the bound
} Seen;

// One step of bitsandbytes' own CPU update from ftc's state after step - 1 steps.
static void cpu_step(StSet *s, int step, Seen *st) {
    Tensor t[NT];
    start(s, t);
    for (int k = 1; k < step; k++)
        step_all(s, t, k);
    // m' and v' as this step forms them, to place each code bnb picked
    Tensor before[NT];
    for (int k = 0; k < NT; k++) {
        before[k] = t[k];
        before[k].qm = malloc(t[k].n), before[k].qv = malloc(t[k].n);
        memcpy(before[k].qm, t[k].qm, t[k].n), memcpy(before[k].qv, t[k].qv, t[k].n);
    }
    float *lr = read_f32(s, "lr", STEPS), *hyper = read_f32(s, "hyper", 4);
    float *absm[NT] = {0}, *absv[NT] = {0};
    for (int k = 0; k < NT && lr && hyper; k++) {
        size_t nb = cpu_adam8_blocks(t[k].n);
        absm[k] = malloc(sizeof(float) * nb), absv[k] = malloc(sizeof(float) * nb);
        memcpy(absm[k], t[k].am, sizeof(float) * nb), memcpy(absv[k], t[k].av, sizeof(float) * nb);
    }
    step_all(s, t, step);
    char pre[16], nm[64];
    snprintf(pre, sizeof pre, "cpu%d", step);
    for (int k = 0; k < NT && lr && hyper; k++) {
        Tensor *x = &t[k];
        size_t nb = cpu_adam8_blocks(x->n);
        snprintf(nm, sizeof nm, "%s.%s", pre, names[k]);
        float *w = read_f32(s, nm, x->n);
        double worst = 0;
        for (size_t i = 0; w && i < x->n; i++)
            worst = fmax(worst, fabs((double)w[i] - x->w[i]));
        CHECKF(w && worst <= 5e-8, "%s: weights %.3g apart", nm, worst);
        st->weights = fmax(st->weights, worst);
        free(w);
        if (!x->q8) {
            // bnb's 1 - beta1 and 1 - beta2 are Python's, rounded once: 2.3e-8 and 4.8e-9 from
            // 1.0f - beta (the kernels'), times the gradient's term, on top of an ulp or two
            snprintf(nm, sizeof nm, "grad.%s", names[k]);
            float *g = read_f32(s, nm, STEPS * x->n);
            for (int p = 0; p < 2; p++) {
                snprintf(nm, sizeof nm, "%s.%s.%s", pre, p ? "v" : "m", names[k]);
                float *want = read_f32(s, nm, x->n);
                for (size_t i = 0; want && g && i < x->n; i++) {
                    double gi = g[(size_t)(step - 1) * x->n + i], term = p ? 1e-8 * gi * gi : 5e-8 * fabs(gi);
                    CHECK_NEAR((p ? x->v : x->m)[i], want[i], term, 3e-7);
                    st->moment = fmax(st->moment, fabs((p ? x->v : x->m)[i] - want[i]) /
                                                      (term + 3e-7 * fabs(want[i]) + 1e-38));
                }
                free(want);
            }
            free(g);
            continue;
        }
        // the moments before quantisation, from the state before the step (adam8.h)
        float *g = NULL, *mv[2] = {malloc(sizeof(float) * x->n), malloc(sizeof(float) * x->n)};
        snprintf(nm, sizeof nm, "grad.%s", names[k]);
        g = read_f32(s, nm, STEPS * x->n);
        float b1 = hyper[0], b2 = hyper[1];
        for (size_t i = 0; g && i < x->n; i++) {
            float gi = g[(size_t)(step - 1) * x->n + i];
            float v = cpu_dynamic_unsigned_code[before[k].qv[i]] * absv[k][i / 256];
            float m = cpu_nf4_dynamic_code[before[k].qm[i]] * absm[k][i / 256];
            mv[0][i] = m * b1 + (1.0f - b1) * gi;
            mv[1][i] = v * b2 + (1.0f - b2) * gi * gi;
        }
        for (int p = 0; p < 2; p++) {
            snprintf(nm, sizeof nm, "%s.%s.%s", pre, p ? "av" : "am", names[k]);
            float *want = read_f32(s, nm, nb);
            for (size_t b = 0; want && b < nb; b++) {
                CHECK_NEAR((p ? x->av : x->am)[b], want[b], 1e-30, 2e-6);
                if (want[b] > 0)
                    st->absmax = fmax(st->absmax, fabs((p ? x->av : x->am)[b] - want[b]) / want[b]);
            }
            snprintf(nm, sizeof nm, "%s.%s.%s", pre, p ? "qv" : "qm", names[k]);
            uint8_t *q = read_u8(s, nm, x->n);
            const float *code = p ? cpu_dynamic_unsigned_code : cpu_nf4_dynamic_code;
            const uint8_t *mine = p ? x->qv : x->qm;
            int off = 0;
            for (size_t i = 0; q && g && i < x->n; i++) {
                float am = (p ? x->av : x->am)[i / 256];
                int c0 = bnb_cpu_code(code, mv[p][i], am, 0);
                bool near = q[i] == c0 || q[i] == bnb_cpu_code(code, mv[p][i], am, -1) ||
                            q[i] == bnb_cpu_code(code, mv[p][i], am, 1);
                st->neighbour += q[i] != c0 && near;
                off += !near;
                st->differ += q[i] != mine[i];
                st->codes++;
            }
            CHECKF(q && off == 0, "%s: %d codes are not its quantiser's", nm, off);
            free(want), free(q);
        }
        free(g), free(mv[0]), free(mv[1]);
    }
    for (int k = 0; k < NT; k++)
        free(absm[k]), free(absv[k]), free(before[k].qm), free(before[k].qv);
    free(lr), free(hyper);
    release(t);
}

static void cpu(void) {
    StSet *s = open_fixture();
    CHECK(s != NULL);
    if (!s)
        return;
    Seen st = {0};
    cpu_step(s, 1, &st);
    cpu_step(s, STEPS, &st);
    printf("  against bitsandbytes' CPU update: weights within %.2g, absmaxes within %.2g relative, "
           "32-bit moments within %.2f of their bound; %d of %d codes differ from ftc's (%.1f%%), "
           "each its quantiser's bin rule (%d from a neighbour bin)\n", st.weights, st.absmax, st.moment,
           st.differ, st.codes, 100.0 * st.differ / (st.codes ? st.codes : 1), st.neighbour);
    st_close(s);
}

int main(int argc, char **argv) {
    dir = argc > 1 ? argv[1] : "tests/fixtures/adamw8bit";
    RUN(maps);
    RUN(quantize);
    RUN(kernel);
    RUN(cpu);
    return CHECK_DONE();
}
