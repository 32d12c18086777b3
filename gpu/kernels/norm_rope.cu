/* norm_rope.cu — fused residual add + GemmaRMSNorm; per-head QK-norm fused
 * with partial RoPE and the (paged) cache write.
 *
 * Must match: ref/norm.c m3_rmsnorm, m3_rmsnorm_heads; ref/rope.c
 * m3_rope_apply; ref/model.c add_round (residual).
 * Spec: M3-NORM-1 (y = x * rsqrt(mean(x^2) + eps) * (1 + w), fp32 math),
 * M3-ATTN-QKNORM-1 (per-head norm before RoPE), M3-ROPE-1..3 (rotate-half,
 * pairs (j, j + rd/2), dims >= rd pass through), M3-NUM-BF16-2 items 2, 4, 9.
 *
 * Known difference from ref: the sum of squares is a block tree reduction,
 * not the ascending serial sum (within the fp32 tolerance, not bitwise).
 *
 * Performance structure: one block per row, coalesced strided loops, one
 * block reduction. Tuning next: float4 loads, fuse the residual-norm of the
 * next layer into the o_proj / down GEMV epilogue when T is small.
 */
#include "common.cuh"
#include "kernels.h"

/* One block per row. Each thread's elements are i = tid, tid + blockDim,
 * ... in that order (its partial sum of squares follows it); they are read
 * NORM_BATCH at a time so the loads of a batch are in flight together (a
 * decode step has one row: a loop of single dependent loads made this
 * kernel ~20 us). x, y and out must not overlap. */
#define NORM_BATCH 8
__global__ void k_residual_rmsnorm(float *__restrict__ x, const float *__restrict__ y,
                                   float *__restrict__ out, const void *w, int w_dtype, int n,
                                   float eps, int mode)
{
    __shared__ float sh[32];
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

hipError_t m3g_residual_rmsnorm(float *x, const float *y, float *out, const void *w, int w_dtype,
                                int T, int n, float eps, int mode, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    hipLaunchKernelGGL(k_residual_rmsnorm, dim3(T), dim3(256), 0, st, x, y, out, w, w_dtype, n,
                       eps, mode);
    return hipGetLastError();
}

/* store one result: fp32, or bf16 bits (round to nearest even) */
__device__ __forceinline__ void nr_store(float *p, float v) { *p = v; }
__device__ __forceinline__ void nr_store(uint16_t *p, float v)
{
    *p = (uint16_t)(__float_as_uint(m3d_round_bf16(v)) >> 16);
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
    const float v = j < hd ? s[j] : 0.0f;
    const float ss = m3d_block_sum(v * v, sh);
    const float r = 1.0f / sqrtf(ss / (float)hd + eps);
    if (j < hd)
        xs[j] = m3d_round((v * r) * (1.0f + m3d_load(w, w_dtype, j)), mode);
    __syncthreads();
    if (j >= hd)
        return;

    const int half = rd / 2;
    float o = xs[j];
    if (j < rd) {
        const int i = j < half ? j : j - half;
        const float c = cos_t[(size_t)t * half + i], sn = sin_t[(size_t)t * half + i];
        const float x1 = xs[i], x2 = xs[i + half];
        if (j < half) {
            const float a = m3d_round(x1 * c, mode), b = m3d_round(x2 * sn, mode);
            o = m3d_round(a - b, mode);
        } else {
            const float d = m3d_round(x2 * c, mode), e = m3d_round(x1 * sn, mode);
            o = m3d_round(d + e, mode);
        }
    }
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
