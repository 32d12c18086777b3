/* chat.h — render MiniMax-M3 conversations into prompt text (no Jinja).
 *
 * Spec: M3-CHAT-TURN-1 (]~!b[ and the ]~b]ROLE\n...[e~[\n turns), M3-CHAT-ROLE-1
 * (root -> system turn, a leading system/developer message -> developer turn),
 * M3-CHAT-SYS-1 (the system turn: identity text, thinking instructions naming
 * the mode), M3-CHAT-DEV-1 (the always-present developer turn),
 * M3-CHAT-TOOLS-1 (tool descriptions in the developer turn), M3-CHAT-THINK-1
 * (generation prompt per thinking mode), M3-CHAT-THINK-2 (assistant history,
 * reasoning split out of content), M3-CHAT-TOOL-1 (tool-call XML),
 * M3-CHAT-RESULT-1 (consecutive tool results in one ]~b]tool turn),
 * M3-CHAT-MM-1 (image/video parts as their markers), M3-CHAT-REJECT-1 (what
 * the renderer refuses instead of dropping).
 *
 * Design: the renderer walks a typed conversation (m3_chat_conv); the
 * conversation file reader (ref/conversation.h) builds one from JSON, and
 * the command line builds one from --prompt/--system. Tool descriptions and
 * call arguments stay JSON trees (ref/json.h) because the template writes
 * them with Python's json.dumps and str(). The output equals the published
 * M3 chat template (vectors/chat, docs/tokenizer.md) rendered by jinja2 with
 * transformers' settings, byte for byte, for every conversation this API
 * accepts.
 */
#ifndef M3_CHAT_H
#define M3_CHAT_H

#include <stddef.h>

#include "err.h"
#include "json.h"

/* The system turn's text when no root message gives one (M3-CHAT-SYS-1). */
#define M3_CHAT_DEFAULT_IDENTITY                                                                   \
    "Your model version is MiniMax-M3, developed by MiniMax. Knowledge cutoff: January 2026. "     \
    "Founded in early 2022, MiniMax is a global AI foundation model company committed to "         \
    "advancing the frontiers of AI towards AGI."

/* The developer turn's text when no system/developer message (and no
 * model_identity) gives one (M3-CHAT-DEV-1). */
#define M3_CHAT_DEFAULT_DEVELOPER "You are a helpful assistant."

typedef enum m3_thinking {
    M3_THINK_ADAPTIVE = 0, /* the model chooses (also "not given"): prompt ends "]~b]ai\n" */
    M3_THINK_ENABLED,      /* prompt ends "]~b]ai\n<mm:think>" */
    M3_THINK_DISABLED      /* prompt ends "]~b]ai\n</mm:think>" */
} m3_thinking;

typedef enum m3_chat_role {
    M3_ROLE_ROOT,      /* first message only: the system turn's text */
    M3_ROLE_SYSTEM,    /* first message (second after root): the developer turn's text */
    M3_ROLE_DEVELOPER, /* same as system */
    M3_ROLE_USER,
    M3_ROLE_ASSISTANT,
    M3_ROLE_TOOL
} m3_chat_role;

typedef enum m3_chat_part_kind {
    M3_PART_TEXT,  /* text */
    M3_PART_IMAGE, /* "]<]image[>[" */
    M3_PART_VIDEO  /* "]<]video[>[" */
} m3_chat_part_kind;

/* One element of a content list. */
typedef struct m3_chat_part {
    m3_chat_part_kind kind;
    const char *text; /* M3_PART_TEXT only */
} m3_chat_part;

/* One tool call of an assistant message: the function name and its
 * arguments (a JSON object; members whose value is null are skipped). */
typedef struct m3_chat_call {
    const char *name;
    const m3_json *arguments;
} m3_chat_call;

/* One message. The content is text (content non-NULL), a list of parts
 * (parts/n_parts), or absent (both empty). reasoning: the assistant's
 * reasoning_content when given as a string (even ""), else NULL (then a
 * "</mm:think>" in the content splits it, M3-CHAT-THINK-2). calls: assistant
 * only. */
typedef struct m3_chat_msg {
    m3_chat_role role;
    const char *content;
    const m3_chat_part *parts;
    size_t n_parts;
    const char *reasoning;
    const m3_chat_call *calls;
    size_t n_calls;
} m3_chat_msg;

/* A conversation and the template's other inputs. tools: NULL or a JSON
 * array whose elements are objects with a "function" member (written with
 * json.dumps into the developer turn). model_identity: NULL or the developer
 * turn's text when no system/developer message is given. */
typedef struct m3_chat_conv {
    const m3_chat_msg *msgs;
    size_t n_msgs;
    const m3_json *tools;
    const char *model_identity;
    m3_thinking mode;
    int add_generation_prompt;
} m3_chat_conv;

/* Parse "adaptive" | "enabled" | "disabled" into *out. */
int m3_thinking_parse(const char *s, m3_thinking *out, m3_err *e);

/* The name of a thinking mode ("adaptive", "enabled", "disabled"). */
const char *m3_thinking_name(m3_thinking t);

/* The role's name as a conversation file spells it. */
const char *m3_chat_role_name(m3_chat_role r);

/* Render c as prompt text (the template's string; bos included). *out is
 * malloc'd and NUL-terminated (caller frees); *len its length (may be NULL).
 * Errors (M3-CHAT-REJECT-1) name the message by its index. */
int m3_chat_render(const m3_chat_conv *c, char **out, size_t *len, m3_err *e);

#endif
