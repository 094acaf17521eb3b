// data.h: training data as an "ftc token file", and its reader, writer, converter and shuffler.
//
// The ftc token file format, version 2, all integers little-endian:
//   offset  size  field
//        0     8  magic "FTCTOKEN" (ASCII, no terminator)
//        8     4  u32 version = 2
//       12     4  u32 bytes per token, 2 (uint16 tokens) or 4 (uint32 tokens)
//       16     8  u64 token count T
//       24     8  u64 flags: bit 0 (DATA_HAS_INFO) T info bytes follow the tokens; bit 1
//                 (DATA_PAIRED) the windows are preference pairs (below); no other bit
//       32     8  u64 window: the seq the records were packed for (no record crosses a multiple
//                 of it, ftc data --pack), or 0
//       40     8  u64 the number of records the tokens came from (0 when not known)
//       48    16  reserved, must be 0
//       64  T*w   the tokens, each w bytes, little-endian, unsigned
//  64+T*w     T   with DATA_HAS_INFO, one byte per token: bit 0 (DATA_TRAIN) the token is a
//                 target the loss counts (its prediction from the token before it is trained),
//                 bit 1 (DATA_START) it begins a record; no other bit
// The file is exactly 64 + T * w (+ T) bytes. Without info bytes every token is trained.
// A paired file (DATA_PAIRED, ftc data of preference records) has info bytes and a window W,
// and T = 2 P W + 1: its windows come in pairs, window 2i the chosen and 2i+1 the rejected
// sequence of pair i, each holding one record from its start (padding after it, a record of
// its own, never trained); the record count is P, the pairs. Readers of version 2 before
// pairs refuse the flag.
// Version 1 files are read too: the same first 24 bytes with version 1, then a reserved u64
// that must be 0, the tokens from offset 32 (no info, window or record count).
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    DATA_HEADER_BYTES = 64,    // the header before the tokens
    DATA_HEADER_BYTES_V1 = 32, // ... of a version 1 file
    DATA_VERSION = 2,          // the version written; 1 and 2 are read
    DATA_HAS_INFO = 1,         // header flag: info bytes follow the tokens
    DATA_PAIRED = 2,           // header flag: the windows are chosen/rejected pairs
    DATA_TRAIN = 1,            // info bit: the token is a trained target
    DATA_START = 2,            // info bit: the token begins a record
};

// How data_convert reads its input.
typedef enum {
    DATA_BYTES, // any file, one token per byte (vocab 256), stored 2 bytes per token
    DATA_U16,   // raw little-endian uint16 tokens (size a multiple of 2), stored 2 bytes per token
    DATA_U32,   // raw little-endian uint32 tokens (size a multiple of 4), stored 4 bytes per token
} DataMode;

// An opened token file.
typedef struct DataFile DataFile;

// Opens the token file at path into *out, rejecting a file shorter than its header, a wrong
// magic, a version other than 1 or 2, a width other than 2 or 4, an unknown flag, a non-zero
// reserved field, and a size other than the header, tokens and info bytes (truncated or
// trailing bytes); a paired file without info bytes, without a window, or whose tokens are
// not an even number of windows and one token. *out is NULL after an error.
int data_open(DataFile **out, const char *path, char *err, size_t errlen);

// Returns the number of tokens in d.
uint64_t data_count(const DataFile *d);
// Returns the bytes per token of d (2 or 4).
int data_token_bytes(const DataFile *d);
// Returns the path d was opened with.
const char *data_path(const DataFile *d);
// Whether d has info bytes (a loss mask and record starts).
bool data_has_info(const DataFile *d);
// The seq d's records were packed for, or 0.
uint64_t data_packed_window(const DataFile *d);
// The number of records d's tokens came from (a paired file: its pairs), or 0 when not known.
uint64_t data_records(const DataFile *d);
// Whether d's windows are preference pairs (DATA_PAIRED): 2i chosen, 2i+1 rejected.
bool data_paired(const DataFile *d);

// Sets *n to the number of windows of seq+1 tokens in d, (count - 1) / seq; an error if seq < 1
// or d holds fewer than seq+1 tokens (*n is 0 then).
int data_window_count(const DataFile *d, int seq, uint64_t *n, char *err, size_t errlen);
// A fingerprint of the file (its size and 64 samples of 4 KiB spread over it, the first and
// the last included), for a checkpoint to say which data it trained on: cheap on any size,
// different for any two files that differ in size or in a sampled byte. 0 when unreadable.
uint64_t data_fingerprint(const DataFile *d);

// Reads window `window` of seq+1 tokens (tokens window*seq .. window*seq+seq) into out, and
// their info bytes into info unless it is NULL (DATA_TRAIN for every token of a file without
// them); an error if the window is past the last one, seq < 1, vocab < 1, the file cannot be
// read, or a token is >= vocab (naming the token's index in the file). out and info are
// unspecified after an error.
int data_read_window(DataFile *d, uint64_t window, int seq,
                     int32_t *out,  // (seq+1)
                     uint8_t *info, // (seq+1) or NULL
                     int32_t vocab, char *err, size_t errlen);

// Sets *n to the number of trained targets of window `window` (its tokens 1 .. seq with
// DATA_TRAIN; seq for a file without info bytes), reading only info bytes; errors as
// data_read_window's.
int data_window_trained(DataFile *d, uint64_t window, int seq, uint64_t *n, char *err, size_t errlen);

// Checks every token of d against vocab, and every info byte for bits other than DATA_TRAIN
// and DATA_START, in one pass, so that a bad id anywhere is found before training starts
// rather than when its window is drawn; the error names the first (its index in the file and
// its value), as data_read_window's does, and that every window of a paired file begins a
// record. Sets *trained (may be NULL) to the number of tokens
// after the first that are trained targets.
int data_check_vocab(DataFile *d, int32_t vocab, uint64_t *trained, char *err, size_t errlen);

// Closes d and frees it; d may be NULL.
void data_close(DataFile *d);

// Fills order with a permutation of 0..n-1 determined by seed alone: Fisher-Yates from the end
// (i = n-1 .. 1 swaps i with j uniform in [0, i]), j drawn from splitmix64 seeded with seed by
// rejection sampling, so every platform gives the same order.
void data_shuffle(uint64_t *order, // (n)
                  uint64_t n, uint64_t seed);

// Writing a token file: tokens (and their info bytes) are streamed into a temporary file beside
// the output (PATH.tmp.PID.XXXXXX, mode 0644; the info bytes into a second, unnamed one), which
// data_writer_close completes, fsyncs and renames into place; nothing is left at the path when
// it fails or the writer is dropped.
typedef struct DataWriter DataWriter;

// Starts writing a token file of token_bytes (2 or 4) a token, with info bytes when info.
int data_writer_open(DataWriter **out, const char *path, int token_bytes, bool info, char *err,
                     size_t errlen);
// Appends n tokens (each below 2^(8 token_bytes)) and, when the writer takes them, their info
// bytes.
int data_writer_put(DataWriter *w, const int32_t *ids, const uint8_t *info, size_t n, char *err,
                    size_t errlen);
// The tokens written so far.
uint64_t data_writer_count(const DataWriter *w);
// Marks the file being written paired (DATA_PAIRED): the caller writes each sequence into a
// window of its own, chosen then rejected, and closes it with that window and the pairs.
void data_writer_pairs(DataWriter *w);
// Completes the file with the header's window and record count and renames it into place;
// frees w, whatever happens. A paired file needs info bytes and a window.
int data_writer_close(DataWriter *w, uint64_t window, uint64_t records, char *err, size_t errlen);
// Drops the file being written (nothing is left at its path) and frees w; w may be NULL.
void data_writer_drop(DataWriter *w);

// Converts in_path to a token file at out_path (version 2 without info bytes; written
// atomically as a DataWriter does) reading it as mode says, and sets *n_tokens (may be NULL)
// to the token count. An error if mode is invalid, the input cannot be read or is
// empty, a raw input's size is not a multiple of its token width, or the output cannot be
// written (nothing is left at out_path then). The input is streamed, so it may be a pipe.
int data_convert(const char *in_path, const char *out_path, DataMode mode, uint64_t *n_tokens,
                 char *err, size_t errlen);

#endif
