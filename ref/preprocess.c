/* preprocess.c — smart_resize, torchvision-style bicubic resize, CLIP
 * normalisation and patchify for images and videos.
 *
 * Spec: M3-VIS-PRE-1..4, M3-VIS-VIDEO-1, M3-VIS-PLACE-2.
 *
 * The resize follows PyTorch's native uint8 antialiased bicubic kernel
 * (what torchvision's resize runs for a uint8 CPU tensor with BICUBIC; seen
 * in torchvision 0.26 on the device machine, docs/vision.md): per axis, in
 * double, scale = in/out, support = 2*max(scale, 1), for output i
 * center = scale*(i+0.5), taps xmin = max(trunc(center - support + 0.5), 0)
 * .. min(trunc(center + support + 0.5), in) - 1, weights
 * w_j = cubic_{a=-0.5}((j + xmin - center + 0.5) / max(scale, 1)) divided by
 * their sum; the weights become int16 with P fraction bits, P the largest
 * value < 22 such that round(wmax * 2^(P+1)) < 2^15, each rounded half away
 * from zero. A sample is (2^(P-1) + sum_j src_j * w_j) >> P clamped to
 * [0, 255]. The width pass runs first into a uint8 image, then the height
 * pass; an axis whose size does not change is not filtered.
 */
#include "preprocess.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double clip_mean[3] = {0.48145466, 0.4578275, 0.40821073};
static const double clip_std[3] = {0.26862954, 0.26130258, 0.27577711};

void m3_preprocess_image_defaults(m3_preprocess_opts *o)
{
    o->patch_size = 14;
    o->merge_size = 2;
    o->temporal_patch_size = 2;
    o->min_pixels = 4 * 28 * 28;
    o->max_pixels = 451584;
    o->do_resize = 1;
}

void m3_preprocess_video_defaults(m3_preprocess_opts *o)
{
    m3_preprocess_image_defaults(o);
    o->max_pixels = 768 * 28 * 28;
}

int m3_smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels,
                    int *out_h, int *out_w, m3_err *e)
{
    if (height <= 0 || width <= 0)
        return m3_fail(e, "smart_resize: image size %dx%d (height x width) must be positive",
                       height, width);
    if (factor <= 0 || min_pixels < 0 || max_pixels <= 0)
        return m3_fail(e, "smart_resize: invalid factor %d or pixel bounds [%lld, %lld]", factor,
                       (long long)min_pixels, (long long)max_pixels);
    int lo = height < width ? height : width, hi = height < width ? width : height;
    if ((double)hi / (double)lo > 200.0)
        return m3_fail(e, "smart_resize: image %dx%d has aspect ratio %.3f, above the limit 200",
                       height, width, (double)hi / (double)lo);
    double h = height, w = width, f = factor;
    /* Python round() on a float = round half to even (nearbyint in the
     * default rounding mode). */
    double hb = nearbyint(h / f) * f, wb = nearbyint(w / f) * f;
    if (hb * wb > (double)max_pixels) {
        double beta = sqrt(h * w / (double)max_pixels);
        hb = floor(h / beta / f) * f;
        wb = floor(w / beta / f) * f;
        if (hb < f)
            hb = f;
        if (wb < f)
            wb = f;
    } else if (hb * wb < (double)min_pixels) {
        double beta = sqrt((double)min_pixels / (h * w));
        hb = ceil(h * beta / f) * f;
        wb = ceil(w * beta / f) * f;
    }
    if (hb <= 0 || wb <= 0 || hb > 1e6 || wb > 1e6)
        return m3_fail(e, "smart_resize: image %dx%d gives an unusable target %.0fx%.0f", height,
                       width, hb, wb);
    *out_h = (int)hb;
    *out_w = (int)wb;
    return 0;
}

/* ---- resize ------------------------------------------------------------ */

/* Keys cubic kernel with a = -0.5 (the antialiasing filter), in double. */
static double aa_cubic(double x)
{
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0)
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

typedef struct aa_axis {
    int *xmin, *xsize; /* [out] */
    int16_t *w;        /* [out, maxw] fixed-point weights */
    int maxw;
    int prec;          /* fraction bits of w */
} aa_axis;

static void aa_axis_free(aa_axis *a)
{
    free(a->xmin);
    free(a->xsize);
    free(a->w);
}

/* Taps and int16 fixed-point weights of one axis (in -> out samples). */
static int aa_axis_build(aa_axis *a, int in, int out, m3_err *e)
{
    memset(a, 0, sizeof *a);
    double scale = (double)in / (double)out;
    double support = scale >= 1.0 ? 2.0 * scale : 2.0;
    double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    a->maxw = (int)ceil(support) * 2 + 1;
    a->xmin = malloc((size_t)out * sizeof *a->xmin);
    a->xsize = malloc((size_t)out * sizeof *a->xsize);
    a->w = calloc((size_t)out * (size_t)a->maxw, sizeof *a->w);
    double *wd = calloc((size_t)out * (size_t)a->maxw, sizeof *wd);
    if (!a->xmin || !a->xsize || !a->w || !wd) {
        free(wd);
        aa_axis_free(a);
        return m3_fail(e, "resize: out of memory for the filter of %d -> %d samples", in, out);
    }
    double wmax = 0.0;
    for (int i = 0; i < out; i++) {
        double center = scale * ((double)i + 0.5);
        long long xmin = (long long)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        long long xmax = (long long)(center + support + 0.5);
        if (xmax > in)
            xmax = in;
        int xsize = (int)(xmax - xmin);
        if (xsize > a->maxw)
            xsize = a->maxw;
        if (xsize < 1) { /* cannot happen for in, out >= 1; keep the output defined */
            xsize = 1;
            if (xmin > in - 1)
                xmin = in - 1;
        }
        double *w = wd + (size_t)i * a->maxw;
        double total = 0.0;
        for (int j = 0; j < xsize; j++) {
            w[j] = aa_cubic(((double)(j + xmin) - center + 0.5) * invscale);
            total += w[j];
        }
        for (int j = 0; j < xsize; j++) {
            if (total != 0.0)
                w[j] /= total;
            if (w[j] > wmax)
                wmax = w[j];
        }
        a->xmin[i] = (int)xmin;
        a->xsize[i] = xsize;
    }
    /* Largest precision whose rounded maximum weight still fits int16. */
    int prec;
    for (prec = 0; prec < 22; prec++)
        if ((int)(0.5 + wmax * (double)(1 << (prec + 1))) >= (1 << 15))
            break;
    a->prec = prec;
    for (size_t k = 0; k < (size_t)out * (size_t)a->maxw; k++) {
        double v = wd[k] * (double)(1 << prec);
        a->w[k] = (int16_t)(v < 0 ? v - 0.5 : v + 0.5);
    }
    free(wd);
    return 0;
}

/* One output sample: rounding bias, integer sum, shift, clamp to uint8. */
static uint8_t fixed_sum(const uint8_t *s, size_t stride, const int16_t *w, int n, int prec)
{
    int64_t acc = prec > 0 ? (int64_t)1 << (prec - 1) : 0;
    for (int j = 0; j < n; j++)
        acc += (int64_t)s[(size_t)j * stride] * w[j];
    if (acc < 0)
        return 0;
    acc >>= prec;
    return (uint8_t)(acc > 255 ? 255 : acc);
}

int m3_resize_bicubic_u8(uint8_t *dst, int dh, int dw, const uint8_t *src, int sh, int sw,
                         int nc, m3_err *e)
{
    if (dh <= 0 || dw <= 0 || sh <= 0 || sw <= 0 || nc <= 0)
        return m3_fail(e, "resize: invalid sizes %dx%d -> %dx%d with %d channels", sh, sw, dh, dw,
                       nc);
    /* Width pass into tmp [sh, dw, nc] (uint8), then height pass into dst;
     * an axis whose size does not change is copied. */
    size_t tn = (size_t)sh * (size_t)dw * (size_t)nc;
    uint8_t *tmp = malloc(tn);
    if (!tmp)
        return m3_fail(e, "resize: out of memory for %dx%d intermediate", sh, dw);
    aa_axis ax = {0}, ay = {0};
    if (sw == dw) {
        memcpy(tmp, src, tn);
    } else {
        if (aa_axis_build(&ax, sw, dw, e)) {
            free(tmp);
            return -1;
        }
        for (int y = 0; y < sh; y++)
            for (int ox = 0; ox < dw; ox++) {
                const int16_t *w = ax.w + (size_t)ox * ax.maxw;
                const uint8_t *s = src + ((size_t)y * sw + (size_t)ax.xmin[ox]) * nc;
                for (int c = 0; c < nc; c++)
                    tmp[((size_t)y * dw + ox) * nc + c] =
                        fixed_sum(s + c, (size_t)nc, w, ax.xsize[ox], ax.prec);
            }
    }
    if (sh == dh) {
        memcpy(dst, tmp, tn);
    } else {
        if (aa_axis_build(&ay, sh, dh, e)) {
            aa_axis_free(&ax);
            free(tmp);
            return -1;
        }
        size_t row = (size_t)dw * nc;
        for (int oy = 0; oy < dh; oy++) {
            const int16_t *w = ay.w + (size_t)oy * ay.maxw;
            const uint8_t *s = tmp + (size_t)ay.xmin[oy] * row;
            uint8_t *d = dst + (size_t)oy * row;
            for (size_t k = 0; k < row; k++)
                d[k] = fixed_sum(s + k, row, w, ay.xsize[oy], ay.prec);
        }
    }
    aa_axis_free(&ax);
    aa_axis_free(&ay);
    free(tmp);
    return 0;
}

/* ---- normalise and patchify ---------------------------------------------- */

float m3_normalize_sample(uint8_t v, int c)
{
    /* Fused rescale + normalise of the upstream processor: mean and std as
     * fp32 tensors multiplied by 1/rescale_factor = 255 (fp32 products). */
    float m = (float)clip_mean[c] * 255.0f;
    float s = (float)clip_std[c] * 255.0f;
    return ((float)v - m) / s;
}

void m3_patchify(float *rows, const uint8_t *const *frames, int nframes, int h, int w,
                 int patch, int merge)
{
    int gh = h / patch, gw = w / patch;
    size_t dim = (size_t)3 * 2 * patch * patch;
    size_t r = 0;
    for (int g = 0; g < nframes / 2; g++)
        for (int br = 0; br < gh / merge; br++)
            for (int bc = 0; bc < gw / merge; bc++)
                for (int mh = 0; mh < merge; mh++)
                    for (int mw = 0; mw < merge; mw++) {
                        int y0 = (br * merge + mh) * patch, x0 = (bc * merge + mw) * patch;
                        float *out = rows + r * dim;
                        size_t k = 0;
                        for (int c = 0; c < 3; c++)
                            for (int t = 0; t < 2; t++) {
                                const uint8_t *f = frames[2 * g + t];
                                for (int py = 0; py < patch; py++)
                                    for (int px = 0; px < patch; px++) {
                                        size_t o = ((size_t)(y0 + py) * w + (size_t)(x0 + px)) * 3;
                                        out[k++] = m3_normalize_sample(f[o + c], c);
                                    }
                            }
                        r++;
                    }
}

static int check_opts(const m3_preprocess_opts *o, m3_err *e)
{
    if (o->patch_size <= 0 || o->merge_size <= 0 || o->temporal_patch_size != 2)
        return m3_fail(e, "preprocess: unsupported patch %d / merge %d / temporal patch %d "
                          "(temporal patch must be 2)",
                       o->patch_size, o->merge_size, o->temporal_patch_size);
    return 0;
}

/* Resize (or check) one frame to th x tw; *out is img->rgb or a new buffer
 * (*owned set to 1). */
static int frame_to_size(const m3_image *img, int th, int tw, const m3_preprocess_opts *o,
                         const char *what, uint8_t **out, int *owned, m3_err *e)
{
    *owned = 0;
    if (!img->rgb || img->width <= 0 || img->height <= 0)
        return m3_fail(e, "preprocess: %s is empty", what);
    if (img->height == th && img->width == tw) {
        *out = img->rgb;
        return 0;
    }
    if (!o->do_resize)
        return m3_fail(e, "preprocess: %s is %dx%d but %dx%d is required with resizing off", what,
                       img->height, img->width, th, tw);
    uint8_t *buf = malloc((size_t)th * tw * 3);
    if (!buf)
        return m3_fail(e, "preprocess: out of memory resizing %s", what);
    if (m3_resize_bicubic_u8(buf, th, tw, img->rgb, img->height, img->width, 3, e)) {
        free(buf);
        return m3_fail_prefix(e, "%s", what);
    }
    *out = buf;
    *owned = 1;
    return 0;
}

static int target_size(const m3_image *first, const m3_preprocess_opts *o, int *th, int *tw,
                       m3_err *e)
{
    int factor = o->patch_size * o->merge_size;
    if (o->do_resize)
        return m3_smart_resize(first->height, first->width, factor, o->min_pixels, o->max_pixels,
                               th, tw, e);
    if (first->height % factor || first->width % factor)
        return m3_fail(e, "preprocess: %dx%d is not a multiple of %d and resizing is off",
                       first->height, first->width, factor);
    *th = first->height;
    *tw = first->width;
    return 0;
}

int m3_preprocess_video(const m3_image *frames, int nframes, const m3_preprocess_opts *o,
                        float **rows, int64_t *nrows, int32_t grid[3], m3_err *e)
{
    *rows = NULL;
    *nrows = 0;
    if (check_opts(o, e))
        return -1;
    if (nframes <= 0 || nframes > 1 << 16)
        return m3_fail(e, "preprocess: a video needs 1..65536 frames, got %d", nframes);
    int th, tw;
    if (target_size(&frames[0], o, &th, &tw, e))
        return -1;
    int padded = nframes + (nframes & 1);
    uint8_t **px = calloc((size_t)padded, sizeof *px);
    int *owned = calloc((size_t)padded, sizeof *owned);
    if (!px || !owned) {
        free(px);
        free(owned);
        return m3_fail(e, "preprocess: out of memory for %d frames", nframes);
    }
    int rc = -1;
    for (int i = 0; i < nframes; i++) {
        char what[48];
        snprintf(what, sizeof what, "frame %d", i);
        if (frame_to_size(&frames[i], th, tw, o, what, &px[i], &owned[i], e))
            goto done;
    }
    if (padded > nframes)
        px[nframes] = px[nframes - 1]; /* repeat the last frame (not owned twice) */
    int p = o->patch_size;
    int64_t n = (int64_t)(padded / 2) * (th / p) * (tw / p);
    size_t dim = (size_t)3 * 2 * p * p;
    float *out = malloc((size_t)n * dim * sizeof *out);
    if (!out) {
        m3_fail(e, "preprocess: out of memory for %lld patch rows", (long long)n);
        goto done;
    }
    m3_patchify(out, (const uint8_t *const *)px, padded, th, tw, p, o->merge_size);
    *rows = out;
    *nrows = n;
    grid[0] = padded / 2;
    grid[1] = th / p;
    grid[2] = tw / p;
    rc = 0;
done:
    for (int i = 0; i < nframes; i++)
        if (owned[i])
            free(px[i]);
    free(px);
    free(owned);
    return rc;
}

int m3_preprocess_image(const m3_image *img, const m3_preprocess_opts *o, float **rows,
                        int64_t *nrows, int32_t grid[3], m3_err *e)
{
    /* An image is a one-frame video: padding repeats it into both temporal
     * slices, exactly the processor's expand over t. */
    return m3_preprocess_video(img, 1, o, rows, nrows, grid, e);
}

int m3_video_timestamp(char *buf, size_t cap, int group, int nframes, double fps, m3_err *e)
{
    if (nframes <= 0 || group < 0 || !(fps > 0.0) || !isfinite(fps))
        return m3_fail(e, "video timestamp: invalid group %d / frames %d / fps %g", group,
                       nframes, fps);
    int idx = 2 * group < nframes - 1 ? 2 * group : nframes - 1;
    double t = (double)idx / fps;
    int n = snprintf(buf, cap, "]<]%.1f seconds[>[", t);
    if (n < 0 || (size_t)n >= cap)
        return m3_fail(e, "video timestamp: buffer of %zu bytes too small", cap);
    return n;
}
