/* tokenizer.c — HF tokenizer.json byte-level BPE (see tokenizer.h for the spec
 * clauses). Pipeline of encode: UTF-8 repair → added tokens (non-normalized,
 * then normalized) → pre-tokenizers → byte-level mapping → BPE merges. */
#include "tokenizer.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"
#include "pretok_regex.h"
#include "unicode.h"

#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define MAX_PRETOK 16
/* Documented caps (checked before allocating): token ids are < M3_TOK_MAX_IDS
 * (the id table is sized by the largest id; the real vocabulary has 200064), and
 * tokenizer files are at most M3_TOK_MAX_FILE bytes. */
#define M3_TOK_MAX_IDS (1 << 22)
#define M3_TOK_MAX_FILE ((size_t)512 << 20)

/* ---------------------------------------------------------------- maps */
typedef struct strmap { /* string → id, open addressing */
    const char **key; uint32_t *klen; int32_t *val; size_t cap, n;
} strmap;

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ull; }
    return h;
}

static int strmap_init(strmap *m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2 + 16) cap *= 2;
    m->key = calloc(cap, sizeof *m->key);
    m->klen = calloc(cap, sizeof *m->klen);
    m->val = calloc(cap, sizeof *m->val);
    m->cap = cap; m->n = 0;
    return (m->key && m->klen && m->val) ? 0 : -1;
}

static void strmap_free(strmap *m) { free(m->key); free(m->klen); free(m->val); }

/* key must outlive the map. Overwrites an existing key. */
static void strmap_put(strmap *m, const char *k, size_t n, int32_t v) {
    size_t i = hash_bytes(k, n) & (m->cap - 1);
    while (m->key[i]) {
        if (m->klen[i] == n && memcmp(m->key[i], k, n) == 0) { m->val[i] = v; return; }
        i = (i + 1) & (m->cap - 1);
    }
    m->key[i] = k; m->klen[i] = (uint32_t)n; m->val[i] = v; m->n++;
}

static int32_t strmap_get(const strmap *m, const char *k, size_t n) {
    if (!m->cap) return -1;
    size_t i = hash_bytes(k, n) & (m->cap - 1);
    while (m->key[i]) {
        if (m->klen[i] == n && memcmp(m->key[i], k, n) == 0) return m->val[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

typedef struct mergemap { /* (a, b) → (rank, new id) */
    uint64_t *key; int32_t *rank, *nid; size_t cap;
} mergemap;

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static int mergemap_init(mergemap *m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2 + 16) cap *= 2;
    m->key = malloc(cap * sizeof *m->key);
    m->rank = malloc(cap * sizeof *m->rank);
    m->nid = malloc(cap * sizeof *m->nid);
    m->cap = cap;
    if (!m->key || !m->rank || !m->nid) return -1;
    for (size_t i = 0; i < cap; i++) m->key[i] = UINT64_MAX;
    return 0;
}

static void mergemap_free(mergemap *m) { free(m->key); free(m->rank); free(m->nid); }

static void mergemap_put(mergemap *m, int32_t a, int32_t b, int32_t rank, int32_t nid) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = mix64(k) & (m->cap - 1);
    while (m->key[i] != UINT64_MAX && m->key[i] != k) i = (i + 1) & (m->cap - 1);
    m->key[i] = k; m->rank[i] = rank; m->nid[i] = nid;
}

static int mergemap_get(const mergemap *m, int32_t a, int32_t b, int32_t *rank, int32_t *nid) {
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t i = mix64(k) & (m->cap - 1);
    while (m->key[i] != UINT64_MAX) {
        if (m->key[i] == k) { *rank = m->rank[i]; *nid = m->nid[i]; return 1; }
        i = (i + 1) & (m->cap - 1);
    }
    return 0;
}

/* ---------------------------------------------------------------- types */
typedef struct added_tok {
    char *content; size_t len; int32_t id;
    int special, lstrip, rstrip, single_word, normalized;
} added_tok;

enum { PT_SPLIT, PT_BYTELEVEL };
enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS };
typedef struct pretok {
    int type;
    m3_regex *re;      /* Split regex, or ByteLevel's GPT-2 regex when use_regex */
    char *literal;     /* Split {"String": ...} */
    size_t literal_len;
    int behavior, invert, add_prefix_space, use_regex;
} pretok;

struct m3_tokenizer {
    char *path;
    size_t nids;
    char **tok_str; uint32_t *tok_len;  /* model vocab string per id (NULL for holes) */
    uint8_t *dec_pool; size_t *dec_off; /* decoded bytes per id: [dec_off[i], dec_off[i+1]) */
    uint8_t *is_special;
    strmap vocab;
    mergemap merges;
    added_tok *added; size_t nadded;
    pretok pre[MAX_PRETOK]; int npre;
    int byte_level;            /* a ByteLevel pre-tokenizer maps bytes to chars */
    int byte_fallback, ignore_merges, fuse_unk;
    int32_t unk_id;
    int32_t bos_id, eos_id;
    int has_chat_template;
    uint32_t byte2cp[256];
    int16_t cp2byte[512];
};

/* ---------------------------------------------------------------- helpers */
static void byte_level_tables(m3_tokenizer *t) {
    int n = 0;
    for (int i = 0; i < 512; i++) t->cp2byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        t->byte2cp[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        t->cp2byte[t->byte2cp[b]] = (int16_t)b;
    }
}

/* Read a whole file; NULL when it cannot be read (*over = 1: it is larger
 * than M3_TOK_MAX_FILE; 2: it exists but is not a regular file, e.g. a FIFO,
 * which is refused without blocking). */
static char *read_file(const char *path, size_t *n, int *over) {
    *over = 0;
    m3_err oe = {{0}};
    FILE *f = m3_fopen_regular(path, &oe);
    if (!f) {
        struct stat st;
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) *over = 2;
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            if (cap >= M3_TOK_MAX_FILE) { free(buf); fclose(f); *over = 1; return NULL; } /* over the cap */
            size_t nc = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, nc);
            if (!nb) { free(buf); fclose(f); return NULL; }
            buf = nb; cap = nc;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) { free(buf); return NULL; }
    buf[len] = 0;
    *n = len;
    return buf;
}

static int json_bool(const cJSON *o, const char *name, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    return dflt;
}

static int is_null_or_absent(const cJSON *v) { return !v || cJSON_IsNull(v); }

/* ---------------------------------------------------------------- loading */
static int load_model(m3_tokenizer *t, const cJSON *model, m3_err *e) {
    const char *P = t->path;
    if (!cJSON_IsObject(model)) return m3_fail(e, "%s: field \"model\" is missing or not an object", P);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (type && !cJSON_IsString(type)) return m3_fail(e, "%s: model.type is not a string", P);
    if (type && strcmp(type->valuestring, "BPE") != 0)
        return m3_fail(e, "%s: model.type \"%s\" is not supported (m3 reads byte-level BPE only)", P,
                       type->valuestring);
    if (!type && !merges) return m3_fail(e, "%s: model has no \"type\" and no \"merges\"; not a BPE model", P);
    if (!cJSON_IsObject(vocab)) return m3_fail(e, "%s: model.vocab is missing or not an object", P);
    if (!cJSON_IsArray(merges)) return m3_fail(e, "%s: model.merges is missing or not an array", P);
    const cJSON *v;
    v = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (!is_null_or_absent(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0.0))
        return m3_fail(e, "%s: model.dropout is set; BPE dropout is random and not supported", P);
    const char *affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        v = cJSON_GetObjectItemCaseSensitive(model, affix[i]);
        if (!is_null_or_absent(v) && !(cJSON_IsString(v) && v->valuestring[0] == 0))
            return m3_fail(e, "%s: model.%s is set; not supported for byte-level BPE", P, affix[i]);
    }
    t->byte_fallback = json_bool(model, "byte_fallback", 0);
    t->ignore_merges = json_bool(model, "ignore_merges", 0);
    t->fuse_unk = json_bool(model, "fuse_unk", 0);

    /* vocab: find the largest id first */
    size_t nv = 0;
    int64_t maxid = -1;
    for (const cJSON *it = vocab->child; it; it = it->next) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (double)M3_TOK_MAX_IDS ||
            it->valuedouble != (double)(int64_t)it->valuedouble)
            return m3_fail(e, "%s: model.vocab[\"%.60s\"] is not an integer id in [0, %d)", P, it->string,
                           M3_TOK_MAX_IDS);
        if ((int64_t)it->valuedouble > maxid) maxid = (int64_t)it->valuedouble;
        nv++;
    }
    const cJSON *added = NULL; /* ids of added tokens widen the table; handled by caller */
    (void)added;
    t->nids = (size_t)(maxid + 1);
    if (strmap_init(&t->vocab, nv)) return m3_fail(e, "%s: out of memory", P);
    t->tok_str = calloc(t->nids ? t->nids : 1, sizeof *t->tok_str);
    t->tok_len = calloc(t->nids ? t->nids : 1, sizeof *t->tok_len);
    if (!t->tok_str || !t->tok_len) return m3_fail(e, "%s: out of memory", P);
    for (const cJSON *it = vocab->child; it; it = it->next) {
        size_t id = (size_t)it->valuedouble;
        if (t->tok_str[id])
            return m3_fail(e, "%s: model.vocab: id %zu is used by both \"%.60s\" and \"%.60s\"", P, id,
                           t->tok_str[id], it->string);
        size_t l = strlen(it->string);
        t->tok_str[id] = malloc(l + 1);
        if (!t->tok_str[id]) return m3_fail(e, "%s: out of memory", P);
        memcpy(t->tok_str[id], it->string, l + 1);
        t->tok_len[id] = (uint32_t)l;
        strmap_put(&t->vocab, t->tok_str[id], l, (int32_t)id);
    }

    /* merges: "a b" strings or [a, b] pairs; rank = position */
    size_t nm = (size_t)cJSON_GetArraySize(merges);
    if (mergemap_init(&t->merges, nm)) return m3_fail(e, "%s: out of memory", P);
    char *tmp = NULL;
    size_t tmpcap = 0;
    int32_t rank = 0;
    for (const cJSON *it = merges->child; it; it = it->next, rank++) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(it)) {
            const char *s = it->valuestring, *sp = strchr(s, ' ');
            if (!sp || sp == s || sp[1] == 0) {
                free(tmp);
                return m3_fail(e, "%s: model.merges[%d] \"%.80s\" is not of the form \"a b\"", P, rank, s);
            }
            a = s; la = (size_t)(sp - s); b = sp + 1; lb = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
                   cJSON_IsString(it->child->next)) {
            a = it->child->valuestring; la = strlen(a);
            b = it->child->next->valuestring; lb = strlen(b);
        } else {
            free(tmp);
            return m3_fail(e, "%s: model.merges[%d] is neither a \"a b\" string nor a pair of strings", P, rank);
        }
        int32_t ia = strmap_get(&t->vocab, a, la), ib = strmap_get(&t->vocab, b, lb);
        if (la + lb + 1 > tmpcap) {
            tmpcap = (la + lb + 1) * 2;
            char *nt = realloc(tmp, tmpcap);
            if (!nt) { free(tmp); return m3_fail(e, "%s: out of memory", P); }
            tmp = nt;
        }
        memcpy(tmp, a, la); memcpy(tmp + la, b, lb);
        int32_t inew = strmap_get(&t->vocab, tmp, la + lb);
        if (ia < 0 || ib < 0 || inew < 0) {
            const char *which = ia < 0 ? "first part" : ib < 0 ? "second part" : "merged token";
            int n1 = (int)(ia < 0 ? la : ib < 0 ? lb : la + lb);
            const char *s1 = ia < 0 ? a : ib < 0 ? b : tmp;
            m3_fail(e, "%s: model.merges[%d]: %s \"%.*s\" is not in model.vocab", P, rank, which,
                    n1 > 80 ? 80 : n1, s1);
            free(tmp);
            return -1;
        }
        mergemap_put(&t->merges, ia, ib, rank, inew);
    }
    free(tmp);

    t->unk_id = -1;
    v = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    if (!is_null_or_absent(v)) {
        if (!cJSON_IsString(v)) return m3_fail(e, "%s: model.unk_token is not a string", P);
        t->unk_id = strmap_get(&t->vocab, v->valuestring, strlen(v->valuestring));
        if (t->unk_id < 0)
            return m3_fail(e, "%s: model.unk_token \"%.60s\" is not in model.vocab", P, v->valuestring);
    }
    return 0;
}

static int load_added(m3_tokenizer *t, const cJSON *arr, m3_err *e) {
    const char *P = t->path;
    if (is_null_or_absent(arr)) return 0;
    if (!cJSON_IsArray(arr)) return m3_fail(e, "%s: added_tokens is not an array", P);
    size_t n = (size_t)cJSON_GetArraySize(arr);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return m3_fail(e, "%s: out of memory", P);
    int i = 0;
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (double)M3_TOK_MAX_IDS ||
            id->valuedouble != (double)(int64_t)id->valuedouble)
            return m3_fail(e, "%s: added_tokens[%d].id is missing or not an integer in [0, %d)", P, i,
                           M3_TOK_MAX_IDS);
        if (!cJSON_IsString(c) || c->valuestring[0] == 0)
            return m3_fail(e, "%s: added_tokens[%d].content is missing, empty or not a string", P, i);
        added_tok *a = &t->added[t->nadded];
        a->len = strlen(c->valuestring);
        a->content = malloc(a->len + 1);
        if (!a->content) return m3_fail(e, "%s: out of memory", P);
        memcpy(a->content, c->valuestring, a->len + 1);
        t->nadded++;
        a->id = (int32_t)id->valuedouble;
        a->special = json_bool(it, "special", 0);
        a->lstrip = json_bool(it, "lstrip", 0);
        a->rstrip = json_bool(it, "rstrip", 0);
        a->single_word = json_bool(it, "single_word", 0);
        a->normalized = json_bool(it, "normalized", !a->special);
    }
    return 0;
}

static int load_pretok(m3_tokenizer *t, const cJSON *pt, const char *where, int depth, m3_err *e) {
    const char *P = t->path;
    if (is_null_or_absent(pt)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pt, "type");
    if (!cJSON_IsString(type)) return m3_fail(e, "%s: %s.type is missing or not a string", P, where);
    const char *ty = type->valuestring;
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list)) return m3_fail(e, "%s: %s.pretokenizers is not an array", P, where);
        if (depth > 4) return m3_fail(e, "%s: %s: pre-tokenizer sequences nested too deeply", P, where);
        int i = 0;
        for (const cJSON *it = list->child; it; it = it->next, i++) {
            char w[128];
            snprintf(w, sizeof w, "%s.pretokenizers[%d]", where, i);
            if (load_pretok(t, it, w, depth + 1, e)) return -1;
        }
        return 0;
    }
    if (t->npre >= MAX_PRETOK) return m3_fail(e, "%s: %s: more than %d pre-tokenizers", P, where, MAX_PRETOK);
    if (t->byte_level)
        return m3_fail(e, "%s: %s: a pre-tokenizer after ByteLevel is not supported", P, where);
    pretok *p = &t->pre[t->npre];
    memset(p, 0, sizeof *p);
    if (strcmp(ty, "Split") == 0) {
        p->type = PT_SPLIT;
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
        if (cJSON_IsString(re)) {
            m3_err sub = {{0}};
            if (m3_regex_compile(&p->re, re->valuestring, &sub)) {
                t->npre++;
                return m3_fail(e, "%s: %s.pattern.Regex: %s", P, where, sub.msg);
            }
        } else if (cJSON_IsString(str)) {
            p->literal_len = strlen(str->valuestring);
            p->literal = malloc(p->literal_len + 1);
            if (!p->literal) return m3_fail(e, "%s: out of memory", P);
            memcpy(p->literal, str->valuestring, p->literal_len + 1);
        } else {
            return m3_fail(e, "%s: %s.pattern must be {\"Regex\": ...} or {\"String\": ...}", P, where);
        }
        t->npre++;
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
        if (!cJSON_IsString(b)) return m3_fail(e, "%s: %s.behavior is missing or not a string", P, where);
        const char *bs = b->valuestring;
        if (!strcmp(bs, "Removed")) p->behavior = B_REMOVED;
        else if (!strcmp(bs, "Isolated")) p->behavior = B_ISOLATED;
        else if (!strcmp(bs, "MergedWithPrevious")) p->behavior = B_MERGED_PREV;
        else if (!strcmp(bs, "MergedWithNext")) p->behavior = B_MERGED_NEXT;
        else if (!strcmp(bs, "Contiguous")) p->behavior = B_CONTIGUOUS;
        else return m3_fail(e, "%s: %s.behavior \"%.40s\" is unknown", P, where, bs);
        p->invert = json_bool(pt, "invert", 0);
        return 0;
    }
    if (strcmp(ty, "ByteLevel") == 0) {
        p->type = PT_BYTELEVEL;
        p->add_prefix_space = json_bool(pt, "add_prefix_space", 1);
        p->use_regex = json_bool(pt, "use_regex", 1);
        if (p->use_regex) {
            m3_err sub = {{0}};
            if (m3_regex_compile(&p->re, GPT2_PATTERN, &sub))
                return m3_fail(e, "%s: %s: internal GPT-2 pattern: %s", P, where, sub.msg);
        }
        t->npre++;
        t->byte_level = 1;
        return 0;
    }
    return m3_fail(e, "%s: %s.type \"%.40s\" is not supported (m3 supports Sequence, Split, ByteLevel)",
                   P, where, ty);
}

static int check_normalizer(m3_tokenizer *t, const cJSON *n, const char *where, m3_err *e) {
    if (is_null_or_absent(n)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(n, "type");
    if (!cJSON_IsString(type)) return m3_fail(e, "%s: %s.type is missing or not a string", t->path, where);
    if (strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (!cJSON_IsArray(list)) return m3_fail(e, "%s: %s.normalizers is not an array", t->path, where);
        int i = 0;
        for (const cJSON *it = list->child; it; it = it->next, i++) {
            char w[128];
            snprintf(w, sizeof w, "%s.normalizers[%d]", where, i);
            if (check_normalizer(t, it, w, e)) return -1;
        }
        return 0;
    }
    return m3_fail(e, "%s: %s: normalizer \"%.40s\" is not supported (m3 implements no normalizer; "
                   "NFC and the others are rejected rather than approximated)",
                   t->path, where, type->valuestring);
}

static int check_decoder(m3_tokenizer *t, const cJSON *d, m3_err *e) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(d, "type");
    if (!cJSON_IsString(type)) return m3_fail(e, "%s: field \"decoder\" is missing or has no type", t->path);
    if (strcmp(type->valuestring, "ByteLevel") == 0) return 0;
    if (strcmp(type->valuestring, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1) return check_decoder(t, list->child, e);
    }
    return m3_fail(e, "%s: decoder \"%.40s\" is not supported (m3 supports the ByteLevel decoder)",
                   t->path, type->valuestring);
}

static const char *token_content(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static int load_config(m3_tokenizer *t, const char *path, m3_err *e) {
    size_t n;
    int over;
    char *buf = read_file(path, &n, &over);
    if (!buf && over == 2)
        return m3_fail(e, "%s: not a regular file", path);
    if (!buf && over)
        return m3_fail(e, "%s: file larger than the %zu MiB cap (M3_TOK_MAX_FILE)", path,
                       M3_TOK_MAX_FILE >> 20);
    if (!buf) return 0; /* optional */
    cJSON *j = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!j) return m3_fail(e, "%s: malformed JSON", path);
    if (!cJSON_IsObject(j)) { cJSON_Delete(j); return m3_fail(e, "%s: top level is not an object", path); }
    const char *names[2] = {"bos_token", "eos_token"};
    int32_t *dst[2] = {&t->bos_id, &t->eos_id};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, names[i]);
        if (is_null_or_absent(v)) continue;
        const char *c = token_content(v);
        if (!c) { cJSON_Delete(j); return m3_fail(e, "%s: %s is neither a string nor {\"content\": ...}", path, names[i]); }
        *dst[i] = m3_tokenizer_token_id(t, c);
        if (*dst[i] < 0) {
            m3_fail(e, "%s: %s \"%.60s\" is not a token of the tokenizer", path, names[i], c);
            cJSON_Delete(j);
            return -1;
        }
    }
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    t->has_chat_template = cJSON_IsString(ct) || (cJSON_IsArray(ct) && cJSON_GetArraySize(ct) > 0);
    cJSON_Delete(j);
    return 0;
}

static int build_decode_table(m3_tokenizer *t, m3_err *e) {
    size_t total = 0;
    for (size_t i = 0; i < t->nids; i++) total += t->tok_len[i];
    for (size_t k = 0; k < t->nadded; k++) total += t->added[k].len;
    t->dec_pool = malloc(total + 1);
    t->dec_off = malloc((t->nids + 1) * sizeof *t->dec_off);
    if (!t->dec_pool || !t->dec_off) return m3_fail(e, "%s: out of memory", t->path);
    /* added tokens override the model vocab for decoding (HF looks them up first) */
    const char **str = calloc(t->nids ? t->nids : 1, sizeof *str);
    size_t *len = calloc(t->nids ? t->nids : 1, sizeof *len);
    if (!str || !len) { free(str); free(len); return m3_fail(e, "%s: out of memory", t->path); }
    for (size_t i = 0; i < t->nids; i++) { str[i] = t->tok_str[i]; len[i] = t->tok_len[i]; }
    for (size_t k = 0; k < t->nadded; k++) { str[t->added[k].id] = t->added[k].content; len[t->added[k].id] = t->added[k].len; }
    size_t o = 0;
    for (size_t i = 0; i < t->nids; i++) {
        t->dec_off[i] = o;
        if (!str[i]) continue;
        const uint8_t *s = (const uint8_t *)str[i];
        size_t n = len[i], j = 0, start = o;
        int all = 1;
        while (j < n) {
            uint32_t cp;
            int l = m3_utf8_decode(s + j, n - j, &cp);
            if (l <= 0 || cp >= 512 || t->cp2byte[cp] < 0) { all = 0; break; }
            t->dec_pool[o++] = (uint8_t)t->cp2byte[cp];
            j += (size_t)l;
        }
        if (!all) { o = start; memcpy(t->dec_pool + o, s, n); o += n; }
    }
    t->dec_off[t->nids] = o;
    free(str); free(len);
    return 0;
}

void m3_tokenizer_free(m3_tokenizer *t) {
    if (!t) return;
    if (t->tok_str) for (size_t i = 0; i < t->nids; i++) free(t->tok_str[i]);
    free(t->tok_str); free(t->tok_len);
    free(t->dec_pool); free(t->dec_off); free(t->is_special);
    strmap_free(&t->vocab);
    mergemap_free(&t->merges);
    for (size_t k = 0; k < t->nadded; k++) free(t->added[k].content);
    free(t->added);
    for (int i = 0; i < t->npre; i++) { m3_regex_free(t->pre[i].re); free(t->pre[i].literal); }
    free(t->path);
    free(t);
}

static int load_json(m3_tokenizer *t, const char *buf, size_t n, m3_err *e);

int m3_tokenizer_open(m3_tokenizer **out, const char *path, m3_err *e) {
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0) return m3_fail(e, "%s: no such file or directory", path);
    size_t pl = strlen(path);
    char *json_path = malloc(pl + 32), *cfg_path = malloc(pl + 32);
    if (!json_path || !cfg_path) { free(json_path); free(cfg_path); return m3_fail(e, "out of memory"); }
    if (S_ISDIR(st.st_mode)) {
        snprintf(json_path, pl + 32, "%s/tokenizer.json", path);
        snprintf(cfg_path, pl + 32, "%s/tokenizer_config.json", path);
    } else {
        memcpy(json_path, path, pl + 1);
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
        memcpy(cfg_path, path, dl);
        memcpy(cfg_path + dl, "tokenizer_config.json", 22);
    }
    m3_tokenizer *t = calloc(1, sizeof *t);
    if (!t) { free(json_path); free(cfg_path); return m3_fail(e, "out of memory"); }
    t->path = json_path;
    size_t n;
    int over;
    char *buf = read_file(json_path, &n, &over);
    if (!buf && over == 2) {
        m3_fail(e, "%s: not a regular file", json_path);
        goto fail;
    }
    if (!buf && over) {
        m3_fail(e, "%s: file larger than the %zu MiB cap (M3_TOK_MAX_FILE)", json_path,
                M3_TOK_MAX_FILE >> 20);
        goto fail;
    }
    if (!buf) { m3_fail(e, "%s: cannot read file", json_path); goto fail; }
    int rc = load_json(t, buf, n, e);
    free(buf);
    if (rc) goto fail;
    if (load_config(t, cfg_path, e)) goto fail;
    free(cfg_path);
    *out = t;
    return 0;
fail:
    free(cfg_path);
    m3_tokenizer_free(t);
    return -1;
}

int m3_tokenizer_open_mem(m3_tokenizer **out, const char *json, size_t len, const char *name,
                          m3_err *e) {
    *out = NULL;
    if (len > M3_TOK_MAX_FILE)
        return m3_fail(e, "%s: larger than the %zu MiB cap (M3_TOK_MAX_FILE)", name,
                       M3_TOK_MAX_FILE >> 20);
    m3_tokenizer *t = calloc(1, sizeof *t);
    size_t nl = strlen(name) + 1;
    if (t) t->path = malloc(nl);
    if (!t || !t->path) { m3_tokenizer_free(t); return m3_fail(e, "%s: out of memory", name); }
    memcpy(t->path, name, nl);
    if (load_json(t, json, len, e)) { m3_tokenizer_free(t); return -1; }
    *out = t;
    return 0;
}

/* Parse and validate tokenizer.json text buf[0..n) into t (t->path names it):
 * the one validation path of m3_tokenizer_open and m3_tokenizer_open_mem. */
static int load_json(m3_tokenizer *t, const char *buf, size_t n, m3_err *e) {
    const char *json_path = t->path;
    t->bos_id = t->eos_id = -1;
    byte_level_tables(t);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, n, &end, 0);
    if (!j) {
        size_t at = (end && end >= buf && end <= buf + n) ? (size_t)(end - buf) : n;
        return m3_fail(e, "%s: malformed JSON (parse error near byte %zu)", json_path, at);
    }
    int rc = -1;
    if (!cJSON_IsObject(j)) { m3_fail(e, "%s: top level is not an object", json_path); goto done; }
    if (load_model(t, cJSON_GetObjectItemCaseSensitive(j, "model"), e)) goto done;
    if (load_added(t, cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), e)) goto done;
    if (check_normalizer(t, cJSON_GetObjectItemCaseSensitive(j, "normalizer"), "normalizer", e)) goto done;
    if (load_pretok(t, cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), "pre_tokenizer", 0, e)) goto done;
    if (check_decoder(t, cJSON_GetObjectItemCaseSensitive(j, "decoder"), e)) goto done;
    /* widen the id table to cover added tokens */
    size_t need = t->nids;
    for (size_t k = 0; k < t->nadded; k++)
        if ((size_t)t->added[k].id + 1 > need) need = (size_t)t->added[k].id + 1;
    if (need > t->nids) {
        char **ns = realloc(t->tok_str, need * sizeof *ns);
        if (ns) t->tok_str = ns;
        uint32_t *nl = realloc(t->tok_len, need * sizeof *nl);
        if (nl) t->tok_len = nl;
        if (!ns || !nl) { m3_fail(e, "%s: out of memory", json_path); goto done; }
        memset(t->tok_str + t->nids, 0, (need - t->nids) * sizeof *ns);
        memset(t->tok_len + t->nids, 0, (need - t->nids) * sizeof *nl);
        t->nids = need;
    }
    t->is_special = calloc(t->nids ? t->nids : 1, 1);
    if (!t->is_special) { m3_fail(e, "%s: out of memory", json_path); goto done; }
    for (size_t k = 0; k < t->nadded; k++) t->is_special[t->added[k].id] = (uint8_t)t->added[k].special;
    if (build_decode_table(t, e)) goto done;
    rc = 0;
done:
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- queries */
size_t m3_tokenizer_vocab_size(const m3_tokenizer *t) { return t->nids; }
int32_t m3_tokenizer_bos_id(const m3_tokenizer *t) { return t->bos_id; }
int32_t m3_tokenizer_eos_id(const m3_tokenizer *t) { return t->eos_id; }
int m3_tokenizer_has_chat_template(const m3_tokenizer *t) { return t->has_chat_template; }

int m3_tokenizer_is_special(const m3_tokenizer *t, int32_t id) {
    return id >= 0 && (size_t)id < t->nids && t->is_special[id];
}

int32_t m3_tokenizer_token_id(const m3_tokenizer *t, const char *content) {
    size_t n = strlen(content);
    for (size_t k = 0; k < t->nadded; k++)
        if (t->added[k].len == n && memcmp(t->added[k].content, content, n) == 0) return t->added[k].id;
    return strmap_get(&t->vocab, content, n);
}

/* ---------------------------------------------------------------- encode */
typedef struct span { const uint8_t *p; size_t n; int32_t id; } span; /* id >= 0: added token */
typedef struct spanvec { span *v; size_t n, cap; } spanvec;
typedef struct idvec { int32_t *v; size_t n, cap; } idvec;

typedef struct enc {
    const m3_tokenizer *t;
    m3_regex_scratch *rs;
    uint8_t **blocks; size_t nblocks, capblocks; /* owned buffers made during encode */
    /* BPE work arrays */
    int32_t *sym, *prv, *nxt; size_t capsym;
    struct hent { int32_t rank, pos, nid; } *heap; size_t nheap, capheap;
    uint8_t *word; size_t capword;
    m3_err *e;
} enc;

static int spanvec_push(spanvec *v, const uint8_t *p, size_t n, int32_t id) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 64;
        span *ns = realloc(v->v, nc * sizeof *ns);
        if (!ns) return -1;
        v->v = ns; v->cap = nc;
    }
    v->v[v->n].p = p; v->v[v->n].n = n; v->v[v->n].id = id; v->n++;
    return 0;
}

static int idvec_push(idvec *v, int32_t id) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 256;
        int32_t *ni = realloc(v->v, nc * sizeof *ni);
        if (!ni) return -1;
        v->v = ni; v->cap = nc;
    }
    v->v[v->n++] = id;
    return 0;
}

static uint8_t *enc_alloc(enc *c, size_t n) {
    if (c->nblocks == c->capblocks) {
        size_t nc = c->capblocks ? c->capblocks * 2 : 16;
        uint8_t **nb = realloc(c->blocks, nc * sizeof *nb);
        if (!nb) return NULL;
        c->blocks = nb; c->capblocks = nc;
    }
    uint8_t *b = malloc(n ? n : 1);
    if (b) c->blocks[c->nblocks++] = b;
    return b;
}

static int last_char_is_word(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    size_t i = n - 1;
    while (i > 0 && (s[i] & 0xC0) == 0x80) i--;
    uint32_t cp;
    if (m3_utf8_decode(s + i, n - i, &cp) <= 0) return 0;
    return (M3_GCM(m3_uc_category(cp)) & (M3_GCM_L | M3_GCM_N)) != 0;
}

static int first_char_is_word(const uint8_t *s, size_t n) {
    uint32_t cp;
    if (n == 0 || m3_utf8_decode(s, n, &cp) <= 0) return 0;
    return (M3_GCM(m3_uc_category(cp)) & (M3_GCM_L | M3_GCM_N)) != 0;
}

/* Split span s on added tokens with normalized == want_norm (HF AddedVocabulary
 * find_matches: leftmost-longest, then single_word / lstrip / rstrip). */
static int split_added(enc *c, const span *s, int want_norm, int allow_special, spanvec *out) {
    const m3_tokenizer *t = c->t;
    const uint8_t *x = s->p;
    size_t n = s->n, pos = 0, start_offset = 0;
    while (pos < n) {
        /* leftmost-longest match at or after pos */
        size_t best_len = 0, at = pos;
        const added_tok *best = NULL;
        for (; at < n; at++) {
            for (size_t k = 0; k < t->nadded; k++) {
                const added_tok *a = &t->added[k];
                if (a->normalized != want_norm || a->content[0] != (char)x[at] || a->len > n - at) continue;
                if (a->len > best_len && memcmp(a->content, x + at, a->len) == 0) { best = a; best_len = a->len; }
            }
            if (best) break;
        }
        if (!best) break;
        size_t start = at, stop = at + best_len;
        pos = stop;
        if (!allow_special && best->special) continue;
        if (best->single_word) {
            int start_space = start == 0 || !last_char_is_word(x, start);
            int stop_space = stop == n || !first_char_is_word(x + stop, n - stop);
            if (!start_space || !stop_space) continue;
        }
        if (best->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t i = ns - 1;
                while (i > 0 && (x[i] & 0xC0) == 0x80) i--;
                uint32_t cp;
                if (m3_utf8_decode(x + i, ns - i, &cp) <= 0 || !m3_uc_is_space(cp)) break;
                ns = i;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (best->rstrip) {
            while (stop < n) {
                uint32_t cp;
                int l = m3_utf8_decode(x + stop, n - stop, &cp);
                if (l <= 0 || !m3_uc_is_space(cp)) break;
                stop += (size_t)l;
            }
        }
        if (start_offset < start && spanvec_push(out, x + start_offset, start - start_offset, -1)) return -1;
        if (spanvec_push(out, x + start, stop - start, best->id)) return -1;
        start_offset = stop;
        if (pos < stop) pos = stop;
    }
    if (start_offset < n && spanvec_push(out, x + start_offset, n - start_offset, -1)) return -1;
    return 0;
}

/* Matches of one Split pattern over s as (start, end, is_match) covering s. */
typedef struct seg { size_t a, b; int m; } seg;

static int find_segments(enc *c, const pretok *p, const span *s, seg **segs, size_t *nseg) {
    size_t cap = 16, k = 0, prev = 0, pos = 0;
    seg *v = malloc(cap * sizeof *v);
    if (!v) return m3_fail(c->e, "tokenizer: out of memory");
#define PUSHSEG(A, B, M) do { if (k + 1 > cap) { cap *= 2; seg *nv_ = realloc(v, cap * sizeof *v); \
        if (!nv_) { free(v); return m3_fail(c->e, "tokenizer: out of memory"); } v = nv_; } \
        v[k].a = (A); v[k].b = (B); v[k].m = (M); k++; } while (0)
    if (s->n == 0) { PUSHSEG(0, 0, 0); *segs = v; *nseg = k; return 0; }
    while (pos <= s->n) {
        size_t ms, me;
        if (p->re) {
            int r = m3_regex_search(p->re, c->rs, s->p, s->n, pos, &ms, &me, c->e);
            if (r < 0) { free(v); return m3_fail_prefix(c->e, "%s: pre_tokenizer", c->t->path); }
            if (r == 0) break;
        } else {
            if (p->literal_len == 0) break;
            ms = SIZE_MAX;
            for (size_t i = pos; i + p->literal_len <= s->n; i++)
                if (memcmp(s->p + i, p->literal, p->literal_len) == 0) { ms = i; break; }
            if (ms == SIZE_MAX) break;
            me = ms + p->literal_len;
        }
        if (prev != ms) PUSHSEG(prev, ms, 0);
        PUSHSEG(ms, me, 1);
        prev = me;
        if (me > ms) pos = me;
        else {
            if (ms >= s->n) break;
            uint32_t cp;
            int l = m3_utf8_decode(s->p + ms, s->n - ms, &cp);
            pos = ms + (size_t)(l > 0 ? l : 1);
        }
    }
    if (prev != s->n) PUSHSEG(prev, s->n, 0);
#undef PUSHSEG
    if (p->invert) for (size_t i = 0; i < k; i++) v[i].m = !v[i].m;
    *segs = v; *nseg = k;
    return 0;
}

static int apply_split(enc *c, const pretok *p, const span *s, spanvec *out) {
    seg *v = NULL;
    size_t k = 0;
    if (find_segments(c, p, s, &v, &k)) return -1;
    /* HF SplitDelimiterBehavior: merge into (a, b, remove) pieces */
    size_t m = 0;
    int prev_match = 0;
    if (p->behavior == B_MERGED_NEXT) {
        /* walk backwards, as HF does, then reverse */
        seg *w = malloc((k ? k : 1) * sizeof *w);
        if (!w) { free(v); return m3_fail(c->e, "tokenizer: out of memory"); }
        for (size_t i = k; i-- > 0;) {
            if (v[i].m && !prev_match && m > 0) w[m - 1].a = v[i].a;
            else { w[m] = v[i]; w[m].m = 0; m++; }
            prev_match = v[i].m;
        }
        for (size_t i = 0; i < m / 2; i++) { seg tmp = w[i]; w[i] = w[m - 1 - i]; w[m - 1 - i] = tmp; }
        free(v); v = w;
    } else {
        for (size_t i = 0; i < k; i++) {
            seg g = v[i];
            int orig = g.m;
            switch (p->behavior) {
            case B_ISOLATED: g.m = 0; v[m++] = g; break;
            case B_REMOVED: v[m++] = g; break; /* .m == 1 means remove */
            case B_CONTIGUOUS:
                if (orig == prev_match && m > 0) v[m - 1].b = g.b;
                else { g.m = 0; v[m++] = g; }
                break;
            case B_MERGED_PREV:
                if (orig && !prev_match && m > 0) v[m - 1].b = g.b;
                else { g.m = 0; v[m++] = g; }
                break;
            }
            prev_match = orig;
        }
    }
    for (size_t i = 0; i < m; i++) {
        if (v[i].m) continue; /* removed */
        if (v[i].b > v[i].a && spanvec_push(out, s->p + v[i].a, v[i].b - v[i].a, -1)) {
            free(v);
            return m3_fail(c->e, "tokenizer: out of memory");
        }
    }
    free(v);
    return 0;
}

static int heap_push(enc *c, int32_t rank, int32_t pos, int32_t nid) {
    if (c->nheap == c->capheap) {
        size_t nc = c->capheap ? c->capheap * 2 : 64;
        struct hent *nh = realloc(c->heap, nc * sizeof *nh);
        if (!nh) return -1;
        c->heap = nh; c->capheap = nc;
    }
    size_t i = c->nheap++;
    struct hent h = {rank, pos, nid};
    while (i > 0) {
        size_t par = (i - 1) / 2;
        struct hent q = c->heap[par];
        if (q.rank < h.rank || (q.rank == h.rank && q.pos <= h.pos)) break;
        c->heap[i] = q; i = par;
    }
    c->heap[i] = h;
    return 0;
}

static struct hent heap_pop(enc *c) {
    struct hent top = c->heap[0], last = c->heap[--c->nheap];
    size_t i = 0, n = c->nheap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        struct hent best = last;
        if (l < n && (c->heap[l].rank < best.rank || (c->heap[l].rank == best.rank && c->heap[l].pos < best.pos))) { m = l; best = c->heap[l]; }
        if (r < n && (c->heap[r].rank < best.rank || (c->heap[r].rank == best.rank && c->heap[r].pos < best.pos))) { m = r; best = c->heap[r]; }
        if (m == i) break;
        c->heap[i] = c->heap[m]; i = m;
    }
    if (n > 0) c->heap[i] = last;
    return top;
}

/* BPE of one pre-token (raw bytes); appends ids. */
static int bpe_word(enc *c, const uint8_t *s, size_t n, idvec *out) {
    const m3_tokenizer *t = c->t;
    if (n == 0) return 0;
    /* 1. byte-level mapping into c->word */
    const uint8_t *w = s;
    size_t wn = n;
    if (t->byte_level) {
        if (n * 2 > c->capword) {
            uint8_t *nw = realloc(c->word, n * 2);
            if (!nw) return m3_fail(c->e, "tokenizer: out of memory");
            c->word = nw; c->capword = n * 2;
        }
        wn = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t cp = t->byte2cp[s[i]];
            if (cp < 0x80) c->word[wn++] = (uint8_t)cp;
            else { c->word[wn++] = (uint8_t)(0xC0 | (cp >> 6)); c->word[wn++] = (uint8_t)(0x80 | (cp & 0x3F)); }
        }
        w = c->word;
    }
    if (t->ignore_merges) {
        int32_t id = strmap_get(&t->vocab, (const char *)w, wn);
        if (id >= 0) return idvec_push(out, id) ? m3_fail(c->e, "tokenizer: out of memory") : 0;
    }
    /* 2. symbols = characters */
    if (wn > c->capsym) {
        size_t nc = wn;
        int32_t *a = realloc(c->sym, nc * sizeof *a); if (a) c->sym = a;
        int32_t *b = realloc(c->prv, nc * sizeof *b); if (b) c->prv = b;
        int32_t *d = realloc(c->nxt, nc * sizeof *d); if (d) c->nxt = d;
        if (!a || !b || !d) return m3_fail(c->e, "tokenizer: out of memory");
        c->capsym = nc;
    }
    size_t ns = 0;
    int last_unk = 0;
    for (size_t i = 0; i < wn;) {
        uint32_t cp;
        int l = m3_utf8_decode(w + i, wn - i, &cp);
        if (l <= 0) l = 1;
        int32_t id = strmap_get(&t->vocab, (const char *)w + i, (size_t)l);
        if (id >= 0) { c->sym[ns++] = id; last_unk = 0; }
        else {
            int done = 0;
            if (t->byte_fallback) {
                int32_t bid[4];
                int ok = 1;
                for (int b = 0; b < l; b++) {
                    char name[8];
                    snprintf(name, sizeof name, "<0x%02X>", w[i + (size_t)b]);
                    bid[b] = strmap_get(&t->vocab, name, 6);
                    if (bid[b] < 0) ok = 0;
                }
                if (ok) { for (int b = 0; b < l; b++) c->sym[ns++] = bid[b]; done = 1; last_unk = 0; }
            }
            if (!done && t->unk_id >= 0) {
                if (!(t->fuse_unk && last_unk)) c->sym[ns++] = t->unk_id;
                last_unk = 1;
            }
            /* no unk token: the character is dropped, as HF does */
        }
        i += (size_t)l;
    }
    for (size_t i = 0; i < ns; i++) { c->prv[i] = (int32_t)i - 1; c->nxt[i] = i + 1 < ns ? (int32_t)i + 1 : -1; }
    /* 3. merges, lowest rank first, ties to the leftmost */
    c->nheap = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        int32_t rank, nid;
        if (mergemap_get(&t->merges, c->sym[i], c->sym[i + 1], &rank, &nid) &&
            heap_push(c, rank, (int32_t)i, nid)) return m3_fail(c->e, "tokenizer: out of memory");
    }
    while (c->nheap > 0) {
        struct hent h = heap_pop(c);
        int32_t pos = h.pos;
        if (c->sym[pos] < 0) continue;          /* merged away */
        int32_t nx = c->nxt[pos];
        if (nx < 0) continue;
        int32_t rank, nid;
        if (!mergemap_get(&t->merges, c->sym[pos], c->sym[nx], &rank, &nid) || nid != h.nid) continue;
        c->sym[pos] = nid;
        c->sym[nx] = -1;
        c->nxt[pos] = c->nxt[nx];
        if (c->nxt[nx] >= 0) c->prv[c->nxt[nx]] = pos;
        if (c->prv[pos] >= 0) {
            int32_t pv = c->prv[pos];
            if (mergemap_get(&t->merges, c->sym[pv], c->sym[pos], &rank, &nid) && heap_push(c, rank, pv, nid))
                return m3_fail(c->e, "tokenizer: out of memory");
        }
        if (c->nxt[pos] >= 0) {
            if (mergemap_get(&t->merges, c->sym[pos], c->sym[c->nxt[pos]], &rank, &nid) && heap_push(c, rank, pos, nid))
                return m3_fail(c->e, "tokenizer: out of memory");
        }
    }
    for (int32_t i = ns ? 0 : -1; i >= 0; i = c->nxt[i])
        if (idvec_push(out, c->sym[i])) return m3_fail(c->e, "tokenizer: out of memory");
    return 0;
}

/* Pre-tokenize one plain span through pre-tokenizers [from..npre) and BPE the pieces. */
static int pretok_and_bpe(enc *c, const span *s, int from, idvec *out) {
    const m3_tokenizer *t = c->t;
    if (from == t->npre) return bpe_word(c, s->p, s->n, out);
    const pretok *p = &t->pre[from];
    spanvec pieces = {0};
    int rc = 0;
    if (p->type == PT_SPLIT) {
        rc = apply_split(c, p, s, &pieces);
    } else {
        span x = *s;
        if (p->add_prefix_space && !(x.n > 0 && x.p[0] == ' ')) {
            uint8_t *b = enc_alloc(c, x.n + 1);
            if (!b) return m3_fail(c->e, "tokenizer: out of memory");
            b[0] = ' ';
            memcpy(b + 1, x.p, x.n);
            x.p = b; x.n++;
        }
        if (p->use_regex) {
            pretok iso = *p;
            iso.type = PT_SPLIT; iso.behavior = B_ISOLATED; iso.invert = 0; iso.literal = NULL;
            rc = apply_split(c, &iso, &x, &pieces);
        } else if (x.n > 0) {
            rc = spanvec_push(&pieces, x.p, x.n, -1) ? m3_fail(c->e, "tokenizer: out of memory") : 0;
        }
    }
    for (size_t i = 0; rc == 0 && i < pieces.n; i++) rc = pretok_and_bpe(c, &pieces.v[i], from + 1, out);
    free(pieces.v);
    return rc;
}

int m3_tokenizer_encode(const m3_tokenizer *t, const char *text, size_t len, int allow_special,
                        int32_t **ids, size_t *n, m3_err *e) {
    *ids = NULL; *n = 0;
    size_t clean_n;
    uint8_t *clean = m3_utf8_sanitize((const uint8_t *)text, len, &clean_n);
    if (!clean) return m3_fail(e, "tokenizer: out of memory (input of %zu bytes)", len);
    enc c = {0};
    c.t = t; c.e = e;
    c.rs = m3_regex_scratch_new();
    spanvec a = {0}, b = {0};
    idvec out = {0};
    int rc = -1;
    if (!c.rs) { m3_fail(e, "tokenizer: out of memory"); goto end; }
    span whole = {clean, clean_n, -1};
    /* pass 1: non-normalized added tokens on the original text */
    if (split_added(&c, &whole, 0, allow_special, &a)) { m3_fail(e, "tokenizer: out of memory"); goto end; }
    /* pass 2: normalized added tokens on the (identity-)normalized pieces */
    for (size_t i = 0; i < a.n; i++) {
        if (a.v[i].id >= 0) { if (spanvec_push(&b, a.v[i].p, a.v[i].n, a.v[i].id)) goto oom; continue; }
        if (split_added(&c, &a.v[i], 1, allow_special, &b)) goto oom;
    }
    for (size_t i = 0; i < b.n; i++) {
        if (b.v[i].id >= 0) { if (idvec_push(&out, b.v[i].id)) goto oom; continue; }
        if (pretok_and_bpe(&c, &b.v[i], 0, &out)) goto end;
    }
    rc = 0;
    *ids = out.v; *n = out.n;
    out.v = NULL;
    goto end;
oom:
    m3_fail(e, "tokenizer: out of memory");
end:
    free(out.v); free(a.v); free(b.v);
    for (size_t i = 0; i < c.nblocks; i++) free(c.blocks[i]);
    free(c.blocks); free(c.sym); free(c.prv); free(c.nxt); free(c.heap); free(c.word);
    m3_regex_scratch_free(c.rs);
    free(clean);
    return rc;
}

/* ---------------------------------------------------------------- decode */
int m3_tokenizer_token_bytes(const m3_tokenizer *t, int32_t id, const uint8_t **bytes, size_t *len, m3_err *e) {
    if (id < 0 || (size_t)id >= t->nids)
        return m3_fail(e, "tokenizer %s: token id %d is out of range [0, %zu)", t->path, id, t->nids);
    if (!t->tok_str[id] && t->dec_off[id + 1] == t->dec_off[id]) {
        int is_added = 0;
        for (size_t k = 0; k < t->nadded; k++) if (t->added[k].id == id) is_added = 1;
        if (!is_added) return m3_fail(e, "tokenizer %s: token id %d has no token (a hole in the vocab)", t->path, id);
    }
    *bytes = t->dec_pool + t->dec_off[id];
    *len = t->dec_off[id + 1] - t->dec_off[id];
    return 0;
}

/* Append the lossy-UTF-8 repair of s[0..n) to *o (capacity *cap, length *k).
 * With hold, an incomplete final character is not emitted; returns its length. */
static int lossy_append(const uint8_t *s, size_t n, int hold, char **o, size_t *cap, size_t *k, size_t *held) {
    if (*k + 3 * n + 1 > *cap) {
        size_t nc = (*k + 3 * n + 1) * 2;
        char *no = realloc(*o, nc);
        if (!no) return -1;
        *o = no; *cap = nc;
    }
    size_t i = 0;
    *held = 0;
    while (i < n) {
        uint32_t cp;
        int l = m3_utf8_decode(s + i, n - i, &cp);
        if (l > 0) { memcpy(*o + *k, s + i, (size_t)l); *k += (size_t)l; i += (size_t)l; continue; }
        size_t bad = m3_utf8_invalid_len(s + i, n - i);
        if (hold && i + bad == n && s[i] >= 0xC2 && s[i] <= 0xF4) { *held = n - i; break; }
        memcpy(*o + *k, "\xEF\xBF\xBD", 3); *k += 3;
        i += bad;
    }
    (*o)[*k] = 0;
    return 0;
}

int m3_tokenizer_decode(const m3_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                        char **out, size_t *out_len, m3_err *e) {
    *out = NULL; *out_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *b; size_t l;
        if (m3_tokenizer_token_bytes(t, ids[i], &b, &l, e)) return -1;
        total += l;
    }
    uint8_t *raw = malloc(total + 1);
    if (!raw) return m3_fail(e, "tokenizer: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && t->is_special[ids[i]]) continue;
        const uint8_t *b; size_t l;
        m3_tokenizer_token_bytes(t, ids[i], &b, &l, NULL);
        memcpy(raw + k, b, l); k += l;
    }
    char *o = NULL;
    size_t cap = 0, len = 0, held;
    if (lossy_append(raw, k, 0, &o, &cap, &len, &held)) { free(raw); free(o); return m3_fail(e, "tokenizer: out of memory"); }
    free(raw);
    *out = o; *out_len = len;
    return 0;
}

void m3_decode_stream_init(m3_decode_stream *s, int skip_special) {
    memset(s, 0, sizeof *s);
    s->skip_special = skip_special;
}

void m3_decode_stream_free(m3_decode_stream *s) {
    free(s->buf);
    s->buf = NULL; s->cap = 0; s->npending = 0;
}

int m3_tokenizer_decode_stream(const m3_tokenizer *t, m3_decode_stream *s, int32_t id,
                               const char **text, size_t *len, m3_err *e) {
    *text = ""; *len = 0;
    const uint8_t *b; size_t l;
    if (m3_tokenizer_token_bytes(t, id, &b, &l, e)) return -1;
    if (s->skip_special && t->is_special[id]) l = 0;
    uint8_t *tmp = malloc(s->npending + l + 1);
    if (!tmp) return m3_fail(e, "tokenizer: out of memory");
    memcpy(tmp, s->pending, s->npending);
    memcpy(tmp + s->npending, b, l);
    size_t n = s->npending + l, k = 0, held;
    if (lossy_append(tmp, n, 1, &s->buf, &s->cap, &k, &held)) { free(tmp); return m3_fail(e, "tokenizer: out of memory"); }
    memcpy(s->pending, tmp + n - held, held);
    s->npending = held;
    free(tmp);
    *text = s->buf; *len = k;
    return 0;
}

int m3_decode_stream_flush(m3_decode_stream *s, const char **text, size_t *len, m3_err *e) {
    size_t k = 0, held;
    *text = ""; *len = 0;
    if (lossy_append(s->pending, s->npending, 0, &s->buf, &s->cap, &k, &held))
        return m3_fail(e, "tokenizer: out of memory");
    s->npending = 0;
    *text = s->buf; *len = k;
    return 0;
}
