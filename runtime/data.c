// data.c: the ftc token file reader, converter and shuffler; see data.h for the format and the
// contracts. Every integer in the file is decoded byte by byte, so the host's byte order does
// not matter.
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "data.h"
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CONVERT_CHUNK_BYTES = 1 << 14 };

static const char MAGIC[8] = {'F', 'T', 'C', 'T', 'O', 'K', 'E', 'N'};

struct DataFile {
    char *path;          // as opened, for messages
    int fd;
    int token_bytes;     // 2 or 4
    uint64_t n_tokens;
};

static uint64_t get_le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}


// ---------------------------------------------------------------------------------------------
// Reading

// Validates the header of the open file d->fd of size bytes and fills d.
static int check_header(DataFile *d, uint64_t size, char *err, size_t errlen) {
    const char *path = d->path;
    if (size < DATA_HEADER_BYTES)
        return rt_fail(err, errlen,
                       "%s: file is %llu bytes, shorter than the %d-byte token file header", path,
                       (unsigned long long)size, DATA_HEADER_BYTES);
    unsigned char h[DATA_HEADER_BYTES];
    if (rt_pread_full(d->fd, h, sizeof h, 0) < 0)
        return rt_fail(err, errlen, "%s: cannot read: %s", path, rt_read_errstr());
    if (memcmp(h, MAGIC, sizeof MAGIC) != 0)
        return rt_fail(err, errlen,
                       "%s: not an ftc token file (no \"FTCTOKEN\" magic; data_convert makes one)",
                       path);
    uint64_t version = get_le(h + 8, 4), width = get_le(h + 12, 4);
    uint64_t count = get_le(h + 16, 8), reserved = get_le(h + 24, 8);
    if (version != DATA_VERSION)
        return rt_fail(err, errlen, "%s: token file version %llu, this build reads version %d",
                       path, (unsigned long long)version, DATA_VERSION);
    if (width != 2 && width != 4)
        return rt_fail(err, errlen, "%s: %llu bytes per token, must be 2 or 4", path,
                       (unsigned long long)width);
    if (reserved != 0)
        return rt_fail(err, errlen, "%s: reserved header field is %llu, must be 0", path,
                       (unsigned long long)reserved);
    uint64_t have = size - DATA_HEADER_BYTES;
    if (count > UINT64_MAX / width || count * width != have)
        return rt_fail(err, errlen,
                       "%s: header says %llu tokens of %llu bytes, but %llu bytes follow the "
                       "header (truncated or trailing data)",
                       path, (unsigned long long)count, (unsigned long long)width,
                       (unsigned long long)have);
    d->token_bytes = (int)width;
    d->n_tokens = count;
    return 0;
}

int data_open(DataFile **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    DataFile *d = calloc(1, sizeof *d);
    if (!d)
        return rt_fail(err, errlen, "%s: out of memory", path);
    d->fd = -1;
    d->path = strdup(path);
    struct stat st;
    int rc;
    if (!d->path)
        rc = rt_fail(err, errlen, "%s: out of memory", path);
    else if ((d->fd = rt_open_regular(path, &st)) == -2)
        rc = rt_fail(err, errlen, "%s: not a regular file", path);
    else if (d->fd < 0)
        rc = rt_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    else
        rc = check_header(d, (uint64_t)st.st_size, err, errlen);
    if (rc) {
        data_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

uint64_t data_count(const DataFile *d) { return d->n_tokens; }

int data_token_bytes(const DataFile *d) { return d->token_bytes; }

const char *data_path(const DataFile *d) { return d->path; }

int data_window_count(const DataFile *d, int seq, uint64_t *n, char *err, size_t errlen) {
    *n = 0;
    if (seq < 1)
        return rt_fail(err, errlen, "%s: sequence length %d, must be at least 1", d->path, seq);
    if (d->n_tokens < (uint64_t)seq + 1)
        return rt_fail(err, errlen,
                       "%s: holds %llu tokens, fewer than one window of seq+1 = %llu tokens",
                       d->path, (unsigned long long)d->n_tokens, (unsigned long long)seq + 1);
    *n = (d->n_tokens - 1) / (uint64_t)seq;
    return 0;
}

int data_read_window(DataFile *d, uint64_t window, int seq, int32_t *out, int32_t vocab,
                     char *err, size_t errlen) {
    uint64_t n_windows;
    if (data_window_count(d, seq, &n_windows, err, errlen) < 0)
        return -1;
    if (window >= n_windows)
        return rt_fail(err, errlen,
                       "%s: window %llu is past the last one (%llu windows of %d tokens)", d->path,
                       (unsigned long long)window, (unsigned long long)n_windows, seq + 1);
    if (vocab < 1)
        return rt_fail(err, errlen, "%s: vocabulary size %d, must be at least 1", d->path,
                       (int)vocab);
    size_t n = (size_t)seq + 1, w = (size_t)d->token_bytes;
    uint64_t first = window * (uint64_t)seq;
    // Read the raw tokens into the front of out, check them, then widen them in place from the
    // back: token i's bytes start at w*i <= 4*i, where its int32 goes, and every byte that int32
    // overwrites belongs to a token at or after i, so none is overwritten before it is read.
    unsigned char *raw = (unsigned char *)out;
    if (rt_pread_full(d->fd, raw, n * w, DATA_HEADER_BYTES + first * w) < 0)
        return rt_fail(err, errlen, "%s: cannot read window %llu: %s", d->path,
                       (unsigned long long)window, rt_read_errstr());
    for (size_t i = 0; i < n; i++) {
        uint64_t v = get_le(raw + i * w, (int)w);
        if (v >= (uint64_t)vocab)
            return rt_fail(err, errlen, "%s: token %llu is %llu, not below the vocabulary size %d",
                           d->path, (unsigned long long)(first + i), (unsigned long long)v,
                           (int)vocab);
    }
    for (size_t i = n; i-- > 0;)
        out[i] = (int32_t)get_le(raw + i * w, (int)w);
    return 0;
}

int data_check_vocab(DataFile *d, int32_t vocab, char *err, size_t errlen) {
    if (vocab < 1)
        return rt_fail(err, errlen, "%s: vocabulary size %d, must be at least 1", d->path, (int)vocab);
    enum { CHUNK = 1 << 20 };   // tokens per read
    size_t w = (size_t)d->token_bytes;
    unsigned char *buf = malloc(CHUNK * w);
    if (!buf)
        return rt_fail(err, errlen, "%s: out of memory", d->path);
    int rc = 0;
    for (uint64_t at = 0; rc == 0 && at < d->n_tokens; at += CHUNK) {
        size_t n = d->n_tokens - at < CHUNK ? (size_t)(d->n_tokens - at) : CHUNK;
        if (rt_pread_full(d->fd, buf, n * w, DATA_HEADER_BYTES + at * w) < 0) {
            rc = rt_fail(err, errlen, "%s: cannot read: %s", d->path, rt_read_errstr());
            break;
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t v = w == 2 ? (uint64_t)buf[2 * i] | (uint64_t)buf[2 * i + 1] << 8
                                : get_le(buf + 4 * i, 4);
            if (v >= (uint64_t)vocab) {
                rc = rt_fail(err, errlen, "%s: token %llu is %llu, not below the vocabulary size %d",
                             d->path, (unsigned long long)(at + i), (unsigned long long)v, (int)vocab);
                break;
            }
        }
    }
    free(buf);
    return rc;
}

void data_close(DataFile *d) {
    if (!d)
        return;
    if (d->fd >= 0)
        close(d->fd);
    free(d->path);
    free(d);
}

// ---------------------------------------------------------------------------------------------
// Shuffling

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void data_shuffle(uint64_t *order, uint64_t n, uint64_t seed) {
    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    uint64_t state = seed;
    for (uint64_t i = n; i-- > 1;) {
        // Uniform j in [0, i]: draws below 2^64 mod (i+1) would favour small j, so redraw them.
        uint64_t range = i + 1, floor = (0 - range) % range, r;
        do
            r = splitmix64(&state);
        while (r < floor);
        uint64_t j = r % range, t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

// ---------------------------------------------------------------------------------------------
// Converting

static const char *const MODE_NAMES[] = {
    [DATA_BYTES] = "bytes", [DATA_U16] = "raw uint16 tokens", [DATA_U32] = "raw uint32 tokens"};

// Streams in_fd's tokens into out_fd after the header; sets *in_bytes, and *werr for a write
// error (otherwise a read error). Returns -1 with errno set on an I/O error.
static int copy_tokens(int in_fd, int out_fd, DataMode mode, uint64_t *in_bytes, int *werr) {
    unsigned char in[CONVERT_CHUNK_BYTES], wide[2 * CONVERT_CHUNK_BYTES];
    *in_bytes = 0;
    for (;;) {
        ssize_t r = read(in_fd, in, sizeof in);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return *werr = 0, -1;
        if (r == 0)
            return 0;
        *in_bytes += (uint64_t)r;
        const unsigned char *src = in;
        size_t k = (size_t)r;
        if (mode == DATA_BYTES) {
            for (size_t i = 0; i < k; i++)
                wide[2 * i] = in[i], wide[2 * i + 1] = 0;
            src = wide, k *= 2;
        }
        if (rt_write_full(out_fd, src, k) < 0)
            return *werr = 1, -1;
    }
}

int data_convert(const char *in_path, const char *out_path, DataMode mode, uint64_t *n_tokens,
                 char *err, size_t errlen) {
    if ((int)mode < DATA_BYTES || (int)mode > DATA_U32)
        return rt_fail(err, errlen, "%s: invalid conversion mode %d", in_path, (int)mode);
    int in_fd = open(in_path, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0)
        return rt_fail(err, errlen, "%s: cannot open: %s", in_path, strerror(errno));
    size_t tmp_bytes = strlen(out_path) + 16;
    char *tmp = malloc(tmp_bytes);
    if (!tmp) {
        close(in_fd);
        return rt_fail(err, errlen, "%s: out of memory", out_path);
    }
    snprintf(tmp, tmp_bytes, "%s.tmp.XXXXXX", out_path);
    int out_fd = mkstemp(tmp);
    int rc = -1;
    if (out_fd < 0) {
        rt_fail(err, errlen, "%s: cannot create a temporary file: %s", out_path, strerror(errno));
        goto done;
    }
    int width = mode == DATA_U32 ? 4 : 2, in_width = mode == DATA_BYTES ? 1 : width;
    unsigned char h[DATA_HEADER_BYTES] = {0};
    uint64_t in_bytes = 0;
    int werr = 1;
    int ok = fchmod(out_fd, 0644) == 0 && rt_write_full(out_fd, h, sizeof h) == 0;
    if (ok && copy_tokens(in_fd, out_fd, mode, &in_bytes, &werr) < 0)
        ok = 0;
    if (!ok && !werr) {
        rt_fail(err, errlen, "%s: cannot read: %s", in_path, strerror(errno));
        goto drop;
    }
    if (ok && in_bytes == 0) {
        rt_fail(err, errlen, "%s: is empty, there are no tokens to convert", in_path);
        goto drop;
    }
    if (ok && in_bytes % (uint64_t)in_width != 0) {
        rt_fail(err, errlen, "%s: is %llu bytes, not a multiple of %d (%s)", in_path,
                (unsigned long long)in_bytes, in_width, MODE_NAMES[mode]);
        goto drop;
    }
    uint64_t count = in_bytes / (uint64_t)in_width;
    memcpy(h, MAGIC, sizeof MAGIC);
    put_le(h + 8, DATA_VERSION, 4);
    put_le(h + 12, (uint64_t)width, 4);
    put_le(h + 16, count, 8);
    ok = ok && pwrite(out_fd, h, sizeof h, 0) == (ssize_t)sizeof h && fsync(out_fd) == 0;
    int saved = errno;
    if (close(out_fd) != 0 && ok)
        ok = 0, saved = errno;
    out_fd = -1;
    if (!ok) {
        rt_fail(err, errlen, "%s: cannot write: %s", out_path, strerror(saved));
        goto drop;
    }
    if (rename(tmp, out_path) != 0) {
        rt_fail(err, errlen, "%s: cannot replace: %s", out_path, strerror(errno));
        goto drop;
    }
    if (n_tokens)
        *n_tokens = count;
    rc = 0;
    goto done;
drop:
    if (out_fd >= 0)
        close(out_fd);
    unlink(tmp);
done:
    close(in_fd);
    free(tmp);
    return rc;
}
