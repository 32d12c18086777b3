/* linear.cu — every projection: bf16/fp32 GEMV for decode (and small T),
 * fused multi-output / SwiGLU GEMVs over concatenated weights, grouped
 * expert GEMV for MoE, GEMM through cuBLASLt / hipBLAS / cuBLAS with a
 * hand-written tiled fallback for prefill.
 *
 * Must match: ref/linear.c m3_matvec / m3_matmul followed by the mode
 * rounding of ref/model.c linear() (M3-NUM-BF16-2 item 3); SwiGLU epilogue:
 * ref/mlp.c m3_swiglu_oai (M3-MLP-SWIGLU-1); experts: ref/moe.c m3_moe
 * (M3-MOE-EXPERT-1, M3-MOE-SHARED-1). Spec: M3-NUM-MODE-1, M3-NUM-MODE-2.
 *
 * Design (m3g_linear / m3g_linear_multi / m3g_linear_swiglu):
 *  - fp32 mode, and bf16 where no fast path applies: k_gemv_exact, the
 *    reference's 8-partial order, no FMA: bitwise m3_matmul for any T;
 *  - bf16 weights, cols % 8 == 0, T <= 8: split-K streaming GEMVs with fmaf
 *    accumulation and programmatic dependent launch. At T = 1 gemv_pick
 *    chooses k_gemv_pers for grids of two or more waves below the LM head
 *    (persistent blocks, 4 per SM or 3 per SM "deep", equal tiles per
 *    block, the token's X copied once per block into shared memory after
 *    the grid-dependency wait), k_gemv_bal for wide one-wave grids and
 *    k_gemv_bf16 otherwise (the LM head); all give the same sums;
 *  - bf16, T > 8: vendor BLAS (bf16 in, fp32 accumulate) then the mode
 *    rounding; without BLAS the 64x64 tiled k_gemm.
 *
 * Known differences: the bf16 fast paths accumulate with fmaf in split-K
 * order (within the bf16 profile, not bitwise to ref); fp32 mode is
 * bitwise. Designs tried and their timings: docs/designs-tried.md.
 */
#include <stdlib.h>
#include <string.h>
#include "common.cuh"
#include "kernels.h"

#define GEMV_ROWS 8 /* warps per 256-thread block */

/* Register cap for t threads and m resident blocks per SM (NVIDIA). */
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
#define M3_BOUNDS(t, m) __launch_bounds__(t, m)
#else
#define M3_BOUNDS(t, m)
#endif

#if defined(M3_EMU)
#define M3_UNROLL
#else
#define M3_UNROLL _Pragma("unroll")
#endif

/* ---- output description shared by the GEMV kernels ----------------------- */
typedef struct gemv_out {
    float *y[M3G_MAX_SEG];
    int ld[M3G_MAX_SEG];
    int end[M3G_MAX_SEG]; /* cumulative row end of each segment */
    int nseg;
    int half; /* > 0: SwiGLU epilogue; rows [0, half) gate, [half, 2 half) up → y[0] */
    float alpha, limit, beta;
} gemv_out;

/* Row r, token t of the concatenated output → its segment. */
__device__ __forceinline__ void out_store(const gemv_out &o, int r, int t, float v)
{
    float *y = o.y[0];
    int ld = o.ld[0], r0 = 0;
    M3_UNROLL
    for (int s = 1; s < M3G_MAX_SEG; s++) /* constant indices: no local copy of o */
        if (s < o.nseg && r >= o.end[s - 1]) {
            y = o.y[s];
            ld = o.ld[s];
            r0 = o.end[s - 1];
        }
    y[(size_t)t * ld + (r - r0)] = v;
}

/* SwiGLU-OAI of rounded gate/up, rounded per mode (= moe.cu k_swiglu). */
__device__ __forceinline__ float swiglu1(float gv, float uv, const gemv_out &o, int mode)
{
    const float g = gv > o.limit ? o.limit : gv;
    const float u = uv > o.limit ? o.limit : (uv < -o.limit ? -o.limit : uv);
    const float sig = 1.0f / (1.0f + expf(-(o.alpha * g)));
    return m3d_round((u + o.beta) * (g * sig), mode);
}

/* ---- exact kernel (reference summation order) ------------------------------ */
#define EX_NT 8 /* tokens per block (blockIdx.y tiles T) */

/* grid (ceil(units / 32) [or half / 16 with SwiGLU], ceil(T / 8)), block 256.
 * Warp = 4 rows (or 2 gate/up pairs) x 8 partial lanes. */
__global__ void k_gemv_exact(gemv_out o, const float *__restrict__ X, const void *__restrict__ W,
                             int dtype, int rows, int cols, int T, int mode)
{
    const int lane = threadIdx.x & 31, sub = lane >> 3, l = lane & 7;
    const int gw = blockIdx.x * GEMV_ROWS + (threadIdx.x >> 5);
    const int t0 = blockIdx.y * EX_NT;
    const int nt = T - t0 < EX_NT ? T - t0 : EX_NT;
    int r, j = 0;
    bool ok;
    if (o.half > 0) {
        j = gw * 2 + (sub & 1);
        ok = j < o.half;
        r = ok ? (sub < 2 ? j : o.half + j) : 0;
    } else {
        r = gw * 4 + sub;
        ok = r < rows;
        if (!ok)
            r = rows - 1;
    }
    float p[EX_NT];
    for (int n = 0; n < EX_NT; n++)
        p[n] = 0.0f;
    const float *x0 = X + (size_t)t0 * cols;
    const size_t wb = (size_t)r * (size_t)cols;
    for (int c = l; c < cols; c += 8) {
        const float wv = m3d_load(W, dtype, wb + c);
        for (int n = 0; n < EX_NT; n++)
            if (n < nt)
                p[n] += wv * x0[(size_t)n * cols + c];
    }
    for (int n = 0; n < EX_NT; n++) {
        float s = p[n];
        s = s + m3_shfl_xor(s, 1); /* l even: p_l + p_(l+1) */
        s = s + m3_shfl_xor(s, 2); /* l 0, 4: (p0+p1)+(p2+p3), (p4+p5)+(p6+p7) */
        s = s + m3_shfl_xor(s, 4); /* l 0: the reference combine */
        const float up = m3_shfl(s, (lane + 16) & 31);
        if (l == 0 && ok && n < nt) {
            if (o.half > 0) {
                if (sub < 2)
                    o.y[0][(size_t)(t0 + n) * o.ld[0] + j] =
                        swiglu1(m3d_round(s, mode), m3d_round(up, mode), o, mode);
            } else {
                out_store(o, r, t0 + n, m3d_round(s, mode));
            }
        }
    }
}

/* ---- streaming bf16 kernel (bf16 mode) ------------------------------------ */

__device__ __forceinline__ float dot8(const uint4 p, const float4 a, const float4 b, float acc)
{
    acc = fmaf(__uint_as_float(p.x << 16), a.x, acc);
    acc = fmaf(__uint_as_float(p.x & 0xffff0000u), a.y, acc);
    acc = fmaf(__uint_as_float(p.y << 16), a.z, acc);
    acc = fmaf(__uint_as_float(p.y & 0xffff0000u), a.w, acc);
    acc = fmaf(__uint_as_float(p.z << 16), b.x, acc);
    acc = fmaf(__uint_as_float(p.z & 0xffff0000u), b.y, acc);
    acc = fmaf(__uint_as_float(p.w << 16), b.z, acc);
    acc = fmaf(__uint_as_float(p.w & 0xffff0000u), b.w, acc);
    return acc;
}

/* Programmatic dependent launch (NVIDIA sm_90, CUDA-only): the kernel lets
 * the next launch start once all its blocks run, and streams its first
 * weight chunk before waiting for the previous kernel (weights never depend
 * on it; X and the outputs are touched only after the wait). No-ops
 * elsewhere and when launched without the attribute. */
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
#define M3_PDL 1
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
#else
#define M3_PDL 0
__device__ __forceinline__ void pdl_trigger() {}
__device__ __forceinline__ void pdl_wait() {}
#endif

/* Bulk-copy staging (NVIDIA sm_90, CUDA-only; M3_BULK 0 elsewhere, where
 * the launchers refuse the staged variants): bulk_stage, called by one
 * thread, initialises the mbarrier *bar for one arrival, announces `bytes`
 * of transfer and has the copy engine move them from global src to shared
 * dst (both 16-byte aligned, bytes a multiple of 16); bulk_wait spins until
 * the barrier's phase `parity` completes (the bytes have landed and are
 * visible to the waiting thread). */
#if M3_PDL
#define M3_BULK 1
__device__ __forceinline__ void bulk_stage(void *dst, const void *src, uint32_t bytes,
                                           uint64_t *bar)
{
    const uint32_t b = (uint32_t)__cvta_generic_to_shared(bar);
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1], %2, [%3];" ::"r"(d),
                 "l"(src), "r"(bytes), "r"(b)
                 : "memory");
}
__device__ __forceinline__ void bulk_wait(uint64_t *bar, uint32_t parity)
{
    const uint32_t b = (uint32_t)__cvta_generic_to_shared(bar);
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(b), "r"(parity)
                     : "memory");
}
#else
#define M3_BULK 0
#endif

/* Diagnostic hook (not in the product build): a tracing harness that
 * includes this file defines M3_GEMV_STAMP(k, w) to record %globaltimer
 * for event k of this block (w: the launch's weight pointer). Events: 0
 * block start, 1 after the grid-dependency wait, 2 first tile done (the
 * ceiling: its loads consumed), 3 block end. Used by k_gemv_pers and
 * k_stream_ceiling; a no-op here (the PTX is the same without it). */
#ifndef M3_GEMV_STAMP
#define M3_GEMV_STAMP(k, w) ((void)0)
#endif

/* Slot gslot of a streaming GEMV: its weight row r (clamped to a valid row
 * when the slot is past the end), its SwiGLU pair j, and whether it exists.
 * In SwiGLU mode slot 2j is gate row j and slot 2j+1 up row j. */
__device__ __forceinline__ void slot_row(const gemv_out &o, int gslot, int rows, int &r, int &j,
                                         bool &ok)
{
    j = 0;
    if (o.half > 0) {
        j = gslot >> 1;
        ok = j < o.half;
        r = ok ? ((gslot & 1) ? o.half + j : j) : 0;
    } else {
        r = gslot;
        ok = r < rows;
        if (!ok)
            r = rows - 1;
    }
}

/* The end of one block's slots (acc: this warp's sums, already reduced over
 * the warp): K slices meet in red in ascending order, gate meets up, then
 * the rounding and the store. Every thread of the block calls it (one
 * __syncthreads, none when ks_n == 1 without SwiGLU). */
template <int NT>
__device__ __forceinline__ void gemv_finish(const gemv_out &o, float (*red)[NT],
                                            const float (&acc)[NT], int w, int lane, int slot,
                                            int ks, int ks_n, int gslot, int r, int j, bool ok,
                                            int mode)
{
    if (ks_n == 1 && o.half == 0) { /* block-uniform */
        if (lane == 0 && ok)
            for (int n = 0; n < NT; n++)
                out_store(o, r, n, m3d_round(acc[n], mode));
        return;
    }
    if (lane == 0)
        for (int n = 0; n < NT; n++)
            red[w][n] = acc[n];
    __syncthreads();
    if (lane != 0 || ks != 0 || !ok)
        return;
    if (o.half > 0) {
        if (gslot & 1) /* the gate slot's warp finishes the pair */
            return;
        for (int n = 0; n < NT; n++) {
            float g = red[slot * ks_n][n], u = red[(slot + 1) * ks_n][n];
            for (int k = 1; k < ks_n; k++) {
                g += red[slot * ks_n + k][n];
                u += red[(slot + 1) * ks_n + k][n];
            }
            o.y[0][(size_t)n * o.ld[0] + j] =
                swiglu1(m3d_round(g, mode), m3d_round(u, mode), o, mode);
        }
    } else {
        for (int n = 0; n < NT; n++) {
            float s = red[w][n];
            for (int k = 1; k < ks_n; k++)
                s += red[w + k][n];
            out_store(o, r, n, m3d_round(s, mode));
        }
    }
}

/* One token's X [cols] (cols % 8 == 0) into the block's shared memory, split
 * in halves so that the X of 16-byte weight chunk c is xs[c] (columns 8c..8c+3)
 * and xs[cols / 8 + c] (8c+4..8c+7): a warp reading the X of 32 consecutive
 * chunks reads two 512-byte runs (no bank conflicts, as against the 32-byte
 * stride of the interleaved layout). The same values: the sums are unchanged.
 * Every thread of the block calls it after the grid-dependency wait; ends
 * with a __syncthreads. NVIDIA: cp.async (L1-allocating, as X's plain
 * loads), no registers. */
__device__ __forceinline__ void xs_load(float4 *xs, const float *X, int cols)
{
    const int c4n = cols >> 2, c8n = cols >> 3;
    const float4 *x4 = (const float4 *)X;
    for (int i = threadIdx.x; i < c4n; i += blockDim.x) {
        float4 *d = xs + (i & 1) * c8n + (i >> 1);
#if M3_PDL
        const uint32_t a = (uint32_t)__cvta_generic_to_shared(d);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(a), "l"(x4 + i) : "memory");
#else
        *d = x4[i];
#endif
    }
#if M3_PDL
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
    __syncthreads();
}

/* grid ceil(slots / (8 / ks_n)), block 256. A slot is one weight row (in
 * SwiGLU mode slot 2j = gate row j, 2j+1 = up row j, both in one block);
 * warp w streams K slice w % ks_n of slot w / ks_n, lane l the 16-byte
 * chunks beg + l + 32 m (m ascending, one fmaf chain per token), with U
 * loads per lane in flight; slices and gate/up meet in shared memory
 * (fixed order: slices ascending). X is read with coherent loads (not the
 * read-only path): under PDL its producer may still be running when this
 * kernel starts.
 * ROLL = 0: a window of U loads is issued, consumed, then the next window
 * is issued (the lane's loads in flight fall from U to 0 every window).
 * ROLL = 1: each register is reloaded with the chunk 32 U further on as
 * soon as it has been consumed, so U loads stay in flight until the slice
 * ends. The same chunks in the same order: bitwise the same results
 * (measured slower on the H200 in this hardware-scheduled grid: 1-2 us on
 * the 100-150 MB matrices; the persistent kernel below uses it). */
template <int NT, int U, int ROLL>
__global__ void k_gemv_bf16(gemv_out o, const float *X, const uint16_t *__restrict__ W, int rows,
                            int cols, int ks_n, int mode)
{
    __shared__ float red[GEMV_ROWS][NT];
    pdl_trigger();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int slot = w / ks_n, ks = w % ks_n;
    const int gslot = blockIdx.x * (GEMV_ROWS / ks_n) + slot;
    int r, j;
    bool ok;
    slot_row(o, gslot, rows, r, j, ok);
    const int c8n = cols >> 3;
    const int per = (c8n + ks_n - 1) / ks_n;
    const int beg = ks * per, end = beg + per < c8n ? beg + per : c8n;
    const uint4 *wr = (const uint4 *)(W + (size_t)r * (size_t)cols);
    float acc[NT];
    for (int n = 0; n < NT; n++)
        acc[n] = 0.0f;
    uint4 wv[U];
    int c = beg + lane;
    M3_UNROLL
    for (int u = 0; u < U; u++) {
        if (c + 32 * u < end) {
            wv[u] = wr[c + 32 * u];
        } else {
            wv[u].x = wv[u].y = wv[u].z = wv[u].w = 0u;
        }
    }
    pdl_wait(); /* X is the previous kernel's output */
    while (c < end) {
        M3_UNROLL
        for (int u = 0; u < U; u++) {
            const int cc = c + 32 * u;
            if (cc < end) {
                M3_UNROLL
                for (int n = 0; n < NT; n++) {
                    const float4 *xr = (const float4 *)(X + (size_t)n * cols) + 2 * cc;
                    acc[n] = dot8(wv[u], xr[0], xr[1], acc[n]);
                }
            }
            if constexpr (ROLL) {
                if (cc + 32 * U < end)
                    wv[u] = wr[cc + 32 * U];
            }
        }
        c += 32 * U;
        if constexpr (!ROLL) {
            M3_UNROLL
            for (int u = 0; u < U; u++) {
                if (c + 32 * u < end) {
                    wv[u] = wr[c + 32 * u];
                } else {
                    wv[u].x = wv[u].y = wv[u].z = wv[u].w = 0u;
                }
            }
        }
    }
    for (int n = 0; n < NT; n++)
        acc[n] = m3d_warp_sum(acc[n]);
    gemv_finish<NT>(o, red, acc, w, lane, slot, ks, ks_n, gslot, r, j, ok, mode);
}

/* Persistent form of k_gemv_bf16 (ROLL = 1) for one token: grid nb <=
 * ntiles, block 256; block b runs tiles b, b + nb, b + 2 nb, ...; tile t
 * is k_gemv_bf16's block t (8 / ks_n slots, the same slices, every sum in
 * the same order: bitwise the same outputs). While a tile's last window is
 * consumed, the registers are refilled from the next tile's first window,
 * so a block's loads never drain between tiles and no block is launched
 * after the first wave. Needs cols / 8 = ks_n * per with per a multiple of
 * 32 U (every lane the same number of windows; launch_fast checks). The
 * partial sums alternate between two shared buffers (one barrier a tile).
 * U: 16-byte loads in flight per lane (the window; the summation order
 * does not depend on it); MINB: blocks per SM of the register cap (4: 64
 * registers, 3: 80, room for U = 6 or 8 without spills). BULK = 1
 * (NVIDIA only; dynamic shared memory of 8 * per 16-byte chunks): the
 * first tile comes through shared memory by the bulk-copy engine, the
 * same sums (a benchmark variant; docs/designs-tried.md has its timings). */
template <int NT, int U, int MINB, int BULK = 0, int XS = 0>
__global__ void M3_BOUNDS(32 * GEMV_ROWS, MINB)
    k_gemv_pers(gemv_out o, const float *X, const uint16_t *__restrict__ W, int rows, int cols,
                int ks_n, int ntiles, int mode)
{
    __shared__ float red[2][GEMV_ROWS][NT];
    M3_DYN_SHARED(float4, xsh); /* XS: X split in halves (xs_load) */
    M3_GEMV_STAMP(0, W);
    pdl_trigger();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int spb = GEMV_ROWS / ks_n, slot = w / ks_n, ks = w % ks_n;
    const int per = (cols >> 3) / ks_n, beg = ks * per + lane, nw = per / (32 * U);
    int t = blockIdx.x, gslot = t * spb + slot, r, j;
    bool ok;
    slot_row(o, gslot, rows, r, j, ok);
    const uint4 *wr = (const uint4 *)(W + (size_t)r * (size_t)cols) + beg;
    uint4 wv[U];
    int par0 = 0;
    if constexpr (BULK) {
#if M3_BULK
        /* The first tile by the copy engine: each warp's slice (per chunks,
         * contiguous) into its own part of `stage` before the wait, and
         * the second tile's first window into registers; after the wait
         * the first tile is summed from shared memory in the register
         * path's order (chunk lane + 32 m, m ascending): bitwise equal. */
        extern __shared__ uint4 stage[]; /* GEMV_ROWS * per chunks */
        __shared__ uint64_t bar[GEMV_ROWS];
        const uint4 *sw = stage + (size_t)w * per;
        if (lane == 0)
            bulk_stage(stage + (size_t)w * per, wr - lane, (uint32_t)per * 16u, &bar[w]);
        const int tn = t + (int)gridDim.x, gsn = tn * spb + slot;
        const bool hn = tn < ntiles; /* block-uniform */
        int rn, jn;
        bool okn;
        slot_row(o, hn ? gsn : gslot, rows, rn, jn, okn);
        const uint4 *wn = (const uint4 *)(W + (size_t)rn * (size_t)cols) + beg;
        if (hn) {
            M3_UNROLL
            for (int u = 0; u < U; u++)
                wv[u] = wn[32 * u];
        }
        pdl_wait(); /* X is the previous kernel's output */
        M3_GEMV_STAMP(1, W);
        __syncwarp();
        bulk_wait(&bar[w], 0);
        float acc[NT];
        for (int n = 0; n < NT; n++)
            acc[n] = 0.0f;
        for (int i = 0; i < nw; i++) {
            M3_UNROLL
            for (int u = 0; u < U; u++) {
                const int m = U * i + u, cc = beg + 32 * m;
                const uint4 cv = sw[lane + 32 * m];
                M3_UNROLL
                for (int n = 0; n < NT; n++) {
                    const float4 *xr = (const float4 *)(X + (size_t)n * cols) + 2 * cc;
                    acc[n] = dot8(cv, xr[0], xr[1], acc[n]);
                }
            }
        }
        for (int n = 0; n < NT; n++)
            acc[n] = m3d_warp_sum(acc[n]);
        gemv_finish<NT>(o, red[0], acc, w, lane, slot, ks, ks_n, gslot, r, j, ok, mode);
        M3_GEMV_STAMP(2, W);
        if (!hn) {
            M3_GEMV_STAMP(3, W);
            return;
        }
        t = tn, gslot = gsn, r = rn, j = jn, ok = okn, wr = wn, par0 = 1;
#endif
    } else {
        M3_UNROLL
        for (int u = 0; u < U; u++)
            wv[u] = wr[32 * u];
        pdl_wait(); /* X is the previous kernel's output */
        M3_GEMV_STAMP(1, W);
        if constexpr (XS)
            xs_load(xsh, X, cols);
    }
    const int c8n = cols >> 3;
    for (int par = par0, it = 0;; par ^= 1, it++) {
        const int tn = t + (int)gridDim.x, gsn = tn * spb + slot;
        const bool hn = tn < ntiles; /* block-uniform */
        int rn, jn;
        bool okn;
        slot_row(o, hn ? gsn : gslot, rows, rn, jn, okn);
        const uint4 *wn = (const uint4 *)(W + (size_t)rn * (size_t)cols) + beg;
        float acc[NT];
        for (int n = 0; n < NT; n++)
            acc[n] = 0.0f;
        for (int i = 0; i < nw; i++) {
            const bool last = i + 1 == nw;
            M3_UNROLL
            for (int u = 0; u < U; u++) {
                const int cc = beg + 32 * (U * i + u);
                if constexpr (XS) {
                    acc[0] = dot8(wv[u], xsh[cc], xsh[c8n + cc], acc[0]);
                } else {
                    M3_UNROLL
                    for (int n = 0; n < NT; n++) {
                        const float4 *xr = (const float4 *)(X + (size_t)n * cols) + 2 * cc;
                        acc[n] = dot8(wv[u], xr[0], xr[1], acc[n]);
                    }
                }
                if (!last)
                    wv[u] = wr[32 * (U * (i + 1) + u)];
                else if (hn)
                    wv[u] = wn[32 * u];
            }
        }
        for (int n = 0; n < NT; n++)
            acc[n] = m3d_warp_sum(acc[n]);
        gemv_finish<NT>(o, red[par], acc, w, lane, slot, ks, ks_n, gslot, r, j, ok, mode);
        if (it == 0 && !BULK)
            M3_GEMV_STAMP(2, W);
        if (!hn)
            break;
        t = tn, gslot = gsn, r = rn, j = jn, ok = okn, wr = wn;
    }
    M3_GEMV_STAMP(3, W);
}

/* Loads in flight per lane and the K split: from the H200 sweep of this
 * kernel (plain launches, 25 graph replays each, cold weights): U = 4 beat
 * U = 8 on 9 of 10 M3 shapes, and about 3072 columns per warp was best or
 * within 5% of best (q_proj, gate, qkv, gate+up: 2 slices; o_proj, down:
 * 4; k_proj: 4 to fill the GPU). The LM head class (>= 4096 blocks at one
 * slice, 94% of HBM) keeps whole rows. */
#define FAST_U 4

/* K slices for `slots` rows of cols columns: about 3072 columns per warp
 * (unless the grid is huge), then more slices until the grid has >= 256
 * blocks (2 per SM of an H200) while each slice keeps >= 1024 columns. */
static int gemv_ks(int slots, int cols, int swiglu)
{
    const int kmax = swiglu ? GEMV_ROWS / 2 : GEMV_ROWS;
    int ks = 1;
    if ((slots + GEMV_ROWS - 1) / GEMV_ROWS < 4096)
        while (ks < kmax && cols > 3072 * ks)
            ks *= 2;
    while (ks < kmax && (slots + GEMV_ROWS / ks - 1) / (GEMV_ROWS / ks) < 256 &&
           cols / (2 * ks) >= 1024)
        ks *= 2;
    return ks;
}

/* Bandwidth ceiling (bench only): stream `n16` 16-byte chunks (each block
 * an equal contiguous range, U independent loads per lane per step), fold
 * them, store nothing unless the fold hits a constant (so the loads stay).
 * PDL as the GEMVs: trigger at once, wait only before the (unlikely) store. */
template <int U>
__global__ void M3_BOUNDS(256, 4) k_stream_ceiling(const uint4 *__restrict__ p, int64_t n16,
                                                   float *sink, int nsink)
{
    M3_GEMV_STAMP(0, p);
    pdl_trigger();
    const int64_t per = ((n16 + gridDim.x - 1) / gridDim.x + 255) & ~(int64_t)255;
    const int64_t b0 = (int64_t)blockIdx.x * per;
    const int64_t b1 = b0 + per < n16 ? b0 + per : n16;
    uint32_t a = 0;
    for (int64_t i = b0 + threadIdx.x; i < b1; i += 256 * U) {
        uint4 v[U];
        M3_UNROLL
        for (int u = 0; u < U; u++) {
            const int64_t k = i + 256 * u;
            if (k < b1) {
                v[u] = p[k];
            } else {
                v[u].x = v[u].y = v[u].z = v[u].w = 0u;
            }
        }
        M3_UNROLL
        for (int u = 0; u < U; u++)
            a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    M3_GEMV_STAMP(2, p);
    pdl_wait();
    M3_GEMV_STAMP(1, p);
    if (a == 0x9e3779b9u)
        sink[blockIdx.x % nsink] = (float)(a & 0xffu);
    M3_GEMV_STAMP(3, p);
}

/* ---- balanced one-wave bf16 kernels (bf16 mode) ---------------------------
 * Why: k_gemv_bf16's grid is several waves of short blocks, so the last
 * partial wave runs with most SMs idle (shared gate: 768 blocks over 660
 * resident = 1.16 waves). Here the grid is BAL_SMS x bps blocks (bps per
 * SM, all resident at once) and every block and every warp streams the
 * same number of bytes:
 *  - block b owns the logical rows [b*units/nb, (b+1)*units/nb) (units =
 *    rows, or gate/up pairs in SwiGLU mode: the block then owns those gate
 *    rows and the matching up rows);
 *  - the block's rows x cols/8 16-byte chunks, flattened row-major (gate
 *    rows first, then up rows), are cut into 8 equal ranges (multiples of
 *    32 chunks), one per warp; a range may start and end inside a row;
 *  - a warp streams its range one window of 32 x U chunks at a time (lane
 *    l: chunks base + 32 u + l); a window crosses at most one row boundary
 *    (rows have >= 32 U chunks), so each lane keeps the partial of the
 *    current row and of the next; a finished row is summed over the warp;
 *  - a row inside one warp's range goes to res[row]; a row cut by warp
 *    boundaries leaves a head piece (the warp's first row) and/or a tail
 *    piece (its last row) per warp, and after one __syncthreads the pieces
 *    are added in ascending warp order;
 *  - then the epilogue: rounding and segment store, or SwiGLU of the pair.
 * The split depends only on the shape and the grid (BAL_SMS is a constant,
 * not the device's SM count): results are the same on every device and in
 * the CPU emulation, run to run. k_gemv_bal keeps one or two windows per
 * warp in registers (template DB). Measured on the H200 (T = 1): faster
 * than k_gemv_bf16 only where that one's grid is one to two waves (shared
 * gate 3072x6144: 12.71 vs 16.14 us at 5 blocks per SM); on the larger
 * matrices its streaming rate is lower (q_proj 31.03 vs 28.60 us), which
 * the tail it saves does not pay for. gemv_pick chooses.
 * Under PDL the first windows are requested before griddepcontrol.wait
 * (weights never depend on the previous kernel; X and the outputs are
 * touched only after it). Applies when cols % 8 == 0, cols >= 256 U and at
 * most BAL_RB logical rows fall to a block (bal_fits). */
#define BAL_SMS 132 /* H100 / H200 SXM streaming multiprocessors */
#define BAL_RB 128  /* most logical rows (gate and up counted apart) per block */


/* Start of warp w's chunk range in a block of n chunks (a multiple of 32). */
__device__ __forceinline__ int bal_q(int w, int n)
{
    if (w >= GEMV_ROWS)
        return n;
    const int q = (int)(((int64_t)w * n / GEMV_ROWS) & ~(int64_t)31);
    return q < n ? q : n;
}

/* The block's share: logical rows, chunk count, and where its chunks are
 * (chunk c < split at A[c], else B[c - split]: the up rows in SwiGLU mode). */
struct bal_block {
    int u0, nu, c8n, nloc, split;
    const uint4 *A, *B;
};

__device__ __forceinline__ bal_block bal_share(const gemv_out &o, const uint16_t *W, int rows,
                                               int cols)
{
    bal_block k;
    const int nb = (int)gridDim.x, b = (int)blockIdx.x;
    const int units = o.half > 0 ? o.half : rows;
    k.u0 = (int)((int64_t)b * units / nb);
    k.nu = (int)((int64_t)(b + 1) * units / nb) - k.u0;
    k.c8n = cols >> 3;
    k.nloc = (o.half > 0 ? 2 * k.nu : k.nu) * k.c8n;
    k.A = (const uint4 *)W + (size_t)k.u0 * k.c8n;
    k.B = o.half > 0 ? (const uint4 *)W + (size_t)(o.half + k.u0) * k.c8n : k.A;
    k.split = o.half > 0 ? k.nu * k.c8n : k.nloc;
    return k;
}

/* One window into registers: chunks base + 32 u + lane (u < U), zero past qb. */
template <int U>
__device__ __forceinline__ void bal_load(uint4 (&wv)[U], const bal_block &k, int base, int qb,
                                         int lane)
{
    M3_UNROLL
    for (int u = 0; u < U; u++) {
        const int c = base + 32 * u + lane;
        if (c < qb) {
            wv[u] = c < k.split ? k.A[c] : k.B[c - k.split];
        } else {
            wv[u].x = wv[u].y = wv[u].z = wv[u].w = 0u;
        }
    }
}

/* Per-warp streaming state (warp-uniform except the partials). */
template <int NT>
struct bal_warp {
    float ac[NT], an[NT]; /* this lane's partials of row R and of row R + 1 */
    int R, row_end;       /* current local row; its end (in chunks) */
    int first, last;      /* the warp's first and last local row */
    int qa, qb;           /* the warp's chunk range */
};

template <int NT>
__device__ __forceinline__ void bal_begin(bal_warp<NT> &s, int w, const bal_block &k)
{
    s.qa = bal_q(w, k.nloc);
    s.qb = bal_q(w + 1, k.nloc);
    s.first = s.last = s.R = s.row_end = 0;
    M3_UNROLL
    for (int n = 0; n < NT; n++)
        s.ac[n] = s.an[n] = 0.0f;
    if (s.qa < s.qb) {
        s.first = s.qa / k.c8n;
        s.last = (s.qb - 1) / k.c8n;
        s.R = s.first;
        s.row_end = (s.first + 1) * k.c8n;
    }
}

/* Row R of this warp is complete: warp sum, then res[R] (row inside the
 * range) or the head / tail piece; move on to row R + 1. */
template <int NT>
__device__ __forceinline__ void bal_emit(bal_warp<NT> &s, float (*res)[NT], float (*hp)[NT],
                                         float (*tp)[NT], int c8n, int lane, int w)
{
    const bool whole = s.R * c8n >= s.qa && s.row_end <= s.qb;
    M3_UNROLL
    for (int n = 0; n < NT; n++) {
        const float v = m3d_warp_sum(s.ac[n]);
        if (lane == 0) {
            if (whole) {
                res[s.R][n] = v;
            } else {
                if (s.R == s.first)
                    hp[w][n] = v;
                if (s.R == s.last)
                    tp[w][n] = v;
            }
        }
        s.ac[n] = s.an[n];
        s.an[n] = 0.0f;
    }
    s.R++;
    s.row_end += c8n;
}

/* Consume the window at base (wv: its chunks for this lane; chunks past qb
 * are skipped), then emit the rows that have no chunk left in the range:
 * R if the window reached its end, and R + 1 if the range ends here.
 * ROLL = 1: each register is refilled with the chunk of the next window as
 * soon as it has been consumed (the same chunks in the same order). */
template <int NT, int U, int ROLL>
__device__ __forceinline__ void bal_step(bal_warp<NT> &s, uint4 (&wv)[U], const bal_block &k,
                                         const float *X, int cols, int c8n, int base,
                                         float (*res)[NT], float (*hp)[NT], float (*tp)[NT],
                                         int lane, int w)
{
    M3_UNROLL
    for (int u = 0; u < U; u++) {
        const int c = base + 32 * u + lane;
        if (c < s.qb) {
            const bool nx = c >= s.row_end;
            const int col = c - (nx ? s.row_end : s.row_end - c8n);
            M3_UNROLL
            for (int n = 0; n < NT; n++) {
                const float4 *xr = (const float4 *)(X + (size_t)n * cols) + 2 * col;
                const float a = dot8(wv[u], xr[0], xr[1], nx ? s.an[n] : s.ac[n]);
                if (nx)
                    s.an[n] = a;
                else
                    s.ac[n] = a;
            }
        }
        if constexpr (ROLL) {
            const int cn = c + 32 * U;
            if (cn < s.qb)
                wv[u] = cn < k.split ? k.A[cn] : k.B[cn - k.split];
        }
    }
    const int end = base + 32 * U;
    while (s.R <= s.last && end >= (s.row_end < s.qb ? s.row_end : s.qb)) /* warp-uniform */
        bal_emit<NT>(s, res, hp, tp, c8n, lane, w);
}

/* Local row i of the block: res[i], or its pieces in ascending warp order. */
template <int NT>
__device__ __forceinline__ float bal_row(int i, int n, int c8n, int nloc, const float (*res)[NT],
                                         const float (*hp)[NT], const float (*tp)[NT])
{
    const int c0 = i * c8n, c1 = c0 + c8n - 1;
    int w0 = 0, w1;
    while (c0 >= bal_q(w0 + 1, nloc))
        w0++;
    w1 = w0;
    while (c1 >= bal_q(w1 + 1, nloc))
        w1++;
    if (w0 == w1)
        return res[i][n];
    float v = tp[w0][n];
    for (int q = w0 + 1; q < w1; q++)
        if (bal_q(q, nloc) < bal_q(q + 1, nloc)) /* an empty range left no piece */
            v += hp[q][n];
    return v + hp[w1][n];
}

/* After the block's __syncthreads: the epilogue of the block's rows. */
template <int NT>
__device__ __forceinline__ void bal_finish(const gemv_out &o, const bal_block &k, int mode,
                                           const float (*res)[NT], const float (*hp)[NT],
                                           const float (*tp)[NT])
{
    if (o.half > 0) {
        for (int p = threadIdx.x; p < k.nu; p += blockDim.x) {
            for (int n = 0; n < NT; n++) {
                const float g = bal_row<NT>(p, n, k.c8n, k.nloc, res, hp, tp);
                const float u = bal_row<NT>(k.nu + p, n, k.c8n, k.nloc, res, hp, tp);
                o.y[0][(size_t)n * o.ld[0] + k.u0 + p] =
                    swiglu1(m3d_round(g, mode), m3d_round(u, mode), o, mode);
            }
        }
    } else {
        for (int i = threadIdx.x; i < k.nu; i += blockDim.x) {
            for (int n = 0; n < NT; n++)
                out_store(o, k.u0 + i, n,
                          m3d_round(bal_row<NT>(i, n, k.c8n, k.nloc, res, hp, tp), mode));
        }
    }
}

/* grid nb (<= units), block 256. units = rows, or o.half pairs (SwiGLU).
 * DB = 1: two windows in registers (the next window's loads are issued
 * before the current one is used); DB = 0: one window (load, use, load the
 * next; with ROLL = 1 each register reloaded as soon as it is used), fewer
 * registers, so more blocks per SM. */
template <int NT, int U, int MINB, int DB, int ROLL>
__global__ void M3_BOUNDS(32 * GEMV_ROWS, MINB)
    k_gemv_bal(gemv_out o, const float *X, const uint16_t *__restrict__ W, int rows, int cols,
               int mode)
{
    __shared__ float res[BAL_RB][NT];
    __shared__ float hp[GEMV_ROWS][NT], tp[GEMV_ROWS][NT];
    pdl_trigger();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const bal_block k = bal_share(o, W, rows, cols);
    bal_warp<NT> s;
    bal_begin<NT>(s, w, k);
    if (s.qa < s.qb) { /* warp-uniform */
        uint4 wa[U];
        int base = s.qa;
        bal_load<U>(wa, k, base, s.qb, lane);
        if constexpr (DB) {
            uint4 wb[U];
            bal_load<U>(wb, k, base + 32 * U, s.qb, lane);
            pdl_wait(); /* X is the previous kernel's output */
            for (;;) {
                bal_step<NT, U, 0>(s, wa, k, X, cols, k.c8n, base, res, hp, tp, lane, w);
                base += 32 * U;
                if (base >= s.qb)
                    break;
                bal_load<U>(wa, k, base + 32 * U, s.qb, lane);
                bal_step<NT, U, 0>(s, wb, k, X, cols, k.c8n, base, res, hp, tp, lane, w);
                base += 32 * U;
                if (base >= s.qb)
                    break;
                bal_load<U>(wb, k, base + 32 * U, s.qb, lane);
            }
        } else {
            pdl_wait(); /* X is the previous kernel's output */
            for (;;) {
                bal_step<NT, U, ROLL>(s, wa, k, X, cols, k.c8n, base, res, hp, tp, lane, w);
                base += 32 * U;
                if (base >= s.qb)
                    break;
                if constexpr (!ROLL)
                    bal_load<U>(wa, k, base, s.qb, lane);
            }
        }
    } else {
        pdl_wait(); /* this thread stores outputs below */
    }
    __syncthreads();
    bal_finish<NT>(o, k, mode, res, hp, tp);
}

/* ---- launch configurations ------------------------------------------------ */

/* One way to run the bf16 streaming GEMV. kind 0: k_gemv_bf16 (split-K,
 * many short blocks; gemv_ks slices); 1: the same with twice the slices
 * (shorter blocks); 2: k_gemv_bal, two windows in registers (<= 128
 * registers); 3: k_gemv_bal, one window (<= 48 registers for one token);
 * 4: k_gemv_pers (one token; gemv_ks slices).
 * bps: blocks per SM of the balanced and persistent kernels (grid BAL_SMS x
 * bps). roll: the rolling refill (ROLL =
 * 1) of k_gemv_bf16 / k_gemv_bal. u (k_gemv_pers): loads in flight per
 * lane, 0 = FAST_U (4, 64 registers, 4 blocks per SM), -1 = "deep": 8, or
 * 6 where the lane's chunks per tile are not a multiple of 8 (80
 * registers, 3 blocks per SM). bulk (k_gemv_pers, NVIDIA only, "deep"
 * only): the first tile of every block staged into shared memory by the
 * bulk-copy engine before the grid-dependency wait (BULK = 1). xs
 * (k_gemv_pers): X staged in shared memory after the wait (XS = 1). */
typedef struct gemv_cfg {
    const char *name;
    int kind, bps, pdl, roll, u, bulk, xs;
} gemv_cfg;

/* Index 0 is the default (chosen per shape by gemv_pick); the others are
 * benchmark variants (m3g_gemv_variant; bench-gpu --case gemv times each).
 * "old": the kernels as they were before the persistent kernel. */
static const gemv_cfg gemv_cfgs[] = {
    {"default", -1, 0, 1, 0, 0, 0, 0},
    {"old split-K", 0, 0, 1, 0, 0, 0, 0},
    {"old split-K ks x2", 1, 0, 1, 0, 0, 0, 0},
    {"rolling bal u4 5/SM", 3, 5, 1, 1, 0, 0, 0},
    {"persistent 4/SM", 4, 4, 1, 1, 0, 0, 0},
    {"persistent 4/SM no PDL", 4, 4, 0, 1, 0, 0, 0},
    {"persistent 3/SM deep", 4, 3, 1, 1, -1, 0, 0},
    {"persistent 3/SM deep no PDL", 4, 3, 0, 1, -1, 0, 0},
    {"persistent 3/SM deep bulk", 4, 3, 1, 1, -1, 1, 0},
    {"persistent 4/SM xs", 4, 4, 1, 1, 0, 0, 1},
    {"persistent 3/SM deep xs", 4, 3, 1, 1, -1, 0, 1},
};
#define GEMV_NCFG ((int)(sizeof gemv_cfgs / sizeof gemv_cfgs[0]))
#define GEMV_XS_COLS 12288 /* the widest X the defaults stage in shared memory (48 KB, measured) */
#define BAL_U 4        /* chunks per lane per window of k_gemv_bal */
#define GEMV_WAVE 660  /* resident k_gemv_bf16 blocks on 132 SMs (5 per SM) */

/* Whether k_gemv_bal can run this shape with nb blocks. */
static int bal_fits(const gemv_out &o, int rows, int cols, int nb)
{
    const int units = o.half > 0 ? o.half : rows;
    if (cols < 256 * BAL_U || units < 1 || nb < 1) /* rows of >= 32 U chunks */
        return 0;
    const int per = (units + nb - 1) / nb;
    return (o.half > 0 ? 2 * per : per) <= BAL_RB;
}

/* Loads in flight per lane of k_gemv_pers in configuration u (see
 * gemv_cfg) for per chunks per slice, 0 where none fits. */
static int pers_u(int u, int per)
{
    const int cpt = per / 32; /* a lane's chunks per tile */
    if (per % 32 != 0)
        return 0;
    if (u >= 0) {
        const int uu = u > 0 ? u : FAST_U;
        return cpt % uu == 0 ? uu : 0;
    }
    return cpt % 8 == 0 ? 8 : (cpt % 6 == 0 ? 6 : 0);
}

/* Whether k_gemv_pers runs this shape at gemv_ks slices ks: every lane
 * the same number of whole windows (cols / 8 = ks * per, per % 32 U == 0). */
static int pers_fits(int cols, int ks, int u = 0)
{
    const int c8n = cols >> 3;
    return (cols & 7) == 0 && c8n % ks == 0 && pers_u(u, c8n / ks) > 0;
}

/* The default configuration for T tokens (H200 sweeps of 2026-11-29,
 * bench-gpu --case gemv, T = 1):
 *  - only at T = 1 and for >= 4096 columns (what was measured; e.g. the
 *    shared expert down 6144x3072 is also a 1.16-wave grid but was not
 *    timed);
 *  - split-K grid under one wave: twice the K slices (k_proj 512x6144:
 *    4.76 -> 4.01 us);
 *  - one to two waves (a long, mostly idle last wave): the balanced
 *    kernel, 5 blocks per SM, rolling refill (shared gate 3072x6144:
 *    16.14 -> 12.71 us, rolling 12.49 us);
 *  - two or more waves, below the LM-head class (< 4096 blocks of whole
 *    rows): the persistent kernel, 4 blocks per SM, bitwise the same
 *    outputs as k_gemv_bf16 (q_proj 28.53 -> 26.99 us,
 *    o_proj 27.71 -> 26.53, dense gate 39.83 -> 38.66, down 39.85 ->
 *    38.50, fused q/k/v/index 32.75 -> 31.48, gate+up+SwiGLU 23.80 ->
 *    21.54);
 *    Later (two runs of bench-gpu --case gemv, every variant):
 *    where the 4-per-SM grid has at most 3 tiles per block or leaves more
 *    than a tenth of the 528 block slots empty, the "deep" persistent
 *    configuration instead (3 blocks per SM, 80 registers, 6 or 8 loads in
 *    flight per lane; the same tiles and sums, so still bitwise equal):
 *    fused q/k/v 9216x6144 (2304 tiles: 461 blocks of 5 at 4 per SM)
 *    30.58 -> 29.55 us, gate+up+SwiGLU 6144x6144 (3 tiles per block)
 *    21.50 -> 21.17 us; where it loses it is not taken (q_proj 26.94 vs
 *    27.73, o_proj 26.66 vs 27.00, q/k/v/index 31.30 vs 32.35; dense gate
 *    / down within 0.3 us either way);
 *  - otherwise (LM head, 4096+ blocks) k_gemv_bf16 as before (531.6 us;
 *    the persistent kernel 542.6 us there).
 * With X in shared memory (bench-gpu --case gemv, T = 1): for <= GEMV_XS_COLS
 * columns the persistent configurations stage X in shared memory (xs,
 * bitwise the same outputs), 4 per SM where X takes <= 32 KB, else 3 per
 * SM deep (4 x 48 KB of X left too little L1: dense down 4/SM xs 39.36
 * us, deep xs 37.71, 4/SM without xs 38.44), and the one-to-two-wave
 * class takes the deep xs form instead of k_gemv_bal (shared gate
 * 3072x6144 12.45 -> 10.98 us). */
static gemv_cfg gemv_pick(const gemv_out &o, int rows, int cols, int T)
{
    const int slots = o.half > 0 ? 2 * o.half : rows;
    const int ks = gemv_ks(slots, cols, o.half > 0), spb = GEMV_ROWS / ks;
    const int nb = (slots + spb - 1) / spb;
    if (T != 1 || cols < 4096) /* what was measured: one token, 6144-12288 columns */
        return gemv_cfgs[1];
    if (nb < GEMV_WAVE && ks < (o.half > 0 ? GEMV_ROWS / 2 : GEMV_ROWS))
        return gemv_cfgs[2];
    const int xs = cols <= GEMV_XS_COLS; /* X staged in shared memory (gemv_cfgs[9], [10]) */
    if (nb < 2 * GEMV_WAVE && bal_fits(o, rows, cols, gemv_cfgs[3].bps * BAL_SMS)) {
        if (xs && pers_fits(cols, ks, gemv_cfgs[10].u))
            return gemv_cfgs[10];
        return gemv_cfgs[3];
    }
    if ((slots + GEMV_ROWS - 1) / GEMV_ROWS < 4096 && pers_fits(cols, ks)) {
        const int slots4 = BAL_SMS * gemv_cfgs[4].bps; /* 528 */
        const int tpb4 = (nb + slots4 - 1) / slots4, nb4 = (nb + tpb4 - 1) / tpb4;
        if ((tpb4 <= 3 || 10 * nb4 < 9 * slots4 || (xs && cols > 8192)) &&
            pers_fits(cols, ks, gemv_cfgs[6].u))
            return gemv_cfgs[xs ? 10 : 6];
        return gemv_cfgs[xs ? 9 : 4];
    }
    return gemv_cfgs[1];
}

/* Launch kernel k over grid nb x 256 threads with shm bytes of dynamic
 * shared memory, with the PDL attribute on NVIDIA when pdl (a plain launch
 * if that is refused); returns from the calling function. */
#define GEMV_LAUNCH(k, nb, shm, pdl, st, ...)                                                 \
    return m3d_launch(k, dim3(nb), dim3(32 * GEMV_ROWS), (shm), (pdl), st, __VA_ARGS__)

/* Launch one streaming pass of NT tokens in configuration c. */
template <int NT>
static hipError_t launch_fast(const gemv_cfg &c, const gemv_out &o, const float *X,
                              const uint16_t *W, int rows, int cols, int mode, hipStream_t st)
{
    const int slots = o.half > 0 ? 2 * o.half : rows;
    const int kmax = o.half > 0 ? GEMV_ROWS / 2 : GEMV_ROWS;
    if (c.kind <= 1) {
        int ks = gemv_ks(slots, cols, o.half > 0);
        if (c.kind == 1 && ks < kmax)
            ks *= 2;
        const int spb = GEMV_ROWS / ks; /* slots per block */
        const int nb = (slots + spb - 1) / spb;
        if (c.roll)
            GEMV_LAUNCH((k_gemv_bf16<NT, FAST_U, 1>), nb, 0, c.pdl, st, o, X, W, rows, cols, ks,
                        mode);
        GEMV_LAUNCH((k_gemv_bf16<NT, FAST_U, 0>), nb, 0, c.pdl, st, o, X, W, rows, cols, ks,
                    mode);
    }
    if (c.kind == 4) {
        if constexpr (NT == 1) {
            const int ks = gemv_ks(slots, cols, o.half > 0), spb = GEMV_ROWS / ks;
            const int ntiles = (slots + spb - 1) / spb;
            if (!pers_fits(cols, ks, c.u))
                return hipErrorInvalidValue;
            const int u = pers_u(c.u, (cols >> 3) / ks);
            /* the fewest tiles per block that fit one wave of bps blocks per
             * SM, then the fewest blocks with that many (block b runs tiles
             * b, b + nb, ...: the counts differ by at most one) */
            const int tpb = (ntiles + BAL_SMS * c.bps - 1) / (BAL_SMS * c.bps);
            const int nb = (ntiles + tpb - 1) / tpb;
            if (c.bulk) {
#if M3_BULK
                /* dynamic shared memory: the block's first tile; with the
                 * static part and the 1 KB the driver keeps per block, bps
                 * blocks must fit one SM's 228 KB */
                const int shm = GEMV_ROWS * ((cols >> 3) / ks) * 16;
                if (c.bps * (shm + 1024 + 256) > 228 * 1024)
                    return hipErrorInvalidValue;
                const int carve = (c.bps * (shm + 1024 + 256) * 100 + 228 * 1024 - 1) / (228 * 1024);
                void (*kp)(gemv_out, const float *, const uint16_t *, int, int, int, int, int) =
                    NULL;
                if (u == 6 && c.bps == 3)
                    kp = k_gemv_pers<1, 6, 3, 1>;
                else if (u == 8 && c.bps == 3)
                    kp = k_gemv_pers<1, 8, 3, 1>;
                if (!kp)
                    return hipErrorInvalidValue;
                if (cudaFuncSetAttribute(kp, cudaFuncAttributeMaxDynamicSharedMemorySize, shm) !=
                        cudaSuccess ||
                    cudaFuncSetAttribute(kp, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         carve > 100 ? 100 : carve) != cudaSuccess)
                    return hipGetLastError();
                GEMV_LAUNCH(kp, nb, shm, c.pdl, st, o, X, W, rows, cols, ks, ntiles, mode);
#else
                return hipErrorInvalidValue;
#endif
            }
            if (c.xs) {
                /* dynamic shared memory: X (cols floats); bps blocks per SM
                 * with the static part and the driver's 1 KB per block */
                const int shm = cols * 4;
                void (*kp)(gemv_out, const float *, const uint16_t *, int, int, int, int, int) =
                    NULL;
                if (u == FAST_U && c.bps == 4)
                    kp = k_gemv_pers<1, FAST_U, 4, 0, 1>;
                else if (u == 6 && c.bps == 3)
                    kp = k_gemv_pers<1, 6, 3, 0, 1>;
                else if (u == 8 && c.bps == 3)
                    kp = k_gemv_pers<1, 8, 3, 0, 1>;
                if (!kp || c.bps * (shm + 1024 + 256) > 228 * 1024)
                    return hipErrorInvalidValue;
#if !defined(M3_EMU) /* the emulation has no limit to lift */
                if (shm > 48 * 1024 - 256 &&
                    hipFuncSetAttribute((const void *)kp,
                                        hipFuncAttributeMaxDynamicSharedMemorySize,
                                        shm) != hipSuccess)
                    return hipGetLastError();
#endif
                GEMV_LAUNCH(kp, nb, shm, c.pdl, st, o, X, W, rows, cols, ks, ntiles, mode);
            }
            if (u == FAST_U && c.bps == 4)
                GEMV_LAUNCH((k_gemv_pers<1, FAST_U, 4>), nb, 0, c.pdl, st, o, X, W, rows, cols,
                            ks, ntiles, mode);
            if (u == 6 && c.bps == 3)
                GEMV_LAUNCH((k_gemv_pers<1, 6, 3>), nb, 0, c.pdl, st, o, X, W, rows, cols, ks,
                            ntiles, mode);
            if (u == 8 && c.bps == 3)
                GEMV_LAUNCH((k_gemv_pers<1, 8, 3>), nb, 0, c.pdl, st, o, X, W, rows, cols, ks,
                            ntiles, mode);
        }
        return hipErrorInvalidValue;
    }
    const int units = o.half > 0 ? o.half : rows;
    const int nb = BAL_SMS * c.bps < units ? BAL_SMS * c.bps : units;
    if (!bal_fits(o, rows, cols, nb))
        return hipErrorInvalidValue;
    constexpr int M5 = NT == 1 ? 5 : 2; /* register cap: 5 blocks per SM for one token */
    if (c.kind == 2)
        GEMV_LAUNCH((k_gemv_bal<NT, BAL_U, 2, 1, 0>), nb, 0, c.pdl, st, o, X, W, rows, cols,
                    mode);
    if (c.roll)
        GEMV_LAUNCH((k_gemv_bal<NT, BAL_U, M5, 0, 1>), nb, 0, c.pdl, st, o, X, W, rows, cols,
                    mode);
    GEMV_LAUNCH((k_gemv_bal<NT, BAL_U, M5, 0, 0>), nb, 0, c.pdl, st, o, X, W, rows, cols, mode);
}

/* The GEMV paths for T tokens (see the file header); cfg: NULL = default. */
static hipError_t gemv_run(const gemv_out &o, const float *X, m3g_mat W, int T, int mode,
                           hipStream_t st, const gemv_cfg *cfg = NULL)
{
    const bool fast = mode == 1 && W.dtype == M3G_BF16 && (W.cols & 7) == 0 &&
                      ((uintptr_t)X & 15) == 0 && ((uintptr_t)W.data & 15) == 0 && T <= 8;
    if (!fast) {
        if (cfg)
            return hipErrorInvalidValue;
        const int units = o.half > 0 ? o.half : W.rows;
        const int per_block = o.half > 0 ? 2 * GEMV_ROWS : 4 * GEMV_ROWS;
        hipLaunchKernelGGL(k_gemv_exact, dim3((units + per_block - 1) / per_block,
                                              (T + EX_NT - 1) / EX_NT),
                           dim3(32 * GEMV_ROWS), 0, st, o, X, W.data, W.dtype, W.rows, W.cols, T,
                           mode);
        return hipGetLastError();
    }
    const gemv_cfg c = cfg ? *cfg : gemv_pick(o, W.rows, W.cols, T);
    const uint16_t *Wb = (const uint16_t *)W.data;
    int t = 0;
    while (t < T) {
        gemv_out ot = o;
        for (int s = 0; s < o.nseg; s++)
            ot.y[s] = o.y[s] + (size_t)t * o.ld[s];
        const float *Xt = X + (size_t)t * W.cols;
        const int left = T - t;
        hipError_t e;
        if (left >= 8) {
            e = launch_fast<8>(c, ot, Xt, Wb, W.rows, W.cols, mode, st);
            t += 8;
        } else if (left >= 4) {
            e = launch_fast<4>(c, ot, Xt, Wb, W.rows, W.cols, mode, st);
            t += 4;
        } else if (left >= 2) {
            e = launch_fast<2>(c, ot, Xt, Wb, W.rows, W.cols, mode, st);
            t += 2;
        } else {
            e = launch_fast<1>(c, ot, Xt, Wb, W.rows, W.cols, mode, st);
            t += 1;
        }
        if (e != hipSuccess)
            return e;
    }
    return hipSuccess;
}

/* ---- grouped GEMV (MoE experts) ------------------------------------------ */

/* The bf16 inner loop of the grouped GEMVs: lane-strided 16-byte chunks c8
 * of NR weight rows wr[q] (cols % 8 == 0), all multiplied by the same X
 * chunk (loaded once); acc[q][n] += the 8 products of chunk c8, summed left
 * to right, for token n < NT. NR = 2 (gate and up rows) gives each
 * accumulator exactly the operations of NR = 1 in the same order (the
 * loads of X are shared): bitwise two single-row calls. */
template <int NT, int NR>
__device__ __forceinline__ void gemv_lane_bf16(float (&acc)[NR][NT], const uint4 *const (&wr)[NR],
                                               int cols, const float *X, size_t ldx, int lane)
{
    for (int c8 = lane; c8 < cols / 8; c8 += 32) {
        uint4 p[NR];
        for (int q = 0; q < NR; q++)
            p[q] = wr[q][c8];
        float wv[NR][8];
        for (int q = 0; q < NR; q++) {
            const uint32_t u[4] = {p[q].x, p[q].y, p[q].z, p[q].w};
            for (int i = 0; i < 4; i++) {
                wv[q][2 * i] = __uint_as_float(u[i] << 16);
                wv[q][2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
            }
        }
        for (int n = 0; n < NT; n++) {
            const float4 *xr = (const float4 *)(X + n * ldx) + 2 * c8;
            const float4 a = xr[0], b = xr[1];
            for (int q = 0; q < NR; q++)
                acc[q][n] += wv[q][0] * a.x + wv[q][1] * a.y + wv[q][2] * a.z + wv[q][3] * a.w +
                             wv[q][4] * b.x + wv[q][5] * b.y + wv[q][6] * b.z + wv[q][7] * b.w;
        }
    }
}

/* acc[n] += W[row, :] . X[n, :] partials for this lane (n < NT). */
template <int NT>
__device__ __forceinline__ void gemv_lane(float acc[NT], const void *W, int dtype, int cols,
                                          size_t row, const float *X, size_t ldx, int lane)
{
    if (dtype == M3G_BF16 && (cols & 7) == 0) {
        const uint4 *const wr[1] = {(const uint4 *)((const uint16_t *)W + row * (size_t)cols)};
        float a[1][NT];
        for (int n = 0; n < NT; n++)
            a[0][n] = acc[n];
        gemv_lane_bf16<NT, 1>(a, wr, cols, X, ldx, lane);
        for (int n = 0; n < NT; n++)
            acc[n] = a[0][n];
    } else if (dtype == M3G_F32 && (cols & 3) == 0) {
        const float4 *wr = (const float4 *)((const float *)W + row * (size_t)cols);
        for (int c4 = lane; c4 < cols / 4; c4 += 32) {
            const float4 w = wr[c4];
            for (int n = 0; n < NT; n++) {
                const float4 a = ((const float4 *)(X + n * ldx))[c4];
                acc[n] += w.x * a.x + w.y * a.y + w.z * a.z + w.w * a.w;
            }
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            const float w = m3d_load(W, dtype, row * (size_t)cols + c);
            for (int n = 0; n < NT; n++)
                acc[n] += w * X[n * ldx + c];
        }
    }
}

/* grid (ceil(rows / 8), k, T), block 256. Both grouped kernels release
 * the next launch at their start and, launched with PDL (the default of
 * the launchers on NVIDIA; *_ex pdl 0: plain), wait for the previous
 * kernel before they read idx or X; nothing is read or written before
 * the wait, so the outputs are the same either way (bench-gpu: both
 * decode layers bitwise equal to the plain launches). Measured (2026-11-30,
 * MSA + MoE decode layer with the router, these two and the
 * combine launched with / without PDL in the same run): 285.95 / 285.75
 * us, and 308.38 / 309.18 us in a second run whose GEMV default was a
 * slower trial: no difference beyond run-to-run noise. */
/* The warp of a grouped kernel (grid (ceil(rows / 8), k, T)): its output
 * row of slot s of token t, the byte offset of expert idx[t][s] in a stack
 * of experts estride elements apart, and X's row for the slot. */
typedef struct grouped_warp {
    int lane, row, s, t;
    size_t eoff;
    const float *x;
} grouped_warp;

/* Start a grouped kernel's warp: release the next launch, then (a warp with
 * a row; false: none) wait for the previous one, whose outputs idx and X
 * are, and fill g. */
__device__ __forceinline__ bool grouped_start(grouped_warp &g, const float *X, int64_t xs,
                                              int64_t xk, int64_t estride, int dtype, int rows,
                                              const int32_t *idx, int k)
{
    pdl_trigger();
    g.lane = threadIdx.x & 31;
    g.row = blockIdx.x * GEMV_ROWS + (threadIdx.x >> 5);
    g.s = blockIdx.y, g.t = blockIdx.z;
    if (g.row >= rows)
        return false;
    pdl_wait(); /* idx and X: earlier kernels' outputs */
    const int e = idx[(size_t)g.t * k + g.s];
    const size_t esz = dtype == M3G_BF16 ? 2 : 4;
    g.eoff = (size_t)e * (size_t)estride * esz;
    g.x = X + g.t * xs + g.s * xk;
    return true;
}

__global__ void k_gemv_grouped(float *Y, const float *X, int64_t xs, int64_t xk, const void *base,
                               int64_t estride, int dtype, int rows, int cols,
                               const int32_t *idx, int k, int mode)
{
    grouped_warp g;
    if (!grouped_start(g, X, xs, xk, estride, dtype, rows, idx, k))
        return;
    float acc[1] = {0.0f};
    gemv_lane<1>(acc, (const char *)base + g.eoff, dtype, cols, (size_t)g.row, g.x, 0, g.lane);
    const float sum = m3d_warp_sum(acc[0]);
    if (g.lane == 0)
        Y[((size_t)g.t * k + g.s) * rows + g.row] = m3d_round(sum, mode);
}

hipError_t m3g_gemv_grouped_ex(float *Y, const float *X, int64_t xs, int64_t xk, const void *base,
                               int64_t expert_stride, int dtype, int rows, int cols,
                               const int32_t *idx, int T, int k, int mode, int pdl,
                               hipStream_t st)
{
    if (T <= 0 || k <= 0)
        return hipSuccess;
    GEMV_LAUNCH(k_gemv_grouped, dim3((rows + GEMV_ROWS - 1) / GEMV_ROWS, k, T), 0, pdl, st, Y, X,
                xs, xk, base, expert_stride, dtype, rows, cols, idx, k, mode);
}

hipError_t m3g_gemv_grouped(float *Y, const float *X, int64_t xs, int64_t xk, const void *base,
                            int64_t expert_stride, int dtype, int rows, int cols,
                            const int32_t *idx, int T, int k, int mode, hipStream_t st)
{
    return m3g_gemv_grouped_ex(Y, X, xs, xk, base, expert_stride, dtype, rows, cols, idx, T, k,
                               mode, 1, st);
}

/* grid (ceil(rows / 8), k, T), block 256: warp = output row `row` of slot
 * s: gate row and up row of expert e as k_gemv_grouped, then swiglu1. */
__global__ void k_gemv_grouped_swiglu(float *Y, const float *X, int64_t xs, int64_t xk,
                                      const void *gbase, const void *ubase, int64_t estride,
                                      int dtype, int rows, int cols, const int32_t *idx, int k,
                                      gemv_out o, int mode)
{
    grouped_warp g;
    if (!grouped_start(g, X, xs, xk, estride, dtype, rows, idx, k))
        return;
    const int lane = g.lane, row = g.row;
    const void *Wg = (const char *)gbase + g.eoff, *Wu = (const char *)ubase + g.eoff;
    const float *xr = g.x;
    float ag = 0.0f, au = 0.0f;
    if (dtype == M3G_BF16 && (cols & 7) == 0) { /* gate and up rows in one pass over X */
        const uint4 *const wr[2] = {(const uint4 *)((const uint16_t *)Wg + (size_t)row * cols),
                                    (const uint4 *)((const uint16_t *)Wu + (size_t)row * cols)};
        float a2[2][1] = {{0.0f}, {0.0f}};
        gemv_lane_bf16<1, 2>(a2, wr, cols, xr, 0, lane);
        ag = a2[0][0], au = a2[1][0];
    } else {
        float a1[1] = {0.0f}, a2[1] = {0.0f};
        gemv_lane<1>(a1, Wg, dtype, cols, (size_t)row, xr, 0, lane);
        gemv_lane<1>(a2, Wu, dtype, cols, (size_t)row, xr, 0, lane);
        ag = a1[0], au = a2[0];
    }
    const float gs = m3d_warp_sum(ag), us = m3d_warp_sum(au);
    if (lane == 0)
        Y[((size_t)g.t * k + g.s) * rows + row] =
            swiglu1(m3d_round(gs, mode), m3d_round(us, mode), o, mode);
}

hipError_t m3g_gemv_grouped_swiglu_ex(float *act, const float *X, int64_t xs, int64_t xk,
                                      const void *gate_base, const void *up_base,
                                      int64_t expert_stride, int dtype, int rows, int cols,
                                      const int32_t *idx, int T, int k, float alpha, float limit,
                                      float beta, int mode, int pdl, hipStream_t st)
{
    if (T <= 0 || k <= 0)
        return hipSuccess;
    gemv_out o;
    memset(&o, 0, sizeof o);
    o.alpha = alpha, o.limit = limit, o.beta = beta;
    GEMV_LAUNCH(k_gemv_grouped_swiglu, dim3((rows + GEMV_ROWS - 1) / GEMV_ROWS, k, T), 0, pdl,
                st, act, X, xs, xk, gate_base, up_base, expert_stride, dtype, rows, cols, idx, k,
                o, mode);
}

hipError_t m3g_gemv_grouped_swiglu(float *act, const float *X, int64_t xs, int64_t xk,
                                   const void *gate_base, const void *up_base,
                                   int64_t expert_stride, int dtype, int rows, int cols,
                                   const int32_t *idx, int T, int k, float alpha, float limit,
                                   float beta, int mode, hipStream_t st)
{
    return m3g_gemv_grouped_swiglu_ex(act, X, xs, xk, gate_base, up_base, expert_stride, dtype,
                                      rows, cols, idx, T, k, alpha, limit, beta, mode, 1, st);
}

/* ---- fallback GEMM: Y [T, rows] = X [T, cols] W^T ----------------------- */
#define GT 64 /* output tile edge */
#define GK 16 /* K slice */

__global__ void k_gemm(float *Y, int ldy, const float *X, const void *W, int dtype, int T,
                       int rows, int cols, int mode)
{
    __shared__ float xs[GK][GT + 1]; /* [k][token] */
    __shared__ float ws[GK][GT + 1]; /* [k][row] */
    const int t0 = blockIdx.y * GT, r0 = blockIdx.x * GT;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16; /* 16 x 16 threads, 4 x 4 each */
    float acc[4][4] = {};
    for (int k0 = 0; k0 < cols; k0 += GK) {
        for (int e = threadIdx.x; e < GT * GK; e += 256) {
            const int i = e / GK, kk = e % GK; /* consecutive threads: consecutive k */
            const int c = k0 + kk;
            xs[kk][i] = (t0 + i < T && c < cols) ? X[(size_t)(t0 + i) * cols + c] : 0.0f;
            ws[kk][i] = (r0 + i < rows && c < cols)
                            ? m3d_load(W, dtype, (size_t)(r0 + i) * cols + c)
                            : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < GK; kk++)
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++)
                    acc[a][b] += xs[kk][ty * 4 + a] * ws[kk][tx * 4 + b];
        __syncthreads();
    }
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            const int t = t0 + ty * 4 + a, r = r0 + tx * 4 + b;
            if (t < T && r < rows)
                Y[(size_t)t * ldy + r] = m3d_round(acc[a][b], mode);
        }
}

/* grid-stride; float4 when n % 4 == 0 and x is 16-byte aligned */
__global__ void k_round(float *x, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = m3d_round_bf16(x[i]);
}

__global__ void k_round4(float4 *x, int64_t n4)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        v.x = m3d_round_bf16(v.x);
        v.y = m3d_round_bf16(v.y);
        v.z = m3d_round_bf16(v.z);
        v.w = m3d_round_bf16(v.w);
        x[i] = v;
    }
}

static unsigned grid_for(int64_t n)
{
    const int64_t nb = (n + 255) / 256;
    return (unsigned)(nb > 65535 ? 65535 : nb);
}

hipError_t m3g_round(float *x, int64_t n, int mode, hipStream_t st)
{
    if (mode == 0 || n <= 0)
        return hipSuccess;
    if ((n & 3) == 0 && ((uintptr_t)x & 15) == 0)
        hipLaunchKernelGGL(k_round4, dim3(grid_for(n / 4)), dim3(256), 0, st, (float4 *)x, n / 4);
    else
        hipLaunchKernelGGL(k_round, dim3(grid_for(n)), dim3(256), 0, st, x, n);
    return hipGetLastError();
}

/* ---- BLAS context ---------------------------------------------------------- */
#ifdef M3_HAVE_BLASLT
#define LT_PLANS 32
#define LT_WS_BYTES ((size_t)32 << 20)
/* One cached cuBLASLt problem: descriptors + the heuristic's best algorithm. */
typedef struct lt_plan {
    int rows, cols, T, ldy, align_a, align_c;
    int ok; /* 0: no algorithm found (use cublasGemmEx) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
} lt_plan;
#endif

struct m3g_blas {
#ifdef M3_HAVE_BLAS
    hipblasHandle_t h;
    uint16_t *xb; /* bf16 staging of X */
    size_t max_x;
#else
    int unused;
#endif
#ifdef M3_HAVE_BLASLT
    cublasLtHandle_t lt;
    void *lt_ws;
    int use_lt;
    int nplans;
    lt_plan plans[LT_PLANS];
#endif
};

#ifdef M3_HAVE_BLAS
__global__ void k_to_bf16(uint16_t *out, const float *x, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = (uint16_t)(__float_as_uint(m3d_round_bf16(x[i])) >> 16);
}

/* 4 at a time: n4 float4 in, n4 uint2 (4 bf16) out */
__global__ void k_to_bf16_4(uint2 *out, const float4 *x, int64_t n4)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        uint2 o;
        o.x = (__float_as_uint(m3d_round_bf16(v.x)) >> 16) |
              (__float_as_uint(m3d_round_bf16(v.y)) & 0xffff0000u);
        o.y = (__float_as_uint(m3d_round_bf16(v.z)) >> 16) |
              (__float_as_uint(m3d_round_bf16(v.w)) & 0xffff0000u);
        out[i] = o;
    }
}

static hipError_t stage_bf16(uint16_t *xb, const float *X, int64_t n, hipStream_t st)
{
    if ((n & 3) == 0 && ((uintptr_t)X & 15) == 0)
        hipLaunchKernelGGL(k_to_bf16_4, dim3(grid_for(n / 4)), dim3(256), 0, st, (uint2 *)xb,
                           (const float4 *)X, n / 4);
    else
        hipLaunchKernelGGL(k_to_bf16, dim3(grid_for(n)), dim3(256), 0, st, xb, X, n);
    return hipGetLastError();
}
#endif

#ifdef M3_HAVE_BLASLT
static int ptr_align(const void *p)
{
    const uintptr_t u = (uintptr_t)p;
    int a = 256;
    while (a > 1 && (u & (uintptr_t)(a - 1)))
        a >>= 1;
    return a;
}

/* The cached plan for this problem (created on first use; heuristic query
 * is host-only, so this is safe inside stream capture). NULL: cache full or
 * descriptor creation failed. */
static lt_plan *lt_get(m3g_blas *b, int rows, int cols, int T, int ldy, int align_a, int align_c)
{
    for (int i = 0; i < b->nplans; i++) {
        lt_plan *p = &b->plans[i];
        if (p->rows == rows && p->cols == cols && p->T == T && p->ldy == ldy &&
            p->align_a == align_a && p->align_c == align_c)
            return p;
    }
    if (b->nplans == LT_PLANS)
        return NULL;
    lt_plan *p = &b->plans[b->nplans];
    memset(p, 0, sizeof *p);
    p->rows = rows, p->cols = cols, p->T = T, p->ldy = ldy;
    p->align_a = align_a, p->align_c = align_c;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const uint64_t wsb = LT_WS_BYTES;
    const uint32_t al_a = (uint32_t)align_a, al_b = 256, al_c = (uint32_t)align_c;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    /* column-major view: A = W as [cols x rows] (ld cols), op T; B = X as
     * [cols x T] (ld cols); C = D = Y as [rows x T] (ld ldy), fp32 */
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
        return NULL;
    if (cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, (uint64_t)cols, (uint64_t)rows, cols) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, (uint64_t)cols, (uint64_t)T, cols) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, (uint64_t)rows, (uint64_t)T, ldy) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        goto done; /* p->ok stays 0; the descriptors made so far are kept for free */
    if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                             sizeof wsb) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &al_a, sizeof al_a) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &al_b, sizeof al_b) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &al_c, sizeof al_c) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &al_c, sizeof al_c) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoGetHeuristic(b->lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &res,
                                       &nres) == CUBLAS_STATUS_SUCCESS &&
        nres > 0 && res.workspaceSize <= LT_WS_BYTES) {
        p->algo = res.algo;
        p->ws = res.workspaceSize;
        p->ok = 1;
    }
done:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    b->nplans++;
    return p;
}

static void lt_free(m3g_blas *b)
{
    for (int i = 0; i < b->nplans; i++) {
        lt_plan *p = &b->plans[i];
        if (p->a)
            cublasLtMatrixLayoutDestroy(p->a);
        if (p->b)
            cublasLtMatrixLayoutDestroy(p->b);
        if (p->c)
            cublasLtMatrixLayoutDestroy(p->c);
        if (p->op)
            cublasLtMatmulDescDestroy(p->op);
    }
    b->nplans = 0;
}
#endif

m3g_blas *m3g_blas_new(hipStream_t st, size_t max_x)
{
#ifdef M3_HAVE_BLAS
    m3g_blas *b = (m3g_blas *)calloc(1, sizeof *b);
    if (!b)
        return NULL;
    if (hipblasCreate(&b->h) != HIPBLAS_STATUS_SUCCESS) {
        free(b);
        return NULL;
    }
    hipblasSetStream(b->h, st);
    if (hipMalloc((void **)&b->xb, max_x * sizeof(uint16_t)) != hipSuccess) {
        hipblasDestroy(b->h);
        free(b);
        return NULL;
    }
    b->max_x = max_x;
#ifdef M3_HAVE_BLASLT
    /* Lt is an optimisation: without it (or its workspace) cublasGemmEx serves */
    if (cublasLtCreate(&b->lt) == CUBLAS_STATUS_SUCCESS) {
        if (hipMalloc(&b->lt_ws, LT_WS_BYTES) == hipSuccess) {
            b->use_lt = 1;
        } else {
            b->lt_ws = NULL;
            cublasLtDestroy(b->lt);
            b->lt = NULL;
        }
    }
#endif
    return b;
#else
    (void)st;
    (void)max_x;
    return NULL;
#endif
}

void m3g_blas_free(m3g_blas *b)
{
    if (!b)
        return;
#ifdef M3_HAVE_BLASLT
    lt_free(b);
    if (b->lt_ws)
        (void)hipFree(b->lt_ws);
    if (b->lt)
        cublasLtDestroy(b->lt);
#endif
#ifdef M3_HAVE_BLAS
    (void)hipFree(b->xb);
    hipblasDestroy(b->h);
#endif
    free(b);
}

int m3g_blas_use_lt(m3g_blas *b, int on)
{
#ifdef M3_HAVE_BLASLT
    if (b && b->lt) {
        b->use_lt = on != 0;
        return b->use_lt;
    }
#else
    (void)on;
#endif
    (void)b;
    return 0;
}

/* Whether gemm_run takes the vendor BLAS for this call: only where it is
 * exact to the contract: bf16 weights, bf16 mode (X values are already
 * bf16), and a contiguous output. */
static int gemm_blas_ok(m3g_mat W, int ldy, int T, int mode, const m3g_blas *blas)
{
#ifdef M3_HAVE_BLAS
    return blas && mode == 1 && W.dtype == M3G_BF16 && ldy == W.rows &&
           (size_t)T * W.cols <= blas->max_x;
#else
    (void)W, (void)ldy, (void)T, (void)mode, (void)blas;
    return 0;
#endif
}

/* GEMM path for T > 8 tokens (bf16 mode BLAS, else the tiled fallback).
 * raw: leave the BLAS product in fp32, unrounded (m3g_linear_product). */
static hipError_t gemm_run_r(float *Y, int ldy, const float *X, m3g_mat W, int T, int mode,
                             int raw, m3g_blas *blas, hipStream_t st)
{
#ifdef M3_HAVE_BLAS
    if (gemm_blas_ok(W, ldy, T, mode, blas)) {
        if (raw)
            mode = 0; /* m3g_round below: a no-op */
        const int64_t n = (int64_t)T * W.cols;
        hipError_t e = stage_bf16(blas->xb, X, n, st);
        if (e != hipSuccess)
            return e;
        const float one = 1.0f, zero = 0.0f;
#ifdef M3_HAVE_BLASLT
        lt_plan *p = blas->use_lt ? lt_get(blas, W.rows, W.cols, T, ldy, ptr_align(W.data),
                                           ptr_align(Y))
                                  : NULL;
        if (p && p->ok) {
            if (cublasLtMatmul(blas->lt, p->op, &one, W.data, p->a, blas->xb, p->b, &zero, Y,
                               p->c, Y, p->c, &p->algo, blas->lt_ws, p->ws,
                               st) != CUBLAS_STATUS_SUCCESS)
                return hipErrorUnknown;
            return m3g_round(Y, (int64_t)T * W.rows, mode, st);
        }
#endif
        if (hipblasGemmEx(blas->h, HIPBLAS_OP_T, HIPBLAS_OP_N, W.rows, T, W.cols, &one, W.data,
                          HIPBLAS_R_16B, W.cols, blas->xb, HIPBLAS_R_16B, W.cols, &zero, Y,
                          HIPBLAS_R_32F, ldy, HIPBLAS_COMPUTE_32F,
                          HIPBLAS_GEMM_DEFAULT) != HIPBLAS_STATUS_SUCCESS)
            return hipErrorUnknown;
        return m3g_round(Y, (int64_t)T * W.rows, mode, st);
    }
#else
    (void)blas, (void)raw;
#endif
    hipLaunchKernelGGL(k_gemm, dim3((W.rows + GT - 1) / GT, (T + GT - 1) / GT), dim3(256), 0, st,
                       Y, ldy, X, W.data, W.dtype, T, W.rows, W.cols, mode);
    return hipGetLastError();
}

static hipError_t gemm_run(float *Y, int ldy, const float *X, m3g_mat W, int T, int mode,
                           m3g_blas *blas, hipStream_t st)
{
    return gemm_run_r(Y, ldy, X, W, T, mode, 0, blas, st);
}

hipError_t m3g_linear_product(float *Y, int ldy, const float *X, m3g_mat W, int T, int mode,
                              m3g_blas *blas, hipStream_t st)
{
    if (T > 8 && gemm_blas_ok(W, ldy, T, mode, blas))
        return gemm_run_r(Y, ldy, X, W, T, mode, 1, blas, st);
    return m3g_linear(Y, ldy, X, W, T, 0, NULL, st); /* exact order, not rounded */
}

/* Rows [r0, r0 + n) of W as their own matrix. */
static m3g_mat mat_rows(m3g_mat W, int r0, int n)
{
    m3g_mat s = W;
    s.rows = n;
    s.data = (const char *)W.data + (size_t)r0 * (size_t)W.cols * (W.dtype == M3G_BF16 ? 2 : 4);
    return s;
}

/* The GEMV output description of nseg (<= M3G_MAX_SEG) segments: their
 * outputs, strides and cumulative row ends; returns the total rows. */
static int gemv_out_of(gemv_out *o, const m3g_seg *seg, int nseg)
{
    memset(o, 0, sizeof *o);
    int r = 0;
    for (int s = 0; s < nseg; s++) {
        o->y[s] = seg[s].y;
        o->ld[s] = seg[s].ld;
        r += seg[s].rows;
        o->end[s] = r;
    }
    o->nseg = nseg;
    return r;
}

hipError_t m3g_linear_multi(const float *X, m3g_mat W, const m3g_seg *seg, int nseg, int T,
                            int mode, m3g_blas *blas, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (nseg < 1 || nseg > M3G_MAX_SEG)
        return hipErrorInvalidValue;
    gemv_out o;
    const int r = gemv_out_of(&o, seg, nseg);
    if (r != W.rows)
        return hipErrorInvalidValue;
    if (mode == 0 || T <= 8) /* exact order (fp32) or streaming GEMV: one pass */
        return gemv_run(o, X, W, T, mode, st);
    for (int s = 0, r0 = 0; s < nseg; r0 += seg[s].rows, s++) {
        hipError_t e = gemm_run(seg[s].y, seg[s].ld, X, mat_rows(W, r0, seg[s].rows), T, mode,
                                blas, st);
        if (e != hipSuccess)
            return e;
    }
    return hipSuccess;
}

hipError_t m3g_linear(float *Y, int ldy, const float *X, m3g_mat W, int T, int mode,
                      m3g_blas *blas, hipStream_t st)
{
    const m3g_seg s = {Y, ldy, W.rows};
    return m3g_linear_multi(X, W, &s, 1, T, mode, blas, st);
}

hipError_t m3g_linear_swiglu(float *act, int ld, float *up_tmp, const float *X, m3g_mat W, int T,
                             float alpha, float limit, float beta, int mode, m3g_blas *blas,
                             hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if ((W.rows & 1) != 0)
        return hipErrorInvalidValue;
    const int I = W.rows / 2;
    if (mode == 0 || T <= 8) {
        gemv_out o;
        memset(&o, 0, sizeof o);
        o.y[0] = act;
        o.ld[0] = ld;
        o.end[0] = W.rows;
        o.nseg = 1;
        o.half = I;
        o.alpha = alpha, o.limit = limit, o.beta = beta;
        return gemv_run(o, X, W, T, mode, st);
    }
    if (ld != I || !up_tmp)
        return hipErrorInvalidValue;
    hipError_t e;
    if ((e = gemm_run(act, I, X, mat_rows(W, 0, I), T, mode, blas, st)) != hipSuccess ||
        (e = gemm_run(up_tmp, I, X, mat_rows(W, I, I), T, mode, blas, st)) != hipSuccess)
        return e;
    return m3g_swiglu(act, act, up_tmp, (int64_t)T * I, alpha, limit, beta, mode, st);
}

const char *m3g_gemv_variant_name(int variant)
{
    return variant >= 0 && variant < GEMV_NCFG ? gemv_cfgs[variant].name : NULL;
}

hipError_t m3g_gemv_variant(int variant, const float *X, m3g_mat W, const m3g_seg *seg, int nseg,
                            const float *swiglu, int T, hipStream_t st)
{
    if (variant < 0 || variant >= GEMV_NCFG || T < 1 || T > 8 || nseg < 1 ||
        nseg > M3G_MAX_SEG || (swiglu && (nseg != 1 || (W.rows & 1) != 0)))
        return hipErrorInvalidValue;
    gemv_out o;
    const int r = gemv_out_of(&o, seg, nseg);
    if (swiglu) {
        o.end[0] = W.rows;
        o.half = W.rows / 2;
        o.alpha = swiglu[0], o.limit = swiglu[1], o.beta = swiglu[2];
    } else if (r != W.rows) {
        return hipErrorInvalidValue;
    }
    return gemv_run(o, X, W, T, 1, st, variant == 0 ? NULL : &gemv_cfgs[variant]);
}

const char *m3g_gemv_ceiling_name(int variant)
{
    static const char *const names[] = {"stream ceiling", "stream ceiling no PDL",
                                        "stream ceiling 2/SM", "stream ceiling u4"};
    return variant >= 0 && variant < 4 ? names[variant] : NULL;
}

hipError_t m3g_gemv_ceiling(int variant, m3g_mat W, float *sink, int nsink, hipStream_t st)
{
    const int64_t bytes = (int64_t)W.rows * W.cols * (W.dtype == M3G_BF16 ? 2 : 4);
    if (variant < 0 || variant > 3 || nsink < 1 || (bytes & 15) != 0 ||
        ((uintptr_t)W.data & 15) != 0)
        return hipErrorInvalidValue;
    /* 0: 4 blocks per SM (fills the SM's registers, as k_gemv_pers), PDL;
     * 1: the same without PDL; 2: 2 blocks per SM, PDL (the next launch's
     * blocks fit beside it and stream before the wait: back-to-back streams);
     * 3: as 0 with 4 loads per lane per step instead of 8 */
    const int pdl = variant != 1, nb = BAL_SMS * (variant == 2 ? 2 : 4);
    if (variant == 3)
        GEMV_LAUNCH((k_stream_ceiling<4>), nb, 0, pdl, st, (const uint4 *)W.data, bytes / 16, sink,
                    nsink);
    GEMV_LAUNCH((k_stream_ceiling<8>), nb, 0, pdl, st, (const uint4 *)W.data, bytes / 16, sink,
                nsink);
}
