/* test_prompt.c — the prompt option rules and --prompt encoding shared by
 * bin/m3-ref and bin/m3-gpu (ref/prompt.h).
 * Spec: M3-CHAT-TURN-1, M3-CHAT-ROLE-1, M3-CHAT-THINK-1, M3-CHAT-FILE-1,
 * M3-TOK-SPECIAL-1.
 * The chat cases compare with the encoding of the published template's own
 * rendering of the same conversation (vectors/chat/expected, written by
 * jinja2 through tools/chat_vectors.py), not with m3_chat_render's output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fileio.h"
#include "prompt.h"
#include "tokenizer.h"

#define TOKDIR "vectors/tokenizer/minimax_1000"
#define CHATDIR "vectors/chat"

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
    /* --conversation FILE: with --thinking; not with --prompt, --chat, --system */
    m3_prompt_opts v = {0};
    v.conversation = "c.json";
    check_is(&v, NULL);
    v.thinking = "disabled";
    check_is(&v, NULL);
    v.thinking = "never";
    check_is(&v, "adaptive, enabled or disabled");
    v.thinking = NULL;
    v.have_text = 1;
    check_is(&v, "--conversation FILE replaces");
    v.have_text = 0;
    v.chat = 1;
    check_is(&v, "--conversation FILE replaces");
    v.chat = 0;
    v.system = "s";
    check_is(&v, "--conversation FILE replaces");
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

/* m3_prompt_encode(text, o) equals the encoding of vectors/chat/expected/NAME.txt */
static void expect_template(const m3_tokenizer *t, const char *text, const m3_prompt_opts *o,
                            const char *name)
{
    char path[256], *want_text;
    size_t wl, ng, nw;
    int32_t *got, *want;
    m3_err e = {{0}};
    snprintf(path, sizeof path, CHATDIR "/expected/%s.txt", name);
    if (m3_read_file(path, 1 << 20, &want_text, &wl, &e) != 0)
        fail_msg("%s", e.msg);
    if (m3_prompt_encode(t, text, o, &got, &ng, &e) != 0)
        fail_msg("%s: %s", name, e.msg);
    encode_plain(t, want_text, &want, &nw);
    expect_same(got, ng, want, nw);
    free(want_text);
    free(got);
    free(want);
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

    /* --chat: the user turn of a conversation, each as the template renders it
     * (vectors/chat cases single_user_default, mode_enabled, mode_disabled,
     * mode_adaptive, system_first) */
    m3_prompt_opts o = {0};
    o.have_text = 1;
    o.chat = 1;
    expect_template(t, "Hello!", &o, "single_user_default");
    o.thinking = "enabled";
    expect_template(t, "Prove it.", &o, "mode_enabled");
    o.thinking = "disabled";
    expect_template(t, "Quick answer.", &o, "mode_disabled");
    o.thinking = "adaptive";
    expect_template(t, "Maybe think.", &o, "mode_adaptive");
    o.thinking = NULL;
    o.system = "You are a pirate."; /* --system fills the developer turn */
    expect_template(t, "Ahoy", &o, "system_first");
    assert_int_equal(m3_prompt_encode(t, "Hi", &o, &got, &ng, &e), 0);
    free(got);

    /* --conversation FILE: the file's rendering; --thinking replaces its mode */
    m3_prompt_opts f = {0};
    f.conversation = CHATDIR "/cases/tools_weather_call.json";
    expect_template(t, NULL, &f, "tools_weather_call");
    f.conversation = CHATDIR "/cases/single_user_default.json";
    f.thinking = "disabled";
    m3_prompt_opts chat = {.have_text = 1, .chat = 1, .thinking = "disabled"};
    int32_t *viachat;
    size_t nv;
    assert_int_equal(m3_prompt_encode(t, NULL, &f, &got, &ng, &e), 0);
    assert_int_equal(m3_prompt_encode(t, "Hello!", &chat, &viachat, &nv, &e), 0);
    expect_same(got, ng, viachat, nv);
    assert_int_equal(got[ng - 1], m3_tokenizer_token_id(t, "</mm:think>"));
    free(got);
    free(viachat);
    f.thinking = "sometimes";
    assert_int_equal(m3_prompt_encode(t, NULL, &f, &got, &ng, &e), -1);
    assert_non_null(strstr(e.msg, "sometimes"));
    f.thinking = NULL;
    f.conversation = CHATDIR "/cases/unknown_role.json"; /* a bad file: named */
    assert_int_equal(m3_prompt_encode(t, NULL, &f, &got, &ng, &e), -1);
    assert_non_null(strstr(e.msg, "unknown_role.json"));
    assert_null(got);
    f.conversation = CHATDIR "/no-such-file.json";
    assert_int_equal(m3_prompt_encode(t, NULL, &f, &got, &ng, &e), -1);
    assert_non_null(strstr(e.msg, "no-such-file.json"));

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
