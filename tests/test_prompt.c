/* test_prompt.c — the prompt option rules and --prompt encoding shared by
 * bin/m3-ref and bin/m3-gpu (ref/prompt.h).
 * Spec: M3-CHAT-TURN-1, M3-CHAT-SYS-1, M3-CHAT-THINK-1, M3-TOK-SPECIAL-1.
 * The chat cases compare with the encoding of the conversation written out by
 * hand from the turn format (notes E.2), not with m3_chat_render's output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prompt.h"
#include "tokenizer.h"

#define TOKDIR "vectors/tokenizer/minimax_1000"
#define DEFSYS "You are a helpful assistant. Your name is MiniMax-M3 and is built by MiniMax."

/* check(o) fails with a message containing want (NULL: succeeds) */
static void check_is(const m3_prompt_opts *o, const char *want)
{
    m3_err e = {{0}};
    int rc = m3_prompt_check(o, &e);
    if (!want) {
        if (rc != 0)
            fail_msg("unexpected failure: %s", e.msg);
        return;
    }
    assert_int_equal(rc, -1);
    if (!strstr(e.msg, want))
        fail_msg("message \"%s\" does not contain \"%s\"", e.msg, want);
}

static void test_check_chat_rules(void **st)
{
    (void)st;
    m3_prompt_opts o = {0};
    check_is(&o, NULL);
    o.have_text = 1;
    check_is(&o, NULL);
    o.chat = 1;
    o.system = "Be brief.";
    o.thinking = "enabled";
    check_is(&o, NULL);
    o.thinking = "maybe";
    check_is(&o, "adaptive, enabled or disabled (got 'maybe')");
    o.thinking = "disabled";
    o.have_text = 0; /* a token-id prompt cannot be chatted */
    check_is(&o, "need --prompt");
    o.have_text = 1;
    o.chat = 0;
    check_is(&o, "need --chat");
    o.system = NULL;
    check_is(&o, "need --chat");
    o.thinking = NULL;
    o.system = "x";
    check_is(&o, "need --chat");
    m3_prompt_opts c = {0};
    c.chat = 1;
    check_is(&c, "need --prompt");
}

static void test_check_media_rules(void **st)
{
    (void)st;
    m3_prompt_opts o = {0};
    o.n_images = 2;
    o.joint = 1;
    check_is(&o, NULL);
    o.pixels = "p.safetensors";
    check_is(&o, "one or the other");
    o.n_images = 0;
    check_is(&o, NULL);
    o.pixels = NULL;
    check_is(&o, "--vision-joint needs");
    o.joint = 0;
    o.have_fps = 1;
    check_is(&o, "--fps needs --video");
    o.have_fps = 0;
    o.video = "a.png,b.png";
    check_is(&o, "needs --fps");
    o.have_fps = 1;
    check_is(&o, NULL);
    o.pixels = "p.safetensors";
    check_is(&o, "one or the other");
}

static void encode_plain(const m3_tokenizer *t, const char *s, int32_t **ids, size_t *n)
{
    m3_err e = {{0}};
    if (m3_tokenizer_encode(t, s, strlen(s), 1, ids, n, &e) != 0)
        fail_msg("%s", e.msg);
}

static void expect_same(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++)
        assert_int_equal(a[i], b[i]);
}

static void test_encode(void **st)
{
    (void)st;
    m3_tokenizer *t;
    m3_err e = {{0}};
    if (m3_tokenizer_open(&t, TOKDIR, &e))
        fail_msg("%s", e.msg);
    int32_t *got, *want;
    size_t ng, nw;

    /* plain: the text as it is, special strings matched (o NULL or chat off) */
    const char *plain = "]~!b[Hello world";
    assert_int_equal(m3_prompt_encode(t, plain, NULL, &got, &ng, &e), 0);
    encode_plain(t, plain, &want, &nw);
    expect_same(got, ng, want, nw);
    assert_int_equal(got[0], m3_tokenizer_token_id(t, "]~!b["));
    free(got);
    free(want);

    /* chat, default system prompt, adaptive */
    m3_prompt_opts o = {0};
    o.have_text = 1;
    o.chat = 1;
    assert_int_equal(m3_prompt_encode(t, "Hi", &o, &got, &ng, &e), 0);
    encode_plain(t, "]~!b[]~b]system\n" DEFSYS "[e~[\n]~b]user\nHi[e~[\n]~b]ai\n", &want, &nw);
    expect_same(got, ng, want, nw);
    free(got);
    free(want);

    /* chat with a system turn, thinking disabled / enabled */
    o.system = "Be brief.";
    o.thinking = "disabled";
    assert_int_equal(m3_prompt_encode(t, "Hi", &o, &got, &ng, &e), 0);
    encode_plain(t, "]~!b[]~b]system\nBe brief.[e~[\n]~b]user\nHi[e~[\n]~b]ai\n</mm:think>", &want,
                 &nw);
    expect_same(got, ng, want, nw);
    free(got);
    free(want);
    o.thinking = "enabled";
    assert_int_equal(m3_prompt_encode(t, "Hi", &o, &got, &ng, &e), 0);
    assert_int_equal(got[ng - 1], m3_tokenizer_token_id(t, "<mm:think>"));
    free(got);

    /* errors: empty plain text (a chat turn may be empty), bad thinking mode */
    assert_int_equal(m3_prompt_encode(t, "", NULL, &got, &ng, &e), -1);
    assert_non_null(strstr(e.msg, "empty prompt"));
    assert_null(got);
    assert_int_equal(ng, 0);
    o.thinking = NULL;
    assert_int_equal(m3_prompt_encode(t, "", &o, &got, &ng, &e), 0);
    assert_true(ng > 0);
    free(got);
    o.thinking = "sometimes";
    assert_int_equal(m3_prompt_encode(t, "Hi", &o, &got, &ng, &e), -1);
    assert_non_null(strstr(e.msg, "sometimes"));
    assert_null(got);
    m3_tokenizer_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_chat_rules),
        cmocka_unit_test(test_check_media_rules),
        cmocka_unit_test(test_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
