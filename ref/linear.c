/* linear.c — y = W x with fp32 accumulation in a fixed summation order.
 *
 * Spec: M3-NUM-MODE-1 (checkpoint-dtype weights widened to fp32, fp32
 * accumulation), M3-NUM-MODE-2 (the fixed matvec summation order below),
 * M3-CACHE-1 (decode == prefill bit for bit, which this order makes true).
 *
 * Order, for every output element y[r]: eight fp32 partial sums p[l] take
 * the products W[r,c]*x[c] with c = l (mod 8) in ascending c; then
 *   y[r] = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)).
 * m3_matvec and m3_matmul both use it, so a row gives the same bits
 * whichever caller (prefill, decode, chunk) computes it. Rounding to bf16
 * (M3-NUM-BF16-2) is the caller's job.
 *
 * Design (speed without changing a single operation of that order):
 * - The eight partial sums of one output are eight independent lanes: lane l
 *   takes one product per group of eight columns. The kernels below keep the
 *   lanes of several outputs in plain float arrays with constant bounds,
 *   which the compiler maps to vector registers (no reassociation is needed,
 *   so -O3 vectorises them without -ffast-math; -ffp-contract=off keeps
 *   every product rounded before its add).
 * - One input row (decode, m3_matvec): four weight rows at a time, bf16 or
 *   f32 weights widened in the inner loop; the weights stream once.
 * - Many input rows (prefill, m3_matmul with n >= 4): tiles of NI input rows
 *   x RB weight rows x KC columns. A weight tile is widened to fp32 once and
 *   used by all NI input rows; each 4 x 4 block of outputs keeps its 4*4*8
 *   partial sums in registers over the KC columns, and in the tile's partial
 *   sum array between column tiles.
 */
#include "linear.h"

#include <stdint.h>
#include <string.h>

/* Columns per tile (a multiple of 8). */
#define KC 256
/* Input rows per tile (a multiple of RI). */
#define NI 60
/* Weight rows per tile (a multiple of RR). */
#define RB 32
/* Register block: input rows x weight rows of one micro-kernel call. */
#define RI 6
#define RR 4

/* dst [len] = W[r, c0 .. c0+len) widened to fp32. */
static void load_chunk(float *dst, const m3_mat *W, int r, int c0, int len)
{
    size_t base = (size_t)r * (size_t)W->cols + (size_t)c0;
    if (W->dtype == M3_BF16) {
        const uint16_t *s = (const uint16_t *)W->data + base;
        for (int i = 0; i < len; i++)
            dst[i] = m3_bf16_to_f32(s[i]);
    } else if (W->dtype == M3_F32) {
        memcpy(dst, (const float *)W->data + base, sizeof(float) * (size_t)len);
    } else if (W->dtype == M3_F16) {
        const uint16_t *s = (const uint16_t *)W->data + base;
        for (int i = 0; i < len; i++)
            dst[i] = m3_f16_to_f32(s[i]);
    } else {
        for (int i = 0; i < len; i++)
            dst[i] = m3_load_f32(W->data, W->dtype, base + (size_t)i);
    }
}

static float combine(const float p[8])
{
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/* ------------------------------------------------------------------------ */
/* one input row                                                            */

/* p[j][l] += W[r0+j, c] * x[c], c = l (mod 8), c < full (a multiple of 8),
 * for j < RR; bf16 weights w with row stride cols. */
static void rows_bf16(float p[RR][8], const uint16_t *w, size_t cols, const float *x, int full)
{
    float a[RR][8];
    memcpy(a, p, sizeof a);
    for (int c = 0; c < full; c += 8)
        for (int j = 0; j < RR; j++)
            for (int l = 0; l < 8; l++)
                a[j][l] += m3_bf16_to_f32(w[(size_t)j * cols + (size_t)(c + l)]) * x[c + l];
    memcpy(p, a, sizeof a);
}

/* The same for f32 weights. */
static void rows_f32(float p[RR][8], const float *w, size_t cols, const float *x, int full)
{
    float a[RR][8];
    memcpy(a, p, sizeof a);
    for (int c = 0; c < full; c += 8)
        for (int j = 0; j < RR; j++)
            for (int l = 0; l < 8; l++)
                a[j][l] += w[(size_t)j * cols + (size_t)(c + l)] * x[c + l];
    memcpy(p, a, sizeof a);
}

/* p [8] += the products of weight row r and x, other dtypes (and the tail
 * columns full.. of every dtype), through load_chunk. */
static void row_any(float p[8], const m3_mat *W, int r, const float *x, int c_from)
{
    float wbuf[KC];
    for (int c0 = c_from; c0 < W->cols; c0 += KC) {
        int len = W->cols - c0 < KC ? W->cols - c0 : KC;
        load_chunk(wbuf, W, r, c0, len);
        for (int c = 0; c < len; c++)
            p[(c0 + c) & 7] += wbuf[c] * x[c0 + c];
    }
}

/* y [rows] = W x for one input row x [cols]. */
static void matvec_one(float *y, const m3_mat *W, const float *x)
{
    const int rows = W->rows, cols = W->cols;
    const int fused = W->dtype == M3_BF16 || W->dtype == M3_F32;
    const int full = fused ? cols & ~7 : 0; /* columns the fused kernels take */
    float p[RR][8];
    int r = 0;
    for (; fused && r + RR <= rows; r += RR) {
        memset(p, 0, sizeof p);
        size_t off = (size_t)r * (size_t)cols;
        if (W->dtype == M3_BF16)
            rows_bf16(p, (const uint16_t *)W->data + off, (size_t)cols, x, full);
        else
            rows_f32(p, (const float *)W->data + off, (size_t)cols, x, full);
        for (int j = 0; j < RR; j++) {
            row_any(p[j], W, r + j, x, full);
            y[r + j] = combine(p[j]);
        }
    }
    for (; r < rows; r++) { /* the last rows % RR, or every row of another dtype */
        memset(p[0], 0, sizeof p[0]);
        row_any(p[0], W, r, x, 0);
        y[r] = combine(p[0]);
    }
}

/* ------------------------------------------------------------------------ */
/* many input rows                                                          */

/* The partial sums P[i][j][l] (row stride ps floats, 8 per weight row) of a
 * RI x RR output block: += w[j][c] * x[i][c] for c < len (a multiple of 8).
 * x rows have stride xs, w rows stride KC (a widened tile). With GNU C vector
 * extensions one lanes8 value is the eight partial sums of one output (lane l
 * = column l mod 8), so a[i][j] += w * x is exactly eight of the order's
 * steps; elsewhere the same loop runs lane by lane. */
#if defined(__GNUC__)
typedef float lanes8 __attribute__((vector_size(32)));

static inline void micro(float *P, int ps, const float *x, size_t xs, const float *w, int len,
                         const int ri)
{
    lanes8 a[RI][RR], wv[RR], xv;
    for (int i = 0; i < ri; i++)
        for (int j = 0; j < RR; j++)
            memcpy(&a[i][j], P + (size_t)i * (size_t)ps + (size_t)j * 8, sizeof a[i][j]);
    for (int c = 0; c < len; c += 8) {
        for (int j = 0; j < RR; j++)
            memcpy(&wv[j], w + j * KC + c, sizeof wv[j]);
        for (int i = 0; i < ri; i++) {
            memcpy(&xv, x + (size_t)i * xs + (size_t)c, sizeof xv);
            for (int j = 0; j < RR; j++)
                a[i][j] += wv[j] * xv;
        }
    }
    for (int i = 0; i < ri; i++)
        for (int j = 0; j < RR; j++)
            memcpy(P + (size_t)i * (size_t)ps + (size_t)j * 8, &a[i][j], sizeof a[i][j]);
}
#else
static inline void micro(float *P, int ps, const float *x, size_t xs, const float *w, int len,
                         const int ri)
{
    for (int c = 0; c < len; c += 8)
        for (int i = 0; i < ri; i++)
            for (int j = 0; j < RR; j++)
                for (int l = 0; l < 8; l++)
                    P[(size_t)i * (size_t)ps + (size_t)j * 8 + (size_t)l] +=
                        w[j * KC + c + l] * x[(size_t)i * xs + (size_t)(c + l)];
}
#endif

/* micro for ri = 1 .. RI input rows, each count its own compiled copy. */
static void micro_rows(float *P, int ps, const float *x, size_t xs, const float *w, int len,
                       int ri)
{
    switch (ri) {
    case 6: micro(P, ps, x, xs, w, len, 6); break;
    case 5: micro(P, ps, x, xs, w, len, 5); break;
    case 4: micro(P, ps, x, xs, w, len, 4); break;
    case 3: micro(P, ps, x, xs, w, len, 3); break;
    case 2: micro(P, ps, x, xs, w, len, 2); break;
    default: micro(P, ps, x, xs, w, len, 1); break;
    }
}

/* The same for an edge block of ni <= RI input rows and nj <= RR weight rows,
 * and for tail columns: c runs from c_from to len (any len). */
static void micro_edge(float *P, int ps, const float *x, size_t xs, const float *w, int c_from,
                       int len, int ni, int nj)
{
    for (int i = 0; i < ni; i++)
        for (int j = 0; j < nj; j++) {
            float *p = P + (size_t)i * (size_t)ps + (size_t)j * 8;
            for (int c = c_from; c < len; c++)
                p[c & 7] += w[j * KC + c] * x[(size_t)i * xs + (size_t)c];
        }
}

/* Y [n, rows] = X [n, cols] W^T, n >= 1, tiled. */
static void matmul_tiled(float *Y, const m3_mat *W, const float *X, int n)
{
    static const int ps = RB * 8; /* floats per input row in P */
    float wt[RB * KC];            /* widened weight tile [RB][KC] */
    float P[NI * RB * 8];         /* partial sums [NI][RB][8] */
    const int rows = W->rows, cols = W->cols;
    const size_t xs = (size_t)cols;

    for (int i0 = 0; i0 < n; i0 += NI) {
        const int ni = n - i0 < NI ? n - i0 : NI;
        for (int r0 = 0; r0 < rows; r0 += RB) {
            const int rb = rows - r0 < RB ? rows - r0 : RB;
            memset(P, 0, sizeof P);
            for (int c0 = 0; c0 < cols; c0 += KC) {
                const int len = cols - c0 < KC ? cols - c0 : KC;
                const int full = len & ~7;
                for (int j = 0; j < rb; j++)
                    load_chunk(wt + (size_t)j * KC, W, r0 + j, c0, len);
                for (int i = 0; i < ni; i += RI) {
                    const int bi = ni - i < RI ? ni - i : RI;
                    const float *x = X + (size_t)(i0 + i) * xs + (size_t)c0;
                    for (int j = 0; j < rb; j += RR) {
                        const int bj = rb - j < RR ? rb - j : RR;
                        float *p = P + (size_t)i * ps + (size_t)j * 8;
                        const float *w = wt + (size_t)j * KC;
                        if (bj == RR)
                            micro_rows(p, ps, x, xs, w, full, bi);
                        else
                            micro_edge(p, ps, x, xs, w, 0, full, bi, bj);
                        if (full < len) /* only in the last column tile */
                            micro_edge(p, ps, x, xs, w, full, len, bi, bj);
                    }
                }
            }
            for (int i = 0; i < ni; i++)
                for (int j = 0; j < rb; j++)
                    Y[(size_t)(i0 + i) * (size_t)rows + (size_t)(r0 + j)] =
                        combine(P + (size_t)i * ps + (size_t)j * 8);
        }
    }
}

void m3_matvec(float *y, const m3_mat *W, const float *x)
{
    matvec_one(y, W, x);
}

/* Y [n, rows], X [n, cols]; the per-element order is that of the header
 * comment, independent of n and of the path. */
void m3_matmul(float *Y, const m3_mat *W, const float *X, int n)
{
    if (n >= 2) {
        matmul_tiled(Y, W, X, n);
        return;
    }
    for (int i = 0; i < n; i++)
        matvec_one(Y + (size_t)i * (size_t)W->rows, W, X + (size_t)i * (size_t)W->cols);
}

/* Baseline: one accumulator, ascending c. Not bit-identical to m3_matvec
 * (different summation order); used only to measure the speed-up. */
void m3_matvec_naive(float *y, const m3_mat *W, const float *x)
{
    for (int r = 0; r < W->rows; r++) {
        float acc = 0.0f;
        for (int c = 0; c < W->cols; c++)
            acc += m3_mat_at(W, r, c) * x[c];
        y[r] = acc;
    }
}
