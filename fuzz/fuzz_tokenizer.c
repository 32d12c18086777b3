/* fuzz_tokenizer.c — tokenizer.json (M3-TOK-FILE, -ADDED, -PRETOK, -BPE) through
 * m3_tokenizer_open_mem (the validation m3_tokenizer_open uses); a loaded
 * tokenizer then encodes a fixed mixed text and decodes the ids back (whole
 * and streamed). */
#include "common.h"
#include "tokenizer.h"

static const char k_text[] = "Hello, world! It's 2024: naïve café, 東京 😀 <|im_end|>\n\t  x";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    m3_tokenizer *t = NULL;
    m3_err e;
    if (m3_tokenizer_open_mem(&t, (const char *)data, size, "fuzz/tokenizer.json", &e) != 0)
        return 0;
    for (int special = 0; special <= 1; special++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (m3_tokenizer_encode(t, k_text, sizeof k_text - 1, special, &ids, &n, &e) == 0) {
            size_t V = m3_tokenizer_vocab_size(t);
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || (size_t)ids[i] >= V)
                    abort(); /* encode produced an id outside the vocabulary */
            char *out = NULL;
            size_t olen = 0;
            if (m3_tokenizer_decode(t, ids, n, special, &out, &olen, &e) == 0)
                free(out);
            m3_decode_stream s;
            m3_decode_stream_init(&s, special);
            const char *txt;
            size_t tl;
            for (size_t i = 0; i < n; i++)
                if (m3_tokenizer_decode_stream(t, &s, ids[i], &txt, &tl, &e) != 0)
                    break;
            m3_decode_stream_flush(&s, &txt, &tl, &e);
            m3_decode_stream_free(&s);
            free(ids);
        }
    }
    m3_tokenizer_free(t);
    return 0;
}
