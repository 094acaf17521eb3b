// ptx.c — the facts that decide a kernel's speed, read from the PTX NVRTC made of it: its
// tensor-core instructions, its shared-memory loads by ldmatrix and copies by cp.async, the
// width of its global loads and stores, and its double-precision arithmetic. A count is of
// instructions in the text (a loop's body once), which is what a reader of the PTX sees.
#include "nvrtc.h"

#include <stdlib.h>
#include <string.h>

// The bytes one element of a PTX type suffix holds (".f32" 4, ".bf16" 2, ".v4"'s element
// after it), 0 for none.
static int type_bytes(const char *t, size_t n) {
    static const struct {
        const char *name;
        int bytes;
    } types[] = {{"b8", 1},   {"u8", 1},   {"s8", 1},   {"b16", 2},  {"u16", 2}, {"s16", 2},
                 {"f16", 2},  {"bf16", 2}, {"f16x2", 4}, {"bf16x2", 4}, {"b32", 4}, {"u32", 4},
                 {"s32", 4},  {"f32", 4},  {"b64", 8},  {"u64", 8},  {"s64", 8}, {"f64", 8},
                 {"b128", 16}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strlen(types[i].name) == n && strncmp(t, types[i].name, n) == 0)
            return types[i].bytes;
    return 0;
}

// The opcode's dot-separated parts: whether one is `part`.
static bool has_part(const char *op, size_t n, const char *part) {
    size_t m = strlen(part);
    for (const char *p = op; p + m <= op + n; p++)
        if ((p == op || p[-1] == '.') && strncmp(p, part, m) == 0 && (p + m == op + n || p[m] == '.'))
            return true;
    return false;
}

// A global load or store's bytes: its vector count (.v2, .v4) times its element type's.
static int access_bytes(const char *op, size_t n) {
    int vec = has_part(op, n, "v4") ? 4 : has_part(op, n, "v2") ? 2 : has_part(op, n, "v8") ? 8 : 1;
    const char *last = op + n;
    while (last > op && last[-1] != '.')
        last--;
    return vec * type_bytes(last, (size_t)(op + n - last));
}

static void count(PtxFacts *f, const char *op, size_t n) {
    if (strncmp(op, "mma.", 4) == 0 || strncmp(op, "wgmma.mma_async", 15) == 0)
        f->mma++;
    else if (strncmp(op, "ldmatrix.", 9) == 0)
        f->ldmatrix++;
    else if (strncmp(op, "cp.async.", 9) == 0 && has_part(op, n, "shared") && has_part(op, n, "global"))
        f->cp_async++;
    else if ((strncmp(op, "ld.global.", 10) == 0 || strncmp(op, "st.global.", 10) == 0)) {
        int b = access_bytes(op, n), *w = op[0] == 'l' ? f->load : f->store;
        w[b >= 16 ? 2 : b >= 8 ? 1 : 0]++;
    } else if (has_part(op, n, "f64") && strncmp(op, "ld.", 3) != 0 && strncmp(op, "st.", 3) != 0 &&
               strncmp(op, "mov.", 4) != 0) {
        f->fp64++;   // arithmetic, comparisons and conversions in double
    }
}

int rt_ptx_facts(const char *ptx, const char *entry, PtxFacts *f) {
    *f = (PtxFacts){0};
    size_t n = strlen(entry);
    // ".visible .entry NAME(" opens the kernel; its body ends at the first "}" line.
    for (const char *p = strstr(ptx, ".entry "); p; p = strstr(p + 1, ".entry ")) {
        const char *name = p + 7;
        if (strncmp(name, entry, n) != 0 || (name[n] != '(' && name[n] != '\n' && name[n] != ' '))
            continue;
        const char *body = strstr(name, "\n{");
        for (const char *line = body; line && *line;) {
            const char *eol = strchr(line, '\n');
            size_t len = eol ? (size_t)(eol - line) : strlen(line);
            const char *s = line;
            while (s < line + len && (*s == ' ' || *s == '\t'))
                s++;
            if (s < line + len && *s == '}' && line > body + 1)
                return 0;
            if (*s == '@') {   // a predicate guard: the instruction after it
                s += strcspn(s, " \t");
                while (*s == ' ' || *s == '\t')
                    s++;
            }
            size_t op = strcspn(s, " \t;\n");
            if (op && *s >= 'a' && *s <= 'z')
                count(f, s, op), f->instructions++;
            line = eol ? eol + 1 : line + len;
        }
        return 0;
    }
    return -1;
}

// An SM of each architecture ftc compiles for: registers, threads, blocks and shared memory
// (bytes, with the 1 KiB the driver keeps a block) it holds. CUDA C Programming Guide,
// "Compute Capabilities", table of technical specifications.
typedef struct SmLimits {
    int sm, threads, blocks;
    int smem;
} SmLimits;
static const SmLimits sms[] = {
    {80, 2048, 32, 167936}, {86, 1536, 16, 102400}, {87, 2048, 32, 167936},
    {89, 1536, 24, 102400}, {90, 2048, 32, 233472},
};

int rt_sm_blocks(const char *arch, int registers, int threads, int64_t smem) {
    int v = arch && strncmp(arch, "sm_", 3) == 0 ? atoi(arch + 3) : 0;
    const SmLimits *l = NULL;
    for (size_t i = 0; i < sizeof sms / sizeof sms[0]; i++)
        if (sms[i].sm == v)
            l = &sms[i];
    if (!l || threads < 1 || threads > 1024)
        return 0;
    int warps = (threads + 31) / 32;
    // registers: per warp, a thread's rounded up to 8, the warp's to 256; 64 Ki an SM
    int warp_regs = ((registers < 1 ? 1 : registers) + 7) / 8 * 8 * 32;
    warp_regs = (warp_regs + 255) / 256 * 256;
    int by_regs = 65536 / (warps * warp_regs), by_threads = l->threads / (warps * 32);
    int by_smem = (int)((int64_t)l->smem / (smem + 1024));
    int b = l->blocks;
    b = by_regs < b ? by_regs : b;
    b = by_threads < b ? by_threads : b;
    return by_smem < b ? by_smem : b;
}
