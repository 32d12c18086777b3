/* fuzz_safetensors.c — a single .safetensors file image through
 * m3_store_open_mem (the validation path m3_store_open uses for a mapped file,
 * M3-FMT-ST-*); every tensor's bytes are read and must lie inside the input. */
#include "common.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    m3_store *s = NULL;
    m3_err e;
    if (m3_store_open_mem(&s, data, size, "fuzz.safetensors", &e) == 0) {
        size_t n = m3_store_count(s);
        for (size_t i = 0; i < n; i++) {
            const m3_tensor *t = m3_store_at(s, i);
            m3fuzz_touch(t->data, t->nbytes);
            if (t->nbytes && ((const uint8_t *)t->data < data ||
                              (const uint8_t *)t->data + t->nbytes > data + size))
                abort(); /* tensor bytes outside the file image */
            if (m3_tensor_numel(t) * (int64_t)m3_dtype_size(t->dtype) != (int64_t)t->nbytes)
                abort(); /* the store promised shape x dtype size == byte range */
            if (m3_store_get(s, t->name) != t)
                abort();
        }
        m3_store_close(s);
    }
    return 0;
}
