/* multimodal.c — placeholder expansion, vision front end and feature
 * scatter for multimodal prompts.
 *
 * Spec: M3-VIS-PLACE-1, M3-VIS-PLACE-2, M3-EMB-1, M3-EMB-3, M3-VIS-SEG-1,
 * M3-VIS-PRE-1..4, M3-VIS-VIDEO-1, M3-VEC-6 (pixel_values / image_grid_thw
 * inputs).
 */
#include "multimodal.h"

#include <stdlib.h>
#include <string.h>

#include "image.h"
#include "preprocess.h"
#include "vision.h"

void m3_mm_ids_from_config(m3_mm_ids *t, const m3_config *c)
{
    t->image = c->image_token_id > 0 ? c->image_token_id : 200025;
    t->video = c->video_token_id > 0 ? c->video_token_id : 200026;
    t->start = c->image_start_token_id > 0 ? c->image_start_token_id : 200029;
    t->end = c->image_end_token_id > 0 ? c->image_end_token_id : 200030;
    t->merge = c->has_vision && c->vision.spatial_merge_size > 0 ? c->vision.spatial_merge_size : 2;
}

int64_t m3_mm_count(const int32_t *ids, int64_t n, int32_t a, int32_t b)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k += ids[i] == a || ids[i] == b;
    return k;
}

static int64_t item_tokens(const m3_mm_item *it, int merge)
{
    return (int64_t)it->grid[1] * it->grid[2] / ((int64_t)merge * merge);
}

int m3_mm_expand(const int32_t *ids, int64_t n, const m3_mm_ids *t, const m3_mm_item *items,
                 int nitems, int32_t **out, int64_t *nout, m3_err *e)
{
    *out = NULL;
    *nout = 0;
    int merge = t->merge > 0 ? t->merge : 2;
    /* Pass 1: match markers to items and size the output. */
    int next_img = 0, next_vid = 0;
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] != t->image && ids[i] != t->video) {
            total++;
            continue;
        }
        int video = ids[i] == t->video;
        int *next = video ? &next_vid : &next_img;
        while (*next < nitems && items[*next].is_video != video)
            (*next)++;
        if (*next >= nitems)
            return m3_fail(e, "placeholder expansion: %s marker at index %lld has no %s left",
                           video ? "video" : "image", (long long)i, video ? "video" : "image");
        const m3_mm_item *it = &items[*next];
        if (it->grid[0] <= 0 || it->grid[1] <= 0 || it->grid[2] <= 0 || it->grid[1] % merge ||
            it->grid[2] % merge)
            return m3_fail(e, "placeholder expansion: item %d has invalid grid (%d, %d, %d)",
                           *next, it->grid[0], it->grid[1], it->grid[2]);
        int groups = video ? it->grid[0] : 1;
        for (int g = 0; g < groups; g++) {
            total += 2 + item_tokens(it, merge);
            if (video && it->ts_ids)
                total += it->ts_len[g];
        }
        if (!video && it->grid[0] != 1)
            return m3_fail(e, "placeholder expansion: image item %d has grid_t %d (must be 1)",
                           *next, it->grid[0]);
        (*next)++;
        if (total > ((int64_t)1 << 31))
            return m3_fail(e, "placeholder expansion: more than 2^31 tokens");
    }
    for (int k = 0; k < nitems; k++) {
        int used = items[k].is_video ? k < next_vid : k < next_img;
        if (!used)
            return m3_fail(e, "placeholder expansion: %s %d has no marker in the prompt "
                              "(%d items given)",
                           items[k].is_video ? "video" : "image", k, nitems);
    }
    int32_t *o = malloc((size_t)(total > 0 ? total : 1) * sizeof *o);
    if (!o)
        return m3_fail(e, "placeholder expansion: out of memory for %lld ids", (long long)total);
    /* Pass 2: write. */
    next_img = next_vid = 0;
    int64_t w = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] != t->image && ids[i] != t->video) {
            o[w++] = ids[i];
            continue;
        }
        int video = ids[i] == t->video;
        int *next = video ? &next_vid : &next_img;
        while (items[*next].is_video != video)
            (*next)++;
        const m3_mm_item *it = &items[(*next)++];
        int groups = video ? it->grid[0] : 1;
        int64_t per = item_tokens(it, merge);
        for (int g = 0; g < groups; g++) {
            if (video && it->ts_ids)
                for (int j = 0; j < it->ts_len[g]; j++)
                    o[w++] = it->ts_ids[g][j];
            o[w++] = t->start;
            for (int64_t j = 0; j < per; j++)
                o[w++] = video ? t->video : t->image;
            o[w++] = t->end;
        }
    }
    *out = o;
    *nout = w;
    return 0;
}

int m3_mm_embed(const m3_model *m, const int32_t *ids, int64_t n, const m3_mm_ids *t,
                const float *feats, int64_t nfeat, m3_mode mode, float *x, m3_err *e)
{
    const int H = m->cfg.text.hidden_size, V = m->cfg.text.vocab_size;
    int64_t slots = m3_mm_count(ids, n, t->image, t->video);
    if (slots != nfeat)
        return m3_fail(e, "multimodal: the prompt has %lld image/video placeholder tokens "
                          "(ids %d/%d) but the vision tower produced %lld feature rows",
                       (long long)slots, (int)t->image, (int)t->video, (long long)nfeat);
    int64_t f = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V)
            return m3_fail(e, "token %d at index %lld is out of range [0, %d)", (int)ids[i],
                           (long long)i, V);
        float *xr = x + (size_t)i * H;
        if (ids[i] == t->image || ids[i] == t->video) {
            memcpy(xr, feats + (size_t)f * H, (size_t)H * sizeof *xr);
            f++;
        } else {
            for (int j = 0; j < H; j++)
                xr[j] = m3_round1(m3_mat_at(&m->w.embed, ids[i], j), mode);
        }
    }
    return 0;
}

/* ---- front end ------------------------------------------------------------ */

static int pix_append(m3_mm_pixels *p, const float *rows, int64_t n, const int32_t g[3], int dim,
                      m3_err *e)
{
    float *nr = realloc(p->rows, (size_t)(p->n + n) * dim * sizeof *nr);
    if (!nr)
        return m3_fail(e, "multimodal: out of memory for %lld patch rows", (long long)(p->n + n));
    p->rows = nr;
    int32_t *ng = realloc(p->grid, (size_t)(p->nitems + 1) * 3 * sizeof *ng);
    if (!ng)
        return m3_fail(e, "multimodal: out of memory for grids");
    p->grid = ng;
    memcpy(p->rows + (size_t)p->n * dim, rows, (size_t)n * dim * sizeof *rows);
    memcpy(p->grid + 3 * p->nitems, g, 3 * sizeof *g);
    p->n += n;
    p->nitems++;
    return 0;
}

static int load_pixels(m3_mm_pixels *p, const char *path, int dim, m3_err *e)
{
    m3_store *s = NULL;
    if (m3_store_open(&s, path, e))
        return -1;
    int rc = -1;
    const m3_tensor *pv = m3_store_get(s, "pixel_values");
    const m3_tensor *gt = m3_store_get(s, "image_grid_thw");
    if (!pv || !gt) {
        m3_fail(e, "%s: needs tensors pixel_values and image_grid_thw", path);
        goto done;
    }
    if (pv->dtype != M3_F32 || pv->ndim != 2 || pv->shape[1] != dim) {
        m3_fail(e, "%s: pixel_values must be F32 [N, %d]", path, dim);
        goto done;
    }
    if ((gt->dtype != M3_I32 && gt->dtype != M3_I64) || gt->ndim != 2 || gt->shape[1] != 3 ||
        gt->shape[0] < 1 || gt->shape[0] > 4096) {
        m3_fail(e, "%s: image_grid_thw must be I32 or I64 [n, 3] with 1 <= n <= 4096", path);
        goto done;
    }
    int n = (int)gt->shape[0];
    p->grid = malloc((size_t)n * 3 * sizeof *p->grid);
    p->rows = malloc((size_t)(pv->shape[0] > 0 ? pv->shape[0] : 1) * dim * sizeof *p->rows);
    if (!p->grid || !p->rows) {
        m3_fail(e, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < 3 * n; i++) {
        int64_t v = gt->dtype == M3_I32 ? ((const int32_t *)gt->data)[i]
                                        : ((const int64_t *)gt->data)[i];
        if (v <= 0 || v > (1 << 20)) {
            m3_fail(e, "%s: image_grid_thw[%d][%d] = %lld is out of range", path, i / 3, i % 3,
                    (long long)v);
            goto done;
        }
        p->grid[i] = (int32_t)v;
    }
    memcpy(p->rows, pv->data, (size_t)pv->shape[0] * dim * sizeof *p->rows);
    p->n = pv->shape[0];
    p->nitems = n;
    rc = 0;
done:
    m3_store_close(s);
    return rc;
}

/* Tokenized timestamp texts of a video item's temporal groups. */
typedef struct timestamps {
    int32_t **ids;
    int *len;
    int n;
} timestamps;

static void timestamps_free(timestamps *ts)
{
    for (int g = 0; g < ts->n; g++)
        free(ts->ids[g]);
    free(ts->ids);
    free(ts->len);
    memset(ts, 0, sizeof *ts);
}

/* Fill ts with the ids of "]<]{t:.1f} seconds[>[" for each temporal group of
 * the video item it (M3-VIS-PLACE-2) and point the item at them. */
static int video_timestamps(m3_mm_item *it, const m3_mm_request *r, timestamps *ts, m3_err *e)
{
    int groups = it->grid[0];
    ts->ids = calloc((size_t)groups, sizeof *ts->ids);
    ts->len = calloc((size_t)groups, sizeof *ts->len);
    if (!ts->ids || !ts->len)
        return m3_fail(e, "multimodal: out of memory for %d timestamps", groups);
    ts->n = groups;
    for (int g = 0; g < groups; g++) {
        char text[64];
        int len = m3_video_timestamp(text, sizeof text, g, r->n_video_frames, r->fps, e);
        if (len < 0)
            return -1;
        size_t n = 0;
        if (m3_tokenizer_encode(r->tok, text, (size_t)len, 1, &ts->ids[g], &n, e) != 0)
            return m3_fail_prefix(e, "video timestamp %d", g);
        ts->len[g] = (int)n;
    }
    it->ts_ids = (const int32_t *const *)ts->ids;
    it->ts_len = ts->len;
    return 0;
}

void m3_mm_pixels_free(m3_mm_pixels *px)
{
    free(px->rows);
    free(px->grid);
    memset(px, 0, sizeof *px);
}

int m3_mm_split_frames(const char *list, char **buf, const char ***frames, m3_err *e)
{
    int n = 0;
    *buf = strdup(list);
    *frames = malloc(M3_MM_MAX_FRAMES * sizeof **frames);
    if (!*buf || !*frames)
        return m3_fail(e, "out of memory for the --video frame list");
    for (char *s = *buf, *tok; (tok = strsep(&s, ",")) != NULL;) {
        if (!*tok)
            return m3_fail(e, "--video: empty frame name in the list");
        if (n == M3_MM_MAX_FRAMES)
            return m3_fail(e, "--video: more than %d frames", M3_MM_MAX_FRAMES);
        (*frames)[n++] = tok;
    }
    return n;
}

int m3_mm_collect(const m3_model *m, const m3_mm_request *r, m3_mm_pixels *px, m3_err *e)
{
    memset(px, 0, sizeof *px);
    if (!r || (r->n_images == 0 && r->n_video_frames == 0 && !r->pixels_path))
        return 0;
    if (!m->cfg.has_vision || !m->w.has_vision)
        return m3_fail(e, "%s: images or pixels were given but the checkpoint has no vision "
                          "tower",
                       m->dir);
    if (r->pixels_path && (r->n_images > 0 || r->n_video_frames > 0))
        return m3_fail(e, "multimodal: give either pixel inputs or image/video files, not both");
    const m3_vision_config *vc = &m->cfg.vision;
    const int dim = vc->num_channels * vc->temporal_patch_size * vc->patch_size * vc->patch_size;
    m3_preprocess_opts io, vo;
    m3_preprocess_image_defaults(&io);
    m3_preprocess_video_defaults(&vo);
    io.patch_size = vo.patch_size = vc->patch_size;
    io.merge_size = vo.merge_size = vc->spatial_merge_size;
    if (r->pixels_path && load_pixels(px, r->pixels_path, dim, e))
        goto fail;
    for (int i = 0; i < r->n_images; i++) {
        m3_image img;
        float *rows = NULL;
        int64_t nr = 0;
        int32_t g[3];
        if (m3_image_load(&img, r->image_paths[i], e))
            goto fail;
        int bad = m3_preprocess_image(&img, &io, &rows, &nr, g, e);
        m3_image_free(&img);
        if (bad) {
            m3_fail_prefix(e, "%s", r->image_paths[i]);
            goto fail;
        }
        bad = pix_append(px, rows, nr, g, dim, e);
        free(rows);
        if (bad)
            goto fail;
    }
    if (r->n_video_frames > 0) {
        m3_image *fr = calloc((size_t)r->n_video_frames, sizeof *fr);
        float *rows = NULL;
        int64_t nr = 0;
        int32_t g[3];
        int bad = !fr;
        if (bad)
            m3_fail(e, "multimodal: out of memory for %d frames", r->n_video_frames);
        for (int i = 0; !bad && i < r->n_video_frames; i++)
            bad = m3_image_load(&fr[i], r->video_paths[i], e);
        if (!bad)
            bad = m3_preprocess_video(fr, r->n_video_frames, &vo, &rows, &nr, g, e);
        for (int i = 0; fr && i < r->n_video_frames; i++)
            m3_image_free(&fr[i]);
        free(fr);
        if (!bad)
            bad = pix_append(px, rows, nr, g, dim, e);
        free(rows);
        if (bad)
            goto fail;
    }
    return 0;
fail:
    m3_mm_pixels_free(px);
    return -1;
}

int m3_mm_place_ids(const m3_model *m, const m3_mm_request *r, const m3_mm_pixels *px,
                    int64_t nfeat, const int32_t *ids, int64_t n, int32_t **ids_out,
                    int64_t *nout, m3_err *e)
{
    *ids_out = NULL;
    *nout = 0;
    m3_mm_ids t;
    m3_mm_ids_from_config(&t, &m->cfg);
    int64_t slots = m3_mm_count(ids, n, t.image, t.video);
    if (px->nitems == 0 || slots == nfeat) { /* placeholder runs already present */
        int32_t *use = malloc((size_t)(n > 0 ? n : 1) * sizeof *use);
        if (!use)
            return m3_fail(e, "multimodal: out of memory");
        memcpy(use, ids, (size_t)n * sizeof *use);
        *ids_out = use;
        *nout = n;
        return 0;
    }
    /* one marker per item to expand */
    m3_mm_item *items = calloc((size_t)px->nitems, sizeof *items);
    timestamps ts = {0};
    int rc = -1;
    if (!items) {
        m3_fail(e, "multimodal: out of memory");
        goto done;
    }
    const int has_video = r->n_video_frames > 0;
    for (int i = 0; i < px->nitems; i++) {
        memcpy(items[i].grid, px->grid + 3 * i, sizeof items[i].grid);
        /* pixel inputs: grid_t > 1 means a video; files: the video is last */
        items[i].is_video = r->pixels_path ? px->grid[3 * i] > 1
                                           : (has_video && i == px->nitems - 1);
    }
    if (r->tok && has_video && !r->pixels_path &&
        video_timestamps(&items[px->nitems - 1], r, &ts, e))
        goto done;
    if (m3_mm_expand(ids, n, &t, items, px->nitems, ids_out, nout, e)) {
        m3_fail_prefix(e, "the prompt has %lld placeholder ids, neither the %lld of the "
                          "features nor one marker per image/video",
                       (long long)slots, (long long)nfeat);
        goto done;
    }
    rc = 0;
done:
    free(items);
    timestamps_free(&ts);
    return rc;
}

int m3_mm_prepare(const m3_model *m, const m3_mm_request *r, const int32_t *ids, int64_t n,
                  float **x, int32_t **ids_out, int64_t *nout, m3_st_writer *dump, m3_err *e)
{
    *x = NULL;
    *ids_out = NULL;
    *nout = 0;
    const int H = m->cfg.text.hidden_size;
    m3_mm_ids t;
    m3_mm_ids_from_config(&t, &m->cfg);
    m3_mm_pixels p;
    float *feats = NULL;
    int32_t *use_ids = NULL;
    int64_t nuse = 0, nfeat = 0;
    int rc = -1;
    if (m3_mm_collect(m, r, &p, e))
        return -1;
    if (p.nitems > 0) {
        const m3_vision_config *vc = &m->cfg.vision;
        int group = vc->spatial_merge_size * vc->spatial_merge_size;
        nfeat = p.n / group;
        feats = malloc((size_t)(nfeat > 0 ? nfeat : 1) * H * sizeof *feats);
        if (!feats) {
            m3_fail(e, "multimodal: out of memory for %lld feature rows", (long long)nfeat);
            goto done;
        }
        m3_vision_opts vopt = {r->mode, r->joint};
        if (m3_vision_forward(m, p.rows, p.n, p.grid, p.nitems, &vopt, feats, dump, e))
            goto done;
    }
    if (m3_mm_place_ids(m, r, &p, nfeat, ids, n, &use_ids, &nuse, e))
        goto done;
    float *xx = malloc((size_t)(nuse > 0 ? nuse : 1) * H * sizeof *xx);
    if (!xx) {
        m3_fail(e, "multimodal: out of memory for %lld embedding rows", (long long)nuse);
        goto done;
    }
    if (m3_mm_embed(m, use_ids, nuse, &t, feats, nfeat, r ? r->mode : M3_MODE_FP32, xx, e)) {
        free(xx);
        goto done;
    }
    *x = xx;
    *ids_out = use_ids;
    *nout = nuse;
    use_ids = NULL;
    rc = 0;
done:
    m3_mm_pixels_free(&p);
    free(feats);
    free(use_ids);
    return rc;
}
