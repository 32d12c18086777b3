/* conversation.h — read a conversation file (JSON) into a chat conversation.
 *
 * Spec: M3-CHAT-FILE-1 (the file's form: an object with "messages" and the
 * optional "tools", "thinking_mode", "model_identity" and
 * "add_generation_prompt", or a bare array of messages; the fields of a
 * message, a content part and a tool call), M3-CHAT-REJECT-1 (what is an
 * error rather than something the template would silently drop or print as
 * a Python repr). Every error names the file and the field, as a path such
 * as messages[2].tool_calls[0].function.arguments.
 */
#ifndef M3_CONVERSATION_H
#define M3_CONVERSATION_H

#include <stddef.h>

#include "chat.h"
#include "err.h"

/* The largest conversation file read (bytes). */
#define M3_CONVERSATION_MAX_BYTES (16u << 20)

typedef struct m3_conversation m3_conversation;

/* Read and check the conversation file at path into *out (free with
 * m3_conversation_free). */
int m3_conversation_load(const char *path, m3_conversation **out, m3_err *e);

/* Same from text[0..len); name is the file name used in messages. */
int m3_conversation_parse(const char *text, size_t len, const char *name, m3_conversation **out,
                          m3_err *e);

/* The conversation, ready for m3_chat_render (valid while c lives). */
const m3_chat_conv *m3_conversation_chat(const m3_conversation *c);

/* Free c (NULL is fine). */
void m3_conversation_free(m3_conversation *c);

#endif
