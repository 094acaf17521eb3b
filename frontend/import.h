// import.h — what `ftc import` knows of a Hugging Face model once its config.json is read:
// the architecture at the level of the .ft ops it becomes. import.c reads and checks the
// config into an ImportModel; import_write.c writes the .ft from it. Internal to frontend/.
#ifndef FTC_FRONTEND_IMPORT_H
#define FTC_FRONTEND_IMPORT_H

#include "frontend.h"

// The families ftc import writes.
typedef enum ImportFamily {
    FAM_LLAMA,      // Llama 1, 2, 3.x (and their rope scalings)
    FAM_QWEN2,      // Qwen2, Qwen2.5: q/k/v biases, a sliding window on the top layers
    FAM_QWEN3,      // Qwen3: q/k norms over head_dim
    FAM_MISTRAL,    // Mistral: a sliding window on every layer
    FAM_GEMMA,      // Gemma: (1 + w) norms, embeddings scaled by sqrt(dim), GeGLU, tied
    FAM_GEMMA2,     // + norms after attention and the MLP, soft-capping, alternating windows
    FAM_GEMMA3,     // Gemma 3 text: + q/k norms, a rope per layer type
    FAM_PHI3,       // Phi-3: fused qkv and gate_up, split with slices
    FAM_GPT2,       // GPT-2: learned positions, LayerNorm, Conv1D weights [in, out], tied
    FAM_NEOX,       // GPT-NeoX (Pythia): fused per-head qkv, partial rotary, parallel residual
    FAM_COUNT
} ImportFamily;

// A family as its config.json names it: model_type, the class in "architectures", and the
// keys of its sizes (kv_heads NULL: as many as the query heads).
typedef struct ImportFamilyInfo {
    const char *model_type, *class_name;
    ImportFamily fam;
    const char *dim, *ffn, *layers, *heads, *kv_heads, *eps, *max_pos;
} ImportFamilyInfo;

extern const ImportFamilyInfo import_families[FAM_COUNT];   // (import.c)

typedef enum ImportAct { ACT_SILU, ACT_GELU_TANH, ACT_GELU_EXACT } ImportAct;

// One rope: theta and transformers' rope_type with its parameters (OpRope's fields).
typedef struct ImportRope {
    double theta;
    OpRope r;
} ImportRope;

enum { IMPORT_MAX_LAYERS = 4096 };

typedef struct ImportModel {
    ImportFamily fam;
    const char *model_type, *class_name;    // as the config names them
    int64_t vocab, dim, ffn, layers, heads, kv_heads;
    int64_t head_dim;           // 0: dim / heads
    int64_t max_pos;            // max_position_embeddings (GPT-2: n_positions); 0 when not given
    double eps;
    bool tied;
    int64_t pad;                // 1 + pad_token_id, whose embedding rows take no gradient
                                // (torch's padding_idx); 0: none
    bool qkv_bias, o_bias, mlp_bias;    // linear biases (GPT-2 and GPT-NeoX: all)
    ImportAct act;
    ImportRope rope;            // every layer's, or the full-attention layers' (Gemma 3)
    ImportRope rope_local;      // Gemma 3: the sliding-window layers'
    int64_t window;             // the sliding window of the layers that have one, 0: none
    bool sliding[IMPORT_MAX_LAYERS];    // per layer: it attends through the window
    double attn_softcap, final_softcap; // 0: none
    double attn_scale;          // 0: 1 / sqrt(head_dim)
    bool scale_by_layer;        // GPT-2's scale_attn_by_inverse_layer_idx: scale / (layer + 1)
    double embed_scale;         // 0: none (Gemma: sqrt(dim))
    double embd_drop, resid_drop;   // dropout after the embeddings, on each block's branches
    bool parallel_residual;     // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
} ImportModel;

// Writes the .ft of `m`, imported from the file named `file`, to `f`.
void import_write(FILE *f, const ImportModel *m, const char *file);

#endif
