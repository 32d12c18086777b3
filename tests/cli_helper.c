/* cli_helper.c — helper program for tests/cli_test.sh (not a test itself).
 *
 *   cli_helper fixture DIR [--layers N] [--mtp N] [--eos ID] [--max-pos N] [--seed S]
 *                      [--hidden H] [--heads N] [--kv-heads N] [--head-dim D] [--rotary R]
 *                      [--vocab V] [--dense N] [--block B] [--topk K] [--index-dim D]
 *       write a tiny random M3 checkpoint (tests/fixture.h) into DIR (--dense: the
 *       first N layers dense attention + dense MLP, the rest MSA + MoE)
 *   cli_helper dump-check DUMP DIR T [--bf16]
 *       check that DUMP holds exactly the activation names of a T-row forward
 *       of the model in DIR (M3-DUMP-*), with the right shapes and dtypes;
 *       with --bf16 every fp32 value must also be a bf16 value
 *   cli_helper vfixture DIR [--vocab N]
 *       write a tiny random multimodal checkpoint (tests/vision_fixture.h)
 *   cli_helper png FILE W H
 *       write a W x H RGB gradient PNG (an input for --image)
 *   cli_helper pixels DUMP OUT
 *       copy vision.pixel_values / vision.grid_thw of DUMP into OUT as the
 *       pixel_values / image_grid_thw of a --pixels input file
 *   cli_helper same DUMP1 DUMP2 NAME
 *       exit 0 iff tensor NAME has the same dtype, shape and bytes in both
 *   cli_helper edit IN OUT OP...
 *       copy the tensors of IN (not its metadata) to OUT, edited by each OP:
 *       other:NAME:ROW:COL  in the I32 [rows, k] tensor NAME, replace element
 *                           (ROW, COL) by the smallest id absent from the row
 *       bump:NAME:FROM:TO:D add D to every element of rows FROM .. TO - 1 of
 *                           the F32 tensor NAME (rows = the first dimension)
 * Prints "ok ..." and exits 0, or prints the problem and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fixture.h"
#include "vision_fixture.h"

#include <png.h>
#include "safetensors.h"

static int cmd_fixture(int argc, char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "usage: cli_helper fixture DIR [options]\n");
        return 2;
    }
    m3_fixture_opts o;
    m3_fixture_defaults(&o);
    for (int i = 1; i + 1 < argc; i += 2) {
        long long v = atoll(argv[i + 1]);
        if (!strcmp(argv[i], "--layers"))
            o.num_layers = (int)v;
        else if (!strcmp(argv[i], "--mtp"))
            o.mtp_tensors = (int)v;
        else if (!strcmp(argv[i], "--eos"))
            o.eos_token_id = (int)v;
        else if (!strcmp(argv[i], "--max-pos"))
            o.max_position_embeddings = v;
        else if (!strcmp(argv[i], "--seed"))
            o.seed = (uint64_t)v;
        else if (!strcmp(argv[i], "--hidden"))
            o.hidden_size = (int)v;
        else if (!strcmp(argv[i], "--heads"))
            o.num_heads = (int)v;
        else if (!strcmp(argv[i], "--kv-heads"))
            o.num_kv_heads = (int)v;
        else if (!strcmp(argv[i], "--head-dim"))
            o.head_dim = (int)v;
        else if (!strcmp(argv[i], "--rotary"))
            o.rotary_dim = (int)v;
        else if (!strcmp(argv[i], "--vocab"))
            o.vocab_size = (int)v;
        else if (!strcmp(argv[i], "--dense"))
            o.n_dense = (int)v;
        else if (!strcmp(argv[i], "--block"))
            o.block_size = (int)v;
        else if (!strcmp(argv[i], "--topk"))
            o.index_topk = (int)v;
        else if (!strcmp(argv[i], "--index-dim"))
            o.index_head_dim = (int)v;
        else {
            fprintf(stderr, "cli_helper fixture: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    m3_err e = {{0}};
    if (m3_fixture_write(argv[0], &o, &e) != 0) {
        fprintf(stderr, "cli_helper fixture: %s\n", e.msg);
        return 1;
    }
    printf("ok fixture %s (%d layers, vocab %d)\n", argv[0], o.num_layers, o.vocab_size);
    return 0;
}

static int check(const m3_store *st, const char *name, m3_dtype dt, int ndim, int64_t d0,
                 int64_t d1, int64_t d2, int bf16, int *count)
{
    const m3_tensor *t = m3_store_get(st, name);
    if (!t) {
        fprintf(stderr, "dump-check: missing %s\n", name);
        return -1;
    }
    int64_t want[3] = {d0, d1, d2};
    int ok = t->dtype == dt && t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == want[i];
    if (!ok) {
        fprintf(stderr, "dump-check: %s has dtype %s ndim %d shape [%lld, %lld, %lld]; want %s "
                        "[%lld, %lld, %lld]\n",
                name, m3_dtype_name(t->dtype), t->ndim, (long long)t->shape[0],
                (long long)(t->ndim > 1 ? t->shape[1] : 0),
                (long long)(t->ndim > 2 ? t->shape[2] : 0), m3_dtype_name(dt), (long long)d0,
                (long long)d1, (long long)d2);
        return -1;
    }
    if (bf16 && dt == M3_F32) {
        const float *x = t->data;
        for (int64_t i = 0; i < m3_tensor_numel(t); i++)
            if (m3_round_bf16(x[i]) != x[i]) {
                fprintf(stderr, "dump-check: %s[%lld] = %.9g is not a bf16 value\n", name,
                        (long long)i, (double)x[i]);
                return -1;
            }
    }
    (*count)++;
    return 0;
}

static int cmd_dump_check(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: cli_helper dump-check DUMP DIR T [--bf16]\n");
        return 2;
    }
    int bf16 = argc > 3 && !strcmp(argv[3], "--bf16");
    int64_t T = atoll(argv[2]);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", argv[1]);
    m3_config cfg;
    m3_err e = {{0}};
    m3_store *st = NULL;
    if (m3_config_load(&cfg, path, NULL, &e) != 0 || m3_store_open(&st, argv[0], &e) != 0) {
        fprintf(stderr, "dump-check: %s\n", e.msg);
        return 1;
    }
    const m3_text_config *c = &cfg.text;
    const int64_t H = c->hidden_size;
    int n = 0, rc = 0;
    char name[128];
    rc |= check(st, "embeddings", M3_F32, 2, T, H, 0, bf16, &n);
    rc |= check(st, "final_norm", M3_F32, 2, T, H, 0, bf16, &n);
    rc |= check(st, "logits", M3_F32, 2, T, c->vocab_size, 0, bf16, &n);
    rc |= check(st, "eagle3.aux", M3_F32, 2, T, 3 * H, 0, bf16, &n);
    for (int l = 0; l < c->num_layers; l++) {
        const char *sfx[] = {"input", "attn_norm", "attn.output", "post_attn",
                             "ffn_norm", "mlp.output", "output"};
        for (int j = 0; j < 7; j++) {
            snprintf(name, sizeof name, "layers.%d.%s", l, sfx[j]);
            rc |= check(st, name, M3_F32, 2, T, H, 0, bf16, &n);
        }
        if (c->layer_sparse[l]) {
            snprintf(name, sizeof name, "layers.%d.attn.block_indices", l);
            rc |= check(st, name, M3_I32, 3, c->index_n_heads, T, c->index_topk, 0, &n);
        }
        if (c->layer_moe[l]) {
            snprintf(name, sizeof name, "layers.%d.moe.topk_index", l);
            rc |= check(st, name, M3_I32, 2, T, c->num_experts_per_tok, 0, 0, &n);
            snprintf(name, sizeof name, "layers.%d.moe.topk_weight", l);
            rc |= check(st, name, M3_F32, 2, T, c->num_experts_per_tok, 0, 0, &n);
            snprintf(name, sizeof name, "layers.%d.moe.scores", l);
            rc |= check(st, name, M3_F32, 2, T, c->num_experts, 0, 0, &n);
        }
    }
    if (!rc && (size_t)n != m3_store_count(st)) {
        fprintf(stderr, "dump-check: %zu tensors in the dump, %d expected\n", m3_store_count(st),
                n);
        rc = -1;
    }
    m3_store_close(st);
    if (rc)
        return 1;
    printf("ok dump %s: %d tensors, T=%lld%s\n", argv[0], n, (long long)T,
           bf16 ? ", all bf16 values" : "");
    return 0;
}

static int cmd_vfixture(int argc, char **argv)
{
    if (argc != 1 && !(argc == 3 && !strcmp(argv[1], "--vocab") && atoi(argv[2]) > 0)) {
        fprintf(stderr, "usage: cli_helper vfixture DIR [--vocab N]\n");
        return 2;
    }
    m3_fixture_opts o;
    m3_vfixture_opts v;
    m3_fixture_defaults(&o);
    m3_vfixture_defaults(&v);
    if (argc == 3)
        o.vocab_size = atoi(argv[2]);
    m3_err e = {{0}};
    if (m3_vfixture_write(argv[0], &o, &v, &e) != 0) {
        fprintf(stderr, "cli_helper vfixture: %s\n", e.msg);
        return 1;
    }
    printf("ok vfixture %s\n", argv[0]);
    return 0;
}

static int cmd_png(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[1]) <= 0 || atoi(argv[2]) <= 0) {
        fprintf(stderr, "usage: cli_helper png FILE W H\n");
        return 2;
    }
    int w = atoi(argv[1]), h = atoi(argv[2]);
    unsigned char *px = malloc((size_t)w * (size_t)h * 3);
    if (!px)
        return 1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            unsigned char *p = px + ((size_t)y * (size_t)w + (size_t)x) * 3;
            p[0] = (unsigned char)(255 * x / (w > 1 ? w - 1 : 1));
            p[1] = (unsigned char)(255 * y / (h > 1 ? h - 1 : 1));
            p[2] = (unsigned char)((x * 7 + y * 13) & 255);
        }
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = PNG_FORMAT_RGB;
    int ok = png_image_write_to_file(&img, argv[0], 0, px, 0, NULL);
    free(px);
    if (!ok) {
        fprintf(stderr, "cli_helper png: %s\n", img.message);
        return 1;
    }
    printf("ok png %s %dx%d\n", argv[0], w, h);
    return 0;
}

static int cmd_pixels(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cli_helper pixels DUMP OUT\n");
        return 2;
    }
    m3_err e = {{0}};
    m3_store *st = NULL;
    m3_st_writer *w = m3_st_writer_new();
    int rc = 1;
    if (!w || m3_store_open(&st, argv[0], &e) != 0)
        goto done;
    const m3_tensor *pv = m3_store_get(st, "vision.pixel_values");
    const m3_tensor *g = m3_store_get(st, "vision.grid_thw");
    if (!pv || !g) {
        m3_fail(&e, "%s has no vision.pixel_values / vision.grid_thw", argv[0]);
        goto done;
    }
    if (m3_st_writer_add(w, "pixel_values", pv->dtype, pv->ndim, pv->shape, pv->data, &e) != 0 ||
        m3_st_writer_add(w, "image_grid_thw", g->dtype, g->ndim, g->shape, g->data, &e) != 0 ||
        m3_st_writer_save(w, argv[1], &e) != 0)
        goto done;
    printf("ok pixels %s\n", argv[1]);
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "cli_helper pixels: %s\n", e.msg);
    m3_st_writer_free(w);
    m3_store_close(st);
    return rc;
}

static int cmd_same(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: cli_helper same DUMP1 DUMP2 NAME\n");
        return 2;
    }
    m3_err e = {{0}};
    m3_store *a = NULL, *b = NULL;
    int rc = 1;
    if (m3_store_open(&a, argv[0], &e) != 0 || m3_store_open(&b, argv[1], &e) != 0) {
        fprintf(stderr, "cli_helper same: %s\n", e.msg);
        goto done;
    }
    const m3_tensor *x = m3_store_get(a, argv[2]), *y = m3_store_get(b, argv[2]);
    if (!x || !y) {
        fprintf(stderr, "cli_helper same: %s missing\n", argv[2]);
        goto done;
    }
    if (x->dtype != y->dtype || x->ndim != y->ndim || x->nbytes != y->nbytes ||
        memcmp(x->shape, y->shape, sizeof x->shape) || memcmp(x->data, y->data, x->nbytes)) {
        fprintf(stderr, "cli_helper same: %s differs\n", argv[2]);
        goto done;
    }
    printf("ok same %s\n", argv[2]);
    rc = 0;
done:
    m3_store_close(a);
    m3_store_close(b);
    return rc;
}

/* One edit of cmd_edit on the tensor data x (a copy of t). */
static int apply_edit(const char *op, const m3_tensor *t, void *x)
{
    char name[256];
    long long a = 0, b = 0;
    double d = 0.0;
    const int64_t rows = t->ndim ? t->shape[0] : 1, cols = rows ? m3_tensor_numel(t) / rows : 0;
    if (sscanf(op, "other:%255[^:]:%lld:%lld", name, &a, &b) == 3) {
        int32_t *v = x;
        if (t->dtype != M3_I32 || a < 0 || a >= rows || b < 0 || b >= cols) {
            fprintf(stderr, "cli_helper edit: %s: needs an I32 tensor and an element inside it\n", op);
            return -1;
        }
        int32_t id = 0;
        for (int found = 1; found; id += found) {
            found = 0;
            for (int64_t j = 0; j < cols; j++)
                found |= v[a * cols + j] == id;
        }
        v[a * cols + b] = id;
        return 0;
    }
    if (sscanf(op, "nan:%255[^:]:%lld", name, &a) == 2) { /* element a becomes a NaN */
        const size_t esz = m3_dtype_size(t->dtype);
        if ((t->dtype != M3_F32 && t->dtype != M3_BF16 && t->dtype != M3_F16) || a < 0 ||
            a >= m3_tensor_numel(t)) {
            fprintf(stderr, "cli_helper edit: %s: needs a float tensor and an element inside it\n", op);
            return -1;
        }
        const uint32_t f = 0x7fc00000u;
        const uint16_t h = t->dtype == M3_BF16 ? 0x7fc0 : 0x7e00;
        memcpy((char *)x + (size_t)a * esz, t->dtype == M3_F32 ? (const void *)&f : (const void *)&h, esz);
        return 0;
    }
    if (sscanf(op, "bump:%255[^:]:%lld:%lld:%lf", name, &a, &b, &d) == 4) {
        float *v = x;
        if (t->dtype != M3_F32 || a < 0 || b > rows || a >= b) {
            fprintf(stderr, "cli_helper edit: %s: needs an F32 tensor and rows inside it\n", op);
            return -1;
        }
        for (int64_t i = a * cols; i < b * cols; i++)
            v[i] += (float)d;
        return 0;
    }
    fprintf(stderr, "cli_helper edit: unknown edit %s\n", op);
    return -1;
}

static int cmd_edit(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: cli_helper edit IN OUT OP...\n");
        return 2;
    }
    m3_err e = {{0}};
    m3_store *in = NULL;
    m3_st_writer *w = m3_st_writer_new();
    int rc = 1, used = 0;
    if (!w || m3_store_open(&in, argv[0], &e) != 0) {
        fprintf(stderr, "cli_helper edit: %s\n", w ? e.msg : "out of memory");
        goto done;
    }
    for (size_t i = 0; i < m3_store_count(in); i++) {
        const m3_tensor *t = m3_store_at(in, i);
        void *x = malloc(t->nbytes ? t->nbytes : 1);
        if (!x)
            goto done;
        memcpy(x, t->data, t->nbytes);
        int bad = 0;
        for (int k = 2; k < argc && !bad; k++) {
            const char *c = strchr(argv[k], ':');
            const size_t n = strlen(t->name);
            if (c && strncmp(c + 1, t->name, n) == 0 && c[1 + n] == ':') {
                bad = apply_edit(argv[k], t, x) != 0;
                used++;
            }
        }
        if (!bad && m3_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, x, &e) != 0) {
            fprintf(stderr, "cli_helper edit: %s\n", e.msg);
            bad = 1;
        }
        free(x);
        if (bad)
            goto done;
    }
    if (used != argc - 2) {
        fprintf(stderr, "cli_helper edit: %d of %d edits name a tensor of %s\n", used, argc - 2, argv[0]);
        goto done;
    }
    if (m3_st_writer_save(w, argv[1], &e) != 0) {
        fprintf(stderr, "cli_helper edit: %s\n", e.msg);
        goto done;
    }
    printf("ok edit %s (%d edits)\n", argv[1], used);
    rc = 0;
done:
    m3_st_writer_free(w);
    m3_store_close(in);
    return rc;
}

/* misalign IN OUT: OUT = IN plus a 1-byte U8 tensor sorted first, so every
 * other tensor's data starts at an odd offset (which the format allows). */
static int cmd_misalign(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cli_helper misalign IN OUT\n");
        return 2;
    }
    m3_err e = {{0}};
    m3_store *in = NULL;
    m3_st_writer *w = m3_st_writer_new();
    int rc = 1;
    const unsigned char one = 1;
    const int64_t sh[1] = {1};
    if (!w || m3_store_open(&in, argv[0], &e) != 0 ||
        m3_st_writer_add(w, "!pad", M3_U8, 1, sh, &one, &e) != 0) {
        fprintf(stderr, "cli_helper misalign: %s\n", w ? e.msg : "out of memory");
        goto done;
    }
    for (size_t i = 0; i < m3_store_count(in); i++) {
        const m3_tensor *t = m3_store_at(in, i);
        if (m3_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, &e) != 0) {
            fprintf(stderr, "cli_helper misalign: %s\n", e.msg);
            goto done;
        }
    }
    if (m3_st_writer_save(w, argv[1], &e) != 0) {
        fprintf(stderr, "cli_helper misalign: %s\n", e.msg);
        goto done;
    }
    printf("ok misalign %s\n", argv[1]);
    rc = 0;
done:
    m3_st_writer_free(w);
    m3_store_close(in);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "misalign"))
        return cmd_misalign(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "edit"))
        return cmd_edit(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "pixels"))
        return cmd_pixels(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "same"))
        return cmd_same(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "vfixture"))
        return cmd_vfixture(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "png"))
        return cmd_png(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "fixture"))
        return cmd_fixture(argc - 2, argv + 2);
    if (argc >= 2 && !strcmp(argv[1], "dump-check"))
        return cmd_dump_check(argc - 2, argv + 2);
    fprintf(stderr, "usage: cli_helper fixture DIR [...] | dump-check DUMP DIR T [--bf16]\n");
    return 2;
}
