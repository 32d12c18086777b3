/* dump_plot.c — pictures of one activation dump (see dump_plot.h).
 *
 * Spec: M3-DUMP-3 (names and shapes: attn.block_indices [G, T, K] with -1
 * padding, moe.topk_index [T, k], moe.scores [T, E]), M3-MSA-SELECT-5 (the
 * selected blocks of a row), M3-MOE-ROUTER-2 (the k experts of a token).
 *
 * Large dumps are binned so a picture stays under about 720 x 480 cells per
 * panel: a cell then covers a group of query rows and a group of key blocks,
 * and its colour is the share of (row, head) pairs of the group, among the
 * rows for which the blocks are not in the future, that picked a block of the
 * group (capped at 1).
 */
#include "dump_plot.h"
#include "canvas.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_ROWS = 720, MAX_COLS = 480, PANEL_COLS = 3, MAX_W = 16000, MAX_H = 30000 };

static const unsigned char k_black[3] = {0, 0, 0}, k_grey[3] = {110, 110, 110},
                           k_rule[3] = {220, 220, 220},
                           k_bar[3] = {59, 82, 139}, k_red[3] = {220, 30, 30};

/* The layer tensors named layers.{i}.<suffix>, ascending i. */
typedef struct layer_ref {
    int layer;
    const cf_tensor *t;
} layer_ref;

static int cmp_layer(const void *a, const void *b)
{
    const layer_ref *x = a, *y = b;
    return (x->layer > y->layer) - (x->layer < y->layer);
}

/* Collect the layers.{i}.<suffix> tensors of s into a fresh array (*out, *n). */
static int find_layers(const cf_tset *s, const char *suffix, layer_ref **out, int *n, m3_err *e)
{
    *out = NULL;
    *n = 0;
    layer_ref *v = calloc((size_t)(s->n ? s->n : 1), sizeof *v);
    if (!v)
        return m3_fail(e, "out of memory for the plot");
    for (int i = 0; i < s->n; i++) {
        const char *nm = s->t[i].name;
        if (strncmp(nm, "layers.", 7) != 0)
            continue;
        char *end = NULL;
        long l = strtol(nm + 7, &end, 10);
        if (end == nm + 7 || nm[7] < '0' || nm[7] > '9' || *end != '.' || l > 1000000 ||
            strcmp(end + 1, suffix) != 0)
            continue;
        v[*n].layer = (int)l;
        v[*n].t = &s->t[i];
        (*n)++;
    }
    qsort(v, (size_t)*n, sizeof *v, cmp_layer);
    *out = v;
    return 0;
}

/* A grid of npanel panels, each pw x ph pixels, PANEL_COLS a row, under a
 * header of head_h pixels and above a footer of foot_h pixels. */
static int canvas_for(cf_canvas *c, int npanel, int pw, int ph, int head_h, int foot_h,
                      const char *png_path, m3_err *e)
{
    const int cols = npanel < PANEL_COLS ? npanel : PANEL_COLS;
    const int rows = (npanel + PANEL_COLS - 1) / PANEL_COLS;
    c->w = cols * pw + 20;
    if (c->w < 640)
        c->w = 640;
    c->h = head_h + rows * ph + foot_h;
    if (c->w > MAX_W || c->h > MAX_H)
        return m3_fail(e, "%s: the picture would be %dx%d pixels", png_path, c->w, c->h);
    c->px = malloc((size_t)c->w * (size_t)c->h * 3);
    if (!c->px)
        return m3_fail(e, "out of memory for the plot");
    memset(c->px, 255, (size_t)c->w * (size_t)c->h * 3);
    return 0;
}

/* ---- MSA block selection ----------------------------------------------------------- */

/* One sparse layer's selection binned into R x C cells: share[r * C + c] in
 * [0, 1], or -1 where every row of the group has the blocks in the future. */
typedef struct sel_map {
    int G, T, K, nb; /* heads, rows, slots, blocks (largest id + 1) */
    int R, C, rg, cg; /* cells and the rows / blocks per cell */
    float *share;
} sel_map;

static int sel_build(sel_map *m, const cf_tensor *t, m3_err *e)
{
    memset(m, 0, sizeof *m);
    if (!t->is_int || t->ndim != 3 || t->shape[0] < 1 || t->shape[1] < 1 || t->shape[2] < 1 ||
        t->shape[0] > 4096 || t->shape[1] > (1 << 24) || t->shape[2] > 65536)
        return m3_fail(e, "%s: expected int32 [G, T, K] (M3-DUMP-3)", t->name);
    m->G = (int)t->shape[0];
    m->T = (int)t->shape[1];
    m->K = (int)t->shape[2];
    int maxid = -1;
    for (size_t i = 0; i < t->n; i++) {
        const int32_t v = t->i[i];
        if (v < -1 || v >= m->T)
            return m3_fail(e, "%s: entry %zu is %d, not a block id (-1 or 0..T-1 = %d)", t->name, i,
                           (int)v, m->T - 1);
        maxid = v > maxid ? v : maxid;
    }
    m->nb = maxid + 1 > 0 ? maxid + 1 : 1;
    m->rg = (m->T + MAX_ROWS - 1) / MAX_ROWS;
    m->cg = (m->nb + MAX_COLS - 1) / MAX_COLS;
    m->R = (m->T + m->rg - 1) / m->rg;
    m->C = (m->nb + m->cg - 1) / m->cg;
    const size_t cells = (size_t)m->R * (size_t)m->C;
    float *sel = calloc(cells, sizeof *sel);
    int *elig = calloc(cells + (size_t)m->R, sizeof *elig); /* per row: C + 1 difference slots */
    m->share = malloc(cells * sizeof *m->share);
    if (!sel || !elig || !m->share) {
        free(sel);
        free(elig);
        free(m->share);
        m->share = NULL;
        return m3_fail(e, "out of memory for the plot");
    }
    const size_t GT = (size_t)m->T, K = (size_t)m->K;
    for (int r = 0; r < m->T; r++) {
        int own = -1; /* the row's own block: the largest id selected by any head */
        for (int g = 0; g < m->G; g++)
            for (size_t k = 0; k < K; k++) {
                const int32_t v = t->i[((size_t)g * GT + (size_t)r) * K + k];
                if (v >= 0)
                    sel[(size_t)(r / m->rg) * m->C + (size_t)(v / m->cg)] += 1.0f;
                own = v > own ? v : own;
            }
        if (own >= 0) { /* cells 0 .. own / cg are eligible for this row */
            int *d = elig + (size_t)(r / m->rg) * (size_t)(m->C + 1);
            d[0]++;
            d[own / m->cg + 1]--;
        }
    }
    for (int r = 0; r < m->R; r++) {
        int run = 0;
        const int *d = elig + (size_t)r * (size_t)(m->C + 1);
        for (int c = 0; c < m->C; c++) {
            run += d[c];
            const size_t at = (size_t)r * m->C + (size_t)c;
            float s = run > 0 ? sel[at] / ((float)run * (float)m->G) : -1.0f;
            m->share[at] = s > 1.0f ? 1.0f : s;
        }
    }
    free(sel);
    free(elig);
    return 0;
}

static int cell_px(int n, int room, int lo, int hi)
{
    int v = room / n;
    return v < lo ? lo : v > hi ? hi : v;
}

int cf_plot_selection(const cf_tset *dump, const char *title, const char *png_path, m3_err *e)
{
    layer_ref *ls = NULL;
    int nl = 0;
    if (find_layers(dump, "attn.block_indices", &ls, &nl, e) != 0)
        return -1;
    if (nl == 0) {
        free(ls);
        return m3_fail(e, "%s: the dump has no layers.{i}.attn.block_indices (no sparse layer)",
                       title);
    }
    sel_map *ms = calloc((size_t)nl, sizeof *ms);
    cf_canvas c = {0, 0, NULL};
    int rc = -1;
    if (!ms) {
        m3_fail(e, "out of memory for the plot");
        goto done;
    }
    int maxR = 1, maxC = 1;
    for (int i = 0; i < nl; i++) {
        if (sel_build(&ms[i], ls[i].t, e) != 0)
            goto done;
        maxR = ms[i].R > maxR ? ms[i].R : maxR;
        maxC = ms[i].C > maxC ? ms[i].C : maxC;
    }
    const int cw = cell_px(maxC, 320, 1, 16), rh = cell_px(maxR, 320, 1, 8);
    const int left = 50, top = 34, pw = left + maxC * cw + 20, ph = top + maxR * rh + 24;
    if (canvas_for(&c, nl, pw, ph, 40, 40, png_path, e) != 0)
        goto done;
    char buf[160];
    snprintf(buf, sizeof buf, "MSA block selection: %s", title);
    cf_text(&c, 10, 8, buf, 2, k_black);
    snprintf(buf, sizeof buf, "T = %d query rows down, key blocks across; G = %d index heads, top-%d",
             ms[0].T, ms[0].G, ms[0].K);
    cf_text(&c, 10, 26, buf, 1, k_grey);
    for (int i = 0; i < nl; i++) {
        const sel_map *m = &ms[i];
        const int x0 = 10 + (i % PANEL_COLS) * pw, y0 = 40 + (i / PANEL_COLS) * ph;
        snprintf(buf, sizeof buf, "layers.%d", ls[i].layer);
        cf_text(&c, x0 + left, y0 + 4, buf, 2, k_black);
        snprintf(buf, sizeof buf, "blocks 0..%d", m->nb - 1);
        cf_text(&c, x0 + left, y0 + 22, buf, 1, k_grey);
        const int gx = x0 + left, gy = y0 + top;
        cf_text(&c, x0 + 4, gy, "T 0", 1, k_grey);
        snprintf(buf, sizeof buf, "%d", m->T - 1);
        cf_text(&c, x0 + 4, gy + m->R * rh - 7, buf, 1, k_grey);
        for (int r = 0; r < m->R; r++)
            for (int cc = 0; cc < m->C; cc++) {
                const float s = m->share[(size_t)r * m->C + (size_t)cc];
                unsigned char col[3] = {255, 255, 255};
                if (s == 0.0f)
                    memcpy(col, (const unsigned char[3]){232, 232, 240}, 3);
                else if (s > 0.0f)
                    cf_viridis(0.25 + 0.75 * s, col);
                cf_fill(&c, gx + cc * cw, gy + r * rh, cw, rh, col);
            }
        cf_frame(&c, gx - 1, gy - 1, m->C * cw + 2, m->R * rh + 2, 1, k_grey);
    }
    /* legend */
    const int ly = c.h - 28;
    cf_fill(&c, 0, ly - 8, c.w, 1, k_rule);
    int x = cf_text(&c, 10, ly + 2, "share of heads picking the block:", 1, k_black) + 6;
    cf_fill(&c, x, ly, 14, 12, (const unsigned char[3]){232, 232, 240});
    x = cf_text(&c, x + 18, ly + 2, "0", 1, k_black) + 8;
    static const char *const k_share[4] = {"0.25", "0.5", "0.75", "1"};
    for (int k = 1; k <= 4; k++) {
        unsigned char col[3];
        cf_viridis(0.25 + 0.75 * k / 4.0, col);
        cf_fill(&c, x, ly, 14, 12, col);
        x = cf_text(&c, x + 18, ly + 2, k_share[k - 1], 1, k_black) + 8;
    }
    cf_frame(&c, x, ly, 14, 12, 1, k_grey);
    cf_text(&c, x + 18, ly + 2, "after the own block of the row", 1, k_black);
    rc = cf_save_png(png_path, &c, e);
done:
    for (int i = 0; ms && i < nl; i++)
        free(ms[i].share);
    free(ms);
    free(ls);
    free(c.px);
    return rc;
}

/* ---- MoE routing ------------------------------------------------------------------- */

int cf_plot_routing(const cf_tset *dump, const char *title, const char *png_path, m3_err *e)
{
    layer_ref *ls = NULL;
    int nl = 0;
    if (find_layers(dump, "moe.topk_index", &ls, &nl, e) != 0)
        return -1;
    if (nl == 0) {
        free(ls);
        return m3_fail(e, "%s: the dump has no layers.{i}.moe.topk_index (no MoE layer)", title);
    }
    int64_t **cnt = calloc((size_t)nl, sizeof *cnt);
    int *E = calloc((size_t)nl, sizeof *E);
    cf_canvas c = {0, 0, NULL};
    int rc = -1, maxE = 1, T = 0, k = 0;
    char buf[200];
    if (!cnt || !E) {
        m3_fail(e, "out of memory for the plot");
        goto done;
    }
    for (int i = 0; i < nl; i++) {
        const cf_tensor *t = ls[i].t;
        if (!t->is_int || t->ndim != 2 || t->shape[0] < 1 || t->shape[1] < 1) {
            m3_fail(e, "%s: expected int32 [T, k] (M3-DUMP-3)", t->name);
            goto done;
        }
        snprintf(buf, sizeof buf, "layers.%d.moe.scores", ls[i].layer);
        const cf_tensor *sc = cf_tset_get(dump, buf);
        int ne = 0;
        for (size_t j = 0; j < t->n; j++) {
            if (t->i[j] < 0 || t->i[j] > 65535) {
                m3_fail(e, "%s: entry %zu is %d, not an expert id (0..65535)", t->name, j,
                        (int)t->i[j]);
                goto done;
            }
            ne = t->i[j] + 1 > ne ? t->i[j] + 1 : ne;
        }
        if (sc && sc->ndim == 2 && sc->shape[1] >= ne && sc->shape[1] <= 65536)
            ne = (int)sc->shape[1];
        E[i] = ne;
        cnt[i] = calloc((size_t)ne, sizeof **cnt);
        if (!cnt[i]) {
            m3_fail(e, "out of memory for the plot");
            goto done;
        }
        for (size_t j = 0; j < t->n; j++)
            cnt[i][t->i[j]]++;
        maxE = ne > maxE ? ne : maxE;
        T = (int)t->shape[0];
        k = (int)t->shape[1];
    }
    const int bw = cell_px(maxE, 360, 1, 28), bh = 150, left = 50, top = 30;
    const int pw = left + maxE * bw + 30, ph = top + bh + 30;
    if (canvas_for(&c, nl, pw, ph, 40, 40, png_path, e) != 0)
        goto done;
    snprintf(buf, sizeof buf, "MoE routing: %s", title);
    cf_text(&c, 10, 8, buf, 2, k_black);
    snprintf(buf, sizeof buf, "picks per expert of T = %d tokens x top-%d; red line: the uniform load T k / E",
             T, k);
    cf_text(&c, 10, 26, buf, 1, k_grey);
    for (int i = 0; i < nl; i++) {
        const int x0 = 10 + (i % PANEL_COLS) * pw, y0 = 40 + (i / PANEL_COLS) * ph;
        const cf_tensor *t = ls[i].t;
        int64_t mx = 1;
        for (int x = 0; x < E[i]; x++)
            mx = cnt[i][x] > mx ? cnt[i][x] : mx;
        const double uni = (double)t->n / (double)E[i];
        const double scale = (double)mx > uni ? (double)mx : uni;
        snprintf(buf, sizeof buf, "layers.%d", ls[i].layer);
        cf_text(&c, x0 + left, y0 + 4, buf, 2, k_black);
        const int gx = x0 + left, gy = y0 + top;
        snprintf(buf, sizeof buf, "%lld", (long long)mx);
        cf_text(&c, x0 + 4, gy + bh - (int)(bh * (double)mx / scale), buf, 1, k_grey);
        cf_text(&c, x0 + 4, gy + bh - 7, "0", 1, k_grey);
        for (int x = 0; x < E[i]; x++) {
            const int h = (int)(bh * (double)cnt[i][x] / scale + 0.5);
            cf_fill(&c, gx + x * bw, gy + bh - h, bw > 2 ? bw - 1 : bw, h, k_bar);
        }
        cf_fill(&c, gx, gy + bh, E[i] * bw, 1, k_black);
        const int uy = gy + bh - (int)(bh * uni / scale + 0.5);
        for (int x = 0; x < E[i] * bw; x += 6)
            cf_fill(&c, gx + x, uy, 4, 1, k_red);
        const int step = bw >= 14 ? 1 : (30 + bw - 1) / bw; /* labels >= 30 px apart */
        for (int x = 0; x < E[i]; x += step) {
            snprintf(buf, sizeof buf, "%d", x);
            cf_text(&c, gx + x * bw, gy + bh + 5, buf, 1, k_grey);
        }
        snprintf(buf, sizeof buf, "expert (E = %d)", E[i]);
        cf_text(&c, gx, gy + bh + 16, buf, 1, k_grey);
    }
    cf_fill(&c, 0, c.h - 36, c.w, 1, k_rule);
    cf_fill(&c, 10, c.h - 22, 14, 10, k_bar);
    cf_text(&c, 28, c.h - 21, "tokens routed to the expert", 1, k_black);
    cf_fill(&c, 220, c.h - 17, 14, 1, k_red);
    cf_text(&c, 240, c.h - 21, "uniform load", 1, k_black);
    rc = cf_save_png(png_path, &c, e);
done:
    for (int i = 0; cnt && i < nl; i++)
        free(cnt[i]);
    free(cnt);
    free(E);
    free(ls);
    free(c.px);
    return rc;
}
