/* unicode.c — lookups over the generated tables, UTF-8 decode/encode/sanitize.
 * Spec: M3-TOK-UNICODE, M3-TOK-UTF8 (see unicode.h). */
#include "unicode.h"

#include <stdlib.h>

const char *m3_uc_version(void) { return m3_uc_version_str; }

m3_gc m3_uc_category(uint32_t cp) {
    size_t lo = 0, hi = m3_uc_gc_ranges_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < m3_uc_gc_ranges[mid].lo) hi = mid;
        else if (cp > m3_uc_gc_ranges[mid].hi) lo = mid + 1;
        else return (m3_gc)m3_uc_gc_ranges[mid].gc;
    }
    return M3_GC_Cn;
}

int m3_uc_is_space(uint32_t cp) {
    /* White_Space (PropList.txt; unchanged since Unicode 6.3). */
    if (cp >= 0x09 && cp <= 0x0D) return 1;
    switch (cp) {
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

uint32_t m3_uc_fold(uint32_t cp) {
    if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    size_t lo = 0, hi = m3_uc_fold_pairs_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < m3_uc_fold_pairs[mid][0]) hi = mid;
        else if (cp > m3_uc_fold_pairs[mid][0]) lo = mid + 1;
        else return m3_uc_fold_pairs[mid][1];
    }
    return cp;
}

int m3_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t b = s[0];
    if (b < 0x80) { *cp = b; return 1; }
    int len;
    uint32_t c;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) { len = 2; c = b & 0x1F; }
    else if (b >= 0xE0 && b <= 0xEF) {
        len = 3; c = b & 0x0F;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4; c = b & 0x07;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        uint8_t t = s[i];
        if (i == 1 ? (t < lo || t > hi) : (t < 0x80 || t > 0xBF)) return 0;
        c = (c << 6) | (t & 0x3F);
    }
    *cp = c;
    return len;
}

size_t m3_utf8_invalid_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    uint8_t b = s[0];
    int len;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b >= 0xE0 && b <= 0xEF) { len = 3; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
    else if (b >= 0xF0 && b <= 0xF4) { len = 4; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
    else return 1;
    size_t i = 1;
    for (; i < (size_t)len && i < n; i++) {
        uint8_t t = s[i];
        if (i == 1 ? (t < lo || t > hi) : (t < 0x80 || t > 0xBF)) break;
    }
    return i;
}

int m3_utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6)); out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12)); out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18)); out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

uint8_t *m3_utf8_sanitize(const uint8_t *s, size_t n, size_t *out_n) {
    /* Worst case: every byte becomes 3 bytes of U+FFFD. */
    if (n > ((size_t)-1 - 1) / 3) return NULL;
    uint8_t *o = malloc(3 * n + 1);
    if (!o) return NULL;
    size_t i = 0, k = 0;
    while (i < n) {
        uint32_t cp;
        int l = m3_utf8_decode(s + i, n - i, &cp);
        if (l > 0) {
            for (int j = 0; j < l; j++) o[k++] = s[i + j];
            i += (size_t)l;
        } else {
            i += m3_utf8_invalid_len(s + i, n - i);
            o[k++] = 0xEF; o[k++] = 0xBF; o[k++] = 0xBD;
        }
    }
    o[k] = 0;
    *out_n = k;
    return o;
}
