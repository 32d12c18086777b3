/* case.c — case.json, the suite manifest and mutant descriptions, validated.
 *
 * Spec: M3-VEC-* (case directory layout: case.json {id, component, mode,
 * profile, params, files{name: sha256}}; manifest {suite, version, cases}).
 * Hostile input gets a message naming the file and the field; file hashes
 * are checked so a damaged or edited vector is refused, not judged.
 */
#include "conform.h"
#include "fileio.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>

/* ---- sha256 (FIPS 180-4), used to verify vector files ---------------------- */
typedef struct sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t nbuf;
} sha256;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void sha256_block(sha256 *s, const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
               p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
    uint32_t e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d;
    s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}

static void sha256_init(sha256 *s)
{
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->len = 0;
    s->nbuf = 0;
}

static void sha256_update(sha256 *s, const uint8_t *p, size_t n)
{
    s->len += n;
    while (n) {
        size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        n -= take;
        if (s->nbuf == 64) {
            sha256_block(s, s->buf);
            s->nbuf = 0;
        }
    }
}

static void sha256_final(sha256 *s, char hex[65])
{
    uint64_t bits = s->len * 8;
    uint8_t pad = 0x80, zero = 0, lenb[8];
    sha256_update(s, &pad, 1);
    while (s->nbuf != 56)
        sha256_update(s, &zero, 1);
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(s, lenb, 8);
    for (int i = 0; i < 8; i++)
        snprintf(hex + 8 * i, 9, "%08x", s->h[i]);
}

void cf_sha256_parts(const void *const *parts, const size_t *lens, int n, char hex[65])
{
    sha256 s;
    sha256_init(&s);
    for (int k = 0; k < n; k++) {
        uint8_t sep = 0;
        sha256_update(&s, parts[k], lens[k]);
        sha256_update(&s, &sep, 1); /* a separator, so that ("ab","c") and ("a","bc") differ */
    }
    sha256_final(&s, hex);
}

int cf_sha256_file(const char *path, char hex[65], m3_err *e)
{
    FILE *f = m3_fopen_regular(path, e);
    if (!f)
        return -1;
    sha256 s;
    sha256_init(&s);
    uint8_t buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        sha256_update(&s, buf, got);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return m3_fail(e, "%s: read error", path);
    sha256_final(&s, hex);
    return 0;
}

/* ---- helpers ----------------------------------------------------------------- */
static char *read_text(const char *path, size_t *len, size_t maxlen, m3_err *e)
{
    char *buf;
    return m3_read_file(path, maxlen, &buf, len, e) == 0 ? buf : NULL;
}

/* A relative path that stays inside its root: no leading '/', no ".." part. */
static int safe_relpath(const char *p)
{
    if (!p[0] || p[0] == '/')
        return 0;
    const char *s = p;
    while (*s) {
        const char *slash = strchr(s, '/');
        size_t n = slash ? (size_t)(slash - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.')
            return 0;
        s += n;
        if (*s == '/')
            s++;
    }
    return 1;
}

static int copy_str(char *dst, size_t cap, const cJSON *o, const char *key, int required,
                    const char *where, m3_err *e)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) {
        if (required)
            return m3_fail(e, "%s: missing \"%s\"", where, key);
        dst[0] = 0;
        return 0;
    }
    if (!cJSON_IsString(x))
        return m3_fail(e, "%s: \"%s\" must be a string", where, key);
    if (strlen(x->valuestring) >= cap)
        return m3_fail(e, "%s: \"%s\" is longer than %zu characters", where, key, cap - 1);
    memcpy(dst, x->valuestring, strlen(x->valuestring) + 1);
    return 0;
}

static const char *const k_components[] = {"rmsnorm", "rope", "attention", "msa_select",
                                           "msa_attention", "router", "swiglu", "mlp", "moe",
                                           "vision_decode", "vision_resize", "vision_preprocess",
                                           "vision_rope",
                                           "vision_patch_embed", "vision_layer", "vision_tower",
                                           "vision_projector", "eagle3_draft", "eagle3_verify",
                                           "model", NULL};

/* ---- case.json ------------------------------------------------------------ */
void cf_case_free(cf_case *c)
{
    cJSON_Delete(c->root);
    c->root = NULL;
    c->params = NULL;
}

int cf_case_parse(cf_case *c, const char *json, size_t len, const char *dir, m3_err *e)
{
    memset(c, 0, sizeof *c);
    c->max_new_tokens = 0;
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    char where[2200];
    snprintf(where, sizeof where, "%s/case.json", dir);
    c->root = cJSON_ParseWithLength(json, len);
    if (!c->root)
        return m3_fail(e, "%s: not valid JSON", where);
    if (!cJSON_IsObject(c->root))
        goto bad_obj;
    if (copy_str(c->id, sizeof c->id, c->root, "id", 1, where, e) ||
        copy_str(c->description, sizeof c->description, c->root, "description", 0, where, e) ||
        copy_str(c->component, sizeof c->component, c->root, "component", 1, where, e))
        goto fail;
    if (!c->id[0]) {
        m3_fail(e, "%s: \"id\" is empty", where);
        goto fail;
    }
    int known = 0;
    for (int i = 0; k_components[i]; i++)
        known |= strcmp(k_components[i], c->component) == 0;
    if (!known) {
        m3_fail(e, "%s: unknown component \"%s\" (known: rmsnorm rope attention msa_select "
                   "msa_attention router swiglu mlp moe vision_decode vision_resize vision_preprocess vision_rope "
                   "vision_patch_embed vision_layer vision_tower vision_projector eagle3_draft eagle3_verify model)", where, c->component);
        goto fail;
    }
    char mode[16];
    if (copy_str(mode, sizeof mode, c->root, "mode", 1, where, e))
        goto fail;
    if (strcmp(mode, "fp32") == 0)
        c->mode = M3_MODE_FP32;
    else if (strcmp(mode, "bf16") == 0)
        c->mode = M3_MODE_BF16;
    else {
        m3_fail(e, "%s: \"mode\" is \"%s\"; expected \"fp32\" or \"bf16\"", where, mode);
        goto fail;
    }
    /* the tolerance profile: "profile" (or "tolerance_profile"); defaults to the mode */
    if (copy_str(c->profile, sizeof c->profile, c->root, "profile", 0, where, e))
        goto fail;
    if (!c->profile[0] &&
        copy_str(c->profile, sizeof c->profile, c->root, "tolerance_profile", 0, where, e))
        goto fail;
    if (!c->profile[0])
        snprintf(c->profile, sizeof c->profile, "%s", mode);
    const cJSON *clauses = cJSON_GetObjectItemCaseSensitive(c->root, "clauses");
    if (clauses) {
        const cJSON *x;
        if (!cJSON_IsArray(clauses)) {
            m3_fail(e, "%s: \"clauses\" must be an array of strings", where);
            goto fail;
        }
        cJSON_ArrayForEach(x, clauses) if (!cJSON_IsString(x))
        {
            m3_fail(e, "%s: \"clauses\" must be an array of strings", where);
            goto fail;
        }
    }
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(c->root, "params");
    if (params && !cJSON_IsObject(params)) {
        m3_fail(e, "%s: \"params\" must be an object", where);
        goto fail;
    }
    if (!params) {
        params = cJSON_AddObjectToObject(c->root, "params");
        if (!params) {
            m3_fail(e, "%s: out of memory", where);
            goto fail;
        }
    }
    c->params = params;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(c->root, "files");
    if (files) {
        const cJSON *x;
        if (!cJSON_IsObject(files)) {
            m3_fail(e, "%s: \"files\" must be an object {name: sha256}", where);
            goto fail;
        }
        cJSON_ArrayForEach(x, files)
        {
            if (!safe_relpath(x->string) || strchr(x->string, '/')) {
                m3_fail(e, "%s: files entry \"%s\" must be a plain file name", where, x->string);
                goto fail;
            }
            int ok = cJSON_IsString(x) && strlen(x->valuestring) == 64;
            for (int i = 0; ok && i < 64; i++)
                ok = strchr("0123456789abcdef", x->valuestring[i]) != NULL;
            if (!ok) {
                m3_fail(e, "%s: files[\"%s\"] must be 64 lower-case hex digits (sha256)", where,
                        x->string);
                goto fail;
            }
        }
    }
    const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(params, "chunks");
    if (chunks) {
        const cJSON *x;
        if (!cJSON_IsArray(chunks) || cJSON_GetArraySize(chunks) > CF_MAX_CHUNKS) {
            m3_fail(e, "%s: params.chunks must be an array of at most %d positive integers", where,
                    CF_MAX_CHUNKS);
            goto fail;
        }
        cJSON_ArrayForEach(x, chunks)
        {
            if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 1e7 ||
                x->valuedouble != (double)(int)x->valuedouble) {
                m3_fail(e, "%s: params.chunks entries must be positive integers", where);
                goto fail;
            }
            c->chunks[c->nchunks++] = (int)x->valuedouble;
        }
    }
    static const char *const sel_keys[] = {"rows", "logits_rows"};
    for (int k = 0; k < 2; k++) {
        const cJSON *rsel = cJSON_GetObjectItemCaseSensitive(params, sel_keys[k]);
        if (rsel && (!cJSON_IsString(rsel) || !rsel->valuestring[0] || strlen(rsel->valuestring) > 4096)) {
            m3_fail(e, "%s: params.%s must be a row selector string such as \"*blocks~1,2048:,-16:\" "
                       "(M3-DUMP-11)", where, sel_keys[k]);
            goto fail;
        }
    }
    const cJSON *mnt = cJSON_GetObjectItemCaseSensitive(params, "max_new_tokens");
    if (mnt) {
        if (!cJSON_IsNumber(mnt) || mnt->valuedouble < 0 || mnt->valuedouble > 1e6 ||
            mnt->valuedouble != (double)(int)mnt->valuedouble) {
            m3_fail(e, "%s: params.max_new_tokens must be a non-negative integer", where);
            goto fail;
        }
        c->max_new_tokens = (int)mnt->valuedouble;
    }
    return 0;
bad_obj:
    m3_fail(e, "%s: top level must be an object", where);
fail:
    cf_case_free(c);
    return -1;
}

/* Check every files{name: sha256} entry of a parsed case/mutant JSON against
 * the files in dir. */
static int verify_files(const cJSON *root, const char *dir, const char *what, m3_err *e)
{
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    const cJSON *x;
    if (files && !cJSON_IsObject(files))
        return m3_fail(e, "%s/%s: \"files\" must be an object {name: sha256}", dir, what);
    cJSON_ArrayForEach(x, files)
    {
        char fp[2400], hex[65];
        if (!cJSON_IsString(x) || !safe_relpath(x->string) || strchr(x->string, '/'))
            return m3_fail(e, "%s/%s: files entry \"%s\" must be a plain file name with a sha256 string", dir,
                           what, x->string);
        snprintf(fp, sizeof fp, "%s/%s", dir, x->string);
        if (cf_sha256_file(fp, hex, e))
            return -1;
        if (strcmp(hex, x->valuestring) != 0)
            return m3_fail(e, "%s: sha256 is %s but %s says %s (file damaged or edited)", fp, hex, what,
                           x->valuestring);
    }
    return 0;
}

/* Every regular file of a case directory but case.json must be listed in
 * "files" (an unlisted model or input would be loaded unchecked). */
static int refuse_unlisted(const cJSON *root, const char *dir, m3_err *e)
{
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    DIR *d = opendir(dir);
    if (!d)
        return m3_fail(e, "%s: cannot list the case directory: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d))) {
        char p[2400];
        struct stat sb;
        if (de->d_name[0] == '.' || strcmp(de->d_name, "case.json") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (stat(p, &sb) != 0 || S_ISDIR(sb.st_mode))
            continue;
        if (!cJSON_GetObjectItemCaseSensitive(files, de->d_name))
            rc = m3_fail(e, "%s: not listed in case.json \"files\" (every payload file of a case is "
                            "hashed; list it with its sha256, remove it, or use --no-hash)",
                         p);
    }
    closedir(d);
    return rc;
}

/* params.T and params.chunks must agree with the input_ids of dir/inputs.safetensors. */
static int check_token_count(const cf_case *c, const char *dir, m3_err *e)
{
    char p[2400];
    snprintf(p, sizeof p, "%s/inputs.safetensors", dir);
    struct stat sb;
    if (stat(p, &sb) != 0)
        return 0;
    m3_store *st = NULL;
    if (m3_store_open(&st, p, e))
        return -1;
    const m3_tensor *t = m3_store_get(st, "input_ids");
    int rc = 0;
    if (t && t->ndim == 1) {
        const long long T = (long long)t->shape[0];
        double pt = -1;
        long sum = 0;
        for (int i = 0; i < c->nchunks; i++)
            sum += c->chunks[i];
        if (cf_case_num_or(c, "T", -1, &pt, e))
            rc = -1;
        else if (pt >= 0 && pt != (double)T)
            rc = m3_fail(e, "%s/case.json: params.T is %g but input_ids has %lld tokens", dir, pt, T);
        else if (c->nchunks > 0 && sum != T)
            rc = m3_fail(e, "%s/case.json: params.chunks sum to %ld but input_ids has %lld tokens",
                         dir, sum, T);
    }
    m3_store_close(st);
    return rc;
}

int cf_case_load(cf_case *c, const char *dir, int verify_hashes, m3_err *e)
{
    char path[2300];
    snprintf(path, sizeof path, "%s/case.json", dir);
    size_t len;
    char *txt = read_text(path, &len, 1u << 20, e);
    if (!txt)
        return -1;
    int rc = cf_case_parse(c, txt, len, dir, e);
    free(txt);
    if (rc)
        return rc;
    if (check_token_count(c, dir, e) ||
        (verify_hashes && (refuse_unlisted(c->root, dir, e) || verify_files(c->root, dir, "case.json", e)))) {
        cf_case_free(c);
        return -1;
    }
    return 0;
}

int cf_mutant_verify(const cf_mutant *mu, m3_err *e)
{
    char path[2300];
    snprintf(path, sizeof path, "%s/mutant.json", mu->dir);
    size_t len;
    char *txt = read_text(path, &len, 1u << 20, e);
    if (!txt)
        return -1;
    cJSON *root = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!root)
        return m3_fail(e, "%s: not valid JSON", path);
    int rc = verify_files(root, mu->dir, "mutant.json", e);
    cJSON_Delete(root);
    return rc;
}

int cf_case_num(const cf_case *c, const char *key, double *v, m3_err *e)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(c->params, key);
    if (!x)
        return m3_fail(e, "%s/case.json: params.%s is missing", c->dir, key);
    if (cJSON_IsNumber(x)) {
        *v = x->valuedouble;
        return 0;
    }
    if (cJSON_IsString(x)) {
        char *end;
        errno = 0;
        *v = strtod(x->valuestring, &end);
        if (end != x->valuestring && !*end && !errno)
            return 0;
    }
    return m3_fail(e, "%s/case.json: params.%s must be a number (or a hex-float string)", c->dir,
                   key);
}

int cf_case_num_or(const cf_case *c, const char *key, double dflt, double *v, m3_err *e)
{
    if (!cJSON_GetObjectItemCaseSensitive(c->params, key)) {
        *v = dflt;
        return 0;
    }
    return cf_case_num(c, key, v, e);
}

/* ---- manifest ------------------------------------------------------------- */
void cf_manifest_free(cf_manifest *m)
{
    for (int i = 0; i < m->ncases; i++)
        free(m->cases[i]);
    for (int i = 0; i < m->nmutants; i++)
        free(m->mutants[i]);
    free(m->cases);
    free(m->mutants);
    m->cases = m->mutants = NULL;
    m->ncases = m->nmutants = 0;
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Is s one of the strings of arr (may be NULL)? */
static int in_list(const cJSON *arr, const char *s)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) if (cJSON_IsString(x) && strcmp(x->valuestring, s) == 0) return 1;
    return 0;
}

/* Entries listed in `optional` (the manifest's "big" cases, generated on
 * demand) are skipped when their directory is absent; *skipped counts them. */
static int add_dirs(char ***list, int *n, const cJSON *arr, const char *root, const char *where,
                    const char *key, const cJSON *optional, int *skipped, m3_err *e)
{
    int cnt = cJSON_GetArraySize(arr);
    *list = calloc((size_t)(cnt ? cnt : 1), sizeof **list);
    if (!*list)
        return m3_fail(e, "%s: out of memory", where);
    const cJSON *x;
    cJSON_ArrayForEach(x, arr)
    {
        if (!cJSON_IsString(x))
            return m3_fail(e, "%s: \"%s\" entries must be strings", where, key);
        if (!safe_relpath(x->valuestring))
            return m3_fail(e, "%s: %s entry \"%s\" must be a relative path without \"..\"", where,
                           key, x->valuestring);
        size_t need = strlen(root) + strlen(x->valuestring) + 2;
        char *p = malloc(need);
        if (!p)
            return m3_fail(e, "%s: out of memory", where);
        snprintf(p, need, "%s/%s", root, x->valuestring);
        if (!is_dir(p) && optional && in_list(optional, x->valuestring)) {
            free(p);
            (*skipped)++;
            continue;
        }
        (*list)[(*n)++] = p;
        if (!is_dir(p))
            return m3_fail(e, "%s: %s entry \"%s\": no such directory %s", where, key,
                           x->valuestring, p);
    }
    return 0;
}

int cf_manifest_load(cf_manifest *m, const char *path, m3_err *e)
{
    memset(m, 0, sizeof *m);
    size_t len;
    char *txt = read_text(path, &len, CF_MANIFEST_MAX_BYTES, e);
    if (!txt)
        return -1;
    int rc = cf_manifest_parse(m, txt, len, path, e);
    free(txt);
    return rc;
}

int cf_manifest_parse(cf_manifest *m, const char *txt, size_t len, const char *path, m3_err *e)
{
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s", path);
    snprintf(m->root, sizeof m->root, "%s", path);
    char *slash = strrchr(m->root, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(m->root, sizeof m->root, ".");
    if (len > CF_MANIFEST_MAX_BYTES)
        return m3_fail(e, "%s: larger than %u bytes", path, (unsigned)CF_MANIFEST_MAX_BYTES);
    cJSON *root = cJSON_ParseWithLength(txt, len);
    int rc = -1;
    if (!root) {
        m3_fail(e, "%s: not valid JSON", path);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        m3_fail(e, "%s: top level must be an object", path);
        goto done;
    }
    if (copy_str(m->suite, sizeof m->suite, root, "suite", 0, path, e))
        goto done;
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (cJSON_IsString(ver))
        snprintf(m->version, sizeof m->version, "%s", ver->valuestring);
    else if (cJSON_IsNumber(ver))
        snprintf(m->version, sizeof m->version, "%g", ver->valuedouble);
    else if (ver) {
        m3_fail(e, "%s: \"version\" must be a string or number", path);
        goto done;
    }
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    if (!cJSON_IsArray(cases)) {
        m3_fail(e, "%s: \"cases\" must be an array of case directories", path);
        goto done;
    }
    const cJSON *big = cJSON_GetObjectItemCaseSensitive(root, "big");
    if (big && !cJSON_IsArray(big)) {
        m3_fail(e, "%s: \"big\" must be an array of case directories", path);
        goto done;
    }
    if (add_dirs(&m->cases, &m->ncases, cases, m->root, path, "cases", big, &m->nskipped, e))
        goto done;
    const cJSON *mut = cJSON_GetObjectItemCaseSensitive(root, "mutants");
    if (mut) {
        if (!cJSON_IsArray(mut)) {
            m3_fail(e, "%s: \"mutants\" must be an array of directories", path);
            goto done;
        }
        if (add_dirs(&m->mutants, &m->nmutants, mut, m->root, path, "mutants", NULL, &m->nskipped, e))
            goto done;
    } else {
        /* no list: every root/mutants/<dir> holding a mutant.json */
        char md[2200];
        snprintf(md, sizeof md, "%s/mutants", m->root);
        DIR *d = opendir(md);
        if (d) {
            struct dirent *de;
            int cap = 0;
            while ((de = readdir(d)) != NULL) {
                if (de->d_name[0] == '.')
                    continue;
                char mj[2600];
                snprintf(mj, sizeof mj, "%s/%s/mutant.json", md, de->d_name);
                struct stat sb;
                if (stat(mj, &sb) != 0)
                    continue;
                if (m->nmutants == cap) {
                    cap = cap ? 2 * cap : 16;
                    char **nl = realloc(m->mutants, (size_t)cap * sizeof *nl);
                    if (!nl) {
                        closedir(d);
                        m3_fail(e, "%s: out of memory", path);
                        goto done;
                    }
                    m->mutants = nl;
                }
                size_t need = strlen(md) + strlen(de->d_name) + 2;
                char *p = malloc(need);
                if (!p) {
                    closedir(d);
                    m3_fail(e, "%s: out of memory", path);
                    goto done;
                }
                snprintf(p, need, "%s/%s", md, de->d_name);
                m->mutants[m->nmutants++] = p;
            }
            closedir(d);
            if (m->nmutants > 1)
                qsort(m->mutants, (size_t)m->nmutants, sizeof *m->mutants, cmp_str);
        }
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc)
        cf_manifest_free(m);
    return rc;
}

/* ---- mutant.json ------------------------------------------------------------ */
int cf_mutant_load(cf_mutant *mu, const char *dir, const char *suite_root, m3_err *e)
{
    memset(mu, 0, sizeof *mu);
    mu->expect_layer = -1;
    snprintf(mu->dir, sizeof mu->dir, "%s", dir);
    char path[2300];
    snprintf(path, sizeof path, "%s/mutant.json", dir);
    size_t len;
    char *txt = read_text(path, &len, 1u << 20, e);
    if (!txt)
        return -1;
    cJSON *root = cJSON_ParseWithLength(txt, len);
    free(txt);
    int rc = -1;
    char tmp[1024];
    if (!root) {
        m3_fail(e, "%s: not valid JSON", path);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        m3_fail(e, "%s: top level must be an object", path);
        goto done;
    }
    if (copy_str(mu->id, sizeof mu->id, root, "id", 0, path, e) ||
        copy_str(mu->description, sizeof mu->description, root, "description", 0, path, e) ||
        copy_str(mu->profile, sizeof mu->profile, root, "profile", 0, path, e))
        goto done;
    if (!mu->id[0]) {
        const char *b = strrchr(dir, '/');
        snprintf(mu->id, sizeof mu->id, "%s", b ? b + 1 : dir);
    }
    if (copy_str(tmp, sizeof tmp, root, "case", 1, path, e))
        goto done;
    if (!safe_relpath(tmp)) {
        m3_fail(e, "%s: \"case\" must be a relative path without \"..\"", path);
        goto done;
    }
    snprintf(mu->case_dir, sizeof mu->case_dir, "%s/%s", suite_root, tmp);
    if (copy_str(tmp, sizeof tmp, root, "dump", 0, path, e))
        goto done;
    if (!tmp[0])
        snprintf(tmp, sizeof tmp, "dump.safetensors");
    if (!safe_relpath(tmp)) {
        m3_fail(e, "%s: \"dump\" must be a relative path without \"..\"", path);
        goto done;
    }
    snprintf(mu->dump, sizeof mu->dump, "%s/%s", dir, tmp);
    const cJSON *exp = cJSON_GetObjectItemCaseSensitive(root, "expect");
    if (cJSON_IsString(exp)) {
        if (strcmp(exp->valuestring, "pass") == 0)
            mu->expect_pass = 1;
        else if (strcmp(exp->valuestring, "fail") != 0) {
            m3_fail(e, "%s: \"expect\" must be \"pass\" or \"fail\"", path);
            goto done;
        }
    } else if (exp) {
        m3_fail(e, "%s: \"expect\" must be \"pass\" or \"fail\"", path);
        goto done;
    }
    const cJSON *fd = cJSON_GetObjectItemCaseSensitive(root, "first_divergence");
    if (fd && !cJSON_IsObject(fd)) {
        m3_fail(e, "%s: \"first_divergence\" must be an object {layer, tensor, component}", path);
        goto done;
    }
    if (fd) {
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(fd, "layer");
        if (l && !cJSON_IsNull(l)) {
            if (!cJSON_IsNumber(l) || l->valuedouble < -1 || l->valuedouble > M3_MAX_LAYERS) {
                m3_fail(e, "%s: first_divergence.layer must be an integer", path);
                goto done;
            }
            mu->expect_layer = (int)l->valuedouble;
        }
        if (copy_str(mu->expect_tensor, sizeof mu->expect_tensor, fd, "tensor", 0, path, e) ||
            copy_str(mu->expect_component, sizeof mu->expect_component, fd, "component", 0, path,
                     e))
            goto done;
    }
    if (!mu->expect_pass && !fd) {
        m3_fail(e, "%s: a mutant expected to fail needs \"first_divergence\"", path);
        goto done;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}
