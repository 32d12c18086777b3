/* vision_host.cu — host orchestration of the vision tower on the GPU and the
 * multimodal front end of bin/m3-gpu forward. Contracts: gpu/vision.h.
 *
 * Must match: ref/vision.c m3_vision_forward (every step, rounding point and
 * dump name in the same order), ref/multimodal.c m3_mm_prepare (pixel
 * loading, preprocessing, marker expansion, placement).
 * Spec: M3-VIS-PATCH-1, M3-VIS-LN-1, M3-VIS-LAYER-1, M3-VIS-ATTN-1,
 * M3-VIS-MLP-1, M3-VIS-ROPE-1..3, M3-VIS-SEG-1, M3-VIS-PROJ-1,
 * M3-VIS-MERGE-1/2, M3-VIS-PLACE-1/2, M3-EMB-3, M3-NUM-BF16-2.
 *
 * Design: weights uploaded per call (fp32 and bf16 as stored, other dtypes
 * widened on the host) and freed at the end; activations in device buffers
 * of npatch rows; host round trips only for the dumps; one encoder layer is
 * kernels.h m3g_vision_layer. fp32 mode keeps ref's summation orders (every
 * GEMM m3g_linear mode 0, bitwise; RoPE tables from the host
 * m3_vision_rope_table). bf16 mode (NVIDIA) takes the linears' products
 * from the vendor GEMM in fp32 (exact products of bf16 values, other sum
 * order), adds the bias to the unrounded product as ref does, and runs
 * attention on tensor cores; the patch embedding stays exact.
 *
 * Known differences: the device expf / erf (a few ulp); in bf16 the GEMM
 * and attention summation orders (inside the bf16 profile). Under the CPU
 * emulation the tower is bitwise equal to bin/m3-ref in both modes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vision.h"
#include "kernels/common.cuh"
#include "hip_check.h"
#include "kernels/kernels.h"

#include <cJSON.h>

extern "C" {
#include "multimodal.h"
#include "vision_rope.h"
#include "../ref/vision.h"
}

/* ---- device allocations of one call ---------------------------------------------- */

typedef struct dallocs {
    void **p;
    int n, cap;
} dallocs;

/* bytes (at least 4) of device memory recorded in a; NULL with e set on failure. */
static void *dmalloc(dallocs *a, m3_err *e, size_t bytes)
{
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        void **np = (void **)realloc(a->p, (size_t)cap * sizeof *np);
        if (!np) {
            m3_fail(e, "vision (gpu): out of host memory");
            return NULL;
        }
        a->p = np;
        a->cap = cap;
    }
    void *d = NULL;
    if (M3G_HIP(e, hipMalloc(&d, bytes ? bytes : 4)))
        return NULL;
    a->p[a->n++] = d;
    return d;
}

static void dallocs_free(dallocs *a)
{
    for (int i = 0; i < a->n; i++)
        (void)hipFree(a->p[i]);
    free(a->p);
    memset(a, 0, sizeof *a);
}

/* Upload n elements stored as dt: fp32 and bf16 as they are, anything else
 * widened to fp32 on the host (exact). NULL on failure. */
static const void *upload(dallocs *a, const void *src, m3_dtype dt, size_t n, int *out_dt,
                          m3_err *e)
{
    if (dt == M3_F32 || dt == M3_BF16) {
        const size_t bytes = n * m3_dtype_size(dt);
        void *d = dmalloc(a, e, bytes);
        if (!d || M3G_HIP(e, hipMemcpy(d, src, bytes, hipMemcpyHostToDevice)))
            return NULL;
        *out_dt = dt == M3_BF16 ? M3G_BF16 : M3G_F32;
        return d;
    }
    float *tmp = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!tmp) {
        m3_fail(e, "vision (gpu): out of host memory widening %zu weights", n);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        tmp[i] = m3_load_f32(src, dt, i);
    void *d = dmalloc(a, e, n * sizeof(float));
    if (d && M3G_HIP(e, hipMemcpy(d, tmp, n * sizeof(float), hipMemcpyHostToDevice)))
        d = NULL;
    free(tmp);
    *out_dt = M3G_F32;
    return d;
}

static int up_mat(dallocs *a, m3g_mat *out, const m3_mat *m, m3_err *e)
{
    memset(out, 0, sizeof *out);
    if (!m->data)
        return -1;
    out->rows = m->rows;
    out->cols = m->cols;
    out->data = upload(a, m->data, m->dtype, (size_t)m->rows * (size_t)m->cols, &out->dtype, e);
    return out->data ? 0 : -1;
}

static int up_vec(dallocs *a, m3g_vec *out, const m3_vec *v, m3_err *e)
{
    out->p = NULL;
    out->dt = M3G_F32;
    if (!v->data)
        return -1;
    out->p = upload(a, v->data, v->dtype, (size_t)v->n, &out->dt, e);
    return out->p ? 0 : -1;
}

typedef struct dvis {
    m3g_mat patch, proj1, proj2, merge1, merge2;
    m3g_vec pre_w, pre_b, proj1_b, proj2_b, merge1_b, merge2_b;
    m3g_vis_layer *layers;
} dvis;

static int dvis_upload(dallocs *a, dvis *d, const m3_vision_weights *w, int L, int tower,
                       m3_err *e)
{
    memset(d, 0, sizeof *d);
    d->layers = (m3g_vis_layer *)calloc((size_t)(L > 0 ? L : 1), sizeof *d->layers);
    if (!d->layers)
        return -1;
    if (up_mat(a, &d->proj1, &w->proj1, e) || up_vec(a, &d->proj1_b, &w->proj1_b, e) ||
        up_mat(a, &d->proj2, &w->proj2, e) || up_vec(a, &d->proj2_b, &w->proj2_b, e) ||
        up_mat(a, &d->merge1, &w->merge1, e) || up_vec(a, &d->merge1_b, &w->merge1_b, e) ||
        up_mat(a, &d->merge2, &w->merge2, e) || up_vec(a, &d->merge2_b, &w->merge2_b, e))
        return -1;
    if (!tower)
        return 0;
    if (up_mat(a, &d->patch, &w->patch_embed, e) || up_vec(a, &d->pre_w, &w->pre_ln_w, e) ||
        up_vec(a, &d->pre_b, &w->pre_ln_b, e))
        return -1;
    for (int l = 0; l < L; l++) {
        const m3_vision_layer_weights *s = &w->layers[l];
        m3g_vis_layer *t = &d->layers[l];
        if (up_vec(a, &t->ln1_w, &s->ln1_w, e) || up_vec(a, &t->ln1_b, &s->ln1_b, e) ||
            up_vec(a, &t->ln2_w, &s->ln2_w, e) || up_vec(a, &t->ln2_b, &s->ln2_b, e) ||
            up_vec(a, &t->q_b, &s->q_b, e) || up_vec(a, &t->k_b, &s->k_b, e) ||
            up_vec(a, &t->v_b, &s->v_b, e) || up_vec(a, &t->o_b, &s->o_b, e) ||
            up_vec(a, &t->fc1_b, &s->fc1_b, e) || up_vec(a, &t->fc2_b, &s->fc2_b, e) ||
            up_mat(a, &t->q, &s->q, e) || up_mat(a, &t->k, &s->k, e) ||
            up_mat(a, &t->v, &s->v, e) || up_mat(a, &t->o, &s->o, e) ||
            up_mat(a, &t->fc1, &s->fc1, e) || up_mat(a, &t->fc2, &s->fc2, e))
            return -1;
    }
    return 0;
}

/* ---- dumps ---------------------------------------------------------------------- */

static int dump_dev(m3_st_writer *dump, const char *name, int64_t rows, int64_t cols,
                    const float *dev, hipStream_t st, m3_err *e)
{
    if (!dump)
        return 0;
    const size_t n = (size_t)rows * (size_t)cols;
    float *h = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!h)
        return m3_fail(e, "vision (gpu): out of host memory for the dump of %s", name);
    int rc = -1;
    if (M3G_HIP(e, hipStreamSynchronize(st)) ||
        M3G_HIP(e, hipMemcpy(h, dev, n * sizeof(float), hipMemcpyDeviceToHost))) {
        m3_fail_prefix(e, "vision (gpu): copying %s back", name);
    } else {
        int64_t shape[2] = {rows, cols};
        rc = m3_st_writer_add(dump, name, M3_F32, 2, shape, h, e);
    }
    free(h);
    return rc;
}

/* ---- the tower ---------------------------------------------------------------- */

static int check_mat(const m3g_mat &W, int rows, int cols, const char *name, m3_err *e)
{
    if (W.rows != rows || W.cols != cols)
        return m3_fail(e, "vision (gpu): %s is [%d, %d], expected [%d, %d]", name, W.rows,
                       W.cols, rows, cols);
    return 0;
}

/* The BLAS context of a bf16-mode tower or projector call over npatch rows
 * whose linears read at most maxcols inputs per row: the vision linears'
 * products then come from the vendor GEMM (m3g_linear_product). NULL in
 * fp32 mode, without BLAS, or on failure (the exact kernels serve). */
static m3g_blas *vis_blas(int mode, int64_t npatch, int maxcols, hipStream_t st)
{
    return mode == 1 ? m3g_blas_new(st, (size_t)npatch * (size_t)maxcols) : NULL;
}

static int imax(int a, int b)
{
    return a > b ? a : b;
}

/* Projector per patch, then the merge of each run of `group` consecutive
 * rows (contiguous in the projected buffer: rows [group*t, group*t + group)
 * are one [group*H] row), ref M3-VIS-PROJ-1 / M3-VIS-MERGE-1. h [npatch, Hv]
 * on the device; scratch from a. Dumps vision.projected and
 * vision.image_features. */
static int vis_project(dallocs *a, const dvis *d, const float *h, int64_t npatch, int Hv,
                       int group, int H, int mode, m3g_blas *blas, hipStream_t st,
                       float *features_dev, m3_st_writer *dump, m3_err *e)
{
    const int P = d->proj1.rows, Pm = d->merge1.rows;
    float *t1 = NULL, *proj = NULL, *t2 = NULL;
    int rc = -1;
    if (check_mat(d->proj1, P, Hv, "multi_modal_projector.linear_1", e) ||
        check_mat(d->proj2, H, P, "multi_modal_projector.linear_2", e) ||
        check_mat(d->merge1, Pm, group * H, "patch_merge_mlp.linear_1", e) ||
        check_mat(d->merge2, H, Pm, "patch_merge_mlp.linear_2", e))
        return -1;
    if (npatch % group)
        return m3_fail(e, "vision (gpu): %lld rows are not a multiple of the merge group %d",
                       (long long)npatch, group);
    t1 = (float *)dmalloc(a, e, (size_t)npatch * P * sizeof(float));
    proj = (float *)dmalloc(a, e, (size_t)npatch * H * sizeof(float));
    t2 = (float *)dmalloc(a, e, (size_t)(npatch / group) * Pm * sizeof(float));
    if (!t1 || !proj || !t2)
        return m3_fail_prefix(e, "vision (gpu): the projector buffers of %lld rows",
                       (long long)npatch);
    M3G_TRY(e, m3g_linear_bias(t1, h, d->proj1, d->proj1_b, npatch, 1, NULL, mode, blas, st), done);
    M3G_TRY(e, m3g_linear_bias(proj, t1, d->proj2, d->proj2_b, npatch, 0, NULL, mode, blas, st),
            done);
    if (dump_dev(dump, "vision.projected", npatch, H, proj, st, e))
        goto done;
    M3G_TRY(
        e,
        m3g_linear_bias(t2, proj, d->merge1, d->merge1_b, npatch / group, 1, NULL, mode, blas, st),
        done);
    M3G_TRY(e, m3g_linear_bias(features_dev, t2, d->merge2, d->merge2_b, npatch / group, 0, NULL,
                        mode, blas, st), done);
    if (dump_dev(dump, "vision.image_features", npatch / group, H, features_dev, st, e))
        goto done;
    rc = 0;
done:
    return rc;
}

int m3g_vision_forward(const m3_model *m, const float *pixels, int64_t npatch,
                       const int32_t *grid, int nitems, int mode, int joint, hipStream_t st,
                       float *features_dev, m3_st_writer *dump, m3_err *e)
{
    const m3_vision_config *vc = &m->cfg.vision;
    const m3_vision_weights *vw = &m->w.vision;
    if (!m->cfg.has_vision || !m->w.has_vision)
        return m3_fail(e, "%s: the checkpoint has no vision tower", m->dir);
    const int merge = vc->spatial_merge_size, Hv = vc->hidden_size, nh = vc->num_heads;
    if (merge <= 0 || nh <= 0 || Hv % nh != 0)
        return m3_fail(e, "%s: vision_config: hidden_size %d, %d heads, merge %d", m->dir, Hv,
                       nh, merge);
    const int hd = Hv / nh, Iv = vc->intermediate_size, H = m->cfg.text.hidden_size;
    const int in_dim = vw->patch_embed.cols, group = merge * merge, L = vc->num_layers;
    const int64_t expect = m3_vision_num_patches(grid, nitems, merge, e);
    if (expect < 0)
        return -1;
    if (expect != npatch)
        return m3_fail(e, "vision: grid_thw describes %lld patches but pixel_values has %lld rows",
                       (long long)expect, (long long)npatch);
    if (npatch > (int64_t)1 << 22)
        return m3_fail(e, "vision: %lld patches exceed the documented cap of 2^22",
                       (long long)npatch);
    const int rd = m3_vision_rope_dim(hd);
    const size_t N = (size_t)npatch, half = (size_t)(rd / 2);

    dallocs a;
    memset(&a, 0, sizeof a);
    dvis d;
    memset(&d, 0, sizeof d);
    int rc = -1;
    float *ct = NULL, *stb = NULL;
    int32_t *coords = NULL;
    int64_t *seg_start = NULL, *seg_len = NULL;
    int nseg = 0;
    float *px = NULL, *h = NULL, *x = NULL, *q = NULL, *k = NULL, *v = NULL, *att = NULL;
    float *tmp = NULL, *mlp = NULL, *dcos = NULL, *dsin = NULL;
    uint16_t *att_ws = NULL; /* bf16 copies for the attention kernel (none in fp32 mode) */
    size_t ws_elems = 0;
    char name[64];
    m3g_blas *blas = NULL;

    if (dvis_upload(&a, &d, vw, L, 1, e) != 0) {
        m3_fail_prefix(e, "vision (gpu): uploading the vision weights of %s", m->dir);
        goto done;
    }
    if (check_mat(d.patch, Hv, in_dim, "patch_embed", e))
        goto done;
    for (int l = 0; l < L; l++)
        if (check_mat(d.layers[l].q, Hv, Hv, "q_proj", e) ||
            check_mat(d.layers[l].k, Hv, Hv, "k_proj", e) ||
            check_mat(d.layers[l].v, Hv, Hv, "v_proj", e) ||
            check_mat(d.layers[l].o, Hv, Hv, "out_proj", e) ||
            check_mat(d.layers[l].fc1, Iv, Hv, "mlp.fc1", e) ||
            check_mat(d.layers[l].fc2, Hv, Iv, "mlp.fc2", e))
            goto done;

    /* attention segments and 3D coordinates (as ref segments_build) */
    {
        int64_t cap = 1;
        const int mg = vc->segment_max_frames > 0 ? vc->segment_max_frames : 1;
        for (int i = 0; i < nitems; i++)
            cap += joint ? 0 : (grid[3 * i] + mg - 1) / mg;
        seg_start = (int64_t *)malloc((size_t)cap * sizeof *seg_start);
        seg_len = (int64_t *)malloc((size_t)cap * sizeof *seg_len);
        coords = (int32_t *)malloc(N * 3 * sizeof *coords);
        ct = (float *)malloc((N ? N : 1) * (half ? half : 1) * sizeof *ct);
        stb = (float *)malloc((N ? N : 1) * (half ? half : 1) * sizeof *stb);
        if (!seg_start || !seg_len || !coords || !ct || !stb) {
            m3_fail(e, "vision: out of memory for %lld patches", (long long)npatch);
            goto done;
        }
        int64_t row = 0;
        for (int i = 0; i < nitems; i++) {
            const int gt = grid[3 * i], gh = grid[3 * i + 1], gw = grid[3 * i + 2];
            const int64_t per_t = (int64_t)gh * gw;
            if (joint) {
                m3_vision_coords(coords + 3 * row, gt, gh, gw, merge);
                row += gt * per_t;
                continue;
            }
            for (int t0 = 0; t0 < gt; t0 += mg) {
                const int nt = gt - t0 < mg ? gt - t0 : mg;
                m3_vision_coords(coords + 3 * row, nt, gh, gw, merge);
                seg_start[nseg] = row;
                seg_len[nseg] = nt * per_t;
                nseg++;
                row += nt * per_t;
            }
        }
        if (joint) {
            seg_start[0] = 0;
            seg_len[0] = npatch;
            nseg = 1;
        }
        for (size_t r = 0; r < N; r++) {
            const int32_t *c = coords + 3 * r;
            m3_vision_rope_table(ct + r * half, stb + r * half, c[0], c[1], c[2], hd,
                                 vc->rope_theta);
        }
    }

#define VA(ptr, n) ((ptr) = (float *)dmalloc(&a, e, (size_t)(n) * sizeof(float))) == NULL
    if (VA(px, N * in_dim) || VA(h, N * Hv) || VA(x, N * Hv) || VA(q, N * Hv) || VA(k, N * Hv) ||
        VA(v, N * Hv) || VA(att, N * Hv) || VA(tmp, N * Hv) || VA(mlp, N * Iv) ||
        VA(dcos, N * half) || VA(dsin, N * half)) {
        m3_fail_prefix(e, "vision (gpu): the buffers of %lld patches", (long long)npatch);
        goto done;
    }
#undef VA
    ws_elems = m3g_vision_attention_ws_elems((int)npatch, nh, hd, mode);
    if (ws_elems && !(att_ws = (uint16_t *)dmalloc(&a, e, ws_elems * sizeof(uint16_t)))) {
        m3_fail_prefix(e, "vision (gpu): the attention workspace of %lld patches",
                       (long long)npatch);
        goto done;
    }
    blas = vis_blas(mode, npatch,
                    imax(imax(Hv, Iv), imax(d.proj1.rows, H)), st);
    M3G_TRY(e, hipMemcpy(px, pixels, N * in_dim * sizeof(float), hipMemcpyHostToDevice), done);
    M3G_TRY(e, hipMemcpy(dcos, ct, N * half * sizeof(float), hipMemcpyHostToDevice), done);
    M3G_TRY(e, hipMemcpy(dsin, stb, N * half * sizeof(float), hipMemcpyHostToDevice), done);

    if (dump) {
        int64_t pshape[2] = {npatch, in_dim}, gshape[2] = {nitems, 3};
        if (m3_st_writer_add(dump, "vision.pixel_values", M3_F32, 2, pshape, pixels, e) ||
            m3_st_writer_add(dump, "vision.grid_thw", M3_I32, 2, gshape, grid, e))
            goto done;
    }

    /* patch embedding (no bias; the unrounded product, then the mode rounding,
     * as ref) then pre_layrnorm */
    M3G_TRY(e, m3g_linear(h, Hv, px, d.patch, (int)npatch, 0, NULL, st), done);
    M3G_TRY(e, m3g_round(h, (int64_t)npatch * Hv, mode, st), done);
    if (dump_dev(dump, "vision.patch_embed", npatch, Hv, h, st, e))
        goto done;
    M3G_TRY(e, m3g_layernorm(h, h, d.pre_w.p, d.pre_w.dt, d.pre_b.p, d.pre_b.dt, (int)npatch, Hv,
                      vc->layer_norm_eps, mode, st), done);

    for (int l = 0; l < L; l++) {
        const m3g_vis_scratch sc = {x, q, k, v, att, tmp, mlp, att_ws};
        M3G_TRY(e, m3g_vision_layer(h, &d.layers[l], &sc, npatch, nh, hd, rd, dcos, dsin, seg_start,
                             seg_len, nseg, vc->layer_norm_eps, mode, blas, st), done);
        snprintf(name, sizeof name, "vision.layers.%d.output", l);
        if (dump_dev(dump, name, npatch, Hv, h, st, e))
            goto done;
    }
    if (dump_dev(dump, "vision.tower_output", npatch, Hv, h, st, e))
        goto done;
    if (vis_project(&a, &d, h, npatch, Hv, group, H, mode, blas, st, features_dev, dump, e))
        goto done;
    M3G_TRY(e, hipStreamSynchronize(st), done);
    rc = 0;
done:
    (void)hipStreamSynchronize(st);
    m3g_blas_free(blas);
    dallocs_free(&a);
    free(d.layers);
    free(ct);
    free(stb);
    free(coords);
    free(seg_start);
    free(seg_len);
    return rc;
}

/* ---- vision component vector cases ------------------------------------------------ */

/* Tensor `name` of the case inputs with ndim dims (dims[d] == 0: any size, filled in). */
static const m3_tensor *need(const m3_store *s, const char *path, const char *name, int ndim,
                             int64_t *dims, m3_err *e)
{
    const m3_tensor *t = m3_store_get(s, name);
    if (!t) {
        m3_fail(e, "%s: tensor \"%s\" is missing", path, name);
        return NULL;
    }
    if (t->ndim != ndim) {
        m3_fail(e, "%s: tensor \"%s\" has %d dimensions, expected %d", path, name, t->ndim, ndim);
        return NULL;
    }
    for (int d = 0; d < ndim; d++) {
        if (t->shape[d] <= 0 || t->shape[d] > (1 << 28) ||
            (dims[d] != 0 && dims[d] != t->shape[d])) {
            m3_fail(e, "%s: tensor \"%s\" dimension %d is %lld, expected %lld", path, name, d,
                    (long long)t->shape[d], (long long)dims[d]);
            return NULL;
        }
        dims[d] = t->shape[d];
    }
    if (t->dtype != M3_F32 && t->dtype != M3_BF16 && t->dtype != M3_F16 && t->dtype != M3_I32 &&
        t->dtype != M3_I64) {
        m3_fail(e, "%s: tensor \"%s\" has dtype %s", path, name, m3_dtype_name(t->dtype));
        return NULL;
    }
    return t;
}

static int bind_mat(m3_mat *m, const m3_store *s, const char *path, const char *name, int ndim,
                    int64_t *dims, int rows, int cols, m3_err *e)
{
    const m3_tensor *t = need(s, path, name, ndim, dims, e);
    if (!t)
        return -1;
    if (t->dtype == M3_I32 || t->dtype == M3_I64)
        return m3_fail(e, "%s: weight \"%s\" must be a float tensor", path, name);
    m->data = t->data;
    m->dtype = t->dtype;
    m->rows = rows;
    m->cols = cols;
    return 0;
}

static int bind_vec(m3_vec *v, const m3_store *s, const char *path, const char *name, int n,
                    m3_err *e)
{
    int64_t d[1] = {n};
    const m3_tensor *t = need(s, path, name, 1, d, e);
    if (!t)
        return -1;
    if (t->dtype == M3_I32 || t->dtype == M3_I64)
        return m3_fail(e, "%s: weight \"%s\" must be a float tensor", path, name);
    v->data = t->data;
    v->dtype = t->dtype;
    v->n = n;
    return 0;
}

/* fp32 copy of a float tensor (malloc; NULL with a message). */
static float *widen(const m3_tensor *t, const char *path, m3_err *e)
{
    const int64_t n = m3_tensor_numel(t);
    if (t->dtype == M3_I32 || t->dtype == M3_I64) {
        m3_fail(e, "%s: tensor \"%s\" must be a float tensor", path, t->name);
        return NULL;
    }
    float *x = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
    if (!x) {
        m3_fail(e, "%s: out of memory for \"%s\"", path, t->name);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = m3_load_f32(t->data, t->dtype, (size_t)i);
    return x;
}

static int param_int(const cJSON *params, const char *dir, const char *key, int lo, int hi,
                     int *v, m3_err *e)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(params, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= lo && x->valuedouble <= hi) ||
        x->valuedouble != (double)(int)x->valuedouble)
        return m3_fail(e, "%s/case.json: params.%s must be an integer in [%d, %d]", dir, key, lo,
                       hi);
    *v = (int)x->valuedouble;
    return 0;
}

static double param_num_or(const cJSON *params, const char *key, double dflt)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(params, key);
    return cJSON_IsNumber(x) ? x->valuedouble : dflt;
}

/* A model view of the case's public-layout vision tensors (config from the
 * params, as conformance/runner_ref.c bind_vision). Allocates
 * m->w.vision.layers (the caller frees it). */
static int bind_case_vision(m3_model *m, const m3_store *s, const char *path, const char *dir,
                            const cJSON *params, int tower, m3_err *e)
{
    memset(m, 0, sizeof *m);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    m3_vision_config *vc = &m->cfg.vision;
    if (param_int(params, dir, "hidden_size", 1, 1 << 16, &vc->hidden_size, e) ||
        param_int(params, dir, "num_heads", 1, 1 << 10, &vc->num_heads, e) ||
        param_int(params, dir, "num_layers", 0, 1 << 10, &vc->num_layers, e) ||
        param_int(params, dir, "intermediate_size", 1, 1 << 18, &vc->intermediate_size, e) ||
        param_int(params, dir, "segment_max_frames", 1, 1 << 16, &vc->segment_max_frames, e) ||
        param_int(params, dir, "projector_hidden_size", 1, 1 << 18, &vc->projector_hidden_size,
                  e) ||
        param_int(params, dir, "text_hidden_size", 1, 1 << 18, &m->cfg.text.hidden_size, e))
        return -1;
    if (vc->hidden_size % vc->num_heads)
        return m3_fail(e, "%s/case.json: hidden_size %% num_heads != 0", dir);
    vc->layer_norm_eps = (float)param_num_or(params, "layer_norm_eps", 1e-5);
    vc->rope_theta = param_num_or(params, "rope_theta", 1e4);
    vc->patch_size = 14;
    vc->temporal_patch_size = 2;
    vc->spatial_merge_size = 2;
    vc->num_channels = 3;
    m->cfg.has_vision = m->w.has_vision = 1;
    const int Hv = vc->hidden_size, Iv = vc->intermediate_size, P = vc->projector_hidden_size;
    const int H = m->cfg.text.hidden_size;
    m3_vision_weights *w = &m->w.vision;
    int64_t d2[2];
#define MAT2(dst, name, r, c)                                                                  \
    (d2[0] = (r), d2[1] = (c), bind_mat(&(dst), s, path, name, 2, d2, r, c, e))
    if (MAT2(w->proj1, "multi_modal_projector.linear_1.weight", P, Hv) ||
        bind_vec(&w->proj1_b, s, path, "multi_modal_projector.linear_1.bias", P, e) ||
        MAT2(w->proj2, "multi_modal_projector.linear_2.weight", H, P) ||
        bind_vec(&w->proj2_b, s, path, "multi_modal_projector.linear_2.bias", H, e) ||
        MAT2(w->merge1, "patch_merge_mlp.linear_1.weight", P, 4 * H) ||
        bind_vec(&w->merge1_b, s, path, "patch_merge_mlp.linear_1.bias", P, e) ||
        MAT2(w->merge2, "patch_merge_mlp.linear_2.weight", H, P) ||
        bind_vec(&w->merge2_b, s, path, "patch_merge_mlp.linear_2.bias", H, e))
        return -1;
    if (!tower)
        return 0;
    const char *VP = "vision_tower.vision_model.";
    char n[256];
    int64_t d5[5] = {Hv, 3, 2, 14, 14};
    snprintf(n, sizeof n, "%sembeddings.patch_embedding.weight", VP);
    if (bind_mat(&w->patch_embed, s, path, n, 5, d5, Hv, 1176, e))
        return -1;
    snprintf(n, sizeof n, "%spre_layrnorm.weight", VP);
    if (bind_vec(&w->pre_ln_w, s, path, n, Hv, e))
        return -1;
    snprintf(n, sizeof n, "%spre_layrnorm.bias", VP);
    if (bind_vec(&w->pre_ln_b, s, path, n, Hv, e))
        return -1;
    w->layers = (m3_vision_layer_weights *)calloc((size_t)(vc->num_layers ? vc->num_layers : 1),
                                                  sizeof *w->layers);
    if (!w->layers)
        return m3_fail(e, "out of memory");
    for (int l = 0; l < vc->num_layers; l++) {
        m3_vision_layer_weights *lw = &w->layers[l];
        struct {
            m3_vec *v;
            const char *s;
            int len;
        } vecs[] = {{&lw->ln1_w, "layer_norm1.weight", Hv}, {&lw->ln1_b, "layer_norm1.bias", Hv},
                    {&lw->ln2_w, "layer_norm2.weight", Hv}, {&lw->ln2_b, "layer_norm2.bias", Hv},
                    {&lw->q_b, "self_attn.q_proj.bias", Hv},
                    {&lw->k_b, "self_attn.k_proj.bias", Hv},
                    {&lw->v_b, "self_attn.v_proj.bias", Hv},
                    {&lw->o_b, "self_attn.out_proj.bias", Hv}, {&lw->fc1_b, "mlp.fc1.bias", Iv},
                    {&lw->fc2_b, "mlp.fc2.bias", Hv}};
        struct {
            m3_mat *m;
            const char *s;
            int r, c;
        } mats[] = {{&lw->q, "self_attn.q_proj.weight", Hv, Hv},
                    {&lw->k, "self_attn.k_proj.weight", Hv, Hv},
                    {&lw->v, "self_attn.v_proj.weight", Hv, Hv},
                    {&lw->o, "self_attn.out_proj.weight", Hv, Hv},
                    {&lw->fc1, "mlp.fc1.weight", Iv, Hv}, {&lw->fc2, "mlp.fc2.weight", Hv, Iv}};
        for (size_t k = 0; k < sizeof vecs / sizeof vecs[0]; k++) {
            snprintf(n, sizeof n, "%sencoder.layers.%d.%s", VP, l, vecs[k].s);
            if (bind_vec(vecs[k].v, s, path, n, vecs[k].len, e))
                return -1;
        }
        for (size_t k = 0; k < sizeof mats / sizeof mats[0]; k++) {
            snprintf(n, sizeof n, "%sencoder.layers.%d.%s", VP, l, mats[k].s);
            if (MAT2(*mats[k].m, n, mats[k].r, mats[k].c))
                return -1;
        }
    }
#undef MAT2
    return 0;
}

/* case.json of dir, parsed (the caller deletes it), or NULL with a message. */
static cJSON *read_case(const char *dir, m3_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/case.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        m3_fail(e, "%s: cannot open", path);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 16384;
            if (cap > (64u << 20)) {
                free(buf);
                fclose(f);
                m3_fail(e, "%s: larger than 64 MiB", path);
                return NULL;
            }
            char *nb = (char *)realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                m3_fail(e, "%s: out of memory", path);
                return NULL;
            }
            buf = nb;
        }
        const size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    buf[len] = 0;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        m3_fail(e, "%s: not a JSON object", path);
        return NULL;
    }
    return j;
}

int m3g_vision_run_case(const char *dir, hipStream_t st, m3_st_writer *dump, int *mode_out,
                        m3_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/inputs.safetensors", dir);
    cJSON *c = read_case(dir, e);
    if (!c)
        return -1;
    m3_store *s = NULL;
    m3_model m;
    memset(&m, 0, sizeof m);
    dallocs a;
    memset(&a, 0, sizeof a);
    dvis d;
    memset(&d, 0, sizeof d);
    float *host = NULL, *feats = NULL;
    int32_t *grid = NULL;
    int rc = -1, mode = 0;
    const cJSON *comp = cJSON_GetObjectItemCaseSensitive(c, "component");
    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(c, "mode");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(c, "params");
    const char *cn = cJSON_IsString(comp) ? comp->valuestring : "";
    if (!cJSON_IsString(jm) ||
        (strcmp(jm->valuestring, "fp32") && strcmp(jm->valuestring, "bf16"))) {
        m3_fail(e, "%s/case.json: mode must be \"fp32\" or \"bf16\"", dir);
        goto done;
    }
    mode = !strcmp(jm->valuestring, "bf16");
    *mode_out = mode;
    if (m3_store_open(&s, path, e))
        goto done;
    if (!strcmp(cn, "vision_patch_embed")) {
        int64_t pd[2] = {0, 1176}, wd[5] = {0, 3, 2, 14, 14};
        const m3_tensor *px = need(s, path, "pixel_values", 2, pd, e);
        m3_mat W;
        m3g_mat dW;
        float *dx = NULL, *dy = NULL;
        if (!px || bind_mat(&W, s, path, "patch_embedding", 5, wd, 0, 1176, e))
            goto done;
        W.rows = (int)wd[0];
        if (!(host = widen(px, path, e)))
            goto done;
        if (up_mat(&a, &dW, &W, e) ||
            !(dx = (float *)dmalloc(&a, e, (size_t)pd[0] * 1176 * sizeof(float))) ||
            !(dy = (float *)dmalloc(&a, e, (size_t)pd[0] * W.rows * sizeof(float)))) {
            m3_fail_prefix(e, "vision (gpu): device buffers");
            goto done;
        }
        M3G_TRY(e, hipMemcpy(dx, host, (size_t)pd[0] * 1176 * sizeof(float), hipMemcpyHostToDevice),
                done);
        M3G_TRY(e, m3g_linear(dy, W.rows, dx, dW, (int)pd[0], 0, NULL, st), done);
        M3G_TRY(e, m3g_round(dy, pd[0] * W.rows, mode, st), done);
        if (dump_dev(dump, "patch_embed", pd[0], W.rows, dy, st, e))
            goto done;
    } else if (!strcmp(cn, "vision_layer") || !strcmp(cn, "vision_tower")) {
        int64_t pd[2] = {0, 1176}, gd[2] = {0, 3};
        const m3_tensor *px, *gt;
        if (!params || bind_case_vision(&m, s, path, dir, params, 1, e) ||
            !(px = need(s, path, "pixel_values", 2, pd, e)) ||
            !(gt = need(s, path, "grid_thw", 2, gd, e)) || !(host = widen(px, path, e)))
            goto done;
        if ((gt->dtype != M3_I32 && gt->dtype != M3_I64) || gd[0] > 4096) {
            m3_fail(e, "%s: grid_thw must be I32 or I64 [n <= 4096, 3]", path);
            goto done;
        }
        grid = (int32_t *)malloc((size_t)gd[0] * 3 * sizeof *grid);
        if (!grid) {
            m3_fail(e, "out of memory");
            goto done;
        }
        for (int64_t i = 0; i < gd[0] * 3; i++) {
            const int64_t val = gt->dtype == M3_I32 ? ((const int32_t *)gt->data)[i]
                                                    : ((const int64_t *)gt->data)[i];
            if (val <= 0 || val > (1 << 20)) {
                m3_fail(e, "%s: grid_thw entry %lld is out of range", path, (long long)val);
                goto done;
            }
            grid[i] = (int32_t)val;
        }
        feats = (float *)dmalloc(&a, e, (size_t)(pd[0] / 4 + 1) * m.cfg.text.hidden_size *
                                         sizeof(float));
        if (!feats) {
            m3_fail_prefix(e, "vision (gpu): device buffers");
            goto done;
        }
        if (m3g_vision_forward(&m, host, pd[0], grid, (int)gd[0], mode, 0, st, feats, dump, e))
            goto done;
    } else if (!strcmp(cn, "vision_projector")) {
        int64_t hd[2] = {0, 0};
        const m3_tensor *ht;
        float *dh = NULL;
        if (!params || bind_case_vision(&m, s, path, dir, params, 0, e))
            goto done;
        const int Hv = m.cfg.vision.hidden_size, H = m.cfg.text.hidden_size;
        hd[1] = Hv;
        if (!(ht = need(s, path, "tower_output", 2, hd, e)) || !(host = widen(ht, path, e)))
            goto done;
        if (dvis_upload(&a, &d, &m.w.vision, 0, 0, e) ||
            !(dh = (float *)dmalloc(&a, e, (size_t)hd[0] * Hv * sizeof(float))) ||
            !(feats = (float *)dmalloc(&a, e, (size_t)(hd[0] / 4 + 1) * H * sizeof(float)))) {
            m3_fail_prefix(e, "vision (gpu): device buffers");
            goto done;
        }
        M3G_TRY(e, hipMemcpy(dh, host, (size_t)hd[0] * Hv * sizeof(float), hipMemcpyHostToDevice),
                done);
        m3g_blas *pb = vis_blas(mode, hd[0], imax(imax(Hv, d.proj1.rows), H), st);
        const int pr = vis_project(&a, &d, dh, hd[0], Hv, 4, H, mode, pb, st, feats, dump, e);
        (void)hipStreamSynchronize(st);
        m3g_blas_free(pb);
        if (pr)
            goto done;
    } else {
        m3_fail(e, "%s/case.json: component \"%s\" is not one of vision_patch_embed, "
                   "vision_layer, vision_tower, vision_projector",
                dir, cn);
        goto done;
    }
    M3G_TRY(e, hipStreamSynchronize(st), done);
    rc = 0;
done:
    (void)hipStreamSynchronize(st);
    dallocs_free(&a);
    free(d.layers);
    free(m.w.vision.layers);
    free(host);
    free(grid);
    m3_store_close(s);
    cJSON_Delete(c);
    return rc;
}

/* ---- the front end ------------------------------------------------------------- */

int m3g_vision_prepare(const m3_model *m, const m3g_vision_request *r, const int32_t *ids,
                       int64_t n, int mode, const m3_tokenizer *tok, hipStream_t st,
                       m3_st_writer *dump, int32_t **ids_out, int64_t *nout,
                       m3g_vision_feats *out, m3_err *e)
{
    *ids_out = NULL;
    *nout = 0;
    memset(out, 0, sizeof *out);
    const int H = m->cfg.text.hidden_size;
    m3_mm_ids t;
    m3_mm_ids_from_config(&t, &m->cfg);
    m3_mm_pixels p;
    memset(&p, 0, sizeof p);
    int32_t *use_ids = NULL, *rows = NULL;
    int64_t nuse = 0, nfeat = 0, slots = 0, f = 0;
    int rc = -1, nframes = 0;
    char *fbuf = NULL;
    const char **frames = NULL;
    m3_mm_request mr;
    memset(&mr, 0, sizeof mr);
    if (r->video_frames && (nframes = m3_mm_split_frames(r->video_frames, &fbuf, &frames, e)) < 0)
        goto done; /* the frame list, split at commas as bin/m3-ref --video */
    /* host preprocessing and placeholder expansion through the reference
     * library (exact; video timestamps only with a tokenizer) */
    mr.image_paths = r->image_paths;
    mr.n_images = r->n_images;
    mr.video_paths = frames;
    mr.n_video_frames = nframes;
    mr.fps = r->fps;
    mr.tok = tok;
    mr.pixels_path = r->pixels_path;
    mr.joint = r->joint;
    mr.mode = mode ? M3_MODE_BF16 : M3_MODE_FP32;
    if (m3_mm_collect(m, &mr, &p, e))
        goto done;
    if (p.nitems == 0) {
        m3_fail(e, "multimodal: no image, video or pixel input was given");
        goto done;
    }

    /* the tower on the device */
    nfeat = p.n / (m->cfg.vision.spatial_merge_size * m->cfg.vision.spatial_merge_size);
    if (M3G_HIP(e, hipMalloc((void **)&out->feats,
                             (size_t)(nfeat > 0 ? nfeat : 1) * H * sizeof(float)))) {
        out->feats = NULL;
        m3_fail_prefix(e, "vision (gpu): %lld feature rows", (long long)nfeat);
        goto done;
    }
    if (m3g_vision_forward(m, p.rows, p.n, p.grid, p.nitems, mode, r->joint, st, out->feats,
                           dump, e))
        goto done;
    if (m3_mm_place_ids(m, &mr, &p, nfeat, ids, n, &use_ids, &nuse, e))
        goto done;

    /* the placeholder rows, in order (M3-EMB-3: the count must match) */
    slots = m3_mm_count(use_ids, nuse, t.image, t.video);
    if (slots != nfeat) {
        m3_fail(e, "multimodal: the prompt has %lld image/video placeholder tokens (ids %d/%d) "
                   "but the vision tower produced %lld feature rows",
                (long long)slots, (int)t.image, (int)t.video, (long long)nfeat);
        goto done;
    }
    rows = (int32_t *)malloc((size_t)(nfeat > 0 ? nfeat : 1) * sizeof *rows);
    if (!rows) {
        m3_fail(e, "multimodal: out of memory");
        goto done;
    }
    for (int64_t i = 0; i < nuse; i++)
        if (use_ids[i] == t.image || use_ids[i] == t.video) {
            if (i > 0x7fffffff) {
                m3_fail(e, "multimodal: placeholder row %lld is beyond 2^31", (long long)i);
                goto done;
            }
            rows[f++] = (int32_t)i;
        }
    if (M3G_HIP(e, hipMalloc((void **)&out->rows,
                             (size_t)(nfeat > 0 ? nfeat : 1) * sizeof(int32_t))) ||
        M3G_HIP(e, hipMemcpy(out->rows, rows, (size_t)nfeat * sizeof(int32_t),
                             hipMemcpyHostToDevice))) {
        m3_fail_prefix(e, "vision (gpu): uploading %lld placeholder rows", (long long)nfeat);
        goto done;
    }
    out->n = nfeat;
    *ids_out = use_ids;
    *nout = nuse;
    use_ids = NULL;
    rc = 0;
done:
    if (rc != 0)
        m3g_vision_feats_free(out);
    m3_mm_pixels_free(&p);
    free(use_ids);
    free(rows);
    free(fbuf);
    free(frames);
    return rc;
}

hipError_t m3g_vision_place(const m3g_vision_feats *f, float *x, int H, hipStream_t st)
{
    if (!f || f->n <= 0)
        return hipSuccess;
    return m3g_scatter_rows(x, H, f->feats, f->rows, f->n, H, st);
}

void m3g_vision_feats_free(m3g_vision_feats *f)
{
    if (!f)
        return;
    if (f->feats)
        (void)hipFree(f->feats);
    if (f->rows)
        (void)hipFree(f->rows);
    memset(f, 0, sizeof *f);
}
