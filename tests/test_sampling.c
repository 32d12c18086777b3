/* test_sampling.c — greedy, temperature, top-k, top-p, seeded draws.
 * Spec: M3-SAMPLE-1, M3-SAMPLE-2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "sampling.h"

/* best first, lower index on ties, k clipped to V */
static void test_top_ids(void **st)
{
    (void)st;
    const float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 3.0f, 0.5f};
    int32_t out[8];
    assert_int_equal(m3_top_ids(l, 6, 5, out), 5);
    const int32_t want[5] = {4, 1, 3, 0, 5};
    for (int j = 0; j < 5; j++)
        assert_int_equal(out[j], want[j]);
    assert_int_equal(m3_top_ids(l, 3, 8, out), 3);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 0);
    assert_int_equal(out[2], 2);
}

static void test_argmax_ties(void **st)
{
    (void)st;
    float l[5] = {1, 3, 2, 3, 3};
    assert_int_equal(m3_argmax(l, 5), 1);
    m3_sampler sp;
    assert_int_equal(m3_sampler_init(&sp, 5, 1, 1.0f, 0, 1.0f, 42), 0);
    for (int i = 0; i < 10; i++)
        assert_int_equal(m3_sample(&sp, l), 1);
    m3_sampler_free(&sp);
}

/* splitmix64(seed 0) first output is the published 0xE220A8397B1DCDAF. */
static void test_seeding(void **st)
{
    (void)st;
    m3_sampler sp;
    assert_int_equal(m3_sampler_init(&sp, 4, 0, 1.0f, 0, 1.0f, 0), 0);
    assert_true(sp.s[0] == 0xE220A8397B1DCDAFull);
    double sum = 0;
    for (int i = 0; i < 10000; i++) {
        double u = m3_sampler_uniform(&sp);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
    }
    assert_true(fabs(sum / 10000 - 0.5) < 0.02);
    m3_sampler_free(&sp);
}

static void test_topk1_and_topp_tiny_are_greedy(void **st)
{
    (void)st;
    enum { V = 50 };
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)((i * 37) % 11) * 0.3f; /* maximum 3.0 first at i = 10 */
    int32_t g = m3_argmax(l, V);
    m3_sampler a, b;
    assert_int_equal(m3_sampler_init(&a, V, 0, 1.5f, 1, 1.0f, 5), 0);
    assert_int_equal(m3_sampler_init(&b, V, 0, 1.5f, 0, 1e-6f, 5), 0);
    for (int i = 0; i < 200; i++) {
        assert_int_equal(m3_sample(&a, l), g);
        assert_int_equal(m3_sample(&b, l), g);
    }
    m3_sampler_free(&a);
    m3_sampler_free(&b);
}

static void test_same_seed_same_sequence(void **st)
{
    (void)st;
    enum { V = 100 };
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = sinf((float)i);
    m3_sampler a, b, c;
    assert_int_equal(m3_sampler_init(&a, V, 0, 1.0f, 40, 0.95f, 1234), 0);
    assert_int_equal(m3_sampler_init(&b, V, 0, 1.0f, 40, 0.95f, 1234), 0);
    assert_int_equal(m3_sampler_init(&c, V, 0, 1.0f, 40, 0.95f, 1235), 0);
    int differ = 0;
    for (int i = 0; i < 100; i++) {
        int32_t ta = m3_sample(&a, l), tb = m3_sample(&b, l), tc = m3_sample(&c, l);
        assert_int_equal(ta, tb);
        differ += ta != tc;
    }
    assert_true(differ > 0);
    m3_sampler_free(&a);
    m3_sampler_free(&b);
    m3_sampler_free(&c);
}

/* p = (0.5, 0.3, 0.2): N draws; frequencies within 0.01 (> 6 standard deviations). */
static void freqs(float temp, int top_k, float top_p, double f[3])
{
    float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    m3_sampler sp;
    assert_int_equal(m3_sampler_init(&sp, 3, 0, temp, top_k, top_p, 2024), 0);
    int n[3] = {0, 0, 0};
    const int N = 100000;
    for (int i = 0; i < N; i++)
        n[m3_sample(&sp, l)]++;
    for (int i = 0; i < 3; i++)
        f[i] = (double)n[i] / N;
    m3_sampler_free(&sp);
}

static void test_frequencies(void **st)
{
    (void)st;
    double f[3];
    freqs(1.0f, 0, 1.0f, f);
    assert_true(fabs(f[0] - 0.5) < 0.01 && fabs(f[1] - 0.3) < 0.01 && fabs(f[2] - 0.2) < 0.01);
    /* top-k 2 renormalises the first two: 0.625, 0.375 */
    freqs(1.0f, 2, 1.0f, f);
    assert_true(fabs(f[0] - 0.625) < 0.01 && fabs(f[1] - 0.375) < 0.01 && f[2] == 0.0);
    /* top-p 0.7: cumulative 0.5 < 0.7 <= 0.8 keeps two */
    freqs(1.0f, 0, 0.7f, f);
    assert_true(fabs(f[0] - 0.625) < 0.01 && fabs(f[1] - 0.375) < 0.01 && f[2] == 0.0);
    /* top-p 0.45 keeps only the first */
    freqs(1.0f, 0, 0.45f, f);
    assert_true(f[0] == 1.0);
    /* temperature 2: p ~ sqrt(p) normalised */
    freqs(2.0f, 0, 1.0f, f);
    double z = sqrt(0.5) + sqrt(0.3) + sqrt(0.2);
    assert_true(fabs(f[0] - sqrt(0.5) / z) < 0.01 && fabs(f[2] - sqrt(0.2) / z) < 0.01);
}

/* The full sort (top_k 0) and the top-k selection agree on order, ties included:
 * odd tokens have probability exactly 0, even ones share quantised logits. */
static void test_sort_paths_agree(void **st)
{
    (void)st;
    enum { V = 1000 };
    static float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (i % 2) ? -1e30f : (float)((i * 7919) % 13) * 0.25f;
    m3_sampler a, b;
    assert_int_equal(m3_sampler_init(&a, V, 0, 0.7f, 0, 0.9f, 77), 0);
    assert_int_equal(m3_sampler_init(&b, V, 0, 0.7f, V / 2, 0.9f, 77), 0);
    for (int i = 0; i < 500; i++) {
        int32_t ta = m3_sample(&a, l);
        assert_int_equal(ta, m3_sample(&b, l));
        assert_int_equal(ta % 2, 0);
    }
    m3_sampler_free(&a);
    m3_sampler_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argmax_ties),
        cmocka_unit_test(test_top_ids),
        cmocka_unit_test(test_seeding),
        cmocka_unit_test(test_topk1_and_topp_tiny_are_greedy),
        cmocka_unit_test(test_same_seed_same_sequence),
        cmocka_unit_test(test_frequencies),
        cmocka_unit_test(test_sort_paths_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
