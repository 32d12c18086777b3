/* fuzz_rows.c — a dump's row sets (M3-DUMP-10) as m3-conform reads them: the
 * safetensors image through m3_store_open_mem and cf_tset_from_store, then
 * cf_rows_validate at two forward lengths; for every tensor that holds a
 * subset, cf_tensor_take_rows of its own positions through its own row set
 * must give the tensor back unchanged. */
#include "conform.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    m3_err e;
    m3_store *st = NULL;
    cf_tset s = {0};
    if (m3_store_open_mem(&st, data, size, "fuzz/rows.safetensors", &e) != 0)
        return 0;
    int rc = cf_tset_from_store(&s, st, &e);
    m3_store_close(st);
    static const long Ts[] = {20, 0};
    for (int k = 0; rc == 0 && k < 2; k++) {
        if (cf_rows_validate(&s, "fuzz/rows.safetensors", Ts[k], &e) != 0)
            continue;
        for (int i = 0; i < s.n; i++) {
            const cf_tensor *t = &s.t[i];
            const cf_tensor *rs = cf_has_rows(t->name) ? cf_rows_of(&s, t->name) : NULL;
            if (!rs || !cf_tensor_subset(t, rs, Ts[k]))
                continue;
            cf_tset out = {0};
            if (cf_tensor_take_rows(&out, t, rs, rs->i, (long)rs->n, &e) == 0) {
                const cf_tensor *u = &out.t[0];
                if (u->n != t->n || (t->n && memcmp(t->is_int ? (const void *)t->i : (const void *)t->f,
                                                    u->is_int ? (const void *)u->i : (const void *)u->f,
                                                    t->n * 4) != 0))
                    abort(); /* taking a tensor's own rows must be the identity */
            }
            cf_tset_free(&out);
        }
    }
    cf_tset_free(&s);
    return 0;
}
