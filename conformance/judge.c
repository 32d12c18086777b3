/* judge.c — judges every golden tensor of a case against a dump.
 *
 * Spec: M3-TOL-* (float tensors: non-finite values first, then NMSE,
 * max-abs, optional max-rel and cosine against the first matching rule of
 * the profile; QualityWarning when NMSE is above a tenth of its bound),
 * M3-DUMP-6 (missing tensors: NotSupported only for declared capabilities),
 * M3-DUMP-7 (discrete tensors read as sets), M3-MSA-SELECT-* and
 * M3-MOE-ROUTER-2 (a differing choice is accepted only within the tie
 * tolerance of the golden scores; forced blocks count as +inf), M3-TOL-7/8
 * (tensors are judged in forward order; the rows that depend on a
 * tie-accepted row of their own layer are left out of the judgement, and in
 * a free-running forward a tensor failing only in rows that a tie of an
 * earlier layer reaches is TieDiverged, neither Pass nor Fail), M3-TOL-4
 * (a first differing greedy token within the tie tolerance of the golden
 * logits), M3-VEC-11 (ties are judged on the golden's stored evidence).
 *
 * Design: the judge only judges. Everything it weighs is stored data: the
 * golden, its tie evidence (block scores, router scores and bias, greedy
 * logits; evidence.c) and the model's config; it never runs the model.
 * cf_judge collects the golden tensors with their kind from the table of
 * dump names (names.c), sorts them in forward order, and hands each, after
 * the checks every kind shares (declared capabilities, rows, shape, dtype,
 * the rows earlier ties reach), to the one judging function of its kind.
 * A golden without evidence is still judged: a differing choice is then
 * judged strictly, and its record says so (no_evidence).
 */
#include "conform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int declared(const char *list, const char *cap)
{
    if (!list || !cap)
        return 0;
    size_t n = strlen(cap);
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ')
            p++;
        const char *q = p;
        while (*q && *q != ',' && *q != ' ')
            q++;
        if ((size_t)(q - p) == n && strncmp(p, cap, n) == 0)
            return 1;
        p = q;
    }
    return 0;
}

cf_record *cf_report_add(cf_report *r)
{
    if (r->nrec == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        cf_record *n = realloc(r->rec, (size_t)cap * sizeof *n);
        if (!n)
            return NULL;
        r->rec = n;
        r->cap = cap;
    }
    cf_record *x = &r->rec[r->nrec++];
    memset(x, 0, sizeof *x);
    x->layer = -1;
    x->set.first_bad = x->set.first_masked_bad = x->set.first_tie = -1;
    x->excl_tie_row = x->reach_tie_row = x->tie_row = x->tie_head = -1;
    return x;
}

void cf_report_free(cf_report *r)
{
    free(r->rec);
    r->rec = NULL;
    r->nrec = r->cap = 0;
}

static void shape_str(char *buf, size_t cap, const cf_tensor *t)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* "layers.3." for "layers.3.attn.block_indices", "" for a component tensor. */
static void prefix_of(char *p, size_t cap, const char *name, const char *leaf)
{
    size_t n = strlen(name) - strlen(leaf);
    if (n >= cap)
        n = cap - 1;
    memcpy(p, name, n);
    p[n] = 0;
}

static const cf_tensor *lookup(const cf_judge_ctx *ctx, const cf_tset *golden, const char *name)
{
    const cf_tensor *t = cf_tset_get(golden, name);
    if (!t && ctx->evidence)
        t = cf_tset_get(ctx->evidence, name);
    return t;
}

/* ---- M3-TOL-8: rows that depend on a tie-accepted row ------------------------------- */
/* One accepted tie that starts a dependence: token row `row` of the discrete
 * record (layer, order) named src. */
typedef struct tie_event {
    int layer, order;
    long row;
    char src[160];
} tie_event;

typedef struct tie_list {
    tie_event *ev;
    int n, cap;
} tie_list;

/* Record a tie of rec at token row `row` (once per row); -1 on allocation failure. */
static int tie_add(tie_list *tl, const cf_record *rec, long row)
{
    for (int k = 0; k < tl->n; k++)
        if (tl->ev[k].order == rec->order && tl->ev[k].row == row)
            return 0;
    if (tl->n == tl->cap) {
        int cap = tl->cap ? 2 * tl->cap : 16;
        tie_event *n = realloc(tl->ev, (size_t)cap * sizeof *n);
        if (!n)
            return -1;
        tl->ev = n;
        tl->cap = cap;
    }
    tie_event *ev = &tl->ev[tl->n++];
    ev->layer = rec->layer;
    ev->order = rec->order;
    ev->row = row;
    snprintf(ev->src, sizeof ev->src, "%s", rec->tensor);
    return 0;
}

/* Row axis of a tensor (M3-DUMP-2): 1 for the [G, T, ...] block tensors, else 0. */
static int row_axis(const cf_tensor *g)
{
    return g->ndim >= 2 && cf_row_axis(g->name);
}

static long n_rows(const cf_tensor *g)
{
    return g->ndim == 0 ? 1 : (long)g->shape[row_axis(g)];
}

/* Elements per row (the product of the dimensions after the row axis). */
static size_t row_inner(const cf_tensor *g)
{
    size_t inner = 1;
    for (int d = row_axis(g) + 1; d < g->ndim; d++)
        inner *= (size_t)g->shape[d];
    return inner;
}

/* The rows of one tensor that earlier accepted ties reach (M3-TOL-8). */
typedef struct tie_rows {
    unsigned char *excl;   /* [rows] (a): depends on a tie of its own layer: left out */
    unsigned char *reach;  /* [rows] (b): a tie of an earlier layer reaches it (free-running) */
    long nexcl, nreach;
    const tie_event *excl_ev, *reach_ev; /* the first tie behind each */
} tie_rows;

/* Fill tr for the token rows s < rows of the tensor at (layer, order):
 * (a) the tie's own row of the tensors that M3-TOL-8 lists as depending on a
 *     tie of their layer (dependent), after the tie in forward order;
 * (b) free-running only: every row >= the tie's row of everything in later
 *     layers and after them (causal attention carries row t to the rows
 *     after it, never before), and the tie's row of an unlisted tensor of
 *     its own layer.
 * A row in (a) is not also in (b). */
static void tie_masks(const tie_list *tl, int layer, int order, int dependent, int isolated, long rows,
                      const int32_t *pos, tie_rows *tr)
{
    memset(tr->excl, 0, (size_t)rows);
    memset(tr->reach, 0, (size_t)rows);
    tr->nexcl = tr->nreach = 0;
    tr->excl_ev = tr->reach_ev = NULL;
    for (int k = 0; k < tl->n; k++) {
        const tie_event *ev = &tl->ev[k];
        if (ev->order >= order || ev->row < 0)
            continue;
        int own = ev->layer == layer && dependent;
        if (!own && isolated)
            continue; /* isolated: other layers and the head start from their own inputs */
        for (long s = 0; s < rows; s++) {
            long p = pos ? pos[s] : s; /* the position of local row s (M3-DUMP-10) */
            if (own) {
                if (p == ev->row && !tr->excl[s]) {
                    tr->excl[s] = 1;
                    tr->nexcl++;
                    if (!tr->excl_ev)
                        tr->excl_ev = ev;
                }
            } else if (ev->layer == layer ? p == ev->row : p >= ev->row) {
                tr->reach[s] = 1;
                if (!tr->reach_ev)
                    tr->reach_ev = ev;
            }
        }
    }
    for (long s = 0; s < rows; s++) {
        if (tr->excl[s])
            tr->reach[s] = 0;
        tr->nreach += tr->reach[s];
    }
    if (!tr->nreach)
        tr->reach_ev = NULL;
}

static void judge_float(cf_record *rec, const cf_judge_ctx *ctx, const float *o, const float *g,
                        size_t n)
{
    const cf_rule *rule = cf_tol_match(ctx->profile, rec->key);
    cf_metrics_compute(&rec->m, o, g, n);
    rec->have_metrics = 1;
    for (int k = 0; k < 4; k++)
        if (rec->m.worst[k] >= 0) {
            rec->worst_out[k] = o[rec->m.worst[k]];
            rec->worst_ref[k] = g[rec->m.worst[k]];
        }
    rec->kind = CF_CMP_METRICS;
    rec->rule = rule;
    if (rec->m.n_ref_nan && ctx->teacher_forced && ctx->bad_feed) {
        /* the teacher-forced golden is the reference run on the port's own layer input */
        rec->result = CF_FAIL;
        snprintf(rec->msg, sizeof rec->msg, "the port's own %s holds NaN or Inf, so this layer's "
                 "teacher-forced golden is NaN too", ctx->bad_feed);
        return;
    }
    if (rec->m.n_ref_nan) {
        rec->result = CF_INTERNAL_ERROR;
        snprintf(rec->msg, sizeof rec->msg, "golden tensor holds %zu NaN values (bad vector)",
                 rec->m.n_ref_nan);
        return;
    }
    if (rec->m.n_nan) {
        rec->result = CF_FAIL;
        snprintf(rec->msg, sizeof rec->msg, "%zu NaN values, first at flat index %ld", rec->m.n_nan,
                 rec->m.first_bad);
        return;
    }
    if (rec->m.n_inf_bad) {
        rec->result = CF_FAIL;
        snprintf(rec->msg, sizeof rec->msg,
                 "%zu infinities not matched in position and sign, first at flat index %ld",
                 rec->m.n_inf_bad, rec->m.first_bad);
        return;
    }
    if (!rule) {
        rec->result = CF_INTERNAL_ERROR;
        snprintf(rec->msg, sizeof rec->msg, "no tolerance rule of profile \"%s\" matches \"%s\"",
                 ctx->profile->name, rec->key);
        return;
    }
    const cf_metrics *m = &rec->m;
    if (!(m->nmse <= rule->nmse))
        snprintf(rec->msg, sizeof rec->msg, "NMSE %.3g > %.3g", m->nmse, rule->nmse);
    else if (!(m->max_abs <= rule->max_abs))
        snprintf(rec->msg, sizeof rec->msg, "max-abs %.3g > %.3g (at flat index %ld)", m->max_abs,
                 rule->max_abs, m->worst[0]);
    else if (rule->max_rel >= 0 && !(m->max_rel <= rule->max_rel))
        snprintf(rec->msg, sizeof rec->msg, "max-rel %.3g > %.3g", m->max_rel, rule->max_rel);
    else if (rule->cos_min >= 0 && !(m->cos >= rule->cos_min))
        snprintf(rec->msg, sizeof rec->msg, "cosine %.9f < %.9f", m->cos, rule->cos_min);
    else {
        /* M3-TOL-6: above a tenth of any bound is a QualityWarning */
        rec->result = CF_WARNING;
        if (m->nmse > rule->nmse / 10)
            snprintf(rec->msg, sizeof rec->msg, "NMSE %.3g is within %.3g but above the good bound %.3g",
                     m->nmse, rule->nmse, rule->nmse / 10);
        else if (m->max_abs > rule->max_abs / 10)
            snprintf(rec->msg, sizeof rec->msg, "max-abs %.3g is within %.3g but above the good bound %.3g",
                     m->max_abs, rule->max_abs, rule->max_abs / 10);
        else if (rule->cos_min >= 0 && 1 - m->cos > (1 - rule->cos_min) / 10)
            snprintf(rec->msg, sizeof rec->msg, "1 - cosine %.3g is within %.3g but above the good bound %.3g",
                     1 - m->cos, 1 - rule->cos_min, (1 - rule->cos_min) / 10);
        else
            rec->result = CF_PASS;
        return;
    }
    rec->result = CF_FAIL;
}

static const char *plural(long n)
{
    return n == 1 ? "" : "s";
}

static void append_msg(cf_record *rec, const char *sep, const char *text)
{
    size_t n = strlen(rec->msg);
    snprintf(rec->msg + n, sizeof rec->msg - n, "%s%s", n ? sep : "", text);
}

static void set_excluded(cf_record *rec, long n, const tie_event *ev)
{
    rec->excluded_rows = n;
    rec->excl_tie_row = ev ? ev->row : -1;
    snprintf(rec->excl_tie, sizeof rec->excl_tie, "%s", ev ? ev->src : "");
}

static void set_diverged(cf_record *rec, long n, const tie_event *ev)
{
    rec->result = CF_TIE_DIVERGED;
    rec->reached_rows = n;
    rec->reach_tie_row = ev ? ev->row : -1;
    snprintf(rec->reach_tie, sizeof rec->reach_tie, "%s", ev ? ev->src : "");
}

/* Judge a float tensor some of whose rows earlier ties reach (M3-TOL-8):
 * the metrics and rule apply to the rows not in tr->excl; a NaN or an Inf
 * the golden lacks in an excluded row still fails; when that judgement
 * fails only because of rows in tr->reach (the remaining rows pass on their
 * own) the result is TieDiverged. -1 only on allocation failure. */
static int judge_float_tie(cf_record *rec, const cf_judge_ctx *ctx, const cf_tensor *g, const float *o,
                           const tie_rows *tr)
{
    size_t n = g->n, inner = row_inner(g), na = 0, nb = 0, nbad = 0;
    long rows = n_rows(g), bad_at = -1;
    size_t cap = n ? n : 1;
    float *ao = malloc(cap * sizeof *ao), *ag = malloc(cap * sizeof *ag);
    float *bo = malloc(cap * sizeof *bo), *bg = malloc(cap * sizeof *bg);
    size_t *idx = malloc(cap * sizeof *idx);
    int rc = -1;
    if (!ao || !ag || !bo || !bg || !idx)
        goto done;
    for (size_t i = 0; i < n; i++) {
        long s = inner ? (long)((i / inner) % (size_t)rows) : 0;
        if (tr->excl[s]) {
            if (isnan(o[i]) || (isinf(o[i]) && !(g->f[i] == o[i])))
                if (nbad++ == 0)
                    bad_at = (long)i;
            continue;
        }
        ao[na] = o[i];
        ag[na] = g->f[i];
        idx[na++] = i;
        if (!tr->reach[s]) {
            bo[nb] = o[i];
            bg[nb++] = g->f[i];
        }
    }
    char note[400];
    judge_float(rec, ctx, ao, ag, na);
    for (int k = 0; k < 4; k++)
        if (rec->m.worst[k] >= 0)
            rec->m.worst[k] = (long)idx[rec->m.worst[k]];
    if (rec->m.first_bad >= 0 && (size_t)rec->m.first_bad < na)
        rec->m.first_bad = (long)idx[rec->m.first_bad];
    if (tr->nexcl) {
        set_excluded(rec, tr->nexcl, tr->excl_ev);
        if (nbad && rec->result != CF_INTERNAL_ERROR) {
            rec->result = CF_FAIL;
            rec->m.n_nan += nbad; /* a tie never produces a NaN or a new Inf */
            snprintf(rec->msg, sizeof rec->msg,
                     "%zu NaN or unmatched Inf values in rows left out as consequences of a tie (first at flat "
                     "index %ld); a tie never excuses those", nbad, bad_at);
        }
        snprintf(note, sizeof note, "M3-TOL-8: %ld of %ld row%s excluded, consequences of the tie-accepted row %ld of %.150s",
                 tr->nexcl, rows, plural(rows), tr->excl_ev->row, tr->excl_ev->src);
        append_msg(rec, "; ", note);
    }
    if (rec->result == CF_FAIL && tr->nreach && !nbad && !rec->m.n_nan && !rec->m.n_inf_bad) {
        cf_record sub;
        memset(&sub, 0, sizeof sub);
        memcpy(sub.key, rec->key, sizeof sub.key);
        judge_float(&sub, ctx, bo, bg, nb);
        long other = rows - tr->nexcl - tr->nreach;
        if (cf_result_conforms(sub.result)) {
            char full[512];
            snprintf(full, sizeof full, "%s", rec->msg);
            set_diverged(rec, tr->nreach, tr->reach_ev);
            snprintf(rec->msg, sizeof rec->msg,
                     "%.240s, only in the %ld row%s that the tie-accepted row %ld of %.150s reaches (M3-TOL-8); "
                     "the other %ld row%s pass (NMSE %.3g)",
                     full, tr->nreach, plural(tr->nreach), tr->reach_ev->row, tr->reach_ev->src, other, plural(other),
                     sub.m.nmse);
        } else {
            snprintf(note, sizeof note, "also on the %ld row%s that the tie-accepted row %ld of %.150s cannot reach (%.150s)",
                     other, plural(other), tr->reach_ev->row, tr->reach_ev->src, sub.msg);
            append_msg(rec, "; ", note);
        }
    }
    rc = 0;
done:
    free(ao);
    free(ag);
    free(bo);
    free(bg);
    free(idx);
    return rc;
}

/* Compare the rows of a discrete record as sets with the rows earlier ties
 * reach taken apart (M3-TOL-8): rows of tr->excl are not compared; a bad row
 * in tr->reach makes the record TieDiverged unless a row no tie reaches is
 * bad (Fail). Ties in rows no earlier tie reaches are added to tl. T: token
 * rows; set row r is token row r % T (head r / T for blocks). -1 only on
 * allocation failure. */
static int judge_sets(cf_record *rec, const cf_judge_ctx *ctx, const cf_tensor *o, const cf_tensor *g,
                      long nsets, int k, long T, const float *sc, int ns, int blocks, const tie_rows *tr,
                      tie_list *tl, const int32_t *pos)
{
    signed char *state = malloc((size_t)(nsets ? nsets : 1));
    unsigned char *sm = tr ? malloc((size_t)(nsets ? nsets : 1)) : NULL;
    if (!state || (tr && !sm)) {
        free(state);
        free(sm);
        return -1;
    }
    for (long r = 0; sm && r < nsets; r++)
        sm[r] = tr->excl[r % T] || tr->reach[r % T];
    cf_compare_sets_masked(&rec->set, o->i, g->i, nsets, k, sc, ns, ctx->profile->tie_tolerance, sm, state);
    const cf_setstat *st = &rec->set;
    long reach_bad = 0, first_reach_bad = -1, nex = 0;
    for (long r = 0; tr && r < nsets; r++) {
        nex += tr->excl[r % T];
        if (state[r] == 2 && tr->reach[r % T] && reach_bad++ == 0)
            first_reach_bad = r;
    }
    char note[400];
    if (st->rows_bad) {
        rec->result = CF_FAIL;
        long r = st->first_bad;
        if (blocks)
            snprintf(rec->msg, sizeof rec->msg, "%ld of %ld (head, row) sets differ; first: head %ld row %ld: %s",
                     st->rows_bad, st->rows, r / T, r % T, st->why);
        else
            snprintf(rec->msg, sizeof rec->msg, "%ld of %ld rows choose other experts; %s", st->rows_bad,
                     st->rows, st->why);
    } else if (reach_bad) {
        set_diverged(rec, tr->nreach, tr->reach_ev);
        snprintf(rec->msg, sizeof rec->msg,
                 "%ld of %ld %s differ beyond the tie tolerance, all in rows that the tie-accepted row %ld of %.150s "
                 "reaches (M3-TOL-8); first: %s%ld row %ld",
                 reach_bad, st->rows, blocks ? "(head, row) sets" : "rows", tr->reach_ev->row, tr->reach_ev->src,
                 blocks ? "head " : "", blocks ? first_reach_bad / T : 0L, first_reach_bad % T);
        if (!blocks) /* "head 0" is meaningless for expert rows */
            snprintf(rec->msg, sizeof rec->msg,
                     "%ld of %ld rows differ beyond the tie tolerance, all in rows that the tie-accepted row %ld of "
                     "%.150s reaches (M3-TOL-8); first: row %ld",
                     reach_bad, st->rows, tr->reach_ev->row, tr->reach_ev->src, first_reach_bad);
    } else {
        rec->result = CF_PASS;
        if (st->rows_tie)
            snprintf(rec->msg, sizeof rec->msg, "%ld row%s differ%s only within the tie tolerance", st->rows_tie,
                     plural(st->rows_tie), st->rows_tie == 1 ? "s" : "");
    }
    if (nex) {
        set_excluded(rec, tr->nexcl, tr->excl_ev);
        snprintf(note, sizeof note, "M3-TOL-8: %ld %s%s excluded, consequences of the tie-accepted row %ld of %.150s",
                 nex, blocks ? "(head, row) set" : "row", plural(nex), tr->excl_ev->row, tr->excl_ev->src);
        append_msg(rec, "; ", note);
    }
    /* this record's own ties start a dependence unless an earlier tie reaches their row */
    int rc = 0;
    for (long r = 0; r < nsets && !rc; r++) {
        if (state[r] != 1 || (sm && sm[r]))
            continue;
        long p = pos ? pos[r % T] : r % T; /* ties are kept by position (M3-DUMP-10) */
        if (rec->tie_row < 0) {
            rec->tie_row = p;
            rec->tie_head = blocks ? r / T : -1;
        }
        rc = tie_add(tl, rec, p);
    }
    free(state);
    free(sm);
    return rc;
}


/* M3-VEC-11: a differing choice was judged strictly because the golden carries
 * no evidence for it; said in the record (and its JSON), never silently. */
static void note_no_evidence(cf_record *rec, const cf_judge_ctx *ctx, const char *what)
{
    if (rec->set.rows_bad + rec->set.rows_masked_bad == 0 && rec->result != CF_FAIL)
        return;
    rec->no_evidence = 1;
    char note[400];
    snprintf(note, sizeof note, "no tie evidence: the golden carries no %.100s%s%.200s, so a near tie could not "
             "be settled (M3-VEC-11)", what, ctx->evidence_from ? " in " : "",
             ctx->evidence_from ? ctx->evidence_from : "");
    append_msg(rec, "; ", note);
}

/* ---- tie evidence (M3-VEC-11): the golden's scores of a discrete tensor ------------------- */
/* Golden block scores with forced blocks at +inf, [G*T, NB]; NULL if unknown
 * (*missing = 1 when the golden and its evidence lack them). */
static float *block_scores(const cf_judge_ctx *ctx, const cf_tset *golden, const char *prefix, int G, int T,
                           int *NB, int *missing, m3_err *e)
{
    char name[256];
    int B = 0, local = 0, init = 0;
    snprintf(name, sizeof name, "%sblock_scores", prefix);
    const cf_tensor *bs = lookup(ctx, golden, name);
    *missing = !bs;
    if (strcmp(ctx->c->component, "model") == 0) {
        if (!ctx->model)
            return NULL;
        const m3_text_config *tc = &ctx->model->cfg.text;
        B = tc->index_block_size;
        local = tc->index_local_blocks;
        init = tc->index_init_blocks;
    } else {
        double v;
        if (cf_case_num(ctx->c, "block_size", &v, e))
            return NULL;
        B = (int)v;
        if (cf_case_num_or(ctx->c, "local_blocks", 1, &v, e))
            return NULL;
        local = (int)v;
        if (cf_case_num_or(ctx->c, "init_blocks", 0, &v, e))
            return NULL;
        init = (int)v;
    }
    if (!bs || bs->is_int || bs->ndim != 3 || bs->shape[0] != G || bs->shape[1] != T)
        return NULL;
    *NB = (int)bs->shape[2];
    float *sc = malloc(bs->n * sizeof *sc);
    if (!sc)
        return NULL;
    memcpy(sc, bs->f, bs->n * sizeof *sc);
    if (B <= 0)
        B = 1;
    for (int g = 0; g < G; g++)
        for (int t = 0; t < T; t++) {
            int qb = t / B;
            float *row = sc + ((size_t)g * T + t) * (size_t)*NB;
            for (int b = 0; b < *NB; b++)
                if (b <= qb && (b < init || b > qb - local))
                    row[b] = INFINITY;
        }
    return sc;
}

/* Golden biased router scores [T, E] for a topk_index tensor (the golden's or
 * its evidence's scores plus the evidence's bias); NULL if unknown (*missing = 1). */
static float *expert_scores(const cf_judge_ctx *ctx, const cf_tset *golden, const char *prefix, int T, int *E,
                            int *missing)
{
    char name[256];
    snprintf(name, sizeof name, "%sscores", prefix);
    const cf_tensor *s = lookup(ctx, golden, name);
    snprintf(name, sizeof name, "%sbias", prefix);
    const cf_tensor *bias = ctx->evidence ? cf_tset_get(ctx->evidence, name) : NULL;
    *missing = !s || !ctx->evidence;
    if (*missing || s->is_int || s->ndim != 2 || s->shape[0] != T)
        return NULL;
    *E = (int)s->shape[1];
    float *sc = malloc(s->n * sizeof *sc);
    if (!sc)
        return NULL;
    memcpy(sc, s->f, s->n * sizeof *sc);
    for (int t = 0; t < T; t++)
        for (int x = 0; x < *E; x++) {
            float b = 0;
            if (bias && !bias->is_int && (size_t)x < bias->n)
                b = bias->f[x];
            sc[(size_t)t * *E + x] += b;
        }
    return sc;
}

/* Rows pos[0..n) of a [outer * T, inner] score table, in place of sc
 * ([outer * n, inner] after); sc unchanged when pos is NULL. */
static float *take_score_rows(float *sc, int outer, long T, int inner, const int32_t *pos, long n)
{
    if (!sc || !pos)
        return sc;
    float *o = malloc((size_t)outer * (size_t)(n ? n : 1) * (size_t)inner * sizeof *o);
    if (o)
        for (int a = 0; a < outer; a++)
            for (long j = 0; j < n; j++)
                memcpy(o + ((size_t)a * (size_t)n + (size_t)j) * (size_t)inner,
                       sc + ((size_t)a * (size_t)T + (size_t)pos[j]) * (size_t)inner, (size_t)inner * sizeof *o);
    free(sc);
    return o;
}

/* topk_weight of the port re-ordered by ascending expert id of its own
 * topk_index (M3-DUMP-7); rows whose expert set differs from golden take
 * the golden weights (the index record judges those rows). */
static float *aligned_weights(const cf_tset *out, const cf_tset *golden, const cf_tensor *o,
                              const cf_tensor *g, const int32_t *pos, long npos)
{
    char prefix[200], name[240];
    prefix_of(prefix, sizeof prefix, g->name, "topk_weight");
    snprintf(name, sizeof name, "%stopk_index", prefix);
    const cf_tensor *oi = cf_tset_get(out, name), *gi = cf_tset_get(golden, name);
    cf_tset sub = {0};
    m3_err e = {{0}};
    if (gi && pos) { /* the golden index rows of the positions judged (M3-DUMP-10) */
        gi = cf_tensor_take_rows(&sub, gi, NULL, pos, npos, &e) ? NULL : &sub.t[0];
    }
    float *w = malloc((o->n ? o->n : 1) * sizeof *w);
    if (!w) {
        cf_tset_free(&sub);
        return NULL;
    }
    memcpy(w, o->f, o->n * sizeof *w);
    int32_t *id = NULL;
    if (!oi || !gi || !oi->is_int || !gi->is_int || oi->n != o->n || gi->n != o->n || o->ndim != 2)
        goto done;
    int T = (int)o->shape[0], k = (int)o->shape[1];
    id = malloc((size_t)(k ? k : 1) * sizeof *id);
    if (!id)
        goto done;
    for (int t = 0; t < T; t++) {
        float *wr = w + (size_t)t * k;
        memcpy(id, oi->i + (size_t)t * k, (size_t)k * sizeof *id);
        for (int a = 1; a < k; a++) /* insertion sort by id, carrying weights */
            for (int b = a; b > 0 && id[b - 1] > id[b]; b--) {
                int32_t ti = id[b]; id[b] = id[b - 1]; id[b - 1] = ti;
                float tw = wr[b]; wr[b] = wr[b - 1]; wr[b - 1] = tw;
            }
        if (memcmp(id, gi->i + (size_t)t * k, (size_t)k * sizeof *id) != 0)
            memcpy(wr, g->f + (size_t)t * k, (size_t)k * sizeof *wr);
    }
done:
    free(id);
    cf_tset_free(&sub);
    return w;
}

/* ---- one judgement run ------------------------------------------------------------------- */
/* A golden tensor to judge, with its place in forward order. */
typedef struct judge_item {
    const cf_tensor *g;
    cf_kind kind;
    int layer, order, moe;
    char component[48];
} judge_item;

/* What every judging function sees: the inputs and the run's tie state. */
typedef struct judge_run {
    const cf_judge_ctx *ctx;
    const cf_tset *out, *golden;
    int is_model, isolated, vision_case;
    tie_list tl;           /* accepted ties so far, in forward order (M3-TOL-8) */
    tie_rows tr;           /* the rows of the current tensor they reach */
    long mask_cap;
    long Tf;               /* positions of the forward; 0 unknown */
    unsigned char *covered; /* [Tf]: positions some judged tensor covers (M3-DUMP-10) */
} judge_run;

/* The tensor being judged: the golden's rows at the dump's positions. */
typedef struct judge_cur {
    const judge_item *it;
    const cf_tensor *o;    /* the dump's tensor */
    const cf_tensor *gf;   /* the full golden tensor */
    const cf_tensor *g;    /* the golden rows judged (gf, or its rows pos[0..npos)) */
    const int32_t *pos;
    long npos;
    const tie_rows *trp;   /* NULL when no earlier tie reaches it */
} judge_cur;

/* One judging function per kind; -1 only on allocation failure. */
typedef int (*judge_fn)(judge_run *jr, cf_record *rec, const judge_cur *cur);

static int judge_kind_float(judge_run *jr, cf_record *rec, const judge_cur *cur)
{
    if (cur->trp)
        return judge_float_tie(rec, jr->ctx, cur->g, cur->o->f, cur->trp);
    judge_float(rec, jr->ctx, cur->o->f, cur->g->f, cur->g->n);
    return 0;
}

/* topk_weight (M3-DUMP-7): the port's weights in ascending expert order. */
static int judge_kind_weights(judge_run *jr, cf_record *rec, const judge_cur *cur)
{
    float *w = aligned_weights(jr->out, jr->golden, cur->o, cur->g, cur->pos, cur->npos);
    if (!w)
        return -1;
    int rc = 0;
    if (cur->trp)
        rc = judge_float_tie(rec, jr->ctx, cur->g, w, cur->trp);
    else
        judge_float(rec, jr->ctx, w, cur->g->f, cur->g->n);
    free(w);
    return rc;
}

/* block_indices (M3-MSA-SELECT-*): (head, row) sets, ties on the block scores. */
static int judge_kind_blocks(judge_run *jr, cf_record *rec, const judge_cur *cur)
{
    const cf_tensor *g = cur->g, *gf = cur->gf;
    rec->kind = CF_CMP_SET;
    if (g->ndim != 3 || gf->ndim != 3) {
        rec->result = CF_INTERNAL_ERROR;
        snprintf(rec->msg, sizeof rec->msg, "golden block_indices must be [G, T, K]");
        return 0;
    }
    int G = (int)g->shape[0], T = (int)g->shape[1], K = (int)g->shape[2], NB = 0, missing = 0;
    char prefix[200], what[240];
    prefix_of(prefix, sizeof prefix, g->name, "block_indices");
    m3_err e = {{0}};
    float *sc = block_scores(jr->ctx, jr->golden, prefix, G, (int)gf->shape[1], &NB, &missing, &e);
    sc = take_score_rows(sc, G, (long)gf->shape[1], NB, cur->pos, T);
    int rc = judge_sets(rec, jr->ctx, cur->o, g, (long)G * T, K, T, sc, NB, 1, cur->trp, &jr->tl, cur->pos);
    free(sc);
    if (!rc && missing) {
        snprintf(what, sizeof what, "%sblock_scores", prefix);
        note_no_evidence(rec, jr->ctx, what);
    }
    return rc;
}

/* topk_index (M3-MOE-ROUTER-2): expert sets per row, ties on the biased router scores. */
static int judge_kind_experts(judge_run *jr, cf_record *rec, const judge_cur *cur)
{
    const cf_tensor *g = cur->g, *gf = cur->gf;
    rec->kind = CF_CMP_SET;
    if (g->ndim != 2 || gf->ndim != 2) {
        rec->result = CF_INTERNAL_ERROR;
        snprintf(rec->msg, sizeof rec->msg, "golden topk_index must be [T, k]");
        return 0;
    }
    int T = (int)g->shape[0], k = (int)g->shape[1], E = 0, missing = 0;
    char prefix[200], what[440];
    prefix_of(prefix, sizeof prefix, g->name, "topk_index");
    float *sc = expert_scores(jr->ctx, jr->golden, prefix, (int)gf->shape[0], &E, &missing);
    sc = take_score_rows(sc, 1, (long)gf->shape[0], E, cur->pos, T);
    int rc = judge_sets(rec, jr->ctx, cur->o, g, T, k, T, sc, E, 0, cur->trp, &jr->tl, cur->pos);
    free(sc);
    if (!rc && missing) {
        char sn[240];
        snprintf(sn, sizeof sn, "%sscores", prefix);
        if (lookup(jr->ctx, jr->golden, sn))
            snprintf(what, sizeof what, "%sbias", prefix);
        else
            snprintf(what, sizeof what, "%sscores and %sbias", prefix, prefix);
        note_no_evidence(rec, jr->ctx, what);
    }
    return rc;
}

/* Integers element by element; 1 when they differ (rec then a Fail at the first). */
static int exact_differs(cf_record *rec, const cf_tensor *g, const cf_tensor *o)
{
    rec->result = CF_PASS;
    for (size_t j = 0; j < g->n; j++)
        if (o->i[j] != g->i[j]) {
            rec->result = CF_FAIL;
            rec->set.first_bad = (long)j;
            snprintf(rec->msg, sizeof rec->msg, "element %zu is %d, expected %d", j, (int)o->i[j], (int)g->i[j]);
            return 1;
        }
    return 0;
}

static int judge_kind_exact(judge_run *jr, cf_record *rec, const judge_cur *cur)
{
    (void)jr;
    exact_differs(rec, cur->g, cur->o);
    return 0;
}

/* M3-TOL-4: greedy_tokens first differ at rec->set.first_bad. The golden's
 * evidence holds the logits of that step on the golden path; a dump token
 * whose golden logit is within tie_tolerance x max|logit| of the golden
 * choice's is accepted, and the continuation (which follows the other token)
 * is not compared. Anything else keeps the Fail, with the margin in the message. */
static void greedy_tie(cf_record *rec, const cf_judge_ctx *ctx, const cf_tensor *g, const cf_tensor *o)
{
    const long k = rec->set.first_bad;
    if (k < 0 || (size_t)k >= g->n)
        return;
    const cf_tensor *lg = ctx->evidence ? cf_tset_get(ctx->evidence, "greedy_logits") : NULL;
    char note[400];
    if (!lg || lg->is_int || lg->ndim != 2 || lg->shape[0] != (int64_t)g->n) {
        rec->no_evidence = 1;
        snprintf(note, sizeof note, "(not judged as a tie, M3-TOL-4: no tie evidence: the golden carries no "
                 "greedy_logits%s%.200s, so a near tie could not be settled, M3-VEC-11)",
                 ctx->evidence_from ? " in " : "", ctx->evidence_from ? ctx->evidence_from : "");
        append_msg(rec, " ", note);
        return;
    }
    const long V = (long)lg->shape[1];
    if (o->i[k] < 0 || o->i[k] >= V || g->i[k] < 0 || g->i[k] >= V) {
        snprintf(note, sizeof note, "(not judged as a tie, M3-TOL-4: step %ld: token %d or golden token %d is "
                 "outside the vocabulary [0, %ld))", k, (int)o->i[k], (int)g->i[k], V);
        append_msg(rec, " ", note);
        return;
    }
    const float *row = lg->f + (size_t)k * (size_t)V;
    double maxabs = 0.0;
    for (long v = 0; v < V; v++)
        maxabs = fabs((double)row[v]) > maxabs ? fabs((double)row[v]) : maxabs;
    const double margin = (double)row[g->i[k]] - (double)row[o->i[k]];
    const double tol = ctx->profile->tie_tolerance * maxabs;
    if (margin <= tol) {
        rec->result = CF_PASS;
        snprintf(rec->msg, sizeof rec->msg,
                 "token %ld is %d, golden %d: a tie (golden logit margin %.4g <= %.4g = tie tolerance x "
                 "max|logit|, M3-TOL-4); the %ld later tokens are not compared",
                 k, (int)o->i[k], (int)g->i[k], margin, tol, (long)g->n - k - 1);
    } else {
        snprintf(note, sizeof note, "(golden logit margin %.4g > %.4g: not a tie, M3-TOL-4)", margin, tol);
        append_msg(rec, " ", note);
    }
}

/* greedy_tokens (M3-TOL-4, M3-TOL-8): exact, a first differing step judged on
 * the golden logits; free-running, a continuation after an accepted tie of
 * the prefill is TieDiverged. */
static int judge_kind_greedy(judge_run *jr, cf_record *rec, const judge_cur *cur)
{
    const cf_tensor *g = cur->g;
    if (!exact_differs(rec, g, cur->o))
        return 0;
    if (jr->ctx->model)
        greedy_tie(rec, jr->ctx, g, cur->o);
    /* free-running: the continuation follows the last row's logits, which every accepted tie reaches */
    if (rec->result == CF_FAIL && !jr->isolated && jr->tl.n) {
        const tie_event *t0 = &jr->tl.ev[0];
        for (int q = 1; q < jr->tl.n; q++)
            if (jr->tl.ev[q].order < t0->order || (jr->tl.ev[q].order == t0->order && jr->tl.ev[q].row < t0->row))
                t0 = &jr->tl.ev[q];
        set_diverged(rec, (long)g->n, t0);
        char note[300];
        snprintf(note, sizeof note, "after the tie-accepted row %ld of %.150s (M3-TOL-8)", t0->row, t0->src);
        append_msg(rec, ", ", note);
    }
    return 0;
}

static const judge_fn k_judge[CF_KIND_SKIP] = {
    [CF_KIND_FLOAT] = judge_kind_float,   [CF_KIND_BLOCKS] = judge_kind_blocks,
    [CF_KIND_EXPERTS] = judge_kind_experts, [CF_KIND_WEIGHTS] = judge_kind_weights,
    [CF_KIND_GREEDY] = judge_kind_greedy, [CF_KIND_EXACT] = judge_kind_exact,
};

static int cmp_item(const void *a, const void *b)
{
    const judge_item *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return strcmp(x->g->name, y->g->name);
}

/* The golden tensors this run judges, classified, in forward order (so every
 * tie is known before the tensors that depend on it); *n receives the count. */
static judge_item *collect_items(const judge_run *jr, int *n)
{
    const cf_judge_ctx *ctx = jr->ctx;
    const cf_tset *golden = jr->golden;
    judge_item *items = malloc((size_t)(golden->n + 1) * sizeof *items);
    int ni = 0;
    if (!items)
        return NULL;
    for (int k = 0; k < golden->n; k++) {
        const cf_tensor *g = &golden->t[k];
        cf_kind kind = cf_name_kind(g->name, !jr->is_model, g->is_int);
        /* aux.* and golden-side row sets (a subset golden, e.g. teacher-forced logits) */
        if (kind == CF_KIND_SKIP)
            continue;
        /* teacher forcing re-runs single layers: tokens and taps are not per-layer, and the
         * vision tower runs before the embeddings (judged by the whole-forward run only) */
        if (ctx->teacher_forced && (strcmp(g->name, "greedy_tokens") == 0 || strcmp(g->name, "eagle3.aux") == 0 ||
                                    strncmp(g->name, "vision.", 7) == 0))
            continue;
        judge_item *it = &items[ni++];
        it->g = g;
        it->kind = kind;
        int layer = -1, moe = 0;
        if (strncmp(g->name, "layers.", 7) == 0)
            layer = atoi(g->name + 7);
        if (jr->is_model && ctx->model && layer >= 0 && layer < ctx->model->cfg.text.num_layers)
            moe = ctx->model->cfg.text.layer_moe[layer];
        else if (jr->is_model && layer >= 0) {
            char nm[64];
            snprintf(nm, sizeof nm, "layers.%d.moe.topk_index", layer);
            moe = cf_tset_get(golden, nm) != NULL;
        }
        it->moe = moe;
        cf_classify(g->name, ctx->c->component, moe, it->component, sizeof it->component, &it->layer, &it->order);
    }
    if (ni > 1)
        qsort(items, (size_t)ni, sizeof *items, cmp_item);
    *n = ni;
    return items;
}

/* A row-subset dump (M3-DUMP-10): the golden's rows at the dump's positions
 * into gsub, the positions covered, and the rows the case wants (M3-DUMP-11).
 * 1 when rec got its verdict here. */
static int take_rows(judge_run *jr, cf_record *rec, judge_cur *cur, cf_tset *gsub)
{
    const cf_judge_ctx *ctx = jr->ctx;
    const cf_tensor *g = cur->g, *o = cur->o;
    const cf_tensor *rs = cf_rows_of(jr->out, g->name);
    char hn[300];
    snprintf(hn, sizeof hn, "%s.rows", g->name);
    const cf_tensor *have = cf_tset_get(jr->golden, hn);
    if (rs && (cf_tensor_subset(o, rs, jr->Tf) || have)) {
        m3_err te = {{0}};
        cur->pos = rs->i;
        cur->npos = (long)rs->n;
        if (cf_tensor_take_rows(gsub, g, have, cur->pos, cur->npos, &te)) {
            rec->result = CF_INTERNAL_ERROR;
            snprintf(rec->msg, sizeof rec->msg, "%.500s", te.msg);
            return 1;
        }
        cur->g = g = &gsub->t[0];
    }
    const int32_t *pos = cur->pos;
    long npos = cur->npos;
    if (jr->covered) {
        for (long j = 0; j < (pos ? npos : jr->Tf); j++)
            if (!pos || (pos[j] >= 0 && pos[j] < jr->Tf))
                jr->covered[pos ? pos[j] : j] = 1;
    }
    /* the rows the case wants (M3-DUMP-11) */
    int is_logits = strcmp(g->name, "logits") == 0 && ctx->want_logits;
    const unsigned char *want = is_logits ? ctx->want_logits : ctx->want;
    const char *wsel = is_logits ? ctx->want_logits_sel : ctx->want_sel;
    if (!want || (!pos && n_rows(o) == ctx->want_T))
        return 0;
    long miss = -1, nmiss = 0, j = 0;
    for (long p = 0; p < ctx->want_T; p++) {
        if (!want[p])
            continue;
        while (pos && j < npos && pos[j] < p)
            j++;
        int have_p = pos ? j < npos && pos[j] == p : p < n_rows(o);
        if (!have_p && nmiss++ == 0)
            miss = p;
    }
    if (!nmiss)
        return 0;
    rec->result = CF_FAIL;
    snprintf(rec->msg, sizeof rec->msg,
             "the case wants %ld position%s this dump's rows lack (first: %ld; params.%s \"%.200s\", "
             "M3-DUMP-11)", nmiss, plural(nmiss), miss, is_logits ? "logits_rows" : "rows", wsel ? wsel : "");
    return 1;
}

/* A golden tensor the dump lacks (M3-DUMP-6): NotSupported for a declared capability, else a Fail. */
static void judge_missing(judge_run *jr, cf_record *rec, const cf_tensor *g)
{
    const char *unsupported = jr->ctx->unsupported;
    const char *cap = cf_capability_of(g->name);
    if (cap && declared(unsupported, cap)) {
        rec->result = CF_NOT_SUPPORTED;
        snprintf(rec->not_judged, sizeof rec->not_judged, "%s", cap);
        snprintf(rec->msg, sizeof rec->msg, "capability \"%s\" declared unsupported", cap);
    } else if (cf_is_internal(g->name) && declared(unsupported, "internals")) {
        rec->result = CF_NOT_SUPPORTED;
        snprintf(rec->not_judged, sizeof rec->not_judged, "internals");
        snprintf(rec->msg, sizeof rec->msg, "capability \"internals\" declared unsupported");
    } else if (strcmp(g->name, "embeddings") == 0 && cf_tset_get(jr->out, "layers.0.input")) {
        rec->result = CF_NOT_SUPPORTED;
        snprintf(rec->not_judged, sizeof rec->not_judged, "embeddings");
        snprintf(rec->msg, sizeof rec->msg, "absent; equal to layers.0.input by definition (M3-DUMP-3), judged there");
    } else {
        rec->result = CF_FAIL;
        snprintf(rec->msg, sizeof rec->msg, "missing from the dump%s%s%s", cap ? " (a port may declare capability \"" : "",
                 cap ? cap : "", cap ? "\" absent)" : "");
    }
}

/* 1 (rec a Fail) when the dump's tensor has another shape than the golden rows judged. */
static int judge_shape(judge_run *jr, cf_record *rec, const judge_cur *cur)
{
    const cf_tensor *o = cur->o, *g = cur->g;
    int same = o->ndim == g->ndim;
    for (int d = 0; same && d < g->ndim; d++)
        same = o->shape[d] == g->shape[d];
    if (same)
        return 0;
    char so[96], sg[96];
    shape_str(so, sizeof so, o);
    shape_str(sg, sizeof sg, g);
    rec->result = CF_FAIL;
    const cf_tensor *rs = cf_has_rows(g->name) ? cf_rows_of(jr->out, g->name) : NULL;
    if (rs && !cur->pos)
        snprintf(rec->msg, sizeof rec->msg, "shape %s, expected %s (all positions) or %zu rows (its row set %s)", so,
                 sg, rs->n, rs->name);
    else
        snprintf(rec->msg, sizeof rec->msg, "shape %s, expected %s", so, sg);
    return 1;
}

/* 1 (rec given its verdict) when the dtype of dump or golden does not fit the kind. */
static int judge_dtype(cf_record *rec, const judge_cur *cur)
{
    const cf_tensor *o = cur->o, *g = cur->g;
    if (cf_kind_cmp(cur->it->kind) != CF_CMP_METRICS) {
        if (o->is_int && g->is_int)
            return 0;
        rec->result = o->is_int ? CF_INTERNAL_ERROR : CF_FAIL;
        snprintf(rec->msg, sizeof rec->msg, "%s must be an integer tensor (I32)", o->is_int ? "golden" : "dump");
        return 1;
    }
    if (!o->is_int && !g->is_int)
        return 0;
    rec->result = g->is_int ? CF_INTERNAL_ERROR : CF_FAIL;
    snprintf(rec->msg, sizeof rec->msg, "%s must be a float tensor", g->is_int ? "golden" : "dump");
    return 1;
}

/* The rows of the current tensor that earlier accepted ties reach (M3-TOL-8) into jr->tr. */
static int tie_rows_of(judge_run *jr, judge_cur *cur)
{
    long rows = n_rows(cur->g);
    if (rows > jr->mask_cap) {
        unsigned char *a = realloc(jr->tr.excl, (size_t)rows), *b = a ? realloc(jr->tr.reach, (size_t)rows) : NULL;
        if (a)
            jr->tr.excl = a;
        if (b)
            jr->tr.reach = b;
        if (!a || !b)
            return -1;
        jr->mask_cap = rows;
    }
    const judge_item *it = cur->it;
    if (rows > 0)
        tie_masks(&jr->tl, it->layer, it->order, cf_tie_dependent(it->g->name, !jr->is_model, it->layer, it->order),
                  jr->isolated, rows, cur->pos, &jr->tr);
    else
        jr->tr.nexcl = jr->tr.nreach = 0;
    cur->trp = jr->tr.nexcl || jr->tr.nreach ? &jr->tr : NULL;
    return 0;
}

/* Judge one golden tensor into a new record of r; -1 only on allocation failure. */
static int judge_one(judge_run *jr, cf_report *r, const judge_item *it, cf_tset *gsub)
{
    const cf_judge_ctx *ctx = jr->ctx;
    const cf_tensor *g = it->g;
    cf_record *rec = cf_report_add(r);
    if (!rec)
        return -1;
    snprintf(rec->tensor, sizeof rec->tensor, "%s", g->name);
    snprintf(rec->key, sizeof rec->key, "%s/%s", ctx->c->component, g->name);
    snprintf(rec->component, sizeof rec->component, "%s", it->component);
    rec->layer = it->layer;
    rec->order = it->order;
    judge_cur cur = {it, cf_tset_get(jr->out, g->name), g, g, NULL, 0, NULL};
    if (jr->vision_case) {
        rec->result = CF_NOT_SUPPORTED;
        snprintf(rec->msg, sizeof rec->msg, "vision case: capability \"vision\" declared unsupported");
        return 0;
    }
    const cf_tensor *ms = !cur.o && ctx->misshaped ? cf_tset_get(ctx->misshaped, g->name) : NULL;
    if (ms) {
        char so[96], sg[96];
        shape_str(so, sizeof so, ms);
        shape_str(sg, sizeof sg, g);
        rec->result = CF_FAIL;
        snprintf(rec->msg, sizeof rec->msg, "shape %s, expected %s (refused from the header)", so, sg);
        return 0;
    }
    cf_tset_free(gsub);
    if (cur.o && jr->is_model && cf_has_rows(g->name) && take_rows(jr, rec, &cur, gsub))
        return 0;
    rec->kind = cf_kind_cmp(it->kind) == CF_CMP_METRICS ? CF_CMP_METRICS : CF_CMP_EXACT;
    if (!cur.o) {
        judge_missing(jr, rec, g);
        return 0;
    }
    if (judge_shape(jr, rec, &cur))
        return 0;
    if (tie_rows_of(jr, &cur))
        return -1;
    if (judge_dtype(rec, &cur))
        return 0;
    return k_judge[it->kind](jr, rec, &cur);
}

int cf_judge(cf_report *r, const cf_judge_ctx *ctx, const cf_tset *out, const cf_tset *golden, m3_err *e)
{
    judge_run jr;
    memset(&jr, 0, sizeof jr);
    jr.ctx = ctx;
    jr.out = out;
    jr.golden = golden;
    jr.is_model = strcmp(ctx->c->component, "model") == 0;
    /* teacher-forced layers and component cases start from golden inputs:
     * a tie reaches only its own layer / case (M3-TOL-8) */
    jr.isolated = ctx->teacher_forced || !jr.is_model;
    r->teacher_forced = ctx->teacher_forced;
    snprintf(r->evidence, sizeof r->evidence, "%s", ctx->evidence_from ? ctx->evidence_from : "");
    /* the positions of the forward, and those some judged tensor covers (M3-DUMP-10) */
    jr.Tf = ctx->want_T;
    const cf_tensor *t0 = cf_tset_get(golden, "layers.0.input");
    if (!t0)
        t0 = cf_tset_get(golden, "embeddings");
    if (jr.Tf <= 0 && jr.is_model && t0 && t0->ndim == 2)
        jr.Tf = (long)t0->shape[0];
    jr.covered = jr.Tf > 0 ? calloc((size_t)jr.Tf, 1) : NULL;
    /* a case with a vision tower cannot be run by a port without vision: NotSupported whole */
    if (declared(ctx->unsupported, "vision"))
        for (int k = 0; k < golden->n; k++)
            jr.vision_case |= strncmp(golden->t[k].name, "vision.", 7) == 0;
    int ni = 0, rc = 0;
    judge_item *items = collect_items(&jr, &ni);
    if (!items || (jr.Tf > 0 && !jr.covered))
        rc = m3_fail(e, "out of memory for the report of %s", ctx->c->id);
    cf_tset gsub = {0};
    for (int k = 0; !rc && k < ni; k++)
        if (judge_one(&jr, r, &items[k], &gsub))
            rc = m3_fail(e, "out of memory for the report of %s", ctx->c->id);
    free(items);
    free(jr.tl.ev);
    free(jr.tr.excl);
    free(jr.tr.reach);
    cf_tset_free(&gsub);
    if (jr.covered && !rc) {
        r->rows_total = jr.Tf;
        r->rows_judged = 0;
        for (long p = 0; p < jr.Tf; p++)
            r->rows_judged += jr.covered[p];
        if (ctx->want_sel && !r->rows_note[0])
            snprintf(r->rows_note, sizeof r->rows_note, "the case wants params.rows \"%.100s\"", ctx->want_sel);
    }
    free(jr.covered);
    if (rc)
        return rc;
    cf_localise(r);
    return 0;
}
