/* fuzz_png.c — PNG bytes through m3_image_decode (M3-VIS-DECODE-1).
 * The input is decoded as given, then (when any chunk CRC was wrong) once more
 * with every chunk CRC recomputed, so mutations reach the decoder instead of
 * stopping at libpng's CRC check. */
#include "common.h"
#include "image.h"

static uint32_t crc32_png(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static void fix_crcs(uint8_t *d, size_t size)
{
    size_t off = 8;
    while (off + 12 <= size) {
        uint32_t len = (uint32_t)d[off] << 24 | (uint32_t)d[off + 1] << 16 |
                       (uint32_t)d[off + 2] << 8 | d[off + 3];
        if (len > size - off - 12)
            break;
        uint32_t c = crc32_png(d + off + 4, (size_t)len + 4);
        uint8_t *q = d + off + 8 + len;
        q[0] = (uint8_t)(c >> 24);
        q[1] = (uint8_t)(c >> 16);
        q[2] = (uint8_t)(c >> 8);
        q[3] = (uint8_t)c;
        off += (size_t)len + 12;
    }
}

static void decode(const uint8_t *data, size_t size)
{
    m3_image img = {0};
    m3_err e;
    if (m3_image_decode(&img, data, size, "fuzz.png", &e) == 0) {
        if (img.width <= 0 || img.height <= 0 || img.width > M3_IMAGE_MAX_SIDE ||
            img.height > M3_IMAGE_MAX_SIDE)
            abort();
        m3fuzz_touch(img.rgb, (size_t)img.width * (size_t)img.height * 3);
    }
    m3_image_free(&img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    decode(data, size);
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    if (size)
        memcpy(copy, data, size);
    fix_crcs(copy, size);
    if (size && memcmp(copy, data, size) != 0)
        decode(copy, size);
    free(copy);
    return 0;
}
