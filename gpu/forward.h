/* forward.h — the M3 text forward on the GPU over a batch context: every
 * sequence of a call through embeddings, the layers and the head, its
 * K/V and index-K rows written into its cache region, its activations
 * dumped under the names of bin/m3-ref forward (so bin/m3-conform judges them).
 *
 * Spec: M3-MODEL-* (the layer: norm, attention, FFN or MoE, residuals),
 * M3-EMB-3 (vision features placed into the embeddings), M3-DUMP-* (names,
 * shapes; eagle3.aux M3-DUMP-4), M3-EAGLE-TAP-1 (the drafter's taps),
 * M3-NUM-MODE-1, M3-NUM-BF16-2 (rounding points in the kernels, kernels.h).
 *
 * Design: embeddings and RoPE tables on the host (exact, as ref). The rows
 * of all sequences are stacked: linear layers, norms, router / MoE and the
 * head run once over all rows; cache writes, the MSA indexer, block
 * selection and attention run per sequence over its own cache region. One
 * m3g_attn_prologue launch per layer applies QK-norm + RoPE to the queries
 * (and, for a single sequence, writes its cache rows). Calls of <= 8 rows
 * (GEMVs only) run the shared expert on the context's side stream, beside
 * the router and the routed experts, joined before the combine. Teacher
 * forcing feeds each layer the golden layers.L.input.
 *
 * Known differences (bf16 only; all within the bf16 profile): a call of more
 * than 8 rows may take the vendor GEMM (when the context has a BLAS handle)
 * and differ from single rows by a bf16 step; sparse prefill (>= 16 rows)
 * rounds p in one pass (m3g_msa_attention_prefill_onepass, M3-TOL-8); on
 * NVIDIA the indexer sums its exact products on tensor cores (another fp32
 * order, M3-TOL-3; m3g_msa_indexer_ex). gpu_sess.exact (--exact-kernels)
 * and fp32 mode take the exact kernels instead.
 * Errors: -1 and a message in *e; nothing is printed.
 */
#ifndef M3_GPU_FORWARD_H
#define M3_GPU_FORWARD_H

#include <stdint.h>

#include "batch_context.h"

extern "C" {
#include "err.h"
#include "safetensors.h"
}

/* One call's sequences: n sequences of T[s] rows each (ids[s]) at positions
 * pos0[s] .. pos0[s]+T[s]-1 of cache region slot[s] (< the context's nseq).
 * Their rows are stacked in sequence order: the linear layers, norms and
 * MoE see all rows at once, attention / indexer / selection run per
 * sequence over its own caches. dump: NULL, or one writer (or NULL) per
 * sequence, each receiving that sequence's rows under the m3-ref names.
 * tf (teacher forcing, n == 1 and pos0 0 only): NULL, or L host arrays
 * [T, H]: tf[l] replaces the residual stream entering layer l (the golden
 * layers.{l}.input); each layer then runs from its golden input and its
 * dumped tensors carry its own error only (the head runs on the last
 * layer's own output). */
typedef struct gpu_batch {
    int n;
    const int32_t *const *ids;
    const int *T, *pos0, *slot;
    m3_st_writer *const *dump;
    const float *const *tf;
} gpu_batch;

/* Run bt through the model, caching its K/V rows (dumps append rows; streamed weights fetched
 * per layer); logits_host [sum T, V], or [n, V] when last_only. 0, or -1 with e set. */
int gpu_step_batch(gpu_sess *b, const gpu_batch *bt, float *logits_host, int last_only,
                   m3_err *e);

#endif
