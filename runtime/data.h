// data.h: training data as an "ftc token file", and its reader, converter and shuffler.
//
// The ftc token file format (version 1), all integers little-endian:
//   offset  size  field
//        0     8  magic "FTCTOKEN" (ASCII, no terminator)
//        8     4  u32 version = 1
//       12     4  u32 bytes per token, 2 (uint16 tokens) or 4 (uint32 tokens)
//       16     8  u64 token count T
//       24     8  u64 reserved, must be 0
//       32  T*w   the tokens, each w bytes, little-endian, unsigned
// The file is exactly 32 + T * w bytes.
//
// Training reads it in windows of seq+1 tokens (inputs are the first seq, targets the last seq):
// window i starts at token i*seq, so consecutive windows share one token and every token but
// the first is a target exactly once. Windows are read with pread; the file is never loaded
// whole. Reading validates each token against the model's vocabulary size.
//
// Errors: every function returning int returns 0 on success and -1 on error, with a one-line
// message in err (errlen bytes, truncated to fit; err may be NULL when errlen is 0) naming the
// file, e.g. "train.tok: token 1234 is 50257, not below the vocabulary size 50257".
#ifndef FTC_RUNTIME_DATA_H
#define FTC_RUNTIME_DATA_H

#include <stddef.h>
#include <stdint.h>

enum {
    DATA_HEADER_BYTES = 32, // the header before the tokens
    DATA_VERSION = 1,       // the only version this build reads and writes
};

// How data_convert reads its input.
typedef enum {
    DATA_BYTES, // any file, one token per byte (vocab 256), stored 2 bytes per token
    DATA_U16,   // raw little-endian uint16 tokens (size a multiple of 2), stored 2 bytes per token
    DATA_U32,   // raw little-endian uint32 tokens (size a multiple of 4), stored 4 bytes per token
} DataMode;

// An opened token file.
typedef struct DataFile DataFile;

// Opens the token file at path into *out, rejecting a file shorter than the header, a wrong
// magic, a version other than 1, a width other than 2 or 4, a non-zero reserved field, and a
// size other than 32 + count * width (truncated or trailing bytes). *out is NULL after an error.
int data_open(DataFile **out, const char *path, char *err, size_t errlen);

// Returns the number of tokens in d.
uint64_t data_count(const DataFile *d);
// Returns the bytes per token of d (2 or 4).
int data_token_bytes(const DataFile *d);
// Returns the path d was opened with.
const char *data_path(const DataFile *d);

// Sets *n to the number of windows of seq+1 tokens in d, (count - 1) / seq; an error if seq < 1
// or d holds fewer than seq+1 tokens (*n is 0 then).
int data_window_count(const DataFile *d, int seq, uint64_t *n, char *err, size_t errlen);

// Reads window `window` of seq+1 tokens (tokens window*seq .. window*seq+seq) into out; an
// error if the window is past the last one, seq < 1, vocab < 1, the file cannot be read, or a
// token is >= vocab (naming the token's index in the file). out is unspecified after an error.
int data_read_window(DataFile *d, uint64_t window, int seq,
                     int32_t *out, // (seq+1)
                     int32_t vocab, char *err, size_t errlen);

// Checks every token of d against vocab in one pass, so that a bad id anywhere is found
// before training starts rather than when its window is drawn; the error names the first
// (its index in the file and its value), as data_read_window's does.
int data_check_vocab(DataFile *d, int32_t vocab, char *err, size_t errlen);

// Closes d and frees it; d may be NULL.
void data_close(DataFile *d);

// Fills order with a permutation of 0..n-1 determined by seed alone: Fisher-Yates from the end
// (i = n-1 .. 1 swaps i with j uniform in [0, i]), j drawn from splitmix64 seeded with seed by
// rejection sampling, so every platform gives the same order.
void data_shuffle(uint64_t *order, // (n)
                  uint64_t n, uint64_t seed);

// Converts in_path to a token file at out_path (written atomically: a temporary file in the same
// directory, fsynced, then renamed; mode 0644) reading it as mode says, and sets *n_tokens (may
// be NULL) to the token count. An error if mode is invalid, the input cannot be read or is
// empty, a raw input's size is not a multiple of its token width, or the output cannot be
// written (nothing is left at out_path then). The input is streamed, so it may be a pipe.
int data_convert(const char *in_path, const char *out_path, DataMode mode, uint64_t *n_tokens,
                 char *err, size_t errlen);

#endif
