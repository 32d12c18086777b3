/* conversation.c — the conversation file reader (see conversation.h). */
#include "conversation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "json.h"

struct m3_conversation {
    m3_json *root;
    m3_chat_msg *msgs;
    m3_chat_part **parts; /* one array per message (or NULL) */
    m3_chat_call **calls; /* one array per message (or NULL) */
    size_t n;
    m3_chat_conv conv;
};

typedef struct ctx {
    const char *name;
    m3_err *e;
} ctx;

#define FIELD 200

static int bad(const ctx *x, const char *field, const m3_json *v, const char *fmt, const char *arg)
{
    char what[400];
    snprintf(what, sizeof what, fmt, arg);
    if (v)
        return m3_fail(x->e, "%s: %s (line %d): %s", x->name, field, v->line, what);
    return m3_fail(x->e, "%s: %s: %s", x->name, field, what);
}

/* v must be a string (or, with nullable, null: *out NULL). */
static int want_string(const ctx *x, const char *field, const m3_json *v, int nullable,
                       const char **out)
{
    *out = NULL;
    if (nullable && v->type == M3_JSON_NULL)
        return 0;
    if (v->type != M3_JSON_STRING)
        return bad(x, field, v, "must be a string, not %s", m3_json_type_name(v->type));
    *out = v->str;
    return 0;
}

/* Members of obj other than the allowed ones are an error (a misspelt field
 * would otherwise be ignored, as the template ignores it). */
static int only_fields(const ctx *x, const char *field, const m3_json *obj, const char *const *allowed)
{
    for (const m3_json *m = obj->child; m; m = m->next) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            ok |= strcmp(*a, m->key) == 0;
        if (!ok) {
            char list[200] = "";
            for (const char *const *a = allowed; *a; a++) {
                strncat(list, *a, sizeof list - strlen(list) - 1);
                if (a[1])
                    strncat(list, ", ", sizeof list - strlen(list) - 1);
            }
            char what[400];
            snprintf(what, sizeof what, "unknown field \"%.60s\" (known: %s)", m->key, list);
            return bad(x, field, m, "%s", what);
        }
    }
    return 0;
}

/* A content list (user, assistant, root, system, developer: tool = 0) or a
 * tool result's list (tool = 1) into parts. */
static int read_parts(const ctx *x, const char *field, const m3_json *list, int tool,
                      m3_chat_part **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (list->n == 0)
        return 0;
    m3_chat_part *p = calloc(list->n, sizeof *p);
    if (!p)
        return m3_fail(x->e, "%s: out of memory", x->name);
    size_t i = 0;
    for (const m3_json *it = list->child; it; it = it->next, i++) {
        char f[FIELD];
        snprintf(f, sizeof f, "%.150s[%zu]", field, i);
        if (it->type == M3_JSON_STRING) {
            p[i] = (m3_chat_part){M3_PART_TEXT, it->str};
            continue;
        }
        if (it->type != M3_JSON_OBJECT) {
            free(p);
            return bad(x, f, it, "must be a string or an object, not %s", m3_json_type_name(it->type));
        }
        const m3_json *type = m3_json_get(it, "type");
        const m3_json *text = m3_json_get(it, "text");
        const m3_json *output = m3_json_get(it, "output");
        const char *ts = type && type->type == M3_JSON_STRING ? type->str : NULL;
        char ff[FIELD + 8];
        if (ts && (strcmp(ts, "image") == 0 || strcmp(ts, "video") == 0)) {
            /* other members (a path, a URL) are the caller's; the template writes the marker */
            p[i] = (m3_chat_part){ts[0] == 'i' ? M3_PART_IMAGE : M3_PART_VIDEO, NULL};
            continue;
        }
        if (tool && output) {
            static const char *const known[] = {"type", "output", "text", NULL};
            snprintf(ff, sizeof ff, "%.150s.output", f);
            if (only_fields(x, f, it, known) != 0 || want_string(x, ff, output, 0, &p[i].text) != 0) {
                free(p);
                return -1;
            }
            p[i].kind = M3_PART_TEXT;
            continue;
        }
        if (ts && strcmp(ts, "text") == 0) {
            static const char *const known[] = {"type", "text", NULL};
            snprintf(ff, sizeof ff, "%.150s.text", f);
            if (only_fields(x, f, it, known) != 0) {
                free(p);
                return -1;
            }
            if (!text) {
                free(p);
                return bad(x, f, it, "a text part needs \"text\"%s", "");
            }
            if (want_string(x, ff, text, 0, &p[i].text) != 0) {
                free(p);
                return -1;
            }
            p[i].kind = M3_PART_TEXT;
            continue;
        }
        free(p);
        snprintf(ff, sizeof ff, "%.150s.type", f);
        if (!type)
            return bad(x, f, it, "a part needs \"type\": text, image or video%s",
                       tool ? " (or an \"output\" string)" : "");
        if (!ts)
            return bad(x, ff, type, "must be a string, not %s", m3_json_type_name(type->type));
        return bad(x, ff, type, "\"%.60s\" is not text, image or video (the template renders "
                                "nothing, or a Python repr, for it)", ts);
    }
    *out = p;
    *n = list->n;
    return 0;
}

/* A message's content: text, parts or absent. */
static int read_content(const ctx *x, const char *field, const m3_json *c, int tool, m3_chat_msg *m,
                        m3_chat_part **parts)
{
    *parts = NULL;
    if (!c)
        return 0;
    if (c->type == M3_JSON_NULL) {
        if (tool) /* the template iterates it: jinja2 fails on None */
            return bad(x, field, c, "a tool result's content must be a string or an array, not %s",
                       "null");
        return 0;
    }
    if (c->type == M3_JSON_STRING) {
        m->content = c->str;
        return 0;
    }
    if (c->type != M3_JSON_ARRAY)
        return bad(x, field, c, "must be a string or an array of parts, not %s",
                   m3_json_type_name(c->type));
    if (read_parts(x, field, c, tool, parts, &m->n_parts) != 0)
        return -1;
    m->parts = *parts;
    return 0;
}

/* An assistant's tool_calls array. */
static int read_calls(const ctx *x, const char *field, const m3_json *tc, m3_chat_msg *m,
                      m3_chat_call **out)
{
    *out = NULL;
    if (tc->type == M3_JSON_NULL || tc->n == 0) {
        if (tc->type != M3_JSON_NULL && tc->type != M3_JSON_ARRAY)
            return bad(x, field, tc, "must be an array, not %s", m3_json_type_name(tc->type));
        return 0;
    }
    if (tc->type != M3_JSON_ARRAY)
        return bad(x, field, tc, "must be an array, not %s", m3_json_type_name(tc->type));
    m3_chat_call *calls = calloc(tc->n, sizeof *calls);
    if (!calls)
        return m3_fail(x->e, "%s: out of memory", x->name);
    size_t i = 0;
    for (const m3_json *k = tc->child; k; k = k->next, i++) {
        char f[FIELD], ff[FIELD + 20];
        snprintf(f, sizeof f, "%.150s[%zu]", field, i);
        static const char *const known[] = {"id", "type", "function", "name", "arguments", NULL};
        static const char *const fknown[] = {"name", "arguments", NULL};
        if (k->type != M3_JSON_OBJECT) {
            free(calls);
            return bad(x, f, k, "must be an object, not %s", m3_json_type_name(k->type));
        }
        if (only_fields(x, f, k, known) != 0) {
            free(calls);
            return -1;
        }
        const m3_json *fn = m3_json_get(k, "function"), *src = k;
        if (fn && fn->type != M3_JSON_NULL) {
            snprintf(ff, sizeof ff, "%.150s.function", f);
            if (fn->type != M3_JSON_OBJECT) {
                free(calls);
                return bad(x, ff, fn, "must be an object, not %s", m3_json_type_name(fn->type));
            }
            if (only_fields(x, ff, fn, fknown) != 0) {
                free(calls);
                return -1;
            }
            if (fn->n > 0) { /* the template uses a non-empty function object */
                src = fn;
                memcpy(f, ff, sizeof f - 1);
                f[sizeof f - 1] = '\0';
            }
        }
        const m3_json *name = m3_json_get(src, "name"), *args = m3_json_get(src, "arguments");
        if (!name) {
            free(calls);
            return bad(x, f, src, "a tool call needs \"name\"%s", "");
        }
        snprintf(ff, sizeof ff, "%.150s.name", f);
        if (want_string(x, ff, name, 0, &calls[i].name) != 0) {
            free(calls);
            return -1;
        }
        snprintf(ff, sizeof ff, "%.150s.arguments", f);
        if (!args || args->type != M3_JSON_OBJECT) {
            free(calls);
            if (!args)
                return bad(x, f, src, "a tool call needs \"arguments\" (an object)%s", "");
            return bad(x, ff, args, "must be an object (a JSON string of arguments is not "
                                    "parsed: the template iterates the object), not %s",
                       m3_json_type_name(args->type));
        }
        calls[i].arguments = args;
    }
    m->calls = calls;
    m->n_calls = tc->n;
    *out = calls;
    return 0;
}

static int role_of(const char *s, m3_chat_role *r)
{
    static const struct { const char *n; m3_chat_role r; } roles[] = {
        {"root", M3_ROLE_ROOT},   {"system", M3_ROLE_SYSTEM},       {"developer", M3_ROLE_DEVELOPER},
        {"user", M3_ROLE_USER},   {"assistant", M3_ROLE_ASSISTANT}, {"tool", M3_ROLE_TOOL}};
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(s, roles[i].n) == 0) {
            *r = roles[i].r;
            return 0;
        }
    return -1;
}

static int read_message(const ctx *x, size_t i, const m3_json *v, m3_conversation *c)
{
    char f[FIELD], ff[FIELD + 24];
    snprintf(f, sizeof f, "messages[%zu]", i);
    m3_chat_msg *m = &c->msgs[i];
    if (v->type != M3_JSON_OBJECT)
        return bad(x, f, v, "must be an object, not %s", m3_json_type_name(v->type));
    static const char *const known[] = {"role", "content", "reasoning_content", "tool_calls",
                                        "name", "tool_call_id", NULL};
    if (only_fields(x, f, v, known) != 0)
        return -1;
    const m3_json *role = m3_json_get(v, "role");
    if (!role)
        return bad(x, f, v, "a message needs \"role\"%s", "");
    snprintf(ff, sizeof ff, "%.150s.role", f);
    const char *rs;
    if (want_string(x, ff, role, 0, &rs) != 0)
        return -1;
    if (role_of(rs, &m->role) != 0)
        return bad(x, ff, role, "\"%.60s\" is not root, system, developer, user, assistant or tool "
                                "(the template renders nothing for other roles)", rs);
    const int tool = m->role == M3_ROLE_TOOL;
    snprintf(ff, sizeof ff, "%.150s.content", f);
    if (read_content(x, ff, m3_json_get(v, "content"), tool, m, &c->parts[i]) != 0)
        return -1;
    const m3_json *rc = m3_json_get(v, "reasoning_content");
    const m3_json *tc = m3_json_get(v, "tool_calls");
    if ((rc || tc) && m->role != M3_ROLE_ASSISTANT)
        return bad(x, f, rc ? rc : tc, "only assistant messages carry %s",
                   rc ? "reasoning_content" : "tool_calls");
    if (rc) {
        snprintf(ff, sizeof ff, "%.150s.reasoning_content", f);
        if (want_string(x, ff, rc, 1, &m->reasoning) != 0)
            return -1;
    }
    if (tc) {
        snprintf(ff, sizeof ff, "%.150s.tool_calls", f);
        if (read_calls(x, ff, tc, m, &c->calls[i]) != 0)
            return -1;
    }
    return 0;
}

void m3_conversation_free(m3_conversation *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        if (c->parts)
            free(c->parts[i]);
        if (c->calls)
            free(c->calls[i]);
    }
    free(c->parts);
    free(c->calls);
    free(c->msgs);
    m3_json_free(c->root);
    free(c);
}

int m3_conversation_parse(const char *text, size_t len, const char *name, m3_conversation **out,
                          m3_err *e)
{
    *out = NULL;
    ctx x = {name, e};
    m3_conversation *c = calloc(1, sizeof *c);
    if (!c)
        return m3_fail(e, "%s: out of memory", name);
    if (m3_json_parse(text, len, &c->root, e) != 0) {
        m3_fail_prefix(e, "%s", name);
        free(c);
        return -1;
    }
    const m3_json *root = c->root, *msgs = root;
    c->conv.add_generation_prompt = 1;
    c->conv.mode = M3_THINK_ADAPTIVE;
    if (root->type == M3_JSON_OBJECT) {
        static const char *const known[] = {"messages", "tools", "thinking_mode", "model_identity",
                                            "add_generation_prompt", NULL};
        if (only_fields(&x, "(top level)", root, known) != 0)
            goto fail;
        msgs = m3_json_get(root, "messages");
        if (!msgs) {
            bad(&x, "(top level)", NULL, "no \"messages\" array%s", "");
            goto fail;
        }
        const m3_json *tools = m3_json_get(root, "tools");
        if (tools && tools->type != M3_JSON_NULL) {
            if (tools->type != M3_JSON_ARRAY) {
                bad(&x, "tools", tools, "must be an array, not %s", m3_json_type_name(tools->type));
                goto fail;
            }
            size_t i = 0;
            for (const m3_json *t = tools->child; t; t = t->next, i++) {
                char f[FIELD];
                snprintf(f, sizeof f, "tools[%zu]", i);
                if (t->type != M3_JSON_OBJECT || !m3_json_get(t, "function")) {
                    bad(&x, f, t, "must be an object with a \"function\" member (the template "
                                  "writes tools[i].function)%s", "");
                    goto fail;
                }
            }
            c->conv.tools = tools;
        }
        const m3_json *tm = m3_json_get(root, "thinking_mode");
        if (tm && tm->type != M3_JSON_NULL) {
            const char *s;
            if (want_string(&x, "thinking_mode", tm, 0, &s) != 0)
                goto fail;
            if (m3_thinking_parse(s, &c->conv.mode, NULL) != 0) {
                bad(&x, "thinking_mode", tm, "\"%.60s\" is not adaptive, enabled or disabled", s);
                goto fail;
            }
        }
        const m3_json *mi = m3_json_get(root, "model_identity");
        if (mi && want_string(&x, "model_identity", mi, 1, &c->conv.model_identity) != 0)
            goto fail;
        const m3_json *agp = m3_json_get(root, "add_generation_prompt");
        if (agp) {
            if (agp->type != M3_JSON_TRUE && agp->type != M3_JSON_FALSE) {
                bad(&x, "add_generation_prompt", agp, "must be true or false, not %s",
                    m3_json_type_name(agp->type));
                goto fail;
            }
            c->conv.add_generation_prompt = agp->type == M3_JSON_TRUE;
        }
    }
    if (msgs->type != M3_JSON_ARRAY) {
        bad(&x, root == msgs ? "(top level)" : "messages", msgs,
            "must be an array of messages (or an object with \"messages\"), not %s",
            m3_json_type_name(msgs->type));
        goto fail;
    }
    c->n = msgs->n;
    if (c->n > 0) {
        c->msgs = calloc(c->n, sizeof *c->msgs);
        c->parts = calloc(c->n, sizeof *c->parts);
        c->calls = calloc(c->n, sizeof *c->calls);
        if (!c->msgs || !c->parts || !c->calls) {
            m3_fail(e, "%s: out of memory", name);
            goto fail;
        }
    }
    size_t i = 0;
    for (const m3_json *v = msgs->child; v; v = v->next, i++)
        if (read_message(&x, i, v, c) != 0)
            goto fail;
    c->conv.msgs = c->msgs;
    c->conv.n_msgs = c->n;
    /* the structural rules (roles in place, tool results after a call) are the
     * renderer's; check them now so that the file is named in the message */
    char *probe = NULL;
    if (m3_chat_render(&c->conv, &probe, NULL, e) != 0) {
        m3_fail_prefix(e, "%s", name);
        goto fail;
    }
    free(probe);
    *out = c;
    return 0;
fail:
    m3_conversation_free(c);
    return -1;
}

int m3_conversation_load(const char *path, m3_conversation **out, m3_err *e)
{
    char *buf;
    size_t len;
    *out = NULL;
    if (m3_read_file(path, M3_CONVERSATION_MAX_BYTES, &buf, &len, e) != 0)
        return -1;
    int rc = m3_conversation_parse(buf, len, path, out, e);
    free(buf);
    return rc;
}

const m3_chat_conv *m3_conversation_chat(const m3_conversation *c)
{
    return &c->conv;
}
