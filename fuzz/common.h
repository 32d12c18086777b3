/* common.h — helpers shared by the fuzz targets (fuzz/fuzz_*.c).
 *
 * Parsers that only take a path get the input through a private temporary
 * file under $TMPDIR (default /tmp), created once per process and rewritten
 * for every input; m3fuzz_cleanup removes it at exit.
 */
#ifndef M3_FUZZ_COMMON_H
#define M3_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A private directory for this process ($TMPDIR/m3fuzz.XXXXXX); NULL on failure.
 * The directory and the files put in it through m3fuzz_write stay until exit. */
const char *m3fuzz_dir(void);

/* Write data to m3fuzz_dir()/name (replacing it); returns the path (static
 * storage, valid until the next call with the same slot) or NULL. slot 0..3. */
const char *m3fuzz_write(int slot, const char *name, const uint8_t *data, size_t size);

/* A NUL-terminated heap copy of data (caller frees). */
static inline char *m3fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return NULL;
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Touch every byte of a buffer so an out-of-bounds pointer faults under ASan. */
static inline unsigned m3fuzz_touch(const void *p, size_t n)
{
    const volatile unsigned char *b = p;
    unsigned acc = 0;
    for (size_t i = 0; i < n; i++)
        acc += b[i];
    return acc;
}

/* Structural UTF-8 check: lead bytes, continuation bytes, no overlong forms,
 * no surrogates, nothing above U+10FFFF. */
static inline int m3fuzz_utf8_ok(const void *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (u[i + j] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (u[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

#endif
