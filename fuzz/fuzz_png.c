/* fuzz_png.c — PNG bytes through m3_image_decode (M3-VIS-DECODE-1). */
#include "common.h"
#include "image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
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
    return 0;
}
