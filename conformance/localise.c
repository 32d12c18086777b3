/* localise.c — orders a case's records in forward order and names the first
 * divergence; every failure after it is marked "downstream" (a consequence,
 * not necessarily a second fault).
 *
 * Spec: M3-DUMP-3 (forward order of the activation names). In
 * teacher-forced reports every layer was run from its own input, so each
 * layer (and the head) is localised on its own and several independent
 * faults can show. M3-TOL-8: TieDiverged records (differences only in rows
 * that a tie-accepted row reaches) are not failures here; the report names
 * the first of them and the first tie, and counts the rows excluded.
 */
#include "conform.h"

#include <stdlib.h>
#include <string.h>

static int cmp_rec(const void *a, const void *b)
{
    const cf_record *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return strcmp(x->tensor, y->tensor);
}

/* The isolation group of a record in a teacher-forced report. */
static int group_of(const cf_record *r)
{
    if (r->layer >= 0)
        return r->layer;
    return r->order == 0 ? -1 : -2; /* embeddings, then the head and the rest */
}

static int failing(cf_result x)
{
    return x == CF_FAIL || x == CF_INTERNAL_ERROR;
}

void cf_localise(cf_report *r)
{
    if (r->nrec > 1)
        qsort(r->rec, (size_t)r->nrec, sizeof *r->rec, cmp_rec);
    r->first_fail = -1;
    cf_result worst = CF_PASS;
    int have_group = 0, cur_group = 0, group_failed = 0;
    for (int i = 0; i < r->nrec; i++) {
        cf_record *x = &r->rec[i];
        worst = cf_result_worst(worst, x->result);
        if (r->teacher_forced) {
            int g = group_of(x);
            if (!have_group || g != cur_group) {
                have_group = 1;
                cur_group = g;
                group_failed = 0;
            }
        }
        x->downstream = r->teacher_forced ? group_failed : r->first_fail >= 0;
        if (failing(x->result)) {
            if (r->first_fail < 0)
                r->first_fail = i;
            group_failed = 1;
        }
    }
    /* M3-TOL-8: the first tie that started a dependence, the first tensor
     * that differs only where such a tie reaches, and the rows excluded */
    r->first_tie = r->first_diverged = -1;
    r->rows_excluded = 0;
    r->tensors_excluded = r->ndiverged = 0;
    for (int i = 0; i < r->nrec; i++) {
        const cf_record *x = &r->rec[i];
        if (r->first_tie < 0 && x->tie_row >= 0)
            r->first_tie = i;
        if (x->result == CF_TIE_DIVERGED) {
            r->ndiverged++;
            if (r->first_diverged < 0)
                r->first_diverged = i;
        }
        if (x->excluded_rows) {
            r->rows_excluded += x->excluded_rows;
            r->tensors_excluded++;
        }
    }
    if (r->error[0])
        worst = cf_result_worst(worst, CF_INTERNAL_ERROR);
    r->result = worst;
}
