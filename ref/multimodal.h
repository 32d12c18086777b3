/* multimodal.h — placeholder expansion and the scatter of vision features
 * into the text model's input embeddings.
 *
 * Spec: M3-VIS-PLACE-1 (an image marker id becomes start 200029, N x image
 * 200025, end 200030 with N = grid_h*grid_w/4; all four ids come from the
 * config, these released values by default), M3-VIS-PLACE-2 (per video
 * temporal group: optional timestamp ids, start, M x video 200026, end),
 * M3-EMB-3 (placeholder rows replaced in order; count mismatch is an error),
 * M3-VIS-SEG-1 / Decision 2 (segmented attention by default, HF joint as an
 * option).
 *
 * Ownership: functions returning arrays allocate them with malloc; the
 * caller frees them with free().
 */
#ifndef M3_MULTIMODAL_H
#define M3_MULTIMODAL_H

#include <stdint.h>

#include "err.h"
#include "model.h"
#include "numerics.h"
#include "safetensors.h"
#include "tokenizer.h"

typedef struct m3_mm_ids {
    int32_t image, video, start, end; /* 200025, 200026, 200029, 200030 */
    int merge;                        /* spatial merge size (2) */
} m3_mm_ids;

/* The ids of the model's config (image/video marker ids and the start/end
 * ids, the released 200025/200026/200029/200030 by default) and the vision
 * merge size. */
void m3_mm_ids_from_config(m3_mm_ids *t, const m3_config *c);

/* One image or video of a prompt, in marker order. For a video, ts_ids[g]
 * (ts_len[g] ids) is the tokenized timestamp text of group g, or ts_ids may
 * be NULL for no timestamps. */
typedef struct m3_mm_item {
    int is_video;
    int32_t grid[3]; /* t, h, w in patches */
    const int32_t *const *ts_ids;
    const int *ts_len;
} m3_mm_item;

/* Expand every single marker id (t->image or t->video) of ids [n] with the
 * next item of the same kind (M3-VIS-PLACE-1/2) into *out [*nout]. Every
 * marker needs an item and every item a marker. */
int m3_mm_expand(const int32_t *ids, int64_t n, const m3_mm_ids *t, const m3_mm_item *items,
                 int nitems, int32_t **out, int64_t *nout, m3_err *e);

/* Number of ids equal to a or b. */
int64_t m3_mm_count(const int32_t *ids, int64_t n, int32_t a, int32_t b);

/* x [n, H] = embedding rows of ids (rounded per mode, M3-EMB-1), with the
 * rows whose id is t->image or t->video replaced in order by feats [nfeat, H]
 * (M3-EMB-3); nfeat must equal the number of such rows. feats may be NULL
 * when nfeat is 0. */
int m3_mm_embed(const m3_model *m, const int32_t *ids, int64_t n, const m3_mm_ids *t,
                const float *feats, int64_t nfeat, m3_mode mode, float *x, m3_err *e);

/* A multimodal request as the CLI receives it. */
typedef struct m3_mm_request {
    const char *const *image_paths; /* image files, in prompt order */
    int n_images;
    const char *const *video_paths; /* frames of one video, or NULL */
    int n_video_frames;
    double fps;                     /* of the video (timestamps) */
    const char *pixels_path;        /* preprocessed pixel_values + image_grid_thw, or NULL */
    int joint;                      /* HF joint attention (comparisons only) */
    m3_mode mode;
    const m3_tokenizer *tok;        /* when set, a video marker expands with the timestamp
                                     * text of each temporal group (M3-VIS-PLACE-2) */
} m3_mm_request;

/* Preprocessed pixel inputs: rows [n, dim] (dim = channels x temporal patch
 * x patch^2) and one (t, h, w) grid per item, in prompt order. */
typedef struct m3_mm_pixels {
    float *rows;
    int64_t n;
    int32_t *grid; /* [nitems, 3] */
    int nitems;
} m3_mm_pixels;

/* Decode and preprocess r's image and video files, or read r->pixels_path,
 * into px (M3-VIS-PRE-*); px is empty when r has no such input. The caller
 * frees px with m3_mm_pixels_free (also after a failure: then px is empty). */
int m3_mm_collect(const m3_model *m, const m3_mm_request *r, m3_mm_pixels *px, m3_err *e);

/* Free px's arrays and empty it. */
void m3_mm_pixels_free(m3_mm_pixels *px);

/* The prompt to run for px's nfeat feature rows: ids as they are when they
 * already hold nfeat placeholders (or px is empty), else one marker per item
 * expanded (M3-VIS-PLACE-1/2; timestamps only when r->tok is set). *ids_out
 * [*nout] is malloc'd. */
int m3_mm_place_ids(const m3_model *m, const m3_mm_request *r, const m3_mm_pixels *px,
                    int64_t nfeat, const int32_t *ids, int64_t n, int32_t **ids_out,
                    int64_t *nout, m3_err *e);

/* Most frames of one --video (M3_MM_MAX_FRAMES) and the split of its
 * comma-separated list: *buf becomes a malloc'd copy of list and *frames a
 * malloc'd array of pointers into it (the caller frees both, also on
 * failure); returns the frame count, or -1 with e set (an empty name, more
 * than M3_MM_MAX_FRAMES frames, out of memory). */
#define M3_MM_MAX_FRAMES 4096
int m3_mm_split_frames(const char *list, char **buf, const char ***frames, m3_err *e);

/* The whole multimodal front end for token-id prompts: decode and
 * preprocess the files (or read pixels_path), run the vision tower (dumping
 * vision.* into dump when non-NULL), expand single markers when ids hold one
 * marker per item (video timestamps are inserted only when r->tok is set) or
 * use ids as they are when they already hold the placeholder runs, and
 * build the input embeddings. On success *x [*nout, H] and *ids_out
 * [*nout] are allocated; with no images, video or pixels the ids are only
 * embedded. */
int m3_mm_prepare(const m3_model *m, const m3_mm_request *r, const int32_t *ids, int64_t n,
                  float **x, int32_t **ids_out, int64_t *nout, m3_st_writer *dump, m3_err *e);

#endif
