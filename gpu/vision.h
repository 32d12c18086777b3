/* vision.h — the M3 vision tower and projector on the GPU, and the
 * multimodal front end of bin/m3-gpu forward (--image / --video / --pixels).
 *
 * Preprocessing (decode, resize, normalise, patchify; M3-VIS-DECODE-1,
 * M3-VIS-PRE-1..4, M3-VIS-VIDEO-1) runs on the host through the reference
 * library (exact); placeholder expansion is ref m3_mm_expand
 * (M3-VIS-PLACE-1/2). On the device: patch embedding (M3-VIS-PATCH-1),
 * pre-LayerNorm and the encoder layers (M3-VIS-LN-1, M3-VIS-LAYER-1,
 * M3-VIS-ATTN-1, M3-VIS-MLP-1, 3D RoPE M3-VIS-ROPE-1..3 with host tables,
 * segments M3-VIS-SEG-1), projector then merge (M3-VIS-PROJ-1,
 * M3-VIS-MERGE-1/2), and the scatter of the features into the placeholder
 * rows (M3-EMB-3). Rounding points per mode as ref/vision.c (M3-NUM-BF16-2).
 * Dump names: the vision.* tensors of ref m3_vision_forward (spec/dump.md).
 *
 * Ownership: every function allocates and frees its own device and host
 * scratch; m3g_vision_prepare hands its results to the caller (ids_out with
 * free(), the device features with m3g_vision_feats_free). Errors: -1 and a
 * message in *e (no printing).
 */
#ifndef M3_GPU_VISION_H
#define M3_GPU_VISION_H

#include <stdint.h>

#include "hip_compat.h"

extern "C" {
#include "err.h"
#include "model.h"
#include "safetensors.h"
#include "tokenizer.h"
}

/* The multimodal options of a forward or generate, as bin/m3-ref takes them. */
typedef struct m3g_vision_request {
    const char *const *image_paths; /* image files, prompt order */
    int n_images;
    const char *video_frames; /* --video: comma-separated frame files of one video, or NULL */
    double fps;               /* --fps of the video (its timestamps, with a tokenizer) */
    const char *pixels_path; /* pixel_values + image_grid_thw safetensors, or NULL */
    int joint;               /* HF joint attention (--vision-joint) */
} m3g_vision_request;

/* Vision features on the device and the prompt rows they replace. */
typedef struct m3g_vision_feats {
    float *feats;  /* device [n, H] */
    int32_t *rows; /* device [n]: row of the expanded prompt for feature row f */
    int64_t n;
} m3g_vision_feats;

/* features_dev [npatch / merge^2, H] = projector-then-merge(tower(pixels)) on
 * the device: the GPU twin of ref m3_vision_forward (same arguments, same
 * checks, same dump names; pixels and grid are host arrays, features_dev a
 * device buffer). mode 0 fp32, 1 bf16. dump may be NULL. */
int m3g_vision_forward(const m3_model *m, const float *pixels, int64_t npatch,
                       const int32_t *grid, int nitems, int mode, int joint, hipStream_t st,
                       float *features_dev, m3_st_writer *dump, m3_err *e);

/* The front end for a prompt ids [n]: preprocess the files (or read
 * pixels_path) on the host, run m3g_vision_forward, expand one marker per
 * item when the ids do not already hold the placeholder runs (as ref
 * m3_mm_prepare), and locate the placeholder rows. tok may be NULL; when set,
 * a video's temporal groups get their timestamp ids (as m3_mm_request.tok:
 * bin/m3-ref generate passes its tokenizer for a --prompt, forward passes
 * none). On success *ids_out [*nout] (malloc) is the prompt to run and *out
 * the features to place with m3g_vision_place. */
int m3g_vision_prepare(const m3_model *m, const m3g_vision_request *r, const int32_t *ids,
                       int64_t n, int mode, const m3_tokenizer *tok, hipStream_t st,
                       m3_st_writer *dump, int32_t **ids_out, int64_t *nout,
                       m3g_vision_feats *out, m3_err *e);

/* x [T, H] (device, the input embeddings of the expanded prompt): copy
 * feature row f into row f->rows[f] (M3-EMB-3). */
hipError_t m3g_vision_place(const m3g_vision_feats *f, float *x, int H, hipStream_t st);

/* Free the device buffers of f (zeroed struct allowed). */
void m3g_vision_feats_free(m3g_vision_feats *f);

/* Run one vision component vector case (vectors/vision/<case>: components
 * vision_patch_embed, vision_layer, vision_tower, vision_projector; the
 * contracts of conformance/runner_ref.c, weights in the public layout, config
 * in case.json params) on the device in the case's mode (*mode_out 0 fp32,
 * 1 bf16), adding the contract's output names to dump for bin/m3-conform. */
int m3g_vision_run_case(const char *dir, hipStream_t st, m3_st_writer *dump, int *mode_out,
                        m3_err *e);

#endif
