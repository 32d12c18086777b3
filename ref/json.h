/* json.h — a strict JSON reader that keeps what a chat template sees, and the
 * writers for the text a Python chat template produces from such values.
 *
 * Spec: M3-CHAT-FILE-1 (the conversation file is RFC 8259 JSON in UTF-8, read
 * as Python's json module reads it: members in file order, integers exact,
 * numbers with a fraction or an exponent as IEEE doubles), M3-CHAT-TOOLS-1
 * (tool descriptions written as Python's json.dumps(ensure_ascii=False) writes
 * them) and M3-CHAT-TOOL-1 (argument values written as Python's str()).
 *
 * Design: cJSON keeps neither number literals nor exact large integers, and
 * both change what a template prints ("1" and "1.0" are different text), so
 * values are parsed here into a tree that keeps each number as written.
 * Rejected, with "line L, column C" in the message: anything RFC 8259 does not
 * allow, NaN/Infinity, a leading UTF-8 byte-order mark, invalid UTF-8, lone
 * surrogates, \u0000 (strings are C strings), a duplicated member name,
 * integers of more than 4300 digits (Python refuses them too), numbers that
 * overflow a double, and nesting deeper than M3_JSON_MAX_DEPTH.
 */
#ifndef M3_JSON_H
#define M3_JSON_H

#include <stddef.h>

#include "err.h"

#define M3_JSON_MAX_DEPTH 64

typedef enum m3_json_type {
    M3_JSON_NULL,
    M3_JSON_FALSE,
    M3_JSON_TRUE,
    M3_JSON_NUMBER,
    M3_JSON_STRING,
    M3_JSON_ARRAY,
    M3_JSON_OBJECT
} m3_json_type;

/* One value. Arrays and objects hold their elements as a list (child, next);
 * an object's members carry their name in key. */
typedef struct m3_json {
    m3_json_type type;
    char *str;              /* STRING: the UTF-8 text; NUMBER: the literal as written */
    size_t len;             /* strlen(str) */
    int is_int;             /* NUMBER: the literal has no fraction and no exponent */
    double num;             /* NUMBER: its value */
    char *key;              /* a member's name (NULL for array elements and the root) */
    struct m3_json *child;  /* ARRAY/OBJECT: the first element or member */
    struct m3_json *next;   /* the next element or member of the parent */
    size_t n;               /* ARRAY/OBJECT: number of elements or members */
    int line, col;          /* where the value starts in the text (1-based) */
} m3_json;

/* A growing NUL-terminated byte string; oom is set (and further puts
 * ignored) when an allocation fails. Zero-initialise; free p. */
typedef struct m3_strbuf {
    char *p;
    size_t n, cap;
    int oom;
} m3_strbuf;

/* Append s[0..len) to b. */
void m3_strbuf_put(m3_strbuf *b, const char *s, size_t len);

/* Append the NUL-terminated s to b. */
void m3_strbuf_puts(m3_strbuf *b, const char *s);

/* Parse text[0..len) into a fresh tree *out (free with m3_json_free). On
 * error the message starts "line L, column C: ". */
int m3_json_parse(const char *text, size_t len, m3_json **out, m3_err *e);

/* Free a tree from m3_json_parse (NULL is fine). */
void m3_json_free(m3_json *v);

/* The member named key of an object, or NULL (also when v is no object). */
const m3_json *m3_json_get(const m3_json *v, const char *key);

/* A JSON type's name as Python calls it ("a string", "an object", ...). */
const char *m3_json_type_name(m3_json_type t);

/* Append json.dumps(v, ensure_ascii=False) (separators ", " and ": ",
 * members in order) to b. */
void m3_json_dump_py(const m3_json *v, m3_strbuf *b);

/* Append Python's str() of a number value (int as written, "-0" as "0";
 * float as repr: shortest round-trip digits, exponent form when the decimal
 * exponent is below -4 or above 15) to b. */
void m3_json_number_py(const m3_json *v, m3_strbuf *b);

#endif
