/* test_norm.c — Gemma RMSNorm. Spec: M3-NORM-1, M3-ATTN-QKNORM-1, M3-NUM-BF16-2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "norm.h"

/* x = (2,2,2,2): mean(x^2) = 4, rsqrt = 0.5 exactly (eps 0), so y = 1 + w.
 * A Llama-style x_hat * w would give (0, 2, -2, 1) instead. */
static void test_gemma_one_plus_w(void **st)
{
    (void)st;
    float x[4] = {2, 2, 2, 2}, w[4] = {0, 1, -1, 0.5f}, y[4];
    m3_vec W = {w, M3_F32, 4};
    m3_rmsnorm(y, x, &W, 4, 0.0f, M3_MODE_FP32);
    assert_true(y[0] == 1.0f && y[1] == 2.0f && y[2] == 0.0f && y[3] == 1.5f);
}

/* x = (3, -4): mean(x^2) = 12.5; with eps 0.0 and zero weights y = x / sqrt(12.5). */
static void test_known_vector(void **st)
{
    (void)st;
    float x[2] = {3, -4}, w[2] = {0, 0}, y[2];
    m3_vec W = {w, M3_F32, 2};
    m3_rmsnorm(y, x, &W, 2, 0.0f, M3_MODE_FP32);
    assert_true(fabs(y[0] - 3.0 / sqrt(12.5)) < 1e-6);
    assert_true(fabs(y[1] + 4.0 / sqrt(12.5)) < 1e-6);
    /* eps enters under the root: x = 0 gives 0, not NaN */
    float z[2] = {0, 0};
    m3_rmsnorm(y, z, &W, 2, 1e-6f, M3_MODE_FP32);
    assert_true(y[0] == 0.0f && y[1] == 0.0f);
    /* eps = 1: x = (1, 1) -> 1 / sqrt(2) */
    float o[2] = {1, 1};
    m3_rmsnorm(y, o, &W, 2, 1.0f, M3_MODE_FP32);
    assert_true(fabs(y[0] - 1.0 / sqrt(2.0)) < 1e-6);
}

static void test_bf16_weight_alias_and_mode(void **st)
{
    (void)st;
    enum { N = 64 };
    float x[N], y32[N], yb[N], wf[N];
    uint16_t wb[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 7) * 0.37f - 1.1f;
        wb[i] = m3_f32_to_bf16((float)(i % 5) * 0.1f - 0.2f);
        wf[i] = m3_bf16_to_f32(wb[i]);
    }
    m3_vec Wb = {wb, M3_BF16, N}, Wf = {wf, M3_F32, N};
    m3_rmsnorm(y32, x, &Wf, N, 1e-6f, M3_MODE_FP32);
    float t[N];
    m3_rmsnorm(t, x, &Wb, N, 1e-6f, M3_MODE_FP32);
    assert_memory_equal(t, y32, sizeof t); /* dtype of w is only widened */
    memcpy(t, x, sizeof t);
    m3_rmsnorm(t, t, &Wf, N, 1e-6f, M3_MODE_FP32); /* y aliases x */
    assert_memory_equal(t, y32, sizeof t);
    m3_rmsnorm(yb, x, &Wf, N, 1e-6f, M3_MODE_BF16);
    for (int i = 0; i < N; i++) /* rounded once, at the end */
        assert_true(yb[i] == m3_round_bf16(y32[i]));
}

/* Each head is normed on its own with the shared weight. */
static void test_heads(void **st)
{
    (void)st;
    float x[6] = {2, 2, 2, 10, 10, 10}, w[3] = {0, 1, -0.5f};
    m3_vec W = {w, M3_F32, 3};
    m3_rmsnorm_heads(x, 2, 3, &W, 0.0f, M3_MODE_FP32);
    for (int h = 0; h < 2; h++) {
        assert_true(x[3 * h + 0] == 1.0f);
        assert_true(x[3 * h + 1] == 2.0f);
        assert_true(x[3 * h + 2] == 0.5f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma_one_plus_w),
        cmocka_unit_test(test_known_vector),
        cmocka_unit_test(test_bf16_weight_alias_and_mode),
        cmocka_unit_test(test_heads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
