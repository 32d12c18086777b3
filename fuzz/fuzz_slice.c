/* fuzz_slice.c — a teacher-forced slice result (M3-DUMP-12) as
 * `m3-conform merge` reads it: cf_slice_parse against a small built-in
 * tolerance file, then cf_slice_merge of the slice with itself (an overlap,
 * refused) and alone (accepted only when it covers every layer and the head),
 * and the merged report's localisation. */
#include "conform.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

static const char k_tol[] =
    "{\"version\": 1, \"profiles\": {\"bf16\": {\"tie_tolerance\": 0.02, \"rules\": ["
    "{\"match\": \"model/logits\", \"nmse\": 5e-4, \"max_abs\": 0.5, \"why\": \"x\"},"
    "{\"match\": \"model/*\", \"nmse\": 2e-4, \"max_abs\": 0.25, \"why\": \"y\"}]}}}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    m3_err e;
    cf_tolerances tol;
    if (cf_tol_parse(&tol, k_tol, sizeof k_tol - 1, "fuzz/tolerances.json", &e) != 0)
        abort();
    cf_slice sl[2];
    if (cf_slice_parse(&sl[0], (const char *)data, size, "fuzz/slice.json", &tol, &e) == 0) {
        sl[1] = sl[0];
        cf_report r;
        if (cf_slice_merge(&r, sl, 2, &e) == 0)
            abort(); /* a slice merged with itself overlaps */
        if (cf_slice_merge(&r, sl, 1, &e) == 0) {
            if (r.first_fail >= r.nrec || r.nrec != sl[0].rep.nrec)
                abort();
            cf_report_free(&r);
        }
        cf_slice_free(&sl[0]);
    }
    cf_tol_free(&tol);
    return 0;
}
