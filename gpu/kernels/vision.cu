/* vision.cu — the vision tower's own kernels: LayerNorm with bias, bias add
 * with exact-erf GELU and residual, the 3D-RoPE apply, full (non-causal)
 * attention over one segment of patches, and the scatter of feature rows
 * into the placeholder rows of the text embeddings. The GEMMs are
 * m3g_linear (linear.cu); host orchestration is gpu/vision_host.cu.
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
 * Performance structure: the exact attention kernel (fp32 mode, and every
 * mode off NVIDIA) is one block per (head, query) that recomputes each score
 * three times (max, sum, P.V) and reads K/V rows uncoalesced; in bf16 mode on
 * NVIDIA, k_vis_attn_cp (below; 8 warps and 128 query rows per CTA, or 4
 * and 64 when that leaves SMs without work) does the same attention on
 * tensor cores with ref's rounding points but tensor-core summation
 * orders, on bf16 copies of q/k/v made once per segment and
 * double-buffered with cp.async (k_vis_attn_tc, the same arithmetic on tiles
 * staged from fp32 without overlap, stays as the path without a work area;
 * all three forms give the same bits). LayerNorm
 * statistics still run on one thread per row (serial double sums as ref).
 * m3g_vision_layer is one encoder layer's launch sequence (gpu/vision_host.cu and
 * bench-gpu both run it).
 */
#include <math.h>
#include "common.cuh"
#include "kernels.h"
#include "tc.cuh"

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

#if M3_TC
/* ---- tensor-core attention (bf16 mode, NVIDIA) ------------------------------------
 * The same attention with QK^T and P.V on mma.sync m16n8k16: a CTA of 4 warps
 * takes 64 query rows of one head (16 per warp, the M of the mma), walks the
 * segment's keys in tiles of KT keys twice, staging each tile as bf16 in shared
 * memory (exact: in bf16 mode q, k and v hold bf16 values):
 *   pass 1: the row max M and sum L = sum exp(s - M) of the scores s =
 *           (q . k) * scale (online: L rescaled when M grows);
 *   pass 2: s again, p = bf16(exp(s - M) / L) as ref's rounded probability,
 *           out += p v (fp32 accumulators), out rounded at the end.
 * The exponentials are exp2 of s * scale * log2(e) and p multiplies by 1 / L
 * (as the MSA kernels), so before its bf16 rounding p is within a few fp32
 * ulps of ref's; with the tensor-core summation orders of the dots, of L
 * and of P.V these are the only differences from the exact kernel — inside
 * the bf16 profile (bench-gpu compares the two).
 * HD is hd rounded up to a multiple of 16; the extra dims are staged as
 * zeros (they add nothing to q . k) and never stored. Keys past len get
 * s = -inf. Shared memory: Q [64][HD + 8] + K, V [KT][HD + 8] bf16 (the
 * 8-element pad keeps ldmatrix rows on distinct banks; KT = 64 keys up to
 * HD 96, 32 above): 33.8 KB at HD 80, 34.8 KB at HD 128. */
#define VA_QT 64
#define VA_KT(hd) ((hd) <= 96 ? 64 : 32) /* keys per tile: shared memory <= 48 KB */

/* rows [r0, r0 + nr) x dims [0, HD) of head h of x [len, nh, hd] (fp32) into
 * dst [nr][HD + 8] as bf16; rows >= len and dims >= hd as zeros. Four dims
 * per thread and step (one 16-byte load) when hd % 4 == 0 (M3: 80). */
template <int HD>
__device__ __forceinline__ void va_stage(uint16_t *dst, const float *x, int r0, int nr, int len,
                                         int nh, int hd, int h)
{
    const int LD = HD + 8;
    if ((hd & 3) == 0) {
        for (int i = threadIdx.x; i < nr * (HD / 4); i += blockDim.x) {
            const int r = i / (HD / 4), d = 4 * (i % (HD / 4)), row = r0 + r;
            float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (row < len && d < hd)
                f = *(const float4 *)(x + ((size_t)row * nh + h) * hd + d);
            *(uint2 *)(dst + r * LD + d) =
                make_uint2(m3t_pack_bf16(f.x, f.y), m3t_pack_bf16(f.z, f.w));
        }
        return;
    }
    for (int i = threadIdx.x; i < nr * (HD / 2); i += blockDim.x) {
        const int r = i / (HD / 2), d = 2 * (i % (HD / 2)), row = r0 + r;
        float a = 0.0f, b = 0.0f;
        if (row < len) {
            const float *src = x + ((size_t)row * nh + h) * hd;
            if (d < hd)
                a = src[d];
            if (d + 1 < hd)
                b = src[d + 1];
        }
        *(uint32_t *)(dst + r * LD + d) = m3t_pack_bf16(a, b);
    }
}

/* One warp's state over the key tiles: its 16 query rows as A fragments, the
 * two rows per lane's running max / sum / 1 / L, and the output accumulators. */
template <int HD> struct va_rows {
    uint32_t qa[HD / 16][4];
    float m0, m1, l0, l1, il0, il1;
    float o[HD / 8][4];
};

/* the warp's rows from the 64-row Q tile Qs (row stride HD + 8), state reset */
template <int HD> __device__ __forceinline__ void va_rows_init(va_rows<HD> &R, const uint16_t *Qs)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, mi = lane >> 3, r8 = lane & 7;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        m3t_ldsm4(R.qa[kk], Qs + (w * 16 + r8 + 8 * (mi & 1)) * (HD + 8) + kk * 16 + 8 * (mi >> 1));
    R.m0 = R.m1 = -INFINITY;
    R.l0 = R.l1 = R.il0 = R.il1 = 0.0f;
#pragma unroll
    for (int i = 0; i < HD / 8; i++)
        R.o[i][0] = R.o[i][1] = R.o[i][2] = R.o[i][3] = 0.0f;
}

/* between the passes: the quad's partial sums -> L of each row (>= 1) */
template <int HD> __device__ __forceinline__ void va_rows_total(va_rows<HD> &R)
{
    m3t_row_sum(R.l0, R.l1);
    R.il0 = 1.0f / R.l0;
    R.il1 = 1.0f / R.l1;
}

/* One tile of KT keys from k0 (tiles Ks, and Vs in pass 1, row stride HD + 8)
 * for the warp's rows: pass 0 updates M and L, pass 1 adds p v. c2 = scale *
 * log2(e): the scores in the log2 domain. */
template <int HD, int KT>
__device__ __forceinline__ void va_tile(va_rows<HD> &R, int pass, int k0, int len, float c2,
                                        const uint16_t *Ks, const uint16_t *Vs)
{
    const int LD = HD + 8, lane = threadIdx.x & 31;
    float sc[KT / 8][4];
#pragma unroll
    for (int i = 0; i < KT / 8; i++)
        sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
        for (int np = 0; np < KT / 16; np++)
            m3t_qk16(sc[2 * np], sc[2 * np + 1], R.qa[kk], Ks, LD, np, kk, lane);
#pragma unroll
    for (int nn = 0; nn < KT / 8; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = k0 + 8 * nn + 2 * (lane & 3) + (e & 1);
            sc[nn][e] = key < len ? sc[nn][e] * c2 : -INFINITY;
        }
    if (pass == 0) {
        float x0, x1;
        m3t_row_max<KT / 8>(sc, x0, x1);
        /* key k0 < len is in every tile's first column block, so the new
         * maxima are finite */
        const float n0 = fmaxf(R.m0, x0), n1 = fmaxf(R.m1, x1);
        float e0 = 0.0f, e1 = 0.0f;
#pragma unroll
        for (int nn = 0; nn < KT / 8; nn++) {
            e0 += exp2f(sc[nn][0] - n0) + exp2f(sc[nn][1] - n0);
            e1 += exp2f(sc[nn][2] - n1) + exp2f(sc[nn][3] - n1);
        }
        R.l0 = R.l0 * exp2f(R.m0 - n0) + e0; /* m0 = -inf: l0 = 0, exp = 0 */
        R.l1 = R.l1 * exp2f(R.m1 - n1) + e1;
        R.m0 = n0;
        R.m1 = n1;
        return;
    }
#pragma unroll
    for (int kk = 0; kk < KT / 16; kk++) { /* 16 keys per k-step */
        uint32_t pa[4];
        pa[0] = m3t_pack_bf16(exp2f(sc[2 * kk][0] - R.m0) * R.il0,
                              exp2f(sc[2 * kk][1] - R.m0) * R.il0);
        pa[1] = m3t_pack_bf16(exp2f(sc[2 * kk][2] - R.m1) * R.il1,
                              exp2f(sc[2 * kk][3] - R.m1) * R.il1);
        pa[2] = m3t_pack_bf16(exp2f(sc[2 * kk + 1][0] - R.m0) * R.il0,
                              exp2f(sc[2 * kk + 1][1] - R.m0) * R.il0);
        pa[3] = m3t_pack_bf16(exp2f(sc[2 * kk + 1][2] - R.m1) * R.il1,
                              exp2f(sc[2 * kk + 1][3] - R.m1) * R.il1);
#pragma unroll
        for (int np = 0; np < HD / 16; np++)
            m3t_pv16(R.o[2 * np], R.o[2 * np + 1], pa, Vs, LD, kk, np, lane);
    }
}

/* the warp's rows of out [len, nh, hd] (rows >= len and dims >= hd not stored) */
template <int HD>
__device__ __forceinline__ void va_rows_store(const va_rows<HD> &R, float *out, int q0, int len,
                                              int nh, int hd, int h)
{
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int ra = q0 + w * 16 + (lane >> 2), rb = ra + 8;
#pragma unroll
    for (int nn = 0; nn < HD / 8; nn++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = e < 2 ? ra : rb, d = 8 * nn + 2 * (lane & 3) + (e & 1);
            if (row < len && d < hd)
                out[((size_t)row * nh + h) * hd + d] = m3d_round_bf16(R.o[nn][e]);
        }
}

template <int HD>
__global__ void __launch_bounds__(128)
    k_vis_attn_tc(float *out, const float *q, const float *k, const float *v, int len, int nh,
                  int hd, float scale)
{
    constexpr int KT = VA_KT(HD);
    __shared__ __align__(16) uint16_t Qs[VA_QT * (HD + 8)];
    __shared__ __align__(16) uint16_t Ks[KT * (HD + 8)];
    __shared__ __align__(16) uint16_t Vs[KT * (HD + 8)];
    const int h = blockIdx.y, q0 = blockIdx.x * VA_QT;
    va_rows<HD> R;

    va_stage<HD>(Qs, q, q0, VA_QT, len, nh, hd, h);
    __syncthreads();
    va_rows_init<HD>(R, Qs);
    const float c2 = scale * 1.4426950408889634f;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            va_rows_total<HD>(R);
        for (int k0 = 0; k0 < len; k0 += KT) {
            __syncthreads(); /* every warp is done with the previous tile */
            va_stage<HD>(Ks, k, k0, KT, len, nh, hd, h);
            if (pass == 1)
                va_stage<HD>(Vs, v, k0, KT, len, nh, hd, h);
            __syncthreads();
            va_tile<HD, KT>(R, pass, k0, len, c2, Ks, Vs);
        }
    }
    va_rows_store<HD>(R, out, q0, len, nh, hd, h);
}

template <int HD>
static hipError_t vis_attn_tc_launch(float *out, const float *q, const float *k, const float *v,
                                     int len, int nh, int hd, float scale, hipStream_t st)
{
    hipLaunchKernelGGL(k_vis_attn_tc<HD>, dim3((len + VA_QT - 1) / VA_QT, nh), dim3(128), 0, st,
                       out, q, k, v, len, nh, hd, scale);
    return hipGetLastError();
}

/* ---- the same on bf16 copies, double-buffered (variant 3) ----------------------------
 * k_vis_bf16_copies writes q, k and v once as bf16 [len, nh, HD] (the rounding
 * va_stage applies, dims >= hd zero); k_vis_attn_cp then copies each tile with
 * cp.async (rows >= len zero-filled), the next tile's copy in flight while the
 * current one is used. Same tiles, same fragments, same operations in the same
 * order as k_vis_attn_tc: bitwise equal to it (bench-gpu checks). Shared
 * memory: K and V tiles twice, 4 KT (HD + 8) bf16 (45 KB at HD 80); the Q
 * tile (16 rows per warp: 64 with NW = 4 warps, 128 with 8) passes through
 * those slots before the first key tile. */
template <int HD>
__global__ void k_vis_bf16_copies(uint16_t *ws, const float *q, const float *k, const float *v,
                                  int64_t rows, int hd)
{
    const float *x = blockIdx.y == 0 ? q : blockIdx.y == 1 ? k : v;
    uint32_t *dst = (uint32_t *)(ws + (size_t)blockIdx.y * rows * HD);
    const int64_t n = rows * (HD / 2);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / (HD / 2);
        const int d = 2 * (int)(i % (HD / 2));
        const float *src = x + r * hd;
        dst[i] = m3t_pack_bf16(d < hd ? src[d] : 0.0f, d + 1 < hd ? src[d + 1] : 0.0f);
    }
}

/* rows [r0, r0 + nr) of head h of x [len, nh, HD] (bf16) into dst [nr][HD + 8]
 * with cp.async, rows >= len as zeros */
template <int HD>
__device__ __forceinline__ void va_copy(uint16_t *dst, const uint16_t *x, int r0, int nr, int len,
                                        int nh, int h)
{
    constexpr int C = HD / 8; /* 16-byte chunks per row */
    for (int i = threadIdx.x; i < nr * C; i += blockDim.x) {
        const int r = i / C, c = i % C, row = r0 + r;
        const uint16_t *src = x + ((size_t)(row < len ? row : 0) * nh + h) * HD + 8 * c;
        m3t_cp16(dst + r * (HD + 8) + 8 * c, src, row < len ? 16 : 0);
    }
}

template <int HD, int NW>
__global__ void __launch_bounds__(NW * 32)
    k_vis_attn_cp(float *out, const uint16_t *q, const uint16_t *k, const uint16_t *v, int len,
                  int nh, int hd, float scale)
{
    constexpr int KT = VA_KT(HD), TILE = KT * (HD + 8), QT = 16 * NW;
    static_assert(QT <= 4 * KT, "the Q tile passes through the four tile slots");
    M3_DYN_SHARED(float, sm_f);
    uint16_t *sm = (uint16_t *)sm_f; /* K slots 0, 1, then V slots 0, 1 */
    const int h = blockIdx.y, q0 = blockIdx.x * QT;
    const int nt = (len + KT - 1) / KT, steps = 2 * nt; /* step s: pass s / nt, tile s % nt */
    va_rows<HD> R;

    va_copy<HD>(sm, q, q0, QT, len, nh, h);
    m3t_cp_commit();
    m3t_cp_wait<0>();
    __syncthreads();
    va_rows_init<HD>(R, sm);
    __syncthreads(); /* the slots are free again */
    const float c2 = scale * 1.4426950408889634f;
    for (int s = 0; s <= steps; s++) {
        if (s < steps) { /* copy step s into slot s & 1 */
            const int k0 = (s % nt) * KT;
            va_copy<HD>(sm + (s & 1) * TILE, k, k0, KT, len, nh, h);
            if (s >= nt)
                va_copy<HD>(sm + (2 + (s & 1)) * TILE, v, k0, KT, len, nh, h);
        }
        m3t_cp_commit();
        if (s == 0)
            continue;
        const int u = s - 1; /* the step used now; its copy is the older group */
        m3t_cp_wait<1>();
        __syncthreads();
        if (u == nt)
            va_rows_total<HD>(R);
        va_tile<HD, KT>(R, u >= nt, (u % nt) * KT, len, c2, sm + (u & 1) * TILE,
                        sm + (2 + (u & 1)) * TILE);
        __syncthreads(); /* slot u & 1 is free for step u + 2 */
    }
    va_rows_store<HD>(R, out, q0, len, nh, hd, h);
}

template <int HD, int NW>
static hipError_t vis_attn_cp_launch(float *out, const float *q, const float *k, const float *v,
                                     int len, int nh, int hd, float scale, uint16_t *ws,
                                     hipStream_t st)
{
    const int64_t rows = (int64_t)len * nh;
    const int64_t pairs = rows * (HD / 2);
    const unsigned gx = (unsigned)(pairs < 4096 * 256 ? (pairs + 255) / 256 : 4096);
    hipLaunchKernelGGL(k_vis_bf16_copies<HD>, dim3(gx, 3), dim3(256), 0, st, ws, q, k, v, rows,
                       hd);
    hipError_t e = hipGetLastError();
    if (e != hipSuccess)
        return e;
    const size_t shm = 4u * VA_KT(HD) * (HD + 8) * sizeof(uint16_t);
    if (shm > 48 * 1024) {
        /* a host-side setting, allowed while a graph is being captured (relaxed) */
        cudaStreamCaptureMode cm = cudaStreamCaptureModeRelaxed;
        (void)cudaThreadExchangeStreamCaptureMode(&cm);
        e = hipFuncSetAttribute(((const void *)k_vis_attn_cp<HD, NW>),
                                hipFuncAttributeMaxDynamicSharedMemorySize, (int)shm);
        (void)cudaThreadExchangeStreamCaptureMode(&cm);
        if (e != hipSuccess)
            return e;
    }
    const uint16_t *w = ws;
    hipLaunchKernelGGL((k_vis_attn_cp<HD, NW>), dim3((len + 16 * NW - 1) / (16 * NW), nh),
                       dim3(32 * NW), shm, st, out, w, w + (size_t)rows * HD,
                       w + 2 * (size_t)rows * HD, len, nh, hd, scale);
    return hipGetLastError();
}

/* warps per CTA of the default: 8 (128 query rows) when the grid still
 * holds a full wave of such CTAs (two per SM), else 4 (twice the CTAs) */
static int va_default_warps(int len, int nh)
{
    return (int64_t)((len + 127) / 128) * nh >= 2 * (int64_t)m3d_sm_count() ? 8 : 4;
}

/* the launchers by CTA size, so that VA_SWITCH can name them by HD alone */
template <int HD>
static hipError_t vis_attn_cp4_launch(float *out, const float *q, const float *k, const float *v,
                                      int len, int nh, int hd, float scale, uint16_t *ws,
                                      hipStream_t st)
{
    return vis_attn_cp_launch<HD, 4>(out, q, k, v, len, nh, hd, scale, ws, st);
}
template <int HD>
static hipError_t vis_attn_cp8_launch(float *out, const float *q, const float *k, const float *v,
                                      int len, int nh, int hd, float scale, uint16_t *ws,
                                      hipStream_t st)
{
    return vis_attn_cp_launch<HD, 8>(out, q, k, v, len, nh, hd, scale, ws, st);
}
#endif

const char *m3g_vision_attention_variant_name(int variant)
{
    static const char *const names[] = {"default", "exact (serial sums, scalar)",
                                        "tensor cores, tiles staged from fp32 (bf16 mode)",
                                        "tensor cores, bf16 copies + cp.async (bf16 mode)",
                                        "the same, 8 warps and 128 query rows per CTA"};
    return variant >= 0 && variant < 5 ? names[variant] : NULL;
}

size_t m3g_vision_attention_ws_elems(int len, int nh, int hd, int mode)
{
#if M3_TC
    if (mode == 1 && len > 0 && nh > 0 && hd > 0 && hd <= 128)
        return 3 * (size_t)len * nh * (size_t)((hd + 15) / 16 * 16);
#endif
    (void)len, (void)nh, (void)hd, (void)mode;
    return 0;
}

#define VA_SWITCH(L, ...)                                                                  \
    switch ((hd + 15) / 16) {                                                              \
    case 1: return L<16>(__VA_ARGS__);                                                     \
    case 2: return L<32>(__VA_ARGS__);                                                     \
    case 3: return L<48>(__VA_ARGS__);                                                     \
    case 4: return L<64>(__VA_ARGS__);                                                     \
    case 5: return L<80>(__VA_ARGS__);                                                     \
    case 6: return L<96>(__VA_ARGS__);                                                     \
    case 7: return L<112>(__VA_ARGS__);                                                    \
    default: return L<128>(__VA_ARGS__);                                                   \
    }

hipError_t m3g_vision_attention_variant(int variant, float *out, const float *q, const float *k,
                                        const float *v, int len, int nh, int hd, int mode,
                                        uint16_t *ws, hipStream_t st)
{
    if (len <= 0 || nh <= 0)
        return hipSuccess;
    if (hd <= 0 || hd > 1024 || variant < 0 || variant > 4)
        return hipErrorInvalidValue;
    const float scale = 1.0f / sqrtf((float)hd); /* as ref: fp32 */
#if M3_TC
    if (variant != 1 && mode == 1 && hd <= 128) {
        if (variant >= 3 || (variant == 0 && ws)) {
            if (!ws)
                return hipErrorInvalidValue;
            if (variant == 3 || (variant == 0 && va_default_warps(len, nh) == 4))
                VA_SWITCH(vis_attn_cp4_launch, out, q, k, v, len, nh, hd, scale, ws, st)
            VA_SWITCH(vis_attn_cp8_launch, out, q, k, v, len, nh, hd, scale, ws, st)
        }
        VA_SWITCH(vis_attn_tc_launch, out, q, k, v, len, nh, hd, scale, st)
    }
#endif
    (void)ws;
    if (variant >= 2)
        return hipErrorInvalidValue; /* no tensor-core kernel for this build / mode / hd */
    const int bs = hd <= 128 ? 128 : (hd + 31) / 32 * 32;
    hipLaunchKernelGGL(k_vis_attention, dim3(len, nh), dim3(bs),
                       (size_t)(hd + bs) * sizeof(float), st, out, q, k, v, len, nh, hd, scale,
                       mode);
    return hipGetLastError();
}
#undef VA_SWITCH

hipError_t m3g_vision_attention(float *out, const float *q, const float *k, const float *v,
                                int len, int nh, int hd, int mode, uint16_t *ws, hipStream_t st)
{
    return m3g_vision_attention_variant(0, out, q, k, v, len, nh, hd, mode, ws, st);
}

/* ---- a linear with bias, and one encoder layer ------------------------------------ */

hipError_t m3g_linear_bias(float *Y, const float *X, m3g_mat W, m3g_vec b, int64_t T, int gelu,
                           float *resid, int mode, m3g_blas *blas, hipStream_t st)
{
    if (T > 0x7fffffff)
        return hipErrorInvalidValue;
    hipError_t r = m3g_linear_product(Y, W.rows, X, W, (int)T, mode, blas, st);
    if (r != hipSuccess)
        return r;
    return m3g_bias_act(Y, b.p, b.dt, T, W.rows, gelu, resid, mode, st);
}

hipError_t m3g_vision_layer(float *h, const m3g_vis_layer *w, const m3g_vis_scratch *s, int64_t T,
                            int nh, int hd, int rd, const float *cos_t, const float *sin_t,
                            const int64_t *seg_start, const int64_t *seg_len, int nseg, float eps,
                            int mode, m3g_blas *blas, hipStream_t st)
{
    const int Hv = nh * hd;
    hipError_t r;
    if (T > 0x7fffffff)
        return hipErrorInvalidValue;
#define VL(call)                                                                           \
    do {                                                                                   \
        if ((r = (call)) != hipSuccess)                                                    \
            return r;                                                                      \
    } while (0)
    VL(m3g_layernorm(s->x, h, w->ln1_w.p, w->ln1_w.dt, w->ln1_b.p, w->ln1_b.dt, (int)T, Hv, eps,
                     mode, st));
    VL(m3g_linear_bias(s->q, s->x, w->q, w->q_b, T, 0, NULL, mode, blas, st));
    VL(m3g_linear_bias(s->k, s->x, w->k, w->k_b, T, 0, NULL, mode, blas, st));
    VL(m3g_linear_bias(s->v, s->x, w->v, w->v_b, T, 0, NULL, mode, blas, st));
    VL(m3g_vision_rope(s->q, (int)T, nh, hd, rd, cos_t, sin_t, mode, st));
    VL(m3g_vision_rope(s->k, (int)T, nh, hd, rd, cos_t, sin_t, mode, st));
    for (int g = 0; g < nseg; g++) {
        const size_t o = (size_t)seg_start[g] * Hv;
        VL(m3g_vision_attention(s->att + o, s->q + o, s->k + o, s->v + o, (int)seg_len[g], nh, hd,
                                mode, s->att_ws, st));
    }
    /* h += round(o_proj(att) + b); then the MLP residual */
    VL(m3g_linear_bias(s->tmp, s->att, w->o, w->o_b, T, 0, h, mode, blas, st));
    VL(m3g_layernorm(s->x, h, w->ln2_w.p, w->ln2_w.dt, w->ln2_b.p, w->ln2_b.dt, (int)T, Hv, eps,
                     mode, st));
    VL(m3g_linear_bias(s->mlp, s->x, w->fc1, w->fc1_b, T, 1, NULL, mode, blas, st));
    VL(m3g_linear_bias(s->tmp, s->mlp, w->fc2, w->fc2_b, T, 0, h, mode, blas, st));
#undef VL
    return hipSuccess;
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
