/* test_config.c — config.json dialects and validation (M3-CFG-*).
 *
 * tests/data/m3-config.json is the released checkpoint's config.json
 * reconstructed from notes A.1 (60-entry layer arrays, image_grid_pinpoints
 * string, auto_map...). tests/data/m3-config-hfv5.json is the same model in
 * the HF v5 saved form (layer_types, mlp_layer_types, index_*,
 * rope_parameters, hidden_act "silu"). Both must load to identical structs.
 * Expected values below are the A.1 table entries.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <cJSON.h>

#include "config.h"

#define REAL "tests/data/m3-config.json"
#define HFV5 "tests/data/m3-config-hfv5.json"

static cJSON *load_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    assert_non_null(j);
    return j;
}

static int parse_json(m3_config *c, const cJSON *j, int lenient, m3_err *e)
{
    char *s = cJSON_PrintUnformatted(j);
    m3_config_opts o = {lenient};
    int rc = m3_config_parse(c, s, strlen(s), "config.json", &o, e);
    free(s);
    return rc;
}

static void test_real_values(void **state)
{
    (void)state;
    m3_config c;
    m3_err e = {{0}};
    if (m3_config_load(&c, REAL, NULL, &e) != 0)
        fail_msg("%s", e.msg);
    const m3_text_config *t = &c.text;
    assert_int_equal(t->hidden_size, 6144);
    assert_int_equal(t->intermediate_size, 3072);
    assert_int_equal(t->dense_intermediate_size, 12288);
    assert_int_equal(t->shared_intermediate_size, 3072);
    assert_int_equal(t->num_layers, 60);
    assert_int_equal(t->num_heads, 64);
    assert_int_equal(t->num_kv_heads, 4);
    assert_int_equal(t->head_dim, 128);
    assert_int_equal(t->vocab_size, 200064);
    assert_int_equal(t->max_position_embeddings, 1048576);
    assert_true(t->rms_norm_eps == 1e-6f);
    assert_true(t->rope_theta == 5e6);
    assert_int_equal(t->rotary_dim, 64);
    assert_int_equal(t->num_experts, 128);
    assert_int_equal(t->num_experts_per_tok, 4);
    assert_int_equal(t->n_shared_experts, 1);
    assert_true(t->routed_scaling_factor == 2.0f);
    assert_int_equal(t->use_routing_bias, 1);
    assert_true(t->swiglu_alpha == 1.702f);
    assert_true(t->swiglu_limit == 7.0f);
    assert_true(t->swiglu_beta == 1.0f); /* absent -> 1.0 */
    assert_int_equal(t->tie_word_embeddings, 0);
    assert_int_equal(t->index_head_dim, 128);
    assert_int_equal(t->index_n_heads, 4);
    assert_int_equal(t->index_topk, 16);
    assert_int_equal(t->index_block_size, 128);
    assert_int_equal(t->index_local_blocks, 1);
    assert_int_equal(t->index_init_blocks, 0);
    for (int i = 0; i < 60; i++) {
        assert_int_equal(t->layer_sparse[i], i >= 3);
        assert_int_equal(t->layer_moe[i], i >= 3);
    }
    assert_int_equal(t->bos_token_id, 200034); /* absent -> HF default */
    assert_int_equal(t->eos_token_id, 200020);
    assert_int_equal(c.has_vision, 1);
    assert_int_equal(c.vision.hidden_size, 1280);
    assert_int_equal(c.vision.intermediate_size, 5120);
    assert_int_equal(c.vision.num_layers, 32);
    assert_int_equal(c.vision.num_heads, 16);
    assert_int_equal(c.vision.patch_size, 14);
    assert_int_equal(c.vision.temporal_patch_size, 2);
    assert_int_equal(c.vision.spatial_merge_size, 2);
    assert_int_equal(c.vision.num_channels, 3);
    assert_true(c.vision.rope_theta == 10000.0);
    assert_true(c.vision.layer_norm_eps == 1e-5f);
    assert_int_equal(c.vision.segment_max_frames, 4);
    assert_int_equal(c.vision.projector_hidden_size, 6144);
    assert_int_equal(c.image_token_id, 200025);
    assert_int_equal(c.video_token_id, 200026);
    assert_int_equal(c.num_mtp_modules, 7);
    assert_int_equal(c.n_warnings, 0);
}

static void test_dialects_identical(void **state)
{
    (void)state;
    m3_config a, b;
    m3_err e = {{0}};
    if (m3_config_load(&a, REAL, NULL, &e) != 0)
        fail_msg("%s", e.msg);
    if (m3_config_load(&b, HFV5, NULL, &e) != 0)
        fail_msg("%s", e.msg);
    assert_memory_equal(&a, &b, sizeof a);

    /* flat text-only form: text_config's keys at top level */
    cJSON *j = load_json(REAL);
    cJSON *tc = cJSON_DetachItemFromObject(j, "text_config");
    cJSON_AddStringToObject(tc, "model_type", "minimax_m3_vl_text");
    m3_config f;
    if (parse_json(&f, tc, 0, &e) != 0)
        fail_msg("%s", e.msg);
    assert_int_equal(f.has_vision, 0);
    assert_memory_equal(&f.text, &a.text, sizeof a.text);
    cJSON_Delete(tc);
    cJSON_Delete(j);

    /* HF v5 text_config alone, flat */
    j = load_json(HFV5);
    tc = cJSON_DetachItemFromObject(j, "text_config");
    if (parse_json(&f, tc, 0, &e) != 0)
        fail_msg("%s", e.msg);
    assert_memory_equal(&f.text, &a.text, sizeof a.text);
    cJSON_Delete(tc);
    cJSON_Delete(j);
}

/* Load the real config, apply edit, parse; expect failure containing frag. */
typedef void (*edit_fn)(cJSON *root, cJSON *text, cJSON *sparse, cJSON *vision);

static void expect_err(const char *file, edit_fn fn, const char *frag)
{
    cJSON *j = load_json(file);
    cJSON *tc = cJSON_GetObjectItem(j, "text_config");
    fn(j, tc, cJSON_GetObjectItem(tc, "sparse_attention_config"),
       cJSON_GetObjectItem(j, "vision_config"));
    m3_config c;
    m3_err e = {{0}};
    int rc = parse_json(&c, j, 0, &e);
    cJSON_Delete(j);
    if (rc != -1 || !strstr(e.msg, frag))
        fail_msg("rc %d, message '%s' lacks '%s'", rc, e.msg, frag);
    assert_non_null(strstr(e.msg, "config.json: "));
}

static void set_num(cJSON *o, const char *k, double v)
{
    cJSON_ReplaceItemInObject(o, k, cJSON_CreateNumber(v));
}

static void e_unknown(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_AddNumberToObject(t, "foo", 1);
}
static void e_unknown_top(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)t, (void)s, (void)v;
    cJSON_AddNumberToObject(r, "quantization_config", 1);
}
static void e_unknown_sparse(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)t, (void)v;
    cJSON_AddNumberToObject(s, "sparse_foo", 1);
}
static void e_unknown_vision(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)t, (void)s;
    cJSON_AddNumberToObject(v, "bar", 1);
}
static void e_kv(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)v;
    set_num(t, "num_key_value_heads", 5);
    set_num(s, "sparse_num_index_heads", 5);
}
static void e_index_heads(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)t, (void)v;
    set_num(s, "sparse_num_index_heads", 2);
}
static void e_rotary_odd(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_DeleteItemFromObject(t, "partial_rotary_factor");
    set_num(t, "rotary_dim", 63);
}
static void e_rotary_big(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_DeleteItemFromObject(t, "partial_rotary_factor");
    set_num(t, "rotary_dim", 256);
}
static void e_rotary_disagree(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    set_num(t, "partial_rotary_factor", 0.25);
}
static void e_moe_len(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(t, "moe_layer_freq"), 0);
}
static void e_sparse_len(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)t, (void)v;
    cJSON_AddItemToArray(cJSON_GetObjectItem(s, "sparse_attention_freq"), cJSON_CreateNumber(1));
}
static void e_layers_big(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    set_num(t, "num_hidden_layers", 600);
}
static void e_topk(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    set_num(t, "num_experts_per_tok", 129);
}
static void e_score(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)t, (void)v;
    cJSON_ReplaceItemInObject(s, "sparse_score_type", cJSON_CreateString("mean"));
}
static void e_act(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_ReplaceItemInObject(t, "hidden_act", cJSON_CreateString("gelu"));
}
static void e_vision_heads(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)t, (void)s;
    set_num(v, "num_attention_heads", 15);
}
static void e_vision_odd(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)t, (void)s;
    set_num(v, "num_attention_heads", 256); /* head_dim 1280 / 256 = 5: odd */
}
static void e_not_int(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    set_num(t, "hidden_size", 6144.5);
}
static void e_string_int(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_ReplaceItemInObject(t, "vocab_size", cJSON_CreateString("200064"));
}
static void e_missing(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_DeleteItemFromObject(t, "hidden_size");
}
static void e_disagree_types(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON *lt = cJSON_CreateArray();
    for (int i = 0; i < 60; i++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(i >= 4 ? "minimax_m3_sparse"
                                                            : "full_attention"));
    cJSON_AddItemToObject(t, "layer_types", lt);
}
static void e_disagree_index(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_AddNumberToObject(t, "index_topk_blocks", 8);
}
static void e_index_value(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)t, (void)v;
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(s, "sparse_disable_index_value"), 5,
                             cJSON_CreateNumber(0));
}
static void e_use_sparse(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)t, (void)v;
    cJSON_ReplaceItemInObject(s, "use_sparse_attention", cJSON_CreateFalse());
}
static void e_use_sparse_types(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    e_use_sparse(r, t, s, v);
    e_disagree_types(r, t, s, v);
}
static void e_no_intermediate(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_DeleteItemFromObject(t, "intermediate_size");
}
static void e_no_experts(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_DeleteItemFromObject(t, "num_local_experts");
}
static void e_head_dim_odd(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    set_num(t, "head_dim", 127);
    set_num(t, "rotary_dim", 64);
    cJSON_DeleteItemFromObject(t, "partial_rotary_factor");
}
static void e_rope_scaling(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "yarn");
    cJSON_AddItemToObject(t, "rope_scaling", o);
}
static void e_flag_value(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(t, "moe_layer_freq"), 7, cJSON_CreateNumber(2));
}
static void e_model_type(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)t, (void)s, (void)v;
    cJSON_ReplaceItemInObject(r, "model_type", cJSON_CreateString("llava"));
}
static void e_merge_conflict(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)t, (void)s;
    cJSON_AddNumberToObject(v, "spatial_merge_size", 4);
}
static void e_gemma(cJSON *r, cJSON *t, cJSON *s, cJSON *v)
{
    (void)r, (void)s, (void)v;
    cJSON_ReplaceItemInObject(t, "use_gemma_norm", cJSON_CreateFalse());
}

static void test_errors_name_field(void **state)
{
    (void)state;
    expect_err(REAL, e_unknown, "config.json: unknown key 'text_config.foo'");
    expect_err(REAL, e_unknown_top, "unknown key 'quantization_config'");
    expect_err(REAL, e_unknown_sparse, "unknown key 'text_config.sparse_attention_config.sparse_foo'");
    expect_err(REAL, e_unknown_vision, "unknown key 'vision_config.bar'");
    expect_err(REAL, e_kv, "num_attention_heads (64) is not a multiple of num_key_value_heads (5)");
    expect_err(REAL, e_index_heads, "index_n_heads (2) must equal num_key_value_heads (4)");
    expect_err(REAL, e_rotary_odd, "rotary_dim 63 must be even");
    expect_err(REAL, e_rotary_big, "rotary_dim 256 must be even and in (0, head_dim 128]");
    expect_err(REAL, e_rotary_disagree, "text_config.rotary_dim (64) disagrees with partial_rotary_factor");
    expect_err(REAL, e_moe_len, "text_config.moe_layer_freq has 59 entries (vs num_hidden_layers 60)");
    expect_err(REAL, e_sparse_len, "sparse_attention_freq has 61 entries");
    expect_err(REAL, e_layers_big, "text_config.num_hidden_layers too large (600 vs max 512)");
    expect_err(REAL, e_topk, "num_experts_per_tok (129) exceeds num_local_experts (128)");
    expect_err(REAL, e_score, "sparse_score_type is \"mean\" (supported: \"max\")");
    expect_err(REAL, e_act, "text_config.hidden_act is \"gelu\"");
    expect_err(REAL, e_vision_heads, "vision_config head_dim = hidden_size 1280 / num_attention_heads 15");
    expect_err(REAL, e_vision_odd, "vision_config head_dim");
    expect_err(REAL, e_not_int, "text_config.hidden_size must be an integer (got 6144.5)");
    expect_err(REAL, e_string_int, "text_config.vocab_size must be an integer");
    expect_err(REAL, e_missing, "missing required key 'text_config.hidden_size'");
    expect_err(REAL, e_disagree_types, "text_config.layer_types disagrees with "
                                       "text_config.sparse_attention_config.sparse_attention_freq");
    expect_err(REAL, e_disagree_index, "text_config.index_topk_blocks (8) disagrees with "
                                       "text_config.sparse_attention_config.sparse_topk_blocks (16)");
    expect_err(REAL, e_index_value, "sparse_disable_index_value[5] is 0");
    expect_err(REAL, e_use_sparse_types, "text_config.layer_types disagrees with "
               "text_config.sparse_attention_config.sparse_attention_freq (use_sparse_attention is false)");
    expect_err(REAL, e_no_intermediate, "missing required key 'text_config.intermediate_size'");
    expect_err(REAL, e_no_experts, "missing required key 'text_config.num_local_experts' (the config has MoE layers)");
    expect_err(REAL, e_head_dim_odd, "head_dim 127 must be even");
    expect_err(REAL, e_rope_scaling, "text_config.rope_scaling is set");
    expect_err(REAL, e_flag_value, "text_config.moe_layer_freq[7] must be 0 or 1");
    expect_err(REAL, e_model_type, "model_type is \"llava\"");
    expect_err(REAL, e_merge_conflict, "spatial_merge_size (2) disagrees with an earlier value (4)");
    expect_err(REAL, e_gemma, "use_gemma_norm is false");
    expect_err(HFV5, e_unknown, "unknown key 'text_config.foo'");
}

static void test_lenient_and_syntax(void **state)
{
    (void)state;
    m3_config strict, len;
    m3_err e = {{0}};
    assert_int_equal(m3_config_load(&strict, REAL, NULL, &e), 0);
    cJSON *j = load_json(REAL);
    cJSON *tc = cJSON_GetObjectItem(j, "text_config");
    cJSON_AddNumberToObject(tc, "foo", 1);
    cJSON_AddNumberToObject(j, "bar", 2);
    if (parse_json(&len, j, 1, &e) != 0)
        fail_msg("%s", e.msg);
    cJSON_Delete(j);
    assert_int_equal(len.n_warnings, 2);
    assert_non_null(strstr(len.warnings, "'text_config.foo'"));
    assert_non_null(strstr(len.warnings, "'bar'"));
    len.n_warnings = 0;
    memset(len.warnings, 0, sizeof len.warnings);
    assert_memory_equal(&len, &strict, sizeof len);

    /* malformed JSON, non-object, duplicate keys, eos list */
    const char *bad = "{\"text_config\": {\"hidden_size\": 8,, }}";
    m3_config c;
    assert_int_equal(m3_config_parse(&c, bad, strlen(bad), "config.json", NULL, &e), -1);
    assert_non_null(strstr(e.msg, "config.json: not valid JSON"));
    assert_int_equal(m3_config_parse(&c, "[1]", 3, "x.json", NULL, &e), -1);
    assert_non_null(strstr(e.msg, "x.json: top level is not a JSON object"));
    const char *dup = "{\"hidden_size\":8,\"hidden_size\":8}";
    assert_int_equal(m3_config_parse(&c, dup, strlen(dup), "config.json", NULL, &e), -1);
    assert_non_null(strstr(e.msg, "duplicate key 'hidden_size'"));
    assert_int_equal(m3_config_load(&c, "tests/data/no-such-config.json", NULL, &e), -1);
    assert_non_null(strstr(e.msg, "no-such-config.json: cannot open"));

    const char *tiny = "{\"model_type\":\"minimax_m3_vl_text\",\"hidden_size\":8,"
                       "\"num_hidden_layers\":2,\"num_attention_heads\":2,"
                       "\"num_key_value_heads\":1,\"head_dim\":4,\"vocab_size\":16,"
                       "\"rotary_dim\":4,\"intermediate_size\":4,\"dense_intermediate_size\":6,"
                       "\"num_local_experts\":3,\"num_experts_per_tok\":2,"
                       "\"mlp_layer_types\":[\"dense\",\"sparse\"],"
                       "\"layer_types\":[\"full_attention\",\"minimax_m3_sparse\"],"
                       "\"index_n_heads\":1,\"index_head_dim\":4,\"index_block_size\":2,"
                       "\"index_topk_blocks\":2,\"eos_token_id\":[5,6],\"bos_token_id\":1}";
    if (m3_config_parse(&c, tiny, strlen(tiny), "config.json", NULL, &e) != 0)
        fail_msg("%s", e.msg);
    assert_int_equal(c.text.eos_token_id, 5);
    assert_int_equal(c.text.layer_moe[0], 0);
    assert_int_equal(c.text.layer_moe[1], 1);
    assert_int_equal(c.text.layer_sparse[1], 1);
    assert_int_equal(c.text.index_local_blocks, 1); /* HF default */
    assert_int_equal(c.has_vision, 0);
    assert_int_equal(m3_config_validate(&c, "config.json", &e), 0);
    /* defaults of M3-CFG-2 for a minimal dense config; booleans as 0/1 */
    const char *mini = "{\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
                       "\"intermediate_size\":4,\"vocab_size\":5,\"moe_layer_freq\":[0],"
                       "\"tie_word_embeddings\":1}";
    m3_config m;
    if (m3_config_parse(&m, mini, strlen(mini), "config.json", NULL, &e) != 0)
        fail_msg("%s", e.msg);
    assert_int_equal(m.text.num_kv_heads, 2);
    assert_int_equal(m.text.head_dim, 4);
    assert_int_equal(m.text.rotary_dim, 4);
    assert_int_equal(m.text.dense_intermediate_size, 4);
    assert_int_equal(m.text.shared_intermediate_size, 4);
    assert_int_equal(m.text.tie_word_embeddings, 1);
    assert_int_equal(m.text.layer_sparse[0], 0);

    /* use_sparse_attention false: every layer dense */
    j = load_json(REAL);
    tc = cJSON_GetObjectItem(j, "text_config");
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(tc, "sparse_attention_config"),
                              "use_sparse_attention", cJSON_CreateFalse());
    if (parse_json(&m, j, 0, &e) != 0)
        fail_msg("%s", e.msg);
    cJSON_Delete(j);
    for (int i = 0; i < 60; i++)
        assert_int_equal(m.text.layer_sparse[i], 0);

    c.text.num_kv_heads = 0;
    assert_int_equal(m3_config_validate(&c, "config.json", &e), -1);
    assert_non_null(strstr(e.msg, "num_key_value_heads must be positive"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_values),
        cmocka_unit_test(test_dialects_identical),
        cmocka_unit_test(test_errors_name_field),
        cmocka_unit_test(test_lenient_and_syntax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
