/* judge.c — judges every golden tensor of a case against a dump.
 *
 * Spec: M3-TOL-* (float tensors: non-finite values first, then NMSE,
 * max-abs, optional max-rel and cosine against the first matching rule of
 * the profile; QualityWarning when NMSE is above a tenth of its bound),
 * M3-DUMP-6 (missing tensors: NotSupported only for declared capabilities),
 * M3-DUMP-7 (discrete tensors read as sets), M3-MSA-SELECT-* and
 * M3-MOE-ROUTER-2 (a differing choice is accepted only within the tie
 * tolerance of the golden scores; forced blocks count as +inf).
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
    x->set.first_bad = -1;
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

static void judge_blocks(cf_record *rec, const cf_judge_ctx *ctx, const cf_tset *golden,
                         const cf_tensor *o, const cf_tensor *g)
{
    rec->kind = 1;
    if (g->ndim != 3) {
        rec->result = CF_INTERNAL_ERROR;
        snprintf(rec->msg, sizeof rec->msg, "golden block_indices must be [G, T, K]");
        return;
    }
    int G = (int)g->shape[0], T = (int)g->shape[1], K = (int)g->shape[2], NB = 0;
    char prefix[200];
    prefix_of(prefix, sizeof prefix, g->name, "block_indices");
    m3_err e = {{0}};
    float *sc = block_scores(ctx, golden, prefix, rec->layer, G, T, &NB, &e);
    cf_compare_sets(&rec->set, o->i, g->i, (long)G * T, K, sc, NB, ctx->profile->tie_tolerance);
    free(sc);
    if (rec->set.rows_bad) {
        rec->result = CF_FAIL;
        long r = rec->set.first_bad;
        snprintf(rec->msg, sizeof rec->msg, "%ld of %ld (head, row) sets differ; first: head %ld row %ld: %s",
                 rec->set.rows_bad, rec->set.rows, r / T, r % T, rec->set.why);
    } else {
        rec->result = CF_PASS;
        if (rec->set.rows_tie)
            snprintf(rec->msg, sizeof rec->msg, "%ld rows differ only within the tie tolerance",
                     rec->set.rows_tie);
    }
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

static void judge_experts(cf_record *rec, const cf_judge_ctx *ctx, const cf_tset *golden,
                          const cf_tensor *o, const cf_tensor *g)
{
    rec->kind = 1;
    if (g->ndim != 2) {
        rec->result = CF_INTERNAL_ERROR;
        snprintf(rec->msg, sizeof rec->msg, "golden topk_index must be [T, k]");
        return;
    }
    int T = (int)g->shape[0], k = (int)g->shape[1], E = 0;
    char prefix[200];
    prefix_of(prefix, sizeof prefix, g->name, "topk_index");
    float *sc = expert_scores(ctx, golden, prefix, rec->layer, T, &E);
    cf_compare_sets(&rec->set, o->i, g->i, T, k, sc, E, ctx->profile->tie_tolerance);
    free(sc);
    if (rec->set.rows_bad) {
        rec->result = CF_FAIL;
        snprintf(rec->msg, sizeof rec->msg, "%ld of %ld rows choose other experts; %s", rec->set.rows_bad,
                 rec->set.rows, rec->set.why);
    } else {
        rec->result = CF_PASS;
        if (rec->set.rows_tie)
            snprintf(rec->msg, sizeof rec->msg, "%ld rows differ only within the tie tolerance",
                     rec->set.rows_tie);
    }
}

/* topk_weight of the port re-ordered by ascending expert id of its own
 * topk_index (M3-DUMP-7); rows whose expert set differs from golden take
 * the golden weights (the index record judges those rows). */
static float *aligned_weights(const cf_tset *out, const cf_tset *golden, const cf_tensor *o,
                              const cf_tensor *g)
{
    char prefix[200], name[240];
    prefix_of(prefix, sizeof prefix, g->name, "topk_weight");
    snprintf(name, sizeof name, "%stopk_index", prefix);
    const cf_tensor *oi = cf_tset_get(out, name), *gi = cf_tset_get(golden, name);
    float *w = malloc(o->n * sizeof *w);
    if (!w)
        return NULL;
    memcpy(w, o->f, o->n * sizeof *w);
    if (!oi || !gi || !oi->is_int || !gi->is_int || oi->n != o->n || gi->n != o->n || o->ndim != 2)
        return w;
    int T = (int)o->shape[0], k = (int)o->shape[1];
    int32_t *id = malloc((size_t)k * sizeof *id);
    if (!id)
        return w;
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
    free(id);
    return w;
}

int cf_judge(cf_report *r, const cf_judge_ctx *ctx, const cf_tset *out, const cf_tset *golden,
             m3_err *e)
{
    int is_model = strcmp(ctx->c->component, "model") == 0;
    r->teacher_forced = ctx->teacher_forced;
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
        cf_record *rec = cf_report_add(r);
        if (!rec)
            return m3_fail(e, "out of memory for the report of %s", ctx->c->id);
        snprintf(rec->tensor, sizeof rec->tensor, "%s", g->name);
        snprintf(rec->key, sizeof rec->key, "%s/%s", ctx->c->component, g->name);
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
        cf_classify(g->name, ctx->c->component, moe, rec->component, sizeof rec->component,
                    &rec->layer, &rec->order);
        const cf_tensor *o = cf_tset_get(out, g->name);
        int discrete = g->is_int || ends_with(g->name, "block_indices") ||
                       ends_with(g->name, "topk_index") || strcmp(g->name, "greedy_tokens") == 0;
        rec->kind = discrete ? 2 : 0;
        if (!o) {
            const char *cap = cf_capability_of(g->name);
            if (cap && declared(ctx->unsupported, cap)) {
                rec->result = CF_NOT_SUPPORTED;
                snprintf(rec->msg, sizeof rec->msg, "capability \"%s\" declared unsupported", cap);
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
            snprintf(rec->msg, sizeof rec->msg, "shape %s, expected %s", so, sg);
            continue;
        }
        if (discrete) {
            if (!o->is_int || !g->is_int) {
                rec->result = o->is_int ? CF_INTERNAL_ERROR : CF_FAIL;
                snprintf(rec->msg, sizeof rec->msg, "%s must be an integer tensor (I32)",
                         o->is_int ? "golden" : "dump");
            } else if (ends_with(g->name, "block_indices")) {
                judge_blocks(rec, ctx, golden, o, g);
            } else if (ends_with(g->name, "topk_index")) {
                judge_experts(rec, ctx, golden, o, g);
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
            }
            continue;
        }
        if (o->is_int || g->is_int) {
            rec->result = g->is_int ? CF_INTERNAL_ERROR : CF_FAIL;
            snprintf(rec->msg, sizeof rec->msg, "%s must be a float tensor",
                     g->is_int ? "golden" : "dump");
            continue;
        }
        if (ends_with(g->name, "topk_weight")) {
            float *w = aligned_weights(out, golden, o, g);
            if (!w)
                return m3_fail(e, "out of memory");
            judge_float(rec, ctx, w, g->f, g->n);
            free(w);
        } else {
            judge_float(rec, ctx, o->f, g->f, g->n);
        }
    }
    cf_localise(r);
    return 0;
}
