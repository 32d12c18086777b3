/* mlp.c — SwiGLU-OAI and the gated MLP (dense layers, experts, shared expert).
 *
 * Spec: M3-MLP-SWIGLU-1 (g = min(gate, limit); u = clamp(up, -limit, limit);
 * out = (u + beta) * (g * sigmoid(alpha * g)); gate from gate_proj/w1, up
 * from up_proj/w3, never interleaved), M3-MLP-SWIGLU-2 (clamp edges),
 * M3-MLP-SWIGLU-3 (separate projections), M3-MLP-DENSE-1 (y = down(act)),
 * M3-NUM-BF16-2 items 3 and 7 (bf16 mode: gate and up linear outputs
 * rounded, SwiGLU computed in fp32 from them and rounded, down output rounded).
 * m3_mlp_rows is m3_mlp on n rows at once (m3_matmul = m3_matvec per row).
 */
#include "mlp.h"

#include <math.h>

#include "linear.h"

float m3_swiglu_oai(float gate, float up, float alpha, float limit, float beta)
{
    float g = gate > limit ? limit : gate;                       /* from above only */
    float u = up > limit ? limit : (up < -limit ? -limit : up); /* both sides */
    float sig = 1.0f / (1.0f + expf(-(alpha * g)));
    return (u + beta) * (g * sig);
}

/* y [down->rows]; x [gate->cols]; scratch [>= 2 * gate->rows]. */
void m3_mlp(float *y, const float *x, const m3_mat *gate, const m3_mat *up, const m3_mat *down,
            const m3_text_config *c, float *scratch, m3_mode mode)
{
    const int I = gate->rows;
    float *g = scratch;     /* [I] gate, then the activation */
    float *u = scratch + I; /* [I] up */

    m3_matvec(g, gate, x);
    m3_round_mode(g, (size_t)I, mode);
    m3_matvec(u, up, x);
    m3_round_mode(u, (size_t)I, mode);
    for (int i = 0; i < I; i++)
        g[i] = m3_round1(m3_swiglu_oai(g[i], u[i], c->swiglu_alpha, c->swiglu_limit,
                                       c->swiglu_beta), mode);
    m3_matvec(y, down, g);
    m3_round_mode(y, (size_t)down->rows, mode);
}

/* y [n, down->rows]; x [n, gate->cols]; scratch [>= 2 * n * gate->rows]. */
void m3_mlp_rows(float *y, const float *x, int n, const m3_mat *gate, const m3_mat *up,
                 const m3_mat *down, const m3_text_config *c, float *scratch, m3_mode mode)
{
    const size_t I = (size_t)gate->rows, N = (size_t)n;
    float *g = scratch;         /* [n, I] gate, then the activation */
    float *u = scratch + N * I; /* [n, I] up */

    m3_matmul(g, gate, x, n);
    m3_round_mode(g, N * I, mode);
    m3_matmul(u, up, x, n);
    m3_round_mode(u, N * I, mode);
    for (size_t i = 0; i < N * I; i++)
        g[i] = m3_round1(m3_swiglu_oai(g[i], u[i], c->swiglu_alpha, c->swiglu_limit,
                                       c->swiglu_beta), mode);
    m3_matmul(y, down, g, n);
    m3_round_mode(y, N * (size_t)down->rows, mode);
}
