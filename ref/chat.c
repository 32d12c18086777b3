/* chat.c — MiniMax-M3 chat rendering (spec M3-CHAT-*; see chat.h). */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#define BOS "]~!b["
#define OPEN "]~b]"
#define EOT "[e~[\n"
#define THINK "<mm:think>"
#define ENDTHINK "</mm:think>"

typedef struct sbuf { char *p; size_t n, cap; int oom; } sbuf;

static void put(sbuf *b, const char *s) {
    size_t l = strlen(s);
    if (b->oom) return;
    if (b->n + l + 1 > b->cap) {
        size_t nc = (b->n + l + 1) * 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = 1; return; }
        b->p = np; b->cap = nc;
    }
    memcpy(b->p + b->n, s, l + 1);
    b->n += l;
}

int m3_thinking_parse(const char *s, m3_thinking *out, m3_err *e) {
    if (s && strcmp(s, "adaptive") == 0) *out = M3_THINK_ADAPTIVE;
    else if (s && strcmp(s, "enabled") == 0) *out = M3_THINK_ENABLED;
    else if (s && strcmp(s, "disabled") == 0) *out = M3_THINK_DISABLED;
    else return m3_fail(e, "thinking mode \"%s\" is not one of adaptive, enabled, disabled", s ? s : "(null)");
    return 0;
}

int m3_chat_render(const m3_chat_msg *msgs, size_t n, m3_thinking mode, int add_generation_prompt,
                   char **out, size_t *len, m3_err *e) {
    *out = NULL;
    if (len) *len = 0;
    if (mode != M3_THINK_ADAPTIVE && mode != M3_THINK_ENABLED && mode != M3_THINK_DISABLED)
        return m3_fail(e, "chat: unknown thinking mode %d", (int)mode);
    sbuf b = {0};
    put(&b, BOS);
    size_t i = 0;
    put(&b, OPEN "system\n");
    if (n > 0 && msgs[0].role && strcmp(msgs[0].role, "system") == 0) {
        put(&b, msgs[0].content ? msgs[0].content : "");
        i = 1;
    } else {
        put(&b, M3_CHAT_DEFAULT_SYSTEM);
    }
    put(&b, EOT);
    for (; i < n; i++) {
        const m3_chat_msg *m = &msgs[i];
        const char *r = m->role;
        if (!r) { free(b.p); return m3_fail(e, "chat: message %zu has no role", i); }
        if (strcmp(r, "system") == 0) {
            free(b.p);
            return m3_fail(e, "chat: message %zu: a system message is only allowed first", i);
        }
        if (strcmp(r, "assistant") == 0 || strcmp(r, "ai") == 0) {
            put(&b, OPEN "ai\n");
            if (m->reasoning && m->reasoning[0]) { put(&b, THINK); put(&b, m->reasoning); put(&b, ENDTHINK); }
            else put(&b, ENDTHINK);
            put(&b, m->content ? m->content : "");
            put(&b, EOT);
            continue;
        }
        if (strcmp(r, "user") != 0 && strcmp(r, "tool") != 0) {
            free(b.p);
            return m3_fail(e, "chat: message %zu: unknown role \"%.40s\" (system, user, assistant, tool)", i, r);
        }
        if (!m->content) { free(b.p); return m3_fail(e, "chat: message %zu (%s) has no content", i, r); }
        if (m->reasoning && m->reasoning[0]) {
            free(b.p);
            return m3_fail(e, "chat: message %zu (%s): only assistant messages carry reasoning", i, r);
        }
        put(&b, OPEN); put(&b, r); put(&b, "\n"); put(&b, m->content); put(&b, EOT);
    }
    if (add_generation_prompt) {
        put(&b, OPEN "ai\n");
        if (mode == M3_THINK_ENABLED) put(&b, THINK);
        else if (mode == M3_THINK_DISABLED) put(&b, ENDTHINK);
    }
    if (b.oom) { free(b.p); return m3_fail(e, "chat: out of memory"); }
    *out = b.p;
    if (len) *len = b.n;
    return 0;
}
