/* m3-gpu.cu — the M3 text forward on the GPU (HIP API; nvcc through
 * gpu/hip_compat.h), with the CLI subset and dump names of bin/m3-ref so
 * bin/m3-conform can judge its dumps.
 *
 *   m3-gpu forward --model DIR --tokens IDS [--dtype fp32|bf16] [--dump OUT.safetensors]
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
 *  - NOT done: `generate` (decode loop + sampling), the teacher-forced
 *    layer-by-layer mode, vision, multi-sequence batches, CUDA-graph capture
 *    of the decode step, memory for full M3 (all weights are uploaded: only
 *    tiny / layer-pruned checkpoints fit one GPU).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "model.h"
#include "rope.h"
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

typedef struct run_bufs {
    float *h, *xn, *q, *kraw, *att, *tmp, *iq, *ikraw, *bs, *g, *u, *ye, *sh, *logits, *cos_t,
        *sin_t;
    int32_t *blk, *ridx, *pages;
    float *rw, *rscores;
    float **kc, **vc, **ikc; /* per layer */
    uint16_t *ik16;          /* bf16 copy of the layer's index-K cache (bf16 mode) */
    float *aws;              /* split attention workspace (NULL: per-row kernel) */
    size_t aws_n;
} run_bufs;

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

static int gpu_forward(const m3_model *m, dev_model *dm, const int32_t *ids, int T, int mode,
                       m3_st_writer *dump, float *logits_host, m3g_blas *blas, hipStream_t st)
{
    const m3_text_config *c = &m->cfg.text;
    const int H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    const int V = c->vocab_size, L = c->num_layers, rd = c->rotary_dim;
    const int G = c->index_n_heads, ihd = c->index_head_dim, K = c->index_topk;
    const int B = c->index_block_size > 0 ? c->index_block_size : 128;
    const int kx = c->num_experts_per_tok, E = c->num_experts, I = c->intermediate_size;
    const int Is = c->shared_intermediate_size, Id = c->dense_intermediate_size;
    const float eps = c->rms_norm_eps;
    const size_t N = (size_t)T;
    const int npages = (T + B - 1) / B, nbmax = npages;
    int Imax = I * (kx > 0 ? kx : 1);
    Imax = Imax > Id ? Imax : Id;
    Imax = Imax > Is ? Imax : Is;
    run_bufs b;
    char name[160];
    float *hbuf = NULL, *aux = NULL;
    int rc = -1;
    memset(&b, 0, sizeof b);

    /* embeddings and RoPE tables on the host (exact, as ref) */
    hbuf = (float *)malloc(N * (size_t)H * sizeof(float));
    float *ct = (float *)malloc(N * (size_t)(rd / 2 + 1) * sizeof(float));
    float *stb = (float *)malloc(N * (size_t)(rd / 2 + 1) * sizeof(float));
    int32_t *pt = (int32_t *)malloc((size_t)npages * sizeof(int32_t));
    if (!hbuf || !ct || !stb || !pt) {
        fprintf(stderr, "m3-gpu: out of host memory for %d tokens\n", T);
        free(ct);
        free(stb);
        free(pt);
        goto fail;
    }
    for (int t = 0; t < T; t++) {
        if (ids[t] < 0 || ids[t] >= V) {
            fprintf(stderr, "m3-gpu: token %d at index %d is out of range [0, %d) of %s/config.json\n",
                    ids[t], t, V, m->dir);
            free(ct);
            free(stb);
            free(pt);
            goto fail;
        }
        for (int i = 0; i < H; i++)
            hbuf[(size_t)t * H + i] =
                m3_round1(m3_mat_at(&m->w.embed, ids[t], i), (m3_mode)mode);
        m3_rope_table(ct + (size_t)t * (rd / 2), stb + (size_t)t * (rd / 2), t, rd, c->rope_theta,
                      (m3_mode)mode);
    }
    for (int p = 0; p < npages; p++)
        pt[p] = p; /* identity paging: one sequence */

#define DA(ptr, n, T_) dalloc(dm, (void **)&(ptr), (size_t)(n) * sizeof(T_))
    b.kc = (float **)calloc((size_t)L, sizeof(float *));
    b.vc = (float **)calloc((size_t)L, sizeof(float *));
    b.ikc = (float **)calloc((size_t)L, sizeof(float *));
    if (!b.kc || !b.vc || !b.ikc || DA(b.h, N * H, float) || DA(b.xn, N * H, float) ||
        DA(b.q, N * nh * hd, float) || DA(b.kraw, N * nkv * hd, float) ||
        DA(b.att, N * nh * hd, float) || DA(b.tmp, N * H, float) ||
        DA(b.iq, N * (G > 0 ? G : 1) * ihd, float) || DA(b.ikraw, N * ihd, float) ||
        DA(b.bs, N * (G > 0 ? G : 1) * nbmax, float) ||
        DA(b.blk, N * (G > 0 ? G : 1) * (K > 0 ? K : 1), int32_t) || DA(b.g, N * Imax, float) ||
        DA(b.u, N * Imax, float) || DA(b.ye, N * (kx > 0 ? kx : 1) * H, float) ||
        DA(b.sh, N * H, float) || DA(b.logits, N * V, float) || DA(b.cos_t, N * (rd / 2), float) ||
        DA(b.sin_t, N * (rd / 2), float) || DA(b.ridx, N * (kx > 0 ? kx : 1), int32_t) ||
        DA(b.rw, N * (kx > 0 ? kx : 1), float) || DA(b.rscores, N * (E > 0 ? E : 1), float) ||
        DA(b.pages, npages, int32_t)) {
        fprintf(stderr, "m3-gpu: device allocation failed for %d tokens\n", T);
        free(ct);
        free(stb);
        free(pt);
        goto fail;
    }
    for (int l = 0; l < L; l++)
        if (DA(b.kc[l], (size_t)npages * B * nkv * hd, float) ||
            DA(b.vc[l], (size_t)npages * B * nkv * hd, float) ||
            (c->layer_sparse[l] && DA(b.ikc[l], (size_t)npages * B * ihd, float))) {
            fprintf(stderr, "m3-gpu: device allocation failed for the caches\n");
            free(ct);
            free(stb);
            free(pt);
            goto fail;
        }
    /* bf16 index-K cache for the indexer (bf16 mode), and the split-key
     * attention workspace when it fits in 1 GiB (else the per-row kernel) */
    if (mode == 1 && G > 0 && DA(b.ik16, (size_t)npages * B * ihd, uint16_t)) {
        fprintf(stderr, "m3-gpu: device allocation failed for the bf16 index-K cache\n");
        free(ct);
        free(stb);
        free(pt);
        goto fail;
    }
    {
        const size_t wd = m3g_attention_split_ws(B, 0, T, nh, hd, NULL, 0);
        const size_t wsp = G > 0 ? m3g_attention_split_ws(B, 0, T, nh, hd, pt, K) : 0;
        const size_t wn = wd > wsp ? wd : wsp;
        if (wn * sizeof(float) <= ((size_t)1 << 30) && DA(b.aws, wn, float) == 0)
            b.aws_n = wn;
        else
            b.aws = NULL;
    }
#undef DA
    {
        hipError_t e1 = hipMemcpy(b.h, hbuf, N * H * sizeof(float), hipMemcpyHostToDevice);
        hipError_t e2 = hipMemcpy(b.cos_t, ct, N * (rd / 2) * sizeof(float), hipMemcpyHostToDevice);
        hipError_t e3 = hipMemcpy(b.sin_t, stb, N * (rd / 2) * sizeof(float), hipMemcpyHostToDevice);
        hipError_t e4 = hipMemcpy(b.pages, pt, (size_t)npages * sizeof(int32_t), hipMemcpyHostToDevice);
        free(ct);
        free(stb);
        free(pt);
        CK(e1);
        CK(e2);
        CK(e3);
        CK(e4);
    }
    if (dump) {
        aux = (float *)calloc(N * 3 * (size_t)H, sizeof(float));
        if (!aux || dump_dev(dump, "embeddings", M3_F32, 2, T, H, 0, b.h, st) != 0)
            goto fail;
    }

    for (int l = 0; l < L; l++) {
        const dev_layer *d = &dm->layers[l];
        const int sparse = c->layer_sparse[l] != 0;
        /* residual of the previous layer's FFN fused with this layer's input norm */
        CK(m3g_residual_rmsnorm(b.h, l > 0 ? b.tmp : NULL, b.xn, d->in_norm, d->in_norm_dt, T, H,
                                eps, mode, st));
        if (dump) {
            if (l > 0) {
                snprintf(name, sizeof name, "layers.%d.output", l - 1);
                if (dump_dev(dump, name, M3_F32, 2, T, H, 0, b.h, st))
                    goto fail;
            }
            snprintf(name, sizeof name, "layers.%d.input", l);
            if (dump_dev(dump, name, M3_F32, 2, T, H, 0, b.h, st))
                goto fail;
            snprintf(name, sizeof name, "layers.%d.attn_norm", l);
            if (dump_dev(dump, name, M3_F32, 2, T, H, 0, b.xn, st))
                goto fail;
            int slot[3], nt = eagle_tap(L, l, slot);
            if (nt > 0) {
                float *hh = (float *)malloc(N * H * sizeof(float));
                if (!hh || hipMemcpy(hh, b.h, N * H * sizeof(float), hipMemcpyDeviceToHost) !=
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

        /* attention: projections, QK-norm + RoPE into the paged caches */
        CK(m3g_linear(b.q, nh * hd, b.xn, d->q, T, mode, blas, st));
        CK(m3g_linear(b.kraw, nkv * hd, b.xn, d->k, T, mode, blas, st));
        CK(m3g_linear(b.vc[l], nkv * hd, b.xn, d->v, T, mode, blas, st)); /* identity pages */
        CK(m3g_headnorm_rope(b.q, b.q, NULL, B, 0, d->q_norm, d->q_norm_dt, T, nh, hd, rd,
                             b.cos_t, b.sin_t, eps, mode, st));
        CK(m3g_headnorm_rope(b.kraw, b.kc[l], b.pages, B, 0, d->k_norm, d->k_norm_dt, T, nkv, hd,
                             rd, b.cos_t, b.sin_t, eps, mode, st));
        const int32_t *blocks = NULL;
        if (sparse) {
            CK(m3g_linear(b.iq, G * ihd, b.xn, d->iq, T, mode, blas, st));
            CK(m3g_linear(b.ikraw, ihd, b.xn, d->ik, T, mode, blas, st));
            CK(m3g_headnorm_rope(b.iq, b.iq, NULL, B, 0, d->iq_norm, d->iq_norm_dt, T, G, ihd, rd,
                                 b.cos_t, b.sin_t, eps, mode, st));
            CK(m3g_headnorm_rope(b.ikraw, b.ikc[l], b.pages, B, 0, d->ik_norm, d->ik_norm_dt, T, 1,
                                 ihd, rd, b.cos_t, b.sin_t, eps, mode, st));
            if (b.ik16) { /* bf16 mode: the indexer streams a bf16 copy (same values) */
                CK(m3g_to_bf16(b.ik16, b.ikc[l], (int64_t)npages * B * ihd, st));
                CK(m3g_msa_block_scores(b.bs, b.iq, b.ik16, M3G_BF16, b.pages, B, 0, T, G, ihd,
                                        nbmax, st));
            } else {
                CK(m3g_msa_block_scores(b.bs, b.iq, b.ikc[l], M3G_F32, b.pages, B, 0, T, G, ihd,
                                        nbmax, st));
            }
            CK(m3g_msa_select(b.blk, b.bs, 0, T, G, nbmax, B, K, c->index_local_blocks,
                              c->index_init_blocks, st));
            blocks = b.blk;
            if (dump) {
                snprintf(name, sizeof name, "layers.%d.attn.block_indices", l);
                if (dump_dev(dump, name, M3_I32, 3, G, T, K, b.blk, st))
                    goto fail;
            }
        }
        if (b.aws)
            CK(m3g_attention_split(b.att, b.q, b.kc[l], b.vc[l], b.pages, B, 0, T, nh, nkv, hd,
                                   blocks, sparse ? K : 0, mode, b.aws, b.aws_n, st));
        else
            CK(m3g_attention(b.att, b.q, b.kc[l], b.vc[l], b.pages, B, 0, T, nh, nkv, hd, blocks,
                             sparse ? K : 0, mode, st));
        CK(m3g_linear(b.tmp, H, b.att, d->o, T, mode, blas, st));
        CK(m3g_residual_rmsnorm(b.h, b.tmp, b.xn, d->post_norm, d->post_norm_dt, T, H, eps, mode,
                                st));
        if (dump) {
            const char *sfx[3] = {"attn.output", "post_attn", "ffn_norm"};
            const float *src[3] = {b.tmp, b.h, b.xn};
            for (int i = 0; i < 3; i++) {
                snprintf(name, sizeof name, "layers.%d.%s", l, sfx[i]);
                if (dump_dev(dump, name, M3_F32, 2, T, H, 0, src[i], st))
                    goto fail;
            }
        }

        /* feed-forward into b.tmp */
        if (c->layer_moe[l]) {
            CK(m3g_router(b.ridx, b.rw, b.rscores, b.xn, d->router,
                          c->use_routing_bias ? d->rbias : NULL, d->rbias_dt, T, kx, st));
            const int64_t es = (int64_t)I * H;
            CK(m3g_gemv_grouped(b.g, b.xn, H, 0, d->eg, es, d->edt, I, H, b.ridx, T, kx, mode,
                                st));
            CK(m3g_gemv_grouped(b.u, b.xn, H, 0, d->eu, es, d->edt, I, H, b.ridx, T, kx, mode,
                                st));
            CK(m3g_swiglu(b.g, b.g, b.u, (int64_t)N * kx * I, c->swiglu_alpha, c->swiglu_limit,
                          c->swiglu_beta, mode, st));
            CK(m3g_gemv_grouped(b.ye, b.g, (int64_t)kx * I, I, d->ed, es, d->edt, H, I, b.ridx,
                                T, kx, mode, st));
            const float *shared = NULL;
            if (c->n_shared_experts > 0 && d->sg.data) {
                CK(m3g_linear(b.g, Is, b.xn, d->sg, T, mode, blas, st));
                CK(m3g_linear(b.u, Is, b.xn, d->su, T, mode, blas, st));
                CK(m3g_swiglu(b.g, b.g, b.u, (int64_t)N * Is, c->swiglu_alpha, c->swiglu_limit,
                              c->swiglu_beta, mode, st));
                CK(m3g_linear(b.sh, H, b.g, d->sd, T, mode, blas, st));
                shared = b.sh;
            }
            CK(m3g_moe_combine(b.tmp, b.ye, b.rw, shared, T, kx, H, c->routed_scaling_factor,
                               mode, st));
            if (dump) {
                snprintf(name, sizeof name, "layers.%d.moe.topk_index", l);
                if (dump_dev(dump, name, M3_I32, 2, T, kx, 0, b.ridx, st))
                    goto fail;
                snprintf(name, sizeof name, "layers.%d.moe.topk_weight", l);
                if (dump_dev(dump, name, M3_F32, 2, T, kx, 0, b.rw, st))
                    goto fail;
                snprintf(name, sizeof name, "layers.%d.moe.scores", l);
                if (dump_dev(dump, name, M3_F32, 2, T, E, 0, b.rscores, st))
                    goto fail;
            }
        } else {
            const int Il = d->gate.rows;
            CK(m3g_linear(b.g, Il, b.xn, d->gate, T, mode, blas, st));
            CK(m3g_linear(b.u, Il, b.xn, d->up, T, mode, blas, st));
            CK(m3g_swiglu(b.g, b.g, b.u, (int64_t)N * Il, c->swiglu_alpha, c->swiglu_limit,
                          c->swiglu_beta, mode, st));
            CK(m3g_linear(b.tmp, H, b.g, d->down, T, mode, blas, st));
        }
        if (dump) {
            snprintf(name, sizeof name, "layers.%d.mlp.output", l);
            if (dump_dev(dump, name, M3_F32, 2, T, H, 0, b.tmp, st))
                goto fail;
        }
    }

    /* last residual fused with the final norm; lm_head */
    CK(m3g_residual_rmsnorm(b.h, b.tmp, b.xn, dm->final_norm, dm->final_norm_dt, T, H, eps, mode,
                            st));
    CK(m3g_linear(b.logits, V, b.xn, dm->lm_head, T, mode, blas, st));
    CK(hipStreamSynchronize(st));
    CK(hipMemcpy(logits_host, b.logits, N * V * sizeof(float), hipMemcpyDeviceToHost));
    if (dump) {
        snprintf(name, sizeof name, "layers.%d.output", L - 1);
        m3_err e;
        int64_t ashape[2] = {T, 3 * (int64_t)H};
        if (dump_dev(dump, name, M3_F32, 2, T, H, 0, b.h, st) ||
            dump_dev(dump, "final_norm", M3_F32, 2, T, H, 0, b.xn, st) ||
            dump_dev(dump, "logits", M3_F32, 2, T, V, 0, b.logits, st))
            goto fail;
        if (m3_st_writer_add(dump, "eagle3.aux", M3_F32, 2, ashape, aux, &e) != 0) {
            fprintf(stderr, "m3-gpu: dump: %s\n", e.msg);
            goto fail;
        }
    }
    rc = 0;
fail:
    free(hbuf);
    free(aux);
    free(b.kc);
    free(b.vc);
    free(b.ikc);
    return rc; /* device buffers are tracked in dm and freed with it */
}

/* ---- CLI -------------------------------------------------------------------- */

static const char *USAGE =
    "usage: m3-gpu forward --model DIR --tokens IDS [--dtype fp32|bf16] [--dump OUT.safetensors]\n"
    "Run the T token ids through the model on the GPU in one pass (positions 0..T-1); print T\n"
    "and the top-5 of the last row; --dump writes the activations under the names of\n"
    "bin/m3-ref forward (spec/dump.md), to be judged by bin/m3-conform.\n"
    "Status: compile-checked only; see the header of gpu/m3-gpu.cu for what is complete.\n";

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

int main(int argc, char **argv)
{
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "forward") != 0) {
        fprintf(stderr, "m3-gpu: only the forward command exists so far\n%s", USAGE);
        return EXIT_USAGE;
    }
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
