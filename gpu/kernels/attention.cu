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
 * The split-key path at the end of this file (m3g_attention_split) is the
 * decode path: 20.5 us at M3 shapes on the H200 vs 928 us for this kernel
 * (docs/performance.md).
 *
 * Tuning next (decode at M3 shapes: 64 q / 4 kv heads, 16 x 128 keys):
 * smaller splits, the merge fused into the P.V launch; cp.async / TMA
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
