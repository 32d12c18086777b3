/* weight_stream.cu — per-layer weight streaming (contract: weight_stream.h).
 *
 * Events: loaded[s] is recorded on the copy stream after the last copy into
 * slot s, freed[s] on the compute stream after the last kernel of the layer
 * that used slot s, t0[s] before the first copy (for the copy time). A
 * slot's held layer changes only in fetch, so a layer that is still in its
 * slot (a model of at most two layers, or a fetch repeated) is not copied
 * again.
 */
#include <stdlib.h>
#include <string.h>

#include "weight_stream.h"

#define WS_ALIGN 256

/* hipError_t check: fill e with the call and the runtime's message. */
#define WS_CK(call, e)                                                                       \
    do {                                                                                     \
        hipError_t ws_ = (call);                                                             \
        if (ws_ != hipSuccess)                                                               \
            return m3_fail((e), "weight streaming: %s: %s", #call, hipGetErrorString(ws_));  \
    } while (0)

int m3g_wstream_init(m3g_wstream *ws, int L, size_t slot_bytes, m3_err *e)
{
    memset(ws, 0, sizeof *ws);
    ws->held[0] = ws->held[1] = -1;
    if (L < 1)
        return m3_fail(e, "weight streaming: a model of %d layers", L);
    ws->L = L;
    ws->slot_bytes = slot_bytes;
    ws->first = (int *)calloc((size_t)L + 1, sizeof *ws->first);
    ws->layer_bytes = (size_t *)calloc((size_t)L, sizeof *ws->layer_bytes);
    if (!ws->first || !ws->layer_bytes)
        return m3_fail(e, "weight streaming: out of host memory");
    for (int s = 0; s < 2; s++) {
        hipError_t r = hipMalloc((void **)&ws->slot[s], slot_bytes ? slot_bytes : 1);
        if (r != hipSuccess) {
            ws->slot[s] = NULL;
            return m3_fail(e, "weight streaming: two layer slots of %.2f GB each do not fit in "
                              "device memory (%s)", (double)slot_bytes / 1e9, hipGetErrorString(r));
        }
    }
    WS_CK(hipStreamCreate(&ws->copy), e);
    for (int s = 0; s < 2; s++) {
        WS_CK(hipEventCreate(&ws->loaded[s]), e);
        WS_CK(hipEventCreate(&ws->freed[s]), e);
        WS_CK(hipEventCreate(&ws->t0[s]), e);
    }
    return 0;
}

void m3g_wstream_free(m3g_wstream *ws)
{
    if (ws->copy)
        (void)hipStreamSynchronize(ws->copy);
    for (int s = 0; s < 2; s++) {
        if (ws->slot[s])
            (void)hipFree(ws->slot[s]);
        if (ws->loaded[s])
            (void)hipEventDestroy(ws->loaded[s]);
        if (ws->freed[s])
            (void)hipEventDestroy(ws->freed[s]);
        if (ws->t0[s])
            (void)hipEventDestroy(ws->t0[s]);
    }
    if (ws->copy)
        (void)hipStreamDestroy(ws->copy);
    free(ws->jobs);
    free(ws->first);
    free(ws->layer_bytes);
    memset(ws, 0, sizeof *ws);
}

int m3g_wstream_begin_layer(m3g_wstream *ws, int l, m3_err *e)
{
    if (l != ws->planned)
        return m3_fail(e, "weight streaming: layer %d planned out of order (next: %d)", l,
                       ws->planned);
    ws->first[l] = ws->njobs;
    ws->used[l % 2] = 0;
    ws->planned = l + 1;
    return 0;
}

void *m3g_wstream_alloc(m3g_wstream *ws, size_t bytes, m3_err *e)
{
    const int l = ws->planned - 1, s = l % 2;
    const size_t off = (ws->used[s] + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
    if (l < 0 || off > ws->slot_bytes || bytes > ws->slot_bytes - off) {
        m3_fail(e, "weight streaming: layer %d needs more than its slot's %zu bytes", l,
                ws->slot_bytes);
        return NULL;
    }
    ws->used[s] = off + bytes;
    return ws->slot[s] + off;
}

int m3g_wstream_add(m3g_wstream *ws, void *dst, const void *src, size_t bytes, m3_err *e)
{
    const int l = ws->planned - 1;
    const char *d = (const char *)dst, *base = l >= 0 ? ws->slot[l % 2] : NULL;
    if (l < 0 || !base || d < base || d + bytes > base + ws->slot_bytes)
        return m3_fail(e, "weight streaming: a copy of %zu bytes outside layer %d's slot", bytes, l);
    if (ws->njobs == ws->capjobs) {
        const int cap = ws->capjobs ? 2 * ws->capjobs : 64;
        m3g_copy_job *n = (m3g_copy_job *)realloc(ws->jobs, (size_t)cap * sizeof *n);
        if (!n)
            return m3_fail(e, "weight streaming: out of host memory");
        ws->jobs = n;
        ws->capjobs = cap;
    }
    ws->jobs[ws->njobs].src = src;
    ws->jobs[ws->njobs].dst = dst;
    ws->jobs[ws->njobs].bytes = bytes;
    ws->njobs++;
    ws->layer_bytes[l] += bytes;
    return 0;
}

int m3g_wstream_end(m3g_wstream *ws, m3_err *e)
{
    if (ws->planned != ws->L)
        return m3_fail(e, "weight streaming: %d of %d layers planned", ws->planned, ws->L);
    ws->first[ws->L] = ws->njobs;
    return 0;
}

/* Add the device time of the last load into slot s (its events complete). */
static int account(m3g_wstream *ws, int s, m3_err *e)
{
    float ms = 0;
    WS_CK(hipEventSynchronize(ws->loaded[s]), e);
    WS_CK(hipEventElapsedTime(&ms, ws->t0[s], ws->loaded[s]), e);
    ws->copy_ms += ms;
    return 0;
}

int m3g_wstream_fetch(m3g_wstream *ws, int l, m3_err *e)
{
    if (l < 0 || l >= ws->L || ws->planned != ws->L)
        return m3_fail(e, "weight streaming: fetch of layer %d of %d (planned %d)", l, ws->L,
                       ws->planned);
    const int s = l % 2;
    if (ws->held[s] == l)
        return 0;
    if (ws->held[s] >= 0 && account(ws, s, e))
        return -1;
    if (ws->freed_set[s]) /* the slot's previous occupant has finished computing */
        WS_CK(hipStreamWaitEvent(ws->copy, ws->freed[s], 0), e);
    WS_CK(hipEventRecord(ws->t0[s], ws->copy), e);
    for (int j = ws->first[l]; j < ws->first[l + 1]; j++)
        WS_CK(hipMemcpyAsync(ws->jobs[j].dst, ws->jobs[j].src, ws->jobs[j].bytes,
                             hipMemcpyHostToDevice, ws->copy), e);
    WS_CK(hipEventRecord(ws->loaded[s], ws->copy), e);
    ws->held[s] = l;
    ws->fetches++;
    ws->bytes_copied += (int64_t)ws->layer_bytes[l];
    return 0;
}

int m3g_wstream_acquire(m3g_wstream *ws, int l, hipStream_t compute, m3_err *e)
{
    if (l < 0 || l >= ws->L || ws->held[l % 2] != l)
        return m3_fail(e, "weight streaming: layer %d used before it was fetched", l);
    WS_CK(hipStreamWaitEvent(compute, ws->loaded[l % 2], 0), e);
    return 0;
}

int m3g_wstream_release(m3g_wstream *ws, int l, hipStream_t compute, m3_err *e)
{
    if (l < 0 || l >= ws->L)
        return m3_fail(e, "weight streaming: release of layer %d of %d", l, ws->L);
    WS_CK(hipEventRecord(ws->freed[l % 2], compute), e);
    ws->freed_set[l % 2] = 1;
    return 0;
}

int m3g_wstream_sync(m3g_wstream *ws, m3_err *e)
{
    WS_CK(hipStreamSynchronize(ws->copy), e);
    for (int s = 0; s < 2; s++)
        if (ws->held[s] >= 0) {
            if (account(ws, s, e))
                return -1;
            /* counted once: the slot keeps its layer, a later fetch of another
             * layer must not count this load again */
            WS_CK(hipEventRecord(ws->t0[s], ws->copy), e);
            WS_CK(hipEventRecord(ws->loaded[s], ws->copy), e);
        }
    return 0;
}

int m3g_h2d_bandwidth(size_t bytes, int pinned, double *gbps, m3_err *e)
{
    void *h = NULL, *d = NULL;
    hipEvent_t a = NULL, b = NULL;
    hipStream_t st = NULL;
    int rc = -1;
    float best = 0;
    *gbps = 0;
    if (pinned ? hipHostMalloc(&h, bytes, 0) != hipSuccess : !(h = malloc(bytes))) {
        h = NULL;
        m3_fail(e, "h2d bandwidth: no %zu bytes of %s host memory", bytes,
                pinned ? "pinned" : "pageable");
        goto out;
    }
    memset(h, 1, bytes); /* touch every page before timing */
    if (hipMalloc(&d, bytes) != hipSuccess || hipStreamCreate(&st) != hipSuccess ||
        hipEventCreate(&a) != hipSuccess || hipEventCreate(&b) != hipSuccess) {
        m3_fail(e, "h2d bandwidth: no device buffer of %zu bytes", bytes);
        goto out;
    }
    for (int i = 0; i < 4; i++) { /* the first copy warms up */
        float ms = 0;
        if (hipEventRecord(a, st) != hipSuccess ||
            hipMemcpyAsync(d, h, bytes, hipMemcpyHostToDevice, st) != hipSuccess ||
            hipEventRecord(b, st) != hipSuccess || hipEventSynchronize(b) != hipSuccess ||
            hipEventElapsedTime(&ms, a, b) != hipSuccess) {
            m3_fail(e, "h2d bandwidth: the timed copy failed");
            goto out;
        }
        if (i > 0 && ms > 0 && (best == 0 || ms < best))
            best = ms;
    }
    *gbps = best > 0 ? (double)bytes / (best * 1e-3) / 1e9 : 0;
    rc = 0;
out:
    if (a)
        (void)hipEventDestroy(a);
    if (b)
        (void)hipEventDestroy(b);
    if (st)
        (void)hipStreamDestroy(st);
    if (d)
        (void)hipFree(d);
    if (h) {
        if (pinned)
            (void)hipHostFree(h);
        else
            free(h);
    }
    return rc;
}
