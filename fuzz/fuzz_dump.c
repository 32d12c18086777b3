/* fuzz_dump.c — a port's activation dump as m3-conform reads it (M3-DUMP-*):
 * what cf_tset_load does (m3_store_open's validation, here m3_store_open_mem,
 * then cf_tset_from_store → fp32/int32 tensor set), cf_st_meta_mem, and
 * cf_tset_append_rows of the set onto itself. */
#include "conform.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    m3_err e;
    char meta[256];
    cf_st_meta_mem(data, size, "fuzz/dump.safetensors", "format", meta, sizeof meta, &e);
    cf_tset s = {0}, acc = {0};
    m3_store *st = NULL;
    int rc = m3_store_open_mem(&st, data, size, "fuzz/dump.safetensors", &e);
    if (rc == 0) {
        rc = cf_tset_from_store(&s, st, &e);
        m3_store_close(st);
    }
    if (rc == 0) {
        for (int i = 0; i < s.n; i++) {
            const cf_tensor *t = &s.t[i];
            if (t->is_int)
                m3fuzz_touch(t->i, t->n * sizeof *t->i);
            else
                m3fuzz_touch(t->f, t->n * sizeof *t->f);
        }
        if (cf_tset_append_rows(&acc, &s, &e) == 0)
            cf_tset_append_rows(&acc, &s, &e);
    }
    cf_tset_free(&acc);
    cf_tset_free(&s);
    return 0;
}
