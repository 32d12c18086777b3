/* dtype.h — element types of safetensors files and exact conversions.
 *
 * Spec: M3-NUM-BF16-1 (bf16 rounding is IEEE round-to-nearest-even on the
 * fp32 value; NaN stays NaN), M3-NUM-DTYPE-1 (accepted storage dtypes).
 */
#ifndef M3_DTYPE_H
#define M3_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum m3_dtype {
    M3_F32 = 0,
    M3_F16,
    M3_BF16,
    M3_F64,
    M3_I64,
    M3_I32,
    M3_I16,
    M3_I8,
    M3_U8,
    M3_BOOL,
    M3_DTYPE_COUNT
} m3_dtype;

/* Bytes per element of dt. */
size_t m3_dtype_size(m3_dtype dt);
/* The safetensors spelling of dt ("F32", "BF16", ...). */
const char *m3_dtype_name(m3_dtype dt);
/* Parse a safetensors dtype string; returns 0 and sets *dt, or -1 if unknown. */
int m3_dtype_parse(const char *s, m3_dtype *dt);

/* bf16 bits -> fp32 (exact). */
static inline float m3_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* fp32 -> bf16 bits, round to nearest even; NaN maps to a quiet NaN. */
static inline uint16_t m3_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Round an fp32 value to the nearest bf16 value, returned as fp32. */
static inline float m3_round_bf16(float f)
{
    return m3_bf16_to_f32(m3_f32_to_bf16(f));
}

/* IEEE half bits -> fp32 (exact, subnormals included). */
float m3_f16_to_f32(uint16_t h);
/* fp32 -> IEEE half bits, round to nearest even, overflow to inf. */
uint16_t m3_f32_to_f16(float f);

/* Element i of a buffer of floating type dt (F32, F16, BF16, F64), as fp32. */
float m3_load_f32(const void *data, m3_dtype dt, size_t i);

#endif
