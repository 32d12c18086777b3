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

#endif
