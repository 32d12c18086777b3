/* hip_compat.h — the HIP subset gpu/ uses, on both vendors.
 *
 * gpu/ is written to the HIP API. On AMD (hipcc, __HIP_PLATFORM_AMD__) this
 * header includes <hip/hip_runtime.h> (and hipBLAS when M3_HAVE_BLAS is
 * defined). With nvcc (__CUDACC__) it maps exactly the names below onto the
 * CUDA runtime and cuBLAS; Debian's HIP 5.2 NVIDIA headers do not compile
 * against CUDA 13, so we do not use them. Anything not listed here is not
 * used by gpu/: add the mapping here before using a new HIP name.
 *
 * With M3_EMU defined (g++, tests only) it includes gpu/emu/hip_emu.h, a
 * slow CPU emulation used by `make gpu-emu-test`.
 *
 * Also: M3_HIP_CHECK(call) (prints file:line and the error string, returns
 * -1 from the enclosing int function) and the warp helpers m3_shfl_xor /
 * m3_warp_size used by every kernel (AMD wavefronts are 64 wide on gfx9;
 * the kernels are written for 32-lane reductions on a 32- or 64-wide warp:
 * see M3_WARP below).
 */
#ifndef M3_HIP_COMPAT_H
#define M3_HIP_COMPAT_H

#include <stdio.h>

#if defined(M3_EMU)
/* ------------------------------------------- CPU emulation (tests only) */
#include "emu/hip_emu.h"

#elif defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
/* ---------------------------------------------------------------- NVIDIA */
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define M3_GPU_VENDOR "cuda"

typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaEvent_t hipEvent_t;
typedef cudaGraph_t hipGraph_t;
typedef cudaGraphExec_t hipGraphExec_t;
typedef cudaDeviceProp hipDeviceProp_t;
typedef __nv_bfloat16 hip_bfloat16;

#define hipSuccess cudaSuccess
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorUnknown cudaErrorUnknown
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipStreamCreate cudaStreamCreate
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamEndCapture cudaStreamEndCapture
#define hipStreamCaptureModeGlobal cudaStreamCaptureModeGlobal
#define hipEventCreate cudaEventCreate
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDisableTiming cudaEventDisableTiming
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipHostMalloc(p, n, flags) cudaHostAlloc((p), (n), (flags))
#define hipHostFree cudaFreeHost
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipSetDevice cudaSetDevice
#define hipGetDevice cudaGetDevice
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipGraphInstantiate(exec, graph, a, b, c) cudaGraphInstantiate((exec), (graph), 0)
#define hipGraphLaunch cudaGraphLaunch
#define hipGraphDestroy cudaGraphDestroy
#define hipGraphExecDestroy cudaGraphExecDestroy
#define hipFuncSetAttribute(f, a, v) cudaFuncSetAttribute((f), (a), (v))
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipLaunchKernelGGL(k, grid, block, shm, stream, ...) \
    k<<<(grid), (block), (shm), (stream)>>>(__VA_ARGS__)

#define M3_WARP 32
#define M3_FULL_MASK 0xffffffffu
__device__ __forceinline__ float m3_shfl_xor(float v, int lane_mask)
{
    return __shfl_xor_sync(M3_FULL_MASK, v, lane_mask, 32);
}
__device__ __forceinline__ int m3_shfl_xor_i(int v, int lane_mask)
{
    return __shfl_xor_sync(M3_FULL_MASK, v, lane_mask, 32);
}
__device__ __forceinline__ float m3_shfl(float v, int src)
{
    return __shfl_sync(M3_FULL_MASK, v, src, 32);
}

#ifdef M3_HAVE_BLAS
#include <cublas_v2.h>
typedef cublasHandle_t hipblasHandle_t;
typedef cublasStatus_t hipblasStatus_t;
#define HIPBLAS_STATUS_SUCCESS CUBLAS_STATUS_SUCCESS
#define HIPBLAS_OP_N CUBLAS_OP_N
#define HIPBLAS_OP_T CUBLAS_OP_T
#define HIPBLAS_R_16B CUDA_R_16BF
#define HIPBLAS_R_32F CUDA_R_32F
#define HIPBLAS_COMPUTE_32F CUBLAS_COMPUTE_32F
#define HIPBLAS_GEMM_DEFAULT CUBLAS_GEMM_DEFAULT
#define hipblasCreate cublasCreate
#define hipblasDestroy cublasDestroy
#define hipblasSetStream cublasSetStream
#define hipblasGemmEx cublasGemmEx
/* cuBLASLt (NVIDIA only: Debian's ROCm has no hipBLASLt) is used by name
 * (cublasLt*) behind M3_HAVE_BLASLT; AMD builds use hipBLAS. */
#include <cublasLt.h>
#define M3_HAVE_BLASLT 1
#endif

#else
/* ------------------------------------------------------------------- AMD */
#include <hip/hip_runtime.h>
#include <hip/hip_bfloat16.h>

#define M3_GPU_VENDOR "hip"
/* The kernels reduce over 32 lanes; on a 64-wide wavefront each half is an
 * independent group (shfl_xor with masks < 32 never crosses halves). The
 * block sizes are multiples of 64, so this is safe. */
#define M3_WARP 32
__device__ __forceinline__ float m3_shfl_xor(float v, int lane_mask)
{
    return __shfl_xor(v, lane_mask, 32);
}
__device__ __forceinline__ int m3_shfl_xor_i(int v, int lane_mask)
{
    return __shfl_xor(v, lane_mask, 32);
}
__device__ __forceinline__ float m3_shfl(float v, int src)
{
    return __shfl(v, src, 32);
}

#ifdef M3_HAVE_BLAS
#include <hipblas.h>
#define HIPBLAS_COMPUTE_32F HIPBLAS_R_32F
#endif
#endif

#ifndef M3_DYN_SHARED
/* The dynamic shared-memory array of a kernel (emulation: a per-block buffer). */
#define M3_DYN_SHARED(type, name) extern __shared__ type name[]
#endif

/* Check a runtime call; on failure print where and why, return -1. */
#define M3_HIP_CHECK(call)                                                          \
    do {                                                                            \
        hipError_t m3_err_ = (call);                                                \
        if (m3_err_ != hipSuccess) {                                                \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,     \
                    hipGetErrorString(m3_err_));                                    \
            return -1;                                                              \
        }                                                                           \
    } while (0)

/* The same after a kernel launch (launch errors only; no synchronisation). */
#define M3_HIP_CHECK_LAUNCH() M3_HIP_CHECK(hipGetLastError())

#endif
