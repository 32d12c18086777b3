/* test_model.c — the whole text model on tiny random checkpoints.
 *
 * Spec: M3-CACHE-2 (one-shot prefill, chunked prefill and token-by-token
 * decode give bit-identical logits and block choices, fp32 and bf16),
 * M3-CACHE-3 (rollback then re-run reproduces the logits), M3-CACHE-4
 * (capacity and max_position_embeddings errors leave the state unchanged), M3-MSA-ATTN-1 (with no more
 * visible blocks than topk, sparse attention equals dense causal attention),
 * M3-NUM-BF16-2 (bf16 logits are bf16 values, close to fp32), M3-DUMP-*
 * (names, shapes, eagle3 taps), M3-MODEL-1 (teacher-forced layer == the
 * layer inside the full forward), and the error contract of m3_forward.
 *
 * Checkpoints are written by tests/fixture.h into a fresh temp directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"
#include "model.h"

#define T_LONG 23 /* > block 4 * topk 3: real sparse selection */

typedef struct fx {
    char dir[256];
    m3_model m;
    int32_t toks[64];
} fx;

static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char p[600];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    m3_err e = {{0}};
    m3_fixture_opts o;
    m3_fixture_defaults(&o);
    snprintf(f->dir, sizeof f->dir, "/tmp/m3_test_model_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    if (m3_fixture_write(f->dir, &o, &e) != 0 || m3_model_open(&f->m, f->dir, NULL, &e) != 0) {
        fprintf(stderr, "fixture: %s\n", e.msg);
        return -1;
    }
    uint64_t x = 99;
    for (int i = 0; i < 64; i++)
        f->toks[i] = (int32_t)(m3_fixture_splitmix(&x) % (uint64_t)o.vocab_size);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    m3_model_close(&f->m);
    rm_dir(f->dir);
    free(f);
    return 0;
}

/* Run tokens in chunks (sizes in ch, 0-terminated; remainder one by one).
 * Fills logits [n, V]; if bi != NULL, saves each chunk's dump and gathers the
 * block indices of `layer` into bi [G, n, K]. */
static void run_chunks(fx *f, m3_mode mode, const int *ch, int n, float *logits, int layer,
                       int32_t *bi)
{
    const m3_text_config *c = &f->m.cfg.text;
    const int V = c->vocab_size, G = c->index_n_heads, K = c->index_topk;
    m3_err e = {{0}};
    m3_state *s = m3_state_new(&f->m, n, mode, &e);
    assert_non_null(s);
    int done = 0, ci = 0;
    while (done < n) {
        int k = ch && ch[ci] ? ch[ci++] : 1;
        if (k > n - done)
            k = n - done;
        m3_st_writer *w = bi ? m3_st_writer_new() : NULL;
        int rc = m3_forward(&f->m, s, f->toks + done, k, logits + (size_t)done * V, w, &e);
        if (rc != 0)
            fail_msg("forward: %s", e.msg);
        assert_int_equal(m3_state_len(s), done + k);
        if (bi) {
            char path[300], name[64];
            snprintf(path, sizeof path, "%s/chunk.safetensors", f->dir);
            assert_int_equal(m3_st_writer_save(w, path, &e), 0);
            m3_store *st = NULL;
            assert_int_equal(m3_store_open(&st, path, &e), 0);
            snprintf(name, sizeof name, "layers.%d.attn.block_indices", layer);
            const m3_tensor *t = m3_store_get(st, name);
            assert_non_null(t);
            assert_int_equal(t->ndim, 3);
            assert_int_equal(t->shape[0], G);
            assert_int_equal(t->shape[1], k);
            assert_int_equal(t->shape[2], K);
            const int32_t *src = t->data;
            for (int g = 0; g < G; g++)
                memcpy(bi + ((size_t)g * n + done) * K, src + (size_t)g * k * K,
                       sizeof(int32_t) * (size_t)k * K);
            m3_store_close(st);
            m3_st_writer_free(w);
        }
        done += k;
    }
    m3_state_free(s);
}

/* M3-CACHE-2: one-shot, chunked and token-by-token give identical bits. */
static void check_prefill_chunks_decode(fx *f, m3_mode mode)
{
    const m3_text_config *c = &f->m.cfg.text;
    const int V = c->vocab_size, G = c->index_n_heads, K = c->index_topk, B = c->index_block_size;
    const int n = T_LONG, layer = c->num_layers - 1;
    assert_true(c->layer_sparse[layer]);
    size_t nl = (size_t)n * V, nb = (size_t)G * n * K;
    float *a = malloc(nl * 4), *b = malloc(nl * 4), *d = malloc(nl * 4);
    int32_t *ba = malloc(nb * 4), *bb = malloc(nb * 4), *bd = malloc(nb * 4);
    const int one_shot[] = {n, 0}, chunks[] = {3, 5, 1, 6, 2, 0};
    run_chunks(f, mode, one_shot, n, a, layer, ba);
    run_chunks(f, mode, chunks, n, b, layer, bb);
    run_chunks(f, mode, NULL, n, d, layer, bd);
    assert_memory_equal(a, b, nl * 4);
    assert_memory_equal(a, d, nl * 4);
    assert_memory_equal(ba, bb, nb * 4);
    assert_memory_equal(ba, bd, nb * 4);
    /* the selection is real: local block first; late rows see more blocks than
     * topk, so some visible block is left out */
    int left_out = 0;
    for (int g = 0; g < G; g++)
        for (int t = 0; t < n; t++) {
            const int32_t *r = ba + ((size_t)g * n + t) * K;
            assert_int_equal(r[0], t / B);
            int nvis = t / B + 1, nsel = 0;
            for (int k = 0; k < K; k++)
                nsel += r[k] >= 0;
            assert_int_equal(nsel, nvis < K ? nvis : K);
            left_out |= nvis > K;
        }
    assert_true(left_out);
    for (size_t i = 0; i < nl; i++)
        assert_true(isfinite(a[i]));
    free(a), free(b), free(d), free(ba), free(bb), free(bd);
}

static void test_decode_equals_prefill_fp32(void **state)
{
    check_prefill_chunks_decode(*state, M3_MODE_FP32);
}

static void test_decode_equals_prefill_bf16(void **state)
{
    check_prefill_chunks_decode(*state, M3_MODE_BF16);
}

/* Logits of toks[0..n) on a fresh state with the sparse flags of the config
 * replaced by `sparse` (-1: unchanged). */
static void logits_with_sparse(fx *f, int sparse, int n, float *out)
{
    m3_text_config save = f->m.cfg.text;
    if (sparse >= 0)
        for (int l = 0; l < f->m.cfg.text.num_layers; l++)
            f->m.cfg.text.layer_sparse[l] = (uint8_t)sparse;
    m3_err e = {{0}};
    m3_state *s = m3_state_new(&f->m, n, M3_MODE_FP32, &e);
    assert_non_null(s);
    int rc = m3_forward(&f->m, s, f->toks, n, out, NULL, &e);
    m3_state_free(s);
    f->m.cfg.text = save;
    if (rc != 0)
        fail_msg("forward: %s", e.msg);
}

/* M3-MSA-ATTN-1: while every visible block fits in topk, the sparse layers
 * compute exactly dense causal attention; beyond that they differ. */
static void test_sparse_equals_dense_few_blocks(void **state)
{
    fx *f = *state;
    const m3_text_config *c = &f->m.cfg.text;
    const int V = c->vocab_size;
    const int n_short = c->index_block_size * c->index_topk; /* all blocks fit */
    float *sp = malloc((size_t)T_LONG * V * 4), *de = malloc((size_t)T_LONG * V * 4);
    logits_with_sparse(f, -1, n_short, sp);
    logits_with_sparse(f, 0, n_short, de);
    assert_memory_equal(sp, de, (size_t)n_short * V * 4);
    logits_with_sparse(f, -1, T_LONG, sp);
    logits_with_sparse(f, 0, T_LONG, de);
    /* rows before the first left-out block agree, the last row does not */
    assert_memory_equal(sp, de, (size_t)n_short * V * 4);
    assert_true(memcmp(sp + (size_t)(T_LONG - 1) * V, de + (size_t)(T_LONG - 1) * V,
                       (size_t)V * 4) != 0);
    free(sp), free(de);
}

/* M3-NUM-BF16-2: bf16 logits are bf16 values and close to the fp32 ones. */
static void test_bf16_mode(void **state)
{
    fx *f = *state;
    const int V = f->m.cfg.text.vocab_size, n = 12;
    float *a = malloc((size_t)n * V * 4), *b = malloc((size_t)n * V * 4);
    m3_err e = {{0}};
    m3_state *s32 = m3_state_new(&f->m, n, M3_MODE_FP32, &e);
    m3_state *s16 = m3_state_new(&f->m, n, M3_MODE_BF16, &e);
    assert_non_null(s32);
    assert_non_null(s16);
    assert_int_equal(m3_state_mode(s16), M3_MODE_BF16);
    assert_int_equal(m3_forward(&f->m, s32, f->toks, n, a, NULL, &e), 0);
    assert_int_equal(m3_forward(&f->m, s16, f->toks, n, b, NULL, &e), 0);
    double num = 0, den = 0, dot = 0, na = 0, nb = 0;
    int differ = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) {
        assert_true(m3_round_bf16(b[i]) == b[i]);
        differ |= a[i] != b[i];
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)a[i] * a[i];
        dot += (double)a[i] * b[i];
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    double nmse = num / den, cosv = dot / sqrt(na * nb);
    print_message("bf16 vs fp32 logits: nmse %.3g, cos %.8f\n", nmse, cosv);
    assert_true(differ);         /* the modes are not the same computation */
    assert_true(nmse < 1e-3);    /* a few bf16 ulps through 4 layers */
    assert_true(cosv > 0.9995);
    m3_state_free(s32);
    m3_state_free(s16);
    free(a), free(b);
}

/* M3-CACHE-3: truncate, run other tokens, truncate, re-run: same logits. */
static void test_rollback(void **state)
{
    fx *f = *state;
    const int V = f->m.cfg.text.vocab_size, n = 18, keep = 9;
    float *ref = malloc((size_t)n * V * 4), *got = malloc((size_t)n * V * 4);
    m3_err e = {{0}};
    m3_state *s = m3_state_new(&f->m, n, M3_MODE_FP32, &e);
    assert_non_null(s);
    assert_int_equal(m3_forward(&f->m, s, f->toks, n, ref, NULL, &e), 0);
    m3_state_truncate(s, keep);
    assert_int_equal(m3_state_len(s), keep);
    int32_t other[64];
    for (int i = 0; i < n; i++)
        other[i] = (f->toks[i] + 17) % V;
    assert_int_equal(m3_forward(&f->m, s, other + keep, n - keep, got, NULL, &e), 0);
    assert_true(memcmp(got, ref + (size_t)keep * V, (size_t)(n - keep) * V * 4) != 0);
    m3_state_truncate(s, keep);
    m3_state_truncate(s, keep + 5); /* growing is a no-op */
    assert_int_equal(m3_state_len(s), keep);
    assert_int_equal(m3_forward(&f->m, s, f->toks + keep, 4, got, NULL, &e), 0);
    assert_int_equal(m3_forward(&f->m, s, f->toks + keep + 4, n - keep - 4, got + (size_t)4 * V,
                                NULL, &e),
                     0);
    assert_memory_equal(got, ref + (size_t)keep * V, (size_t)(n - keep) * V * 4);
    m3_state_free(s);
    free(ref), free(got);
}

/* Errors: out-of-range ids, empty input, context overflow; state unchanged. */
static void test_errors(void **state)
{
    fx *f = *state;
    const int V = f->m.cfg.text.vocab_size;
    m3_err e = {{0}};
    char want[128];
    m3_state *s = m3_state_new(&f->m, 8, M3_MODE_FP32, &e);
    assert_non_null(s);
    int32_t bad[5] = {1, 2, 3, V, 4};
    assert_int_equal(m3_forward(&f->m, s, bad, 5, NULL, NULL, &e), -1);
    snprintf(want, sizeof want, "token %d at position 3 is out of range [0, %d)", V, V);
    assert_string_equal(e.msg, want);
    bad[3] = -1;
    assert_int_equal(m3_forward(&f->m, s, bad, 5, NULL, NULL, &e), -1);
    snprintf(want, sizeof want, "token -1 at position 3 is out of range [0, %d)", V);
    assert_string_equal(e.msg, want);
    assert_int_equal(m3_state_len(s), 0);
    assert_int_equal(m3_forward(&f->m, s, f->toks, 0, NULL, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "empty input"));
    assert_int_equal(m3_forward(&f->m, s, f->toks, 5, NULL, NULL, &e), 0);
    /* a later chunk names the id's position in the sequence, not in the chunk */
    int32_t bad2[2] = {1, V};
    assert_int_equal(m3_forward(&f->m, s, bad2, 2, NULL, NULL, &e), -1);
    snprintf(want, sizeof want, "token %d at position 6 is out of range [0, %d)", V, V);
    assert_string_equal(e.msg, want);
    assert_int_equal(m3_state_len(s), 5);
    assert_int_equal(m3_forward(&f->m, s, f->toks, 4, NULL, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "context overflow"));
    assert_non_null(strstr(e.msg, "capacity of 8"));
    assert_int_equal(m3_state_len(s), 5);
    assert_int_equal(m3_forward(&f->m, s, f->toks, 3, NULL, NULL, &e), 0);
    assert_int_equal(m3_state_len(s), 8);
    m3_state_free(s);

    /* max_position_embeddings */
    f->m.cfg.text.max_position_embeddings = 6;
    s = m3_state_new(&f->m, 16, M3_MODE_FP32, &e);
    assert_non_null(s);
    assert_int_equal(m3_forward(&f->m, s, f->toks, 7, NULL, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "max_position_embeddings 6"));
    assert_int_equal(m3_forward(&f->m, s, f->toks, 6, NULL, NULL, &e), 0);
    m3_state_free(s);
    f->m.cfg.text.max_position_embeddings = 4096;

    /* a bad layer index for the teacher-forced entry point */
    s = m3_state_new(&f->m, 4, M3_MODE_FP32, &e);
    float x[64] = {0};
    assert_int_equal(m3_layer_forward(&f->m, s, 99, x, 1, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "layer 99"));
    m3_state_free(s);
}

/* Open errors: missing directory; close on a partly opened struct. */
static void test_open_errors(void **state)
{
    fx *f = *state;
    m3_model m;
    m3_err e = {{0}};
    char p[300];
    snprintf(p, sizeof p, "%s/does-not-exist", f->dir);
    assert_int_equal(m3_model_open(&m, p, NULL, &e), -1);
    assert_true(strlen(e.msg) > 0);
    m3_model_close(&m); /* safe after a failed open */
    m3_model z;
    memset(&z, 0, sizeof z);
    m3_model_close(&z); /* safe on a zeroed struct */
    m3_state_free(NULL);
}

/* m3_model_notes: nothing, a config warning, the mtp note, both; a short buffer. */
static void test_model_notes(void **state)
{
    (void)state;
    m3_model m;
    memset(&m, 0, sizeof m);
    char buf[700];
    m3_model_notes(&m, buf, sizeof buf);
    assert_string_equal(buf, "");
    m.w.ignored_mtp = 3;
    m3_model_notes(&m, buf, sizeof buf);
    assert_string_equal(buf, "note: ignored 3 mtp.* tensors\n");
    m.cfg.n_warnings = 1;
    snprintf(m.cfg.warnings, sizeof m.cfg.warnings, "unknown key 'text_config.foo'");
    m3_model_notes(&m, buf, sizeof buf);
    assert_string_equal(buf, "warning: unknown key 'text_config.foo'\nnote: ignored 3 mtp.* tensors\n");
    char small[12];
    m3_model_notes(&m, small, sizeof small); /* truncated, terminated */
    assert_string_equal(small, "warning: un");
}

/* m3_forward_embeds on the embedding rows == m3_forward on the ids, both modes. */
static void test_forward_embeds(void **state)
{
    fx *f = *state;
    const int V = f->m.cfg.text.vocab_size, H = f->m.cfg.text.hidden_size, n = 7;
    float *x = malloc((size_t)n * H * 4), *a = malloc((size_t)n * V * 4), *b = malloc((size_t)n * V * 4);
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++)
            x[(size_t)t * H + i] = m3_mat_at(&f->m.w.embed, f->toks[t], i);
    m3_err e = {{0}};
    for (int mode = 0; mode < 2; mode++) {
        m3_state *s1 = m3_state_new(&f->m, n, (m3_mode)mode, &e);
        m3_state *s2 = m3_state_new(&f->m, n, (m3_mode)mode, &e);
        assert_int_equal(m3_forward(&f->m, s1, f->toks, n, a, NULL, &e), 0);
        assert_int_equal(m3_forward_embeds(&f->m, s2, x, 3, b, NULL, &e), 0);
        assert_int_equal(m3_forward_embeds(&f->m, s2, x + 3 * H, n - 3, b + (size_t)3 * V, NULL, &e), 0);
        assert_memory_equal(a, b, (size_t)n * V * 4);
        assert_int_equal(m3_forward_embeds(&f->m, s2, x, 1, b, NULL, &e), -1);
        assert_non_null(strstr(e.msg, "context overflow"));
        m3_state_free(s1);
        m3_state_free(s2);
    }
    free(x), free(a), free(b);
}

static const float *dump_get(m3_store *st, const char *name, int ndim, int64_t d0, int64_t d1,
                             int64_t d2)
{
    const m3_tensor *t = m3_store_get(st, name);
    if (!t)
        fail_msg("dump has no %s", name);
    assert_int_equal(t->ndim, ndim);
    assert_int_equal(t->shape[0], d0);
    assert_int_equal(t->shape[1], d1);
    if (ndim == 3)
        assert_int_equal(t->shape[2], d2);
    return t->data;
}

/* M3-DUMP-*: every name with its shape; eagle3.aux = the tapped inputs;
 * layers chain (output of i == input of i+1); moe choices ascending with
 * weights summing to 1; teacher-forced layers reproduce the outputs. */
static void test_dump_and_layer_forward(void **state)
{
    fx *f = *state;
    const m3_text_config *c = &f->m.cfg.text;
    const int n = 10, H = c->hidden_size, V = c->vocab_size, L = c->num_layers;
    const int k = c->num_experts_per_tok, E = c->num_experts;
    m3_err e = {{0}};
    m3_state *s = m3_state_new(&f->m, n, M3_MODE_FP32, &e);
    m3_st_writer *w = m3_st_writer_new();
    float *logits = malloc((size_t)n * V * 4);
    assert_int_equal(m3_forward(&f->m, s, f->toks, n, logits, w, &e), 0);
    char path[300], name[96];
    snprintf(path, sizeof path, "%s/dump.safetensors", f->dir);
    assert_int_equal(m3_st_writer_save(w, path, &e), 0);
    m3_st_writer_free(w);
    m3_state_free(s);
    m3_store *st = NULL;
    assert_int_equal(m3_store_open(&st, path, &e), 0);

    const float *emb = dump_get(st, "embeddings", 2, n, H, 0);
    for (int t = 0; t < n; t++) /* no scaling: the embedding rows themselves */
        for (int i = 0; i < H; i++)
            assert_true(emb[(size_t)t * H + i] == m3_mat_at(&f->m.w.embed, f->toks[t], i));
    assert_memory_equal(dump_get(st, "logits", 2, n, V, 0), logits, (size_t)n * V * 4);
    dump_get(st, "final_norm", 2, n, H, 0);
    const float *aux = dump_get(st, "eagle3.aux", 2, n, 3 * H, 0);
    const int taps[3] = {1, 2, 2}; /* L = 4: min(2,3), 4/2, max(1,0) ascending */
    assert_int_equal(L, 4);
    int count = 4; /* embeddings, final_norm, logits, eagle3.aux */
    const float *prev_out = emb;
    for (int l = 0; l < L; l++) {
        const char *sfx[] = {"input", "attn_norm", "attn.output", "post_attn",
                             "ffn_norm", "mlp.output", "output"};
        const float *in = NULL, *out = NULL;
        for (int j = 0; j < 7; j++) {
            snprintf(name, sizeof name, "layers.%d.%s", l, sfx[j]);
            const float *p = dump_get(st, name, 2, n, H, 0);
            if (j == 0)
                in = p;
            if (j == 6)
                out = p;
            count++;
        }
        assert_memory_equal(in, prev_out, (size_t)n * H * 4);
        prev_out = out;
        for (int j = 0; j < 3; j++)
            if (taps[j] == l)
                for (int t = 0; t < n; t++)
                    assert_memory_equal(aux + ((size_t)t * 3 + j) * H, in + (size_t)t * H,
                                        (size_t)H * 4);
        snprintf(name, sizeof name, "layers.%d.attn.block_indices", l);
        if (c->layer_sparse[l]) {
            const m3_tensor *t = m3_store_get(st, name);
            assert_non_null(t);
            assert_int_equal(t->dtype, M3_I32);
            dump_get(st, name, 3, c->index_n_heads, n, c->index_topk);
            count++;
        } else {
            assert_null(m3_store_get(st, name));
        }
        snprintf(name, sizeof name, "layers.%d.moe.topk_index", l);
        if (c->layer_moe[l]) {
            const int32_t *idx = (const int32_t *)dump_get(st, name, 2, n, k, 0);
            snprintf(name, sizeof name, "layers.%d.moe.topk_weight", l);
            const float *wt = dump_get(st, name, 2, n, k, 0);
            snprintf(name, sizeof name, "layers.%d.moe.scores", l);
            const float *sc = dump_get(st, name, 2, n, E, 0);
            for (int t = 0; t < n; t++) {
                double sum = 0;
                for (int j = 0; j < k; j++) {
                    if (j)
                        assert_true(idx[t * k + j] > idx[t * k + j - 1]);
                    sum += wt[t * k + j];
                }
                assert_true(fabs(sum - 1.0) < 1e-5);
                for (int x = 0; x < E; x++)
                    assert_true(sc[(size_t)t * E + x] > 0.0f && sc[(size_t)t * E + x] < 1.0f);
            }
            count += 3;
        } else {
            assert_null(m3_store_get(st, name));
        }

        /* teacher-forced: layer l alone on a fresh state reproduces its output */
        m3_state *s1 = m3_state_new(&f->m, n + 1, M3_MODE_FP32, &e);
        float *x = malloc((size_t)n * H * 4);
        memcpy(x, in, (size_t)n * H * 4);
        assert_int_equal(m3_layer_forward(&f->m, s1, l, x, 6, NULL, &e), 0);
        assert_int_equal(m3_layer_forward(&f->m, s1, l, x + 6 * H, n - 6, NULL, &e), 0);
        assert_memory_equal(x, out, (size_t)n * H * 4);
        /* a whole-model forward refuses a state that layer_forward left uneven */
        if (L > 1) {
            assert_int_equal(m3_forward(&f->m, s1, f->toks, 1, NULL, NULL, &e), -1);
            assert_non_null(strstr(e.msg, "fresh state"));
        }
        m3_state_free(s1);
        free(x);
    }
    assert_int_equal((int)m3_store_count(st), count);
    m3_store_close(st);
    free(logits);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_equals_prefill_fp32),
        cmocka_unit_test(test_decode_equals_prefill_bf16),
        cmocka_unit_test(test_sparse_equals_dense_few_blocks),
        cmocka_unit_test(test_bf16_mode),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_model_notes),
        cmocka_unit_test(test_forward_embeds),
        cmocka_unit_test(test_dump_and_layer_forward),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
