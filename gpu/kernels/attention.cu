/* attention.cu — causal GQA attention, dense or MSA block-sparse, over the
 * paged KV cache (page == MSA block of B slots); decode (T = 1) and prefill
 * (T rows) share one kernel.
 *
 * Must match: ref/attention.c m3_attention_row.
 * Spec: M3-ATTN-GQA-1, M3-ATTN-SCORE-1 (fp32 scores and softmax, key k
 * visible iff k <= pos), M3-MSA-ATTN-1 (sparse: block(k) selected and
 * k <= pos), M3-NUM-BF16-2 item 5 (p rounded, P.V in fp32, output rounded).
 *
 * Design. General kernel: one thread block per (query row, KV group, up to
 * 16 heads of the group); 32-key K/V tiles staged once for every head
 * (GQA reuse), one warp per head; two passes so p = round(exp(s - M) / L)
 * is exact. bf16 sparse decode (m3g_attention_sk): k_at_tc, one 16-CTA
 * cluster per KV group, CTA c owns selected block c for the group's 16
 * heads, every K/V byte requested before any arithmetic, mma.sync for
 * QK^T and P.V, (max, sum) exchanged through distributed shared memory so
 * every CTA rounds p with the final M and L, partial outputs summed in rank
 * order, PDL. bf16 dense decode over >= 512 keys: the split-key
 * tensor-core launches (k_ad_*).
 *
 * Known differences (fp32 tolerance): the exp sum uses online rescaling;
 * sparse layers visit blocks in golden order. The scalar and two-launch
 * sparse paths count a block listed twice twice (the reference indexer
 * never emits repeats). Timings: docs/performance.md, docs/designs-tried.md.
 */
#include <math.h>
#include "common.cuh"
#include "kernels.h"
#include "tc.cuh"

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

/* ---- split-key (flash-decoding style) path ---------------------------------
 * The key list of each (row t, KV group g) is cut into splits of up to
 * ATT_KC keys (split sp = list entry sp / nsub, piece sp % nsub of that MSA
 * block), one thread block per (split, row, group), so a decode step runs
 * nsplit * nkv blocks instead of nkv. Exact rounding of the reference is
 * kept by three launches:
 *   1 k_att_split_scores: s = (q . k) * scale for the split's keys (stored),
 *     partial max m_i and sum l_i = sum exp(s - m_i);
 *   2 k_att_split_pv: every block merges all (m_i, l_i) of its heads in
 *     ascending split order into the global M, L = sum l_i exp(m_i - M), then
 *     p = round(exp(s - M) / L) (the reference's rounding point) and the
 *     partial P.V of its split in fp32;
 *   3 k_att_split_merge: out = round(sum of the partial P.V over splits,
 *     ascending split order).
 * Workspace (floats, per (t, split, head)): ATT_KC scores, 2 stats, hd
 * partial outputs; see m3g_attention_split_ws. */
#define ATT_KC 64                 /* keys per split (2 per lane) */
#define ATT_KPL (ATT_KC / 32)

__device__ __forceinline__ void att_split_range(const int32_t *list, int nlist, int nsub, int sp,
                                                int B, int64_t pos, int64_t *ks, int *nk,
                                                int64_t *page_row)
{
    const int li = sp / nsub, c = sp % nsub;
    const int qb = (int)(pos / B);
    *nk = 0;
    *ks = 0;
    *page_row = 0;
    if (li >= nlist)
        return;
    const int b = list ? list[li] : li;
    if (b < 0 || b > qb)
        return;
    const int64_t k0 = (int64_t)b * B;
    int64_t kend = k0 + B < pos + 1 ? k0 + B : pos + 1;
    const int64_t kst = k0 + (int64_t)c * ATT_KC;
    if (kst + ATT_KC < kend)
        kend = kst + ATT_KC;
    if (kend <= kst)
        return;
    *ks = kst;
    *nk = (int)(kend - kst);
    *page_row = (int64_t)b; /* caller maps through page_table */
}

/* grid (nsplit, T, nkv * nz), block 32 * nw; shared q [nw][hd] + K [ATT_KC][hd + 1]. */
__global__ void k_att_split_scores(float *ws, const float *q, const float *kc,
                                   const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                                   int nkv, int hd, const int32_t *blocks, int topk, int nsplit,
                                   int nsub, float scale)
{
    M3_DYN_SHARED(float, smem);
    const int sp = blockIdx.x, t = blockIdx.y;
    const int hpg = nh / nkv, nz = (hpg + ATT_MAXW - 1) / ATT_MAXW;
    const int g = (int)blockIdx.z / nz, z = (int)blockIdx.z % nz;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int hl = z * ATT_MAXW + w, h = g * hpg + hl, active = hl < hpg;
    const int64_t pos = pos0 + t;
    const int qb = (int)(pos / B);
    const int32_t *list = blocks ? blocks + ((size_t)g * T + t) * topk : NULL;
    const int nlist = blocks ? topk : qb + 1;
    int64_t kst, pb;
    int nk;
    att_split_range(list, nlist, nsub, sp, B, pos, &kst, &nk, &pb);
    const int ks = hd + 1;
    float *qs = smem;          /* [nw][hd] */
    float *Ks = qs + nw * hd;  /* [ATT_KC][hd + 1] */
    const size_t kvw = (size_t)nkv * hd;
    if (nk > 0) { /* block-uniform */
        if (active)
            for (int d = lane; d < hd; d += 32)
                qs[w * hd + d] = q[((size_t)t * nh + h) * hd + d];
        const int64_t row0 = (int64_t)page_table[pb] * B + (kst - pb * B);
        if ((hd & 3) == 0) { /* 16-byte loads */
            const int n4 = hd >> 2;
            for (int e = threadIdx.x; e < nk * n4; e += blockDim.x) {
                const int kk = e / n4, d4 = e - kk * n4;
                const float4 v =
                    ((const float4 *)(kc + (size_t)(row0 + kk) * kvw + (size_t)g * hd))[d4];
                float *dst = Ks + kk * ks + 4 * d4;
                dst[0] = v.x;
                dst[1] = v.y;
                dst[2] = v.z;
                dst[3] = v.w;
            }
        } else {
            for (int e = threadIdx.x; e < nk * hd; e += blockDim.x) {
                const int kk = e / hd, d = e - kk * hd;
                Ks[kk * ks + d] = kc[(size_t)(row0 + kk) * kvw + (size_t)g * hd + d];
            }
        }
        __syncthreads();
    }
    if (!active)
        return;
    const size_t idx = ((size_t)t * nsplit + sp) * nh + h;
    float *sc = ws + idx * ATT_KC;
    float s[ATT_KPL];
    float m = -INFINITY;
    float dot[ATT_KPL];
    for (int u = 0; u < ATT_KPL; u++)
        dot[u] = 0.0f;
    if (nk > 0) /* each key: one accumulator over d ascending; keys interleaved for ILP */
        for (int d = 0; d < hd; d++) {
            const float qd = qs[w * hd + d];
            for (int u = 0; u < ATT_KPL; u++)
                dot[u] += qd * Ks[(lane + 32 * u) * ks + d];
        }
    for (int u = 0; u < ATT_KPL; u++) {
        const int j = lane + 32 * u;
        s[u] = j < nk ? dot[u] * scale : -INFINITY;
        sc[j] = s[u];
        m = fmaxf(m, s[u]);
    }
    m = m3d_warp_max(m);
    float e = 0.0f;
    if (m > -INFINITY)
        for (int u = 0; u < ATT_KPL; u++)
            if (lane + 32 * u < nk)
                e += expf(s[u] - m);
    const float l = m3d_warp_sum(e);
    if (lane == 0) {
        float *stt = ws + (size_t)T * nsplit * nh * ATT_KC + idx * 2;
        stt[0] = m;
        stt[1] = l;
    }
}

/* same grid; shared V [ATT_KC][hd]. */
__global__ void k_att_split_pv(float *ws, const float *vc, const int32_t *page_table, int B,
                               int64_t pos0, int T, int nh, int nkv, int hd,
                               const int32_t *blocks, int topk, int nsplit, int nsub, int mode)
{
    M3_DYN_SHARED(float, Vs);
    const int sp = blockIdx.x, t = blockIdx.y;
    const int hpg = nh / nkv, nz = (hpg + ATT_MAXW - 1) / ATT_MAXW;
    const int g = (int)blockIdx.z / nz, z = (int)blockIdx.z % nz;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int hl = z * ATT_MAXW + w, h = g * hpg + hl, active = hl < hpg;
    const int64_t pos = pos0 + t;
    const int qb = (int)(pos / B);
    const int32_t *list = blocks ? blocks + ((size_t)g * T + t) * topk : NULL;
    const int nlist = blocks ? topk : qb + 1;
    int64_t kst, pb;
    int nk;
    att_split_range(list, nlist, nsub, sp, B, pos, &kst, &nk, &pb);
    const size_t kvw = (size_t)nkv * hd;
    if (nk > 0) {
        const int64_t row0 = (int64_t)page_table[pb] * B + (kst - pb * B);
        if ((hd & 3) == 0) { /* 16-byte loads and stores */
            const int n4 = hd >> 2;
            for (int e = threadIdx.x; e < nk * n4; e += blockDim.x) {
                const int kk = e / n4, d4 = e - kk * n4;
                ((float4 *)(Vs + kk * hd))[d4] =
                    ((const float4 *)(vc + (size_t)(row0 + kk) * kvw + (size_t)g * hd))[d4];
            }
        } else {
            for (int e = threadIdx.x; e < nk * hd; e += blockDim.x) {
                const int kk = e / hd, d = e - kk * hd;
                Vs[kk * hd + d] = vc[(size_t)(row0 + kk) * kvw + (size_t)g * hd + d];
            }
        }
        __syncthreads();
    }
    if (!active)
        return;
    const size_t idx = ((size_t)t * nsplit + sp) * nh + h;
    float *pac = ws + (size_t)T * nsplit * nh * (ATT_KC + 2) + idx * hd;
    float acc[ATT_MAXHD / 32];
    for (int i = 0; i < ATT_MAXHD / 32; i++)
        acc[i] = 0.0f;
    if (nk > 0) { /* warp-uniform */
        /* global max and sum of this head over all splits, ascending split order */
        const float *stt = ws + (size_t)T * nsplit * nh * ATT_KC + ((size_t)t * nsplit * nh + h) * 2;
        float m = -INFINITY;
        for (int i = lane; i < nsplit; i += 32)
            m = fmaxf(m, stt[(size_t)i * nh * 2]);
        const float M = m3d_warp_max(m);
        float l = 0.0f;
        for (int i = lane; i < nsplit; i += 32) {
            const float li = stt[(size_t)i * nh * 2 + 1];
            if (li > 0.0f)
                l += li * expf(stt[(size_t)i * nh * 2] - M);
        }
        const float L = m3d_warp_sum(l);
        const float *sc = ws + idx * ATT_KC;
        float p[ATT_KPL];
        for (int u = 0; u < ATT_KPL; u++) {
            const int j = lane + 32 * u;
            p[u] = j < nk && M > -INFINITY ? m3d_round(expf(sc[j] - M) / L, mode) : 0.0f;
        }
        for (int u = 0; u < ATT_KPL; u++) {
            const int jn = nk - 32 * u < 32 ? nk - 32 * u : 32;
            for (int j = 0; j < jn; j++) {
                const float pj = m3_shfl(p[u], j);
                const float *vr = Vs + (32 * u + j) * hd;
                for (int i = 0; i < ATT_MAXHD / 32; i++)
                    if (lane + 32 * i < hd)
                        acc[i] += pj * vr[lane + 32 * i];
            }
        }
    }
    for (int i = 0; i < ATT_MAXHD / 32; i++)
        if (lane + 32 * i < hd)
            pac[lane + 32 * i] = acc[i];
}

/* grid (T, nh), block >= hd threads (multiple of 32). */
__global__ void k_att_split_merge(float *out, const float *ws, int T, int nh, int hd, int nsplit,
                                  int mode)
{
    const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    if (d >= hd)
        return;
    const float *pac = ws + (size_t)T * nsplit * nh * (ATT_KC + 2);
    float a = 0.0f;
    for (int sp = 0; sp < nsplit; sp++)
        a += pac[(((size_t)t * nsplit + sp) * nh + h) * hd + d];
    out[((size_t)t * nh + h) * hd + d] = m3d_round(a, mode);
}

static void att_split_shape(int B, int64_t pos0, int T, const int32_t *blocks, int topk,
                            int *nsub, int *nsplit)
{
    *nsub = (B + ATT_KC - 1) / ATT_KC;
    const int nlist = blocks ? topk : (int)((pos0 + T - 1) / B) + 1;
    *nsplit = nlist * *nsub;
}

size_t m3g_attention_split_ws(int B, int64_t pos0, int T, int nh, int hd, const int32_t *blocks,
                              int topk)
{
    int nsub, nsplit;
    if (T <= 0 || B <= 0)
        return 0;
    att_split_shape(B, pos0, T, blocks, topk, &nsub, &nsplit);
    return (size_t)T * nsplit * nh * (ATT_KC + 2 + (size_t)hd);
}

hipError_t m3g_attention_split(float *out, const float *q, const float *kc, const float *vc,
                               const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                               int nkv, int hd, const int32_t *blocks, int topk, int mode,
                               float *ws, size_t ws_floats, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (hd <= 0 || hd > ATT_MAXHD || nkv <= 0 || nh % nkv != 0 || B <= 0 || !ws ||
        ws_floats < m3g_attention_split_ws(B, pos0, T, nh, hd, blocks, topk))
        return hipErrorInvalidValue;
    int nsub, nsplit;
    att_split_shape(B, pos0, T, blocks, topk, &nsub, &nsplit);
    const int hpg = nh / nkv;
    const int nw = hpg < ATT_MAXW ? hpg : ATT_MAXW;
    const int nz = (hpg + ATT_MAXW - 1) / ATT_MAXW;
    const float scale = (float)(1.0 / sqrt((double)hd)); /* as ref/attention.c */
    const dim3 grid(nsplit, T, nkv * nz);
    const size_t shm1 = sizeof(float) * ((size_t)nw * hd + ATT_KC * (size_t)(hd + 1));
    hipLaunchKernelGGL(k_att_split_scores, grid, dim3(32 * nw), shm1, st, ws, q, kc, page_table, B,
                       pos0, T, nh, nkv, hd, blocks, topk, nsplit, nsub, scale);
    hipError_t e = hipGetLastError();
    if (e != hipSuccess)
        return e;
    const size_t shm2 = sizeof(float) * ATT_KC * (size_t)hd;
    hipLaunchKernelGGL(k_att_split_pv, grid, dim3(32 * nw), shm2, st, ws, vc, page_table, B, pos0,
                       T, nh, nkv, hd, blocks, topk, nsplit, nsub, mode);
    e = hipGetLastError();
    if (e != hipSuccess)
        return e;
    hipLaunchKernelGGL(k_att_split_merge, dim3(T, nh), dim3((hd + 31) / 32 * 32), 0, st, out, ws,
                       T, nh, hd, nsplit, mode);
    return hipGetLastError();
}

/* ---- split-key path, two launches, fp32 or bf16 KV cache (m3g_attention_sk)
 * bin/m3-gpu's attention in bf16 mode (bf16 caches) where the one-launch
 * cluster kernel further below does not apply (dense layers, hipcc builds,
 * more than 16 selected blocks); target (docs/performance.md): <= 10 us per layer at
 * 64 q / 4 kv heads, hd 128, 16 x 128 keys.
 *
 *   launch 1 k_ak_scores, one block per (split of <= AK_SK1 keys, row, KV
 *     group, chunk of <= AK_HC1 query heads of that group): the K rows are
 *     staged once in shared memory (16-byte loads) and used by every head of
 *     the chunk (GQA reuse); each thread owns 2 heads x 2 keys and runs one
 *     accumulator per (head, key) over d ascending, so the scores are the
 *     reference's bit for bit (see "FMA" below); stores the scores and the
 *     split's max m_i and l_i = sum exp(s - m_i) per head; prefetches the
 *     split's V rows into L2 (CUDA); zeroes the launch-2 counters.
 *   launch 2 k_ak_pv, one block per (split of <= AK_SK2 keys, row, KV group,
 *     chunk of <= AK_HC2 heads): merges the (m_i, l_i) of all splits of
 *     each of its heads (fixed order) into the global M and L, forms
 *     p = round(exp(s - M) / L) (the reference's rounding point), P.V of its
 *     split in fp32 into a partial, then an atomic ticket per (row, group,
 *     head chunk): the block that arrives last sums the partials in
 *     ascending split order and writes round(out). The merge order is fixed,
 *     so results are deterministic run to run.
 *
 * FMA: with mode 1 every q, k, p and v is bf16-representable (M3-NUM-BF16-2:
 * rounded linear/RoPE outputs, rounded p), so x * y is exact in fp32 and
 * fmaf(x, y, a) == a + x * y bit for bit; the kernels use fmaf only then.
 * bf16 cache (kv_dtype M3G_BF16) vs fp32 cache holding the same values:
 * identical arithmetic after the exact bf16 -> fp32 widening, so the outputs
 * are bitwise equal (bench-gpu checks this).
 * Known differences from ref (within tolerance, not bitwise): L is summed
 * per split, then over splits; P.V is summed per split, then over splits
 * (ref: one ascending sum). Keys are visited in list order (golden order).
 * Known deviation (also in the cluster kernel below and in the older paths
 * above): a block id listed twice is counted twice (ref: the list is a set);
 * bench-gpu's edge check shows it (nmse 0.02-0.25 on lists with repeats,
 * <= 3.7e-8 without). ref/msa.c's selection never repeats an id; the
 * tensor-core kernel (default) counts a repeat once.
 * Needs hd % 8 == 0, hd <= 128. */
#define AK_SK1 32  /* keys per score block */
#define AK_HC1 16  /* query heads per score block (2 per thread) */
#define AK_HC2 4   /* query heads per P.V block */
#define AK_VB 8    /* 16-byte loads in flight per thread when staging */

template <int KB> struct ak_kt;
template <> struct ak_kt<0> { typedef float type; };
template <> struct ak_kt<1> { typedef uint16_t type; };

#define AK_SK2 128 /* keys per P.V block (the same for both cache dtypes: same sums) */
/* V rows staged in shared memory at a time: 32 KiB at hd 128 */
__host__ __device__ constexpr int ak_vt(int kb) { return kb ? 128 : 64; }

template <bool F> __device__ __forceinline__ float ak_mac(float a, float x, float y)
{
    return F ? fmaf(x, y, a) : a + x * y;
}

/* 8 (4) consecutive values at a 16-byte (8-byte) aligned address, widened to fp32 */
__device__ __forceinline__ void ak_ld8(const uint16_t *p, float *o)
{
    const uint4 u = *(const uint4 *)p;
    o[0] = __uint_as_float(u.x << 16), o[1] = __uint_as_float(u.x & 0xffff0000u);
    o[2] = __uint_as_float(u.y << 16), o[3] = __uint_as_float(u.y & 0xffff0000u);
    o[4] = __uint_as_float(u.z << 16), o[5] = __uint_as_float(u.z & 0xffff0000u);
    o[6] = __uint_as_float(u.w << 16), o[7] = __uint_as_float(u.w & 0xffff0000u);
}
__device__ __forceinline__ void ak_ld8(const float *p, float *o)
{
    const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}
__device__ __forceinline__ void ak_ld4(const uint16_t *p, float *o)
{
    const uint2 u = *(const uint2 *)p;
    o[0] = __uint_as_float(u.x << 16), o[1] = __uint_as_float(u.x & 0xffff0000u);
    o[2] = __uint_as_float(u.y << 16), o[3] = __uint_as_float(u.y & 0xffff0000u);
}
__device__ __forceinline__ void ak_ld4(const float *p, float *o)
{
    const float4 a = *(const float4 *)p;
    o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w;
}

/* reductions over the 16 lanes of a half warp (lanes differing in bits 0..3) */
__device__ __forceinline__ float ak_hmax(float v)
{
    for (int o = 8; o > 0; o >>= 1)
        v = fmaxf(v, m3_shfl_xor(v, o));
    return v;
}
__device__ __forceinline__ float ak_hsum(float v)
{
    for (int o = 8; o > 0; o >>= 1)
        v += m3_shfl_xor(v, o);
    return v;
}

/* A float4 written by another block of this launch (read after the ticket):
 * bypass the non-coherent L1. */
__device__ __forceinline__ float4 ak_ld_other(const float *p)
{
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__) && !defined(M3_EMU)
    return __ldcg((const float4 *)p);
#else
    const volatile float *v = p;
    float4 r;
    r.x = v[0], r.y = v[1], r.z = v[2], r.w = v[3];
    return r;
#endif
}

/* Split sp of the key list (list entry li = sp / nsub, piece sp % nsub of
 * sk keys of that MSA block): first key j0 within the block, nk keys (0 when
 * the entry is -1, not visible, or the piece lies past pos), physical row
 * of key j0. */
__device__ __forceinline__ void ak_split(const int32_t *list, int nlist, int nsub, int sk, int sp,
                                         int B, int64_t pos, const int32_t *page_table, int *li,
                                         int *j0, int *nk, int64_t *row0)
{
    *li = sp / nsub;
    *j0 = (sp - *li * nsub) * sk;
    *nk = 0;
    *row0 = 0;
    if (*li >= nlist)
        return;
    const int b = list ? list[*li] : *li;
    if (b < 0 || (int64_t)b > pos / B)
        return;
    int64_t kend = pos + 1 - (int64_t)b * B; /* keys j < kend of block b are visible */
    if (kend > B)
        kend = B;
    const int64_t n = kend - *j0;
    *nk = n <= 0 ? 0 : (n < sk ? (int)n : sk);
    *row0 = (int64_t)page_table[b] * B + *j0;
}

/* Vs [0, n) = the V rows row0 .. row0 + n - 1 of group g (16-byte words,
 * AK_VB loads in flight per thread). */
template <typename KT>
__device__ __forceinline__ void ak_stage_rows(KT *Vs, const KT *vc, size_t kvw, int g, int hd,
                                              int64_t row0, int n)
{
    const int n16 = hd * (int)sizeof(KT) / 16; /* 16-byte words per row */
    for (int e0 = threadIdx.x; e0 < n * n16; e0 += AK_VB * blockDim.x) {
        uint4 r[AK_VB];
        for (int u = 0; u < AK_VB; u++) {
            const int e = e0 + u * (int)blockDim.x, kk = e / n16;
            if (e < n * n16)
                r[u] = ((const uint4 *)(vc + (size_t)(row0 + kk) * kvw + (size_t)g * hd))[e - kk * n16];
        }
        for (int u = 0; u < AK_VB; u++) {
            const int e = e0 + u * (int)blockDim.x;
            if (e < n * n16)
                ((uint4 *)Vs)[e] = r[u];
        }
    }
}

/* Workspace layout (bytes, each region 256-aligned) for tc rows: scores
 * [tc][nh][nlist][B] f32, stats [tc][nh][nsplit1][2] f32, partials
 * [tc][nkv][nz2][nsplit2][AK_HC2][hd] f32, tickets [tc][nkv][nz2] u32. */
typedef struct ak_geom {
    int nlist, nsub1, nsplit1, nsub2, nsplit2, nz1, nz2;
    size_t s_off, st_off, o_off, c_off, total;
} ak_geom;

static size_t ak_al(size_t x) { return (x + 255) & ~(size_t)255; }

static void ak_geometry(ak_geom *gm, int B, int64_t pos0, int T, int tc, int nh, int nkv, int hd,
                        const int32_t *blocks, int topk, int kb)
{
    const int sk2 = AK_SK2, hpg = nh / nkv;
    (void)kb;
    gm->nlist = blocks ? topk : (int)((pos0 + T - 1) / B) + 1;
    gm->nsub1 = (B + AK_SK1 - 1) / AK_SK1;
    gm->nsub2 = (B + sk2 - 1) / sk2;
    gm->nsplit1 = gm->nlist * gm->nsub1;
    gm->nsplit2 = gm->nlist * gm->nsub2;
    gm->nz1 = (hpg + AK_HC1 - 1) / AK_HC1;
    gm->nz2 = (hpg + AK_HC2 - 1) / AK_HC2;
    const size_t t = (size_t)tc;
    gm->s_off = 0;
    gm->st_off = ak_al(t * nh * gm->nlist * (size_t)B * 4);
    gm->o_off = gm->st_off + ak_al(t * nh * gm->nsplit1 * 2 * 4);
    gm->c_off = gm->o_off + ak_al(t * nkv * gm->nz2 * (size_t)gm->nsplit2 * AK_HC2 * hd * 4);
    gm->total = gm->c_off + ak_al(t * nkv * gm->nz2 * 4);
}

/* grid (nsplit1, rows, nkv * nz1); block 16 * ceil(min(hpg, 16) / 2) threads
 * rounded up to 32; shared q [AK_HC1][hd] f32 + K [AK_SK1][hd + pad] KT. */
template <int V>
__global__ void k_ak_scores(float *ws_s, float *ws_st, unsigned *cnt, const float *q,
                            const void *kcv, const void *vcv, const int32_t *page_table, int B,
                            int64_t pos0, int nh, int nkv, int hd, const int32_t *blocks, int bT,
                            int tb0, int topk, int nlist, int nsub, int nsplit, int nz2,
                            float scale)
{
    typedef typename ak_kt<(V >> 1)>::type KT;
    constexpr bool F = (V & 1) != 0;
    M3_DYN_SHARED(float, smem);
    const KT *kc = (const KT *)kcv;
    const int sp = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
    const int hpg = nh / nkv, nz = (hpg + AK_HC1 - 1) / AK_HC1;
    const int g = (int)blockIdx.z / nz, z = (int)blockIdx.z % nz;
    const int hc = hpg - z * AK_HC1 < AK_HC1 ? hpg - z * AK_HC1 : AK_HC1;
    const int hb = g * hpg + z * AK_HC1; /* first query head of the chunk */
    const int64_t pos = pos0 + t;
    const int32_t *list = blocks ? blocks + ((size_t)g * bT + tb0 + t) * topk : NULL;
    if (sp == 0 && z == 0 && tid < nz2) /* launch 2's tickets of (t, g) start at 0 */
        cnt[((size_t)t * nkv + g) * nz2 + tid] = 0u;
    int li, j0, nk;
    int64_t row0;
    ak_split(list, nlist, nsub, AK_SK1, sp, B, pos, page_table, &li, &j0, &nk, &row0);
    const size_t kvw = (size_t)nkv * hd;
    const int ksr = hd + 16 / (int)sizeof(KT); /* padded row: conflict-free 16-byte reads */
    float *qs = smem;                          /* [AK_HC1][hd] */
    KT *Ks = (KT *)(qs + AK_HC1 * hd);         /* [AK_SK1][ksr] */
    if (nk > 0) { /* block-uniform */
        const float4 *qg = (const float4 *)(q + ((size_t)t * nh + hb) * hd);
        for (int e = tid; e < hc * hd / 4; e += blockDim.x)
            ((float4 *)qs)[e] = qg[e];
        const int n16 = hd * (int)sizeof(KT) / 16; /* 16-byte words per row */
        for (int e0 = tid; e0 < nk * n16; e0 += AK_VB * blockDim.x) {
            uint4 r[AK_VB];
            for (int u = 0; u < AK_VB; u++) {
                const int e = e0 + u * (int)blockDim.x, kk = e / n16;
                if (e < nk * n16)
                    r[u] = ((const uint4 *)(kc + (size_t)(row0 + kk) * kvw + (size_t)g * hd))[e - kk * n16];
            }
            for (int u = 0; u < AK_VB; u++) {
                const int e = e0 + u * (int)blockDim.x, kk = e / n16;
                if (e < nk * n16)
                    ((uint4 *)(Ks + kk * ksr))[e - kk * n16] = r[u];
            }
        }
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__) && !defined(M3_EMU)
        if (z == 0) { /* launch 2 reads these V rows next: start them into L2 now */
            const KT *vc = (const KT *)vcv;
            const int nl = (hd * (int)sizeof(KT) + 127) / 128;
            for (int e = tid; e < nk * nl; e += blockDim.x) {
                const int kk = e / nl;
                const char *p = (const char *)(vc + (size_t)(row0 + kk) * kvw + (size_t)g * hd) +
                                128 * (e - kk * nl);
                asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
            }
        }
#else
        (void)vcv;
#endif
        __syncthreads();
    }
    /* thread: heads 2hp, 2hp + 1 of the chunk, keys kq, kq + 16 of the split */
    const int hp = tid >> 4, kq = tid & 15;
    const int h0 = 2 * hp, h1 = 2 * hp + 1;
    const int ja = kq, jb = kq + 16;
    float a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f; /* [head][key] */
    if (nk > 0 && h0 < hc) {
        const KT *ka = Ks + ja * ksr, *kbp = Ks + jb * ksr;
        const float *qa = qs + h0 * hd, *qb = qs + (h1 < hc ? h1 : h0) * hd;
        for (int c = 0; c < hd; c += 8) {
            float x[8], y[8], u[8], w[8];
            ak_ld8(ka + c, x);
            ak_ld8(kbp + c, y);
            ak_ld8(qa + c, u);
            ak_ld8(qb + c, w);
            for (int e = 0; e < 8; e++) { /* one accumulator per (head, key), d ascending */
                a00 = ak_mac<F>(a00, u[e], x[e]);
                a01 = ak_mac<F>(a01, u[e], y[e]);
                a10 = ak_mac<F>(a10, w[e], x[e]);
                a11 = ak_mac<F>(a11, w[e], y[e]);
            }
        }
    }
    const bool va = ja < nk, vb = jb < nk;
    const float s00 = va && h0 < hc ? a00 * scale : -INFINITY;
    const float s01 = vb && h0 < hc ? a01 * scale : -INFINITY;
    const float s10 = va && h1 < hc ? a10 * scale : -INFINITY;
    const float s11 = vb && h1 < hc ? a11 * scale : -INFINITY;
    const size_t srow = (size_t)nlist * B; /* scores per (row, head) */
    float *s0p = ws_s + ((size_t)t * nh + hb + h0) * srow + (size_t)li * B + j0;
    float *s1p = s0p + srow;
    if (h0 < hc) {
        if (va)
            s0p[ja] = s00;
        if (vb)
            s0p[jb] = s01;
    }
    if (h1 < hc) {
        if (va)
            s1p[ja] = s10;
        if (vb)
            s1p[jb] = s11;
    }
    const float m0 = ak_hmax(fmaxf(s00, s01)), m1 = ak_hmax(fmaxf(s10, s11));
    float e0 = 0.0f, e1 = 0.0f;
    if (m0 > -INFINITY)
        e0 = (va ? expf(s00 - m0) : 0.0f) + (vb ? expf(s01 - m0) : 0.0f);
    if (m1 > -INFINITY)
        e1 = (va ? expf(s10 - m1) : 0.0f) + (vb ? expf(s11 - m1) : 0.0f);
    const float l0 = ak_hsum(e0), l1 = ak_hsum(e1);
    if (kq == 0) {
        float *stt = ws_st + (((size_t)t * nh + hb + h0) * nsplit + sp) * 2;
        if (h0 < hc)
            stt[0] = m0, stt[1] = l0;
        if (h1 < hc)
            stt[2 * (size_t)nsplit] = m1, stt[2 * (size_t)nsplit + 1] = l1;
    }
}

/* grid (nsplit2, rows, nkv * nz2); block AK_HC2 * hd / 4 threads rounded up
 * to 32; shared p [AK_SK2][AK_HC2], M/L [AK_HC2][2] (+pad), V [VT][hd] KT. */
template <int V>
__global__ void k_ak_pv(float *out, float *ws_o, unsigned *cnt, const float *ws_s,
                        const float *ws_st, const void *vcv, const int32_t *page_table, int B,
                        int64_t pos0, int nh, int nkv, int hd, const int32_t *blocks, int bT,
                        int tb0, int topk, int nlist, int nsplit1, int nsub2, int nsplit2,
                        int mode)
{
    typedef typename ak_kt<(V >> 1)>::type KT;
    constexpr bool F = (V & 1) != 0;
    constexpr int SK2 = AK_SK2, VT = ak_vt(V >> 1);
    M3_DYN_SHARED(float, smem);
    __shared__ int last;
    const KT *vc = (const KT *)vcv;
    const int sp = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
    const int lane = tid & 31, w = tid >> 5, nw = blockDim.x >> 5;
    const int hpg = nh / nkv, nz = (hpg + AK_HC2 - 1) / AK_HC2;
    const int g = (int)blockIdx.z / nz, z = (int)blockIdx.z % nz;
    const int hc = hpg - z * AK_HC2 < AK_HC2 ? hpg - z * AK_HC2 : AK_HC2;
    const int hb = g * hpg + z * AK_HC2;
    const int64_t pos = pos0 + t;
    const int32_t *list = blocks ? blocks + ((size_t)g * bT + tb0 + t) * topk : NULL;
    int li, j0, nk;
    int64_t row0;
    ak_split(list, nlist, nsub2, SK2, sp, B, pos, page_table, &li, &j0, &nk, &row0);
    const size_t kvw = (size_t)nkv * hd;
    float *ps = smem;                   /* [SK2][AK_HC2] */
    float *ML = ps + SK2 * AK_HC2;      /* [AK_HC2][2] */
    KT *Vs = (KT *)(ML + 4 * AK_HC2);   /* [VT][hd], 16-byte aligned */
    if (nk > 0) { /* block-uniform */
        ak_stage_rows(Vs, vc, kvw, g, hd, row0, nk < VT ? nk : VT); /* first V tile */
        /* global max M and sum L of each head over all score splits (fixed order) */
        for (int hl = w; hl < hc; hl += nw) {
            const float *stt = ws_st + ((size_t)t * nh + hb + hl) * nsplit1 * 2;
            float m = -INFINITY, l = 0.0f;
            for (int i = lane; i < nsplit1; i += 32)
                m = fmaxf(m, stt[2 * i]);
            const float M = m3d_warp_max(m);
            for (int i = lane; i < nsplit1; i += 32) {
                const float li_ = stt[2 * i + 1];
                if (li_ > 0.0f)
                    l += li_ * expf(stt[2 * i] - M);
            }
            const float L = m3d_warp_sum(l);
            if (lane == 0)
                ML[2 * hl] = M, ML[2 * hl + 1] = L;
        }
        __syncthreads();
        const size_t srow = (size_t)nlist * B;
        for (int e = tid; e < nk * hc; e += blockDim.x) {
            const int k = e / hc, hl = e - k * hc;
            const float s = ws_s[((size_t)t * nh + hb + hl) * srow + (size_t)li * B + j0 + k];
            ps[k * AK_HC2 + hl] = m3d_round(expf(s - ML[2 * hl]) / ML[2 * hl + 1], mode);
        }
        __syncthreads();
    }
    /* thread: head hl of the chunk, dims 4 dq .. 4 dq + 3 */
    const int nd = hd / 4, hl = tid / nd, dq = tid - hl * nd;
    const bool act = hl < hc;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (int k0 = 0; k0 < nk; k0 += VT) { /* keys in list order, VT rows staged at a time */
        const int kn = nk - k0 < VT ? nk - k0 : VT;
        if (k0 > 0) { /* block-uniform */
            __syncthreads();
            ak_stage_rows(Vs, vc, kvw, g, hd, row0 + k0, kn);
            __syncthreads();
        }
        if (act)
            for (int k = 0; k < kn; k++) {
                float v[4];
                ak_ld4(Vs + (size_t)k * hd + 4 * dq, v);
                const float p = ps[(k0 + k) * AK_HC2 + hl];
                a0 = ak_mac<F>(a0, p, v[0]);
                a1 = ak_mac<F>(a1, p, v[1]);
                a2 = ak_mac<F>(a2, p, v[2]);
                a3 = ak_mac<F>(a3, p, v[3]);
            }
    }
    const size_t grp = ((size_t)t * nkv + g) * nz + z;
    float *pbase = ws_o + grp * nsplit2 * AK_HC2 * hd;
    if (act) {
        float4 r;
        r.x = a0, r.y = a1, r.z = a2, r.w = a3;
        *(float4 *)(pbase + ((size_t)sp * AK_HC2 + hl) * hd + 4 * dq) = r;
    }
    /* the last block of (t, g, z) to finish sums the partials in split order */
    __threadfence();
    __syncthreads();
    if (tid == 0)
        last = atomicAdd(cnt + grp, 1u) == (unsigned)nsplit2 - 1u;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    if (act) {
        float b0 = 0.0f, b1 = 0.0f, b2 = 0.0f, b3 = 0.0f;
        for (int s2 = 0; s2 < nsplit2; s2++) {
            const float4 r = ak_ld_other(pbase + ((size_t)s2 * AK_HC2 + hl) * hd + 4 * dq);
            b0 += r.x, b1 += r.y, b2 += r.z, b3 += r.w;
        }
        float *o = out + ((size_t)t * nh + hb + hl) * hd + 4 * dq;
        o[0] = m3d_round(b0, mode), o[1] = m3d_round(b1, mode);
        o[2] = m3d_round(b2, mode), o[3] = m3d_round(b3, mode);
    }
    if (tid == 0)
        cnt[grp] = 0u;
}

/* ---- one-launch cluster path, scalar (NVIDIA sm_90; m3g_attention_sk's
 * decode path for bf16 caches in bf16 mode with a block list of <= 16
 * entries, B <= 128, where the tensor-core cluster kernel further below does
 * not apply (more than 16 heads per group, hd not a power of two in 16..128)
 * or the device refuses it).
 * A thread-block cluster of AK_CS blocks per (row, KV group, chunk of AK_CH
 * heads); block c takes list entry c (one MSA block, <= 128 keys):
 *   K and V rows -> shared memory by cp.async (all in flight at once); q;
 *   scores s = (q . k) * scale, one accumulator per (head, key) over d
 *   ascending (bitwise the reference's, see "FMA" above); the block's max m
 *   and l = sum exp(s - m) per head (fixed reduction order);
 *   cluster barrier; every block reads all AK_CS (m, l) pairs from the other
 *   blocks' shared memory (DSMEM) in rank order: global M, L (identical in
 *   every block); p = round(exp(s - M) / L), the reference's rounding point;
 *   P.V of its keys (per warp, then the 4 warps in order) -> a partial in
 *   shared memory; cluster barrier; block c sums slice c of the outputs over
 *   the AK_CS partials in rank order (DSMEM), rounds and stores; barrier.
 * No workspace, no atomics, one launch; deterministic. The portable
 * two-launch kernels above give the same values up to the summation order
 * of L and P.V (within the bf16 tolerance, not bitwise). */
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__) && !defined(M3_EMU)
#include <cooperative_groups.h>
#define AK_CLUSTER 1
#define AK_CS 16  /* blocks per cluster (non-portable size; one per list entry) */
#define AK_CH 4   /* query heads per cluster block */
#define AK_CK 128 /* keys per cluster block (B <= 128) */

/* grid (AK_CS, nkv * nz, T), cluster (AK_CS, 1, 1), 128 threads; hd % 8 == 0,
 * hd <= 128. Shared: q [AK_CH][hd] f32, s/p [AK_CK][AK_CH] f32, stats
 * [AK_CH][2] (+pad), reduction scratch [4][AK_CH][2], partial [AK_CH][hd]
 * f32, K [AK_CK][hd + 8] bf16 (reused for the per-warp partials), V
 * [AK_CK][hd] bf16. */
__global__ void __launch_bounds__(128)
k_ak_cluster(float *out, const float *q, const uint16_t *kc, const uint16_t *vc,
             const int32_t *page_table, int B, int64_t pos0, int T, int nh, int nkv, int hd,
             const int32_t *blocks, int topk, float scale)
{
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    M3_DYN_SHARED(float, smem);
    const int c = (int)cl.block_rank(), tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int hpg = nh / nkv, nz = (hpg + AK_CH - 1) / AK_CH;
    const int g = (int)blockIdx.y / nz, z = (int)blockIdx.y % nz, t = blockIdx.z;
    const int hc = hpg - z * AK_CH < AK_CH ? hpg - z * AK_CH : AK_CH;
    const int hb = g * hpg + z * AK_CH;
    const int64_t pos = pos0 + t;
    const int ksr = hd + 8;
    float *qs = smem;                    /* [AK_CH][hd] */
    float *ps = qs + AK_CH * hd;         /* [AK_CK][AK_CH] */
    float *stt = ps + AK_CK * AK_CH;     /* [AK_CH][2], 16 floats */
    float *red = stt + 16;               /* [4][AK_CH][2] */
    float *po = red + 4 * AK_CH * 2;     /* [AK_CH][hd] */
    uint16_t *Ks = (uint16_t *)(po + AK_CH * hd); /* [AK_CK][ksr] */
    uint16_t *Vs = Ks + AK_CK * ksr;              /* [AK_CK][hd] */
    float *pw = (float *)Ks;                      /* [4][AK_CH][hd], after the scores */

    int nk = 0;
    int64_t row0 = 0;
    if (c < topk) {
        const int b = blocks[((size_t)g * T + t) * topk + c];
        if (b >= 0 && (int64_t)b <= pos / B) {
            const int64_t kend = pos + 1 - (int64_t)b * B;
            nk = kend < B ? (int)kend : B;
            row0 = (int64_t)page_table[b] * B;
        }
    }
    const size_t kvw = (size_t)nkv * hd;
    const int n16 = hd / 8;
    for (int e = tid; e < nk * n16; e += blockDim.x) {
        const int kk = e / n16, cc = e - kk * n16;
        m3t_cp16(Ks + kk * ksr + 8 * cc, kc + (size_t)(row0 + kk) * kvw + (size_t)g * hd + 8 * cc,
                 16);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    for (int e = tid; e < nk * n16; e += blockDim.x) {
        const int kk = e / n16, cc = e - kk * n16;
        m3t_cp16(Vs + kk * hd + 8 * cc, vc + (size_t)(row0 + kk) * kvw + (size_t)g * hd + 8 * cc,
                 16);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    for (int e = tid; e < AK_CH * hd; e += blockDim.x) /* heads >= hc: zeros (ignored) */
        qs[e] = e < hc * hd ? q[((size_t)t * nh + hb) * hd + e] : 0.0f;
    asm volatile("cp.async.wait_group 1;\n" ::); /* this thread's K copies landed */
    __syncthreads();

    /* scores: thread = key tid, all AK_CH heads */
    float s[AK_CH];
    {
        float a[AK_CH];
        for (int h = 0; h < AK_CH; h++)
            a[h] = 0.0f;
        if (tid < nk)
            for (int cc = 0; cc < hd; cc += 8) {
                float x[8];
                ak_ld8(Ks + tid * ksr + cc, x);
                for (int h = 0; h < AK_CH; h++) {
                    float u[8];
                    ak_ld8(qs + h * hd + cc, u);
                    for (int e = 0; e < 8; e++)
                        a[h] = fmaf(u[e], x[e], a[h]);
                }
            }
        for (int h = 0; h < AK_CH; h++)
            s[h] = tid < nk && h < hc ? a[h] * scale : -INFINITY;
    }
    float mh[AK_CH];
    for (int h = 0; h < AK_CH; h++) {
        const float m = m3d_warp_max(s[h]);
        if (lane == 0)
            red[(w * AK_CH + h) * 2] = m;
    }
    __syncthreads();
    for (int h = 0; h < AK_CH; h++) {
        float m = red[h * 2];
        for (int j = 1; j < 4; j++)
            m = fmaxf(m, red[(j * AK_CH + h) * 2]);
        mh[h] = m;
        const float e = m > -INFINITY && s[h] > -INFINITY ? expf(s[h] - m) : 0.0f;
        const float l = m3d_warp_sum(e);
        if (lane == 0)
            red[(w * AK_CH + h) * 2 + 1] = l;
    }
    __syncthreads();
    if (tid < AK_CH) {
        const float *r = red + tid * 2 + 1;
        stt[2 * tid] = mh[tid];
        stt[2 * tid + 1] = ((r[0] + r[2 * AK_CH]) + r[4 * AK_CH]) + r[6 * AK_CH];
    }
    cl.sync(); /* every block's (m, l) visible */
    float *ML = red; /* [AK_CH][2]: global M, L (scratch reused) */
    if (tid < AK_CH) {
        float mr[AK_CS], lr[AK_CS], M = -INFINITY, L = 0.0f;
        for (int r = 0; r < AK_CS; r++) {
            const float *rs = cl.map_shared_rank(stt, r);
            mr[r] = rs[2 * tid];
            lr[r] = rs[2 * tid + 1];
        }
        for (int r = 0; r < AK_CS; r++)
            M = fmaxf(M, mr[r]);
        for (int r = 0; r < AK_CS; r++)
            if (lr[r] > 0.0f)
                L += lr[r] * expf(mr[r] - M);
        ML[2 * tid] = M;
        ML[2 * tid + 1] = L;
    }
    __syncthreads();
    if (tid < AK_CK) {
        float4 p;
        float pp[AK_CH];
        for (int h = 0; h < AK_CH; h++)
            pp[h] = s[h] > -INFINITY ? m3d_round_bf16(expf(s[h] - ML[2 * h]) / ML[2 * h + 1]) : 0.0f;
        p.x = pp[0], p.y = pp[1], p.z = pp[2], p.w = pp[3];
        ((float4 *)ps)[tid] = p;
    }
    asm volatile("cp.async.wait_group 0;\n" ::); /* V landed */
    __syncthreads();

    /* P.V: warp w takes keys 32w .. 32w + 31, lane dims 4 lane .. 4 lane + 3 */
    float acc[AK_CH][4];
    for (int h = 0; h < AK_CH; h++)
        for (int i = 0; i < 4; i++)
            acc[h][i] = 0.0f;
    const bool dl = 4 * lane < hd;
    if (dl)
        for (int j = 0; j < 32; j++) {
            const int k = 32 * w + j;
            if (k >= nk)
                break;
            float v[4];
            ak_ld4(Vs + (size_t)k * hd + 4 * lane, v);
            const float4 p = ((const float4 *)ps)[k];
            const float pp[AK_CH] = {p.x, p.y, p.z, p.w};
            for (int h = 0; h < AK_CH; h++)
                for (int i = 0; i < 4; i++)
                    acc[h][i] = fmaf(pp[h], v[i], acc[h][i]);
        }
    if (dl)
        for (int h = 0; h < AK_CH; h++) {
            float4 r;
            r.x = acc[h][0], r.y = acc[h][1], r.z = acc[h][2], r.w = acc[h][3];
            *(float4 *)(pw + ((size_t)w * AK_CH + h) * hd + 4 * lane) = r;
        }
    __syncthreads();
    for (int o = tid; o < AK_CH * hd; o += blockDim.x) { /* warps in order */
        const size_t st = (size_t)AK_CH * hd;
        po[o] = ((pw[o] + pw[st + o]) + pw[2 * st + o]) + pw[3 * st + o];
    }
    cl.sync(); /* every block's partial visible */
    const int per = (AK_CH * hd + AK_CS - 1) / AK_CS;
    for (int o = c * per + tid; o < (c + 1) * per && o < hc * hd; o += blockDim.x) {
        float a = 0.0f;
        for (int r = 0; r < AK_CS; r++)
            a += cl.map_shared_rank(po, r)[o];
        out[((size_t)t * nh + hb) * hd + o] = m3d_round_bf16(a);
    }
    cl.sync(); /* no block leaves while others read its shared memory */
}

static size_t ak_cluster_shm(int hd)
{
    return 4 * ((size_t)AK_CH * hd + AK_CK * AK_CH + 16 + 8 * AK_CH + (size_t)AK_CH * hd) +
           2 * ((size_t)AK_CK * (hd + 8) + (size_t)AK_CK * hd);
}

/* Launch the cluster kernel; hipErrorInvalidValue (nothing enqueued) when
 * the device cannot run a cluster of AK_CS such blocks. */
static hipError_t ak_cluster_run(float *out, const float *q, const void *kc, const void *vc,
                                 const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                                 int nkv, int hd, const int32_t *blocks, int topk,
                                 hipStream_t st)
{
    const int hpg = nh / nkv, nz = (hpg + AK_CH - 1) / AK_CH;
    const size_t shm = ak_cluster_shm(hd);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1] = {};
    cfg.gridDim = dim3(AK_CS, nkv * nz, T);
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = shm;
    cfg.stream = st;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = AK_CS;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    /* host-side queries, allowed while a graph is being captured (relaxed) */
    cudaStreamCaptureMode cm = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&cm);
    int ncl = 0;
    const int ok =
        cudaFuncSetAttribute(k_ak_cluster, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
            cudaSuccess &&
        cudaFuncSetAttribute(k_ak_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)shm) == cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&ncl, k_ak_cluster, &cfg) == cudaSuccess && ncl >= 1;
    (void)cudaThreadExchangeStreamCaptureMode(&cm);
    if (!ok) {
        (void)cudaGetLastError();
        return hipErrorInvalidValue;
    }
    const float scale = (float)(1.0 / sqrt((double)hd)); /* as ref/attention.c */
    cudaError_t e = cudaLaunchKernelEx(&cfg, k_ak_cluster, out, q, (const uint16_t *)kc,
                                       (const uint16_t *)vc, page_table, B, pos0, T, nh, nkv, hd,
                                       blocks, topk, scale);
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* ---- tensor-core cluster path (NVIDIA sm_90; m3g_attention_sk's default
 * decode path where the cluster path above applies and nh / nkv <= 16,
 * hd in {16, 32, 64, 128}). One cluster of AK_CS blocks per (row, KV
 * group); block c takes list entry c (one MSA block of <= 128 keys) for all
 * (<= 16) query heads of the group, which are the M = 16 rows of the
 * mma.sync m16n8k16 tiles (heads >= nh / nkv: zero rows, never written).
 * 8 warps, 256 threads:
 *   q of the group -> registers, loaded first so that its latency overlaps
 *   the list -> page table -> K/V chain; the block's K and V rows -> shared
 *   memory by cp.async, all issued at once before any math, each thread a
 *   fixed 16-byte column of every RPI-th row (rows past the visible keys
 *   zero-filled); q -> bf16 in shared memory (exact: bf16 mode's q is
 *   rounded); S = Q K^T on the tensor cores, warp w keys 16w .. 16w + 15
 *   (bf16 x bf16 products exact, fp32 sums), s = acc * scale; per-warp max /
 *   sum of exp, then per block (warps in order); each block pushes its 16
 *   (m, l) pairs into every block of the cluster (st.async, counted by the
 *   receiver's mbarrier); once its mbarrier has all AK_CS x 16 pairs, every
 *   block forms the same global M, L per head (ranks in a fixed order);
 *   p = bf16(exp(s - M) / L) (the reference's rounding point, fp32 exp and
 *   division) -> shared; O = P V on the tensor cores, warp w dims
 *   16w .. 16w + 15 over the block's keys; the partial of head h goes into
 *   block h's shared memory (st.async on block h's second mbarrier); block h
 *   waits for its AK_CS partials, sums them in rank order, rounds and
 *   stores.
 * One cluster barrier (relaxed arrive at the start, waited before the first
 * remote store: every block runs and has initialised its mbarriers); the
 * exchanges complete on mbarrier byte counts, with no fence or cluster
 * barrier behind them, and a block leaves once nothing more can land in
 * its shared memory. No workspace, no atomics, deterministic.
 * PDL (programmatic dependent launch, default): the kernel may start while
 * the previous kernel of the stream runs and waits for it
 * (griddepcontrol.wait) before its first global read; it releases the next
 * kernel after its partials are sent (releasing it at the start was slower,
 * 10.4 vs 8.6 us with the cluster-barrier form; presumably the next launch's
 * waiting blocks then hold SM slots for the whole kernel). The next kernel
 * must itself wait (griddepcontrol.wait, or be launched without PDL) before
 * reading out.
 * Differences from ref (within fp32 rounding before the bf16 rounding of p,
 * not bitwise): summation order of q.k (tensor-core k-steps), of L (per
 * warp, per block, then ranks) and of P.V (tensor-core k-steps, then
 * blocks in list order). A block id listed twice counts once (the list is a
 * set, as in the reference).
 * Checked by gpu/tests/test_ops.cu (m3g_attention_sk cases at hd 16-128,
 * 1-16 heads per group, top 4-16, T 1-3, -1 entries, partial own blocks,
 * NaN in every slot no row may see). Needs 16-byte aligned q and caches. */
#define AT_NW 8   /* warps per block */
#define AT_KT 128 /* keys per block (B <= 128) */

__device__ __forceinline__ void at_cl_arrive_relaxed(void)
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void at_cl_wait(void)
{
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* mbarrier *b of this block: one expected arrival */
__device__ __forceinline__ void at_bar_init(uint64_t *b)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(m3t_smem(b)) : "memory");
}
/* the one arrival, announcing `bytes` of st.async stores into this block */
__device__ __forceinline__ void at_bar_expect(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(m3t_smem(b)),
                 "r"(bytes)
                 : "memory");
}
/* until phase 0 of *b completes: every announced byte has landed, visible */
__device__ __forceinline__ void at_bar_wait(uint64_t *b)
{
    uint32_t ok = 0;
    do {
        asm volatile("{\n .reg .pred p;\n"
                     " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok)
                     : "r"(m3t_smem(b))
                     : "memory");
    } while (!ok);
}
/* the shared::cluster address of *p in the block of rank r */
__device__ __forceinline__ uint32_t at_mapa(const void *p, int r)
{
    uint32_t a;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(a) : "r"(m3t_smem(p)), "r"(r));
    return a;
}
/* (x, y) -> the cluster address a; its 8 bytes complete on the mbarrier at
 * cluster address bar (both in the same block) */
__device__ __forceinline__ void at_st_async(uint32_t a, float x, float y, uint32_t bar)
{
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, "
                 "[%3];\n" ::"r"(a),
                 "f"(x), "f"(y), "r"(bar)
                 : "memory");
}

/* shared bytes: K, V [AT_KT][hd + 8] bf16, Q, P [16][.. + 8] bf16, per-warp
 * stats [AT_NW][16][2], cluster stats [AK_CS][16][2], partials [AK_CS][hd],
 * two mbarriers */
static size_t at_tc_shm(int hd)
{
    return 2 * (2 * (size_t)AT_KT * (hd + 8) + 16 * (size_t)(hd + 8) + 16 * (size_t)(AT_KT + 8)) +
           4 * ((size_t)AT_NW * 32 + (size_t)AK_CS * 32 + (size_t)AK_CS * hd) + 2 * 8;
}

/* grid (AK_CS, nkv, T), cluster (AK_CS, 1, 1), AT_NW * 32 threads. */
template <int HD>
__global__ void __launch_bounds__(AT_NW * 32)
k_at_tc(float *out, const float *q, const uint16_t *kc, const uint16_t *vc,
        const int32_t *page_table, int B, int64_t pos0, int T, int nh, int nkv,
        const int32_t *blocks, int topk, float scale)
{
    static_assert(AT_NW * 32 == 16 * AK_CS && AK_CS == 16 && AT_KT == 16 * AT_NW && HD % 16 == 0 &&
                      HD <= 16 * AT_NW,
                  "thread roles below assume 256 threads, 16 ranks, 16 keys per warp");
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    constexpr int LD = HD + 8, PLD = AT_KT + 8, CH = HD / 8, NT = AT_NW * 32;
    constexpr int RPI = NT / CH;                   /* K (V) rows per copy step */
    constexpr int QV = 4 * HD, QPT = (QV + NT - 1) / NT; /* q float4s: all, per thread */
    extern __shared__ __align__(16) unsigned char at_sm[];
    uint16_t *Ks = (uint16_t *)at_sm;      /* [AT_KT][LD] */
    uint16_t *Vs = Ks + AT_KT * LD;        /* [AT_KT][LD] */
    uint16_t *Qs = Vs + AT_KT * LD;        /* [16][LD] */
    uint16_t *Ps = Qs + 16 * LD;           /* [16][PLD] */
    float *wst = (float *)(Ps + 16 * PLD); /* [AT_NW][16] (m, l) */
    float *cst = wst + AT_NW * 32;         /* [AK_CS][16] (m, l), written by rank r */
    float *rcv = cst + AK_CS * 32;         /* [AK_CS][HD] partial O of head c from rank r */
    uint64_t *bar = (uint64_t *)(rcv + AK_CS * HD); /* [0]: cst complete, [1]: rcv complete */

    const int c = (int)cl.block_rank(), tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int g = blockIdx.y, t = blockIdx.z, hpg = nh / nkv;
    const int mi = lane >> 3, r8 = lane & 7, qr = lane >> 2, qc = lane & 3;
    if (tid == 0) { /* before the phase-0 arrive, so every block sees them initialised */
        at_bar_init(&bar[0]);
        at_bar_init(&bar[1]);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        at_bar_expect(&bar[0], AK_CS * 16 * 8);
        at_bar_expect(&bar[1], c < hpg ? AK_CS * HD * 4 : 0);
    }
    at_cl_arrive_relaxed(); /* phase 0: this block runs, its mbarriers are ready */
    const int64_t pos = pos0 + t;
    const size_t kvw = (size_t)nkv * HD;
    m3t_pdl_wait(); /* q, the block list and the caches: earlier kernels' outputs */

    float4 qv[QPT]; /* q of the group: its loads overlap the list -> page -> K/V chain */
#pragma unroll
    for (int k = 0; k < QPT; k++) {
        const int i = tid + NT * k, h = i / (HD / 4);
        qv[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < QV && h < hpg)
            qv[k] = ((const float4 *)(q + ((size_t)t * nh + (size_t)g * hpg + h) * HD))[i % (HD / 4)];
    }
    /* list entry c; a repeated id counts once (at its first entry) */
    const int32_t *list = blocks + ((size_t)g * T + t) * topk;
    const int lb = lane < topk ? list[lane] : -1;
    int b = __shfl_sync(0xffffffffu, lb, c);
    if (__ballot_sync(0xffffffffu, lane < c && lb == b))
        b = -1;
    int nk = 0;
    int64_t row0 = 0;
    if (b >= 0 && (int64_t)b * B <= pos) {
        const int64_t kend = pos + 1 - (int64_t)b * B;
        nk = kend < B ? (int)kend : B;
        row0 = (int64_t)page_table[b] * B;
    }
    { /* every K, then every V row in flight before any math; this thread
         copies chunk cc of rows j0, j0 + RPI, ... (rows >= nk zero-filled) */
        const int j0 = tid / CH, cc = tid % CH;
        const size_t src0 = (size_t)row0 * kvw + (size_t)g * HD + 8 * cc;
        const uint16_t *kg = kc + src0, *vg = vc + src0;
#pragma unroll
        for (int k = 0; k < AT_KT / RPI; k++) {
            const int ok = j0 + RPI * k < nk;
            m3t_cp16(Ks + (j0 + RPI * k) * LD + 8 * cc, kg + (ok ? (j0 + (size_t)RPI * k) * kvw : 0),
                     ok ? 16 : 0);
        }
        m3t_cp_commit();
#pragma unroll
        for (int k = 0; k < AT_KT / RPI; k++) {
            const int ok = j0 + RPI * k < nk;
            m3t_cp16(Vs + (j0 + RPI * k) * LD + 8 * cc, vg + (ok ? (j0 + (size_t)RPI * k) * kvw : 0),
                     ok ? 16 : 0);
        }
        m3t_cp_commit();
    }
#pragma unroll
    for (int k = 0; k < QPT; k++) { /* q rows of the group, bf16 (exact: bf16 mode's q is rounded) */
        const int i = tid + NT * k, h = i / (HD / 4), d4 = i % (HD / 4);
        if (i < QV)
            *(uint2 *)(Qs + h * LD + 4 * d4) =
                make_uint2(m3t_pack_bf16(qv[k].x, qv[k].y), m3t_pack_bf16(qv[k].z, qv[k].w));
    }
    m3t_cp_wait<1>(); /* this thread's K copies landed */
    __syncthreads();
    /* S (16 heads x keys 16w .. 16w + 15): s[n][e] is head qr + 8 (e >> 1),
     * key 16w + 8n + 2qc + (e & 1) */
    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; n++)
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    if (16 * w < nk) { /* warp-uniform */
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t a[4], bk[4];
            m3t_ldsm4(a, Qs + (r8 + 8 * (mi & 1)) * LD + kk * 16 + 8 * (mi >> 1));
            m3t_ldsm4(bk, Ks + (16 * w + 8 * (mi >> 1) + r8) * LD + kk * 16 + 8 * (mi & 1));
            m3t_mma(s[0], a, bk[0], bk[1]);
            m3t_mma(s[1], a, bk[2], bk[3]);
        }
    }
#pragma unroll
    for (int n = 0; n < 2; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            s[n][e] = 16 * w + 8 * n + 2 * qc + (e & 1) < nk ? s[n][e] * scale : -INFINITY;
    { /* per-warp max and sum of exp of heads qr, qr + 8 (quad reductions) */
        float m0 = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1]));
        float m1 = fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3]));
        m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 1));
        m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 1));
        m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 2));
        m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 2));
        float l0 = 0.0f, l1 = 0.0f;
        if (m0 > -INFINITY)
            l0 = (expf(s[0][0] - m0) + expf(s[0][1] - m0)) +
                 (expf(s[1][0] - m0) + expf(s[1][1] - m0));
        if (m1 > -INFINITY)
            l1 = (expf(s[0][2] - m1) + expf(s[0][3] - m1)) +
                 (expf(s[1][2] - m1) + expf(s[1][3] - m1));
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        if (qc == 0) {
            ((float2 *)wst)[w * 16 + qr] = make_float2(m0, l0);
            ((float2 *)wst)[w * 16 + qr + 8] = make_float2(m1, l1);
        }
    }
    __syncthreads();
    { /* this block's (m, l) of head h (warps in order) -> rank dst's cst[c][h] */
        const int h = tid & 15, dst = tid >> 4;
        float m = -INFINITY, l = 0.0f;
#pragma unroll
        for (int v = 0; v < AT_NW; v++)
            m = fmaxf(m, ((const float2 *)wst)[v * 16 + h].x);
#pragma unroll
        for (int v = 0; v < AT_NW; v++) {
            const float2 x = ((const float2 *)wst)[v * 16 + h];
            if (x.y > 0.0f)
                l += x.y * expf(x.x - m);
        }
        const uint32_t ra = at_mapa(cst + 2 * (c * 16 + h), dst), rb = at_mapa(&bar[0], dst);
        at_cl_wait(); /* phase 0 complete: every block of the cluster runs */
        at_st_async(ra, m, l, rb);
    }
    at_bar_wait(&bar[0]); /* every block's stats are in this block */
    float M0 = -INFINITY, M1 = -INFINITY, L0 = 0.0f, L1 = 0.0f;
    { /* global M, L of heads qr, qr + 8: lane qc takes ranks 4qc .. 4qc + 3,
         the quad combines them (the same order in every block) */
        float2 x0[4], x1[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            x0[i] = ((const float2 *)cst)[(4 * qc + i) * 16 + qr];
            x1[i] = ((const float2 *)cst)[(4 * qc + i) * 16 + qr + 8];
            M0 = fmaxf(M0, x0[i].x);
            M1 = fmaxf(M1, x1[i].x);
        }
        M0 = fmaxf(M0, __shfl_xor_sync(0xffffffffu, M0, 1));
        M1 = fmaxf(M1, __shfl_xor_sync(0xffffffffu, M1, 1));
        M0 = fmaxf(M0, __shfl_xor_sync(0xffffffffu, M0, 2));
        M1 = fmaxf(M1, __shfl_xor_sync(0xffffffffu, M1, 2));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (x0[i].y > 0.0f)
                L0 += x0[i].y * expf(x0[i].x - M0);
            if (x1[i].y > 0.0f)
                L1 += x1[i].y * expf(x1[i].x - M1);
        }
        L0 += __shfl_xor_sync(0xffffffffu, L0, 1);
        L1 += __shfl_xor_sync(0xffffffffu, L1, 1);
        L0 += __shfl_xor_sync(0xffffffffu, L0, 2);
        L1 += __shfl_xor_sync(0xffffffffu, L1, 2);
    }
#pragma unroll
    for (int n = 0; n < 2; n++) { /* p = bf16(exp(s - M) / L) -> Ps */
        const float p0 = s[n][0] > -INFINITY ? expf(s[n][0] - M0) / L0 : 0.0f;
        const float p1 = s[n][1] > -INFINITY ? expf(s[n][1] - M0) / L0 : 0.0f;
        const float p2 = s[n][2] > -INFINITY ? expf(s[n][2] - M1) / L1 : 0.0f;
        const float p3 = s[n][3] > -INFINITY ? expf(s[n][3] - M1) / L1 : 0.0f;
        const int col = 16 * w + 8 * n + 2 * qc;
        *(uint32_t *)(Ps + qr * PLD + col) = m3t_pack_bf16(p0, p1);
        *(uint32_t *)(Ps + (qr + 8) * PLD + col) = m3t_pack_bf16(p2, p3);
    }
    m3t_cp_wait<0>(); /* V landed */
    __syncthreads();
    if (16 * w < HD) { /* O (16 heads x dims 16w .. 16w + 15) = P V over the keys */
        float o[2][4];
#pragma unroll
        for (int n = 0; n < 2; n++)
            o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < AT_KT / 16; kk++) { /* past nk: p = 0, V rows 0 */
            uint32_t a[4], vb[4];
            m3t_ldsm4(a, Ps + (r8 + 8 * (mi & 1)) * PLD + kk * 16 + 8 * (mi >> 1));
            m3t_ldsm4t(vb, Vs + (kk * 16 + 8 * (mi & 1) + r8) * LD + 16 * w + 8 * (mi >> 1));
            m3t_mma(o[0], a, vb[0], vb[1]);
            m3t_mma(o[1], a, vb[2], vb[3]);
        }
#pragma unroll
        for (int hh = 0; hh < 2; hh++) { /* head h's partial -> rank h's rcv[c] */
            const int h = qr + 8 * hh;
            if (h < hpg) {
                const uint32_t ra = at_mapa(rcv + c * HD + 16 * w + 2 * qc, h);
                const uint32_t rb = at_mapa(&bar[1], h);
                at_st_async(ra, o[0][2 * hh], o[0][2 * hh + 1], rb);
                at_st_async(ra + 8 * 4, o[1][2 * hh], o[1][2 * hh + 1], rb);
            }
        }
    }
    m3t_pdl_trigger(); /* the next kernel may launch (it waits before reading) */
    if (c < hpg) { /* nothing else lands in a block of rank >= hpg: it may leave */
        at_bar_wait(&bar[1]); /* every rank's partial of head c is here */
        for (int d = tid; d < HD; d += AT_NW * 32) {
            float a = 0.0f;
#pragma unroll
            for (int r = 0; r < AK_CS; r++)
                a += rcv[r * HD + d];
            out[((size_t)t * nh + (size_t)g * hpg + c) * HD + d] = m3d_round_bf16(a);
        }
    }
}

/* 1 iff the tensor-core cluster kernel takes these shapes (given the
 * conditions of m3g_attention_sk_cluster). */
static int at_tc_ok(int nh, int nkv, int hd)
{
    return nh / nkv <= 16 && (hd == 16 || hd == 32 || hd == 64 || hd == 128);
}

template <int HD>
static hipError_t at_tc_launch(float *out, const float *q, const void *kc, const void *vc,
                               const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                               int nkv, const int32_t *blocks, int topk, hipStream_t st)
{
    const size_t shm = at_tc_shm(HD);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2] = {};
    cfg.gridDim = dim3(AK_CS, nkv, T);
    cfg.blockDim = dim3(AT_NW * 32);
    cfg.dynamicSmemBytes = shm;
    cfg.stream = st;
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = AK_CS;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    /* host-side queries, allowed while a graph is being captured (relaxed) */
    cudaStreamCaptureMode cm = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&cm);
    int ncl = 0;
    const int ok =
        cudaFuncSetAttribute(k_at_tc<HD>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) ==
            cudaSuccess &&
        cudaFuncSetAttribute(k_at_tc<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)shm) == cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&ncl, k_at_tc<HD>, &cfg) == cudaSuccess && ncl >= 1;
    (void)cudaThreadExchangeStreamCaptureMode(&cm);
    if (!ok) {
        (void)cudaGetLastError();
        return hipErrorInvalidValue;
    }
    const float scale = (float)(1.0 / sqrt((double)HD)); /* as ref/attention.c */
    cfg.numAttrs = 2;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k_at_tc<HD>, out, q, (const uint16_t *)kc,
                                       (const uint16_t *)vc, page_table, B, pos0, T, nh, nkv,
                                       blocks, topk, scale);
    if (e != cudaSuccess) { /* PDL refused: the same launch without it */
        (void)cudaGetLastError();
        cfg.numAttrs = 1;
        e = cudaLaunchKernelEx(&cfg, k_at_tc<HD>, out, q, (const uint16_t *)kc,
                               (const uint16_t *)vc, page_table, B, pos0, T, nh, nkv, blocks,
                               topk, scale);
    }
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* hipErrorInvalidValue (nothing enqueued) when the device cannot run the
 * cluster; the caller falls back. */
static hipError_t at_tc_run(float *out, const float *q, const void *kc, const void *vc,
                            const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                            int nkv, int hd, const int32_t *blocks, int topk, hipStream_t st)
{
    switch (hd) {
    case 128:
        return at_tc_launch<128>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, blocks, topk, st);
    case 64:
        return at_tc_launch<64>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, blocks, topk, st);
    case 32:
        return at_tc_launch<32>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, blocks, topk, st);
    default:
        return at_tc_launch<16>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, blocks, topk, st);
    }
}
#else
#define AK_CLUSTER 0
#endif

/* ---- dense decode, tensor cores, keys split over many CTAs (NVIDIA sm_80+;
 * m3g_attention_sk's default for dense (blocks == NULL) attention in bf16
 * mode over bf16 caches when nh / nkv <= 16, hd is 16, 32, 64 or 128 and
 * the last row sees >= AD_MIN_KEYS keys; M3's layers 0-2, decode rows and
 * long prefill rows alike).
 * A CTA of NW = 4 warps serves GW = 1 KV group: warp w takes keys 16w ..
 * 16w + 15 of each tile of 64 keys (16 KB of K or V at hd 128). (The
 * kernels are written for GW groups side by side in a tile of 16 NW / GW
 * keys, warp w taking group w % GW; the wider CTAs measured slower.) The keys
 * 0 .. pos of each row are cut into tiles and the tiles into nsplit
 * contiguous splits of tps tiles, nsplit chosen so that one wave of CTAs
 * fills the GPU (SMs x CTAs per SM); the 16 query heads of a group are the
 * M = 16 rows of mma.sync m16n8k16 (heads >= nh / nkv: zero rows, never
 * stored). Three launches keep the reference's rounding point of p exact:
 *   1 k_ad_scores, grid (nkv / GW, nsplit, rows): K tiles stream through
 *     an S1-stage cp.async pipeline (L2 evict-first); S = Q K^T on the
 *     tensor cores (q -> bf16 exact in bf16 mode, bf16 x bf16 products
 *     exact, fp32 sums); s = acc * scale -> workspace (fp32, -inf past
 *     pos); per lane an online max / sum of exp per head, combined over the
 *     quad, then over the warps of the group in order -> the split's
 *     (m, l) per head.
 *   2 k_ad_pv, same grid: every CTA merges the (m, l) of all splits of its
 *     heads in a fixed order (a strided share per lane, then a butterfly)
 *     into the global M, L (identical in every CTA); streams its split's V
 *     tiles and stored scores (S2 stages); p = bf16(exp(s - M) / L), the
 *     reference's rounding point (fp32 exp and division from the exact
 *     stored s); O = P V on the tensor cores; the warps of a group summed in
 *     order -> the split's partial output [heads][hd] fp32.
 *   3 k_ad_merge, grid (nh, rows): out = bf16(sum of the partials over the
 *     splits: 4 chunks in ascending order, then the chunks in order).
 * PDL (default): launch 1 releases launch 2 at its start; launch 2 issues
 * its first V tiles (the cache, written before launch 1 began) before it
 * waits for launch 1 (griddepcontrol.wait) and reads scores and stats;
 * launch 3 waits before reading the partials.
 * HBM traffic per row: K and V once (2 x keys x nkv x hd x 2 bytes) plus
 * the fp32 scores written and read back (nh x keys x 4 bytes each way:
 * +25% at M3's shape, the price of the exact p; a one-pass flash decode
 * cannot round p = exp(s - M) / L before it knows M and L).
 * Differences from ref (fp32 rounding before the bf16 rounding of p, not
 * bitwise): summation order of q.k (tensor-core k-steps), of L (per lane
 * online, quad, warps, splits), of P.V (tensor-core k-steps, warps,
 * splits); expf is CUDA's (<= 2 ulp). Deterministic (fixed orders, no
 * atomics). Needs 16-byte aligned caches, 8-byte aligned q.
 * H200, bench-gpu "dense decode attention" (64 q / 4 kv heads, hd 128, one
 * row, bf16 caches behind a permuted page table, median of 20 graph
 * replays, cold-cache rotations; measured 2026-11-29 ~21:45 UTC, second
 * device call), default (4-warp CTAs of one group) vs the two-launch path:
 *   131,072 keys 104.43 us vs 833.62 (268 MB of K/V: 2.57 TB/s, 53.6% of
 *           4.8 TB/s counting K/V only; 335 MB with the scores: 3.2 TB/s);
 *           8-warp CTAs of 4 groups 132.25, 4-warp CTAs of 4 groups 153.18;
 *           torch SDPA (one-pass flash decode, p not rounded as ref) 72.21;
 *           first call (this kernel before the parallel stats merge and
 *           the 4-chunk final merge): 108.79, no L2 hints 107.95, no PDL
 *           112.17 (32K: 38.97, 40.19, 42.27)
 *    32,768 keys  36.77 us vs 149.50 (torch SDPA 26.99)
 *     8,192 keys  18.46 us vs 39.35;  2,048 keys 11.10 vs 17.93
 *       512 keys  10.21 vs 14.45 (first call); 64 / 16 keys: the 8-warp
 *           shape lost (12.19 / 11.89 vs 11.25 / 9.84), hence AD_MIN_KEYS.
 * Host golden (ref/attention.c order, bf16 mode): nmse 3.76e-7 (128K, all
 * heads), 2.26e-7 (32K), 3.47e-7 (1M keys, 3 heads), <= 7.9e-7 on eleven
 * edge shapes (hd 16-128, 1-16 heads per group, B 4-128, 1 key, tile
 * boundaries, T 1-5, one-row workspace); the two-launch path: 3.91e-7 at
 * 128K. Next: the score round trip (a cluster-wide exchange of (m, l)
 * could keep S on chip up to ~64K keys), launch overheads (~10 us at 512
 * keys: three launches). */
#if M3_TC
/* Two CTA sizes (NW warps): NW 4: 3 CTAs per SM, 4 / 3 pipeline stages
 * (launch 1 K tiles / launch 2 V + score tiles) of 16 KB of K or V at hd
 * 128; NW 8: 1 CTA per SM, 6 / 4 stages of 32 KB. */
template <int NW> struct ad_cfg {
    static constexpr int S1 = NW == 4 ? 4 : 6, S2 = NW == 4 ? 3 : 4, CPS = NW == 4 ? 3 : 1;
};
#define AD_MAXSPLIT 512 /* bound on the splits per row */
#define AD_MAXSLOTS 2048 /* bound on the CTAs of one wave */
#define AD_MIN_KEYS 512 /* below: the two-launch path (see m3g_attention_sk_tuned) */

/* 16-byte cp.async global -> shared with an L2 cache-policy hint. */
__device__ __forceinline__ void ad_cp16(void *dst, const void *src, int src_bytes, uint64_t pol)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(
                     m3t_smem(dst)),
                 "l"(src), "r"(src_bytes), "l"(pol)
                 : "memory");
}
__device__ __forceinline__ uint64_t ad_evict_first(void)
{
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}

/* combine two (max, sum of exp relative to max) pairs */
__device__ __forceinline__ float2 ad_ml(float2 a, float2 b)
{
    const float m = fmaxf(a.x, b.x);
    float l = 0.0f;
    if (a.y > 0.0f)
        l += a.y * expf(a.x - m);
    if (b.y > 0.0f)
        l += b.y * expf(b.x - m);
    return make_float2(m, l);
}

/* The running (max, sum of exp) pair ml of one head, extended by four of its scores. */
__device__ __forceinline__ float2 ad_ml_add4(float2 ml, float a, float b, float c, float d)
{
    const float t = fmaxf(fmaxf(a, b), fmaxf(c, d));
    if (t > -INFINITY) {
        const float m = fmaxf(ml.x, t);
        const float e = (expf(a - m) + expf(b - m)) + (expf(c - m) + expf(d - m));
        ml.y = (ml.y > 0.0f ? ml.y * expf(ml.x - m) : 0.0f) + e;
        ml.x = m;
    }
    return ml;
}

/* ml merged with the pair of the lane whose index differs in bit o. */
__device__ __forceinline__ float2 ad_ml_xor(float2 ml, int o)
{
    float2 x;
    x.x = __shfl_xor_sync(0xffffffffu, ml.x, o);
    x.y = __shfl_xor_sync(0xffffffffu, ml.y, o);
    return ad_ml(ml, x);
}

/* Copy tile it (keys it * TK .. + TK - 1, TK = 16 NW / GW) of groups g0 .. g0 + GW - 1 from
 * the paged cache into dst [TK][GW * HD + 8] bf16; keys >= nkeys zero-filled. */
template <int HD, int GW, int NW>
__device__ __forceinline__ void ad_tile(uint16_t *dst, const uint16_t *cache,
                                        const int32_t *page_table, int B, int nkeys, int it,
                                        int g0, size_t kvw, uint64_t pol)
{
    constexpr int TK = 16 * NW / GW, LD = GW * HD + 8, CH = GW * HD / 8, RP = NW * 32 / CH;
    static_assert(RP >= 1 && TK % RP == 0, "copy shape");
    const int cc = (int)threadIdx.x % CH, j0 = (int)threadIdx.x / CH;
    const int k0 = it * TK;
    const uint16_t *src = cache + (size_t)g0 * HD + 8 * cc;
    if (B % TK == 0) { /* the tile lies in one page */
        const int64_t s0 = (int64_t)page_table[k0 / B] * B + k0 % B;
#pragma unroll
        for (int j = j0; j < TK; j += RP) {
            const bool ok = k0 + j < nkeys;
            ad_cp16(dst + j * LD + 8 * cc, src + (size_t)(ok ? s0 + j : 0) * kvw, ok ? 16 : 0, pol);
        }
    } else {
#pragma unroll
        for (int j = j0; j < TK; j += RP) {
            const int k = k0 + j;
            const bool ok = k < nkeys;
            const int64_t s = ok ? (int64_t)page_table[k / B] * B + k % B : 0;
            ad_cp16(dst + j * LD + 8 * cc, src + (size_t)s * kvw, ok ? 16 : 0, pol);
        }
    }
}

/* grid (nkv / GW, nsplit, rows), NW * 32 threads; shared K [S1][TK][GW * HD + 8]
 * bf16. ws_s [rows][nkv][hpg][kstr] f32; ws_st [rows][nkv][hpg][nsplit] (m, l). */
template <int HD, int GW, int NW>
__global__ void __launch_bounds__(NW * 32, ad_cfg<NW>::CPS)
k_ad_scores(float *ws_s, float2 *ws_st, const float *q, const uint16_t *kc,
            const int32_t *page_table, int B, int64_t pos0, int nh, int nkv, int tps, int nsplit,
            size_t kstr, float scale)
{
    constexpr int KB = NW / GW, TK = 16 * KB, LD = GW * HD + 8, KS = HD / 16;
    constexpr int AD_S1 = ad_cfg<NW>::S1;
    static_assert(NW % GW == 0 && HD % 16 == 0 && HD <= 128, "tile shape");
    extern __shared__ __align__(16) unsigned char ad_sm[];
    uint16_t *Ks = (uint16_t *)ad_sm;
    __shared__ float2 wst[NW][16];
    m3t_pdl_trigger(); /* launch 2 may start now; it waits for this grid before reading */
    const int gs = blockIdx.x, sp = blockIdx.y, t = blockIdx.z;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int gl = w % GW, kb = w / GW, g0 = gs * GW, g = g0 + gl;
    const int qr = lane >> 2, qc = lane & 3, mi = lane >> 3, r8 = lane & 7;
    const int hpg = nh / nkv;
    const int nkeys = (int)(pos0 + t + 1);
    const int ntile = (nkeys + TK - 1) / TK;
    const int tb = sp * tps;
    if (tb >= ntile)
        return; /* block-uniform: launches 2 and 3 skip this split */
    const int nt = (tb + tps < ntile ? tb + tps : ntile) - tb;
    const size_t kvw = (size_t)nkv * HD;
    const uint64_t pol = ad_evict_first();
#pragma unroll
    for (int s = 0; s < AD_S1 - 1; s++) {
        if (s < nt)
            ad_tile<HD, GW, NW>(Ks + s * TK * LD, kc, page_table, B, nkeys, tb + s, g0, kvw, pol);
        m3t_cp_commit();
    }
    uint32_t qa[KS][4]; /* Q of group g (16 heads x HD) as A fragments, bf16 (exact in bf16 mode) */
    {
        const float *qg = q + ((size_t)t * nh + (size_t)g * hpg) * HD;
        const bool h0 = qr < hpg, h1 = qr + 8 < hpg;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            const int c0 = 16 * kk + 2 * qc;
            const float2 z = make_float2(0.0f, 0.0f);
            const float2 x0 = h0 ? *(const float2 *)(qg + qr * HD + c0) : z;
            const float2 x1 = h1 ? *(const float2 *)(qg + (qr + 8) * HD + c0) : z;
            const float2 x2 = h0 ? *(const float2 *)(qg + qr * HD + c0 + 8) : z;
            const float2 x3 = h1 ? *(const float2 *)(qg + (qr + 8) * HD + c0 + 8) : z;
            qa[kk][0] = m3t_pack_bf16(x0.x, x0.y);
            qa[kk][1] = m3t_pack_bf16(x1.x, x1.y);
            qa[kk][2] = m3t_pack_bf16(x2.x, x2.y);
            qa[kk][3] = m3t_pack_bf16(x3.x, x3.y);
        }
    }
    float *sr0 = ws_s + (((size_t)t * nkv + g) * hpg + qr) * kstr; /* head qr's scores */
    float *sr1 = sr0 + 8 * kstr;                                    /* head qr + 8 */
    float2 ml0 = make_float2(-INFINITY, 0.0f), ml1 = make_float2(-INFINITY, 0.0f);
    for (int i = 0; i < nt; i++) {
        m3t_cp_wait<AD_S1 - 2>(); /* this thread's copies of tile i landed */
        __syncthreads();          /* everyone's; and the slot of tile i - 1 is free */
        if (i + AD_S1 - 1 < nt)
            ad_tile<HD, GW, NW>(Ks + ((i + AD_S1 - 1) % AD_S1) * TK * LD, kc, page_table, B,
                                nkeys, tb + i + AD_S1 - 1, g0, kvw, pol);
        m3t_cp_commit();
        const uint16_t *kt = Ks + (i % AD_S1) * TK * LD + gl * HD;
        float s[2][4];
#pragma unroll
        for (int n = 0; n < 2; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t bk[4];
            m3t_ldsm4(bk, kt + (16 * kb + 8 * (mi >> 1) + r8) * LD + kk * 16 + 8 * (mi & 1));
            m3t_mma(s[0], qa[kk], bk[0], bk[1]);
            m3t_mma(s[1], qa[kk], bk[2], bk[3]);
        }
        /* s[n][e]: head qr + 8 (e >> 1), key k1 + 8n + 2qc + (e & 1) */
        const int k1 = (tb + i) * TK + 16 * kb;
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[n][e] = k1 + 8 * n + 2 * qc + (e & 1) < nkeys ? s[n][e] * scale : -INFINITY;
#pragma unroll
        for (int n = 0; n < 2; n++) {
            if (qr < hpg)
                *(float2 *)(sr0 + k1 + 8 * n + 2 * qc) = make_float2(s[n][0], s[n][1]);
            if (qr + 8 < hpg)
                *(float2 *)(sr1 + k1 + 8 * n + 2 * qc) = make_float2(s[n][2], s[n][3]);
        }
        /* running (max, sum of exp) of this lane's keys, heads qr and qr + 8 */
        ml0 = ad_ml_add4(ml0, s[0][0], s[0][1], s[1][0], s[1][1]);
        ml1 = ad_ml_add4(ml1, s[0][2], s[0][3], s[1][2], s[1][3]);
    }
    m3t_cp_wait<0>();
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) { /* the quad (lanes with the same heads) */
        ml0 = ad_ml_xor(ml0, o);
        ml1 = ad_ml_xor(ml1, o);
    }
    if (qc == 0) {
        wst[w][qr] = ml0;
        wst[w][qr + 8] = ml1;
    }
    __syncthreads();
    if (tid < GW * 16) { /* (group, head); the group's warps in key order */
        const int gq = tid >> 4, h = tid & 15;
        if (h < hpg) {
            float2 a = wst[gq][h];
#pragma unroll
            for (int v = 1; v < KB; v++)
                a = ad_ml(a, wst[gq + GW * v][h]);
            ws_st[(((size_t)t * nkv + g0 + gq) * hpg + h) * nsplit + sp] = a;
        }
    }
}

/* Copy the score tile it of the heads of groups g0 .. g0 + GW - 1 into dst
 * [GW * 16][TK + 8] f32 (rows of heads >= hpg zero-filled). */
template <int GW, int NW>
__device__ __forceinline__ void ad_stile(float *dst, const float *src, size_t kstr, int hpg,
                                         int it, uint64_t pol)
{
    constexpr int TK = 16 * NW / GW, SLD = TK + 8, C4 = TK / 4;
    for (int i = threadIdx.x; i < GW * 16 * C4; i += NW * 32) {
        const int r = i / C4, c = i - r * C4, gq = r >> 4, h = r & 15;
        const bool ok = h < hpg;
        ad_cp16(dst + r * SLD + 4 * c,
                src + (ok ? ((size_t)gq * hpg + h) * kstr + (size_t)it * TK + 4 * c : 0),
                ok ? 16 : 0, pol);
    }
}

/* grid (nkv / GW, nsplit, rows), NW * 32 threads; shared per stage V
 * [TK][GW * HD + 8] bf16 + scores [GW * 16][TK + 8] f32. ws_o [rows][nkv][nsplit][hpg][HD] f32. */
template <int HD, int GW, int NW>
__global__ void __launch_bounds__(NW * 32, ad_cfg<NW>::CPS)
k_ad_pv(float *ws_o, const float *ws_s, const float2 *ws_st, const uint16_t *vc,
        const int32_t *page_table, int B, int64_t pos0, int nh, int nkv, int tps, int nsplit,
        size_t kstr)
{
    constexpr int KB = NW / GW, TK = 16 * KB, LD = GW * HD + 8, NJ = HD / 16, RLD = HD + 8;
    constexpr int SLD = TK + 8, SV = TK * LD * 2, SS = GW * 16 * SLD * 4; /* bytes per stage */
    constexpr int AD_S2 = ad_cfg<NW>::S2, TPR = NW * 32 / (GW * 16); /* threads per (group, head) */
    static_assert(TPR >= 1 && TPR <= 32 && (TPR & (TPR - 1)) == 0, "stats threads");
    extern __shared__ __align__(16) unsigned char ad_sm[];
    __shared__ float2 ML[GW * 16];
    const int gs = blockIdx.x, sp = blockIdx.y, t = blockIdx.z;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int gl = w % GW, kb = w / GW, g0 = gs * GW;
    const int qr = lane >> 2, qc = lane & 3, mi = lane >> 3, r8 = lane & 7;
    const int hpg = nh / nkv;
    const int nkeys = (int)(pos0 + t + 1);
    const int ntile = (nkeys + TK - 1) / TK;
    const int nsp = (ntile + tps - 1) / tps; /* splits of this row */
    const int tb = sp * tps;
    if (tb >= ntile)
        return;
    const int nt = (tb + tps < ntile ? tb + tps : ntile) - tb;
    const size_t kvw = (size_t)nkv * HD;
    const uint64_t pol = ad_evict_first();
#define AD_VS(i) ((uint16_t *)(ad_sm + (size_t)((i) % AD_S2) * (SV + SS)))
#define AD_SS(i) ((float *)(ad_sm + (size_t)((i) % AD_S2) * (SV + SS) + SV))
    /* V rows do not depend on launch 1: in flight before waiting for it */
#pragma unroll
    for (int s = 0; s < AD_S2 - 1; s++)
        if (s < nt)
            ad_tile<HD, GW, NW>(AD_VS(s), vc, page_table, B, nkeys, tb + s, g0, kvw, pol);
    m3t_pdl_wait(); /* launch 1's scores and stats are complete and visible */
    const float *srow = ws_s + ((size_t)t * nkv + g0) * hpg * kstr;
    /* commit groups: {V 0 .. S2-2, S 0}, then {S 1}, ..., {S S2-2} */
#pragma unroll
    for (int s = 0; s < AD_S2 - 1; s++) {
        if (s < nt)
            ad_stile<GW, NW>(AD_SS(s), srow, kstr, hpg, tb + s, pol);
        m3t_cp_commit();
    }
    { /* global M, L of each (group, head) over the row's splits: TPR adjacent
         lanes per (group, head), each a strided share of the splits, then a
         butterfly over the TPR lanes (fixed order, the same in every CTA) */
        const int r = tid / TPR, sub = tid - r * TPR, gq = r >> 4, h = r & 15;
        const float2 *st = ws_st + (((size_t)t * nkv + g0 + gq) * hpg + (h < hpg ? h : 0)) * nsplit;
        float m = -INFINITY, l = 0.0f;
        if (h < hpg) {
#pragma unroll 4
            for (int i = sub; i < nsp; i += TPR)
                m = fmaxf(m, st[i].x);
        }
#pragma unroll
        for (int o = 1; o < TPR; o <<= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (h < hpg) {
#pragma unroll 4
            for (int i = sub; i < nsp; i += TPR) {
                const float2 x = st[i];
                if (x.y > 0.0f)
                    l += x.y * expf(x.x - m);
            }
        }
#pragma unroll
        for (int o = 1; o < TPR; o <<= 1)
            l += __shfl_xor_sync(0xffffffffu, l, o);
        if (sub == 0)
            ML[r] = h < hpg ? make_float2(m, l) : make_float2(-INFINITY, 0.0f);
    }
    __syncthreads();
    const float2 ML0 = ML[gl * 16 + qr], ML1 = ML[gl * 16 + qr + 8];
    const bool h0 = qr < hpg, h1 = qr + 8 < hpg;
    float o[2 * NJ][4];
#pragma unroll
    for (int n = 0; n < 2 * NJ; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    for (int i = 0; i < nt; i++) {
        m3t_cp_wait<AD_S2 - 2>();
        __syncthreads();
        if (i + AD_S2 - 1 < nt) {
            ad_tile<HD, GW, NW>(AD_VS(i + AD_S2 - 1), vc, page_table, B, nkeys,
                                tb + i + AD_S2 - 1, g0, kvw, pol);
            ad_stile<GW, NW>(AD_SS(i + AD_S2 - 1), srow, kstr, hpg, tb + i + AD_S2 - 1, pol);
        }
        m3t_cp_commit();
        const uint16_t *vt = AD_VS(i) + gl * HD;
        const float *sr = AD_SS(i) + (gl * 16 + qr) * SLD + 16 * kb + 2 * qc;
        /* P (16 heads x this warp's 16 keys of the tile) as an A fragment */
        const float2 x00 = *(const float2 *)sr, x01 = *(const float2 *)(sr + 8);
        const float2 x10 = *(const float2 *)(sr + 8 * SLD), x11 = *(const float2 *)(sr + 8 * SLD + 8);
#define AD_P(s_, ml_, ok_) ((ok_) && (s_) > -INFINITY ? expf((s_) - (ml_).x) / (ml_).y : 0.0f)
        uint32_t a[4];
        a[0] = m3t_pack_bf16(AD_P(x00.x, ML0, h0), AD_P(x00.y, ML0, h0));
        a[1] = m3t_pack_bf16(AD_P(x10.x, ML1, h1), AD_P(x10.y, ML1, h1));
        a[2] = m3t_pack_bf16(AD_P(x01.x, ML0, h0), AD_P(x01.y, ML0, h0));
        a[3] = m3t_pack_bf16(AD_P(x11.x, ML1, h1), AD_P(x11.y, ML1, h1));
#undef AD_P
#pragma unroll
        for (int j = 0; j < NJ; j++) { /* dims 16j .. 16j + 15; V rows past pos are zeros */
            uint32_t vb[4];
            m3t_ldsm4t(vb, vt + (16 * kb + 8 * (mi & 1) + r8) * LD + 16 * j + 8 * (mi >> 1));
            m3t_mma(o[2 * j], a, vb[0], vb[1]);
            m3t_mma(o[2 * j + 1], a, vb[2], vb[3]);
        }
    }
#undef AD_VS
#undef AD_SS
    m3t_cp_wait<0>();
    __syncthreads(); /* the pipeline buffers become the per-warp partials */
    float *red = (float *)ad_sm; /* [NW][16][RLD] */
#pragma unroll
    for (int n = 0; n < 2 * NJ; n++) {
        float *r = red + ((size_t)w * 16 + qr) * RLD + 8 * n + 2 * qc;
        *(float2 *)r = make_float2(o[n][0], o[n][1]);
        *(float2 *)(r + 8 * RLD) = make_float2(o[n][2], o[n][3]);
    }
    __syncthreads();
    for (int e = tid; e < GW * hpg * HD; e += NW * 32) { /* the group's warps in key order */
        const int gq = e / (hpg * HD), hd_ = e - gq * hpg * HD, h = hd_ / HD, d = hd_ - h * HD;
        float x = red[((size_t)gq * 16 + h) * RLD + d];
#pragma unroll
        for (int v = 1; v < KB; v++)
            x += red[((size_t)(gq + GW * v) * 16 + h) * RLD + d];
        ws_o[((((size_t)t * nkv + g0 + gq) * nsplit + sp) * hpg) * HD + hd_] = x;
    }
}

/* grid (nh, rows), block (HD rounded up to 32, AD_MQ); tk: keys per tile.
 * Thread (d, c) sums chunk c of the splits (ascending), then the AD_MQ
 * chunk sums are added in chunk order. */
#define AD_MQ 4
template <int HD>
__global__ void k_ad_merge(float *out, const float *ws_o, int64_t pos0, int nh, int nkv, int tk,
                           int tps, int nsplit)
{
    constexpr int HP = (HD + 31) / 32 * 32;
    __shared__ float part[AD_MQ][HP];
    m3t_pdl_wait(); /* launch 2's partials */
    const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x, c = threadIdx.y;
    const int hpg = nh / nkv, g = h / hpg, hl = h - g * hpg;
    const int nkeys = (int)(pos0 + t + 1);
    const int nsp = ((nkeys + tk - 1) / tk + tps - 1) / tps;
    const int per = (nsp + AD_MQ - 1) / AD_MQ, s0 = c * per, s1 = s0 + per < nsp ? s0 + per : nsp;
    float a = 0.0f;
    if (d < HD) {
        const float *p = ws_o + (((size_t)t * nkv + g) * nsplit * hpg + hl) * HD + d;
        const size_t stp = (size_t)hpg * HD;
#pragma unroll 8
        for (int s = s0; s < s1; s++) /* ascending split order */
            a += p[(size_t)s * stp];
    }
    part[c][d] = a;
    __syncthreads();
    if (c == 0 && d < HD) {
        float x = part[0][d];
#pragma unroll
        for (int i = 1; i < AD_MQ; i++)
            x += part[i][d];
        out[((size_t)t * nh + h) * HD + d] = m3d_round_bf16(x);
    }
}

typedef struct ad_geom {
    int tiles, nsplit, tps;
    size_t kstr, s_off, st_off, o_off, total;
} ad_geom;

/* Geometry for `rows` rows at positions pos0 .. pos0 + rows - 1 of a call of
 * T rows, tiles of tk keys, ngs CTAs per (row, split); slots: CTAs of one
 * wave (<= AD_MAXSLOTS). */
static void ad_geometry(ad_geom *gm, int64_t pos0, int rows, int T, int nh, int hd, int tk,
                        int ngs, int slots)
{
    const int64_t tiles = (pos0 + rows + tk - 1) / tk;
    int ns = (int)(slots / ((int64_t)ngs * T));
    ns = ns < 1 ? 1 : ns > AD_MAXSPLIT ? AD_MAXSPLIT : ns;
    if (ns > tiles)
        ns = (int)tiles;
    gm->tiles = (int)tiles;
    gm->tps = (int)((tiles + ns - 1) / ns);
    gm->nsplit = (int)((tiles + gm->tps - 1) / gm->tps);
    gm->kstr = (size_t)tiles * tk;
    const size_t r = (size_t)rows;
    gm->s_off = 0;
    gm->st_off = ak_al(r * nh * gm->kstr * 4);
    gm->o_off = gm->st_off + ak_al(r * nh * (size_t)gm->nsplit * 8);
    gm->total = gm->o_off + ak_al(r * nh * (size_t)gm->nsplit * hd * 4);
}

/* Workspace bytes that any geometry of T rows at pos0 fits in (tiles of
 * >= 16 keys, kstr <= keys rounded up to 64, at most AD_MAXSLOTS CTAs). */
static size_t ad_ws_bound(int64_t pos0, int T, int nh, int hd)
{
    const int64_t keys = pos0 + T;
    int64_t ns = AD_MAXSLOTS / T, t16 = (keys + 15) / 16;
    ns = ns < 1 ? 1 : ns > AD_MAXSPLIT ? AD_MAXSPLIT : ns;
    ns = ns > t16 ? t16 : ns;
    const size_t r = (size_t)T, kstr = (size_t)((keys + 63) / 64) * 64;
    return ak_al(r * nh * kstr * 4) + ak_al(r * nh * (size_t)ns * 8) +
           ak_al(r * nh * (size_t)ns * hd * 4);
}

static int ad_ok(int nh, int nkv, int hd, int kv_dtype, int mode)
{
    return mode == 1 && kv_dtype == M3G_BF16 && nkv > 0 && nh % nkv == 0 && nh / nkv <= 16 &&
           (hd == 16 || hd == 32 || hd == 64 || hd == 128);
}

template <int HD, int GW, int NW>
static hipError_t ad_launch(float *out, const float *q, const void *kc, const void *vc,
                            const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                            int nkv, char *ws, size_t ws_bytes, hipStream_t st)
{
    constexpr int TK = 16 * NW / GW, LD = GW * HD + 8;
    const size_t shm1 = (size_t)ad_cfg<NW>::S1 * TK * LD * 2;
    const size_t shm2 = (size_t)ad_cfg<NW>::S2 * (TK * LD * 2 + GW * 16 * (TK + 8) * 4);
    const int ngs = nkv / GW;
    int dev = 0, nsm = 0, occ = 0;
    /* host-side queries, allowed while a graph is being captured (relaxed) */
    cudaStreamCaptureMode cm = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&cm);
    const int ok =
        cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
        cudaFuncSetAttribute(k_ad_scores<HD, GW, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)shm1) == cudaSuccess &&
        cudaFuncSetAttribute(k_ad_pv<HD, GW, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)shm2) == cudaSuccess &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_ad_scores<HD, GW, NW>, NW * 32,
                                                      shm1) == cudaSuccess &&
        occ >= 1 && nsm >= 1;
    (void)cudaThreadExchangeStreamCaptureMode(&cm);
    if (!ok) {
        (void)cudaGetLastError();
        return hipErrorInvalidValue;
    }
    const int slots = nsm * occ < AD_MAXSLOTS ? nsm * occ : AD_MAXSLOTS;
    /* rows per pass: as many as the workspace holds (at least one, else refuse) */
    int tc = T;
    ad_geom gm;
    for (;;) {
        ad_geometry(&gm, pos0 + T - tc, tc, T, nh, HD, TK, ngs, slots); /* the last is the largest */
        if (gm.total <= ws_bytes)
            break;
        if (tc == 1)
            return hipErrorInvalidValue;
        const int nt = (int)((double)tc * (double)ws_bytes / (double)gm.total);
        tc = nt < tc ? (nt > 0 ? nt : 1) : tc - 1;
    }
    const float scale = (float)(1.0 / sqrt((double)HD)); /* as ref/attention.c */
    for (int t0 = 0; t0 < T; t0 += tc) {
        const int n = T - t0 < tc ? T - t0 : tc;
        ad_geometry(&gm, pos0 + t0, n, T, nh, HD, TK, ngs, slots);
        float *ws_s = (float *)(ws + gm.s_off), *ws_o = (float *)(ws + gm.o_off);
        float2 *ws_st = (float2 *)(ws + gm.st_off);
        const dim3 grid(ngs, gm.nsplit, n);
        hipLaunchKernelGGL((k_ad_scores<HD, GW, NW>), grid, dim3(NW * 32), shm1, st, ws_s, ws_st,
                           q + (size_t)t0 * nh * HD, (const uint16_t *)kc, page_table, B,
                           pos0 + t0, nh, nkv, gm.tps, gm.nsplit, gm.kstr, scale);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return e;
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1] = {};
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        cfg.stream = st;
        cfg.gridDim = grid;
        cfg.blockDim = dim3(NW * 32);
        cfg.dynamicSmemBytes = shm2;
        e = cudaLaunchKernelEx(&cfg, k_ad_pv<HD, GW, NW>, ws_o, (const float *)ws_s,
                               (const float2 *)ws_st, (const uint16_t *)vc, page_table, B,
                               pos0 + t0, nh, nkv, gm.tps, gm.nsplit, gm.kstr);
        if (e != cudaSuccess)
            return e;
        cfg.gridDim = dim3(nh, n);
        cfg.blockDim = dim3((HD + 31) / 32 * 32, AD_MQ);
        cfg.dynamicSmemBytes = 0;
        e = cudaLaunchKernelEx(&cfg, k_ad_merge<HD>, out + (size_t)t0 * nh * HD,
                               (const float *)ws_o, pos0 + t0, nh, nkv, TK, gm.tps, gm.nsplit);
        if (e != cudaSuccess)
            return e;
    }
    return hipSuccess;
}

/* hipErrorInvalidValue (nothing enqueued) when the device or the workspace
 * refuses; the caller falls back to the two launches. One CTA shape: 4 warps
 * and one KV group per CTA. */
static hipError_t ad_run(float *out, const float *q, const void *kc, const void *vc,
                         const int32_t *page_table, int B, int64_t pos0, int T, int nh, int nkv,
                         int hd, void *ws, size_t ws_bytes, hipStream_t st)
{
    if (!ws)
        return hipErrorInvalidValue;
    char *w = (char *)ws;
    switch (hd) {
    case 128:
        return ad_launch<128, 1, 4>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, w, ws_bytes, st);
    case 64:
        return ad_launch<64, 1, 4>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, w, ws_bytes, st);
    case 32:
        return ad_launch<32, 1, 4>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, w, ws_bytes, st);
    default:
        return ad_launch<16, 1, 4>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, w, ws_bytes, st);
    }
}
#endif

size_t m3g_attention_sk_ws(int B, int64_t pos0, int T, int nh, int nkv, int hd,
                           const int32_t *blocks, int topk, int kv_dtype)
{
    ak_geom gm;
    if (T <= 0 || B <= 0 || nkv <= 0 || nh % nkv != 0 || (kv_dtype != M3G_F32 && kv_dtype != M3G_BF16))
        return 0;
    ak_geometry(&gm, B, pos0, T, T, nh, nkv, hd, blocks, topk, kv_dtype == M3G_BF16);
#if M3_TC
    if (!blocks && ad_ok(nh, nkv, hd, kv_dtype, 1)) { /* the dense tensor-core path */
        const size_t ad = ad_ws_bound(pos0, T, nh, hd);
        if (ad > gm.total)
            return ad;
    }
#endif
    return gm.total;
}

template <int V>
static hipError_t ak_run(float *out, const float *q, const void *kc, const void *vc,
                         const int32_t *page_table, int B, int64_t pos0, int T, int nh, int nkv,
                         int hd, const int32_t *blocks, int topk, int mode, char *ws, int tc,
                         hipStream_t st)
{
    ak_geom gm;
    const int kb = V >> 1, hpg = nh / nkv;
    ak_geometry(&gm, B, pos0, T, tc, nh, nkv, hd, blocks, topk, kb);
    const float scale = (float)(1.0 / sqrt((double)hd)); /* as ref/attention.c */
    const int hc1 = hpg < AK_HC1 ? hpg : AK_HC1, hc2 = hpg < AK_HC2 ? hpg : AK_HC2;
    const int nt1 = (16 * ((hc1 + 1) / 2) + 31) / 32 * 32;
    const int nt2 = (hc2 * hd / 4 + 31) / 32 * 32;
    const size_t ks = (size_t)hd + 16 / (kb ? 2 : 4);
    const size_t shm1 = 4 * (size_t)AK_HC1 * hd + (kb ? 2 : 4) * (size_t)AK_SK1 * ks;
    const size_t shm2 = 4 * ((size_t)AK_SK2 * AK_HC2 + 4 * AK_HC2) +
                        (kb ? 2 : 4) * (size_t)ak_vt(kb) * hd;
    float *ws_s = (float *)(ws + gm.s_off), *ws_st = (float *)(ws + gm.st_off);
    float *ws_o = (float *)(ws + gm.o_off);
    unsigned *cnt = (unsigned *)(ws + gm.c_off);
    for (int t0 = 0; t0 < T; t0 += tc) {
        const int n = T - t0 < tc ? T - t0 : tc;
        hipLaunchKernelGGL(k_ak_scores<V>, dim3(gm.nsplit1, n, nkv * gm.nz1), dim3(nt1), shm1, st,
                           ws_s, ws_st, cnt, q + (size_t)t0 * nh * hd, kc, vc, page_table, B,
                           pos0 + t0, nh, nkv, hd, blocks, T, t0, topk, gm.nlist, gm.nsub1,
                           gm.nsplit1, gm.nz2, scale);
        hipError_t e = hipGetLastError();
        if (e != hipSuccess)
            return e;
        hipLaunchKernelGGL(k_ak_pv<V>, dim3(gm.nsplit2, n, nkv * gm.nz2), dim3(nt2), shm2, st,
                           out + (size_t)t0 * nh * hd, ws_o, cnt, ws_s, ws_st, vc, page_table, B,
                           pos0 + t0, nh, nkv, hd, blocks, T, t0, topk, gm.nlist, gm.nsplit1,
                           gm.nsub2, gm.nsplit2, mode);
        e = hipGetLastError();
        if (e != hipSuccess)
            return e;
    }
    return hipSuccess;
}

int m3g_attention_sk_tc(int B, int nh, int nkv, int hd, const int32_t *blocks, int topk,
                        int kv_dtype, int mode)
{
#if AK_CLUSTER
    return m3g_attention_sk_cluster(B, nh, nkv, hd, blocks, topk, kv_dtype, mode) &&
           at_tc_ok(nh, nkv, hd);
#else
    (void)B, (void)nh, (void)nkv, (void)hd, (void)blocks, (void)topk, (void)kv_dtype, (void)mode;
    return 0;
#endif
}

int m3g_attention_sk_dense_tc(int64_t keys, int nh, int nkv, int hd, int kv_dtype, int mode)
{
#if M3_TC
    return keys >= AD_MIN_KEYS && ad_ok(nh, nkv, hd, kv_dtype, mode);
#else
    (void)keys, (void)nh, (void)nkv, (void)hd, (void)kv_dtype, (void)mode;
    return 0;
#endif
}

int m3g_attention_sk_cluster(int B, int nh, int nkv, int hd, const int32_t *blocks, int topk,
                             int kv_dtype, int mode)
{
    return AK_CLUSTER && mode == 1 && kv_dtype == M3G_BF16 && blocks && topk >= 1 &&
           topk <= 16 && B >= 1 && B <= 128 && hd % 8 == 0 && hd >= 8 && hd <= 128 && nkv > 0 &&
           nh % nkv == 0;
}

hipError_t m3g_attention_sk(float *out, const float *q, const void *kc, const void *vc,
                            int kv_dtype, const int32_t *page_table, int B, int64_t pos0, int T,
                            int nh, int nkv, int hd, const int32_t *blocks, int topk, int mode,
                            void *ws, size_t ws_bytes, hipStream_t st)
{
    return m3g_attention_sk_tuned(out, q, kc, vc, kv_dtype, page_table, B, pos0, T, nh, nkv, hd,
                                  blocks, topk, mode, ws, ws_bytes, 0, st);
}

hipError_t m3g_attention_sk_tuned(float *out, const float *q, const void *kc, const void *vc,
                                  int kv_dtype, const int32_t *page_table, int B, int64_t pos0,
                                  int T, int nh, int nkv, int hd, const int32_t *blocks, int topk,
                                  int mode, void *ws, size_t ws_bytes, int probe,
                                  hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (hd <= 0 || hd > 128 || hd % 8 != 0 || nkv <= 0 || nh % nkv != 0 || B <= 0 ||
        (kv_dtype != M3G_F32 && kv_dtype != M3G_BF16) || (blocks && topk <= 0) ||
        (probe & ~(M3G_SK_TWO_LAUNCH | M3G_SK_DENSE_TC)) != 0)
        return hipErrorInvalidValue;
#if M3_TC
    /* dense with >= AD_MIN_KEYS keys in the last row: the split-key
     * tensor-core launches (M3G_SK_TWO_LAUNCH: never; M3G_SK_DENSE_TC: at
     * any key count) */
    if (!blocks && !(probe & M3G_SK_TWO_LAUNCH) && ad_ok(nh, nkv, hd, kv_dtype, mode) &&
        ((probe & M3G_SK_DENSE_TC) || pos0 + T >= AD_MIN_KEYS)) {
        const hipError_t e = ad_run(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, hd, ws,
                                    ws_bytes, st);
        if (e != hipErrorInvalidValue)
            return e; /* else: the two launches */
    }
#endif
#if AK_CLUSTER
    if (!(probe & M3G_SK_TWO_LAUNCH) &&
        m3g_attention_sk_cluster(B, nh, nkv, hd, blocks, topk, kv_dtype, mode)) {
        if (at_tc_ok(nh, nkv, hd)) { /* tensor cores (default): PDL launch, the next
                                      * kernel released once the partials are sent */
            const hipError_t e =
                at_tc_run(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, hd, blocks, topk, st);
            if (e != hipErrorInvalidValue)
                return e; /* else: the scalar cluster kernel */
        }
        const hipError_t e = ak_cluster_run(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, hd,
                                            blocks, topk, st);
        if (e != hipErrorInvalidValue)
            return e; /* else: no such cluster on this device; the two launches below */
    }
#endif
    (void)probe;
    if (!ws)
        return hipErrorInvalidValue;
    /* rows per launch pair: as many as the workspace holds (at least one) */
    int tc = T;
    for (;;) {
        ak_geom gm;
        ak_geometry(&gm, B, pos0, T, tc, nh, nkv, hd, blocks, topk, kv_dtype == M3G_BF16);
        if (gm.total <= ws_bytes)
            break;
        if (tc == 1)
            return hipErrorInvalidValue;
        const int nt = (int)((double)tc * (double)ws_bytes / (double)gm.total);
        tc = nt < tc ? (nt > 0 ? nt : 1) : tc - 1;
    }
    const int v = (kv_dtype == M3G_BF16 ? 2 : 0) + (mode == 1 ? 1 : 0);
    char *w = (char *)ws;
    switch (v) {
    case 0:
        return ak_run<0>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, hd, blocks, topk, mode, w, tc, st);
    case 1:
        return ak_run<1>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, hd, blocks, topk, mode, w, tc, st);
    case 2:
        return ak_run<2>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, hd, blocks, topk, mode, w, tc, st);
    default:
        return ak_run<3>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, hd, blocks, topk, mode, w, tc, st);
    }
}
