/* eagle3.c — the Eagle3 drafter and the target aux taps.
 *
 * Spec: M3-EAGLE-TAP-1, M3-EAGLE-DRAFT-1..4 (see eagle3.h).
 *
 * Norms: the drafter's own norms are RMSNorm in the style its config states
 * (standard y = (x * r) * w by default, Gemma y = (x * r) * (1 + w) with
 * use_gemma_norm), r = 1 / sqrtf(sum(x^2) / n + eps) with one fp32
 * accumulator in ascending order (the same order as norm.c). A final norm
 * borrowed from the target is the target's norm, so it is applied exactly as
 * the target applies it (Gemma style, the target's eps).
 */
#include "eagle3.h"
#include "fileio.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "linear.h"
#include "norm.h"
#include "rope.h"

/* ------------------------------------------------------------------------ */
/* taps                                                                     */

static void sort3(int t[3])
{
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (t[j] < t[i]) {
                int x = t[i];
                t[i] = t[j];
                t[j] = x;
            }
}

void m3_eagle3_default_taps(int L, int taps[3])
{
    taps[0] = 2 < L - 1 ? 2 : L - 1;
    taps[1] = L / 2;
    taps[2] = L - 3 > 0 ? L - 3 : 0;
    sort3(taps);
}

/* ------------------------------------------------------------------------ */
/* config.json                                                              */

static char *read_text(const char *path, size_t *len, m3_err *e)
{
    char *buf;
    return m3_read_file(path, M3_CONFIG_MAX_BYTES, &buf, len, e) == 0 ? buf : NULL;
}

static const cJSON *jget(const cJSON *o, const char *k)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return (v && !cJSON_IsNull(v)) ? v : NULL;
}

/* Integer field; absent -> *out untouched (returns 0). */
static int jint(const cJSON *o, const char *k, int lo, int hi, int *out, const char *path,
                m3_err *e)
{
    const cJSON *v = jget(o, k);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return m3_fail(e, "%s: %s must be an integer in [%d, %d]", path, k, lo, hi);
    *out = (int)v->valuedouble;
    return 0;
}

static int jnum(const cJSON *o, const char *k, double lo, double hi, double *out,
                const char *path, m3_err *e)
{
    const cJSON *v = jget(o, k);
    if (!v)
        return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return m3_fail(e, "%s: %s must be a number in [%g, %g]", path, k, lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int jbool(const cJSON *o, const char *k, int *out, const char *path, m3_err *e)
{
    const cJSON *v = jget(o, k);
    if (!v)
        return 0;
    if (!cJSON_IsBool(v))
        return m3_fail(e, "%s: %s must be true or false", path, k);
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 0;
}

/* Keys of a LlamaForCausalLMEagle3 config that carry nothing the drafter
 * forward needs (or are checked separately below). */
static const char *const known_keys[] = {
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "attention_dropout",
    "pretraining_tp", "hidden_act", "max_position_embeddings", "vocab_size", "draft_vocab_size",
    "target_hidden_size", "eagle_config", "tie_word_embeddings", "rope_scaling", "attention_bias",
    "mlp_bias", "num_hidden_layers", "_name_or_path", "hidden_size", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "rms_norm_eps", "rope_theta",
    "partial_rotary_factor", "rotary_dim", "norm_before_residual", "use_gemma_norm",
    "eagle_aux_hidden_state_layer_ids", "torchspec_version", NULL};

static int parse_taps(const cJSON *a, int L, int taps[3], const char *path, m3_err *e)
{
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 3)
        return m3_fail(e, "%s: eagle_aux_hidden_state_layer_ids must be a list of 3 layer ids", path);
    int i = 0;
    for (const cJSON *x = a->child; x; x = x->next, i++) {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
            x->valuedouble >= L)
            return m3_fail(e, "%s: eagle_aux_hidden_state_layer_ids[%d] must be a layer id in "
                              "[0, %d) of the target",
                           path, i, L);
        taps[i] = (int)x->valuedouble;
    }
    sort3(taps);
    return 0;
}

static int parse_config(m3_eagle3_config *c, const char *path, const m3_model *t, int lenient,
                        int *target_hidden, int *vocab, m3_err *e)
{
    size_t len = 0;
    char *txt = read_text(path, &len, e);
    if (!txt)
        return -1;
    cJSON *j = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return m3_fail(e, "%s: not a JSON object (malformed JSON)", path);
    }
    int rc = -1;
    const int L = t->cfg.text.num_layers;
    memset(c, 0, sizeof *c);
    for (const cJSON *k = j->child; k; k = k->next)
        for (const cJSON *q = j->child; q != k; q = q->next)
            if (!strcmp(q->string, k->string)) {
                m3_fail(e, "%s: duplicate key \"%s\"", path, k->string);
                goto out;
            }
    if (!lenient)
        for (const cJSON *k = j->child; k; k = k->next) {
            int ok = 0;
            for (int i = 0; known_keys[i]; i++)
                ok |= !strcmp(k->string, known_keys[i]);
            if (!ok) {
                m3_fail(e, "%s: unknown key \"%s\"", path, k->string);
                goto out;
            }
        }
    c->hidden_size = -1;
    c->num_heads = -1;
    c->intermediate_size = -1;
    if (jint(j, "hidden_size", 1, 1 << 20, &c->hidden_size, path, e) ||
        jint(j, "num_attention_heads", 1, 4096, &c->num_heads, path, e) ||
        jint(j, "intermediate_size", 1, 1 << 22, &c->intermediate_size, path, e))
        goto out;
    if (c->hidden_size < 0 || c->num_heads < 0 || c->intermediate_size < 0) {
        m3_fail(e, "%s: hidden_size, num_attention_heads and intermediate_size are required", path);
        goto out;
    }
    c->num_kv_heads = c->num_heads;
    c->head_dim = c->hidden_size / c->num_heads;
    double eps = 1e-6, theta = 10000.0, prf = 1.0;
    int nl = 1, bias = 0, mbias = 0;
    *target_hidden = c->hidden_size;
    *vocab = -1;
    if (jint(j, "num_key_value_heads", 1, 4096, &c->num_kv_heads, path, e) ||
        jint(j, "head_dim", 1, 1 << 16, &c->head_dim, path, e) ||
        jnum(j, "rms_norm_eps", 0.0, 1.0, &eps, path, e) ||
        jnum(j, "rope_theta", 1.0, 1e12, &theta, path, e) ||
        jnum(j, "partial_rotary_factor", 0.0, 1.0, &prf, path, e) ||
        jbool(j, "use_gemma_norm", &c->gemma_norm, path, e) ||
        jbool(j, "norm_before_residual", &c->norm_before_residual, path, e) ||
        jbool(j, "tie_word_embeddings", &c->tie_word_embeddings, path, e) ||
        jbool(j, "attention_bias", &bias, path, e) || jbool(j, "mlp_bias", &mbias, path, e) ||
        jint(j, "num_hidden_layers", 1, 1, &nl, path, e) ||
        jint(j, "target_hidden_size", 1, 1 << 20, target_hidden, path, e) ||
        jint(j, "draft_vocab_size", 1, 1 << 30, vocab, path, e))
        goto out;
    if (bias || mbias) {
        m3_fail(e, "%s: attention_bias / mlp_bias true is not supported (Eagle3 linears have no bias)",
                path);
        goto out;
    }
    const cJSON *act = jget(j, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0)) {
        m3_fail(e, "%s: hidden_act must be \"silu\"", path);
        goto out;
    }
    if (jget(j, "rope_scaling")) {
        m3_fail(e, "%s: rope_scaling is not supported for the drafter (must be null or absent)", path);
        goto out;
    }
    int64_t maxpos = 0;
    double mp = 0;
    if (jnum(j, "max_position_embeddings", 1.0, 1e15, &mp, path, e))
        goto out;
    maxpos = (int64_t)mp;
    c->max_position_embeddings = maxpos;
    c->rms_norm_eps = (float)eps;
    c->rope_theta = theta;
    c->rotary_dim = (int)floor(prf * c->head_dim + 0.5);
    if (jint(j, "rotary_dim", 0, c->head_dim, &c->rotary_dim, path, e))
        goto out;
    if (c->rotary_dim % 2 != 0) {
        m3_fail(e, "%s: rotary dimension %d (head_dim %d x partial_rotary_factor) must be even", path,
                c->rotary_dim, c->head_dim);
        goto out;
    }
    if (c->num_heads % c->num_kv_heads != 0) {
        m3_fail(e, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", path,
                c->num_heads, c->num_kv_heads);
        goto out;
    }
    m3_eagle3_default_taps(L, c->taps);
    const cJSON *ec = jget(j, "eagle_config");
    const cJSON *ids = jget(j, "eagle_aux_hidden_state_layer_ids");
    if (ec && !cJSON_IsObject(ec)) {
        m3_fail(e, "%s: eagle_config must be an object", path);
        goto out;
    }
    if (!ids && ec)
        ids = jget(ec, "eagle_aux_hidden_state_layer_ids");
    if (ids) {
        if (parse_taps(ids, L, c->taps, path, e) != 0)
            goto out;
        c->taps_from_config = 1;
    }
    rc = 0;
out:
    cJSON_Delete(j);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* tensors                                                                  */

static const m3_tensor *find(const m3_store *s, const char *name)
{
    const m3_tensor *t = m3_store_get(s, name);
    if (!t) {
        char alt[256];
        snprintf(alt, sizeof alt, "model.%s", name);
        t = m3_store_get(s, alt);
    }
    return t;
}

static int float_dtype(m3_dtype dt)
{
    return dt == M3_F32 || dt == M3_BF16 || dt == M3_F16;
}

/* Bind a matrix [rows, cols]; required: absent is an error. */
static int bind_mat(const m3_eagle3 *d, m3_mat *m, const char *name, int rows, int cols,
                    int required, int *present, m3_err *e)
{
    const m3_tensor *t = find(d->store, name);
    if (present)
        *present = t != NULL;
    if (!t)
        return required ? m3_fail(e, "%s: drafter tensor %s is missing", d->dir, name) : 0;
    if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols || !float_dtype(t->dtype))
        return m3_fail(e, "%s: drafter tensor %s (%s) must be a float [%d, %d] matrix (got %d dims, "
                          "[%lld, %lld])",
                       d->dir, name, t->file, rows, cols, t->ndim, (long long)t->shape[0],
                       (long long)(t->ndim > 1 ? t->shape[1] : 0));
    m->data = t->data;
    m->dtype = t->dtype;
    m->rows = rows;
    m->cols = cols;
    return 0;
}

static int bind_vec(const m3_eagle3 *d, m3_vec *v, const char *name, int n, int required,
                    int *present, m3_err *e)
{
    const m3_tensor *t = find(d->store, name);
    if (present)
        *present = t != NULL;
    if (!t)
        return required ? m3_fail(e, "%s: drafter tensor %s is missing", d->dir, name) : 0;
    if (t->ndim != 1 || t->shape[0] != n || !float_dtype(t->dtype))
        return m3_fail(e, "%s: drafter tensor %s (%s) must be a float vector [%d]", d->dir, name,
                       t->file, n);
    v->data = t->data;
    v->dtype = t->dtype;
    v->n = n;
    return 0;
}

int32_t m3_eagle3_to_target(const m3_eagle3 *d, int32_t i)
{
    return d->d2t ? d->d2t[i] : i;
}

int m3_eagle3_open(m3_eagle3 *d, const char *dir, const m3_model *target,
                   const m3_eagle3_opts *opts, m3_err *e)
{
    memset(d, 0, sizeof *d);
    if (!dir || !*dir)
        return m3_fail(e, "drafter: no checkpoint directory given");
    if (strlen(dir) >= sizeof d->dir)
        return m3_fail(e, "drafter: path is longer than %zu bytes", sizeof d->dir - 1);
    char path[sizeof d->dir + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    return m3_eagle3_open_files(d, path, dir, target, opts, e);
}

int m3_eagle3_open_files(m3_eagle3 *d, const char *path, const char *dir, const m3_model *target,
                         const m3_eagle3_opts *opts, m3_err *e)
{
    memset(d, 0, sizeof *d);
    if (!path || !*path || !dir || !*dir)
        return m3_fail(e, "drafter: no config.json or weights path given");
    if (strlen(dir) >= sizeof d->dir)
        return m3_fail(e, "drafter: path is longer than %zu bytes", sizeof d->dir - 1);
    memcpy(d->dir, dir, strlen(dir) + 1);
    const m3_text_config *tc = &target->cfg.text;
    int target_hidden = 0, dvocab = -1;
    m3_eagle3_config *c = &d->cfg;
    if (parse_config(c, path, target, opts ? opts->lenient_config : 0, &target_hidden, &dvocab, e))
        goto fail;
    const int H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    if (H != tc->hidden_size || target_hidden != tc->hidden_size) {
        m3_fail(e, "%s: drafter hidden_size %d / target_hidden_size %d must equal the target's "
                   "hidden_size %d",
                path, H, target_hidden, tc->hidden_size);
        goto fail;
    }
    d->target_vocab = tc->vocab_size;
    d->target_eps = tc->rms_norm_eps;
    if (m3_store_open(&d->store, dir, e) != 0)
        goto fail;

    char n[128];
    if (bind_mat(d, &d->fc, "fc.weight", H, 3 * H, 1, NULL, e))
        goto fail;
    int have[3];
    for (int i = 0; i < 3; i++) {
        snprintf(n, sizeof n, "fc_norm.%d.weight", i);
        if (bind_vec(d, &d->fc_norm[i], n, H, 0, &have[i], e))
            goto fail;
    }
    if (have[0] != have[1] || have[1] != have[2]) {
        m3_fail(e, "%s: drafter has only some of fc_norm.{0,1,2}.weight (need all three or none)",
                dir);
        goto fail;
    }
    d->has_fc_norm = have[0];
    if (bind_vec(d, &d->input_norm, "layers.0.input_layernorm.weight", H, 1, NULL, e) ||
        bind_vec(d, &d->hidden_norm, "layers.0.hidden_norm.weight", H, 1, NULL, e) ||
        bind_vec(d, &d->post_norm, "layers.0.post_attention_layernorm.weight", H, 1, NULL, e) ||
        bind_mat(d, &d->q, "layers.0.self_attn.q_proj.weight", nh * hd, 2 * H, 1, NULL, e) ||
        bind_mat(d, &d->k, "layers.0.self_attn.k_proj.weight", nkv * hd, 2 * H, 1, NULL, e) ||
        bind_mat(d, &d->v, "layers.0.self_attn.v_proj.weight", nkv * hd, 2 * H, 1, NULL, e) ||
        bind_mat(d, &d->o, "layers.0.self_attn.o_proj.weight", H, nh * hd, 1, NULL, e) ||
        bind_mat(d, &d->gate, "layers.0.mlp.gate_proj.weight", c->intermediate_size, H, 1, NULL,
                 e) ||
        bind_mat(d, &d->up, "layers.0.mlp.up_proj.weight", c->intermediate_size, H, 1, NULL, e) ||
        bind_mat(d, &d->down, "layers.0.mlp.down_proj.weight", H, c->intermediate_size, 1, NULL,
                 e))
        goto fail;

    int present = 0;
    if (bind_mat(d, &d->embed, "embed_tokens.weight", tc->vocab_size, H, 0, &present, e))
        goto fail;
    if (!present) {
        d->embed = target->w.embed;
        d->embed_from_target = 1;
    }
    if (bind_vec(d, &d->norm, "norm.weight", H, 0, &present, e))
        goto fail;
    if (!present) {
        d->norm = target->w.final_norm;
        d->norm_from_target = 1;
    }
    /* lm_head: rows = draft vocab (draft_vocab_size, else d2t's length, else the target's) */
    const m3_tensor *d2t = find(d->store, "d2t");
    if (d2t) {
        if (d2t->ndim != 1 || (d2t->dtype != M3_I64 && d2t->dtype != M3_I32) || d2t->shape[0] <= 0 ||
            d2t->shape[0] > tc->vocab_size) {
            m3_fail(e, "%s: drafter tensor d2t (%s) must be int64/int32 [draft_vocab <= %d]", dir,
                    d2t->file, tc->vocab_size);
            goto fail;
        }
        if (dvocab >= 0 && dvocab != d2t->shape[0]) {
            m3_fail(e, "%s: d2t has %lld entries but draft_vocab_size is %d", dir,
                    (long long)d2t->shape[0], dvocab);
            goto fail;
        }
        dvocab = (int)d2t->shape[0];
        d->d2t = malloc(sizeof(int32_t) * (size_t)dvocab);
        if (!d->d2t) {
            m3_fail(e, "drafter: out of memory for d2t [%d]", dvocab);
            goto fail;
        }
        for (int i = 0; i < dvocab; i++) {
            int64_t off = d2t->dtype == M3_I64 ? ((const int64_t *)d2t->data)[i]
                                               : ((const int32_t *)d2t->data)[i];
            int64_t tid = (int64_t)i + off;
            if (tid < 0 || tid >= tc->vocab_size) {
                m3_fail(e, "%s: d2t[%d] = %lld maps draft id %d to %lld, outside the target "
                           "vocabulary [0, %d)",
                        dir, i, (long long)off, i, (long long)tid, tc->vocab_size);
                goto fail;
            }
            d->d2t[i] = (int32_t)tid;
        }
    } else if (dvocab >= 0 && dvocab != tc->vocab_size) {
        m3_fail(e, "%s: draft_vocab_size %d differs from the target vocabulary %d but there is no "
                   "d2t map",
                dir, dvocab, tc->vocab_size);
        goto fail;
    }
    if (dvocab < 0)
        dvocab = tc->vocab_size;
    c->draft_vocab = dvocab;
    const m3_tensor *t2d = find(d->store, "t2d");
    if (t2d && (t2d->ndim != 1 || t2d->shape[0] != tc->vocab_size)) {
        m3_fail(e, "%s: drafter tensor t2d (%s) must have %d entries (the target vocabulary)", dir,
                t2d->file, tc->vocab_size);
        goto fail;
    }
    if (bind_mat(d, &d->lm_head, "lm_head.weight", dvocab, H, 0, &present, e))
        goto fail;
    if (!present) {
        if (c->tie_word_embeddings && dvocab == tc->vocab_size) {
            d->lm_head = d->embed;
            d->lm_head_from_target = d->embed_from_target;
        } else if (dvocab == tc->vocab_size) {
            d->lm_head = target->w.lm_head;
            d->lm_head_from_target = 1;
        } else {
            m3_fail(e, "%s: drafter has no lm_head.weight and its draft vocabulary (%d) differs "
                       "from the target's (%d)",
                    dir, dvocab, tc->vocab_size);
            goto fail;
        }
    }
    return 0;
fail:
    m3_eagle3_close(d);
    return -1;
}

void m3_eagle3_close(m3_eagle3 *d)
{
    if (!d)
        return;
    free(d->d2t);
    m3_store_close(d->store);
    memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------------------ */
/* target forward with taps                                                 */

int m3_eagle3_target_forward(const m3_model *m, m3_state *s, const int taps[3],
                             const int32_t *tokens, int n, float *logits, int n_logits,
                             float *aux, m3_err *e)
{
    const m3_text_config *c = &m->cfg.text;
    const int H = c->hidden_size, V = c->vocab_size, L = c->num_layers;
    const m3_mode mode = m3_state_mode(s);
    if (n <= 0)
        return m3_fail(e, "eagle3 target forward: empty input (%d tokens)", n);
    if (!tokens)
        return m3_fail(e, "eagle3 target forward: no token array given");
    for (int j = 0; j < 3; j++)
        if (taps[j] < 0 || taps[j] >= L)
            return m3_fail(e, "eagle3 target forward: tap layer %d outside [0, %d)", taps[j], L);
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= V)
            return m3_fail(e, "token %d at index %d is out of range [0, %d)", (int)tokens[t], t, V);
    if (n_logits < 0 || n_logits > n)
        return m3_fail(e, "eagle3 target forward: n_logits %d outside [0, %d]", n_logits, n);
    float *x = malloc(sizeof(float) * (size_t)n * (size_t)H);
    if (!x)
        return m3_fail(e, "eagle3 target forward: out of memory for [%d, %d] rows", n, H);
    /* embedding rows, no scaling, a bf16 rounding point (as m3_forward) */
    for (int t = 0; t < n; t++)
        for (int i = 0; i < H; i++)
            x[(size_t)t * H + i] = m3_round1(m3_mat_at(&m->w.embed, tokens[t], i), mode);
    const int64_t len0 = m3_state_len(s);
    for (int l = 0; l < L; l++) {
        if (aux)
            for (int j = 0; j < 3; j++)
                if (taps[j] == l)
                    for (int t = 0; t < n; t++)
                        memcpy(aux + ((size_t)t * 3 + (size_t)j) * (size_t)H, x + (size_t)t * H,
                               sizeof(float) * (size_t)H);
        if (m3_layer_forward(m, s, l, x, n, NULL, e) != 0) {
            /* only layer 0 can fail (context checks are per layer and identical) */
            m3_state_truncate(s, len0);
            free(x);
            return -1;
        }
    }
    for (int t = 0; t < n; t++) {
        float *xr = x + (size_t)t * H;
        m3_rmsnorm(xr, xr, &m->w.final_norm, H, c->rms_norm_eps, mode);
        if (logits && t >= n - n_logits) {
            float *lr = logits + (size_t)(t - (n - n_logits)) * (size_t)V;
            m3_matvec(lr, &m->w.lm_head, xr);
            m3_round_mode(lr, (size_t)V, mode);
        }
    }
    free(x);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* drafter state and step                                                   */

struct m3_eagle3_state {
    int64_t cap, len;
    float *kc, *vc;     /* [cap, nkv, hd] */
    float *z;           /* [2H] */
    float *xn;          /* [3H] normed taps / scratch */
    float *q, *att;     /* [nh*hd] */
    float *h, *tmp;     /* [H] */
    float *ffn;         /* [2I] */
    float *cos_t, *sin_t; /* [rd/2] */
    float *ascr;        /* [m3_attention_scratch(cap - 1, ...)] */
};

static void *xcalloc(size_t a, size_t b)
{
    if (a == 0 || b == 0)
        return calloc(1, 1);
    if (a > SIZE_MAX / b / sizeof(float))
        return NULL;
    return calloc(a * b, sizeof(float));
}

void m3_eagle3_state_free(m3_eagle3_state *s)
{
    if (!s)
        return;
    free(s->kc);
    free(s->vc);
    free(s->z);
    free(s->xn);
    free(s->q);
    free(s->att);
    free(s->h);
    free(s->tmp);
    free(s->ffn);
    free(s->cos_t);
    free(s->sin_t);
    free(s->ascr);
    free(s);
}

m3_eagle3_state *m3_eagle3_state_new(const m3_eagle3 *d, int64_t max_tokens, m3_err *e)
{
    const m3_eagle3_config *c = &d->cfg;
    if (max_tokens <= 0) {
        m3_fail(e, "drafter state: max_tokens must be positive (got %lld)", (long long)max_tokens);
        return NULL;
    }
    m3_eagle3_state *s = calloc(1, sizeof *s);
    if (!s) {
        m3_fail(e, "drafter state: out of memory");
        return NULL;
    }
    const size_t H = (size_t)c->hidden_size, kvw = (size_t)c->num_kv_heads * (size_t)c->head_dim;
    const size_t qw = (size_t)c->num_heads * (size_t)c->head_dim;
    s->cap = max_tokens;
    s->kc = xcalloc((size_t)max_tokens, kvw);
    s->vc = xcalloc((size_t)max_tokens, kvw);
    s->z = xcalloc(2, H);
    s->xn = xcalloc(3, H);
    s->q = xcalloc(qw, 1);
    s->att = xcalloc(qw, 1);
    s->h = xcalloc(H, 1);
    s->tmp = xcalloc(H, 1);
    s->ffn = xcalloc(2, (size_t)c->intermediate_size);
    s->cos_t = xcalloc((size_t)(c->rotary_dim / 2 + 1), 1);
    s->sin_t = xcalloc((size_t)(c->rotary_dim / 2 + 1), 1);
    s->ascr = xcalloc(m3_attention_scratch(max_tokens - 1, c->num_heads, c->num_kv_heads, c->head_dim), 1);
    if (!s->kc || !s->vc || !s->z || !s->xn || !s->q || !s->att || !s->h || !s->tmp || !s->ffn ||
        !s->cos_t || !s->sin_t || !s->ascr) {
        m3_fail(e, "drafter state: cannot allocate the cache for %lld positions",
                (long long)max_tokens);
        m3_eagle3_state_free(s);
        return NULL;
    }
    return s;
}

int64_t m3_eagle3_state_len(const m3_eagle3_state *s) { return s->len; }

void m3_eagle3_state_truncate(m3_eagle3_state *s, int64_t len)
{
    if (len < 0)
        len = 0;
    if (len < s->len)
        s->len = len;
}

/* RMSNorm in the drafter's style: gemma ? (x*r)*(1+w) : (x*r)*w. */
static void dnorm(float *y, const float *x, const m3_vec *w, int n, float eps, int gemma)
{
    float ss = 0.0f;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) {
        float wi = m3_vec_at(w, i);
        y[i] = (x[i] * r) * (gemma ? 1.0f + wi : wi);
    }
}

void m3_eagle3_combine(const m3_eagle3 *d, m3_eagle3_state *s, const float *aux, float *g)
{
    const int H = d->cfg.hidden_size;
    for (int j = 0; j < 3; j++) {
        const float *a = aux + (size_t)j * H;
        float *o = s->xn + (size_t)j * H;
        if (d->has_fc_norm)
            dnorm(o, a, &d->fc_norm[j], H, d->cfg.rms_norm_eps, d->cfg.gemma_norm);
        else
            memcpy(o, a, sizeof(float) * (size_t)H);
    }
    m3_matvec(g, &d->fc, s->xn);
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

int m3_eagle3_step(const m3_eagle3 *d, m3_eagle3_state *s, int32_t token, const float *f,
                   float *logits, float *feature_out, m3_err *e)
{
    const m3_eagle3_config *c = &d->cfg;
    const int H = c->hidden_size, nh = c->num_heads, nkv = c->num_kv_heads, hd = c->head_dim;
    const int I = c->intermediate_size;
    const float eps = c->rms_norm_eps;
    const int64_t pos = s->len;
    if (pos >= s->cap)
        return m3_fail(e, "drafter: context overflow: %lld cached + 1 new position exceed the "
                          "drafter state capacity of %lld",
                       (long long)pos, (long long)s->cap);
    if (c->max_position_embeddings > 0 && pos >= c->max_position_embeddings)
        return m3_fail(e, "drafter: position %lld exceeds max_position_embeddings %lld of %s",
                       (long long)pos, (long long)c->max_position_embeddings, d->dir);
    if (token < 0 || token >= d->target_vocab)
        return m3_fail(e, "drafter: token %d is out of range [0, %d)", (int)token, d->target_vocab);

    /* z = cat(input_layernorm(embed(t)), hidden_norm(f)) */
    for (int i = 0; i < H; i++)
        s->tmp[i] = m3_mat_at(&d->embed, token, i);
    dnorm(s->z, s->tmp, &d->input_norm, H, eps, c->gemma_norm);
    dnorm(s->z + H, f, &d->hidden_norm, H, eps, c->gemma_norm);

    /* q, k, v; RoPE at pos; k/v into the cache row of pos */
    const size_t kvw = (size_t)nkv * (size_t)hd;
    float *krow = s->kc + (size_t)pos * kvw, *vrow = s->vc + (size_t)pos * kvw;
    m3_matvec(s->q, &d->q, s->z);
    m3_matvec(krow, &d->k, s->z);
    m3_matvec(vrow, &d->v, s->z);
    if (c->rotary_dim > 0) {
        m3_rope_table(s->cos_t, s->sin_t, pos, c->rotary_dim, c->rope_theta, M3_MODE_FP32);
        m3_rope_apply(s->q, nh, hd, c->rotary_dim, s->cos_t, s->sin_t, M3_MODE_FP32);
        m3_rope_apply(krow, nkv, hd, c->rotary_dim, s->cos_t, s->sin_t, M3_MODE_FP32);
    }
    m3_attention_row(s->att, s->q, s->kc, s->vc, pos, nh, nkv, hd, NULL, 0, 1, s->ascr,
                     M3_MODE_FP32);
    m3_matvec(s->tmp, &d->o, s->att);

    /* h1 = f + attn (or hidden_norm(f) + attn) */
    const float *res = c->norm_before_residual ? s->z + H : f;
    for (int i = 0; i < H; i++)
        s->h[i] = res[i] + s->tmp[i];

    /* h2 = h1 + down(silu(gate x) * up x), x = post_attention_layernorm(h1) */
    dnorm(s->xn, s->h, &d->post_norm, H, eps, c->gemma_norm);
    float *gt = s->ffn, *up = s->ffn + I;
    m3_matvec(gt, &d->gate, s->xn);
    m3_matvec(up, &d->up, s->xn);
    for (int i = 0; i < I; i++)
        gt[i] = silu(gt[i]) * up[i];
    m3_matvec(s->tmp, &d->down, gt);
    for (int i = 0; i < H; i++)
        s->h[i] += s->tmp[i];

    /* o = norm(h2); the target's own norm when borrowed */
    if (d->norm_from_target)
        m3_rmsnorm(s->xn, s->h, &d->norm, H, d->target_eps, M3_MODE_FP32);
    else
        dnorm(s->xn, s->h, &d->norm, H, eps, c->gemma_norm);
    if (logits)
        m3_matvec(logits, &d->lm_head, s->xn);
    if (feature_out)
        memcpy(feature_out, s->xn, sizeof(float) * (size_t)H);
    s->len = pos + 1;
    return 0;
}
