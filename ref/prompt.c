/* prompt.c — prompt option rules and --prompt encoding (see prompt.h). */
#include "prompt.h"

#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "conversation.h"

int m3_prompt_check(const m3_prompt_opts *o, m3_err *e)
{
    m3_thinking mode;
    const int media = o->n_images > 0 || o->video || o->pixels;
    if (o->thinking && m3_thinking_parse(o->thinking, &mode, NULL) != 0)
        return m3_fail(e, "--thinking must be adaptive, enabled or disabled (got '%s')",
                       o->thinking);
    if (o->pixels && (o->n_images > 0 || o->video))
        return m3_fail(e, "--pixels replaces --image/--video; give one or the other");
    if (o->have_fps && !o->video)
        return m3_fail(e, "--fps needs --video");
    if (o->video && !o->have_fps)
        return m3_fail(e, "--video needs --fps R (frames per second of the frames)");
    if (o->joint && !media)
        return m3_fail(e, "--vision-joint needs --image, --video or --pixels");
    if (o->conversation && (o->have_text || o->chat || o->system))
        return m3_fail(e, "--conversation FILE replaces --prompt, --chat and --system; give one "
                          "or the other");
    if ((o->chat || (o->thinking && !o->conversation) || o->system) && !o->have_text)
        return m3_fail(e, "--chat, --thinking and --system need --prompt TEXT (--thinking also "
                          "goes with --conversation FILE)");
    if ((o->thinking || o->system) && !o->chat && !o->conversation)
        return m3_fail(e, "--thinking and --system need --chat");
    return 0;
}

int m3_prompt_encode(const m3_tokenizer *tok, const char *text, const m3_prompt_opts *o,
                     int32_t **ids, size_t *n, m3_err *e)
{
    char *rendered = NULL;
    size_t len = 0;
    *ids = NULL;
    *n = 0;
    if (o && o->conversation) {
        m3_conversation *cv;
        if (m3_conversation_load(o->conversation, &cv, e) != 0)
            return -1;
        m3_chat_conv c = *m3_conversation_chat(cv);
        if (o->thinking && m3_thinking_parse(o->thinking, &c.mode, e) != 0) {
            m3_conversation_free(cv);
            return -1;
        }
        int rc = m3_chat_render(&c, &rendered, &len, e);
        m3_conversation_free(cv);
        if (rc != 0)
            return -1;
        text = rendered;
    } else if (o && o->chat) {
        m3_chat_msg msgs[2];
        m3_chat_conv c = {.msgs = msgs, .add_generation_prompt = 1};
        if (o->thinking && m3_thinking_parse(o->thinking, &c.mode, e) != 0)
            return -1;
        if (o->system)
            msgs[c.n_msgs++] = (m3_chat_msg){.role = M3_ROLE_SYSTEM, .content = o->system};
        msgs[c.n_msgs++] = (m3_chat_msg){.role = M3_ROLE_USER, .content = text};
        if (m3_chat_render(&c, &rendered, &len, e) != 0)
            return -1;
        text = rendered;
    } else if ((len = strlen(text)) == 0) {
        return m3_fail(e, "empty prompt");
    }
    int rc = m3_tokenizer_encode(tok, text, len, 1, ids, n, e);
    free(rendered);
    if (rc != 0)
        return -1;
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return m3_fail(e, "the prompt encodes to 0 tokens");
    }
    return 0;
}
