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
        char old[sizeof e->msg];
        memcpy(old, e->msg, sizeof old);
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        if (n < 0)
            n = 0;
        size_t used = (size_t)n < sizeof e->msg ? (size_t)n : sizeof e->msg - 1;
        /* Append ": old", truncating silently when the buffer is full. */
        const char *sep = ": ";
        for (size_t i = 0; sep[i] && used + 1 < sizeof e->msg; i++)
            e->msg[used++] = sep[i];
        for (size_t i = 0; old[i] && used + 1 < sizeof e->msg; i++)
            e->msg[used++] = old[i];
        e->msg[used] = 0;
    }
    return -1;
}
