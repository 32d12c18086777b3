/* chat.c — MiniMax-M3 chat rendering (spec M3-CHAT-*; see chat.h). */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#define BOD "]~!b["
#define OPEN "]~b]"
#define EOT "[e~["
#define NS "]<]minimax[>["
#define THINK "<mm:think>"
#define ENDTHINK "</mm:think>"
#define IMAGE "]<]image[>["
#define VIDEO "]<]video[>["

static const char THINKING_INTRO[] =
    "\n\n<thinking_instructions>\n"
    "You have a thinking capability that allows you to reason step by step before responding. "
    "When thinking is enabled, wrap your reasoning in " THINK ENDTHINK " tags before your "
    "response. When thinking is disabled, begin your response directly after the " ENDTHINK
    " prefix. When thinking is adaptive, decide on your own whether to think for the current "
    "turn.\n";

static const char MODE_ENABLED[] = "Current thinking mode: enabled. You MUST think step by step "
                                   "before every response, including after receiving "
                                   "function/tool results.\n";
static const char MODE_DISABLED[] = "Current thinking mode: disabled. Do not output any thinking "
                                    "process.\n";
static const char MODE_ADAPTIVE[] = "Current thinking mode: adaptive. You are encouraged to think "
                                    "for complex decision-making, multi-step reasoning, or when "
                                    "analyzing function/tool results.\n";

static const char TOOLS_INTRO[] = "\n\n# Tools\nYou may call one or more tools to assist with the "
                                  "user query.\nHere are the tools available in JSONSchema "
                                  "format:\n\n<tools>\n";

static const char TOOLS_OUTRO[] =
    "</tools>\n\n"
    "To call tools, wrap all invocations in a single " NS "<tool_call>" NS "</tool_call> block. "
    "Parameter values containing nested objects or arrays are recursively expanded into XML "
    "elements. Example:\n"
    "\n" NS "<tool_call>\n"
    NS "<invoke name=\"tool-name-1\">" NS "<param-1>value-1" NS "</param-1>" NS "<param-2>" NS
    "<item>" NS "<key-a>val-a" NS "</key-a>" NS "<key-b>val-b" NS "</key-b>" NS "</item>" NS
    "</param-2>" NS "</invoke>\n"
    NS "<invoke name=\"tool-name-2\">" NS "<param-1>value-1" NS "</param-1>" NS "</invoke>\n"
    NS "</tool_call>";

int m3_thinking_parse(const char *s, m3_thinking *out, m3_err *e)
{
    if (s && strcmp(s, "adaptive") == 0)
        *out = M3_THINK_ADAPTIVE;
    else if (s && strcmp(s, "enabled") == 0)
        *out = M3_THINK_ENABLED;
    else if (s && strcmp(s, "disabled") == 0)
        *out = M3_THINK_DISABLED;
    else
        return m3_fail(e, "thinking mode \"%.60s\" is not one of adaptive, enabled, disabled",
                       s ? s : "(null)");
    return 0;
}

const char *m3_thinking_name(m3_thinking t)
{
    return t == M3_THINK_ENABLED ? "enabled" : t == M3_THINK_DISABLED ? "disabled" : "adaptive";
}

const char *m3_chat_role_name(m3_chat_role r)
{
    static const char *const names[] = {"root", "system", "developer", "user", "assistant", "tool"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

/* The template's visible_text: text as it is, parts concatenated. */
static void put_visible(m3_strbuf *b, const m3_chat_msg *m)
{
    if (m->content) {
        m3_strbuf_puts(b, m->content);
        return;
    }
    for (size_t i = 0; i < m->n_parts; i++) {
        const m3_chat_part *p = &m->parts[i];
        m3_strbuf_puts(b, p->kind == M3_PART_IMAGE ? IMAGE : p->kind == M3_PART_VIDEO ? VIDEO
                                                                                    : p->text);
    }
}

/* The template's truthiness of a message's content: a non-empty string or
 * a non-empty list. */
static int has_content(const m3_chat_msg *m)
{
    return m->content ? m->content[0] != '\0' : m->n_parts > 0;
}

/* The template's to_xml: objects and arrays as nested elements (null members
 * skipped, null items empty), booleans as true/false, strings as they are,
 * numbers as Python's str(). */
static void put_xml(m3_strbuf *b, const m3_json *v)
{
    switch (v->type) {
    case M3_JSON_OBJECT:
        for (const m3_json *c = v->child; c; c = c->next) {
            if (c->type == M3_JSON_NULL)
                continue;
            m3_strbuf_puts(b, NS "<");
            m3_strbuf_puts(b, c->key);
            m3_strbuf_puts(b, ">");
            put_xml(b, c);
            m3_strbuf_puts(b, NS "</");
            m3_strbuf_puts(b, c->key);
            m3_strbuf_puts(b, ">");
        }
        return;
    case M3_JSON_ARRAY:
        for (const m3_json *c = v->child; c; c = c->next) {
            m3_strbuf_puts(b, NS "<item>");
            put_xml(b, c);
            m3_strbuf_puts(b, NS "</item>");
        }
        return;
    case M3_JSON_NULL: return;
    case M3_JSON_TRUE: m3_strbuf_puts(b, "true"); return;
    case M3_JSON_FALSE: m3_strbuf_puts(b, "false"); return;
    case M3_JSON_STRING: m3_strbuf_puts(b, v->str); return;
    case M3_JSON_NUMBER: m3_json_number_py(v, b); return;
    }
}

/* [s, s+n) with leading and trailing '\n' removed (Python str.strip('\n')). */
static void strip_nl(const char **s, size_t *n)
{
    while (*n > 0 && (*s)[0] == '\n') {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && (*s)[*n - 1] == '\n')
        (*n)--;
}

/* The last occurrence of needle in [s, s+n), or NULL. */
static const char *last_of(const char *s, size_t n, const char *needle)
{
    const size_t k = strlen(needle);
    if (n < k)
        return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (memcmp(s + i, needle, k) == 0)
            return s + i;
    return NULL;
}

/* An assistant turn (M3-CHAT-THINK-2, M3-CHAT-TOOL-1). */
static int put_assistant(m3_strbuf *b, const m3_chat_msg *m, size_t idx, m3_err *e)
{
    m3_strbuf vis = {0};
    put_visible(&vis, m);
    if (vis.oom) {
        free(vis.p);
        return m3_fail(e, "chat: out of memory");
    }
    const char *text = vis.p ? vis.p : "";
    const char *r = "", *c = text;
    size_t rn = 0, cn = strlen(text);
    if (m->reasoning) {
        r = m->reasoning;
        rn = strlen(r);
    } else {
        const char *first_end = strstr(text, ENDTHINK);
        if (first_end) {
            /* reasoning: before the first </mm:think>, after the last <mm:think> there */
            r = text;
            rn = (size_t)(first_end - text);
            const char *open = last_of(r, rn, THINK);
            if (open) {
                rn -= (size_t)(open + strlen(THINK) - r);
                r = open + strlen(THINK);
            }
            strip_nl(&r, &rn);
            /* content: after the last </mm:think> */
            const char *last_end = last_of(text, cn, ENDTHINK);
            c = last_end + strlen(ENDTHINK);
            cn = strlen(c);
            strip_nl(&c, &cn);
        }
    }
    m3_strbuf_puts(b, OPEN "ai\n");
    if (rn > 0) {
        m3_strbuf_puts(b, THINK);
        m3_strbuf_put(b, r, rn);
        m3_strbuf_puts(b, ENDTHINK);
    } else {
        m3_strbuf_puts(b, ENDTHINK);
    }
    m3_strbuf_put(b, c, cn);
    free(vis.p);
    if (m->n_calls > 0) {
        m3_strbuf_puts(b, NS "<tool_call>\n");
        for (size_t i = 0; i < m->n_calls; i++) {
            const m3_chat_call *k = &m->calls[i];
            if (!k->name || !k->arguments || k->arguments->type != M3_JSON_OBJECT)
                return m3_fail(e, "chat: message %zu: tool call %zu needs a name and an arguments "
                                  "object", idx, i);
            m3_strbuf_puts(b, NS "<invoke name=\"");
            m3_strbuf_puts(b, k->name);
            m3_strbuf_puts(b, "\">");
            put_xml(b, k->arguments);
            m3_strbuf_puts(b, NS "</invoke>\n");
        }
        m3_strbuf_puts(b, NS "</tool_call>");
    }
    m3_strbuf_puts(b, EOT "\n");
    return 0;
}

/* A tool result's <response> element (M3-CHAT-RESULT-1). */
static void put_response(m3_strbuf *b, const m3_chat_msg *m)
{
    m3_strbuf_puts(b, "\n<response>");
    put_visible(b, m);
    m3_strbuf_puts(b, "</response>");
}

static int check_parts(const m3_chat_msg *m, size_t idx, m3_err *e)
{
    for (size_t i = 0; i < m->n_parts; i++) {
        const m3_chat_part *p = &m->parts[i];
        if (p->kind != M3_PART_TEXT && p->kind != M3_PART_IMAGE && p->kind != M3_PART_VIDEO)
            return m3_fail(e, "chat: message %zu: part %zu has an unknown kind", idx, i);
        if (p->kind == M3_PART_TEXT && !p->text)
            return m3_fail(e, "chat: message %zu: text part %zu has no text", idx, i);
    }
    return 0;
}

int m3_chat_render(const m3_chat_conv *c, char **out, size_t *len, m3_err *e)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (c->mode != M3_THINK_ADAPTIVE && c->mode != M3_THINK_ENABLED && c->mode != M3_THINK_DISABLED)
        return m3_fail(e, "chat: unknown thinking mode %d", (int)c->mode);
    if (c->n_msgs > 0 && !c->msgs)
        return m3_fail(e, "chat: %zu messages but no message array", c->n_msgs);
    if (c->tools && c->tools->type != M3_JSON_ARRAY)
        return m3_fail(e, "chat: tools must be an array");

    /* role mapping (M3-CHAT-ROLE-1) */
    const m3_chat_msg *sys = NULL, *dev = NULL;
    size_t first = 0;
    if (c->n_msgs > 0 && c->msgs[0].role == M3_ROLE_ROOT) {
        sys = &c->msgs[0];
        first = 1;
    }
    if (first < c->n_msgs &&
        (c->msgs[first].role == M3_ROLE_SYSTEM || c->msgs[first].role == M3_ROLE_DEVELOPER))
        dev = &c->msgs[first++];
    for (size_t i = 0; i < c->n_msgs; i++) {
        const m3_chat_msg *m = &c->msgs[i];
        if ((unsigned)m->role > M3_ROLE_TOOL)
            return m3_fail(e, "chat: message %zu: unknown role %d", i, (int)m->role);
        if (check_parts(m, i, e) != 0)
            return -1;
        if (m->role == M3_ROLE_ROOT && i != 0)
            return m3_fail(e, "chat: message %zu: a root message is only allowed first (the "
                              "template renders nothing for it elsewhere)", i);
        if ((m->role == M3_ROLE_SYSTEM || m->role == M3_ROLE_DEVELOPER) && i >= first)
            return m3_fail(e, "chat: message %zu: a %s message is only allowed first, or second "
                              "after a root message (the template renders nothing for it "
                              "elsewhere)", i, m3_chat_role_name(m->role));
        if (m->role != M3_ROLE_ASSISTANT && (m->reasoning || m->n_calls))
            return m3_fail(e, "chat: message %zu (%s): only assistant messages carry reasoning or "
                              "tool calls", i, m3_chat_role_name(m->role));
    }

    m3_strbuf b = {0};
    /* system turn (M3-CHAT-SYS-1) */
    m3_strbuf_puts(&b, BOD OPEN "system\n");
    if (sys && has_content(sys))
        put_visible(&b, sys);
    else
        m3_strbuf_puts(&b, M3_CHAT_DEFAULT_IDENTITY);
    m3_strbuf_puts(&b, THINKING_INTRO);
    m3_strbuf_puts(&b, c->mode == M3_THINK_ENABLED ? MODE_ENABLED
                       : c->mode == M3_THINK_DISABLED ? MODE_DISABLED : MODE_ADAPTIVE);
    m3_strbuf_puts(&b, "</thinking_instructions>" EOT "\n");

    /* developer turn (M3-CHAT-DEV-1, M3-CHAT-TOOLS-1) */
    m3_strbuf_puts(&b, OPEN "developer\n");
    if (dev && has_content(dev))
        put_visible(&b, dev);
    else
        m3_strbuf_puts(&b, c->model_identity ? c->model_identity : M3_CHAT_DEFAULT_DEVELOPER);
    if (c->tools && c->tools->n > 0) {
        m3_strbuf_puts(&b, TOOLS_INTRO);
        for (const m3_json *t = c->tools->child; t; t = t->next) {
            const m3_json *f = m3_json_get(t, "function");
            if (!f) {
                free(b.p);
                return m3_fail(e, "chat: every tool must be an object with a \"function\" member");
            }
            m3_strbuf_puts(&b, "<tool>");
            m3_json_dump_py(f, &b);
            m3_strbuf_puts(&b, "</tool>\n");
        }
        m3_strbuf_puts(&b, TOOLS_OUTRO);
    }
    m3_strbuf_puts(&b, EOT "\n");

    /* the conversation */
    int have_call = 0; /* the template's last_tool_call.name is not none */
    for (size_t i = first; i < c->n_msgs; i++) {
        const m3_chat_msg *m = &c->msgs[i];
        switch (m->role) {
        case M3_ROLE_ASSISTANT:
            if (put_assistant(&b, m, i, e) != 0) {
                free(b.p);
                return -1;
            }
            have_call = m->n_calls > 0;
            break;
        case M3_ROLE_TOOL:
            if (!have_call) {
                free(b.p);
                return m3_fail(e, "chat: message %zu: a tool message needs an earlier assistant "
                                  "message with tool calls (and no assistant message without "
                                  "them in between)", i);
            }
            if (i == first || c->msgs[i - 1].role != M3_ROLE_TOOL)
                m3_strbuf_puts(&b, OPEN "tool");
            put_response(&b, m);
            if (i + 1 == c->n_msgs || c->msgs[i + 1].role != M3_ROLE_TOOL)
                m3_strbuf_puts(&b, EOT "\n");
            break;
        case M3_ROLE_USER:
            m3_strbuf_puts(&b, OPEN "user\n");
            put_visible(&b, m);
            m3_strbuf_puts(&b, EOT "\n");
            break;
        default:
            break; /* rejected above */
        }
    }
    if (c->add_generation_prompt) {
        m3_strbuf_puts(&b, OPEN "ai\n");
        if (c->mode == M3_THINK_ENABLED)
            m3_strbuf_puts(&b, THINK);
        else if (c->mode == M3_THINK_DISABLED)
            m3_strbuf_puts(&b, ENDTHINK);
    }
    if (b.oom) {
        free(b.p);
        return m3_fail(e, "chat: out of memory");
    }
    *out = b.p;
    if (len)
        *len = b.n;
    return 0;
}
