/* forward_run.cu — see forward_run.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cli_opts.h"
#include "progress.h"
#include "safetensors.h"
#include "sampling.h"
}

#include "forward.h"
#include "forward_run.h"
#include "hip_check.h"
#include "weight_upload.h"

int m3g_open_model(m3_model *m, const char *cmd, const char *dir, int lenient)
{
    m3_err e;
    memset(&e, 0, sizeof e);
    const m3_model_opts mo = {lenient};
    char notes[700];
    if (m3_model_open(m, dir, &mo, &e) != 0) {
        fprintf(stderr, "m3-gpu %s: %s\n", cmd, e.msg);
        return -1;
    }
    m3_model_notes(m, notes, sizeof notes);
    fputs(notes, stderr);
    return 0;
}

/* The dump path of sequence s of n: OUT itself when n == 1, else OUT with
 * ".s" inserted before a final ".safetensors" (else appended):
 * out.safetensors → out.0.safetensors, out.1.safetensors, ... */
static void seq_dump_path(char *buf, size_t cap, const char *out, int s, int n)
{
    const size_t len = strlen(out), sfx = strlen(".safetensors");
    if (n == 1)
        snprintf(buf, cap, "%s", out);
    else if (len > sfx && !strcmp(out + len - sfx, ".safetensors"))
        snprintf(buf, cap, "%.*s.%d.safetensors", (int)(len - sfx), out, s);
    else
        snprintf(buf, cap, "%s.%d", out, s);
}

/* The golden residual streams for teacher forcing from GOLDEN (an m3-ref
 * dump or a vector's expected.safetensors): tf[l] = layers.{l}.input for
 * l < L (layer 0: else embeddings), each [T, H] float widened to fp32.
 * Returns 0, or -1 with the reason in e. */
static int load_teacher(const char *path, int L, int T, int H, float **tf, m3_err *e)
{
    m3_store *g = NULL;
    if (m3_store_open(&g, path, e) != 0)
        return -1;
    int rc = 0;
    for (int l = 0; l < L && rc == 0; l++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%d.input", l);
        const m3_tensor *t = m3_store_get(g, name);
        if (!t && l == 0)
            t = m3_store_get(g, "embeddings");
        if (!t || t->ndim != 2 || t->shape[0] != T || t->shape[1] != H ||
            !(t->dtype == M3_F32 || t->dtype == M3_BF16 || t->dtype == M3_F16)) {
            rc = m3_fail(e, "%s: tensor \"%s\" %s (needs a float [%d, %d] tensor: T tokens, "
                            "hidden size)", path, name,
                         t ? "has the wrong shape or dtype" : "is missing", T, H);
            break;
        }
        tf[l] = (float *)malloc((size_t)T * H * sizeof(float));
        if (!tf[l]) {
            rc = m3_fail(e, "out of host memory for the golden input of layer %d", l);
            break;
        }
        for (size_t i = 0; i < (size_t)T * H; i++)
            tf[l][i] = m3_load_f32(t->data, t->dtype, i);
    }
    m3_store_close(g);
    return rc;
}

/* Print " top5: id:logit ..." (the five largest of last [V], ties to the
 * lower id, as bin/m3-ref forward prints them) and a newline. */
static void print_top5(const float *last, int V)
{
    int32_t top[5];
    const int ntop = m3_top_ids(last, V, 5, top);
    printf(" top5:");
    for (int j = 0; j < ntop; j++)
        printf(" %d:%.6g", (int)top[j], last[top[j]]);
    printf("\n");
}


/* The streaming figures of this run on stderr: prefill rate, bytes streamed,
 * the copies' own rate, and the link measured now (pinned and pageable). */
static int stream_report(dev_model *dm, int T, double prefill_s, m3_err *e)
{
    m3g_wstream *ws = dm->ws;
    double pinned = 0, pageable = 0;
    if (m3g_wstream_sync(ws, e) || m3g_h2d_bandwidth((size_t)1 << 30, 1, &pinned, e) ||
        m3g_h2d_bandwidth((size_t)1 << 30, 0, &pageable, e))
        return -1;
    const double gb = (double)ws->bytes_copied / 1e9;
    char stage[96];
    if (ws->pin[0])
        snprintf(stage, sizeof stage, "through %d pinned buffers of %zu MiB by %d host threads",
                 M3G_WS_RING, ws->pin_bytes >> 20, ws->copiers);
    else
        snprintf(stage, sizeof stage, "from the mapping (pageable)");
    fprintf(stderr,
            "m3-gpu forward: streamed weights: prefill of %d tokens in %.3f s (%.1f tokens/s); "
            "%lld layer loads, %.2f GB, copies %.3f s of device time (%.1f GB/s), staged %s "
            "(host %.3f s); host-to-device now: pinned %.1f GB/s, pageable %.1f GB/s\n",
            T, prefill_s, prefill_s > 0 ? T / prefill_s : 0.0, (long long)ws->fetches, gb,
            ws->copy_ms / 1e3, ws->copy_ms > 0 ? gb / (ws->copy_ms / 1e3) : 0.0, stage,
            ws->host_s, pinned, pageable);
    return 0;
}

int forward_run(const char *dir, const char *const *toks, int n, int mode, int lenient,
                const char *dumpp, const char *tf_path, const m3g_vision_request *vreq,
                int quiet, const fwd_opts *x)
{
    int *chunk = NULL, nchunk = 0, cmax = 0;
    int32_t *gen = NULL;
    double prefill_s = 0;
    m3_progress pg; /* the weight upload, then the summary line */
    m3_progress_init_stderr(&pg, "m3-gpu forward", quiet);
    int rc = M3G_EXIT_RUN, Ttot = 0, Tmax = 0, L = 0;
    int32_t **ids = (int32_t **)calloc((size_t)n, sizeof *ids);
    int *T = (int *)calloc((size_t)n, sizeof *T), *pos0 = (int *)calloc((size_t)n, sizeof *pos0);
    int *slot = (int *)calloc((size_t)n, sizeof *slot);
    m3_st_writer **w = (m3_st_writer **)calloc((size_t)n, sizeof *w);
    float **tf = NULL, *logits = NULL;
    m3_model m;
    m3_err e;
    dev_model dm;
    gpu_sess sess;
    int have_sess = 0;
    hipStream_t st = NULL;
    m3g_blas *blas = NULL;
    m3g_vision_feats vis;
    memset(&m, 0, sizeof m);
    memset(&dm, 0, sizeof dm);
    memset(&e, 0, sizeof e);
    memset(&vis, 0, sizeof vis);
    if (!ids || !T || !pos0 || !slot || !w) {
        m3_fail(&e, "out of host memory");
        goto fail;
    }
    for (int s = 0; s < n; s++) {
        if (m3_cli_parse_tokens(toks[s], &ids[s], &T[s], &e) != 0) {
            fprintf(stderr, "m3-gpu forward: --tokens: %s\n(run 'm3-gpu forward --help' for "
                            "usage)\n", e.msg);
            rc = M3G_EXIT_USAGE;
            goto out;
        }
        slot[s] = s;
    }
    if (m3g_open_model(&m, "forward", dir, lenient) != 0)
        goto out;
    L = m.cfg.text.num_layers;
    for (int s = 0; s < n && dumpp; s++)
        if (!(w[s] = m3_st_writer_new())) {
            m3_fail(&e, "out of host memory");
            goto fail;
        }
    if (M3G_HIP(&e, hipStreamCreate(&st))) {
        m3_fail_prefix(&e, "no usable GPU");
        goto fail;
    }
    if (dev_model_upload(&dm, &m, x->stream, &pg, &e) != 0) {
        m3_fail_prefix(&e, "uploading the weights of %s", dir);
        goto fail;
    }
    if (vreq) { /* vision tower on the device; the prompt grows by the placeholder runs */
        int32_t *ids2 = NULL;
        int64_t n2 = 0;
        if (m3g_vision_prepare(&m, vreq, ids[0], T[0], mode, NULL, st, w[0], &ids2, &n2, &vis,
                               &e))
            goto fail;
        free(ids[0]);
        ids[0] = ids2;
        if (n2 <= 0 || n2 > INT32_MAX) {
            m3_fail(&e, "the multimodal prompt has %lld positions", (long long)n2);
            goto fail;
        }
        T[0] = (int)n2;
    }
    for (int s = 0; s < n; s++) {
        Tmax = T[s] > Tmax ? T[s] : Tmax;
        if (T[s] > INT32_MAX - Ttot) {
            m3_fail(&e, "the prompts have too many tokens in all");
            goto fail;
        }
        Ttot += T[s];
    }
    if (tf_path) {
        tf = (float **)calloc((size_t)L, sizeof *tf);
        if (!tf) {
            m3_fail(&e, "out of host memory");
            goto fail;
        }
        if (load_teacher(tf_path, L, T[0], m.cfg.text.hidden_size, tf, &e) != 0) {
            m3_fail_prefix(&e, "--teacher-forced");
            goto fail;
        }
    }
    if (x->chunks) { /* one prompt (the command line checks it) */
        if (m3_cli_parse_chunks(x->chunks, T[0], &chunk, &nchunk, &e) != 0)
            goto fail;
        for (int i = 0; i < nchunk; i++)
            cmax = chunk[i] > cmax ? chunk[i] : cmax;
    }
    if (x->max_new > 0 && !(gen = (int32_t *)malloc((size_t)x->max_new * sizeof *gen))) {
        m3_fail(&e, "out of host memory");
        goto fail;
    }
    logits = (float *)malloc((size_t)Ttot * (size_t)m.cfg.text.vocab_size * sizeof(float));
    if (!logits) {
        m3_fail(&e, "out of host memory for the logits of %d tokens", Ttot);
        goto fail;
    }
    /* vendor BLAS for prefill GEMMs only in bf16 mode (exact there: X is
     * already bf16); fp32 mode keeps the hand-written fp32 kernels */
    if (mode == 1 && Ttot > 8) {
        const m3_text_config *c = &m.cfg.text;
        size_t wmax = (size_t)c->hidden_size;
        const size_t cand[3] = {(size_t)c->num_heads * c->head_dim,
                                (size_t)c->dense_intermediate_size,
                                (size_t)c->shared_intermediate_size};
        for (int i = 0; i < 3; i++)
            wmax = cand[i] > wmax ? cand[i] : wmax;
        blas = m3g_blas_new(st, (size_t)Ttot * wmax); /* NULL: fallback kernels */
    }
    /* rows per call: the whole batch, or the largest chunk; positions: the
     * longest prompt and its continuation */
    if (gpu_sess_init(&sess, &m, &dm, chunk ? cmax : Ttot, Tmax + x->max_new, n, mode, blas, st,
                      &e) != 0)
        goto fail;
    have_sess = 1;
    sess.vis = vis.n > 0 ? &vis : NULL; /* placed into sequence 0's embeddings */
    sess.exact = x->exact;
    {
        const double t0 = m3_monotonic_s();
        if (!chunk) {
            const gpu_batch bt = {n, (const int32_t *const *)ids, T, pos0, slot,
                                  dumpp ? w : NULL, (const float *const *)tf};
            if (gpu_step_batch(&sess, &bt, logits, 0, &e) != 0)
                goto fail;
        }
        for (int i = 0, p = 0; chunk && i < nchunk; p += chunk[i], i++) {
            const int32_t *ci = ids[0] + p;
            const gpu_batch bt = {1, &ci, &chunk[i], &p, slot, dumpp ? w : NULL, NULL};
            if (gpu_step_batch(&sess, &bt, logits + (size_t)p * m.cfg.text.vocab_size, 0, &e)) {
                m3_fail_prefix(&e, "chunk %d (%d tokens at position %d)", i, chunk[i], p);
                goto fail;
            }
        }
        prefill_s = m3_monotonic_s() - t0;
    }
    if (x->max_new > 0) { /* greedy continuation of the one prompt (M3-SAMPLE-1) */
        const int V = m.cfg.text.vocab_size;
        float *step = (float *)malloc((size_t)V * sizeof(float));
        if (!step) {
            m3_fail(&e, "out of host memory");
            goto fail;
        }
        const float *row = logits + (size_t)(T[0] - 1) * V;
        for (int j = 0; j < x->max_new; j++) {
            gen[j] = m3_argmax(row, V);
            if (j + 1 == x->max_new)
                break;
            const int one = 1, p = T[0] + j;
            const int32_t *gi = &gen[j];
            const gpu_batch bt = {1, &gi, &one, &p, slot, NULL, NULL};
            if (gpu_step_batch(&sess, &bt, step, 1, &e) != 0) {
                free(step);
                goto fail;
            }
            row = step;
        }
        free(step);
        const int64_t gd[1] = {x->max_new};
        if (dumpp && m3_st_writer_add(w[0], "greedy_tokens", M3_I32, 1, gd, gen, &e) != 0)
            goto fail;
    }
    if (dm.ws && stream_report(&dm, Ttot, prefill_s, &e) != 0)
        goto fail;
    for (int s = 0; s < n && dumpp; s++) {
        char buf[32], path[4200], bi[32];
        snprintf(buf, sizeof buf, "%d", T[s]);
        snprintf(bi, sizeof bi, "%d/%d", s, n);
        seq_dump_path(path, sizeof path, dumpp, s, n);
        if (m3_st_writer_meta(w[s], "m3.dump_version", "1", &e) != 0 ||
            m3_st_writer_meta(w[s], "m3.mode", mode ? "bf16" : "fp32", &e) != 0 ||
            m3_st_writer_meta(w[s], "m3.producer", "m3-gpu forward (" M3_GPU_VENDOR ")", &e) != 0 ||
            m3_st_writer_meta(w[s], "m3.T", buf, &e) != 0 ||
            (n > 1 && m3_st_writer_meta(w[s], "m3.batch", bi, &e) != 0) ||
            (tf_path && m3_st_writer_meta(w[s], "m3.teacher_forced", tf_path, &e) != 0) ||
            m3_st_writer_save(w[s], path, &e) != 0)
            goto fail;
    }
    for (int s = 0, r = 0; s < n; r += T[s], s++) {
        const int V = m.cfg.text.vocab_size;
        if (n > 1)
            printf("seq %d: ", s);
        printf("T=%d%s", T[s], tf_path ? " (teacher-forced)" : "");
        print_top5(logits + (size_t)(r + T[s] - 1) * V, V);
    }
    for (int j = 0; j < x->max_new; j++)
        printf("%s%d%s", j ? "," : "greedy: ", (int)gen[j], j + 1 == x->max_new ? "\n" : "");
    {
        char sum[96];
        snprintf(sum, sizeof sum, "%d prompt%s, %d tokens, %d layers", n, n > 1 ? "s" : "", Ttot,
                 L);
        m3_progress_summary(&pg, sum);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "m3-gpu forward: %s\n", e.msg);
out:
    if (have_sess)
        gpu_sess_free(&sess);
    m3g_vision_feats_free(&vis);
    m3g_blas_free(blas);
    dev_model_free(&dm);
    if (st)
        (void)hipStreamDestroy(st);
    for (int s = 0; s < n; s++) {
        if (w)
            m3_st_writer_free(w[s]);
        if (ids)
            free(ids[s]);
    }
    for (int l = 0; tf && l < L; l++)
        free(tf[l]);
    free(tf);
    free(w);
    free(ids);
    free(T);
    free(pos0);
    free(slot);
    free(logits);
    free(chunk);
    free(gen);
    m3_model_close(&m);
    return rc;
}
