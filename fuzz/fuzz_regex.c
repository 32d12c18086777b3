/* fuzz_regex.c — the pre-tokenizer regex engine (M3-TOK-REGEX): the input's
 * first line is a pattern, the rest is text. The pattern is compiled; when
 * the text is valid UTF-8 every match is enumerated as the pre-tokenizer does. */
#include "common.h"
#include "pretok_regex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t plen = nl ? (size_t)(nl - data) : size;
    if (plen > 4096)
        return 0;
    char *pat = m3fuzz_strndup(data, plen);
    if (!pat)
        return 0;
    m3_regex *re = NULL;
    m3_err e;
    if (m3_regex_compile(&re, pat, &e) == 0) {
        const uint8_t *text = nl ? nl + 1 : data + size;
        size_t tlen = nl ? size - plen - 1 : 0;
        if (m3fuzz_utf8_ok(text, tlen)) {
            m3_regex_scratch *s = m3_regex_scratch_new();
            size_t pos = 0, ms, me;
            int guard = 0;
            while (s && pos <= tlen && guard++ < 100000) {
                int r = m3_regex_search(re, s, text, tlen, pos, &ms, &me, &e);
                if (r != 1)
                    break;
                if (ms < pos || me < ms || me > tlen)
                    abort();
                pos = me > ms ? me : ms + 1;
                while (pos < tlen && (text[pos] & 0xC0) == 0x80)
                    pos++; /* an empty match advances one character */
            }
            m3_regex_scratch_free(s);
        }
        m3_regex_free(re);
    }
    free(pat);
    return 0;
}
