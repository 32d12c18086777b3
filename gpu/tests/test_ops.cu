/* test_ops.cu — every device op of gpu/kernels against the ref/ function it
 * must match, over ragged shapes, with guarded output buffers.
 *
 * One table of cases (op, shape, comparison), one loop, one line per case.
 * Each case builds random inputs on the host (bf16-valued in bf16 mode, as
 * the caches and activations are there), runs the ref/ function (libm3) for
 * the expected result, runs the launcher on the device and compares:
 *  - bitwise: every output word equal (the kernels designed to be bitwise
 *    equal to ref: fp32 linear layers, indexer scores and selections, the
 *    bf16 conversion and rounding);
 *  - otherwise the single-component rule of spec/tolerances.json for the
 *    mode ("*" / "*": fp32 nmse 1e-10, max|d| 1e-4; bf16 nmse 1e-5,
 *    max|d| 0.0625; router rows nmse 1e-10, max|d| 1e-5), stated per case.
 * Every output buffer is surrounded by guard bytes and its interior filled
 * with a poison pattern (NaN words, -1 ids) before the launch; after it the
 * guards must be intact (no write outside the buffer) and, through the
 * comparison, every element written. Row-strided outputs also check that
 * the gaps between rows were not written.
 *
 * The weight-streaming ring (gpu/weight_stream.h) is checked here too,
 * against the host bytes it stages.
 *
 * Not here (no ref/ function of their own to compare with; the model and
 * vision vectors of make gpu-emu-test and tools/gpu_device_check.sh judge
 * them inside the forward): m3g_moe_combine, m3g_vision_attention,
 * m3g_vision_layer, m3g_linear_bias, m3g_scatter_rows.
 *
 * Built twice: with nvcc / hipcc for the device (make gpu-test; the
 * tensor-core, cluster and streaming paths) and with g++ against the CPU
 * emulation (make gpu-test-emu, part of make test; the portable paths).
 *
 *   test-ops [--case PREFIX] [--list]
 * Exit 0 when every case passed, 1 otherwise.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "attention.h"
#include "layernorm.h"
#include "linear.h"
#include "mlp.h"
#include "moe.h"
#include "msa.h"
#include "norm.h"
#include "rope.h"
#include "../../ref/vision.h" /* m3_gelu (gpu/vision.h has the same name) */
}

#include "hip_compat.h"
#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "weight_stream.h"

/* ---- comparison rules ------------------------------------------------------ */

typedef struct tol {
    int bitwise;
    double nmse, max_abs;
    const char *name;
} tol;

static const tol TOL_BIT = {1, 0, 0, "bitwise"};
static const tol TOL_F32 = {0, 1e-10, 1e-4, "fp32 component (nmse 1e-10, max|d| 1e-4)"};
static const tol TOL_BF16 = {0, 1e-5, 0.0625, "bf16 component (nmse 1e-5, max|d| 0.0625)"};
/* One-pass attention rounds every p on the running max's scale, not after
 * the division by the final sum (M3-NUM-BF16-2 item 5): an independent
 * rounding of each p, about 2.6e-6 nmse on the output (spec/tolerances.md),
 * which before the output's own rounding carries about a third of the
 * outputs across a rounding boundary (1-ulp flips, about 7e-6): about 1e-5
 * expected, 3e-5 allowed. */
static const tol TOL_BF16_1P = {0, 3e-5, 0.0625, "one-pass bf16 attention (nmse 3e-5, max|d| 0.0625)"};
static const tol TOL_ROUTER = {0, 1e-10, 1e-5, "router (nmse 1e-10, max|d| 1e-5)"};

static const tol *tol_mode(int mode) { return mode ? &TOL_BF16 : &TOL_F32; }

/* ---- per-case context: allocations, the verdict text ------------------------ */

#define GUARD 256       /* guard bytes before and after every output buffer */
#define GUARD_BYTE 0xA5 /* guard pattern */
#define POISON 0xFF     /* output interior before the launch: NaN floats, -1 ints */
#define MAXA 256

typedef struct gbuf { /* a guarded device output buffer */
    unsigned char *base; /* device: GUARD + n + GUARD bytes */
    size_t n;
    const char *name;
} gbuf;

typedef struct tctx {
    hipStream_t st;
    m3g_blas *blas; /* NULL where BLAS is not built */
    void *dev[MAXA];
    int ndev;
    gbuf out[MAXA];
    int nout;
    void *host[MAXA];
    int nhost;
    uint64_t rng;
    char shape[160];
    char msg[400];
    int fail;
} tctx;

static void *halloc(tctx *c, size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "test-ops: out of host memory (%zu bytes)\n", n);
        exit(2);
    }
    if (c->nhost == MAXA) {
        fprintf(stderr, "test-ops: too many host buffers in one case\n");
        exit(2);
    }
    c->host[c->nhost++] = p;
    return p;
}

static void *dalloc(tctx *c, size_t n)
{
    void *p = NULL;
    if (hipMalloc(&p, n ? n : 1) != hipSuccess || c->ndev == MAXA) {
        fprintf(stderr, "test-ops: device allocation of %zu bytes failed\n", n);
        exit(2);
    }
    c->dev[c->ndev++] = p;
    return p;
}

__attribute__((format(printf, 2, 3))) static void failf(tctx *c, const char *fmt, ...);

/* A failed runtime call (a copy, a memset) fails the case, naming it. */
static void hip_ok(tctx *c, const char *what, hipError_t e)
{
    if (e != hipSuccess)
        failf(c, "%s failed: %s", what, hipGetErrorString(e));
}

/* A device copy of host data (an input). */
static void *din(tctx *c, const void *h, size_t n)
{
    void *d = dalloc(c, n);
    hip_ok(c, "input upload", hipMemcpy(d, h, n, hipMemcpyHostToDevice));
    return d;
}

/* A guarded output of n bytes: guards GUARD_BYTE, interior POISON, or the
 * host data init (an in/out buffer) when init != NULL. */
static void *dout(tctx *c, const char *name, size_t n, const void *init)
{
    if (c->nout == MAXA) {
        fprintf(stderr, "test-ops: too many outputs in one case\n");
        exit(2);
    }
    unsigned char *h = (unsigned char *)malloc(n + 2 * GUARD);
    if (!h)
        exit(2);
    memset(h, GUARD_BYTE, GUARD);
    memset(h + GUARD + n, GUARD_BYTE, GUARD);
    if (init)
        memcpy(h + GUARD, init, n);
    else
        memset(h + GUARD, POISON, n);
    unsigned char *d = (unsigned char *)dalloc(c, n + 2 * GUARD);
    hip_ok(c, "output upload", hipMemcpy(d, h, n + 2 * GUARD, hipMemcpyHostToDevice));
    free(h);
    c->out[c->nout].base = d;
    c->out[c->nout].n = n;
    c->out[c->nout].name = name;
    c->nout++;
    return d + GUARD;
}

/* Record a failure; the first one of a case is its message. */
__attribute__((format(printf, 2, 3))) static void failf(tctx *c, const char *fmt, ...)
{
    if (c->fail <= 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->msg, sizeof c->msg, fmt, ap);
        va_end(ap);
    }
    c->fail = 1;
}

/* Every guard of every output intact. */
static void check_guards(tctx *c)
{
    for (int i = 0; i < c->nout; i++) {
        const gbuf *b = &c->out[i];
        unsigned char *h = (unsigned char *)malloc(b->n + 2 * GUARD);
        if (!h)
            exit(2);
        hip_ok(c, "guard download", hipMemcpy(h, b->base, b->n + 2 * GUARD, hipMemcpyDeviceToHost));
        for (size_t j = 0; j < GUARD; j++)
            if (h[j] != GUARD_BYTE || h[GUARD + b->n + j] != GUARD_BYTE) {
                if (h[j] != GUARD_BYTE)
                    failf(c, "%s: written before its start (guard byte -%zu)", b->name, GUARD - j);
                else
                    failf(c, "%s: written past its end (guard byte +%zu)", b->name, j + 1);
                break;
            }
        free(h);
    }
}

/* Download n bytes of a device buffer into a new host buffer. */
static void *fetch(tctx *c, const void *d, size_t n)
{
    void *h = halloc(c, n);
    hip_ok(c, "output download", hipMemcpy(h, d, n, hipMemcpyDeviceToHost));
    return h;
}

static int same_bits(float a, float b)
{
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    return x == y;
}

/* got [rows, ld] (the first n of each row) against want [rows, n]; ld > n:
 * the gaps must still hold the poison (untouched). */
static void cmp_rows(tctx *c, const char *what, const float *got, int ld, const float *want,
                     int64_t rows, int n, const tol *t)
{
    double e2 = 0, r2 = 0, maxd = 0;
    int64_t bad = 0, first = -1;
    for (int64_t r = 0; r < rows; r++) {
        for (int j = 0; j < n; j++) {
            const float g = got[r * ld + j], w = want[r * n + j];
            if (t->bitwise || !isfinite(w) || !isfinite(g)) {
                if (!same_bits(g, w) && !(t->bitwise == 0 && isnan(g) && isnan(w))) {
                    if (first < 0)
                        first = r * n + j;
                    bad++;
                }
                continue;
            }
            const double d = (double)g - w;
            e2 += d * d;
            r2 += (double)w * w;
            if (fabs(d) > maxd)
                maxd = fabs(d);
        }
        for (int j = n; j < ld; j++) {
            uint32_t u;
            memcpy(&u, &got[r * ld + j], 4);
            if (u != 0xFFFFFFFFu) {
                failf(c, "%s: the gap after row %lld written (column %d)", what, (long long)r, j);
                return;
            }
        }
    }
    if (bad) {
        const int64_t r = first / n, j = first % n;
        failf(c, "%s: %lld of %lld words differ (%s), first [%lld]: got %.9g want %.9g", what,
              (long long)bad, (long long)(rows * n), t->bitwise ? "bitwise" : "non-finite",
              (long long)first, (double)got[r * ld + j], (double)want[first]);
        return;
    }
    if (!t->bitwise) {
        const double nmse = r2 > 0 ? e2 / r2 : (e2 > 0 ? INFINITY : 0);
        if (nmse > t->nmse || maxd > t->max_abs)
            failf(c, "%s: nmse %.3g, max|d| %.3g beyond the rule", what, nmse, maxd);
        else if (!c->fail) { /* append this output's figures */
            const size_t l = strlen(c->msg);
            snprintf(c->msg + l, sizeof c->msg - l, "%s%s nmse %.2g max|d| %.2g", l ? "; " : "",
                     what, nmse, maxd);
        }
    }
}

static void cmp_f(tctx *c, const char *what, const float *got, const float *want, int64_t n,
                  const tol *t)
{
    cmp_rows(c, what, got, 1, want, n, 1, t);
}

static void cmp_i(tctx *c, const char *what, const int32_t *got, const int32_t *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            failf(c, "%s: entry %lld is %d, want %d", what, (long long)i, got[i], want[i]);
            return;
        }
}

static void launch_ok(tctx *c, const char *what, hipError_t e)
{
    if (e == hipSuccess)
        e = hipStreamSynchronize(c->st);
    if (e != hipSuccess)
        failf(c, "%s: launch failed: %s", what, hipGetErrorString(e));
}

/* ---- host inputs --------------------------------------------------------- */

static float urand(tctx *c) /* [-1, 1) */
{
    c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((c->rng >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* n values in [-a, a], bf16-valued when bf (the values a bf16 run holds). */
static float *hrand(tctx *c, size_t n, float a, int bf)
{
    float *x = (float *)halloc(c, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        x[i] = a * urand(c);
        if (bf)
            x[i] = m3_round_bf16(x[i]);
    }
    return x;
}

/* Raw bf16 bits of x [n]. */
static uint16_t *hbits(tctx *c, const float *x, size_t n)
{
    uint16_t *b = (uint16_t *)halloc(c, n * 2);
    for (size_t i = 0; i < n; i++)
        b[i] = m3_f32_to_bf16(x[i]);
    return b;
}

/* A weight of n values: the ref view (data in dt) and the device copy. */
typedef struct wt {
    const void *h; /* host data of dtype dt */
    const void *d;
    int bf;
} wt;

static wt hweight(tctx *c, size_t n, float a, int bf)
{
    const float *x = hrand(c, n, a, 1);
    wt w;
    w.bf = bf;
    w.h = bf ? (const void *)hbits(c, x, n) : (const void *)x;
    w.d = din(c, w.h, n * (bf ? 2 : 4));
    return w;
}

static m3_vec rvec(const wt *w, int n)
{
    m3_vec v;
    v.data = w->h;
    v.dtype = w->bf ? M3_BF16 : M3_F32;
    v.n = n;
    return v;
}
static m3_mat rmat(const wt *w, int rows, int cols)
{
    m3_mat m;
    m.data = w->h;
    m.dtype = w->bf ? M3_BF16 : M3_F32;
    m.rows = rows;
    m.cols = cols;
    return m;
}
static m3g_mat gmat(const wt *w, int rows, int cols)
{
    m3g_mat m;
    m.data = w->d;
    m.dtype = w->bf ? M3G_BF16 : M3G_F32;
    m.rows = rows;
    m.cols = cols;
    return m;
}

static void round_mode(float *x, size_t n, int mode)
{
    m3_round_mode(x, n, mode ? M3_MODE_BF16 : M3_MODE_FP32);
}
static m3_mode rmode(int mode) { return mode ? M3_MODE_BF16 : M3_MODE_FP32; }

/* ---- the cases ----------------------------------------------------------- */

typedef struct op_case op_case;
typedef void (*run_fn)(tctx *c, const op_case *k);
struct op_case {
    const char *op;
    run_fn run;
    int p[11];
};

#define EPS 1e-6f

/* p: T, n, mode, with y, bf16 weight */
static void t_residual_rmsnorm(tctx *c, const op_case *k)
{
    const int T = k->p[0], n = k->p[1], mode = k->p[2], wy = k->p[3];
    snprintf(c->shape, sizeof c->shape, "T %d, n %d, %s%s, %s weight", T, n, mode ? "bf16" : "fp32",
             wy ? ", residual" : "", k->p[4] ? "bf16" : "fp32");
    float *x = hrand(c, (size_t)T * n, 2.0f, mode), *y = hrand(c, (size_t)T * n, 2.0f, mode);
    wt w = hweight(c, n, 0.3f, k->p[4]);
    float *xr = (float *)halloc(c, (size_t)T * n * 4), *want = (float *)halloc(c, (size_t)T * n * 4);
    const m3_vec wv = rvec(&w, n);
    for (int64_t i = 0; i < (int64_t)T * n; i++)
        xr[i] = wy ? (mode ? m3_round_bf16(x[i] + y[i]) : x[i] + y[i]) : x[i];
    for (int t = 0; t < T; t++)
        m3_rmsnorm(want + (size_t)t * n, xr + (size_t)t * n, &wv, n, EPS, rmode(mode));
    float *dx = (float *)dout(c, "x", (size_t)T * n * 4, x);
    float *dy = wy ? (float *)din(c, y, (size_t)T * n * 4) : NULL;
    float *dz = (float *)dout(c, "out", (size_t)T * n * 4, NULL);
    launch_ok(c, "m3g_residual_rmsnorm",
              m3g_residual_rmsnorm(dx, dy, dz, w.d, w.bf, T, n, EPS, mode, c->st));
    check_guards(c);
    cmp_f(c, "x", (float *)fetch(c, dx, (size_t)T * n * 4), xr, (int64_t)T * n, &TOL_BIT);
    cmp_f(c, "out", (float *)fetch(c, dz, (size_t)T * n * 4), want, (int64_t)T * n,
          tol_mode(mode));
}

/* Widen bf16 bits to fp32 words (0xFFFF, the poison, to the fp32 poison). */
static float *widen16(tctx *c, const uint16_t *g, size_t n)
{
    float *f = (float *)halloc(c, n * 4);
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = g[i] == 0xFFFFu ? 0xFFFFFFFFu : (uint32_t)g[i] << 16;
        memcpy(&f[i], &u, 4);
    }
    return f;
}

/* RoPE tables [T, rd/2] of positions pos0 .. pos0 + T - 1 (ref m3_rope_table). */
static float *rope_tab(tctx *c, int T, int64_t pos0, int rd, int mode, float **sin_t)
{
    float *ct = (float *)halloc(c, (size_t)T * rd / 2 * 4);
    *sin_t = (float *)halloc(c, (size_t)T * rd / 2 * 4);
    for (int t = 0; t < T; t++)
        m3_rope_table(ct + (size_t)t * rd / 2, *sin_t + (size_t)t * rd / 2, pos0 + t, rd, 5e6,
                      rmode(mode));
    return ct;
}

/* Paged layout: page p of the logical sequence lives in page slot
 * table[p] (a reversed order, so that logical and physical rows differ). */
static int32_t *page_table(tctx *c, int npages)
{
    int32_t *pt = (int32_t *)halloc(c, (size_t)npages * 4);
    for (int i = 0; i < npages; i++)
        pt[i] = npages - 1 - i;
    return pt;
}

/* p: T, nh, hd, rd, mode, pos0, bf16 destination, paged */
static void t_headnorm_rope(tctx *c, const op_case *k)
{
    const int T = k->p[0], nh = k->p[1], hd = k->p[2], rd = k->p[3], mode = k->p[4];
    const int64_t pos0 = k->p[5];
    const int d16 = k->p[6], paged = k->p[7], B = 16;
    snprintf(c->shape, sizeof c->shape, "T %d, %d heads of %d, rotary %d, pos0 %lld, %s%s%s", T,
             nh, hd, rd, (long long)pos0, mode ? "bf16" : "fp32", d16 ? ", bf16 out" : "",
             paged ? ", paged" : "");
    const size_t n = (size_t)T * nh * hd;
    float *x = hrand(c, n, 3.0f, mode), *st;
    float *ct = rope_tab(c, T, pos0, rd, mode, &st);
    wt w = hweight(c, hd, 0.3f, 1);
    const m3_vec wv = rvec(&w, hd);
    float *want = (float *)halloc(c, n * 4);
    memcpy(want, x, n * 4);
    for (int t = 0; t < T; t++) {
        m3_rmsnorm_heads(want + (size_t)t * nh * hd, nh, hd, &wv, EPS, rmode(mode));
        m3_rope_apply(want + (size_t)t * nh * hd, nh, hd, rd, ct + (size_t)t * rd / 2,
                      st + (size_t)t * rd / 2, rmode(mode));
    }
    const int npages = (int)((pos0 + T - 1) / B + 1);
    const int32_t *pt = paged ? page_table(c, npages) : NULL;
    const size_t rows = paged ? (size_t)npages * B : (size_t)T;
    float *wrow = (float *)halloc(c, rows * nh * hd * 4); /* want at the destination rows */
    memset(wrow, 0xFF, rows * nh * hd * 4);
    for (int t = 0; t < T; t++) {
        const int64_t p = pos0 + t;
        const size_t r = paged ? (size_t)pt[p / B] * B + p % B : (size_t)t;
        memcpy(wrow + r * nh * hd, want + (size_t)t * nh * hd, (size_t)nh * hd * 4);
    }
    const float *dx = (const float *)din(c, x, n * 4);
    const float *dc = (const float *)din(c, ct, (size_t)T * rd / 2 * 4);
    const float *ds = (const float *)din(c, st, (size_t)T * rd / 2 * 4);
    const int32_t *dpt = pt ? (const int32_t *)din(c, pt, (size_t)npages * 4) : NULL;
    if (!d16) {
        float *dd = (float *)dout(c, "dst", rows * nh * hd * 4, NULL);
        launch_ok(c, "m3g_headnorm_rope",
                  m3g_headnorm_rope(dx, dd, dpt, B, pos0, w.d, 1, T, nh, hd, rd, dc, ds, EPS, mode,
                                    c->st));
        check_guards(c);
        const float *g = (const float *)fetch(c, dd, rows * nh * hd * 4);
        /* rows the launch does not own keep the poison (compared bitwise) */
        cmp_f(c, "dst", g, wrow, (int64_t)(rows * nh * hd), tol_mode(mode));
    } else {
        uint16_t *dd = (uint16_t *)dout(c, "dst16", rows * nh * hd * 2, NULL);
        launch_ok(c, "m3g_headnorm_rope_bf16",
                  m3g_headnorm_rope_bf16(dx, dd, dpt, B, pos0, w.d, 1, T, nh, hd, rd, dc, ds, EPS,
                                         mode, c->st));
        check_guards(c);
        cmp_f(c, "dst16",
              widen16(c, (const uint16_t *)fetch(c, dd, rows * nh * hd * 2), rows * nh * hd),
              wrow, (int64_t)(rows * nh * hd), tol_mode(mode));
    }
}

/* p: T, pos0, mode. Four jobs as the attention prologue runs them: q (norm +
 * RoPE, rows t), k (norm + RoPE, paged fp32 and bf16 caches), v (a copy into
 * the paged bf16 cache), index k (norm + RoPE, paged bf16, range words). */
static void t_prologue(tctx *c, const op_case *k)
{
    const int T = k->p[0], mode = k->p[2], B = 16, rd = 32, hd = 64;
    const int64_t pos0 = k->p[1];
    static const int nhs[4] = {4, 2, 2, 1};
    static const char *const nm[4][2] = {{"q", "q16"}, {"k", "k16"}, {"v", "v16"}, {"ik", "ik16"}};
    snprintf(c->shape, sizeof c->shape,
             "T %d at %lld, q 4 / k 2 / v 2 / index k 1 heads of %d, rotary %d, %s", T,
             (long long)pos0, hd, rd, mode ? "bf16" : "fp32");
    float *st, *ct = rope_tab(c, T, pos0, rd, mode, &st);
    const int npages = (int)((pos0 + T - 1) / B + 1);
    int32_t *pt = page_table(c, npages);
    const size_t slots = (size_t)npages * B;
    m3g_prologue pro;
    memset(&pro, 0, sizeof pro);
    pro.njobs = 4, pro.T = T, pro.B = B, pro.rd = rd, pro.mode = mode, pro.pos0 = pos0;
    pro.page_table = (const int32_t *)din(c, pt, (size_t)npages * 4);
    pro.cos_t = (const float *)din(c, ct, (size_t)T * rd / 2 * 4);
    pro.sin_t = (const float *)din(c, st, (size_t)T * rd / 2 * 4);
    pro.eps = EPS;
    float *want[4];
    size_t rows[4];
    for (int j = 0; j < 4; j++) {
        const int nh = nhs[j], W = nh * hd;
        float *x = hrand(c, (size_t)T * W, 3.0f, mode);
        wt w = hweight(c, hd, 0.3f, 1);
        const m3_vec wv = rvec(&w, hd);
        const int paged = j > 0;
        rows[j] = paged ? slots : (size_t)T;
        want[j] = (float *)halloc(c, rows[j] * W * 4);
        memset(want[j], 0xFF, rows[j] * W * 4);
        for (int t = 0; t < T; t++) {
            const int64_t p = pos0 + t;
            float *r = want[j] + (paged ? (size_t)pt[p / B] * B + p % B : (size_t)t) * W;
            memcpy(r, x + (size_t)t * W, (size_t)W * 4);
            if (j != 2) { /* v: no norm, no rotation */
                m3_rmsnorm_heads(r, nh, hd, &wv, EPS, rmode(mode));
                m3_rope_apply(r, nh, hd, rd, ct + (size_t)t * rd / 2, st + (size_t)t * rd / 2,
                              rmode(mode));
            }
        }
        m3g_pro_job *jb = &pro.job[j];
        jb->src = (const float *)din(c, x, (size_t)T * W * 4);
        jb->w = j != 2 ? w.d : NULL;
        jb->w_dtype = M3G_BF16;
        jb->nheads = nh, jb->hd = hd;
        jb->paged = paged ? 3 : 0;
        if (j <= 1)
            jb->dst = (float *)dout(c, nm[j][0], rows[j] * W * 4, NULL);
        if (j >= 1)
            jb->dst16 = (uint16_t *)dout(c, nm[j][1], rows[j] * W * 2, NULL);
        if (j == 3) {
            jb->rng = (unsigned *)dalloc(c, 8);
            launch_ok(c, "m3g_ik_range_reset", m3g_ik_range_reset(jb->rng, c->st));
        }
    }
    launch_ok(c, "m3g_attn_prologue", m3g_attn_prologue(&pro, c->st));
    check_guards(c);
    for (int j = 0; j < 4; j++) {
        const size_t n = rows[j] * nhs[j] * hd;
        if (pro.job[j].dst)
            cmp_f(c, nm[j][0], (const float *)fetch(c, pro.job[j].dst, n * 4), want[j],
                  (int64_t)n, tol_mode(mode));
        if (pro.job[j].dst16) {
            float *w16 = (float *)halloc(c, n * 4); /* the bf16 copy of the result */
            for (size_t i = 0; i < n; i++)
                w16[i] = isnan(want[j][i]) ? want[j][i] : m3_round_bf16(want[j][i]);
            cmp_f(c, nm[j][1], /* bf16 data: the bf16 rule in either mode */
                  widen16(c, (const uint16_t *)fetch(c, pro.job[j].dst16, n * 2), n), w16,
                  (int64_t)n, &TOL_BF16);
        }
    }
}

/* Block lists [nkv, T, topk] for rows at pos0 + t (blocks of B keys): the
 * row's own block, then distinct earlier blocks, -1 padding when sparse
 * lists run out (-1 entries in the middle too for every third row). */
static int32_t *block_lists(tctx *c, int T, int64_t pos0, int nkv, int topk, int B)
{
    int32_t *bl = (int32_t *)halloc(c, (size_t)nkv * T * topk * 4);
    for (int g = 0; g < nkv; g++)
        for (int t = 0; t < T; t++) {
            int32_t *r = bl + ((size_t)g * T + t) * topk;
            const int nb = (int)((pos0 + t) / B) + 1;
            int n = 0;
            r[n++] = nb - 1;
            for (int tries = 0; n < topk && tries < 8 * topk; tries++) {
                const int b = (int)((urand(c) * 0.5f + 0.5f) * nb) % nb;
                int dup = 0;
                for (int j = 0; j < n; j++)
                    dup |= r[j] == b;
                if (!dup)
                    r[n++] = b;
            }
            while (n < topk)
                r[n++] = -1;
            if (t % 3 == 2 && topk > 2)
                r[1] = -1;
        }
    return bl;
}

enum { AT_PLAIN, AT_SPLIT, AT_SK, AT_MSA, AT_MSA1 };
static const char *const at_name[] = {"m3g_attention", "m3g_attention_split", "m3g_attention_sk",
                                      "m3g_msa_attention_prefill",
                                      "m3g_msa_attention_prefill_onepass"};

/* p: launcher, T, pos0, nh, nkv, hd, topk (0 dense), B, mode, bf16 caches,
 * NaN (not a finite decoy) in the cache slots no position maps to and in the
 * positions after the last row (the caches' unwritten tail) */
static void t_attention(tctx *c, const op_case *k)
{
    const int L = k->p[0], T = k->p[1], nh = k->p[3], nkv = k->p[4], hd = k->p[5];
    const int topk = k->p[6], B = k->p[7], mode = k->p[8], kvbf = k->p[9], nan_tail = k->p[10];
    const int64_t pos0 = k->p[2], S = pos0 + T;
    snprintf(c->shape, sizeof c->shape, "T %d at %lld, %d:%d heads of %d, %s, block %d, %s%s", T,
             (long long)pos0, nh, nkv, hd, topk ? "sparse" : "dense", B, mode ? "bf16" : "fp32",
             kvbf ? ", bf16 caches" : "");
    if (topk)
        snprintf(c->shape + strlen(c->shape), sizeof c->shape - strlen(c->shape), ", top %d",
                 topk);
    const size_t qn = (size_t)T * nh * hd, kvw = (size_t)nkv * hd;
    float *q = hrand(c, qn, 1.0f, mode);
    float *kc = hrand(c, (size_t)S * kvw, 1.0f, mode || kvbf);
    float *vc = hrand(c, (size_t)S * kvw, 1.0f, mode || kvbf);
    int32_t *bl = topk ? block_lists(c, T, pos0, nkv, topk, B) : NULL;
    float *want = (float *)halloc(c, qn * 4);
    float *scr = (float *)halloc(c, m3_attention_scratch(S - 1, nh, nkv, hd) * 4);
    int32_t *rb = (int32_t *)halloc(c, (size_t)nkv * (topk ? topk : 1) * 4);
    for (int t = 0; t < T; t++) {
        if (bl)
            for (int g = 0; g < nkv; g++)
                memcpy(rb + (size_t)g * topk, bl + ((size_t)g * T + t) * topk, (size_t)topk * 4);
        m3_attention_row(want + (size_t)t * nh * hd, q + (size_t)t * nh * hd, kc, vc, pos0 + t, nh,
                         nkv, hd, bl ? rb : NULL, topk, B, scr, rmode(mode));
    }
    /* paged device caches; slots no position maps to hold a finite decoy */
    const int npages = (int)((S - 1) / B + 1) + 1;
    int32_t *pt = page_table(c, npages);
    const size_t slots = (size_t)npages * B;
    float *pk = (float *)halloc(c, slots * kvw * 4), *pv = (float *)halloc(c, slots * kvw * 4);
    for (size_t i = 0; i < slots * kvw; i++)
        pk[i] = pv[i] = nan_tail ? NAN : 3.0f;
    for (int64_t p = 0; p < S; p++) {
        const size_t r = (size_t)pt[p / B] * B + p % B;
        memcpy(pk + r * kvw, kc + p * kvw, kvw * 4);
        memcpy(pv + r * kvw, vc + p * kvw, kvw * 4);
    }
    const void *dk = kvbf ? din(c, hbits(c, pk, slots * kvw), slots * kvw * 2)
                          : din(c, pk, slots * kvw * 4);
    const void *dv = kvbf ? din(c, hbits(c, pv, slots * kvw), slots * kvw * 2)
                          : din(c, pv, slots * kvw * 4);
    const int32_t *dpt = (const int32_t *)din(c, pt, (size_t)npages * 4);
    const int32_t *dbl = bl ? (const int32_t *)din(c, bl, (size_t)nkv * T * topk * 4) : NULL;
    const float *dq = (const float *)din(c, q, qn * 4);
    float *dout_ = (float *)dout(c, "out", qn * 4, NULL);
    hipError_t e = hipErrorInvalidValue;
    const int kdt = kvbf ? M3G_BF16 : M3G_F32;
    if (L == AT_PLAIN)
        e = m3g_attention(dout_, dq, (const float *)dk, (const float *)dv, dpt, B, pos0, T, nh,
                          nkv, hd, dbl, topk, mode, c->st);
    else if (L == AT_SPLIT) {
        const size_t wn = m3g_attention_split_ws(B, pos0, T, nh, hd, dbl, topk);
        float *ws = (float *)dalloc(c, wn * 4);
        e = m3g_attention_split(dout_, dq, (const float *)dk, (const float *)dv, dpt, B, pos0, T,
                                nh, nkv, hd, dbl, topk, mode, ws, wn, c->st);
    } else if (L == AT_SK) {
        const size_t wb = m3g_attention_sk_ws(B, pos0, T, nh, nkv, hd, dbl, topk, kdt);
        void *ws = dalloc(c, wb);
        e = m3g_attention_sk(dout_, dq, dk, dv, kdt, dpt, B, pos0, T, nh, nkv, hd, dbl, topk,
                             mode, ws, wb, c->st);
    } else if (L == AT_MSA)
        e = m3g_msa_attention_prefill(dout_, dq, dk, dv, kdt, dpt, B, pos0, T, nh, nkv, hd, dbl,
                                      topk, mode, c->st);
    else
        e = m3g_msa_attention_prefill_onepass(dout_, dq, dk, dv, kdt, dpt, B, pos0, T, nh, nkv,
                                              hd, dbl, topk, mode, c->st);
    launch_ok(c, at_name[L], e);
    check_guards(c);
    cmp_f(c, "out", (const float *)fetch(c, dout_, qn * 4), want, (int64_t)qn,
          L == AT_MSA1 && mode ? &TOL_BF16_1P : tol_mode(mode));
}

/* Index-K cache of S positions [S, d] (bf16-valued) and its paged device copy. */
typedef struct ikcache {
    float *h;
    const void *d;
    const int32_t *dpt;
    int npages;
} ikcache;

static ikcache ik_make(tctx *c, int64_t S, int d, int B, int bf)
{
    ikcache k;
    k.h = hrand(c, (size_t)S * d, 1.0f, 1);
    k.npages = (int)((S - 1) / B + 1) + 1;
    int32_t *pt = page_table(c, k.npages);
    const size_t slots = (size_t)k.npages * B;
    float *pk = (float *)halloc(c, slots * d * 4);
    for (size_t i = 0; i < slots * d; i++)
        pk[i] = 4.0f; /* never visible: larger than any key value */
    for (int64_t p = 0; p < S; p++)
        memcpy(pk + ((size_t)pt[p / B] * B + p % B) * d, k.h + p * d, (size_t)d * 4);
    k.d = bf ? din(c, hbits(c, pk, slots * d), slots * d * 2) : din(c, pk, slots * d * 4);
    k.dpt = (const int32_t *)din(c, pt, (size_t)k.npages * 4);
    return k;
}

/* Expected bs [T, G, nbmax] (ref m3_msa_block_scores; -inf past a row's blocks). */
static float *bs_want(tctx *c, const float *iq, const float *ik, int64_t pos0, int T, int G, int d,
                      int B, int nbmax)
{
    float *bs = (float *)halloc(c, (size_t)T * G * nbmax * 4);
    float *row = (float *)halloc(c, (size_t)G * nbmax * 4);
    for (int t = 0; t < T; t++) {
        const int nb = m3_msa_num_blocks(pos0 + t, B);
        m3_msa_block_scores(row, iq + (size_t)t * G * d, ik, pos0 + t, G, d, B);
        for (int g = 0; g < G; g++)
            for (int b = 0; b < nbmax; b++)
                bs[((size_t)t * G + g) * nbmax + b] = b < nb ? row[g * nb + b] : -INFINITY;
    }
    return bs;
}

/* Expected selections [G, T, topk] (ref m3_msa_select) from bs [T, G, nbmax]. */
static int32_t *sel_want(tctx *c, const float *bs, int64_t pos0, int T, int G, int nbmax, int B,
                         int topk, int local, int init)
{
    int32_t *out = (int32_t *)halloc(c, (size_t)G * T * topk * 4);
    float *row = (float *)halloc(c, (size_t)G * nbmax * 4);
    int32_t *o = (int32_t *)halloc(c, (size_t)G * topk * 4);
    for (int t = 0; t < T; t++) {
        const int nb = m3_msa_num_blocks(pos0 + t, B);
        for (int g = 0; g < G; g++)
            memcpy(row + (size_t)g * nb, bs + ((size_t)t * G + g) * nbmax, (size_t)nb * 4);
        m3_msa_select(o, row, G, nb, pos0 + t, B, topk, local, init);
        for (int g = 0; g < G; g++)
            memcpy(out + ((size_t)g * T + t) * topk, o + (size_t)g * topk, (size_t)topk * 4);
    }
    return out;
}

/* p: T, pos0, G, d, B, bf16 cache */
static void t_block_scores(tctx *c, const op_case *k)
{
    const int T = k->p[0], G = k->p[2], d = k->p[3], B = k->p[4], bf = k->p[5];
    const int64_t pos0 = k->p[1];
    snprintf(c->shape, sizeof c->shape, "T %d at %lld, %d heads of %d, block %d, %s cache", T,
             (long long)pos0, G, d, B, bf ? "bf16" : "fp32");
    const int nbmax = (int)((pos0 + T - 1) / B + 1);
    ikcache ik = ik_make(c, pos0 + T, d, B, bf);
    float *iq = hrand(c, (size_t)T * G * d, 1.0f, 1);
    float *want = bs_want(c, iq, ik.h, pos0, T, G, d, B, nbmax);
    float *dbs = (float *)dout(c, "bs", (size_t)T * G * nbmax * 4, NULL);
    launch_ok(c, "m3g_msa_block_scores",
              m3g_msa_block_scores(dbs, (const float *)din(c, iq, (size_t)T * G * d * 4), ik.d,
                                   bf ? M3G_BF16 : M3G_F32, ik.dpt, B, pos0, T, G, d, nbmax,
                                   c->st));
    check_guards(c);
    cmp_f(c, "bs", (const float *)fetch(c, dbs, (size_t)T * G * nbmax * 4), want,
          (int64_t)T * G * nbmax, &TOL_BIT);
}

/* p: T, pos0, G, B, topk, local, init, tied scores */
static void t_select(tctx *c, const op_case *k)
{
    const int T = k->p[0], G = k->p[2], B = k->p[3], topk = k->p[4], local = k->p[5];
    const int init = k->p[6], ties = k->p[7];
    const int64_t pos0 = k->p[1];
    snprintf(c->shape, sizeof c->shape,
             "T %d at %lld, %d heads, block %d, top %d, %d local, %d init%s", T, (long long)pos0,
             G, B, topk, local, init, ties ? ", tied scores" : "");
    const int nbmax = (int)((pos0 + T - 1) / B + 1);
    float *bs = (float *)halloc(c, (size_t)T * G * nbmax * 4);
    for (int t = 0; t < T; t++)
        for (int g = 0; g < G; g++)
            for (int b = 0; b < nbmax; b++) {
                float v = urand(c);
                if (ties) /* a few distinct values: ties to the lower block id */
                    v = floorf(v * 3.0f);
                bs[((size_t)t * G + g) * nbmax + b] =
                    b < m3_msa_num_blocks(pos0 + t, B) ? v : -INFINITY;
            }
    int32_t *want = sel_want(c, bs, pos0, T, G, nbmax, B, topk, local, init);
    int32_t *dsel = (int32_t *)dout(c, "out", (size_t)G * T * topk * 4, NULL);
    launch_ok(c, "m3g_msa_select",
              m3g_msa_select(dsel, (const float *)din(c, bs, (size_t)T * G * nbmax * 4), pos0, T,
                             G, nbmax, B, topk, local, init, c->st));
    check_guards(c);
    cmp_i(c, "out", (const int32_t *)fetch(c, dsel, (size_t)G * T * topk * 4), want,
          (int64_t)G * T * topk);
}

/* Tensor-core block scores: the exact products of bf16 values summed in
 * another order, each fp32 addition off by at most 2^-23 of its running sum
 * (round to nearest or toward zero), so a score is within (d - 1) 2^-23
 * sum|q_e k_e| of the exact dot product and ref's within (d - 1) 2^-24 of
 * it; a block's max within the largest of its keys' bounds. Checks every
 * word of got against want within d 2^-22 max_key sum|q_e k_e| (-inf
 * exactly). */
static void cmp_bs_tc(tctx *c, const float *got, const float *want, const float *iq,
                      const float *ik, int64_t pos0, int T, int G, int d, int B, int nbmax)
{
    for (int t = 0; t < T; t++)
        for (int g = 0; g < G; g++)
            for (int b = 0; b < nbmax; b++) {
                const size_t i = ((size_t)t * G + g) * nbmax + b;
                double S = 0;
                for (int64_t p = (int64_t)b * B; p < (int64_t)(b + 1) * B && p <= pos0 + t; p++) {
                    double a = 0;
                    for (int e = 0; e < d; e++)
                        a += fabs((double)iq[((size_t)t * G + g) * d + e] * ik[p * d + e]);
                    S = a > S ? a : S;
                }
                const double tolv = d * ldexp(S, -22);
                const int ok = isinf(want[i]) ? got[i] == want[i]
                                              : fabs((double)got[i] - want[i]) <= tolv;
                if (!ok) {
                    failf(c, "bs: [t %d, head %d, block %d] got %.9g want %.9g, beyond the "
                          "tensor-core bound %.3g", t, g, b, (double)got[i], (double)want[i], tolv);
                    return;
                }
            }
}

/* p: T, pos0, G, d, B, topk, bf16 cache, range words (m3g_msa_indexer_ex),
 * probe bits (m3g_msa_indexer_ex), q not bf16-valued (no product proven
 * exact: every row multiplies then adds, bitwise, in whatever kernel form).
 * Where the launcher may sum on tensor cores (m3g_msa_indexer_tc) and q is
 * bf16, the scores are judged by cmp_bs_tc and the selection must be exactly
 * the golden order of the scores it returned; elsewhere both are bitwise as
 * ref. */
static void t_indexer(tctx *c, const op_case *k)
{
    const int T = k->p[0], G = k->p[2], d = k->p[3], B = k->p[4], topk = k->p[5], bf = k->p[6];
    const int ranged = k->p[7], probe = k->p[8], qf32 = k->p[9], local = 2, init = 1;
    const int64_t pos0 = k->p[1];
    snprintf(c->shape, sizeof c->shape,
             "T %d at %lld, %d heads of %d, block %d, top %d, %s cache%s", T, (long long)pos0, G,
             d, B, topk, bf ? "bf16" : "fp32", ranged ? ", range words" : "");
    const int nbmax = (int)((pos0 + T - 1) / B + 1);
    const int idt = bf ? M3G_BF16 : M3G_F32;
    const int tc = !qf32 && m3g_msa_indexer_tc(idt, B, G, d, nbmax, topk, ranged, probe);
    if (probe & M3G_IDX_FUSED)
        snprintf(c->shape + strlen(c->shape), sizeof c->shape - strlen(c->shape),
                 ", the fused kernel");
    if (probe & M3G_IDX_EXACT)
        snprintf(c->shape + strlen(c->shape), sizeof c->shape - strlen(c->shape), ", exact");
    if (qf32)
        snprintf(c->shape + strlen(c->shape), sizeof c->shape - strlen(c->shape),
                 ", fp32 q (multiply then add)");
    if (tc)
        snprintf(c->shape + strlen(c->shape), sizeof c->shape - strlen(c->shape),
                 ", tensor-core sums");
    ikcache ik = ik_make(c, pos0 + T, d, B, bf);
    float *iq = hrand(c, (size_t)T * G * d, 1.0f, !qf32);
    float *bw = bs_want(c, iq, ik.h, pos0, T, G, d, B, nbmax);
    int32_t *sw = sel_want(c, bw, pos0, T, G, nbmax, B, topk, local, init);
    float *dbs = (float *)dout(c, "bs", (size_t)T * G * nbmax * 4, NULL);
    int32_t *dsel = (int32_t *)dout(c, "out", (size_t)G * T * topk * 4, NULL);
    unsigned *ctr = (unsigned *)dout(c, "tickets", (size_t)T * 4, NULL);
    hip_ok(c, "ticket reset", hipMemset(ctr, 0, (size_t)T * 4));
    const size_t wsb = m3g_msa_indexer_ws(T, G, nbmax);
    void *ws = dalloc(c, wsb);
    unsigned *rng = NULL;
    if (ranged) {
        rng = (unsigned *)dalloc(c, 8);
        launch_ok(c, "m3g_ik_range_reset", m3g_ik_range_reset(rng, c->st));
        launch_ok(c, "m3g_ik_range_scan",
                  m3g_ik_range_scan(rng, (const uint16_t *)ik.d, (int64_t)ik.npages * B * d,
                                    c->st));
    }
    const float *diq = (const float *)din(c, iq, (size_t)T * G * d * 4);
    for (int rep = 0; rep < 2; rep++) /* twice: the tickets must be left zero */
        launch_ok(c, ranged || probe ? "m3g_msa_indexer_ex" : "m3g_msa_indexer",
                  ranged || probe
                      ? m3g_msa_indexer_ex(dsel, dbs, diq, ik.d, idt, ik.dpt, B, pos0, T, G, d,
                                           nbmax, topk, local, init, ctr, ws, wsb, rng, probe,
                                           c->st)
                         : m3g_msa_indexer(dsel, dbs, diq, ik.d, idt, ik.dpt, B, pos0, T, G, d,
                                           nbmax, topk, local, init, ctr, ws, wsb, c->st));
    check_guards(c);
    const float *gbs = (const float *)fetch(c, dbs, (size_t)T * G * nbmax * 4);
    if (tc) {
        cmp_bs_tc(c, gbs, bw, iq, ik.h, pos0, T, G, d, B, nbmax);
        sw = sel_want(c, gbs, pos0, T, G, nbmax, B, topk, local, init);
    } else {
        cmp_f(c, "bs", gbs, bw, (int64_t)T * G * nbmax, &TOL_BIT);
    }
    cmp_i(c, "out", (const int32_t *)fetch(c, dsel, (size_t)G * T * topk * 4), sw,
          (int64_t)G * T * topk);
    const unsigned *tk = (const unsigned *)fetch(c, ctr, (size_t)T * 4);
    for (int t = 0; t < T; t++)
        if (tk[t] != 0) {
            failf(c, "tickets: entry %d left at %u (must be zero)", t, tk[t]);
            break;
        }
}

/* p: T, H, E, k, bias (0 none, 1 fp32, 2 bf16) */
static void t_router(tctx *c, const op_case *k)
{
    const int T = k->p[0], H = k->p[1], E = k->p[2], K = k->p[3], bias = k->p[4];
    snprintf(c->shape, sizeof c->shape, "T %d, hidden %d, %d experts, top %d, %s bias", T, H, E, K,
             bias == 0 ? "no" : bias == 1 ? "fp32" : "bf16");
    wt r = hweight(c, (size_t)E * H, 0.05f, 0);
    wt b = hweight(c, E, 0.2f, bias == 2);
    float *x = hrand(c, (size_t)T * H, 1.0f, 1);
    int32_t *wi = (int32_t *)halloc(c, (size_t)T * K * 4);
    float *ww = (float *)halloc(c, (size_t)T * K * 4), *wsc = (float *)halloc(c, (size_t)T * E * 4);
    const m3_mat rm = rmat(&r, E, H);
    const m3_vec bv = rvec(&b, E);
    for (int t = 0; t < T; t++)
        m3_router(wi + (size_t)t * K, ww + (size_t)t * K, wsc + (size_t)t * E, x + (size_t)t * H,
                  &rm, &bv, bias != 0, K);
    int32_t *di = (int32_t *)dout(c, "idx", (size_t)T * K * 4, NULL);
    float *dw = (float *)dout(c, "w", (size_t)T * K * 4, NULL);
    float *ds = (float *)dout(c, "scores", (size_t)T * E * 4, NULL);
    launch_ok(c, "m3g_router",
              m3g_router(di, dw, ds, (const float *)din(c, x, (size_t)T * H * 4), gmat(&r, E, H),
                         bias ? b.d : NULL, b.bf, T, K, c->st));
    check_guards(c);
    cmp_i(c, "idx", (const int32_t *)fetch(c, di, (size_t)T * K * 4), wi, (int64_t)T * K);
    cmp_f(c, "w", (const float *)fetch(c, dw, (size_t)T * K * 4), ww, (int64_t)T * K, &TOL_ROUTER);
    cmp_f(c, "scores", (const float *)fetch(c, ds, (size_t)T * E * 4), wsc, (int64_t)T * E,
          &TOL_ROUTER);
}

#define SW_ALPHA 1.702f
#define SW_LIMIT 7.0f
#define SW_BETA 1.0f

static float swiglu_ref(float g, float u, int mode)
{
    const float a = m3_swiglu_oai(g, u, SW_ALPHA, SW_LIMIT, SW_BETA);
    return mode ? m3_round_bf16(a) : a;
}

/* p: n, mode */
static void t_swiglu(tctx *c, const op_case *k)
{
    const int n = k->p[0], mode = k->p[1];
    snprintf(c->shape, sizeof c->shape, "n %d, %s (inputs past the limit too)", n,
             mode ? "bf16" : "fp32");
    float *g = hrand(c, n, 10.0f, mode), *u = hrand(c, n, 10.0f, mode);
    float *want = (float *)halloc(c, (size_t)n * 4);
    for (int i = 0; i < n; i++)
        want[i] = swiglu_ref(g[i], u[i], mode);
    float *da = (float *)dout(c, "act", (size_t)n * 4, NULL);
    launch_ok(c, "m3g_swiglu",
              m3g_swiglu(da, (const float *)din(c, g, (size_t)n * 4),
                         (const float *)din(c, u, (size_t)n * 4), n, SW_ALPHA, SW_LIMIT, SW_BETA,
                         mode, c->st));
    check_guards(c);
    cmp_f(c, "act", (const float *)fetch(c, da, (size_t)n * 4), want, n, tol_mode(mode));
}

/* Y [T, rows] = round(X W^T) by ref m3_matmul. */
static float *matmul_ref(tctx *c, const wt *w, int rows, int cols, const float *X, int T,
                         int mode, size_t woff)
{
    float *y = (float *)halloc(c, (size_t)T * rows * 4);
    m3_mat m = rmat(w, rows, cols);
    m.data = (const char *)w->h + woff * (w->bf ? 2 : 4);
    m3_matmul(y, &m, X, T);
    round_mode(y, (size_t)T * rows, mode);
    return y;
}

/* p: T, rows, cols, mode, bf16 weight, BLAS, extra row stride, unrounded
 * product (m3g_linear_product) */
static void t_linear(tctx *c, const op_case *k)
{
    const int T = k->p[0], rows = k->p[1], cols = k->p[2], mode = k->p[3], wb = k->p[4];
    const int useblas = k->p[5], ld = rows + k->p[6], prod = k->p[7];
    snprintf(c->shape, sizeof c->shape, "T %d, %dx%d, %s, %s weight%s%s", T, rows, cols,
             mode ? "bf16" : "fp32", wb ? "bf16" : "fp32", useblas ? ", BLAS" : "",
             ld > rows ? ", strided Y" : "");
    if (useblas && !c->blas) {
        snprintf(c->msg, sizeof c->msg, "SKIP: no BLAS in this build");
        c->fail = -1;
        return;
    }
    wt w = hweight(c, (size_t)rows * cols, 0.05f, wb);
    float *X = hrand(c, (size_t)T * cols, 1.0f, mode);
    /* the product: ref's order and no rounding (bitwise) unless BLAS computes it */
    float *want = matmul_ref(c, &w, rows, cols, X, T, prod ? 0 : mode, 0);
    float *dy = (float *)dout(c, "Y", (size_t)T * ld * 4, NULL);
    const float *dX = (const float *)din(c, X, (size_t)T * cols * 4);
    m3g_blas *b = useblas ? c->blas : NULL;
    if (prod)
        launch_ok(c, "m3g_linear_product",
                  m3g_linear_product(dy, ld, dX, gmat(&w, rows, cols), T, mode, b, c->st));
    else
        launch_ok(c, "m3g_linear", m3g_linear(dy, ld, dX, gmat(&w, rows, cols), T, mode, b, c->st));
    check_guards(c);
    cmp_rows(c, "Y", (const float *)fetch(c, dy, (size_t)T * ld * 4), ld, want, T, rows,
             prod ? (useblas ? &TOL_F32 : &TOL_BIT) : mode ? &TOL_BF16 : &TOL_BIT);
}

/* p: T, cols, mode, rows of segments 0..2 */
static void t_linear_multi(tctx *c, const op_case *k)
{
    const int T = k->p[0], cols = k->p[1], mode = k->p[2], nseg = 3;
    const int r[3] = {k->p[3], k->p[4], k->p[5]}, rows = r[0] + r[1] + r[2];
    snprintf(c->shape, sizeof c->shape, "T %d, segments %d+%d+%d x %d, %s", T, r[0], r[1], r[2],
             cols, mode ? "bf16" : "fp32");
    wt w = hweight(c, (size_t)rows * cols, 0.05f, 1);
    float *X = hrand(c, (size_t)T * cols, 1.0f, mode);
    const float *dX = (const float *)din(c, X, (size_t)T * cols * 4);
    m3g_seg seg[3];
    float *want[3];
    size_t off = 0;
    static const char *const nm[3] = {"y0", "y1", "y2"};
    for (int s = 0; s < nseg; s++) {
        want[s] = matmul_ref(c, &w, r[s], cols, X, T, mode, off);
        off += (size_t)r[s] * cols;
        seg[s].ld = r[s] + s; /* ragged strides */
        seg[s].rows = r[s];
        seg[s].y = (float *)dout(c, nm[s], (size_t)T * seg[s].ld * 4, NULL);
    }
    launch_ok(c, "m3g_linear_multi",
              m3g_linear_multi(dX, gmat(&w, rows, cols), seg, nseg, T, mode, c->blas, c->st));
    check_guards(c);
    for (int s = 0; s < nseg; s++)
        cmp_rows(c, nm[s], (const float *)fetch(c, seg[s].y, (size_t)T * seg[s].ld * 4),
                 seg[s].ld, want[s], T, r[s], mode ? &TOL_BF16 : &TOL_BIT);
}

/* act [T, I] = round(SwiGLU(round(X Wg^T), round(X Wu^T))) by ref. */
static float *swiglu_mm_ref(tctx *c, const wt *w, int I, int cols, const float *X, int T,
                            int mode, size_t up_off)
{
    float *g = matmul_ref(c, w, I, cols, X, T, mode, 0);
    float *u = matmul_ref(c, w, I, cols, X, T, mode, up_off);
    for (size_t i = 0; i < (size_t)T * I; i++)
        g[i] = swiglu_ref(g[i], u[i], mode);
    return g;
}

/* p: T, I, cols, mode */
static void t_linear_swiglu(tctx *c, const op_case *k)
{
    const int T = k->p[0], I = k->p[1], cols = k->p[2], mode = k->p[3];
    snprintf(c->shape, sizeof c->shape, "T %d, gate+up 2x%dx%d, %s", T, I, cols,
             mode ? "bf16" : "fp32");
    wt w = hweight(c, (size_t)2 * I * cols, 0.1f, 1);
    float *X = hrand(c, (size_t)T * cols, 1.0f, mode);
    float *want = swiglu_mm_ref(c, &w, I, cols, X, T, mode, (size_t)I * cols);
    float *da = (float *)dout(c, "act", (size_t)T * I * 4, NULL);
    float *up = (float *)dalloc(c, (size_t)T * I * 4);
    launch_ok(c, "m3g_linear_swiglu",
              m3g_linear_swiglu(da, I, up, (const float *)din(c, X, (size_t)T * cols * 4),
                                gmat(&w, 2 * I, cols), T, SW_ALPHA, SW_LIMIT, SW_BETA, mode,
                                c->blas, c->st));
    check_guards(c);
    cmp_f(c, "act", (const float *)fetch(c, da, (size_t)T * I * 4), want, (int64_t)T * I,
          tol_mode(mode));
}

/* idx [T, k]: distinct experts, ascending (as the router gives them). */
static int32_t *expert_ids(tctx *c, int T, int K, int E)
{
    int32_t *idx = (int32_t *)halloc(c, (size_t)T * K * 4);
    for (int t = 0; t < T; t++) {
        int n = 0;
        for (int e = 0; e < E && n < K; e++) /* K of E, spread by the generator */
            if ((E - e) <= (K - n) || urand(c) > 0.3f)
                idx[(size_t)t * K + n++] = e;
    }
    return idx;
}

/* p: T, k, E, rows, cols, mode, per-slot inputs, swiglu */
static void t_gemv_grouped(tctx *c, const op_case *k)
{
    const int T = k->p[0], K = k->p[1], E = k->p[2], rows = k->p[3], cols = k->p[4];
    const int mode = k->p[5], perslot = k->p[6], sw = k->p[7];
    snprintf(c->shape, sizeof c->shape, "T %d, top %d of %d experts %dx%d, %s, %s input%s", T, K,
             E, rows, cols, mode ? "bf16" : "fp32", perslot ? "per-slot" : "shared",
             sw ? ", gate+up+SwiGLU" : "");
    const size_t es = (size_t)rows * cols;
    wt wg = hweight(c, E * es, 0.1f, 1), wu = hweight(c, E * es, 0.1f, 1);
    const int64_t xs = (int64_t)(perslot ? K : 1) * cols, xk = perslot ? cols : 0;
    float *X = hrand(c, (size_t)T * xs, 1.0f, mode);
    int32_t *idx = expert_ids(c, T, K, E);
    float *want = (float *)halloc(c, (size_t)T * K * rows * 4);
    for (int t = 0; t < T; t++)
        for (int s = 0; s < K; s++) {
            const int e = idx[(size_t)t * K + s];
            const float *x = X + t * xs + s * xk;
            float *y = want + ((size_t)t * K + s) * rows;
            float *g = matmul_ref(c, &wg, rows, cols, x, 1, mode, e * es);
            if (sw) {
                float *u = matmul_ref(c, &wu, rows, cols, x, 1, mode, e * es);
                for (int i = 0; i < rows; i++)
                    y[i] = swiglu_ref(g[i], u[i], mode);
            } else
                memcpy(y, g, (size_t)rows * 4);
        }
    float *dy = (float *)dout(c, sw ? "act" : "Y", (size_t)T * K * rows * 4, NULL);
    const float *dX = (const float *)din(c, X, (size_t)T * xs * 4);
    const int32_t *di = (const int32_t *)din(c, idx, (size_t)T * K * 4);
    if (sw)
        launch_ok(c, "m3g_gemv_grouped_swiglu",
                  m3g_gemv_grouped_swiglu(dy, dX, xs, xk, wg.d, wu.d, (int64_t)es, M3G_BF16, rows,
                                          cols, di, T, K, SW_ALPHA, SW_LIMIT, SW_BETA, mode,
                                          c->st));
    else
        launch_ok(c, "m3g_gemv_grouped",
                  m3g_gemv_grouped(dy, dX, xs, xk, wg.d, (int64_t)es, M3G_BF16, rows, cols, di, T,
                                   K, mode, c->st));
    check_guards(c);
    cmp_f(c, sw ? "act" : "Y", (const float *)fetch(c, dy, (size_t)T * K * rows * 4), want,
          (int64_t)T * K * rows, tol_mode(mode));
}

/* p: T, n, mode, bf16 weights */
static void t_layernorm(tctx *c, const op_case *k)
{
    const int T = k->p[0], n = k->p[1], mode = k->p[2], wb = k->p[3];
    snprintf(c->shape, sizeof c->shape, "T %d, n %d, %s, %s weights", T, n, mode ? "bf16" : "fp32",
             wb ? "bf16" : "fp32");
    float *x = hrand(c, (size_t)T * n, 3.0f, mode);
    for (int t = 0; t < T; t++) /* an offset mean per row */
        for (int i = 0; i < n; i++)
            x[(size_t)t * n + i] += mode ? 0.0f : 0.5f * t;
    wt w = hweight(c, n, 1.0f, wb), b = hweight(c, n, 0.5f, wb);
    const m3_vec wv = rvec(&w, n), bv = rvec(&b, n);
    float *want = (float *)halloc(c, (size_t)T * n * 4);
    for (int t = 0; t < T; t++)
        m3_layernorm(want + (size_t)t * n, x + (size_t)t * n, &wv, &bv, n, 1e-5f, rmode(mode));
    float *dy = (float *)dout(c, "y", (size_t)T * n * 4, NULL);
    launch_ok(c, "m3g_layernorm",
              m3g_layernorm(dy, (const float *)din(c, x, (size_t)T * n * 4), w.d, w.bf, b.d, b.bf,
                            T, n, 1e-5f, mode, c->st));
    check_guards(c);
    cmp_f(c, "y", (const float *)fetch(c, dy, (size_t)T * n * 4), want, (int64_t)T * n,
          tol_mode(mode));
}

/* p: T, n, gelu, residual, mode */
static void t_bias_act(tctx *c, const op_case *k)
{
    const int T = k->p[0], n = k->p[1], gelu = k->p[2], res = k->p[3], mode = k->p[4];
    snprintf(c->shape, sizeof c->shape, "T %d, n %d, bias%s%s, %s", T, n, gelu ? " + GELU" : "",
             res ? " + residual" : "", mode ? "bf16" : "fp32");
    const size_t N = (size_t)T * n;
    float *y = hrand(c, N, 3.0f, 0), *r = hrand(c, N, 2.0f, mode);
    wt b = hweight(c, n, 0.5f, 1);
    const m3_vec bv = rvec(&b, n);
    float *wy = (float *)halloc(c, N * 4), *wr = (float *)halloc(c, N * 4);
    for (size_t i = 0; i < N; i++) {
        float v = y[i] + m3_vec_at(&bv, (int)(i % n));
        v = mode ? m3_round_bf16(v) : v;
        if (gelu) {
            v = m3_gelu(v);
            v = mode ? m3_round_bf16(v) : v;
        }
        wy[i] = v;
        wr[i] = res ? (mode ? m3_round_bf16(r[i] + v) : r[i] + v) : r[i];
    }
    float *dy = (float *)dout(c, "y", N * 4, y);
    float *dr = res ? (float *)dout(c, "resid", N * 4, r) : NULL;
    launch_ok(c, "m3g_bias_act", m3g_bias_act(dy, b.d, 1, T, n, gelu, dr, mode, c->st));
    check_guards(c);
    cmp_f(c, "y", (const float *)fetch(c, dy, N * 4), wy, (int64_t)N, tol_mode(mode));
    if (res)
        cmp_f(c, "resid", (const float *)fetch(c, dr, N * 4), wr, (int64_t)N, tol_mode(mode));
}

/* p: T, nh, hd, rd, mode */
static void t_vision_rope(tctx *c, const op_case *k)
{
    const int T = k->p[0], nh = k->p[1], hd = k->p[2], rd = k->p[3], mode = k->p[4];
    snprintf(c->shape, sizeof c->shape, "T %d, %d heads of %d, rotary %d, %s", T, nh, hd, rd,
             mode ? "bf16" : "fp32");
    const size_t n = (size_t)T * nh * hd;
    float *x = hrand(c, n, 2.0f, mode);
    float *ct = hrand(c, (size_t)T * rd / 2, 1.0f, 0), *st = hrand(c, (size_t)T * rd / 2, 1.0f, 0);
    float *want = (float *)halloc(c, n * 4);
    memcpy(want, x, n * 4);
    for (int t = 0; t < T; t++) /* fp32 rotation, then one rounding (ref m3_vision_forward) */
        m3_rope_apply(want + (size_t)t * nh * hd, nh, hd, rd, ct + (size_t)t * rd / 2,
                      st + (size_t)t * rd / 2, M3_MODE_FP32);
    round_mode(want, n, mode);
    float *dx = (float *)dout(c, "x", n * 4, x);
    launch_ok(c, "m3g_vision_rope",
              m3g_vision_rope(dx, T, nh, hd, rd, (const float *)din(c, ct, (size_t)T * rd / 2 * 4),
                              (const float *)din(c, st, (size_t)T * rd / 2 * 4), mode, c->st));
    check_guards(c);
    cmp_f(c, "x", (const float *)fetch(c, dx, n * 4), want, (int64_t)n, tol_mode(mode));
}

/* Values that exercise bf16 rounding: ties, subnormals, infinities, NaN. */
static float *round_inputs(tctx *c, int n)
{
    float *x = hrand(c, (size_t)n, 100.0f, 0);
    static const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x00000001u,
                                       0x807fffffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                                       0x7fc00000u, 0x80000000u, 0x7f7f8000u};
    for (int i = 0; i < n && i < (int)(sizeof special / 4); i++)
        memcpy(&x[i], &special[i], 4);
    return x;
}

/* p: n */
static void t_to_bf16(tctx *c, const op_case *k)
{
    const int n = k->p[0];
    snprintf(c->shape, sizeof c->shape, "n %d (ties, subnormals, inf, NaN)", n);
    float *x = round_inputs(c, n);
    uint16_t *want = hbits(c, x, (size_t)n);
    uint16_t *dd = (uint16_t *)dout(c, "dst", (size_t)n * 2, NULL);
    launch_ok(c, "m3g_to_bf16",
              m3g_to_bf16(dd, (const float *)din(c, x, (size_t)n * 4), n, c->st));
    check_guards(c);
    const uint16_t *g = (const uint16_t *)fetch(c, dd, (size_t)n * 2);
    for (int i = 0; i < n; i++)
        if (g[i] != want[i]) {
            failf(c, "dst: entry %d is 0x%04x, want 0x%04x", i, g[i], want[i]);
            break;
        }
}

/* p: n, mode */
static void t_round(tctx *c, const op_case *k)
{
    const int n = k->p[0], mode = k->p[1];
    snprintf(c->shape, sizeof c->shape, "n %d, %s", n, mode ? "bf16" : "fp32 (no change)");
    float *x = round_inputs(c, n);
    float *want = (float *)halloc(c, (size_t)n * 4);
    memcpy(want, x, (size_t)n * 4);
    round_mode(want, (size_t)n, mode);
    float *dx = (float *)dout(c, "x", (size_t)n * 4, x);
    launch_ok(c, "m3g_round", m3g_round(dx, n, mode, c->st));
    check_guards(c);
    cmp_f(c, "x", (const float *)fetch(c, dx, (size_t)n * 4), want, n, &TOL_BIT);
}

/* p: layers (<= 8), ring buffer KiB, copy threads. The weight-streaming ring
 * (gpu/weight_stream.h) against its source bytes: pieces larger than a ring
 * buffer, pieces that share one, ragged sizes, the ring wrapping, two passes
 * over the layers. */
static void t_wstream(tctx *c, const op_case *k)
{
    enum { NJ = 6 };
    const int L = k->p[0];
    const size_t pin = (size_t)k->p[1] << 10;
    if (L < 1 || L > 8) {
        failf(c, "the case asks for %d layers (1..8)", L);
        return;
    }
    /* the first piece of layer 0 starts a buffer: pin / 2 + 1 splits unevenly */
    const size_t sz[NJ] = {pin / 2 + 1, 5 * pin / 2 + 7, 1000, 3 * pin / 2 + 3, 17, pin};
    m3g_wstream ws;
    m3_err e;
    e.msg[0] = 0;
    size_t slot = 0;
    for (int j = 0; j < NJ; j++)
        slot += (sz[j] + 7 * L + 255) / 256 * 256;
    if (m3g_wstream_init_ring(&ws, L, slot, pin, k->p[2], &e) != 0) {
        failf(c, "m3g_wstream_init_ring: %s", e.msg);
        m3g_wstream_free(&ws);
        return;
    }
    snprintf(c->shape, sizeof c->shape, "%d layers of %d pieces, ring 4 x %zu KiB, %s", L, NJ,
             pin >> 10, ws.pin[0] ? "pinned" : "pageable (no pinned memory)");
    if (ws.pin[0])
        snprintf(c->shape + strlen(c->shape), sizeof c->shape - strlen(c->shape),
                 " by %d copy thread%s", ws.copiers, ws.copiers == 1 ? "" : "s");
    unsigned char *src[8][NJ];
    void *dst[8][NJ];
    size_t lbytes[8] = {0};
    for (int l = 0; l < L && !c->fail; l++) {
        if (m3g_wstream_begin_layer(&ws, l, &e) != 0) {
            failf(c, "begin_layer %d: %s", l, e.msg);
            break;
        }
        for (int j = 0; j < NJ; j++) {
            const size_t n = sz[j] + (size_t)(7 * l);
            src[l][j] = (unsigned char *)halloc(c, n);
            for (size_t i = 0; i < n; i++) {
                c->rng = c->rng * 6364136223846793005ull + 1442695040888963407ull;
                src[l][j][i] = (unsigned char)(c->rng >> 56);
            }
            dst[l][j] = m3g_wstream_alloc(&ws, n, &e);
            if (!dst[l][j] || m3g_wstream_add(&ws, dst[l][j], src[l][j], n, &e) != 0) {
                failf(c, "layer %d piece %d: %s", l, j, e.msg);
                break;
            }
            lbytes[l] += n;
        }
    }
    if (!c->fail && m3g_wstream_end(&ws, &e) != 0)
        failf(c, "end: %s", e.msg);
    /* the loads to expect: a fetch copies unless the layer's slot still holds it */
    int held[2] = {-1, -1};
    int64_t want_loads = 0, want_bytes = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int l = 0; l <= L; l++) {
            const int f = l % L; /* fetch 0, then fetch l + 1 after layer l */
            if (held[f % 2] != f) {
                held[f % 2] = f;
                want_loads++;
                want_bytes += (int64_t)lbytes[f];
            }
        }
    for (int pass = 0; pass < 2 && !c->fail; pass++) {
        if (m3g_wstream_fetch(&ws, 0, &e) != 0) {
            failf(c, "fetch 0: %s", e.msg);
            break;
        }
        for (int l = 0; l < L && !c->fail; l++) {
            if (m3g_wstream_acquire(&ws, l, c->st, &e) != 0 || hipStreamSynchronize(c->st)) {
                failf(c, "acquire %d: %s", l, e.msg);
                break;
            }
            for (int j = 0; j < NJ && !c->fail; j++) {
                const size_t n = sz[j] + (size_t)(7 * l);
                const unsigned char *g = (const unsigned char *)fetch(c, dst[l][j], n);
                for (size_t i = 0; i < n; i++)
                    if (g[i] != src[l][j][i]) {
                        failf(c, "pass %d layer %d piece %d (%zu bytes): byte %zu is 0x%02x, "
                                 "want 0x%02x", pass, l, j, n, i, g[i], src[l][j][i]);
                        break;
                    }
            }
            if (!c->fail && (m3g_wstream_release(&ws, l, c->st, &e) != 0 ||
                             m3g_wstream_fetch(&ws, (l + 1) % L, &e) != 0))
                failf(c, "release %d / fetch %d: %s", l, (l + 1) % L, e.msg);
        }
    }
    if (!c->fail && m3g_wstream_sync(&ws, &e) != 0)
        failf(c, "sync: %s", e.msg);
    if (!c->fail && (ws.fetches != want_loads || ws.bytes_copied != want_bytes))
        failf(c, "%lld layer loads of %lld bytes, want %lld of %lld", (long long)ws.fetches,
              (long long)ws.bytes_copied, (long long)want_loads, (long long)want_bytes);
    m3g_wstream_free(&ws);
}

/* The table. Shapes are ragged on purpose (T and widths off the kernels'
 * tile sizes); the full M3 shapes run in gpu/bench.cu. */
static const op_case CASES[] = {
    /* norm_rope.cu */
    {"m3g_residual_rmsnorm", t_residual_rmsnorm, {1, 6144, 1, 1, 1}},
    {"m3g_residual_rmsnorm", t_residual_rmsnorm, {7, 1000, 1, 0, 1}},
    {"m3g_residual_rmsnorm", t_residual_rmsnorm, {3, 257, 0, 1, 0}},
    {"m3g_residual_rmsnorm", t_residual_rmsnorm, {9, 64, 0, 0, 1}},
    {"m3g_headnorm_rope", t_headnorm_rope, {5, 4, 128, 64, 1, 0, 0, 0}},
    {"m3g_headnorm_rope", t_headnorm_rope, {3, 3, 64, 32, 0, 37, 0, 1}},
    {"m3g_headnorm_rope", t_headnorm_rope, {1, 2, 80, 80, 0, 1000, 0, 0}},
    {"m3g_headnorm_rope_bf16", t_headnorm_rope, {6, 4, 128, 64, 1, 15, 1, 1}},
    {"m3g_attn_prologue", t_prologue, {1, 300, 1}},
    {"m3g_attn_prologue", t_prologue, {5, 13, 1}},
    {"m3g_attn_prologue", t_prologue, {3, 40, 0}},
    /* attention.cu: dense and sparse decode / short prefill */
    {"m3g_attention", t_attention, {AT_PLAIN, 1, 40, 8, 2, 64, 0, 16, 0, 0}},
    {"m3g_attention", t_attention, {AT_PLAIN, 5, 70, 4, 4, 24, 3, 16, 1, 0}},
    {"m3g_attention", t_attention, {AT_PLAIN, 3, 0, 2, 1, 128, 0, 8, 1, 0}},
    {"m3g_attention_split", t_attention, {AT_SPLIT, 1, 200, 8, 2, 64, 0, 16, 0, 0}},
    {"m3g_attention_split", t_attention, {AT_SPLIT, 4, 150, 8, 2, 32, 4, 32, 1, 0}},
    {"m3g_attention_sk", t_attention, {AT_SK, 1, 300, 8, 2, 64, 0, 32, 1, 1}},
    {"m3g_attention_sk", t_attention, {AT_SK, 1, 600, 16, 1, 128, 0, 64, 1, 1}},
    {"m3g_attention_sk", t_attention, {AT_SK, 1, 500, 16, 1, 128, 4, 64, 1, 1}},
    {"m3g_attention_sk", t_attention, {AT_SK, 2, 100, 4, 2, 40, 3, 16, 0, 0}},
    {"m3g_attention_sk", t_attention, {AT_SK, 3, 90, 8, 2, 64, 4, 16, 1, 1}},
    {"m3g_attention_sk", t_attention, {AT_SK, 2, 100, 8, 2, 48, 4, 16, 1, 1}},
    /* the tensor-core cluster kernel (H200) at each head dim, NaN in every
     * slot no row may see: the released shape (64:4 heads of 128, top 16 of
     * blocks of 128), 6 heads per group (ranks >= 6 get no partial), top 16
     * over more list entries than visible blocks */
    {"m3g_attention_sk", t_attention, {AT_SK, 1, 2500, 64, 4, 128, 16, 128, 1, 1, 1}},
    {"m3g_attention_sk", t_attention, {AT_SK, 2, 700, 24, 4, 128, 8, 128, 1, 1, 1}},
    {"m3g_attention_sk", t_attention, {AT_SK, 3, 200, 4, 2, 32, 5, 32, 1, 1, 1}},
    {"m3g_attention_sk", t_attention, {AT_SK, 3, 40, 16, 1, 16, 16, 4, 1, 1, 1}},
    /* msa_attention.cu: sparse prefill, exact p and one pass */
    {"m3g_msa_attention_prefill", t_attention, {AT_MSA, 33, 100, 16, 1, 64, 4, 16, 1, 1}},
    {"m3g_msa_attention_prefill", t_attention, {AT_MSA, 13, 300, 16, 2, 128, 3, 64, 1, 0}},
    {"m3g_msa_attention_prefill", t_attention, {AT_MSA, 17, 40, 6, 2, 48, 2, 16, 1, 1}},
    {"m3g_msa_attention_prefill", t_attention, {AT_MSA, 9, 60, 4, 2, 32, 3, 16, 0, 0}},
    {"m3g_msa_attention_prefill_onepass", t_attention, {AT_MSA1, 33, 100, 16, 1, 64, 4, 16, 1, 1}},
    {"m3g_msa_attention_prefill_onepass", t_attention, {AT_MSA1, 13, 300, 16, 2, 128, 3, 64, 1, 1}},
    /* the released head and block shapes (the warpgroup kernel on the H200):
     * 16 and 6 heads per group, rows across block edges, a partial last
     * tile, NaN in every slot no row may see */
    {"m3g_msa_attention_prefill_onepass", t_attention, {AT_MSA1, 37, 600, 32, 2, 128, 6, 128, 1, 1, 1}},
    {"m3g_msa_attention_prefill_onepass", t_attention, {AT_MSA1, 300, 100, 12, 2, 128, 5, 128, 1, 1, 1}},
    {"m3g_msa_attention_prefill_onepass", t_attention, {AT_MSA1, 20, 1000, 64, 4, 128, 16, 128, 1, 1, 1}},
    {"m3g_msa_attention_prefill_onepass", t_attention, {AT_MSA1, 24, 3000, 32, 2, 128, 20, 128, 1, 1, 1}},
    {"m3g_msa_attention_prefill", t_attention, {AT_MSA, 37, 600, 32, 2, 128, 6, 128, 1, 1, 1}},
    /* msa.cu: the indexer */
    {"m3g_msa_block_scores", t_block_scores, {5, 77, 4, 128, 32, 1}},
    {"m3g_msa_block_scores", t_block_scores, {3, 20, 2, 24, 16, 0}},
    {"m3g_msa_block_scores", t_block_scores, {1, 999, 4, 64, 64, 1}},
    {"m3g_msa_select", t_select, {4, 300, 4, 16, 8, 2, 1, 0}},
    {"m3g_msa_select", t_select, {3, 500, 2, 32, 16, 1, 1, 1}},
    {"m3g_msa_select", t_select, {2, 20, 1, 16, 4, 4, 2, 1}},
    {"m3g_msa_indexer", t_indexer, {1, 1000, 4, 128, 32, 8, 1, 0}},
    {"m3g_msa_indexer", t_indexer, {3, 700, 4, 128, 64, 16, 1, 0}},
    {"m3g_msa_indexer", t_indexer, {2, 200, 3, 64, 16, 4, 0, 0}},
    {"m3g_msa_indexer", t_indexer, {1, 90, 1, 24, 8, 4, 1, 0}},
    {"m3g_msa_indexer_ex", t_indexer, {1, 1000, 4, 128, 32, 8, 1, 1}},
    {"m3g_msa_indexer_ex", t_indexer, {2, 2100, 4, 128, 128, 16, 1, 1}},
    {"m3g_msa_indexer_ex", t_indexer, {1, 1000, 4, 128, 32, 8, 1, 1, M3G_IDX_EXACT}},
    {"m3g_msa_indexer_ex", t_indexer, {2, 2100, 4, 128, 128, 16, 1, 1, M3G_IDX_EXACT}},
    /* released shapes: 128K and 300K keys (the exact form: 4 and 2 keys per
     * lane; the tensor-core form: 1), G 3 / 1; fp32 q: the tensor-core form's
     * multiply-then-add rows */
    {"m3g_msa_indexer_ex", t_indexer, {1, 131071, 4, 128, 128, 16, 1, 1}},
    {"m3g_msa_indexer_ex", t_indexer, {1, 131071, 4, 128, 128, 16, 1, 1, M3G_IDX_EXACT}},
    {"m3g_msa_indexer_ex", t_indexer, {1, 300000, 4, 128, 128, 16, 1, 1}},
    {"m3g_msa_indexer_ex", t_indexer, {1, 300000, 4, 128, 128, 16, 1, 1, M3G_IDX_EXACT}},
    {"m3g_msa_indexer_ex", t_indexer, {3, 5000, 3, 128, 64, 16, 1, 1}},
    {"m3g_msa_indexer_ex", t_indexer, {3, 5000, 3, 128, 64, 16, 1, 1, M3G_IDX_EXACT}},
    {"m3g_msa_indexer_ex", t_indexer, {2, 3000, 1, 128, 32, 8, 1, 1}},
    {"m3g_msa_indexer_ex", t_indexer, {2, 3000, 4, 128, 128, 16, 1, 1, 0, 1}},
    {"m3g_msa_indexer_ex", t_indexer, {2, 1500, 4, 128, 32, 16, 1, 0, M3G_IDX_FUSED}},
    /* moe.cu */
    {"m3g_router", t_router, {1, 256, 64, 4, 1}},
    {"m3g_router", t_router, {5, 200, 24, 3, 2}},
    {"m3g_router", t_router, {2, 64, 8, 8, 0}},
    {"m3g_swiglu", t_swiglu, {1000, 1}},
    {"m3g_swiglu", t_swiglu, {333, 0}},
    /* linear.cu */
    {"m3g_linear", t_linear, {1, 300, 1000, 0, 1, 0, 0}},
    {"m3g_linear", t_linear, {9, 64, 200, 0, 0, 0, 3}},
    {"m3g_linear", t_linear, {1, 512, 1024, 1, 1, 0, 0}},
    {"m3g_linear", t_linear, {5, 300, 264, 1, 1, 0, 5}},
    {"m3g_linear", t_linear, {8, 200, 128, 1, 1, 0, 0}},
    {"m3g_linear", t_linear, {1, 512, 6144, 1, 1, 0, 0}},
    {"m3g_linear", t_linear, {1, 2048, 4096, 1, 1, 0, 0}},
    {"m3g_linear", t_linear, {17, 96, 320, 1, 1, 0, 0}},
    {"m3g_linear", t_linear, {33, 256, 512, 1, 1, 1, 0}},
    {"m3g_linear_product", t_linear, {3, 96, 200, 1, 1, 0, 2, 1}},
    {"m3g_linear_product", t_linear, {20, 128, 256, 1, 1, 1, 0, 1}},
    {"m3g_linear_multi", t_linear_multi, {1, 512, 1, 256, 64, 96}},
    {"m3g_linear_multi", t_linear_multi, {1, 4096, 1, 1024, 128, 128}},
    {"m3g_linear_multi", t_linear_multi, {3, 256, 0, 40, 24, 8}},
    {"m3g_linear_multi", t_linear_multi, {12, 128, 1, 64, 32, 16}},
    {"m3g_linear_swiglu", t_linear_swiglu, {1, 300, 512, 1}},
    {"m3g_linear_swiglu", t_linear_swiglu, {2, 64, 128, 0}},
    {"m3g_linear_swiglu", t_linear_swiglu, {11, 96, 256, 1}},
    {"m3g_gemv_grouped", t_gemv_grouped, {1, 4, 16, 200, 256, 1, 0, 0}},
    {"m3g_gemv_grouped", t_gemv_grouped, {3, 2, 8, 64, 128, 1, 1, 0}},
    {"m3g_gemv_grouped", t_gemv_grouped, {2, 3, 6, 40, 64, 0, 1, 0}},
    {"m3g_gemv_grouped_swiglu", t_gemv_grouped, {1, 4, 16, 128, 256, 1, 0, 1}},
    {"m3g_gemv_grouped_swiglu", t_gemv_grouped, {2, 2, 5, 72, 128, 1, 1, 1}},
    /* vision.cu */
    {"m3g_layernorm", t_layernorm, {5, 1152, 1, 1}},
    {"m3g_layernorm", t_layernorm, {3, 77, 0, 0}},
    {"m3g_bias_act", t_bias_act, {4, 300, 1, 1, 1}},
    {"m3g_bias_act", t_bias_act, {3, 100, 0, 0, 0}},
    {"m3g_bias_act", t_bias_act, {2, 64, 1, 0, 0}},
    {"m3g_vision_rope", t_vision_rope, {5, 4, 80, 78, 1}},
    {"m3g_vision_rope", t_vision_rope, {3, 2, 64, 32, 0}},
    /* weight streaming (gpu/weight_stream.h) */
    {"m3g_wstream", t_wstream, {3, 256, 2}},
    {"m3g_wstream", t_wstream, {2, 64, 8}},
    {"m3g_wstream", t_wstream, {3, 64, 1}},
    /* conversions */
    {"m3g_to_bf16", t_to_bf16, {1001}},
    {"m3g_round", t_round, {777, 1}},
    {"m3g_round", t_round, {65, 0}},
};

static void free_case(tctx *c)
{
    for (int i = 0; i < c->ndev; i++)
        if (hipFree(c->dev[i]) != hipSuccess)
            fprintf(stderr, "test-ops: hipFree failed\n");
    for (int i = 0; i < c->nhost; i++)
        free(c->host[i]);
    c->ndev = c->nout = c->nhost = 0;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    int list = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--case") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--list"))
            list = 1;
        else {
            fprintf(stderr, "usage: test-ops [--case PREFIX] [--list]\n");
            return 2;
        }
    }
    tctx c;
    memset(&c, 0, sizeof c);
    if (hipStreamCreate(&c.st) != hipSuccess) {
        fprintf(stderr, "test-ops: no device (hipStreamCreate failed)\n");
        return 1;
    }
    c.blas = m3g_blas_new(c.st, (size_t)64 * 1024);
    const int n = (int)(sizeof CASES / sizeof CASES[0]);
    int pass = 0, fail = 0, skip = 0;
    printf("test-ops on %s: %d cases%s\n", M3_GPU_VENDOR, n, c.blas ? "" : " (no BLAS in this build)");
    for (int i = 0; i < n; i++) {
        const op_case *k = &CASES[i];
        if (only && strncmp(k->op, only, strlen(only)) != 0)
            continue;
        c.rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(i + 1) * 0x100000001b3ull;
        c.msg[0] = 0;
        c.fail = 0;
        if (list) {
            c.shape[0] = 0;
            printf("%-34s\n", k->op);
            continue;
        }
        k->run(&c, k);
        const char *v = c.fail < 0 ? "SKIP" : c.fail ? "FAIL" : "ok  ";
        printf("%s %-34s %s%s%s\n", v, k->op, c.shape, c.msg[0] ? ": " : "", c.msg);
        fflush(stdout);
        pass += c.fail == 0;
        fail += c.fail > 0;
        skip += c.fail < 0;
        free_case(&c);
    }
    m3g_blas_free(c.blas);
    if (hipStreamDestroy(c.st) != hipSuccess)
        fprintf(stderr, "test-ops: hipStreamDestroy failed\n");
    printf("test-ops: %d passed, %d failed, %d skipped\n", pass, fail, skip);
    return fail ? 1 : 0;
}
