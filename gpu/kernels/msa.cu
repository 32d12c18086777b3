/* msa.cu — the MSA lightning indexer on the GPU: block scores over the paged
 * index-K cache, and the golden-order top-k block selection.
 *
 * Must match: ref/msa.c m3_msa_block_scores (bitwise: one fp32 accumulator
 * per dot product over d ascending; build with --fmad=false; the one
 * exception is the streaming kernel's tensor-core scores, below) and
 * m3_msa_select (exactly: same total order, same forced blocks).
 * Spec: M3-MSA-SCORE-1, M3-MSA-BLOCK-1, M3-MSA-SELECT-* (forced init and
 * local blocks first ascending, then descending score, ties to the lower
 * id, -inf never selected, -1 padding), M3-MSA-CACHE-1.
 *
 * Design. Decode (m3g_msa_indexer / _ex): one launch for scores and
 * selection. Default on NVIDIA and in the emulation: k_idx ("Streaming
 * indexer"), one block per SM over a range of MSA blocks, warp-private
 * cp.async rings; where the per-launch range check proves every product
 * exact ("FMA exactness"), tensor-core sums on NVIDIA (8 warps, 3 stages,
 * 1 key per lane) or fmaf, bitwise equal to multiply-then-add (M3G_IDX_EXACT
 * on NVIDIA; 12 warps, 2 stages, 4 keys per lane up to 16 MSA blocks per SM
 * else 2); a local top-k per block, a one-atomic ticket and a last-block
 * merge, PDL. hipcc/AMD: the
 * fused kernel ("Fused indexer"). Other shapes:
 * the two-launch path (one block per (key block, query) for the scores,
 * one per (t, g) for the selection); prefill runs it one block per row.
 *
 * Known differences: the tensor-core scores sum the same exact products in
 * the tensor cores' fp32 order, not d ascending: within (d - 1) 2^-23
 * sum|q k| of ref's (M3-TOL-3 covers the rare near tie it can swap), and the
 * selection is the golden order of those scores. Everything else bitwise
 * (scores) and identical (selections). Prefill is correct but not tuned.
 * Designs tried and their timings: docs/designs-tried.md.
 */
#include <math.h>
#include "common.cuh"
#include "kernels.h"
#include "tc.cuh"

#define MSA_KT 32

#ifdef M3_EMU
#define MSA_UNROLL /* g++: no unroll pragma needed */
#else
#define MSA_UNROLL _Pragma("unroll")
#endif

/* Shared by the streaming score loops (mix_stream, idx_unit; k_msa_bs_stream
 * keeps its own loop form, whose PTX these helpers would reorder): the 8
 * fp32 values of a 16-byte chunk of bf16 bits, low half first */
static __device__ __forceinline__ void msa_bf16x8(const uint4 v, float (&kv)[8])
{
    kv[0] = __uint_as_float(v.x << 16);
    kv[1] = __uint_as_float(v.x & 0xffff0000u);
    kv[2] = __uint_as_float(v.y << 16);
    kv[3] = __uint_as_float(v.y & 0xffff0000u);
    kv[4] = __uint_as_float(v.z << 16);
    kv[5] = __uint_as_float(v.z & 0xffff0000u);
    kv[6] = __uint_as_float(v.w << 16);
    kv[7] = __uint_as_float(v.w & 0xffff0000u);
}

/* a + q[0] k[0] + ... + q[N-1] k[N-1], one accumulator in ascending order:
 * FMA 1 fmaf (bitwise the same where every product is exact, see "FMA
 * exactness"), 0 multiply then add (as ref) */
template <int N, int FMA>
static __device__ __forceinline__ float msa_dot(float a, const float *q, const float *k)
{
MSA_UNROLL
    for (int e = 0; e < N; e++) {
        if (FMA)
            a = fmaf(q[e], k[e], a);
        else
            a += q[e] * k[e];
    }
    return a;
}

/* grid (nbmax, T), block 32 * nw threads; shared iq [G][d] + tile [32][d+1]. */
__global__ void k_msa_block_scores(float *bs, const float *iq, const float *ikc,
                                   const int32_t *page_table, int B, int64_t pos0, int G, int d,
                                   int nbmax)
{
    M3_DYN_SHARED(float, smem);
    const int b = blockIdx.x, t = blockIdx.y;
    const int nw = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t pos = pos0 + t;
    const int qb = (int)(pos / B);
    float *out = bs + (size_t)t * G * nbmax + b;
    if (b > qb) { /* the whole block is in the future */
        for (int g = threadIdx.x; g < G; g += blockDim.x)
            out[(size_t)g * nbmax] = -INFINITY;
        return;
    }
    float *qs = smem;            /* [G][d] */
    float *ks = smem + G * d;    /* [MSA_KT][d + 1] */
    for (int e = threadIdx.x; e < G * d; e += blockDim.x)
        qs[e] = iq[(size_t)t * G * d + e];

    const int64_t k0 = (int64_t)b * B;
    const int64_t kend = (k0 + B < pos + 1) ? k0 + B : pos + 1;
    const int64_t page0 = (int64_t)page_table[b] * B;
    float best[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}; /* heads w, w+nw, ... */
    for (int64_t c0 = k0; c0 < kend; c0 += MSA_KT) {
        const int nk = (int)((kend - c0) < MSA_KT ? (kend - c0) : MSA_KT);
        __syncthreads();
        for (int e = threadIdx.x; e < nk * d; e += blockDim.x) {
            const int kk = e / d, i = e % d;
            ks[kk * (d + 1) + i] = ikc[(size_t)(page0 + (c0 - k0) + kk) * d + i];
        }
        __syncthreads();
        for (int gi = 0; gi < 4; gi++) {
            const int g = w + gi * nw;
            if (g >= G)
                break;
            float s = -INFINITY;
            if (lane < nk) {
                float a = 0.0f;
                for (int i = 0; i < d; i++)
                    a += qs[g * d + i] * ks[lane * (d + 1) + i];
                s = a;
            }
            best[gi] = fmaxf(best[gi], m3d_warp_max(s));
        }
    }
    if (lane == 0)
        for (int gi = 0; gi < 4; gi++) {
            const int g = w + gi * nw;
            if (g < G)
                out[(size_t)g * nbmax] = best[gi];
        }
}

/* Streaming block scores (the decode / long-context path): grid (nbmax, T),
 * one thread per key (a CUDA block walks the keys of one MSA block), the
 * key's whole row loaded with 16-byte loads into registers, all NG index
 * heads computed from that one load (iq staged in shared memory, read as
 * float4 broadcasts), block max over the thread block in registers, then
 * warp shuffles and shared memory. BF: the index-K cache holds bf16 bits
 * (bf16 mode: exactly the values of the reference's rounded cache), else
 * fp32. Each dot product is still one fp32 accumulator over d ascending
 * (bitwise as ref). Needs d % 8 == 0. */
template <int BF, int NG>
__global__ void k_msa_bs_stream(float *bs, const float *iq, const void *ikc,
                                const int32_t *page_table, int B, int64_t pos0, int d, int nbmax)
{
    M3_DYN_SHARED(float, smem);
    const int b = blockIdx.x, t = blockIdx.y;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int64_t pos = pos0 + t;
    const int qb = (int)(pos / B);
    float *out = bs + (size_t)t * NG * nbmax + b;
    if (b > qb) {
        for (int g = threadIdx.x; g < NG; g += blockDim.x)
            out[(size_t)g * nbmax] = -INFINITY;
        return;
    }
    float *qs = smem;           /* [NG][d] */
    float *red = smem + NG * d; /* [nw][NG] */
    for (int e = threadIdx.x; e < NG * d; e += blockDim.x)
        qs[e] = iq[(size_t)t * NG * d + e];
    __syncthreads();
    const int64_t k0 = (int64_t)b * B;
    const int64_t kend = (k0 + B < pos + 1) ? k0 + B : pos + 1;
    const int64_t page0 = (int64_t)page_table[b] * B;
    const int nc = d >> 3;                 /* chunks of 8 values */
    const int per = BF ? 16 : 8;           /* chunks per register pass (16 x 16 B) */
    float best[NG];
    for (int g = 0; g < NG; g++)
        best[g] = -INFINITY;
    for (int64_t k = k0 + threadIdx.x; k < kend; k += blockDim.x) {
        const uint4 *row = (const uint4 *)((const char *)ikc +
                                           (size_t)(page0 + (k - k0)) * d * (BF ? 2 : 4));
        float acc[NG];
        for (int g = 0; g < NG; g++)
            acc[g] = 0.0f;
        for (int c0 = 0; c0 < nc; c0 += per) {
            uint4 r[16];
            const int nch = nc - c0 < per ? nc - c0 : per; /* chunks in this pass */
            const int nl = nch * (BF ? 1 : 2);            /* 16-byte loads */
MSA_UNROLL
            for (int u = 0; u < 16; u++)
                if (u < nl)
                    r[u] = row[c0 * (BF ? 1 : 2) + u];
MSA_UNROLL
            for (int cc = 0; cc < (BF ? 16 : 8); cc++) {
                if (cc >= nch)
                    continue;
                float kv[8];
                if (BF) {
                    const uint4 v = r[cc];
                    const uint32_t x[4] = {v.x, v.y, v.z, v.w};
                    for (int e = 0; e < 4; e++) {
                        kv[2 * e] = __uint_as_float(x[e] << 16);
                        kv[2 * e + 1] = __uint_as_float(x[e] & 0xffff0000u);
                    }
                } else {
                    const uint4 v0 = r[BF ? 0 : 2 * cc], v1 = r[BF ? 0 : 2 * cc + 1];
                    const uint32_t x[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
                    for (int e = 0; e < 8; e++)
                        kv[e] = __uint_as_float(x[e]);
                }
                const int i0 = (c0 + cc) * 8;
                for (int g = 0; g < NG; g++) {
                    const float4 qa = *(const float4 *)(qs + g * d + i0);
                    const float4 qb4 = *(const float4 *)(qs + g * d + i0 + 4);
                    float a = acc[g];
                    a += qa.x * kv[0];
                    a += qa.y * kv[1];
                    a += qa.z * kv[2];
                    a += qa.w * kv[3];
                    a += qb4.x * kv[4];
                    a += qb4.y * kv[5];
                    a += qb4.z * kv[6];
                    a += qb4.w * kv[7];
                    acc[g] = a;
                }
            }
        }
        for (int g = 0; g < NG; g++)
            best[g] = fmaxf(best[g], acc[g]);
    }
    for (int g = 0; g < NG; g++) {
        const float m = m3d_warp_max(best[g]);
        if (lane == 0)
            red[w * NG + g] = m;
    }
    __syncthreads();
    if (threadIdx.x < NG) {
        float m = -INFINITY;
        for (int i = 0; i < nw; i++)
            m = fmaxf(m, red[i * NG + threadIdx.x]);
        out[(size_t)threadIdx.x * nbmax] = m;
    }
}

template <int BF>
static void msa_bs_stream_launch(int G, dim3 grid, int nt, size_t shm, hipStream_t st, float *bs,
                                 const float *iq, const void *ikc, const int32_t *page_table,
                                 int B, int64_t pos0, int d, int nbmax)
{
    switch (G) {
    case 1:
        hipLaunchKernelGGL((k_msa_bs_stream<BF, 1>), grid, dim3(nt), shm, st, bs, iq, ikc,
                           page_table, B, pos0, d, nbmax);
        break;
    case 2:
        hipLaunchKernelGGL((k_msa_bs_stream<BF, 2>), grid, dim3(nt), shm, st, bs, iq, ikc,
                           page_table, B, pos0, d, nbmax);
        break;
    case 3:
        hipLaunchKernelGGL((k_msa_bs_stream<BF, 3>), grid, dim3(nt), shm, st, bs, iq, ikc,
                           page_table, B, pos0, d, nbmax);
        break;
    default:
        hipLaunchKernelGGL((k_msa_bs_stream<BF, 4>), grid, dim3(nt), shm, st, bs, iq, ikc,
                           page_table, B, pos0, d, nbmax);
        break;
    }
}

hipError_t m3g_msa_block_scores(float *bs, const float *iq, const void *ikc, int ik_dtype,
                                const int32_t *page_table, int B, int64_t pos0, int T, int G,
                                int d, int nbmax, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (G <= 0 || G > 16 || d <= 0 || B <= 0 || (ik_dtype != M3G_F32 && ik_dtype != M3G_BF16))
        return hipErrorInvalidValue;
    if (G <= 4 && d % 8 == 0) {
        int nt = B < 256 ? (B + 31) / 32 * 32 : 256;
        const size_t shm = sizeof(float) * ((size_t)G * d + (size_t)(nt / 32) * G);
        if (ik_dtype == M3G_BF16)
            msa_bs_stream_launch<1>(G, dim3(nbmax, T), nt, shm, st, bs, iq, ikc, page_table, B,
                                    pos0, d, nbmax);
        else
            msa_bs_stream_launch<0>(G, dim3(nbmax, T), nt, shm, st, bs, iq, ikc, page_table, B,
                                    pos0, d, nbmax);
        return hipGetLastError();
    }
    if (ik_dtype != M3G_F32)
        return hipErrorInvalidValue; /* the tiled kernel reads fp32 only */
    const int nw = G < 4 ? G : 4; /* up to 4 heads per warp */
    const size_t shm = sizeof(float) * ((size_t)G * d + MSA_KT * (size_t)(d + 1));
    hipLaunchKernelGGL(k_msa_block_scores, dim3(nbmax, T), dim3(32 * nw), shm, st, bs, iq,
                       (const float *)ikc, page_table, B, pos0, G, d, nbmax);
    return hipGetLastError();
}

__global__ void k_msa_to_bf16(uint16_t *dst, const float *src, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = (uint16_t)(__float_as_uint(m3d_round_bf16(src[i])) >> 16);
}

hipError_t m3g_to_bf16(uint16_t *dst, const float *src, int64_t n, hipStream_t st)
{
    if (n <= 0)
        return hipSuccess;
    int64_t nb = (n + 255) / 256;
    if (nb > 4096)
        nb = 4096;
    hipLaunchKernelGGL(k_msa_to_bf16, dim3((unsigned)nb), dim3(256), 0, st, dst, src, n);
    return hipGetLastError();
}

/* ---- exponent range words of a bf16 index-K cache (FMA exactness proof) --
 * rng[0] = min over the NONZERO values written of max(exponent field, 1)
 * (M3G_IKR_NONE = 0x1ff when none), rng[1] = max exponent field over all
 * values written (255 for Inf / NaN; 0 when none). See "FMA exactness" in
 * the streaming indexer's section for how k_idx uses them. Updated with
 * atomic min / max: a superset of the range is always safe (it can only
 * make the indexer fall back to multiply-then-add). */
__global__ void k_ikr_reset(unsigned *rng)
{
    if (threadIdx.x == 0)
        rng[0] = M3G_IKR_NONE, rng[1] = 0;
}

/* m3g_to_bf16 that also folds the written values into rng */
__global__ void k_msa_to_bf16_r(uint16_t *dst, const float *src, int64_t n, unsigned *rng)
{
    unsigned lo = M3G_IKR_NONE, hi = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const unsigned h = __float_as_uint(m3d_round_bf16(src[i])) >> 16;
        dst[i] = (uint16_t)h;
        m3d_ikr_acc(lo, hi, h);
    }
    m3d_ikr_publish(rng, lo, hi);
}

__global__ void k_ikr_scan(unsigned *rng, const uint16_t *src, int64_t n)
{
    unsigned lo = M3G_IKR_NONE, hi = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        m3d_ikr_acc(lo, hi, src[i]);
    m3d_ikr_publish(rng, lo, hi);
}

hipError_t m3g_ik_range_reset(unsigned *rng, hipStream_t st)
{
    if (!rng)
        return hipErrorInvalidValue;
    hipLaunchKernelGGL(k_ikr_reset, dim3(1), dim3(32), 0, st, rng);
    return hipGetLastError();
}

hipError_t m3g_to_bf16_ranged(uint16_t *dst, const float *src, int64_t n, unsigned *rng,
                              hipStream_t st)
{
    if (!rng)
        return m3g_to_bf16(dst, src, n, st);
    if (n <= 0)
        return hipSuccess;
    int64_t nb = (n + 255) / 256;
    if (nb > 4096)
        nb = 4096;
    hipLaunchKernelGGL(k_msa_to_bf16_r, dim3((unsigned)nb), dim3(256), 0, st, dst, src, n, rng);
    return hipGetLastError();
}

hipError_t m3g_ik_range_scan(unsigned *rng, const uint16_t *src, int64_t n, hipStream_t st)
{
    if (!rng)
        return hipErrorInvalidValue;
    if (n <= 0)
        return hipSuccess;
    int64_t nb = (n + 255) / 256;
    if (nb > 2048)
        nb = 2048;
    hipLaunchKernelGGL(k_ikr_scan, dim3((unsigned)nb), dim3(256), 0, st, rng, src, n);
    return hipGetLastError();
}

__device__ __forceinline__ int msa_before(float sa, int a, float sb, int b)
{
    return sa > sb || (sa == sb && a < b);
}

__device__ __forceinline__ int msa_forced(int b, int qb, int local_blocks, int init_blocks)
{
    return b < init_blocks || (b <= qb && b > qb - local_blocks);
}

/* The forced blocks of a query in block qb among blocks 0..nb-1, ascending
 * and at most topk (the init blocks, then the local ones; the unforced
 * middle is jumped): written to o when o != NULL; returns their count. */
__device__ __forceinline__ int msa_forced_list(int32_t *o, int nb, int qb, int topk,
                                               int local_blocks, int init_blocks)
{
    int n = 0;
    for (int b = 0; b < nb && n < topk; b++) {
        if (b >= init_blocks && b <= qb - local_blocks) {
            b = qb - local_blocks;
            continue;
        }
        if (o)
            o[n] = b;
        n++;
    }
    return n;
}

/* Up to `need` picks in golden order among the unforced, finite blocks b in
 * [lo, hi) (scores s[b]), by repeated warp argmax "strictly after the
 * previous pick"; pick r goes to cs[r] / cb[r] (cb = -1 past the last). */
__device__ __forceinline__ void msa_warp_topk(const float *s, int lo, int hi, int need, int qb,
                                              int local_blocks, int init_blocks, float *cs,
                                              int *cb)
{
    const int lane = threadIdx.x & 31;
    float last_s = INFINITY;
    int last_b = -1;
    for (int r = 0; r < need; r++) {
        float ps = -INFINITY;
        int pb = -1;
        for (int b = lo + lane; b < hi; b += 32) {
            if (msa_forced(b, qb, local_blocks, init_blocks))
                continue;
            const float v = s[b];
            if (!(v > -INFINITY))
                continue;
            if (last_b >= 0 && !msa_before(last_s, last_b, v, b))
                continue;
            if (pb < 0 || msa_before(v, b, ps, pb)) {
                pb = b;
                ps = v;
            }
        }
        for (int off = 16; off > 0; off >>= 1) { /* warp argmax in golden order */
            const float os = m3_shfl_xor(ps, off);
            const int ob = m3_shfl_xor_i(pb, off);
            if (ob >= 0 && (pb < 0 || msa_before(os, ob, ps, pb))) {
                pb = ob;
                ps = os;
            }
        }
        if (lane == 0) {
            cs[r] = ps;
            cb[r] = pb;
        }
        if (pb < 0) { /* nothing left in this range */
            for (int i = r + 1 + lane; i < need; i += 32)
                cb[i] = -1;
            break;
        }
        last_s = ps;
        last_b = pb;
    }
}

/* grid (T, G), block 32 * nw. Every warp takes the top `need` of its
 * segment of the blocks (the global top `need` is inside the union), then
 * warp 0 takes the top `need` of the nw * need candidates. Scores are staged
 * in shared memory when stage != 0. Shared: [stage ? nbmax : 0] scores,
 * then candidates [nw][topk] floats and [nw][topk] ints. */
__global__ void k_msa_select(int32_t *out, const float *bs, int64_t pos0, int T, int G, int nbmax,
                             int B, int topk, int local_blocks, int init_blocks, int stage)
{
    M3_DYN_SHARED(float, smem);
    const int t = blockIdx.x, g = blockIdx.y;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int64_t pos = pos0 + t;
    const int qb = (int)(pos / B), nb = qb + 1;
    const float *s = bs + ((size_t)t * G + g) * nbmax;
    int32_t *o = out + ((size_t)g * T + t) * topk;
    float *ss = smem;
    float *cs = smem + (stage ? nbmax : 0);
    int *cb = (int *)(cs + nw * topk);
    const int n = msa_forced_list(threadIdx.x == 0 ? o : NULL, nb, qb, topk, local_blocks,
                                  init_blocks);
    const int need = topk - n;
    if (stage) {
        for (int b = threadIdx.x; b < nb; b += blockDim.x)
            ss[b] = s[b];
        __syncthreads();
        s = ss;
    }
    if (need > 0) {
        const int seg = (nb + nw - 1) / nw;
        const int lo = w * seg < nb ? w * seg : nb, hi = lo + seg < nb ? lo + seg : nb;
        msa_warp_topk(s, lo, hi, need, qb, local_blocks, init_blocks, cs + w * topk,
                      cb + w * topk);
    }
    __syncthreads();
    if (w != 0)
        return;
    int m = 0;
    if (need > 0) {
        float last_s = INFINITY;
        int last_b = -1;
        for (; m < need; m++) {
            float ps = -INFINITY;
            int pb = -1;
            for (int i = lane; i < nw * need; i += 32) {
                const int b = cb[(i / need) * topk + i % need];
                if (b < 0)
                    continue;
                const float v = cs[(i / need) * topk + i % need];
                if (last_b >= 0 && !msa_before(last_s, last_b, v, b))
                    continue;
                if (pb < 0 || msa_before(v, b, ps, pb)) {
                    pb = b;
                    ps = v;
                }
            }
            for (int off = 16; off > 0; off >>= 1) {
                const float os = m3_shfl_xor(ps, off);
                const int ob = m3_shfl_xor_i(pb, off);
                if (ob >= 0 && (pb < 0 || msa_before(os, ob, ps, pb))) {
                    pb = ob;
                    ps = os;
                }
            }
            if (pb < 0)
                break;
            if (lane == 0)
                o[n + m] = pb;
            last_s = ps;
            last_b = pb;
        }
    }
    for (int i = n + m + lane; i < topk; i += 32)
        o[i] = -1;
}

hipError_t m3g_msa_select(int32_t *out, const float *bs, int64_t pos0, int T, int G, int nbmax,
                          int B, int topk, int local_blocks, int init_blocks, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (topk <= 0 || topk > 32 || B <= 0)
        return hipErrorInvalidValue;
    int nw = (nbmax + 255) / 256; /* about 256 blocks (8 per lane) per warp */
    nw = nw < 1 ? 1 : (nw > 32 ? 32 : nw);
    const size_t cand = (size_t)nw * topk * (sizeof(float) + sizeof(int));
    const int stage = (size_t)nbmax * sizeof(float) + cand <= 40 * 1024;
    const size_t shm = (stage ? (size_t)nbmax * sizeof(float) : 0) + cand;
    hipLaunchKernelGGL(k_msa_select, dim3(T, G), dim3(32 * nw), shm, st, out, bs, pos0, T, G,
                       nbmax, B, topk, local_blocks, init_blocks, stage);
    return hipGetLastError();
}

/* ==========================================================================
 * Fused indexer (m3g_msa_indexer): block scores and the golden-order top-k
 * in ONE launch, the decode path.
 *
 * Grid (P, T): the P thread blocks of row t split its visible MSA blocks
 * 0..qb into P contiguous ranges. A thread block streams its keys in groups
 * of KG = NT * KPT keys; a group is read in slices of SCH 16-byte chunks
 * of every key row (64 bytes of each 256-byte bf16 row), each slice copied
 * into shared memory with coalesced 16-byte copies (cp.async on NVIDIA,
 * ST-deep ring, so ST - 1 slices are in flight while one is computed; plain
 * loads elsewhere). Thread i owns keys i, i + NT, ... of the group and keeps
 * one fp32 accumulator per (key, head) in registers across the slices, so
 * every dot product is still ONE accumulator over d ascending, all NG heads
 * from one read of the row. Key rows sit at a padded 80-byte stride in
 * shared memory (bank-conflict free 16-byte reads).
 *
 * Block max: per warp by an order-aware butterfly ("later wins only if
 * strictly greater", so -0.0 / +0.0 and NaN behave exactly as ref's
 * "if (s > best) best = s" over keys ascending), then per block in slot
 * order. Needs B % 32 == 0 or B | 32.
 *
 * Selection: every thread block also publishes the largest golden key of
 * its blocks per head (group maximum, ws). Golden keys K = (order-
 * preserving bits of the score, +0 for -0) << 32 | ~id are unique and sort
 * exactly as the golden order (0 = forced / -inf / NaN: never selectable).
 * The last thread block of row t to finish (atomic ticket on ctr[t], which
 * it resets to 0) selects for all heads, one warp per head
 * (mix_select_fast): a lower bound m from the group maxima, the keys >= m
 * of the groups that can hold them, each ranked against the others; odd
 * inputs (> MIX_SCAP survivors, > 32 * MIX_PCMAX groups) go to an exact
 * radix select over all blocks (mix_select). Forced blocks first
 * (ascending), -1 padding.
 *
 * Scores: each product is a multiply then an add, as ref (bitwise).
 * ========================================================================== */

#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__) && !defined(M3_EMU)
#define MIX_CPASYNC 1
#else
#define MIX_CPASYNC 0
#endif

/* SCH (template): 16-byte chunks of a key row per slice; rows sit at SCH * 16
 * + 16 bytes in shared memory (80, 144, 272: bank-conflict-free 16-byte reads). */

static __device__ __forceinline__ void mix_cp16(void *s, const void *g)
{
#if MIX_CPASYNC && defined(__CUDA_ARCH__)
    const unsigned a = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g) : "memory");
#else
    *(uint4 *)s = *(const uint4 *)g;
#endif
}

static __device__ __forceinline__ void mix_cp_commit()
{
#if MIX_CPASYNC && defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N> static __device__ __forceinline__ void mix_cp_wait()
{
#if MIX_CPASYNC && defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* A value written by another thread block of this launch (read after the
 * ticket): bypass the non-coherent L1. */
static __device__ __forceinline__ float mix_ld_other(const float *p)
{
#if MIX_CPASYNC
    return __ldcg(p);
#else
    return *(const volatile float *)p;
#endif
}

/* ref's running max seen as a merge of (earlier a, later b): b wins only if
 * strictly greater. */
static __device__ __forceinline__ float mix_omax(float a, float b)
{
    return b > a ? b : a;
}

/* Order-aware max over aligned groups of S lanes (S a power of two <= 32,
 * warp-uniform); every lane gets its group's result. */
static __device__ __forceinline__ float mix_seg_max(float v, int S)
{
    const int lane = threadIdx.x & 31;
    for (int o = 1; o < S; o <<= 1) {
        const float x = m3_shfl_xor(v, o);
        v = (lane & o) ? mix_omax(x, v) : mix_omax(v, x);
    }
    return v;
}

/* Order-preserving unsigned image of a score > -inf (-0 counts as +0). */
static __device__ __forceinline__ unsigned mix_ord(float s)
{
    const unsigned u = s == 0.0f ? 0u : __float_as_uint(s);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

typedef unsigned long long mix_u64;

/* Golden key of block b with score s: unique, larger = earlier in the
 * golden order; 0 = never selectable (forced, -inf or NaN). */
static __device__ __forceinline__ mix_u64 mix_key(float s, int b, int qb, int local_blocks,
                                                  int init_blocks)
{
    if (msa_forced(b, qb, local_blocks, init_blocks) || !(s > -INFINITY))
        return 0;
    return ((mix_u64)mix_ord(s) << 32) | (unsigned)~(unsigned)b;
}

/* v of lane (this lane ^ o) */
static __device__ __forceinline__ mix_u64 mix_shfl_xor_u64(mix_u64 v, int o)
{
    const int lo = m3_shfl_xor_i((int)(unsigned)v, o);
    const int hi = m3_shfl_xor_i((int)(unsigned)(v >> 32), o);
    return ((mix_u64)(unsigned)hi << 32) | (unsigned)lo;
}

static __device__ __forceinline__ mix_u64 mix_warp_max_u64(mix_u64 v)
{
    for (int o = 16; o > 0; o >>= 1) {
        const mix_u64 x = mix_shfl_xor_u64(v, o);
        v = x > v ? x : v;
    }
    return v;
}

/* A lower bound for the need-th largest key of a warp, from each lane's
 * largest key lm (0: none): the need-th largest of the lanes' maxima (the
 * lanes holding the need largest maxima hold at least need keys >= it); 1
 * (every nonzero key) when fewer than need lanes hold a key. Every lane of
 * the warp calls it and gets the same value. */
static __device__ __forceinline__ mix_u64 mix_lane_bound(mix_u64 lm, int need)
{
    int rank = 0, nz = lm != 0;
    for (int o = 1; o < 32; o++) {
        const mix_u64 x = mix_shfl_xor_u64(lm, o);
        rank += x > lm;
        nz += x != 0;
    }
    mix_u64 m = (lm != 0 && rank == need - 1) ? lm : 0;
    m = mix_warp_max_u64(m);
    return nz < need ? 1 : m;
}

static __device__ __forceinline__ mix_u64 mix_ld_other_u64(const mix_u64 *p)
{
#if MIX_CPASYNC
    return __ldcg((const unsigned long long *)p);
#else
    return *(const volatile mix_u64 *)p;
#endif
}

/* Shared-memory layout (floats, then bytes): qs [NG*d] | wm [NG][KG/32] |
 * carry [2][NG] | flags [4] | 16-byte aligned stage ring ST x KG x (SCH * 16 + 16). */
static __host__ __device__ __forceinline__ int mix_al4(int n)
{
    return (n + 3) & ~3;
}

static __host__ __device__ __forceinline__ int mix_stage_off(int NG, int d, int KG)
{
    return mix_al4(mix_al4(NG * d) + NG * (KG / 32) + 2 * NG + 4); /* in floats */
}

/* Stream keys [klo, klo + nkeys) (blocks from blo) of one row: slices
 * through the shared ring, scores in registers, block maxima into bsrow
 * [NG][nbmax]. FMA: 1 = fmaf (exact for bf16 q and k), 0 = mul then add. */
template <int BF, int NG, int NT, int KPT, int ST, int SCH, int FMA>
static __device__ __forceinline__ void mix_stream(float *bsrow, int nbmax, const float *qs, float *wm,
                                                  float *carry, char *stage, const char *ikc,
                                                  const int32_t *page_table, int B, int64_t klo,
                                                  int64_t nkeys, int blo, int d, int qb,
                                                  int local_blocks, int init_blocks,
                                                  mix_u64 (&kmax)[NG])
{
    constexpr int KG = NT * KPT, NSLOT = KG / 32, CPT = KPT * SCH, VPC = BF ? 8 : 4;
    constexpr int ROW = SCH * 16 + 16, STEP = NT / SCH; /* padded row bytes; key step of copies */
    (void)klo; /* = blo * B: keys are addressed from blo */
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int rowb = d * (BF ? 2 : 4), nch = rowb >> 4, nsl = (nch + SCH - 1) / SCH;
    const int ngrp = (int)((nkeys + KG - 1) / KG), nunits = ngrp * nsl;
    const int my_cc = tid % SCH, my_kk = tid / SCH; /* this thread's copy column / first key */
    const char *rp[CPT];
    int rp_grp = -1;
MSA_UNROLL
    for (int j = 0; j < CPT; j++)
        rp[j] = NULL;

    auto issue = [&](int u) {
        if (u < nunits) {
            const int grp = u / nsl, sl = u - grp * nsl;
            if (grp != rp_grp) { /* row pointers of this thread's copy keys, once per group */
                rp_grp = grp;
                /* key f (from klo = blo * B) lives in block blo + f / B at slot f % B:
                 * one 32-bit division, then steps of STEP keys (no int64 div per row) */
                const unsigned f0 = (unsigned)grp * KG + (unsigned)my_kk;
                const unsigned q0 = f0 / (unsigned)B;
                unsigned off = f0 - q0 * (unsigned)B;
                int blk = blo + (int)q0;
MSA_UNROLL
                for (int j = 0; j < CPT; j++) {
                    rp[j] = (int64_t)f0 + j * STEP < nkeys
                                ? ikc + ((int64_t)page_table[blk] * B + off) * rowb
                                : NULL;
                    off += STEP;
                    while (off >= (unsigned)B) {
                        off -= (unsigned)B;
                        blk++;
                    }
                }
            }
            char *buf = stage + (size_t)(u % ST) * KG * ROW;
            const int ch = sl * SCH + my_cc;
            if (ch < nch)
MSA_UNROLL
                for (int j = 0; j < CPT; j++)
                    if (rp[j])
                        mix_cp16(buf + (my_kk + j * STEP) * ROW + my_cc * 16,
                                 rp[j] + ch * 16);
        }
        mix_cp_commit();
    };

    float acc[KPT][NG];
MSA_UNROLL
    for (int i = 0; i < KPT; i++)
MSA_UNROLL
        for (int g = 0; g < NG; g++)
            acc[i][g] = 0.0f;

    for (int u = 0; u < ST - 1; u++)
        issue(u);
    for (int u = 0; u < nunits; u++) {
        mix_cp_wait<ST - 2>();
        __syncthreads(); /* slice u visible to all; slice u - 1 consumed by all */
        issue(u + ST - 1);
        const int grp = u / nsl, sl = u - grp * nsl;
        const char *buf = stage + (size_t)(u % ST) * KG * ROW;
MSA_UNROLL
        for (int cc = 0; cc < SCH; cc++) {
            const int ch = sl * SCH + cc;
            if (ch >= nch)
                break;
            const int d0 = ch * VPC;
            float qv[NG][VPC];
MSA_UNROLL
            for (int g = 0; g < NG; g++)
MSA_UNROLL
                for (int e = 0; e < VPC; e += 4) {
                    const float4 q4 = *(const float4 *)(qs + g * d + d0 + e);
                    qv[g][e] = q4.x;
                    qv[g][e + 1] = q4.y;
                    qv[g][e + 2] = q4.z;
                    qv[g][e + 3] = q4.w;
                }
MSA_UNROLL
            for (int i = 0; i < KPT; i++) {
                const uint4 v = *(const uint4 *)(buf + (tid + i * NT) * ROW + cc * 16);
                float kv[8];
                if constexpr (BF) {
                    msa_bf16x8(v, kv);
                } else {
                    kv[0] = __uint_as_float(v.x);
                    kv[1] = __uint_as_float(v.y);
                    kv[2] = __uint_as_float(v.z);
                    kv[3] = __uint_as_float(v.w);
                }
MSA_UNROLL
                for (int g = 0; g < NG; g++)
                    acc[i][g] = msa_dot<VPC, FMA>(acc[i][g], qv[g], kv);
            }
        }
        if (sl != nsl - 1)
            continue;
        /* group complete: block maxima */
        const int64_t off0 = (int64_t)grp * KG;
MSA_UNROLL
        for (int i = 0; i < KPT; i++) {
            const int64_t f = off0 + tid + i * NT; /* key offset from klo */
            const int valid = f < nkeys;
MSA_UNROLL
            for (int g = 0; g < NG; g++) {
                const float a = acc[i][g];
                acc[i][g] = 0.0f;
                float s = (valid && a == a) ? a : -INFINITY; /* NaN never wins, as in ref */
                if (B % 32 == 0) {
                    s = mix_seg_max(s, 32);
                    if (lane == 0)
                        wm[g * NSLOT + i * (NT / 32) + w] = s;
                } else {
                    s = mix_seg_max(s, B);
                    if (valid && lane % B == 0) {
                        const int b = blo + (int)(f / B);
                        bsrow[(size_t)g * nbmax + b] = s;
                        const mix_u64 k = mix_key(s, b, qb, local_blocks, init_blocks);
                        kmax[g] = k > kmax[g] ? k : kmax[g];
                    }
                }
            }
        }
        if (B % 32 == 0) {
            __syncthreads();
            const int64_t off1 = off0 + KG < nkeys ? off0 + KG : nkeys;
            const int fb = (int)(off0 / B), lb = (int)((off1 - 1) / B); /* relative to blo */
            for (int j = tid; j < NG * (lb - fb + 1); j += NT) {
                const int g = j % NG, bl = fb + j / NG;
                const int64_t k0 = (int64_t)bl * B > off0 ? (int64_t)bl * B : off0;
                const int64_t k1 = (int64_t)(bl + 1) * B < off1 ? (int64_t)(bl + 1) * B : off1;
                float m = (int64_t)bl * B < off0 ? carry[((grp + 1) & 1) * NG + g] : -INFINITY;
                for (int64_t sx = (k0 - off0) / 32; sx < (k1 - off0 + 31) / 32; sx++)
                    m = mix_omax(m, wm[g * NSLOT + (int)sx]);
                if ((int64_t)(bl + 1) * B <= off1 || off1 == nkeys) {
                    bsrow[(size_t)g * nbmax + blo + bl] = m;
                    const mix_u64 k = mix_key(m, blo + bl, qb, local_blocks, init_blocks);
                    for (int gg = 0; gg < NG; gg++) /* static index: kmax stays in registers */
                        if (gg == g)
                            kmax[gg] = k > kmax[gg] ? k : kmax[gg];
                } else
                    carry[(grp & 1) * NG + g] = m;
            }
        }
    }
}

/* Golden-order selection of one row by one thread block (see the section
 * comment). bsrow [NG][nbmax] (written by other blocks: read past L1);
 * out + g * ostride: the topk entries of head g. scratch: shared memory. */
template <int NG, int NT>
static __device__ void mix_select(int32_t *out, size_t ostride, const float *bsrow, int nbmax,
                                  int nb, int qb, int topk, int local_blocks, int init_blocks,
                                  char *scratch, size_t scratch_bytes)
{
    typedef unsigned long long u64;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    unsigned *hist = (unsigned *)scratch;        /* [NG][256] */
    u64 *thr = (u64 *)(hist + NG * 256);         /* [NG] */
    u64 *msk = thr + NG;                         /* [NG] */
    u64 *sel = msk + NG;                         /* [NG][32] */
    unsigned *krem = (unsigned *)(sel + NG * 32); /* [NG] */
    unsigned *done = krem + NG, *cnt = done + NG; /* [NG] each */
    unsigned *ordc = cnt + NG;                   /* [NG][nb] cache when it fits */
    const int cached = (size_t)((char *)(ordc + (size_t)NG * nb) - scratch) <= scratch_bytes;

    const int nf = msa_forced_list(NULL, nb, qb, topk, local_blocks, init_blocks); /* every head */
    const int need = topk - nf;
    if (tid < NG) {
        thr[tid] = 0;
        msk[tid] = 0;
        krem[tid] = need > 0 ? (unsigned)need : 0u;
        done[tid] = need <= 0;
        cnt[tid] = 0;
    }
    __syncthreads();

    for (int pass = 0; pass < 8; pass++) {
        int alldone = 1;
        for (int g = 0; g < NG; g++)
            alldone &= done[g] != 0;
        if (alldone)
            break;
        for (int e = tid; e < NG * 256; e += NT)
            hist[e] = 0;
        __syncthreads();
        const int sh = 56 - 8 * pass;
        for (int g = 0; g < NG; g++) {
            if (done[g])
                continue;
            const u64 m = msk[g], th = thr[g];
            for (int b = tid; b < nb; b += NT) {
                unsigned o;
                if (pass > 0 && cached) {
                    o = ordc[g * nb + b];
                } else {
                    const float s = mix_ld_other(bsrow + (size_t)g * nbmax + b);
                    o = (msa_forced(b, qb, local_blocks, init_blocks) || !(s > -INFINITY))
                            ? 0u : mix_ord(s);
                    if (cached)
                        ordc[g * nb + b] = o;
                }
                if (!o)
                    continue;
                const u64 K = ((u64)o << 32) | (unsigned)~(unsigned)b;
                if ((K & m) == th)
                    atomicAdd(&hist[g * 256 + (unsigned)((K >> sh) & 255u)], 1u);
            }
        }
        __syncthreads();
        if (w < NG && !done[w]) { /* warp g: the bin holding the krem-th largest */
            const int g = w;
            const unsigned kr = krem[g]; /* read before any lane of this warp writes it */
            unsigned h[8], s = 0;
MSA_UNROLL
            for (int k = 0; k < 8; k++) {
                h[k] = hist[g * 256 + 255 - 8 * lane - k]; /* lane 0: the highest bins */
                s += h[k];
            }
            float inc = (float)s; /* counts < 2^24: exact in fp32 */
            for (int o = 1; o < 32; o <<= 1) {
                const float y = m3_shfl(inc, lane >= o ? lane - o : lane);
                if (lane >= o)
                    inc += y;
            }
            const unsigned incl = (unsigned)inc, excl = incl - s;
            const unsigned total = (unsigned)m3_shfl(inc, 31);
            if (pass == 0 && total <= kr) { /* no more valid blocks than needed: take all */
                if (lane == 0)
                    done[g] = 1;
            } else if (excl < kr && kr <= incl) {
                unsigned above = excl, eq = 0, dig = 0;
                int found = 0;
MSA_UNROLL
                for (int k = 0; k < 8; k++)
                    if (!found) {
                        if (above + h[k] >= kr) {
                            found = 1;
                            eq = h[k];
                            dig = 255u - 8u * (unsigned)lane - (unsigned)k;
                        } else {
                            above += h[k];
                        }
                    }
                thr[g] |= (u64)dig << sh;
                msk[g] |= (u64)255u << sh;
                krem[g] = kr - above;
                done[g] = eq == kr - above;
            }
        }
        __syncthreads();
    }
    if (need > 0) {
        for (int g = 0; g < NG; g++) {
            const u64 m = msk[g], th = thr[g];
            for (int b = tid; b < nb; b += NT) {
                unsigned o;
                if (cached) {
                    o = ordc[g * nb + b];
                } else {
                    const float s = mix_ld_other(bsrow + (size_t)g * nbmax + b);
                    o = (msa_forced(b, qb, local_blocks, init_blocks) || !(s > -INFINITY))
                            ? 0u : mix_ord(s);
                }
                if (!o)
                    continue;
                const u64 K = ((u64)o << 32) | (unsigned)~(unsigned)b;
                if ((K & m) >= th) {
                    const unsigned slot = atomicAdd(&cnt[g], 1u);
                    if (slot < 32)
                        sel[g * 32 + slot] = K;
                }
            }
        }
    }
    __syncthreads();
    if (w < NG) {
        const int g = w;
        int32_t *o = out + (size_t)g * ostride;
        if (lane == 0)
            msa_forced_list(o, nb, qb, topk, local_blocks, init_blocks);
        int n = need > 0 ? (int)cnt[g] : 0;
        n = n < need ? n : (need > 0 ? need : 0);
        if (lane < n) {
            const u64 K = sel[g * 32 + lane];
            int rank = 0;
            for (int j = 0; j < n; j++)
                rank += sel[g * 32 + j] > K;
            o[nf + rank] = (int32_t)~(unsigned)(K & 0xffffffffu);
        }
        for (int i = nf + n + lane; i < topk; i += 32)
            o[i] = -1;
    }
}

#define MIX_PCMAX 16 /* group maxima per lane in the fast select: P <= 32 * MIX_PCMAX */
#define MIX_SCAP 256 /* survivors per head the fast select ranks (more: radix select) */

/* Golden-order selection of one row from the block scores and the P group
 * maxima gm [NG][P] (group c = the blocks of thread block c). Warp g takes
 * head g: lane l holds the maxima of groups l, l + 32, ...; m = the
 * need-th largest of the 32 lane maxima is a lower bound of the need-th
 * largest key (need lanes each own a group whose maximum is >= m), so the
 * selection is exactly the need largest of the keys >= m, and those lie in
 * the groups with maximum >= m: each lane scans its such groups, keys >= m
 * go to a shared survivor list, each survivor's rank = how many survivors
 * are larger. Survivors come from at most `need` lanes' groups (typically
 * ~need + a few); more than MIX_SCAP (ties, odd data) or P > 32 * MIX_PCMAX
 * hand the row to the radix select. */
template <int NG, int NT>
static __device__ void mix_select_fast(int32_t *out, size_t ostride, const float *bsrow, int nbmax,
                                       const mix_u64 *gm, int P, int nb, int qb, int topk,
                                       int local_blocks, int init_blocks, char *scratch,
                                       size_t scratch_bytes)
{
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    mix_u64 *surv = (mix_u64 *)scratch;                   /* [NG][MIX_SCAP] */
    unsigned *scnt = (unsigned *)(surv + NG * MIX_SCAP); /* [NG] */
    const int nf = msa_forced_list(NULL, nb, qb, topk, local_blocks, init_blocks);
    const int need = topk - nf;
    if (tid < NG)
        scnt[tid] = 0;
    __syncthreads();
    const int fast = P <= 32 * MIX_PCMAX;
    if (fast && need > 0 && w < NG) {
        const int g = w;
        mix_u64 gv[MIX_PCMAX], lm = 0;
MSA_UNROLL
        for (int i = 0; i < MIX_PCMAX; i++) {
            const int c = lane + 32 * i;
            gv[i] = c < P ? mix_ld_other_u64(gm + (size_t)g * P + c) : 0;
            lm = gv[i] > lm ? gv[i] : lm;
        }
        const mix_u64 m = mix_lane_bound(lm, need);
        const float *srow = bsrow + (size_t)g * nbmax;
MSA_UNROLL
        for (int i = 0; i < MIX_PCMAX; i++) {
            if (gv[i] == 0 || gv[i] < m)
                continue;
            const int c = lane + 32 * i;
            const int b0 = (int)((int64_t)c * nb / P), b1 = (int)((int64_t)(c + 1) * nb / P);
            for (int bb = b0; bb < b1; bb += 16) {
                float sv[16];
MSA_UNROLL
                for (int j = 0; j < 16; j++) /* 16 independent loads in flight */
                    sv[j] = bb + j < b1 ? mix_ld_other(srow + bb + j) : -INFINITY;
MSA_UNROLL
                for (int j = 0; j < 16; j++) {
                    const mix_u64 K = mix_key(sv[j], bb + j, qb, local_blocks, init_blocks);
                    if (K != 0 && K >= m) {
                        const unsigned slot = atomicAdd(&scnt[g], 1u);
                        if (slot < MIX_SCAP)
                            surv[g * MIX_SCAP + slot] = K;
                    }
                }
            }
        }
    }
    __syncthreads();
    int over = !fast;
    for (int g = 0; g < NG; g++)
        over |= scnt[g] > MIX_SCAP;
    if (over) {
        mix_select<NG, NT>(out, ostride, bsrow, nbmax, nb, qb, topk, local_blocks, init_blocks,
                           scratch, scratch_bytes);
        return;
    }
    if (w < NG) {
        const int g = w;
        int32_t *o = out + (size_t)g * ostride;
        if (lane == 0)
            msa_forced_list(o, nb, qb, topk, local_blocks, init_blocks);
        const int S = need > 0 ? (int)scnt[g] : 0;
        const int n = S < need ? S : (need > 0 ? need : 0);
        for (int i = lane; i < S; i += 32) {
            const mix_u64 K = surv[g * MIX_SCAP + i];
            int rank = 0;
            for (int j = 0; j < S; j++)
                rank += surv[g * MIX_SCAP + j] > K;
            if (rank < need)
                o[nf + rank] = (int32_t)~(unsigned)(K & 0xffffffffu);
        }
        for (int i = nf + n + lane; i < topk; i += 32)
            o[i] = -1;
    }
}

/* grid (P, T), NT threads. */
template <int BF, int NG, int NT, int KPT, int ST, int SCH>
__global__ void k_mix_indexer(int32_t *out, float *bs, const float *iq, const void *ikc,
                              const int32_t *page_table, int B, int64_t pos0, int T, int d,
                              int nbmax, int topk, int local_blocks, int init_blocks,
                              unsigned *ctr, mix_u64 *gmax, size_t stage_bytes)
{
    M3_DYN_SHARED(float, smem);
    constexpr int KG = NT * KPT;
    const int tid = threadIdx.x, t = blockIdx.y, P = gridDim.x, c = blockIdx.x;
    const int64_t pos = pos0 + t;
    const int qb = (int)(pos / B), nb = qb + 1;
    float *qs = smem;
    float *wm = qs + mix_al4(NG * d);
    float *carry = wm + NG * (KG / 32);
    unsigned *flag = (unsigned *)(carry + 2 * NG);
    char *stage = (char *)(smem + mix_stage_off(NG, d, KG));
    float *bsrow = bs + (size_t)t * NG * nbmax;

    for (int e = tid; e < NG * d; e += NT)
        qs[e] = iq[(size_t)t * NG * d + e];
    for (int b = nb + c * NT + tid; b < nbmax; b += P * NT) /* blocks this row cannot see */
        for (int g = 0; g < NG; g++)
            bsrow[(size_t)g * nbmax + b] = -INFINITY;
    __syncthreads();

    const int blo = (int)((int64_t)c * nb / P), bhi = (int)((int64_t)(c + 1) * nb / P);
    const int64_t klo = (int64_t)blo * B;
    const int64_t khi = (int64_t)bhi * B < pos + 1 ? (int64_t)bhi * B : pos + 1;
    const int64_t nkeys = khi > klo ? khi - klo : 0;
    mix_u64 kmax[NG]; /* this thread's best golden key per head (0: none) */
    for (int g = 0; g < NG; g++)
        kmax[g] = 0;
    mix_stream<BF, NG, NT, KPT, ST, SCH, 0>(bsrow, nbmax, qs, wm, carry, stage, (const char *)ikc,
                                            page_table, B, klo, nkeys, blo, d, qb, local_blocks,
                                            init_blocks, kmax);
    mix_cp_wait<0>();
    __syncthreads(); /* the ring is free: reduce the group maximum per head */
    mix_u64 *red = (mix_u64 *)stage; /* [NT / 32][NG] */
    for (int g = 0; g < NG; g++) {
        const mix_u64 v = mix_warp_max_u64(kmax[g]);
        if ((tid & 31) == 0)
            red[(tid >> 5) * NG + g] = v;
    }
    __syncthreads();
    mix_u64 *gm = gmax + (size_t)t * NG * P; /* [NG][P] of this row */
    if (tid < NG) {
        mix_u64 v = 0;
        for (int i = 0; i < NT / 32; i++)
            v = red[i * NG + tid] > v ? red[i * NG + tid] : v;
        gm[(size_t)tid * P + c] = v;
    }
    __threadfence();
    __syncthreads();
    if (tid == 0)
        flag[0] = atomicAdd(&ctr[t], 1u);
    __syncthreads();
    if (flag[0] != (unsigned)(P - 1))
        return;
    __threadfence();
    mix_select_fast<NG, NT>(out + (size_t)t * topk, (size_t)T * topk, bsrow, nbmax, gm, P, nb, qb,
                            topk, local_blocks, init_blocks, stage, stage_bytes);
    if (tid == 0)
        ctr[t] = 0; /* ready for the next launch */
}

#ifndef MIX_EMU_NSM
#define MIX_EMU_NSM 2 /* emulation: "SMs" (tests may raise it to exercise large grids) */
#endif

/* SMs of the current device (host only; MIX_EMU_NSM in the emulation, 1 if
 * the query fails): the grids of the fused and streaming indexers and of
 * the bandwidth ceiling. */
static int msa_nsm(void)
{
#if defined(M3_EMU)
    return MIX_EMU_NSM;
#else
    return m3d_sm_count();
#endif
}

/* Thread blocks per row: per_sm resident blocks on every SM, split over
 * the T rows, at most one per MSA block. */
static int mix_grid_p(int per_sm, int T, int nbmax)
{
    const int nsm = msa_nsm();
    int P = per_sm * nsm / T;
    P = P < 1 ? 1 : P;
    P = P > nbmax ? nbmax : P;
    return P > 65535 ? 65535 : P;
}

#define MIX_MAX_PER_SM 2 /* the largest per_sm of any configuration below */

/* Launch configuration: threads, keys per thread, ring depth, resident
 * blocks per SM (shared memory bound). ws: the group maxima [T][NG][P]. */
template <int BF, int NG, int NT, int KPT, int ST, int SCH>
static hipError_t mix_launch(int per_sm, int32_t *out, float *bs, const float *iq,
                             const void *ikc, const int32_t *page_table, int B, int64_t pos0,
                             int T, int d, int nbmax, int topk, int local_blocks, int init_blocks,
                             unsigned *ctr, void *ws, hipStream_t st)
{
    constexpr int KG = NT * KPT;
    const size_t stage_bytes = (size_t)ST * KG * (SCH * 16 + 16);
    const size_t shm = sizeof(float) * (size_t)mix_stage_off(NG, d, KG) + stage_bytes;
    const int P = mix_grid_p(per_sm, T, nbmax);
    mix_u64 *gmax = (mix_u64 *)ws;
#if MIX_CPASYNC
    const void *kfn = (const void *)k_mix_indexer<BF, NG, NT, KPT, ST, SCH>;
    if (shm > 48 * 1024 &&
        hipFuncSetAttribute(kfn, hipFuncAttributeMaxDynamicSharedMemorySize, (int)shm) !=
            hipSuccess)
        return hipErrorInvalidValue;
#endif
    hipLaunchKernelGGL((k_mix_indexer<BF, NG, NT, KPT, ST, SCH>), dim3(P, T), dim3(NT), shm, st, out,
                       bs, iq, ikc, page_table, B, pos0, T, d, nbmax, topk, local_blocks,
                       init_blocks, ctr, gmax, stage_bytes);
    return hipGetLastError();
}

#if MIX_CPASYNC
#define MIX_DEFAULT 128, 2, 4, 4 /* NT, KPT, ST, SCH: 80 KB ring, 2 blocks per SM */
#define MIX_DEFAULT_PER_SM 2
#else
#define MIX_DEFAULT 128, 2, 2, 4 /* 40 KB: fits 64 KB LDS (AMD) */
#define MIX_DEFAULT_PER_SM 2
#endif

template <int BF, int NG>
static hipError_t mix_dispatch(int32_t *out, float *bs, const float *iq, const void *ikc,
                               const int32_t *page_table, int B, int64_t pos0, int T, int d,
                               int nbmax, int topk, int local_blocks, int init_blocks,
                               unsigned *ctr, void *ws, hipStream_t st)
{
    return mix_launch<BF, NG, MIX_DEFAULT>(MIX_DEFAULT_PER_SM, out, bs, iq, ikc, page_table, B,
                                           pos0, T, d, nbmax, topk, local_blocks, init_blocks,
                                           ctr, ws, st);
}

template <int BF>
static hipError_t mix_dispatch_g(int G, int32_t *out, float *bs, const float *iq,
                                 const void *ikc, const int32_t *page_table, int B, int64_t pos0,
                                 int T, int d, int nbmax, int topk, int local_blocks,
                                 int init_blocks, unsigned *ctr, void *ws, hipStream_t st)
{
#define MIX_ARGS out, bs, iq, ikc, page_table, B, pos0, T, d, nbmax, topk, local_blocks, \
                 init_blocks, ctr, ws, st
    switch (G) {
    case 1:
        return mix_dispatch<BF, 1>(MIX_ARGS);
    case 2:
        return mix_dispatch<BF, 2>(MIX_ARGS);
    case 3:
        return mix_dispatch<BF, 3>(MIX_ARGS);
    default:
        return mix_dispatch<BF, 4>(MIX_ARGS);
    }
#undef MIX_ARGS
}

/* ==========================================================================
 * Streaming indexer (k_idx): the default m3g_msa_indexer path on NVIDIA
 * (and in the CPU emulation) for the bf16 index-K cache with d = 128,
 * G <= 4, B % 32 == 0, topk <= 32. The fused kernel above stays the
 * portable path (hipcc / AMD; bench-gpu times it on NVIDIA too).
 *
 * Why a new kernel: the fused kernel ran 8 warps per SM (123 registers,
 * 84 KB of shared memory per 128-thread block, every slice behind a block
 * barrier) at 30% of DRAM throughput (ncu), plus 25-38 us of fixed cost.
 *
 * Grid (P, T), P = one block per SM split over the T rows (persistent: each
 * block owns a contiguous range of MSA blocks of its row), NW = 12 warps
 * (the tensor-core scores: 8 warps, 3 stages, KPT = 1; "Scores" below).
 * Work unit: a warp tile = 32 * KPT consecutive keys (KPT = 4 up to
 * IDX_KPT4_MAXB MSA blocks per block, i.e. 128K on 132 SMs, else 2; B % 32
 * == 0 so each 32-key tile lies in one MSA block / page), lane = keys lane,
 * lane + 32, ... Every warp streams its own warp tiles (w, w + NW,
 * ...) through its own 2-deep ring of 8 KB stages in shared memory; a stage
 * holds slice sl (256 / KPT bytes) of every row of the warp tile, copied with
 * coalesced 16-byte cp.async (512 contiguous-per-row bytes per warp
 * instruction), chunks XOR-swizzled (idx_swz) so that 32 lanes reading one
 * 16-byte chunk of their own rows hit 8 distinct bank groups per quarter
 * warp. No block barrier in the streaming loop: warps only __syncwarp, so a
 * warp has one stage in flight while it computes one and the other warps
 * hide its latency. q [G][128] sits in shared memory, read as broadcast
 * 16-byte loads once per chunk for the KPT keys of a lane (KPT = 1: 1.7x
 * the q traffic; measured slower at 1M; KPT = 4 (64-byte slices) much
 * slower at 1M (125 us) but the fastest at 128K: 20.5 against 21.3 us).
 *
 * Scores: when the launch proves every product exact (IDX_F_PROVEN, "FMA
 * exactness" below), on NVIDIA (SC 2) tensor cores: each warp tile is 2 KPT
 * m-tiles of 16 keys, A straight from the swizzled stage by ldmatrix (8
 * rows of one chunk hit 8 distinct bank groups), B = q as bf16 fragments
 * held in registers for the whole launch (8 k-steps x 8 heads, heads >= G
 * zero), mma.sync m16n8k16 with fp32 accumulators carried across the
 * slices: one ldmatrix and one mma per 16 keys x 16 dims, where the scalar
 * form issues G x 16 fp32 FMAs per key and lane. This form runs 8 warps x 3
 * stages with 1 key per lane (its rows unproven, rare and adversarial, then
 * multiply and add in that shape). Otherwise one fp32 accumulator per (key,
 * head) over d ascending: fmaf where proven (SC 1, bitwise equal to
 * multiply-then-add), else multiply then add (as ref). Tile maxima per
 * head by the order-aware butterfly (mix_seg_max), block maxima from the B/32 tile
 * maxima in key order after one block barrier per round (a round = up to
 * IDX_RT tiles, whole MSA blocks; decode at 1M is one round).
 *
 * Selection: each block keeps its local golden-order top `need` per head
 * (need = topk - forced blocks) with idx_wsel (one warp per head: m = the
 * need-th largest of the 32 lane maxima is a lower bound of the need-th
 * key; the keys >= m are ranked by counting; more than IDX_SCAP of them,
 * adversarial data only: exact repeated argmax), publishes the sorted list
 * (row layout [NG][P][np], np = min(need, ceil(nb / P)) rounded up to even,
 * 0-padded: 8 instead of 16 at 128K, half the merge's staging) and
 * takes a ticket; the last block of the row stages every list in its ring
 * with 16-byte cp.async (all in flight at once: one L2 round trip) and
 * selects with the same idx_wsel (not inlined, so its code is warm in the
 * instruction caches; its lane maxima are the heads of whole lists: a first
 * version that strided single keys over the lanes gave each lane the same
 * rank of many lists, a weak bound, hundreds of survivors and a ~21 us
 * merge). Forced blocks first ascending, -1 padding. The previous merge
 * walked the lists with chains of dependent L2 loads (~7.2 us at 128K;
 * this one ~4.0 us). The ticket: one thread per block takes it with one
 * acquire-release atomic (idx_ticket: releases its block's list stores; the
 * last block acquires everyone's).
 *
 * Programmatic dependent launch (NVIDIA): the kernel lets the next kernel
 * launch at once and, before waiting for the previous kernel, starts the
 * copies of its first tiles when they hold only keys of positions < pos0
 * (written by earlier forward steps, never by the kernel just before this
 * one) and reads the page table (not written by the previous kernel
 * either). iq, bs, out, ctr and ws are touched only after the wait.
 *
 * Tried and measured slower on the H200 (tuning builds of 2026-11-29, not in
 * the tree): L2 prefetch (cp.async.bulk.prefetch.L2) of the first 256 KB of
 * each block's range before the dependency wait (+1.1 / +0.8 us at 128K /
 * 1M), and of whole warp tiles 0 / 1 / 2 tiles ahead of the ring while
 * streaming (1M: +4.3 / +14.5 / +21.9 us against without); the L2::256B fetch
 * hint on the copies (21.85 / 88.63 us against 22.32 / 86.35); 8 warps x 3
 * stages or 6 warps x 4 stages (see idx_dispatch).
 * Tuning builds of 2026-11-30 (bench-gpu, 128K / 1M; the default 19.98 /
 * 76.32 and 20.06 / 76.70 us in the same two runs): one SM left out of the
 * grid so that the next launch's blocks need not wait for the merging
 * block's SM (19.95 / 75.50); local lists ranked by counting instead of
 * idx_wsel when a block has <= need MSA blocks (20.31 / 75.67, with the
 * spare SM); idx_wsel run once before the dependency wait to warm the
 * instruction caches (20.40 / 76.80, with both); 8 warps x 3 stages with
 * the whole ring before the wait (22.87-23.98 / 85.2-85.5); two blocks per
 * SM (96 KB rings, 128-tile rounds) so that the next launch's blocks are
 * resident and waiting, as the stream-only kernel's are: 6 warps x 2
 * stages with 1 / 2 / 4 keys per lane 22.28 / 21.64 / 27.16 us at 128K,
 * ~110 us at 1M; 4 warps x 3 stages 22.28-24.03 / ~121 us; its scores
 * alone 16.31 us against the default's 15.43. None kept.
 * ========================================================================== */

#if MIX_CPASYNC || defined(M3_EMU)
#define IDX_ON 1
#else
#define IDX_ON 0
#endif

#define IDX_D 128                  /* index head dim of this path */
#define IDX_ROWB (IDX_D * 2)       /* bytes of one bf16 key row */
#define IDX_TILEB (32 * IDX_ROWB)  /* one warp tile: 32 rows, 8 KB */
#define IDX_RT 256                 /* tiles per round (tile maxima in shared memory) */
#define IDX_LCAP 32                /* list slots per (block, head) in ws (>= topk) */
#define IDX_PMAX 192               /* blocks per row (the merge stages NG * P * 32 keys) */
#ifndef IDX_SCAP                   /* (tests may lower it to exercise the fallback) */
#define IDX_SCAP 256               /* merge survivors per head */
#endif
#define IDX_F_SCORES_ONLY 2        /* kernel flag: block scores only (timing) */
#define IDX_F_NO_MERGE 4           /* kernel flag: no merge in the last block (timing) */
#define IDX_F_PROVEN 16            /* kernel flag: FMA where the range words prove it exact */

#if IDX_ON

#if MIX_CPASYNC
#define IDX_BOUNDS(t) __launch_bounds__(t, 1)
#define IDX_NOUNROLL _Pragma("unroll 1")
#else
#define IDX_BOUNDS(t)
#define IDX_NOUNROLL
#endif

static __device__ __forceinline__ void idx_syncwarp()
{
#if defined(M3_EMU)
    (void)m3_shfl_xor(0.0f, 0); /* the emulation's warp barrier */
#else
    __syncwarp();
#endif
}

static __device__ __forceinline__ void idx_pdl_trigger()
{
#if MIX_CPASYNC && defined(__CUDA_ARCH__)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

static __device__ __forceinline__ void idx_pdl_wait()
{
#if MIX_CPASYNC && defined(__CUDA_ARCH__)
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* FMA exactness (the default in bf16 mode; flag IDX_F_PROVEN).
 *
 * Claim: if q and k are bf16 values (as floats) whose product q * k is
 * exactly representable in fp32, then fmaf(q, k, a) == a + q * k bit for bit
 * for every float a (fmaf rounds a + q k once; mul-then-add rounds q k, which
 * changes nothing, then rounds the same sum the same way: same value, same
 * overflow, same sign of a zero sum, same NaN).
 *
 * When is q k exact? A nonzero finite bf16 value x with exponent field f
 * is x = M * 2^(f' - 134), M an integer < 2^8, f' = max(f, 1) (a subnormal,
 * f = 0, is M * 2^-133), and |x| < 2^(f - 126) (for f = 0 too). So q k =
 * Mq Mk * 2^(fq' + fk' - 268), an integer of at most 16 bits times a power
 * of two, with |q k| < 2^(fq + fk - 252). fp32 holds such a number exactly
 * when its lowest bit is >= 2^-149 and it is < 2^128 (then <= (2^16 - 1) *
 * 2^112 <= FLT_MAX): fq' + fk' >= 119 and fq + fk <= 380. A zero factor
 * gives an exact (signed) zero. So the scores of a launch may use fmaf when
 * every q value of the row is bf16 (low 16 bits zero) and finite and, with
 * klo = min over the nonzero keys of fk' and khi = max over the keys of fk
 * (the cache's range words, m3g_ik_range_*), every nonzero q has fq' + klo
 * >= 119 and fq + khi <= 380, and khi < 255 (no Inf / NaN key). Otherwise the
 * whole row multiplies then adds. The range words cover every value ever
 * written to the cache (a superset of the rows read): the check is per
 * launch, one broadcast load, no host sync.
 *
 * Inf / NaN: any Inf or NaN in q (field 255) or in the cache (khi = 255)
 * sends the row to multiply-then-add, so they behave as ref by construction
 * (fmaf would in fact agree too -- an infinite factor gives the same
 * infinite or NaN product in both -- but the proof does not rely on it).
 * In practice (RMS-normed, rotated bf16 index q / k) fq', fk' lie far inside
 * [60, 190]; the fallback exists for adversarial inputs (bench-gpu checks
 * both directions with crafted overflow cases).
 */

/* q value v (fp32 bits) against the cache's range words (klo, khi), as above */
static __device__ __forceinline__ int idx_fma_exact(float v, unsigned klo, unsigned khi)
{
    const unsigned u = __float_as_uint(v), f = (u >> 23) & 0xffu;
    if ((u & 0xffffu) != 0 || f == 255u || khi >= 255u)
        return 0;
    if ((u & 0x7fffffffu) == 0)
        return 1;
    return (f > 1u ? f : 1u) + klo >= 119u && f + khi <= 380u;
}

/* Shared-memory layout (bytes): q [NG][128] f32 | ring [NW][ST][8 KB] |
 * tile maxima [NG][IDX_RT] f32 | candidates [NG][IDX_LCAP + IDX_RT] u64 |
 * list scratch [NG][IDX_LCAP] u64 | selection survivors [NG][IDX_SCAP] u64 |
 * misc [16] u32 | pages of the round [IDX_RT] i32. The last block stages
 * every block's lists in the ring (idx_merge). */
template <int NG, int NW, int ST> struct idx_lay {
    static constexpr size_t q = 0;
    static constexpr size_t ring = (size_t)NG * IDX_D * 4;
    static constexpr size_t tmx = ring + (size_t)NW * ST * IDX_TILEB;
    static constexpr size_t cand = tmx + (size_t)NG * IDX_RT * 4;
    static constexpr size_t tmpl = cand + (size_t)NG * (IDX_LCAP + IDX_RT) * 8;
    static constexpr size_t surv = tmpl + (size_t)NG * IDX_LCAP * 8;
    static constexpr size_t misc = surv + (size_t)NG * IDX_SCAP * 8;
    static constexpr size_t pg = misc + 16 * 4;
    static constexpr size_t total = pg + IDX_RT * 4;
};

/* One pipeline unit of a warp: slice sl (of KPT) of a warp tile of 32 * KPT
 * keys, i.e. 16 / KPT 16-byte chunks (d = 8 * chunk ...) of every key row;
 * lane = keys lane, lane + 32, ... (sub-tiles k = 0..KPT-1). Stage rows are
 * SB = 256 / KPT bytes, chunk c of row r at position c ^ idx_swz(r). acc
 * [KPT][NG] carries the dot products across the slices (one fp32
 * accumulator per key and head over d ascending). q chunks are read once
 * per unit and used for the KPT keys of the lane. */
template <int KPT> static __device__ __forceinline__ int idx_swz(int lane)
{
    return KPT <= 2 ? (lane & 7) : ((lane >> 1) & 3); /* 8 distinct bank groups per 8 rows */
}

template <int NG, int KPT, int FMA>
static __device__ __forceinline__ void idx_unit(const char *stage, const float *qs, int sl,
                                                float (&acc)[KPT][NG])
{
    constexpr int CPS = 16 / KPT, SB = IDX_ROWB / KPT, CU = 4 / KPT; /* CU chunks per step */
    const int lane = threadIdx.x & 31, sw = idx_swz<KPT>(lane);
IDX_NOUNROLL
    for (int c0 = 0; c0 < CPS; c0 += CU) {
MSA_UNROLL
        for (int cu = 0; cu < CU; cu++) {
            const int c = c0 + cu, ch = sl * CPS + c;
            float q[NG][8];
MSA_UNROLL
            for (int g = 0; g < NG; g++) {
                const float4 qa = *(const float4 *)(qs + g * IDX_D + ch * 8);
                const float4 qc = *(const float4 *)(qs + g * IDX_D + ch * 8 + 4);
                q[g][0] = qa.x, q[g][1] = qa.y, q[g][2] = qa.z, q[g][3] = qa.w;
                q[g][4] = qc.x, q[g][5] = qc.y, q[g][6] = qc.z, q[g][7] = qc.w;
            }
MSA_UNROLL
            for (int k = 0; k < KPT; k++) {
                float kv[8];
                msa_bf16x8(*(const uint4 *)(stage + (lane + 32 * k) * SB + ((c ^ sw) << 4)), kv);
MSA_UNROLL
                for (int g = 0; g < NG; g++)
                    acc[k][g] = msa_dot<8, FMA>(acc[k][g], q[g], kv);
            }
        }
    }
}

#if M3_TC
/* Tensor-core scores (SC 2): the same unit as idx_unit, as 2 KPT m-tiles of
 * 16 keys (A: ldmatrix from the swizzled stage rows) times the k-steps of q
 * in slice sl (B: 16 dims x 8 heads, heads >= NG zero, qf from
 * idx_q_frags) into cacc [2 KPT][4], C layout: keys lane / 4 and lane / 4
 * + 8 of the m-tile, heads 2 (lane % 4) and 2 (lane % 4) + 1. SL is the
 * slice, a constant so that qf stays in registers. */
template <int KPT, int SL>
static __device__ __forceinline__ void idx_unit_tc(const char *stage, const uint32_t (&qf)[8][2],
                                                   float (&cacc)[2 * KPT][4])
{
    constexpr int SB = IDX_ROWB / KPT, KS = 8 / KPT; /* row bytes, k-steps per slice */
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int mt = 0; mt < 2 * KPT; mt++) {
        const int row = mt * 16 + (lane & 15); /* ldmatrix x4: rows 0-15, then chunk + 1 */
        const int sw = KPT <= 2 ? (row & 7) : ((row >> 1) & 3);
#pragma unroll
        for (int j = 0; j < KS; j++) {
            uint32_t a[4];
            m3t_ldsm4(a, stage + row * SB + (((2 * j + (lane >> 4)) ^ sw) << 4));
            m3t_mma(cacc[mt], a, qf[SL * KS + j][0], qf[SL * KS + j][1]);
        }
    }
}

/* idx_unit_tc for a slice sl known only at run time (one warp-uniform
 * branch per slice) */
template <int KPT>
static __device__ __forceinline__ void idx_unit_tc_sl(const char *stage,
                                                      const uint32_t (&qf)[8][2], int sl,
                                                      float (&cacc)[2 * KPT][4])
{
    if constexpr (KPT == 1) {
        idx_unit_tc<1, 0>(stage, qf, cacc);
    } else if constexpr (KPT == 2) {
        if (sl == 0)
            idx_unit_tc<2, 0>(stage, qf, cacc);
        else
            idx_unit_tc<2, 1>(stage, qf, cacc);
    } else {
        static_assert(KPT == 4, "1, 2 or 4 keys per lane");
        if (sl == 0)
            idx_unit_tc<4, 0>(stage, qf, cacc);
        else if (sl == 1)
            idx_unit_tc<4, 1>(stage, qf, cacc);
        else if (sl == 2)
            idx_unit_tc<4, 2>(stage, qf, cacc);
        else
            idx_unit_tc<4, 3>(stage, qf, cacc);
    }
}

/* B fragments of q [NG][128] (fp32 holding bf16 values) for the 8 k-steps
 * of 16 dims: column n = lane / 4 (a head; zero for n >= NG), rows 2 (lane %
 * 4) (+ 1) and + 8 (+ 9); bf16 bits, the lower dim in the low half. */
template <int NG>
static __device__ __forceinline__ void idx_q_frags(const float *qs, uint32_t (&qf)[8][2])
{
    const int lane = threadIdx.x & 31, n = lane >> 2, k = 2 * (lane & 3);
#pragma unroll
    for (int ks = 0; ks < 8; ks++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int e = ks * 16 + k + 8 * h;
            qf[ks][h] = n < NG ? (__float_as_uint(qs[n * IDX_D + e]) >> 16) |
                                     (__float_as_uint(qs[n * IDX_D + e + 1]) & 0xffff0000u)
                               : 0u;
        }
}

/* Tile maxima of the tensor-core accumulators: tile k of the warp tile (keys
 * 32 k .. 32 k + 31, m-tiles 2 k and 2 k + 1), its first nv keys, NaN never
 * winning; the max per head in every lane of the head's quad column. */
template <int KPT>
static __device__ __forceinline__ void idx_tile_max_tc(const float (&cacc)[2 * KPT][4], int k,
                                                       int nv, float &m0, float &m1)
{
    const int r = (threadIdx.x & 31) >> 2;
    m0 = -INFINITY, m1 = -INFINITY;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int key = 16 * h + 8 * e + r;
            const float a = cacc[2 * k + h][2 * e], b = cacc[2 * k + h][2 * e + 1];
            if (key < nv && a == a)
                m0 = mix_omax(m0, a);
            if (key < nv && b == b)
                m1 = mix_omax(m1, b);
        }
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
        m0 = mix_omax(m0, m3_shfl_xor(m0, o));
        m1 = mix_omax(m1, m3_shfl_xor(m1, o));
    }
}
#endif /* M3_TC */

/* The ticket: one GPU-scope acquire-release atomic add, returning the old
 * value. Release: the block's list stores, ordered before thread 0 by the
 * block barrier (cumulativity, as with the fence it replaces); acquire:
 * every other block's lists, for the last block (whose other threads read
 * them after the next barrier). One instruction instead of fence, atomic
 * and fence: H200 bench-gpu (a tuning build, same run as the fence form):
 * 19.78 / 75.55 us against 20.06 / 76.70 us at 128K / 1M. */
static __device__ __forceinline__ unsigned idx_ticket(unsigned *p)
{
#if MIX_CPASYNC && defined(__CUDA_ARCH__)
    unsigned k;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(k) : "l"(p) : "memory");
    return k;
#else
    __threadfence();
    const unsigned k = atomicAdd(p, 1u);
    __threadfence();
    return k;
#endif
}

#if defined(M3_EMU)
#define IDX_NOINLINE __attribute__((noinline))
#else
#define IDX_NOINLINE __noinline__
#endif

/* The top `need` (>= 1) of the golden keys in a: nl lists of len keys each
 * (list c at a + c * len, sorted descending, 0 = empty, zeros last; len = 1
 * for unsorted keys), sorted descending into o[0..r); returns r = min(need,
 * nonzero keys). One warp; a, o, surv (IDX_SCAP keys) and *scnt in shared
 * memory. m = the need-th largest of the 32 lane maxima of the list heads
 * (lane l: lists l, l + 32, ...) is a lower bound of the need-th key (need
 * distinct keys reach it), so the answer is the top `need` of the survivors
 * >= m (a prefix of each list), each ranked by counting (its rank among the
 * survivors is its rank among all keys). More than IDX_SCAP survivors
 * (adversarial data only): repeated warp argmax strictly below the previous
 * pick. Not inlined: the same code selects every block's local list and
 * does the last block's merge, so the merge runs warm in the instruction
 * caches (an earlier merge with its own, larger code cost ~16 us in the last
 * block, fetching cold code after the stream had flushed L2). */
static __device__ IDX_NOINLINE int idx_wsel(const mix_u64 *a, int nl, int len, int need,
                                            mix_u64 *o, mix_u64 *surv, unsigned *scnt)
{
    const int lane = threadIdx.x & 31;
    mix_u64 lm = 0;
    for (int c = lane; c < nl; c += 32) {
        const mix_u64 K = a[(size_t)c * len];
        lm = K > lm ? K : lm;
    }
    const mix_u64 m = mix_lane_bound(lm, need);
    if (lane == 0)
        *scnt = 0;
    idx_syncwarp();
    if (lm >= m) /* only lanes whose maximum reaches m hold survivors */
        for (int c = lane; c < nl; c += 32)
            for (int s = 0; s < len; s++) {
                const mix_u64 K = a[(size_t)c * len + s];
                if (K < m)
                    break;
                const unsigned slot = atomicAdd(scnt, 1u);
                if (slot < IDX_SCAP)
                    surv[slot] = K;
            }
    idx_syncwarp();
    const int S = (int)*scnt;
    int r = 0;
    if (S <= IDX_SCAP) {
        for (int i = lane; i < S; i += 32) {
            const mix_u64 K = surv[i];
            int q = 0;
            for (int j = 0; j < S; j++)
                q += surv[j] > K;
            if (q < need)
                o[q] = K;
        }
        r = S < need ? S : need;
    } else {
        const int n = nl * len;
        mix_u64 last = ~(mix_u64)0;
        for (; r < need; r++) {
            mix_u64 best = 0;
            for (int i = lane; i < n; i += 32) {
                const mix_u64 K = a[i];
                if (K < last && K > best)
                    best = K;
            }
            best = mix_warp_max_u64(best);
            if (best == 0)
                break;
            if (lane == 0)
                o[r] = best;
            last = best;
        }
    }
    idx_syncwarp();
    return r;
}

/* Merge of row t by the last block: every block's lists, published as
 * [NG][P][np] golden keys (np = need rounded up to even; each list sorted
 * descending, 0-padded), staged into shared memory (stg, the free ring) by
 * 16-byte cp.async all in flight at once (one L2 round trip; the previous
 * merge walked the lists with chains of dependent loads, ~7.5 us), then one
 * warp per head takes the top `need` with idx_wsel. Forced blocks first
 * (ascending), -1 padding. out + g * ostride: the topk entries of head g. */
template <int NG>
static __device__ void idx_merge(int32_t *out, size_t ostride, const mix_u64 *lists, int P, int np,
                                 int nf, int need, int nb, int qb, int topk, int local_blocks,
                                 int init_blocks, mix_u64 *stg, mix_u64 *tmpl, mix_u64 *surv,
                                 unsigned *scnt)
{
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    if (need > 0) {
        const int n16 = NG * P * np / 2;
        for (int e = tid; e < n16; e += (int)blockDim.x)
            mix_cp16(stg + 2 * e, lists + 2 * e);
        mix_cp_commit();
        mix_cp_wait<0>();
    }
    __syncthreads();
    if (w >= NG)
        return;
    const int g = w;
    int32_t *o = out + (size_t)g * ostride;
    if (lane == 0)
        msa_forced_list(o, nb, qb, topk, local_blocks, init_blocks);
    int n = 0;
    if (need > 0) {
        mix_u64 *ol = tmpl + g * IDX_LCAP;
        n = idx_wsel(stg + (size_t)g * P * np, P, np, need, ol, surv + g * IDX_SCAP, scnt + g);
        for (int i = lane; i < n; i += 32)
            o[nf + i] = (int32_t)~(unsigned)(ol[i] & 0xffffffffu);
    }
    for (int i = nf + n + lane; i < topk; i += 32)
        o[i] = -1;
}

/* grid (P, T), NW warps, KPT keys per lane. flags: IDX_F_PROVEN = FMA
 * where the range words prove it exact (FMA = 1 builds only),
 * IDX_F_SCORES_ONLY = block scores only (timing of the streaming part; out,
 * ctr, ws untouched), IDX_F_NO_MERGE = lists and tickets but the last block
 * does not merge (timing; out untouched). */
template <int NG, int NW, int ST, int KPT, int SC>
__global__ void IDX_BOUNDS(NW * 32)
    k_idx(int32_t *out, float *bs, const float *iq, const char *ikc, const int32_t *page_table,
          int B, int64_t pos0, int T, int nbmax, int topk, int local_blocks, int init_blocks,
          unsigned *ctr, mix_u64 *ws, const unsigned *ikr, int flags)
{
    typedef idx_lay<NG, NW, ST> L;
    constexpr int NT = NW * 32, CS = IDX_LCAP + IDX_RT;
    constexpr int CPS = 16 / KPT, SB = IDX_ROWB / KPT; /* chunks / bytes of a row per unit */
    M3_DYN_SHARED(float, smem_f);
    char *sm = (char *)smem_f;
    float *qs = (float *)(sm + L::q);
    float *tmx = (float *)(sm + L::tmx);
    mix_u64 *cand = (mix_u64 *)(sm + L::cand);
    mix_u64 *tmpl = (mix_u64 *)(sm + L::tmpl);
    mix_u64 *surv = (mix_u64 *)(sm + L::surv);
    unsigned *misc = (unsigned *)(sm + L::misc); /* [0] ticket [1] q not FMA-safe [4 + g] list
                                                  * length [8 + g] survivor count */
    int32_t *pg = (int32_t *)(sm + L::pg);       /* page of each MSA block of the round */
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int t = blockIdx.y, c = blockIdx.x, P = gridDim.x;
    const int64_t pos = pos0 + t;
    const int qb = (int)(pos / B), nb = qb + 1;
    const int blo = (int)((int64_t)c * nb / P), bhi = (int)((int64_t)(c + 1) * nb / P);
    const int64_t klo = (int64_t)blo * B;
    const int64_t khi = (int64_t)bhi * B < pos + 1 ? (int64_t)bhi * B : pos + 1;
    const int nkeys = khi > klo ? (int)(khi - klo) : 0;
    const int ntile = (nkeys + 31) >> 5;     /* 32-key tiles */
    const int tpb = B >> 5;                  /* tiles per MSA block */
    const int rtiles = (IDX_RT / tpb) * tpb; /* tiles per round: whole blocks */
    char *stage = sm + L::ring + (size_t)w * ST * IDX_TILEB;
    const int scores_only = (flags & IDX_F_SCORES_ONLY) != 0;

    idx_pdl_trigger();
    if (tid < 16)
        misc[tid] = 0;

    /* pages of the round's MSA blocks from tile r0 on (read before the
     * wait for round 0: the page table is not the previous kernel's output) */
    auto load_pages = [&](int r0) {
        const int b0 = blo + r0 / tpb, n = (ntile - r0 + tpb - 1) / tpb;
        for (int i = tid; i < n && i < IDX_RT; i += NT)
            pg[i] = page_table[b0 + i];
    };
    /* unit u of this warp in the round from r0 (warp tile u / KPT of the
     * warp: tiles r0 + (w + (u / KPT) * NW) * KPT + k, slice u % KPT) into
     * ring slot u % ST; one commit group per call (empty past the round) */
    auto issue = [&](int u, int r0, int tend) {
        const int tl0 = r0 + (w + (u / KPT) * NW) * KPT, sl = u % KPT;
        if (tl0 < tend) {
            const char *src[KPT];
            int nv[KPT];
MSA_UNROLL
            for (int k = 0; k < KPT; k++) {
                const unsigned f = (unsigned)(tl0 + k) * 32u; /* key offset from klo */
                const unsigned bq = f / (unsigned)B;
                const unsigned off = f - bq * (unsigned)B;
                nv[k] = tl0 + k < tend ? (nkeys - (int)f < 32 ? nkeys - (int)f : 32) : 0;
                src[k] = ikc + ((int64_t)pg[nv[k] > 0 ? (int)bq - r0 / tpb : 0] * B + off) *
                                   (int64_t)IDX_ROWB +
                         sl * SB;
            }
            char *dst = stage + (size_t)(u % ST) * IDX_TILEB;
            const int cc = lane % CPS, sw = KPT <= 2 ? 0 : 1;
MSA_UNROLL
            for (int i = 0; i < 16; i++) { /* 512 bytes per warp instruction */
                const int r = i * (32 / CPS) + lane / CPS, k = i * KPT / 16, rr = r & 31;
                const int pos = sw ? (cc ^ ((r >> 1) & 3)) : (cc ^ (r & 7));
                if (rr < nv[k])
                    mix_cp16(dst + r * SB + (pos << 4), src[k] + rr * IDX_ROWB + cc * 16);
            }
        }
        mix_cp_commit();
    };

    /* before the wait: the first round's prologue when its tiles hold only
     * keys of positions < pos0 */
    load_pages(0);
    __syncthreads(); /* misc, pages of round 0 */
    int pre = 0;
    const int npro = ST - 1; /* prologue units */
    {
        const int tend = ntile < rtiles ? ntile : rtiles;
        int last = -1; /* the last tile of the prologue units that exists */
        for (int u = 0; u < npro; u++)
            for (int k = 0; k < KPT; k++) {
                const int tl = (w + (u / KPT) * NW) * KPT + k;
                if (tl < tend && tl > last)
                    last = tl;
            }
        pre = last < 0 || klo + (int64_t)last * 32 + 31 < pos0;
        if (pre)
            for (int u = 0; u < npro; u++)
                issue(u, 0, tend);
    }
    idx_pdl_wait();

    /* q of row t and the FMA exactness check (see idx_fma_exact), -inf past
     * the visible blocks */
    const int proven = (flags & IDX_F_PROVEN) && ikr != NULL;
    unsigned rlo = M3G_IKR_NONE, rhi = 255u; /* the cache's range words */
    if (SC && proven)
        rlo = ikr[0], rhi = ikr[1];
    unsigned qbad = 0;
    for (int e = tid; e < NG * IDX_D; e += NT) {
        const float v = iq[(size_t)t * NG * IDX_D + e];
        qs[e] = v;
        if (SC)
            qbad |= !proven || !idx_fma_exact(v, rlo, rhi);
    }
    if (qbad)
        atomicAdd(&misc[1], 1u);
    float *bsrow = bs + (size_t)t * NG * nbmax;
    for (int b = nb + c * NT + tid; b < nbmax; b += P * NT)
        for (int g = 0; g < NG; g++)
            bsrow[(size_t)g * nbmax + b] = -INFINITY;
    __syncthreads();
    const int use_fma = SC == 1 && proven && misc[1] == 0;
#if M3_TC
    const int use_tc = SC == 2 && proven && misc[1] == 0; /* every product exact */
    uint32_t qf[8][2];
    float cacc[2 * KPT][4];
    if (SC == 2)
        idx_q_frags<NG>(qs, qf);
#endif

    const int nf = msa_forced_list(NULL, nb, qb, topk, local_blocks, init_blocks); /* every head */
    const int need = topk - nf;
    const int bmax = (nb + P - 1) / P; /* MSA blocks per block of the row, at most */

    for (int r0 = 0; r0 < ntile; r0 += rtiles) {
        const int tend = r0 + rtiles < ntile ? r0 + rtiles : ntile;
        const int nwt = (tend - r0 + KPT - 1) / KPT; /* warp tiles in the round */
        const int myn = nwt > w ? (nwt - w + NW - 1) / NW * KPT : 0; /* my units */
        if (r0 > 0) {
            load_pages(r0);
            __syncthreads();
        }
        if (r0 > 0 || !pre)
            for (int u = 0; u < npro; u++)
                issue(u, r0, tend);
        float acc[KPT][NG];
        for (int u = 0; u < myn; u++) {
            issue(u + ST - 1, r0, tend);
            mix_cp_wait<ST - 1>(); /* unit u landed (this thread's copies) */
            idx_syncwarp();        /* ... and every lane's */
            const int sl = u % KPT;
            const char *st = stage + (size_t)(u % ST) * IDX_TILEB;
#if M3_TC
            if (use_tc) { /* warp-uniform */
                if (sl == 0)
MSA_UNROLL
                    for (int m = 0; m < 2 * KPT; m++)
                        cacc[m][0] = cacc[m][1] = cacc[m][2] = cacc[m][3] = 0.0f;
                idx_unit_tc_sl<KPT>(st, qf, sl, cacc);
            } else
#endif
            {
                if (sl == 0)
MSA_UNROLL
                    for (int k = 0; k < KPT; k++)
MSA_UNROLL
                        for (int g = 0; g < NG; g++)
                            acc[k][g] = 0.0f;
                if (SC == 1 && use_fma)
                    idx_unit<NG, KPT, 1>(st, qs, sl, acc);
                else
                    idx_unit<NG, KPT, 0>(st, qs, sl, acc);
            }
            idx_syncwarp(); /* stage u % ST free for unit u + ST */
            if (sl == KPT - 1) { /* warp tile done: tile maxima (keys ascending) */
                const int tl0 = r0 + (w + (u / KPT) * NW) * KPT;
MSA_UNROLL
                for (int k = 0; k < KPT; k++) {
                    const int tl = tl0 + k;
                    if (tl >= tend) /* warp-uniform */
                        break;
                    const int nv = nkeys - tl * 32 < 32 ? nkeys - tl * 32 : 32;
#if M3_TC
                    if (use_tc) {
                        float m0, m1;
                        idx_tile_max_tc<KPT>(cacc, k, nv, m0, m1);
                        const int g0 = 2 * lane;
                        if (lane < 4 && g0 < NG)
                            tmx[g0 * IDX_RT + (tl - r0)] = m0;
                        if (lane < 4 && g0 + 1 < NG)
                            tmx[(g0 + 1) * IDX_RT + (tl - r0)] = m1;
                        continue;
                    }
#endif
MSA_UNROLL
                    for (int g = 0; g < NG; g++) {
                        const float a = acc[k][g];
                        float sc = (lane < nv && a == a) ? a : -INFINITY; /* NaN never wins */
                        sc = mix_seg_max(sc, 32);
                        if (lane == 0)
                            tmx[g * IDX_RT + (tl - r0)] = sc;
                    }
                }
            }
        }
        mix_cp_wait<0>();
        __syncthreads(); /* tile maxima of the round complete */
        const int bl0 = r0 / tpb, nbr = (tend - r0 + tpb - 1) / tpb;
        for (int i = tid; i < NG * nbr; i += NT) {
            const int g = i / nbr, k = i - g * nbr, b = blo + bl0 + k;
            float m = -INFINITY;
            for (int q = 0; q < tpb; q++) /* keys ascending: later wins only if greater */
                if (k * tpb + q < tend - r0)
                    m = mix_omax(m, tmx[g * IDX_RT + k * tpb + q]);
            bsrow[(size_t)g * nbmax + b] = m;
            cand[g * CS + misc[4 + g] + k] = mix_key(m, b, qb, local_blocks, init_blocks);
        }
        __syncthreads();
        if (!scores_only && need > 0 && w < NG) { /* local top `need` of list + round */
            const int g = w, nc = (int)misc[4 + g] + nbr;
            mix_u64 *ca = cand + g * CS;
            const int nl = idx_wsel(ca, nc, 1, need, tmpl + g * IDX_LCAP, surv + g * IDX_SCAP,
                                    &misc[8 + g]);
            for (int i = lane; i < nl; i += 32)
                ca[i] = tmpl[g * IDX_LCAP + i];
            idx_syncwarp();
            if (lane == 0)
                misc[4 + g] = (unsigned)nl;
        }
        __syncthreads();
    }
    if (scores_only)
        return;

    /* publish this block's lists ([NG][P][np] per row), then the last block
     * of the row merges */
    mix_u64 *lists = ws + (size_t)t * P * NG * IDX_LCAP;
    /* list length: a block's list holds at most min(need, its MSA blocks)
     * keys, its MSA blocks <= ceil(nb / P) (128K: 8 of 16, half the staging) */
    const int npk = need < bmax ? need : bmax;
    const int np = npk > 0 ? (npk + 1) & ~1 : 0;
    for (int i = tid; i < NG * np; i += NT) {
        const int g = i / np, s = i - g * np;
        lists[((size_t)g * P + c) * np + s] = s < (int)misc[4 + g] ? cand[g * CS + s] : 0;
    }
    __syncthreads(); /* the block's list stores happen before thread 0's release */
    if (tid == 0)
        misc[0] = idx_ticket(&ctr[t]);
    __syncthreads();
    if (misc[0] != (unsigned)(P - 1))
        return;
    if (!(flags & IDX_F_NO_MERGE))
        idx_merge<NG>(out + (size_t)t * topk, (size_t)T * topk, lists, P, np, nf, need, nb, qb,
                      topk, local_blocks, init_blocks, (mix_u64 *)(sm + L::ring), tmpl, surv,
                      &misc[8]);
    if (tid == 0)
        ctr[t] = 0; /* ready for the next launch */
}

/* Blocks per row: one per SM, split over the T rows, at most one per MSA
 * block and IDX_PMAX. */
static int idx_grid_p(int T, int nbmax)
{
    const int nsm = msa_nsm();
    int P = nsm / (T > 0 ? T : 1);
    P = P < 1 ? 1 : P;
    P = P > nbmax ? nbmax : P;
    return P > IDX_PMAX ? IDX_PMAX : P;
}

template <int NG, int NW, int ST, int KPT, int SC>
static hipError_t idx_launch(int32_t *out, float *bs, const float *iq, const void *ikc,
                             const int32_t *page_table, int B, int64_t pos0, int T, int nbmax,
                             int topk, int local_blocks, int init_blocks, unsigned *ctr, void *ws,
                             const unsigned *ikr, int flags, int pdl, hipStream_t st)
{
    const size_t shm = idx_lay<NG, NW, ST>::total;
    const int P = idx_grid_p(T, nbmax);
    const char *ik = (const char *)ikc;
    mix_u64 *w = (mix_u64 *)ws;
#if MIX_CPASYNC
    if (cudaFuncSetAttribute(k_idx<NG, NW, ST, KPT, SC>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm) != cudaSuccess)
        return hipErrorInvalidValue;
#endif
    return m3d_launch(k_idx<NG, NW, ST, KPT, SC>, dim3(P, T), dim3(NW * 32), shm, pdl, st, out,
                      bs, iq, ik, page_table, B, pos0, T, nbmax, topk, local_blocks, init_blocks,
                      ctr, w, ikr, flags);
}

/* The default: 12 warps, 2 x 8 KB stages per warp (192 KB ring), one block
 * per SM, IDX_KPT_DEFAULT keys per lane. */
#define IDX_KPT_DEFAULT 2
/* G = 4: 4 keys per lane when every block has at most this many MSA
 * blocks (short contexts: 128K on 132 SMs is 8), else IDX_KPT_DEFAULT */
#define IDX_KPT4_MAXB 16

/* sc: the scores the kernel may use (its flags and the per-launch check
 * decide): 0 multiply then add, 1 also fmaf, 2 also tensor cores (NVIDIA).
 * Scalar scores (sc 0, 1): 12 warps x 2 stages, 4 keys per lane when every
 * block has at most IDX_KPT4_MAXB MSA blocks (G = 4), else
 * IDX_KPT_DEFAULT; other shapes of the same 192 KB ring measured slower
 * (H200, bench-gpu, with this merge): 8 warps x 3 stages 22.54 / 97.01 us
 * at 128K / 1M, 6 warps x 4 stages 25.51 / 123.06 us (default 22.32 /
 * 86.35 us in the same run). Tensor-core scores (sc 2): 8 warps x 3
 * stages, 1 key per lane (whole 256-byte rows per unit, every warp busy
 * at 128K), the fastest of 1 / 2 / 4 keys per lane x 12 x 2 / 8 x 3 / 6 x
 * 4 in one run (docs/designs-tried.md). */
#if M3_TC
#define IDX_SC(NG, KPT)                                                                        \
    (sc == 2   ? idx_launch<NG, 8, 3, 1, 2>(IDX_ARGS)                                          \
     : sc == 1 ? idx_launch<NG, 12, 2, KPT, 1>(IDX_ARGS)                                       \
               : idx_launch<NG, 12, 2, KPT, 0>(IDX_ARGS))
#else
#define IDX_SC(NG, KPT)                                                                        \
    (sc ? idx_launch<NG, 12, 2, KPT, 1>(IDX_ARGS) : idx_launch<NG, 12, 2, KPT, 0>(IDX_ARGS))
#endif
static hipError_t idx_dispatch(int G, int sc, int32_t *out, float *bs, const float *iq,
                               const void *ikc, const int32_t *page_table, int B, int64_t pos0,
                               int T, int nbmax, int topk, int local_blocks, int init_blocks,
                               unsigned *ctr, void *ws, const unsigned *ikr, int flags, int pdl,
                               hipStream_t st)
{
#define IDX_ARGS out, bs, iq, ikc, page_table, B, pos0, T, nbmax, topk, local_blocks, init_blocks, \
                 ctr, ws, ikr, flags, pdl, st
    const int P = idx_grid_p(T, nbmax), bmax = (nbmax + P - 1) / P;
    if (G == 4)
        return bmax <= IDX_KPT4_MAXB ? IDX_SC(4, 4) : IDX_SC(4, 2);
    if (G == 3)
        return IDX_SC(3, IDX_KPT_DEFAULT);
    if (G == 2)
        return IDX_SC(2, IDX_KPT_DEFAULT);
    return IDX_SC(1, IDX_KPT_DEFAULT);
#undef IDX_ARGS
}
#undef IDX_SC

/* Bandwidth ceiling (benchmark only, M3G_IDX_CEILING): a trivial kernel that
 * streams the same n bytes with the indexer's grid style (nsm * mult blocks
 * of 384 threads, each a contiguous range; 8 independent 16-byte loads per
 * thread in flight) and does nothing with them (a data-dependent store that
 * never happens keeps the loads). pdl: released at once and waiting for
 * the previous kernel before the first load, as k_idx after its prologue. */
__global__ void IDX_BOUNDS(384) k_idx_ceil(const uint4 *p, int64_t n16, float *sink)
{
    idx_pdl_trigger();
    idx_pdl_wait();
    const int64_t lo = (int64_t)blockIdx.x * n16 / gridDim.x;
    const int64_t hi = (int64_t)(blockIdx.x + 1) * n16 / gridDim.x;
    unsigned x = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += 8 * 384) {
        uint4 v[8];
MSA_UNROLL
        for (int j = 0; j < 8; j++)
            if (i + j * 384 < hi)
                v[j] = p[i + j * 384];
            else
                v[j].x = v[j].y = v[j].z = v[j].w = 0;
MSA_UNROLL
        for (int j = 0; j < 8; j++)
            x ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    if (x == 0x9e3779b9u && threadIdx.x == 1023) /* never (384 threads) */
        sink[0] = (float)x;
}

static hipError_t idx_ceil_launch(const void *p, int64_t nbytes, float *sink, int mult, int pdl,
                                  hipStream_t st)
{
    const dim3 grid((unsigned)(msa_nsm() * mult));
    const int64_t n16 = nbytes / 16;
    return m3d_launch(k_idx_ceil, grid, dim3(384), 0, pdl, st, (const uint4 *)p, n16, sink);
}

/* 1 iff the streaming kernel takes these shapes (host only). */
static int idx_takes_shape(int ik_dtype, int B, int G, int d, int nbmax, int topk)
{
    return ik_dtype == M3G_BF16 && d == IDX_D && G >= 1 && G <= 4 && B >= 32 && B % 32 == 0 &&
           B <= 32 * IDX_RT && topk <= IDX_LCAP && (int64_t)nbmax * B < ((int64_t)1 << 31);
}

/* ... and these buffers (host only). */
static int idx_takes(const void *ikc, int ik_dtype, int B, int G, int d, int nbmax, int topk,
                     const unsigned *ctr, const void *ws)
{
    return ctr != NULL && ws != NULL && ((uintptr_t)ikc & 15) == 0 && ((uintptr_t)ws & 15) == 0 &&
           idx_takes_shape(ik_dtype, B, G, d, nbmax, topk);
}

#endif /* IDX_ON */

static size_t idx_ws(int T, int G, int nbmax)
{
#if IDX_ON
    return sizeof(mix_u64) * (size_t)T * idx_grid_p(T, nbmax) * G * IDX_LCAP;
#else
    (void)T, (void)G, (void)nbmax;
    return 0;
#endif
}

size_t m3g_msa_indexer_ws(int T, int G, int nbmax)
{
    if (T <= 0 || G <= 0 || nbmax <= 0)
        return 0;
    const size_t a = sizeof(mix_u64) * (size_t)T * G * mix_grid_p(MIX_MAX_PER_SM, T, nbmax);
    const size_t b = idx_ws(T, G, nbmax);
    return a > b ? a : b;
}

hipError_t m3g_msa_indexer_ex(int32_t *out, float *bs, const float *iq, const void *ikc,
                              int ik_dtype, const int32_t *page_table, int B, int64_t pos0, int T,
                              int G, int d, int nbmax, int topk, int local_blocks,
                              int init_blocks, unsigned *ctr, void *ws, size_t ws_bytes,
                              const unsigned *ik_range, int probe, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (G <= 0 || d <= 0 || B <= 0 || topk <= 0 || topk > 32 ||
        (ik_dtype != M3G_F32 && ik_dtype != M3G_BF16) ||
        (probe & ~(M3G_IDX_EXACT | M3G_IDX_FUSED | M3G_IDX_SCORES_ONLY | M3G_IDX_NO_PDL |
                   M3G_IDX_NO_MERGE | M3G_IDX_CEILING | (3 << 12))) != 0)
        return hipErrorInvalidValue;
    const int need_ws_ok = ws_bytes >= m3g_msa_indexer_ws(T, G, nbmax);
#if IDX_ON
    if ((probe & M3G_IDX_CEILING) && ik_dtype == M3G_BF16) /* bandwidth ceiling (timing only) */
        return idx_ceil_launch(ikc, (int64_t)nbmax * B * d * 2, bs, 1 << ((probe >> 12) & 3),
                               (probe & M3G_IDX_NO_PDL) == 0, st);
    if (!(probe & M3G_IDX_FUSED) && need_ws_ok && T <= 65535 &&
        idx_takes(ikc, ik_dtype, B, G, d, nbmax, topk, ctr, ws)) {
        const int proven = ik_range != NULL;
        const int sc = !proven ? 0 : (M3_TC && !(probe & M3G_IDX_EXACT)) ? 2 : 1;
        return idx_dispatch(G, sc, out, bs, iq, ikc, page_table, B, pos0, T, nbmax, topk,
                            local_blocks, init_blocks, ctr, ws, ik_range,
                            (proven ? IDX_F_PROVEN : 0) |
                                ((probe & M3G_IDX_SCORES_ONLY) ? IDX_F_SCORES_ONLY : 0) |
                                ((probe & M3G_IDX_NO_MERGE) ? IDX_F_NO_MERGE : 0),
                            (probe & M3G_IDX_NO_PDL) == 0, st);
    }
#else
    (void)ik_range;
#endif
    const int esz = ik_dtype == M3G_BF16 ? 2 : 4;
    const int fused = ctr != NULL && ws != NULL && need_ws_ok && G <= 4 &&
                      (d * esz) % 16 == 0 && (B % 32 == 0 || (B < 32 && 32 % B == 0)) &&
                      nbmax <= (1 << 24) && (int64_t)nbmax * B < ((int64_t)1 << 31);
    if (!fused) { /* general shapes: the two-launch path */
        hipError_t e = m3g_msa_block_scores(bs, iq, ikc, ik_dtype, page_table, B, pos0, T, G, d,
                                            nbmax, st);
        if (e != hipSuccess)
            return e;
        return m3g_msa_select(out, bs, pos0, T, G, nbmax, B, topk, local_blocks, init_blocks, st);
    }
    if (ik_dtype == M3G_BF16) /* the fused kernel */
        return mix_dispatch_g<1>(G, out, bs, iq, ikc, page_table, B, pos0, T, d, nbmax, topk,
                                 local_blocks, init_blocks, ctr, ws, st);
    return mix_dispatch_g<0>(G, out, bs, iq, ikc, page_table, B, pos0, T, d, nbmax, topk,
                             local_blocks, init_blocks, ctr, ws, st);
}

int m3g_msa_indexer_tc(int ik_dtype, int B, int G, int d, int nbmax, int topk, int ranged,
                       int probe)
{
#if IDX_ON && M3_TC
    return ranged && !(probe & (M3G_IDX_EXACT | M3G_IDX_FUSED | M3G_IDX_CEILING)) &&
           idx_takes_shape(ik_dtype, B, G, d, nbmax, topk);
#else
    (void)ik_dtype, (void)B, (void)G, (void)d, (void)nbmax, (void)topk, (void)ranged,
        (void)probe;
    return 0;
#endif
}

hipError_t m3g_msa_indexer(int32_t *out, float *bs, const float *iq, const void *ikc, int ik_dtype,
                           const int32_t *page_table, int B, int64_t pos0, int T, int G, int d,
                           int nbmax, int topk, int local_blocks, int init_blocks, unsigned *ctr,
                           void *ws, size_t ws_bytes, hipStream_t st)
{
    return m3g_msa_indexer_ex(out, bs, iq, ikc, ik_dtype, page_table, B, pos0, T, G, d, nbmax,
                              topk, local_blocks, init_blocks, ctr, ws, ws_bytes, NULL, 0, st);
}
