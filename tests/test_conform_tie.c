/* test_conform_tie.c — the conformance kit after a tie-accepted choice.
 *
 * Spec: M3-TOL-3 (a differing choice within the tie tolerance is accepted),
 * M3-TOL-7/8 (what depends on it: the tie's own row of the later tensors of
 * its layer is left out of the judgement in every mode; in a free-running
 * forward the rows >= t of later layers are reached, and a tensor failing
 * only there is TieDiverged, neither Pass nor Fail).
 *
 * Every case is a small synthetic model dump built here: T = 4 rows, H = 3,
 * two layers, layer 0 sparse (one index head, block size 1, top-2, the
 * query's own block forced) with a MoE of 3 experts (top-1), layer 1 dense.
 * The golden router row 2 has experts 0 and 1 at 0.5 and 0.50001 (golden
 * picks 1; 0 is within 1e-4 x 0.50001 and so a tie); the golden block
 * scores of row 3 have blocks 0 and 1 at 0.9 and 0.90001 (golden picks 1).
 * A "port" dump is the golden one with edits; a +1 bump on a row is far
 * outside the fp32 rule used here (nmse 1e-10, max-abs 1e-4).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conform.h"

enum { T = 4, H = 3, E = 3, V = 5 };

static const char k_tol[] =
    "{\"version\": 1, \"profiles\": {\"fp32\": {\"tie_tolerance\": 1e-4, \"rules\": ["
    "{\"match\": \"*/*\", \"nmse\": 1e-10, \"max_abs\": 1e-4, \"cos_min\": 0.999999, \"why\": \"test\"}]}}}";

typedef struct fixture {
    cf_tolerances tol;
    cf_case c;      /* a model case */
    m3_model *m;    /* only the config fields the judge reads */
    cf_tset golden; /* expected */
    cf_tset aux;    /* golden block scores of layer 0 */
} fixture;

static const char *const k_float_layer[] = {"input", "attn_norm", "attn.output", "post_attn", "ffn_norm",
                                            "mlp.output", "output"};

static void add_f(cf_tset *s, const char *name, int64_t r, int64_t c, const float *x)
{
    int64_t sh[2] = {r, c};
    m3_err e = {{0}};
    assert_int_equal(cf_tset_add_f(s, name, 2, sh, x, &e), 0);
}

/* Distinct, non-zero values for a [rows, cols] tensor. */
static void add_pattern(cf_tset *s, const char *name, int64_t rows, int64_t cols, float base)
{
    float x[64];
    assert_true(rows * cols <= 64);
    for (int64_t i = 0; i < rows * cols; i++)
        x[i] = base + 0.25f * (float)(i / cols) + 0.0625f * (float)(i % cols);
    add_f(s, name, rows, cols, x);
}

static cf_tensor *mut(cf_tset *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return &s->t[i];
    fail_msg("no tensor %s", name);
    return NULL;
}

/* Add delta to every element of token row `row` of a float [T, n] tensor. */
static void bump(cf_tset *s, const char *name, int row, float delta)
{
    cf_tensor *t = mut(s, name);
    int64_t n = t->shape[1];
    for (int64_t j = 0; j < n; j++)
        t->f[row * n + j] += delta;
}

static void copy_set(cf_tset *dst, const cf_tset *src)
{
    m3_err e = {{0}};
    for (int i = 0; i < src->n; i++) {
        const cf_tensor *t = &src->t[i];
        if (t->is_int)
            assert_int_equal(cf_tset_add_i(dst, t->name, t->ndim, t->shape, t->i, &e), 0);
        else
            assert_int_equal(cf_tset_add_f(dst, t->name, t->ndim, t->shape, t->f, &e), 0);
    }
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    m3_err e = {{0}};
    if (!f || cf_tol_parse(&f->tol, k_tol, strlen(k_tol), "tol.json", &e))
        return -1;
    const char *j = "{\"id\":\"tie\",\"component\":\"model\",\"mode\":\"fp32\"}";
    if (cf_case_parse(&f->c, j, strlen(j), "vec/tie", &e))
        return -1;
    f->m = calloc(1, sizeof *f->m);
    if (!f->m)
        return -1;
    m3_text_config *tc = &f->m->cfg.text;
    tc->num_layers = 2;
    tc->hidden_size = H;
    tc->layer_moe[0] = 1;
    tc->index_block_size = 1;
    tc->index_local_blocks = 1;
    tc->index_init_blocks = 0;

    char nm[64];
    add_pattern(&f->golden, "embeddings", T, H, 1.0f);
    for (int l = 0; l < 2; l++)
        for (size_t k = 0; k < sizeof k_float_layer / sizeof k_float_layer[0]; k++) {
            snprintf(nm, sizeof nm, "layers.%d.%s", l, k_float_layer[k]);
            add_pattern(&f->golden, nm, T, H, 2.0f + (float)(10 * l + (int)k));
        }
    /* layer 0 router: sigma scores (no bias) and the top-1 choice */
    float sc[T * E] = {0.9f, 0.1f, 0.2f, 0.1f, 0.8f, 0.3f, 0.5f, 0.50001f, 0.1f, 0.2f, 0.3f, 0.7f};
    add_f(&f->golden, "layers.0.moe.scores", T, E, sc);
    int32_t ti[T] = {0, 1, 1, 2};
    int64_t s41[2] = {T, 1};
    if (cf_tset_add_i(&f->golden, "layers.0.moe.topk_index", 2, s41, ti, &e))
        return -1;
    float tw[T] = {1, 1, 1, 1};
    add_f(&f->golden, "layers.0.moe.topk_weight", T, 1, tw);
    /* layer 0 block selection: golden order, forced own block first */
    int32_t bi[T * 2] = {0, -1, 1, 0, 2, 0, 3, 1};
    int64_t s142[3] = {1, T, 2};
    if (cf_tset_add_i(&f->golden, "layers.0.attn.block_indices", 3, s142, bi, &e))
        return -1;
    float bs[T * T] = {0.5f, -INFINITY, -INFINITY, -INFINITY, 0.4f, 0.6f, -INFINITY, -INFINITY,
                       0.7f, 0.3f, 0.5f, -INFINITY, 0.9f, 0.90001f, 0.2f, 0.1f};
    int64_t s144[3] = {1, T, T};
    if (cf_tset_add_f(&f->aux, "layers.0.attn.block_scores", 3, s144, bs, &e))
        return -1;
    add_pattern(&f->golden, "final_norm", T, H, 40.0f);
    add_pattern(&f->golden, "logits", T, V, 50.0f);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    cf_tset_free(&f->golden);
    cf_tset_free(&f->aux);
    cf_case_free(&f->c);
    cf_tol_free(&f->tol);
    free(f->m);
    free(f);
    return 0;
}

static void judge(fixture *f, const cf_tset *port, int teacher_forced, cf_report *r)
{
    cf_judge_ctx ctx = {&f->c, cf_tol_profile(&f->tol, "fp32"), f->m, &f->aux, "", teacher_forced, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    m3_err e = {{0}};
    memset(r, 0, sizeof *r);
    assert_int_equal(cf_judge(r, &ctx, port, &f->golden, &e), 0);
}

static const cf_record *rec_of(const cf_report *r, const char *name)
{
    for (int i = 0; i < r->nrec; i++)
        if (strcmp(r->rec[i].tensor, name) == 0)
            return &r->rec[i];
    fail_msg("no record %s", name);
    return NULL;
}

/* The JSON lines and the terminal table of r, as one string (caller frees). */
static char *report_text(const cf_report *r)
{
    FILE *fp = tmpfile();
    assert_non_null(fp);
    cf_write_jsonl(fp, r, "s");
    cf_print_report(fp, r, 0, 0);
    long n = ftell(fp);
    char *txt = calloc((size_t)n + 1, 1);
    assert_non_null(txt);
    rewind(fp);
    assert_int_equal(fread(txt, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    return txt;
}

/* The port chose expert 0 on router row 2 (a tie) and so its MoE output and
 * layer output differ on row 2 by a full unit. */
static void port_router_tie(const fixture *f, cf_tset *port)
{
    copy_set(port, &f->golden);
    mut(port, "layers.0.moe.topk_index")->i[2] = 0;
    bump(port, "layers.0.mlp.output", 2, 1.0f);
    bump(port, "layers.0.output", 2, 1.0f);
}

/* ---- the set comparison with masked rows --------------------------------------------- */
static void test_sets_masked(void **st)
{
    (void)st;
    /* rows: 0 equal, 1 tie (gap 1e-5 <= 1e-4 * 0.50001), 2 bad (gap 0.4), 3 bad but masked */
    int32_t ref[4] = {1, 1, 1, 1}, out[4] = {1, 0, 2, 0};
    float sc[12] = {0.1f, 0.2f, 0.3f, 0.5f, 0.50001f, 0.1f, 0.9f, 0.5f, 0.1f, 0.9f, 0.5f, 0.1f};
    unsigned char masked[4] = {0, 0, 0, 1};
    signed char state[4] = {-1, -1, -1, -1};
    cf_setstat s;
    cf_compare_sets_masked(&s, out, ref, 4, 1, sc, 3, 1e-4, masked, state);
    assert_int_equal(s.rows_equal, 1);
    assert_int_equal(s.rows_tie, 1);
    assert_int_equal(s.first_tie, 1);
    assert_int_equal(s.rows_bad, 1);
    assert_int_equal(s.first_bad, 2);
    assert_int_equal(s.rows_masked, 1);
    assert_int_equal(s.rows_masked_bad, 1);
    assert_int_equal(s.first_masked_bad, 3);
    assert_int_equal(state[0], 0);
    assert_int_equal(state[1], 1);
    assert_int_equal(state[2], 2);
    assert_int_equal(state[3], 2);
    /* without the mask the same rows are one tie and two bad, as cf_compare_sets says */
    cf_compare_sets(&s, out, ref, 4, 1, sc, 3, 1e-4);
    assert_int_equal(s.rows_bad, 2);
    assert_int_equal(s.rows_masked, 0);
}

/* ---- no tie: unchanged behaviour ---------------------------------------------------------- */
static void test_no_tie_unchanged(void **st)
{
    fixture *f = *st;
    cf_tset port = {0};
    cf_report r;
    copy_set(&port, &f->golden);
    judge(f, &port, 0, &r);
    assert_int_equal(r.result, CF_PASS);
    assert_int_equal(r.first_tie, -1);
    assert_int_equal(r.first_diverged, -1);
    assert_int_equal(r.tensors_excluded, 0);
    cf_report_free(&r);
    /* the same row-2 errors as the tie case, but the router agrees: plain Fail */
    bump(&port, "layers.0.mlp.output", 2, 1.0f);
    for (int tf = 0; tf < 2; tf++) {
        judge(f, &port, tf, &r);
        assert_int_equal(r.result, CF_FAIL);
        assert_string_equal(r.rec[r.first_fail].tensor, "layers.0.mlp.output");
        assert_null(strstr(r.rec[r.first_fail].msg, "M3-TOL-8"));
        assert_int_equal(r.first_tie, -1);
        assert_int_equal(r.ndiverged, 0);
        for (int i = 0; i < r.nrec; i++)
            assert_true(r.rec[i].excluded_rows == 0 && r.rec[i].reached_rows == 0);
        cf_report_free(&r);
    }
    cf_tset_free(&port);
}

/* ---- teacher-forced: the tie's consequences are excluded ------------------------------ */
static void test_tf_router_tie_masked(void **st)
{
    fixture *f = *st;
    cf_tset port = {0};
    cf_report r;
    port_router_tie(f, &port);
    judge(f, &port, 1, &r);
    assert_int_equal(r.result, CF_PASS);
    assert_true(cf_result_conforms(r.result));
    assert_int_equal(r.first_fail, -1);
    /* the tie itself */
    const cf_record *ti = &r.rec[r.first_tie];
    assert_string_equal(ti->tensor, "layers.0.moe.topk_index");
    assert_int_equal(ti->tie_row, 2);
    assert_int_equal(ti->set.rows_tie, 1);
    /* exactly the dependent row-2 tensors after it are excluded, nothing before it */
    const char *excluded[] = {"layers.0.moe.topk_weight", "layers.0.mlp.output", "layers.0.output"};
    for (int k = 0; k < 3; k++) {
        const cf_record *x = rec_of(&r, excluded[k]);
        assert_int_equal(x->excluded_rows, 1);
        assert_int_equal(x->excl_tie_row, 2);
        assert_string_equal(x->excl_tie, "layers.0.moe.topk_index");
        assert_int_equal(x->reached_rows, 0);
        assert_int_equal(x->result, CF_PASS);
        assert_non_null(strstr(x->msg, "M3-TOL-8: 1 of 4 rows excluded"));
    }
    const char *kept[] = {"layers.0.ffn_norm", "layers.0.moe.scores", "layers.0.post_attn", "layers.1.input",
                          "layers.1.mlp.output", "layers.1.output", "final_norm", "logits"};
    for (int k = 0; k < 8; k++)
        assert_int_equal(rec_of(&r, kept[k])->excluded_rows, 0);
    assert_int_equal(r.tensors_excluded, 3);
    assert_int_equal(r.rows_excluded, 3);
    /* the metrics are over the 3 other rows, which are exact */
    assert_true(rec_of(&r, "layers.0.mlp.output")->m.nmse == 0.0);
    /* the report says what was left out and why */
    char *txt = report_text(&r);
    assert_non_null(strstr(txt, "\"result\":\"Pass\",\"conforms\":true"));
    assert_non_null(strstr(txt, "\"tie_excluded\":{\"rows\":3,\"tensors\":[\"layers.0.moe.topk_weight\","
                                "\"layers.0.mlp.output\",\"layers.0.output\"]}"));
    assert_non_null(strstr(txt, "\"tie_excluded\":{\"rows\":1,\"tie_tensor\":\"layers.0.moe.topk_index\","
                                "\"tie_row\":2}"));
    assert_non_null(strstr(txt, "M3-TOL-8: 3 rows of 3 tensors excluded"));
    free(txt);
    cf_report_free(&r);
    cf_tset_free(&port);
}

static void test_tf_masking_hides_nothing_else(void **st)
{
    fixture *f = *st;
    cf_report r;
    /* a wrong unrelated row of a dependent tensor */
    {
        cf_tset port = {0};
        port_router_tie(f, &port);
        bump(&port, "layers.0.mlp.output", 0, 1.0f);
        judge(f, &port, 1, &r);
        assert_int_equal(r.result, CF_FAIL);
        const cf_record *x = &r.rec[r.first_fail];
        assert_string_equal(x->tensor, "layers.0.mlp.output");
        assert_non_null(strstr(x->msg, "NMSE"));
        assert_int_equal(x->excluded_rows, 1); /* row 2 left out, row 0 still judged */
        cf_report_free(&r);
        cf_tset_free(&port);
    }
    /* the same row in the next layer: teacher-forced, it does not depend on the tie */
    {
        cf_tset port = {0};
        port_router_tie(f, &port);
        bump(&port, "layers.1.attn.output", 2, 1.0f);
        judge(f, &port, 1, &r);
        assert_int_equal(r.result, CF_FAIL);
        assert_string_equal(r.rec[r.first_fail].tensor, "layers.1.attn.output");
        assert_int_equal(r.rec[r.first_fail].excluded_rows, 0);
        cf_report_free(&r);
        cf_tset_free(&port);
    }
    /* the head of a teacher-forced run starts from the dump's last output: not masked */
    {
        cf_tset port = {0};
        port_router_tie(f, &port);
        bump(&port, "logits", 2, 1.0f);
        judge(f, &port, 1, &r);
        assert_int_equal(r.result, CF_FAIL);
        assert_string_equal(r.rec[r.first_fail].tensor, "logits");
        cf_report_free(&r);
        cf_tset_free(&port);
    }
    /* a NaN in the excluded row still fails */
    {
        cf_tset port = {0};
        port_router_tie(f, &port);
        mut(&port, "layers.0.output")->f[2 * H + 1] = NAN;
        judge(f, &port, 1, &r);
        assert_int_equal(r.result, CF_FAIL);
        assert_string_equal(r.rec[r.first_fail].tensor, "layers.0.output");
        assert_non_null(strstr(r.rec[r.first_fail].msg, "NaN"));
        cf_report_free(&r);
        cf_tset_free(&port);
    }
    /* a router row beyond the tie tolerance is not excused by the tie in another row */
    {
        cf_tset port = {0};
        port_router_tie(f, &port);
        mut(&port, "layers.0.moe.topk_index")->i[3] = 0; /* 0.2 vs 0.7 */
        judge(f, &port, 1, &r);
        assert_int_equal(r.result, CF_FAIL);
        assert_string_equal(r.rec[r.first_fail].tensor, "layers.0.moe.topk_index");
        cf_report_free(&r);
        cf_tset_free(&port);
    }
}

static void test_failure_before_the_tie(void **st)
{
    fixture *f = *st;
    const char *before[] = {"layers.0.ffn_norm", "layers.0.moe.scores", "layers.0.attn.output"};
    for (int k = 0; k < 3; k++)
        for (int tf = 0; tf < 2; tf++) {
            cf_tset port = {0};
            cf_report r;
            port_router_tie(f, &port);
            bump(&port, before[k], 2, 1.0f); /* the tie's own row, but before the router */
            judge(f, &port, tf, &r);
            assert_int_equal(r.result, CF_FAIL);
            assert_string_equal(r.rec[r.first_fail].tensor, before[k]);
            assert_int_equal(r.rec[r.first_fail].excluded_rows, 0);
            assert_int_equal(r.rec[r.first_fail].reached_rows, 0);
            cf_report_free(&r);
            cf_tset_free(&port);
        }
}

/* ---- MSA selection tie, teacher-forced ------------------------------------------------- */
static void port_block_tie(const fixture *f, cf_tset *port)
{
    copy_set(port, &f->golden);
    cf_tensor *b = mut(port, "layers.0.attn.block_indices");
    b->i[3 * 2 + 0] = 0; /* {0, 3} instead of {3, 1}: 0.9 vs 0.90001 */
    b->i[3 * 2 + 1] = 3;
    /* everything of layer 0 after the selection moves on row 3, including a
     * router choice far from a tie (the router input itself changed) */
    const char *after[] = {"layers.0.attn.output", "layers.0.post_attn", "layers.0.ffn_norm",
                           "layers.0.moe.scores", "layers.0.mlp.output", "layers.0.output"};
    for (int k = 0; k < 6; k++)
        bump(port, after[k], 3, 1.0f);
    mut(port, "layers.0.moe.topk_index")->i[3] = 0;
}

static void test_tf_block_tie_masked(void **st)
{
    fixture *f = *st;
    cf_tset port = {0};
    cf_report r;
    port_block_tie(f, &port);
    judge(f, &port, 1, &r);
    assert_int_equal(r.result, CF_PASS);
    const cf_record *b = &r.rec[r.first_tie];
    assert_string_equal(b->tensor, "layers.0.attn.block_indices");
    assert_int_equal(b->tie_row, 3);
    assert_int_equal(b->tie_head, 0);
    const cf_record *ti = rec_of(&r, "layers.0.moe.topk_index");
    assert_int_equal(ti->result, CF_PASS);
    assert_int_equal(ti->set.rows_masked, 1);
    assert_int_equal(ti->set.rows_masked_bad, 1);
    assert_int_equal(ti->excluded_rows, 1);
    assert_int_equal(rec_of(&r, "layers.0.attn_norm")->excluded_rows, 0);
    assert_int_equal(rec_of(&r, "layers.0.moe.scores")->excluded_rows, 1);
    assert_int_equal(r.tensors_excluded, 8); /* attn.output .. output, with the router's three */
    cf_report_free(&r);
    /* the norm before the selection is judged in full */
    bump(&port, "layers.0.attn_norm", 3, 1.0f);
    judge(f, &port, 1, &r);
    assert_int_equal(r.result, CF_FAIL);
    assert_string_equal(r.rec[r.first_fail].tensor, "layers.0.attn_norm");
    cf_report_free(&r);
    cf_tset_free(&port);
}

/* ---- free-running: inconclusive after the tie ------------------------------------------- */
static void test_free_running_tie_diverged(void **st)
{
    fixture *f = *st;
    cf_tset port = {0};
    cf_report r;
    port_router_tie(f, &port);
    /* causal attention carries row 2 to rows 2 and 3 of every later layer */
    const char *later[] = {"layers.1.input", "layers.1.attn_norm", "layers.1.attn.output", "layers.1.post_attn",
                           "layers.1.ffn_norm", "layers.1.mlp.output", "layers.1.output", "final_norm", "logits"};
    for (int k = 0; k < 9; k++) {
        bump(&port, later[k], 2, 1.0f);
        bump(&port, later[k], 3, 0.5f);
    }
    judge(f, &port, 0, &r);
    assert_int_equal(r.result, CF_TIE_DIVERGED);
    assert_false(cf_result_conforms(r.result));
    assert_int_equal(r.first_fail, -1);
    /* the tie's own layer: row 2 left out as when teacher-forced */
    assert_int_equal(rec_of(&r, "layers.0.mlp.output")->result, CF_PASS);
    assert_int_equal(rec_of(&r, "layers.0.mlp.output")->excluded_rows, 1);
    /* later layers: rows 2 and 3 are reached, rows 0 and 1 pass */
    const cf_record *d = &r.rec[r.first_diverged];
    assert_string_equal(d->tensor, "layers.1.input");
    assert_int_equal(d->reached_rows, 2);
    assert_int_equal(d->reach_tie_row, 2);
    assert_string_equal(d->reach_tie, "layers.0.moe.topk_index");
    assert_int_equal(r.ndiverged, 9); /* the 9 later tensors */
    assert_int_equal(rec_of(&r, "layers.1.output")->reached_rows, 2);
    assert_int_equal(rec_of(&r, "layers.0.ffn_norm")->result, CF_PASS);
    assert_string_equal(cf_result_name(r.result), "TieDiverged");
    /* the reports say so */
    char *txt = report_text(&r);
    assert_non_null(strstr(txt, "\"result\":\"TieDiverged\",\"conforms\":false"));
    assert_non_null(strstr(txt, "\"first_tie_divergence\":{\"tensor\":\"layers.1.input\""));
    assert_non_null(strstr(txt, "\"first_tie\":{\"tensor\":\"layers.0.moe.topk_index\",\"layer\":0,\"row\":2"));
    assert_non_null(strstr(txt, "verdict: TieDiverged"));
    assert_non_null(strstr(txt, "judged teacher-forced (M3-TOL-8 4)"));
    free(txt);
    cf_report_free(&r);

    /* greedy tokens after a tie may all differ: inconclusive too */
    int32_t gt[3] = {4, 1, 3}, ot[3] = {4, 2, 0};
    int64_t s3[1] = {3};
    m3_err e = {{0}};
    assert_int_equal(cf_tset_add_i(&f->golden, "greedy_tokens", 1, s3, gt, &e), 0);
    assert_int_equal(cf_tset_add_i(&port, "greedy_tokens", 1, s3, ot, &e), 0);
    judge(f, &port, 0, &r);
    assert_int_equal(r.result, CF_TIE_DIVERGED);
    assert_int_equal(rec_of(&r, "greedy_tokens")->result, CF_TIE_DIVERGED);
    cf_report_free(&r);

    /* a later row the tie cannot reach (row 1 < 2) fails on its own: Fail */
    bump(&port, "layers.1.attn.output", 1, 1.0f);
    judge(f, &port, 0, &r);
    assert_int_equal(r.result, CF_FAIL);
    assert_string_equal(r.rec[r.first_fail].tensor, "layers.1.attn.output");
    assert_non_null(strstr(r.rec[r.first_fail].msg, "cannot reach"));
    cf_report_free(&r);
    cf_tset_free(&port);
}

/* Free-running, but nothing after the tie's own layer moved: its own rows
 * are left out exactly as when teacher-forced, and the case passes. */
static void test_free_running_own_layer_only(void **st)
{
    fixture *f = *st;
    cf_tset port = {0};
    cf_report r;
    port_router_tie(f, &port);
    judge(f, &port, 0, &r);
    assert_int_equal(r.result, CF_PASS);
    assert_int_equal(r.ndiverged, 0);
    assert_int_equal(r.tensors_excluded, 3);
    assert_int_equal(rec_of(&r, "layers.0.output")->excluded_rows, 1);
    cf_report_free(&r);
    /* the same with a later-layer row the tie reaches moved beyond the bound */
    bump(&port, "final_norm", 3, 1.0f);
    judge(f, &port, 0, &r);
    assert_int_equal(r.result, CF_TIE_DIVERGED);
    assert_string_equal(r.rec[r.first_diverged].tensor, "final_norm");
    assert_int_equal(r.rec[r.first_diverged].reached_rows, 2);
    cf_report_free(&r);
    cf_tset_free(&port);
}

static void test_free_running_before_tie_fails(void **st)
{
    fixture *f = *st;
    cf_tset port = {0};
    cf_report r;
    port_router_tie(f, &port);
    bump(&port, "layers.0.post_attn", 1, 1.0f); /* before the router: a plain Fail */
    bump(&port, "layers.1.output", 3, 1.0f);
    judge(f, &port, 0, &r);
    assert_int_equal(r.result, CF_FAIL);
    assert_string_equal(r.rec[r.first_fail].tensor, "layers.0.post_attn");
    assert_int_equal(rec_of(&r, "layers.1.output")->result, CF_TIE_DIVERGED);
    cf_report_free(&r);
    cf_tset_free(&port);
}

/* ---- a component case is isolated: the moe output row of a tie is excluded ----------------- */
static void test_component_moe_tie(void **st)
{
    (void)st;
    cf_tolerances tol;
    cf_case c;
    m3_err e = {{0}};
    assert_int_equal(cf_tol_parse(&tol, k_tol, strlen(k_tol), "tol.json", &e), 0);
    const char *j = "{\"id\":\"m\",\"component\":\"moe\",\"mode\":\"fp32\",\"params\":{\"topk\":1}}";
    assert_int_equal(cf_case_parse(&c, j, strlen(j), "vec/m", &e), 0);
    cf_tset g = {0}, o = {0}, aux = {0};
    float sc[2 * E] = {0.9f, 0.1f, 0.2f, 0.5f, 0.50001f, 0.1f};
    int32_t gi[2] = {0, 1}, oi[2] = {0, 0};
    int64_t s21[2] = {2, 1};
    float w[2] = {1, 1};
    add_f(&aux, "scores", 2, E, sc);
    assert_int_equal(cf_tset_add_i(&g, "topk_index", 2, s21, gi, &e), 0);
    assert_int_equal(cf_tset_add_i(&o, "topk_index", 2, s21, oi, &e), 0);
    add_f(&g, "topk_weight", 2, 1, w);
    add_f(&o, "topk_weight", 2, 1, w);
    add_pattern(&g, "y", 2, H, 1.0f);
    add_pattern(&o, "y", 2, H, 1.0f);
    bump(&o, "y", 1, 1.0f);
    cf_judge_ctx ctx = {&c, cf_tol_profile(&tol, "fp32"), NULL, &aux, "", 0, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    cf_report r;
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_int_equal(r.result, CF_PASS);
    assert_int_equal(rec_of(&r, "y")->excluded_rows, 1);
    cf_report_free(&r);
    bump(&o, "y", 0, 1.0f); /* row 0 chose the golden expert: its error is the port's own */
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_int_equal(r.result, CF_FAIL);
    assert_string_equal(r.rec[r.first_fail].tensor, "y");
    cf_report_free(&r);
    cf_tset_free(&g);
    cf_tset_free(&o);
    cf_tset_free(&aux);
    cf_case_free(&c);
    cf_tol_free(&tol);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sets_masked),
        cmocka_unit_test_setup_teardown(test_no_tie_unchanged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tf_router_tie_masked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tf_masking_hides_nothing_else, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failure_before_the_tie, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tf_block_tie_masked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_running_tie_diverged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_running_own_layer_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_running_before_tie_fails, setup, teardown),
        cmocka_unit_test(test_component_moe_tie),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
