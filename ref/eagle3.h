/* eagle3.h — the Eagle3 drafter (LlamaForCausalLMEagle3 layout) and the
 * target-side aux taps it reads.
 *
 * Spec: M3-EAGLE-TAP-1 (taps = residual streams entering layers (2, L/2, L-3),
 * clamped, ascending; or the drafter config's eagle_aux_hidden_state_layer_ids),
 * M3-EAGLE-DRAFT-1 (checkpoint names; embed/lm_head/norm from the target when
 * absent; optional d2t), M3-EAGLE-DRAFT-2 (g = fc(cat(fc_norm_i(a_i)))),
 * M3-EAGLE-DRAFT-3 (one draft step, post-norm recurrent feature),
 * M3-EAGLE-DRAFT-4 (norm style, RoPE and head counts from config.json).
 *
 * The drafter always computes in fp32 (M3-NUM-MODE-1): its numerics never
 * change the speculative output, only the acceptance rate.
 *
 * Ownership: m3_eagle3_open fills a caller-provided m3_eagle3 and owns its
 * store and the d2t table until m3_eagle3_close; weights it borrows from the
 * target (embed_tokens, lm_head, norm) stay owned by the target model, which
 * must outlive the drafter. A drafter state (its KV cache and scratch) is
 * allocated once by m3_eagle3_state_new; steps never allocate.
 */
#ifndef M3_EAGLE3_H
#define M3_EAGLE3_H

#include <stdint.h>

#include "err.h"
#include "model.h"
#include "safetensors.h"
#include "weights.h"

typedef struct m3_eagle3_config {
    int hidden_size;          /* H (must equal the target's) */
    int num_heads, num_kv_heads, head_dim;
    int intermediate_size;
    float rms_norm_eps;
    double rope_theta;
    int rotary_dim;           /* head_dim * partial_rotary_factor (full when absent) */
    int gemma_norm;           /* use_gemma_norm: y = x_hat * (1 + w); default 0: x_hat * w */
    int norm_before_residual; /* h1 = hidden_norm(f) + attn instead of f + attn */
    int tie_word_embeddings;  /* lm_head absent: use embed_tokens */
    int taps[3];              /* target layers whose entering residual is captured, ascending */
    int taps_from_config;     /* 1: taps came from eagle_aux_hidden_state_layer_ids */
    int draft_vocab;          /* rows of lm_head */
    int64_t max_position_embeddings; /* 0 = not stated */
} m3_eagle3_config;

typedef struct m3_eagle3 {
    m3_eagle3_config cfg;
    m3_store *store;
    m3_mat fc;                           /* [H, 3H] */
    m3_vec fc_norm[3];                   /* [H] each; data NULL when absent */
    int has_fc_norm;
    m3_vec input_norm, hidden_norm, post_norm; /* [H], drafter norm style */
    m3_mat q, k, v, o;                   /* [nh*hd, 2H] x3, [H, nh*hd] */
    m3_mat gate, up, down;               /* [I, H] x2, [H, I] */
    m3_mat embed;                        /* [V_target, H] */
    m3_mat lm_head;                      /* [draft_vocab, H] */
    m3_vec norm;                         /* [H] */
    int norm_from_target;                /* final norm borrowed: target's Gemma style + eps */
    float target_eps;
    int embed_from_target, lm_head_from_target;
    int32_t *d2t;                        /* [draft_vocab] target id of each draft id; owned */
    int target_vocab;
    char dir[4096];
} m3_eagle3;

typedef struct m3_eagle3_opts {
    int lenient_config; /* unknown config.json keys are ignored instead of rejected */
} m3_eagle3_opts;

/* The default taps for a target of L layers: (min(2,L-1), L/2, max(L-3,0)) ascending. */
void m3_eagle3_default_taps(int L, int taps[3]);

/* Open the drafter in dir (config.json + model.safetensors) for target m
 * (which supplies embed_tokens / lm_head / norm when the drafter lacks them).
 * opts may be NULL. Names may carry a leading "model.". */
int m3_eagle3_open(m3_eagle3 *d, const char *dir, const m3_model *target,
                   const m3_eagle3_opts *opts, m3_err *e);
/* As m3_eagle3_open with the config file and the weights (a .safetensors file
 * or a checkpoint directory) named separately (conformance cases ship both
 * beside a target checkpoint). */
int m3_eagle3_open_files(m3_eagle3 *d, const char *config_path, const char *weights,
                         const m3_model *target, const m3_eagle3_opts *opts, m3_err *e);
/* Release what m3_eagle3_open acquired; safe on a zeroed struct. */
void m3_eagle3_close(m3_eagle3 *d);

/* Target id of draft-vocabulary id i (identity without d2t). */
int32_t m3_eagle3_to_target(const m3_eagle3 *d, int32_t i);

/* Target forward (as m3_forward, bit-identical logits) that also returns the
 * aux taps: aux [n, 3H] (or NULL) = residual streams entering layers
 * taps[0..2] for the n rows (M3-EAGLE-TAP-1). logits: NULL or [n_logits, V],
 * the rows of the last n_logits tokens (0 <= n_logits <= n). The state must be
 * used only through whole-model forwards; on error it is unchanged.
 * Allocates one [n, H] buffer for the call. */
int m3_eagle3_target_forward(const m3_model *m, m3_state *s, const int taps[3],
                             const int32_t *tokens, int n, float *logits, int n_logits,
                             float *aux, m3_err *e);

typedef struct m3_eagle3_state m3_eagle3_state;

/* A drafter state able to hold max_tokens positions; caller frees it. */
m3_eagle3_state *m3_eagle3_state_new(const m3_eagle3 *d, int64_t max_tokens, m3_err *e);
/* Free a drafter state; NULL is allowed. */
void m3_eagle3_state_free(m3_eagle3_state *s);
/* Positions currently held by the drafter's KV cache. */
int64_t m3_eagle3_state_len(const m3_eagle3_state *s);
/* Roll the drafter cache back to len positions (len <= current length). */
void m3_eagle3_state_truncate(m3_eagle3_state *s, int64_t len);

/* g [H] = fc(cat(fc_norm_0(aux_0), fc_norm_1(aux_1), fc_norm_2(aux_2))) for one
 * position's aux [3H] (M3-EAGLE-DRAFT-2). Uses the state's scratch. */
void m3_eagle3_combine(const m3_eagle3 *d, m3_eagle3_state *s, const float *aux, float *g);

/* One draft step at position m3_eagle3_state_len(s) with input token `token`
 * (a target-vocabulary id) and feature f [H] (M3-EAGLE-DRAFT-3); appends the
 * position to the drafter cache. logits: NULL or [draft_vocab]; feature_out:
 * NULL or [H] (the post-norm hidden, the next step's feature; may alias f). */
int m3_eagle3_step(const m3_eagle3 *d, m3_eagle3_state *s, int32_t token, const float *f,
                   float *logits, float *feature_out, m3_err *e);

#endif
