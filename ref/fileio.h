/* fileio.h — opening input files safely, writing output files atomically, and
 * telling whether two paths name the same file.
 *
 * Spec: M3-CLI-TOKENS-1's general rule (bad input → a message naming the file,
 * never a crash or a hang) and the hardening rules: every size read from a
 * file is checked against a documented cap before it drives an allocation;
 * inputs are opened without blocking (a FIFO or device is refused, naming the
 * file, instead of hanging in open()); outputs are written to a temporary file
 * in the target's directory and renamed over it only when complete, so a
 * failed write leaves the old file and never a truncated one; and an output
 * may not be an input or another output (same device and inode, or for a
 * path that does not exist yet, the same directory and name).
 */
#ifndef M3_FILEIO_H
#define M3_FILEIO_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "err.h"

/* Read all of path (at most cap bytes) into a fresh NUL-terminated buffer
 * *buf (caller frees) of *len bytes. Fails naming the file and the limit;
 * refuses a path that is not a regular file (without blocking on a FIFO). */
int m3_read_file(const char *path, size_t cap, char **buf, size_t *len, m3_err *e);

/* Open path read-only without blocking; refuse anything but a regular file
 * ("PATH: not a regular file (a FIFO)"). Returns the descriptor (blocking
 * mode restored) or -1 with e set; *size receives the file size when given. */
int m3_open_regular(const char *path, long long *size, m3_err *e);
/* As m3_open_regular, as a stdio stream opened "rb"; NULL with e set. */
FILE *m3_fopen_regular(const char *path, m3_err *e);

/* An output being written: f writes to tmp, renamed to path by m3_out_commit. */
typedef struct m3_outfile {
    FILE *f;
    char *path;
    char *tmp;
} m3_outfile;

/* Create a temporary file next to path (same directory) for writing (binary
 * stream o->f). Refuses a path that exists and is not a regular file. */
int m3_out_open(m3_outfile *o, const char *path, m3_err *e);
/* Flush, close and rename the temporary file over path; on any error the
 * temporary file is removed and path is left as it was. Frees o's fields. */
int m3_out_commit(m3_outfile *o, m3_err *e);
/* Close and remove the temporary file, leaving path untouched; o may be unopened. */
void m3_out_abort(m3_outfile *o);

/* Identity of a path: device and inode of the file, or (when it does not
 * exist yet) of its directory plus its last component. */
typedef struct m3_file_id {
    dev_t dev;
    ino_t ino;
    int exists;
    char base[256];
} m3_file_id;

/* Fill *id for path; -1 when neither path nor its directory can be stat'ed. */
int m3_file_id_of(const char *path, m3_file_id *id);
/* 1 when a and b name the same file (or the same not-yet-existing path). */
int m3_file_id_eq(const m3_file_id *a, const m3_file_id *b);
/* 1 when paths a and b name the same file (see m3_file_id_of); 0 otherwise. */
int m3_same_file(const char *a, const char *b);

#endif
