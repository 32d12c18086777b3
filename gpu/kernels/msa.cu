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
 * Structure: block scores: one thread block per (key block b, query t);
 * 32-key tiles of index-K staged in shared memory (coalesced), warp per index
 * head, lane per key, warp max. Select: one warp per (t, g), repeated warp
 * argmax "strictly after the previous pick" (k <= 32 rounds).
 *
 * Tuning next: decode at 128K-1M context is a pure stream of the index-K
 * cache (256 B/key): 128-bit loads, bf16 index-K cache in bf16 mode, several
 * key blocks per thread block; prefill: the scores are a [T x G*d] by
 * [d x keys] GEMM (tensor cores) with a fused block-max epilogue. Select:
 * per-lane register top-k then one merge, instead of k full scans.
 */
#include <math.h>
#include "common.cuh"
#include "kernels.h"

#define MSA_KT 32

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

hipError_t m3g_msa_block_scores(float *bs, const float *iq, const float *ikc,
                                const int32_t *page_table, int B, int64_t pos0, int T, int G,
                                int d, int nbmax, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (G <= 0 || G > 16 || d <= 0 || B <= 0)
        return hipErrorInvalidValue;
    const int nw = G < 4 ? G : 4; /* up to 4 heads per warp */
    const size_t shm = sizeof(float) * ((size_t)G * d + MSA_KT * (size_t)(d + 1));
    hipLaunchKernelGGL(k_msa_block_scores, dim3(nbmax, T), dim3(32 * nw), shm, st, bs, iq, ikc,
                       page_table, B, pos0, G, d, nbmax);
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

/* grid (T, G), block 32 (one warp). */
__global__ void k_msa_select(int32_t *out, const float *bs, int64_t pos0, int T, int G, int nbmax,
                             int B, int topk, int local_blocks, int init_blocks)
{
    const int t = blockIdx.x, g = blockIdx.y, lane = threadIdx.x;
    const int64_t pos = pos0 + t;
    const int qb = (int)(pos / B), nb = qb + 1;
    const float *s = bs + ((size_t)t * G + g) * nbmax;
    int32_t *o = out + ((size_t)g * T + t) * topk;
    int n = 0;
    /* forced blocks in ascending id (at most topk) */
    for (int b = 0; b < nb && n < topk; b++) {
        if (b >= init_blocks && b <= qb - local_blocks) { /* jump over the unforced middle */
            b = qb - local_blocks;
            continue;
        }
        if (msa_forced(b, qb, local_blocks, init_blocks)) {
            if (lane == 0)
                o[n] = b;
            n++;
        }
    }
    float last_s = INFINITY;
    int last_b = -1;
    while (n < topk) {
        float ps = -INFINITY;
        int pb = -1;
        for (int b = lane; b < nb; b += 32) {
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
        for (int off = 16; off > 0; off >>= 1) { /* warp argmin in golden order */
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
            o[n] = pb;
        n++;
        last_s = ps;
        last_b = pb;
    }
    for (int i = n + lane; i < topk; i += 32)
        o[i] = -1;
}

hipError_t m3g_msa_select(int32_t *out, const float *bs, int64_t pos0, int T, int G, int nbmax,
                          int B, int topk, int local_blocks, int init_blocks, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (topk <= 0 || topk > 32 || B <= 0)
        return hipErrorInvalidValue;
    hipLaunchKernelGGL(k_msa_select, dim3(T, G), dim3(32), 0, st, out, bs, pos0, T, G, nbmax, B,
                       topk, local_blocks, init_blocks);
    return hipGetLastError();
}
