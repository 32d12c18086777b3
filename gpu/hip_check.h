/* hip_check.h — the one check of a HIP call in the host code of gpu/: a
 * failed call becomes an m3_err (ref/err.h), as every error of ref/ does.
 *
 * M3G_HIP(e, call) evaluates call (a hipError_t: a HIP runtime call or a
 * kernels.h launcher); on hipSuccess it is 0, else it writes
 * "FILE:LINE: call: <hipGetErrorString>" into e (which may be NULL) and is
 * -1, so that checks chain with || as the ref/ functions' returns do.
 * M3G_TRY(e, call, label) is the statement form: on failure, goto label.
 * Only the programs print (m3-gpu.cu and the two commands); everything
 * below them reports through e.
 */
#ifndef M3_GPU_HIP_CHECK_H
#define M3_GPU_HIP_CHECK_H

#include "hip_compat.h"

extern "C" {
#include "err.h"
}

/* 0 when r is hipSuccess, else -1 after writing "file:line: call: error" into e. */
static inline int m3g_hip_check(hipError_t r, m3_err *e, const char *file, int line,
                                const char *call)
{
    if (r == hipSuccess)
        return 0;
    return m3_fail(e, "%s:%d: %s: %s", file, line, call, hipGetErrorString(r));
}

#define M3G_HIP(e, call) m3g_hip_check((call), (e), __FILE__, __LINE__, #call)

#define M3G_TRY(e, call, label)                                                            \
    do {                                                                                   \
        if (M3G_HIP(e, call))                                                              \
            goto label;                                                                    \
    } while (0)

#endif
