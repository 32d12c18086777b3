/* rope.c — rotary position embedding, rotate-half (NeoX) form, partial.
 *
 * Spec: M3-ROPE-1 (inv_freq_i = fp32(1 / theta^(2i/rotary_dim)) computed in
 * double), M3-ROPE-2 (angle = fp32(pos) * inv_freq_i, one fp32 multiply;
 * cos/sin = fp32(cos/sin(double(angle)))), M3-ROPE-3 (dims [0, rotary_dim)
 * rotate in pairs (j, j + rotary_dim/2); the tail passes through untouched),
 * M3-NUM-BF16-2 item 4 (bf16 mode: tables rounded; each product and each
 * sum/difference rounded).
 */
#include "rope.h"

#include <math.h>

/* cos_out, sin_out [rotary_dim/2]. */
void m3_rope_table(float *cos_out, float *sin_out, int64_t pos, int rotary_dim,
                   double theta, m3_mode mode)
{
    int half = rotary_dim / 2;
    float fpos = (float)pos;
    for (int i = 0; i < half; i++) {
        float inv_freq = (float)(1.0 / pow(theta, (double)(2 * i) / (double)rotary_dim));
        float angle = fpos * inv_freq;
        cos_out[i] = m3_round1((float)cos((double)angle), mode);
        sin_out[i] = m3_round1((float)sin((double)angle), mode);
    }
}

/* x [nheads, head_dim] in place; cos_t, sin_t [rotary_dim/2]. */
void m3_rope_apply(float *x, int nheads, int head_dim, int rotary_dim,
                   const float *cos_t, const float *sin_t, m3_mode mode)
{
    int half = rotary_dim / 2;
    for (int h = 0; h < nheads; h++) {
        float *v = x + (size_t)h * (size_t)head_dim;
        for (int j = 0; j < half; j++) {
            float x1 = v[j], x2 = v[j + half];
            float c = cos_t[j], s = sin_t[j];
            float a = m3_round1(x1 * c, mode), b = m3_round1(x2 * s, mode);
            float d = m3_round1(x2 * c, mode), e = m3_round1(x1 * s, mode);
            v[j] = m3_round1(a - b, mode);
            v[j + half] = m3_round1(d + e, mode);
        }
    }
}
