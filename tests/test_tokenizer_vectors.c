/* test_tokenizer_vectors.c — the C tokenizer against HF `tokenizers` vectors.
 *
 * vectors/tokenizer/ (made by tools/hf_tokenizers_vectors.py on the device
 * machine with HF tokenizers; version in manifest.json) holds byte-level BPE
 * tokenizers trained by HF, a held-out corpus (inputs.safetensors: raw bytes,
 * some invalid UTF-8) and, per tokenizer, HF's ids with special tokens matched
 * and with encode_special_tokens=True, and HF's decode of the ids. Every case
 * must match exactly: encode ids, decode bytes, and the streamed decode
 * (concatenation == full decode, every chunk valid UTF-8).
 * Spec: M3-TOK-* (M3-TOK-BPE, M3-TOK-ADDED, M3-TOK-PRETOK, M3-TOK-DECODE,
 * M3-TOK-STREAM, M3-TOK-UTF8).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cJSON.h>

#include "safetensors.h"
#include "tokenizer.h"
#include "unicode.h"

#define VDIR "vectors/tokenizer"

static const m3_tensor *need(const m3_store *s, const char *name, m3_dtype dt) {
    const m3_tensor *t = m3_store_get(s, name);
    if (!t) fail_msg("tensor %s missing", name);
    assert_int_equal(t->dtype, dt);
    return t;
}

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int l = m3_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (l <= 0) return 0;
        i += (size_t)l;
    }
    return 1;
}

static void check_one(const char *name, const m3_store *in) {
    char path[512];
    snprintf(path, sizeof path, VDIR "/%s", name);
    m3_tokenizer *tok;
    m3_err e = {{0}};
    if (m3_tokenizer_open(&tok, path, &e)) fail_msg("%s: %s", name, e.msg);
    snprintf(path, sizeof path, VDIR "/%s/expected.safetensors", name);
    m3_store *ex;
    if (m3_store_open(&ex, path, &e)) fail_msg("%s", e.msg);
    const m3_tensor *text = need(in, "text", M3_U8), *toff = need(in, "text_offsets", M3_I64);
    const m3_tensor *ids = need(ex, "ids", M3_I32), *ioff = need(ex, "id_offsets", M3_I64);
    const m3_tensor *ids2 = need(ex, "ids_nospecial", M3_I32), *ioff2 = need(ex, "ids_nospecial_offsets", M3_I64);
    const m3_tensor *dec = need(ex, "decoded", M3_U8), *doff = need(ex, "decoded_offsets", M3_I64);
    int64_t ncase = m3_tensor_numel(toff) - 1;
    assert_true(ncase > 100);
    assert_int_equal(m3_tensor_numel(ioff) - 1, ncase);
    const int64_t *to = toff->data, *io = ioff->data, *io2 = ioff2->data, *dof = doff->data;
    const int32_t *iv = ids->data, *iv2 = ids2->data;
    int bad = 0;
    size_t total_ids = 0;
    for (int64_t c = 0; c < ncase; c++) {
        const char *tx = (const char *)text->data + to[c];
        size_t tn = (size_t)(to[c + 1] - to[c]);
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *want = pass ? iv2 + io2[c] : iv + io[c];
            size_t nwant = (size_t)(pass ? io2[c + 1] - io2[c] : io[c + 1] - io[c]);
            int32_t *got;
            size_t ngot;
            if (m3_tokenizer_encode(tok, tx, tn, !pass, &got, &ngot, &e)) fail_msg("%s case %lld: %s", name, (long long)c, e.msg);
            if (ngot != nwant || (ngot && memcmp(got, want, ngot * sizeof *got) != 0)) {
                if (bad++ < 5) {
                    size_t k = 0;
                    while (k < ngot && k < nwant && got[k] == want[k]) k++;
                    print_message("%s case %lld (%s): %zu ids vs HF %zu, first diff at %zu (got %d, HF %d); text \"%.*s\"\n",
                                  name, (long long)c, pass ? "no special" : "special", ngot, nwant, k,
                                  k < ngot ? got[k] : -1, k < nwant ? want[k] : -1, (int)(tn > 120 ? 120 : tn), tx);
                }
            }
            total_ids += ngot;
            if (pass == 0) {
                char *d;
                size_t dn;
                if (m3_tokenizer_decode(tok, want, nwant, 0, &d, &dn, &e)) fail_msg("%s: %s", name, e.msg);
                size_t wn = (size_t)(dof[c + 1] - dof[c]);
                if (dn != wn || memcmp(d, (const char *)dec->data + dof[c], dn) != 0) {
                    if (bad++ < 5) print_message("%s case %lld: decode differs from HF\n", name, (long long)c);
                }
                /* streamed decode: same bytes, each chunk complete UTF-8 */
                m3_decode_stream st;
                m3_decode_stream_init(&st, 0);
                char *acc = malloc(dn + 16);
                size_t an = 0;
                for (size_t k = 0; k < nwant; k++) {
                    const char *ch; size_t cn;
                    if (m3_tokenizer_decode_stream(tok, &st, want[k], &ch, &cn, &e)) fail_msg("%s", e.msg);
                    assert_true(valid_utf8(ch, cn));
                    assert_true(an + cn <= dn);
                    memcpy(acc + an, ch, cn); an += cn;
                }
                const char *ch; size_t cn;
                assert_int_equal(m3_decode_stream_flush(&st, &ch, &cn, &e), 0);
                assert_true(an + cn <= dn);
                memcpy(acc + an, ch, cn); an += cn;
                assert_int_equal(an, dn);
                assert_memory_equal(acc, d, dn);
                free(acc);
                m3_decode_stream_free(&st);
                free(d);
            }
            free(got);
        }
    }
    print_message("%s: %lld cases, %zu ids, %d mismatches\n", name, (long long)ncase, total_ids, bad);
    assert_int_equal(bad, 0);
    m3_store_close(ex);
    m3_tokenizer_free(tok);
}

static void test_all_vectors(void **state) {
    (void)state;
    size_t n;
    FILE *f = fopen(VDIR "/manifest.json", "rb");
    if (!f) fail_msg("cannot open " VDIR "/manifest.json (run from the repo root)");
    static char buf[1 << 16];
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    assert_non_null(j);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "tokenizers");
    assert_true(cJSON_GetArraySize(list) >= 5);
    m3_store *in;
    m3_err e = {{0}};
    if (m3_store_open(&in, VDIR "/inputs.safetensors", &e)) fail_msg("%s", e.msg);
    for (const cJSON *it = list->child; it; it = it->next) check_one(it->valuestring, in);
    m3_store_close(in);
    cJSON_Delete(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_all_vectors)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
