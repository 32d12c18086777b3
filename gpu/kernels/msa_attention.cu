/* msa_attention.cu — MSA block-sparse attention for prefill (many query
 * rows), on tensor cores where the toolchain has them.
 *
 * Must match: ref/attention.c m3_attention_row with a block list.
 * Spec: M3-MSA-ATTN-1 (query head j of KV group g = j / (nh / nkv) sees key
 * k iff block(k) = k / B is in the group's selected set AND k <= pos),
 * M3-MSA-ATTN-2 (at most topk * B keys per row), M3-ATTN-SCORE-1
 * (s = (q . k) * hd^-0.5 in fp32, fp32 softmax), M3-NUM-BF16-2 item 5
 * (p = bf16(exp(s - M) / L) with the row's global max M and sum L, P.V
 * accumulated in fp32, output rounded).
 *
 * Tensor-core path (NVIDIA, bf16 mode, hd in {16, 32, 64, 128}, nh / nkv
 * <= 16, B <= 128, topk <= 32):
 *  - one thread block (8 warps) per (tile of 8 consecutive query rows, KV
 *    group g); warp w owns query row t0 + w, and the 16 query heads of the
 *    group are the M = 16 rows of an mma.sync m16n8k16 tile (heads beyond
 *    nh / nkv are zero rows, never written);
 *  - the block lists of the 8 rows are merged into their union (a set: a
 *    block listed twice counts once, as in the reference) with one bit mask
 *    of the rows that selected each block; each union block's 128 K (and V)
 *    rows are staged once in shared memory (cp.async, three stages, one
 *    barrier per step; Q is staged in the last stage's K slot) and used
 *    by every warp whose row selected it, so neighbouring rows that share
 *    blocks share the loads (exact: a row only ever computes its own
 *    blocks, the others are skipped, not masked);
 *  - pass 1 over the union: S = Q K^T (bf16 x bf16 -> fp32 on the tensor
 *    cores: exact products, fp32 sums), running max and sum of exp per
 *    head; pass 2: S again, p = bf16(exp(s - M) / L) with the global M and
 *    L, then O += P V on the tensor cores (fp32 accumulate), O rounded.
 * Differences from ref (all within fp32 rounding, hence inside the bf16
 * tolerance, not bitwise): summation order of q.k (tensor-core k-steps) and
 * of L and P.V (union order, not ascending keys); exp(s - M) is evaluated
 * as exp2(fma(acc, scale*log2e, -M*scale*log2e)) and the division by L as
 * a multiplication by 1/L (a few fp32 ulp before the bf16 rounding of p).
 * Needs: K/V slots that the tile cannot see may hold anything (they are
 * zero-filled on load); visible slots must be finite.
 *
 * Portable path (hipcc/AMD, the CPU emulation, fp32 mode, other shapes): a
 * scalar two-pass kernel (one block per (row, group), one warp per head,
 * 32-key tiles), same semantics, fp32 dot products over d ascending.
 *
 * Measured (H200, bench-gpu "msa prefill", last 2,048 rows of a 131,072-
 * token sequence, bf16 KV cache, 64 q / 4 kv heads, 16 blocks per row and
 * group; logical FLOPs): 1.00 ms = 13.5% of 989 TFLOP/s when the rows of a
 * 128-row query block share their selection, 1.39 ms (9.7%) when each row
 * draws 14 of a 24-block pool, 4.04 ms (3.3%) when each row draws its own
 * 14 blocks (then every tile loads ~114 distinct blocks: memory bound).
 * Dense causal SDPA (torch, same slab, same run): 14.1 ms. Targets of
 * issue 8 (>= 40% of peak) not met.
 * Tried and dropped: two query rows per warp sharing every K/V fragment
 * (M = 32; 250 registers): equal time on shared selections (1.01 ms), 2.3x
 * slower on independent ones (16-row tiles load twice the union), so the
 * shared-memory fragment traffic is not what limits this kernel. Two
 * passes cost 1.5x the logical tensor work (S is computed twice).
 * Next: wgmma (sm_90a) with M = 64 (4 rows x 16 heads per warpgroup) and
 * K/V read from shared memory by the tensor cores; TMA bulk copies of the
 * 32 KB K/V blocks; profile (ncu) before more guessing.
 */
#include <math.h>
#include "common.cuh"
#include "kernels.h"

#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__) && !defined(M3_EMU)
#define M3_MSA_TC 1
#else
#define M3_MSA_TC 0
#endif

#define MSA_R 8      /* query rows per thread block (one warp each) */
#define MSA_KT 128   /* keys per staged tile (= one MSA block, B <= 128) */
#define MSA_MAXK 32  /* topk limit of the tensor-core path (R * topk <= 256 threads) */
#define MSA_NST 3    /* K/V pipeline stages of the tensor-core path (>= 2) */

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

__device__ __forceinline__ uint32_t msa_smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte global -> shared copy; src_bytes 0 zero-fills the destination. */
__device__ __forceinline__ void msa_cp16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(msa_smem_u32(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void msa_cp_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void msa_cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void msa_ldsm4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(msa_smem_u32(p)));
}
__device__ __forceinline__ void msa_ldsm4t(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(msa_smem_u32(p)));
}

/* d += a (16x16 bf16, row) * b (16x8 bf16, col), fp32 accumulators. */
__device__ __forceinline__ void msa_mma(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* bf16x2 of (lo, hi), each rounded to nearest even. */
__device__ __forceinline__ uint32_t msa_pack_bf16(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* Stage K (and V) rows of MSA block b into shared memory: 128 rows of HD
 * bf16 at row stride LD elements; rows j >= B or past the tile's last
 * position kmax are zero-filled. */
template <int HD, int KVBF>
__device__ __forceinline__ void msa_stage(uint16_t *Ks, uint16_t *Vs, const void *kc,
                                          const void *vc, int with_v, int64_t rowbase, int64_t k0,
                                          int64_t kmax, int B, size_t kvw, int g)
{
    constexpr int LD = HD + 8, CH = HD / 8; /* 16-byte chunks per row */
    for (int idx = threadIdx.x; idx < MSA_KT * CH; idx += MSA_R * 32) {
        const int j = idx / CH, c = idx % CH;
        const int ok = j < B && k0 + j <= kmax;
        const size_t src = (size_t)(rowbase + (ok ? j : 0)) * kvw + (size_t)g * HD + 8 * c;
        uint16_t *dk = Ks + j * LD + 8 * c, *dv = Vs + j * LD + 8 * c;
        if (KVBF) {
            msa_cp16(dk, (const uint16_t *)kc + src, ok ? 16 : 0);
            if (with_v)
                msa_cp16(dv, (const uint16_t *)vc + src, ok ? 16 : 0);
        } else { /* fp32 cache holding bf16 values (bf16 mode): exact conversion */
            uint4 zk = make_uint4(0, 0, 0, 0), zv = zk;
            if (ok) {
                const float4 *pk = (const float4 *)((const float *)kc + src);
                const float4 a = pk[0], bb = pk[1];
                zk = make_uint4(msa_pack_bf16(a.x, a.y), msa_pack_bf16(a.z, a.w),
                                msa_pack_bf16(bb.x, bb.y), msa_pack_bf16(bb.z, bb.w));
                if (with_v) {
                    const float4 *pv = (const float4 *)((const float *)vc + src);
                    const float4 c0 = pv[0], c1 = pv[1];
                    zv = make_uint4(msa_pack_bf16(c0.x, c0.y), msa_pack_bf16(c0.z, c0.w),
                                    msa_pack_bf16(c1.x, c1.y), msa_pack_bf16(c1.z, c1.w));
                }
            }
            *(uint4 *)dk = zk;
            if (with_v)
                *(uint4 *)dv = zv;
        }
    }
}

/* S[16 heads][128 keys] = Q K^T for this warp's row: s[n][e] is key
 * 8n + 2(lane%4) + (e&1), head lane/4 + 8(e>>1). */
template <int HD>
__device__ __forceinline__ void msa_qk(float s[16][4], const uint32_t qa[HD / 16][4],
                                       const uint16_t *Ks, int lane)
{
    constexpr int LD = HD + 8;
#pragma unroll
    for (int n = 0; n < 16; n++)
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
        for (int np = 0; np < 8; np++) {
            uint32_t b[4];
            msa_ldsm4(b, Ks + ((2 * np + (mi >> 1)) * 8 + r8) * LD + kk * 16 + 8 * (mi & 1));
            msa_mma(s[2 * np], qa[kk], b[0], b[1]);
            msa_mma(s[2 * np + 1], qa[kk], b[2], b[3]);
        }
    }
}

/* grid (ceil(T / R), nkv), block R * 32. */
template <int HD, int KVBF>
__global__ void __launch_bounds__(MSA_R * 32, 1)
    k_msa_tc(float *out, const float *q, const void *kc, const void *vc,
             const int32_t *page_table, int B, int64_t pos0, int T, int nh, int nkv,
             const int32_t *blocks, int topk, float c2)
{
    constexpr int LD = HD + 8;
    static_assert(MSA_R * 16 <= MSA_KT && MSA_NST >= 2, "Q must fit one K slot");
    extern __shared__ __align__(16) unsigned char msa_sm[];
    /* MSA_NST stages of (K [128][LD], V [128][LD]); Q [R * 16][LD] (R * 16 ==
     * 128 rows) shares the K slot of the last stage: it is read into
     * registers before the first barrier of the key loop, and that stage is
     * first written after it */
    uint16_t *S0 = (uint16_t *)msa_sm;
    uint16_t *Qs = S0 + (MSA_NST - 1) * 2 * MSA_KT * LD;
    int *cand = (int *)(S0 + MSA_NST * 2 * MSA_KT * LD); /* [R * topk] */
    int *ulist = cand + MSA_R * MSA_MAXK;              /* union block ids */
    int *umask = ulist + MSA_R * MSA_MAXK;             /* rows that chose each */
    int *wcnt = umask + MSA_R * MSA_MAXK;              /* [R] + total */

    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
    const int g = blockIdx.y, hpg = nh / nkv;
    const int t0 = blockIdx.x * MSA_R, t = t0 + w;
    const int nrows = T - t0 < MSA_R ? T - t0 : MSA_R;
    const int64_t pos = pos0 + t;
    const int64_t kmax = pos0 + t0 + nrows - 1; /* last position of the tile */
    const size_t kvw = (size_t)nkv * HD;

    /* Q of row t (16 heads, zero rows beyond hpg / T) -> bf16 in shared */
    for (int e = lane; e < 16 * HD / 4; e += 32) {
        const int hh = e / (HD / 4), d4 = e % (HD / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (t < T && hh < hpg)
            v = ((const float4 *)(q + ((size_t)t * nh + (size_t)g * hpg + hh) * HD))[d4];
        uint2 pk = make_uint2(msa_pack_bf16(v.x, v.y), msa_pack_bf16(v.z, v.w));
        *(uint2 *)(Qs + (w * 16 + hh) * LD + 4 * d4) = pk;
    }
    /* candidate blocks of the tile's rows; union with row masks */
    const int n = MSA_R * topk;
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
    /* entry tid is the first occurrence of its block: uniform loops, so each
     * cand[j] read is a shared-memory broadcast */
    int dup = 0, mask = 0;
    const int b_me = tid < n ? cand[tid] : -1;
    for (int r = 0; r < MSA_R; r++)
        for (int e = 0; e < topk; e++) {
            const int j = r * topk + e;
            if (cand[j] == b_me) {
                dup |= j < tid;
                mask |= 1 << r;
            }
        }
    const int first = b_me >= 0 && !dup;
    const unsigned bal = __ballot_sync(0xffffffffu, first);
    if (lane == 0)
        wcnt[w] = __popc(bal);
    __syncthreads();
    int off = 0, nU = 0;
    for (int i = 0; i < MSA_R; i++) {
        off += i < w ? wcnt[i] : 0;
        nU += wcnt[i];
    }
    if (first) {
        const int k = off + __popc(bal & ((1u << lane) - 1u));
        ulist[k] = b_me;
        umask[k] = mask;
    }
    __syncthreads();

    /* this warp's Q fragments (A operand, 16 heads x HD) */
    uint32_t qa[HD / 16][4];
    {
        const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
            msa_ldsm4(qa[kk], Qs + (w * 16 + r8 + 8 * (mi & 1)) * LD + kk * 16 + 8 * (mi >> 1));
    }

    const int nsteps = 2 * nU; /* pass 1: K of each union block; pass 2: K and V */
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* heads lane/4, lane/4+8 (x c2) */
    float il0 = 0.0f, il1 = 0.0f;
    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

    /* steps 0 .. MSA_NST - 2 in flight before the loop; one commit group per
     * step (empty past the end), so wait_group MSA_NST - 2 leaves step s done */
    for (int s1 = 0; s1 < MSA_NST - 1; s1++) {
        if (s1 < nsteps) {
            const int b1 = ulist[s1 % nU];
            uint16_t *K1 = S0 + s1 * 2 * MSA_KT * LD;
            msa_stage<HD, KVBF>(K1, K1 + MSA_KT * LD, kc, vc, s1 >= nU,
                                (int64_t)page_table[b1] * B, (int64_t)b1 * B, kmax, B, kvw, g);
        }
        msa_cp_commit();
    }
    for (int s = 0; s < nsteps; s++) {
        msa_cp_wait<MSA_NST - 2>();
        __syncthreads(); /* step s visible to all; every warp is past step s - 1 */
        {                /* prefetch step s + NST - 1 into the stage step s - 1 used */
            const int s1 = s + MSA_NST - 1;
            if (s1 < nsteps) {
                const int b1 = ulist[s1 % nU];
                uint16_t *K1 = S0 + (s1 % MSA_NST) * 2 * MSA_KT * LD;
                msa_stage<HD, KVBF>(K1, K1 + MSA_KT * LD, kc, vc, s1 >= nU,
                                    (int64_t)page_table[b1] * B, (int64_t)b1 * B, kmax, B, kvw,
                                    g);
            }
            msa_cp_commit();
        }
        const int u = s % nU, pass2 = s >= nU;
        const uint16_t *Ks = S0 + (s % MSA_NST) * 2 * MSA_KT * LD;
        if (s == nU) { /* pass 1 done: global max and sum of the two heads */
            for (int x = 1; x < 4; x <<= 1) {
                l0 += __shfl_xor_sync(0xffffffffu, l0, x);
                l1 += __shfl_xor_sync(0xffffffffu, l1, x);
            }
            il0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
            il1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
            if (m0 == -INFINITY)
                m0 = 0.0f;
            if (m1 == -INFINITY)
                m1 = 0.0f;
        }
        if (t < T && ((umask[u] >> w) & 1)) { /* warp-uniform */
            const int b = ulist[u];
            float sc[16][4];
            msa_qk<HD>(sc, qa, Ks, lane);
            /* mask: keys past pos (own block) and slots >= B */
            const int64_t k0 = (int64_t)b * B;
            const int lim = (int)((pos - k0 + 1) < B ? (pos - k0 + 1) : B); /* visible keys */
            if (lim < MSA_KT) {
#pragma unroll
                for (int nn = 0; nn < 16; nn++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        if (8 * nn + 2 * (lane & 3) + (e & 1) >= lim)
                            sc[nn][e] = -INFINITY;
            }
            if (!pass2) {
                float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
                for (int nn = 0; nn < 16; nn++) {
                    x0 = fmaxf(x0, fmaxf(sc[nn][0], sc[nn][1]));
                    x1 = fmaxf(x1, fmaxf(sc[nn][2], sc[nn][3]));
                }
                for (int x = 1; x < 4; x <<= 1) {
                    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, x));
                    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, x));
                }
                /* c2 > 0: max of acc * c2 = (max acc) * c2 */
                const float n0 = fmaxf(m0, x0 * c2), n1 = fmaxf(m1, x1 * c2);
                float e0 = 0.0f, e1 = 0.0f;
                if (n0 > -INFINITY) {
#pragma unroll
                    for (int nn = 0; nn < 16; nn++)
                        e0 += exp2f(__fmaf_rn(sc[nn][0], c2, -n0)) +
                              exp2f(__fmaf_rn(sc[nn][1], c2, -n0));
                    l0 = (m0 == -INFINITY ? 0.0f : l0 * exp2f(m0 - n0)) + e0;
                    m0 = n0;
                }
                if (n1 > -INFINITY) {
#pragma unroll
                    for (int nn = 0; nn < 16; nn++)
                        e1 += exp2f(__fmaf_rn(sc[nn][2], c2, -n1)) +
                              exp2f(__fmaf_rn(sc[nn][3], c2, -n1));
                    l1 = (m1 == -INFINITY ? 0.0f : l1 * exp2f(m1 - n1)) + e1;
                    m1 = n1;
                }
            } else {
                const uint16_t *Vs = Ks + MSA_KT * LD;
                const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
                for (int kk = 0; kk < 8; kk++) { /* 16 keys per k-step */
                    uint32_t pa[4];
                    pa[0] = msa_pack_bf16(exp2f(__fmaf_rn(sc[2 * kk][0], c2, -m0)) * il0,
                                          exp2f(__fmaf_rn(sc[2 * kk][1], c2, -m0)) * il0);
                    pa[1] = msa_pack_bf16(exp2f(__fmaf_rn(sc[2 * kk][2], c2, -m1)) * il1,
                                          exp2f(__fmaf_rn(sc[2 * kk][3], c2, -m1)) * il1);
                    pa[2] = msa_pack_bf16(exp2f(__fmaf_rn(sc[2 * kk + 1][0], c2, -m0)) * il0,
                                          exp2f(__fmaf_rn(sc[2 * kk + 1][1], c2, -m0)) * il0);
                    pa[3] = msa_pack_bf16(exp2f(__fmaf_rn(sc[2 * kk + 1][2], c2, -m1)) * il1,
                                          exp2f(__fmaf_rn(sc[2 * kk + 1][3], c2, -m1)) * il1);
#pragma unroll
                    for (int np = 0; np < HD / 16; np++) {
                        uint32_t vb[4];
                        msa_ldsm4t(vb, Vs + (kk * 16 + 8 * (mi & 1) + r8) * LD +
                                           (2 * np + (mi >> 1)) * 8);
                        msa_mma(o[2 * np], pa, vb[0], vb[1]);
                        msa_mma(o[2 * np + 1], pa, vb[2], vb[3]);
                    }
                }
            }
        }
    }
    if (t >= T)
        return;
    const int h0 = lane >> 2;
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

template <int HD, int KVBF>
static hipError_t msa_tc_launch(float *out, const float *q, const void *kc, const void *vc,
                                const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                                int nkv, const int32_t *blocks, int topk, float c2,
                                hipStream_t st)
{
    constexpr int LD = HD + 8;
    const size_t shm = sizeof(uint16_t) * (2 * MSA_NST * (size_t)MSA_KT * LD) +
                       sizeof(int) * (3 * MSA_R * MSA_MAXK + MSA_R + 1);
    hipError_t e = cudaFuncSetAttribute(k_msa_tc<HD, KVBF>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shm);
    if (e != hipSuccess)
        return e;
    k_msa_tc<HD, KVBF><<<dim3((T + MSA_R - 1) / MSA_R, nkv), dim3(MSA_R * 32), shm, st>>>(
        out, q, kc, vc, page_table, B, pos0, T, nh, nkv, blocks, topk, c2);
    return hipGetLastError();
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

hipError_t m3g_msa_attention_prefill(float *out, const float *q, const void *kc, const void *vc,
                                     int kv_dtype, const int32_t *page_table, int B, int64_t pos0,
                                     int T, int nh, int nkv, int hd, const int32_t *blocks,
                                     int topk, int mode, hipStream_t st)
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
#define MSA_TC_CASE(HD_)                                                                      \
    if (hd == HD_)                                                                            \
        return bf ? msa_tc_launch<HD_, 1>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv,    \
                                          blocks, topk, c2, st)                               \
                  : msa_tc_launch<HD_, 0>(out, q, kc, vc, page_table, B, pos0, T, nh, nkv,    \
                                          blocks, topk, c2, st);
        MSA_TC_CASE(128)
        MSA_TC_CASE(64)
        MSA_TC_CASE(32)
        MSA_TC_CASE(16)
#undef MSA_TC_CASE
    }
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
