/* fuzz_paths.c — the file-identity and safe-open rules of ref/fileio.h: the
 * input is a script of operations on a few names inside the fuzz directory
 * (create a file, a directory, a FIFO, a symlink or a hard link; remove one;
 * open one for reading; write one through a temporary file), and after every
 * step the identity relation must hold: m3_same_file is reflexive for
 * existing paths and symmetric, links name the same file, and no read-open
 * blocks (a FIFO without a writer is refused, not waited on). */
#include "common.h"
#include "fileio.h"

#include <fcntl.h>
#include <sys/stat.h>

#define NNAMES 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *dir = m3fuzz_dir();
    if (!dir)
        return 0;
    static const char *const names[NNAMES] = {"a", "b", "sub", "sub/c"};
    char path[NNAMES][512], alias[NNAMES][512];
    for (int i = 0; i < NNAMES; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", dir, names[i]);
        snprintf(alias[i], sizeof alias[i], "%s/.//%s", dir, names[i]); /* same file, other spelling */
    }
    for (int i = NNAMES - 1; i >= 0; i--) { /* a clean slate */
        unlink(path[i]);
        rmdir(path[i]);
    }
    for (size_t k = 0; k + 1 < size && k < 64; k += 2) {
        const int op = data[k] % 8, a = (data[k + 1] >> 4) % NNAMES, b = (data[k + 1] & 15) % NNAMES;
        m3_err e = {{0}};
        switch (op) {
        case 0: { /* a regular file */
            FILE *f = fopen(path[a], "wb");
            if (f) {
                fputc('x', f);
                fclose(f);
            }
            break;
        }
        case 1:
            mkdir(path[a], 0700);
            break;
        case 2:
            mkfifo(path[a], 0600);
            break;
        case 3:
            (void)symlink(path[b], path[a]);
            break;
        case 4:
            (void)link(path[b], path[a]);
            break;
        case 5:
            unlink(path[a]);
            rmdir(path[a]);
            break;
        case 6: { /* read-open: never blocks, refuses anything but a regular file */
            int fd = m3_open_regular(path[a], NULL, &e);
            struct stat st;
            if (fd >= 0) {
                if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
                    abort();
                close(fd);
            }
            break;
        }
        case 7: { /* an output: through a temporary file, then renamed over the path */
            m3_outfile o;
            if (m3_out_open(&o, path[a], &e) == 0) {
                fputs("out", o.f);
                if (m3_out_commit(&o, &e) == 0) {
                    struct stat st;
                    if (stat(path[a], &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != 3)
                        abort();
                }
            }
            break;
        }
        }
        /* the identity relation */
        for (int i = 0; i < NNAMES; i++) {
            struct stat st;
            int there = lstat(path[i], &st) == 0 && stat(path[i], &st) == 0;
            if (there && (!m3_same_file(path[i], path[i]) || !m3_same_file(path[i], alias[i])))
                abort();
            for (int j = 0; j < NNAMES; j++)
                if (m3_same_file(path[i], path[j]) != m3_same_file(path[j], path[i]))
                    abort();
        }
        if (op == 4) { /* a hard link names the same file as its target */
            struct stat sa, sb;
            if (stat(path[a], &sa) == 0 && stat(path[b], &sb) == 0 && sa.st_ino == sb.st_ino &&
                sa.st_dev == sb.st_dev && !m3_same_file(path[a], path[b]))
                abort();
        }
    }
    return 0;
}
