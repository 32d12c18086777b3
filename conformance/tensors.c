/* tensors.c — in-memory tensor sets: dumps and goldens loaded from
 * safetensors (floats widened to fp32, integers to int32), built from the
 * reference's dump writer, and concatenated along rows for chunked runs.
 * Spec: M3-DUMP-* (names and shapes), M3-FMT-ST-* (files read through ref/safetensors).
 */
#include "conform.h"
#include "fileio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_int_dtype(m3_dtype dt)
{
    return dt == M3_I64 || dt == M3_I32 || dt == M3_I16 || dt == M3_I8 || dt == M3_U8 ||
           dt == M3_BOOL;
}

static int64_t load_int(const void *p, m3_dtype dt, size_t i)
{
    switch (dt) {
    case M3_I64: { int64_t v; memcpy(&v, (const char *)p + 8 * i, 8); return v; }
    case M3_I32: { int32_t v; memcpy(&v, (const char *)p + 4 * i, 4); return v; }
    case M3_I16: { int16_t v; memcpy(&v, (const char *)p + 2 * i, 2); return v; }
    case M3_I8: return ((const int8_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

const cf_tensor *cf_tset_get(const cf_tset *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return &s->t[i];
    return NULL;
}

static void tensor_free(cf_tensor *t)
{
    free(t->name);
    free(t->f);
    free(t->i);
    memset(t, 0, sizeof *t);
}

void cf_tset_free(cf_tset *s)
{
    for (int i = 0; i < s->n; i++)
        tensor_free(&s->t[i]);
    free(s->t);
    memset(s, 0, sizeof *s);
}

/* A slot for name: the existing tensor (emptied) or a new one. */
static cf_tensor *slot(cf_tset *s, const char *name, m3_err *e)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0) {
            char *keep = s->t[i].name;
            s->t[i].name = NULL;
            tensor_free(&s->t[i]);
            s->t[i].name = keep;
            return &s->t[i];
        }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 32;
        cf_tensor *nt = realloc(s->t, (size_t)cap * sizeof *nt);
        if (!nt) {
            m3_fail(e, "out of memory adding tensor %s", name);
            return NULL;
        }
        s->t = nt;
        s->cap = cap;
    }
    cf_tensor *t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) {
        m3_fail(e, "out of memory adding tensor %s", name);
        return NULL;
    }
    s->n++;
    return t;
}

static int set_shape(cf_tensor *t, int ndim, const int64_t *shape, m3_err *e)
{
    if (ndim < 0 || ndim > M3_MAX_DIMS)
        return m3_fail(e, "tensor %s: %d dimensions (at most %d)", t->name, ndim, M3_MAX_DIMS);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && n > ((size_t)1 << 40) / (size_t)shape[d]))
            return m3_fail(e, "tensor %s: dimension %d = %lld is out of range", t->name, d,
                           (long long)shape[d]);
        n *= (size_t)shape[d];
        t->shape[d] = shape[d];
    }
    t->ndim = ndim;
    t->n = n;
    return 0;
}

int cf_tset_add_f(cf_tset *s, const char *name, int ndim, const int64_t *shape, const float *data,
                  m3_err *e)
{
    cf_tensor *t = slot(s, name, e);
    if (!t || set_shape(t, ndim, shape, e))
        return -1;
    t->is_int = 0;
    t->f = malloc((t->n ? t->n : 1) * sizeof(float));
    if (!t->f)
        return m3_fail(e, "out of memory for tensor %s", name);
    if (t->n)
        memcpy(t->f, data, t->n * sizeof(float));
    return 0;
}

int cf_tset_add_i(cf_tset *s, const char *name, int ndim, const int64_t *shape,
                  const int32_t *data, m3_err *e)
{
    cf_tensor *t = slot(s, name, e);
    if (!t || set_shape(t, ndim, shape, e))
        return -1;
    t->is_int = 1;
    t->i = malloc((t->n ? t->n : 1) * sizeof(int32_t));
    if (!t->i)
        return m3_fail(e, "out of memory for tensor %s", name);
    if (t->n)
        memcpy(t->i, data, t->n * sizeof(int32_t));
    return 0;
}

static int from_store(cf_tset *s, const m3_store *st, int (*keep)(const char *, void *), void *arg, m3_err *e)
{
    size_t cnt = m3_store_count(st);
    for (size_t k = 0; k < cnt; k++) {
        const m3_tensor *src = m3_store_at(st, k);
        if (keep && !keep(src->name, arg))
            continue; /* never touched: the file is mapped, so its pages are never read */
        cf_tensor *t = slot(s, src->name, e);
        if (!t || set_shape(t, src->ndim, src->shape, e))
            return m3_fail_prefix(e, "%s", src->file ? src->file : "dump");
        size_t n = t->n ? t->n : 1;
        if (is_int_dtype(src->dtype)) {
            t->is_int = 1;
            t->i = malloc(n * sizeof(int32_t));
            if (!t->i)
                return m3_fail(e, "%s: out of memory for tensor %s", src->file, src->name);
            for (size_t j = 0; j < t->n; j++) {
                int64_t v = load_int(src->data, src->dtype, j);
                if (v < INT32_MIN || v > INT32_MAX)
                    return m3_fail(e, "%s: tensor %s element %zu = %lld does not fit int32",
                                   src->file, src->name, j, (long long)v);
                t->i[j] = (int32_t)v;
            }
        } else {
            t->is_int = 0;
            t->f = malloc(n * sizeof(float));
            if (!t->f)
                return m3_fail(e, "%s: out of memory for tensor %s", src->file, src->name);
            for (size_t j = 0; j < t->n; j++)
                t->f[j] = m3_load_f32(src->data, src->dtype, j);
        }
    }
    return 0;
}

int cf_tset_from_store(cf_tset *s, const m3_store *st, m3_err *e)
{
    return from_store(s, st, NULL, NULL, e);
}

int cf_tset_load_select(cf_tset *s, const char *path, int (*keep)(const char *name, void *arg), void *arg,
                        m3_err *e)
{
    m3_store *st = NULL;
    if (m3_store_open(&st, path, e))
        return -1;
    int rc = from_store(s, st, keep, arg, e);
    m3_store_close(st);
    return rc;
}

int cf_tset_load(cf_tset *s, const char *path, m3_err *e)
{
    m3_store *st = NULL;
    if (m3_store_open(&st, path, e))
        return -1;
    int rc = cf_tset_from_store(s, st, e);
    m3_store_close(st);
    return rc;
}

int cf_tset_from_writer(cf_tset *s, const m3_st_writer *w, m3_err *e)
{
    const char *dir = getenv("TMPDIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/m3-conform-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return m3_fail(e, "cannot create a temporary file in %s", dir && *dir ? dir : "/tmp");
    close(fd);
    int rc = m3_st_writer_save(w, path, e);
    if (rc == 0)
        rc = cf_tset_load(s, path, e);
    unlink(path);
    return rc;
}

int cf_tset_append_rows(cf_tset *dst, const cf_tset *src, m3_err *e)
{
    for (int k = 0; k < src->n; k++) {
        const cf_tensor *b = &src->t[k];
        const cf_tensor *a = cf_tset_get(dst, b->name);
        if (!a) {
            int rc = b->is_int ? cf_tset_add_i(dst, b->name, b->ndim, b->shape, b->i, e)
                               : cf_tset_add_f(dst, b->name, b->ndim, b->shape, b->f, e);
            if (rc)
                return -1;
            continue;
        }
        int ax = cf_row_axis(b->name);
        if (a->ndim != b->ndim || a->is_int != b->is_int || b->ndim <= ax)
            return m3_fail(e, "chunk dumps disagree on tensor %s (rank or type)", b->name);
        for (int d = 0; d < a->ndim; d++)
            if (d != ax && a->shape[d] != b->shape[d])
                return m3_fail(e, "chunk dumps disagree on tensor %s dimension %d (%lld vs %lld)",
                               b->name, d, (long long)a->shape[d], (long long)b->shape[d]);
        /* outer = product of dims before ax, inner = product after. */
        size_t outer = 1, inner = 1;
        for (int d = 0; d < ax; d++)
            outer *= (size_t)a->shape[d];
        for (int d = ax + 1; d < a->ndim; d++)
            inner *= (size_t)a->shape[d];
        size_t ra = (size_t)a->shape[ax], rb = (size_t)b->shape[ax], esz = a->is_int ? 4 : 4;
        int64_t shape[M3_MAX_DIMS];
        memcpy(shape, a->shape, sizeof shape);
        shape[ax] = (int64_t)(ra + rb);
        size_t total = outer * (ra + rb) * inner;
        char *buf = malloc((total ? total : 1) * esz);
        if (!buf)
            return m3_fail(e, "out of memory concatenating %s", b->name);
        const char *pa = a->is_int ? (const char *)a->i : (const char *)a->f;
        const char *pb = b->is_int ? (const char *)b->i : (const char *)b->f;
        for (size_t o = 0; o < outer; o++) {
            memcpy(buf + (o * (ra + rb)) * inner * esz, pa + o * ra * inner * esz, ra * inner * esz);
            memcpy(buf + (o * (ra + rb) + ra) * inner * esz, pb + o * rb * inner * esz,
                   rb * inner * esz);
        }
        char *name = strdup(b->name);
        int rc = name ? 0 : m3_fail(e, "out of memory");
        if (!rc)
            rc = b->is_int ? cf_tset_add_i(dst, name, a->ndim, shape, (const int32_t *)buf, e)
                           : cf_tset_add_f(dst, name, a->ndim, shape, (const float *)buf, e);
        free(name);
        free(buf);
        if (rc)
            return -1;
    }
    return 0;
}

/* The string __metadata__[key] of safetensors header text h[0..len) into out
 * (empty when absent); shared by cf_st_meta and cf_st_meta_mem. */
static int meta_from_header(const char *h, size_t len, const char *path, const char *key,
                            char *out, size_t cap, m3_err *e)
{
    cJSON *root = cJSON_ParseWithLength(h, len);
    if (!root)
        return m3_fail(e, "%s: header is not valid JSON", path);
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    const cJSON *v = cJSON_IsObject(md) ? cJSON_GetObjectItemCaseSensitive(md, key) : NULL;
    if (cJSON_IsString(v))
        snprintf(out, cap, "%s", v->valuestring);
    cJSON_Delete(root);
    return 0;
}

int cf_st_header(const char *path, char **h, size_t *n, m3_err *e)
{
    *h = NULL;
    *n = 0;
    FILE *f = m3_fopen_regular(path, e);
    if (!f)
        return -1;
    unsigned char lb[8];
    uint64_t len = 0;
    if (fread(lb, 1, 8, f) != 8) {
        fclose(f);
        return m3_fail(e, "%s: shorter than the 8-byte header length", path);
    }
    for (int k = 7; k >= 0; k--)
        len = (len << 8) | lb[k];
    if (len == 0 || len > M3_ST_MAX_HEADER) {
        fclose(f);
        return m3_fail(e, "%s: header length %llu is out of range", path, (unsigned long long)len);
    }
    char *b = malloc((size_t)len + 1);
    if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        fclose(f);
        return m3_fail(e, "%s: header truncated", path);
    }
    fclose(f);
    b[len] = 0;
    *h = b;
    *n = (size_t)len;
    return 0;
}

int cf_st_meta(const char *path, const char *key, char *out, size_t cap, m3_err *e)
{
    out[0] = 0;
    char *h;
    size_t n;
    if (cf_st_header(path, &h, &n, e))
        return -1;
    int rc = meta_from_header(h, n, path, key, out, cap, e);
    free(h);
    return rc;
}

int cf_st_meta_mem(const void *data, size_t size, const char *name, const char *key, char *out,
                   size_t cap, m3_err *e)
{
    out[0] = 0;
    const unsigned char *b = data;
    uint64_t len = 0;
    if (size < 8)
        return m3_fail(e, "%s: shorter than the 8-byte header length", name);
    for (int k = 7; k >= 0; k--)
        len = (len << 8) | b[k];
    if (len == 0 || len > M3_ST_MAX_HEADER)
        return m3_fail(e, "%s: header length %llu is out of range", name, (unsigned long long)len);
    if (len > size - 8)
        return m3_fail(e, "%s: header truncated", name);
    return meta_from_header((const char *)b + 8, (size_t)len, name, key, out, cap, e);
}

/* ---- port dumps: judged from the header first -------------------------------------- */

/* Edit distance of a and b (each cut to 159 characters). */
static int edit_distance(const char *a, const char *b)
{
    int n = (int)strlen(a), m = (int)strlen(b);
    n = n > 159 ? 159 : n;
    m = m > 159 ? 159 : m;
    int prev[160], cur[160];
    for (int j = 0; j <= m; j++)
        prev[j] = j;
    for (int i = 1; i <= n; i++) {
        cur[0] = i;
        for (int j = 1; j <= m; j++) {
            int d = prev[j - 1] + (a[i - 1] != b[j - 1]);
            if (prev[j] + 1 < d)
                d = prev[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            cur[j] = d;
        }
        memcpy(prev, cur, sizeof(int) * (size_t)(m + 1));
    }
    return prev[m];
}

int cf_tset_load_dump(cf_tset *s, cf_tset *misshaped, const char *path, const cf_tset *golden,
                      char *unrec, size_t cap, m3_err *e)
{
    unrec[0] = 0;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return m3_fail(e, "%s: cannot open the dump: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
        return m3_fail(e, "%s: is a directory; a dump is one .safetensors file (M3-DUMP-1)", path);
    if (!S_ISREG(sb.st_mode))
        return m3_fail(e, "%s: not a regular file; a dump is one .safetensors file", path);
    size_t pl = strlen(path);
    if (pl >= 5 && strcmp(path + pl - 5, ".json") == 0)
        return m3_fail(e, "%s: an index.json; a dump is one .safetensors file (M3-DUMP-1)", path);
    m3_store *st = NULL;
    if (m3_store_open(&st, path, e))
        return -1;
    int rc = cf_tset_from_dump_store(s, misshaped, st, path, golden, unrec, cap, e);
    m3_store_close(st);
    return rc;
}

int cf_tset_from_dump_store(cf_tset *s, cf_tset *misshaped, const m3_store *st, const char *path,
                            const cf_tset *golden, char *unrec, size_t cap, m3_err *e)
{
    unrec[0] = 0;
    /* the model's layer count as the golden shows it (component cases have none) */
    int L = 0, model = cf_tset_get(golden, "logits") != NULL || cf_tset_get(golden, "embeddings") != NULL;
    for (int i = 0; i < golden->n; i++)
        if (strncmp(golden->t[i].name, "layers.", 7) == 0) {
            int l = atoi(golden->t[i].name + 7);
            L = l + 1 > L ? l + 1 : L;
        }
    int rc = 0, nunrec = 0;
    size_t cnt = m3_store_count(st);
    for (size_t k = 0; k < cnt && rc == 0; k++) {
        const m3_tensor *t = m3_store_at(st, k);
        if (t->dtype != M3_F32 && t->dtype != M3_BF16 && t->dtype != M3_F16 && t->dtype != M3_I32 &&
            t->dtype != M3_I64) {
            rc = m3_fail(e, "%s: tensor %s: dtype %s is outside the dump contract (F32, BF16, F16, "
                            "I32, I64; M3-DUMP-1)",
                         path, t->name, m3_dtype_name(t->dtype));
            break;
        }
        const size_t tl = strlen(t->name);
        const int is_rows = strcmp(t->name, "rows") == 0 || (tl > 5 && strcmp(t->name + tl - 5, ".rows") == 0);
        const cf_tensor *g = is_rows ? NULL : cf_tset_get(golden, t->name);
        /* a row subset (M3-DUMP-10): a companion NAME.rows or a global "rows" */
        char rn[300];
        snprintf(rn, sizeof rn, "%s.rows", t->name);
        const int subset = g && (m3_store_get(st, rn) || m3_store_get(st, "rows"));
        if (is_rows && m3_tensor_numel(t) > (int64_t)1 << 24) {
            rc = m3_fail(e, "%s: row set %s has %lld positions (over 2^24)", path, t->name,
                         (long long)m3_tensor_numel(t));
            break;
        }
        if (!g && !is_rows) { /* never widened: only the tensors judged are read */
            if (!model || cf_dump_contract_name(t->name, L))
                continue;
            if (nunrec < 6) {
                const char *best = NULL;
                int bd = 1 << 30;
                for (int i = 0; i < golden->n; i++) {
                    int d = edit_distance(t->name, golden->t[i].name);
                    if (d < bd) {
                        bd = d;
                        best = golden->t[i].name;
                    }
                }
                size_t n = strlen(unrec);
                snprintf(unrec + n, cap - n, "%s%s%s%s%s", n ? ", " : "", t->name,
                         best ? " (closest expected: " : "", best ? best : "", best ? ")" : "");
            }
            nunrec++;
            continue;
        }
        int same = 1;
        if (g && subset) /* fewer rows than the golden: no more elements than it */
            same = g->ndim == t->ndim && m3_tensor_numel(t) <= (int64_t)g->n;
        else if (g) {
            same = g->ndim == t->ndim;
            for (int d = 0; same && d < g->ndim; d++)
                same = g->shape[d] == t->shape[d];
        }
        if (!same) { /* judged from the header: shape only, data never read */
            cf_tensor *m = slot(misshaped, t->name, e);
            if (!m || set_shape(m, t->ndim, t->shape, e))
                rc = m3_fail_prefix(e, "%s", path);
            else
                m->is_int = is_int_dtype(t->dtype);
            continue;
        }
        cf_tensor *o = slot(s, t->name, e);
        if (!o || set_shape(o, t->ndim, t->shape, e)) {
            rc = m3_fail_prefix(e, "%s", path);
            break;
        }
        size_t n = o->n ? o->n : 1;
        if (is_int_dtype(t->dtype)) {
            o->is_int = 1;
            o->i = malloc(n * sizeof(int32_t));
            if (!o->i) {
                rc = m3_fail(e, "%s: out of memory for tensor %s", path, t->name);
                break;
            }
            for (size_t j = 0; j < o->n && rc == 0; j++) {
                int64_t v = load_int(t->data, t->dtype, j);
                if (v < INT32_MIN || v > INT32_MAX)
                    rc = m3_fail(e, "%s: tensor %s element %zu = %lld does not fit int32", path,
                                 t->name, j, (long long)v);
                else
                    o->i[j] = (int32_t)v;
            }
        } else {
            o->f = malloc(n * sizeof(float));
            if (!o->f) {
                rc = m3_fail(e, "%s: out of memory for tensor %s", path, t->name);
                break;
            }
            for (size_t j = 0; j < o->n; j++)
                o->f[j] = m3_load_f32(t->data, t->dtype, j); /* memcpy: any alignment */
        }
    }
    if (rc == 0 && nunrec > 6) {
        size_t n = strlen(unrec);
        snprintf(unrec + n, cap - n, " and %d more", nunrec - 6);
    }
    return rc;
}
