/* m3-gpu.cu — the M3 text forward on the GPU (HIP API; nvcc through
 * gpu/hip_compat.h), with the CLI subset and dump names of bin/m3-ref so
 * bin/m3-conform can judge its dumps.
 *
 *   m3-gpu forward  --model DIR --tokens IDS [--tokens IDS]... [--teacher-forced GOLDEN]
 *                   (with m3-ref forward's --dtype, --dump, vision, --quiet and config options)
 *   m3-gpu vision-case --case DIR --dump OUT.safetensors
 *   m3-gpu generate (m3-ref generate's options; several --tokens / --prompt batch)
 * Exit status: 0 success, 1 model or run error, 2 bad command line.
 *
 * Spec: M3-MODEL-*, M3-DUMP-* (names, shapes, metadata as m3-ref),
 * M3-NUM-MODE-1, M3-NUM-BF16-2 (rounding points in the kernels,
 * gpu/kernels/kernels.h), M3-MSA-CACHE-1 (paged caches, page == MSA block),
 * M3-EAGLE-VERIFY-1/2 (generate --draft through ref/speculative.c).
 *
 * Design: the checkpoint loads through libm3.a and is uploaded as stored
 * (q/k/v(+index) and the shared gate/up as one concatenated matrix each);
 * embeddings and RoPE tables on the host. A batch context holds one cache region
 * per sequence; gpu_step_batch stacks every sequence's rows for linears,
 * norms, router/MoE and lm_head and runs cache writes, indexer, selection
 * and attention per sequence. Teacher forcing feeds each layer the golden
 * layers.L.input and runs the head on its own last output. generate samples
 * with the reference sampler; vision inputs go through gpu/vision.h. The weight
 * upload reports to a progress line (ref/progress.h); every command ends
 * with a summary line (wall, peak RSS) unless --quiet.
 *
 * Known differences: in bf16 a batch of more than 8 rows takes the GEMM and
 * may differ from the single-prompt run by a bf16 step. Not done: chunked
 * prefill, batches with vision or --draft, graph capture of decode, full-M3
 * memory (all weights are uploaded). Checks: docs/performance.md.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

extern "C" {
#include "genconfig.h"
#include "model.h"
#include "rope.h"
#include "sampling.h"
#include "speculative.h"
#include "progress.h"
#include "prompt.h"
#include "tokenizer.h"
#include "tokens.h"
}


#include "hip_compat.h"
#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "vision.h" /* the vision tower and --image/--pixels front end */
#include "drafter.h" /* the Eagle3 drafter (generate --draft) */

#define EXIT_RUN 1
#define EXIT_USAGE 2

/* hipError_t check inside functions that return int and use `goto fail`. */
#define CK(call)                                                                       \
    do {                                                                               \
        hipError_t ck_ = (call);                                                       \
        if (ck_ != hipSuccess) {                                                       \
            fprintf(stderr, "m3-gpu: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
                    hipGetErrorString(ck_));                                           \
            goto fail;                                                                 \
        }                                                                              \
    } while (0)

/* ---- device weights ------------------------------------------------------ */

typedef struct dev_layer {
    m3g_mat q, k, v, o, iq, ik, gate, up, down, router, sg, su, sd;
    /* fused weights: qkv = [q; k; v (; index_q; index_k)] with nqkv
     * segments (0: not fused), sgu = [sh_gate; sh_up]; the views above
     * point into them */
    m3g_mat qkv, sgu;
    int nqkv;
    const void *in_norm, *post_norm, *q_norm, *k_norm, *iq_norm, *ik_norm, *rbias;
    int in_norm_dt, post_norm_dt, q_norm_dt, k_norm_dt, iq_norm_dt, ik_norm_dt, rbias_dt;
    /* experts, contiguous [E, rows, cols] each, one dtype */
    const void *eg, *eu, *ed;
    int edt;
} dev_layer;

typedef struct dev_model {
    dev_layer *layers;
    m3g_mat lm_head;
    const void *final_norm;
    int final_norm_dt;
    void **allocs; /* every hipMalloc, freed by dev_model_free */
    int nallocs, capallocs;
    m3_progress *pg; /* during dev_model_upload: host bytes uploaded so far */
} dev_model;

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
            for (int e = 0; e < c->num_experts; e++)
                b += mat_bytes(&w->exp_gate[e]) + mat_bytes(&w->exp_up[e]) +
                     mat_bytes(&w->exp_down[e]);
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

static int track(dev_model *dm, void *p)
{
    if (dm->nallocs == dm->capallocs) {
        int cap = dm->capallocs ? 2 * dm->capallocs : 256;
        void **n = (void **)realloc(dm->allocs, (size_t)cap * sizeof *n);
        if (!n)
            return -1;
        dm->allocs = n;
        dm->capallocs = cap;
    }
    dm->allocs[dm->nallocs++] = p;
    return 0;
}

static void dev_model_free(dev_model *dm)
{
    for (int i = 0; i < dm->nallocs; i++)
        (void)hipFree(dm->allocs[i]);
    free(dm->allocs);
    free(dm->layers);
    memset(dm, 0, sizeof *dm);
}

/* Upload n elements stored as dt at src; fp32 and bf16 stay as they are,
 * anything else is widened to fp32 (exact). *out_dt gets M3G_F32/M3G_BF16. */
static void *upload(dev_model *dm, const void *src, m3_dtype dt, size_t n, int *out_dt)
{
    void *d = NULL;
    if (dt == M3_BF16 || dt == M3_F32) {
        size_t bytes = n * m3_dtype_size(dt);
        if (hipMalloc(&d, bytes) != hipSuccess || track(dm, d) != 0)
            return NULL;
        if (hipMemcpy(d, src, bytes, hipMemcpyHostToDevice) != hipSuccess)
            return NULL;
        uploaded(dm, bytes);
        *out_dt = dt == M3_BF16 ? M3G_BF16 : M3G_F32;
        return d;
    }
    float *tmp = (float *)malloc(n * sizeof(float));
    if (!tmp)
        return NULL;
    for (size_t i = 0; i < n; i++)
        tmp[i] = m3_load_f32(src, dt, i);
    if (hipMalloc(&d, n * sizeof(float)) != hipSuccess || track(dm, d) != 0 ||
        hipMemcpy(d, tmp, n * sizeof(float), hipMemcpyHostToDevice) != hipSuccess)
        d = NULL;
    free(tmp);
    uploaded(dm, n * m3_dtype_size(dt));
    *out_dt = M3G_F32;
    return d;
}

static int up_mat(dev_model *dm, m3g_mat *out, const m3_mat *m)
{
    memset(out, 0, sizeof *out);
    if (!m->data)
        return 0;
    out->rows = m->rows;
    out->cols = m->cols;
    out->data = upload(dm, m->data, m->dtype, (size_t)m->rows * (size_t)m->cols, &out->dtype);
    return out->data ? 0 : -1;
}

/* n matrices with equal cols concatenated by rows into one device buffer
 * (fused GEMVs, m3g_linear_multi); views[i] point into it. All bf16 or all
 * fp32: raw copies; otherwise all widened to fp32 one matrix at a time (as
 * upload). Returns 1 when fused, 0 when a matrix is missing or cols differ
 * (the caller uploads them separately), -1 on an allocation/copy error. */
static int up_cat(dev_model *dm, m3g_mat *fused, m3g_mat *const *views, const m3_mat *const *src,
                  int n)
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
    if (hipMalloc((void **)&d, (size_t)rows * cols * esz) != hipSuccess || track(dm, d) != 0)
        return -1;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const size_t ne = (size_t)src[i]->rows * cols;
        if (all_bf16 || all_f32) {
            if (hipMemcpy(d + off * esz, src[i]->data, ne * esz, hipMemcpyHostToDevice) !=
                hipSuccess)
                return -1;
        } else {
            float *tmp = (float *)malloc(ne * sizeof(float));
            if (!tmp)
                return -1;
            for (size_t e = 0; e < ne; e++)
                tmp[e] = m3_load_f32(src[i]->data, src[i]->dtype, e);
            hipError_t he = hipMemcpy(d + off * esz, tmp, ne * esz, hipMemcpyHostToDevice);
            free(tmp);
            if (he != hipSuccess)
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

static int up_vec(dev_model *dm, const void **out, int *dt, const m3_vec *v)
{
    *out = NULL;
    *dt = M3G_F32;
    if (!v->data)
        return 0;
    *out = upload(dm, v->data, v->dtype, (size_t)v->n, dt);
    return *out ? 0 : -1;
}

/* E expert views → one contiguous device array; all widened to fp32 unless
 * every view is bf16. */
static int up_experts(dev_model *dm, const void **out, int *dt, const m3_mat *views, int E)
{
    const size_t per = (size_t)views[0].rows * (size_t)views[0].cols;
    int all_bf16 = 1;
    for (int e = 0; e < E; e++)
        all_bf16 &= views[e].dtype == M3_BF16;
    const size_t esz = all_bf16 ? 2 : 4;
    char *d = NULL;
    if (hipMalloc((void **)&d, per * (size_t)E * esz) != hipSuccess || track(dm, d) != 0)
        return -1;
    float *tmp = all_bf16 ? NULL : (float *)malloc(per * sizeof(float));
    if (!all_bf16 && !tmp)
        return -1;
    for (int e = 0; e < E; e++) {
        const void *src = views[e].data;
        if (!all_bf16) {
            for (size_t i = 0; i < per; i++)
                tmp[i] = m3_load_f32(views[e].data, views[e].dtype, i);
            src = tmp;
        }
        if (hipMemcpy(d + (size_t)e * per * esz, src, per * esz, hipMemcpyHostToDevice) !=
            hipSuccess) {
            free(tmp);
            return -1;
        }
        uploaded(dm, per * m3_dtype_size(views[e].dtype));
    }
    free(tmp);
    *out = d;
    *dt = all_bf16 ? M3G_BF16 : M3G_F32;
    return 0;
}

static int dev_model_upload_layers(dev_model *dm, const m3_model *m);

/* Upload every text weight, reported to pg as a task (layer, bytes of the
 * total, MiB/s, ETA; ref/progress.h) that ends with the upload. */
static int dev_model_upload(dev_model *dm, const m3_model *m, m3_progress *pg)
{
    m3_progress_task(pg, "weight upload", M3_UNIT_BYTES, upload_bytes(m));
    memset(dm, 0, sizeof *dm);
    dm->pg = pg;
    const int rc = dev_model_upload_layers(dm, m);
    dm->pg = NULL;
    m3_progress_end(pg);
    return rc;
}

static int dev_model_upload_layers(dev_model *dm, const m3_model *m)
{
    const m3_text_config *c = &m->cfg.text;
    dm->layers = (dev_layer *)calloc((size_t)c->num_layers, sizeof(dev_layer));
    if (!dm->layers)
        return -1;
    for (int l = 0; l < c->num_layers; l++) {
        if (dm->pg)
            m3_progress_stage(dm->pg, "layer", l, c->num_layers);
        const m3_layer_weights *w = &m->w.layers[l];
        dev_layer *d = &dm->layers[l];
        if (up_vec(dm, &d->in_norm, &d->in_norm_dt, &w->input_norm) ||
            up_vec(dm, &d->post_norm, &d->post_norm_dt, &w->post_norm) ||
            up_vec(dm, &d->q_norm, &d->q_norm_dt, &w->q_norm) ||
            up_vec(dm, &d->k_norm, &d->k_norm_dt, &w->k_norm) || up_mat(dm, &d->o, &w->o))
            return -1;
        { /* q, k, v (+ index q, k on sparse layers) as one fused weight */
            const m3_mat *src[5] = {&w->q, &w->k, &w->v, &w->index_q, &w->index_k};
            m3g_mat *const dst[5] = {&d->q, &d->k, &d->v, &d->iq, &d->ik};
            const int nf = c->layer_sparse[l] ? 5 : 3;
            const int f = up_cat(dm, &d->qkv, dst, src, nf);
            if (f < 0)
                return -1;
            d->nqkv = f ? nf : 0;
            if (!f && (up_mat(dm, &d->q, &w->q) || up_mat(dm, &d->k, &w->k) ||
                       up_mat(dm, &d->v, &w->v) ||
                       (c->layer_sparse[l] && (up_mat(dm, &d->iq, &w->index_q) ||
                                               up_mat(dm, &d->ik, &w->index_k)))))
                return -1;
        }
        if (c->layer_sparse[l] &&
            (up_vec(dm, &d->iq_norm, &d->iq_norm_dt, &w->index_q_norm) ||
             up_vec(dm, &d->ik_norm, &d->ik_norm_dt, &w->index_k_norm)))
            return -1;
        if (c->layer_moe[l]) {
            if (up_mat(dm, &d->router, &w->router) ||
                up_vec(dm, &d->rbias, &d->rbias_dt, &w->router_bias) ||
                up_experts(dm, &d->eg, &d->edt, w->exp_gate, c->num_experts) ||
                up_experts(dm, &d->eu, &d->edt, w->exp_up, c->num_experts) ||
                up_experts(dm, &d->ed, &d->edt, w->exp_down, c->num_experts) ||
                up_mat(dm, &d->sd, &w->sh_down))
                return -1;
            /* shared gate + up as one [gate; up] weight (SwiGLU GEMV) */
            const m3_mat *src[2] = {&w->sh_gate, &w->sh_up};
            m3g_mat *const dst[2] = {&d->sg, &d->su};
            const int f = w->sh_gate.rows == w->sh_up.rows &&
                                  w->sh_gate.rows == c->shared_intermediate_size
                              ? up_cat(dm, &d->sgu, dst, src, 2)
                              : 0;
            if (f < 0 || (!f && (up_mat(dm, &d->sg, &w->sh_gate) || up_mat(dm, &d->su, &w->sh_up))))
                return -1;
        } else if (up_mat(dm, &d->gate, &w->mlp_gate) || up_mat(dm, &d->up, &w->mlp_up) ||
                   up_mat(dm, &d->down, &w->mlp_down)) {
            return -1;
        }
    }
    if (up_mat(dm, &dm->lm_head, &m->w.lm_head) ||
        up_vec(dm, &dm->final_norm, &dm->final_norm_dt, &m->w.final_norm))
        return -1;
    return 0;
}

/* ---- dump staging ----------------------------------------------------------- */

/* Copy a device tensor to the host and add it to the writer. */
static int dump_dev(m3_st_writer *w, const char *name, m3_dtype dt, int ndim, int64_t d0,
                    int64_t d1, int64_t d2, const void *dev, hipStream_t st)
{
    int64_t shape[3] = {d0, d1, d2};
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    void *h = malloc(n * 4);
    m3_err e;
    if (!h) {
        fprintf(stderr, "m3-gpu: dump: cannot allocate %s\n", name);
        return -1;
    }
    if (hipStreamSynchronize(st) != hipSuccess ||
        hipMemcpy(h, dev, n * 4, hipMemcpyDeviceToHost) != hipSuccess) {
        fprintf(stderr, "m3-gpu: dump: copying %s back failed\n", name);
        free(h);
        return -1;
    }
    int rc = m3_st_writer_add(w, name, dt, ndim, shape, h, &e);
    if (rc != 0)
        fprintf(stderr, "m3-gpu: dump: %s\n", e.msg);
    free(h);
    return rc;
}

/* ---- the forward -------------------------------------------------------- */

/* A run on the device: activation buffers for up to tmax rows per call and
 * per-layer caches for nseq sequences of cap positions each. Paging: region
 * s owns pages s*npages .. (s+1)*npages-1 in order, so position p of the
 * sequence in region s lives in cache row s*npages*B + p (identity inside
 * a region; page == MSA block). Positions continue across calls (prefill at
 * pos0 = 0, then decode one token at a time), per region. */
typedef struct gpu_sess {
    const m3_model *m;
    dev_model *dm;
    m3g_blas *blas; /* may be NULL */
    hipStream_t st;
    int mode, tmax, cap, npages, nbmax; /* npages: per region */
    int nseq;                           /* cache regions (sequences of a batch) */
    float *h, *xn, *q, *kraw, *att, *tmp, *iq, *ikraw, *bs, *g, *u, *ye, *sh, *logits, *cos_t,
        *sin_t;
    int32_t *blk, *ridx, *pages;
    unsigned *ictr; /* m3g_msa_indexer tickets [N] (zeroed at allocation, left zero) */
    void *iws;      /* m3g_msa_indexer scratch */
    size_t iws_n;
    float *rw, *rscores;
    float **kc, **vc, **ikc; /* per layer */
    uint16_t **ik16;         /* per sparse layer: bf16 copy of its index-K cache (bf16 mode;
                                kept per layer because decode converts only the new rows) */
    unsigned *ikr;           /* [L][2] exponent range words of each ik16[l] (m3g_ik_range_*;
                                the indexer's FMA proof), NULL in fp32 mode */
    float *aws;              /* split attention workspace (NULL: per-row kernel) */
    size_t aws_n;
    uint16_t **kc16, **vc16; /* per layer: bf16 K/V caches (bf16 mode with hd % 8 == 0 and
                                hd <= 128; kc/vc are not allocated then), else NULL */
    float *vraw;             /* [tmax, nkv * hd] V projection before its bf16 cache write
                                (also in fp32 mode when nseq > 1: then copied per sequence) */
    void *sws;               /* m3g_attention_sk workspace (with kc16/vc16) */
    size_t sws_n;
    float *hbuf, *ct, *stb; /* host staging [tmax, H], [tmax, rd/2] x 2 */
    const m3g_vision_feats *vis; /* vision rows placed into the pos0-0 embeddings, or NULL */
    int msa_variant; /* m3g_msa_attention_prefill_tuned's variant (0: the default kernel) */
    float *eagle_aux;  /* NULL, or device [3, eagle_rows, H]: gpu_step_batch (one sequence)
                          copies the residual streams entering layers eagle_taps[j] of its
                          rows into rows 0.. of tap j (M3-EAGLE-TAP-1; generate --draft) */
    int eagle_rows, eagle_taps[3];
} gpu_sess;

static int dalloc(dev_model *dm, void **p, size_t bytes)
{
    if (bytes == 0)
        bytes = 4;
    if (hipMalloc(p, bytes) != hipSuccess || track(dm, *p) != 0)
        return -1;
    return hipMemset(*p, 0, bytes) == hipSuccess ? 0 : -1;
}

static int eagle_tap(int L, int l, int *slot)
{
    int taps[3] = {2 < L - 1 ? 2 : L - 1, L / 2, L - 3 > 0 ? L - 3 : 0}, hit = 0;
    for (int i = 0; i < 3; i++) /* ascending, duplicates kept (M3-DUMP-4) */
        for (int j = i + 1; j < 3; j++)
            if (taps[j] < taps[i]) {
                int t = taps[i];
                taps[i] = taps[j];
                taps[j] = t;
            }
    for (int i = 0; i < 3; i++)
        if (taps[i] == l)
            slot[hit++] = i;
    return hit;
}

static void gpu_sess_free(gpu_sess *s)
{
    /* device buffers are tracked in dm and freed with it */
    free(s->kc);
    free(s->vc);
    free(s->ikc);
    free(s->ik16);
    free(s->kc16);
    free(s->vc16);
    free(s->hbuf);
    free(s->ct);
    free(s->stb);
    memset(s, 0, sizeof *s);
}

/* Allocate a batch context for calls of at most tmax rows in all and nseq cache
 * regions (sequences) of cap positions each. */
static int gpu_sess_init_n(gpu_sess *b, const m3_model *m, dev_model *dm, int tmax, int cap,
                           int nseq, int mode, m3g_blas *blas, hipStream_t st)
{
    const m3_text_config *c = &m->cfg.text;
    const int H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    const int V = c->vocab_size, L = c->num_layers, rd = c->rotary_dim;
    const int G = c->index_n_heads, ihd = c->index_head_dim, K = c->index_topk;
    const int B = c->index_block_size > 0 ? c->index_block_size : 128;
    const int kx = c->num_experts_per_tok, E = c->num_experts, I = c->intermediate_size;
    const int Is = c->shared_intermediate_size, Id = c->dense_intermediate_size;
    const size_t N = (size_t)tmax;
    int Imax = I * (kx > 0 ? kx : 1);
    Imax = Imax > Id ? Imax : Id;
    Imax = Imax > Is ? Imax : Is;
    memset(b, 0, sizeof *b);
    b->m = m;
    b->dm = dm;
    b->blas = blas;
    b->st = st;
    b->mode = mode;
    b->tmax = tmax;
    b->cap = cap;
    b->npages = (cap + B - 1) / B;
    b->nbmax = b->npages;
    b->nseq = nseq;
    const int npages = b->npages, nbmax = b->nbmax;
    const size_t cpages = (size_t)nseq * npages; /* pages of all regions */
    int32_t *pt = (int32_t *)malloc(cpages * sizeof(int32_t));
    b->hbuf = (float *)malloc(N * (size_t)H * sizeof(float));
    b->ct = (float *)malloc(N * (size_t)(rd / 2 + 1) * sizeof(float));
    b->stb = (float *)malloc(N * (size_t)(rd / 2 + 1) * sizeof(float));
    b->kc = (float **)calloc((size_t)L, sizeof(float *));
    b->vc = (float **)calloc((size_t)L, sizeof(float *));
    b->ikc = (float **)calloc((size_t)L, sizeof(float *));
    b->ik16 = (uint16_t **)calloc((size_t)L, sizeof(uint16_t *));
    if (!pt || !b->hbuf || !b->ct || !b->stb || !b->kc || !b->vc || !b->ikc || !b->ik16) {
        fprintf(stderr, "m3-gpu: out of host memory for %d tokens\n", tmax);
        free(pt);
        return -1;
    }
    for (size_t p = 0; p < cpages; p++)
        pt[p] = (int32_t)p; /* region s: pages s*npages.. in order */
#define DA(ptr, n, T_) dalloc(dm, (void **)&(ptr), (size_t)(n) * sizeof(T_))
    if (DA(b->h, N * H, float) || DA(b->xn, N * H, float) || DA(b->q, N * nh * hd, float) ||
        DA(b->kraw, N * nkv * hd, float) || DA(b->att, N * nh * hd, float) ||
        DA(b->tmp, N * H, float) || DA(b->iq, N * (G > 0 ? G : 1) * ihd, float) ||
        DA(b->ikraw, N * ihd, float) || DA(b->bs, N * (G > 0 ? G : 1) * nbmax, float) ||
        DA(b->blk, N * (G > 0 ? G : 1) * (K > 0 ? K : 1), int32_t) ||
        DA(b->ictr, N, unsigned) ||
        DA(b->iws, (b->iws_n = m3g_msa_indexer_ws(N, G > 0 ? G : 1, nbmax)), char) ||
        DA(b->g, N * Imax, float) || DA(b->u, N * Imax, float) ||
        DA(b->ye, N * (kx > 0 ? kx : 1) * H, float) || DA(b->sh, N * H, float) ||
        DA(b->logits, N * V, float) || DA(b->cos_t, N * (rd / 2), float) ||
        DA(b->sin_t, N * (rd / 2), float) || DA(b->ridx, N * (kx > 0 ? kx : 1), int32_t) ||
        DA(b->rw, N * (kx > 0 ? kx : 1), float) || DA(b->rscores, N * (E > 0 ? E : 1), float) ||
        DA(b->pages, cpages, int32_t)) {
        fprintf(stderr, "m3-gpu: device allocation failed for %d tokens\n", tmax);
        free(pt);
        return -1;
    }
    /* bf16 mode: bf16 K/V caches (exact: they hold rounded values, M3-NUM-BF16-2
     * item 10) read by m3g_attention_sk; fp32 mode keeps the fp32 caches */
    const int kv16 = mode == 1 && hd % 8 == 0 && hd <= 128;
    if (kv16) {
        b->kc16 = (uint16_t **)calloc((size_t)L, sizeof(uint16_t *));
        b->vc16 = (uint16_t **)calloc((size_t)L, sizeof(uint16_t *));
        size_t wn = m3g_attention_sk_ws(B, 0, tmax, nh, nkv, hd, NULL, 0, M3G_BF16), w1;
        const size_t w3[3] = {G > 0 ? m3g_attention_sk_ws(B, 0, tmax, nh, nkv, hd, pt, K, M3G_BF16) : 0,
                              m3g_attention_sk_ws(B, cap - 1, 1, nh, nkv, hd, NULL, 0, M3G_BF16),
                              G > 0 ? m3g_attention_sk_ws(B, cap - 1, 1, nh, nkv, hd, pt, K, M3G_BF16) : 0};
        for (int i = 0; i < 3; i++)
            wn = w3[i] > wn ? w3[i] : wn;
        w1 = w3[1] > w3[2] ? w3[1] : w3[2]; /* one decode row: the least that works */
        if (wn > ((size_t)1 << 30)) /* the prefill then runs in row chunks */
            wn = w1 > ((size_t)1 << 30) ? w1 : ((size_t)1 << 30);
        if (!b->kc16 || !b->vc16 || DA(b->vraw, N * nkv * hd, float) || DA(b->sws, wn, char)) {
            fprintf(stderr, "m3-gpu: allocation failed for the bf16 KV caches\n");
            free(pt);
            return -1;
        }
        b->sws_n = wn;
    }
    if (!b->vraw && nseq > 1 && DA(b->vraw, N * nkv * hd, float)) { /* batch V staging */
        fprintf(stderr, "m3-gpu: device allocation failed for %d tokens\n", tmax);
        free(pt);
        return -1;
    }
    for (int l = 0; l < L; l++)
        if ((!kv16 && DA(b->kc[l], cpages * B * nkv * hd, float)) ||
            (!kv16 && DA(b->vc[l], cpages * B * nkv * hd, float)) ||
            (kv16 && DA(b->kc16[l], cpages * B * nkv * hd, uint16_t)) ||
            (kv16 && DA(b->vc16[l], cpages * B * nkv * hd, uint16_t)) ||
            (c->layer_sparse[l] && DA(b->ikc[l], cpages * B * ihd, float)) ||
            (c->layer_sparse[l] && mode == 1 && DA(b->ik16[l], cpages * B * ihd, uint16_t))) {
            fprintf(stderr, "m3-gpu: device allocation failed for the caches\n");
            free(pt);
            return -1;
        }
    if (mode == 1) { /* the empty exponent range for every layer's bf16 index-K cache */
        unsigned *hr = (unsigned *)malloc(2 * sizeof(unsigned) * (size_t)L);
        int bad = !hr || DA(b->ikr, 2 * L, unsigned);
        for (int l = 0; !bad && l < L; l++)
            hr[2 * l] = 0x1ffu, hr[2 * l + 1] = 0; /* M3G_IKR_NONE, 0: see m3g_ik_range_reset */
        bad = bad || hipMemcpy(b->ikr, hr, 2 * sizeof(unsigned) * (size_t)L,
                               hipMemcpyHostToDevice) != hipSuccess;
        free(hr);
        if (bad) {
            fprintf(stderr, "m3-gpu: device allocation failed for the caches\n");
            free(pt);
            return -1;
        }
    }
    /* the split-key
     * attention workspace when it fits in 1 GiB (else the per-row kernel);
     * sized for the prefill (pos0 0, tmax rows) and the last decode step */
    if (!kv16) {
        size_t wn = 0;
        const size_t w4[4] = {
            m3g_attention_split_ws(B, 0, tmax, nh, hd, NULL, 0),
            G > 0 ? m3g_attention_split_ws(B, 0, tmax, nh, hd, pt, K) : 0,
            m3g_attention_split_ws(B, cap - 1, 1, nh, hd, NULL, 0),
            G > 0 ? m3g_attention_split_ws(B, cap - 1, 1, nh, hd, pt, K) : 0};
        for (int i = 0; i < 4; i++)
            wn = w4[i] > wn ? w4[i] : wn;
        if (wn * sizeof(float) <= ((size_t)1 << 30) && DA(b->aws, wn, float) == 0)
            b->aws_n = wn;
        else
            b->aws = NULL;
    }
#undef DA
    hipError_t e4 = hipMemcpy(b->pages, pt, cpages * sizeof(int32_t), hipMemcpyHostToDevice);
    free(pt);
    if (e4 != hipSuccess) {
        fprintf(stderr, "m3-gpu: uploading the page table failed: %s\n", hipGetErrorString(e4));
        return -1;
    }
    return 0;
}

/* One call's sequences: n sequences of T[s] rows each (ids[s]) at positions
 * pos0[s] .. pos0[s]+T[s]-1 of cache region slot[s] (< the context's nseq).
 * Their rows are stacked in sequence order: the linear layers, norms and
 * MoE see all rows at once, attention / indexer / selection run per
 * sequence over its own caches. dump: NULL, or one writer (or NULL) per
 * sequence, each receiving that sequence's rows under the m3-ref names.
 * tf (teacher forcing, n == 1 and pos0 0 only): NULL, or L host arrays
 * [T, H]: tf[l] replaces the residual stream entering layer l (the golden
 * layers.{l}.input); each layer then runs from its golden input and its
 * dumped tensors carry its own error only (the head runs on the last
 * layer's own output). */
typedef struct gpu_batch {
    int n;
    const int32_t *const *ids;
    const int *T, *pos0, *slot;
    m3_st_writer *const *dump;
    const float *const *tf;
} gpu_batch;

/* Rows [off[s], off[s] + T[s]) of the device tensor dev [rows, cols] (4-byte
 * elements) into each sequence's dump writer. */
static int dump_seqs(const gpu_batch *bt, const int *off, const char *name, m3_dtype dt,
                     int64_t cols, const void *dev, hipStream_t st)
{
    for (int s = 0; s < bt->n; s++)
        if (bt->dump[s] && dump_dev(bt->dump[s], name, dt, 2, bt->T[s], cols, 0,
                                    (const char *)dev + (size_t)off[s] * (size_t)cols * 4, st))
            return -1;
    return 0;
}

/* The view of batch context b for one sequence of a batch: row buffers start at
 * its first row (row offset off), the page table at its cache region. */
static gpu_sess seq_view(const gpu_sess *b, int off, int slot)
{
    const m3_text_config *c = &b->m->cfg.text;
    const size_t o = (size_t)off;
    const int G = c->index_n_heads > 0 ? c->index_n_heads : 1;
    const int K = c->index_topk > 0 ? c->index_topk : 1;
    gpu_sess v = *b;
    v.q += o * c->num_heads * c->head_dim;
    v.att += o * c->num_heads * c->head_dim;
    v.kraw += o * c->num_kv_heads * c->head_dim;
    if (v.vraw)
        v.vraw += o * c->num_kv_heads * c->head_dim;
    v.iq += o * G * c->index_head_dim;
    v.ikraw += o * c->index_head_dim;
    v.bs += o * G * b->nbmax;
    v.blk += o * G * K;
    v.ictr += o;
    v.cos_t += o * (c->rotary_dim / 2);
    v.sin_t += o * (c->rotary_dim / 2);
    v.pages += (size_t)slot * b->npages;
    return v;
}

/* The common part of an attention prologue for the T rows of one sequence
 * at positions pos0.. (b: its seq_view: page table and RoPE tables); no jobs. */
static void seq_prologue_init(const gpu_sess *b, int T, int pos0, m3g_prologue *p)
{
    const m3_text_config *c = &b->m->cfg.text;
    memset(p, 0, sizeof *p);
    p->T = T;
    p->B = c->index_block_size > 0 ? c->index_block_size : 128;
    p->rd = c->rotary_dim;
    p->mode = b->mode;
    p->pos0 = pos0;
    p->page_table = b->pages;
    p->cos_t = b->cos_t;
    p->sin_t = b->sin_t;
    p->eps = c->rms_norm_eps;
}

/* Append layer l's cache writes for that sequence to p (P0: the cache row
 * of position pos0, identity paging inside the sequence's region): V into
 * its cache (bf16 conversion, or the fp32 copy of the staged rows; none
 * when the projection wrote it there), QK-norm + RoPE of K into the paged K
 * cache, and on sparse layers of index K into the paged index-K cache and
 * its bf16 copy (with the range words). Needs 3 free job slots. */
static void seq_cache_jobs(const gpu_sess *b, const dev_layer *d, int l, size_t P0,
                           m3g_prologue *p)
{
    const m3_text_config *c = &b->m->cfg.text;
    const int nkv = c->num_kv_heads, hd = c->head_dim, ihd = c->index_head_dim;
    m3g_pro_job *j = &p->job[p->njobs];
    if (b->vraw) { /* V rows staged: bf16 cache rows, or copied into this region */
        memset(j, 0, sizeof *j);
        j->src = b->vraw;
        j->nheads = nkv, j->hd = hd;
        if (b->vc16)
            j->dst16 = b->vc16[l] + P0 * nkv * hd;
        else
            j->dst = b->vc[l] + P0 * nkv * hd;
        j++;
    }
    memset(j, 0, sizeof *j); /* K: the bf16 cache written by the RoPE epilogue, or fp32 */
    j->src = b->kraw;
    j->w = d->k_norm, j->w_dtype = d->k_norm_dt;
    j->nheads = nkv, j->hd = hd;
    if (b->kc16)
        j->dst16 = b->kc16[l], j->paged = 2;
    else
        j->dst = b->kc[l], j->paged = 1;
    j++;
    if (c->layer_sparse[l]) {
        memset(j, 0, sizeof *j);
        j->src = b->ikraw;
        j->w = d->ik_norm, j->w_dtype = d->ik_norm_dt;
        j->nheads = 1, j->hd = ihd;
        j->dst = b->ikc[l], j->paged = 1;
        if (b->ik16[l]) { /* bf16 mode: the indexer streams a bf16 copy (same values) */
            j->dst16 = b->ik16[l] + P0 * ihd;
            j->rng = b->ikr + 2 * l;
        }
        j++;
    }
    p->njobs = (int)(j - p->job);
}

/* The per-sequence part of layer l's attention for the T rows of one
 * sequence at positions pos0.. (b: its seq_view; P0: the cache row of
 * position pos0, identity paging inside the sequence's region): V / K /
 * index-K cache writes (one m3g_attn_prologue launch; skipped when
 * cache_done: the caller's prologue did them), MSA indexer + selection,
 * attention into b->att. q / kraw / vraw / iq / ikraw hold the projections
 * (q and iq with QK-norm and RoPE already applied). */
static int seq_attention(gpu_sess *b, const dev_layer *d, int l, int T, int pos0, size_t P0,
                         int cache_done, m3_st_writer *dump)
{
    const m3_text_config *c = &b->m->cfg.text;
    hipStream_t st = b->st;
    const int mode = b->mode;
    const int nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    const int G = c->index_n_heads, ihd = c->index_head_dim, K = c->index_topk;
    const int B = c->index_block_size > 0 ? c->index_block_size : 128;
    const int sparse = c->layer_sparse[l] != 0;
    const int nbmax = (pos0 + T - 1) / B + 1;
    char name[160];

    if (!cache_done) { /* V / K / index-K cache writes in one launch */
        m3g_prologue pro;
        seq_prologue_init(b, T, pos0, &pro);
        seq_cache_jobs(b, d, l, P0, &pro);
        CK(m3g_attn_prologue(&pro, st));
    }
    {
        const int32_t *blocks = NULL;
        if (sparse) {
            /* block scores + golden-order top-K in one launch (falls back to the two
             * launchers for shapes the fused kernel does not take) */
            CK(m3g_msa_indexer_ex(b->blk, b->bs, b->iq,
                                  b->ik16[l] ? (const void *)b->ik16[l] : (const void *)b->ikc[l],
                                  b->ik16[l] ? M3G_BF16 : M3G_F32, b->pages, B, pos0, T, G, ihd,
                                  nbmax, K, c->index_local_blocks, c->index_init_blocks, b->ictr,
                                  b->iws, b->iws_n, b->ik16[l] ? b->ikr + 2 * l : NULL, 0, st));
            blocks = b->blk;
            if (dump) {
                snprintf(name, sizeof name, "layers.%d.attn.block_indices", l);
                if (dump_dev(dump, name, M3_I32, 3, G, T, K, b->blk, st))
                    goto fail;
            }
        }
        if (sparse && mode == 1 && T >= 16 && hd <= 128) /* sparse prefill, bf16: msa_attention.cu
                                                (tensor cores on NVIDIA, else scalar) */
            CK(m3g_msa_attention_prefill_tuned(
                b->att, b->q, b->kc16 ? (const void *)b->kc16[l] : (const void *)b->kc[l],
                b->kc16 ? (const void *)b->vc16[l] : (const void *)b->vc[l],
                b->kc16 ? M3G_BF16 : M3G_F32, b->pages, B, pos0, T, nh, nkv, hd, blocks, K, mode,
                b->msa_variant, st));
        else if (b->kc16) /* bf16 caches: m3g_attention_sk (one-launch cluster kernel for sparse
                             decode on NVIDIA, else two launches; row chunks if ws is short) */
            CK(m3g_attention_sk(b->att, b->q, b->kc16[l], b->vc16[l], M3G_BF16, b->pages, B, pos0,
                                T, nh, nkv, hd, blocks, sparse ? K : 0, mode, b->sws, b->sws_n,
                                st));
        else if (b->aws && m3g_attention_split_ws(B, pos0, T, nh, hd, blocks, sparse ? K : 0) <=
                               b->aws_n)
            CK(m3g_attention_split(b->att, b->q, b->kc[l], b->vc[l], b->pages, B, pos0, T, nh,
                                   nkv, hd, blocks, sparse ? K : 0, mode, b->aws, b->aws_n, st));
        else
            CK(m3g_attention(b->att, b->q, b->kc[l], b->vc[l], b->pages, B, pos0, T, nh, nkv, hd,
                             blocks, sparse ? K : 0, mode, st));
    }
    return 0;
fail:
    return -1;
}

/* Run the sequences of bt through the model (see gpu_batch), writing their
 * K/V (and index-K) rows into their cache regions. logits_host gets the
 * [sum T, V] logits of all rows in sequence order, or when last_only one row
 * per sequence [n, V] (lm_head on those rows alone). Dumps and teacher
 * forcing only for a single sequence at pos0 0. */
static int gpu_step_batch(gpu_sess *b, const gpu_batch *bt, float *logits_host, int last_only)
{
    const m3_model *m = b->m;
    dev_model *dm = b->dm;
    m3g_blas *blas = b->blas;
    hipStream_t st = b->st;
    const int mode = b->mode;
    const m3_text_config *c = &m->cfg.text;
    const int H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    const int V = c->vocab_size, L = c->num_layers, rd = c->rotary_dim;
    const int G = c->index_n_heads, ihd = c->index_head_dim;
    const int B = c->index_block_size > 0 ? c->index_block_size : 128;
    const int kx = c->num_experts_per_tok, E = c->num_experts, I = c->intermediate_size;
    const int Is = c->shared_intermediate_size;
    const float eps = c->rms_norm_eps;
    const int ns = bt->n;
    float *hbuf = b->hbuf, *ct = b->ct, *stb = b->stb;
    char name[160];
    float *aux = NULL;
    int *off = (int *)calloc((size_t)(ns > 0 ? ns : 1) + 1, sizeof(int));
    int rc = -1, T = 0, dump = 0;
    if (!off) {
        fprintf(stderr, "m3-gpu: out of host memory\n");
        return -1;
    }
    for (int s = 0; s < ns; s++) {
        const int Ts = bt->T[s], p0 = bt->pos0[s];
        if (Ts < 1 || Ts > b->tmax - T || p0 < 0 || p0 + Ts > b->cap || bt->slot[s] < 0 ||
            bt->slot[s] >= b->nseq || (bt->tf && (p0 != 0 || ns != 1))) {
            fprintf(stderr, "m3-gpu: sequence %d (%d tokens at position %d, region %d) does not "
                            "fit the batch context (%d rows, %d positions, %d sequences)\n", s, Ts, p0,
                    bt->slot[s], b->tmax, b->cap, b->nseq);
            free(off);
            return -1;
        }
        off[s] = T;
        T += Ts;
        dump |= bt->dump && bt->dump[s];
    }
    off[ns] = T;
    const size_t N = (size_t)T;
    if (ns < 1) {
        free(off);
        return 0;
    }
    if (b->eagle_aux && (ns != 1 || T > b->eagle_rows)) {
        fprintf(stderr, "m3-gpu: Eagle3 taps of %d sequences / %d rows (one sequence of at most "
                        "%d rows)\n", ns, T, b->eagle_rows);
        free(off);
        return -1;
    }
    /* embeddings and RoPE tables on the host (exact, as ref) */
    for (int s = 0; s < ns; s++)
        for (int t = 0; t < bt->T[s]; t++) {
            const int32_t id = bt->ids[s][t];
            const size_t r = (size_t)off[s] + t;
            if (id < 0 || id >= V) {
                fprintf(stderr, "m3-gpu: token %d at index %d%s is out of range [0, %d) of "
                                "%s/config.json\n", id, bt->pos0[s] + t,
                        ns > 1 ? " of a batched sequence" : "", V, m->dir);
                goto fail;
            }
            for (int i = 0; i < H; i++)
                hbuf[r * H + i] = m3_round1(m3_mat_at(&m->w.embed, id, i), (m3_mode)mode);
            m3_rope_table(ct + r * (rd / 2), stb + r * (rd / 2), bt->pos0[s] + t, rd,
                          c->rope_theta, (m3_mode)mode);
        }
    CK(hipMemcpy(b->h, hbuf, N * H * sizeof(float), hipMemcpyHostToDevice));
    /* image/video features replace the placeholder rows (M3-EMB-3) */
    if (b->vis && ns == 1 && bt->pos0[0] == 0)
        CK(m3g_vision_place(b->vis, b->h, H, st));
    CK(hipMemcpy(b->cos_t, ct, N * (rd / 2) * sizeof(float), hipMemcpyHostToDevice));
    CK(hipMemcpy(b->sin_t, stb, N * (rd / 2) * sizeof(float), hipMemcpyHostToDevice));
    if (dump) {
        aux = (float *)calloc(N * 3 * (size_t)H, sizeof(float));
        if (!aux || dump_seqs(bt, off, "embeddings", M3_F32, H, b->h, st) != 0)
            goto fail;
    }

    for (int l = 0; l < L; l++) {
        const dev_layer *d = &dm->layers[l];
        const int sparse = c->layer_sparse[l] != 0;
        if (bt->tf) { /* teacher forcing: this layer starts from its golden input */
            if (l > 0) { /* the previous layer's own output, for its dump */
                CK(m3g_residual_rmsnorm(b->h, b->tmp, b->xn, d->in_norm, d->in_norm_dt, T, H,
                                        eps, mode, st));
                snprintf(name, sizeof name, "layers.%d.output", l - 1);
                if (dump && dump_seqs(bt, off, name, M3_F32, H, b->h, st))
                    goto fail;
            }
            CK(hipMemcpy(b->h, bt->tf[l], N * H * sizeof(float), hipMemcpyHostToDevice));
        }
        /* residual of the previous layer's FFN fused with this layer's input norm */
        CK(m3g_residual_rmsnorm(b->h, l > 0 && !bt->tf ? b->tmp : NULL, b->xn, d->in_norm,
                                d->in_norm_dt, T, H, eps, mode, st));
        if (b->eagle_aux) /* Eagle3 taps: the residual stream entering layer l */
            for (int j = 0; j < 3; j++)
                if (b->eagle_taps[j] == l)
                    CK(hipMemcpyAsync(b->eagle_aux + (size_t)j * b->eagle_rows * H, b->h,
                                      N * H * sizeof(float), hipMemcpyDeviceToDevice, st));
        if (dump) {
            if (l > 0 && !bt->tf) {
                snprintf(name, sizeof name, "layers.%d.output", l - 1);
                if (dump_seqs(bt, off, name, M3_F32, H, b->h, st))
                    goto fail;
            }
            snprintf(name, sizeof name, "layers.%d.input", l);
            if (dump_seqs(bt, off, name, M3_F32, H, b->h, st))
                goto fail;
            snprintf(name, sizeof name, "layers.%d.attn_norm", l);
            if (dump_seqs(bt, off, name, M3_F32, H, b->xn, st))
                goto fail;
            int slot[3], nt = eagle_tap(L, l, slot);
            if (nt > 0) {
                float *hh = (float *)malloc(N * H * sizeof(float));
                if (!hh || hipMemcpy(hh, b->h, N * H * sizeof(float), hipMemcpyDeviceToHost) !=
                               hipSuccess) {
                    free(hh);
                    goto fail;
                }
                for (int j = 0; j < nt; j++)
                    for (size_t t = 0; t < N; t++)
                        memcpy(aux + (t * 3 + slot[j]) * H, hh + t * H, sizeof(float) * H);
                free(hh);
            }
        }

        /* attention: projections of all rows (V into its cache when one
         * sequence runs at pos0 in fp32 mode, else staged in vraw) */
        const size_t P0 = (size_t)bt->slot[0] * b->npages * B + (size_t)bt->pos0[0];
        if (d->nqkv) { /* one pass over [q; k; v (; index q; index k)] */
            const m3g_seg seg[5] = {{b->q, nh * hd, d->q.rows},
                                    {b->kraw, nkv * hd, d->k.rows},
                                    {b->vraw ? b->vraw : b->vc[l] + P0 * nkv * hd, nkv * hd,
                                     d->v.rows},
                                    {b->iq, G * ihd, d->iq.rows},
                                    {b->ikraw, ihd, d->ik.rows}};
            CK(m3g_linear_multi(b->xn, d->qkv, seg, d->nqkv, T, mode, blas, st));
        } else {
            CK(m3g_linear(b->q, nh * hd, b->xn, d->q, T, mode, blas, st));
            CK(m3g_linear(b->kraw, nkv * hd, b->xn, d->k, T, mode, blas, st));
            CK(m3g_linear(b->vraw ? b->vraw : b->vc[l] + P0 * nkv * hd, nkv * hd, b->xn, d->v, T,
                          mode, blas, st));
        }
        if (sparse && d->nqkv != 5) { /* else already done by the fused projection */
            CK(m3g_linear(b->iq, G * ihd, b->xn, d->iq, T, mode, blas, st));
            CK(m3g_linear(b->ikraw, ihd, b->xn, d->ik, T, mode, blas, st));
        }
        /* QK-norm + RoPE of the queries (and index queries) of all rows (per-row
         * tables) in one launch (m3g_attn_prologue); with one sequence the same
         * launch also writes its V / K / index-K cache rows */
        {
            gpu_sess sv0 = seq_view(b, 0, bt->slot[0]);
            m3g_prologue pro;
            seq_prologue_init(ns == 1 ? &sv0 : b, T, bt->pos0[0], &pro);
            m3g_pro_job *j = &pro.job[0];
            memset(j, 0, 2 * sizeof *j);
            j[0].src = j[0].dst = b->q;
            j[0].w = d->q_norm, j[0].w_dtype = d->q_norm_dt;
            j[0].nheads = nh, j[0].hd = hd;
            pro.njobs = 1;
            if (sparse) {
                j[1].src = j[1].dst = b->iq;
                j[1].w = d->iq_norm, j[1].w_dtype = d->iq_norm_dt;
                j[1].nheads = G, j[1].hd = ihd;
                pro.njobs = 2;
            }
            if (ns == 1) {
                const size_t P0s = (size_t)bt->slot[0] * b->npages * B + (size_t)bt->pos0[0];
                seq_cache_jobs(&sv0, d, l, P0s, &pro);
            }
            CK(m3g_attn_prologue(&pro, st));
        }
        /* per sequence: cache writes (batches), indexer + selection, attention */
        for (int s = 0; s < ns; s++) {
            gpu_sess sv = seq_view(b, off[s], bt->slot[s]);
            const size_t P0s = (size_t)bt->slot[s] * b->npages * B + (size_t)bt->pos0[s];
            if (seq_attention(&sv, d, l, bt->T[s], bt->pos0[s], P0s, ns == 1,
                              bt->dump ? bt->dump[s] : NULL))
                goto fail;
        }
        CK(m3g_linear(b->tmp, H, b->att, d->o, T, mode, blas, st));
        CK(m3g_residual_rmsnorm(b->h, b->tmp, b->xn, d->post_norm, d->post_norm_dt, T, H, eps,
                                mode, st));
        if (dump) {
            const char *sfx[3] = {"attn.output", "post_attn", "ffn_norm"};
            const float *src[3] = {b->tmp, b->h, b->xn};
            for (int i = 0; i < 3; i++) {
                snprintf(name, sizeof name, "layers.%d.%s", l, sfx[i]);
                if (dump_seqs(bt, off, name, M3_F32, H, src[i], st))
                    goto fail;
            }
        }

        /* feed-forward into b->tmp */
        if (c->layer_moe[l]) {
            CK(m3g_router(b->ridx, b->rw, b->rscores, b->xn, d->router,
                          c->use_routing_bias ? d->rbias : NULL, d->rbias_dt, T, kx, st));
            const int64_t es = (int64_t)I * H;
            /* gate + up + SwiGLU of the routed experts in one launch */
            CK(m3g_gemv_grouped_swiglu(b->g, b->xn, H, 0, d->eg, d->eu, es, d->edt, I, H,
                                       b->ridx, T, kx, c->swiglu_alpha, c->swiglu_limit,
                                       c->swiglu_beta, mode, st));
            CK(m3g_gemv_grouped(b->ye, b->g, (int64_t)kx * I, I, d->ed, es, d->edt, H, I, b->ridx,
                                T, kx, mode, st));
            const float *shared = NULL;
            if (c->n_shared_experts > 0 && d->sg.data) {
                if (d->sgu.data) { /* gate + up + SwiGLU in one GEMV (decode) */
                    CK(m3g_linear_swiglu(b->g, Is, b->u, b->xn, d->sgu, T, c->swiglu_alpha,
                                         c->swiglu_limit, c->swiglu_beta, mode, blas, st));
                } else {
                    CK(m3g_linear(b->g, Is, b->xn, d->sg, T, mode, blas, st));
                    CK(m3g_linear(b->u, Is, b->xn, d->su, T, mode, blas, st));
                    CK(m3g_swiglu(b->g, b->g, b->u, (int64_t)N * Is, c->swiglu_alpha,
                                  c->swiglu_limit, c->swiglu_beta, mode, st));
                }
                CK(m3g_linear(b->sh, H, b->g, d->sd, T, mode, blas, st));
                shared = b->sh;
            }
            CK(m3g_moe_combine(b->tmp, b->ye, b->rw, shared, T, kx, H, c->routed_scaling_factor,
                               mode, st));
            if (dump) {
                snprintf(name, sizeof name, "layers.%d.moe.topk_index", l);
                if (dump_seqs(bt, off, name, M3_I32, kx, b->ridx, st))
                    goto fail;
                snprintf(name, sizeof name, "layers.%d.moe.topk_weight", l);
                if (dump_seqs(bt, off, name, M3_F32, kx, b->rw, st))
                    goto fail;
                snprintf(name, sizeof name, "layers.%d.moe.scores", l);
                if (dump_seqs(bt, off, name, M3_F32, E, b->rscores, st))
                    goto fail;
            }
        } else {
            const int Il = d->gate.rows;
            CK(m3g_linear(b->g, Il, b->xn, d->gate, T, mode, blas, st));
            CK(m3g_linear(b->u, Il, b->xn, d->up, T, mode, blas, st));
            CK(m3g_swiglu(b->g, b->g, b->u, (int64_t)N * Il, c->swiglu_alpha, c->swiglu_limit,
                          c->swiglu_beta, mode, st));
            CK(m3g_linear(b->tmp, H, b->g, d->down, T, mode, blas, st));
        }
        if (dump) {
            snprintf(name, sizeof name, "layers.%d.mlp.output", l);
            if (dump_seqs(bt, off, name, M3_F32, H, b->tmp, st))
                goto fail;
        }
    }

    /* last residual fused with the final norm (teacher forcing too: the head
     * runs on this forward's own last output, which the dump holds, so the
     * dump says what the head's input was; M3-TOL-8) */
    CK(m3g_residual_rmsnorm(b->h, b->tmp, b->xn, dm->final_norm, dm->final_norm_dt, T, H, eps,
                            mode, st));
    /* lm_head: all rows, or the last row of each sequence */
    if (last_only) {
        const float *xl = b->xn + (N - 1) * H;
        if (ns > 1) { /* gather the last rows (b->tmp is free now) */
            for (int s = 0; s < ns; s++)
                CK(hipMemcpyAsync(b->tmp + (size_t)s * H, b->xn + ((size_t)off[s + 1] - 1) * H,
                                  H * sizeof(float), hipMemcpyDeviceToDevice, st));
            xl = b->tmp;
        }
        CK(m3g_linear(b->logits, V, xl, dm->lm_head, ns, mode, NULL, st));
        CK(hipStreamSynchronize(st));
        CK(hipMemcpy(logits_host, b->logits, (size_t)ns * V * sizeof(float),
                     hipMemcpyDeviceToHost));
    } else {
        CK(m3g_linear(b->logits, V, b->xn, dm->lm_head, T, mode, blas, st));
        CK(hipStreamSynchronize(st));
        CK(hipMemcpy(logits_host, b->logits, N * V * sizeof(float), hipMemcpyDeviceToHost));
    }
    if (dump) {
        snprintf(name, sizeof name, "layers.%d.output", L - 1);
        if (dump_seqs(bt, off, name, M3_F32, H, b->h, st) ||
            dump_seqs(bt, off, "final_norm", M3_F32, H, b->xn, st) ||
            dump_seqs(bt, off, "logits", M3_F32, V, b->logits, st))
            goto fail;
        for (int s = 0; s < ns; s++) {
            m3_err e;
            int64_t ashape[2] = {bt->T[s], 3 * (int64_t)H};
            if (bt->dump[s] && m3_st_writer_add(bt->dump[s], "eagle3.aux", M3_F32, 2, ashape,
                                                aux + (size_t)off[s] * 3 * H, &e) != 0) {
                fprintf(stderr, "m3-gpu: dump: %s\n", e.msg);
                goto fail;
            }
        }
    }
    rc = 0;
fail:
    free(aux);
    free(off);
    return rc;
}

/* Print " top5: id:logit ..." (the five largest of last [V], ties to the
 * lower id, as bin/m3-ref forward prints them) and a newline. */
static void print_top5(const float *last, int V)
{
    int32_t top[5];
    const int ntop = m3_top_ids(last, V, 5, top);
    printf(" top5:");
    for (int j = 0; j < ntop; j++)
        printf(" %d:%.6g", (int)top[j], last[top[j]]);
    printf("\n");
}

/* ---- CLI -------------------------------------------------------------------- */

static const char *USAGE =
    "usage: m3-gpu forward --model DIR --tokens IDS [--dtype fp32|bf16] [--dump OUT.safetensors]\n"
    "                      [--tokens IDS]... (a batch) | [--teacher-forced GOLDEN.safetensors]\n"
    "                      [--image FILE]... [--video F1,F2,... --fps R] [--pixels FILE]\n"
    "                      [--vision-joint] [--quiet] [--lenient-config]   (as bin/m3-ref forward)\n"
    "       m3-gpu vision-case --case DIR --dump OUT.safetensors   (vision component vectors)\n"
    "       m3-gpu generate --model DIR (--tokens IDS | --prompt TEXT)... [--max-new-tokens N]\n"
    "                       [--greedy | --temperature T --top-p P --top-k K --seed S]\n"
    "                       [--image FILE]... [--video F1,F2,... --fps R] [--pixels FILE]\n"
    "                       [--vision-joint]\n"
    "                       [--chat [--system TEXT] [--thinking adaptive|enabled|disabled]]\n"
    "                       [--print-ids] [--dtype fp32|bf16] [--quiet] [--lenient-config]\n"
    "                       [--draft DIR [--spec-tokens K]]\n"
    "forward: run the T token ids through the model on the GPU in one pass (positions\n"
    "0..T-1); print T and the top-5 of the last row; --dump writes the activations under the\n"
    "names of bin/m3-ref forward (spec/dump.md), to be judged by bin/m3-conform.\n"
    "--teacher-forced GOLDEN (one --tokens): layer l runs from GOLDEN's layers.{l}.input\n"
    "(layer 0: its embeddings when that is absent) instead of layer l-1's output (the final\n"
    "norm from the last layer's own output); GOLDEN: an m3-ref dump or a vector's\n"
    "expected.safetensors of the same ids. Each dumped layer then carries its own error only\n"
    "(judge with m3-conform check, plain or --teacher-forced).\n"
    "batches: several --tokens (generate: --tokens and/or --prompt) run together: linear\n"
    "layers, norms and MoE over the rows of all prompts in one launch each, attention and\n"
    "the MSA indexer per prompt over its own cache region. forward prints one line per\n"
    "prompt ('seq S: T=...'; S from 0 in command-line order) and --dump OUT writes one file\n"
    "per prompt: OUT with .S inserted before a final .safetensors, else appended\n"
    "(out.safetensors -> out.0.safetensors, out.1.safetensors, ...). generate prints one\n"
    "line per prompt, in order, when all are done. Each prompt's dump / ids equal its run\n"
    "alone (fp32: bitwise).\n"
    "generate: as bin/m3-ref generate (same options, defaults, eos and output): prefill on the\n"
    "GPU, then decode one token at a time over the device KV / index-K caches; the last\n"
    "logits row is copied to the host and chosen by the reference sampler (ref/sampling.h).\n"
    "--max-new-tokens defaults to 32; sampling defaults come from DIR/generation_config.json,\n"
    "else temperature 1.0, top_p 0.95, top_k 40; --print-ids prints only the generated ids,\n"
    "comma-separated. --chat renders every --prompt as the user turn of a conversation\n"
    "(--system, --thinking). --image/--video/--pixels take a single prompt, not a batch.\n"
    "Each option means what it means in 'bin/m3-ref generate --help'. --draft DIR\n"
    "[--spec-tokens K] (one token prompt): Eagle3 speculative decoding as bin/m3-ref (the same\n"
    "loop, ref/speculative.c, with the target and the drafter on the GPU; drafter in fp32;\n"
    "greedy output identical to plain decoding; statistics line on stderr at the end).\n"
    "Environment (developer knob): M3G_MSA_PREFILL_VARIANT=N (0..9, forward only) runs the bf16\n"
    "MSA prefill with that kernel variant (see gpu/kernels/kernels.h); 0 or unset: the default.\n"
    "See the header of gpu/m3-gpu.cu for what is complete.\n";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whole-string number parsers for the options; 0 ok, -1 bad. parse_f reads
 * a finite double and rounds it to float, as bin/m3-ref. */
static int parse_f(const char *s, float *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= -3.0e38 && v <= 3.0e38))
        return -1;
    *out = (float)v;
    return 0;
}

static int parse_i64(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    long long v = strtoll(s, &end, 10);
    if (*end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Print "m3-gpu CMD: MSG [V]" and the usage; returns EXIT_USAGE. */
static int usage_err(const char *cmd, const char *msg, const char *v)
{
    fprintf(stderr, "m3-gpu %s: %s%s%s\n%s", cmd, msg, v ? " " : "", v ? v : "", USAGE);
    return EXIT_USAGE;
}

static int gen_usage(const char *msg, const char *v)
{
    return usage_err("generate", msg, v);
}

/* The prompt options of forward and generate besides the ids, as bin/m3-ref
 * takes them: --image, --video, --fps, --pixels, --vision-joint and (generate)
 * --chat, --system, --thinking. ref/prompt.h judges the combination. */
typedef struct prompt_args {
    const char *img[64];
    m3g_vision_request vreq; /* image_paths points into img */
    m3_prompt_opts po;
} prompt_args;

static void prompt_args_init(prompt_args *p)
{
    memset(p, 0, sizeof *p);
    p->vreq.image_paths = p->img;
}

/* Take option a (v: the next argument, NULL when a is the last) when it is
 * one of p's options (the chat options only when chat is set). Returns the
 * number of arguments used (1: a flag, 2: with its value), 0 when a is none
 * of them, -1 after printing a usage error. */
static int take_prompt_opt(const char *cmd, int chat, const char *a, const char *v,
                           prompt_args *p)
{
    if (!strcmp(a, "--vision-joint")) {
        p->vreq.joint = p->po.joint = 1;
        return 1;
    }
    if (chat && !strcmp(a, "--chat")) {
        p->po.chat = 1;
        return 1;
    }
    if (strcmp(a, "--image") && strcmp(a, "--video") && strcmp(a, "--fps") &&
        strcmp(a, "--pixels") && !(chat && (!strcmp(a, "--system") || !strcmp(a, "--thinking"))))
        return 0;
    if (!v) {
        usage_err(cmd, "option needs a value:", a);
        return -1;
    }
    if (!strcmp(a, "--image")) {
        if (p->vreq.n_images == 64) {
            usage_err(cmd, "at most 64 --image options; one more at", v);
            return -1;
        }
        p->img[p->vreq.n_images++] = v;
    } else if (!strcmp(a, "--video")) {
        if (!*v) {
            usage_err(cmd, "--video: empty frame list", NULL);
            return -1;
        }
        p->vreq.video_frames = v;
    } else if (!strcmp(a, "--fps")) {
        float f;
        if (parse_f(v, &f) || !(f > 0.0f)) {
            usage_err(cmd, "--fps needs a number > 0, got", v);
            return -1;
        }
        p->vreq.fps = f;
        p->po.have_fps = 1;
    } else if (!strcmp(a, "--pixels")) {
        p->vreq.pixels_path = v;
    } else if (!strcmp(a, "--system")) {
        p->po.system = v;
    } else {
        p->po.thinking = v;
    }
    return 2;
}

/* After parsing: check p's combination (have_text: a --prompt was given);
 * 0, or -1 after printing a usage error. */
static int prompt_args_check(const char *cmd, prompt_args *p, int have_text)
{
    m3_err e;
    memset(&e, 0, sizeof e);
    p->po.have_text = have_text;
    p->po.n_images = p->vreq.n_images;
    p->po.video = p->vreq.video_frames;
    p->po.pixels = p->vreq.pixels_path;
    if (m3_prompt_check(&p->po, &e) == 0)
        return 0;
    usage_err(cmd, e.msg, NULL);
    return -1;
}

static int vision_requested(const prompt_args *p)
{
    return p->vreq.n_images > 0 || p->vreq.video_frames || p->vreq.pixels_path;
}

/* Check option a with value v against the valued options in names (NULL-
 * terminated; every other option was taken before): 0 when v may be read,
 * -1 after printing an unknown option, a missing value or a bad --dtype. */
static int valued_opt(const char *cmd, const char *a, const char *v, const char *const *names)
{
    int known = 0;
    for (int k = 0; names[k]; k++)
        known |= !strcmp(a, names[k]);
    if (!known) {
        fprintf(stderr, "m3-gpu %s: unknown option or argument '%s'\n%s", cmd, a, USAGE);
        return -1;
    }
    if (!v) {
        usage_err(cmd, "option needs a value:", a);
        return -1;
    }
    if (!strcmp(a, "--dtype") && strcmp(v, "fp32") && strcmp(v, "bf16")) {
        usage_err(cmd, "--dtype must be fp32 or bf16, got", v);
        return -1;
    }
    return 0;
}

/* M3G_MSA_PREFILL_VARIANT (developer knob, forward only): run the bf16 MSA
 * prefill with that variant of m3g_msa_attention_prefill_tuned, e.g. 6, the
 * one-pass kernel whose p rounding is FlashAttention's rather than ref's, to
 * see how m3-conform judges such a port (docs/performance.md). Unset: 0, the
 * default kernel. 0 ok, -1 after printing. */
static int msa_variant_env(int *variant)
{
    const char *v = getenv("M3G_MSA_PREFILL_VARIANT");
    *variant = 0;
    if (!v)
        return 0;
    char *end = NULL;
    const long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < 0 || x > 9) {
        fprintf(stderr, "m3-gpu: M3G_MSA_PREFILL_VARIANT must be an integer 0..9, got \"%s\"\n",
                v);
        return -1;
    }
    *variant = (int)x;
    return 0;
}

/* Open DIR as bin/m3-ref does (--lenient-config: unknown config.json keys
 * warn), printing the error or the warnings. 0 ok, -1 after printing. */
static int open_model(m3_model *m, const char *dir, int lenient)
{
    m3_err e;
    memset(&e, 0, sizeof e);
    const m3_model_opts mo = {lenient, 0};
    if (m3_model_open(m, dir, &mo, &e) != 0) {
        fprintf(stderr, "m3-gpu: %s\n", e.msg);
        return -1;
    }
    if (m->cfg.n_warnings > 0)
        fprintf(stderr, "warning: %s\n", m->cfg.warnings);
    if (m->w.ignored_mtp > 0)
        fprintf(stderr, "note: ignored %d mtp.* tensors\n", m->w.ignored_mtp);
    return 0;
}

/* --tokens IDS as bin/m3-ref reads it (ref/tokens.h: ids separated by
 * commas and/or blanks, each in [0, INT32_MAX]); -1 with the reason in e. */
static int parse_ids(const char *s, int32_t **out, int *n, m3_err *e)
{
    size_t cnt = 0;
    if (m3_parse_token_list(s, strlen(s), "--tokens", out, &cnt, e) != 0)
        return -1;
    *n = (int)cnt; /* cnt <= M3_TOKENS_MAX */
    return 0;
}

/* The dump path of sequence s of n: OUT itself when n == 1, else OUT with
 * ".s" inserted before a final ".safetensors" (else appended):
 * out.safetensors → out.0.safetensors, out.1.safetensors, ... */
static void seq_dump_path(char *buf, size_t cap, const char *out, int s, int n)
{
    const size_t len = strlen(out), sfx = strlen(".safetensors");
    if (n == 1)
        snprintf(buf, cap, "%s", out);
    else if (len > sfx && !strcmp(out + len - sfx, ".safetensors"))
        snprintf(buf, cap, "%.*s.%d.safetensors", (int)(len - sfx), out, s);
    else
        snprintf(buf, cap, "%s.%d", out, s);
}

/* The golden residual streams for teacher forcing from GOLDEN (an m3-ref
 * dump or a vector's expected.safetensors): tf[l] = layers.{l}.input for
 * l < L (layer 0: else embeddings), each [T, H] float widened to fp32.
 * Returns 0, or -1 after printing why. */
static int load_teacher(const char *path, int L, int T, int H, float **tf)
{
    m3_store *g = NULL;
    m3_err e;
    memset(&e, 0, sizeof e);
    if (m3_store_open(&g, path, &e) != 0) {
        fprintf(stderr, "m3-gpu forward: --teacher-forced: %s\n", e.msg);
        return -1;
    }
    int rc = 0;
    for (int l = 0; l < L && rc == 0; l++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%d.input", l);
        const m3_tensor *t = m3_store_get(g, name);
        if (!t && l == 0)
            t = m3_store_get(g, "embeddings");
        if (!t || t->ndim != 2 || t->shape[0] != T || t->shape[1] != H ||
            !(t->dtype == M3_F32 || t->dtype == M3_BF16 || t->dtype == M3_F16)) {
            fprintf(stderr, "m3-gpu forward: --teacher-forced %s: tensor \"%s\" %s (needs a "
                            "float [%d, %d] tensor: T tokens, hidden size)\n", path, name,
                    t ? "has the wrong shape or dtype" : "is missing", T, H);
            rc = -1;
            break;
        }
        tf[l] = (float *)malloc((size_t)T * H * sizeof(float));
        if (!tf[l]) {
            fprintf(stderr, "m3-gpu: out of host memory\n");
            rc = -1;
            break;
        }
        for (size_t i = 0; i < (size_t)T * H; i++)
            tf[l][i] = m3_load_f32(t->data, t->dtype, i);
    }
    m3_store_close(g);
    return rc;
}

/* forward for a batch of n >= 1 prompts run together (one batch context, one
 * cache region each), or one prompt teacher-forced from tf_path. Prints
 * each sequence's T and top-5 of its last row; dumps per sequence
 * (seq_dump_path). Returns the exit status. */
/* The forward command: n prompts (toks[s], comma-separated ids) run as one
 * batch (n == 1 is a batch of one), each dumped under the m3-ref names
 * (dumpp; OUT.S.safetensors when n > 1). tf_path: teacher forcing (n == 1).
 * vreq: the vision request of a single prompt, or NULL. lenient:
 * --lenient-config. */
static int forward_run(const char *dir, const char *const *toks, int n, int mode, int lenient,
                       const char *dumpp, const char *tf_path, const m3g_vision_request *vreq,
                       int quiet)
{
    m3_progress pg; /* the weight upload, then the summary line */
    m3_progress_init_stderr(&pg, "m3-gpu forward", quiet);
    int rc = EXIT_RUN, Ttot = 0, Tmax = 0, L = 0;
    int32_t **ids = (int32_t **)calloc((size_t)n, sizeof *ids);
    int *T = (int *)calloc((size_t)n, sizeof *T), *pos0 = (int *)calloc((size_t)n, sizeof *pos0);
    int *slot = (int *)calloc((size_t)n, sizeof *slot);
    m3_st_writer **w = (m3_st_writer **)calloc((size_t)n, sizeof *w);
    float **tf = NULL, *logits = NULL;
    m3_model m;
    m3_err e;
    dev_model dm;
    gpu_sess sess;
    int have_sess = 0;
    hipStream_t st = NULL;
    m3g_blas *blas = NULL;
    m3g_vision_feats vis;
    memset(&m, 0, sizeof m);
    memset(&dm, 0, sizeof dm);
    memset(&e, 0, sizeof e);
    memset(&vis, 0, sizeof vis);
    if (!ids || !T || !pos0 || !slot || !w) {
        fprintf(stderr, "m3-gpu: out of host memory\n");
        goto out;
    }
    for (int s = 0; s < n; s++) {
        if (parse_ids(toks[s], &ids[s], &T[s], &e) != 0) {
            rc = usage_err("forward", e.msg, NULL);
            goto out;
        }
        slot[s] = s;
    }
    if (open_model(&m, dir, lenient) != 0)
        goto out;
    L = m.cfg.text.num_layers;
    for (int s = 0; s < n && dumpp; s++)
        if (!(w[s] = m3_st_writer_new())) {
            fprintf(stderr, "m3-gpu: out of host memory\n");
            goto out;
        }
    if (hipStreamCreate(&st) != hipSuccess) {
        fprintf(stderr, "m3-gpu: no usable GPU (hipStreamCreate failed)\n");
        goto out;
    }
    if (dev_model_upload(&dm, &m, &pg) != 0) {
        fprintf(stderr, "m3-gpu: uploading the weights of %s failed (device memory?)\n", dir);
        goto out;
    }
    if (vreq) { /* vision tower on the device; the prompt grows by the placeholder runs */
        int32_t *ids2 = NULL;
        int64_t n2 = 0;
        if (m3g_vision_prepare(&m, vreq, ids[0], T[0], mode, NULL, st, w[0], &ids2, &n2, &vis,
                               &e)) {
            fprintf(stderr, "m3-gpu: %s\n", e.msg);
            goto out;
        }
        free(ids[0]);
        ids[0] = ids2;
        if (n2 <= 0 || n2 > INT32_MAX) {
            fprintf(stderr, "m3-gpu: the multimodal prompt has %lld positions\n", (long long)n2);
            goto out;
        }
        T[0] = (int)n2;
    }
    for (int s = 0; s < n; s++) {
        Tmax = T[s] > Tmax ? T[s] : Tmax;
        if (T[s] > INT32_MAX - Ttot) {
            fprintf(stderr, "m3-gpu forward: the prompts have too many tokens in all\n");
            goto out;
        }
        Ttot += T[s];
    }
    if (tf_path) {
        tf = (float **)calloc((size_t)L, sizeof *tf);
        if (!tf || load_teacher(tf_path, L, T[0], m.cfg.text.hidden_size, tf) != 0)
            goto out;
    }
    logits = (float *)malloc((size_t)Ttot * (size_t)m.cfg.text.vocab_size * sizeof(float));
    if (!logits) {
        fprintf(stderr, "m3-gpu: out of host memory\n");
        goto out;
    }
    /* vendor BLAS for prefill GEMMs only in bf16 mode (exact there: X is
     * already bf16); fp32 mode keeps the hand-written fp32 kernels */
    if (mode == 1 && Ttot > 8) {
        const m3_text_config *c = &m.cfg.text;
        size_t wmax = (size_t)c->hidden_size;
        const size_t cand[3] = {(size_t)c->num_heads * c->head_dim,
                                (size_t)c->dense_intermediate_size,
                                (size_t)c->shared_intermediate_size};
        for (int i = 0; i < 3; i++)
            wmax = cand[i] > wmax ? cand[i] : wmax;
        blas = m3g_blas_new(st, (size_t)Ttot * wmax); /* NULL: fallback kernels */
    }
    if (gpu_sess_init_n(&sess, &m, &dm, Ttot, Tmax, n, mode, blas, st) != 0)
        goto out;
    have_sess = 1;
    if (msa_variant_env(&sess.msa_variant) != 0)
        goto out;
    sess.vis = vis.n > 0 ? &vis : NULL; /* placed into sequence 0's embeddings */
    {
        const gpu_batch bt = {n, (const int32_t *const *)ids, T, pos0, slot,
                              dumpp ? w : NULL, (const float *const *)tf};
        if (gpu_step_batch(&sess, &bt, logits, 0) != 0)
            goto out;
    }
    for (int s = 0; s < n && dumpp; s++) {
        char buf[32], path[4200], bi[32];
        snprintf(buf, sizeof buf, "%d", T[s]);
        snprintf(bi, sizeof bi, "%d/%d", s, n);
        seq_dump_path(path, sizeof path, dumpp, s, n);
        if (m3_st_writer_meta(w[s], "m3.dump_version", "1", &e) != 0 ||
            m3_st_writer_meta(w[s], "m3.mode", mode ? "bf16" : "fp32", &e) != 0 ||
            m3_st_writer_meta(w[s], "m3.producer", "m3-gpu forward (" M3_GPU_VENDOR ")", &e) != 0 ||
            m3_st_writer_meta(w[s], "m3.T", buf, &e) != 0 ||
            (n > 1 && m3_st_writer_meta(w[s], "m3.batch", bi, &e) != 0) ||
            (tf_path && m3_st_writer_meta(w[s], "m3.teacher_forced", tf_path, &e) != 0) ||
            m3_st_writer_save(w[s], path, &e) != 0) {
            fprintf(stderr, "m3-gpu: %s\n", e.msg);
            goto out;
        }
    }
    for (int s = 0, r = 0; s < n; r += T[s], s++) {
        const int V = m.cfg.text.vocab_size;
        if (n > 1)
            printf("seq %d: ", s);
        printf("T=%d%s", T[s], tf_path ? " (teacher-forced)" : "");
        print_top5(logits + (size_t)(r + T[s] - 1) * V, V);
    }
    {
        char sum[96];
        snprintf(sum, sizeof sum, "%d prompt%s, %d tokens, %d layers", n, n > 1 ? "s" : "", Ttot, L);
        m3_progress_summary(&pg, sum);
    }
    rc = 0;
out:
    if (have_sess)
        gpu_sess_free(&sess);
    m3g_vision_feats_free(&vis);
    m3g_blas_free(blas);
    dev_model_free(&dm);
    if (st)
        (void)hipStreamDestroy(st);
    for (int s = 0; s < n; s++) {
        if (w)
            m3_st_writer_free(w[s]);
        if (ids)
            free(ids[s]);
    }
    for (int l = 0; tf && l < L; l++)
        free(tf[l]);
    free(tf);
    free(w);
    free(ids);
    free(T);
    free(pos0);
    free(slot);
    free(logits);
    m3_model_close(&m);
    return rc;
}

static int cmd_forward(int argc, char **argv)
{
    const char *dir = NULL, *dumpp = NULL, *tfp = NULL;
    const char *toksv[64]; /* every --tokens (a batch when more than one) */
    int ntoks = 0;
    int mode = 0, lenient = 0, quiet = 0;
    prompt_args pa; /* vision options as bin/m3-ref forward (gpu/vision.h) */
    prompt_args_init(&pa);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!strcmp(a, "--lenient-config")) {
            lenient = 1;
            continue;
        }
        if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            quiet = 1;
            continue;
        }
        const int took = take_prompt_opt("forward", 0, a, v, &pa);
        if (took < 0)
            return EXIT_USAGE;
        if (took > 0) {
            i += took - 1;
            continue;
        }
        static const char *const valued[] = {"--model", "--tokens", "--dump",
                                             "--teacher-forced", "--dtype", NULL};
        if (valued_opt("forward", a, v, valued) != 0)
            return EXIT_USAGE;
        i++;
        if (!strcmp(a, "--model"))
            dir = v;
        else if (!strcmp(a, "--tokens") && ntoks < 64)
            toksv[ntoks++] = v;
        else if (!strcmp(a, "--tokens"))
            return usage_err("forward", "at most 64 --tokens (prompts of a batch); one more:", v);
        else if (!strcmp(a, "--dump"))
            dumpp = v;
        else if (!strcmp(a, "--teacher-forced"))
            tfp = v;
        else
            mode = !strcmp(v, "bf16"); /* --dtype */
    }
    if (prompt_args_check("forward", &pa, 0) != 0)
        return EXIT_USAGE;
    const int vis_req = vision_requested(&pa);
    if (!dir || ntoks == 0) {
        fprintf(stderr, "m3-gpu forward: --model DIR and --tokens IDS (comma-separated "
                        "non-negative integers) are required\n%s", USAGE);
        return EXIT_USAGE;
    }
    if ((ntoks > 1 || tfp) && (vis_req || (tfp && ntoks != 1))) {
        fprintf(stderr, "m3-gpu forward: a batch (several --tokens) or --teacher-forced "
                        "takes no vision input, and --teacher-forced takes exactly one "
                        "--tokens\n%s", USAGE);
        return EXIT_USAGE;
    }
    return forward_run(dir, toksv, ntoks, mode, lenient, dumpp, tfp, vis_req ? &pa.vreq : NULL,
                       quiet);
}

/* Print generated token k of a sequence: its id (ids, or no tokenizer: comma-
 * or space-separated) or its text through the streaming decoder ds. */
static int emit_token(const m3_tokenizer *tz, m3_decode_stream *ds, int ids, long long k,
                      int32_t tok, m3_err *e)
{
    const char *txt;
    size_t n;
    if (ids || !tz) {
        printf("%s%d", k ? (ids ? "," : " ") : "", (int)tok);
        return 0;
    }
    if (m3_tokenizer_decode_stream(tz, ds, tok, &txt, &n, e) != 0)
        return -1;
    fwrite(txt, 1, n, stdout);
    return 0;
}

/* The options of a generate command, as cmd_generate parsed them. */
typedef struct gen_opts {
    const char *dir;
    const char *const *srcs; /* every --tokens / --prompt, in command-line order */
    const int *is_text;      /* srcs[s] is a --prompt text (else token ids) */
    int n;                   /* number of prompts: a batch when > 1 */
    int mode, greedy_flag, print_ids, lenient;
    int quiet; /* --quiet: no progress line, no summary */
    int have_temp, have_top_p, have_top_k, have_seed; /* the sampling flags given */
    float temp, top_p;
    long long top_k, seed, max_new;
    const m3_prompt_opts *po;       /* --chat / --system / --thinking for every --prompt */
    const m3g_vision_request *vreq; /* images / video / pixels of a single prompt, or NULL */
    const char *draft;              /* --draft DIR (Eagle3 speculative decoding), or NULL */
    long long spec_k;               /* --spec-tokens K (default 3) */
} gen_opts;

/* ---- generate --draft: Eagle3 speculative decoding ------------------------
 * The loop is ref/speculative.c's (m3_spec_run: drafting, sampling,
 * acceptance, rollback, statistics), over this backend: the target is
 * gpu_step_batch on one cache region (a verification of [last, d_1..d_K]
 * is one call of K + 1 rows at the next position, the multi-row step with
 * past the prefill and batches already use. fp32: its linear layers give
 * each row the bits of a decode row (ref's 8-partial order for any T);
 * norms (block tree sums) and attention / SwiGLU (device expf, split-key
 * softmax sums) keep the GPU's own per-row order, not ref's, as in plain
 * generate. bf16: K + 1 > 8 rows take the GEMM instead of the GEMV, which
 * may differ from a decode row by a bf16 step), with the Eagle3 taps
 * copied on the device (gpu_sess.eagle_aux); the drafter is gpu/drafter.h.
 * Rollback: the target and the drafter keep their lengths here; positions
 * past a length are rewritten by the next call before anything reads them
 * (attention, the indexer and block selection see keys <= the query's
 * position only; the bf16 index-K range words may keep a superset of the
 * range, which kernels.h allows). */
typedef struct gpu_spec {
    gpu_sess *sess;
    m3g_eagle3 *dr;
    float *aux; /* device [3, rows, H] */
    int rows;
    int64_t tlen; /* target positions cached */
} gpu_spec;

static int gs_target(void *ctx, const int32_t *toks, int n, float *logits, int n_logits, m3_err *e)
{
    gpu_spec *g = (gpu_spec *)ctx;
    if (n_logits != 1 && n_logits != n)
        return m3_fail(e, "m3-gpu: a target forward with logits of %d of its %d rows", n_logits, n);
    const int32_t *idp = toks;
    int T = n, p0 = (int)g->tlen, slot = 0;
    const gpu_batch bt = {1, &idp, &T, &p0, &slot, NULL, NULL};
    g->sess->eagle_aux = g->aux;
    g->sess->eagle_rows = g->rows;
    const int rc = gpu_step_batch(g->sess, &bt, logits, n_logits == 1 ? 1 : 0);
    g->sess->eagle_aux = NULL;
    if (rc != 0) /* gpu_step_batch printed why */
        return m3_fail(e, "the target forward of %d tokens at position %d failed", n, p0);
    g->tlen += n;
    return 0;
}

static int gs_seed(void *ctx, const int32_t *toks, int n, float *dlog, m3_err *e)
{
    gpu_spec *g = (gpu_spec *)ctx;
    return m3g_eagle3_seed(g->dr, g->aux, g->rows, toks, n, dlog, e);
}

static int gs_step(void *ctx, int32_t token, float *dlog, m3_err *e)
{
    return m3g_eagle3_step(((gpu_spec *)ctx)->dr, token, dlog, e);
}

static int64_t gs_len(void *ctx) { return ((gpu_spec *)ctx)->tlen; }

static void gs_truncate(void *ctx, int64_t tlen, int64_t dlen)
{
    gpu_spec *g = (gpu_spec *)ctx;
    if (tlen >= 0 && tlen < g->tlen)
        g->tlen = tlen;
    if (dlen >= 0)
        m3g_eagle3_truncate(g->dr, dlen);
}

/* generate --draft for one prompt ids [T] over the batch context (empty caches of
 * cap positions, rows >= max(T, K + 1)): open the drafter, run the loop,
 * print the ids / text and the statistics line as bin/m3-ref. 0 or EXIT_RUN
 * after printing. */
static int spec_generate(const gen_opts *go, const m3_model *m, dev_model *dm, gpu_sess *sess,
                         const int32_t *ids, int T, int cap, m3_sampler *sp,
                         const m3_gen_defaults *g, const m3_tokenizer *tokzr,
                         m3_decode_stream *ds, hipStream_t st)
{
    const m3_text_config *c = &m->cfg.text;
    const int V = c->vocab_size, H = c->hidden_size;
    const int64_t maxpos = c->max_position_embeddings;
    const int capped = maxpos > 0 && (int64_t)T + go->max_new > maxpos;
    long long n_max = go->max_new;
    if (capped && n_max > cap - T + 1) /* what plain decoding can reach */
        n_max = cap - T + 1;
    m3_err e;
    memset(&e, 0, sizeof e);
    m3_eagle3 d;
    memset(&d, 0, sizeof d);
    const m3_eagle3_opts dop = {go->lenient};
    m3g_eagle3 *dr = NULL;
    int32_t *out = (int32_t *)malloc((size_t)(n_max > 0 ? n_max : 1) * sizeof(int32_t));
    int n_out = 0, rc = EXIT_RUN;
    m3_spec_stats sst;
    memset(&sst, 0, sizeof sst);
    gpu_spec gs;
    memset(&gs, 0, sizeof gs);
    double t0 = now_s(), t_gen = 0.0;
    if (!out) {
        m3_fail(&e, "cannot allocate %lld output tokens", n_max);
        goto fail;
    }
    if (m3_eagle3_open(&d, go->draft, m, &dop, &e) != 0)
        goto fail;
    for (int i = 0; i < T; i++) /* as m3_spec_generate */
        if (ids[i] < 0 || ids[i] >= V) {
            m3_fail(&e, "token %d at index %d is out of range [0, %d)", (int)ids[i], i, V);
            goto fail;
        }
    gs.sess = sess;
    gs.rows = sess->tmax;
    if (dalloc(dm, (void **)&gs.aux, (size_t)3 * gs.rows * H * sizeof(float)) != 0) {
        m3_fail(&e, "device allocation failed for the Eagle3 taps [3, %d, %d]", gs.rows, H);
        goto fail;
    }
    memcpy(sess->eagle_taps, d.cfg.taps, sizeof sess->eagle_taps);
    dr = m3g_eagle3_new(&d, &m->w.lm_head, dm->lm_head, sess->tmax, cap, st, &e);
    if (!dr)
        goto fail;
    gs.dr = dr;
    if (n_max > 0) {
        const m3_spec_backend be = {&gs, gs_target, gs_seed, gs_step, gs_len, gs_truncate};
        m3_spec_opts so;
        memset(&so, 0, sizeof so);
        so.k = (int)go->spec_k;
        so.max_new_tokens = (int)n_max;
        so.eos = g->eos;
        so.n_eos = g->n_eos;
        if (m3_spec_run(&be, &d, V, ids, T, sp, &so, out, &n_out, &sst, &e) != 0)
            goto fail;
    }
    t_gen = now_s() - t0;
    {
        if (!go->print_ids && !tokzr)
            fprintf(stderr, "m3-gpu: %s has no usable tokenizer; printing token ids\n", go->dir);
        if (go->is_text[0] && tokzr && !go->print_ids) /* echo the prompt, as m3-ref */
            fwrite(go->srcs[0], 1, strlen(go->srcs[0]), stdout);
        int stop_eos = 0;
        for (int k = 0; k < n_out; k++) {
            if (emit_token(tokzr, ds, go->print_ids, k, out[k], &e) != 0) {
                printf("\n");
                goto fail;
            }
            for (int j = 0; j < g->n_eos; j++)
                stop_eos |= out[k] == g->eos[j];
        }
        fflush(stdout);
        fprintf(stderr,
                "m3-gpu: speculative (K %lld): %lld tokens in %lld target forwards (%.2f tokens "
                "per target forward); acceptance %.1f%% (%lld of %lld drafts); %.3f s (%.2f "
                "tokens/s)\n",
                go->spec_k, (long long)sst.generated, (long long)sst.target_forwards,
                sst.tokens_per_forward, 100.0 * sst.acceptance_rate, (long long)sst.accepted,
                (long long)sst.drafted, t_gen, t_gen > 0 ? (double)sst.generated / t_gen : 0.0);
        if (tokzr && !go->print_ids) {
            const char *txt;
            size_t txtlen;
            if (m3_decode_stream_flush(ds, &txt, &txtlen, &e) != 0)
                goto fail;
            fwrite(txt, 1, txtlen, stdout);
        }
        printf("\n");
        fflush(stdout);
        if (stop_eos)
            fprintf(stderr, "m3-gpu: stopped at end-of-sequence token\n");
        else if (n_out < go->max_new && capped)
            fprintf(stderr, "m3-gpu: stopped at the context limit (max_position_embeddings "
                            "%lld)\n", (long long)maxpos);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
out:
    m3g_eagle3_free(dr);
    m3_eagle3_close(&d);
    free(out);
    return rc;
}

/* The generate command: n prompts (srcs[s]: text when is_text[s], else ids)
 * prefilled as one batch, then decoded together one token per active
 * sequence per step. A single prompt (n == 1) streams its tokens as they
 * come; a batch prints each sequence on its own line at the end. A single
 * prompt may carry vision inputs (go->vreq): the tower runs first, the
 * prompt grows by the placeholder runs and the features are placed at the
 * prefill (gpu_step_batch, one sequence at pos0 0). */
static int generate_run(const gen_opts *go)
{
    m3_progress pg; /* the weight upload, then the summary line */
    m3_progress_init_stderr(&pg, "m3-gpu generate", go->quiet);
    const char *dir = go->dir;
    const char *const *srcs = go->srcs;
    const int *is_text = go->is_text;
    const int n = go->n, mode = go->mode, print_ids = go->print_ids;
    const long long max_new = go->max_new;
    int rc = EXIT_RUN, Ttot = 0, capmax = 0, nsp = 0, any_text = 0;
    int32_t **ids = (int32_t **)calloc((size_t)n, sizeof *ids);
    int32_t **out = (int32_t **)calloc((size_t)n, sizeof *out);
    int *T = (int *)calloc((size_t)n, sizeof *T), *len = (int *)calloc((size_t)n, sizeof *len);
    int *cap = (int *)calloc((size_t)n, sizeof *cap), *act = (int *)calloc((size_t)n, sizeof *act);
    int *p0 = (int *)calloc((size_t)n, sizeof *p0), *one = (int *)calloc((size_t)n, sizeof *one);
    int *done = (int *)calloc((size_t)n, sizeof *done);
    long long *produced = (long long *)calloc((size_t)n, sizeof *produced);
    int32_t *nxt = (int32_t *)calloc((size_t)n, sizeof *nxt);
    const int32_t **idp = (const int32_t **)calloc((size_t)n, sizeof *idp);
    m3_sampler *sp = (m3_sampler *)calloc((size_t)n, sizeof *sp);
    m3_decode_stream *ds = (m3_decode_stream *)calloc((size_t)n, sizeof *ds);
    const int streaming = n == 1;
    float *logits = NULL;
    m3_model m;
    m3_err e;
    dev_model dm;
    gpu_sess sess;
    int have_sess = 0, greedy = 0;
    hipStream_t st = NULL;
    m3_tokenizer *tokzr = NULL;
    m3g_vision_feats vis;
    memset(&m, 0, sizeof m);
    memset(&dm, 0, sizeof dm);
    memset(&e, 0, sizeof e);
    memset(&vis, 0, sizeof vis);
    if (!ids || !out || !T || !len || !cap || !act || !p0 || !one || !done || !produced || !nxt ||
        !idp || !sp || !ds) {
        fprintf(stderr, "m3-gpu: out of host memory\n");
        goto out;
    }
    if (go->draft && go->vreq) { /* as bin/m3-ref */
        fprintf(stderr, "m3-gpu generate: --draft works on token prompts only (no --image, "
                        "--video or --pixels)\n");
        goto out;
    }
    for (int s = 0; s < n; s++)
        m3_decode_stream_init(&ds[s], 0);
    for (int s = 0; s < n; s++)
        any_text |= is_text[s];
    if ((any_text || !print_ids) && m3_tokenizer_open(&tokzr, dir, &e) != 0) {
        tokzr = NULL;
        if (any_text) {
            fprintf(stderr, "m3-gpu generate: --prompt needs a tokenizer: %s\n", e.msg);
            goto out;
        }
    }
    for (int s = 0; s < n; s++) {
        if (is_text[s]) { /* plain or a chat turn, as bin/m3-ref (ref/prompt.h) */
            size_t count = 0;
            if (m3_prompt_encode(tokzr, srcs[s], go->po, &ids[s], &count, &e)) {
                if (n > 1)
                    m3_fail_prefix(&e, "prompt %d", s);
                fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
                goto out;
            }
            if (count > INT32_MAX / 2) {
                fprintf(stderr, "m3-gpu generate: prompt %d encodes to %zu tokens\n", s, count);
                goto out;
            }
            T[s] = (int)count;
        } else if (parse_ids(srcs[s], &ids[s], &T[s], &e) != 0) {
            rc = gen_usage(e.msg, NULL);
            goto out;
        }
        if (T[s] > INT32_MAX - Ttot) {
            fprintf(stderr, "m3-gpu generate: the prompts have too many tokens in all\n");
            goto out;
        }
        Ttot += T[s];
    }
    if (open_model(&m, dir, go->lenient) != 0)
        goto out;
    if (hipStreamCreate(&st) != hipSuccess) {
        fprintf(stderr, "m3-gpu: no usable GPU (hipStreamCreate failed)\n");
        goto out;
    }
    if (go->vreq) { /* the vision tower on the device; the prompt grows by the placeholder
                     * runs (video timestamps with the tokenizer of a --prompt, as m3-ref) */
        int32_t *ids2 = NULL;
        int64_t n2 = 0;
        if (m3g_vision_prepare(&m, go->vreq, ids[0], T[0], mode, is_text[0] ? tokzr : NULL, st,
                               NULL, &ids2, &n2, &vis, &e)) {
            fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
            goto out;
        }
        free(ids[0]);
        ids[0] = ids2;
        if (n2 <= 0 || n2 > INT32_MAX / 2) {
            fprintf(stderr, "m3-gpu generate: the multimodal prompt has %lld positions\n",
                    (long long)n2);
            goto out;
        }
        Ttot = T[0] = (int)n2;
    }
    {
        /* flags override generation_config.json, which overrides the defaults */
        m3_gen_defaults g = m3_gen_defaults_builtin(m.cfg.text.eos_token_id);
        m3_err ge = {{0}};
        if (m3_gen_config_load(dir, &g, &ge) != 0) {
            fprintf(stderr, "m3-gpu generate: %s\n", ge.msg);
            goto out;
        }
        const int flag_top_k = (int)go->top_k;
        m3_gen_apply_flags(&g, go->greedy_flag, go->have_temp ? &go->temp : NULL,
                           go->have_top_p ? &go->top_p : NULL,
                           go->have_top_k ? &flag_top_k : NULL);
        greedy = g.greedy;
        const float temp = g.temperature, top_p = g.top_p;
        const int top_k = g.top_k;
        const int V = m.cfg.text.vocab_size;
        const int64_t maxpos = m.cfg.text.max_position_embeddings;
        for (; nsp < n; nsp++)
            if (m3_sampler_init(&sp[nsp], V, greedy, temp, top_k, top_p, (uint64_t)go->seed)) {
                fprintf(stderr, "m3-gpu generate: cannot allocate the sampler for vocab %d\n", V);
                goto out;
            }
        for (int s = 0; s < n; s++) { /* capacity per sequence, as the single-prompt run */
            int64_t c = (int64_t)T[s] + max_new;
            if (maxpos > 0 && T[s] > maxpos) {
                fprintf(stderr, "m3-gpu generate: prompt %d has %d tokens, more than "
                                "max_position_embeddings %lld of %s/config.json\n", s, T[s],
                        (long long)maxpos, dir);
                goto out;
            }
            c = maxpos > 0 && c > maxpos ? maxpos : c;
            if (c > INT32_MAX) {
                fprintf(stderr, "m3-gpu generate: %lld positions are too many\n", (long long)c);
                goto out;
            }
            cap[s] = (int)c;
            capmax = cap[s] > capmax ? cap[s] : capmax;
            len[s] = T[s];
            idp[s] = ids[s];
            act[s] = s;
            out[s] = (int32_t *)malloc((size_t)(max_new > 0 ? max_new : 1) * sizeof(int32_t));
            if (!out[s]) {
                fprintf(stderr, "m3-gpu: out of host memory\n");
                goto out;
            }
        }
        logits = (float *)malloc((size_t)n * V * sizeof(float));
        if (!logits) {
            fprintf(stderr, "m3-gpu: out of host memory\n");
            goto out;
        }
        if (dev_model_upload(&dm, &m, &pg) != 0) {
            fprintf(stderr, "m3-gpu: uploading the weights of %s failed (device memory?)\n", dir);
            goto out;
        }
        /* no vendor BLAS here: every linear runs the fixed-order kernels (--draft: rows
         * for the prompt and for a verification of K + 1 tokens) */
        const int tmax = go->draft && go->spec_k + 1 > Ttot ? (int)go->spec_k + 1 : Ttot;
        if (gpu_sess_init_n(&sess, &m, &dm, tmax, capmax, n, mode, NULL, st) != 0)
            goto out;
        have_sess = 1;
        sess.vis = vis.n > 0 ? &vis : NULL; /* placed into the prompt's embeddings */
        if (go->draft) { /* Eagle3 speculative decoding of the one prompt */
            rc = spec_generate(go, &m, &dm, &sess, ids[0], T[0], cap[0], &sp[0], &g, tokzr,
                               &ds[0], st);
            goto out;
        }
        const double t0 = now_s();
        {
            const gpu_batch bt = {n, idp, T, p0, act, NULL, NULL};
            if (gpu_step_batch(&sess, &bt, logits, 1) != 0)
                goto out;
        }
        const double t_prefill = now_s() - t0, t1 = now_s();
        long long steps = 0;
        if (!print_ids && !tokzr)
            fprintf(stderr, "m3-gpu: %s has no usable tokenizer; printing token ids\n", dir);
        for (int s = 0; s < n; s++) { /* print now (streaming) or at the end (batch) */
            if (streaming && is_text[s] && tokzr && !print_ids) /* echo the prompt, as m3-ref */
                fwrite(srcs[s], 1, strlen(srcs[s]), stdout);
        }
        for (int na = max_new > 0 ? n : 0; na > 0;) {
            int nn = 0; /* sample every active sequence; keep those that go on */
            for (int a = 0; a < na; a++) {
                const int s = act[a];
                const int32_t tok = m3_sample(&sp[s], logits + (size_t)a * V);
                int stop = 0;
                out[s][produced[s]++] = tok;
                if (streaming) {
                    if (emit_token(tokzr, &ds[s], print_ids, produced[s] - 1, tok, &e) != 0) {
                        printf("\n");
                        fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
                        goto out;
                    }
                    fflush(stdout);
                }
                for (int j = 0; j < g.n_eos; j++)
                    stop |= tok == g.eos[j];
                done[s] = stop ? 1 : 0;
                if (stop || produced[s] == max_new || len[s] >= cap[s])
                    continue;
                act[nn] = s;
                nxt[nn] = tok;
                idp[nn] = &nxt[nn];
                one[nn] = 1;
                p0[nn] = len[s]++;
                nn++;
            }
            na = nn;
            if (na == 0)
                break;
            const gpu_batch bt = {na, idp, one, p0, act, NULL, NULL};
            if (gpu_step_batch(&sess, &bt, logits, 1) != 0)
                goto out;
            steps += na;
        }
        const double t_decode = now_s() - t1;
        for (int s = 0; s < n; s++) {
            const char *txt;
            size_t txtlen;
            if (!streaming && is_text[s] && tokzr && !print_ids)
                fwrite(srcs[s], 1, strlen(srcs[s]), stdout);
            for (long long k = 0; k < produced[s] && !streaming; k++)
                if (emit_token(tokzr, &ds[s], print_ids, k, out[s][k], &e) != 0) {
                    printf("\n");
                    fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
                    goto out;
                }
            if (tokzr && !print_ids) {
                if (m3_decode_stream_flush(&ds[s], &txt, &txtlen, &e) != 0) {
                    printf("\n");
                    fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
                    goto out;
                }
                fwrite(txt, 1, txtlen, stdout);
            }
            printf("\n");
            char who[32] = "";
            if (n > 1)
                snprintf(who, sizeof who, "sequence %d ", s);
            if (done[s])
                fprintf(stderr, "m3-gpu: %sstopped at end-of-sequence token\n", who);
            else if (produced[s] < max_new && maxpos > 0 && cap[s] == maxpos)
                fprintf(stderr, "m3-gpu: %sstopped at the context limit "
                                "(max_position_embeddings %lld)\n", who, (long long)maxpos);
        }
        fflush(stdout);
        char nb[32] = "";
        if (n > 1)
            snprintf(nb, sizeof nb, "batch of %d, ", n);
        fprintf(stderr,
                "m3-gpu: %s%s (%s); prefill %d tokens in %.3f s (%.1f tokens/s); "
                "decode %lld tokens in %.3f s (%.2f tokens/s)\n",
                nb, greedy ? "greedy" : "sampled", M3_GPU_VENDOR, Ttot, t_prefill,
                t_prefill > 0 ? Ttot / t_prefill : 0.0, steps, t_decode,
                t_decode > 0 ? (double)steps / t_decode : 0.0);
    }
    {
        char sum[64];
        snprintf(sum, sizeof sum, "%d prompt%s", n, n > 1 ? "s" : "");
        m3_progress_summary(&pg, sum);
    }
    rc = 0;
out:
    if (have_sess)
        gpu_sess_free(&sess);
    for (int s = 0; s < nsp; s++)
        m3_sampler_free(&sp[s]);
    for (int s = 0; ds && s < n; s++)
        m3_decode_stream_free(&ds[s]);
    m3g_vision_feats_free(&vis);
    dev_model_free(&dm);
    if (st)
        (void)hipStreamDestroy(st);
    for (int s = 0; s < n; s++) {
        if (ids)
            free(ids[s]);
        if (out)
            free(out[s]);
    }
    free(ids);
    free(out);
    free(T);
    free(len);
    free(cap);
    free(act);
    free(p0);
    free(one);
    free(done);
    free(produced);
    free(nxt);
    free(idp);
    free(sp);
    free(ds);
    free(logits);
    m3_model_close(&m);
    m3_tokenizer_free(tokzr);
    return rc;
}

static int cmd_generate(int argc, char **argv)
{
    const char *srcv[64]; /* every --tokens / --prompt in order (a batch when more than one) */
    int srctext[64], any_text = 0;
    gen_opts go;
    memset(&go, 0, sizeof go);
    go.srcs = srcv;
    go.is_text = srctext;
    go.max_new = 32;
    go.spec_k = 3;
    prompt_args pa; /* chat and vision options as bin/m3-ref generate (ref/prompt.h) */
    prompt_args_init(&pa);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!strcmp(a, "--greedy")) {
            go.greedy_flag = 1;
            continue;
        }
        if (!strcmp(a, "--print-ids")) {
            go.print_ids = 1;
            continue;
        }
        if (!strcmp(a, "--lenient-config")) {
            go.lenient = 1;
            continue;
        }
        if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            go.quiet = 1;
            continue;
        }
        const int took = take_prompt_opt("generate", 1, a, v, &pa);
        if (took < 0)
            return EXIT_USAGE;
        if (took > 0) {
            i += took - 1;
            continue;
        }
        static const char *const valued[] = {"--model", "--tokens", "--prompt", "--dtype",
                                             "--max-new-tokens", "--temperature", "--top-p",
                                             "--top-k", "--seed", "--draft", "--spec-tokens",
                                             NULL};
        if (valued_opt("generate", a, v, valued) != 0)
            return EXIT_USAGE;
        i++;
        if (!strcmp(a, "--model"))
            go.dir = v;
        else if ((!strcmp(a, "--tokens") || !strcmp(a, "--prompt")) && go.n < 64) {
            srcv[go.n] = v;
            srctext[go.n] = !strcmp(a, "--prompt");
            any_text |= srctext[go.n++];
        } else if (!strcmp(a, "--tokens") || !strcmp(a, "--prompt"))
            return gen_usage("at most 64 --tokens / --prompt (prompts of a batch); one more:", v);
        else if (!strcmp(a, "--dtype"))
            go.mode = !strcmp(v, "bf16");
        else if (!strcmp(a, "--max-new-tokens")) {
            if (parse_i64(v, 0, INT32_MAX, &go.max_new))
                return gen_usage("--max-new-tokens needs an integer >= 0, got", v);
        } else if (!strcmp(a, "--temperature")) {
            if (parse_f(v, &go.temp) || !(go.temp > 0.0f))
                return gen_usage("--temperature needs a number > 0, got", v);
            go.have_temp = 1;
        } else if (!strcmp(a, "--top-p")) {
            if (parse_f(v, &go.top_p) || !(go.top_p > 0.0f) || go.top_p > 1.0f)
                return gen_usage("--top-p needs a number in (0, 1], got", v);
            go.have_top_p = 1;
        } else if (!strcmp(a, "--top-k")) {
            if (parse_i64(v, 0, INT32_MAX, &go.top_k))
                return gen_usage("--top-k needs an integer >= 0, got", v);
            go.have_top_k = 1;
        } else if (!strcmp(a, "--seed")) {
            if (parse_i64(v, 0, INT64_MAX, &go.seed))
                return gen_usage("--seed needs an integer >= 0, got", v);
            go.have_seed = 1;
        } else if (!strcmp(a, "--draft")) {
            go.draft = v;
        } else if (!strcmp(a, "--spec-tokens")) {
            if (parse_i64(v, 1, M3_SPEC_MAX_K, &go.spec_k))
                return gen_usage("--spec-tokens needs an integer in [1, 32], got", v);
        }
    }
    if (prompt_args_check("generate", &pa, any_text) != 0)
        return EXIT_USAGE;
    if (!go.dir)
        return gen_usage("--model DIR is required", NULL);
    if (go.n == 0)
        return gen_usage("give --tokens IDS or --prompt TEXT (repeat them for a batch)", NULL);
    if (go.greedy_flag && (go.have_temp || go.have_top_p || go.have_top_k || go.have_seed))
        return gen_usage("--greedy cannot be combined with --temperature, --top-p, --top-k or "
                         "--seed", NULL);
    if (vision_requested(&pa) && go.n > 1)
        return gen_usage("--image, --video and --pixels take a single prompt (one --tokens or "
                         "--prompt), not a batch", NULL);
    if (go.draft && go.n > 1)
        return gen_usage("--draft (speculative decoding) takes a single prompt (one --tokens or "
                         "--prompt), not a batch", NULL);
    go.po = &pa.po;
    go.vreq = vision_requested(&pa) ? &pa.vreq : NULL;
    return generate_run(&go);
}

/* m3-gpu vision-case --case DIR --dump OUT: one vision component vector case
 * (gpu/vision.h m3g_vision_run_case) on the device, for bin/m3-conform check. */
static int cmd_vision_case(int argc, char **argv)
{
    const char *dir = NULL, *dumpp = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--case"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--dump"))
            dumpp = argv[i + 1];
        else
            dir = NULL, i = argc;
    }
    if (!dir || !dumpp || argc % 2) {
        fprintf(stderr, "usage: m3-gpu vision-case --case DIR --dump OUT.safetensors\n");
        return EXIT_USAGE;
    }
    int rc = EXIT_RUN, mode = 0;
    m3_err e;
    memset(&e, 0, sizeof e);
    hipStream_t st = NULL;
    m3_st_writer *w = m3_st_writer_new();
    if (!w || hipStreamCreate(&st) != hipSuccess) {
        fprintf(stderr, "m3-gpu: no usable GPU or out of memory\n");
    } else if (m3g_vision_run_case(dir, st, w, &mode, &e) != 0 ||
               m3_st_writer_meta(w, "m3.dump_version", "1", &e) != 0 ||
               m3_st_writer_meta(w, "m3.mode", mode ? "bf16" : "fp32", &e) != 0 ||
               m3_st_writer_meta(w, "m3.producer", "m3-gpu vision-case (" M3_GPU_VENDOR ")",
                                 &e) != 0 ||
               m3_st_writer_save(w, dumpp, &e) != 0) {
        fprintf(stderr, "m3-gpu vision-case: %s\n", e.msg);
    } else {
        printf("vision-case %s: dump %s\n", dir, dumpp);
        rc = 0;
    }
    if (st)
        (void)hipStreamDestroy(st);
    m3_st_writer_free(w);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "forward"))
        return cmd_forward(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "generate"))
        return cmd_generate(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "vision-case"))
        return cmd_vision_case(argc, argv);
    fprintf(stderr, "m3-gpu: the command must be forward or generate\n%s", USAGE);
    return EXIT_USAGE;
}
