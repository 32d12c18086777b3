/* attention.cu — causal GQA attention, dense or MSA block-sparse, over the
 * paged KV cache (page == MSA block of B slots); decode (T = 1) and prefill
 * (T rows) share one kernel.
 *
 * Must match: ref/attention.c m3_attention_row.
 * Spec: M3-ATTN-GQA-1 (query head j reads KV head j / (nh / nkv)),
 * M3-ATTN-SCORE-1 (s = (q . k) * hd^-0.5 in fp32, fp32 softmax, key k
 * visible iff k <= pos), M3-MSA-ATTN-1 (sparse: k allowed iff block(k) is in
 * the group's selected set and k <= pos), M3-NUM-BF16-2 item 5 (probabilities
 * rounded, P.V in fp32, output rounded).
 *
 * Structure: one thread block per (query row t, KV group g, chunk of up to
 * 16 query heads of that group): K/V tiles of 32 keys are staged in shared
 * memory once and used by every head of the group (GQA reuse), one warp per
 * head, lane j owns key j of the tile for the scores and dims lane + 32 i of
 * the output. Two passes over the keys: (1) running max / sum of exp,
 * (2) p = round(exp(s - M) / L), out += p v. This keeps the reference's
 * rounding of the normalised probability exact (a one-pass online softmax
 * cannot round p before it knows L).
 *
 * Known differences from ref (fp32 tolerance, not bitwise): the sum of exp
 * is accumulated with online rescaling; sparse layers visit blocks in golden
 * order, not ascending key order.
 *
 * Tuning next (decode at M3 shapes: 64 q / 4 kv heads, 16 x 128 keys):
 * split the key list across blocks (flash-decoding, 16-64 splits + a merge
 * kernel) — as written a decode step runs only 4 blocks; cp.async / TMA
 * double-buffered tiles; bf16 KV cache in bf16 mode (halves the bytes);
 * prefill: Q tiles of 64 rows with mma.sync / wgmma instead of per-row
 * blocks (see docs/performance.md).
 */
#include <math.h>
#include "common.cuh"
#include "kernels.h"

#define ATT_KT 32      /* keys per shared tile */
#define ATT_MAXW 16    /* query heads (warps) per block */
#define ATT_MAXHD 128  /* head_dim limit of this kernel */

__global__ void k_attention(float *out, const float *q, const float *kc, const float *vc,
                            const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                            int nkv, int hd, const int32_t *blocks, int topk, float scale,
                            int mode)
{
    M3_DYN_SHARED(float, smem);
    const int t = blockIdx.x, g = blockIdx.y;
    const int hpg = nh / nkv;
    const int nw = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = g * hpg + (int)blockIdx.z * ATT_MAXW + w; /* this warp's query head */
    const int active = (int)blockIdx.z * ATT_MAXW + w < hpg;
    const int64_t pos = pos0 + t;
    const int ks = hd + 1; /* padded K row: lane j reads row j without bank conflicts */
    float *qs = smem;                  /* [nw][hd] */
    float *Ks = qs + nw * hd;          /* [ATT_KT][hd + 1] */
    float *Vs = Ks + ATT_KT * ks;      /* [ATT_KT][hd] */
    const size_t kvw = (size_t)nkv * hd;

    if (active)
        for (int d = lane; d < hd; d += 32)
            qs[w * hd + d] = q[((size_t)t * nh + h) * hd + d];

    const int qb = (int)(pos / B);
    const int nlist = blocks ? topk : qb + 1;
    const int32_t *list = blocks ? blocks + ((size_t)g * T + t) * topk : NULL;

    float M = -INFINITY, L = 0.0f;
    float acc[ATT_MAXHD / 32];
    for (int i = 0; i < ATT_MAXHD / 32; i++)
        acc[i] = 0.0f;

    for (int pass = 0; pass < 2; pass++) {
        for (int li = 0; li < nlist; li++) {
            const int b = list ? list[li] : li;
            if (b < 0 || b > qb)
                continue; /* uniform across the block: no divergence at barriers */
            const int64_t k0 = (int64_t)b * B;
            const int64_t kend = (k0 + B < pos + 1) ? k0 + B : pos + 1;
            const int64_t page0 = (int64_t)page_table[b] * B;
            for (int64_t c0 = k0; c0 < kend; c0 += ATT_KT) {
                const int nk = (int)((kend - c0) < ATT_KT ? (kend - c0) : ATT_KT);
                __syncthreads();
                for (int e = threadIdx.x; e < nk * hd; e += blockDim.x) {
                    const int kk = e / hd, d = e % hd;
                    const size_t row = (size_t)(page0 + (c0 - k0) + kk) * kvw + (size_t)g * hd;
                    Ks[kk * ks + d] = kc[row + d];
                    if (pass == 1)
                        Vs[kk * hd + d] = vc[row + d];
                }
                __syncthreads();
                if (!active)
                    continue;
                float s = -INFINITY;
                if (lane < nk) {
                    float dot = 0.0f;
                    for (int d = 0; d < hd; d++)
                        dot += qs[w * hd + d] * Ks[lane * ks + d];
                    s = dot * scale;
                }
                if (pass == 0) {
                    const float mt = m3d_warp_max(s);
                    const float mn = fmaxf(M, mt);
                    const float e = lane < nk ? expf(s - mn) : 0.0f;
                    const float st = m3d_warp_sum(e);
                    L = (M == -INFINITY ? 0.0f : L * expf(M - mn)) + st;
                    M = mn;
                } else {
                    const float p = lane < nk ? m3d_round(expf(s - M) / L, mode) : 0.0f;
                    for (int j = 0; j < nk; j++) {
                        const float pj = m3_shfl(p, j);
                        for (int i = 0; i < ATT_MAXHD / 32; i++)
                            if (lane + 32 * i < hd)
                                acc[i] += pj * Vs[j * hd + lane + 32 * i];
                    }
                }
            }
        }
    }
    if (!active)
        return;
    (void)nw;
    for (int i = 0; i < ATT_MAXHD / 32; i++)
        if (lane + 32 * i < hd)
            out[((size_t)t * nh + h) * hd + lane + 32 * i] = m3d_round(acc[i], mode);
}

hipError_t m3g_attention(float *out, const float *q, const float *kc, const float *vc,
                         const int32_t *page_table, int B, int64_t pos0, int T, int nh, int nkv,
                         int hd, const int32_t *blocks, int topk, int mode, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (hd <= 0 || hd > ATT_MAXHD || nkv <= 0 || nh % nkv != 0 || B <= 0)
        return hipErrorInvalidValue;
    const int hpg = nh / nkv;
    const int nw = hpg < ATT_MAXW ? hpg : ATT_MAXW;
    const int nz = (hpg + ATT_MAXW - 1) / ATT_MAXW;
    const size_t shm = sizeof(float) * ((size_t)nw * hd + ATT_KT * (size_t)(hd + 1) +
                                        ATT_KT * (size_t)hd);
    const float scale = (float)(1.0 / sqrt((double)hd)); /* as ref/attention.c */
    hipLaunchKernelGGL(k_attention, dim3(T, nkv, nz), dim3(32 * nw), shm, st, out, q, kc, vc,
                       page_table, B, pos0, T, nh, nkv, hd, blocks, topk, scale, mode);
    return hipGetLastError();
}
