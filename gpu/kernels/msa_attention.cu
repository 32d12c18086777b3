/* msa_attention.cu — MSA block-sparse attention for prefill (many query
 * rows), on tensor cores where the toolchain has them.
 *
 * Must match: ref/attention.c m3_attention_row with a block list.
 * Spec: M3-MSA-ATTN-1/2 (key k visible to group g iff block(k) is selected
 * and k <= pos; at most topk * B keys), M3-ATTN-SCORE-1 (fp32 scores and
 * softmax), M3-NUM-BF16-2 item 5 (p = bf16(exp(s - M) / L) with the row's
 * final max M and sum L; P.V in fp32; output rounded).
 *
 * Design (NVIDIA, bf16, hd in {16, 32, 64, 128}, nh / nkv <= 16, B <= 128,
 * topk <= 32): k_msa_ws, one CTA per (11 consecutive query rows, KV group);
 * the rows' block lists merged into their union and each union block's K
 * and V staged once by a producer warp through a barrier-guarded ring;
 * consumer warp w owns row t0 + w with the group's 16 query heads as M of
 * mma.sync m16n8k16. m3g_msa_attention_prefill: two passes with exact p
 * (pass 1: max and sum; pass 2: S again, p, P.V in 64-key pieces).
 * m3g_msa_attention_prefill_onepass: one pass, online softmax (faster; p
 * rounded on the running max's scale, within the bf16 profile); on compute
 * capability 9.0 at hd 128, block 128 and bf16 caches it is k_msa_wg, a
 * warpgroup kernel (TMA, wgmma; design below).
 * Portable path (hipcc, the emulation, fp32 mode, other shapes): a scalar
 * two-pass kernel, one block per (row, group), one warp per head.
 *
 * Known differences (fp32 rounding only): q.k in tensor-core k-step order,
 * L and P.V in union order, exp as exp2 of an fma, division by L as a
 * multiplication by 1/L; deterministic. Slots the tile cannot see may hold
 * anything; visible slots must be finite. Designs tried: docs/designs-tried.md.
 */
#include <math.h>
#include "common.cuh"
#include "kernels.h"
#include "tc.cuh"
#include "wgmma.cuh"

#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__) && !defined(M3_EMU)
#define M3_MSA_TC 1
#else
#define M3_MSA_TC 0
#endif

#define MSA_KT 128   /* keys per staged tile (= one MSA block, B <= 128) */
#define MSA_MAXK 32  /* topk limit of the tensor-core path (R * topk <= 256 threads) */

/* ---- portable scalar path ------------------------------------------------ */

#define MSA_SKT 32   /* keys per shared tile */
#define MSA_SMAXW 16 /* heads (warps) per block */

__device__ __forceinline__ float msa_kv(const void *p, int bf, size_t i)
{
    return bf ? m3d_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* grid (T, nkv, nz), block 32 * nw; shared q [nw][hd], K [SKT][hd+1], V [SKT][hd]. */
__global__ void k_msa_scalar(float *out, const float *q, const void *kc, const void *vc, int kvbf,
                             const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                             int nkv, int hd, const int32_t *blocks, int topk, float scale,
                             int mode)
{
    M3_DYN_SHARED(float, smem);
    const int t = blockIdx.x, g = blockIdx.y;
    const int hpg = nh / nkv;
    const int nw = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int hl = (int)blockIdx.z * MSA_SMAXW + w, h = g * hpg + hl, active = hl < hpg;
    const int64_t pos = pos0 + t;
    const int ks = hd + 1;
    float *qs = smem;             /* [nw][hd] */
    float *Ks = qs + nw * hd;     /* [SKT][hd + 1] */
    float *Vs = Ks + MSA_SKT * ks; /* [SKT][hd] */
    const size_t kvw = (size_t)nkv * hd;
    const int qb = (int)(pos / B);
    const int32_t *list = blocks + ((size_t)g * T + t) * topk;

    if (active)
        for (int d = lane; d < hd; d += 32)
            qs[w * hd + d] = q[((size_t)t * nh + h) * hd + d];

    float M = -INFINITY, L = 0.0f;
    float acc[128 / 32];
    for (int i = 0; i < 128 / 32; i++)
        acc[i] = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        for (int li = 0; li < topk; li++) {
            const int b = list[li];
            int dup = 0; /* the list is a set: a repeated id counts once */
            for (int lj = 0; lj < li; lj++)
                dup |= list[lj] == b;
            if (b < 0 || b > qb || dup)
                continue; /* uniform across the block */
            const int64_t k0 = (int64_t)b * B;
            const int64_t kend = (k0 + B < pos + 1) ? k0 + B : pos + 1;
            const int64_t page0 = (int64_t)page_table[b] * B;
            for (int64_t c0 = k0; c0 < kend; c0 += MSA_SKT) {
                const int nk = (int)((kend - c0) < MSA_SKT ? (kend - c0) : MSA_SKT);
                __syncthreads();
                for (int e = threadIdx.x; e < nk * hd; e += blockDim.x) {
                    const int kk = e / hd, d = e % hd;
                    const size_t row = (size_t)(page0 + (c0 - k0) + kk) * kvw + (size_t)g * hd;
                    Ks[kk * ks + d] = msa_kv(kc, kvbf, row + d);
                    if (pass == 1)
                        Vs[kk * hd + d] = msa_kv(vc, kvbf, row + d);
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
                    const float mn = fmaxf(M, m3d_warp_max(s));
                    const float e = lane < nk ? expf(s - mn) : 0.0f;
                    const float st = m3d_warp_sum(e);
                    L = (M == -INFINITY ? 0.0f : L * expf(M - mn)) + st;
                    M = mn;
                } else {
                    const float p = lane < nk ? m3d_round(expf(s - M) / L, mode) : 0.0f;
                    for (int j = 0; j < nk; j++) {
                        const float pj = m3_shfl(p, j);
                        for (int i = 0; i < 128 / 32; i++)
                            if (lane + 32 * i < hd)
                                acc[i] += pj * Vs[j * hd + lane + 32 * i];
                    }
                }
            }
        }
    }
    if (!active)
        return;
    for (int i = 0; i < 128 / 32; i++)
        if (lane + 32 * i < hd)
            out[((size_t)t * nh + h) * hd + lane + 32 * i] = m3d_round(acc[i], mode);
}

/* ---- tensor-core path (NVIDIA) -------------------------------------------- */
#if M3_MSA_TC

/* cp.async, ldmatrix, mma.sync and bf16x2 packing: m3t_* of tc.cuh */


/* S[16 heads][128 keys] = Q K^T for this warp's row: s[n][e] is key
 * 8n + 2(lane%4) + (e&1), head lane/4 + 8(e>>1). */
/* Causal mask of one staged MSA block b (its MSA_KT key slots from b * B)
 * in the mma accumulator layout s[16][4] (16 heads x 128 keys of a warp):
 * keys after position pos, and slots >= B, set to -inf. */
__device__ __forceinline__ void msa_mask_keys(float s[16][4], int b, int64_t pos, int B, int lane)
{
    const int64_t k0 = (int64_t)b * B;
    const int lim = (int)((pos - k0 + 1) < B ? (pos - k0 + 1) : B); /* visible keys, >= 1 */
    if (lim < MSA_KT) {
#pragma unroll
        for (int nn = 0; nn < 16; nn++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (8 * nn + 2 * (lane & 3) + (e & 1) >= lim)
                    s[nn][e] = -INFINITY;
    }
}


__device__ __forceinline__ float msa_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* A row's accumulation done: l0, l1 summed over the lanes of the row's
 * quad, il = 1 / l (0 when l is 0). */
__device__ __forceinline__ void msa_row_inverse(float &l0, float &l1, float &il0, float &il1)
{
    m3t_row_sum(l0, l1);
    il0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
    il1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
}

/* Pass 1 of a two-pass kernel done: msa_row_inverse, and m = 0 for a head
 * that saw no key, so that pass 2's 2^(s c2 - m) stays defined. */
__device__ __forceinline__ void msa_pass1_done(float &m0, float &m1, float &l0, float &l1,
                                               float &il0, float &il1)
{
    msa_row_inverse(l0, l1, il0, il1);
    if (m0 == -INFINITY)
        m0 = 0.0f;
    if (m1 == -INFINITY)
        m1 = 0.0f;
}

/* Pass 1's running statistics of the two-pass kernels for one staged block
 * (s: S of the warp's 16 heads x 128 keys, keys it may not see -inf): per
 * head (lane/4, lane/4 + 8), n = max(m, (max s) c2) and, when n is finite,
 * l = l 2^(m - n) + the sum over nn ascending of 2^(s c2 - n) (l = 0 while m
 * = -inf), m = n. APPROX: exp2 as ex2.approx.ftz, else exp2f. */
template <bool APPROX>
__device__ __forceinline__ float msa_exp2(float x)
{
    return APPROX ? msa_ex2(x) : exp2f(x);
}
/* One head's half of msa_pass1_stats: scores sc[nn][c], sc[nn][c + 1], new max n. */
template <bool APPROX, int C>
__device__ __forceinline__ void msa_pass1_head(const float sc[16][4], float c2, float n, float &m,
                                               float &l)
{
    if (n > -INFINITY) {
        float e = 0.0f;
#pragma unroll
        for (int nn = 0; nn < 16; nn++)
            e += msa_exp2<APPROX>(__fmaf_rn(sc[nn][C], c2, -n)) +
                 msa_exp2<APPROX>(__fmaf_rn(sc[nn][C + 1], c2, -n));
        l = (m == -INFINITY ? 0.0f : l * msa_exp2<APPROX>(m - n)) + e;
        m = n;
    }
}
template <bool APPROX>
__device__ __forceinline__ void msa_pass1_stats(const float sc[16][4], float c2, float &m0,
                                                float &m1, float &l0, float &l1)
{
    float x0, x1;
    m3t_row_max<16>(sc, x0, x1);
    /* c2 > 0: max of acc * c2 = (max acc) * c2 */
    const float n0 = fmaxf(m0, x0 * c2), n1 = fmaxf(m1, x1 * c2);
    msa_pass1_head<APPROX, 0>(sc, c2, n0, m0, l0);
    msa_pass1_head<APPROX, 2>(sc, c2, n1, m1, l1);
}

/* ---- warp-specialized tensor-core kernels (NVIDIA; the default) -----------
 * k_msa_ws<HD, KVBF, ONLINE, RR, PRO>: RR query rows per CTA and no
 * CTA-wide barrier per step: warp RR (the producer) streams the union
 * blocks' K and V through a ring of MSA_NS slots of one 128-row K or V block
 * each (cp.async, zero-fill, completion signalled on a per-slot "full"
 * mbarrier with cp.async.mbarrier.arrive.noinc); the RR consumer warps (one
 * query row each) wait on a slot's "full" barrier, use it only if their row
 * selected that block, and release it on the slot's "empty" barrier (RR
 * arrivals: every consumer passes every slot, so the barrier phases stay
 * aligned with the slot-use counter and a warp runs at most MSA_NS slot uses
 * ahead of the slowest). exp2 is ex2.approx.ftz (an exp(s - M) below 2^-126
 * flushes to 0 instead of a denormal).
 *  ONLINE 2 (one pass, m3g_msa_attention_prefill_onepass): K then V of each
 *   union block once, each block handled as two 64-key pieces; the Q K^T of
 *   piece i + 1 is issued interleaved with the P V of piece i (msa_fused),
 *   so a warp's own softmax does not leave the tensor pipe idle; a piece's
 *   P V is owed until the next piece (its V slot released then); before a
 *   block the row did not select, the owed P V is settled, so a warp never
 *   holds a slot across a skip (no ring deadlock: at most 2 slots held + 1
 *   awaited < MSA_NS).
 *  ONLINE 3 (two passes, exact p, m3g_msa_attention_prefill): the producer
 *   streams K of every union block (pass 1: max and sum), then K and V;
 *   pass 2 is ONLINE 2's piece pipeline without the running max (p =
 *   bf16(2^(s c2 - m) * (1 / L)) with pass 1's final m, L: msa_exact_half).
 * PRO bit 0 (the exact kernel): the union computed by rows (no division, no
 *   branch per candidate pair) and each consumer's Q row requested before it
 *   (registers, stored as bf16 after the last CTA barrier); the same union
 *   as PRO 0 (first-seen order), so the same results.
 * RR <= 11: 12 warps = 3 per SM sub-partition, whose 16,384 registers allow
 * 168 per thread (a 13th warp would cap it at 128 and spill); 11 rows also
 * fill the shared memory (5 slots + Q of 11 rows + barriers and lists, hd
 * 128: 226,300 of the 232,448 bytes a block may use). */
#define MSA_NS 5 /* ring slots (one K or V block of 128 rows each) */

__device__ __forceinline__ void msa_bar_init(uint64_t *b, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(m3t_smem(b)), "r"(count)
                 : "memory");
}
__device__ __forceinline__ void msa_bar_arrive(uint64_t *b)
{
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(
                     m3t_smem(b))
                 : "memory");
}
/* arrives on b once every cp.async this thread issued before has completed */
__device__ __forceinline__ void msa_bar_cp_arrive(uint64_t *b)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(m3t_smem(b))
                 : "memory");
}
/* wait until the phase of parity `par` of b has completed */
__device__ __forceinline__ void msa_bar_wait(uint64_t *b, uint32_t par)
{
    uint32_t ok = 0;
    const uint32_t a = m3t_smem(b);
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok)
                     : "r"(a), "r"(par)
                     : "memory");
    } while (!ok);
}
/* msa_qk with the Q fragments read from shared memory (Qw: 16 rows x HD at
 * stride HD + 8) at each k-step instead of held in registers. */
template <int HD>
__device__ __forceinline__ void msa_qk_s(float s[16][4], const uint16_t *Qw, const uint16_t *Ks,
                                         int lane)
{
    constexpr int LD = HD + 8;
#pragma unroll
    for (int n = 0; n < 16; n++)
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t qa[4];
        m3t_ldsm4(qa, Qw + (r8 + 8 * (mi & 1)) * LD + kk * 16 + 8 * (mi >> 1));
#pragma unroll
        for (int np = 0; np < 8; np++) {
            m3t_qk16(s[2 * np], s[2 * np + 1], qa, Ks, LD, np, kk, lane);
        }
    }
}

/* Half-block pieces of the pipelined one-pass kernel (ONLINE 2; 64 keys per
 * piece). msa_fused: s[16 heads][64 keys] = Q K^T for keys 64 hk .. 64 hk + 63
 * of the K slot Ks and, when PV, o += P V of the previous piece (pa: its 4
 * k-steps of bf16 p, A operand; keys 64 hv .. of the V slot Vs), the two
 * independent mma streams interleaved k-step by k-step so that one warp
 * keeps the tensor pipe fed across its own softmax dependencies. */
template <int HD, bool PV>
__device__ __forceinline__ void msa_fused(float s[8][4], const uint16_t *Qw, const uint16_t *Ks,
                                          int hk, float o[HD / 8][4], const uint32_t pa[4][4],
                                          const uint16_t *Vs, int hv, int lane)
{
    constexpr int LD = HD + 8, NQ = HD / 16;
#pragma unroll
    for (int n = 0; n < 8; n++)
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    const int mi = lane >> 3, r8 = lane & 7;
    const uint16_t *Kh = Ks + 64 * hk * LD, *Vh = Vs + 64 * hv * LD;
#pragma unroll
    for (int i = 0; i < NQ; i++) {
        uint32_t qa[4];
        m3t_ldsm4(qa, Qw + (r8 + 8 * (mi & 1)) * LD + i * 16 + 8 * (mi >> 1));
#pragma unroll
        for (int np = 0; np < 4; np++) {
            m3t_qk16(s[2 * np], s[2 * np + 1], qa, Kh, LD, np, i, lane);
        }
        if (PV) { /* 4 of the 4 * NQ (k-step, column pair) units of P V */
#pragma unroll
            for (int j = 4 * i; j < 4 * i + 4; j++) {
                const int kv = j / NQ, np = j % NQ;
                m3t_pv16(o[2 * np], o[2 * np + 1], pa[kv], Vh, LD, kv, np, lane);
            }
        }
    }
}

/* o += P V of one 64-key piece alone (the pipeline's drain). */
template <int HD>
__device__ __forceinline__ void msa_pv_half(float o[HD / 8][4], const uint32_t pa[4][4],
                                            const uint16_t *Vs, int hv, int lane)
{
    constexpr int LD = HD + 8;
    const uint16_t *Vh = Vs + 64 * hv * LD;
#pragma unroll
    for (int kv = 0; kv < 4; kv++)
#pragma unroll
        for (int np = 0; np < HD / 16; np++)
            m3t_pv16(o[2 * np], o[2 * np + 1], pa[kv], Vh, LD, kv, np, lane);
}

/* The one-pass kernels' running-max step: with x0, x1 the new keys' row
 * maxima (unscaled), m = max(m, x c2); when either row's m moved in any
 * lane of the warp, o and l are rescaled by 2^(m_old - m_new) (0 for m_old
 * = -inf, whose l and o are 0). */
template <int HD>
__device__ __forceinline__ void msa_new_max(float x0, float x1, float c2, float &m0, float &m1,
                                            float &l0, float &l1, float o[HD / 8][4])
{
    const float n0 = fmaxf(m0, x0 * c2), n1 = fmaxf(m1, x1 * c2);
    if (__any_sync(0xffffffffu, n0 != m0 || n1 != m1)) {
        const float a0 = msa_ex2(m0 - n0), a1 = msa_ex2(m1 - n1); /* m = -inf: 0 */
        l0 *= a0;
        l1 *= a1;
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
            o[i][0] *= a0;
            o[i][1] *= a0;
            o[i][2] *= a1;
            o[i][3] *= a1;
        }
    }
    m0 = n0;
    m1 = n1;
}

/* Online-softmax step for one 64-key piece s (keys >= lim already -inf):
 * new running max (x c2), rescale of o and l when it moved, l += sum of
 * p = 2^(s c2 - m), pa = bf16(p) as the A operand of the next P V. */
template <int HD>
__device__ __forceinline__ void msa_soft_half(const float s[8][4], uint32_t pa[4][4], float &m0,
                                              float &m1, float &l0, float &l1,
                                              float o[HD / 8][4], float c2)
{
    float x0, x1;
    m3t_row_max<8>(s, x0, x1);
    msa_new_max<HD>(x0, x1, c2, m0, m1, l0, l1, o);
#pragma unroll
    for (int kv = 0; kv < 4; kv++) {
        const float p00 = msa_ex2(__fmaf_rn(s[2 * kv][0], c2, -m0));
        const float p01 = msa_ex2(__fmaf_rn(s[2 * kv][1], c2, -m0));
        const float p10 = msa_ex2(__fmaf_rn(s[2 * kv][2], c2, -m1));
        const float p11 = msa_ex2(__fmaf_rn(s[2 * kv][3], c2, -m1));
        const float p20 = msa_ex2(__fmaf_rn(s[2 * kv + 1][0], c2, -m0));
        const float p21 = msa_ex2(__fmaf_rn(s[2 * kv + 1][1], c2, -m0));
        const float p30 = msa_ex2(__fmaf_rn(s[2 * kv + 1][2], c2, -m1));
        const float p31 = msa_ex2(__fmaf_rn(s[2 * kv + 1][3], c2, -m1));
        l0 += (p00 + p01) + (p20 + p21);
        l1 += (p10 + p11) + (p30 + p31);
        pa[kv][0] = m3t_pack_bf16(p00, p01);
        pa[kv][1] = m3t_pack_bf16(p10, p11);
        pa[kv][2] = m3t_pack_bf16(p20, p21);
        pa[kv][3] = m3t_pack_bf16(p30, p31);
    }
}

/* One 128-row K or V block of group g into a ring slot by one warp: rows
 * j >= B or past kmax are zero-filled. Lane l copies 16-byte chunk l % CH
 * of rows l / CH, l / CH + 32 / CH, ... (two 256-byte rows per instruction
 * at HD = 128). */
template <int HD, int KVBF>
__device__ __forceinline__ void msa_stage1(uint16_t *dst, const void *src_c, int64_t rowbase,
                                           int64_t k0, int64_t kmax, int B, size_t kvw, int g,
                                           int lane)
{
    constexpr int LD = HD + 8, CH = HD / 8, RPI = 32 / CH;
    const int c = lane % CH, j0 = lane / CH;
    const int jlim = (int)(kmax - k0 + 1 < (int64_t)B ? kmax - k0 + 1 : (int64_t)B);
    const size_t base = (size_t)rowbase * kvw + (size_t)g * HD + 8 * c;
    uint16_t *d = dst + j0 * LD + 8 * c;
    if (KVBF) {
        const uint16_t *s0 = (const uint16_t *)src_c + base, *sp = s0 + (size_t)j0 * kvw;
#pragma unroll 8
        for (int j = j0; j < MSA_KT; j += RPI, sp += RPI * kvw, d += RPI * LD)
            m3t_cp16(d, j < jlim ? sp : s0, j < jlim ? 16 : 0);
    } else { /* fp32 cache holding bf16 values (bf16 mode): exact conversion */
        const float *sp = (const float *)src_c + base + (size_t)j0 * kvw;
        for (int j = j0; j < MSA_KT; j += RPI, sp += RPI * kvw, d += RPI * LD) {
            uint4 z = make_uint4(0, 0, 0, 0);
            if (j < jlim) {
                const float4 x = ((const float4 *)sp)[0], y = ((const float4 *)sp)[1];
                z = make_uint4(m3t_pack_bf16(x.x, x.y), m3t_pack_bf16(x.z, x.w),
                               m3t_pack_bf16(y.x, y.y), m3t_pack_bf16(y.z, y.w));
            }
            *(uint4 *)d = z;
        }
    }
}

/* Exact p of a 64-key piece (pass 2 of the pipelined two-pass kernel,
 * ONLINE 3): pa = bf16(2^(s c2 - m) * (1 / L)) with the row's final m and
 * 1 / L, the formula of the two-pass loop, in the A layout msa_soft_half
 * produces (keys >= lim already -inf: p = 0). */
__device__ __forceinline__ void msa_exact_half(const float s[8][4], uint32_t pa[4][4], float m0,
                                               float m1, float il0, float il1, float c2)
{
#pragma unroll
    for (int kv = 0; kv < 4; kv++) {
        pa[kv][0] = m3t_pack_bf16(msa_ex2(__fmaf_rn(s[2 * kv][0], c2, -m0)) * il0,
                                  msa_ex2(__fmaf_rn(s[2 * kv][1], c2, -m0)) * il0);
        pa[kv][1] = m3t_pack_bf16(msa_ex2(__fmaf_rn(s[2 * kv][2], c2, -m1)) * il1,
                                  msa_ex2(__fmaf_rn(s[2 * kv][3], c2, -m1)) * il1);
        pa[kv][2] = m3t_pack_bf16(msa_ex2(__fmaf_rn(s[2 * kv + 1][0], c2, -m0)) * il0,
                                  msa_ex2(__fmaf_rn(s[2 * kv + 1][1], c2, -m0)) * il0);
        pa[kv][3] = m3t_pack_bf16(msa_ex2(__fmaf_rn(s[2 * kv + 1][2], c2, -m1)) * il1,
                                  msa_ex2(__fmaf_rn(s[2 * kv + 1][3], c2, -m1)) * il1);
    }
}

/* grid (ceil(T / RR), nkv), block (RR + 1) * 32: RR consumer warps (query
 * rows) and the producer; RR <= 11 (at most 3 warps per SM sub-partition,
 * so ptxas may use 168 registers per thread). */
/* One K slot of k_msa_ws's ring (position c, then c + 1): wait for it, S of
 * union block ulist[u] for the warp's 16 heads with the causal mask when the
 * row chose the block (sel; sc untouched otherwise), then release the slot
 * (S is in registers). */
template <int HD>
__device__ __forceinline__ void msa_score_slot(float sc[16][4], int sel, const int *ulist, int u,
                                               int &c,
                                               uint64_t *full, uint64_t *empty, const uint16_t *S0,
                                               const uint16_t *Qw, int64_t pos, int B, int lane)
{
    constexpr int LD = HD + 8, SLOT = MSA_KT * LD;
    const int ks = c % MSA_NS;
    msa_bar_wait(&full[ks], (uint32_t)((c / MSA_NS) & 1));
    if (sel) {
        const int b = ulist[u];
        msa_qk_s<HD>(sc, Qw, S0 + ks * SLOT, lane);
        msa_mask_keys(sc, b, pos, B, lane);
    }
    __syncwarp();
    if (lane == 0)
        msa_bar_arrive(&empty[ks]);
    c++;
}

/* The 64-key piece pipeline of k_msa_ws, shared by ONLINE 2 (one pass) and
 * ONLINE 3's second pass: over the nU union blocks, starting at ring
 * position c, Q K^T of piece i + 1 on the tensor cores interleaved with P V
 * of piece i. EXACT 0: p by the online update of the running (m, l) per
 * head; EXACT 1: p exactly from the rows' final max and 1 / L (m0, m1, il0,
 * il1; ref's rounding). A row that did not choose a block releases its
 * slots; the last owed P V is settled before returning. */
template <int HD, int EXACT>
__device__ __forceinline__ void msa_piece_pipe(float o[HD / 8][4], float &m0, float &m1, float &l0,
                                               float &l1, float il0, float il1, int c, int nU,
                                               const int *ulist, const int *umask, uint64_t *full,
                                               uint64_t *empty, const uint16_t *S0,
                                               const uint16_t *Qw, int64_t pos, int B, int t,
                                               int T, int w, int lane, float c2)
{
    constexpr int LD = HD + 8, SLOT = MSA_KT * LD;
    int pend = 0, pv_slot = 0; /* pend: P V of the last piece (its V slot) owed */
    uint32_t pa[4][4];
    for (int u = 0; u < nU; u++) {
        const int sel = t < T && ((umask[u] >> w) & 1); /* warp-uniform */
        const int ks = c % MSA_NS, vs = (c + 1) % MSA_NS;
        msa_bar_wait(&full[ks], (uint32_t)((c / MSA_NS) & 1));
        if (!sel) { /* settle what is owed first, so no slot is held across a skip */
            if (pend) {
                msa_pv_half<HD>(o, pa, S0 + pv_slot * SLOT, 1, lane);
                __syncwarp();
                if (lane == 0)
                    msa_bar_arrive(&empty[pv_slot]);
                pend = 0;
            }
            __syncwarp();
            if (lane == 0)
                msa_bar_arrive(&empty[ks]);
            msa_bar_wait(&full[vs], (uint32_t)(((c + 1) / MSA_NS) & 1));
            __syncwarp();
            if (lane == 0)
                msa_bar_arrive(&empty[vs]);
            c += 2;
            continue;
        }
        const int64_t k0 = (int64_t)ulist[u] * B;
        const int lim = (int)((pos - k0 + 1) < B ? (pos - k0 + 1) : B); /* >= 1 */
        for (int hk = 0; hk < 2; hk++) {
            float sc[8][4];
            if (hk == 1) /* P V of piece 0 of this block needs its V */
                msa_bar_wait(&full[vs], (uint32_t)(((c + 1) / MSA_NS) & 1));
            if (pend) /* hk 0: the previous block's piece 1; hk 1: this block's piece 0 */
                msa_fused<HD, true>(sc, Qw, S0 + ks * SLOT, hk, o, pa, S0 + pv_slot * SLOT,
                                    1 - hk, lane);
            else
                msa_fused<HD, false>(sc, Qw, S0 + ks * SLOT, hk, o, pa, S0 + ks * SLOT, 0,
                                     lane);
            if (hk == 0 && pend) { /* the previous block's V slot is done */
                __syncwarp();
                if (lane == 0)
                    msa_bar_arrive(&empty[pv_slot]);
            }
            if (hk == 1) { /* this block's K slot is done */
                __syncwarp();
                if (lane == 0)
                    msa_bar_arrive(&empty[ks]);
            }
            if (lim < 64 * (hk + 1)) {
#pragma unroll
                for (int nn = 0; nn < 8; nn++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (64 * hk + 8 * nn + 2 * (lane & 3) + (e & 1) >= lim)
                            sc[nn][e] = -INFINITY;
            }
            if (EXACT)
                msa_exact_half(sc, pa, m0, m1, il0, il1, c2);
            else
                msa_soft_half<HD>(sc, pa, m0, m1, l0, l1, o, c2);
            pend = 1;
            pv_slot = vs;
        }
        c += 2;
    }
    if (pend) {
        msa_pv_half<HD>(o, pa, S0 + pv_slot * SLOT, 1, lane);
        __syncwarp();
        if (lane == 0)
            msa_bar_arrive(&empty[pv_slot]);
    }
}

template <int HD, int KVBF, int ONLINE, int RR, int PRO>
__global__ void __launch_bounds__((RR + 1) * 32, 1)
    k_msa_ws(float *out, const float *q, const void *kc, const void *vc,
             const int32_t *page_table, int B, int64_t pos0, int T, int nh, int nkv,
             const int32_t *blocks, int topk, float c2)
{
    constexpr int LD = HD + 8, SLOT = MSA_KT * LD;
    extern __shared__ __align__(16) unsigned char msa_sm[];
    uint16_t *S0 = (uint16_t *)msa_sm;                      /* [MSA_NS][128][LD] */
    uint16_t *Qs = S0 + MSA_NS * SLOT;                      /* [R * 16][LD] */
    uint64_t *full = (uint64_t *)(Qs + RR * 16 * LD);    /* [MSA_NS] */
    uint64_t *empty = full + MSA_NS;                        /* [MSA_NS] */
    int *cand = (int *)(empty + MSA_NS);                    /* [R * topk] */
    int *ulist = cand + RR * MSA_MAXK;                   /* union block ids */
    int *umask = ulist + RR * MSA_MAXK;                  /* rows that chose each */
    int *wcnt = umask + RR * MSA_MAXK;                   /* [R] */

    static_assert(ONLINE == 2 || ONLINE == 3, "ONLINE 2 (one pass) or 3 (two passes)");
    constexpr bool TWO = ONLINE == 3;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int g = blockIdx.y, hpg = nh / nkv;
    const int t0 = blockIdx.x * RR;
    const int nrows = T - t0 < RR ? T - t0 : RR;
    const int64_t kmax = pos0 + t0 + nrows - 1; /* last position of the tile */
    const size_t kvw = (size_t)nkv * HD;

    if (tid == 0) {
        for (int i = 0; i < MSA_NS; i++) {
            msa_bar_init(&full[i], 32);     /* the producer's 32 lanes */
            msa_bar_init(&empty[i], RR); /* one arrival per consumer warp */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    /* PRO & 1: each consumer warp requests its Q row now (registers), so the
     * loads overlap the union below; converted after the last CTA barrier */
    constexpr int QV = (PRO & 1) ? HD / 8 : 1; /* float4 per lane: 16 heads x HD / 4 / 32 */
    float4 qv[QV];
    if (PRO & 1) {
        const int t = t0 + w;
#pragma unroll
        for (int i = 0; i < QV; i++) {
            const int e = lane + 32 * i, hh = e / (HD / 4), d4 = e % (HD / 4);
            qv[i] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (w < RR && t < T && hh < hpg)
                qv[i] = ((const float4 *)(q + ((size_t)t * nh + (size_t)g * hpg + hh) * HD))[d4];
        }
    }
    /* candidate blocks of the tile's rows; union with row masks */
    const int n = RR * topk;
    if (tid < n) {
        const int r = tid / topk, tr = t0 + r;
        int b = -1;
        if (tr < T) {
            b = blocks[((size_t)g * T + tr) * topk + tid % topk];
            if (b > (int)((pos0 + tr) / B))
                b = -1;
        }
        cand[tid] = b < 0 ? -1 : b;
    }
    __syncthreads();
    int dup = 0, mask = 0;
    const int b_me = tid < n ? cand[tid] : -1;
    if (PRO & 1) { /* the same dup and mask, by rows: no division, no branch per entry
                    * (the loop with j / topk per match: ~13% of the warp samples) */
        if (b_me >= 0)
            for (int r = 0, j0 = 0; r < RR; r++, j0 += topk) {
                int hit = 0;
#pragma unroll 4
                for (int e = 0; e < topk; e++) {
                    const int same = cand[j0 + e] == b_me;
                    hit |= same;
                    dup |= same & (j0 + e < tid);
                }
                mask |= hit << r;
            }
    } else if (b_me >= 0)
        for (int j = 0; j < n; j++)
            if (cand[j] == b_me) {
                dup |= j < tid;
                mask |= 1 << (j / topk);
            }
    const int first = b_me >= 0 && !dup;
    const unsigned bal = __ballot_sync(0xffffffffu, first);
    if (lane == 0 && w < RR)
        wcnt[w] = __popc(bal);
    __syncthreads();
    int off = 0, nU = 0;
    for (int i = 0; i < RR; i++) {
        off += i < w ? wcnt[i] : 0;
        nU += wcnt[i];
    }
    if (first) {
        const int k = off + __popc(bal & ((1u << lane) - 1u));
        ulist[k] = b_me;
        umask[k] = mask;
    }
    __syncthreads(); /* the last CTA-wide barrier */
    /* two passes: K of each union block, then K and V; online: K and V once */
    const int nsteps = TWO ? 2 * nU : nU;

    if (w == RR) { /* producer warp */
        int c = 0;    /* slot-use counter */
        for (int s = 0; s < nsteps; s++) {
            const int u = s < nU ? s : s - nU, b = ulist[u];
            const int64_t rowbase = (int64_t)page_table[b] * B, k0 = (int64_t)b * B;
            for (int part = 0; part < 1 + (!TWO || s >= nU); part++, c++) {
                const int sl = c % MSA_NS;
                if (c >= MSA_NS)
                    msa_bar_wait(&empty[sl], (uint32_t)((c / MSA_NS - 1) & 1));
                msa_stage1<HD, KVBF>(S0 + sl * SLOT, part ? vc : kc, rowbase, k0, kmax, B, kvw, g,
                                     lane);
                if (KVBF)
                    msa_bar_cp_arrive(&full[sl]);
                else
                    msa_bar_arrive(&full[sl]);
            }
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        return;
    }

    /* consumer warp w: query row t */
    const int t = t0 + w;
    const int64_t pos = pos0 + t;
    const int h0 = lane >> 2;
    uint16_t *Qw = Qs + w * 16 * LD; /* this warp's 16 heads x HD, bf16 */
    if (PRO & 1) {
#pragma unroll
        for (int i = 0; i < QV; i++) {
            const int e = lane + 32 * i, hh = e / (HD / 4), d4 = e % (HD / 4);
            *(uint2 *)(Qw + hh * LD + 4 * d4) = make_uint2(m3t_pack_bf16(qv[i].x, qv[i].y),
                                                           m3t_pack_bf16(qv[i].z, qv[i].w));
        }
    }
    for (int e = lane; e < (PRO & 1 ? 0 : 16 * HD / 4); e += 32) {
        const int hh = e / (HD / 4), d4 = e % (HD / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (t < T && hh < hpg)
            v = ((const float4 *)(q + ((size_t)t * nh + (size_t)g * hpg + hh) * HD))[d4];
        *(uint2 *)(Qw + hh * LD + 4 * d4) =
            make_uint2(m3t_pack_bf16(v.x, v.y), m3t_pack_bf16(v.z, v.w));
    }
    __syncwarp();
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* heads h0, h0 + 8 (x c2) */
    float il0 = 0.0f, il1 = 0.0f;
    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

    if (ONLINE == 2) { /* one pass: 64-key pieces, Q K^T of piece i + 1 on the
                        * tensor cores interleaved with P V of piece i */
        msa_piece_pipe<HD, 0>(o, m0, m1, l0, l1, 0.0f, 0.0f, 0, nU, ulist, umask, full, empty, S0,
                              Qw, pos, B, t, T, w, lane, c2);
        msa_row_inverse(l0, l1, il0, il1);
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
            o[i][0] *= il0;
            o[i][1] *= il0;
            o[i][2] *= il1;
            o[i][3] *= il1;
        }
    }
    /* ONLINE 3, pass 1: the max and the sum of each head over the union */
    int c = 0;
    for (int u = 0; u < (ONLINE == 3 ? nU : 0); u++) {
        const int sel = t < T && ((umask[u] >> w) & 1); /* warp-uniform */
        float sc[16][4];
        msa_score_slot<HD>(sc, sel, ulist, u, c, full, empty, S0, Qw, pos, B, lane);
        if (sel)
            msa_pass1_stats<true>(sc, c2, m0, m1, l0, l1);
    }
    if (ONLINE == 3) { /* pass 1 done; pass 2 as ONLINE 2's pipeline (64-key pieces,
                        * Q K^T of piece i + 1 interleaved with P V of piece i) with
                        * exact p */
        msa_pass1_done(m0, m1, l0, l1, il0, il1);
        /* ring positions continue after pass 1's nU */
        msa_piece_pipe<HD, 1>(o, m0, m1, l0, l1, il0, il1, nU, nU, ulist, umask, full, empty, S0,
                              Qw, pos, B, t, T, w, lane, c2);
    }
    if (t >= T)
        return;
#pragma unroll
    for (int nn = 0; nn < HD / 8; nn++) {
        const int d = 8 * nn + 2 * (lane & 3);
        if (h0 < hpg)
            *(float2 *)(out + ((size_t)t * nh + (size_t)g * hpg + h0) * HD + d) =
                make_float2(m3d_round_bf16(o[nn][0]), m3d_round_bf16(o[nn][1]));
        if (h0 + 8 < hpg)
            *(float2 *)(out + ((size_t)t * nh + (size_t)g * hpg + h0 + 8) * HD + d) =
                make_float2(m3d_round_bf16(o[nn][2]), m3d_round_bf16(o[nn][3]));
    }
}

template <int HD, int KVBF, int ONLINE, int RR, int PRO>
static hipError_t msa_ws_launch(float *out, const float *q, const void *kc, const void *vc,
                                const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                                int nkv, const int32_t *blocks, int topk, float c2,
                                hipStream_t st)
{
    constexpr int LD = HD + 8;
    const size_t shm = sizeof(uint16_t) * ((MSA_NS * (size_t)MSA_KT + RR * 16) * LD) +
                       sizeof(uint64_t) * 2 * MSA_NS + sizeof(int) * (3 * RR * MSA_MAXK + RR);
    hipError_t e = cudaFuncSetAttribute(k_msa_ws<HD, KVBF, ONLINE, RR, PRO>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm);
    if (e != hipSuccess)
        return e;
    k_msa_ws<HD, KVBF, ONLINE, RR, PRO><<<dim3((T + RR - 1) / RR, nkv), dim3((RR + 1) * 32), shm,
                                          st>>>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv,
                                                blocks, topk, c2);
    return hipGetLastError();
}

/* ---- warpgroup kernel (sm_90a; the one-pass default on the H200) ---------
 * k_msa_wg<NWG, KM>: one CTA per tile of 4 NWG consecutive query rows of
 * one KV group; hd 128, B 128, bf16 caches. Warpgroup wg owns the tile's
 * rows 4 wg .. 4 wg + 3; its 64 wgmma rows are (query row, head), warp w of
 * the group holding one row's 16 heads, so each warp's softmax statistics
 * are its own row's. The tile's block lists are merged into their union
 * (first seen first; the block holding the tile's last position, whose
 * later slots may hold anything, last), every union block is prefetched
 * into L2, and the producer warp of the last warpgroup streams K and then
 * V of each into a ring of 6 slots (5 for lists of more than 16; 32 KiB
 * each: two TMA boxes of 64 dims x 128 keys, 128-byte swizzle), each slot
 * with a "full" mbarrier completed by the TMA bytes and an "empty" one (an
 * arrival per consumer warp). V of the last block is staged by the
 * producer's own loads with the slots past the tile zeroed (p = 0 there,
 * and 0 x NaN is not 0). Per union block a warpgroup that any of its rows
 * chose computes S = Q K^T (8 wgmma m64n128k16, Q and K from shared
 * memory), then the online softmax per warp (p = 0 for a row that did not
 * choose it) while the P V of the block before runs (8 wgmma, P from
 * registers, V transposed on load); O is rescaled after that P V; a group
 * that chose none of a block only releases its slots. The two warpgroups
 * also overlap each other. setmaxnreg moves registers from the last
 * warpgroup (40) to the consumers (232). */
#define MSA_WG_TILE 32768    /* bytes of one staged 128 x 128 bf16 block */
#define MSA_WG_QT 16384      /* bytes of one warpgroup's Q tile (64 x 128 bf16) */

/* Helpers of k_msa_wg's consumer warpgroups. Slot use c (K of union block
 * u is use 2 u, its V 2 u + 1) lives in ring slot c % NS; its "full" phase
 * has parity (c / NS) & 1. */

/* Wait until use c has landed (the phases stay aligned even where the
 * warp does not read it), then release it: one arrival per warp. */
template <int NS>
__device__ __forceinline__ void msa_wg_pass(uint64_t *full, uint64_t *empty, int c, int lane)
{
    msa_bar_wait(&full[c % NS], (uint32_t)((c / NS) & 1));
    __syncwarp();
    if (lane == 0)
        msa_bar_arrive(&empty[c % NS]);
}
template <int NS> __device__ __forceinline__ void msa_wg_release(uint64_t *empty, int c, int lane)
{
    __syncwarp();
    if (lane == 0)
        msa_bar_arrive(&empty[c % NS]);
}

/* After a wait: S, or O and the P that was its A operand, pinned so that no
 * access to them moves above the wait. */
__device__ __forceinline__ void msa_wg_pin_s(float s[64])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        m3w_pin(s[i]);
}
__device__ __forceinline__ void msa_wg_pin_o(float o[64], uint32_t pa[8][4])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        m3w_pin(o[i]);
#pragma unroll
    for (int kv = 0; kv < 8; kv++)
        for (int e = 0; e < 4; e++)
            m3w_pin(pa[kv][e]);
}

/* Issue S = Q K^T (64 x 128): qd, kd the low descriptor words (m3w_desc_lo)
 * of the Q tile and of the K slot. */
__device__ __forceinline__ void msa_wg_qk(float s[64], uint32_t qd, uint32_t kd)
{
    m3w_fence();
    m3w_mma_ss0(s, m3w_desc(qd, 1024), m3w_desc(kd, 1024));
#pragma unroll
    for (int i = 1; i < 8; i++)
        m3w_mma_ss(s, m3w_desc(qd + (i >> 2) * (MSA_WG_QT / 32) + (i & 3) * 2, 1024),
                   m3w_desc(kd + (i >> 2) * (MSA_WG_TILE / 32) + (i & 3) * 2, 1024));
    m3w_commit();
}

/* Issue O += P V for the V slot whose low descriptor word is vd (P: 8
 * k-steps of bf16). */
__device__ __forceinline__ void msa_wg_pv(float o[64], const uint32_t pa[8][4], uint32_t vd)
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        m3w_pin(o[i]);
    m3w_fence();
#pragma unroll
    for (int kv = 0; kv < 8; kv++)
        m3w_mma_rs(o, pa[kv], m3w_desc(vd + kv * (2048 / 16), 1024));
    m3w_commit();
}

/* Online softmax of one block's scores s for this warp's row (sel: the row
 * chose the block; lim: its visible keys, >= 1): keys >= lim -inf, the
 * running max and sum per head (m, l on the exp2 scale c2), pa = bf16(p);
 * a0, a1 = the factor O must be scaled by before P V (1 when the max did
 * not move). A row that did not choose the block: pa = 0, a = 1. */
__device__ __forceinline__ void msa_wg_softmax(float s[64], int sel, int lim, int lane, float c2,
                                               float &m0, float &m1, float &l0, float &l1,
                                               uint32_t pa[8][4], float &a0, float &a1)
{
    a0 = a1 = 1.0f;
    if (!sel) {
#pragma unroll
        for (int kv = 0; kv < 8; kv++)
            pa[kv][0] = pa[kv][1] = pa[kv][2] = pa[kv][3] = 0u;
        return;
    }
    if (lim < 128) {
#pragma unroll
        for (int i = 0; i < 64; i++)
            if (8 * (i >> 2) + 2 * (lane & 3) + (i & 1) >= lim)
                s[i] = -INFINITY;
    }
    float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        x0 = fmaxf(x0, fmaxf(s[4 * j], s[4 * j + 1]));
        x1 = fmaxf(x1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    for (int x = 1; x < 4; x <<= 1) {
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, x));
        x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, x));
    }
    const float n0 = fmaxf(m0, x0 * c2), n1 = fmaxf(m1, x1 * c2);
    if (n0 != m0) {
        a0 = msa_ex2(m0 - n0); /* m = -inf: 0 */
        l0 *= a0;
    }
    if (n1 != m1) {
        a1 = msa_ex2(m1 - n1);
        l1 *= a1;
    }
    m0 = n0;
    m1 = n1;
#pragma unroll
    for (int kv = 0; kv < 8; kv++) {
        float p[8];
#pragma unroll
        for (int e = 0; e < 8; e++)
            p[e] = msa_ex2(__fmaf_rn(s[8 * kv + e], c2, (e & 2) ? -m1 : -m0));
        l0 += (p[0] + p[1]) + (p[4] + p[5]);
        l1 += (p[2] + p[3]) + (p[6] + p[7]);
        pa[kv][0] = m3t_pack_bf16(p[0], p[1]);
        pa[kv][1] = m3t_pack_bf16(p[2], p[3]);
        pa[kv][2] = m3t_pack_bf16(p[4], p[5]);
        pa[kv][3] = m3t_pack_bf16(p[6], p[7]);
    }
}

/* o *= (a0 for the row's first head, a1 for its second), skipped when no
 * lane's factor moved. */
__device__ __forceinline__ void msa_wg_rescale(float o[64], float a0, float a1)
{
    if (__any_sync(0xffffffffu, a0 != 1.0f || a1 != 1.0f)) {
#pragma unroll
        for (int j = 0; j < 16; j++) {
            o[4 * j] *= a0;
            o[4 * j + 1] *= a0;
            o[4 * j + 2] *= a1;
            o[4 * j + 3] *= a1;
        }
    }
}

/* Visible keys of union block b for the row at pos (>= 1 where the row
 * chose it). */
__device__ __forceinline__ int msa_wg_lim(int64_t pos, int b)
{
    const int64_t n = pos - (int64_t)b * 128 + 1;
    return (int)(n < 128 ? n : 128);
}

/* One step of a consumer warpgroup: P V of union block u (P in pc), and S
 * and the softmax of the group's next block un (P into pn), returned. S of
 * un overlaps P V of u where the ring holds both (use 2 un at most NS - 1
 * after V of u, 2 u + 1, which the group still holds); otherwise they run
 * in turn. The blocks between, which no row of the group chose, are passed. */
template <int NS>
__device__ __forceinline__ int msa_wg_step(int u, int nU, const int *ulist, const int *umask,
                                           int gsh, int me, uint64_t *full, uint64_t *empty,
                                           uint32_t qd, uint32_t rd, uint32_t vd, int64_t pos,
                                           int lane, float c2, float o[64], float &m0, float &m1,
                                           float &l0, float &l1, uint32_t pc[8][4],
                                           uint32_t pn[8][4])
{
    constexpr uint32_t SL = MSA_WG_TILE / 16; /* one slot in descriptor units */
    int un = u + 1;
    while (un < nU && !((umask[un] >> gsh) & 15))
        un++;
    float s[64], a0 = 1.0f, a1 = 1.0f;
    const int ku = 2 * un, vu = 2 * u + 1; /* slot uses of K of un and V of u */
    if (un < nU && ku <= 2 * u + NS) {
        for (int x = u + 1; x < un; x++) {
            msa_wg_pass<NS>(full, empty, 2 * x, lane);
            msa_wg_pass<NS>(full, empty, 2 * x + 1, lane);
        }
        msa_bar_wait(&full[ku % NS], (uint32_t)((ku / NS) & 1));
        msa_wg_qk(s, qd, rd + (ku % NS) * SL);
        msa_bar_wait(&full[vu % NS], (uint32_t)((vu / NS) & 1));
        msa_wg_pv(o, pc, vd + (vu % NS) * SL);
        m3w_wait<1>(); /* S of un done (groups complete in order); P V of u runs on */
        msa_wg_pin_s(s);
        msa_wg_release<NS>(empty, ku, lane);
        msa_wg_softmax(s, umask[un] & me, msa_wg_lim(pos, ulist[un]), lane, c2, m0, m1, l0, l1,
                       pn, a0, a1);
        m3w_wait<0>();
        msa_wg_pin_o(o, pc);
        msa_wg_release<NS>(empty, vu, lane);
    } else { /* the last block, or the next too far ahead to overlap: in turn */
        msa_bar_wait(&full[vu % NS], (uint32_t)((vu / NS) & 1));
        msa_wg_pv(o, pc, vd + (vu % NS) * SL);
        m3w_wait<0>();
        msa_wg_pin_o(o, pc);
        msa_wg_release<NS>(empty, vu, lane);
        if (un < nU) {
            for (int x = u + 1; x < un; x++) {
                msa_wg_pass<NS>(full, empty, 2 * x, lane);
                msa_wg_pass<NS>(full, empty, 2 * x + 1, lane);
            }
            msa_bar_wait(&full[ku % NS], (uint32_t)((ku / NS) & 1));
            msa_wg_qk(s, qd, rd + (ku % NS) * SL);
            m3w_wait<0>();
            msa_wg_pin_s(s);
            msa_wg_release<NS>(empty, ku, lane);
            msa_wg_softmax(s, umask[un] & me, msa_wg_lim(pos, ulist[un]), lane, c2, m0, m1, l0,
                           l1, pn, a0, a1);
        }
    }
    if (un < nU)
        msa_wg_rescale(o, a0, a1);
    else
        for (int x = u + 1; x < nU; x++) { /* trailing blocks the group did not choose */
            msa_wg_pass<NS>(full, empty, 2 * x, lane);
            msa_wg_pass<NS>(full, empty, 2 * x + 1, lane);
        }
    return un;
}

/* Ring slots: 6 when the lists hold at most 16 blocks (KM 16), else 5 (the
 * shared memory a block may use, 232,448 bytes, holds no more). */
template <int KM> __host__ __device__ static constexpr int msa_wg_ns(void) { return KM <= 16 ? 6 : 5; }
template <int NWG, int KM>
static constexpr size_t msa_wg_smem(void)
{
    return 1024 + (size_t)msa_wg_ns<KM>() * MSA_WG_TILE + (size_t)NWG * MSA_WG_QT +
           sizeof(uint64_t) * 2 * msa_wg_ns<KM>() + sizeof(int) * (3 * 4 * NWG * KM + 16);
}

template <int NWG, int KM>
__global__ void __launch_bounds__((NWG + 1) * 128, 1)
    k_msa_wg(float *out, const float *q, const __grid_constant__ CUtensorMap tmk,
             const __grid_constant__ CUtensorMap tmv, const uint16_t *vc,
             const int32_t *page_table, int64_t pos0, int T, int nh, int nkv,
             const int32_t *blocks, int topk, float c2)
{
#if M3_WG_CODE
    constexpr int R = 4 * NWG, B = 128, HD = 128, NS = msa_wg_ns<KM>();
    extern __shared__ __align__(16) unsigned char msa_wg_sm[];
    unsigned char *sm = msa_wg_sm + ((1024 - (m3t_smem(msa_wg_sm) & 1023)) & 1023);
    unsigned char *ring = sm;                           /* [NS][2][128][128 B] */
    unsigned char *Qs = ring + NS * MSA_WG_TILE;       /* [NWG][2][64][128 B] */
    uint64_t *full = (uint64_t *)(Qs + NWG * MSA_WG_QT); /* [NS] */
    uint64_t *empty = full + NS;                        /* [NS] */
    int *cand = (int *)(empty + NS);                    /* [R * topk] */
    int *ulist = cand + R * KM;                         /* union block ids */
    int *umask = ulist + R * KM;                        /* rows that chose each */
    int *wcnt = umask + R * KM;                         /* per warp */

    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int g = blockIdx.y, hpg = nh / nkv;
    const int t0 = blockIdx.x * R;
    const int nrows = T - t0 < R ? T - t0 : R;
    const int64_t kmax = pos0 + t0 + nrows - 1; /* last position of the tile */
    const size_t kvw = (size_t)nkv * HD;

    if (tid == 0) {
        for (int i = 0; i < NS; i++) {
            msa_bar_init(&full[i], 1);      /* the producer's arrival (+ TMA bytes) */
            msa_bar_init(&empty[i], 4 * NWG); /* one arrival per consumer warp */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    /* a consumer warp's Q row (16 heads x 128, fp32) requested now, so the
     * loads overlap the union below; stored as bf16 after it */
    float4 qv[16];
    {
        const int tq = t0 + w;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            qv[i] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (w < 4 * NWG && tq < T && i < hpg)
                qv[i] = *(const float4 *)(q + ((size_t)tq * nh + (size_t)g * hpg + i) * HD +
                                          4 * lane);
        }
    }
    /* candidate blocks of the tile's rows; their union, first seen first */
    const int n = R * topk;
    if (tid < n) {
        const int r = tid / topk, tr = t0 + r;
        int b = -1;
        if (tr < T) {
            b = blocks[((size_t)g * T + tr) * topk + tid % topk];
            if (b > (int)((pos0 + tr) / B))
                b = -1;
        }
        cand[tid] = b < 0 ? -1 : b;
    }
    __syncthreads();
    /* a candidate's first occurrence, and the rows that chose it (by rows:
     * no division per entry); the block holding kmax, unless kmax is its
     * last slot, goes last */
    const int diag = kmax % B != B - 1 ? (int)(kmax / B) : -1;
    int dup = 0, mask = 0;
    const int b_me = tid < n ? cand[tid] : -1;
    if (b_me >= 0)
        for (int r = 0, j0 = 0; r < R; r++, j0 += topk) {
            int hit = 0;
#pragma unroll 4
            for (int e = 0; e < topk; e++) {
                const int same = cand[j0 + e] == b_me;
                hit |= same;
                dup |= same & (j0 + e < tid);
            }
            mask |= hit << r;
        }
    const int first = b_me >= 0 && !dup && b_me != diag;
    const int fdiag = b_me >= 0 && !dup && b_me == diag;
    const unsigned bal = __ballot_sync(0xffffffffu, first);
    if (lane == 0)
        wcnt[w] = __popc(bal);
    const int hasdiag = __syncthreads_or(fdiag);
    int off = 0, nU = 0;
    for (int i = 0; i < 4 * NWG + 4; i++) {
        off += i < w ? wcnt[i] : 0;
        nU += wcnt[i];
    }
    if (first) {
        const int k = off + __popc(bal & ((1u << lane) - 1u));
        ulist[k] = b_me;
        umask[k] = mask;
    }
    if (fdiag) {
        ulist[nU] = b_me;
        umask[nU] = mask;
    }
    nU += hasdiag != 0;
    __syncthreads(); /* the last CTA-wide barrier */

    if (w >= 4 * NWG) { /* producer warpgroup: K then V of each union block */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (w > 4 * NWG)
            return;
        for (int u = lane; u < nU; u += 32) { /* every union block's K and V into L2 */
            const int row = page_table[ulist[u]] * B;
            m3w_tma2d_l2(&tmk, g * HD, row);
            m3w_tma2d_l2(&tmk, g * HD + 64, row);
            m3w_tma2d_l2(&tmv, g * HD, row);
            m3w_tma2d_l2(&tmv, g * HD + 64, row);
        }
        for (int s = 0; s < 2 * nU; s++) {
            const int u = s >> 1, part = s & 1, sl = s % NS, b = ulist[u];
            const int row = page_table[b] * B;
            unsigned char *dst = ring + sl * MSA_WG_TILE;
            if (s >= NS)
                msa_bar_wait(&empty[sl], (uint32_t)((s / NS - 1) & 1));
            if (part == 1 && b == diag) { /* V of the last block: slots past kmax zeroed */
                const int lim = (int)(kmax - (int64_t)b * B + 1);
                m3w_fence_proxy();
                for (int e = lane; e < 2 * B * 8; e += 32) {
                    const int ch = e >> 10, j = (e >> 3) & (B - 1), p = e & 7;
                    uint4 v = make_uint4(0, 0, 0, 0);
                    if (j < lim)
                        v = *(const uint4 *)(vc + (size_t)(row + j) * kvw + (size_t)g * HD +
                                             ch * 64 + p * 8);
                    *(uint4 *)(dst + ch * (MSA_WG_TILE / 2) + j * 128 + ((p ^ (j & 7)) << 4)) = v;
                }
                m3w_fence_proxy();
                __syncwarp();
                if (lane == 0)
                    msa_bar_arrive(&full[sl]);
            } else if (lane == 0) {
                const CUtensorMap *tm = part ? &tmv : &tmk;
                m3w_expect_tx(&full[sl], MSA_WG_TILE);
                m3w_tma2d(dst, tm, g * HD, row, &full[sl]);
                m3w_tma2d(dst + MSA_WG_TILE / 2, tm, g * HD + 64, row, &full[sl]);
            }
            __syncwarp();
        }
        return;
    }

    /* consumer warp: warpgroup wg, query row t, heads h0 = lane / 4, h0 + 8 */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int wg = w >> 2, wi = w & 3;
    const int t = t0 + 4 * wg + wi;
    const int64_t pos = pos0 + t;
    unsigned char *Qw = Qs + wg * MSA_WG_QT;
#pragma unroll
    for (int i = 0; i < 16; i++) { /* head i, dims 4 lane .. 4 lane + 3 */
        const int d = 4 * lane, m = 16 * wi + i, p = (d & 63) >> 3;
        *(uint2 *)(Qw + (d >> 6) * (MSA_WG_QT / 2) + m * 128 + ((p ^ (m & 7)) << 4) + (d & 7) * 2) =
            make_uint2(m3t_pack_bf16(qv[i].x, qv[i].y), m3t_pack_bf16(qv[i].z, qv[i].w));
    }
    m3w_fence_proxy();
    m3w_bar(1 + wg, 128);
    /* low descriptor words: Q, K slot 0, V slot 0 (slot ks adds ks * TILE / 16) */
    const uint32_t qd = m3w_desc_lo(m3t_smem(Qw), 16), rd = m3w_desc_lo(m3t_smem(ring), 16);
    const uint32_t vd = m3w_desc_lo(m3t_smem(ring), MSA_WG_TILE / 2);

    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* heads h0, h0 + 8 (x c2) */
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++)
        o[i] = 0.0f;
    const int gsh = 4 * wg;                 /* this group's rows in umask */
    const int me = (t < T) << (4 * wg + wi); /* this warp's row in umask */
    /* u: the union block whose P V is next */
    int u = 0;
    while (u < nU && !((umask[u] >> gsh) & 15)) {
        msa_wg_pass<NS>(full, empty, 2 * u, lane);
        msa_wg_pass<NS>(full, empty, 2 * u + 1, lane);
        u++;
    }
    uint32_t pa[8][4], pb[8][4];
    if (u < nU) { /* the first block: S, softmax (O is 0: no rescale) */
        float s[64], a0, a1;
        msa_bar_wait(&full[(2 * u) % NS], (uint32_t)(((2 * u) / NS) & 1));
        msa_wg_qk(s, qd, rd + ((2 * u) % NS) * (MSA_WG_TILE / 16));
        m3w_wait<0>();
        msa_wg_pin_s(s);
        msa_wg_release<NS>(empty, 2 * u, lane);
        msa_wg_softmax(s, umask[u] & me, msa_wg_lim(pos, ulist[u]), lane, c2, m0, m1, l0, l1, pa,
                       a0, a1);
    }
    while (u < nU) { /* two steps per turn: P alternates between pa and pb */
        u = msa_wg_step<NS>(u, nU, ulist, umask, gsh, me, full, empty, qd, rd, vd, pos, lane, c2,
                            o, m0, m1, l0, l1, pa, pb);
        if (u >= nU)
            break;
        u = msa_wg_step<NS>(u, nU, ulist, umask, gsh, me, full, empty, qd, rd, vd, pos, lane, c2,
                            o, m0, m1, l0, l1, pb, pa);
    }
    if (t >= T)
        return;
    float il0, il1;
    msa_row_inverse(l0, l1, il0, il1);
    const int h0 = lane >> 2;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int d = 8 * j + 2 * (lane & 3);
        if (h0 < hpg)
            *(float2 *)(out + ((size_t)t * nh + (size_t)g * hpg + h0) * HD + d) =
                make_float2(m3d_round_bf16(o[4 * j] * il0), m3d_round_bf16(o[4 * j + 1] * il0));
        if (h0 + 8 < hpg)
            *(float2 *)(out + ((size_t)t * nh + (size_t)g * hpg + h0 + 8) * HD + d) =
                make_float2(m3d_round_bf16(o[4 * j + 2] * il1),
                            m3d_round_bf16(o[4 * j + 3] * il1));
    }
#else
    (void)out, (void)q, (void)tmk, (void)tmv, (void)vc, (void)page_table, (void)pos0, (void)T;
    (void)nh, (void)nkv, (void)blocks, (void)topk, (void)c2;
#endif
}

/* k_msa_wg applies: NVIDIA compute capability 9.0, bf16 mode and caches,
 * hd 128, block 128, nh / nkv <= 16, topk <= MSA_MAXK. */
static int msa_wg_applies(int nh, int nkv, int hd, int B, int topk, int kv_dtype, int mode)
{
    return mode == 1 && kv_dtype == M3G_BF16 && hd == 128 && B == 128 && nkv > 0 &&
           nh % nkv == 0 && nh / nkv <= 16 && topk > 0 && topk <= MSA_MAXK && m3w_device_ok();
}

/* Launch k_msa_wg<2, 16 or 32>; cudaErrorNotSupported when the driver
 * cannot encode the caches' TMA maps (the caller then takes another kernel). */
template <int KM>
static hipError_t msa_wg_launch_k(float *out, const float *q, const CUtensorMap &tk,
                                  const CUtensorMap &tv, const void *vc,
                                  const int32_t *page_table, int64_t pos0, int T, int nh, int nkv,
                                  const int32_t *blocks, int topk, float c2, hipStream_t st)
{
    constexpr int NWG = 2;
    const size_t shm = msa_wg_smem<NWG, KM>();
    hipError_t e = cudaFuncSetAttribute(k_msa_wg<NWG, KM>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm);
    if (e != hipSuccess)
        return e;
    k_msa_wg<NWG, KM><<<dim3((T + 4 * NWG - 1) / (4 * NWG), nkv), dim3((NWG + 1) * 128), shm,
                        st>>>(out, q, tk, tv, (const uint16_t *)vc, page_table, pos0, T, nh, nkv,
                              blocks, topk, c2);
    return hipGetLastError();
}

static hipError_t msa_wg_launch(float *out, const float *q, const void *kc, const void *vc,
                                const int32_t *page_table, int64_t pos0, int T, int nh, int nkv,
                                const int32_t *blocks, int topk, float c2, hipStream_t st)
{
    /* the caches' row count is not known here: the maps span 2^30 rows, and
     * only rows of pages in page_table are ever addressed */
    const uint64_t cols = (uint64_t)nkv * 128, rows = 1ull << 30;
    CUtensorMap tk, tv;
    if (m3w_tensor_map(&tk, kc, cols, rows, cols, 128) ||
        m3w_tensor_map(&tv, vc, cols, rows, cols, 128))
        return cudaErrorNotSupported;
    return topk <= 16 ? msa_wg_launch_k<16>(out, q, tk, tv, vc, page_table, pos0, T, nh, nkv,
                                            blocks, topk, c2, st)
                      : msa_wg_launch_k<MSA_MAXK>(out, q, tk, tv, vc, page_table, pos0, T, nh,
                                                  nkv, blocks, topk, c2, st);
}

#endif /* M3_MSA_TC */

int m3g_msa_attention_tc(int nh, int nkv, int hd, int B, int topk, int kv_dtype, int mode)
{
#if M3_MSA_TC
    (void)kv_dtype;
    return mode == 1 && nkv > 0 && nh % nkv == 0 && nh / nkv <= 16 &&
           (hd == 16 || hd == 32 || hd == 64 || hd == 128) && B > 0 && B <= MSA_KT && topk > 0 &&
           topk <= MSA_MAXK;
#else
    (void)nh, (void)nkv, (void)hd, (void)B, (void)topk, (void)kv_dtype, (void)mode;
    return 0;
#endif
}

/* The launch for both p roundings: onepass 0 = k_msa_ws<.., 3, 11, 1>
 * (two passes, exact p), 1 = k_msa_ws<.., 2, 11, 0> (one pass, online
 * softmax); the scalar kernel (exact p) where the tensor-core path does not
 * apply. */
static hipError_t msa_prefill(float *out, const float *q, const void *kc, const void *vc,
                              int kv_dtype, const int32_t *page_table, int B, int64_t pos0, int T,
                              int nh, int nkv, int hd, const int32_t *blocks, int topk, int mode,
                              int onepass, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (hd <= 0 || hd > 128 || nkv <= 0 || nh % nkv != 0 || B <= 0 || !blocks || topk <= 0 ||
        (kv_dtype != M3G_F32 && kv_dtype != M3G_BF16))
        return hipErrorInvalidValue;
    const float scale = (float)(1.0 / sqrt((double)hd)); /* as ref/attention.c */
#if M3_MSA_TC
    if (m3g_msa_attention_tc(nh, nkv, hd, B, topk, kv_dtype, mode)) {
        const float c2 = scale * 1.4426950408889634f; /* exp(x) = exp2(x log2 e) */
        const int bf = kv_dtype == M3G_BF16;
        if (onepass && msa_wg_applies(nh, nkv, hd, B, topk, kv_dtype, mode)) {
            const hipError_t e =
                msa_wg_launch(out, q, kc, vc, page_table, pos0, T, nh, nkv, blocks, topk, c2, st);
            if (e != cudaErrorNotSupported)
                return e;
        }
#define MSA_WS_CASE(HD_, ON_, PRO_)                                                           \
    return bf ? msa_ws_launch<HD_, 1, ON_, 11, PRO_>(out, q, kc, vc, page_table, B, pos0, T,   \
                                                     nh, nkv, blocks, topk, c2, st)           \
              : msa_ws_launch<HD_, 0, ON_, 11, PRO_>(out, q, kc, vc, page_table, B, pos0, T,   \
                                                     nh, nkv, blocks, topk, c2, st);
#define MSA_TC_CASE(HD_)                                                                      \
    if (hd == HD_) {                                                                          \
        if (onepass)                                                                          \
            MSA_WS_CASE(HD_, 2, 0)                                                            \
        MSA_WS_CASE(HD_, 3, 1)                                                                \
    }
        MSA_TC_CASE(128)
        MSA_TC_CASE(64)
        MSA_TC_CASE(32)
        MSA_TC_CASE(16)
#undef MSA_TC_CASE
#undef MSA_WS_CASE
    }
#else
    (void)onepass;
#endif
    const int hpg = nh / nkv;
    const int nw = hpg < MSA_SMAXW ? hpg : MSA_SMAXW;
    const int nz = (hpg + MSA_SMAXW - 1) / MSA_SMAXW;
    const size_t shm = sizeof(float) * ((size_t)nw * hd + MSA_SKT * (size_t)(hd + 1) +
                                        MSA_SKT * (size_t)hd);
    hipLaunchKernelGGL(k_msa_scalar, dim3(T, nkv, nz), dim3(32 * nw), shm, st, out, q, kc, vc,
                       kv_dtype == M3G_BF16, page_table, B, pos0, T, nh, nkv, hd, blocks, topk,
                       scale, mode);
    return hipGetLastError();
}

hipError_t m3g_msa_attention_prefill(float *out, const float *q, const void *kc, const void *vc,
                                     int kv_dtype, const int32_t *page_table, int B, int64_t pos0,
                                     int T, int nh, int nkv, int hd, const int32_t *blocks,
                                     int topk, int mode, hipStream_t st)
{
    return msa_prefill(out, q, kc, vc, kv_dtype, page_table, B, pos0, T, nh, nkv, hd, blocks,
                       topk, mode, 0, st);
}

hipError_t m3g_msa_attention_prefill_onepass(float *out, const float *q, const void *kc,
                                             const void *vc, int kv_dtype,
                                             const int32_t *page_table, int B, int64_t pos0,
                                             int T, int nh, int nkv, int hd,
                                             const int32_t *blocks, int topk, int mode,
                                             hipStream_t st)
{
    return msa_prefill(out, q, kc, vc, kv_dtype, page_table, B, pos0, T, nh, nkv, hd, blocks,
                       topk, mode, 1, st);
}
