/* msa.c — the MSA lightning indexer: block scores and top-k block selection.
 *
 * Spec: M3-MSA-SCORE-1 (s[g, j] = iq[g] . ik[j] in fp32, keys j <= pos only,
 * no scale), M3-MSA-BLOCK-1 (block b = key slots [b*B, (b+1)*B); block score
 * = max over its visible keys, -inf if none), M3-MSA-BLOCK-2 (candidates
 * 0..qb, qb = pos / B), M3-MSA-SELECT-1..8 (forced init blocks 0..init-1 and
 * local blocks qb-local+1..qb, clamped to the candidates, always selected;
 * then the others by descending score, ties to the lower id; -inf and NaN
 * never selected unless forced; golden order: forced ascending, then by
 * score, then -1 padding; at most topk entries; per index head and row).
 * The index projections, norms and RoPE (M3-MSA-IDX-*) and the index-K cache
 * (M3-MSA-CACHE-1) are applied by the caller (model.c) with norm.c/rope.c.
 *
 * Order: each dot product is one fp32 accumulator over d ascending (the index
 * heads' products for one key run side by side, each its own chain); a block's
 * max is taken over its keys ascending.
 */
#include "msa.h"

#include <math.h>
#include <stddef.h>

int m3_msa_num_blocks(int64_t pos, int block_size)
{
    return (int)(pos / block_size) + 1;
}

/* Index heads scored together (the lanes of the dot-product loop). */
#define GB 8

/* bs [G, nb]; iq [G, d]; ikcache [>= pos+1, d]. Each key row is read once for
 * up to GB heads, whose dot products run side by side (each its own chain). */
void m3_msa_block_scores(float *bs, const float *iq, const float *ikcache, int64_t pos,
                         int G, int d, int block_size)
{
    const int nb = m3_msa_num_blocks(pos, block_size);
    for (int g0 = 0; g0 < G; g0 += GB) {
        const int ng = G - g0 < GB ? G - g0 : GB;
        const float *q = iq + (size_t)g0 * (size_t)d;
        for (int b = 0; b < nb; b++) {
            float best[GB];
            for (int g = 0; g < ng; g++)
                best[g] = -INFINITY;
            int64_t k0 = (int64_t)b * block_size, k1 = k0 + block_size;
            if (k1 > pos + 1)
                k1 = pos + 1;
            for (int64_t k = k0; k < k1; k++) {
                const float *kk = ikcache + (size_t)k * (size_t)d;
                float s[GB] = {0};
                for (int i = 0; i < d; i++)
                    for (int g = 0; g < ng; g++)
                        s[g] += q[(size_t)g * (size_t)d + (size_t)i] * kk[i];
                for (int g = 0; g < ng; g++)
                    if (s[g] > best[g])
                        best[g] = s[g];
            }
            for (int g = 0; g < ng; g++)
                bs[(size_t)(g0 + g) * (size_t)nb + (size_t)b] = best[g];
        }
    }
}

/* 1 iff block b is forced for a query in block qb. */
static int is_forced(int b, int qb, int local_blocks, int init_blocks)
{
    return b < init_blocks || (b <= qb && b > qb - local_blocks);
}

/* 1 iff (score sa, id a) comes before (sb, b) in the golden order. */
static int before(float sa, int a, float sb, int b)
{
    return sa > sb || (sa == sb && a < b);
}

/* out [G, topk]; bs [G, nb]. */
void m3_msa_select(int32_t *out, const float *bs, int G, int nb, int64_t pos, int block_size,
                   int topk, int local_blocks, int init_blocks)
{
    const int qb = (int)(pos / block_size);
    for (int g = 0; g < G; g++) {
        const float *s = bs + (size_t)g * (size_t)nb;
        int32_t *o = out + (size_t)g * (size_t)topk;
        int n = 0;

        /* forced blocks, ascending id */
        for (int b = 0; b < nb && n < topk; b++)
            if (is_forced(b, qb, local_blocks, init_blocks))
                o[n++] = b;

        /* the rest: repeatedly the best block strictly after the last pick */
        float last_s = INFINITY;
        int last_b = -1;
        while (n < topk) {
            int pick = -1;
            for (int b = 0; b < nb; b++) {
                if (is_forced(b, qb, local_blocks, init_blocks))
                    continue;
                if (!(s[b] > -INFINITY)) /* -inf or NaN: never selected */
                    continue;
                if (last_b >= 0 && !before(last_s, last_b, s[b], b))
                    continue;
                if (pick < 0 || before(s[b], b, s[pick], pick))
                    pick = b;
            }
            if (pick < 0)
                break;
            o[n++] = pick;
            last_s = s[pick];
            last_b = pick;
        }
        for (; n < topk; n++)
            o[n] = -1;
    }
}
