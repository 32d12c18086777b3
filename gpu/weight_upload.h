/* weight_upload.h — the device copy of a checkpoint's text weights for
 * bin/m3-gpu: every matrix and vector the forward reads (gpu/forward.h),
 * uploaded once from the mmap'd checkpoint that ref/model.h opened.
 *
 * Spec: M3-MODEL-* (the weights of every layer kind: dense / MoE FFN,
 * dense / MSA-sparse attention with its indexer), M3-NUM-MODE-1 (weights
 * keep their stored precision).
 *
 * Design: fp32 and bf16 tensors are copied as stored; any other dtype is
 * widened to fp32 on the host first (exact). Fused weights for the GEMVs
 * that read one input several times: q, k, v (and index q, k on sparse
 * layers) as one [q; k; v (; iq; ik)] matrix, the shared expert's gate and
 * up as one [gate; up] (m3g_linear_multi / m3g_linear_swiglu); the views
 * point into them. Routed experts are one contiguous [E, rows, cols] array
 * per projection. The upload reports to a progress task (ref/progress.h:
 * layer, bytes of the total, MiB/s, ETA).
 *
 * Ownership: every device buffer (the weights, and the batch context's and
 * the drafter taps' buffers allocated with dev_model_alloc) is tracked in
 * the dev_model and released by dev_model_free. The host model must
 * outlive it only while uploading. Errors: -1 and a message in *e.
 */
#ifndef M3_GPU_WEIGHT_UPLOAD_H
#define M3_GPU_WEIGHT_UPLOAD_H

#include <stddef.h>

#include "hip_compat.h"
#include "kernels/kernels.h"

extern "C" {
#include "err.h"
#include "model.h"
#include "progress.h"
}

/* One layer's device weights (views absent: data NULL). */
typedef struct dev_layer {
    m3g_mat q, k, v, o, iq, ik, gate, up, down, router, sg, su, sd;
    /* fused weights: qkv = [q; k; v (; index_q; index_k)] with nqkv
     * segments (0: not fused), sgu = [sh_gate; sh_up]; the views above
     * point into them */
    m3g_mat qkv, sgu;
    int nqkv;
    const void *in_norm, *post_norm, *q_norm, *k_norm, *iq_norm, *ik_norm, *rbias;
    int in_norm_dt, post_norm_dt, q_norm_dt, k_norm_dt, iq_norm_dt, ik_norm_dt, rbias_dt;
    /* experts, contiguous [E, rows, cols] each, one dtype */
    const void *eg, *eu, *ed;
    int edt;
} dev_layer;

/* The device text model: layers, head, and every device allocation made for it. */
typedef struct dev_model {
    dev_layer *layers;
    m3g_mat lm_head;
    const void *final_norm;
    int final_norm_dt;
    void **allocs; /* every hipMalloc, freed by dev_model_free */
    int nallocs, capallocs;
    m3_progress *pg; /* during dev_model_upload: host bytes uploaded so far */
} dev_model;

/* Upload every text weight of m into dm (zeroed first; progress task on pg).
 * 0, or -1 with e set (what was uploaded stays for dev_model_free). */
int dev_model_upload(dev_model *dm, const m3_model *m, m3_progress *pg, m3_err *e);

/* *p = bytes (at least 4) of zeroed device memory, tracked in dm. 0 or -1 with e set. */
int dev_model_alloc(dev_model *dm, void **p, size_t bytes, m3_err *e);

/* Free every device buffer tracked in dm and zero it (a zeroed dm is allowed). */
void dev_model_free(dev_model *dm);

#endif
