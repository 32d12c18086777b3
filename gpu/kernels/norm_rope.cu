/* norm_rope.cu — fused residual add + GemmaRMSNorm; per-head QK-norm fused
 * with partial RoPE and the (paged) cache write.
 *
 * Must match: ref/norm.c m3_rmsnorm, m3_rmsnorm_heads; ref/rope.c
 * m3_rope_apply; ref/model.c add_round (residual).
 * Spec: M3-NORM-1 (y = x * rsqrt(mean(x^2) + eps) * (1 + w), fp32 math),
 * M3-ATTN-QKNORM-1 (per-head norm before RoPE), M3-ROPE-1..3 (rotate-half,
 * pairs (j, j + rd/2), dims >= rd pass through), M3-NUM-BF16-2 items 2, 4, 9.
 *
 * Design: one block per row, coalesced strided loops, one block reduction.
 * The attention prologue (m3g_attn_prologue: QK-norm + RoPE of q / index
 * q, K and index-K cache rows, the bf16 V / index-K copies and the range
 * words) is one launch of one block per (job, row, head), bitwise the
 * separate launchers (same device code, nr_head). The norm and the
 * prologue release the next kernel at their start (PDL) so the next GEMV /
 * indexer streams weights / old cache rows meanwhile.
 *
 * Known difference from ref: the sum of squares is a block tree reduction,
 * not the ascending serial sum (within the fp32 tolerance, not bitwise).
 * Timings of the fused forms: docs/designs-tried.md.
 */
#include "common.cuh"
#include "kernels.h"

/* Programmatic dependent launch, producer side (NVIDIA sm_90, CUDA only):
 * let the next kernel of the stream launch now. Only kernels launched with
 * the PDL attribute start early, and every such kernel in gpu/ waits
 * (griddepcontrol.wait: this grid complete, its writes visible) before it
 * reads or writes anything this grid touches: the GEMVs read only weights
 * before the wait, the indexer only the page table and index-K rows of
 * positions < pos0 (kernels.h m3g_msa_indexer). So the release changes no
 * result; it lets the next GEMV stream its first weights while this runs.
 * No-op on AMD and in the emulation. */
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
__device__ __forceinline__ void nr_pdl_release(int on)
{
    if (on)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#else
__device__ __forceinline__ void nr_pdl_release(int on) { (void)on; }
#endif

/* One block per row. Each thread's elements are i = tid, tid + blockDim,
 * ... in that order (its partial sum of squares follows it); they are read
 * NORM_BATCH at a time so the loads of a batch are in flight together (a
 * decode step has one row: a loop of single dependent loads made this
 * kernel ~20 us). x, y and out must not overlap. */
#define NORM_BATCH 8
__global__ void k_residual_rmsnorm(float *__restrict__ x, const float *__restrict__ y,
                                   float *__restrict__ out, const void *w, int w_dtype, int n,
                                   float eps, int mode, int release)
{
    __shared__ float sh[32];
    nr_pdl_release(release);
    float *xr = x + (size_t)blockIdx.x * n;
    float *orow = out + (size_t)blockIdx.x * n;
    const float *yr = y ? y + (size_t)blockIdx.x * n : NULL;
    const int nt = blockDim.x;
    float ss = 0.0f;
    for (int i0 = threadIdx.x; i0 < n; i0 += NORM_BATCH * nt) {
        float v[NORM_BATCH], u[NORM_BATCH];
        for (int j = 0; j < NORM_BATCH; j++) {
            const int i = i0 + j * nt;
            v[j] = i < n ? xr[i] : 0.0f;
            u[j] = yr && i < n ? yr[i] : 0.0f;
        }
        for (int j = 0; j < NORM_BATCH; j++) {
            const int i = i0 + j * nt;
            if (i < n && yr) {
                v[j] = m3d_round(v[j] + u[j], mode);
                xr[i] = v[j];
            }
            if (i < n)
                ss += v[j] * v[j];
        }
    }
    ss = m3d_block_sum(ss, sh);
    const float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i0 = threadIdx.x; i0 < n; i0 += NORM_BATCH * nt) {
        float v[NORM_BATCH], g[NORM_BATCH];
        for (int j = 0; j < NORM_BATCH; j++) {
            const int i = i0 + j * nt;
            v[j] = i < n ? xr[i] : 0.0f;
            g[j] = i < n ? m3d_load(w, w_dtype, i) : 0.0f;
        }
        for (int j = 0; j < NORM_BATCH; j++) {
            const int i = i0 + j * nt;
            if (i < n)
                orow[i] = m3d_round((v[j] * r) * (1.0f + g[j]), mode);
        }
    }
}

hipError_t m3g_residual_rmsnorm_ex(float *x, const float *y, float *out, const void *w,
                                   int w_dtype, int T, int n, float eps, int mode, int release,
                                   hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    hipLaunchKernelGGL(k_residual_rmsnorm, dim3(T), dim3(256), 0, st, x, y, out, w, w_dtype, n,
                       eps, mode, release);
    return hipGetLastError();
}

hipError_t m3g_residual_rmsnorm(float *x, const float *y, float *out, const void *w, int w_dtype,
                                int T, int n, float eps, int mode, hipStream_t st)
{
    return m3g_residual_rmsnorm_ex(x, y, out, w, w_dtype, T, n, eps, mode, 1, st);
}

/* store one result: fp32, or bf16 bits (round to nearest even) */
__device__ __forceinline__ void nr_store(float *p, float v) { *p = v; }
__device__ __forceinline__ void nr_store(uint16_t *p, float v)
{
    *p = (uint16_t)(__float_as_uint(m3d_round_bf16(v)) >> 16);
}

/* QK-norm + RoPE of one head row s [hd] (row t of the tables ct/stb, each
 * [rd/2] already offset to that row): thread j gets the result of dim j
 * (meaningless for j >= hd). Every thread of the block must call it (block
 * reduction, barrier); blockDim.x a multiple of 32, >= hd. Threads j >= hd
 * add exact zeros to the reduction, so any such blockDim gives the same
 * bits. xs: shared [hd]; sh: shared [32]. */
__device__ __forceinline__ float nr_head(const float *s, const void *w, int w_dtype, int hd,
                                         int rd, const float *ct, const float *stb, float eps,
                                         int mode, float *xs, float *sh)
{
    const int j = threadIdx.x;
    const float v = j < hd ? s[j] : 0.0f;
    const float ss = m3d_block_sum(v * v, sh);
    const float r = 1.0f / sqrtf(ss / (float)hd + eps);
    if (j < hd)
        xs[j] = m3d_round((v * r) * (1.0f + m3d_load(w, w_dtype, j)), mode);
    __syncthreads();
    if (j >= hd)
        return 0.0f;

    const int half = rd / 2;
    float o = xs[j];
    if (j < rd) {
        const int i = j < half ? j : j - half;
        const float c = ct[i], sn = stb[i];
        const float x1 = xs[i], x2 = xs[i + half];
        if (j < half) {
            const float a = m3d_round(x1 * c, mode), b = m3d_round(x2 * sn, mode);
            o = m3d_round(a - b, mode);
        } else {
            const float d = m3d_round(x2 * c, mode), e = m3d_round(x1 * sn, mode);
            o = m3d_round(d + e, mode);
        }
    }
    return o;
}

/* grid (nheads, T), block hd rounded up to a multiple of 32 (<= 1024);
 * thread j owns dim j (threads j >= hd only join the reduction). */
template <typename OT>
__global__ void k_headnorm_rope(const float *src, OT *dst, const int32_t *page_table, int B,
                                int64_t pos0, const void *w, int w_dtype, int nheads, int hd,
                                int rd, const float *cos_t, const float *sin_t, float eps,
                                int mode)
{
    M3_DYN_SHARED(float, xs); /* [hd] */
    __shared__ float sh[32];
    const int h = blockIdx.x, t = blockIdx.y, j = threadIdx.x;
    const float *s = src + ((size_t)t * nheads + h) * hd;
    const size_t half = (size_t)(rd / 2);
    const float o = nr_head(s, w, w_dtype, hd, rd, cos_t + (size_t)t * half,
                            sin_t + (size_t)t * half, eps, mode, xs, sh);
    if (j >= hd)
        return;
    const int64_t slot = page_table ? m3d_slot(page_table, pos0 + t, B) : (int64_t)t;
    nr_store(dst + ((size_t)slot * nheads + h) * hd + j, o);
}

hipError_t m3g_headnorm_rope(const float *src, float *dst, const int32_t *page_table, int B,
                             int64_t pos0, const void *w, int w_dtype, int T, int nheads, int hd,
                             int rd, const float *cos_t, const float *sin_t, float eps, int mode,
                             hipStream_t st)
{
    if (T <= 0 || nheads <= 0)
        return hipSuccess;
    if (hd <= 0 || hd > 1024 || rd > hd || rd % 2 != 0)
        return hipErrorInvalidValue;
    hipLaunchKernelGGL(k_headnorm_rope<float>, dim3(nheads, T), dim3((hd + 31) / 32 * 32), hd * sizeof(float), st, src,
                       dst, page_table, B, pos0, w, w_dtype, nheads, hd, rd, cos_t, sin_t, eps,
                       mode);
    return hipGetLastError();
}

hipError_t m3g_headnorm_rope_bf16(const float *src, uint16_t *dst, const int32_t *page_table,
                                  int B, int64_t pos0, const void *w, int w_dtype, int T,
                                  int nheads, int hd, int rd, const float *cos_t,
                                  const float *sin_t, float eps, int mode, hipStream_t st)
{
    if (T <= 0 || nheads <= 0)
        return hipSuccess;
    if (hd <= 0 || hd > 1024 || rd > hd || rd % 2 != 0)
        return hipErrorInvalidValue;
    hipLaunchKernelGGL(k_headnorm_rope<uint16_t>, dim3(nheads, T), dim3((hd + 31) / 32 * 32),
                       hd * sizeof(float), st, src, dst, page_table, B, pos0, w, w_dtype, nheads,
                       hd, rd, cos_t, sin_t, eps, mode);
    return hipGetLastError();
}

/* ---- the attention prologue in one launch ---------------------------------
 * Each job of an m3g_prologue is T x nheads units (row t, head h); a block
 * does one unit: a norm job runs nr_head (the same code as the launchers
 * above, so the same bits), a conversion job (w NULL) copies the row; then
 * the stores of that unit and, with rng, its fold into the exponent range
 * words (the same per-warp reduction and atomic min / max as msa.cu's
 * m3g_to_bf16_ranged: min and max do not depend on the order). Blocks of
 * blockDim = the largest hd rounded up to 32 (extra threads add zeros to
 * the reduction, see nr_head). */

/* The range words' fold of one value per thread (none: this thread has no
 * value); common.cuh m3d_ikr_*. Every thread of the block calls it. */
static __device__ __forceinline__ void pro_range(unsigned *rng, unsigned h, int none)
{
    unsigned lo = M3G_IKR_NONE, hi = 0;
    if (!none)
        m3d_ikr_acc(lo, hi, h);
    m3d_ikr_publish(rng, lo, hi);
}

__global__ void k_attn_prologue(m3g_prologue p)
{
    M3_DYN_SHARED(float, xs); /* [max hd] */
    __shared__ float sh[32];
    nr_pdl_release(!p.no_release);
    const int j = threadIdx.x;
    int64_t u = blockIdx.x;
    int q = 0;
    while (q < p.njobs - 1 && u >= (int64_t)p.T * p.job[q].nheads) {
        u -= (int64_t)p.T * p.job[q].nheads;
        q++;
    }
    const m3g_pro_job &jb = p.job[q];
    const int hd = jb.hd, nh = jb.nheads;
    const int t = (int)(u / nh), h = (int)(u % nh);
    const float *s = jb.src + ((size_t)t * nh + h) * hd;
    float o;
    if (jb.w) {
        const size_t half = (size_t)(p.rd / 2);
        o = nr_head(s, jb.w, jb.w_dtype, hd, p.rd, p.cos_t + (size_t)t * half,
                    p.sin_t + (size_t)t * half, p.eps, p.mode, xs, sh);
    } else {
        o = j < hd ? s[j] : 0.0f;
    }
    const int64_t slot =
        p.page_table && (jb.paged & 3) ? m3d_slot(p.page_table, p.pos0 + t, p.B) : (int64_t)t;
    const size_t r1 = (size_t)((jb.paged & 1) ? slot : (int64_t)t);
    const size_t r2 = (size_t)((jb.paged & 2) ? slot : (int64_t)t);
    unsigned hb = 0;
    if (j < hd) {
        if (jb.dst)
            nr_store(jb.dst + (r1 * nh + h) * hd + j, o);
        if (jb.dst16) {
            hb = __float_as_uint(m3d_round_bf16(o)) >> 16;
            jb.dst16[(r2 * nh + h) * hd + j] = (uint16_t)hb;
        }
    }
    if (jb.rng && jb.dst16)
        pro_range(jb.rng, hb, j >= hd);
}

hipError_t m3g_attn_prologue(const m3g_prologue *p, hipStream_t st)
{
    if (!p || p->njobs < 0 || p->njobs > M3G_PRO_MAXJ)
        return hipErrorInvalidValue;
    if (p->T <= 0 || p->njobs == 0)
        return hipSuccess;
    int64_t units = 0;
    int maxhd = 0;
    for (int q = 0; q < p->njobs; q++) {
        const m3g_pro_job *jb = &p->job[q];
        if (!jb->src || jb->nheads <= 0 || jb->hd <= 0 || jb->hd > 1024)
            return hipErrorInvalidValue;
        if (jb->w && (p->rd > jb->hd || p->rd < 0 || p->rd % 2 != 0 || !p->cos_t || !p->sin_t))
            return hipErrorInvalidValue;
        if ((jb->paged & 3) && !p->page_table)
            return hipErrorInvalidValue;
        units += (int64_t)p->T * jb->nheads;
        maxhd = jb->hd > maxhd ? jb->hd : maxhd;
    }
    if (units > 0x7fffffff)
        return hipErrorInvalidValue;
    const int nt = (maxhd + 31) / 32 * 32;
    hipLaunchKernelGGL(k_attn_prologue, dim3((unsigned)units), dim3(nt), maxhd * sizeof(float),
                       st, *p);
    return hipGetLastError();
}
