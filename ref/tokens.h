/* tokens.h — parse a token-id list given on a command line ("1,2,3", "1 2 3").
 *
 * Spec: M3-CLI-TOKENS-1 (bad input → a message naming the item and
 * offset, never a crash). Each id is a plain decimal in [0, INT32_MAX]; ids
 * are separated by commas and/or blanks (space, tab, newline); empty lists,
 * empty items, signs and any other character are errors. At most
 * M3_TOKENS_MAX ids (a documented cap; the input length bounds it anyway).
 */
#ifndef M3_TOKENS_H
#define M3_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define M3_TOKENS_MAX (1 << 24) /* 16M ids */

/* Parse s[0..len) (need not be NUL-terminated; a NUL byte is an error) into a
 * fresh array *ids of *n >= 1 ids; the caller frees *ids. name is used in
 * messages (e.g. "--tokens"). On failure *ids is NULL and *n is 0. */
int m3_parse_token_list(const char *s, size_t len, const char *name, int32_t **ids, size_t *n,
                        m3_err *e);

#endif
