/* fuzz_index.c — model.safetensors.index.json through m3_store_open_index_mem
 * (the index validation m3_store_open uses, M3-FMT-SHARD-1). The input is the
 * index text; the shard directory (a private temp dir) holds
 * two valid shards written once per process: a.safetensors (tensor "x", f32
 * [2]) and b.safetensors (tensor "y", f32 [1]), so mutated indexes reach the
 * cross-checks between the map and the shards. */
#include "common.h"
#include "safetensors.h"

static int write_shard(const char *name, const char *tensor, int64_t n)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", m3fuzz_dir(), name);
    float v[2] = {1.0f, 2.0f};
    m3_st_writer *w = m3_st_writer_new();
    m3_err e;
    int rc = w ? m3_st_writer_add(w, tensor, M3_F32, 1, &n, v, &e) : -1;
    if (rc == 0)
        rc = m3_st_writer_save(w, path, &e);
    m3_st_writer_free(w);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready = 0; /* harness state: shards written once */
    if (!ready) {
        if (!m3fuzz_dir() || write_shard("a.safetensors", "x", 2) != 0 ||
            write_shard("b.safetensors", "y", 1) != 0)
            return 0;
        ready = 1;
    }
    m3_store *s = NULL;
    m3_err e;
    if (m3_store_open_index_mem(&s, (const char *)data, size, m3fuzz_dir(),
                                "fuzz/model.safetensors.index.json", &e) == 0) {
        for (size_t i = 0; i < m3_store_count(s); i++) {
            const m3_tensor *t = m3_store_at(s, i);
            m3fuzz_touch(t->data, t->nbytes);
        }
        m3_store_close(s);
    }
    return 0;
}
