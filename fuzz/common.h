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

#endif
