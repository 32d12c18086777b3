/* norm.h — Gemma-style RMSNorm used by every M3 text norm.
 *
 * Spec: M3-NORM-1 (y = x * rsqrt(mean(x^2) + eps) * (1 + w), fp32 math,
 * weights stored zero-centred), M3-ATTN-QKNORM-1 (per-head use, one weight
 * shared by all heads). In bf16 mode the output is rounded once (M3-NUM-BF16-2).
 */
#ifndef M3_NORM_H
#define M3_NORM_H

#include "numerics.h"
#include "weights.h"

/* y[0..n) = GemmaRMSNorm(x[0..n)) with weight w (w->n == n); y may alias x. */
void m3_rmsnorm(float *y, const float *x, const m3_vec *w, int n, float eps, m3_mode mode);
/* In place on x [nheads, hd]: each head normed on its own with the shared w (hd). */
void m3_rmsnorm_heads(float *x, int nheads, int hd, const m3_vec *w, float eps, m3_mode mode);

#endif
