/* moe.cu — MoE router (fp32 sigmoid + bias top-k + renormalise), the fused
 * SwiGLU-OAI activation, and the routed/shared combine.
 *
 * Must match: ref/moe.c m3_router (the same selection rule: each pick the
 * best candidate strictly after the previous one, ties to the lower id; idx
 * ascending, weights aligned) and the combine of m3_moe; ref/mlp.c
 * m3_swiglu_oai.
 * Spec: M3-MOE-ROUTER-* (fp32 always, whatever the mode), M3-MOE-COMBINE-1,
 * M3-MOE-SHARED-1, M3-MLP-SWIGLU-1, M3-NUM-BF16-2 items 7, 8.
 *
 * Design: the router in two launches (scores spread over E / 8 blocks per
 * token, then the selection); the routed experts' gate/up GEMVs and
 * k_swiglu fused as linear.cu m3g_gemv_grouped_swiglu in bin/m3-gpu
 * (m3g_swiglu stays for prefill and the dense MLP); both router kernels and
 * the combine launched with PDL (m3d_launch), the scores kernel asking L2
 * for its weight row before the wait.
 *
 * Known difference: the router logits are warp-tree sums, not the
 * reference's 8-partial order, so a near-tie of two experts may flip (the
 * kit's tie tolerance covers this); the top-k itself is exact.
 */
#include <math.h>
#include "common.cuh"
#include "kernels.h"

#define ROUTER_MAXE 1024

/* Programmatic dependent launch (NVIDIA sm_90, CUDA only; no-ops and plain
 * launches elsewhere). Each kernel below releases the next launch at its
 * start and, when itself launched with the PDL attribute (m3d_launch, pdl
 * != 0), waits for the previous kernel (griddepcontrol.wait: that grid
 * complete, its writes visible) before it reads any activation or writes
 * anything; before the wait it touches only weights (the router scores'
 * L2 prefetch of its weight row). So PDL changes no value: it lets these
 * launches start, and the router stream its weights, while the previous
 * kernel finishes (the residual + RMSNorm before the router releases at
 * its start; the shared expert's GEMVs before the combine). */
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
__device__ __forceinline__ void moe_pdl_release() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void moe_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
/* n bytes at p into L2 (sm_90 bulk prefetch; p 16-byte aligned, n % 16 == 0) */
__device__ __forceinline__ void moe_l2_prefetch(const void *p, unsigned n)
{
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
}
#else
__device__ __forceinline__ void moe_pdl_release() {}
__device__ __forceinline__ void moe_pdl_wait() {}
__device__ __forceinline__ void moe_l2_prefetch(const void *p, unsigned n) { (void)p, (void)n; }
#endif

__device__ __forceinline__ int router_before(float va, int a, float vb, int b)
{
    return va > vb || (va == vb && a < b);
}

/* Router scores: grid (ceil(E / 2), T), block 64, one warp per (token,
 * expert): logit = lane-strided partial sums + warp tree (m3d_warp_sum),
 * then the sigmoid, into scores [T, E]. Spread over E / 2 blocks per token
 * so a decode step streams the 3 MB fp32 router with many SMs, not one. */
__global__ void k_router_scores(float *scores, const float *x, const void *rw, int rdt, int E,
                                int H)
{
    moe_pdl_release();
    const int t = blockIdx.y, lane = threadIdx.x & 31;
    const int e = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (e >= E) {
        moe_pdl_wait();
        return;
    }
    if (lane == 0 && blockIdx.y == 0) { /* the weight row does not depend on x */
        const size_t esz = rdt == M3G_BF16 ? 2 : 4;
        const char *row = (const char *)rw + (size_t)e * H * esz;
        if (((uintptr_t)row & 15) == 0 && H * esz >= 16)
            moe_l2_prefetch(row, (unsigned)(H * esz) & ~15u);
    }
    moe_pdl_wait(); /* x is the previous kernel's output */
    const float *xr = x + (size_t)t * H;
    float a = 0.0f; /* one accumulator, c ascending: loads batched, sums in order */
    for (int c0 = lane; c0 < H; c0 += 8 * 32) {
        float wv[8], xv[8];
        for (int j = 0; j < 8; j++) {
            const int c = c0 + 32 * j;
            wv[j] = c < H ? m3d_load(rw, rdt, (size_t)e * H + c) : 0.0f;
            xv[j] = c < H ? xr[c] : 0.0f;
        }
        for (int j = 0; j < 8; j++)
            if (c0 + 32 * j < H)
                a += wv[j] * xv[j];
    }
    a = m3d_warp_sum(a);
    if (lane == 0)
        scores[(size_t)t * E + e] = 1.0f / (1.0f + expf(-a));
}

/* Router selection: grid T, block 256: scores + bias into shared memory,
 * then the reference's serial top-k on thread 0. */
__global__ void k_router_select(int32_t *idx, float *wout, const float *scores, int E,
                                const void *bias, int bdt, int k)
{
    __shared__ float sc[ROUTER_MAXE], sb[ROUTER_MAXE];
    moe_pdl_release();
    moe_pdl_wait(); /* scores: the previous kernel's output */
    const int t = blockIdx.x;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        sc[e] = scores[(size_t)t * E + e];
        sb[e] = sc[e] + (bias ? m3d_load(bias, bdt, e) : 0.0f);
    }
    __syncthreads();
    if (threadIdx.x >= 32)
        return;
    /* the reference's rule: pick j is the best candidate (higher value, then
     * lower id) strictly after pick j - 1 in that order. "Best" is a total
     * order, so the warp finds it as a reduction: each lane its best of
     * e = lane (mod 32), then a shuffle tree. */
    const int lane = threadIdx.x;
    int32_t *id = idx + (size_t)t * k;
    float last_v = INFINITY;
    int last_e = -1;
    for (int j = 0; j < k; j++) {
        int pick = -1;
        float pv = 0.0f;
        for (int e = lane; e < E; e += 32) {
            const float v = sb[e];
            if (last_e >= 0 && !router_before(last_v, last_e, v, e))
                continue;
            if (pick < 0 || router_before(v, e, pv, pick)) {
                pick = e;
                pv = v;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const int oe = m3_shfl_xor_i(pick, o);
            const float ov = m3_shfl_xor(pv, o);
            if (oe >= 0 && (pick < 0 || router_before(ov, oe, pv, pick))) {
                pick = oe;
                pv = ov;
            }
        }
        if (pick < 0)
            pick = j < E ? j : E - 1;
        last_v = pv;
        last_e = pick;
        if (lane == 0)
            id[j] = pick;
    }
    if (lane != 0)
        return;
    for (int a = 1; a < k; a++) {
        const int32_t v = id[a];
        int b = a;
        for (; b > 0 && id[b - 1] > v; b--)
            id[b] = id[b - 1];
        id[b] = v;
    }
    float sum = 0.0f;
    for (int j = 0; j < k; j++)
        sum += sc[id[j]];
    for (int j = 0; j < k; j++)
        wout[(size_t)t * k + j] = sc[id[j]] / sum;
}

hipError_t m3g_router_ex(int32_t *idx, float *w, float *scores, const float *x, m3g_mat router,
                         const void *bias, int bias_dtype, int T, int k, int pdl, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    if (router.rows > ROUTER_MAXE || k <= 0 || k > 32)
        return hipErrorInvalidValue;
    hipError_t e = m3d_launch(k_router_scores, dim3((unsigned)(router.rows + 1) / 2, T),
                              dim3(64), 0, pdl, st, scores, x, router.data, router.dtype, router.rows,
                              router.cols);
    if (e != hipSuccess)
        return e;
    return m3d_launch(k_router_select, dim3(T), dim3(256), 0, pdl, st, idx, w, (const float *)scores,
                      router.rows, bias, bias_dtype, k);
}

hipError_t m3g_router(int32_t *idx, float *w, float *scores, const float *x, m3g_mat router,
                      const void *bias, int bias_dtype, int T, int k, hipStream_t st)
{
    return m3g_router_ex(idx, w, scores, x, router, bias, bias_dtype, T, k, 1, st);
}

__global__ void k_swiglu(float *act, const float *gate, const float *up, int64_t n, float alpha,
                         float limit, float beta, int mode)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float gv = gate[i], uv = up[i];
        const float g = gv > limit ? limit : gv;
        const float u = uv > limit ? limit : (uv < -limit ? -limit : uv);
        const float sig = 1.0f / (1.0f + expf(-(alpha * g)));
        act[i] = m3d_round((u + beta) * (g * sig), mode);
    }
}

hipError_t m3g_swiglu(float *act, const float *gate, const float *up, int64_t n, float alpha,
                      float limit, float beta, int mode, hipStream_t st)
{
    if (n <= 0)
        return hipSuccess;
    int64_t nb = (n + 255) / 256;
    if (nb > 65535)
        nb = 65535;
    hipLaunchKernelGGL(k_swiglu, dim3((unsigned)nb), dim3(256), 0, st, act, gate, up, n, alpha,
                       limit, beta, mode);
    return hipGetLastError();
}

/* grid T, block 256. */
/* grid (ceil(H / 1024), T), block 256: each thread 4 columns h; per
 * column the reference's order (ascending expert slot). y must not overlap
 * ye, w or shared. */
__global__ void k_moe_combine(float *__restrict__ y, const float *__restrict__ ye,
                              const float *__restrict__ w, const float *__restrict__ shared,
                              int k, int H, float scale, int mode)
{
    moe_pdl_release();
    moe_pdl_wait(); /* ye, w, shared: earlier kernels' outputs */
    const int t = blockIdx.y;
    const int h0 = blockIdx.x * 4 * blockDim.x + threadIdx.x;
    for (int q = 0; q < 4; q++) {
        const int h = h0 + q * blockDim.x;
        if (h >= H)
            continue;
        float acc = 0.0f;
        for (int j = 0; j < k; j++) /* ascending expert id, as ref */
            acc += m3d_round(w[(size_t)t * k + j] * ye[((size_t)t * k + j) * H + h], mode);
        acc = m3d_round(m3d_round(acc, mode) * scale, mode);
        if (shared)
            acc = m3d_round(acc + shared[(size_t)t * H + h], mode);
        y[(size_t)t * H + h] = acc;
    }
}

hipError_t m3g_moe_combine_ex(float *y, const float *ye, const float *w, const float *shared,
                              int T, int k, int H, float scale, int mode, int pdl, hipStream_t st)
{
    if (T <= 0)
        return hipSuccess;
    return m3d_launch(k_moe_combine, dim3((unsigned)(H + 1023) / 1024, T), dim3(256), 0, pdl, st, y,
                      ye, w, shared, k, H, scale, mode);
}

hipError_t m3g_moe_combine(float *y, const float *ye, const float *w, const float *shared, int T,
                           int k, int H, float scale, int mode, hipStream_t st)
{
    return m3g_moe_combine_ex(y, ye, w, shared, T, k, H, scale, mode, 1, st);
}
