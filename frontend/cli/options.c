// options.c — a command's arguments read by its option table, and its help printed from
// the same table: a flag is known, typed, checked and documented in one row.
#include "cli.h"

#include <errno.h>

static const Option *find(const Command *c, const char *flag) {
    for (int k = 0; k < c->nopts; k++)
        if (c->opts[k].flag && strcmp(c->opts[k].flag, flag) == 0)
            return &c->opts[k];
    return NULL;
}

int parsed_at(const Command *c, const Parsed *p, const char *flag) {
    const Option *o = find(c, flag);
    return o ? p->at[o - c->opts] : 0;
}

// A whole number in [lo, hi] (hi 0: any from lo).
static bool read_count(const char *v, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v || x < lo || (hi && x > hi))
        return false;
    *out = x;
    return true;
}

// Option o's value v into args; false after reporting at argument i.
static bool read_value(Cmdline *cl, int i, const Option *o, const char *v, void *args) {
    void *dst = (char *)args + o->off;
    char why[256] = "";
    switch (o->kind) {
    case OPT_FLAG: *(bool *)dst = true; return true;
    case OPT_TEXT: *(const char **)dst = v; return true;
    case OPT_COUNT:
        if (read_count(v, o->lo, o->hi, dst))
            return true;
        snprintf(why, sizeof why, "'%s' needs a non-negative integer", o->flag);
        break;
    case OPT_SIZE:
        if (fe_size_parse(v, dst, why, sizeof why) == 0 && *(int64_t *)dst >= o->lo)
            return true;
        if (!why[0])
            snprintf(why, sizeof why, "%s", o->lo > 0 ? "a size must be positive" : "a size cannot be negative");
        arg_error(cl, i, "%s", why);
        return false;
    case OPT_CHOICE:
        for (int k = 0; o->choices[k]; k++)
            if (strcmp(v, o->choices[k]) == 0) {
                *(int *)dst = o->values ? o->values[k] : k;
                return true;
            }
        break;
    case OPT_CALL:
        if (o->call(args, v, why, sizeof why))
            return true;
        break;
    case OPT_SECTION: break;
    }
    arg_error(cl, i, "%s", o->bad ? o->bad : why);
    return false;
}

int parse_options(Cmdline *cl, int first, const Command *c, void *args, Parsed *p) {
    *p = (Parsed){0};
    if (c->nopts > OPT_MAX) {
        fprintf(stderr, "ftc %s: internal error: %d options, more than %d\n", c->name, c->nopts, OPT_MAX);
        return EXIT_USAGE;
    }
    for (int i = first; i < cl->argc; i++) {
        const char *s = cl->argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            print_usage(stdout, c);
            return -1;
        }
        const Option *o = s[0] == '-' && s[1] ? find(c, s) : NULL;
        if (!o && s[0] == '-' && s[1]) {
            arg_error(cl, i, "unknown option '%s' (see ftc help %s)", s, c->name);
            return EXIT_USAGE;
        }
        if (!o) {
            if (p->positional) {
                arg_error(cl, i, "%s at a time (already have '%s')", c->positional, p->positional);
                return EXIT_USAGE;
            }
            p->positional = s, p->positional_at = i;
            continue;
        }
        bool takes = o->arg && o->kind != OPT_FLAG;
        if (takes && i + 1 >= cl->argc) {
            arg_error(cl, i, "%s needs a value", s);
            return EXIT_USAGE;
        }
        i += takes;
        if (!read_value(cl, i, o, takes ? cl->argv[i] : NULL, args))
            return EXIT_USAGE;
        p->at[o - c->opts] = i;
    }
    if (c->needs_positional && !p->positional) {
        print_usage(stderr, c);
        return EXIT_USAGE;
    }
    return 0;
}

// "  --budget SIZE     " and the help's lines, each continued one indented to match.
static void print_option(FILE *f, const Option *o) {
    if (o->kind == OPT_SECTION) {
        fprintf(f, "%s\n", o->help);
        return;
    }
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", o->flag, o->arg ? " " : "", o->arg ? o->arg : "");
    fprintf(f, strlen(left) <= 17 ? "  %-17s " : "  %s  ", left);
    for (const char *h = o->help; *h;) {
        const char *nl = strchr(h, '\n');
        int n = nl ? (int)(nl - h) : (int)strlen(h);
        if (h != o->help)
            fprintf(f, "%20s", "");
        fprintf(f, "%.*s", n, h);
        if (h == o->help && o->more)
            o->more(f);
        fputc('\n', f);
        h += n + (nl != NULL);
    }
}

// "usage: ftc compile FILE.ft [--budget SIZE] ...", wrapped under the command's name.
static void print_synopsis(FILE *f, const Command *c) {
    int indent = fprintf(f, "usage: ftc %s ", c->name), col = indent;
    col += fprintf(f, "%s", c->operands);
    for (int k = 0; k < c->nopts; k++) {
        const Option *o = &c->opts[k];
        if (o->kind == OPT_SECTION || o->in_operands)
            continue;
        char item[64];
        int n = snprintf(item, sizeof item, "[%s%s%s]", o->flag, o->arg ? " " : "", o->arg ? o->arg : "");
        if (col + 1 + n > 100)
            col = fprintf(f, "\n%*s", indent, "") - 1;
        else
            col += fprintf(f, " ");
        col += fprintf(f, "%s", item);
    }
    fputs("\n\n", f);
}

void print_usage(FILE *f, const Command *c) {
    print_synopsis(f, c);
    for (int k = 0; k < c->nopts; k++)
        print_option(f, &c->opts[k]);
    if (c->epilogue)
        fprintf(f, "%s", c->epilogue);
}
