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
 * Decode paths (later in this file), H200, bench-gpu "msa decode" (64 q / 4
 * kv heads, hd 128, 16 x 128 keys, bf16 mode, median of 20 graph replays,
 * cold-cache rotations; session of 2026-11-29, second run):
 *   m3g_attention_split  3 launches, fp32 cache          21.71 us
 *   m3g_attention_sk     2 launches, fp32 cache          23.17 us
 *   m3g_attention_sk     2 launches, bf16 cache          18.93 us
 *   m3g_attention_sk     1 cluster launch, bf16 cache    15.44 us (default)
 * (this per-row kernel: 928 us, docs/performance.md). Issue 8 target
 * <= 10 us: NOT met. Estimate (not measured): the FMAs (34 M) and bytes
 * (4.2 MB) need ~1-2 us; two launches -> one saved 3.5 us and halving the
 * cache bytes (fp32 -> bf16, same kernels) saved 4.2 us, so the rest is
 * presumably latency (dependent global round trips, cluster barriers,
 * launch and drain), not profiled per kernel yet (next: Nsight Compute on
 * the single launch; PDL; tensor cores for QK^T and P.V; fewer dependent
 * steps before the first K byte arrives).
 *
 * Tuning next (prefill): Q tiles of 64 rows with mma.sync / wgmma instead of
 * per-row blocks (msa_attention.cu has the MSA prefill kernel).
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
 * more than 16 selected blocks); issue 8 target: <= 10 us per layer at
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

/* ---- one-launch cluster path (NVIDIA sm_90; m3g_attention_sk's decode path
 * for bf16 caches in bf16 mode with a block list of <= 16 entries, B <= 128).
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

__device__ __forceinline__ void ak_cp16(void *s, const void *g)
{
    const unsigned a = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g));
}

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
        ak_cp16(Ks + kk * ksr + 8 * cc, kc + (size_t)(row0 + kk) * kvw + (size_t)g * hd + 8 * cc);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    for (int e = tid; e < nk * n16; e += blockDim.x) {
        const int kk = e / n16, cc = e - kk * n16;
        ak_cp16(Vs + kk * hd + 8 * cc, vc + (size_t)(row0 + kk) * kvw + (size_t)g * hd + 8 * cc);
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
#else
#define AK_CLUSTER 0
#endif

size_t m3g_attention_sk_ws(int B, int64_t pos0, int T, int nh, int nkv, int hd,
                           const int32_t *blocks, int topk, int kv_dtype)
{
    ak_geom gm;
    if (T <= 0 || B <= 0 || nkv <= 0 || nh % nkv != 0 || (kv_dtype != M3G_F32 && kv_dtype != M3G_BF16))
        return 0;
    ak_geometry(&gm, B, pos0, T, T, nh, nkv, hd, blocks, topk, kv_dtype == M3G_BF16);
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
                                  int mode, void *ws, size_t ws_bytes, int variant,
                                  hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (hd <= 0 || hd > 128 || hd % 8 != 0 || nkv <= 0 || nh % nkv != 0 || B <= 0 ||
        (kv_dtype != M3G_F32 && kv_dtype != M3G_BF16) || (blocks && topk <= 0))
        return hipErrorInvalidValue;
#if AK_CLUSTER
    if (!(variant & 1) && m3g_attention_sk_cluster(B, nh, nkv, hd, blocks, topk, kv_dtype, mode)) {
        const hipError_t e = ak_cluster_run(out, q, kc, vc, page_table, B, pos0, T, nh, nkv, hd,
                                            blocks, topk, st);
        if (e != hipErrorInvalidValue)
            return e; /* else: no such cluster on this device; the two launches below */
    }
#endif
    (void)variant;
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
