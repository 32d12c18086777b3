/* numerics.h — the two numeric modes of the reference.
 *
 * Spec: M3-NUM-MODE-1 (fp32 golden mode), M3-NUM-BF16-2 (bf16 mode rounding
 * points). In fp32 mode every value stays fp32. In bf16 mode a component
 * rounds its output to bf16 (round to nearest even) exactly at the points
 * the spec lists; m3_round_mode is the one helper they all use.
 */
#ifndef M3_NUMERICS_H
#define M3_NUMERICS_H

#include <stddef.h>

#include "dtype.h"

typedef enum m3_mode {
    M3_MODE_FP32 = 0, /* golden: fp32 math on checkpoint-dtype weights */
    M3_MODE_BF16 = 1  /* rounds to bf16 where the upstream bf16 path rounds */
} m3_mode;

/* Round x[0..n) to bf16 in place when mode is M3_MODE_BF16; no-op in fp32. */
static inline void m3_round_mode(float *x, size_t n, m3_mode mode)
{
    if (mode != M3_MODE_BF16)
        return;
    for (size_t i = 0; i < n; i++)
        x[i] = m3_round_bf16(x[i]);
}

/* One value, rounded per mode. */
static inline float m3_round1(float x, m3_mode mode)
{
    return mode == M3_MODE_BF16 ? m3_round_bf16(x) : x;
}

#endif
