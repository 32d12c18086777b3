/* prompt.h — the prompt options of a command line (bin/m3-ref, bin/m3-gpu):
 * which combinations are valid, and a --prompt text as token ids.
 *
 * Spec: M3-CHAT-TURN-1, M3-CHAT-ROLE-1, M3-CHAT-THINK-1 (--chat renders the
 * text as the user turn of a conversation, --system as its developer turn,
 * ref/chat.h), M3-CHAT-FILE-1 (--conversation FILE renders a conversation
 * file, ref/conversation.h; --thinking replaces its thinking_mode), M3-TOK-SPECIAL-1
 * (special-token strings in the text match as special tokens), M3-VIS-PLACE-1/2
 * (--image / --video / --pixels fill the image and video markers). Both
 * CLIs call these so that the same options give the same ids and the same
 * messages. The messages name the command-line options.
 */
#ifndef M3_PROMPT_H
#define M3_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "tokenizer.h"

/* A command line's prompt options; zero / NULL means "not given". */
typedef struct m3_prompt_opts {
    int have_text;        /* a --prompt TEXT was given */
    int chat;             /* --chat */
    const char *system;   /* --system TEXT */
    const char *thinking; /* --thinking adaptive|enabled|disabled */
    const char *conversation; /* --conversation FILE */
    int n_images;         /* number of --image FILE */
    const char *video;    /* --video F1,F2,... */
    int have_fps;         /* --fps R */
    const char *pixels;   /* --pixels FILE */
    int joint;            /* --vision-joint */
} m3_prompt_opts;

/* 0 when o is a valid combination, else -1 with the first problem in e:
 * a --thinking value other than adaptive/enabled/disabled; --pixels with
 * --image/--video; --fps without --video or --video without --fps;
 * --vision-joint without an image input; --conversation with --prompt, --chat
 * or --system; --chat/--system without a --prompt, --thinking without a
 * --prompt or --conversation; --thinking/--system without --chat. */
int m3_prompt_check(const m3_prompt_opts *o, m3_err *e);

/* Encode text with tok into *ids [*n] (malloc'd; the caller frees): as it is;
 * with o->chat as the user turn after the developer turn o->system (NULL: the
 * default) and before the assistant opener of o->thinking (NULL: adaptive);
 * with o->conversation the rendering of that file (text unused, may be NULL;
 * o->thinking, when given, replaces the file's thinking_mode). Errors: an
 * empty text without --chat, a bad conversation file (named), an encoding of
 * zero tokens, a tokenizer failure. o may be NULL (plain text). */
int m3_prompt_encode(const m3_tokenizer *tok, const char *text, const m3_prompt_opts *o,
                     int32_t **ids, size_t *n, m3_err *e);

#endif
