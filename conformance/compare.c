/* compare.c — per-tensor error metrics and set comparison of discrete choices.
 *
 * Spec: M3-TOL-* (NMSE, max-abs, max-rel, cosine; non-finite values checked
 * first), M3-MSA-SELECT-* and M3-MOE-ROUTER-2 (block and expert choices are
 * sets; a differing choice is accepted only when the golden scores of the
 * swapped candidates are within the tie tolerance), M3-TOL-8 (rows that
 * depend on an accepted tie can be masked out of the set comparison).
 * Metrics accumulate in double so the judge adds no error of its own.
 */
#include "conform.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *cf_result_name(cf_result r)
{
    switch (r) {
    case CF_PASS: return "Pass";
    case CF_FAIL: return "Fail";
    case CF_WARNING: return "QualityWarning";
    case CF_NOT_SUPPORTED: return "NotSupported";
    case CF_INTERNAL_ERROR: return "InternalError";
    case CF_TIE_DIVERGED: return "TieDiverged";
    default: return "?";
    }
}

int cf_result_rank(cf_result r)
{
    switch (r) {
    case CF_PASS: return 0;
    case CF_NOT_SUPPORTED: return 1;
    case CF_WARNING: return 2;
    case CF_TIE_DIVERGED: return 3;
    case CF_FAIL: return 4;
    default: return 5;
    }
}

cf_result cf_result_worst(cf_result a, cf_result b)
{
    return cf_result_rank(b) > cf_result_rank(a) ? b : a;
}

int cf_result_conforms(cf_result r)
{
    return r == CF_PASS || r == CF_WARNING || r == CF_NOT_SUPPORTED;
}

void cf_metrics_compute(cf_metrics *m, const float *out, const float *ref, size_t n)
{
    memset(m, 0, sizeof *m);
    m->first_bad = -1;
    for (int k = 0; k < 4; k++)
        m->worst[k] = -1;
    double se = 0, sr = 0, so = 0, dot = 0, maxref = 0;
    double wv[4] = {-1, -1, -1, -1};
    for (size_t i = 0; i < n; i++) {
        double r = ref[i];
        if (isfinite(r) && fabs(r) > maxref)
            maxref = fabs(r);
    }
    double floor_rel = 1e-3 * maxref;
    if (floor_rel <= 0)
        floor_rel = 1e-30;
    for (size_t i = 0; i < n; i++) {
        float o = out[i], r = ref[i];
        if (isnan(r)) {
            m->n_ref_nan++;
            continue;
        }
        if (isnan(o)) {
            if (m->n_nan++ == 0 && m->first_bad < 0)
                m->first_bad = (long)i;
            continue;
        }
        if (isinf(o) || isinf(r)) {
            if (!(isinf(o) && isinf(r) && signbit(o) == signbit(r))) {
                if (m->n_inf_bad++ == 0 && m->first_bad < 0)
                    m->first_bad = (long)i;
            }
            continue;
        }
        double d = (double)o - (double)r;
        double ad = fabs(d);
        se += d * d;
        sr += (double)r * r;
        so += (double)o * o;
        dot += (double)o * r;
        if (ad > m->max_abs)
            m->max_abs = ad;
        double den = fabs(r) > floor_rel ? fabs(r) : floor_rel;
        if (ad / den > m->max_rel)
            m->max_rel = ad / den;
        /* keep the 4 largest errors, largest first */
        if (ad > wv[3]) {
            int p = 3;
            while (p > 0 && ad > wv[p - 1]) {
                wv[p] = wv[p - 1];
                m->worst[p] = m->worst[p - 1];
                p--;
            }
            wv[p] = ad;
            m->worst[p] = (long)i;
        }
    }
    if (sr > 0)
        m->nmse = se / sr;
    else
        m->nmse = se > 0 ? INFINITY : 0.0;
    if (so > 0 && sr > 0)
        m->cos = dot / (sqrt(so) * sqrt(sr));
    else
        m->cos = (so == 0 && sr == 0) ? 1.0 : 0.0;
    if (m->first_bad < 0)
        m->first_bad = m->worst[0];
}

/* Sort a short int array ascending (insertion sort; k is small). */
static void sort_ids(int32_t *a, int n)
{
    for (int i = 1; i < n; i++) {
        int32_t v = a[i];
        int j = i - 1;
        while (j >= 0 && a[j] > v) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = v;
    }
}

static int contains(const int32_t *a, int n, int32_t v)
{
    for (int i = 0; i < n; i++)
        if (a[i] == v)
            return 1;
    return 0;
}

#define CF_MAX_SET 1024

/* Collect the valid (non -1) ids of a row into dst sorted; returns the
 * count, or -1 for a duplicate / invalid id (why is filled). */
static int collect(int32_t *dst, const int32_t *row, int k, int ns, const char *who, char *why,
                   size_t wcap)
{
    int n = 0;
    for (int j = 0; j < k && j < CF_MAX_SET; j++) {
        int32_t v = row[j];
        if (v == -1)
            continue;
        if (v < -1 || (ns > 0 && v >= ns)) {
            snprintf(why, wcap, "%s id %d out of range [0, %d)", who, (int)v, ns);
            return -1;
        }
        if (contains(dst, n, v)) {
            snprintf(why, wcap, "%s chooses id %d twice", who, (int)v);
            return -1;
        }
        dst[n++] = v;
    }
    sort_ids(dst, n);
    return n;
}

/* Judge one row: 0 equal sets, 1 different but every swap is a tie, 2 bad
 * (why says how). */
static int judge_row(const int32_t *ro, const int32_t *rr, int k, const float *sr, int ns,
                     double tie_tol, char *why, size_t wcap)
{
    int32_t a[CF_MAX_SET], b[CF_MAX_SET], only_ref[CF_MAX_SET], only_out[CF_MAX_SET];
    int na = collect(a, ro, k, sr ? ns : 0, "port", why, wcap);
    int nb = na < 0 ? 0 : collect(b, rr, k, sr ? ns : 0, "golden", why, wcap);
    if (na < 0 || nb < 0)
        return 2;
    if (na != nb) {
        snprintf(why, wcap, "port chooses %d ids, golden %d", na, nb);
        return 2;
    }
    if (memcmp(a, b, (size_t)na * sizeof *a) == 0)
        return 0;
    int nr = 0, no = 0;
    for (int j = 0; j < nb; j++)
        if (!contains(a, na, b[j]))
            only_ref[nr++] = b[j];
    for (int j = 0; j < na; j++)
        if (!contains(b, nb, a[j]))
            only_out[no++] = a[j];
    if (!sr) {
        snprintf(why, wcap, "port chooses %d where golden chooses %d (no golden scores to judge a tie)",
                 (int)only_out[0], (int)only_ref[0]);
        return 2;
    }
    double mx = 0;
    for (int j = 0; j < ns; j++)
        if (isfinite(sr[j]) && fabs(sr[j]) > mx)
            mx = fabs(sr[j]);
    double tol = tie_tol * mx;
    for (int x = 0; x < nr; x++)
        for (int y = 0; y < no; y++) {
            double sg = sr[only_ref[x]], so = sr[only_out[y]];
            if (isinf(so) && so < 0) {
                snprintf(why, wcap, "port chooses %d, which is not a candidate (score -inf)", (int)only_out[y]);
                return 2;
            }
            if (!(fabs(sg - so) <= tol) && !(sg == so)) {
                snprintf(why, wcap,
                         "port chooses %d (golden score %.9g) instead of %d (%.9g): gap %.3g > tie tolerance %.3g",
                         (int)only_out[y], so, (int)only_ref[x], sg, fabs(sg - so), tol);
                return 2;
            }
        }
    return 1;
}

void cf_compare_sets_masked(cf_setstat *st, const int32_t *out, const int32_t *ref, long rows, int k,
                            const float *scores, int ns, double tie_tol, const unsigned char *masked,
                            signed char *state)
{
    memset(st, 0, sizeof *st);
    st->first_bad = st->first_masked_bad = st->first_tie = -1;
    st->rows = rows;
    for (long r = 0; r < rows; r++) {
        char why[256] = "";
        int v = judge_row(out + (size_t)r * (size_t)k, ref + (size_t)r * (size_t)k, k,
                          scores ? scores + (size_t)r * (size_t)ns : NULL, ns, tie_tol, why, sizeof why);
        if (state)
            state[r] = (signed char)v;
        if (masked && masked[r]) {
            st->rows_masked++;
            if (v == 2 && st->rows_masked_bad++ == 0) {
                st->first_masked_bad = r;
                snprintf(st->why_masked, sizeof st->why_masked, "row %ld: %s", r, why);
            }
        } else if (v == 0) {
            st->rows_equal++;
        } else if (v == 1) {
            if (st->rows_tie++ == 0)
                st->first_tie = r;
        } else if (st->rows_bad++ == 0) {
            st->first_bad = r;
            snprintf(st->why, sizeof st->why, "row %ld: %s", r, why);
        }
    }
}

void cf_compare_sets(cf_setstat *st, const int32_t *out, const int32_t *ref, long rows, int k,
                     const float *scores, int ns, double tie_tol)
{
    cf_compare_sets_masked(st, out, ref, rows, k, scores, ns, tie_tol, NULL, NULL);
}
