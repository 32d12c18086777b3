/* test_weights.c — binding a checkpoint in the public layout and in the HF v5
 * fused layouts gives the same values (M3-CKPT-NAMES-1/2, M3-CKPT-MTP-1).
 *
 * A tiny model (3 layers: dense+dense-attn, then 2 MSA+MoE; 3 experts; a
 * 1-layer vision tower) is written three times from one value function:
 * public names, HF v5 VL fused names, HF text CausalLM fused names. Every
 * bound view must read the value the public tensor holds at that element.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "safetensors.h"
#include "weights.h"

enum { H = 8, NL = 3, NH = 2, NKV = 1, HD = 4, V = 11, I = 4, ID = 6, IS = 4, E = 3, IHD = 4,
       HV = 4, IV = 6, PJ = 5, PS = 2, TP = 2, CH = 3, MG = 2 };

static const char *CFG_VL =
    "{\"model_type\":\"minimax_m3_vl\",\"projector_hidden_size\":5,"
    "\"image_token_index\":9,\"video_token_index\":10,"
    "\"text_config\":{\"hidden_size\":8,\"num_hidden_layers\":3,\"num_attention_heads\":2,"
    "\"num_key_value_heads\":1,\"head_dim\":4,\"vocab_size\":11,\"rotary_dim\":4,"
    "\"intermediate_size\":4,\"dense_intermediate_size\":6,\"shared_intermediate_size\":4,"
    "\"num_local_experts\":3,\"num_experts_per_tok\":2,\"hidden_act\":\"swigluoai\","
    "\"moe_layer_freq\":[0,1,1],\"sparse_attention_config\":{\"use_sparse_attention\":true,"
    "\"sparse_index_dim\":4,\"sparse_num_index_heads\":1,\"sparse_topk_blocks\":2,"
    "\"sparse_block_size\":2,\"sparse_score_type\":\"max\",\"sparse_init_block\":0,"
    "\"sparse_local_block\":1,\"sparse_attention_freq\":[0,1,1],"
    "\"sparse_disable_index_value\":[0,1,1]}},"
    "\"vision_config\":{\"hidden_size\":4,\"intermediate_size\":6,\"num_hidden_layers\":1,"
    "\"num_attention_heads\":2,\"patch_size\":2,\"num_channels\":3,"
    "\"img_token_compression_config\":{\"spatial_merge_size\":2,\"temporal_patch_size\":2}}}";

static char g_dir[256];

/* Deterministic value of element i of the public tensor `name` (exact in bf16). */
static float val(const char *name, size_t i)
{
    uint32_t h = 2166136261u;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ (uint32_t)i) * 16777619u;
    h ^= h >> 13;
    return (float)((int)(h % 255u) - 127) / 64.0f;
}

/* ------------------------------------------------------------ generator */

typedef struct gen {
    m3_st_writer *w;
    int mode;             /* 0 public, 1 HF v5 VL fused, 2 HF text CausalLM fused */
    int vision;           /* write vision tensors */
    const char *skip;     /* public name to leave out */
    const char *misshape; /* public name written with one extra row */
    const char *as_int;   /* public name written as I32 */
} gen;

static float buf[4096];

/* Write one tensor under `name` whose values come from public tensors
 * srcs[0..ns) concatenated along dim 0 (each numel/ns elements). */
static void put(gen *g, const char *name, int nd, const int64_t *shape, const char *const *srcs,
                int ns, const char *pub_for_hooks)
{
    m3_err e = {{0}};
    if (g->skip && strcmp(pub_for_hooks, g->skip) == 0)
        return;
    int64_t sh[8];
    size_t n = 1;
    for (int i = 0; i < nd; i++) {
        sh[i] = shape[i];
        n *= (size_t)shape[i];
    }
    size_t part = n / (size_t)ns;
    for (int s = 0; s < ns; s++)
        for (size_t i = 0; i < part; i++)
            buf[(size_t)s * part + i] = val(srcs[s], i);
    if (g->misshape && strcmp(pub_for_hooks, g->misshape) == 0) {
        sh[0] += 1;
        for (size_t i = n; i < n + n / (size_t)shape[0]; i++)
            buf[i] = 0;
    }
    m3_dtype dt = M3_F32;
    if (strstr(name, "embed_tokens") || strstr(name, "q_proj.weight"))
        dt = M3_BF16;
    if (g->as_int && strcmp(pub_for_hooks, g->as_int) == 0)
        dt = M3_I32;
    size_t total = 1;
    for (int i = 0; i < nd; i++)
        total *= (size_t)sh[i];
    if (dt == M3_BF16) {
        uint16_t *b = malloc(total * 2);
        for (size_t i = 0; i < total; i++)
            b[i] = m3_f32_to_bf16(buf[i]);
        assert_int_equal(m3_st_writer_add(g->w, name, dt, nd, sh, b, &e), 0);
        free(b);
    } else if (dt == M3_I32) {
        int32_t *b = malloc(total * 4);
        for (size_t i = 0; i < total; i++)
            b[i] = (int32_t)buf[i];
        assert_int_equal(m3_st_writer_add(g->w, name, dt, nd, sh, b, &e), 0);
        free(b);
    } else {
        assert_int_equal(m3_st_writer_add(g->w, name, dt, nd, sh, buf, &e), 0);
    }
}

/* A tensor that is the same single public tensor under both names. */
static void one(gen *g, const char *pub, const char *fused, int d0, int d1)
{
    int64_t sh[2] = {d0, d1};
    const char *src[1] = {pub};
    put(g, g->mode == 0 ? pub : fused, d1 ? 2 : 1, sh, src, 1, pub);
}

static void gen_model(gen *g)
{
    char pub[256], fu[256], a[256], b[256];
    const char *TP_ = g->mode == 1 ? "model.language_model." : "model.";
    snprintf(fu, sizeof fu, "%sembed_tokens.weight", TP_);
    one(g, "language_model.model.embed_tokens.weight", fu, V, H);
    snprintf(fu, sizeof fu, "%snorm.weight", TP_);
    one(g, "language_model.model.norm.weight", fu, H, 0);
    one(g, "language_model.lm_head.weight", "lm_head.weight", V, H);
    for (int L = 0; L < NL; L++) {
#define PUB(s) (snprintf(pub, sizeof pub, "language_model.model.layers.%d.%s", L, s), pub)
#define FU(s) (snprintf(fu, sizeof fu, "%slayers.%d.%s", TP_, L, s), fu)
        one(g, PUB("input_layernorm.weight"), FU("input_layernorm.weight"), H, 0);
        one(g, PUB("post_attention_layernorm.weight"), FU("post_attention_layernorm.weight"), H, 0);
        one(g, PUB("self_attn.q_proj.weight"), FU("self_attn.q_proj.weight"), NH * HD, H);
        one(g, PUB("self_attn.k_proj.weight"), FU("self_attn.k_proj.weight"), NKV * HD, H);
        one(g, PUB("self_attn.v_proj.weight"), FU("self_attn.v_proj.weight"), NKV * HD, H);
        one(g, PUB("self_attn.o_proj.weight"), FU("self_attn.o_proj.weight"), H, NH * HD);
        one(g, PUB("self_attn.q_norm.weight"), FU("self_attn.q_norm.weight"), HD, 0);
        one(g, PUB("self_attn.k_norm.weight"), FU("self_attn.k_norm.weight"), HD, 0);
        if (L == 0) {
            if (g->mode == 0) {
                one(g, PUB("mlp.gate_proj.weight"), "", ID, H);
                one(g, PUB("mlp.up_proj.weight"), "", ID, H);
            } else {
                snprintf(a, sizeof a, "language_model.model.layers.%d.mlp.gate_proj.weight", L);
                snprintf(b, sizeof b, "language_model.model.layers.%d.mlp.up_proj.weight", L);
                const char *src[2] = {a, b};
                int64_t sh[2] = {2 * ID, H};
                put(g, FU("mlp.gate_up_proj.weight"), 2, sh, src, 2, a);
            }
            one(g, PUB("mlp.down_proj.weight"), FU("mlp.down_proj.weight"), H, ID);
            continue;
        }
        one(g, PUB("self_attn.index_q_proj.weight"), FU("self_attn.indexer.q_proj.weight"),
            NKV * IHD, H);
        one(g, PUB("self_attn.index_k_proj.weight"), FU("self_attn.indexer.k_proj.weight"), IHD,
            H);
        one(g, PUB("self_attn.index_q_norm.weight"), FU("self_attn.indexer.q_norm.weight"), IHD,
            0);
        one(g, PUB("self_attn.index_k_norm.weight"), FU("self_attn.indexer.k_norm.weight"), IHD,
            0);
        one(g, PUB("block_sparse_moe.gate.weight"), FU("mlp.gate.weight"), E, H);
        one(g, PUB("block_sparse_moe.e_score_correction_bias"),
            FU("mlp.gate.e_score_correction_bias"), E, 0);
        if (g->mode == 0) {
            for (int x = 0; x < E; x++) {
                char s[96];
                snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w1.weight", x);
                one(g, PUB(s), "", I, H);
                snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w3.weight", x);
                one(g, PUB(s), "", I, H);
                snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w2.weight", x);
                one(g, PUB(s), "", H, I);
            }
            one(g, PUB("block_sparse_moe.shared_experts.gate_proj.weight"), "", IS, H);
            one(g, PUB("block_sparse_moe.shared_experts.up_proj.weight"), "", IS, H);
        } else {
            char names[2 * E][128], dn[E][128];
            const char *gu[2 * E], *d[E];
            for (int x = 0; x < E; x++) {
                snprintf(names[2 * x], 128,
                         "language_model.model.layers.%d.block_sparse_moe.experts.%d.w1.weight", L, x);
                snprintf(names[2 * x + 1], 128,
                         "language_model.model.layers.%d.block_sparse_moe.experts.%d.w3.weight", L, x);
                snprintf(dn[x], 128,
                         "language_model.model.layers.%d.block_sparse_moe.experts.%d.w2.weight", L, x);
                gu[2 * x] = names[2 * x];
                gu[2 * x + 1] = names[2 * x + 1];
                d[x] = dn[x];
            }
            int64_t s1[3] = {E, 2 * I, H}, s2[3] = {E, H, I};
            put(g, FU("mlp.experts.gate_up_proj"), 3, s1, gu, 2 * E, names[0]);
            put(g, FU("mlp.experts.down_proj"), 3, s2, d, E, dn[0]);
            snprintf(a, sizeof a,
                     "language_model.model.layers.%d.block_sparse_moe.shared_experts.gate_proj.weight", L);
            snprintf(b, sizeof b,
                     "language_model.model.layers.%d.block_sparse_moe.shared_experts.up_proj.weight", L);
            const char *src[2] = {a, b};
            int64_t sh[2] = {2 * IS, H};
            put(g, FU("mlp.shared_experts.gate_up_proj.weight"), 2, sh, src, 2, a);
        }
        one(g, PUB("block_sparse_moe.shared_experts.down_proj.weight"),
            FU("mlp.shared_experts.down_proj.weight"), H, IS);
#undef PUB
#undef FU
    }
    if (!g->vision)
        return;
    int hf = g->mode != 0;
    {
        int64_t sh[5] = {HV, CH, TP, PS, PS};
        const char *src[1] = {"vision_tower.vision_model.embeddings.patch_embedding.weight"};
        put(g, hf ? "model.vision_tower.embeddings.proj.weight" : src[0], 5, sh, src, 1, src[0]);
    }
    one(g, "vision_tower.vision_model.pre_layrnorm.weight", "model.vision_tower.pre_layrnorm.weight", HV, 0);
    one(g, "vision_tower.vision_model.pre_layrnorm.bias", "model.vision_tower.pre_layrnorm.bias", HV, 0);
    static const struct {
        const char *s;
        int d0, d1;
    } vl[] = {{"layer_norm1.weight", HV, 0}, {"layer_norm1.bias", HV, 0},
              {"layer_norm2.weight", HV, 0}, {"layer_norm2.bias", HV, 0},
              {"self_attn.q_proj.weight", HV, HV}, {"self_attn.q_proj.bias", HV, 0},
              {"self_attn.k_proj.weight", HV, HV}, {"self_attn.k_proj.bias", HV, 0},
              {"self_attn.v_proj.weight", HV, HV}, {"self_attn.v_proj.bias", HV, 0},
              {"self_attn.out_proj.weight", HV, HV}, {"self_attn.out_proj.bias", HV, 0},
              {"mlp.fc1.weight", IV, HV}, {"mlp.fc1.bias", IV, 0},
              {"mlp.fc2.weight", HV, IV}, {"mlp.fc2.bias", HV, 0}};
    for (size_t i = 0; i < sizeof vl / sizeof vl[0]; i++) {
        snprintf(pub, sizeof pub, "vision_tower.vision_model.encoder.layers.0.%s", vl[i].s);
        snprintf(fu, sizeof fu, "model.vision_tower.layers.0.%s", vl[i].s);
        one(g, pub, fu, vl[i].d0, vl[i].d1);
    }
    one(g, "multi_modal_projector.linear_1.weight", "model.multi_modal_projector.linear_1.weight", PJ, HV);
    one(g, "multi_modal_projector.linear_1.bias", "model.multi_modal_projector.linear_1.bias", PJ, 0);
    one(g, "multi_modal_projector.linear_2.weight", "model.multi_modal_projector.linear_2.weight", H, PJ);
    one(g, "multi_modal_projector.linear_2.bias", "model.multi_modal_projector.linear_2.bias", H, 0);
    one(g, "patch_merge_mlp.linear_1.weight", "model.multi_modal_projector.merge_linear_1.weight", PJ, H * MG * MG);
    one(g, "patch_merge_mlp.linear_1.bias", "model.multi_modal_projector.merge_linear_1.bias", PJ, 0);
    one(g, "patch_merge_mlp.linear_2.weight", "model.multi_modal_projector.merge_linear_2.weight", H, PJ);
    one(g, "patch_merge_mlp.linear_2.bias", "model.multi_modal_projector.merge_linear_2.bias", H, 0);
}

/* Write the model as `file` under g_dir; extras: (name, n) pairs of F32 vectors. */
static const char *write_model(gen *g, const char *file, const char *const *extra, int nextra)
{
    static char p[512];
    m3_err e = {{0}};
    g->w = m3_st_writer_new();
    gen_model(g);
    float z[4] = {0};
    int64_t sh[1] = {4};
    for (int i = 0; i < nextra; i++)
        assert_int_equal(m3_st_writer_add(g->w, extra[i], M3_F32, 1, sh, z, &e), 0);
    snprintf(p, sizeof p, "%s/%s", g_dir, file);
    assert_int_equal(m3_st_writer_save(g->w, p, &e), 0);
    m3_st_writer_free(g->w);
    return p;
}

static void load_cfg(m3_config *c, const char *json)
{
    m3_err e = {{0}};
    if (m3_config_parse(c, json, strlen(json), "config.json", NULL, &e) != 0)
        fail_msg("%s", e.msg);
}

/* Bind; return rc and keep the store open in *s (caller closes). */
static int bind(const m3_config *c, const char *path, m3_store **s, m3_weights *w, m3_err *e)
{
    if (m3_store_open(s, path, e) != 0)
        fail_msg("%s", e->msg);
    return m3_weights_bind(w, c, *s, e);
}

/* ------------------------------------------------------------ comparisons */

static void mat_is(const m3_mat *m, const char *pub, int rows, int cols)
{
    assert_non_null(m->data);
    assert_int_equal(m->rows, rows);
    assert_int_equal(m->cols, cols);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            if (m3_mat_at(m, r, c) != val(pub, (size_t)r * cols + c))
                fail_msg("%s [%d,%d]: %g vs %g", pub, r, c, m3_mat_at(m, r, c),
                         val(pub, (size_t)r * cols + c));
}

static void vec_is(const m3_vec *v, const char *pub, int n)
{
    assert_non_null(v->data);
    assert_int_equal(v->n, n);
    for (int i = 0; i < n; i++)
        if (m3_vec_at(v, i) != val(pub, (size_t)i))
            fail_msg("%s [%d]", pub, i);
}

/* Every view of w holds the public tensor's values. */
static void check_all(const m3_weights *w, int vision)
{
    char p[256];
    mat_is(&w->embed, "language_model.model.embed_tokens.weight", V, H);
    mat_is(&w->lm_head, "language_model.lm_head.weight", V, H);
    vec_is(&w->final_norm, "language_model.model.norm.weight", H);
    for (int L = 0; L < NL; L++) {
        const m3_layer_weights *l = &w->layers[L];
#define P(s) (snprintf(p, sizeof p, "language_model.model.layers.%d.%s", L, s), p)
        vec_is(&l->input_norm, P("input_layernorm.weight"), H);
        vec_is(&l->post_norm, P("post_attention_layernorm.weight"), H);
        mat_is(&l->q, P("self_attn.q_proj.weight"), NH * HD, H);
        mat_is(&l->k, P("self_attn.k_proj.weight"), NKV * HD, H);
        mat_is(&l->v, P("self_attn.v_proj.weight"), NKV * HD, H);
        mat_is(&l->o, P("self_attn.o_proj.weight"), H, NH * HD);
        vec_is(&l->q_norm, P("self_attn.q_norm.weight"), HD);
        vec_is(&l->k_norm, P("self_attn.k_norm.weight"), HD);
        if (L == 0) {
            assert_null(l->index_q.data);
            assert_null(l->router.data);
            assert_null(l->exp_gate);
            mat_is(&l->mlp_gate, P("mlp.gate_proj.weight"), ID, H);
            mat_is(&l->mlp_up, P("mlp.up_proj.weight"), ID, H);
            mat_is(&l->mlp_down, P("mlp.down_proj.weight"), H, ID);
            continue;
        }
        assert_null(l->mlp_gate.data);
        mat_is(&l->index_q, P("self_attn.index_q_proj.weight"), IHD, H);
        mat_is(&l->index_k, P("self_attn.index_k_proj.weight"), IHD, H);
        vec_is(&l->index_q_norm, P("self_attn.index_q_norm.weight"), IHD);
        vec_is(&l->index_k_norm, P("self_attn.index_k_norm.weight"), IHD);
        mat_is(&l->router, P("block_sparse_moe.gate.weight"), E, H);
        vec_is(&l->router_bias, P("block_sparse_moe.e_score_correction_bias"), E);
        for (int x = 0; x < E; x++) {
            char s[96];
            snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w1.weight", x);
            mat_is(&l->exp_gate[x], P(s), I, H);
            snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w3.weight", x);
            mat_is(&l->exp_up[x], P(s), I, H);
            snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w2.weight", x);
            mat_is(&l->exp_down[x], P(s), H, I);
        }
        mat_is(&l->sh_gate, P("block_sparse_moe.shared_experts.gate_proj.weight"), IS, H);
        mat_is(&l->sh_up, P("block_sparse_moe.shared_experts.up_proj.weight"), IS, H);
        mat_is(&l->sh_down, P("block_sparse_moe.shared_experts.down_proj.weight"), H, IS);
#undef P
    }
    assert_int_equal(w->has_vision, vision);
    if (!vision)
        return;
    const m3_vision_weights *v = &w->vision;
    mat_is(&v->patch_embed, "vision_tower.vision_model.embeddings.patch_embedding.weight", HV,
           CH * TP * PS * PS);
    vec_is(&v->pre_ln_w, "vision_tower.vision_model.pre_layrnorm.weight", HV);
    vec_is(&v->pre_ln_b, "vision_tower.vision_model.pre_layrnorm.bias", HV);
    const m3_vision_layer_weights *l = &v->layers[0];
#define VP(s) "vision_tower.vision_model.encoder.layers.0." s
    vec_is(&l->ln1_w, VP("layer_norm1.weight"), HV);
    vec_is(&l->ln1_b, VP("layer_norm1.bias"), HV);
    vec_is(&l->ln2_w, VP("layer_norm2.weight"), HV);
    vec_is(&l->ln2_b, VP("layer_norm2.bias"), HV);
    mat_is(&l->q, VP("self_attn.q_proj.weight"), HV, HV);
    mat_is(&l->k, VP("self_attn.k_proj.weight"), HV, HV);
    mat_is(&l->v, VP("self_attn.v_proj.weight"), HV, HV);
    mat_is(&l->o, VP("self_attn.out_proj.weight"), HV, HV);
    vec_is(&l->q_b, VP("self_attn.q_proj.bias"), HV);
    vec_is(&l->k_b, VP("self_attn.k_proj.bias"), HV);
    vec_is(&l->v_b, VP("self_attn.v_proj.bias"), HV);
    vec_is(&l->o_b, VP("self_attn.out_proj.bias"), HV);
    mat_is(&l->fc1, VP("mlp.fc1.weight"), IV, HV);
    vec_is(&l->fc1_b, VP("mlp.fc1.bias"), IV);
    mat_is(&l->fc2, VP("mlp.fc2.weight"), HV, IV);
    vec_is(&l->fc2_b, VP("mlp.fc2.bias"), HV);
#undef VP
    mat_is(&v->proj1, "multi_modal_projector.linear_1.weight", PJ, HV);
    vec_is(&v->proj1_b, "multi_modal_projector.linear_1.bias", PJ);
    mat_is(&v->proj2, "multi_modal_projector.linear_2.weight", H, PJ);
    vec_is(&v->proj2_b, "multi_modal_projector.linear_2.bias", H);
    mat_is(&v->merge1, "patch_merge_mlp.linear_1.weight", PJ, H * MG * MG);
    vec_is(&v->merge1_b, "patch_merge_mlp.linear_1.bias", PJ);
    mat_is(&v->merge2, "patch_merge_mlp.linear_2.weight", H, PJ);
    vec_is(&v->merge2_b, "patch_merge_mlp.linear_2.bias", H);
}

/* ------------------------------------------------------------ tests */

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/m3-test-weights-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_layouts_same_values(void **state)
{
    (void)state;
    m3_config c;
    load_cfg(&c, CFG_VL);
    m3_err e = {{0}};
    const char *paths[2];
    gen g0 = {.mode = 0, .vision = 1};
    paths[0] = strdup(write_model(&g0, "public.safetensors", NULL, 0));
    gen g1 = {.mode = 1, .vision = 1};
    paths[1] = strdup(write_model(&g1, "hfv5.safetensors", NULL, 0));
    for (int k = 0; k < 2; k++) {
        m3_store *s;
        m3_weights w;
        if (bind(&c, paths[k], &s, &w, &e) != 0)
            fail_msg("%s", e.msg);
        assert_int_equal(w.layout, k);
        assert_int_equal(w.ignored_mtp, 0);
        assert_int_equal(w.num_layers, NL);
        check_all(&w, 1);
        m3_weights_free(&w);
        m3_store_close(s);
        free((void *)paths[k]);
    }

    /* HF text-only CausalLM layout with a flat text config */
    const char *flat =
        "{\"model_type\":\"minimax_m3_vl_text\",\"hidden_size\":8,\"num_hidden_layers\":3,"
        "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":4,\"vocab_size\":11,"
        "\"rotary_dim\":4,\"intermediate_size\":4,\"dense_intermediate_size\":6,"
        "\"shared_intermediate_size\":4,\"num_local_experts\":3,\"num_experts_per_tok\":2,"
        "\"hidden_act\":\"silu\",\"mlp_layer_types\":[\"dense\",\"sparse\",\"sparse\"],"
        "\"layer_types\":[\"full_attention\",\"minimax_m3_sparse\",\"minimax_m3_sparse\"],"
        "\"index_n_heads\":1,\"index_head_dim\":4,\"index_block_size\":2,"
        "\"index_topk_blocks\":2,\"index_local_blocks\":1}";
    m3_config cf;
    load_cfg(&cf, flat);
    assert_memory_equal(&cf.text, &c.text, sizeof c.text);
    gen g2 = {.mode = 2, .vision = 0};
    const char *p = write_model(&g2, "causal.safetensors", NULL, 0);
    m3_store *s;
    m3_weights w;
    if (bind(&cf, p, &s, &w, &e) != 0)
        fail_msg("%s", e.msg);
    assert_int_equal(w.layout, 1);
    check_all(&w, 0);
    m3_weights_free(&w);
    m3_store_close(s);
}

static void expect_bind_fail(const m3_config *c, const char *path, const char *f1, const char *f2)
{
    m3_store *s;
    m3_weights w;
    m3_err e = {{0}};
    int rc = bind(c, path, &s, &w, &e);
    m3_store_close(s);
    if (rc != -1 || !strstr(e.msg, f1) || (f2 && !strstr(e.msg, f2)))
        fail_msg("rc %d, message '%s' lacks '%s' / '%s'", rc, e.msg, f1, f2 ? f2 : "");
    assert_null(w.layers); /* freed on failure */
}

static void test_bind_errors(void **state)
{
    (void)state;
    m3_config c;
    load_cfg(&c, CFG_VL);
    m3_err e = {{0}};
    gen g = {.mode = 0, .vision = 1,
             .skip = "language_model.model.layers.2.block_sparse_moe.experts.1.w3.weight"};
    expect_bind_fail(&c, write_model(&g, "skip.safetensors", NULL, 0),
                     "missing tensor language_model.model.layers.2.block_sparse_moe.experts.1.w3.weight",
                     "(expected [4, 8])");
    gen g2 = {.mode = 0, .vision = 1, .misshape = "language_model.model.layers.1.self_attn.k_proj.weight"};
    expect_bind_fail(&c, write_model(&g2, "shape.safetensors", NULL, 0),
                     "tensor language_model.model.layers.1.self_attn.k_proj.weight: shape [5, 8] vs "
                     "expected [4, 8]",
                     "shape.safetensors");
    gen g3 = {.mode = 0, .vision = 1, .as_int = "language_model.model.norm.weight"};
    expect_bind_fail(&c, write_model(&g3, "int.safetensors", NULL, 0),
                     "tensor language_model.model.norm.weight: dtype I32 is not a floating", NULL);
    /* a fused tensor with the wrong shape is named too */
    gen g4 = {.mode = 1, .vision = 1,
              .misshape = "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight"};
    expect_bind_fail(&c, write_model(&g4, "fshape.safetensors", NULL, 0),
                     "model.language_model.layers.1.mlp.experts.gate_up_proj: shape [4, 8, 8] vs "
                     "expected [3, 8, 8]",
                     NULL);
    /* unexpected tensor names */
    const char *extra1[1] = {"language_model.model.layers.0.self_attn.q_proj.bias"};
    gen g5 = {.mode = 0, .vision = 1};
    expect_bind_fail(&c, write_model(&g5, "extra.safetensors", extra1, 1),
                     "tensor language_model.model.layers.0.self_attn.q_proj.bias: not part of the M3 "
                     "checkpoint layout",
                     NULL);
    /* public per-layer names mixed into a fused checkpoint */
    const char *extra2[1] = {"model.language_model.layers.1.block_sparse_moe.e_score_correction_bias"};
    gen g6 = {.mode = 1, .vision = 1};
    expect_bind_fail(&c, write_model(&g6, "mixed.safetensors", extra2, 1), "not part of the M3",
                     "HF v5 fused names");
    /* vision tensors but a text-only config */
    m3_config ct = c;
    ct.has_vision = 0;
    gen g7 = {.mode = 0, .vision = 1};
    expect_bind_fail(&ct, write_model(&g7, "vis.safetensors", NULL, 0),
                     "tensor multi_modal_projector.linear_1.bias: not part", "text only");
    /* partial vision */
    gen g8 = {.mode = 0, .vision = 1, .skip = "patch_merge_mlp.linear_2.bias"};
    expect_bind_fail(&c, write_model(&g8, "pvis.safetensors", NULL, 0),
                     "missing tensor patch_merge_mlp.linear_2.bias", NULL);

    /* mtp.* tensors are counted, not bound; no vision tensors -> has_vision 0 */
    const char *mtp[2] = {"mtp.layers.0.enorm.weight", "language_model.model.mtp.layers.0.hnorm.weight"};
    gen g9 = {.mode = 0, .vision = 0};
    m3_store *s;
    m3_weights w;
    if (bind(&c, write_model(&g9, "mtp.safetensors", mtp, 2), &s, &w, &e) != 0)
        fail_msg("%s", e.msg);
    assert_int_equal(w.ignored_mtp, 2);
    check_all(&w, 0);
    m3_weights_free(&w);
    m3_store_close(s);
}


/* ------------------------------------------------------------ real HF output */

/* vectors/hf/<case>/ holds a public-layout checkpoint and, in hfv5/, the same
 * model as transformers 5.17 save_pretrained wrote it (fused layout, HF v5
 * config). Both must load to the same text config and the same values. */
static long g_cmp, g_diff;

static void cmp_mat(const m3_mat *a, const m3_mat *b)
{
    assert_true((a->data == NULL) == (b->data == NULL));
    if (!a->data)
        return;
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->cols, b->cols);
    for (int r = 0; r < a->rows; r++)
        for (int c = 0; c < a->cols; c++, g_cmp++)
            g_diff += m3_mat_at(a, r, c) != m3_mat_at(b, r, c);
}

static void cmp_vec(const m3_vec *a, const m3_vec *b)
{
    m3_mat x = {a->data, a->dtype, 1, a->n}, y = {b->data, b->dtype, 1, b->n};
    cmp_mat(&x, &y);
}

static void test_hf_saved_checkpoints(void **state)
{
    (void)state;
    static const char *cases[] = {"vectors/hf/tiny-a", "vectors/hf/tiny-b", "vectors/hf/deploy-msa"};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        m3_config c[2];
        m3_store *s[2];
        m3_weights w[2];
        m3_err e = {{0}};
        for (int j = 0; j < 2; j++) {
            char dir[256], p[300];
            snprintf(dir, sizeof dir, "%s%s", cases[k], j ? "/hfv5" : "");
            snprintf(p, sizeof p, "%s/config.json", dir);
            if (m3_config_load(&c[j], p, NULL, &e) != 0 || m3_store_open(&s[j], dir, &e) != 0 ||
                m3_weights_bind(&w[j], &c[j], s[j], &e) != 0)
                fail_msg("%s", e.msg);
        }
        assert_memory_equal(&c[0].text, &c[1].text, sizeof c[0].text);
        assert_int_equal(w[0].layout, 0);
        assert_int_equal(w[1].layout, 1);
        assert_int_equal(w[1].has_vision, w[0].has_vision); /* the HF-saved cases are text-only */
        g_cmp = g_diff = 0;
        cmp_mat(&w[0].embed, &w[1].embed);
        cmp_mat(&w[0].lm_head, &w[1].lm_head);
        cmp_vec(&w[0].final_norm, &w[1].final_norm);
        for (int L = 0; L < c[0].text.num_layers; L++) {
            const m3_layer_weights *a = &w[0].layers[L], *b = &w[1].layers[L];
            cmp_vec(&a->input_norm, &b->input_norm);
            cmp_vec(&a->post_norm, &b->post_norm);
            cmp_mat(&a->q, &b->q);
            cmp_mat(&a->k, &b->k);
            cmp_mat(&a->v, &b->v);
            cmp_mat(&a->o, &b->o);
            cmp_vec(&a->q_norm, &b->q_norm);
            cmp_vec(&a->k_norm, &b->k_norm);
            cmp_mat(&a->index_q, &b->index_q);
            cmp_mat(&a->index_k, &b->index_k);
            cmp_vec(&a->index_q_norm, &b->index_q_norm);
            cmp_vec(&a->index_k_norm, &b->index_k_norm);
            cmp_mat(&a->mlp_gate, &b->mlp_gate);
            cmp_mat(&a->mlp_up, &b->mlp_up);
            cmp_mat(&a->mlp_down, &b->mlp_down);
            cmp_mat(&a->router, &b->router);
            cmp_vec(&a->router_bias, &b->router_bias);
            assert_true((a->exp_gate == NULL) == (b->exp_gate == NULL));
            for (int x = 0; a->exp_gate && x < c[0].text.num_experts; x++) {
                cmp_mat(&a->exp_gate[x], &b->exp_gate[x]);
                cmp_mat(&a->exp_up[x], &b->exp_up[x]);
                cmp_mat(&a->exp_down[x], &b->exp_down[x]);
            }
            cmp_mat(&a->sh_gate, &b->sh_gate);
            cmp_mat(&a->sh_up, &b->sh_up);
            cmp_mat(&a->sh_down, &b->sh_down);
        }
        assert_true(g_cmp > 10000);
        assert_int_equal(g_diff, 0);
        for (int j = 0; j < 2; j++) {
            m3_weights_free(&w[j]);
            m3_store_close(s[j]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts_same_values),
        cmocka_unit_test(test_bind_errors),
        cmocka_unit_test(test_hf_saved_checkpoints),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
