/* test_rope.c — partial rotate-half RoPE. Spec: M3-ROPE-1, M3-ROPE-2, M3-ROPE-3, M3-NUM-BF16-2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "rope.h"

static uint64_t rng = 99;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* rotary_dim 4, theta 1e4: inv_freq = (1, 0.01). */
static void test_table(void **st)
{
    (void)st;
    float c[2], s[2];
    m3_rope_table(c, s, 0, 4, 1e4, M3_MODE_FP32);
    assert_true(c[0] == 1.0f && c[1] == 1.0f && s[0] == 0.0f && s[1] == 0.0f);
    m3_rope_table(c, s, 3, 4, 1e4, M3_MODE_FP32);
    assert_true(c[0] == (float)cos(3.0) && s[0] == (float)sin(3.0));
    float a1 = 3.0f * (float)0.01; /* fp32 angle */
    assert_true(c[1] == (float)cos((double)a1) && s[1] == (float)sin((double)a1));
    /* fp32(pos): 2^24 + 1 is not representable and reads as 2^24 */
    float c2[2], s2[2];
    m3_rope_table(c, s, 16777217, 4, 1e4, M3_MODE_FP32);
    m3_rope_table(c2, s2, 16777216, 4, 1e4, M3_MODE_FP32);
    assert_memory_equal(c, c2, sizeof c);
    assert_memory_equal(s, s2, sizeof s);
    /* bf16 tables are the fp32 tables rounded */
    float cb[2], sb[2];
    m3_rope_table(c, s, 12345, 4, 1e4, M3_MODE_FP32);
    m3_rope_table(cb, sb, 12345, 4, 1e4, M3_MODE_BF16);
    for (int i = 0; i < 2; i++)
        assert_true(cb[i] == m3_round_bf16(c[i]) && sb[i] == m3_round_bf16(s[i]));
}

/* pairs are (j, j + rd/2), not (2j, 2j+1); the tail is bit-identical */
static void test_pairs_and_tail(void **st)
{
    (void)st;
    enum { HD = 8, RD = 4 };
    float c[2], s[2];
    m3_rope_table(c, s, 5, RD, 1e4, M3_MODE_FP32);
    float x[2 * HD] = {0};
    x[0] = 1.0f;      /* head 0: unit vector on dim 0 */
    x[HD + 1] = 1.0f; /* head 1: unit vector on dim 1 */
    for (int d = RD; d < HD; d++) {
        x[d] = frand();
        x[HD + d] = NAN;
    }
    float before[2 * HD];
    memcpy(before, x, sizeof x);
    m3_rope_apply(x, 2, HD, RD, c, s, M3_MODE_FP32);
    assert_true(x[0] == c[0] && x[2] == s[0] && x[1] == 0.0f && x[3] == 0.0f);
    assert_true(x[HD + 1] == c[1] && x[HD + 3] == s[1] && x[HD + 0] == 0.0f && x[HD + 2] == 0.0f);
    assert_memory_equal(x + RD, before + RD, (HD - RD) * sizeof(float));
    assert_memory_equal(x + HD + RD, before + HD + RD, (HD - RD) * sizeof(float));
}

static void test_identity_and_norm(void **st)
{
    (void)st;
    enum { NH = 3, HD = 16, RD = 12 };
    float c[RD / 2], s[RD / 2], x[NH * HD], x0[NH * HD];
    for (int i = 0; i < NH * HD; i++)
        x0[i] = m3_round_bf16(frand());
    /* pos 0 is the identity, in both modes */
    for (int mode = 0; mode < 2; mode++) {
        m3_rope_table(c, s, 0, RD, 5e6, (m3_mode)mode);
        memcpy(x, x0, sizeof x);
        m3_rope_apply(x, NH, HD, RD, c, s, (m3_mode)mode);
        assert_memory_equal(x, x0, sizeof x);
    }
    /* rotation preserves each pair's norm; bf16 results are bf16 values near fp32 */
    m3_rope_table(c, s, 777, RD, 5e6, M3_MODE_FP32);
    memcpy(x, x0, sizeof x);
    m3_rope_apply(x, NH, HD, RD, c, s, M3_MODE_FP32);
    float xb[NH * HD], cb[RD / 2], sb[RD / 2];
    m3_rope_table(cb, sb, 777, RD, 5e6, M3_MODE_BF16);
    memcpy(xb, x0, sizeof xb);
    m3_rope_apply(xb, NH, HD, RD, cb, sb, M3_MODE_BF16);
    for (int h = 0; h < NH; h++)
        for (int j = 0; j < RD / 2; j++) {
            int a = h * HD + j, b = a + RD / 2;
            double n0 = (double)x0[a] * x0[a] + (double)x0[b] * x0[b];
            double n1 = (double)x[a] * x[a] + (double)x[b] * x[b];
            assert_true(fabs(n1 - n0) <= 1e-6 * (1.0 + n0));
            assert_true(xb[a] == m3_round_bf16(xb[a]) && xb[b] == m3_round_bf16(xb[b]));
            assert_true(fabs(xb[a] - x[a]) < 0.02 && fabs(xb[b] - x[b]) < 0.02);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_pairs_and_tail),
        cmocka_unit_test(test_identity_and_norm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
