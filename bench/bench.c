/* bench.c — benchmarks of the reference (numbers printed, never asserted).
 *
 * 1. bf16-weight matvec 6144 x 6144 (the M3 hidden size), single-threaded:
 *    m3_matvec against the plain loop m3_matvec_naive in the same run,
 *    GFLOP/s (2 * rows * cols per call) and their ratio.
 * 2. Decode tokens/s of the embedded model models/tiny (or, when it is
 *    absent, of a tiny random fixture written to a temp directory), fp32
 *    and bf16 modes, greedy, one token per forward.
 *
 * usage: bench [--model DIR] [--decode-tokens N] [--seconds S]
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

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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

int main(int argc, char **argv)
{
    const char *model = "models/tiny";
    int ntok = 64;
    double seconds = 1.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--decode-tokens"))
            ntok = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench [--model DIR] [--decode-tokens N] [--seconds S]\n");
            return 2;
        }
    }
    if (ntok < 1)
        ntok = 1;
    printf("m3 benchmarks (numbers are measurements, not checks)\n");
    bench_matvec(seconds);

    struct stat sb;
    char path[4200];
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
    return 0;
}
