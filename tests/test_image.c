/* test_image.c — PNG and JPEG decoding to RGB8, and hostile inputs.
 *
 * Spec: M3-VIS-DECODE-1. Every PNG colour type and bit depth, interlaced
 * and not, is written here with libpng and decoded back; the expected RGB
 * is derived from the written samples by the rules of the clause (16-bit:
 * high byte, except 16-bit grey without alpha, which PIL opens as "I;16"
 * and clips to 255; grey < 8 bits scaled to 0..255; palette looked up; alpha
 * dropped). JPEGs are written with libjpeg; EXIF orientations 1..8 are
 * written into APP1 and must come back transposed as PIL's exif_transpose.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jpeglib.h>
#include <png.h>

#include "image.h"

typedef struct membuf {
    uint8_t *p;
    size_t n, cap;
} membuf;

static void mb_write(png_structp png, png_bytep d, png_size_t n)
{
    membuf *m = png_get_io_ptr(png);
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2;
        m->p = realloc(m->p, m->cap);
    }
    memcpy(m->p + m->n, d, n);
    m->n += n;
}

static void mb_flush(png_structp png)
{
    (void)png;
}

enum { W = 13, H = 9 };

/* sample value (0 .. 2^depth - 1) of channel c at (y, x) */
static unsigned sample(int y, int x, int c, int depth)
{
    unsigned v = (unsigned)(y * 31 + x * 17 + c * 53 + 5);
    return v % (1u << depth);
}

/* Write a PNG of color type ct / depth; expected RGB into want. */
static membuf write_png(int ct, int depth, int interlace, int trns, uint8_t *want)
{
    membuf m = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png)))
        fail_msg("libpng write failed");
    png_set_write_fn(png, &m, mb_write, mb_flush);
    png_set_IHDR(png, info, W, H, depth, ct,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    int nch = ct == PNG_COLOR_TYPE_GRAY ? 1 : ct == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
            : ct == PNG_COLOR_TYPE_RGB ? 3 : ct == PNG_COLOR_TYPE_RGBA ? 4 : 1;
    png_color pal[256];
    if (ct == PNG_COLOR_TYPE_PALETTE) {
        for (int i = 0; i < 256; i++)
            pal[i] = (png_color){(png_byte)(i * 3), (png_byte)(255 - i), (png_byte)(i * 7)};
        png_set_PLTE(png, info, pal, 1 << depth);
        if (trns) {
            png_byte t[4] = {0, 128, 255, 7};
            png_set_tRNS(png, info, t, depth == 1 ? 2 : 4, NULL);
        }
    } else if (trns && ct == PNG_COLOR_TYPE_GRAY) {
        png_color_16 tc = {0};
        tc.gray = (png_uint_16)sample(0, 0, 0, depth);
        png_set_tRNS(png, info, NULL, 0, &tc);
    }
    png_write_info(png, info);
    size_t rowbytes = ((size_t)W * nch * depth + 7) / 8;
    png_bytep img = calloc(H, rowbytes);
    png_bytep rows[H];
    for (int y = 0; y < H; y++) {
        rows[y] = img + y * rowbytes;
        for (int x = 0; x < W; x++) {
            for (int c = 0; c < nch; c++) {
                unsigned v = sample(y, x, c, depth);
                size_t bit = ((size_t)x * nch + c) * depth;
                if (depth == 16) {
                    rows[y][bit / 8] = (png_byte)(v >> 8);
                    rows[y][bit / 8 + 1] = (png_byte)v;
                } else if (depth == 8) {
                    rows[y][bit / 8] = (png_byte)v;
                } else {
                    rows[y][bit / 8] |= (png_byte)(v << (8 - depth - bit % 8));
                }
            }
            uint8_t *o = want + ((size_t)y * W + x) * 3;
            if (ct == PNG_COLOR_TYPE_PALETTE) {
                png_color p = pal[sample(y, x, 0, depth)];
                o[0] = p.red, o[1] = p.green, o[2] = p.blue;
            } else {
                for (int k = 0; k < 3; k++) {
                    int c = nch >= 3 ? k : 0;
                    unsigned v = sample(y, x, c, depth);
                    if (depth == 16 && ct == PNG_COLOR_TYPE_GRAY)
                        o[k] = v > 255 ? 255 : (uint8_t)v; /* PIL I;16 -> RGB clips */
                    else
                        o[k] = depth == 16 ? (uint8_t)(v >> 8)
                                           : (uint8_t)(v * 255u / ((1u << depth) - 1u));
                }
            }
        }
    }
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(img);
    return m;
}

static void check_png(int ct, int depth, int interlace, int trns)
{
    uint8_t want[W * H * 3];
    membuf m = write_png(ct, depth, interlace, trns, want);
    m3_image im;
    m3_err e;
    if (m3_image_decode(&im, m.p, m.n, "t.png", &e) != 0)
        fail_msg("ct %d depth %d interlace %d trns %d: %s", ct, depth, interlace, trns, e.msg);
    assert_int_equal(im.width, W);
    assert_int_equal(im.height, H);
    if (memcmp(im.rgb, want, sizeof want) != 0)
        fail_msg("ct %d depth %d interlace %d trns %d: pixels differ", ct, depth, interlace, trns);
    m3_image_free(&im);
    free(m.p);
}

static void test_png_all_types(void **st)
{
    (void)st;
    static const struct { int ct, depths[5], nd; } t[] = {
        {PNG_COLOR_TYPE_GRAY, {1, 2, 4, 8, 16}, 5},
        {PNG_COLOR_TYPE_GRAY_ALPHA, {8, 16}, 2},
        {PNG_COLOR_TYPE_RGB, {8, 16}, 2},
        {PNG_COLOR_TYPE_RGBA, {8, 16}, 2},
        {PNG_COLOR_TYPE_PALETTE, {1, 2, 4, 8}, 4},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        for (int d = 0; d < t[i].nd; d++)
            for (int il = 0; il < 2; il++) {
                check_png(t[i].ct, t[i].depths[d], il, 0);
                if (t[i].ct == PNG_COLOR_TYPE_PALETTE || t[i].ct == PNG_COLOR_TYPE_GRAY)
                    check_png(t[i].ct, t[i].depths[d], il, 1);
            }
}

/* A JPEG of 32x24 pixels px; with exif_len > 0, exif is written as an APP1 marker. */
static membuf write_jpeg_exif(int ncomp, J_COLOR_SPACE cs, int progressive, const uint8_t *px,
                              const uint8_t *exif, unsigned exif_len);

static membuf write_jpeg(int ncomp, J_COLOR_SPACE cs, int progressive, const uint8_t *px)
{
    return write_jpeg_exif(ncomp, cs, progressive, px, NULL, 0);
}

static membuf write_jpeg_exif(int ncomp, J_COLOR_SPACE cs, int progressive, const uint8_t *px,
                              const uint8_t *exif, unsigned exif_len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    unsigned long outn = 0;
    jpeg_mem_dest(&c, &out, &outn);
    c.image_width = 32;
    c.image_height = 24;
    c.input_components = ncomp;
    c.in_color_space = cs;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 100, TRUE);
    if (progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    if (exif_len)
        jpeg_write_marker(&c, JPEG_APP0 + 1, exif, exif_len);
    while (c.next_scanline < c.image_height) {
        JSAMPROW r = (JSAMPROW)(px + (size_t)c.next_scanline * 32 * ncomp);
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    membuf m = {malloc(outn), outn, outn};
    memcpy(m.p, out, outn);
    free(out);
    return m;
}

static void test_jpeg(void **st)
{
    (void)st;
    static uint8_t rgb[24 * 32 * 3], gray[24 * 32], cmyk[24 * 32 * 4];
    for (int i = 0; i < 24 * 32; i++) {
        rgb[3 * i] = 200, rgb[3 * i + 1] = 100, rgb[3 * i + 2] = 50;
        gray[i] = 90;
        /* Adobe-style inverted CMYK: stored (200, 100, 50, 255) means R,G,B = 200, 100, 50 */
        cmyk[4 * i] = 200, cmyk[4 * i + 1] = 100, cmyk[4 * i + 2] = 50, cmyk[4 * i + 3] = 255;
    }
    struct { int n; J_COLOR_SPACE cs; int prog; const uint8_t *px; int r, g, b; } cases[] = {
        {3, JCS_RGB, 0, rgb, 200, 100, 50}, {3, JCS_RGB, 1, rgb, 200, 100, 50},
        {1, JCS_GRAYSCALE, 0, gray, 90, 90, 90}, {4, JCS_CMYK, 0, cmyk, 200, 100, 50}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        membuf m = write_jpeg(cases[k].n, cases[k].cs, cases[k].prog, cases[k].px);
        m3_image im;
        m3_err e;
        if (m3_image_decode(&im, m.p, m.n, "t.jpg", &e) != 0)
            fail_msg("jpeg case %zu: %s", k, e.msg);
        assert_int_equal(im.width, 32);
        assert_int_equal(im.height, 24);
        for (int i = 0; i < 24 * 32; i++) {
            assert_in_range(im.rgb[3 * i], cases[k].r - 3, cases[k].r + 3);
            assert_in_range(im.rgb[3 * i + 1], cases[k].g - 3, cases[k].g + 3);
            assert_in_range(im.rgb[3 * i + 2], cases[k].b - 3, cases[k].b + 3);
        }
        m3_image_free(&im);
        /* truncated stream: an error, never a partial image */
        assert_int_equal(m3_image_decode(&im, m.p, m.n / 2, "cut.jpg", &e), -1);
        assert_non_null(strstr(e.msg, "cut.jpg"));
        free(m.p);
    }
}

/* EXIF orientation, as PIL's ImageOps.exif_transpose applies it. Source
 * 32x24 in four solid quadrants: top-left red, top-right green, bottom-left
 * blue, bottom-right white. Expected top-left and top-right quadrant colours
 * of the output, worked out by hand for each orientation (2 mirror, 3 rotate
 * 180, 4 flip, 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90
 * counter-clockwise). */
static void test_jpeg_exif_orientation(void **st)
{
    (void)st;
    enum { R, G, B, WH };
    static const uint8_t col[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}};
    static uint8_t px[24 * 32 * 3];
    for (int y = 0; y < 24; y++)
        for (int x = 0; x < 32; x++)
            memcpy(px + (y * 32 + x) * 3, col[(y >= 12) * 2 + (x >= 16)], 3);
    static const int want_tl[9] = {0, R, G, WH, B, R, B, WH, G};
    static const int want_tr[9] = {0, G, R, B, WH, B, R, G, WH};
    for (int o = 1; o <= 8; o++)
        for (int le = 0; le < 2; le++) {
            uint8_t ex[6 + 26] = {'E', 'x', 'i', 'f', 0, 0};
            uint8_t *t = ex + 6;
            static const uint8_t be[26] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3,
                                           0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
            static const uint8_t lit[26] = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0,
                                            1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
            memcpy(t, le ? lit : be, 26);
            t[le ? 18 : 19] = (uint8_t)o; /* the SHORT value */
            membuf m = write_jpeg_exif(3, JCS_RGB, 0, px, ex, sizeof ex);
            m3_image im;
            m3_err e;
            if (m3_image_decode(&im, m.p, m.n, "exif.jpg", &e) != 0)
                fail_msg("orientation %d: %s", o, e.msg);
            int swap = o >= 5;
            assert_int_equal(im.width, swap ? 24 : 32);
            assert_int_equal(im.height, swap ? 32 : 24);
            const uint8_t *tl = im.rgb + (2 * im.width + 2) * 3;
            const uint8_t *tr = im.rgb + (2 * im.width + im.width - 3) * 3;
            for (int k = 0; k < 3; k++) {
                assert_in_range(tl[k], col[want_tl[o]][k] < 128 ? 0 : 230,
                                col[want_tl[o]][k] < 128 ? 25 : 255);
                assert_in_range(tr[k], col[want_tr[o]][k] < 128 ? 0 : 230,
                                col[want_tr[o]][k] < 128 ? 25 : 255);
            }
            m3_image_free(&im);
            free(m.p);
        }
}

static uint32_t crc_of(const uint8_t *p, size_t n)
{
    /* PNG chunk CRC (CRC-32, reflected polynomial 0xEDB88320), bit by bit */
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static void test_hostile(void **st)
{
    (void)st;
    uint8_t want[W * H * 3];
    membuf m = write_png(PNG_COLOR_TYPE_RGB, 8, 0, 0, want);
    m3_image im;
    m3_err e;
    /* zero bytes, unknown signature */
    assert_int_equal(m3_image_decode(&im, m.p, 0, "empty.png", &e), -1);
    assert_non_null(strstr(e.msg, "empty.png"));
    uint8_t junk[16] = "GIF89a.........";
    assert_int_equal(m3_image_decode(&im, junk, sizeof junk, "x.gif", &e), -1);
    assert_non_null(strstr(e.msg, "not a PNG or JPEG"));
    /* truncated at every length: always an error */
    for (size_t n = 8; n < m.n - 12; n += 7)
        assert_int_equal(m3_image_decode(&im, m.p, n, "cut.png", &e), -1);
    /* bad CRC in IHDR */
    uint8_t *bad = malloc(m.n);
    memcpy(bad, m.p, m.n);
    bad[29] ^= 0x55; /* last CRC byte of IHDR (8 sig + 8 len/type + 13 data) */
    assert_int_equal(m3_image_decode(&im, bad, m.n, "crc.png", &e), -1);
    assert_non_null(strstr(e.msg, "crc.png"));
    /* huge and zero dimensions with a valid CRC */
    uint32_t dims[2][2] = {{100000, 100000}, {0, 5}};
    for (int k = 0; k < 2; k++) {
        memcpy(bad, m.p, m.n);
        for (int j = 0; j < 2; j++) {
            uint32_t v = dims[k][j];
            uint8_t *d = bad + 16 + 4 * j;
            d[0] = (uint8_t)(v >> 24), d[1] = (uint8_t)(v >> 16), d[2] = (uint8_t)(v >> 8),
            d[3] = (uint8_t)v;
        }
        uint32_t c = crc_of(bad + 12, 17);
        bad[29] = (uint8_t)(c >> 24), bad[30] = (uint8_t)(c >> 16), bad[31] = (uint8_t)(c >> 8),
        bad[32] = (uint8_t)c;
        assert_int_equal(m3_image_decode(&im, bad, m.n, "dims.png", &e), -1);
        assert_non_null(strstr(e.msg, "dims.png"));
    }
    /* within the side/pixel caps, but far more pixel data than a file of
     * m.n bytes can hold at deflate's best ratio (1032:1): refused before the
     * 768 MiB pixel buffer is allocated, naming the cap */
    memcpy(bad, m.p, m.n);
    const uint32_t big[2] = {32768, 8192}; /* exactly M3_IMAGE_MAX_PIXELS */
    for (int j = 0; j < 2; j++) {
        uint8_t *d = bad + 16 + 4 * j;
        d[0] = (uint8_t)(big[j] >> 24), d[1] = (uint8_t)(big[j] >> 16),
        d[2] = (uint8_t)(big[j] >> 8), d[3] = (uint8_t)big[j];
    }
    uint32_t c = crc_of(bad + 12, 17);
    bad[29] = (uint8_t)(c >> 24), bad[30] = (uint8_t)(c >> 16), bad[31] = (uint8_t)(c >> 8),
    bad[32] = (uint8_t)c;
    assert_int_equal(m3_image_decode(&im, bad, m.n, "short.png", &e), -1);
    assert_non_null(strstr(e.msg, "short.png"));
    assert_non_null(strstr(e.msg, "32768x8192"));
    assert_non_null(strstr(e.msg, "deflate ratio cap 1032:1"));
    /* a baseline JPEG whose SOF0 claims 32768x8192 (the pixel cap) but whose
     * data holds 32x24 pixels: decoding stops at the first warning (data ran
     * out) and fails, naming the file */
    {
        static uint8_t px[24 * 32 * 3];
        membuf j = write_jpeg(3, JCS_RGB, 0, px);
        size_t at = 0;
        for (size_t i = 2; i + 9 < j.n && !at; i++)
            if (j.p[i] == 0xFF && j.p[i + 1] == 0xC0)
                at = i;
        assert_true(at > 0);
        j.p[at + 5] = 0x20, j.p[at + 6] = 0x00; /* height 8192 */
        j.p[at + 7] = 0x80, j.p[at + 8] = 0x00; /* width 32768 */
        assert_int_equal(m3_image_decode(&im, j.p, j.n, "short.jpg", &e), -1);
        assert_non_null(strstr(e.msg, "short.jpg"));
        assert_non_null(strstr(e.msg, "corrupt JPEG"));
        free(j.p);
    }
    /* a progressive JPEG whose SOF2 claims 16000x16000: libjpeg would
     * allocate its whole coefficient array (~1.5 GB) before the data proves
     * short; the M3_JPEG_MAX_MEMORY cap refuses it, naming the cap. The same
     * file claiming 1000x1000 (~6 MB of coefficients) passes the cap and
     * fails as truncated. */
    {
        static uint8_t px[24 * 32 * 3];
        const unsigned sides[2] = {16000, 1000};
        for (int k = 0; k < 2; k++) {
            membuf j = write_jpeg(3, JCS_RGB, 1, px);
            size_t at = 0;
            for (size_t i = 2; i + 9 < j.n && !at; i++)
                if (j.p[i] == 0xFF && j.p[i + 1] == 0xC2)
                    at = i;
            assert_true(at > 0);
            j.p[at + 5] = (uint8_t)(sides[k] >> 8), j.p[at + 6] = (uint8_t)sides[k];
            j.p[at + 7] = (uint8_t)(sides[k] >> 8), j.p[at + 8] = (uint8_t)sides[k];
            assert_int_equal(m3_image_decode(&im, j.p, j.n, "prog.jpg", &e), -1);
            assert_non_null(strstr(e.msg, "prog.jpg"));
            if (k == 0) {
                assert_non_null(strstr(e.msg, "16000x16000 (progressive)"));
                assert_non_null(strstr(e.msg, "M3_JPEG_MAX_MEMORY (512 MiB)"));
            } else {
                assert_non_null(strstr(e.msg, "corrupt JPEG"));
            }
            free(j.p);
        }
    }
    /* a non-interlaced PNG claiming 128x64 (24 KiB of pixels, within the
     * ratio cap for its 124 bytes) with the data of a smaller image: decoded
     * row by row into a growing buffer, it fails as corrupt, naming the file */
    memcpy(bad, m.p, m.n);
    const uint32_t mid[2] = {128, 64};
    for (int j = 0; j < 2; j++) {
        uint8_t *d = bad + 16 + 4 * j;
        d[0] = (uint8_t)(mid[j] >> 24), d[1] = (uint8_t)(mid[j] >> 16),
        d[2] = (uint8_t)(mid[j] >> 8), d[3] = (uint8_t)mid[j];
    }
    c = crc_of(bad + 12, 17);
    bad[29] = (uint8_t)(c >> 24), bad[30] = (uint8_t)(c >> 16), bad[31] = (uint8_t)(c >> 8),
    bad[32] = (uint8_t)c;
    assert_int_equal(m3_image_decode(&im, bad, m.n, "rows.png", &e), -1);
    assert_non_null(strstr(e.msg, "rows.png"));
    assert_non_null(strstr(e.msg, "corrupt PNG"));
    /* a missing file */
    assert_int_equal(m3_image_load(&im, "/nonexistent/m3.png", &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent/m3.png"));
    free(bad);
    free(m.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_all_types),
        cmocka_unit_test(test_jpeg),
        cmocka_unit_test(test_jpeg_exif_orientation),
        cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests_name("image", tests, NULL, NULL);
}
