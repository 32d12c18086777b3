/* test_regex.c — the pre-tokenizer regex engine. Spec: M3-TOK-REGEX.
 * Expected splits are worked out by hand from leftmost-first (Perl/Oniguruma)
 * semantics; the same patterns are checked against HF on a large corpus in
 * test_tokenizer_vectors.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pretok_regex.h"

/* MiniMax (TOK) split pattern, and the o200k/llama.cpp variant with [\r\n/]*. */
#define MINIMAX "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+" \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}|" \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define O200K "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+" \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}|" \
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* Split text by all matches (non-matching gaps included) and join with '|'. */
static void splits(const char *pat, const char *text, char *out, size_t cap) {
    m3_regex *re;
    m3_err e = {{0}};
    if (m3_regex_compile(&re, pat, &e)) fail_msg("%s", e.msg);
    m3_regex_scratch *s = m3_regex_scratch_new();
    size_t n = strlen(text), pos = 0, prev = 0, k = 0, a, b;
    out[0] = 0;
#define ADD(p, l) do { if (k) out[k++] = '|'; memcpy(out + k, p, l); k += l; out[k] = 0; } while (0)
    while (pos <= n) {
        int r = m3_regex_search(re, s, (const uint8_t *)text, n, pos, &a, &b, &e);
        assert_true(r >= 0);
        if (r == 0) break;
        if (a > prev) ADD(text + prev, a - prev);
        ADD(text + a, b - a);
        prev = b;
        if (b == a) { if (a >= n) break; pos = a + 1; } else pos = b;
    }
    if (prev < n) ADD(text + prev, n - prev);
    assert_true(k < cap);
#undef ADD
    m3_regex_scratch_free(s);
    m3_regex_free(re);
}

#define SPLITS(pat, text, want) do { char o_[4096]; splits(pat, text, o_, sizeof o_); \
    if (strcmp(o_, want) != 0) fail_msg("pattern %s on \"%s\":\n got  %s\n want %s", #pat, text, o_, want); } while (0)

static void test_minimax_split(void **st) {
    (void)st;
    SPLITS(MINIMAX, "I'm sure you're RIGHT'S", "I'm| sure| you're| RIGHT'S");
    SPLITS(MINIMAX, "DON'T we'Ve it'LL", "DON'T| we'Ve| it'LL");
    SPLITS(MINIMAX, "HelloWorld camelCase", "Hello|World| camel|Case");
    SPLITS(MINIMAX, "1 12 123 1234 1234567", "1| |12| |123| |123|4| |123|456|7");
    SPLITS(MINIMAX, "hello   world", "hello|  | world");
    SPLITS(MINIMAX, "x  \n  y", "x|  \n| | y");
    SPLITS(MINIMAX, "a\n\nb", "a|\n\n|b");
    SPLITS(MINIMAX, "end.  ", "end|.|  ");
    SPLITS(MINIMAX, "..\n\n/ x", "..\n\n|/| x");
    SPLITS(O200K, "..\n\n/ x", "..\n\n/| x");
    SPLITS(MINIMAX, "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xe4\xb8\xad\xe6\x96\x87", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e| \xe4\xb8\xad\xe6\x96\x87");
    /* 👍🏽!! after a space: one punctuation/symbol run with the space */
    SPLITS(MINIMAX, "ok \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd!!", "ok| \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd!!");
    /* e + combining acute (Mn) stays in the word */
    SPLITS(MINIMAX, "cafe\xcc\x81 ok", "cafe\xcc\x81| ok");
    /* (?i:) contractions fold Unicode: long s (U+017F) folds to s */
    SPLITS(MINIMAX, "it'\xc5\xbf", "it'\xc5\xbf");
    SPLITS(MINIMAX, "\t\tx", "\t|\tx");
}

static void test_gpt2_split(void **st) {
    (void)st;
    SPLITS(GPT2, "Hello world's 123 !!", "Hello| world|'s| 123| !!");
    SPLITS(GPT2, "I'M", "I|'|M");  /* GPT-2's contractions are case-sensitive */
    SPLITS(GPT2, "a   b", "a|  | b");
    SPLITS(GPT2, "a   ", "a|   ");
}

static void test_syntax(void **st) {
    (void)st;
    SPLITS("a(?!b)", "ab ac", "ab |a|c"); /* no match at 0; then the 'a' of "ac" */
    SPLITS("a(?=c)", "ab ac", "ab |a|c");
    SPLITS("x{2,3}?", "xxxxx", "xx|xx|x");
    SPLITS("x{2,3}", "xxxxx", "xxx|xx");
    SPLITS("x{2}", "xxxxx", "xx|xx|x");
    SPLITS("x{2,}", "xxxxx y", "xxxxx| y");
    SPLITS("[a-c]+|[^a-c\\s]+", "abxycba d", "ab|xy|cba| |d");
    SPLITS("(?i)ab", "AB aB ab", "AB| |aB| |ab");
    SPLITS("(?:ab)+", "ababa", "abab|a");
    SPLITS("\\d+|\\w+", "ab12_c", "ab12_c");
    SPLITS("\\d+", "ab12_c", "ab|12|_c");
    SPLITS("^a|b$", "ab\nab", "a|b|\n|a|b");
    SPLITS("\\x41\\u0042\\x{43}", "ABC", "ABC");
    SPLITS("[\\p{Lu}]+", "abCDe", "ab|CD|e");
    SPLITS("\\P{L}+", "ab12!c", "ab|12!|c");
    SPLITS("a.c", "abc a\nc", "abc| a\nc");
}

static void test_errors(void **st) {
    (void)st;
    const char *bad[] = {"(a", "a)", "[a", "*a", "a++", "(?<=a)b", "\\1", "\\b", "\\p{Han}", "x{3,1}",
                         "(?x)a", "[[:alpha:]]", "a{5000}",
                         /* empty bodies under nested counted repeats: no instructions but
                          * 60*60*210*... generator calls (found by fuzz_regex) */
                         "(?:){60}{60}{210}{60}{210}",
                         /* a count over 6 digits must not fall back to literal text */
                         "a{1234567}", "a{1,1234567}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m3_regex *re = NULL;
        m3_err e = {{0}};
        if (m3_regex_compile(&re, bad[i], &e) != -1) fail_msg("pattern %s compiled", bad[i]);
        assert_null(re);
        assert_non_null(strstr(e.msg, "regex: "));
        assert_non_null(strstr(e.msg, bad[i]));
    }
}

/* Groups nested 100,000 deep: an error, not a stack overflow in the parser. */
static void test_deep_nesting(void **st) {
    (void)st;
    size_t depth = 100000;
    char *pat = malloc(2 * depth + 2);
    assert_non_null(pat);
    memset(pat, '(', depth);
    pat[depth] = 'a';
    memset(pat + depth + 1, ')', depth);
    pat[2 * depth + 1] = 0;
    m3_regex *re = NULL;
    m3_err e = {{0}};
    assert_int_equal(m3_regex_compile(&re, pat, &e), -1);
    assert_null(re);
    assert_non_null(strstr(e.msg, "nested deeper than 200"));
    /* 200 levels still compile */
    memset(pat, '(', 200);
    pat[200] = 'a';
    memset(pat + 201, ')', 200);
    pat[401] = 0;
    assert_int_equal(m3_regex_compile(&re, pat, &e), 0);
    m3_regex_free(re);
    free(pat);
}

static void test_adversarial_is_bounded(void **st) {
    (void)st;
    /* (a*)*b and (a|a)*b on 20k 'a's: exponential for naive backtracking; the
     * memo makes each attempt linear. Searching from every start is quadratic,
     * so the step cap must end it with an error, quickly. */
    size_t n = 20000;
    char *text = malloc(n + 1);
    memset(text, 'a', n); text[n] = 0;
    const char *pats[] = {"(a*)*b", "(a|a)*b", "(?:a|aa)+$x"};
    for (size_t i = 0; i < 3; i++) {
        m3_regex *re; m3_err e = {{0}};
        assert_int_equal(m3_regex_compile(&re, pats[i], &e), 0);
        m3_regex_scratch *s = m3_regex_scratch_new();
        size_t a, b;
        int r = m3_regex_search(re, s, (const uint8_t *)text, n, 0, &a, &b, &e);
        assert_true(r == 0 || r == -1);
        if (r == -1) assert_non_null(strstr(e.msg, "step limit"));
        m3_regex_scratch_free(s);
        m3_regex_free(re);
    }
    /* The split patterns stay linear on long runs */
    for (size_t i = 0; i < n; i++) text[i] = (i % 1000 == 999) ? 'x' : ' ';
    m3_regex *re; m3_err e = {{0}};
    assert_int_equal(m3_regex_compile(&re, MINIMAX, &e), 0);
    m3_regex_scratch *s = m3_regex_scratch_new();
    size_t pos = 0, a, b, count = 0;
    while (pos < n) {
        assert_int_equal(m3_regex_search(re, s, (const uint8_t *)text, n, pos, &a, &b, &e), 1);
        assert_int_equal(a, pos);
        pos = b; count++;
    }
    assert_int_equal(count, 40); /* 20 × ("   ...  " + " x") */
    m3_regex_scratch_free(s);
    m3_regex_free(re);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimax_split),
        cmocka_unit_test(test_gpt2_split),
        cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_adversarial_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
