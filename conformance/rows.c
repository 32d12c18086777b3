/* rows.c — row subsets of a dump: the positions its [T, ...] tensors hold.
 *
 * Spec: M3-DUMP-10 (a dump may carry an int32 `rows` tensor of positions,
 * and `NAME.rows` for one tensor; strictly ascending, inside [0, T); a
 * tensor has either all T rows or as many as its row set), M3-DUMP-11 (a
 * case's `params.rows` selector: the positions a dump must carry).
 *
 * Design: the kit never expands a subset dump; it takes the same rows out
 * of the golden tensor (cf_tensor_take_rows), so memory and time follow the
 * rows judged, and every index a message gives counts over the dump's own
 * rows.
 */
#include "conform.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const cf_tensor *cf_rows_of(const cf_tset *s, const char *name)
{
    char nm[300];
    snprintf(nm, sizeof nm, "%s.rows", name);
    const cf_tensor *r = cf_tset_get(s, nm);
    return r ? r : cf_tset_get(s, "rows");
}

/* One row set: I32 [n], n >= 1, strictly ascending, inside [0, T) (T <= 0: unchecked). */
static int check_set(const cf_tensor *r, const char *path, long T, m3_err *e)
{
    if (!r->is_int || r->ndim != 1 || r->n == 0)
        return m3_fail(e, "%s: tensor \"%s\" must be a non-empty int32 vector of positions (M3-DUMP-10)", path,
                       r->name);
    for (size_t j = 0; j < r->n; j++) {
        if (r->i[j] < 0 || (T > 0 && r->i[j] >= T))
            return m3_fail(e, "%s: tensor \"%s\" entry %zu: position %d is outside [0, %ld) (M3-DUMP-10)", path,
                           r->name, j, (int)r->i[j], T);
        if (j && r->i[j] == r->i[j - 1])
            return m3_fail(e, "%s: tensor \"%s\": position %d appears twice (entries %zu and %zu, M3-DUMP-10)",
                           path, r->name, (int)r->i[j], j - 1, j);
        if (j && r->i[j] < r->i[j - 1])
            return m3_fail(e, "%s: tensor \"%s\" entry %zu: position %d after %d; positions must ascend "
                              "(M3-DUMP-10)", path, r->name, j, (int)r->i[j], (int)r->i[j - 1]);
    }
    return 0;
}

int cf_rows_validate(const cf_tset *s, const char *path, long T, m3_err *e)
{
    for (int k = 0; k < s->n; k++) {
        const cf_tensor *r = &s->t[k];
        if (strcmp(r->name, "rows") == 0) {
            if (check_set(r, path, T, e))
                return -1;
        } else if (strlen(r->name) > 5 && strcmp(r->name + strlen(r->name) - 5, ".rows") == 0) {
            if (check_set(r, path, T, e))
                return -1;
            char nm[300];
            size_t n = strlen(r->name) - 5;
            snprintf(nm, sizeof nm, "%.*s", (int)(n < 290 ? n : 290), r->name);
            if (!cf_tset_get(s, nm))
                return m3_fail(e, "%s: tensor \"%s\" is the row set of \"%s\", which the dump does not hold "
                                  "(M3-DUMP-10)", path, r->name, nm);
        }
    }
    /* every tensor with rows: all T, or as many as its row set */
    for (int k = 0; k < s->n; k++) {
        const cf_tensor *t = &s->t[k];
        if (!cf_has_rows(t->name))
            continue;
        const cf_tensor *r = cf_rows_of(s, t->name);
        int ax = cf_row_axis(t->name);
        if (!r || t->ndim <= ax)
            continue;
        long n = (long)t->shape[ax];
        if (n != (long)r->n && (T <= 0 || n != T))
            return m3_fail(e, "%s: tensor \"%s\" has %ld rows; its row set \"%s\" has %zu positions%s (M3-DUMP-10)",
                           path, t->name, n, r->name, r->n, T > 0 ? " and the forward has" : "");
    }
    return 0;
}

int cf_tensor_subset(const cf_tensor *t, const cf_tensor *set, long T)
{
    int ax = cf_row_axis(t->name);
    if (!set || t->ndim <= ax)
        return 0;
    long n = (long)t->shape[ax];
    if (n != (long)set->n)
        return 0;
    if (T > 0 && n == T)
        return 0; /* all positions: the set is 0..T-1 */
    return 1;
}

int cf_tensor_take_rows(cf_tset *dst, const cf_tensor *g, const cf_tensor *have, const int32_t *pos, long n,
                        m3_err *e)
{
    int ax = cf_row_axis(g->name);
    if (g->ndim <= ax)
        return m3_fail(e, "tensor %s has no row axis", g->name);
    size_t outer = 1, inner = 1;
    for (int d = 0; d < ax; d++)
        outer *= (size_t)g->shape[d];
    for (int d = ax + 1; d < g->ndim; d++)
        inner *= (size_t)g->shape[d];
    long Tg = (long)g->shape[ax];
    int64_t shape[M3_MAX_DIMS];
    memcpy(shape, g->shape, sizeof shape);
    shape[ax] = n;
    size_t total = outer * (size_t)n * inner;
    long *src = malloc((size_t)(n ? n : 1) * sizeof *src);
    void *buf = malloc((total ? total : 1) * 4);
    if (!src || !buf) {
        free(src);
        free(buf);
        return m3_fail(e, "out of memory taking rows of %s", g->name);
    }
    /* the golden row holding each wanted position: itself, or through the golden's own row set */
    long h = 0;
    for (long j = 0; j < n; j++) {
        long p = pos[j];
        if (have) {
            while (h < (long)have->n && have->i[h] < p)
                h++;
            src[j] = h < (long)have->n && have->i[h] == p ? h : -1;
        } else {
            src[j] = p >= 0 && p < Tg ? p : -1;
        }
        if (src[j] < 0 || src[j] >= Tg) {
            free(src);
            free(buf);
            return m3_fail(e, "the golden %s lacks position %ld", g->name, p);
        }
    }
    for (size_t o = 0; o < outer; o++)
        for (long j = 0; j < n; j++) {
            size_t from = (o * (size_t)Tg + (size_t)src[j]) * inner, to = (o * (size_t)n + (size_t)j) * inner;
            if (g->is_int)
                memcpy((int32_t *)buf + to, g->i + from, inner * 4);
            else
                memcpy((float *)buf + to, g->f + from, inner * 4);
        }
    int rc = g->is_int ? cf_tset_add_i(dst, g->name, g->ndim, shape, buf, e)
                       : cf_tset_add_f(dst, g->name, g->ndim, shape, buf, e);
    free(src);
    free(buf);
    return rc;
}

/* ---- the case's row selector (M3-DUMP-11) ------------------------------------------- */
/* Read an optionally signed decimal at *p into *v; 0 when none. */
static int read_int(const char **p, long *v)
{
    const char *s = *p;
    int neg = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    if (!isdigit((unsigned char)*s))
        return 0;
    long x = 0;
    while (isdigit((unsigned char)*s)) {
        if (x > 100000000L)
            return 0;
        x = 10 * x + (*s++ - '0');
    }
    *v = neg ? -x : x;
    *p = s;
    return 1;
}

int cf_rows_select(const char *sel, long T, int block, const char *where, unsigned char *want, m3_err *e)
{
    if (T <= 0)
        return m3_fail(e, "%s: params.rows: the forward has no rows", where);
    memset(want, 0, (size_t)T);
    const char *p = sel;
    int terms = 0;
    for (;;) {
        while (*p == ' ')
            p++;
        const char *t0 = p;
        long a = 0, b = T, v;
        if (*p == '*') {
            p++;
            long n = 0, d = 0;
            if (strncmp(p, "blocks", 6) == 0) {
                p += 6;
                n = block;
                if (n <= 0)
                    return m3_fail(e, "%s: params.rows term \"*blocks\": the model has no index block size", where);
            } else if (!read_int(&p, &n) || n <= 0) {
                goto bad;
            }
            if (*p == '~' && (p++, !read_int(&p, &d) || d < 0))
                goto bad;
            for (long q = 0; q < T; q++) { /* within D of a multiple k*N, k >= 1: O(T) whatever N and D */
                long k1 = q / n, lo = k1 >= 1 ? q - k1 * n : -1, hi = (k1 + 1) * n - q;
                if ((lo >= 0 && lo <= d) || hi <= d)
                    want[q] = 1;
            }
        } else {
            int has_a = read_int(&p, &v);
            if (has_a)
                a = v;
            if (*p == ':') {
                p++;
                if (read_int(&p, &v))
                    b = v;
                if (a < 0)
                    a += T;
                if (b < 0)
                    b += T;
                for (long q = a < 0 ? 0 : a; q < b && q < T; q++)
                    want[q] = 1;
            } else if (has_a) {
                if (a < 0)
                    a += T;
                if (a < 0 || a >= T)
                    return m3_fail(e, "%s: params.rows term \"%.*s\": position outside [0, %ld)", where,
                                   (int)(p - t0), t0, T);
                want[a] = 1;
            } else {
                goto bad;
            }
        }
        terms++;
        while (*p == ' ')
            p++;
        if (*p == 0)
            break;
        if (*p != ',')
            goto bad;
        p++;
        continue;
    bad:
        return m3_fail(e, "%s: params.rows: cannot read the term at \"%.40s\" (terms: P, A:B, *N~D, *blocks~D; "
                          "M3-DUMP-11)", where, t0);
    }
    if (!terms)
        return m3_fail(e, "%s: params.rows is empty", where);
    return 0;
}
