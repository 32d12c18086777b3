/* vision_fixture.h — tiny random multimodal checkpoint for tests: the text
 * fixture of fixture.h plus a vision_config and the public-layout vision,
 * projector and merge tensors (M3-VIS-NAMES-1), all fp32 except the text.
 *
 * m3_vfixture_write(dir, o, vo, e): config.json + model.safetensors.
 */
#ifndef M3_TESTS_VISION_FIXTURE_H
#define M3_TESTS_VISION_FIXTURE_H

#include "fixture.h"

typedef struct m3_vfixture_opts {
    int hidden_size, intermediate_size, num_layers, num_heads;
    int projector_hidden_size;
    int segment_max_frames;
    uint64_t seed;
} m3_vfixture_opts;

static inline void m3_vfixture_defaults(m3_vfixture_opts *v)
{
    v->hidden_size = 64; /* equal to the text fixture's H, so merge-first is well typed */
    v->intermediate_size = 96;
    v->num_layers = 2;
    v->num_heads = 2;    /* head_dim 32: rope dims 3*2*((32/3)/2) = 30 */
    v->projector_hidden_size = 48;
    v->segment_max_frames = 4;
    v->seed = 99;
}

static inline int m3_vfixture_tensor(m3_st_writer *w, const m3_vfixture_opts *v, const char *name,
                                     int ndim, const int64_t *shape, float a, float bias,
                                     m3_err *e)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    float *buf = malloc((size_t)n * sizeof *buf);
    if (!buf)
        return m3_fail(e, "vfixture: out of memory");
    uint64_t st = v->seed;
    for (const char *p = name; *p; p++)
        st = st * 1099511628211ull + (unsigned char)*p;
    for (int64_t i = 0; i < n; i++)
        buf[i] = bias + m3_fixture_uniform(&st, a);
    int rc = m3_st_writer_add(w, name, M3_F32, ndim, shape, buf, e);
    free(buf);
    return rc;
}

static inline int m3_vfixture_write(const char *dir, const m3_fixture_opts *o,
                                    const m3_vfixture_opts *v, m3_err *e)
{
    if (m3_fixture_write(dir, o, e) != 0)
        return -1;
    /* Insert vision_config and projector_hidden_size into config.json. */
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f)
        return m3_fail(e, "vfixture: cannot read %s", path);
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    char *brace = strchr(text, '{');
    if (!brace)
        return m3_fail(e, "vfixture: %s has no object", path);
    f = fopen(path, "wb");
    if (!f)
        return m3_fail(e, "vfixture: cannot write %s", path);
    fprintf(f, "{\n  \"projector_hidden_size\": %d,\n  \"vision_config\": {\"hidden_size\": %d, "
               "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
               "\"patch_size\": 14, \"num_channels\": 3, \"hidden_act\": \"gelu\", "
               "\"layer_norm_eps\": 1e-05, \"rope_theta\": 10000.0, \"rope_mode\": \"3d\", "
               "\"position_embedding_type\": \"rope\", \"vision_segment_max_frames\": %d, "
               "\"temporal_patch_size\": 2, \"spatial_merge_size\": 2},",
            v->projector_hidden_size, v->hidden_size, v->intermediate_size, v->num_layers,
            v->num_heads, v->segment_max_frames);
    fputs(brace + 1, f);
    fclose(f);

    m3_st_writer *w = m3_st_writer_new();
    if (!w)
        return m3_fail(e, "vfixture: out of memory");
    int rc = m3_fixture_add_weights(w, o, e);
    const int Hv = v->hidden_size, Iv = v->intermediate_size, H = o->hidden_size;
    const int Pj = v->projector_hidden_size;
    char n[256];
    const char *VP = "vision_tower.vision_model.";
#define T1(nm, d0, a, b)                                                                        \
    do {                                                                                        \
        int64_t s_[1] = {d0};                                                                   \
        if (rc == 0)                                                                            \
            rc = m3_vfixture_tensor(w, v, nm, 1, s_, a, b, e);                                  \
    } while (0)
#define T2(nm, d0, d1, a)                                                                       \
    do {                                                                                        \
        int64_t s_[2] = {d0, d1};                                                               \
        if (rc == 0)                                                                            \
            rc = m3_vfixture_tensor(w, v, nm, 2, s_, a, 0.0f, e);                               \
    } while (0)
    {
        int64_t pe[5] = {Hv, 3, 2, 14, 14};
        snprintf(n, sizeof n, "%sembeddings.patch_embedding.weight", VP);
        if (rc == 0)
            rc = m3_vfixture_tensor(w, v, n, 5, pe, sqrtf(3.0f / 1176), 0.0f, e);
    }
    snprintf(n, sizeof n, "%spre_layrnorm.weight", VP);
    T1(n, Hv, 0.2f, 1.0f);
    snprintf(n, sizeof n, "%spre_layrnorm.bias", VP);
    T1(n, Hv, 0.1f, 0.0f);
    for (int i = 0; i < v->num_layers && rc == 0; i++) {
        const char *ln[4] = {"layer_norm1.weight", "layer_norm1.bias", "layer_norm2.weight",
                             "layer_norm2.bias"};
        for (int k = 0; k < 4; k++) {
            snprintf(n, sizeof n, "%sencoder.layers.%d.%s", VP, i, ln[k]);
            T1(n, Hv, k % 2 ? 0.1f : 0.2f, k % 2 ? 0.0f : 1.0f);
        }
        const char *pr[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
        for (int k = 0; k < 4; k++) {
            snprintf(n, sizeof n, "%sencoder.layers.%d.self_attn.%s.weight", VP, i, pr[k]);
            T2(n, Hv, Hv, sqrtf(3.0f / Hv));
            snprintf(n, sizeof n, "%sencoder.layers.%d.self_attn.%s.bias", VP, i, pr[k]);
            T1(n, Hv, 0.1f, 0.0f);
        }
        snprintf(n, sizeof n, "%sencoder.layers.%d.mlp.fc1.weight", VP, i);
        T2(n, Iv, Hv, sqrtf(3.0f / Hv));
        snprintf(n, sizeof n, "%sencoder.layers.%d.mlp.fc1.bias", VP, i);
        T1(n, Iv, 0.1f, 0.0f);
        snprintf(n, sizeof n, "%sencoder.layers.%d.mlp.fc2.weight", VP, i);
        T2(n, Hv, Iv, sqrtf(3.0f / Iv));
        snprintf(n, sizeof n, "%sencoder.layers.%d.mlp.fc2.bias", VP, i);
        T1(n, Hv, 0.1f, 0.0f);
    }
    T2("multi_modal_projector.linear_1.weight", Pj, Hv, sqrtf(3.0f / Hv));
    T1("multi_modal_projector.linear_1.bias", Pj, 0.1f, 0.0f);
    T2("multi_modal_projector.linear_2.weight", H, Pj, sqrtf(3.0f / Pj));
    T1("multi_modal_projector.linear_2.bias", H, 0.1f, 0.0f);
    T2("patch_merge_mlp.linear_1.weight", Pj, 4 * H, sqrtf(3.0f / (4 * H)));
    T1("patch_merge_mlp.linear_1.bias", Pj, 0.1f, 0.0f);
    T2("patch_merge_mlp.linear_2.weight", H, Pj, sqrtf(3.0f / Pj));
    T1("patch_merge_mlp.linear_2.bias", H, 0.1f, 0.0f);
#undef T1
#undef T2
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (rc == 0)
        rc = m3_st_writer_save(w, path, e);
    m3_st_writer_free(w);
    return rc;
}

#endif
