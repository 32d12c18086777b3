/* hip_emu.h — a slow CPU emulation of the HIP subset gpu/ uses, so the
 * kernels and bin/m3-gpu can be checked against bin/m3-ref on machines
 * without a GPU (make gpu-emu → bin/m3-gpu-emu). NOT a performance tool and
 * not a substitute for the device run: it checks indexing, layouts, the
 * selection logic and the rounding points, not memory-model or timing bugs.
 *
 * Model: blocks of a launch run one after another; inside a block every
 * thread is a fiber of the calling host thread, resumed round-robin (on
 * x86-64 a register switch of its own, which makes no system call; else
 * ucontext, which makes a system call at every switch and runs about ten
 * times slower; -DM3EMU_UCONTEXT forces it); __syncthreads is a cooperative
 * barrier over the block;
 * warp shuffles exchange through a per-warp slot array between two warp
 * barriers (all 32 lanes of a warp must reach every shuffle, which the
 * gpu/ kernels guarantee: warp-uniform control flow around shuffles).
 * __shared__ variables are function statics (one block at a time).
 * Used only when M3_EMU is defined (hip_compat.h includes it).
 */
#ifndef M3_HIP_EMU_H
#define M3_HIP_EMU_H

#include <ucontext.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
struct uint2 {
    uint32_t x, y;
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

/* Each emulated GPU thread is a fiber on the calling host thread;
 * a block's fibers are scheduled round-robin and switch only at barriers
 * (__syncthreads, the two warp barriers around a shuffle) and at exit. */
struct m3emu_bar { /* a cooperative barrier over fibers */
    int expected, arrived;
    unsigned gen;
};
struct m3emu_ctx {
    dim3 tid, bid, bdim, gdim;
    m3emu_bar *block_bar;
    m3emu_bar *warp_bar; /* [nwarps] */
    float *wslot;        /* [nwarps][32] */
    int *wslot_i;
    void *dyn;
};
/* A fiber's saved context and the switch between two of them. */
#if defined(__x86_64__) && !defined(M3EMU_UCONTEXT)
struct m3emu_fctx {
    void *sp; /* its stack pointer, the callee-saved registers pushed below it */
};
/* Push rbp, rbx, r12-r15 on the current stack, store rsp in *from, load to,
 * pop the same registers there and return into the other fiber. Weak: every
 * translation unit that includes this header emits it. */
extern "C" void m3emu_switch(void **from, void *to);
__asm__(".pushsection .text\n"
        ".weak m3emu_switch\n"
        ".type m3emu_switch, @function\n"
        "m3emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size m3emu_switch, .-m3emu_switch\n"
        ".popsection\n");
inline void m3emu_fswitch(m3emu_fctx *from, m3emu_fctx *to) { m3emu_switch(&from->sp, to->sp); }
#else
struct m3emu_fctx {
    ucontext_t uc;
};
inline void m3emu_fswitch(m3emu_fctx *from, m3emu_fctx *to) { swapcontext(&from->uc, &to->uc); }
#endif

struct m3emu_sched {
    m3emu_fctx main_uc;
    m3emu_fctx *uc;   /* [nt] */
    m3emu_ctx *ctx;   /* [nt] */
    int nt, cur;
    long idle;        /* yields since the last barrier release or fiber exit */
    void (*body)(void *);
    void *arg;
};
inline thread_local m3emu_ctx *m3emu_cur;
inline thread_local m3emu_sched *m3emu_sch;
#define m3emu (*m3emu_cur)
#define threadIdx (m3emu.tid)
#define blockIdx (m3emu.bid)
#define blockDim (m3emu.bdim)
#define gridDim (m3emu.gdim)

inline void m3emu_yield()
{
    m3emu_sched *s = m3emu_sch;
    if (++s->idle > 64L * s->nt + 100000L) {
        fprintf(stderr, "hip_emu: deadlock: every thread of block (%u,%u,%u) waits at a "
                        "barrier the others never reach\n", m3emu.bid.x, m3emu.bid.y, m3emu.bid.z);
        abort();
    }
    m3emu_fswitch(&s->uc[s->cur], &s->main_uc);
}
inline void m3emu_bar_release(m3emu_bar *b)
{
    b->arrived = 0;
    b->gen++;
    m3emu_sch->idle = 0;
}
inline void m3emu_bar_wait(m3emu_bar *b)
{
    const unsigned g = b->gen;
    if (++b->arrived == b->expected) {
        m3emu_bar_release(b);
        return;
    }
    while (b->gen == g)
        m3emu_yield();
}
/* a thread that exits leaves the barrier (std::barrier::arrive_and_drop) */
inline void m3emu_bar_drop(m3emu_bar *b)
{
    b->expected--;
    if (b->arrived > 0 && b->arrived == b->expected)
        m3emu_bar_release(b);
}

inline void __syncthreads() { m3emu_bar_wait(m3emu.block_bar); }
/* device-wide atomics and fences (blocks run one after another here, and the
 * threads of a block are fibers of one host thread) */
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

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
    m3emu_bar_wait(&m3emu.warp_bar[w]);
    T r = slots[w * 32 + (src_lane & 31)];
    m3emu_bar_wait(&m3emu.warp_bar[w]);
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

#define M3EMU_STACK (256 * 1024)

/* fiber entry: run the kernel body, leave the barriers, return to the scheduler */
inline void m3emu_fiber_main()
{
    m3emu_sched *s = m3emu_sch;
    s->body(s->arg);
    m3emu_bar_drop(m3emu.block_bar);
    const unsigned flat = m3emu.tid.x + m3emu.bdim.x * (m3emu.tid.y + m3emu.bdim.y * m3emu.tid.z);
    m3emu_bar_drop(&m3emu.warp_bar[flat / 32]);
    s->idle = 0;
}

#if defined(__x86_64__) && !defined(M3EMU_UCONTEXT)
/* the first frame of a fiber: the body, then back to the scheduler for good */
[[noreturn]] inline void m3emu_fiber_entry()
{
    m3emu_fiber_main();
    m3emu_sched *s = m3emu_sch;
    m3emu_fswitch(&s->uc[s->cur], &s->main_uc);
    abort(); /* a finished fiber is never resumed */
}

/* a fresh fiber running m3emu_fiber_entry on stack: the six registers that
 * m3emu_switch pops, then its return address, the entry, with rsp % 16 == 8
 * on entry as after a call */
inline void m3emu_make(m3emu_fctx *f, char *stack, m3emu_fctx *)
{
    void **p = (void **)(((uintptr_t)stack + M3EMU_STACK) & ~(uintptr_t)15);
    *--p = NULL; /* where the entry's own return address would be */
    *--p = (void *)m3emu_fiber_entry;
    for (int r = 0; r < 6; r++)
        *--p = NULL;
    f->sp = p;
}
#else
/* a fresh fiber context running m3emu_fiber_main on stack (kept out of the
 * launch template: getcontext returns twice) */
__attribute__((noinline)) inline void m3emu_make(m3emu_fctx *f, char *stack, m3emu_fctx *link)
{
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = stack;
    f->uc.uc_stack.ss_size = M3EMU_STACK;
    f->uc.uc_link = &link->uc;
    makecontext(&f->uc, m3emu_fiber_main, 0);
}
#endif

/* fiber stacks, reused across launches (per host thread) */
struct m3emu_stacks {
    std::vector<char *> v;
    ~m3emu_stacks()
    {
        for (char *p : v)
            free(p);
    }
};
inline thread_local m3emu_stacks m3emu_stk;

/* Run a kernel: blocks in order; inside a block every thread is a fiber on
 * this host thread, resumed round-robin until all have returned. Each block
 * has fresh barriers, so a thread that returns early simply drops out. */
template <typename K, typename... A>
void m3emu_launch(K k, dim3 g, dim3 b, size_t shm, A... args)
{
    const int nt = (int)(b.x * b.y * b.z), nw = (nt + 31) / 32;
    const long nb = (long)g.x * g.y * g.z;
    std::vector<char> dyn(shm + 16);
    std::vector<float> ws((size_t)nw * 32);
    std::vector<int> wsi((size_t)nw * 32);
    std::vector<m3emu_fctx> uc((size_t)nt);
    std::vector<m3emu_ctx> ctx((size_t)nt);
    std::vector<m3emu_bar> wb((size_t)nw);
    std::vector<char> done((size_t)nt);
    m3emu_bar bar;
    while ((int)m3emu_stk.v.size() < nt) {
        char *p = (char *)malloc(M3EMU_STACK);
        if (!p) {
            fprintf(stderr, "hip_emu: out of memory for %d fiber stacks\n", nt);
            abort();
        }
        m3emu_stk.v.push_back(p);
    }
    auto body = [&]() { k(args...); };
    m3emu_sched s;
    s.uc = uc.data();
    s.ctx = ctx.data();
    s.nt = nt;
    s.cur = 0;
    s.idle = 0;
    s.body = [](void *f) { (*(decltype(body) *)f)(); };
    s.arg = &body;
    m3emu_sched *saved_sch = m3emu_sch;
    m3emu_ctx *saved_cur = m3emu_cur;
    m3emu_sch = &s;
    for (long i = 0; i < nb; i++) {
        const dim3 bid((unsigned)(i % g.x), (unsigned)((i / g.x) % g.y),
                       (unsigned)(i / ((long)g.x * g.y)));
        bar.expected = nt;
        bar.arrived = 0;
        bar.gen = 0;
        for (int w = 0; w < nw; w++)
            wb[(size_t)w] = m3emu_bar{nt - 32 * w < 32 ? nt - 32 * w : 32, 0, 0};
        for (int t = 0; t < nt; t++) {
            m3emu_ctx &c = ctx[(size_t)t];
            c.tid = dim3(t % b.x, (t / b.x) % b.y, t / (b.x * b.y));
            c.bid = bid;
            c.bdim = b;
            c.gdim = g;
            c.block_bar = &bar;
            c.warp_bar = wb.data();
            c.wslot = ws.data();
            c.wslot_i = wsi.data();
            c.dyn = dyn.data();
            m3emu_make(&uc[(size_t)t], m3emu_stk.v[(size_t)t], &s.main_uc);
            done[(size_t)t] = 0;
        }
        for (int left = nt; left > 0;) {
            for (int t = 0; t < nt; t++) {
                if (done[(size_t)t])
                    continue;
                s.cur = t;
                m3emu_cur = &ctx[(size_t)t];
                /* the fiber returns here when it yields (still running) or
                 * exits (its last switch); an exit is marked by m3emu_fiber_main's
                 * drop of the block barrier, seen as fewer expected threads */
                const int before = bar.expected;
                m3emu_fswitch(&s.main_uc, &uc[(size_t)t]);
                if (bar.expected < before) {
                    done[(size_t)t] = 1;
                    left--;
                }
            }
        }
    }
    m3emu_sch = saved_sch;
    m3emu_cur = saved_cur;
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
/* Events and a second stream: every call above runs to completion before it
 * returns, so an event is complete when recorded and a wait is a no-op. */
inline hipError_t hipEventCreate(hipEvent_t *ev)
{
    *ev = (void *)1;
    return hipSuccess;
}
inline hipError_t hipEventCreateWithFlags(hipEvent_t *ev, unsigned) { return hipEventCreate(ev); }
enum { hipEventDisableTiming = 2 };
inline hipError_t hipEventDestroy(hipEvent_t) { return hipSuccess; }
inline hipError_t hipEventRecord(hipEvent_t, hipStream_t) { return hipSuccess; }
inline hipError_t hipEventSynchronize(hipEvent_t) { return hipSuccess; }
inline hipError_t hipEventElapsedTime(float *ms, hipEvent_t, hipEvent_t)
{
    *ms = 0;
    return hipSuccess;
}
inline hipError_t hipStreamWaitEvent(hipStream_t, hipEvent_t, unsigned) { return hipSuccess; }
inline hipError_t hipHostMalloc(void **p, size_t n, unsigned)
{
    *p = malloc(n ? n : 1);
    return *p ? hipSuccess : hipErrorUnknown;
}
inline hipError_t hipHostFree(void *p)
{
    free(p);
    return hipSuccess;
}
inline hipError_t hipGetLastError() { return hipSuccess; }
inline const char *hipGetErrorString(hipError_t) { return "emulation error"; }

#endif
