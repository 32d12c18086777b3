/* preprocess.h — image and video preprocessing for the vision tower.
 *
 * Spec: M3-VIS-PRE-1 (smart_resize: factor 28, min/max pixels, Python
 * round-half-to-even, aspect ratio > 200 rejected), M3-VIS-PRE-2 (bicubic
 * resize as torchvision performs it on a uint8 CPU tensor: PyTorch's native
 * uint8 antialiased kernel, a = -0.5, support 2*scale when downscaling, int16
 * fixed-point weights, width pass then height pass through a uint8
 * intermediate; exact details in preprocess.c and docs/vision.md),
 * M3-VIS-PRE-3 (rescale and CLIP normalisation, the
 * fused fp32 formula of the upstream processor: (float(x) - fp32(mean*255)) /
 * fp32(std*255)), M3-VIS-PRE-4 (patch rows of 1176 = (c, t, py, px) in the
 * 2x2 merge-block order, the image duplicated into 2 temporal slices),
 * M3-VIS-VIDEO-1 (frames resized with the video bounds to the first frame's
 * target size, padded to an even count, pairs form temporal groups),
 * M3-VIS-PLACE-2 (timestamp text).
 *
 * Ownership: functions that return pixel rows allocate them with malloc; the
 * caller frees them with free().
 */
#ifndef M3_PREPROCESS_H
#define M3_PREPROCESS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "image.h"

typedef struct m3_preprocess_opts {
    int patch_size;          /* 14 */
    int merge_size;          /* 2 */
    int temporal_patch_size; /* 2 */
    int64_t min_pixels;      /* 3136 (images and videos) */
    int64_t max_pixels;      /* 451584 for images, 602112 for videos */
    int do_resize;           /* 1; 0 requires sides that are multiples of patch*merge */
} m3_preprocess_opts;

/* Defaults of the upstream image processor. */
void m3_preprocess_image_defaults(m3_preprocess_opts *o);
/* Defaults of the upstream video processor (max_pixels 768*28*28), resizing on. */
void m3_preprocess_video_defaults(m3_preprocess_opts *o);

/* Target size (out_h, out_w) for an image of height x width (M3-VIS-PRE-1). */
int m3_smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels,
                    int *out_h, int *out_w, m3_err *e);

/* Bicubic antialiased resize of interleaved 8-bit images with nc channels
 * (M3-VIS-PRE-2): src [sh, sw, nc] -> dst [dh, dw, nc]. */
int m3_resize_bicubic_u8(uint8_t *dst, int dh, int dw, const uint8_t *src, int sh, int sw,
                         int nc, m3_err *e);

/* The normalised value of 8-bit sample v in channel c (0..2) (M3-VIS-PRE-3). */
float m3_normalize_sample(uint8_t v, int c);

/* Patchify nframes (even, >= 2) RGB8 frames of h x w (multiples of
 * patch*merge) into rows [nframes/2 * (h/p) * (w/p), 3*2*p*p] (M3-VIS-PRE-4,
 * M3-VIS-VIDEO-1); frames[i] points to [h, w, 3]. rows is caller-allocated. */
void m3_patchify(float *rows, const uint8_t *const *frames, int nframes, int h, int w,
                 int patch, int merge);

/* One image -> pixel rows (allocated, *rows) and grid_thw = [1, h/14, w/14]. */
int m3_preprocess_image(const m3_image *img, const m3_preprocess_opts *o, float **rows,
                        int64_t *nrows, int32_t grid[3], m3_err *e);

/* A video given as nframes frames (already sampled) -> pixel rows and
 * grid_thw = [ceil(nframes/2), h/14, w/14]; every frame is resized to the
 * first frame's target size. */
int m3_preprocess_video(const m3_image *frames, int nframes, const m3_preprocess_opts *o,
                        float **rows, int64_t *nrows, int32_t grid[3], m3_err *e);

/* The timestamp text of temporal group g of a video with nframes original
 * frames at fps: "]<]{t:.1f} seconds[>[" with t = min(2g, nframes-1)/fps
 * (frame indices 0..nframes-1). Returns the length written (< cap), or -1. */
int m3_video_timestamp(char *buf, size_t cap, int group, int nframes, double fps, m3_err *e);

#endif
