"""make_tiny_model.py — deterministic random M3-shaped checkpoints in the
public layout (notes A.2) with a released-dialect config.json (notes A.1).

  /usr/bin/python3 tools/make_tiny_model.py --out models/tiny

The default ("tiny") is M3 in miniature: hidden 64, 5 layers (0-2 dense MLP +
dense attention, 3-4 MoE + MSA), 4 heads / 2 KV heads / head_dim 16 /
rotary 8, 8 experts top-2 + 1 shared, vocab 512, 2 index heads of dim 16,
MSA block 4, top-3 blocks, local 1. bf16 weights, fp32 router weight and
correction bias (nonzero). Layer 0's MLP has one amplified gate/up row so
the SwiGLU clamps at +-7 are exercised by ordinary inputs.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
from m3np import bf16_round, P  # noqa: E402

F32 = np.float32


def tiny_config(**kw):
    """Released-checkpoint dialect config dict; kw overrides text fields:
    H, L, nh, nkv, hd, rd, V, E, topk, I, I_dense, I_shared, idx_dim, idx_heads,
    block, idx_topk, local, init, dense_layers (count of leading dense layers)."""
    H = kw.get("H", 64)
    L = kw.get("L", 5)
    nd = kw.get("dense_layers", 3)
    hd = kw.get("hd", 16)
    rd = kw.get("rd", 8)
    pattern = [0] * min(nd, L) + [1] * max(0, L - nd)
    text = {
        "architectures": ["MiniMaxM3SparseForCausalLM"],
        "hidden_size": H,
        "intermediate_size": kw.get("I", 32),
        "dense_intermediate_size": kw.get("I_dense", 128),
        "shared_intermediate_size": kw.get("I_shared", 32),
        "num_hidden_layers": L,
        "num_attention_heads": kw.get("nh", 4),
        "num_key_value_heads": kw.get("nkv", 2),
        "head_dim": hd,
        "vocab_size": kw.get("V", 512),
        "max_position_embeddings": kw.get("max_pos", 4096),
        "rms_norm_eps": 1e-06,
        "use_gemma_norm": True,
        "attention_output_gate": False,
        "rope_theta": 5000000,
        "rotary_dim": rd,
        "partial_rotary_factor": rd / hd,
        "hidden_act": "swigluoai",
        "use_qk_norm": True,
        "qk_norm_type": "per_head",
        "tie_word_embeddings": False,
        "num_local_experts": kw.get("E", 8),
        "num_experts_per_tok": kw.get("topk", 2),
        "n_shared_experts": 1,
        "scoring_func": "sigmoid",
        "use_routing_bias": True,
        "routed_scaling_factor": 2.0,
        "swiglu_alpha": 1.702,
        "swiglu_limit": 7.0,
        "moe_layer_freq": pattern,
        "num_mtp_modules": 0,
        "num_nextn_predict_layers": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "sparse_attention_config": {
            "use_sparse_attention": True,
            "sparse_index_dim": kw.get("idx_dim", hd),
            "sparse_num_index_heads": kw.get("idx_heads", kw.get("nkv", 2)),
            "sparse_topk_blocks": kw.get("idx_topk", 3),
            "sparse_block_size": kw.get("block", 4),
            "sparse_score_type": "max",
            "sparse_init_block": kw.get("init", 0),
            "sparse_local_block": kw.get("local", 1),
            "sparse_attention_freq": pattern,
            "sparse_disable_index_value": pattern,
        },
    }
    return {
        "architectures": ["MiniMaxM3SparseForConditionalGeneration"],
        "model_type": "minimax_m3_vl",
        "torch_dtype": "bfloat16",
        "text_config": text,
    }


def make_weights(cfg, seed, spike=True, bias_scale=0.5, lm_scale=4.0):
    """Deterministic random weights {name: (float32 values, dtype 'BF16'|'F32')}.
    bf16 tensors are already on the bf16 grid."""
    from m3np import Config
    c = Config(cfg)
    rng = np.random.default_rng(seed)
    out = {}

    def nrm(shape, std):
        return (rng.standard_normal(shape) * std).astype(F32)

    def put(name, a, dt="BF16"):
        out[name] = (bf16_round(a) if dt == "BF16" else a.astype(F32), dt)

    H = c.H
    put(P + "embed_tokens.weight", nrm((c.V, H), 1.0))
    put("language_model.lm_head.weight", nrm((c.V, H), lm_scale / np.sqrt(H)))
    put(P + "norm.weight", nrm((H,), 0.2))
    for i in range(c.L):
        lp = P + "layers.%d." % i
        put(lp + "input_layernorm.weight", nrm((H,), 0.2))
        put(lp + "post_attention_layernorm.weight", nrm((H,), 0.2))
        put(lp + "self_attn.q_proj.weight", nrm((c.nh * c.hd, H), 1 / np.sqrt(H)))
        put(lp + "self_attn.k_proj.weight", nrm((c.nkv * c.hd, H), 1 / np.sqrt(H)))
        put(lp + "self_attn.v_proj.weight", nrm((c.nkv * c.hd, H), 1 / np.sqrt(H)))
        put(lp + "self_attn.o_proj.weight", nrm((H, c.nh * c.hd), 0.7 / np.sqrt(c.nh * c.hd)))
        put(lp + "self_attn.q_norm.weight", nrm((c.hd,), 0.2))
        put(lp + "self_attn.k_norm.weight", nrm((c.hd,), 0.2))
        if c.sparse[i]:
            put(lp + "self_attn.index_q_proj.weight", nrm((c.idx_heads * c.idx_dim, H), 1 / np.sqrt(H)))
            put(lp + "self_attn.index_k_proj.weight", nrm((c.idx_dim, H), 1 / np.sqrt(H)))
            put(lp + "self_attn.index_q_norm.weight", nrm((c.idx_dim,), 0.2))
            put(lp + "self_attn.index_k_norm.weight", nrm((c.idx_dim,), 0.2))
        if c.moe[i]:
            mp = lp + "block_sparse_moe."
            put(mp + "gate.weight", nrm((c.E, H), 1 / np.sqrt(H)), "F32")
            put(mp + "e_score_correction_bias", (rng.uniform(-1, 1, c.E) * bias_scale).astype(F32), "F32")
            for e in range(c.E):
                put(mp + "experts.%d.w1.weight" % e, nrm((c.I, H), 1 / np.sqrt(H)))
                put(mp + "experts.%d.w3.weight" % e, nrm((c.I, H), 1 / np.sqrt(H)))
                put(mp + "experts.%d.w2.weight" % e, nrm((H, c.I), 0.5 / np.sqrt(c.I)))
            put(mp + "shared_experts.gate_proj.weight", nrm((c.I_shared, H), 1 / np.sqrt(H)))
            put(mp + "shared_experts.up_proj.weight", nrm((c.I_shared, H), 1 / np.sqrt(H)))
            put(mp + "shared_experts.down_proj.weight", nrm((H, c.I_shared), 0.5 / np.sqrt(c.I_shared)))
        else:
            g = nrm((c.I_dense, H), 1 / np.sqrt(H))
            u = nrm((c.I_dense, H), 1 / np.sqrt(H))
            dn = nrm((H, c.I_dense), 0.5 / np.sqrt(c.I_dense))
            if spike and i == 0:
                g[0] *= 6.0
                u[0] *= 6.0
                dn[:, 0] *= 0.25
            put(lp + "mlp.gate_proj.weight", g)
            put(lp + "mlp.up_proj.weight", u)
            put(lp + "mlp.down_proj.weight", dn)
    return out


def weights_f32(wd):
    return {k: v for k, (v, _) in wd.items()}


def save_model(d, cfg, wd, gen_cfg=True):
    """Write config.json, model.safetensors (and generation_config.json) into d.
    Returns {file name: bytes} written."""
    os.makedirs(d, exist_ok=True)
    files = {}
    cj = (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode()
    files["config.json"] = cj
    tensors = {k: (st.BF16(v) if dt == "BF16" else v) for k, (v, dt) in wd.items()}
    files["model.safetensors"] = st.dumps(tensors, {"format": "pt"})
    if gen_cfg:
        t = cfg["text_config"]
        files["generation_config.json"] = (json.dumps(
            {"bos_token_id": t["bos_token_id"], "eos_token_id": t["eos_token_id"], "do_sample": False},
            indent=2, sort_keys=True) + "\n").encode()
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    return files


TINY_SEED = 20260301


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models/tiny")
    a = ap.parse_args()
    cfg = tiny_config()
    save_model(a.out, cfg, make_weights(cfg, TINY_SEED))
    print("wrote", a.out)


if __name__ == "__main__":
    main()
