/* wgmma.cuh — Hopper (sm_90a) device helpers for the warpgroup tensor-core
 * kernels: TMA tile loads completed on an mbarrier's transaction count,
 * shared-memory matrix descriptors, and wgmma m64n128k16 bf16 with fp32
 * accumulators (A from shared memory or from registers).
 *
 * The helpers exist when M3_TC is 1 (nvcc for NVIDIA); their bodies are
 * compiled only in the sm_90a pass (M3_WG_CODE 1), so the compute_90 PTX
 * that the build also embeds for later GPUs carries none of them. Callers
 * check m3w_device_ok() on the host before launching a kernel that uses
 * them.
 *
 * Layouts (PTX ISA, "asynchronous warpgroup-level matrix shared memory
 * layout"): every operand tile here is bf16 in the 128-byte swizzle, stored
 * as column chunks of 64 elements, each chunk [rows][128 B] with the
 * 16-byte piece p of row j at j * 128 + ((p ^ (j % 8)) * 16); 8-row groups
 * are 1024 B apart; tiles are 1024-byte aligned. This is the layout a TMA
 * box of 64 x rows with CU_TENSOR_MAP_SWIZZLE_128B writes.
 *  - K-major operand (the reduction dimension contiguous: Q as A and K as B
 *    of S = Q K^T): stride byte offset (SBO) 1024, leading byte offset
 *    unused; k-step i starts at chunk i / 4, byte (i % 4) * 32.
 *  - MN-major B (V of O = P V, keys as the reduction): SBO 1024 (8 keys),
 *    LBO = the chunk size (the next 64 output columns); k-step i (16 keys)
 *    starts at byte i * 2048; the instruction's transpose-B bit set.
 * Accumulator layout of m64nN (per warp w of the warpgroup, lane = 4 r + c):
 * d[4 j + e] is row 16 w + r + 8 (e >> 1), column 8 j + 2 c + (e & 1), the
 * mma.sync C layout per 8 columns; the register A operand of m64k16 is the
 * mma.sync m16n8k16 A layout of the warp's 16 rows.
 */
#ifndef M3_GPU_WGMMA_CUH
#define M3_GPU_WGMMA_CUH

#include "tc.cuh"

#if M3_TC
#include <cuda.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define M3_WG_CODE 1
#else
#define M3_WG_CODE 0
#endif

/* 1 iff the current device runs this build's sm_90a code (compute
 * capability 9.0). */
static inline int m3w_device_ok(void)
{
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return 0;
    return major == 9 && minor == 0;
}

/* A 2-D TMA map of a bf16 matrix [rows][cols] (row stride ld elements)
 * read in boxes of 64 columns x box_rows rows with the 128-byte swizzle.
 * Returns 0, or -1 when the driver lacks the encoder or refuses the map. */
static inline int m3w_tensor_map(CUtensorMap *tm, const void *base, uint64_t cols, uint64_t rows,
                                 uint64_t ld, uint32_t box_rows)
{
    typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                  const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                  const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    void *fn = NULL;
    cudaDriverEntryPointQueryResult qr;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &qr) != cudaSuccess ||
        qr != cudaDriverEntryPointSuccess || !fn)
        return -1;
    if (((uintptr_t)base & 15) != 0 || (ld * 2) % 16 != 0)
        return -1;
    const cuuint64_t dims[2] = {cols, rows}, strides[1] = {ld * 2};
    const cuuint32_t box[2] = {64, box_rows}, es[2] = {1, 1};
    return ((encode_fn)fn)(tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides,
                           box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
               ? 0
               : -1;
}

/* Shared-memory matrix descriptor, 128-byte swizzle, in two words: the low
 * word holds the start address (shared space, 16-byte units) and the
 * leading byte offset; adding n to it moves the start by 16 n bytes (no
 * carry: shared addresses stay below 2^18). m3w_desc joins it with the
 * high word (stride byte offset, swizzle mode). */
__device__ __forceinline__ uint32_t m3w_desc_lo(uint32_t saddr, uint32_t lbo)
{
    return ((saddr & 0x3ffffu) >> 4) | (((lbo >> 4) & 0x3fffu) << 16);
}
__device__ __forceinline__ uint64_t m3w_desc(uint32_t lo, uint32_t sbo)
{
    return (uint64_t)lo | ((uint64_t)(((sbo >> 4) & 0x3fffu) | (1u << 30)) << 32);
}

/* Orders earlier register writes before the next wgmma (warpgroup-wide). */
__device__ __forceinline__ void m3w_fence(void)
{
#if M3_WG_CODE
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
/* Closes the group of wgmma issued since the last commit. */
__device__ __forceinline__ void m3w_commit(void)
{
#if M3_WG_CODE
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/* Waits until at most N committed groups are pending. */
template <int N> __device__ __forceinline__ void m3w_wait(void)
{
#if M3_WG_CODE
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/* Pins a register across the asynchronous wgmma: reads of it are not
 * hoisted above, nor writes sunk below, this point. */
__device__ __forceinline__ void m3w_pin(float &x)
{
    asm volatile("" : "+f"(x)::"memory");
}
__device__ __forceinline__ void m3w_pin(uint32_t &x)
{
    asm volatile("" : "+r"(x)::"memory");
}

/* Generic-proxy shared-memory writes made visible to the async proxy
 * (wgmma operand reads, TMA). */
__device__ __forceinline__ void m3w_fence_proxy(void)
{
#if M3_WG_CODE
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* Barrier `id` (1..15) over `n` threads (whole warps). */
__device__ __forceinline__ void m3w_bar(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

/* One arrival on bar that also expects `bytes` of TMA transactions. */
__device__ __forceinline__ void m3w_expect_tx(uint64_t *bar, uint32_t bytes)
{
#if M3_WG_CODE
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(m3t_smem(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}

/* TMA: the box at (x columns, y rows) of tm into dst, completing on bar. */
__device__ __forceinline__ void m3w_tma2d(void *dst, const CUtensorMap *tm, int x, int y,
                                          uint64_t *bar)
{
#if M3_WG_CODE
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(m3t_smem(dst)),
                 "l"((uint64_t)(uintptr_t)tm), "r"(x), "r"(y), "r"(m3t_smem(bar))
                 : "memory");
#endif
}

/* TMA: the box at (x columns, y rows) of tm into L2 only (a prefetch). */
__device__ __forceinline__ void m3w_tma2d_l2(const CUtensorMap *tm, int x, int y)
{
#if M3_WG_CODE
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global [%0, {%1, %2}];\n" ::"l"(
                     (uint64_t)(uintptr_t)tm),
                 "r"(x), "r"(y)
                 : "memory");
#endif
}

#define M3W_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define M3W_D16(i) M3W_D4(i), M3W_D4(i + 4), M3W_D4(i + 8), M3W_D4(i + 12)
#define M3W_D64 M3W_D16(0), M3W_D16(16), M3W_D16(32), M3W_D16(48)
#define M3W_W4(i) "=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3])
#define M3W_W16(i) M3W_W4(i), M3W_W4(i + 4), M3W_W4(i + 8), M3W_W4(i + 12)
#define M3W_W64 M3W_W16(0), M3W_W16(16), M3W_W16(32), M3W_W16(48)
#define M3W_R64                                                                             \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "               \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "      \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "      \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

/* d (64 x 128, fp32) += A (64 x 16, K-major descriptor da) x B (16 x 128,
 * K-major descriptor db). Asynchronous: commit and wait. */
__device__ __forceinline__ void m3w_mma_ss(float d[64], uint64_t da, uint64_t db)
{
#if M3_WG_CODE
    asm volatile("{\n wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " M3W_R64
                 ", %64, %65, 1, 1, 1, 0, 0;\n}\n"
                 : M3W_D64
                 : "l"(da), "l"(db));
#else
    (void)d, (void)da, (void)db;
#endif
}

/* d (64 x 128, fp32) = A x B (m3w_mma_ss without the old d); d is only written,
 * so its registers need not be live before. */
__device__ __forceinline__ void m3w_mma_ss0(float d[64], uint64_t da, uint64_t db)
{
#if M3_WG_CODE
    asm volatile("{\n wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " M3W_R64
                 ", %64, %65, 0, 1, 1, 0, 0;\n}\n"
                 : M3W_W64
                 : "l"(da), "l"(db));
#else
    (void)d, (void)da, (void)db;
#endif
}

/* d (64 x 128, fp32) += A (64 x 16 bf16 in registers, a) x B (16 x 128,
 * MN-major descriptor db, transposed on load). Asynchronous. */
__device__ __forceinline__ void m3w_mma_rs(float d[64], const uint32_t a[4], uint64_t db)
{
#if M3_WG_CODE
    asm volatile("{\n wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " M3W_R64
                 ", {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n}\n"
                 : M3W_D64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
#else
    (void)d, (void)a, (void)db;
#endif
}

#endif /* M3_TC */
#endif
