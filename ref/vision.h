/* vision.h — the M3 vision tower, projector and 2x2 patch merge.
 *
 * Spec: M3-VIS-PATCH-1 (Conv3d patch embedding as a matvec over rows of
 * 1176 = (c, t, py, px)), M3-VIS-LN-1, M3-VIS-LAYER-1 (pre-LN CLIP encoder
 * layer, q/k/v/out with bias, exact erf GELU, no post-LayerNorm),
 * M3-VIS-ROPE-1..3, M3-VIS-SEG-1 (one attention segment per image; videos in
 * segments of at most segment_max_frames temporal groups with t restarting;
 * Decision 2), M3-VIS-PROJ-1 (projector per patch, THEN merge of each 4
 * consecutive rows), M3-NUM-BF16-2.
 *
 * Ownership: m3_vision_forward allocates its scratch per call and frees it
 * before returning; the caller owns pixels, grid and the output buffer.
 */
#ifndef M3_VISION_H
#define M3_VISION_H

#include <stdint.h>

#include "err.h"
#include "model.h"
#include "numerics.h"
#include "safetensors.h"

typedef struct m3_vision_opts {
    m3_mode mode;
    int joint; /* 1: HF-style joint attention over all items, t = 0..T-1 per item */
} m3_vision_opts;

/* Exact erf GELU: 0.5 x (1 + erf(x / sqrt 2)), evaluated in double. */
float m3_gelu(float x);

/* Number of patch rows described by grid [nitems, 3] (sum of t*h*w), or -1
 * with a message when a grid entry is invalid (non-positive, h or w odd). */
int64_t m3_vision_num_patches(const int32_t *grid, int nitems, int merge, m3_err *e);

/* features [npatch/4, H] = projector-then-merge(tower(pixels)).
 * pixels [npatch, 1176] fp32; grid [nitems, 3] (t, h, w) in patches, the
 * items' rows consecutive in pixels. dump (may be NULL) receives the
 * vision.* tensors of spec/dump.md. */
int m3_vision_forward(const m3_model *m, const float *pixels, int64_t npatch,
                      const int32_t *grid, int nitems, const m3_vision_opts *opts,
                      float *features, m3_st_writer *dump, m3_err *e);

#endif
