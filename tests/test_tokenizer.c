/* test_tokenizer.c — hand-checkable cases for the byte-level BPE tokenizer and
 * its errors on malformed files. Spec: M3-TOK-FILE, M3-TOK-ADDED, M3-TOK-BPE,
 * M3-TOK-DECODE, M3-TOK-STREAM, M3-TOK-UTF8. (HF equality: test_tokenizer_vectors.c.)
 *
 * Fixture tests/data/tokenizer/tiny: vocab a b c ab abc Ġ Ġab Ã © Ġa ' s Ċ <unk>
 * (ids 0..13), merges by rank: (a,b) (ab,c) (Ġ,a) (Ġa,b); specials <|x|>=20, ]~b]=21;
 * GPT-2 pre-tokenizer (ByteLevel use_regex). Expected ids below follow by hand
 * from these ranks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tokenizer.h"

#define TINY "tests/data/tokenizer/tiny"

static m3_tokenizer *open_tiny(void) {
    m3_tokenizer *t;
    m3_err e = {{0}};
    if (m3_tokenizer_open(&t, TINY, &e)) fail_msg("%s", e.msg);
    return t;
}

static void expect_ids(const m3_tokenizer *t, const char *text, size_t len, int special, const int32_t *want, size_t n) {
    int32_t *ids;
    size_t got;
    m3_err e = {{0}};
    if (m3_tokenizer_encode(t, text, len, special, &ids, &got, &e)) fail_msg("%s", e.msg);
    if (got != n) fail_msg("\"%s\": %zu ids, want %zu", text, got, n);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != want[i]) fail_msg("\"%s\": id %zu is %d, want %d", text, i, ids[i], want[i]);
    free(ids);
}
#define EXPECT(t, s, sp, ...) do { const int32_t w_[] = {__VA_ARGS__}; \
    expect_ids(t, s, sizeof(s) - 1, sp, w_, sizeof w_ / sizeof w_[0]); } while (0)

static void test_merges_by_rank(void **st) {
    (void)st;
    m3_tokenizer *t = open_tiny();
    EXPECT(t, "abc", 1, 4);          /* a b c → ab c → abc */
    EXPECT(t, " ab", 1, 5, 3);       /* (a,b) rank 0 beats (Ġ,a) rank 2; (Ġ,ab) is no merge */
    EXPECT(t, " a", 1, 9);
    EXPECT(t, "ab's\n", 1, 3, 10, 11, 12); /* GPT-2 regex: ab | 's | \n */
    EXPECT(t, "cab", 1, 2, 3);       /* c a b: only (a,b) merges */
    int32_t *ids; size_t n; m3_err e = {{0}};
    assert_int_equal(m3_tokenizer_encode(t, "", 0, 1, &ids, &n, &e), 0);
    assert_int_equal(n, 0);
    free(ids);
    m3_tokenizer_free(t);
}

static void test_special_tokens(void **st) {
    (void)st;
    m3_tokenizer *t = open_tiny();
    EXPECT(t, "ab<|x|>c", 1, 3, 20, 2);
    EXPECT(t, "]~b]]~b]a", 1, 21, 21, 0);
    /* not allowed: the text is plain text; '<', '|', 'x', '>' are unknown (<unk> 13) */
    EXPECT(t, "ab<|x|>c", 0, 3, 13, 13, 13, 13, 13, 2);
    assert_int_equal(m3_tokenizer_token_id(t, "<|x|>"), 20);
    assert_int_equal(m3_tokenizer_token_id(t, "abc"), 4);
    assert_int_equal(m3_tokenizer_token_id(t, "zzz"), -1);
    assert_true(m3_tokenizer_is_special(t, 20));
    assert_false(m3_tokenizer_is_special(t, 4));
    assert_int_equal(m3_tokenizer_vocab_size(t), 22);
    /* tokenizer_config.json */
    assert_int_equal(m3_tokenizer_bos_id(t), 21);
    assert_int_equal(m3_tokenizer_eos_id(t), 20);
    assert_true(m3_tokenizer_has_chat_template(t));
    m3_tokenizer_free(t);
}

static void test_invalid_utf8_becomes_fffd(void **st) {
    (void)st;
    m3_tokenizer *t = open_tiny();
    /* \xff → U+FFFD (3 bytes EF BF BD), each byte unknown: three <unk>; a raw
     * byte would have given one. \xe2\x82 (truncated) is one U+FFFD too. */
    EXPECT(t, "ab\xff" "c", 1, 3, 13, 13, 13, 2);
    EXPECT(t, "ab\xe2\x82" "c", 1, 3, 13, 13, 13, 2);
    m3_tokenizer_free(t);
}

static void test_decode(void **st) {
    (void)st;
    m3_tokenizer *t = open_tiny();
    const int32_t ids[] = {21, 5, 3, 7, 8, 20, 12};
    char *s; size_t n; m3_err e = {{0}};
    assert_int_equal(m3_tokenizer_decode(t, ids, 7, 0, &s, &n, &e), 0);
    assert_string_equal(s, "]~b] ab\xc3\xa9<|x|>\n");
    assert_int_equal(n, strlen(s));
    free(s);
    assert_int_equal(m3_tokenizer_decode(t, ids, 7, 1, &s, &n, &e), 0);
    assert_string_equal(s, " ab\xc3\xa9\n");
    free(s);
    /* a lone lead byte decodes to U+FFFD, like HF's lossy decode */
    const int32_t lone[] = {0, 7, 0};
    assert_int_equal(m3_tokenizer_decode(t, lone, 3, 0, &s, &n, &e), 0);
    assert_string_equal(s, "a\xef\xbf\xbd" "a");
    free(s);
    const int32_t bad[] = {0, 99};
    assert_int_equal(m3_tokenizer_decode(t, bad, 2, 0, &s, &n, &e), -1);
    assert_non_null(strstr(e.msg, "99"));
    const int32_t hole[] = {15};
    assert_int_equal(m3_tokenizer_decode(t, hole, 1, 0, &s, &n, &e), -1);
    assert_non_null(strstr(e.msg, "15"));
    m3_tokenizer_free(t);
}

static void test_stream_utf8(void **st) {
    (void)st;
    m3_tokenizer *t = open_tiny();
    m3_decode_stream s;
    m3_decode_stream_init(&s, 0);
    const char *out; size_t n; m3_err e = {{0}};
    assert_int_equal(m3_tokenizer_decode_stream(t, &s, 0, &out, &n, &e), 0);
    assert_int_equal(n, 1); assert_memory_equal(out, "a", 1);
    /* é = C3 A9 split over ids 7 (Ã → C3) and 8 (© → A9): held, then whole */
    assert_int_equal(m3_tokenizer_decode_stream(t, &s, 7, &out, &n, &e), 0);
    assert_int_equal(n, 0);
    assert_int_equal(m3_tokenizer_decode_stream(t, &s, 8, &out, &n, &e), 0);
    assert_int_equal(n, 2); assert_memory_equal(out, "\xc3\xa9", 2);
    /* a lead byte followed by a non-continuation: U+FFFD, then the next char */
    assert_int_equal(m3_tokenizer_decode_stream(t, &s, 7, &out, &n, &e), 0);
    assert_int_equal(n, 0);
    assert_int_equal(m3_tokenizer_decode_stream(t, &s, 1, &out, &n, &e), 0);
    assert_int_equal(n, 4); assert_memory_equal(out, "\xef\xbf\xbd" "b", 4);
    /* an incomplete character at the end is flushed as U+FFFD */
    assert_int_equal(m3_tokenizer_decode_stream(t, &s, 7, &out, &n, &e), 0);
    assert_int_equal(n, 0);
    assert_int_equal(m3_decode_stream_flush(&s, &out, &n, &e), 0);
    assert_int_equal(n, 3); assert_memory_equal(out, "\xef\xbf\xbd", 3);
    assert_int_equal(m3_tokenizer_decode_stream(t, &s, -1, &out, &n, &e), -1);
    m3_decode_stream_free(&s);
    /* skip_special */
    m3_decode_stream_init(&s, 1);
    assert_int_equal(m3_tokenizer_decode_stream(t, &s, 20, &out, &n, &e), 0);
    assert_int_equal(n, 0);
    m3_decode_stream_free(&s);
    m3_tokenizer_free(t);
}

/* ---- malformed files: each names the file and the field */
static char tmpdir[64];

static int setup(void **st) {
    (void)st;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/m3-test-tok-%d", (int)getpid());
    mkdir(tmpdir, 0700);
    return 0;
}

static int teardown(void **st) {
    (void)st;
    char p[128];
    snprintf(p, sizeof p, "%s/tokenizer.json", tmpdir); unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", tmpdir); unlink(p);
    rmdir(tmpdir);
    return 0;
}

static void write_file(const char *name, const char *text) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

#define PRE "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, " \
            "\"decoder\": {\"type\": \"ByteLevel\"}, "
#define MODEL_OK "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}"

static void expect_open_error(const char *json, const char *needle) {
    write_file("tokenizer.json", json);
    m3_tokenizer *t = NULL;
    m3_err e = {{0}};
    assert_int_equal(m3_tokenizer_open(&t, tmpdir, &e), -1);
    assert_null(t);
    if (!strstr(e.msg, needle) || !strstr(e.msg, "tokenizer.json"))
        fail_msg("message \"%s\" lacks \"%s\" or the file name", e.msg, needle);
    /* the same text from memory fails the same way, named by its name */
    assert_int_equal(m3_tokenizer_open_mem(&t, json, strlen(json), "mem:tok", &e), -1);
    assert_null(t);
    if (!strstr(e.msg, needle) || !strstr(e.msg, "mem:tok"))
        fail_msg("open_mem message \"%s\" lacks \"%s\" or the name", e.msg, needle);
}

static void test_malformed(void **st) {
    (void)st;
    m3_tokenizer *t = NULL;
    m3_err e = {{0}};
    /* sanity: the good variant loads */
    write_file("tokenizer.json", PRE MODEL_OK "}");
    assert_int_equal(m3_tokenizer_open(&t, tmpdir, &e), 0);
    /* ... and from memory it encodes the same */
    m3_tokenizer *tm = NULL;
    const char *ok = PRE MODEL_OK "}";
    assert_int_equal(m3_tokenizer_open_mem(&tm, ok, strlen(ok), "mem:tok", &e), 0);
    int32_t *i1 = NULL, *i2 = NULL;
    size_t n1 = 0, n2 = 0;
    assert_int_equal(m3_tokenizer_encode(t, "abba", 4, 1, &i1, &n1, &e), 0);
    assert_int_equal(m3_tokenizer_encode(tm, "abba", 4, 1, &i2, &n2, &e), 0);
    assert_int_equal(n1, 3); /* ab b a */
    assert_int_equal(n1, n2);
    assert_memory_equal(i1, i2, n1 * sizeof *i1);
    free(i1);
    free(i2);
    m3_tokenizer_free(tm);
    m3_tokenizer_free(t);
    expect_open_error("{\"model\": ", "malformed JSON");
    expect_open_error(PRE "\"x\": 1}", "\"model\"");
    expect_open_error(PRE "\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "WordPiece");
    expect_open_error(PRE "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
                      "model.merges[0]: second part \"b\" is not in model.vocab");
    expect_open_error(PRE "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
                      "merged token \"ab\"");
    expect_open_error(PRE "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}}",
                      "model.merges[0]");
    expect_open_error(PRE "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", "model.vocab");
    expect_open_error(PRE "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": \"<u>\"}}",
                      "unk_token");
    expect_open_error("{\"normalizer\": {\"type\": \"NFC\"}, " MODEL_OK ", \"decoder\": {\"type\": \"ByteLevel\"}}",
                      "normalizer \"NFC\" is not supported");
    expect_open_error("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, \"behavior\": \"Isolated\"}, "
                      "\"decoder\": {\"type\": \"ByteLevel\"}, " MODEL_OK "}", "pre_tokenizer.pattern.Regex");
    expect_open_error("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}, "
                      "\"decoder\": {\"type\": \"ByteLevel\"}, " MODEL_OK "}", "behavior");
    expect_open_error("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"decoder\": {\"type\": \"ByteLevel\"}, " MODEL_OK "}",
                      "Whitespace");
    expect_open_error("{\"decoder\": {\"type\": \"WordPiece\"}, " MODEL_OK "}", "decoder");
    expect_open_error(PRE "\"added_tokens\": [{\"id\": 5}], " MODEL_OK "}", "added_tokens[0].content");
    /* tokenizer_config.json naming a token the tokenizer lacks */
    write_file("tokenizer.json", PRE MODEL_OK "}");
    write_file("tokenizer_config.json", "{\"bos_token\": \"<s>\"}");
    assert_int_equal(m3_tokenizer_open(&t, tmpdir, &e), -1);
    assert_non_null(strstr(e.msg, "tokenizer_config.json"));
    assert_non_null(strstr(e.msg, "bos_token"));
    write_file("tokenizer_config.json", "{\"bos_token\": \"a\", \"eos_token\": {\"content\": \"b\"}}");
    assert_int_equal(m3_tokenizer_open(&t, tmpdir, &e), 0);
    assert_int_equal(m3_tokenizer_bos_id(t), 0);
    assert_int_equal(m3_tokenizer_eos_id(t), 1);
    assert_false(m3_tokenizer_has_chat_template(t));
    m3_tokenizer_free(t);
    assert_int_equal(m3_tokenizer_open(&t, "/nonexistent/tok", &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent/tok"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merges_by_rank),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_invalid_utf8_becomes_fffd),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_stream_utf8),
        cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
