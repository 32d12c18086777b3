/* pretok_regex.c — regex engine for pre-tokenizer split patterns.
 * Spec: M3-TOK-REGEX (see pretok_regex.h). Pattern → tree → program; the
 * search is a memoised backtracker (each (instruction, position) state is
 * explored at most once per attempt), which keeps leftmost-first semantics. */
#include "pretok_regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unicode.h"

#define MAX_PROG 4096 /* real pre-tokenizer patterns compile to a few hundred; see fuzz/regressions */
#define MAX_REPEAT 1000
#define MAX_LOOK_DEPTH 4
/* Group nesting the recursive-descent parser accepts (real patterns nest 2-3 deep);
 * bounds the parser's stack use, as the generator's depth cap bounds its own. */
#define MAX_GROUP_DEPTH 200
/* Nested counted repeats of empty bodies (e.g. "(){60}{60}{210}") emit no
 * instructions but multiply the generator's work; cap that work too. */
#define MAX_GEN_CALLS 1000000L
/* Steps of one m3_regex_search call, whatever the text length (a documented cap). */
#define M3_REGEX_MAX_STEPS 32000000ull

/* ------------------------------------------------------------------ data */
enum { CI_RANGE, CI_GC, CI_NOTGC, CI_SPACE, CI_NOTSPACE, CI_WORD, CI_NOTWORD };
typedef struct citem { int kind; uint32_t lo, hi, mask; } citem;
typedef struct cclass { citem *items; int n, cap; int negate, icase; } cclass;

enum { OP_CHAR, OP_CHARI, OP_CLASS, OP_ANY, OP_SPLIT, OP_JMP, OP_MATCH, OP_BOL, OP_EOL,
       OP_BOT, OP_EOT, OP_EOTNL, OP_LOOK };
typedef struct inst { uint8_t op, neg; int x, y; uint32_t c; } inst;

struct m3_regex {
    inst *prog; int nprog, capprog;
    cclass *cls; int ncls, capcls;
};

enum { N_EMPTY, N_LIT, N_CLASS, N_ANY, N_CAT, N_ALT, N_REP, N_LOOK, N_BOL, N_EOL, N_BOT, N_EOT,
       N_EOTNL };
typedef struct node { int type; uint32_t cp; int icase, cls, min, max, greedy, neg, a, b; } node;

typedef struct parser {
    const char *pat; size_t pos, len;
    node *nodes; int nn, capn;
    m3_regex *re;
    int icase;
    m3_err *e;
    int failed;
    long gen_calls; /* code generation work, capped by MAX_GEN_CALLS */
    int depth;      /* open groups, capped by MAX_GROUP_DEPTH */
} parser;

static int pfail(parser *p, const char *what) {
    if (!p->failed)
        m3_fail(p->e, "regex: %s at offset %zu of pattern \"%.200s\"", what, p->pos, p->pat);
    p->failed = 1;
    return -1;
}

static int new_node(parser *p, int type) {
    if (p->failed) return -1;
    if (p->nn == p->capn) {
        int nc = p->capn ? p->capn * 2 : 64;
        node *nn = realloc(p->nodes, (size_t)nc * sizeof *nn);
        if (!nn) return pfail(p, "out of memory");
        p->nodes = nn; p->capn = nc;
    }
    node *n = &p->nodes[p->nn];
    memset(n, 0, sizeof *n);
    n->type = type; n->a = n->b = -1; n->cls = -1;
    return p->nn++;
}

static int new_class(parser *p) {
    m3_regex *re = p->re;
    if (re->ncls == re->capcls) {
        int nc = re->capcls ? re->capcls * 2 : 8;
        cclass *c = realloc(re->cls, (size_t)nc * sizeof *c);
        if (!c) return pfail(p, "out of memory");
        re->cls = c; re->capcls = nc;
    }
    memset(&re->cls[re->ncls], 0, sizeof(cclass));
    re->cls[re->ncls].icase = p->icase;
    return re->ncls++;
}

static int class_add(parser *p, int ci, int kind, uint32_t lo, uint32_t hi, uint32_t mask) {
    cclass *c = &p->re->cls[ci];
    if (c->n == c->cap) {
        int nc = c->cap ? c->cap * 2 : 4;
        citem *it = realloc(c->items, (size_t)nc * sizeof *it);
        if (!it) return pfail(p, "out of memory");
        c->items = it; c->cap = nc;
    }
    c->items[c->n].kind = kind; c->items[c->n].lo = lo; c->items[c->n].hi = hi;
    c->items[c->n].mask = mask;
    c->n++;
    return 0;
}

/* ------------------------------------------------------------------ parse */
static int peek(parser *p) { return p->pos < p->len ? (unsigned char)p->pat[p->pos] : -1; }

static int read_cp(parser *p, uint32_t *cp) {
    int l = m3_utf8_decode((const uint8_t *)p->pat + p->pos, p->len - p->pos, cp);
    if (l <= 0) return pfail(p, "invalid UTF-8 in pattern");
    p->pos += (size_t)l;
    return 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex(parser *p, int ndig, uint32_t *cp) {
    uint32_t v = 0;
    for (int i = 0; i < ndig; i++) {
        int h = hexval(peek(p));
        if (h < 0) return pfail(p, "bad hex escape");
        v = v * 16 + (uint32_t)h; p->pos++;
    }
    *cp = v;
    return 0;
}

static const struct { const char *name; uint32_t mask; } gc_names[] = {
    {"L", M3_GCM_L}, {"Letter", M3_GCM_L}, {"Lu", M3_GCM(M3_GC_Lu)}, {"Ll", M3_GCM(M3_GC_Ll)},
    {"Lt", M3_GCM(M3_GC_Lt)}, {"Lm", M3_GCM(M3_GC_Lm)}, {"Lo", M3_GCM(M3_GC_Lo)},
    {"L&", M3_GCM(M3_GC_Lu) | M3_GCM(M3_GC_Ll) | M3_GCM(M3_GC_Lt)},
    {"LC", M3_GCM(M3_GC_Lu) | M3_GCM(M3_GC_Ll) | M3_GCM(M3_GC_Lt)},
    {"M", M3_GCM_M}, {"Mark", M3_GCM_M}, {"Mn", M3_GCM(M3_GC_Mn)}, {"Mc", M3_GCM(M3_GC_Mc)},
    {"Me", M3_GCM(M3_GC_Me)}, {"N", M3_GCM_N}, {"Number", M3_GCM_N}, {"Nd", M3_GCM(M3_GC_Nd)},
    {"Nl", M3_GCM(M3_GC_Nl)}, {"No", M3_GCM(M3_GC_No)}, {"P", M3_GCM_P},
    {"Punctuation", M3_GCM_P}, {"Pc", M3_GCM(M3_GC_Pc)}, {"Pd", M3_GCM(M3_GC_Pd)},
    {"Ps", M3_GCM(M3_GC_Ps)}, {"Pe", M3_GCM(M3_GC_Pe)}, {"Pi", M3_GCM(M3_GC_Pi)},
    {"Pf", M3_GCM(M3_GC_Pf)}, {"Po", M3_GCM(M3_GC_Po)}, {"S", M3_GCM_S}, {"Symbol", M3_GCM_S},
    {"Sm", M3_GCM(M3_GC_Sm)}, {"Sc", M3_GCM(M3_GC_Sc)}, {"Sk", M3_GCM(M3_GC_Sk)},
    {"So", M3_GCM(M3_GC_So)}, {"Z", M3_GCM_Z}, {"Separator", M3_GCM_Z},
    {"Zs", M3_GCM(M3_GC_Zs)}, {"Zl", M3_GCM(M3_GC_Zl)}, {"Zp", M3_GCM(M3_GC_Zp)},
    {"C", M3_GCM_C}, {"Other", M3_GCM_C}, {"Cc", M3_GCM(M3_GC_Cc)}, {"Cf", M3_GCM(M3_GC_Cf)},
    {"Cs", M3_GCM(M3_GC_Cs)}, {"Co", M3_GCM(M3_GC_Co)}, {"Cn", M3_GCM(M3_GC_Cn)},
};

/* After '\p' or '\P': read {Name} or one letter; sets mask and negation. */
static int read_prop(parser *p, uint32_t *mask, int *neg) {
    char name[32];
    size_t n = 0;
    if (peek(p) == '{') {
        p->pos++;
        if (peek(p) == '^') { *neg = !*neg; p->pos++; }
        while (peek(p) != '}' ) {
            if (peek(p) < 0 || n + 1 >= sizeof name) return pfail(p, "bad \\p{...} property");
            name[n++] = (char)peek(p); p->pos++;
        }
        p->pos++;
    } else {
        if (peek(p) < 0) return pfail(p, "bad \\p property");
        name[n++] = (char)peek(p); p->pos++;
    }
    name[n] = 0;
    for (size_t i = 0; i < sizeof gc_names / sizeof gc_names[0]; i++)
        if (strcmp(gc_names[i].name, name) == 0) { *mask = gc_names[i].mask; return 0; }
    char msg[96];
    snprintf(msg, sizeof msg, "unsupported Unicode property \\p{%s}", name);
    return pfail(p, msg);
}

/* Parse the escape after '\'. *kind: -1 literal (cp set), else a class item kind. */
static int read_escape(parser *p, int in_class, int *kind, uint32_t *cp, uint32_t *mask) {
    int c = peek(p);
    if (c < 0) return pfail(p, "pattern ends after '\\'");
    p->pos++;
    *kind = -1;
    switch (c) {
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case 'a': *cp = 7; return 0;
    case 'e': *cp = 27; return 0;
    case '0': *cp = 0; return 0;
    case 'x':
        if (peek(p) == '{') {
            p->pos++;
            uint32_t v = 0; int nd = 0;
            while (hexval(peek(p)) >= 0 && nd < 8) { v = v * 16 + (uint32_t)hexval(peek(p)); p->pos++; nd++; }
            if (peek(p) != '}' || nd == 0 || v > 0x10FFFF) return pfail(p, "bad \\x{...} escape");
            p->pos++; *cp = v; return 0;
        }
        return read_hex(p, 2, cp);
    case 'u': return read_hex(p, 4, cp);
    case 's': *kind = CI_SPACE; return 0;
    case 'S': *kind = CI_NOTSPACE; return 0;
    case 'w': *kind = CI_WORD; return 0;
    case 'W': *kind = CI_NOTWORD; return 0;
    case 'd': *kind = CI_GC; *mask = M3_GCM(M3_GC_Nd); return 0;
    case 'D': *kind = CI_NOTGC; *mask = M3_GCM(M3_GC_Nd); return 0;
    case 'p': case 'P': {
        int neg = (c == 'P');
        if (read_prop(p, mask, &neg)) return -1;
        *kind = neg ? CI_NOTGC : CI_GC;
        return 0;
    }
    default:
        break;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
        if (!in_class && (c == 'A' || c == 'z' || c == 'Z')) { *kind = -2; *cp = (uint32_t)c; return 0; }
        char msg[64];
        snprintf(msg, sizeof msg, "unsupported escape \\%c", c);
        return pfail(p, msg);
    }
    p->pos--;
    return read_cp(p, cp); /* escaped punctuation or any other character: literal */
}

static int parse_alt(parser *p);

static int parse_class(parser *p) {
    /* '[' already consumed */
    int ci = new_class(p);
    if (ci < 0) return -1;
    if (peek(p) == '^') { p->re->cls[ci].negate = 1; p->pos++; }
    int first = 1;
    for (;;) {
        int c = peek(p);
        if (c < 0) return pfail(p, "unterminated character class");
        if (c == ']' && !first) { p->pos++; break; }
        first = 0;
        uint32_t lo, mask = 0;
        int kind = -1;
        if (c == '[') return pfail(p, "nested character classes are not supported");
        if (c == '&' && p->pos + 1 < p->len && p->pat[p->pos + 1] == '&')
            return pfail(p, "class intersection && is not supported");
        if (c == '\\') {
            p->pos++;
            if (read_escape(p, 1, &kind, &lo, &mask)) return -1;
        } else if (read_cp(p, &lo)) return -1;
        if (kind >= 0) {
            if (class_add(p, ci, kind, 0, 0, mask)) return -1;
            continue;
        }
        uint32_t hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->pat[p->pos + 1] != ']') {
            p->pos++;
            if (peek(p) == '\\') {
                p->pos++;
                if (read_escape(p, 1, &kind, &hi, &mask)) return -1;
                if (kind >= 0) return pfail(p, "class escape used as range end");
            } else if (read_cp(p, &hi)) return -1;
            if (hi < lo) return pfail(p, "character class range out of order");
        }
        if (class_add(p, ci, CI_RANGE, lo, hi, 0)) return -1;
    }
    int n = new_node(p, N_CLASS);
    if (n >= 0) p->nodes[n].cls = ci;
    return n;
}

static int single_item_class(parser *p, int kind, uint32_t mask) {
    int ci = new_class(p);
    if (ci < 0 || class_add(p, ci, kind, 0, 0, mask)) return -1;
    int n = new_node(p, N_CLASS);
    if (n >= 0) p->nodes[n].cls = ci;
    return n;
}

static int parse_group(parser *p) {
    /* '(' already consumed */
    int saved = p->icase, n;
    if (++p->depth > MAX_GROUP_DEPTH)
        return pfail(p, "groups nested deeper than 200");
    if (peek(p) == '?') {
        p->pos++;
        int c = peek(p);
        if (c == ':') { p->pos++; n = parse_alt(p); }
        else if (c == '=' || c == '!') {
            p->pos++;
            int body = parse_alt(p);
            if (body < 0) return -1;
            n = new_node(p, N_LOOK);
            if (n < 0) return -1;
            p->nodes[n].a = body; p->nodes[n].neg = (c == '!');
        } else if (c == 'i' || c == '-') {
            int on = 1;
            if (c == '-') { on = 0; p->pos++; }
            if (peek(p) != 'i') return pfail(p, "unsupported inline flag (only i)");
            p->pos++;
            p->icase = on;
            if (peek(p) == ')') { p->pos++; return new_node(p, N_EMPTY); } /* (?i): rest of group */
            if (peek(p) != ':') return pfail(p, "expected ':' or ')' after inline flag");
            p->pos++;
            n = parse_alt(p);
        } else if (c == '<' && p->pos + 1 < p->len && (p->pat[p->pos + 1] == '=' || p->pat[p->pos + 1] == '!')) {
            return pfail(p, "lookbehind is not supported");
        } else if (c == '>') {
            return pfail(p, "atomic groups are not supported");
        } else {
            return pfail(p, "unsupported group syntax (?...)");
        }
    } else {
        n = parse_alt(p);
    }
    if (n < 0) return -1;
    if (peek(p) != ')') return pfail(p, "missing ')'");
    p->pos++;
    p->icase = saved;
    p->depth--;
    return n;
}

static int parse_atom(parser *p) {
    int c = peek(p);
    switch (c) {
    case '(': p->pos++; return parse_group(p);
    case '[': p->pos++; return parse_class(p);
    case '.': p->pos++; return new_node(p, N_ANY);
    case '^': p->pos++; return new_node(p, N_BOL);
    case '$': p->pos++; return new_node(p, N_EOL);
    case '*': case '+': case '?': return pfail(p, "quantifier with nothing to repeat");
    case '\\': {
        p->pos++;
        int kind; uint32_t cp = 0, mask = 0;
        if (read_escape(p, 0, &kind, &cp, &mask)) return -1;
        if (kind == -2) return new_node(p, cp == 'A' ? N_BOT : cp == 'z' ? N_EOT : N_EOTNL);
        if (kind >= 0) return single_item_class(p, kind, mask);
        int n = new_node(p, N_LIT);
        if (n >= 0) { p->nodes[n].cp = cp; p->nodes[n].icase = p->icase; }
        return n;
    }
    default: {
        uint32_t cp;
        if (read_cp(p, &cp)) return -1;
        int n = new_node(p, N_LIT);
        if (n >= 0) { p->nodes[n].cp = cp; p->nodes[n].icase = p->icase; }
        return n;
    }
    }
}

/* Try to read {n}, {n,}, {n,m} at p->pos; returns 1 if read, 0 if not a quantifier,
 * -1 (after pfail) for a count of more than 6 digits. */
static int read_counted(parser *p, int *mn, int *mx) {
    size_t q = p->pos + 1;
    long a = 0, b;
    int nd = 0;
    while (q < p->len && p->pat[q] >= '0' && p->pat[q] <= '9' && nd < 6) { a = a * 10 + (p->pat[q] - '0'); q++; nd++; }
    if (nd == 6 && q < p->len && p->pat[q] >= '0' && p->pat[q] <= '9')
        return pfail(p, "repeat count of more than 6 digits");
    if (nd == 0 || q >= p->len) return 0;
    if (p->pat[q] == '}') { b = a; }
    else if (p->pat[q] == ',') {
        q++;
        int nd2 = 0; b = 0;
        while (q < p->len && p->pat[q] >= '0' && p->pat[q] <= '9' && nd2 < 6) { b = b * 10 + (p->pat[q] - '0'); q++; nd2++; }
        if (nd2 == 6 && q < p->len && p->pat[q] >= '0' && p->pat[q] <= '9')
            return pfail(p, "repeat count of more than 6 digits");
        if (q >= p->len || p->pat[q] != '}') return 0;
        if (nd2 == 0) b = -1;
    } else return 0;
    *mn = (int)a; *mx = (int)b;
    p->pos = q + 1;
    return 1;
}

static int parse_repeat(parser *p) {
    int atom = parse_atom(p);
    if (atom < 0) return -1;
    for (;;) {
        int c = peek(p), mn, mx, rc;
        if (c == '*') { mn = 0; mx = -1; p->pos++; }
        else if (c == '+') { mn = 1; mx = -1; p->pos++; }
        else if (c == '?') { mn = 0; mx = 1; p->pos++; }
        else if (c == '{' && (rc = read_counted(p, &mn, &mx)) != 0) {
            if (rc < 0) return -1;
            if (mn > MAX_REPEAT || mx > MAX_REPEAT || (mx >= 0 && mx < mn))
                return pfail(p, "bad or too large repeat count");
        } else break;
        int greedy = 1;
        if (peek(p) == '?') { greedy = 0; p->pos++; }
        else if (peek(p) == '+') return pfail(p, "possessive quantifiers are not supported");
        int t = p->nodes[atom].type;
        if (t == N_BOL || t == N_EOL || t == N_BOT || t == N_EOT || t == N_EOTNL || t == N_LOOK)
            return pfail(p, "quantifier after an assertion");
        int n = new_node(p, N_REP);
        if (n < 0) return -1;
        p->nodes[n].a = atom; p->nodes[n].min = mn; p->nodes[n].max = mx; p->nodes[n].greedy = greedy;
        atom = n;
    }
    return atom;
}

static int parse_cat(parser *p) {
    int left = -1;
    for (;;) {
        int c = peek(p);
        if (c < 0 || c == '|' || c == ')') break;
        int a = parse_repeat(p);
        if (a < 0) return -1;
        if (left < 0) left = a;
        else {
            int n = new_node(p, N_CAT);
            if (n < 0) return -1;
            p->nodes[n].a = left; p->nodes[n].b = a; left = n;
        }
    }
    return left < 0 ? new_node(p, N_EMPTY) : left;
}

static int parse_alt(parser *p) {
    int left = parse_cat(p);
    while (left >= 0 && peek(p) == '|') {
        p->pos++;
        int right = parse_cat(p);
        if (right < 0) return -1;
        int n = new_node(p, N_ALT);
        if (n < 0) return -1;
        p->nodes[n].a = left; p->nodes[n].b = right; left = n;
    }
    return left;
}

/* ------------------------------------------------------------------ emit */
static int emit(parser *p, int op, int x, int y, uint32_t c) {
    m3_regex *re = p->re;
    if (p->failed) return -1;
    if (re->nprog >= MAX_PROG) return pfail(p, "compiled program too large");
    if (re->nprog == re->capprog) {
        int nc = re->capprog ? re->capprog * 2 : 64;
        inst *ni = realloc(re->prog, (size_t)nc * sizeof *ni);
        if (!ni) return pfail(p, "out of memory");
        re->prog = ni; re->capprog = nc;
    }
    inst *in = &re->prog[re->nprog];
    in->op = (uint8_t)op; in->neg = 0; in->x = x; in->y = y; in->c = c;
    return re->nprog++;
}

static int gen(parser *p, int ni, int depth) {
    if (depth > 2000) return pfail(p, "pattern nested too deeply");
    if (++p->gen_calls > MAX_GEN_CALLS) return pfail(p, "pattern too large once its repeats are expanded");
    node n = p->nodes[ni];
    m3_regex *re = p->re;
    switch (n.type) {
    case N_EMPTY: return 0;
    case N_LIT:
        return emit(p, n.icase ? OP_CHARI : OP_CHAR, 0, 0, n.icase ? m3_uc_fold(n.cp) : n.cp) < 0 ? -1 : 0;
    case N_CLASS: return emit(p, OP_CLASS, n.cls, 0, 0) < 0 ? -1 : 0;
    case N_ANY: return emit(p, OP_ANY, 0, 0, 0) < 0 ? -1 : 0;
    case N_BOL: return emit(p, OP_BOL, 0, 0, 0) < 0 ? -1 : 0;
    case N_EOL: return emit(p, OP_EOL, 0, 0, 0) < 0 ? -1 : 0;
    case N_BOT: return emit(p, OP_BOT, 0, 0, 0) < 0 ? -1 : 0;
    case N_EOT: return emit(p, OP_EOT, 0, 0, 0) < 0 ? -1 : 0;
    case N_EOTNL: return emit(p, OP_EOTNL, 0, 0, 0) < 0 ? -1 : 0;
    case N_CAT:
        if (gen(p, n.a, depth + 1)) return -1;
        return gen(p, n.b, depth + 1);
    case N_ALT: {
        int sp = emit(p, OP_SPLIT, 0, 0, 0);
        if (sp < 0) return -1;
        re->prog[sp].x = re->nprog;
        if (gen(p, n.a, depth + 1)) return -1;
        int j = emit(p, OP_JMP, 0, 0, 0);
        if (j < 0) return -1;
        re->prog[sp].y = re->nprog;
        if (gen(p, n.b, depth + 1)) return -1;
        re->prog[j].x = re->nprog;
        return 0;
    }
    case N_LOOK: {
        int lk = emit(p, OP_LOOK, 0, 0, 0);
        if (lk < 0) return -1;
        re->prog[lk].neg = (uint8_t)n.neg;
        re->prog[lk].x = re->nprog;
        if (gen(p, n.a, depth + 1)) return -1;
        if (emit(p, OP_MATCH, 0, 0, 0) < 0) return -1;
        re->prog[lk].y = re->nprog;
        return 0;
    }
    case N_REP: {
        for (int i = 0; i < n.min; i++)
            if (gen(p, n.a, depth + 1)) return -1;
        if (n.max < 0) {
            int sp = emit(p, OP_SPLIT, 0, 0, 0);
            if (sp < 0) return -1;
            int body = re->nprog;
            if (gen(p, n.a, depth + 1)) return -1;
            if (emit(p, OP_JMP, sp, 0, 0) < 0) return -1;
            int out = re->nprog;
            re->prog[sp].x = n.greedy ? body : out;
            re->prog[sp].y = n.greedy ? out : body;
            return 0;
        }
        int k = n.max - n.min;
        if (k == 0) return 0;
        int *splits = malloc((size_t)k * sizeof *splits);
        if (!splits) return pfail(p, "out of memory");
        for (int i = 0; i < k; i++) {
            splits[i] = emit(p, OP_SPLIT, 0, 0, 0);
            if (splits[i] < 0) { free(splits); return -1; }
            re->prog[splits[i]].x = re->nprog; /* body, patched below for lazy */
            if (gen(p, n.a, depth + 1)) { free(splits); return -1; }
        }
        int out = re->nprog;
        for (int i = 0; i < k; i++) {
            int body = splits[i] + 1;
            re->prog[splits[i]].x = n.greedy ? body : out;
            re->prog[splits[i]].y = n.greedy ? out : body;
        }
        free(splits);
        return 0;
    }
    }
    return pfail(p, "internal: unknown node");
}

void m3_regex_free(m3_regex *re) {
    if (!re) return;
    for (int i = 0; i < re->ncls; i++) free(re->cls[i].items);
    free(re->cls);
    free(re->prog);
    free(re);
}

size_t m3_regex_size(const m3_regex *re) { return re ? (size_t)re->nprog : 0; }

int m3_regex_compile(m3_regex **out, const char *pattern, m3_err *e) {
    *out = NULL;
    m3_regex *re = calloc(1, sizeof *re);
    if (!re) return m3_fail(e, "regex: out of memory");
    parser p = {0};
    p.pat = pattern; p.len = strlen(pattern); p.re = re; p.e = e;
    int root = parse_alt(&p);
    if (root >= 0 && p.pos < p.len) pfail(&p, "unmatched ')'");
    if (!p.failed) gen(&p, root, 0);
    if (!p.failed) emit(&p, OP_MATCH, 0, 0, 0);
    free(p.nodes);
    if (p.failed) { m3_regex_free(re); return -1; }
    *out = re;
    return 0;
}

/* ------------------------------------------------------------------ match */
typedef struct level {
    uint8_t *bits; size_t capbits; /* visited (offset * nprog + pc) */
    size_t *stack; size_t capstack; /* pairs (pc, pos) */
} level;

struct m3_regex_scratch { level lv[MAX_LOOK_DEPTH + 1]; };

m3_regex_scratch *m3_regex_scratch_new(void) { return calloc(1, sizeof(m3_regex_scratch)); }

void m3_regex_scratch_free(m3_regex_scratch *s) {
    if (!s) return;
    for (int i = 0; i <= MAX_LOOK_DEPTH; i++) { free(s->lv[i].bits); free(s->lv[i].stack); }
    free(s);
}

static int class_has_raw(const cclass *c, uint32_t cp) {
    for (int i = 0; i < c->n; i++) {
        const citem *it = &c->items[i];
        switch (it->kind) {
        case CI_RANGE: if (cp >= it->lo && cp <= it->hi) return 1; break;
        case CI_GC: if (it->mask & M3_GCM(m3_uc_category(cp))) return 1; break;
        case CI_NOTGC: if (!(it->mask & M3_GCM(m3_uc_category(cp)))) return 1; break;
        case CI_SPACE: if (m3_uc_is_space(cp)) return 1; break;
        case CI_NOTSPACE: if (!m3_uc_is_space(cp)) return 1; break;
        case CI_WORD: case CI_NOTWORD: {
            uint32_t m = M3_GCM(m3_uc_category(cp));
            int w = (m & (M3_GCM_L | M3_GCM_M | M3_GCM(M3_GC_Nd) | M3_GCM(M3_GC_Pc))) != 0;
            if (w == (it->kind == CI_WORD)) return 1;
            break;
        }
        }
    }
    return 0;
}

static int class_has(const cclass *c, uint32_t cp) {
    int in = class_has_raw(c, cp);
    if (!in && c->icase) {
        uint32_t f = m3_uc_fold(cp);
        in = (f != cp && class_has_raw(c, f));
        if (!in && cp < 0x80 && ((cp | 32) >= 'a' && (cp | 32) <= 'z')) in = class_has_raw(c, cp ^ 32);
    }
    return c->negate ? !in : in;
}

static int grow(void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) nc *= 2;
    void *nb = realloc(*buf, nc * elem);
    if (!nb) return -1;
    if (elem == 1) memset((uint8_t *)nb + *cap, 0, nc - *cap);
    *buf = nb; *cap = nc;
    return 0;
}

typedef struct mctx {
    const m3_regex *re; m3_regex_scratch *s; const uint8_t *t; size_t len;
    uint64_t steps, cap; m3_err *e;
} mctx;

static inline int cp_at(const mctx *m, size_t pos, uint32_t *cp) {
    int l = m3_utf8_decode(m->t + pos, m->len - pos, cp);
    if (l <= 0) { *cp = 0xFFFD; l = 1; }
    return l;
}

/* Backtracking search from (pc0, pos0) at lookahead depth d. 1 match, 0 none, -1 error. */
static int bt(mctx *m, int d, int pc0, size_t pos0, size_t *end) {
    if (d > MAX_LOOK_DEPTH) return m3_fail(m->e, "regex: lookahead nested deeper than %d", MAX_LOOK_DEPTH);
    level *L = &m->s->lv[d];
    const size_t np = (size_t)m->re->nprog;
    const inst *prog = m->re->prog;
    size_t sp = 0, maxbit = 0;
    int result = 0;
    if (grow((void **)&L->stack, &L->capstack, 2, sizeof(size_t))) return m3_fail(m->e, "regex: out of memory");
    L->stack[sp++] = (size_t)pc0; L->stack[sp++] = pos0;
    while (sp > 0 && result == 0) {
        size_t pos = L->stack[--sp];
        int pc = (int)L->stack[--sp];
        for (;;) {
            size_t bit = (pos - pos0) * np + (size_t)pc;
            if (bit / 8 >= L->capbits &&
                grow((void **)&L->bits, &L->capbits, bit / 8 + 1, 1)) { result = -1; break; }
            if (L->bits[bit / 8] & (1u << (bit % 8))) break;
            L->bits[bit / 8] |= (uint8_t)(1u << (bit % 8));
            if (bit + 1 > maxbit) maxbit = bit + 1;
            if (++m->steps > m->cap) {
                result = m3_fail(m->e, "regex: step limit exceeded (%llu steps) near byte offset %zu; "
                                 "the pattern backtracks too much on this input",
                                 (unsigned long long)m->cap, pos);
                break;
            }
            const inst *in = &prog[pc];
            uint32_t cp;
            int adv;
            switch (in->op) {
            case OP_CHAR:
                if (pos >= m->len) goto fail;
                adv = cp_at(m, pos, &cp);
                if (cp != in->c) goto fail;
                pos += (size_t)adv; pc++; continue;
            case OP_CHARI:
                if (pos >= m->len) goto fail;
                adv = cp_at(m, pos, &cp);
                if (m3_uc_fold(cp) != in->c) goto fail;
                pos += (size_t)adv; pc++; continue;
            case OP_CLASS:
                if (pos >= m->len) goto fail;
                adv = cp_at(m, pos, &cp);
                if (!class_has(&m->re->cls[in->x], cp)) goto fail;
                pos += (size_t)adv; pc++; continue;
            case OP_ANY:
                if (pos >= m->len || m->t[pos] == '\n') goto fail;
                pos += (size_t)cp_at(m, pos, &cp); pc++; continue;
            case OP_SPLIT:
                if (grow((void **)&L->stack, &L->capstack, sp + 2, sizeof(size_t))) { result = -1; break; }
                L->stack[sp++] = (size_t)in->y; L->stack[sp++] = pos;
                pc = in->x; continue;
            case OP_JMP: pc = in->x; continue;
            case OP_MATCH: *end = pos; result = 1; break;
            case OP_BOL: if (pos == 0 || m->t[pos - 1] == '\n') { pc++; continue; } goto fail;
            case OP_EOL: if (pos == m->len || m->t[pos] == '\n') { pc++; continue; } goto fail;
            case OP_BOT: if (pos == 0) { pc++; continue; } goto fail;
            case OP_EOT: if (pos == m->len) { pc++; continue; } goto fail;
            case OP_EOTNL:
                if (pos == m->len || (pos + 1 == m->len && m->t[pos] == '\n')) { pc++; continue; }
                goto fail;
            case OP_LOOK: {
                size_t dummy;
                int r = bt(m, d + 1, in->x, pos, &dummy);
                if (r < 0) { result = -1; break; }
                if (r != (in->neg ? 1 : 0)) { pc = in->y; continue; }
                goto fail;
            }
            }
            break;
        fail:
            break;
        }
    }
    if (result < 0 && m->e && m->e->msg[0] == 0) m3_fail(m->e, "regex: out of memory");
    /* Clear the visited bits this attempt touched. */
    if (maxbit) memset(L->bits, 0, (maxbit + 7) / 8);
    return result;
}

int m3_regex_search(const m3_regex *re, m3_regex_scratch *s, const uint8_t *text, size_t len,
                    size_t start, size_t *ms, size_t *me, m3_err *e) {
    if (e) e->msg[0] = 0;
    mctx m = {re, s, text, len, 0, 0, e};
    /* Backtracking with the (instruction, position) memo visits each pair at
     * most once per attempt, so 64 * program * text is generous for real
     * pre-tokenizer patterns (a match takes a few hundred steps); the absolute
     * cap bounds one call on hostile patterns (fuzz/regressions/fuzz_regex). */
    m.cap = 64ull * (uint64_t)re->nprog * (uint64_t)(len - start + 1) + 1000000ull;
    if (m.cap > M3_REGEX_MAX_STEPS)
        m.cap = M3_REGEX_MAX_STEPS;
    size_t pos = start;
    for (;;) {
        size_t end;
        int r = bt(&m, 0, 0, pos, &end);
        if (r < 0) return -1;
        if (r == 1) { *ms = pos; *me = end; return 1; }
        if (pos >= len) return 0;
        uint32_t cp;
        pos += (size_t)cp_at(&m, pos, &cp);
    }
}
