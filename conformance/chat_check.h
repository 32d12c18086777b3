/* chat_check.h — m3-conform chat-check: a port's prompt ids for a
 * conversation file against the spec's rendering, tokenized.
 *
 * Spec: M3-CHAT-* (rendering), M3-CHAT-FILE-1, M3-TOK-* (tokenization),
 * M3-CLI-TOKENS-1 (the ids given). Like the rest of the kit these functions
 * never print; bin/m3-conform's chat-check command reports the result.
 */
#ifndef CF_CHAT_CHECK_H
#define CF_CHAT_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "tokenizer.h"

/* The outcome of one comparison; every pointer is owned (cf_chat_diff_free). */
typedef struct cf_chat_diff {
    int equal;              /* the given ids are exactly the expected ones */
    char *rendered;         /* the spec's prompt text */
    int32_t *expected;      /* its ids [n_expected] */
    size_t n_expected, n_got;
    size_t pos;             /* first differing position (not equal only) */
    int32_t want, got;      /* the ids there; -1 past the end of a list */
    int got_out_of_vocab;   /* a given id is outside the vocabulary (pos is the first) */
    char *want_str, *got_str;           /* the token strings at pos ("" past the end) */
    char *ctx_before;                   /* decoded expected ids just before pos */
    char *ctx_expected, *ctx_got;       /* decoded ids from pos on, a few of each */
} cf_chat_diff;

/* Tokenize rendered with tok and compare with got[0..ngot) into *d. */
int cf_chat_compare(const m3_tokenizer *tok, const char *rendered, const int32_t *got, size_t ngot,
                    cf_chat_diff *d, m3_err *e);

/* Render the conversation file (thinking, when non-NULL, replaces its
 * thinking_mode) and compare as cf_chat_compare. Errors name the file. */
int cf_chat_check(const m3_tokenizer *tok, const char *conversation, const char *thinking,
                  const int32_t *got, size_t ngot, cf_chat_diff *d, m3_err *e);

/* The ids of --ids ARG: ARG is a file holding the list, or the list itself;
 * commas and/or blanks between ids (M3-CLI-TOKENS-1), optionally inside [ ]. */
int cf_chat_read_ids(const char *arg, int32_t **ids, size_t *n, m3_err *e);

/* Free what *d owns and zero it. */
void cf_chat_diff_free(cf_chat_diff *d);

#endif
