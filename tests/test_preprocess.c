/* test_preprocess.c — smart_resize, bicubic resize, normalisation, patchify,
 * video padding and timestamps.
 *
 * Spec: M3-VIS-PRE-1..4, M3-VIS-VIDEO-1, M3-VIS-PLACE-2.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "preprocess.h"

static void expect_size(int h, int w, int eh, int ew)
{
    int oh = -1, ow = -1;
    m3_err e;
    assert_int_equal(m3_smart_resize(h, w, 28, 3136, 451584, &oh, &ow, &e), 0);
    assert_int_equal(oh, eh);
    assert_int_equal(ow, ew);
}

static void test_smart_resize(void **st)
{
    (void)st;
    expect_size(70, 140, 56, 140);   /* 70/28 = 2.5 rounds to 2 (half to even) */
    expect_size(98, 140, 112, 140);  /* 98/28 = 3.5 rounds to 4 */
    expect_size(480, 640, 476, 644); /* 17.14 -> 17, 22.86 -> 23 */
    expect_size(28, 28, 56, 56);     /* below min: beta = 2, ceil */
    /* 1 x 200: ratio 200 allowed; h rounds to 0, min branch:
     * beta = sqrt(3136/200) = 3.9598, ceil(3.96/28) = 1, ceil(791.96/28) = 29 */
    expect_size(1, 200, 28, 812);
    /* max branch: 2000^2 -> beta = 2000/672, floor(672/28)*28 = 672: 48x48 patches = 576 tokens */
    expect_size(2000, 2000, 672, 672);
    int oh, ow;
    m3_err e;
    assert_int_equal(m3_smart_resize(1, 201, 28, 3136, 451584, &oh, &ow, &e), -1);
    assert_non_null(strstr(e.msg, "aspect ratio"));
    assert_int_equal(m3_smart_resize(0, 10, 28, 3136, 451584, &oh, &ow, &e), -1);
    /* at the defaults no image gives more than 576 merged tokens */
    for (int h = 100; h <= 6000; h += 377)
        for (int w = 100; w <= 6000; w += 411) {
            assert_int_equal(m3_smart_resize(h, w, 28, 3136, 451584, &oh, &ow, &e), 0);
            assert_true((oh / 14) * (ow / 14) / 4 <= 576);
            assert_int_equal(oh % 28, 0);
            assert_int_equal(ow % 28, 0);
        }
}

static void test_resize_identity_and_constant(void **st)
{
    (void)st;
    uint8_t src[5 * 7 * 3], dst[5 * 7 * 3];
    for (int i = 0; i < 5 * 7 * 3; i++)
        src[i] = (uint8_t)(i * 37 + 11);
    m3_err e;
    assert_int_equal(m3_resize_bicubic_u8(dst, 5, 7, src, 5, 7, 3, &e), 0);
    assert_memory_equal(dst, src, sizeof src);
    /* a constant image stays constant under down- and up-scaling */
    uint8_t c[40 * 30], o[17 * 61];
    memset(c, 201, sizeof c);
    assert_int_equal(m3_resize_bicubic_u8(o, 17, 61, c, 40, 30, 1, &e), 0);
    for (size_t i = 0; i < sizeof o; i++)
        assert_int_equal(o[i], 201);
}

static void test_resize_hand_computed(void **st)
{
    (void)st;
    /* [0, 255] -> 1 sample: scale 2, taps 0 and 1 at x = -0.25, 0.25, equal
     * weights 0.5; 15 fraction bits: 0.5 * 2^16 = 32768 stops the search,
     * so w = 16384 each; (16384 + 255*16384) >> 15 = 128. */
    uint8_t src[2] = {0, 255}, dst[1];
    m3_err e;
    assert_int_equal(m3_resize_bicubic_u8(dst, 1, 1, src, 1, 2, 1, &e), 0);
    assert_int_equal(dst[0], 128);
    /* same along the height axis */
    assert_int_equal(m3_resize_bicubic_u8(dst, 1, 1, src, 2, 1, 1, &e), 0);
    assert_int_equal(dst[0], 128);
    /* overshoot of the cubic kernel is clamped: a step upscaled */
    uint8_t step[4] = {0, 0, 255, 255}, up[8];
    assert_int_equal(m3_resize_bicubic_u8(up, 1, 8, step, 1, 4, 1, &e), 0);
    assert_int_equal(up[0], 0);
    assert_int_equal(up[7], 255);
    for (int i = 1; i < 8; i++)
        assert_true(up[i] >= up[i - 1]);
    assert_int_equal(m3_resize_bicubic_u8(up, 0, 8, step, 1, 4, 1, &e), -1);
}

static void test_normalize(void **st)
{
    (void)st;
    /* (0 - 0.48145466*255) / (0.26862954*255) = -1.7922625 */
    assert_float_equal(m3_normalize_sample(0, 0), -1.7922625, 1e-5);
    /* (255 - 0.40821073*255) / (0.27577711*255) = 2.1458969 */
    assert_float_equal(m3_normalize_sample(255, 2), 2.1458969, 1e-5);
}

static uint8_t px_val(int y, int x, int c, int f)
{
    return (uint8_t)((y * 7 + x * 3 + c * 11 + f * 29) & 255);
}

static void test_patchify_order(void **st)
{
    (void)st;
    enum { H = 56, W = 56 };
    static uint8_t img[H * W * 3];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++)
                img[(y * W + x) * 3 + c] = px_val(y, x, c, 0);
    m3_image im = {W, H, img};
    m3_preprocess_opts o;
    m3_preprocess_image_defaults(&o);
    float *rows;
    int64_t n;
    int32_t g[3];
    m3_err e;
    assert_int_equal(m3_preprocess_image(&im, &o, &rows, &n, g, &e), 0);
    assert_int_equal(n, 16);
    assert_int_equal(g[0], 1);
    assert_int_equal(g[1], 4);
    assert_int_equal(g[2], 4);
    /* row 6 = window (br 0, bc 1), (mh 1, mw 0): patch at y0 = 14, x0 = 28 */
    for (int c = 0; c < 3; c++)
        for (int t = 0; t < 2; t++)
            for (int py = 0; py < 14; py += 5)
                for (int px = 0; px < 14; px += 3) {
                    int k = ((c * 2 + t) * 14 + py) * 14 + px;
                    float want = m3_normalize_sample(px_val(14 + py, 28 + px, c, 0), c);
                    assert_true(rows[6 * 1176 + k] == want);
                }
    free(rows);
}

static void test_video(void **st)
{
    (void)st;
    enum { H = 56, W = 84 };
    static uint8_t fr[3][H * W * 3];
    m3_image frames[3];
    for (int f = 0; f < 3; f++) {
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < 3; c++)
                    fr[f][(y * W + x) * 3 + c] = px_val(y, x, c, f);
        frames[f] = (m3_image){W, H, fr[f]};
    }
    m3_preprocess_opts o;
    m3_preprocess_video_defaults(&o);
    float *rows;
    int64_t n;
    int32_t g[3];
    m3_err e;
    assert_int_equal(m3_preprocess_video(frames, 3, &o, &rows, &n, g, &e), 0);
    assert_int_equal(g[0], 2); /* 3 frames padded to 4 */
    assert_int_equal(g[1], 4);
    assert_int_equal(g[2], 6);
    assert_int_equal(n, 2 * 24);
    /* group 1 = frames 2 and 2 (last repeated): its t=0 and t=1 halves agree */
    const float *r = rows + (size_t)24 * 1176;
    for (int c = 0; c < 3; c++)
        assert_memory_equal(r + (c * 2) * 196, r + (c * 2 + 1) * 196, 196 * sizeof(float));
    /* group 0, t=1 comes from frame 1 */
    assert_true(rows[196] == m3_normalize_sample(px_val(0, 0, 0, 1), 0));
    free(rows);
    /* frames of another size are resized to the first frame's target */
    static uint8_t big[112 * 168 * 3];
    memset(big, 77, sizeof big);
    frames[1] = (m3_image){168, 112, big};
    assert_int_equal(m3_preprocess_video(frames, 2, &o, &rows, &n, g, &e), 0);
    assert_int_equal(g[1], 4);
    assert_int_equal(g[2], 6);
    assert_true(rows[196] == m3_normalize_sample(77, 0));
    free(rows);
    /* resizing off: sizes must already be multiples of 28 */
    o.do_resize = 0;
    frames[1] = (m3_image){W, H, fr[1]};
    m3_image odd = {30, 28, fr[0]};
    assert_int_equal(m3_preprocess_video(&odd, 1, &o, &rows, &n, g, &e), -1);
    assert_non_null(strstr(e.msg, "multiple"));
}

static void test_timestamps(void **st)
{
    (void)st;
    char b[64];
    m3_err e;
    assert_int_equal(m3_video_timestamp(b, sizeof b, 0, 5, 2.0, &e), 17);
    assert_string_equal(b, "]<]0.0 seconds[>[");
    m3_video_timestamp(b, sizeof b, 2, 5, 2.0, &e); /* frame 4 / 2 */
    assert_string_equal(b, "]<]2.0 seconds[>[");
    m3_video_timestamp(b, sizeof b, 3, 5, 2.0, &e); /* min(6, 4) = 4 */
    assert_string_equal(b, "]<]2.0 seconds[>[");
    m3_video_timestamp(b, sizeof b, 1, 5, 3.0, &e); /* 2/3 */
    assert_string_equal(b, "]<]0.7 seconds[>[");
    m3_video_timestamp(b, sizeof b, 1, 9, 8.0, &e); /* 0.25: half to even like Python */
    assert_string_equal(b, "]<]0.2 seconds[>[");
    assert_int_equal(m3_video_timestamp(b, sizeof b, 0, 5, 0.0, &e), -1);
    assert_int_equal(m3_video_timestamp(b, 8, 0, 5, 1.0, &e), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smart_resize),
        cmocka_unit_test(test_resize_identity_and_constant),
        cmocka_unit_test(test_resize_hand_computed),
        cmocka_unit_test(test_normalize),
        cmocka_unit_test(test_patchify_order),
        cmocka_unit_test(test_video),
        cmocka_unit_test(test_timestamps),
    };
    return cmocka_run_group_tests_name("preprocess", tests, NULL, NULL);
}
