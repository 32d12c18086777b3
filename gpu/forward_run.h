/* forward_run.h — the forward command of bin/m3-gpu: a batch of prompts (or
 * one prompt teacher-forced from a golden dump) through the GPU forward in
 * one call, printing each prompt's T and the top-5 of its last row and
 * writing its dump under the names of bin/m3-ref forward.
 *
 * Spec: M3-DUMP-* (names, shapes and metadata as m3-ref: m3.dump_version,
 * m3.mode, m3.producer, m3.T, m3.batch, m3.teacher_forced), M3-TOL-8
 * (teacher forcing: each layer from its golden input, the head on the last
 * layer's own output).
 *
 * A single prompt may be prefilled in chunks (each call continues the
 * caches; the dump concatenates their rows, M3-DUMP-2), continued greedily
 * (M3-SAMPLE-1: greedy_tokens), and run with streamed weights, which prints
 * the prefill rate, the bytes streamed and the host-to-device bandwidth
 * measured in the same run.
 *
 * Design: one batch context with one cache region per prompt; dumps per
 * prompt (OUT itself for one prompt, else OUT with .S inserted before a
 * final .safetensors). bf16 batches of more than 8 rows use the vendor
 * GEMM for the prefill linears (exact there: X is already bf16). This file
 * and generate_run.cu are the only gpu/ host code that prints (stdout: the
 * results; stderr: errors, progress and the summary line).
 */
#ifndef M3_GPU_FORWARD_RUN_H
#define M3_GPU_FORWARD_RUN_H

#include "vision.h"

extern "C" {
#include "model.h"
}

#define M3G_EXIT_RUN 1   /* the model or the run failed */
#define M3G_EXIT_USAGE 2 /* bad command line (bad ids included) */

/* The forward command's options beyond the prompts (all zero: one pass, resident weights). */
typedef struct fwd_opts {
    const char *chunks; /* --chunks N1,N2,...: one prompt prefilled in these pieces */
    int stream;         /* --stream-weights: layers streamed (gpu/weight_stream.h) */
    int max_new;        /* --max-new-tokens N: greedy continuation, dumped as greedy_tokens */
    int exact;          /* --exact-kernels: gpu_sess.exact */
} fwd_opts;

/* The forward command: n --tokens lists toks as one batch (dumps when dumpp; tf_path:
 * teacher forcing, n == 1; vreq: vision of one prompt or NULL; x: chunks, streaming,
 * continuation of one prompt). Returns the exit status. */
int forward_run(const char *dir, const char *const *toks, int n, int mode, int lenient,
                const char *dumpp, const char *tf_path, const m3g_vision_request *vreq,
                int quiet, const fwd_opts *x);

/* Open DIR as bin/m3-ref does (lenient: unknown config.json keys warn), printing the
 * warnings, or the error as "m3-gpu CMD: ...". 0, or -1 after printing. */
int m3g_open_model(m3_model *m, const char *cmd, const char *dir, int lenient);

#endif
