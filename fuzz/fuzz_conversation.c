/* fuzz_conversation.c — a conversation file (M3-CHAT-FILE-1) through
 * m3_conversation_parse (the JSON reader of ref/json.h and the field checks),
 * then m3_chat_render in every thinking mode, and json.dumps of the whole
 * tree. A parsed conversation must render (the parser already renders it
 * once) and its text must be valid UTF-8. */
#include "common.h"
#include "conversation.h"
#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    m3_err e;
    m3_json *v;
    if (m3_json_parse((const char *)data, size, &v, &e) == 0) {
        m3_strbuf b = {0};
        m3_json_dump_py(v, &b);
        if (!b.oom && b.p && !m3fuzz_utf8_ok(b.p, b.n))
            abort(); /* the writer only copies valid UTF-8 through */
        free(b.p);
        m3_json_free(v);
    }
    m3_conversation *cv;
    if (m3_conversation_parse((const char *)data, size, "fuzz.json", &cv, &e) != 0)
        return 0;
    m3_chat_conv c = *m3_conversation_chat(cv);
    for (int mode = 0; mode < 3; mode++) {
        c.mode = (m3_thinking)mode;
        char *out;
        size_t len;
        if (m3_chat_render(&c, &out, &len, &e) != 0)
            abort(); /* a parsed conversation always renders */
        if (len != strlen(out) || !m3fuzz_utf8_ok(out, len))
            abort();
        free(out);
    }
    m3_conversation_free(cv);
    return 0;
}
