/* fuzz_tokens.c — CLI token-id lists ("1,2,3") through m3_parse_token_list. */
#include "common.h"
#include "tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int32_t *ids = NULL;
    size_t n = 0;
    m3_err e;
    if (m3_parse_token_list((const char *)data, size, "--tokens", &ids, &n, &e) == 0) {
        if (n == 0 || n > size)
            abort();
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0)
                abort();
        free(ids);
    } else if (ids || n) {
        abort();
    }
    return 0;
}
