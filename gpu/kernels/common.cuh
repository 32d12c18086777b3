/* common.cuh — device helpers shared by every gpu/ kernel.
 *
 * Spec: M3-NUM-BF16-1 (bf16 = IEEE round-to-nearest-even of the fp32 value,
 * NaN stays NaN: m3d_round_bf16 matches ref/dtype.h m3_round_bf16 bit for
 * bit), M3-NUM-MODE-1 (mode 0 fp32 golden: nothing rounded; mode 1 bf16).
 *
 * Conventions for all kernels: activations and caches are fp32 arrays whose
 * values are already bf16-representable in bf16 mode (so the dumps compare
 * directly with bin/m3-ref); weights are raw bf16 bits (uint16_t) or fp32,
 * chosen by m3g_mat.dtype. No kernel allocates.
 */
#ifndef M3_GPU_COMMON_CUH
#define M3_GPU_COMMON_CUH

#include <stdint.h>
#include "../hip_compat.h"

#define M3G_F32 0
#define M3G_BF16 1

__device__ __forceinline__ float m3d_bf16_to_f32(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ float m3d_round_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return __uint_as_float(((u >> 16) | 0x40u) << 16);
    u += 0x7fffu + ((u >> 16) & 1u);
    return __uint_as_float((u >> 16) << 16);
}

/* Round per mode (0 fp32: identity; 1 bf16). */
__device__ __forceinline__ float m3d_round(float f, int mode)
{
    return mode ? m3d_round_bf16(f) : f;
}

/* Element i of a weight stored as dtype (M3G_F32 or M3G_BF16). */
__device__ __forceinline__ float m3d_load(const void *p, int dtype, size_t i)
{
    return dtype == M3G_BF16 ? m3d_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Sum over the 32 lanes of a warp (every lane gets the total). Butterfly
 * order is fixed, so results are deterministic run to run. */
__device__ __forceinline__ float m3d_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += m3_shfl_xor(v, o);
    return v;
}

__device__ __forceinline__ float m3d_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, m3_shfl_xor(v, o));
    return v;
}

/* Block-wide sum for blockDim.x a multiple of 32 and <= 1024; every thread
 * gets the total. sh: >= 32 floats of shared memory. */
__device__ __forceinline__ float m3d_block_sum(float v, float *sh)
{
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = m3d_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return m3d_warp_sum(v);
}

/* Physical cache slot of logical position pos: paged KV cache with
 * page == MSA block (page_table[pos / B] is the page id). */
__device__ __forceinline__ int64_t m3d_slot(const int32_t *page_table, int64_t pos, int B)
{
    return (int64_t)page_table[pos / B] * B + pos % B;
}

/* ---- exponent range words of a bf16 index-K cache (msa.cu "FMA exactness") ----
 * rng[0] = min over the nonzero values written of max(exponent field, 1)
 * (M3G_IKR_NONE when none), rng[1] = max exponent field (0 when none).
 * Written by msa.cu (m3g_to_bf16_ranged, m3g_ik_range_scan) and norm_rope.cu
 * (m3g_attn_prologue), read by the streaming indexer. */
#define M3G_IKR_NONE 0x1ffu

__device__ __forceinline__ void m3d_atomic_min_u(unsigned *p, unsigned v)
{
#if defined(M3_EMU)
    unsigned o = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < o && !__atomic_compare_exchange_n(p, &o, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        ;
#else
    atomicMin(p, v);
#endif
}

__device__ __forceinline__ void m3d_atomic_max_u(unsigned *p, unsigned v)
{
#if defined(M3_EMU)
    unsigned o = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v > o && !__atomic_compare_exchange_n(p, &o, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        ;
#else
    atomicMax(p, v);
#endif
}

/* Fold one bf16 value h into a thread's (lo, hi). */
__device__ __forceinline__ void m3d_ikr_acc(unsigned &lo, unsigned &hi, unsigned h)
{
    const unsigned f = (h >> 7) & 0xffu;
    if (h & 0x7fffu)
        lo = (f > 1u ? f : 1u) < lo ? (f > 1u ? f : 1u) : lo;
    hi = f > hi ? f : hi;
}

/* Warp min / max of (lo, hi), then one atomic pair per warp into rng. Every
 * thread of the block must call it (warp shuffles). */
__device__ __forceinline__ void m3d_ikr_publish(unsigned *rng, unsigned lo, unsigned hi)
{
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned l2 = (unsigned)m3_shfl_xor_i((int)lo, o); /* values <= 0x1ff */
        const unsigned h2 = (unsigned)m3_shfl_xor_i((int)hi, o);
        lo = l2 < lo ? l2 : lo;
        hi = h2 > hi ? h2 : hi;
    }
    if ((threadIdx.x & 31) == 0) {
        if (lo != M3G_IKR_NONE)
            m3d_atomic_min_u(&rng[0], lo);
        if (hi != 0)
            m3d_atomic_max_u(&rng[1], hi);
    }
}

/* Launch kern over grid x block, with shm bytes of dynamic shared memory, on
 * st. With pdl, on NVIDIA, as a programmatic dependent launch: the kernel
 * may start before the previous kernel of the stream ends, and must wait
 * (griddepcontrol.wait) before it reads that kernel's outputs. A plain
 * launch when PDL is refused, and on other platforms. Host only. */
template <typename... KA, typename... A>
static hipError_t m3d_launch(void (*kern)(KA...), dim3 grid, dim3 block, size_t shm, int pdl,
                             hipStream_t st, A... args)
{
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__) && !defined(M3_EMU)
    if (pdl) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1] = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = shm;
        cfg.stream = st;
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        if (cudaLaunchKernelEx(&cfg, kern, args...) == cudaSuccess)
            return hipSuccess;
        (void)hipGetLastError(); /* PDL refused: plain launch */
    }
#else
    (void)pdl;
#endif
    hipLaunchKernelGGL(kern, grid, block, shm, st, args...);
    return hipGetLastError();
}

#if !defined(M3_EMU)
/* SMs of the current device (host only; 1 if the query fails): grid sizing. */
static inline int m3d_sm_count(void)
{
    int dev = 0, nsm = 0;
    if (hipGetDevice(&dev) != hipSuccess ||
        hipDeviceGetAttribute(&nsm, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess ||
        nsm < 1)
        return 1;
    return nsm;
}
#endif

#endif
