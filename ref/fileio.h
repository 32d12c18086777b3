/* fileio.h — reading a whole file that must be small (JSON, images).
 *
 * Spec: M3-CLI-TOKENS-1's general rule (bad input → a message naming the file,
 * never a crash) and the hardening rule that every size read from a file is
 * checked against a documented cap before it drives an allocation. Memory is
 * grown with the bytes actually read, so a small file never costs a
 * cap-sized allocation.
 */
#ifndef M3_FILEIO_H
#define M3_FILEIO_H

#include <stddef.h>

#include "err.h"

/* Read all of path (at most cap bytes) into a fresh NUL-terminated buffer
 * *buf (caller frees) of *len bytes. Fails naming the file and the limit. */
int m3_read_file(const char *path, size_t cap, char **buf, size_t *len, m3_err *e);

#endif
