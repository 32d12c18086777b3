/* model.h — the M3 text model: open a checkpoint, run tokens through it.
 *
 * Spec: M3-MODEL-1..n (top-level forward), M3-NUM-MODE-1 (fp32 golden and
 * bf16 modes), M3-DUMP-1..n (activation dump names).
 *
 * Ownership: m3_model_open fills a caller-provided m3_model and owns the
 * store, config and weight views inside it until m3_model_close. A state
 * (KV cache, index-K cache, scratch) is allocated once by m3_state_new for
 * at most max_tokens positions; m3_forward never allocates.
 */
#ifndef M3_MODEL_H
#define M3_MODEL_H

#include <stdint.h>

#include "config.h"
#include "err.h"
#include "numerics.h"
#include "progress.h"
#include "safetensors.h"
#include "weights.h"

typedef struct m3_model {
    m3_config cfg;
    m3_store *store;
    m3_weights w;
    char dir[4096];
} m3_model;

typedef struct m3_model_opts {
    int lenient_config; /* unknown config keys warn instead of failing */
} m3_model_opts;

/* Open the checkpoint in dir (config.json + safetensors). opts may be NULL. */
int m3_model_open(m3_model *m, const char *dir, const m3_model_opts *opts, m3_err *e);

/* The notices of an opened model, for a program to print (this library
 * prints nothing): "warning: <config warnings>\n" and "note: ignored N mtp.*
 * tensors\n", each when it applies, into buf (cap bytes; "" when none). */
void m3_model_notes(const m3_model *m, char *buf, size_t cap);
/* Release everything m3_model_open acquired; safe on a zeroed struct. */
void m3_model_close(m3_model *m);

typedef struct m3_state m3_state;

/* A fresh state able to hold max_tokens positions; caller frees it. */
m3_state *m3_state_new(const m3_model *m, int64_t max_tokens, m3_mode mode, m3_err *e);
/* Free a state; NULL is allowed. */
void m3_state_free(m3_state *s);
/* Number of positions currently in the caches. */
int64_t m3_state_len(const m3_state *s);
/* Roll the caches back to len positions (len <= current length). */
void m3_state_truncate(m3_state *s, int64_t len);
/* The numeric mode the state was created with. */
m3_mode m3_state_mode(const m3_state *s);
/* Report to p (ref/progress.h, not owned; NULL: none) from now on: every
 * forward names the layer as the stage and adds one per row per layer. */
void m3_state_set_progress(m3_state *s, m3_progress *p);

/* Run n tokens at positions len..len+n-1, appending them to the caches.
 * logits: NULL, or [n, V] fp32 output. dump: NULL, or a writer receiving the
 * activation tensors named in spec/dump.md for these n rows. Token ids are
 * checked against the vocabulary and the context against the state size; on
 * error the state is unchanged. Only with a dump writer does it allocate
 * (staging for the dumped rows, freed before returning). */
int m3_forward(const m3_model *m, m3_state *s, const int32_t *tokens, int n,
               float *logits, m3_st_writer *dump, m3_err *e);

/* As m3_forward but from input embeddings x [n, H] (multimodal rows already
 * scattered in). */
int m3_forward_embeds(const m3_model *m, m3_state *s, const float *x, int n,
                      float *logits, m3_st_writer *dump, m3_err *e);

/* Teacher-forced single layer: x [n, H] is the residual stream entering
 * `layer` for positions len..len+n-1; on return it holds the layer output.
 * Appends to that layer's caches only (callers run layers in order, or use a
 * fresh state per layer). */
int m3_layer_forward(const m3_model *m, m3_state *s, int layer, float *x, int n,
                     m3_st_writer *dump, m3_err *e);

#endif
