/* fuzz_config.c — config.json (both dialects, M3-CFG-*) through
 * m3_config_parse, strict and lenient, then m3_config_validate. */
#include "config.h"
#include "common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    m3_config *c = malloc(sizeof *c);
    if (!c)
        return 0;
    m3_err e;
    for (int lenient = 0; lenient <= 1; lenient++) {
        m3_config_opts o = {lenient};
        if (m3_config_parse(c, (const char *)data, size, "fuzz/config.json", &o, &e) == 0) {
            m3_config_validate(c, "fuzz/config.json", &e);
            if (memchr(c->warnings, '\0', sizeof c->warnings) == NULL)
                abort(); /* warnings must stay NUL-terminated */
        }
    }
    free(c);
    return 0;
}
