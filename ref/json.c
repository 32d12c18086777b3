/* json.c — strict JSON reader and Python-style writers (see json.h). */
#include "json.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void m3_strbuf_put(m3_strbuf *b, const char *s, size_t len)
{
    if (b->oom)
        return;
    if (b->n + len + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + len + 1) {
            if (nc > SIZE_MAX / 2) {
                b->oom = 1;
                return;
            }
            nc *= 2;
        }
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = '\0';
}

void m3_strbuf_puts(m3_strbuf *b, const char *s)
{
    m3_strbuf_put(b, s, strlen(s));
}

/* ---- reader ------------------------------------------------------------- */

typedef struct reader {
    const char *s;
    size_t len, pos;
    int line;
    size_t line_start;
    m3_err *e;
} reader;

static int col_of(const reader *r, size_t pos)
{
    return (int)(pos - r->line_start) + 1;
}

static int rfail(reader *r, size_t pos, const char *what)
{
    return m3_fail(r->e, "line %d, column %d: %s", r->line, col_of(r, pos), what);
}

static void skip_ws(reader *r)
{
    while (r->pos < r->len) {
        char c = r->s[r->pos];
        if (c == '\n') {
            r->line++;
            r->line_start = r->pos + 1;
        } else if (c != ' ' && c != '\t' && c != '\r') {
            return;
        }
        r->pos++;
    }
}

static m3_json *new_value(reader *r, m3_json_type t)
{
    m3_json *v = calloc(1, sizeof *v);
    if (!v) {
        rfail(r, r->pos, "out of memory");
        return NULL;
    }
    v->type = t;
    v->line = r->line;
    v->col = col_of(r, r->pos);
    return v;
}

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when invalid. */
static int utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    int l;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        l = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        l = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        l = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t)l > n)
        return 0;
    for (int i = 1; i < l; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((l == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (l == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return l;
}

static void put_utf8(m3_strbuf *b, uint32_t cp)
{
    char o[4];
    size_t n;
    if (cp < 0x80) {
        o[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        o[0] = (char)(0xF0 | (cp >> 18));
        o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    m3_strbuf_put(b, o, n);
}

static int hex4(reader *r, size_t at, uint32_t *out)
{
    uint32_t v = 0;
    if (at + 4 > r->len)
        return rfail(r, at, "a \\u escape needs 4 hex digits");
    for (int i = 0; i < 4; i++) {
        char c = r->s[at + (size_t)i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return rfail(r, at, "a \\u escape needs 4 hex digits");
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* Parse the string starting at the opening quote into a malloc'd text. */
static int parse_string(reader *r, char **out, size_t *olen)
{
    m3_strbuf b = {0};
    size_t start = r->pos;
    r->pos++; /* the quote */
    for (;;) {
        if (r->pos >= r->len) {
            free(b.p);
            return rfail(r, start, "unterminated string");
        }
        unsigned char c = (unsigned char)r->s[r->pos];
        if (c == '"') {
            r->pos++;
            break;
        }
        if (c < 0x20) {
            free(b.p);
            return rfail(r, r->pos, "a control character in a string must be escaped");
        }
        if (c == '\\') {
            size_t at = r->pos;
            if (r->pos + 1 >= r->len) {
                free(b.p);
                return rfail(r, at, "unterminated string");
            }
            char x = r->s[r->pos + 1];
            const char *rep = NULL;
            switch (x) {
            case '"': rep = "\""; break;
            case '\\': rep = "\\"; break;
            case '/': rep = "/"; break;
            case 'b': rep = "\b"; break;
            case 'f': rep = "\f"; break;
            case 'n': rep = "\n"; break;
            case 'r': rep = "\r"; break;
            case 't': rep = "\t"; break;
            case 'u': break;
            default:
                free(b.p);
                return rfail(r, at, "invalid escape in a string");
            }
            if (rep) {
                m3_strbuf_put(&b, rep, 1);
                r->pos += 2;
                continue;
            }
            uint32_t cp;
            if (hex4(r, r->pos + 2, &cp) != 0) {
                free(b.p);
                return -1;
            }
            r->pos += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (r->pos + 1 < r->len && r->s[r->pos] == '\\' && r->s[r->pos + 1] == 'u' &&
                    hex4(r, r->pos + 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    r->pos += 6;
                } else {
                    free(b.p);
                    return rfail(r, at, "a lone UTF-16 surrogate in a \\u escape");
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(b.p);
                return rfail(r, at, "a lone UTF-16 surrogate in a \\u escape");
            } else if (cp == 0) {
                free(b.p);
                return rfail(r, at, "\\u0000 (a NUL character) is not supported in strings");
            }
            put_utf8(&b, cp);
            continue;
        }
        int l = utf8_len((const unsigned char *)r->s + r->pos, r->len - r->pos);
        if (l == 0) {
            free(b.p);
            return rfail(r, r->pos, "invalid UTF-8");
        }
        m3_strbuf_put(&b, r->s + r->pos, (size_t)l);
        r->pos += (size_t)l;
    }
    if (b.oom) {
        free(b.p);
        return rfail(r, start, "out of memory");
    }
    if (!b.p) {
        b.p = malloc(1);
        if (!b.p)
            return rfail(r, start, "out of memory");
        b.p[0] = '\0';
    }
    *out = b.p;
    *olen = b.n;
    return 0;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int parse_number(reader *r, m3_json *v)
{
    size_t start = r->pos, p = r->pos;
    int is_int = 1;
    if (p < r->len && r->s[p] == '-')
        p++;
    if (p >= r->len || !is_digit(r->s[p]))
        return rfail(r, start, "invalid number");
    if (r->s[p] == '0') {
        p++;
        if (p < r->len && is_digit(r->s[p]))
            return rfail(r, start, "a number must not have leading zeros");
    } else {
        while (p < r->len && is_digit(r->s[p]))
            p++;
    }
    if (p < r->len && r->s[p] == '.') {
        is_int = 0;
        p++;
        if (p >= r->len || !is_digit(r->s[p]))
            return rfail(r, start, "invalid number (no digit after '.')");
        while (p < r->len && is_digit(r->s[p]))
            p++;
    }
    if (p < r->len && (r->s[p] == 'e' || r->s[p] == 'E')) {
        is_int = 0;
        p++;
        if (p < r->len && (r->s[p] == '+' || r->s[p] == '-'))
            p++;
        if (p >= r->len || !is_digit(r->s[p]))
            return rfail(r, start, "invalid number (no digit in the exponent)");
        while (p < r->len && is_digit(r->s[p]))
            p++;
    }
    size_t n = p - start;
    if (is_int && n > 4300)
        return rfail(r, start, "an integer of more than 4300 digits");
    v->str = malloc(n + 1);
    if (!v->str)
        return rfail(r, start, "out of memory");
    memcpy(v->str, r->s + start, n);
    v->str[n] = '\0';
    v->len = n;
    v->is_int = is_int;
    v->num = strtod(v->str, NULL);
    if (!is_int && !isfinite(v->num))
        return rfail(r, start, "a number too large for a double");
    r->pos = p;
    return 0;
}

static int parse_value(reader *r, m3_json **out, int depth);

static int parse_container(reader *r, m3_json *v, int depth)
{
    const int obj = v->type == M3_JSON_OBJECT;
    const char close = obj ? '}' : ']';
    m3_json **tail = &v->child;
    r->pos++;
    skip_ws(r);
    if (r->pos < r->len && r->s[r->pos] == close) {
        r->pos++;
        return 0;
    }
    for (;;) {
        char *key = NULL;
        size_t klen = 0;
        skip_ws(r);
        if (obj) {
            if (r->pos >= r->len || r->s[r->pos] != '"')
                return rfail(r, r->pos, "expected a member name in double quotes");
            size_t kpos = r->pos;
            if (parse_string(r, &key, &klen) != 0)
                return -1;
            for (const m3_json *m = v->child; m; m = m->next)
                if (strcmp(m->key, key) == 0) {
                    char msg[160];
                    snprintf(msg, sizeof msg, "duplicate member name \"%.80s\"", key);
                    free(key);
                    return rfail(r, kpos, msg);
                }
            skip_ws(r);
            if (r->pos >= r->len || r->s[r->pos] != ':') {
                free(key);
                return rfail(r, r->pos, "expected ':' after a member name");
            }
            r->pos++;
        }
        m3_json *c = NULL;
        if (parse_value(r, &c, depth + 1) != 0) {
            free(key);
            return -1;
        }
        c->key = key;
        *tail = c;
        tail = &c->next;
        v->n++;
        skip_ws(r);
        if (r->pos < r->len && r->s[r->pos] == ',') {
            r->pos++;
            continue;
        }
        if (r->pos < r->len && r->s[r->pos] == close) {
            r->pos++;
            return 0;
        }
        return rfail(r, r->pos, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(reader *r, m3_json **out, int depth)
{
    *out = NULL;
    skip_ws(r);
    if (depth > M3_JSON_MAX_DEPTH)
        return rfail(r, r->pos, "nested deeper than 64 levels");
    if (r->pos >= r->len)
        return rfail(r, r->pos, "unexpected end of the text (a value is missing)");
    char c = r->s[r->pos];
    m3_json *v = NULL;
    int rc = 0;
    if (c == '{' || c == '[') {
        v = new_value(r, c == '{' ? M3_JSON_OBJECT : M3_JSON_ARRAY);
        if (!v)
            return -1;
        rc = parse_container(r, v, depth);
    } else if (c == '"') {
        v = new_value(r, M3_JSON_STRING);
        if (!v)
            return -1;
        rc = parse_string(r, &v->str, &v->len);
    } else if (c == '-' || is_digit(c)) {
        v = new_value(r, M3_JSON_NUMBER);
        if (!v)
            return -1;
        rc = parse_number(r, v);
    } else {
        static const struct { const char *w; m3_json_type t; } lit[] = {
            {"null", M3_JSON_NULL}, {"true", M3_JSON_TRUE}, {"false", M3_JSON_FALSE}};
        for (size_t i = 0; i < 3; i++) {
            size_t l = strlen(lit[i].w);
            if (r->len - r->pos >= l && memcmp(r->s + r->pos, lit[i].w, l) == 0) {
                v = new_value(r, lit[i].t);
                if (!v)
                    return -1;
                r->pos += l;
                *out = v;
                return 0;
            }
        }
        return rfail(r, r->pos, "expected a JSON value");
    }
    if (rc != 0) {
        m3_json_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

int m3_json_parse(const char *text, size_t len, m3_json **out, m3_err *e)
{
    reader r = {.s = text, .len = len, .line = 1, .e = e};
    *out = NULL;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        return m3_fail(e, "line 1, column 1: a UTF-8 byte-order mark is not allowed");
    m3_json *v;
    if (parse_value(&r, &v, 1) != 0)
        return -1;
    skip_ws(&r);
    if (r.pos != r.len) {
        m3_json_free(v);
        return rfail(&r, r.pos, "extra text after the JSON value");
    }
    *out = v;
    return 0;
}

void m3_json_free(m3_json *v)
{
    while (v) {
        m3_json *next = v->next;
        m3_json_free(v->child);
        free(v->str);
        free(v->key);
        free(v);
        v = next;
    }
}

const m3_json *m3_json_get(const m3_json *v, const char *key)
{
    if (!v || v->type != M3_JSON_OBJECT)
        return NULL;
    for (const m3_json *m = v->child; m; m = m->next)
        if (strcmp(m->key, key) == 0)
            return m;
    return NULL;
}

const char *m3_json_type_name(m3_json_type t)
{
    switch (t) {
    case M3_JSON_NULL: return "null";
    case M3_JSON_FALSE:
    case M3_JSON_TRUE: return "a boolean";
    case M3_JSON_NUMBER: return "a number";
    case M3_JSON_STRING: return "a string";
    case M3_JSON_ARRAY: return "an array";
    case M3_JSON_OBJECT: return "an object";
    }
    return "?";
}

/* ---- writers ------------------------------------------------------------ */

/* Python's repr(float) for a finite double: the shortest digit string that
 * reads back as x, in positional form for decimal exponents -4..15. */
static void float_repr(double x, m3_strbuf *b)
{
    if (x == 0) {
        m3_strbuf_puts(b, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char buf[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    /* buf is [-]d[.ddd]e(+|-)XX: collect the digits and the exponent */
    char digits[32];
    size_t nd = 0;
    const char *q = buf;
    int neg = 0;
    if (*q == '-') {
        neg = 1;
        q++;
    }
    for (; *q && *q != 'e'; q++)
        if (is_digit(*q) && nd < sizeof digits - 1)
            digits[nd++] = *q;
    digits[nd] = '\0';
    while (nd > 1 && digits[nd - 1] == '0') /* %.*e of a shortest string has none, but be safe */
        digits[--nd] = '\0';
    int ex = *q == 'e' ? atoi(q + 1) : 0;
    int decpt = ex + 1; /* x = 0.d1d2... * 10^decpt */
    if (neg)
        m3_strbuf_puts(b, "-");
    if (decpt > 16 || decpt <= -4) {
        m3_strbuf_put(b, digits, 1);
        if (nd > 1) {
            m3_strbuf_puts(b, ".");
            m3_strbuf_put(b, digits + 1, nd - 1);
        }
        snprintf(buf, sizeof buf, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
        m3_strbuf_puts(b, buf);
    } else if (decpt <= 0) {
        m3_strbuf_puts(b, "0.");
        for (int i = 0; i < -decpt; i++)
            m3_strbuf_puts(b, "0");
        m3_strbuf_put(b, digits, nd);
    } else if ((size_t)decpt >= nd) {
        m3_strbuf_put(b, digits, nd);
        for (size_t i = nd; i < (size_t)decpt; i++)
            m3_strbuf_puts(b, "0");
        m3_strbuf_puts(b, ".0");
    } else {
        m3_strbuf_put(b, digits, (size_t)decpt);
        m3_strbuf_puts(b, ".");
        m3_strbuf_put(b, digits + decpt, nd - (size_t)decpt);
    }
}

void m3_json_number_py(const m3_json *v, m3_strbuf *b)
{
    if (v->is_int)
        m3_strbuf_puts(b, strcmp(v->str, "-0") == 0 ? "0" : v->str);
    else
        float_repr(v->num, b);
}

static void dump_string(const char *s, size_t n, m3_strbuf *b)
{
    m3_strbuf_puts(b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *rep = NULL;
        char u[8];
        if (c == '"')
            rep = "\\\"";
        else if (c == '\\')
            rep = "\\\\";
        else if (c == '\n')
            rep = "\\n";
        else if (c == '\r')
            rep = "\\r";
        else if (c == '\t')
            rep = "\\t";
        else if (c == '\b')
            rep = "\\b";
        else if (c == '\f')
            rep = "\\f";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            rep = u;
        }
        if (rep) {
            m3_strbuf_put(b, s + run, i - run);
            m3_strbuf_puts(b, rep);
            run = i + 1;
        }
    }
    m3_strbuf_put(b, s + run, n - run);
    m3_strbuf_puts(b, "\"");
}

void m3_json_dump_py(const m3_json *v, m3_strbuf *b)
{
    switch (v->type) {
    case M3_JSON_NULL: m3_strbuf_puts(b, "null"); return;
    case M3_JSON_FALSE: m3_strbuf_puts(b, "false"); return;
    case M3_JSON_TRUE: m3_strbuf_puts(b, "true"); return;
    case M3_JSON_NUMBER: m3_json_number_py(v, b); return;
    case M3_JSON_STRING: dump_string(v->str, v->len, b); return;
    case M3_JSON_ARRAY:
    case M3_JSON_OBJECT: {
        const int obj = v->type == M3_JSON_OBJECT;
        m3_strbuf_puts(b, obj ? "{" : "[");
        for (const m3_json *c = v->child; c; c = c->next) {
            if (c != v->child)
                m3_strbuf_puts(b, ", ");
            if (obj) {
                dump_string(c->key, strlen(c->key), b);
                m3_strbuf_puts(b, ": ");
            }
            m3_json_dump_py(c, b);
        }
        m3_strbuf_puts(b, obj ? "}" : "]");
        return;
    }
    }
}
