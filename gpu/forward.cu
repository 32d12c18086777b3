/* forward.cu — see forward.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "rope.h"
}

#include "forward.h"
#include "hip_check.h"
#include "kernels/common.cuh"

/* Copy a device tensor to the host and add it to the writer. */
static int dump_dev(m3_st_writer *w, const char *name, m3_dtype dt, int ndim, int64_t d0,
                    int64_t d1, int64_t d2, const void *dev, hipStream_t st, m3_err *e)
{
    int64_t shape[3] = {d0, d1, d2};
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    void *h = malloc(n * 4);
    if (!h)
        return m3_fail(e, "dump: out of host memory for %s", name);
    if (M3G_HIP(e, hipStreamSynchronize(st)) ||
        M3G_HIP(e, hipMemcpy(h, dev, n * 4, hipMemcpyDeviceToHost))) {
        m3_fail_prefix(e, "dump: copying %s back", name);
        free(h);
        return -1;
    }
    /* appended: the calls of a chunked prefill concatenate their rows (M3-DUMP-2;
     * the row axis of [G, T, K] block indices is the second) */
    int rc = m3_st_writer_append(w, name, dt, ndim, shape, h, ndim == 3 ? 1 : 0, e);
    if (rc != 0)
        m3_fail_prefix(e, "dump");
    free(h);
    return rc;
}

/* The eagle3.aux slots (0..2) that the residual stream entering layer l of
 * L fills: the taps min(2, L-1), L/2, max(L-3, 0) in ascending order,
 * duplicates kept (M3-DUMP-4). Returns how many slots it wrote to slot. */
static int eagle_tap(int L, int l, int *slot)
{
    int taps[3] = {2 < L - 1 ? 2 : L - 1, L / 2, L - 3 > 0 ? L - 3 : 0}, hit = 0;
    for (int i = 0; i < 3; i++) /* ascending, duplicates kept (M3-DUMP-4) */
        for (int j = i + 1; j < 3; j++)
            if (taps[j] < taps[i]) {
                int t = taps[i];
                taps[i] = taps[j];
                taps[j] = t;
            }
    for (int i = 0; i < 3; i++)
        if (taps[i] == l)
            slot[hit++] = i;
    return hit;
}

/* Rows [off[s], off[s] + T[s]) of the device tensor dev [rows, cols] (4-byte
 * elements) into each sequence's dump writer. */
static int dump_seqs(const gpu_batch *bt, const int *off, const char *name, m3_dtype dt,
                     int64_t cols, const void *dev, hipStream_t st, m3_err *e)
{
    for (int s = 0; s < bt->n; s++)
        if (bt->dump[s] && dump_dev(bt->dump[s], name, dt, 2, bt->T[s], cols, 0,
                                    (const char *)dev + (size_t)off[s] * (size_t)cols * 4, st, e))
            return -1;
    return 0;
}

/* The common part of an attention prologue for the T rows of one sequence
 * at positions pos0.. (b: its gpu_sess_view: page table and RoPE tables); no jobs. */
static void seq_prologue_init(const gpu_sess *b, int T, int pos0, m3g_prologue *p)
{
    const m3_text_config *c = &b->m->cfg.text;
    memset(p, 0, sizeof *p);
    p->T = T;
    p->B = c->index_block_size > 0 ? c->index_block_size : 128;
    p->rd = c->rotary_dim;
    p->mode = b->mode;
    p->pos0 = pos0;
    p->page_table = b->pages;
    p->cos_t = b->cos_t;
    p->sin_t = b->sin_t;
    p->eps = c->rms_norm_eps;
}

/* Append layer l's cache writes for that sequence to p (P0: the cache row
 * of position pos0, identity paging inside the sequence's region): V into
 * its cache (bf16 conversion, or the fp32 copy of the staged rows; none
 * when the projection wrote it there), QK-norm + RoPE of K into the paged K
 * cache, and on sparse layers of index K into the paged index-K cache and
 * its bf16 copy (with the range words). Needs 3 free job slots. */
static void seq_cache_jobs(const gpu_sess *b, const dev_layer *d, int l, size_t P0,
                           m3g_prologue *p)
{
    const m3_text_config *c = &b->m->cfg.text;
    const int nkv = c->num_kv_heads, hd = c->head_dim, ihd = c->index_head_dim;
    m3g_pro_job *j = &p->job[p->njobs];
    if (b->vraw) { /* V rows staged: bf16 cache rows, or copied into this region */
        memset(j, 0, sizeof *j);
        j->src = b->vraw;
        j->nheads = nkv, j->hd = hd;
        if (b->vc16)
            j->dst16 = b->vc16[l] + P0 * nkv * hd;
        else
            j->dst = b->vc[l] + P0 * nkv * hd;
        j++;
    }
    memset(j, 0, sizeof *j); /* K: the bf16 cache written by the RoPE epilogue, or fp32 */
    j->src = b->kraw;
    j->w = d->k_norm, j->w_dtype = d->k_norm_dt;
    j->nheads = nkv, j->hd = hd;
    if (b->kc16)
        j->dst16 = b->kc16[l], j->paged = 2;
    else
        j->dst = b->kc[l], j->paged = 1;
    j++;
    if (c->layer_sparse[l]) {
        memset(j, 0, sizeof *j);
        j->src = b->ikraw;
        j->w = d->ik_norm, j->w_dtype = d->ik_norm_dt;
        j->nheads = 1, j->hd = ihd;
        j->dst = b->ikc[l], j->paged = 1;
        if (b->ik16[l]) { /* bf16 mode: the indexer streams a bf16 copy (same values) */
            j->dst16 = b->ik16[l] + P0 * ihd;
            j->rng = b->ikr + 2 * l;
        }
        j++;
    }
    p->njobs = (int)(j - p->job);
}

/* The per-sequence part of layer l's attention for the T rows of one
 * sequence at positions pos0.. (b: its gpu_sess_view; P0: the cache row of
 * position pos0, identity paging inside the sequence's region): V / K /
 * index-K cache writes (one m3g_attn_prologue launch; skipped when
 * cache_done: the caller's prologue did them), MSA indexer + selection,
 * attention into b->att. q / kraw / vraw / iq / ikraw hold the projections
 * (q and iq with QK-norm and RoPE already applied). */
static int seq_attention(gpu_sess *b, const dev_layer *d, int l, int T, int pos0, size_t P0,
                         int cache_done, m3_st_writer *dump, m3_err *e)
{
    const m3_text_config *c = &b->m->cfg.text;
    hipStream_t st = b->st;
    const int mode = b->mode;
    const int nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    const int G = c->index_n_heads, ihd = c->index_head_dim, K = c->index_topk;
    const int B = c->index_block_size > 0 ? c->index_block_size : 128;
    const int sparse = c->layer_sparse[l] != 0;
    const int nbmax = (pos0 + T - 1) / B + 1;
    char name[160];

    if (!cache_done) { /* V / K / index-K cache writes in one launch */
        m3g_prologue pro;
        seq_prologue_init(b, T, pos0, &pro);
        seq_cache_jobs(b, d, l, P0, &pro);
        M3G_TRY(e, m3g_attn_prologue(&pro, st), fail);
    }
    {
        const int32_t *blocks = NULL;
        if (sparse) {
            /* block scores + golden-order top-K in one launch (falls back to the two
             * launchers for shapes the fused kernel does not take) */
            M3G_TRY(
                e,
                m3g_msa_indexer_ex(b->blk, b->bs, b->iq,
                                   b->ik16[l] ? (const void *)b->ik16[l] : (const void *)b->ikc[l],
                                   b->ik16[l] ? M3G_BF16 : M3G_F32, b->pages, B, pos0, T, G, ihd,
                                   nbmax, K, c->index_local_blocks, c->index_init_blocks, b->ictr,
                                   b->iws, b->iws_n, b->ik16[l] ? b->ikr + 2 * l : NULL,
                                   b->exact ? M3G_IDX_EXACT : 0, st),
                fail);
            blocks = b->blk;
            if (dump) {
                snprintf(name, sizeof name, "layers.%d.attn.block_indices", l);
                if (dump_dev(dump, name, M3_I32, 3, G, T, K, b->blk, st, e))
                    goto fail;
            }
        }
        if (sparse && mode == 1 && T >= 16 && hd <= 128) /* sparse prefill, bf16: msa_attention.cu
                                                (one-pass p on tensor cores on NVIDIA, else
                                                exact p, scalar; b->exact: exact p) */
            M3G_TRY(e, (b->exact ? m3g_msa_attention_prefill : m3g_msa_attention_prefill_onepass)(
                b->att, b->q, b->kc16 ? (const void *)b->kc16[l] : (const void *)b->kc[l],
                b->kc16 ? (const void *)b->vc16[l] : (const void *)b->vc[l],
                b->kc16 ? M3G_BF16 : M3G_F32, b->pages, B, pos0, T, nh, nkv, hd, blocks, K, mode,
                st), fail);
        else if (b->kc16) /* bf16 caches: m3g_attention_sk (one-launch cluster kernel for sparse
                             decode on NVIDIA, else two launches; row chunks if ws is short) */
            M3G_TRY(e,
                    m3g_attention_sk(b->att, b->q, b->kc16[l], b->vc16[l], M3G_BF16, b->pages, B,
                                     pos0, T, nh, nkv, hd, blocks, sparse ? K : 0, mode, b->sws,
                                     b->sws_n, st),
                    fail);
        else if (b->aws && m3g_attention_split_ws(B, pos0, T, nh, hd, blocks, sparse ? K : 0) <=
                               b->aws_n)
            M3G_TRY(e,
                    m3g_attention_split(b->att, b->q, b->kc[l], b->vc[l], b->pages, B, pos0, T, nh,
                                        nkv, hd, blocks, sparse ? K : 0, mode, b->aws, b->aws_n,
                                        st),
                    fail);
        else
            M3G_TRY(e,
                    m3g_attention(b->att, b->q, b->kc[l], b->vc[l], b->pages, B, pos0, T, nh, nkv,
                                  hd, blocks, sparse ? K : 0, mode, st),
                    fail);
    }
    return 0;
fail:
    return -1;
}

/* The fused shared expert of a MoE layer on stream st: act [T, Is] =
 * SwiGLU(gate + up GEMV of xn) (up_tmp: m3g_linear_swiglu's scratch, may be
 * NULL for GEMVs), sh [T, H] = down(act). */
static hipError_t shared_fused(float *sh, float *act, float *up_tmp, const float *xn,
                               const dev_layer *d, const m3_text_config *c, int T, int mode,
                               m3g_blas *blas, hipStream_t st)
{
    hipError_t r = m3g_linear_swiglu(act, c->shared_intermediate_size, up_tmp, xn, d->sgu, T,
                                     c->swiglu_alpha, c->swiglu_limit, c->swiglu_beta, mode, blas,
                                     st);
    return r != hipSuccess ? r : m3g_linear(sh, c->hidden_size, act, d->sd, T, mode, blas, st);
}

int gpu_step_batch(gpu_sess *b, const gpu_batch *bt, float *logits_host, int last_only, m3_err *e)
{
    const m3_model *m = b->m;
    dev_model *dm = b->dm;
    m3g_blas *blas = b->blas;
    hipStream_t st = b->st;
    const int mode = b->mode;
    const m3_text_config *c = &m->cfg.text;
    const int H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    const int V = c->vocab_size, L = c->num_layers, rd = c->rotary_dim;
    const int G = c->index_n_heads, ihd = c->index_head_dim;
    const int B = c->index_block_size > 0 ? c->index_block_size : 128;
    const int kx = c->num_experts_per_tok, E = c->num_experts, I = c->intermediate_size;
    const int Is = c->shared_intermediate_size;
    const float eps = c->rms_norm_eps;
    const int ns = bt->n;
    float *hbuf = b->hbuf, *ct = b->ct, *stb = b->stb;
    char name[160];
    float *aux = NULL;
    int *off = (int *)calloc((size_t)(ns > 0 ? ns : 1) + 1, sizeof(int));
    int rc = -1, T = 0, dump = 0;
    if (!off)
        return m3_fail(e, "out of host memory");
    for (int s = 0; s < ns; s++) {
        const int Ts = bt->T[s], p0 = bt->pos0[s];
        if (Ts < 1 || Ts > b->tmax - T || p0 < 0 || p0 + Ts > b->cap || bt->slot[s] < 0 ||
            bt->slot[s] >= b->nseq || (bt->tf && (p0 != 0 || ns != 1))) {
            m3_fail(e, "sequence %d (%d tokens at position %d, region %d) does not fit the batch "
                       "context (%d rows, %d positions, %d sequences)", s, Ts, p0, bt->slot[s],
                    b->tmax, b->cap, b->nseq);
            free(off);
            return -1;
        }
        off[s] = T;
        T += Ts;
        dump |= bt->dump && bt->dump[s];
    }
    off[ns] = T;
    const size_t N = (size_t)T;
    if (ns < 1) {
        free(off);
        return 0;
    }
    if (b->eagle_aux && (ns != 1 || T > b->eagle_rows)) {
        m3_fail(e, "Eagle3 taps of %d sequences / %d rows (one sequence of at most %d rows)", ns, T,
                b->eagle_rows);
        free(off);
        return -1;
    }
    /* embeddings and RoPE tables on the host (exact, as ref) */
    for (int s = 0; s < ns; s++)
        for (int t = 0; t < bt->T[s]; t++) {
            const int32_t id = bt->ids[s][t];
            const size_t r = (size_t)off[s] + t;
            if (id < 0 || id >= V) {
                m3_fail(e, "token %d at index %d%s is out of range [0, %d) of %s/config.json", id,
                        bt->pos0[s] + t, ns > 1 ? " of a batched sequence" : "", V, m->dir);
                goto fail;
            }
            for (int i = 0; i < H; i++)
                hbuf[r * H + i] = m3_round1(m3_mat_at(&m->w.embed, id, i), (m3_mode)mode);
            m3_rope_table(ct + r * (rd / 2), stb + r * (rd / 2), bt->pos0[s] + t, rd,
                          c->rope_theta, (m3_mode)mode);
        }
    M3G_TRY(e, hipMemcpy(b->h, hbuf, N * H * sizeof(float), hipMemcpyHostToDevice), fail);
    /* image/video features replace the placeholder rows (M3-EMB-3) */
    if (b->vis && ns == 1 && bt->pos0[0] == 0)
        M3G_TRY(e, m3g_vision_place(b->vis, b->h, H, st), fail);
    M3G_TRY(e, hipMemcpy(b->cos_t, ct, N * (rd / 2) * sizeof(float), hipMemcpyHostToDevice), fail);
    M3G_TRY(e, hipMemcpy(b->sin_t, stb, N * (rd / 2) * sizeof(float), hipMemcpyHostToDevice), fail);
    if (dump) {
        aux = (float *)calloc(N * 3 * (size_t)H, sizeof(float));
        if (!aux) {
            m3_fail(e, "dump: out of host memory for eagle3.aux [%zu, %d]", N, 3 * H);
            goto fail;
        }
        if (dump_seqs(bt, off, "embeddings", M3_F32, H, b->h, st, e) != 0)
            goto fail;
    }

    /* streamed weights: layer 0 into its slot (unless still there) */
    if (dm->ws && m3g_wstream_fetch(dm->ws, 0, e))
        goto fail;
    for (int l = 0; l < L; l++) {
        const dev_layer *d = &dm->layers[l];
        const int sparse = c->layer_sparse[l] != 0;
        if (dm->ws && m3g_wstream_acquire(dm->ws, l, st, e)) /* its copies are done */
            goto fail;
        if (bt->tf) { /* teacher forcing: this layer starts from its golden input */
            if (l > 0) { /* the previous layer's own output, for its dump */
                M3G_TRY(e,
                        m3g_residual_rmsnorm(b->h, b->tmp, b->xn, d->in_norm, d->in_norm_dt, T, H,
                                             eps, mode, st),
                        fail);
                snprintf(name, sizeof name, "layers.%d.output", l - 1);
                if (dump && dump_seqs(bt, off, name, M3_F32, H, b->h, st, e))
                    goto fail;
            }
            M3G_TRY(e, hipMemcpy(b->h, bt->tf[l], N * H * sizeof(float), hipMemcpyHostToDevice),
                    fail);
        }
        /* residual of the previous layer's FFN fused with this layer's input norm */
        M3G_TRY(e, m3g_residual_rmsnorm(b->h, l > 0 && !bt->tf ? b->tmp : NULL, b->xn, d->in_norm,
                                d->in_norm_dt, T, H, eps, mode, st), fail);
        if (b->eagle_aux) /* Eagle3 taps: the residual stream entering layer l */
            for (int j = 0; j < 3; j++)
                if (b->eagle_taps[j] == l)
                    M3G_TRY(e, hipMemcpyAsync(b->eagle_aux + (size_t)j * b->eagle_rows * H, b->h,
                                      N * H * sizeof(float), hipMemcpyDeviceToDevice, st), fail);
        if (dump) {
            if (l > 0 && !bt->tf) {
                snprintf(name, sizeof name, "layers.%d.output", l - 1);
                if (dump_seqs(bt, off, name, M3_F32, H, b->h, st, e))
                    goto fail;
            }
            snprintf(name, sizeof name, "layers.%d.input", l);
            if (dump_seqs(bt, off, name, M3_F32, H, b->h, st, e))
                goto fail;
            snprintf(name, sizeof name, "layers.%d.attn_norm", l);
            if (dump_seqs(bt, off, name, M3_F32, H, b->xn, st, e))
                goto fail;
            int slot[3], nt = eagle_tap(L, l, slot);
            if (nt > 0) {
                float *hh = (float *)malloc(N * H * sizeof(float));
                if (!hh) {
                    m3_fail(e, "dump: out of host memory for eagle3.aux");
                    goto fail;
                }
                if (M3G_HIP(e, hipMemcpy(hh, b->h, N * H * sizeof(float), hipMemcpyDeviceToHost))) {
                    free(hh);
                    goto fail;
                }
                for (int j = 0; j < nt; j++)
                    for (size_t t = 0; t < N; t++)
                        memcpy(aux + (t * 3 + slot[j]) * H, hh + t * H, sizeof(float) * H);
                free(hh);
            }
        }

        /* attention: projections of all rows (V into its cache when one
         * sequence runs at pos0 in fp32 mode, else staged in vraw) */
        const size_t P0 = (size_t)bt->slot[0] * b->npages * B + (size_t)bt->pos0[0];
        if (d->nqkv) { /* one pass over [q; k; v (; index q; index k)] */
            const m3g_seg seg[5] = {{b->q, nh * hd, d->q.rows},
                                    {b->kraw, nkv * hd, d->k.rows},
                                    {b->vraw ? b->vraw : b->vc[l] + P0 * nkv * hd, nkv * hd,
                                     d->v.rows},
                                    {b->iq, G * ihd, d->iq.rows},
                                    {b->ikraw, ihd, d->ik.rows}};
            M3G_TRY(e, m3g_linear_multi(b->xn, d->qkv, seg, d->nqkv, T, mode, blas, st), fail);
        } else {
            M3G_TRY(e, m3g_linear(b->q, nh * hd, b->xn, d->q, T, mode, blas, st), fail);
            M3G_TRY(e, m3g_linear(b->kraw, nkv * hd, b->xn, d->k, T, mode, blas, st), fail);
            M3G_TRY(e,
                    m3g_linear(b->vraw ? b->vraw : b->vc[l] + P0 * nkv * hd, nkv * hd, b->xn, d->v,
                               T, mode, blas, st),
                    fail);
        }
        if (sparse && d->nqkv != 5) { /* else already done by the fused projection */
            M3G_TRY(e, m3g_linear(b->iq, G * ihd, b->xn, d->iq, T, mode, blas, st), fail);
            M3G_TRY(e, m3g_linear(b->ikraw, ihd, b->xn, d->ik, T, mode, blas, st), fail);
        }
        /* QK-norm + RoPE of the queries (and index queries) of all rows (per-row
         * tables) in one launch (m3g_attn_prologue); with one sequence the same
         * launch also writes its V / K / index-K cache rows */
        {
            gpu_sess sv0 = gpu_sess_view(b, 0, bt->slot[0]);
            m3g_prologue pro;
            seq_prologue_init(ns == 1 ? &sv0 : b, T, bt->pos0[0], &pro);
            m3g_pro_job *j = &pro.job[0];
            memset(j, 0, 2 * sizeof *j);
            j[0].src = j[0].dst = b->q;
            j[0].w = d->q_norm, j[0].w_dtype = d->q_norm_dt;
            j[0].nheads = nh, j[0].hd = hd;
            pro.njobs = 1;
            if (sparse) {
                j[1].src = j[1].dst = b->iq;
                j[1].w = d->iq_norm, j[1].w_dtype = d->iq_norm_dt;
                j[1].nheads = G, j[1].hd = ihd;
                pro.njobs = 2;
            }
            if (ns == 1) {
                const size_t P0s = (size_t)bt->slot[0] * b->npages * B + (size_t)bt->pos0[0];
                seq_cache_jobs(&sv0, d, l, P0s, &pro);
            }
            M3G_TRY(e, m3g_attn_prologue(&pro, st), fail);
        }
        /* per sequence: cache writes (batches), indexer + selection, attention */
        for (int s = 0; s < ns; s++) {
            gpu_sess sv = gpu_sess_view(b, off[s], bt->slot[s]);
            const size_t P0s = (size_t)bt->slot[s] * b->npages * B + (size_t)bt->pos0[s];
            if (seq_attention(&sv, d, l, bt->T[s], bt->pos0[s], P0s, ns == 1,
                              bt->dump ? bt->dump[s] : NULL, e))
                goto fail;
        }
        M3G_TRY(e, m3g_linear(b->tmp, H, b->att, d->o, T, mode, blas, st), fail);
        M3G_TRY(e,
                m3g_residual_rmsnorm(b->h, b->tmp, b->xn, d->post_norm, d->post_norm_dt, T, H, eps,
                                     mode, st),
                fail);
        if (dump) {
            const char *sfx[3] = {"attn.output", "post_attn", "ffn_norm"};
            const float *src[3] = {b->tmp, b->h, b->xn};
            for (int i = 0; i < 3; i++) {
                snprintf(name, sizeof name, "layers.%d.%s", l, sfx[i]);
                if (dump_seqs(bt, off, name, M3_F32, H, src[i], st, e))
                    goto fail;
            }
        }

        /* feed-forward into b->tmp */
        if (c->layer_moe[l]) {
            /* T <= 8 rows (GEMVs only, so no BLAS workspace is shared between
             * streams) with the fused shared expert: the shared expert runs on
             * the side stream beside the router and the routed experts, into
             * b->u and b->sh, which they do not touch (the same launches, so
             * the same bits) */
            const int side_sh = T <= 8 && c->n_shared_experts > 0 && d->sg.data && d->sgu.data;
            if (side_sh) {
                M3G_TRY(e, hipEventRecord(b->ev_fork, st), fail);
                M3G_TRY(e, hipStreamWaitEvent(b->side, b->ev_fork, 0), fail);
                M3G_TRY(e, shared_fused(b->sh, b->u, NULL, b->xn, d, c, T, mode, blas, b->side),
                        fail);
                M3G_TRY(e, hipEventRecord(b->ev_join, b->side), fail);
            }
            M3G_TRY(e, m3g_router(b->ridx, b->rw, b->rscores, b->xn, d->router,
                          c->use_routing_bias ? d->rbias : NULL, d->rbias_dt, T, kx, st), fail);
            const int64_t es = (int64_t)I * H;
            /* gate + up + SwiGLU of the routed experts in one launch */
            M3G_TRY(e, m3g_gemv_grouped_swiglu(b->g, b->xn, H, 0, d->eg, d->eu, es, d->edt, I, H,
                                       b->ridx, T, kx, c->swiglu_alpha, c->swiglu_limit,
                                       c->swiglu_beta, mode, st), fail);
            M3G_TRY(e,
                    m3g_gemv_grouped(b->ye, b->g, (int64_t)kx * I, I, d->ed, es, d->edt, H, I,
                                     b->ridx, T, kx, mode, st),
                    fail);
            const float *shared = NULL;
            if (side_sh) {
                M3G_TRY(e, hipStreamWaitEvent(st, b->ev_join, 0), fail);
                shared = b->sh;
            } else if (c->n_shared_experts > 0 && d->sg.data) {
                if (d->sgu.data) { /* gate + up + SwiGLU in one GEMV (decode) */
                    M3G_TRY(e, shared_fused(b->sh, b->g, b->u, b->xn, d, c, T, mode, blas, st),
                            fail);
                } else {
                    M3G_TRY(e, m3g_linear(b->g, Is, b->xn, d->sg, T, mode, blas, st), fail);
                    M3G_TRY(e, m3g_linear(b->u, Is, b->xn, d->su, T, mode, blas, st), fail);
                    M3G_TRY(e, m3g_swiglu(b->g, b->g, b->u, (int64_t)N * Is, c->swiglu_alpha,
                                  c->swiglu_limit, c->swiglu_beta, mode, st), fail);
                    M3G_TRY(e, m3g_linear(b->sh, H, b->g, d->sd, T, mode, blas, st), fail);
                }
                shared = b->sh;
            }
            M3G_TRY(e,
                    m3g_moe_combine(b->tmp, b->ye, b->rw, shared, T, kx, H,
                                    c->routed_scaling_factor, mode, st),
                    fail);
            if (dump) {
                snprintf(name, sizeof name, "layers.%d.moe.topk_index", l);
                if (dump_seqs(bt, off, name, M3_I32, kx, b->ridx, st, e))
                    goto fail;
                snprintf(name, sizeof name, "layers.%d.moe.topk_weight", l);
                if (dump_seqs(bt, off, name, M3_F32, kx, b->rw, st, e))
                    goto fail;
                snprintf(name, sizeof name, "layers.%d.moe.scores", l);
                if (dump_seqs(bt, off, name, M3_F32, E, b->rscores, st, e))
                    goto fail;
            }
        } else {
            const int Il = d->gate.rows;
            M3G_TRY(e, m3g_linear(b->g, Il, b->xn, d->gate, T, mode, blas, st), fail);
            M3G_TRY(e, m3g_linear(b->u, Il, b->xn, d->up, T, mode, blas, st), fail);
            M3G_TRY(e,
                    m3g_swiglu(b->g, b->g, b->u, (int64_t)N * Il, c->swiglu_alpha, c->swiglu_limit,
                               c->swiglu_beta, mode, st),
                    fail);
            M3G_TRY(e, m3g_linear(b->tmp, H, b->g, d->down, T, mode, blas, st), fail);
        }
        if (dump) {
            snprintf(name, sizeof name, "layers.%d.mlp.output", l);
            if (dump_seqs(bt, off, name, M3_F32, H, b->tmp, st, e))
                goto fail;
        }
        /* streamed weights: the slot is free once layer l's kernels are done; the
         * next layer's copies go into the other slot while they run */
        if (dm->ws && (m3g_wstream_release(dm->ws, l, st, e) ||
                       m3g_wstream_fetch(dm->ws, (l + 1) % L, e)))
            goto fail;
    }

    /* last residual fused with the final norm (teacher forcing too: the head
     * runs on this forward's own last output, which the dump holds, so the
     * dump says what the head's input was; M3-TOL-8) */
    M3G_TRY(e,
            m3g_residual_rmsnorm(b->h, b->tmp, b->xn, dm->final_norm, dm->final_norm_dt, T, H, eps,
                                 mode, st),
            fail);
    /* lm_head: all rows, or the last row of each sequence */
    if (last_only) {
        const float *xl = b->xn + (N - 1) * H;
        if (ns > 1) { /* gather the last rows (b->tmp is free now) */
            for (int s = 0; s < ns; s++)
                M3G_TRY(e,
                        hipMemcpyAsync(b->tmp + (size_t)s * H, b->xn + ((size_t)off[s + 1] - 1) * H,
                                       H * sizeof(float), hipMemcpyDeviceToDevice, st),
                        fail);
            xl = b->tmp;
        }
        M3G_TRY(e, m3g_linear(b->logits, V, xl, dm->lm_head, ns, mode, NULL, st), fail);
        M3G_TRY(e, hipStreamSynchronize(st), fail);
        M3G_TRY(e, hipMemcpy(logits_host, b->logits, (size_t)ns * V * sizeof(float),
                     hipMemcpyDeviceToHost), fail);
    } else {
        M3G_TRY(e, m3g_linear(b->logits, V, b->xn, dm->lm_head, T, mode, blas, st), fail);
        M3G_TRY(e, hipStreamSynchronize(st), fail);
        M3G_TRY(e, hipMemcpy(logits_host, b->logits, N * V * sizeof(float), hipMemcpyDeviceToHost),
                fail);
    }
    if (dump) {
        snprintf(name, sizeof name, "layers.%d.output", L - 1);
        if (dump_seqs(bt, off, name, M3_F32, H, b->h, st, e) ||
            dump_seqs(bt, off, "final_norm", M3_F32, H, b->xn, st, e) ||
            dump_seqs(bt, off, "logits", M3_F32, V, b->logits, st, e))
            goto fail;
        for (int s = 0; s < ns; s++) {
            int64_t ashape[2] = {bt->T[s], 3 * (int64_t)H};
            if (bt->dump[s] && m3_st_writer_append(bt->dump[s], "eagle3.aux", M3_F32, 2, ashape,
                                                   aux + (size_t)off[s] * 3 * H, 0, e) != 0) {
                m3_fail_prefix(e, "dump");
                goto fail;
            }
        }
    }
    rc = 0;
fail:
    free(aux);
    free(off);
    return rc;
}
