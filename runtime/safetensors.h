// safetensors.h: reads and writes Hugging Face safetensors checkpoints.
//
// A safetensors file is an 8-byte little-endian u64 header length N, then N bytes of JSON
//   {"__metadata__": {"key": "value", ...},                      (optional, strings only)
//    "<name>": {"dtype": "BF16", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
// (space-padded), then the data section: each tensor's bytes, little-endian, row-major, at
// [begin, end) relative to the start of the data section.
//
// A checkpoint (StSet) is one such file, or the shards named by a model.safetensors.index.json
// ({"weight_map": {"<name>": "<shard file>", ...}}). Opening validates every header completely
// (see st_open); reads go through pread, so multi-GB files are never loaded whole and nothing
// is mapped. Host byte order must be little-endian (every platform ftc targets).
//
// Errors: every function returning int returns 0 on success and -1 on error, with a one-line
// message in err (errlen bytes, truncated to fit; err may be NULL when errlen is 0) that names
// the file and, where one is involved, the tensor:
//   model.safetensors: tensor 'lm_head.weight': data_offsets [0, 100] exceed the file's data
//   section (64 bytes)
#ifndef FTC_RUNTIME_SAFETENSORS_H
#define FTC_RUNTIME_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

// Element types ftc reads and writes; any other dtype in a header is an error. Spelled in
// headers as "F32", "BF16", "F16", "I32", "I64", "U8".
typedef enum {
    ST_F32,  // IEEE binary32, 4 bytes
    ST_BF16, // bfloat16, 2 bytes
    ST_F16,  // IEEE binary16, 2 bytes
    ST_I32,  // two's-complement int32, 4 bytes
    ST_I64,  // two's-complement int64, 8 bytes
    ST_U8,   // uint8, 1 byte
} StDType;

enum { ST_MAX_DIMS = 8 }; // more dimensions than this is an error

// One tensor of an opened checkpoint. Owned by its StSet; valid until st_close.
typedef struct StTensor {
    const char *name;            // as in the header, e.g. "model.layers.0.mlp.up_proj.weight"
    StDType dtype;
    int ndim;                    // 0 (a scalar) .. ST_MAX_DIMS
    int64_t shape[ST_MAX_DIMS];  // shape[0..ndim); the rest are 0
    uint64_t begin, end;         // byte range relative to the data section of shard `file`
    int file;                    // index of the shard holding it (0 for a single file)
} StTensor;

// An opened checkpoint: its shards' open descriptors and every tensor, sorted by name.
typedef struct StSet StSet;

// Returns the bytes of one element of dtype d (0 for a value outside StDType).
size_t st_dtype_bytes(StDType d);
// Returns the header spelling of dtype d ("F32", "BF16", ...; "?" for a value outside StDType).
const char *st_dtype_name(StDType d);
// Returns the element count of t (the product of its shape; 1 for a scalar).
int64_t st_elems(const StTensor *t);

// Opens the checkpoint at path into *out: a .safetensors file, or a directory holding
// model.safetensors (preferred) or model.safetensors.index.json and every shard it names.
// Rejects a header length of 0, over 100 MB or past the end of the file; JSON that does not
// parse, has duplicate keys or is not an object of objects; a non-string-valued __metadata__;
// an unknown dtype; a shape that is not a list of at most ST_MAX_DIMS non-negative integers;
// data_offsets that are not [begin, end] with begin <= end, whose size is not elems * dtype
// size, or that exceed the data section; tensors whose byte ranges overlap; a tensor name in
// two shards; an index naming a tensor its shard lacks, or a shard holding a tensor the index
// does not map to it. Gaps between tensors are allowed. *out is NULL after an error.
int st_open(StSet **out, const char *path, char *err, size_t errlen);

// Returns the tensor called name in s, or NULL if there is none (binary search).
const StTensor *st_find(const StSet *s, const char *name);
// Returns the number of tensors in s, over all shards.
int st_count(const StSet *s);
// Returns tensor i of s, 0 <= i < st_count(s), in strcmp order of name.
const StTensor *st_at(const StSet *s, int i);
// Returns the path of shard i of s (t->file of its tensors), for messages.
const char *st_file_path(const StSet *s, int i);

// Reads tensor t of s into dst as floats, widening BF16 and F16 exactly; an error if t has
// another dtype, if its element count is not n_expected (the message shows the shape), or if
// the file cannot be read.
int st_read_f32(StSet *s, const StTensor *t, float *dst, int64_t n_expected, char *err,
                size_t errlen);

// Copies the raw little-endian bytes of tensor t of s into dst; an error if bytes is not the
// tensor's byte size (end - begin) or the file cannot be read.
int st_read_raw(StSet *s, const StTensor *t, void *dst, size_t bytes, char *err, size_t errlen);

// Closes the shards of s and frees it and its tensors; s may be NULL.
void st_close(StSet *s);

// One tensor to write: data holds elems * st_dtype_bytes(dtype) bytes, little-endian,
// row-major (it may be NULL when the tensor has no elements).
typedef struct StWrite {
    const char *name;
    StDType dtype;
    int ndim;              // 0 .. ST_MAX_DIMS
    const int64_t *shape;  // (ndim); may be NULL when ndim is 0
    const void *data;
} StWrite;

// Writes the n tensors t to a safetensors file at path, atomically (a temporary file in the
// same directory, fsynced, then renamed over path; mode 0644). metadata_kv is NULL or a
// NULL-terminated list key, value, key, value, ... stored as "__metadata__". The header lists
// the tensors in the order given and is space-padded to a multiple of 8 bytes; the data
// section stores them without gaps (as the Python loader requires), ordered by element size
// descending and stably otherwise, so every tensor starts aligned to its element size, as the
// Python library does. Rejects an empty, duplicate or "__metadata__" name, a name that is not
// UTF-8, a bad dtype or ndim, a negative dimension, NULL data for a non-empty tensor, a
// metadata key without a value, and any I/O failure (nothing is left at path then).
int st_write(const char *path, const StWrite *t, int n, const char *const *metadata_kv,
             char *err, size_t errlen);

// Writes the n tensors t into directory dir as a model's weights, sharded as transformers'
// save_pretrained shards them: all into dir/model.safetensors when their bytes are at most
// max_shard_bytes; else into dir/model-00001-of-0000N.safetensors ... and
// dir/model.safetensors.index.json ({"metadata": {"total_size": B}, "weight_map": {name:
// shard}}). Shards are filled greedily in the order given, each tensor whole: a tensor goes
// into the open shard unless it would take it past max_shard_bytes (then a new one opens),
// and a tensor larger than max_shard_bytes alone is a shard of its own, numbered when it is
// met (before the open shard, numbered when it closes), as huggingface_hub numbers them.
// Every file is written as st_write writes one; after an error none of them is left. The
// number of weight files into *shards (1: model.safetensors alone, no index).
int st_write_model(const char *dir, const StWrite *t, int n, const char *const *metadata_kv,
                   int64_t max_shard_bytes, int *shards, char *err, size_t errlen);

// The name of weight file k (1-based) of n that st_write_model writes:
// "model-00001-of-00003.safetensors", or "model.safetensors" when n is 1.
void st_shard_name(char *buf, size_t len, int k, int n);

// The name of a sharded model's index file, "model.safetensors.index.json".
extern const char st_index_name[];

#endif
