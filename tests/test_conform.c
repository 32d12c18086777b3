/* test_conform.c — the conformance kit's own tests ("test the tester").
 *
 * Metrics on hand-made arrays (values worked out by hand in the comments),
 * set comparison with ties and forced candidates, glob matching, tolerance
 * and case.json validation errors, sha256, row concatenation, and the
 * judge + localisation on small synthetic dumps.
 * Spec: M3-TOL-*, M3-VEC-*, M3-DUMP-6/7, M3-MSA-SELECT-*, M3-MOE-ROUTER-2.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "conform.h"

/* ---- metrics ----------------------------------------------------------------------- */
static void test_metrics_identical(void **st)
{
    (void)st;
    float a[4] = {1, -2, 3, 0.5f};
    cf_metrics m;
    cf_metrics_compute(&m, a, a, 4);
    assert_true(m.nmse == 0.0);
    assert_true(m.max_abs == 0.0);
    assert_true(fabs(m.cos - 1.0) < 1e-12);
    assert_int_equal(m.n_nan, 0);
}

static void test_metrics_hand(void **st)
{
    (void)st;
    /* ref (3, 4), out (3, 5): diff (0, 1); sum d^2 = 1, sum ref^2 = 25 -> nmse 0.04;
     * max-abs 1; max-rel 1/4; cos = (9 + 20) / (5 * sqrt(34)). */
    float ref[2] = {3, 4}, out[2] = {3, 5};
    cf_metrics m;
    cf_metrics_compute(&m, out, ref, 2);
    assert_true(fabs(m.nmse - 0.04) < 1e-12);
    assert_true(fabs(m.max_abs - 1.0) < 1e-12);
    assert_true(fabs(m.max_rel - 0.25) < 1e-12);
    assert_true(fabs(m.cos - 29.0 / (5.0 * sqrt(34.0))) < 1e-12);
    assert_int_equal(m.worst[0], 1);
}

static void test_metrics_zero_ref(void **st)
{
    (void)st;
    float z[3] = {0, 0, 0}, o[3] = {0, 1e-3f, 0};
    cf_metrics m;
    cf_metrics_compute(&m, z, z, 3);
    assert_true(m.nmse == 0.0);
    assert_true(m.cos == 1.0);
    cf_metrics_compute(&m, o, z, 3);
    assert_true(isinf(m.nmse));
    assert_true(m.cos == 0.0);
}

static void test_metrics_nonfinite(void **st)
{
    (void)st;
    float ref[5] = {1, -INFINITY, INFINITY, 2, 3};
    float ok[5] = {1, -INFINITY, INFINITY, 2, 3};
    float nan_out[5] = {1, -INFINITY, INFINITY, NAN, 3};
    float sign_out[5] = {1, INFINITY, INFINITY, 2, 3};
    float inf_out[5] = {1, -INFINITY, INFINITY, 2, INFINITY};
    cf_metrics m;
    cf_metrics_compute(&m, ok, ref, 5); /* matching infinities are excluded from the metrics */
    assert_int_equal(m.n_inf_bad, 0);
    assert_true(m.nmse == 0.0);
    cf_metrics_compute(&m, nan_out, ref, 5);
    assert_int_equal(m.n_nan, 1);
    assert_int_equal(m.first_bad, 3);
    cf_metrics_compute(&m, sign_out, ref, 5);
    assert_int_equal(m.n_inf_bad, 1);
    assert_int_equal(m.first_bad, 1);
    cf_metrics_compute(&m, inf_out, ref, 5);
    assert_int_equal(m.n_inf_bad, 1);
    assert_int_equal(m.first_bad, 4);
    float nan_ref[2] = {NAN, 1}, o2[2] = {0, 1};
    cf_metrics_compute(&m, o2, nan_ref, 2);
    assert_int_equal(m.n_ref_nan, 1);
}

static void test_metrics_worst_order(void **st)
{
    (void)st;
    float ref[6] = {0, 0, 0, 0, 0, 10};
    float out[6] = {0.1f, 0.5f, 0.3f, 0.05f, 0.4f, 10};
    cf_metrics m;
    cf_metrics_compute(&m, out, ref, 6);
    assert_int_equal(m.worst[0], 1);
    assert_int_equal(m.worst[1], 4);
    assert_int_equal(m.worst[2], 2);
    assert_int_equal(m.worst[3], 0);
}

/* ---- sets ----------------------------------------------------------------------------- */
static void test_sets_equal_any_order(void **st)
{
    (void)st;
    int32_t ref[2 * 4] = {3, 1, 2, -1, 0, 1, -1, -1};
    int32_t out[2 * 4] = {1, 2, 3, -1, -1, 1, 0, -1}; /* same sets, other order and padding */
    cf_setstat s;
    cf_compare_sets(&s, out, ref, 2, 4, NULL, 0, 0);
    assert_int_equal(s.rows_equal, 2);
    assert_int_equal(s.rows_bad, 0);
}

static void test_sets_tie(void **st)
{
    (void)st;
    /* scores of 4 candidates; golden picks {0, 1}; port picks {0, 2}.
     * |s1 - s2| = 0.5e-4 * max|s| (= 1.0) -> within tie 1e-4, outside 1e-5. */
    float sc[4] = {1.0f, 0.5f, 0.49995f, 0.1f};
    int32_t ref[2] = {0, 1}, out[2] = {2, 0};
    cf_setstat s;
    cf_compare_sets(&s, out, ref, 1, 2, sc, 4, 1e-4);
    assert_int_equal(s.rows_tie, 1);
    assert_int_equal(s.rows_bad, 0);
    cf_compare_sets(&s, out, ref, 1, 2, sc, 4, 1e-5);
    assert_int_equal(s.rows_bad, 1);
    assert_int_equal(s.first_bad, 0);
    assert_non_null(strstr(s.why, "tie tolerance"));
    cf_compare_sets(&s, out, ref, 1, 2, NULL, 0, 1e-4); /* no scores: strict */
    assert_int_equal(s.rows_bad, 1);
}

static void test_sets_bad_rows(void **st)
{
    (void)st;
    float sc[4] = {INFINITY, 0.5f, 0.5f, -INFINITY}; /* 0 forced, 3 invisible */
    int32_t ref[2] = {0, 1};
    cf_setstat s;
    int32_t drop_forced[2] = {1, 2};
    cf_compare_sets(&s, drop_forced, ref, 1, 2, sc, 4, 1e-4);
    assert_int_equal(s.rows_bad, 1);
    int32_t invisible[2] = {0, 3};
    cf_compare_sets(&s, invisible, ref, 1, 2, sc, 4, 1e-4);
    assert_int_equal(s.rows_bad, 1);
    assert_non_null(strstr(s.why, "-inf"));
    int32_t dup[2] = {0, 0};
    cf_compare_sets(&s, dup, ref, 1, 2, sc, 4, 1e-4);
    assert_int_equal(s.rows_bad, 1);
    assert_non_null(strstr(s.why, "twice"));
    int32_t fewer[2] = {0, -1};
    cf_compare_sets(&s, fewer, ref, 1, 2, sc, 4, 1e-4);
    assert_int_equal(s.rows_bad, 1);
    int32_t range[2] = {0, 9};
    cf_compare_sets(&s, range, ref, 1, 2, sc, 4, 1e-4);
    assert_int_equal(s.rows_bad, 1);
    assert_non_null(strstr(s.why, "out of range"));
    int32_t tied[2] = {2, 0}; /* 1 and 2 tie exactly: accepted */
    cf_compare_sets(&s, tied, ref, 1, 2, sc, 4, 0);
    assert_int_equal(s.rows_tie, 1);
    assert_int_equal(s.rows_bad, 0);
}

/* ---- glob and tolerances -------------------------------------------------------- */
static void test_glob(void **st)
{
    (void)st;
    assert_true(cf_glob("model/*", "model/layers.3.attn.output"));
    assert_true(cf_glob("*/*", "rope/cos"));
    assert_false(cf_glob("*/*", "rope"));
    assert_true(cf_glob("model/layers.*.moe.scores", "model/layers.12.moe.scores"));
    assert_false(cf_glob("model/layers.*.moe.scores", "model/layers.1.moe.topk_weight"));
    assert_true(cf_glob("a?c", "abc"));
    assert_false(cf_glob("a?c", "ac"));
    assert_true(cf_glob("a\\*", "a*"));
    assert_false(cf_glob("a\\*", "ab"));
    assert_true(cf_glob("*", ""));
    assert_true(cf_glob("", ""));
    assert_false(cf_glob("", "x"));
    assert_true(cf_glob("*a*b*", "xxaxxbxx"));
    assert_false(cf_glob("*a*b", "xxaxxbxxc"));
}

static const char *k_tol =
    "{\"version\":1,\"profiles\":{\"fp32\":{\"tie_tolerance\":1e-4,\"rules\":["
    "{\"match\":\"model/logits\",\"nmse\":1e-9,\"max_abs\":1e-3,\"cos_min\":0.999999},"
    "{\"match\":\"*/*\",\"nmse\":\"0x1p-30\",\"max_abs\":1e-4}]}}}";

static void test_tol_parse(void **st)
{
    (void)st;
    cf_tolerances t;
    m3_err e = {{0}};
    assert_int_equal(cf_tol_parse(&t, k_tol, strlen(k_tol), "tol.json", &e), 0);
    const cf_profile *p = cf_tol_profile(&t, "fp32");
    assert_non_null(p);
    assert_null(cf_tol_profile(&t, "bf16"));
    assert_true(p->tie_tolerance == 1e-4);
    const cf_rule *r = cf_tol_match(p, "model/logits");
    assert_string_equal(r->match, "model/logits");
    r = cf_tol_match(p, "model/layers.0.output");
    assert_string_equal(r->match, "*/*");
    assert_true(r->nmse == ldexp(1.0, -30)); /* hex-float string read exactly */
    assert_true(r->cos_min < 0);             /* unchecked */
    cf_tol_free(&t);
}

static void expect_tol_error(const char *json, const char *needle)
{
    cf_tolerances t;
    m3_err e = {{0}};
    assert_int_equal(cf_tol_parse(&t, json, strlen(json), "tol.json", &e), -1);
    if (!strstr(e.msg, needle))
        fail_msg("message \"%s\" does not mention \"%s\"", e.msg, needle);
    assert_non_null(strstr(e.msg, "tol.json"));
}

static void test_tol_errors(void **st)
{
    (void)st;
    expect_tol_error("{", "not valid JSON");
    expect_tol_error("{\"profiles\":[]}", "profiles");
    expect_tol_error("{\"profiles\":{\"p\":{\"rules\":[]}}}", "tie_tolerance");
    expect_tol_error("{\"profiles\":{\"p\":{\"tie_tolerance\":0,\"rules\":[]}}}", "rules");
    expect_tol_error("{\"profiles\":{\"p\":{\"tie_tolerance\":0,\"rules\":[{\"match\":\"*\",\"max_abs\":1}]}}}",
                     "nmse");
    expect_tol_error("{\"profiles\":{\"p\":{\"tie_tolerance\":0,\"rules\":[{\"match\":\"*\",\"nmse\":-1,\"max_abs\":1}]}}}",
                     "negative");
    expect_tol_error("{\"profiles\":{\"p\":{\"tie_tolerance\":0,\"rules\":[{\"nmse\":1,\"max_abs\":1}]}}}",
                     "match");
    expect_tol_error("{\"profiles\":{\"p\":{\"tie_tolerance\":0,\"rules\":[{\"match\":\"*\",\"nmse\":1,\"max_abs\":1,\"cos_min\":2}]}}}",
                     "cos_min");
}

/* ---- case.json ----------------------------------------------------------------------- */
static void expect_case_error(const char *json, const char *needle)
{
    cf_case c;
    m3_err e = {{0}};
    assert_int_equal(cf_case_parse(&c, json, strlen(json), "vec/x", &e), -1);
    if (!strstr(e.msg, needle))
        fail_msg("message \"%s\" does not mention \"%s\"", e.msg, needle);
    assert_non_null(strstr(e.msg, "vec/x/case.json"));
}

static void test_case_valid(void **st)
{
    (void)st;
    const char *j = "{\"id\":\"model.tiny\",\"component\":\"model\",\"mode\":\"bf16\","
                    "\"params\":{\"chunks\":[3,5],\"max_new_tokens\":4,\"eps\":\"0x1.0c6f7ap-20\"},"
                    "\"files\":{\"inputs.safetensors\":\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}}";
    cf_case c;
    m3_err e = {{0}};
    assert_int_equal(cf_case_parse(&c, j, strlen(j), "vec/x", &e), 0);
    assert_string_equal(c.id, "model.tiny");
    assert_int_equal(c.mode, M3_MODE_BF16);
    assert_string_equal(c.profile, "bf16"); /* defaults to the mode */
    assert_int_equal(c.nchunks, 2);
    assert_int_equal(c.chunks[1], 5);
    assert_int_equal(c.max_new_tokens, 4);
    double v;
    assert_int_equal(cf_case_num(&c, "eps", &v, &e), 0);
    assert_true(v == strtod("0x1.0c6f7ap-20", NULL));
    assert_int_equal(cf_case_num_or(&c, "absent", 2.5, &v, &e), 0);
    assert_true(v == 2.5);
    assert_int_equal(cf_case_num(&c, "absent", &v, &e), -1);
    assert_non_null(strstr(e.msg, "params.absent"));
    cf_case_free(&c);
}

static void test_case_errors(void **st)
{
    (void)st;
    expect_case_error("not json", "not valid JSON");
    expect_case_error("[1]", "object");
    expect_case_error("{\"component\":\"rope\",\"mode\":\"fp32\"}", "\"id\"");
    expect_case_error("{\"id\":\"\",\"component\":\"rope\",\"mode\":\"fp32\"}", "empty");
    expect_case_error("{\"id\":\"a\",\"component\":\"conv\",\"mode\":\"fp32\"}", "unknown component");
    expect_case_error("{\"id\":\"a\",\"component\":\"rope\",\"mode\":\"fp8\"}", "mode");
    expect_case_error("{\"id\":7,\"component\":\"rope\",\"mode\":\"fp32\"}", "string");
    expect_case_error("{\"id\":\"a\",\"component\":\"rope\",\"mode\":\"fp32\",\"params\":[]}", "params");
    expect_case_error("{\"id\":\"a\",\"component\":\"rope\",\"mode\":\"fp32\",\"files\":{\"x\":\"abc\"}}",
                      "sha256");
    expect_case_error("{\"id\":\"a\",\"component\":\"rope\",\"mode\":\"fp32\",\"files\":{\"../x\":"
                      "\"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"}}",
                      "plain file name");
    expect_case_error("{\"id\":\"a\",\"component\":\"model\",\"mode\":\"fp32\",\"params\":{\"chunks\":[2,-1]}}",
                      "chunks");
    expect_case_error("{\"id\":\"a\",\"component\":\"model\",\"mode\":\"fp32\",\"params\":{\"max_new_tokens\":1.5}}",
                      "max_new_tokens");
    expect_case_error("{\"id\":\"a\",\"component\":\"rope\",\"mode\":\"fp32\",\"clauses\":[1]}", "clauses");
}

static void test_sha256(void **st)
{
    (void)st;
    char path[] = "/tmp/m3-test-conform-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "abc", 3), 3);
    close(fd);
    char hex[65];
    m3_err e = {{0}};
    assert_int_equal(cf_sha256_file(path, hex, &e), 0);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    unlink(path);
    assert_int_equal(cf_sha256_file(path, hex, &e), -1);
    assert_non_null(strstr(e.msg, path));
}

/* ---- tensor sets --------------------------------------------------------------------- */
static void test_append_rows(void **st)
{
    (void)st;
    cf_tset a = {0}, b = {0};
    m3_err e = {{0}};
    int64_t s1[3] = {2, 1, 2}, s2[3] = {2, 2, 2}, r1[2] = {1, 3}, r2[2] = {2, 3};
    int32_t bi1[4] = {0, 1, 10, 11}, bi2[8] = {2, 3, 4, 5, 12, 13, 14, 15};
    float x1[3] = {1, 2, 3}, x2[6] = {4, 5, 6, 7, 8, 9};
    assert_int_equal(cf_tset_add_i(&a, "layers.0.attn.block_indices", 3, s1, bi1, &e), 0);
    assert_int_equal(cf_tset_add_f(&a, "x", 2, r1, x1, &e), 0);
    assert_int_equal(cf_tset_add_i(&b, "layers.0.attn.block_indices", 3, s2, bi2, &e), 0);
    assert_int_equal(cf_tset_add_f(&b, "x", 2, r2, x2, &e), 0);
    assert_int_equal(cf_tset_append_rows(&a, &b, &e), 0);
    const cf_tensor *t = cf_tset_get(&a, "layers.0.attn.block_indices");
    assert_int_equal(t->shape[1], 3); /* rows are the second axis of [G, T, K] */
    int32_t want[12] = {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15};
    assert_memory_equal(t->i, want, sizeof want);
    t = cf_tset_get(&a, "x");
    assert_int_equal(t->shape[0], 3);
    assert_true(t->f[0] == 1 && t->f[3] == 4 && t->f[8] == 9);
    cf_tset_free(&a);
    cf_tset_free(&b);
}

/* ---- judge and localisation ------------------------------------------------------ */
static cf_tolerances g_tol;

static int setup_tol(void **st)
{
    (void)st;
    m3_err e = {{0}};
    return cf_tol_parse(&g_tol, k_tol, strlen(k_tol), "tol.json", &e);
}

static int teardown_tol(void **st)
{
    (void)st;
    cf_tol_free(&g_tol);
    return 0;
}

static void add_rows(cf_tset *s, const char *name, float v, float bump)
{
    float x[4] = {v, v + 1, v + 2, v + 3 + bump};
    int64_t sh[2] = {2, 2};
    m3_err e = {{0}};
    assert_int_equal(cf_tset_add_f(s, name, 2, sh, x, &e), 0);
}

static void model_case(cf_case *c)
{
    const char *j = "{\"id\":\"t\",\"component\":\"model\",\"mode\":\"fp32\"}";
    m3_err e = {{0}};
    assert_int_equal(cf_case_parse(c, j, strlen(j), "vec/t", &e), 0);
}

static void test_localise_first_divergence(void **st)
{
    (void)st;
    cf_case c;
    model_case(&c);
    cf_tset g = {0}, o = {0};
    /* golden; the port is exact up to layers.0.attn.output, which is off,
     * and everything after it is off too */
    const char *names[] = {"embeddings", "layers.0.input", "layers.0.attn_norm", "layers.0.attn.output",
                           "layers.0.post_attn", "layers.0.output", "layers.1.input", "final_norm",
                           "logits"};
    for (int i = 0; i < 9; i++) {
        add_rows(&g, names[i], (float)i, 0);
        add_rows(&o, names[i], (float)i, i >= 3 ? 1.0f : 0.0f);
    }
    cf_judge_ctx ctx = {&c, cf_tol_profile(&g_tol, "fp32"), NULL, NULL, "", 0, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    cf_report r;
    memset(&r, 0, sizeof r);
    m3_err e = {{0}};
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_int_equal(r.result, CF_FAIL);
    assert_true(r.first_fail >= 0);
    const cf_record *f = &r.rec[r.first_fail];
    assert_string_equal(f->tensor, "layers.0.attn.output");
    assert_string_equal(f->component, "attention");
    assert_int_equal(f->layer, 0);
    for (int i = 0; i < r.nrec; i++) { /* forward order and downstream marking */
        if (i > 0)
            assert_true(r.rec[i - 1].order < r.rec[i].order);
        assert_int_equal(r.rec[i].downstream, i > r.first_fail);
    }
    assert_string_equal(r.rec[r.nrec - 1].tensor, "logits");
    cf_report_free(&r);

    /* teacher-forced: layer 1's input is exact again, so a fault there is a
     * separate first failure in its own group, not downstream */
    cf_tset_free(&o);
    for (int i = 0; i < 9; i++)
        add_rows(&o, names[i], (float)i, (i == 3 || i == 7) ? 1.0f : 0.0f);
    ctx.teacher_forced = 1;
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    int firsts = 0;
    for (int i = 0; i < r.nrec; i++)
        firsts += r.rec[i].result == CF_FAIL && !r.rec[i].downstream;
    assert_int_equal(firsts, 2); /* layers.0.attn.output and final_norm */
    cf_report_free(&r);
    cf_tset_free(&g);
    cf_tset_free(&o);
    cf_case_free(&c);
}

static void test_missing_and_capabilities(void **st)
{
    (void)st;
    cf_case c;
    model_case(&c);
    cf_tset g = {0}, o = {0};
    m3_err e = {{0}};
    add_rows(&g, "logits", 1, 0);
    add_rows(&o, "logits", 1, 0);
    add_rows(&g, "eagle3.aux", 1, 0);
    int32_t toks[3] = {5, 6, 7};
    int64_t n3[1] = {3};
    assert_int_equal(cf_tset_add_i(&g, "greedy_tokens", 1, n3, toks, &e), 0);
    cf_judge_ctx ctx = {&c, cf_tol_profile(&g_tol, "fp32"), NULL, NULL, "eagle3", 0, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    cf_report r;
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_int_equal(r.result, CF_FAIL); /* greedy missing, not declared */
    assert_string_equal(r.rec[r.first_fail].tensor, "greedy_tokens");
    for (int i = 0; i < r.nrec; i++)
        if (strcmp(r.rec[i].tensor, "eagle3.aux") == 0)
            assert_int_equal(r.rec[i].result, CF_NOT_SUPPORTED);
    cf_report_free(&r);
    /* declaring greedy too makes the dump conform; wrong tokens fail exactly */
    ctx.unsupported = "eagle3, greedy";
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_true(cf_result_conforms(r.result));
    cf_report_free(&r);
    int32_t bad[3] = {5, 6, 8};
    assert_int_equal(cf_tset_add_i(&o, "greedy_tokens", 1, n3, bad, &e), 0);
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_int_equal(r.result, CF_FAIL);
    assert_non_null(strstr(r.rec[r.first_fail].msg, "element 2"));
    cf_report_free(&r);
    cf_tset_free(&g);
    cf_tset_free(&o);
    cf_case_free(&c);
}

static void test_warning_and_shape(void **st)
{
    (void)st;
    cf_case c;
    const char *j = "{\"id\":\"n\",\"component\":\"rmsnorm\",\"mode\":\"fp32\"}";
    m3_err e = {{0}};
    assert_int_equal(cf_case_parse(&c, j, strlen(j), "vec/n", &e), 0);
    /* rule */ /* nmse 2^-30 ~ 9.3e-10: diff 1e-4 on |ref| ~ 1 gives nmse ~ 2.5e-9 ... */
    float ref[4] = {1, 1, 1, 1}, near[4] = {1, 1, 1, 1.00005f}, far[4] = {1, 1, 1, 1.001f};
    int64_t sh[1] = {4}, sh2[2] = {2, 2};
    cf_tset g = {0}, o = {0};
    assert_int_equal(cf_tset_add_f(&g, "y", 1, sh, ref, &e), 0);
    /* near: d = 5e-5, nmse = 2.5e-9 / 4 = 6.25e-10 <= 9.3e-10 but > 9.3e-11: QualityWarning;
     * max-abs 5e-5 <= 1e-4 */
    assert_int_equal(cf_tset_add_f(&o, "y", 1, sh, near, &e), 0);
    cf_judge_ctx ctx = {&c, cf_tol_profile(&g_tol, "fp32"), NULL, NULL, "", 0, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    cf_report r;
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_int_equal(r.result, CF_WARNING);
    assert_true(cf_result_conforms(r.result));
    cf_report_free(&r);
    assert_int_equal(cf_tset_add_f(&o, "y", 1, sh, far, &e), 0); /* nmse 2.5e-7: Fail */
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_int_equal(r.result, CF_FAIL);
    assert_non_null(strstr(r.rec[0].msg, "NMSE"));
    cf_report_free(&r);
    assert_int_equal(cf_tset_add_f(&o, "y", 2, sh2, ref, &e), 0); /* same numbers, wrong shape */
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_int_equal(r.result, CF_FAIL);
    assert_non_null(strstr(r.rec[0].msg, "shape [2,2], expected [4]"));
    cf_report_free(&r);
    cf_tset_free(&g);
    cf_tset_free(&o);
    cf_case_free(&c);
}

static void test_expert_ties_in_judge(void **st)
{
    (void)st;
    /* router case: golden scores + bias decide whether a different expert set is a tie */
    cf_case c;
    const char *j = "{\"id\":\"r\",\"component\":\"router\",\"mode\":\"fp32\",\"params\":{\"topk\":1}}";
    m3_err e = {{0}};
    assert_int_equal(cf_case_parse(&c, j, strlen(j), "vec/r", &e), 0);
    cf_tset g = {0}, o = {0}, aux = {0};
    int64_t s1[2] = {1, 1}, s3[2] = {1, 3}, b3[1] = {3};
    int32_t gi[1] = {0}, oi[1] = {2};
    float w[1] = {1}, scores[3] = {0.6f, 0.1f, 0.5f}, bias[3] = {0.0f, 0.0f, 0.10001f};
    assert_int_equal(cf_tset_add_i(&g, "topk_index", 2, s1, gi, &e), 0);
    assert_int_equal(cf_tset_add_f(&g, "topk_weight", 2, s1, w, &e), 0);
    assert_int_equal(cf_tset_add_f(&g, "scores", 2, s3, scores, &e), 0);
    assert_int_equal(cf_tset_add_f(&aux, "bias", 1, b3, bias, &e), 0);
    assert_int_equal(cf_tset_add_i(&o, "topk_index", 2, s1, oi, &e), 0);
    assert_int_equal(cf_tset_add_f(&o, "topk_weight", 2, s1, w, &e), 0);
    assert_int_equal(cf_tset_add_f(&o, "scores", 2, s3, scores, &e), 0);
    /* biased: 0.6 vs 0.60001 -> gap 1e-5 <= 1e-4 * 0.60001: a tie */
    cf_judge_ctx ctx = {&c, cf_tol_profile(&g_tol, "fp32"), NULL, &aux, "", 0, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    cf_report r;
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_true(cf_result_conforms(r.result));
    cf_report_free(&r);
    /* without the bias the gap is 0.1: a real difference, localised to the router */
    cf_tset_free(&aux);
    memset(&r, 0, sizeof r);
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_int_equal(r.result, CF_FAIL);
    assert_string_equal(r.rec[r.first_fail].tensor, "topk_index");
    assert_string_equal(r.rec[r.first_fail].component, "router");
    assert_int_equal(r.rec[r.first_fail].no_evidence, 0);
    cf_report_free(&r);
    /* a golden without tie evidence (M3-VEC-11): judged strictly, and the record says so */
    memset(&r, 0, sizeof r);
    ctx.evidence = NULL;
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    assert_int_equal(r.result, CF_FAIL);
    assert_int_equal(r.rec[r.first_fail].no_evidence, 1);
    assert_non_null(strstr(r.rec[r.first_fail].msg, "no tie evidence"));
    cf_report_free(&r);
    cf_tset_free(&g);
    cf_tset_free(&o);
    cf_case_free(&c);
}

/* ---- row subsets, selectors, slices (M3-DUMP-10..12) ------------------------------ */
static void test_rows_select(void **st)
{
    (void)st;
    unsigned char w[40];
    m3_err e = {{0}};
    /* block boundaries +-1 (block 8), 20..24, the last 3 */
    assert_int_equal(cf_rows_select("*blocks~1, 20:24,-3:", 40, 8, "c/case.json", w, &e), 0);
    const int want[] = {7, 8, 9, 15, 16, 17, 20, 21, 22, 23, 24, 25, 31, 32, 33, 37, 38, 39};
    int n = 0;
    for (int p = 0; p < 40; p++)
        if (w[p]) {
            assert_true(n < 18);
            assert_int_equal(p, want[n++]);
        }
    assert_int_equal(n, 18);
    assert_int_equal(cf_rows_select("5,-1,:2", 10, 0, "c", w, &e), 0);
    assert_true(w[0] && w[1] && w[5] && w[9] && !w[2]);
    const char *bad[] = {"", "x", "1,,2", "*blocks~1", "10", "-11", "*0", "1:2:3", "*3~", NULL};
    for (int k = 0; bad[k]; k++)
        assert_int_equal(cf_rows_select(bad[k], 10, 0, "c/case.json", w, &e), -1);
    assert_non_null(strstr(e.msg, "c/case.json"));
}

static void test_layer_range_and_jobs(void **st)
{
    (void)st;
    int a, b, j;
    m3_err e = {{0}};
    assert_int_equal(cf_parse_layers("3-7", 60, &a, &b, &e), 0);
    assert_true(a == 3 && b == 7);
    assert_int_equal(cf_parse_layers("59", 60, &a, &b, &e), 0);
    assert_true(a == 59 && b == 59);
    const char *bad[] = {"3-60", "60", "7-3", "-1", "a-b", "3-", "3-4x", "", NULL};
    for (int k = 0; bad[k]; k++)
        assert_int_equal(cf_parse_layers(bad[k], 60, &a, &b, &e), -1);
    assert_int_equal(cf_parse_layers("3-60", 60, &a, &b, &e), -1);
    assert_non_null(strstr(e.msg, "60 layers"));
    assert_int_equal(cf_parse_jobs("2", &j, &e), 0);
    assert_int_equal(j, 2);
    assert_int_equal(cf_parse_jobs("0", &j, &e), -1);
    assert_int_equal(cf_parse_jobs("1025", &j, &e), -1);
    assert_int_equal(cf_parse_jobs("2x", &j, &e), -1);
}

static void test_rows_validate_and_take(void **st)
{
    (void)st;
    cf_tset s = {0}, out = {0};
    m3_err e = {{0}};
    float x[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; /* [6, 2] golden rows = positions 0..5 */
    int64_t sh[2] = {6, 2}, rs[1] = {3};
    assert_int_equal(cf_tset_add_f(&s, "layers.0.output", 2, sh, x, &e), 0);
    int32_t pos[3] = {1, 4, 5};
    assert_int_equal(cf_tset_add_i(&s, "rows", 1, rs, pos, &e), 0);
    /* a full tensor with a row set present is fine; take rows 1, 4, 5 of it */
    assert_int_equal(cf_rows_validate(&s, "d.st", 6, &e), 0);
    assert_int_equal(cf_tensor_take_rows(&out, cf_tset_get(&s, "layers.0.output"), NULL, pos, 3, &e), 0);
    const cf_tensor *t = &out.t[0];
    assert_true(t->shape[0] == 3 && t->f[0] == 2 && t->f[2] == 8 && t->f[5] == 11);
    /* through a golden-side row set: position 4 is row 1 of the subset */
    int32_t p4 = 4;
    cf_tset o2 = {0};
    assert_int_equal(cf_tensor_take_rows(&o2, t, cf_tset_get(&s, "rows"), &p4, 1, &e), 0);
    assert_true(o2.t[0].f[0] == 8 && o2.t[0].f[1] == 9);
    int32_t p2 = 2;
    assert_int_equal(cf_tensor_take_rows(&o2, t, cf_tset_get(&s, "rows"), &p2, 1, &e), -1);
    /* out of range, duplicate, a row count that is neither */
    assert_int_equal(cf_rows_validate(&s, "d.st", 5, &e), -1);
    assert_non_null(strstr(e.msg, "d.st: tensor \"rows\" entry 2: position 5 is outside [0, 5)"));
    int32_t dup[3] = {1, 1, 5};
    assert_int_equal(cf_tset_add_i(&s, "rows", 1, rs, dup, &e), 0);
    assert_int_equal(cf_rows_validate(&s, "d.st", 6, &e), -1);
    assert_non_null(strstr(e.msg, "appears twice"));
    int64_t sh4[2] = {4, 2};
    assert_int_equal(cf_tset_add_i(&s, "rows", 1, rs, pos, &e), 0);
    assert_int_equal(cf_tset_add_f(&s, "layers.0.output", 2, sh4, x, &e), 0);
    assert_int_equal(cf_rows_validate(&s, "d.st", 6, &e), -1);
    assert_non_null(strstr(e.msg, "has 4 rows"));
    cf_tset_free(&s);
    cf_tset_free(&out);
    cf_tset_free(&o2);
}

static void test_slice_round_trip(void **st)
{
    (void)st;
    cf_case c;
    model_case(&c);
    cf_tset g = {0}, o = {0};
    const char *names[] = {"layers.0.input", "layers.0.output", "final_norm", "logits"};
    for (int i = 0; i < 4; i++) {
        add_rows(&g, names[i], (float)i, 0);
        add_rows(&o, names[i], (float)i, i == 1 ? 0.5f : 0.0f);
    }
    cf_judge_ctx ctx = {&c, cf_tol_profile(&g_tol, "fp32"), NULL, NULL, "", 1, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL};
    cf_report r;
    memset(&r, 0, sizeof r);
    m3_err e = {{0}};
    assert_int_equal(cf_judge(&r, &ctx, &o, &g, &e), 0);
    cf_slice sl;
    memset(&sl, 0, sizeof sl);
    snprintf(sl.identity, sizeof sl.identity, "%064d", 7);
    snprintf(sl.case_id, sizeof sl.case_id, "t");
    snprintf(sl.profile, sizeof sl.profile, "fp32");
    snprintf(sl.mode, sizeof sl.mode, "fp32");
    sl.from = 0;
    sl.to = 0;
    sl.L = 1;
    sl.head = 1;
    char path[] = "/tmp/m3-test-slice-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(cf_slice_write(path, &sl, &r, &e), 0);
    cf_slice back;
    assert_int_equal(cf_slice_load(&back, path, &g_tol, &e), 0);
    assert_int_equal(back.rep.nrec, r.nrec);
    for (int i = 0; i < r.nrec; i++) { /* every field the verdict uses, exactly */
        const cf_record *a = &r.rec[i], *b = &back.rep.rec[i];
        assert_string_equal(a->tensor, b->tensor);
        assert_int_equal(a->result, b->result);
        assert_int_equal(a->order, b->order);
        assert_true(a->m.nmse == b->m.nmse && a->m.max_abs == b->m.max_abs && a->m.cos == b->m.cos);
        assert_string_equal(a->msg, b->msg);
        assert_true(a->rule == b->rule);
    }
    cf_report m;
    assert_int_equal(cf_slice_merge(&m, &back, 1, &e), 0);
    assert_int_equal(m.result, r.result);
    assert_int_equal(m.first_fail >= 0, 1);
    assert_string_equal(m.rec[m.first_fail].tensor, "layers.0.output");
    cf_report_free(&m);
    cf_slice two[2] = {back, back};
    assert_int_equal(cf_slice_merge(&m, two, 2, &e), -1); /* layer 0 twice */
    assert_non_null(strstr(e.msg, "layer 0 is also in"));
    cf_slice_free(&back);
    unlink(path);
    cf_report_free(&r);
    cf_tset_free(&g);
    cf_tset_free(&o);
    cf_case_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_identical),
        cmocka_unit_test(test_metrics_hand),
        cmocka_unit_test(test_metrics_zero_ref),
        cmocka_unit_test(test_metrics_nonfinite),
        cmocka_unit_test(test_metrics_worst_order),
        cmocka_unit_test(test_sets_equal_any_order),
        cmocka_unit_test(test_sets_tie),
        cmocka_unit_test(test_sets_bad_rows),
        cmocka_unit_test(test_glob),
        cmocka_unit_test(test_tol_parse),
        cmocka_unit_test(test_tol_errors),
        cmocka_unit_test(test_case_valid),
        cmocka_unit_test(test_case_errors),
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_append_rows),
        cmocka_unit_test_setup_teardown(test_localise_first_divergence, setup_tol, teardown_tol),
        cmocka_unit_test_setup_teardown(test_missing_and_capabilities, setup_tol, teardown_tol),
        cmocka_unit_test_setup_teardown(test_warning_and_shape, setup_tol, teardown_tol),
        cmocka_unit_test_setup_teardown(test_expert_ties_in_judge, setup_tol, teardown_tol),
        cmocka_unit_test(test_rows_select),
        cmocka_unit_test(test_layer_range_and_jobs),
        cmocka_unit_test(test_rows_validate_and_take),
        cmocka_unit_test_setup_teardown(test_slice_round_trip, setup_tol, teardown_tol),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
