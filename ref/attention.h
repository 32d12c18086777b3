/* attention.h — causal GQA attention for one query row, dense or block-sparse.
 *
 * Spec: M3-ATTN-GQA-1 (query head j reads KV head j / (nh / nkv)),
 * M3-ATTN-SCORE-1 (scores q.k * hd^-0.5, fp32 softmax, causal k <= pos),
 * M3-MSA-ATTN-1 (sparse: key k allowed iff block(k) is in the KV group's
 * selected set AND k <= pos), M3-NUM-BF16-2 (bf16: probabilities and the
 * output are rounded).
 */
#ifndef M3_ATTENTION_H
#define M3_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "numerics.h"

/* out [nh, hd] for the query q [nh, hd] at position pos.
 * kcache, vcache: [>= pos + 1, nkv, hd], row k holds the key/value of position k.
 * blocks: NULL for dense causal; else [nkv, topk] block ids (-1 = empty) per
 * KV group, blocks of block_size key slots.
 * scratch: m3_attention_scratch(pos, nh, nkv, hd) floats. */
void m3_attention_row(float *out, const float *q, const float *kcache, const float *vcache,
                      int64_t pos, int nh, int nkv, int hd, const int32_t *blocks, int topk,
                      int block_size, float *scratch, m3_mode mode);
/* Floats of scratch m3_attention_row needs at position pos: (nh / nkv) * (pos + 1 + hd). */
size_t m3_attention_scratch(int64_t pos, int nh, int nkv, int hd);

#endif
