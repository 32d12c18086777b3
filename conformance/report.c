/* report.c — what people and CI read: the terminal table and progress bar,
 * JSON lines, JUnit XML, and a PNG heat-map of log10 NMSE per layer per
 * tensor type (drawn with libpng and a built-in 5x7 bitmap font).
 *
 * Spec: M3-TOL-* (result codes and the pass rule they feed; M3-TOL-8:
 * TieDiverged, the first tie and the rows excluded as its consequences). The files
 * written here carry CF_PROTOCOL_VERSION so consumers can tell formats apart.
 */
#include "canvas.h"
#include "conform.h"
#include "fileio.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- terminal ------------------------------------------------------------------ */
static const char *color_of(cf_result r, int downstream)
{
    if (downstream && r == CF_FAIL)
        return "\033[33m";
    switch (r) {
    case CF_PASS: return "\033[32m";
    case CF_FAIL: return "\033[31;1m";
    case CF_WARNING: return "\033[33m";
    case CF_NOT_SUPPORTED: return "\033[36m";
    case CF_TIE_DIVERGED: return "\033[33;1m";
    default: return "\033[35;1m";
    }
}

static void fmt_num(char *b, size_t cap, double v)
{
    if (isnan(v))
        snprintf(b, cap, "-");
    else
        snprintf(b, cap, "%.2e", v);
}

/* 1 when some per-layer internal of `layer` was not judged (capability internals). */
static int layer_internals_absent(const cf_report *r, int layer)
{
    for (int i = 0; i < r->nrec; i++)
        if (r->rec[i].layer == layer && strcmp(r->rec[i].not_judged, "internals") == 0)
            return 1;
    return 0;
}

/* The reasons records were not judged, with counts: {"internals", n}, ... */
typedef struct nj_count {
    char what[24];
    int n;
    const char *first;
} nj_count;

static int not_judged_counts(const cf_report *r, nj_count *c, int cap)
{
    int nc = 0;
    for (int i = 0; i < r->nrec; i++) {
        const cf_record *x = &r->rec[i];
        if (x->result != CF_NOT_SUPPORTED || !x->not_judged[0])
            continue;
        int k = 0;
        while (k < nc && strcmp(c[k].what, x->not_judged) != 0)
            k++;
        if (k == nc) {
            if (nc == cap)
                continue;
            snprintf(c[nc].what, sizeof c[nc].what, "%s", x->not_judged);
            c[nc].n = 0;
            c[nc].first = x->tensor;
            nc++;
        }
        c[k].n++;
    }
    return nc;
}

/* "not judged: ..." and "rows: ..." lines: what the verdict does not cover. */
static void print_not_judged(FILE *f, const cf_report *r)
{
    nj_count c[16];
    int nc = not_judged_counts(r, c, 16), total = 0;
    for (int k = 0; k < nc; k++)
        total += c[k].n;
    if (total) {
        fprintf(f, "  not judged: %d tensor%s absent from the dump (", total, total == 1 ? "" : "s");
        for (int k = 0; k < nc; k++) {
            if (strcmp(c[k].what, "embeddings") == 0)
                fprintf(f, "%sembeddings: = layers.0.input", k ? "; " : "");
            else
                fprintf(f, "%s%d of capability %s declared absent, e.g. %s", k ? "; " : "", c[k].n, c[k].what,
                        c[k].first);
        }
        fprintf(f, "); the verdict covers the other %d\n", r->nrec - total);
    }
    if (r->rows_total > 0 && r->rows_judged < r->rows_total)
        fprintf(f, "  rows: only the %ld of %ld positions the dump carries were judged (M3-DUMP-10)%s%s\n",
                r->rows_judged, r->rows_total, r->rows_note[0] ? "; " : "", r->rows_note);
}

void cf_print_report(FILE *f, const cf_report *r, int verbose, int color)
{
    const char *reset = color ? "\033[0m" : "";
    fprintf(f, "case %s  [%s, profile %s, target %s%s]\n", r->id, r->component, r->profile, r->target,
            r->teacher_forced ? ", teacher-forced" : "");
    if (r->error[0])
        fprintf(f, "  %s%s%s: %s\n", color ? color_of(CF_INTERNAL_ERROR, 0) : "", "InternalError", reset,
                r->error);
    int shown = 0, hidden = 0;
    for (int i = 0; i < r->nrec; i++) {
        const cf_record *x = &r->rec[i];
        int interesting = (x->result != CF_PASS || x->msg[0]) && x->result != CF_NOT_SUPPORTED;
        int repeat = (x->downstream && x->result == CF_FAIL) ||
                     (x->result == CF_TIE_DIVERGED && i != r->first_diverged);
        if (!verbose && (!interesting || (repeat && shown > 12))) {
            hidden += x->result != CF_PASS && x->result != CF_NOT_SUPPORTED;
            continue;
        }
        if (shown++ == 0)
            fprintf(f, "  %-34s %-15s %10s %10s %12s %10s  %s\n", "tensor", "result", "NMSE", "max-abs",
                    "cosine", "bound", "note");
        char nm[32], ma[32], co[32], bd[32];
        if (x->have_metrics && (x->m.n_nan || x->m.n_ref_nan)) {
            /* metrics over the finite pairs would read as a perfect match */
            snprintf(nm, sizeof nm, "NaN");
            snprintf(ma, sizeof ma, "NaN");
            snprintf(co, sizeof co, "NaN");
        } else if (x->have_metrics) {
            fmt_num(nm, sizeof nm, x->m.nmse);
            fmt_num(ma, sizeof ma, x->m.max_abs);
            snprintf(co, sizeof co, "%.9f", x->m.cos);
        } else if (x->kind == CF_CMP_SET && x->set.rows) {
            snprintf(nm, sizeof nm, "sets");
            snprintf(ma, sizeof ma, "%ld/%ld", x->set.rows - x->set.rows_bad, x->set.rows);
            snprintf(co, sizeof co, "ties %ld", x->set.rows_tie);
        } else {
            snprintf(nm, sizeof nm, x->kind != CF_CMP_METRICS ? "exact" : "-");
            snprintf(ma, sizeof ma, "-");
            snprintf(co, sizeof co, "-");
        }
        if (x->rule)
            snprintf(bd, sizeof bd, "%.0e", x->rule->nmse);
        else
            snprintf(bd, sizeof bd, "-");
        char res[40];
        snprintf(res, sizeof res, "%s%s", cf_result_name(x->result),
                 x->downstream && x->result == CF_FAIL ? "*" : "");
        fprintf(f, "  %-34s %s%-15s%s %10s %10s %12s %10s  %s%s\n", x->tensor,
                color ? color_of(x->result, x->downstream) : "", res, reset, nm, ma, co, bd,
                i == r->first_fail ? "FIRST DIVERGENCE: "
                : i == r->first_diverged && r->first_fail < 0 ? "FIRST TIE DIVERGENCE: "
                : "", x->msg);
    }
    if (hidden)
        fprintf(f, "  (%d more non-passing tensors downstream or after a tie; --verbose or --json for all)\n",
                hidden);
    int down = 0, unsup = 0;
    for (int i = 0; i < r->nrec; i++) {
        down += r->rec[i].downstream && r->rec[i].result == CF_FAIL;
        unsup += r->rec[i].result == CF_NOT_SUPPORTED;
    }
    if (verbose && r->nrec && shown && down)
        fprintf(f, "  (* = downstream of an earlier failure)\n");
    if (r->unrecognised[0])
        fprintf(f, "  unrecognised names in the dump: %s\n", r->unrecognised);
    if (r->result == CF_NOT_SUPPORTED)
        fprintf(f, "  verdict: %sconforms (%d tensor%s not supported)%s", color ? color_of(CF_PASS, 0) : "",
                unsup, unsup == 1 ? "" : "s", reset);
    else
        fprintf(f, "  verdict: %s%s%s", color ? color_of(r->result, 0) : "", cf_result_name(r->result), reset);
    if (r->first_fail >= 0) {
        const cf_record *x = &r->rec[r->first_fail];
        if (x->layer >= 0 && layer_internals_absent(r, x->layer))
            fprintf(f, " — first divergence: layer %d (%s; the layer's internals are not in the dump, so "
                       "localised to the layer)", x->layer, x->tensor);
        else if (x->layer >= 0)
            fprintf(f, " — first divergence: layer %d, %s (%s)", x->layer, x->component, x->tensor);
        else
            fprintf(f, " — first divergence: %s (%s)", x->component, x->tensor);
        if (down)
            fprintf(f, "; %d later failing tensor%s downstream", down, down == 1 ? "" : "s");
    } else if (r->first_diverged >= 0 && r->first_diverged < r->nrec) {
        const cf_record *x = &r->rec[r->first_diverged];
        fprintf(f, " — diverged after the tie-accepted row %ld of %s", x->reach_tie_row, x->reach_tie);
    }
    fprintf(f, "  (%d tensors, %.2fs)\n", r->nrec, r->seconds);
    print_not_judged(f, r);
    const cf_record *tie = r->first_tie >= 0 && r->first_tie < r->nrec ? &r->rec[r->first_tie] : NULL;
    if (r->result == CF_TIE_DIVERGED && r->first_diverged >= 0 && r->first_diverged < r->nrec) {
        const cf_record *d = &r->rec[r->first_diverged];
        fprintf(f, "  inconclusive (M3-TOL-8): %s row %ld was accepted as a tie (M3-TOL-3); %d later tensor%s "
                   "differ only in rows that tie reaches (first: %s). Everything else conforms. They are "
                   "judged teacher-forced (M3-TOL-8 4).\n",
                d->reach_tie, d->reach_tie_row, r->ndiverged, r->ndiverged == 1 ? "" : "s", d->tensor);
    }
    if (r->tensors_excluded) {
        fprintf(f, "  M3-TOL-8: %ld row%s of %d tensor%s excluded as consequences of tie-accepted rows",
                r->rows_excluded, r->rows_excluded == 1 ? "" : "s", r->tensors_excluded,
                r->tensors_excluded == 1 ? "" : "s");
        if (tie && tie->tie_head >= 0)
            fprintf(f, " (first tie: %s head %ld row %ld)", tie->tensor, tie->tie_head, tie->tie_row);
        else if (tie)
            fprintf(f, " (first tie: %s row %ld)", tie->tensor, tie->tie_row);
        fprintf(f, "\n");
    }
}

/* ---- JSON lines ------------------------------------------------------------------- */
static void add_num(cJSON *o, const char *k, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else if (isnan(v))
        cJSON_AddNullToObject(o, k);
    else
        cJSON_AddStringToObject(o, k, v > 0 ? "inf" : "-inf");
}

static void emit(FILE *f, cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    if (s) {
        fprintf(f, "%s\n", s);
        cJSON_free(s);
    }
    cJSON_Delete(o);
}

void cf_write_jsonl(FILE *f, const cf_report *r, const char *suite)
{
    for (int i = 0; i < r->nrec; i++) {
        const cf_record *x = &r->rec[i];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            return;
        cJSON_AddStringToObject(o, "type", "tensor");
        cJSON_AddStringToObject(o, "suite", suite ? suite : "");
        cJSON_AddStringToObject(o, "case", r->id);
        cJSON_AddStringToObject(o, "tensor", x->tensor);
        cJSON_AddStringToObject(o, "key", x->key);
        cJSON_AddNumberToObject(o, "layer", x->layer);
        cJSON_AddStringToObject(o, "component", x->component);
        cJSON_AddStringToObject(o, "result", cf_result_name(x->result));
        cJSON_AddBoolToObject(o, "downstream", x->downstream);
        cJSON_AddBoolToObject(o, "first_divergence", i == r->first_fail);
        if (x->have_metrics) {
            add_num(o, "nmse", x->m.nmse);
            add_num(o, "max_abs", x->m.max_abs);
            add_num(o, "max_rel", x->m.max_rel);
            add_num(o, "cos", x->m.cos);
            cJSON *w = cJSON_AddArrayToObject(o, "worst");
            for (int k = 0; w && k < 4 && x->m.worst[k] >= 0; k++) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "index", (double)x->m.worst[k]);
                add_num(e, "out", x->worst_out[k]);
                add_num(e, "ref", x->worst_ref[k]);
                cJSON_AddItemToArray(w, e);
            }
        }
        if (x->rule) {
            cJSON *b = cJSON_AddObjectToObject(o, "bound");
            add_num(b, "nmse", x->rule->nmse);
            add_num(b, "max_abs", x->rule->max_abs);
            if (x->rule->max_rel >= 0)
                add_num(b, "max_rel", x->rule->max_rel);
            if (x->rule->cos_min >= 0)
                add_num(b, "cos_min", x->rule->cos_min);
            cJSON_AddStringToObject(b, "match", x->rule->match);
        }
        if (x->kind == CF_CMP_SET) {
            cJSON_AddNumberToObject(o, "rows", (double)x->set.rows);
            cJSON_AddNumberToObject(o, "rows_tie", (double)x->set.rows_tie);
            cJSON_AddNumberToObject(o, "rows_bad", (double)x->set.rows_bad);
            if (x->set.rows_masked) {
                cJSON_AddNumberToObject(o, "rows_masked", (double)x->set.rows_masked);
                cJSON_AddNumberToObject(o, "rows_masked_bad", (double)x->set.rows_masked_bad);
            }
            if (x->tie_row >= 0) {
                cJSON_AddNumberToObject(o, "tie_row", (double)x->tie_row);
                if (x->tie_head >= 0)
                    cJSON_AddNumberToObject(o, "tie_head", (double)x->tie_head);
            }
        }
        if (x->excluded_rows) { /* M3-TOL-8 (a) */
            cJSON *mk = cJSON_AddObjectToObject(o, "tie_excluded");
            cJSON_AddNumberToObject(mk, "rows", (double)x->excluded_rows);
            cJSON_AddStringToObject(mk, "tie_tensor", x->excl_tie);
            cJSON_AddNumberToObject(mk, "tie_row", (double)x->excl_tie_row);
        }
        if (x->reached_rows) { /* M3-TOL-8 (b): TieDiverged */
            cJSON *mk = cJSON_AddObjectToObject(o, "tie_reached");
            cJSON_AddNumberToObject(mk, "rows", (double)x->reached_rows);
            cJSON_AddStringToObject(mk, "tie_tensor", x->reach_tie);
            cJSON_AddNumberToObject(mk, "tie_row", (double)x->reach_tie_row);
        }
        if (x->no_evidence) /* M3-VEC-11: a differing choice judged strictly, never silently */
            cJSON_AddStringToObject(o, "tie_evidence", "absent");
        cJSON_AddStringToObject(o, "msg", x->msg);
        emit(f, o);
    }
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return;
    cJSON_AddStringToObject(o, "type", "case");
    cJSON_AddStringToObject(o, "suite", suite ? suite : "");
    cJSON_AddStringToObject(o, "case", r->id);
    cJSON_AddStringToObject(o, "component", r->component);
    cJSON_AddStringToObject(o, "profile", r->profile);
    cJSON_AddStringToObject(o, "target", r->target);
    cJSON_AddBoolToObject(o, "teacher_forced", r->teacher_forced);
    cJSON_AddStringToObject(o, "result", cf_result_name(r->result));
    cJSON_AddBoolToObject(o, "conforms", cf_result_conforms(r->result));
    cJSON_AddNumberToObject(o, "tensors", r->nrec);
    /* where the golden's tie evidence came from (M3-VEC-11): a file, computed, or none */
    if (strcmp(r->target, "mutant-verdict") != 0)
        cJSON_AddStringToObject(o, "tie_evidence", r->evidence[0] ? r->evidence : "none");
    if (r->first_fail >= 0) {
        const cf_record *x = &r->rec[r->first_fail];
        cJSON *d = cJSON_AddObjectToObject(o, "first_divergence");
        cJSON_AddStringToObject(d, "tensor", x->tensor);
        cJSON_AddNumberToObject(d, "layer", x->layer);
        cJSON_AddStringToObject(d, "component", x->component);
        cJSON_AddStringToObject(d, "msg", x->msg);
    }
    if (r->first_tie >= 0 && r->first_tie < r->nrec) { /* M3-TOL-8 */
        const cf_record *x = &r->rec[r->first_tie];
        cJSON *t = cJSON_AddObjectToObject(o, "first_tie");
        cJSON_AddStringToObject(t, "tensor", x->tensor);
        cJSON_AddNumberToObject(t, "layer", x->layer);
        cJSON_AddNumberToObject(t, "row", (double)x->tie_row);
        if (x->tie_head >= 0)
            cJSON_AddNumberToObject(t, "head", (double)x->tie_head);
        cJSON_AddNumberToObject(t, "rows_tie", (double)x->set.rows_tie);
    }
    if (r->first_diverged >= 0 && r->first_diverged < r->nrec) {
        const cf_record *x = &r->rec[r->first_diverged];
        cJSON *d = cJSON_AddObjectToObject(o, "first_tie_divergence");
        cJSON_AddStringToObject(d, "tensor", x->tensor);
        cJSON_AddNumberToObject(d, "layer", x->layer);
        cJSON_AddStringToObject(d, "component", x->component);
        cJSON_AddStringToObject(d, "tie_tensor", x->reach_tie);
        cJSON_AddNumberToObject(d, "tie_row", (double)x->reach_tie_row);
        cJSON_AddNumberToObject(d, "tensors", r->ndiverged);
        cJSON_AddStringToObject(d, "msg", x->msg);
    }
    if (r->tensors_excluded) {
        cJSON *x = cJSON_AddObjectToObject(o, "tie_excluded");
        cJSON_AddNumberToObject(x, "rows", (double)r->rows_excluded);
        cJSON *names = cJSON_AddArrayToObject(x, "tensors");
        for (int i = 0; names && i < r->nrec; i++)
            if (r->rec[i].excluded_rows)
                cJSON_AddItemToArray(names, cJSON_CreateString(r->rec[i].tensor));
    }
    {
        nj_count c[16];
        int nc = not_judged_counts(r, c, 16);
        if (nc) {
            cJSON *nj = cJSON_AddObjectToObject(o, "not_judged");
            for (int k = 0; nj && k < nc; k++)
                cJSON_AddNumberToObject(nj, c[k].what, c[k].n);
        }
    }
    if (r->rows_total > 0 && r->rows_judged < r->rows_total) {
        cJSON *x = cJSON_AddObjectToObject(o, "rows");
        cJSON_AddNumberToObject(x, "judged", (double)r->rows_judged);
        cJSON_AddNumberToObject(x, "total", (double)r->rows_total);
    }
    if (r->error[0])
        cJSON_AddStringToObject(o, "error", r->error);
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    cJSON_AddStringToObject(o, "protocol", CF_PROTOCOL_VERSION);
    emit(f, o);
}

/* ---- JUnit XML --------------------------------------------------------------------- */
static void xml_esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if (c < 0x20 && c != '\n' && c != '\t')
                fputc('?', f);
            else
                fputc(c, f);
        }
    }
}

/* 1 when every record of r is NotSupported (a whole case the port cannot run). */
static int all_unsupported(const cf_report *r)
{
    if (r->result != CF_NOT_SUPPORTED || r->nrec == 0)
        return 0;
    for (int i = 0; i < r->nrec; i++)
        if (r->rec[i].result != CF_NOT_SUPPORTED)
            return 0;
    return 1;
}

int cf_write_junit(const char *path, const char *suite, const cf_report *reps, int n, m3_err *e)
{
    m3_outfile out;
    if (m3_out_open(&out, path, e) != 0)
        return m3_fail_prefix(e, "JUnit XML");
    FILE *f = out.f;
    int fails = 0, errors = 0, skipped = 0;
    double secs = 0;
    int nj = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(reps[i].target, "mutant") == 0)
            continue; /* judged through its mutant-verdict record */
        nj++;
        fails += reps[i].result == CF_FAIL || reps[i].result == CF_TIE_DIVERGED;
        errors += reps[i].result == CF_INTERNAL_ERROR;
        skipped += all_unsupported(&reps[i]);
        secs += reps[i].seconds;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"m3-conform\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\">\n",
            nj, fails, errors, skipped, secs);
    fprintf(f, "  <testsuite name=\"");
    xml_esc(f, suite ? suite : "m3");
    fprintf(f, "\" tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\">\n", nj, fails,
            errors, skipped, secs);
    fprintf(f, "    <properties><property name=\"protocol\" value=\"%s\"/></properties>\n",
            CF_PROTOCOL_VERSION);
    for (int i = 0; i < n; i++) {
        const cf_report *r = &reps[i];
        if (strcmp(r->target, "mutant") == 0)
            continue;
        fprintf(f, "    <testcase classname=\"m3.");
        xml_esc(f, r->component);
        fprintf(f, ".%s\" name=\"", r->target);
        xml_esc(f, r->id);
        fprintf(f, "\" time=\"%.3f\">\n", r->seconds);
        char msg[1200] = "";
        if (r->first_fail >= 0) {
            const cf_record *x = &r->rec[r->first_fail];
            char where[32] = "";
            if (x->layer >= 0)
                snprintf(where, sizeof where, "layer %d ", x->layer);
            snprintf(msg, sizeof msg, "first divergence: %s%s (%s): %s", where, x->component, x->tensor,
                     x->msg);
        } else if (r->first_diverged >= 0 && r->first_diverged < r->nrec) {
            const cf_record *x = &r->rec[r->first_diverged];
            snprintf(msg, sizeof msg, "inconclusive: diverged after the tie-accepted row %ld of %s (M3-TOL-8); "
                                      "re-run with --teacher-forced: %s (%s): %s",
                     x->reach_tie_row, x->reach_tie, x->tensor, x->component, x->msg);
        } else if (r->error[0]) {
            snprintf(msg, sizeof msg, "%s", r->error);
        }
        const char *tag = r->result == CF_FAIL || r->result == CF_TIE_DIVERGED ? "failure"
                          : r->result == CF_INTERNAL_ERROR ? "error" : NULL;
        if (tag) {
            fprintf(f, "      <%s message=\"", tag);
            xml_esc(f, msg);
            fprintf(f, "\" type=\"%s\">", cf_result_name(r->result));
            for (int k = 0; k < r->nrec; k++) {
                const cf_record *x = &r->rec[k];
                if (x->result == CF_PASS)
                    continue;
                fprintf(f, "%s %s%s: ", x->tensor, cf_result_name(x->result), x->downstream ? " (downstream)" : "");
                xml_esc(f, x->msg);
                fputc('\n', f);
            }
            fprintf(f, "</%s>\n", tag);
        } else if (all_unsupported(r)) {
            fprintf(f, "      <skipped message=\"NotSupported: every tensor belongs to a capability "
                       "the port declared unsupported\"/>\n");
        } else if (r->result == CF_NOT_SUPPORTED) { /* conforms; say what was not judged */
            int k = 0;
            for (int j = 0; j < r->nrec; j++)
                k += r->rec[j].result == CF_NOT_SUPPORTED;
            fprintf(f, "      <system-out>conforms (%d tensor%s not supported)</system-out>\n", k,
                    k == 1 ? "" : "s");
        }
        if (r->result == CF_WARNING) {
            fprintf(f, "      <system-out>QualityWarning:");
            for (int k = 0; k < r->nrec; k++)
                if (r->rec[k].result == CF_WARNING) {
                    fprintf(f, " %s (", r->rec[k].tensor);
                    xml_esc(f, r->rec[k].msg);
                    fprintf(f, ")");
                }
            fprintf(f, "</system-out>\n");
        }
        fprintf(f, "    </testcase>\n");
    }
    fprintf(f, "  </testsuite>\n</testsuites>\n");
    return m3_out_commit(&out, e);
}

/* ---- PNG heat-map --------------------------------------------------------------------- */
/* log10 error in [-16, 0] to a dark-blue..green..yellow ramp. */
static void ramp(double v, unsigned char out[3])
{
    cf_viridis((v + 16.0) / 16.0, out);
}

/* Row names of a model panel, in forward order, from the table of dump names
 * (names.c): the embeddings, every per-layer name but the float block scores,
 * then the head's and the decode's names. */
#define MAX_ROWS 32
static int panel_rows(const char **rows)
{
    int n = 0, nt = 0, nl = 0;
    const cf_name *t = cf_name_table(&nt), *l = cf_name_layer_leaves(&nl);
    for (int k = 0; k < nt; k++)
        if (t[k].scope == CF_SCOPE_TOP && t[k].order == 0)
            rows[n++] = t[k].leaf;
    for (int k = 0; k < nl && n < MAX_ROWS; k++)
        if (!(l[k].kind == CF_KIND_FLOAT && l[k].row_axis))
            rows[n++] = l[k].leaf;
    for (int k = 0; k < nt && n < MAX_ROWS; k++)
        if (t[k].scope == CF_SCOPE_TOP && t[k].order > 0 && t[k].kind != CF_KIND_SKIP)
            rows[n++] = t[k].leaf;
    return n;
}

enum { CELL_W = 24, CELL_H = 14, MARGIN = 12, LINE = 10 };

typedef struct panel {
    const cf_report *const *reps; /* the reports shown */
    int nreps;
    int model;                     /* 1: rows = tensor types, cols = layers */
    int ncols, nrows, label_w;
    const char *rows[MAX_ROWS];    /* model panels: panel_rows */
    int nall;
    int rows_used[MAX_ROWS];
    int w, h;
} panel;

static const cf_record *find_cell(const cf_report *r, const char *row, int layer)
{
    for (int i = 0; i < r->nrec; i++) {
        const cf_record *x = &r->rec[i];
        if (layer >= 0) {
            if (x->layer != layer)
                continue;
            const char *sub = strchr(x->tensor + 7, '.');
            if (sub && strcmp(sub + 1, row) == 0)
                return x;
        } else if (x->layer < 0 && strcmp(x->tensor, row) == 0) {
            return x;
        }
    }
    return NULL;
}

static void draw_cell(cf_canvas *c, int x, int y, const cf_record *rec, int first)
{
    static const unsigned char grey[3] = {200, 200, 200}, red[3] = {230, 20, 20},
                               green[3] = {30, 140, 60}, yellow[3] = {255, 190, 0}, white[3] = {255, 255, 255},
                               magenta[3] = {200, 0, 200}, cyan[3] = {80, 170, 200};
    unsigned char col[3];
    if (!rec) {
        cf_fill(c, x, y, CELL_W - 2, CELL_H - 2, (const unsigned char[3]){245, 245, 245});
        return;
    }
    if (rec->have_metrics && rec->m.n_nan == 0 && rec->m.n_inf_bad == 0 && rec->m.n_ref_nan == 0) {
        double v = rec->m.nmse > 0 ? log10(rec->m.nmse) : -16;
        ramp(v, col);
        cf_fill(c, x, y, CELL_W - 2, CELL_H - 2, col);
    } else if (rec->result == CF_NOT_SUPPORTED) {
        cf_fill(c, x, y, CELL_W - 2, CELL_H - 2, cyan);
    } else if (rec->result == CF_INTERNAL_ERROR) {
        cf_fill(c, x, y, CELL_W - 2, CELL_H - 2, magenta);
    } else if (rec->msg[0] && strncmp(rec->msg, "missing", 7) == 0) {
        cf_fill(c, x, y, CELL_W - 2, CELL_H - 2, grey);
        cf_text(c, x + 8, y + 3, "-", 1, (const unsigned char[3]){90, 90, 90});
    } else if (rec->have_metrics) { /* NaN / Inf */
        cf_fill(c, x, y, CELL_W - 2, CELL_H - 2, red);
        cf_text(c, x + 2, y + 3, "NAN", 1, white);
    } else {
        cf_fill(c, x, y, CELL_W - 2, CELL_H - 2, rec->result == CF_PASS ? green : red);
        if (rec->result != CF_PASS)
            cf_text(c, x + 8, y + 3, "X", 1, white);
    }
    if (rec->result == CF_FAIL || rec->result == CF_INTERNAL_ERROR)
        cf_frame(c, x - 1, y - 1, CELL_W, CELL_H, first ? 3 : 1, first ? red : (const unsigned char[3]){255, 120, 120});
    else if (rec->result == CF_WARNING)
        cf_frame(c, x - 1, y - 1, CELL_W, CELL_H, 1, yellow);
    else if (rec->result == CF_TIE_DIVERGED)
        cf_frame(c, x - 1, y - 1, CELL_W, CELL_H, 2, (const unsigned char[3]){255, 140, 0});
}

static void panel_layout(panel *p)
{
    if (p->model) {
        const cf_report *r = p->reps[0];
        int maxl = -1;
        for (int i = 0; i < r->nrec; i++)
            if (r->rec[i].layer > maxl)
                maxl = r->rec[i].layer;
        p->ncols = maxl + 2; /* column 0: tensors outside layers */
        p->nrows = 0;
        p->nall = panel_rows(p->rows);
        for (int k = 0; k < p->nall; k++) {
            p->rows_used[k] = 0;
            for (int l = -1; l <= maxl && !p->rows_used[k]; l++)
                p->rows_used[k] = find_cell(r, p->rows[k], l) != NULL;
            p->nrows += p->rows_used[k];
        }
        p->label_w = 20 * 6 + 8;
    } else {
        p->ncols = 1;
        p->nrows = 0;
        int maxlen = 10;
        for (int i = 0; i < p->nreps; i++) {
            p->nrows += p->reps[i]->nrec;
            for (int k = 0; k < p->reps[i]->nrec; k++) {
                int len = (int)(strlen(p->reps[i]->id) + 1 + strlen(p->reps[i]->rec[k].tensor));
                if (len > maxlen)
                    maxlen = len;
            }
        }
        if (maxlen > 60)
            maxlen = 60;
        p->label_w = maxlen * 6 + 8;
    }
    p->w = MARGIN + p->label_w + p->ncols * CELL_W + MARGIN + (p->model ? 0 : 400);
    p->h = MARGIN + 2 * 14 + 4 + LINE + p->nrows * CELL_H + MARGIN;
}

static void panel_draw(cf_canvas *c, const panel *p, int y0)
{
    static const unsigned char black[3] = {0, 0, 0}, dark[3] = {60, 60, 60}, red[3] = {200, 0, 0};
    int x0 = MARGIN, y = y0 + MARGIN;
    char buf[512];
    if (p->model) {
        const cf_report *r = p->reps[0];
        snprintf(buf, sizeof buf, "%s  %s", r->id, r->teacher_forced ? "(teacher-forced)" : "");
        cf_text(c, x0, y, buf, 2, black);
        y += 16;
        if (r->first_fail >= 0) {
            const cf_record *x = &r->rec[r->first_fail];
            snprintf(buf, sizeof buf, "%s - first divergence: %s%d %s (%s)", cf_result_name(r->result),
                     x->layer >= 0 ? "layer " : "", x->layer, x->component, x->tensor);
            if (x->layer < 0)
                snprintf(buf, sizeof buf, "%s - first divergence: %s (%s)", cf_result_name(r->result),
                         x->component, x->tensor);
            cf_text(c, x0, y, buf, 1, red);
        } else {
            snprintf(buf, sizeof buf, "%s - profile %s", cf_result_name(r->result), r->profile);
            cf_text(c, x0, y, buf, 1, dark);
        }
        y += 16;
        int gx = x0 + p->label_w;
        cf_text(c, gx + 2, y, "--", 1, dark);
        for (int l = 0; l + 1 < p->ncols; l++) {
            snprintf(buf, sizeof buf, "%d", l);
            cf_text(c, gx + (l + 1) * CELL_W + 2, y, buf, 1, dark);
        }
        y += LINE;
        for (int k = 0; k < p->nall; k++) {
            if (!p->rows_used[k])
                continue;
            cf_text(c, x0, y + 3, p->rows[k], 1, black);
            for (int col = 0; col < p->ncols; col++) {
                const cf_record *rec = find_cell(r, p->rows[k], col - 1);
                int first = rec && r->first_fail >= 0 && rec == &r->rec[r->first_fail];
                if (col == 0 && !rec)
                    continue;
                draw_cell(c, gx + col * CELL_W + 1, y + 1, rec, first);
            }
            y += CELL_H;
        }
    } else {
        cf_text(c, x0, y, "component cases", 2, black);
        y += 16;
        int fails = 0;
        for (int i = 0; i < p->nreps; i++)
            fails += !cf_result_conforms(p->reps[i]->result);
        snprintf(buf, sizeof buf, "%d cases, %d not conforming", p->nreps, fails);
        cf_text(c, x0, y, buf, 1, fails ? red : dark);
        y += 16 + LINE;
        int gx = x0 + p->label_w;
        for (int i = 0; i < p->nreps; i++) {
            const cf_report *r = p->reps[i];
            for (int k = 0; k < r->nrec; k++) {
                snprintf(buf, sizeof buf, "%.200s/%.160s", r->id, r->rec[k].tensor);
                buf[60] = 0;
                cf_text(c, x0, y + 3, buf, 1, black);
                draw_cell(c, gx + 1, y + 1, &r->rec[k], k == r->first_fail);
                if (r->rec[k].result != CF_PASS) {
                    snprintf(buf, sizeof buf, "%.20s %.100s", cf_result_name(r->rec[k].result), r->rec[k].msg);
                    buf[64] = 0;
                    cf_text(c, gx + CELL_W + 6, y + 3, buf, 1, red);
                }
                y += CELL_H;
            }
        }
    }
}

/* bound: the NMSE bound of the reports' rules (the loosest), marked on the scale; 0 none */
static void legend(cf_canvas *c, int y, double bound)
{
    static const unsigned char black[3] = {0, 0, 0};
    int x = MARGIN;
    cf_text(c, x, y, "log10 NMSE:", 1, black);
    x += 12 * 6;
    for (int i = 0; i < 160; i++) {
        unsigned char col[3];
        ramp(-16.0 + 16.0 * i / 159.0, col);
        cf_fill(c, x + i, y, 1, 10, col);
    }
    for (int v = -16; v <= 0; v += 4) {
        char b[16];
        snprintf(b, sizeof b, "%d", v);
        cf_text(c, x + (v + 16) * 159 / 16 - 3, y + 13, b, 1, black);
    }
    if (bound > 0 && isfinite(bound)) { /* the tolerance bound on the scale: a black tick */
        double lb = log10(bound);
        int bx = x + (int)((lb + 16.0) * 159.0 / 16.0);
        if (bx >= x && bx < x + 160) {
            cf_fill(c, bx - 1, y - 3, 3, 16, black);
            cf_text(c, bx - 15, y - 12, "BOUND", 1, black);
        }
    }
    x += 180;
    cf_fill(c, x, y, 10, 10, (const unsigned char[3]){30, 140, 60});
    cf_text(c, x + 14, y + 2, "set/exact equal", 1, black);
    x += 14 + 16 * 6;
    cf_fill(c, x, y, 10, 10, (const unsigned char[3]){230, 20, 20});
    cf_text(c, x + 14, y + 2, "differs", 1, black);
    x += 14 + 8 * 6;
    cf_frame(c, x, y, 10, 10, 2, (const unsigned char[3]){230, 20, 20});
    cf_text(c, x + 14, y + 2, "fail (thick: first)", 1, black);
    x += 14 + 20 * 6;
    cf_fill(c, x, y, 10, 10, (const unsigned char[3]){200, 200, 200});
    cf_text(c, x + 14, y + 2, "missing", 1, black);
    x += 14 + 8 * 6;
    cf_frame(c, x, y, 10, 10, 2, (const unsigned char[3]){255, 140, 0});
    cf_text(c, x + 14, y + 2, "tie-diverged", 1, black);
    x += 14 + 13 * 6;
    cf_fill(c, x, y, 10, 10, (const unsigned char[3]){80, 170, 200});
    cf_text(c, x + 14, y + 2, "not supported", 1, black);
    x += 14 + 14 * 6;
    cf_fill(c, x, y, 10, 10, (const unsigned char[3]){200, 0, 200});
    cf_text(c, x + 14, y + 2, "internal error", 1, black);
}

int cf_write_plot(const char *path, const cf_report *reps, int n, m3_err *e)
{
    int np = 0, ncomp = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(reps[i].target, "mutant-verdict") == 0)
            continue;
        if (strcmp(reps[i].component, "model") == 0)
            np++;
        else
            ncomp++;
    }
    np += ncomp > 0;
    if (np == 0)
        return m3_fail(e, "%s: nothing to plot", path);
    panel *ps = calloc((size_t)np, sizeof *ps);
    const cf_report **comp = calloc((size_t)(ncomp ? ncomp : 1), sizeof *comp);
    const cf_report **single = calloc((size_t)n, sizeof *single);
    if (!ps || !comp || !single) {
        free(ps);
        free(comp);
        free(single);
        return m3_fail(e, "out of memory for the plot");
    }
    int k = 0, kc = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(reps[i].target, "mutant-verdict") == 0)
            continue;
        if (strcmp(reps[i].component, "model") == 0) {
            single[i] = &reps[i];
            ps[k].reps = &single[i];
            ps[k].nreps = 1;
            ps[k].model = 1;
            k++;
        } else {
            comp[kc++] = &reps[i];
        }
    }
    if (ncomp) {
        ps[k].reps = comp;
        ps[k].nreps = ncomp;
        ps[k].model = 0;
    }
    cf_canvas c = {0, 0, NULL};
    c.w = 1000; /* room for the legend */
    for (int i = 0; i < np; i++) {
        panel_layout(&ps[i]);
        if (ps[i].w > c.w)
            c.w = ps[i].w;
        c.h += ps[i].h;
    }
    c.h += 60;
    if (c.w > 16000 || c.h > 30000) {
        free(ps);
        free(comp);
        free(single);
        return m3_fail(e, "%s: plot would be %dx%d pixels; plot fewer cases", path, c.w, c.h);
    }
    c.px = malloc((size_t)c.w * c.h * 3);
    int rc = -1;
    if (!c.px) {
        m3_fail(e, "out of memory for the plot");
        goto done;
    }
    memset(c.px, 255, (size_t)c.w * c.h * 3);
    int y = 0;
    for (int i = 0; i < np; i++) {
        panel_draw(&c, &ps[i], y);
        y += ps[i].h;
        cf_fill(&c, 0, y - 2, c.w, 1, (const unsigned char[3]){220, 220, 220});
    }
    double bound = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < reps[i].nrec; j++)
            if (reps[i].rec[j].rule && reps[i].rec[j].rule->nmse > bound)
                bound = reps[i].rec[j].rule->nmse;
    legend(&c, y + 22, bound);
    rc = cf_save_png(path, &c, e);
done:
    free(c.px);
    free(ps);
    free(comp);
    free(single);
    return rc;
}
