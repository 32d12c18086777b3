/* names.c — the table of dump names: every fact the kit holds about a name.
 *
 * Spec: M3-DUMP-3 (the per-layer and global names of the model dump, in
 * forward order), M3-DUMP-2 (the [G, T, ...] block tensors carry their token
 * rows on axis 1), M3-DUMP-6 (capabilities a port may declare absent),
 * M3-DUMP-7 (block_indices and topk_index are sets, topk_weight follows the
 * port's own expert order), M3-DUMP-10 (row sets), M3-TOL-4 (greedy tokens),
 * M3-DUMP-9 (vision names, computed before the embeddings).
 *
 * Design: one static table, searched by scope (a whole name, a name after
 * "layers.{i}.", after "vision.layers.{j}.", or a component case's output);
 * the judge, the row-subset code, the dump reader, the report and the
 * localisation all ask it. Names outside the table are judged by their last
 * part (a "*.block_indices" is a set) and their dtype.
 */
#include "conform.h"

#include <stdlib.h>
#include <string.h>

#define N_ ((const char *)0)

/* Forward order: TOP ranks are absolute (vision first, negative); a layer
 * name's rank is 10 + 100 i + order; vision layers -700000 + j. */
static const cf_name k_names[] = {
    /* vision tower (M3-DUMP-9): before the embeddings */
    {"vision.pixel_values", CF_SCOPE_TOP, CF_KIND_FLOAT, "vision-input", -900000, "vision", 0, 1, 0},
    {"vision.grid_thw", CF_SCOPE_TOP, CF_KIND_EXACT, "vision-input", -899999, "vision", 0, 1, 0},
    {"vision.patch_embed", CF_SCOPE_TOP, CF_KIND_FLOAT, "vision-patch", -800000, "vision", 0, 1, 0},
    {"output", CF_SCOPE_VISION_LAYER, CF_KIND_FLOAT, "vision-layer", 0, "vision", 0, 1, 0},
    {"vision.tower_output", CF_SCOPE_TOP, CF_KIND_FLOAT, "vision-tower", -300000, "vision", 0, 1, 0},
    {"vision.projected", CF_SCOPE_TOP, CF_KIND_FLOAT, "vision-projector", -200000, "vision", 0, 1, 0},
    {"vision.image_features", CF_SCOPE_TOP, CF_KIND_FLOAT, "vision-merge", -100000, "vision", 0, 1, 0},
    /* the text forward (M3-DUMP-3) */
    {"embeddings", CF_SCOPE_TOP, CF_KIND_FLOAT, "embedding", 0, N_, 0, 1, 0},
    {"input", CF_SCOPE_LAYER, CF_KIND_FLOAT, "residual", 0, N_, 0, 1, 0},
    {"attn_norm", CF_SCOPE_LAYER, CF_KIND_FLOAT, "norm", 1, N_, 0, 1, 0},
    {"attn.block_scores", CF_SCOPE_LAYER, CF_KIND_FLOAT, "msa-select", 2, N_, 1, 1, 0},
    {"attn.block_indices", CF_SCOPE_LAYER, CF_KIND_BLOCKS, "msa-select", 3, "block_indices", 1, 1, 0},
    {"attn.output", CF_SCOPE_LAYER, CF_KIND_FLOAT, "attention", 4, N_, 0, 1, 0},
    {"post_attn", CF_SCOPE_LAYER, CF_KIND_FLOAT, "residual", 5, N_, 0, 1, 0},
    {"ffn_norm", CF_SCOPE_LAYER, CF_KIND_FLOAT, "norm", 6, N_, 0, 1, 0},
    {"moe.scores", CF_SCOPE_LAYER, CF_KIND_FLOAT, "moe-router", 7, "router", 0, 1, 0},
    {"moe.topk_index", CF_SCOPE_LAYER, CF_KIND_EXPERTS, "moe-router", 8, "router", 0, 1, 0},
    {"moe.topk_weight", CF_SCOPE_LAYER, CF_KIND_WEIGHTS, "moe-router", 9, "router", 0, 1, 0},
    {"mlp.output", CF_SCOPE_LAYER, CF_KIND_FLOAT, "mlp", 10, N_, 0, 1, 0}, /* "moe" in a MoE layer */
    {"output", CF_SCOPE_LAYER, CF_KIND_FLOAT, "residual", 11, N_, 0, 1, 0},
    {"final_norm", CF_SCOPE_TOP, CF_KIND_FLOAT, "final-norm", 1000000, N_, 0, 1, 0},
    {"logits", CF_SCOPE_TOP, CF_KIND_FLOAT, "lm-head", 1000001, N_, 0, 1, 0},
    {"greedy_tokens", CF_SCOPE_TOP, CF_KIND_GREEDY, "decode", 1000002, "greedy", 0, 1, 0},
    {"eagle3.aux", CF_SCOPE_TOP, CF_KIND_FLOAT, "eagle3", 1000003, "eagle3", 0, 1, 0},
    {"rows", CF_SCOPE_TOP, CF_KIND_SKIP, "rows", 2000000, N_, 0, 0, 0},
    /* component cases (M3-VEC-4): the contract's outputs, in the order they are computed */
    {"block_scores", CF_SCOPE_COMPONENT, CF_KIND_FLOAT, N_, 0, N_, 1, 0, 0},
    {"block_indices", CF_SCOPE_COMPONENT, CF_KIND_BLOCKS, N_, 1, N_, 1, 0, 0},
    {"scores", CF_SCOPE_COMPONENT, CF_KIND_FLOAT, N_, 2, N_, 0, 0, 0},
    {"topk_index", CF_SCOPE_COMPONENT, CF_KIND_EXPERTS, N_, 3, N_, 0, 0, 0},
    {"topk_weight", CF_SCOPE_COMPONENT, CF_KIND_WEIGHTS, N_, 4, N_, 0, 0, 1},
    {"cos", CF_SCOPE_COMPONENT, CF_KIND_FLOAT, N_, 5, N_, 0, 0, 0},
    {"sin", CF_SCOPE_COMPONENT, CF_KIND_FLOAT, N_, 6, N_, 0, 0, 0},
    {"out", CF_SCOPE_COMPONENT, CF_KIND_FLOAT, N_, 7, N_, 0, 0, 0},
    {"y", CF_SCOPE_COMPONENT, CF_KIND_FLOAT, N_, 8, N_, 0, 0, 1},
};
#define N_NAMES ((int)(sizeof k_names / sizeof k_names[0]))

static int ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* The part of t after "<prefix>{n}." with 0 <= n < lim, n in *idx; NULL otherwise. */
static const char *after_index(const char *t, const char *prefix, long lim, int *idx)
{
    size_t pl = strlen(prefix);
    if (strncmp(t, prefix, pl) != 0 || t[pl] < '0' || t[pl] > '9')
        return NULL;
    char *end;
    long i = strtol(t + pl, &end, 10);
    if (*end != '.' || i < 0 || i >= lim)
        return NULL;
    *idx = (int)i;
    return end + 1;
}

static const cf_name *find_scoped(const char *leaf, cf_scope scope)
{
    for (int k = 0; k < N_NAMES; k++)
        if (k_names[k].scope == scope && strcmp(k_names[k].leaf, leaf) == 0)
            return &k_names[k];
    return NULL;
}

const cf_name *cf_name_find(const char *t, int component_case, int *layer)
{
    int idx = -1;
    const cf_name *n = NULL;
    const char *leaf;
    if (layer)
        *layer = -1;
    if ((leaf = after_index(t, "vision.layers.", 100000, &idx)) != NULL) {
        n = find_scoped(leaf, CF_SCOPE_VISION_LAYER);
    } else if (strncmp(t, "vision.", 7) == 0) {
        n = find_scoped(t, CF_SCOPE_TOP);
    } else if (component_case) {
        n = find_scoped(t, CF_SCOPE_COMPONENT);
    } else if ((leaf = after_index(t, "layers.", M3_MAX_LAYERS, &idx)) != NULL) {
        n = find_scoped(leaf, CF_SCOPE_LAYER);
        if (layer)
            *layer = idx; /* a layer tensor even when its leaf is not in the table */
        return n;
    } else {
        n = find_scoped(t, CF_SCOPE_TOP);
    }
    if (n && layer && n->scope == CF_SCOPE_VISION_LAYER)
        *layer = -1; /* vision layers are not text layers */
    return n;
}

cf_kind cf_name_kind(const char *t, int component_case, int is_int)
{
    if (strcmp(t, "rows") == 0 || ends_with(t, ".rows") || strncmp(t, "aux.", 4) == 0)
        return CF_KIND_SKIP;
    const cf_name *n = cf_name_find(t, component_case, NULL);
    cf_kind k = n ? n->kind
                : ends_with(t, "block_indices") ? CF_KIND_BLOCKS
                : ends_with(t, "topk_index")    ? CF_KIND_EXPERTS
                : ends_with(t, "topk_weight")   ? CF_KIND_WEIGHTS
                                                : CF_KIND_FLOAT;
    /* the dtype decides between metrics and an exact comparison */
    if (k == CF_KIND_FLOAT || k == CF_KIND_EXACT || k == CF_KIND_WEIGHTS)
        k = is_int ? CF_KIND_EXACT : k == CF_KIND_EXACT ? CF_KIND_FLOAT : k;
    return k;
}

cf_cmp cf_kind_cmp(cf_kind k)
{
    switch (k) {
    case CF_KIND_BLOCKS:
    case CF_KIND_EXPERTS:
        return CF_CMP_SET;
    case CF_KIND_GREEDY:
    case CF_KIND_EXACT:
        return CF_CMP_EXACT;
    default:
        return CF_CMP_METRICS;
    }
}

const cf_name *cf_name_table(int *n)
{
    *n = N_NAMES;
    return k_names;
}

const cf_name *cf_name_layer_leaves(int *n)
{
    int first = 0;
    while (k_names[first].scope != CF_SCOPE_LAYER)
        first++;
    int k = first;
    while (k < N_NAMES && k_names[k].scope == CF_SCOPE_LAYER)
        k++;
    *n = k - first;
    return &k_names[first];
}

/* ---- the questions other files ask ------------------------------------------------------ */
const char *cf_capability_of(const char *t)
{
    const cf_name *n = cf_name_find(t, 0, NULL);
    if (n)
        return n->capability;
    return strncmp(t, "vision.", 7) == 0 ? "vision" : NULL;
}

int cf_is_internal(const char *t)
{
    int layer;
    const cf_name *n = cf_name_find(t, 0, &layer);
    if (layer < 0)
        return 0;
    const char *leaf = strchr(t + 7, '.') + 1;
    return !n ? strcmp(leaf, "rows") != 0 : strcmp(n->leaf, "input") != 0 && strcmp(n->leaf, "output") != 0;
}

int cf_row_axis(const char *name)
{
    const cf_name *n = cf_name_find(name, 0, NULL);
    if (!n)
        n = find_scoped(name, CF_SCOPE_COMPONENT);
    return n ? n->row_axis : ends_with(name, "block_indices") || ends_with(name, "block_scores");
}

int cf_has_rows(const char *name)
{
    return strcmp(name, "greedy_tokens") != 0 && strncmp(name, "vision.", 7) != 0 &&
           strcmp(name, "rows") != 0 && !ends_with(name, ".rows") && strcmp(name, "input_ids") != 0;
}

void cf_classify(const char *t, const char *case_component, int is_moe_layer, char *component, size_t cap,
                 int *layer, int *order)
{
    int component_case = strcmp(case_component, "model") != 0, idx = -1;
    *layer = -1;
    const cf_name *v = strncmp(t, "vision.", 7) == 0 ? cf_name_find(t, component_case, &idx) : NULL;
    if (v) { /* vision names keep their ranks in component cases too */
        snprintf(component, cap, "%s", v->component);
        int j = 0;
        if (v->scope == CF_SCOPE_VISION_LAYER)
            after_index(t, "vision.layers.", 100000, &j);
        *order = v->scope == CF_SCOPE_VISION_LAYER ? -700000 + j : v->order;
        return;
    }
    if (component_case) {
        const cf_name *n = find_scoped(t, CF_SCOPE_COMPONENT);
        snprintf(component, cap, "%s", case_component);
        *order = n ? n->order : 90;
        return;
    }
    const cf_name *n = cf_name_find(t, 0, &idx);
    if (idx >= 0) {
        *layer = idx;
        *order = 10 + idx * 100 + (n ? n->order : 50);
        snprintf(component, cap, "%s", !n ? "layer"
                                       : strcmp(n->leaf, "mlp.output") == 0 && is_moe_layer ? "moe"
                                                                                          : n->component);
        return;
    }
    if (n && n->scope == CF_SCOPE_TOP && n->kind != CF_KIND_SKIP) {
        snprintf(component, cap, "%s", n->component);
        *order = n->order;
        return;
    }
    snprintf(component, cap, "other");
    *order = 2000000;
}

int cf_tie_dependent(const char *t, int component_case, int layer, int order)
{
    if (component_case) {
        const cf_name *n = find_scoped(t, CF_SCOPE_COMPONENT);
        return n && n->tie_dependent;
    }
    int nl;
    cf_name_layer_leaves(&nl);
    return layer >= 0 && order - 10 - 100 * layer < nl;
}

int cf_dump_contract_name(const char *t, int L)
{
    if (strncmp(t, "vision.", 7) == 0)
        return 1;
    int layer;
    const cf_name *n = cf_name_find(t, 0, &layer);
    if (layer >= L || !n || !n->dump)
        return 0;
    if (layer >= 0 && t[7] == '0' && t[8] != '.')
        return 0; /* "layers.01." is not a contract name */
    return 1;
}
