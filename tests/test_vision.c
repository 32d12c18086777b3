/* test_vision.c — vision tower, 3D RoPE, segments, projector-then-merge,
 * placeholder expansion and scatter.
 *
 * Spec: M3-VIS-ROPE-1..3, M3-VIS-SEG-1, M3-VIS-PROJ-1, M3-VIS-MERGE-1/2,
 * M3-VIS-PLACE-1/2, M3-EMB-3.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "linear.h"
#include "multimodal.h"
#include "rope.h"
#include "vision.h"
#include "vision_fixture.h"
#include "vision_rope.h"

static void test_coords_merge_order(void **st)
{
    (void)st;
    int32_t c[2 * 4 * 4 * 3];
    m3_vision_coords(c, 2, 4, 4, 2);
    /* first window (0,0),(0,1),(1,0),(1,1); then the window to the right */
    const int32_t want[6][3] = {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}, {0, 0, 2}, {0, 0, 3}};
    for (int r = 0; r < 6; r++)
        for (int k = 0; k < 3; k++)
            assert_int_equal(c[3 * r + k], want[r][k]);
    /* row 8 starts the second window row: (0, 2, 0) */
    assert_int_equal(c[3 * 8 + 1], 2);
    assert_int_equal(c[3 * 8 + 2], 0);
    /* row 16 is the second temporal group */
    assert_int_equal(c[3 * 16], 1);
    assert_int_equal(c[3 * 16 + 1], 0);
}

static void test_rope_dims_and_table(void **st)
{
    (void)st;
    assert_int_equal(m3_vision_rope_dim(80), 78);
    assert_int_equal(m3_vision_rope_dim(32), 30);
    float cs[39], sn[39];
    m3_vision_rope_table(cs, sn, 2, 5, 7, 80, 1e4);
    /* bands T|H|W of 13 frequencies each, same ladder 1/1e4^(2i/26) */
    for (int a = 0; a < 3; a++) {
        int coord = a == 0 ? 2 : a == 1 ? 5 : 7;
        for (int i = 0; i < 13; i++) {
            double inv = 1.0 / pow(1e4, 2.0 * i / 26.0);
            assert_float_equal(cs[13 * a + i], cos(coord * inv), 2e-6);
            assert_float_equal(sn[13 * a + i], sin(coord * inv), 2e-6);
        }
    }
}

static void test_rope_passthrough(void **st)
{
    (void)st;
    float cs[39], sn[39], x[80], y[80];
    m3_vision_rope_table(cs, sn, 1, 3, 4, 80, 1e4);
    for (int i = 0; i < 80; i++)
        x[i] = y[i] = 0.37f * (float)(i + 1) - 11.0f;
    m3_rope_apply(y, 1, 80, 78, cs, sn, M3_MODE_FP32);
    /* dims 78, 79 untouched, bit for bit */
    assert_memory_equal(&x[78], &y[78], 2 * sizeof(float));
    /* pair (j, j + 39) rotated with angle f_j */
    for (int j = 0; j < 39; j++) {
        assert_float_equal(y[j], x[j] * cs[j] - x[j + 39] * sn[j], 1e-5);
        assert_float_equal(y[j + 39], x[j + 39] * cs[j] + x[j] * sn[j], 1e-5);
    }
}

/* ---- tiny model -------------------------------------------------------- */

typedef struct vfx {
    char dir[256];
    m3_model m;
} vfx;

static int vfx_setup(void **st)
{
    vfx *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/m3_test_vision_%d", (int)getpid());
    m3_fixture_opts o;
    m3_fixture_defaults(&o);
    o.num_layers = 1;
    o.n_dense = 1;
    m3_vfixture_opts v;
    m3_vfixture_defaults(&v);
    m3_err e;
    if (m3_vfixture_write(f->dir, &o, &v, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    m3_model_opts mo = {0};
    if (m3_model_open(&f->m, f->dir, &mo, &e) != 0) {
        fprintf(stderr, "%s\n", e.msg);
        return -1;
    }
    *st = f;
    return 0;
}

static int vfx_teardown(void **st)
{
    vfx *f = *st;
    char p[300];
    m3_model_close(&f->m);
    snprintf(p, sizeof p, "%s/config.json", f->dir);
    remove(p);
    snprintf(p, sizeof p, "%s/model.safetensors", f->dir);
    remove(p);
    rmdir(f->dir);
    free(f);
    return 0;
}

static float *rand_pixels(int64_t n, uint64_t seed)
{
    float *p = malloc((size_t)n * 1176 * sizeof *p);
    uint64_t s = seed;
    for (int64_t i = 0; i < n * 1176; i++)
        p[i] = m3_fixture_uniform(&s, 2.0f);
    return p;
}

static void test_segments_video(void **st)
{
    vfx *f = *st;
    const int H = f->m.cfg.text.hidden_size;
    /* video of 9 temporal groups on a 2x2 grid -> segments of 4, 4, 1 groups */
    int32_t g9[3] = {9, 2, 2};
    int64_t n = 9 * 4;
    float *px = rand_pixels(n, 5);
    float *whole = malloc((size_t)(n / 4) * H * sizeof *whole);
    float *parts = malloc((size_t)(n / 4) * H * sizeof *parts);
    float *joint = malloc((size_t)(n / 4) * H * sizeof *joint);
    m3_err e;
    m3_vision_opts op = {M3_MODE_FP32, 0};
    assert_int_equal(m3_vision_forward(&f->m, px, n, g9, 1, &op, whole, NULL, &e), 0);
    /* the same rows as three separate videos of 4, 4 and 1 groups (t restarts) */
    int32_t g3[9] = {4, 2, 2, 4, 2, 2, 1, 2, 2};
    assert_int_equal(m3_vision_forward(&f->m, px, n, g3, 3, &op, parts, NULL, &e), 0);
    assert_memory_equal(whole, parts, (size_t)(n / 4) * H * sizeof *whole);
    /* a single 4-group segment over groups 4..7 equals the middle part */
    float *mid = malloc((size_t)4 * H * sizeof *mid);
    int32_t g4[3] = {4, 2, 2};
    assert_int_equal(m3_vision_forward(&f->m, px + 16 * 1176, 16, g4, 1, &op, mid, NULL, &e), 0);
    assert_memory_equal(mid, whole + 4 * H, (size_t)4 * H * sizeof *mid);
    /* joint attention (HF option) differs */
    m3_vision_opts oj = {M3_MODE_FP32, 1};
    assert_int_equal(m3_vision_forward(&f->m, px, n, g9, 1, &oj, joint, NULL, &e), 0);
    double d = 0;
    for (int64_t i = 0; i < (n / 4) * H; i++)
        d += fabs(joint[i] - whole[i]);
    assert_true(d > 1e-3);
    free(px);
    free(whole);
    free(parts);
    free(joint);
    free(mid);
}

static void gelu_vec(float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] = (float)(0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0))));
}

/* y = W x + b with plain double loops (independent of m3_matvec). */
static void lin(float *y, const m3_mat *W, const m3_vec *b, const float *x)
{
    for (int r = 0; r < W->rows; r++) {
        double s = m3_vec_at(b, r);
        for (int c = 0; c < W->cols; c++)
            s += (double)m3_mat_at(W, r, c) * x[c];
        y[r] = (float)s;
    }
}

static void test_project_then_merge(void **st)
{
    vfx *f = *st;
    const int H = f->m.cfg.text.hidden_size, Hv = f->m.cfg.vision.hidden_size;
    const int Pj = f->m.cfg.vision.projector_hidden_size;
    const m3_vision_weights *vw = &f->m.w.vision;
    int32_t g[3] = {1, 2, 4};
    int64_t n = 8;
    float *px = rand_pixels(n, 11);
    float feats[2 * 64];
    m3_err e;
    m3_st_writer *w = m3_st_writer_new();
    m3_vision_opts op = {M3_MODE_FP32, 0};
    assert_int_equal(m3_vision_forward(&f->m, px, n, g, 1, &op, feats, w, &e), 0);
    char path[300];
    snprintf(path, sizeof path, "%s/dump.safetensors", f->dir);
    assert_int_equal(m3_st_writer_save(w, path, &e), 0);
    m3_st_writer_free(w);
    m3_store *s;
    assert_int_equal(m3_store_open(&s, path, &e), 0);
    const m3_tensor *tw = m3_store_get(s, "vision.tower_output");
    assert_non_null(tw);
    assert_non_null(m3_store_get(s, "vision.patch_embed"));
    assert_non_null(m3_store_get(s, "vision.layers.1.output"));
    assert_non_null(m3_store_get(s, "vision.projected"));
    const float *tower = tw->data;
    /* expected: project each patch, then merge each 4 consecutive rows */
    float proj[8][64], hid[64], cat[256], want[2][64], wrong[2][64];
    for (int r = 0; r < 8; r++) {
        float a[64];
        lin(a, &vw->proj1, &vw->proj1_b, tower + r * Hv);
        gelu_vec(a, Pj);
        lin(proj[r], &vw->proj2, &vw->proj2_b, a);
    }
    for (int t = 0; t < 2; t++) {
        for (int k = 0; k < 4; k++)
            memcpy(cat + k * H, proj[4 * t + k], H * sizeof(float));
        lin(hid, &vw->merge1, &vw->merge1_b, cat);
        gelu_vec(hid, Pj);
        lin(want[t], &vw->merge2, &vw->merge2_b, hid);
        for (int i = 0; i < H; i++)
            assert_float_equal(feats[t * H + i], want[t][i], 1e-4);
    }
    /* the wrong order (merge the tower rows, then project) gives another result */
    double d = 0;
    for (int t = 0; t < 2; t++) {
        float m1[64], a[64];
        for (int k = 0; k < 4; k++)
            memcpy(cat + k * Hv, tower + (4 * t + k) * Hv, Hv * sizeof(float));
        lin(hid, &vw->merge1, &vw->merge1_b, cat);
        gelu_vec(hid, Pj);
        lin(m1, &vw->merge2, &vw->merge2_b, hid);
        lin(a, &vw->proj1, &vw->proj1_b, m1);
        gelu_vec(a, Pj);
        lin(wrong[t], &vw->proj2, &vw->proj2_b, a);
        for (int i = 0; i < H; i++)
            d += fabs(wrong[t][i] - feats[t * H + i]);
    }
    assert_true(d > 1e-2);
    m3_store_close(s);
    remove(path);
    free(px);
}

static void test_vision_errors(void **st)
{
    vfx *f = *st;
    float out[64 * 4];
    float *px = rand_pixels(16, 3);
    m3_err e;
    int32_t odd[3] = {1, 3, 4};
    assert_int_equal(m3_vision_forward(&f->m, px, 12, odd, 1, NULL, out, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "merge"));
    int32_t g[3] = {1, 4, 4};
    assert_int_equal(m3_vision_forward(&f->m, px, 12, g, 1, NULL, out, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "16"));
    free(px);
}

/* ---- placeholders -------------------------------------------------------- */

static void test_expand_ids(void **st)
{
    (void)st;
    m3_mm_ids t = {200025, 200026, 200029, 200030, 2};
    int32_t ts0[] = {7, 8}, ts1[] = {9};
    const int32_t *ts[] = {ts0, ts1};
    int tsl[] = {2, 1};
    m3_mm_item items[2] = {{0, {1, 4, 2}, NULL, NULL}, {1, {2, 2, 2}, ts, tsl}};
    int32_t ids[] = {1, 200026, 2, 200025, 3};
    int32_t *out;
    int64_t n;
    m3_err e;
    assert_int_equal(m3_mm_expand(ids, 5, &t, items, 2, &out, &n, &e), 0);
    /* video: [7 8] S V E [9] S V E ; image: S I I E */
    const int32_t want[] = {1, 7, 8, 200029, 200026, 200030, 9, 200029, 200026, 200030,
                            2, 200029, 200025, 200025, 200030, 3};
    assert_int_equal(n, 16);
    assert_memory_equal(out, want, sizeof want);
    free(out);
    /* a marker without an item, and an item without a marker */
    int32_t two[] = {200025, 200025};
    assert_int_equal(m3_mm_expand(two, 2, &t, items, 1, &out, &n, &e), -1);
    assert_non_null(strstr(e.msg, "image"));
    int32_t none[] = {5};
    assert_int_equal(m3_mm_expand(none, 1, &t, items, 1, &out, &n, &e), -1);
    assert_non_null(strstr(e.msg, "no marker"));
}

/* --video F1,F2,...: names in order; empty names and too many frames fail */
static void test_split_frames(void **st)
{
    (void)st;
    char *buf = NULL;
    const char **fr = NULL;
    m3_err e = {{0}};
    assert_int_equal(m3_mm_split_frames("a.png,b.jpg,c.png", &buf, &fr, &e), 3);
    assert_string_equal(fr[0], "a.png");
    assert_string_equal(fr[1], "b.jpg");
    assert_string_equal(fr[2], "c.png");
    free(buf);
    free(fr);
    assert_int_equal(m3_mm_split_frames("a.png,,b.png", &buf, &fr, &e), -1);
    assert_non_null(strstr(e.msg, "empty frame name"));
    free(buf);
    free(fr);
    size_t n = 2 * (M3_MM_MAX_FRAMES + 1);
    char *many = malloc(n);
    assert_non_null(many);
    for (size_t i = 0; i + 1 < n; i += 2) {
        many[i] = 'x';
        many[i + 1] = ',';
    }
    many[n - 2] = 'x';
    many[n - 1] = 0; /* M3_MM_MAX_FRAMES + 1 names */
    assert_int_equal(m3_mm_split_frames(many, &buf, &fr, &e), -1);
    assert_non_null(strstr(e.msg, "more than"));
    free(buf);
    free(fr);
    many[2 * M3_MM_MAX_FRAMES - 1] = 0; /* exactly M3_MM_MAX_FRAMES */
    assert_int_equal(m3_mm_split_frames(many, &buf, &fr, &e), M3_MM_MAX_FRAMES);
    free(buf);
    free(fr);
    free(many);
}

static void test_scatter(void **st)
{
    vfx *f = *st;
    const int H = f->m.cfg.text.hidden_size;
    m3_mm_ids t;
    m3_mm_ids_from_config(&t, &f->m.cfg);
    assert_int_equal(t.image, 200025);
    int32_t ids[] = {3, 200025, 200025, 4, 200026};
    float feats[3 * 64];
    for (int i = 0; i < 3 * H; i++)
        feats[i] = (float)i;
    float x[5 * 64];
    m3_err e;
    /* the fixture vocabulary is small: ids above it are rejected, unless placeholders */
    int V = f->m.cfg.text.vocab_size;
    if (V <= 200026) {
        assert_int_equal(m3_mm_embed(&f->m, ids, 5, &t, feats, 3, M3_MODE_FP32, x, &e), -1);
        assert_non_null(strstr(e.msg, "out of range"));
        t.image = V - 2;
        t.video = V - 1;
        ids[1] = ids[2] = t.image;
        ids[4] = t.video;
    }
    assert_int_equal(m3_mm_embed(&f->m, ids, 5, &t, feats, 3, M3_MODE_FP32, x, &e), 0);
    assert_memory_equal(x + 1 * H, feats, H * sizeof(float));
    assert_memory_equal(x + 2 * H, feats + H, H * sizeof(float));
    assert_memory_equal(x + 4 * H, feats + 2 * H, H * sizeof(float));
    for (int i = 0; i < H; i++)
        assert_true(x[3 * H + i] == m3_mat_at(&f->m.w.embed, 4, i));
    assert_int_equal(m3_mm_embed(&f->m, ids, 5, &t, feats, 2, M3_MODE_FP32, x, &e), -1);
    assert_non_null(strstr(e.msg, "3 image/video placeholder"));
}

int main(void)
{
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(test_coords_merge_order),
        cmocka_unit_test(test_rope_dims_and_table),
        cmocka_unit_test(test_rope_passthrough),
        cmocka_unit_test(test_expand_ids),
    };
    const struct CMUnitTest model[] = {
        cmocka_unit_test(test_segments_video),
        cmocka_unit_test(test_project_then_merge),
        cmocka_unit_test(test_vision_errors),
        cmocka_unit_test(test_scatter),
        cmocka_unit_test(test_split_frames),
    };
    int rc = cmocka_run_group_tests_name("vision", pure, NULL, NULL);
    return rc | cmocka_run_group_tests_name("vision_model", model, vfx_setup, vfx_teardown);
}
