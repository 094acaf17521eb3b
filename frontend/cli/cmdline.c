// cmdline.c — the command line as a source (argument errors point at the argument
// with a caret, like .ft errors), the number formats the commands print, and a model
// directory read where one of its files is meant.
#include "cli.h"

#include <stdarg.h>
#include <sys/stat.h>

void cmdline_init(Cmdline *c, int argc, char **argv) {
    size_t len = 4;
    for (int i = 1; i < argc; i++)
        len += strlen(argv[i]) + 1;
    char *text = xmalloc(len + 1), *p = text;
    c->col = xmalloc(sizeof(int) * (size_t)(argc + 1));
    for (int i = 0; i < argc; i++) {
        // argv[0] shows as "ftc" so messages read the same however ftc was started
        const char *arg = i ? argv[i] : "ftc";
        c->col[i] = (int)(p - text) + 1;
        p += sprintf(p, "%s%s", i ? " " : "", arg);
        if (i)
            c->col[i]++;
    }
    *p = '\0';
    fe_source_from_string(&c->src, "<command line>", text);
    free(text);
    c->argc = argc;
    c->argv = argv;
}

void cmdline_free(Cmdline *c) {
    fe_source_free(&c->src);
    free(c->col);
}

void arg_error(Cmdline *c, int i, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    SrcLoc loc = {c->src.path, 1, c->col[i], (int)strlen(c->argv[i])};
    fe_error(&c->src, loc, "%s", msg);
}

const char *commas(char *buf, int64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)(v < 0 ? -v : v)), o = 0;
    if (v < 0)
        buf[o++] = '-';
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = '\0';
    return buf;
}

const char *in_model_dir(const char *path, const char *name, char *buf, size_t cap) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return path;
    size_t n = strlen(path);
    snprintf(buf, cap, "%s%s%s", path, n && path[n - 1] == '/' ? "" : "/", name);
    return buf;
}
