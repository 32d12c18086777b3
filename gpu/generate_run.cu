/* generate_run.cu — see generate_run.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cli_opts.h"
#include "genconfig.h"
#include "progress.h"
#include "sampling.h"
#include "speculative.h"
#include "tokenizer.h"
}

#include "drafter.h"
#include "forward.h"
#include "generate_run.h"
#include "hip_check.h"
#include "weight_upload.h"


/* Print generated token k of a sequence: its id (ids, or no tokenizer: comma-
 * or space-separated) or its text through the streaming decoder ds. */
static int emit_token(const m3_tokenizer *tz, m3_decode_stream *ds, int ids, long long k,
                      int32_t tok, m3_err *e)
{
    const char *txt;
    size_t n;
    if (ids || !tz) {
        printf("%s%d", k ? (ids ? "," : " ") : "", (int)tok);
        return 0;
    }
    if (m3_tokenizer_decode_stream(tz, ds, tok, &txt, &n, e) != 0)
        return -1;
    fwrite(txt, 1, n, stdout);
    return 0;
}

/* ---- generate --draft: Eagle3 speculative decoding ------------------------
 * The loop is ref/speculative.c's (m3_spec_run: drafting, sampling,
 * acceptance, rollback, statistics), over this backend: the target is
 * gpu_step_batch on one cache region (a verification of [last, d_1..d_K]
 * is one call of K + 1 rows at the next position, the multi-row step with
 * past the prefill and batches already use. fp32: its linear layers give
 * each row the bits of a decode row (ref's 8-partial order for any T);
 * norms (block tree sums) and attention / SwiGLU (device expf, split-key
 * softmax sums) keep the GPU's own per-row order, not ref's, as in plain
 * generate. bf16: K + 1 > 8 rows take the GEMM instead of the GEMV, which
 * may differ from a decode row by a bf16 step), with the Eagle3 taps
 * copied on the device (gpu_sess.eagle_aux); the drafter is gpu/drafter.h.
 * Rollback: the target and the drafter keep their lengths here; positions
 * past a length are rewritten by the next call before anything reads them
 * (attention, the indexer and block selection see keys <= the query's
 * position only; the bf16 index-K range words may keep a superset of the
 * range, which kernels.h allows). */
typedef struct gpu_spec {
    gpu_sess *sess;
    m3g_eagle3 *dr;
    float *aux; /* device [3, rows, H] */
    int rows;
    int64_t tlen; /* target positions cached */
} gpu_spec;

static int gs_target(void *ctx, const int32_t *toks, int n, float *logits, int n_logits, m3_err *e)
{
    gpu_spec *g = (gpu_spec *)ctx;
    if (n_logits != 1 && n_logits != n)
        return m3_fail(e, "m3-gpu: a target forward with logits of %d of its %d rows", n_logits, n);
    const int32_t *idp = toks;
    int T = n, p0 = (int)g->tlen, slot = 0;
    const gpu_batch bt = {1, &idp, &T, &p0, &slot, NULL, NULL};
    g->sess->eagle_aux = g->aux;
    g->sess->eagle_rows = g->rows;
    const int rc = gpu_step_batch(g->sess, &bt, logits, n_logits == 1 ? 1 : 0, e);
    g->sess->eagle_aux = NULL;
    if (rc != 0)
        return m3_fail_prefix(e, "the target forward of %d tokens at position %d", n, p0);
    g->tlen += n;
    return 0;
}

static int gs_seed(void *ctx, const int32_t *toks, int n, float *dlog, m3_err *e)
{
    gpu_spec *g = (gpu_spec *)ctx;
    return m3g_eagle3_seed(g->dr, g->aux, g->rows, toks, n, dlog, e);
}

static int gs_step(void *ctx, int32_t token, float *dlog, m3_err *e)
{
    return m3g_eagle3_step(((gpu_spec *)ctx)->dr, token, dlog, e);
}

static int64_t gs_len(void *ctx) { return ((gpu_spec *)ctx)->tlen; }

static void gs_truncate(void *ctx, int64_t tlen, int64_t dlen)
{
    gpu_spec *g = (gpu_spec *)ctx;
    if (tlen >= 0 && tlen < g->tlen)
        g->tlen = tlen;
    if (dlen >= 0)
        m3g_eagle3_truncate(g->dr, dlen);
}

/* generate --draft for one prompt ids [T] over the batch context (empty caches of
 * cap positions, rows >= max(T, K + 1)): open the drafter, run the loop,
 * print the ids / text and the statistics line as bin/m3-ref. 0 or M3G_EXIT_RUN
 * after printing. */
static int spec_generate(const gen_opts *go, const m3_model *m, dev_model *dm, gpu_sess *sess,
                         const int32_t *ids, int T, int cap, m3_sampler *sp,
                         const m3_gen_defaults *g, const m3_tokenizer *tokzr,
                         m3_decode_stream *ds, hipStream_t st)
{
    const m3_text_config *c = &m->cfg.text;
    const int V = c->vocab_size, H = c->hidden_size;
    const int64_t maxpos = c->max_position_embeddings;
    const int capped = maxpos > 0 && (int64_t)T + go->max_new > maxpos;
    long long n_max = go->max_new;
    if (capped && n_max > cap - T + 1) /* what plain decoding can reach */
        n_max = cap - T + 1;
    m3_err e;
    memset(&e, 0, sizeof e);
    m3_eagle3 d;
    memset(&d, 0, sizeof d);
    const m3_eagle3_opts dop = {go->lenient};
    m3g_eagle3 *dr = NULL;
    int32_t *out = (int32_t *)malloc((size_t)(n_max > 0 ? n_max : 1) * sizeof(int32_t));
    int n_out = 0, rc = M3G_EXIT_RUN;
    m3_spec_stats sst;
    memset(&sst, 0, sizeof sst);
    gpu_spec gs;
    memset(&gs, 0, sizeof gs);
    double t0 = m3_monotonic_s(), t_gen = 0.0;
    if (!out) {
        m3_fail(&e, "cannot allocate %lld output tokens", n_max);
        goto fail;
    }
    if (m3_eagle3_open(&d, go->draft, m, &dop, &e) != 0)
        goto fail;
    for (int i = 0; i < T; i++) /* as m3_spec_generate */
        if (ids[i] < 0 || ids[i] >= V) {
            m3_fail(&e, "token %d at index %d is out of range [0, %d)", (int)ids[i], i, V);
            goto fail;
        }
    gs.sess = sess;
    gs.rows = sess->tmax;
    if (dev_model_alloc(dm, (void **)&gs.aux, (size_t)3 * gs.rows * H * sizeof(float), &e) != 0) {
        m3_fail_prefix(&e, "the Eagle3 taps [3, %d, %d]", gs.rows, H);
        goto fail;
    }
    memcpy(sess->eagle_taps, d.cfg.taps, sizeof sess->eagle_taps);
    dr = m3g_eagle3_new(&d, &m->w.lm_head, dm->lm_head, sess->tmax, cap, st, &e);
    if (!dr)
        goto fail;
    gs.dr = dr;
    if (n_max > 0) {
        const m3_spec_backend be = {&gs, gs_target, gs_seed, gs_step, gs_len, gs_truncate};
        m3_spec_opts so;
        memset(&so, 0, sizeof so);
        so.k = (int)go->spec_k;
        so.max_new_tokens = (int)n_max;
        so.eos = g->eos;
        so.n_eos = g->n_eos;
        if (m3_spec_run(&be, &d, V, ids, T, sp, &so, out, &n_out, &sst, &e) != 0)
            goto fail;
    }
    t_gen = m3_monotonic_s() - t0;
    {
        if (!go->print_ids && !tokzr)
            fprintf(stderr, "m3-gpu: %s has no usable tokenizer; printing token ids\n", go->dir);
        if (go->is_text[0] && go->srcs[0] && tokzr && !go->print_ids) /* echo a --prompt, as m3-ref */
            fwrite(go->srcs[0], 1, strlen(go->srcs[0]), stdout);
        int stop_eos = 0;
        for (int k = 0; k < n_out; k++) {
            if (emit_token(tokzr, ds, go->print_ids, k, out[k], &e) != 0) {
                printf("\n");
                goto fail;
            }
            for (int j = 0; j < g->n_eos; j++)
                stop_eos |= out[k] == g->eos[j];
        }
        fflush(stdout);
        fprintf(stderr,
                "m3-gpu: speculative (K %lld): %lld tokens in %lld target forwards (%.2f tokens "
                "per target forward); acceptance %.1f%% (%lld of %lld drafts); %.3f s (%.2f "
                "tokens/s)\n",
                go->spec_k, (long long)sst.generated, (long long)sst.target_forwards,
                sst.tokens_per_forward, 100.0 * sst.acceptance_rate, (long long)sst.accepted,
                (long long)sst.drafted, t_gen, t_gen > 0 ? (double)sst.generated / t_gen : 0.0);
        if (tokzr && !go->print_ids) {
            const char *txt;
            size_t txtlen;
            if (m3_decode_stream_flush(ds, &txt, &txtlen, &e) != 0)
                goto fail;
            fwrite(txt, 1, txtlen, stdout);
        }
        printf("\n");
        fflush(stdout);
        if (stop_eos)
            fprintf(stderr, "m3-gpu: stopped at end-of-sequence token\n");
        else if (n_out < go->max_new && capped)
            fprintf(stderr, "m3-gpu: stopped at the context limit (max_position_embeddings "
                            "%lld)\n", (long long)maxpos);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
out:
    m3g_eagle3_free(dr);
    m3_eagle3_close(&d);
    free(out);
    return rc;
}

/* The generate command: n prompts (srcs[s]: text when is_text[s], else ids)
 * prefilled as one batch, then decoded together one token per active
 * sequence per step. A single prompt (n == 1) streams its tokens as they
 * come; a batch prints each sequence on its own line at the end. A single
 * prompt may carry vision inputs (go->vreq): the tower runs first, the
 * prompt grows by the placeholder runs and the features are placed at the
 * prefill (gpu_step_batch, one sequence at pos0 0). */
int generate_run(const gen_opts *go)
{
    m3_progress pg; /* the weight upload, then the summary line */
    m3_progress_init_stderr(&pg, "m3-gpu generate", go->quiet);
    const char *dir = go->dir;
    const char *const *srcs = go->srcs;
    const int *is_text = go->is_text;
    const int n = go->n, mode = go->mode, print_ids = go->print_ids;
    const long long max_new = go->max_new;
    int rc = M3G_EXIT_RUN, Ttot = 0, capmax = 0, nsp = 0, any_text = 0;
    int32_t **ids = (int32_t **)calloc((size_t)n, sizeof *ids);
    int32_t **out = (int32_t **)calloc((size_t)n, sizeof *out);
    int *T = (int *)calloc((size_t)n, sizeof *T), *len = (int *)calloc((size_t)n, sizeof *len);
    int *cap = (int *)calloc((size_t)n, sizeof *cap), *act = (int *)calloc((size_t)n, sizeof *act);
    int *p0 = (int *)calloc((size_t)n, sizeof *p0), *one = (int *)calloc((size_t)n, sizeof *one);
    int *done = (int *)calloc((size_t)n, sizeof *done);
    long long *produced = (long long *)calloc((size_t)n, sizeof *produced);
    int32_t *nxt = (int32_t *)calloc((size_t)n, sizeof *nxt);
    const int32_t **idp = (const int32_t **)calloc((size_t)n, sizeof *idp);
    m3_sampler *sp = (m3_sampler *)calloc((size_t)n, sizeof *sp);
    m3_decode_stream *ds = (m3_decode_stream *)calloc((size_t)n, sizeof *ds);
    const int streaming = n == 1;
    float *logits = NULL;
    m3_model m;
    m3_err e;
    dev_model dm;
    gpu_sess sess;
    int have_sess = 0, greedy = 0;
    hipStream_t st = NULL;
    m3_tokenizer *tokzr = NULL;
    m3g_vision_feats vis;
    memset(&m, 0, sizeof m);
    memset(&dm, 0, sizeof dm);
    memset(&e, 0, sizeof e);
    memset(&vis, 0, sizeof vis);
    if (!ids || !out || !T || !len || !cap || !act || !p0 || !one || !done || !produced || !nxt ||
        !idp || !sp || !ds) {
        m3_fail(&e, "out of host memory");
        goto fail;
    }
    if (go->draft && go->vreq) { /* as bin/m3-ref */
        fprintf(stderr, "m3-gpu generate: --draft works on token prompts only (no --image, "
                        "--video or --pixels)\n");
        goto out;
    }
    for (int s = 0; s < n; s++)
        m3_decode_stream_init(&ds[s], 0);
    for (int s = 0; s < n; s++)
        any_text |= is_text[s];
    if ((any_text || !print_ids) && m3_tokenizer_open(&tokzr, dir, &e) != 0) {
        tokzr = NULL;
        if (any_text) {
            fprintf(stderr, "m3-gpu generate: %s needs a tokenizer: %s\n",
                    go->po && go->po->conversation ? "--conversation" : "--prompt", e.msg);
            goto out;
        }
    }
    for (int s = 0; s < n; s++) {
        if (is_text[s]) { /* plain or a chat turn, as bin/m3-ref (ref/prompt.h) */
            size_t count = 0;
            if (m3_prompt_encode(tokzr, srcs[s], go->po, &ids[s], &count, &e)) {
                if (n > 1)
                    m3_fail_prefix(&e, "prompt %d", s);
                fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
                goto out;
            }
            if (count > INT32_MAX / 2) {
                fprintf(stderr, "m3-gpu generate: prompt %d encodes to %zu tokens\n", s, count);
                goto out;
            }
            T[s] = (int)count;
        } else if (m3_cli_parse_tokens(srcs[s], &ids[s], &T[s], &e) != 0) {
            fprintf(stderr, "m3-gpu generate: --tokens: %s\n(run 'm3-gpu generate --help' for "
                            "usage)\n", e.msg);
            rc = M3G_EXIT_USAGE;
            goto out;
        }
        if (T[s] > INT32_MAX - Ttot) {
            fprintf(stderr, "m3-gpu generate: the prompts have too many tokens in all\n");
            goto out;
        }
        Ttot += T[s];
    }
    if (m3g_open_model(&m, "generate", dir, go->lenient) != 0)
        goto out;
    if (M3G_HIP(&e, hipStreamCreate(&st))) {
        m3_fail_prefix(&e, "no usable GPU");
        goto fail;
    }
    if (go->vreq) { /* the vision tower on the device; the prompt grows by the placeholder
                     * runs (video timestamps with the tokenizer of a --prompt, as m3-ref) */
        int32_t *ids2 = NULL;
        int64_t n2 = 0;
        if (m3g_vision_prepare(&m, go->vreq, ids[0], T[0], mode, is_text[0] ? tokzr : NULL, st,
                               NULL, &ids2, &n2, &vis, &e)) {
            fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
            goto out;
        }
        free(ids[0]);
        ids[0] = ids2;
        if (n2 <= 0 || n2 > INT32_MAX / 2) {
            fprintf(stderr, "m3-gpu generate: the multimodal prompt has %lld positions\n",
                    (long long)n2);
            goto out;
        }
        Ttot = T[0] = (int)n2;
    }
    {
        /* flags override generation_config.json, which overrides the defaults */
        m3_gen_defaults g = m3_gen_defaults_builtin(m.cfg.text.eos_token_id);
        m3_err ge = {{0}};
        if (m3_gen_config_load(dir, &g, &ge) != 0) {
            fprintf(stderr, "m3-gpu generate: %s\n", ge.msg);
            goto out;
        }
        const int flag_top_k = (int)go->top_k;
        m3_gen_apply_flags(&g, go->greedy_flag, go->have_temp ? &go->temp : NULL,
                           go->have_top_p ? &go->top_p : NULL,
                           go->have_top_k ? &flag_top_k : NULL);
        greedy = g.greedy;
        const float temp = g.temperature, top_p = g.top_p;
        const int top_k = g.top_k;
        const int V = m.cfg.text.vocab_size;
        const int64_t maxpos = m.cfg.text.max_position_embeddings;
        for (; nsp < n; nsp++)
            if (m3_sampler_init(&sp[nsp], V, greedy, temp, top_k, top_p, (uint64_t)go->seed)) {
                fprintf(stderr, "m3-gpu generate: cannot allocate the sampler for vocab %d\n", V);
                goto out;
            }
        for (int s = 0; s < n; s++) { /* capacity per sequence, as the single-prompt run */
            int64_t c = (int64_t)T[s] + max_new;
            if (maxpos > 0 && T[s] > maxpos) {
                fprintf(stderr, "m3-gpu generate: prompt %d has %d tokens, more than "
                                "max_position_embeddings %lld of %s/config.json\n", s, T[s],
                        (long long)maxpos, dir);
                goto out;
            }
            c = maxpos > 0 && c > maxpos ? maxpos : c;
            if (c > INT32_MAX) {
                fprintf(stderr, "m3-gpu generate: %lld positions are too many\n", (long long)c);
                goto out;
            }
            cap[s] = (int)c;
            capmax = cap[s] > capmax ? cap[s] : capmax;
            len[s] = T[s];
            idp[s] = ids[s];
            act[s] = s;
            out[s] = (int32_t *)malloc((size_t)(max_new > 0 ? max_new : 1) * sizeof(int32_t));
            if (!out[s]) {
                m3_fail(&e, "out of host memory");
                goto fail;
            }
        }
        logits = (float *)malloc((size_t)n * V * sizeof(float));
        if (!logits) {
            m3_fail(&e, "out of host memory");
            goto fail;
        }
        if (dev_model_upload(&dm, &m, go->stream, &pg, &e) != 0) {
            m3_fail_prefix(&e, "uploading the weights of %s", dir);
            goto fail;
        }
        /* no vendor BLAS here: every linear runs the fixed-order kernels (--draft: rows
         * for the prompt and for a verification of K + 1 tokens) */
        const int tmax = go->draft && go->spec_k + 1 > Ttot ? (int)go->spec_k + 1 : Ttot;
        if (gpu_sess_init(&sess, &m, &dm, tmax, capmax, n, mode, NULL, st, &e) != 0)
            goto fail;
        have_sess = 1;
        sess.vis = vis.n > 0 ? &vis : NULL; /* placed into the prompt's embeddings */
        sess.exact = go->exact;
        if (go->draft) { /* Eagle3 speculative decoding of the one prompt */
            rc = spec_generate(go, &m, &dm, &sess, ids[0], T[0], cap[0], &sp[0], &g, tokzr,
                               &ds[0], st);
            goto out;
        }
        const double t0 = m3_monotonic_s();
        {
            const gpu_batch bt = {n, idp, T, p0, act, NULL, NULL};
            if (gpu_step_batch(&sess, &bt, logits, 1, &e) != 0)
                goto fail;
        }
        const double t_prefill = m3_monotonic_s() - t0, t1 = m3_monotonic_s();
        long long steps = 0;
        if (!print_ids && !tokzr)
            fprintf(stderr, "m3-gpu: %s has no usable tokenizer; printing token ids\n", dir);
        for (int s = 0; s < n; s++) { /* print now (streaming) or at the end (batch) */
            if (streaming && is_text[s] && srcs[s] && tokzr && !print_ids) /* echo a --prompt, as m3-ref */
                fwrite(srcs[s], 1, strlen(srcs[s]), stdout);
        }
        for (int na = max_new > 0 ? n : 0; na > 0;) {
            int nn = 0; /* sample every active sequence; keep those that go on */
            for (int a = 0; a < na; a++) {
                const int s = act[a];
                const int32_t tok = m3_sample(&sp[s], logits + (size_t)a * V);
                int stop = 0;
                out[s][produced[s]++] = tok;
                if (streaming) {
                    if (emit_token(tokzr, &ds[s], print_ids, produced[s] - 1, tok, &e) != 0) {
                        printf("\n");
                        fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
                        goto out;
                    }
                    fflush(stdout);
                }
                for (int j = 0; j < g.n_eos; j++)
                    stop |= tok == g.eos[j];
                done[s] = stop ? 1 : 0;
                if (stop || produced[s] == max_new || len[s] >= cap[s])
                    continue;
                act[nn] = s;
                nxt[nn] = tok;
                idp[nn] = &nxt[nn];
                one[nn] = 1;
                p0[nn] = len[s]++;
                nn++;
            }
            na = nn;
            if (na == 0)
                break;
            const gpu_batch bt = {na, idp, one, p0, act, NULL, NULL};
            if (gpu_step_batch(&sess, &bt, logits, 1, &e) != 0)
                goto fail;
            steps += na;
        }
        const double t_decode = m3_monotonic_s() - t1;
        for (int s = 0; s < n; s++) {
            const char *txt;
            size_t txtlen;
            if (!streaming && is_text[s] && tokzr && !print_ids)
                fwrite(srcs[s], 1, strlen(srcs[s]), stdout);
            for (long long k = 0; k < produced[s] && !streaming; k++)
                if (emit_token(tokzr, &ds[s], print_ids, k, out[s][k], &e) != 0) {
                    printf("\n");
                    fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
                    goto out;
                }
            if (tokzr && !print_ids) {
                if (m3_decode_stream_flush(&ds[s], &txt, &txtlen, &e) != 0) {
                    printf("\n");
                    fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
                    goto out;
                }
                fwrite(txt, 1, txtlen, stdout);
            }
            printf("\n");
            char who[32] = "";
            if (n > 1)
                snprintf(who, sizeof who, "sequence %d ", s);
            if (done[s])
                fprintf(stderr, "m3-gpu: %sstopped at end-of-sequence token\n", who);
            else if (produced[s] < max_new && maxpos > 0 && cap[s] == maxpos)
                fprintf(stderr, "m3-gpu: %sstopped at the context limit "
                                "(max_position_embeddings %lld)\n", who, (long long)maxpos);
        }
        fflush(stdout);
        char nb[32] = "";
        if (n > 1)
            snprintf(nb, sizeof nb, "batch of %d, ", n);
        fprintf(stderr,
                "m3-gpu: %s%s (%s); prefill %d tokens in %.3f s (%.1f tokens/s); "
                "decode %lld tokens in %.3f s (%.2f tokens/s)\n",
                nb, greedy ? "greedy" : "sampled", M3_GPU_VENDOR, Ttot, t_prefill,
                t_prefill > 0 ? Ttot / t_prefill : 0.0, steps, t_decode,
                t_decode > 0 ? (double)steps / t_decode : 0.0);
    }
    {
        char sum[64];
        snprintf(sum, sizeof sum, "%d prompt%s", n, n > 1 ? "s" : "");
        m3_progress_summary(&pg, sum);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "m3-gpu generate: %s\n", e.msg);
out:
    if (have_sess)
        gpu_sess_free(&sess);
    for (int s = 0; s < nsp; s++)
        m3_sampler_free(&sp[s]);
    for (int s = 0; ds && s < n; s++)
        m3_decode_stream_free(&ds[s]);
    m3g_vision_feats_free(&vis);
    dev_model_free(&dm);
    if (st)
        (void)hipStreamDestroy(st);
    for (int s = 0; s < n; s++) {
        if (ids)
            free(ids[s]);
        if (out)
            free(out[s]);
    }
    free(ids);
    free(out);
    free(T);
    free(len);
    free(cap);
    free(act);
    free(p0);
    free(one);
    free(done);
    free(produced);
    free(nxt);
    free(idp);
    free(sp);
    free(ds);
    free(logits);
    m3_model_close(&m);
    m3_tokenizer_free(tokzr);
    return rc;
}
