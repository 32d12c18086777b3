/* fuzz_evidence.c — a golden's tie evidence file (M3-VEC-11) as m3-conform reads
 * it: cf_evidence_parse of the image against a small model golden (one sparse +
 * MoE layer: block_indices [1, 2, 2], moe.scores / topk_index over 4 experts,
 * 3 greedy tokens over a vocabulary of 8), once bound to a golden sha256 and once
 * unchecked. An accepted file must hold only F32 tensors shaped after the golden,
 * with every tensor the golden's discrete ones need. */
#include "conform.h"
#include "common.h"

static const char k_sha[] = "0000000000000000000000000000000000000000000000000000000000000000";

static void check_accepted(const cf_tset *ev, const cf_tset *golden)
{
    for (int i = 0; i < ev->n; i++) {
        const cf_tensor *t = &ev->t[i];
        if (t->is_int)
            abort(); /* evidence is F32 only */
        m3fuzz_touch(t->f, t->n * sizeof *t->f);
    }
    const cf_tensor *bs = cf_tset_get(ev, "layers.0.attn.block_scores");
    const cf_tensor *b = cf_tset_get(ev, "layers.0.moe.bias");
    const cf_tensor *gl = cf_tset_get(ev, "greedy_logits");
    if (!bs || !b || !gl)
        abort(); /* the golden's block_indices, topk_index and greedy_tokens need them */
    if (bs->ndim != 3 || bs->shape[0] != 1 || bs->shape[1] != 2 || b->ndim != 1 || b->shape[0] != 4 ||
        gl->ndim != 2 || gl->shape[0] != 3 || gl->shape[1] != 8)
        abort();
    (void)golden;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    m3_err e;
    cf_tset golden = {0};
    static const float z[64];
    static const int32_t zi[8];
    const int64_t th[2] = {2, 4}, tv[2] = {2, 8}, bi[3] = {1, 2, 2}, te[2] = {2, 4}, tk[2] = {2, 1}, gt[1] = {3};
    int ok = cf_tset_add_f(&golden, "layers.0.attn_norm", 2, th, z, &e) == 0 &&
             cf_tset_add_i(&golden, "layers.0.attn.block_indices", 3, bi, zi, &e) == 0 &&
             cf_tset_add_f(&golden, "layers.0.moe.scores", 2, te, z, &e) == 0 &&
             cf_tset_add_i(&golden, "layers.0.moe.topk_index", 2, tk, zi, &e) == 0 &&
             cf_tset_add_f(&golden, "logits", 2, tv, z, &e) == 0 &&
             cf_tset_add_i(&golden, "greedy_tokens", 1, gt, zi, &e) == 0;
    for (int k = 0; ok && k < 2; k++) {
        cf_tset ev = {0};
        if (cf_evidence_parse(&ev, data, size, "fuzz/evidence.safetensors", &golden, k ? NULL : k_sha, &e) == 0)
            check_accepted(&ev, &golden);
        else if (!strstr(e.msg, "fuzz/evidence.safetensors"))
            abort(); /* every refusal names the file */
        cf_tset_free(&ev);
    }
    cf_tset_free(&golden);
    return 0;
}
