/* speculative.c — speculative decoding with an Eagle3 drafter.
 *
 * Spec: M3-EAGLE-VERIFY-1, M3-EAGLE-VERIFY-2, M3-SAMPLE-2, M3-CACHE-3 (see
 * speculative.h).
 *
 * Loop invariant at the start of a round: the target caches hold positions
 * 0..P-1 (prompt and accepted output), `last` is the newest output token (its
 * position P is not cached yet); the drafter holds positions 0..P-1, each
 * computed from the target's feature of that position and the token after it,
 * and the step at P-1 (token `last`) produced the first draft's logits and
 * the recurrent feature. A round drafts K' = min(K, tokens still allowed - 1)
 * tokens, runs the target once over [last, d_1..d_K'] at P..P+K', accepts j
 * drafts plus one target token, truncates the target to P+j+1 positions,
 * truncates the drafter to P and re-runs it over positions P..P+j with the
 * target's features of those positions. Rows of a verification forward equal
 * decode rows bit for bit (M3-CACHE-2), so greedy output equals plain greedy
 * decoding.
 *
 * Sampled rounds (Leviathan et al. / Chen et al. rejection sampling): draft
 * d_k ~ q_k; with p_k the target distribution at the same position, accept d_k
 * with probability min(1, p_k(d_k) / q_k(d_k)); on the first rejection the
 * output is drawn from normalize(max(0, p_k - q_k)); if all K' are accepted,
 * one more token is drawn from p_{K'+1}. p and q are the M3-SAMPLE-2 transform
 * of the logits (the distribution m3_sample draws from), q mapped through d2t
 * onto target ids. The first output token (after prefill) is drawn from p with
 * one uniform exactly as m3_sample, so plain and speculative sampling agree on
 * it for the same seed.
 *
 * The loop (m3_spec_run) calls the models only through an m3_spec_backend;
 * m3_spec_generate runs it over the reference (eagle3.h, model.h), and
 * bin/m3-gpu over its device target and drafter, so both share every
 * sampling, acceptance and rollback decision.
 */
#include "speculative.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* the sampling transform (M3-SAMPLE-2), dense                              */

int m3_spec_probs(const m3_sampler *sp, const float *logits, int V, float *probs, int32_t *ord,
                  float *z)
{
    /* the same distribution m3_sample draws from, spread over [V] */
    int n = m3_sampler_dist(sp, logits, V, z, ord);
    for (int i = 0; i < V; i++)
        probs[i] = 0.0f;
    for (int r = 0; r < n; r++)
        probs[ord[r]] = z[ord[r]];
    return n;
}

int32_t m3_spec_draw(const float *probs, const int32_t *ord, int n, double u)
{
    double cum = 0.0;
    for (int r = 0; r < n; r++) {
        cum += (double)probs[ord[r]];
        if (u < cum)
            return ord[r];
    }
    return ord[n - 1];
}

/* ------------------------------------------------------------------------ */
/* the driver (m3_spec_run), over any backend                               */

typedef struct spec_buf {
    float *logits;  /* [K+1, V] verification logits */
    float *dlog;    /* [Vd] draft logits */
    float *p;       /* [V] */
    float *q;       /* [K, V] draft distributions on target ids */
    float *qd;      /* [Vd] draft distribution on draft ids */
    float *z;       /* [V] */
    int32_t *ord;   /* [V] */
} spec_buf;

static void buf_free(spec_buf *b)
{
    free(b->logits);
    free(b->dlog);
    free(b->p);
    free(b->q);
    free(b->qd);
    free(b->z);
    free(b->ord);
}

static int is_eos(const m3_spec_opts *o, int32_t t)
{
    for (int i = 0; i < o->n_eos; i++)
        if (o->eos[i] == t)
            return 1;
    return 0;
}

static int greedy_of(const m3_sampler *sp)
{
    return sp->greedy || !(sp->temperature > 0.0f);
}

/* Choose a draft token from the draft logits b->dlog; in sampled mode also
 * write its distribution on target ids into qrow [V]. */
static int32_t pick_draft(const m3_eagle3 *d, m3_sampler *sp, spec_buf *b, float *qrow, int V)
{
    const int Vd = d->cfg.draft_vocab;
    if (greedy_of(sp))
        return m3_eagle3_to_target(d, m3_argmax(b->dlog, Vd));
    int n = m3_spec_probs(sp, b->dlog, Vd, b->qd, b->ord, b->z);
    for (int i = 0; i < V; i++)
        qrow[i] = 0.0f;
    for (int r = 0; r < n; r++)
        qrow[m3_eagle3_to_target(d, b->ord[r])] = b->qd[b->ord[r]];
    return m3_eagle3_to_target(d, m3_spec_draw(b->qd, b->ord, n, m3_sampler_uniform(sp)));
}

/* A token from target logits [V] (greedy argmax or a draw from p). */
static int32_t pick_target(m3_sampler *sp, spec_buf *b, const float *logits, int V)
{
    if (greedy_of(sp))
        return m3_argmax(logits, V);
    int n = m3_spec_probs(sp, logits, V, b->p, b->ord, b->z);
    return m3_spec_draw(b->p, b->ord, n, m3_sampler_uniform(sp));
}

/* The options and prompt both entry points take: 0, or -1 with e set. */
static int check_opts(const m3_spec_opts *o, const int32_t *prompt, int n_prompt, m3_err *e)
{
    if (!o || o->k < 1 || o->k > M3_SPEC_MAX_K)
        return m3_fail(e, "speculative: spec tokens K must be in [1, %d] (got %d)", M3_SPEC_MAX_K,
                       o ? o->k : 0);
    if (o->max_new_tokens < 1)
        return m3_fail(e, "speculative: max_new_tokens must be >= 1 (got %d)", o->max_new_tokens);
    if (n_prompt < 1 || !prompt)
        return m3_fail(e, "speculative: empty prompt");
    return 0;
}

int m3_spec_run(const m3_spec_backend *be, const m3_eagle3 *d, int V, const int32_t *prompt,
                int n_prompt, m3_sampler *sp, const m3_spec_opts *o, int32_t *out, int *n_out,
                m3_spec_stats *st, m3_err *e)
{
    const int Vd = d->cfg.draft_vocab;
    *n_out = 0;
    m3_spec_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof *st);
    if (check_opts(o, prompt, n_prompt, e) != 0)
        return -1;
    if (sp->vocab != V)
        return m3_fail(e, "speculative: sampler vocabulary %d differs from the target's %d",
                       sp->vocab, V);

    const int K = o->k;
    const size_t rows = (size_t)(n_prompt > K + 1 ? n_prompt : K + 1);
    spec_buf b;
    memset(&b, 0, sizeof b);
    b.logits = malloc(sizeof(float) * (size_t)(K + 1) * (size_t)V);
    b.dlog = malloc(sizeof(float) * (size_t)Vd);
    b.p = malloc(sizeof(float) * (size_t)V);
    b.q = malloc(sizeof(float) * (size_t)K * (size_t)V);
    b.qd = malloc(sizeof(float) * (size_t)Vd);
    b.z = malloc(sizeof(float) * (size_t)V);
    b.ord = malloc(sizeof(int32_t) * (size_t)V);
    int32_t *toks = malloc(sizeof(int32_t) * (rows + 1));
    int rc = -1, produced = 0, stop = 0;
    if (!b.logits || !b.dlog || !b.p || !b.q || !b.qd || !b.z || !b.ord || !toks) {
        m3_fail(e, "speculative: out of memory (K %d, vocab %d, prompt %d)", K, V, n_prompt);
        goto out;
    }

    /* prefill with taps; the first output token from the last row */
    if (be->target(be->ctx, prompt, n_prompt, b.logits, 1, e) != 0)
        goto out;
    st->target_forwards++;
    int32_t last = pick_target(sp, &b, b.logits, V);
    out[produced++] = last;
    if (o->on_token)
        o->on_token(o->ctx, last);
    stop = is_eos(o, last) || produced >= o->max_new_tokens;
    if (!stop) {
        /* seed the drafter: position i takes token i+1 and the feature of position i */
        memcpy(toks, prompt + 1, sizeof(int32_t) * (size_t)(n_prompt - 1));
        toks[n_prompt - 1] = last;
        if (be->seed(be->ctx, toks, n_prompt, b.dlog, e) != 0)
            goto out;
    }

    while (!stop) {
        const int64_t P = be->target_len(be->ctx);
        const int remaining = o->max_new_tokens - produced;
        const int Kr = K < remaining - 1 ? K : remaining - 1;
        /* draft Kr tokens (the drafter cache grows to P + Kr - 1) */
        toks[0] = last;
        for (int k = 0; k < Kr; k++) {
            if (k > 0 && be->step(be->ctx, toks[k], b.dlog, e) != 0)
                goto out;
            toks[k + 1] = pick_draft(d, sp, &b, b.q + (size_t)k * (size_t)V, V);
        }
        /* verify [last, d_1..d_Kr] in one target forward */
        if (be->target(be->ctx, toks, Kr + 1, b.logits, Kr + 1, e) != 0)
            goto out;
        st->target_forwards++;
        st->rounds++;
        st->drafted += Kr;
        int j = 0;
        int32_t bonus = -1;
        for (;; j++) {
            const float *lr = b.logits + (size_t)j * (size_t)V;
            if (j == Kr) {
                bonus = pick_target(sp, &b, lr, V);
                break;
            }
            const int32_t dj = toks[j + 1];
            if (greedy_of(sp)) {
                int32_t a = m3_argmax(lr, V);
                if (a == dj)
                    continue;
                bonus = a;
                break;
            }
            const float *qj = b.q + (size_t)j * (size_t)V;
            m3_spec_probs(sp, lr, V, b.p, b.ord, b.z);
            /* accept with probability min(1, p/q); q(dj) > 0 since dj was drawn from q */
            double u = m3_sampler_uniform(sp);
            if (u * (double)qj[dj] < (double)b.p[dj])
                continue;
            /* rejected: draw from normalize(max(0, p - q)) in ascending id order */
            double tot = 0.0;
            for (int i = 0; i < V; i++) {
                float r = b.p[i] - qj[i];
                b.z[i] = r > 0.0f ? r : 0.0f;
                tot += (double)b.z[i];
            }
            double v = m3_sampler_uniform(sp) * tot, cum = 0.0;
            bonus = -1;
            for (int i = 0; i < V && bonus < 0; i++) {
                cum += (double)b.z[i];
                if (b.z[i] > 0.0f && v < cum)
                    bonus = i;
            }
            if (bonus < 0) /* rounding at the top end: the last id with mass */
                for (int i = V - 1; i >= 0 && bonus < 0; i--)
                    if (b.z[i] > 0.0f)
                        bonus = i;
            if (bonus < 0) /* p <= q everywhere cannot reject; defensive */
                bonus = dj;
            break;
        }
        st->accepted += j;
        st->accept_hist[j]++;
        /* output d_1..d_j, bonus (stopping at an eos) */
        for (int i = 1; i <= j + 1 && !stop; i++) {
            int32_t t = i <= j ? toks[i] : bonus;
            out[produced++] = t;
            if (o->on_token)
                o->on_token(o->ctx, t);
            stop = is_eos(o, t) || produced >= o->max_new_tokens;
        }
        /* roll back: target keeps [.., last, d_1..d_j]; drafter back to P */
        be->truncate(be->ctx, P + j + 1, P);
        last = bonus;
        if (stop) {
            /* an eos among the accepted drafts: the target keeps only what was output, minus the last */
            be->truncate(be->ctx, (int64_t)n_prompt + produced - 1, -1);
            break;
        }
        /* re-seed the drafter over P..P+j with the target's features */
        for (int i = 0; i < j; i++)
            toks[i] = toks[i + 1];
        toks[j] = bonus;
        if (be->seed(be->ctx, toks, j + 1, b.dlog, e) != 0)
            goto out;
    }
    rc = 0;
out:
    *n_out = produced;
    st->generated = produced;
    st->acceptance_rate = st->drafted ? (double)st->accepted / (double)st->drafted : 0.0;
    st->tokens_per_forward =
        st->target_forwards ? (double)produced / (double)st->target_forwards : 0.0;
    buf_free(&b);
    free(toks);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* the reference backend (ref/eagle3.h, ref/model.h)                        */

typedef struct ref_backend {
    const m3_model *m;
    m3_state *ts;
    const m3_eagle3 *d;
    m3_eagle3_state *ds;
    float *aux;  /* [rows, 3H] taps of the last target forward */
    float *feat; /* [H] recurrent feature */
    float *g;    /* [H] combined target feature */
} ref_backend;

static int ref_target(void *ctx, const int32_t *toks, int n, float *logits, int n_logits, m3_err *e)
{
    ref_backend *r = ctx;
    return m3_eagle3_target_forward(r->m, r->ts, r->d->cfg.taps, toks, n, logits, n_logits,
                                    r->aux, e);
}

/* Position i takes toks[i] with the combined features of aux row i; the last
 * step leaves its logits in dlog and its feature in r->feat. */
static int ref_seed(void *ctx, const int32_t *toks, int n, float *dlog, m3_err *e)
{
    ref_backend *r = ctx;
    const size_t H = (size_t)r->d->cfg.hidden_size;
    for (int i = 0; i < n; i++) {
        m3_eagle3_combine(r->d, r->ds, r->aux + (size_t)i * 3 * H, r->g);
        if (m3_eagle3_step(r->d, r->ds, toks[i], r->g, i == n - 1 ? dlog : NULL,
                           i == n - 1 ? r->feat : NULL, e) != 0)
            return -1;
    }
    return 0;
}

static int ref_step(void *ctx, int32_t token, float *dlog, m3_err *e)
{
    ref_backend *r = ctx;
    return m3_eagle3_step(r->d, r->ds, token, r->feat, dlog, r->feat, e);
}

static int64_t ref_target_len(void *ctx)
{
    return m3_state_len(((ref_backend *)ctx)->ts);
}

static void ref_truncate(void *ctx, int64_t tlen, int64_t dlen)
{
    ref_backend *r = ctx;
    if (tlen >= 0)
        m3_state_truncate(r->ts, tlen);
    if (dlen >= 0)
        m3_eagle3_state_truncate(r->ds, dlen);
}

int m3_spec_generate(const m3_model *m, m3_state *ts, const m3_eagle3 *d, m3_eagle3_state *ds,
                     const int32_t *prompt, int n_prompt, m3_sampler *sp,
                     const m3_spec_opts *o, int32_t *out, int *n_out, m3_spec_stats *st,
                     m3_err *e)
{
    const int H = m->cfg.text.hidden_size, V = m->cfg.text.vocab_size;
    *n_out = 0;
    if (st)
        memset(st, 0, sizeof *st);
    if (check_opts(o, prompt, n_prompt, e) != 0)
        return -1;
    if (m3_state_len(ts) != 0 || m3_eagle3_state_len(ds) != 0)
        return m3_fail(e, "speculative: the target and drafter states must be empty");
    if (sp->vocab != V)
        return m3_fail(e, "speculative: sampler vocabulary %d differs from the target's %d",
                       sp->vocab, V);
    if (d->target_vocab != V || d->cfg.hidden_size != H)
        return m3_fail(e, "speculative: drafter %s was opened for another target", d->dir);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return m3_fail(e, "token %d at index %d is out of range [0, %d)", (int)prompt[i], i, V);

    const size_t rows = (size_t)(n_prompt > o->k + 1 ? n_prompt : o->k + 1);
    ref_backend r = {m, ts, d, ds, NULL, NULL, NULL};
    r.aux = malloc(sizeof(float) * rows * 3 * (size_t)H);
    r.feat = malloc(sizeof(float) * (size_t)H);
    r.g = malloc(sizeof(float) * (size_t)H);
    int rc = -1;
    if (!r.aux || !r.feat || !r.g) {
        m3_fail(e, "speculative: out of memory (K %d, vocab %d, prompt %d)", o->k, V, n_prompt);
    } else {
        const m3_spec_backend be = {&r, ref_target, ref_seed, ref_step, ref_target_len,
                                    ref_truncate};
        rc = m3_spec_run(&be, d, V, prompt, n_prompt, sp, o, out, n_out, st, e);
    }
    free(r.aux);
    free(r.feat);
    free(r.g);
    return rc;
}
