// main.c — the ftc command line: the table of commands, help, import, and the exit
// status: 0 success, 1 the request cannot be met (bad input, does not fit), 2 usage
// error. Nothing reaches stdout unless the command succeeds. Each command is a file of
// this room (compile.c, run.c, eval.c, generate.c, data.c, inspect.c) with its option table.
#include "cli.h"

#include <errno.h>
#include <malloc.h>

static int import_main(Cmdline *cl, int first);
static int help_main(Cmdline *cl, int first);

static const Command cmd_import = {
    "import", "CONFIG.json|MODEL_DIR", "write a .ft for a Hugging Face config on stdout (> MODEL.ft)",
    "one config.json or model directory", true, NULL, 0, NULL, import_main};
static const Command cmd_help = {
    "help", "[COMMAND|ft]", "this text, one command's, or the .ft train section's", "one command", false,
    NULL, 0, NULL, help_main};

static const Command *const commands[] = {&cmd_compile, &cmd_run, &cmd_eval, &cmd_generate, &cmd_inspect, &cmd_data,
                                          &cmd_import, &cmd_help};
enum { NCOMMANDS = sizeof commands / sizeof commands[0] };

static const Command *find_command(const char *name) {
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

static void usage(FILE *f) {
    fputs("usage: ftc <command> [options]\n\ncommands:\n", f);
    for (int i = 0; i < NCOMMANDS; i++) {
        char left[128];
        snprintf(left, sizeof left, "%s %s", commands[i]->name, commands[i]->operands);
        fprintf(f, strlen(left) < 30 ? "  %-30s%s\n" : "  %s\n  %30s%s\n", left,
                strlen(left) < 30 ? commands[i]->summary : "", commands[i]->summary);
    }
    fputs("\nftc help COMMAND (or ftc COMMAND --help) lists a command's options; ftc help ft the .ft\n"
          "train section: precision, optimizer, schedule, LoRA and quantisation.\n"
          "sizes: 40G and 40GiB are 40*2^30 bytes, 40GB is 40*10^9 (K, M, G, T alike)\n",
          f);
}

static int help_main(Cmdline *cl, int first) {
    if (first >= cl->argc) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cl->argv[first], "ft") == 0) {   // the train section (frontend/README.md's)
        fputs(cli_help_ft, stdout);
        return 0;
    }
    const Command *c = find_command(cl->argv[first]);
    if (c == &cmd_help) {
        usage(stdout);
        return 0;
    }
    if (!c) {
        arg_error(cl, first, "no such command or topic '%s' (compile, run, eval, generate, inspect, data, import, help; ft)",
                  cl->argv[first]);
        return EXIT_USAGE;
    }
    print_usage(stdout, c);
    return 0;
}

static int import_main(Cmdline *cl, int first) {
    Parsed p;
    int rc = parse_options(cl, first, &cmd_import, NULL, &p);
    if (rc)
        return rc < 0 ? 0 : rc;
    char cfg[4096];   // a model directory: its config.json
    const char *path = in_model_dir(p.positional, "config.json", cfg, sizeof cfg);
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        arg_error(cl, p.positional_at, "cannot open '%s': %s", path, strerror(errno));
        return EXIT_NOFIT;
    }
    fclose(probe);
    return fe_import(path, stdout);
}

int main(int argc, char **argv) {
    // The planner builds and frees a graph per candidate, tens of megabytes each: kept
    // in the heap rather than mapped and unmapped each time, their pages fault in once.
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    Cmdline cl;
    cmdline_init(&cl, argc, argv);
    int rc;
    const char *name = argc > 1 ? argv[1] : NULL;
    const Command *c = name ? find_command(name) : NULL;
    if (!name || strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        usage(name ? stdout : stderr);
        rc = name ? 0 : EXIT_USAGE;
    } else if (!c) {
        arg_error(&cl, 1, "unknown command '%s' (compile, run, eval, generate, inspect, data, import, help)", name);
        rc = EXIT_USAGE;
    } else {
        rc = c->run(&cl, 2);
    }
    cmdline_free(&cl);
    // What a command wrote to standard output must have arrived: a full disk or a closed
    // pipe under `ftc import cfg.json > model.ft` is an error here, not a syntax error later.
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "ftc: error: cannot write standard output: %s\n",
                errno ? strerror(errno) : "write error");
        return rc == 0 ? EXIT_FAILURE : rc;
    }
    return rc;
}
