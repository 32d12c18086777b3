/* test_moe.c — router and MoE block.
 * Spec: M3-MOE-ROUTER-1..3, M3-MOE-EXPERT-1, M3-MOE-SHARED-1, M3-MOE-COMBINE-1, M3-NUM-BF16-2;
 * the batched forms (m3_moe_rows, m3_mlp_rows) against the one-row forms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "mlp.h"
#include "moe.h"

static uint64_t rng = 11;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float sig(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Router E = 4, H = 2 with x = (1, 0): logits are column 0 of the router. */
static void test_router(void **st)
{
    (void)st;
    float rw[8] = {0, 9, 1, 9, 2, 9, 3, 9};
    m3_mat R = {rw, M3_F32, 4, 2};
    float x[2] = {1, 0}, bias[4] = {10, 0, 0, 0}, w[2], s[4];
    m3_vec Bv = {bias, M3_F32, 4};
    int32_t idx[2];
    m3_router(idx, w, s, x, &R, &Bv, 0, 2); /* bias off */
    assert_int_equal(idx[0], 2);
    assert_int_equal(idx[1], 3);
    for (int e = 0; e < 4; e++)
        assert_true(s[e] == sig((float)e));
    assert_true(fabs(w[0] - sig(2) / (sig(2) + sig(3))) < 1e-7);
    assert_true(fabs(w[0] + w[1] - 1.0) < 1e-6);
    /* bias changes the choice, not the weights (un-biased sigmoids renormalised) */
    m3_router(idx, w, s, x, &R, &Bv, 1, 2);
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 3);
    assert_true(w[0] == s[0] / (s[0] + s[3]) && w[1] == s[3] / (s[0] + s[3]));
    for (int e = 0; e < 4; e++)
        assert_true(s[e] == sig((float)e)); /* scores are un-biased */
    /* ties -> lower id, output ascending */
    float tw[8] = {1, 0, 1, 0, 1, 0, 1, 0};
    m3_mat T = {tw, M3_F32, 4, 2};
    float zb[4] = {0, 0, 0.5f, 0};
    m3_vec Zb = {zb, M3_F32, 4};
    m3_router(idx, w, s, x, &T, &Zb, 1, 2);
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 2);
    assert_true(w[0] == 0.5f && w[1] == 0.5f);
}

enum { E = 4, H = 8, I = 4, IS = 3, K = 2 };

typedef struct fixture {
    float router[E * H], bias[E];
    float g[E][I * H], u[E][I * H], d[E][H * I];
    float sg[IS * H], su[IS * H], sd[H * IS];
    m3_mat eg[E], eu[E], ed[E];
    m3_layer_weights lw;
    m3_text_config c;
} fixture;

static void make(fixture *f)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < E * H; i++)
        f->router[i] = frand();
    for (int e = 0; e < E; e++) {
        f->bias[e] = 0.1f * frand();
        for (int i = 0; i < I * H; i++) {
            f->g[e][i] = 3 * frand();
            f->u[e][i] = 3 * frand();
            f->d[e][i] = frand();
        }
        f->eg[e] = (m3_mat){f->g[e], M3_F32, I, H};
        f->eu[e] = (m3_mat){f->u[e], M3_F32, I, H};
        f->ed[e] = (m3_mat){f->d[e], M3_F32, H, I};
    }
    for (int i = 0; i < IS * H; i++) {
        f->sg[i] = 3 * frand();
        f->su[i] = 3 * frand();
        f->sd[i] = frand();
    }
    f->lw.router = (m3_mat){f->router, M3_F32, E, H};
    f->lw.router_bias = (m3_vec){f->bias, M3_F32, E};
    f->lw.exp_gate = f->eg;
    f->lw.exp_up = f->eu;
    f->lw.exp_down = f->ed;
    f->lw.sh_gate = (m3_mat){f->sg, M3_F32, IS, H};
    f->lw.sh_up = (m3_mat){f->su, M3_F32, IS, H};
    f->lw.sh_down = (m3_mat){f->sd, M3_F32, H, IS};
    m3_text_config *c = &f->c;
    c->hidden_size = H;
    c->intermediate_size = I;
    c->shared_intermediate_size = IS;
    c->num_experts = E;
    c->num_experts_per_tok = K;
    c->n_shared_experts = 1;
    c->routed_scaling_factor = 2.0f;
    c->use_routing_bias = 1;
    c->swiglu_alpha = 1.702f;
    c->swiglu_limit = 7.0f;
    c->swiglu_beta = 1.0f;
}

/* y == the composition of router, expert MLPs and shared MLP, with the
 * contract's rounding points in bf16 mode (none in fp32 mode). */
static void test_moe_composition(void **st)
{
    (void)st;
    static fixture f;
    make(&f);
    float x[H], y[H], scratch[2 * I + 2 * IS + 2 * H], ms[2 * I];
    int32_t idx[K], ridx[K];
    float w[K], s[E], rw[K], rs[E];
    for (int i = 0; i < H; i++)
        x[i] = m3_round_bf16(frand());
    for (int shared = 0; shared < 2; shared++) {
        f.c.n_shared_experts = shared;
        for (int mode = 0; mode < 2; mode++) {
            m3_mode m = (m3_mode)mode;
            m3_moe(y, x, &f.lw, &f.c, idx, w, s, scratch, m);
            /* router ignores the mode */
            m3_router(ridx, rw, rs, x, &f.lw.router, &f.lw.router_bias, 1, K);
            assert_memory_equal(idx, ridx, sizeof idx);
            assert_memory_equal(w, rw, sizeof w);
            assert_memory_equal(s, rs, sizeof s);
            assert_true(idx[0] < idx[1]);
            float acc[H] = {0}, ye[H], ysh[H];
            for (int t = 0; t < K; t++) {
                m3_mlp(ye, x, &f.eg[idx[t]], &f.eu[idx[t]], &f.ed[idx[t]], &f.c, ms, m);
                for (int h = 0; h < H; h++) {
                    if (m == M3_MODE_BF16)
                        assert_true(ye[h] == m3_round_bf16(ye[h]));
                    acc[h] += m3_round1(w[t] * ye[h], m);
                }
            }
            if (shared)
                m3_mlp(ysh, x, &f.lw.sh_gate, &f.lw.sh_up, &f.lw.sh_down, &f.c, ms, m);
            for (int h = 0; h < H; h++) {
                float r = m3_round1(m3_round1(acc[h], m) * 2.0f, m);
                float want = shared ? m3_round1(r + ysh[h], m) : r;
                assert_true(y[h] == want);
                if (m == M3_MODE_BF16)
                    assert_true(y[h] == m3_round_bf16(y[h]));
            }
        }
    }
}

/* The scaling factor multiplies the routed sum only: y(2) - y(1) = routed sum. */
static void test_scale_routed_only(void **st)
{
    (void)st;
    static fixture f;
    make(&f);
    float x[H], y1[H], y2[H], y0[H], scratch[2 * I + 2 * IS + 2 * H];
    int32_t idx[K];
    float w[K], s[E];
    for (int i = 0; i < H; i++)
        x[i] = frand();
    f.c.routed_scaling_factor = 1.0f;
    m3_moe(y1, x, &f.lw, &f.c, idx, w, s, scratch, M3_MODE_FP32);
    f.c.routed_scaling_factor = 2.0f;
    m3_moe(y2, x, &f.lw, &f.c, idx, w, s, scratch, M3_MODE_FP32);
    f.c.n_shared_experts = 0;
    f.c.routed_scaling_factor = 1.0f;
    m3_moe(y0, x, &f.lw, &f.c, idx, w, s, scratch, M3_MODE_FP32);
    for (int h = 0; h < H; h++)
        assert_true(fabs((y2[h] - y1[h]) - y0[h]) < 1e-5);
}

/* m3_moe_rows on n rows == m3_moe row by row, bit for bit, in both modes, with
 * and without the shared expert, for expert batches smaller and larger than
 * the rows an expert gets (R = 1, 3, n); the router outputs match too. */
static void test_moe_rows_equal_rows(void **st)
{
    (void)st;
    enum { N = 13 };
    static fixture f;
    make(&f);
    static float x[N * H], y[N * H], yr[H], scores[N * E], w[N * K], w1[K], s1[E];
    static int32_t idx[N * K], i1[K], sel[N];
    float scratch1[2 * I + 2 * IS + 2 * H];
    for (int i = 0; i < N * H; i++)
        x[i] = 2 * frand();
    const int Rs[3] = {1, 3, N};
    for (int shared = 0; shared < 2; shared++)
        for (int mode = 0; mode < 2; mode++)
            for (int r = 0; r < 3; r++) {
                f.c.n_shared_experts = shared;
                size_t need = m3_moe_rows_scratch(&f.c, N, Rs[r]);
                float *scr = malloc(need * sizeof *scr);
                assert_non_null(scr);
                m3_moe_rows(y, x, N, &f.lw, &f.c, idx, w, scores, sel, scr, Rs[r], (m3_mode)mode);
                for (int t = 0; t < N; t++) {
                    m3_moe(yr, x + t * H, &f.lw, &f.c, i1, w1, s1, scratch1, (m3_mode)mode);
                    assert_memory_equal(yr, y + t * H, sizeof yr);
                    assert_memory_equal(i1, idx + t * K, sizeof i1);
                    assert_memory_equal(w1, w + t * K, sizeof w1);
                    assert_memory_equal(s1, scores + t * E, sizeof s1);
                }
                free(scr);
            }
}

/* m3_mlp_rows == m3_mlp row by row, bit for bit. */
static void test_mlp_rows_equal_rows(void **st)
{
    (void)st;
    enum { N = 9 };
    static fixture f;
    make(&f);
    float x[N * H], y[N * H], yr[H], scr[2 * N * I], ms[2 * I];
    for (int i = 0; i < N * H; i++)
        x[i] = 2 * frand();
    for (int mode = 0; mode < 2; mode++) {
        m3_mlp_rows(y, x, N, &f.eg[1], &f.eu[1], &f.ed[1], &f.c, scr, (m3_mode)mode);
        for (int t = 0; t < N; t++) {
            m3_mlp(yr, x + t * H, &f.eg[1], &f.eu[1], &f.ed[1], &f.c, ms, (m3_mode)mode);
            assert_memory_equal(yr, y + t * H, sizeof yr);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router),
        cmocka_unit_test(test_moe_composition),
        cmocka_unit_test(test_scale_routed_only),
        cmocka_unit_test(test_moe_rows_equal_rows),
        cmocka_unit_test(test_mlp_rows_equal_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
