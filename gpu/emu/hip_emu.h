/* hip_emu.h — a slow CPU emulation of the HIP subset gpu/ uses, so the
 * kernels and bin/m3-gpu can be checked against bin/m3-ref on machines
 * without a GPU (make gpu-emu → bin/m3-gpu-emu). NOT a performance tool and
 * not a substitute for the device run: it checks indexing, layouts, the
 * selection logic and the rounding points, not memory-model or timing bugs.
 *
 * Model: blocks of a launch run one after another; inside a block every
 * thread is a std::thread; __syncthreads is a std::barrier over the block;
 * warp shuffles exchange through a per-warp slot array between two warp
 * barriers (all 32 lanes of a warp must reach every shuffle, which the
 * gpu/ kernels guarantee: warp-uniform control flow around shuffles).
 * __shared__ variables are function statics (one block at a time).
 * Used only when M3_EMU is defined (hip_compat.h includes it).
 */
#ifndef M3_HIP_EMU_H
#define M3_HIP_EMU_H

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#define M3_GPU_VENDOR "cpu-emulation"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 {
    uint32_t x, y, z, w;
};
struct float4 {
    float x, y, z, w;
};

typedef int hipError_t;
typedef void *hipStream_t;
typedef void *hipEvent_t;
typedef void *hipGraph_t;
typedef void *hipGraphExec_t;
struct hipDeviceProp_t {
    char name[64];
    int multiProcessorCount;
    int l2CacheSize;
};
#define hipSuccess 0
#define hipErrorInvalidValue 1
#define hipErrorUnknown 999
enum { hipMemcpyHostToDevice, hipMemcpyDeviceToHost, hipMemcpyDeviceToDevice };
enum { hipStreamCaptureModeGlobal };

/* per emulated thread */
struct m3emu_ctx {
    dim3 tid, bid, bdim, gdim;
    std::barrier<> *block_bar;
    std::barrier<> **warp_bar;
    float *wslot;   /* [nwarps][32] */
    int *wslot_i;
    void *dyn;
};
inline thread_local m3emu_ctx m3emu;
#define threadIdx (m3emu.tid)
#define blockIdx (m3emu.bid)
#define blockDim (m3emu.bdim)
#define gridDim (m3emu.gdim)

inline void __syncthreads() { m3emu.block_bar->arrive_and_wait(); }

inline float __uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint32_t __float_as_uint(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

#define M3_WARP 32
template <typename T> inline T m3emu_xchg(T v, int src_lane, T *slots)
{
    const int w = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    slots[w * 32 + lane] = v;
    m3emu.warp_bar[w]->arrive_and_wait();
    T r = slots[w * 32 + (src_lane & 31)];
    m3emu.warp_bar[w]->arrive_and_wait();
    return r;
}
inline float m3_shfl_xor(float v, int mask)
{
    return m3emu_xchg(v, (int)(threadIdx.x & 31) ^ mask, m3emu.wslot);
}
inline int m3_shfl_xor_i(int v, int mask)
{
    return m3emu_xchg(v, (int)(threadIdx.x & 31) ^ mask, m3emu.wslot_i);
}
inline float m3_shfl(float v, int src) { return m3emu_xchg(v, src, m3emu.wslot); }

#define M3_DYN_SHARED(type, name) type *name = (type *)m3emu.dyn

/* Run a kernel: blocks in order on one team of std::threads (one per
 * thread of a block, created once per launch). Each block has fresh
 * barriers, so a thread that returns early simply drops out of them;
 * `done` (which every thread reaches) separates consecutive blocks. */
template <typename K, typename... A>
void m3emu_launch(K k, dim3 g, dim3 b, size_t shm, A... args)
{
    const int nt = (int)(b.x * b.y * b.z), nw = (nt + 31) / 32;
    const long nb = (long)g.x * g.y * g.z;
    std::vector<char> dyn(shm + 16);
    std::vector<float> ws((size_t)nw * 32);
    std::vector<int> wsi((size_t)nw * 32);
    std::barrier<> done(nt);
    std::barrier<> *bar = nullptr;
    std::vector<std::barrier<> *> wb((size_t)nw, nullptr);
    auto setup = [&]() { /* fresh per-block barriers (one thread, between blocks) */
        delete bar;
        bar = new std::barrier<>(nt);
        for (int w = 0; w < nw; w++) {
            delete wb[(size_t)w];
            wb[(size_t)w] = new std::barrier<>(nt - 32 * w < 32 ? nt - 32 * w : 32);
        }
    };
    setup();
    std::vector<std::thread> th;
    th.reserve((size_t)nt);
    for (int t = 0; t < nt; t++)
        th.emplace_back([&, t]() {
            m3emu.tid = dim3(t % b.x, (t / b.x) % b.y, t / (b.x * b.y));
            m3emu.bdim = b;
            m3emu.gdim = g;
            m3emu.wslot = ws.data();
            m3emu.wslot_i = wsi.data();
            m3emu.dyn = dyn.data();
            for (long i = 0; i < nb; i++) {
                m3emu.bid = dim3((unsigned)(i % g.x), (unsigned)((i / g.x) % g.y),
                                 (unsigned)(i / ((long)g.x * g.y)));
                m3emu.block_bar = bar;
                m3emu.warp_bar = wb.data();
                k(args...);
                bar->arrive_and_drop();
                wb[(size_t)(t / 32)]->arrive_and_drop();
                done.arrive_and_wait();
                if (t == 0)
                    setup();
                done.arrive_and_wait();
            }
        });
    for (auto &x : th)
        x.join();
    delete bar;
    for (auto *p : wb)
        delete p;
}
#define hipLaunchKernelGGL(k, grid, block, shm, stream, ...) \
    ((void)(stream), m3emu_launch(k, dim3(grid), dim3(block), (size_t)(shm), __VA_ARGS__))

inline hipError_t hipMalloc(void **p, size_t n)
{
    *p = calloc(1, n ? n : 1);
    return *p ? hipSuccess : hipErrorUnknown;
}
inline hipError_t hipFree(void *p)
{
    free(p);
    return hipSuccess;
}
inline hipError_t hipMemcpy(void *d, const void *s, size_t n, int)
{
    memcpy(d, s, n);
    return hipSuccess;
}
inline hipError_t hipMemcpyAsync(void *d, const void *s, size_t n, int, hipStream_t)
{
    memcpy(d, s, n);
    return hipSuccess;
}
inline hipError_t hipMemset(void *d, int v, size_t n)
{
    memset(d, v, n);
    return hipSuccess;
}
inline hipError_t hipStreamCreate(hipStream_t *s)
{
    *s = (void *)1;
    return hipSuccess;
}
inline hipError_t hipStreamDestroy(hipStream_t) { return hipSuccess; }
inline hipError_t hipStreamSynchronize(hipStream_t) { return hipSuccess; }
inline hipError_t hipDeviceSynchronize() { return hipSuccess; }
inline hipError_t hipGetLastError() { return hipSuccess; }
inline const char *hipGetErrorString(hipError_t) { return "emulation error"; }

#endif
