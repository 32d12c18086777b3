/* bench.c — benchmarks of the reference (numbers printed, never asserted).
 *
 * 1. bf16-weight matvec 6144 x 6144 (the M3 hidden size), single-threaded:
 *    m3_matvec against the plain loop m3_matvec_naive in the same run,
 *    GFLOP/s (2 * rows * cols per call) and their ratio.
 * 2. Kernels against physical and in-run baselines (medians of --reps runs):
 *    the single-core read bandwidth (a streaming sum over 1 GiB, far beyond
 *    the LLC); decode: the bf16 matvec's weight bytes per second as a share of
 *    it; prefill: the bf16 6144 x 6144 matmul over 64 rows against the
 *    previous kernel of the reference (baseline_matmul below, the same order
 *    and so the same bits, which the bench checks), the two alternating run
 *    by run, medians and bests of up to 7 runs each.
 * 3. With --real DIR: one fp32 forward of --real-tokens (2,600) tokens through
 *    the real-shape checkpoint in DIR (make bench writes a 1 dense + 1 MSA/MoE
 *    layer one with m3-conform synth), against the 300 s target and the matmul
 *    rate of 2; the KV and index-K cache bytes for that prompt.
 * 4. Decode tokens/s of the embedded model models/tiny (or, when it is
 *    absent, of a tiny random fixture written to a temp directory), fp32
 *    and bf16 modes, greedy, one token per forward.
 * 5. Speculative decoding (M3-EAGLE-VERIFY-1) of the demo model models/demo
 *    with its Eagle3 drafter models/demo-drafter against plain greedy decoding
 *    of the same prompts in the same run (fp32, 128 new tokens each): wall time,
 *    acceptance, tokens per target forward and the wall-time ratio.
 *
 * usage: bench [--model DIR] [--decode-tokens N] [--seconds S] [--reps K]
 *              [--real DIR [--real-tokens T]]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fixture.h"
#include "linear.h"
#include "model.h"
#include "sampling.h"
#include "speculative.h"
#include "tokenizer.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of this process: on a machine shared with other work, the time
 * the single thread actually ran (the kernel ratios and the forward use it). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The 1-minute load average (0 when unknown), printed next to timings. */
static double load1(void)
{
    double l = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = 0;
        fclose(f);
    }
    return l;
}

/* Seconds per call of f, repeated until min_s has passed (at least once). */
static double time_matvec(void (*f)(float *, const m3_mat *, const float *), float *y,
                          const m3_mat *W, const float *x, double min_s, int *reps)
{
    double t0 = now_s(), t;
    int n = 0;
    do {
        f(y, W, x);
        n++;
        t = now_s() - t0;
    } while (t < min_s);
    *reps = n;
    return t / n;
}

static void bench_matvec(double seconds)
{
    const int R = 6144, C = 6144;
    uint16_t *w = malloc((size_t)R * C * sizeof *w);
    float *x = malloc((size_t)C * sizeof *x), *y1 = malloc((size_t)R * 4),
          *y2 = malloc((size_t)R * 4);
    if (!w || !x || !y1 || !y2) {
        printf("matvec: out of memory\n");
        return;
    }
    uint64_t st = 42;
    for (size_t i = 0; i < (size_t)R * C; i++)
        w[i] = m3_f32_to_bf16(m3_fixture_uniform(&st, 0.02f));
    for (int i = 0; i < C; i++)
        x[i] = m3_fixture_uniform(&st, 1.0f);
    m3_mat W = {.data = w, .dtype = M3_BF16, .rows = R, .cols = C};
    int r1, r2;
    m3_matvec(y1, &W, x); /* warm the pages */
    double t_fast = time_matvec(m3_matvec, y1, &W, x, seconds, &r1);
    double t_naive = time_matvec(m3_matvec_naive, y2, &W, x, seconds, &r2);
    double flop = 2.0 * R * C, maxd = 0;
    for (int i = 0; i < R; i++)
        maxd = fmax(maxd, fabs((double)y1[i] - y2[i]));
    printf("matvec bf16 %dx%d single-threaded:\n", R, C);
    printf("  m3_matvec        %8.3f ms/call  %7.2f GFLOP/s  (%d calls)\n", 1e3 * t_fast,
           flop / t_fast * 1e-9, r1);
    printf("  m3_matvec_naive  %8.3f ms/call  %7.2f GFLOP/s  (%d calls)\n", 1e3 * t_naive,
           flop / t_naive * 1e-9, r2);
    printf("  ratio m3_matvec / naive: %.2fx   (max |diff| of outputs %.3g)\n", t_naive / t_fast,
           maxd);
    free(w), free(x), free(y1), free(y2);
}


/* ------------------------------------------------------------------------ */
/* kernels against in-run baselines                                         */

/* The matmul of the reference before register blocking (512-column chunks
 * widened per weight row, 8 input rows per chunk, 8 partial sums each): the
 * in-run baseline of the prefill ratio. Same order, so the same bits. */
static void baseline_matmul(float *Y, const m3_mat *W, const float *X, int n)
{
    enum { CH = 512, NB = 8 };
    float wbuf[CH], p[NB][8];
    const uint16_t *w = W->data;
    for (int i0 = 0; i0 < n; i0 += NB) {
        int nb = n - i0 < NB ? n - i0 : NB;
        for (int r = 0; r < W->rows; r++) {
            memset(p, 0, sizeof p);
            for (int c0 = 0; c0 < W->cols; c0 += CH) {
                int len = W->cols - c0 < CH ? W->cols - c0 : CH;
                for (int c = 0; c < len; c++)
                    wbuf[c] = m3_bf16_to_f32(w[(size_t)r * W->cols + c0 + c]);
                for (int i = 0; i < nb; i++) {
                    const float *x = X + (size_t)(i0 + i) * W->cols + c0;
                    float a[8];
                    memcpy(a, p[i], sizeof a);
                    int c = 0;
                    for (; c + 8 <= len; c += 8) {
                        a[0] += wbuf[c + 0] * x[c + 0];
                        a[1] += wbuf[c + 1] * x[c + 1];
                        a[2] += wbuf[c + 2] * x[c + 2];
                        a[3] += wbuf[c + 3] * x[c + 3];
                        a[4] += wbuf[c + 4] * x[c + 4];
                        a[5] += wbuf[c + 5] * x[c + 5];
                        a[6] += wbuf[c + 6] * x[c + 6];
                        a[7] += wbuf[c + 7] * x[c + 7];
                    }
                    for (; c < len; c++)
                        a[c & 7] += wbuf[c] * x[c];
                    memcpy(p[i], a, sizeof a);
                }
            }
            for (int i = 0; i < nb; i++)
                Y[(size_t)(i0 + i) * W->rows + r] =
                    ((p[i][0] + p[i][1]) + (p[i][2] + p[i][3])) +
                    ((p[i][4] + p[i][5]) + (p[i][6] + p[i][7]));
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of the reps[] timings. */
static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Sum of a float buffer (the read stream), 32 floats per step in four
 * 8-lane vectors, so that it is bound by memory and not by adds whatever
 * the flags of this file. */
typedef float bench_v8 __attribute__((vector_size(32)));
static float stream_sum(const float *b, size_t n)
{
    bench_v8 a[4] = {{0}}, v;
    for (size_t i = 0; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++) {
            memcpy(&v, b + i + 8 * (size_t)l, sizeof v);
            a[l] += v;
        }
    float s = 0;
    for (int l = 0; l < 4; l++)
        for (int j = 0; j < 8; j++)
            s += a[l][j];
    return s;
}

/* Read bandwidth (stream_sum over 1 GiB, far beyond the LLC), the bf16 matvec
 * against it (decode), and the bf16 matmul over 64 rows against the baseline
 * kernel (prefill); medians of `reps` runs each. */
static double bench_kernels(int reps)
{
    enum { R = 6144, C = 6144, N = 64, MAXREP = 64 };
    const size_t nstream = (size_t)1 << 28; /* floats: 1 GiB */
    if (reps < 1)
        reps = 1;
    if (reps > MAXREP)
        reps = MAXREP;
    float *buf = malloc(nstream * sizeof *buf);
    uint16_t *w = malloc((size_t)R * C * sizeof *w);
    float *X = malloc((size_t)N * C * sizeof *X), *Y1 = malloc((size_t)N * R * 4),
          *Y2 = malloc((size_t)N * R * 4);
    if (!buf || !w || !X || !Y1 || !Y2) {
        printf("kernels: out of memory\n");
        free(buf), free(w), free(X), free(Y1), free(Y2);
        return 0;
    }
    uint64_t st = 42;
    for (size_t i = 0; i < nstream; i++)
        buf[i] = (float)(i & 1023) * 1e-3f;
    for (size_t i = 0; i < (size_t)R * C; i++)
        w[i] = m3_f32_to_bf16(m3_fixture_uniform(&st, 0.02f));
    for (int i = 0; i < N * C; i++)
        X[i] = m3_fixture_uniform(&st, 1.0f);
    m3_mat W = {.data = w, .dtype = M3_BF16, .rows = R, .cols = C};
    double t[MAXREP], t0;
    volatile float sink = 0;

    for (int k = 0; k < reps; k++) {
        t0 = cpu_s();
        sink += stream_sum(buf, nstream);
        t[k] = cpu_s() - t0;
    }
    double bw = (double)nstream * 4.0 / median(t, reps);
    for (int k = 0; k < reps; k++) {
        t0 = cpu_s();
        m3_matvec(Y1, &W, X);
        t[k] = cpu_s() - t0;
    }
    double t_mv = median(t, reps), mv_bw = (double)R * C * 2.0 / t_mv;
    printf("kernels, single-threaded, medians of %d runs, CPU time (load average %.1f):\n", reps,
           load1());
    printf("  read stream (sum of 1 GiB fp32)   %7.2f GB/s\n", bw * 1e-9);
    printf("  decode: bf16 matvec %dx%d       %7.3f ms  %7.2f GB/s of weights  %7.2f GFLOP/s\n",
           R, C, 1e3 * t_mv, mv_bw * 1e-9, 2.0 * R * C / t_mv * 1e-9);
    printf("  ratio matvec / read stream: %.0f%%  (target >= 70%%)\n", 100.0 * mv_bw / bw);

    /* the two kernels alternate, so that a change of load hits both alike */
    int mreps = reps < 7 ? reps : 7;
    double t2[MAXREP];
    for (int k = 0; k < mreps; k++) {
        t0 = cpu_s();
        baseline_matmul(Y2, &W, X, N);
        t2[k] = cpu_s() - t0;
        t0 = cpu_s();
        m3_matmul(Y1, &W, X, N);
        t[k] = cpu_s() - t0;
    }
    double t_old = median(t2, mreps), t_new = median(t, mreps), flop = 2.0 * R * C * N;
    printf("  prefill: bf16 matmul %dx%d over %d rows (median, best of %d):\n", R, C, N, mreps);
    printf("    baseline kernel %8.1f ms  %7.2f GFLOP/s   best %8.1f ms  %7.2f GFLOP/s\n",
           1e3 * t_old, flop / t_old * 1e-9, 1e3 * t2[0], flop / t2[0] * 1e-9);
    printf("    m3_matmul       %8.1f ms  %7.2f GFLOP/s   best %8.1f ms  %7.2f GFLOP/s\n",
           1e3 * t_new, flop / t_new * 1e-9, 1e3 * t[0], flop / t[0] * 1e-9);
    printf("    ratio: %.2fx of medians, %.2fx of bests  (target >= 4x); outputs bit-identical: %s\n",
           t_old / t_new, t2[0] / t[0], memcmp(Y1, Y2, (size_t)N * R * 4) ? "NO" : "yes");
    (void)sink;
    free(buf), free(w), free(X), free(Y1), free(Y2);
    return flop / t_new;
}

/* FLOPs of the linear layers of one row of the text model (2 * rows * cols
 * of every matrix a row goes through; k experts of a MoE layer). */
static double row_linear_flop(const m3_text_config *c)
{
    const double H = c->hidden_size, q = (double)c->num_heads * c->head_dim;
    const double kv = (double)c->num_kv_heads * c->head_dim;
    double f = 0;
    for (int l = 0; l < c->num_layers; l++) {
        f += 2 * H * (q + 2 * kv) + 2 * q * H; /* q, k, v, o */
        if (c->layer_sparse[l])
            f += 2 * H * ((double)c->index_n_heads * c->index_head_dim + c->index_head_dim);
        if (c->layer_moe[l]) {
            f += 2 * H * c->num_experts; /* router */
            f += 6 * H * (double)c->intermediate_size * c->num_experts_per_tok;
            if (c->n_shared_experts > 0)
                f += 6 * H * (double)c->shared_intermediate_size;
        } else {
            f += 6 * H * (double)c->dense_intermediate_size;
        }
    }
    return f + 2 * H * c->vocab_size; /* lm_head */
}

/* One fp32 forward of T tokens through the checkpoint in dir (the real-shape
 * case: 1 dense + 1 MSA/MoE layer at the released shapes), against the 300 s
 * target and against the matmul rate measured above. */
static void bench_forward(const char *dir, int T, double matmul_flops)
{
    m3_model m;
    m3_err e = {{0}};
    if (m3_model_open(&m, dir, NULL, &e) != 0) {
        printf("forward: cannot open %s: %s\n", dir, e.msg);
        return;
    }
    const m3_text_config *c = &m.cfg.text;
    const int V = c->vocab_size;
    int n_moe = 0;
    for (int l = 0; l < c->num_layers; l++)
        n_moe += c->layer_moe[l] != 0;
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    float *logits = malloc((size_t)T * (size_t)V * sizeof *logits);
    m3_state *s = tok && logits ? m3_state_new(&m, T, M3_MODE_FP32, &e) : NULL;
    if (!s) {
        printf("forward: %s\n", e.msg[0] ? e.msg : "out of memory");
    } else {
        uint64_t st = 7;
        for (int t = 0; t < T; t++)
            tok[t] = (int32_t)(m3_fixture_splitmix(&st) % (uint64_t)V);
        double cache = 0;
        for (int l = 0; l < c->num_layers; l++)
            cache += (double)T * (2.0 * c->num_kv_heads * c->head_dim +
                                  (c->layer_sparse[l] ? c->index_head_dim : 0)) * 4.0;
        double t0 = now_s(), c0 = cpu_s();
        int rc = m3_forward(&m, s, tok, T, logits, NULL, &e);
        double wall = now_s() - t0, dt = cpu_s() - c0, flop = row_linear_flop(c) * T;
        if (rc != 0) {
            printf("forward: %s\n", e.msg);
        } else {
            printf("forward of %s (L=%d: %d MoE, H=%d, V=%d), %d tokens, fp32, one run:\n", dir,
                   c->num_layers, n_moe, c->hidden_size, V, T);
            printf("  %.1f s CPU (%.1f s wall, load average %.1f); target <= 300 s: %.2fx of it\n",
                   dt, wall, load1(), dt / 300.0);
            printf("  linear layers %.2f TFLOP = %.2f GFLOP/s effective, %.0f%% of the matmul rate "
                   "above\n",
                   flop * 1e-12, flop / dt * 1e-9,
                   matmul_flops > 0 ? 100.0 * flop / dt / matmul_flops : 0.0);
            printf("  KV + index-K caches sized by the prompt: %.1f MiB for %d positions "
                   "(max_position_embeddings %lld would need %.1f GiB)\n",
                   cache / 1048576.0, T, (long long)c->max_position_embeddings,
                   cache / T * (double)c->max_position_embeddings / 1073741824.0);
        }
        m3_state_free(s);
    }
    free(tok);
    free(logits);
    m3_model_close(&m);
}

static void bench_decode(const char *dir, const char *what, int ntok)
{
    m3_model m;
    m3_err e = {{0}};
    if (m3_model_open(&m, dir, NULL, &e) != 0) {
        printf("decode: cannot open %s: %s\n", dir, e.msg);
        return;
    }
    const m3_text_config *c = &m.cfg.text;
    const int V = c->vocab_size, prompt = 4;
    printf("decode of %s (%s: L=%d H=%d V=%d), %d tokens after a %d-token prompt:\n", dir, what,
           c->num_layers, c->hidden_size, V, ntok, prompt);
    int64_t cap = prompt + ntok;
    if (c->max_position_embeddings > 0 && cap > c->max_position_embeddings)
        cap = c->max_position_embeddings;
    float *logits = malloc((size_t)V * 4);
    for (int mode = 0; mode < 2 && logits; mode++) {
        m3_state *s = m3_state_new(&m, cap, mode ? M3_MODE_BF16 : M3_MODE_FP32, &e);
        if (!s) {
            printf("  %s\n", e.msg);
            break;
        }
        int32_t tok[4] = {1, 2, 3, 4};
        int ok = m3_forward(&m, s, tok, prompt, NULL, NULL, &e) == 0;
        int32_t t = tok[prompt - 1];
        m3_state_truncate(s, prompt - 1);
        ok = ok && m3_forward(&m, s, &t, 1, logits, NULL, &e) == 0;
        int done = 0;
        double t0 = now_s();
        while (ok && m3_state_len(s) < cap) {
            t = m3_argmax(logits, V);
            ok = m3_forward(&m, s, &t, 1, logits, NULL, &e) == 0;
            done += ok;
        }
        double dt = now_s() - t0;
        if (!ok)
            printf("  %s: %s\n", mode ? "bf16" : "fp32", e.msg);
        else
            printf("  %s mode: %d tokens in %.3f s = %.1f tokens/s\n", mode ? "bf16" : "fp32",
                   done, dt, dt > 0 ? done / dt : 0.0);
        m3_state_free(s);
    }
    free(logits);
    m3_model_close(&m);
}

/* Plain greedy vs speculative greedy on the demo model (same prompts, same run). */
static void bench_spec(const char *mdir, const char *ddir, int K)
{
    static const char *const prompts[] = {"And God said", "In the beginning",
                                          "The LORD is my shepherd", "Blessed are the"};
    const int np = 4, N = 128;
    m3_model m;
    m3_eagle3 d;
    m3_tokenizer *tk = NULL;
    m3_err e = {{0}};
    char path[4200];
    memset(&d, 0, sizeof d);
    snprintf(path, sizeof path, "%s/tokenizer.json", mdir);
    if (m3_model_open(&m, mdir, NULL, &e) != 0) {
        printf("speculative: cannot open %s: %s\n", mdir, e.msg);
        return;
    }
    if (m3_eagle3_open(&d, ddir, &m, NULL, &e) != 0 || m3_tokenizer_open(&tk, path, &e) != 0) {
        printf("speculative: %s\n", e.msg);
        m3_eagle3_close(&d);
        m3_model_close(&m);
        return;
    }
    const int V = m.cfg.text.vocab_size;
    double t_plain = 0, t_spec = 0;
    int64_t gen = 0, fw = 0, drafted = 0, accepted = 0, fw_plain = 0;
    int32_t ids[64], out[128], ref[128];
    float *logits = malloc(sizeof(float) * 64 * (size_t)V);
    m3_sampler sp;
    int ok = logits && m3_sampler_init(&sp, V, 1, 1.0f, 0, 1.0f, 1) == 0;
    for (int p = 0; ok && p < np; p++) {
        size_t n = 0;
        int32_t *enc = NULL;
        if (m3_tokenizer_encode(tk, prompts[p], strlen(prompts[p]), 0, &enc, &n, &e) != 0 || n == 0 ||
            n > 64) {
            free(enc);
            ok = 0;
            break;
        }
        memcpy(ids, enc, n * sizeof *ids);
        free(enc);
        /* plain greedy: prefill then one token per forward */
        m3_state *s = m3_state_new(&m, (int64_t)n + N, M3_MODE_FP32, &e);
        double t0 = now_s();
        ok = s && m3_forward(&m, s, ids, (int)n, logits, NULL, &e) == 0;
        fw_plain += 1;
        for (int j = 0; ok && j < N; j++) {
            ref[j] = m3_argmax(j == 0 ? logits + (n - 1) * (size_t)V : logits, V);
            if (j + 1 < N) {
                ok = m3_forward(&m, s, &ref[j], 1, logits, NULL, &e) == 0;
                fw_plain++;
            }
        }
        t_plain += now_s() - t0;
        m3_state_free(s);
        /* speculative greedy */
        m3_state *ts = ok ? m3_state_new(&m, (int64_t)n + N, M3_MODE_FP32, &e) : NULL;
        m3_eagle3_state *ds = ts ? m3_eagle3_state_new(&d, (int64_t)n + N, &e) : NULL;
        m3_spec_opts so = {K, N, NULL, 0, NULL, NULL};
        m3_spec_stats st;
        int nout = 0;
        t0 = now_s();
        ok = ds && m3_spec_generate(&m, ts, &d, ds, ids, (int)n, &sp, &so, out, &nout, &st, &e) == 0;
        t_spec += now_s() - t0;
        if (ok && (nout != N || memcmp(out, ref, sizeof(int32_t) * N) != 0))
            printf("  WARNING: speculative output differs from plain greedy for \"%s\"\n", prompts[p]);
        gen += nout;
        fw += st.target_forwards;
        drafted += st.drafted;
        accepted += st.accepted;
        m3_eagle3_state_free(ds);
        m3_state_free(ts);
    }
    if (!ok)
        printf("speculative: %s\n", e.msg[0] ? e.msg : "prompt encoding failed");
    else {
        printf("speculative decoding of %s with %s (K=%d, fp32, greedy, %d prompts x %d tokens):\n",
               mdir, ddir, K, np, N);
        printf("  plain greedy       %7.3f s  %7.1f tokens/s  %lld target forwards\n", t_plain,
               gen / t_plain, (long long)fw_plain);
        printf("  speculative        %7.3f s  %7.1f tokens/s  %lld target forwards "
               "(%.2f tokens/forward, acceptance %.1f%%)\n",
               t_spec, gen / t_spec, (long long)fw, (double)gen / (double)fw,
               drafted ? 100.0 * (double)accepted / (double)drafted : 0.0);
        printf("  ratio plain / speculative wall time: %.2fx\n", t_plain / t_spec);
    }
    if (logits)
        m3_sampler_free(&sp);
    free(logits);
    m3_tokenizer_free(tk);
    m3_eagle3_close(&d);
    m3_model_close(&m);
}

int main(int argc, char **argv)
{
    const char *model = "models/tiny";
    int ntok = 64;
    double seconds = 1.0;
    int reps = 9, real_tokens = 2600;
    const char *real = NULL;
    struct stat sb;
    char path[4200];
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--decode-tokens"))
            ntok = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--real"))
            real = argv[i + 1];
        else if (!strcmp(argv[i], "--real-tokens"))
            real_tokens = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench [--model DIR] [--decode-tokens N] [--seconds S] [--reps K]\n"
                            "             [--real DIR [--real-tokens T]]\n");
            return 2;
        }
    }
    if (ntok < 1)
        ntok = 1;
    printf("m3 benchmarks (numbers are measurements, not checks)\n");
    bench_matvec(seconds);
    double mm = bench_kernels(reps);
    if (real) {
        snprintf(path, sizeof path, "%s/config.json", real);
        if (stat(path, &sb) == 0)
            bench_forward(real, real_tokens, mm);
        else
            printf("forward: %s absent (make bench generates it with m3-conform synth when the "
                   "disk has room)\n", real);
    }

    snprintf(path, sizeof path, "%s/config.json", model);
    if (stat(path, &sb) == 0) {
        bench_decode(model, "embedded model", ntok);
    } else {
        char dir[] = "/tmp/m3_bench_XXXXXX";
        m3_fixture_opts o;
        m3_err e = {{0}};
        m3_fixture_defaults(&o);
        if (!mkdtemp(dir) || m3_fixture_write(dir, &o, &e) != 0) {
            printf("decode: %s absent and no fixture could be written: %s\n", model, e.msg);
            return 0;
        }
        bench_decode(dir, "random fixture; models/tiny is absent", ntok);
        snprintf(path, sizeof path, "%s/config.json", dir);
        unlink(path);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        unlink(path);
        rmdir(dir);
    }
    snprintf(path, sizeof path, "models/demo-drafter/config.json");
    if (stat(path, &sb) == 0)
        for (int K = 1; K <= 5; K += 2)
            bench_spec("models/demo", "models/demo-drafter", K);
    else
        printf("speculative: models/demo-drafter absent\n");
    return 0;
}
