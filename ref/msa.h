/* msa.h — the MSA lightning indexer: block scores and top-k block selection.
 *
 * Spec: M3-MSA-IDX-* (index q/k projection, per-head norm, shared RoPE),
 * M3-MSA-SCORE-1 (s[g, j] = iq[g] . ik[j] in fp32, j <= pos only, no scale),
 * M3-MSA-BLOCK-1 (block score = max over its visible keys; -inf if none),
 * M3-MSA-SELECT-* (forced init and local blocks, top-k, ties to the lower
 * block index, golden order, -1 padding), M3-MSA-CACHE-1 (index-K cache).
 */
#ifndef M3_MSA_H
#define M3_MSA_H

#include <stdint.h>

/* Number of key blocks a query at pos can see: pos / block_size + 1. */
int m3_msa_num_blocks(int64_t pos, int block_size);
/* bs [G, nb] with nb = m3_msa_num_blocks(pos): for each index head g and
 * block b, the max of iq[g] . ik[j] over keys j <= pos in block b.
 * iq [G, d]; ikcache [>= pos + 1, d]. */
void m3_msa_block_scores(float *bs, const float *iq, const float *ikcache, int64_t pos,
                         int G, int d, int block_size);
/* out [G, topk]: the selected blocks of each head in golden order — forced
 * blocks (init blocks 0..init-1, local blocks q_block-local+1..q_block)
 * first in ascending id, then the rest by descending score with ties to the
 * lower id, then -1. bs [G, nb] as from m3_msa_block_scores. */
void m3_msa_select(int32_t *out, const float *bs, int G, int nb, int64_t pos, int block_size,
                   int topk, int local_blocks, int init_blocks);

#endif
