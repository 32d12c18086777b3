/* moe.h — sigmoid router with correction bias, routed experts, shared expert.
 *
 * Spec: M3-MOE-ROUTER-1 (fp32 logits, sigmoid), M3-MOE-ROUTER-2 (choose
 * top-k of sigmoid + bias, ties to the lower expert index), M3-MOE-ROUTER-3
 * (weights = un-biased sigmoids of the chosen, renormalised to sum 1),
 * M3-MOE-COMBINE-1 (y = scale * sum_k w_k E_k(x) + shared(x), shared
 * unscaled and ungated), M3-NUM-BF16-2.
 */
#ifndef M3_MOE_H
#define M3_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "numerics.h"
#include "weights.h"

/* Route one token x [H]: idx [k] chosen experts sorted ascending, w [k] their
 * renormalised weights aligned with idx, scores [E] the sigmoid of the fp32
 * router logits. The router always runs in fp32, whatever the mode. */
void m3_router(int32_t *idx, float *w, float *scores, const float *x, const m3_mat *router,
               const m3_vec *bias, int use_bias, int k);
/* y [H] = the whole MoE block for one token x [H] (router, experts, shared).
 * idx/w/scores as m3_router (outputs); scratch >= 2*I + 2*Is + 2*H floats. */
void m3_moe(float *y, const float *x, const m3_layer_weights *lw, const m3_text_config *c,
            int32_t *idx, float *w, float *scores, float *scratch, m3_mode mode);
/* Floats of scratch m3_moe_rows needs for n rows and expert batches of R rows. */
size_t m3_moe_rows_scratch(const m3_text_config *c, int n, int R);
/* m3_moe on each of the n rows of x [n, H] into y [n, H] (y may alias x), bit for bit,
 * idx/w [n, k], scores [n, E]; experts run on batches of up to R routed rows; sel [n]. */
void m3_moe_rows(float *y, const float *x, int n, const m3_layer_weights *lw,
                 const m3_text_config *c, int32_t *idx, float *w, float *scores, int32_t *sel,
                 float *scratch, int R, m3_mode mode);

#endif
