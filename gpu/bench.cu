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
 *  - the same binary checks one result against the fallback path (GEMV vs
 *    GEMM) so a fast but wrong kernel cannot pass.
 * The torch comparison (torch.matmul / F.scaled_dot_product_attention at the
 * same shapes) is tools/bench_torch.py, run on the same machine right after;
 * the GPU clocks are printed by the make target (nvidia-smi).
 *
 *   bench-gpu [--reps N] [--case NAME]   (NAME: a prefix of a case name)
 *
 * Before timing, the decode attention and indexer results are checked at
 * M3 shapes against host goldens (check_attention, check_indexer), and the
 * MSA prefill kernels on 6 rows of each 128K case (slab or whole prefill)
 * and on six edge shapes per kernel variant (check_msa_prefill,
 * check_msa_prefill_edges; nmse <= 1e-5).
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
 * previous path); 3: m3g_attention_sk's two-launch path with the bf16 cache;
 * 4: its scalar cluster kernel (the default before the tensor-core one);
 * the tensor-core kernel (default: PDL launch, the next kernel released
 * before its last cluster barrier) 5: released at its start instead;
 * 6: launched without PDL; 7: one block per SM. */
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
                                  bl, TOPK_B, 1, a->ws, a->ws_n,
                                  path == 3 ? 1 : path == 4 ? 2 : path == 5 ? 4 : path == 6 ? 8
                                                                : path == 7 ? 16 : 0, st);
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
    int variant; /* m3g_msa_indexer_tuned variant */
    struct idx_ctx *base; /* owner of the data and of the host golden (NULL: this one) */
    float *gold_bs;       /* host golden [G][nb], computed once per base */
    int32_t *gold_sel;    /* [G][TOPK_B] */
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
                              x->ws_n, x->ikr[r], x->variant, st);
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

static int make_indexer_alt(bench_case *bc, const char *name, const bench_case *base, int old,
                            int variant)
{
    idx_ctx *x = (idx_ctx *)clone_case(bc, name, base, sizeof *x);
    if (!x)
        return -1;
    x->base = (idx_ctx *)base->ctx;
    x->old = old;
    x->variant = variant;
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
    int variant; /* m3g_msa_attention_prefill_tuned's (0 = the default) */
} pf_ctx;

static hipError_t pf_launch(void *c, int r, hipStream_t st)
{
    pf_ctx *p = (pf_ctx *)c;
    return m3g_msa_attention_prefill_tuned(p->out, p->q, p->kc[r], p->vc[r], M3G_BF16, p->pages,
                                           BLK, p->ctx_len - p->T, p->T, NH, NKV, HD, p->blocks,
                                           TOPK_B, 1, p->variant, st);
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
 * whose query block has fewer than 14 earlier blocks select all of them);
 * variant: m3g_msa_attention_prefill_tuned's. */
static int make_msa_prefill(bench_case *bc, const char *name, int pool, int T, int variant)
{
    pf_ctx *p = (pf_ctx *)calloc(1, sizeof *p);
    if (!p)
        return -1;
    const int npages = PF_CTX / BLK;
    p->variant = variant;
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

/* The case src (a make_msa_prefill case) through another kernel variant:
 * same device buffers, same selections. */
static int make_msa_prefill_alt(bench_case *bc, const char *name, const bench_case *src,
                                int variant)
{
    pf_ctx *p = (pf_ctx *)clone_case(bc, name, src, sizeof *p);
    if (!p)
        return -1;
    p->variant = variant;
    return 0;
}

/* ---- self-check of the decode MSA kernels at M3 shapes (host golden) ------ */

static float h_round_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u = ((u >> 16) | 0x40u) << 16;
    else
        u = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
    memcpy(&f, &u, 4);
    return f;
}

/* Decode attention on rotation 0 against a host copy of ref/attention.c
 * (bf16 mode): m3g_attention_sk with the bf16 cache (its default path, run
 * twice: deterministic), its two-launch path with the bf16 cache and with
 * the fp32 cache holding the same values (those two must be bitwise equal),
 * and the previous split path. */
static int check_attention(att_ctx *a, hipStream_t st)
{
    const size_t rows = (size_t)NKV * TOPK_B * BLK; /* rotation 0 reads pages 0 .. 63 */
    const size_t nkvel = rows * NKV * HD, no = (size_t)NH * HD;
    float *q = (float *)malloc(4 * no), *k = (float *)malloc(4 * nkvel),
          *v = (float *)malloc(4 * nkvel), *o = (float *)malloc(4 * 9 * no),
          *sc = (float *)malloc(4 * TOPK_B * BLK);
    int32_t hb[NKV * TOPK_B];
    if (!q || !k || !v || !o || !sc)
        return -1;
    const int paths[9] = {0, 0, 3, 1, 2, 4, 5, 6, 7};
    for (int i = 0; i < 9; i++) {
        M3_HIP_CHECK(hipMemset(a->out, 0xff, 4 * no)); /* NaN: every output must be written */
        M3_HIP_CHECK(att_run(a, paths[i], 0, st));
        M3_HIP_CHECK(hipStreamSynchronize(st));
        M3_HIP_CHECK(hipMemcpy(o + i * no, a->out, 4 * no, hipMemcpyDeviceToHost));
    }
    M3_HIP_CHECK(hipMemcpy(q, a->q, 4 * no, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(k, a->kc, 4 * nkvel, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(v, a->vc, 4 * nkvel, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(hb, a->blocks, sizeof hb, hipMemcpyDeviceToHost));
    const float scale = (float)(1.0 / sqrt((double)HD));
    double e[8] = {0, 0, 0, 0, 0, 0, 0, 0}, mx = 0;
    long nd[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int h = 0; h < NH; h++) {
        const int g = h / (NH / NKV);
        int n = 0;
        float m = -INFINITY, sum = 0.0f;
        for (int i = 0; i < TOPK_B; i++) /* identity pages; pos = ctx_len-1 sees every key */
            for (int j = 0; j < BLK; j++) {
                const float *kr = k + ((size_t)(hb[g * TOPK_B + i] * BLK + j) * NKV + g) * HD;
                float dot = 0.0f;
                for (int d = 0; d < HD; d++)
                    dot += q[h * HD + d] * kr[d];
                sc[n] = dot * scale;
                m = sc[n] > m ? sc[n] : m;
                n++;
            }
        for (int i = 0; i < n; i++)
            sum += (sc[i] = expf(sc[i] - m));
        float acc[HD] = {0};
        n = 0;
        for (int i = 0; i < TOPK_B; i++)
            for (int j = 0; j < BLK; j++, n++) {
                const float p = h_round_bf16(sc[n] / sum);
                const float *vr = v + ((size_t)(hb[g * TOPK_B + i] * BLK + j) * NKV + g) * HD;
                for (int d = 0; d < HD; d++)
                    acc[d] += p * vr[d];
            }
        for (int d = 0; d < HD; d++) {
            const float r = h_round_bf16(acc[d]);
            for (int c = 0; c < 8; c++) { /* default, 2-launch bf16, 2-launch fp32, old,
                                              scalar cluster, tc variants 5, 6, 7 */
                const float x = o[(c + 1) * no + h * HD + d];
                e[c] = fabs(x - r) > e[c] || x != x ? (x != x ? INFINITY : fabs(x - r)) : e[c];
                nd[c] += x != r;
            }
            mx = fmax(mx, fabs(r));
        }
    }
    const int det = memcmp(o, o + no, 4 * no) == 0,
              same = memcmp(o + 2 * no, o + 3 * no, 4 * no) == 0,
              pdl_same = memcmp(o, o + 6 * no, 4 * no) == 0 &&
                         memcmp(o, o + 7 * no, 4 * no) == 0 && memcmp(o, o + 8 * no, 4 * no) == 0;
    printf("check msa decode attention vs host ref (max|ref| %.3g): sk default (%s) max|diff| "
           "%.3g (%ld of %zu differ), sk 2-launch bf16 cache %.3g (%ld), sk 2-launch fp32 cache "
           "%.3g (%ld), old split %.3g (%ld); 2-launch bf16 cache == fp32 cache bitwise: %s; "
           "default repeat bitwise: %s; scalar cluster %.3g (%ld); tc variants PDL early / no "
           "PDL / 1 block per SM %.3g / %.3g / %.3g, == default bitwise: %s\n",
           mx, m3g_attention_sk_tc(BLK, NH, NKV, HD, a->blocks, TOPK_B, M3G_BF16, 1)
                   ? "tensor-core cluster"
                   : m3g_attention_sk_cluster(BLK, NH, NKV, HD, a->blocks, TOPK_B, M3G_BF16, 1)
                   ? "cluster" : "2-launch",
           e[0], nd[0], no, e[1], nd[1], e[2], nd[2], e[3], nd[3], same ? "yes" : "NO",
           det ? "yes" : "NO", e[4], nd[4], e[5], e[6], e[7], pdl_same ? "yes" : "NO");
    free(q), free(k), free(v), free(o), free(sc);
    return e[0] <= 0.02 * mx && e[1] <= 0.02 * mx && e[3] <= 0.02 * mx && e[4] <= 0.02 * mx &&
                   same && det && pdl_same
               ? 0
               : -1;
}

/* Host golden of the indexer over the bf16 index keys ik [nb * BLK][IHD] (keys
 * at positions >= ctx_len left out) and q iq [G][IHD]: block scores bs [G][nb]
 * (each score one accumulator over d ascending: multiply then add, or fmaf
 * when fma) and the top-16 sel [G][TOPK_B]: the local block nb - 1 first,
 * then descending scores, ties to the lower block id. */
static void idx_gold(const uint16_t *ik, const float *iq, int nb, int64_t ctx_len, int fma,
                     float *bs, int32_t *sel)
{
    for (int g = 0; g < G; g++) {
        float *ref = bs + (size_t)g * nb;
        for (int b = 0; b < nb; b++) {
            float m = -INFINITY;
            for (int j = 0; j < BLK && (int64_t)b * BLK + j < ctx_len; j++) {
                float a = 0.0f;
                for (int d = 0; d < IHD; d++) {
                    uint32_t u = (uint32_t)ik[((size_t)b * BLK + j) * IHD + d] << 16;
                    float kv;
                    memcpy(&kv, &u, 4);
                    if (fma)
                        a = fmaf(iq[g * IHD + d], kv, a);
                    else
                        a += iq[g * IHD + d] * kv;
                }
                m = a > m ? a : m;
            }
            ref[b] = m;
        }
        int32_t *pick = sel + g * TOPK_B;
        int n = 0;
        pick[n++] = nb - 1;
        while (n < TOPK_B) {
            int best = -1;
            for (int b = 0; b < nb - 1; b++) {
                int used = 0;
                for (int i = 1; i < n; i++)
                    used |= pick[i] == b;
                if (!used && (best < 0 || ref[b] > ref[best]))
                    best = b;
            }
            pick[n++] = best;
        }
    }
}

/* Indexer: the block scores bitwise against a host loop (one accumulator
 * over d ascending, multiply then add, as ref/msa.c) and the top-16 of all
 * 4 heads against a host golden-order selection (local block 1, no init
 * blocks), on rotation 0, after one launch of the case's own path. The
 * golden is computed once per data set (x->base). */
static int check_indexer(idx_ctx *x, const char *name, hipStream_t st)
{
    idx_ctx *gb = x->base ? x->base : x;
    const size_t nk = (size_t)x->nb * BLK;
    if (x->variant & 2048) { /* bandwidth ceiling: streams only, no output */
        printf("check %s: (bandwidth ceiling, no output to check)\n", name);
        return 0;
    }
    float *bs = (float *)malloc(4 * (size_t)G * x->nb);
    int32_t sel[G * TOPK_B];
    if (!bs)
        return -1;
    M3_HIP_CHECK(hipMemset(x->bs, 0, 4 * (size_t)G * x->nb));
    M3_HIP_CHECK(hipMemset(x->sel, 0x7f, sizeof sel));
    M3_HIP_CHECK(idx_launch(x, 0, st));
    M3_HIP_CHECK(hipStreamSynchronize(st));
    M3_HIP_CHECK(hipMemcpy(bs, x->bs, 4 * (size_t)G * x->nb, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(sel, x->sel, sizeof sel, hipMemcpyDeviceToHost));
    if (!gb->gold_bs) {
        uint16_t *ik = (uint16_t *)malloc(2 * nk * IHD);
        float *iq = (float *)malloc(4 * G * IHD);
        gb->gold_bs = (float *)malloc(4 * (size_t)G * x->nb);
        gb->gold_sel = (int32_t *)malloc(sizeof sel);
        if (!ik || !iq || !gb->gold_bs || !gb->gold_sel)
            return -1;
        M3_HIP_CHECK(hipMemcpy(ik, x->ikc[0], 2 * nk * IHD, hipMemcpyDeviceToHost));
        M3_HIP_CHECK(hipMemcpy(iq, x->iq, 4 * G * IHD, hipMemcpyDeviceToHost));
        idx_gold(ik, iq, x->nb, x->ctx_len, 0, gb->gold_bs, gb->gold_sel);
        free(ik), free(iq);
    }
    long bad = 0, badsel = 0;
    for (size_t i = 0; i < (size_t)G * x->nb; i++)
        bad += memcmp(&gb->gold_bs[i], &bs[i], 4) != 0;
    for (int i = 0; i < G * TOPK_B; i++) /* (variant bits 16, 64: no selection) */
        badsel += !(x->variant & (16 | 64)) && gb->gold_sel[i] != sel[i];
    printf("check %s: block scores not bitwise equal to host: %ld of %d; "
           "top-16 entries differing: %ld of %d (sel head 0: %d %d %d ... %d)\n", name, bad,
           G * x->nb, badsel, G * TOPK_B, sel[0], sel[1], sel[2], sel[TOPK_B - 1]);
    free(bs);
    return bad == 0 && badsel == 0 ? 0 : -1;
}

/* The FMA default's proof and fallback on crafted 8,192-key caches (64
 * blocks; only keys of positions < 64 * BLK, the last block forced as local):
 * the scores must be bitwise equal to the host's multiply-then-add and the
 * top-16 identical, whichever path the launch takes. (a) random bf16 keys and
 * q in range (range words by m3g_ik_range_scan): FMA is proven, results as
 * mul+add. (b) row R = 37 * BLK + 5 has k0 = -1.5 * 2^127, k1 = 2^127 (the
 * cache's range words out of range), head 0 of q has q0 = 1, q1 = 2: mul+add
 * gives +inf (q1 k1 overflows), fmaf 2^126 (the sum is exact). (c) keys in
 * range with k0 = -1.5, k1 = 1.5 in row R, head 0 of q has q0 = 2^127, q1 =
 * 1.5 * 2^127 (q out of range): mul+add +inf, fmaf 0.75 * 2^127. In (b) and
 * (c) k0 = k1 = 0 in every other row. The writer path m3g_to_bf16_ranged
 * fills (b) and (c). The host fmaf golden must differ from mul+add in (b)
 * and (c) (so each case tells the paths apart), and in (b) the unproven
 * opt-in FMA (variant 1, no range words) must differ on the device too. */

static int check_indexer_fallback(hipStream_t st)
{
    const int NBS = 64, NKS = NBS * BLK, ROW = 37 * BLK + 5;
    const size_t nv = (size_t)NKS * IHD;
    uint16_t *ik = (uint16_t *)malloc(2 * nv);
    float *ikf = (float *)malloc(4 * nv), iq[G * IHD], gbs[G * NBS], fbs[G * NBS], dbs[G * NBS];
    int32_t gsel[G * TOPK_B], fsel[G * TOPK_B], dsel[G * TOPK_B], hp[NBS];
    uint16_t *d_ik = NULL;
    float *d_ikf = NULL, *d_iq = NULL, *d_bs = NULL;
    int32_t *d_pg = NULL, *d_sel = NULL;
    unsigned *d_ctr = NULL, *d_rng = NULL, rng[2];
    void *d_ws = NULL;
    const size_t ws_n = m3g_msa_indexer_ws(1, G, NBS);
    if (!ik || !ikf)
        return -1;
    for (int p = 0; p < NBS; p++)
        hp[p] = p;
    M3_HIP_CHECK(hipMalloc((void **)&d_ik, 2 * nv));
    M3_HIP_CHECK(hipMalloc((void **)&d_ikf, 4 * nv));
    M3_HIP_CHECK(hipMalloc((void **)&d_iq, sizeof iq));
    M3_HIP_CHECK(hipMalloc((void **)&d_bs, sizeof dbs));
    M3_HIP_CHECK(hipMalloc((void **)&d_pg, sizeof hp));
    M3_HIP_CHECK(hipMalloc((void **)&d_sel, sizeof dsel));
    M3_HIP_CHECK(hipMalloc((void **)&d_ctr, sizeof(unsigned)));
    M3_HIP_CHECK(hipMalloc((void **)&d_rng, 2 * sizeof(unsigned)));
    M3_HIP_CHECK(hipMalloc(&d_ws, ws_n));
    M3_HIP_CHECK(hipMemset(d_ctr, 0, sizeof(unsigned)));
    M3_HIP_CHECK(hipMemcpy(d_pg, hp, sizeof hp, hipMemcpyHostToDevice));
    int fail = 0;
    for (int cs = 0; cs < 3; cs++) {
        uint32_t x = 12345u + 977u * (uint32_t)cs;
        for (size_t i = 0; i < nv; i++) { /* bf16 values in [-1, 1) */
            x = x * 1664525u + 1013904223u;
            const float v = h_round_bf16((float)(x >> 8) / 8388608.0f - 1.0f);
            uint32_t u;
            memcpy(&u, &v, 4);
            ik[i] = (uint16_t)(u >> 16);
        }
        for (int i = 0; i < G * IHD; i++) {
            x = x * 1664525u + 1013904223u;
            iq[i] = h_round_bf16((float)(x >> 8) / 8388608.0f - 1.0f);
        }
        if (cs > 0) {
            for (int r = 0; r < NKS; r++)
                ik[(size_t)r * IHD] = ik[(size_t)r * IHD + 1] = 0;
            /* 0xff40 = -1.5 * 2^127, 0x7f00 = 2^127; 0xbfc0 = -1.5, 0x3fc0 = 1.5 */
            ik[(size_t)ROW * IHD] = cs == 1 ? 0xff40u : 0xbfc0u;
            ik[(size_t)ROW * IHD + 1] = cs == 1 ? 0x7f00u : 0x3fc0u;
            iq[0] = cs == 1 ? 1.0f : ldexpf(1.0f, 127);
            iq[1] = cs == 1 ? 2.0f : ldexpf(1.5f, 127);
        }
        unsigned hlo = 0x1ffu, hhi = 0;
        for (size_t i = 0; i < nv; i++) {
            const unsigned f = (ik[i] >> 7) & 0xffu, f1 = f > 1u ? f : 1u;
            if (ik[i] & 0x7fffu)
                hlo = f1 < hlo ? f1 : hlo;
            hhi = f > hhi ? f : hhi;
            uint32_t u = (uint32_t)ik[i] << 16;
            memcpy(&ikf[i], &u, 4);
        }
        M3_HIP_CHECK(hipMemcpy(d_iq, iq, sizeof iq, hipMemcpyHostToDevice));
        M3_HIP_CHECK(m3g_ik_range_reset(d_rng, st));
        if (cs == 0) { /* the scan */
            M3_HIP_CHECK(hipMemcpy(d_ik, ik, 2 * nv, hipMemcpyHostToDevice));
            M3_HIP_CHECK(m3g_ik_range_scan(d_rng, d_ik, (int64_t)nv, st));
        } else { /* the writer: two writes, as two decode steps would */
            M3_HIP_CHECK(hipMemcpy(d_ikf, ikf, 4 * nv, hipMemcpyHostToDevice));
            M3_HIP_CHECK(hipMemset(d_ik, 0, 2 * nv));
            M3_HIP_CHECK(m3g_to_bf16_ranged(d_ik, d_ikf, (int64_t)ROW * IHD, d_rng, st));
            M3_HIP_CHECK(m3g_to_bf16_ranged(d_ik + (size_t)ROW * IHD, d_ikf + (size_t)ROW * IHD,
                                            (int64_t)(nv - (size_t)ROW * IHD), d_rng, st));
        }
        M3_HIP_CHECK(hipStreamSynchronize(st));
        M3_HIP_CHECK(hipMemcpy(rng, d_rng, sizeof rng, hipMemcpyDeviceToHost));
        idx_gold(ik, iq, NBS, (int64_t)NBS * BLK, 0, gbs, gsel);
        idx_gold(ik, iq, NBS, (int64_t)NBS * BLK, 1, fbs, fsel);
        long hf = 0, dd[2] = {0, 0}, ds = 0;
        for (int i = 0; i < G * NBS; i++)
            hf += memcmp(&gbs[i], &fbs[i], 4) != 0;
        for (int pass = 0; pass < 2; pass++) { /* 0: the default, 1: unproven FMA */
            if (pass == 1 && cs != 1)
                break;
            M3_HIP_CHECK(hipMemset(d_sel, 0x7f, sizeof dsel));
            M3_HIP_CHECK(m3g_msa_indexer_ex(d_sel, d_bs, d_iq, d_ik, M3G_BF16, d_pg, BLK, NKS - 1, 1,
                                            G, IHD, NBS, TOPK_B, 1, 0, d_ctr, d_ws, ws_n,
                                            pass ? NULL : d_rng, pass, st));
            M3_HIP_CHECK(hipStreamSynchronize(st));
            M3_HIP_CHECK(hipMemcpy(dbs, d_bs, sizeof dbs, hipMemcpyDeviceToHost));
            M3_HIP_CHECK(hipMemcpy(dsel, d_sel, sizeof dsel, hipMemcpyDeviceToHost));
            for (int i = 0; i < G * NBS; i++)
                dd[pass] += memcmp(&gbs[i], &dbs[i], 4) != 0;
            if (pass == 0)
                for (int i = 0; i < G * TOPK_B; i++)
                    ds += gsel[i] != dsel[i];
        }
        const int ok = rng[0] == hlo && rng[1] == hhi && dd[0] == 0 && ds == 0 &&
                       (cs == 0 || hf > 0) && (cs != 1 || dd[1] > 0);
        printf("check indexer fma %s: range words %u %u (host %u %u); default vs host mul+add: "
               "%ld of %d block scores, %ld of %d top-16 entries differ; host fmaf differs in "
               "%ld; unproven fma (variant 1) differs in %ld (b only): %s\n",
               cs == 0 ? "(a) in range" : cs == 1 ? "(b) keys out of range" : "(c) q out of range",
               rng[0], rng[1], hlo, hhi, dd[0], G * NBS, ds, G * TOPK_B, hf, dd[1],
               ok ? "pass" : "FAILED");
        fail |= !ok;
    }
    (void)hipFree(d_ik), (void)hipFree(d_ikf), (void)hipFree(d_iq), (void)hipFree(d_bs);
    (void)hipFree(d_pg), (void)hipFree(d_sel), (void)hipFree(d_ctr), (void)hipFree(d_rng);
    (void)hipFree(d_ws);
    free(ik), free(ikf);
    return fail ? -1 : 0;
}

/* Host golden of ref/attention.c (bf16 mode) for one query row t at
 * position pos: o [nh, hd]; q row [nh, hd]; k, v [slots, nkv, hd] (identity
 * pages); list [nkv][stride] of topk entries (a set; -1 empty). */
static void h_msa_row(float *o, const float *q, const float *k, const float *v,
                      const int32_t *list, size_t stride, int topk, int B, int64_t pos, int nh,
                      int nkv, int hd, float *sc)
{
    const float scale = (float)(1.0 / sqrt((double)hd));
    for (int h = 0; h < nh; h++) {
        const int g = h / (nh / nkv);
        const int32_t *l = list + (size_t)g * stride;
        float m = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j <= pos; j++) {
            int ok = 0;
            for (int i = 0; i < topk; i++)
                ok |= l[i] >= 0 && l[i] == (int)(j / B);
            sc[j] = -INFINITY;
            if (!ok)
                continue;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++)
                dot += q[h * hd + d] * k[((size_t)j * nkv + g) * hd + d];
            sc[j] = dot * scale;
            m = sc[j] > m ? sc[j] : m;
        }
        for (int d = 0; d < hd; d++)
            o[h * hd + d] = 0.0f;
        if (m == -INFINITY)
            continue;
        for (int64_t j = 0; j <= pos; j++)
            if (sc[j] != -INFINITY)
                sum += (sc[j] = expf(sc[j] - m));
        for (int64_t j = 0; j <= pos; j++) {
            if (sc[j] == -INFINITY)
                continue;
            const float pj = h_round_bf16(sc[j] / sum);
            for (int d = 0; d < hd; d++)
                o[h * hd + d] += pj * v[((size_t)j * nkv + g) * hd + d];
        }
        for (int d = 0; d < hd; d++)
            o[h * hd + d] = h_round_bf16(o[h * hd + d]);
    }
}

static float h_bf16(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* accumulate the error of got vs ref over n values */
static void h_err(const float *got, const float *ref, size_t n, double *e2, double *r2,
                  double *emax, double *rmax)
{
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - ref[i];
        *e2 += d * d;
        *r2 += (double)ref[i] * ref[i];
        *emax = fmax(*emax, fabs(d));
        *rmax = fmax(*rmax, fabs((double)ref[i]));
    }
}

/* The 128K slab: rows 0, 1, T/2 + 3 and T-1 (all 64 heads) against the host
 * golden, on rotation 0. Pass: nmse <= 1e-5 (the bf16 profile's rule for
 * component tensors, spec/tolerances.json). */
static int check_msa_prefill(pf_ctx *p, const char *name, hipStream_t st)
{
    const size_t nkv = (size_t)p->ctx_len * NKV * HD, nr = (size_t)NH * HD;
    uint16_t *kb = (uint16_t *)malloc(2 * nkv), *vb = (uint16_t *)malloc(2 * nkv);
    float *k = (float *)malloc(4 * nkv), *v = (float *)malloc(4 * nkv);
    float *q = (float *)malloc(4 * nr), *o = (float *)malloc(4 * nr);
    float *ref = (float *)malloc(4 * NH * HD), *sc = (float *)malloc(4 * (size_t)p->ctx_len);
    if (!kb || !vb || !k || !v || !q || !o || !ref || !sc)
        return -1;
    M3_HIP_CHECK(hipMemset(p->out, 0xff, 4 * (size_t)p->T * nr)); /* NaN: no stale result passes */
    M3_HIP_CHECK(pf_launch(p, 0, st));
    M3_HIP_CHECK(hipStreamSynchronize(st));
    M3_HIP_CHECK(hipMemcpy(kb, p->kc[0], 2 * nkv, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(vb, p->vc[0], 2 * nkv, hipMemcpyDeviceToHost));
    for (size_t i = 0; i < nkv; i++) {
        k[i] = h_bf16(kb[i]);
        v[i] = h_bf16(vb[i]);
    }
    const int rows[6] = {0, 1, 200 % p->T, p->T / 2 + 3, p->T - 2, p->T - 1};
    double e2 = 0, r2 = 0, emax = 0, rmax = 0;
    long same = 0;
    for (int i = 0; i < 6; i++) {
        const int t = rows[i];
        M3_HIP_CHECK(hipMemcpy(o, p->out + (size_t)t * nr, 4 * nr, hipMemcpyDeviceToHost));
        M3_HIP_CHECK(hipMemcpy(q, p->q + (size_t)t * nr, 4 * nr, hipMemcpyDeviceToHost));
        h_msa_row(ref, q, k, v, p->hb + (size_t)t * TOPK_B, (size_t)p->T * TOPK_B, TOPK_B, BLK,
                  p->ctx_len - p->T + t, NH, NKV, HD, sc);
        h_err(o, ref, NH * HD, &e2, &r2, &emax, &rmax);
        for (int j = 0; j < NH * HD; j++)
            same += o[j] == ref[j];
    }
    const double nmse = r2 > 0 ? e2 / r2 : e2;
    printf("check %s (%s path, variant %d) vs host ref, 6 rows x 64 heads: nmse %.3g, max|diff| "
           "%.3g (max|ref| %.3g), bitwise equal %ld of %d\n", name,
           m3g_msa_attention_tc(NH, NKV, HD, BLK, TOPK_B, M3G_BF16, 1) ? "tensor-core" : "scalar",
           p->variant, nmse, emax, rmax, same, 6 * NH * HD);
    free(kb), free(vb), free(k), free(v), free(q), free(o), free(ref), free(sc);
    return nmse <= 1e-5 ? 0 : -1;
}

/* The whole output of case p's variant against variant 5's (two passes,
 * exact p) on rotation 0: the number of output words that are bitwise equal,
 * in 16 MiB chunks. must: the variant claims 5's results bit for bit (7, 8
 * and the default), so any difference fails; else the count is reported. */
static int check_msa_bitwise(pf_ctx *p, const char *name, int must, hipStream_t st)
{
    const size_t nel = (size_t)p->T * NH * HD, ch = (size_t)1 << 22;
    float *d5 = NULL;
    uint32_t *a = (uint32_t *)malloc(4 * ch), *b = (uint32_t *)malloc(4 * ch);
    if (!a || !b)
        return -1;
    pf_ctx p5 = *p;
    p5.variant = 5;
    M3_HIP_CHECK(hipMalloc((void **)&d5, 4 * nel));
    M3_HIP_CHECK(hipMemset(p->out, 0xff, 4 * nel));
    M3_HIP_CHECK(pf_launch(&p5, 0, st));
    M3_HIP_CHECK(hipStreamSynchronize(st));
    M3_HIP_CHECK(hipMemcpy(d5, p->out, 4 * nel, hipMemcpyDeviceToDevice));
    M3_HIP_CHECK(hipMemset(p->out, 0xff, 4 * nel));
    M3_HIP_CHECK(pf_launch(p, 0, st));
    M3_HIP_CHECK(hipStreamSynchronize(st));
    size_t same = 0;
    for (size_t i = 0; i < nel; i += ch) {
        const size_t m = nel - i < ch ? nel - i : ch;
        M3_HIP_CHECK(hipMemcpy(a, d5 + i, 4 * m, hipMemcpyDeviceToHost));
        M3_HIP_CHECK(hipMemcpy(b, p->out + i, 4 * m, hipMemcpyDeviceToHost));
        for (size_t j = 0; j < m; j++)
            same += a[j] == b[j];
    }
    (void)hipFree(d5);
    free(a), free(b);
    printf("check %s (variant %d) vs variant 5, every output: bitwise equal %zu of %zu%s\n",
           name, p->variant, same, nel,
           !must ? " (not claimed)" : same == nel ? ": pass" : ": FAILED");
    return !must || same == nel ? 0 : -1;
}

/* Edge shapes of m3g_msa_attention_prefill against the host golden: every
 * row and head; lists with -1, repeated ids and blocks past the query's own
 * block; partial last tiles; fp32 and bf16 caches. */
static int check_msa_prefill_edges(hipStream_t st, int variant)
{
    /* nh, nkv, hd, B, topk, pos0, T, kv bf16 */
    const int sh[6][8] = {{8, 4, 16, 128, 16, 650, 37, 1},  {64, 4, 128, 4, 5, 40, 29, 1},
                          {32, 2, 64, 128, 16, 0, 20, 0},   {64, 4, 128, 128, 16, 1900, 100, 1},
                          {12, 4, 32, 16, 7, 100, 45, 1},   {64, 4, 128, 128, 16, 300, 40, 0}};
    int bad = 0;
    uint64_t s = 77;
    for (int c = 0; c < 6; c++) {
        const int nh = sh[c][0], nkv = sh[c][1], hd = sh[c][2], B = sh[c][3], K = sh[c][4];
        const int pos0 = sh[c][5], T = sh[c][6], bf = sh[c][7];
        const int ctx = pos0 + T, nb = (ctx + B - 1) / B;
        const size_t nk = (size_t)nb * B * nkv * hd, nq = (size_t)T * nh * hd;
        float *k = (float *)malloc(4 * nk), *v = (float *)malloc(4 * nk);
        float *q = (float *)malloc(4 * nq), *o = (float *)malloc(4 * nq);
        float *ref = (float *)malloc(4 * (size_t)nh * hd), *sc = (float *)malloc(4 * (size_t)ctx);
        uint16_t *k16 = (uint16_t *)malloc(2 * nk), *v16 = (uint16_t *)malloc(2 * nk);
        int32_t *bl = (int32_t *)malloc(4 * (size_t)nkv * T * K), *pg = (int32_t *)malloc(4 * (size_t)nb);
        if (!k || !v || !q || !o || !ref || !sc || !k16 || !v16 || !bl || !pg)
            return -1;
        for (size_t i = 0; i < nk; i++) {
            k[i] = h_round_bf16((float)((int)(pf_rng(&s) % 2001) - 1000) / 1000.0f);
            v[i] = h_round_bf16((float)((int)(pf_rng(&s) % 2001) - 1000) / 1000.0f);
            uint32_t u;
            memcpy(&u, &k[i], 4);
            k16[i] = (uint16_t)(u >> 16);
            memcpy(&u, &v[i], 4);
            v16[i] = (uint16_t)(u >> 16);
        }
        for (size_t i = 0; i < nq; i++)
            q[i] = h_round_bf16((float)((int)(pf_rng(&s) % 2001) - 1000) / 250.0f);
        for (int i = 0; i < nb; i++)
            pg[i] = i;
        for (int g = 0; g < nkv; g++)
            for (int t = 0; t < T; t++) {
                const int qb = (pos0 + t) / B;
                int32_t *row = bl + ((size_t)g * T + t) * K;
                for (int i = 0; i < K; i++) {
                    const uint32_t r = pf_rng(&s) % 10;
                    row[i] = i == 0 ? qb : r == 0 ? -1 : r == 1 && i > 1 ? row[i - 1]
                                                        : (int)(pf_rng(&s) % (uint32_t)(nb + 1));
                }
            }
        float *dq, *dout;
        void *dk, *dv;
        int32_t *dbl, *dpg;
        const size_t esz = bf ? 2 : 4;
        M3_HIP_CHECK(hipMalloc((void **)&dq, 4 * nq));
        M3_HIP_CHECK(hipMalloc((void **)&dout, 4 * nq));
        M3_HIP_CHECK(hipMalloc(&dk, esz * nk));
        M3_HIP_CHECK(hipMalloc(&dv, esz * nk));
        M3_HIP_CHECK(hipMalloc((void **)&dbl, 4 * (size_t)nkv * T * K));
        M3_HIP_CHECK(hipMalloc((void **)&dpg, 4 * (size_t)nb));
        M3_HIP_CHECK(hipMemcpy(dq, q, 4 * nq, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dk, bf ? (void *)k16 : (void *)k, esz * nk, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dv, bf ? (void *)v16 : (void *)v, esz * nk, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dbl, bl, 4 * (size_t)nkv * T * K, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dpg, pg, 4 * (size_t)nb, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemset(dout, 0xff, 4 * nq));
        M3_HIP_CHECK(m3g_msa_attention_prefill_tuned(dout, dq, dk, dv, bf ? M3G_BF16 : M3G_F32, dpg,
                                                     B, pos0, T, nh, nkv, hd, dbl, K, 1, variant,
                                                     st));
        M3_HIP_CHECK(hipStreamSynchronize(st));
        M3_HIP_CHECK(hipMemcpy(o, dout, 4 * nq, hipMemcpyDeviceToHost));
        double e2 = 0, r2 = 0, emax = 0, rmax = 0;
        for (int t = 0; t < T; t++) {
            h_msa_row(ref, q + (size_t)t * nh * hd, k, v, bl + (size_t)t * K, (size_t)T * K, K, B,
                      pos0 + t, nh, nkv, hd, sc);
            h_err(o + (size_t)t * nh * hd, ref, (size_t)nh * hd, &e2, &r2, &emax, &rmax);
        }
        const double nmse = r2 > 0 ? e2 / r2 : e2;
        printf("check msa prefill edge %d variant %d (nh %d nkv %d hd %d B %d topk %d pos0 %d T %d "
               "%s kv, %s): nmse %.3g max|diff| %.3g (max|ref| %.3g)\n",
               c, variant, nh, nkv, hd, B, K, pos0, T, bf ? "bf16" : "fp32",
               m3g_msa_attention_tc(nh, nkv, hd, B, K, bf, 1) ? "tensor cores" : "scalar", nmse,
               emax, rmax);
        bad |= !(nmse <= 1e-5);
        (void)hipFree(dq), (void)hipFree(dout), (void)hipFree(dk), (void)hipFree(dv);
        (void)hipFree(dbl), (void)hipFree(dpg);
        free(k), free(v), free(q), free(o), free(ref), free(sc), free(k16), free(v16), free(bl),
            free(pg);
    }
    return bad ? -1 : 0;
}

/* Edge shapes of m3g_attention_sk (bf16 caches, bf16 mode) against the host
 * golden, every row and head: the default path (tensor-core cluster kernel on
 * NVIDIA), the scalar cluster kernel (variant 2) and the two launches
 * (variant 1); lists with -1, repeated ids and blocks past the query's own
 * block; partial own blocks; T > 1; small hd, B, topk and heads per group. */
static int check_attention_edges(hipStream_t st)
{
    /* nh, nkv, hd, B, topk, pos0, T, lists without repeated ids */
    const int sh[10][8] = {{64, 4, 128, 128, 16, 1900, 1, 0}, {64, 4, 128, 128, 16, 5000, 3, 0},
                           {8, 4, 16, 128, 16, 650, 2, 0},    {64, 4, 128, 4, 5, 40, 1, 0},
                           {32, 2, 64, 128, 16, 0, 1, 0},     {12, 4, 32, 16, 7, 100, 2, 0},
                           {4, 2, 64, 16, 2, 70, 1, 0},       {64, 4, 128, 128, 8, 3000, 1, 0},
                           {64, 4, 128, 128, 16, 1900, 1, 1}, {12, 4, 32, 16, 7, 100, 2, 1}};
    const int vars[3] = {0, 2, 1};
    int bad = 0;
    uint64_t s = 91;
    for (int c = 0; c < 10; c++) {
        const int nh = sh[c][0], nkv = sh[c][1], hd = sh[c][2], B = sh[c][3], K = sh[c][4];
        const int pos0 = sh[c][5], T = sh[c][6], norep = sh[c][7];
        const int ctx = pos0 + T, nb = (ctx + B - 1) / B;
        const size_t nk = (size_t)nb * B * nkv * hd, nq = (size_t)T * nh * hd;
        float *k = (float *)malloc(4 * nk), *v = (float *)malloc(4 * nk);
        float *q = (float *)malloc(4 * nq), *o = (float *)malloc(4 * nq);
        float *ref = (float *)malloc(4 * nq), *sc = (float *)malloc(4 * (size_t)ctx);
        uint16_t *k16 = (uint16_t *)malloc(2 * nk), *v16 = (uint16_t *)malloc(2 * nk);
        int32_t *bl = (int32_t *)malloc(4 * (size_t)nkv * T * K), *pg = (int32_t *)malloc(4 * (size_t)nb);
        if (!k || !v || !q || !o || !ref || !sc || !k16 || !v16 || !bl || !pg)
            return -1;
        for (size_t i = 0; i < nk; i++) {
            k[i] = h_round_bf16((float)((int)(pf_rng(&s) % 2001) - 1000) / 1000.0f);
            v[i] = h_round_bf16((float)((int)(pf_rng(&s) % 2001) - 1000) / 1000.0f);
            uint32_t u;
            memcpy(&u, &k[i], 4);
            k16[i] = (uint16_t)(u >> 16);
            memcpy(&u, &v[i], 4);
            v16[i] = (uint16_t)(u >> 16);
        }
        for (size_t i = 0; i < nq; i++)
            q[i] = h_round_bf16((float)((int)(pf_rng(&s) % 2001) - 1000) / 250.0f);
        for (int i = 0; i < nb; i++)
            pg[i] = i;
        for (int g = 0; g < nkv; g++)
            for (int t = 0; t < T; t++) {
                const int qb = (pos0 + t) / B;
                int32_t *row = bl + ((size_t)g * T + t) * K;
                for (int i = 0; i < K; i++) {
                    const uint32_t r = pf_rng(&s) % 10;
                    row[i] = i == 0 ? qb : r == 0 ? -1 : r == 1 && i > 1 ? row[i - 1]
                                                        : (int)(pf_rng(&s) % (uint32_t)(nb + 1));
                    for (int j = 0; norep && j < i; j++)
                        if (row[j] == row[i])
                            row[i] = -1;
                }
            }
        int reps = 0; /* a visible block id listed twice in some row */
        for (int g = 0; g < nkv; g++)
            for (int t = 0; t < T; t++) {
                const int32_t *row = bl + ((size_t)g * T + t) * K;
                for (int i = 0; i < K; i++)
                    for (int j = 0; j < i; j++)
                        reps |= row[i] >= 0 && row[i] == row[j] && row[i] <= (pos0 + t) / B;
            }
        for (int t = 0; t < T; t++)
            h_msa_row(ref + (size_t)t * nh * hd, q + (size_t)t * nh * hd, k, v, bl + (size_t)t * K,
                      (size_t)T * K, K, B, pos0 + t, nh, nkv, hd, sc);
        float *dq, *dout;
        void *dk, *dv, *dws;
        int32_t *dbl, *dpg;
        const size_t wsn = m3g_attention_sk_ws(B, pos0, T, nh, nkv, hd, bl, K, M3G_BF16);
        M3_HIP_CHECK(hipMalloc((void **)&dq, 4 * nq));
        M3_HIP_CHECK(hipMalloc((void **)&dout, 4 * nq));
        M3_HIP_CHECK(hipMalloc(&dk, 2 * nk));
        M3_HIP_CHECK(hipMalloc(&dv, 2 * nk));
        M3_HIP_CHECK(hipMalloc(&dws, wsn));
        M3_HIP_CHECK(hipMalloc((void **)&dbl, 4 * (size_t)nkv * T * K));
        M3_HIP_CHECK(hipMalloc((void **)&dpg, 4 * (size_t)nb));
        M3_HIP_CHECK(hipMemcpy(dq, q, 4 * nq, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dk, k16, 2 * nk, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dv, v16, 2 * nk, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dbl, bl, 4 * (size_t)nkv * T * K, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dpg, pg, 4 * (size_t)nb, hipMemcpyHostToDevice));
        printf("check msa decode edge %d (nh %d nkv %d hd %d B %d topk %d pos0 %d T %d, %s; "
               "default path %s):",
               c, nh, nkv, hd, B, K, pos0, T,
               reps ? "repeated ids (judged: default only)" : "no repeated ids",
               m3g_attention_sk_tc(B, nh, nkv, hd, dbl, K, M3G_BF16, 1) ? "tensor-core cluster"
               : m3g_attention_sk_cluster(B, nh, nkv, hd, dbl, K, M3G_BF16, 1) ? "cluster"
                                                                                : "2-launch");
        for (int vi = 0; vi < 3; vi++) {
            M3_HIP_CHECK(hipMemset(dout, 0xff, 4 * nq)); /* NaN: every output must be written */
            M3_HIP_CHECK(m3g_attention_sk_tuned(dout, dq, dk, dv, M3G_BF16, dpg, B, pos0, T, nh,
                                                nkv, hd, dbl, K, 1, dws, wsn, vars[vi], st));
            M3_HIP_CHECK(hipStreamSynchronize(st));
            M3_HIP_CHECK(hipMemcpy(o, dout, 4 * nq, hipMemcpyDeviceToHost));
            double e2 = 0, r2 = 0, emax = 0, rmax = 0;
            long nan = 0;
            for (size_t i = 0; i < nq; i++)
                nan += o[i] != o[i];
            h_err(o, ref, nq, &e2, &r2, &emax, &rmax);
            const double nmse = r2 > 0 ? e2 / r2 : e2;
            printf(" variant %d nmse %.3g max|diff| %.3g (max|ref| %.3g)%s;", vars[vi], nmse, emax,
                   rmax, nan ? " NaN" : "");
            if (vi == 0 || !reps) /* the older paths count a repeated id twice */
                bad |= !(nmse <= 1e-5) || nan;
        }
        printf("\n");
        (void)hipFree(dq), (void)hipFree(dout), (void)hipFree(dk), (void)hipFree(dv);
        (void)hipFree(dws), (void)hipFree(dbl), (void)hipFree(dpg);
        free(k), free(v), free(q), free(o), free(ref), free(sc), free(k16), free(v16), free(bl),
            free(pg);
    }
    return bad ? -1 : 0;
}

/* ---- dense decode attention (layers 0-2: every key 0 .. pos) ------------
 * One query row at position ctx_len - 1, 64 q / 4 kv heads, hd 128, bf16
 * caches, bf16 mode, through m3g_attention_sk_tuned (variant: 0 default =
 * the dense tensor-core split-key path at >= its key threshold; 32 the
 * two-launch path; 64 the tensor-core path at any length; + 128 no L2
 * hints; + 256 no PDL). Rotation r reads its own K/V copy; the page table is
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

/* Host golden of ref/attention.c (bf16 mode, dense causal) for heads
 * [h0, h1) of one row at position pos: o [nh, hd] (only those heads);
 * caches as raw bf16 [slots, nkv, hd] behind the page table. Keys are
 * processed 4 at a time with one accumulator each (each key's sum is the
 * reference's: d ascending, multiply then add). */
static void h_dense_row(float *o, const float *q, const uint16_t *k, const uint16_t *v,
                        const int32_t *pages, int B, int64_t pos, int nh, int nkv, int hd, int h0,
                        int h1, float *sc, float *vf)
{
    const float scale = (float)(1.0 / sqrt((double)hd));
    const int64_t n = pos + 1;
    for (int h = h0; h < h1; h++) {
        const int g = h / (nh / nkv);
        const float *qh = q + (size_t)h * hd;
        float m = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < n; j += 4) {
            const uint16_t *kr[4];
            float dot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const int nj = n - j < 4 ? (int)(n - j) : 4;
            for (int u = 0; u < nj; u++) {
                const int64_t key = j + u;
                kr[u] = k + ((size_t)((int64_t)pages[key / B] * B + key % B) * nkv + g) * hd;
            }
            for (int d = 0; d < hd; d++)
                for (int u = 0; u < nj; u++)
                    dot[u] += qh[d] * h_bf16(kr[u][d]);
            for (int u = 0; u < nj; u++) {
                sc[j + u] = dot[u] * scale;
                m = sc[j + u] > m ? sc[j + u] : m;
            }
        }
        for (int64_t j = 0; j < n; j++)
            sum += (sc[j] = expf(sc[j] - m));
        for (int d = 0; d < hd; d++)
            vf[d] = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const float p = h_round_bf16(sc[j] / sum);
            if (p == 0.0f)
                continue;
            const uint16_t *vr = v + ((size_t)((int64_t)pages[j / B] * B + j % B) * nkv + g) * hd;
            for (int d = 0; d < hd; d++)
                vf[d] += p * h_bf16(vr[d]);
        }
        for (int d = 0; d < hd; d++)
            o[(size_t)h * hd + d] = h_round_bf16(vf[d]);
    }
}

/* The M3-shape dense case x (rotation 0) against the host golden on the
 * ascending heads[] (all heads when nheads == 2 and they are 0 and NH - 1,
 * else just those): the default path, its other CTA shapes (8-warp and
 * 4-warp CTAs of 4 KV groups), its launches without L2 hints and without
 * PDL (must equal the default bitwise), a repeat (deterministic), and the
 * two-launch path. Pass: nmse <= 1e-5 for every path. */
static int check_dense_decode(dd_ctx *x, const int *heads, int nheads, hipStream_t st)
{
    const int h0 = heads[0], h1 = heads[nheads - 1] + 1;
    const int npages = (x->ctx_len + BLK - 1) / BLK;
    const size_t nel = (size_t)npages * BLK * NKV * HD, no = (size_t)NH * HD;
    const int vars[7] = {0, 0, 64 | 128, 64 | 256, 32, 64 | 512, 64 | 1024};
    float *q = (float *)malloc(4 * no), *o = (float *)malloc(4 * 7 * no),
          *ref = (float *)malloc(4 * no), *sc = (float *)malloc(4 * (size_t)x->ctx_len);
    uint16_t *k = (uint16_t *)malloc(2 * nel), *v = (uint16_t *)malloc(2 * nel);
    int32_t *pg = (int32_t *)malloc(4 * (size_t)npages);
    float vf[HD];
    if (!q || !o || !ref || !sc || !k || !v || !pg)
        return -1;
    for (int i = 0; i < 7; i++) {
        M3_HIP_CHECK(hipMemset(x->out, 0xff, 4 * no)); /* NaN: every output must be written */
        M3_HIP_CHECK(m3g_attention_sk_tuned(x->out, x->q, x->kc[0], x->vc[0], M3G_BF16, x->pages,
                                            BLK, x->ctx_len - 1, 1, NH, NKV, HD, NULL, 0, 1, x->ws,
                                            x->ws_n, vars[i], st));
        M3_HIP_CHECK(hipStreamSynchronize(st));
        M3_HIP_CHECK(hipMemcpy(o + i * no, x->out, 4 * no, hipMemcpyDeviceToHost));
    }
    M3_HIP_CHECK(hipMemcpy(q, x->q, 4 * no, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(k, x->kc[0], 2 * nel, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(v, x->vc[0], 2 * nel, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(pg, x->pages, 4 * (size_t)npages, hipMemcpyDeviceToHost));
    const int all = nheads == 2 && h0 == 0 && h1 == NH;
    for (int i = 0; i < (all ? 1 : nheads); i++)
        h_dense_row(ref, q, k, v, pg, BLK, x->ctx_len - 1, NH, NKV, HD, all ? 0 : heads[i],
                    all ? NH : heads[i] + 1, sc, vf);
    double nm[4], em[4], rmax = 0;
    long nd[4];
    size_t nv = 0;
    for (int c = 0; c < 4; c++) { /* default, two-launch, 8-warp 4-group, 4-warp 4-group */
        double e2 = 0, r2 = 0, emax = 0;
        nd[c] = 0;
        nv = 0;
        for (int i = 0; i < (all ? NH : nheads); i++) {
            const size_t off = (size_t)(all ? i : heads[i]) * HD;
            const float *got = o + (c == 0 ? 0 : c + 3) * no + off;
            h_err(got, ref + off, HD, &e2, &r2, &emax, &rmax);
            for (size_t j = 0; j < HD; j++)
                nd[c] += got[j] != ref[off + j];
            nv += HD;
        }
        nm[c] = r2 > 0 ? e2 / r2 : e2;
        em[c] = emax;
    }
    const int det = memcmp(o, o + no, 4 * no) == 0,
              vsame = memcmp(o, o + 2 * no, 4 * no) == 0 && memcmp(o, o + 3 * no, 4 * no) == 0;
    printf("check dense decode attention %dK vs host ref (heads %d..%d%s, max|ref| %.3g): default "
           "(%s) nmse %.3g max|diff| %.3g (%ld of %zu differ); 2-launch nmse %.3g max|diff| %.3g "
           "(%ld); 8-warp 4-group nmse %.3g max|diff| %.3g, 4-warp 4-group nmse %.3g max|diff| "
           "%.3g; repeat bitwise: %s; no-L2-hint / no-PDL == default bitwise: %s\n",
           x->ctx_len / 1024, h0, h1 - 1, all ? "" : " (listed only)", rmax,
           m3g_attention_sk_dense_tc(x->ctx_len, NH, NKV, HD, M3G_BF16, 1) ? "dense tensor-core"
                                                                          : "2-launch",
           nm[0], em[0], nd[0], nv, nm[1], em[1], nd[1], nm[2], em[2], nm[3], em[3],
           det ? "yes" : "NO", vsame ? "yes" : "NO");
    free(q), free(o), free(ref), free(sc), free(k), free(v), free(pg);
    return nm[0] <= 1e-5 && nm[1] <= 1e-5 && nm[2] <= 1e-5 && nm[3] <= 1e-5 && det && vsame
               ? 0
               : -1;
}

/* Edge shapes of the dense path (bf16 caches, bf16 mode) against the host
 * golden, every row and head: the tensor-core path forced (variant 64; its
 * default 4-warp CTAs of one KV group, 8-warp and 4-warp CTAs of up to 4) and
 * the two-launch path (32); hd 16-128, 1-16 heads per group, B 4-128 (tiles
 * across pages), 1 key, tile boundaries, T up to 5 and a workspace that
 * holds one row only (row chunks); permuted page tables. */
static int check_dense_edges(hipStream_t st)
{
    /* nh, nkv, hd, B, pos0, T, one-row workspace */
    const int sh[11][7] = {{64, 4, 128, 128, 0, 1, 0},   {64, 4, 128, 128, 62, 3, 0},
                           {8, 4, 16, 16, 300, 2, 0},    {32, 2, 64, 128, 5000, 2, 0},
                           {12, 4, 32, 32, 1000, 3, 0},  {16, 1, 128, 64, 20000, 1, 0},
                           {64, 4, 128, 128, 4095, 5, 1}, {8, 2, 64, 4, 200, 1, 0},
                           {4, 4, 128, 128, 70000, 1, 0}, {64, 4, 128, 128, 3000, 2, 0},
                           {64, 2, 128, 128, 3000, 1, 0}};
    int bad = 0;
    uint64_t s = 77;
    for (int c = 0; c < 11; c++) {
        const int nh = sh[c][0], nkv = sh[c][1], hd = sh[c][2], B = sh[c][3], pos0 = sh[c][4];
        const int T = sh[c][5], one = sh[c][6];
        const int ctx = pos0 + T, nb = (ctx + B - 1) / B;
        const size_t nk = (size_t)nb * B * nkv * hd, nq = (size_t)T * nh * hd;
        uint16_t *k = (uint16_t *)malloc(2 * nk), *v = (uint16_t *)malloc(2 * nk);
        float *q = (float *)malloc(4 * nq), *o = (float *)malloc(4 * nq);
        float *ref = (float *)malloc(4 * nq), *sc = (float *)malloc(4 * (size_t)ctx);
        float *vf = (float *)malloc(4 * (size_t)hd);
        int32_t *pg = (int32_t *)malloc(4 * (size_t)nb);
        if (!k || !v || !q || !o || !ref || !sc || !vf || !pg)
            return -1;
        for (size_t i = 0; i < nk; i++) {
            uint32_t u;
            float f = h_round_bf16((float)((int)(pf_rng(&s) % 2001) - 1000) / 1000.0f);
            memcpy(&u, &f, 4);
            k[i] = (uint16_t)(u >> 16);
            f = h_round_bf16((float)((int)(pf_rng(&s) % 2001) - 1000) / 1000.0f);
            memcpy(&u, &f, 4);
            v[i] = (uint16_t)(u >> 16);
        }
        for (size_t i = 0; i < nq; i++)
            q[i] = h_round_bf16((float)((int)(pf_rng(&s) % 2001) - 1000) / 250.0f);
        for (int i = 0; i < nb; i++) /* a permutation: nb - 1 - i */
            pg[i] = nb - 1 - i;
        for (int t = 0; t < T; t++)
            h_dense_row(ref + (size_t)t * nh * hd, q + (size_t)t * nh * hd, k, v, pg, B, pos0 + t,
                        nh, nkv, hd, 0, nh, sc, vf);
        float *dq, *dout;
        void *dk, *dv, *dws;
        int32_t *dpg;
        size_t wsn = m3g_attention_sk_ws(B, pos0, T, nh, nkv, hd, NULL, 0, M3G_BF16);
        if (one) /* enough for the last row alone (either path): rows go in chunks */
            wsn = m3g_attention_sk_ws(B, pos0 + T - 1, 1, nh, nkv, hd, NULL, 0, M3G_BF16);
        M3_HIP_CHECK(hipMalloc((void **)&dq, 4 * nq));
        M3_HIP_CHECK(hipMalloc((void **)&dout, 4 * nq));
        M3_HIP_CHECK(hipMalloc(&dk, 2 * nk));
        M3_HIP_CHECK(hipMalloc(&dv, 2 * nk));
        M3_HIP_CHECK(hipMalloc(&dws, wsn));
        M3_HIP_CHECK(hipMalloc((void **)&dpg, 4 * (size_t)nb));
        M3_HIP_CHECK(hipMemcpy(dq, q, 4 * nq, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dk, k, 2 * nk, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dv, v, 2 * nk, hipMemcpyHostToDevice));
        M3_HIP_CHECK(hipMemcpy(dpg, pg, 4 * (size_t)nb, hipMemcpyHostToDevice));
        printf("check dense decode edge %d (nh %d nkv %d hd %d B %d pos0 %d T %d%s; default %s):",
               c, nh, nkv, hd, B, pos0, T, one ? ", one-row workspace" : "",
               m3g_attention_sk_dense_tc(ctx, nh, nkv, hd, M3G_BF16, 1) ? "dense tensor-core"
                                                                        : "2-launch");
        const int vars[4] = {64, 64 | 512, 64 | 1024, 32};
        static const char *vn[4] = {"tc", "tc 8-warp", "tc 4-warp multi-group", "2-launch"};
        for (int vi = 0; vi < 4; vi++) {
            M3_HIP_CHECK(hipMemset(dout, 0xff, 4 * nq)); /* NaN: every output must be written */
            M3_HIP_CHECK(m3g_attention_sk_tuned(dout, dq, dk, dv, M3G_BF16, dpg, B, pos0, T, nh,
                                                nkv, hd, NULL, 0, 1, dws, wsn, vars[vi], st));
            M3_HIP_CHECK(hipStreamSynchronize(st));
            M3_HIP_CHECK(hipMemcpy(o, dout, 4 * nq, hipMemcpyDeviceToHost));
            double e2 = 0, r2 = 0, emax = 0, rmax = 0;
            long nan = 0;
            for (size_t i = 0; i < nq; i++)
                nan += o[i] != o[i];
            h_err(o, ref, nq, &e2, &r2, &emax, &rmax);
            const double nmse = r2 > 0 ? e2 / r2 : e2;
            printf(" %s nmse %.3g max|diff| %.3g (max|ref| %.3g)%s;", vn[vi], nmse,
                   emax, rmax, nan ? " NaN" : "");
            bad |= !(nmse <= 1e-5) || nan;
        }
        printf("\n");
        (void)hipFree(dq), (void)hipFree(dout), (void)hipFree(dk), (void)hipFree(dv);
        (void)hipFree(dws), (void)hipFree(dpg);
        free(k), free(v), free(q), free(o), free(ref), free(sc), free(vf), free(pg);
    }
    return bad ? -1 : 0;
}

/* 1M keys (8,192 pages of 128, permuted), heads 0, 17 and 63 against the host golden. */
static int check_dense_1m(hipStream_t st)
{
    bench_case bc;
    memset(&bc, 0, sizeof bc);
    if (make_dense_decode(&bc, "dense 1M", 1 << 20, 1 << 30, 0, NULL) != 0)
        return -1;
    dd_ctx *x = (dd_ctx *)bc.ctx;
    const int heads[3] = {0, 17, 63};
    const int bad = check_dense_decode(x, heads, 3, st);
    for (int r = 0; r < x->nrot; r++)
        (void)hipFree(x->kc[r]), (void)hipFree(x->vc[r]);
    (void)hipFree(x->q), (void)hipFree(x->out), (void)hipFree(x->pages), (void)hipFree(x->ws);
    free(x);
    return bad;
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

/* ---- linear-layer self-checks against host goldens --------------------- */

/* ref/linear.c order: 8 partials over c = l (mod 8) ascending, combined
 * ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)); no FMA (host -ffp-contract=off). */
static float h_dot8(const uint16_t *w, const float *x, int cols)
{
    float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int c = 0; c < cols; c++) {
        const float prod = h_bf16(w[c]) * x[c];
        p[c & 7] = p[c & 7] + prod;
    }
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

static float h_swiglu(float gv, float uv)
{
    const float g = gv > 7.0f ? 7.0f : gv;
    const float u = uv > 7.0f ? 7.0f : (uv < -7.0f ? -7.0f : uv);
    const float sig = 1.0f / (1.0f + expf(-(1.702f * g)));
    return (u + 1.0f) * (g * sig);
}

/* Compare got [n] with want [n]: exact (count differing bit patterns) or
 * within tol * max|want|; also that bf16-mode outputs are bf16 values. */
static int cmp_out(const char *what, const float *got, const float *want, size_t n, int exact,
                   int bf16_out, double tol)
{
    double md = 0, mx = 0;
    size_t ndiff = 0, nnotbf = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)got[i] - want[i]));
        mx = fmax(mx, fabs((double)want[i]));
        ndiff += memcmp(&got[i], &want[i], 4) != 0;
        uint32_t u;
        memcpy(&u, &got[i], 4);
        nnotbf += bf16_out && (u & 0xffffu) != 0;
    }
    const int ok = (exact ? ndiff == 0 : md <= tol * mx) && nnotbf == 0;
    printf("check %s: max|diff| %.3g (max|ref| %.3g), %zu of %zu not bitwise equal%s -> %s\n",
           what, md, mx, ndiff, n, nnotbf ? ", NOT bf16 values" : "", ok ? "pass" : "FAILED");
    return ok ? 0 : -1;
}

/* Fused q/k/v (+ index) and gate+up GEMVs (T = 1, 3; both modes), and the
 * BLAS GEMM (cuBLASLt / GemmEx) vs the tiled fallback on a small shape. */
static int check_linear(m3g_blas *blas, m3g_blas *blas_nolt, hipStream_t st)
{
    enum { T3 = 3, QR = NH * HD, KR = NKV * HD, IQR = G * IHD, IKR = IHD };
    const int seg5[5] = {QR, KR, KR, IQR, IKR};
    const int rows = QR + 2 * KR + IQR + IKR, cols = H;
    const size_t nw = (size_t)rows * cols;
    uint16_t *hw = (uint16_t *)malloc(2 * nw);
    float *hx = (float *)malloc(4 * (size_t)T3 * cols), *want = (float *)malloc(4 * (size_t)T3 * rows),
          *got = (float *)malloc(4 * (size_t)T3 * rows), *got2 = (float *)malloc(4 * (size_t)T3 * rows);
    void *dw = dev_rand(nw, 1, 4242u, 0.05f);
    float *dx = (float *)dev_rand((size_t)T3 * cols, 0, 4243u, 1.0f);
    float *dy = (float *)dev_rand((size_t)T3 * rows, 0, 1u, 0.0f);
    int bad = 0;
    if (!hw || !hx || !want || !got || !got2 || !dw || !dx || !dy)
        return -1;
    M3_HIP_CHECK(hipDeviceSynchronize());
    M3_HIP_CHECK(hipMemcpy(hw, dw, 2 * nw, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(hx, dx, 4 * (size_t)T3 * cols, hipMemcpyDeviceToHost));
    const m3g_mat W = {dw, M3G_BF16, rows, cols};
    for (int mode = 0; mode < 2; mode++)
        for (int T = 1; T <= T3; T += 2) {
            /* host golden in the fused output layout (segments back to back) */
            m3g_seg seg[5];
            size_t off = 0;
            for (int s = 0, r0 = 0; s < 5; r0 += seg5[s], s++) {
                seg[s].y = dy + off;
                seg[s].ld = seg[s].rows = seg5[s];
                for (int t = 0; t < T; t++)
                    for (int r = 0; r < seg5[s]; r++) {
                        const float v = h_dot8(hw + (size_t)(r0 + r) * cols, hx + (size_t)t * cols, cols);
                        want[off + (size_t)t * seg5[s] + r] = mode ? h_round_bf16(v) : v;
                    }
                off += (size_t)T * seg5[s];
            }
            M3_HIP_CHECK(m3g_linear_multi(dx, W, seg, 5, T, mode, NULL, st));
            M3_HIP_CHECK(hipStreamSynchronize(st));
            M3_HIP_CHECK(hipMemcpy(got, dy, 4 * off, hipMemcpyDeviceToHost));
            char what[96];
            snprintf(what, sizeof what, "fused gemv q/k/v/iq/ik %dx%d T=%d %s", rows, cols, T,
                     mode ? "bf16" : "fp32 (bitwise)");
            bad |= cmp_out(what, got, want, off, mode == 0, mode == 1, 0.01);
            if (mode == 1) { /* the same through five separate m3g_linear calls */
                for (int s = 0, r0 = 0; s < 5; r0 += seg5[s], s++) {
                    m3g_mat Ws = W;
                    Ws.rows = seg5[s];
                    Ws.data = (const uint16_t *)dw + (size_t)r0 * cols;
                    M3_HIP_CHECK(m3g_linear(seg[s].y, seg5[s], dx, Ws, T, mode, NULL, st));
                }
                M3_HIP_CHECK(hipStreamSynchronize(st));
                M3_HIP_CHECK(hipMemcpy(got2, dy, 4 * off, hipMemcpyDeviceToHost));
                snprintf(what, sizeof what, "per-matrix gemv T=%d bf16 vs host", T);
                bad |= cmp_out(what, got2, want, off, 0, 1, 0.01);
            }
        }
    /* gate + up + SwiGLU: the first 2 x 3072 rows of the same weight */
    for (int mode = 0; mode < 2; mode++) {
        const m3g_mat Wgu = {dw, M3G_BF16, 2 * I, cols};
        M3_HIP_CHECK(m3g_linear_swiglu(dy, I, NULL, dx, Wgu, 1, 1.702f, 7.0f, 1.0f, mode, NULL, st));
        M3_HIP_CHECK(hipStreamSynchronize(st));
        M3_HIP_CHECK(hipMemcpy(got, dy, 4 * (size_t)I, hipMemcpyDeviceToHost));
        for (int j = 0; j < I; j++) {
            float g = h_dot8(hw + (size_t)j * cols, hx, cols);
            float u = h_dot8(hw + (size_t)(I + j) * cols, hx, cols);
            if (mode)
                g = h_round_bf16(g), u = h_round_bf16(u);
            const float v = h_swiglu(g, u);
            want[j] = mode ? h_round_bf16(v) : v;
        }
        bad |= cmp_out(mode ? "fused gate+up+swiglu 6144x6144 T=1 bf16"
                            : "fused gate+up+swiglu 6144x6144 T=1 fp32 (bitwise)",
                       got, want, I, 0 /* expf: device vs host libm */, mode == 1,
                       mode ? 0.01 : 1e-6);
    }
    /* GEMM (T > 8, bf16 mode): Lt, GemmEx, tiled fallback on 384 x 512, T 64 */
    {
        const int gr = 384, gc = 512, gt = 64;
        float *ref = (float *)malloc(4 * (size_t)gt * gr), *fb = (float *)malloc(4 * (size_t)gt * gr);
        if (!ref || !fb)
            return -1;
        const m3g_mat Wg = {dw, M3G_BF16, gr, gc};
        /* its own X [gt, gc] (bf16 values in fp32) */
        float *gx = (float *)dev_rand((size_t)gt * gc, 0, 4244u, 1.0f);
        float *hx2 = (float *)malloc(4 * (size_t)gt * gc);
        if (!gx || !hx2)
            return -1;
        M3_HIP_CHECK(hipDeviceSynchronize());
        M3_HIP_CHECK(hipMemcpy(hx2, gx, 4 * (size_t)gt * gc, hipMemcpyDeviceToHost));
        for (int t = 0; t < gt; t++)
            for (int r = 0; r < gr; r++)
                ref[(size_t)t * gr + r] = h_round_bf16(h_dot8(hw + (size_t)r * gc, hx2 + (size_t)t * gc, gc));
        M3_HIP_CHECK(m3g_linear(dy, gr, gx, Wg, gt, 1, NULL, st));
        M3_HIP_CHECK(hipStreamSynchronize(st));
        M3_HIP_CHECK(hipMemcpy(fb, dy, 4 * (size_t)gt * gr, hipMemcpyDeviceToHost));
        bad |= cmp_out("gemm 384x512 T=64 tiled fallback vs host", fb, ref, (size_t)gt * gr, 0, 1, 0.01);
        m3g_blas *bl[2] = {blas, blas_nolt};
        const char *nm[2] = {"gemm 384x512 T=64 cuBLASLt (default BLAS path)",
                             "gemm 384x512 T=64 BLAS without Lt"};
        for (int k = 0; k < 2; k++) {
            if (!bl[k])
                continue;
            M3_HIP_CHECK(m3g_linear(dy, gr, gx, Wg, gt, 1, bl[k], st));
            M3_HIP_CHECK(hipStreamSynchronize(st));
            M3_HIP_CHECK(hipMemcpy(got, dy, 4 * (size_t)gt * gr, hipMemcpyDeviceToHost));
            char what[128];
            snprintf(what, sizeof what, "%s vs host", nm[k]);
            bad |= cmp_out(what, got, ref, (size_t)gt * gr, 0, 1, 0.01);
            snprintf(what, sizeof what, "%s vs tiled fallback", nm[k]);
            bad |= cmp_out(what, got, fb, (size_t)gt * gr, 0, 1, 0.01);
        }
        (void)hipFree(gx);
        free(ref), free(fb), free(hx2);
    }
    (void)hipFree(dw), (void)hipFree(dx), (void)hipFree(dy);
    free(hw), free(hx), free(want), free(got), free(got2);
    return bad ? -1 : 0;
}

/* Every decode GEMV variant (m3g_gemv_variant, bf16 mode) against the host
 * golden (ref order, rounded) at the M3 decode shapes of the bench: one
 * matrix per column count and row class, the fused 3-segment (T = 1) and
 * 5-segment layouts (T = 1 and 3) and gate+up+SwiGLU; plus each variant
 * twice (bitwise repeatable), and whether it is bitwise equal to variant 1
 * (the old split-K kernel: the persistent kernels use its tiles and sums). */
static int check_gemv_variants(hipStream_t st)
{
    enum { QR = NH * HD, KR = NKV * HD, IQR = G * IHD, IKR = IHD, TM = 3 };
    static const struct { const char *what; int rows, cols, nseg, swiglu, T; } sh[] = {
        {"q_proj 8192x6144", QR, H, 1, 0, 1},
        {"k_proj 512x6144", KR, H, 1, 0, 1},
        {"shared gate 3072x6144", I, H, 1, 0, 1},
        {"o_proj 6144x8192", H, QR, 1, 0, 1},
        {"dense down 6144x12288", H, ID, 1, 0, 1},
        {"qkv 9216x6144", QR + 2 * KR, H, 3, 0, 1},
        {"qkv+index 9856x6144", QR + 2 * KR + IQR + IKR, H, 5, 0, 1},
        {"qkv+index 9856x6144", QR + 2 * KR + IQR + IKR, H, 5, 0, TM},
        {"shared gate+up 6144x6144", 2 * I, H, 1, 1, 1},
    };
    const int seg5[5] = {QR, KR, KR, IQR, IKR};
    const size_t maxw = (size_t)H * ID, maxy = (size_t)TM * (QR + 2 * KR + IQR + IKR);
    uint16_t *hw = (uint16_t *)malloc(2 * maxw);
    float *hx = (float *)malloc(4 * (size_t)TM * ID), *want = (float *)malloc(4 * maxy),
          *got = (float *)malloc(4 * maxy), *got2 = (float *)malloc(4 * maxy),
          *g1 = (float *)malloc(4 * maxy);
    void *dw = dev_rand(maxw, 1, 5151u, 0.05f);
    float *dx = (float *)dev_rand((size_t)TM * ID, 0, 5152u, 1.0f);
    float *dy = (float *)dev_rand(maxy, 0, 1u, 0.0f);
    int bad = 0;
    if (!hw || !hx || !want || !got || !got2 || !g1 || !dw || !dx || !dy)
        return -1;
    M3_HIP_CHECK(hipDeviceSynchronize());
    M3_HIP_CHECK(hipMemcpy(hw, dw, 2 * maxw, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(hx, dx, 4 * (size_t)TM * ID, hipMemcpyDeviceToHost));
    const float sw[3] = {1.702f, 7.0f, 1.0f};
    for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++) {
        const int rows = sh[k].rows, cols = sh[k].cols, T = sh[k].T;
        const int orows = sh[k].swiglu ? rows / 2 : rows;
        const m3g_mat W = {dw, M3G_BF16, rows, cols};
        /* golden in the output layout: segments back to back, each [T, rows_s] */
        m3g_seg seg[5];
        size_t off = 0;
        for (int s = 0, r0 = 0; s < sh[k].nseg; s++) {
            const int sr = sh[k].nseg > 1 ? seg5[s] : orows;
            seg[s].y = dy + off;
            seg[s].ld = seg[s].rows = sr;
            for (int t = 0; t < T; t++)
                for (int r = 0; r < sr; r++) {
                    const float *xt = hx + (size_t)t * cols;
                    float v;
                    if (sh[k].swiglu) {
                        const float g = h_round_bf16(h_dot8(hw + (size_t)r * cols, xt, cols));
                        const float u = h_round_bf16(h_dot8(hw + (size_t)(orows + r) * cols, xt, cols));
                        v = h_swiglu(g, u);
                    } else {
                        v = h_dot8(hw + (size_t)(r0 + r) * cols, xt, cols);
                    }
                    want[off + (size_t)t * sr + r] = h_round_bf16(v);
                }
            off += (size_t)T * sr;
            r0 += sr;
        }
        int ref1 = 0; /* g1 holds variant 1's (old split-K) output once it ran */
        for (int vi = 0; m3g_gemv_variant_name(vi); vi++) {
            const int v = vi < 2 ? 1 - vi : vi; /* variant 1 first: the bitwise reference */
            M3_HIP_CHECK(hipMemset(dy, 0xff, 4 * off)); /* NaN: nothing left from before */
            const hipError_t e = m3g_gemv_variant(v, dx, W, seg, sh[k].nseg,
                                                  sh[k].swiglu ? sw : NULL, T, st);
            if (e == hipErrorInvalidValue) {
                (void)hipGetLastError();
                continue; /* the variant does not apply to this shape */
            }
            M3_HIP_CHECK(e);
            M3_HIP_CHECK(hipStreamSynchronize(st));
            M3_HIP_CHECK(hipMemcpy(got, dy, 4 * off, hipMemcpyDeviceToHost));
            const int same1 = ref1 && !memcmp(got, g1, 4 * off);
            M3_HIP_CHECK(m3g_gemv_variant(v, dx, W, seg, sh[k].nseg, sh[k].swiglu ? sw : NULL, T, st));
            M3_HIP_CHECK(hipStreamSynchronize(st));
            M3_HIP_CHECK(hipMemcpy(got2, dy, 4 * off, hipMemcpyDeviceToHost));
            if (v == 1) {
                memcpy(g1, got, 4 * off);
                ref1 = 1;
            }
            char what[160];
            snprintf(what, sizeof what, "gemv %s T=%d ~ %s%s%s", sh[k].what, T,
                     m3g_gemv_variant_name(v),
                     memcmp(got, got2, 4 * off) ? " (REPEAT DIFFERS)" : "",
                     v == 1 ? "" : same1 ? " (bitwise = old split-K)" : " (differs from old split-K)");
            bad |= cmp_out(what, got, want, off, 0, 1, 0.01);
            bad |= memcmp(got, got2, 4 * off) != 0;
        }
    }
    (void)hipFree(dw), (void)hipFree(dx), (void)hipFree(dy);
    free(hw), free(hx), free(want), free(got), free(got2), free(g1);
    return bad ? -1 : 0;
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
                    plain launches, without PDL (7 = exactly the previous sequence) */
} layer_ctx;

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
                              IHD, nb, TOPK_B, 1, 0, x->ictr, x->iws, x->iws_n, x->ikr, 0, st));
    }
    LK(m3g_attention_sk(x->att, x->q, x->kc16, x->vc16, M3G_BF16, x->pages, BLK, pos0, 1, NH,
                        NKV, HD, x->sparse ? x->blk : NULL, x->sparse ? TOPK_B : 0, 1, x->sws,
                        x->sws_n, st));
    LK(m3g_linear(x->tmp, H, x->att, x->o, 1, 1, NULL, st));
    LK(m3g_residual_rmsnorm_ex(x->h, x->tmp, x->xn, x->post_norm, M3G_BF16, 1, H, eps, 1, rel,
                               st));
    if (x->moe) {
        const moe_ctx *m = x->experts;
        const int64_t es = (int64_t)I * H;
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
        LK(m3g_linear_swiglu(x->g, I, x->u, x->xn, x->sgu, 1, al, lim, be, 1, NULL, st));
        LK(m3g_linear(x->sh, H, x->g, x->sd, 1, 1, NULL, st));
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
    double bytes = 2.0 * (x->qkv.rows + x->o.rows) * (double)H;
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
    /* KV bytes read: 16 selected blocks, or the whole causal context */
    bytes += 2.0 * 2.0 * NKV * HD * (sparse ? (double)TOPK_B * BLK : (double)ctx_len);
    if (sparse)
        bytes += 2.0 * IHD * (double)ctx_len; /* the bf16 index-K cache */
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
        hipMalloc(&x->sws, x->sws_n > 0 ? x->sws_n : 16) != hipSuccess)
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
    return 0;
}

/* Device regions compared by the fusion checks: (pointer, bytes). */
typedef struct fz_reg {
    const void *p;
    size_t n;
    const char *what;
} fz_reg;

/* Copy the regions to one host buffer (sum of their bytes). */
static int fz_grab(const fz_reg *r, int nr, unsigned char *h, hipStream_t st)
{
    M3_HIP_CHECK(hipStreamSynchronize(st));
    for (int i = 0; i < nr; i++) {
        M3_HIP_CHECK(hipMemcpy(h, r[i].p, r[i].n, hipMemcpyDeviceToHost));
        h += r[i].n;
    }
    return 0;
}

/* Bitwise comparison of two grabs; prints the differing regions. */
static int fz_cmp(const char *what, const fz_reg *r, int nr, const unsigned char *a,
                  const unsigned char *b)
{
    int bad = 0;
    size_t off = 0, tot = 0;
    char diff[512] = "";
    for (int i = 0; i < nr; i++) {
        if (memcmp(a + off, b + off, r[i].n)) {
            bad = 1;
            if (strlen(diff) + strlen(r[i].what) + 3 < sizeof diff)
                strcat(strcat(diff, " "), r[i].what);
        }
        off += r[i].n;
        tot += r[i].n;
    }
    printf("check %s: %s (%d regions, %zu bytes)%s%s\n", what, bad ? "DIFFERS" : "bitwise equal",
           nr, tot, bad ? ": differs in" : "", diff);
    return bad;
}

/* The fused decode layer (m3-gpu's launches) against the previous launch
 * sequence from the same state: every output of the layer (residual, norms,
 * projections after QK-norm / RoPE, the new K / V / index-K cache rows and
 * range words, block selections, attention, router, expert activations and
 * outputs) must be bitwise equal. Leaves the layer's state advanced by one
 * step (as a timed launch does). */
static int check_layer_fused(const layer_ctx *x0, const char *name, hipStream_t st)
{
    layer_ctx xo = *x0, xn = *x0;
    xo.old_seq = 7, xn.old_seq = 0;
    const int64_t pos0 = x0->ctx_len - 1; /* identity pages: slot = position */
    fz_reg r[20];
    int nr = 0;
#define FZ(ptr, bytes, w) (r[nr].p = (ptr), r[nr].n = (bytes), r[nr++].what = (w))
    FZ(x0->h, 4 * H, "h");
    FZ(x0->tmp, 4 * H, "tmp");
    FZ(x0->xn, 4 * H, "xn");
    FZ(x0->q, 4 * ((size_t)NH * HD + 2 * NKV * HD + (x0->sparse ? G * IHD + IHD : 0)),
       "q/k/v/iq/ik");
    FZ(x0->att, 4 * NH * HD, "att");
    FZ(x0->kc16 + pos0 * NKV * HD, 2 * NKV * HD, "kc16 row");
    FZ(x0->vc16 + pos0 * NKV * HD, 2 * NKV * HD, "vc16 row");
    if (x0->sparse) {
        FZ(x0->ikc + pos0 * IHD, 4 * IHD, "ikc row");
        FZ(x0->ik16 + pos0 * IHD, 2 * IHD, "ik16 row");
        FZ(x0->ikr, 8, "ik range");
        FZ(x0->blk, 4 * G * TOPK_B, "blocks");
    }
    if (x0->moe) {
        FZ(x0->ridx, 4 * TOPK_E, "router idx");
        FZ(x0->rw, 4 * TOPK_E, "router w");
        FZ(x0->g, 4 * (size_t)TOPK_E * I, "expert act");
        FZ(x0->ye, 4 * (size_t)TOPK_E * H, "expert out");
        FZ(x0->sh, 4 * H, "shared out");
    } else {
        FZ(x0->g, 4 * (size_t)ID, "mlp act");
    }
#undef FZ
    size_t tot = 0;
    for (int i = 0; i < nr; i++)
        tot += r[i].n;
    unsigned char *a = (unsigned char *)malloc(tot), *b = (unsigned char *)malloc(tot);
    float *hs = (float *)malloc(8 * H + 8);
    if (!a || !b || !hs)
        return 1;
    /* the state a step reads and changes: residual h, pending tmp, range words */
    M3_HIP_CHECK(hipDeviceSynchronize());
    M3_HIP_CHECK(hipMemcpy(hs, x0->h, 4 * H, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(hs + H, x0->tmp, 4 * H, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(hipMemcpy(hs + 2 * H, x0->ikr, 8, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(layer_launch(&xo, 0, st));
    if (fz_grab(r, nr, a, st))
        return 1;
    M3_HIP_CHECK(hipMemcpy(x0->h, hs, 4 * H, hipMemcpyHostToDevice));
    M3_HIP_CHECK(hipMemcpy(x0->tmp, hs + H, 4 * H, hipMemcpyHostToDevice));
    M3_HIP_CHECK(hipMemcpy(x0->ikr, hs + 2 * H, 8, hipMemcpyHostToDevice));
    M3_HIP_CHECK(layer_launch(&xn, 0, st));
    if (fz_grab(r, nr, b, st))
        return 1;
    char what[160];
    snprintf(what, sizeof what, "%s: fused launches vs previous sequence", name);
    const int bad = fz_cmp(what, r, nr, a, b);
    free(a), free(b), free(hs);
    return bad;
}

/* m3g_attn_prologue against the separate launchers at edge shapes: T > 1,
 * permuted pages, fp32 and bf16 mode, head dims not multiples of 32 and
 * different per job, fp32 / bf16 norm weights, all job kinds (QK-norm +
 * RoPE in place, paged fp32 / bf16 cache rows, bf16 conversion, fp32 copy,
 * bf16 copy with range words). */
static int check_prologue_edges(hipStream_t st)
{
    static const struct {
        int T, nh, hd, G, ihd, nkv, rd, B, pos0, mode, perm;
    } cf[] = {{5, 6, 64, 2, 32, 2, 32, 4, 6, 0, 1},     {3, 5, 80, 1, 80, 1, 64, 8, 13, 1, 1},
              {1, 64, 128, 4, 128, 4, 64, 128, 300, 1, 0}, {7, 3, 20, 3, 24, 1, 20, 16, 0, 1, 1},
              {2, 8, 128, 4, 128, 4, 64, 128, 255, 0, 1}};
    int bad = 0;
    for (size_t c = 0; c < sizeof cf / sizeof cf[0]; c++) {
        const int T = cf[c].T, nh = cf[c].nh, hd = cf[c].hd, G = cf[c].G, ihd = cf[c].ihd;
        const int nkv = cf[c].nkv, rd = cf[c].rd, B = cf[c].B, mode = cf[c].mode;
        const int64_t pos0 = cf[c].pos0;
        const int npg = (int)((pos0 + T - 1) / B + 1) + 2; /* two spare pages */
        const size_t slots = (size_t)npg * B, kvw = (size_t)nkv * hd;
        const uint32_t sd = 0x5100u + 16u * (uint32_t)c;
        float *q = (float *)dev_rand((size_t)T * nh * hd, 0, sd + 1, 3.0f);
        float *iq = (float *)dev_rand((size_t)T * G * ihd, 0, sd + 2, 3.0f);
        float *v = (float *)dev_rand((size_t)T * kvw, 0, sd + 3, 3.0f);
        float *k = (float *)dev_rand((size_t)T * kvw, 0, sd + 4, 3.0f);
        float *ik = (float *)dev_rand((size_t)T * ihd, 0, sd + 5, 3.0f);
        void *qn = dev_rand((size_t)hd, 1, sd + 6, 0.5f), *kn = dev_rand((size_t)hd, 1, sd + 7, 0.5f);
        void *iqn = dev_rand((size_t)ihd, 0, sd + 8, 0.5f), *ikn = dev_rand((size_t)ihd, 1, sd + 9, 0.5f);
        float *ct = (float *)dev_rand((size_t)T * (rd / 2), 0, sd + 10, 1.0f);
        float *sn = (float *)dev_rand((size_t)T * (rd / 2), 0, sd + 11, 1.0f);
        /* outputs [2]: 0 = old launchers, 1 = m3g_attn_prologue */
        float *qo[2], *iqo[2], *vc32[2], *kc32[2], *ikc[2];
        uint16_t *vc16[2], *kc16[2], *ik16[2];
        unsigned *rng[2];
        int32_t *pt = NULL, hp[64];
        for (int p = 0; p < npg; p++)
            hp[p] = cf[c].perm ? npg - 1 - p : p;
        if (!q || !iq || !v || !k || !ik || !qn || !kn || !iqn || !ikn || !ct || !sn || npg > 64 ||
            hipMalloc((void **)&pt, 4 * (size_t)npg) != hipSuccess ||
            hipMemcpy(pt, hp, 4 * (size_t)npg, hipMemcpyHostToDevice) != hipSuccess)
            return 1;
        for (int s = 0; s < 2; s++) {
            const size_t nq = (size_t)T * nh * hd * 4, niq = (size_t)T * G * ihd * 4;
            if (hipMalloc((void **)&qo[s], nq) != hipSuccess ||
                hipMalloc((void **)&iqo[s], niq) != hipSuccess ||
                hipMalloc((void **)&vc32[s], slots * kvw * 4) != hipSuccess ||
                hipMalloc((void **)&kc32[s], slots * kvw * 4) != hipSuccess ||
                hipMalloc((void **)&ikc[s], slots * ihd * 4) != hipSuccess ||
                hipMalloc((void **)&vc16[s], slots * kvw * 2) != hipSuccess ||
                hipMalloc((void **)&kc16[s], slots * kvw * 2) != hipSuccess ||
                hipMalloc((void **)&ik16[s], slots * ihd * 2) != hipSuccess ||
                hipMalloc((void **)&rng[s], 8) != hipSuccess)
                return 1;
            M3_HIP_CHECK(hipMemcpy(qo[s], q, nq, hipMemcpyDeviceToDevice));
            M3_HIP_CHECK(hipMemcpy(iqo[s], iq, niq, hipMemcpyDeviceToDevice));
            M3_HIP_CHECK(hipMemset(vc32[s], 0, slots * kvw * 4));
            M3_HIP_CHECK(hipMemset(kc32[s], 0, slots * kvw * 4));
            M3_HIP_CHECK(hipMemset(ikc[s], 0, slots * ihd * 4));
            M3_HIP_CHECK(hipMemset(vc16[s], 0, slots * kvw * 2));
            M3_HIP_CHECK(hipMemset(kc16[s], 0, slots * kvw * 2));
            M3_HIP_CHECK(hipMemset(ik16[s], 0, slots * ihd * 2));
            M3_HIP_CHECK(m3g_ik_range_reset(rng[s], st));
        }
        const float eps = 1e-6f;
        /* old: the separate launches m3-gpu made before */
        M3_HIP_CHECK(m3g_headnorm_rope(qo[0], qo[0], NULL, B, pos0, qn, M3G_BF16, T, nh, hd, rd,
                                       ct, sn, eps, mode, st));
        M3_HIP_CHECK(m3g_headnorm_rope(iqo[0], iqo[0], NULL, B, pos0, iqn, M3G_F32, T, G, ihd, rd,
                                       ct, sn, eps, mode, st));
        M3_HIP_CHECK(m3g_to_bf16(vc16[0] + pos0 * kvw, v, (int64_t)T * kvw, st));
        M3_HIP_CHECK(hipMemcpyAsync(vc32[0] + pos0 * kvw, v, (size_t)T * kvw * 4,
                                    hipMemcpyDeviceToDevice, st));
        M3_HIP_CHECK(m3g_headnorm_rope_bf16(k, kc16[0], pt, B, pos0, kn, M3G_BF16, T, nkv, hd, rd,
                                            ct, sn, eps, mode, st));
        M3_HIP_CHECK(m3g_headnorm_rope(k, kc32[0], pt, B, pos0, kn, M3G_BF16, T, nkv, hd, rd, ct,
                                       sn, eps, mode, st));
        M3_HIP_CHECK(m3g_headnorm_rope(ik, ikc[0], pt, B, pos0, ikn, M3G_BF16, T, 1, ihd, rd, ct,
                                       sn, eps, mode, st));
        for (int t = 0; t < T; t++) { /* the bf16 copy of row t (contiguous) from its slot */
            const int64_t p = pos0 + t, slot = (int64_t)hp[p / B] * B + p % B;
            M3_HIP_CHECK(m3g_to_bf16_ranged(ik16[0] + p * ihd, ikc[0] + slot * ihd, ihd, rng[0],
                                            st));
        }
        /* new: two launches of m3g_attn_prologue (6 + 1 jobs) */
        m3g_prologue pr;
        memset(&pr, 0, sizeof pr);
        pr.T = T, pr.B = B, pr.rd = rd, pr.mode = mode, pr.pos0 = pos0, pr.page_table = pt;
        pr.cos_t = ct, pr.sin_t = sn, pr.eps = eps;
        m3g_pro_job *j = pr.job;
        j[0].src = j[0].dst = qo[1], j[0].w = qn, j[0].w_dtype = M3G_BF16, j[0].nheads = nh;
        j[0].hd = hd;
        j[1].src = j[1].dst = iqo[1], j[1].w = iqn, j[1].w_dtype = M3G_F32, j[1].nheads = G;
        j[1].hd = ihd;
        j[2].src = v, j[2].dst16 = vc16[1] + pos0 * kvw, j[2].nheads = nkv, j[2].hd = hd;
        j[3].src = v, j[3].dst = vc32[1] + pos0 * kvw, j[3].nheads = nkv, j[3].hd = hd;
        j[4].src = k, j[4].dst16 = kc16[1], j[4].paged = 2, j[4].w = kn, j[4].w_dtype = M3G_BF16;
        j[4].nheads = nkv, j[4].hd = hd;
        j[5].src = ik, j[5].dst = ikc[1], j[5].paged = 1, j[5].dst16 = ik16[1] + pos0 * ihd;
        j[5].rng = rng[1], j[5].w = ikn, j[5].w_dtype = M3G_BF16, j[5].nheads = 1, j[5].hd = ihd;
        pr.njobs = 6;
        M3_HIP_CHECK(m3g_attn_prologue(&pr, st));
        memset(pr.job, 0, sizeof pr.job);
        j[0].src = k, j[0].dst = kc32[1], j[0].paged = 1, j[0].w = kn, j[0].w_dtype = M3G_BF16;
        j[0].nheads = nkv, j[0].hd = hd;
        pr.njobs = 1;
        M3_HIP_CHECK(m3g_attn_prologue(&pr, st));
        fz_reg r[2][9];
        for (int s = 0; s < 2; s++) {
            fz_reg *x = r[s];
            x[0].p = qo[s], x[0].n = (size_t)T * nh * hd * 4, x[0].what = "q";
            x[1].p = iqo[s], x[1].n = (size_t)T * G * ihd * 4, x[1].what = "iq";
            x[2].p = vc16[s], x[2].n = slots * kvw * 2, x[2].what = "v16";
            x[3].p = vc32[s], x[3].n = slots * kvw * 4, x[3].what = "v32";
            x[4].p = kc16[s], x[4].n = slots * kvw * 2, x[4].what = "k16";
            x[5].p = kc32[s], x[5].n = slots * kvw * 4, x[5].what = "k32";
            x[6].p = ikc[s], x[6].n = slots * ihd * 4, x[6].what = "ikc";
            x[7].p = ik16[s], x[7].n = slots * ihd * 2, x[7].what = "ik16";
            x[8].p = rng[s], x[8].n = 8, x[8].what = "range";
        }
        size_t tot = 0;
        for (int i = 0; i < 9; i++)
            tot += r[0][i].n;
        unsigned char *a = (unsigned char *)malloc(tot), *b = (unsigned char *)malloc(tot);
        if (!a || !b || fz_grab(r[0], 9, a, st) || fz_grab(r[1], 9, b, st))
            return 1;
        char what[200];
        snprintf(what, sizeof what,
                 "attn prologue edge %zu (T %d nh %d hd %d G %d ihd %d nkv %d rd %d B %d pos0 %d "
                 "%s%s)",
                 c, T, nh, hd, G, ihd, nkv, rd, B, (int)pos0, mode ? "bf16" : "fp32",
                 cf[c].perm ? ", permuted pages" : "");
        bad |= fz_cmp(what, r[0], 9, a, b);
        free(a), free(b);
        void *fr[] = {q, iq, v, k, ik, qn, kn, iqn, ikn, ct, sn, pt};
        for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
            (void)hipFree(fr[i]);
        for (int s = 0; s < 2; s++) {
            void *f2[] = {qo[s], iqo[s], vc32[s], kc32[s], ikc[s], vc16[s], kc16[s], ik16[s], rng[s]};
            for (size_t i = 0; i < sizeof f2 / sizeof f2[0]; i++)
                (void)hipFree(f2[i]);
        }
    }
    return bad;
}

/* m3g_gemv_grouped_swiglu against m3g_gemv_grouped (gate, up) + m3g_swiglu
 * at edge shapes: T > 1, rows not a multiple of 8, cols not a multiple of 8
 * (the scalar lane path), fp32 weights, fp32 mode, one input per slot. */
static int check_grouped_swiglu_edges(hipStream_t st)
{
    static const struct {
        int T, k, E, rows, cols, bf, mode, perslot;
    } cf[] = {{3, 2, 5, 20, 72, 1, 1, 0}, {2, 3, 4, 13, 70, 1, 1, 1}, {1, 4, 6, 24, 64, 0, 0, 0},
              {2, 2, 3, 9, 33, 0, 1, 1},  {1, 4, 8, 200, 512, 1, 0, 1}};
    int bad = 0;
    for (size_t c = 0; c < sizeof cf / sizeof cf[0]; c++) {
        const int T = cf[c].T, k = cf[c].k, E = cf[c].E, rows = cf[c].rows, cols = cf[c].cols;
        const int dt = cf[c].bf ? M3G_BF16 : M3G_F32, mode = cf[c].mode;
        const int64_t es = (int64_t)rows * cols, xs = cf[c].perslot ? (int64_t)k * cols : cols;
        const int64_t xk = cf[c].perslot ? cols : 0;
        const uint32_t sd = 0x5300u + 16u * (uint32_t)c;
        void *wg = dev_rand((size_t)E * es, cf[c].bf, sd + 1, 2.0f);
        void *wu = dev_rand((size_t)E * es, cf[c].bf, sd + 2, 2.0f);
        float *X = (float *)dev_rand((size_t)T * xs, 0, sd + 3, 1.0f);
        const size_t ny = (size_t)T * k * rows;
        float *g = NULL, *u = NULL, *act = NULL;
        int32_t *idx = NULL, hi[32];
        for (int t = 0; t < T; t++)
            for (int s = 0; s < k; s++)
                hi[t * k + s] = (s * 2 + t) % E; /* ascending for these shapes or not: any */
        if (!wg || !wu || !X || hipMalloc((void **)&g, 4 * ny) != hipSuccess ||
            hipMalloc((void **)&u, 4 * ny) != hipSuccess ||
            hipMalloc((void **)&act, 4 * ny) != hipSuccess ||
            hipMalloc((void **)&idx, 4 * (size_t)T * k) != hipSuccess ||
            hipMemcpy(idx, hi, 4 * (size_t)T * k, hipMemcpyHostToDevice) != hipSuccess)
            return 1;
        M3_HIP_CHECK(hipMemset(act, 0xff, 4 * ny));
        M3_HIP_CHECK(m3g_gemv_grouped(g, X, xs, xk, wg, es, dt, rows, cols, idx, T, k, mode, st));
        M3_HIP_CHECK(m3g_gemv_grouped(u, X, xs, xk, wu, es, dt, rows, cols, idx, T, k, mode, st));
        M3_HIP_CHECK(m3g_swiglu(g, g, u, (int64_t)ny, 1.702f, 7.0f, 1.0f, mode, st));
        M3_HIP_CHECK(m3g_gemv_grouped_swiglu(act, X, xs, xk, wg, wu, es, dt, rows, cols, idx, T, k,
                                             1.702f, 7.0f, 1.0f, mode, st));
        fz_reg ra, rb;
        ra.p = g, rb.p = act, ra.n = rb.n = 4 * ny, ra.what = rb.what = "act";
        unsigned char *a = (unsigned char *)malloc(4 * ny), *b = (unsigned char *)malloc(4 * ny);
        if (!a || !b || fz_grab(&ra, 1, a, st) || fz_grab(&rb, 1, b, st))
            return 1;
        int clamp = 0; /* how many gate values hit the limit (the clamp is exercised) */
        float *ug = (float *)malloc(4 * ny);
        if (ug) {
            M3_HIP_CHECK(m3g_gemv_grouped(u, X, xs, xk, wg, es, dt, rows, cols, idx, T, k, mode,
                                          st));
            M3_HIP_CHECK(hipStreamSynchronize(st));
            M3_HIP_CHECK(hipMemcpy(ug, u, 4 * ny, hipMemcpyDeviceToHost));
            for (size_t i = 0; i < ny; i++)
                clamp += ug[i] > 7.0f;
            free(ug);
        }
        char what[200];
        snprintf(what, sizeof what,
                 "grouped gate+up+swiglu edge %zu (T %d k %d rows %d cols %d %s weights, %s, "
                 "%s input; %d of %zu gates clamped)",
                 c, T, k, rows, cols, cf[c].bf ? "bf16" : "fp32", mode ? "bf16" : "fp32",
                 cf[c].perslot ? "per-slot" : "shared", clamp, ny);
        bad |= fz_cmp(what, &ra, 1, a, b);
        free(a), free(b);
        void *fr[] = {wg, wu, X, g, u, act, idx};
        for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++)
            (void)hipFree(fr[i]);
    }
    return bad;
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
 * replays keep transforming it; timing only (check_vis_layer checks). */
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

/* The bf16 layer with vendor-GEMM products against the same layer with the
 * exact mode-0 linears, from the same input (attention: the default kernel
 * in both; check_vis_attention compares it with the exact one). Both have
 * ref's rounding points and differ only in the linears' summation orders. */
static int check_vis_layer(const vl_ctx *x, hipStream_t st)
{
    if (!x->blas) {
        printf("vision layer check: no vendor BLAS in this build; skipped\n");
        return 0;
    }
    const size_t n = (size_t)x->T * VHV;
    float *h0 = NULL, *h1 = NULL;
    float *a = (float *)malloc(n * 4), *b = (float *)malloc(n * 4);
    if (!a || !b || hipMalloc(&h0, n * 4) != hipSuccess || hipMalloc(&h1, n * 4) != hipSuccess)
        return 1;
    M3_HIP_CHECK(hipMemcpy(h0, x->h[0], n * 4, hipMemcpyDeviceToDevice));
    M3_HIP_CHECK(hipMemcpy(h1, x->h[0], n * 4, hipMemcpyDeviceToDevice));
    M3_HIP_CHECK(m3g_vision_layer(h0, &x->w, &x->s, x->T, VNH, VHD, VRD, x->cos_t, x->sin_t,
                                  &x->seg_start, &x->seg_len, 1, 1e-5f, 1, x->blas, st));
    M3_HIP_CHECK(hipStreamSynchronize(st));
    M3_HIP_CHECK(hipMemcpy(a, h0, n * 4, hipMemcpyDeviceToHost));
    M3_HIP_CHECK(m3g_vision_layer(h1, &x->w, &x->s, x->T, VNH, VHD, VRD, x->cos_t, x->sin_t,
                                  &x->seg_start, &x->seg_len, 1, 1e-5f, 1, NULL, st));
    M3_HIP_CHECK(hipStreamSynchronize(st));
    M3_HIP_CHECK(hipMemcpy(b, h1, n * 4, hipMemcpyDeviceToHost));
    double e2 = 0, r2 = 0;
    size_t nd = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        e2 += d * d;
        r2 += (double)b[i] * b[i];
        nd += a[i] != b[i];
        finite &= a[i] == a[i] && fabs(a[i]) < 1e30;
    }
    const double nmse = r2 > 0 ? e2 / r2 : e2;
    const int ok = finite && nmse <= 1e-4;
    printf("vision layer %d patches: vendor-GEMM linears vs exact linears nmse %.2e, %zu of %zu "
           "outputs differ: %s\n",
           x->T, nmse, nd, n, ok ? "ok" : "FAIL");
    free(a), free(b);
    (void)hipFree(h0), (void)hipFree(h1);
    return !ok;
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

/* The tensor-core vision attention against the exact kernel (serial fp32
 * sums, ref's order; bitwise equal to ref under the emulation) on the same
 * inputs, and its bf16-copies forms (variants 3, 4) against it word for
 * word: shapes from one patch to a full M3 image segment; hd not a
 * multiple of 16 exercises the zero-padded dims, hd 96 the copies kernel's
 * shared memory above 48 KB. Both outputs are bf16 values; the tensor-core
 * and exact ones may differ where a sum order flips a rounding. */
static int check_vis_attention(hipStream_t st)
{
    static const int shapes[][3] = {{1, 1, 80},    {7, 2, 40},   {64, 1, 80},  {65, 3, 80},
                                    {200, 2, 64},  {333, 1, 128}, {97, 4, 24}, {1000, 16, 80},
                                    {5184, 2, 80}, {150, 2, 96},  {129, 3, 112}};
    int bad = 0;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int len = shapes[c][0], nh = shapes[c][1], hd = shapes[c][2];
        const size_t n = (size_t)len * nh * hd;
        float *q = (float *)dev_rand(n, 0, 0x61u + (uint32_t)c, 2.0f);
        float *k = (float *)dev_rand(n, 0, 0x71u + (uint32_t)c, 2.0f);
        float *v = (float *)dev_rand(n, 0, 0x81u + (uint32_t)c, 1.0f);
        float *o1 = NULL, *o2 = NULL;
        if (!q || !k || !v || hipMalloc(&o1, n * 4) != hipSuccess ||
            hipMalloc(&o2, n * 4) != hipSuccess)
            return 1;
        float *h1 = (float *)malloc(n * 4), *h2 = (float *)malloc(n * 4);
        if (!h1 || !h2)
            return 1;
        M3_HIP_CHECK(m3g_vision_attention_variant(1, o1, q, k, v, len, nh, hd, 1, NULL, st));
        hipError_t e = m3g_vision_attention_variant(2, o2, q, k, v, len, nh, hd, 1, NULL, st);
        if (e == hipErrorInvalidValue) {
            printf("vision attention check: no tensor-core kernel in this build; skipped\n");
            return 0;
        }
        M3_HIP_CHECK(e);
        M3_HIP_CHECK(hipStreamSynchronize(st));
        M3_HIP_CHECK(hipMemcpy(h1, o1, n * 4, hipMemcpyDeviceToHost));
        M3_HIP_CHECK(hipMemcpy(h2, o2, n * 4, hipMemcpyDeviceToHost));
        /* variants 3 and 4 (bf16 copies, cp.async; 4 and 8 warps per CTA) must
         * equal variant 2 word for word */
        uint16_t *ws = NULL;
        const size_t wse = m3g_vision_attention_ws_elems(len, nh, hd, 1);
        float *h3 = (float *)malloc(n * 4);
        if (!h3 || hipMalloc(&ws, wse * sizeof(uint16_t)) != hipSuccess)
            return 1;
        for (int var = 3; var <= 4; var++) {
            M3_HIP_CHECK(hipMemset(o1, 0xff, n * 4));
            M3_HIP_CHECK(m3g_vision_attention_variant(var, o1, q, k, v, len, nh, hd, 1, ws, st));
            M3_HIP_CHECK(hipStreamSynchronize(st));
            M3_HIP_CHECK(hipMemcpy(h3, o1, n * 4, hipMemcpyDeviceToHost));
            size_t nbits = 0;
            for (size_t i = 0; i < n; i++)
                nbits += memcmp(&h3[i], &h2[i], 4) != 0;
            printf("vision attention len %d, %d heads of %d: variant %d (%s) vs tile staging: "
                   "%zu of %zu words differ: %s\n",
                   len, nh, hd, var, m3g_vision_attention_variant_name(var), nbits, n,
                   nbits ? "FAIL" : "ok (bitwise)");
            bad |= nbits != 0;
        }
        free(h3);
        (void)hipFree(ws);
        double e2 = 0, r2 = 0, mx = 0, mref = 0;
        size_t ndiff = 0;
        for (size_t i = 0; i < n; i++) {
            const double d = (double)h2[i] - (double)h1[i];
            e2 += d * d;
            r2 += (double)h1[i] * h1[i];
            mx = fabs(d) > mx ? fabs(d) : mx;
            mref = fabs(h1[i]) > mref ? fabs(h1[i]) : mref;
            ndiff += h1[i] != h2[i];
        }
        const double nmse = r2 > 0 ? e2 / r2 : e2;
        const int ok = nmse <= 1e-5 && mx <= mref / 32.0 && h2[0] == h2[0];
        printf("vision attention len %d, %d heads of %d: tensor cores vs exact nmse %.2e, "
               "max|diff| %.3g (max|ref| %.3g), %zu of %zu outputs differ: %s\n",
               len, nh, hd, nmse, mx, mref, ndiff, n, ok ? "ok" : "FAIL");
        bad |= !ok;
        free(h1);
        free(h2);
        (void)hipFree(q), (void)hipFree(k), (void)hipFree(v), (void)hipFree(o1), (void)hipFree(o2);
    }
    return bad;
}

/* The speed targets (docs/performance.md), judged on this run's medians: the ratio to the
 * hardware limit of each named case (HBM: bytes; PEAK: bf16 FLOPs) or its
 * time. The "10x faster than dense causal SDPA" part of the MSA prefill
 * target needs torch's figure (tools/bench_torch.py, same machine); the
 * table prints the time it must beat against. */
enum { T_HBM, T_PEAK, T_US };
static void print_targets(const bench_case *cases, const double *med, int n)
{
    static const struct {
        const char *name;
        int kind;
        double goal;
    } tg[] = {
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
        {"msa decode attention 16x128 keys", T_US, 10.0},
        {"indexer decode 128K", T_HBM, 0.70},
        {"indexer decode 1M", T_HBM, 0.70},
        {"msa prefill 128K x2048 rows indep", T_PEAK, 0.40},
        {"msa prefill 128K x2048 rows pool24", T_PEAK, 0.40},
        {"msa prefill 128K x2048 rows shared", T_PEAK, 0.40},
        {"msa prefill 128K full pool24", T_PEAK, 0.40},
        {"msa prefill 128K full indep", T_PEAK, 0.40},
        {"gemm M4096 q_proj 8192x6144", T_PEAK, 0.60},
        {"gemm M4096 dense gate 12288x6144", T_PEAK, 0.60},
    };
    int met = 0, judged = 0;
    printf("\nissue 8 speed targets (this run):\n| case | target | measured | verdict |\n"
           "|---|---|---|---|\n");
    for (size_t t = 0; t < sizeof tg / sizeof tg[0]; t++) {
        int i = 0;
        while (i < n && strcmp(cases[i].name, tg[t].name) != 0)
            i++;
        if (i == n || med[i] <= 0.0)
            continue; /* not set up or not run (--case) */
        double got;
        char want[32], have[48];
        if (tg[t].kind == T_US) {
            got = med[i];
            snprintf(want, sizeof want, "<= %.0f us", tg[t].goal);
            snprintf(have, sizeof have, "%.2f us", got);
        } else {
            const double per_s = tg[t].kind == T_HBM ? cases[i].bytes : cases[i].flops;
            const double lim = tg[t].kind == T_HBM ? HBM_BYTES_PER_S : BF16_FLOP_PER_S;
            got = per_s / (med[i] * 1e-6) / lim;
            snprintf(want, sizeof want, ">= %.0f%% of %s", 100.0 * tg[t].goal,
                     tg[t].kind == T_HBM ? "HBM" : "bf16 peak");
            snprintf(have, sizeof have, "%.1f%% (%.2f us)", 100.0 * got, med[i]);
        }
        const int ok = tg[t].kind == T_US ? got <= tg[t].goal : got >= tg[t].goal;
        met += ok;
        judged++;
        printf("| %s | %s | %s | %s |\n", tg[t].name, want, have, ok ? "met" : "NOT MET");
        if (!strcmp(tg[t].name, "msa prefill 128K full pool24") ||
            !strcmp(tg[t].name, "msa prefill 128K full indep"))
            printf("| %s vs dense causal SDPA | >= 10x faster | SDPA must take >= %.0f us "
                   "(tools/bench_torch.py \"sdpa causal full 131072\") | see torch |\n",
                   tg[t].name, 10.0 * med[i]);
    }
    printf("targets met: %d of %d judged in this run\n", met, judged);
}

/* Whether --case `only` selects the case `name`: the cases whose names start
 * with it; "msa prefill s6" selects the pooled MSA prefill cases (the 2,048-row
 * slab and the whole prompt) through every variant except the one-pass one. */
static int case_on(const char *name, const char *only)
{
    if (!only)
        return 1;
    if (!strcmp(only, "msa prefill s6"))
        return (!strncmp(name, "msa prefill x2048 pool24", 24) ||
                !strncmp(name, "msa prefill 128K full pool24", 28)) &&
               !strstr(name, "1-pass");
    return !strncmp(name, only, strlen(only));
}

int main(int argc, char **argv)
{
    int reps = 20;
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--case"))
            only = argv[i + 1];
    }
    if (reps < 20) {
        fprintf(stderr, "bench-gpu: --reps must be >= 20 (the protocol's minimum)\n");
        return 2;
    }
    hipDeviceProp_t prop;
    hipStream_t st;
    M3_HIP_CHECK(hipGetDeviceProperties(&prop, 0));
    M3_HIP_CHECK(hipStreamCreate(&st));
    const int l2 = prop.l2CacheSize;
    printf("device: %s, %d SMs/CUs, L2 %d MiB, build %s\n", prop.name, prop.multiProcessorCount,
           l2 >> 20, M3_GPU_VENDOR);
    m3g_blas *blas = m3g_blas_new(st, (size_t)8192 * 12288);
    printf("GEMM backend: %s\n", blas ? "vendor BLAS" : "hand-written fallback");
    m3g_blas *blas_nolt = m3g_blas_new(st, (size_t)8192 * 12288);
    if (blas_nolt && !m3g_blas_use_lt(blas_nolt, 0) && m3g_blas_use_lt(blas, 1))
        printf("GEMM: cuBLASLt (heuristic algorithm, 32 MiB workspace); GemmEx cases for comparison\n");
    else {
        m3g_blas_free(blas_nolt);
        blas_nolt = NULL;
    }
    printf("| case | median us | min us | max us | cv | GB/s | of 4.8 TB/s | TFLOP/s | of 989 | rot |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");

    bench_case cases[BENCH_MAX_CASES];
    double med[BENCH_MAX_CASES]; /* median us of each case run; 0: not run */
    memset(med, 0, sizeof med);
    int n = 0, bad = 0;
    /* decode GEMVs (bf16 weights, bf16 mode, T = 1) */
    bad |= make_linear(next_case(cases, &n), "gemv q_proj 8192x6144", NH * HD, H, 1, l2, blas);
    bad |= make_linear(next_case(cases, &n), "gemv k_proj 512x6144", NKV * HD, H, 1, l2, blas);
    bad |= make_linear(next_case(cases, &n), "gemv o_proj 6144x8192", H, NH * HD, 1, l2, blas);
    bad |= make_linear(next_case(cases, &n), "gemv dense gate 12288x6144", ID, H, 1, l2, blas);
    bad |= make_linear(next_case(cases, &n), "gemv dense down 6144x12288", H, ID, 1, l2, blas);
    bad |= make_linear(next_case(cases, &n), "gemv shared gate 3072x6144", I, H, 1, l2, blas);
    bad |= make_linear(next_case(cases, &n), "gemv lm_head 200064x6144", V, H, 1, l2, blas);
    { /* fused decode GEMVs (one pass over the concatenated weight) */
        const int qkv[5] = {NH * HD, NKV * HD, NKV * HD, G * IHD, IHD}, gu[2] = {I, I};
        bad |= make_fused(next_case(cases, &n), "gemv qkv 9216x6144", qkv, 3, 0, H, 1, l2);
        bad |= make_fused(next_case(cases, &n), "gemv qkv+index 9856x6144", qkv, 5, 0, H, 1, l2);
        bad |= make_fused(next_case(cases, &n), "gemv shared gate+up 6144x6144", gu, 2, 1, H, 1, l2);
    }
    if (!bad && (!only || !strncmp(only, "gemv", strlen(only) < 4 ? strlen(only) : 4))) {
        /* the same GEMVs through the previous kernel (every configuration
         * when the run is limited to the GEMVs) */
        M3_HIP_CHECK(hipDeviceSynchronize());
        n = add_gemv_variants(cases, 0, n, BENCH_GEMV_CASES, only != NULL, st);
    }
    bad |= make_moe(next_case(cases, &n));
    if (!bad) {
        const bench_case *routed = &cases[n - 1];
        bad |= make_moe_shared(next_case(cases, &n), routed);
    }
    bad |= make_msa_decode(next_case(cases, &n), "msa decode attention 16x128 keys", 131072, l2, 0, NULL);
    if (!bad) { /* same data: fp32 cache, and the previous 3-launch split path */
        const int ia = n - 1;
        bad |= make_msa_decode(next_case(cases, &n), "msa decode attention bf16 2-launch", 131072, l2, 3,
                               &cases[ia]);
        bad |= make_msa_decode(next_case(cases, &n), "msa decode attention fp32 cache", 131072, l2, 1,
                               &cases[ia]);
        bad |= make_msa_decode(next_case(cases, &n), "msa decode attention old split fp32", 131072, l2, 2,
                               &cases[ia]);
        bad |= make_msa_decode(next_case(cases, &n), "msa decode attention old cluster", 131072, l2, 4,
                               &cases[ia]);
        bad |= make_msa_decode(next_case(cases, &n), "msa decode attention tc PDL early", 131072, l2, 5,
                               &cases[ia]);
        bad |= make_msa_decode(next_case(cases, &n), "msa decode attention tc no PDL", 131072, l2, 6,
                               &cases[ia]);
        bad |= make_msa_decode(next_case(cases, &n), "msa decode attention tc 1 block/SM", 131072, l2, 7,
                               &cases[ia]);
    }
    { /* dense decode attention (layers 0-2): default path and the alternatives */
        static const struct { const char *name; int ctx, variant; } dv[] = {
            {"dense decode attention 128K", 131072, 0},
            {"dense decode attention 128K 2-launch", 131072, 32},
            {"dense decode attention 128K 8-warp 4-group", 131072, 64 | 512},
            {"dense decode attention 128K 4-warp 4-group", 131072, 64 | 1024},
            {"dense decode attention 128K no L2 hint", 131072, 64 | 128},
            {"dense decode attention 128K no PDL", 131072, 64 | 256},
            {"dense decode attention 32K", 32768, 0},
            {"dense decode attention 32K 2-launch", 32768, 32},
            {"dense decode attention 32K 8-warp 4-group", 32768, 64 | 512},
            {"dense decode attention 32K 4-warp 4-group", 32768, 64 | 1024},
            {"dense decode attention 8K", 8192, 0},
            {"dense decode attention 8K 2-launch", 8192, 32},
            {"dense decode attention 2K", 2048, 0},
            {"dense decode attention 2K 2-launch", 2048, 32},
            {"dense decode attention 512", 512, 0},
            {"dense decode attention 512 2-launch", 512, 32},
            {"dense decode attention 64 tc", 64, 64},
            {"dense decode attention 64 2-launch", 64, 32},
            {"dense decode attention 16 tc", 16, 64},
            {"dense decode attention 16 2-launch", 16, 32}};
        int base = -1;
        for (size_t k = 0; k < sizeof dv / sizeof dv[0] && !bad; k++) {
            const int same = base >= 0 && ((dd_ctx *)cases[base].ctx)->ctx_len == dv[k].ctx;
            if (!same)
                base = n;
            bad |= make_dense_decode(next_case(cases, &n), dv[k].name, dv[k].ctx, l2, dv[k].variant,
                                     same ? &cases[base] : NULL);
        }
    }
    bad |= make_indexer(next_case(cases, &n), "indexer decode 128K", 131072, l2);
    bad |= make_indexer(next_case(cases, &n), "indexer decode 1M", 1048576, l2);
    if (!bad) { /* the same data through the old two-launch path and the variants */
        const int i128 = n - 2, i1m = n - 1;
        bad |= make_indexer_alt(next_case(cases, &n), "indexer decode 128K old 2-launch", &cases[i128], 1, 0);
        bad |= make_indexer_alt(next_case(cases, &n), "indexer decode 1M old 2-launch", &cases[i1m], 1, 0);
        /* variant bits (kernels.h m3g_msa_indexer_tuned / _ex; the default passes the
         * cache's range words, so FMA where proven exact, and takes 4 keys per lane up to
         * 16 MSA blocks per SM, else 2): 1024 multiply then add (no FMA), 8 the previous
         * fused kernel, 10 / 12 / 14 the streaming kernel with 1 / 2 / 4 keys per lane,
         * 16 block scores only (no selection), 64 no merge (lists + ticket only), 128 the
         * previous ticket (fence, atomic, fence; the default is one acq_rel atomic), 32
         * without programmatic dependent launch, 16384 the whole ring requested before
         * the wait (not one slot per warp), 2048 the bandwidth ceiling (a kernel that
         * only streams the same bytes; 8192 / 12288: 4 / 8 blocks per SM) */
        static const struct { const char *n128, *n1m; int v; } iv[] = {
            {"indexer decode 128K mul+add", "indexer decode 1M mul+add", 1024},
            {"indexer decode 128K kpt2 mul+add (old default)",
             "indexer decode 1M kpt2 mul+add (old default)", 12 | 1024},
            {"indexer decode 128K old fused", "indexer decode 1M old fused", 8},
            {"indexer decode 128K kpt1", "indexer decode 1M kpt1", 10},
            {"indexer decode 128K kpt2", "indexer decode 1M kpt2", 12},
            {"indexer decode 128K kpt4", "indexer decode 1M kpt4", 14},
            {"indexer decode 128K ring prologue", "indexer decode 1M ring prologue", 16384},
            {"indexer decode 128K kpt2 ring prologue", "indexer decode 1M kpt2 ring prologue",
             12 | 16384},
            {"indexer decode 128K fence ticket", "indexer decode 1M fence ticket", 128},
            {"indexer decode 128K scores only", "indexer decode 1M scores only", 16},
            {"indexer decode 128K scores only mul+add", "indexer decode 1M scores only mul+add",
             16 | 1024},
            {"indexer decode 128K no merge", "indexer decode 1M no merge", 64},
            {"indexer decode 128K no pdl", "indexer decode 1M no pdl", 32},
            {"indexer decode 128K stream ceiling x1", "indexer decode 1M stream ceiling x1", 2048},
            {"indexer decode 128K stream ceiling x4", "indexer decode 1M stream ceiling x4",
             2048 | 8192},
            {"indexer decode 128K stream ceiling x8", "indexer decode 1M stream ceiling x8",
             2048 | 12288},
            {"indexer decode 128K stream ceiling x8 no pdl",
             "indexer decode 1M stream ceiling x8 no pdl", 2048 | 12288 | 32}};
        for (size_t k = 0; k < sizeof iv / sizeof iv[0]; k++) {
            bad |= make_indexer_alt(next_case(cases, &n), iv[k].n128, &cases[i128], 0, iv[k].v);
            bad |= make_indexer_alt(next_case(cases, &n), iv[k].n1m, &cases[i1m], 0, iv[k].v);
        }
    }
    /* prefill GEMMs at M = 4096 */
    bad |= make_linear(next_case(cases, &n), "gemm M4096 q_proj 8192x6144", NH * HD, H, 4096, l2, blas);
    bad |= make_linear(next_case(cases, &n), "gemm M4096 dense gate 12288x6144", ID, H, 4096, l2, blas);
    if (blas_nolt) { /* the previous BLAS path (cublasGemmEx) for comparison */
        bad |= make_linear(next_case(cases, &n), "gemm M4096 q_proj GemmEx (no Lt)", NH * HD, H, 4096, l2,
                           blas_nolt);
        bad |= make_linear(next_case(cases, &n), "gemm M4096 dense gate GemmEx (no Lt)", ID, H, 4096, l2,
                           blas_nolt);
    }
    /* MSA prefill attention: last 2048 rows of a 128K sequence (tensor cores) */
    bad |= make_msa_prefill(next_case(cases, &n), "msa prefill 128K x2048 rows indep", 0, PF_ROWS, 0);
    bad |= make_msa_prefill(next_case(cases, &n), "msa prefill 128K x2048 rows pool24", 24, PF_ROWS, 0);
    bad |= make_msa_prefill(next_case(cases, &n), "msa prefill 128K x2048 rows shared", PF_RAND, PF_ROWS, 0);
    if (!bad) { /* the same slabs through variant 6 (msa_attention.cu): one pass with
                 * online softmax (p rounded on the running max's scale), 11 rows per
                 * CTA, pipelined: faster, not the default (its header says why) */
        const int i0 = n - 3;
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill x2048 indep 1-pass online",
                                    &cases[i0], 6);
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill x2048 pool24 1-pass online",
                                    &cases[i0 + 1], 6);
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill x2048 shared 1-pass online",
                                    &cases[i0 + 2], 6);
        /* variant 5, a previous default (two passes, pass 2 not pipelined;
         * bitwise the same results as 7 and the default 8) */
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill x2048 indep 2-pass v5", &cases[i0],
                                    5);
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill x2048 pool24 2-pass v5",
                                    &cases[i0 + 1], 5);
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill x2048 shared 2-pass v5",
                                    &cases[i0 + 2], 5);
        /* 7 (pass 2 pipelined; the default before 8), 8 (7 with the cheap
         * tile prologue) and 9 (8 with the union in ascending block id),
         * msa_attention.cu */
        static const char *const v7on[3][3] = {
            {"msa prefill x2048 indep v7", "msa prefill x2048 pool24 v7",
             "msa prefill x2048 shared v7"},
            {"msa prefill x2048 indep v8", "msa prefill x2048 pool24 v8",
             "msa prefill x2048 shared v8"},
            {"msa prefill x2048 indep v9", "msa prefill x2048 pool24 v9",
             "msa prefill x2048 shared v9"}};
        for (int vi = 0; vi < 3; vi++)
            for (int k = 0; k < 3; k++)
                bad |= make_msa_prefill_alt(next_case(cases, &n), v7on[vi][k], &cases[i0 + k], 7 + vi);
    }
    /* the whole 131,072-row prefill (all 1,024 query blocks; compare with
     * tools/bench_torch.py's measured "sdpa causal full 131072") */
    bad |= make_msa_prefill(next_case(cases, &n), "msa prefill 128K full pool24", 24, PF_CTX, 0);
    bad |= make_msa_prefill(next_case(cases, &n), "msa prefill 128K full indep", 0, PF_CTX, 0);
    if (!bad) { /* the pooled whole prefill through variant 6 (one pass, see the slabs) */
        const int i1 = n - 2;
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill 128K full pool24 1-pass online",
                                    &cases[i1], 6);
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill 128K full pool24 2-pass v5",
                                    &cases[i1], 5);
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill 128K full pool24 v7", &cases[i1], 7);
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill 128K full pool24 v8", &cases[i1], 8);
        bad |= make_msa_prefill_alt(next_case(cases, &n), "msa prefill 128K full pool24 v9", &cases[i1], 9);
    }
    { /* whole decoder layers at decode, 128K context (m3-gpu's launch
       * sequence; the decode estimate in docs/performance.md uses these) */
        const moe_ctx *mx = NULL;
        for (int i = 0; i < n; i++)
            if (!strcmp(cases[i].name, "moe decode 4 experts (no shared)"))
                mx = (const moe_ctx *)cases[i].ctx;
        bad |= make_layer(next_case(cases, &n), "layer decode 128K MSA + MoE", 1, 1, 131072, mx);
        bad |= make_layer(next_case(cases, &n), "layer decode 128K dense attn + MLP", 0, 0, 131072, NULL);
        if (!bad) { /* the same layers through the previous launch sequence (separate
                     * QK-norm / RoPE / cache writes, routed gate / up + SwiGLU) */
            const int i0 = n - 2;
            bad |= make_layer_alt(next_case(cases, &n), "layer decode 128K MSA + MoE old seq",
                                  &cases[i0], 7);
            bad |= make_layer_alt(next_case(cases, &n), "layer decode 128K dense attn + MLP old seq",
                                  &cases[i0 + 1], 7);
            /* the fused launches without the norms' / prologue's early PDL release */
            bad |= make_layer_alt(next_case(cases, &n), "layer decode 128K MSA + MoE no release",
                                  &cases[i0], 2);
            bad |= make_layer_alt(next_case(cases, &n), "layer decode 128K dense attn + MLP no release",
                                  &cases[i0 + 1], 2);
            /* the router, grouped expert GEMVs and combine without PDL (the earlier sequence) */
            bad |= make_layer_alt(next_case(cases, &n), "layer decode 128K MSA + MoE no moe pdl",
                                  &cases[i0], 4);
        }
    }
    /* vision tower attention (M3: 16 heads of 80; 5,184 patches = one
     * 1008 x 1008 image) in bf16 mode: the default (tensor cores on NVIDIA,
     * on bf16 copies with cp.async; 8 warps per CTA at 5,184 patches, 4 at
     * 1,024), at 1,024 patches the exact kernel, the tensor-core kernel
     * that stages fp32 tiles (variant 2), and the copies kernel with the
     * other CTA size (variants 3, 4) */
    bad |= make_vis_attention(next_case(cases, &n), "vision attention 5184x16x80", 5184, 16, 80, 0, l2);
    bad |= make_vis_attention(next_case(cases, &n), "vision attention 1024x16x80", 1024, 16, 80, 0, l2);
    bad |= make_vis_attention(next_case(cases, &n), "vision attention 1024x16x80 exact", 1024, 16, 80, 1,
                              l2);
    bad |= make_vis_attention(next_case(cases, &n), "vision attention 5184x16x80 fp32 tiles", 5184, 16,
                              80, 2, l2);
    bad |= make_vis_attention(next_case(cases, &n), "vision attention 5184x16x80 4 warps", 5184, 16,
                              80, 3, l2);
    bad |= make_vis_attention(next_case(cases, &n), "vision attention 1024x16x80 8 warps", 1024, 16,
                              80, 4, l2);
    /* one whole encoder layer (M3 dims) in bf16: vendor-GEMM linears and
     * tensor-core attention (the default), and at 1,024 patches with the
     * exact mode-0 linears for comparison */
    bad |= make_vis_layer(next_case(cases, &n), "vision layer 5184 patches", 5184, blas, l2, NULL);
    bad |= make_vis_layer(next_case(cases, &n), "vision layer 1024 patches", 1024, blas, l2, NULL);
    if (!bad) {
        const vl_ctx *v1024 = (const vl_ctx *)cases[n - 1].ctx;
        bad |= make_vis_layer(next_case(cases, &n), "vision layer 1024 patches exact linears", 1024, NULL,
                              l2, v1024);
    }
    if (bad) {
        fprintf(stderr, "bench-gpu: setting up the cases failed (device memory?)\n");
        return 1;
    }
    M3_HIP_CHECK(hipDeviceSynchronize());
    if (!only || !strncmp("msa decode", only, strlen(only) < 10 ? strlen(only) : 10)) {
        /* correctness of the decode attention paths at M3 shapes first */
        int cb = 0;
        for (int i = 0; i < n; i++) {
            if (!strcmp(cases[i].name, "msa decode attention 16x128 keys"))
                cb |= check_attention((att_ctx *)cases[i].ctx, st);
        }
        cb |= check_attention_edges(st);
        printf("msa decode attention self-check: %s\n", cb ? "FAILED" : "pass");
    }
    if (!only || !strncmp("dense decode", only, strlen(only) < 12 ? strlen(only) : 12)) {
        /* dense decode attention vs host goldens: M3 shape at 32K and 128K (all
         * heads), 1M (three heads), edge shapes */
        int cb = 0;
        const int all[2] = {0, NH - 1};
        for (int i = 0; i < n; i++)
            if (!strcmp(cases[i].name, "dense decode attention 128K") ||
                !strcmp(cases[i].name, "dense decode attention 32K"))
                cb |= check_dense_decode((dd_ctx *)cases[i].ctx, all, 2, st);
        cb |= check_dense_1m(st);
        cb |= check_dense_edges(st);
        printf("dense decode attention self-check: %s\n", cb ? "FAILED" : "pass");
    }
    { /* every indexer case that will be timed: scores + top-16 vs the host golden */
        int cb = 0, any = 0;
        for (int i = 0; i < n; i++)
            if (!strncmp(cases[i].name, "indexer", 7) &&
                (!only || !strncmp(cases[i].name, only, strlen(only)))) {
                cb |= check_indexer((idx_ctx *)cases[i].ctx, cases[i].name, st);
                any = 1;
            }
        if (any)
            cb |= check_indexer_fallback(st);
        if (any)
            printf("indexer self-check: %s\n", cb ? "FAILED" : "pass");
    }
    if (!only || !strncmp(only, "gem", 3)) /* linear layers */
        printf("linear self-check: %s\n", check_linear(blas, blas_nolt, st) ? "FAILED" : "pass");
    if (!only || !strncmp(only, "gemv", strlen(only) < 4 ? strlen(only) : 4))
        printf("gemv variants self-check: %s\n", check_gemv_variants(st) ? "FAILED" : "pass");
    if (!only || !strncmp(only, "msa prefill", strlen(only) < 11 ? strlen(only) : 11)) {
        /* MSA prefill kernel vs host goldens before its timing: the edge shapes of
         * every variant when the whole group runs; each case that will be timed */
        int cb = 0;
        if (!only || strlen(only) <= 11)
            for (int v = 1; v <= 9; v++) /* every tensor-core variant */
                cb |= check_msa_prefill_edges(st, v);
        else if (!strcmp(only, "msa prefill s6")) /* the pooled prefill cases but the "1-pass" ones */
            for (int v = 8; v <= 9; v++)
                cb |= check_msa_prefill_edges(st, v);
        for (int i = 0; i < n; i++)
            if (!strncmp(cases[i].name, "msa prefill", 11) && case_on(cases[i].name, only)) {
                pf_ctx *pc = (pf_ctx *)cases[i].ctx;
                cb |= check_msa_prefill(pc, cases[i].name, st);
                if (pc->variant == 0 || pc->variant >= 7)
                    cb |= check_msa_bitwise(pc, cases[i].name, pc->variant != 9, st);
            }
        printf("msa prefill self-check: %s\n", cb ? "FAILED" : "pass");
    }
    if (!only || !strncmp(only, "vision", strlen(only) < 6 ? strlen(only) : 6)) {
        int cb = check_vis_attention(st);
        for (int i = 0; i < n; i++)
            if (!strcmp(cases[i].name, "vision layer 1024 patches"))
                cb |= check_vis_layer((const vl_ctx *)cases[i].ctx, st);
        printf("vision self-check: %s\n", cb ? "FAILED" : "pass");
    }
    if (!only || !strncmp(only, "layer", strlen(only) < 5 ? strlen(only) : 5)) {
        /* the fused launches (m3g_attn_prologue, m3g_gemv_grouped_swiglu) bitwise
         * against the previous sequence: edge shapes, then both whole layers */
        int cb = check_prologue_edges(st);
        cb |= check_grouped_swiglu_edges(st);
        for (int i = 0; i < n; i++)
            if (!strcmp(cases[i].name, "layer decode 128K MSA + MoE") ||
                !strcmp(cases[i].name, "layer decode 128K dense attn + MLP"))
                cb |= check_layer_fused((const layer_ctx *)cases[i].ctx, cases[i].name, st);
        printf("layer fusion self-check: %s\n", cb ? "FAILED" : "pass");
    }
    for (int i = 0; i < n; i++) {
        if (!case_on(cases[i].name, only))
            continue;
        if (run_case(&cases[i], reps, st, &med[i]) != 0)
            return 1;
    }
    print_targets(cases, med, n);
    m3g_blas_free(blas);
    m3g_blas_free(blas_nolt);
    return 0;
}
