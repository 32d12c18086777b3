/* fuzz_dump.c — a port's activation dump as m3-conform reads it (M3-DUMP-*):
 * what cf_tset_load does (m3_store_open's validation, here m3_store_open_mem,
 * then cf_tset_from_store → fp32/int32 tensor set), cf_st_meta_mem,
 * cf_tset_append_rows of the set onto itself, and what a check's dump goes
 * through (cf_tset_from_dump_store against a small model golden: only judged
 * tensors widened, mis-shaped ones and unknown names from the header alone,
 * contract dtypes only, row subsets bounded by the golden). */
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

    /* the check path: a golden of a 1-layer model, T 2, H 4, V 8 */
    cf_tset golden = {0}, out = {0}, mis = {0};
    static const float z[64];
    static const int32_t zi[8];
    const int64_t th[2] = {2, 4}, tv[2] = {2, 8}, bi[3] = {1, 2, 2};
    int ok = cf_tset_add_f(&golden, "embeddings", 2, th, z, &e) == 0 &&
             cf_tset_add_f(&golden, "layers.0.input", 2, th, z, &e) == 0 &&
             cf_tset_add_f(&golden, "layers.0.output", 2, th, z, &e) == 0 &&
             cf_tset_add_i(&golden, "layers.0.attn.block_indices", 3, bi, zi, &e) == 0 &&
             cf_tset_add_f(&golden, "logits", 2, tv, z, &e) == 0;
    if (ok && m3_store_open_mem(&st, data, size, "fuzz/dump.safetensors", &e) == 0) {
        char unrec[512];
        if (cf_tset_from_dump_store(&out, &mis, st, "fuzz/dump.safetensors", &golden, unrec,
                                    sizeof unrec, &e) == 0) {
            for (int i = 0; i < out.n; i++) { /* never more than the golden holds */
                const cf_tensor *t = &out.t[i];
                const cf_tensor *g = cf_tset_get(&golden, t->name);
                if (g && t->n > g->n)
                    abort();
                m3fuzz_touch(t->is_int ? (const void *)t->i : (const void *)t->f, t->n * 4);
            }
            if (strlen(unrec) >= sizeof unrec)
                abort();
        }
        m3_store_close(st);
    }
    cf_tset_free(&golden);
    cf_tset_free(&out);
    cf_tset_free(&mis);
    return 0;
}
