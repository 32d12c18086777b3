/* test_chat_vectors.c — the chat renderer against the published M3 template.
 * Spec: M3-CHAT-* (every clause of section 17), M3-CHAT-FILE-1, M3-CHAT-REJECT-1.
 *
 * vectors/chat/manifest.json lists the cases (tools/chat_vectors.py). For a
 * "text" case the conversation file cases/NAME.json, read by
 * m3_conversation_load and rendered by m3_chat_render, must equal
 * expected/NAME.txt (the template rendered by jinja2) byte for byte. For an
 * "error" case (the template raises) and a "reject" case (the template
 * renders, m3 refuses), loading must fail with a message that names the file
 * and the manifest's field. Every branch in the manifest has a case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>
#include <cmocka.h>

#include "chat.h"
#include "conversation.h"
#include "fileio.h"

#define DIR "vectors/chat"

static cJSON *manifest(void)
{
    char *buf;
    size_t len;
    m3_err e = {{0}};
    if (m3_read_file(DIR "/manifest.json", 1 << 20, &buf, &len, &e) != 0)
        fail_msg("%s", e.msg);
    cJSON *m = cJSON_Parse(buf);
    free(buf);
    assert_non_null(m);
    return m;
}

static void test_all_cases(void **st)
{
    (void)st;
    cJSON *man = manifest();
    const cJSON *cases = cJSON_GetObjectItem(man, "cases");
    int n_text = 0, n_fail = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const char *kind = cJSON_GetObjectItem(c, "kind")->valuestring;
        char path[512], epath[512];
        snprintf(path, sizeof path, DIR "/cases/%s.json", name);
        m3_conversation *cv = NULL;
        m3_err e = {{0}};
        int rc = m3_conversation_load(path, &cv, &e);
        if (strcmp(kind, "text") == 0) {
            if (rc != 0)
                fail_msg("%s: %s", name, e.msg);
            char *out;
            size_t len;
            if (m3_chat_render(m3_conversation_chat(cv), &out, &len, &e) != 0)
                fail_msg("%s: %s", name, e.msg);
            snprintf(epath, sizeof epath, DIR "/expected/%s.txt", name);
            char *want;
            size_t wlen;
            if (m3_read_file(epath, 1 << 20, &want, &wlen, &e) != 0)
                fail_msg("%s", e.msg);
            if (len != wlen || memcmp(out, want, len) != 0) {
                size_t i = 0;
                while (i < len && i < wlen && out[i] == want[i])
                    i++;
                fail_msg("%s: rendering differs from the template at byte %zu (got %zu bytes, "
                         "want %zu): got \"%.40s\" want \"%.40s\"",
                         name, i, len, wlen, out + i, want + i);
            }
            free(out);
            free(want);
            m3_conversation_free(cv);
            n_text++;
        } else {
            const char *field = cJSON_GetObjectItem(c, "field")->valuestring;
            if (rc == 0)
                fail_msg("%s (%s case): the conversation was accepted", name, kind);
            assert_null(cv);
            if (!strstr(e.msg, path) || !strstr(e.msg, field))
                fail_msg("%s: the message does not name the file and \"%s\": %s", name, field, e.msg);
            n_fail++;
        }
    }
    /* the brief of the suite: at least 30 rendered conversations */
    assert_true(n_text >= 30);
    assert_true(n_fail >= 1);
    /* every branch the manifest lists is taken by some case */
    const cJSON *br;
    cJSON_ArrayForEach(br, cJSON_GetObjectItem(man, "branches"))
    {
        int seen = 0;
        cJSON_ArrayForEach(c, cases)
        {
            const cJSON *b;
            cJSON_ArrayForEach(b, cJSON_GetObjectItem(c, "branches"))
                seen |= strcmp(b->valuestring, br->string) == 0;
        }
        if (!seen)
            fail_msg("branch %s has no case", br->string);
    }
    cJSON_Delete(man);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
