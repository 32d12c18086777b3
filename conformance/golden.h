/* golden.h — a model case's golden outputs computed by the reference and written as
 * the case's expected.safetensors (bin/m3-conform golden).
 *
 * Spec: M3-VEC-2 (a case without expected.safetensors is judged against the
 * reference run on it; this writes that run down), M3-VEC-6 (model cases: the
 * one-shot prefill dump of M3-DUMP-3 plus greedy_tokens when params.max_new_tokens
 * is set; params.chunks do not change the golden, M3-CACHE-2), M3-VEC-11 (the
 * golden's tie evidence, written beside it).
 */
#ifndef M3_GOLDEN_H
#define M3_GOLDEN_H

#include "err.h"
#include "progress.h"

/* Run the reference on the model case in case_dir (its files{} hashes verified when
 * verify != 0) and write its golden outputs to out_path and their tie evidence
 * (M3-VEC-11) to evidence_path, each through a temporary file renamed into place.
 * Returns 0, or -1 with e naming the case or file. */
int cf_golden_write(const char *case_dir, const char *out_path, const char *evidence_path, int verify,
                    m3_progress *pg, m3_err *e);

#endif
