/* rope.h — rotary position embedding, rotate-half (NeoX) form, partial.
 *
 * Spec: M3-ROPE-1 (inv_freq_i = 1 / theta^(2i/rotary_dim), computed in
 * double, rounded to fp32), M3-ROPE-2 (angle = fp32(pos) * inv_freq_i in
 * fp32; cos/sin evaluated in double, rounded to fp32; bf16 mode rounds the
 * tables to bf16), M3-ROPE-3 (only dims [0, rotary_dim) of each head rotate,
 * pairs (j, j + rotary_dim/2); the rest pass through).
 * The same apply function serves the vision 3D RoPE, whose tables are
 * built elsewhere (vision_rope.c) with rotary_dim 78 of head_dim 80.
 */
#ifndef M3_ROPE_H
#define M3_ROPE_H

#include <stdint.h>

#include "numerics.h"

/* cos/sin [rotary_dim/2] for position pos (one value per frequency). */
void m3_rope_table(float *cos_out, float *sin_out, int64_t pos, int rotary_dim,
                   double theta, m3_mode mode);
/* Rotate x [nheads, head_dim] in place on dims [0, rotary_dim) of each head:
 * x1' = x1 c - x2 s, x2' = x2 c + x1 s for pairs (j, j + rotary_dim/2).
 * bf16 mode rounds each product and the sum (M3-NUM-BF16-2). */
void m3_rope_apply(float *x, int nheads, int head_dim, int rotary_dim,
                   const float *cos_t, const float *sin_t, m3_mode mode);

#endif
