// test_cuda_plans.c — every kernel of the plans of every shipped model compiles with
// NVRTC for sm_80 and sm_90 without spilling. For each model in models/ (and
// tests/ft/new-ops.ft, every op the architectures add, in one program), full
// fine-tuning, LoRA (r = 8 on q and v), QLoRA, full fine-tuning over packed records
// (packing = true: rope and attention reading the position ids) and with AdamW8bit (bf16
// mixed and bf16_pure), each recompute policy, with and
// without optimizer state and gradients offloaded, the plan at micro-batch 1 is built
// through every pass and its kernels.cu generated. The distinct kernels of all of them
// (a plan's kernels.cu is its templates and one kernel per specialisation; most repeat
// across plans) go into one source, compiled once per architecture, and every kernel's
// ptxas report is checked. Skips (77) where NVRTC cannot be loaded.
#include "../frontend/cli/cli.h"
#include "../runtime/nvrtc.h"
#include "check.h"

#include <unistd.h>

static const char *models[] = {"models/tiny.ft", "models/qwen2-0.5b.ft", "models/qwen2-1.5b.ft",
                               "models/qwen2.ft", "models/qwen2-72b.ft", "models/llama2-7b.ft",
                               "models/gpt2.ft", "models/llama-3.1-8b.ft", "models/qwen3-8b.ft",
                               "models/mistral-7b-v0.1.ft", "models/gemma-7b.ft",
                               "models/gemma-2-9b.ft", "models/gemma-3-1b.ft",
                               "models/phi-3-mini-4k.ft", "models/pythia-160m.ft",
                               "tests/ft/new-ops.ft"};
static const char *kinds[] = {"full", "lora", "qlora", "packed", "adamw8bit", "adamw8bit-pure"};
// The train section's additions per kind; %s the LoRA targets.
static const char *extra[] = {"", "  lora(r = 8, alpha = 16, dropout = 0.05, targets = [%s])\n",
                              "  lora(r = 8, alpha = 16, targets = [%s])\n"
                              "  quantize(nf4, double_quant = true)\n",
                              "  packing = true\n", "", ""};
// And its changes: full fine-tuning with AdamW8bit (weight decay on), over the fp32 master
// (bf16) or Kahan-compensated (bf16_pure).
static const char *const edits[][3][2] = {
    [4] = {{"optimizer = adamw(", "optimizer = adamw8bit("}, {"weight_decay = 0.0", "weight_decay = 0.01"}},
    [5] = {{"optimizer = adamw(", "optimizer = adamw8bit("}, {"weight_decay = 0.0", "weight_decay = 0.01"},
           {"precision = bf16", "precision = bf16_pure"}},
};

// t with its first `from` replaced by `to` (t freed), or t as it is.
static char *replace(char *t, const char *from, const char *to) {
    char *at = from ? strstr(t, from) : NULL;
    if (!at)
        return t;
    char *r = malloc(strlen(t) + strlen(to) + 1);
    sprintf(r, "%.*s%s%s", (int)(at - t), t, to, at + strlen(from));
    free(t);
    return r;
}
enum { NKINDS = sizeof kinds / sizeof kinds[0] };

// t with the train section of ftc import's recipe written as the edits above expect it: one
// space before each '=' ("  optimizer    = " as "  optimizer = ") and unpacked (the kind
// "packed" packs), in place.
static char *as_edited(char *t) {
    char *w = t, *train = strstr(t, "\ntrain {");
    for (const char *r = t; *r;) {
        const char *eq = r;
        if (train && r > train && r[-1] == '\n' && r[0] == ' ' && r[1] == ' ')
            eq = r + 2 + strspn(r + 2, "abcdefghijklmnopqrstuvwxyz_");
        if (eq > r + 2 && eq[0] == ' ' && eq[strspn(eq, " ")] == '=') {
            memmove(w, r, (size_t)(eq - r));
            w += eq - r, *w++ = ' ', r = eq + strspn(eq, " ");
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return replace(t, "  packing = true\n", "");
}

// LoRA's targets for a model: q and v, or what the test program has.
static const char *targets_of(const char *model) {
    return strstr(model, "new-ops")  ? "wqkv, o_proj"
           : strstr(model, "gpt2")   ? "c_attn"
           : strstr(model, "phi-3")  ? "qkv_proj"
           : strstr(model, "pythia") ? "query_key_value"
                                     : "q_proj, v_proj";
}

// The templates (the text before the first kernel, the same in every kernels.cu) and
// the distinct kernels' bodies seen so far.
static char *templates;
static VEC(char *) bodies;

static const char *const MARK = "/* The kernels of this plan. */";

// The name a kernel unit defines: after "FTC_KERNEL void " or "FTC_GROUP_KERNEL(".
static bool unit_name(const char *u, const char **at, size_t *len) {
    const char *k = strstr(u, "FTC_KERNEL void ");
    const char *g = strstr(u, "FTC_GROUP_KERNEL(");
    if (!k && !g)
        return false;
    *at = k ? k + strlen("FTC_KERNEL void ") : g + strlen("FTC_GROUP_KERNEL(");
    *len = strspn(*at, "abcdefghijklmnopqrstuvwxyz0123456789_");
    return *len > 0;
}

// Takes a kernels.cu apart: each kernel (with the table before a grouped one) is a unit
// of text after the mark, units apart by a blank line; each is kept once, by its text
// with its name (wherever it appears) replaced by '@'.
static void add_source(char *s) {
    char *mark = strstr(s, MARK);
    if (!mark) {
        free(s);
        return;
    }
    if (!templates)
        templates = strndup(s, (size_t)(mark - s));
    char *emu = strstr(mark, "#ifdef FTC_EMU");
    if (emu)
        *emu = '\0';
    for (char *u = strstr(mark, "\n\n"); u;) {
        u += 2;
        char *next = strstr(u, "\n\n");
        char *unit = strndup(u, next ? (size_t)(next - u) : strlen(u));
        const char *name;
        size_t nlen;
        if (unit_name(unit, &name, &nlen)) {
            char *key = malloc(strlen(unit) + 1), *o = key, *nm = strndup(name, nlen);
            for (const char *c = unit; *c;)
                if (strncmp(c, nm, nlen) == 0 && !strchr("abcdefghijklmnopqrstuvwxyz0123456789", c[nlen]))
                    *o++ = '@', c += nlen;
                else
                    *o++ = *c++;
            *o = '\0';
            free(nm);
            bool seen = false;
            for (int i = 0; i < bodies.len && !seen; i++)
                seen = strcmp(bodies.at[i], key) == 0;
            if (seen)
                free(key);
            else
                vec_push(&bodies, key);
        }
        free(unit);
        u = next;
    }
    free(s);
}

// The constant memory a kernel unit's tables take (FTC_CONST long long NAME[N]: a grouped
// launch's member offsets).
static long constant_bytes(const char *unit) {
    long n = 0;
    for (const char *p = strstr(unit, "FTC_CONST long long "); p; p = strstr(p + 1, "FTC_CONST long long ")) {
        const char *b = strchr(p, '[');
        if (b)
            n += 8 * strtol(b + 1, NULL, 10);
    }
    return n;
}

// A module holds at most 64 KiB of constant memory; the kernels of every plan together
// hold more, so they are compiled in sources of at most this much each.
enum { CHUNK_CONSTANT_BYTES = 48 << 10 };

// One source holding the distinct kernels [from, to), renamed u0, u1, ...
static char *union_source(int from, int to) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fputs(templates, f);
    for (int i = from; i < to; i++) {
        fputc('\n', f);
        for (const char *c = bodies.at[i]; *c; c++)
            if (*c == '@')
                fprintf(f, "u%d", i);
            else
                fputc(*c, f);
        fputc('\n', f);
    }
    fclose(f);
    return buf;
}

// Generates the kernels of every policy and offload level of one model and kind.
static bool sweep(const char *model, int kind) {
    FtSource src;
    if (fe_source_read(&src, model) != 0)
        return false;
    src.text = as_edited(src.text);
    char *end = strrchr(src.text, '}');   // the train section's closing brace
    size_t head = (size_t)(end - src.text);
    char add[256];
    snprintf(add, sizeof add, extra[kind], targets_of(model));
    char *t = malloc(strlen(src.text) + strlen(add) + 2);
    sprintf(t, "%.*s%s%s", (int)head, src.text, add, end);
    for (int e = 0; e < 3; e++)
        t = replace(t, edits[kind][e][0], edits[kind][e][1]);
    free(src.text);
    src.text = t;
    src.len = strlen(t);
    Arena *a = arena_new();
    FtModel m;
    bool ok = false;
    Ast *p = fe_parse(&src, a);
    if (p && fe_check(&src, p, &m, a) == 0) {
        ok = true;
        DriverSource ds = {&src, &m};
        Pipeline pipe = driver_pipeline(&ds, a, NULL);
        pipe.final = true;
        for (int pol = REMAT_KEEP; pol <= REMAT_SWAP && ok; pol++)
            for (int lv = 0; lv < 2 && ok; lv++) {
                PlanChoice c = {.micro = 1, .policy = (RematPolicy)pol, .n_policy = 1 << 20,
                                .rest = (RematPolicy)pol,
                                .offload = {.optimizer = lv == 1, .grads = lv == 1}};
                Arena *ga = arena_new();
                BuildStats bs;
                IrGraph *g = pipeline_build(&pipe, &c, ga, &bs);
                KernelSet ks;
                KernelHyper h = {0.9, 0.999, 1e-8};
                char err[512];
                ok = g && codegen_kernels(g, &h, &ks, err, sizeof err) == 0;
                if (ok) {
                    add_source(ks.source);
                    ks.source = NULL;
                    codegen_kernels_free(&ks);
                } else {
                    printf("  %s %s: %s\n", model, kinds[kind], g ? err : "does not build");
                }
                if (g)
                    ir_graph_free(g);
                arena_free(ga);
            }
    }
    arena_free(a);
    fe_source_free(&src);
    return ok;
}

int main(int argc, char **argv) {
    if (argc > 1 && chdir(argv[1]) != 0)
        return 2;
    NvrtcInfo info;
    if (!rt_nvrtc_available(&info)) {
        printf("skipped: %s\n", rt_nvrtc_load_error());
        return 77;
    }
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++)
        for (int k = 0; k < NKINDS; k++) {
            char name[96];
            snprintf(name, sizeof name, "%s-%s", models[mi], kinds[k]);
            RUN_NAMED(name, CHECK(sweep(models[mi], k)));
        }
    printf("  %d distinct kernels over %zu models x %d kinds x 4 policies x 2 offload levels\n",
           bodies.len, sizeof models / sizeof models[0], (int)NKINDS);
    int chunks[64], nchunks = 0;   // where each source's kernels start
    long used = 0;
    for (int i = 0; i < bodies.len; i++) {
        long b = constant_bytes(bodies.at[i]);
        if (i == 0 || (used + b > CHUNK_CONSTANT_BYTES && nchunks < 63))
            chunks[nchunks++] = i, used = 0;
        used += b;
    }
    chunks[nchunks] = bodies.len;
    // From the PTX of each: every attention kernel on tensor cores stages its tiles by cp.async
    // and feeds them by ldmatrix; rope (its angles from the table), the loss and the updates
    // compute nothing in double.
    static const char *const no_fp64[] = {"rope(", "lce_step(", "ce_grad(", "ce_rows(", "adamw(", "adamw_group(",
                                          "adamw8bit(", "adamw8bit_group(", "sgd(", "grad_factor("};
    static const char *archs[] = {"sm_80", "sm_90"};
    const char *opts[] = {"--fmad=false"};
    for (int a = 0; a < 2; a++) {
        int worst_regs = 0, spilling = 0, compiled = 0, attention = 0, attention_bad = 0, fp64_bad = 0;
        int rope = 0, rope_tables = 0;
        int64_t worst_smem = 0, worst_stack = 0;
        bool cached = true;
        for (int c = 0; c < nchunks; c++) {
            char *all = union_source(chunks[c], chunks[c + 1]);
            NvrtcResult r;
            char err[2048];
            int rc = rt_nvrtc_compile_cached(NULL, all, "kernels.cu", archs[a], opts, 1, &r, err, sizeof err);
            free(all);
            if (rc != 0) {
                printf("  %s: %s\n", archs[a], err);
                RUN_NAMED(archs[a], CHECK(!"compiles"));
                continue;
            }
            cached &= r.cache_hit;
            compiled += r.nkernels;
            for (int k = 0; k < r.nkernels; k++) {
                const NvrtcKernel *kn = &r.kernels[k];
                int u = atoi(kn->name + 1);
                const char *text = u >= 0 && u < bodies.len ? bodies.at[u] : "";
                if ((strstr(text, "attention_fwd(") || strstr(text, "attention_bwd_main(")) && kn->ptx.mma) {
                    attention++;
                    if (!kn->ptx.ldmatrix || !kn->ptx.cp_async) {
                        printf("  %s: %s on tensor cores without ldmatrix or cp.async\n", archs[a], kn->name);
                        attention_bad++;
                    }
                }
                for (size_t i = 0; i < sizeof no_fp64 / sizeof no_fp64[0]; i++)
                    if (strstr(text, no_fp64[i]) && kn->ptx.fp64) {
                        printf("  %s: %s (%.*s) has %d FP64 instructions\n", archs[a], kn->name,
                               (int)strcspn(no_fp64[i], "("), no_fp64[i], kn->ptx.fp64);
                        fp64_bad++;
                    }
                rope += strstr(text, "rope(") != NULL;
                rope_tables += strstr(text, "rope_table(") != NULL;
                worst_regs = kn->registers > worst_regs ? kn->registers : worst_regs;
                worst_smem = kn->smem_bytes > worst_smem ? kn->smem_bytes : worst_smem;
                worst_stack = kn->stack_bytes > worst_stack ? kn->stack_bytes : worst_stack;
                if (kn->spill_store_bytes || kn->spill_load_bytes) {
                    // the template call the kernel makes: its last line but the brace
                    int u = atoi(kn->name + 1);
                    const char *body = u >= 0 && u < bodies.len ? bodies.at[u] : "", *call = strstr(body, "{\n");
                    printf("  %s: %s spills %lld/%lld bytes:%.*s\n", archs[a], kn->name,
                           (long long)kn->spill_store_bytes, (long long)kn->spill_load_bytes,
                           call ? (int)strcspn(call + 1, "}") : 0, call ? call + 1 : "");
                    spilling++;
                }
            }
            rt_nvrtc_result_free(&r);
        }
        printf("  %s: %d kernels in %d sources, at most %d registers, %lld bytes of shared memory, "
               "%lld bytes of stack; %d spilling%s\n", archs[a], compiled, nchunks, worst_regs,
               (long long)worst_smem, (long long)worst_stack, spilling, cached ? " (from the cache)" : "");
        RUN_NAMED(archs[a], CHECK(compiled == bodies.len && spilling == 0));
        printf("  %s: %d attention kernels on tensor cores, every one by cp.async and ldmatrix: %s; the "
               "rope, the loss and the updates without FP64: %s (%d rope kernels from %d tables of "
               "angles)\n", archs[a], attention, attention_bad ? "no" : "yes", fp64_bad ? "no" : "yes",
               rope, rope_tables);
        char name[32];
        snprintf(name, sizeof name, "%s-ptx-facts", archs[a]);
        RUN_NAMED(name, CHECK(attention > 0 && rope > 0 && rope_tables > 0 && attention_bad == 0 && fp64_bad == 0));
    }
    free(templates);
    for (int i = 0; i < bodies.len; i++)
        free(bodies.at[i]);
    vec_free(&bodies);
    return CHECK_DONE();
}
