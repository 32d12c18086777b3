/* fuzz_prompt.c — arbitrary prompt bytes (invalid UTF-8 included, M3-TOK-UTF8)
 * through m3_tokenizer_encode with a real tokenizer, then decode (whole and
 * streamed, M3-TOK-STREAM: streamed pieces are complete UTF-8). The tokenizer
 * is $M3FUZZ_TOKENIZER or vectors/tokenizer/minimax_300/tokenizer.json (run
 * from the repository root); without it every input is a no-op. */
#include "common.h"
#include "tokenizer.h"

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
            if (!m3fuzz_utf8_ok(out, olen))
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
            if (!m3fuzz_utf8_ok(txt, tl))
                abort(); /* streamed text must be complete UTF-8 */
        }
        if (m3_decode_stream_flush(&s, &txt, &tl, &e) == 0 && !m3fuzz_utf8_ok(txt, tl))
            abort();
        m3_decode_stream_free(&s);
        free(ids);
    }
    return 0;
}
