/* fileio.c — see fileio.h. */
#include "fileio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int m3_read_file(const char *path, size_t cap, char **buf, size_t *len, m3_err *e)
{
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return m3_fail(e, "%s: cannot open: %s", path, strerror(errno));
    size_t size = 4096, n = 0;
    char *b = malloc(size);
    for (;;) {
        if (!b) {
            fclose(f);
            return m3_fail(e, "%s: out of memory", path);
        }
        n += fread(b + n, 1, size - 1 - n, f); /* keep one byte for the NUL */
        if (n < size - 1)
            break; /* end of file or an error, told apart below */
        if (n > cap) {
            free(b);
            fclose(f);
            return m3_fail(e, "%s: larger than the %zu-byte limit for this kind of file", path,
                           cap);
        }
        char *nb = realloc(b, size * 2);
        if (!nb)
            free(b);
        b = nb;
        size *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return m3_fail(e, "%s: read error", path);
    }
    if (n > cap) {
        free(b);
        return m3_fail(e, "%s: larger than the %zu-byte limit for this kind of file", path, cap);
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}
