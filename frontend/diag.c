// diag.c — user-facing errors with the source line and a caret under the culprit.
#include "frontend.h"

#include <stdarg.h>

int fe_source_read(FtSource *src, const char *path) {
    memset(src, 0, sizeof *src);
    src->path = path;
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 4096, len = 0;
    char *buf = xmalloc(cap);
    for (size_t n; buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0;) {
        len += n;
        if (cap - len < 2) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (!buf || err) {
        free(buf);
        errno = buf ? err : ENOMEM;
        return -1;
    }
    buf[len] = '\0';
    // A UTF-8 byte-order mark (some editors write one) is not part of the source: dropped,
    // so that the first line's columns are the editor's.
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) {
        memmove(buf, buf + 3, len - 2);
        len -= 3;
    }
    src->text = buf;
    src->len = len;
    return 0;
}

void fe_source_from_string(FtSource *src, const char *path, const char *text) {
    memset(src, 0, sizeof *src);
    src->path = path;
    src->len = strlen(text);
    src->text = malloc(src->len + 1);
    if (!src->text) {
        fprintf(stderr, "ftc: out of memory\n");
        abort();
    }
    memcpy(src->text, text, src->len + 1);
}

void fe_source_free(FtSource *src) {
    free(src->text);
    src->text = NULL;
}

// Prints line `line` of `src` and a caret with `len - 1` tildes under column `col`.
static void show_line(const FtSource *src, int line, int col, int len) {
    if (!src->text || line < 1)
        return;
    const char *p = src->text, *end = src->text + src->len;
    for (int l = 1; l < line && p < end; p++)
        if (*p == '\n')
            l++;
    if (p >= end && line > 1)
        return;
    const char *e = p;
    while (e < end && *e != '\n')
        e++;
    fprintf(stderr, "%5d | ", line);
    for (const char *q = p; q < e; q++)   // keep the caret aligned: show bytes as typed, tabs kept
        fputc((unsigned char)*q < 0x20 && *q != '\t' ? '?' : *q, stderr);
    fputc('\n', stderr);
    fprintf(stderr, "      | ");
    for (int c = 1; c < col && p + c - 1 < e; c++)
        fputc(p[c - 1] == '\t' ? '\t' : ' ', stderr);
    fputc('^', stderr);
    for (int i = 1; i < len && p + col - 1 + i < e; i++)
        fputc('~', stderr);
    fputc('\n', stderr);
}

static void report(const FtSource *src, SrcLoc loc, const char *kind, const char *fmt,
                   va_list ap) {
    const char *file = loc.file ? loc.file : src->path;
    if (loc.line > 0)
        fprintf(stderr, "%s:%d:%d: %s: ", file, loc.line, loc.col, kind);
    else
        fprintf(stderr, "%s: %s: ", file, kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    show_line(src, loc.line, loc.col, loc.len);
}

void fe_error(FtSource *src, SrcLoc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(src, loc, "error", fmt, ap);
    va_end(ap);
    src->errors++;
}

void fe_note(FtSource *src, SrcLoc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(src, loc, "note", fmt, ap);
    va_end(ap);
}
