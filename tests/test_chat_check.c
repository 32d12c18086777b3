/* test_chat_check.c — m3-conform chat-check's comparison (conformance/chat_check.h).
 * Spec: M3-CHAT-* (the expected prompt), M3-CHAT-FILE-1, M3-CLI-TOKENS-1.
 *
 * The port's ids here are the tokenization of the published template's own
 * rendering (vectors/chat/expected, jinja2), not of m3's: a pass therefore
 * says that m3's rendering and tokenization agree with the template. The
 * failing ports are the "M3 rendered as M2" prompt (the M2-era turn format),
 * a truncated and an over-long id list, and an id outside the vocabulary;
 * the first difference must be where the lists first differ. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chat_check.h"
#include "fileio.h"
#include "tokenizer.h"

#define TOK "vectors/tokenizer/minimax_1000"
#define CASE "vectors/chat/cases/tools_weather_call.json"
#define EXPECTED "vectors/chat/expected/tools_weather_call.txt"

static m3_tokenizer *open_tok(void)
{
    m3_tokenizer *t;
    m3_err e = {{0}};
    if (m3_tokenizer_open(&t, TOK, &e))
        fail_msg("%s", e.msg);
    return t;
}

static int32_t *encode(const m3_tokenizer *t, const char *s, size_t *n)
{
    int32_t *ids;
    m3_err e = {{0}};
    if (m3_tokenizer_encode(t, s, strlen(s), 1, &ids, n, &e))
        fail_msg("%s", e.msg);
    return ids;
}

static int32_t *template_ids(const m3_tokenizer *t, size_t *n)
{
    char *text;
    size_t len;
    m3_err e = {{0}};
    if (m3_read_file(EXPECTED, 1 << 20, &text, &len, &e))
        fail_msg("%s", e.msg);
    int32_t *ids = encode(t, text, n);
    free(text);
    return ids;
}

static void test_pass(void **st)
{
    (void)st;
    m3_tokenizer *t = open_tok();
    size_t n;
    int32_t *ids = template_ids(t, &n);
    cf_chat_diff d;
    m3_err e = {{0}};
    assert_int_equal(cf_chat_check(t, CASE, NULL, ids, n, &d, &e), 0);
    assert_true(d.equal);
    assert_int_equal(d.n_expected, n);
    assert_int_equal(d.n_got, n);
    cf_chat_diff_free(&d);
    /* --thinking changes the expected prompt: the same ids no longer pass */
    assert_int_equal(cf_chat_check(t, CASE, "disabled", ids, n, &d, &e), 0);
    assert_false(d.equal);
    cf_chat_diff_free(&d);
    free(ids);
    m3_tokenizer_free(t);
}

/* first index where a and b differ (the shorter length when one is a prefix) */
static size_t first_diff(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

/* the M2-era format: one system turn with the old default, no developer turn */
#define M2                                                                                         \
    "]~!b[]~b]system\nYou are a helpful assistant. Your name is MiniMax-M3 and is built by "     \
    "MiniMax.[e~[\n]~b]user\nWeather in Paris?[e~[\n]~b]ai\n<mm:think>"

static void test_m3_rendered_as_m2(void **st)
{
    (void)st;
    m3_tokenizer *t = open_tok();
    size_t n, nm2;
    int32_t *want = template_ids(t, &n);
    int32_t *m2 = encode(t, M2, &nm2);
    cf_chat_diff d;
    m3_err e = {{0}};
    assert_int_equal(cf_chat_check(t, CASE, NULL, m2, nm2, &d, &e), 0);
    assert_false(d.equal);
    const size_t at = first_diff(want, n, m2, nm2);
    assert_int_equal(d.pos, at);
    assert_int_equal(d.want, want[at]);
    assert_int_equal(d.got, m2[at]);
    assert_false(d.got_out_of_vocab);
    /* the context: the common prefix (in the system turn), then each side's text */
    assert_non_null(strstr(d.ctx_before, "]~b]system\n"));
    char both[400];
    snprintf(both, sizeof both, "%s%s", d.ctx_before, d.ctx_got);
    assert_non_null(strstr(M2, both));
    snprintf(both, sizeof both, "%s%s", d.ctx_before, d.ctx_expected);
    char *text;
    size_t len;
    assert_int_equal(m3_read_file(EXPECTED, 1 << 20, &text, &len, &e), 0);
    assert_non_null(strstr(text, both));
    free(text);
    cf_chat_diff_free(&d);
    free(m2);

    /* truncated: the last expected id is missing */
    assert_int_equal(cf_chat_check(t, CASE, NULL, want, n - 1, &d, &e), 0);
    assert_false(d.equal);
    assert_int_equal(d.pos, n - 1);
    assert_int_equal(d.want, want[n - 1]);
    assert_int_equal(d.got, -1);
    cf_chat_diff_free(&d);

    /* one id too many */
    int32_t *longer = malloc((n + 1) * sizeof *longer);
    memcpy(longer, want, n * sizeof *longer);
    longer[n] = want[0];
    assert_int_equal(cf_chat_check(t, CASE, NULL, longer, n + 1, &d, &e), 0);
    assert_false(d.equal);
    assert_int_equal(d.pos, n);
    assert_int_equal(d.want, -1);
    assert_int_equal(d.got, want[0]);
    cf_chat_diff_free(&d);

    /* an id outside the vocabulary, after a matching prefix */
    longer[5] = (int32_t)m3_tokenizer_vocab_size(t) + 7;
    assert_int_equal(cf_chat_check(t, CASE, NULL, longer, n, &d, &e), 0);
    assert_false(d.equal);
    assert_true(d.got_out_of_vocab);
    assert_int_equal(d.pos, 5);
    assert_int_equal(d.got, longer[5]);
    cf_chat_diff_free(&d);
    free(longer);
    free(want);
    m3_tokenizer_free(t);
}

static void test_inputs(void **st)
{
    (void)st;
    int32_t *ids;
    size_t n;
    m3_err e = {{0}};
    assert_int_equal(cf_chat_read_ids(" [1, 2,3] \n", &ids, &n, &e), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[2], 3);
    free(ids);
    char path[] = "/tmp/m3-chat-ids-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("7 8\n9\n", f);
    fclose(f);
    assert_int_equal(cf_chat_read_ids(path, &ids, &n, &e), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 7);
    free(ids);
    f = fopen(path, "w");
    fputs("7,,8", f);
    fclose(f);
    assert_int_equal(cf_chat_read_ids(path, &ids, &n, &e), -1);
    assert_non_null(strstr(e.msg, path));
    remove(path);
    assert_int_equal(cf_chat_read_ids("1,x", &ids, &n, &e), -1);
    assert_non_null(strstr(e.msg, "--ids"));

    m3_tokenizer *t = open_tok();
    cf_chat_diff d;
    const int32_t one[] = {1};
    assert_int_equal(cf_chat_check(t, "vectors/chat/cases/unknown_role.json", NULL, one, 1, &d, &e), -1);
    assert_non_null(strstr(e.msg, "unknown_role.json"));
    assert_int_equal(cf_chat_check(t, "vectors/chat/cases/tool_without_call.json", NULL, one, 1, &d, &e), -1);
    assert_non_null(strstr(e.msg, "tool_without_call.json"));
    assert_int_equal(cf_chat_check(t, CASE, "maybe", one, 1, &d, &e), -1);
    assert_non_null(strstr(e.msg, "--thinking"));
    m3_tokenizer_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass),
        cmocka_unit_test(test_m3_rendered_as_m2),
        cmocka_unit_test(test_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
