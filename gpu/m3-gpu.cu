/* m3-gpu.cu — the M3 text forward on the GPU (HIP API; nvcc through
 * gpu/hip_compat.h), with the CLI subset and dump names of bin/m3-ref so
 * bin/m3-conform can judge its dumps.
 *
 *   m3-gpu forward --model DIR --tokens IDS [--dtype fp32|bf16] [--dump OUT.safetensors]
 *   m3-gpu generate --model DIR (--tokens IDS | --prompt TEXT) [--max-new-tokens N]
 *                   [--greedy | --temperature T --top-p P --top-k K --seed S]
 *                   [--print-ids] [--dtype fp32|bf16]
 *
 * Exit status: 0 success, 1 model or run error, 2 bad command line.
 *
 * Spec: M3-MODEL-* (layer structure, final norm, lm_head), M3-DUMP-*
 * (names, shapes, metadata as bin/m3-ref forward), M3-NUM-MODE-1,
 * M3-NUM-BF16-2 (all rounding points are in the kernels, see
 * gpu/kernels/kernels.h), M3-MSA-CACHE-1 (paged caches, page == MSA block).
 *
 * Status (written by H13): NEVER RUN ON A GPU yet. Compiled with nvcc
 * (sm_90) and hipcc (gfx90a, gfx940); the same sources built against the CPU
 * emulation of the HIP subset (gpu/emu/hip_emu.h, `make gpu-emu-test`) pass
 * bin/m3-conform on the model vectors tiny_fp32/bf16, layer_sparse_moe_*,
 * layer_dense_* (greedy declared absent), and agree with bin/m3-ref dumps
 * for T = 1, 3, 8 (the GEMV path). What that does not show: GPU memory-model
 * or occupancy bugs, the cuBLAS path (emulation uses the fallback GEMM), speed.
 *  - complete in code: checkpoint load through build/libm3.a, weight upload
 *    (fp32 / bf16 kept as stored; other dtypes widened to fp32 on the host),
 *    embeddings (host lookup, exact), RoPE tables (host m3_rope_table,
 *    exact), every layer kind: dense causal attention, MSA indexer + select +
 *    block-sparse attention, dense SwiGLU-OAI MLP, MoE (router, 4 grouped
 *    expert GEMVs, shared expert, combine), final norm, lm_head, and every
 *    dump name incl. eagle3.aux.
 *  - one prefill pass of T tokens at positions 0..T-1 (what `forward` does);
 *    the page table is the identity (single sequence), so V and cache rows
 *    are written contiguously; a page allocator is needed for batching.
 *  - `generate` (H18): same options, defaults (ref/genconfig.h reads
 *    generation_config.json for both programs), eos and output as m3-ref
 *    generate; prefill of the prompt in one gpu_step, then one gpu_step per
 *    token at positions T, T+1, ... over the session's device caches
 *    (per-layer bf16 index-K copies, converted row by row); lm_head on the
 *    last row only, copied to the host, chosen by ref m3_sample. No vendor
 *    BLAS in generate. On the H200: ids identical to m3-ref on models/demo
 *    in fp32 (greedy and seeded); bf16 diverges after 10 (greedy) / 2
 *    (sampled) tokens, cause not established (docs/performance.md).
 *  - NOT done: the teacher-forced layer-by-layer mode, chunked prefill
 *    (the whole prompt is one call), vision, multi-sequence batches,
 *    CUDA-graph capture of the decode step, memory for full M3 (all weights are uploaded: only
 *    tiny / layer-pruned checkpoints fit one GPU).
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
#include "tokenizer.h"
}


#include "hip_compat.h"
#include "kernels/common.cuh"
#include "kernels/kernels.h"

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
} dev_model;

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
    }
    free(tmp);
    *out = d;
    *dt = all_bf16 ? M3G_BF16 : M3G_F32;
    return 0;
}

static int dev_model_upload(dev_model *dm, const m3_model *m)
{
    const m3_text_config *c = &m->cfg.text;
    memset(dm, 0, sizeof *dm);
    dm->layers = (dev_layer *)calloc((size_t)c->num_layers, sizeof(dev_layer));
    if (!dm->layers)
        return -1;
    for (int l = 0; l < c->num_layers; l++) {
        const m3_layer_weights *w = &m->w.layers[l];
        dev_layer *d = &dm->layers[l];
        if (up_vec(dm, &d->in_norm, &d->in_norm_dt, &w->input_norm) ||
            up_vec(dm, &d->post_norm, &d->post_norm_dt, &w->post_norm) ||
            up_vec(dm, &d->q_norm, &d->q_norm_dt, &w->q_norm) ||
            up_vec(dm, &d->k_norm, &d->k_norm_dt, &w->k_norm) || up_mat(dm, &d->q, &w->q) ||
            up_mat(dm, &d->k, &w->k) || up_mat(dm, &d->v, &w->v) || up_mat(dm, &d->o, &w->o))
            return -1;
        if (c->layer_sparse[l] &&
            (up_mat(dm, &d->iq, &w->index_q) || up_mat(dm, &d->ik, &w->index_k) ||
             up_vec(dm, &d->iq_norm, &d->iq_norm_dt, &w->index_q_norm) ||
             up_vec(dm, &d->ik_norm, &d->ik_norm_dt, &w->index_k_norm)))
            return -1;
        if (c->layer_moe[l]) {
            if (up_mat(dm, &d->router, &w->router) ||
                up_vec(dm, &d->rbias, &d->rbias_dt, &w->router_bias) ||
                up_experts(dm, &d->eg, &d->edt, w->exp_gate, c->num_experts) ||
                up_experts(dm, &d->eu, &d->edt, w->exp_up, c->num_experts) ||
                up_experts(dm, &d->ed, &d->edt, w->exp_down, c->num_experts) ||
                up_mat(dm, &d->sg, &w->sh_gate) || up_mat(dm, &d->su, &w->sh_up) ||
                up_mat(dm, &d->sd, &w->sh_down))
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
 * the per-layer caches for cap positions (identity paging: one sequence, so
 * position p lives in cache row p). Positions continue across calls
 * (prefill at pos0 = 0, then decode one token at a time). */
typedef struct gpu_sess {
    const m3_model *m;
    dev_model *dm;
    m3g_blas *blas; /* may be NULL */
    hipStream_t st;
    int mode, tmax, cap, npages, nbmax;
    float *h, *xn, *q, *kraw, *att, *tmp, *iq, *ikraw, *bs, *g, *u, *ye, *sh, *logits, *cos_t,
        *sin_t;
    int32_t *blk, *ridx, *pages;
    float *rw, *rscores;
    float **kc, **vc, **ikc; /* per layer */
    uint16_t **ik16;         /* per sparse layer: bf16 copy of its index-K cache (bf16 mode;
                                kept per layer because decode converts only the new rows) */
    float *aws;              /* split attention workspace (NULL: per-row kernel) */
    size_t aws_n;
    float *hbuf, *ct, *stb; /* host staging [tmax, H], [tmax, rd/2] x 2 */
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
    free(s->hbuf);
    free(s->ct);
    free(s->stb);
    memset(s, 0, sizeof *s);
}

/* Allocate a session for calls of at most tmax rows and cap positions in all. */
static int gpu_sess_init(gpu_sess *b, const m3_model *m, dev_model *dm, int tmax, int cap,
                         int mode, m3g_blas *blas, hipStream_t st)
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
    const int npages = b->npages, nbmax = b->nbmax;
    int32_t *pt = (int32_t *)malloc((size_t)npages * sizeof(int32_t));
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
    for (int p = 0; p < npages; p++)
        pt[p] = p; /* identity paging: one sequence */
#define DA(ptr, n, T_) dalloc(dm, (void **)&(ptr), (size_t)(n) * sizeof(T_))
    if (DA(b->h, N * H, float) || DA(b->xn, N * H, float) || DA(b->q, N * nh * hd, float) ||
        DA(b->kraw, N * nkv * hd, float) || DA(b->att, N * nh * hd, float) ||
        DA(b->tmp, N * H, float) || DA(b->iq, N * (G > 0 ? G : 1) * ihd, float) ||
        DA(b->ikraw, N * ihd, float) || DA(b->bs, N * (G > 0 ? G : 1) * nbmax, float) ||
        DA(b->blk, N * (G > 0 ? G : 1) * (K > 0 ? K : 1), int32_t) ||
        DA(b->g, N * Imax, float) || DA(b->u, N * Imax, float) ||
        DA(b->ye, N * (kx > 0 ? kx : 1) * H, float) || DA(b->sh, N * H, float) ||
        DA(b->logits, N * V, float) || DA(b->cos_t, N * (rd / 2), float) ||
        DA(b->sin_t, N * (rd / 2), float) || DA(b->ridx, N * (kx > 0 ? kx : 1), int32_t) ||
        DA(b->rw, N * (kx > 0 ? kx : 1), float) || DA(b->rscores, N * (E > 0 ? E : 1), float) ||
        DA(b->pages, npages, int32_t)) {
        fprintf(stderr, "m3-gpu: device allocation failed for %d tokens\n", tmax);
        free(pt);
        return -1;
    }
    for (int l = 0; l < L; l++)
        if (DA(b->kc[l], (size_t)npages * B * nkv * hd, float) ||
            DA(b->vc[l], (size_t)npages * B * nkv * hd, float) ||
            (c->layer_sparse[l] && DA(b->ikc[l], (size_t)npages * B * ihd, float)) ||
            (c->layer_sparse[l] && mode == 1 && DA(b->ik16[l], (size_t)npages * B * ihd, uint16_t))) {
            fprintf(stderr, "m3-gpu: device allocation failed for the caches\n");
            free(pt);
            return -1;
        }
    /* the split-key
     * attention workspace when it fits in 1 GiB (else the per-row kernel);
     * sized for the prefill (pos0 0, tmax rows) and the last decode step */
    {
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
    hipError_t e4 = hipMemcpy(b->pages, pt, (size_t)npages * sizeof(int32_t), hipMemcpyHostToDevice);
    free(pt);
    if (e4 != hipSuccess) {
        fprintf(stderr, "m3-gpu: uploading the page table failed: %s\n", hipGetErrorString(e4));
        return -1;
    }
    return 0;
}

/* Run T tokens ids at positions pos0 .. pos0+T-1 through the model, writing
 * their K/V (and index-K) rows into the caches. logits_host gets [T, V], or
 * only the last row [V] when last_only (lm_head on that row alone).
 * dump (pos0 0 only) receives every activation under the m3-ref names. */
static int gpu_step(gpu_sess *b, const int32_t *ids, int T, int pos0, m3_st_writer *dump,
                    float *logits_host, int last_only)
{
    const m3_model *m = b->m;
    dev_model *dm = b->dm;
    m3g_blas *blas = b->blas;
    hipStream_t st = b->st;
    const int mode = b->mode;
    const m3_text_config *c = &m->cfg.text;
    const int H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    const int V = c->vocab_size, L = c->num_layers, rd = c->rotary_dim;
    const int G = c->index_n_heads, ihd = c->index_head_dim, K = c->index_topk;
    const int B = c->index_block_size > 0 ? c->index_block_size : 128;
    const int kx = c->num_experts_per_tok, E = c->num_experts, I = c->intermediate_size;
    const int Is = c->shared_intermediate_size;
    const float eps = c->rms_norm_eps;
    const size_t N = (size_t)T;
    const size_t P0 = (size_t)pos0;
    const int nbmax = (pos0 + T - 1) / B + 1;
    float *hbuf = b->hbuf, *ct = b->ct, *stb = b->stb;
    char name[160];
    float *aux = NULL;
    int rc = -1;

    if (T < 1 || T > b->tmax || pos0 < 0 || pos0 + T > b->cap) {
        fprintf(stderr, "m3-gpu: %d tokens at position %d do not fit the session (%d rows, %d "
                        "positions)\n", T, pos0, b->tmax, b->cap);
        return -1;
    }
    /* embeddings and RoPE tables on the host (exact, as ref) */
    for (int t = 0; t < T; t++) {
        if (ids[t] < 0 || ids[t] >= V) {
            fprintf(stderr, "m3-gpu: token %d at index %d is out of range [0, %d) of %s/config.json\n",
                    ids[t], pos0 + t, V, m->dir);
            return -1;
        }
        for (int i = 0; i < H; i++)
            hbuf[(size_t)t * H + i] =
                m3_round1(m3_mat_at(&m->w.embed, ids[t], i), (m3_mode)mode);
        m3_rope_table(ct + (size_t)t * (rd / 2), stb + (size_t)t * (rd / 2), pos0 + t, rd,
                      c->rope_theta, (m3_mode)mode);
    }
    CK(hipMemcpy(b->h, hbuf, N * H * sizeof(float), hipMemcpyHostToDevice));
    CK(hipMemcpy(b->cos_t, ct, N * (rd / 2) * sizeof(float), hipMemcpyHostToDevice));
    CK(hipMemcpy(b->sin_t, stb, N * (rd / 2) * sizeof(float), hipMemcpyHostToDevice));
    if (dump) {
        aux = (float *)calloc(N * 3 * (size_t)H, sizeof(float));
        if (!aux || dump_dev(dump, "embeddings", M3_F32, 2, T, H, 0, b->h, st) != 0)
            goto fail;
    }

    for (int l = 0; l < L; l++) {
        const dev_layer *d = &dm->layers[l];
        const int sparse = c->layer_sparse[l] != 0;
        /* residual of the previous layer's FFN fused with this layer's input norm */
        CK(m3g_residual_rmsnorm(b->h, l > 0 ? b->tmp : NULL, b->xn, d->in_norm, d->in_norm_dt, T,
                                H, eps, mode, st));
        if (dump) {
            if (l > 0) {
                snprintf(name, sizeof name, "layers.%d.output", l - 1);
                if (dump_dev(dump, name, M3_F32, 2, T, H, 0, b->h, st))
                    goto fail;
            }
            snprintf(name, sizeof name, "layers.%d.input", l);
            if (dump_dev(dump, name, M3_F32, 2, T, H, 0, b->h, st))
                goto fail;
            snprintf(name, sizeof name, "layers.%d.attn_norm", l);
            if (dump_dev(dump, name, M3_F32, 2, T, H, 0, b->xn, st))
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
                    for (int t = 0; t < T; t++)
                        memcpy(aux + ((size_t)t * 3 + slot[j]) * H, hh + (size_t)t * H,
                               sizeof(float) * H);
                free(hh);
            }
        }

        /* attention: projections, QK-norm + RoPE into the paged caches
         * (identity pages: position p is cache row p) */
        CK(m3g_linear(b->q, nh * hd, b->xn, d->q, T, mode, blas, st));
        CK(m3g_linear(b->kraw, nkv * hd, b->xn, d->k, T, mode, blas, st));
        CK(m3g_linear(b->vc[l] + P0 * nkv * hd, nkv * hd, b->xn, d->v, T, mode, blas, st));
        CK(m3g_headnorm_rope(b->q, b->q, NULL, B, pos0, d->q_norm, d->q_norm_dt, T, nh, hd, rd,
                             b->cos_t, b->sin_t, eps, mode, st));
        CK(m3g_headnorm_rope(b->kraw, b->kc[l], b->pages, B, pos0, d->k_norm, d->k_norm_dt, T,
                             nkv, hd, rd, b->cos_t, b->sin_t, eps, mode, st));
        const int32_t *blocks = NULL;
        if (sparse) {
            CK(m3g_linear(b->iq, G * ihd, b->xn, d->iq, T, mode, blas, st));
            CK(m3g_linear(b->ikraw, ihd, b->xn, d->ik, T, mode, blas, st));
            CK(m3g_headnorm_rope(b->iq, b->iq, NULL, B, pos0, d->iq_norm, d->iq_norm_dt, T, G,
                                 ihd, rd, b->cos_t, b->sin_t, eps, mode, st));
            CK(m3g_headnorm_rope(b->ikraw, b->ikc[l], b->pages, B, pos0, d->ik_norm,
                                 d->ik_norm_dt, T, 1, ihd, rd, b->cos_t, b->sin_t, eps, mode,
                                 st));
            if (b->ik16[l]) { /* bf16 mode: the indexer streams a bf16 copy (same values) */
                CK(m3g_to_bf16(b->ik16[l] + P0 * ihd, b->ikc[l] + P0 * ihd, (int64_t)N * ihd,
                               st));
                CK(m3g_msa_block_scores(b->bs, b->iq, b->ik16[l], M3G_BF16, b->pages, B, pos0, T, G,
                                        ihd, nbmax, st));
            } else {
                CK(m3g_msa_block_scores(b->bs, b->iq, b->ikc[l], M3G_F32, b->pages, B, pos0, T,
                                        G, ihd, nbmax, st));
            }
            CK(m3g_msa_select(b->blk, b->bs, pos0, T, G, nbmax, B, K, c->index_local_blocks,
                              c->index_init_blocks, st));
            blocks = b->blk;
            if (dump) {
                snprintf(name, sizeof name, "layers.%d.attn.block_indices", l);
                if (dump_dev(dump, name, M3_I32, 3, G, T, K, b->blk, st))
                    goto fail;
            }
        }
        if (b->aws && m3g_attention_split_ws(B, pos0, T, nh, hd, blocks, sparse ? K : 0) <=
                          b->aws_n)
            CK(m3g_attention_split(b->att, b->q, b->kc[l], b->vc[l], b->pages, B, pos0, T, nh,
                                   nkv, hd, blocks, sparse ? K : 0, mode, b->aws, b->aws_n, st));
        else
            CK(m3g_attention(b->att, b->q, b->kc[l], b->vc[l], b->pages, B, pos0, T, nh, nkv, hd,
                             blocks, sparse ? K : 0, mode, st));
        CK(m3g_linear(b->tmp, H, b->att, d->o, T, mode, blas, st));
        CK(m3g_residual_rmsnorm(b->h, b->tmp, b->xn, d->post_norm, d->post_norm_dt, T, H, eps,
                                mode, st));
        if (dump) {
            const char *sfx[3] = {"attn.output", "post_attn", "ffn_norm"};
            const float *src[3] = {b->tmp, b->h, b->xn};
            for (int i = 0; i < 3; i++) {
                snprintf(name, sizeof name, "layers.%d.%s", l, sfx[i]);
                if (dump_dev(dump, name, M3_F32, 2, T, H, 0, src[i], st))
                    goto fail;
            }
        }

        /* feed-forward into b->tmp */
        if (c->layer_moe[l]) {
            CK(m3g_router(b->ridx, b->rw, b->rscores, b->xn, d->router,
                          c->use_routing_bias ? d->rbias : NULL, d->rbias_dt, T, kx, st));
            const int64_t es = (int64_t)I * H;
            CK(m3g_gemv_grouped(b->g, b->xn, H, 0, d->eg, es, d->edt, I, H, b->ridx, T, kx, mode,
                                st));
            CK(m3g_gemv_grouped(b->u, b->xn, H, 0, d->eu, es, d->edt, I, H, b->ridx, T, kx, mode,
                                st));
            CK(m3g_swiglu(b->g, b->g, b->u, (int64_t)N * kx * I, c->swiglu_alpha, c->swiglu_limit,
                          c->swiglu_beta, mode, st));
            CK(m3g_gemv_grouped(b->ye, b->g, (int64_t)kx * I, I, d->ed, es, d->edt, H, I, b->ridx,
                                T, kx, mode, st));
            const float *shared = NULL;
            if (c->n_shared_experts > 0 && d->sg.data) {
                CK(m3g_linear(b->g, Is, b->xn, d->sg, T, mode, blas, st));
                CK(m3g_linear(b->u, Is, b->xn, d->su, T, mode, blas, st));
                CK(m3g_swiglu(b->g, b->g, b->u, (int64_t)N * Is, c->swiglu_alpha, c->swiglu_limit,
                              c->swiglu_beta, mode, st));
                CK(m3g_linear(b->sh, H, b->g, d->sd, T, mode, blas, st));
                shared = b->sh;
            }
            CK(m3g_moe_combine(b->tmp, b->ye, b->rw, shared, T, kx, H, c->routed_scaling_factor,
                               mode, st));
            if (dump) {
                snprintf(name, sizeof name, "layers.%d.moe.topk_index", l);
                if (dump_dev(dump, name, M3_I32, 2, T, kx, 0, b->ridx, st))
                    goto fail;
                snprintf(name, sizeof name, "layers.%d.moe.topk_weight", l);
                if (dump_dev(dump, name, M3_F32, 2, T, kx, 0, b->rw, st))
                    goto fail;
                snprintf(name, sizeof name, "layers.%d.moe.scores", l);
                if (dump_dev(dump, name, M3_F32, 2, T, E, 0, b->rscores, st))
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
            if (dump_dev(dump, name, M3_F32, 2, T, H, 0, b->tmp, st))
                goto fail;
        }
    }

    /* last residual fused with the final norm; lm_head (all rows, or the last) */
    CK(m3g_residual_rmsnorm(b->h, b->tmp, b->xn, dm->final_norm, dm->final_norm_dt, T, H, eps,
                            mode, st));
    if (last_only) {
        CK(m3g_linear(b->logits, V, b->xn + (N - 1) * H, dm->lm_head, 1, mode, NULL, st));
        CK(hipStreamSynchronize(st));
        CK(hipMemcpy(logits_host, b->logits, (size_t)V * sizeof(float), hipMemcpyDeviceToHost));
    } else {
        CK(m3g_linear(b->logits, V, b->xn, dm->lm_head, T, mode, blas, st));
        CK(hipStreamSynchronize(st));
        CK(hipMemcpy(logits_host, b->logits, N * V * sizeof(float), hipMemcpyDeviceToHost));
    }
    if (dump) {
        snprintf(name, sizeof name, "layers.%d.output", L - 1);
        m3_err e;
        int64_t ashape[2] = {T, 3 * (int64_t)H};
        if (dump_dev(dump, name, M3_F32, 2, T, H, 0, b->h, st) ||
            dump_dev(dump, "final_norm", M3_F32, 2, T, H, 0, b->xn, st) ||
            dump_dev(dump, "logits", M3_F32, 2, T, V, 0, b->logits, st))
            goto fail;
        if (m3_st_writer_add(dump, "eagle3.aux", M3_F32, 2, ashape, aux, &e) != 0) {
            fprintf(stderr, "m3-gpu: dump: %s\n", e.msg);
            goto fail;
        }
    }
    rc = 0;
fail:
    free(aux);
    return rc;
}

/* One prefill pass of T tokens at positions 0..T-1 (the forward command). */
static int gpu_forward(const m3_model *m, dev_model *dm, const int32_t *ids, int T, int mode,
                       m3_st_writer *dump, float *logits_host, m3g_blas *blas, hipStream_t st)
{
    gpu_sess s;
    int rc = gpu_sess_init(&s, m, dm, T, T, mode, blas, st);
    if (rc == 0)
        rc = gpu_step(&s, ids, T, 0, dump, logits_host, 0);
    gpu_sess_free(&s);
    return rc;
}

/* ---- CLI -------------------------------------------------------------------- */

static const char *USAGE =
    "usage: m3-gpu forward --model DIR --tokens IDS [--dtype fp32|bf16] [--dump OUT.safetensors]\n"
    "       m3-gpu generate --model DIR (--tokens IDS | --prompt TEXT) [--max-new-tokens N]\n"
    "                       [--greedy | --temperature T --top-p P --top-k K --seed S]\n"
    "                       [--print-ids] [--dtype fp32|bf16]\n"
    "forward: run the T token ids through the model on the GPU in one pass (positions\n"
    "0..T-1); print T and the top-5 of the last row; --dump writes the activations under the\n"
    "names of bin/m3-ref forward (spec/dump.md), to be judged by bin/m3-conform.\n"
    "generate: as bin/m3-ref generate (same options, defaults, eos and output): prefill on the\n"
    "GPU, then decode one token at a time over the device KV / index-K caches; the last\n"
    "logits row is copied to the host and chosen by the reference sampler (ref/sampling.h).\n"
    "--max-new-tokens defaults to 32; sampling defaults come from DIR/generation_config.json,\n"
    "else temperature 1.0, top_p 0.95, top_k 40; --print-ids prints only the generated ids,\n"
    "comma-separated. See the header of gpu/m3-gpu.cu for what is complete.\n";

static int parse_ids(const char *s, int32_t **out, int *n)
{
    size_t cap = 16, cnt = 0;
    int32_t *ids = (int32_t *)malloc(cap * sizeof *ids);
    if (!ids)
        return -1;
    const char *p = s;
    while (*p) {
        char *end;
        if (*p < '0' || *p > '9') {
            free(ids);
            return -1;
        }
        long v = strtol(p, &end, 10);
        if (v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return -1;
        }
        if (cnt == cap) {
            cap *= 2;
            int32_t *nb = (int32_t *)realloc(ids, cap * sizeof *ids);
            if (!nb) {
                free(ids);
                return -1;
            }
            ids = nb;
        }
        ids[cnt++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (cnt == 0) {
        free(ids);
        return -1;
    }
    *out = ids;
    *n = (int)cnt;
    return 0;
}

static int cmd_forward(int argc, char **argv)
{
    const char *dir = NULL, *toks = NULL, *dumpp = NULL;
    int mode = 0;
    for (int i = 2; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "m3-gpu forward: %s needs a value\n%s", a, USAGE);
            return EXIT_USAGE;
        }
        if (!strcmp(a, "--model"))
            dir = v;
        else if (!strcmp(a, "--tokens"))
            toks = v;
        else if (!strcmp(a, "--dump"))
            dumpp = v;
        else if (!strcmp(a, "--dtype") && (!strcmp(v, "fp32") || !strcmp(v, "bf16")))
            mode = !strcmp(v, "bf16");
        else {
            fprintf(stderr, "m3-gpu forward: unknown option or value '%s %s'\n%s", a, v, USAGE);
            return EXIT_USAGE;
        }
    }
    int32_t *ids = NULL;
    int T = 0;
    if (!dir || !toks || parse_ids(toks, &ids, &T) != 0) {
        fprintf(stderr, "m3-gpu forward: --model DIR and --tokens IDS (comma-separated "
                        "non-negative integers) are required\n%s", USAGE);
        return EXIT_USAGE;
    }

    int rc = EXIT_RUN;
    m3_model m;
    m3_err e;
    dev_model dm;
    m3_st_writer *w = NULL;
    float *logits = NULL;
    hipStream_t st = NULL;
    m3g_blas *blas = NULL;
    memset(&m, 0, sizeof m);
    memset(&dm, 0, sizeof dm);
    memset(&e, 0, sizeof e);
    if (m3_model_open(&m, dir, NULL, &e) != 0) {
        fprintf(stderr, "m3-gpu: %s\n", e.msg);
        goto out;
    }
    if (hipStreamCreate(&st) != hipSuccess) {
        fprintf(stderr, "m3-gpu: no usable GPU (hipStreamCreate failed)\n");
        goto out;
    }
    if (dev_model_upload(&dm, &m) != 0) {
        fprintf(stderr, "m3-gpu: uploading the weights of %s failed (device memory?)\n", dir);
        goto out;
    }
    logits = (float *)malloc((size_t)T * (size_t)m.cfg.text.vocab_size * sizeof(float));
    if (!logits || (dumpp && !(w = m3_st_writer_new()))) {
        fprintf(stderr, "m3-gpu: out of host memory\n");
        goto out;
    }
    /* vendor BLAS for prefill GEMMs only in bf16 mode (exact there: X is
     * already bf16); fp32 mode keeps the hand-written fp32 kernels */
    if (mode == 1 && T > 8) {
        const m3_text_config *c = &m.cfg.text;
        size_t wmax = (size_t)c->hidden_size;
        const size_t cand[3] = {(size_t)c->num_heads * c->head_dim,
                                (size_t)c->dense_intermediate_size,
                                (size_t)c->shared_intermediate_size};
        for (int i = 0; i < 3; i++)
            wmax = cand[i] > wmax ? cand[i] : wmax;
        blas = m3g_blas_new(st, (size_t)T * wmax); /* NULL: fallback kernels */
    }
    if (gpu_forward(&m, &dm, ids, T, mode, w, logits, blas, st) != 0)
        goto out;
    if (w) {
        char buf[32];
        snprintf(buf, sizeof buf, "%d", T);
        if (m3_st_writer_meta(w, "m3.dump_version", "1", &e) != 0 ||
            m3_st_writer_meta(w, "m3.mode", mode ? "bf16" : "fp32", &e) != 0 ||
            m3_st_writer_meta(w, "m3.producer", "m3-gpu forward (" M3_GPU_VENDOR ")", &e) != 0 ||
            m3_st_writer_meta(w, "m3.T", buf, &e) != 0 || m3_st_writer_save(w, dumpp, &e) != 0) {
            fprintf(stderr, "m3-gpu: %s\n", e.msg);
            goto out;
        }
    }
    {
        const int V = m.cfg.text.vocab_size;
        const float *last = logits + (size_t)(T - 1) * V;
        int top[5], ntop = V < 5 ? V : 5;
        printf("T=%d top5:", T);
        for (int j = 0; j < ntop; j++) {
            int best = -1;
            for (int v = 0; v < V; v++) {
                int used = 0;
                for (int q = 0; q < j; q++)
                    used |= top[q] == v;
                if (!used && (best < 0 || last[v] > last[best]))
                    best = v;
            }
            top[j] = best;
            printf(" %d:%.6g", best, last[best]);
        }
        printf("\n");
    }
    rc = 0;
out:
    m3g_blas_free(blas);
    dev_model_free(&dm);
    if (st)
        (void)hipStreamDestroy(st);
    m3_st_writer_free(w);
    free(logits);
    free(ids);
    m3_model_close(&m);
    return rc;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whole-string number parsers for the generate options; 0 ok, -1 bad. */
static int parse_f(const char *s, float *out)
{
    char *end;
    float v = strtof(s, &end);
    if (end == s || *end)
        return -1;
    *out = v;
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

static int gen_usage(const char *msg, const char *v)
{
    fprintf(stderr, "m3-gpu generate: %s%s%s\n%s", msg, v ? " " : "", v ? v : "", USAGE);
    return EXIT_USAGE;
}

static int cmd_generate(int argc, char **argv)
{
    const char *dir = NULL, *toks = NULL, *prompt = NULL;
    int mode = 0, greedy_flag = 0, print_ids = 0;
    int have_temp = 0, have_top_p = 0, have_top_k = 0, have_seed = 0;
    float o_temp = 1.0f, o_top_p = 1.0f;
    long long o_top_k = 0, o_seed = 0, max_new = 32;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!strcmp(a, "--greedy")) {
            greedy_flag = 1;
            continue;
        }
        if (!strcmp(a, "--print-ids")) {
            print_ids = 1;
            continue;
        }
        if (!v)
            return gen_usage("option needs a value:", a);
        i++;
        if (!strcmp(a, "--model"))
            dir = v;
        else if (!strcmp(a, "--tokens"))
            toks = v;
        else if (!strcmp(a, "--prompt"))
            prompt = v;
        else if (!strcmp(a, "--dtype") && (!strcmp(v, "fp32") || !strcmp(v, "bf16")))
            mode = !strcmp(v, "bf16");
        else if (!strcmp(a, "--max-new-tokens")) {
            if (parse_i64(v, 0, INT32_MAX, &max_new))
                return gen_usage("--max-new-tokens needs an integer >= 0, got", v);
        } else if (!strcmp(a, "--temperature")) {
            if (parse_f(v, &o_temp) || !(o_temp > 0.0f))
                return gen_usage("--temperature needs a number > 0, got", v);
            have_temp = 1;
        } else if (!strcmp(a, "--top-p")) {
            if (parse_f(v, &o_top_p) || !(o_top_p > 0.0f) || o_top_p > 1.0f)
                return gen_usage("--top-p needs a number in (0, 1], got", v);
            have_top_p = 1;
        } else if (!strcmp(a, "--top-k")) {
            if (parse_i64(v, 0, INT32_MAX, &o_top_k))
                return gen_usage("--top-k needs an integer >= 0, got", v);
            have_top_k = 1;
        } else if (!strcmp(a, "--seed")) {
            if (parse_i64(v, 0, INT64_MAX, &o_seed))
                return gen_usage("--seed needs an integer >= 0, got", v);
            have_seed = 1;
        } else {
            fprintf(stderr, "m3-gpu generate: unknown option or value '%s %s'\n%s", a, v, USAGE);
            return EXIT_USAGE;
        }
    }
    if (!dir)
        return gen_usage("--model DIR is required", NULL);
    if (!!toks == !!prompt)
        return gen_usage("give exactly one of --tokens IDS and --prompt TEXT", NULL);
    if (greedy_flag && (have_temp || have_top_p || have_top_k || have_seed))
        return gen_usage("--greedy cannot be combined with --temperature, --top-p, --top-k or "
                         "--seed", NULL);
    if (prompt && !*prompt)
        return gen_usage("empty prompt", NULL);

    int32_t *ids = NULL;
    int T = 0;
    if (toks && parse_ids(toks, &ids, &T) != 0)
        return gen_usage("--tokens needs comma-separated non-negative integers, got", toks);

    int rc = EXIT_RUN;
    m3_model m;
    m3_err e;
    dev_model dm;
    gpu_sess sess;
    m3_sampler sp;
    int have_sampler = 0, have_sess = 0;
    float *logits = NULL;
    hipStream_t st = NULL;
    m3_tokenizer *tokzr = NULL;
    m3_decode_stream ds;
    memset(&m, 0, sizeof m);
    memset(&dm, 0, sizeof dm);
    memset(&e, 0, sizeof e);
    m3_decode_stream_init(&ds, 0);

    /* the tokenizer: required for --prompt; used for text output when present */
    if (prompt || !print_ids) {
        if (m3_tokenizer_open(&tokzr, dir, &e) != 0) {
            tokzr = NULL;
            if (prompt) {
                fprintf(stderr, "m3-gpu generate: --prompt needs a tokenizer: %s\n", e.msg);
                goto out;
            }
        }
    }
    if (prompt) {
        size_t count = 0;
        if (m3_tokenizer_encode(tokzr, prompt, strlen(prompt), 1, &ids, &count, &e) != 0) {
            fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
            goto out;
        }
        if (count == 0 || count > INT32_MAX) {
            fprintf(stderr, "m3-gpu generate: the prompt encodes to %zu tokens\n", count);
            goto out;
        }
        T = (int)count;
    }
    if (m3_model_open(&m, dir, NULL, &e) != 0) {
        fprintf(stderr, "m3-gpu: %s\n", e.msg);
        goto out;
    }
    {
        /* flags override generation_config.json, which overrides the defaults */
        m3_gen_defaults g = m3_gen_defaults_builtin(m.cfg.text.eos_token_id);
        m3_err ge = {{0}};
        if (m3_gen_config_load(dir, &g, &ge) != 0) {
            fprintf(stderr, "m3-gpu generate: %s\n", ge.msg);
            goto out;
        }
        const int greedy = greedy_flag || (g.greedy && !have_temp && !have_top_p && !have_top_k);
        const float temp = have_temp ? o_temp : g.temperature;
        const float top_p = have_top_p ? o_top_p : g.top_p;
        const int top_k = have_top_k ? (int)o_top_k : g.top_k;
        const int V = m.cfg.text.vocab_size;
        if (m3_sampler_init(&sp, V, greedy, temp, top_k, top_p, (uint64_t)o_seed) != 0) {
            fprintf(stderr, "m3-gpu generate: cannot allocate the sampler for vocab %d\n", V);
            goto out;
        }
        have_sampler = 1;

        /* capacity: prompt + new tokens, capped by the context length */
        int64_t cap = (int64_t)T + max_new;
        const int64_t maxpos = m.cfg.text.max_position_embeddings;
        int capped = 0;
        if (maxpos > 0 && T > maxpos) {
            fprintf(stderr, "m3-gpu generate: the prompt has %d tokens, more than "
                            "max_position_embeddings %lld of %s/config.json\n", T,
                    (long long)maxpos, dir);
            goto out;
        }
        if (maxpos > 0 && cap > maxpos) {
            cap = maxpos;
            capped = 1;
        }
        if (cap > INT32_MAX) {
            fprintf(stderr, "m3-gpu generate: %lld positions are too many\n", (long long)cap);
            goto out;
        }
        logits = (float *)malloc((size_t)V * sizeof(float));
        if (!logits) {
            fprintf(stderr, "m3-gpu: out of host memory\n");
            goto out;
        }
        if (hipStreamCreate(&st) != hipSuccess) {
            fprintf(stderr, "m3-gpu: no usable GPU (hipStreamCreate failed)\n");
            goto out;
        }
        if (dev_model_upload(&dm, &m) != 0) {
            fprintf(stderr, "m3-gpu: uploading the weights of %s failed (device memory?)\n", dir);
            goto out;
        }
        /* no vendor BLAS here: every linear runs the fixed-order kernels */
        if (gpu_sess_init(&sess, &m, &dm, T, (int)cap, mode, NULL, st) != 0)
            goto out;
        have_sess = 1;

        double t0 = now_s();
        if (gpu_step(&sess, ids, T, 0, NULL, logits, 1) != 0)
            goto out;
        const double t_prefill = now_s() - t0;

        if (!print_ids && !tokzr)
            fprintf(stderr, "m3-gpu: %s has no usable tokenizer; printing token ids\n", dir);
        if (tokzr && !print_ids && prompt) /* echo the prompt, as m3-ref */
            fwrite(prompt, 1, strlen(prompt), stdout);
        long long produced = 0;
        int stop_eos = 0, len = T;
        const double t1 = now_s();
        while (produced < max_new) {
            int32_t tok = m3_sample(&sp, logits);
            if (print_ids) {
                printf("%s%d", produced ? "," : "", (int)tok);
            } else if (tokzr) {
                const char *txt;
                size_t txtlen;
                if (m3_tokenizer_decode_stream(tokzr, &ds, tok, &txt, &txtlen, &e) != 0) {
                    printf("\n");
                    fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
                    goto out;
                }
                fwrite(txt, 1, txtlen, stdout);
            } else {
                printf("%s%d", produced ? " " : "", (int)tok);
            }
            fflush(stdout);
            produced++;
            for (int j = 0; j < g.n_eos; j++)
                stop_eos |= tok == g.eos[j];
            if (stop_eos || produced == max_new || len >= cap)
                break;
            if (gpu_step(&sess, &tok, 1, len, NULL, logits, 1) != 0) {
                printf("\n");
                goto out;
            }
            len++;
        }
        const double t_decode = now_s() - t1;
        if (tokzr && !print_ids) {
            const char *txt;
            size_t txtlen;
            if (m3_decode_stream_flush(&ds, &txt, &txtlen, &e) != 0) {
                fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
                goto out;
            }
            fwrite(txt, 1, txtlen, stdout);
        }
        printf("\n");
        fflush(stdout);
        if (stop_eos)
            fprintf(stderr, "m3-gpu: stopped at end-of-sequence token\n");
        else if (produced < max_new && capped)
            fprintf(stderr, "m3-gpu: stopped at the context limit (max_position_embeddings %lld)\n",
                    (long long)maxpos);
        const long long steps = produced > 0 ? produced - 1 : 0;
        fprintf(stderr,
                "m3-gpu: %s (%s); prefill %d tokens in %.3f s (%.1f tokens/s); decode %lld "
                "tokens in %.3f s (%.2f tokens/s)\n",
                greedy ? "greedy" : "sampled", M3_GPU_VENDOR, T, t_prefill,
                t_prefill > 0 ? T / t_prefill : 0.0, steps, t_decode,
                t_decode > 0 ? (double)steps / t_decode : 0.0);
    }
    rc = 0;
out:
    if (have_sess)
        gpu_sess_free(&sess);
    if (have_sampler)
        m3_sampler_free(&sp);
    dev_model_free(&dm);
    if (st)
        (void)hipStreamDestroy(st);
    free(logits);
    free(ids);
    m3_model_close(&m);
    m3_decode_stream_free(&ds);
    m3_tokenizer_free(tokzr);
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
    fprintf(stderr, "m3-gpu: the command must be forward or generate\n%s", USAGE);
    return EXIT_USAGE;
}
