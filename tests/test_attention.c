/* test_attention.c — dense and block-sparse causal GQA attention.
 * Spec: M3-ATTN-GQA-1, M3-ATTN-SCORE-1, M3-MSA-ATTN-1, M3-NUM-BF16-2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "attention.h"

static uint64_t rng = 7;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

/* One key: p = 1, out = v exactly; GQA: query heads 0,1 read kv head 0, 2,3 kv head 1. */
static void test_single_key_gqa(void **st)
{
    (void)st;
    float q[4 * 2], k[2 * 2], v[2 * 2] = {1.5f, -2, 3, 0.25f}, out[4 * 2], scratch[2 * (1 + 2)]; /* m3_attention_scratch(0, 4, 2, 2) */
    for (int i = 0; i < 8; i++)
        q[i] = frand();
    for (int i = 0; i < 4; i++)
        k[i] = frand();
    m3_attention_row(out, q, k, v, 0, 4, 2, 2, NULL, 0, 0, scratch, M3_MODE_FP32);
    for (int j = 0; j < 4; j++) {
        assert_true(out[2 * j] == v[2 * (j / 2)]);
        assert_true(out[2 * j + 1] == v[2 * (j / 2) + 1]);
    }
    /* bf16: out = round(v) */
    float v2[4] = {1.00390625f, 3.0f, 1.0f / 3.0f, -7.1f};
    m3_attention_row(out, q, k, v2, 0, 4, 2, 2, NULL, 0, 0, scratch, M3_MODE_BF16);
    for (int j = 0; j < 4; j++)
        for (int d = 0; d < 2; d++)
            assert_true(out[2 * j + d] == m3_round_bf16(v2[2 * (j / 2) + d]));
}

/* Scale hd^-0.5: hd = 4, q = e0, k1 = (2 ln 3) e0 -> scores 0 and ln 3 -> p = (1/4, 3/4). */
static void test_scale_softmax(void **st)
{
    (void)st;
    float q[4] = {1, 0, 0, 0};
    float k[2 * 4] = {0, 0, 0, 0, (float)(2.0 * log(3.0)), 0, 0, 0};
    float v[2 * 4] = {0, 0, 0, 4, 1, 0, 0, 0};
    float out[4], scratch[1 * (2 + 4)]; /* m3_attention_scratch(1, 1, 1, 4) */
    m3_attention_row(out, q, k, v, 1, 1, 1, 4, NULL, 0, 0, scratch, M3_MODE_FP32);
    assert_true(fabs(out[0] - 0.75) < 1e-6);
    assert_true(fabs(out[3] - 1.0) < 1e-6); /* 0.25 * 4 */
}

/* Causal: rows past pos are never read. */
static void test_causal(void **st)
{
    (void)st;
    enum { NH = 2, NKV = 1, HD = 8, T = 4 };
    float q[NH * HD], k[T * NKV * HD], v[T * NKV * HD], out1[NH * HD], out2[NH * HD];
    float scratch[NH / NKV * (T + HD)];
    for (int i = 0; i < NH * HD; i++)
        q[i] = frand();
    for (int i = 0; i < T * HD; i++) {
        k[i] = frand();
        v[i] = frand();
    }
    m3_attention_row(out1, q, k, v, 1, NH, NKV, HD, NULL, 0, 0, scratch, M3_MODE_FP32);
    for (int i = 2 * HD; i < T * HD; i++) {
        k[i] = 1e30f;
        v[i] = NAN;
    }
    m3_attention_row(out2, q, k, v, 1, NH, NKV, HD, NULL, 0, 0, scratch, M3_MODE_FP32);
    assert_memory_equal(out1, out2, sizeof out1);
}

/* Sparse masks: q = 0 makes the softmax uniform over allowed keys; v[k] = k. */
static void test_sparse_mask(void **st)
{
    (void)st;
    enum { T = 6, B = 2 };
    float q[2] = {0, 0}; /* nh 2, nkv 2, hd 1 */
    float k[T * 2], v[T * 2], out[2], scratch[1 * (T + 1)];
    for (int t = 0; t < T; t++) {
        k[2 * t] = k[2 * t + 1] = frand();
        v[2 * t] = v[2 * t + 1] = (float)t;
    }
    int32_t blocks[2 * 2] = {2, -1, /* group 0: keys 4, 5 */
                             0, 2}; /* group 1: keys 0, 1, 4, 5 */
    m3_attention_row(out, q, k, v, 5, 2, 2, 1, blocks, 2, B, scratch, M3_MODE_FP32);
    assert_true(out[0] == 4.5f && out[1] == 2.5f);
    int32_t dup[2 * 2] = {2, 2, 1, -1}; /* duplicates harmless; group 1: keys 2, 3 */
    m3_attention_row(out, q, k, v, 5, 2, 2, 1, dup, 2, B, scratch, M3_MODE_FP32);
    assert_true(out[0] == 4.5f && out[1] == 2.5f);
    /* causal inside a selected block: pos 4 sees key 4 but not 5 */
    int32_t b2[2 * 1] = {2, 2};
    m3_attention_row(out, q, k, v, 4, 2, 2, 1, b2, 1, B, scratch, M3_MODE_FP32);
    assert_true(out[0] == 4.0f && out[1] == 4.0f);
}

/* All visible blocks selected (any order, with padding) == dense, bit for bit. */
static void test_sparse_all_equals_dense(void **st)
{
    (void)st;
    enum { NH = 4, NKV = 2, HD = 8, T = 11, B = 4 };
    float q[NH * HD], k[T * NKV * HD], v[T * NKV * HD], od[NH * HD], os[NH * HD];
    float scratch[NH / NKV * (T + HD)];
    for (int i = 0; i < NH * HD; i++)
        q[i] = frand();
    for (int i = 0; i < T * NKV * HD; i++) {
        k[i] = frand();
        v[i] = frand();
    }
    int32_t blocks[NKV * 4] = {2, 0, 1, -1, 1, 2, -1, 0};
    for (int mode = 0; mode < 2; mode++) {
        m3_attention_row(od, q, k, v, T - 1, NH, NKV, HD, NULL, 0, 0, scratch, (m3_mode)mode);
        m3_attention_row(os, q, k, v, T - 1, NH, NKV, HD, blocks, 4, B, scratch, (m3_mode)mode);
        assert_memory_equal(od, os, sizeof od);
        if (mode == M3_MODE_BF16)
            for (int i = 0; i < NH * HD; i++)
                assert_true(od[i] == m3_round_bf16(od[i]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_key_gqa),
        cmocka_unit_test(test_scale_softmax),
        cmocka_unit_test(test_causal),
        cmocka_unit_test(test_sparse_mask),
        cmocka_unit_test(test_sparse_all_equals_dense),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
