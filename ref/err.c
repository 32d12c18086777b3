/* err.c — see err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int m3_fail(m3_err *e, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int m3_fail_prefix(m3_err *e, const char *fmt, ...)
{
    if (e) {
        char prefix[512], old[sizeof e->msg];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, e->msg, sizeof old);
        snprintf(e->msg, sizeof e->msg, "%s: %s", prefix, old);
    }
    return -1;
}
