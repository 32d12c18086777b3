/* linear.h — y = W x for a bf16/f16/f32 weight matrix, fp32 accumulation.
 *
 * Spec: M3-NUM-MODE-1 (weights widened to fp32, fp32 accumulation in a fixed order),
 * M3-NUM-BF16-2 (linear outputs are a bf16 rounding point; the caller
 * rounds, so this file has one job).
 * The sum over c uses 8 partial sums (c mod 8) combined pairwise: a fixed order, so
 * results are the same whichever caller (prefill, decode, batch) asks.
 */
#ifndef M3_LINEAR_H
#define M3_LINEAR_H

#include "weights.h"

/* y[r] = sum_c W[r, c] * x[c] for r < W->rows; x has W->cols entries. */
void m3_matvec(float *y, const m3_mat *W, const float *x);
/* Y[i, :] = m3_matvec(W, X[i, :]) for i < n; Y [n, rows], X [n, cols]. */
void m3_matmul(float *Y, const m3_mat *W, const float *X, int n);
/* The plain triple-indexed loop (m3_mat_at per element); the benchmark baseline. */
void m3_matvec_naive(float *y, const m3_mat *W, const float *x);

#endif
