/* inspect.c — architecture summary and parameter counts (see inspect.h).
 *
 * Spec: M3-CKPT-NAMES-1, M3-CKPT-NAMES-2, M3-CKPT-MTP-1.
 * Writes only to the FILE the caller passes (the CLI's stdout).
 */
#include "inspect.h"

#include <string.h>

static const char *const group_names[M3_PG_COUNT] = {
    [M3_PG_EMBED] = "embeddings",
    [M3_PG_ATTN] = "attention",
    [M3_PG_INDEXER] = "indexer (MSA)",
    [M3_PG_ROUTED] = "routed experts",
    [M3_PG_SHARED] = "shared experts",
    [M3_PG_DENSE_MLP] = "dense MLP",
    [M3_PG_ROUTER_NORM] = "router + norms",
    [M3_PG_VISION] = "vision tower",
    [M3_PG_PROJECTOR] = "projector",
    [M3_PG_LM_HEAD] = "lm_head",
    [M3_PG_OTHER] = "other (unrecognised)",
};

const char *m3_param_group_name(m3_param_group g)
{
    if ((int)g < 0 || g >= M3_PG_COUNT)
        return "?";
    return group_names[g];
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int is_mtp(const char *name)
{
    return strncmp(name, "mtp.", 4) == 0 || strstr(name, ".mtp.") != NULL;
}

/* Group of a tensor name (public or HF v5 layout). */
static m3_param_group classify(const char *n)
{
    if (strncmp(n, "vision_tower.", 13) == 0 || strncmp(n, "model.vision_tower.", 19) == 0)
        return M3_PG_VISION;
    if (strstr(n, "multi_modal_projector.") || strncmp(n, "patch_merge_mlp.", 16) == 0)
        return M3_PG_PROJECTOR;
    if (ends_with(n, "embed_tokens.weight"))
        return M3_PG_EMBED;
    if (ends_with(n, "lm_head.weight"))
        return M3_PG_LM_HEAD;
    if (strstr(n, ".self_attn.index_") || strstr(n, ".self_attn.indexer."))
        return M3_PG_INDEXER;
    if (strstr(n, ".self_attn."))
        return M3_PG_ATTN;
    if (strstr(n, "shared_experts."))
        return M3_PG_SHARED;
    if (strstr(n, ".experts."))
        return M3_PG_ROUTED;
    if (ends_with(n, ".gate.weight") || strstr(n, "e_score_correction_bias"))
        return M3_PG_ROUTER_NORM;
    if (ends_with(n, "layernorm.weight") || ends_with(n, "norm.weight"))
        return M3_PG_ROUTER_NORM;
    if (strstr(n, ".mlp."))
        return M3_PG_DENSE_MLP;
    return M3_PG_OTHER;
}

int m3_inspect_count(const m3_config *c, const m3_store *s, m3_param_counts *out, m3_err *e)
{
    memset(out, 0, sizeof *out);
    size_t n = m3_store_count(s);
    for (size_t i = 0; i < n; i++) {
        const m3_tensor *t = m3_store_at(s, i);
        int64_t k = m3_tensor_numel(t);
        if (is_mtp(t->name)) {
            out->mtp_tensors++;
            out->mtp_params += k;
            continue;
        }
        out->group_total[classify(t->name)] += k;
        out->total += k;
        out->tensors++;
        out->bytes += (int64_t)t->nbytes;
        out->dtype_tensors[t->dtype]++;
    }
    const m3_text_config *tc = &c->text;
    for (int g = 0; g < M3_PG_COUNT; g++)
        out->group_active[g] = out->group_total[g];
    out->group_active[M3_PG_VISION] = 0;
    out->group_active[M3_PG_PROJECTOR] = 0;
    out->group_active[M3_PG_EMBED] = out->group_total[M3_PG_EMBED] ? tc->hidden_size : 0;
    if (out->group_total[M3_PG_ROUTED]) {
        if (tc->num_experts <= 0 || out->group_total[M3_PG_ROUTED] % tc->num_experts != 0)
            return m3_fail(e, "inspect: routed expert parameters (%lld) are not a multiple of "
                              "num_local_experts (%d)",
                           (long long)out->group_total[M3_PG_ROUTED], tc->num_experts);
        out->group_active[M3_PG_ROUTED] =
            out->group_total[M3_PG_ROUTED] / tc->num_experts * tc->num_experts_per_tok;
    }
    for (int g = 0; g < M3_PG_COUNT; g++)
        out->active += out->group_active[g];
    return 0;
}

/* 1234567 -> "1,234,567" */
static const char *commas(char *buf, size_t n, int64_t v)
{
    char tmp[32];
    int neg = v < 0;
    unsigned long long u = neg ? (unsigned long long)(-v) : (unsigned long long)v;
    int len = snprintf(tmp, sizeof tmp, "%llu", u);
    size_t k = 0;
    if (neg && k + 1 < n)
        buf[k++] = '-';
    for (int i = 0; i < len && k + 1 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0 && k + 1 < n)
            buf[k++] = ',';
        if (k + 1 < n)
            buf[k++] = tmp[i];
    }
    buf[k] = '\0';
    return buf;
}

/* Print runs of equal (sparse, moe) layer kinds: "0-2 dense attn + dense MLP". */
static void print_pattern(FILE *f, const m3_text_config *t)
{
    int L = t->num_layers;
    int start = 0;
    for (int i = 1; i <= L; i++) {
        if (i < L && t->layer_sparse[i] == t->layer_sparse[start] &&
            t->layer_moe[i] == t->layer_moe[start])
            continue;
        char range[32];
        if (i - 1 == start)
            snprintf(range, sizeof range, "%d", start);
        else
            snprintf(range, sizeof range, "%d-%d", start, i - 1);
        fprintf(f, "    layers %-8s %s attention + %s (%d layer%s)\n", range,
                t->layer_sparse[start] ? "sparse (MSA)" : "dense causal",
                t->layer_moe[start] ? "MoE" : "dense MLP", i - start, i - start == 1 ? "" : "s");
        start = i;
    }
}

int m3_inspect_print(FILE *f, const m3_config *c, const m3_store *s, m3_err *e)
{
    m3_param_counts pc;
    if (m3_inspect_count(c, s, &pc, e) != 0)
        return -1;
    const m3_text_config *t = &c->text;
    char a[40], b[40];
    int nsparse = 0, nmoe = 0;
    for (int i = 0; i < t->num_layers; i++) {
        nsparse += t->layer_sparse[i];
        nmoe += t->layer_moe[i];
    }
    fprintf(f, "architecture\n");
    fprintf(f, "  text: %d layers (%d dense-attention, %d sparse MSA; %d dense-MLP, %d MoE)\n",
            t->num_layers, t->num_layers - nsparse, nsparse, t->num_layers - nmoe, nmoe);
    print_pattern(f, t);
    fprintf(f, "  hidden %d, vocab %d, heads %d (kv %d, head_dim %d, q width %d), GQA %d:1\n",
            t->hidden_size, t->vocab_size, t->num_heads, t->num_kv_heads, t->head_dim,
            t->num_heads * t->head_dim, t->num_kv_heads ? t->num_heads / t->num_kv_heads : 0);
    fprintf(f, "  RoPE: theta %g, rotary_dim %d of %d (rotate-half); rms_norm_eps %g (Gemma 1+w)\n",
            t->rope_theta, t->rotary_dim, t->head_dim, (double)t->rms_norm_eps);
    fprintf(f, "  max_position_embeddings %lld, tie_word_embeddings %s, bos %d, eos %d\n",
            (long long)t->max_position_embeddings, t->tie_word_embeddings ? "true" : "false",
            t->bos_token_id, t->eos_token_id);
    if (nsparse)
        fprintf(f, "  MSA: index heads %d x dim %d, block %d, top-k %d blocks, local %d, init %d\n",
                t->index_n_heads, t->index_head_dim, t->index_block_size, t->index_topk,
                t->index_local_blocks, t->index_init_blocks);
    if (nmoe)
        fprintf(f, "  MoE: %d experts (I %d), top-%d, sigmoid router%s, scale %g, shared %d (I %d)\n",
                t->num_experts, t->intermediate_size, t->num_experts_per_tok,
                t->use_routing_bias ? " + correction bias" : "", (double)t->routed_scaling_factor,
                t->n_shared_experts, t->shared_intermediate_size);
    if (nmoe < t->num_layers)
        fprintf(f, "  dense MLP: I %d\n", t->dense_intermediate_size);
    fprintf(f, "  SwiGLU-OAI: alpha %g, limit %g, beta %g\n", (double)t->swiglu_alpha,
            (double)t->swiglu_limit, (double)t->swiglu_beta);
    if (c->has_vision) {
        const m3_vision_config *v = &c->vision;
        fprintf(f, "  vision: %d layers, hidden %d, heads %d (head_dim %d), MLP %d, patch %d x %d "
                   "x %d, merge %dx%d, 3D RoPE theta %g, projector %d\n",
                v->num_layers, v->hidden_size, v->num_heads,
                v->num_heads ? v->hidden_size / v->num_heads : 0, v->intermediate_size,
                v->temporal_patch_size, v->patch_size, v->patch_size, v->spatial_merge_size,
                v->spatial_merge_size, v->rope_theta, v->projector_hidden_size);
        fprintf(f, "  image token %d, video token %d\n", c->image_token_id, c->video_token_id);
    } else {
        fprintf(f, "  vision: none\n");
    }
    if (c->num_mtp_modules)
        fprintf(f, "  MTP modules in config: %d (not used by m3)\n", c->num_mtp_modules);

    fprintf(f, "\nparameters (%s tensors, %s bytes of data", commas(a, sizeof a, pc.tensors),
            commas(b, sizeof b, pc.bytes));
    for (int d = 0; d < M3_DTYPE_COUNT; d++)
        if (pc.dtype_tensors[d])
            fprintf(f, "; %s: %s", m3_dtype_name((m3_dtype)d),
                    commas(a, sizeof a, pc.dtype_tensors[d]));
    fprintf(f, ")\n");
    fprintf(f, "  %-22s %22s %22s\n", "group", "total", "active/token");
    for (int g = 0; g < M3_PG_COUNT; g++) {
        if (!pc.group_total[g])
            continue;
        fprintf(f, "  %-22s %22s %22s\n", m3_param_group_name((m3_param_group)g),
                commas(a, sizeof a, pc.group_total[g]), commas(b, sizeof b, pc.group_active[g]));
    }
    fprintf(f, "  %-22s %22s %22s\n", "TOTAL", commas(a, sizeof a, pc.total),
            commas(b, sizeof b, pc.active));
    fprintf(f, "  (%.2fB total, %.2fB active)\n", (double)pc.total / 1e9, (double)pc.active / 1e9);
    fprintf(f, "  active = attention + indexer + norms + router + dense MLP + top-%d routed "
               "experts + shared expert + lm_head + one embedding row; vision and projector "
               "excluded\n",
            t->num_experts_per_tok);
    if (pc.mtp_tensors)
        fprintf(f, "  ignored: %s mtp.* tensors (%s parameters), not counted\n",
                commas(a, sizeof a, pc.mtp_tensors), commas(b, sizeof b, pc.mtp_params));
    return 0;
}
