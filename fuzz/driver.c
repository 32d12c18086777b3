/* driver.c — run a fuzz target (LLVMFuzzerTestOneInput) over files, without
 * libFuzzer: a plain-C regression runner for the corpora (builds with gcc).
 *
 * usage: fuzz_X PATH...   each PATH is a file or a directory (its regular
 * files, not recursive). Prints the number of inputs run; exits 1 if a path
 * cannot be read. A crash or sanitizer report ends the process as usual.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "driver: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            fprintf(stderr, "driver: out of memory reading %s\n", path);
            return -1;
        }
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                continue;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    /* an exact-size copy so ASan sees reads past the input's end */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    long count = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "driver: cannot stat %s\n", argv[i]);
            bad = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) != 0)
                bad = 1;
            else
                count++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "driver: cannot open directory %s\n", argv[i]);
            bad = 1;
            continue;
        }
        char **names = NULL;
        size_t nn = 0, cap = 0;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            if (nn == cap) {
                cap = cap ? 2 * cap : 64;
                char **nl = realloc(names, cap * sizeof *nl);
                if (!nl)
                    break;
                names = nl;
            }
            size_t len = strlen(argv[i]) + strlen(de->d_name) + 2;
            names[nn] = malloc(len);
            if (!names[nn])
                break;
            snprintf(names[nn], len, "%s/%s", argv[i], de->d_name);
            nn++;
        }
        closedir(d);
        if (nn > 1)
            qsort(names, nn, sizeof *names, cmp_str);
        for (size_t k = 0; k < nn; k++) {
            struct stat fs;
            if (stat(names[k], &fs) == 0 && S_ISREG(fs.st_mode)) {
                if (run_file(names[k]) != 0)
                    bad = 1;
                else
                    count++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("%s: %ld inputs run\n", argc > 0 ? argv[0] : "driver", count);
    return bad;
}
