/* generate_run.h — the generate command of bin/m3-gpu: the options and
 * output of bin/m3-ref generate, the prefill and every decode step on the
 * GPU (gpu/forward.h), the tokens chosen on the host by the reference
 * sampler (ref/sampling.h); a batch of prompts decodes together, one token
 * per active sequence per step; --draft runs Eagle3 speculative decoding.
 *
 * Spec: M3-SAMPLE-* (the sampler, generation_config.json defaults, eos),
 * M3-CACHE-2 (decode continues the prefill's caches), M3-CHAT-* (--chat
 * through ref/prompt.h), M3-EAGLE-VERIFY-1/2 (the loop of ref/speculative.c
 * over this backend; the drafter is gpu/drafter.h), M3-EAGLE-TAP-1.
 *
 * Design: one batch context, one cache region per prompt, capacity per
 * prompt as its single run; no vendor BLAS (every linear runs the
 * fixed-order kernels, so fp32 greedy ids equal m3-ref's). A single prompt
 * streams its tokens; a batch prints each sequence on its own line when
 * all are done. Vision inputs (one prompt): the tower runs first and the
 * features are placed at the prefill.
 *
 * Known differences: bf16 --draft verifications of more than 8 rows take
 * the GEMM path and may differ from a decode row by a bf16 step.
 */
#ifndef M3_GPU_GENERATE_RUN_H
#define M3_GPU_GENERATE_RUN_H

#include "forward_run.h"
#include "vision.h"

extern "C" {
#include "prompt.h"
}

/* The options of a generate command, as cmd_generate parsed them. */
typedef struct gen_opts {
    const char *dir;
    const char *const *srcs; /* every --tokens / --prompt, in command-line order */
    const int *is_text;      /* srcs[s] is a --prompt text (else token ids); a NULL text:
                                the conversation of po (--conversation FILE) */
    int n;                   /* number of prompts: a batch when > 1 */
    int mode, greedy_flag, print_ids, lenient;
    int quiet; /* --quiet: no progress line, no summary */
    int have_temp, have_top_p, have_top_k, have_seed; /* the sampling flags given */
    float temp, top_p;
    long long top_k, seed, max_new;
    const m3_prompt_opts *po;       /* --chat / --system / --thinking for every --prompt;
                                       --conversation */
    const m3g_vision_request *vreq; /* images / video / pixels of a single prompt, or NULL */
    const char *draft;              /* --draft DIR (Eagle3 speculative decoding), or NULL */
    long long spec_k;               /* --spec-tokens K (default 3) */
    int stream;                     /* --stream-weights (gpu/weight_stream.h) */
    int exact;                      /* --exact-kernels: gpu_sess.exact */
} gen_opts;

/* The generate command for go (see gen_opts); prints as bin/m3-ref
 * generate. Returns the exit status. */
int generate_run(const gen_opts *go);

#endif
