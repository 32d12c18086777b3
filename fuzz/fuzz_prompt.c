/* fuzz_prompt.c — arbitrary prompt bytes (invalid UTF-8 included, M3-TOK-UTF8)
 * through m3_tokenizer_encode with a real tokenizer, then decode (whole and
 * streamed, M3-TOK-STREAM: streamed pieces are complete UTF-8). The tokenizer
 * is $M3FUZZ_TOKENIZER or vectors/tokenizer/minimax_300/tokenizer.json (run
 * from the repository root); without it every input is a no-op. */
#include "common.h"
#include "tokenizer.h"

/* Structural UTF-8 check: lead bytes, continuation bytes, no overlong forms,
 * no surrogates, nothing above U+10FFFF. */
static int utf8_ok(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0) {
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
            if (i + j >= n || (u[i + j] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (u[i + j] & 0x3F);
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
    static m3_tokenizer *t = NULL; /* harness state: loaded once */
    static int tried = 0;
    if (!tried) {
        tried = 1;
        const char *p = getenv("M3FUZZ_TOKENIZER");
        m3_err e;
        if (m3_tokenizer_open(&t, p ? p : "vectors/tokenizer/minimax_300/tokenizer.json", &e) != 0)
            t = NULL;
    }
    if (!t || size > 1 << 16)
        return 0;
    m3_err e;
    for (int special = 0; special <= 1; special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (m3_tokenizer_encode(t, (const char *)data, size, special, &ids, &n, &e) != 0)
            continue;
        char *out = NULL;
        size_t olen = 0;
        if (m3_tokenizer_decode(t, ids, n, 0, &out, &olen, &e) == 0) {
            if (!utf8_ok(out, olen))
                abort(); /* decode output must be valid UTF-8 */
            free(out);
        }
        m3_decode_stream s;
        m3_decode_stream_init(&s, 0);
        const char *txt;
        size_t tl;
        for (size_t i = 0; i < n; i++) {
            if (m3_tokenizer_decode_stream(t, &s, ids[i], &txt, &tl, &e) != 0)
                break;
            if (!utf8_ok(txt, tl))
                abort(); /* streamed text must be complete UTF-8 */
        }
        if (m3_decode_stream_flush(&s, &txt, &tl, &e) == 0 && !utf8_ok(txt, tl))
            abort();
        m3_decode_stream_free(&s);
        free(ids);
    }
    return 0;
}
