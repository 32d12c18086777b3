/* test_conform_greedy.c — a first differing greedy token within the tie
 * tolerance (M3-TOL-4).
 *
 * On the committed vector model/tiny_fp32 (prompt, golden greedy_tokens and
 * the golden's tie evidence, whose greedy_logits the kit judges on), the test
 * computes with the reference library the logits
 * of a generated step k on the golden path (prompt, then golden tokens
 * 0..k-1), takes the runner-up token and its margin to the golden choice,
 * and hands the kit a dump whose greedy_tokens pick the runner-up at step
 * k. With the profile's tie tolerance set 1% above margin / max|logit| the
 * token is a tie and the record passes; 1% below, it fails and says why.
 * Steps 0 and the last one (which needs every earlier golden token fed)
 * are checked, so a kit that fed the wrong prefix would land on the wrong
 * side of one of the two boundaries. A token outside the vocabulary stays a
 * Fail. Every other tensor of the dump is the golden one.
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
#include "model.h"

#define CASE_DIR "vectors/model/tiny_fp32"

typedef struct fixture {
    cf_case c;
    m3_model m;
    cf_tset golden; /* expected.safetensors */
    cf_tset in;     /* inputs.safetensors */
    cf_tset ev;     /* evidence.safetensors: the golden's greedy logits (M3-VEC-11) */
    int use_ev;     /* 0: judge as a golden without tie evidence */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    m3_err e = {{0}};
    m3_model_opts mo = {0};
    if (!f || cf_case_load(&f->c, CASE_DIR, 0, &e) || m3_model_open(&f->m, CASE_DIR, &mo, &e) ||
        cf_tset_load(&f->golden, CASE_DIR "/expected.safetensors", &e) ||
        cf_tset_load(&f->in, CASE_DIR "/inputs.safetensors", &e) ||
        cf_evidence_load(&f->ev, CASE_DIR "/evidence.safetensors", &f->golden, CASE_DIR "/expected.safetensors", 1,
                         &e)) {
        fprintf(stderr, "setup: %s\n", e.msg);
        return -1;
    }
    f->use_ev = 1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    cf_tset_free(&f->golden);
    cf_tset_free(&f->in);
    cf_tset_free(&f->ev);
    cf_case_free(&f->c);
    m3_model_close(&f->m);
    free(f);
    return 0;
}

/* Logits of generated step k on the golden path (fp32, the case's mode),
 * computed here with the library: the runner-up token to the golden choice,
 * its margin and max|logit|. */
static void step_runner_up(fixture *f, int k, int32_t *alt, double *margin, double *maxabs)
{
    const cf_tensor *ids = cf_tset_get(&f->in, "input_ids");
    const cf_tensor *g = cf_tset_get(&f->golden, "greedy_tokens");
    assert_non_null(ids);
    assert_non_null(g);
    assert_true(k >= 0 && (size_t)k < g->n);
    const int T = (int)ids->n, V = f->m.cfg.text.vocab_size;
    m3_err e = {{0}};
    m3_state *s = m3_state_new(&f->m, T + k + 1, f->c.mode, &e);
    float *lg = malloc((size_t)T * V * sizeof *lg);
    assert_non_null(s);
    assert_non_null(lg);
    assert_int_equal(m3_forward(&f->m, s, ids->i, T, lg, NULL, &e), 0);
    const float *row = lg + (size_t)(T - 1) * V;
    for (int j = 0; j < k; j++) {
        assert_int_equal(m3_forward(&f->m, s, &g->i[j], 1, lg, NULL, &e), 0);
        row = lg;
    }
    int best = -1;
    double mx = 0.0;
    for (int v = 0; v < V; v++) {
        mx = fmax(mx, fabs((double)row[v]));
        if (v != g->i[k] && (best < 0 || row[v] > row[best]))
            best = v;
    }
    /* the golden token is the argmax of this row */
    for (int v = 0; v < V; v++)
        assert_true(row[v] <= row[g->i[k]]);
    *alt = best;
    *margin = (double)row[g->i[k]] - (double)row[best];
    *maxabs = mx;
    m3_state_free(s);
    free(lg);
}

/* Judge the golden set with greedy_tokens[k] = tok under a profile whose
 * tie tolerance is tie_tol; returns the greedy_tokens record (copied). */
static cf_record judge_token(fixture *f, int k, int32_t tok, double tie_tol)
{
    char tol[512];
    snprintf(tol, sizeof tol,
             "{\"version\": 1, \"profiles\": {\"fp32\": {\"tie_tolerance\": %.9g, \"rules\": ["
             "{\"match\": \"*/*\", \"nmse\": 1e-10, \"max_abs\": 1e-4, \"cos_min\": 0.999999, "
             "\"why\": \"test\"}]}}}",
             tie_tol);
    cf_tolerances t;
    m3_err e = {{0}};
    assert_int_equal(cf_tol_parse(&t, tol, strlen(tol), "tol.json", &e), 0);
    cf_tset port = {0};
    for (int i = 0; i < f->golden.n; i++) {
        const cf_tensor *x = &f->golden.t[i];
        if (x->is_int)
            assert_int_equal(cf_tset_add_i(&port, x->name, x->ndim, x->shape, x->i, &e), 0);
        else
            assert_int_equal(cf_tset_add_f(&port, x->name, x->ndim, x->shape, x->f, &e), 0);
    }
    cf_tensor *gt = NULL;
    for (int i = 0; i < port.n; i++)
        if (strcmp(port.t[i].name, "greedy_tokens") == 0)
            gt = &port.t[i];
    assert_non_null(gt);
    gt->i[k] = tok;
    cf_judge_ctx ctx = {.c = &f->c, .profile = cf_tol_profile(&t, "fp32"), .model = &f->m,
                        .evidence = f->use_ev ? &f->ev : NULL, .unsupported = ""};
    cf_report r;
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &port, &f->golden, &e), 0);
    cf_record out;
    memset(&out, 0, sizeof out);
    int found = 0;
    for (int i = 0; i < r.nrec; i++)
        if (strcmp(r.rec[i].tensor, "greedy_tokens") == 0) {
            out = r.rec[i];
            found = 1;
        } else {
            assert_int_equal(r.rec[i].result, CF_PASS); /* everything else is the golden data */
        }
    assert_true(found);
    cf_report_free(&r);
    cf_tset_free(&port);
    cf_tol_free(&t);
    return out;
}

static void check_step(fixture *f, int k)
{
    int32_t alt;
    double margin, mx;
    step_runner_up(f, k, &alt, &margin, &mx);
    assert_true(margin > 0.0 && mx > 0.0);
    const double rel = margin / mx;
    cf_record in = judge_token(f, k, alt, rel * 1.01);
    assert_int_equal(in.result, CF_PASS);
    assert_non_null(strstr(in.msg, "M3-TOL-4"));
    assert_non_null(strstr(in.msg, "a tie"));
    cf_record out = judge_token(f, k, alt, rel * 0.99);
    assert_int_equal(out.result, CF_FAIL);
    assert_non_null(strstr(out.msg, "not a tie"));
}

static void test_first_token_tie(void **st)
{
    check_step(*st, 0);
}

static void test_last_token_tie(void **st)
{
    fixture *f = *st;
    const cf_tensor *g = cf_tset_get(&f->golden, "greedy_tokens");
    assert_non_null(g);
    assert_true(g->n >= 2);
    check_step(f, (int)g->n - 1);
}

static void test_token_outside_vocabulary(void **st)
{
    fixture *f = *st;
    cf_record r = judge_token(f, 0, f->m.cfg.text.vocab_size, 1.0);
    assert_int_equal(r.result, CF_FAIL);
    assert_non_null(strstr(r.msg, "outside the vocabulary"));
}

/* A golden without tie evidence (M3-VEC-11): the first differing token stays a
 * Fail even within any tolerance, and the record says the tie could not be settled. */
static void test_no_evidence(void **st)
{
    fixture *f = *st;
    int32_t alt;
    double margin, mx;
    step_runner_up(f, 0, &alt, &margin, &mx);
    f->use_ev = 0;
    cf_record r = judge_token(f, 0, alt, 1.0);
    f->use_ev = 1;
    assert_int_equal(r.result, CF_FAIL);
    assert_int_equal(r.no_evidence, 1);
    assert_non_null(strstr(r.msg, "no tie evidence"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_token_tie),
        cmocka_unit_test(test_last_token_tie),
        cmocka_unit_test(test_token_outside_vocabulary),
        cmocka_unit_test(test_no_evidence),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
