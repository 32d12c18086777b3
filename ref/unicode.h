/* unicode.h — Unicode character data and UTF-8 helpers for the tokenizer.
 *
 * Spec: M3-TOK-UNICODE (general categories, White_Space, simple case folding;
 * tables generated from Python's unicodedata, version in m3_uc_version()),
 * M3-TOK-UTF8 (invalid UTF-8 input is replaced by U+FFFD per maximal invalid
 * subpart, exactly like Python's bytes.decode('utf-8', 'replace')).
 */
#ifndef M3_UNICODE_H
#define M3_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Unicode General_Category values; M3_GC_Cn (0) is "unassigned". */
typedef enum m3_gc {
    M3_GC_Cn, M3_GC_Lu, M3_GC_Ll, M3_GC_Lt, M3_GC_Lm, M3_GC_Lo, M3_GC_Mn, M3_GC_Mc,
    M3_GC_Me, M3_GC_Nd, M3_GC_Nl, M3_GC_No, M3_GC_Pc, M3_GC_Pd, M3_GC_Ps, M3_GC_Pe,
    M3_GC_Pi, M3_GC_Pf, M3_GC_Po, M3_GC_Sm, M3_GC_Sc, M3_GC_Sk, M3_GC_So, M3_GC_Zs,
    M3_GC_Zl, M3_GC_Zp, M3_GC_Cc, M3_GC_Cf, M3_GC_Cs, M3_GC_Co, M3_GC_COUNT
} m3_gc;

/* Bit masks over m3_gc for the one-letter major classes. */
#define M3_GCM(g) (1u << (g))
#define M3_GCM_L (M3_GCM(M3_GC_Lu) | M3_GCM(M3_GC_Ll) | M3_GCM(M3_GC_Lt) | M3_GCM(M3_GC_Lm) | M3_GCM(M3_GC_Lo))
#define M3_GCM_M (M3_GCM(M3_GC_Mn) | M3_GCM(M3_GC_Mc) | M3_GCM(M3_GC_Me))
#define M3_GCM_N (M3_GCM(M3_GC_Nd) | M3_GCM(M3_GC_Nl) | M3_GCM(M3_GC_No))
#define M3_GCM_P (M3_GCM(M3_GC_Pc) | M3_GCM(M3_GC_Pd) | M3_GCM(M3_GC_Ps) | M3_GCM(M3_GC_Pe) | \
                  M3_GCM(M3_GC_Pi) | M3_GCM(M3_GC_Pf) | M3_GCM(M3_GC_Po))
#define M3_GCM_S (M3_GCM(M3_GC_Sm) | M3_GCM(M3_GC_Sc) | M3_GCM(M3_GC_Sk) | M3_GCM(M3_GC_So))
#define M3_GCM_Z (M3_GCM(M3_GC_Zs) | M3_GCM(M3_GC_Zl) | M3_GCM(M3_GC_Zp))
#define M3_GCM_C (M3_GCM(M3_GC_Cn) | M3_GCM(M3_GC_Cc) | M3_GCM(M3_GC_Cf) | M3_GCM(M3_GC_Cs) | M3_GCM(M3_GC_Co))

/* Generated table row (ref/unicode_tables.c). */
typedef struct m3_uc_range {
    uint32_t lo, hi;
    uint8_t gc;
} m3_uc_range;

extern const char m3_uc_version_str[];
extern const m3_uc_range m3_uc_gc_ranges[];
extern const size_t m3_uc_gc_ranges_n;
extern const uint32_t m3_uc_fold_pairs[][2];
extern const size_t m3_uc_fold_pairs_n;

/* Unicode version of the generated tables, e.g. "14.0.0". */
const char *m3_uc_version(void);
/* General category of code point cp (M3_GC_Cn for unassigned or > 0x10FFFF). */
m3_gc m3_uc_category(uint32_t cp);
/* 1 if cp has the White_Space property (what \s and Rust char::is_whitespace test). */
int m3_uc_is_space(uint32_t cp);
/* Simple case fold of cp (cp itself when it has none). */
uint32_t m3_uc_fold(uint32_t cp);

/* Decode one well-formed UTF-8 sequence at s[0..n): returns its length (1-4)
 * and sets *cp, or 0 when s does not start with a well-formed sequence. */
int m3_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* Encode cp (<= 0x10FFFF, not a surrogate) into out[0..4); returns the length. */
int m3_utf8_encode(uint32_t cp, uint8_t out[4]);
/* Length of the maximal invalid subpart at s[0..n) (>= 1) when s does not start
 * with a well-formed sequence: the bytes one U+FFFD replaces. */
size_t m3_utf8_invalid_len(const uint8_t *s, size_t n);
/* Copy s[0..n) replacing every maximal invalid subpart by U+FFFD (EF BF BD).
 * Returns a malloc'd NUL-terminated buffer (caller frees), length in *out_n;
 * NULL when out of memory. */
uint8_t *m3_utf8_sanitize(const uint8_t *s, size_t n, size_t *out_n);

#endif
