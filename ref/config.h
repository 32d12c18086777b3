/* config.h — the M3 model configuration, read from config.json.
 *
 * Spec: M3-CFG-1..n. Two dialects load to the same struct: the released
 * checkpoint's (legacy `sparse_attention_config`, `moe_layer_freq`,
 * `rope_theta`, `partial_rotary_factor`, `hidden_act: swigluoai`, with
 * `text_config`/`vision_config`) and the HF v5 saved form (`layer_types`,
 * `mlp_layer_types`, `index_*`, `rope_parameters`). A flat text-only config
 * (no text_config object) is also accepted. Inconsistent values are
 * rejected with a message naming the field.
 */
#ifndef M3_CONFIG_H
#define M3_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define M3_MAX_LAYERS 512
#define M3_CONFIG_MAX_BYTES (64u << 20) /* config.json size cap */
/* caps on config sizes, checked in 64 bits before anything is sized from them */
#define M3_MAX_WIDTH (1 << 24)  /* any one dimension, and heads x head_dim products */
#define M3_MAX_EXPERTS 65536    /* num_local_experts */
#define M3_MAX_TOPK 65536       /* index_topk_blocks (M3 uses 16; dumps are [G, T, topk]) */

typedef struct m3_text_config {
    int hidden_size;              /* H: 6144 */
    int intermediate_size;        /* routed expert I: 3072 */
    int dense_intermediate_size;  /* dense MLP I (dense layers): 12288 */
    int shared_intermediate_size; /* shared expert I: 3072 (0 = none) */
    int num_layers;               /* L: 60 */
    int num_heads;                /* 64 */
    int num_kv_heads;             /* 4 */
    int head_dim;                 /* 128 */
    int vocab_size;               /* 200064 */
    int64_t max_position_embeddings;
    float rms_norm_eps;           /* 1e-6 */
    double rope_theta;            /* 5e6 */
    int rotary_dim;               /* 64 = head_dim * partial_rotary_factor */
    int num_experts;              /* 128 */
    int num_experts_per_tok;      /* 4 */
    int n_shared_experts;         /* 1 */
    float routed_scaling_factor;  /* 2.0 */
    int use_routing_bias;         /* 1 */
    float swiglu_alpha;           /* 1.702 */
    float swiglu_limit;           /* 7.0 */
    float swiglu_beta;            /* 1.0 (the "+1" on up) */
    int tie_word_embeddings;      /* 0 */
    /* MSA / lightning indexer (sparse layers only) */
    int index_head_dim;           /* 128 */
    int index_n_heads;            /* 4 == num_kv_heads */
    int index_topk;               /* 16 blocks */
    int index_block_size;         /* 128 slots */
    int index_local_blocks;       /* 1 */
    int index_init_blocks;        /* 0 */
    uint8_t layer_sparse[M3_MAX_LAYERS]; /* 1: MSA attention, 0: dense causal */
    uint8_t layer_moe[M3_MAX_LAYERS];    /* 1: MoE FFN, 0: dense MLP */
    int bos_token_id;             /* 200034 default */
    int eos_token_id;             /* 200020 default */
} m3_text_config;

typedef struct m3_vision_config {
    int hidden_size;          /* 1280 */
    int intermediate_size;    /* 5120 */
    int num_layers;           /* 32 */
    int num_heads;            /* 16 (head_dim 80) */
    int patch_size;           /* 14 */
    int temporal_patch_size;  /* 2 */
    int spatial_merge_size;   /* 2 */
    int num_channels;         /* 3 */
    double rope_theta;        /* 1e4 */
    float layer_norm_eps;     /* 1e-5 */
    int segment_max_frames;   /* 4 temporal groups per attention segment */
    int projector_hidden_size;/* 6144 */
} m3_vision_config;

typedef struct m3_config {
    m3_text_config text;
    int has_vision;           /* vision_config present */
    m3_vision_config vision;
    int image_token_id;       /* 200025 */
    int video_token_id;       /* 200026 */
    int image_start_token_id; /* 200029: opens every image / video group (M3-VIS-PLACE-1) */
    int image_end_token_id;   /* 200030: closes it */
    int num_mtp_modules;      /* informational; no weights */
    /* Lenient parsing only: unknown keys that were ignored (the library never
     * prints; a CLI shows these). warnings holds their dotted paths separated
     * by "; ", truncated to fit; n_warnings counts all of them. */
    int n_warnings;
    char warnings[512];
} m3_config;

/* Options for parsing. */
typedef struct m3_config_opts {
    int lenient; /* 1: unknown keys are collected in c->warnings instead of rejected */
} m3_config_opts;

/* Parse config.json at path into *c (fully overwritten). opts may be NULL. */
int m3_config_load(m3_config *c, const char *path, const m3_config_opts *opts, m3_err *e);
/* Parse a JSON text (len bytes) named `name` in messages into *c. */
int m3_config_parse(m3_config *c, const char *json, size_t len, const char *name,
                    const m3_config_opts *opts, m3_err *e);
/* Check internal consistency (divisibility, index heads == kv heads, ...). */
int m3_config_validate(const m3_config *c, const char *name, m3_err *e);

#endif
