/* fuzz_plot.c — a dump as `m3-conform plot` reads it (conformance/dump_plot.h):
 * what cf_tset_load does (m3_store_open_mem + cf_tset_from_store), then
 * cf_plot_selection and cf_plot_routing, their PNGs written to /dev/null. */
#include "conform.h"
#include "dump_plot.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    m3_err e;
    cf_tset s = {0};
    m3_store *st = NULL;
    int rc = m3_store_open_mem(&st, data, size, "fuzz/dump.safetensors", &e);
    if (rc == 0) {
        rc = cf_tset_from_store(&s, st, &e);
        m3_store_close(st);
    }
    if (rc == 0) {
        cf_plot_selection(&s, "fuzz", "/dev/null", &e);
        cf_plot_routing(&s, "fuzz", "/dev/null", &e);
    }
    cf_tset_free(&s);
    return 0;
}
