/* msa_sel.cuh — the golden-order top-k of the MSA indexer's per-block lists:
 * the indexer's own (gpu/kernels/msa.cu: each block's local list and the
 * last block's merge) and that of the consumers that merge the lists
 * themselves (the deferred selection: gpu/kernels/attention.cu's sparse
 * decode prologue and msa.cu's m3g_msa_lists_select).
 *
 * Must match: ref/msa.c m3_msa_select (exactly). Spec: M3-MSA-SELECT-*
 * (forced init and local blocks first ascending, then descending score,
 * ties to the lower id, -inf and NaN never selected, -1 padding).
 *
 * Golden keys: K = (order-preserving bits of the score, +0 for -0) << 32 |
 * ~id, unique, larger = earlier in the golden order, 0 = never selectable
 * (forced, -inf, NaN). Deferred lists (m3g_msa_lists): row t of the
 * indexer's workspace holds [G][P][np] keys at t * P * G * IDX_LCAP, list
 * (g, c) = block c's local top keys of head g, sorted descending, 0-padded;
 * np = msa_list_np(nb, P, need), even, so every head's lists start 16-byte
 * aligned. The top `need` of the union is the row's selection after the
 * forced blocks (the global top `need` lies in the union of every block's
 * local top `need`). One warp selects in the indexer (idx_wsel: each
 * block's local list, and msa_lists_pick: the last block's merge); the
 * consumers of deferred lists use a whole thread block
 * (msa_lists_pick_block: the same selection). These exist where the
 * streaming indexer does (NVIDIA, the emulation; on AMD nothing is
 * deferred).
 */
#ifndef M3_GPU_MSA_SEL_CUH
#define M3_GPU_MSA_SEL_CUH

#include <stdint.h>
#include "../hip_compat.h"

#define IDX_LCAP 32 /* list slots per (block, head) in the indexer's workspace (>= topk) */
#ifndef IDX_SCAP    /* (tests may lower it to exercise the fallback) */
#define IDX_SCAP 256 /* merge survivors per head */
#endif

/* 1 iff block b is forced for a query in block qb. */
static __device__ __forceinline__ int msa_forced(int b, int qb, int local_blocks, int init_blocks)
{
    return b < init_blocks || (b <= qb && b > qb - local_blocks);
}

/* The forced blocks of a query in block qb among blocks 0..nb-1, ascending
 * and at most topk (the init blocks, then the local ones; the unforced
 * middle is jumped): written to o when o != NULL; returns their count. */
static __device__ __forceinline__ int msa_forced_list(int32_t *o, int nb, int qb, int topk,
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

typedef unsigned long long mix_u64;

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

#if !defined(__HIP_PLATFORM_AMD__) /* the streaming indexer's platforms: NVIDIA, the emulation */

static __device__ __forceinline__ void idx_syncwarp()
{
#if defined(M3_EMU)
    (void)m3_shfl_xor(0.0f, 0); /* the emulation's warp barrier */
#else
    __syncwarp();
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
static inline __device__ IDX_NOINLINE int idx_wsel(const mix_u64 *a, int nl, int len, int need,
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

/* Keys per deferred list of a row with nb visible MSA blocks split over P
 * indexer blocks: a block's list holds at most min(need, its MSA blocks)
 * keys, its MSA blocks <= ceil(nb / P); rounded up to even (0 when need <= 0). */
static __device__ __forceinline__ int msa_list_np(int nb, int P, int need)
{
    const int bmax = (nb + P - 1) / P;
    const int npk = need < bmax ? need : bmax;
    return npk > 0 ? (npk + 1) & ~1 : 0;
}

/* The lists of head g of row t in the indexer's workspace ws (G heads, P lists per head). */
static __device__ __forceinline__ const mix_u64 *msa_lists_at(const mix_u64 *ws, int t, int g, int G,
                                                              int P, int np)
{
    return ws + (size_t)t * P * G * IDX_LCAP + (size_t)g * P * np;
}

/* One warp: the selection of one (row, head) from its P lists of np keys
 * (lists [P][np], shared or global memory) into o[0..topk) (shared or
 * global): the nf forced blocks ascending, the top `need` keys' ids, -1
 * padding. tmpl (IDX_LCAP keys), surv (IDX_SCAP keys), *scnt: this warp's
 * shared scratch. Every lane of the warp calls it. */
static __device__ __forceinline__ void msa_lists_pick(int32_t *o, const mix_u64 *lists, int P,
                                                      int np, int nf, int need, int nb, int qb,
                                                      int topk, int local_blocks, int init_blocks,
                                                      mix_u64 *tmpl, mix_u64 *surv,
                                                      unsigned *scnt)
{
    const int lane = threadIdx.x & 31;
    if (lane == 0)
        msa_forced_list(o, nb, qb, topk, local_blocks, init_blocks);
    int n = 0;
    if (need > 0) {
        n = idx_wsel(lists, P, np, need, tmpl, surv, scnt);
        for (int i = lane; i < n; i += 32)
            o[nf + i] = (int32_t)~(unsigned)(tmpl[i] & 0xffffffffu);
    }
    for (int i = nf + n + lane; i < topk; i += 32)
        o[i] = -1;
}

/* The same selection by a whole thread block of NT threads (every thread
 * calls it: block barriers inside), for the consumers of deferred lists.
 * Exact without a fallback: m = the need-th largest list head (1 when fewer
 * than need heads are nonzero) is a lower bound of the need-th largest key
 * (the need lists with the largest heads hold need keys >= m), and every key
 * >= m lies in one of those lists (a list whose head is below m holds only
 * keys below m); so the keys >= m, at most need * np of them (surv holds
 * cap >= need * np keys), contain the top `need`, each ranked by counting
 * the survivors above it (its rank among all keys). The heads' ranks and
 * the survivors' are counted by many threads at once (one warp's bound
 * takes 31 dependent shuffle rounds). Reads of o after it need a block
 * barrier. mm, cnt: shared scratch. */
template <int NT>
static __device__ __forceinline__ void msa_lists_pick_block(int32_t *o, const mix_u64 *lists, int P,
                                                            int np, int nf, int need, int nb,
                                                            int qb, int topk, int local_blocks,
                                                            int init_blocks, mix_u64 *surv,
                                                            int cap, mix_u64 *mm, unsigned *cnt)
{
    const int tid = threadIdx.x;
    if (tid == 0) {
        msa_forced_list(o, nb, qb, topk, local_blocks, init_blocks);
        *mm = 1; /* fewer than need nonzero heads: every nonzero key survives */
        *cnt = 0;
    }
    if (need <= 0) /* (block-uniform) the forced blocks fill the list */
        return;
    __syncthreads();
    for (int c = tid; c < P; c += NT) { /* the head of rank need - 1 (keys are unique) */
        const mix_u64 h = lists[(size_t)c * np];
        if (h == 0)
            continue;
        int r = 0;
        for (int j = 0; j < P; j++)
            r += lists[(size_t)j * np] > h;
        if (r == need - 1)
            *mm = h;
    }
    __syncthreads();
    const mix_u64 m = *mm;
    for (int c = tid; c < P; c += NT)
        for (int s = 0; s < np; s++) { /* each list sorted descending, zeros last */
            const mix_u64 K = lists[(size_t)c * np + s];
            if (K < m)
                break;
            const unsigned slot = atomicAdd(cnt, 1u);
            if (slot < (unsigned)cap)
                surv[slot] = K;
        }
    __syncthreads();
    const int S = (int)*cnt < cap ? (int)*cnt : cap;
    for (int i = tid; i < S; i += NT) {
        const mix_u64 K = surv[i];
        int q = 0;
        for (int j = 0; j < S; j++)
            q += surv[j] > K;
        if (q < need)
            o[nf + q] = (int32_t)~(unsigned)(K & 0xffffffffu);
    }
    const int n = S < need ? S : need;
    for (int i = nf + n + tid; i < topk; i += NT)
        o[i] = -1;
}
#endif /* !__HIP_PLATFORM_AMD__ */

#endif
