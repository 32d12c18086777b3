/* weights.h — binds checkpoint tensors to the model's named weights.
 *
 * Spec: M3-CKPT-NAMES-1 (public layout, notes A.2), M3-CKPT-NAMES-2 (HF v5
 * fused layout, notes A.4), M3-CKPT-MTP-1 (mtp.* ignored with a notice).
 *
 * Every field is a view into the store's read-only mappings: nothing is
 * copied. A fused HF v5 tensor (e.g. experts.gate_up_proj [E, 2I, H]) is
 * exposed as per-expert gate and up views by offsetting the data pointer,
 * which works because rows are contiguous. Shapes are checked against the
 * config; a missing or mis-shaped tensor is an error naming it.
 */
#ifndef M3_WEIGHTS_H
#define M3_WEIGHTS_H

#include "config.h"
#include "dtype.h"
#include "err.h"
#include "safetensors.h"

/* A row-major matrix view [rows, cols] (PyTorch Linear weight: [out, in]). */
typedef struct m3_mat {
    const void *data;
    m3_dtype dtype;
    int rows, cols;
} m3_mat;

/* A vector view [n]. */
typedef struct m3_vec {
    const void *data;
    m3_dtype dtype;
    int n;
} m3_vec;

typedef struct m3_layer_weights {
    m3_vec input_norm, post_norm;   /* (H) Gemma: y = x_hat * (1 + w) */
    m3_mat q, k, v, o;              /* q (nh*hd, H) k,v (nkv*hd, H) o (H, nh*hd) */
    m3_vec q_norm, k_norm;          /* (hd), shared by all heads */
    /* sparse (MSA) layers only; data == NULL otherwise */
    m3_mat index_q, index_k;        /* (ih*ihd, H), (ihd, H) */
    m3_vec index_q_norm, index_k_norm; /* (ihd) */
    /* dense-MLP layers only */
    m3_mat mlp_gate, mlp_up, mlp_down; /* (Id, H), (Id, H), (H, Id) */
    /* MoE layers only */
    m3_mat router;                  /* (E, H), fp32 in the checkpoint */
    m3_vec router_bias;             /* (E) e_score_correction_bias */
    m3_mat *exp_gate, *exp_up, *exp_down; /* arrays of E views: (I,H),(I,H),(H,I) */
    m3_mat sh_gate, sh_up, sh_down; /* shared expert (Is,H),(Is,H),(H,Is) */
} m3_layer_weights;

typedef struct m3_vision_layer_weights {
    m3_vec ln1_w, ln1_b, ln2_w, ln2_b;        /* (Hv) */
    m3_mat q, k, v, o;                        /* (Hv, Hv) */
    m3_vec q_b, k_b, v_b, o_b;                /* (Hv) */
    m3_mat fc1, fc2;                          /* (Iv, Hv), (Hv, Iv) */
    m3_vec fc1_b, fc2_b;
} m3_vision_layer_weights;

typedef struct m3_vision_weights {
    m3_mat patch_embed;        /* (Hv, 3*2*14*14) = Conv3d weight flattened, fp32 */
    m3_vec pre_ln_w, pre_ln_b; /* (Hv) */
    m3_vision_layer_weights *layers; /* [num_layers] */
    m3_mat proj1, proj2;       /* multi_modal_projector: (H, Hv), (H, H) */
    m3_vec proj1_b, proj2_b;
    m3_mat merge1, merge2;     /* patch_merge_mlp: (H, 4H), (H, H) */
    m3_vec merge1_b, merge2_b;
} m3_vision_weights;

typedef struct m3_weights {
    m3_mat embed;              /* (V, H) */
    m3_mat lm_head;            /* (V, H) */
    m3_vec final_norm;         /* (H) */
    m3_layer_weights *layers;  /* [num_layers] */
    int num_layers;            /* length of layers (set by m3_weights_bind) */
    int has_vision;
    m3_vision_weights vision;
    int layout;                /* 0 public checkpoint layout, 1 HF v5 fused layout */
    int ignored_mtp;           /* number of mtp.* tensors ignored */
} m3_weights;

/* Bind every weight the config needs. Allocates the layer arrays (freed by
 * m3_weights_free); tensor data stays in the store, which must outlive w. */
int m3_weights_bind(m3_weights *w, const m3_config *c, const m3_store *s, m3_err *e);
/* Free the arrays allocated by m3_weights_bind; the struct may be partly bound. */
void m3_weights_free(m3_weights *w);

/* Element (r, c) of a matrix view as fp32. */
static inline float m3_mat_at(const m3_mat *m, int r, int c)
{
    return m3_load_f32(m->data, m->dtype, (size_t)r * (size_t)m->cols + (size_t)c);
}
/* Element i of a vector view as fp32. */
static inline float m3_vec_at(const m3_vec *v, int i)
{
    return m3_load_f32(v->data, v->dtype, (size_t)i);
}

#endif
