// program.c — a checked .ft program as the passes see it: its elaboration (the language
// part's fe_elaborate_at), what its train section asks of the pipeline, the precision
// regimes the report compares, and the train section's lines of a plan header.
#include "cli.h"

// The loss's chunks of logits take this many bytes at most, unless the planner finds a
// larger chunk faster (or --loss-chunk fixes one).
enum { LOSS_CHUNK_BYTES = 64 << 20 };

static void pass_to_fe(void *ctx, SrcLoc loc, const char *msg) { fe_error(ctx, loc, "%s", msg); }

PassDiag driver_diag(FtSource *src) { return (PassDiag){pass_to_fe, src, 0}; }

// What the train section asks of the pipeline.
static PipelineSpec spec_of(const FtModel *m, Arena *a) {
    const TrainSpec *t = &m->train;
    PipelineSpec s = {.global_batch = t->batch, .seq = t->seq, .lora = t->lora,
                      .quantize = t->quantize, .double_quant = t->double_quant,
                      .fused_loss = true, .loss_chunk_bytes = LOSS_CHUNK_BYTES, .pairs = t->pref_kind >= 0};
    if (t->lora) {
        const char **names = arena_alloc(a, sizeof(char *) * (size_t)(t->n_lora_targets + 1));
        SrcLoc *locs = arena_alloc(a, sizeof(SrcLoc) * (size_t)(t->n_lora_targets + 1));
        for (int i = 0; i < t->n_lora_targets; i++)
            names[i] = t->lora_targets[i].name, locs[i] = t->lora_targets[i].loc;
        s.lora_spec = (LoraSpec){t->lora_r, t->lora_alpha, t->lora_dropout, t->n_lora_targets,
                                 names, locs};
    }
    return s;
}

// The IR verifier between passes: in debug builds, and in tests (FTC_VERIFY_PASSES=1).
#ifdef NDEBUG
#define VERIFY_PASSES (getenv("FTC_VERIFY_PASSES") != NULL)
#else
#define VERIFY_PASSES true
#endif

bool driver_verify(void) { return VERIFY_PASSES; }

Pipeline driver_pipeline(DriverSource *ds, Arena *a, PassDiag *diag) {
    return (Pipeline){.elaborate = fe_elaborate_at, .ctx = ds, .spec = spec_of(ds->m, a), .diag = diag,
                      .verify = VERIFY_PASSES};
}

CompileProgram driver_program(DriverSource *ds, Arena *a) {
    return (CompileProgram){fe_elaborate_at, ds, spec_of(ds->m, a)};
}

void driver_meta_train(PlanMeta *meta, const TrainSpec *t) {
    static const char *const prec[] = {"bf16", "fp16", "fp32", "bf16_pure"};
    static const char *const sched[] = {"constant", "linear", "cosine"};
    meta->precision = prec[t->precision];
    meta->optimizer = fe_optimizer_name(t->optimizer);
    meta->lr = t->lr, meta->beta1 = t->beta1, meta->beta2 = t->beta2, meta->eps = t->eps;
    meta->weight_decay = t->weight_decay;
    meta->lr_schedule = sched[t->lr_schedule];
    meta->warmup_steps = t->warmup_steps, meta->steps = t->steps, meta->min_lr = t->min_lr;
    if (t->precision == PREC_FP16) {
        meta->scale_init = t->scale_init, meta->scale_growth = t->scale_growth;
        meta->scale_backoff = t->scale_backoff, meta->scale_interval = t->scale_interval;
    }
}

typedef struct Mode { const char *name; Precision p; bool master; int kahan; } Mode;

static const Mode modes[] = {
    {"fp32", PREC_FP32, false, -1},
    {"bf16 mixed (fp32 master)", PREC_BF16, true, -1},
    {"fp16 mixed (fp32 master, loss scale)", PREC_FP16, true, -1},
    {"bf16 without a master", PREC_BF16, false, -1},
    {"bf16_pure (Kahan-compensated)", PREC_BF16_PURE, false, 1},
    {"bf16_pure, kahan = false", PREC_BF16_PURE, false, 0},
};
enum { NMODES = sizeof modes / sizeof modes[0] };

static bool is_mode(const Mode *md, const TrainSpec *t) {
    return t->precision == md->p && t->master_weights == md->master &&
           (md->kahan < 0 || (md->kahan != 0) == (t->kahan != 0));
}

// The model states of each precision regime (the train section's optimizer, LoRA and
// quantisation kept). With AdamW, a last row for the section's precision with the other
// AdamW: adamw8bit's 8-bit moments, or adamw's 32-bit ones.
void driver_modes(DriverModes *dm, FtSource *src, const FtModel *m, Arena *a) {
    OptimizerKind other = m->train.optimizer == OPTIM_ADAMW ? OPTIM_ADAMW8BIT : OPTIM_ADAMW;
    dm->n = NMODES + fe_adam_like(m->train.optimizer);
    for (int i = 0; i < dm->n; i++) {
        FtModel *mm = &dm->m[i];
        TrainSpec *t = &mm->train;
        const Mode *md = &modes[i % NMODES];
        *mm = *m;
        if (i < NMODES) {
            snprintf(dm->name[i], sizeof dm->name[i], "%s", md->name);
            dm->ours[i] = is_mode(md, &m->train);
        } else {   // the section's own precision, the other AdamW
            for (int k = 0; k < NMODES; k++)
                if (is_mode(&modes[k], &m->train))
                    md = &modes[k];
            t->optimizer = other;
            snprintf(dm->name[i], sizeof dm->name[i], "%s, %s", md->name, fe_optimizer_name(other));
            dm->ours[i] = false;
        }
        t->precision = md->p;
        t->master_weights = md->master;
        t->kahan = md->kahan;
        t->optim_dtype = md->p == PREC_BF16_PURE ? DT_BF16 : DT_F32;
        dm->ds[i] = (DriverSource){src, mm};
        dm->program[i] = driver_program(&dm->ds[i], a);
    }
}
