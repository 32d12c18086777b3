/* fuzz_regex.c — the pre-tokenizer regex engine (M3-TOK-REGEX): the input's
 * first line is a pattern, the rest is text. The pattern is compiled; when
 * the text is valid UTF-8 every match is enumerated as the pre-tokenizer does. */
#include "common.h"
#include "pretok_regex.h"

static int utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

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
        if (utf8_valid(text, tlen)) {
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
