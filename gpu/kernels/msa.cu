/* msa.cu — the MSA lightning indexer on the GPU: block scores over the paged
 * index-K cache, and the golden-order top-k block selection.
 *
 * Must match: ref/msa.c m3_msa_block_scores (bitwise: each dot product is
 * one fp32 accumulator over d ascending, as in ref, and max is
 * order-free; build with --fmad=false / -ffp-contract=off) and
 * m3_msa_select (exactly: same total order, same forced blocks).
 * Spec: M3-MSA-SCORE-1 (s = iq[g] . ik[j], fp32, unscaled, j <= pos),
 * M3-MSA-BLOCK-1 (block max over visible keys, -inf if none),
 * M3-MSA-SELECT-* (forced init blocks 0..init-1 and local blocks
 * qb-local+1..qb first ascending, then descending score, ties to the lower
 * id, -inf never selected, -1 padding), M3-MSA-CACHE-1.
 *
 * Structure: block scores: one thread block per (key block b, query t).
 * Streaming kernel (G <= 4, d % 8 == 0): thread per key, the row in
 * registers by 16-byte loads, bf16 (bf16 mode) or fp32 cache, all heads per
 * load. Tiled fallback: 32-key tiles of an fp32 cache in shared memory, warp
 * per index head, lane per key. Select: block per (t, g); each warp takes
 * the golden-order top `need` of its segment by repeated warp argmax
 * "strictly after the previous pick", then warp 0 the top `need` of the
 * candidates.
 *
 * Measured (H200, docs/performance.md): decode indexer 50.5 us at 128K,
 * 194 us at 1M (bf16 cache). Tuning next: ~30 us of that is fixed (select
 * rounds + launch): fuse per-CTA candidate lists into the score kernel and
 * merge sorted lists; stage rows through shared memory coalesced; prefill:
 * the scores are a [T x G*d] by [d x keys] GEMM with a block-max epilogue.
 */
#include <math.h>
#include "common.cuh"
#include "kernels.h"

#define MSA_KT 32

#ifdef M3_EMU
#define MSA_UNROLL /* g++: no unroll pragma needed */
#else
#define MSA_UNROLL _Pragma("unroll")
#endif

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

__device__ __forceinline__ int msa_before(float sa, int a, float sb, int b)
{
    return sa > sb || (sa == sb && a < b);
}

__device__ __forceinline__ int msa_forced(int b, int qb, int local_blocks, int init_blocks)
{
    return b < init_blocks || (b <= qb && b > qb - local_blocks);
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
    int n = 0;
    /* forced blocks in ascending id (at most topk) */
    for (int b = 0; b < nb && n < topk; b++) {
        if (b >= init_blocks && b <= qb - local_blocks) { /* jump over the unforced middle */
            b = qb - local_blocks;
            continue;
        }
        if (msa_forced(b, qb, local_blocks, init_blocks)) {
            if (threadIdx.x == 0)
                o[n] = b;
            n++;
        }
    }
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
