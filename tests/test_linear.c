/* test_linear.c — m3_matvec / m3_matmul / m3_matvec_naive.
 * Spec: M3-NUM-MODE-1, M3-NUM-MODE-2 (fixed 8-partial-sum order), M3-CACHE-1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "linear.h"

static uint64_t rng = 0x1234567;
static float frand(void) /* deterministic in [-1, 1) */
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static void test_small_exact(void **st)
{
    (void)st;
    float w[6] = {1, 2, 3, -1, 0.5f, 4};
    float x[3] = {1, 10, 100};
    m3_mat W = {w, M3_F32, 2, 3};
    float y[2];
    m3_matvec(y, &W, x);
    assert_true(y[0] == 321.0f); /* 1 + 20 + 300 */
    assert_true(y[1] == 404.0f); /* -1 + 5 + 400 */
}

/* The 8-partial order: c = 0 and c = 8 share partial 0, c = 1 and 9 partial 1.
 * Exact sum is 2; one left-to-right accumulator loses the first +1 to 2^24. */
static void test_fixed_order(void **st)
{
    (void)st;
    float w[10] = {16777216.0f, 1, 0, 0, 0, 0, 0, 0, -16777216.0f, 1};
    float x[10];
    for (int i = 0; i < 10; i++)
        x[i] = 1.0f;
    m3_mat W = {w, M3_F32, 1, 10};
    float y, yn;
    m3_matvec(&y, &W, x);
    m3_matvec_naive(&yn, &W, x);
    assert_true(y == 2.0f);
    assert_true(yn == 1.0f);
}

static void test_dtypes_agree(void **st)
{
    (void)st;
    enum { R = 5, C = 37 };
    float wf[R * C], x[C], yf[R], yb[R], yh[R];
    uint16_t wb[R * C], wh[R * C];
    for (int i = 0; i < R * C; i++) {
        /* values exact in bf16 and f16: multiples of 1/8 in [-8, 8) */
        wf[i] = (float)((int)(frand() * 64.0f)) / 8.0f;
        wb[i] = m3_f32_to_bf16(wf[i]);
        wh[i] = m3_f32_to_f16(wf[i]);
    }
    for (int i = 0; i < C; i++)
        x[i] = frand();
    m3_mat Wf = {wf, M3_F32, R, C}, Wb = {wb, M3_BF16, R, C}, Wh = {wh, M3_F16, R, C};
    m3_matvec(yf, &Wf, x);
    m3_matvec(yb, &Wb, x);
    m3_matvec(yh, &Wh, x);
    assert_memory_equal(yf, yb, sizeof yf);
    assert_memory_equal(yf, yh, sizeof yf);
}

/* matmul over any n is bit-identical to matvec row by row (decode == prefill);
 * cols crosses the conversion chunk and is not a multiple of 8. */
static void test_matmul_equals_matvec(void **st)
{
    (void)st;
    enum { R = 7, C = 1037, N = 19 };
    static uint16_t w[R * C];
    static float X[N * C], Y[N * R];
    float y[R];
    for (int i = 0; i < R * C; i++)
        w[i] = m3_f32_to_bf16(frand());
    for (int i = 0; i < N * C; i++)
        X[i] = frand();
    m3_mat W = {w, M3_BF16, R, C};
    for (int n = 1; n <= N; n++) {
        m3_matmul(Y, &W, X, n);
        for (int i = 0; i < n; i++) {
            m3_matvec(y, &W, X + (size_t)i * C);
            assert_memory_equal(y, Y + (size_t)i * R, sizeof y);
        }
    }
}

static void test_naive_close(void **st)
{
    (void)st;
    enum { R = 9, C = 300 };
    static float w[R * C], x[C];
    float y[R], yn[R];
    for (int i = 0; i < R * C; i++)
        w[i] = frand();
    for (int i = 0; i < C; i++)
        x[i] = frand();
    m3_mat W = {w, M3_F32, R, C};
    m3_matvec(y, &W, x);
    m3_matvec_naive(yn, &W, x);
    for (int r = 0; r < R; r++) {
        double ref = 0;
        for (int c = 0; c < C; c++)
            ref += (double)w[r * C + c] * x[c];
        assert_true(fabs(y[r] - ref) < 1e-4);
        assert_true(fabs(yn[r] - ref) < 1e-4);
    }
}

/* The documented order written as plainly as possible: y[r] from eight
 * partial sums p[c mod 8] in ascending c, then the fixed pairwise combine. */
static float order_spec(const float *w, const float *x, int cols)
{
    float p[8] = {0};
    for (int c = 0; c < cols; c++)
        p[c % 8] += w[c] * x[c];
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/* Every kernel path (one row, register blocks, edge blocks, tail columns,
 * several row tiles, f32, bf16 and f16) gives the documented order's
 * bits exactly; values span many exponents so that any reordering shows. */
static void test_order_all_paths(void **st)
{
    (void)st;
    static const int shapes[][3] = { /* rows, cols, n */
        {1, 1, 1}, {3, 7, 2}, {4, 8, 4}, {5, 9, 5}, {33, 257, 7}, {36, 512, 64},
        {37, 520, 65}, {70, 263, 131}, {8, 1037, 3}, {65, 64, 9}, {9, 70, 133}, {13, 1037, 265},
        {15, 15, 2}, {17, 6, 70},
    };
    enum { MAXE = 265 * 1037 };
    static float wf[MAXE], X[MAXE], Y[MAXE], ws[MAXE];
    static uint16_t wb[MAXE], wh[MAXE];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int R = shapes[s][0], C = shapes[s][1], N = shapes[s][2];
        for (int i = 0; i < R * C; i++) {
            float v = frand() * ldexpf(1.0f, (int)(frand() * 20.0f));
            wb[i] = m3_f32_to_bf16(v);
            wh[i] = m3_f32_to_f16(v * 0x1p-6f); /* within f16's range, subnormals included */
            wf[i] = v;
        }
        for (int i = 0; i < N * C; i++)
            X[i] = frand() * ldexpf(1.0f, (int)(frand() * 20.0f));
        for (int d = 0; d < 3; d++) {
            m3_mat W = d == 2 ? (m3_mat){wh, M3_F16, R, C}
                     : d ? (m3_mat){wb, M3_BF16, R, C} : (m3_mat){wf, M3_F32, R, C};
            for (int i = 0; i < R * C; i++)
                ws[i] = d == 2 ? m3_f16_to_f32(wh[i]) : d ? m3_bf16_to_f32(wb[i]) : wf[i];
            m3_matmul(Y, &W, X, N);
            for (int i = 0; i < N; i++)
                for (int r = 0; r < R; r++) {
                    float e = order_spec(ws + (size_t)r * C, X + (size_t)i * C, C);
                    assert_memory_equal(&e, &Y[(size_t)i * R + r], sizeof e);
                }
            m3_matvec(Y, &W, X);
            for (int r = 0; r < R; r++) {
                float e = order_spec(ws + (size_t)r * C, X, C);
                assert_memory_equal(&e, &Y[r], sizeof e);
            }
        }
    }
}

/* Non-finite and subnormal operands: +-Inf, subnormals, +-0 and products
 * that overflow or underflow, in weights and inputs. Every path still gives
 * the order's bits (the NaNs that arise, Inf - Inf and 0 * Inf, are all the
 * default NaN, so the comparison is bytewise). */
static float special(void)
{
    float v = frand() * ldexpf(1.0f, (int)(frand() * 30.0f));
    uint32_t u;
    switch (rng >> 56) { /* 1 in 256 for each case */
    case 0: return INFINITY;
    case 1: return -INFINITY;
    case 2: case 3: /* subnormal, either sign */
        u = (uint32_t)(rng >> 20) & 0x807fffffu;
        memcpy(&v, &u, sizeof v);
        return v;
    case 4: return 0.0f;
    case 5: return -0.0f;
    case 6: return 1e38f;
    case 7: return 1e-38f;
    default: return v;
    }
}

static void test_order_specials(void **st)
{
    (void)st;
    /* rows, cols, n, and whether the values are so small that every
     * product is subnormal */
    static const int shapes[][4] = {{3, 7, 2, 0},   {9, 40, 7, 0},   {17, 263, 13, 0},
                                    {8, 64, 70, 0}, {12, 33, 133, 0}, {11, 50, 9, 1}};
    enum { MAXE = 133 * 263 };
    static float wf[MAXE], X[MAXE], Y[MAXE], ws[MAXE];
    static uint16_t wb[MAXE];
    int seen[4] = {0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int R = shapes[s][0], C = shapes[s][1], N = shapes[s][2];
        const int tiny = shapes[s][3]; /* |products| < 2^-130 */
        for (int i = 0; i < R * C; i++) {
            wf[i] = tiny ? frand() * 0x1p-60f : special();
            wb[i] = m3_f32_to_bf16(wf[i]);
        }
        for (int i = 0; i < N * C; i++)
            X[i] = tiny ? frand() * 0x1p-70f : special();
        for (int d = 0; d < 2; d++) {
            m3_mat W = d ? (m3_mat){wb, M3_BF16, R, C} : (m3_mat){wf, M3_F32, R, C};
            for (int i = 0; i < R * C; i++)
                ws[i] = d ? m3_bf16_to_f32(wb[i]) : wf[i];
            m3_matmul(Y, &W, X, N);
            for (int i = 0; i < N; i++)
                for (int r = 0; r < R; r++) {
                    float e = order_spec(ws + (size_t)r * C, X + (size_t)i * C, C);
                    assert_memory_equal(&e, &Y[(size_t)i * R + r], sizeof e);
                    seen[isnan(e) ? 0 : isinf(e) ? 1 : e != 0 && fabsf(e) < 1.17549435e-38f ? 2 : 3]++;
                }
        }
    }
    /* the outputs include NaN, +-Inf, subnormal and normal values */
    for (int k = 0; k < 4; k++)
        assert_true(seen[k] > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_exact),
        cmocka_unit_test(test_fixed_order),
        cmocka_unit_test(test_dtypes_agree),
        cmocka_unit_test(test_matmul_equals_matvec),
        cmocka_unit_test(test_naive_close),
        cmocka_unit_test(test_order_all_paths),
        cmocka_unit_test(test_order_specials),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
