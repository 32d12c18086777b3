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
 */
#include "linear.h"

#include <stdint.h>

/* Row chunk converted to fp32 at a time (a multiple of 8). */
#define M3_LIN_CHUNK 512
/* Input rows of a matmul that share one converted weight chunk. */
#define M3_LIN_BATCH 8

/* dst [len] = W[r, c0 .. c0+len) widened to fp32. */
static void load_chunk(float *dst, const m3_mat *W, int r, int c0, int len)
{
    size_t base = (size_t)r * (size_t)W->cols + (size_t)c0;
    if (W->dtype == M3_BF16) {
        const uint16_t *s = (const uint16_t *)W->data + base;
        for (int i = 0; i < len; i++)
            dst[i] = m3_bf16_to_f32(s[i]);
    } else if (W->dtype == M3_F32) {
        const float *s = (const float *)W->data + base;
        for (int i = 0; i < len; i++)
            dst[i] = s[i];
    } else if (W->dtype == M3_F16) {
        const uint16_t *s = (const uint16_t *)W->data + base;
        for (int i = 0; i < len; i++)
            dst[i] = m3_f16_to_f32(s[i]);
    } else {
        for (int i = 0; i < len; i++)
            dst[i] = m3_load_f32(W->data, W->dtype, base + (size_t)i);
    }
}

/* p[l] += w[c] * x[c] for c < len with c = l (mod 8), ascending c.
 * w, x [len]; the chunk starts at a column that is a multiple of 8. */
static void dot_partials(float p[8], const float *w, const float *x, int len)
{
    float a0 = p[0], a1 = p[1], a2 = p[2], a3 = p[3];
    float a4 = p[4], a5 = p[5], a6 = p[6], a7 = p[7];
    int c = 0;
    for (; c + 8 <= len; c += 8) {
        a0 += w[c + 0] * x[c + 0];
        a1 += w[c + 1] * x[c + 1];
        a2 += w[c + 2] * x[c + 2];
        a3 += w[c + 3] * x[c + 3];
        a4 += w[c + 4] * x[c + 4];
        a5 += w[c + 5] * x[c + 5];
        a6 += w[c + 6] * x[c + 6];
        a7 += w[c + 7] * x[c + 7];
    }
    p[0] = a0; p[1] = a1; p[2] = a2; p[3] = a3;
    p[4] = a4; p[5] = a5; p[6] = a6; p[7] = a7;
    for (; c < len; c++)
        p[c & 7] += w[c] * x[c];
}

static float combine(const float p[8])
{
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

void m3_matvec(float *y, const m3_mat *W, const float *x)
{
    m3_matmul(y, W, x, 1);
}

/* Y [n, rows], X [n, cols]. Each weight chunk is converted once and used by
 * up to M3_LIN_BATCH input rows; the per-element order is that of the
 * header comment, independent of n. */
void m3_matmul(float *Y, const m3_mat *W, const float *X, int n)
{
    float wbuf[M3_LIN_CHUNK];
    float p[M3_LIN_BATCH][8];
    const int rows = W->rows, cols = W->cols;

    for (int i0 = 0; i0 < n; i0 += M3_LIN_BATCH) {
        int nb = n - i0 < M3_LIN_BATCH ? n - i0 : M3_LIN_BATCH;
        for (int r = 0; r < rows; r++) {
            for (int i = 0; i < nb; i++)
                for (int l = 0; l < 8; l++)
                    p[i][l] = 0.0f;
            for (int c0 = 0; c0 < cols; c0 += M3_LIN_CHUNK) {
                int len = cols - c0 < M3_LIN_CHUNK ? cols - c0 : M3_LIN_CHUNK;
                load_chunk(wbuf, W, r, c0, len);
                for (int i = 0; i < nb; i++)
                    dot_partials(p[i], wbuf, X + (size_t)(i0 + i) * (size_t)cols + c0, len);
            }
            for (int i = 0; i < nb; i++)
                Y[(size_t)(i0 + i) * (size_t)rows + (size_t)r] = combine(p[i]);
        }
    }
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
