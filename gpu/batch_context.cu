/* batch_context.cu — see batch_context.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "batch_context.h"
#include "hip_check.h"
#include "kernels/common.cuh"

void gpu_sess_free(gpu_sess *s)
{
    /* device buffers are tracked in dm and freed with it */
    free(s->kc);
    free(s->vc);
    free(s->ikc);
    free(s->ik16);
    free(s->kc16);
    free(s->vc16);
    free(s->hbuf);
    free(s->ct);
    free(s->stb);
    if (s->ev_fork)
        (void)hipEventDestroy(s->ev_fork);
    if (s->ev_join)
        (void)hipEventDestroy(s->ev_join);
    if (s->side)
        (void)hipStreamDestroy(s->side);
    memset(s, 0, sizeof *s);
}

int gpu_sess_init(gpu_sess *b, const m3_model *m, dev_model *dm, int tmax, int cap, int nseq,
                  int mode, m3g_blas *blas, hipStream_t st, m3_err *e)
{
    const m3_text_config *c = &m->cfg.text;
    const int H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    const int V = c->vocab_size, L = c->num_layers, rd = c->rotary_dim;
    const int G = c->index_n_heads, ihd = c->index_head_dim, K = c->index_topk;
    const int B = c->index_block_size > 0 ? c->index_block_size : 128;
    const int kx = c->num_experts_per_tok, E = c->num_experts, I = c->intermediate_size;
    const int Is = c->shared_intermediate_size, Id = c->dense_intermediate_size;
    const size_t N = (size_t)tmax;
    int Imax = I * (kx > 0 ? kx : 1);
    Imax = Imax > Id ? Imax : Id;
    Imax = Imax > Is ? Imax : Is;
    memset(b, 0, sizeof *b);
    b->m = m;
    b->dm = dm;
    b->blas = blas;
    b->st = st;
    b->mode = mode;
    b->tmax = tmax;
    b->cap = cap;
    b->npages = (cap + B - 1) / B;
    b->nbmax = b->npages;
    b->nseq = nseq;
    const int npages = b->npages, nbmax = b->nbmax;
    const size_t cpages = (size_t)nseq * npages; /* pages of all regions */
    /* bf16 mode: bf16 K/V caches (exact: they hold rounded values, M3-NUM-BF16-2
     * item 10) read by m3g_attention_sk; fp32 mode keeps the fp32 caches */
    const int kv16 = mode == 1 && hd % 8 == 0 && hd <= 128;
    int32_t *pt = (int32_t *)malloc(cpages * sizeof(int32_t));
    b->hbuf = (float *)malloc(N * (size_t)H * sizeof(float));
    b->ct = (float *)malloc(N * (size_t)(rd / 2 + 1) * sizeof(float));
    b->stb = (float *)malloc(N * (size_t)(rd / 2 + 1) * sizeof(float));
    b->kc = (float **)calloc((size_t)L, sizeof(float *));
    b->vc = (float **)calloc((size_t)L, sizeof(float *));
    b->ikc = (float **)calloc((size_t)L, sizeof(float *));
    b->ik16 = (uint16_t **)calloc((size_t)L, sizeof(uint16_t *));
    if (!pt || !b->hbuf || !b->ct || !b->stb || !b->kc || !b->vc || !b->ikc || !b->ik16) {
        m3_fail(e, "out of host memory for a batch context of %d tokens", tmax);
        goto fail;
    }
    for (size_t p = 0; p < cpages; p++)
        pt[p] = (int32_t)p; /* region s: pages s*npages.. in order */
    if (M3G_HIP(e, hipStreamCreate(&b->side)) ||
        M3G_HIP(e, hipEventCreateWithFlags(&b->ev_fork, hipEventDisableTiming)) ||
        M3G_HIP(e, hipEventCreateWithFlags(&b->ev_join, hipEventDisableTiming))) {
        m3_fail_prefix(e, "the side stream of a batch context");
        goto fail;
    }
#define DA(ptr, n, T_) dev_model_alloc(dm, (void **)&(ptr), (size_t)(n) * sizeof(T_), e)
    if (DA(b->h, N * H, float) || DA(b->xn, N * H, float) || DA(b->q, N * nh * hd, float) ||
        DA(b->kraw, N * nkv * hd, float) || DA(b->att, N * nh * hd, float) ||
        DA(b->tmp, N * H, float) || DA(b->iq, N * (G > 0 ? G : 1) * ihd, float) ||
        DA(b->ikraw, N * ihd, float) || DA(b->bs, N * (G > 0 ? G : 1) * nbmax, float) ||
        DA(b->blk, N * (G > 0 ? G : 1) * (K > 0 ? K : 1), int32_t) ||
        DA(b->ictr, N, unsigned) ||
        DA(b->iws, (b->iws_n = m3g_msa_indexer_ws(N, G > 0 ? G : 1, nbmax)), char) ||
        DA(b->g, N * Imax, float) || DA(b->u, N * Imax, float) ||
        DA(b->ye, N * (kx > 0 ? kx : 1) * H, float) || DA(b->sh, N * H, float) ||
        DA(b->logits, N * V, float) || DA(b->cos_t, N * (rd / 2), float) ||
        DA(b->sin_t, N * (rd / 2), float) || DA(b->ridx, N * (kx > 0 ? kx : 1), int32_t) ||
        DA(b->rw, N * (kx > 0 ? kx : 1), float) || DA(b->rscores, N * (E > 0 ? E : 1), float) ||
        DA(b->pages, cpages, int32_t)) {
        m3_fail_prefix(e, "device buffers for %d tokens", tmax);
        goto fail;
    }
    if (kv16) {
        b->kc16 = (uint16_t **)calloc((size_t)L, sizeof(uint16_t *));
        b->vc16 = (uint16_t **)calloc((size_t)L, sizeof(uint16_t *));
        size_t wn = m3g_attention_sk_ws(B, 0, tmax, nh, nkv, hd, NULL, 0, M3G_BF16), w1;
        const size_t w3[3] = {
            G > 0 ? m3g_attention_sk_ws(B, 0, tmax, nh, nkv, hd, pt, K, M3G_BF16) : 0,
            m3g_attention_sk_ws(B, cap - 1, 1, nh, nkv, hd, NULL, 0, M3G_BF16),
            G > 0 ? m3g_attention_sk_ws(B, cap - 1, 1, nh, nkv, hd, pt, K, M3G_BF16) : 0};
        for (int i = 0; i < 3; i++)
            wn = w3[i] > wn ? w3[i] : wn;
        w1 = w3[1] > w3[2] ? w3[1] : w3[2]; /* one decode row: the least that works */
        if (wn > ((size_t)1 << 30)) /* the prefill then runs in row chunks */
            wn = w1 > ((size_t)1 << 30) ? w1 : ((size_t)1 << 30);
        if (!b->kc16 || !b->vc16) {
            m3_fail(e, "out of host memory for the bf16 KV caches of %d layers", L);
            goto fail;
        }
        if (DA(b->vraw, N * nkv * hd, float) || DA(b->sws, wn, char)) {
            m3_fail_prefix(e, "the bf16 KV cache buffers");
            goto fail;
        }
        b->sws_n = wn;
    }
    if (!b->vraw && nseq > 1 && DA(b->vraw, N * nkv * hd, float)) { /* batch V staging */
        m3_fail_prefix(e, "device buffers for %d tokens", tmax);
        goto fail;
    }
    for (int l = 0; l < L; l++)
        if ((!kv16 && DA(b->kc[l], cpages * B * nkv * hd, float)) ||
            (!kv16 && DA(b->vc[l], cpages * B * nkv * hd, float)) ||
            (kv16 && DA(b->kc16[l], cpages * B * nkv * hd, uint16_t)) ||
            (kv16 && DA(b->vc16[l], cpages * B * nkv * hd, uint16_t)) ||
            (c->layer_sparse[l] && DA(b->ikc[l], cpages * B * ihd, float)) ||
            (c->layer_sparse[l] && mode == 1 && DA(b->ik16[l], cpages * B * ihd, uint16_t))) {
            m3_fail_prefix(e, "the caches of layer %d (%zu positions)", l, cpages * B);
            goto fail;
        }
    if (mode == 1) { /* the empty exponent range for every layer's bf16 index-K cache */
        unsigned *hr = (unsigned *)malloc(2 * sizeof(unsigned) * (size_t)L);
        int bad = !hr ? m3_fail(e, "out of host memory") : DA(b->ikr, 2 * L, unsigned);
        for (int l = 0; !bad && l < L; l++)
            hr[2 * l] = 0x1ffu, hr[2 * l + 1] = 0; /* M3G_IKR_NONE, 0: see m3g_ik_range_reset */
        bad = bad || M3G_HIP(e, hipMemcpy(b->ikr, hr, 2 * sizeof(unsigned) * (size_t)L,
                                          hipMemcpyHostToDevice));
        free(hr);
        if (bad) {
            m3_fail_prefix(e, "the index-K range words");
            goto fail;
        }
    }
    /* the split-key
     * attention workspace when it fits in 1 GiB (else the per-row kernel);
     * sized for the prefill (pos0 0, tmax rows) and the last decode step */
    if (!kv16) {
        size_t wn = 0;
        const size_t w4[4] = {
            m3g_attention_split_ws(B, 0, tmax, nh, hd, NULL, 0),
            G > 0 ? m3g_attention_split_ws(B, 0, tmax, nh, hd, pt, K) : 0,
            m3g_attention_split_ws(B, cap - 1, 1, nh, hd, NULL, 0),
            G > 0 ? m3g_attention_split_ws(B, cap - 1, 1, nh, hd, pt, K) : 0};
        for (int i = 0; i < 4; i++)
            wn = w4[i] > wn ? w4[i] : wn;
        if (wn * sizeof(float) <= ((size_t)1 << 30) && DA(b->aws, wn, float) == 0)
            b->aws_n = wn;
        else
            b->aws = NULL;
    }
#undef DA
    if (M3G_HIP(e, hipMemcpy(b->pages, pt, cpages * sizeof(int32_t), hipMemcpyHostToDevice))) {
        m3_fail_prefix(e, "uploading the page table");
        goto fail;
    }
    free(pt);
    return 0;
fail:
    free(pt);
    gpu_sess_free(b);
    return -1;
}

gpu_sess gpu_sess_view(const gpu_sess *b, int off, int slot)
{
    const m3_text_config *c = &b->m->cfg.text;
    const size_t o = (size_t)off;
    const int G = c->index_n_heads > 0 ? c->index_n_heads : 1;
    const int K = c->index_topk > 0 ? c->index_topk : 1;
    gpu_sess v = *b;
    v.q += o * c->num_heads * c->head_dim;
    v.att += o * c->num_heads * c->head_dim;
    v.kraw += o * c->num_kv_heads * c->head_dim;
    if (v.vraw)
        v.vraw += o * c->num_kv_heads * c->head_dim;
    v.iq += o * G * c->index_head_dim;
    v.ikraw += o * c->index_head_dim;
    v.bs += o * G * b->nbmax;
    v.blk += o * G * K;
    v.ictr += o;
    v.cos_t += o * (c->rotary_dim / 2);
    v.sin_t += o * (c->rotary_dim / 2);
    v.pages += (size_t)slot * b->npages;
    return v;
}
