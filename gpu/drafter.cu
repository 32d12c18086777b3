/* drafter.cu — the Eagle3 drafter on the GPU (see drafter.h).
 *
 * Must match: ref/eagle3.c m3_eagle3_combine, m3_eagle3_step (dnorm, RoPE
 * without QK-norm, dense causal attention over the drafter's own cache,
 * SiLU-gated MLP, final norm, lm_head).
 * Spec: M3-EAGLE-DRAFT-2..4, M3-CACHE-3, M3-NUM-MODE-1 (fp32 throughout).
 *
 * Kernels of its own only where gpu/kernels has nothing that computes the
 * same thing: the drafter's RMSNorm (standard x_hat * w or Gemma x_hat *
 * (1 + w), with an optional residual add before it; m3g_residual_rmsnorm is
 * Gemma-only), RoPE without a QK-norm (m3g_headnorm_rope always norms), and
 * SiLU(gate) * up (m3g_swiglu is the clamped SwiGLU-OAI). The linear layers
 * (m3g_linear, mode 0) and attention (m3g_attention) are the target's.
 *
 * Layout: the drafter cache is [cap, nkv * hd] fp32 rows for K and for V,
 * position p in row p (an identity page table of pages of E3_B positions).
 * A call of n rows writes the rows of positions len .. len + n - 1 and then
 * attends causally, so n seeding rows in one call equal n single steps.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drafter.h"
#include "hip_check.h"
#include "kernels/common.cuh"

extern "C" {
#include "rope.h"
}

#define E3_B 128 /* positions per page of the drafter cache (identity paging) */

/* ---- kernels ------------------------------------------------------------- */

/* One block per row r: v = x[r] (+ y[r], stored to xs[r] when y != NULL);
 * out[r] = norm(v): r = 1 / sqrtf(sum(v^2) / n + eps), out = (v * r) * w
 * (gemma: * (1 + w)); w NULL: out = v (a copy). Thread t sums i = t, t + nt,
 * ... then the block tree (the order of k_residual_rmsnorm, so a Gemma norm
 * here equals m3g_residual_rmsnorm's mode 0 bits). Row strides ldo/ldx/ldy/ldxs. */
__global__ void k_e3_norm(float *out, int ldo, const float *x, int ldx, const float *y, int ldy,
                          float *xs, int ldxs, const void *w, int wdt, int n, float eps,
                          int gemma)
{
    __shared__ float sh[32];
    const size_t r = blockIdx.x;
    const float *xr = x + r * (size_t)ldx;
    const float *yr = y ? y + r * (size_t)ldy : NULL;
    float *xsr = xs ? xs + r * (size_t)ldxs : NULL;
    float *orow = out + r * (size_t)ldo;
    const int nt = blockDim.x;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += nt) {
        float v = xr[i];
        if (yr) {
            v = v + yr[i];
            if (xsr)
                xsr[i] = v;
        }
        ss += v * v;
    }
    ss = m3d_block_sum(ss, sh);
    const float rr = 1.0f / sqrtf(ss / (float)n + eps);
    __syncthreads(); /* xs may be x: every read of the first pass is done */
    for (int i = threadIdx.x; i < n; i += nt) {
        const float v = yr ? (xsr ? xsr[i] : xr[i] + yr[i]) : xr[i];
        if (!w) {
            orow[i] = v;
        } else {
            const float wi = m3d_load(w, wdt, (size_t)i);
            orow[i] = (v * rr) * (gemma ? 1.0f + wi : wi);
        }
    }
}

/* Rotate-half RoPE in place (ref m3_rope_apply, fp32): x rows [T] of nheads
 * heads of hd at row stride ld; pairs (j, j + rd/2), tables [T, rd/2].
 * grid (nheads, T), one thread per pair. */
__global__ void k_e3_rope(float *x, int ld, int hd, int rd, const float *cos_t,
                          const float *sin_t)
{
    const int h = blockIdx.x, t = blockIdx.y, half = rd / 2;
    float *v = x + (size_t)t * ld + (size_t)h * hd;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        const float x1 = v[j], x2 = v[j + half];
        const float c = cos_t[(size_t)t * half + j], s = sin_t[(size_t)t * half + j];
        const float a = x1 * c, b = x2 * s, d = x2 * c, e = x1 * s;
        v[j] = a - b;
        v[j + half] = d + e;
    }
}

/* g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + expf(-x)) (ref eagle3.c). */
__global__ void k_e3_silu_mul(float *g, const float *u, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float x = g[i];
        g[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

/* ---- the drafter --------------------------------------------------------- */

struct m3g_eagle3 {
    const m3_eagle3 *d;
    hipStream_t st;
    int H, nh, nkv, hd, I, rd, Vd, tmax;
    int64_t cap, len;
    m3g_mat fc, q, k, v, o, gate, up, down, lm_head;
    const void *fcn[3], *in_n, *hid_n, *post_n, *fin_n;
    int fcn_dt[3], in_dt, hid_dt, post_dt, fin_dt;
    float fin_eps;
    int fin_gemma;
    float *kc, *vc;  /* [cap, nkv * hd] */
    int32_t *pages;  /* identity */
    float *xn3;      /* [tmax, 3H] normed taps */
    float *gb;       /* [tmax, H] combined features */
    float *z;        /* [tmax, 2H] */
    float *qb, *att; /* [tmax, nh * hd] */
    float *tmp, *h, *xn, *ob; /* [tmax, H] */
    float *fg, *fu;  /* [tmax, I] */
    float *emb;      /* [tmax, H] embedding rows */
    float *cos_t, *sin_t; /* [tmax, rd/2] */
    float *feat;     /* [H] recurrent feature */
    float *dlog;     /* [Vd] */
    float *hemb, *hct, *hst; /* host staging */
    void **allocs;
    int nallocs, capallocs;
};

static int e3_track(m3g_eagle3 *g, void *p, m3_err *e)
{
    if (g->nallocs == g->capallocs) {
        const int c = g->capallocs ? 2 * g->capallocs : 64;
        void **n = (void **)realloc(g->allocs, (size_t)c * sizeof *n);
        if (!n)
            return m3_fail(e, "drafter on the device: out of host memory");
        g->allocs = n;
        g->capallocs = c;
    }
    g->allocs[g->nallocs++] = p;
    return 0;
}

static int e3_alloc(m3g_eagle3 *g, float **p, size_t n, m3_err *e)
{
    void *d = NULL;
    if (M3G_HIP(e, hipMalloc(&d, (n ? n : 1) * sizeof(float))))
        return -1;
    if (e3_track(g, d, e) != 0) {
        (void)hipFree(d);
        return -1;
    }
    *p = (float *)d;
    return M3G_HIP(e, hipMemset(d, 0, (n ? n : 1) * sizeof(float)));
}

/* n elements of dtype dt at src onto the device: fp32 / bf16 as stored,
 * others widened to fp32 (exact); *out_dt the device dtype. */
static const void *e3_upload(m3g_eagle3 *g, const void *src, m3_dtype dt, size_t n, int *out_dt,
                             m3_err *e)
{
    void *d = NULL;
    const int raw = dt == M3_BF16 || dt == M3_F32;
    const size_t bytes = n * (raw ? m3_dtype_size(dt) : sizeof(float));
    float *tmp = NULL;
    if (!raw) {
        tmp = (float *)malloc(n * sizeof(float));
        if (!tmp) {
            m3_fail(e, "drafter on the device: out of host memory");
            return NULL;
        }
        for (size_t i = 0; i < n; i++)
            tmp[i] = m3_load_f32(src, dt, i);
    }
    if (M3G_HIP(e, hipMalloc(&d, bytes ? bytes : 4))) {
        free(tmp);
        return NULL;
    }
    if (e3_track(g, d, e) != 0) {
        (void)hipFree(d);
        d = NULL;
    } else if (M3G_HIP(e, hipMemcpy(d, raw ? src : (const void *)tmp, bytes,
                                    hipMemcpyHostToDevice))) {
        d = NULL;
    }
    free(tmp);
    *out_dt = dt == M3_BF16 ? M3G_BF16 : M3G_F32;
    return d;
}

static int e3_mat(m3g_eagle3 *g, m3g_mat *out, const m3_mat *m, m3_err *e)
{
    out->rows = m->rows;
    out->cols = m->cols;
    out->data = e3_upload(g, m->data, m->dtype, (size_t)m->rows * (size_t)m->cols, &out->dtype, e);
    return out->data ? 0 : -1;
}

static int e3_vec(m3g_eagle3 *g, const void **out, int *dt, const m3_vec *v, m3_err *e)
{
    *out = e3_upload(g, v->data, v->dtype, (size_t)v->n, dt, e);
    return *out ? 0 : -1;
}

void m3g_eagle3_free(m3g_eagle3 *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->nallocs; i++)
        (void)hipFree(g->allocs[i]);
    free(g->allocs);
    free(g->hemb);
    free(g->hct);
    free(g->hst);
    free(g);
}

m3g_eagle3 *m3g_eagle3_new(const m3_eagle3 *d, const m3_mat *target_lm_head,
                           m3g_mat target_lm_dev, int tmax, int64_t cap, hipStream_t st,
                           m3_err *e)
{
    const m3_eagle3_config *c = &d->cfg;
    if (tmax < 1 || cap < 1 || cap > INT32_MAX / 2) {
        m3_fail(e, "drafter on the device: bad sizes (%d rows, %lld positions)", tmax,
                (long long)cap);
        return NULL;
    }
    if (c->head_dim > 128 || c->num_heads % c->num_kv_heads != 0) {
        m3_fail(e, "%s: drafter head_dim %d is larger than the device attention takes (128)",
                d->dir, c->head_dim);
        return NULL;
    }
    m3g_eagle3 *g = (m3g_eagle3 *)calloc(1, sizeof *g);
    if (!g) {
        m3_fail(e, "drafter on the device: out of host memory");
        return NULL;
    }
    g->d = d;
    g->st = st;
    g->H = c->hidden_size, g->nh = c->num_heads, g->nkv = c->num_kv_heads, g->hd = c->head_dim;
    g->I = c->intermediate_size, g->rd = c->rotary_dim, g->Vd = c->draft_vocab;
    g->tmax = tmax;
    g->cap = cap;
    const size_t H = (size_t)g->H, N = (size_t)tmax, qw = (size_t)g->nh * g->hd;
    const size_t kvw = (size_t)g->nkv * g->hd, half = (size_t)(g->rd / 2 > 0 ? g->rd / 2 : 1);
    const size_t npages = ((size_t)cap + E3_B - 1) / E3_B;
    int bad = e3_mat(g, &g->fc, &d->fc, e) || e3_mat(g, &g->q, &d->q, e) ||
              e3_mat(g, &g->k, &d->k, e) || e3_mat(g, &g->v, &d->v, e) ||
              e3_mat(g, &g->o, &d->o, e) || e3_mat(g, &g->gate, &d->gate, e) ||
              e3_mat(g, &g->up, &d->up, e) || e3_mat(g, &g->down, &d->down, e) ||
              e3_vec(g, &g->in_n, &g->in_dt, &d->input_norm, e) ||
              e3_vec(g, &g->hid_n, &g->hid_dt, &d->hidden_norm, e) ||
              e3_vec(g, &g->post_n, &g->post_dt, &d->post_norm, e) ||
              e3_vec(g, &g->fin_n, &g->fin_dt, &d->norm, e);
    for (int j = 0; j < 3 && !bad; j++)
        if (d->has_fc_norm)
            bad = e3_vec(g, &g->fcn[j], &g->fcn_dt[j], &d->fc_norm[j], e);
    if (!bad) { /* the target's lm_head when the drafter borrows it (same host data) */
        if (target_lm_dev.data && target_lm_head && d->lm_head.data == target_lm_head->data &&
            target_lm_dev.rows == d->lm_head.rows && target_lm_dev.cols == d->lm_head.cols)
            g->lm_head = target_lm_dev;
        else
            bad = e3_mat(g, &g->lm_head, &d->lm_head, e);
    }
    /* the borrowed final norm is the target's (Gemma, the target's eps; ref eagle3.c) */
    g->fin_gemma = d->norm_from_target ? 1 : c->gemma_norm;
    g->fin_eps = d->norm_from_target ? d->target_eps : c->rms_norm_eps;
    bad = bad || e3_alloc(g, &g->kc, (size_t)cap * kvw, e) ||
          e3_alloc(g, &g->vc, (size_t)cap * kvw, e) ||
          e3_alloc(g, (float **)&g->pages, npages, e) || e3_alloc(g, &g->xn3, N * 3 * H, e) ||
          e3_alloc(g, &g->gb, N * H, e) || e3_alloc(g, &g->z, N * 2 * H, e) ||
          e3_alloc(g, &g->qb, N * qw, e) || e3_alloc(g, &g->att, N * qw, e) ||
          e3_alloc(g, &g->tmp, N * H, e) || e3_alloc(g, &g->h, N * H, e) ||
          e3_alloc(g, &g->xn, N * H, e) || e3_alloc(g, &g->ob, N * H, e) ||
          e3_alloc(g, &g->fg, N * (size_t)g->I, e) || e3_alloc(g, &g->fu, N * (size_t)g->I, e) ||
          e3_alloc(g, &g->emb, N * H, e) || e3_alloc(g, &g->cos_t, N * half, e) ||
          e3_alloc(g, &g->sin_t, N * half, e) || e3_alloc(g, &g->feat, H, e) ||
          e3_alloc(g, &g->dlog, (size_t)g->Vd, e);
    if (!bad) {
        g->hemb = (float *)malloc(N * H * sizeof(float));
        g->hct = (float *)malloc(N * half * sizeof(float));
        g->hst = (float *)malloc(N * half * sizeof(float));
        int32_t *pt = (int32_t *)malloc(npages * sizeof(int32_t));
        bad = !g->hemb || !g->hct || !g->hst || !pt;
        for (size_t p = 0; !bad && p < npages; p++)
            pt[p] = (int32_t)p;
        if (bad)
            m3_fail(e, "drafter on the device: out of host memory");
        bad = bad || M3G_HIP(e, hipMemcpy(g->pages, pt, npages * sizeof(int32_t),
                                          hipMemcpyHostToDevice));
        free(pt);
    }
    if (bad) {
        m3_fail_prefix(e, "%s: uploading the drafter or allocating its cache of %lld positions",
                       d->dir, (long long)cap);
        m3g_eagle3_free(g);
        return NULL;
    }
    return g;
}

int64_t m3g_eagle3_len(const m3g_eagle3 *g) { return g->len; }

void m3g_eagle3_truncate(m3g_eagle3 *g, int64_t len)
{
    if (len < 0)
        len = 0;
    if (len < g->len)
        g->len = len;
}

static hipError_t e3_norm(const m3g_eagle3 *g, float *out, int ldo, const float *x, int ldx,
                          const float *y, int ldy, float *xs, int ldxs, const void *w, int wdt,
                          int T, float eps, int gemma)
{
    hipLaunchKernelGGL(k_e3_norm, dim3(T), dim3(256), 0, g->st, out, ldo, x, ldx, y, ldy, xs,
                       ldxs, w, wdt, g->H, eps, gemma);
    return hipGetLastError();
}

/* The drafter forward of n rows at positions len.. with tokens toks and
 * input features fin (device [n, H]); see drafter.h. */
static int e3_forward(m3g_eagle3 *g, const int32_t *toks, int n, const float *fin, float *dlog,
                      m3_err *e)
{
    const m3_eagle3 *d = g->d;
    const m3_eagle3_config *c = &d->cfg;
    const int H = g->H, nh = g->nh, nkv = g->nkv, hd = g->hd, I = g->I, rd = g->rd;
    const int kvw = nkv * hd, qw = nh * hd, half = rd / 2;
    const float eps = c->rms_norm_eps;
    const int64_t pos0 = g->len, mp = c->max_position_embeddings;
    hipStream_t st = g->st;
    /* k / v go straight into the cache rows of pos0..; the residual of the
     * attention is hidden_norm(f) with norm_before_residual, else f */
    float *krow = g->kc + (size_t)pos0 * kvw, *vrow = g->vc + (size_t)pos0 * kvw;
    const float *res = c->norm_before_residual ? g->z + H : fin;
    const int ldr = c->norm_before_residual ? 2 * H : H;
    const float *olast = g->ob + (size_t)(n > 0 ? n - 1 : 0) * H;
    if (n < 1 || n > g->tmax)
        return m3_fail(e, "drafter on the device: %d rows (at most %d per call)", n, g->tmax);
    /* the checks of ref m3_eagle3_step, at the first position that fails them */
    const int64_t over_cap = pos0 + n > g->cap ? g->cap : INT64_MAX;
    const int64_t over_mp = mp > 0 && pos0 + n > mp ? (pos0 > mp ? pos0 : mp) : INT64_MAX;
    if (over_cap != INT64_MAX && over_cap <= over_mp)
        return m3_fail(e, "drafter: context overflow: %lld cached + 1 new position exceed the "
                          "drafter state capacity of %lld",
                       (long long)over_cap, (long long)g->cap);
    if (over_mp != INT64_MAX)
        return m3_fail(e, "drafter: position %lld exceeds max_position_embeddings %lld of %s",
                       (long long)over_mp, (long long)mp, d->dir);
    for (int t = 0; t < n; t++)
        if (toks[t] < 0 || toks[t] >= d->target_vocab)
            return m3_fail(e, "drafter: token %d is out of range [0, %d)", (int)toks[t],
                           d->target_vocab);
    /* embedding rows (fp32, as stored) and the RoPE tables on the host, as ref */
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < H; i++)
            g->hemb[(size_t)t * H + i] = m3_mat_at(&d->embed, toks[t], i);
        if (rd > 0)
            m3_rope_table(g->hct + (size_t)t * half, g->hst + (size_t)t * half, pos0 + t, rd,
                          c->rope_theta, M3_MODE_FP32);
    }
    M3G_TRY(e, hipMemcpyAsync(g->emb, g->hemb, (size_t)n * H * sizeof(float), hipMemcpyHostToDevice,
                        st), fail);
    if (rd > 0) {
        M3G_TRY(e, hipMemcpyAsync(g->cos_t, g->hct, (size_t)n * half * sizeof(float),
                            hipMemcpyHostToDevice, st), fail);
        M3G_TRY(e, hipMemcpyAsync(g->sin_t, g->hst, (size_t)n * half * sizeof(float),
                            hipMemcpyHostToDevice, st), fail);
    }
    /* z = cat(input_layernorm(embed(t)), hidden_norm(f)) */
    M3G_TRY(e, e3_norm(g, g->z, 2 * H, g->emb, H, NULL, 0, NULL, 0, g->in_n, g->in_dt, n, eps,
                 c->gemma_norm), fail);
    M3G_TRY(e, e3_norm(g, g->z + H, 2 * H, fin, H, NULL, 0, NULL, 0, g->hid_n, g->hid_dt, n, eps,
                 c->gemma_norm), fail);
    /* q; k / v into the cache; RoPE of q and k */
    M3G_TRY(e, m3g_linear(g->qb, qw, g->z, g->q, n, 0, NULL, st), fail);
    M3G_TRY(e, m3g_linear(krow, kvw, g->z, g->k, n, 0, NULL, st), fail);
    M3G_TRY(e, m3g_linear(vrow, kvw, g->z, g->v, n, 0, NULL, st), fail);
    if (rd > 0) {
        const int thr = half < 32 ? 32 : (half > 256 ? 256 : (half + 31) / 32 * 32);
        hipLaunchKernelGGL(k_e3_rope, dim3(nh, n), dim3(thr), 0, st, g->qb, qw, hd, rd, g->cos_t,
                           g->sin_t);
        M3G_TRY(e, hipGetLastError(), fail);
        hipLaunchKernelGGL(k_e3_rope, dim3(nkv, n), dim3(thr), 0, st, krow, kvw, hd, rd,
                           g->cos_t, g->sin_t);
        M3G_TRY(e, hipGetLastError(), fail);
    }
    M3G_TRY(e,
            m3g_attention(g->att, g->qb, g->kc, g->vc, g->pages, E3_B, pos0, n, nh, nkv, hd, NULL,
                          0, 0, st),
            fail);
    M3G_TRY(e, m3g_linear(g->tmp, H, g->att, g->o, n, 0, NULL, st), fail);
    /* h1 = f + attn (hidden_norm(f) + attn with norm_before_residual); x = post norm */
    M3G_TRY(e, e3_norm(g, g->xn, H, res, ldr, g->tmp, H, g->h, H, g->post_n, g->post_dt, n, eps,
                 c->gemma_norm), fail);
    /* h2 = h1 + down(silu(gate x) * up x); o = norm(h2) */
    M3G_TRY(e, m3g_linear(g->fg, I, g->xn, g->gate, n, 0, NULL, st), fail);
    M3G_TRY(e, m3g_linear(g->fu, I, g->xn, g->up, n, 0, NULL, st), fail);
    {
        const int64_t ne = (int64_t)n * I;
        hipLaunchKernelGGL(k_e3_silu_mul, dim3((unsigned)((ne + 255) / 256)), dim3(256), 0, st,
                           g->fg, g->fu, ne);
        M3G_TRY(e, hipGetLastError(), fail);
    }
    M3G_TRY(e, m3g_linear(g->tmp, H, g->fg, g->down, n, 0, NULL, st), fail);
    M3G_TRY(e, e3_norm(g, g->ob, H, g->h, H, g->tmp, H, g->h, H, g->fin_n, g->fin_dt, n, g->fin_eps,
                 g->fin_gemma), fail);
    if (dlog)
        M3G_TRY(e, m3g_linear(g->dlog, g->Vd, olast, g->lm_head, 1, 0, NULL, st), fail);
    M3G_TRY(e,
            hipMemcpyAsync(g->feat, olast, (size_t)H * sizeof(float), hipMemcpyDeviceToDevice, st),
            fail);
    M3G_TRY(e, hipStreamSynchronize(st), fail);
    if (dlog)
        M3G_TRY(e, hipMemcpy(dlog, g->dlog, (size_t)g->Vd * sizeof(float), hipMemcpyDeviceToHost),
                fail);
    g->len = pos0 + n;
    return 0;
fail:
    return -1;
}

int m3g_eagle3_seed(m3g_eagle3 *g, const float *aux, int aux_rows, const int32_t *toks, int n,
                    float *dlog, m3_err *e)
{
    const int H = g->H;
    if (n < 1 || n > g->tmax || n > aux_rows)
        return m3_fail(e, "drafter on the device: %d rows to seed (at most %d)", n,
                       g->tmax < aux_rows ? g->tmax : aux_rows);
    /* g = fc(cat(fc_norm_0(a_0), fc_norm_1(a_1), fc_norm_2(a_2))) for the n rows */
    for (int j = 0; j < 3; j++)
        M3G_TRY(e,
                e3_norm(g, g->xn3 + (size_t)j * H, 3 * H, aux + (size_t)j * aux_rows * H, H, NULL,
                        0, NULL, 0, g->d->has_fc_norm ? g->fcn[j] : NULL, g->fcn_dt[j], n,
                        g->d->cfg.rms_norm_eps, g->d->cfg.gemma_norm),
                fail);
    M3G_TRY(e, m3g_linear(g->gb, H, g->xn3, g->fc, n, 0, NULL, g->st), fail);
    return e3_forward(g, toks, n, g->gb, dlog, e);
fail:
    return -1;
}

int m3g_eagle3_step(m3g_eagle3 *g, int32_t token, float *dlog, m3_err *e)
{
    return e3_forward(g, &token, 1, g->feat, dlog, e);
}
