/* prompt.c — prompt option rules and --prompt encoding (see prompt.h). */
#include "prompt.h"

#include <stdlib.h>
#include <string.h>

#include "chat.h"

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
    if ((o->chat || o->thinking || o->system) && !o->have_text)
        return m3_fail(e, "--chat, --thinking and --system need --prompt TEXT");
    if ((o->thinking || o->system) && !o->chat)
        return m3_fail(e, "--thinking and --system need --chat");
    return 0;
}

int m3_prompt_encode(const m3_tokenizer *tok, const char *text, const m3_prompt_opts *o,
                     int32_t **ids, size_t *n, m3_err *e)
{
    char *rendered = NULL;
    size_t len = strlen(text);
    *ids = NULL;
    *n = 0;
    if (o && o->chat) {
        m3_thinking mode = M3_THINK_ADAPTIVE;
        m3_chat_msg msgs[2];
        size_t nm = 0;
        if (o->thinking && m3_thinking_parse(o->thinking, &mode, e) != 0)
            return -1;
        if (o->system)
            msgs[nm++] = (m3_chat_msg){"system", o->system, NULL};
        msgs[nm++] = (m3_chat_msg){"user", text, NULL};
        if (m3_chat_render(msgs, nm, mode, 1, &rendered, &len, e) != 0)
            return -1;
        text = rendered;
    } else if (len == 0) {
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
