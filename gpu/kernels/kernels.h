/* kernels.h — host launchers of the gpu/ kernels (one .cu file each group).
 *
 * Every launcher enqueues on `st` and returns hipSuccess or the launch error;
 * none synchronises, none allocates (callers own all buffers, device memory).
 * Shapes follow the reference (the ref/ headers); each launcher names the reference
 * function it must match and the spec clauses. mode: 0 fp32 golden, 1 bf16
 * (M3-NUM-MODE-1, M3-NUM-BF16-2). Activations are fp32 [rows, cols], row-major.
 *
 * Paged caches: a cache is [pages * B, width] fp32 rows; logical position p
 * lives in row page_table[p / B] * B + p % B (page == MSA block, B = block
 * size, M3-MSA-CACHE-1). Dense layers use the same layout.
 */
#ifndef M3_GPU_KERNELS_H
#define M3_GPU_KERNELS_H

#include <stdint.h>
#include "../hip_compat.h"

/* A weight matrix on the device: [rows, cols] row-major, fp32 or raw bf16. */
typedef struct m3g_mat {
    const void *data;
    int dtype; /* M3G_F32 0, M3G_BF16 1 */
    int rows, cols;
} m3g_mat;

typedef struct m3g_blas m3g_blas;

/* ---- norm_rope.cu ------------------------------------------------------ */
/* x [T, n] += y (rounded, M3-NUM-BF16-2 item 9) when y != NULL, then
 * out [T, n] = GemmaRMSNorm(x) * (1 + w) (ref m3_rmsnorm, M3-NORM-1). */
hipError_t m3g_residual_rmsnorm(float *x, const float *y, float *out, const void *w, int w_dtype,
                                int T, int n, float eps, int mode, hipStream_t st);

/* The same with a benchmark knob: release 1 (m3g_residual_rmsnorm's
 * choice) lets the next kernel of the stream launch at once when it was
 * launched with programmatic dependent launch (NVIDIA; it must wait before
 * touching this kernel's data, as every gpu/ PDL kernel does), 0 not. */
hipError_t m3g_residual_rmsnorm_ex(float *x, const float *y, float *out, const void *w,
                                   int w_dtype, int T, int n, float eps, int mode, int release,
                                   hipStream_t st);

/* Per-head QK-norm then partial rotate-half RoPE (ref m3_rmsnorm_heads +
 * m3_rope_apply; M3-ATTN-QKNORM-1, M3-ROPE-1..3). src [T, nheads, hd];
 * result row t goes to dst + slot(t) * nheads * hd, slot(t) = the paged slot
 * of position pos0 + t when page_table != NULL, else t (dst may be src).
 * cos_t/sin_t [T, rd/2] are the reference tables (m3_rope_table) uploaded. */
hipError_t m3g_headnorm_rope(const float *src, float *dst, const int32_t *page_table, int B,
                             int64_t pos0, const void *w, int w_dtype, int T, int nheads, int hd,
                             int rd, const float *cos_t, const float *sin_t, float eps, int mode,
                             hipStream_t st);

/* The same with dst holding raw bf16 bits of the result (the bf16 K cache
 * of bf16 mode: exact there, the result is already rounded). */
hipError_t m3g_headnorm_rope_bf16(const float *src, uint16_t *dst, const int32_t *page_table,
                                  int B, int64_t pos0, const void *w, int w_dtype, int T,
                                  int nheads, int hd, int rd, const float *cos_t,
                                  const float *sin_t, float eps, int mode, hipStream_t st);

/* One job of m3g_attn_prologue over src [T, nheads, hd]. w != NULL: QK-norm
 * + RoPE as m3g_headnorm_rope (norm weight w of w_dtype); w NULL: the row
 * as is (a copy / bf16 conversion). Outputs (each may be NULL): dst fp32
 * [rows, nheads, hd], dst16 raw bf16 bits of round_bf16(result); row =
 * slot(t) (the paged slot of pos0 + t) when paged bit 0 (dst) / bit 1
 * (dst16) is set, else t. rng != NULL (with dst16): dst16's values folded
 * into those exponent range words, as m3g_to_bf16_ranged. */
#define M3G_PRO_MAXJ 6
typedef struct m3g_pro_job {
    const float *src;
    float *dst;
    uint16_t *dst16;
    unsigned *rng;
    const void *w;
    int w_dtype, nheads, hd, paged;
} m3g_pro_job;

/* The attention prologue (QK-norm + RoPE of q / k / index q / index k, the
 * cache writes, bf16 copies): njobs <= M3G_PRO_MAXJ jobs sharing T rows,
 * the page table (pages of B positions, first position pos0), rd and the
 * RoPE tables cos_t/sin_t [T, rd/2], eps, mode. */
typedef struct m3g_prologue {
    m3g_pro_job job[M3G_PRO_MAXJ];
    int njobs, T, B, rd, mode;
    int64_t pos0;
    const int32_t *page_table;
    const float *cos_t, *sin_t;
    float eps;
    int no_release; /* benchmark knob: 1 = do not release the next kernel early (PDL) */
} m3g_prologue;

/* All jobs of p in one launch, each result bitwise that of the separate
 * launchers (m3g_headnorm_rope / _bf16, m3g_to_bf16, m3g_to_bf16_ranged,
 * a copy). Jobs must not write what another job reads; dst may be src.
 * NVIDIA: releases the next kernel at its start (PDL, as
 * m3g_residual_rmsnorm_ex) unless no_release. */
hipError_t m3g_attn_prologue(const m3g_prologue *p, hipStream_t st);

/* ---- attention.cu ------------------------------------------------------ */
/* out [T, nh, hd] for queries q [T, nh, hd] at positions pos0 + t over the
 * paged caches kc/vc [slots, nkv, hd] (ref m3_attention_row; M3-ATTN-GQA-1,
 * M3-ATTN-SCORE-1, M3-MSA-ATTN-1). blocks == NULL: dense causal; else
 * blocks [nkv, T, topk] (the dump layout of block_indices), -1 = empty.
 * Needs hd <= 128 (any hd; lanes >= hd idle when hd < 32). */
hipError_t m3g_attention(float *out, const float *q, const float *kc, const float *vc,
                         const int32_t *page_table, int B, int64_t pos0, int T, int nh, int nkv,
                         int hd, const int32_t *blocks, int topk, int mode, hipStream_t st);

/* The same result by the split-key path (flash-decoding style: one thread
 * block per (split of <= 64 keys, row, KV group), three launches, exact
 * reference rounding of p; the fast path for decode). ws: device workspace
 * of ws_floats >= m3g_attention_split_ws(...) floats, owned by the caller. */
hipError_t m3g_attention_split(float *out, const float *q, const float *kc, const float *vc,
                               const int32_t *page_table, int B, int64_t pos0, int T, int nh,
                               int nkv, int hd, const int32_t *blocks, int topk, int mode,
                               float *ws, size_t ws_floats, hipStream_t st);

/* Workspace floats m3g_attention_split needs for these shapes (host only;
 * blocks is only tested for NULL: dense vs sparse). */
size_t m3g_attention_split_ws(int B, int64_t pos0, int T, int nh, int hd, const int32_t *blocks,
                              int topk);

/* The same result by the two-launch split-key path (scores + split stats;
 * then global max/sum, p = round(exp(s - M) / L) as ref, P.V partials and a
 * last-block merge in fixed split order: deterministic). kc/vc are the paged
 * caches [slots, nkv, hd] of kv_dtype M3G_F32 or M3G_BF16 (raw bf16 bits;
 * exact in bf16 mode, where the caches hold rounded values). Needs
 * hd % 8 == 0, hd <= 128, 16-byte aligned q and caches. ws: device scratch
 * of ws_bytes, caller-owned, no initialisation needed; rows are processed
 * in chunks when ws is smaller than m3g_attention_sk_ws(..., T, ...)
 * (error if it cannot hold one row). The decode fast path; dense rows with
 * >= 512 keys take three split-key tensor-core launches on NVIDIA (same
 * exact rounding of p; m3g_attention_sk_dense_tc). */
hipError_t m3g_attention_sk(float *out, const float *q, const void *kc, const void *vc,
                            int kv_dtype, const int32_t *page_table, int B, int64_t pos0, int T,
                            int nh, int nkv, int hd, const int32_t *blocks, int topk, int mode,
                            void *ws, size_t ws_bytes, hipStream_t st);

/* Workspace bytes m3g_attention_sk needs for all T rows in one pass (host
 * only; blocks is only tested for NULL; 0 for invalid shapes). */
size_t m3g_attention_sk_ws(int B, int64_t pos0, int T, int nh, int nkv, int hd,
                           const int32_t *blocks, int topk, int kv_dtype);

/* 1 iff m3g_attention_sk takes its one-launch thread-block-cluster path for
 * these shapes (NVIDIA build, mode 1, bf16 caches, blocks != NULL, topk <=
 * 16, B <= 128; it needs no workspace then, ws may be NULL), else 0 (the two
 * launches; host only). The device may still refuse the cluster, in which
 * case the launcher runs the two launches (ws needed). */
int m3g_attention_sk_cluster(int B, int nh, int nkv, int hd, const int32_t *blocks, int topk,
                             int kv_dtype, int mode);

/* 1 iff that cluster path is the tensor-core kernel (nh / nkv <= 16, hd in
 * {16, 32, 64, 128}; else the scalar cluster kernel). Host only. */
int m3g_attention_sk_tc(int B, int nh, int nkv, int hd, const int32_t *blocks, int topk,
                        int kv_dtype, int mode);

/* 1 iff m3g_attention_sk takes its dense split-key tensor-core path for
 * blocks == NULL and `keys` keys in the last row (NVIDIA build, mode 1, bf16
 * caches, nh / nkv <= 16, hd in {16, 32, 64, 128}, keys >= 512).
 * Host only; the device or a short workspace may still refuse it. */
int m3g_attention_sk_dense_tc(int64_t keys, int nh, int nkv, int hd, int kv_dtype, int mode);

/* m3g_attention_sk with the benchmark's yardsticks (probe 0 = m3g_attention_sk;
 * timing only, the same results): */
#define M3G_SK_TWO_LAUNCH 1 /* the two launches where a one-launch or dense tensor-core path applies */
#define M3G_SK_DENSE_TC 64  /* dense: the split-key tensor-core path at any key count */
hipError_t m3g_attention_sk_tuned(float *out, const float *q, const void *kc, const void *vc,
                                  int kv_dtype, const int32_t *page_table, int B, int64_t pos0,
                                  int T, int nh, int nkv, int hd, const int32_t *blocks, int topk,
                                  int mode, void *ws, size_t ws_bytes, int probe,
                                  hipStream_t st);

/* ---- msa_attention.cu -------------------------------------------------- */
/* MSA block-sparse attention for prefill: the result of m3g_attention with
 * blocks [nkv, T, topk] != NULL (a set per row; -1 = empty), but the caches
 * kc/vc [slots, nkv, hd] are of kv_dtype: M3G_F32, or M3G_BF16 (raw bf16
 * bits). Tensor cores (mma.sync bf16, fp32 accumulate, two passes so that
 * p = bf16(exp(s - M) / L) as ref; the one-pass form is
 * m3g_msa_attention_prefill_onepass) when m3g_msa_attention_tc says so, else a
 * portable scalar kernel (exact p).
 * Needs hd <= 128. */
hipError_t m3g_msa_attention_prefill(float *out, const float *q, const void *kc, const void *vc,
                                     int kv_dtype, const int32_t *page_table, int B, int64_t pos0,
                                     int T, int nh, int nkv, int hd, const int32_t *blocks,
                                     int topk, int mode, hipStream_t st);

/* The same with one-pass p rounding (online softmax, FlashAttention style:
 * p rounded on the running max's scale, within the bf16 profile, M3-TOL-8)
 * on the tensor-core paths (wgmma on compute capability 9.0 at hd 128,
 * block 128, bf16 caches; mma.sync otherwise); the scalar path's exact p
 * elsewhere. */
hipError_t m3g_msa_attention_prefill_onepass(float *out, const float *q, const void *kc,
                                             const void *vc, int kv_dtype,
                                             const int32_t *page_table, int B, int64_t pos0,
                                             int T, int nh, int nkv, int hd,
                                             const int32_t *blocks, int topk, int mode,
                                             hipStream_t st);

/* 1 iff m3g_msa_attention_prefill takes the tensor-core path for these shapes
 * (NVIDIA build, mode 1, hd in {16, 32, 64, 128}, nh/nkv <= 16, B <= 128,
 * topk <= 32), else 0 (host only). */
int m3g_msa_attention_tc(int nh, int nkv, int hd, int B, int topk, int kv_dtype, int mode);

/* ---- msa.cu ------------------------------------------------------------ */
/* bs [T, G, nbmax]: for query t (pos0 + t) and index head g, the block max
 * of iq[t, g] . ik[j] over keys j <= pos in each block, -inf for blocks the
 * query cannot see (ref m3_msa_block_scores; M3-MSA-SCORE-1, M3-MSA-BLOCK-1).
 * ikc: paged index-K cache [slots, d] of ik_dtype: M3G_F32, or M3G_BF16 (raw
 * bf16 bits; exact in bf16 mode, where the cache holds rounded values; needs
 * G <= 4 and d % 8 == 0). nbmax = (pos0 + T - 1) / B + 1. */
hipError_t m3g_msa_block_scores(float *bs, const float *iq, const void *ikc, int ik_dtype,
                                const int32_t *page_table, int B, int64_t pos0, int T, int G,
                                int d, int nbmax, hipStream_t st);

/* dst [n] = bf16 bits of round_bf16(src [n]) (e.g. the bf16 index-K cache). */
hipError_t m3g_to_bf16(uint16_t *dst, const float *src, int64_t n, hipStream_t st);

/* out [G, T, topk] golden-order selections from bs [T, G, nbmax] (ref
 * m3_msa_select; M3-MSA-SELECT-*). topk <= 32. */
hipError_t m3g_msa_select(int32_t *out, const float *bs, int64_t pos0, int T, int G, int nbmax,
                          int B, int topk, int local_blocks, int init_blocks, hipStream_t st);

/* The whole indexer step in one launch (the decode path): bs as
 * m3g_msa_block_scores and out as m3g_msa_select from the same arguments
 * (ref m3_msa_block_scores + m3_msa_select; M3-MSA-SCORE-1, M3-MSA-BLOCK-1,
 * M3-MSA-SELECT-*): scores bitwise as ref, selections identical. ctr: T
 * unsigned tickets, ZEROED ONCE by the caller (every launch leaves them
 * zero); ws: scratch of ws_bytes >= m3g_msa_indexer_ws(T, G, nbmax) bytes
 * (no init); both device memory owned by the caller. Fused when G <= 4,
 * d * sizeof(ik) % 16 == 0 and B % 32 == 0 or B | 32; other shapes (or a
 * NULL / too small ctr, ws) run the two launchers above. On NVIDIA the
 * default kernel uses programmatic dependent launch and may read page_table
 * and the index-K rows of positions < pos0 before the previous kernel in
 * the stream has finished: those must not be written by it (iq, bs, out,
 * ctr, ws are touched only after it completed). */
hipError_t m3g_msa_indexer(int32_t *out, float *bs, const float *iq, const void *ikc, int ik_dtype,
                           const int32_t *page_table, int B, int64_t pos0, int T, int G, int d,
                           int nbmax, int topk, int local_blocks, int init_blocks, unsigned *ctr,
                           void *ws, size_t ws_bytes, hipStream_t st);

/* Scratch bytes m3g_msa_indexer needs for T rows (host only). */
size_t m3g_msa_indexer_ws(int T, int G, int nbmax);

/* Exponent range words of a bf16 index-K cache: device unsigned rng[2]
 * (owned by the cache's owner) covering every value written to the cache;
 * they let the indexer prove fmaf scores bitwise equal to ref's multiply-
 * then-add (msa.cu, "FMA exactness"). reset: the empty range (before the
 * first write; a superset of the range is always safe). to_bf16_ranged:
 * m3g_to_bf16 that also folds the written values into rng (rng NULL: plain
 * m3g_to_bf16). scan: folds n existing bf16 values into rng (caches filled
 * another way). All stream-ordered, no host sync, graph-capturable. */
hipError_t m3g_ik_range_reset(unsigned *rng, hipStream_t st);
hipError_t m3g_to_bf16_ranged(uint16_t *dst, const float *src, int64_t n, unsigned *rng,
                              hipStream_t st);
hipError_t m3g_ik_range_scan(unsigned *rng, const uint16_t *src, int64_t n, hipStream_t st);

/* m3g_msa_indexer with the cache's range words (NULL: multiply then add, as
 * m3g_msa_indexer). With them (bf16 cache, streaming kernel) and when the
 * per-launch check proves every product exact: on NVIDIA the scores are
 * those exact products summed on tensor cores (fp32, tensor-core order: ref
 * within fp32 rounding, M3-TOL-3; the selection is exactly the golden order
 * of these scores), elsewhere or with M3G_IDX_EXACT fmaf, bitwise as ref;
 * unproven rows multiply then add (bitwise as ref). probe: 0 or
 * M3G_IDX_EXACT in product callers; the benchmark's yardsticks (timing
 * only) OR the others: */
#define M3G_IDX_EXACT 128       /* scores bitwise as ref (no tensor cores) */
#define M3G_IDX_FUSED 8         /* the portable fused kernel instead of the streaming one */
#define M3G_IDX_SCORES_ONLY 16  /* streaming kernel: block scores only (out, ctr, ws untouched) */
#define M3G_IDX_NO_PDL 32       /* a plain launch instead of programmatic dependent launch */
#define M3G_IDX_NO_MERGE 64     /* streaming kernel: local lists and tickets, no merge */
#define M3G_IDX_CEILING 2048    /* a kernel that only streams the cache's bytes (no output); */
                                /* (probe >> 12) & 3 = log2 of its blocks per SM */
hipError_t m3g_msa_indexer_ex(int32_t *out, float *bs, const float *iq, const void *ikc,
                              int ik_dtype, const int32_t *page_table, int B, int64_t pos0, int T,
                              int G, int d, int nbmax, int topk, int local_blocks,
                              int init_blocks, unsigned *ctr, void *ws, size_t ws_bytes,
                              const unsigned *ik_range, int probe, hipStream_t st);

/* 1 iff m3g_msa_indexer_ex (16-byte aligned cache and scratch, valid ctr and
 * ws) may sum the scores on tensor cores for these arguments, ranged: range
 * words given (the per-launch check still decides per row); else 0 (host). */
int m3g_msa_indexer_tc(int ik_dtype, int B, int G, int d, int nbmax, int topk, int ranged,
                       int probe);

/* ---- moe.cu ------------------------------------------------------------ */
/* Router for T tokens (ref m3_router; M3-MOE-ROUTER-*): fp32 logits of
 * router [E, H] . x, sigmoid scores [T, E], top-k of score + bias (ties to
 * the lower id) → idx [T, k] ascending, w [T, k] renormalised. bias may be
 * NULL. k <= 32, E <= 1024. */
hipError_t m3g_router(int32_t *idx, float *w, float *scores, const float *x, m3g_mat router,
                      const void *bias, int bias_dtype, int T, int k, hipStream_t st);
/* The same; pdl 0: plain launches (m3g_router: PDL launches on NVIDIA, each
 * kernel waiting for its predecessor before reading; the same results). */
hipError_t m3g_router_ex(int32_t *idx, float *w, float *scores, const float *x, m3g_mat router,
                         const void *bias, int bias_dtype, int T, int k, int pdl, hipStream_t st);

/* act [R, I] = round(SwiGLU-OAI(gate, up)), gate/up [R, I] already rounded
 * linear outputs (ref m3_swiglu_oai; M3-MLP-SWIGLU-1). act may alias gate. */
hipError_t m3g_swiglu(float *act, const float *gate, const float *up, int64_t n, float alpha,
                      float limit, float beta, int mode, hipStream_t st);

/* MoE combine (ref m3_moe; M3-MOE-COMBINE-1): y [T, H] =
 * round(round(round(sum_k round(w_k * ye[t, k])) * scale) + shared[t]) with
 * ye [T, k, H] the expert outputs in ascending expert order; shared may be NULL. */
hipError_t m3g_moe_combine(float *y, const float *ye, const float *w, const float *shared, int T,
                           int k, int H, float scale, int mode, hipStream_t st);
/* The same; pdl 0: a plain launch (m3g_moe_combine: PDL on NVIDIA). */
hipError_t m3g_moe_combine_ex(float *y, const float *ye, const float *w, const float *shared,
                              int T, int k, int H, float scale, int mode, int pdl, hipStream_t st);

/* ---- gemv.cu / gemm.cu -------------------------------------------------- */
/* Y [T, W.rows] = X [T, W.cols] W^T, fp32 accumulation, output rounded per
 * mode (ref m3_matmul + round; M3-NUM-BF16-2 item 3). fp32 mode: the
 * reference's 8-partial order, bitwise (M3-NUM-MODE-2), any T. bf16 mode:
 * T <= 8 the streaming GEMV (bf16 weights); larger T BLAS when built with
 * it (bf16 weights), else the tiled fallback GEMM. ldy: row stride of Y
 * (>= W.rows). */
hipError_t m3g_linear(float *Y, int ldy, const float *X, m3g_mat W, int T, int mode,
                      m3g_blas *blas, hipStream_t st);

/* Y [T, W.rows] = X W^T before any rounding (for layers that add a bias to
 * the unrounded product, ref vision.c linear_bias): bf16 mode with BLAS
 * (bf16 weights, T > 8, contiguous Y): the vendor GEMM's fp32 output, its
 * own summation order; otherwise m3g_linear's mode-0 kernel (ref's order). */
hipError_t m3g_linear_product(float *Y, int ldy, const float *X, m3g_mat W, int T, int mode,
                              m3g_blas *blas, hipStream_t st);

/* One output of a fused projection: the next `rows` rows of the
 * concatenated weight go to y [T, ld] (see m3g_linear_multi). */
#define M3G_MAX_SEG 6
typedef struct m3g_seg {
    float *y;
    int ld;
    int rows;
} m3g_seg;

/* Fused projections sharing the input X [T, W.cols] (e.g. q/k/v/index q/k):
 * W is the concatenation [W_0; W_1; ...] of nseg <= M3G_MAX_SEG matrices
 * (rows summing to W.rows); seg[s].y = X W_s^T, each exactly as m3g_linear
 * on W_s would give. T <= 8 (and fp32 mode): one pass over W; else one
 * GEMM per segment. */
hipError_t m3g_linear_multi(const float *X, m3g_mat W, const m3g_seg *seg, int nseg, int T,
                            int mode, m3g_blas *blas, hipStream_t st);

/* act [T, ld] = round(SwiGLU-OAI(round(X Wg^T), round(X Wu^T))) for
 * W = [Wg; Wu] (2I rows, gate first) = m3g_linear twice + m3g_swiglu
 * (M3-MLP-SWIGLU-1, M3-MOE-SHARED-1). T <= 8 (and fp32 mode): one GEMV with
 * the SwiGLU epilogue; else needs ld == I and up_tmp [T, I] (scratch). */
hipError_t m3g_linear_swiglu(float *act, int ld, float *up_tmp, const float *X, m3g_mat W, int T,
                             float alpha, float limit, float beta, int mode, m3g_blas *blas,
                             hipStream_t st);

/* Grouped GEMV for MoE (M3-MOE-EXPERT-1): for token t and slot s < k,
 * Y[t, s, :rows] = W_e X[t*xs + s*xk, :] with e = idx[t, k], W_e = base +
 * e * expert_stride elements (all experts share dtype and shape).
 * xs/xk: row strides of X per token / per slot (xk = 0 to share one input). */
hipError_t m3g_gemv_grouped(float *Y, const float *X, int64_t xs, int64_t xk, const void *base,
                            int64_t expert_stride, int dtype, int rows, int cols,
                            const int32_t *idx, int T, int k, int mode, hipStream_t st);
/* The same; pdl 0: a plain launch (m3g_gemv_grouped: PDL on NVIDIA, the
 * kernel waiting for its predecessor before it reads idx or X). */
hipError_t m3g_gemv_grouped_ex(float *Y, const float *X, int64_t xs, int64_t xk, const void *base,
                               int64_t expert_stride, int dtype, int rows, int cols,
                               const int32_t *idx, int T, int k, int mode, int pdl,
                               hipStream_t st);

/* act [T, k, rows] = round(SwiGLU-OAI(gate, up)) with gate / up the grouped
 * GEMVs of gate_base / up_base (same expert stride, dtype, shape): bitwise
 * m3g_gemv_grouped twice + m3g_swiglu, in one launch (M3-MOE-EXPERT-1,
 * M3-MLP-SWIGLU-1). act must not overlap X. */
hipError_t m3g_gemv_grouped_swiglu(float *act, const float *X, int64_t xs, int64_t xk,
                                   const void *gate_base, const void *up_base,
                                   int64_t expert_stride, int dtype, int rows, int cols,
                                   const int32_t *idx, int T, int k, float alpha, float limit,
                                   float beta, int mode, hipStream_t st);
/* The same; pdl 0: a plain launch (default: PDL on NVIDIA, as above). */
hipError_t m3g_gemv_grouped_swiglu_ex(float *act, const float *X, int64_t xs, int64_t xk,
                                      const void *gate_base, const void *up_base,
                                      int64_t expert_stride, int dtype, int rows, int cols,
                                      const int32_t *idx, int T, int k, float alpha, float limit,
                                      float beta, int mode, int pdl, hipStream_t st);

/* Benchmark / tuning only (gpu/bench.cu): the bf16-mode streaming GEMV
 * (T <= 8, bf16 weights) of m3g_linear_multi, or of m3g_linear_swiglu when
 * swiglu = {alpha, limit, beta} (then seg[0] is act [T, ld], nseg 1), run
 * in kernel configuration `variant`: 0 the default choice, 1.. the others
 * (names: m3g_gemv_variant_name; NULL past the last). hipErrorInvalidValue
 * where the variant does not apply to the shape. */
hipError_t m3g_gemv_variant(int variant, const float *X, m3g_mat W, const m3g_seg *seg, int nseg,
                            const float *swiglu, int T, hipStream_t st);
const char *m3g_gemv_variant_name(int variant);

/* Benchmark only: a kernel that just streams W's bytes (no arithmetic; at
 * most one value stored to sink[< nsink]), the bandwidth ceiling for a GEMV
 * over W under the same harness. variant 0: 4 blocks per SM with PDL, 1:
 * without PDL, 2: 2 blocks per SM with PDL, 3: as 0 with half the loads in
 * flight (names: m3g_gemv_ceiling_name; NULL past the last). */
hipError_t m3g_gemv_ceiling(int variant, m3g_mat W, float *sink, int nsink, hipStream_t st);
const char *m3g_gemv_ceiling_name(int variant);

/* Round x [n] to bf16 in place when mode == 1. */
hipError_t m3g_round(float *x, int64_t n, int mode, hipStream_t st);

/* BLAS context for m3g_linear: handle + a bf16 staging buffer for X of at
 * most max_x elements. NULL (or a build without M3_HAVE_BLAS) means the
 * hand-written kernels only. m3g_blas_new returns NULL on failure or when
 * BLAS is not compiled in; the caller frees with m3g_blas_free (NULL ok). */
m3g_blas *m3g_blas_new(hipStream_t st, size_t max_x);
void m3g_blas_free(m3g_blas *b);
/* Use cuBLASLt (heuristic algorithm, 32 MiB workspace; NVIDIA builds) for
 * the GEMMs when on != 0 (the default), else cublasGemmEx / hipBLAS.
 * Returns whether Lt is now in use (0 where it is not available). */
int m3g_blas_use_lt(m3g_blas *b, int on);

/* ---- vision.cu (the vision tower; orchestration in gpu/vision_host.cu) ------- */
/* y [T, n] = LayerNorm(x) * w + b (ref m3_layernorm: serial double mean and
 * variance, fp32 affine step; M3-VIS-LN-1), rounded per mode; y may be x. */
hipError_t m3g_layernorm(float *y, const float *x, const void *w, int w_dtype, const void *b,
                         int b_dtype, int T, int n, float eps, int mode, hipStream_t st);

/* Epilogue of a vision linear y [T, n] (an unrounded m3g_linear mode-0
 * output; ref vision.c linear_bias / m3_gelu): y = round(y + b) when b != NULL;
 * then y = round(GELU_erf(y)) when gelu (M3-VIS-MLP-1); then
 * resid = round(resid + y) when resid != NULL (the residual add). */
hipError_t m3g_bias_act(float *y, const void *b, int b_dtype, int64_t T, int n, int gelu,
                        float *resid, int mode, hipStream_t st);

/* x [T, nh, hd] in place: rotate-half RoPE over the first rd dims in fp32
 * with cos_t/sin_t [T, rd/2] (the host tables of m3_vision_rope_table), then
 * every dim rounded per mode (ref m3_vision_forward; M3-VIS-ROPE-2). */
hipError_t m3g_vision_rope(float *x, int T, int nh, int hd, int rd, const float *cos_t,
                           const float *sin_t, int mode, hipStream_t st);

/* out [len, nh, hd]: full bidirectional attention of the len rows of one
 * segment, q/k/v [len, nh, hd], scale hd^-0.5 (ref vision.c
 * segment_attention; M3-VIS-ATTN-1, M3-VIS-SEG-1). Probabilities and
 * outputs rounded per mode. ref's summation orders, except in bf16 mode
 * with hd <= 128 on NVIDIA (tensor cores; see the _variant form). hd <= 1024.
 * ws: the caller's work area of m3g_vision_attention_ws_elems elements, or
 * NULL (then the slower tile-by-tile tensor-core kernel). */
hipError_t m3g_vision_attention(float *out, const float *q, const float *k, const float *v,
                                int len, int nh, int hd, int mode, uint16_t *ws, hipStream_t st);

/* uint16 elements of the work area m3g_vision_attention uses for len rows
 * (bf16 copies of q, k, v, dims padded to 16); 0 where no kernel uses one
 * (fp32 mode, hd > 128, builds without tensor cores). ws may then be NULL. */
size_t m3g_vision_attention_ws_elems(int len, int nh, int hd, int mode);

/* m3g_vision_attention in a chosen kernel (gpu/bench.cu): variant 0 the
 * default (bf16 mode, hd <= 128, NVIDIA: a tensor-core kernel, whose dot,
 * sum and P.V orders differ from ref's -- variant 4 when ws is given (3
 * when 128-row CTAs would not fill the GPU twice), else 2; otherwise the
 * exact one), 1 the exact kernel, 2 the tensor-core kernel
 * staging fp32 q/k/v tile by tile, 3 the same kernel's arithmetic on bf16
 * copies made once into ws and double-buffered with cp.async (bitwise
 * equal to 2), 4 the same as 3 with 8 warps (128 query rows) per CTA.
 * hipErrorInvalidValue where the variant does not apply.
 * Names: m3g_vision_attention_variant_name (NULL past the last). */
hipError_t m3g_vision_attention_variant(int variant, float *out, const float *q, const float *k,
                                        const float *v, int len, int nh, int hd, int mode,
                                        uint16_t *ws, hipStream_t st);
const char *m3g_vision_attention_variant_name(int variant);

/* A device vector: data and its M3G_ dtype. */
typedef struct m3g_vec {
    const void *p;
    int dt;
} m3g_vec;

/* Y [T, W.rows] = round(X W^T + b) (ref vision.c linear_bias: the bias added
 * to the unrounded product, one rounding; b.p NULL: no bias), then
 * round(GELU_erf) when gelu, then resid = round(resid + Y) when resid.
 * The product is m3g_linear_product (BLAS in bf16 mode when blas is set). */
hipError_t m3g_linear_bias(float *Y, const float *X, m3g_mat W, m3g_vec b, int64_t T, int gelu,
                           float *resid, int mode, m3g_blas *blas, hipStream_t st);

/* One vision encoder layer's device weights (ref m3_vision_layer_weights). */
typedef struct m3g_vis_layer {
    m3g_vec ln1_w, ln1_b, ln2_w, ln2_b, q_b, k_b, v_b, o_b, fc1_b, fc2_b;
    m3g_mat q, k, v, o, fc1, fc2;
} m3g_vis_layer;

/* Device scratch of m3g_vision_layer: x, q, k, v, att, tmp [T, Hv], mlp [T, Iv]. */
typedef struct m3g_vis_scratch {
    float *x, *q, *k, *v, *att, *tmp, *mlp;
    uint16_t *att_ws; /* m3g_vision_attention_ws_elems(T, ...) elements, or NULL when that is 0 */
} m3g_vis_scratch;

/* h [T, Hv] through one encoder layer, in ref m3_vision_forward's order
 * (M3-VIS-LAYER-1): LayerNorm, q/k/v + bias, 3D RoPE on q and k with the
 * device tables cos_t/sin_t [T, rd/2], attention within each of the nseg
 * segments (host arrays seg_start/seg_len, rows), o_proj + residual,
 * LayerNorm, fc1 + GELU, fc2 + residual. nh heads of hd = Hv / nh; blas
 * as m3g_linear_bias (NULL: the exact mode-0 products). */
hipError_t m3g_vision_layer(float *h, const m3g_vis_layer *w, const m3g_vis_scratch *s, int64_t T,
                            int nh, int hd, int rd, const float *cos_t, const float *sin_t,
                            const int64_t *seg_start, const int64_t *seg_len, int nseg, float eps,
                            int mode, m3g_blas *blas, hipStream_t st);

/* dst row rows[f] (row stride ld) = src row f [H] for f < n (the placement
 * of vision features into placeholder rows, ref m3_mm_embed; M3-EMB-3). */
hipError_t m3g_scatter_rows(float *dst, int ld, const float *src, const int32_t *rows,
                            int64_t n, int H, hipStream_t st);

#endif
