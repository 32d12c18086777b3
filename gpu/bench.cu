/* bench.cu — per-kernel GPU benchmarks at full M3 dimensions with random
 * weights, one layer's worth at a time (make bench-gpu; the speed targets
 * and figures are in docs/performance.md).
 *
 * Protocol (perf-anchors §7, MiniMax-AI/MSA §1.3):
 *  - every case is captured once into a graph of R launches, each on its
 *    own copy of the weights/inputs ("rotation"), R chosen so the copies
 *    together exceed 2x the L2 size: each launch reads cold data from HBM;
 *  - 5 warm-up replays, then >= 20 timed replays (events around each
 *    replay); time per launch = replay time / R;
 *  - report the median, min, max and coefficient of variation, the logical
 *    bytes / FLOPs of one launch, and the ratio to the H200 limits
 *    (4.8 TB/s HBM, 989 TFLOP/s dense bf16);
 * The torch comparison (torch.matmul / F.scaled_dot_product_attention at the
 * same shapes) is tools/bench_torch.py, run on the same machine right after;
 * the GPU clocks are printed by the make target (nvidia-smi).
 *
 *   bench-gpu [--reps N] [--case PREFIX]...   (the cases whose names start with a PREFIX)
 *
 * The cases are the table CASES below (name, kind, shape, the case whose
 * device data a variant reuses); the speed targets are the table TARGETS,
 * judged as ratios to the hardware limit. Correctness is not checked here:
 * gpu/tests/test_ops.cu compares every launcher with ref/ (make gpu-test).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hip_compat.h"
#include "kernels/common.cuh"
#include "kernels/kernels.h"

#define HBM_BYTES_PER_S 4.8e12
#define BF16_FLOP_PER_S 989.4e12

/* M3 text shapes (ref/config.h comments; perf-anchors §2) */
enum { H = 6144, NH = 64, NKV = 4, HD = 128, V = 200064, E = 128, I = 3072, ID = 12288,
       TOPK_E = 4, G = 4, IHD = 128, BLK = 128, TOPK_B = 16, RD = 64 };

/* Deterministic pseudo-random fill in [-a, a] (fp32 or bf16 bits). */
__global__ void k_fill(void *p, int64_t n, int bf16, uint32_t seed, float a)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u ^ seed;
        x ^= x >> 16;
        x *= 0x7feb352du;
        x ^= x >> 15;
        const float v = a * ((float)(x & 0xffffff) / 8388608.0f - 1.0f);
        if (bf16)
            ((uint16_t *)p)[i] = (uint16_t)(__float_as_uint(m3d_round_bf16(v)) >> 16);
        else
            ((float *)p)[i] = m3d_round_bf16(v);
    }
}

static void *dev_rand(size_t n, int bf16, uint32_t seed, float a)
{
    void *p = NULL;
    if (hipMalloc(&p, n * (bf16 ? 2 : 4)) != hipSuccess)
        return NULL;
    hipLaunchKernelGGL(k_fill, dim3(4096), dim3(256), 0, 0, p, (int64_t)n, bf16, seed, a);
    return p;
}

/* One benchmark case: launch(i) enqueues the op on rotation copy i. */
typedef struct bench_case {
    const char *name;
    double bytes, flops; /* logical, per launch */
    double issued;       /* tensor-core FLOPs the kernel's tiling issues (0: not known) */
    int nrot;
    void *ctx;
    hipError_t (*launch)(void *ctx, int rot, hipStream_t st);
} bench_case;

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Graph capture, warm-ups, timed replays, and the report line. */
/* The case table of main: the GEMV cases with their variants take at most
 * BENCH_GEMV_CASES slots, every other case one slot of the rest. */
enum { BENCH_MAX_CASES = 470, BENCH_GEMV_CASES = 200 };

/* The next free slot of cases[BENCH_MAX_CASES] (*n counts the used ones); a
 * table too small for the cases is a bug in this file: say so and stop. */
static bench_case *next_case(bench_case *cases, int *n)
{
    if (*n >= BENCH_MAX_CASES) {
        fprintf(stderr, "bench-gpu: more than %d cases; raise BENCH_MAX_CASES\n", BENCH_MAX_CASES);
        exit(2);
    }
    return &cases[(*n)++];
}

static int run_case(const bench_case *bc, int reps, hipStream_t st, double *med_us)
{
    hipGraph_t graph;
    hipGraphExec_t exec;
    hipEvent_t e0, e1;
    M3_HIP_CHECK(hipStreamBeginCapture(st, hipStreamCaptureModeGlobal));
    for (int r = 0; r < bc->nrot; r++)
        M3_HIP_CHECK(bc->launch(bc->ctx, r, st));
    M3_HIP_CHECK(hipStreamEndCapture(st, &graph));
    M3_HIP_CHECK(hipGraphInstantiate(&exec, graph, NULL, NULL, 0));
    M3_HIP_CHECK(hipEventCreate(&e0));
    M3_HIP_CHECK(hipEventCreate(&e1));
    for (int w = 0; w < 5; w++)
        M3_HIP_CHECK(hipGraphLaunch(exec, st));
    M3_HIP_CHECK(hipStreamSynchronize(st));
    float *us = (float *)malloc((size_t)reps * sizeof(float));
    if (!us)
        return -1;
    for (int i = 0; i < reps; i++) {
        float ms = 0.0f;
        M3_HIP_CHECK(hipEventRecord(e0, st));
        M3_HIP_CHECK(hipGraphLaunch(exec, st));
        M3_HIP_CHECK(hipEventRecord(e1, st));
        M3_HIP_CHECK(hipEventSynchronize(e1));
        M3_HIP_CHECK(hipEventElapsedTime(&ms, e0, e1));
        us[i] = 1000.0f * ms / (float)bc->nrot;
    }
    double mean = 0, var = 0;
    for (int i = 0; i < reps; i++)
        mean += us[i];
    mean /= reps;
    for (int i = 0; i < reps; i++)
        var += (us[i] - mean) * (us[i] - mean);
    const double cv = reps > 1 ? sqrt(var / (reps - 1)) / mean : 0.0;
    qsort(us, (size_t)reps, sizeof(float), cmp_f);
    const double med = reps % 2 ? us[reps / 2] : 0.5 * (us[reps / 2 - 1] + us[reps / 2]);
    *med_us = med;
    const double bw = bc->bytes / (med * 1e-6), fl = bc->flops / (med * 1e-6);
    printf("| %-34s | %9.2f | %8.2f | %8.2f | %5.1f%% | %8.1f | %5.1f%% | %8.1f | %5.1f%% | %3d |\n",
           bc->name, med, us[0], us[reps - 1], 100.0 * cv, bw / 1e9, 100.0 * bw / HBM_BYTES_PER_S,
           fl / 1e12, 100.0 * fl / BF16_FLOP_PER_S, bc->nrot);
    free(us);
    (void)hipGraphExecDestroy(exec);
    (void)hipGraphDestroy(graph);
    (void)hipEventDestroy(e0);
    (void)hipEventDestroy(e1);
    return 0;
}

/* rotation count so that nrot copies of `bytes` exceed 2 x L2 (>= 2, <= 64) */
static int rotations(double bytes, int l2)
{
    int n = (int)ceil(2.0 * l2 / bytes) + 1;
    return n < 2 ? 2 : (n > 64 ? 64 : n);
}

/* ---- cases ---------------------------------------------------------------- */

typedef struct lin_ctx {
    m3g_mat w[64];
    float *x[64], *y[64];
    int T;
    m3g_blas *blas;
} lin_ctx;

static hipError_t lin_launch(void *c, int r, hipStream_t st)
{
    lin_ctx *l = (lin_ctx *)c;
    return m3g_linear(l->y[r], l->w[r].rows, l->x[r], l->w[r], l->T, 1, l->blas, st);
}

static int make_linear(bench_case *bc, const char *name, int rows, int cols, int T, int l2,
                       m3g_blas *blas)
{
    lin_ctx *l = (lin_ctx *)calloc(1, sizeof *l);
    if (!l)
        return -1;
    const double wbytes = 2.0 * rows * cols;
    bc->name = name;
    bc->bytes = wbytes + 4.0 * T * (rows + cols);
    bc->flops = 2.0 * rows * (double)cols * T;
    bc->nrot = rotations(bc->bytes, l2);
    l->T = T;
    l->blas = blas;
    for (int r = 0; r < bc->nrot; r++) {
        l->w[r].rows = rows;
        l->w[r].cols = cols;
        l->w[r].dtype = M3G_BF16;
        l->w[r].data = dev_rand((size_t)rows * cols, 1, 17u + r, 0.05f);
        l->x[r] = (float *)dev_rand((size_t)T * cols, 0, 99u + r, 1.0f);
        l->y[r] = (float *)dev_rand((size_t)T * rows, 0, 7u, 0.0f);
        if (!l->w[r].data || !l->x[r] || !l->y[r])
            return -1;
    }
    bc->ctx = l;
    bc->launch = lin_launch;
    return 0;
}

typedef struct moe_ctx {
    void *eg, *eu, *ed;
    float *x, *g, *u, *ye, *y, *w;
    int32_t *idx;
    m3g_mat sgu, sd;          /* shared expert: [gate; up] [2I, H], down [H, I] */
    float *sa, *sy;           /* its SwiGLU activation [I] and output [H] */
    int shared;               /* 1: the case includes the shared expert */
} moe_ctx;

/* MoE decode, batch 1: 4 routed experts (gate, up, down) + the combine, and
 * with shared set also the shared expert (fused gate+up GEMV with the SwiGLU
 * epilogue, down GEMV) added in the combine, as m3-gpu's decode step.
 * Rotation: expert ids differ per copy (idx rows r), the 128-expert table
 * is >> L2, so reads are cold; the one shared expert (113 MB) is evicted by
 * the 453 MB of routed experts between two of its reads. */
static hipError_t moe_launch(void *c, int r, hipStream_t st)
{
    moe_ctx *m = (moe_ctx *)c;
    if (m->shared) {
        hipError_t e = m3g_linear_swiglu(m->sa, I, NULL, m->x, m->sgu, 1, 1.702f, 7.0f, 1.0f, 1,
                                         NULL, st);
        if (e != hipSuccess || (e = m3g_linear(m->sy, H, m->sa, m->sd, 1, 1, NULL, st)) !=
                                   hipSuccess)
            return e;
    }
    const int32_t *idx = m->idx + (size_t)r * TOPK_E;
    const int64_t es = (int64_t)I * H;
    hipError_t e;
    if ((e = m3g_gemv_grouped(m->g, m->x, H, 0, m->eg, es, M3G_BF16, I, H, idx, 1, TOPK_E, 1,
                              st)) != hipSuccess ||
        (e = m3g_gemv_grouped(m->u, m->x, H, 0, m->eu, es, M3G_BF16, I, H, idx, 1, TOPK_E, 1,
                              st)) != hipSuccess ||
        (e = m3g_swiglu(m->g, m->g, m->u, (int64_t)TOPK_E * I, 1.702f, 7.0f, 1.0f, 1, st)) !=
            hipSuccess ||
        (e = m3g_gemv_grouped(m->ye, m->g, (int64_t)TOPK_E * I, I, m->ed, es, M3G_BF16, H, I, idx,
                              1, TOPK_E, 1, st)) != hipSuccess)
        return e;
    return m3g_moe_combine(m->y, m->ye, m->w, m->shared ? m->sy : NULL, 1, TOPK_E, H, 2.0f, 1,
                           st);
}

/* The routed case; make_moe_shared adds the shared expert to a copy of it. */
static int make_moe(bench_case *bc)
{
    moe_ctx *m = (moe_ctx *)calloc(1, sizeof *m);
    if (!m)
        return -1;
    const size_t per = (size_t)I * H;
    m->eg = dev_rand(per * E, 1, 1u, 0.05f);
    m->eu = dev_rand(per * E, 1, 2u, 0.05f);
    m->ed = dev_rand(per * E, 1, 3u, 0.05f);
    m->x = (float *)dev_rand(H, 0, 4u, 1.0f);
    m->g = (float *)dev_rand((size_t)TOPK_E * I, 0, 5u, 0.0f);
    m->u = (float *)dev_rand((size_t)TOPK_E * I, 0, 6u, 0.0f);
    m->ye = (float *)dev_rand((size_t)TOPK_E * H, 0, 7u, 0.0f);
    m->y = (float *)dev_rand(H, 0, 8u, 0.0f);
    m->w = (float *)dev_rand(TOPK_E, 0, 9u, 0.25f);
    const int nrot = E / TOPK_E; /* every expert once per replay */
    int32_t *hidx = (int32_t *)malloc(sizeof(int32_t) * (size_t)E);
    if (!m->eg || !m->eu || !m->ed || !m->x || !hidx || hipMalloc((void **)&m->idx, 4 * E) != hipSuccess)
        return -1;
    for (int i = 0; i < E; i++) /* copy r uses experts 4r..4r+3 (ascending) */
        hidx[i] = i;
    if (hipMemcpy(m->idx, hidx, 4 * E, hipMemcpyHostToDevice) != hipSuccess)
        return -1;
    free(hidx);
    bc->name = "moe decode 4 experts (no shared)";
    bc->bytes = 3.0 * TOPK_E * per * 2.0;
    bc->flops = 2.0 * 3.0 * TOPK_E * per;
    bc->nrot = nrot;
    bc->ctx = m;
    bc->launch = moe_launch;
    return 0;
}

static int make_moe_shared(bench_case *bc, const bench_case *routed)
{
    moe_ctx *m = (moe_ctx *)calloc(1, sizeof *m);
    if (!m)
        return -1;
    *m = *(const moe_ctx *)routed->ctx;
    m->shared = 1;
    m->sgu.dtype = m->sd.dtype = M3G_BF16;
    m->sgu.rows = 2 * I, m->sgu.cols = H;
    m->sd.rows = H, m->sd.cols = I;
    m->sgu.data = dev_rand((size_t)2 * I * H, 1, 10u, 0.05f);
    m->sd.data = dev_rand((size_t)H * I, 1, 11u, 0.05f);
    m->sa = (float *)dev_rand(I, 0, 12u, 0.0f);
    m->sy = (float *)dev_rand(H, 0, 13u, 0.0f);
    if (!m->sgu.data || !m->sd.data || !m->sa || !m->sy)
        return -1;
    *bc = *routed;
    bc->name = "moe decode 4 experts + shared";
    bc->bytes = routed->bytes + 3.0 * I * H * 2.0;
    bc->flops = routed->flops + 2.0 * 3.0 * I * H;
    bc->ctx = m;
    return 0;
}

/* MSA decode attention (one query at position ctx_len - 1, 16 selected
 * blocks of 128 keys per KV group, 64 q / 4 kv heads, bf16 mode). One K and
 * one V cache of ctx_len slots per dtype, the same values in both (bf16
 * representable); rotation r reads its own pages (block lists
 * [nrot][NKV][TOPK_B], pages (r * 64 + g * 16 + i) mod npages, so a page
 * comes back only after >= 15 other rotations: cold in L2).
 * path 0: m3g_attention_sk, bf16 cache (bin/m3-gpu's bf16 decode path: the
 * one-launch tensor-core cluster kernel on NVIDIA); 1: m3g_attention_sk, fp32
 * cache (two launches); 2: m3g_attention_split (3 launches, fp32 cache: the
 * previous path); 3: m3g_attention_sk's two-launch path with the bf16 cache. */
typedef struct att_ctx {
    float *q, *out, *kc, *vc;
    uint16_t *kc16, *vc16;
    void *ws;      /* m3g_attention_sk workspace */
    size_t ws_n;   /* bytes */
    float *ows;    /* m3g_attention_split workspace */
    size_t ows_n;  /* floats */
    int32_t *pages, *blocks;
    int ctx_len, path;
} att_ctx;

static hipError_t att_run(const att_ctx *a, int path, int r, hipStream_t st)
{
    const int32_t *bl = a->blocks + (size_t)r * NKV * TOPK_B;
    const int64_t pos0 = a->ctx_len - 1;
    if (path == 2)
        return m3g_attention_split(a->out, a->q, a->kc, a->vc, a->pages, BLK, pos0, 1, NH, NKV,
                                   HD, bl, TOPK_B, 1, a->ows, a->ows_n, st);
    const int f32 = path == 1;
    return m3g_attention_sk_tuned(a->out, a->q, f32 ? (const void *)a->kc : (const void *)a->kc16,
                                  f32 ? (const void *)a->vc : (const void *)a->vc16,
                                  f32 ? M3G_F32 : M3G_BF16, a->pages, BLK, pos0, 1, NH, NKV, HD,
                                  bl, TOPK_B, 1, a->ws, a->ws_n, path == 3 ? M3G_SK_TWO_LAUNCH : 0,
                                  st);
}

static hipError_t att_launch(void *c, int r, hipStream_t st)
{
    const att_ctx *a = (const att_ctx *)c;
    return att_run(a, a->path, r, st);
}

/* base == NULL: allocate the data (path 0); else share base's data. */
static int make_msa_decode(bench_case *bc, const char *name, int ctx_len, int l2, int path,
                           const bench_case *base)
{
    att_ctx *a = (att_ctx *)calloc(1, sizeof *a);
    if (!a)
        return -1;
    const int npages = (ctx_len + BLK - 1) / BLK;
    const double kvb = path == 1 || path == 2 ? 4.0 : 2.0; /* bytes per cache element read */
    bc->name = name;
    bc->bytes = 2.0 * TOPK_B * BLK * NKV * HD * kvb + 2.0 * NH * HD * 4.0;
    bc->flops = 4.0 * NH * TOPK_B * BLK * HD;
    bc->nrot = rotations(bc->bytes, l2);
    bc->ctx = a;
    bc->launch = att_launch;
    if (base) {
        *a = *(const att_ctx *)base->ctx;
        a->path = path;
        return 0;
    }
    a->ctx_len = ctx_len;
    a->path = path;
    const size_t nel = (size_t)npages * BLK * NKV * HD;
    a->q = (float *)dev_rand((size_t)NH * HD, 0, 1u, 1.0f);
    a->out = (float *)dev_rand((size_t)NH * HD, 0, 2u, 0.0f);
    a->kc = (float *)dev_rand(nel, 0, 10u, 1.0f); /* the same values, fp32 and bf16 */
    a->vc = (float *)dev_rand(nel, 0, 20u, 1.0f);
    a->kc16 = (uint16_t *)dev_rand(nel, 1, 10u, 1.0f);
    a->vc16 = (uint16_t *)dev_rand(nel, 1, 20u, 1.0f);
    if (!a->q || !a->out || !a->kc || !a->vc || !a->kc16 || !a->vc16)
        return -1;
    int32_t *hp = (int32_t *)malloc(sizeof(int32_t) * (size_t)npages);
    int32_t *hb = (int32_t *)malloc(sizeof(int32_t) * 64 * NKV * TOPK_B);
    if (!hp || !hb)
        return -1;
    for (int p = 0; p < npages; p++)
        hp[p] = p;
    for (int r = 0; r < 64; r++) /* every block fully visible (pos = ctx_len - 1) */
        for (int i = 0; i < NKV * TOPK_B; i++)
            hb[r * NKV * TOPK_B + i] = (r * NKV * TOPK_B + i) % npages;
    const size_t nb = sizeof(int32_t) * 64 * NKV * TOPK_B;
    if (hipMalloc((void **)&a->pages, 4 * (size_t)npages) != hipSuccess ||
        hipMalloc((void **)&a->blocks, nb) != hipSuccess ||
        hipMemcpy(a->pages, hp, 4 * (size_t)npages, hipMemcpyHostToDevice) != hipSuccess ||
        hipMemcpy(a->blocks, hb, nb, hipMemcpyHostToDevice) != hipSuccess)
        return -1;
    free(hp);
    free(hb);
    a->ws_n = m3g_attention_sk_ws(BLK, ctx_len - 1, 1, NH, NKV, HD, a->blocks, TOPK_B, M3G_F32);
    a->ows_n = m3g_attention_split_ws(BLK, ctx_len - 1, 1, NH, HD, a->blocks, TOPK_B);
    if (hipMalloc(&a->ws, a->ws_n) != hipSuccess ||
        hipMalloc((void **)&a->ows, a->ows_n * sizeof(float)) != hipSuccess)
        return -1;
    return 0;
}

typedef struct idx_ctx {
    float *iq, *bs;
    void *ikc[4]; /* bf16 index-K cache (bf16 mode) */
    unsigned *ikr[4]; /* its exponent range words (m3g_ik_range_scan) */
    int32_t *pages, *sel;
    unsigned *ctr; /* m3g_msa_indexer's ticket (zeroed once) */
    void *ws;      /* and its scratch */
    size_t ws_n;
    int ctx_len, nb;
    int old;     /* 1: the two-launch path (m3g_msa_block_scores + m3g_msa_select) */
    int probe;   /* m3g_msa_indexer_ex's probe bits (0: the default) */
    int norange; /* 1: no range words (multiply then add, no FMA) */
} idx_ctx;

/* One decode indexer step: block scores AND the top-16 selection. */
static hipError_t idx_launch(void *c, int r, hipStream_t st)
{
    idx_ctx *x = (idx_ctx *)c;
    if (x->old) {
        hipError_t e = m3g_msa_block_scores(x->bs, x->iq, x->ikc[r], M3G_BF16, x->pages, BLK,
                                            x->ctx_len - 1, 1, G, IHD, x->nb, st);
        if (e != hipSuccess)
            return e;
        return m3g_msa_select(x->sel, x->bs, x->ctx_len - 1, 1, G, x->nb, BLK, TOPK_B, 1, 0, st);
    }
    return m3g_msa_indexer_ex(x->sel, x->bs, x->iq, x->ikc[r], M3G_BF16, x->pages, BLK,
                              x->ctx_len - 1, 1, G, IHD, x->nb, TOPK_B, 1, 0, x->ctr, x->ws,
                              x->ws_n, x->norange ? NULL : x->ikr[r], x->probe, st);
}

/* A second case on the data of `base` (another path or variant). */
/* *bc = a copy of base named name, with its own malloc'd copy of base's
 * context (size bytes), which it returns for the caller to change; NULL when
 * out of memory. The copy shares base's device buffers. */
static void *clone_case(bench_case *bc, const char *name, const bench_case *base, size_t size)
{
    void *ctx = malloc(size);
    if (!ctx)
        return NULL;
    memcpy(ctx, base->ctx, size);
    *bc = *base;
    bc->name = name;
    bc->ctx = ctx;
    return ctx;
}

/* alt: IX_OLD the two-launch path, IX_NORANGE multiply then add, ORed with
 * m3g_msa_indexer_ex probe bits. */
enum { IX_OLD = 1 << 20, IX_NORANGE = 1 << 21 };
static int make_indexer_alt(bench_case *bc, const char *name, const bench_case *base, int alt)
{
    idx_ctx *x = (idx_ctx *)clone_case(bc, name, base, sizeof *x);
    if (!x)
        return -1;
    x->old = (alt & IX_OLD) != 0;
    x->norange = (alt & IX_NORANGE) != 0;
    x->probe = alt & ~(IX_OLD | IX_NORANGE);
    return 0;
}

/* Indexer decode: scores over ctx_len index-K rows + block max + top-16. */
static int make_indexer(bench_case *bc, const char *name, int ctx_len, int l2)
{
    idx_ctx *x = (idx_ctx *)calloc(1, sizeof *x);
    if (!x)
        return -1;
    x->ctx_len = ctx_len;
    x->nb = (ctx_len + BLK - 1) / BLK;
    bc->name = name;
    bc->bytes = 2.0 * (double)ctx_len * IHD; /* bf16 index-K cache */
    bc->flops = 2.0 * G * IHD * (double)ctx_len;
    bc->nrot = rotations(bc->bytes, l2) > 4 ? 4 : rotations(bc->bytes, l2);
    x->iq = (float *)dev_rand((size_t)G * IHD, 0, 1u, 1.0f);
    x->bs = (float *)dev_rand((size_t)G * x->nb, 0, 2u, 0.0f);
    for (int r = 0; r < bc->nrot; r++)
        if (!(x->ikc[r] = dev_rand((size_t)x->nb * BLK * IHD, 1, 30u + r, 1.0f)) ||
            hipMalloc((void **)&x->ikr[r], 2 * sizeof(unsigned)) != hipSuccess ||
            m3g_ik_range_reset(x->ikr[r], 0) != hipSuccess ||
            m3g_ik_range_scan(x->ikr[r], (const uint16_t *)x->ikc[r], (int64_t)x->nb * BLK * IHD,
                              0) != hipSuccess)
            return -1;
    int32_t *hp = (int32_t *)malloc(sizeof(int32_t) * (size_t)x->nb);
    if (!hp || hipMalloc((void **)&x->pages, 4 * (size_t)x->nb) != hipSuccess ||
        hipMalloc((void **)&x->sel, 4 * G * TOPK_B) != hipSuccess ||
        hipMalloc((void **)&x->ctr, sizeof(unsigned)) != hipSuccess ||
        hipMemset(x->ctr, 0, sizeof(unsigned)) != hipSuccess ||
        hipMalloc(&x->ws, (x->ws_n = m3g_msa_indexer_ws(1, G, x->nb))) != hipSuccess)
        return -1;
    for (int p = 0; p < x->nb; p++)
        hp[p] = p;
    if (hipMemcpy(x->pages, hp, 4 * (size_t)x->nb, hipMemcpyHostToDevice) != hipSuccess)
        return -1;
    free(hp);
    bc->ctx = x;
    bc->launch = idx_launch;
    return 0;
}

/* ---- the MSA decode step: indexer, selection and attention ------------- */
/* One sparse layer's decode step as m3-gpu launches it (gpu/forward.cu): the
 * indexer with its top-16 merge (m3g_msa_indexer_ex) over ctx_len index-K
 * rows, then the block-sparse attention over the 16 selected blocks of 128
 * keys per KV group (m3g_attention_sk), one query at position ctx_len - 1,
 * bf16 caches. Rotation r has its own index-K cache and its own page table
 * (the pages rotated by r * npages / nrot), so its K/V pages differ from the
 * other rotations' even where the selections agree. Bytes: the index-K
 * cache, the selected K and V, q and the output. */
typedef struct step_ctx {
    float *q, *out, *iq, *bs;
    uint16_t *kc16, *vc16;
    void *ik[4];
    unsigned *ikr[4];
    int32_t *pages[4], *sel;
    unsigned *ctr;
    void *iws, *sws;
    size_t iws_n, sws_n;
    int ctx_len, nb;
    int probe; /* the indexer's probe bits (0: the default, as m3-gpu) */
} step_ctx;

static hipError_t step_launch(void *c, int r, hipStream_t st)
{
    const step_ctx *x = (const step_ctx *)c;
    const int64_t pos0 = x->ctx_len - 1;
    const hipError_t e = m3g_msa_indexer_ex(x->sel, x->bs, x->iq, x->ik[r], M3G_BF16, x->pages[r],
                                            BLK, pos0, 1, G, IHD, x->nb, TOPK_B, 1, 0, x->ctr,
                                            x->iws, x->iws_n, x->ikr[r], x->probe, st);
    if (e != hipSuccess)
        return e;
    return m3g_attention_sk(x->out, x->q, x->kc16, x->vc16, M3G_BF16, x->pages[r], BLK, pos0, 1,
                            NH, NKV, HD, x->sel, TOPK_B, 1, x->sws, x->sws_n, st);
}

static int make_msa_step(bench_case *bc, const char *name, int ctx_len, int l2)
{
    step_ctx *x = (step_ctx *)calloc(1, sizeof *x);
    if (!x)
        return -1;
    x->ctx_len = ctx_len;
    x->nb = (ctx_len + BLK - 1) / BLK;
    const size_t slots = (size_t)x->nb * BLK;
    bc->name = name;
    bc->bytes = 2.0 * (double)ctx_len * IHD + 2.0 * 2.0 * TOPK_B * BLK * NKV * HD +
                2.0 * NH * HD * 4.0;
    bc->flops = 2.0 * G * IHD * (double)ctx_len + 4.0 * NH * TOPK_B * BLK * HD;
    bc->nrot = rotations(bc->bytes, l2) > 4 ? 4 : rotations(bc->bytes, l2);
    x->q = (float *)dev_rand((size_t)NH * HD, 0, 41u, 1.0f);
    x->out = (float *)dev_rand((size_t)NH * HD, 0, 42u, 0.0f);
    x->iq = (float *)dev_rand((size_t)G * IHD, 0, 43u, 1.0f);
    x->bs = (float *)dev_rand((size_t)G * x->nb, 0, 44u, 0.0f);
    x->kc16 = (uint16_t *)dev_rand(slots * NKV * HD, 1, 45u, 1.0f);
    x->vc16 = (uint16_t *)dev_rand(slots * NKV * HD, 1, 46u, 1.0f);
    int32_t *hp = (int32_t *)malloc(sizeof(int32_t) * (size_t)x->nb);
    if (!x->q || !x->out || !x->iq || !x->bs || !x->kc16 || !x->vc16 || !hp)
        return -1;
    for (int r = 0; r < bc->nrot; r++) {
        for (int p = 0; p < x->nb; p++)
            hp[p] = (int)((p + (int64_t)r * x->nb / bc->nrot) % x->nb);
        if (!(x->ik[r] = dev_rand(slots * IHD, 1, 47u + r, 1.0f)) ||
            hipMalloc((void **)&x->ikr[r], 2 * sizeof(unsigned)) != hipSuccess ||
            m3g_ik_range_reset(x->ikr[r], 0) != hipSuccess ||
            m3g_ik_range_scan(x->ikr[r], (const uint16_t *)x->ik[r], (int64_t)slots * IHD, 0) !=
                hipSuccess ||
            hipMalloc((void **)&x->pages[r], 4 * (size_t)x->nb) != hipSuccess ||
            hipMemcpy(x->pages[r], hp, 4 * (size_t)x->nb, hipMemcpyHostToDevice) != hipSuccess)
            return -1;
    }
    x->iws_n = m3g_msa_indexer_ws(1, G, x->nb);
    x->sws_n = m3g_attention_sk_ws(BLK, ctx_len - 1, 1, NH, NKV, HD, hp, TOPK_B, M3G_BF16);
    free(hp);
    if (hipMalloc((void **)&x->sel, 4 * G * TOPK_B) != hipSuccess ||
        hipMalloc((void **)&x->ctr, sizeof(unsigned)) != hipSuccess ||
        hipMemset(x->ctr, 0, sizeof(unsigned)) != hipSuccess ||
        hipMalloc(&x->iws, x->iws_n) != hipSuccess ||
        hipMalloc(&x->sws, x->sws_n > 0 ? x->sws_n : 16) != hipSuccess)
        return -1;
    bc->ctx = x;
    bc->launch = step_launch;
    return 0;
}

/* The step of base with the indexer's probe bits probe. */
static int make_msa_step_alt(bench_case *bc, const char *name, const bench_case *base, int probe)
{
    step_ctx *x = (step_ctx *)clone_case(bc, name, base, sizeof *x);
    if (!x)
        return -1;
    x->probe = probe;
    return 0;
}

/* ---- MSA prefill attention at 128K (m3g_msa_attention_prefill) ----------- */
/* A slab of the last PF_ROWS query rows of a PF_CTX-token sequence, bf16 KV
 * cache, 64 q / 4 kv heads, block 128, 16 selected blocks per (row, group):
 * the forced init block 0 and local block, plus 14 distinct random visible
 * blocks (fixed seed). pool 0: drawn independently per row (no sharing
 * between neighbouring rows beyond the two forced blocks); pool P > 0: the
 * rows of one 128-row query block draw their 14 from a common random pool of
 * P blocks (P = 14: the whole query block shares one selection). The
 * "full" cases time the whole prefill: all PF_CTX rows in one launch (rows
 * of the first 16 query blocks select every visible block). FLOPs are the
 * logical 4 * hd per (query head, causally visible selected key). */
enum { PF_CTX = 131072, PF_ROWS = 2048, PF_RAND = 14 };

typedef struct pf_ctx {
    float *q, *out;
    void *kc[2], *vc[2];
    int32_t *pages, *blocks, *hb; /* hb: host copy of blocks [NKV, T, TOPK_B] */
    int T, ctx_len;
    int onepass; /* 1: m3g_msa_attention_prefill_onepass, 0: the default (exact p) */
} pf_ctx;

static hipError_t pf_launch(void *c, int r, hipStream_t st)
{
    pf_ctx *p = (pf_ctx *)c;
    return (p->onepass ? m3g_msa_attention_prefill_onepass : m3g_msa_attention_prefill)(
        p->out, p->q, p->kc[r], p->vc[r], M3G_BF16, p->pages, BLK, p->ctx_len - p->T, p->T, NH, NKV,
        HD, p->blocks, TOPK_B, 1, st);
}

static uint32_t pf_rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}

/* n distinct draws from [lo, hi] (n <= hi - lo + 1) not in avoid[0..na) */
static void pf_distinct(int32_t *dst, int n, int lo, int hi, const int32_t *avoid, int na,
                        uint64_t *s)
{
    for (int i = 0; i < n;) {
        const int b = lo + (int)(pf_rng(s) % (uint32_t)(hi - lo + 1));
        int used = 0;
        for (int j = 0; j < na; j++)
            used |= avoid[j] == b;
        for (int j = 0; j < i; j++)
            used |= dst[j] == b;
        if (!used)
            dst[i++] = b;
    }
}

/* T query rows ending at PF_CTX - 1 (T = PF_CTX: the whole prefill; rows
 * whose query block has fewer than 14 earlier blocks select all of them). */
static int make_msa_prefill(bench_case *bc, const char *name, int pool, int T)
{
    pf_ctx *p = (pf_ctx *)calloc(1, sizeof *p);
    if (!p)
        return -1;
    const int npages = PF_CTX / BLK;
    const int64_t pos0 = PF_CTX - T;
    const size_t nkv = (size_t)PF_CTX * NKV * HD;
    p->T = T;
    p->ctx_len = PF_CTX;
    p->hb = (int32_t *)malloc(sizeof(int32_t) * (size_t)NKV * T * TOPK_B);
    int32_t *hp = (int32_t *)malloc(sizeof(int32_t) * (size_t)npages);
    unsigned char *seen = (unsigned char *)calloc((size_t)NKV * npages, 1);
    if (!p->hb || !hp || !seen)
        return -1;
    uint64_t s = 0x5eed0000u + (uint64_t)pool;
    double keys = 0;
    for (int g = 0; g < NKV; g++) {
        int32_t poolb[64];
        int pool_qb = -1, np = 0;
        for (int t = 0; t < T; t++) {
            const int64_t pos = pos0 + t;
            const int qb = (int)(pos / BLK), avail = qb - 1; /* blocks 1 .. qb - 1 */
            int32_t *row = p->hb + ((size_t)g * T + t) * TOPK_B;
            int nf = 1;
            row[0] = 0;
            if (qb > 0)
                row[nf++] = qb;
            for (int i = nf; i < TOPK_B; i++)
                row[i] = -1;
            if (pool > 0) {
                if (qb != pool_qb) { /* a new query block: a new pool */
                    np = avail < pool ? (avail > 0 ? avail : 0) : pool;
                    pf_distinct(poolb, np, 1, qb - 1, row, nf, &s);
                    pool_qb = qb;
                }
                int32_t pick[PF_RAND];
                const int npick = np < PF_RAND ? np : PF_RAND;
                pf_distinct(pick, npick, 0, np - 1, NULL, 0, &s);
                for (int i = 0; i < npick; i++)
                    row[nf + i] = poolb[pick[i]];
            } else {
                const int npick = avail < PF_RAND ? (avail > 0 ? avail : 0) : PF_RAND;
                pf_distinct(row + nf, npick, 1, qb - 1, row, nf, &s);
            }
            for (int i = 0; i < TOPK_B; i++) {
                if (row[i] < 0)
                    continue;
                const int64_t k0 = (int64_t)row[i] * BLK;
                keys += (double)(pos - k0 + 1 < (int64_t)BLK ? pos - k0 + 1 : (int64_t)BLK);
                seen[(size_t)g * npages + row[i]] = 1;
            }
        }
    }
    double ublocks = 0;
    for (size_t i = 0; i < (size_t)NKV * npages; i++)
        ublocks += seen[i];
    free(seen);
    for (int i = 0; i < npages; i++)
        hp[i] = i;
    bc->name = name;
    bc->flops = 4.0 * HD * (NH / NKV) * keys;
    /* the work the one-pass warpgroup kernel issues (sm_90a): per group of 4
     * consecutive rows (64 wgmma rows: 4 rows x 16 heads), S and P V over
     * all 128 keys of every block any of the 4 rows chose */
    double wg_blocks = 0;
    for (int g = 0; g < NKV; g++)
        for (int t4 = 0; t4 < T; t4 += 4) {
            int32_t seen4[4 * TOPK_B];
            int ns = 0;
            for (int t = t4; t < t4 + 4 && t < T; t++)
                for (int i = 0; i < TOPK_B; i++) {
                    const int32_t b = p->hb[((size_t)g * T + t) * TOPK_B + i];
                    int dup = b < 0;
                    for (int j = 0; j < ns && !dup; j++)
                        dup = seen4[j] == b;
                    if (!dup)
                        seen4[ns++] = b;
                }
            wg_blocks += ns;
        }
    bc->issued = wg_blocks * 4.0 * 64 * BLK * HD;
    bc->bytes = ublocks * BLK * HD * 2.0 * 2.0 + 2.0 * 4.0 * T * NH * HD; /* K,V blocks + q, out */
    bc->nrot = T >= PF_CTX / 2 ? 1 : 2; /* each copy of the caches (268 MB) exceeds 2x L2 */
    p->q = (float *)dev_rand((size_t)T * NH * HD, 0, 41u, 2.0f);
    p->out = (float *)dev_rand((size_t)T * NH * HD, 0, 42u, 0.0f);
    for (int r = 0; r < bc->nrot; r++) {
        p->kc[r] = dev_rand(nkv, 1, 43u + 2 * r, 1.0f);
        p->vc[r] = dev_rand(nkv, 1, 44u + 2 * r, 1.0f);
        if (!p->kc[r] || !p->vc[r])
            return -1;
    }
    const size_t nb = sizeof(int32_t) * (size_t)NKV * T * TOPK_B;
    if (!p->q || !p->out || hipMalloc((void **)&p->pages, 4 * (size_t)npages) != hipSuccess ||
        hipMalloc((void **)&p->blocks, nb) != hipSuccess ||
        hipMemcpy(p->pages, hp, 4 * (size_t)npages, hipMemcpyHostToDevice) != hipSuccess ||
        hipMemcpy(p->blocks, p->hb, nb, hipMemcpyHostToDevice) != hipSuccess)
        return -1;
    free(hp);
    bc->ctx = p;
    bc->launch = pf_launch;
    return 0;
}

/* The case src (a make_msa_prefill case) through the one-pass kernel:
 * same device buffers, same selections. */
static int make_msa_prefill_onepass(bench_case *bc, const char *name, const bench_case *src)
{
    pf_ctx *p = (pf_ctx *)clone_case(bc, name, src, sizeof *p);
    if (!p)
        return -1;
    p->onepass = 1;
    return 0;
}

/* ---- dense decode attention (layers 0-2: every key 0 .. pos) ------------
 * One query row at position ctx_len - 1, 64 q / 4 kv heads, hd 128, bf16
 * caches, bf16 mode, through m3g_attention_sk_tuned (probe 0: the default,
 * the dense tensor-core split-key path at >= its key threshold;
 * M3G_SK_TWO_LAUNCH the two-launch path; M3G_SK_DENSE_TC the tensor-core
 * path at any length). Rotation r reads its own K/V copy; the page table is
 * a permutation (page p -> (37 p) mod npages), as a real cache's may be. */
typedef struct dd_ctx {
    float *q, *out;
    uint16_t *kc[64], *vc[64];
    int32_t *pages;
    void *ws;
    size_t ws_n;
    int ctx_len, variant, nrot;
} dd_ctx;

static hipError_t dd_launch(void *c, int r, hipStream_t st)
{
    const dd_ctx *x = (const dd_ctx *)c;
    return m3g_attention_sk_tuned(x->out, x->q, x->kc[r], x->vc[r], M3G_BF16, x->pages, BLK,
                                  x->ctx_len - 1, 1, NH, NKV, HD, NULL, 0, 1, x->ws, x->ws_n,
                                  x->variant, st);
}

/* base == NULL: allocate the data; else the same data through another variant. */
static int make_dense_decode(bench_case *bc, const char *name, int ctx_len, int l2, int variant,
                             const bench_case *base)
{
    dd_ctx *x = (dd_ctx *)calloc(1, sizeof *x);
    if (!x)
        return -1;
    bc->name = name;
    bc->bytes = 2.0 * 2.0 * (double)ctx_len * NKV * HD + 2.0 * NH * HD * 4.0;
    bc->flops = 4.0 * NH * (double)ctx_len * HD;
    bc->launch = dd_launch;
    bc->ctx = x;
    if (base) {
        *x = *(const dd_ctx *)base->ctx;
        x->variant = variant;
        bc->nrot = base->nrot;
        return 0;
    }
    const int npages = (ctx_len + BLK - 1) / BLK;
    const size_t nel = (size_t)npages * BLK * NKV * HD;
    bc->nrot = rotations(bc->bytes, l2); /* <= 64 */
    x->nrot = bc->nrot;
    x->ctx_len = ctx_len;
    x->variant = variant;
    x->q = (float *)dev_rand((size_t)NH * HD, 0, 61u, 4.0f); /* |s| up to ~4: peaked softmax */
    x->out = (float *)dev_rand((size_t)NH * HD, 0, 62u, 0.0f);
    if (!x->q || !x->out)
        return -1;
    for (int r = 0; r < bc->nrot; r++)
        if (!(x->kc[r] = (uint16_t *)dev_rand(nel, 1, 63u + 2 * r, 1.0f)) ||
            !(x->vc[r] = (uint16_t *)dev_rand(nel, 1, 64u + 2 * r, 1.0f)))
            return -1;
    int32_t *hp = (int32_t *)malloc(sizeof(int32_t) * (size_t)npages);
    if (!hp)
        return -1;
    for (int p = 0; p < npages; p++)
        hp[p] = (int32_t)(((int64_t)p * 37) % npages);
    x->ws_n = m3g_attention_sk_ws(BLK, ctx_len - 1, 1, NH, NKV, HD, NULL, 0, M3G_BF16);
    if (hipMalloc((void **)&x->pages, 4 * (size_t)npages) != hipSuccess ||
        hipMemcpy(x->pages, hp, 4 * (size_t)npages, hipMemcpyHostToDevice) != hipSuccess ||
        hipMalloc(&x->ws, x->ws_n) != hipSuccess)
        return -1;
    free(hp);
    return 0;
}

/* ---- fused GEMVs : [q; k; v (; index q; index k)] and [gate; up] ------ */

typedef struct fused_ctx {
    m3g_mat w[64];
    float *x[64], *y[64]; /* y: the segments' outputs back to back */
    int T, nseg, swiglu, segrows[M3G_MAX_SEG];
} fused_ctx;

static hipError_t fused_launch(void *c, int r, hipStream_t st)
{
    fused_ctx *f = (fused_ctx *)c;
    if (f->swiglu)
        return m3g_linear_swiglu(f->y[r], f->w[r].rows / 2, NULL, f->x[r], f->w[r], f->T, 1.702f,
                                 7.0f, 1.0f, 1, NULL, st);
    m3g_seg seg[M3G_MAX_SEG];
    float *p = f->y[r];
    for (int s = 0; s < f->nseg; s++) {
        seg[s].y = p;
        seg[s].ld = seg[s].rows = f->segrows[s];
        p += (size_t)f->T * f->segrows[s];
    }
    return m3g_linear_multi(f->x[r], f->w[r], seg, f->nseg, f->T, 1, NULL, st);
}

/* swiglu: segrows = {I, I} ([gate; up]), output [T, I] */
static int make_fused(bench_case *bc, const char *name, const int *segrows, int nseg, int swiglu,
                      int cols, int T, int l2)
{
    fused_ctx *f = (fused_ctx *)calloc(1, sizeof *f);
    if (!f)
        return -1;
    int rows = 0;
    for (int s = 0; s < nseg; s++)
        rows += f->segrows[s] = segrows[s];
    const int orows = swiglu ? rows / 2 : rows;
    bc->name = name;
    bc->bytes = 2.0 * rows * (double)cols + 4.0 * T * (orows + cols);
    bc->flops = 2.0 * rows * (double)cols * T;
    bc->nrot = rotations(bc->bytes, l2);
    f->T = T, f->nseg = nseg, f->swiglu = swiglu;
    for (int r = 0; r < bc->nrot; r++) {
        f->w[r].rows = rows;
        f->w[r].cols = cols;
        f->w[r].dtype = M3G_BF16;
        f->w[r].data = dev_rand((size_t)rows * cols, 1, 17u + r, 0.05f);
        f->x[r] = (float *)dev_rand((size_t)T * cols, 0, 99u + r, 1.0f);
        f->y[r] = (float *)dev_rand((size_t)T * orows, 0, 7u, 0.0f);
        if (!f->w[r].data || !f->x[r] || !f->y[r])
            return -1;
    }
    bc->ctx = f;
    bc->launch = fused_launch;
    return 0;
}

/* ---- decode GEMV kernel variants (m3g_gemv_variant) on the same data ---- */

typedef struct gv_ctx {
    const bench_case *base; /* a make_linear (T <= 8) or make_fused case */
    int variant;
} gv_ctx;

static hipError_t gv_launch(void *c, int r, hipStream_t st)
{
    const gv_ctx *g = (const gv_ctx *)c;
    if (g->variant >= 100) { /* the streaming ceiling over the same weights */
        if (g->base->launch == lin_launch) {
            const lin_ctx *l = (const lin_ctx *)g->base->ctx;
            return m3g_gemv_ceiling(g->variant - 100, l->w[r], l->y[r], l->w[r].rows, st);
        }
        const fused_ctx *f = (const fused_ctx *)g->base->ctx;
        return m3g_gemv_ceiling(g->variant - 100, f->w[r], f->y[r],
                                f->swiglu ? f->w[r].rows / 2 : f->w[r].rows, st);
    }
    if (g->base->launch == lin_launch) {
        const lin_ctx *l = (const lin_ctx *)g->base->ctx;
        const m3g_seg s = {l->y[r], l->w[r].rows, l->w[r].rows};
        return m3g_gemv_variant(g->variant, l->x[r], l->w[r], &s, 1, NULL, l->T, st);
    }
    const fused_ctx *f = (const fused_ctx *)g->base->ctx;
    const float sw[3] = {1.702f, 7.0f, 1.0f};
    m3g_seg seg[M3G_MAX_SEG];
    float *p = f->y[r];
    for (int s = 0; s < f->nseg; s++) {
        seg[s].y = p;
        seg[s].ld = seg[s].rows = f->swiglu ? f->w[r].rows / 2 : f->segrows[s];
        p += (size_t)f->T * f->segrows[s];
    }
    return m3g_gemv_variant(g->variant, f->x[r], f->w[r], seg, f->swiglu ? 1 : f->nseg,
                            f->swiglu ? sw : NULL, f->T, st);
}

/* After the GEMV cases cases[i0, n): one case per (case, variant >= 1) that
 * applies to the shape (tried once on copy 0), named "CASE ~ VARIANT"; all
 * variants, or only variant 1 (the previous default kernel). Returns the
 * new case count (at most cap). */
static int add_gemv_variants(bench_case *cases, int i0, int n, int cap, int all, hipStream_t st)
{
    const int n0 = n;
    for (int i = i0; i < n0; i++)
        for (int v = 1; n < cap; v++) {
            if (v < 100 && (!m3g_gemv_variant_name(v) || (!all && v > 1)))
                v = 100; /* then the streaming ceilings (all variants only) */
            if (v >= 100 && (!all || !m3g_gemv_ceiling_name(v - 100)))
                break;
            gv_ctx *g = (gv_ctx *)calloc(1, sizeof *g);
            char *name = (char *)malloc(96);
            if (!g || !name)
                return n;
            g->base = &cases[i];
            g->variant = v;
            const hipError_t e = gv_launch(g, 0, st);
            if (e == hipSuccess && hipStreamSynchronize(st) == hipSuccess) {
                snprintf(name, 96, "%s ~ %s", cases[i].name,
                         v >= 100 ? m3g_gemv_ceiling_name(v - 100) : m3g_gemv_variant_name(v));
                cases[n] = cases[i];
                cases[n].name = name;
                cases[n].ctx = g;
                cases[n].launch = gv_launch;
                n++;
            } else {
                (void)hipGetLastError();
                free(g), free(name);
            }
        }
    return n;
}

/* ---- one whole decoder layer at decode (T = 1), as bin/m3-gpu runs it ---- */
/* The launch sequence of gpu/m3-gpu.cu's gpu_step_batch + seq_attention for
 * one bf16 decode row at position ctx_len - 1 (same kernels, same order):
 * input norm (+ residual), fused q/k/v(/index q/index k) GEMV, QK-norm +
 * RoPE, cache writes, indexer + top-16 (sparse), MSA or dense attention over
 * the bf16 KV cache, o_proj, post-attention norm (+ residual), then MoE
 * (router, 4 routed experts, shared expert, combine) or the dense SwiGLU
 * MLP. Random weights at M3 shapes; the expert table is the MoE case's. A
 * launch reads ~0.8 GB (sparse MoE layer) of weights, far more than L2, so
 * every launch reads cold weights from HBM without copies; the activations
 * carry over between launches (the residual stream keeps growing, which
 * changes the routed experts from launch to launch, as in a real decode). */
typedef struct layer_ctx {
    int sparse, moe, ctx_len;
    double attn_bytes; /* of the attention half (the rest: the MoE or MLP) */
    m3g_mat qkv, o, router, sgu, sd, gate, up, down;
    const moe_ctx *experts;
    void *in_norm, *post_norm, *q_norm, *k_norm, *iq_norm, *ik_norm, *rbias;
    float *h, *xn, *tmp, *q, *kraw, *vraw, *att, *iq, *ikraw, *ikc, *bs, *g, *u, *ye, *sh;
    float *rw, *rscores, *cos_t, *sin_t;
    uint16_t *kc16, *vc16, *ik16;
    int32_t *pages, *blk, *ridx;
    unsigned *ictr, *ikr; /* ikr: ik16's exponent range words (as m3-gpu) */
    void *iws, *sws;
    size_t iws_n, sws_n;
    int old_seq; /* bit 0: the previous sequence (separate QK-norm / RoPE / cache-write
                    launches, routed gate and up GEMVs + m3g_swiglu), else m3-gpu's fused
                    launches; bit 1: the norms and the prologue without their early PDL
                    release; bit 2: the router, the grouped expert GEMVs and the combine as
                    plain launches, without PDL (7 = exactly the previous sequence);
                    LAYER_ATTN_ONLY / LAYER_FFN_ONLY: the launches up to the post-attention
                    norm / the rest (the two halves of the layer, timed apart);
                    LAYER_ONE_STREAM: every launch on one stream (m3-gpu runs the shared
                    expert on a side stream, beside the router and the routed experts);
                    LAYER_IDX_EXACT: the indexer's exact scores (M3G_IDX_EXACT) */
    hipStream_t side;
    hipEvent_t ev_fork, ev_join;
} layer_ctx;
enum { LAYER_ATTN_ONLY = 8, LAYER_FFN_ONLY = 16, LAYER_ONE_STREAM = 32, LAYER_IDX_EXACT = 64 };

static hipError_t layer_launch(void *c, int r, hipStream_t st)
{
    const layer_ctx *x = (const layer_ctx *)c;
    const int64_t pos0 = x->ctx_len - 1;
    const int nb = (x->ctx_len + BLK - 1) / BLK;
    const float eps = 1e-6f, al = 1.702f, lim = 7.0f, be = 1.0f;
    const m3g_seg seg[5] = {{x->q, NH * HD, NH * HD}, {x->kraw, NKV * HD, NKV * HD},
                            {x->vraw, NKV * HD, NKV * HD}, {x->iq, G * IHD, G * IHD},
                            {x->ikraw, IHD, IHD}};
    hipError_t e;
    (void)r;
#define LK(call)                                                                                \
    do {                                                                                        \
        if ((e = (call)) != hipSuccess)                                                         \
            return e;                                                                           \
    } while (0)
    const int rel = !(x->old_seq & 2);
    const int mp = !(x->old_seq & 4); /* PDL launches of the MoE kernels */
    if (x->old_seq & LAYER_FFN_ONLY)
        goto ffn;
    LK(m3g_residual_rmsnorm_ex(x->h, x->tmp, x->xn, x->in_norm, M3G_BF16, 1, H, eps, 1, rel, st));
    LK(m3g_linear_multi(x->xn, x->qkv, seg, x->sparse ? 5 : 3, 1, 1, NULL, st));
    if (x->old_seq & 1) {
        LK(m3g_headnorm_rope(x->q, x->q, NULL, BLK, pos0, x->q_norm, M3G_BF16, 1, NH, HD, RD,
                             x->cos_t, x->sin_t, eps, 1, st));
        if (x->sparse)
            LK(m3g_headnorm_rope(x->iq, x->iq, NULL, BLK, pos0, x->iq_norm, M3G_BF16, 1, G, IHD,
                                 RD, x->cos_t, x->sin_t, eps, 1, st));
        LK(m3g_to_bf16(x->vc16 + pos0 * NKV * HD, x->vraw, NKV * HD, st));
        LK(m3g_headnorm_rope_bf16(x->kraw, x->kc16, x->pages, BLK, pos0, x->k_norm, M3G_BF16, 1,
                                  NKV, HD, RD, x->cos_t, x->sin_t, eps, 1, st));
        if (x->sparse) {
            LK(m3g_headnorm_rope(x->ikraw, x->ikc, x->pages, BLK, pos0, x->ik_norm, M3G_BF16, 1,
                                 1, IHD, RD, x->cos_t, x->sin_t, eps, 1, st));
            LK(m3g_to_bf16_ranged(x->ik16 + pos0 * IHD, x->ikc + pos0 * IHD, IHD, x->ikr, st));
        }
    } else { /* m3-gpu's m3g_attn_prologue: all of the above in one launch */
        m3g_prologue p;
        memset(&p, 0, sizeof p);
        p.T = 1, p.B = BLK, p.rd = RD, p.mode = 1, p.pos0 = pos0, p.page_table = x->pages;
        p.cos_t = x->cos_t, p.sin_t = x->sin_t, p.eps = eps, p.no_release = !rel;
        m3g_pro_job *j = p.job;
        j->src = j->dst = x->q, j->w = x->q_norm, j->w_dtype = M3G_BF16, j->nheads = NH;
        (j++)->hd = HD;
        if (x->sparse) {
            j->src = j->dst = x->iq, j->w = x->iq_norm, j->w_dtype = M3G_BF16, j->nheads = G;
            (j++)->hd = IHD;
        }
        j->src = x->vraw, j->dst16 = x->vc16 + pos0 * NKV * HD, j->nheads = NKV;
        (j++)->hd = HD;
        j->src = x->kraw, j->dst16 = x->kc16, j->paged = 2, j->w = x->k_norm;
        j->w_dtype = M3G_BF16, j->nheads = NKV;
        (j++)->hd = HD;
        if (x->sparse) {
            j->src = x->ikraw, j->dst = x->ikc, j->paged = 1, j->dst16 = x->ik16 + pos0 * IHD;
            j->rng = x->ikr, j->w = x->ik_norm, j->w_dtype = M3G_BF16, j->nheads = 1;
            (j++)->hd = IHD;
        }
        p.njobs = (int)(j - p.job);
        LK(m3g_attn_prologue(&p, st));
    }
    if (x->sparse) {
        LK(m3g_msa_indexer_ex(x->blk, x->bs, x->iq, x->ik16, M3G_BF16, x->pages, BLK, pos0, 1, G,
                              IHD, nb, TOPK_B, 1, 0, x->ictr, x->iws, x->iws_n, x->ikr,
                              (x->old_seq & LAYER_IDX_EXACT) ? M3G_IDX_EXACT : 0, st));
    }
    LK(m3g_attention_sk(x->att, x->q, x->kc16, x->vc16, M3G_BF16, x->pages, BLK, pos0, 1, NH,
                        NKV, HD, x->sparse ? x->blk : NULL, x->sparse ? TOPK_B : 0, 1, x->sws,
                        x->sws_n, st));
    LK(m3g_linear(x->tmp, H, x->att, x->o, 1, 1, NULL, st));
    LK(m3g_residual_rmsnorm_ex(x->h, x->tmp, x->xn, x->post_norm, M3G_BF16, 1, H, eps, 1, rel,
                               st));
    if (x->old_seq & LAYER_ATTN_ONLY)
        return hipSuccess;
ffn:
    if (x->moe) {
        const moe_ctx *m = x->experts;
        const int64_t es = (int64_t)I * H;
        const int side_sh = !(x->old_seq & (1 | LAYER_ONE_STREAM)); /* as gpu/forward.cu */
        if (side_sh) {
            LK(hipEventRecord(x->ev_fork, st));
            LK(hipStreamWaitEvent(x->side, x->ev_fork, 0));
            LK(m3g_linear_swiglu(x->u, I, NULL, x->xn, x->sgu, 1, al, lim, be, 1, NULL, x->side));
            LK(m3g_linear(x->sh, H, x->u, x->sd, 1, 1, NULL, x->side));
            LK(hipEventRecord(x->ev_join, x->side));
        }
        LK(m3g_router_ex(x->ridx, x->rw, x->rscores, x->xn, x->router, x->rbias, M3G_F32, 1,
                         TOPK_E, mp, st));
        if (x->old_seq & 1) {
            LK(m3g_gemv_grouped_ex(x->g, x->xn, H, 0, m->eg, es, M3G_BF16, I, H, x->ridx, 1,
                                   TOPK_E, 1, mp, st));
            LK(m3g_gemv_grouped_ex(x->u, x->xn, H, 0, m->eu, es, M3G_BF16, I, H, x->ridx, 1,
                                   TOPK_E, 1, mp, st));
            LK(m3g_swiglu(x->g, x->g, x->u, (int64_t)TOPK_E * I, al, lim, be, 1, st));
        } else { /* gate + up + SwiGLU in one grouped GEMV (m3-gpu) */
            LK(m3g_gemv_grouped_swiglu_ex(x->g, x->xn, H, 0, m->eg, m->eu, es, M3G_BF16, I, H,
                                          x->ridx, 1, TOPK_E, al, lim, be, 1, mp, st));
        }
        LK(m3g_gemv_grouped_ex(x->ye, x->g, (int64_t)TOPK_E * I, I, m->ed, es, M3G_BF16, H, I,
                               x->ridx, 1, TOPK_E, 1, mp, st));
        if (side_sh) {
            LK(hipStreamWaitEvent(st, x->ev_join, 0));
        } else {
            LK(m3g_linear_swiglu(x->g, I, x->u, x->xn, x->sgu, 1, al, lim, be, 1, NULL, st));
            LK(m3g_linear(x->sh, H, x->g, x->sd, 1, 1, NULL, st));
        }
        LK(m3g_moe_combine_ex(x->tmp, x->ye, x->rw, x->sh, 1, TOPK_E, H, 2.0f, 1, mp, st));
    } else {
        LK(m3g_linear(x->g, ID, x->xn, x->gate, 1, 1, NULL, st));
        LK(m3g_linear(x->u, ID, x->xn, x->up, 1, 1, NULL, st));
        LK(m3g_swiglu(x->g, x->g, x->u, (int64_t)ID, al, lim, be, 1, st));
        LK(m3g_linear(x->tmp, H, x->g, x->down, 1, 1, NULL, st));
    }
#undef LK
    return hipSuccess;
}

static m3g_mat layer_mat(int rows, int cols, int dtype, uint32_t seed)
{
    m3g_mat w;
    w.rows = rows;
    w.cols = cols;
    w.dtype = dtype;
    w.data = dev_rand((size_t)rows * cols, dtype == M3G_BF16, seed, 0.02f);
    return w;
}

/* sparse: MSA attention + indexer (layers 3-59) or dense causal attention
 * (layers 0-2); moe: the MoE block (needs experts) or the dense MLP. */
static int make_layer(bench_case *bc, const char *name, int sparse, int moe, int ctx_len,
                      const moe_ctx *experts)
{
    layer_ctx *x = (layer_ctx *)calloc(1, sizeof *x);
    if (!x)
        return -1;
    x->sparse = sparse;
    x->moe = moe;
    x->ctx_len = ctx_len;
    x->experts = experts;
    const int nb = (ctx_len + BLK - 1) / BLK, qrows = NH * HD + 2 * NKV * HD;
    const size_t slots = (size_t)nb * BLK;
    x->qkv = layer_mat(qrows + (sparse ? G * IHD + IHD : 0), H, M3G_BF16, 101u);
    x->o = layer_mat(H, NH * HD, M3G_BF16, 102u);
    /* the attention half's bytes: its weights, the K/V it reads (16 selected
     * blocks, or the whole causal context) and the bf16 index-K cache */
    double bytes = 2.0 * (x->qkv.rows + x->o.rows) * (double)H +
                   2.0 * 2.0 * NKV * HD * (sparse ? (double)TOPK_B * BLK : (double)ctx_len) +
                   (sparse ? 2.0 * IHD * (double)ctx_len : 0.0);
    x->attn_bytes = bytes;
    if (moe) {
        x->router = layer_mat(E, H, M3G_F32, 103u);
        x->sgu = layer_mat(2 * I, H, M3G_BF16, 104u);
        x->sd = layer_mat(H, I, M3G_BF16, 105u);
        bytes += 4.0 * E * H + 2.0 * 3 * I * (double)H * (TOPK_E + 1);
    } else {
        x->gate = layer_mat(ID, H, M3G_BF16, 106u);
        x->up = layer_mat(ID, H, M3G_BF16, 107u);
        x->down = layer_mat(H, ID, M3G_BF16, 108u);
        bytes += 2.0 * 3 * ID * (double)H;
    }
    x->in_norm = dev_rand(H, 1, 110u, 0.1f);
    x->post_norm = dev_rand(H, 1, 111u, 0.1f);
    x->q_norm = dev_rand(HD, 1, 112u, 0.1f);
    x->k_norm = dev_rand(HD, 1, 113u, 0.1f);
    x->iq_norm = dev_rand(IHD, 1, 114u, 0.1f);
    x->ik_norm = dev_rand(IHD, 1, 115u, 0.1f);
    x->rbias = dev_rand(E, 0, 116u, 0.01f);
    x->h = (float *)dev_rand(H, 0, 120u, 1.0f);
    x->tmp = (float *)dev_rand(H, 0, 121u, 0.0f);
    x->xn = (float *)dev_rand(H, 0, 122u, 0.0f);
    x->q = (float *)dev_rand((size_t)qrows + G * IHD + IHD, 0, 123u, 0.0f);
    x->kraw = x->q + NH * HD;
    x->vraw = x->kraw + NKV * HD;
    x->iq = x->vraw + NKV * HD;
    x->ikraw = x->iq + G * IHD;
    x->att = (float *)dev_rand((size_t)NH * HD, 0, 124u, 0.0f);
    x->g = (float *)dev_rand((size_t)TOPK_E * I + ID, 0, 125u, 0.0f);
    x->u = (float *)dev_rand((size_t)TOPK_E * I + ID, 0, 126u, 0.0f);
    x->ye = (float *)dev_rand((size_t)TOPK_E * H, 0, 127u, 0.0f);
    x->sh = (float *)dev_rand(H, 0, 128u, 0.0f);
    x->rw = (float *)dev_rand(TOPK_E, 0, 129u, 0.0f);
    x->rscores = (float *)dev_rand(E, 0, 130u, 0.0f);
    x->cos_t = (float *)dev_rand(RD / 2, 0, 131u, 1.0f);
    x->sin_t = (float *)dev_rand(RD / 2, 0, 132u, 1.0f);
    x->bs = (float *)dev_rand((size_t)G * nb, 0, 133u, 0.0f);
    x->kc16 = (uint16_t *)dev_rand(slots * NKV * HD, 1, 134u, 1.0f);
    x->vc16 = (uint16_t *)dev_rand(slots * NKV * HD, 1, 135u, 1.0f);
    if (sparse) {
        x->ikc = (float *)dev_rand(slots * IHD, 0, 136u, 1.0f);
        x->ik16 = (uint16_t *)dev_rand(slots * IHD, 1, 136u, 1.0f); /* same values */
    }
    int32_t *hp = (int32_t *)malloc(sizeof(int32_t) * (size_t)nb);
    if (!x->qkv.data || !x->o.data || (moe && (!x->router.data || !x->sgu.data || !x->sd.data)) ||
        (!moe && (!x->gate.data || !x->up.data || !x->down.data)) || !x->in_norm ||
        !x->post_norm || !x->q_norm || !x->k_norm || !x->iq_norm || !x->ik_norm || !x->rbias ||
        !x->h || !x->tmp || !x->xn || !x->q || !x->att || !x->g || !x->u || !x->ye || !x->sh ||
        !x->rw || !x->rscores || !x->cos_t || !x->sin_t || !x->bs || !x->kc16 || !x->vc16 ||
        (sparse && (!x->ikc || !x->ik16)) || !hp || (moe && !experts))
        return -1;
    for (int p = 0; p < nb; p++)
        hp[p] = p;
    x->iws_n = m3g_msa_indexer_ws(1, G, nb);
    x->sws_n = m3g_attention_sk_ws(BLK, ctx_len - 1, 1, NH, NKV, HD, sparse ? hp : NULL,
                                   sparse ? TOPK_B : 0, M3G_BF16);
    if (hipMalloc((void **)&x->pages, 4 * (size_t)nb) != hipSuccess ||
        hipMemcpy(x->pages, hp, 4 * (size_t)nb, hipMemcpyHostToDevice) != hipSuccess ||
        hipMalloc((void **)&x->blk, 4 * G * TOPK_B) != hipSuccess ||
        hipMalloc((void **)&x->ridx, 4 * TOPK_E) != hipSuccess ||
        hipMemset(x->ridx, 0, 4 * TOPK_E) != hipSuccess ||
        hipMalloc((void **)&x->ictr, sizeof(unsigned)) != hipSuccess ||
        hipMemset(x->ictr, 0, sizeof(unsigned)) != hipSuccess ||
        hipMalloc((void **)&x->ikr, 2 * sizeof(unsigned)) != hipSuccess ||
        m3g_ik_range_reset(x->ikr, 0) != hipSuccess ||
        (sparse && m3g_ik_range_scan(x->ikr, x->ik16, (int64_t)slots * IHD, 0) != hipSuccess) ||
        hipMalloc(&x->iws, x->iws_n) != hipSuccess ||
        hipMalloc(&x->sws, x->sws_n > 0 ? x->sws_n : 16) != hipSuccess ||
        hipStreamCreate(&x->side) != hipSuccess ||
        hipEventCreateWithFlags(&x->ev_fork, hipEventDisableTiming) != hipSuccess ||
        hipEventCreateWithFlags(&x->ev_join, hipEventDisableTiming) != hipSuccess)
        return -1;
    free(hp);
    bc->name = name;
    bc->bytes = bytes;
    bc->flops = 0.0;
    bc->nrot = 2; /* the same data: ~0.8 GB per launch is cold in a 50 MB L2 anyway */
    bc->ctx = x;
    bc->launch = layer_launch;
    return 0;
}

/* The layer of base through another launch sequence (layer_ctx.old_seq;
 * 7: exactly the previous launches), on the same data. */
static int make_layer_alt(bench_case *bc, const char *name, const bench_case *base, int old_seq)
{
    layer_ctx *x = (layer_ctx *)clone_case(bc, name, base, sizeof *x);
    if (!x)
        return -1;
    x->old_seq = old_seq;
    if (old_seq & LAYER_ATTN_ONLY) /* each half against its own bytes */
        bc->bytes = x->attn_bytes;
    else if (old_seq & LAYER_FFN_ONLY)
        bc->bytes = base->bytes - x->attn_bytes;
    return 0;
}

/* ---- one vision encoder layer (m3g_vision_layer), bf16 mode ----------------------- */

enum { VHV = 1280, VNH = 16, VHD = 80, VIV = 5120, VRD = 78 }; /* M3 vision_config */

typedef struct vl_ctx {
    m3g_vis_layer w;
    m3g_vis_scratch s;
    float *h[64], *cos_t, *sin_t;
    int64_t seg_start, seg_len;
    int T, nrot;
    m3g_blas *blas;
} vl_ctx;

static hipError_t vl_launch(void *c, int r, hipStream_t st)
{
    vl_ctx *a = (vl_ctx *)c;
    return m3g_vision_layer(a->h[r], &a->w, &a->s, a->T, VNH, VHD, VRD, a->cos_t, a->sin_t,
                            &a->seg_start, &a->seg_len, 1, 1e-5f, 1, a->blas, st);
}

static m3g_vec vl_vec(int n, uint32_t seed, float amp)
{
    m3g_vec v = {dev_rand((size_t)n, 1, seed, amp), M3G_BF16};
    return v;
}

static m3g_mat vl_mat(int rows, int cols, uint32_t seed)
{
    m3g_mat m;
    memset(&m, 0, sizeof m);
    m.rows = rows, m.cols = cols, m.dtype = M3G_BF16;
    m.data = dev_rand((size_t)rows * cols, 1, seed, 0.03f);
    return m;
}

/* One layer over T patches of one segment (M3: 16 heads of 80, MLP 5120),
 * random bf16 weights shared by the rotations (the inputs rotate; the
 * activations, ~40 MB at 5,184 patches, dominate the traffic anyway);
 * blas NULL: the exact mode-0 linears. The layer updates h in place, so
 * replays keep transforming it; timing only. */
static int make_vis_layer(bench_case *bc, const char *name, int T, m3g_blas *blas, int l2,
                          const vl_ctx *share)
{
    vl_ctx *a = (vl_ctx *)calloc(1, sizeof *a);
    if (!a)
        return 1;
    a->T = T, a->blas = blas, a->seg_start = 0, a->seg_len = T;
    const double wbytes = 2.0 * (4.0 * VHV * VHV + 2.0 * VHV * VIV);
    bc->name = name;
    bc->bytes = wbytes + 4.0 * T * (12.0 * VHV + 2.0 * VIV); /* weights + main activations */
    bc->flops = 2.0 * T * (4.0 * VHV * VHV + 2.0 * VHV * VIV) + 4.0 * (double)T * T * VHV;
    bc->nrot = share ? share->nrot : rotations(4.0 * T * VHV, l2);
    bc->ctx = a;
    bc->launch = vl_launch;
    if (share) {
        a->w = share->w, a->s = share->s, a->cos_t = share->cos_t, a->sin_t = share->sin_t;
        a->nrot = share->nrot;
        for (int r = 0; r < a->nrot; r++)
            a->h[r] = share->h[r];
        return 0;
    }
    a->nrot = bc->nrot;
    m3g_vis_layer *w = &a->w;
    w->ln1_w = vl_vec(VHV, 0x901, 1.0f), w->ln1_b = vl_vec(VHV, 0x902, 0.1f);
    w->ln2_w = vl_vec(VHV, 0x903, 1.0f), w->ln2_b = vl_vec(VHV, 0x904, 0.1f);
    w->q_b = vl_vec(VHV, 0x905, 0.1f), w->k_b = vl_vec(VHV, 0x906, 0.1f);
    w->v_b = vl_vec(VHV, 0x907, 0.1f), w->o_b = vl_vec(VHV, 0x908, 0.1f);
    w->fc1_b = vl_vec(VIV, 0x909, 0.1f), w->fc2_b = vl_vec(VHV, 0x90a, 0.1f);
    w->q = vl_mat(VHV, VHV, 0x911), w->k = vl_mat(VHV, VHV, 0x912);
    w->v = vl_mat(VHV, VHV, 0x913), w->o = vl_mat(VHV, VHV, 0x914);
    w->fc1 = vl_mat(VIV, VHV, 0x915), w->fc2 = vl_mat(VHV, VIV, 0x916);
    const size_t n = (size_t)T * VHV;
    a->cos_t = (float *)dev_rand((size_t)T * (VRD / 2), 0, 0x921, 1.0f);
    a->sin_t = (float *)dev_rand((size_t)T * (VRD / 2), 0, 0x922, 1.0f);
    float **sp[6] = {&a->s.x, &a->s.q, &a->s.k, &a->s.v, &a->s.att, &a->s.tmp};
    for (int i = 0; i < 6; i++)
        if (hipMalloc(sp[i], n * sizeof(float)) != hipSuccess)
            return 1;
    if (hipMalloc(&a->s.mlp, (size_t)T * VIV * sizeof(float)) != hipSuccess || !a->cos_t ||
        !a->sin_t || !w->fc2.data || !w->fc2_b.p)
        return 1;
    const size_t ws = m3g_vision_attention_ws_elems(T, VNH, VHD, 1);
    if (ws && hipMalloc(&a->s.att_ws, ws * sizeof(uint16_t)) != hipSuccess)
        return 1;
    for (int r = 0; r < a->nrot; r++)
        if (!(a->h[r] = (float *)dev_rand(n, 0, 0x930u + (uint32_t)r, 1.0f)))
            return 1;
    return 0;
}

/* ---- vision attention (the ViT's bidirectional attention, bf16 mode) ------------- */

typedef struct va_ctx {
    float *q[64], *k[64], *v[64], *o[64];
    uint16_t *ws; /* the variant's work area (written and read within a launch) */
    int len, nh, hd, variant;
} va_ctx;

static hipError_t va_launch(void *c, int r, hipStream_t st)
{
    va_ctx *a = (va_ctx *)c;
    return m3g_vision_attention_variant(a->variant, a->o[r], a->q[r], a->k[r], a->v[r], a->len,
                                        a->nh, a->hd, 1, a->ws, st);
}

/* One segment of len patches, nh heads of hd (M3: 16 x 80), q/k/v bf16
 * values in fp32 [len, nh, hd] as the tower holds them. */
static int make_vis_attention(bench_case *bc, const char *name, int len, int nh, int hd,
                              int variant, int l2)
{
    va_ctx *a = (va_ctx *)calloc(1, sizeof *a);
    if (!a)
        return 1;
    const size_t n = (size_t)len * nh * hd;
    a->len = len, a->nh = nh, a->hd = hd, a->variant = variant;
    bc->name = name;
    bc->bytes = 4.0 * (double)n * sizeof(float);
    bc->flops = 4.0 * (double)len * len * hd * nh; /* QK^T and P.V */
    bc->nrot = rotations(bc->bytes, l2);
    bc->ctx = a;
    bc->launch = va_launch;
    for (int r = 0; r < bc->nrot; r++) {
        a->q[r] = (float *)dev_rand(n, 0, 0x51u + 4u * r, 1.0f);
        a->k[r] = (float *)dev_rand(n, 0, 0x52u + 4u * r, 1.0f);
        a->v[r] = (float *)dev_rand(n, 0, 0x53u + 4u * r, 1.0f);
        if (!a->q[r] || !a->k[r] || !a->v[r] || hipMalloc(&a->o[r], n * sizeof(float)) != hipSuccess)
            return 1;
    }
    const size_t ws = m3g_vision_attention_ws_elems(len, nh, hd, 1);
    if (ws && hipMalloc(&a->ws, ws * sizeof(uint16_t)) != hipSuccess)
        return 1;
    return 0;
}

/* ---- the case table ------------------------------------------------------ */

/* What make_case builds for one row (a, b, c: the kind's shape arguments):
 *  K_LINEAR     m3g_linear, a x b weight, T = c (GEMV at T = 1, GEMM at 4096);
 *               d = 1: the BLAS context without cuBLASLt (cublasGemmEx)
 *  K_FUSED      m3g_linear_multi / m3g_linear_swiglu over FUSED_SEGS[a]
 *  K_GEMV_ALL   after the GEMV rows: each through the bench-only GEMV kernels
 *               (m3g_gemv_variant) and the stream-only ceilings
 *  K_MOE, K_MOE_SHARED  the routed experts / with the shared expert
 *  K_MSA_DECODE m3g_attention_sk, 16 blocks of 128 keys, path a (att_run)
 *  K_DENSE_DECODE m3g_attention_sk dense, a keys, variant b
 *  K_INDEXER    m3g_msa_indexer_ex over a keys; on base's data: alt b
 *  K_MSA_STEP   the indexer then m3g_attention_sk, a keys of context
 *  K_MSA_PREFILL m3g_msa_attention_prefill, pool a, T = b rows; c = 1 the
 *               one-pass kernel on base's data
 *  K_LAYER      one decoder layer at decode (a sparse, b MoE); on base's
 *               data: launch sequence c (layer_ctx.old_seq)
 *  K_VIS_ATT    vision attention, a patches, kernel b (m3g_vision_attention_variant)
 *  K_VIS_LAYER  one vision encoder layer, a patches; c = 1 exact linears
 *  base: the earlier row whose device data the row reuses (NULL: its own). */
enum { K_LINEAR, K_FUSED, K_GEMV_ALL, K_MOE, K_MOE_SHARED, K_MSA_DECODE, K_DENSE_DECODE,
       K_INDEXER, K_MSA_STEP, K_MSA_PREFILL, K_LAYER, K_VIS_ATT, K_VIS_LAYER };

typedef struct case_row {
    const char *name;
    int kind, a, b, c, d;
    const char *base;
} case_row;

/* K_FUSED rows: nseg, swiglu, the segments' rows */
static const int FUSED_SEGS[3][7] = {
    {3, 0, NH * HD, NKV * HD, NKV * HD},                /* q, k, v */
    {5, 0, NH * HD, NKV * HD, NKV * HD, G * IHD, IHD},  /* q, k, v, index q, index k */
    {2, 1, I, I}};                                      /* gate, up (+ SwiGLU) */

static const case_row CASES[] = {
    /* decode GEMVs (bf16 weights, bf16 mode, T = 1) */
    {"gemv q_proj 8192x6144", K_LINEAR, NH * HD, H, 1, 0, NULL},
    {"gemv k_proj 512x6144", K_LINEAR, NKV * HD, H, 1, 0, NULL},
    {"gemv o_proj 6144x8192", K_LINEAR, H, NH * HD, 1, 0, NULL},
    {"gemv dense gate 12288x6144", K_LINEAR, ID, H, 1, 0, NULL},
    {"gemv dense down 6144x12288", K_LINEAR, H, ID, 1, 0, NULL},
    {"gemv shared gate 3072x6144", K_LINEAR, I, H, 1, 0, NULL},
    {"gemv lm_head 200064x6144", K_LINEAR, V, H, 1, 0, NULL},
    {"gemv qkv 9216x6144", K_FUSED, 0, 0, 0, 0, NULL},
    {"gemv qkv+index 9856x6144", K_FUSED, 1, 0, 0, 0, NULL},
    {"gemv shared gate+up 6144x6144", K_FUSED, 2, 0, 0, 0, NULL},
    {"gemv", K_GEMV_ALL, 0, 0, 0, 0, NULL},
    /* MoE decode */
    {"moe decode 4 experts (no shared)", K_MOE, 0, 0, 0, 0, NULL},
    {"moe decode 4 experts + shared", K_MOE_SHARED, 0, 0, 0, 0, "moe decode 4 experts (no shared)"},
    /* MSA decode attention (16 x 128 keys of a 128K context): the default, and
     * the same data through the other paths (att_run) */
    {"msa decode attention 16x128 keys", K_MSA_DECODE, 0, 0, 0, 0, NULL},
    {"msa decode attention bf16 2-launch", K_MSA_DECODE, 3, 0, 0, 0, "msa decode attention 16x128 keys"},
    {"msa decode attention fp32 cache", K_MSA_DECODE, 1, 0, 0, 0, "msa decode attention 16x128 keys"},
    {"msa decode attention split fp32", K_MSA_DECODE, 2, 0, 0, 0, "msa decode attention 16x128 keys"},
    /* dense decode attention (layers 0-2): the default and the two-launch path */
    {"dense decode attention 128K", K_DENSE_DECODE, 131072, 0, 0, 0, NULL},
    {"dense decode attention 128K 2-launch", K_DENSE_DECODE, 131072, M3G_SK_TWO_LAUNCH, 0, 0, "dense decode attention 128K"},
    {"dense decode attention 32K", K_DENSE_DECODE, 32768, 0, 0, 0, NULL},
    {"dense decode attention 32K 2-launch", K_DENSE_DECODE, 32768, M3G_SK_TWO_LAUNCH, 0, 0, "dense decode attention 32K"},
    {"dense decode attention 8K", K_DENSE_DECODE, 8192, 0, 0, 0, NULL},
    {"dense decode attention 8K 2-launch", K_DENSE_DECODE, 8192, M3G_SK_TWO_LAUNCH, 0, 0, "dense decode attention 8K"},
    {"dense decode attention 2K", K_DENSE_DECODE, 2048, 0, 0, 0, NULL},
    {"dense decode attention 2K 2-launch", K_DENSE_DECODE, 2048, M3G_SK_TWO_LAUNCH, 0, 0, "dense decode attention 2K"},
    {"dense decode attention 512", K_DENSE_DECODE, 512, 0, 0, 0, NULL},
    {"dense decode attention 512 2-launch", K_DENSE_DECODE, 512, M3G_SK_TWO_LAUNCH, 0, 0, "dense decode attention 512"},
    {"dense decode attention 64 tc", K_DENSE_DECODE, 64, M3G_SK_DENSE_TC, 0, 0, NULL},
    {"dense decode attention 64 2-launch", K_DENSE_DECODE, 64, M3G_SK_TWO_LAUNCH, 0, 0, "dense decode attention 64 tc"},
    {"dense decode attention 16 tc", K_DENSE_DECODE, 16, M3G_SK_DENSE_TC, 0, 0, NULL},
    {"dense decode attention 16 2-launch", K_DENSE_DECODE, 16, M3G_SK_TWO_LAUNCH, 0, 0, "dense decode attention 16 tc"},
    /* the indexer at decode: the default and its yardsticks on the same data */
    {"indexer decode 128K", K_INDEXER, 131072, 0, 0, 0, NULL},
    {"indexer decode 1M", K_INDEXER, 1048576, 0, 0, 0, NULL},
    {"indexer decode 128K exact", K_INDEXER, 0, M3G_IDX_EXACT, 0, 0, "indexer decode 128K"},
    {"indexer decode 1M exact", K_INDEXER, 0, M3G_IDX_EXACT, 0, 0, "indexer decode 1M"},
    {"indexer decode 128K 2-launch", K_INDEXER, 0, IX_OLD, 0, 0, "indexer decode 128K"},
    {"indexer decode 1M 2-launch", K_INDEXER, 0, IX_OLD, 0, 0, "indexer decode 1M"},
    {"indexer decode 128K mul+add", K_INDEXER, 0, IX_NORANGE, 0, 0, "indexer decode 128K"},
    {"indexer decode 1M mul+add", K_INDEXER, 0, IX_NORANGE, 0, 0, "indexer decode 1M"},
    {"indexer decode 128K fused kernel", K_INDEXER, 0, M3G_IDX_FUSED, 0, 0, "indexer decode 128K"},
    {"indexer decode 1M fused kernel", K_INDEXER, 0, M3G_IDX_FUSED, 0, 0, "indexer decode 1M"},
    {"indexer decode 128K scores only", K_INDEXER, 0, M3G_IDX_SCORES_ONLY, 0, 0, "indexer decode 128K"},
    {"indexer decode 1M scores only", K_INDEXER, 0, M3G_IDX_SCORES_ONLY, 0, 0, "indexer decode 1M"},
    {"indexer decode 128K scores only exact", K_INDEXER, 0, M3G_IDX_SCORES_ONLY | M3G_IDX_EXACT, 0, 0,
     "indexer decode 128K"},
    {"indexer decode 1M scores only exact", K_INDEXER, 0, M3G_IDX_SCORES_ONLY | M3G_IDX_EXACT, 0, 0,
     "indexer decode 1M"},
    {"indexer decode 128K scores only mul+add", K_INDEXER, 0, M3G_IDX_SCORES_ONLY | IX_NORANGE, 0, 0,
     "indexer decode 128K"},
    {"indexer decode 1M scores only mul+add", K_INDEXER, 0, M3G_IDX_SCORES_ONLY | IX_NORANGE, 0, 0,
     "indexer decode 1M"},
    {"indexer decode 128K no merge", K_INDEXER, 0, M3G_IDX_NO_MERGE, 0, 0, "indexer decode 128K"},
    {"indexer decode 1M no merge", K_INDEXER, 0, M3G_IDX_NO_MERGE, 0, 0, "indexer decode 1M"},
    {"indexer decode 128K no pdl", K_INDEXER, 0, M3G_IDX_NO_PDL, 0, 0, "indexer decode 128K"},
    {"indexer decode 1M no pdl", K_INDEXER, 0, M3G_IDX_NO_PDL, 0, 0, "indexer decode 1M"},
    {"indexer decode 128K stream ceiling x1", K_INDEXER, 0, M3G_IDX_CEILING, 0, 0, "indexer decode 128K"},
    {"indexer decode 1M stream ceiling x1", K_INDEXER, 0, M3G_IDX_CEILING, 0, 0, "indexer decode 1M"},
    {"indexer decode 128K stream ceiling x4", K_INDEXER, 0, M3G_IDX_CEILING | (2 << 12), 0, 0,
     "indexer decode 128K"},
    {"indexer decode 1M stream ceiling x4", K_INDEXER, 0, M3G_IDX_CEILING | (2 << 12), 0, 0,
     "indexer decode 1M"},
    {"indexer decode 128K stream ceiling x8", K_INDEXER, 0, M3G_IDX_CEILING | (3 << 12), 0, 0,
     "indexer decode 128K"},
    {"indexer decode 1M stream ceiling x8", K_INDEXER, 0, M3G_IDX_CEILING | (3 << 12), 0, 0,
     "indexer decode 1M"},
    {"indexer decode 128K stream ceiling x8 no pdl", K_INDEXER, 0,
     M3G_IDX_CEILING | (3 << 12) | M3G_IDX_NO_PDL, 0, 0, "indexer decode 128K"},
    {"indexer decode 1M stream ceiling x8 no pdl", K_INDEXER, 0,
     M3G_IDX_CEILING | (3 << 12) | M3G_IDX_NO_PDL, 0, 0, "indexer decode 1M"},
    /* the whole MSA decode step (indexer + top-16 + attention), as m3-gpu runs it */
    {"msa decode step 128K", K_MSA_STEP, 131072, 0, 0, 0, NULL},
    {"msa decode step 1M", K_MSA_STEP, 1048576, 0, 0, 0, NULL},
    {"msa decode step 128K exact indexer", K_MSA_STEP, 0, M3G_IDX_EXACT, 0, 0, "msa decode step 128K"},
    {"msa decode step 1M exact indexer", K_MSA_STEP, 0, M3G_IDX_EXACT, 0, 0, "msa decode step 1M"},
    /* prefill GEMMs at M = 4096 (cuBLASLt; cublasGemmEx for comparison) */
    {"gemm M4096 q_proj 8192x6144", K_LINEAR, NH * HD, H, 4096, 0, NULL},
    {"gemm M4096 dense gate 12288x6144", K_LINEAR, ID, H, 4096, 0, NULL},
    {"gemm M4096 q_proj GemmEx (no Lt)", K_LINEAR, NH * HD, H, 4096, 1, NULL},
    {"gemm M4096 dense gate GemmEx (no Lt)", K_LINEAR, ID, H, 4096, 1, NULL},
    /* MSA prefill: the last 2,048 rows of a 128K prompt (independent / pool of
     * 24 / shared selections), then the whole prompt; the exact-p default and
     * the one-pass kernel on the same data */
    {"msa prefill 128K x2048 rows indep", K_MSA_PREFILL, 0, PF_ROWS, 0, 0, NULL},
    {"msa prefill 128K x2048 rows pool24", K_MSA_PREFILL, 24, PF_ROWS, 0, 0, NULL},
    {"msa prefill 128K x2048 rows shared", K_MSA_PREFILL, PF_RAND, PF_ROWS, 0, 0, NULL},
    {"msa prefill x2048 indep 1-pass", K_MSA_PREFILL, 0, 0, 1, 0, "msa prefill 128K x2048 rows indep"},
    {"msa prefill x2048 pool24 1-pass", K_MSA_PREFILL, 0, 0, 1, 0, "msa prefill 128K x2048 rows pool24"},
    {"msa prefill x2048 shared 1-pass", K_MSA_PREFILL, 0, 0, 1, 0, "msa prefill 128K x2048 rows shared"},
    {"msa prefill 128K full pool24", K_MSA_PREFILL, 24, PF_CTX, 0, 0, NULL},
    {"msa prefill 128K full pool24 1-pass", K_MSA_PREFILL, 0, 0, 1, 0, "msa prefill 128K full pool24"},
    {"msa prefill 128K full indep", K_MSA_PREFILL, 0, PF_CTX, 0, 0, NULL},
    {"msa prefill 128K full indep 1-pass", K_MSA_PREFILL, 0, 0, 1, 0, "msa prefill 128K full indep"},
    /* whole decoder layers at decode, 128K context, as m3-gpu launches them;
     * on the same data: the first launch sequence (separate QK-norm / RoPE /
     * cache writes, routed gate / up + SwiGLU), the fused launches without
     * the early PDL release, the MoE kernels without PDL, and the two halves
     * of the MSA + MoE layer (attention to the post-attention norm; router,
     * experts and combine) timed apart */
    {"layer decode 128K MSA + MoE", K_LAYER, 1, 1, 0, 0, NULL},
    {"layer decode 128K dense attn + MLP", K_LAYER, 0, 0, 0, 0, NULL},
    {"layer decode 128K MSA + MoE first seq", K_LAYER, 0, 0, 7, 0, "layer decode 128K MSA + MoE"},
    {"layer decode 128K dense attn + MLP first seq", K_LAYER, 0, 0, 7, 0,
     "layer decode 128K dense attn + MLP"},
    {"layer decode 128K MSA + MoE no release", K_LAYER, 0, 0, 2, 0, "layer decode 128K MSA + MoE"},
    {"layer decode 128K dense attn + MLP no release", K_LAYER, 0, 0, 2, 0,
     "layer decode 128K dense attn + MLP"},
    {"layer decode 128K MSA + MoE no moe pdl", K_LAYER, 0, 0, 4, 0, "layer decode 128K MSA + MoE"},
    {"layer decode 128K MSA attention half", K_LAYER, 0, 0, LAYER_ATTN_ONLY, 0,
     "layer decode 128K MSA + MoE"},
    {"layer decode 128K MoE half", K_LAYER, 0, 0, LAYER_FFN_ONLY, 0, "layer decode 128K MSA + MoE"},
    {"layer decode 128K MSA + MoE exact indexer", K_LAYER, 0, 0, LAYER_IDX_EXACT, 0,
     "layer decode 128K MSA + MoE"},
    {"layer decode 128K MSA + MoE one stream", K_LAYER, 0, 0, LAYER_ONE_STREAM, 0,
     "layer decode 128K MSA + MoE"},
    {"layer decode 128K MoE half one stream", K_LAYER, 0, 0, LAYER_FFN_ONLY | LAYER_ONE_STREAM, 0,
     "layer decode 128K MSA + MoE"},
    /* vision (M3: 16 heads of 80; 5,184 patches = one 1008 x 1008 image),
     * bf16: the default attention, the exact kernel, the fp32-tile and the
     * other CTA size of the tensor-core kernel; whole encoder layers */
    {"vision attention 5184x16x80", K_VIS_ATT, 5184, 0, 0, 0, NULL},
    {"vision attention 1024x16x80", K_VIS_ATT, 1024, 0, 0, 0, NULL},
    {"vision attention 1024x16x80 exact", K_VIS_ATT, 1024, 1, 0, 0, NULL},
    {"vision attention 5184x16x80 fp32 tiles", K_VIS_ATT, 5184, 2, 0, 0, NULL},
    {"vision attention 5184x16x80 4 warps", K_VIS_ATT, 5184, 3, 0, 0, NULL},
    {"vision attention 1024x16x80 8 warps", K_VIS_ATT, 1024, 4, 0, 0, NULL},
    {"vision layer 5184 patches", K_VIS_LAYER, 5184, 0, 0, 0, NULL},
    {"vision layer 1024 patches", K_VIS_LAYER, 1024, 0, 0, 0, NULL},
    {"vision layer 1024 patches exact linears", K_VIS_LAYER, 1024, 0, 1, 0, "vision layer 1024 patches"},
};

/* The speed targets (docs/performance.md), judged on this run's medians: the
 * ratio to the hardware limit of each named case (HBM: bytes; PEAK: bf16
 * FLOPs) or its time. The "10x faster than dense causal SDPA" part of the
 * MSA prefill target needs torch's figure (tools/bench_torch.py, same
 * machine); the table prints the time it must beat. */
enum { T_HBM, T_PEAK, T_US };
static const struct {
    const char *name;
    int kind;
    double goal;
} TARGETS[] = {
    {"gemv q_proj 8192x6144", T_HBM, 0.80},
    {"gemv k_proj 512x6144", T_HBM, 0.80},
    {"gemv o_proj 6144x8192", T_HBM, 0.80},
    {"gemv qkv 9216x6144", T_HBM, 0.80},
    {"gemv qkv+index 9856x6144", T_HBM, 0.80},
    {"gemv dense gate 12288x6144", T_HBM, 0.80},
    {"gemv dense down 6144x12288", T_HBM, 0.80},
    {"gemv shared gate 3072x6144", T_HBM, 0.80},
    {"gemv shared gate+up 6144x6144", T_HBM, 0.80},
    {"gemv lm_head 200064x6144", T_HBM, 0.80},
    {"moe decode 4 experts (no shared)", T_HBM, 0.70},
    {"moe decode 4 experts + shared", T_HBM, 0.70},
    {"msa decode step 128K", T_US, 20.0},
    {"msa decode step 1M", T_US, 80.0},
    {"layer decode 128K MSA + MoE", T_HBM, 0.75},
    {"msa prefill 128K full pool24 1-pass", T_PEAK, 0.40},
    {"msa prefill 128K full pool24", T_PEAK, 0.40},
    {"msa prefill 128K full indep", T_PEAK, 0.40},
    {"gemm M4096 q_proj 8192x6144", T_PEAK, 0.60},
    {"gemm M4096 dense gate 12288x6144", T_PEAK, 0.60},
};

static void print_targets(const bench_case *cases, const double *med, int n)
{
    int met = 0, judged = 0;
    printf("\nspeed targets (this run):\n| case | target | measured | verdict |\n"
           "|---|---|---|---|\n");
    for (size_t t = 0; t < sizeof TARGETS / sizeof TARGETS[0]; t++) {
        int i = 0;
        while (i < n && strcmp(cases[i].name, TARGETS[t].name) != 0)
            i++;
        if (i == n || med[i] <= 0.0)
            continue; /* not set up or not run (--case) */
        double got;
        char want[32], have[48];
        if (TARGETS[t].kind == T_US) {
            got = med[i];
            snprintf(want, sizeof want, "<= %.0f us", TARGETS[t].goal);
            snprintf(have, sizeof have, "%.2f us", got);
        } else {
            const double per_s = TARGETS[t].kind == T_HBM ? cases[i].bytes : cases[i].flops;
            const double lim = TARGETS[t].kind == T_HBM ? HBM_BYTES_PER_S : BF16_FLOP_PER_S;
            got = per_s / (med[i] * 1e-6) / lim;
            snprintf(want, sizeof want, ">= %.0f%% of %s", 100.0 * TARGETS[t].goal,
                     TARGETS[t].kind == T_HBM ? "HBM" : "bf16 peak");
            snprintf(have, sizeof have, "%.1f%% (%.2f us)", 100.0 * got, med[i]);
        }
        const int ok = TARGETS[t].kind == T_US ? got <= TARGETS[t].goal : got >= TARGETS[t].goal;
        met += ok;
        judged++;
        printf("| %s | %s | %s | %s |\n", TARGETS[t].name, want, have, ok ? "met" : "NOT MET");
        if (!strncmp(TARGETS[t].name, "msa prefill 128K full", 21))
            printf("| %s vs dense causal SDPA | >= 10x faster | SDPA must take >= %.0f us "
                   "(tools/bench_torch.py \"sdpa causal full 131072\") | see torch |\n",
                   TARGETS[t].name, 10.0 * med[i]);
    }
    printf("targets met: %d of %d judged in this run\n", met, judged);

    /* the bound the one-pass warpgroup kernel's tiling sets: its issued
     * tensor-core work at the full bf16 rate */
    for (int i = 0; i < n; i++) {
        if (cases[i].issued <= 0 || med[i] <= 0 || !strstr(cases[i].name, "1-pass"))
            continue;
        const double bound = cases[i].flops / cases[i].issued;
        const double eff = cases[i].issued / (med[i] * 1e-6) / BF16_FLOP_PER_S;
        printf("%s: the warpgroup tiling issues %.1f TFLOP for %.1f TFLOP of logical work, so "
               "at the full bf16 rate it reaches at most %.1f%% of peak; this run ran its issued "
               "work at %.1f%% of peak\n",
               cases[i].name, cases[i].issued * 1e-12, cases[i].flops * 1e-12, 100.0 * bound,
               100.0 * eff);
    }

    /* full-model decode (bf16, batch 1, 128K context) from the whole-layer
     * replays: 3 dense + 57 MSA + MoE layers and the LM head */
    double us[3] = {0, 0, 0};
    static const char *const parts[3] = {"layer decode 128K MSA + MoE",
                                         "layer decode 128K dense attn + MLP",
                                         "gemv lm_head 200064x6144"};
    for (int p = 0; p < 3; p++)
        for (int i = 0; i < n; i++)
            if (!strcmp(cases[i].name, parts[p]))
                us[p] = med[i];
    if (us[0] > 0 && us[1] > 0 && us[2] > 0) {
        const double ms = (57.0 * us[0] + 3.0 * us[1] + us[2]) / 1e3;
        printf("full-model decode, 128K context, bf16, batch 1 (this run): 57 x %.2f + 3 x %.2f "
               "+ %.2f us = %.2f ms per token, %.1f tokens/s (final norm and embedding row "
               "excluded)\n", us[0], us[1], us[2], ms, 1e3 / ms);
    }
}

/* The case named `name` among cases[0, n), or NULL. */
static const bench_case *find_case(const bench_case *cases, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(cases[i].name, name))
            return &cases[i];
    return NULL;
}

typedef struct bench_env {
    int l2;
    m3g_blas *blas, *blas_nolt;
    hipStream_t st;
    const char *only[16]; /* --case prefixes (none: every case) */
    int nonly;
} bench_env;

/* 1 iff the case named name is to run: no --case, or one of them is a prefix of it. */
static int wanted(const bench_env *env, const char *name)
{
    for (int k = 0; k < env->nonly; k++)
        if (!strncmp(name, env->only[k], strlen(env->only[k])))
            return 1;
    return env->nonly == 0;
}

/* Set up the cases of row w at cases[*n ...]; 0 or -1 (setup failed). */
static int make_case(const case_row *w, bench_case *cases, int *n, const bench_env *env)
{
    const bench_case *base = w->base ? find_case(cases, *n, w->base) : NULL;
    if (w->base && !base) /* its base was not set up (no BLAS-Lt context etc.) */
        return 0;
    switch (w->kind) {
    case K_LINEAR: {
        m3g_blas *b = w->d ? env->blas_nolt : env->blas;
        if (w->d && !b)
            return 0; /* no second BLAS context: no comparison row */
        return make_linear(next_case(cases, n), w->name, w->a, w->b, w->c, env->l2, b);
    }
    case K_FUSED: {
        const int *f = FUSED_SEGS[w->a];
        return make_fused(next_case(cases, n), w->name, f + 2, f[0], f[1], H, 1, env->l2);
    }
    case K_GEMV_ALL:
        /* the GEMV rows through the previous kernel (every bench-only kernel and
         * the stream ceilings when the run is limited to the GEMVs) */
        if (env->nonly) {
            int gemv = 0; /* a --case that names GEMV rows */
            for (int k = 0; k < env->nonly; k++)
                gemv |= !strncmp(env->only[k], "gemv",
                                 strlen(env->only[k]) < 4 ? strlen(env->only[k]) : 4);
            if (!gemv)
                return 0;
        }
        M3_HIP_CHECK(hipDeviceSynchronize());
        *n = add_gemv_variants(cases, 0, *n, BENCH_GEMV_CASES, env->nonly > 0, env->st);
        return 0;
    case K_MOE:
        return make_moe(next_case(cases, n));
    case K_MOE_SHARED:
        return make_moe_shared(next_case(cases, n), base);
    case K_MSA_DECODE:
        return make_msa_decode(next_case(cases, n), w->name, 131072, env->l2, w->a, base);
    case K_DENSE_DECODE:
        return make_dense_decode(next_case(cases, n), w->name,
                                 base ? ((const dd_ctx *)base->ctx)->ctx_len : w->a, env->l2, w->b,
                                 base);
    case K_INDEXER:
        if (base)
            return make_indexer_alt(next_case(cases, n), w->name, base, w->b);
        return make_indexer(next_case(cases, n), w->name, w->a, env->l2);
    case K_MSA_STEP:
        if (base)
            return make_msa_step_alt(next_case(cases, n), w->name, base, w->b);
        return make_msa_step(next_case(cases, n), w->name, w->a, env->l2);
    case K_MSA_PREFILL:
        if (base)
            return make_msa_prefill_onepass(next_case(cases, n), w->name, base);
        return make_msa_prefill(next_case(cases, n), w->name, w->a, w->b);
    case K_LAYER: {
        if (base)
            return make_layer_alt(next_case(cases, n), w->name, base, w->c);
        const bench_case *mc = find_case(cases, *n, "moe decode 4 experts (no shared)");
        return make_layer(next_case(cases, n), w->name, w->a, w->b, 131072,
                          mc ? (const moe_ctx *)mc->ctx : NULL);
    }
    case K_VIS_ATT:
        return make_vis_attention(next_case(cases, n), w->name, w->a, 16, 80, w->b, env->l2);
    case K_VIS_LAYER:
        return make_vis_layer(next_case(cases, n), w->name, w->a, w->c ? NULL : env->blas, env->l2,
                              base ? (const vl_ctx *)base->ctx : NULL);
    }
    return -1;
}

int main(int argc, char **argv)
{
    int reps = 20;
    bench_env env;
    memset(&env, 0, sizeof env);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc && env.nonly < 16)
            env.only[env.nonly++] = argv[++i];
        else {
            fprintf(stderr, "usage: bench-gpu [--reps N] [--case PREFIX]... (at most 16 --case)\n");
            return 2;
        }
    }
    if (reps < 20) {
        fprintf(stderr, "bench-gpu: --reps must be >= 20 (the protocol's minimum)\n");
        return 2;
    }
    hipDeviceProp_t prop;
    M3_HIP_CHECK(hipGetDeviceProperties(&prop, 0));
    M3_HIP_CHECK(hipStreamCreate(&env.st));
    env.l2 = prop.l2CacheSize;
    printf("device: %s, %d SMs/CUs, L2 %d MiB, build %s\n", prop.name, prop.multiProcessorCount,
           env.l2 >> 20, M3_GPU_VENDOR);
    env.blas = m3g_blas_new(env.st, (size_t)8192 * 12288);
    printf("GEMM backend: %s\n", env.blas ? "vendor BLAS" : "hand-written fallback");
    env.blas_nolt = m3g_blas_new(env.st, (size_t)8192 * 12288);
    if (env.blas_nolt && !m3g_blas_use_lt(env.blas_nolt, 0) && m3g_blas_use_lt(env.blas, 1))
        printf("GEMM: cuBLASLt (heuristic algorithm, 32 MiB workspace); GemmEx cases for comparison\n");
    else {
        m3g_blas_free(env.blas_nolt);
        env.blas_nolt = NULL;
    }
    printf("| case | median us | min us | max us | cv | GB/s | of 4.8 TB/s | TFLOP/s | of 989 | rot |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");

    static bench_case cases[BENCH_MAX_CASES];
    static double med[BENCH_MAX_CASES]; /* median us of each case run; 0: not run */
    int n = 0;
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++)
        if (make_case(&CASES[k], cases, &n, &env) != 0) {
            fprintf(stderr, "bench-gpu: setting up \"%s\" failed (device memory?)\n",
                    CASES[k].name);
            return 1;
        }
    M3_HIP_CHECK(hipDeviceSynchronize());
    for (int i = 0; i < n; i++) {
        if (!wanted(&env, cases[i].name))
            continue;
        if (run_case(&cases[i], reps, env.st, &med[i]) != 0)
            return 1;
    }
    print_targets(cases, med, n);
    m3g_blas_free(env.blas);
    m3g_blas_free(env.blas_nolt);
    return 0;
}
