/* fuzz_case.c — a vector case.json (M3-VEC-*) through cf_case_parse and the
 * numeric param accessors. */
#include "conform.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cf_case *c = malloc(sizeof *c);
    if (!c)
        return 0;
    m3_err e;
    if (cf_case_parse(c, (const char *)data, size, "fuzz/case", &e) == 0) {
        static const char *keys[] = {"eps", "rotary_dim", "theta", "block_size", "topk",
                                     "alpha", "limit", "beta", "max_new_tokens", NULL};
        for (int i = 0; keys[i]; i++) {
            double v;
            cf_case_num_or(c, keys[i], 0.0, &v, &e);
        }
        if (c->nchunks < 0 || c->nchunks > CF_MAX_CHUNKS)
            abort();
        cf_case_free(c);
    }
    free(c);
    return 0;
}
