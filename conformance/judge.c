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
 * earlier layer reaches is TieDiverged, neither Pass nor Fail).
 */
#include "conform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

const char *cf_capability_of(const char *t)
{
    if (ends_with(t, "attn.block_indices"))
        return "block_indices";
    if (strstr(t, "moe.topk_index") || strstr(t, "moe.topk_weight") || strstr(t, "moe.scores"))
        return "router";
    if (strcmp(t, "eagle3.aux") == 0)
        return "eagle3";
    if (strcmp(t, "greedy_tokens") == 0)
        return "greedy";
    if (strncmp(t, "vision.", 7) == 0)
        return "vision";
    return NULL;
}

int cf_is_internal(const char *t)
{
    if (strncmp(t, "layers.", 7) != 0)
        return 0;
    const char *p = t + 7;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p != '.')
        return 0;
    p++;
    return strcmp(p, "input") != 0 && strcmp(p, "output") != 0 && strcmp(p, "rows") != 0;
}

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

/* The sub-name ranks of one layer, in forward order, with their component. */
static const struct {
    const char *sub, *component;
} k_layer_order[] = {
    {"input", "residual"},           {"attn_norm", "norm"},
    {"attn.block_scores", "msa-select"}, {"attn.block_indices", "msa-select"},
    {"attn.output", "attention"},    {"post_attn", "residual"},
    {"ffn_norm", "norm"},            {"moe.scores", "moe-router"},
    {"moe.topk_index", "moe-router"}, {"moe.topk_weight", "moe-router"},
    {"mlp.output", "mlp"},           {"output", "residual"},
};
#define N_LAYER_ORDER ((int)(sizeof k_layer_order / sizeof k_layer_order[0]))

/* Contract output order of the component cases (what is computed first). */
static const char *const k_comp_order[] = {"block_scores", "block_indices", "scores", "topk_index",
                                           "topk_weight", "cos", "sin", "out", "y", NULL};

/* Vision dump names (M3-DUMP, spec/dump.md): computed before the embeddings,
 * so their ranks are negative. 1 and sets order/component when t is one. */
static int classify_vision(const char *t, char *component, size_t cap, int *order)
{
    static const struct {
        const char *name, *component;
        int order;
    } vis[] = {{"vision.pixel_values", "vision-input", -900000},
               {"vision.grid_thw", "vision-input", -899999},
               {"vision.patch_embed", "vision-patch", -800000},
               {"vision.tower_output", "vision-tower", -300000},
               {"vision.projected", "vision-projector", -200000},
               {"vision.image_features", "vision-merge", -100000}};
    for (size_t k = 0; k < sizeof vis / sizeof vis[0]; k++)
        if (strcmp(t, vis[k].name) == 0) {
            snprintf(component, cap, "%s", vis[k].component);
            *order = vis[k].order;
            return 1;
        }
    if (strncmp(t, "vision.layers.", 14) == 0) {
        char *end;
        long j = strtol(t + 14, &end, 10);
        if (end != t + 14 && strcmp(end, ".output") == 0 && j >= 0 && j < 100000) {
            snprintf(component, cap, "vision-layer");
            *order = -700000 + (int)j;
            return 1;
        }
    }
    return 0;
}

void cf_classify(const char *t, const char *case_component, int is_moe_layer, char *component,
                 size_t cap, int *layer, int *order)
{
    *layer = -1;
    if (classify_vision(t, component, cap, order))
        return;
    if (strcmp(case_component, "model") != 0) {
        snprintf(component, cap, "%s", case_component);
        *order = 90;
        for (int i = 0; k_comp_order[i]; i++)
            if (strcmp(t, k_comp_order[i]) == 0)
                *order = i;
        return;
    }
    if (strcmp(t, "embeddings") == 0) {
        snprintf(component, cap, "embedding");
        *order = 0;
        return;
    }
    if (strncmp(t, "layers.", 7) == 0) {
        char *end;
        long i = strtol(t + 7, &end, 10);
        if (end != t + 7 && *end == '.' && i >= 0 && i < M3_MAX_LAYERS) {
            *layer = (int)i;
            const char *sub = end + 1;
            *order = 10 + (int)i * 100 + 50;
            snprintf(component, cap, "layer");
            for (int k = 0; k < N_LAYER_ORDER; k++)
                if (strcmp(sub, k_layer_order[k].sub) == 0) {
                    *order = 10 + (int)i * 100 + k;
                    snprintf(component, cap, "%s", k_layer_order[k].component);
                    if (strcmp(sub, "mlp.output") == 0 && is_moe_layer)
                        snprintf(component, cap, "moe");
                }
            return;
        }
    }
    static const struct {
        const char *name, *component;
        int order;
    } globals[] = {{"final_norm", "final-norm", 1000000},
                   {"logits", "lm-head", 1000001},
                   {"greedy_tokens", "decode", 1000002},
                   {"eagle3.aux", "eagle3", 1000003}};
    for (size_t k = 0; k < sizeof globals / sizeof globals[0]; k++)
        if (strcmp(t, globals[k].name) == 0) {
            snprintf(component, cap, "%s", globals[k].component);
            *order = globals[k].order;
            return;
        }
    snprintf(component, cap, "other");
    *order = 2000000;
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
    if (!t && ctx->aux)
        t = cf_tset_get(ctx->aux, name);
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
    return g->ndim >= 2 && (ends_with(g->name, "block_indices") || ends_with(g->name, "block_scores"));
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
    rec->kind = 0;
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

/* Golden block scores with forced blocks at +inf, [G*T, NB]; NULL if unknown. */
static float *block_scores(const cf_judge_ctx *ctx, const cf_tset *golden, const char *prefix,
                           int layer, int G, int T, int *NB, m3_err *e)
{
    char name[256];
    int B = 0, local = 0, init = 0;
    float *sc = NULL;
    snprintf(name, sizeof name, "%sblock_scores", prefix);
    const cf_tensor *bs = lookup(ctx, golden, name);
    if (strcmp(ctx->c->component, "model") == 0) {
        if (!ctx->model)
            return NULL;
        const m3_text_config *tc = &ctx->model->cfg.text;
        B = tc->index_block_size;
        local = tc->index_local_blocks;
        init = tc->index_init_blocks;
        if (!bs) {
            snprintf(name, sizeof name, "layers.%d.attn_norm", layer);
            const cf_tensor *xn = cf_tset_get(golden, name);
            if (!xn || xn->is_int || xn->ndim != 2 || xn->shape[0] != T ||
                xn->shape[1] != tc->hidden_size)
                return NULL;
            if (cf_ref_block_scores(ctx->model, ctx->c->mode, layer, xn->f, T, &sc, NB, e))
                return NULL;
        }
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
    if (!sc) {
        if (!bs || bs->is_int || bs->ndim != 3 || bs->shape[0] != G || bs->shape[1] != T)
            return NULL;
        *NB = (int)bs->shape[2];
        sc = malloc(bs->n * sizeof *sc);
        if (!sc)
            return NULL;
        memcpy(sc, bs->f, bs->n * sizeof *sc);
    }
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

/* gf: the full golden tensor (scores are computed at every position); g: the
 * rows judged (= gf, or gf's rows pos[0..n) of a row-subset dump). */
static int judge_blocks(cf_record *rec, const cf_judge_ctx *ctx, const cf_tset *golden, const cf_tensor *o,
                        const cf_tensor *gf, const cf_tensor *g, const int32_t *pos, const tie_rows *tr,
                        tie_list *tl)
{
    rec->kind = 1;
    if (g->ndim != 3 || gf->ndim != 3) {
        rec->result = CF_INTERNAL_ERROR;
        snprintf(rec->msg, sizeof rec->msg, "golden block_indices must be [G, T, K]");
        return 0;
    }
    int G = (int)g->shape[0], T = (int)g->shape[1], K = (int)g->shape[2], NB = 0;
    char prefix[200];
    prefix_of(prefix, sizeof prefix, g->name, "block_indices");
    m3_err e = {{0}};
    float *sc = block_scores(ctx, golden, prefix, rec->layer, G, (int)gf->shape[1], &NB, &e);
    sc = take_score_rows(sc, G, (long)gf->shape[1], NB, pos, T);
    int rc = judge_sets(rec, ctx, o, g, (long)G * T, K, T, sc, NB, 1, tr, tl, pos);
    free(sc);
    return rc;
}

/* Golden biased router scores [T, E] for a topk_index tensor; NULL if unknown. */
static float *expert_scores(const cf_judge_ctx *ctx, const cf_tset *golden, const char *prefix,
                            int layer, int T, int *E)
{
    char name[256];
    snprintf(name, sizeof name, "%sscores", prefix);
    const cf_tensor *s = lookup(ctx, golden, name);
    if (!s && !prefix[0])
        s = lookup(ctx, golden, "aux.scores");
    if (!s || s->is_int || s->ndim != 2 || s->shape[0] != T)
        return NULL;
    *E = (int)s->shape[1];
    float *sc = malloc(s->n * sizeof *sc);
    if (!sc)
        return NULL;
    memcpy(sc, s->f, s->n * sizeof *sc);
    const cf_tensor *bias = ctx->aux ? cf_tset_get(ctx->aux, "aux.bias") : NULL;
    const m3_vec *mb = NULL;
    if (ctx->model && layer >= 0 && layer < ctx->model->cfg.text.num_layers &&
        ctx->model->w.layers && ctx->model->w.layers[layer].router_bias.data &&
        ctx->model->cfg.text.use_routing_bias)
        mb = &ctx->model->w.layers[layer].router_bias;
    for (int t = 0; t < T; t++)
        for (int x = 0; x < *E; x++) {
            float b = 0;
            if (mb && x < mb->n)
                b = m3_vec_at(mb, x);
            else if (bias && !bias->is_int && (size_t)x < bias->n)
                b = bias->f[x];
            sc[(size_t)t * *E + x] += b;
        }
    return sc;
}

static int judge_experts(cf_record *rec, const cf_judge_ctx *ctx, const cf_tset *golden, const cf_tensor *o,
                         const cf_tensor *gf, const cf_tensor *g, const int32_t *pos, const tie_rows *tr,
                         tie_list *tl)
{
    rec->kind = 1;
    if (g->ndim != 2 || gf->ndim != 2) {
        rec->result = CF_INTERNAL_ERROR;
        snprintf(rec->msg, sizeof rec->msg, "golden topk_index must be [T, k]");
        return 0;
    }
    int T = (int)g->shape[0], k = (int)g->shape[1], E = 0;
    char prefix[200];
    prefix_of(prefix, sizeof prefix, g->name, "topk_index");
    float *sc = expert_scores(ctx, golden, prefix, rec->layer, (int)gf->shape[0], &E);
    sc = take_score_rows(sc, 1, (long)gf->shape[0], E, pos, T);
    int rc = judge_sets(rec, ctx, o, g, T, k, T, sc, E, 0, tr, tl, pos);
    free(sc);
    return rc;
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

/* A golden tensor to judge, with its place in forward order. */
typedef struct judge_item {
    const cf_tensor *g;
    int layer, order, moe;
    char component[48];
} judge_item;

static int cmp_item(const void *a, const void *b)
{
    const judge_item *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return strcmp(x->g->name, y->g->name);
}

/* Whether M3-TOL-8 lists the tensor as depending on a tie of its own layer
 * (model: the layer tensors after the discrete record in M3-DUMP-3 order;
 * component cases: the moe output y and the router's topk_weight). */
static int tie_dependent(int is_model, const judge_item *it)
{
    if (!is_model)
        return strcmp(it->g->name, "y") == 0 || strcmp(it->g->name, "topk_weight") == 0;
    return it->layer >= 0 && it->order - 10 - 100 * it->layer < N_LAYER_ORDER;
}

/* M3-TOL-4: greedy_tokens first differ at rec->set.first_bad. The reference
 * recomputes the logits of that step on the golden path; a dump token whose
 * golden logit is within tie_tolerance x max|logit| of the golden choice's is
 * accepted, and the continuation (which follows the other token) is not
 * compared. Anything else keeps the Fail, with the margin in the message. */
static void judge_greedy_tie(cf_record *rec, const cf_judge_ctx *ctx, const cf_tensor *g, const cf_tensor *o)
{
    const long k = rec->set.first_bad;
    if (k < 0 || (size_t)k >= g->n)
        return;
    double margin = 0.0, maxabs = 0.0;
    m3_err e = {{0}};
    char note[400];
    if (cf_ref_greedy_margin(ctx->c, ctx->model, g->i, (int)k, o->i[k], &margin, &maxabs, &e)) {
        snprintf(note, sizeof note, "(not judged as a tie, M3-TOL-4: %.300s)", e.msg);
        append_msg(rec, " ", note);
        return;
    }
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

int cf_judge(cf_report *r, const cf_judge_ctx *ctx, const cf_tset *out, const cf_tset *golden,
             m3_err *e)
{
    int is_model = strcmp(ctx->c->component, "model") == 0;
    /* teacher-forced layers and component cases start from golden inputs:
     * a tie reaches only its own layer / case (M3-TOL-8) */
    int isolated = ctx->teacher_forced || !is_model;
    int rc = 0, ni = 0;
    r->teacher_forced = ctx->teacher_forced;
    judge_item *items = malloc((size_t)(golden->n + 1) * sizeof *items);
    tie_list tl = {NULL, 0, 0};
    tie_rows tr = {NULL, NULL, 0, 0, NULL, NULL};
    long mask_cap = 0;
    cf_tset gsub = {0};
    /* the positions of the forward, and those some judged tensor covers (M3-DUMP-10) */
    long Tf = ctx->want_T;
    const cf_tensor *t0 = cf_tset_get(golden, "layers.0.input");
    if (!t0)
        t0 = cf_tset_get(golden, "embeddings");
    if (Tf <= 0 && is_model && t0 && t0->ndim == 2)
        Tf = (long)t0->shape[0];
    unsigned char *covered = Tf > 0 ? calloc((size_t)Tf, 1) : NULL;
    if (!items || (Tf > 0 && !covered)) {
        free(items);
        free(covered);
        return m3_fail(e, "out of memory for the report of %s", ctx->c->id);
    }
    /* a case with a vision tower cannot be run by a port without vision: NotSupported whole */
    int vision_case = 0;
    if (declared(ctx->unsupported, "vision"))
        for (int k = 0; k < golden->n; k++)
            vision_case |= strncmp(golden->t[k].name, "vision.", 7) == 0;
    for (int k = 0; k < golden->n; k++) {
        const cf_tensor *g = &golden->t[k];
        if (strncmp(g->name, "aux.", 4) == 0)
            continue;
        /* teacher forcing re-runs single layers: tokens and taps are not per-layer */
        if (ctx->teacher_forced && (strcmp(g->name, "greedy_tokens") == 0 || strcmp(g->name, "eagle3.aux") == 0))
            continue;
        /* the vision tower runs before the embeddings: judged by the whole-forward run only */
        if (ctx->teacher_forced && strncmp(g->name, "vision.", 7) == 0)
            continue;
        /* a golden-side row set (a subset golden, e.g. teacher-forced logits) is not judged itself */
        if (strcmp(g->name, "rows") == 0 || ends_with(g->name, ".rows"))
            continue;
        judge_item *it = &items[ni++];
        it->g = g;
        int layer = -1, moe = 0;
        if (strncmp(g->name, "layers.", 7) == 0)
            layer = atoi(g->name + 7);
        if (is_model && ctx->model && layer >= 0 && layer < ctx->model->cfg.text.num_layers)
            moe = ctx->model->cfg.text.layer_moe[layer];
        else if (is_model && layer >= 0) {
            char nm[64];
            snprintf(nm, sizeof nm, "layers.%d.moe.topk_index", layer);
            moe = cf_tset_get(golden, nm) != NULL;
        }
        it->moe = moe;
        cf_classify(g->name, ctx->c->component, moe, it->component, sizeof it->component, &it->layer,
                    &it->order);
    }
    /* forward order, so every tie is known before the tensors that depend on it */
    if (ni > 1)
        qsort(items, (size_t)ni, sizeof *items, cmp_item);
    for (int k = 0; k < ni; k++) {
        const judge_item *it = &items[k];
        const cf_tensor *g = it->g;
        cf_record *rec = cf_report_add(r);
        if (!rec) {
            rc = m3_fail(e, "out of memory for the report of %s", ctx->c->id);
            break;
        }
        snprintf(rec->tensor, sizeof rec->tensor, "%s", g->name);
        snprintf(rec->key, sizeof rec->key, "%s/%s", ctx->c->component, g->name);
        snprintf(rec->component, sizeof rec->component, "%s", it->component);
        rec->layer = it->layer;
        rec->order = it->order;
        const cf_tensor *o = cf_tset_get(out, g->name);
        if (vision_case) {
            rec->result = CF_NOT_SUPPORTED;
            snprintf(rec->msg, sizeof rec->msg, "vision case: capability \"vision\" declared unsupported");
            continue;
        }
        const cf_tensor *ms = !o && ctx->misshaped ? cf_tset_get(ctx->misshaped, g->name) : NULL;
        if (ms) {
            char so[96], sg[96];
            shape_str(so, sizeof so, ms);
            shape_str(sg, sizeof sg, g);
            rec->result = CF_FAIL;
            snprintf(rec->msg, sizeof rec->msg, "shape %s, expected %s (refused from the header)", so, sg);
            continue;
        }
        /* a row-subset dump (M3-DUMP-10): the golden's rows at the dump's positions */
        const cf_tensor *gf = g;
        const int32_t *pos = NULL;
        long npos = 0;
        cf_tset_free(&gsub);
        if (o && is_model && cf_has_rows(g->name)) {
            const cf_tensor *rs = cf_rows_of(out, g->name);
            char hn[300];
            snprintf(hn, sizeof hn, "%s.rows", g->name);
            const cf_tensor *have = cf_tset_get(golden, hn);
            if (rs && (cf_tensor_subset(o, rs, Tf) || have)) {
                m3_err te = {{0}};
                pos = rs->i;
                npos = (long)rs->n;
                if (cf_tensor_take_rows(&gsub, g, have, pos, npos, &te)) {
                    rec->result = CF_INTERNAL_ERROR;
                    snprintf(rec->msg, sizeof rec->msg, "%.500s", te.msg);
                    continue;
                }
                g = &gsub.t[0];
            }
            if (covered) {
                for (long j = 0; j < (pos ? npos : Tf); j++)
                    if (!pos || (pos[j] >= 0 && pos[j] < Tf))
                        covered[pos ? pos[j] : j] = 1;
            }
            /* the rows the case wants (M3-DUMP-11) */
            int is_logits = strcmp(g->name, "logits") == 0 && ctx->want_logits;
            const unsigned char *want = is_logits ? ctx->want_logits : ctx->want;
            const char *wsel = is_logits ? ctx->want_logits_sel : ctx->want_sel;
            if (want && (pos || n_rows(o) != ctx->want_T)) {
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
                if (nmiss) {
                    rec->result = CF_FAIL;
                    snprintf(rec->msg, sizeof rec->msg,
                             "the case wants %ld position%s this dump's rows lack (first: %ld; params.%s \"%.200s\", "
                             "M3-DUMP-11)", nmiss, plural(nmiss), miss, is_logits ? "logits_rows" : "rows", wsel ? wsel : "");
                    continue;
                }
            }
        }
        int discrete = g->is_int || ends_with(g->name, "block_indices") ||
                       ends_with(g->name, "topk_index") || strcmp(g->name, "greedy_tokens") == 0;
        rec->kind = discrete ? 2 : 0;
        if (!o) {
            const char *cap = cf_capability_of(g->name);
            if (cap && declared(ctx->unsupported, cap)) {
                rec->result = CF_NOT_SUPPORTED;
                snprintf(rec->not_judged, sizeof rec->not_judged, "%s", cap);
                snprintf(rec->msg, sizeof rec->msg, "capability \"%s\" declared unsupported", cap);
            } else if (cf_is_internal(g->name) && declared(ctx->unsupported, "internals")) {
                rec->result = CF_NOT_SUPPORTED;
                snprintf(rec->not_judged, sizeof rec->not_judged, "internals");
                snprintf(rec->msg, sizeof rec->msg, "capability \"internals\" declared unsupported");
            } else if (strcmp(g->name, "embeddings") == 0 && cf_tset_get(out, "layers.0.input")) {
                rec->result = CF_NOT_SUPPORTED;
                snprintf(rec->not_judged, sizeof rec->not_judged, "embeddings");
                snprintf(rec->msg, sizeof rec->msg,
                         "absent; equal to layers.0.input by definition (M3-DUMP-3), judged there");
            } else {
                rec->result = CF_FAIL;
                snprintf(rec->msg, sizeof rec->msg, "missing from the dump%s%s%s",
                         cap ? " (a port may declare capability \"" : "", cap ? cap : "",
                         cap ? "\" absent)" : "");
            }
            continue;
        }
        int same = o->ndim == g->ndim;
        for (int d = 0; same && d < g->ndim; d++)
            same = o->shape[d] == g->shape[d];
        if (!same) {
            char so[96], sg[96];
            shape_str(so, sizeof so, o);
            shape_str(sg, sizeof sg, g);
            rec->result = CF_FAIL;
            const cf_tensor *rs = cf_has_rows(g->name) ? cf_rows_of(out, g->name) : NULL;
            if (rs && !pos)
                snprintf(rec->msg, sizeof rec->msg, "shape %s, expected %s (all positions) or %zu rows (its row set %s)",
                         so, sg, rs->n, rs->name);
            else
                snprintf(rec->msg, sizeof rec->msg, "shape %s, expected %s", so, sg);
            continue;
        }
        /* the rows earlier accepted ties reach (M3-TOL-8) */
        long rows = n_rows(g);
        if (rows > mask_cap) {
            unsigned char *a = realloc(tr.excl, (size_t)rows), *b = a ? realloc(tr.reach, (size_t)rows) : NULL;
            if (a)
                tr.excl = a;
            if (b)
                tr.reach = b;
            if (!a || !b) {
                rc = m3_fail(e, "out of memory for the report of %s", ctx->c->id);
                break;
            }
            mask_cap = rows;
        }
        if (rows > 0)
            tie_masks(&tl, it->layer, it->order, tie_dependent(is_model, it), isolated, rows, pos, &tr);
        else
            tr.nexcl = tr.nreach = 0;
        const tie_rows *trp = tr.nexcl || tr.nreach ? &tr : NULL;
        if (discrete) {
            if (!o->is_int || !g->is_int) {
                rec->result = o->is_int ? CF_INTERNAL_ERROR : CF_FAIL;
                snprintf(rec->msg, sizeof rec->msg, "%s must be an integer tensor (I32)",
                         o->is_int ? "golden" : "dump");
            } else if (ends_with(g->name, "block_indices")) {
                if (judge_blocks(rec, ctx, golden, o, gf, g, pos, trp, &tl)) {
                    rc = m3_fail(e, "out of memory");
                    break;
                }
            } else if (ends_with(g->name, "topk_index")) {
                if (judge_experts(rec, ctx, golden, o, gf, g, pos, trp, &tl)) {
                    rc = m3_fail(e, "out of memory");
                    break;
                }
            } else {
                rec->result = CF_PASS;
                for (size_t j = 0; j < g->n; j++)
                    if (o->i[j] != g->i[j]) {
                        rec->result = CF_FAIL;
                        rec->set.first_bad = (long)j;
                        snprintf(rec->msg, sizeof rec->msg, "element %zu is %d, expected %d", j,
                                 (int)o->i[j], (int)g->i[j]);
                        break;
                    }
                if (rec->result == CF_FAIL && strcmp(g->name, "greedy_tokens") == 0 && ctx->model)
                    judge_greedy_tie(rec, ctx, g, o);
                /* free-running: the continuation follows the last row's logits,
                 * which every accepted tie reaches */
                if (rec->result == CF_FAIL && !isolated && strcmp(g->name, "greedy_tokens") == 0 && tl.n) {
                    const tie_event *t0 = &tl.ev[0];
                    for (int q = 1; q < tl.n; q++)
                        if (tl.ev[q].order < t0->order || (tl.ev[q].order == t0->order && tl.ev[q].row < t0->row))
                            t0 = &tl.ev[q];
                    set_diverged(rec, (long)g->n, t0);
                    char note[300];
                    snprintf(note, sizeof note, "after the tie-accepted row %ld of %.150s (M3-TOL-8)", t0->row,
                             t0->src);
                    append_msg(rec, ", ", note);
                }
            }
            continue;
        }
        if (o->is_int || g->is_int) {
            rec->result = g->is_int ? CF_INTERNAL_ERROR : CF_FAIL;
            snprintf(rec->msg, sizeof rec->msg, "%s must be a float tensor",
                     g->is_int ? "golden" : "dump");
            continue;
        }
        float *w = NULL;
        if (ends_with(g->name, "topk_weight")) {
            w = aligned_weights(out, golden, o, g, pos, npos);
            if (!w) {
                rc = m3_fail(e, "out of memory");
                break;
            }
        }
        const float *of = w ? w : o->f;
        if (trp) {
            if (judge_float_tie(rec, ctx, g, of, trp)) {
                free(w);
                rc = m3_fail(e, "out of memory");
                break;
            }
        } else {
            judge_float(rec, ctx, of, g->f, g->n);
        }
        free(w);
    }
    free(items);
    free(tl.ev);
    free(tr.excl);
    free(tr.reach);
    cf_tset_free(&gsub);
    if (covered) {
        r->rows_total = Tf;
        r->rows_judged = 0;
        for (long p = 0; p < Tf; p++)
            r->rows_judged += covered[p];
        if (ctx->want_sel && !r->rows_note[0])
            snprintf(r->rows_note, sizeof r->rows_note, "the case wants params.rows \"%.100s\"", ctx->want_sel);
    }
    free(covered);
    if (rc)
        return rc;
    cf_localise(r);
    return 0;
}
