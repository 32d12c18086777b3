/* chat.h — render MiniMax-M3 conversations into prompt text (no Jinja).
 *
 * Spec: M3-CHAT-TURN-1 (bos "]~!b[", turns "]~b]{role}\n{text}[e~[\n" with roles
 * system / user / ai / tool), M3-CHAT-SYS-1 (default system prompt when the
 * conversation has none), M3-CHAT-THINK-1/2 (assistant history as
 * "<mm:think>{reasoning}</mm:think>{content}" or "</mm:think>{content}"; the
 * generation prompt ends "]~b]ai\n" (adaptive), "]~b]ai\n<mm:think>" (enabled)
 * or "]~b]ai\n</mm:think>" (disabled)), M3-CHAT-MM-1 (image/video markers
 * "]<]image[>[" / "]<]video[>[" stay in the text for the processor to expand).
 * Tool-call XML and tool descriptions in the system turn are not rendered.
 */
#ifndef M3_CHAT_H
#define M3_CHAT_H

#include <stddef.h>

#include "err.h"

/* The default system prompt (notes E.2; the tail after "and" is reconstructed). */
#define M3_CHAT_DEFAULT_SYSTEM \
    "You are a helpful assistant. Your name is MiniMax-M3 and is built by MiniMax."

typedef enum m3_thinking {
    M3_THINK_ADAPTIVE = 0, /* the model chooses: prompt ends "]~b]ai\n" */
    M3_THINK_ENABLED,      /* prompt ends "]~b]ai\n<mm:think>" */
    M3_THINK_DISABLED      /* prompt ends "]~b]ai\n</mm:think>" */
} m3_thinking;

/* One message. role: "system" (first message only), "user", "assistant" (or
 * "ai"), "tool". content may be NULL (empty) for assistant turns; reasoning
 * (assistant only) is NULL or "" when the turn had no thinking. */
typedef struct m3_chat_msg {
    const char *role;
    const char *content;
    const char *reasoning;
} m3_chat_msg;

/* Parse "adaptive" | "enabled" | "disabled" into *out. */
int m3_thinking_parse(const char *s, m3_thinking *out, m3_err *e);

/* Render msgs[0..n) as prompt text: bos, system turn (the default when msgs has
 * none), the turns, and with add_generation_prompt the opener of the next
 * assistant turn for the given thinking mode. *out is malloc'd, NUL-terminated
 * (caller frees); *len its length (may be NULL). */
int m3_chat_render(const m3_chat_msg *msgs, size_t n, m3_thinking mode, int add_generation_prompt,
                   char **out, size_t *len, m3_err *e);

#endif
