/* pretok_regex.h — the regular-expression engine for pre-tokenizer split patterns.
 *
 * Spec: M3-TOK-REGEX. Leftmost-first (Perl/Oniguruma) match semantics over UTF-8
 * text, found by a backtracking search that memoises (instruction, position)
 * states, so one match attempt costs at most O(program size x text scanned);
 * a step cap per search turns anything worse into an error, never a hang.
 *
 * Syntax: literals and escapes (\t \n \r \f \v \a \e \0 \xHH \x{H..} \uHHHH,
 * escaped punctuation), . (any but \n), ^ $ (line anchors, as Oniguruma's
 * Ruby syntax), \A \z, groups ( ) (?: ) (?i: ) (?i) (?-i), lookahead (?= ) (?! ),
 * alternation, quantifiers ? * + {n} {n,} {n,m} and their lazy forms (…?),
 * classes [...] with ranges, negation, and \s \S \d \D \w \W \p{..} \P{..} \pX.
 * \p names: general categories (L Lu Ll Lt Lm Lo M Mn Mc Me N Nd Nl No P Pc Pd Ps
 * Pe Pi Pf Po S Sm Sc Sk So Z Zs Zl Zp C Cc Cf Cs Co Cn, L& / LC) and their long
 * major names (Letter, Mark, Number, Punctuation, Symbol, Separator, Other).
 * \s = White_Space, \d = Nd, \w = L|M|Nd|Pc. Case-insensitive matching uses
 * simple case folding. Not supported (clear error): backreferences, lookbehind,
 * possessive quantifiers, atomic groups, \b \B, script properties.
 */
#ifndef M3_PRETOK_REGEX_H
#define M3_PRETOK_REGEX_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct m3_regex m3_regex;
typedef struct m3_regex_scratch m3_regex_scratch;

/* Compile pattern (UTF-8, NUL-terminated). The caller frees *out with m3_regex_free. */
int m3_regex_compile(m3_regex **out, const char *pattern, m3_err *e);
/* Free a compiled regex; NULL is allowed. */
void m3_regex_free(m3_regex *re);
/* Number of instructions of the compiled program (for tests and limits). */
size_t m3_regex_size(const m3_regex *re);

/* Scratch memory for searches (one per thread of use); free with m3_regex_scratch_free. */
m3_regex_scratch *m3_regex_scratch_new(void);
/* Free scratch memory; NULL is allowed. */
void m3_regex_scratch_free(m3_regex_scratch *s);

/* Find the leftmost match in text[0..len) (valid UTF-8) starting at or after
 * byte offset start. Returns 1 and sets [*ms, *me) when found, 0 when there is
 * none, -1 with a message in e when the step cap is hit or memory runs out. */
int m3_regex_search(const m3_regex *re, m3_regex_scratch *s, const uint8_t *text, size_t len,
                    size_t start, size_t *ms, size_t *me, m3_err *e);

#endif
