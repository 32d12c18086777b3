/* fuzz_select.c — the small texts of the port-facing commands: line 1 a
 * params.rows selector (cf_rows_select, M3-DUMP-11, at T = 300 with block
 * size 7 and at T = 1), line 2 a --layers range (cf_parse_layers, L = 60
 * and L = 1), line 3 a --jobs count (cf_parse_jobs). Every selected
 * position must lie inside [0, T). */
#include "conform.h"
#include "common.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *txt = malloc(size + 1);
    if (!txt)
        return 0;
    memcpy(txt, data, size);
    txt[size] = 0;
    char *lines[3] = {txt, "", ""};
    for (int k = 1; k < 3; k++) {
        char *nl = strchr(lines[k - 1], '\n');
        if (!nl)
            break;
        *nl = 0;
        lines[k] = nl + 1;
    }
    m3_err e;
    unsigned char want[300];
    static const long Ts[] = {300, 1};
    for (int k = 0; k < 2; k++)
        if (cf_rows_select(lines[0], Ts[k], 7, "fuzz/case.json", want, &e) == 0) {
            long n = 0;
            for (long p = 0; p < Ts[k]; p++)
                n += want[p] > 1 ? 1000 : want[p];
            if (n > Ts[k])
                abort();
        }
    int a = -1, b = -1, j = 0;
    if (cf_parse_layers(lines[1], 60, &a, &b, &e) == 0 && !(0 <= a && a <= b && b < 60))
        abort();
    if (cf_parse_layers(lines[1], 1, &a, &b, &e) == 0 && !(a == 0 && b == 0))
        abort();
    if (cf_parse_jobs(lines[2], &j, &e) == 0 && !(j >= 1 && j <= CF_MAX_JOBS))
        abort();
    free(txt);
    return 0;
}
