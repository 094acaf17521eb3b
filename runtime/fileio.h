// fileio.h — whole reads and writes on file descriptors, and the error-message helper, shared
// by the runtime's readers and writers (safetensors, token files).
#ifndef FTC_RUNTIME_FILEIO_H
#define FTC_RUNTIME_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

// Reads exactly n bytes at offset off; -1 with errno set, or errno 0 at end of file.
int rt_pread_full(int fd, void *dst, size_t n, uint64_t off);
// A regular file's whole contents (malloc'd, with a NUL after them) and their size in
// *bytes; NULL with errno set when it cannot be read.
char *rt_read_whole(const char *path, size_t *bytes);
// The host memory available to a new allocation (MemAvailable), in bytes; -1 unknown.
int64_t rt_host_available(void);
// Opens path for reading only if it is a regular file (a FIFO would block, a device never
// end): the descriptor, with *st filled; -1 with errno set when it cannot be opened, -2
// when it is something other than a regular file (closed again).
int rt_open_regular(const char *path, struct stat *st);
// Removes the entries of dir that `ours` accepts (by name; NULL: all of them; a directory
// with everything in it, a link not followed), then dir itself if that left it empty. What
// it holds besides is never touched.
void rt_remove_dir(const char *dir, bool (*ours)(const char *name));
// Removes, through drop(entry path), what processes that are gone left beside path:
// entries named BASENAME + tag + PID for one of the tags (e.g. ".tmp."), then "." and
// more when `more`, else nothing.
void rt_clean_leftovers(const char *path, const char *const *tags, int ntags, bool more,
                        void (*drop)(const char *entry));
// A new temporary file beside path, named PATH.tmp.PID.XXXXXX (unique, and naming the
// process that writes it), opened for writing with mode 0644: the descriptor, its name
// in tmp (len bytes); -1 with errno set. What dead processes left under such names beside
// path (a killed save) is removed first.
int rt_tmp_create(const char *path, char *tmp, size_t len);
// Writes exactly n bytes; -1 with errno set.
int rt_write_full(int fd, const void *src, size_t n);
// Copies the regular file `from` to `to` (created or truncated, mode 0644); -1 with err.
int rt_copy_file(const char *from, const char *to, char *err, size_t errlen);
// A message for the last failed read: strerror(errno), or "the file ended early".
const char *rt_read_errstr(void);
// Formats the message fmt, ... into err (errlen bytes, truncated to fit; nothing is written when
// err is NULL or errlen is 0) and returns -1, so an error path reads
// `return rt_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));`.
int rt_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// FNV-1a, 64 bits: folds n bytes at p into h (start from RT_FNV_BASIS). Cache keys.
#define RT_FNV_BASIS 0xcbf29ce484222325ull
uint64_t rt_fnv1a64(uint64_t h, const void *p, size_t n);
// ftc's cache directory for `what` ("nvrtc", "emu") into buf: $FTC_CACHE_DIR/what, else
// $XDG_CACHE_HOME/ftc/what, else $HOME/.cache/ftc/what. 0, or -1 when none is set or the
// path does not fit. It may not exist yet: rt_mkdir_p makes it.
int rt_cache_path(const char *what, char *buf, size_t len);
// mkdir -p: dir and its missing parents; 0, or -1 with errno set.
int rt_mkdir_p(const char *dir);

#endif
