/* weight_upload.cu — see weight_upload.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hip_check.h"
#include "kernels/common.cuh"
#include "weight_upload.h"

/* Host bytes of a view (0 when absent), as the upload reads them. */
static int64_t mat_bytes(const m3_mat *x)
{
    return x->data ? (int64_t)x->rows * x->cols * (int64_t)m3_dtype_size(x->dtype) : 0;
}
static int64_t vec_bytes(const m3_vec *v)
{
    return v->data ? (int64_t)v->n * (int64_t)m3_dtype_size(v->dtype) : 0;
}

/* The host bytes dev_model_upload reads: the total of its progress line. */
static int64_t upload_bytes(const m3_model *m)
{
    const m3_text_config *c = &m->cfg.text;
    int64_t b = mat_bytes(&m->w.lm_head) + vec_bytes(&m->w.final_norm);
    for (int l = 0; l < c->num_layers; l++) {
        const m3_layer_weights *w = &m->w.layers[l];
        b += vec_bytes(&w->input_norm) + vec_bytes(&w->post_norm) + vec_bytes(&w->q_norm) +
             vec_bytes(&w->k_norm) + mat_bytes(&w->o) + mat_bytes(&w->q) + mat_bytes(&w->k) +
             mat_bytes(&w->v);
        if (c->layer_sparse[l])
            b += mat_bytes(&w->index_q) + mat_bytes(&w->index_k) + vec_bytes(&w->index_q_norm) +
                 vec_bytes(&w->index_k_norm);
        if (c->layer_moe[l]) {
            b += mat_bytes(&w->router) + vec_bytes(&w->router_bias) + mat_bytes(&w->sh_down) +
                 mat_bytes(&w->sh_gate) + mat_bytes(&w->sh_up);
            for (int x = 0; x < c->num_experts; x++)
                b += mat_bytes(&w->exp_gate[x]) + mat_bytes(&w->exp_up[x]) +
                     mat_bytes(&w->exp_down[x]);
        } else {
            b += mat_bytes(&w->mlp_gate) + mat_bytes(&w->mlp_up) + mat_bytes(&w->mlp_down);
        }
    }
    return b;
}

/* Count n host bytes as uploaded. */
static void uploaded(dev_model *dm, size_t n)
{
    if (dm->pg)
        m3_progress_add(dm->pg, (int64_t)n);
}

/* Record device buffer p in dm (freed by dev_model_free); on failure free p. */
static int track(dev_model *dm, void *p, m3_err *e)
{
    if (dm->nallocs == dm->capallocs) {
        int cap = dm->capallocs ? 2 * dm->capallocs : 256;
        void **n = (void **)realloc(dm->allocs, (size_t)cap * sizeof *n);
        if (!n) {
            (void)hipFree(p);
            return m3_fail(e, "out of host memory for the list of device buffers");
        }
        dm->allocs = n;
        dm->capallocs = cap;
    }
    dm->allocs[dm->nallocs++] = p;
    return 0;
}

/* *p = bytes of device memory (uninitialised), tracked in dm. */
static int dev_malloc(dev_model *dm, void **p, size_t bytes, m3_err *e)
{
    *p = NULL;
    if (M3G_HIP(e, hipMalloc(p, bytes)) || track(dm, *p, e)) {
        *p = NULL;
        return -1;
    }
    return 0;
}

int dev_model_alloc(dev_model *dm, void **p, size_t bytes, m3_err *e)
{
    if (bytes == 0)
        bytes = 4;
    if (dev_malloc(dm, p, bytes, e))
        return -1;
    return M3G_HIP(e, hipMemset(*p, 0, bytes));
}

void dev_model_free(dev_model *dm)
{
    for (int i = 0; i < dm->nallocs; i++)
        (void)hipFree(dm->allocs[i]);
    free(dm->allocs);
    free(dm->layers);
    memset(dm, 0, sizeof *dm);
}

/* Upload n elements stored as dt at src; fp32 and bf16 stay as they are,
 * anything else is widened to fp32 (exact). *out_dt gets M3G_F32/M3G_BF16. */
static void *upload(dev_model *dm, m3_err *e, const void *src, m3_dtype dt, size_t n, int *out_dt)
{
    void *d = NULL;
    if (dt == M3_BF16 || dt == M3_F32) {
        size_t bytes = n * m3_dtype_size(dt);
        if (dev_malloc(dm, &d, bytes, e) ||
            M3G_HIP(e, hipMemcpy(d, src, bytes, hipMemcpyHostToDevice)))
            return NULL;
        uploaded(dm, bytes);
        *out_dt = dt == M3_BF16 ? M3G_BF16 : M3G_F32;
        return d;
    }
    float *tmp = (float *)malloc(n * sizeof(float));
    if (!tmp) {
        m3_fail(e, "out of host memory widening %zu weights to fp32", n);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        tmp[i] = m3_load_f32(src, dt, i);
    if (dev_malloc(dm, &d, n * sizeof(float), e) ||
        M3G_HIP(e, hipMemcpy(d, tmp, n * sizeof(float), hipMemcpyHostToDevice)))
        d = NULL;
    free(tmp);
    uploaded(dm, n * m3_dtype_size(dt));
    *out_dt = M3G_F32;
    return d;
}

static int up_mat(dev_model *dm, m3_err *e, m3g_mat *out, const m3_mat *m)
{
    memset(out, 0, sizeof *out);
    if (!m->data)
        return 0;
    out->rows = m->rows;
    out->cols = m->cols;
    out->data = upload(dm, e, m->data, m->dtype, (size_t)m->rows * (size_t)m->cols, &out->dtype);
    return out->data ? 0 : -1;
}

/* n matrices with equal cols concatenated by rows into one device buffer
 * (fused GEMVs, m3g_linear_multi); views[i] point into it. All bf16 or all
 * fp32: raw copies; otherwise all widened to fp32 one matrix at a time (as
 * upload). Returns 1 when fused, 0 when a matrix is missing or cols differ
 * (the caller uploads them separately), -1 on an allocation/copy error. */
static int up_cat(dev_model *dm, m3_err *e, m3g_mat *fused, m3g_mat *const *views,
                  const m3_mat *const *src, int n)
{
    memset(fused, 0, sizeof *fused);
    int rows = 0, all_bf16 = 1, all_f32 = 1;
    for (int i = 0; i < n; i++) {
        if (!src[i]->data || src[i]->cols != src[0]->cols)
            return 0;
        rows += src[i]->rows;
        all_bf16 &= src[i]->dtype == M3_BF16;
        all_f32 &= src[i]->dtype == M3_F32;
    }
    const size_t cols = (size_t)src[0]->cols, esz = all_bf16 ? 2 : 4;
    char *d = NULL;
    if (dev_malloc(dm, (void **)&d, (size_t)rows * cols * esz, e))
        return -1;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const size_t ne = (size_t)src[i]->rows * cols;
        if (all_bf16 || all_f32) {
            if (M3G_HIP(e, hipMemcpy(d + off * esz, src[i]->data, ne * esz, hipMemcpyHostToDevice)))
                return -1;
        } else {
            float *tmp = (float *)malloc(ne * sizeof(float));
            if (!tmp)
                return m3_fail(e, "out of host memory widening %zu weights to fp32", ne);
            for (size_t x = 0; x < ne; x++)
                tmp[x] = m3_load_f32(src[i]->data, src[i]->dtype, x);
            const int bad =
                M3G_HIP(e, hipMemcpy(d + off * esz, tmp, ne * esz, hipMemcpyHostToDevice));
            free(tmp);
            if (bad)
                return -1;
        }
        uploaded(dm, ne * m3_dtype_size(src[i]->dtype));
        views[i]->data = d + off * esz;
        views[i]->rows = src[i]->rows;
        views[i]->cols = (int)cols;
        views[i]->dtype = all_bf16 ? M3G_BF16 : M3G_F32;
        off += ne;
    }
    fused->data = d;
    fused->rows = rows;
    fused->cols = (int)cols;
    fused->dtype = all_bf16 ? M3G_BF16 : M3G_F32;
    return 1;
}

static int up_vec(dev_model *dm, m3_err *e, const void **out, int *dt, const m3_vec *v)
{
    *out = NULL;
    *dt = M3G_F32;
    if (!v->data)
        return 0;
    *out = upload(dm, e, v->data, v->dtype, (size_t)v->n, dt);
    return *out ? 0 : -1;
}

/* E expert views → one contiguous device array; all widened to fp32 unless
 * every view is bf16. */
static int up_experts(dev_model *dm, m3_err *e, const void **out, int *dt, const m3_mat *views,
                      int E)
{
    const size_t per = (size_t)views[0].rows * (size_t)views[0].cols;
    int all_bf16 = 1;
    for (int x = 0; x < E; x++)
        all_bf16 &= views[x].dtype == M3_BF16;
    const size_t esz = all_bf16 ? 2 : 4;
    char *d = NULL;
    if (dev_malloc(dm, (void **)&d, per * (size_t)E * esz, e))
        return -1;
    float *tmp = all_bf16 ? NULL : (float *)malloc(per * sizeof(float));
    if (!all_bf16 && !tmp)
        return m3_fail(e, "out of host memory widening %zu expert weights to fp32", per);
    for (int x = 0; x < E; x++) {
        const void *src = views[x].data;
        if (!all_bf16) {
            for (size_t i = 0; i < per; i++)
                tmp[i] = m3_load_f32(views[x].data, views[x].dtype, i);
            src = tmp;
        }
        if (M3G_HIP(e,
                    hipMemcpy(d + (size_t)x * per * esz, src, per * esz, hipMemcpyHostToDevice))) {
            free(tmp);
            return -1;
        }
        uploaded(dm, per * m3_dtype_size(views[x].dtype));
    }
    free(tmp);
    *out = d;
    *dt = all_bf16 ? M3G_BF16 : M3G_F32;
    return 0;
}

static int dev_model_upload_layers(dev_model *dm, const m3_model *m, m3_err *e);

int dev_model_upload(dev_model *dm, const m3_model *m, m3_progress *pg, m3_err *e)
{
    m3_progress_task(pg, "weight upload", M3_UNIT_BYTES, upload_bytes(m));
    memset(dm, 0, sizeof *dm);
    dm->pg = pg;
    const int rc = dev_model_upload_layers(dm, m, e);
    dm->pg = NULL;
    m3_progress_end(pg);
    return rc;
}

/* The layers, the head and the final norm (dev_model_upload without the progress task). */
static int dev_model_upload_layers(dev_model *dm, const m3_model *m, m3_err *e)
{
    const m3_text_config *c = &m->cfg.text;
    dm->layers = (dev_layer *)calloc((size_t)c->num_layers, sizeof(dev_layer));
    if (!dm->layers)
        return m3_fail(e, "out of host memory for %d layers", c->num_layers);
    for (int l = 0; l < c->num_layers; l++) {
        if (dm->pg)
            m3_progress_stage(dm->pg, "layer", l, c->num_layers);
        const m3_layer_weights *w = &m->w.layers[l];
        dev_layer *d = &dm->layers[l];
        if (up_vec(dm, e, &d->in_norm, &d->in_norm_dt, &w->input_norm) ||
            up_vec(dm, e, &d->post_norm, &d->post_norm_dt, &w->post_norm) ||
            up_vec(dm, e, &d->q_norm, &d->q_norm_dt, &w->q_norm) ||
            up_vec(dm, e, &d->k_norm, &d->k_norm_dt, &w->k_norm) || up_mat(dm, e, &d->o, &w->o))
            return -1;
        { /* q, k, v (+ index q, k on sparse layers) as one fused weight */
            const m3_mat *src[5] = {&w->q, &w->k, &w->v, &w->index_q, &w->index_k};
            m3g_mat *const dst[5] = {&d->q, &d->k, &d->v, &d->iq, &d->ik};
            const int nf = c->layer_sparse[l] ? 5 : 3;
            const int f = up_cat(dm, e, &d->qkv, dst, src, nf);
            if (f < 0)
                return -1;
            d->nqkv = f ? nf : 0;
            if (!f && (up_mat(dm, e, &d->q, &w->q) || up_mat(dm, e, &d->k, &w->k) ||
                       up_mat(dm, e, &d->v, &w->v) ||
                       (c->layer_sparse[l] && (up_mat(dm, e, &d->iq, &w->index_q) ||
                                               up_mat(dm, e, &d->ik, &w->index_k)))))
                return -1;
        }
        if (c->layer_sparse[l] &&
            (up_vec(dm, e, &d->iq_norm, &d->iq_norm_dt, &w->index_q_norm) ||
             up_vec(dm, e, &d->ik_norm, &d->ik_norm_dt, &w->index_k_norm)))
            return -1;
        if (c->layer_moe[l]) {
            if (up_mat(dm, e, &d->router, &w->router) ||
                up_vec(dm, e, &d->rbias, &d->rbias_dt, &w->router_bias) ||
                up_experts(dm, e, &d->eg, &d->edt, w->exp_gate, c->num_experts) ||
                up_experts(dm, e, &d->eu, &d->edt, w->exp_up, c->num_experts) ||
                up_experts(dm, e, &d->ed, &d->edt, w->exp_down, c->num_experts) ||
                up_mat(dm, e, &d->sd, &w->sh_down))
                return -1;
            /* shared gate + up as one [gate; up] weight (SwiGLU GEMV) */
            const m3_mat *src[2] = {&w->sh_gate, &w->sh_up};
            m3g_mat *const dst[2] = {&d->sg, &d->su};
            const int f = w->sh_gate.rows == w->sh_up.rows &&
                                  w->sh_gate.rows == c->shared_intermediate_size
                              ? up_cat(dm, e, &d->sgu, dst, src, 2)
                              : 0;
            if (f < 0 ||
                (!f && (up_mat(dm, e, &d->sg, &w->sh_gate) || up_mat(dm, e, &d->su, &w->sh_up))))
                return -1;
        } else if (up_mat(dm, e, &d->gate, &w->mlp_gate) || up_mat(dm, e, &d->up, &w->mlp_up) ||
                   up_mat(dm, e, &d->down, &w->mlp_down)) {
            return -1;
        }
    }
    if (up_mat(dm, e, &dm->lm_head, &m->w.lm_head) ||
        up_vec(dm, e, &dm->final_norm, &dm->final_norm_dt, &m->w.final_norm))
        return -1;
    return 0;
}
