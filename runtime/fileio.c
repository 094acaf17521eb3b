// fileio.c — whole reads and writes, retried on EINTR, in chunks of at most 1 GiB
// (what one read or write call moves on Linux), and rt_fail for error messages.
#include "fileio.h"
#include "xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { CHUNK = 1 << 30 };

int rt_pread_full(int fd, void *dst, size_t n, uint64_t off) {
    char *p = dst;
    while (n > 0) {
        ssize_t r = pread(fd, p, n < CHUNK ? n : CHUNK, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = 0;
            return -1;
        }
        p += r, n -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

int rt_write_full(int fd, const void *src, size_t n) {
    const char *p = src;
    while (n > 0) {
        ssize_t r = write(fd, p, n < CHUNK ? n : CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r, n -= (size_t)r;
    }
    return 0;
}

const char *rt_read_errstr(void) {
    return errno ? strerror(errno) : "the file ended early (was it truncated after opening?)";
}

int rt_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

uint64_t rt_fnv1a64(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

int rt_cache_path(const char *what, char *buf, size_t len) {
    const char *root = getenv("FTC_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (root && *root)
        n = snprintf(buf, len, "%s/%s", root, what);
    else if (xdg && *xdg)
        n = snprintf(buf, len, "%s/ftc/%s", xdg, what);
    else if (home && *home)
        n = snprintf(buf, len, "%s/.cache/ftc/%s", home, what);
    else
        return -1;
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int rt_mkdir_p(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = c;
        if (c == '\0')
            break;
    }
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

int64_t rt_host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
            break;
    fclose(f);
    return kib < 0 ? -1 : kib * 1024;
}

int rt_open_regular(const char *path, struct stat *st) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return -2;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

void rt_clean_leftovers(const char *path, const char *const *tags, int ntags, bool more,
                        void (*drop)(const char *entry)) {
    char dir[4096];
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
    size_t bl = strlen(base);
    DIR *d = bl ? opendir(dir) : NULL;
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name, *at = NULL;
        for (int t = 0; t < ntags && !at; t++)
            if (strncmp(n, base, bl) == 0 && strncmp(n + bl, tags[t], strlen(tags[t])) == 0)
                at = n + bl + strlen(tags[t]);
        if (!at)
            continue;
        char *end;
        long pid = strtol(at, &end, 10);
        if (end == at || (more ? *end != '.' : *end != '\0') || pid <= 0 || pid == (long)getpid() ||
            kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char p[8300];
        snprintf(p, sizeof p, "%s/%s", dir, n);
        drop(p);
    }
    closedir(d);
}

static void unlink_entry(const char *p) { unlink(p); }

void rt_remove_dir(const char *dir, bool (*ours)(const char *name)) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || (ours && !ours(e->d_name)))
            continue;
        char p[8300];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))   // (a saved set's merged/)
            rt_remove_dir(p, NULL);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

int rt_tmp_create(const char *path, char *tmp, size_t len) {
    static const char *const tag[] = {".tmp."};
    rt_clean_leftovers(path, tag, 1, true, unlink_entry);
    if ((size_t)snprintf(tmp, len, "%s.tmp.%d.XXXXXX", path, (int)getpid()) >= len) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = mkstemp(tmp);
    if (fd >= 0 && fchmod(fd, 0644) != 0) {
        int e = errno;
        close(fd), unlink(tmp);
        errno = e;
        return -1;
    }
    return fd;
}

char *rt_read_whole(const char *path, size_t *bytes) {
    struct stat st;
    int fd = rt_open_regular(path, &st);
    if (fd < 0) {
        if (fd == -2)
            errno = EINVAL;
        return NULL;
    }
    char *buf = NULL;
    if ((buf = xmalloc((size_t)st.st_size + 1))) {
        if (rt_pread_full(fd, buf, (size_t)st.st_size, 0) == 0) {
            buf[st.st_size] = '\0';
            *bytes = (size_t)st.st_size;
        } else {
            free(buf);
            buf = NULL;
        }
    }
    close(fd);
    return buf;
}

int rt_copy_file(const char *from, const char *to, char *err, size_t errlen) {
    struct stat st;
    int in = rt_open_regular(from, &st);
    if (in < 0)
        return rt_fail(err, errlen, "%s: cannot read: %s", from, in == -2 ? "not a regular file" : strerror(errno));
    int o = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), rc = o < 0 ? -1 : 0;
    if (o < 0)
        rt_fail(err, errlen, "%s: cannot create: %s", to, strerror(errno));
    char buf[1 << 16];
    for (ssize_t k; rc == 0 && (k = read(in, buf, sizeof buf)) != 0;) {
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            rc = rt_fail(err, errlen, "%s: cannot read: %s", from, strerror(errno));
        else if (rt_write_full(o, buf, (size_t)k) != 0)
            rc = rt_fail(err, errlen, "%s: cannot write: %s", to, strerror(errno));
    }
    if (o >= 0 && close(o) != 0 && rc == 0)
        rc = rt_fail(err, errlen, "%s: cannot write: %s", to, strerror(errno));
    close(in);
    return rc;
}
