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
 * Decode path (m3g_msa_indexer, end of this file): ONE launch for block
 * scores + selection, coalesced cp.async slices through shared memory,
 * last-block-done selection. Measured on the H200 (bench-gpu, median of
 * 20 graph replays, cold cache, bf16 cache, 4 heads x 128, B 128, top 16):
 * 45.45 us at 128K (15.4% of 4.8 TB/s for the 32 MiB cache) and 190.16 us at
 * 1M (29.4%), vs 51.18 / 194.82 us for the two-launch path in the same run;
 * scores bitwise and top-16 identical to the host golden on the device.
 * Target (>= 70%: ~10 us / ~80 us) NOT met. Every variant tried (FMA vs
 * mul+add, 128 or 256 threads, 1 or 2 keys per thread, 3- or 4-deep ring,
 * 1-3 blocks per SM) streams at the same ~1.6-1.8 TB/s marginal rate plus
 * ~25-38 us per launch, as does the old kernel: the limiter is something
 * these designs share and was not identified without a profiler (ncu:
 * dram throughput, stall reasons, achieved occupancy are the next step;
 * suspects: the int64 div/mod by B per copied row (page lookup; removed
 * after the measurement, see below), the 64-byte
 * slices at 256-byte stride (DRAM page locality), smem carveout giving 1
 * block per SM). Configuration 1 (bench-gpu "rows" cases) addresses the
 * first two: whole 256-byte rows per slice (512 contiguous bytes per warp
 * copy) and one 32-bit division per group (the other configurations now
 * share that); written after the last device run of the session, checked
 * in emulation only, NOT measured. Prefill (large T): one block per row,
 * correct but not tuned; the scores are a [T x G*d] by [d x keys] GEMM with
 * a block-max epilogue.
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
 * Scores: by default each product is a multiply then an add, as ref
 * (bitwise). Opt-in (m3g_msa_indexer_tuned variant bit 0, the bench's
 * "fma" rows): in bf16 mode iq and the index-K cache hold bf16 values, so
 * every product q_i * k_i has at most 16 significant bits and is exact in
 * fp32, and fmaf(q, k, a) == a + q * k bit for bit; the kernel checks that
 * every iq value is bf16 and otherwise multiplies then adds. The FMA could
 * differ only for a product outside fp32's normal range (|q_i k_i| >
 * FLT_MAX, or a subnormal product with bits below 2^-149 while the running
 * sum is itself tiny). It measured no faster on the H200 (the kernel is not
 * FP-bound: see the file header), so it is off by default.
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
                float kv[VPC];
                if (BF) {
                    kv[0] = __uint_as_float(v.x << 16);
                    kv[1] = __uint_as_float(v.x & 0xffff0000u);
                    kv[2 % VPC] = __uint_as_float(v.y << 16);
                    kv[3 % VPC] = __uint_as_float(v.y & 0xffff0000u);
                    kv[4 % VPC] = __uint_as_float(v.z << 16);
                    kv[5 % VPC] = __uint_as_float(v.z & 0xffff0000u);
                    kv[6 % VPC] = __uint_as_float(v.w << 16);
                    kv[7 % VPC] = __uint_as_float(v.w & 0xffff0000u);
                } else {
                    kv[0] = __uint_as_float(v.x);
                    kv[1] = __uint_as_float(v.y);
                    kv[2] = __uint_as_float(v.z);
                    kv[3] = __uint_as_float(v.w);
                }
MSA_UNROLL
                for (int g = 0; g < NG; g++) {
                    float a = acc[i][g];
MSA_UNROLL
                    for (int e = 0; e < VPC; e++) {
                        if (FMA)
                            a = fmaf(qv[g][e], kv[e], a);
                        else
                            a += qv[g][e] * kv[e];
                    }
                    acc[i][g] = a;
                }
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

    int nf = 0; /* forced blocks (same for every head) */
    for (int b = 0; b < nb && nf < topk; b++) {
        if (b >= init_blocks && b <= qb - local_blocks) { /* jump over the unforced middle */
            b = qb - local_blocks;
            continue;
        }
        nf++;
    }
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
        if (lane == 0) { /* forced blocks, ascending */
            int n = 0;
            for (int b = 0; b < nb && n < topk; b++) {
                if (b >= init_blocks && b <= qb - local_blocks) {
                    b = qb - local_blocks;
                    continue;
                }
                o[n++] = b;
            }
        }
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
    int nf = 0;
    for (int b = 0; b < nb && nf < topk; b++) {
        if (b >= init_blocks && b <= qb - local_blocks) {
            b = qb - local_blocks;
            continue;
        }
        nf++;
    }
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
        int rank = 0, nz = lm != 0;
        for (int o = 1; o < 32; o++) {
            const mix_u64 x = mix_shfl_xor_u64(lm, o);
            rank += x > lm;
            nz += x != 0;
        }
        mix_u64 m = (lm != 0 && rank == need - 1) ? lm : 0;
        m = mix_warp_max_u64(m);
        if (nz < need) /* fewer non-empty lanes than needed: every valid key */
            m = 1;
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
        if (lane == 0) { /* forced blocks, ascending */
            int n = 0;
            for (int b = 0; b < nb && n < topk; b++) {
                if (b >= init_blocks && b <= qb - local_blocks) {
                    b = qb - local_blocks;
                    continue;
                }
                o[n++] = b;
            }
        }
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

/* grid (P, T), NT threads. allow_fma: fmaf scores when iq is bf16 (opt-in). */
template <int BF, int NG, int NT, int KPT, int ST, int SCH>
__global__ void k_mix_indexer(int32_t *out, float *bs, const float *iq, const void *ikc,
                              const int32_t *page_table, int B, int64_t pos0, int T, int d,
                              int nbmax, int topk, int local_blocks, int init_blocks,
                              unsigned *ctr, mix_u64 *gmax, int allow_fma, size_t stage_bytes)
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

    if (tid == 0)
        flag[1] = 0;
    __syncthreads();
    unsigned low = 0; /* bf16 check of iq: any low mantissa bits set? */
    for (int e = tid; e < NG * d; e += NT) {
        const float v = iq[(size_t)t * NG * d + e];
        qs[e] = v;
        low |= __float_as_uint(v) & 0xffffu;
    }
    if (low)
        atomicAdd(&flag[1], 1u);
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
    int use_fma = 0;
    if constexpr (BF) {
        use_fma = allow_fma && flag[1] == 0;
        if (use_fma)
            mix_stream<BF, NG, NT, KPT, ST, SCH, 1>(bsrow, nbmax, qs, wm, carry, stage,
                                                    (const char *)ikc, page_table, B, klo, nkeys,
                                                    blo, d, qb, local_blocks, init_blocks, kmax);
    }
    if (!use_fma)
        mix_stream<BF, NG, NT, KPT, ST, SCH, 0>(bsrow, nbmax, qs, wm, carry, stage,
                                                (const char *)ikc, page_table, B, klo, nkeys, blo,
                                                d, qb, local_blocks, init_blocks, kmax);
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

/* Thread blocks per row: per_sm resident blocks on every SM, split over
 * the T rows, at most one per MSA block. */
static int mix_grid_p(int per_sm, int T, int nbmax)
{
#ifndef MIX_EMU_NSM
#define MIX_EMU_NSM 2 /* emulation: "SMs" (tests may raise it to exercise large grids) */
#endif
    int nsm = MIX_EMU_NSM;
#if !defined(M3_EMU)
    int dev = 0;
    if (hipGetDevice(&dev) != hipSuccess ||
        hipDeviceGetAttribute(&nsm, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess ||
        nsm < 1)
        nsm = 1;
#endif
    int P = per_sm * nsm / T;
    P = P < 1 ? 1 : P;
    P = P > nbmax ? nbmax : P;
    return P > 65535 ? 65535 : P;
}

#define MIX_MAX_PER_SM 4 /* the largest per_sm of any configuration below */

/* Launch configuration: threads, keys per thread, ring depth, resident
 * blocks per SM (shared memory bound). ws: the group maxima [T][NG][P]. */
template <int BF, int NG, int NT, int KPT, int ST, int SCH>
static hipError_t mix_launch(int per_sm, int32_t *out, float *bs, const float *iq,
                             const void *ikc, const int32_t *page_table, int B, int64_t pos0,
                             int T, int d, int nbmax, int topk, int local_blocks, int init_blocks,
                             unsigned *ctr, void *ws, int allow_fma, hipStream_t st)
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
                       init_blocks, ctr, gmax, allow_fma, stage_bytes);
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
static hipError_t mix_dispatch(int cfg, int32_t *out, float *bs, const float *iq, const void *ikc,
                               const int32_t *page_table, int B, int64_t pos0, int T, int d,
                               int nbmax, int topk, int local_blocks, int init_blocks,
                               unsigned *ctr, void *ws, int allow_fma, hipStream_t st)
{
#if MIX_CPASYNC || defined(M3_EMU) /* (AMD: > 64 KB of LDS) */
    if constexpr (BF && NG == 4) {
        if (cfg == 1) /* whole rows per slice (512 contiguous bytes per warp copy),
                       * 128 threads, 1 key each, 3 x 34 KB ring, 2 per SM */
            return mix_launch<BF, NG, 128, 1, 3, 16>(2, out, bs, iq, ikc, page_table, B, pos0, T,
                                                     d, nbmax, topk, local_blocks, init_blocks,
                                                     ctr, ws, allow_fma, st);
        if (cfg == 2) /* 128 threads, 1 key each, 40 KB ring, 3 per SM */
            return mix_launch<BF, NG, 128, 1, 4, 4>(3, out, bs, iq, ikc, page_table, B, pos0, T, d,
                                                 nbmax, topk, local_blocks, init_blocks, ctr,
                                                 ws, allow_fma, st);
        if (cfg == 3) /* the default's 2 keys per thread with a 2-deep ring (40 KB):
                       * 4 CTAs (16 warps) per SM instead of 2, for occupancy
                       * (ncu: the default runs 8 warps per SM at 30% of DRAM) */
            return mix_launch<BF, NG, 128, 2, 2, 4>(4, out, bs, iq, ikc, page_table, B, pos0, T, d,
                                                 nbmax, topk, local_blocks, init_blocks, ctr,
                                                 ws, allow_fma, st);
    }
#endif
    (void)cfg;
    return mix_launch<BF, NG, MIX_DEFAULT>(MIX_DEFAULT_PER_SM, out, bs, iq, ikc, page_table, B,
                                           pos0, T, d, nbmax, topk, local_blocks, init_blocks,
                                           ctr, ws, allow_fma, st);
}

template <int BF>
static hipError_t mix_dispatch_g(int G, int cfg, int32_t *out, float *bs, const float *iq,
                                 const void *ikc, const int32_t *page_table, int B, int64_t pos0,
                                 int T, int d, int nbmax, int topk, int local_blocks,
                                 int init_blocks, unsigned *ctr, void *ws, int allow_fma, hipStream_t st)
{
    switch (G) {
    case 1:
        return mix_dispatch<BF, 1>(cfg, out, bs, iq, ikc, page_table, B, pos0, T, d, nbmax, topk,
                                   local_blocks, init_blocks, ctr, ws, allow_fma, st);
    case 2:
        return mix_dispatch<BF, 2>(cfg, out, bs, iq, ikc, page_table, B, pos0, T, d, nbmax, topk,
                                   local_blocks, init_blocks, ctr, ws, allow_fma, st);
    case 3:
        return mix_dispatch<BF, 3>(cfg, out, bs, iq, ikc, page_table, B, pos0, T, d, nbmax, topk,
                                   local_blocks, init_blocks, ctr, ws, allow_fma, st);
    default:
        return mix_dispatch<BF, 4>(cfg, out, bs, iq, ikc, page_table, B, pos0, T, d, nbmax, topk,
                                   local_blocks, init_blocks, ctr, ws, allow_fma, st);
    }
}

size_t m3g_msa_indexer_ws(int T, int G, int nbmax)
{
    if (T <= 0 || G <= 0 || nbmax <= 0)
        return 0;
    return sizeof(mix_u64) * (size_t)T * G * mix_grid_p(MIX_MAX_PER_SM, T, nbmax);
}

hipError_t m3g_msa_indexer_tuned(int32_t *out, float *bs, const float *iq, const void *ikc,
                                 int ik_dtype, const int32_t *page_table, int B, int64_t pos0,
                                 int T, int G, int d, int nbmax, int topk, int local_blocks,
                                 int init_blocks, unsigned *ctr, void *ws, size_t ws_bytes,
                                 int variant, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (G <= 0 || d <= 0 || B <= 0 || topk <= 0 || topk > 32 ||
        (ik_dtype != M3G_F32 && ik_dtype != M3G_BF16))
        return hipErrorInvalidValue;
    const int esz = ik_dtype == M3G_BF16 ? 2 : 4;
    const int fused = ctr != NULL && ws != NULL && ws_bytes >= m3g_msa_indexer_ws(T, G, nbmax) && G <= 4 &&
                      (d * esz) % 16 == 0 && (B % 32 == 0 || (B < 32 && 32 % B == 0)) &&
                      nbmax <= (1 << 24) && (int64_t)nbmax * B < ((int64_t)1 << 31);
    if (!fused) { /* general shapes: the two-launch path */
        hipError_t e = m3g_msa_block_scores(bs, iq, ikc, ik_dtype, page_table, B, pos0, T, G, d,
                                            nbmax, st);
        if (e != hipSuccess)
            return e;
        return m3g_msa_select(out, bs, pos0, T, G, nbmax, B, topk, local_blocks, init_blocks, st);
    }
    const int allow_fma = variant & 1, cfg = variant >> 1;
    if (ik_dtype == M3G_BF16)
        return mix_dispatch_g<1>(G, cfg, out, bs, iq, ikc, page_table, B, pos0, T, d, nbmax, topk,
                                 local_blocks, init_blocks, ctr, ws, allow_fma, st);
    return mix_dispatch_g<0>(G, cfg, out, bs, iq, ikc, page_table, B, pos0, T, d, nbmax, topk,
                             local_blocks, init_blocks, ctr, ws, allow_fma, st);
}

hipError_t m3g_msa_indexer(int32_t *out, float *bs, const float *iq, const void *ikc, int ik_dtype,
                           const int32_t *page_table, int B, int64_t pos0, int T, int G, int d,
                           int nbmax, int topk, int local_blocks, int init_blocks, unsigned *ctr,
                           void *ws, size_t ws_bytes, hipStream_t st)
{
    return m3g_msa_indexer_tuned(out, bs, iq, ikc, ik_dtype, page_table, B, pos0, T, G, d, nbmax,
                                 topk, local_blocks, init_blocks, ctr, ws, ws_bytes, 0, st);
}
