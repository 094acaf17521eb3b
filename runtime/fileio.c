// fileio.c — whole reads and writes, retried on EINTR, in chunks of at most 1 GiB
// (what one read or write call moves on Linux), and rt_fail for error messages.
#include "fileio.h"

#include <errno.h>
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
