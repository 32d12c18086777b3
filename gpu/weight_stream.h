/* weight_stream.h — per-layer weight streaming: a model larger than device
 * memory runs with only two layers' weights on the device at a time.
 *
 * Layer l's weights live in device slot l % 2. While the weights are
 * uploaded, the allocator hands out addresses inside the layer's slot and
 * records a copy job (mapped checkpoint bytes -> slot address) instead of
 * copying, so every device view of the model stays valid for the whole run;
 * only the slots' contents change. Before layer l runs, its jobs are issued
 * on a copy stream of their own, which first waits until the compute stream
 * has finished layer l - 2 (the slot's previous occupant); the compute
 * stream then waits for the copies of layer l. So the copies of layer l + 1
 * overlap the compute of layer l (double buffering), and the KV and index-K
 * caches, which are not in the slots, stay resident.
 *
 * The copies are staged through a ring of pinned host buffers: host threads
 * copy the checkpoint's mapped bytes into a free ring buffer (a few at a time,
 * never the layer wholesale) and the copy stream moves each buffer to the
 * device while the next one fills; a buffer is refilled once its transfer has
 * completed. Where pinned memory cannot be had, the copies read the mapping
 * directly (pageable, the driver's own staging, about an eighth of the
 * rate). Bitwise equal to resident weights: the kernels and their inputs are
 * the same bytes. Weights must be stored as bf16 or fp32 (the dtypes uploaded
 * as they are).
 * Spec: M3-MODEL-1 (layer order); the forward's clauses are unchanged.
 */
#ifndef M3G_WEIGHT_STREAM_H
#define M3G_WEIGHT_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "hip_compat.h"

extern "C" {
#include "err.h"
}

typedef struct m3g_copy_job {
    const void *src; /* host (mapped checkpoint) */
    void *dst;       /* inside the layer's slot */
    size_t bytes;
} m3g_copy_job;

#define M3G_WS_RING 4 /* pinned staging buffers */

typedef struct m3g_wstream_pool m3g_wstream_pool; /* the host copy threads */

typedef struct m3g_wstream {
    int L;
    char *slot[2];
    size_t slot_bytes;   /* capacity of each slot */
    size_t used[2];      /* bytes planned in each slot for the layer being planned */
    int planned;         /* layers planned so far (planning goes in layer order) */
    m3g_copy_job *jobs;  /* every layer's jobs, in layer order */
    int njobs, capjobs;
    int *first;          /* [L + 1]: layer l's jobs are first[l] .. first[l + 1] - 1 */
    size_t *layer_bytes; /* [L] bytes copied per fetch of layer l */
    int held[2];         /* the layer a slot holds or is loading (-1: none) */
    hipStream_t copy;
    hipEvent_t loaded[2], freed[2], t0[2];
    int freed_set[2];     /* freed[s] has been recorded at least once */
    int64_t fetches;      /* layer loads issued */
    int64_t bytes_copied; /* their bytes */
    double copy_ms;       /* device time of the copies (events around each load) */
    /* pinned staging (pin[0] == NULL: pageable copies from the mapping) */
    char *pin[M3G_WS_RING];
    size_t pin_bytes;             /* capacity of each ring buffer */
    hipEvent_t pin_done[M3G_WS_RING]; /* its last transfer has completed */
    int pin_rec[M3G_WS_RING];     /* pin_done recorded at least once */
    int ring;                     /* the buffer being filled */
    size_t ring_fill;             /* its bytes filled */
    m3g_wstream_pool *pool;       /* NULL: the calling thread copies alone */
    int copiers;                  /* host threads copying, the caller included */
    double host_s;                /* host wall time spent in fetch (staging copies) */
} m3g_wstream;

/* Allocate two slots of slot_bytes each, the copy stream and its events for
 * a model of L layers, and the pinned staging ring with its copy threads
 * (pageable copies where pinned memory or threads cannot be had). On failure
 * fills e (naming the device bytes asked). */
int m3g_wstream_init(m3g_wstream *ws, int L, size_t slot_bytes, m3_err *e);
/* The same with ring buffers of pin_bytes each and `copiers` host threads
 * (0, 0: the defaults, 64 MiB and one a core up to 8). */
int m3g_wstream_init_ring(m3g_wstream *ws, int L, size_t slot_bytes, size_t pin_bytes,
                          int copiers, m3_err *e);
/* Release everything of ws; a zeroed ws is allowed. */
void m3g_wstream_free(m3g_wstream *ws);

/* Planning, layer by layer in order: begin layer l (slot l % 2 restarts). */
int m3g_wstream_begin_layer(m3g_wstream *ws, int l, m3_err *e);
/* An address for bytes of layer l's weights inside its slot (256-byte
 * aligned); NULL with e filled when the slot is full. */
void *m3g_wstream_alloc(m3g_wstream *ws, size_t bytes, m3_err *e);
/* Record the copy of bytes from host src to dst (an address from alloc). */
int m3g_wstream_add(m3g_wstream *ws, void *dst, const void *src, size_t bytes, m3_err *e);
/* End planning (after the last layer). */
int m3g_wstream_end(m3g_wstream *ws, m3_err *e);

/* Issue layer l's copies into its slot unless the slot already holds it
 * (the copy stream first waits for the compute that last used the slot).
 * With pinned staging the calling thread returns once the last byte is in a
 * ring buffer and its transfer is enqueued; it may wait for the compute that
 * last used the slot (already enqueued by then, so it cannot deadlock). */
int m3g_wstream_fetch(m3g_wstream *ws, int l, m3_err *e);
/* Make compute wait until layer l's weights are on the device. */
int m3g_wstream_acquire(m3g_wstream *ws, int l, hipStream_t compute, m3_err *e);
/* Mark, on compute, the end of layer l's use of its slot. */
int m3g_wstream_release(m3g_wstream *ws, int l, hipStream_t compute, m3_err *e);
/* Wait for every issued copy and add their device time to ws->copy_ms. */
int m3g_wstream_sync(m3g_wstream *ws, m3_err *e);

/* Host-to-device bandwidth now, in GB/s (1e9 bytes): bytes copied from
 * pinned (hipHostMalloc) or pageable (malloc) host memory, best of 3. */
int m3g_h2d_bandwidth(size_t bytes, int pinned, double *gbps, m3_err *e);

#endif
