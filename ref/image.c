/* image.c — PNG (libpng) and JPEG (libjpeg-turbo) decoding to RGB8.
 *
 * Spec: M3-VIS-DECODE-1. Both decoders report errors through longjmp from
 * the library's error callback back into the decode function; every size is
 * checked against the caps in image.h before the pixel buffer is allocated.
 *
 * Two PIL behaviours are reproduced because the upstream pipeline loads
 * images with PIL (transformers' load_image): 16-bit greyscale PNGs open as
 * mode "I;16", whose conversion to RGB clips every sample above 255 to 255
 * (other 16-bit PNGs keep the high byte); and the EXIF orientation tag
 * (JPEG APP1, PNG eXIf) is applied as ImageOps.exif_transpose does.
 */
#include "image.h"
#include "fileio.h"

#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

void m3_image_free(m3_image *img)
{
    if (!img)
        return;
    free(img->rgb);
    img->rgb = NULL;
    img->width = img->height = 0;
}

static int check_size(const char *name, unsigned long w, unsigned long h, m3_err *e)
{
    if (w == 0 || h == 0)
        return m3_fail(e, "%s: image has zero size (%lux%lu)", name, w, h);
    if (w > M3_IMAGE_MAX_SIDE || h > M3_IMAGE_MAX_SIDE)
        return m3_fail(e, "%s: image %lux%lu exceeds the side limit %d", name, w, h,
                       M3_IMAGE_MAX_SIDE);
    if ((unsigned long long)w * h > M3_IMAGE_MAX_PIXELS)
        return m3_fail(e, "%s: image %lux%lu exceeds the pixel limit %u", name, w, h,
                       M3_IMAGE_MAX_PIXELS);
    return 0;
}

/* ---- EXIF orientation ------------------------------------------------- */

/* The orientation tag (0x0112) of a TIFF-structured EXIF block, 1 if absent
 * or unreadable (a damaged EXIF block is ignored, as PIL ignores it). */
static int exif_orientation(const uint8_t *t, size_t len)
{
    if (len < 8)
        return 1;
    int be = t[0] == 'M' && t[1] == 'M';
    if (!be && !(t[0] == 'I' && t[1] == 'I'))
        return 1;
#define RD16(p) (be ? (unsigned)((p)[0] << 8 | (p)[1]) : (unsigned)((p)[1] << 8 | (p)[0]))
#define RD32(p) (be ? ((uint32_t)(p)[0] << 24 | (uint32_t)(p)[1] << 16 | (uint32_t)(p)[2] << 8 | (p)[3]) \
                    : ((uint32_t)(p)[3] << 24 | (uint32_t)(p)[2] << 16 | (uint32_t)(p)[1] << 8 | (p)[0]))
    if (RD16(t + 2) != 42)
        return 1;
    uint32_t ifd = RD32(t + 4);
    if (ifd > len - 2)
        return 1;
    unsigned n = RD16(t + ifd);
    for (unsigned i = 0; i < n; i++) {
        size_t at = (size_t)ifd + 2 + 12 * (size_t)i;
        if (at + 12 > len)
            return 1;
        if (RD16(t + at) == 0x0112 && RD16(t + at + 2) == 3 /* SHORT */) {
            unsigned v = RD16(t + at + 8);
            return v >= 1 && v <= 8 ? (int)v : 1;
        }
    }
    return 1;
#undef RD16
#undef RD32
}

/* Apply EXIF orientation o (2..8) to img in place, as PIL's exif_transpose:
 * 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90 clockwise,
 * 7 transverse, 8 rotate 90 counter-clockwise. */
static int apply_orientation(m3_image *img, int o, const char *name, m3_err *e)
{
    if (o <= 1)
        return 0;
    size_t W = (size_t)img->width, H = (size_t)img->height;
    int swap = o >= 5;
    size_t ow = swap ? H : W, oh = swap ? W : H;
    uint8_t *out = malloc(W * H * 3);
    if (!out)
        return m3_fail(e, "%s: out of memory applying the EXIF orientation", name);
    for (size_t y = 0; y < oh; y++)
        for (size_t x = 0; x < ow; x++) {
            size_t sx, sy; /* source pixel of output (x, y) */
            switch (o) {
            case 2: sx = W - 1 - x; sy = y; break;
            case 3: sx = W - 1 - x; sy = H - 1 - y; break;
            case 4: sx = x; sy = H - 1 - y; break;
            case 5: sx = y; sy = x; break;
            case 6: sx = y; sy = H - 1 - x; break;
            case 7: sx = W - 1 - y; sy = H - 1 - x; break;
            default: sx = W - 1 - y; sy = x; break; /* 8 */
            }
            memcpy(out + (y * ow + x) * 3, img->rgb + (sy * W + sx) * 3, 3);
        }
    free(img->rgb);
    img->rgb = out;
    img->width = (int)ow;
    img->height = (int)oh;
    return 0;
}

/* Grow *buf, which holds *cap rows of rowb bytes, to twice as many rows
 * (16 at first, never more than h). 0 ok, -1 out of memory (*buf kept). */
static int grow_rows(uint8_t **buf, size_t *cap, size_t h, size_t rowb)
{
    size_t nr = *cap ? 2 * *cap : 16;
    if (nr > h)
        nr = h;
    uint8_t *nb = realloc(*buf, nr * rowb);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = nr;
    return 0;
}

/* Hand the decoded w x h RGB8 buffer to img (which then owns it) and apply
 * the EXIF orientation. */
static int finish_image(m3_image *img, size_t w, size_t h, uint8_t *rgb, int orientation,
                        const char *name, m3_err *e)
{
    img->width = (int)w;
    img->height = (int)h;
    img->rgb = rgb;
    if (apply_orientation(img, orientation, name, e) != 0) {
        m3_image_free(img);
        return -1;
    }
    return 0;
}

/* ---- PNG -------------------------------------------------------------- */

typedef struct png_src {
    const uint8_t *data;
    size_t len, pos;
    const char *name;
    m3_err *e;
    char msg[256];
} png_src;

static void png_read_mem(png_structp png, png_bytep out, png_size_t n)
{
    png_src *src = png_get_io_ptr(png);
    if (n > src->len - src->pos)
        png_error(png, "file is truncated");
    memcpy(out, src->data + src->pos, n);
    src->pos += n;
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_src *src = png_get_error_ptr(png);
    snprintf(src->msg, sizeof src->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg; /* warnings (e.g. known-incorrect sRGB profile) are not errors */
}

static int decode_png(m3_image *img, const uint8_t *data, size_t len, const char *name,
                      m3_err *e)
{
    png_src src = {data, len, 0, name, e, ""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error,
                                             png_on_warning);
    if (!png)
        return m3_fail(e, "%s: out of memory starting the PNG decoder", name);
    png_infop info = png_create_info_struct(png);
    /* volatile: modified between setjmp and a possible longjmp. */
    uint8_t *volatile rgb = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return m3_fail(e, "%s: out of memory starting the PNG decoder", name);
    }
    if (setjmp(png_jmpbuf(png))) {
        free(rgb);
        free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        return m3_fail(e, "%s: corrupt PNG: %s", name, src.msg[0] ? src.msg : "decode error");
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, M3_IMAGE_MAX_SIDE, M3_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(png, 64u << 20);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (check_size(name, w, h, e)) {
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    /* deflate compresses at most M3_PNG_MAX_RATIO:1, so w x h pixels of this
     * depth need at least that many file bytes: a short file claiming a large
     * image is refused before its pixel buffer is allocated */
    unsigned long long pix_bytes = (unsigned long long)w * h * png_get_bit_depth(png, info) *
                                   png_get_channels(png, info) / 8;
    if (pix_bytes / M3_PNG_MAX_RATIO > len) {
        png_destroy_read_struct(&png, &info, NULL);
        return m3_fail(e, "%s: PNG image %lux%lu holds %llu bytes of pixel data, more than "
                          "%zu file bytes can (deflate ratio cap %d:1)",
                       name, (unsigned long)w, (unsigned long)h, pix_bytes, len, M3_PNG_MAX_RATIO);
    }
    int color = png_get_color_type(png, info);
    int depth = png_get_bit_depth(png, info);
    /* Everything to 8-bit RGB, alpha stripped without compositing. */
    if (color == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    /* 16-bit grey without alpha is PIL mode "I;16": read the 16-bit samples
     * and clip (below); every other 16-bit image keeps its high byte. */
    int gray16 = color == PNG_COLOR_TYPE_GRAY && depth == 16;
    if (depth == 16 && !gray16)
        png_set_strip_16(png);
    if ((color == PNG_COLOR_TYPE_GRAY && !gray16) || color == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
    int interlaced = png_get_interlace_type(png, info) != PNG_INTERLACE_NONE;
    (void)png_set_interlace_handling(png);
    png_read_update_info(png, info);
    /* gray16 rows are w samples of 2 bytes (big-endian), others RGB8 */
    size_t rowb = (size_t)w * 3; /* a gray16 row (2w bytes) fits in 3w */
    if (png_get_rowbytes(png, info) != (size_t)w * (gray16 ? 2 : 3))
        png_error(png, "unexpected row layout after conversion");
    if (interlaced) {
        /* Adam7 fills every row in each pass: the whole buffer is needed at
         * once (bounded by the ratio check above). */
        rgb = malloc(rowb * h);
        rows = malloc((size_t)h * sizeof *rows);
        if (!rgb || !rows)
            png_error(png, "out of memory for the pixels");
        for (png_uint_32 y = 0; y < h; y++)
            rows[y] = rgb + (size_t)y * rowb;
        png_read_image(png, rows);
    } else {
        /* Row by row into a buffer that doubles with the rows decoded so
         * far, so a short file claiming a large image fails (truncated)
         * long before it gets the whole w x h x 3 buffer. */
        size_t cap = 0;
        for (png_uint_32 y = 0; y < h; y++) {
            if (y == cap) {
                uint8_t *buf = rgb; /* rgb is volatile (setjmp) */
                if (grow_rows(&buf, &cap, h, rowb) != 0)
                    png_error(png, "out of memory for the pixels");
                rgb = buf;
            }
            png_read_row(png, rgb + (size_t)y * rowb, NULL);
        }
    }
    if (gray16) {
        for (png_uint_32 y = 0; y < h; y++) {
            uint8_t *r = rgb + (size_t)y * rowb;
            /* expand in place from the right so no sample is overwritten early */
            for (size_t x = w; x-- > 0;) {
                uint8_t v = r[2 * x] ? 255 : r[2 * x + 1];
                r[3 * x] = r[3 * x + 1] = r[3 * x + 2] = v;
            }
        }
    }
    png_read_end(png, info);
    int orientation = 1;
    png_uint_32 exif_len = 0;
    png_bytep exif = NULL;
    if (png_get_eXIf_1(png, info, &exif_len, &exif) && exif)
        orientation = exif_orientation(exif, exif_len);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    return finish_image(img, w, h, rgb, orientation, name, e);
}

/* ---- JPEG ------------------------------------------------------------- */

typedef struct jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_on_error(j_common_ptr cinfo)
{
    jpeg_err *je = (jpeg_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, je->msg);
    longjmp(je->jb, 1);
}

static void jpeg_on_message(j_common_ptr cinfo)
{
    (void)cinfo; /* corrupt-data warnings are treated below via num_warnings */
}

static int decode_jpeg(m3_image *img, const uint8_t *data, size_t len, const char *name,
                       m3_err *e)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_err je;
    uint8_t *volatile rgb = NULL;
    uint8_t *volatile row = NULL;
    memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = jpeg_on_error;
    je.pub.output_message = jpeg_on_message;
    je.msg[0] = 0;
    if (setjmp(je.jb)) {
        int code = je.pub.msg_code;
        unsigned long jw = cinfo.image_width, jh = cinfo.image_height;
        int prog = cinfo.progressive_mode;
        jpeg_destroy_decompress(&cinfo);
        free(rgb);
        free(row);
        if (code == JERR_NO_BACKING_STORE || code == JERR_OUT_OF_MEMORY)
            return m3_fail(e, "%s: JPEG %lux%lu%s needs more decoder memory than the cap "
                              "M3_JPEG_MAX_MEMORY (%u MiB)",
                           name, jw, jh, prog ? " (progressive)" : "", M3_JPEG_MAX_MEMORY >> 20);
        return m3_fail(e, "%s: corrupt JPEG: %s", name, je.msg[0] ? je.msg : "decode error");
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff); /* EXIF */
    jpeg_read_header(&cinfo, TRUE);
    int orientation = 1;
    for (jpeg_saved_marker_ptr mk = cinfo.marker_list; mk; mk = mk->next)
        if (mk->marker == JPEG_APP0 + 1 && mk->data_length > 6 &&
            memcmp(mk->data, "Exif\0\0", 6) == 0) {
            orientation = exif_orientation(mk->data + 6, mk->data_length - 6);
            break;
        }
    if (check_size(name, cinfo.image_width, cinfo.image_height, e)) {
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    /* libjpeg's own buffers: a progressive (or multi-scan) image needs its
     * whole coefficient array, allocated in jpeg_start_decompress before the
     * data can prove short, and no file-size bound is sound for it (one
     * end-of-band run codes thousands of blocks). Cap it; libjpeg-turbo then
     * fails with JERR_NO_BACKING_STORE, reported below with the cap. */
    cinfo.mem->max_memory_to_use = M3_JPEG_MAX_MEMORY;
    jpeg_start_decompress(&cinfo);
    size_t w = cinfo.output_width, h = cinfo.output_height;
    int nc = cinfo.output_components;
    /* The pixel buffer grows with the rows decoded so far (doubling up to h)
     * and decoding stops at the first warning (data ran out or is corrupt;
     * rejected below), so a short file claiming a large image never gets
     * the full w*h*3 buffer, nor decodes rows of grey fill. */
    size_t rows_cap = 0;
    row = malloc(w * (size_t)nc);
    if (!row) {
        strcpy(je.msg, "out of memory for the pixels");
        longjmp(je.jb, 1);
    }
    while (cinfo.output_scanline < h && je.pub.num_warnings == 0) {
        size_t y = cinfo.output_scanline;
        if (y == rows_cap) {
            uint8_t *buf = rgb; /* rgb is volatile (setjmp) */
            if (grow_rows(&buf, &rows_cap, h, w * 3) != 0) {
                strcpy(je.msg, "out of memory for the pixels");
                longjmp(je.jb, 1);
            }
            rgb = buf;
        }
        JSAMPROW rp = row;
        jpeg_read_scanlines(&cinfo, &rp, 1);
        uint8_t *dst = rgb + y * w * 3;
        for (size_t x = 0; x < w; x++) {
            if (nc == 3) {
                memcpy(dst + 3 * x, row + 3 * x, 3);
            } else if (nc == 4) {
                /* Adobe CMYK JPEGs store inverted values; as PIL does, treat
                 * the samples as inverted and take R = C*K/255 etc. */
                unsigned c = row[4 * x], m = row[4 * x + 1], yy = row[4 * x + 2],
                         k = row[4 * x + 3];
                dst[3 * x] = (uint8_t)((c * k + 127) / 255);
                dst[3 * x + 1] = (uint8_t)((m * k + 127) / 255);
                dst[3 * x + 2] = (uint8_t)((yy * k + 127) / 255);
            } else {
                dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = row[x];
            }
        }
    }
    /* A truncated stream decodes with warnings and grey fill; reject it. */
    if (je.pub.num_warnings > 0) {
        (*je.pub.format_message)((j_common_ptr)&cinfo, je.msg);
        jpeg_destroy_decompress(&cinfo);
        free(rgb);
        free(row);
        return m3_fail(e, "%s: corrupt JPEG: %s", name, je.msg);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    free(row);
    return finish_image(img, w, h, rgb, orientation, name, e);
}

int m3_image_decode(m3_image *img, const uint8_t *data, size_t len, const char *name, m3_err *e)
{
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memset(img, 0, sizeof *img);
    if (len >= 8 && memcmp(data, png_sig, 8) == 0)
        return decode_png(img, data, len, name, e);
    if (len >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
        return decode_jpeg(img, data, len, name, e);
    return m3_fail(e, "%s: not a PNG or JPEG file (unknown signature)", name);
}

int m3_image_load(m3_image *img, const char *path, m3_err *e)
{
    memset(img, 0, sizeof *img);
    char *buf;
    size_t len;
    if (m3_read_file(path, M3_IMAGE_MAX_FILE, &buf, &len, e) != 0)
        return -1;
    int rc = m3_image_decode(img, (const uint8_t *)buf, len, path, e);
    free(buf);
    return rc;
}
