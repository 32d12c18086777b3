/* fuzz_tolerances.c — spec/tolerances.json (M3-TOL-*) through cf_tol_parse,
 * then profile lookup and rule matching. */
#include "conform.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cf_tolerances *t = calloc(1, sizeof *t);
    if (!t)
        return 0;
    m3_err e;
    if (cf_tol_parse(t, (const char *)data, size, "fuzz/tolerances.json", &e) == 0) {
        for (int i = 0; i < t->np; i++) {
            const cf_profile *p = cf_tol_profile(t, t->p[i].name);
            if (!p)
                abort();
            cf_tol_match(p, "model/layers.3.attn.output");
            cf_tol_match(p, "rmsnorm/y");
        }
        cf_tol_free(t);
    }
    free(t);
    return 0;
}
