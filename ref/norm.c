/* norm.c — Gemma-style RMSNorm (all M3 text norms).
 *
 * Spec: M3-NORM-1 (y = x * rsqrt(mean(x^2) + eps) * (1 + w), fp32 math,
 * zero-centred weights), M3-ATTN-QKNORM-1 (per-head use with one shared
 * weight), M3-NUM-BF16-2 item 2 (bf16 mode rounds the output once).
 *
 * Order: sum of squares in one fp32 accumulator, ascending i; mean = sum / n;
 * r = 1 / sqrtf(mean + eps); y[i] = (x[i] * r) * (1 + w[i]).
 */
#include "norm.h"

#include <math.h>

/* y [n], x [n], w->n == n; y may alias x. */
void m3_rmsnorm(float *y, const float *x, const m3_vec *w, int n, float eps, m3_mode mode)
{
    float ss = 0.0f;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) {
        float v = (x[i] * r) * (1.0f + m3_vec_at(w, i));
        y[i] = m3_round1(v, mode);
    }
}

/* x [nheads, hd] in place; w [hd] shared by all heads. */
void m3_rmsnorm_heads(float *x, int nheads, int hd, const m3_vec *w, float eps, m3_mode mode)
{
    for (int h = 0; h < nheads; h++)
        m3_rmsnorm(x + (size_t)h * (size_t)hd, x + (size_t)h * (size_t)hd, w, hd, eps, mode);
}
