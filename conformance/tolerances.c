/* tolerances.c — tolerance profiles from spec/tolerances.json and glob matching.
 *
 * Spec: M3-TOL-* (profiles are data: per "<component>/<tensor>" rules with
 * NMSE, max-abs and cosine bounds, first match wins; tie_tolerance for
 * discrete choices). Thresholds are never hard-coded here.
 */
#include "conform.h"
#include "fileio.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int cf_glob(const char *p, const char *s)
{
    /* Iterative matcher with one backtrack point for the last '*'. */
    const char *star = NULL, *resume = NULL;
    while (*s) {
        if (*p == '*') {
            star = p++;
            resume = s;
            continue;
        }
        if (*p == '\\' && p[1]) {
            if (p[1] == *s) {
                p += 2;
                s++;
                continue;
            }
        } else if (*p && (*p == '?' || *p == *s)) {
            p++;
            s++;
            continue;
        }
        if (!star)
            return 0;
        p = star + 1;
        s = ++resume;
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}

void cf_tol_free(cf_tolerances *t)
{
    for (int i = 0; i < t->np; i++) {
        cf_profile *p = &t->p[i];
        for (int j = 0; j < p->nrules; j++) {
            free(p->rules[j].match);
            free(p->rules[j].why);
        }
        free(p->rules);
        free(p->name);
    }
    free(t->p);
    t->p = NULL;
    t->np = 0;
}

static int get_num(const cJSON *o, const char *key, double *v, int required, const char *where,
                   m3_err *e)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) {
        if (required)
            return m3_fail(e, "%s: missing \"%s\"", where, key);
        *v = NAN;
        return 0;
    }
    if (cJSON_IsNumber(x)) {
        *v = x->valuedouble;
    } else if (cJSON_IsString(x)) {
        char *end;
        errno = 0;
        *v = strtod(x->valuestring, &end);
        if (end == x->valuestring || *end || errno)
            return m3_fail(e, "%s: \"%s\" = \"%s\" is not a number", where, key, x->valuestring);
    } else {
        return m3_fail(e, "%s: \"%s\" must be a number", where, key);
    }
    if (!(*v >= 0) && !isnan(*v))
        return m3_fail(e, "%s: \"%s\" = %g must not be negative", where, key, *v);
    if (isnan(*v))
        return m3_fail(e, "%s: \"%s\" is NaN", where, key);
    return 0;
}

int cf_tol_parse(cf_tolerances *t, const char *json, size_t len, const char *name, m3_err *e)
{
    memset(t, 0, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", name);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root)
        return m3_fail(e, "%s: not valid JSON (near byte %ld)", name,
                       cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - json) : -1L);
    int rc = -1;
    const cJSON *profiles = cJSON_GetObjectItemCaseSensitive(root, "profiles");
    if (!cJSON_IsObject(profiles)) {
        m3_fail(e, "%s: \"profiles\" must be an object", name);
        goto done;
    }
    int np = cJSON_GetArraySize(profiles);
    t->p = calloc((size_t)(np ? np : 1), sizeof *t->p);
    if (!t->p) {
        m3_fail(e, "%s: out of memory", name);
        goto done;
    }
    const cJSON *pj;
    cJSON_ArrayForEach(pj, profiles)
    {
        cf_profile *p = &t->p[t->np++];
        char where[512];
        snprintf(where, sizeof where, "%s: profile \"%s\"", name, pj->string);
        p->name = strdup(pj->string);
        if (!p->name || !cJSON_IsObject(pj)) {
            m3_fail(e, "%s must be an object", where);
            goto done;
        }
        if (get_num(pj, "tie_tolerance", &p->tie_tolerance, 1, where, e))
            goto done;
        const cJSON *rules = cJSON_GetObjectItemCaseSensitive(pj, "rules");
        if (!cJSON_IsArray(rules) || cJSON_GetArraySize(rules) == 0) {
            m3_fail(e, "%s: \"rules\" must be a non-empty array", where);
            goto done;
        }
        int nr = cJSON_GetArraySize(rules);
        p->rules = calloc((size_t)nr, sizeof *p->rules);
        if (!p->rules) {
            m3_fail(e, "%s: out of memory", where);
            goto done;
        }
        const cJSON *rj;
        cJSON_ArrayForEach(rj, rules)
        {
            cf_rule *r = &p->rules[p->nrules++];
            char rw[600];
            snprintf(rw, sizeof rw, "%s rule %d", where, p->nrules - 1);
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(rj, "match");
            if (!cJSON_IsObject(rj) || !cJSON_IsString(m) || !m->valuestring[0]) {
                m3_fail(e, "%s: needs a non-empty string \"match\"", rw);
                goto done;
            }
            r->match = strdup(m->valuestring);
            const cJSON *why = cJSON_GetObjectItemCaseSensitive(rj, "why");
            r->why = strdup(cJSON_IsString(why) ? why->valuestring : "");
            if (!r->match || !r->why) {
                m3_fail(e, "%s: out of memory", rw);
                goto done;
            }
            if (get_num(rj, "nmse", &r->nmse, 1, rw, e) ||
                get_num(rj, "max_abs", &r->max_abs, 1, rw, e))
                goto done;
            double v;
            if (cJSON_GetObjectItemCaseSensitive(rj, "max_rel")) {
                if (get_num(rj, "max_rel", &v, 1, rw, e))
                    goto done;
                r->max_rel = v;
            } else {
                r->max_rel = -1;
            }
            if (cJSON_GetObjectItemCaseSensitive(rj, "cos_min")) {
                if (get_num(rj, "cos_min", &v, 1, rw, e))
                    goto done;
                if (v > 1) {
                    m3_fail(e, "%s: \"cos_min\" = %g is above 1", rw, v);
                    goto done;
                }
                r->cos_min = v;
            } else {
                r->cos_min = -1;
            }
        }
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc)
        cf_tol_free(t);
    return rc;
}

int cf_tol_load(cf_tolerances *t, const char *path, m3_err *e)
{
    memset(t, 0, sizeof *t);
    char *buf;
    size_t len;
    if (m3_read_file(path, 64u << 20, &buf, &len, e) != 0)
        return m3_fail_prefix(e, "tolerance profiles");
    int rc = cf_tol_parse(t, buf, len, path, e);
    free(buf);
    return rc;
}

const cf_profile *cf_tol_profile(const cf_tolerances *t, const char *name)
{
    for (int i = 0; i < t->np; i++)
        if (strcmp(t->p[i].name, name) == 0)
            return &t->p[i];
    return NULL;
}

const cf_rule *cf_tol_match(const cf_profile *p, const char *key)
{
    for (int i = 0; i < p->nrules; i++)
        if (cf_glob(p->rules[i].match, key))
            return &p->rules[i];
    return NULL;
}
