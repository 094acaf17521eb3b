// kernels.c — the CUDA C emitter: kernels.cu for a planned graph. The file opens with
// the prelude (the subset of CUDA both NVRTC and the CPU emulation compile) and the
// templates of codegen/cuda/, then one thin kernel per distinct specialisation: an
// elementwise op's kernel is made around its device code in the op table; any other
// op's launches call its template functions (the CUDA column, cuda_ops.c) with the
// node's shapes and dtypes as literal constants, which the compiler folds. Nodes with
// the same specialisation (every layer's RMSNorm) share one kernel. The output is a
// function of the graph alone, so it can be diffed and cached.
#include "codegen.h"
#include "../runtime/cpu/nf4.h"

#include <stdlib.h>
#include <string.h>

// The templates, in the order kernels.cu includes them.
static const char *const templates[] = {"fmath.h", "common.cuh", "norm.cuh", "rope.cuh", "embed.cuh",
                                        "loss.cuh", "pref.cuh", "optim.cuh", "nf4.cuh", "dropout.cuh",
                                        "movement.cuh", "attention.cuh", "decode.cuh"};

const char *codegen_cuda_file(const char *name) {
    for (const CudaFile *f = codegen_cuda_files; f->name; f++)
        if (strcmp(f->name, name) == 0)
            return f->text;
    return NULL;
}

typedef struct Kernel {
    char *body;             // the text between the braces
    char *prefix;           // file-scope text before it (a grouped launch's table), or NULL;
                            // "$K" in either stands for the kernel's name
    char name[64];
    int syncs;
    bool group;             // FTC_GROUP_KERNEL: launched with FtcGroupArgs
} Kernel;

typedef struct Emitter {
    const IrGraph *g;
    VEC(Kernel) kernels;
} Emitter;

static char *text_of(FILE *f, char **buf, size_t *len) {
    fclose(f);
    (void)len;
    return *buf;
}

static bool same_text(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

// The kernel with this body (and prefix), added when new; its index. Takes the texts.
static int intern_text(Emitter *e, char *body, char *prefix, const char *what, int syncs, bool group) {
    for (int k = 0; k < e->kernels.len; k++)
        if (strcmp(e->kernels.at[k].body, body) == 0 && same_text(e->kernels.at[k].prefix, prefix) &&
            e->kernels.at[k].group == group) {
            free(body), free(prefix);
            return k;
        }
    Kernel k = {.body = body, .prefix = prefix, .syncs = syncs, .group = group};
    snprintf(k.name, sizeof k.name, "k%d_%s", e->kernels.len, what);
    vec_push(&e->kernels, k);
    return e->kernels.len - 1;
}

static int intern(Emitter *e, char *body, const char *what, int syncs) {
    return intern_text(e, body, NULL, what, syncs, false);
}

// Writes `text` with every "$K" replaced by `name`.
static void put_named(FILE *f, const char *text, const char *name) {
    for (const char *p = text; *p; p++)
        if (p[0] == '$' && p[1] == 'K')
            fputs(name, f), p++;
        else
            fputc(*p, f);
}

// Whether `code` uses the identifier `id`.
static bool uses(const char *code, const char *id) {
    size_t n = strlen(id);
    for (const char *p = strstr(code, id); p; p = strstr(p + 1, id)) {
        bool before = p > code && (p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') ||
                                   (p[-1] >= 'A' && p[-1] <= 'Z') || (p[-1] >= '0' && p[-1] <= '9'));
        char a = p[n];
        bool after = a == '_' || (a >= 'a' && a <= 'z') || (a >= 'A' && a <= 'Z') || (a >= '0' && a <= '9');
        if (!before && !after)
            return true;
    }
    return false;
}

// The loop of a grouped launch: element g of the launch is element i of member k, whose
// buffers are p (the members' elements laid end to end, $K_start[k] where k's begin).
static void group_loop(FILE *f, int count) {
    fprintf(f, "    long long k = 0;\n");
    fprintf(f, "    for (long long g = ftc_gid(); g < $K_start[%d]; g += ftc_gstride()) {\n", count);
    fprintf(f, "        while (g >= $K_start[k + 1])\n            k++;\n");
    fprintf(f, "        void *const *p = FTC_GA->p[k];\n        long long i = g - $K_start[k];\n");
}

// Whether an elementwise kernel over `total` elements of out (tensor ids ins[0..nin), -1 for
// none) runs eight elements a thread with ld8/st8: each operand aligned, eight elements a
// step of every one (a broadcast input's size a multiple of eight), 32-bit indices.
static bool vector8(const IrGraph *g, int out, const int *ins, int nin, int64_t total) {
    if (total % 8 || total >= ((int64_t)1 << 31) || !codegen_aligned16(g, out))
        return false;
    for (int k = 0; k < nin; k++) {
        if (ins[k] < 0)
            continue;
        int64_t nx = ir_tensor_elems(&g->tensors.at[ins[k]]);
        if (nx % 8 || !codegen_aligned16(g, ins[k]))
            return false;
    }
    return true;
}

// The head of a vector loop: i the first of the eight elements of a step, 32-bit.
static void vector_loop(FILE *f, int64_t total) {
    fprintf(f, "    for (int v = (int)ftc_gid(); v < %d; v += (int)ftc_gstride()) {\n", (int)(total / 8));
    fprintf(f, "        const int i = v * 8;\n");
}

// An elementwise kernel around device code: out[0] over its elements, input k read at
// i, or at i modulo its size when it is broadcast (its shape a suffix of the output's).
// With count > 0, the body of a grouped launch over `count` such nodes (none broadcast).
static char *elementwise_body(const IrGraph *g, const IrNode *n, const char *device, int count) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    const IrTensor *out = &g->tensors.at[n->out[0]];
    int64_t total = ir_tensor_elems(out);
    int nout = ir_node_nout(n);
    if (!count && vector8(g, n->out[0], n->in, n->nin, total)) {
        fprintf(f, "    void *const *p = a.p;\n");
        vector_loop(f, total);
        fprintf(f, "        float yv[8];\n");
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] < 0)
                continue;
            int64_t nx = ir_tensor_elems(&g->tensors.at[n->in[k]]);
            fprintf(f, "        float x%dv[8];\n        ld8(p[%d], ", k, nout + k);
            if (nx == total)
                fprintf(f, "i");
            else
                fprintf(f, "i %% %d", (int)nx);
            fprintf(f, ", %d, x%dv);\n", (int)g->tensors.at[n->in[k]].dtype, k);
        }
        if (n->update & 1u)
            fprintf(f, "        ld8(p[0], i, %d, yv);\n", (int)out->dtype);
        fprintf(f, "        FTC_UNROLL\n        for (int e = 0; e < 8; e++) {\n");
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] >= 0)
                fprintf(f, "            float x%d = x%dv[e];\n", k, k);
        fprintf(f, "            float y = %s;\n", n->update & 1u ? "yv[e]" : "0.0f");
        if (uses(device, "c"))
            fprintf(f, "            const float c = %af;\n", (double)(float)n->attr.f);
        fprintf(f, "            { %s }\n            yv[e] = y;\n        }\n", device);
        fprintf(f, "        st8(p[0], i, %d, yv);\n    }\n", (int)out->dtype);
        return text_of(f, &buf, &len);
    }
    if (count) {
        group_loop(f, count);
    } else {
        fprintf(f, "    void *const *p = a.p;\n    const long long n = %lldLL;\n", (long long)total);
        fprintf(f, "    for (long long i = ftc_gid(); i < n; i += ftc_gstride()) {\n");
    }
    for (int k = 0; k < n->nin; k++) {
        if (n->in[k] < 0)
            continue;
        const IrTensor *x = &g->tensors.at[n->in[k]];
        int64_t nx = ir_tensor_elems(x);
        if (nx == total)
            fprintf(f, "        float x%d = ldf(p[%d], i, %d);\n", k, nout + k, (int)x->dtype);
        else
            fprintf(f, "        float x%d = ldf(p[%d], i %% %lldLL, %d);\n", k, nout + k,
                    (long long)nx, (int)x->dtype);
    }
    if (n->update & 1u)
        fprintf(f, "        float y = ldf(p[0], i, %d);\n", (int)out->dtype);
    else
        fprintf(f, "        float y;\n");
    if (uses(device, "c"))
        fprintf(f, "        const float c = %af;\n", (double)(float)n->attr.f);
    fprintf(f, "        { %s }\n", device);
    fprintf(f, "        stf(p[0], i, %d, y);\n    }\n", (int)out->dtype);
    return text_of(f, &buf, &len);
}

// A fused kernel: its inputs loaded once per element (broadcast ones modulo their
// size), each step's device code in turn on fp32 values, a step's result rounded to its
// tensor's dtype as the unfused op would have stored it (rnd), the last one stored.
static char *fused_body(const IrGraph *g, const IrNode *n) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    const IrFused *fz = &g->fused.at[n->fused];
    const IrTensor *out = &g->tensors.at[n->out[0]];
    int64_t total = ir_tensor_elems(out);
    bool vec = vector8(g, n->out[0], n->in, n->nin, total);
    if (vec) {   // eight elements a thread: the operands loaded whole, the steps per element
        vector_loop(f, total);
        fprintf(f, "        float yv[8];\n");
        for (int k = 0; k < n->nin; k++) {
            int64_t nx = ir_tensor_elems(&g->tensors.at[n->in[k]]);
            fprintf(f, "        float e%dv[8];\n        ld8(a.p[%d], ", k, 1 + k);
            if (nx == total)
                fprintf(f, "i");
            else
                fprintf(f, "i %% %d", (int)nx);
            fprintf(f, ", %d, e%dv);\n", (int)g->tensors.at[n->in[k]].dtype, k);
        }
        fprintf(f, "        FTC_UNROLL\n        for (int e = 0; e < 8; e++) {\n");
        for (int k = 0; k < n->nin; k++)
            fprintf(f, "        float e%d = e%dv[e];\n", k, k);
    } else {
        fprintf(f, "    const long long n = %lldLL;\n", (long long)total);
        fprintf(f, "    for (long long i = ftc_gid(); i < n; i += ftc_gstride()) {\n");
        for (int k = 0; k < n->nin; k++) {
            const IrTensor *x = &g->tensors.at[n->in[k]];
            int64_t nx = ir_tensor_elems(x);
            if (nx == total)
                fprintf(f, "        float e%d = ldf(a.p[%d], i, %d);\n", k, 1 + k, (int)x->dtype);
            else
                fprintf(f, "        float e%d = ldf(a.p[%d], i %% %lldLL, %d);\n", k, 1 + k,
                        (long long)nx, (int)x->dtype);
        }
    }
    for (int s = 0; s < fz->n; s++) {
        const IrNode *st = &fz->step[s];
        const char *device = op_info(st->op)->device;
        fprintf(f, "        float v%d;\n        {\n", s);
        for (int k = 0; k < st->nin; k++) {
            int t = st->in[k], src = -1;
            for (int j = 0; j < n->nin && src < 0; j++)
                if (n->in[j] == t)
                    fprintf(f, "            float x%d = e%d;\n", k, j), src = j;
            for (int j = 0; j < s && src < 0; j++)
                if (fz->step[j].out[0] == t)
                    fprintf(f, "            float x%d = v%d;\n", k, j), src = j;
            IR_ASSERT(src >= 0);
        }
        if (uses(device, "c"))
            fprintf(f, "            const float c = %af;\n", (double)(float)st->attr.f);
        fprintf(f, "            float y;\n            { %s }\n", device);
        fprintf(f, "            v%d = rnd(y, %d);\n        }\n", s,
                (int)g->tensors.at[st->out[0]].dtype);
    }
    if (vec)
        fprintf(f, "        yv[e] = v%d;\n        }\n        st8(a.p[0], i, %d, yv);\n    }\n", fz->n - 1,
                (int)out->dtype);
    else
        fprintf(f, "        stf(a.p[0], i, %d, v%d);\n    }\n", (int)out->dtype, fz->n - 1);
    return text_of(f, &buf, &len);
}

// A template launch: `fn(a, constants);`.
static char *template_body(const CudaOp *c, const CudaCtx *x) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fprintf(f, "    %s(a, ", c->fn[x->launch]);
    c->args(f, x);
    fprintf(f, ");\n");
    return text_of(f, &buf, &len);
}

// The file-scope text before a template launch's kernel (its tables).
static char *prefix_text(const CudaOp *c, const CudaCtx *x) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    c->prefix(f, x);
    return text_of(f, &buf, &len);
}

static void geometry_for(int64_t total, unsigned *grid, unsigned *block) {
    int64_t b = (total + 255) / 256;
    grid[0] = (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
    block[0] = 256;
}

// A thread an element, or eight in a vector kernel (vector8).
static void elementwise_geometry(const IrGraph *g, const IrNode *n, unsigned *grid, unsigned *block) {
    int64_t total = ir_tensor_elems(&g->tensors.at[n->out[0]]);
    geometry_for(vector8(g, n->out[0], n->in, n->nin, total) ? total / 8 : total, grid, block);
}

//
// Grouped launches: the optimizer over many tensors at once.
//

// The constants a node would share with the rest of its group (malloc'd), or NULL when
// its op updates one tensor a launch.
// An elementwise op's group shares its device code, dtypes, constant and whether it
// updates in place; none of its inputs may be broadcast.
static char *group_key(const IrGraph *g, const IrNode *n, const KernelHyper *h) {
    const CudaOp *c = cuda_op(n->op);
    const char *device = op_info(n->op)->device;
    if (n->stream != STREAM_COMPUTE || n->nin + ir_node_nout(n) > KERNEL_GROUP_OPERANDS ||
        n->op == OP_FUSED || n->op == OP_DROPOUT || !(device || (c && c->group_fn)))
        return NULL;
    const IrTensor *out = &g->tensors.at[n->out[0]];
    for (int k = 0; k < n->nin && device; k++)
        if (n->in[k] < 0 || ir_tensor_elems(&g->tensors.at[n->in[k]]) != ir_tensor_elems(out))
            return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (device) {
        fprintf(f, "%s|%u|%a|%d", device, n->update & 1u, (double)(float)n->attr.f, (int)out->dtype);
        for (int k = 0; k < n->nin; k++)
            fprintf(f, ",%d", (int)g->tensors.at[n->in[k]].dtype);
    } else {
        CudaCtx x = {g, n, 0, h};
        fprintf(f, "%s(", c->group_fn);
        c->group_args(f, &x);
    }
    return text_of(f, &buf, &len);
}

// Whether every operand of node m is alive at node `at`, so that a launch there may
// touch them.
static bool alive_at(const IrGraph *g, const IrNode *m, int at) {
    for (int k = 0; k < m->nin + ir_node_nout(m); k++) {
        int t = k < m->nin ? m->in[k] : m->out[k - m->nin];
        if (t < 0)
            continue;
        const IrTensor *b = &g->tensors.at[ir_tensor_base(g, t)];
        if (b->first > at || b->last < at)
            return false;
    }
    return true;
}

// Whether node m touches a tensor that a member of the group [lead, m) writes, or
// writes one a member touches: then it must see their results, and cannot share the
// launch.
static bool depends(const IrGraph *g, int lead, int m) {
    const IrNode *x = &g->nodes.at[m];
    for (int j = lead; j < m; j++) {
        const IrNode *y = &g->nodes.at[j];
        if (y->phase != x->phase)
            continue;
        for (int a = 0; a < x->nin + ir_node_nout(x); a++)
            for (int b = 0; b < y->nin + ir_node_nout(y); b++) {
                int ta = a < x->nin ? x->in[a] : x->out[a - x->nin];
                int tb = b < y->nin ? y->in[b] : y->out[b - y->nin];
                bool write = a >= x->nin || b >= y->nin;
                if (ta >= 0 && tb >= 0 && write && ir_tensor_base(g, ta) == ir_tensor_base(g, tb))
                    return true;
            }
    }
    return false;
}

// Marks the groups: runs of consecutive nodes of one phase with the same key, none but
// the first waiting for or recording an event (so nothing on another stream can come
// between them), every operand alive at the first, none touching what another writes, at
// most KERNEL_GROUP_MAX of them. The launch at the first node then does what each member
// would have done, in its place.
static void find_groups(const IrGraph *g, const KernelHyper *h, NodeKernels *nk) {
    for (int i = 0; i < g->nodes.len; i++)
        nk[i].by = -1;
    for (int ph = 0; ph < PHASE_COUNT; ph++) {
        int lead = -1, count = 0;
        char *key = NULL;
        for (int i = 0; i <= g->nodes.len; i++) {
            const IrNode *n = i < g->nodes.len ? &g->nodes.at[i] : NULL;
            if (n && n->phase != (IrPhase)ph)
                continue;
            char *k = n ? group_key(g, n, h) : NULL;
            bool joins = k && key && n->nwait == 0 && n->record < 0 && count < KERNEL_GROUP_MAX &&
                         strcmp(k, key) == 0 && alive_at(g, n, lead) && !depends(g, lead, i);
            if (joins) {
                nk[i].by = lead;
                count++;
                free(k);
                continue;
            }
            if (count >= 2)   // (a group of one is an ordinary launch)
                nk[lead].group = count;
            free(key);
            key = k, lead = k ? i : -1, count = k ? 1 : 0;
        }
        free(key);
    }
    // Buckets of collectives (the shard pass's): each run of one bucket is one call.
    for (int i = 0; i < g->nodes.len;) {
        int j = i + 1, b = g->nodes.at[i].bucket;
        while (b >= 0 && j < g->nodes.len && g->nodes.at[j].bucket == b && j - i < KERNEL_GROUP_MAX)
            nk[j++].by = i;
        if (j - i >= 2)
            nk[i].group = j - i;
        i = j;
    }
}

// The group's launch: a table of where each member's elements start, then the template.
static int group_kernel(Emitter *e, const IrGraph *g, const KernelHyper *h, int lead, int count,
                        KernelLaunch *kl) {
    const IrNode *n = &g->nodes.at[lead];
    const CudaOp *c = cuda_op(n->op);
    char *pre = NULL, *body = NULL;
    size_t plen = 0, blen = 0;
    FILE *f = open_memstream(&pre, &plen);
    fprintf(f, "FTC_CONST long long $K_start[%d] = {0LL", count + 1);
    int64_t total = 0;
    for (int i = lead, m = 0; m < count; i++) {
        const IrNode *x = &g->nodes.at[i];
        if (x->phase != n->phase)
            continue;
        total += ir_tensor_elems(&g->tensors.at[x->out[0]]);
        fprintf(f, ",%s%lldLL", m % 6 == 5 ? "\n    " : " ", (long long)total);
        m++;
    }
    fprintf(f, "};\n");
    text_of(f, &pre, &plen);
    const char *device = op_info(n->op)->device, *what = device ? op_desc(n->op)->name : c->group_fn;
    if (device) {
        body = elementwise_body(g, n, device, count);
    } else {
        f = open_memstream(&body, &blen);
        CudaCtx x = {g, n, 0, h};
        fprintf(f, "    %s(FTC_GA, $K_start, %d, ", c->group_fn, count);
        c->group_args(f, &x);
        fprintf(f, ");\n");
        text_of(f, &body, &blen);
    }
    char name[48];
    snprintf(name, sizeof name, "%s%s", what, device ? "_group" : "");
    int k = intern_text(e, body, pre, name, device ? 0 : c->syncs[0], true);
    memcpy(kl->name, e->kernels.at[k].name, sizeof kl->name);
    kl->grid[1] = kl->grid[2] = kl->block[1] = kl->block[2] = 1;
    CudaCtx x = {g, n, 0, h};
    geometry_for(total / (!device && c->per_thread ? c->per_thread(&x) : 1), kl->grid, kl->block);
    return k;
}

// Whether the node runs without a generated kernel: a GEMM (the BLAS library), a plan
// copy, a collective (the communicator), or a view (no bytes move: a view op, or a slice
// whose range is contiguous).
static bool library_or_nothing(const IrGraph *g, const IrNode *n) {
    OpClass c = op_desc(n->op)->cls;
    return c == OPC_GEMM || c == OPC_COPY || c == OPC_COLLECTIVE ||
           (c == OPC_MOVEMENT && (!cuda_op(n->op) || g->tensors.at[n->out[0]].alias_of >= 0));
}

static void emit_tables(FILE *f) {
    fprintf(f, "/* NF4 levels, the dynamic 8-bit code of double quantisation and of AdamW8bit's first\n"
               " * moment, and the unsigned one of its second (the runtime's tables, runtime/cpu/nf4.c) */\n");
    fprintf(f, "FTC_CONST float ftc_nf4_code[16] = {");
    for (int i = 0; i < 16; i++)
        fprintf(f, "%s%af", i ? ", " : "", (double)cpu_nf4_code[i]);
    fprintf(f, "};\nFTC_CONST float ftc_nf4_dynamic[256] = {");
    for (int i = 0; i < 256; i++)
        fprintf(f, "%s%s%af", i ? "," : "", i % 4 ? " " : "\n    ", (double)cpu_nf4_dynamic_code[i]);
    fprintf(f, "};\nFTC_CONST float ftc_dyn_unsigned[256] = {");
    for (int i = 0; i < 256; i++)
        fprintf(f, "%s%s%af", i ? "," : "", i % 4 ? " " : "\n    ", (double)cpu_dynamic_unsigned_code[i]);
    fprintf(f, "};\n\n");
}

// Node n's one launch of elementwise kernel k: a thread an element, or eight (vector8).
static void elementwise_launch(const Emitter *e, const IrNode *n, int k, NodeKernels *nk) {
    nk->n = 1;
    memcpy(nk->at[0].name, e->kernels.at[k].name, sizeof nk->at[0].name);
    elementwise_geometry(e->g, n, nk->at[0].grid, nk->at[0].block);
}

// Node n's launches of its op's templates, one a template function of the CUDA column.
static void template_launches(Emitter *e, const IrNode *n, const CudaOp *c, const KernelHyper *h,
                              NodeKernels *nk) {
    nk->main = c->main_launch;
    for (int l = 0; l < KERNEL_MAX_LAUNCHES && c->fn[l]; l++) {
        CudaCtx x = {e->g, n, l, h};
        int k = intern_text(e, template_body(c, &x), c->prefix ? prefix_text(c, &x) : NULL,
                            c->fn[l], c->syncs[l], false);
        KernelLaunch *kl = &nk->at[nk->n++];
        memcpy(kl->name, e->kernels.at[k].name, sizeof kl->name);
        kl->grid[1] = kl->grid[2] = kl->block[1] = kl->block[2] = 1;
        c->geometry(&x, kl->grid, kl->block);
        kl->smem = c->smem ? c->smem(&x) : 0;
    }
}

// The launches of node i: none for a library call, a view or a group's member, one for
// a group's first or an elementwise op, the template's for the others. -1 with err for
// an op without a CUDA kernel.
static int node_launches(Emitter *e, const KernelHyper *h, int i, KernelSet *ks, char *err,
                         size_t errlen) {
    const IrGraph *g = e->g;
    const IrNode *n = &g->nodes.at[i];
    NodeKernels *nk = &ks->node[i];
    if (library_or_nothing(g, n) || nk->by >= 0)
        return 0;
    if (nk->group) {
        group_kernel(e, g, h, i, nk->group, &nk->at[0]);
        nk->n = 1;
        ks->nlaunch_nodes++;
        return 0;
    }
    const char *device = op_info(n->op)->device;
    const CudaOp *c = cuda_op(n->op);
    if (n->op == OP_DROPOUT && ir_node_nout(n) == 1)
        device = "y = x0;";   // p = 0: no mask, the identity
    if (n->op == OP_FUSED)
        elementwise_launch(e, n, intern(e, fused_body(g, n), "fused", 0), nk);
    else if (device)
        elementwise_launch(e, n, intern(e, elementwise_body(g, n, device, 0), op_desc(n->op)->name, 0), nk);
    else if (c)
        template_launches(e, n, c, h, nk);
    else {
        snprintf(err, errlen, "node %d (%s, .ft line %d): no CUDA kernel for this op", i,
                 op_desc(n->op)->name, n->loc.line);
        return -1;
    }
    for (int l = 0; l < nk->n; l++)
        for (int d = 0; d < 3; d++) {
            if (!nk->at[l].grid[d])
                nk->at[l].grid[d] = 1;
            if (!nk->at[l].block[d])
                nk->at[l].block[d] = 1;
        }
    ks->nlaunch_nodes += nk->n > 0;
    return 0;
}

// kernels.cu: the prelude, the templates (the tables before optim.cuh), every kernel
// of this plan, and the table the CPU emulation looks them up in.
static char *kernels_source(const Emitter *e) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fprintf(f, "/* kernels.cu — generated by ftc compile: %d kernels for a graph of %d nodes.\n"
               " * Compiled by NVRTC for a GPU, and by the host C compiler with -DFTC_EMU for\n"
               " * `ftc run --device emu`. */\n",
            e->kernels.len, e->g->nodes.len);
    fputs(codegen_cuda_file("prelude.cuh"), f);
    for (size_t t = 0; t < sizeof templates / sizeof templates[0]; t++) {
        if (strcmp(templates[t], "optim.cuh") == 0)
            emit_tables(f);
        fprintf(f, "\n");
        fputs(codegen_cuda_file(templates[t]), f);
    }
    fprintf(f, "\n/* The kernels of this plan. */\n");
    for (int k = 0; k < e->kernels.len; k++) {
        const Kernel *kn = &e->kernels.at[k];
        fputc('\n', f);
        if (kn->prefix)
            put_named(f, kn->prefix, kn->name);
        if (kn->group)
            fprintf(f, "FTC_GROUP_KERNEL(%s) {\n", kn->name);
        else
            fprintf(f, "FTC_KERNEL void %s(FtcArgs a) {\n", kn->name);
        put_named(f, kn->body, kn->name);
        fprintf(f, "}\n");
    }
    fprintf(f, "\n#ifdef FTC_EMU\nFTC_EMU_TABLE(\n");
    for (int k = 0; k < e->kernels.len; k++)
        fprintf(f, "    FTC_EMU_%sENTRY(%s, %d)\n", e->kernels.at[k].group ? "GROUP_" : "",
                e->kernels.at[k].name, e->kernels.at[k].syncs);
    fprintf(f, ")\n#endif\n");
    return text_of(f, &buf, &len);
}

// Frees the emitter's kernels.
static void free_kernels(Emitter *e) {
    for (int k = 0; k < e->kernels.len; k++)
        free(e->kernels.at[k].body), free(e->kernels.at[k].prefix);
    vec_free(&e->kernels);
}

int codegen_kernels(const IrGraph *g, const KernelHyper *h, KernelSet *ks, char *err, size_t errlen) {
    memset(ks, 0, sizeof *ks);
    Emitter e = {.g = g};
    ks->node = xcalloc((size_t)g->nodes.len + 1, sizeof(NodeKernels));
    ks->nnodes = g->nodes.len;
    find_groups(g, h, ks->node);
    for (int i = 0; i < g->nodes.len; i++)
        if (node_launches(&e, h, i, ks, err, errlen) != 0) {
            free_kernels(&e);
            free(ks->node);
            ks->node = NULL;
            return -1;
        }
    ks->source = kernels_source(&e);
    ks->nkernels = e.kernels.len;
    free_kernels(&e);
    return 0;
}

void codegen_kernels_free(KernelSet *ks) {
    free(ks->source);
    free(ks->node);
    memset(ks, 0, sizeof *ks);
}
