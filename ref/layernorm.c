/* layernorm.c — LayerNorm for the vision tower.
 *
 * Spec: M3-VIS-LN-1. Mean and variance are accumulated in double so the
 * result does not depend on the summation order; the normalisation and the
 * affine step are fp32.
 */
#include "layernorm.h"

#include <math.h>

void m3_layernorm(float *y, const float *x, const m3_vec *w, const m3_vec *b, int n, float eps,
                  m3_mode mode)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += x[i];
    float mean = (float)(sum / n);
    double ss = 0.0;
    for (int i = 0; i < n; i++) {
        double d = (double)x[i] - (double)mean;
        ss += d * d;
    }
    float inv = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = 0; i < n; i++) {
        float v = (x[i] - mean) * inv * m3_vec_at(w, i) + m3_vec_at(b, i);
        y[i] = m3_round1(v, mode);
    }
}
