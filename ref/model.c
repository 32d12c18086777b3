/* model.c — the M3 text model: open, state (KV / index-K caches), forward.
 *
 * Spec: M3-MODEL-1 (embedding rows, no scaling; pre-norm residual layers;
 * final norm; lm_head), M3-ATTN-PROJ-1, M3-ATTN-QKNORM-1 (per-head q/k norm
 * before RoPE), M3-ROPE-*, M3-MSA-IDX-* and M3-MSA-CACHE-1 (index branch and
 * index-K cache), M3-CACHE-1 (KV caches), M3-CACHE-2 (one-shot prefill, chunked
 * prefill and decode give bit-identical logits), M3-CACHE-3 (rollback),
 * M3-CACHE-4 (capacity / max_position_embeddings errors), M3-NUM-BF16-2 (rounding
 * points owned here: embedding rows, linear outputs of q/k/v/o/index_q/index_k
 * and lm_head, residual adds, logits), M3-DUMP-* (activation dump names).
 *
 * A forward over n tokens walks the layers in order; inside a layer it runs
 * each step over many rows at once (one matmul per projection, the rows routed
 * to each expert batched), attention before the feed-forward. Row t only reads
 * cache rows <= its own position, which are all written by then, and every
 * other step is row-wise with m3_matmul giving m3_matvec's bits, so each
 * row's arithmetic is the same whatever n is: prefill, chunked prefill and
 * decode are bit-identical.
 */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "linear.h"
#include "mlp.h"
#include "moe.h"
#include "msa.h"
#include "norm.h"
#include "progress.h"
#include "rope.h"

/* Prefill runs a layer's attention on chunks of this many rows, then its
 * feed-forward on chunks of M3_FFN_CHUNK rows (bounded scratch; each weight
 * read once per chunk, the experts' weights once per FFN chunk). */
#define M3_ATTN_CHUNK 1024
#define M3_FFN_CHUNK 4096
/* Rows of one MLP or expert batch inside an FFN chunk. */
#define M3_FFN_ROWS 256

/* ------------------------------------------------------------------------ */
/* open / close                                                             */

int m3_model_open(m3_model *m, const char *dir, const m3_model_opts *opts, m3_err *e)
{
    memset(m, 0, sizeof *m);
    if (!dir || !*dir)
        return m3_fail(e, "model: no checkpoint directory given");
    if (strlen(dir) >= sizeof m->dir)
        return m3_fail(e, "model: checkpoint path is longer than %zu bytes", sizeof m->dir - 1);
    memcpy(m->dir, dir, strlen(dir) + 1);

    char path[sizeof m->dir + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    m3_config_opts co = {.lenient = opts ? opts->lenient_config : 0};
    if (m3_config_load(&m->cfg, path, &co, e) != 0)
        goto fail;
    if (m3_store_open(&m->store, dir, e) != 0)
        goto fail;
    if (m3_weights_bind(&m->w, &m->cfg, m->store, e) != 0)
        goto fail;
    return 0;
fail:
    m3_model_close(m);
    return -1;
}

void m3_model_notes(const m3_model *m, char *buf, size_t cap)
{
    if (!cap)
        return;
    buf[0] = 0;
    size_t used = 0;
    if (m->cfg.n_warnings > 0)
        used += (size_t)snprintf(buf, cap, "warning: %s\n", m->cfg.warnings);
    if (m->w.ignored_mtp > 0 && used < cap)
        snprintf(buf + used, cap - used, "note: ignored %d mtp.* tensors\n", m->w.ignored_mtp);
}

void m3_model_close(m3_model *m)
{
    if (!m)
        return;
    m3_weights_free(&m->w);
    m3_store_close(m->store);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------------ */
/* state                                                                    */

struct m3_state {
    m3_mode mode;
    int64_t cap;        /* positions the caches can hold */
    int64_t len;        /* positions in the caches (max over layers) */
    int L;
    int64_t *layer_len; /* [L] positions held by each layer's caches */
    float **kc, **vc;   /* [L] -> [cap, nkv, hd] (rounded in bf16 mode) */
    float **ikc;        /* [L] -> [cap, ihd] on sparse layers, else NULL */
    /* scratch, sized once; a layer runs on chunks of up to `chunk` rows */
    int achunk;         /* rows of one attention pass: min(cap, M3_ATTN_CHUNK) */
    int fchunk;         /* rows of one feed-forward pass: min(cap, M3_FFN_CHUNK) */
    int ffn_rows;       /* rows of one MLP / expert batch: min(fchunk, M3_FFN_ROWS) */
    float *h;           /* [cap, H] residual stream of the rows of one call */
    float *xn;          /* [max(achunk, fchunk), H] normed rows */
    float *q;           /* [achunk, nh * hd] */
    float *att;         /* [achunk, nh * hd] attention outputs */
    float *tmp;         /* [max(achunk, fchunk), H] o_proj / FFN outputs */
    float *iq;          /* [achunk, ih * ihd] */
    float *cos_t, *sin_t; /* [rotary_dim / 2] */
    float *ascr;        /* [m3_attention_scratch(cap - 1, ...)] attention scratch */
    float *bs;          /* [G, max blocks] block scores */
    int32_t *blk;       /* [G, topk] selected blocks */
    int topk;           /* selection width: min(index_topk, blocks of cap); dumps pad to index_topk */
    float *ffn;         /* FFN scratch */
    int32_t *ridx;      /* [fchunk, k] */
    float *rw;          /* [fchunk, k] */
    float *rscores;     /* [fchunk, E] */
    int32_t *rsel;      /* [fchunk] rows routed to one expert */
    m3_progress *progress; /* not owned; NULL: no progress reports */
};

/* calloc of a * b elements of size sz, NULL on overflow or failure. */
static void *alloc3(size_t a, size_t b, size_t sz)
{
    if (a == 0 || b == 0 || sz == 0)
        return calloc(1, 1);
    if (a > SIZE_MAX / b || a * b > SIZE_MAX / sz)
        return NULL;
    return calloc(a * b, sz);
}

void m3_state_free(m3_state *s)
{
    if (!s)
        return;
    for (int l = 0; l < s->L; l++) {
        if (s->kc)
            free(s->kc[l]);
        if (s->vc)
            free(s->vc[l]);
        if (s->ikc)
            free(s->ikc[l]);
    }
    free(s->kc);
    free(s->vc);
    free(s->ikc);
    free(s->layer_len);
    free(s->h);
    free(s->xn);
    free(s->q);
    free(s->att);
    free(s->tmp);
    free(s->iq);
    free(s->cos_t);
    free(s->sin_t);
    free(s->ascr);
    free(s->bs);
    free(s->blk);
    free(s->ffn);
    free(s->ridx);
    free(s->rw);
    free(s->rscores);
    free(s->rsel);
    free(s);
}

static int imax(int a, int b) { return a > b ? a : b; }

m3_state *m3_state_new(const m3_model *m, int64_t max_tokens, m3_mode mode, m3_err *e)
{
    const m3_text_config *c = &m->cfg.text;
    if (max_tokens <= 0) {
        m3_fail(e, "state: max_tokens must be positive (got %lld)", (long long)max_tokens);
        return NULL;
    }
    if (mode != M3_MODE_FP32 && mode != M3_MODE_BF16) {
        m3_fail(e, "state: unknown numeric mode %d", (int)mode);
        return NULL;
    }
    if (c->num_layers <= 0 || c->num_layers > M3_MAX_LAYERS || c->hidden_size <= 0 ||
        c->num_heads <= 0 || c->num_kv_heads <= 0 || c->head_dim <= 0 ||
        c->num_heads % c->num_kv_heads != 0 || c->rotary_dim < 0 || c->rotary_dim % 2 != 0 ||
        c->rotary_dim > c->head_dim) {
        m3_fail(e, "state: config has inconsistent attention sizes (layers %d, heads %d/%d, "
                   "head_dim %d, rotary_dim %d)",
                c->num_layers, c->num_heads, c->num_kv_heads, c->head_dim, c->rotary_dim);
        return NULL;
    }
    int any_sparse = 0, any_moe = 0, any_dense_mlp = 0;
    for (int l = 0; l < c->num_layers; l++) {
        any_sparse |= c->layer_sparse[l] != 0;
        any_moe |= c->layer_moe[l] != 0;
        any_dense_mlp |= c->layer_moe[l] == 0;
    }
    if (any_sparse && (c->index_n_heads != c->num_kv_heads || c->index_head_dim < c->rotary_dim ||
                       c->index_block_size <= 0 || c->index_topk <= 0)) {
        m3_fail(e, "state: config has inconsistent indexer sizes (index heads %d vs kv heads %d, "
                   "index_head_dim %d, block size %d, topk %d)",
                c->index_n_heads, c->num_kv_heads, c->index_head_dim, c->index_block_size,
                c->index_topk);
        return NULL;
    }

    m3_state *s = calloc(1, sizeof *s);
    if (!s) {
        m3_fail(e, "state: out of memory");
        return NULL;
    }
    s->mode = mode;
    s->cap = max_tokens;
    s->L = c->num_layers;
    const size_t cap = (size_t)max_tokens;
    const size_t H = (size_t)c->hidden_size, nh = (size_t)c->num_heads,
                 nkv = (size_t)c->num_kv_heads, hd = (size_t)c->head_dim;
    const size_t G = (size_t)c->index_n_heads, ihd = (size_t)c->index_head_dim;
    int ok = 1;

    s->layer_len = calloc((size_t)s->L, sizeof *s->layer_len);
    s->kc = calloc((size_t)s->L, sizeof *s->kc);
    s->vc = calloc((size_t)s->L, sizeof *s->vc);
    s->ikc = calloc((size_t)s->L, sizeof *s->ikc);
    ok = s->layer_len && s->kc && s->vc && s->ikc;
    for (int l = 0; ok && l < s->L; l++) {
        s->kc[l] = alloc3(cap, nkv * hd, sizeof(float));
        s->vc[l] = alloc3(cap, nkv * hd, sizeof(float));
        ok = s->kc[l] && s->vc[l];
        if (ok && c->layer_sparse[l]) {
            s->ikc[l] = alloc3(cap, ihd, sizeof(float));
            ok = s->ikc[l] != NULL;
        }
    }
    if (!ok) {
        double mib = (double)cap * (double)s->L * (2.0 * (double)(nkv * hd) + (double)ihd) * 4.0 /
                     (1024.0 * 1024.0);
        m3_fail(e, "state: cannot allocate the KV caches for %lld positions (about %.0f MiB)",
                (long long)max_tokens, mib);
        m3_state_free(s);
        return NULL;
    }

    size_t nb_max = (size_t)(any_sparse ? m3_msa_num_blocks(max_tokens - 1, c->index_block_size) : 1);
    s->achunk = max_tokens < M3_ATTN_CHUNK ? (int)max_tokens : M3_ATTN_CHUNK;
    s->fchunk = max_tokens < M3_FFN_CHUNK ? (int)max_tokens : M3_FFN_CHUNK;
    s->ffn_rows = s->fchunk < M3_FFN_ROWS ? s->fchunk : M3_FFN_ROWS;
    const size_t CH = (size_t)s->achunk, CF = (size_t)s->fchunk, FR = (size_t)s->ffn_rows;
    const size_t CX = CH > CF ? CH : CF;
    size_t ffn = 1;
    if (any_dense_mlp)
        ffn = 2 * (size_t)c->dense_intermediate_size * FR;
    if (any_moe) {
        size_t f = m3_moe_rows_scratch(c, s->fchunk, s->ffn_rows);
        if (f > ffn)
            ffn = f;
    }
    size_t kmax = (size_t)imax(c->num_experts_per_tok, 1);
    size_t E = (size_t)imax(c->num_experts, 1);

    s->h = alloc3(cap, H, sizeof(float));
    s->xn = alloc3(CX, H, sizeof(float));
    s->q = alloc3(CH, nh * hd, sizeof(float));
    s->att = alloc3(CH, nh * hd, sizeof(float));
    s->tmp = alloc3(CX, H, sizeof(float));
    s->iq = alloc3(CH, (G ? G : 1) * (ihd ? ihd : 1), sizeof(float));
    s->cos_t = alloc3((size_t)imax(c->rotary_dim / 2, 1), 1, sizeof(float));
    s->sin_t = alloc3((size_t)imax(c->rotary_dim / 2, 1), 1, sizeof(float));
    s->ascr = alloc3(m3_attention_scratch(max_tokens - 1, c->num_heads, c->num_kv_heads, c->head_dim),
                     1, sizeof(float));
    s->bs = alloc3(G ? G : 1, nb_max, sizeof(float));
    /* no row can select more blocks than the capacity has: a huge index_topk must not
     * size scratch or the per-row selection loop */
    s->topk = any_sparse && (size_t)c->index_topk > nb_max ? (int)nb_max : imax(c->index_topk, 1);
    s->blk = alloc3(G ? G : 1, (size_t)s->topk, sizeof(int32_t));
    s->ffn = alloc3(ffn, 1, sizeof(float));
    s->ridx = alloc3(CF, kmax, sizeof(int32_t));
    s->rw = alloc3(CF, kmax, sizeof(float));
    s->rscores = alloc3(CF, E, sizeof(float));
    s->rsel = alloc3(CF, 1, sizeof(int32_t));
    if (!s->h || !s->xn || !s->q || !s->att || !s->tmp || !s->iq || !s->cos_t || !s->sin_t ||
        !s->ascr || !s->bs || !s->blk || !s->ffn || !s->ridx || !s->rw || !s->rscores ||
        !s->rsel) {
        m3_fail(e, "state: cannot allocate scratch for %lld positions", (long long)max_tokens);
        m3_state_free(s);
        return NULL;
    }
    return s;
}

int64_t m3_state_len(const m3_state *s) { return s->len; }

void m3_state_set_progress(m3_state *s, m3_progress *p) { s->progress = p; }

m3_mode m3_state_mode(const m3_state *s) { return s->mode; }

void m3_state_truncate(m3_state *s, int64_t len)
{
    if (len < 0)
        len = 0;
    if (len >= s->len)
        return;
    s->len = len;
    for (int l = 0; l < s->L; l++)
        if (s->layer_len[l] > len)
            s->layer_len[l] = len;
}

/* ------------------------------------------------------------------------ */
/* dump staging: [n, ...] buffers for the names of one call (M3-DUMP-*)     */

typedef struct dump_stage {
    int n;
    float *input, *attn_norm, *attn_out, *post_attn, *ffn_norm, *mlp_out, *output; /* [n, H] */
    int32_t *block_idx;  /* [G, n, K] */
    int32_t *topk_idx;   /* [n, k] */
    float *topk_w;       /* [n, k] */
    float *scores;       /* [n, E] */
} dump_stage;

static void stage_free(dump_stage *d)
{
    free(d->input);
    free(d->attn_norm);
    free(d->attn_out);
    free(d->post_attn);
    free(d->ffn_norm);
    free(d->mlp_out);
    free(d->output);
    free(d->block_idx);
    free(d->topk_idx);
    free(d->topk_w);
    free(d->scores);
    memset(d, 0, sizeof *d);
}

static int stage_alloc(dump_stage *d, const m3_text_config *c, int n, m3_err *e)
{
    memset(d, 0, sizeof *d);
    d->n = n;
    size_t N = (size_t)n, H = (size_t)c->hidden_size;
    d->input = alloc3(N, H, sizeof(float));
    d->attn_norm = alloc3(N, H, sizeof(float));
    d->attn_out = alloc3(N, H, sizeof(float));
    d->post_attn = alloc3(N, H, sizeof(float));
    d->ffn_norm = alloc3(N, H, sizeof(float));
    d->mlp_out = alloc3(N, H, sizeof(float));
    d->output = alloc3(N, H, sizeof(float));
    d->block_idx = alloc3((size_t)imax(c->index_n_heads, 1) * N, (size_t)imax(c->index_topk, 1),
                          sizeof(int32_t));
    d->topk_idx = alloc3(N, (size_t)imax(c->num_experts_per_tok, 1), sizeof(int32_t));
    d->topk_w = alloc3(N, (size_t)imax(c->num_experts_per_tok, 1), sizeof(float));
    d->scores = alloc3(N, (size_t)imax(c->num_experts, 1), sizeof(float));
    if (!d->input || !d->attn_norm || !d->attn_out || !d->post_attn || !d->ffn_norm ||
        !d->mlp_out || !d->output || !d->block_idx || !d->topk_idx || !d->topk_w || !d->scores) {
        stage_free(d);
        return m3_fail(e, "dump: cannot allocate staging buffers for %d rows", n);
    }
    return 0;
}

static int dump_add(m3_st_writer *w, const char *name, m3_dtype dt, int ndim, int64_t d0,
                    int64_t d1, int64_t d2, const void *data, m3_err *e)
{
    int64_t shape[3] = {d0, d1, d2};
    if (m3_st_writer_add(w, name, dt, ndim, shape, data, e) != 0)
        return m3_fail_prefix(e, "dump: adding %s", name);
    return 0;
}

/* Write the per-layer names of layer l for the rows in d. */
static int stage_write(const dump_stage *d, m3_st_writer *w, const m3_text_config *c, int l,
                       m3_err *e)
{
    char name[128];
    const int64_t N = d->n, H = c->hidden_size;
    struct {
        const char *suffix;
        const float *data;
    } rows[] = {
        {"input", d->input},         {"attn_norm", d->attn_norm}, {"attn.output", d->attn_out},
        {"post_attn", d->post_attn}, {"ffn_norm", d->ffn_norm},   {"mlp.output", d->mlp_out},
        {"output", d->output},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        snprintf(name, sizeof name, "layers.%d.%s", l, rows[i].suffix);
        if (dump_add(w, name, M3_F32, 2, N, H, 0, rows[i].data, e) != 0)
            return -1;
    }
    if (c->layer_sparse[l]) {
        snprintf(name, sizeof name, "layers.%d.attn.block_indices", l);
        if (dump_add(w, name, M3_I32, 3, c->index_n_heads, N, c->index_topk, d->block_idx, e) != 0)
            return -1;
    }
    if (c->layer_moe[l]) {
        const int64_t k = c->num_experts_per_tok, E = c->num_experts;
        snprintf(name, sizeof name, "layers.%d.moe.topk_index", l);
        if (dump_add(w, name, M3_I32, 2, N, k, 0, d->topk_idx, e) != 0)
            return -1;
        snprintf(name, sizeof name, "layers.%d.moe.topk_weight", l);
        if (dump_add(w, name, M3_F32, 2, N, k, 0, d->topk_w, e) != 0)
            return -1;
        snprintf(name, sizeof name, "layers.%d.moe.scores", l);
        if (dump_add(w, name, M3_F32, 2, N, E, 0, d->scores, e) != 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* one layer over n rows                                                    */

static void add_round(float *x, const float *y, int n, m3_mode mode)
{
    for (int i = 0; i < n; i++)
        x[i] = m3_round1(x[i] + y[i], mode);
}

/* Linear outputs (M3-NUM-BF16-2 point 3) of n rows: Y [n, W->rows] = rows of
 * W x for X [n, W->cols], rounded per mode. */
static void linear_rows(float *Y, const m3_mat *W, const float *X, int n, m3_mode mode)
{
    m3_matmul(Y, W, X, n);
    m3_round_mode(Y, (size_t)n * (size_t)W->rows, mode);
}

/* Copy rows [n, w] of src into the staging rows t0.. of dst (when dumping). */
static void stage_rows(float *dst, const float *src, int t0, int n, int w)
{
    if (dst)
        memcpy(dst + (size_t)t0 * (size_t)w, src, sizeof(float) * (size_t)n * (size_t)w);
}

/* The attention half of layer l on rows x [n, H] at positions pos0..pos0+n-1,
 * in place (x += attention), n <= s->achunk. Each step runs over all n rows
 * before the next one; the only step that mixes rows is attention (and the
 * indexer), and row t reads cache rows <= pos0 + t only, all written by the
 * steps before it. d: staging for dumps, or NULL; t0: the rows' first
 * staging row. */
static void attn_chunk(const m3_model *m, m3_state *s, int l, float *x, int n, int64_t pos0,
                       dump_stage *d, int t0)
{
    const m3_text_config *c = &m->cfg.text;
    const m3_layer_weights *lw = &m->w.layers[l];
    const m3_mode mode = s->mode;
    const int H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    const int rd = c->rotary_dim;
    const float eps = c->rms_norm_eps;
    const int sparse = c->layer_sparse[l] != 0;
    const int G = c->index_n_heads, ihd = c->index_head_dim, B = c->index_block_size;
    const int K = s->topk, Kd = c->index_topk; /* selection width; dump width (-1 padded) */
    const size_t kvw = (size_t)nkv * (size_t)hd, qw = (size_t)nh * (size_t)hd;
    const size_t iqw = (size_t)G * (size_t)ihd, Hs = (size_t)H;
    float *kc = s->kc[l] + (size_t)pos0 * kvw, *vc = s->vc[l] + (size_t)pos0 * kvw;
    float *ikc = sparse ? s->ikc[l] + (size_t)pos0 * (size_t)ihd : NULL;

    if (d)
        stage_rows(d->input, x, t0, n, H);
    /* attention input norm */
    for (int t = 0; t < n; t++)
        m3_rmsnorm(s->xn + (size_t)t * Hs, x + (size_t)t * Hs, &lw->input_norm, H, eps, mode);
    if (d)
        stage_rows(d->attn_norm, s->xn, t0, n, H);

    /* q, k, v projections; k and v go straight into the cache rows pos0.. */
    linear_rows(s->q, &lw->q, s->xn, n, mode);
    linear_rows(kc, &lw->k, s->xn, n, mode);
    linear_rows(vc, &lw->v, s->xn, n, mode);
    if (sparse) { /* lightning indexer: same normed input, own norms, same RoPE */
        linear_rows(s->iq, &lw->index_q, s->xn, n, mode);
        linear_rows(ikc, &lw->index_k, s->xn, n, mode);
    }
    for (int t = 0; t < n; t++) {
        float *q = s->q + (size_t)t * qw, *krow = kc + (size_t)t * kvw;
        /* per-head q/k norm before RoPE (M3-ATTN-QKNORM-1) */
        m3_rmsnorm_heads(q, nh, hd, &lw->q_norm, eps, mode);
        m3_rmsnorm_heads(krow, nkv, hd, &lw->k_norm, eps, mode);
        /* partial rotate-half RoPE with this position's tables */
        m3_rope_table(s->cos_t, s->sin_t, pos0 + t, rd, c->rope_theta, mode);
        m3_rope_apply(q, nh, hd, rd, s->cos_t, s->sin_t, mode);
        m3_rope_apply(krow, nkv, hd, rd, s->cos_t, s->sin_t, mode);
        if (sparse) {
            float *iq = s->iq + (size_t)t * iqw, *ikrow = ikc + (size_t)t * (size_t)ihd;
            m3_rmsnorm_heads(iq, G, ihd, &lw->index_q_norm, eps, mode);
            m3_rmsnorm_heads(ikrow, 1, ihd, &lw->index_k_norm, eps, mode);
            m3_rope_apply(iq, G, ihd, rd, s->cos_t, s->sin_t, mode);
            m3_rope_apply(ikrow, 1, ihd, rd, s->cos_t, s->sin_t, mode);
        }
    }

    /* block selection and attention, row by row */
    for (int t = 0; t < n; t++) {
        const int64_t pos = pos0 + t;
        const int32_t *blocks = NULL;
        if (sparse) {
            int nb = m3_msa_num_blocks(pos, B);
            m3_msa_block_scores(s->bs, s->iq + (size_t)t * iqw, s->ikc[l], pos, G, ihd, B);
            m3_msa_select(s->blk, s->bs, G, nb, pos, B, K, c->index_local_blocks,
                          c->index_init_blocks);
            blocks = s->blk;
            if (d)
                for (int g = 0; g < G; g++) {
                    int32_t *dr = d->block_idx + ((size_t)g * (size_t)d->n + (size_t)(t0 + t)) * (size_t)Kd;
                    memcpy(dr, s->blk + (size_t)g * (size_t)K, sizeof(int32_t) * (size_t)K);
                    for (int j = K; j < Kd; j++)
                        dr[j] = -1;
                }
        }
        m3_attention_row(s->att + (size_t)t * qw, s->q + (size_t)t * qw, s->kc[l], s->vc[l], pos,
                         nh, nkv, hd, blocks, sparse ? K : 0, B, s->ascr, mode);
    }
    linear_rows(s->tmp, &lw->o, s->att, n, mode);
    if (d)
        stage_rows(d->attn_out, s->tmp, t0, n, H);
    add_round(x, s->tmp, n * H, mode);
    if (d)
        stage_rows(d->post_attn, x, t0, n, H);
}

/* The feed-forward half of layer l on rows x [n, H], in place (x += FFN),
 * n <= s->fchunk; rows are independent here. */
static void ffn_chunk(const m3_model *m, m3_state *s, int l, float *x, int n, dump_stage *d,
                      int t0)
{
    const m3_text_config *c = &m->cfg.text;
    const m3_layer_weights *lw = &m->w.layers[l];
    const m3_mode mode = s->mode;
    const int H = c->hidden_size;
    const float eps = c->rms_norm_eps;
    const size_t Hs = (size_t)H;

    for (int t = 0; t < n; t++)
        m3_rmsnorm(s->xn + (size_t)t * Hs, x + (size_t)t * Hs, &lw->post_norm, H, eps, mode);
    if (d)
        stage_rows(d->ffn_norm, s->xn, t0, n, H);
    if (c->layer_moe[l]) {
        const int k = c->num_experts_per_tok, E = c->num_experts;
        m3_moe_rows(s->tmp, s->xn, n, lw, c, s->ridx, s->rw, s->rscores, s->rsel, s->ffn,
                    s->ffn_rows, mode);
        if (d) {
            memcpy(d->topk_idx + (size_t)t0 * (size_t)k, s->ridx, sizeof(int32_t) * (size_t)n * (size_t)k);
            memcpy(d->topk_w + (size_t)t0 * (size_t)k, s->rw, sizeof(float) * (size_t)n * (size_t)k);
            memcpy(d->scores + (size_t)t0 * (size_t)E, s->rscores, sizeof(float) * (size_t)n * (size_t)E);
        }
    } else {
        for (int b0 = 0; b0 < n; b0 += s->ffn_rows) {
            int nb = n - b0 < s->ffn_rows ? n - b0 : s->ffn_rows;
            m3_mlp_rows(s->tmp + (size_t)b0 * Hs, s->xn + (size_t)b0 * Hs, nb, &lw->mlp_gate,
                        &lw->mlp_up, &lw->mlp_down, c, s->ffn, mode);
        }
    }
    if (d)
        stage_rows(d->mlp_out, s->tmp, t0, n, H);
    add_round(x, s->tmp, n * H, mode);
    if (d)
        stage_rows(d->output, x, t0, n, H);
}

/* Layer l on rows x [n, H] at positions pos0..: attention on chunks of
 * s->achunk rows, then the feed-forward on chunks of s->fchunk rows. A row's
 * arithmetic is the same whatever the chunks (the attention of row t needs
 * only the caches of rows <= t; the FFN of a row only that row), so this is
 * bit-identical to one row at a time (M3-CACHE-2). */
static void layer_rows(const m3_model *m, m3_state *s, int l, float *x, int n, int64_t pos0,
                       dump_stage *d)
{
    const size_t H = (size_t)m->cfg.text.hidden_size;
    if (s->progress)
        m3_progress_stage(s->progress, "layer", l, m->cfg.text.num_layers);
    for (int t0 = 0; t0 < n; t0 += s->achunk) {
        int nc = n - t0 < s->achunk ? n - t0 : s->achunk;
        attn_chunk(m, s, l, x + (size_t)t0 * H, nc, pos0 + t0, d, t0);
    }
    for (int t0 = 0; t0 < n; t0 += s->fchunk) {
        int nc = n - t0 < s->fchunk ? n - t0 : s->fchunk;
        ffn_chunk(m, s, l, x + (size_t)t0 * H, nc, d, t0);
        if (s->progress) /* a row is done when its feed-forward is */
            m3_progress_add(s->progress, nc);
    }
}

/* ------------------------------------------------------------------------ */
/* forward                                                                  */

/* Context checks shared by the entry points: n rows appended after `have`. */
static int check_context(const m3_model *m, const m3_state *s, int64_t have, int n, m3_err *e)
{
    if (n == 0)
        return m3_fail(e, "forward: empty input (0 tokens)");
    if (n < 0)
        return m3_fail(e, "forward: negative token count %d", n);
    if (have + n > s->cap)
        return m3_fail(e, "context overflow: %lld cached + %d new positions exceed the state "
                          "capacity of %lld",
                       (long long)have, n, (long long)s->cap);
    int64_t maxpos = m->cfg.text.max_position_embeddings;
    if (maxpos > 0 && have + n > maxpos)
        return m3_fail(e, "context overflow: %lld cached + %d new positions exceed "
                          "max_position_embeddings %lld of %s/config.json",
                       (long long)have, n, (long long)maxpos, m->dir);
    return 0;
}

/* The eagle3 tap layer ids, ascending, duplicates kept (M3-EAGLE-TAP-1,
 * M3-DUMP-4: residual streams entering layers (2, L/2, L-3), clamped). */
static void eagle3_taps(int L, int taps[3])
{
    taps[0] = 2 < L - 1 ? 2 : L - 1;
    taps[1] = L / 2;
    taps[2] = L - 3 > 0 ? L - 3 : 0;
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (taps[j] < taps[i]) {
                int t = taps[i];
                taps[i] = taps[j];
                taps[j] = t;
            }
}

/* Rows s->h [n, H] hold the (rounded) embeddings; run all layers, the final
 * norm and lm_head. */
static int forward_hidden(const m3_model *m, m3_state *s, int n, float *logits,
                          m3_st_writer *dump, m3_err *e)
{
    const m3_text_config *c = &m->cfg.text;
    const int H = c->hidden_size, V = c->vocab_size, L = c->num_layers;
    const size_t N = (size_t)n;
    const int64_t pos0 = s->len;
    dump_stage st;
    float *aux = NULL, *dlogits = NULL;
    int taps[3];
    int rc = -1;

    memset(&st, 0, sizeof st);
    eagle3_taps(L, taps);
    if (dump) {
        if (stage_alloc(&st, c, n, e) != 0)
            return -1;
        aux = alloc3(N, 3 * (size_t)H, sizeof(float));
        if (!logits)
            logits = dlogits = alloc3(N, (size_t)V, sizeof(float));
        if (!aux || !logits) {
            m3_fail(e, "dump: cannot allocate staging buffers for %d rows", n);
            goto out;
        }
        if (dump_add(dump, "embeddings", M3_F32, 2, n, H, 0, s->h, e) != 0)
            goto out;
    }

    for (int l = 0; l < L; l++) {
        if (aux)
            for (int j = 0; j < 3; j++)
                if (taps[j] == l)
                    for (int t = 0; t < n; t++)
                        memcpy(aux + ((size_t)t * 3 + (size_t)j) * (size_t)H,
                               s->h + (size_t)t * (size_t)H, sizeof(float) * (size_t)H);
        layer_rows(m, s, l, s->h, n, pos0, dump ? &st : NULL);
        s->layer_len[l] = pos0 + n;
        if (dump && stage_write(&st, dump, c, l, e) != 0)
            goto out;
    }
    s->len = pos0 + n;

    /* final norm (in place over the residual rows) and lm_head */
    for (int t = 0; t < n; t++) {
        float *xr = s->h + (size_t)t * (size_t)H;
        m3_rmsnorm(xr, xr, &m->w.final_norm, H, c->rms_norm_eps, s->mode);
    }
    if (logits)
        linear_rows(logits, &m->w.lm_head, s->h, n, s->mode);
    if (dump) {
        if (dump_add(dump, "final_norm", M3_F32, 2, n, H, 0, s->h, e) != 0 ||
            dump_add(dump, "logits", M3_F32, 2, n, V, 0, logits, e) != 0 ||
            dump_add(dump, "eagle3.aux", M3_F32, 2, n, 3 * (int64_t)H, 0, aux, e) != 0)
            goto out;
    }
    rc = 0;
out:
    if (rc != 0) { /* a dump failure part-way: leave the state as it was */
        for (int l = 0; l < L; l++)
            s->layer_len[l] = pos0;
        s->len = pos0;
    }
    stage_free(&st);
    free(aux);
    free(dlogits);
    return rc;
}

/* All layers must hold the same positions for a whole-model forward. */
static int check_layers_aligned(const m3_state *s, m3_err *e)
{
    for (int l = 0; l < s->L; l++)
        if (s->layer_len[l] != s->len)
            return m3_fail(e, "forward: layer %d holds %lld positions but the state holds %lld "
                              "(state used by m3_layer_forward; use a fresh state)",
                           l, (long long)s->layer_len[l], (long long)s->len);
    return 0;
}

int m3_forward(const m3_model *m, m3_state *s, const int32_t *tokens, int n, float *logits,
               m3_st_writer *dump, m3_err *e)
{
    const m3_text_config *c = &m->cfg.text;
    const int H = c->hidden_size, V = c->vocab_size;
    if (check_context(m, s, s->len, n, e) != 0 || check_layers_aligned(s, e) != 0)
        return -1;
    if (!tokens)
        return m3_fail(e, "forward: no token array given");
    for (int t = 0; t < n; t++) /* M3-EMB-2: rejected, never clamped */
        if (tokens[t] < 0 || tokens[t] >= V)
            return m3_fail(e, "token %d at position %lld is out of range [0, %d)", (int)tokens[t],
                           (long long)(s->len + t), V);
    /* embedding rows, no scaling (M3-EMB-1); a bf16 rounding point */
    for (int t = 0; t < n; t++) {
        float *xr = s->h + (size_t)t * (size_t)H;
        for (int i = 0; i < H; i++)
            xr[i] = m3_round1(m3_mat_at(&m->w.embed, tokens[t], i), s->mode);
    }
    return forward_hidden(m, s, n, logits, dump, e);
}

int m3_forward_embeds(const m3_model *m, m3_state *s, const float *x, int n, float *logits,
                      m3_st_writer *dump, m3_err *e)
{
    const int H = m->cfg.text.hidden_size;
    if (check_context(m, s, s->len, n, e) != 0 || check_layers_aligned(s, e) != 0)
        return -1;
    if (!x)
        return m3_fail(e, "forward: no embedding rows given");
    for (size_t i = 0; i < (size_t)n * (size_t)H; i++)
        s->h[i] = m3_round1(x[i], s->mode);
    return forward_hidden(m, s, n, logits, dump, e);
}

int m3_layer_forward(const m3_model *m, m3_state *s, int layer, float *x, int n,
                     m3_st_writer *dump, m3_err *e)
{
    const m3_text_config *c = &m->cfg.text;
    if (layer < 0 || layer >= c->num_layers)
        return m3_fail(e, "layer_forward: layer %d is out of range [0, %d)", layer, c->num_layers);
    const int64_t pos0 = s->layer_len[layer];
    if (check_context(m, s, pos0, n, e) != 0)
        return -1;
    if (!x)
        return m3_fail(e, "layer_forward: no input rows given");
    /* the residual stream is a bf16 rounding point */
    m3_round_mode(x, (size_t)n * (size_t)c->hidden_size, s->mode);
    dump_stage st;
    memset(&st, 0, sizeof st);
    if (dump && stage_alloc(&st, c, n, e) != 0)
        return -1;
    layer_rows(m, s, layer, x, n, pos0, dump ? &st : NULL);
    s->layer_len[layer] = pos0 + n;
    if (s->layer_len[layer] > s->len)
        s->len = s->layer_len[layer];
    int rc = 0;
    if (dump)
        rc = stage_write(&st, dump, c, layer, e);
    stage_free(&st);
    return rc;
}
