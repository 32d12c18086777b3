/* test_chat.c — the chat renderer's API, the JSON reader under it, and the
 * conversation file's errors.
 * Spec: M3-CHAT-TURN-1, M3-CHAT-ROLE-1, M3-CHAT-THINK-1, M3-CHAT-REJECT-1,
 * M3-CHAT-FILE-1, M3-CHAT-TOOLS-1, M3-TOK-IDS-1.
 * The renderings themselves are checked against the published template in
 * test_chat_vectors.c; here the typed API gives the same text as the
 * conversation file, bad input is refused with the field named, and the
 * Python number and string forms follow Python's documented rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "chat.h"
#include "conversation.h"
#include "fileio.h"
#include "json.h"
#include "tokenizer.h"

static char *render(const m3_chat_conv *c)
{
    char *out;
    size_t len;
    m3_err e = {{0}};
    if (m3_chat_render(c, &out, &len, &e))
        fail_msg("%s", e.msg);
    assert_int_equal(len, strlen(out));
    return out;
}

static char *render_file(const char *text)
{
    m3_conversation *cv;
    m3_err e = {{0}};
    if (m3_conversation_parse(text, strlen(text), "t.json", &cv, &e))
        fail_msg("%s", e.msg);
    char *out = render(m3_conversation_chat(cv));
    m3_conversation_free(cv);
    return out;
}

/* The typed API and the file give the same text for the same conversation. */
static void test_api_equals_file(void **st)
{
    (void)st;
    const m3_chat_part parts[] = {{M3_PART_IMAGE, NULL}, {M3_PART_TEXT, "What is it?"}};
    const m3_chat_msg m[] = {
        {.role = M3_ROLE_ROOT, .content = "Root."},
        {.role = M3_ROLE_DEVELOPER, .content = "Dev."},
        {.role = M3_ROLE_USER, .parts = parts, .n_parts = 2},
        {.role = M3_ROLE_ASSISTANT, .content = "A cat.", .reasoning = "Look."},
    };
    for (int mode = 0; mode < 3; mode++)
        for (int gen = 0; gen < 2; gen++) {
            m3_chat_conv c = {.msgs = m, .n_msgs = 4, .mode = (m3_thinking)mode,
                              .add_generation_prompt = gen};
            char file[600];
            snprintf(file, sizeof file,
                     "{\"thinking_mode\": \"%s\", \"add_generation_prompt\": %s, \"messages\": ["
                     "{\"role\": \"root\", \"content\": \"Root.\"},"
                     "{\"role\": \"developer\", \"content\": \"Dev.\"},"
                     "{\"role\": \"user\", \"content\": [{\"type\": \"image\"}, "
                     "{\"type\": \"text\", \"text\": \"What is it?\"}]},"
                     "{\"role\": \"assistant\", \"content\": \"A cat.\", \"reasoning_content\": \"Look.\"}]}",
                     m3_thinking_name((m3_thinking)mode), gen ? "true" : "false");
            char *a = render(&c), *b = render_file(file);
            assert_string_equal(a, b);
            assert_non_null(strstr(a, "]~!b[]~b]system\nRoot.\n\n<thinking_instructions>"));
            assert_non_null(strstr(a, "[e~[\n]~b]developer\nDev.[e~[\n]~b]user\n]<]image[>[What is it?"));
            char line[80];
            snprintf(line, sizeof line, "Current thinking mode: %s.", m3_thinking_name((m3_thinking)mode));
            assert_non_null(strstr(a, line));
            free(a);
            free(b);
        }
}

static void expect_render_error(const m3_chat_msg *m, size_t n, const char *want)
{
    m3_chat_conv c = {.msgs = m, .n_msgs = n};
    char *out = (char *)1;
    m3_err e = {{0}};
    assert_int_equal(m3_chat_render(&c, &out, NULL, &e), -1);
    assert_null(out);
    if (!strstr(e.msg, want))
        fail_msg("\"%s\" does not contain \"%s\"", e.msg, want);
}

static void test_api_errors(void **st)
{
    (void)st;
    const m3_chat_msg late_sys[] = {{.role = M3_ROLE_USER, .content = "a"},
                                    {.role = M3_ROLE_SYSTEM, .content = "b"}};
    expect_render_error(late_sys, 2, "message 1");
    const m3_chat_msg late_root[] = {{.role = M3_ROLE_USER, .content = "a"},
                                     {.role = M3_ROLE_ROOT, .content = "b"}};
    expect_render_error(late_root, 2, "root message is only allowed first");
    const m3_chat_msg orphan[] = {{.role = M3_ROLE_TOOL, .content = "r"}};
    expect_render_error(orphan, 1, "message 0: a tool message needs");
    const m3_chat_msg user_reason[] = {{.role = M3_ROLE_USER, .content = "a", .reasoning = "b"}};
    expect_render_error(user_reason, 1, "only assistant messages");
    const m3_chat_msg bad_role[] = {{.role = (m3_chat_role)9, .content = "a"}};
    expect_render_error(bad_role, 1, "unknown role");
    const m3_chat_part nul_text[] = {{M3_PART_TEXT, NULL}};
    const m3_chat_msg bad_part[] = {{.role = M3_ROLE_USER, .parts = nul_text, .n_parts = 1}};
    expect_render_error(bad_part, 1, "has no text");
    m3_chat_conv c = {.mode = (m3_thinking)7};
    char *out;
    m3_err e = {{0}};
    assert_int_equal(m3_chat_render(&c, &out, NULL, &e), -1);
    m3_thinking t;
    assert_int_equal(m3_thinking_parse("enabled", &t, &e), 0);
    assert_int_equal(t, M3_THINK_ENABLED);
    assert_int_equal(m3_thinking_parse("disabled", &t, &e), 0);
    assert_int_equal(t, M3_THINK_DISABLED);
    assert_int_equal(m3_thinking_parse("adaptive", &t, &e), 0);
    assert_int_equal(t, M3_THINK_ADAPTIVE);
    assert_int_equal(m3_thinking_parse("on", &t, &e), -1);
    assert_non_null(strstr(e.msg, "on"));
}

static void expect_file_error(const char *text, const char *want)
{
    m3_conversation *cv = (m3_conversation *)1;
    m3_err e = {{0}};
    assert_int_equal(m3_conversation_parse(text, strlen(text), "bad.json", &cv, &e), -1);
    assert_null(cv);
    if (!strstr(e.msg, "bad.json") || !strstr(e.msg, want))
        fail_msg("\"%s\" does not name bad.json and \"%s\"", e.msg, want);
}

/* Bad conversation files: the message names the file and the field. */
static void test_file_errors(void **st)
{
    (void)st;
    expect_file_error("", "line 1, column 1");
    expect_file_error("{\"messages\": [}", "line 1, column 15");
    expect_file_error("{\"messages\": []}\n x", "line 2, column 2: extra text");
    expect_file_error("{\"messages\": [], \"messages\": []}", "duplicate member name \"messages\"");
    expect_file_error("{\"msgs\": []}", "unknown field \"msgs\"");
    expect_file_error("{\"tools\": []}", "no \"messages\"");
    expect_file_error("{\"messages\": 3}", "messages");
    expect_file_error("{\"messages\": [1]}", "messages[0] (line 1): must be an object");
    expect_file_error("{\"messages\": [{\"content\": \"x\"}]}", "needs \"role\"");
    expect_file_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"reasoning\": \"r\"}]}",
                      "messages[0] (line 1): unknown field \"reasoning\"");
    expect_file_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
                      "messages[0].content[0]");
    expect_file_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"x\"}]}]}",
                      "needs \"type\"");
    expect_file_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": 1}]}]}",
                      "messages[0].content[0].text");
    expect_file_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": []}]}",
                      "only assistant messages carry tool_calls");
    expect_file_error("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"name\": \"f\", "
                      "\"arguments\": \"{}\"}]}]}",
                      "messages[0].tool_calls[0].arguments (line 1): must be an object");
    expect_file_error("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
                      "{\"name\": 3, \"arguments\": {}}}]}]}",
                      "messages[0].tool_calls[0].function.name");
    expect_file_error("{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
                      "{\"arguments\": {}}}]}]}",
                      "needs \"name\"");
    expect_file_error("{\"messages\": [{\"role\": \"assistant\", \"reasoning_content\": 1}]}",
                      "messages[0].reasoning_content");
    expect_file_error("{\"messages\": [], \"tools\": [{\"name\": \"f\"}]}", "tools[0]");
    expect_file_error("{\"messages\": [], \"tools\": {}}", "tools (line 1): must be an array");
    expect_file_error("{\"messages\": [], \"thinking_mode\": 1}", "thinking_mode");
    expect_file_error("{\"messages\": [], \"add_generation_prompt\": 1}", "add_generation_prompt");
    expect_file_error("{\"messages\": [], \"model_identity\": []}", "model_identity");
    /* JSON that Python's json module reads differently or not at all */
    expect_file_error("\xEF\xBB\xBF[]", "byte-order mark");
    expect_file_error("[\"\\ud800\"]", "lone UTF-16 surrogate");
    expect_file_error("[\"a\\u0000b\"]", "NUL");
    expect_file_error("[\"\xC3\x28\"]", "invalid UTF-8");
    expect_file_error("[NaN]", "expected a JSON value");
    expect_file_error("[1e999]", "too large");
    expect_file_error("[01]", "leading zeros");
    expect_file_error("[\"a\nb\"]", "control character");
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 99);
    deep[199] = '\0';
    expect_file_error(deep, "deeper than 64");
}

static void expect_dump(const char *json, const char *want)
{
    m3_json *v;
    m3_err e = {{0}};
    if (m3_json_parse(json, strlen(json), &v, &e))
        fail_msg("%s", e.msg);
    m3_strbuf b = {0};
    m3_json_dump_py(v, &b);
    assert_false(b.oom);
    assert_string_equal(b.p, want);
    free(b.p);
    m3_json_free(v);
}

/* json.dumps(ensure_ascii=False) and repr(float) forms, from the rules of
 * Python's json module and float repr (shortest round trip; exponent form
 * below 1e-4 and from 1e16; "-0" is the int 0). */
static void test_python_forms(void **st)
{
    (void)st;
    expect_dump("[1, -0, 1.0, 1e2, 1E-5, 0.0001, 1e16, 1e15, -0.0, 0.1, 2.5e-300, 123.456e3]",
                "[1, 0, 1.0, 100.0, 1e-05, 0.0001, 1e+16, 1000000000000000.0, -0.0, 0.1, 2.5e-300, "
                "123456.0]");
    expect_dump("[123456789012345678901234567890, 1.7976931348623157e308, 5e-324, 0.30000000000000004]",
                "[123456789012345678901234567890, 1.7976931348623157e+308, 5e-324, 0.30000000000000004]");
    expect_dump("{\"b\": {}, \"a\": [], \"\\u00e9\": \"\\u4e2d\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0001\\u007f\"}",
                "{\"b\": {}, \"a\": [], \"\xC3\xA9\": \"\xE4\xB8\xAD\\\"\\\\/\\b\\f\\n\\r\\t\\u0001\x7F\"}");
    expect_dump("[true, false, null, \"\\ud83d\\ude00\"]", "[true, false, null, \"\xF0\x9F\x98\x80\"]");
}

/* A rendered prompt tokenizes with the MiniMax special tokens as single ids
 * (a tokenizer trained by HF with the full MiniMax table after its vocab). */
static void test_render_then_encode(void **st)
{
    (void)st;
    m3_tokenizer *tok;
    m3_err e = {{0}};
    if (m3_tokenizer_open(&tok, "vectors/tokenizer/minimax_1000", &e))
        fail_msg("%s", e.msg);
    const m3_chat_msg m[] = {{.role = M3_ROLE_USER, .content = "hi"}};
    m3_chat_conv c = {.msgs = m, .n_msgs = 1, .mode = M3_THINK_ENABLED, .add_generation_prompt = 1};
    char *out = render(&c);
    int32_t *ids;
    size_t n;
    assert_int_equal(m3_tokenizer_encode(tok, out, strlen(out), 1, &ids, &n, &e), 0);
    int32_t bos = m3_tokenizer_token_id(tok, "]~!b["), open = m3_tokenizer_token_id(tok, "]~b]");
    int32_t eot = m3_tokenizer_token_id(tok, "[e~["), think = m3_tokenizer_token_id(tok, "<mm:think>");
    assert_int_equal(m3_tokenizer_bos_id(tok), bos);
    assert_int_equal(m3_tokenizer_eos_id(tok), eot);
    assert_true(n > 6);
    assert_int_equal(ids[0], bos);
    assert_int_equal(ids[1], open);
    assert_int_equal(ids[n - 1], think);
    size_t nopen = 0, neot = 0;
    for (size_t i = 0; i < n; i++) {
        nopen += ids[i] == open;
        neot += ids[i] == eot;
    }
    assert_int_equal(nopen, 4); /* system, developer, user, ai */
    assert_int_equal(neot, 3);
    char *back;
    size_t bl;
    assert_int_equal(m3_tokenizer_decode(tok, ids, n, 0, &back, &bl, &e), 0);
    assert_string_equal(back, out);
    free(back);
    free(ids);
    free(out);
    m3_tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_equals_file),
        cmocka_unit_test(test_api_errors),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_python_forms),
        cmocka_unit_test(test_render_then_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
