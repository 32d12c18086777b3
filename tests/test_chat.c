/* test_chat.c — MiniMax-M3 chat rendering, exact strings.
 * Spec: M3-CHAT-TURN-1, M3-CHAT-SYS-1, M3-CHAT-THINK-1, M3-CHAT-THINK-2, M3-CHAT-MM-1.
 * Expected strings are written out from the turn format in the spec notes E.2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chat.h"
#include "tokenizer.h"

#define SYS "]~!b[]~b]system\nYou are a helpful assistant. Your name is MiniMax-M3 and is built by MiniMax.[e~[\n"

static void expect_render(const m3_chat_msg *m, size_t n, m3_thinking mode, int gen, const char *want) {
    char *out; size_t len; m3_err e = {{0}};
    if (m3_chat_render(m, n, mode, gen, &out, &len, &e)) fail_msg("%s", e.msg);
    assert_string_equal(out, want);
    assert_int_equal(len, strlen(want));
    free(out);
}

static void test_three_modes(void **st) {
    (void)st;
    const m3_chat_msg m[] = {{"user", "test", NULL}};
    expect_render(m, 1, M3_THINK_ADAPTIVE, 1, SYS "]~b]user\ntest[e~[\n]~b]ai\n");
    expect_render(m, 1, M3_THINK_ENABLED, 1, SYS "]~b]user\ntest[e~[\n]~b]ai\n<mm:think>");
    expect_render(m, 1, M3_THINK_DISABLED, 1, SYS "]~b]user\ntest[e~[\n]~b]ai\n</mm:think>");
    expect_render(m, 1, M3_THINK_ENABLED, 0, SYS "]~b]user\ntest[e~[\n");
}

static void test_system_and_history(void **st) {
    (void)st;
    const m3_chat_msg m[] = {
        {"system", "Be brief.", NULL},
        {"user", "2+2?", NULL},
        {"assistant", "4", "Add them."},
        {"user", "and 3+3?", NULL},
        {"assistant", "6", NULL},
        {"tool", "{\"ok\": true}", NULL},
        {"user", "thanks", NULL},
    };
    expect_render(m, 7, M3_THINK_ADAPTIVE, 1,
                  "]~!b[]~b]system\nBe brief.[e~[\n"
                  "]~b]user\n2+2?[e~[\n"
                  "]~b]ai\n<mm:think>Add them.</mm:think>4[e~[\n"
                  "]~b]user\nand 3+3?[e~[\n"
                  "]~b]ai\n</mm:think>6[e~[\n"
                  "]~b]tool\n{\"ok\": true}[e~[\n"
                  "]~b]user\nthanks[e~[\n"
                  "]~b]ai\n");
    /* "ai" is accepted as a role name too; empty reasoning renders as none */
    const m3_chat_msg m2[] = {{"user", "hi", NULL}, {"ai", "hello", ""}};
    expect_render(m2, 2, M3_THINK_DISABLED, 1,
                  SYS "]~b]user\nhi[e~[\n]~b]ai\n</mm:think>hello[e~[\n]~b]ai\n</mm:think>");
    /* no messages at all: bos + default system + prompt */
    expect_render(NULL, 0, M3_THINK_ADAPTIVE, 1, SYS "]~b]ai\n");
}

static void test_media_markers(void **st) {
    (void)st;
    const m3_chat_msg m[] = {{"user", "]<]image[>[What is this? ]<]video[>[", NULL}};
    expect_render(m, 1, M3_THINK_ENABLED, 1,
                  SYS "]~b]user\n]<]image[>[What is this? ]<]video[>[[e~[\n]~b]ai\n<mm:think>");
}

static void test_errors(void **st) {
    (void)st;
    char *out; m3_err e = {{0}};
    const m3_chat_msg late_sys[] = {{"user", "a", NULL}, {"system", "b", NULL}};
    assert_int_equal(m3_chat_render(late_sys, 2, M3_THINK_ADAPTIVE, 1, &out, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "message 1"));
    const m3_chat_msg bad_role[] = {{"robot", "a", NULL}};
    assert_int_equal(m3_chat_render(bad_role, 1, M3_THINK_ADAPTIVE, 1, &out, NULL, &e), -1);
    assert_non_null(strstr(e.msg, "robot"));
    const m3_chat_msg no_content[] = {{"user", NULL, NULL}};
    assert_int_equal(m3_chat_render(no_content, 1, M3_THINK_ADAPTIVE, 1, &out, NULL, &e), -1);
    const m3_chat_msg user_reason[] = {{"user", "a", "b"}};
    assert_int_equal(m3_chat_render(user_reason, 1, M3_THINK_ADAPTIVE, 1, &out, NULL, &e), -1);
    assert_int_equal(m3_chat_render(user_reason, 1, (m3_thinking)7, 1, &out, NULL, &e), -1);
    m3_thinking t;
    assert_int_equal(m3_thinking_parse("enabled", &t, &e), 0); assert_int_equal(t, M3_THINK_ENABLED);
    assert_int_equal(m3_thinking_parse("disabled", &t, &e), 0); assert_int_equal(t, M3_THINK_DISABLED);
    assert_int_equal(m3_thinking_parse("adaptive", &t, &e), 0); assert_int_equal(t, M3_THINK_ADAPTIVE);
    assert_int_equal(m3_thinking_parse("on", &t, &e), -1);
    assert_non_null(strstr(e.msg, "on"));
}

/* The rendered prompt tokenizes with the MiniMax special tokens as single ids
 * (tokenizer trained by HF with the full MiniMax table after its vocab). */
static void test_render_then_encode(void **st) {
    (void)st;
    m3_tokenizer *tok; m3_err e = {{0}};
    if (m3_tokenizer_open(&tok, "vectors/tokenizer/minimax_1000", &e)) fail_msg("%s", e.msg);
    const m3_chat_msg m[] = {{"user", "hi", NULL}};
    char *out; size_t len;
    assert_int_equal(m3_chat_render(m, 1, M3_THINK_ENABLED, 1, &out, &len, &e), 0);
    int32_t *ids; size_t n;
    assert_int_equal(m3_tokenizer_encode(tok, out, len, 1, &ids, &n, &e), 0);
    int32_t bos = m3_tokenizer_token_id(tok, "]~!b["), open = m3_tokenizer_token_id(tok, "]~b]");
    int32_t eot = m3_tokenizer_token_id(tok, "[e~["), think = m3_tokenizer_token_id(tok, "<mm:think>");
    assert_int_equal(m3_tokenizer_bos_id(tok), bos);
    assert_int_equal(m3_tokenizer_eos_id(tok), eot);
    assert_true(n > 6);
    assert_int_equal(ids[0], bos);
    assert_int_equal(ids[1], open);
    assert_int_equal(ids[n - 1], think);
    size_t nopen = 0, neot = 0;
    for (size_t i = 0; i < n; i++) { nopen += ids[i] == open; neot += ids[i] == eot; }
    assert_int_equal(nopen, 3);
    assert_int_equal(neot, 2);
    char *back; size_t bl;
    assert_int_equal(m3_tokenizer_decode(tok, ids, n, 0, &back, &bl, &e), 0);
    assert_string_equal(back, out);
    free(back); free(ids); free(out);
    m3_tokenizer_free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_modes),
        cmocka_unit_test(test_system_and_history),
        cmocka_unit_test(test_media_markers),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_render_then_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
