/* safetensors.h — read-only, mmap'd access to safetensors checkpoints, and a
 * small writer for activation dumps and vectors.
 *
 * Spec: M3-FMT-ST-1..n (file format and the validation every header gets),
 * M3-FMT-SHARD-1 (model.safetensors.index.json).
 *
 * A store is the union of tensors from one file or from all shards named by
 * an index.json. Tensor data points into the read-only mappings; nothing is
 * copied. Every header is validated when the file is opened: JSON well
 * formed, header length within the file and under M3_ST_MAX_HEADER, dtype
 * known, shape x dtype size == byte range, ranges inside the data section
 * and not overlapping, names unique across shards.
 */
#ifndef M3_SAFETENSORS_H
#define M3_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "err.h"

#define M3_MAX_DIMS 8
#define M3_ST_MAX_HEADER (100u << 20) /* 100 MiB: a documented cap */
#define M3_ST_MAX_SHARDS 4096          /* distinct shard files one index may name */

typedef struct m3_tensor {
    const char *name;
    m3_dtype dtype;
    int ndim;
    int64_t shape[M3_MAX_DIMS];
    const void *data; /* inside a read-only mapping; valid until the store closes */
    size_t nbytes;
    const char *file; /* path of the file holding it */
} m3_tensor;

typedef struct m3_store m3_store;

/* Open path: a .safetensors file, or a directory holding
 * model.safetensors.index.json (sharded) or model.safetensors. The caller owns
 * *out and frees it with m3_store_close. */
int m3_store_open(m3_store **out, const char *path, m3_err *e);
/* As m3_store_open for one safetensors file image data[0..size) in memory
 * (same validation; name is used in messages and as m3_tensor.file). Tensor
 * data points into data, which the caller keeps alive until m3_store_close. */
int m3_store_open_mem(m3_store **out, const void *data, size_t size, const char *name, m3_err *e);
/* As m3_store_open for index.json text json[0..len) in memory (named name in
 * messages); the shards it names are loaded from directory dir. */
int m3_store_open_index_mem(m3_store **out, const char *json, size_t len, const char *dir,
                            const char *name, m3_err *e);
/* Release the mappings and the store itself; NULL is allowed. */
void m3_store_close(m3_store *s);
/* Look a tensor up by exact name; NULL when absent. */
const m3_tensor *m3_store_get(const m3_store *s, const char *name);
/* Number of tensors in the store. */
size_t m3_store_count(const m3_store *s);
/* Tensor i, 0 <= i < m3_store_count(s), in a stable (sorted by name) order. */
const m3_tensor *m3_store_at(const m3_store *s, size_t i);
/* Number of elements of t (product of its shape). */
int64_t m3_tensor_numel(const m3_tensor *t);

/* ---- writer: collects tensors in memory (copies), then saves one file ---- */
typedef struct m3_st_writer m3_st_writer;

/* New empty writer; the caller frees it with m3_st_writer_free. */
m3_st_writer *m3_st_writer_new(void);
/* Free the writer and its copies; NULL is allowed. */
void m3_st_writer_free(m3_st_writer *w);
/* Add (a copy of) a tensor; a second add with the same name replaces the first. */
int m3_st_writer_add(m3_st_writer *w, const char *name, m3_dtype dt, int ndim,
                     const int64_t *shape, const void *data, m3_err *e);
/* Append a tensor along axis ax: the first append of a name adds it; a later
 * one concatenates (every other dimension and the dtype must agree). */
int m3_st_writer_append(m3_st_writer *w, const char *name, m3_dtype dt, int ndim,
                        const int64_t *shape, const void *data, int ax, m3_err *e);
/* Add a string pair to the "__metadata__" object of the file. */
int m3_st_writer_meta(m3_st_writer *w, const char *key, const char *value, m3_err *e);
/* Write all tensors (sorted by name, 8-byte aligned header) to path. */
int m3_st_writer_save(const m3_st_writer *w, const char *path, m3_err *e);

#endif
