// safetensors.c: the safetensors reader and writer; see safetensors.h for the format and the
// contracts. Headers are parsed with jansson and validated in full at open; tensor data is
// only ever read with pread, in place or through a small conversion buffer.
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "safetensors.h"
#include "fileio.h"

#include "kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads tensor bytes in place and needs a little-endian host"
#endif

enum {
    HEADER_MAX_BYTES = 100000000, // the Python library's limit; beyond it no real header goes
    CONVERT_ELEMS = 8192,         // elements per pread when widening BF16/F16
};

static const char SINGLE_NAME[] = "model.safetensors";
const char st_index_name[] = "model.safetensors.index.json";

typedef struct {
    char *path;          // as opened, for messages
    int fd;
    uint64_t data_start; // 8 + header length: where offsets count from
} StFile;

struct StSet {
    StFile *files;     // (n_files)
    int n_files;
    StTensor *tensors; // (n_tensors), sorted by name once opening is done
    int n_tensors, cap_tensors;
};

// ---------------------------------------------------------------------------------------------
// Helpers

static const struct {
    const char *name;
    size_t bytes;
} DTYPES[] = {
    [ST_F32] = {"F32", 4}, [ST_BF16] = {"BF16", 2}, [ST_F16] = {"F16", 2},
    [ST_I32] = {"I32", 4}, [ST_I64] = {"I64", 8},   [ST_U8] = {"U8", 1},
};
enum { N_DTYPES = (int)(sizeof DTYPES / sizeof DTYPES[0]) };

static int dtype_valid(StDType d) { return (int)d >= 0 && (int)d < N_DTYPES; }

size_t st_dtype_bytes(StDType d) { return dtype_valid(d) ? DTYPES[d].bytes : 0; }

const char *st_dtype_name(StDType d) { return dtype_valid(d) ? DTYPES[d].name : "?"; }

int64_t st_elems(const StTensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

// Product of shape[0..ndim) times elem_bytes in *bytes; -1 if it overflows int64.
static int shape_bytes(const int64_t *shape, int ndim, size_t elem_bytes, uint64_t *bytes) {
    uint64_t n = elem_bytes;
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (d != 0 && n > (uint64_t)INT64_MAX / d)
            return -1;
        n *= d;
    }
    *bytes = n;
    return 0;
}

// Writes "[3, 4]" for a shape into buf.
static const char *shape_str(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

static int is_regular(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}


// ---------------------------------------------------------------------------------------------
// Parsing one file's header

// Reads a [begin, end] pair or a shape list: an array of non-negative integers, at most max.
static int int_list(json_t *a, int64_t *out, int max, int *n) {
    if (!json_is_array(a))
        return -1;
    size_t len = json_array_size(a);
    if (len > (size_t)max)
        return -2;
    for (size_t i = 0; i < len; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return -1;
        out[i] = (int64_t)json_integer_value(v);
    }
    *n = (int)len;
    return 0;
}

// Appends a zeroed tensor to s; NULL when out of memory.
static StTensor *add_tensor(StSet *s) {
    if (s->n_tensors == s->cap_tensors) {
        int cap = s->cap_tensors ? 2 * s->cap_tensors : 64;
        StTensor *p = realloc(s->tensors, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        s->tensors = p, s->cap_tensors = cap;
    }
    StTensor *t = &s->tensors[s->n_tensors];
    memset(t, 0, sizeof *t);
    return t;
}

// Validates one header entry (name: value) of shard `file` and appends the tensor to s.
static int parse_entry(StSet *s, int file, const char *name, json_t *v, uint64_t data_bytes,
                       char *err, size_t errlen) {
    const char *path = s->files[file].path;
    char sh[256];
    if (!json_is_object(v))
        return rt_fail(err, errlen, "%s: tensor '%s': header entry is not an object", path, name);

    json_t *jd = json_object_get(v, "dtype");
    if (!json_is_string(jd))
        return rt_fail(err, errlen, "%s: tensor '%s': \"dtype\" is missing or not a string", path,
                       name);
    int dtype = -1;
    for (int d = 0; d < N_DTYPES; d++)
        if (strcmp(json_string_value(jd), DTYPES[d].name) == 0)
            dtype = d;
    if (dtype < 0)
        return rt_fail(err, errlen,
                       "%s: tensor '%s': unknown dtype '%s' (ftc reads F32, BF16, F16, I32, I64, "
                       "U8)",
                       path, name, json_string_value(jd));

    int64_t shape[ST_MAX_DIMS];
    int ndim = 0;
    int rc = int_list(json_object_get(v, "shape"), shape, ST_MAX_DIMS, &ndim);
    if (rc == -2)
        return rt_fail(err, errlen,
                       "%s: tensor '%s': shape has %zu dimensions, at most %d are supported", path,
                       name, json_array_size(json_object_get(v, "shape")), ST_MAX_DIMS);
    if (rc < 0)
        return rt_fail(err, errlen,
                       "%s: tensor '%s': \"shape\" is missing or not a list of non-negative "
                       "integers",
                       path, name);
    uint64_t want;
    if (shape_bytes(shape, ndim, DTYPES[dtype].bytes, &want) < 0)
        return rt_fail(err, errlen, "%s: tensor '%s': shape %s is too large", path, name,
                       shape_str(sh, sizeof sh, shape, ndim));

    int64_t off[2];
    int n_off = 0;
    if (int_list(json_object_get(v, "data_offsets"), off, 2, &n_off) < 0 || n_off != 2)
        return rt_fail(err, errlen,
                       "%s: tensor '%s': \"data_offsets\" is missing or not [begin, end] with "
                       "non-negative integers",
                       path, name);
    uint64_t begin = (uint64_t)off[0], end = (uint64_t)off[1];
    if (begin > end)
        return rt_fail(err, errlen,
                       "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path,
                       name, (unsigned long long)begin, (unsigned long long)end);
    if (end - begin != want)
        return rt_fail(err, errlen,
                       "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but %s %s "
                       "needs %llu",
                       path, name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)(end - begin), DTYPES[dtype].name,
                       shape_str(sh, sizeof sh, shape, ndim), (unsigned long long)want);
    if (end > data_bytes)
        return rt_fail(err, errlen,
                       "%s: tensor '%s': data_offsets [%llu, %llu] exceed the file's data section "
                       "(%llu bytes)",
                       path, name, (unsigned long long)begin, (unsigned long long)end,
                       (unsigned long long)data_bytes);

    StTensor *t = add_tensor(s);
    char *copy = t ? xstrdup(name) : NULL;
    if (!copy)
        return rt_fail(err, errlen, "%s: out of memory", path);
    t->name = copy;
    t->dtype = (StDType)dtype;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof shape[0]);
    t->begin = begin, t->end = end;
    t->file = file;
    s->n_tensors++;
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

// Checks that no two non-empty tensors of the tensors[first..n) share a byte.
static int check_overlap(StSet *s, int first, const char *path, char *err, size_t errlen) {
    int n = s->n_tensors - first;
    if (n < 2)
        return 0;
    const StTensor **by = malloc((size_t)n * sizeof *by);
    if (!by)
        return rt_fail(err, errlen, "%s: out of memory", path);
    for (int i = 0; i < n; i++)
        by[i] = &s->tensors[first + i];
    qsort(by, (size_t)n, sizeof *by, cmp_by_offset);
    const StTensor *reach = NULL; // the tensor ending furthest so far
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const StTensor *t = by[i];
        if (t->begin == t->end)
            continue;
        if (reach && t->begin < reach->end)
            rc = rt_fail(err, errlen,
                         "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' "
                         "[%llu, %llu]",
                         path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                         reach->name, (unsigned long long)reach->begin,
                         (unsigned long long)reach->end);
        if (!reach || t->end > reach->end)
            reach = t;
    }
    free(by);
    return rc;
}

// Opens shard s->files[file] (path already set), validates its header and appends its tensors.
static int parse_file(StSet *s, int file, char *err, size_t errlen) {
    StFile *f = &s->files[file];
    const char *path = f->path;
    struct stat st;
    f->fd = rt_open_regular(path, &st);
    if (f->fd == -2)
        return rt_fail(err, errlen, "%s: not a regular file", path);
    if (f->fd < 0)
        return rt_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8)
        return rt_fail(err, errlen,
                       "%s: file is %llu bytes, too short for the 8-byte header length", path,
                       (unsigned long long)size);
    unsigned char b[8];
    if (rt_pread_full(f->fd, b, 8, 0) < 0)
        return rt_fail(err, errlen, "%s: cannot read: %s", path, rt_read_errstr());
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | b[i];
    if (hlen == 0)
        return rt_fail(err, errlen, "%s: header length is 0 (not a safetensors file?)", path);
    if (hlen > HEADER_MAX_BYTES)
        return rt_fail(err, errlen,
                       "%s: header length %llu exceeds the 100 MB limit (not a safetensors file?)",
                       path, (unsigned long long)hlen);
    if (hlen > size - 8)
        return rt_fail(err, errlen, "%s: header length %llu exceeds the file size (%llu bytes)",
                       path, (unsigned long long)hlen, (unsigned long long)size);
    f->data_start = 8 + hlen;

    char *buf = malloc((size_t)hlen);
    if (!buf)
        return rt_fail(err, errlen, "%s: out of memory for a %llu-byte header", path,
                       (unsigned long long)hlen);
    if (rt_pread_full(f->fd, buf, (size_t)hlen, 8) < 0) {
        free(buf);
        return rt_fail(err, errlen, "%s: cannot read the header: %s", path, rt_read_errstr());
    }
    json_error_t je;
    json_t *root = json_loadb(buf, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!root)
        return rt_fail(err, errlen, "%s: header is not valid JSON: %s (line %d, column %d)", path,
                       je.text, je.line, je.column);
    int rc = 0;
    int first = s->n_tensors;
    if (!json_is_object(root))
        rc = rt_fail(err, errlen, "%s: header is not a JSON object", path);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (rc)
            break;
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) {
                rc = rt_fail(err, errlen, "%s: \"__metadata__\" is not an object", path);
                break;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    rc = rt_fail(err, errlen, "%s: \"__metadata__\" value '%s' is not a string",
                                 path, mk);
                    break;
                }
            }
            continue;
        }
        rc = parse_entry(s, file, key, v, size - f->data_start, err, errlen);
    }
    json_decref(root);
    if (rc == 0)
        rc = check_overlap(s, first, path, err, errlen);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Opening

static int add_file(StSet *s, const char *path, char *err, size_t errlen) {
    StFile *p = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *p);
    if (!p)
        return rt_fail(err, errlen, "%s: out of memory", path);
    s->files = p;
    StFile *f = &s->files[s->n_files];
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path)
        return rt_fail(err, errlen, "%s: out of memory", path);
    s->n_files++;
    return 0;
}

static int cmp_by_name(const void *a, const void *b) {
    return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name);
}

// Sorts the tensors by name and rejects a name held by two shards.
static int sort_tensors(StSet *s, char *err, size_t errlen) {
    if (s->n_tensors > 1)
        qsort(s->tensors, (size_t)s->n_tensors, sizeof s->tensors[0], cmp_by_name);
    for (int i = 1; i < s->n_tensors; i++) {
        const StTensor *a = &s->tensors[i - 1], *b = &s->tensors[i];
        if (strcmp(a->name, b->name) == 0)
            return rt_fail(err, errlen, "%s: tensor '%s': also in %s", s->files[b->file].path,
                           b->name, s->files[a->file].path);
    }
    return 0;
}

// Checks that a shard file name from an index stays inside the checkpoint's directory.
static int shard_name_ok(const char *name) {
    return name[0] && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

// The index file at index_path, parsed into *root.
static int read_index(const char *index_path, json_t **root, char *err, size_t errlen) {
    json_error_t je;
    struct stat st;
    int fd = rt_open_regular(index_path, &st);
    if (fd == -2)
        return rt_fail(err, errlen, "%s: not a regular file", index_path);
    if (fd < 0)
        return rt_fail(err, errlen, "%s: cannot open: %s", index_path, strerror(errno));
    if ((uint64_t)st.st_size > HEADER_MAX_BYTES) {
        close(fd);
        return rt_fail(err, errlen, "%s: %llu bytes, over the 100 MB an index may take", index_path,
                       (unsigned long long)st.st_size);
    }
    char *text = malloc((size_t)st.st_size + 1);
    int got = text ? rt_pread_full(fd, text, (size_t)st.st_size, 0) : -1;
    close(fd);
    if (got != 0) {
        rt_fail(err, errlen, "%s: cannot read: %s", index_path, text ? rt_read_errstr() : "out of memory");
        free(text);
        return -1;
    }
    *root = json_loadb(text, (size_t)st.st_size, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!*root)
        return rt_fail(err, errlen, "%s: not valid JSON: %s (line %d, column %d)", index_path,
                       je.text, je.line, je.column);
    return 0;
}

// Whether path resolves to a place outside dir (false when either cannot be resolved).
static bool leads_outside(const char *path, const char *dir) {
    char *real = realpath(path, NULL), *home = real ? realpath(dir, NULL) : NULL;
    size_t hl = home ? strlen(home) : 0;
    bool outside = real && home && !(strncmp(real, home, hl) == 0 && (real[hl] == '/' || hl == 1));
    free(real), free(home);
    return outside;
}

// The shard v that the index maps tensor name to, opened and parsed unless it already is.
static int open_shard(StSet *s, const char *index_path, const char *dir, const char *name, json_t *v,
                      char *err, size_t errlen) {
    if (!json_is_string(v) || !shard_name_ok(json_string_value(v)))
        return rt_fail(err, errlen,
                       "%s: tensor '%s': weight_map value is not a shard file name in this "
                       "directory",
                       index_path, name);
    char *path = path_join(dir, json_string_value(v));
    if (!path)
        return rt_fail(err, errlen, "%s: out of memory", index_path);
    int rc = 0, seen = 0;
    for (int i = 0; i < s->n_files && !seen; i++)
        seen = strcmp(s->files[i].path, path) == 0;
    // A shard is a file of this checkpoint: a link that leads out of the directory is
    // refused (the index names files, and only its own).
    // (One that cannot be resolved is reported by its opening below.)
    if (leads_outside(path, dir)) {
        rc = rt_fail(err, errlen, "%s: tensor '%s': shard %s leads outside the checkpoint directory",
                     index_path, name, path);
    } else if (!seen) {
        rc = add_file(s, path, err, errlen);
        if (rc == 0)
            rc = parse_file(s, s->n_files - 1, err, errlen);
    }
    free(path);
    return rc;
}

// Every tensor the weight_map names is in the shard it is mapped to, and every tensor of the
// shards is mapped.
static int check_map(const StSet *s, json_t *map, const char *index_path, const char *dir, char *err,
                     size_t errlen) {
    const char *name;
    json_t *v;
    int rc = 0;
    json_object_foreach(map, name, v) {
        if (rc)
            break;
        char *path = path_join(dir, json_string_value(v));
        if (!path) {
            rc = rt_fail(err, errlen, "%s: out of memory", index_path);
            break;
        }
        const StTensor *t = st_find(s, name);
        if (!t)
            rc = rt_fail(err, errlen, "%s: tensor '%s': mapped to %s, which does not contain it",
                         index_path, name, path);
        else if (strcmp(s->files[t->file].path, path) != 0)
            rc = rt_fail(err, errlen, "%s: tensor '%s': mapped to %s, but it is in %s", index_path,
                         name, path, s->files[t->file].path);
        free(path);
    }
    for (int i = 0; rc == 0 && i < s->n_tensors; i++)
        if (!json_object_get(map, s->tensors[i].name))
            rc = rt_fail(err, errlen, "%s: tensor '%s': not listed in the weight_map of %s",
                         s->files[s->tensors[i].file].path, s->tensors[i].name, index_path);
    return rc;
}

// Opens every shard the index at index_path names (relative to dir) and cross-checks them.
static int open_index(StSet *s, const char *index_path, const char *dir, char *err,
                      size_t errlen) {
    json_t *root;
    if (read_index(index_path, &root, err, errlen) != 0)
        return -1;
    int rc = 0;
    json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map) || json_object_size(map) == 0)
        rc = rt_fail(err, errlen, "%s: no \"weight_map\" object naming at least one tensor",
                     index_path);
    // Open each shard once, in order of first mention; s->files[i] is shard i.
    const char *name;
    json_t *v;
    json_object_foreach(map, name, v) {
        if (rc)
            break;
        rc = open_shard(s, index_path, dir, name, v, err, errlen);
    }
    if (rc == 0)
        rc = sort_tensors(s, err, errlen);
    if (rc == 0)
        rc = check_map(s, map, index_path, dir, err, errlen);
    json_decref(root);
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

// Opens the single file at path as shard 0 of s.
static int open_single(StSet *s, const char *path, char *err, size_t errlen) {
    if (add_file(s, path, err, errlen) < 0 || parse_file(s, 0, err, errlen) < 0)
        return -1;
    return sort_tensors(s, err, errlen);
}

// Opens the index file at path, whose shards sit in the same directory.
static int open_index_file(StSet *s, const char *path, char *err, size_t errlen) {
    char *dir = strdup(path);
    if (!dir)
        return rt_fail(err, errlen, "%s: out of memory", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = '\0';
    int rc = open_index(s, path, slash ? dir : ".", err, errlen);
    free(dir);
    return rc;
}

int st_open(StSet **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) < 0)
        return rt_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    StSet *s = calloc(1, sizeof *s);
    if (!s)
        return rt_fail(err, errlen, "%s: out of memory", path);
    int rc;
    if (S_ISDIR(st.st_mode)) {
        char *single = path_join(path, SINGLE_NAME), *index = path_join(path, st_index_name);
        if (!single || !index)
            rc = rt_fail(err, errlen, "%s: out of memory", path);
        else if (is_regular(single))
            rc = open_single(s, single, err, errlen);
        else if (is_regular(index))
            rc = open_index(s, index, path, err, errlen);
        else
            rc = rt_fail(err, errlen, "%s: directory holds neither %s nor %s", path, SINGLE_NAME,
                         st_index_name);
        free(single);
        free(index);
    } else if (ends_with(path, ".index.json")) {
        rc = open_index_file(s, path, err, errlen);
    } else {
        rc = open_single(s, path, err, errlen);
    }
    if (rc) {
        st_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

const StTensor *st_find(const StSet *s, const char *name) {
    int lo = 0, hi = s->n_tensors;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(s->tensors[mid].name, name);
        if (c == 0)
            return &s->tensors[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int st_count(const StSet *s) { return s->n_tensors; }

const StTensor *st_at(const StSet *s, int i) {
    return i >= 0 && i < s->n_tensors ? &s->tensors[i] : NULL;
}

const char *st_file_path(const StSet *s, int i) {
    return i >= 0 && i < s->n_files ? s->files[i].path : NULL;
}

void st_close(StSet *s) {
    if (!s)
        return;
    for (int i = 0; i < s->n_files; i++) {
        if (s->files[i].fd >= 0)
            close(s->files[i].fd);
        free(s->files[i].path);
    }
    for (int i = 0; i < s->n_tensors; i++)
        free((char *)s->tensors[i].name);
    free(s->files);
    free(s->tensors);
    free(s);
}

// ---------------------------------------------------------------------------------------------
// Reading

// Resolves t's shard; NULL with a message if t names none of s.
static const StFile *tensor_file(const StSet *s, const StTensor *t, char *err, size_t errlen) {
    if (t->file < 0 || t->file >= s->n_files || !dtype_valid(t->dtype)) {
        rt_fail(err, errlen, "tensor '%s': not a tensor of this checkpoint", t->name);
        return NULL;
    }
    return &s->files[t->file];
}

int st_read_raw(StSet *s, const StTensor *t, void *dst, size_t bytes, char *err, size_t errlen) {
    const StFile *f = tensor_file(s, t, err, errlen);
    if (!f)
        return -1;
    if (bytes != t->end - t->begin)
        return rt_fail(err, errlen, "%s: tensor '%s': holds %llu bytes, the caller expects %zu",
                       f->path, t->name, (unsigned long long)(t->end - t->begin), bytes);
    if (rt_pread_full(f->fd, dst, bytes, f->data_start + t->begin) < 0)
        return rt_fail(err, errlen, "%s: tensor '%s': cannot read: %s", f->path, t->name,
                       rt_read_errstr());
    return 0;
}

int st_read_f32(StSet *s, const StTensor *t, float *dst, int64_t n_expected, char *err,
                size_t errlen) {
    const StFile *f = tensor_file(s, t, err, errlen);
    if (!f)
        return -1;
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return rt_fail(err, errlen, "%s: tensor '%s': dtype %s cannot be read as float", f->path,
                       t->name, DTYPES[t->dtype].name);
    int64_t n = st_elems(t);
    if (n != n_expected) {
        char sh[256];
        return rt_fail(err, errlen, "%s: tensor '%s': has %lld elements %s, the model expects %lld",
                       f->path, t->name, (long long)n, shape_str(sh, sizeof sh, t->shape, t->ndim),
                       (long long)n_expected);
    }
    if (t->dtype == ST_F32)
        return st_read_raw(s, t, dst, (size_t)n * sizeof(float), err, errlen);
    uint16_t buf[CONVERT_ELEMS];
    for (int64_t i = 0; i < n; i += CONVERT_ELEMS) {
        size_t k = (size_t)(n - i < CONVERT_ELEMS ? n - i : CONVERT_ELEMS);
        if (rt_pread_full(f->fd, buf, k * 2, f->data_start + t->begin + (uint64_t)i * 2) < 0)
            return rt_fail(err, errlen, "%s: tensor '%s': cannot read: %s", f->path, t->name,
                           rt_read_errstr());
        for (size_t j = 0; j < k; j++)
            dst[i + (int64_t)j] =
                t->dtype == ST_BF16 ? cpu_bf16_to_f32(buf[j]) : cpu_f16_to_f32(buf[j]);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Writing

// Builds the header JSON of st_write, with data offsets following the layout `order`.
static json_t *build_header(const char *path, const StWrite *t, int n, const int *order,
                            const uint64_t *bytes, const char *const *kv, char *err,
                            size_t errlen) {
    json_t *root = json_object();
    if (!root) {
        rt_fail(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    if (kv) {
        json_t *meta = json_object();
        if (!meta || json_object_set_new(root, "__metadata__", meta) < 0)
            goto oom;
        for (int i = 0; kv[i]; i += 2) {
            if (!kv[i + 1]) {
                rt_fail(err, errlen, "%s: metadata key '%s' has no value", path, kv[i]);
                goto bad;
            }
            if (json_object_get(meta, kv[i])) {
                rt_fail(err, errlen, "%s: metadata key '%s' given twice", path, kv[i]);
                goto bad;
            }
            json_t *val = json_string(kv[i + 1]);
            if (!val || json_object_set_new(meta, kv[i], val) < 0) {
                rt_fail(err, errlen, "%s: metadata key '%s': key or value is not UTF-8", path,
                        kv[i]);
                goto bad;
            }
        }
    }
    uint64_t *begin = malloc((size_t)(n ? n : 1) * sizeof *begin);
    if (!begin)
        goto oom;
    uint64_t at = 0;
    for (int k = 0; k < n; k++)
        begin[order[k]] = at, at += bytes[order[k]];
    for (int i = 0; i < n; i++) {
        if (json_object_get(root, t[i].name)) {
            rt_fail(err, errlen, "%s: tensor '%s': name given twice", path, t[i].name);
            free(begin);
            goto bad;
        }
        json_t *shape = json_array(), *offs = json_array();
        json_t *e = json_object();
        int bad = !shape || !offs || !e;
        for (int d = 0; d < t[i].ndim && !bad; d++)
            bad = json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d])) < 0;
        bad = bad || json_array_append_new(offs, json_integer((json_int_t)begin[i])) < 0 ||
              json_array_append_new(offs, json_integer((json_int_t)(begin[i] + bytes[i]))) < 0 ||
              json_object_set_new(e, "dtype", json_string(DTYPES[t[i].dtype].name)) < 0;
        if (bad) {
            json_decref(shape), json_decref(offs), json_decref(e);
            free(begin);
            goto oom;
        }
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, t[i].name, e) < 0) {
            rt_fail(err, errlen, "%s: a tensor name is not valid UTF-8", path);
            free(begin);
            goto bad;
        }
    }
    free(begin);
    return root;
oom:
    rt_fail(err, errlen, "%s: out of memory", path);
bad:
    json_decref(root);
    return NULL;
}

// Checks one StWrite and returns its byte size in *bytes.
static int check_write(const char *path, const StWrite *w, uint64_t *bytes, char *err,
                       size_t errlen) {
    if (!w->name || !w->name[0])
        return rt_fail(err, errlen, "%s: a tensor has an empty name", path);
    if (strcmp(w->name, "__metadata__") == 0)
        return rt_fail(err, errlen, "%s: tensor '__metadata__': the name is reserved", path);
    if (!dtype_valid(w->dtype))
        return rt_fail(err, errlen, "%s: tensor '%s': invalid dtype %d", path, w->name,
                       (int)w->dtype);
    if (w->ndim < 0 || w->ndim > ST_MAX_DIMS || (w->ndim > 0 && !w->shape))
        return rt_fail(err, errlen,
                       "%s: tensor '%s': ndim %d is not in 0..%d, or its shape is NULL", path,
                       w->name, w->ndim, ST_MAX_DIMS);
    for (int d = 0; d < w->ndim; d++)
        if (w->shape[d] < 0)
            return rt_fail(err, errlen, "%s: tensor '%s': dimension %d is negative (%lld)", path,
                           w->name, d, (long long)w->shape[d]);
    if (shape_bytes(w->shape, w->ndim, DTYPES[w->dtype].bytes, bytes) < 0)
        return rt_fail(err, errlen, "%s: tensor '%s': shape is too large", path, w->name);
    if (*bytes && !w->data)
        return rt_fail(err, errlen, "%s: tensor '%s': data is NULL", path, w->name);
    return 0;
}

int st_write(const char *path, const StWrite *t, int n, const char *const *metadata_kv,
             char *err, size_t errlen) {
    if (n < 0 || (n > 0 && !t))
        return rt_fail(err, errlen, "%s: invalid tensor list (n = %d)", path, n);
    int *order = xmalloc((size_t)(n ? n : 1) * sizeof *order);
    uint64_t *bytes = xmalloc((size_t)(n ? n : 1) * sizeof *bytes);
    size_t tmplen = strlen(path) + 40;
    char *tmp = malloc(tmplen);
    char *header = NULL;
    json_t *root = NULL;
    int fd, rc = -1;
    if (!order || !bytes || !tmp) {
        rt_fail(err, errlen, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (check_write(path, &t[i], &bytes[i], err, errlen) < 0)
            goto done;

    // Larger elements first, stably: every tensor then starts at a multiple of its element size.
    int k = 0;
    for (size_t size = 8; size >= 1; size /= 2)
        for (int i = 0; i < n; i++)
            if (DTYPES[t[i].dtype].bytes == size)
                order[k++] = i;

    root = build_header(path, t, n, order, bytes, metadata_kv, err, errlen);
    if (!root)
        goto done;
    header = json_dumps(root, JSON_COMPACT);
    if (!header) {
        rt_fail(err, errlen, "%s: out of memory", path);
        goto done;
    }
    size_t hlen = strlen(header), padded = (hlen + 7) / 8 * 8;
    if (padded > HEADER_MAX_BYTES) {
        rt_fail(err, errlen, "%s: header of %zu bytes exceeds the 100 MB limit", path, padded);
        goto done;
    }
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)((uint64_t)padded >> (8 * i));

    fd = rt_tmp_create(path, tmp, tmplen);
    if (fd < 0) {
        rt_fail(err, errlen, "%s: cannot create a temporary file: %s", path, strerror(errno));
        goto done;
    }
    int ok = rt_write_full(fd, prefix, 8) == 0 &&
             rt_write_full(fd, header, hlen) == 0 &&
             rt_write_full(fd, "        ", padded - hlen) == 0;
    for (int j = 0; j < n && ok; j++)
        ok = rt_write_full(fd, t[order[j]].data, (size_t)bytes[order[j]]) == 0;
    ok = ok && fsync(fd) == 0;
    int saved = errno;
    if (close(fd) != 0 && ok)
        ok = 0, saved = errno;
    if (!ok) {
        rt_fail(err, errlen, "%s: cannot write: %s", path, strerror(saved));
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        rt_fail(err, errlen, "%s: cannot replace: %s", path, strerror(errno));
        unlink(tmp);
        goto done;
    }
    rc = 0;
done:
    free(header);
    json_decref(root);
    free(order);
    free(bytes);
    free(tmp);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Sharded models

void st_shard_name(char *buf, size_t len, int k, int n) {
    if (n == 1)
        snprintf(buf, len, "%s", SINGLE_NAME);
    else
        snprintf(buf, len, "model-%05d-of-%05d.safetensors", k, n);
}

// Each tensor's shard (0-based, in the order the shards are numbered) into shard[]; the
// number of shards. A shard is numbered when it is closed: the open one when the next
// tensor would take it past max, or at the end; one tensor over max at once.
static int assign_shards(const uint64_t *bytes, int n, uint64_t max, int *shard) {
    int groups = 0, open = -1, shards = 0;
    int *number = xmalloc(sizeof(int) * (size_t)(n + 1));   // a group's shard, once closed
    uint64_t filled = 0;
    for (int i = 0; i < n; i++) {
        if (bytes[i] > max) {
            shard[i] = groups, number[groups++] = shards++;
            continue;
        }
        if (open < 0 || filled + bytes[i] > max) {
            if (open >= 0)
                number[open] = shards++;
            open = groups++, filled = 0;
        }
        shard[i] = open, filled += bytes[i];
    }
    if (open >= 0)
        number[open] = shards++;
    for (int i = 0; i < n; i++)
        shard[i] = number[shard[i]];
    free(number);
    return shards;
}

// dir/model.safetensors.index.json for the n tensors t in shard[] of `shards`, atomically.
static int write_index(const char *dir, const StWrite *t, int n, const int *shard, int shards,
                       uint64_t total, char *err, size_t errlen) {
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(root, "metadata", meta);
    json_object_set_new(root, "weight_map", map);
    char name[64], path[4400], tmp[4500];
    for (int i = 0; i < n; i++) {
        st_shard_name(name, sizeof name, shard[i] + 1, shards);
        json_object_set_new(map, t[i].name, json_string(name));
    }
    snprintf(path, sizeof path, "%s/%s", dir, st_index_name);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    int fd = text ? rt_tmp_create(path, tmp, sizeof tmp) : -1;
    bool ok = fd >= 0 && rt_write_full(fd, text, strlen(text)) == 0 && rt_write_full(fd, "\n", 1) == 0 &&
              fsync(fd) == 0;
    int saved = errno;
    if (fd >= 0 && close(fd) != 0 && ok)
        ok = false, saved = errno;
    if (ok && rename(tmp, path) != 0)
        ok = false, saved = errno;
    if (!ok && fd >= 0)
        unlink(tmp);
    free(text);
    return ok ? 0 : rt_fail(err, errlen, "%s: cannot write: %s", path, text ? strerror(saved) : "out of memory");
}

// Removes the first `k` weight files of `shards` from dir (the index, written last, is
// never left by a failure).
static void unlink_shards(const char *dir, int k, int shards) {
    char name[64], path[4400];
    for (int s = 1; s <= k; s++) {
        st_shard_name(name, sizeof name, s, shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        unlink(path);
    }
}

int st_write_model(const char *dir, const StWrite *t, int n, const char *const *metadata_kv,
                   int64_t max_shard_bytes, int *shards, char *err, size_t errlen) {
    uint64_t *bytes = xmalloc(sizeof(uint64_t) * (size_t)(n + 1)), total = 0;
    int *shard = xmalloc(sizeof(int) * (size_t)(n + 1));
    StWrite *part = xmalloc(sizeof(StWrite) * (size_t)(n + 1));
    int rc = 0;
    char path[4400], name[64];
    for (int i = 0; i < n && rc == 0; i++)
        rc = check_write(dir, &t[i], &bytes[i], err, errlen), total += bytes[i];
    *shards = rc == 0 ? assign_shards(bytes, n, (uint64_t)max_shard_bytes, shard) : 0;
    if (*shards == 0)   // no tensor: one empty file
        *shards = 1;
    int done = 0;
    for (; rc == 0 && done < *shards; done++) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (shard[i] == done || *shards == 1)
                part[k++] = t[i];
        st_shard_name(name, sizeof name, done + 1, *shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        rc = st_write(path, part, k, metadata_kv, err, errlen);
    }
    if (rc == 0 && *shards > 1)
        rc = write_index(dir, t, n, shard, *shards, total, err, errlen);
    if (rc != 0)
        unlink_shards(dir, done, *shards);
    free(bytes), free(shard), free(part);
    return rc;
}
