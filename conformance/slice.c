/* slice.c — teacher-forced judgements in slices: layer ranges, --jobs, and
 * the slice result files that `m3-conform merge` combines.
 *
 * Spec: M3-DUMP-12 (checking a checkpoint teacher-forced in layer slices:
 * the slice result format, its case identity and kit version, and what
 * merge refuses). Teacher-forced layers are independent (each starts from
 * the dump's own layer input, M3-TOL-8 4), so a slice's records are final:
 * merging appends them and localises the whole (cf_localise, one group per
 * layer). Every record field round-trips exactly (doubles in 17 digits,
 * non-finite values as strings); the tolerance rule is re-found in the
 * profile by the record's key and must be the one the slice was judged with.
 */
#include "conform.h"
#include "fileio.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cf_parse_layers(const char *text, int L, int *a, int *b, m3_err *e)
{
    const char *p = text;
    char *end;
    if (!text || !*text)
        return m3_fail(e, "--layers: empty (want A-B or A, layers 0..%d)", L - 1);
    errno = 0;
    long x = strtol(p, &end, 10), y;
    if (end == p || *p < '0' || *p > '9' || errno) /* strtol would skip spaces and take a sign */
        return m3_fail(e, "--layers \"%.40s\": want A-B or A with 0 <= A <= B < %d", text, L);
    if (*end == '-') {
        p = end + 1;
        if (*p < '0' || *p > '9')
            return m3_fail(e, "--layers \"%.40s\": want A-B or A with 0 <= A <= B < %d", text, L);
        y = strtol(p, &end, 10);
        if (errno)
            return m3_fail(e, "--layers \"%.40s\": out of range", text);
    } else {
        y = x;
    }
    if (*end)
        return m3_fail(e, "--layers \"%.40s\": want A-B or A with 0 <= A <= B < %d", text, L);
    if (x > y)
        return m3_fail(e, "--layers %ld-%ld: the first layer is after the last", x, y);
    if (y >= L)
        return m3_fail(e, "--layers %ld-%ld: the model has %d layers (0..%d)", x, y, L, L - 1);
    *a = (int)x;
    *b = (int)y;
    return 0;
}

int cf_parse_jobs(const char *text, int *n, m3_err *e)
{
    char *end;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || end == text || *end || errno || v < 1 || v > CF_MAX_JOBS)
        return m3_fail(e, "--jobs \"%.40s\": want a whole number of worker processes, 1..%d", text ? text : "",
                       CF_MAX_JOBS);
    *n = (int)v;
    return 0;
}

/* ---- JSON of one record ------------------------------------------------------------- */
static void put_num(cJSON *o, const char *k, double v)
{
    if (isfinite(v)) { /* 17 digits: cJSON's own printer may round to 15 when they are close */
        char buf[40];
        snprintf(buf, sizeof buf, "%.17g", v);
        cJSON_AddRawToObject(o, k, buf);
    } else
        cJSON_AddStringToObject(o, k, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

static cJSON *record_json(const cf_record *x)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "tensor", x->tensor);
    cJSON_AddStringToObject(o, "key", x->key);
    cJSON_AddStringToObject(o, "component", x->component);
    cJSON_AddNumberToObject(o, "layer", x->layer);
    cJSON_AddNumberToObject(o, "order", x->order);
    cJSON_AddNumberToObject(o, "kind", x->kind);
    cJSON_AddStringToObject(o, "result", cf_result_name(x->result));
    cJSON_AddStringToObject(o, "msg", x->msg);
    cJSON_AddStringToObject(o, "not_judged", x->not_judged);
    cJSON_AddStringToObject(o, "rule", x->rule ? x->rule->match : "");
    if (x->have_metrics) {
        cJSON *m = cJSON_AddObjectToObject(o, "metrics");
        put_num(m, "nmse", x->m.nmse);
        put_num(m, "max_abs", x->m.max_abs);
        put_num(m, "max_rel", x->m.max_rel);
        put_num(m, "cos", x->m.cos);
        cJSON_AddNumberToObject(m, "n_nan", (double)x->m.n_nan);
        cJSON_AddNumberToObject(m, "n_inf_bad", (double)x->m.n_inf_bad);
        cJSON_AddNumberToObject(m, "n_ref_nan", (double)x->m.n_ref_nan);
        cJSON_AddNumberToObject(m, "first_bad", (double)x->m.first_bad);
        cJSON *w = cJSON_AddArrayToObject(m, "worst");
        for (int k = 0; w && k < 4; k++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "index", (double)x->m.worst[k]);
            put_num(e, "out", x->worst_out[k]);
            put_num(e, "ref", x->worst_ref[k]);
            cJSON_AddItemToArray(w, e);
        }
    }
    cJSON *s = cJSON_AddObjectToObject(o, "set");
    const long sv[] = {x->set.rows, x->set.rows_equal, x->set.rows_tie, x->set.rows_bad, x->set.first_bad,
                       x->set.rows_masked, x->set.rows_masked_bad, x->set.first_masked_bad, x->set.first_tie};
    cJSON *sa = cJSON_AddArrayToObject(s, "counts");
    for (size_t k = 0; sa && k < sizeof sv / sizeof sv[0]; k++)
        cJSON_AddItemToArray(sa, cJSON_CreateNumber((double)sv[k]));
    cJSON_AddStringToObject(s, "why", x->set.why);
    cJSON_AddStringToObject(s, "why_masked", x->set.why_masked);
    cJSON *t = cJSON_AddObjectToObject(o, "ties");
    const long tv[] = {x->excluded_rows, x->excl_tie_row, x->reached_rows, x->reach_tie_row, x->tie_row, x->tie_head};
    cJSON *ta = cJSON_AddArrayToObject(t, "rows");
    for (size_t k = 0; ta && k < sizeof tv / sizeof tv[0]; k++)
        cJSON_AddItemToArray(ta, cJSON_CreateNumber((double)tv[k]));
    cJSON_AddStringToObject(t, "excl_tie", x->excl_tie);
    cJSON_AddStringToObject(t, "reach_tie", x->reach_tie);
    return o;
}

/* Field readers: each names the file, the record and the field on failure. */
typedef struct rd {
    const char *name;
    int idx;
    m3_err *e;
    int bad;
} rd;

static const cJSON *field(rd *r, const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!x && !r->bad) {
        r->bad = 1;
        m3_fail(r->e, "%s: records[%d]: missing field \"%s\"", r->name, r->idx, k);
    }
    return x;
}

static void get_str(rd *r, const cJSON *o, const char *k, char *dst, size_t cap)
{
    const cJSON *x = field(r, o, k);
    if (r->bad)
        return;
    if (!cJSON_IsString(x) || strlen(x->valuestring) >= cap) {
        r->bad = 1;
        m3_fail(r->e, "%s: records[%d]: field \"%s\" must be a string of at most %zu bytes", r->name, r->idx, k,
                cap - 1);
        return;
    }
    memcpy(dst, x->valuestring, strlen(x->valuestring) + 1);
}

static double num_of(rd *r, const cJSON *x, const char *k)
{
    if (r->bad)
        return 0;
    if (cJSON_IsNumber(x))
        return x->valuedouble;
    if (cJSON_IsString(x)) {
        if (strcmp(x->valuestring, "nan") == 0)
            return NAN;
        if (strcmp(x->valuestring, "inf") == 0)
            return INFINITY;
        if (strcmp(x->valuestring, "-inf") == 0)
            return -INFINITY;
    }
    r->bad = 1;
    m3_fail(r->e, "%s: records[%d]: field \"%s\" must be a number", r->name, r->idx, k);
    return 0;
}

static double get_num(rd *r, const cJSON *o, const char *k)
{
    const cJSON *x = field(r, o, k);
    return r->bad ? 0 : num_of(r, x, k);
}

/* A whole number in [lo, hi]. */
static long get_long(rd *r, const cJSON *o, const char *k, double lo, double hi)
{
    double v = get_num(r, o, k);
    if (r->bad)
        return 0;
    if (!(v >= lo && v <= hi) || v != floor(v)) {
        r->bad = 1;
        m3_fail(r->e, "%s: records[%d]: field \"%s\" = %g is not a whole number in [%g, %g]", r->name, r->idx, k,
                v, lo, hi);
        return 0;
    }
    return (long)v;
}

static void get_longs(rd *r, const cJSON *o, const char *k, long *dst, int n)
{
    const cJSON *a = field(r, o, k);
    if (r->bad)
        return;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n) {
        r->bad = 1;
        m3_fail(r->e, "%s: records[%d]: field \"%s\" must be an array of %d numbers", r->name, r->idx, k, n);
        return;
    }
    for (int i = 0; i < n && !r->bad; i++) {
        double v = num_of(r, cJSON_GetArrayItem(a, i), k);
        if (r->bad)
            break;
        if (!(v >= -1 && v <= 1e15) || v != floor(v)) {
            r->bad = 1;
            m3_fail(r->e, "%s: records[%d]: field \"%s\"[%d] = %g is not a whole number in [-1, 1e15]",
                    r->name, r->idx, k, i, v);
            break;
        }
        dst[i] = (long)v;
    }
}

static int record_from_json(cf_record *x, const cJSON *o, const cf_profile *p, rd *r)
{
    if (!cJSON_IsObject(o))
        return m3_fail(r->e, "%s: records[%d] must be an object", r->name, r->idx);
    get_str(r, o, "tensor", x->tensor, sizeof x->tensor);
    get_str(r, o, "key", x->key, sizeof x->key);
    get_str(r, o, "component", x->component, sizeof x->component);
    x->layer = (int)get_long(r, o, "layer", -1, M3_MAX_LAYERS - 1);
    x->order = (int)get_long(r, o, "order", -1e9, 1e9);
    x->kind = (cf_cmp)get_long(r, o, "kind", 0, 2);
    char res[32] = "";
    get_str(r, o, "result", res, sizeof res);
    get_str(r, o, "msg", x->msg, sizeof x->msg);
    get_str(r, o, "not_judged", x->not_judged, sizeof x->not_judged);
    char rule[256] = "";
    get_str(r, o, "rule", rule, sizeof rule);
    if (r->bad)
        return -1;
    int found = 0;
    for (int k = 0; k < CF_RESULT_LAST; k++)
        if (strcmp(res, cf_result_name((cf_result)k)) == 0) {
            x->result = (cf_result)k;
            found = 1;
        }
    if (!found)
        return m3_fail(r->e, "%s: records[%d]: field \"result\" is \"%s\", not a result code", r->name, r->idx, res);
    if (rule[0]) {
        x->rule = cf_tol_match(p, x->key);
        if (!x->rule || strcmp(x->rule->match, rule) != 0)
            return m3_fail(r->e, "%s: records[%d] (%s): field \"rule\": judged by rule \"%s\", which the tolerance "
                                 "profile \"%s\" here does not give this tensor (other tolerances?)",
                           r->name, r->idx, x->tensor, rule, p->name);
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "metrics");
    if (m) {
        x->have_metrics = 1;
        x->m.nmse = get_num(r, m, "nmse");
        x->m.max_abs = get_num(r, m, "max_abs");
        x->m.max_rel = get_num(r, m, "max_rel");
        x->m.cos = get_num(r, m, "cos");
        x->m.n_nan = (size_t)get_long(r, m, "n_nan", 0, 1e15);
        x->m.n_inf_bad = (size_t)get_long(r, m, "n_inf_bad", 0, 1e15);
        x->m.n_ref_nan = (size_t)get_long(r, m, "n_ref_nan", 0, 1e15);
        x->m.first_bad = get_long(r, m, "first_bad", -1, 1e15);
        const cJSON *w = field(r, m, "worst");
        if (!r->bad && (!cJSON_IsArray(w) || cJSON_GetArraySize(w) != 4))
            return m3_fail(r->e, "%s: records[%d]: field \"worst\" must be an array of 4 objects", r->name, r->idx);
        for (int k = 0; k < 4 && !r->bad; k++) {
            const cJSON *q = cJSON_GetArrayItem(w, k);
            if (!cJSON_IsObject(q))
                return m3_fail(r->e, "%s: records[%d]: field \"worst\"[%d] must be an object", r->name, r->idx, k);
            x->m.worst[k] = get_long(r, q, "index", -1, 1e15);
            x->worst_out[k] = (float)get_num(r, q, "out");
            x->worst_ref[k] = (float)get_num(r, q, "ref");
        }
    }
    const cJSON *s = field(r, o, "set");
    long sv[9] = {0};
    if (!r->bad && !cJSON_IsObject(s))
        return m3_fail(r->e, "%s: records[%d]: field \"set\" must be an object", r->name, r->idx);
    if (!r->bad) {
        get_longs(r, s, "counts", sv, 9);
        get_str(r, s, "why", x->set.why, sizeof x->set.why);
        get_str(r, s, "why_masked", x->set.why_masked, sizeof x->set.why_masked);
    }
    x->set.rows = sv[0];
    x->set.rows_equal = sv[1];
    x->set.rows_tie = sv[2];
    x->set.rows_bad = sv[3];
    x->set.first_bad = sv[4];
    x->set.rows_masked = sv[5];
    x->set.rows_masked_bad = sv[6];
    x->set.first_masked_bad = sv[7];
    x->set.first_tie = sv[8];
    const cJSON *t = field(r, o, "ties");
    long tv[6] = {0};
    if (!r->bad && !cJSON_IsObject(t))
        return m3_fail(r->e, "%s: records[%d]: field \"ties\" must be an object", r->name, r->idx);
    if (!r->bad) {
        get_longs(r, t, "rows", tv, 6);
        get_str(r, t, "excl_tie", x->excl_tie, sizeof x->excl_tie);
        get_str(r, t, "reach_tie", x->reach_tie, sizeof x->reach_tie);
    }
    x->excluded_rows = tv[0];
    x->excl_tie_row = tv[1];
    x->reached_rows = tv[2];
    x->reach_tie_row = tv[3];
    x->tie_row = tv[4];
    x->tie_head = tv[5];
    return r->bad ? -1 : 0;
}

/* ---- slice files --------------------------------------------------------------------- */
int cf_slice_write(const char *path, const cf_slice *sl, const cf_report *r, m3_err *e)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return m3_fail(e, "%s: out of memory", path);
    cJSON_AddStringToObject(o, "format", CF_SLICE_FORMAT);
    cJSON_AddStringToObject(o, "kit", CF_KIT_VERSION);
    cJSON_AddStringToObject(o, "protocol", CF_PROTOCOL_VERSION);
    cJSON_AddStringToObject(o, "case", sl->identity);
    cJSON_AddStringToObject(o, "case_id", sl->case_id);
    cJSON_AddStringToObject(o, "profile", sl->profile);
    cJSON_AddStringToObject(o, "mode", sl->mode);
    cJSON *ly = cJSON_AddObjectToObject(o, "layers");
    cJSON_AddNumberToObject(ly, "from", sl->from);
    cJSON_AddNumberToObject(ly, "to", sl->to);
    cJSON_AddNumberToObject(ly, "of", sl->L);
    cJSON_AddBoolToObject(o, "head", sl->head);
    cJSON_AddNumberToObject(o, "rows_total", (double)r->rows_total);
    cJSON_AddNumberToObject(o, "rows_judged", (double)r->rows_judged);
    put_num(o, "seconds", r->seconds);
    cJSON *recs = cJSON_AddArrayToObject(o, "records");
    for (int i = 0; recs && i < r->nrec; i++) {
        cJSON *x = record_json(&r->rec[i]);
        if (!x) {
            cJSON_Delete(o);
            return m3_fail(e, "%s: out of memory", path);
        }
        cJSON_AddItemToArray(recs, x);
    }
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    if (!txt)
        return m3_fail(e, "%s: out of memory", path);
    char tmp[2100];
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    int rc = 0;
    if (fd < 0) {
        rc = m3_fail(e, "%s: cannot create a temporary file next to it (%s)", path, strerror(errno));
    } else {
        size_t n = strlen(txt), done = 0;
        while (done < n) {
            ssize_t w = write(fd, txt + done, n - done);
            if (w <= 0)
                break;
            done += (size_t)w;
        }
        if (close(fd) || done < n || rename(tmp, path)) {
            rc = m3_fail(e, "%s: write error (%s)", path, strerror(errno));
            unlink(tmp);
        }
    }
    cJSON_free(txt);
    return rc;
}

static int get_top_str(const cJSON *o, const char *k, char *dst, size_t cap, const char *name, m3_err *e)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsString(x) || strlen(x->valuestring) >= cap)
        return m3_fail(e, "%s: field \"%s\" must be a string of at most %zu bytes", name, k, cap - 1);
    memcpy(dst, x->valuestring, strlen(x->valuestring) + 1);
    return 0;
}

static int get_top_int(const cJSON *o, const char *k, int lo, int hi, int *v, const char *name, m3_err *e)
{
    if (!cJSON_IsNumber(o) && o)
        o = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(o) || o->valuedouble < lo || o->valuedouble > hi || o->valuedouble != floor(o->valuedouble))
        return m3_fail(e, "%s: field \"%s\" must be a whole number in [%d, %d]", name, k, lo, hi);
    *v = (int)o->valuedouble;
    return 0;
}

int cf_slice_parse(cf_slice *sl, const char *json, size_t len, const char *name, const cf_tolerances *tol, m3_err *e)
{
    memset(sl, 0, sizeof *sl);
    snprintf(sl->path, sizeof sl->path, "%s", name);
    cJSON *o = cJSON_ParseWithLength(json, len);
    if (!o || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return m3_fail(e, "%s: not a JSON object (a slice result of m3-conform check --result)", name);
    }
    int rc = -1;
    char fmt[64];
    if (get_top_str(o, "format", fmt, sizeof fmt, name, e))
        goto done;
    if (strcmp(fmt, CF_SLICE_FORMAT) != 0) {
        m3_fail(e, "%s: field \"format\" is \"%s\", not \"%s\"", name, fmt, CF_SLICE_FORMAT);
        goto done;
    }
    if (get_top_str(o, "kit", sl->kit, sizeof sl->kit, name, e) ||
        get_top_str(o, "case", sl->identity, sizeof sl->identity, name, e) ||
        get_top_str(o, "case_id", sl->case_id, sizeof sl->case_id, name, e) ||
        get_top_str(o, "profile", sl->profile, sizeof sl->profile, name, e) ||
        get_top_str(o, "mode", sl->mode, sizeof sl->mode, name, e))
        goto done;
    if (strcmp(sl->kit, CF_KIT_VERSION) != 0) {
        m3_fail(e, "%s: field \"kit\" is \"%s\": judged by another kit version (this is %s); re-run that slice",
                name, sl->kit, CF_KIT_VERSION);
        goto done;
    }
    const cJSON *ly = cJSON_GetObjectItemCaseSensitive(o, "layers");
    if (!cJSON_IsObject(ly)) {
        m3_fail(e, "%s: field \"layers\" must be an object {from, to, of}", name);
        goto done;
    }
    if (get_top_int(ly, "of", 1, M3_MAX_LAYERS, &sl->L, name, e) ||
        get_top_int(ly, "from", 0, sl->L - 1, &sl->from, name, e) ||
        get_top_int(ly, "to", sl->from, sl->L - 1, &sl->to, name, e))
        goto done;
    const cJSON *hd = cJSON_GetObjectItemCaseSensitive(o, "head");
    if (!cJSON_IsBool(hd)) {
        m3_fail(e, "%s: field \"head\" must be true or false", name);
        goto done;
    }
    sl->head = cJSON_IsTrue(hd);
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(o, "rows_total"), *rj = cJSON_GetObjectItemCaseSensitive(o, "rows_judged");
    if (!cJSON_IsNumber(rt) || !cJSON_IsNumber(rj) || rt->valuedouble < 0 || rj->valuedouble < 0 ||
        rj->valuedouble > rt->valuedouble || rt->valuedouble > 1e12) {
        m3_fail(e, "%s: fields \"rows_total\" and \"rows_judged\" must be numbers, 0 <= judged <= total", name);
        goto done;
    }
    sl->rep.rows_total = (long)rt->valuedouble;
    sl->rep.rows_judged = (long)rj->valuedouble;
    const cJSON *secs = cJSON_GetObjectItemCaseSensitive(o, "seconds");
    sl->rep.seconds = cJSON_IsNumber(secs) && secs->valuedouble >= 0 ? secs->valuedouble : 0;
    const cf_profile *p = cf_tol_profile(tol, sl->profile);
    if (!p) {
        m3_fail(e, "%s: field \"profile\" is \"%s\", which %s does not define", name, sl->profile, tol->path);
        goto done;
    }
    const cJSON *recs = cJSON_GetObjectItemCaseSensitive(o, "records");
    if (!cJSON_IsArray(recs)) {
        m3_fail(e, "%s: field \"records\" must be an array", name);
        goto done;
    }
    const cJSON *x;
    int idx = 0;
    cJSON_ArrayForEach(x, recs)
    {
        cf_record *rec = cf_report_add(&sl->rep);
        if (!rec) {
            m3_fail(e, "%s: out of memory", name);
            goto done;
        }
        rd r = {name, idx, e, 0};
        if (record_from_json(rec, x, p, &r))
            goto done;
        int in = rec->layer >= 0 ? rec->layer >= sl->from && rec->layer <= sl->to : sl->head || rec->order == 0;
        if (!in) {
            m3_fail(e, "%s: records[%d] (%s) lies outside the slice's layers %d-%d%s", name, idx, rec->tensor,
                    sl->from, sl->to, sl->head ? " and head" : "");
            goto done;
        }
        idx++;
    }
    rc = 0;
done:
    if (rc)
        cf_report_free(&sl->rep);
    cJSON_Delete(o);
    return rc;
}

int cf_slice_load(cf_slice *sl, const char *path, const cf_tolerances *tol, m3_err *e)
{
    char *buf;
    size_t n;
    if (m3_read_file(path, CF_SLICE_MAX_BYTES, &buf, &n, e))
        return -1;
    int rc = cf_slice_parse(sl, buf, n, path, tol, e);
    free(buf);
    return rc;
}

void cf_slice_free(cf_slice *sl)
{
    cf_report_free(&sl->rep);
}

int cf_slice_merge(cf_report *out, const cf_slice *sl, int n, m3_err *e)
{
    if (n < 1)
        return m3_fail(e, "merge: no slice results");
    const cf_slice *a = &sl[0];
    int L = a->L, heads = 0;
    unsigned char *seen = calloc((size_t)L, 1);
    if (!seen)
        return m3_fail(e, "out of memory");
    int *owner = calloc((size_t)L, sizeof *owner);
    if (!owner) {
        free(seen);
        return m3_fail(e, "out of memory");
    }
    int rc = -1;
    for (int k = 0; k < n; k++) {
        const cf_slice *s = &sl[k];
        if (strcmp(s->identity, a->identity) != 0) {
            m3_fail(e, "%s: field \"case\": another case or dump (identity %.16s...) than %s (%.16s...)", s->path,
                    s->identity, a->path, a->identity);
            goto done;
        }
        if (strcmp(s->profile, a->profile) || strcmp(s->mode, a->mode)) {
            m3_fail(e, "%s: fields \"profile\"/\"mode\" are %s/%s; %s has %s/%s", s->path, s->profile, s->mode,
                    a->path, a->profile, a->mode);
            goto done;
        }
        if (s->L != L) {
            m3_fail(e, "%s: field \"layers\".of is %d; %s has %d", s->path, s->L, a->path, L);
            goto done;
        }
        for (int i = s->from; i <= s->to; i++) {
            if (seen[i]) {
                m3_fail(e, "%s: field \"layers\": layer %d is also in %s", s->path, i, sl[owner[i]].path);
                goto done;
            }
            seen[i] = 1;
            owner[i] = k;
        }
        heads += s->head;
        if (s->head && heads > 1) {
            m3_fail(e, "%s: field \"head\": the head is judged in two slices", s->path);
            goto done;
        }
    }
    for (int i = 0; i < L; i++)
        if (!seen[i]) {
            int j = i;
            while (j + 1 < L && !seen[j + 1])
                j++;
            m3_fail(e, "merge: layers %d-%d are in no slice result (of %d layers); a verdict needs all of them", i,
                    j, L);
            goto done;
        }
    if (!heads) {
        m3_fail(e, "merge: no slice result judges the head (the slice holding layer %d does)", L - 1);
        goto done;
    }
    memset(out, 0, sizeof *out);
    out->first_fail = out->first_diverged = out->first_tie = -1;
    snprintf(out->id, sizeof out->id, "%.280s#teacher-forced", a->case_id);
    snprintf(out->component, sizeof out->component, "model");
    snprintf(out->profile, sizeof out->profile, "%s", a->profile);
    snprintf(out->target, sizeof out->target, "dump");
    out->teacher_forced = 1;
    snprintf(out->evidence, sizeof out->evidence, "computed with the teacher-forced golden");
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < sl[k].rep.nrec; i++) {
            cf_record *x = cf_report_add(out);
            if (!x) {
                cf_report_free(out);
                m3_fail(e, "out of memory");
                goto done;
            }
            *x = sl[k].rep.rec[i];
        }
        out->seconds += sl[k].rep.seconds;
        if (sl[k].rep.rows_total > out->rows_total)
            out->rows_total = sl[k].rep.rows_total;
        if (sl[k].rep.rows_judged > out->rows_judged)
            out->rows_judged = sl[k].rep.rows_judged;
    }
    cf_localise(out);
    rc = 0;
done:
    free(seen);
    free(owner);
    return rc;
}
