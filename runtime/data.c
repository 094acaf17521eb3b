// data.c: the ftc token file reader, writer, converter and shuffler; see data.h for the format and
// contracts. Every integer in the file is decoded byte by byte, so the host's byte order does
// not matter.
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "data.h"
#include "fileio.h"
#include "xalloc.h"

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
    uint64_t header;     // bytes before the tokens
    bool info;           // info bytes follow the tokens
    bool paired;         // the windows are chosen/rejected pairs
    uint64_t window, records;
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
    if (size < DATA_HEADER_BYTES_V1)
        return rt_fail(err, errlen,
                       "%s: file is %llu bytes, shorter than the %d-byte token file header", path,
                       (unsigned long long)size, DATA_HEADER_BYTES_V1);
    unsigned char h[DATA_HEADER_BYTES] = {0};
    if (rt_pread_full(d->fd, h, DATA_HEADER_BYTES_V1, 0) < 0)
        return rt_fail(err, errlen, "%s: cannot read: %s", path, rt_read_errstr());
    if (memcmp(h, MAGIC, sizeof MAGIC) != 0)
        return rt_fail(err, errlen,
                       "%s: not an ftc token file (no \"FTCTOKEN\" magic; ftc data makes one)",
                       path);
    uint64_t version = get_le(h + 8, 4), width = get_le(h + 12, 4), count = get_le(h + 16, 8);
    if (version != 1 && version != DATA_VERSION)
        return rt_fail(err, errlen, "%s: token file version %llu, this build reads versions 1 and %d",
                       path, (unsigned long long)version, DATA_VERSION);
    if (width != 2 && width != 4)
        return rt_fail(err, errlen, "%s: %llu bytes per token, must be 2 or 4", path,
                       (unsigned long long)width);
    uint64_t flags = 0;
    d->header = DATA_HEADER_BYTES_V1;
    if (version == 1) {
        if (get_le(h + 24, 8) != 0)
            return rt_fail(err, errlen, "%s: reserved header field is %llu, must be 0", path,
                           (unsigned long long)get_le(h + 24, 8));
    } else {
        if (size < DATA_HEADER_BYTES)
            return rt_fail(err, errlen,
                           "%s: file is %llu bytes, shorter than the %d-byte header of version %d",
                           path, (unsigned long long)size, DATA_HEADER_BYTES, DATA_VERSION);
        if (rt_pread_full(d->fd, h + DATA_HEADER_BYTES_V1, DATA_HEADER_BYTES - DATA_HEADER_BYTES_V1,
                          DATA_HEADER_BYTES_V1) < 0)
            return rt_fail(err, errlen, "%s: cannot read: %s", path, rt_read_errstr());
        flags = get_le(h + 24, 8);
        if (flags & ~(uint64_t)(DATA_HAS_INFO | DATA_PAIRED))
            return rt_fail(err, errlen, "%s: header flags 0x%llx, only bits 0 (info bytes) and 1 (pairs) "
                           "are defined", path, (unsigned long long)flags);
        if (get_le(h + 48, 8) != 0 || get_le(h + 56, 8) != 0)
            return rt_fail(err, errlen, "%s: reserved header bytes 48..63 are not 0", path);
        d->window = get_le(h + 32, 8);
        d->records = get_le(h + 40, 8);
        d->header = DATA_HEADER_BYTES;
    }
    d->info = flags & DATA_HAS_INFO;
    d->paired = flags & DATA_PAIRED;
    uint64_t have = size - d->header, per = width + (d->info ? 1 : 0);
    if (count > UINT64_MAX / per || count * per != have)
        return rt_fail(err, errlen,
                       "%s: header says %llu tokens of %llu bytes%s, but %llu bytes follow the "
                       "header (truncated or trailing data)",
                       path, (unsigned long long)count, (unsigned long long)width,
                       d->info ? " and their info bytes" : "", (unsigned long long)have);
    d->token_bytes = (int)width;
    d->n_tokens = count;
    return 0;
}

// A paired file's layout (data.h): info bytes, a window, an even number of whole windows and
// the token after the last, so that pair i is windows 2i and 2i+1 at the file's seq.
static int check_pairs(const DataFile *d, char *err, size_t errlen) {
    if (!d->paired)
        return 0;
    if (!d->info)
        return rt_fail(err, errlen, "%s: preference pairs (header flag 1) without info bytes: a pair's "
                       "windows need their record starts and trained tokens", d->path);
    if (d->window == 0)
        return rt_fail(err, errlen, "%s: preference pairs (header flag 1) without a window: each sequence "
                       "of a pair has a window of its own", d->path);
    uint64_t n = d->n_tokens ? (d->n_tokens - 1) / d->window : 0;
    if (d->n_tokens == 0 || (d->n_tokens - 1) % d->window != 0)
        return rt_fail(err, errlen, "%s: preference pairs in %llu tokens, not whole windows of %llu and one "
                       "token more", d->path, (unsigned long long)d->n_tokens, (unsigned long long)d->window);
    if (n % 2 != 0)
        return rt_fail(err, errlen, "%s: preference pairs in %llu windows, an odd number: a pair is two "
                       "windows, chosen then rejected", d->path, (unsigned long long)n);
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
    if (rc == 0)
        rc = check_pairs(d, err, errlen);
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

bool data_has_info(const DataFile *d) { return d->info; }

uint64_t data_packed_window(const DataFile *d) { return d->window; }

uint64_t data_records(const DataFile *d) { return d->records; }

bool data_paired(const DataFile *d) { return d->paired; }

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

int data_read_window(DataFile *d, uint64_t window, int seq, int32_t *out, uint8_t *info,
                     int32_t vocab, char *err, size_t errlen) {
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
    if (rt_pread_full(d->fd, raw, n * w, d->header + first * w) < 0)
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
    if (!info)
        return 0;
    if (!d->info) {
        memset(info, DATA_TRAIN, n);
        return 0;
    }
    if (rt_pread_full(d->fd, info, n, d->header + d->n_tokens * w + first) < 0)
        return rt_fail(err, errlen, "%s: cannot read window %llu's info bytes: %s", d->path,
                       (unsigned long long)window, rt_read_errstr());
    return 0;
}

int data_window_trained(DataFile *d, uint64_t window, int seq, uint64_t *n, char *err, size_t errlen) {
    uint64_t n_windows;
    *n = 0;
    if (data_window_count(d, seq, &n_windows, err, errlen) < 0)
        return -1;
    if (window >= n_windows)
        return rt_fail(err, errlen, "%s: window %llu is past the last one (%llu windows of %d tokens)", d->path,
                       (unsigned long long)window, (unsigned long long)n_windows, seq + 1);
    if (!d->info) {
        *n = (uint64_t)seq;
        return 0;
    }
    enum { CHUNK = 4096 };
    unsigned char buf[CHUNK];
    uint64_t first = window * (uint64_t)seq + 1, left = (uint64_t)seq;
    while (left > 0) {
        size_t k = left < CHUNK ? (size_t)left : CHUNK;
        if (rt_pread_full(d->fd, buf, k, d->header + d->n_tokens * (uint64_t)d->token_bytes + first) < 0)
            return rt_fail(err, errlen, "%s: cannot read window %llu's info bytes: %s", d->path,
                           (unsigned long long)window, rt_read_errstr());
        for (size_t i = 0; i < k; i++)
            *n += buf[i] & DATA_TRAIN;
        first += k, left -= k;
    }
    return 0;
}

int data_check_vocab(DataFile *d, int32_t vocab, uint64_t *trained, char *err, size_t errlen) {
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
        if (rt_pread_full(d->fd, buf, n * w, d->header + at * w) < 0) {
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
    uint64_t count = d->n_tokens ? d->n_tokens - 1 : 0;
    if (rc == 0 && d->info) {
        count = 0;
        for (uint64_t at = 0; rc == 0 && at < d->n_tokens; at += CHUNK * w) {
            size_t n = d->n_tokens - at < CHUNK * w ? (size_t)(d->n_tokens - at) : CHUNK * w;
            if (rt_pread_full(d->fd, buf, n, d->header + d->n_tokens * w + at) < 0) {
                rc = rt_fail(err, errlen, "%s: cannot read: %s", d->path, rt_read_errstr());
                break;
            }
            for (size_t i = 0; i < n; i++) {
                if (buf[i] & ~(DATA_TRAIN | DATA_START)) {
                    rc = rt_fail(err, errlen, "%s: token %llu's info byte is 0x%02x (bits other than "
                                 "0, trained, and 1, record start)", d->path,
                                 (unsigned long long)(at + i), buf[i]);
                    break;
                }
                if (d->paired && (at + i) % d->window == 0 && at + i + 1 < d->n_tokens &&
                    !(buf[i] & DATA_START)) {
                    rc = rt_fail(err, errlen, "%s: token %llu begins window %llu of preference pairs but "
                                 "no record", d->path, (unsigned long long)(at + i),
                                 (unsigned long long)((at + i) / d->window));
                    break;
                }
                count += (buf[i] & DATA_TRAIN) && at + i > 0;
            }
        }
    }
    if (rc == 0 && trained)
        *trained = count;
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
// Writing

enum { WRITE_BUF = 1 << 20 };

struct DataWriter {
    char *path;
    char tmp[4200], info_tmp[4200];
    int fd, info_fd;          // the file, and the unnamed one its info bytes wait in
    int width;
    bool paired;
    uint64_t count;
    unsigned char *buf, *ibuf; // WRITE_BUF bytes each
    size_t nbuf, nibuf;
};

static void writer_free(DataWriter *w) {
    if (w->fd >= 0)
        close(w->fd), unlink(w->tmp);
    if (w->info_fd >= 0)
        close(w->info_fd);
    free(w->buf), free(w->ibuf), free(w->path);
    free(w);
}

void data_writer_drop(DataWriter *w) {
    if (w)
        writer_free(w);
}

int data_writer_open(DataWriter **out, const char *path, int token_bytes, bool info, char *err,
                     size_t errlen) {
    *out = NULL;
    if (token_bytes != 2 && token_bytes != 4)
        return rt_fail(err, errlen, "%s: %d bytes per token, must be 2 or 4", path, token_bytes);
    DataWriter *w = calloc(1, sizeof *w);
    if (!w)
        return rt_fail(err, errlen, "%s: out of memory", path);
    w->fd = w->info_fd = -1;
    w->width = token_bytes;
    w->path = strdup(path);
    w->buf = malloc(WRITE_BUF);
    w->ibuf = info ? xmalloc(WRITE_BUF) : NULL;
    if (!w->path || !w->buf || (info && !w->ibuf)) {
        writer_free(w);
        return rt_fail(err, errlen, "%s: out of memory", path);
    }
    unsigned char h[DATA_HEADER_BYTES] = {0};   // the real header comes at the end
    if ((w->fd = rt_tmp_create(path, w->tmp, sizeof w->tmp)) < 0) {
        int e = errno;
        writer_free(w);
        return rt_fail(err, errlen, "%s: cannot create a temporary file: %s", path, strerror(e));
    }
    if (info) {
        int fd = rt_tmp_create(path, w->info_tmp, sizeof w->info_tmp);
        if (fd >= 0)
            unlink(w->info_tmp);
        w->info_fd = fd;
    }
    if ((info && w->info_fd < 0) || rt_write_full(w->fd, h, sizeof h) != 0) {
        int e = errno;
        writer_free(w);
        return rt_fail(err, errlen, "%s: cannot write: %s", path, strerror(e));
    }
    *out = w;
    return 0;
}

static int flush(DataWriter *w, char *err, size_t errlen) {
    if ((w->nbuf && rt_write_full(w->fd, w->buf, w->nbuf) != 0) ||
        (w->nibuf && rt_write_full(w->info_fd, w->ibuf, w->nibuf) != 0))
        return rt_fail(err, errlen, "%s: cannot write: %s", w->path, strerror(errno));
    w->nbuf = w->nibuf = 0;
    return 0;
}

int data_writer_put(DataWriter *w, const int32_t *ids, const uint8_t *info, size_t n, char *err,
                    size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        if (w->nbuf + 4 > WRITE_BUF || (w->ibuf && w->nibuf == WRITE_BUF))
            if (flush(w, err, errlen) != 0)
                return -1;
        uint32_t v = (uint32_t)ids[i];
        if (ids[i] < 0 || (w->width == 2 && v > 0xffff))
            return rt_fail(err, errlen, "%s: token %d does not fit %d bytes", w->path, ids[i], w->width);
        put_le(w->buf + w->nbuf, v, w->width);
        w->nbuf += (size_t)w->width;
        if (w->ibuf)
            w->ibuf[w->nibuf++] = info[i];
    }
    w->count += n;
    return 0;
}

uint64_t data_writer_count(const DataWriter *w) { return w->count; }

void data_writer_pairs(DataWriter *w) { w->paired = true; }

int data_writer_close(DataWriter *w, uint64_t window, uint64_t records, char *err, size_t errlen) {
    if (w->paired && (w->info_fd < 0 || window == 0)) {
        rt_fail(err, errlen, "%s: preference pairs need info bytes and a window", w->path);
        writer_free(w);
        return -1;
    }
    if (flush(w, err, errlen) != 0) {
        writer_free(w);
        return -1;
    }
    int ok = 1;
    if (w->info_fd >= 0) {   // the info bytes after the tokens
        if (lseek(w->info_fd, 0, SEEK_SET) != 0)
            ok = 0;
        for (ssize_t r; ok && (r = read(w->info_fd, w->buf, WRITE_BUF)) != 0;) {
            if (r < 0 && errno == EINTR)
                continue;
            ok = r > 0 && rt_write_full(w->fd, w->buf, (size_t)r) == 0;
        }
    }
    unsigned char h[DATA_HEADER_BYTES] = {0};
    memcpy(h, MAGIC, sizeof MAGIC);
    put_le(h + 8, DATA_VERSION, 4);
    put_le(h + 12, (uint64_t)w->width, 4);
    put_le(h + 16, w->count, 8);
    put_le(h + 24, (w->info_fd >= 0 ? DATA_HAS_INFO : 0) | (w->paired ? DATA_PAIRED : 0), 8);
    put_le(h + 32, window, 8);
    put_le(h + 40, records, 8);
    ok = ok && pwrite(w->fd, h, sizeof h, 0) == (ssize_t)sizeof h && fsync(w->fd) == 0;
    int saved = errno;
    if (close(w->fd) != 0 && ok)
        ok = 0, saved = errno;
    w->fd = -1;
    if (!ok) {
        unlink(w->tmp);
        rt_fail(err, errlen, "%s: cannot write: %s", w->path, strerror(saved));
        writer_free(w);
        return -1;
    }
    if (rename(w->tmp, w->path) != 0) {
        rt_fail(err, errlen, "%s: cannot replace: %s", w->path, strerror(errno));
        unlink(w->tmp);
        writer_free(w);
        return -1;
    }
    writer_free(w);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Converting

static const char *const MODE_NAMES[] = {
    [DATA_BYTES] = "bytes", [DATA_U16] = "raw uint16 tokens", [DATA_U32] = "raw uint32 tokens"};

int data_convert(const char *in_path, const char *out_path, DataMode mode, uint64_t *n_tokens,
                 char *err, size_t errlen) {
    if ((int)mode < DATA_BYTES || (int)mode > DATA_U32)
        return rt_fail(err, errlen, "%s: invalid conversion mode %d", in_path, (int)mode);
    int in_fd = open(in_path, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0)
        return rt_fail(err, errlen, "%s: cannot open: %s", in_path, strerror(errno));
    int width = mode == DATA_U32 ? 4 : 2, in_width = mode == DATA_BYTES ? 1 : width;
    DataWriter *w = NULL;
    if (data_writer_open(&w, out_path, width, false, err, errlen) != 0) {
        close(in_fd);
        return -1;
    }
    enum { CHUNK = CONVERT_CHUNK_BYTES };
    unsigned char in[CHUNK + 4];
    int32_t ids[CHUNK];
    uint64_t in_bytes = 0;
    size_t have = 0;   // bytes of a token split across reads
    int rc = 0;
    for (;;) {
        ssize_t r = read(in_fd, in + have, CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = rt_fail(err, errlen, "%s: cannot read: %s", in_path, strerror(errno));
            break;
        }
        if (r == 0)
            break;
        in_bytes += (uint64_t)r;
        have += (size_t)r;
        size_t k = have / (size_t)in_width;
        for (size_t i = 0; i < k; i++)
            ids[i] = (int32_t)get_le(in + i * (size_t)in_width, in_width);
        if (data_writer_put(w, ids, NULL, k, err, errlen) != 0) {
            rc = -1;
            break;
        }
        memmove(in, in + k * (size_t)in_width, have - k * (size_t)in_width);
        have -= k * (size_t)in_width;
    }
    close(in_fd);
    if (rc == 0 && in_bytes == 0)
        rc = rt_fail(err, errlen, "%s: is empty, there are no tokens to convert", in_path);
    if (rc == 0 && in_bytes % (uint64_t)in_width != 0)
        rc = rt_fail(err, errlen, "%s: is %llu bytes, not a multiple of %d (%s)", in_path,
                     (unsigned long long)in_bytes, in_width, MODE_NAMES[mode]);
    if (rc != 0) {
        data_writer_drop(w);
        return -1;
    }
    uint64_t count = data_writer_count(w);
    if (data_writer_close(w, 0, 0, err, errlen) != 0)
        return -1;
    if (n_tokens)
        *n_tokens = count;
    return 0;
}

uint64_t data_fingerprint(const DataFile *d) {
    struct stat st;
    if (fstat(d->fd, &st) != 0)
        return 0;
    uint64_t size = (uint64_t)st.st_size, h = rt_fnv1a64(RT_FNV_BASIS, &size, sizeof size);
    enum { SAMPLES = 64, SAMPLE = 4096 };
    unsigned char buf[SAMPLE];
    for (int i = 0; i < SAMPLES && size > 0; i++) {
        uint64_t at = size <= SAMPLE ? 0 : i == SAMPLES - 1 ? size - SAMPLE : (size - SAMPLE) / (SAMPLES - 1) * (uint64_t)i;
        size_t n = size - at < SAMPLE ? (size_t)(size - at) : SAMPLE;
        if (rt_pread_full(d->fd, buf, n, at) != 0)
            return 0;
        h = rt_fnv1a64(h, buf, n);
        if (size <= SAMPLE)
            break;
    }
    return h ? h : 1;
}
