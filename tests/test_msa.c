/* test_msa.c — indexer block scores and block selection.
 * Spec: M3-MSA-SCORE-1, M3-MSA-BLOCK-1, M3-MSA-SELECT-1..4, M3-MSA-ATTN-1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "attention.h"
#include "msa.h"

static uint64_t rng = 3;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static void test_num_blocks(void **st)
{
    (void)st;
    assert_int_equal(m3_msa_num_blocks(0, 4), 1);
    assert_int_equal(m3_msa_num_blocks(3, 4), 1);
    assert_int_equal(m3_msa_num_blocks(4, 4), 2);
    assert_int_equal(m3_msa_num_blocks(300, 128), 3);
}

/* d = 1, iq = 2: s[j] = 2 ik[j]; block max over visible keys only.
 * pos 4 with B 4 is a block boundary: block 1 holds the one key 4. */
static void test_block_scores(void **st)
{
    (void)st;
    float iq[2] = {2, -1};
    float ik[6] = {1, -3, 0.5f, 2, -1, 100}; /* key 5 is in the future */
    float bs[2 * 2];
    m3_msa_block_scores(bs, iq, ik, 4, 2, 1, 4);
    assert_true(bs[0] == 4.0f && bs[1] == -2.0f); /* head 0 */
    assert_true(bs[2] == 3.0f && bs[3] == 1.0f);  /* head 1: max(-1,3,-0.5,-2), 1 */
}

static void check_row(const int32_t *got, const int32_t *want, int k)
{
    for (int i = 0; i < k; i++)
        assert_int_equal(got[i], want[i]);
}

static void test_select_rules(void **st)
{
    (void)st;
    int32_t out[8];
    /* local block forced first even with the lowest score (pos 9, B 4: q_block 2) */
    float s1[3] = {5, 4, -100};
    m3_msa_select(out, s1, 1, 3, 9, 4, 2, 1, 0);
    check_row(out, (int32_t[]){2, 0}, 2);
    /* ties to the lower id; q_block 4 */
    float s2[5] = {1, 3, 3, 3, 0};
    m3_msa_select(out, s2, 1, 5, 16, 4, 3, 1, 0);
    check_row(out, (int32_t[]){4, 1, 2}, 3);
    /* -1 padding; -inf never selected */
    float s3[3] = {-INFINITY, 0.5f, 0};
    m3_msa_select(out, s3, 1, 3, 8, 4, 5, 1, 0);
    check_row(out, (int32_t[]){2, 1, -1, -1, -1}, 5);
    /* init blocks and two local blocks, forced ascending: q_block 5 */
    float s4[6] = {-5, 9, 1, 7, -9, -9};
    m3_msa_select(out, s4, 1, 6, 20, 4, 5, 2, 1);
    check_row(out, (int32_t[]){0, 4, 5, 1, 3}, 5);
    /* two heads select independently */
    float s5[2 * 3] = {1, 2, 0, 2, 1, 0};
    m3_msa_select(out, s5, 2, 3, 8, 4, 2, 1, 0);
    check_row(out, (int32_t[]){2, 1, 2, 0}, 4);
}

/* nb <= topk: every visible block is chosen and sparse attention == dense exactly,
 * including queries at block boundaries (pos % B == 0). */
static void test_short_sequence_is_dense(void **st)
{
    (void)st;
    enum { NH = 4, NKV = 2, HD = 8, D = 8, T = 13, B = 4, K = 4 };
    float q[NH * HD], k[T * NKV * HD], v[T * NKV * HD], ik[T * D], iq[NKV * D];
    float od[NH * HD], os[NH * HD], scratch[NH / NKV * (T + HD)], bs[NKV * K];
    int32_t sel[NKV * K];
    for (int i = 0; i < T * NKV * HD; i++) {
        k[i] = frand();
        v[i] = frand();
    }
    for (int i = 0; i < T * D; i++)
        ik[i] = frand();
    for (int64_t pos = 0; pos < T; pos++) {
        for (int i = 0; i < NH * HD; i++)
            q[i] = frand();
        for (int i = 0; i < NKV * D; i++)
            iq[i] = frand();
        int nb = m3_msa_num_blocks(pos, B);
        m3_msa_block_scores(bs, iq, ik, pos, NKV, D, B);
        if (pos % B == 0) /* the new block holds one key: its score is that key's */
            for (int g = 0; g < NKV; g++) {
                float s = 0;
                for (int i = 0; i < D; i++)
                    s += iq[g * D + i] * ik[pos * D + i];
                assert_true(bs[g * nb + nb - 1] == s);
            }
        m3_msa_select(sel, bs, NKV, nb, pos, B, K, 1, 0);
        for (int g = 0; g < NKV; g++) {
            int seen[K] = {0};
            assert_int_equal(sel[g * K], nb - 1); /* local first */
            for (int t = 0; t < K; t++) {
                if (t < nb) {
                    assert_true(sel[g * K + t] >= 0 && sel[g * K + t] < nb);
                    seen[sel[g * K + t]]++;
                } else {
                    assert_int_equal(sel[g * K + t], -1);
                }
            }
            for (int b = 0; b < nb; b++)
                assert_int_equal(seen[b], 1);
        }
        m3_attention_row(od, q, k, v, pos, NH, NKV, HD, NULL, 0, 0, scratch, M3_MODE_FP32);
        m3_attention_row(os, q, k, v, pos, NH, NKV, HD, sel, K, B, scratch, M3_MODE_FP32);
        assert_memory_equal(od, os, sizeof od);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_num_blocks),
        cmocka_unit_test(test_block_scores),
        cmocka_unit_test(test_select_rules),
        cmocka_unit_test(test_short_sequence_is_dense),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
