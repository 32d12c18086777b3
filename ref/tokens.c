/* tokens.c — token-id list parsing (see tokens.h). */
#include "tokens.h"

#include <stdlib.h>

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\n'; }

int m3_parse_token_list(const char *s, size_t len, const char *name, int32_t **ids, size_t *n,
                        m3_err *e)
{
    *ids = NULL;
    *n = 0;
    if (!name)
        name = "token list";
    size_t cap = 16, cnt = 0, i = 0;
    int32_t *out = malloc(cap * sizeof *out);
    if (!out)
        return m3_fail(e, "%s: out of memory", name);
    for (;;) {
        while (i < len && is_blank(s[i]))
            i++;
        if (i == len)
            break;
        if (s[i] < '0' || s[i] > '9') {
            if (s[i] == ',')
                m3_fail(e, "%s: empty item before the comma at offset %zu", name, i);
            else
                m3_fail(e, "%s: item %zu: byte 0x%02x at offset %zu is not a digit (ids are "
                           "non-negative integers)",
                        name, cnt, (unsigned)(unsigned char)s[i], i);
            free(out);
            return -1;
        }
        size_t start = i;
        int64_t v = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            v = v * 10 + (s[i] - '0');
            if (v > INT32_MAX) {
                m3_fail(e, "%s: item %zu starting at offset %zu is larger than %d", name, cnt,
                        start, (int)INT32_MAX);
                free(out);
                return -1;
            }
            i++;
        }
        if (cnt == M3_TOKENS_MAX) {
            m3_fail(e, "%s: more than %d token ids (the cap M3_TOKENS_MAX)", name, M3_TOKENS_MAX);
            free(out);
            return -1;
        }
        if (cnt == cap) {
            int32_t *bigger = realloc(out, 2 * cap * sizeof *out);
            if (!bigger) {
                free(out);
                return m3_fail(e, "%s: out of memory", name);
            }
            out = bigger;
            cap *= 2;
        }
        out[cnt++] = (int32_t)v;
        while (i < len && is_blank(s[i]))
            i++;
        if (i < len && s[i] == ',') {
            i++;
            while (i < len && is_blank(s[i]))
                i++;
            if (i == len || s[i] == ',') {
                m3_fail(e, "%s: empty item after the comma at offset %zu", name, i);
                free(out);
                return -1;
            }
        } else if (i < len && (s[i] < '0' || s[i] > '9')) {
            m3_fail(e, "%s: item %zu: byte 0x%02x at offset %zu is not a digit or separator",
                    name, cnt, (unsigned)(unsigned char)s[i], i);
            free(out);
            return -1;
        }
    }
    if (cnt == 0) {
        free(out);
        return m3_fail(e, "%s: no token ids given (empty list)", name);
    }
    *ids = out;
    *n = cnt;
    return 0;
}
