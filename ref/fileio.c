/* fileio.c — see fileio.h. */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a plain file";
}

int m3_open_regular(const char *path, long long *size, m3_err *e)
{
    /* O_NONBLOCK: open() of a FIFO without a writer would otherwise wait forever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return m3_fail(e, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return m3_fail(e, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return m3_fail(e, "%s: not a regular file (%s)", path, kind_of(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int err = errno;
        close(fd);
        return m3_fail(e, "%s: cannot set blocking mode: %s", path, strerror(err));
    }
    if (size)
        *size = (long long)st.st_size;
    return fd;
}

FILE *m3_fopen_regular(const char *path, m3_err *e)
{
    int fd = m3_open_regular(path, NULL, e);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        m3_fail(e, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

int m3_read_file(const char *path, size_t cap, char **buf, size_t *len, m3_err *e)
{
    *buf = NULL;
    *len = 0;
    FILE *f = m3_fopen_regular(path, e);
    if (!f)
        return -1;
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

/* ---- outputs ---------------------------------------------------------------- */

int m3_out_open(m3_outfile *o, const char *path, m3_err *e)
{
    memset(o, 0, sizeof *o);
    struct stat st;
    if (!*path)
        return m3_fail(e, "empty output path");
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return m3_fail(e, "%s: cannot write: not a regular file (%s)", path, kind_of(st.st_mode));
    size_t n = strlen(path);
    o->path = malloc(n + 1);
    o->tmp = malloc(n + 16);
    if (!o->path || !o->tmp) {
        m3_out_abort(o);
        return m3_fail(e, "%s: out of memory", path);
    }
    memcpy(o->path, path, n + 1);
    snprintf(o->tmp, n + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        int err = errno;
        free(o->tmp);
        o->tmp = NULL;
        m3_out_abort(o);
        return m3_fail(e, "%s: cannot create: %s", path, strerror(err));
    }
    /* mkstemp makes the file 0600; give it the usual umask-governed mode */
    mode_t um = umask(0);
    umask(um);
    (void)fchmod(fd, 0666 & ~um);
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        int err = errno;
        close(fd);
        m3_out_abort(o);
        return m3_fail(e, "%s: cannot create: %s", path, strerror(err));
    }
    return 0;
}

int m3_out_commit(m3_outfile *o, m3_err *e)
{
    int ok = o->f && fflush(o->f) == 0 && !ferror(o->f);
    int err = ok ? 0 : errno;
    if (o->f && fclose(o->f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    o->f = NULL;
    if (ok && rename(o->tmp, o->path) != 0) {
        ok = 0;
        err = errno;
    }
    int rc = 0;
    if (!ok) {
        rc = m3_fail(e, "%s: write failed%s%s (the old file, if any, is left as it was)",
                     o->path ? o->path : "?", err ? ": " : "", err ? strerror(err) : "");
        if (o->tmp)
            unlink(o->tmp);
    }
    free(o->tmp);
    free(o->path);
    o->tmp = o->path = NULL;
    return rc;
}

void m3_out_abort(m3_outfile *o)
{
    if (o->f)
        fclose(o->f);
    if (o->tmp)
        unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
}

/* ---- identity ---------------------------------------------------------------- */

int m3_file_id_of(const char *path, m3_file_id *id)
{
    memset(id, 0, sizeof *id);
    struct stat st;
    if (stat(path, &st) == 0) {
        id->dev = st.st_dev;
        id->ino = st.st_ino;
        id->exists = 1;
        return 0;
    }
    /* not there yet: the directory's identity plus the last component */
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t k = n;
    while (k > 0 && path[k - 1] != '/')
        k--;
    char dir[4096];
    if (k == 0)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(k > 1 ? k - 1 : 1), path);
    snprintf(id->base, sizeof id->base, "%.*s", (int)(n - k), path + k);
    if (stat(dir, &st) != 0)
        return -1;
    id->dev = st.st_dev;
    id->ino = st.st_ino;
    return 0;
}

int m3_file_id_eq(const m3_file_id *a, const m3_file_id *b)
{
    return a->exists == b->exists && a->dev == b->dev && a->ino == b->ino &&
           (a->exists || strcmp(a->base, b->base) == 0);
}

int m3_same_file(const char *a, const char *b)
{
    m3_file_id x, y;
    if (m3_file_id_of(a, &x) != 0 || m3_file_id_of(b, &y) != 0)
        return 0;
    return m3_file_id_eq(&x, &y);
}
