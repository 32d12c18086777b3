/* attention.c — causal GQA attention for one query row, dense or block-sparse.
 *
 * Spec: M3-ATTN-GQA-1 (query head j reads KV head j / (nh / nkv)),
 * M3-ATTN-SCORE-1 (score = (q . k) * hd^-0.5 in fp32, fp32 softmax with the
 * max subtracted, causal k <= pos), M3-MSA-ATTN-1 (sparse: key k allowed iff
 * block(k) = k / block_size is in the KV group's list AND k <= pos; -1
 * entries ignored, duplicates harmless), M3-NUM-BF16-2 item 5 (bf16 mode:
 * probabilities rounded, P.V accumulated in fp32, output rounded).
 *
 * Order: q . k in one fp32 accumulator over d ascending (eight keys' dot
 * products run side by side, each its own chain); softmax sum over
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

/* dots[u] = q . k_u for the `nk` <= 8 keys at kk + u * stride, each in one
 * fp32 accumulator over d ascending (the keys' chains run side by side). */
static void dots8(float *dots, const float *q, const float *kk, size_t stride, int hd, int nk)
{
    float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (nk == 8) {
        for (int d = 0; d < hd; d++)
            for (int u = 0; u < 8; u++)
                a[u] += q[d] * kk[(size_t)u * stride + (size_t)d];
    } else {
        for (int u = 0; u < nk; u++)
            for (int d = 0; d < hd; d++)
                a[u] += q[d] * kk[(size_t)u * stride + (size_t)d];
    }
    for (int u = 0; u < nk; u++)
        dots[u] = a[u];
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

        /* scores; -inf marks a key that is not allowed. The allowed keys come
         * in runs (whole blocks); each run is scored eight keys at a time. */
        float mx = -INFINITY;
        for (int64_t k0 = 0; k0 <= pos;) {
            int64_t k1 = pos + 1; /* end of the run of keys sharing k0's verdict */
            int allowed = 1;
            if (list) {
                int64_t b = k0 / block_size;
                allowed = block_allowed(b, list, topk);
                if ((b + 1) * block_size < k1)
                    k1 = (b + 1) * block_size;
            }
            if (!allowed) {
                for (int64_t k = k0; k < k1; k++)
                    scratch[k] = -INFINITY;
                k0 = k1;
                continue;
            }
            for (int64_t k = k0; k < k1; k += 8) {
                int nk = k1 - k < 8 ? (int)(k1 - k) : 8;
                float dots[8];
                dots8(dots, qj, kcache + (size_t)k * kv_stride + (size_t)g * (size_t)hd,
                      kv_stride, hd, nk);
                for (int u = 0; u < nk; u++) {
                    float s = dots[u] * scale;
                    scratch[k + u] = s;
                    if (s > mx)
                        mx = s;
                }
            }
            k0 = k1;
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
