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
 * - Many input rows (prefill, m3_matmul with n >= 2): the blocking makes
 *   every widened weight serve many input rows, and every value loaded into
 *   a register serve several products.
 *   - The n rows are split into tiles of at most NI = 132 rows (nearly equal
 *     sizes; the ~81 rows routed to one expert at the released shapes are one
 *     tile). The input tile, 3 MiB at 6144 columns, stays in the L3 cache.
 *   - For each tile, a panel of PR = 8 consecutive weight rows is widened to
 *     fp32 over all the columns into a scratch that the call allocates and
 *     frees (8 * cols floats, 192 KiB at 6144 columns, which stays in the L2
 *     cache), and every block of BI = 6 input rows of the tile is multiplied
 *     with it. So each weight is read from memory and widened once per tile,
 *     i.e. once per call for n <= 132.
 *   - A block keeps the 8 partial sums of each of its 6 x 8 outputs in
 *     registers from the first column to the last, then combines them (no
 *     partial sums in memory, no column tiles). With 16-lane vectors one
 *     vector holds the partial sums of two outputs (one input row, two
 *     weight rows), so the block is 24 vectors, and one step of 8 columns is
 *     4 panel loads, 6 input loads (8 values duplicated into both halves),
 *     24 multiplies and 24 adds; each lane still takes its products one by
 *     one in ascending column order.
 *   - Without 16-lane vectors (no AVX-512) the panel has PR = 4 rows and a
 *     vector holds one output: 6 x 4 blocks of 8-lane vectors.
 *   - Should the scratch not be allocated, the rows go one by one through
 *     the one-row path, which gives the same bits.
 */
#include "linear.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One input row: weight rows per step, and columns per widened chunk of
 * the generic path (a multiple of 8). */
#define RR 4
#define KC 256
/* Many input rows: weight rows per panel (8 where 16-lane vectors exist,
 * two outputs per vector; else 4), input rows per register block, and input
 * rows per tile at most (a multiple of BI); see the design above. */
#if defined(__AVX512F__)
#define PR 8
#else
#define PR 4
#endif
#define BI 6
#define NI 132

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

/* The weight panel of m3_matmul: PR weight rows widened to fp32 over all
 * columns, in groups of 8 columns: panel[g][j][l] = W[r0 + j, 8g + l], so
 * that the 8 weights of one row for one group (the 8 lanes of its partial
 * sums) are 8 consecutive floats, and those of all PR rows 8 * PR. Entry
 * (j, c) is at panel_at(j, c); a short last group holds the tail columns. */
static size_t panel_at(int j, int c)
{
    return (size_t)(c & ~7) * PR + (size_t)j * 8 + (size_t)(c & 7);
}

/* Weight row r (panel row j) widened into the panel. */
static void widen_row(float *panel, const m3_mat *W, int r, int j)
{
    const int cols = W->cols, full = cols & ~7;
    const size_t base = (size_t)r * (size_t)cols;
    float *d = panel + (size_t)j * 8;
    int c = 0;
    if (W->dtype == M3_BF16) {
        const uint16_t *s = (const uint16_t *)W->data + base;
        for (; c < full; c += 8)
            for (int l = 0; l < 8; l++)
                d[(size_t)c * PR + (size_t)l] = m3_bf16_to_f32(s[c + l]);
    } else if (W->dtype == M3_F32) {
        const float *s = (const float *)W->data + base;
        for (; c < full; c += 8)
            memcpy(d + (size_t)c * PR, s + c, 8 * sizeof *s);
    }
    for (; c < cols; c++) /* the tail columns, and every column of another dtype */
        panel[panel_at(j, c)] = m3_load_f32(W->data, W->dtype, base + (size_t)c);
}

/* acc[i][j][l] = the partial sum l of row i of x (stride xs) times panel
 * row j over the first `full` columns (a multiple of 8), for i < ri <= BI and
 * every j < PR: the register block. Its BI * PR * 8 partial sums stay in
 * registers from the first column to the last. */
#if defined(__GNUC__) && PR == 8
/* One 16-lane vector holds the eight partial sums of two outputs: input row
 * i with panel rows 2q and 2q + 1 (16 consecutive panel floats), the 8
 * columns of x duplicated into both halves. a[i][q] += w[q] * xv is then
 * exactly sixteen of the order's steps, each in its own lane. */
typedef float lanes16 __attribute__((vector_size(64)));

static inline void block_sums(float acc[BI][PR][8], const float *x, size_t xs, const float *panel,
                              int full, const int ri)
{
    lanes16 a[BI][PR / 2], w[PR / 2], xv;
    for (int i = 0; i < ri; i++)
        for (int q = 0; q < PR / 2; q++)
            a[i][q] = (lanes16){0};
    for (int c = 0; c < full; c += 8) {
        const float *p = panel + (size_t)c * PR;
        for (int q = 0; q < PR / 2; q++)
            memcpy(&w[q], p + 16 * q, sizeof w[q]);
        for (int i = 0; i < ri; i++) {
            const float *v = x + (size_t)i * xs + (size_t)c;
            xv = (lanes16){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7],
                           v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
            for (int q = 0; q < PR / 2; q++)
                a[i][q] += w[q] * xv;
        }
    }
    for (int i = 0; i < ri; i++)
        memcpy(acc[i], a[i], sizeof acc[i]); /* acc[i][2q + h][l] = a[i][q][8h + l] */
}
#elif defined(__GNUC__)
/* One 8-lane vector holds the eight partial sums of one output. */
typedef float lanes8 __attribute__((vector_size(32)));

static inline void block_sums(float acc[BI][PR][8], const float *x, size_t xs, const float *panel,
                              int full, const int ri)
{
    lanes8 a[BI][PR], w[PR], xv;
    for (int i = 0; i < ri; i++)
        for (int j = 0; j < PR; j++)
            a[i][j] = (lanes8){0};
    for (int c = 0; c < full; c += 8) {
        const float *p = panel + (size_t)c * PR;
        for (int j = 0; j < PR; j++)
            memcpy(&w[j], p + 8 * j, sizeof w[j]);
        for (int i = 0; i < ri; i++) {
            memcpy(&xv, x + (size_t)i * xs + (size_t)c, sizeof xv);
            for (int j = 0; j < PR; j++)
                a[i][j] += w[j] * xv;
        }
    }
    for (int i = 0; i < ri; i++)
        memcpy(acc[i], a[i], sizeof acc[i]);
}
#else
/* Plain loops, lane by lane: the same steps in the same order. */
static inline void block_sums(float acc[BI][PR][8], const float *x, size_t xs, const float *panel,
                              int full, const int ri)
{
    memset(acc, 0, sizeof(float) * BI * PR * 8);
    for (int c = 0; c < full; c += 8)
        for (int i = 0; i < ri; i++)
            for (int j = 0; j < PR; j++)
                for (int l = 0; l < 8; l++)
                    acc[i][j][l] += panel[(size_t)c * PR + (size_t)j * 8 + (size_t)l] *
                                    x[(size_t)i * xs + (size_t)(c + l)];
}
#endif

/* Y[i * ys + j] = row i of x times panel row j for i < ri, j < nj <= PR:
 * block_sums, then the tail columns (cols % 8, the highest) and the combine. */
static inline void block(float *Y, size_t ys, const float *x, size_t xs, const float *panel,
                         int cols, const int ri, int nj)
{
    float acc[BI][PR][8];
    const int full = cols & ~7;
    block_sums(acc, x, xs, panel, full, ri);
    for (int i = 0; i < ri; i++)
        for (int j = 0; j < nj; j++) {
            for (int c = full; c < cols; c++)
                acc[i][j][c & 7] += panel[panel_at(j, c)] * x[(size_t)i * xs + (size_t)c];
            Y[(size_t)i * ys + (size_t)j] = combine(acc[i][j]);
        }
}

/* block for ri = 1 .. BI input rows, each count its own compiled copy. */
static void block_rows(float *Y, size_t ys, const float *x, size_t xs, const float *panel,
                       int cols, int ri, int nj)
{
    switch (ri) {
    case 6: block(Y, ys, x, xs, panel, cols, 6, nj); break;
    case 5: block(Y, ys, x, xs, panel, cols, 5, nj); break;
    case 4: block(Y, ys, x, xs, panel, cols, 4, nj); break;
    case 3: block(Y, ys, x, xs, panel, cols, 3, nj); break;
    case 2: block(Y, ys, x, xs, panel, cols, 2, nj); break;
    default: block(Y, ys, x, xs, panel, cols, 1, nj); break;
    }
}

/* Y [n, rows] = X [n, cols] W^T, n >= 2, with a panel scratch of
 * PR * (cols rounded up to 8) floats. The n input rows are split into tiles
 * of at most NI rows (nearly equal sizes); within a tile each panel of PR
 * weight rows is widened once and then used by every block of BI input rows. */
static void matmul_panels(float *Y, const m3_mat *W, const float *X, int n, float *panel)
{
    const int rows = W->rows, cols = W->cols;
    const size_t xs = (size_t)cols, ys = (size_t)rows;
    const int ntiles = (n + NI - 1) / NI;
    int step = (n + ntiles - 1) / ntiles;
    step = (step + BI - 1) / BI * BI; /* <= NI */
    for (int i0 = 0; i0 < n; i0 += step) {
        const int ni = n - i0 < step ? n - i0 : step;
        for (int r0 = 0; r0 < rows; r0 += PR) {
            const int nj = rows - r0 < PR ? rows - r0 : PR;
            if (nj < PR) /* the rows past the matrix: zeros, computed and dropped */
                memset(panel, 0, sizeof(float) * PR * (size_t)((cols + 7) & ~7));
            for (int j = 0; j < nj; j++)
                widen_row(panel, W, r0 + j, j);
            for (int i = 0; i < ni; i += BI) {
                const int ri = ni - i < BI ? ni - i : BI;
                block_rows(Y + (size_t)(i0 + i) * ys + (size_t)r0, ys, X + (size_t)(i0 + i) * xs,
                           xs, panel, cols, ri, nj);
            }
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
    float *panel = n >= 2 ? malloc(sizeof(float) * PR * (size_t)((W->cols + 7) & ~7)) : NULL;
    if (panel) {
        matmul_panels(Y, W, X, n, panel);
        free(panel);
        return;
    }
    for (int i = 0; i < n; i++) /* one row, or no memory for the panel: the same bits */
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
