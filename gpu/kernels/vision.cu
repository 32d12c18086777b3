/* vision.cu — the vision tower's own kernels: LayerNorm with bias, bias add
 * with exact-erf GELU and residual, the 3D-RoPE apply, full (non-causal)
 * attention over one segment of patches, and the scatter of feature rows
 * into the placeholder rows of the text embeddings. The GEMMs are
 * m3g_linear (linear.cu); host orchestration is gpu/vision.cu.
 *
 * Must match: ref/layernorm.c m3_layernorm; ref/vision.c linear_bias (the
 * bias added to the unrounded matvec, then one rounding), m3_gelu,
 * segment_attention, the RoPE step of m3_vision_forward (ref/rope.c
 * m3_rope_apply in fp32, then the mode rounding); ref/multimodal.c
 * m3_mm_embed (feature rows copied as they are).
 * Spec: M3-VIS-LN-1, M3-VIS-MLP-1 (GELU = 0.5 x (1 + erf(x / sqrt 2)),
 * evaluated in double as ref), M3-VIS-ATTN-1, M3-VIS-ROPE-2, M3-VIS-SEG-1,
 * M3-VIS-LAYER-1, M3-EMB-3, M3-NUM-BF16-2.
 *
 * Summation orders are the reference's: LayerNorm statistics are serial
 * double sums (one thread per row); attention scores are serial fp32 dots
 * over the head dims, the softmax denominator a serial ascending sum over the
 * keys, and each output dim a serial ascending sum over the keys (the keys
 * are staged through shared-memory tiles, so the order is kept). Remaining
 * differences from ref: the device expf / erf (a few ulp at most).
 *
 * Performance structure: simple and correct first. Attention is one block per
 * (head, query) that recomputes each score three times (max, sum, P.V) and
 * reads K/V rows uncoalesced; LayerNorm statistics run on one thread per row.
 * Tuning next: a tiled flash-style kernel (Q tile x K tile in shared memory,
 * MMA for the dots) for the bf16 mode, where the fixed orders are not needed.
 */
#include <math.h>
#include "common.cuh"
#include "kernels.h"

/* ---- LayerNorm -------------------------------------------------------------- */

/* grid T, block 256: thread 0 computes mean and 1/std exactly as ref (serial
 * double sums), then every thread normalises a strided slice. */
__global__ void k_vis_layernorm(float *y, const float *x, const void *w, int wdt, const void *b,
                                int bdt, int n, float eps, int mode)
{
    __shared__ float stats[2];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (int i = 0; i < n; i++)
            sum += xr[i];
        const float mean = (float)(sum / n);
        double ss = 0.0;
        for (int i = 0; i < n; i++) {
            const double d = (double)xr[i] - (double)mean;
            ss += d * d;
        }
        stats[0] = mean;
        stats[1] = (float)(1.0 / sqrt(ss / n + (double)eps));
    }
    __syncthreads();
    const float mean = stats[0], inv = stats[1];
    /* every thread has read the statistics before any row element is
     * overwritten (y may alias x): the reads of x below are per element */
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = (xr[i] - mean) * inv * m3d_load(w, wdt, (size_t)i) + m3d_load(b, bdt, (size_t)i);
        yr[i] = m3d_round(v, mode);
    }
}

hipError_t m3g_layernorm(float *y, const float *x, const void *w, int w_dtype, const void *b,
                         int b_dtype, int T, int n, float eps, int mode, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (n <= 0)
        return hipErrorInvalidValue;
    hipLaunchKernelGGL(k_vis_layernorm, dim3(T), dim3(256), 0, st, y, x, w, w_dtype, b, b_dtype,
                       n, eps, mode);
    return hipGetLastError();
}

/* ---- bias, GELU, residual ----------------------------------------------------- */

__device__ __forceinline__ float m3d_gelu(float x)
{
    const double v = (double)x;
    return (float)(0.5 * v * (1.0 + erf(v / sqrt(2.0))));
}

__global__ void k_vis_bias_act(float *y, int64_t T, int n, const void *b, int bdt, int gelu,
                               float *resid, int mode)
{
    const int64_t total = T * n;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % n);
        float v = y[i];
        if (b)
            v = m3d_round(v + m3d_load(b, bdt, (size_t)c), mode);
        if (gelu)
            v = m3d_round(m3d_gelu(v), mode);
        y[i] = v;
        if (resid)
            resid[i] = m3d_round(resid[i] + v, mode);
    }
}

hipError_t m3g_bias_act(float *y, const void *b, int b_dtype, int64_t T, int n, int gelu,
                        float *resid, int mode, hipStream_t st)
{
    if (T <= 0 || n <= 0)
        return hipSuccess;
    int64_t nb = (T * n + 255) / 256;
    if (nb > 65535)
        nb = 65535;
    hipLaunchKernelGGL(k_vis_bias_act, dim3((unsigned)nb), dim3(256), 0, st, y, T, n, b, b_dtype,
                       gelu, resid, mode);
    return hipGetLastError();
}

/* ---- 3D RoPE apply ---------------------------------------------------------- */

/* grid (T, nh), block hd rounded up to 32: rotate-half over the first rd dims
 * in fp32 (pairs (j, j + rd/2)), dims >= rd pass through, then the mode
 * rounding of every dim. */
__global__ void k_vis_rope(float *x, int nh, int hd, int rd, const float *cos_t,
                           const float *sin_t, int mode)
{
    const int t = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    const int half = rd / 2;
    float *v = x + ((size_t)t * nh + h) * hd;
    float o = 0.0f;
    if (j < hd) {
        o = v[j];
        if (j < rd) {
            const int i = j < half ? j : j - half;
            const float c = cos_t[(size_t)t * half + i], s = sin_t[(size_t)t * half + i];
            const float x1 = v[i], x2 = v[i + half];
            o = j < half ? x1 * c - x2 * s : x2 * c + x1 * s;
        }
    }
    __syncthreads(); /* every read of the row is done before the writes */
    if (j < hd)
        v[j] = m3d_round(o, mode);
}

hipError_t m3g_vision_rope(float *x, int T, int nh, int hd, int rd, const float *cos_t,
                           const float *sin_t, int mode, hipStream_t st)
{
    if (T <= 0 || nh <= 0)
        return hipSuccess;
    if (hd <= 0 || hd > 1024 || rd > hd || rd % 2 != 0)
        return hipErrorInvalidValue;
    hipLaunchKernelGGL(k_vis_rope, dim3(T, nh), dim3((hd + 31) / 32 * 32), 0, st, x, nh, hd, rd,
                       cos_t, sin_t, mode);
    return hipGetLastError();
}

/* ---- full attention over one segment ------------------------------------------- */

/* Scaled score of key j for the query held in qs (serial fp32 dot, as ref). */
__device__ __forceinline__ float vis_score(const float *qs, const float *k, int j, int Hv, int h,
                                           int hd, float scale)
{
    const float *kj = k + (size_t)j * Hv + (size_t)h * hd;
    float s = 0.0f;
    for (int d = 0; d < hd; d++)
        s += qs[d] * kj[d];
    return s * scale;
}

/* grid (len, nh), block bs (multiple of 32, >= hd). Dynamic shared memory:
 * hd + bs floats (the query, then one tile of bs keys). */
__global__ void k_vis_attention(float *out, const float *q, const float *k, const float *v,
                                int len, int nh, int hd, float scale, int mode)
{
    M3_DYN_SHARED(float, sm);
    __shared__ float red[32];
    __shared__ float tot;
    const int i = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, bs = blockDim.x;
    const int Hv = nh * hd;
    float *qs = sm, *tile = sm + hd;
    for (int d = tid; d < hd; d += bs)
        qs[d] = q[(size_t)i * Hv + (size_t)h * hd + d];
    __syncthreads();

    /* pass 1: the row max (order-free) */
    float mx = -INFINITY;
    for (int j = tid; j < len; j += bs) {
        const float s = vis_score(qs, k, j, Hv, h, hd, scale);
        if (s > mx)
            mx = s;
    }
    mx = m3d_warp_max(mx);
    if ((tid & 31) == 0)
        red[tid >> 5] = mx;
    __syncthreads();
    if (tid == 0) {
        float m = red[0];
        for (int w = 1; w < bs / 32; w++)
            m = fmaxf(m, red[w]);
        tot = m;
    }
    __syncthreads();
    mx = tot;
    __syncthreads();

    /* pass 2: sum of exp(s - max) in ascending key order (thread 0, per tile) */
    float sum = 0.0f;
    for (int j0 = 0; j0 < len; j0 += bs) {
        const int j = j0 + tid;
        if (j < len)
            tile[tid] = expf(vis_score(qs, k, j, Hv, h, hd, scale) - mx);
        __syncthreads();
        if (tid == 0) {
            const int nt = len - j0 < bs ? len - j0 : bs;
            for (int jj = 0; jj < nt; jj++)
                sum += tile[jj];
        }
        __syncthreads();
    }
    if (tid == 0)
        tot = sum;
    __syncthreads();
    sum = tot;

    /* pass 3: out[d] = sum_j round(p_j) v_j[d], ascending j */
    float acc = 0.0f;
    for (int j0 = 0; j0 < len; j0 += bs) {
        const int j = j0 + tid;
        if (j < len)
            tile[tid] = m3d_round(expf(vis_score(qs, k, j, Hv, h, hd, scale) - mx) / sum, mode);
        __syncthreads();
        if (tid < hd) {
            const int nt = len - j0 < bs ? len - j0 : bs;
            const float *vc = v + (size_t)j0 * Hv + (size_t)h * hd + tid;
            for (int jj = 0; jj < nt; jj++)
                acc += tile[jj] * vc[(size_t)jj * Hv];
        }
        __syncthreads();
    }
    if (tid < hd)
        out[(size_t)i * Hv + (size_t)h * hd + tid] = m3d_round(acc, mode);
}

hipError_t m3g_vision_attention(float *out, const float *q, const float *k, const float *v,
                                int len, int nh, int hd, int mode, hipStream_t st)
{
    if (len <= 0 || nh <= 0)
        return hipSuccess;
    if (hd <= 0 || hd > 1024)
        return hipErrorInvalidValue;
    const int bs = hd <= 128 ? 128 : (hd + 31) / 32 * 32;
    const float scale = 1.0f / sqrtf((float)hd); /* as ref: fp32 */
    hipLaunchKernelGGL(k_vis_attention, dim3(len, nh), dim3(bs),
                       (size_t)(hd + bs) * sizeof(float), st, out, q, k, v, len, nh, hd, scale,
                       mode);
    return hipGetLastError();
}

/* ---- placement ------------------------------------------------------------------- */

__global__ void k_scatter_rows(float *dst, int ld, const float *src, const int32_t *rows, int H)
{
    const size_t f = blockIdx.x;
    float *d = dst + (size_t)rows[f] * ld;
    for (int c = threadIdx.x; c < H; c += blockDim.x)
        d[c] = src[f * H + c];
}

hipError_t m3g_scatter_rows(float *dst, int ld, const float *src, const int32_t *rows,
                            int64_t n, int H, hipStream_t st)
{
    if (n <= 0)
        return hipSuccess;
    if (n > 0x7fffffff)
        return hipErrorInvalidValue;
    hipLaunchKernelGGL(k_scatter_rows, dim3((unsigned)n), dim3(128), 0, st, dst, ld, src, rows, H);
    return hipGetLastError();
}
