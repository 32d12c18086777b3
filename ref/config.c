/* config.c — parse and validate config.json (see config.h).
 *
 * Spec: M3-CFG-1..n.
 *
 * Dialects (all produce byte-identical m3_config values for the same model):
 *  (a) the released checkpoint: top-level multimodal keys + text_config with
 *      sparse_attention_config{sparse_*}, moe_layer_freq, rope_theta,
 *      rotary_dim / partial_rotary_factor, hidden_act "swigluoai";
 *  (b) the HF v5 saved form: text_config with layer_types
 *      ("full_attention" | "minimax_m3_sparse"), mlp_layer_types
 *      ("dense" | "sparse"), index_n_heads, index_head_dim, index_block_size,
 *      index_topk_blocks, index_local_blocks, rope_parameters{rope_type,
 *      rope_theta, partial_rotary_factor}, hidden_act "silu";
 *  (c) a flat text-only config (the text keys at top level, no text_config).
 * When both spellings of one quantity are present they must agree.
 *
 * Defaults for absent keys follow spec M3-CFG-2/3: required hidden_size,
 * intermediate_size, num_hidden_layers, num_attention_heads, vocab_size, and
 * num_local_experts / num_experts_per_tok when any layer is MoE;
 * num_key_value_heads = heads, head_dim = hidden/heads, dense_intermediate_size
 * = intermediate_size, shared_intermediate_size = intermediate_size x
 * n_shared_experts, rotary = head_dim x 1.0, max_position_embeddings 1048576,
 * swiglu 1.702 / 7 / 1, bos 200034, eos 200020, index 128 dim / 4 heads /
 * top-16 / block 128 / local 1 / init 0. Without any attention pattern (or with
 * use_sparse_attention false) every layer is dense; without any MLP pattern
 * every layer is MoE. Booleans accept true/false and 0/1.
 * eos_token_id may be a list: its first entry is used. A JSON null value
 * counts as absent (HF saves bos/eos/pad as null when unset).
 * Unknown keys are errors unless opts->lenient (then collected in
 * c->warnings). Duplicate keys in one object are always errors.
 */
#include "config.h"
#include "fileio.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ctx {
    const char *name;
    int lenient;
    m3_config *c;
    m3_err *e;
} ctx;

/* --------------------------------------------------------------- key lists */

/* Keys of PretrainedConfig (v4 and v5) and generation leftovers: accepted at
 * every level and ignored. */
static const char *const common_keys[] = {
    "_name_or_path", "architectures", "auto_map", "dtype", "torch_dtype",
    "transformers_version", "output_attentions", "output_hidden_states", "return_dict",
    "use_cache", "initializer_range", "initializer_factor", "id2label", "label2id",
    "problem_type", "tokenizer_class", "prefix", "task_specific_params", "is_encoder_decoder",
    "is_decoder", "add_cross_attention", "cross_attention_hidden_size", "tie_encoder_decoder",
    "chunk_size_feed_forward", "pruned_heads", "torchscript", "use_bfloat16", "tf_legacy_loss",
    "finetuning_task", "sep_token_id", "decoder_start_token_id", "pad_token_id", "max_length",
    "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "attention_dropout", "output_router_logits",
    "router_aux_loss_coef", "router_jitter_noise", "model_type", "tie_word_embeddings",
    "bos_token_id", "eos_token_id", NULL};

static const char *const top_keys[] = {
    "text_config", "vision_config", "image_token_index", "video_token_index",
    "image_token_id", "video_token_id", "image_start_token_id", "image_end_token_id",
    "image_grid_pinpoints", "image_seq_length",
    "img_token_compression_config", "multimodal_projector_bias", "num_reward_heads",
    "process_image_mode", "projector_hidden_act", "projector_hidden_size",
    "vision_feature_layer", "vision_feature_select_strategy", "merged_hidden_size", NULL};

static const char *const text_keys[] = {
    "hidden_size", "intermediate_size", "dense_intermediate_size",
    "shared_intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
    "rms_norm_eps", "rope_theta", "rotary_dim", "partial_rotary_factor", "rope_parameters",
    "rope_scaling", "hidden_act", "num_local_experts", "num_experts", "num_experts_per_tok",
    "n_shared_experts", "routed_scaling_factor", "use_routing_bias", "scoring_func",
    "swiglu_alpha", "swiglu_limit", "swiglu_beta", "moe_layer_freq", "mlp_layer_types",
    "layer_types", "sparse_attention_config", "index_n_heads", "index_head_dim",
    "index_topk_blocks", "index_block_size", "index_local_blocks", "index_init_blocks",
    "use_gemma_norm", "use_qk_norm", "qk_norm_type", "attention_output_gate",
    "attention_bias", "num_mtp_modules", "num_nextn_predict_layers", "use_index_cache",
    "index_topk_freq", "index_skip_topk_offset", NULL};

static const char *const sparse_keys[] = {
    "use_sparse_attention", "sparse_index_dim", "sparse_num_index_heads",
    "sparse_topk_blocks", "sparse_block_size", "sparse_score_type", "sparse_init_block",
    "sparse_local_block", "sparse_attention_freq", "sparse_disable_index_value", NULL};

static const char *const rope_keys[] = {"rope_type", "rope_theta", "partial_rotary_factor",
                                        NULL};

static const char *const vision_keys[] = {
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "patch_size", "image_size", "num_channels", "projection_dim", "position_embedding_type",
    "rope_mode", "rope_theta", "rope_parameters", "hidden_act", "layer_norm_eps",
    "vocab_size", "vision_segment_max_frames", "img_token_compression_config",
    "temporal_patch_size", "spatial_merge_size", NULL};

static const char *const compress_keys[] = {
    "image_token_compression_method", "spatial_merge_size", "temporal_patch_size",
    "image_token_compression_threshold", "max_image_resolution", NULL};

/* ------------------------------------------------------------------ helpers */

static int in_list(const char *k, const char *const *list)
{
    for (; list && *list; list++)
        if (strcmp(k, *list) == 0)
            return 1;
    return 0;
}

static void join_path(char *buf, size_t n, const char *path, const char *key)
{
    if (path && path[0])
        snprintf(buf, n, "%s.%s", path, key);
    else
        snprintf(buf, n, "%s", key);
}

static void add_warning(ctx *x, const char *what)
{
    m3_config *c = x->c;
    size_t used = strlen(c->warnings);
    if (used + 1 < sizeof c->warnings)
        snprintf(c->warnings + used, sizeof c->warnings - used, "%sunknown key '%s'",
                 used ? "; " : "", what);
    c->n_warnings++;
}

/* Duplicate keys and unknown keys of obj (path "" = top level). */
static int check_keys(ctx *x, const cJSON *obj, const char *path, const char *const *allow,
                      int with_common)
{
    char full[256];
    for (const cJSON *k = obj->child; k; k = k->next) {
        for (const cJSON *j = obj->child; j != k; j = j->next)
            if (strcmp(j->string, k->string) == 0) {
                join_path(full, sizeof full, path, k->string);
                return m3_fail(x->e, "%s: duplicate key '%s'", x->name, full);
            }
        if (in_list(k->string, allow) || (with_common && in_list(k->string, common_keys)))
            continue;
        join_path(full, sizeof full, path, k->string);
        if (!x->lenient)
            return m3_fail(x->e, "%s: unknown key '%s'", x->name, full);
        add_warning(x, full);
    }
    return 0;
}

static const cJSON *get(const cJSON *obj, const char *key)
{
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

/* Integer in [lo, hi]. Returns 1 if read, 0 if absent, -1 on error. */
static int rd_int64(ctx *x, const cJSON *obj, const char *path, const char *key, int64_t *out,
                    int64_t lo, int64_t hi)
{
    const cJSON *v = get(obj, key);
    if (!v)
        return 0;
    char full[256];
    join_path(full, sizeof full, path, key);
    if (!cJSON_IsNumber(v))
        return m3_fail(x->e, "%s: %s must be an integer", x->name, full);
    double d = v->valuedouble;
    if (!isfinite(d) || floor(d) != d)
        return m3_fail(x->e, "%s: %s must be an integer (got %.17g)", x->name, full, d);
    if (d < (double)lo || d > (double)hi)
        return m3_fail(x->e, "%s: %s out of range (%.17g vs [%lld, %lld])", x->name, full, d,
                       (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return 1;
}

static int rd_int(ctx *x, const cJSON *obj, const char *path, const char *key, int *out,
                  int64_t lo, int64_t hi)
{
    int64_t v;
    int r = rd_int64(x, obj, path, key, &v, lo, hi);
    if (r == 1)
        *out = (int)v;
    return r;
}

static int rd_double(ctx *x, const cJSON *obj, const char *path, const char *key, double *out)
{
    const cJSON *v = get(obj, key);
    if (!v)
        return 0;
    char full[256];
    join_path(full, sizeof full, path, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return m3_fail(x->e, "%s: %s must be a finite number", x->name, full);
    *out = v->valuedouble;
    return 1;
}

static int rd_float(ctx *x, const cJSON *obj, const char *path, const char *key, float *out)
{
    double d;
    int r = rd_double(x, obj, path, key, &d);
    if (r == 1)
        *out = (float)d;
    return r;
}

static int rd_bool(ctx *x, const cJSON *obj, const char *path, const char *key, int *out)
{
    const cJSON *v = get(obj, key);
    if (!v)
        return 0;
    if (cJSON_IsNumber(v) && (v->valuedouble == 0.0 || v->valuedouble == 1.0)) {
        *out = v->valuedouble == 1.0;
        return 1;
    }
    if (!cJSON_IsBool(v)) {
        char full[256];
        join_path(full, sizeof full, path, key);
        return m3_fail(x->e, "%s: %s must be true or false (or 0 / 1)", x->name, full);
    }
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 1;
}

static int rd_str(ctx *x, const cJSON *obj, const char *path, const char *key, const char **out)
{
    const cJSON *v = get(obj, key);
    if (!v)
        return 0;
    if (!cJSON_IsString(v)) {
        char full[256];
        join_path(full, sizeof full, path, key);
        return m3_fail(x->e, "%s: %s must be a string", x->name, full);
    }
    *out = v->valuestring;
    return 1;
}

/* Require string key (if present) to equal one of the allowed values. */
static int expect_str(ctx *x, const cJSON *obj, const char *path, const char *key,
                      const char *a, const char *b)
{
    const char *s = NULL;
    int r = rd_str(x, obj, path, key, &s);
    if (r <= 0)
        return r;
    if (strcmp(s, a) == 0 || (b && strcmp(s, b) == 0))
        return 1;
    char full[256];
    join_path(full, sizeof full, path, key);
    if (b)
        return m3_fail(x->e, "%s: %s is \"%s\" (supported: \"%s\" or \"%s\")", x->name, full, s,
                       a, b);
    return m3_fail(x->e, "%s: %s is \"%s\" (supported: \"%s\")", x->name, full, s, a);
}

/* Require bool key (if present) to equal want. */
static int expect_bool(ctx *x, const cJSON *obj, const char *path, const char *key, int want)
{
    int v;
    int r = rd_bool(x, obj, path, key, &v);
    if (r <= 0)
        return r;
    if (v != want) {
        char full[256];
        join_path(full, sizeof full, path, key);
        return m3_fail(x->e, "%s: %s is %s; M3 requires %s", x->name, full, v ? "true" : "false",
                       want ? "true" : "false");
    }
    return 1;
}

/* A per-layer array of two-valued entries into dst [<= M3_MAX_LAYERS]: with
 * one_val NULL, 0/1 flags (ints or bools); else the strings one_val -> 1 and
 * zero_val -> 0. Returns 1 if read, 0 if absent, -1 on error. */
static int rd_layers(ctx *x, const cJSON *obj, const char *path, const char *key, uint8_t *dst,
                     int *n, const char *one_val, const char *zero_val)
{
    const cJSON *v = get(obj, key);
    if (!v)
        return 0;
    char full[256];
    join_path(full, sizeof full, path, key);
    if (!cJSON_IsArray(v))
        return m3_fail(x->e, "%s: %s must be an array", x->name, full);
    int cnt = cJSON_GetArraySize(v);
    if (cnt > M3_MAX_LAYERS)
        return m3_fail(x->e, "%s: %s has too many entries (%d vs max %d)", x->name, full, cnt,
                       M3_MAX_LAYERS);
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        if (!one_val && cJSON_IsBool(it))
            dst[i] = cJSON_IsTrue(it) ? 1 : 0;
        else if (!one_val && cJSON_IsNumber(it) &&
                 (it->valuedouble == 0.0 || it->valuedouble == 1.0))
            dst[i] = it->valuedouble == 1.0;
        else if (one_val && cJSON_IsString(it) && strcmp(it->valuestring, one_val) == 0)
            dst[i] = 1;
        else if (one_val && cJSON_IsString(it) && strcmp(it->valuestring, zero_val) == 0)
            dst[i] = 0;
        else if (!one_val)
            return m3_fail(x->e, "%s: %s[%d] must be 0 or 1", x->name, full, i);
        else
            return m3_fail(x->e, "%s: %s[%d] must be \"%s\" or \"%s\"", x->name, full, i,
                           zero_val, one_val);
    }
    *n = cnt;
    return 1;
}

/* Per-layer 0/1 flags (ints or bools). */
static int rd_flags(ctx *x, const cJSON *obj, const char *path, const char *key, uint8_t *dst,
                    int *n)
{
    return rd_layers(x, obj, path, key, dst, n, NULL, NULL);
}

/* Merge two optional spellings of one integer: a (flat/HF) and b (legacy). */
static int merge_int(ctx *x, int *dst, int ra, int a, const char *na, int rb, int b,
                     const char *nb)
{
    if (ra == 1 && rb == 1 && a != b)
        return m3_fail(x->e, "%s: %s (%d) disagrees with %s (%d)", x->name, na, a, nb, b);
    if (ra == 1)
        *dst = a;
    else if (rb == 1)
        *dst = b;
    return 0;
}

/* Merge two optional spellings of a per-layer pattern: a (na entries, named
 * name_a) and b (nb entries, name_b), present when ra / rb is 1. Each present
 * one must have nl entries and the two must agree (note is appended to that
 * error); the present one is copied to dst. Returns 1 if either was present,
 * 0 if neither (dst untouched), -1 on error. */
static int merge_layers(ctx *x, uint8_t *dst, int nl, int ra, const uint8_t *a, int na,
                        const char *name_a, int rb, const uint8_t *b, int nb,
                        const char *name_b, const char *note)
{
    if (ra == 1 && na != nl)
        return m3_fail(x->e, "%s: %s has %d entries (vs num_hidden_layers %d)", x->name, name_a,
                       na, nl);
    if (rb == 1 && nb != nl)
        return m3_fail(x->e, "%s: %s has %d entries (vs num_hidden_layers %d)", x->name, name_b,
                       nb, nl);
    if (ra == 1 && rb == 1 && memcmp(a, b, (size_t)nl) != 0)
        return m3_fail(x->e, "%s: %s disagrees with %s%s", x->name, name_a, name_b, note);
    if (ra == 1)
        memcpy(dst, a, (size_t)nl);
    else if (rb == 1)
        memcpy(dst, b, (size_t)nl);
    return ra == 1 || rb == 1;
}

/* ------------------------------------------------------------------ text */

#define TEXT_INT_MAX 2147483647 /* the upper bound of every int key */

/* One scalar key of a text config and the m3_text_config field it sets. */
typedef enum { FK_INT, FK_INT64, FK_FLOAT, FK_BOOL } field_kind;
typedef struct text_field {
    const char *key;
    field_kind kind;
    size_t off;  /* offsetof(m3_text_config, field) */
    int64_t hi;  /* integers: the upper bound (the lower bound is 0) */
} text_field;

#define TF_INT(k, f) {k, FK_INT, offsetof(m3_text_config, f), TEXT_INT_MAX}
#define TF_FLOAT(k, f) {k, FK_FLOAT, offsetof(m3_text_config, f), 0}
#define TF_BOOL(k, f) {k, FK_BOOL, offsetof(m3_text_config, f), 0}

/* Required sizes, read in this order (M3-CFG-2). */
static const text_field text_required[] = {
    TF_INT("hidden_size", hidden_size),
    TF_INT("num_hidden_layers", num_layers),
    TF_INT("num_attention_heads", num_heads),
    TF_INT("intermediate_size", intermediate_size),
    TF_INT("vocab_size", vocab_size),
};

/* Optional scalars with one spelling; absent keys keep text_defaults' value. */
static const text_field text_optional[] = {
    TF_INT("num_key_value_heads", num_kv_heads),
    TF_INT("dense_intermediate_size", dense_intermediate_size),
    TF_INT("shared_intermediate_size", shared_intermediate_size),
    TF_INT("head_dim", head_dim),
    {"max_position_embeddings", FK_INT64, offsetof(m3_text_config, max_position_embeddings),
     INT64_MAX / 2},
    TF_FLOAT("rms_norm_eps", rms_norm_eps),
    TF_INT("num_experts_per_tok", num_experts_per_tok),
    TF_INT("n_shared_experts", n_shared_experts),
    TF_FLOAT("routed_scaling_factor", routed_scaling_factor),
    TF_BOOL("use_routing_bias", use_routing_bias),
    TF_FLOAT("swiglu_alpha", swiglu_alpha),
    TF_FLOAT("swiglu_limit", swiglu_limit),
    TF_FLOAT("swiglu_beta", swiglu_beta),
    TF_BOOL("tie_word_embeddings", tie_word_embeddings),
    TF_INT("bos_token_id", bos_token_id),
};

/* Integers with a flat (HF v5) and a legacy spelling: the flat one at the
 * text level, the legacy one in sparse_attention_config (or, with
 * legacy_in_text, at the text level too). Both present must agree. */
static const struct {
    const char *flat, *legacy;
    int legacy_in_text;
    size_t off;
} text_merged[] = {
    {"num_local_experts", "num_experts", 1, offsetof(m3_text_config, num_experts)},
    {"index_head_dim", "sparse_index_dim", 0, offsetof(m3_text_config, index_head_dim)},
    {"index_n_heads", "sparse_num_index_heads", 0, offsetof(m3_text_config, index_n_heads)},
    {"index_topk_blocks", "sparse_topk_blocks", 0, offsetof(m3_text_config, index_topk)},
    {"index_block_size", "sparse_block_size", 0, offsetof(m3_text_config, index_block_size)},
    {"index_local_blocks", "sparse_local_block", 0, offsetof(m3_text_config, index_local_blocks)},
    {"index_init_blocks", "sparse_init_block", 0, offsetof(m3_text_config, index_init_blocks)},
};

/* Keys fixed by the architecture: when present they must have these values. */
static const struct {
    const char *key, *a, *b; /* accepted strings (b may be NULL) */
} text_fixed_str[] = {
    {"hidden_act", "swigluoai", "silu"},
    {"scoring_func", "sigmoid", NULL},
    {"qk_norm_type", "per_head", NULL},
};
static const struct {
    const char *key;
    int want;
} text_fixed_bool[] = {
    {"use_gemma_norm", 1},
    {"use_qk_norm", 1},
    {"attention_output_gate", 0},
    {"attention_bias", 0},
};

/* model_type values of an M3 text config ("minimax_m3_vl" too at top level). */
static const char *const text_model_types[] = {"minimax_m3_vl_text", "minimax_m3",
                                               "minimax_m3_text", "minimax_m2", NULL};

static int rd_field(ctx *x, const cJSON *o, const char *path, const text_field *f)
{
    void *dst = (char *)&x->c->text + f->off;
    switch (f->kind) {
    case FK_INT:
        return rd_int(x, o, path, f->key, (int *)dst, 0, f->hi);
    case FK_INT64:
        return rd_int64(x, o, path, f->key, (int64_t *)dst, 0, f->hi);
    case FK_FLOAT:
        return rd_float(x, o, path, f->key, (float *)dst);
    case FK_BOOL:
        return rd_bool(x, o, path, f->key, (int *)dst);
    }
    return m3_fail(x->e, "%s: internal error: bad field kind for %s", x->name, f->key);
}

/* Defaults for absent keys (spec M3-CFG-2; see the file comment); the
 * required sizes are already read. */
static void text_defaults(m3_text_config *t)
{
    t->num_kv_heads = t->num_heads;
    t->dense_intermediate_size = t->intermediate_size;
    t->shared_intermediate_size = -1; /* resolved at the end of parse_text */
    t->head_dim = t->num_heads > 0 ? t->hidden_size / t->num_heads : 0;
    t->max_position_embeddings = 1048576;
    t->rms_norm_eps = 1e-6f;
    t->rope_theta = 5000000.0;
    t->num_experts = 0;         /* required when any layer is MoE */
    t->num_experts_per_tok = 0; /* required when any layer is MoE */
    t->n_shared_experts = 1;
    t->routed_scaling_factor = 2.0f;
    t->use_routing_bias = 1;
    t->swiglu_alpha = 1.702f;
    t->swiglu_limit = 7.0f;
    t->swiglu_beta = 1.0f;
    t->tie_word_embeddings = 0;
    t->index_head_dim = 128;
    t->index_n_heads = 4;
    t->index_topk = 16;
    t->index_block_size = 128;
    t->index_local_blocks = 1;
    t->index_init_blocks = 0;
    t->bos_token_id = 200034;
    t->eos_token_id = 200020;
}

/* eos_token_id: an int or a list of ints (the first is used). */
static int parse_eos(ctx *x, const cJSON *o, const char *path)
{
    m3_text_config *t = &x->c->text;
    const cJSON *v = get(o, "eos_token_id");
    if (v && cJSON_IsArray(v)) {
        char nm[160];
        join_path(nm, sizeof nm, path, "eos_token_id");
        const cJSON *f = v->child;
        if (!f || !cJSON_IsNumber(f) || floor(f->valuedouble) != f->valuedouble ||
            f->valuedouble < 0 || f->valuedouble > (double)TEXT_INT_MAX)
            return m3_fail(x->e, "%s: %s must be an integer or a non-empty list of integers",
                           x->name, nm);
        t->eos_token_id = (int)f->valuedouble;
        for (; f; f = f->next) /* every entry is an id the model can produce */
            if (!cJSON_IsNumber(f) || f->valuedouble < 0 ||
                f->valuedouble >= (double)t->vocab_size)
                return m3_fail(x->e, "%s: %s entry is not an id in the vocabulary [0, %d)",
                               x->name, nm, t->vocab_size);
        return 0;
    }
    if (rd_int(x, o, path, "eos_token_id", &t->eos_token_id, 0, TEXT_INT_MAX) < 0)
        return -1;
    if (v && t->eos_token_id >= t->vocab_size) { /* the default is the released id */
        char nm[160];
        join_path(nm, sizeof nm, path, "eos_token_id");
        return m3_fail(x->e, "%s: %s %d is not in the vocabulary [0, %d)", x->name, nm,
                       t->eos_token_id, t->vocab_size);
    }
    return 0;
}

/* The architecture-fixed keys, model_type, rope_scaling and the MTP count. */
static int parse_fixed(ctx *x, const cJSON *o, const char *path)
{
    char nm[160];
    for (size_t i = 0; i < sizeof text_fixed_str / sizeof text_fixed_str[0]; i++)
        if (expect_str(x, o, path, text_fixed_str[i].key, text_fixed_str[i].a,
                       text_fixed_str[i].b) < 0)
            return -1;
    for (size_t i = 0; i < sizeof text_fixed_bool / sizeof text_fixed_bool[0]; i++)
        if (expect_bool(x, o, path, text_fixed_bool[i].key, text_fixed_bool[i].want) < 0)
            return -1;
    const char *mt = NULL;
    if (rd_str(x, o, path, "model_type", &mt) < 0)
        return -1;
    if (mt && !in_list(mt, text_model_types) &&
        !(path[0] == '\0' && strcmp(mt, "minimax_m3_vl") == 0)) {
        join_path(nm, sizeof nm, path, "model_type");
        return m3_fail(x->e, "%s: %s \"%s\" is not an M3 text model", x->name, nm, mt);
    }
    if (get(o, "rope_scaling")) {
        join_path(nm, sizeof nm, path, "rope_scaling");
        return m3_fail(x->e, "%s: %s is set; M3 uses plain RoPE (no scaling)", x->name, nm);
    }
    int v = 0;
    if (rd_int(x, o, path, "num_mtp_modules", &v, 0, TEXT_INT_MAX) < 0)
        return -1;
    x->c->num_mtp_modules = v;
    /* informational / serving-only: type-checked, otherwise ignored */
    if (rd_int(x, o, path, "num_nextn_predict_layers", &v, 0, TEXT_INT_MAX) < 0 ||
        rd_bool(x, o, path, "use_index_cache", &v) < 0)
        return -1;
    return 0;
}

/* RoPE: rope_theta / rope_parameters.rope_theta; rotary_dim / partial factor. */
static int parse_rope(ctx *x, const cJSON *o, const char *path)
{
    m3_text_config *t = &x->c->text;
    char pa[128], nm_a[160], nm_b[160];
    const cJSON *rp = get(o, "rope_parameters");
    join_path(pa, sizeof pa, path, "rope_parameters");
    if (rp) {
        if (!cJSON_IsObject(rp))
            return m3_fail(x->e, "%s: %s must be an object", x->name, pa);
        if (check_keys(x, rp, pa, rope_keys, 0) != 0 ||
            expect_str(x, rp, pa, "rope_type", "default", NULL) < 0)
            return -1;
    }
    double th_a = 0, th_b = 0, pf_a = 0, pf_b = 0;
    int ra = rd_double(x, o, path, "rope_theta", &th_a);
    int rb = rd_double(x, rp, pa, "rope_theta", &th_b);
    int rc = rd_double(x, o, path, "partial_rotary_factor", &pf_a);
    int rd = rd_double(x, rp, pa, "partial_rotary_factor", &pf_b);
    if (ra < 0 || rb < 0 || rc < 0 || rd < 0)
        return -1;
    join_path(nm_a, sizeof nm_a, path, "rope_theta");
    if (ra == 1 && rb == 1 && th_a != th_b)
        return m3_fail(x->e, "%s: %s (%g) disagrees with %s.rope_theta (%g)", x->name, nm_a,
                       th_a, pa, th_b);
    if (ra == 1)
        t->rope_theta = th_a;
    else if (rb == 1)
        t->rope_theta = th_b;
    join_path(nm_a, sizeof nm_a, path, "partial_rotary_factor");
    if (rc == 1 && rd == 1 && pf_a != pf_b)
        return m3_fail(x->e, "%s: %s (%g) disagrees with %s.partial_rotary_factor (%g)",
                       x->name, nm_a, pf_a, pa, pf_b);
    double pf = rc == 1 ? pf_a : pf_b;
    int has_pf = rc == 1 || rd == 1;
    int rdim = 0;
    int rr = rd_int(x, o, path, "rotary_dim", &rdim, 0, TEXT_INT_MAX);
    if (rr < 0)
        return -1;
    if (has_pf) {
        double want = pf * (double)t->head_dim;
        if (!(pf > 0.0 && pf <= 1.0) || floor(want) != want)
            return m3_fail(x->e, "%s: %s %g x head_dim %d is not a whole number of "
                                 "dimensions in (0, head_dim]",
                           x->name, rc == 1 ? nm_a : pa, pf, t->head_dim);
        if (rr == 1 && rdim != (int)want) {
            join_path(nm_b, sizeof nm_b, path, "rotary_dim");
            return m3_fail(x->e, "%s: %s (%d) disagrees with partial_rotary_factor %g x "
                                 "head_dim %d",
                           x->name, nm_b, rdim, pf, t->head_dim);
        }
        t->rotary_dim = (int)want;
    }
    if (rr == 1)
        t->rotary_dim = rdim;
    if (rr == 0 && !has_pf)
        t->rotary_dim = t->head_dim; /* partial_rotary_factor 1.0 */
    return 0;
}

/* The rows of text_merged whose legacy_in_text is in_text: flat spellings in
 * o (at path), legacy ones in lo (at lpath). */
static int parse_merged(ctx *x, const cJSON *o, const char *path, int in_text, const cJSON *lo,
                        const char *lpath)
{
    char nm_a[160], nm_b[160];
    for (size_t i = 0; i < sizeof text_merged / sizeof text_merged[0]; i++) {
        if (text_merged[i].legacy_in_text != in_text)
            continue;
        int a = 0, b = 0;
        int ra = rd_int(x, o, path, text_merged[i].flat, &a, 0, TEXT_INT_MAX);
        int rb = rd_int(x, lo, lpath, text_merged[i].legacy, &b, 0, TEXT_INT_MAX);
        if (ra < 0 || rb < 0)
            return -1;
        join_path(nm_a, sizeof nm_a, path, text_merged[i].flat);
        join_path(nm_b, sizeof nm_b, lpath, text_merged[i].legacy);
        int *dst = (int *)((char *)&x->c->text + text_merged[i].off);
        if (merge_int(x, dst, ra, a, nm_a, rb, b, nm_b) != 0)
            return -1;
    }
    return 0;
}

/* Attention pattern: layer_types vs sparse_attention_config (sp, at pa). */
static int parse_attn_pattern(ctx *x, const cJSON *o, const char *path, const cJSON *sp,
                              const char *pa)
{
    m3_text_config *t = &x->c->text;
    char nm_a[160], nm_b[160];
    uint8_t a[M3_MAX_LAYERS], b[M3_MAX_LAYERS];
    int na = 0, nb = 0;
    int ra = rd_layers(x, o, path, "layer_types", a, &na, "minimax_m3_sparse", "full_attention");
    int rb = rd_flags(x, sp, pa, "sparse_attention_freq", b, &nb);
    if (ra < 0 || rb < 0)
        return -1;
    int use = 1;
    if (rd_bool(x, sp, pa, "use_sparse_attention", &use) < 0)
        return -1;
    if (!use && rb == 1)
        memset(b, 0, sizeof b); /* M3-CFG-3: false => every layer dense */
    join_path(nm_a, sizeof nm_a, path, "layer_types");
    snprintf(nm_b, sizeof nm_b, "%s.sparse_attention_freq", pa);
    if (merge_layers(x, t->layer_sparse, t->num_layers, ra, a, na, nm_a, rb, b, nb, nm_b,
                     use ? "" : " (use_sparse_attention is false)") < 0)
        return -1;
    int nd = 0;
    int rdv = rd_flags(x, sp, pa, "sparse_disable_index_value", b, &nd);
    if (rdv < 0)
        return -1;
    if (rdv == 1) {
        if (nd != t->num_layers)
            return m3_fail(x->e, "%s: %s.sparse_disable_index_value has %d entries (vs "
                                 "num_hidden_layers %d)",
                           x->name, pa, nd, t->num_layers);
        for (int i = 0; i < nd; i++)
            if (t->layer_sparse[i] && !b[i])
                return m3_fail(x->e, "%s: %s.sparse_disable_index_value[%d] is 0: the "
                                     "index-value branch is not part of M3 and not supported",
                               x->name, pa, i);
    }
    return 0;
}

/* MLP pattern: mlp_layer_types vs moe_layer_freq; neither means all MoE. */
static int parse_mlp_pattern(ctx *x, const cJSON *o, const char *path)
{
    m3_text_config *t = &x->c->text;
    char nm_a[160], nm_b[160];
    uint8_t a[M3_MAX_LAYERS], b[M3_MAX_LAYERS];
    int na = 0, nb = 0;
    int ra = rd_layers(x, o, path, "mlp_layer_types", a, &na, "sparse", "dense");
    int rb = rd_flags(x, o, path, "moe_layer_freq", b, &nb);
    if (ra < 0 || rb < 0)
        return -1;
    join_path(nm_a, sizeof nm_a, path, "mlp_layer_types");
    join_path(nm_b, sizeof nm_b, path, "moe_layer_freq");
    int got = merge_layers(x, t->layer_moe, t->num_layers, ra, a, na, nm_a, rb, b, nb, nm_b, "");
    if (got < 0)
        return -1;
    if (got == 0)
        memset(t->layer_moe, 1, (size_t)t->num_layers); /* HF default: all MoE */
    return 0;
}

static int parse_text(ctx *x, const cJSON *o, const char *path)
{
    m3_text_config *t = &x->c->text;
    char pa[128], nm[160];

    if (check_keys(x, o, path, text_keys, 1) != 0)
        return -1;
    for (size_t i = 0; i < sizeof text_required / sizeof text_required[0]; i++) {
        int r = rd_field(x, o, path, &text_required[i]);
        if (r < 0)
            return -1;
        if (r == 0) {
            join_path(nm, sizeof nm, path, text_required[i].key);
            return m3_fail(x->e, "%s: missing required key '%s'", x->name, nm);
        }
    }
    if (t->num_layers > M3_MAX_LAYERS) {
        join_path(nm, sizeof nm, path, "num_hidden_layers");
        return m3_fail(x->e, "%s: %s too large (%d vs max %d)", x->name, nm, t->num_layers,
                       M3_MAX_LAYERS);
    }
    text_defaults(t);
    for (size_t i = 0; i < sizeof text_optional / sizeof text_optional[0]; i++)
        if (rd_field(x, o, path, &text_optional[i]) < 0)
            return -1;
    /* experts first: num_local_experts (num_experts is HF's attribute alias) */
    if (parse_merged(x, o, path, 1, o, path) != 0 || parse_eos(x, o, path) != 0 ||
        parse_fixed(x, o, path) != 0 || parse_rope(x, o, path) != 0)
        return -1;

    /* MSA: flat index_* (HF v5) vs sparse_attention_config.sparse_* (released) */
    const cJSON *sp = get(o, "sparse_attention_config");
    join_path(pa, sizeof pa, path, "sparse_attention_config");
    if (sp && !cJSON_IsObject(sp))
        return m3_fail(x->e, "%s: %s must be an object", x->name, pa);
    if (sp && (check_keys(x, sp, pa, sparse_keys, 0) != 0 ||
               expect_str(x, sp, pa, "sparse_score_type", "max", NULL) < 0))
        return -1;
    if (parse_merged(x, o, path, 0, sp, pa) != 0 || parse_attn_pattern(x, o, path, sp, pa) != 0 ||
        parse_mlp_pattern(x, o, path) != 0)
        return -1;

    /* index_topk_freq: cross-layer top-k reuse is a serving approximation
     * (Decisions 4); accepted and ignored. */
    if (get(o, "index_topk_freq") && !cJSON_IsNumber(get(o, "index_topk_freq")) &&
        !cJSON_IsArray(get(o, "index_topk_freq"))) {
        join_path(nm, sizeof nm, path, "index_topk_freq");
        return m3_fail(x->e, "%s: %s must be a number or an array", x->name, nm);
    }
    int any_moe = 0;
    for (int i = 0; i < t->num_layers; i++)
        any_moe |= t->layer_moe[i];
    if (any_moe && (t->num_experts == 0 || t->num_experts_per_tok == 0) &&
        !get(o, t->num_experts == 0 ? "num_local_experts" : "num_experts_per_tok") &&
        !(t->num_experts == 0 && get(o, "num_experts"))) {
        join_path(nm, sizeof nm, path,
                  t->num_experts == 0 ? "num_local_experts" : "num_experts_per_tok");
        return m3_fail(x->e, "%s: missing required key '%s' (the config has MoE layers)",
                       x->name, nm);
    }
    if (t->shared_intermediate_size < 0)
        t->shared_intermediate_size = t->intermediate_size * t->n_shared_experts;
    if (t->n_shared_experts == 0)
        t->shared_intermediate_size = 0;
    return 0;
}

/* ------------------------------------------------------------------ vision */

static int parse_compress(ctx *x, const cJSON *o, const char *path, int *tps, int *sms,
                          int *rt, int *rs)
{
    if (!cJSON_IsObject(o))
        return m3_fail(x->e, "%s: %s must be an object", x->name, path);
    if (check_keys(x, o, path, compress_keys, 0) != 0 ||
        expect_str(x, o, path, "image_token_compression_method", "patch_merge", NULL) < 0)
        return -1;
    *rt = rd_int(x, o, path, "temporal_patch_size", tps, 1, 1 << 20);
    *rs = rd_int(x, o, path, "spatial_merge_size", sms, 1, 1 << 20);
    return (*rt < 0 || *rs < 0) ? -1 : 0;
}

static int merge_opt(ctx *x, int *dst, int *have, int r, int v, const char *what)
{
    if (r != 1)
        return 0;
    if (*have && *dst != v)
        return m3_fail(x->e, "%s: %s (%d) disagrees with an earlier value (%d)", x->name, what, v,
                       *dst);
    *dst = v;
    *have = 1;
    return 0;
}

static int parse_vision(ctx *x, const cJSON *o, const cJSON *top_compress)
{
    m3_vision_config *v = &x->c->vision;
    const char *path = "vision_config";
    const int64_t BIG = 2147483647;
    char pa[128];
    if (!cJSON_IsObject(o))
        return m3_fail(x->e, "%s: vision_config must be an object", x->name);
    if (check_keys(x, o, path, vision_keys, 1) != 0)
        return -1;
    v->hidden_size = 1280;
    v->intermediate_size = 5120;
    v->num_layers = 32;
    v->num_heads = 16;
    v->patch_size = 14;
    v->temporal_patch_size = 2;
    v->spatial_merge_size = 2;
    v->num_channels = 3;
    v->rope_theta = 10000.0;
    v->layer_norm_eps = 1e-5f;
    v->segment_max_frames = 4;
    if (rd_int(x, o, path, "hidden_size", &v->hidden_size, 0, BIG) < 0 ||
        rd_int(x, o, path, "intermediate_size", &v->intermediate_size, 0, BIG) < 0 ||
        rd_int(x, o, path, "num_hidden_layers", &v->num_layers, 0, M3_MAX_LAYERS) < 0 ||
        rd_int(x, o, path, "num_attention_heads", &v->num_heads, 0, BIG) < 0 ||
        rd_int(x, o, path, "patch_size", &v->patch_size, 0, BIG) < 0 ||
        rd_int(x, o, path, "num_channels", &v->num_channels, 0, BIG) < 0 ||
        rd_float(x, o, path, "layer_norm_eps", &v->layer_norm_eps) < 0 ||
        rd_int(x, o, path, "vision_segment_max_frames", &v->segment_max_frames, 0, BIG) < 0 ||
        expect_str(x, o, path, "hidden_act", "gelu", NULL) < 0 ||
        expect_str(x, o, path, "position_embedding_type", "rope", NULL) < 0 ||
        expect_str(x, o, path, "rope_mode", "3d", NULL) < 0)
        return -1;
    {
        int dummy;
        if (rd_int(x, o, path, "image_size", &dummy, 0, BIG) < 0 ||
            rd_int(x, o, path, "projection_dim", &dummy, 0, BIG) < 0 ||
            rd_int(x, o, path, "vocab_size", &dummy, 0, BIG) < 0)
            return -1;
    }
    /* rope theta: rope_theta or rope_parameters.rope_theta */
    {
        const cJSON *rp = get(o, "rope_parameters");
        snprintf(pa, sizeof pa, "%s.rope_parameters", path);
        /* HF 5.17 saves rope_type "axial" for its 2D variant; the weights are the
         * same and m3 always applies the 3D vision RoPE (Decision 1). */
        if (rp && (!cJSON_IsObject(rp) || check_keys(x, rp, pa, rope_keys, 0) != 0 ||
                   expect_str(x, rp, pa, "rope_type", "default", "axial") < 0))
            return cJSON_IsObject(rp) ? -1
                                      : m3_fail(x->e, "%s: %s must be an object", x->name, pa);
        double a = 0, b = 0;
        int ra = rd_double(x, o, path, "rope_theta", &a);
        int rb = rd_double(x, rp, pa, "rope_theta", &b);
        if (ra < 0 || rb < 0)
            return -1;
        if (ra == 1 && rb == 1 && a != b)
            return m3_fail(x->e, "%s: vision_config.rope_theta (%g) disagrees with %s.rope_theta "
                                 "(%g)",
                           x->name, a, pa, b);
        if (ra == 1)
            v->rope_theta = a;
        else if (rb == 1)
            v->rope_theta = b;
    }
    /* temporal_patch_size / spatial_merge_size: direct keys, vision-level and
     * top-level img_token_compression_config; all present values must agree */
    {
        int tps = 0, sms = 0, ht = 0, hs = 0, val, r1, r2;
        r1 = rd_int(x, o, path, "temporal_patch_size", &val, 1, 1 << 20);
        if (r1 < 0 || merge_opt(x, &tps, &ht, r1, val, "vision_config.temporal_patch_size") < 0)
            return -1;
        r1 = rd_int(x, o, path, "spatial_merge_size", &val, 1, 1 << 20);
        if (r1 < 0 || merge_opt(x, &sms, &hs, r1, val, "vision_config.spatial_merge_size") < 0)
            return -1;
        const cJSON *vc = get(o, "img_token_compression_config");
        const cJSON *srcs[2] = {vc, top_compress};
        const char *names[2] = {"vision_config.img_token_compression_config",
                                "img_token_compression_config"};
        for (int i = 0; i < 2; i++) {
            if (!srcs[i])
                continue;
            int t2 = 0, s2 = 0;
            if (parse_compress(x, srcs[i], names[i], &t2, &s2, &r1, &r2) != 0)
                return -1;
            snprintf(pa, sizeof pa, "%s.temporal_patch_size", names[i]);
            if (merge_opt(x, &tps, &ht, r1, t2, pa) < 0)
                return -1;
            snprintf(pa, sizeof pa, "%s.spatial_merge_size", names[i]);
            if (merge_opt(x, &sms, &hs, r2, s2, pa) < 0)
                return -1;
        }
        if (ht)
            v->temporal_patch_size = tps;
        if (hs)
            v->spatial_merge_size = sms;
    }
    return 0;
}

/* ------------------------------------------------------------------ top */

int m3_config_parse(m3_config *c, const char *json, size_t len, const char *name,
                    const m3_config_opts *opts, m3_err *e)
{
    memset(c, 0, sizeof *c);
    if (!name)
        name = "config.json";
    ctx x = {name, opts ? opts->lenient : 0, c, e};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root)
        return m3_fail(e, "%s: not valid JSON (error near byte %ld)", name,
                       end ? (long)(end - json) : -1L);
    int rc = -1;
    for (const char *p = end; p && p < json + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r' && *p != '\0') {
            m3_fail(e, "%s: trailing characters after the JSON object (byte %ld)", name,
                    (long)(p - json));
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        m3_fail(e, "%s: top level is not a JSON object", name);
        goto done;
    }
    const cJSON *tc = get(root, "text_config");
    if (tc) {
        if (!cJSON_IsObject(tc)) {
            m3_fail(e, "%s: text_config must be an object", name);
            goto done;
        }
        if (check_keys(&x, root, "", top_keys, 1) != 0 ||
            expect_str(&x, root, "", "model_type", "minimax_m3_vl", NULL) < 0 ||
            expect_str(&x, root, "", "projector_hidden_act", "gelu", NULL) < 0 ||
            expect_str(&x, root, "", "vision_feature_select_strategy", "full", NULL) < 0 ||
            expect_str(&x, root, "", "process_image_mode", "dynamic_res", NULL) < 0)
            goto done;
        if (parse_text(&x, tc, "text_config") != 0)
            goto done;
        int tie = 0;
        if (rd_bool(&x, root, "", "tie_word_embeddings", &tie) < 0)
            goto done;
        c->text.tie_word_embeddings |= tie;
        /* image / video token ids: *_index (saved spelling) or *_id alias */
        static const char *const ids[4][2] = {{"image_token_index", "image_token_id"},
                                              {"video_token_index", "video_token_id"},
                                              {"image_start_token_id", "image_start_token_id"},
                                              {"image_end_token_id", "image_end_token_id"}};
        int *dst[4] = {&c->image_token_id, &c->video_token_id, &c->image_start_token_id,
                       &c->image_end_token_id};
        int defaults[4] = {200025, 200026, 200029, 200030}; /* the released ids */
        for (int i = 0; i < 4; i++) {
            int a = 0, b = 0;
            *dst[i] = defaults[i];
            int ra = rd_int(&x, root, "", ids[i][0], &a, 0, 2147483647);
            int rb = rd_int(&x, root, "", ids[i][1], &b, 0, 2147483647);
            if (ra < 0 || rb < 0 || merge_int(&x, dst[i], ra, a, ids[i][0], rb, b, ids[i][1]))
                goto done;
        }
        const cJSON *vc = get(root, "vision_config");
        const cJSON *tcmp = get(root, "img_token_compression_config");
        if (vc) {
            c->has_vision = 1;
            if (parse_vision(&x, vc, tcmp) != 0)
                goto done;
            c->vision.projector_hidden_size = 6144;
            int merged = 0;
            int rm = rd_int(&x, root, "", "merged_hidden_size", &merged, 0, 2147483647);
            if (rm < 0)
                goto done;
            if (rm == 1 && merged != c->text.hidden_size * c->vision.spatial_merge_size *
                                         c->vision.spatial_merge_size) {
                m3_fail(e, "%s: merged_hidden_size %d is not hidden_size %d x spatial_merge_size^2 "
                           "(%d)",
                        name, merged, c->text.hidden_size, c->vision.spatial_merge_size);
                goto done;
            }
            if (rd_int(&x, root, "", "projector_hidden_size", &c->vision.projector_hidden_size, 0,
                       2147483647) < 0)
                goto done;
        } else if (tcmp) {
            int t2, s2, r1, r2;
            if (parse_compress(&x, tcmp, "img_token_compression_config", &t2, &s2, &r1, &r2))
                goto done;
        }
        {
            int dummy;
            if (rd_int(&x, root, "", "image_seq_length", &dummy, 0, 2147483647) < 0 ||
                rd_int(&x, root, "", "num_reward_heads", &dummy, 0, 2147483647) < 0 ||
                rd_int(&x, root, "", "vision_feature_layer", &dummy, -2147483647, 2147483647) <
                    0 ||
                rd_bool(&x, root, "", "multimodal_projector_bias", &dummy) < 0)
                goto done;
            if (c->has_vision && get(root, "multimodal_projector_bias") && !dummy) {
                m3_fail(e, "%s: multimodal_projector_bias is false; M3's projector has biases",
                        name);
                goto done;
            }
        }
    } else {
        /* flat text-only config: text keys at top level */
        if (get(root, "vision_config")) {
            m3_fail(e, "%s: vision_config without text_config", name);
            goto done;
        }
        if (parse_text(&x, root, "") != 0)
            goto done;
        c->image_token_id = 200025;
        c->video_token_id = 200026;
        c->image_start_token_id = 200029;
        c->image_end_token_id = 200030;
    }
    rc = m3_config_validate(c, name, e);
done:
    cJSON_Delete(root);
    return rc;
}

int m3_config_load(m3_config *c, const char *path, const m3_config_opts *opts, m3_err *e)
{
    memset(c, 0, sizeof *c);
    char *buf;
    size_t n;
    if (m3_read_file(path, M3_CONFIG_MAX_BYTES, &buf, &n, e) != 0)
        return -1;
    int rc = m3_config_parse(c, buf, n, path, opts, e);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ validate */

int m3_config_validate(const m3_config *c, const char *name, m3_err *e)
{
    const m3_text_config *t = &c->text;
    if (!name)
        name = "config.json";
#define POS(field, label)                                                                      \
    do {                                                                                       \
        if ((field) <= 0)                                                                      \
            return m3_fail(e, "%s: %s must be positive (got %lld)", name, label,              \
                           (long long)(field));                                                \
    } while (0)
    POS(t->hidden_size, "hidden_size");
    POS(t->num_layers, "num_hidden_layers");
    POS(t->num_heads, "num_attention_heads");
    POS(t->num_kv_heads, "num_key_value_heads");
    POS(t->head_dim, "head_dim");
    POS(t->vocab_size, "vocab_size");
    POS(t->max_position_embeddings, "max_position_embeddings");
    if (t->num_layers > M3_MAX_LAYERS)
        return m3_fail(e, "%s: num_hidden_layers too large (%d vs max %d)", name, t->num_layers,
                       M3_MAX_LAYERS);
    /* sizes and their products, in 64 bits, against documented caps before anything is
     * allocated from them (the checkpoint's tensor shapes are checked against them next) */
#define CAP(v, label, cap)                                                                     \
    do {                                                                                       \
        if ((int64_t)(v) > (int64_t)(cap))                                                     \
            return m3_fail(e, "%s: %s = %lld is over the cap %lld (%s)", name, label,         \
                           (long long)(v), (long long)(cap), #cap);                            \
    } while (0)
    CAP(t->hidden_size, "hidden_size", M3_MAX_WIDTH);
    CAP(t->vocab_size, "vocab_size", M3_MAX_WIDTH);
    CAP(t->head_dim, "head_dim", M3_MAX_WIDTH);
    CAP((int64_t)t->num_heads * t->head_dim, "num_attention_heads x head_dim", M3_MAX_WIDTH);
    CAP((int64_t)t->num_kv_heads * t->head_dim, "num_key_value_heads x head_dim", M3_MAX_WIDTH);
    CAP(t->intermediate_size, "intermediate_size", M3_MAX_WIDTH);
    CAP(t->dense_intermediate_size, "dense_intermediate_size", M3_MAX_WIDTH);
    CAP(t->shared_intermediate_size, "shared_intermediate_size", M3_MAX_WIDTH);
    CAP(t->num_experts, "num_local_experts", M3_MAX_EXPERTS);
    CAP(t->index_head_dim, "index_head_dim", M3_MAX_WIDTH);
    CAP(t->index_topk, "index_topk_blocks", M3_MAX_TOPK);
    CAP((int64_t)t->index_n_heads * t->index_head_dim, "index_n_heads x index_head_dim",
        M3_MAX_WIDTH);
    if (t->head_dim % 2 != 0)
        return m3_fail(e, "%s: head_dim %d must be even", name, t->head_dim);
    if (t->num_heads % t->num_kv_heads != 0)
        return m3_fail(e, "%s: num_attention_heads (%d) is not a multiple of "
                          "num_key_value_heads (%d)",
                       name, t->num_heads, t->num_kv_heads);
    if (!(t->rms_norm_eps > 0.0f) || !isfinite(t->rms_norm_eps))
        return m3_fail(e, "%s: rms_norm_eps must be positive (got %g)", name, t->rms_norm_eps);
    if (!(t->rope_theta > 0.0) || !isfinite(t->rope_theta))
        return m3_fail(e, "%s: rope_theta must be positive (got %g)", name, t->rope_theta);
    if (t->rotary_dim <= 0 || t->rotary_dim % 2 != 0 || t->rotary_dim > t->head_dim)
        return m3_fail(e, "%s: rotary_dim %d must be even and in (0, head_dim %d]", name,
                       t->rotary_dim, t->head_dim);
    int any_moe = 0, any_dense = 0, any_sparse = 0;
    for (int i = 0; i < t->num_layers; i++) {
        any_moe |= t->layer_moe[i] != 0;
        any_dense |= t->layer_moe[i] == 0;
        any_sparse |= t->layer_sparse[i] != 0;
    }
    for (int i = t->num_layers; i < M3_MAX_LAYERS; i++)
        if (t->layer_moe[i] || t->layer_sparse[i])
            return m3_fail(e, "%s: layer pattern set beyond num_hidden_layers (layer %d)", name,
                           i);
    if (any_dense)
        POS(t->dense_intermediate_size, "dense_intermediate_size");
    if (any_moe) {
        POS(t->intermediate_size, "intermediate_size");
        POS(t->num_experts, "num_local_experts");
        POS(t->num_experts_per_tok, "num_experts_per_tok");
        if (t->num_experts_per_tok > t->num_experts)
            return m3_fail(e, "%s: num_experts_per_tok (%d) exceeds num_local_experts (%d)", name,
                           t->num_experts_per_tok, t->num_experts);
        if (!isfinite(t->routed_scaling_factor))
            return m3_fail(e, "%s: routed_scaling_factor must be finite", name);
        if (t->n_shared_experts < 0 || t->n_shared_experts > 1)
            return m3_fail(e, "%s: n_shared_experts %d not supported (M3 has 0 or 1)", name,
                           t->n_shared_experts);
        if (t->n_shared_experts == 1)
            POS(t->shared_intermediate_size, "shared_intermediate_size");
    }
    if (!(t->swiglu_limit > 0.0f) || !isfinite(t->swiglu_limit))
        return m3_fail(e, "%s: swiglu_limit must be positive (got %g)", name, t->swiglu_limit);
    if (!isfinite(t->swiglu_alpha) || !isfinite(t->swiglu_beta))
        return m3_fail(e, "%s: swiglu_alpha and swiglu_beta must be finite", name);
    if (any_sparse) {
        POS(t->index_head_dim, "index_head_dim");
        POS(t->index_n_heads, "index_n_heads");
        POS(t->index_topk, "index_topk_blocks");
        POS(t->index_block_size, "index_block_size");
        if (t->index_n_heads != t->num_kv_heads)
            return m3_fail(e, "%s: index_n_heads (%d) must equal num_key_value_heads (%d)", name,
                           t->index_n_heads, t->num_kv_heads);
        if (t->rotary_dim > t->index_head_dim)
            return m3_fail(e, "%s: rotary_dim (%d) exceeds index_head_dim (%d)", name,
                           t->rotary_dim, t->index_head_dim);
        if (t->index_local_blocks < 0 || t->index_init_blocks < 0)
            return m3_fail(e, "%s: index_local_blocks / index_init_blocks must be >= 0", name);
        if (t->index_local_blocks + t->index_init_blocks > t->index_topk)
            return m3_fail(e, "%s: index_local_blocks (%d) + index_init_blocks (%d) exceed "
                              "index_topk_blocks (%d)",
                           name, t->index_local_blocks, t->index_init_blocks, t->index_topk);
    }
    if (c->has_vision) {
        const m3_vision_config *v = &c->vision;
        POS(v->hidden_size, "vision_config.hidden_size");
        POS(v->intermediate_size, "vision_config.intermediate_size");
        POS(v->num_layers, "vision_config.num_hidden_layers");
        POS(v->num_heads, "vision_config.num_attention_heads");
        POS(v->patch_size, "vision_config.patch_size");
        POS(v->temporal_patch_size, "vision_config.temporal_patch_size");
        POS(v->spatial_merge_size, "vision_config.spatial_merge_size");
        POS(v->num_channels, "vision_config.num_channels");
        POS(v->segment_max_frames, "vision_config.vision_segment_max_frames");
        POS(v->projector_hidden_size, "projector_hidden_size");
        if (v->num_layers > M3_MAX_LAYERS)
            return m3_fail(e, "%s: vision_config.num_hidden_layers too large (%d vs max %d)",
                           name, v->num_layers, M3_MAX_LAYERS);
        CAP(v->hidden_size, "vision_config.hidden_size", M3_MAX_WIDTH);
        CAP(v->intermediate_size, "vision_config.intermediate_size", M3_MAX_WIDTH);
        CAP(v->projector_hidden_size, "projector_hidden_size", M3_MAX_WIDTH);
        CAP(v->patch_size, "vision_config.patch_size", 1024);
        CAP(v->temporal_patch_size, "vision_config.temporal_patch_size", 64);
        CAP(v->spatial_merge_size, "vision_config.spatial_merge_size", 64);
        CAP(v->num_channels, "vision_config.num_channels", 64);
        CAP((int64_t)v->num_channels * v->temporal_patch_size * v->patch_size * v->patch_size,
            "vision_config patch size (channels x temporal x patch^2)", M3_MAX_WIDTH);
        CAP((int64_t)t->hidden_size * v->spatial_merge_size * v->spatial_merge_size,
            "hidden_size x spatial_merge_size^2", M3_MAX_WIDTH);
        if (v->hidden_size % v->num_heads != 0 || (v->hidden_size / v->num_heads) % 2 != 0)
            return m3_fail(e, "%s: vision_config head_dim = hidden_size %d / num_attention_heads "
                              "%d must be a whole even number",
                           name, v->hidden_size, v->num_heads);
        if (!(v->layer_norm_eps > 0.0f) || !isfinite(v->layer_norm_eps))
            return m3_fail(e, "%s: vision_config.layer_norm_eps must be positive", name);
        if (!(v->rope_theta > 0.0) || !isfinite(v->rope_theta))
            return m3_fail(e, "%s: vision_config.rope_theta must be positive", name);
        /* image/video token ids are not checked against the vocabulary here: tiny
         * test models keep the released ids; they matter only when images are given. */
    }
#undef POS
#undef CAP
    return 0;
}
