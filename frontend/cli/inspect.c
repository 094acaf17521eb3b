// inspect.c — ftc inspect: its option table, and a plan's memory schedule (codegen's
// memory views over the plan the runtime reads) or its kernels' resources.
#include "cli.h"

#include <errno.h>

typedef struct InspectArgs {
    const char *at, *buffer;
    int64_t top;
    bool json, kernels;
} InspectArgs;

#define ARG(f) offsetof(InspectArgs, f)

static const Option inspect_opts[] = {
    SECTION("  (no option)       the summary: budget, peak and where, breakdown, largest buffers,\n"
     "                    timeline, and the host arena's own (what DIR/memory.txt holds)"),
    OPT(OPT_TEXT, "--at", "peak|N", ARG(at), "what is live at the device's peak or at instruction N, on the\ndevice "
     "and on the host"),
    OPT(OPT_TEXT, "--buffer", "NAME", ARG(buffer), "one buffer: place, lifetime, the instructions touching it"),
    OPT(OPT_COUNT, "--top", "K", ARG(top), "how many buffers to list (default 20)"),
    OPT(OPT_FLAG, "--json", NULL, ARG(json), "everything, for programs (what DIR/memory.json holds)"),
    OPT(OPT_FLAG, "--kernels", NULL, ARG(kernels), "the generated kernels: registers, shared memory, stack and "
     "spills\nof each, as NVRTC compiled DIR/kernels.cu (DIR/kernels.txt)"),
};

// The resource report ftc compile wrote beside kernels.cu, as it is.
static int print_kernels(const char *dir) {
    char path[4096], buf[4096];
    snprintf(path, sizeof path, "%s/kernels.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "ftc inspect: error: %s: %s (a plan from before kernels.cu?)\n", path, strerror(errno));
        return EXIT_NOFIT;
    }
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;)
        fwrite(buf, 1, n, stdout);
    fclose(f);
    return 0;
}

// The figures the memory views print beside the bytes: the plan's preset's rates.
static MemMeta mem_meta(const Plan *p) {
    const GpuPreset *gpu = p->gpu ? gpu_preset(p->gpu) : NULL;
    const LinkPreset *link = p->link ? link_preset(p->link) : NULL;
    return (MemMeta){p->budget_bytes, p->reserve_bytes, gpu ? gpu->bf16_tflops * 1e12 : 312e12,
                     gpu ? gpu->hbm_gbps * 1e9 : 1555e9,
                     p->host_link > 0 ? p->host_link : gpu ? gpu->link_gbps * 1e9 : 25e9,
                     link ? link->gbps * 1e9 : 0, link ? link->latency_us : 0};
}

// The view asked for of the plan in `dir`.
static int print_view(const InspectArgs *a, const char *dir) {
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/plan", dir);
    Plan *p;
    if (plan_load(&p, path, err, sizeof err) != 0) {
        fprintf(stderr, "ftc inspect: error: %s\n", err);
        return EXIT_NOFIT;
    }
    MemMeta mm = mem_meta(p);
    MemView v;
    mv_init(&v, p);
    int rc = 0;
    if (a->at) {
        char *end;
        long n = strcmp(a->at, "peak") == 0 ? v.peak_at : strtol(a->at, &end, 10);
        if (strcmp(a->at, "peak") != 0 && (*end || n < 0 || n >= v.n)) {
            fprintf(stderr, "ftc inspect: error: --at takes 'peak' or an instruction 0..%d\n", v.n - 1);
            rc = EXIT_USAGE;
        } else {
            mv_print_at(stdout, &v, (int)n, (int)a->top);
        }
    } else if (a->buffer) {
        rc = mv_print_buffer(stdout, &v, a->buffer) == 0 ? 0 : EXIT_NOFIT;
    } else if (a->json) {
        mv_write_json(stdout, &v, &mm);
    } else {
        mv_write_txt(stdout, &v, &mm);
    }
    mv_free(&v);
    plan_free(p);
    return rc;
}

static int inspect_main(Cmdline *cl, int first) {
    InspectArgs a = {.top = 20};
    Parsed p;
    int rc = parse_options(cl, first, &cmd_inspect, &a, &p);
    if (rc)
        return rc < 0 ? 0 : rc;
    return a.kernels ? print_kernels(p.positional) : print_view(&a, p.positional);
}

const Command cmd_inspect = {
    "inspect", "DIR", "the memory schedule of a plan", "one plan directory", true,
    inspect_opts, (int)(sizeof inspect_opts / sizeof inspect_opts[0]), NULL, inspect_main};
