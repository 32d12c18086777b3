/* vision.c — vision tower (patch embedding, pre-LN, CLIP encoder layers with
 * 3D RoPE), projector and 2x2 merge.
 *
 * Spec: M3-VIS-PATCH-1, M3-VIS-LN-1, M3-VIS-LAYER-1, M3-VIS-ATTN-1,
 * M3-VIS-ROPE-1..3, M3-VIS-SEG-1, M3-VIS-PROJ-1, M3-VIS-MERGE-1,
 * M3-NUM-BF16-2 (bf16 mode: linear, LayerNorm, GELU outputs, attention
 * probabilities and outputs, residual adds rounded; RoPE rotates in fp32 and
 * the result is rounded, as the MiniMax-reference engines do).
 */
#include "vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layernorm.h"
#include "linear.h"
#include "rope.h"
#include "vision_rope.h"

float m3_gelu(float x)
{
    double v = (double)x;
    return (float)(0.5 * v * (1.0 + erf(v / sqrt(2.0))));
}

/* y [W->rows] = W x + b, rounded per mode. */
static void linear_bias(float *y, const m3_mat *W, const m3_vec *b, const float *x, m3_mode mode)
{
    m3_matvec(y, W, x);
    for (int r = 0; r < W->rows; r++)
        y[r] = m3_round1(y[r] + m3_vec_at(b, r), mode);
}

int64_t m3_vision_num_patches(const int32_t *grid, int nitems, int merge, m3_err *e)
{
    int64_t total = 0;
    for (int i = 0; i < nitems; i++) {
        int32_t t = grid[3 * i], h = grid[3 * i + 1], w = grid[3 * i + 2];
        if (t <= 0 || h <= 0 || w <= 0)
            return m3_fail(e, "grid_thw[%d] = (%d, %d, %d): every entry must be positive", i, t,
                           h, w);
        if (h % merge || w % merge)
            return m3_fail(e, "grid_thw[%d] = (%d, %d, %d): h and w must be multiples of the "
                              "merge size %d", i, t, h, w, merge);
        if ((int64_t)h * w > (1 << 20) || t > (1 << 16))
            return m3_fail(e, "grid_thw[%d] = (%d, %d, %d): larger than the documented cap "
                              "(h*w <= 2^20, t <= 2^16)", i, t, h, w);
        total += (int64_t)t * h * w;
    }
    return total;
}

/* Attention segments and per-row 3D coordinates. seg_start/seg_len [nseg]. */
typedef struct segments {
    int64_t *start, *len;
    int n;
    int32_t *coords; /* [npatch, 3] */
} segments;

static void segments_free(segments *s)
{
    free(s->start);
    free(s->len);
    free(s->coords);
}

static int segments_build(segments *s, const int32_t *grid, int nitems, int64_t npatch,
                          int merge, int max_groups, int joint, m3_err *e)
{
    memset(s, 0, sizeof *s);
    int64_t cap = 1;
    for (int i = 0; i < nitems; i++)
        cap += joint ? 0 : (grid[3 * i] + max_groups - 1) / max_groups;
    s->start = malloc((size_t)cap * sizeof *s->start);
    s->len = malloc((size_t)cap * sizeof *s->len);
    s->coords = malloc((size_t)npatch * 3 * sizeof *s->coords);
    if (!s->start || !s->len || !s->coords) {
        segments_free(s);
        return m3_fail(e, "vision: out of memory for %lld patches", (long long)npatch);
    }
    int64_t row = 0;
    for (int i = 0; i < nitems; i++) {
        int gt = grid[3 * i], gh = grid[3 * i + 1], gw = grid[3 * i + 2];
        int64_t per_t = (int64_t)gh * gw;
        if (joint) {
            /* HF: t = 0..gt-1 over the whole item, one segment for everything. */
            m3_vision_coords(s->coords + 3 * row, gt, gh, gw, merge);
            row += gt * per_t;
            continue;
        }
        for (int t0 = 0; t0 < gt; t0 += max_groups) {
            int nt = gt - t0 < max_groups ? gt - t0 : max_groups;
            m3_vision_coords(s->coords + 3 * row, nt, gh, gw, merge);
            s->start[s->n] = row;
            s->len[s->n] = nt * per_t;
            s->n++;
            row += nt * per_t;
        }
    }
    if (joint) {
        s->start[0] = 0;
        s->len[0] = npatch;
        s->n = 1;
    }
    return 0;
}

/* Self-attention of one segment: out [len, Hv] from q, k, v [len, Hv]
 * (heads of hd contiguous). scratch >= len floats. */
static void segment_attention(float *out, const float *q, const float *k, const float *v,
                              int64_t len, int nh, int hd, float *scratch, m3_mode mode)
{
    int Hv = nh * hd;
    float scale = 1.0f / sqrtf((float)hd);
    for (int64_t i = 0; i < len; i++) {
        for (int h = 0; h < nh; h++) {
            const float *qi = q + i * Hv + h * hd;
            float mx = -INFINITY;
            for (int64_t j = 0; j < len; j++) {
                const float *kj = k + j * Hv + h * hd;
                float s = 0.0f;
                for (int d = 0; d < hd; d++)
                    s += qi[d] * kj[d];
                scratch[j] = s * scale;
                if (scratch[j] > mx)
                    mx = scratch[j];
            }
            float sum = 0.0f;
            for (int64_t j = 0; j < len; j++) {
                scratch[j] = expf(scratch[j] - mx);
                sum += scratch[j];
            }
            float *oi = out + i * Hv + h * hd;
            for (int d = 0; d < hd; d++)
                oi[d] = 0.0f;
            for (int64_t j = 0; j < len; j++) {
                float p = m3_round1(scratch[j] / sum, mode);
                const float *vj = v + j * Hv + h * hd;
                for (int d = 0; d < hd; d++)
                    oi[d] += p * vj[d];
            }
            for (int d = 0; d < hd; d++)
                oi[d] = m3_round1(oi[d], mode);
        }
    }
}

static int dump_f32(m3_st_writer *dump, const char *name, int64_t rows, int64_t cols,
                    const float *data, m3_err *e)
{
    if (!dump)
        return 0;
    int64_t shape[2] = {rows, cols};
    return m3_st_writer_add(dump, name, M3_F32, 2, shape, data, e);
}

int m3_vision_forward(const m3_model *m, const float *pixels, int64_t npatch,
                      const int32_t *grid, int nitems, const m3_vision_opts *opts,
                      float *features, m3_st_writer *dump, m3_err *e)
{
    const m3_vision_config *vc = &m->cfg.vision;
    const m3_vision_weights *vw = &m->w.vision;
    m3_mode mode = opts ? opts->mode : M3_MODE_FP32;
    int joint = opts ? opts->joint : 0;
    if (!m->cfg.has_vision || !m->w.has_vision)
        return m3_fail(e, "%s: the checkpoint has no vision tower", m->dir);
    int merge = vc->spatial_merge_size, Hv = vc->hidden_size, nh = vc->num_heads;
    int hd = Hv / nh, Iv = vc->intermediate_size, H = m->cfg.text.hidden_size;
    int in_dim = vw->patch_embed.cols;
    int group = merge * merge;
    int64_t expect = m3_vision_num_patches(grid, nitems, merge, e);
    if (expect < 0)
        return -1;
    if (expect != npatch)
        return m3_fail(e, "vision: grid_thw describes %lld patches but pixel_values has %lld rows",
                       (long long)expect, (long long)npatch);
    if (npatch > (int64_t)1 << 22)
        return m3_fail(e, "vision: %lld patches exceed the documented cap of 2^22",
                       (long long)npatch);

    segments seg;
    if (segments_build(&seg, grid, nitems, npatch, merge, vc->segment_max_frames, joint, e))
        return -1;
    int64_t maxlen = 0;
    for (int s = 0; s < seg.n; s++)
        if (seg.len[s] > maxlen)
            maxlen = seg.len[s];

    int rd = m3_vision_rope_dim(hd);
    size_t N = (size_t)npatch;
    float *h = malloc(N * Hv * sizeof *h);
    float *x = malloc(N * Hv * sizeof *x);
    float *q = malloc(N * Hv * sizeof *q);
    float *k = malloc(N * Hv * sizeof *k);
    float *v = malloc(N * Hv * sizeof *v);
    float *att = malloc(N * Hv * sizeof *att);
    float *cs = malloc(N * (size_t)rd * sizeof *cs); /* cos then sin, rd/2 each */
    float *mlp = malloc((size_t)(Iv > 4 * H ? Iv : 4 * H) * sizeof *mlp);
    float *tmp = malloc((size_t)(Hv > H ? Hv : H) * sizeof *tmp);
    float *proj = malloc(N * (size_t)H * sizeof *proj);
    float *scratch = malloc((size_t)(maxlen > 0 ? maxlen : 1) * sizeof *scratch);
    int rc = -1;
    if (!h || !x || !q || !k || !v || !att || !cs || !mlp || !tmp || !proj || !scratch) {
        m3_fail(e, "vision: out of memory for %lld patches", (long long)npatch);
        goto done;
    }

    if (dump) {
        int64_t pshape[2] = {npatch, in_dim}, gshape[2] = {nitems, 3};
        if (m3_st_writer_add(dump, "vision.pixel_values", M3_F32, 2, pshape, pixels, e) ||
            m3_st_writer_add(dump, "vision.grid_thw", M3_I32, 2, gshape, grid, e))
            goto done;
    }

    /* Patch embedding (M3-VIS-PATCH-1) then pre_layrnorm. */
    for (size_t r = 0; r < N; r++) {
        m3_matvec(h + r * Hv, &vw->patch_embed, pixels + r * (size_t)in_dim);
        m3_round_mode(h + r * Hv, (size_t)Hv, mode);
    }
    if (dump_f32(dump, "vision.patch_embed", npatch, Hv, h, e))
        goto done;
    for (size_t r = 0; r < N; r++)
        m3_layernorm(h + r * Hv, h + r * Hv, &vw->pre_ln_w, &vw->pre_ln_b, Hv,
                     vc->layer_norm_eps, mode);

    for (size_t r = 0; r < N; r++) {
        const int32_t *c = seg.coords + 3 * r;
        m3_vision_rope_table(cs + r * rd, cs + r * rd + rd / 2, c[0], c[1], c[2], hd,
                             vc->rope_theta);
    }

    for (int l = 0; l < vc->num_layers; l++) {
        const m3_vision_layer_weights *lw = &vw->layers[l];
        for (size_t r = 0; r < N; r++) {
            m3_layernorm(x + r * Hv, h + r * Hv, &lw->ln1_w, &lw->ln1_b, Hv, vc->layer_norm_eps,
                         mode);
            linear_bias(q + r * Hv, &lw->q, &lw->q_b, x + r * Hv, mode);
            linear_bias(k + r * Hv, &lw->k, &lw->k_b, x + r * Hv, mode);
            linear_bias(v + r * Hv, &lw->v, &lw->v_b, x + r * Hv, mode);
            const float *cr = cs + r * rd, *sr = cs + r * rd + rd / 2;
            m3_rope_apply(q + r * Hv, nh, hd, rd, cr, sr, M3_MODE_FP32);
            m3_rope_apply(k + r * Hv, nh, hd, rd, cr, sr, M3_MODE_FP32);
            m3_round_mode(q + r * Hv, (size_t)Hv, mode);
            m3_round_mode(k + r * Hv, (size_t)Hv, mode);
        }
        for (int s = 0; s < seg.n; s++) {
            size_t o = (size_t)seg.start[s] * Hv;
            segment_attention(att + o, q + o, k + o, v + o, seg.len[s], nh, hd, scratch, mode);
        }
        for (size_t r = 0; r < N; r++) {
            linear_bias(tmp, &lw->o, &lw->o_b, att + r * Hv, mode);
            for (int i = 0; i < Hv; i++)
                h[r * Hv + i] = m3_round1(h[r * Hv + i] + tmp[i], mode);
            m3_layernorm(x + r * Hv, h + r * Hv, &lw->ln2_w, &lw->ln2_b, Hv, vc->layer_norm_eps,
                         mode);
            linear_bias(mlp, &lw->fc1, &lw->fc1_b, x + r * Hv, mode);
            for (int i = 0; i < Iv; i++)
                mlp[i] = m3_round1(m3_gelu(mlp[i]), mode);
            linear_bias(tmp, &lw->fc2, &lw->fc2_b, mlp, mode);
            for (int i = 0; i < Hv; i++)
                h[r * Hv + i] = m3_round1(h[r * Hv + i] + tmp[i], mode);
        }
        if (dump) {
            char name[64];
            snprintf(name, sizeof name, "vision.layers.%d.output", l);
            if (dump_f32(dump, name, npatch, Hv, h, e))
                goto done;
        }
    }
    if (dump_f32(dump, "vision.tower_output", npatch, Hv, h, e))
        goto done;

    /* Projector per patch (M3-VIS-PROJ-1) ... */
    for (size_t r = 0; r < N; r++) {
        linear_bias(mlp, &vw->proj1, &vw->proj1_b, h + r * Hv, mode);
        for (int i = 0; i < H; i++)
            mlp[i] = m3_round1(m3_gelu(mlp[i]), mode);
        linear_bias(proj + r * H, &vw->proj2, &vw->proj2_b, mlp, mode);
    }
    if (dump_f32(dump, "vision.projected", npatch, H, proj, e))
        goto done;
    /* ... then merge each run of merge^2 consecutive rows (M3-VIS-MERGE-1). */
    for (size_t t = 0; t < N / (size_t)group; t++) {
        /* The rows of one window are contiguous in proj, so proj + t*group*H
         * already is the concatenation [row0 | row1 | row2 | row3]. */
        linear_bias(tmp, &vw->merge1, &vw->merge1_b, proj + t * group * H, mode);
        for (int i = 0; i < H; i++)
            tmp[i] = m3_round1(m3_gelu(tmp[i]), mode);
        linear_bias(features + t * H, &vw->merge2, &vw->merge2_b, tmp, mode);
    }
    if (dump_f32(dump, "vision.image_features", npatch / group, H, features, e))
        goto done;
    rc = 0;
done:
    free(h);
    free(x);
    free(q);
    free(k);
    free(v);
    free(att);
    free(cs);
    free(mlp);
    free(tmp);
    free(proj);
    free(scratch);
    segments_free(&seg);
    return rc;
}
