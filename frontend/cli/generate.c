// generate.c — ftc generate: its option table, what a model directory gives where the
// flags do not (gen_model.c: the operand and the plan made for it), the prompt checked
// against the plan's decode phase (the tokens its KV cache holds), the runtime's generation
// (rt_generate), and the reply: its text (or ids) on stdout, what it took on stderr.
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct GenArgs {
    RunOptions o;
    GenPrompt g;
    char tokenizer[4096];
    int64_t max_new, seed, max_len;
    double temperature, top_p;
    bool ids;
    const char *longer;     // how a longer KV cache is had
} GenArgs;

#define ARG(f) offsetof(GenArgs, f)

static bool tokenizer(void *args, const char *v, char *why, size_t cap) {
    GenArgs *a = args;
    (void)why, (void)cap;
    a->g.tokenizer = in_model_dir(v, "tokenizer.json", a->tokenizer, sizeof a->tokenizer);
    return true;
}

// A number >= 0 (--temperature) or in (0, 1] (--top-p).
static bool number(const char *v, double *out, bool fraction, char *why, size_t cap) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= 0) || x > (fraction ? 1 : 100) || (fraction && x == 0))
        return snprintf(why, cap, fraction ? "--top-p needs a number in (0, 1]" : "--temperature needs a number "
                        "from 0 (greedy) to 100"), false;
    *out = x;
    return true;
}
static bool temperature(void *a, const char *v, char *why, size_t cap) {
    return number(v, &((GenArgs *)a)->temperature, false, why, cap);
}
static bool top_p(void *a, const char *v, char *why, size_t cap) {
    return number(v, &((GenArgs *)a)->top_p, true, why, cap);
}

static const Option generate_opts[] = {
    OPT(OPT_TEXT, "--prompt", "TEXT", ARG(g.prompt), "the text the reply continues", .in_operands = true),
    OPT(OPT_TEXT, "--messages", "FILE", ARG(g.messages), "a conversation instead: a JSON list of {\"role\", "
     "\"content\"}\n(or an object with \"messages\"), rendered by the model's chat\ntemplate with the generation "
     "prompt", .in_operands = true),
    OPT(OPT_CALL, "--tokenizer", "F", 0, "the model's tokenizer.json, or its directory (tokenizer_config.json\n"
     "and chat_template.jinja read beside it)", .call = tokenizer),
    OPT(OPT_FLAG, "--bytes", NULL, ARG(g.bytes), "no tokenizer: each byte a token (a vocab-256 model, as ftc data "
     "--bytes)"),
    OPT(OPT_TEXT, "--weights", "PATH", ARG(o.weights), "the weights, as ftc run --weights takes them (a model "
     "directory,\nsafetensors, a --save directory or its checkpoint-N)"),
    OPT(OPT_TEXT, "--adapter", "DIR", ARG(o.adapter), "with LoRA: the adapters over the weights (ftc run --save's "
     "or PEFT's)"),
    OPT(OPT_TEXT, "--template", "T", ARG(g.template_text), "the chat template for --messages (default: the model's; "
     "a .jinja\nfile or a template's text)"),
    OPT(OPT_TEXT, "--eos", "TOKEN", ARG(g.eos), "the token that ends the reply (default: the model's\n"
     "generation_config.json, config.json or tokenizer_config.json)"),
    OPT(OPT_COUNT, "--max-new-tokens", "N", ARG(max_new), "at most N tokens of reply (default: 256, or what the "
     "plan's\nKV cache has room for)", .lo = 1, .hi = 1 << 24,
     .bad = "--max-new-tokens needs a token count from 1 to 16777216"),
    OPT(OPT_COUNT, "--max-len", "N", ARG(max_len), "a model directory or .ft: the KV cache holds N tokens, the "
     "prompt\nand the reply (default: a model directory's prompt and\n--max-new-tokens, at most its "
     "max_position_embeddings; a .ft's\ntrain section's seq, as ftc compile)", .lo = 1, .hi = 1 << 24,
     .bad = "--max-len needs a token count from 1 to 16777216"),
    OPT(OPT_CALL, "--temperature", "T", 0, "sample at temperature T (default 0: greedy, the likeliest token)",
     .call = temperature),
    OPT(OPT_CALL, "--top-p", "P", 0, "with --temperature: from the likeliest tokens whose probability\nreaches P "
     "(default 1)", .call = top_p),
    OPT(OPT_COUNT, "--seed", "N", ARG(seed), "the sampling's random stream, and the initialisation of what\n"
     "--weights does not give (default 1234)"),
    OPT(OPT_FLAG, "--ids", NULL, ARG(ids), "print the reply's token ids, not its text"),
    OPT(OPT_CHOICE, "--device", "D", ARG(o.device), "cuda, cpu or emu, as ftc run's (default: cuda where the "
     "driver\nsees a GPU, else cpu)", .choices = cli_devices, .values = cli_device_kinds,
     .bad = "--device takes cuda, cpu or emu"),
};

// The prompt, given once: checked before the operand is looked at (a usage error is the
// command line's alone); EXIT_USAGE after saying what is wrong.
static int check_prompt(const GenArgs *a) {
    const GenPrompt *g = &a->g;
    if (!g->prompt == !g->messages) {
        fprintf(stderr, "ftc generate: error: %s\n", g->prompt ? "--prompt and --messages: give one of them"
                : "no prompt: give --prompt TEXT or --messages FILE");
        return EXIT_USAGE;
    }
    return 0;
}

// The arguments against each other, once the operand gave its defaults; EXIT_USAGE after
// saying what is missing.
static int check_args(Cmdline *cl, const Parsed *p, GenArgs *a) {
    GenPrompt *g = &a->g;
    if (!g->tokenizer && !g->bytes) {
        fprintf(stderr, "ftc generate: error: no --tokenizer: the model's tokenizer.json (or its directory), or "
                "--bytes for a model whose tokens are bytes\n");
        return EXIT_USAGE;
    }
    if (g->tokenizer && g->bytes) {
        arg_error(cl, parsed_at(&cmd_generate, p, "--bytes"), "--bytes and --tokenizer: give one of them");
        return EXIT_USAGE;
    }
    if (g->bytes && g->messages) {
        arg_error(cl, parsed_at(&cmd_generate, p, "--messages"), "--messages needs --tokenizer (a chat template "
                  "renders into the tokenizer's text)");
        return EXIT_USAGE;
    }
    if (a->top_p < 1 && a->temperature == 0) {
        arg_error(cl, parsed_at(&cmd_generate, p, "--top-p"), "--top-p samples: give --temperature too");
        return EXIT_USAGE;
    }
    return 0;
}

// The prompt and the reply's length against the plan: its vocabulary and the tokens its
// KV cache holds. EXIT_NOFIT after saying why.
static int check_plan(Cmdline *cl, const Parsed *p, GenArgs *a) {
    char err[1024], path[4400];
    Plan *plan;
    snprintf(path, sizeof path, "%s/plan", a->o.plan_dir);
    if (plan_load(&plan, path, err, sizeof err) != 0)
        return fprintf(stderr, "ftc generate: error: %s\n", err), EXIT_NOFIT;
    int64_t L = rt_decode_len(plan), n = (int64_t)a->g.ids.n, room = L - n, vocab = plan->vocab;
    plan_free(plan);
    for (size_t i = 0; i < a->g.ids.n; i++)
        if (a->g.ids.id[i] >= vocab)
            return fprintf(stderr, "ftc generate: error: the prompt's token %zu is id %d, outside the plan's "
                           "vocabulary of %lld: is the tokenizer this model's?\n", i, (int)a->g.ids.id[i],
                           (long long)vocab), EXIT_NOFIT;
    if (L == 0)
        return 0;   // (the runtime says why there is no decode phase)
    if (n == 0 || room < 1)
        return fprintf(stderr, "ftc generate: error: the prompt is %lld tokens; the plan's KV cache holds %lld, "
                       "leaving no room for a reply (%s)\n", (long long)n,
                       (long long)L, a->longer), EXIT_NOFIT;
    if (a->max_new > room) {
        arg_error(cl, parsed_at(&cmd_generate, p, "--max-new-tokens"), "--max-new-tokens %lld: the prompt's %lld "
                  "tokens and %lld more pass the %lld the plan's KV cache holds (at most %lld here; %s)",
                  (long long)a->max_new, (long long)n, (long long)a->max_new, (long long)L, (long long)room,
                  a->longer);
        return EXIT_NOFIT;
    }
    if (a->max_new == 0)
        a->max_new = room < 256 ? room : 256;
    return 0;
}

// The reply on stdout; how it ended and its pace on stderr.
static void print_reply(const GenArgs *a, const GenResult *r) {
    if (a->ids)
        for (int64_t i = 0; i < r->n; i++)
            printf("%s%d", i ? " " : "", (int)r->ids[i]);
    else
        gen_prompt_text(&a->g, r->ids, r->n, stdout);
    putchar('\n');
    char why[96];
    if (r->eos >= 0)
        snprintf(why, sizeof why, "the end-of-sequence id %d", (int)r->eos);
    else
        snprintf(why, sizeof why, "--max-new-tokens %lld", (long long)a->max_new);
    double t = r->decode_s > 0 ? r->decode_s : 1e-9;
    fprintf(stderr, "%zu prompt tokens in %.2fs; %lld new, stopped by %s, in %.2fs (%.1f tokens/s)\n", a->g.ids.n,
            r->prefill_s, (long long)r->n, why, r->decode_s, (double)r->n / t);
}

// What a model or adapter directory gives where the arguments do not: its weights, its
// adapter, its tokenizer. EXIT_USAGE or EXIT_NOFIT after saying why.
static int from_model(Cmdline *cl, const Parsed *p, GenArgs *a, GenModel *gm) {
    if (gm->kind == GEN_ADAPTER_DIR && a->o.adapter) {
        arg_error(cl, parsed_at(&cmd_generate, p, "--adapter"), "--adapter and the adapter directory %s: give one "
                  "of them", p->positional);
        return EXIT_USAGE;
    }
    if (gm->kind == GEN_ADAPTER_DIR)
        a->o.adapter = gm->adapter;
    if (!a->o.weights && !gen_model_has_weights(gm->model_dir)) {
        arg_error(cl, p->positional_at, "%s has no weights: no model.safetensors (nor model.safetensors.index.json, "
                  "a sharded set's) in it; give them with --weights PATH", gm->model_dir);
        return EXIT_NOFIT;
    }
    if (!a->o.weights)
        a->o.weights = gm->model_dir;
    if (a->g.tokenizer || a->g.bytes)
        return 0;
    char path[4200];   // (an adapter's save carries the tokenizer too)
    const char *dirs[2] = {gm->kind == GEN_ADAPTER_DIR ? gm->adapter : gm->model_dir, gm->model_dir};
    for (int d = 0; d < 2 && !a->g.tokenizer; d++) {
        snprintf(path, sizeof path, "%s/tokenizer.json", dirs[d]);
        if (access(path, R_OK) == 0)
            a->g.tokenizer = in_model_dir(dirs[d], "tokenizer.json", a->tokenizer, sizeof a->tokenizer);
    }
    return 0;
}

// The KV cache of the plan made for a model directory: --max-len, else the prompt and
// --max-new-tokens (256 unless given), each within max_position_embeddings; a .ft's:
// --max-len, else the train section's seq (-1). EXIT_NOFIT after saying why.
static int cache_len(Cmdline *cl, const Parsed *p, GenArgs *a, const GenModel *gm, int64_t *len) {
    *len = a->max_len ? a->max_len : -1;
    a->longer = "--max-len N plans a longer one";
    if (gm->kind == GEN_FT)
        return 0;
    int64_t limit = gen_model_max_pos(gm), n = (int64_t)a->g.ids.n;
    if (limit > 0 && a->max_len > limit) {
        arg_error(cl, parsed_at(&cmd_generate, p, "--max-len"), "--max-len %lld passes the model's "
                  "max_position_embeddings, %lld", (long long)a->max_len, (long long)limit);
        return EXIT_NOFIT;
    }
    if (a->max_len)
        return 0;
    if (limit > 0 && n >= limit)
        return fprintf(stderr, "ftc generate: error: the prompt is %lld tokens; the model's max_position_embeddings "
                       "is %lld, leaving no room for a reply\n", (long long)n, (long long)limit), EXIT_NOFIT;
    if (limit > 0 && a->max_new > limit - n) {
        arg_error(cl, parsed_at(&cmd_generate, p, "--max-new-tokens"), "--max-new-tokens %lld: the prompt's %lld "
                  "tokens and %lld more pass the model's max_position_embeddings, %lld (at most %lld here)",
                  (long long)a->max_new, (long long)n, (long long)a->max_new, (long long)limit,
                  (long long)(limit - n));
        return EXIT_NOFIT;
    }
    *len = n + (a->max_new ? a->max_new : 256);
    if (limit > 0 && *len > limit)
        *len = limit;
    return 0;
}

static int generate_main(Cmdline *cl, int first) {
    GenArgs a = {.o = {.seed = 1234, .layout = LAYOUT_PLANNED, .out = stderr}, .top_p = 1,
                 .longer = "ftc compile --max-len N plans a longer one"};
    Parsed p;
    int rc = parse_options(cl, first, &cmd_generate, &a, &p);
    if (rc)
        return rc < 0 ? 0 : rc;
    a.o.plan_dir = p.positional;
    if (parsed_at(&cmd_generate, &p, "--seed"))
        a.o.seed = (uint64_t)a.seed, a.o.seed_given = true;
    GenModel gm;
    if ((rc = check_prompt(&a)) != 0 || (rc = gen_model_open(cl, p.positional_at, p.positional, &gm)) != 0)
        return rc;
    if (gm.kind == GEN_PLAN && a.max_len) {
        arg_error(cl, parsed_at(&cmd_generate, &p, "--max-len"), "--max-len: a plan's KV cache is what ftc compile "
                  "--max-len made it");
        return EXIT_USAGE;
    }
    if ((gm.kind == GEN_MODEL_DIR || gm.kind == GEN_ADAPTER_DIR) && (rc = from_model(cl, &p, &a, &gm)) != 0)
        return rc;
    if ((rc = check_args(cl, &p, &a)) != 0)
        return rc;
    char wdir[4200] = "", err[1024];
    if (a.o.weights)   // (a model directory's generation_config.json)
        snprintf(wdir, sizeof wdir, "%s/", a.o.weights);
    a.g.weights_dir = wdir;
    GenResult r = {0};
    int64_t len = 0;
    if (gen_prompt_open(&a.g, err, sizeof err) != 0) {
        fprintf(stderr, "ftc generate: error: %s\n", err);
        rc = EXIT_NOFIT;
    } else if (gm.kind != GEN_PLAN && ((rc = cache_len(cl, &p, &a, &gm, &len)) != 0 ||
                                       (rc = gen_model_plan(&gm, p.positional, a.o.adapter, len)) != 0)) {
        // (said)
    } else {
        if (gm.kind != GEN_PLAN)
            a.o.plan_dir = gm.plan;
        if ((rc = check_plan(cl, &p, &a)) == 0) {
            GenRequest q = {.prompt = a.g.ids.id, .nprompt = (int64_t)a.g.ids.n, .max_new = a.max_new,
                            .eos = a.g.eos_ids, .neos = a.g.neos,
                            .sampling = {a.temperature, a.top_p, a.o.seed}};
            if ((rc = rt_generate(&a.o, &q, &r)) == 0)
                print_reply(&a, &r);
        }
    }
    gen_model_close(&gm);
    free(r.ids);
    gen_prompt_free(&a.g);
    return rc;
}

const Command cmd_generate = {
    "generate", "PLAN_DIR|MODEL_DIR|ADAPTER_DIR|FILE.ft (--prompt TEXT | --messages FILE)",
    "a reply from a model: greedy or sampled",
    "one plan directory, model directory, adapter directory or .ft file", true, generate_opts,
    (int)(sizeof generate_opts / sizeof generate_opts[0]),
    "\nThe model's decode phase run a token at a time: the prompt, then each token of\nthe reply, until an "
    "end-of-sequence token or --max-new-tokens. The reply goes\nto stdout, the rest to stderr. The model is one of:\n"
    "  PLAN_DIR     a plan (ftc compile plans its decode phase, a KV cache of\n"
    "               --max-len tokens)\n"
    "  MODEL_DIR    a Hugging Face model directory (config.json, model.safetensors\n"
    "               or its shards, tokenizer.json; ftc run --save writes one):\n"
    "               imported as ftc import does and planned into a temporary\n"
    "               directory; --weights, --tokenizer, the chat template and the\n"
    "               end ids default to the directory's\n"
    "  ADAPTER_DIR  a LoRA adapter (adapter_config.json: PEFT's or ftc run --save's)\n"
    "               over the model directory its base_model_name_or_path names;\n"
    "               MODEL_DIR --adapter DIR alike\n"
    "  FILE.ft      planned as ftc compile plans it, into a temporary directory\n",
    generate_main};
