/* fuzz_manifest.c — vectors/manifest.json (M3-VEC-*) through cf_manifest_parse
 * (what cf_manifest_load runs on the file's text). The manifest's directory
 * (a private temp dir) holds one case directory "c1" so relative entries can
 * resolve. */
#include "conform.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready = 0; /* harness state */
    if (!ready) {
        const char *d = m3fuzz_dir();
        if (!d)
            return 0;
        char sub[1200];
        snprintf(sub, sizeof sub, "%s/c1", d);
        mkdir(sub, 0700);
        ready = 1;
    }
    char p[1200];
    snprintf(p, sizeof p, "%s/manifest.json", m3fuzz_dir());
    cf_manifest *m = malloc(sizeof *m);
    if (!m)
        return 0;
    m3_err e;
    if (cf_manifest_parse(m, (const char *)data, size, p, &e) == 0)
        cf_manifest_free(m);
    free(m);
    return 0;
}
