/* drafter.h — the Eagle3 drafter on the GPU (HIP API), for bin/m3-gpu
 * generate --draft DIR: the same drafter forward as ref/eagle3.c, on device
 * buffers, driven by the speculative loop of ref/speculative.c (m3_spec_run).
 *
 * Spec: M3-EAGLE-DRAFT-2 (g = fc(cat(fc_norm_i(a_i)))), M3-EAGLE-DRAFT-3 (one
 * draft step, post-norm recurrent feature), M3-EAGLE-DRAFT-4 (norm style,
 * RoPE and head counts from the drafter's config.json), M3-CACHE-3 (the
 * drafter cache rolls back by its length).
 *
 * Numerics: the drafter computes in fp32 (M3-NUM-MODE-1) whatever the
 * target's mode, as ref. Linear layers run m3g_linear's mode-0 kernels
 * (ref's 8-partial summation order, bitwise); attention runs m3g_attention
 * (dense causal, fp32 cache). Where the order differs from ref: the sum of
 * squares of every RMSNorm is a block tree reduction (as the target's
 * m3g_residual_rmsnorm; ref sums serially), and expf in SiLU and in the
 * attention softmax is the device's (ref: the C library's) — so draft logits
 * agree with ref to fp32 rounding, not bitwise. That can change a draft only
 * at a near tie of the drafter's logits, never the greedy output (the target
 * decides every output token).
 *
 * Ownership: m3g_eagle3_new uploads the drafter's weights and allocates its
 * cache and scratch (device and host); m3g_eagle3_free releases them. The
 * host drafter (m3_eagle3) must outlive it (embedding rows are read from it).
 * Calls enqueue on the stream given at creation and synchronise before
 * returning logits.
 */
#ifndef M3_GPU_DRAFTER_H
#define M3_GPU_DRAFTER_H

#include <stdint.h>

#include "hip_compat.h"
#include "kernels/kernels.h"

extern "C" {
#include "eagle3.h"
#include "err.h"
}

typedef struct m3g_eagle3 m3g_eagle3;

/* Upload drafter d (m3_eagle3_open for this target) for calls of up to tmax
 * rows and a cache of cap positions. target_lm_head: the target's lm_head
 * on the host and target_lm_dev its device copy (data NULL: none): reused
 * when the drafter borrows the target's lm_head. NULL with e set on error. */
m3g_eagle3 *m3g_eagle3_new(const m3_eagle3 *d, const m3_mat *target_lm_head,
                           m3g_mat target_lm_dev, int tmax, int64_t cap, hipStream_t st,
                           m3_err *e);
/* Release everything m3g_eagle3_new acquired; NULL is allowed. */
void m3g_eagle3_free(m3g_eagle3 *g);
/* Positions held by the drafter cache. */
int64_t m3g_eagle3_len(const m3g_eagle3 *g);
/* Roll the drafter cache back to len positions (len <= current length). */
void m3g_eagle3_truncate(m3g_eagle3 *g, int64_t len);

/* Drafter over n <= tmax positions after those held: position i takes token
 * toks[i] (a target id) and the combined feature of the target's aux row i,
 * aux a device array [3, aux_rows, H] (tap j, row i at (j * aux_rows + i) * H;
 * as ref m3_eagle3_combine then m3_eagle3_step, one launch per op for all n
 * rows). dlog (host, NULL or [draft_vocab]) gets the last position's draft
 * logits; its post-norm feature becomes the recurrent feature. */
int m3g_eagle3_seed(m3g_eagle3 *g, const float *aux, int aux_rows, const int32_t *toks, int n,
                    float *dlog, m3_err *e);

/* One draft step (ref m3_eagle3_step) with token and the recurrent feature,
 * which the step's feature replaces; dlog (host, NULL or [draft_vocab]). */
int m3g_eagle3_step(m3g_eagle3 *g, int32_t token, float *dlog, m3_err *e);

#endif
