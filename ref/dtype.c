/* dtype.c — element sizes, names and exact conversions (see dtype.h).
 *
 * Spec: M3-NUM-DTYPE-1, M3-NUM-BF16-1.
 */
#include "dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtype_info[M3_DTYPE_COUNT] = {
    [M3_F32] = {"F32", 4},  [M3_F16] = {"F16", 2}, [M3_BF16] = {"BF16", 2},
    [M3_F64] = {"F64", 8},  [M3_I64] = {"I64", 8}, [M3_I32] = {"I32", 4},
    [M3_I16] = {"I16", 2},  [M3_I8] = {"I8", 1},   [M3_U8] = {"U8", 1},
    [M3_BOOL] = {"BOOL", 1},
};

size_t m3_dtype_size(m3_dtype dt)
{
    if ((int)dt < 0 || dt >= M3_DTYPE_COUNT)
        return 0;
    return dtype_info[dt].size;
}

const char *m3_dtype_name(m3_dtype dt)
{
    if ((int)dt < 0 || dt >= M3_DTYPE_COUNT)
        return "?";
    return dtype_info[dt].name;
}

int m3_dtype_parse(const char *s, m3_dtype *dt)
{
    if (!s)
        return -1;
    for (int i = 0; i < M3_DTYPE_COUNT; i++) {
        if (strcmp(s, dtype_info[i].name) == 0) {
            *dt = (m3_dtype)i;
            return 0;
        }
    }
    return -1;
}

float m3_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13); /* inf / NaN (payload kept) */
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13); /* 127 - 15 = 112 */
    } else if (man == 0) {
        u = sign; /* signed zero */
    } else {
        /* subnormal: value = man * 2^-24; normalise */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while ((man & 0x400u) == 0);
        man &= 0x3ffu;
        u = sign | ((uint32_t)(112 - e) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t m3_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t man = u & 0x7fffffu;
    if (exp == 0xff) { /* inf or NaN */
        if (man == 0)
            return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | (man >> 13));
    }
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
    if (e <= 0) {
        /* subnormal half (or zero): value = m * 2^-24 with m < 1024 */
        if (e < -10)
            return sign; /* below half the smallest subnormal: rounds to 0 */
        uint32_t m = man | 0x800000u;    /* 24-bit significand */
        int shift = 14 - e;              /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q); /* q may carry into the smallest normal: fine */
    }
    uint32_t q = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
        q++; /* carry may reach exponent 31 = inf: correct */
    return (uint16_t)(sign | q);
}

float m3_load_f32(const void *data, m3_dtype dt, size_t i)
{
    const unsigned char *p = (const unsigned char *)data;
    switch (dt) {
    case M3_F32: {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    case M3_BF16: {
        uint16_t h;
        memcpy(&h, p + i * 2, 2);
        return m3_bf16_to_f32(h);
    }
    case M3_F16: {
        uint16_t h;
        memcpy(&h, p + i * 2, 2);
        return m3_f16_to_f32(h);
    }
    case M3_F64: {
        double d;
        memcpy(&d, p + i * 8, 8);
        return (float)d;
    }
    default:
        return 0.0f; /* not a floating type; callers check dtypes at bind time */
    }
}
