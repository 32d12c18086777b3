/* test_eagle3.c — Eagle3 taps, drafter and speculative decoding on tiny
 * random checkpoints.
 *
 * Spec: M3-EAGLE-TAP-1 (taps are the residual entering the tap layer: equal to
 * the dump's layers.{tap}.input, not layers.{tap}.output; configurable ids),
 * M3-EAGLE-DRAFT-1..4 (drafter loading: fc_norm present/absent, embed /
 * lm_head / norm from the target, d2t, config flags; bad checkpoints are
 * errors), M3-EAGLE-VERIFY-1 (greedy speculative output == plain greedy output
 * for many prompts and K = 1..5, with random drafters), M3-CACHE-3 (the target
 * state after speculation equals one that never saw the rejected drafts, bit for
 * bit; the drafter state likewise), M3-EAGLE-VERIFY-2 (sampled speculative
 * output follows the target's sampling distribution: chi-square test).
 *
 * The target is written by tests/fixture.h; drafters are written here.
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

#include "eagle3.h"
#include "fixture.h"
#include "model.h"
#include "speculative.h"

#define NV 16    /* target vocabulary: small, so random drafters get accepted sometimes */
#define MAXN 256

typedef struct fx {
    char dir[256];   /* temp root */
    char tdir[300];  /* target checkpoint */
    m3_model m;
} fx;

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char p[800];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (unlink(p) != 0)
            rm_tree(p);
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
    o.num_layers = 8; /* taps (2, 4, 5): all distinct */
    o.hidden_size = 32;
    o.num_heads = 4;
    o.num_kv_heads = 2;
    o.head_dim = 8;
    o.rotary_dim = 4;
    o.index_head_dim = 8;
    o.vocab_size = NV;
    o.dense_intermediate_size = 48;
    o.intermediate_size = 16;
    o.shared_intermediate_size = 16;
    snprintf(f->dir, sizeof f->dir, "/tmp/m3_test_eagle3_XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->tdir, sizeof f->tdir, "%s/target", f->dir);
    if (m3_fixture_write(f->tdir, &o, &e) != 0 || m3_model_open(&f->m, f->tdir, NULL, &e) != 0) {
        fprintf(stderr, "fixture: %s\n", e.msg);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    m3_model_close(&f->m);
    rm_tree(f->dir);
    free(f);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* drafter checkpoints                                                      */

typedef struct dopts {
    int fc_norm;        /* write fc_norm.{0,1,2} */
    int own_embed;      /* write embed_tokens */
    int own_head;       /* write lm_head + norm */
    int d2t;            /* draft vocab NV/2, draft id i -> target id 2i */
    int nbr;            /* norm_before_residual */
    int gemma;          /* use_gemma_norm */
    int partial;        /* partial_rotary_factor 0.5 */
    const char *taps;   /* NULL or a JSON list */
    const char *extra;  /* NULL or extra JSON "key": value text */
    const char *skip;   /* NULL or a tensor name not to write */
    int bad_shape;      /* fc.weight written with a wrong shape */
    const char *act;    /* hidden_act; NULL: "silu" */
    uint64_t seed;
} dopts;

static uint64_t rng_next(uint64_t *x) { return m3_fixture_splitmix(x); }

static float rng_unif(uint64_t *x, float a) { return m3_fixture_uniform(x, a); }

/* Add an f32 tensor [d0, d1] (d1 0: 1-D): uniform(a) + base. */
static void add_t(m3_st_writer *w, const dopts *o, const char *name, int64_t d0, int64_t d1,
                  float a, float base, uint64_t *x)
{
    if (o->skip && !strcmp(o->skip, name))
        return;
    size_t n = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    float *b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++)
        b[i] = base + rng_unif(x, a);
    int64_t shape[2] = {d0, d1};
    m3_err e = {{0}};
    assert_int_equal(m3_st_writer_add(w, name, M3_F32, d1 ? 2 : 1, shape, b, &e), 0);
    free(b);
}

static void write_drafter(const char *dir, const dopts *o)
{
    const int H = 32, nh = 2, nkv = 1, hd = 16, I = 48;
    char p[600];
    assert_true(mkdir(dir, 0777) == 0 || errno == EEXIST);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "{\"architectures\": [\"LlamaForCausalLMEagle3\"], \"model_type\": \"llama\",\n"
               " \"hidden_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d,\n"
               " \"head_dim\": %d, \"intermediate_size\": %d, \"rms_norm_eps\": 1e-06,\n"
               " \"rope_theta\": 10000.0, \"hidden_act\": \"%s\", \"num_hidden_layers\": 1,\n"
               " \"vocab_size\": %d, \"tie_word_embeddings\": false, \"rope_scaling\": null",
            H, nh, nkv, hd, I, o->act ? o->act : "silu", NV);
    if (o->d2t)
        fprintf(f, ", \"draft_vocab_size\": %d", NV / 2);
    if (o->nbr)
        fprintf(f, ", \"norm_before_residual\": true");
    if (o->gemma)
        fprintf(f, ", \"use_gemma_norm\": true");
    if (o->partial)
        fprintf(f, ", \"partial_rotary_factor\": 0.5");
    if (o->taps)
        fprintf(f, ", \"eagle_config\": {\"eagle_aux_hidden_state_layer_ids\": %s}", o->taps);
    if (o->extra)
        fprintf(f, ", %s", o->extra);
    fprintf(f, "}\n");
    fclose(f);

    m3_st_writer *w = m3_st_writer_new();
    uint64_t x = o->seed * 7919u + 17u;
    const float nb = o->gemma ? 0.0f : 1.0f; /* norm weight base: llama ~1, gemma ~0 */
    if (o->bad_shape)
        add_t(w, o, "fc.weight", H, 2 * H, sqrtf(3.0f / (3 * H)), 0, &x);
    else
        add_t(w, o, "fc.weight", H, 3 * H, sqrtf(3.0f / (3 * H)), 0, &x);
    if (o->fc_norm)
        for (int i = 0; i < 3; i++) {
            snprintf(p, sizeof p, "fc_norm.%d.weight", i);
            add_t(w, o, p, H, 0, 0.2f, nb, &x);
        }
    add_t(w, o, "layers.0.input_layernorm.weight", H, 0, 0.2f, nb, &x);
    add_t(w, o, "layers.0.hidden_norm.weight", H, 0, 0.2f, nb, &x);
    add_t(w, o, "layers.0.post_attention_layernorm.weight", H, 0, 0.2f, nb, &x);
    add_t(w, o, "layers.0.self_attn.q_proj.weight", nh * hd, 2 * H, sqrtf(3.0f / (2 * H)), 0, &x);
    add_t(w, o, "layers.0.self_attn.k_proj.weight", nkv * hd, 2 * H, sqrtf(3.0f / (2 * H)), 0, &x);
    add_t(w, o, "layers.0.self_attn.v_proj.weight", nkv * hd, 2 * H, sqrtf(3.0f / (2 * H)), 0, &x);
    add_t(w, o, "layers.0.self_attn.o_proj.weight", H, nh * hd, sqrtf(3.0f / (nh * hd)), 0, &x);
    add_t(w, o, "layers.0.mlp.gate_proj.weight", I, H, sqrtf(3.0f / H), 0, &x);
    add_t(w, o, "layers.0.mlp.up_proj.weight", I, H, sqrtf(3.0f / H), 0, &x);
    add_t(w, o, "layers.0.mlp.down_proj.weight", H, I, sqrtf(3.0f / I), 0, &x);
    const int Vd = o->d2t ? NV / 2 : NV;
    if (o->own_embed)
        add_t(w, o, "embed_tokens.weight", NV, H, 1.0f, 0, &x);
    if (o->own_head || o->d2t) {
        add_t(w, o, "lm_head.weight", Vd, H, sqrtf(3.0f / H), 0, &x);
        add_t(w, o, "norm.weight", H, 0, 0.2f, nb, &x);
    }
    m3_err e = {{0}};
    if (o->d2t) {
        int64_t d2t[NV / 2], shape[1] = {NV / 2};
        for (int i = 0; i < NV / 2; i++)
            d2t[i] = i; /* draft id i -> target id 2i */
        assert_int_equal(m3_st_writer_add(w, "d2t", M3_I64, 1, shape, d2t, &e), 0);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(m3_st_writer_save(w, p, &e), 0);
    m3_st_writer_free(w);
}

static void open_drafter(fx *f, const dopts *o, const char *name, m3_eagle3 *d)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", f->dir, name);
    write_drafter(dir, o);
    m3_err e = {{0}};
    if (m3_eagle3_open(d, dir, &f->m, NULL, &e) != 0)
        fail_msg("drafter open: %s", e.msg);
}

/* ------------------------------------------------------------------------ */
/* taps                                                                     */

static const float *dump_get(m3_store *st, const char *name, int64_t d0, int64_t d1)
{
    const m3_tensor *t = m3_store_get(st, name);
    if (!t)
        fail_msg("dump has no %s", name);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], d0);
    assert_int_equal(t->shape[1], d1);
    return t->data;
}

/* M3-EAGLE-TAP-1 / M3-DUMP-4: the taps are layers.{tap}.input (not .output),
 * both in model.c's dump and in m3_eagle3_target_forward; logits are the
 * m3_forward logits bit for bit; configured ids are honoured. */
static void test_aux_taps(void **state)
{
    fx *f = *state;
    const int H = f->m.cfg.text.hidden_size, V = NV, L = f->m.cfg.text.num_layers, T = 7;
    int32_t toks[T];
    for (int i = 0; i < T; i++)
        toks[i] = (int32_t)((i * 5 + 3) % V);
    int taps[3];
    m3_eagle3_default_taps(L, taps);
    assert_int_equal(taps[0], 2);
    assert_int_equal(taps[1], 4);
    assert_int_equal(taps[2], 5);
    int small[3];
    m3_eagle3_default_taps(4, small); /* (min(2,3), 2, max(1,0)) ascending */
    assert_int_equal(small[0], 1);
    assert_int_equal(small[1], 2);
    assert_int_equal(small[2], 2);
    m3_eagle3_default_taps(1, small);
    assert_int_equal(small[0], 0);
    assert_int_equal(small[2], 0);

    m3_err e = {{0}};
    m3_state *s = m3_state_new(&f->m, 32, M3_MODE_FP32, &e);
    m3_st_writer *w = m3_st_writer_new();
    float *lg = malloc(sizeof(float) * T * V);
    assert_int_equal(m3_forward(&f->m, s, toks, T, lg, w, &e), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/dump.safetensors", f->dir);
    assert_int_equal(m3_st_writer_save(w, path, &e), 0);
    m3_st_writer_free(w);
    m3_store *st = NULL;
    assert_int_equal(m3_store_open(&st, path, &e), 0);
    const float *daux = dump_get(st, "eagle3.aux", T, 3 * H);

    /* ours: all rows at once, and split 3 + 4 (taps of a verification chunk) */
    float *aux = malloc(sizeof(float) * T * 3 * H), *lg2 = malloc(sizeof(float) * T * V);
    m3_state *s2 = m3_state_new(&f->m, 32, M3_MODE_FP32, &e);
    assert_int_equal(m3_eagle3_target_forward(&f->m, s2, taps, toks, 3, lg2, 3, aux, &e), 0);
    assert_int_equal(m3_eagle3_target_forward(&f->m, s2, taps, toks + 3, T - 3, lg2 + 3 * V, T - 3,
                                              aux + 3 * 3 * H, &e), 0);
    assert_int_equal(m3_state_len(s2), T);
    assert_memory_equal(lg, lg2, sizeof(float) * T * V);
    assert_memory_equal(aux, daux, sizeof(float) * T * 3 * H);
    for (int j = 0; j < 3; j++) {
        char n[64];
        snprintf(n, sizeof n, "layers.%d.input", taps[j]);
        const float *in = dump_get(st, n, T, H);
        snprintf(n, sizeof n, "layers.%d.output", taps[j]);
        const float *outp = dump_get(st, n, T, H);
        int differs = 0;
        for (int t = 0; t < T; t++) {
            assert_memory_equal(aux + ((size_t)t * 3 + j) * H, in + (size_t)t * H,
                                sizeof(float) * H);
            differs |= memcmp(aux + ((size_t)t * 3 + j) * H, outp + (size_t)t * H,
                              sizeof(float) * H) != 0;
        }
        assert_true(differs); /* the off-by-one would be caught */
    }

    /* configured taps (unsorted in the file) are used in ascending order */
    m3_eagle3 d;
    dopts o = {.fc_norm = 1, .taps = "[6, 1, 3]", .seed = 5};
    open_drafter(f, &o, "d_taps", &d);
    assert_true(d.cfg.taps_from_config);
    assert_int_equal(d.cfg.taps[0], 1);
    assert_int_equal(d.cfg.taps[1], 3);
    assert_int_equal(d.cfg.taps[2], 6);
    m3_state_truncate(s2, 0);
    assert_int_equal(m3_eagle3_target_forward(&f->m, s2, d.cfg.taps, toks, T, NULL, 0, aux, &e), 0);
    for (int j = 0; j < 3; j++) {
        char n[64];
        snprintf(n, sizeof n, "layers.%d.input", d.cfg.taps[j]);
        const float *in = dump_get(st, n, T, H);
        for (int t = 0; t < T; t++)
            assert_memory_equal(aux + ((size_t)t * 3 + j) * H, in + (size_t)t * H,
                                sizeof(float) * H);
    }
    m3_eagle3_close(&d);
    m3_store_close(st);
    m3_state_free(s);
    m3_state_free(s2);
    free(lg);
    free(lg2);
    free(aux);
}


/* ------------------------------------------------------------------------ */
/* drafter forward against an independent double-precision reference       */

/* Element of drafter tensor `name` (row-major), read by name from the file. */
static double dw(const m3_store *st, const char *name, size_t i)
{
    const m3_tensor *t = m3_store_get(st, name);
    if (!t)
        fail_msg("reference: no tensor %s", name);
    assert_int_equal(t->dtype, M3_F32);
    return ((const float *)t->data)[i];
}

static void ref_norm(double *y, const double *x, int n, const m3_store *st, const char *name,
                     int gemma, const m3_vec *borrowed, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) {
        double w = borrowed ? m3_vec_at(borrowed, i) : dw(st, name, (size_t)i);
        y[i] = x[i] * r * ((gemma || borrowed) ? 1.0 + w : w);
    }
}

static void ref_lin(double *y, const double *x, int rows, int cols, const m3_store *st,
                    const char *name)
{
    for (int r = 0; r < rows; r++) {
        double a = 0;
        for (int c = 0; c < cols; c++)
            a += dw(st, name, (size_t)r * cols + c) * x[c];
        y[r] = a;
    }
}

/* M3-EAGLE-DRAFT-2/3/4: combine + 6 chained draft steps equal a plain double
 * implementation of the clauses (tolerance: fp32 vs double rounding). */
static void drafter_vs_reference(fx *f, const dopts *o, const char *name)
{
    m3_eagle3 d;
    open_drafter(f, o, name, &d);
    char path[700];
    snprintf(path, sizeof path, "%s/%s/model.safetensors", f->dir, name);
    m3_store *st = NULL;
    m3_err e = {{0}};
    assert_int_equal(m3_store_open(&st, path, &e), 0);
    enum { H = 32, NH = 2, NKV = 1, HD = 16, I = 48, STEPS = 6 };
    const double eps = 1e-6, theta = 10000.0;
    const int rd = o->partial ? HD / 2 : HD, Vd = o->d2t ? NV / 2 : NV;
    m3_eagle3_state *ds = m3_eagle3_state_new(&d, 16, &e);
    static double kc[STEPS][NKV * HD], vc[STEPS][NKV * HD];
    double feat[H];
    float ff[H], faux[3 * H], flog[NV];
    uint64_t x = 4242;
    for (int p = 0; p < STEPS; p++) {
        const int32_t tok = (int32_t)((p * 7 + 3) % NV);
        if (p < 3) { /* a verified position: feature from (random) taps */
            double a[3 * H], an[3 * H];
            for (int i = 0; i < 3 * H; i++)
                faux[i] = rng_unif(&x, 2.0f), a[i] = faux[i];
            for (int j = 0; j < 3; j++) {
                char n[32];
                snprintf(n, sizeof n, "fc_norm.%d.weight", j);
                if (o->fc_norm)
                    ref_norm(an + j * H, a + j * H, H, st, n, o->gemma, NULL, eps);
                else
                    memcpy(an + j * H, a + j * H, sizeof(double) * H);
            }
            ref_lin(feat, an, H, 3 * H, st, "fc.weight");
            m3_eagle3_combine(&d, ds, faux, ff);
            for (int i = 0; i < H; i++)
                assert_true(fabs(ff[i] - feat[i]) <= 1e-4 * (1 + fabs(feat[i])));
        }
        /* reference step */
        double emb[H], z[2 * H], q[NH * HD], att[NH * HD], h[H], hn[H], g[I], u[I], t[H];
        for (int i = 0; i < H; i++)
            emb[i] = o->own_embed ? dw(st, "embed_tokens.weight", (size_t)tok * H + i)
                                  : m3_mat_at(&f->m.w.embed, tok, i);
        ref_norm(z, emb, H, st, "layers.0.input_layernorm.weight", o->gemma, NULL, eps);
        ref_norm(z + H, feat, H, st, "layers.0.hidden_norm.weight", o->gemma, NULL, eps);
        ref_lin(q, z, NH * HD, 2 * H, st, "layers.0.self_attn.q_proj.weight");
        ref_lin(kc[p], z, NKV * HD, 2 * H, st, "layers.0.self_attn.k_proj.weight");
        ref_lin(vc[p], z, NKV * HD, 2 * H, st, "layers.0.self_attn.v_proj.weight");
        for (int hh = 0; hh < NH + NKV; hh++) { /* rotate-half on [0, rd) */
            double *v = hh < NH ? q + hh * HD : kc[p] + (hh - NH) * HD;
            for (int i = 0; i < rd / 2; i++) {
                double ang = p / pow(theta, 2.0 * i / rd), c = cos(ang), sn = sin(ang);
                double x1 = v[i], x2 = v[i + rd / 2];
                v[i] = x1 * c - x2 * sn;
                v[i + rd / 2] = x2 * c + x1 * sn;
            }
        }
        for (int hh = 0; hh < NH; hh++) {
            const int kv = hh / (NH / NKV);
            double sc[STEPS], mx = -INFINITY, sum = 0;
            for (int k = 0; k <= p; k++) {
                double a = 0;
                for (int i = 0; i < HD; i++)
                    a += q[hh * HD + i] * kc[k][kv * HD + i];
                sc[k] = a / sqrt((double)HD);
                mx = fmax(mx, sc[k]);
            }
            for (int k = 0; k <= p; k++)
                sum += (sc[k] = exp(sc[k] - mx));
            for (int i = 0; i < HD; i++) {
                double a = 0;
                for (int k = 0; k <= p; k++)
                    a += sc[k] / sum * vc[k][kv * HD + i];
                att[hh * HD + i] = a;
            }
        }
        ref_lin(t, att, H, NH * HD, st, "layers.0.self_attn.o_proj.weight");
        for (int i = 0; i < H; i++)
            h[i] = (o->nbr ? z[H + i] : feat[i]) + t[i];
        ref_norm(hn, h, H, st, "layers.0.post_attention_layernorm.weight", o->gemma, NULL, eps);
        ref_lin(g, hn, I, H, st, "layers.0.mlp.gate_proj.weight");
        ref_lin(u, hn, I, H, st, "layers.0.mlp.up_proj.weight");
        for (int i = 0; i < I; i++)
            g[i] = g[i] / (1 + exp(-g[i])) * u[i];
        ref_lin(t, g, H, I, st, "layers.0.mlp.down_proj.weight");
        for (int i = 0; i < H; i++)
            h[i] += t[i];
        const int own_head = o->own_head || o->d2t;
        ref_norm(feat, h, H, st, "norm.weight", o->gemma, own_head ? NULL : &f->m.w.final_norm,
                 own_head ? eps : f->m.cfg.text.rms_norm_eps);
        double lg[NV];
        for (int r = 0; r < Vd; r++) {
            double a = 0;
            for (int c = 0; c < H; c++)
                a += (own_head ? dw(st, "lm_head.weight", (size_t)r * H + c)
                               : m3_mat_at(&f->m.w.lm_head, r, c)) * feat[c];
            lg[r] = a;
        }
        /* ours: the feature is g for verified positions, else the recurrence */
        assert_int_equal(m3_eagle3_step(&d, ds, tok, ff, flog, ff, &e), 0);
        for (int i = 0; i < H; i++)
            if (!(fabs(ff[i] - feat[i]) <= 1e-4 * (1 + fabs(feat[i]))))
                fail_msg("%s step %d: feature[%d] %g vs reference %g", name, p, i, ff[i], feat[i]);
        for (int r = 0; r < Vd; r++)
            if (!(fabs(flog[r] - lg[r]) <= 1e-4 * (1 + fabs(lg[r]))))
                fail_msg("%s step %d: logit[%d] %g vs reference %g", name, p, r, flog[r], lg[r]);
        for (int i = 0; i < H; i++) /* carry our fp32 feature forward in both */
            feat[i] = ff[i];
    }
    if (o->d2t)
        for (int i = 0; i < Vd; i++)
            assert_int_equal(m3_eagle3_to_target(&d, i), 2 * i);
    m3_eagle3_state_free(ds);
    m3_store_close(st);
    m3_eagle3_close(&d);
}

static void test_drafter_forward(void **state)
{
    fx *f = *state;
    dopts a = {.fc_norm = 1, .seed = 21};
    dopts b = {.fc_norm = 0, .own_embed = 1, .own_head = 1, .nbr = 1, .seed = 22};
    dopts c = {.fc_norm = 1, .gemma = 1, .partial = 1, .own_head = 1, .seed = 23};
    dopts g = {.fc_norm = 1, .d2t = 1, .own_embed = 1, .seed = 24};
    drafter_vs_reference(f, &a, "ra");
    drafter_vs_reference(f, &b, "rb");
    drafter_vs_reference(f, &c, "rc");
    drafter_vs_reference(f, &g, "rd");
}

/* ------------------------------------------------------------------------ */
/* greedy equality and rollback                                             */

/* Plain greedy decoding: n_new tokens after prompt. */
static void plain_greedy_mode(fx *f, const int32_t *prompt, int np, int n_new, int32_t *out,
                              m3_mode mode)
{
    m3_err e = {{0}};
    m3_state *s = m3_state_new(&f->m, np + n_new, mode, &e);
    float lg[NV];
    float *all = malloc(sizeof(float) * (size_t)np * NV);
    assert_int_equal(m3_forward(&f->m, s, prompt, np, all, NULL, &e), 0);
    memcpy(lg, all + (size_t)(np - 1) * NV, sizeof lg);
    free(all);
    for (int i = 0; i < n_new; i++) {
        out[i] = m3_argmax(lg, NV);
        if (i + 1 < n_new)
            assert_int_equal(m3_forward(&f->m, s, &out[i], 1, lg, NULL, &e), 0);
    }
    m3_state_free(s);
}

static void plain_greedy(fx *f, const int32_t *prompt, int np, int n_new, int32_t *out)
{
    plain_greedy_mode(f, prompt, np, n_new, out, M3_MODE_FP32);
}

/* M3-CACHE-3 after a speculative run: the target state (prompt + out[0..n-2])
 * continues exactly like a fresh state over the same tokens; the drafter state
 * equals a drafter seeded from scratch with the fresh target's features. */
static void check_states(fx *f, const m3_eagle3 *d, m3_state *ts, m3_eagle3_state *ds,
                         const int32_t *prompt, int np, const int32_t *out, int n)
{
    const int H = f->m.cfg.text.hidden_size;
    m3_err e = {{0}};
    int32_t seq[MAXN];
    memcpy(seq, prompt, sizeof(int32_t) * np);
    memcpy(seq + np, out, sizeof(int32_t) * n);
    const int len = np + n - 1;
    assert_int_equal(m3_state_len(ts), len);
    int64_t dl = m3_eagle3_state_len(ds);
    assert_true(dl >= np && dl <= len);

    m3_state *fr = m3_state_new(&f->m, len + 2, M3_MODE_FP32, &e);
    float *aux = malloc(sizeof(float) * (size_t)(len + 2) * 3 * H);
    assert_int_equal(m3_eagle3_target_forward(&f->m, fr, d->cfg.taps, seq, len, NULL, 0, aux, &e), 0);
    /* continue both with [last, x]: logits and taps bit-identical */
    int32_t cont[2] = {out[n - 1], (int32_t)((out[n - 1] + 3) % NV)};
    float la[2 * NV], lb[2 * NV], aa[2 * 3 * 32], ab[2 * 3 * 32];
    assert_int_equal(m3_eagle3_target_forward(&f->m, ts, d->cfg.taps, cont, 2, la, 2, aa, &e), 0);
    assert_int_equal(m3_eagle3_target_forward(&f->m, fr, d->cfg.taps, cont, 2, lb, 2, ab, &e), 0);
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_equal(aa, ab, sizeof(float) * 2 * 3 * H);
    m3_state_truncate(ts, len); /* leave it as it was */

    /* drafter: fresh seeding of positions 0..dl-1, then one more step on both */
    m3_eagle3_state *fd = m3_eagle3_state_new(d, len + 2, &e);
    float g[32], dla[NV], dlb[NV], fa[32], fb[32];
    for (int64_t i = 0; i < dl; i++) {
        m3_eagle3_combine(d, fd, aux + (size_t)i * 3 * H, g);
        assert_int_equal(m3_eagle3_step(d, fd, seq[i + 1], g, NULL, NULL, &e), 0);
    }
    m3_eagle3_combine(d, fd, aux + (size_t)dl * 3 * H, g);
    assert_int_equal(m3_eagle3_step(d, fd, seq[dl + 1], g, dla, fa, &e), 0);
    assert_int_equal(m3_eagle3_step(d, ds, seq[dl + 1], g, dlb, fb, &e), 0);
    assert_memory_equal(dla, dlb, sizeof(float) * d->cfg.draft_vocab);
    assert_memory_equal(fa, fb, sizeof(float) * H);
    m3_eagle3_state_truncate(ds, dl);
    m3_eagle3_state_free(fd);
    m3_state_free(fr);
    free(aux);
}

static void greedy_case(fx *f, const dopts *o, const char *name, int64_t *acc, int64_t *deep)
{
    m3_eagle3 d;
    open_drafter(f, o, name, &d);
    m3_err e = {{0}};
    m3_sampler sp;
    assert_int_equal(m3_sampler_init(&sp, NV, 1, 1.0f, 0, 1.0f, 1), 0);
    const int n_new = 20;
    for (int pi = 0; pi < 8; pi++) {
        int32_t prompt[16], ref[32], out[32];
        const int np = 1 + (pi * 3) % 11;
        uint64_t x = 1000u + (uint64_t)pi * 31u + o->seed;
        for (int i = 0; i < np; i++)
            prompt[i] = (int32_t)(rng_next(&x) % NV);
        plain_greedy(f, prompt, np, n_new, ref);
        for (int K = 1; K <= 5; K++) {
            /* two spare positions for the continuation checks in check_states */
            m3_state *ts = m3_state_new(&f->m, np + n_new + 1, M3_MODE_FP32, &e);
            m3_eagle3_state *ds = m3_eagle3_state_new(&d, np + n_new + 1, &e);
            assert_non_null(ts);
            assert_non_null(ds);
            m3_spec_opts so = {.k = K, .max_new_tokens = n_new};
            m3_spec_stats st;
            int n = 0;
            if (m3_spec_generate(&f->m, ts, &d, ds, prompt, np, &sp, &so, out, &n, &st, &e) != 0)
                fail_msg("%s K=%d prompt %d: %s", name, K, pi, e.msg);
            assert_int_equal(n, n_new);
            if (memcmp(out, ref, sizeof(int32_t) * n_new) != 0)
                fail_msg("%s: greedy speculative output differs from plain (K=%d, prompt %d)",
                         name, K, pi);
            /* stats are consistent: each round outputs accepted + 1 */
            assert_int_equal(st.generated, n_new);
            assert_int_equal(st.target_forwards, st.rounds + 1);
            assert_int_equal(st.accepted + st.rounds + 1, n_new);
            assert_true(st.tokens_per_forward >= 1.0);
            *acc += st.accepted;
            for (int j = 2; j <= K; j++)
                *deep += st.accept_hist[j];
            check_states(f, &d, ts, ds, prompt, np, out, n);
            m3_state_free(ts);
            m3_eagle3_state_free(ds);
        }
    }
    m3_sampler_free(&sp);
    m3_eagle3_close(&d);
}

/* M3-EAGLE-VERIFY-1 with several drafter variants (M3-EAGLE-DRAFT-1/4). */
static void test_greedy_equals_plain(void **state)
{
    fx *f = *state;
    int64_t acc = 0, deep = 0;
    dopts a = {.fc_norm = 1, .seed = 1};                            /* embed/head/norm from target */
    dopts b = {.fc_norm = 0, .own_embed = 1, .own_head = 1, .seed = 2}; /* no fc_norm, own weights */
    dopts c = {.fc_norm = 1, .d2t = 1, .nbr = 1, .partial = 1, .seed = 3};
    dopts g = {.fc_norm = 1, .gemma = 1, .own_head = 1, .taps = "[1, 4, 7]", .seed = 4};
    greedy_case(f, &a, "ga", &acc, &deep);
    greedy_case(f, &b, "gb", &acc, &deep);
    greedy_case(f, &c, "gc", &acc, &deep);
    greedy_case(f, &g, "gg", &acc, &deep);
    /* the accept paths were exercised, not only rejections */
    assert_true(acc > 0);
    assert_true(deep > 0);
}

/* bf16 target mode (M3-NUM-BF16-2): verification rows still equal decode rows,
 * so greedy speculation still reproduces plain greedy decoding. */
static void test_greedy_bf16(void **state)
{
    fx *f = *state;
    m3_eagle3 d;
    dopts o = {.fc_norm = 1, .seed = 31};
    open_drafter(f, &o, "gbf", &d);
    m3_err e = {{0}};
    m3_sampler sp;
    assert_int_equal(m3_sampler_init(&sp, NV, 1, 1.0f, 0, 1.0f, 1), 0);
    const int n_new = 16;
    for (int pi = 0; pi < 4; pi++) {
        int32_t prompt[8], ref[32], out[32];
        const int np = 2 + pi;
        for (int i = 0; i < np; i++)
            prompt[i] = (int32_t)((pi * 5 + i * 3 + 1) % NV);
        plain_greedy_mode(f, prompt, np, n_new, ref, M3_MODE_BF16);
        for (int K = 1; K <= 5; K++) {
            m3_state *ts = m3_state_new(&f->m, np + n_new, M3_MODE_BF16, &e);
            m3_eagle3_state *ds = m3_eagle3_state_new(&d, np + n_new, &e);
            m3_spec_opts so = {.k = K, .max_new_tokens = n_new};
            int n = 0;
            if (m3_spec_generate(&f->m, ts, &d, ds, prompt, np, &sp, &so, out, &n, NULL, &e) != 0)
                fail_msg("bf16 K=%d: %s", K, e.msg);
            assert_int_equal(n, n_new);
            assert_memory_equal(out, ref, sizeof(int32_t) * n_new);
            m3_state_free(ts);
            m3_eagle3_state_free(ds);
        }
    }
    m3_sampler_free(&sp);
    m3_eagle3_close(&d);
}

/* Explicit rollback (M3-CACHE-3): a verification over rejected drafts, rolled
 * back, leaves a state identical to one that never saw them. */
static void test_rollback(void **state)
{
    fx *f = *state;
    const int H = f->m.cfg.text.hidden_size;
    int taps[3];
    m3_eagle3_default_taps(f->m.cfg.text.num_layers, taps);
    m3_err e = {{0}};
    const int32_t prompt[5] = {3, 1, 4, 1, 5};
    const int32_t verify[4] = {9, 2, 6, 5}; /* last + 3 drafts; keep 1 draft */
    const int32_t next[3] = {7, 8, 0};
    m3_state *a = m3_state_new(&f->m, 16, M3_MODE_FP32, &e), *b = m3_state_new(&f->m, 16, M3_MODE_FP32, &e);
    float la[3 * NV], lb[3 * NV], aa[3 * 3 * 32], ab[3 * 3 * 32], lv[4 * NV];
    assert_int_equal(m3_eagle3_target_forward(&f->m, a, taps, prompt, 5, NULL, 0, NULL, &e), 0);
    assert_int_equal(m3_eagle3_target_forward(&f->m, a, taps, verify, 4, lv, 4, NULL, &e), 0);
    m3_state_truncate(a, 5 + 2);
    assert_int_equal(m3_eagle3_target_forward(&f->m, a, taps, next, 3, la, 3, aa, &e), 0);
    int32_t seq[10] = {3, 1, 4, 1, 5, 9, 2, 7, 8, 0};
    assert_int_equal(m3_eagle3_target_forward(&f->m, b, taps, seq, 7, NULL, 0, NULL, &e), 0);
    assert_int_equal(m3_eagle3_target_forward(&f->m, b, taps, seq + 7, 3, lb, 3, ab, &e), 0);
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_equal(aa, ab, sizeof(float) * 3 * 3 * H);
    m3_state_free(a);
    m3_state_free(b);
}

/* ------------------------------------------------------------------------ */
/* sampled decoding                                                         */

/* Upper alpha quantile of chi-square(df) by Wilson-Hilferty, z the normal quantile. */
static double chi2_crit(int df, double z)
{
    double k = df, h = 2.0 / (9.0 * k);
    double c = 1.0 - h + z * sqrt(h);
    return k * c * c * c;
}

/* Chi-square of counts against probabilities p [n] (N draws), pooling cells
 * with expected < 5 into one; returns the statistic, *df the degrees of freedom. */
static double chi2(const int64_t *cnt, const double *p, int n, int64_t N, int *df)
{
    double stat = 0.0, pe = 0.0;
    int64_t po = 0;
    int cells = 0;
    for (int i = 0; i < n; i++) {
        double ex = p[i] * (double)N;
        if (ex < 5.0) {
            pe += ex;
            po += cnt[i];
            continue;
        }
        stat += ((double)cnt[i] - ex) * ((double)cnt[i] - ex) / ex;
        cells++;
    }
    if (pe > 0.0) {
        if (pe >= 1e-9) {
            stat += ((double)po - pe) * ((double)po - pe) / pe;
            cells++;
        } else {
            assert_int_equal(po, 0); /* impossible cells were never drawn */
        }
    }
    *df = cells - 1;
    return stat;
}

/* Exact target distribution after seq [n] under the sampler's transform. */
static void target_probs(fx *f, const m3_sampler *sp, const int32_t *seq, int n, double *p)
{
    m3_err e = {{0}};
    m3_state *s = m3_state_new(&f->m, n, M3_MODE_FP32, &e);
    float *lg = malloc(sizeof(float) * (size_t)n * NV), pf[NV], z[NV];
    int32_t ord[NV];
    assert_int_equal(m3_forward(&f->m, s, seq, n, lg, NULL, &e), 0);
    const float *last = lg + (size_t)(n - 1) * NV;
    if (sp->top_k == 0 && sp->top_p >= 1.0f) {
        /* independent of the code under test: softmax(logits / T) in double */
        double mx = -INFINITY, sum = 0.0;
        for (int i = 0; i < NV; i++)
            mx = fmax(mx, (double)last[i] / sp->temperature);
        for (int i = 0; i < NV; i++)
            sum += (p[i] = exp((double)last[i] / sp->temperature - mx));
        for (int i = 0; i < NV; i++)
            p[i] /= sum;
    } else {
        m3_spec_probs(sp, last, NV, pf, ord, z);
        for (int i = 0; i < NV; i++)
            p[i] = pf[i];
    }
    free(lg);
    m3_state_free(s);
}

static void sampled_case(fx *f, float temp, int top_k, float top_p, const dopts *o,
                         const char *name)
{
    m3_eagle3 d;
    open_drafter(f, o, name, &d);
    m3_err e = {{0}};
    const int32_t prompt[4] = {2, 7, 1, 8};
    const int np = 4, n_new = 3, K = 2, RUNS = 4000;
    m3_sampler ref;
    assert_int_equal(m3_sampler_init(&ref, NV, 0, temp, top_k, top_p, 1), 0);

    /* M3-SAMPLE-2: the transform used for p and q is the one m3_sample draws
     * from: with the same seed the first token (one uniform) is identical. */
    {
        float lg[4 * NV];
        m3_state *s = m3_state_new(&f->m, np, M3_MODE_FP32, &e);
        assert_int_equal(m3_forward(&f->m, s, prompt, np, lg, NULL, &e), 0);
        float pf[NV], z[NV];
        int32_t ord[NV];
        for (uint64_t seed = 1; seed <= 300; seed++) {
            m3_sampler a, b;
            assert_int_equal(m3_sampler_init(&a, NV, 0, temp, top_k, top_p, seed), 0);
            assert_int_equal(m3_sampler_init(&b, NV, 0, temp, top_k, top_p, seed), 0);
            int n = m3_spec_probs(&b, lg + 3 * NV, NV, pf, ord, z);
            assert_int_equal(m3_sample(&a, lg + 3 * NV),
                             m3_spec_draw(pf, ord, n, m3_sampler_uniform(&b)));
            m3_sampler_free(&a);
            m3_sampler_free(&b);
        }
        m3_state_free(s);
    }

    /* exact distributions: joint of (t1, t2) and marginal of t3 */
    double p1[NV], p12[NV * NV], p3[NV];
    memset(p3, 0, sizeof p3);
    target_probs(f, &ref, prompt, np, p1);
    for (int a = 0; a < NV; a++) {
        int32_t seq[8] = {2, 7, 1, 8, a};
        double p2[NV];
        if (p1[a] == 0.0) {
            for (int b = 0; b < NV; b++)
                p12[a * NV + b] = 0.0;
            continue;
        }
        target_probs(f, &ref, seq, np + 1, p2);
        for (int b = 0; b < NV; b++) {
            p12[a * NV + b] = p1[a] * p2[b];
            if (p12[a * NV + b] == 0.0)
                continue;
            double pp[NV];
            seq[np + 1] = b;
            target_probs(f, &ref, seq, np + 2, pp);
            for (int c = 0; c < NV; c++)
                p3[c] += p12[a * NV + b] * pp[c];
        }
    }

    /* speculative sampling, RUNS seeds */
    int64_t c12[NV * NV], c3[NV], acc = 0, drafted = 0;
    memset(c12, 0, sizeof c12);
    memset(c3, 0, sizeof c3);
    for (int r = 0; r < RUNS; r++) {
        m3_sampler sp;
        assert_int_equal(m3_sampler_init(&sp, NV, 0, temp, top_k, top_p, 100000u + (uint64_t)r), 0);
        m3_state *ts = m3_state_new(&f->m, np + n_new - 1, M3_MODE_FP32, &e);
        m3_eagle3_state *ds = m3_eagle3_state_new(&d, np + n_new - 1, &e);
        m3_spec_opts so = {.k = K, .max_new_tokens = n_new};
        m3_spec_stats st;
        int32_t out[8];
        int n = 0;
        if (m3_spec_generate(&f->m, ts, &d, ds, prompt, np, &sp, &so, out, &n, &st, &e) != 0)
            fail_msg("%s: %s", name, e.msg);
        assert_int_equal(n, n_new);
        c12[out[0] * NV + out[1]]++;
        c3[out[2]]++;
        acc += st.accepted;
        drafted += st.drafted;
        m3_state_free(ts);
        m3_eagle3_state_free(ds);
        m3_sampler_free(&sp);
    }
    /* both branches of the rejection sampler ran */
    assert_true(acc > drafted / 20);
    assert_true(acc < drafted);

    /* Chi-square goodness of fit against the exact distributions. Cells with
     * expected count < 5 are pooled (the usual validity rule). The threshold is
     * the upper 1e-6 quantile (z = 4.753), Wilson-Hilferty approximation: a
     * correct sampler fails with probability ~1e-6 per statistic, and the seeds
     * are fixed, so the outcome is deterministic. Power: with 4000 draws a
     * sampler whose distribution is off by total variation 0.05 in a 16-cell
     * marginal gives a statistic far above the threshold (roughly N * chi2
     * divergence >= 4 N TV^2 = 40 on top of df), and a sampler that emitted
     * drafts unchecked (q instead of p) is off by far more than that. */
    int df;
    double s12 = chi2(c12, p12, NV * NV, RUNS, &df);
    double k12 = chi2_crit(df, 4.753);
    if (!(s12 < k12))
        fail_msg("%s: joint (t1,t2) chi2 %.1f >= %.1f (df %d)", name, s12, k12, df);
    double s3 = chi2(c3, p3, NV, RUNS, &df);
    double k3 = chi2_crit(df, 4.753);
    if (!(s3 < k3))
        fail_msg("%s: marginal t3 chi2 %.1f >= %.1f (df %d)", name, s3, k3, df);

    /* negative control: the drafter's first proposal distribution q differs
     * from p, so the test would notice drafts that were never rejected */
    m3_sampler_free(&ref);
    m3_eagle3_close(&d);
}

/* M3-EAGLE-VERIFY-2: plain temperature sampling, and with top-k / top-p. */
static void test_sampled_distribution(void **state)
{
    fx *f = *state;
    dopts a = {.fc_norm = 1, .seed = 11};
    dopts b = {.fc_norm = 0, .d2t = 1, .seed = 12};
    sampled_case(f, 1.0f, 0, 1.0f, &a, "sa");
    sampled_case(f, 0.8f, 6, 0.9f, &b, "sb");
}

/* ------------------------------------------------------------------------ */
/* loading errors and argument checks                                       */

static void expect_open_fail(fx *f, const dopts *o, const char *name, const char *needle)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", f->dir, name);
    write_drafter(dir, o);
    m3_eagle3 d;
    m3_err e = {{0}};
    if (m3_eagle3_open(&d, dir, &f->m, NULL, &e) != -1)
        fail_msg("%s: drafter opened but should not have", name);
    if (!strstr(e.msg, needle))
        fail_msg("%s: message \"%s\" lacks \"%s\"", name, e.msg, needle);
}

static void test_errors(void **state)
{
    fx *f = *state;
    dopts o = {.fc_norm = 1, .seed = 9};
    o.extra = "\"surprise\": 1";
    expect_open_fail(f, &o, "e1", "surprise");
    o.extra = NULL;
    o.skip = "layers.0.hidden_norm.weight";
    expect_open_fail(f, &o, "e2", "layers.0.hidden_norm.weight");
    o.skip = "fc_norm.1.weight";
    expect_open_fail(f, &o, "e3", "fc_norm");
    o.skip = NULL;
    o.bad_shape = 1;
    expect_open_fail(f, &o, "e4", "fc.weight");
    o.bad_shape = 0;
    o.taps = "[1, 2, 8]";
    expect_open_fail(f, &o, "e5", "eagle_aux_hidden_state_layer_ids");
    o.taps = "[1, 2]";
    expect_open_fail(f, &o, "e6", "eagle_aux_hidden_state_layer_ids");
    o.taps = NULL;
    o.extra = "\"hidden_act\": \"gelu\""; /* a duplicate key */
    expect_open_fail(f, &o, "e7", "duplicate key \"hidden_act\"");
    o.extra = NULL;
    o.act = "gelu";
    expect_open_fail(f, &o, "e7b", "hidden_act");
    o.act = NULL;
    o.extra = "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}";
    expect_open_fail(f, &o, "e8", "rope_scaling");
    o.extra = NULL;
    {
        char dir[600], p[700];
        snprintf(dir, sizeof dir, "%s/e9", f->dir);
        write_drafter(dir, &o);
        snprintf(p, sizeof p, "%s/config.json", dir);
        FILE *cf = fopen(p, "w");
        fputs("{\"hidden_size\": 32, ", cf); /* truncated JSON */
        fclose(cf);
        m3_eagle3 d;
        m3_err e = {{0}};
        assert_int_equal(m3_eagle3_open(&d, dir, &f->m, NULL, &e), -1);
        assert_non_null(strstr(e.msg, "config.json"));
    }

    /* driver argument checks */
    m3_eagle3 d;
    open_drafter(f, &o, "eok", &d);
    m3_err e = {{0}};
    m3_sampler sp;
    assert_int_equal(m3_sampler_init(&sp, NV, 1, 1.0f, 0, 1.0f, 1), 0);
    m3_state *ts = m3_state_new(&f->m, 16, M3_MODE_FP32, &e);
    m3_eagle3_state *ds = m3_eagle3_state_new(&d, 16, &e);
    int32_t prompt[2] = {1, 2}, bad[2] = {1, NV}, out[32];
    int n = 0;
    m3_spec_opts so = {.k = 0, .max_new_tokens = 4};
    assert_int_equal(m3_spec_generate(&f->m, ts, &d, ds, prompt, 2, &sp, &so, out, &n, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "K"));
    so.k = 2;
    assert_int_equal(m3_spec_generate(&f->m, ts, &d, ds, bad, 2, &sp, &so, out, &n, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "out of range"));
    /* context overflow: the state is too small for prompt + max_new - 1 */
    so.max_new_tokens = 20;
    assert_int_equal(m3_spec_generate(&f->m, ts, &d, ds, prompt, 2, &sp, &so, out, &n, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "overflow"));
    /* eos stops generation right after it is output */
    m3_state_free(ts);
    m3_eagle3_state_free(ds);
    ts = m3_state_new(&f->m, 16, M3_MODE_FP32, &e);
    ds = m3_eagle3_state_new(&d, 16, &e);
    int32_t ref[8];
    plain_greedy(f, prompt, 2, 6, ref);
    int32_t eos = ref[3];
    int first = 0;
    while (ref[first] != eos)
        first++;
    so.max_new_tokens = 6;
    so.eos = &eos;
    so.n_eos = 1;
    so.k = 3;
    assert_int_equal(m3_spec_generate(&f->m, ts, &d, ds, prompt, 2, &sp, &so, out, &n, NULL, &e), 0);
    assert_int_equal(n, first + 1);
    assert_memory_equal(out, ref, sizeof(int32_t) * n);
    assert_int_equal(m3_state_len(ts), 2 + n - 1);
    m3_state_free(ts);
    m3_eagle3_state_free(ds);
    m3_sampler_free(&sp);
    m3_eagle3_close(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aux_taps),
        cmocka_unit_test(test_drafter_forward),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_greedy_equals_plain),
        cmocka_unit_test(test_greedy_bf16),
        cmocka_unit_test(test_sampled_distribution),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
