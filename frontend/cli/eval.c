// eval.c — ftc eval: its option table, the runtime's evaluation (rt_eval), and the answer:
// the mean loss over the eval file's trained targets and its perplexity, as a line or
// as JSON.
#include "cli.h"

#include <math.h>

typedef struct EvalArgs {
    RunOptions o;
    int64_t seed;
    bool json;
} EvalArgs;

#define ARG(f) offsetof(EvalArgs, f)

static const Option eval_opts[] = {
    OPT(OPT_TEXT, "--data", "FILE", ARG(o.eval_data), "token file to evaluate on (ftc data makes one)",
     .in_operands = true),
    OPT(OPT_TEXT, "--weights", "PATH", ARG(o.weights), "the weights, as ftc run --weights takes them: Hugging "
     "Face\nsafetensors (a file, or a directory, sharded too), a --save\ndirectory or its checkpoint-N; without "
     "it, seeded\ninitialisation"),
    OPT(OPT_TEXT, "--adapter", "DIR", ARG(o.adapter), "with LoRA: the adapters over the weights, from DIR's\n"
     "adapter_model.safetensors (what ftc run --save wrote, or PEFT);\nwithout it the adapters add nothing: the "
     "base model's loss"),
    OPT(OPT_COUNT, "--batches", "K", ARG(o.eval_batches), "evaluate the first K micro-batches (default: every "
     "window)", .lo = 1, .bad = "--batches must be at least 1"),
    OPT(OPT_COUNT, "--seed", "N", ARG(seed), "the initialisation of what --weights does not give (default 1234)"),
    OPT(OPT_FLAG, "--json", NULL, ARG(json), "the answer as one JSON line on stdout (the rest on stderr)"),
    OPT(OPT_CHOICE, "--device", "D", ARG(o.device), "cuda, cpu or emu, as ftc run's (default: cuda where the "
     "driver\nsees a GPU, else cpu)", .choices = cli_devices, .values = cli_device_kinds,
     .bad = "--device takes cuda, cpu or emu"),
};

// The answer: a line, or a JSON object for programs.
static void print_summary(const EvalSummary *r, bool json) {
    double tok_s = r->time_s > 0 ? (double)r->tokens / r->time_s : 0;
    if (r->pairs && json)   // a preference loss: a mean over pairs, no perplexity
        printf("{\"loss\": %.9g, \"pairs\": %lld, \"tokens\": %lld, \"batches\": %lld, \"windows\": %llu, "
               "\"time_s\": %.3f}\n", r->loss, (long long)r->targets, (long long)r->tokens, (long long)r->batches,
               (unsigned long long)r->windows, r->time_s);
    else if (r->pairs)
        printf("loss %.6f  over %lld pairs (%lld batches, %lld tokens) in %.2fs, %.0f tok/s\n", r->loss,
               (long long)r->targets, (long long)r->batches, (long long)r->tokens, r->time_s, tok_s);
    else if (json)
        printf("{\"loss\": %.9g, \"ppl\": %.9g, \"targets\": %lld, \"tokens\": %lld, \"batches\": %lld, "
               "\"windows\": %llu, \"time_s\": %.3f}\n", r->loss, exp(r->loss), (long long)r->targets,
               (long long)r->tokens, (long long)r->batches, (unsigned long long)r->windows, r->time_s);
    else
        printf("loss %.6f  ppl %.4g  over %lld trained targets (%lld batches, %lld tokens) in %.2fs, %.0f tok/s\n",
               r->loss, exp(r->loss), (long long)r->targets, (long long)r->batches, (long long)r->tokens,
               r->time_s, tok_s);
}

static int eval_main(Cmdline *cl, int first) {
    EvalArgs a = {.o = {.seed = 1234, .layout = LAYOUT_PLANNED}};
    Parsed p;
    int rc = parse_options(cl, first, &cmd_eval, &a, &p);
    if (rc)
        return rc < 0 ? 0 : rc;
    RunOptions *o = &a.o;
    o->plan_dir = p.positional;
    o->out = a.json ? stderr : stdout;
    if (parsed_at(&cmd_eval, &p, "--seed"))
        o->seed = (uint64_t)a.seed, o->seed_given = true;
    if (!o->plan_dir) {
        print_usage(stderr, &cmd_eval);
        return EXIT_USAGE;
    }
    if (!o->eval_data) {
        fprintf(stderr, "ftc eval: error: no --data FILE: the token file to evaluate on (ftc data makes one)\n");
        return EXIT_USAGE;
    }
    EvalSummary r;
    if ((rc = rt_eval(o, &r)) != 0)
        return rc;
    if (r.lead)
        print_summary(&r, a.json);
    return 0;
}

const Command cmd_eval = {
    "eval", "DIR --data FILE", "evaluate: the loss and perplexity of weights on a token file",
    "one plan directory", false, eval_opts, (int)(sizeof eval_opts / sizeof eval_opts[0]),
    "\nThe plan's eval phase (its forward and loss, nothing kept for a backward) over the\nfile's windows in "
    "order: the loss is the mean over every trained target, the one\nftc run --eval-data prints at the same "
    "weights.\n",
    eval_main};
