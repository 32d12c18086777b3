/* test_mlp.c — SwiGLU-OAI and the gated MLP. Spec: M3-MLP-SWIGLU-1, M3-MLP-DENSE-1, M3-NUM-BF16-2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "mlp.h"

static const float A = 1.702f, L = 7.0f, BETA = 1.0f;

static void test_swiglu_clamps(void **st)
{
    (void)st;
    const float ups[3] = {-0.3f, 0.0f, 2.5f};
    for (int i = 0; i < 3; i++) {
        float u = ups[i];
        /* gate clamped from above at exactly the limit */
        assert_true(m3_swiglu_oai(8.0f, u, A, L, BETA) == m3_swiglu_oai(7.0f, u, A, L, BETA));
        assert_true(m3_swiglu_oai(1e9f, u, A, L, BETA) == m3_swiglu_oai(7.0f, u, A, L, BETA));
        /* ... but not from below */
        assert_true(m3_swiglu_oai(-8.0f, u, A, L, BETA) != m3_swiglu_oai(-7.0f, u, A, L, BETA));
    }
    /* up clamped on both sides */
    assert_true(m3_swiglu_oai(1.0f, 8.0f, A, L, BETA) == m3_swiglu_oai(1.0f, 7.0f, A, L, BETA));
    assert_true(m3_swiglu_oai(1.0f, -8.0f, A, L, BETA) == m3_swiglu_oai(1.0f, -7.0f, A, L, BETA));
    assert_true(m3_swiglu_oai(1.0f, 6.5f, A, L, BETA) != m3_swiglu_oai(1.0f, 7.0f, A, L, BETA));
    /* + beta on up: up = -1 gives exactly 0; gate 0 gives 0 */
    assert_true(m3_swiglu_oai(3.0f, -1.0f, A, L, BETA) == 0.0f);
    assert_true(m3_swiglu_oai(0.0f, 5.0f, A, L, BETA) == 0.0f);
    /* hand value: gate 1, up 0 -> 1 * sigmoid(1.702) */
    assert_true(fabs(m3_swiglu_oai(1.0f, 0.0f, A, L, BETA) - 1.0 / (1.0 + exp(-1.702))) < 1e-6);
    /* gate 2, up 3, beta 0.5 -> 3.5 * 2 * sigmoid(3.404) */
    assert_true(fabs(m3_swiglu_oai(2.0f, 3.0f, A, L, 0.5f) - 7.0 / (1.0 + exp(-3.404))) < 1e-5);
    /* gate -8 is used as is */
    assert_true(fabs(m3_swiglu_oai(-8.0f, 0.0f, A, L, BETA) - (-8.0 / (1.0 + exp(13.616)))) < 1e-9);
}

/* gate = up-selector matrices: H = 2, I = 2; down = identity. */
static void test_mlp_small(void **st)
{
    (void)st;
    m3_text_config c;
    memset(&c, 0, sizeof c);
    c.swiglu_alpha = A;
    c.swiglu_limit = L;
    c.swiglu_beta = BETA;
    float gw[4] = {1, 0, 0, 1};    /* gate = x */
    float uw[4] = {0, 2, 0.5f, 0}; /* up = (2 x1, 0.5 x0) */
    float dw[4] = {1, 0, 0, 1};
    m3_mat G = {gw, M3_F32, 2, 2}, U = {uw, M3_F32, 2, 2}, D = {dw, M3_F32, 2, 2};
    float x[2] = {1.00390625f, -2.0f}; /* x0 = 1 + 2^-8: not a bf16 value */
    float y[2], scratch[4];
    m3_mlp(y, x, &G, &U, &D, &c, scratch, M3_MODE_FP32);
    assert_true(y[0] == m3_swiglu_oai(x[0], 2 * x[1], A, L, BETA));
    assert_true(y[1] == m3_swiglu_oai(x[1], 0.5f * x[0], A, L, BETA));
    /* bf16: gate/up outputs rounded (x0 -> 1.0), act rounded, down rounded */
    m3_mlp(y, x, &G, &U, &D, &c, scratch, M3_MODE_BF16);
    assert_true(y[0] == m3_round_bf16(m3_swiglu_oai(1.0f, -4.0f, A, L, BETA)));
    assert_true(y[1] == m3_round_bf16(m3_swiglu_oai(-2.0f, 0.5f, A, L, BETA)));
    /* y may alias x */
    float xa[2] = {x[0], x[1]};
    m3_mlp(xa, xa, &G, &U, &D, &c, scratch, M3_MODE_BF16);
    assert_memory_equal(xa, y, sizeof y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_swiglu_clamps),
        cmocka_unit_test(test_mlp_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
