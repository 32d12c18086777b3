/* weights.c — bind checkpoint tensors to m3_weights (see weights.h).
 *
 * Spec: M3-CKPT-NAMES-1 (public layout), M3-CKPT-NAMES-2 (HF v5 fused
 * layout), M3-CKPT-MTP-1 (mtp.* ignored and counted).
 *
 * Accepted layouts (detected from the embedding tensor's name):
 *   public      language_model.model.* + language_model.lm_head.weight, with
 *               vision_tower.vision_model.*, multi_modal_projector.*,
 *               patch_merge_mlp.*;
 *   HF v5 VL    model.language_model.* + lm_head.weight, with
 *               model.vision_tower.*, model.multi_modal_projector.*;
 *   HF text     model.* + lm_head.weight (CausalLM, no vision).
 * Inside the text model the per-layer names are either the public ones
 * (block_sparse_moe.experts.E.w1/w3/w2, mlp.gate_proj/up_proj/down_proj,
 * self_attn.index_*) or the HF v5 fused ones (mlp.experts.gate_up_proj
 * [E, 2I, H] with gate rows first, mlp.experts.down_proj [E, H, I],
 * mlp.gate_up_proj, mlp.shared_experts.gate_up_proj, self_attn.indexer.*);
 * the style is chosen from layer 0 and must hold for every layer
 * (w->layout: 0 public names, 1 fused names).
 *
 * Vision: bound when the config has vision and the checkpoint has the patch
 * embedding; a checkpoint without any vision tensors gives has_vision = 0
 * (text-only use). Vision tensors with a config without vision_config are
 * an error, like every other tensor that is not part of the layout, except
 * mtp.* (counted in w->ignored_mtp; the CLI prints the notice).
 * Weights must be F32, F16 or BF16.
 */
#include "weights.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bctx {
    const m3_store *s;
    const m3_tensor *base; /* m3_store_at(s, 0) */
    unsigned char *used;   /* one flag per store tensor */
    m3_err *e;
} bctx;

static const char *fmt_shape(char *buf, size_t n, const int64_t *shape, int nd)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
    return buf;
}

/* Find tensor `name`, check float dtype and exact shape; mark it used. */
static const m3_tensor *want(bctx *b, const char *name, int nd, const int64_t *shape)
{
    char s1[128], s2[128];
    const m3_tensor *t = m3_store_get(b->s, name);
    if (!t) {
        m3_fail(b->e, "checkpoint: missing tensor %s (expected %s)", name,
                fmt_shape(s1, sizeof s1, shape, nd));
        return NULL;
    }
    if (t->dtype != M3_F32 && t->dtype != M3_BF16 && t->dtype != M3_F16) {
        m3_fail(b->e, "%s: tensor %s: dtype %s is not a floating weight type (F32, F16, BF16)",
                t->file, name, m3_dtype_name(t->dtype));
        return NULL;
    }
    int ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        m3_fail(b->e, "%s: tensor %s: shape %s vs expected %s from config.json", t->file, name,
                fmt_shape(s1, sizeof s1, t->shape, t->ndim), fmt_shape(s2, sizeof s2, shape, nd));
        return NULL;
    }
    /* weights are read in place: the format allows any byte offset, but an
     * element misaligned for its type would be read through a misaligned pointer */
    const size_t esz = m3_dtype_size(t->dtype);
    if (esz > 1 && (uintptr_t)t->data % esz != 0) {
        m3_fail(b->e, "%s: tensor %s: data is not aligned to its %zu-byte elements (the file "
                      "places it at an odd offset); m3 maps weights in place and needs each "
                      "tensor's data at a multiple of its element size: re-save the checkpoint "
                      "(e.g. with safetensors.torch.save_file)",
                t->file, name, esz);
        return NULL;
    }
    b->used[t - b->base] = 1;
    return t;
}

/* rows and cols are 64-bit products of config sizes; the config caps keep them in int */
static int mat(bctx *b, m3_mat *m, const char *name, int64_t rows, int64_t cols)
{
    if (rows <= 0 || cols <= 0 || rows > INT_MAX || cols > INT_MAX)
        return m3_fail(b->e, "checkpoint: tensor %s: expected shape [%lld, %lld] is out of range",
                       name, (long long)rows, (long long)cols);
    int64_t sh[2] = {rows, cols};
    const m3_tensor *t = want(b, name, 2, sh);
    if (!t)
        return -1;
    m->data = t->data;
    m->dtype = t->dtype;
    m->rows = (int)rows;
    m->cols = (int)cols;
    return 0;
}

static int vec(bctx *b, m3_vec *v, const char *name, int64_t n)
{
    if (n <= 0 || n > INT_MAX)
        return m3_fail(b->e, "checkpoint: tensor %s: expected shape [%lld] is out of range", name,
                       (long long)n);
    int64_t sh[1] = {n};
    const m3_tensor *t = want(b, name, 1, sh);
    if (!t)
        return -1;
    v->data = t->data;
    v->dtype = t->dtype;
    v->n = (int)n;
    return 0;
}

/* View of rows [r0, r0 + rows) of a row-major block starting at element off. */
static m3_mat sub(const m3_tensor *t, size_t off_elems, int rows, int cols)
{
    m3_mat m;
    m.data = (const unsigned char *)t->data + off_elems * m3_dtype_size(t->dtype);
    m.dtype = t->dtype;
    m.rows = rows;
    m.cols = cols;
    return m;
}

static int has(const m3_store *s, const char *name)
{
    return m3_store_get(s, name) != NULL;
}

/* ------------------------------------------------------------------ text */

static int bind_layer(bctx *b, const m3_config *c, const char *P, int L, int fused,
                      m3_layer_weights *lw)
{
    const m3_text_config *t = &c->text;
    char n[512];
    const int H = t->hidden_size, hd = t->head_dim;
#define NM(suffix) (snprintf(n, sizeof n, "%slayers.%d.%s", P, L, suffix), n)
    if (vec(b, &lw->input_norm, NM("input_layernorm.weight"), H) ||
        vec(b, &lw->post_norm, NM("post_attention_layernorm.weight"), H) ||
        mat(b, &lw->q, NM("self_attn.q_proj.weight"), (int64_t)t->num_heads * hd, H) ||
        mat(b, &lw->k, NM("self_attn.k_proj.weight"), (int64_t)t->num_kv_heads * hd, H) ||
        mat(b, &lw->v, NM("self_attn.v_proj.weight"), (int64_t)t->num_kv_heads * hd, H) ||
        mat(b, &lw->o, NM("self_attn.o_proj.weight"), H, (int64_t)t->num_heads * hd) ||
        vec(b, &lw->q_norm, NM("self_attn.q_norm.weight"), hd) ||
        vec(b, &lw->k_norm, NM("self_attn.k_norm.weight"), hd))
        return -1;
    if (t->layer_sparse[L]) {
        const int ihd = t->index_head_dim, ih = t->index_n_heads;
        if (fused) {
            if (mat(b, &lw->index_q, NM("self_attn.indexer.q_proj.weight"), (int64_t)ih * ihd, H) ||
                mat(b, &lw->index_k, NM("self_attn.indexer.k_proj.weight"), ihd, H) ||
                vec(b, &lw->index_q_norm, NM("self_attn.indexer.q_norm.weight"), ihd) ||
                vec(b, &lw->index_k_norm, NM("self_attn.indexer.k_norm.weight"), ihd))
                return -1;
        } else {
            if (mat(b, &lw->index_q, NM("self_attn.index_q_proj.weight"), (int64_t)ih * ihd, H) ||
                mat(b, &lw->index_k, NM("self_attn.index_k_proj.weight"), ihd, H) ||
                vec(b, &lw->index_q_norm, NM("self_attn.index_q_norm.weight"), ihd) ||
                vec(b, &lw->index_k_norm, NM("self_attn.index_k_norm.weight"), ihd))
                return -1;
        }
    }
    if (!t->layer_moe[L]) {
        const int Id = t->dense_intermediate_size;
        if (fused) {
            int64_t sh[2] = {2 * (int64_t)Id, H};
            const m3_tensor *gu = want(b, NM("mlp.gate_up_proj.weight"), 2, sh);
            if (!gu)
                return -1;
            lw->mlp_gate = sub(gu, 0, Id, H);
            lw->mlp_up = sub(gu, (size_t)Id * H, Id, H);
        } else {
            if (mat(b, &lw->mlp_gate, NM("mlp.gate_proj.weight"), Id, H) ||
                mat(b, &lw->mlp_up, NM("mlp.up_proj.weight"), Id, H))
                return -1;
        }
        return mat(b, &lw->mlp_down, NM("mlp.down_proj.weight"), H, Id);
    }
    const int E = t->num_experts, I = t->intermediate_size, Is = t->shared_intermediate_size;
    const char *moe = fused ? "mlp" : "block_sparse_moe";
    char sfx[128];
    /* the router [E, H] first: its shape in the file bounds E before the views are allocated */
    snprintf(sfx, sizeof sfx, "%s.gate.weight", moe);
    if (mat(b, &lw->router, NM(sfx), E, H))
        return -1;
    lw->exp_gate = calloc((size_t)E, sizeof(m3_mat));
    lw->exp_up = calloc((size_t)E, sizeof(m3_mat));
    lw->exp_down = calloc((size_t)E, sizeof(m3_mat));
    if (!lw->exp_gate || !lw->exp_up || !lw->exp_down)
        return m3_fail(b->e, "checkpoint: out of memory for layer %d expert views", L);
    snprintf(sfx, sizeof sfx, fused ? "%s.gate.e_score_correction_bias" : "%s.e_score_correction_bias",
             moe);
    if (t->use_routing_bias || has(b->s, NM(sfx))) {
        if (vec(b, &lw->router_bias, NM(sfx), E))
            return -1;
    }
    if (fused) {
        int64_t sgu[3] = {E, 2 * (int64_t)I, H}, sd[3] = {E, H, I};
        const m3_tensor *gu = want(b, NM("mlp.experts.gate_up_proj"), 3, sgu);
        if (!gu)
            return -1;
        const m3_tensor *dn = want(b, NM("mlp.experts.down_proj"), 3, sd);
        if (!dn)
            return -1;
        for (int x = 0; x < E; x++) {
            size_t base = (size_t)x * 2 * I * H;
            lw->exp_gate[x] = sub(gu, base, I, H);
            lw->exp_up[x] = sub(gu, base + (size_t)I * H, I, H);
            lw->exp_down[x] = sub(dn, (size_t)x * H * I, H, I);
        }
    } else {
        for (int x = 0; x < E; x++) {
            char s3[96];
            snprintf(s3, sizeof s3, "block_sparse_moe.experts.%d.w1.weight", x);
            if (mat(b, &lw->exp_gate[x], NM(s3), I, H))
                return -1;
            snprintf(s3, sizeof s3, "block_sparse_moe.experts.%d.w3.weight", x);
            if (mat(b, &lw->exp_up[x], NM(s3), I, H))
                return -1;
            snprintf(s3, sizeof s3, "block_sparse_moe.experts.%d.w2.weight", x);
            if (mat(b, &lw->exp_down[x], NM(s3), H, I))
                return -1;
        }
    }
    if (t->n_shared_experts > 0 && Is > 0) {
        if (fused) {
            int64_t sh[2] = {2 * (int64_t)Is, H};
            const m3_tensor *gu = want(b, NM("mlp.shared_experts.gate_up_proj.weight"), 2, sh);
            if (!gu)
                return -1;
            lw->sh_gate = sub(gu, 0, Is, H);
            lw->sh_up = sub(gu, (size_t)Is * H, Is, H);
            if (mat(b, &lw->sh_down, NM("mlp.shared_experts.down_proj.weight"), H, Is))
                return -1;
        } else {
            if (mat(b, &lw->sh_gate, NM("block_sparse_moe.shared_experts.gate_proj.weight"), Is,
                    H) ||
                mat(b, &lw->sh_up, NM("block_sparse_moe.shared_experts.up_proj.weight"), Is, H) ||
                mat(b, &lw->sh_down, NM("block_sparse_moe.shared_experts.down_proj.weight"), H,
                    Is))
                return -1;
        }
    }
#undef NM
    return 0;
}

/* ------------------------------------------------------------------ vision */

static int bind_vision(bctx *b, const m3_config *c, int hf, m3_vision_weights *vw)
{
    const m3_vision_config *v = &c->vision;
    const int Hv = v->hidden_size, Iv = v->intermediate_size, H = c->text.hidden_size;
    const int Pj = v->projector_hidden_size;
    const int m2 = v->spatial_merge_size * v->spatial_merge_size;
    const char *VP = hf ? "model.vision_tower." : "vision_tower.vision_model.";
    const char *LP = hf ? "model.vision_tower.layers." : "vision_tower.vision_model.encoder.layers.";
    char n[512];
    int64_t pe[5] = {Hv, v->num_channels, v->temporal_patch_size, v->patch_size, v->patch_size};
    snprintf(n, sizeof n, "%s%s", VP,
             hf ? "embeddings.proj.weight" : "embeddings.patch_embedding.weight");
    const m3_tensor *t = want(b, n, 5, pe);
    if (!t)
        return -1;
    vw->patch_embed = sub(t, 0, Hv, (int)(pe[1] * pe[2] * pe[3] * pe[4]));
#define VN(fmt, ...) (snprintf(n, sizeof n, fmt, __VA_ARGS__), n)
    if (vec(b, &vw->pre_ln_w, VN("%spre_layrnorm.weight", VP), Hv) ||
        vec(b, &vw->pre_ln_b, VN("%spre_layrnorm.bias", VP), Hv))
        return -1;
    vw->layers = calloc((size_t)v->num_layers, sizeof *vw->layers);
    if (!vw->layers)
        return m3_fail(b->e, "checkpoint: out of memory for vision layers");
    for (int i = 0; i < v->num_layers; i++) {
        m3_vision_layer_weights *l = &vw->layers[i];
        if (vec(b, &l->ln1_w, VN("%s%d.layer_norm1.weight", LP, i), Hv) ||
            vec(b, &l->ln1_b, VN("%s%d.layer_norm1.bias", LP, i), Hv) ||
            vec(b, &l->ln2_w, VN("%s%d.layer_norm2.weight", LP, i), Hv) ||
            vec(b, &l->ln2_b, VN("%s%d.layer_norm2.bias", LP, i), Hv) ||
            mat(b, &l->q, VN("%s%d.self_attn.q_proj.weight", LP, i), Hv, Hv) ||
            mat(b, &l->k, VN("%s%d.self_attn.k_proj.weight", LP, i), Hv, Hv) ||
            mat(b, &l->v, VN("%s%d.self_attn.v_proj.weight", LP, i), Hv, Hv) ||
            mat(b, &l->o, VN("%s%d.self_attn.out_proj.weight", LP, i), Hv, Hv) ||
            vec(b, &l->q_b, VN("%s%d.self_attn.q_proj.bias", LP, i), Hv) ||
            vec(b, &l->k_b, VN("%s%d.self_attn.k_proj.bias", LP, i), Hv) ||
            vec(b, &l->v_b, VN("%s%d.self_attn.v_proj.bias", LP, i), Hv) ||
            vec(b, &l->o_b, VN("%s%d.self_attn.out_proj.bias", LP, i), Hv) ||
            mat(b, &l->fc1, VN("%s%d.mlp.fc1.weight", LP, i), Iv, Hv) ||
            vec(b, &l->fc1_b, VN("%s%d.mlp.fc1.bias", LP, i), Iv) ||
            mat(b, &l->fc2, VN("%s%d.mlp.fc2.weight", LP, i), Hv, Iv) ||
            vec(b, &l->fc2_b, VN("%s%d.mlp.fc2.bias", LP, i), Hv))
            return -1;
    }
    const char *PP = hf ? "model.multi_modal_projector." : "multi_modal_projector.";
    const char *MP = hf ? "model.multi_modal_projector.merge_" : "patch_merge_mlp.";
    if (mat(b, &vw->proj1, VN("%slinear_1.weight", PP), Pj, Hv) ||
        vec(b, &vw->proj1_b, VN("%slinear_1.bias", PP), Pj) ||
        mat(b, &vw->proj2, VN("%slinear_2.weight", PP), H, Pj) ||
        vec(b, &vw->proj2_b, VN("%slinear_2.bias", PP), H) ||
        mat(b, &vw->merge1, VN("%slinear_1.weight", MP), Pj, (int64_t)H * m2) ||
        vec(b, &vw->merge1_b, VN("%slinear_1.bias", MP), Pj) ||
        mat(b, &vw->merge2, VN("%slinear_2.weight", MP), H, Pj) ||
        vec(b, &vw->merge2_b, VN("%slinear_2.bias", MP), H))
        return -1;
#undef VN
    return 0;
}

/* ------------------------------------------------------------------ top */

static int is_mtp(const char *name)
{
    return strncmp(name, "mtp.", 4) == 0 || strstr(name, ".mtp.") != NULL;
}

int m3_weights_bind(m3_weights *w, const m3_config *c, const m3_store *s, m3_err *e)
{
    memset(w, 0, sizeof *w);
    const m3_text_config *t = &c->text;
    size_t count = m3_store_count(s);
    bctx b = {s, m3_store_at(s, 0), calloc(count ? count : 1, 1), e};
    if (!b.used)
        return m3_fail(e, "checkpoint: out of memory");
    int rc = -1;
    const char *P, *head;
    if (has(s, "language_model.model.embed_tokens.weight")) {
        P = "language_model.model.";
        head = "language_model.lm_head.weight";
    } else if (has(s, "model.language_model.embed_tokens.weight")) {
        P = "model.language_model.";
        head = "lm_head.weight";
    } else if (has(s, "model.embed_tokens.weight")) {
        P = "model.";
        head = "lm_head.weight";
    } else {
        m3_fail(e, "checkpoint: no embedding tensor (looked for "
                   "language_model.model.embed_tokens.weight, "
                   "model.language_model.embed_tokens.weight, model.embed_tokens.weight)");
        goto out;
    }
    const int H = t->hidden_size, V = t->vocab_size;
    char n[512];
    snprintf(n, sizeof n, "%sembed_tokens.weight", P);
    if (mat(&b, &w->embed, n, V, H))
        goto out;
    snprintf(n, sizeof n, "%snorm.weight", P);
    if (vec(&b, &w->final_norm, n, H))
        goto out;
    if (has(s, head)) {
        if (mat(&b, &w->lm_head, head, V, H))
            goto out;
    } else if (t->tie_word_embeddings) {
        w->lm_head = w->embed;
    } else {
        m3_fail(e, "checkpoint: missing tensor %s (tie_word_embeddings is false)", head);
        goto out;
    }
    /* name style from layer 0 */
    int fused;
    if (t->layer_moe[0]) {
        snprintf(n, sizeof n, "%slayers.0.mlp.gate.weight", P);
        fused = has(s, n);
    } else {
        snprintf(n, sizeof n, "%slayers.0.mlp.gate_up_proj.weight", P);
        fused = has(s, n);
    }
    w->layout = fused;
    w->layers = calloc((size_t)t->num_layers, sizeof *w->layers);
    if (!w->layers) {
        m3_fail(e, "checkpoint: out of memory");
        goto out;
    }
    w->num_layers = t->num_layers;
    for (int L = 0; L < t->num_layers; L++)
        if (bind_layer(&b, c, P, L, fused, &w->layers[L]) != 0)
            goto out;
    if (c->has_vision) {
        const char *pe_pub = "vision_tower.vision_model.embeddings.patch_embedding.weight";
        const char *pe_hf = "model.vision_tower.embeddings.proj.weight";
        int hf = has(s, pe_hf) ? 1 : has(s, pe_pub) ? 0 : -1;
        if (hf >= 0) {
            if (bind_vision(&b, c, hf, &w->vision) != 0)
                goto out;
            w->has_vision = 1;
        }
    }
    for (size_t i = 0; i < count; i++) {
        if (b.used[i])
            continue;
        const m3_tensor *x = m3_store_at(s, i);
        if (is_mtp(x->name)) {
            w->ignored_mtp++;
            continue;
        }
        m3_fail(e, "%s: tensor %s: not part of the M3 checkpoint layout for this config.json "
                   "(%s names, %s)",
                x->file, x->name, fused ? "HF v5 fused" : "public",
                c->has_vision ? "with vision" : "text only");
        goto out;
    }
    rc = 0;
out:
    free(b.used);
    if (rc != 0)
        m3_weights_free(w);
    return rc;
}

void m3_weights_free(m3_weights *w)
{
    if (!w)
        return;
    if (w->layers) {
        for (int L = 0; L < w->num_layers; L++) {
            free(w->layers[L].exp_gate);
            free(w->layers[L].exp_up);
            free(w->layers[L].exp_down);
        }
        free(w->layers);
    }
    free(w->vision.layers);
    memset(w, 0, sizeof *w);
}
