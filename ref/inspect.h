/* inspect.h — describe a checkpoint: architecture summary and parameter
 * counts by group (what `m3-ref inspect` prints).
 *
 * Spec: M3-CKPT-NAMES-1, M3-CKPT-NAMES-2 (tensor names classified in both
 * layouts), M3-CKPT-MTP-1 (mtp.* listed apart, not counted).
 *
 * Counting reads only the safetensors headers (shapes), never tensor data.
 * Active parameters per token = everything a text token touches: all
 * attention, indexer, norms, router and dense-MLP weights, the top-k routed
 * experts of each MoE layer (routed total / num_experts * num_experts_per_tok),
 * the shared expert, lm_head, and one embedding row (hidden_size). Vision
 * tower and projector are excluded from the active count.
 */
#ifndef M3_INSPECT_H
#define M3_INSPECT_H

#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "err.h"
#include "safetensors.h"

typedef enum m3_param_group {
    M3_PG_EMBED = 0,
    M3_PG_ATTN,      /* q/k/v/o projections and q/k norms */
    M3_PG_INDEXER,   /* MSA index q/k projections and norms */
    M3_PG_ROUTED,    /* routed experts */
    M3_PG_SHARED,    /* shared expert */
    M3_PG_DENSE_MLP, /* dense MLP layers */
    M3_PG_ROUTER_NORM, /* router weight + correction bias, layer norms, final norm */
    M3_PG_VISION,    /* vision tower */
    M3_PG_PROJECTOR, /* multimodal projector + patch-merge MLP */
    M3_PG_LM_HEAD,
    M3_PG_OTHER,     /* names not recognised (counted in the total) */
    M3_PG_COUNT
} m3_param_group;

typedef struct m3_param_counts {
    int64_t total;                        /* all tensors except mtp.* */
    int64_t active;                       /* per text token, definition above */
    int64_t group_total[M3_PG_COUNT];
    int64_t group_active[M3_PG_COUNT];
    int64_t tensors;                      /* number of tensors (mtp.* excluded) */
    int64_t mtp_tensors, mtp_params;      /* ignored mtp.* tensors */
    int64_t bytes;                        /* tensor data bytes (mtp.* excluded) */
    int64_t dtype_tensors[M3_DTYPE_COUNT];/* tensors per dtype (mtp.* excluded) */
} m3_param_counts;

/* Short label of a parameter group ("embeddings", "attention", ...). */
const char *m3_param_group_name(m3_param_group g);
/* Count the parameters of every tensor in s, grouped; c gives top-k and the
 * expert count for the active figure. */
int m3_inspect_count(const m3_config *c, const m3_store *s, m3_param_counts *out, m3_err *e);
/* Print the architecture summary and the parameter table to out. */
int m3_inspect_print(FILE *out, const m3_config *c, const m3_store *s, m3_err *e);

#endif
