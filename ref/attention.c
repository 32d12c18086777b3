/* attention.c — causal GQA attention for one query row, dense or block-sparse.
 *
 * Spec: M3-ATTN-GQA-1 (query head j reads KV head j / (nh / nkv)),
 * M3-ATTN-SCORE-1 (score = (q . k) * hd^-0.5 in fp32, fp32 softmax with the
 * max subtracted, causal k <= pos), M3-MSA-ATTN-1 (sparse: key k allowed iff
 * block(k) = k / block_size is in the KV group's list AND k <= pos; -1
 * entries ignored, duplicates harmless), M3-NUM-BF16-2 item 5 (bf16 mode:
 * probabilities rounded, P.V accumulated in fp32, output rounded).
 *
 * Order: q . k in one fp32 accumulator over d ascending (the heads of a KV
 * group are scored side by side, each its own chain); softmax sum over
 * allowed keys ascending; p_k = e_k / sum; out[d] = sum over allowed k
 * ascending of p_k * v[k][d] in fp32. A row with no allowed key (impossible
 * when the query's own block is selected) gives zeros.
 */
#include "attention.h"

#include <math.h>

/* 1 iff block b is in the group's block list list [topk]. */
static int block_allowed(int64_t b, const int32_t *list, int topk)
{
    for (int t = 0; t < topk; t++)
        if (list[t] >= 0 && (int64_t)list[t] == b)
            return 1;
    return 0;
}

/* Heads of a group scored together (the lanes of the dot-product loop). */
#define HB 16

/* acc[i] = q_i . kk for nb <= HB heads whose queries are the columns of qt
 * [hd][ldq], each in one fp32 accumulator over d ascending. */
static inline void head_dots(float *acc, const float *qt, int ldq, const float *kk, int hd,
                             int nb)
{
    float a[HB] = {0};
    for (int d = 0; d < hd; d++) {
        const float kd = kk[d];
        const float *qd = qt + (size_t)d * (size_t)ldq;
        for (int i = 0; i < nb; i++)
            a[i] += qd[i] * kd;
    }
    for (int i = 0; i < nb; i++)
        acc[i] = a[i];
}

size_t m3_attention_scratch(int64_t pos, int nh, int nkv, int hd)
{
    const size_t G = (size_t)(nh / nkv);
    return G * (size_t)(pos + 1) + G * (size_t)hd;
}

/* out [nh, hd]; q [nh, hd]; kcache, vcache [>= pos+1, nkv, hd];
 * blocks NULL or [nkv, topk]; scratch [m3_attention_scratch(pos, nh, nkv, hd)]. */
void m3_attention_row(float *out, const float *q, const float *kcache, const float *vcache,
                      int64_t pos, int nh, int nkv, int hd, const int32_t *blocks, int topk,
                      int block_size, float *scratch, m3_mode mode)
{
    const float scale = (float)(1.0 / sqrt((double)hd));
    const int G = nh / nkv; /* query heads per KV group */
    const size_t kv_stride = (size_t)nkv * (size_t)hd; /* floats per cache row */
    const size_t np = (size_t)(pos + 1);
    float *qt = scratch;                    /* [hd][G] the group's queries, transposed */
    float *P = scratch + (size_t)hd * G;    /* [G][pos+1] scores, then probabilities */

    for (int g = 0; g < nkv; g++) {
        const int32_t *list = blocks ? blocks + (size_t)g * (size_t)topk : NULL;
        const float *qg = q + (size_t)g * G * (size_t)hd;
        float *og = out + (size_t)g * G * (size_t)hd;
        for (int i = 0; i < G; i++)
            for (int d = 0; d < hd; d++)
                qt[(size_t)d * G + i] = qg[(size_t)i * hd + d];

        /* scores of every head of the group; -inf marks a key that is not
         * allowed. Allowed keys come in runs (whole blocks). */
        for (int64_t k0 = 0; k0 <= pos;) {
            int64_t k1 = pos + 1; /* end of the run of keys sharing k0's verdict */
            int allowed = 1;
            if (list) {
                int64_t b = k0 / block_size;
                allowed = block_allowed(b, list, topk);
                if ((b + 1) * block_size < k1)
                    k1 = (b + 1) * block_size;
            }
            for (int64_t k = k0; k < k1; k++) {
                const float *kk = kcache + (size_t)k * kv_stride + (size_t)g * (size_t)hd;
                for (int i0 = 0; i0 < G; i0 += HB) {
                    const int nb = G - i0 < HB ? G - i0 : HB;
                    float dots[HB];
                    if (!allowed) {
                        for (int i = 0; i < nb; i++)
                            P[(size_t)(i0 + i) * np + (size_t)k] = -INFINITY;
                        continue;
                    }
                    if (nb == HB)
                        head_dots(dots, qt + i0, G, kk, hd, HB);
                    else
                        head_dots(dots, qt + i0, G, kk, hd, nb);
                    for (int i = 0; i < nb; i++)
                        P[(size_t)(i0 + i) * np + (size_t)k] = dots[i] * scale;
                }
            }
            k0 = k1;
        }

        /* softmax in fp32, head by head */
        for (int i = 0; i < G; i++) {
            float *p = P + (size_t)i * np;
            float mx = -INFINITY;
            for (size_t k = 0; k < np; k++)
                if (p[k] > mx)
                    mx = p[k];
            if (mx == -INFINITY) { /* no allowed key: zeros */
                for (size_t k = 0; k < np; k++)
                    p[k] = 0.0f;
                continue;
            }
            float sum = 0.0f;
            for (size_t k = 0; k < np; k++) {
                if (p[k] == -INFINITY) {
                    p[k] = 0.0f;
                    continue;
                }
                p[k] = expf(p[k] - mx);
                sum += p[k];
            }
            for (size_t k = 0; k < np; k++)
                p[k] = m3_round1(p[k] / sum, mode);
        }

        /* P.V, fp32 accumulation over k ascending; p = 0 (keys not allowed)
         * is skipped */
        for (size_t x = 0; x < (size_t)G * (size_t)hd; x++)
            og[x] = 0.0f;
        for (size_t k = 0; k < np; k++) {
            const float *vv = vcache + k * kv_stride + (size_t)g * (size_t)hd;
            for (int i = 0; i < G; i++) {
                const float pk = P[(size_t)i * np + k];
                if (pk == 0.0f)
                    continue;
                float *oj = og + (size_t)i * hd;
                for (int d = 0; d < hd; d++)
                    oj[d] += pk * vv[d];
            }
        }
        m3_round_mode(og, (size_t)G * (size_t)hd, mode);
    }
}
