/* mlp.h — SwiGLU-OAI and the gated MLP used by dense layers, experts and the
 * shared expert.
 *
 * Spec: M3-MLP-SWIGLU-1 (gate = min(gate, limit); up = clamp(up, -limit,
 * limit); out = (up + beta) * gate * sigmoid(alpha * gate)), M3-MLP-DENSE-1
 * (y = down((gate_proj x, up_proj x) -> SwiGLU-OAI)), M3-NUM-BF16-2.
 */
#ifndef M3_MLP_H
#define M3_MLP_H

#include "config.h"
#include "numerics.h"
#include "weights.h"

/* SwiGLU-OAI of one (gate, up) pair, in fp32. */
float m3_swiglu_oai(float gate, float up, float alpha, float limit, float beta);
/* y [down->rows] = down(SwiGLU-OAI(gate x, up x)); x [gate->cols];
 * scratch >= 2 * gate->rows floats. bf16 mode rounds gate/up/act/y. */
void m3_mlp(float *y, const float *x, const m3_mat *gate, const m3_mat *up, const m3_mat *down,
            const m3_text_config *c, float *scratch, m3_mode mode);
/* m3_mlp on each of the n rows of x [n, gate->cols] into y [n, down->rows], bit for bit;
 * scratch [2 * n * gate->rows]. */
void m3_mlp_rows(float *y, const float *x, int n, const m3_mat *gate, const m3_mat *up,
                 const m3_mat *down, const m3_text_config *c, float *scratch, m3_mode mode);

#endif
