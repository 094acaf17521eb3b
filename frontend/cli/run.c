// run.c — ftc run: its option table, and the runtime's training entry (rt_train).
#include "cli.h"

typedef struct RunArgs {
    RunOptions o;
    int64_t keep, comm_timeout, seed;
} RunArgs;

#define ARG(f) offsetof(RunArgs, f)

static bool unplanned(void *args, const char *v, char *why, size_t cap) {
    (void)v, (void)why, (void)cap;
    ((RunArgs *)args)->o.layout = LAYOUT_UNPLANNED;
    return true;
}

const char *const cli_devices[] = {"cpu", "emu", "cuda", NULL};
const int cli_device_kinds[] = {DEVICE_CPU, DEVICE_EMU, DEVICE_CUDA};

static const Option run_opts[] = {
    OPT(OPT_TEXT, "--data", "FILE", ARG(o.data), "token file (ftc data makes one)", .in_operands = true),
    OPT(OPT_TEXT, "--weights", "PATH", ARG(o.weights), "Hugging Face safetensors: a file, or a directory (sharded "
     "too);\nwithout it, seeded initialisation"),
    OPT(OPT_COUNT, "--steps", "N", ARG(o.steps), "optimizer steps (default: the train section's steps, else 10)",
     .lo = 1, .bad = "--steps must be at least 1"),
    OPT(OPT_TEXT, "--save", "DIR", ARG(o.save), "write DIR/model.safetensors at the end (and every N steps with\n"
     "--save-every N, with the whole training state in\nDIR/checkpoint-STEP, the last step's too, the K latest "
     "kept:\n--keep K, default 2)"),
    OPT(OPT_COUNT, "--save-every", "N", ARG(o.save_every), "a checkpoint every N steps (with --save)"),
    OPT(OPT_SIZE, "--save-shard-size", "SIZE", ARG(o.shard_bytes), "saved weights over SIZE are written in shards "
     "of at most SIZE,\nmodel-00001-of-0000N.safetensors ..., with\nmodel.safetensors.index.json (default 5GB, as "
     "transformers'\nsave_pretrained)", .lo = 1),
    OPT(OPT_COUNT, "--keep", "K", ARG(keep), "the checkpoints kept (default 2)", .lo = 1, .hi = 1000000,
     .bad = "--keep takes 1 to 1000000 checkpoints"),
    OPT(OPT_TEXT, "--resume", "DIR", ARG(o.resume), "continue from the latest checkpoint in DIR (or DIR itself, a\n"
     "checkpoint): its weights, optimizer state, step and seed;\n--steps is the total, counted from the start"),
    OPT(OPT_COUNT, "--seed", "N", ARG(seed), "initialisation, data order and dropout (default 1234)"),
    OPT(OPT_FLAG, "--merge", NULL, ARG(o.merge), "with LoRA: also save the merged weights, in DIR/merged/ (not\n"
     "beside the adapter, which a loader would apply again);\n--save alone writes the adapters in PEFT's layout"),
    OPT(OPT_FLAG, "--skip-nonfinite", NULL, ARG(o.skip_nonfinite), "a step whose loss or gradients are not finite "
     "is skipped (its\nupdate not taken) and counted; without it the run stops there\n(refused for a plan that "
     "updates inside backward: ftc compile\n--update step)"),
    SECTION("Where and how it runs:"),
    OPT(OPT_CHOICE, "--device", "D", ARG(o.device), "cuda (the GPU: the plan's kernels, cuBLASLt), cpu (the "
     "reference\nkernels) or emu (the plan's kernels compiled for and run on the\nCPU); default: cuda where the "
     "driver sees a GPU, else cpu", .choices = cli_devices, .values = cli_device_kinds,
     .bad = "--device takes cuda, cpu or emu"),
    OPT(OPT_FLAG, "--poison", NULL, ARG(o.poison), "fill each buffer with NaN when its lifetime ends"),
    OPT(OPT_FLAG, "--sync-check", NULL, ARG(o.sync_check), "on a GPU, wait for each instruction and check it: a "
     "fault names\nthe instruction, its kernel and its .ft line (slow: for finding one)"),
    OPT(OPT_FLAG, "--gemm-first", NULL, ARG(o.gemm_first), "on a GPU, take cuBLASLt's first choice of algorithm "
     "for every\nproduct; by default its first 8 candidates are timed before step\none and the fastest kept, "
     "cached per GPU (~/.cache/ftc/gemm) so\nthat a rerun takes the same ones and computes the same bits"),
    OPT(OPT_FLAG, "--no-graphs", NULL, ARG(o.no_graphs), "on a GPU, issue every kernel of every phase one by one; "
     "by default\nthe forward, backward and eval phases are each captured once as\na CUDA graph and launched "
     "whole (not with --poison, --profile,\n--sync-check, host-stream work or several ranks)"),
    OPT(OPT_CALL, "--unplanned", NULL, 0, "every buffer its own allocation instead of the planned arena",
     .call = unplanned),
    OPT(OPT_COUNT, "--comm-timeout", "S", ARG(comm_timeout), "on a job of several ranks, how long a rank waits for "
     "the others\nin one exchange before it ends the job (default 600)", .lo = 1, .hi = 1000000,
     .bad = "--comm-timeout takes 1 to 1000000 seconds"),
    SECTION("Evaluation and what it reports:"),
    OPT(OPT_TEXT, "--eval-data", "FILE", ARG(o.eval_data), "a token file for evaluation: the plan's eval phase "
     "(forward only,\nnothing saved for a backward) prints its loss and perplexity\nafter the last step, and "
     "every N steps with --eval-every N"),
    OPT(OPT_COUNT, "--eval-every", "N", ARG(o.eval_every), "evaluate every N steps (with --eval-data)", .lo = 1,
     .bad = "--eval-every must be at least 1"),
    OPT(OPT_COUNT, "--eval-batches", "K", ARG(o.eval_batches), "evaluate its first K micro-batches (default: every "
     "window)", .lo = 1, .bad = "--eval-batches must be at least 1"),
    OPT(OPT_TEXT, "--report", "DIR", ARG(o.report), "write DIR/run.jsonl (a record a step: loss, eval loss, "
     "gradient\nnorm, lr, tokens/s, loss scale, skipped) and DIR/run.html (the\ncurves, planned and measured "
     "memory); default: the --save DIR"),
    OPT(OPT_COUNT, "--log-every", "N", ARG(o.log_every), "a progress line every N steps (default 1); on a terminal "
     "the\nline is rewritten in place, with the time left, and kept every N", .lo = 1,
     .bad = "--log-every must be at least 1"),
    OPT(OPT_TEXT, "--profile", "FILE", ARG(o.profile), "time the device's work instruction by instruction after "
     "the first\nstep (on a GPU by CUDA events) and write FILE: per kernel and GEMM\nshape its calls and time a "
     "step beside the plan's estimate"),
};

// A preset's card memory, for ftc run's memory line: nvidia-smi's total and the driver's.
static bool preset_card(const char *name, int64_t *nominal, int64_t *driver) {
    const GpuPreset *g = gpu_preset(name);
    if (!g)
        return false;
    *nominal = g->mem_bytes, *driver = g->driver_bytes;
    return true;
}

static int run_main(Cmdline *cl, int first) {
    RunArgs a = {.o = {.seed = 1234, .layout = LAYOUT_PLANNED, .out = stdout, .card = preset_card}};
    Parsed p;
    int rc = parse_options(cl, first, &cmd_run, &a, &p);
    if (rc)
        return rc < 0 ? 0 : rc;
    RunOptions *o = &a.o;
    o->plan_dir = p.positional;
    o->keep = (int)a.keep;
    o->comm_timeout_s = (double)a.comm_timeout;
    if (parsed_at(&cmd_run, &p, "--seed"))
        o->seed = (uint64_t)a.seed, o->seed_given = true;
    if (!o->plan_dir || !o->data) {
        print_usage(stderr, &cmd_run);
        return EXIT_USAGE;
    }
    if ((o->eval_every || o->eval_batches) && !o->eval_data) {
        fprintf(stderr, "ftc run: error: %s needs --eval-data FILE\n",
                o->eval_every ? "--eval-every" : "--eval-batches");
        return EXIT_USAGE;
    }
    return rt_train(o);
}

const Command cmd_run = {
    "run", "DIR --data FILE", "train: execute the plan in DIR (on the GPU where one is)", "one plan directory", false,
    run_opts, (int)(sizeof run_opts / sizeof run_opts[0]),
    "\nA plan compiled with --ranks N runs as N processes: mpirun -np N ftc run DIR ...\n(or srun -n N); each "
    "is one rank, rank 0 prints, saves and writes the report; each\nevaluates the same windows (no eval phase "
    "at --zero 3).\n",
    run_main};
