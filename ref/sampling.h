/* sampling.h — choosing the next token from logits.
 *
 * Spec: M3-SAMPLE-1 (greedy = lowest index among the maxima), M3-SAMPLE-2
 * (temperature, then top-k, then top-p over the sorted distribution, then a
 * draw from a seeded xoshiro256** stream), M3-SAMPLE-3 (defaults from
 * generation_config.json, else temperature 1.0, top_p 0.95, top_k 40).
 */
#ifndef M3_SAMPLING_H
#define M3_SAMPLING_H

#include <stdint.h>

/* The smallest non-zero temperature accepted: below it logit / T overflows fp32
 * for ordinary logits. Temperature 0 means greedy (M3-SAMPLE-1); a sampler
 * given 0 < T < this minimum decodes greedily too (the T -> 0 limit). */
#define M3_SAMPLE_MIN_TEMPERATURE 1e-4f

typedef struct m3_sampler {
    int greedy;
    float temperature; /* >= M3_SAMPLE_MIN_TEMPERATURE; smaller (0 included): greedy */
    int top_k;         /* 0 = off */
    float top_p;       /* 1.0 = off */
    uint64_t s[4];     /* xoshiro256** state */
    float *probs;      /* [V] scratch, owned */
    int32_t *order;    /* [V] scratch, owned */
    int vocab;
} m3_sampler;

/* Set up a sampler for a vocabulary of V; returns -1 on allocation failure. */
int m3_sampler_init(m3_sampler *sp, int V, int greedy, float temperature, int top_k,
                    float top_p, uint64_t seed);
/* Free the sampler's scratch. */
void m3_sampler_free(m3_sampler *sp);
/* The next token id for logits [V]. */
int32_t m3_sample(m3_sampler *sp, const float *logits);
/* The distribution m3_sample draws from (M3-SAMPLE-2) for logits [V] (V may be a
 * drafter's smaller vocabulary): ord[0..n) are the kept tokens, best first, and
 * probs[ord[r]] their renormalised probabilities (other entries of probs are
 * scratch); returns n. Greedy: the argmax alone, p = 1. probs and ord are
 * caller-owned [V] buffers; the sampler's stream is untouched. */
int m3_sampler_dist(const m3_sampler *sp, const float *logits, int V, float *probs, int32_t *ord);
/* Index of the largest logit, lowest index on ties. */
int32_t m3_argmax(const float *logits, int V);
/* The k largest logits' indices into out[k], best first, lowest index on
 * ties (the CLIs' top-5 summaries); returns min(k, V). O(k V). */
int m3_top_ids(const float *logits, int V, int k, int32_t *out);
/* A uniform double in [0, 1) from the sampler's stream. */
double m3_sampler_uniform(m3_sampler *sp);

#endif
