/* batch_context.h — the device state of a batch of sequences on the GPU
 * (bin/m3-gpu forward and generate): activation buffers for the rows of one
 * call, and per layer the paged K/V caches and the MSA index-K caches of
 * every sequence, positions continuing across calls (prefill, then decode).
 *
 * Spec: M3-MSA-CACHE-1 (paged caches, page == MSA block), M3-CACHE-1/2
 * (positions continue across calls), M3-NUM-BF16-2 (bf16 mode keeps bf16
 * K/V caches: exact, the cached values are already bf16-rounded).
 *
 * Layout: nseq cache regions of npages pages of B positions each; region s
 * owns pages s*npages .. (s+1)*npages-1 in order, so position p of the
 * sequence in region s lives in cache row s*npages*B + p (identity paging
 * inside a region). Row buffers hold tmax rows: the rows of all sequences
 * of one call, stacked in sequence order (gpu_sess_view offsets them).
 * bf16 mode with hd % 8 == 0 and hd <= 128: bf16 K/V caches (kc16/vc16) and
 * the m3g_attention_sk workspace; else fp32 caches and the split-key
 * workspace when it fits in 1 GiB. Sparse layers in bf16 also keep a bf16
 * copy of the index-K cache with its exponent range words (the indexer's
 * FMA proof, kernels.h).
 *
 * Ownership: device buffers are tracked in the dev_model (freed with it);
 * the host arrays by gpu_sess_free. Errors: -1 and a message in *e.
 */
#ifndef M3_GPU_BATCH_CONTEXT_H
#define M3_GPU_BATCH_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "hip_compat.h"
#include "kernels/kernels.h"
#include "vision.h"
#include "weight_upload.h"

extern "C" {
#include "err.h"
#include "model.h"
}

/* A batch context (see the layout above); every field set by gpu_sess_init
 * except vis and the Eagle3 taps, which the caller sets per call, and exact
 * (0 after gpu_sess_init), which the caller sets once. */
typedef struct gpu_sess {
    const m3_model *m;
    dev_model *dm;
    m3g_blas *blas; /* may be NULL */
    hipStream_t st;
    hipStream_t side;            /* a second stream: decode runs the shared expert on it,
                                    beside the router and the routed experts */
    hipEvent_t ev_fork, ev_join; /* side waits for st at ev_fork; st for side at ev_join */
    int mode, tmax, cap, npages, nbmax; /* npages: per region */
    int nseq;                           /* cache regions (sequences of a batch) */
    int exact; /* bf16: the exact-p MSA prefill and the indexer's bitwise scores
                  (m3g_msa_attention_prefill, M3G_IDX_EXACT) instead of the defaults */
    float *h, *xn, *q, *kraw, *att, *tmp, *iq, *ikraw, *bs, *g, *u, *ye, *sh, *logits, *cos_t,
        *sin_t;
    int32_t *blk, *ridx, *pages;
    unsigned *ictr; /* m3g_msa_indexer tickets [N] (zeroed at allocation, left zero) */
    void *iws;      /* m3g_msa_indexer scratch */
    size_t iws_n;
    float *rw, *rscores;
    float **kc, **vc, **ikc; /* per layer */
    uint16_t **ik16;         /* per sparse layer: bf16 copy of its index-K cache (bf16 mode;
                                kept per layer because decode converts only the new rows) */
    unsigned *ikr;           /* [L][2] exponent range words of each ik16[l] (m3g_ik_range_*;
                                the indexer's FMA proof), NULL in fp32 mode */
    float *aws;              /* split attention workspace (NULL: per-row kernel) */
    size_t aws_n;
    uint16_t **kc16, **vc16; /* per layer: bf16 K/V caches (bf16 mode with hd % 8 == 0 and
                                hd <= 128; kc/vc are not allocated then), else NULL */
    float *vraw;             /* [tmax, nkv * hd] V projection before its bf16 cache write
                                (also in fp32 mode when nseq > 1: then copied per sequence) */
    void *sws;               /* m3g_attention_sk workspace (with kc16/vc16) */
    size_t sws_n;
    float *hbuf, *ct, *stb; /* host staging [tmax, H], [tmax, rd/2] x 2 */
    const m3g_vision_feats *vis; /* vision rows placed into the pos0-0 embeddings, or NULL */
    float *eagle_aux;  /* NULL, or device [3, eagle_rows, H]: gpu_step_batch (one sequence)
                          copies the residual streams entering layers eagle_taps[j] of its
                          rows into rows 0.. of tap j (M3-EAGLE-TAP-1; generate --draft) */
    int eagle_rows, eagle_taps[3];
} gpu_sess;

/* Allocate b: calls of <= tmax rows, nseq regions of cap positions, mode 0 fp32 / 1 bf16,
 * blas NULL for fixed-order kernels only. 0, or -1 with e set (b freed). */
int gpu_sess_init(gpu_sess *b, const m3_model *m, dev_model *dm, int tmax, int cap, int nseq,
                  int mode, m3g_blas *blas, hipStream_t st, m3_err *e);

/* Free b's host arrays, its side stream and events, and zero it (its device
 * buffers go with the dev_model). */
void gpu_sess_free(gpu_sess *b);

/* The view of b for one sequence of a call: row buffers start at its first
 * row (row offset off of the stacked rows), the page table at region slot. */
gpu_sess gpu_sess_view(const gpu_sess *b, int off, int slot);

#endif
