/* test_inspect.c — parameter counts on a full-size M3 checkpoint made of
 * sparse files (M3-CKPT-NAMES-1, M3-FMT-SHARD-1).
 *
 * The 59-shard public checkpoint is rebuilt from notes A.2 (23,416 tensor
 * names, shapes and dtypes); data sections are holes made with ftruncate, so
 * 795 GB of "checkpoint" costs a few MB of disk. Opening it, binding every
 * weight and counting must touch headers only (resident memory < 200 MB).
 *
 * Expected numbers, by hand from the A.2 shapes (H 6144, V 200064):
 *   total 427,040,140,160 (notes A.2; also re-summed by this generator).
 *   active per token:
 *     attention   60 x (8192*6144*2 + 512*6144*2 + 2*128)   =  6,417,300,480
 *     indexer     57 x (512*6144 + 128*6144 + 2*128)         =    224,147,712
 *     dense MLP    3 x 3 x 12288*6144                         =    679,477,248
 *     routed      57 x 4 x 3 x 3072*6144                      = 12,910,067,712
 *     shared      57 x 3 x 3072*6144                          =  3,227,516,928
 *     router      57 x (128*6144 + 128)                       =     44,833,920
 *     norms       60 x 2 x 6144 + 6144                        =        743,424
 *     lm_head     200064*6144                                 =  1,229,193,216
 *     embedding   one row                                     =          6,144
 *     sum                                                     = 24,733,286,784
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "config.h"
#include "inspect.h"
#include "safetensors.h"
#include "weights.h"

#define NSHARD 59

typedef struct ent {
    char name[112];
    int bf16; /* 1 BF16, 0 F32 */
    int nd;
    int64_t shape[5];
} ent;

static ent *g_ents;
static int g_n, g_cap;

static void add(const char *name, int bf16, int nd, int64_t a, int64_t b, int64_t c, int64_t d,
                int64_t e)
{
    if (g_n == g_cap) {
        g_cap = g_cap ? g_cap * 2 : 1024;
        g_ents = realloc(g_ents, (size_t)g_cap * sizeof *g_ents);
    }
    ent *x = &g_ents[g_n++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->bf16 = bf16;
    x->nd = nd;
    int64_t s[5] = {a, b, c, d, e};
    memcpy(x->shape, s, sizeof s);
}

/* Notes A.2, public layout. */
static void build_table(void)
{
    char n[160];
    const int64_t H = 6144, V = 200064;
    add("language_model.model.embed_tokens.weight", 1, 2, V, H, 0, 0, 0);
    add("language_model.lm_head.weight", 1, 2, V, H, 0, 0, 0);
    add("language_model.model.norm.weight", 1, 1, H, 0, 0, 0, 0);
    for (int L = 0; L < 60; L++) {
#define T(s, bf, nd, a, b) \
    (snprintf(n, sizeof n, "language_model.model.layers.%d.%s", L, s), add(n, bf, nd, a, b, 0, 0, 0))
        T("input_layernorm.weight", 1, 1, H, 0);
        T("post_attention_layernorm.weight", 1, 1, H, 0);
        T("self_attn.q_proj.weight", 1, 2, 8192, H);
        T("self_attn.k_proj.weight", 1, 2, 512, H);
        T("self_attn.v_proj.weight", 1, 2, 512, H);
        T("self_attn.o_proj.weight", 1, 2, H, 8192);
        T("self_attn.q_norm.weight", 1, 1, 128, 0);
        T("self_attn.k_norm.weight", 1, 1, 128, 0);
        if (L < 3) {
            T("mlp.gate_proj.weight", 1, 2, 12288, H);
            T("mlp.up_proj.weight", 1, 2, 12288, H);
            T("mlp.down_proj.weight", 1, 2, H, 12288);
            continue;
        }
        T("self_attn.index_q_proj.weight", 1, 2, 512, H);
        T("self_attn.index_k_proj.weight", 1, 2, 128, H);
        T("self_attn.index_q_norm.weight", 1, 1, 128, 0);
        T("self_attn.index_k_norm.weight", 1, 1, 128, 0);
        T("block_sparse_moe.gate.weight", 0, 2, 128, H);
        T("block_sparse_moe.e_score_correction_bias", 0, 1, 128, 0);
        for (int x = 0; x < 128; x++) {
            char s[80];
            snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w1.weight", x);
            T(s, 1, 2, 3072, H);
            snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w3.weight", x);
            T(s, 1, 2, 3072, H);
            snprintf(s, sizeof s, "block_sparse_moe.experts.%d.w2.weight", x);
            T(s, 1, 2, H, 3072);
        }
        T("block_sparse_moe.shared_experts.gate_proj.weight", 1, 2, 3072, H);
        T("block_sparse_moe.shared_experts.up_proj.weight", 1, 2, 3072, H);
        T("block_sparse_moe.shared_experts.down_proj.weight", 1, 2, H, 3072);
#undef T
    }
    add("vision_tower.vision_model.embeddings.patch_embedding.weight", 0, 5, 1280, 3, 2, 14, 14);
    add("vision_tower.vision_model.pre_layrnorm.weight", 1, 1, 1280, 0, 0, 0, 0);
    add("vision_tower.vision_model.pre_layrnorm.bias", 1, 1, 1280, 0, 0, 0, 0);
    for (int i = 0; i < 32; i++) {
#define VT(s, nd, a, b)                                                                    \
    (snprintf(n, sizeof n, "vision_tower.vision_model.encoder.layers.%d.%s", i, s),        \
     add(n, 1, nd, a, b, 0, 0, 0))
        VT("layer_norm1.weight", 1, 1280, 0);
        VT("layer_norm1.bias", 1, 1280, 0);
        VT("layer_norm2.weight", 1, 1280, 0);
        VT("layer_norm2.bias", 1, 1280, 0);
        static const char *p[4] = {"q", "k", "v", "out"};
        for (int k = 0; k < 4; k++) {
            char s[64];
            snprintf(s, sizeof s, "self_attn.%s_proj.weight", p[k]);
            VT(s, 2, 1280, 1280);
            snprintf(s, sizeof s, "self_attn.%s_proj.bias", p[k]);
            VT(s, 1, 1280, 0);
        }
        VT("mlp.fc1.weight", 2, 5120, 1280);
        VT("mlp.fc1.bias", 1, 5120, 0);
        VT("mlp.fc2.weight", 2, 1280, 5120);
        VT("mlp.fc2.bias", 1, 1280, 0);
#undef VT
    }
    add("multi_modal_projector.linear_1.weight", 1, 2, H, 1280, 0, 0, 0);
    add("multi_modal_projector.linear_1.bias", 1, 1, H, 0, 0, 0, 0);
    add("multi_modal_projector.linear_2.weight", 1, 2, H, H, 0, 0, 0);
    add("multi_modal_projector.linear_2.bias", 1, 1, H, 0, 0, 0, 0);
    add("patch_merge_mlp.linear_1.weight", 1, 2, H, 4 * H, 0, 0, 0);
    add("patch_merge_mlp.linear_1.bias", 1, 1, H, 0, 0, 0, 0);
    add("patch_merge_mlp.linear_2.weight", 1, 2, H, H, 0, 0, 0);
    add("patch_merge_mlp.linear_2.bias", 1, 1, H, 0, 0, 0, 0);
}

static int64_t numel(const ent *x)
{
    int64_t k = 1;
    for (int i = 0; i < x->nd; i++)
        k *= x->shape[i];
    return k;
}

static char g_dir[256];

/* Append printf output to a growing string. */
static void sb(char **s, size_t *len, size_t *cap, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(*s + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if ((size_t)k < *cap - *len) {
            *len += (size_t)k;
            return;
        }
        *cap = *cap * 2 + (size_t)k;
        *s = realloc(*s, *cap);
    }
}

/* Write the 59 sparse shards and the index; returns the total parameters. */
static int64_t write_checkpoint(void)
{
    int64_t total = 0, bytes = 0;
    for (int i = 0; i < g_n; i++) {
        total += numel(&g_ents[i]);
        bytes += numel(&g_ents[i]) * (g_ents[i].bf16 ? 2 : 4);
    }
    int64_t per = bytes / NSHARD + 1;
    char *idx = malloc(1 << 20);
    size_t il = 0, ic = 1 << 20;
    sb(&idx, &il, &ic, "{\"metadata\":{\"total_size\":%lld},\"weight_map\":{", (long long)bytes);
    int i = 0;
    int64_t before = 0;
    for (int s = 0; s < NSHARD; s++) {
        char *h = malloc(1 << 16);
        size_t hl = 0, hc = 1 << 16;
        int64_t off = 0;
        sb(&h, &hl, &hc, "{\"__metadata__\":{\"format\":\"pt\"}");
        while (i < g_n && (s == NSHARD - 1 || before < per * (s + 1))) {
            const ent *x = &g_ents[i];
            int64_t nb = numel(x) * (x->bf16 ? 2 : 4);
            sb(&h, &hl, &hc, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", x->name, x->bf16 ? "BF16" : "F32");
            for (int d = 0; d < x->nd; d++)
                sb(&h, &hl, &hc, "%s%lld", d ? "," : "", (long long)x->shape[d]);
            sb(&h, &hl, &hc, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + nb));
            sb(&idx, &il, &ic, "%s\"%s\":\"model-%05d-of-%05d.safetensors\"", i ? "," : "", x->name,
               s + 1, NSHARD);
            off += nb;
            before += nb;
            i++;
        }
        sb(&h, &hl, &hc, "}");
        while ((8 + hl) % 8)
            sb(&h, &hl, &hc, " ");
        char p[400];
        snprintf(p, sizeof p, "%s/model-%05d-of-%05d.safetensors", g_dir, s + 1, NSHARD);
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        unsigned char len8[8];
        for (int k = 0; k < 8; k++)
            len8[k] = (unsigned char)((uint64_t)hl >> (8 * k));
        assert_int_equal(fwrite(len8, 1, 8, f), 8);
        assert_int_equal(fwrite(h, 1, hl, f), hl);
        fflush(f);
        assert_int_equal(ftruncate(fileno(f), (off_t)(8 + hl + (size_t)off)), 0); /* a hole */
        fclose(f);
        free(h);
    }
    assert_int_equal(i, g_n);
    sb(&idx, &il, &ic, "}}");
    char p[400];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", g_dir);
    FILE *f = fopen(p, "wb");
    fwrite(idx, 1, il, f);
    fclose(f);
    free(idx);
    return total;
}

static long status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0)
            v = strtol(line + k, NULL, 10);
    fclose(f);
    return v;
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/m3-test-inspect-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    free(g_ents);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_full_size_sparse_checkpoint(void **state)
{
    (void)state;
    build_table();
    assert_int_equal(g_n, 23416);
    int64_t total = write_checkpoint();
    assert_true(total == 427040140160LL);

    m3_config c;
    m3_err e = {{0}};
    if (m3_config_load(&c, "tests/data/m3-config.json", NULL, &e) != 0)
        fail_msg("%s", e.msg);
    m3_store *s = NULL;
    if (m3_store_open(&s, g_dir, &e) != 0)
        fail_msg("%s", e.msg);
    assert_int_equal(m3_store_count(s), 23416);

    m3_param_counts pc;
    assert_int_equal(m3_inspect_count(&c, s, &pc, &e), 0);
    assert_true(pc.total == 427040140160LL);
    assert_true(pc.active == 24733286784LL);
    assert_int_equal(pc.tensors, 23416);
    assert_int_equal(pc.dtype_tensors[M3_F32], 115);
    assert_int_equal(pc.dtype_tensors[M3_BF16], 23416 - 115);
    assert_int_equal(pc.group_total[M3_PG_OTHER], 0);
    assert_true(pc.group_total[M3_PG_ROUTED] == 57LL * 128 * 3 * 3072 * 6144);
    assert_true(pc.group_active[M3_PG_ROUTED] == 57LL * 4 * 3 * 3072 * 6144);
    assert_true(pc.group_active[M3_PG_VISION] == 0 && pc.group_total[M3_PG_VISION] > 0);
    int64_t sum = 0, asum = 0;
    for (int g = 0; g < M3_PG_COUNT; g++) {
        sum += pc.group_total[g];
        asum += pc.group_active[g];
        assert_non_null(m3_param_group_name((m3_param_group)g));
    }
    assert_true(sum == pc.total && asum == pc.active);

    /* every weight binds with the public names and the config's shapes */
    m3_weights w;
    if (m3_weights_bind(&w, &c, s, &e) != 0)
        fail_msg("%s", e.msg);
    assert_int_equal(w.layout, 0);
    assert_int_equal(w.has_vision, 1);
    assert_int_equal(w.ignored_mtp, 0);
    assert_int_equal(w.layers[3].router.dtype, M3_F32);
    assert_int_equal(w.vision.patch_embed.cols, 1176);
    m3_weights_free(&w);

    char *text = NULL;
    size_t tlen = 0;
    FILE *mf = open_memstream(&text, &tlen);
    assert_int_equal(m3_inspect_print(mf, &c, s, &e), 0);
    fclose(mf);
    fputs(text, stdout);
    assert_non_null(strstr(text, "427,040,140,160"));
    assert_non_null(strstr(text, "24,733,286,784"));
    assert_non_null(strstr(text, "(427.04B total, 24.73B active)"));
    assert_non_null(strstr(text, "layers 0-2      dense causal attention + dense MLP (3 layers)"));
    assert_non_null(strstr(text, "layers 3-59     sparse (MSA) attention + MoE (57 layers)"));
    assert_non_null(strstr(text, "vision and projector excluded"));
    free(text);

    long hwm = status_kb("VmHWM:"), rss = status_kb("VmRSS:");
    print_message("resident: VmRSS %ld kB, VmHWM %ld kB\n", rss, hwm);
    assert_true(hwm > 0 && hwm < 200 * 1024);
    assert_true(rss > 0 && rss < 200 * 1024);
    m3_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_size_sparse_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
