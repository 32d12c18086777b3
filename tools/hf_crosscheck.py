#!/usr/bin/env python3
"""hf_crosscheck.py — upstream (HF transformers) expectations for small random M3 models.

Runs on a machine with torch + transformers >= 5.17 (the m3 device machine):

    python3 tools/hf_crosscheck.py OUTDIR [--cases tiny-a,tiny-b,deploy-msa]

For each case it builds a small random M3 text model (numpy, seeded), writes it as
a model case in m3's format and runs the upstream implementation on it through
tools/adapters/hf_dump.py:

    OUTDIR/<case>/config.json                  released-checkpoint dialect (notes A.1)
    OUTDIR/<case>/model.safetensors            public layout (notes A.2): BF16, router F32
    OUTDIR/<case>/inputs.safetensors           input_ids int32 [T]
    OUTDIR/<case>/expected_hf_fp32.safetensors HF fp32 activations (spec dump names)
    OUTDIR/<case>/expected_hf_bf16.safetensors HF bf16 activations (router kept fp32)
    OUTDIR/<case>/expected_hf_bf16m3.safetensors HF bf16 with m3's rounding points
                                               (hf_dump.M3Rounding)
    OUTDIR/<case>/hfv5/{config.json,model.safetensors}  the same text model in the HF v5
                                               fused layout (module names), HF's saved
                                               config.json minus its vision part
    OUTDIR/<case>/case.json
    OUTDIR/report.json                         every check below, with figures

Checks recorded in report.json (none of them is an m3 check; they describe HF):
  cache_vs_nocache   HF greedy with KV cache == HF greedy recomputing the prefix
  generate_vs_loop   HF generate() tokens == the adapter's greedy loop
  sdpa_vs_eager      sdpa attention against eager (fp32)
  bf16_router_model  bf16 with the router cast to bf16 (plain HF bf16 load) against
                     the m3 choice (router fp32): expert-choice flips, logit error
  hf_config_parse    HF's own parse of the released-dialect config.json vs the v5 form
  hf_public_load     HF from_pretrained on the public-layout file (conversion mapping)
                     gives the same text weights
  save_pretrained    tensor names / dtypes HF writes; reload equality
  rope_inv_freq      HF's inv_freq vs fp32(1/theta^(2i/rd)) computed in double
  fp32_vs_bf16       HF fp32 against HF bf16 (context for the bf16 tolerances)
Spec clauses: M3-VEC-*, M3-DUMP-*, M3-MODEL-*, M3-NUM-*, M3-CKPT-NAMES-*, M3-CFG-*.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "adapters"))
import hf_dump  # noqa: E402  (needs torch/transformers; exits with a message otherwise)
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.numpy import save_file as st_save_numpy  # noqa: E402
from safetensors.torch import load_file as st_load_torch  # noqa: E402
from safetensors import safe_open  # noqa: E402

CASES = {
    # 3 dense + 2 sparse layers; block 4, top-3 so selection is active at T = 40.
    "tiny-a": dict(seed=1001, T=40, vocab=256, hidden=64, layers=5, heads=4, kv=2, head_dim=16,
                   prf=0.5, experts=8, topk=2, inter=32, dense_inter=96, shared_inter=32,
                   scale=2.0, idx_dim=16, block=4, idx_topk=3, local=1,
                   sparse=[0, 0, 0, 1, 1], moe=[0, 0, 0, 1, 1],
                   desc="5 layers (3 dense + 2 MoE/MSA), GQA 2:1, partial RoPE 0.5, 8 experts top-2, "
                        "MSA block 4 top-3"),
    # attention and MLP patterns that do not coincide, GQA 4:1, q width > hidden,
    # 16 experts top-4, 2 local blocks, routed scale 2.5.
    "tiny-b": dict(seed=2002, T=64, vocab=256, hidden=48, layers=4, heads=8, kv=2, head_dim=16,
                   prf=0.5, experts=16, topk=4, inter=24, dense_inter=64, shared_inter=16,
                   scale=2.5, idx_dim=16, block=8, idx_topk=3, local=2,
                   sparse=[0, 1, 1, 0], moe=[0, 0, 1, 1],
                   desc="4 layers, attention pattern [full, sparse, sparse, full] and MLP pattern "
                        "[dense, dense, moe, moe], GQA 4:1, q width 128 > hidden 48, 16 experts top-4, "
                        "routed scale 2.5, MSA block 8 top-3 with 2 local blocks"),
    # deployment MSA parameters: block 128, top-16, 4 KV = 4 index heads; T = 2300 = 18 blocks.
    "deploy-msa": dict(seed=3003, T=2300, vocab=64, hidden=32, layers=2, heads=8, kv=4, head_dim=16,
                       prf=0.5, experts=16, topk=4, inter=16, dense_inter=64, shared_inter=16,
                       scale=2.0, idx_dim=16, block=128, idx_topk=16, local=1,
                       sparse=[0, 1], moe=[0, 1],
                       keep=["logits", "layers.1.input", "layers.1.attn.block_*",
                             "layers.1.moe.topk_*", "layers.1.moe.scores", "greedy_tokens"],
                       desc="deployment MSA parameters (block 128, top-16, 4 KV/index heads) at "
                            "T = 2300 (18 blocks, last one partial), small hidden"),
}

MAX_NEW = 16


def bf16_round(x):
    """float32 -> nearest-even bf16 value, as float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32)
    return r.view(np.float32)


def make_weights(c):
    """Random public-layout weights for case c: {name: (float32 array, stored dtype)}."""
    rng = np.random.default_rng(c["seed"])
    H, V, hd = c["hidden"], c["vocab"], c["head_dim"]
    nh, nkv = c["heads"], c["kv"]
    W = {}

    def put(name, shape, std, mean=0.0, dtype="BF16"):
        a = (mean + std * rng.standard_normal(shape)).astype(np.float32)
        W[name] = (bf16_round(a) if dtype == "BF16" else a, dtype)

    p = "language_model.model."
    put(p + "embed_tokens.weight", (V, H), 1.0)
    put("language_model.lm_head.weight", (V, H), 1.0 / np.sqrt(H))
    put(p + "norm.weight", (H,), 0.2)
    for L in range(c["layers"]):
        q = p + "layers.%d." % L
        put(q + "input_layernorm.weight", (H,), 0.2)
        put(q + "post_attention_layernorm.weight", (H,), 0.2)
        put(q + "self_attn.q_proj.weight", (nh * hd, H), 1.0 / np.sqrt(H))
        put(q + "self_attn.k_proj.weight", (nkv * hd, H), 1.0 / np.sqrt(H))
        put(q + "self_attn.v_proj.weight", (nkv * hd, H), 1.0 / np.sqrt(H))
        put(q + "self_attn.o_proj.weight", (H, nh * hd), 1.0 / np.sqrt(nh * hd))
        put(q + "self_attn.q_norm.weight", (hd,), 0.3, mean=0.5)
        put(q + "self_attn.k_norm.weight", (hd,), 0.3, mean=0.5)
        if c["sparse"][L]:
            d = c["idx_dim"]
            put(q + "self_attn.index_q_proj.weight", (nkv * d, H), 1.0 / np.sqrt(H))
            put(q + "self_attn.index_k_proj.weight", (d, H), 1.0 / np.sqrt(H))
            put(q + "self_attn.index_q_norm.weight", (d,), 0.3)
            put(q + "self_attn.index_k_norm.weight", (d,), 0.3)
        if c["moe"][L]:
            E, I, Is = c["experts"], c["inter"], c["shared_inter"]
            m = q + "block_sparse_moe."
            put(m + "gate.weight", (E, H), 2.0 / np.sqrt(H), dtype="F32")
            put(m + "e_score_correction_bias", (E,), 0.1, dtype="F32")
            for e in range(E):
                put(m + "experts.%d.w1.weight" % e, (I, H), 3.0 / np.sqrt(H))
                put(m + "experts.%d.w3.weight" % e, (I, H), 3.0 / np.sqrt(H))
                put(m + "experts.%d.w2.weight" % e, (H, I), 1.0 / np.sqrt(I))
            put(m + "shared_experts.gate_proj.weight", (Is, H), 3.0 / np.sqrt(H))
            put(m + "shared_experts.up_proj.weight", (Is, H), 3.0 / np.sqrt(H))
            put(m + "shared_experts.down_proj.weight", (H, Is), 1.0 / np.sqrt(Is))
        else:
            Id = c["dense_inter"]
            put(q + "mlp.gate_proj.weight", (Id, H), 3.0 / np.sqrt(H))
            put(q + "mlp.up_proj.weight", (Id, H), 3.0 / np.sqrt(H))
            put(q + "mlp.down_proj.weight", (H, Id), 1.0 / np.sqrt(Id))
    ids = rng.integers(0, V, size=c["T"]).astype(np.int32)
    return W, ids


def released_config(c):
    """config.json in the released checkpoint's dialect (keys as in notes A.1)."""
    L = c["layers"]
    text = {
        "architectures": ["MiniMaxM3SparseForCausalLM"],
        "hidden_size": c["hidden"], "intermediate_size": c["inter"],
        "dense_intermediate_size": c["dense_inter"], "shared_intermediate_size": c["shared_inter"],
        "num_hidden_layers": L, "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv"], "head_dim": c["head_dim"], "vocab_size": c["vocab"],
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "use_gemma_norm": True,
        "attention_output_gate": False, "rope_theta": 5000000,
        "rotary_dim": int(c["head_dim"] * c["prf"]), "partial_rotary_factor": c["prf"],
        "hidden_act": "swigluoai", "use_qk_norm": True, "qk_norm_type": "per_head",
        "tie_word_embeddings": False, "num_local_experts": c["experts"],
        "num_experts_per_tok": c["topk"], "n_shared_experts": 1, "scoring_func": "sigmoid",
        "use_routing_bias": True, "routed_scaling_factor": c["scale"], "swiglu_alpha": 1.702,
        "swiglu_limit": 7.0, "moe_layer_freq": list(c["moe"]),
        "sparse_attention_config": {
            "use_sparse_attention": True, "sparse_index_dim": c["idx_dim"],
            "sparse_num_index_heads": c["kv"], "sparse_topk_blocks": c["idx_topk"],
            "sparse_block_size": c["block"], "sparse_score_type": "max", "sparse_init_block": 0,
            "sparse_local_block": c["local"], "sparse_attention_freq": list(c["sparse"]),
            "sparse_disable_index_value": list(c["sparse"])},
    }
    return {"architectures": ["MiniMaxM3SparseForConditionalGeneration"],
            "model_type": "minimax_m3_vl", "torch_dtype": "bfloat16", "text_config": text}


def save_public(path, W):
    """Write the public-layout checkpoint (BF16 except the F32 router tensors)."""
    from safetensors.torch import save_file
    t = {}
    for k, (a, dt) in W.items():
        x = torch.from_numpy(a)
        t[k] = x.to(torch.bfloat16) if dt == "BF16" else x.contiguous()
    save_file(t, path, metadata={"format": "pt"})


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def rel(a, b):
    """max |a-b| / max |b| and nmse."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    d = np.abs(a - b)
    fin = np.isfinite(b)
    den = np.max(np.abs(b[fin])) if fin.any() else 1.0
    nm = float(np.sum((a[fin] - b[fin]) ** 2) / max(np.sum(b[fin] ** 2), 1e-300))
    return {"max_rel": float(np.max(d[fin]) / den) if fin.any() else 0.0, "nmse": nm}


def keep_filter(res, pats):
    import fnmatch
    if not pats:
        return res
    return {k: v for k, v in res.items() if any(fnmatch.fnmatchcase(k, p) for p in pats)}


def compare_dumps(a, b):
    """Figures of dump a against dump b (same names)."""
    out = {"values": {}, "sel_mismatch": {}}
    for k in sorted(b):
        if k not in a or k.endswith("block_indices_hf"):
            continue
        if b[k].dtype.kind in "iu":
            if k.endswith("block_indices"):
                n = 0
                for g in range(b[k].shape[0]):
                    for t in range(b[k].shape[1]):
                        if set(a[k][g, t][a[k][g, t] >= 0]) != set(b[k][g, t][b[k][g, t] >= 0]):
                            n += 1
                out["sel_mismatch"][k] = n
            else:
                out["sel_mismatch"][k] = int(np.sum(np.any(a[k] != b[k], axis=-1))) \
                    if a[k].ndim > 1 else int(np.sum(a[k] != b[k]))
        else:
            out["values"][k] = rel(a[k], b[k])
    return out


def run_case(name, c, outdir, report, device):
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    W, ids = make_weights(c)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(released_config(c), f, indent=2, sort_keys=True)
        f.write("\n")
    save_public(os.path.join(d, "model.safetensors"), W)
    st_save_numpy({"input_ids": ids}, os.path.join(d, "inputs.safetensors"))
    rep = report.setdefault(name, {})

    model, cfg, routers = hf_dump.load_case_model(d, device, "eager")
    rep["attn_implementation"] = model.config._attn_implementation
    rep["experts_implementation"] = getattr(model.config.text_config, "_experts_implementation", None)
    input_ids = torch.tensor(ids.tolist(), dtype=torch.long, device=device)
    dumps = {}
    for mode in ("fp32", "bf16"):
        hf_dump.set_mode(model, mode, routers, "fp32")
        res = hf_dump.dump(model, input_ids, MAX_NEW)
        dumps[mode] = res
        # HF's own cache-vs-no-cache agreement
        t_nc, st_nc = hf_dump.greedy(model, input_ids, MAX_NEW, use_cache=False)
        t_c, st_c = hf_dump.greedy(model, input_ids, MAX_NEW, use_cache=True)
        rep["cache_vs_nocache_" + mode] = {
            "tokens_equal": t_nc == t_c, "tokens_cache": t_c, "tokens_nocache": t_nc,
            "step_logits_max_rel": [rel(a.cpu().numpy(), b.cpu().numpy())["max_rel"]
                                    for a, b in zip(st_c, st_nc)]}
        try:
            # explicit all-ones attention_mask: without it generate() infers padding from
            # pad_token_id occurrences in the prompt
            gen = model.generate(input_ids=input_ids[None, :], attention_mask=torch.ones_like(input_ids[None, :]),
                                 max_new_tokens=MAX_NEW, do_sample=False,
                                 min_new_tokens=MAX_NEW, pad_token_id=0, output_logits=True,
                                 return_dict_in_generate=True)
            g = gen.sequences[0, len(ids):].tolist()
            pkv = gen.past_key_values
            info = {"equal": g == t_c, "generate": g, "loop": t_c,
                    "cache_class": type(pkv).__name__,
                    "cache_layer_classes": sorted({type(x).__name__ for x in getattr(pkv, "layers", [])}),
                    "step_logits_max_rel_vs_nocache": [
                        rel(a[0].detach().float().cpu().numpy(), b.cpu().numpy())["max_rel"]
                        for a, b in zip(gen.logits, st_nc)]}
            # the same prompt with an explicit attention_mask through the plain loop
            am = torch.ones((1, len(ids) + MAX_NEW), dtype=torch.long, device=device)
            seq = torch.cat([input_ids[None, :], gen.sequences[:, len(ids):]], 1)
            with torch.no_grad():
                o1 = model(input_ids=seq, attention_mask=am, use_cache=False).logits[0, len(ids) - 1:-1].float()
                o2 = model(input_ids=seq, use_cache=False).logits[0, len(ids) - 1:-1].float()
            info["full_forward_mask_vs_nomask_max_rel"] = rel(o1.cpu().numpy(), o2.cpu().numpy())["max_rel"]
            info["full_forward_vs_generate_step_logits_max_rel"] = [
                rel(a[0].detach().float().cpu().numpy(), o2[i].cpu().numpy())["max_rel"]
                for i, a in enumerate(gen.logits)]
            if not info["equal"] or max(info["step_logits_max_rel_vs_nocache"]) > 1e-3:
                info["probe"] = generate_probe(model, input_ids)
            rep["generate_vs_loop_" + mode] = info
        except Exception as exc:  # record, do not fail
            rep["generate_vs_loop_" + mode] = {"error": repr(exc)[:300]}
        keep = keep_filter({k: v for k, v in res.items() if not k.endswith("block_indices_hf")
                            and not k.endswith("router_logits")}, c.get("keep"))
        meta = {"generator": "transformers %s" % transformers.__version__, "torch": torch.__version__,
                "mode": mode, "attn_implementation": "eager", "experts_implementation": "eager",
                "router_dtype": "fp32", "device": torch.cuda.get_device_name(0) if device == "cuda" else device}
        st_save_numpy({k: np.ascontiguousarray(v) for k, v in keep.items()},
                      os.path.join(d, "expected_hf_%s.safetensors" % mode), metadata=meta)
    rep["fp32_vs_bf16"] = compare_dumps(dumps["bf16"], dumps["fp32"])
    # HF bf16 with m3's rounding points patched in (see hf_dump.M3Rounding)
    hf_dump.set_mode(model, "bf16", routers, "fp32")
    with hf_dump.M3Rounding(model):
        res_r = hf_dump.dump(model, input_ids, MAX_NEW)
        t_nc, _ = hf_dump.greedy(model, input_ids, MAX_NEW, use_cache=False)
    rep["bf16m3_cache_vs_nocache_tokens_equal"] = t_nc == res_r["greedy_tokens"].tolist()
    rep["bf16m3_vs_bf16"] = compare_dumps(res_r, dumps["bf16"])
    rep["bf16m3_vs_fp32"] = compare_dumps(res_r, dumps["fp32"])
    keep = keep_filter({k: v for k, v in res_r.items() if not k.endswith("block_indices_hf")
                        and not k.endswith("router_logits")}, c.get("keep"))
    st_save_numpy({k: np.ascontiguousarray(v) for k, v in keep.items()},
                  os.path.join(d, "expected_hf_bf16m3.safetensors"),
                  metadata={"generator": "transformers %s" % transformers.__version__,
                            "torch": torch.__version__, "mode": "bf16", "rounding": "m3",
                            "attn_implementation": "eager", "router_dtype": "fp32"})
    # HF's plain bf16 load: router cast to bf16 too
    hf_dump.set_mode(model, "bf16", routers, "model")
    res_m = hf_dump.dump(model, input_ids, MAX_NEW)
    rep["bf16_router_model_vs_fp32_router"] = compare_dumps(res_m, dumps["bf16"])
    rep["bf16_router_model_vs_fp32_router"]["greedy_equal"] = \
        res_m["greedy_tokens"].tolist() == dumps["bf16"]["greedy_tokens"].tolist()
    # sdpa against eager (fp32)
    try:
        hf_dump.set_mode(model, "fp32", routers, "fp32")
        hf_dump.set_impl(model, "sdpa")
        res_s = hf_dump.dump(model, input_ids, MAX_NEW)
        rep["sdpa_vs_eager_fp32"] = compare_dumps(res_s, dumps["fp32"])
        rep["sdpa_vs_eager_fp32"]["greedy_equal"] = \
            res_s["greedy_tokens"].tolist() == dumps["fp32"]["greedy_tokens"].tolist()
    except Exception as exc:
        rep["sdpa_vs_eager_fp32"] = {"error": repr(exc)[:300]}
    hf_dump.set_impl(model, "eager")
    hf_dump.set_mode(model, "fp32", routers, "fp32")

    # RoPE inv_freq of HF vs the spec's formula
    inv = model._m3_inv_freq[0].detach().float().cpu().numpy()
    rd = int(c["head_dim"] * c["prf"])
    spec = np.array([1.0 / (5000000.0 ** (2.0 * i / rd)) for i in range(rd // 2)], dtype=np.float32)
    rep["rope_inv_freq"] = {"n": int(inv.size), "differ": int(np.sum(inv != spec)),
                            "hf": [float(x) for x in inv], "spec": [float(x) for x in spec]}

    # HF's own parse of the released-dialect config and its own load of the public layout
    try:
        raw = json.load(open(os.path.join(d, "config.json")))
        hc = transformers.AutoConfig.from_pretrained(d)
        tc = hc.text_config
        ours = cfg.text_config
        fields = ["layer_types", "mlp_layer_types", "index_n_heads", "index_head_dim",
                  "index_block_size", "index_topk_blocks", "index_local_blocks", "rotary_dim",
                  "routed_scaling_factor", "num_experts_per_tok", "num_local_experts",
                  "head_dim", "hidden_act", "swiglu_alpha", "swiglu_limit"]
        diff = {f: [repr(getattr(tc, f, None)), repr(getattr(ours, f, None))] for f in fields
                if getattr(tc, f, None) != getattr(ours, f, None)}
        rp_hf = dict(tc.rope_parameters or {})
        rep["hf_config_parse"] = {"class": type(hc).__name__, "differences": diff,
                                  "rope_parameters_hf": {k: repr(v) for k, v in rp_hf.items()},
                                  "rope_parameters_ours": dict(ours.rope_parameters)}
        del raw
    except Exception as exc:
        rep["hf_config_parse"] = {"error": repr(exc)[:400]}
    try:
        cfg2 = transformers.AutoConfig.from_pretrained(d)
        cfg2.vision_config = hf_dump.hfcfg.MiniMaxM3VLVisionConfig(**hf_dump.TINY_VISION)
        cfg2.projector_hidden_size = c["hidden"]
        cfg2.merged_hidden_size = c["hidden"] * 4
        m2 = hf_dump.hfmod.MiniMaxM3SparseForConditionalGeneration.from_pretrained(
            d, config=cfg2, dtype=torch.float32)
        a = m2.state_dict()
        b = model.state_dict()
        text = [k for k in b if k.startswith("model.language_model.") or k == "lm_head.weight"]
        bad = [k for k in text if k not in a or a[k].shape != b[k].shape
               or not torch.equal(a[k].float().cpu(), b[k].float().cpu())]
        rep["hf_public_load"] = {"text_tensors": len(text), "mismatched": bad[:20],
                                 "n_mismatched": len(bad),
                                 "router_dtype_after_load": str(a[[k for k in a if k.endswith(
                                     "mlp.gate.weight")][0]].dtype) if any(
                                     k.endswith("mlp.gate.weight") for k in a) else None}
        # the same with a bf16 load: what dtype does the router get?
        m3 = hf_dump.hfmod.MiniMaxM3SparseForConditionalGeneration.from_pretrained(
            d, config=cfg2, dtype=torch.bfloat16)
        g = [v for k, v in m3.state_dict().items() if k.endswith("mlp.gate.weight")][0]
        bb = [v for k, v in m3.state_dict().items() if k.endswith("e_score_correction_bias")][0]
        rep["hf_public_load"]["bf16_load_router_dtype"] = str(g.dtype)
        rep["hf_public_load"]["bf16_load_bias_dtype"] = str(bb.dtype)
        r3 = m3.model.language_model.rotary_emb
        rep["hf_public_load"]["bf16_load_inv_freq_dtype"] = str(r3.inv_freq.dtype)
        rep["hf_public_load"]["bf16_load_inv_freq_equal_fp32"] = bool(torch.equal(
            r3.inv_freq.float().cpu(), model._m3_inv_freq[0].float().cpu()))
        del m2, m3
    except Exception as exc:
        rep["hf_public_load"] = {"error": repr(exc)[:400]}

    # save_pretrained: what HF writes; keep it (small) as the HF v5 layout copy
    try:
        hf_dump.set_mode(model, "bf16", routers, "fp32")
        tmp = tempfile.mkdtemp()
        model.save_pretrained(tmp)
        names = {}
        for fn in sorted(os.listdir(tmp)):
            if fn.endswith(".safetensors"):
                with safe_open(os.path.join(tmp, fn), "pt") as f:
                    for k in f.keys():
                        t = f.get_slice(k)
                        names[k] = [t.get_dtype(), list(t.get_shape())]
        rep["save_pretrained"] = {"files": sorted(os.listdir(tmp)),
                                  "names": {k: v for k, v in names.items()
                                            if ".layers.0." in k or ".layers.%d." % (c["layers"] - 1) in k
                                            or "layers" not in k}}
        hv = os.path.join(d, "hfv5")
        os.makedirs(hv, exist_ok=True)
        fused = any("experts.gate_up_proj" in k for k in names)
        rep["save_pretrained"]["writes_fused_v5_names"] = fused
        # the HF v5 fused layout as the modules hold it, text part only (m3 reads no
        # vision weights for a config without vision_config), bf16 / router fp32, with
        # HF's saved config.json minus its vision part
        with open(os.path.join(tmp, "config.json")) as f:
            saved_cfg = json.load(f)
        rep["save_pretrained"]["config_json"] = saved_cfg
        for k in ("vision_config", "merged_hidden_size", "projector_hidden_size"):
            saved_cfg.pop(k, None)
        with open(os.path.join(hv, "config.json"), "w") as f:
            json.dump(saved_cfg, f, indent=2, sort_keys=True)
            f.write("\n")
        sd = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()
              if k.startswith("model.language_model.") or k == "lm_head.weight"}
        from safetensors.torch import save_file
        save_file(sd, os.path.join(hv, "model.safetensors"), metadata={"format": "pt"})
        # reload check of what save_pretrained wrote
        m4 = hf_dump.hfmod.MiniMaxM3SparseForConditionalGeneration.from_pretrained(tmp, dtype=torch.float32)
        a = m4.state_dict()
        b = model.state_dict()
        bad = [k for k in b if k not in a or a[k].shape != b[k].shape
               or not torch.equal(a[k].float().cpu(), b[k].float().cpu())]
        rep["save_pretrained"]["reload_mismatched"] = bad[:20]
        rep["save_pretrained"]["reload_n_mismatched"] = len(bad)
        shutil.rmtree(tmp)
        hf_dump.set_mode(model, "fp32", routers, "fp32")
    except Exception as exc:
        rep["save_pretrained"] = {"error": repr(exc)[:400]}

    # the adapter run from the files alone must reproduce the fp32 expectations
    res_file = hf_dump.dump(*_fresh(d, device), MAX_NEW)
    rep["adapter_from_files_vs_expected_fp32"] = compare_dumps(res_file, dumps["fp32"])

    files = sorted(f for f in os.listdir(d) if f.endswith((".json", ".safetensors")) and f != "case.json")
    case = {"id": "hf-" + name, "description": "HF transformers expectations: " + c["desc"],
            "clauses": ["M3-MODEL-1", "M3-DUMP-1", "M3-NUM-MODE-1", "M3-NUM-BF16-2", "M3-MSA-SELECT-1",
                        "M3-MOE-ROUTER-1", "M3-CKPT-NAMES-1", "M3-CFG-1"],
            "component": "model", "mode": "fp32", "modes": ["fp32", "bf16"],
            "profile": "hf-upstream", "tolerance": "hf",
            "seed": c["seed"], "generator": "transformers %s" % transformers.__version__,
            "generator_version": "torch %s, tools/hf_crosscheck.py" % torch.__version__,
            "expected": {"fp32": "expected_hf_fp32.safetensors", "bf16": "expected_hf_bf16.safetensors",
                         "bf16m3": "expected_hf_bf16m3.safetensors"},
            "params": {"max_new_tokens": MAX_NEW, "T": int(c["T"]), "attn_implementation": "eager",
                       "experts_implementation": "eager", "bf16_router_dtype": "fp32",
                       "tf32": False, "bf16_reduced_precision_reduction": False,
                       "device": torch.cuda.get_device_name(0) if device == "cuda" else device},
            "note": "Expected values are the upstream implementation's, not m3's golden numerics: "
                    "compare with tools/hf_compare.py (tolerances documented in "
                    "docs/upstream-agreement.md). hfv5/ holds the same text model in the HF v5 fused "
                    "layout (module names) with HF's saved config.json minus its vision part.",
            "files": {f: sha256(os.path.join(d, f)) for f in files}}
    hv = os.path.join(d, "hfv5")
    if os.path.isdir(hv):
        for f in sorted(os.listdir(hv)):
            case["files"]["hfv5/" + f] = sha256(os.path.join(hv, f))
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(case, f, indent=2, sort_keys=True)
        f.write("\n")
    del model
    torch.cuda.empty_cache()


@torch.no_grad()
def generate_probe(model, input_ids):
    """Where does generate()'s prefill differ from a plain forward? Records the
    keyword arguments the text model receives and per-layer last-row differences."""
    lm = model.model.language_model
    rec = {"calls": [], "layers": {}}
    cur = {}

    def pre(_m, args, kwargs):
        rec["calls"].append({k: (type(v).__name__, list(v.shape) if hasattr(v, "shape") else
                                 (sorted(v) if isinstance(v, dict) else repr(v)[:80]),
                                 str(getattr(v, "dtype", "")))
                             for k, v in kwargs.items()})
        pid = kwargs.get("position_ids")
        if pid is not None:
            rec["calls"][-1]["position_ids_range"] = [int(pid.min()), int(pid.max())]
        cm = kwargs.get("cache_position")
        if cm is not None:
            rec["calls"][-1]["cache_position_range"] = [int(cm.min()), int(cm.max())]
    hs = [lm.register_forward_pre_hook(pre, with_kwargs=True)]
    for i, layer in enumerate(lm.layers):
        def fn(_m, _a, out, i=i):
            cur.setdefault(i, (out[0] if isinstance(out, tuple) else out)[0, -1].float().cpu().numpy())
        hs.append(layer.register_forward_hook(fn))
        def afn(_m, _a, kw, i=i):
            am = kw.get("attention_mask")
            rec.setdefault("attn_mask_%d" % i, (type(am).__name__, list(am.shape) if hasattr(am, "shape")
                                                else None, str(getattr(am, "dtype", ""))))
        hs.append(layer.self_attn.register_forward_pre_hook(afn, with_kwargs=True))
    model.generate(input_ids=input_ids[None, :], attention_mask=torch.ones_like(input_ids[None, :]),
                   max_new_tokens=1, do_sample=False, pad_token_id=0)
    gen_rows = dict(cur)
    cur.clear()
    first_calls = list(rec["calls"])
    rec["calls"] = []
    model(input_ids=input_ids[None, :], use_cache=False)
    for i in gen_rows:
        rec["layers"][i] = rel(gen_rows[i], cur[i])["max_rel"]
    rec["generate_calls"] = first_calls
    rec["forward_calls"] = rec.pop("calls")
    for h in hs:
        h.remove()
    return rec


def _fresh(d, device):
    m, _cfg, routers = hf_dump.load_case_model(d, device, "eager")
    hf_dump.set_mode(m, "fp32", routers, "fp32")
    ids = st_load_torch(os.path.join(d, "inputs.safetensors"))["input_ids"].tolist()
    return m, torch.tensor(ids, dtype=torch.long, device=device)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    hf_dump.deterministic()
    os.makedirs(a.outdir, exist_ok=True)
    report = {"transformers": transformers.__version__, "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0) if a.device == "cuda" else a.device}
    for name in a.cases.split(","):
        print("hf_crosscheck: case", name, flush=True)
        try:
            run_case(name, CASES[name], a.outdir, report, a.device)
        except Exception as exc:
            import traceback
            traceback.print_exc()
            report.setdefault(name, {})["fatal"] = repr(exc)[:1000]
    with open(os.path.join(a.outdir, "report.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True, default=str)
    print("hf_crosscheck: wrote", a.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
