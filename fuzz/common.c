/* common.c — temporary files for the path-taking fuzz targets. */
#include "common.h"

#include <dirent.h>

/* One process, one fuzzer thread: the directory name is kept here. This is
 * test-harness state, not library state (ref/ has no global mutable state). */
static char g_dir[512];
static char g_paths[4][1024];

static void cleanup(void)
{
    if (!g_dir[0])
        return;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char p[1200];
            snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
}

const char *m3fuzz_dir(void)
{
    if (g_dir[0])
        return g_dir;
    const char *t = getenv("TMPDIR");
    if (!t || !*t)
        t = "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/m3fuzz.XXXXXX", t);
    if (!mkdtemp(g_dir)) {
        g_dir[0] = '\0';
        return NULL;
    }
    atexit(cleanup);
    return g_dir;
}

const char *m3fuzz_write(int slot, const char *name, const uint8_t *data, size_t size)
{
    const char *d = m3fuzz_dir();
    if (!d || slot < 0 || slot > 3)
        return NULL;
    snprintf(g_paths[slot], sizeof g_paths[slot], "%s/%s", d, name);
    FILE *f = fopen(g_paths[slot], "wb");
    if (!f)
        return NULL;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return NULL;
    }
    if (fclose(f) != 0)
        return NULL;
    return g_paths[slot];
}
