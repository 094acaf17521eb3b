// runtime.h — executes plans: backends, the executor, weights, the training loop.
// Never includes anything of the compiler: plan.h is the whole contract.
#ifndef FTC_RUNTIME_H
#define FTC_RUNTIME_H

#include "plan.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct Exec Exec;
typedef struct Comm Comm;   // comm.h: the ranks of a data-parallel job

//
// The backend contract. A backend is one table of function pointers (ggml-backend
// style): memory of each kind, synchronous get/set for the runtime's own reads and
// writes, stream-ordered copies, fills and kernel launches, and events between
// streams. The executor, weight loading and the training loop reach memory only
// through it; the cpu backend fills every entry (streams run in plan order there),
// and a GPU backend fills the same table.
//

typedef struct Backend Backend;
struct Backend {
    const char *name;       // for people: "cpu", "emu", "cuda"
    bool host_addressable;  // its arenas are host memory (the CPU's backends)
    // Checks that every instruction of `p` this backend will launch has a kernel here
    // (instructions on `stream`, or all when stream < 0); -1 with err if not.
    int (*prepare)(Backend *b, const Plan *p, int stream, char *err, size_t errlen);
    // Memory of `kind`, zeroed; NULL when it cannot be had.
    void *(*alloc)(Backend *b, MemKind kind, int64_t bytes);
    void (*free)(Backend *b, MemKind kind, void *p);
    // Host memory to memory of `kind` and back; complete when they return.
    void (*set)(Backend *b, MemKind kind, void *dst, const void *src, int64_t bytes);
    void (*get)(Backend *b, MemKind kind, void *dst, const void *src, int64_t bytes);
    // Fills `bytes` at dst with a repeated 1-, 2- or 4-byte pattern, on `stream`, after all
    // the work issued before it on every stream (the executor's poison: a dead buffer's
    // last user need not come after all its readers).
    void (*fill)(Backend *b, MemKind kind, void *dst, uint32_t pattern, int pattern_bytes,
                 int64_t bytes, Stream stream);
    // A plan copy: `bytes` from src (of kind sk) to dst (of kind dk), on `stream`.
    void (*copy)(Backend *b, void *dst, MemKind dk, const void *src, MemKind sk, int64_t bytes,
                 Stream stream);
    // Runs instruction `in` on its stream with the executor's buffers; -1 with err.
    int (*launch)(Backend *b, Exec *x, const PlanInstr *in, char *err, size_t errlen);
    // True when host-stream instructions, fills and events also go through this backend,
    // which runs them in host-stream order on the executor's host backend, possibly on
    // another thread while the caller goes on (a GPU backend overlaps CPU AdamW with the
    // device's work). False: the executor runs host instructions itself, in plan order.
    bool host_queue;
    void (*event_record)(Backend *b, int event, Stream stream);  // (optional)
    void (*event_wait)(Backend *b, Stream stream, int event);    // (optional)
    // Runs collective `in` (the first of its bucket: the whole bucket) on the comm stream,
    // over the ranks of x->comm. (optional) NULL: the executor runs it through x->comm on
    // memory the CPU addresses, in plan order.
    int (*collective)(Backend *b, Exec *x, const PlanInstr *in, char *err, size_t errlen);
    // (optional) A timing mark `slot` on `stream`, after the work issued on it so far; and,
    // once the streams are drained, the milliseconds from mark a to mark b. A backend whose
    // launches return when their work is done leaves both NULL: the profiler times the calls.
    void (*time_mark)(Backend *b, int slot, Stream stream);
    double (*time_between)(Backend *b, int from, int to);
    // Drains every stream (host work included); -1 with err when work done asynchronously
    // since the last drain failed.
    int (*sync)(Backend *b, char *err, size_t errlen);
    // (optional) The host-to-device rate from x's host arena to its device arena, bytes
    // per second, timed now (on up to 64 MiB: before any buffer holds data); 0 when x's
    // arenas are not both planned. NULL where host and device memory are one.
    double (*link_rate)(Backend *b, const Exec *x);
    // (optional) The device's total and free memory and its name, now; false when it
    // cannot say. NULL where the arenas are host memory.
    bool (*memory)(Backend *b, int64_t *total, int64_t *free_bytes, char *name, size_t namelen);
    // (optional) Runs phase ph of x as a graph: the first time (per phase, and per last
    // micro-step or not), what `issue` gives the streams is captured, not run, and the graph
    // made of it launched; after that the graph alone is launched, its nodes that read a
    // scalar of the micro-step (rt_args_vary) given the current one. 1: launched; 0:
    // declined (the executor issues the phase itself, as from then on); -1 with err.
    int (*run_phase)(Backend *b, Exec *x, PlanPhase ph,
                     int (*issue)(Exec *x, PlanPhase ph, char *err, size_t errlen), char *err,
                     size_t errlen);
    void (*destroy)(Backend *b);
    void *state;
};

// cpu/backend.c — the reference backend: plain memory for every kind, kernels in fp32
// (kernels.c), streams executed in plan order.
Backend *rt_cpu_backend(void);

// cuda/backend.c — a GPU through the CUDA driver and cuBLASLt (cuda/cuda.h): the plan's
// kernels from its CUBIN (or NVRTC for this GPU's architecture), GEMMs by cuBLASLt with
// the plan's workspaces, a stream per plan stream and the plan's events, host-stream work
// on a worker thread. `api` is the libraries' tables (NULL: load them with dlopen); the
// device is rt_cuda_ordinal's for the process's local rank (0 for one rank). NULL with err
// when there is no usable GPU, or when the plan cannot fit its free memory (preflight: the
// message says by how much and how to re-plan).
struct CudaApi;
Backend *rt_cuda_backend(const char *plan_dir, const Plan *p, const struct CudaApi *api, int local_rank,
                         char *err, size_t errlen);
// The device ordinal of a rank of a node among the `count` GPUs its process sees: the only
// one where a launcher bound each rank to its GPU (CUDA_VISIBLE_DEVICES per rank, srun
// --gpus-per-task, --gpu-bind), else the local rank's; -1 with err when the rank has none.
int rt_cuda_ordinal(int local_rank, int count, char *err, size_t errlen);
// Makes the cuda backend one rank of comm's job: NCCL (`api`, NULL: libnccl.so.2 with
// dlopen), its communicator from rank 0's unique id broadcast over comm; the plan's
// collectives then run on the comm stream. Nothing to do for one rank; -1 with err.
struct NcclApi;
int rt_cuda_set_comm(Backend *b, Comm *comm, const struct NcclApi *api, char *err, size_t errlen);
// 1 when the CUDA driver and cuBLASLt load and the driver sees a GPU; 0 when there is no
// driver; -1 when there is one but no usable GPU (why says what failed).
int rt_cuda_probe(char *why, size_t len);
// The GPU as the driver reports it: its name, compute capability, the driver's version and
// where the kernels came from (the plan's CUBIN, NVRTC's, PTX); false for other backends.
bool rt_cuda_describe(Backend *b, char *buf, size_t len);
// A line for each distinct product the cuda backend runs: its shape and dtypes, cuBLASLt's
// algorithm (id, tile, split-k, stages), the alignment it was chosen for and its workspace.
void rt_cuda_gemm_report(Backend *b, FILE *out);
// Before step one, with x's arenas placed and nothing loaded into them: each distinct
// product's first cuBLASLt candidates timed on the GPU and the fastest kept, or the choice
// cached for this GPU by an earlier run (gemm_cache.h); note gets a line saying what was
// done ("" when nothing). Nothing for other backends.
void rt_cuda_tune_gemms(Backend *b, const Exec *x, char *note, size_t len);
// Every instruction waited for and checked as it is issued, a fault named by it (its
// kernel, its .ft line); nothing for other backends.
void rt_cuda_sync_check(Backend *b, bool on);
// How many of the executor's fills of dead pinned memory on a device stream (--poison)
// held their issue for a host instruction queued on that memory; *fills: such fills,
// *queued: those issued while any host work was queued (-1 for other backends).
int rt_cuda_fill_waits(Backend *b, int *fills, int *queued);

// emu/backend.c — the plan's generated kernels (DIR/kernels.cu) compiled by the host C
// compiler against DIR/ftc_emu.h (the CUDA execution model on the CPU) and launched as
// the plan says; GEMMs, memory and copies are the cpu backend's. NULL with err when the
// kernels do not compile or load.
Backend *rt_emu_backend(const char *plan_dir, char *err, size_t errlen);
// The same kernels alone (a simulated GPU in tests uses them): compiled and loaded, then
// launched by name with `smem` bytes of dynamic shared memory and a KernelArgs or, for a
// grouped kernel, a KernelGroupArgs (kernel_args.h); -1 with err on a failed launch.
typedef struct EmuKernels EmuKernels;
EmuKernels *rt_emu_kernels_open(const char *plan_dir, char *err, size_t errlen);
int rt_emu_kernels_launch(EmuKernels *k, const char *name, const unsigned grid[3],
                          const unsigned block[3], unsigned smem, const void *args, bool group,
                          char *err, size_t errlen);
void rt_emu_kernels_close(EmuKernels *k);
// 1 when kernel `name` is a grouped one (launched with KernelGroupArgs), 0 when plain, -1
// when there is no such kernel.
int rt_emu_kernels_kind(const EmuKernels *k, const char *name);

//
// exec.c — arenas, buffer addresses, phases.
//

typedef enum ExecLayout {
    LAYOUT_PLANNED,     // one allocation per arena, every buffer at its planned offset
    LAYOUT_UNPLANNED,   // every buffer its own allocation (the reference for equivalence)
} ExecLayout;

struct Exec {
    const Plan *plan;
    Backend *be;            // owns the memory; runs device kernels and copies
    Backend *host;          // runs host-stream instructions on host-arena buffers
    ExecLayout layout;
    void *arena[ARENA_COUNT];
    void **ptr;             // per buffer: its address in its arena's memory (a view: its base's)
    int *root;              // per buffer: the buffer owning its bytes (plan_roots)
    uint64_t seed;          // dropout and initialisation
    int64_t step;           // training steps taken (1-based inside the step): the data
                            // order, dropout masks and saved files follow it
    int64_t skipped;        // steps whose update was skipped (--skip-nonfinite): AdamW's
                            // bias correction counts the step - skipped updates taken
    int64_t micro;          // the micro-batch within the step's global batch (over every
                            // rank: micro-step m of rank r is m·ranks + r): data and dropout
    bool last;              // the step's last micro-step on this rank: last=1 instructions run
    Comm *comm;             // the job's ranks (rt_exec_set_comm); NULL: one process
    int rank;               // this process's rank (shard views are its slices)
    double lr;              // this step's learning rate (the plan's schedule; rt_lr_at)
    double loss_scale;      // the loss's backward is scaled by it, the gradients unscaled
                            // (fp16's dynamic loss scale; 1 otherwise)
    int64_t scale_tracker;  // steps since the loss scale last changed without an overflow
    bool poison;            // fill a buffer's bytes with NaN when its lifetime ends
    uint64_t data_print;    // the training data's fingerprint (data_fingerprint), which a
                            // checkpoint records and rt_checkpoint_load sets (0: none)
    struct Profile *prof;   // the device work's times (ftc run --profile; profile.c), or NULL
    bool graphs;            // a backend that can may run phases as graphs (Backend.run_phase;
                            // rt_exec_init sets it, ftc run --no-graphs clears it)
    uint8_t *source_dtype;  // per buffer: 1 + the StDType its --weights tensor had (a save
                            // writes it so; 0 or NULL: fp32), from rt_weights_load
    const char *plan_dir;   // the plan's directory: its config.json (the compiler's) goes
                            // into a save whose weights came with none
    char base_model[4096];  // the directory of the weights a LoRA run started from (its
                            // adapter_config.json's base_model_name_or_path), or ""
};

// Allocates the buffers of `p` through `be`, host instructions to run on `host`, with
// `layout`; -1 with err.
int rt_exec_init(Exec *x, const Plan *p, Backend *be, Backend *host, ExecLayout layout,
                 char *err, size_t errlen);
void rt_exec_free(Exec *x);
// Makes x one rank of comm's job: its shard views point at this rank's slices, and the
// plan's collectives run over comm's ranks (through the backend's collective entry, or
// comm on host-addressable memory).
void rt_exec_set_comm(Exec *x, Comm *comm);
// Runs every instruction of phase `ph` (waits, launch or copy, record), then drains
// the streams; -1 with err naming the instruction.
int rt_exec_phase(Exec *x, PlanPhase ph, char *err, size_t errlen);
// Runs phase ph as rt_exec_phase does, draining the device after every instruction and
// reading its floating-point outputs, and stops at the first instruction that writes a
// NaN or an infinity: *bad is that instruction and *out the buffer (NULL, -1 when none
// does). For diagnosis (a non-finite loss), not speed.
int rt_exec_phase_find_nonfinite(Exec *x, PlanPhase ph, const PlanInstr **bad, int *out, char *err,
                                 size_t errlen);
// Runs one instruction (waits, launch or copy, record), without draining the streams or
// poisoning: tests that compare backends instruction by instruction; -1 with err.
int rt_exec_instr(Exec *x, const PlanInstr *in, char *err, size_t errlen);
// The memory kind of buffer `id`.
MemKind rt_buf_kind(const Exec *x, int id);
// The random stream of instruction `in` in this micro-step (dropout): keyed by the run's
// seed, the step, the micro-step and the site (the plan's seed=), so a recompute of the
// node draws the same mask, on every backend.
uint64_t rt_random_stream(const Exec *x, const PlanInstr *in);
// Reads buffer `id` as fp32 values into dst (converting bf16/f16, dequantising NF4).
void rt_read_f32(const Exec *x, int id, float *dst);
// Writes fp32 values into buffer `id` (rounding to its dtype; NF4 quantises).
void rt_write_f32(Exec *x, int id, const float *src);
// Copies buffer `id`'s raw bytes out of, or into, its arena.
void rt_read_raw(const Exec *x, int id, void *dst);
void rt_write_raw(Exec *x, int id, const void *src);
// Zeroes buffer `id`.
void rt_zero(Exec *x, int id);
// Skips the update of the step under way: the gradients it accumulated are zeroed (what
// the optimizer phase's zero instructions do after an update) and nothing else changes.
void rt_exec_skip_update(Exec *x);
// Writes the position ids of a micro-batch (i32 [micro_batch, seq]) into the plan's
// positions buffer: `pos`, or with NULL 0..seq-1 along every row; nothing when the plan
// has none.
void rt_write_positions(Exec *x, const int32_t *pos);
// What the last optimizer phase found of the gradients (the plan's grad_stats, one global
// reduction of them all): their L2 norm, unscaled by x->loss_scale, and whether some
// element was not finite (the updates then skipped the step: the weights are unchanged).
// False when the plan has no such reduction.
bool rt_grad_stats(const Exec *x, double *norm, bool *nonfinite);
// Writes the number of trained targets of the optimizer step under way (the loss is their
// mean) into the plan's target_count buffer, nothing when the plan has none; with n < 0,
// the trained (non-negative) targets in the targets buffer now, for a step of one
// micro-batch. Returns the count written.
int64_t rt_write_target_count(Exec *x, int64_t n);
// A pairs plan's (plan.h: pairs 1) target_count buffer, i32[2]: the pairs of the optimizer
// step under way (a preference loss is their mean) and the trained targets of their chosen
// rows; nothing when the plan has none.
void rt_write_pair_counts(Exec *x, int64_t pairs, int64_t chosen);

//
// weights.c — initialisation, checkpoint loading, saving.
//

// Initialises every parameter per the plan (normal, ones, zeros, kaiming_uniform)
// from `seed`, then the master copies and optimizer state; gradients are zeroed.
void rt_weights_init(Exec *x, uint64_t seed);
// The n values of buffer `id`'s initialisation stream for `seed` (what rt_weights_init
// writes), computed in `parts` ranges at once (0: one per core for a large buffer); the
// values are the same however many.
void rt_weights_fill(float *v, int64_t n, PlanInit init, double scale, uint64_t seed, int id, int parts);
// Loads every parameter by its checkpoint name from a safetensors file or directory, an
// fp32 master copy from the checkpoint's values as they are (not the weight's rounding);
// a LoRA adapter the checkpoint lacks gets its initialisation from `seed`. The number of
// parameters read, and of adapters initialised into *fresh (if not NULL); -1 with err
// naming the file and the tensor.
int rt_weights_load(Exec *x, const char *path, uint64_t seed, int *fresh, char *err, size_t errlen);
// Saves the parameters (fp32 master copies where there are, else the weights) into
// directory `dir` as a model's safetensors, in shards of at most shard_bytes where they take
// more (st_write_model; the number of weight files into *shards); -1 with err.
int rt_weights_save(Exec *x, const char *dir, bool trainable_only, int64_t shard_bytes, int *shards, char *err,
                    size_t errlen);
// LoRA: reads the plan's adapters from an adapter_model.safetensors (PEFT's names; `path`
// the file or its directory), each one and nothing else, after the directory's
// adapter_config.json (where there is one) is found to be of the plan's r and alpha. The
// number of tensors read, or -1 with err naming the file and the tensor.
int rt_adapters_load(Exec *x, const char *path, char *err, size_t errlen);
// LoRA: writes DIR/adapter_model.safetensors (PEFT's names,
// base_model.model.<module>.lora_A.weight, fp32) and DIR/adapter_config.json; -1 with err.
int rt_adapters_save(Exec *x, const char *dir, const char *base_model, char *err, size_t errlen);
// Writes the base parameters with each adapter merged in (W + alpha/r · B A, fp32),
// under their checkpoint names, into directory `dir` as rt_weights_save does: a plain
// model for transformers; -1 with err.
int rt_weights_save_merged(Exec *x, const char *dir, int64_t shard_bytes, int *shards, char *err, size_t errlen);

// Saving sharded weights on a job of several ranks: rank 0 saves, gathering every shard it
// reads from the ranks, while each other rank serves those gathers here until rank 0 calls
// rt_weights_serve_end (ok: it saved; else it failed, and the serving ranks fail too).
// -1 with err.
int rt_weights_serve(Exec *x, char *err, size_t errlen);
int rt_weights_serve_end(Exec *x, bool ok, char *err, size_t errlen);

//
// report.c — the run report: DIR/run.jsonl and DIR/run.html.
//

typedef struct RunReport RunReport;

// What the page says about the run besides its steps.
typedef struct RunReportInfo {
    const char *model, *device, *plan_dir, *data, *eval_data, *gpu;   // eval_data, gpu: may be NULL
    int64_t steps, tokens_per_step;
    int64_t planned_device, planned_host, reserve, budget;   // bytes, from the plan
} RunReportInfo;

// One step's record: NAN for a value it does not have (eval_loss between evaluations; a
// skipped step's loss and norm), loss_scale 0 without loss scaling.
typedef struct RunRecord {
    int64_t step;
    double loss, eval_loss, grad_norm, lr, tokens_per_s, loss_scale, elapsed_s;
    bool skipped;
    int64_t skipped_total, tokens;   // steps skipped and tokens trained so far
    bool pref;              // a preference loss's step: TRL's rewards/chosen, rewards/rejected,
    double rewards[3];      // rewards/accuracies (rewards/margins the first two's difference)
} RunRecord;

// Starts the report in DIR (which exists): run.jsonl new, or for a run resumed at step
// `done` > 0 the records it holds up to that step kept and the rest dropped. -1 with err.
int rt_report_open(RunReport **out, const char *dir, const RunReportInfo *info, int64_t done, char *err,
                   size_t errlen);
// Appends step record x to run.jsonl (one whole line); -1 with err.
int rt_report_step(RunReport *r, const RunRecord *x, char *err, size_t errlen);
// The memory measured for the page's table: `bytes` and what they are.
void rt_report_measured(RunReport *r, int64_t bytes, const char *what);
// The run ended with an error: `why` appended to run.jsonl as its last line ({"error": why})
// and shown at the top of run.html (best effort: the run is failing already).
void rt_report_failed(RunReport *r, const char *why);
// Writes run.html from the records so far, aside and renamed into place; -1 with err.
int rt_report_html(RunReport *r, char *err, size_t errlen);
void rt_report_close(RunReport *r);

//
// save.c — the --save directory.
//

// Whether DIR (given to option `flag`, --save or --report) can be written, before any
// training: DIR a directory (or a new name in one) where a file can be created; -1 with err.
int rt_save_check(const char *flag, const char *dir, char *err, size_t errlen);
// Makes DIR and locks it for this process (DIR/.ftc-lock, let go however the process
// ends), then removes what killed saves left in it; the lock's descriptor in *fd, or -1
// with err naming the ftc that holds it.
int rt_save_lock(const char *flag, const char *dir, int *fd, char *err, size_t errlen);
// Saves the weights (with LoRA the adapters, and the merged weights when `merge`) into
// DIR as one set from this step: written aside, then made current at once (DIR/latest),
// the names people load linked through it; one line to `out`. -1 with err.
// Weights over shard_bytes are saved in shards, with an index (st_write_model).
int rt_save_weights(Exec *x, const char *dir, bool merge, int64_t shard_bytes, FILE *out, char *err,
                    size_t errlen);
// Whether a save of x carries a config.json beside a model's weights: the one of the model
// directory the weights came from, else the plan's (the compiler writes one for a model of
// a family ftc import knows).
bool rt_save_has_config(const Exec *x);
// Whether DIR's current set of weights is the one saved at `step`; its directory in path.
bool rt_saved_set(const char *dir, int64_t step, char *path, size_t cap);

//
// save_config.c — a saved model's config files.
//

// Writes the JSON object j to path as transformers writes a config (indented, keys in
// order, every number back exactly), aside and renamed into place; -1 with err.
struct json_t;
int rt_json_save(const char *path, struct json_t *j, char *err, size_t errlen);
// Completes the token ids of the model directory DIR (a save's set, or its merged/): the
// bos and eos ids config.json lacks, and those generation_config.json lacks (bos, eos,
// pad), from generation_config.json, config.json, then tokenizer_config.json's tokens
// through tokenizer.json; a generation_config.json made where there was none and an id is
// known (*made_gen). Nothing where DIR has no config.json. -1 with err.
int rt_save_token_ids(const char *dir, bool *made_gen, char *err, size_t errlen);
// schedule.c — what changes from step to step.
//

// The learning rate of optimizer step `step` (1-based) under the plan's schedule: a
// linear warm-up from 0 over warmup_steps, then the peak (constant), or a linear or half-
// cosine decay to min_lr at `steps` (held there after), as Hugging Face's schedulers.
double rt_lr_at(const Plan *p, int64_t step);
// fp16's dynamic loss scale after a step, as torch.amp.GradScaler.update() moves it under
// the plan's loss_scale settings: backed off (and the tracker reset) when the step's
// gradients overflowed, grown after `interval` steps without (if it stays finite in fp32).
void rt_scale_update(Exec *x, bool overflowed);

//
// host.c — the host ftc run trains on.
//

// Threads for host-stream work: $FTC_HOST_THREADS, else the online CPUs.
int rt_host_threads(void);
// fn(ctx, lo, hi) over [0, n) in ranges, on rt_host_threads() threads when n is large
// (fn must treat elements independently: the result is then the same on any number).
void rt_parallel_for(int64_t n, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx);
// This machine's fp32 AdamW rate, parameters per second over every host thread (timed).
double rt_host_adamw_rate(void);
typedef struct HostRates {
    double adamw;           // CPU AdamW parameters per second, every host thread (0: not timed)
    double link;            // host to device bytes per second (0: not timed)
} HostRates;

// Times this host's AdamW (when the plan runs AdamW on the host) and, on a GPU, its link
// (when the plan copies), for a plan that says what host it assumed; before any buffer
// holds data (the link is timed through the arenas).
HostRates rt_host_measure(const Exec *x);
// Prints the rates against the plan's assumptions, and a warning for each outside the
// range over which the plan's choice is the fastest.
void rt_host_check(const Plan *p, HostRates r, FILE *out);

//
// train.c — ftc run.
//

// checkpoint.c: the whole training state after `step` (parameters, NF4 scales, optimizer
// moments, master weights; with the seed, the rest follows) in DIR/checkpoint-STEP,
// renamed into place when complete, keeping the `keep` latest; and back.
int rt_checkpoint_save(Exec *x, const char *dir, int64_t step, uint64_t seed, int keep, char *err,
                       size_t errlen);
// The checkpoint to resume from: path itself when it holds state.safetensors, else its
// latest complete checkpoint-STEP; -1 with err when there is none.
int rt_checkpoint_find(const char *path, char *out, size_t len, char *err, size_t errlen);
// Removes DIR's checkpoints but the `keep` latest (what a run killed between a save and
// its pruning left over).
void rt_checkpoint_prune(const char *dir, int keep);
// Loads a checkpoint made for this plan into x (x->skipped too; the gradients zeroed);
// its step and seed.
int rt_checkpoint_load(Exec *x, const char *ckpt, int64_t *step, uint64_t *seed, char *err, size_t errlen);

// The backend ftc run asks for (--device), parsed once by the command line.
typedef enum RunDevice {
    DEVICE_AUTO,    // cuda when a GPU is there, else cpu
    DEVICE_CPU, DEVICE_EMU, DEVICE_CUDA
} RunDevice;

// The size of a saved model's shards unless --save-shard-size says: transformers'
// max_shard_size="5GB", 5·10^9 bytes.
#define RT_SHARD_BYTES 5000000000LL

typedef struct RunOptions {
    const char *plan_dir;
    const char *data;       // the training file; NULL: a session that only evaluates (ftc eval)
    const char *weights, *save;
    const char *adapter;    // LoRA adapters over the weights: a directory's adapter_model.safetensors, or the file
    const char *resume;     // a --save directory or a checkpoint: continue from its state
    int keep;               // checkpoints kept by --save-every (default 2)
    RunDevice device;
    int64_t steps;          // 0: the plan's (the train section's steps), else 10
    int64_t save_every;     // also save after every this many steps (0: only at the end)
    int64_t shard_bytes;    // saved weights over this go in shards (0: RT_SHARD_BYTES)
    uint64_t seed;
    bool seed_given;        // --seed was given (a checkpoint's seed overrides it: said)
    bool poison;
    bool sync_check;        // the cuda backend waits for and checks each instruction
    bool gemm_first;        // cuBLASLt's first heuristic choice for every product, untimed
    bool no_graphs;         // every phase issued launch by launch (Exec.graphs false)
    ExecLayout layout;
    bool merge;             // with LoRA: also save the merged weights
    bool skip_nonfinite;    // a step with a non-finite loss is skipped and counted, not fatal
    double comm_timeout_s;  // how long a rank waits for the others in a collective (0: 600 s)
    const char *eval_data;  // a token file the eval phase runs on, or NULL
    int64_t eval_every;     // evaluate after every this many steps (0: after the last only)
    int64_t eval_batches;   // micro-batches of it evaluated (0: every window)
    const char *report;     // where run.jsonl and run.html go (NULL: the --save directory, if any)
    int64_t log_every;      // not on a terminal: a progress line every this many steps (0: 1)
    const char *profile;    // where the device work's times go (after a first step untimed)
    FILE *out;              // progress lines
    // The memory of the plan's preset card (its name): nvidia-smi's total and the driver's,
    // so that the memory line counts what the driver keeps below the total as the plan's
    // reserve does; false when unknown. NULL: the driver's figures alone.
    bool (*card)(const char *gpu, int64_t *nominal, int64_t *driver);
} RunOptions;

// Trains: returns 0, or 1 after printing an error.
int rt_train(const RunOptions *o);

//
// evaluate.c — ftc eval.
//

// What an evaluation measured: the mean loss over the trained targets, their number, the
// tokens and micro-batches evaluated, the eval file's windows, its time. `lead`: rank 0's,
// the one to print.
typedef struct EvalSummary {
    double loss, time_s;
    int64_t targets, tokens, batches;   // (a preference loss's: targets counts pairs)
    bool pairs;
    uint64_t windows;
    bool lead;
} EvalSummary;

// Evaluates the weights of o->weights (and o->adapter), or the plan's initialisation from
// o->seed, on o->eval_data (o->data NULL): the plan's eval phase over its first
// o->eval_batches micro-batches (0: every window), no optimizer step, no gradient. What it
// uses said to o->out before; 0 with *r, or 1 after printing an error.
int rt_eval(const RunOptions *o, EvalSummary *r);

//
// generate.c — ftc generate: the plan's decode phase, a token a run.
//

// How each new token is chosen: temperature 0 greedy (the first largest logit), else
// softmax(logits / temperature) cut to the most probable tokens whose mass reaches top_p
// (1: all), drawn from a stream seeded by `seed`.
typedef struct GenSampling {
    double temperature, top_p;
    uint64_t seed;
} GenSampling;

typedef struct GenRequest {
    const int32_t *prompt;  // (nprompt) token ids, the first at position 0
    int64_t nprompt;
    int64_t max_new;        // tokens generated at most; nprompt + max_new within the cache
    const int32_t *eos;     // (neos) ids that end the reply (not part of it)
    int neos;
    GenSampling sampling;
    // (optional) Told of each token chosen, with the logits it was chosen from (V floats).
    void (*on_token)(void *ctx, int32_t id, const float *logits);
    void *ctx;
} GenRequest;

typedef struct GenResult {
    int32_t *ids;           // (n) the reply's tokens (malloc'd)
    int64_t n;
    int32_t eos;            // the end-of-sequence id that stopped it, else -1
    double prefill_s, decode_s;
} GenResult;

// The tokens the plan's KV caches hold (the decode phase's length), 0 without the phase.
int64_t rt_decode_len(const Plan *p);
// Zeroes the KV caches: a new sequence starts at position 0.
void rt_decode_reset(Exec *x);
// One run of the decode phase: `token` at `pos` (the caches holding positions 0..pos-1)
// into the caches, its logits (vocab floats) out; -1 with err.
int rt_decode_step(Exec *x, int32_t token, int64_t pos, float *logits, char *err, size_t errlen);
// The prompt fed a token a step from position 0, then tokens chosen and fed back until an
// end-of-sequence id or q->max_new of them; *r (r->ids to free); -1 with err.
int rt_generate_ids(Exec *x, const GenRequest *q, GenResult *r, char *err, size_t errlen);
// The job: o's plan, weights and adapter loaded as ftc eval loads them (o->data and
// o->eval_data NULL), then rt_generate_ids; what it uses said to o->out. 0, or 1 after
// printing an error.
int rt_generate(const RunOptions *o, const GenRequest *q, GenResult *r);

//
// profile.c — the device work of a run timed instruction by instruction (ftc run --profile):
// by the backend's timing marks where its work is asynchronous (CUDA events), else by the
// clock around each launch; summed per kernel (or GEMM shape) and set beside the cost
// model's estimate the plan carries (us=).
//
typedef struct Profile Profile;
Profile *rt_profile_new(const Plan *p);
void rt_profile_free(Profile *pr);
// Starts (or stops) timing what x runs from now on (the warm-up steps left out).
void rt_profile_on(Exec *x, Profile *pr, bool on);
// Around instruction `in` (the executor calls them); after a phase's drain, the times of
// what it marked.
void rt_profile_before(Exec *x, const PlanInstr *in);
void rt_profile_after(Exec *x, const PlanInstr *in);
void rt_profile_collect(Exec *x);
// The table: per kernel or GEMM shape its calls, milliseconds and microseconds a call per
// timed step, the estimate and measured / estimated; the device's name in the title.
int rt_profile_write(const Profile *pr, const Plan *p, const char *path, const char *device,
                     int64_t steps, char *err, size_t errlen);

#endif
