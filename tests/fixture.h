/* fixture.h — header-only builder of tiny random M3 text checkpoints for tests.
 *
 * m3_fixture_write(dir, opts, e) creates dir (if needed) and writes
 *   dir/config.json        the released checkpoint's dialect (text_config with
 *                          legacy sparse_attention_config, moe_layer_freq,
 *                          rope_theta, partial_rotary_factor, swigluoai)
 *   dir/model.safetensors  the public checkpoint layout (notes A.2):
 *                          language_model.model.* and language_model.lm_head.weight,
 *                          seeded random bf16 weights, fp32 router and bias.
 * Weights are uniform in [-a, a] with a = sqrt(3 / fan_in) (unit-variance
 * outputs), embeddings in [-1, 1], norm deltas in [-0.2, 0.2]. Each tensor's
 * stream is seeded from (seed, tensor name), so adding a tensor never changes
 * the others. Everything here is deterministic.
 *
 * Usage:
 *   m3_fixture_opts o; m3_fixture_defaults(&o); o.num_layers = 3;
 *   if (m3_fixture_write("/tmp/fx", &o, &err) != 0) ... err.msg ...
 */
#ifndef M3_TESTS_FIXTURE_H
#define M3_TESTS_FIXTURE_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "dtype.h"
#include "err.h"
#include "safetensors.h"

#define M3_FIXTURE_MAX_LAYERS 64

typedef struct m3_fixture_opts {
    int num_layers;              /* L */
    int hidden_size;             /* H */
    int num_heads, num_kv_heads, head_dim;
    int rotary_dim;              /* partial_rotary_factor = rotary_dim / head_dim */
    double rope_theta;
    int vocab_size;
    int dense_intermediate_size; /* dense-MLP layers */
    int intermediate_size;       /* routed experts */
    int shared_intermediate_size;
    int num_experts, num_experts_per_tok;
    float routed_scaling_factor;
    int index_head_dim, index_topk, block_size, local_blocks, init_blocks;
    int n_dense;                 /* layers 0..n_dense-1 dense attention + dense MLP */
    const char *layer_sparse;    /* NULL, or L chars '0'/'1' overriding n_dense for attention */
    const char *layer_moe;       /* NULL, or L chars '0'/'1' overriding n_dense for the FFN */
    long long max_position_embeddings;
    int eos_token_id;            /* < 0: key omitted (config default applies) */
    int bos_token_id;            /* < 0: key omitted */
    int mtp_tensors;             /* extra language_model.model.mtp.* tensors to write */
    uint64_t seed;
} m3_fixture_opts;

/* Small but complete defaults: 4 layers (1 dense + 3 MoE/sparse), H 64,
 * 4 heads / 2 KV heads of 16, rotary 8, vocab 512, 8 experts top-2,
 * MSA block 4, topk 3, one local block. */
static inline void m3_fixture_defaults(m3_fixture_opts *o)
{
    memset(o, 0, sizeof *o);
    o->num_layers = 4;
    o->hidden_size = 64;
    o->num_heads = 4;
    o->num_kv_heads = 2;
    o->head_dim = 16;
    o->rotary_dim = 8;
    o->rope_theta = 10000.0;
    o->vocab_size = 512;
    o->dense_intermediate_size = 96;
    o->intermediate_size = 32;
    o->shared_intermediate_size = 32;
    o->num_experts = 8;
    o->num_experts_per_tok = 2;
    o->routed_scaling_factor = 2.0f;
    o->index_head_dim = 16;
    o->index_topk = 3;
    o->block_size = 4;
    o->local_blocks = 1;
    o->init_blocks = 0;
    o->n_dense = 1;
    o->max_position_embeddings = 4096;
    o->eos_token_id = -1;
    o->bos_token_id = -1;
    o->mtp_tensors = 0;
    o->seed = 1234;
}

static inline int m3_fixture_is_sparse(const m3_fixture_opts *o, int l)
{
    return o->layer_sparse ? o->layer_sparse[l] == '1' : l >= o->n_dense;
}

static inline int m3_fixture_is_moe(const m3_fixture_opts *o, int l)
{
    return o->layer_moe ? o->layer_moe[l] == '1' : l >= o->n_dense;
}

static inline uint64_t m3_fixture_splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-a, a) from the stream. */
static inline float m3_fixture_uniform(uint64_t *x, float a)
{
    double u = (double)(m3_fixture_splitmix(x) >> 11) * (1.0 / 9007199254740992.0);
    return (float)((2.0 * u - 1.0) * a);
}

/* Add a random tensor [d0, d1] (d1 = 0: 1-D) of dtype BF16 or F32. */
static inline int m3_fixture_tensor(m3_st_writer *w, const m3_fixture_opts *o, const char *name,
                                    m3_dtype dt, int64_t d0, int64_t d1, float a, m3_err *e)
{
    uint64_t st = o->seed * 0x2545f4914f6cdd1dull + 0x9e3779b97f4a7c15ull;
    for (const char *p = name; *p; p++) /* FNV-1a of the name */
        st = (st ^ (uint64_t)(unsigned char)*p) * 0x100000001b3ull;
    size_t n = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    void *buf = malloc(n * (dt == M3_F32 ? 4 : 2) + 1);
    if (!buf)
        return m3_fail(e, "fixture: out of memory for %s", name);
    for (size_t i = 0; i < n; i++) {
        float v = m3_fixture_uniform(&st, a);
        if (dt == M3_F32)
            ((float *)buf)[i] = v;
        else
            ((uint16_t *)buf)[i] = m3_f32_to_bf16(v);
    }
    int64_t shape[2] = {d0, d1};
    int rc = m3_st_writer_add(w, name, dt, d1 ? 2 : 1, shape, buf, e);
    free(buf);
    return rc;
}

static inline int m3_fixture_linear(m3_st_writer *w, const m3_fixture_opts *o, const char *name,
                                    int rows, int cols, m3_err *e)
{
    return m3_fixture_tensor(w, o, name, M3_BF16, rows, cols, sqrtf(3.0f / (float)cols), e);
}

/* Write "[b0, b1, ...]" for layer flags into f. */
static inline void m3_fixture_flags(FILE *f, const m3_fixture_opts *o, int moe)
{
    fputc('[', f);
    for (int l = 0; l < o->num_layers; l++)
        fprintf(f, "%s%d", l ? ", " : "", moe ? m3_fixture_is_moe(o, l) : m3_fixture_is_sparse(o, l));
    fputc(']', f);
}

/* Write dir/config.json (released dialect) for o. */
static inline int m3_fixture_write_config(const char *dir, const m3_fixture_opts *o, m3_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return m3_fail(e, "fixture: cannot create %s: %s", path, strerror(errno));
    fprintf(f, "{\n  \"architectures\": [\"MiniMaxM3SparseForConditionalGeneration\"],\n"
               "  \"model_type\": \"minimax_m3_vl\",\n"
               "  \"image_token_index\": 200025,\n  \"video_token_index\": 200026,\n"
               "  \"torch_dtype\": \"bfloat16\",\n"
               "  \"text_config\": {\n"
               "    \"architectures\": [\"MiniMaxM3SparseForCausalLM\"],\n");
    fprintf(f, "    \"hidden_size\": %d,\n    \"intermediate_size\": %d,\n"
               "    \"dense_intermediate_size\": %d,\n    \"shared_intermediate_size\": %d,\n",
            o->hidden_size, o->intermediate_size, o->dense_intermediate_size,
            o->shared_intermediate_size);
    fprintf(f, "    \"num_hidden_layers\": %d,\n    \"num_attention_heads\": %d,\n"
               "    \"num_key_value_heads\": %d,\n    \"head_dim\": %d,\n"
               "    \"vocab_size\": %d,\n    \"max_position_embeddings\": %lld,\n",
            o->num_layers, o->num_heads, o->num_kv_heads, o->head_dim, o->vocab_size,
            o->max_position_embeddings);
    fprintf(f, "    \"rms_norm_eps\": 1e-06,\n    \"use_gemma_norm\": true,\n"
               "    \"attention_output_gate\": false,\n    \"rope_theta\": %.17g,\n"
               "    \"rotary_dim\": %d,\n    \"partial_rotary_factor\": %.17g,\n"
               "    \"hidden_act\": \"swigluoai\",\n    \"use_qk_norm\": true,\n"
               "    \"qk_norm_type\": \"per_head\",\n    \"tie_word_embeddings\": false,\n",
            o->rope_theta, o->rotary_dim, (double)o->rotary_dim / (double)o->head_dim);
    fprintf(f, "    \"num_local_experts\": %d,\n    \"num_experts_per_tok\": %d,\n"
               "    \"n_shared_experts\": %d,\n    \"scoring_func\": \"sigmoid\",\n"
               "    \"use_routing_bias\": true,\n    \"routed_scaling_factor\": %.9g,\n"
               "    \"swiglu_alpha\": 1.702,\n    \"swiglu_limit\": 7.0,\n",
            o->num_experts, o->num_experts_per_tok, o->shared_intermediate_size > 0 ? 1 : 0,
            (double)o->routed_scaling_factor);
    if (o->eos_token_id >= 0)
        fprintf(f, "    \"eos_token_id\": %d,\n", o->eos_token_id);
    if (o->bos_token_id >= 0)
        fprintf(f, "    \"bos_token_id\": %d,\n", o->bos_token_id);
    fprintf(f, "    \"moe_layer_freq\": ");
    m3_fixture_flags(f, o, 1);
    fprintf(f, ",\n    \"num_mtp_modules\": %d,\n    \"num_nextn_predict_layers\": 1,\n",
            o->mtp_tensors > 0 ? 1 : 0);
    fprintf(f, "    \"sparse_attention_config\": {\n"
               "      \"use_sparse_attention\": true,\n      \"sparse_index_dim\": %d,\n"
               "      \"sparse_num_index_heads\": %d,\n      \"sparse_topk_blocks\": %d,\n"
               "      \"sparse_block_size\": %d,\n      \"sparse_score_type\": \"max\",\n"
               "      \"sparse_init_block\": %d,\n      \"sparse_local_block\": %d,\n"
               "      \"sparse_attention_freq\": ",
            o->index_head_dim, o->num_kv_heads, o->index_topk, o->block_size, o->init_blocks,
            o->local_blocks);
    m3_fixture_flags(f, o, 0);
    fprintf(f, ",\n      \"sparse_disable_index_value\": ");
    m3_fixture_flags(f, o, 0);
    fprintf(f, "\n    }\n  }\n}\n");
    if (fclose(f) != 0)
        return m3_fail(e, "fixture: cannot write %s", path);
    return 0;
}

/* Fill w with every tensor of the public layout for o. */
static inline int m3_fixture_add_weights(m3_st_writer *w, const m3_fixture_opts *o, m3_err *e)
{
    const int H = o->hidden_size, nh = o->num_heads, nkv = o->num_kv_heads, hd = o->head_dim;
    const int ihd = o->index_head_dim;
    char n[256];
#define M3FX_TRY(x)                                                                                \
    do {                                                                                           \
        if ((x) != 0)                                                                              \
            return -1;                                                                             \
    } while (0)
    M3FX_TRY(m3_fixture_tensor(w, o, "language_model.model.embed_tokens.weight", M3_BF16,
                               o->vocab_size, H, 1.0f, e));
    M3FX_TRY(m3_fixture_linear(w, o, "language_model.lm_head.weight", o->vocab_size, H, e));
    M3FX_TRY(m3_fixture_tensor(w, o, "language_model.model.norm.weight", M3_BF16, H, 0, 0.2f, e));
    for (int l = 0; l < o->num_layers; l++) {
        const char *p = "language_model.model.layers";
#define M3FX_NAME(fmt) snprintf(n, sizeof n, "%s.%d." fmt, p, l)
        M3FX_NAME("input_layernorm.weight");
        M3FX_TRY(m3_fixture_tensor(w, o, n, M3_BF16, H, 0, 0.2f, e));
        M3FX_NAME("post_attention_layernorm.weight");
        M3FX_TRY(m3_fixture_tensor(w, o, n, M3_BF16, H, 0, 0.2f, e));
        M3FX_NAME("self_attn.q_proj.weight");
        M3FX_TRY(m3_fixture_linear(w, o, n, nh * hd, H, e));
        M3FX_NAME("self_attn.k_proj.weight");
        M3FX_TRY(m3_fixture_linear(w, o, n, nkv * hd, H, e));
        M3FX_NAME("self_attn.v_proj.weight");
        M3FX_TRY(m3_fixture_linear(w, o, n, nkv * hd, H, e));
        M3FX_NAME("self_attn.o_proj.weight");
        M3FX_TRY(m3_fixture_linear(w, o, n, H, nh * hd, e));
        M3FX_NAME("self_attn.q_norm.weight");
        M3FX_TRY(m3_fixture_tensor(w, o, n, M3_BF16, hd, 0, 0.2f, e));
        M3FX_NAME("self_attn.k_norm.weight");
        M3FX_TRY(m3_fixture_tensor(w, o, n, M3_BF16, hd, 0, 0.2f, e));
        if (m3_fixture_is_sparse(o, l)) {
            M3FX_NAME("self_attn.index_q_proj.weight");
            M3FX_TRY(m3_fixture_linear(w, o, n, nkv * ihd, H, e));
            M3FX_NAME("self_attn.index_k_proj.weight");
            M3FX_TRY(m3_fixture_linear(w, o, n, ihd, H, e));
            M3FX_NAME("self_attn.index_q_norm.weight");
            M3FX_TRY(m3_fixture_tensor(w, o, n, M3_BF16, ihd, 0, 0.2f, e));
            M3FX_NAME("self_attn.index_k_norm.weight");
            M3FX_TRY(m3_fixture_tensor(w, o, n, M3_BF16, ihd, 0, 0.2f, e));
        }
        if (!m3_fixture_is_moe(o, l)) {
            const int I = o->dense_intermediate_size;
            M3FX_NAME("mlp.gate_proj.weight");
            M3FX_TRY(m3_fixture_linear(w, o, n, I, H, e));
            M3FX_NAME("mlp.up_proj.weight");
            M3FX_TRY(m3_fixture_linear(w, o, n, I, H, e));
            M3FX_NAME("mlp.down_proj.weight");
            M3FX_TRY(m3_fixture_linear(w, o, n, H, I, e));
            continue;
        }
        const int I = o->intermediate_size, Is = o->shared_intermediate_size;
        M3FX_NAME("block_sparse_moe.gate.weight");
        M3FX_TRY(m3_fixture_tensor(w, o, n, M3_F32, o->num_experts, H, sqrtf(3.0f / (float)H), e));
        M3FX_NAME("block_sparse_moe.e_score_correction_bias");
        M3FX_TRY(m3_fixture_tensor(w, o, n, M3_F32, o->num_experts, 0, 0.1f, e));
        for (int x = 0; x < o->num_experts; x++) {
            snprintf(n, sizeof n, "%s.%d.block_sparse_moe.experts.%d.w1.weight", p, l, x);
            M3FX_TRY(m3_fixture_linear(w, o, n, I, H, e));
            snprintf(n, sizeof n, "%s.%d.block_sparse_moe.experts.%d.w3.weight", p, l, x);
            M3FX_TRY(m3_fixture_linear(w, o, n, I, H, e));
            snprintf(n, sizeof n, "%s.%d.block_sparse_moe.experts.%d.w2.weight", p, l, x);
            M3FX_TRY(m3_fixture_linear(w, o, n, H, I, e));
        }
        if (Is > 0) {
            M3FX_NAME("block_sparse_moe.shared_experts.gate_proj.weight");
            M3FX_TRY(m3_fixture_linear(w, o, n, Is, H, e));
            M3FX_NAME("block_sparse_moe.shared_experts.up_proj.weight");
            M3FX_TRY(m3_fixture_linear(w, o, n, Is, H, e));
            M3FX_NAME("block_sparse_moe.shared_experts.down_proj.weight");
            M3FX_TRY(m3_fixture_linear(w, o, n, H, Is, e));
        }
#undef M3FX_NAME
    }
    for (int i = 0; i < o->mtp_tensors; i++) {
        snprintf(n, sizeof n, "language_model.model.mtp.layers.0.extra_%d.weight", i);
        M3FX_TRY(m3_fixture_tensor(w, o, n, M3_BF16, H, 0, 0.2f, e));
    }
#undef M3FX_TRY
    return 0;
}

/* Create dir (one level) and write config.json + model.safetensors for o. */
static inline int m3_fixture_write(const char *dir, const m3_fixture_opts *o, m3_err *e)
{
    if (o->num_layers <= 0 || o->num_layers > M3_FIXTURE_MAX_LAYERS)
        return m3_fail(e, "fixture: num_layers %d out of range", o->num_layers);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return m3_fail(e, "fixture: cannot create %s: %s", dir, strerror(errno));
    if (m3_fixture_write_config(dir, o, e) != 0)
        return -1;
    m3_st_writer *w = m3_st_writer_new();
    if (!w)
        return m3_fail(e, "fixture: out of memory");
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = m3_fixture_add_weights(w, o, e);
    if (rc == 0)
        rc = m3_st_writer_save(w, path, e);
    m3_st_writer_free(w);
    return rc;
}

#endif
