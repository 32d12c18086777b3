/* speculative.h — speculative decoding of the M3 target with an Eagle3 drafter.
 *
 * Spec: M3-EAGLE-VERIFY-1 (verify [last, d_1..d_K] in one target forward;
 * greedy accepts the longest prefix equal to the target argmax plus the
 * target's token at the first mismatch; the target KV / index-K caches and the
 * drafter cache are rolled back; the output equals plain greedy decoding),
 * M3-EAGLE-VERIFY-2 (sampled: standard speculative rejection sampling, which
 * preserves the target's sampling distribution), M3-SAMPLE-2 (the same
 * temperature / top-k / top-p transform for target and draft distributions),
 * M3-CACHE-3 (rollback), M3-EAGLE-DRAFT-2/3 (drafter seeded from every prompt
 * position, re-seeded with the target's features of every accepted position).
 *
 * Ownership: the caller owns the model, both states, the sampler and the
 * output array; m3_spec_generate allocates only its own scratch and frees it
 * before returning.
 */
#ifndef M3_SPECULATIVE_H
#define M3_SPECULATIVE_H

#include <stdint.h>

#include "eagle3.h"
#include "err.h"
#include "model.h"
#include "sampling.h"

#define M3_SPEC_MAX_K 32

typedef struct m3_spec_opts {
    int k;                /* drafts per round, 1..M3_SPEC_MAX_K */
    int max_new_tokens;   /* >= 1 */
    const int32_t *eos;   /* n_eos end-of-sequence ids (a generated eos is output, then stop) */
    int n_eos;
    void (*on_token)(void *ctx, int32_t tok); /* NULL, or called for each output token in order */
    void *ctx;
} m3_spec_opts;

typedef struct m3_spec_stats {
    int64_t generated;       /* output tokens */
    int64_t target_forwards; /* prefill + verification forwards */
    int64_t rounds;          /* verification forwards */
    int64_t drafted;         /* draft tokens proposed */
    int64_t accepted;        /* draft tokens accepted */
    int64_t accept_hist[M3_SPEC_MAX_K + 1]; /* rounds that accepted j drafts */
    double acceptance_rate;  /* accepted / drafted (0 when nothing drafted) */
    double tokens_per_forward; /* generated / target_forwards (plain decoding: 1.0) */
} m3_spec_stats;

/* Generate up to opts->max_new_tokens tokens after prompt [n_prompt] into out
 * (room for max_new_tokens), *n_out = how many. ts and ds must be empty;
 * ts needs capacity n_prompt + max_new_tokens - 1 (what plain decoding needs)
 * and ds the same. sp chooses greedy (sp->greedy or temperature <= 0) or
 * sampled decoding and supplies the uniforms. On return ts holds the prompt
 * and all output tokens but the last (as after plain decoding); ds holds the
 * positions whose target features are known (a prefix of those). st may be NULL.
 * On error both states are valid but hold an unspecified prefix: free or reset them. */
int m3_spec_generate(const m3_model *m, m3_state *ts, const m3_eagle3 *d, m3_eagle3_state *ds,
                     const int32_t *prompt, int n_prompt, m3_sampler *sp,
                     const m3_spec_opts *opts, int32_t *out, int *n_out, m3_spec_stats *st,
                     m3_err *e);

/* The model side of the speculative loop, so that another implementation of
 * the target and the drafter (bin/m3-gpu) runs the very loop of
 * m3_spec_generate (drafting, sampling, acceptance, rollback, statistics)
 * through m3_spec_run. Each call returns 0, or -1 with e set. */
typedef struct m3_spec_backend {
    void *ctx;
    /* Target forward of toks [n] at the positions after those cached; logits
     * [n_logits, V] = the rows of the last n_logits tokens; the aux taps of the
     * n rows (M3-EAGLE-TAP-1) are kept for the next seed call. */
    int (*target)(void *ctx, const int32_t *toks, int n, float *logits, int n_logits, m3_err *e);
    /* Drafter over n positions after those it holds: position i takes toks[i]
     * and the combined feature (M3-EAGLE-DRAFT-2) of aux row i of the last
     * target call; dlog [draft_vocab] = the last position's draft logits, whose
     * feature becomes the recurrent feature. */
    int (*seed)(void *ctx, const int32_t *toks, int n, float *dlog, m3_err *e);
    /* One draft step (M3-EAGLE-DRAFT-3) with token and the recurrent feature,
     * which it replaces by the step's output; dlog [draft_vocab]. */
    int (*step)(void *ctx, int32_t token, float *dlog, m3_err *e);
    /* Positions held by the target caches. */
    int64_t (*target_len)(void *ctx);
    /* Roll the target back to tlen positions and the drafter to dlen (a
     * negative length leaves that one as it is). */
    void (*truncate)(void *ctx, int64_t tlen, int64_t dlen);
} m3_spec_backend;

/* The loop of m3_spec_generate over be (both sides empty; d: the drafter,
 * read for its draft vocabulary and d2t only; V: the target vocabulary;
 * be must take target calls of up to max(n_prompt, opts->k + 1) tokens).
 * The caller checks that the prompt ids are in range. Same contract as
 * m3_spec_generate otherwise (the same calls, uniforms and outputs). */
int m3_spec_run(const m3_spec_backend *be, const m3_eagle3 *d, int V, const int32_t *prompt,
                int n_prompt, m3_sampler *sp, const m3_spec_opts *opts, int32_t *out,
                int *n_out, m3_spec_stats *st, m3_err *e);

/* The distribution m3_sample draws from for logits [V] (temperature, top-k,
 * top-p, renormalised; M3-SAMPLE-2): probs [V] dense (0 outside the kept set),
 * ord [V] the kept ids best first; returns how many are kept. z: [V] scratch.
 * Greedy samplers give the one-hot argmax. */
int m3_spec_probs(const m3_sampler *sp, const float *logits, int V, float *probs, int32_t *ord,
                  float *z);

/* Draw from (probs, ord, n) with the uniform u exactly as m3_sample does. */
int32_t m3_spec_draw(const float *probs, const int32_t *ord, int n, double u);

#endif
