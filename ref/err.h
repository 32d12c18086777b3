/* err.h — error reporting for the m3 reference library.
 *
 * Library functions never print and never exit. A function that can fail
 * returns 0 on success and -1 on failure, after writing a one-line message
 * into the caller's m3_err. Messages name the file, the tensor or field,
 * and the limit or value that was wrong. Callers may pass NULL for e when
 * they do not care about the message.
 */
#ifndef M3_ERR_H
#define M3_ERR_H

#include <stddef.h>

typedef struct m3_err {
    char msg[1024];
} m3_err;

/* Format a message into e (if e is non-NULL) and return -1. */
int m3_fail(m3_err *e, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prefix the message already in e with "prefix: " (used to add context). */
int m3_fail_prefix(m3_err *e, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif
