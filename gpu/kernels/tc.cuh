/* tc.cuh — NVIDIA-only device helpers shared by the tensor-core kernels:
 * cp.async global -> shared copies, ldmatrix, mma.sync m16n8k16 bf16 with
 * fp32 accumulators, bf16x2 packing, programmatic dependent launch (PDL).
 *
 * Everything here is inline PTX for sm_80+ and exists only when
 * M3_TC is 1 (nvcc for NVIDIA, not the CPU emulation, not hipcc/AMD);
 * callers keep a portable path for M3_TC == 0.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16, .bf16): with lane = 4 r + c,
 * A (16 x 16, row) regs {a0, a1, a2, a3} hold rows (r, r + 8, r, r + 8),
 * columns (2c, 2c + 1) + (0, 0, 8, 8); B (16 x 8, col) regs {b0, b1} hold
 * rows (2c, 2c + 1) + (0, 8) of column r; C/D (16 x 8) floats {d0..d3}:
 * (row r, cols 2c, 2c + 1), (row r + 8, cols 2c, 2c + 1). Numerics: bf16 x
 * bf16 products are exact in fp32; the sums are fp32 (tensor-core order).
 */
#ifndef M3_GPU_TC_CUH
#define M3_GPU_TC_CUH

#include <stdint.h>
#include "../hip_compat.h"

#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__) && !defined(M3_EMU)
#define M3_TC 1

/* shared-memory address of a generic pointer into shared memory */
__device__ __forceinline__ uint32_t m3t_smem(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte global -> shared copy (L2 only); src_bytes 0 zero-fills dst. */
__device__ __forceinline__ void m3t_cp16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(m3t_smem(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void m3t_cp_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* wait until at most N of this thread's committed groups are pending */
template <int N> __device__ __forceinline__ void m3t_cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* four 8x8 b16 matrices; lanes 8i .. 8i + 7 give the row addresses of matrix i */
__device__ __forceinline__ void m3t_ldsm4(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(m3t_smem(p)));
}
/* the same, each matrix transposed */
__device__ __forceinline__ void m3t_ldsm4t(uint32_t r[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(m3t_smem(p)));
}

/* d += a (16x16 bf16, row) * b (16x8 bf16, col), fp32 accumulators. */
__device__ __forceinline__ void m3t_mma(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Flash-style building blocks for one warp's 16 rows. Tiles in shared memory
 * are bf16, one key per row, row stride LD elements (rows 16-byte aligned).
 * m3t_qk16: s0, s1 (keys 16 np .. 16 np + 7, + 8 .. + 15 of the tile Ks) +=
 * a (A fragments of columns 16 kk .. 16 kk + 15 of the rows) x K^T. */
__device__ __forceinline__ void m3t_qk16(float s0[4], float s1[4], const uint32_t a[4],
                                         const uint16_t *Ks, int LD, int np, int kk, int lane)
{
    const int mi = lane >> 3, r8 = lane & 7;
    uint32_t b[4];
    m3t_ldsm4(b, Ks + ((2 * np + (mi >> 1)) * 8 + r8) * LD + kk * 16 + 8 * (mi & 1));
    m3t_mma(s0, a, b[0], b[1]);
    m3t_mma(s1, a, b[2], b[3]);
}

/* m3t_pv16: o0, o1 (output columns 16 np .. 16 np + 7, + 8 .. + 15) += p (A
 * fragments: the rows' bf16 probabilities of keys 16 kv .. 16 kv + 15 of the
 * tile) x V, with the V tile at Vs (loaded transposed). */
__device__ __forceinline__ void m3t_pv16(float o0[4], float o1[4], const uint32_t p[4],
                                         const uint16_t *Vs, int LD, int kv, int np, int lane)
{
    const int mi = lane >> 3, r8 = lane & 7;
    uint32_t vb[4];
    m3t_ldsm4t(vb, Vs + (kv * 16 + 8 * (mi & 1) + r8) * LD + (2 * np + (mi >> 1)) * 8);
    m3t_mma(o0, p, vb[0], vb[1]);
    m3t_mma(o1, p, vb[2], vb[3]);
}

/* Row statistics of a C-layout fragment: a lane holds columns of two rows,
 * lane / 4 and lane / 4 + 8, shared with the other three lanes of its quad.
 * m3t_row_max: x0, x1 = the max of those rows over the NN column blocks of
 * sc and over the quad (the same value in all four lanes). */
template <int NN>
__device__ __forceinline__ void m3t_row_max(const float (*sc)[4], float &x0, float &x1)
{
    x0 = -INFINITY;
    x1 = -INFINITY;
#pragma unroll
    for (int nn = 0; nn < NN; nn++) {
        x0 = fmaxf(x0, fmaxf(sc[nn][0], sc[nn][1]));
        x1 = fmaxf(x1, fmaxf(sc[nn][2], sc[nn][3]));
    }
    for (int x = 1; x < 4; x <<= 1) {
        x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, x));
        x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, x));
    }
}

/* m3t_row_sum: each lane's partial sums l0, l1 of the two rows -> the
 * quad's totals (the same value in all four lanes). */
__device__ __forceinline__ void m3t_row_sum(float &l0, float &l1)
{
    for (int x = 1; x < 4; x <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, x);
        l1 += __shfl_xor_sync(0xffffffffu, l1, x);
    }
}

/* bf16x2 of (lo, hi), each rounded to nearest even (lo in the low half). */
__device__ __forceinline__ uint32_t m3t_pack_bf16(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* PDL: let the next kernel of the stream launch now (it still waits for
 * this one in m3t_pdl_wait); wait until the previous kernel has finished
 * and its writes are visible. No-ops when launched without the attribute. */
__device__ __forceinline__ void m3t_pdl_trigger(void)
{
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void m3t_pdl_wait(void)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

#else
#define M3_TC 0
#endif

#endif
