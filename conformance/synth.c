/* synth.c — shape-faithful synthetic M3 checkpoints from a seed
 * (bin/m3-conform synth; see synth.h).
 *
 * Spec: spec/synth.md, M3-SYNTH-1..12.
 *
 * Design: the checkpoint is first planned as a list of tensor specifications
 * (name, dtype, shape, amplitude, offset) in the canonical order of
 * M3-SYNTH-3, packed greedily into shards (M3-SYNTH-8); the disk need is the
 * sum of the planned file sizes, checked with statvfs before anything is
 * written. Each file is then streamed: its header, then every tensor's
 * elements generated chunk by chunk into one fixed buffer (CHUNK elements),
 * so memory does not grow with the checkpoint. Every file goes to a
 * temporary name beside its final one and is renamed after fsync.
 * The JSON files are written in the format of Python's
 * json.dumps(indent=2, sort_keys=True) followed by a newline
 * (M3-SYNTH-9), so their bytes, and hence their sha256, are fixed.
 */
#include "synth.h"
#include "json.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "dtype.h"

#define CHUNK (1u << 20)      /* elements generated per buffer fill */
#define NAME_CAP 160
#define DISK_MARGIN (64LL << 20) /* bytes kept free beyond the plan */

/* ---- the generator (M3-SYNTH-4, M3-SYNTH-5) ---------------------------------------------- */
static const uint64_t GOLDEN = 0x9e3779b97f4a7c15ull;

/* SplitMix64's finaliser. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t cf_synth_key(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 of the name's bytes */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return mix64(seed ^ mix64(h));
}

uint64_t cf_synth_bits(uint64_t k, uint64_t i)
{
    return mix64(k + (i + 1) * GOLDEN);
}

float cf_synth_value(uint64_t k, uint64_t i, float a, float o)
{
    int32_t t = (int32_t)(cf_synth_bits(k, i) >> 40) - (1 << 23); /* [-2^23, 2^23) */
    float u = (float)t * 0x1p-23f;                                /* exact */
    float x = u * a;
    return x + o;
}

/* ---- shapes (M3-SYNTH-2) ------------------------------------------------------------------ */
typedef struct shape {
    int hidden, heads, kv_heads, head_dim, rotary, inter, dense_inter, shared_inter, experts, topk;
    int idx_heads, idx_dim, block, topk_blocks;
    int v_hidden, v_inter, v_heads, patch, temporal, merge, channels, proj_hidden;
    int grid; /* the image of inputs.safetensors: grid x grid patches */
} shape;

static const shape RELEASED = {6144, 64, 4, 128, 64, 3072, 12288, 3072, 128, 4, 4, 128, 128, 16,
                               1280, 5120, 16, 14, 2, 2, 3, 6144, 16};
static const shape TINY = {64, 4, 2, 16, 8, 32, 64, 32, 8, 2, 2, 16, 4, 3,
                           32, 64, 2, 14, 2, 2, 3, 64, 4};

/* The ids of the released vocabulary's special rows, moved with the top of a cut vocabulary. */
static int special_id(int released_id, int vocab)
{
    return released_id - (CF_SYNTH_VOCAB - vocab);
}

/* ---- the plan --------------------------------------------------------------------------- */
enum { K_FLOAT, K_IDS, K_CONST };

typedef struct tspec {
    char name[NAME_CAP];
    m3_dtype dt;
    int ndim;
    int64_t shape[5];
    int kind;              /* K_FLOAT: generated values; K_IDS: generated token ids; K_CONST: data */
    float a, o;            /* amplitude and offset (K_FLOAT) */
    int id_range;          /* K_IDS: ids in [0, id_range) */
    const int32_t *data;   /* K_CONST */
    int shard;
    uint64_t begin, end;   /* data offsets inside the shard */
} tspec;

typedef struct plan {
    tspec *t;
    int n, cap;
    int nshards;
    unsigned long long *shard_bytes; /* whole file size of each shard */
    unsigned long long total_data;   /* tensor bytes of the weights */
    m3_err *e;
} plan;

static int64_t numel(const tspec *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

static tspec *add(plan *p, m3_dtype dt, int ndim, const int64_t *shp, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static tspec *add(plan *p, m3_dtype dt, int ndim, const int64_t *shp, const char *fmt, ...)
{
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        tspec *nt = realloc(p->t, (size_t)cap * sizeof *nt);
        if (!nt) {
            m3_fail(p->e, "synth: out of memory for the tensor list");
            return NULL;
        }
        p->t = nt;
        p->cap = cap;
    }
    tspec *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->dt = dt;
    t->ndim = ndim;
    memcpy(t->shape, shp, (size_t)ndim * sizeof *shp);
    t->kind = K_FLOAT;
    return t;
}

/* amplitude sqrt(3 / fan_in): standard deviation 1/sqrt(fan_in) (M3-SYNTH-6) */
static float fan_amp(int64_t fan_in)
{
    float q = 3.0f / (float)fan_in;
    return sqrtf(q);
}

#define A_NORM 0.25f  /* zero-centred RMSNorm weights: 1 + w in [0.75, 1.25) */
#define A_BIAS 0.05f  /* correction bias, linear and LayerNorm biases */

/* A weight matrix [rows, cols] with the fan-in amplitude. */
static int lin(plan *p, m3_dtype dt, int64_t rows, int64_t cols, const char *name)
{
    int64_t s[2] = {rows, cols};
    tspec *t = add(p, dt, 2, s, "%s", name);
    if (!t)
        return -1;
    t->a = fan_amp(cols);
    return 0;
}

static int vec(plan *p, m3_dtype dt, int64_t n, float a, float o, const char *name)
{
    int64_t s[1] = {n};
    tspec *t = add(p, dt, 1, s, "%s", name);
    if (!t)
        return -1;
    t->a = a;
    t->o = o;
    return 0;
}

static int text_layer(plan *p, const shape *S, int L, int moe)
{
    char b[NAME_CAP];
    const int64_t H = S->hidden, Q = (int64_t)S->heads * S->head_dim,
                  KV = (int64_t)S->kv_heads * S->head_dim;
#define N(s) (snprintf(b, sizeof b, "language_model.model.layers.%d.%s", L, s), b)
    if (vec(p, M3_BF16, H, A_NORM, 0, N("input_layernorm.weight")) ||
        lin(p, M3_BF16, Q, H, N("self_attn.q_proj.weight")) ||
        lin(p, M3_BF16, KV, H, N("self_attn.k_proj.weight")) ||
        lin(p, M3_BF16, KV, H, N("self_attn.v_proj.weight")) ||
        lin(p, M3_BF16, H, Q, N("self_attn.o_proj.weight")) ||
        vec(p, M3_BF16, S->head_dim, A_NORM, 0, N("self_attn.q_norm.weight")) ||
        vec(p, M3_BF16, S->head_dim, A_NORM, 0, N("self_attn.k_norm.weight")))
        return -1;
    if (moe && (lin(p, M3_BF16, (int64_t)S->idx_heads * S->idx_dim, H, N("self_attn.index_q_proj.weight")) ||
                lin(p, M3_BF16, S->idx_dim, H, N("self_attn.index_k_proj.weight")) ||
                vec(p, M3_BF16, S->idx_dim, A_NORM, 0, N("self_attn.index_q_norm.weight")) ||
                vec(p, M3_BF16, S->idx_dim, A_NORM, 0, N("self_attn.index_k_norm.weight"))))
        return -1;
    if (vec(p, M3_BF16, H, A_NORM, 0, N("post_attention_layernorm.weight")))
        return -1;
    if (!moe)
        return lin(p, M3_BF16, S->dense_inter, H, N("mlp.gate_proj.weight")) ||
                       lin(p, M3_BF16, S->dense_inter, H, N("mlp.up_proj.weight")) ||
                       lin(p, M3_BF16, H, S->dense_inter, N("mlp.down_proj.weight"))
                   ? -1
                   : 0;
    if (lin(p, M3_F32, S->experts, H, N("block_sparse_moe.gate.weight")) ||
        vec(p, M3_F32, S->experts, A_BIAS, 0, N("block_sparse_moe.e_score_correction_bias")))
        return -1;
    for (int E = 0; E < S->experts; E++) {
        char s[96];
        snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w1.weight", E);
        if (lin(p, M3_BF16, S->inter, H, N(s)))
            return -1;
        snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w3.weight", E);
        if (lin(p, M3_BF16, S->inter, H, N(s)))
            return -1;
        snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w2.weight", E);
        if (lin(p, M3_BF16, H, S->inter, N(s)))
            return -1;
    }
    return lin(p, M3_BF16, S->shared_inter, H, N("block_sparse_moe.shared_experts.gate_proj.weight")) ||
                   lin(p, M3_BF16, S->shared_inter, H, N("block_sparse_moe.shared_experts.up_proj.weight")) ||
                   lin(p, M3_BF16, H, S->shared_inter, N("block_sparse_moe.shared_experts.down_proj.weight"))
               ? -1
               : 0;
#undef N
}

/* A linear layer with bias: weight [rows, cols] and bias [rows]. */
static int lin_bias(plan *p, int64_t rows, int64_t cols, const char *prefix)
{
    char b[NAME_CAP];
    snprintf(b, sizeof b, "%s.weight", prefix);
    if (lin(p, M3_BF16, rows, cols, b))
        return -1;
    snprintf(b, sizeof b, "%s.bias", prefix);
    return vec(p, M3_BF16, rows, A_BIAS, 0, b);
}

static int layer_norm(plan *p, int64_t n, const char *prefix)
{
    char b[NAME_CAP];
    snprintf(b, sizeof b, "%s.weight", prefix);
    if (vec(p, M3_BF16, n, A_NORM, 1.0f, b))
        return -1;
    snprintf(b, sizeof b, "%s.bias", prefix);
    return vec(p, M3_BF16, n, A_BIAS, 0, b);
}

static int vision(plan *p, const shape *S, int layers)
{
    const int64_t Hv = S->v_hidden, P = S->patch, T = S->temporal, C = S->channels;
    int64_t pe[5] = {Hv, C, T, P, P};
    tspec *t = add(p, M3_F32, 5, pe, "vision_tower.vision_model.embeddings.patch_embedding.weight");
    if (!t)
        return -1;
    t->a = fan_amp(C * T * P * P);
    if (layer_norm(p, Hv, "vision_tower.vision_model.pre_layrnorm"))
        return -1;
    for (int i = 0; i < layers; i++) {
        char b[NAME_CAP];
        static const char *const sub[] = {"layer_norm1", "self_attn.q_proj", "self_attn.k_proj",
                                          "self_attn.v_proj", "self_attn.out_proj", "layer_norm2",
                                          "mlp.fc1", "mlp.fc2"};
        for (int k = 0; k < 8; k++) {
            snprintf(b, sizeof b, "vision_tower.vision_model.encoder.layers.%d.%s", i, sub[k]);
            int r = k == 0 || k == 5 ? layer_norm(p, Hv, b)
                    : k == 6         ? lin_bias(p, S->v_inter, Hv, b)
                    : k == 7         ? lin_bias(p, Hv, S->v_inter, b)
                                     : lin_bias(p, Hv, Hv, b);
            if (r)
                return -1;
        }
    }
    const int64_t M = (int64_t)S->merge * S->merge;
    return lin_bias(p, S->proj_hidden, Hv, "multi_modal_projector.linear_1") ||
                   lin_bias(p, S->hidden, S->proj_hidden, "multi_modal_projector.linear_2") ||
                   lin_bias(p, S->hidden, M * S->hidden, "patch_merge_mlp.linear_1") ||
                   lin_bias(p, S->hidden, S->hidden, "patch_merge_mlp.linear_2")
               ? -1
               : 0;
}

/* Every weight tensor, in the canonical order of M3-SYNTH-3. */
static int plan_weights(plan *p, const cf_synth_opts *o, const shape *S)
{
    int64_t emb[2] = {o->vocab, S->hidden};
    tspec *t = add(p, M3_BF16, 2, emb, "language_model.model.embed_tokens.weight");
    if (!t)
        return -1;
    t->a = sqrtf(3.0f);
    for (int L = 0; L < o->layers; L++)
        if (text_layer(p, S, L, L >= o->dense_layers))
            return -1;
    if (vec(p, M3_BF16, S->hidden, A_NORM, 0, "language_model.model.norm.weight") ||
        lin(p, M3_BF16, o->vocab, S->hidden, "language_model.lm_head.weight"))
        return -1;
    return o->vision_layers > 0 ? vision(p, S, o->vision_layers) : 0;
}

/* Header bytes of a safetensors file holding t[0..n) (M3-SYNTH-8): JSON, padded with
 * spaces to a multiple of 8. Sets the data offsets. Caller frees. */
static char *st_header(tspec *t, int n, size_t *len, unsigned long long *data_bytes, m3_err *e)
{
    size_t cap = 256 + (size_t)n * (NAME_CAP + 256), k = 0; /* an entry is at most ~330 bytes */
    char *h = malloc(cap);
    if (!h) {
        m3_fail(e, "synth: out of memory for a safetensors header");
        return NULL;
    }
    k += (size_t)snprintf(h + k, cap - k, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t nb = (uint64_t)numel(&t[i]) * m3_dtype_size(t[i].dt);
        t[i].begin = off;
        t[i].end = off + nb;
        off += nb;
        k += (size_t)snprintf(h + k, cap - k, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name,
                              m3_dtype_name(t[i].dt));
        for (int d = 0; d < t[i].ndim; d++)
            k += (size_t)snprintf(h + k, cap - k, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        k += (size_t)snprintf(h + k, cap - k, "],\"data_offsets\":[%llu,%llu]}",
                              (unsigned long long)t[i].begin, (unsigned long long)t[i].end);
    }
    k += (size_t)snprintf(h + k, cap - k, "}");
    while (k % 8)
        h[k++] = ' ';
    h[k] = 0;
    *len = k;
    *data_bytes = off;
    return h;
}

/* Pack the weights into shards (M3-SYNTH-8) and compute each shard's file size. */
static int plan_shards(plan *p, long long cap)
{
    int s = 0;
    unsigned long long used = 0;
    for (int i = 0; i < p->n; i++) {
        unsigned long long nb = (unsigned long long)numel(&p->t[i]) * m3_dtype_size(p->t[i].dt);
        if (used > 0 && used + nb > (unsigned long long)cap) {
            s++;
            used = 0;
        }
        p->t[i].shard = s;
        used += nb;
        p->total_data += nb;
    }
    p->nshards = s + 1;
    p->shard_bytes = calloc((size_t)p->nshards, sizeof *p->shard_bytes);
    if (!p->shard_bytes)
        return m3_fail(p->e, "synth: out of memory");
    for (int i = 0, j; i < p->n; i = j) {
        for (j = i; j < p->n && p->t[j].shard == p->t[i].shard; j++)
            ;
        size_t hl;
        unsigned long long db;
        char *h = st_header(p->t + i, j - i, &hl, &db, p->e);
        if (!h)
            return -1;
        free(h);
        p->shard_bytes[p->t[i].shard] = 8 + hl + db;
    }
    return 0;
}

static void plan_free(plan *p)
{
    free(p->t);
    free(p->shard_bytes);
    memset(p, 0, sizeof *p);
}

/* ---- options ----------------------------------------------------------------------------- */
void cf_synth_usage(FILE *f)
{
    fprintf(f,
            "usage: m3-conform synth --layers N --seed S --out DIR [--dense-layers D]\n"
            "                        [--vocab V] [--vision-layers K] [--prompt-len P]\n"
            "                        [--shard-size BYTES] [--shape released|tiny] [--dry-run] [--quiet]\n"
            "Writes a checkpoint at the released MiniMax-M3 shapes whose weights are generated\n"
            "from the seed (spec/synth.md, M3-SYNTH-*): config.json, generation_config.json,\n"
            "model-000NN-of-000MM.safetensors shards, model.safetensors.index.json and\n"
            "inputs.safetensors (prompt token ids; with vision, an image and its prompt).\n"
            "  --layers N         text layers, 1..%d (the release has 60)\n"
            "  --seed S           decimal integer, 0..18446744073709551615\n"
            "  --out DIR          output directory (created if missing; files are replaced)\n"
            "  --dense-layers D   leading dense-MLP, dense-attention layers, 0..N (default\n"
            "                     min(3, N), as the release); the rest are MSA + MoE\n"
            "  --vocab V          vocabulary rows, %d..%d (default %d); a cut vocabulary\n"
            "                     moves the special ids with its top (M3-SYNTH-9)\n"
            "  --vision-layers K  also write the vision tower (K encoder layers, 1..%d) and\n"
            "                     the projector; default 0: text-only tensors\n"
            "  --prompt-len P     tokens of inputs.safetensors input_ids (default %d)\n"
            "  --shard-size BYTES tensor bytes per shard at most (suffix K, M, G: powers of\n"
            "                     1000; default 5G); a larger tensor gets a shard of its own\n"
            "  --shape tiny       small test shapes (hidden 64) in the same layout\n"
            "  --dry-run          print the plan and check the disk; write nothing\n"
            "  --quiet            no progress line (bytes written of the total) and no summary\n"
            "The disk need is checked before anything is written. Sizes at the released\n"
            "shapes: about 0.67 GB per dense layer, 14.8 GB per MoE layer, 24.6 MB per 1,000\n"
            "vocabulary rows (embedding + lm_head). Exit 0 written, 2 bad usage or refused.\n",
            CF_SYNTH_MAX_LAYERS, CF_SYNTH_MIN_VOCAB, CF_SYNTH_VOCAB, CF_SYNTH_VOCAB,
            CF_SYNTH_MAX_VISION_LAYERS, CF_SYNTH_DEFAULT_PROMPT);
}

/* A decimal integer in [lo, hi] (the whole string). */
static int parse_u64(const char *s, unsigned long long lo, unsigned long long hi, unsigned long long *v)
{
    if (!s || !*s || strlen(s) > 20)
        return -1;
    unsigned long long x = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        unsigned d = (unsigned)(*p - '0');
        if (x > (ULLONG_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    if (x < lo || x > hi)
        return -1;
    *v = x;
    return 0;
}

static int parse_int_opt(const char *flag, const char *s, long long lo, long long hi, int *v, m3_err *e)
{
    unsigned long long x;
    if (parse_u64(s, (unsigned long long)lo, (unsigned long long)hi, &x))
        return m3_fail(e, "synth: %s must be a whole number in [%lld, %lld] (got \"%s\")", flag, lo, hi, s);
    *v = (int)x;
    return 0;
}

static int parse_size(const char *s, long long *v, m3_err *e)
{
    char num[32];
    size_t n = s ? strlen(s) : 0;
    unsigned long long mul = 1, x;
    if (n > 0 && n < sizeof num) {
        memcpy(num, s, n + 1);
        char c = num[n - 1];
        if (c == 'K' || c == 'k' || c == 'M' || c == 'G') {
            mul = c == 'G' ? 1000000000ull : c == 'M' ? 1000000ull : 1000ull;
            num[n - 1] = 0;
        }
        if (parse_u64(num, 1, 1000000000000000ull, &x) == 0 && x <= 1000000000000000ull / mul &&
            x * mul >= (unsigned long long)CF_SYNTH_MIN_SHARD) {
            *v = (long long)(x * mul);
            return 0;
        }
    }
    return m3_fail(e, "synth: --shard-size must be a byte count >= %lld, optionally with a K, M or G "
                      "suffix (got \"%s\")",
                   CF_SYNTH_MIN_SHARD, s ? s : "");
}

int cf_synth_parse_args(cf_synth_opts *o, int argc, char **argv, int *help, m3_err *e)
{
    memset(o, 0, sizeof *o);
    *help = 0;
    o->dense_layers = -1;
    o->vocab = -1;
    o->prompt_len = CF_SYNTH_DEFAULT_PROMPT;
    o->shard_bytes = CF_SYNTH_DEFAULT_SHARD;
    int have_seed = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!a)
            return m3_fail(e, "synth: empty argument");
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            *help = 1;
            return 0;
        }
        if (strcmp(a, "--dry-run") == 0) {
            o->dry_run = 1;
            continue;
        }
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
            continue;
        }
        static const char *const valued[] = {"--layers", "--seed", "--out", "--dense-layers", "--vocab",
                                             "--vision-layers", "--prompt-len", "--shard-size", "--shape",
                                             NULL};
        int k;
        for (k = 0; valued[k] && strcmp(a, valued[k]) != 0; k++)
            ;
        if (!valued[k])
            return m3_fail(e, "synth: unknown argument \"%s\" (see m3-conform synth --help)", a);
        if (i + 1 >= argc || !argv[i + 1])
            return m3_fail(e, "synth: %s needs a value", a);
        const char *v = argv[++i];
        int r = 0;
        switch (k) {
        case 0: r = parse_int_opt(a, v, 1, CF_SYNTH_MAX_LAYERS, &o->layers, e); break;
        case 1: {
            unsigned long long s;
            if (parse_u64(v, 0, ULLONG_MAX, &s))
                return m3_fail(e, "synth: --seed must be a decimal integer in [0, 18446744073709551615] "
                                  "(got \"%s\")", v);
            o->seed = s;
            have_seed = 1;
            break;
        }
        case 2:
            if (!*v || strlen(v) > 1800)
                return m3_fail(e, "synth: --out must be a directory path of 1..1800 characters");
            o->out = v;
            break;
        case 3: r = parse_int_opt(a, v, 0, CF_SYNTH_MAX_LAYERS, &o->dense_layers, e); break;
        case 4: r = parse_int_opt(a, v, CF_SYNTH_MIN_VOCAB, CF_SYNTH_VOCAB, &o->vocab, e); break;
        case 5: r = parse_int_opt(a, v, 0, CF_SYNTH_MAX_VISION_LAYERS, &o->vision_layers, e); break;
        case 6: r = parse_int_opt(a, v, 1, CF_SYNTH_MAX_PROMPT, &o->prompt_len, e); break;
        case 7: r = parse_size(v, &o->shard_bytes, e); break;
        default:
            if (strcmp(v, "released") == 0)
                o->tiny = 0;
            else if (strcmp(v, "tiny") == 0)
                o->tiny = 1;
            else
                return m3_fail(e, "synth: --shape is \"released\" or \"tiny\" (got \"%s\")", v);
        }
        if (r)
            return -1;
    }
    if (!o->layers || !have_seed || !o->out)
        return m3_fail(e, "synth: needs --layers N, --seed S and --out DIR (missing %s)",
                       !o->layers ? "--layers" : !have_seed ? "--seed" : "--out");
    if (o->dense_layers < 0)
        o->dense_layers = o->layers < 3 ? o->layers : 3;
    if (o->dense_layers > o->layers)
        return m3_fail(e, "synth: --dense-layers %d exceeds --layers %d", o->dense_layers, o->layers);
    if (o->vocab < 0)
        o->vocab = o->tiny ? 512 : CF_SYNTH_VOCAB;
    return 0;
}

/* ---- JSON in the format of json.dumps(indent=2, sort_keys=True) (M3-SYNTH-9) ------------ */


static void indent(m3_strbuf *b, int d)
{
    for (int i = 0; i < d; i++)
        m3_strbuf_put(b, "  ", 2);
}

static void put_str(m3_strbuf *b, const char *s)
{
    m3_strbuf_put(b, "\"", 1);
    for (; *s; s++) {
        char tmp[8];
        if (*s == '"' || *s == '\\') {
            tmp[0] = '\\';
            tmp[1] = *s;
            m3_strbuf_put(b, tmp, 2);
        } else if ((unsigned char)*s < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned char)*s);
            m3_strbuf_puts(b, tmp);
        } else {
            m3_strbuf_put(b, s, 1);
        }
    }
    m3_strbuf_put(b, "\"", 1);
}

static int cmp_key(const void *x, const void *y)
{
    return strcmp((*(const cJSON *const *)x)->string, (*(const cJSON *const *)y)->string);
}

static void pyjson(m3_strbuf *b, const cJSON *x, int d)
{
    if (cJSON_IsObject(x) || cJSON_IsArray(x)) {
        int obj = cJSON_IsObject(x), n = cJSON_GetArraySize(x);
        if (n == 0) {
            m3_strbuf_puts(b, obj ? "{}" : "[]");
            return;
        }
        const cJSON **kids = malloc((size_t)n * sizeof *kids);
        if (!kids) {
            b->oom = 1;
            return;
        }
        int i = 0;
        for (const cJSON *c = x->child; c; c = c->next)
            kids[i++] = c;
        if (obj)
            qsort(kids, (size_t)n, sizeof *kids, cmp_key);
        m3_strbuf_puts(b, obj ? "{\n" : "[\n");
        for (i = 0; i < n; i++) {
            indent(b, d + 1);
            if (obj) {
                put_str(b, kids[i]->string);
                m3_strbuf_puts(b, ": ");
            }
            pyjson(b, kids[i], d + 1);
            m3_strbuf_puts(b, i + 1 < n ? ",\n" : "\n");
        }
        free(kids);
        indent(b, d);
        m3_strbuf_puts(b, obj ? "}" : "]");
    } else if (cJSON_IsString(x)) {
        put_str(b, x->valuestring);
    } else if (cJSON_IsRaw(x)) {
        m3_strbuf_puts(b, x->valuestring);
    } else if (cJSON_IsTrue(x)) {
        m3_strbuf_puts(b, "true");
    } else if (cJSON_IsFalse(x)) {
        m3_strbuf_puts(b, "false");
    } else {
        m3_strbuf_puts(b, "null");
    }
}

/* cJSON builders that note allocation failure in *bad. */
static void jraw(cJSON *o, const char *k, const char *raw, int *bad)
{
    if (!cJSON_AddRawToObject(o, k, raw))
        *bad = 1;
}

static void jint(cJSON *o, const char *k, long long v, int *bad)
{
    char s[32];
    snprintf(s, sizeof s, "%lld", v);
    jraw(o, k, s, bad);
}

static void jstr(cJSON *o, const char *k, const char *v, int *bad)
{
    if (!cJSON_AddStringToObject(o, k, v))
        *bad = 1;
}

static void jbool(cJSON *o, const char *k, int v, int *bad)
{
    if (!cJSON_AddBoolToObject(o, k, v))
        *bad = 1;
}

static cJSON *jobj(cJSON *o, const char *k, int *bad)
{
    cJSON *x = cJSON_AddObjectToObject(o, k);
    if (!x)
        *bad = 1;
    return x;
}

static void jflags(cJSON *o, const char *k, int n, int ones_from, int *bad)
{
    cJSON *a = cJSON_AddArrayToObject(o, k);
    if (!a) {
        *bad = 1;
        return;
    }
    for (int i = 0; i < n; i++) {
        cJSON *v = cJSON_CreateRaw(i >= ones_from ? "1" : "0");
        if (!v || !cJSON_AddItemToArray(a, v)) {
            cJSON_Delete(v);
            *bad = 1;
        }
    }
}

static void jstrs(cJSON *o, const char *k, const char *v, int *bad)
{
    cJSON *a = cJSON_AddArrayToObject(o, k);
    cJSON *s = cJSON_CreateString(v);
    if (!a || !s || !cJSON_AddItemToArray(a, s)) {
        cJSON_Delete(a ? s : NULL);
        *bad = 1;
    }
}

static void compression(cJSON *o, int *bad)
{
    cJSON *c = jobj(o, "img_token_compression_config", bad);
    if (!c)
        return;
    jstr(c, "image_token_compression_method", "patch_merge", bad);
    jint(c, "spatial_merge_size", 2, bad);
    jint(c, "temporal_patch_size", 2, bad);
}

/* config.json (M3-SYNTH-9): every key of the released config, the sizes of o. */
static cJSON *config_json(const cf_synth_opts *o, const shape *S)
{
    int bad = 0;
    cJSON *r = cJSON_CreateObject();
    if (!r)
        return NULL;
    jstrs(r, "architectures", "MiniMaxM3SparseForConditionalGeneration", &bad);
    cJSON *am = jobj(r, "auto_map", &bad);
    if (am)
        jstr(am, "AutoConfig", "configuration_minimax_m3_vl.MiniMaxM3VLConfig", &bad);
    {
        static const int side[6] = {336, 672, 1008, 1344, 1680, 2016};
        char pin[1024];
        size_t k = 0;
        k += (size_t)snprintf(pin + k, sizeof pin - k, "[");
        for (int i = 0; i < 36; i++)
            k += (size_t)snprintf(pin + k, sizeof pin - k, "%s(%d, %d)", i ? ", " : "", side[i / 6], side[i % 6]);
        snprintf(pin + k, sizeof pin - k, "]");
        jstr(r, "image_grid_pinpoints", pin, &bad);
    }
    jint(r, "image_seq_length", 576, &bad);
    jint(r, "image_token_index", special_id(200025, o->vocab), &bad);
    compression(r, &bad);
    jstr(r, "model_type", "minimax_m3_vl", &bad);
    jbool(r, "multimodal_projector_bias", 1, &bad);
    jint(r, "num_reward_heads", 0, &bad);
    jstr(r, "process_image_mode", "dynamic_res", &bad);
    jstr(r, "projector_hidden_act", "gelu", &bad);
    jint(r, "projector_hidden_size", S->proj_hidden, &bad);
    jstr(r, "torch_dtype", "bfloat16", &bad);
    jstr(r, "transformers_version", "4.52.4", &bad);
    jint(r, "video_token_index", special_id(200026, o->vocab), &bad);
    jint(r, "vision_feature_layer", -1, &bad);
    jstr(r, "vision_feature_select_strategy", "full", &bad);

    cJSON *t = jobj(r, "text_config", &bad);
    if (t) {
        jstrs(t, "architectures", "MiniMaxM3SparseForCausalLM", &bad);
        jbool(t, "attention_output_gate", 0, &bad);
        if (o->vocab != CF_SYNTH_VOCAB) { /* the released config leaves them to the defaults */
            jint(t, "bos_token_id", special_id(200034, o->vocab), &bad);
            jint(t, "eos_token_id", special_id(200020, o->vocab), &bad);
        }
        jint(t, "dense_intermediate_size", S->dense_inter, &bad);
        jint(t, "head_dim", S->head_dim, &bad);
        jstr(t, "hidden_act", "swigluoai", &bad);
        jint(t, "hidden_size", S->hidden, &bad);
        jint(t, "intermediate_size", S->inter, &bad);
        jint(t, "max_position_embeddings", 1048576, &bad);
        jflags(t, "moe_layer_freq", o->layers, o->dense_layers, &bad);
        jint(t, "n_shared_experts", 1, &bad);
        jint(t, "num_attention_heads", S->heads, &bad);
        jint(t, "num_experts_per_tok", S->topk, &bad);
        jint(t, "num_hidden_layers", o->layers, &bad);
        jint(t, "num_key_value_heads", S->kv_heads, &bad);
        jint(t, "num_local_experts", S->experts, &bad);
        jint(t, "num_mtp_modules", 7, &bad);
        jint(t, "num_nextn_predict_layers", 1, &bad);
        jraw(t, "partial_rotary_factor", "0.5", &bad);
        jstr(t, "qk_norm_type", "per_head", &bad);
        jraw(t, "rms_norm_eps", "1e-06", &bad);
        jint(t, "rope_theta", 5000000, &bad);
        jint(t, "rotary_dim", S->rotary, &bad);
        jraw(t, "routed_scaling_factor", "2.0", &bad);
        jstr(t, "scoring_func", "sigmoid", &bad);
        jint(t, "shared_intermediate_size", S->shared_inter, &bad);
        cJSON *sp = jobj(t, "sparse_attention_config", &bad);
        if (sp) {
            jflags(sp, "sparse_attention_freq", o->layers, o->dense_layers, &bad);
            jint(sp, "sparse_block_size", S->block, &bad);
            jflags(sp, "sparse_disable_index_value", o->layers, o->dense_layers, &bad);
            jint(sp, "sparse_index_dim", S->idx_dim, &bad);
            jint(sp, "sparse_init_block", 0, &bad);
            jint(sp, "sparse_local_block", 1, &bad);
            jint(sp, "sparse_num_index_heads", S->idx_heads, &bad);
            jstr(sp, "sparse_score_type", "max", &bad);
            jint(sp, "sparse_topk_blocks", S->topk_blocks, &bad);
            jbool(sp, "use_sparse_attention", 1, &bad);
        }
        jraw(t, "swiglu_alpha", "1.702", &bad);
        jraw(t, "swiglu_limit", "7.0", &bad);
        jbool(t, "tie_word_embeddings", 0, &bad);
        jbool(t, "use_gemma_norm", 1, &bad);
        jbool(t, "use_qk_norm", 1, &bad);
        jbool(t, "use_routing_bias", 1, &bad);
        jint(t, "vocab_size", o->vocab, &bad);
    }
    cJSON *v = jobj(r, "vision_config", &bad);
    if (v) {
        jraw(v, "attention_dropout", "0.0", &bad);
        jstr(v, "hidden_act", "gelu", &bad);
        jint(v, "hidden_size", S->v_hidden, &bad);
        jint(v, "image_size", 2016, &bad);
        compression(v, &bad);
        jraw(v, "initializer_factor", "1.0", &bad);
        jraw(v, "initializer_range", "0.02", &bad);
        jint(v, "intermediate_size", S->v_inter, &bad);
        jraw(v, "layer_norm_eps", "1e-05", &bad);
        jstr(v, "model_type", "clip_vision_model", &bad);
        jint(v, "num_attention_heads", S->v_heads, &bad);
        jint(v, "num_channels", S->channels, &bad);
        jint(v, "num_hidden_layers", o->vision_layers > 0 ? o->vision_layers : 32, &bad);
        jint(v, "patch_size", S->patch, &bad);
        jstr(v, "position_embedding_type", "rope", &bad);
        jint(v, "projection_dim", S->proj_hidden, &bad);
        jstr(v, "rope_mode", "3d", &bad);
        jraw(v, "rope_theta", "10000.0", &bad);
        jint(v, "vision_segment_max_frames", 4, &bad);
        jint(v, "vocab_size", 32000, &bad);
    }
    if (bad) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

static cJSON *genconfig_json(const cf_synth_opts *o)
{
    int bad = 0;
    cJSON *r = cJSON_CreateObject();
    if (!r)
        return NULL;
    jint(r, "bos_token_id", special_id(200034, o->vocab), &bad);
    jbool(r, "do_sample", 1, &bad);
    jint(r, "eos_token_id", special_id(200020, o->vocab), &bad);
    jraw(r, "temperature", "1.0", &bad);
    jint(r, "top_k", 40, &bad);
    jraw(r, "top_p", "0.95", &bad);
    jstr(r, "transformers_version", "4.52.4", &bad);
    if (bad) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

static void shard_name(char *buf, size_t n, int s, int ns)
{
    snprintf(buf, n, "model-%05d-of-%05d.safetensors", s + 1, ns);
}

static cJSON *index_json(const plan *p)
{
    int bad = 0;
    cJSON *r = cJSON_CreateObject();
    if (!r)
        return NULL;
    cJSON *md = jobj(r, "metadata", &bad);
    if (md)
        jint(md, "total_size", (long long)p->total_data, &bad);
    cJSON *wm = jobj(r, "weight_map", &bad);
    for (int i = 0; wm && i < p->n && !bad; i++) {
        char sn[64];
        shard_name(sn, sizeof sn, p->t[i].shard, p->nshards);
        jstr(wm, p->t[i].name, sn, &bad);
    }
    if (bad) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

/* ---- writing ----------------------------------------------------------------------------- */
typedef struct outfile {
    char path[2048], tmp[2100];
    int fd;
} outfile;

static int of_open(outfile *f, const char *dir, const char *name, m3_err *e)
{
    snprintf(f->path, sizeof f->path, "%s/%s", dir, name);
    snprintf(f->tmp, sizeof f->tmp, "%s.tmp%ld", f->path, (long)getpid());
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0)
        return m3_fail(e, "%s: cannot create (%s)", f->tmp, strerror(errno));
    return 0;
}

static int of_write(outfile *f, const void *data, size_t n, m3_err *e)
{
    const char *p = data;
    while (n) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return m3_fail(e, "%s: write failed (%s)", f->tmp, w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void of_abort(outfile *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    unlink(f->tmp);
}

static int of_commit(outfile *f, m3_err *e)
{
    int rc = 0;
    if (fsync(f->fd) != 0)
        rc = m3_fail(e, "%s: fsync failed (%s)", f->tmp, strerror(errno));
#ifdef POSIX_FADV_DONTNEED
    if (!rc)
        posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED); /* a hint; the data is on disk */
#endif
    if (close(f->fd) != 0 && !rc)
        rc = m3_fail(e, "%s: close failed (%s)", f->tmp, strerror(errno));
    f->fd = -1;
    if (!rc && rename(f->tmp, f->path) != 0)
        rc = m3_fail(e, "%s: cannot rename to %s (%s)", f->tmp, f->path, strerror(errno));
    if (rc)
        unlink(f->tmp);
    return rc;
}

static int write_json(const char *dir, const char *name, cJSON *j, m3_err *e)
{
    if (!j)
        return m3_fail(e, "synth: out of memory building %s", name);
    m3_strbuf b = {0};
    pyjson(&b, j, 0);
    m3_strbuf_puts(&b, "\n");
    cJSON_Delete(j);
    if (b.oom) {
        free(b.p);
        return m3_fail(e, "synth: out of memory writing %s", name);
    }
    outfile f;
    int rc = of_open(&f, dir, name, e);
    if (!rc && of_write(&f, b.p, b.n, e))
        rc = -1, of_abort(&f);
    else if (!rc)
        rc = of_commit(&f, e);
    free(b.p);
    return rc;
}

/* One safetensors file of t[0..n): header, then each tensor's bytes (little-endian). */
static int write_st(const char *dir, const char *name, const uint64_t seed, tspec *t, int n, void *buf,
                    m3_progress *pg, m3_err *e)
{
    size_t hl;
    unsigned long long db;
    char *h = st_header(t, n, &hl, &db, e);
    if (!h)
        return -1;
    outfile f;
    if (of_open(&f, dir, name, e)) {
        free(h);
        return -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((unsigned long long)hl >> (8 * i));
    int rc = of_write(&f, len8, 8, e) || of_write(&f, h, hl, e) ? -1 : 0;
    free(h);
    unsigned char *out = buf;
    for (int i = 0; i < n && !rc; i++) {
        const tspec *s = &t[i];
        const uint64_t key = cf_synth_key(seed, s->name), total = (uint64_t)numel(s);
        const size_t es = m3_dtype_size(s->dt);
        for (uint64_t j0 = 0; j0 < total && !rc; j0 += CHUNK) {
            size_t m = total - j0 < CHUNK ? (size_t)(total - j0) : CHUNK;
            for (size_t j = 0; j < m; j++) {
                uint32_t u;
                if (s->kind == K_CONST) {
                    u = (uint32_t)s->data[j0 + j];
                } else if (s->kind == K_IDS) {
                    u = (uint32_t)((cf_synth_bits(key, j0 + j) >> 32) % (uint64_t)s->id_range);
                } else {
                    float x = cf_synth_value(key, j0 + j, s->a, s->o);
                    if (s->dt == M3_BF16)
                        u = m3_f32_to_bf16(x);
                    else
                        memcpy(&u, &x, 4);
                }
                for (size_t b = 0; b < es; b++)
                    out[j * es + b] = (unsigned char)(u >> (8 * b));
            }
            rc = of_write(&f, out, m * es, e);
            if (pg && !rc)
                m3_progress_add(pg, (int64_t)(m * es));
        }
    }
    if (rc) {
        of_abort(&f);
        return -1;
    }
    return of_commit(&f, e);
}

/* inputs.safetensors (M3-SYNTH-11): the prompt ids and, with vision, an image and its prompt. */
static int plan_inputs(plan *p, const cf_synth_opts *o, const shape *S, int32_t *grid, int32_t **img_ids,
                       int *n_img_ids)
{
    int64_t pl[1] = {o->prompt_len};
    tspec *t = add(p, M3_I32, 1, pl, "input_ids");
    if (!t)
        return -1;
    t->kind = K_IDS;
    t->id_range = o->vocab - 64;
    if (o->vision_layers <= 0)
        return 0;
    grid[0] = 1;
    grid[1] = grid[2] = S->grid;
    int64_t g[2] = {1, 3};
    if (!(t = add(p, M3_I32, 2, g, "image_grid_thw")))
        return -1;
    t->kind = K_CONST;
    t->data = grid;
    /* 8 ordinary ids, start of image, one placeholder per merged window, end of image, 8 ids */
    const int nimg = S->grid * S->grid / (S->merge * S->merge), n = 16 + 2 + nimg;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids)
        return m3_fail(p->e, "synth: out of memory");
    uint64_t k = cf_synth_key(o->seed, "image_input_ids");
    int w = 0;
    for (int i = 0; i < 8; i++)
        ids[w++] = (int32_t)((cf_synth_bits(k, (uint64_t)i) >> 32) % (uint64_t)(o->vocab - 64));
    ids[w++] = special_id(200029, o->vocab);
    for (int i = 0; i < nimg; i++)
        ids[w++] = special_id(200025, o->vocab);
    ids[w++] = special_id(200030, o->vocab);
    for (int i = 8; i < 16; i++)
        ids[w++] = (int32_t)((cf_synth_bits(k, (uint64_t)i) >> 32) % (uint64_t)(o->vocab - 64));
    *img_ids = ids;
    *n_img_ids = n;
    int64_t ni[1] = {n};
    if (!(t = add(p, M3_I32, 1, ni, "image_input_ids")))
        return -1;
    t->kind = K_CONST;
    t->data = ids;
    const int64_t patch_dim = (int64_t)S->channels * S->temporal * S->patch * S->patch;
    int64_t pv[2] = {(int64_t)S->grid * S->grid, patch_dim};
    if (!(t = add(p, M3_F32, 2, pv, "pixel_values")))
        return -1;
    t->a = 2.0f;
    return 0;
}

/* Create dir (and missing parents). */
static int make_dirs(const char *dir, m3_err *e)
{
    char p[2048];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; ; s++) {
        if (*s == '/' || *s == 0) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return m3_fail(e, "%s: cannot create directory (%s)", p, strerror(errno));
            *s = c;
            if (!c)
                break;
        }
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return m3_fail(e, "%s: not a directory", dir);
    return 0;
}

/* Free bytes of the filesystem holding path (or its nearest existing parent). */
static int free_bytes(const char *path, unsigned long long *out, m3_err *e)
{
    char p[2048];
    snprintf(p, sizeof p, "%s", path);
    struct statvfs vs;
    while (statvfs(p, &vs) != 0) {
        char *s = strrchr(p, '/');
        if (!s || s == p) {
            snprintf(p, sizeof p, "%s", s == p ? "/" : ".");
            if (statvfs(p, &vs) != 0)
                return m3_fail(e, "%s: cannot query free disk space (%s)", path, strerror(errno));
            break;
        }
        *s = 0;
    }
    *out = (unsigned long long)vs.f_bavail * (unsigned long long)vs.f_frsize;
    return 0;
}

int cf_synth_write(const cf_synth_opts *o, FILE *log, m3_progress *pg, m3_err *e)
{
    const shape *S = o->tiny ? &TINY : &RELEASED;
    plan p = {0}, in = {0};
    p.e = in.e = e;
    int32_t grid[3] = {0, 0, 0}, *img_ids = NULL;
    int n_img = 0, rc = -1;
    void *buf = NULL;
    if (plan_weights(&p, o, S) || plan_shards(&p, o->shard_bytes) ||
        plan_inputs(&in, o, S, grid, &img_ids, &n_img))
        goto done;
    unsigned long long need = DISK_MARGIN, have = 0;
    for (int s = 0; s < p.nshards; s++)
        need += p.shard_bytes[s];
    for (int i = 0; i < in.n; i++)
        need += (unsigned long long)numel(&in.t[i]) * m3_dtype_size(in.t[i].dt) + 4096;
    if (free_bytes(o->out, &have, e))
        goto done;
    if (log)
        fprintf(log, "synth: %d layers (%d dense, %d MSA+MoE), vocab %d, %d vision layers, %s shapes: "
                     "%d tensors, %d shards, %.2f GB of weights; %.2f GB free at %s\n",
                o->layers, o->dense_layers, o->layers - o->dense_layers, o->vocab, o->vision_layers,
                o->tiny ? "tiny" : "released", p.n, p.nshards, (double)p.total_data / 1e9, (double)have / 1e9,
                o->out);
    if (log)
        fflush(log);
    if (need > have) {
        m3_fail(e, "synth: %s: the checkpoint needs %.2f GB of disk (%llu bytes, with a %lld MB margin) "
                   "but only %.2f GB are free there; choose fewer --layers, a smaller --vocab or "
                   "another --out",
                o->out, (double)need / 1e9, need, DISK_MARGIN >> 20, (double)have / 1e9);
        goto done;
    }
    if (o->dry_run) {
        for (int s = 0; log && s < p.nshards; s++) {
            char sn[64];
            shard_name(sn, sizeof sn, s, p.nshards);
            fprintf(log, "  %s  %llu bytes\n", sn, p.shard_bytes[s]);
        }
        rc = 0;
        goto done;
    }
    if (make_dirs(o->out, e))
        goto done;
    buf = malloc((size_t)CHUNK * 4);
    if (!buf) {
        m3_fail(e, "synth: out of memory for the write buffer");
        goto done;
    }
    if (write_json(o->out, "config.json", config_json(o, S), e) ||
        write_json(o->out, "generation_config.json", genconfig_json(o), e) ||
        write_st(o->out, "inputs.safetensors", o->seed, in.t, in.n, buf, NULL, e))
        goto done;
    if (pg) {
        unsigned long long total = 0;
        for (int s = 0; s < p.nshards; s++)
            total += p.shard_bytes[s];
        m3_progress_task(pg, "writing shards", M3_UNIT_BYTES, (int64_t)total);
    }
    for (int i = 0, j; i < p.n; i = j) {
        for (j = i; j < p.n && p.t[j].shard == p.t[i].shard; j++)
            ;
        char sn[64];
        shard_name(sn, sizeof sn, p.t[i].shard, p.nshards);
        if (write_st(o->out, sn, o->seed, p.t + i, j - i, buf, pg, e))
            goto done;
        if (log) {
            if (pg)
                m3_progress_clear(pg); /* the log line starts on a clean line */
            fprintf(log, "synth: wrote %s/%s (%d tensors, %llu bytes)\n", o->out, sn, j - i,
                    p.shard_bytes[p.t[i].shard]);
            fflush(log);
        }
    }
    if (write_json(o->out, "model.safetensors.index.json", index_json(&p), e))
        goto done;
    rc = 0;
done:
    free(buf);
    free(img_ids);
    plan_free(&p);
    plan_free(&in);
    return rc;
}
