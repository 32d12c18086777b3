/* moe.c — sigmoid router with correction bias, routed experts, shared expert.
 *
 * Spec: M3-MOE-ROUTER-1 (fp32 logits from the fp32-widened input, sigmoid),
 * M3-MOE-ROUTER-2 (choose top-k of sigmoid + bias; ties to the lower expert
 * id), M3-MOE-ROUTER-3 (weights = un-biased sigmoids of the chosen,
 * renormalised to sum 1; idx ascending with w aligned), M3-MOE-EXPERT-1
 * (each expert is the SwiGLU-OAI MLP of mlp.c), M3-MOE-SHARED-1 (shared
 * expert: intermediate shared_intermediate_size, unscaled, ungated; absent
 * when n_shared_experts == 0), M3-MOE-COMBINE-1 (y = scale * sum_k w_k E_k(x)
 * + shared(x)), M3-NUM-BF16-2 item 8 (bf16 mode: each expert output, each
 * w_k * y_k, the fp32 sum over experts in ascending id, the scaled sum and
 * the final + shared are rounded). The router never rounds, in any mode.
 *
 * Orders: router logits use m3_matvec; the weight normaliser sums the chosen
 * sigmoids in ascending expert id; w_k = s_k / sum.
 *
 * m3_moe computes one row; m3_moe_rows computes n rows with the same
 * arithmetic per row, batching the rows routed to each expert (each expert's
 * weights are read once per call, not once per row). It walks the experts in
 * ascending id and adds each one's weighted output to the rows that chose it;
 * a row's chosen ids ascend, so every row sees its additions in the order of
 * m3_moe, and m3_matmul gives the bits of m3_matvec.
 */
#include "moe.h"

#include <math.h>
#include <string.h>

#include "linear.h"
#include "mlp.h"

/* 1 iff (value va, id a) ranks before (vb, b): larger value, then lower id. */
static int ranks_before(float va, int a, float vb, int b)
{
    return va > vb || (va == vb && a < b);
}

static void router_pick(int32_t *idx, float *w, float *scores, int E, const m3_vec *bias,
                        int use_bias, int k);

/* idx [k], w [k], scores [E]; x [H]; router (E, H); bias [E]. */
void m3_router(int32_t *idx, float *w, float *scores, const float *x, const m3_mat *router,
               const m3_vec *bias, int use_bias, int k)
{
    m3_matvec(scores, router, x); /* logits, fp32 */
    router_pick(idx, w, scores, router->rows, bias, use_bias, k);
}

/* The router after its logits: scores [E] holds the logits on entry and the
 * sigmoids on return; idx, w [k] as m3_router. */
static void router_pick(int32_t *idx, float *w, float *scores, int E, const m3_vec *bias,
                        int use_bias, int k)
{
    const int biased = use_bias && bias && bias->data;
    for (int e = 0; e < E; e++)
        scores[e] = 1.0f / (1.0f + expf(-scores[e]));

    /* top-k of the choice values, picked one at a time: each pick is the best
     * candidate ranked strictly after the previous pick (a total order). */
    float last_v = INFINITY;
    int last_e = -1;
    for (int t = 0; t < k; t++) {
        int pick = -1;
        float pick_v = 0.0f;
        for (int e = 0; e < E; e++) {
            float v = scores[e] + (biased ? m3_vec_at(bias, e) : 0.0f);
            if (last_e >= 0 && !ranks_before(last_v, last_e, v, e))
                continue;
            if (pick < 0 || ranks_before(v, e, pick_v, pick)) {
                pick = e;
                pick_v = v;
            }
        }
        if (pick < 0)
            pick = t < E ? t : E - 1; /* only with NaN scores or k > E: keep idx defined */
        idx[t] = pick;
        last_v = pick_v;
        last_e = pick;
    }

    /* ascending expert id (insertion sort of k entries) */
    for (int a = 1; a < k; a++) {
        int32_t v = idx[a];
        int b = a;
        for (; b > 0 && idx[b - 1] > v; b--)
            idx[b] = idx[b - 1];
        idx[b] = v;
    }

    float sum = 0.0f;
    for (int t = 0; t < k; t++)
        sum += scores[idx[t]];
    for (int t = 0; t < k; t++)
        w[t] = scores[idx[t]] / sum;
}

/* y [H]; x [H]; idx, w [k]; scores [E]; scratch [>= 2*I + 2*Is + 2*H]. */
void m3_moe(float *y, const float *x, const m3_layer_weights *lw, const m3_text_config *c,
            int32_t *idx, float *w, float *scores, float *scratch, m3_mode mode)
{
    const int H = c->hidden_size;
    const int I = c->intermediate_size, Is = c->shared_intermediate_size;
    const int k = c->num_experts_per_tok;
    float *mlp_scratch = scratch;                           /* [2 * max(I, Is)] */
    float *ye = scratch + 2 * (size_t)I + 2 * (size_t)Is;   /* [H] one expert's output */
    float *acc = ye + H;                                    /* [H] routed sum */

    m3_router(idx, w, scores, x, &lw->router, &lw->router_bias, c->use_routing_bias, k);

    for (int h = 0; h < H; h++)
        acc[h] = 0.0f;
    for (int t = 0; t < k; t++) { /* idx ascending */
        int e = idx[t];
        m3_mlp(ye, x, &lw->exp_gate[e], &lw->exp_up[e], &lw->exp_down[e], c, mlp_scratch, mode);
        for (int h = 0; h < H; h++)
            acc[h] += m3_round1(w[t] * ye[h], mode);
    }
    for (int h = 0; h < H; h++)
        acc[h] = m3_round1(m3_round1(acc[h], mode) * c->routed_scaling_factor, mode);

    /* x is read for the last time here, so y may alias x */
    if (c->n_shared_experts > 0 && lw->sh_gate.data) {
        m3_mlp(ye, x, &lw->sh_gate, &lw->sh_up, &lw->sh_down, c, mlp_scratch, mode);
        for (int h = 0; h < H; h++)
            y[h] = m3_round1(acc[h] + ye[h], mode);
    } else {
        for (int h = 0; h < H; h++)
            y[h] = acc[h];
    }
}

size_t m3_moe_rows_scratch(const m3_text_config *c, int n, int R)
{
    size_t H = (size_t)c->hidden_size, I = (size_t)c->intermediate_size;
    size_t Is = (size_t)c->shared_intermediate_size, N = (size_t)n, r = (size_t)R;
    size_t mlp = 2 * (I > Is ? I : Is);
    /* acc [n, H], xg [R, H], ye [R, H], mlp [R, mlp], wsel [n] */
    return N * H + 2 * r * H + r * mlp + N;
}

/* Rows sel [m] of x go through the MLP (gate, up, down) in batches of R;
 * each output row, times wsel, is added (rounded per mode) to acc[sel]. With
 * wsel NULL the output replaces acc's row through the shared-expert combine. */
static void expert_rows(float *acc, const float *x, const int32_t *sel, const float *wsel, int m,
                        const m3_mat *gate, const m3_mat *up, const m3_mat *down,
                        const m3_text_config *c, float *xg, float *ye, float *mlp, int R,
                        m3_mode mode)
{
    const size_t H = (size_t)c->hidden_size;
    for (int b0 = 0; b0 < m; b0 += R) {
        int nb = m - b0 < R ? m - b0 : R;
        for (int i = 0; i < nb; i++)
            memcpy(xg + (size_t)i * H, x + (size_t)sel[b0 + i] * H, sizeof(float) * H);
        m3_mlp_rows(ye, xg, nb, gate, up, down, c, mlp, mode);
        for (int i = 0; i < nb; i++) {
            float *a = acc + (size_t)sel[b0 + i] * H;
            const float *o = ye + (size_t)i * H;
            if (wsel) {
                const float wt = wsel[b0 + i];
                for (size_t h = 0; h < H; h++)
                    a[h] += m3_round1(wt * o[h], mode);
            } else {
                for (size_t h = 0; h < H; h++)
                    a[h] = m3_round1(a[h] + o[h], mode);
            }
        }
    }
}

/* y [n, H]; x [n, H]; idx, w [n, k]; scores [n, E]; sel [n]; scratch
 * [m3_moe_rows_scratch(c, n, R)]. */
void m3_moe_rows(float *y, const float *x, int n, const m3_layer_weights *lw,
                 const m3_text_config *c, int32_t *idx, float *w, float *scores, int32_t *sel,
                 float *scratch, int R, m3_mode mode)
{
    const size_t H = (size_t)c->hidden_size, N = (size_t)n;
    const int k = c->num_experts_per_tok, E = c->num_experts;
    float *acc = scratch;          /* [n, H] routed sums */
    float *xg = acc + N * H;       /* [R, H] gathered input rows */
    float *ye = xg + (size_t)R * H; /* [R, H] their expert outputs */
    float *wsel = ye + (size_t)R * H; /* [n] */
    float *mlp = wsel + N;         /* [R, 2 * max(I, Is)] */

    m3_matmul(scores, &lw->router, x, n); /* logits, fp32, = m3_matvec per row */
    for (int t = 0; t < n; t++)
        router_pick(idx + (size_t)t * k, w + (size_t)t * k, scores + (size_t)t * E, E,
                    &lw->router_bias, c->use_routing_bias, k);

    memset(acc, 0, sizeof(float) * N * H);
    for (int e = 0; e < E; e++) { /* ascending id */
        int m = 0;
        for (int t = 0; t < n; t++)
            for (int j = 0; j < k; j++)
                if (idx[(size_t)t * k + j] == e) {
                    sel[m] = t;
                    wsel[m++] = w[(size_t)t * k + j];
                }
        if (m > 0)
            expert_rows(acc, x, sel, wsel, m, &lw->exp_gate[e], &lw->exp_up[e], &lw->exp_down[e],
                        c, xg, ye, mlp, R, mode);
    }
    for (size_t i = 0; i < N * H; i++)
        acc[i] = m3_round1(m3_round1(acc[i], mode) * c->routed_scaling_factor, mode);

    /* x is read for the last time here, so y may alias x */
    if (c->n_shared_experts > 0 && lw->sh_gate.data) {
        for (int t = 0; t < n; t++)
            sel[t] = t;
        expert_rows(acc, x, sel, NULL, n, &lw->sh_gate, &lw->sh_up, &lw->sh_down, c, xg, ye, mlp,
                    R, mode);
    }
    memmove(y, acc, sizeof(float) * N * H);
}
