/* layernorm.h — LayerNorm with weight and bias (the vision tower's norm).
 *
 * Spec: M3-VIS-LN-1 (y = (x - mean) * rsqrt(var + eps) * w + b, biased
 * variance, fp32 math; eps 1e-5 from vision_config.layer_norm_eps).
 */
#ifndef M3_LAYERNORM_H
#define M3_LAYERNORM_H

#include "numerics.h"
#include "weights.h"

/* y[0..n) = LayerNorm(x[0..n)) with weight w and bias b; y may alias x.
 * bf16 mode rounds the output (M3-NUM-BF16-2). */
void m3_layernorm(float *y, const float *x, const m3_vec *w, const m3_vec *b, int n, float eps,
                  m3_mode mode);

#endif
