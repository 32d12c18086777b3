/* safetensors.c — validated, mmap'd safetensors reader and a small writer.
 *
 * Spec: M3-FMT-ST-1..n, M3-FMT-SHARD-1 (see safetensors.h).
 *
 * Reader: every file is mapped read-only and its header validated in full
 * before any tensor is exposed. Tensor data is never read at open time (a
 * 795 GB checkpoint opens with only its headers resident). Holes between
 * tensor ranges and trailing bytes after the last range are accepted;
 * overlapping non-empty ranges are not.
 */
#include "safetensors.h"

#include "fileio.h"
#include "json.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_EXACT_INT 9007199254740992.0 /* 2^53: larger JSON numbers are not exact */

typedef struct st_file {
    char *path;
    void *map;
    size_t size;
} st_file;

struct m3_store {
    st_file *files;
    size_t nfiles;
    m3_tensor *tensors; /* sorted by name */
    size_t count, cap;
    char *root; /* path given to m3_store_open (for messages) */
};

/* ------------------------------------------------------------------ helpers */

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a > 0 && dir[a - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const m3_tensor *)a)->name, ((const m3_tensor *)b)->name);
}

/* A JSON number that must be a non-negative integer exactly representable. */
static int json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v))
        return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > MAX_EXACT_INT || floor(d) != d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

/* Describe a JSON value briefly for error messages. */
static void json_brief(const cJSON *v, char *buf, size_t n)
{
    char *s = v ? cJSON_PrintUnformatted(v) : NULL;
    if (!s) {
        snprintf(buf, n, "?");
        return;
    }
    if (strlen(s) + 1 > n && n > 4) {
        memcpy(buf, s, n - 4);
        memcpy(buf + n - 4, "...", 4);
    } else {
        snprintf(buf, n, "%s", s);
    }
    free(s);
}

static int store_push(m3_store *s, const m3_tensor *t)
{
    if (s->count == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 256;
        m3_tensor *nt = realloc(s->tensors, nc * sizeof *nt);
        if (!nt)
            return -1;
        s->tensors = nt;
        s->cap = nc;
    }
    s->tensors[s->count++] = *t;
    return 0;
}

typedef struct range {
    uint64_t begin, end;
    const char *name;
} range;

static int cmp_range(const void *a, const void *b)
{
    const range *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* ------------------------------------------------------------ one file */

/* Parse one tensor entry of file f's header into t (name already set). */
static int parse_entry(const char *fpath, const char *name, const cJSON *ent,
                       uint64_t data_size, const unsigned char *data, m3_tensor *t,
                       range *r, m3_err *e)
{
    if (!cJSON_IsObject(ent))
        return m3_fail(e, "%s: tensor %s: entry is not a JSON object", fpath, name);
    const cJSON *jdt = NULL, *jshape = NULL, *joff = NULL;
    for (const cJSON *k = ent->child; k; k = k->next) {
        if (strcmp(k->string, "dtype") == 0 && !jdt)
            jdt = k;
        else if (strcmp(k->string, "shape") == 0 && !jshape)
            jshape = k;
        else if (strcmp(k->string, "data_offsets") == 0 && !joff)
            joff = k;
        else
            return m3_fail(e, "%s: tensor %s: unexpected key '%s' in entry", fpath, name,
                           k->string);
    }
    if (!jdt || !jshape || !joff)
        return m3_fail(e, "%s: tensor %s: entry lacks '%s'", fpath, name,
                       !jdt ? "dtype" : !jshape ? "shape" : "data_offsets");
    if (!cJSON_IsString(jdt))
        return m3_fail(e, "%s: tensor %s: dtype is not a string", fpath, name);
    if (m3_dtype_parse(jdt->valuestring, &t->dtype) != 0)
        return m3_fail(e, "%s: tensor %s: unknown dtype '%s' (known: F32 F16 BF16 F64 I64 I32 "
                          "I16 I8 U8 BOOL)",
                       fpath, name, jdt->valuestring);
    if (!cJSON_IsArray(jshape))
        return m3_fail(e, "%s: tensor %s: shape is not an array", fpath, name);
    int nd = cJSON_GetArraySize(jshape);
    if (nd > M3_MAX_DIMS)
        return m3_fail(e, "%s: tensor %s: shape has too many dimensions (%d vs max %d)", fpath,
                       name, nd, M3_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    int overflow = 0;
    int i = 0;
    for (const cJSON *d = jshape->child; d; d = d->next, i++) {
        uint64_t v;
        if (json_uint(d, &v) != 0) {
            char b[64];
            json_brief(d, b, sizeof b);
            return m3_fail(e, "%s: tensor %s: shape[%d] is not a non-negative integer (%s)",
                           fpath, name, i, b);
        }
        t->shape[i] = (int64_t)v;
        if (v != 0 && numel > UINT64_MAX / v)
            overflow = 1;
        else
            numel *= v;
    }
    for (; i < M3_MAX_DIMS; i++)
        t->shape[i] = 0;
    size_t esz = m3_dtype_size(t->dtype);
    int zero = 0;
    for (i = 0; i < nd; i++)
        zero |= t->shape[i] == 0;
    if (zero) {
        numel = 0;
        overflow = 0;
    }
    if (overflow || numel > UINT64_MAX / esz)
        return m3_fail(e, "%s: tensor %s: element count x %zu bytes overflows 64 bits", fpath,
                       name, esz);
    uint64_t nbytes = numel * esz;
    if (!cJSON_IsArray(joff) || cJSON_GetArraySize(joff) != 2)
        return m3_fail(e, "%s: tensor %s: data_offsets is not a [begin, end] pair", fpath, name);
    uint64_t b, en;
    if (json_uint(joff->child, &b) != 0 || json_uint(joff->child->next, &en) != 0)
        return m3_fail(e, "%s: tensor %s: data_offsets are not non-negative integers", fpath,
                       name);
    if (b > en)
        return m3_fail(e, "%s: tensor %s: data_offsets begin > end (%llu vs %llu)", fpath, name,
                       (unsigned long long)b, (unsigned long long)en);
    if (en > data_size)
        return m3_fail(e, "%s: tensor %s: data_offsets end beyond the data section (%llu vs %llu "
                          "bytes)",
                       fpath, name, (unsigned long long)en, (unsigned long long)data_size);
    if (en - b != nbytes)
        return m3_fail(e, "%s: tensor %s: byte range does not match shape x dtype (%llu vs %llu "
                          "bytes)",
                       fpath, name, (unsigned long long)(en - b), (unsigned long long)nbytes);
    t->data = data + b;
    t->nbytes = (size_t)nbytes;
    r->begin = b;
    r->end = en;
    r->name = name;
    return 0;
}

static int parse_file(m3_store *s, const char *path, const void *map, uint64_t fsize, m3_err *e);

/* Record a file of the store (map == NULL: caller-owned memory, not unmapped);
 * returns the store's copy of path, or NULL when out of memory. */
static const char *push_file(m3_store *s, const char *path, void *map, size_t size)
{
    st_file *nf = realloc(s->files, (s->nfiles + 1) * sizeof *nf);
    if (!nf)
        return NULL;
    s->files = nf;
    st_file *f = &s->files[s->nfiles];
    f->path = xstrdup(path);
    if (!f->path)
        return NULL;
    f->map = map;
    f->size = size;
    s->nfiles++;
    return f->path;
}

/* Map file `path`, validate its header and append its tensors to s. */
static int load_file(m3_store *s, const char *path, m3_err *e)
{
    long long size = 0;
    int fd = m3_open_regular(path, &size, e); /* never blocks on a FIFO */
    if (fd < 0)
        return -1;
    uint64_t fsize = (uint64_t)size;
    if (fsize < 8) {
        close(fd);
        return m3_fail(e, "%s: file too small for a safetensors header (%llu vs 8 bytes)", path,
                       (unsigned long long)fsize);
    }
    void *map = mmap(NULL, (size_t)fsize, PROT_READ, MAP_SHARED, fd, 0);
    int merr = errno;
    close(fd);
    if (map == MAP_FAILED)
        return m3_fail(e, "%s: cannot mmap: %s", path, strerror(merr));
    const char *fpath = push_file(s, path, map, (size_t)fsize);
    if (!fpath) {
        munmap(map, (size_t)fsize);
        return m3_fail(e, "%s: out of memory", path);
    }
    return parse_file(s, fpath, map, fsize, e);
}

/* Validate the safetensors file image base[0..fsize) (mapped or in memory;
 * path names it in messages and in m3_tensor.file) and append its tensors to s.
 * The one validation path of m3_store_open and m3_store_open_mem. */
static int parse_file(m3_store *s, const char *path, const void *map, uint64_t fsize, m3_err *e)
{
    const char *fpath = path;
    if (fsize < 8)
        return m3_fail(e, "%s: file too small for a safetensors header (%llu vs 8 bytes)", path,
                       (unsigned long long)fsize);
    const unsigned char *base = map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | base[i];
    if (n < 2)
        return m3_fail(e, "%s: header length too small (%llu vs min 2)", path,
                       (unsigned long long)n);
    if (n > M3_ST_MAX_HEADER)
        return m3_fail(e, "%s: header length over the cap (%llu vs max %u bytes)", path,
                       (unsigned long long)n, (unsigned)M3_ST_MAX_HEADER);
    if (n > fsize - 8)
        return m3_fail(e, "%s: header length beyond end of file (8 + %llu vs %llu bytes)", path,
                       (unsigned long long)n, (unsigned long long)fsize);
    const char *hdr = (const char *)base + 8;
    /* a \u0000 escape would end the C string of a name early (another tensor's name) */
    for (uint64_t i = 0; i + 6 <= n; i++)
        if (hdr[i] == '\\') {
            if (memcmp(hdr + i + 1, "u0000", 5) == 0)
                return m3_fail(e, "%s: header holds a \\u0000 escape (a NUL inside a name or "
                                  "value), which is not allowed",
                               path);
            i++; /* skip the escaped character */
        }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &end, 0);
    if (!root) {
        long pos = end ? (long)(end - hdr) : -1;
        return m3_fail(e, "%s: header is not valid JSON (error near byte %ld of %llu)", path, pos,
                       (unsigned long long)n);
    }
    for (const char *p = end; p && p < hdr + n; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return m3_fail(e, "%s: header has trailing bytes after the JSON object (at byte %ld)",
                           path, (long)(p - hdr));
        }
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return m3_fail(e, "%s: header is not a JSON object", path);
    }
    uint64_t data_size = fsize - 8 - n;
    const unsigned char *data = base + 8 + n;
    size_t nent = 0;
    for (const cJSON *k = root->child; k; k = k->next)
        nent++;
    range *ranges = calloc(nent ? nent : 1, sizeof *ranges);
    if (!ranges) {
        cJSON_Delete(root);
        return m3_fail(e, "%s: out of memory", path);
    }
    size_t nr = 0, first = s->count;
    int rc = 0, seen_meta = 0;
    for (const cJSON *k = root->child; k && rc == 0; k = k->next) {
        if (strcmp(k->string, "__metadata__") == 0) {
            if (seen_meta) {
                rc = m3_fail(e, "%s: __metadata__ appears twice", path);
                break;
            }
            seen_meta = 1;
            if (!cJSON_IsObject(k)) {
                rc = m3_fail(e, "%s: __metadata__ is not a JSON object", path);
                break;
            }
            for (const cJSON *m = k->child; m; m = m->next) {
                if (!cJSON_IsString(m)) {
                    rc = m3_fail(e, "%s: __metadata__ value of '%s' is not a string", path,
                                 m->string);
                    break;
                }
            }
            continue;
        }
        if (k->string[0] == '\0') {
            rc = m3_fail(e, "%s: tensor with an empty name", path);
            break;
        }
        m3_tensor t;
        memset(&t, 0, sizeof t);
        t.name = xstrdup(k->string);
        t.file = fpath;
        if (!t.name) {
            rc = m3_fail(e, "%s: out of memory", path);
            break;
        }
        if (parse_entry(fpath, t.name, k, data_size, data, &t, &ranges[nr], e) != 0 ||
            store_push(s, &t) != 0) {
            if (s->count == 0 || s->tensors[s->count - 1].name != t.name) {
                if (!e || e->msg[0] == '\0')
                    m3_fail(e, "%s: out of memory", path);
                free((char *)t.name);
            }
            rc = -1;
            break;
        }
        ranges[nr].name = t.name;
        nr++;
    }
    cJSON_Delete(root);
    if (rc == 0 && s->count - first > 1) {
        /* duplicate names within this file */
        qsort(s->tensors + first, s->count - first, sizeof *s->tensors, cmp_tensor_name);
        for (size_t i = first + 1; i < s->count && rc == 0; i++)
            if (strcmp(s->tensors[i - 1].name, s->tensors[i].name) == 0)
                rc = m3_fail(e, "%s: tensor %s: appears twice in the header", path,
                             s->tensors[i].name);
    }
    if (rc == 0) {
        /* overlapping byte ranges (empty ranges overlap nothing) */
        qsort(ranges, nr, sizeof *ranges, cmp_range);
        const range *prev = NULL;
        for (size_t i = 0; i < nr && rc == 0; i++) {
            if (ranges[i].begin == ranges[i].end)
                continue;
            if (prev && ranges[i].begin < prev->end)
                rc = m3_fail(e, "%s: tensor %s: byte range [%llu, %llu) overlaps tensor %s "
                                "[%llu, %llu)",
                             path, ranges[i].name, (unsigned long long)ranges[i].begin,
                             (unsigned long long)ranges[i].end, prev->name,
                             (unsigned long long)prev->begin, (unsigned long long)prev->end);
            prev = &ranges[i];
        }
    }
    free(ranges);
    return rc;
}

/* ------------------------------------------------------------ sharded */

typedef struct map_ent {
    const char *name;
    const char *shard;
} map_ent;

static int cmp_map_ent(const void *a, const void *b)
{
    return strcmp(((const map_ent *)a)->name, ((const map_ent *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int read_small_file(const char *path, char **buf, size_t *len, size_t cap, m3_err *e)
{
    FILE *f = m3_fopen_regular(path, e);
    if (!f)
        return -1;
    size_t n = 0, sz = 4096;
    char *b = malloc(sz);
    if (!b) {
        fclose(f);
        return m3_fail(e, "%s: out of memory", path);
    }
    for (;;) {
        if (n == sz) {
            if (sz >= cap) {
                free(b);
                fclose(f);
                return m3_fail(e, "%s: file too large (over %zu bytes)", path, cap);
            }
            char *nb = realloc(b, sz * 2);
            if (!nb) {
                free(b);
                fclose(f);
                return m3_fail(e, "%s: out of memory", path);
            }
            b = nb;
            sz *= 2;
        }
        size_t got = fread(b + n, 1, sz - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return m3_fail(e, "%s: read error", path);
    }
    *buf = b;
    *len = n;
    return 0;
}

static int shard_name_ok(const char *s)
{
    if (!s[0] || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return 0;
    if (strchr(s, '/') || strchr(s, '\\') || strstr(s, ".."))
        return 0;
    return 1;
}

static int parse_index(m3_store *s, const char *index_path, const char *dir, const char *buf,
                       size_t len, m3_err *e);

static int load_index(m3_store *s, const char *index_path, m3_err *e)
{
    char *dir = xstrdup(index_path);
    if (!dir)
        return m3_fail(e, "%s: out of memory", index_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = '\0';
    else
        strcpy(dir, ".");
    char *buf = NULL;
    size_t len = 0;
    if (read_small_file(index_path, &buf, &len, (size_t)M3_ST_MAX_HEADER, e) != 0) {
        free(dir);
        return -1;
    }
    int rc = parse_index(s, index_path, dir, buf, len, e);
    free(buf);
    free(dir);
    return rc;
}

/* Validate index text buf[0..len) (named index_path in messages) and load the
 * shards it names from directory dir. The one validation path of the index
 * for m3_store_open and m3_store_open_index_mem. */
static int parse_index(m3_store *s, const char *index_path, const char *dir, const char *buf,
                       size_t len, m3_err *e)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    int rc = 0;
    map_ent *ents = NULL;
    const char **shards = NULL;
    size_t nents = 0, nshards = 0;
    if (!root) {
        rc = m3_fail(e, "%s: not valid JSON (error near byte %ld)", index_path,
                     end ? (long)(end - buf) : -1L);
        goto done;
    }
    const cJSON *wm = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map")
                                           : NULL;
    if (!cJSON_IsObject(wm)) {
        rc = m3_fail(e, "%s: no \"weight_map\" object", index_path);
        goto done;
    }
    for (const cJSON *k = wm->child; k; k = k->next)
        nents++;
    ents = calloc(nents ? nents : 1, sizeof *ents);
    shards = calloc(nents ? nents : 1, sizeof *shards);
    if (!ents || !shards) {
        rc = m3_fail(e, "%s: out of memory", index_path);
        goto done;
    }
    size_t i = 0;
    for (const cJSON *k = wm->child; k; k = k->next, i++) {
        if (!cJSON_IsString(k)) {
            rc = m3_fail(e, "%s: weight_map entry for %s is not a string", index_path, k->string);
            goto done;
        }
        if (!shard_name_ok(k->valuestring)) {
            rc = m3_fail(e, "%s: tensor %s: shard '%s' is not a plain file name in the index's "
                            "directory",
                         index_path, k->string, k->valuestring);
            goto done;
        }
        ents[i].name = k->string;
        ents[i].shard = k->valuestring;
        shards[i] = k->valuestring;
    }
    qsort(ents, nents, sizeof *ents, cmp_map_ent);
    for (i = 1; i < nents; i++)
        if (strcmp(ents[i - 1].name, ents[i].name) == 0) {
            rc = m3_fail(e, "%s: tensor %s: listed twice in weight_map", index_path, ents[i].name);
            goto done;
        }
    qsort(shards, nents, sizeof *shards, cmp_str);
    for (i = 0; i < nents; i++)
        if (i == 0 || strcmp(shards[i], shards[nshards - 1]) != 0)
            shards[nshards++] = shards[i];
    if (nshards > M3_ST_MAX_SHARDS) {
        rc = m3_fail(e, "%s: weight_map names %zu shards (over the cap of %d, M3_ST_MAX_SHARDS)",
                     index_path, nshards, M3_ST_MAX_SHARDS);
        goto done;
    }
    for (i = 0; i < nshards; i++) {
        char *p = path_join(dir, shards[i]);
        if (!p) {
            rc = m3_fail(e, "%s: out of memory", index_path);
            goto done;
        }
        struct stat st;
        if (stat(p, &st) != 0) {
            rc = m3_fail(e, "%s: shard %s is missing (%s)", index_path, shards[i], p);
            free(p);
            goto done;
        }
        size_t before = s->count;
        if (load_file(s, p, e) != 0) {
            free(p);
            rc = -1;
            goto done;
        }
        /* every tensor of this shard must be listed in the map under this shard */
        for (size_t j = before; j < s->count; j++) {
            map_ent key = {s->tensors[j].name, NULL};
            const map_ent *m = bsearch(&key, ents, nents, sizeof *ents, cmp_map_ent);
            if (!m) {
                rc = m3_fail(e, "%s: tensor %s: not listed in %s", p, s->tensors[j].name,
                             index_path);
                break;
            }
            if (strcmp(m->shard, shards[i]) != 0) {
                rc = m3_fail(e, "%s: tensor %s: listed in %s under shard %s", p,
                             s->tensors[j].name, index_path, m->shard);
                break;
            }
        }
        free(p);
        if (rc)
            goto done;
    }
    /* names unique across shards (each listed once ⇒ each found once), and every
     * listed name present in its shard */
    if (s->count > 1)
        qsort(s->tensors, s->count, sizeof *s->tensors, cmp_tensor_name);
    for (i = 1; i < s->count; i++)
        if (strcmp(s->tensors[i - 1].name, s->tensors[i].name) == 0) {
            rc = m3_fail(e, "tensor %s: appears in both %s and %s", s->tensors[i].name,
                         s->tensors[i - 1].file, s->tensors[i].file);
            goto done;
        }
    for (i = 0; i < nents; i++) {
        if (!m3_store_get(s, ents[i].name)) {
            rc = m3_fail(e, "%s: tensor %s: listed for shard %s but not found in it", index_path,
                         ents[i].name, ents[i].shard);
            goto done;
        }
    }
done:
    free(ents);
    free(shards);
    cJSON_Delete(root);
    return rc;
}

/* ------------------------------------------------------------ public API */

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int finish_open(m3_store **out, m3_store *s, int rc, m3_err *e);

int m3_store_open(m3_store **out, const char *path, m3_err *e)
{
    *out = NULL;
    if (e)
        e->msg[0] = '\0';
    m3_store *s = calloc(1, sizeof *s);
    if (!s)
        return m3_fail(e, "%s: out of memory", path);
    s->root = xstrdup(path);
    struct stat st;
    int rc;
    if (stat(path, &st) != 0) {
        rc = m3_fail(e, "%s: cannot open: %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        char *idx = path_join(path, "model.safetensors.index.json");
        char *one = path_join(path, "model.safetensors");
        if (!idx || !one)
            rc = m3_fail(e, "%s: out of memory", path);
        else if (stat(idx, &st) == 0)
            rc = load_index(s, idx, e);
        else if (stat(one, &st) == 0)
            rc = load_file(s, one, e);
        else
            rc = m3_fail(e, "%s: directory has neither model.safetensors.index.json nor "
                            "model.safetensors",
                         path);
        free(idx);
        free(one);
    } else if (ends_with(path, ".json")) {
        rc = load_index(s, path, e);
    } else {
        rc = load_file(s, path, e);
    }
    return finish_open(out, s, rc, e);
}

/* Common tail of the openers: sort, reject names seen twice, hand s out (or free it). */
static int finish_open(m3_store **out, m3_store *s, int rc, m3_err *e)
{
    if (rc == 0 && s->count > 1) {
        qsort(s->tensors, s->count, sizeof *s->tensors, cmp_tensor_name);
        for (size_t i = 1; i < s->count; i++)
            if (strcmp(s->tensors[i - 1].name, s->tensors[i].name) == 0) {
                rc = m3_fail(e, "tensor %s: appears in both %s and %s", s->tensors[i].name,
                             s->tensors[i - 1].file, s->tensors[i].file);
                break;
            }
    }
    if (rc != 0) {
        m3_store_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

int m3_store_open_mem(m3_store **out, const void *data, size_t size, const char *name, m3_err *e)
{
    *out = NULL;
    if (e)
        e->msg[0] = '\0';
    m3_store *s = calloc(1, sizeof *s);
    if (!s)
        return m3_fail(e, "%s: out of memory", name);
    s->root = xstrdup(name);
    const char *fpath = push_file(s, name, NULL, 0);
    int rc = fpath && s->root ? parse_file(s, fpath, data, (uint64_t)size, e)
                              : m3_fail(e, "%s: out of memory", name);
    return finish_open(out, s, rc, e);
}

int m3_store_open_index_mem(m3_store **out, const char *json, size_t len, const char *dir,
                            const char *name, m3_err *e)
{
    *out = NULL;
    if (e)
        e->msg[0] = '\0';
    m3_store *s = calloc(1, sizeof *s);
    if (!s)
        return m3_fail(e, "%s: out of memory", name);
    s->root = xstrdup(name);
    int rc = !s->root ? m3_fail(e, "%s: out of memory", name)
             : len > M3_ST_MAX_HEADER
                 ? m3_fail(e, "%s: file too large (over %u bytes)", name, (unsigned)M3_ST_MAX_HEADER)
                 : parse_index(s, name, dir, json, len, e);
    return finish_open(out, s, rc, e);
}

void m3_store_close(m3_store *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->count; i++)
        free((char *)s->tensors[i].name);
    free(s->tensors);
    for (size_t i = 0; i < s->nfiles; i++) {
        if (s->files[i].map)
            munmap(s->files[i].map, s->files[i].size);
        free(s->files[i].path);
    }
    free(s->files);
    free(s->root);
    free(s);
}

const m3_tensor *m3_store_get(const m3_store *s, const char *name)
{
    if (!s || !name || s->count == 0)
        return NULL;
    m3_tensor key;
    key.name = name;
    return bsearch(&key, s->tensors, s->count, sizeof *s->tensors, cmp_tensor_name);
}

size_t m3_store_count(const m3_store *s)
{
    return s ? s->count : 0;
}

const m3_tensor *m3_store_at(const m3_store *s, size_t i)
{
    if (!s || i >= s->count)
        return NULL;
    return &s->tensors[i];
}

int64_t m3_tensor_numel(const m3_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* ------------------------------------------------------------ writer */

typedef struct w_ent {
    char *name;
    m3_dtype dt;
    int ndim;
    int64_t shape[M3_MAX_DIMS];
    void *data;
    size_t nbytes;
    size_t cap; /* bytes allocated at data (>= nbytes; appends along the first axis grow it) */
} w_ent;

typedef struct w_meta {
    char *key, *value;
} w_meta;

struct m3_st_writer {
    w_ent *ents;
    size_t n, cap;
    w_meta *meta;
    size_t nmeta;
};

m3_st_writer *m3_st_writer_new(void)
{
    return calloc(1, sizeof(m3_st_writer));
}

void m3_st_writer_free(m3_st_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->ents[i].name);
        free(w->ents[i].data);
    }
    free(w->ents);
    for (size_t i = 0; i < w->nmeta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->meta);
    free(w);
}

int m3_st_writer_add(m3_st_writer *w, const char *name, m3_dtype dt, int ndim,
                     const int64_t *shape, const void *data, m3_err *e)
{
    if (!name || !name[0] || strcmp(name, "__metadata__") == 0)
        return m3_fail(e, "safetensors writer: invalid tensor name '%s'", name ? name : "(null)");
    if ((int)dt < 0 || dt >= M3_DTYPE_COUNT)
        return m3_fail(e, "safetensors writer: tensor %s: invalid dtype %d", name, (int)dt);
    if (ndim < 0 || ndim > M3_MAX_DIMS)
        return m3_fail(e, "safetensors writer: tensor %s: ndim %d out of range (max %d)", name,
                       ndim, M3_MAX_DIMS);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return m3_fail(e, "safetensors writer: tensor %s: negative dimension %lld", name,
                           (long long)shape[i]);
        uint64_t d = (uint64_t)shape[i];
        if (d != 0 && numel > (uint64_t)SIZE_MAX / d)
            return m3_fail(e, "safetensors writer: tensor %s: too large", name);
        numel *= d;
    }
    size_t esz = m3_dtype_size(dt);
    if (numel > SIZE_MAX / esz)
        return m3_fail(e, "safetensors writer: tensor %s: too large", name);
    size_t nbytes = (size_t)numel * esz;
    void *copy = malloc(nbytes ? nbytes : 1);
    if (!copy)
        return m3_fail(e, "safetensors writer: tensor %s: out of memory (%zu bytes)", name,
                       nbytes);
    if (nbytes)
        memcpy(copy, data, nbytes);
    w_ent *slot = NULL;
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->ents[i].name, name) == 0)
            slot = &w->ents[i];
    if (slot) {
        free(slot->data);
    } else {
        if (w->n == w->cap) {
            size_t nc = w->cap ? w->cap * 2 : 16;
            w_ent *ne = realloc(w->ents, nc * sizeof *ne);
            if (!ne) {
                free(copy);
                return m3_fail(e, "safetensors writer: out of memory");
            }
            w->ents = ne;
            w->cap = nc;
        }
        slot = &w->ents[w->n];
        slot->name = xstrdup(name);
        if (!slot->name) {
            free(copy);
            return m3_fail(e, "safetensors writer: out of memory");
        }
        w->n++;
    }
    slot->dt = dt;
    slot->ndim = ndim;
    memset(slot->shape, 0, sizeof slot->shape);
    for (int i = 0; i < ndim; i++)
        slot->shape[i] = shape[i];
    slot->data = copy;
    slot->nbytes = nbytes;
    slot->cap = nbytes;
    return 0;
}

int m3_st_writer_append(m3_st_writer *w, const char *name, m3_dtype dt, int ndim,
                        const int64_t *shape, const void *data, int ax, m3_err *e)
{
    w_ent *a = NULL;
    for (size_t i = 0; name && i < w->n; i++)
        if (strcmp(w->ents[i].name, name) == 0)
            a = &w->ents[i];
    if (!a)
        return m3_st_writer_add(w, name, dt, ndim, shape, data, e);
    if (ax < 0 || ax >= ndim || a->ndim != ndim || a->dt != dt)
        return m3_fail(e, "safetensors writer: tensor %s: cannot append a %s rank-%d part along "
                          "axis %d to a %s rank-%d tensor", name, m3_dtype_name(dt), ndim, ax,
                       m3_dtype_name(a->dt), a->ndim);
    size_t outer = 1, inner = m3_dtype_size(dt);
    for (int d = 0; d < ndim; d++) {
        if (d != ax && shape[d] != a->shape[d])
            return m3_fail(e, "safetensors writer: tensor %s: dimension %d is %lld, the part "
                              "appended has %lld", name, d, (long long)a->shape[d],
                           (long long)shape[d]);
        if (d < ax)
            outer *= (size_t)shape[d];
        else if (d > ax)
            inner *= (size_t)shape[d];
    }
    if (shape[ax] < 0 || (uint64_t)shape[ax] > (uint64_t)INT64_MAX - (uint64_t)a->shape[ax])
        return m3_fail(e, "safetensors writer: tensor %s: too large", name);
    const size_t ra = (size_t)a->shape[ax], rb = (size_t)shape[ax];
    const size_t sa = ra * inner, sb = rb * inner; /* bytes per outer slice */
    if ((sb && outer > SIZE_MAX / sb) || a->nbytes > SIZE_MAX - outer * sb)
        return m3_fail(e, "safetensors writer: tensor %s: too large", name);
    const size_t nbytes = a->nbytes + outer * sb;
    if (outer == 1) { /* rows at the end: grow geometrically, so n appends copy O(n) bytes */
        if (nbytes > a->cap) {
            size_t cap = a->cap > SIZE_MAX / 2 ? nbytes : 2 * a->cap;
            cap = cap < nbytes ? nbytes : cap;
            char *g = realloc(a->data, cap ? cap : 1);
            if (!g)
                return m3_fail(e, "safetensors writer: tensor %s: out of memory (%zu bytes)", name,
                               cap);
            a->data = g;
            a->cap = cap;
        }
        memcpy((char *)a->data + a->nbytes, data, sb);
        a->nbytes = nbytes;
        a->shape[ax] += shape[ax];
        return 0;
    }
    char *buf = malloc(nbytes ? nbytes : 1);
    if (!buf)
        return m3_fail(e, "safetensors writer: tensor %s: out of memory (%zu bytes)", name,
                       nbytes);
    for (size_t o = 0; o < outer; o++) {
        memcpy(buf + o * (sa + sb), (const char *)a->data + o * sa, sa);
        memcpy(buf + o * (sa + sb) + sa, (const char *)data + o * sb, sb);
    }
    free(a->data);
    a->data = buf;
    a->nbytes = nbytes;
    a->cap = nbytes;
    a->shape[ax] += shape[ax];
    return 0;
}

int m3_st_writer_meta(m3_st_writer *w, const char *key, const char *value, m3_err *e)
{
    if (!key || !value)
        return m3_fail(e, "safetensors writer: metadata key and value must not be NULL");
    for (size_t i = 0; i < w->nmeta; i++) {
        if (strcmp(w->meta[i].key, key) == 0) {
            char *v = xstrdup(value);
            if (!v)
                return m3_fail(e, "safetensors writer: out of memory");
            free(w->meta[i].value);
            w->meta[i].value = v;
            return 0;
        }
    }
    w_meta *nm = realloc(w->meta, (w->nmeta + 1) * sizeof *nm);
    if (!nm)
        return m3_fail(e, "safetensors writer: out of memory");
    w->meta = nm;
    nm[w->nmeta].key = xstrdup(key);
    nm[w->nmeta].value = xstrdup(value);
    if (!nm[w->nmeta].key || !nm[w->nmeta].value) {
        free(nm[w->nmeta].key);
        free(nm[w->nmeta].value);
        return m3_fail(e, "safetensors writer: out of memory");
    }
    w->nmeta++;
    return 0;
}

static void sb_str(m3_strbuf *b, const char *s)
{
    m3_strbuf_puts(b, s);
}

static void sb_json_string(m3_strbuf *b, const char *s)
{
    m3_strbuf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char tmp[8];
        if (*p == '"' || *p == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)*p;
            m3_strbuf_put(b, tmp, 2);
        } else if (*p < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", *p);
            m3_strbuf_put(b, tmp, 6);
        } else {
            m3_strbuf_put(b, (const char *)p, 1);
        }
    }
    m3_strbuf_put(b, "\"", 1);
}

static int cmp_went_ptr(const void *a, const void *b)
{
    return strcmp((*(const w_ent *const *)a)->name, (*(const w_ent *const *)b)->name);
}

int m3_st_writer_save(const m3_st_writer *w, const char *path, m3_err *e)
{
    const w_ent **order = malloc((w->n ? w->n : 1) * sizeof *order);
    if (!order)
        return m3_fail(e, "%s: out of memory", path);
    for (size_t i = 0; i < w->n; i++)
        order[i] = &w->ents[i];
    qsort(order, w->n, sizeof *order, cmp_went_ptr);
    m3_strbuf b = {0};
    char num[64];
    sb_str(&b, "{");
    int first = 1;
    if (w->nmeta) {
        sb_str(&b, "\"__metadata__\":{");
        for (size_t i = 0; i < w->nmeta; i++) {
            if (i)
                sb_str(&b, ",");
            sb_json_string(&b, w->meta[i].key);
            sb_str(&b, ":");
            sb_json_string(&b, w->meta[i].value);
        }
        sb_str(&b, "}");
        first = 0;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const w_ent *t = order[i];
        if (!first)
            sb_str(&b, ",");
        first = 0;
        sb_json_string(&b, t->name);
        sb_str(&b, ":{\"dtype\":\"");
        sb_str(&b, m3_dtype_name(t->dt));
        sb_str(&b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            sb_str(&b, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + t->nbytes));
        sb_str(&b, num);
        off += t->nbytes;
    }
    sb_str(&b, "}");
    while (!b.oom && (8 + b.n) % 8 != 0)
        sb_str(&b, " ");
    if (b.oom) {
        free(b.p);
        free(order);
        return m3_fail(e, "%s: out of memory", path);
    }
    m3_outfile out; /* a temporary file renamed over path once complete */
    if (m3_out_open(&out, path, e) != 0) {
        free(b.p);
        free(order);
        return -1;
    }
    FILE *f = out.f;
    unsigned char len8[8];
    uint64_t hn = b.n;
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hn >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(b.p, 1, b.n, f) == b.n;
    for (size_t i = 0; ok && i < w->n; i++)
        if (order[i]->nbytes)
            ok = fwrite(order[i]->data, 1, order[i]->nbytes, f) == order[i]->nbytes;
    free(b.p);
    free(order);
    if (!ok) {
        m3_out_abort(&out);
        return m3_fail(e, "%s: write failed (the old file, if any, is left as it was)", path);
    }
    return m3_out_commit(&out, e);
}
