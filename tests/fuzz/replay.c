// replay.c — runs the fuzz harness (fuzz_ft.c) over files without libFuzzer, so CI
// replays the seed corpus and the crash reproducers with any compiler.
//
// usage: replay [-v] PATH...
//   Each PATH is a file, or a directory whose files (recursively, in name order,
//   dot-files skipped) are run. -v prints each file before running it.
//
// Prints "N passed, M failed" on stdout; M counts inputs that could not be read.
// Exit status: 0 when every input ran, 1 when some could not be read, 2 on a usage
// error. A bug in the frontend crashes the process (abort(), a signal, or a
// sanitizer report), and the name of the input that was running is printed first.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// Called by ASan/UBSan just before they end the process, when linked with them.
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static const char *current;     // the input being run
static int out_fd = -1;         // a copy of fd 2, for messages while dying
static int passed, failed, verbose;

static void say_current(void) {
    if (!current || out_fd < 0)
        return;
    static const char pre[] = "replay: crashed while running ";
    ssize_t n = write(out_fd, pre, sizeof pre - 1);
    n = write(out_fd, current, strlen(current));
    n = write(out_fd, "\n", 1);
    (void)n;
}

static void on_signal(int sig) {
    say_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("replay: cannot open %s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    for (size_t n; buf && (n = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += n;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb)
                free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        printf("replay: cannot read %s\n", path);
        free(buf);
        failed++;
        return;
    }
    if (verbose) {
        printf("replay: %s\n", path);
        fflush(stdout);
    }
    current = path;
    LLVMFuzzerTestOneInput(buf, len);
    current = NULL;
    free(buf);
    passed++;
}

static int skip_dot(const struct dirent *d) { return d->d_name[0] != '.'; }

static void run_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        printf("replay: cannot open %s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        run_file(path);
        return;
    }
    struct dirent **names;
    int n = scandir(path, &names, skip_dot, alphasort);
    if (n < 0) {
        printf("replay: cannot list %s: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    for (int i = 0; i < n; i++) {
        size_t len = strlen(path) + strlen(names[i]->d_name) + 2;
        char *child = malloc(len);
        if (child) {
            snprintf(child, len, "%s/%s", path, names[i]->d_name);
            run_path(child);
            free(child);
        }
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv) {
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "-v") == 0)
        verbose = 1, first = 2;
    if (first >= argc) {
        fprintf(stderr, "usage: %s [-v] FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    out_fd = dup(2);
    // abort() (the harness's invariant checks) is ours to report. A sanitizer build
    // reports faults itself and calls back; otherwise catch the faults as well.
    signal(SIGABRT, on_signal);
    if (__sanitizer_set_death_callback) {
        __sanitizer_set_death_callback(say_current);
    } else {
        int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
            signal(sigs[i], on_signal);
    }
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = first; i < argc; i++)
        run_path(argv[i]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
