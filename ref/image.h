/* image.h — decode PNG and JPEG files into 8-bit RGB.
 *
 * Spec: M3-VIS-DECODE-1 (every PNG colour type and bit depth, interlaced or
 * not, and baseline/progressive/grey/CMYK JPEG become RGB8; alpha is dropped
 * without compositing, as PIL's convert("RGB") does; 16-bit samples keep
 * their high byte; grey is replicated to R, G and B).
 *
 * Limits (documented caps, checked before any allocation): width and height
 * at most M3_IMAGE_MAX_SIDE and width*height at most M3_IMAGE_MAX_PIXELS; a
 * PNG's pixel data (w*h*depth*channels/8 bytes) at most M3_PNG_MAX_RATIO
 * times the file size (deflate's maximum ratio, so no valid PNG is refused).
 * Non-interlaced PNG and all JPEG pixel buffers grow with the rows actually
 * decoded (so a short file fails before it gets the whole buffer); JPEG
 * decoding stops at the first corrupt-data or end-of-data warning. JPEG has
 * no sound size bound (progressive end-of-band runs), so libjpeg's own
 * working memory (a progressive image's coefficient array) is capped at
 * M3_JPEG_MAX_MEMORY: larger progressive images are refused with an error
 * naming the cap (about 89 megapixels at 4:4:4, 179 at 4:2:0).
 */
#ifndef M3_IMAGE_H
#define M3_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define M3_IMAGE_MAX_SIDE 32768
#define M3_IMAGE_MAX_FILE (256u << 20) /* bytes of one image file */
#define M3_IMAGE_MAX_PIXELS (1u << 28) /* 268M pixels, 768 MiB as RGB8 */
#define M3_PNG_MAX_RATIO 1032           /* deflate: 258-byte match in 2 bits */
#define M3_JPEG_MAX_MEMORY (512u << 20) /* libjpeg working memory (progressive images) */

typedef struct m3_image {
    int width, height;
    uint8_t *rgb; /* [height, width, 3], owned; free with m3_image_free */
} m3_image;

/* Decode the PNG or JPEG file at path (format from its signature). */
int m3_image_load(m3_image *img, const char *path, m3_err *e);
/* Decode from memory; name is used in messages. */
int m3_image_decode(m3_image *img, const uint8_t *data, size_t len, const char *name, m3_err *e);
/* Free the pixels; safe on a zeroed struct. */
void m3_image_free(m3_image *img);

#endif
