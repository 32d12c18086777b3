/* attention.c — causal GQA attention for one query row, dense or block-sparse.
 *
 * Spec: M3-ATTN-GQA-1 (query head j reads KV head j / (nh / nkv)),
 * M3-ATTN-SCORE-1 (score = (q . k) * hd^-0.5 in fp32, fp32 softmax with the
 * max subtracted, causal k <= pos), M3-MSA-ATTN-1 (sparse: key k allowed iff
 * block(k) = k / block_size is in the KV group's list AND k <= pos; -1
 * entries ignored, duplicates harmless), M3-NUM-BF16-2 item 5 (bf16 mode:
 * probabilities rounded, P.V accumulated in fp32, output rounded).
 *
 * Order: q . k in one fp32 accumulator over d ascending; softmax sum over
 * allowed keys ascending; p_k = e_k / sum; out[d] = sum over allowed k
 * ascending of p_k * v[k][d] in fp32. A row with no allowed key (impossible
 * when the query's own block is selected) gives zeros.
 */
#include "attention.h"

#include <math.h>

/* 1 iff key k is allowed for a group whose block list is list [topk]. */
static int key_allowed(int64_t k, const int32_t *list, int topk, int block_size)
{
    int64_t b = k / block_size;
    for (int t = 0; t < topk; t++)
        if (list[t] >= 0 && (int64_t)list[t] == b)
            return 1;
    return 0;
}

/* out [nh, hd]; q [nh, hd]; kcache, vcache [>= pos+1, nkv, hd];
 * blocks NULL or [nkv, topk]; scratch [>= pos+1]. */
void m3_attention_row(float *out, const float *q, const float *kcache, const float *vcache,
                      int64_t pos, int nh, int nkv, int hd, const int32_t *blocks, int topk,
                      int block_size, float *scratch, m3_mode mode)
{
    const float scale = (float)(1.0 / sqrt((double)hd));
    const int per_group = nh / nkv;
    const size_t kv_stride = (size_t)nkv * (size_t)hd; /* floats per cache row */

    for (int j = 0; j < nh; j++) {
        const int g = j / per_group;
        const float *qj = q + (size_t)j * (size_t)hd;
        const int32_t *list = blocks ? blocks + (size_t)g * (size_t)topk : NULL;
        float *oj = out + (size_t)j * (size_t)hd;

        /* scores; -inf marks a key that is not allowed */
        float mx = -INFINITY;
        for (int64_t k = 0; k <= pos; k++) {
            if (list && !key_allowed(k, list, topk, block_size)) {
                scratch[k] = -INFINITY;
                continue;
            }
            const float *kk = kcache + (size_t)k * kv_stride + (size_t)g * (size_t)hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++)
                dot += qj[d] * kk[d];
            float s = dot * scale;
            scratch[k] = s;
            if (s > mx)
                mx = s;
        }

        for (int d = 0; d < hd; d++)
            oj[d] = 0.0f;
        if (mx == -INFINITY)
            continue; /* no allowed key */

        /* softmax in fp32 */
        float sum = 0.0f;
        for (int64_t k = 0; k <= pos; k++) {
            if (scratch[k] == -INFINITY) {
                scratch[k] = 0.0f;
                continue;
            }
            scratch[k] = expf(scratch[k] - mx);
            sum += scratch[k];
        }
        for (int64_t k = 0; k <= pos; k++)
            scratch[k] = m3_round1(scratch[k] / sum, mode);

        /* P.V, fp32 accumulation; keys that are not allowed have p = 0 */
        for (int64_t k = 0; k <= pos; k++) {
            float p = scratch[k];
            if (p == 0.0f)
                continue;
            const float *vv = vcache + (size_t)k * kv_stride + (size_t)g * (size_t)hd;
            for (int d = 0; d < hd; d++)
                oj[d] += p * vv[d];
        }
        m3_round_mode(oj, (size_t)hd, mode);
    }
}
