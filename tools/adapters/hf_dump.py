#!/usr/bin/env python3
"""hf_dump.py — activation dump from the HF transformers `minimax_m3_vl` text path.

Adapter for port authors and for the upstream cross-check (tools/hf_crosscheck.py):
it runs the upstream PyTorch implementation on any m3 model case directory and
writes a safetensors file with the spec's activation names (M3-DUMP-*), so the
result can be compared with `bin/m3-ref forward --dump` or `bin/m3-conform`.

    python3 tools/adapters/hf_dump.py CASE_DIR --mode fp32|bf16 --out DUMP.safetensors
            [--tokens 1,2,3] [--max-new-tokens N] [--attn eager|sdpa]
            [--router-dtype fp32|model] [--rounding hf|m3] [--extras] [--device cuda|cpu]

CASE_DIR holds config.json (released dialect with `sparse_attention_config`,
`moe_layer_freq`, `rope_theta`, ... or the HF v5 saved form), model.safetensors
(public checkpoint layout, notes A.2; the HF v5 fused layout is accepted too)
and inputs.safetensors with `input_ids` (unless --tokens is given).

Modes:
  fp32  model.float(): every weight widened to fp32, every op fp32 (TF32 off).
  bf16  model cast to bfloat16 like an ordinary bf16 load, except the router
        weight and e_score_correction_bias, which stay fp32 (--router-dtype fp32,
        the m3 decision; HF 5.17 itself declares no keep-in-fp32 module, so
        --router-dtype model reproduces a plain bf16 load with a bf16 router).
        The fp32 inv_freq buffer is kept, as from_pretrained(dtype=bfloat16) keeps it.
        --rounding m3 replaces HF's three extra bf16 rounding points by m3's
        (see M3Rounding below; docs/upstream-agreement.md).

Written names (all fp32 unless said; rows are the T prompt positions):
  embeddings, layers.{i}.input, layers.{i}.attn_norm, layers.{i}.attn.output,
  layers.{i}.attn.block_indices int32 [G,T,K] (golden order: forced blocks
  ascending, then HF's descending-score order, -1 padding to index_topk_blocks),
  layers.{i}.attn.block_scores [G,T,NB] (raw max-pooled indexer scores before
  forcing, -inf where no visible key), layers.{i}.post_attn, layers.{i}.ffn_norm,
  layers.{i}.mlp.output, layers.{i}.moe.topk_index int32 [T,k] ascending,
  layers.{i}.moe.topk_weight [T,k], layers.{i}.moe.scores [T,E],
  layers.{i}.output, final_norm, logits, eagle3.aux [T,3H],
  greedy_tokens int32 [N] (when --max-new-tokens N > 0; generated with the KV
  cache, token by token).

Needs torch, transformers >= 5.17 (minimax_m3_vl), safetensors, numpy: run it on
a machine that has them (the m3 device machine does). Never needed by m3 itself.
The hooks are tools/adapters/m3capture.py's (mapping HF_TRANSFORMERS) and the
file is written by tools/adapters/m3dump.py (numpy only).
Spec clauses: M3-DUMP-*, M3-CKPT-NAMES-1, M3-CKPT-NAMES-2, M3-CFG-*.
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import m3capture  # noqa: E402  (module-name rules, hooks; tools/adapters/m3capture.py)
import m3dump  # noqa: E402  (the numpy-only dump writer)

try:
    import torch
    from safetensors.torch import load_file as st_load_torch
    from transformers.models.minimax_m3_vl import configuration_minimax_m3_vl as hfcfg
    from transformers.models.minimax_m3_vl import modeling_minimax_m3_vl as hfmod
except ImportError as exc:  # pragma: no cover - only on machines without torch
    sys.exit("hf_dump: needs torch, safetensors and transformers>=5.17 (%s)" % exc)

# A tiny vision tower: the text path never runs it, but the HF model class owns
# one, and the default (1280 x 32 layers) would be large for nothing.
TINY_VISION = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
               "num_attention_heads": 2, "patch_size": 14, "temporal_patch_size": 2,
               "spatial_merge_size": 2}


# --------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------

def text_config_v5(raw):
    """Translate a config.json dict (either dialect, nested or flat) into the
    keyword arguments of HF's MiniMaxM3VLTextConfig in its v5 form. Raises
    ValueError for settings the HF implementation cannot represent."""
    tc = dict(raw.get("text_config", raw))
    out = {}
    plain = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "head_dim",
             "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
             "num_experts_per_tok", "num_local_experts", "dense_intermediate_size",
             "shared_intermediate_size", "routed_scaling_factor", "swiglu_alpha",
             "swiglu_limit", "rotary_dim", "index_n_heads", "index_head_dim",
             "index_block_size", "index_topk_blocks", "index_local_blocks",
             "layer_types", "mlp_layer_types", "bos_token_id", "eos_token_id"]
    for k in plain:
        if k in tc:
            out[k] = tc[k]
    nh = tc["num_attention_heads"]
    hd = tc.get("head_dim") or tc["hidden_size"] // nh
    out["head_dim"] = hd
    # RoPE: theta and the rotated fraction
    rp = dict(tc.get("rope_parameters") or {})
    theta = rp.get("rope_theta", tc.get("rope_theta", 5000000.0))
    if "partial_rotary_factor" in rp:
        prf = rp["partial_rotary_factor"]
    elif "partial_rotary_factor" in tc:
        prf = tc["partial_rotary_factor"]
    elif "rotary_dim" in tc:
        prf = tc["rotary_dim"] / hd
    else:
        prf = 1.0
    if rp.get("rope_type", "default") != "default" or tc.get("rope_scaling"):
        raise ValueError("config.json: only unscaled (default) RoPE is supported")
    out["rope_parameters"] = {"rope_type": "default", "rope_theta": float(theta),
                              "partial_rotary_factor": float(prf)}
    out["rotary_dim"] = int(round(hd * prf))
    # legacy sparse attention / MoE layout
    sac = tc.get("sparse_attention_config") or {}
    legacy = {"index_n_heads": "sparse_num_index_heads", "index_head_dim": "sparse_index_dim",
              "index_block_size": "sparse_block_size", "index_topk_blocks": "sparse_topk_blocks",
              "index_local_blocks": "sparse_local_block"}
    for flat, old in legacy.items():
        if old in sac:
            out[flat] = sac[old]
    L = tc["num_hidden_layers"]
    if "layer_types" not in out:
        if sac.get("use_sparse_attention", True) and "sparse_attention_freq" in sac:
            out["layer_types"] = ["minimax_m3_sparse" if f else "full_attention"
                                  for f in sac["sparse_attention_freq"]]
        else:
            out["layer_types"] = ["full_attention"] * L
    if "mlp_layer_types" not in out:
        if "moe_layer_freq" in tc:
            out["mlp_layer_types"] = ["sparse" if f else "dense" for f in tc["moe_layer_freq"]]
        else:
            out["mlp_layer_types"] = ["sparse"] * L
    # settings HF hard-codes; refuse anything else rather than compute something different
    checks = [("sparse_attention_config.sparse_init_block", sac.get("sparse_init_block", 0), 0),
              ("sparse_attention_config.sparse_score_type", sac.get("sparse_score_type", "max"), "max"),
              ("swiglu_beta", tc.get("swiglu_beta", 1.0), 1.0),
              ("use_routing_bias", tc.get("use_routing_bias", True), True),
              ("scoring_func", tc.get("scoring_func", "sigmoid"), "sigmoid"),
              ("n_shared_experts", tc.get("n_shared_experts", 1), 1),
              ("attention_output_gate", tc.get("attention_output_gate", False), False),
              ("use_gemma_norm", tc.get("use_gemma_norm", True), True),
              ("use_qk_norm", tc.get("use_qk_norm", True), True),
              ("index_init_blocks", tc.get("index_init_blocks", 0), 0)]
    for name, got, want in checks:
        if got != want:
            raise ValueError("config.json: %s = %r cannot be expressed in HF minimax_m3_vl "
                             "(it hard-codes %r)" % (name, got, want))
    if "sparse_disable_index_value" in sac and any(
            not d for d, s in zip(sac["sparse_disable_index_value"],
                                  out["layer_types"]) if s == "minimax_m3_sparse"):
        raise ValueError("config.json: index value branch enabled on a sparse layer; HF has none")
    out.setdefault("eos_token_id", None)
    out.setdefault("bos_token_id", None)
    return out


def build_config(raw):
    """HF MiniMaxM3VLConfig for a config.json dict, with a tiny vision tower."""
    tkw = text_config_v5(raw)
    cfg = hfcfg.MiniMaxM3VLConfig(text_config=tkw, vision_config=dict(TINY_VISION),
                                  projector_hidden_size=tkw["hidden_size"])
    return cfg


# --------------------------------------------------------------------------
# weights: public layout -> HF v5 module names
# --------------------------------------------------------------------------

def public_to_v5(sd, cfg):
    """Map a public-layout state dict (notes A.2) to the HF v5 module names of
    MiniMaxM3SparseForConditionalGeneration (notes A.4), fusing gate/up and
    stacking experts. Tensors already in v5 names pass through."""
    tc = cfg.text_config
    out = {}
    rest = dict(sd)
    if "language_model.lm_head.weight" in rest:
        out["lm_head.weight"] = rest.pop("language_model.lm_head.weight")
    pre = "language_model.model."
    for L in range(tc.num_hidden_layers):
        p = pre + "layers.%d." % L
        q = "model.language_model.layers.%d." % L
        moe = p + "block_sparse_moe."
        if moe + "gate.weight" in rest:
            out[q + "mlp.gate.weight"] = rest.pop(moe + "gate.weight")
            out[q + "mlp.gate.e_score_correction_bias"] = rest.pop(moe + "e_score_correction_bias")
            gu, dn = [], []
            for e in range(tc.num_local_experts):
                ep = moe + "experts.%d." % e
                gu.append(torch.cat([rest.pop(ep + "w1.weight"), rest.pop(ep + "w3.weight")], 0))
                dn.append(rest.pop(ep + "w2.weight"))
            out[q + "mlp.experts.gate_up_proj"] = torch.stack(gu, 0)
            out[q + "mlp.experts.down_proj"] = torch.stack(dn, 0)
            sp = moe + "shared_experts."
            out[q + "mlp.shared_experts.gate_up_proj.weight"] = torch.cat(
                [rest.pop(sp + "gate_proj.weight"), rest.pop(sp + "up_proj.weight")], 0)
            out[q + "mlp.shared_experts.down_proj.weight"] = rest.pop(sp + "down_proj.weight")
        if p + "mlp.gate_proj.weight" in rest:
            out[q + "mlp.gate_up_proj.weight"] = torch.cat(
                [rest.pop(p + "mlp.gate_proj.weight"), rest.pop(p + "mlp.up_proj.weight")], 0)
            out[q + "mlp.down_proj.weight"] = rest.pop(p + "mlp.down_proj.weight")
    for k in list(rest):
        if k.startswith(pre):
            nk = "model.language_model." + k[len(pre):]
            nk = re.sub(r"\.self_attn\.index_([qk])_(proj|norm)\.", r".self_attn.indexer.\1_\2.", nk)
            out[nk] = rest.pop(k)
        elif k.startswith("mtp.") or ".mtp." in k:
            rest.pop(k)
    for k in list(rest):
        if k.startswith("model.language_model.") or k == "lm_head.weight":
            out[k] = rest.pop(k)
    return out, sorted(rest)


def load_case_model(case_dir, device, attn="eager"):
    """Build the HF model for a case directory and load its text weights.
    Returns (model, cfg, fp32 copies of router weights/biases by layer)."""
    with open(os.path.join(case_dir, "config.json")) as f:
        raw = json.load(f)
    cfg = build_config(raw)
    torch.manual_seed(0)
    # built on the target device: a released-shape MoE layer is 7.2e9 parameters,
    # whose random initialisation on the host alone takes minutes (every weight is
    # overwritten from the checkpoint below)
    with torch.device(device):
        model = hfmod.MiniMaxM3SparseForConditionalGeneration(cfg)
    set_impl(model, attn)
    files = [os.path.join(case_dir, "model.safetensors")]
    idx = os.path.join(case_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted({os.path.join(case_dir, v) for v in json.load(f)["weight_map"].values()})
    sd = {}
    for fn in files:
        sd.update(st_load_torch(fn))
    v5, leftover = public_to_v5(sd, cfg)
    leftover = [k for k in leftover if not k.startswith(("vision_tower.", "multi_modal_projector.",
                                                          "patch_merge_mlp.", "model.vision_tower.",
                                                          "model.multi_modal_projector."))]
    if leftover:
        raise ValueError("%s: unrecognised tensors: %s" % (case_dir, ", ".join(leftover[:5])))
    own = model.state_dict()
    text_keys = [k for k in own if k.startswith("model.language_model.") or k == "lm_head.weight"]
    missing = [k for k in text_keys if k not in v5]
    if missing:
        raise ValueError("%s: missing tensors for HF names: %s" % (case_dir, ", ".join(missing[:5])))
    with torch.no_grad():
        for k in text_keys:
            if tuple(own[k].shape) != tuple(v5[k].shape):
                raise ValueError("%s: %s has shape %s, HF wants %s" % (case_dir, k, tuple(v5[k].shape),
                                                                        tuple(own[k].shape)))
            own[k].copy_(v5[k].to(torch.float32))
    model = model.to(device=device, dtype=torch.float32).eval()
    rot = model.model.language_model.rotary_emb
    # HF computes inv_freq in fp32 at construction; keep that copy so that a
    # cast of the whole model (model.to(bfloat16)) cannot round it to bf16.
    model._m3_inv_freq = (rot.inv_freq.detach().clone(), rot.original_inv_freq.detach().clone())
    routers = {}
    for L, layer in enumerate(model.model.language_model.layers):
        if isinstance(layer.mlp, hfmod.MiniMaxM3VLSparseMoeBlock):
            routers[L] = (layer.mlp.gate.weight.detach().clone(),
                          layer.mlp.gate.e_score_correction_bias.detach().clone())
    return model, cfg, routers


def set_impl(model, attn):
    """Select the attention implementation and the plain per-expert loop."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(attn)
    else:
        model.config._attn_implementation = attn
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    for c in (model.config, model.config.text_config):
        try:
            c._experts_implementation = "eager"
        except Exception:
            pass


def set_mode(model, mode, routers, router_dtype="fp32"):
    """Cast the model for a numeric mode (see module docstring)."""
    if mode == "fp32":
        model.to(torch.float32)
    else:
        model.to(torch.bfloat16)
    rot = model.model.language_model.rotary_emb
    inv, orig = model._m3_inv_freq
    # from_pretrained(dtype=bfloat16) leaves these fp32 buffers fp32 (see
    # docs/upstream-agreement.md); model.to() would round them to bf16.
    rot.inv_freq = inv.clone()
    rot.original_inv_freq = orig.clone()
    layers = model.model.language_model.layers
    for L, (w, b) in routers.items():
        g = layers[L].mlp.gate
        if mode == "fp32" or router_dtype == "fp32":
            g.weight.data = w.clone().to(torch.float32)
            g.e_score_correction_bias.data = b.clone().to(torch.float32)
    return model


# --------------------------------------------------------------------------
# optional: HF bf16 with m3's rounding points (--rounding m3)
# --------------------------------------------------------------------------
# HF 5.17's bf16 path rounds in three places where m3's bf16 mode (M3-NUM-BF16-2)
# does not, and computes inv_freq with an fp32 pow. With --rounding m3 these are
# replaced, on this process's copy of the module only, by variants written here:
#   attention   q.k^T and the scale in fp32 (HF: bf16 matmul output, bf16 scale)
#   SwiGLU-OAI  elementwise math in fp32 from the rounded gate/up, output rounded
#               (HF: every elementwise op in bf16)
#   MoE combine sum of the rounded w_k * y_k in fp32, ascending expert id, then
#               rounded (HF: index_add_ into a bf16 buffer, rounding every add)
#   RoPE        inv_freq = fp32(1 / theta^(2i/rd)) evaluated in double
# Everything else is HF's own code. The difference between the two bf16 runs is
# therefore exactly these documented choices.

class M3Rounding:
    """Context manager that patches the three bf16 rounding differences."""

    def __init__(self, model):
        self.model = model
        self.saved = []

    def __enter__(self):
        m = hfmod
        self.saved = [(m, "eager_attention_forward", m.eager_attention_forward),
                      (m.MiniMaxM3VLDenseMLP, "forward", m.MiniMaxM3VLDenseMLP.forward),
                      (m.MiniMaxM3VLExperts, "_apply_gate", m.MiniMaxM3VLExperts._apply_gate)]
        m.eager_attention_forward = _attn_fp32_scores
        m.MiniMaxM3VLDenseMLP.forward = _dense_fp32_swiglu
        m.MiniMaxM3VLExperts._apply_gate = _gate_fp32
        self.experts = []
        for layer in self.model.model.language_model.layers:
            if isinstance(layer.mlp, m.MiniMaxM3VLSparseMoeBlock):
                ex = layer.mlp.experts
                self.experts.append((ex, ex.forward))
                ex.forward = _experts_fp32_sum.__get__(ex)
        rot = self.model.model.language_model.rotary_emb
        self.inv = rot.inv_freq
        rd = 2 * rot.inv_freq.numel()
        theta = float(self.model.config.text_config.rope_parameters["rope_theta"])
        spec = np.array([1.0 / theta ** (2.0 * i / rd) for i in range(rd // 2)], dtype=np.float32)
        rot.inv_freq = torch.from_numpy(spec).to(rot.inv_freq.device)
        return self

    def __exit__(self, *exc):
        for obj, name, val in self.saved:
            setattr(obj, name, val)
        for ex, fwd in self.experts:
            ex.forward = fwd
        self.model.model.language_model.rotary_emb.inv_freq = self.inv
        return False


def _attn_fp32_scores(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    ks = hfmod.repeat_kv(key, module.num_key_value_groups)
    vs = hfmod.repeat_kv(value, module.num_key_value_groups)
    w = torch.matmul(query.float(), ks.float().transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask.float()
    p = torch.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(p, vs).transpose(1, 2).contiguous()
    return out, p


def _swiglu_fp32(gate_up, alpha, limit, dtype):
    gate, up = gate_up.float().chunk(2, dim=-1)
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return ((up + 1.0) * (gate * torch.sigmoid(gate * alpha))).to(dtype)


def _dense_fp32_swiglu(self, hidden_states):
    gu = self.gate_up_proj(hidden_states)
    return self.down_proj(_swiglu_fp32(gu, self.swiglu_alpha, self.swiglu_limit, gu.dtype))


def _gate_fp32(self, gate_up):
    return _swiglu_fp32(gate_up, self.swiglu_alpha, self.swiglu_limit, gate_up.dtype)


def _experts_fp32_sum(self, hidden_states, top_k_index, top_k_weights):
    acc = torch.zeros(hidden_states.shape, dtype=torch.float32, device=hidden_states.device)
    for e in range(self.num_experts):  # ascending expert id
        tok, pos = torch.where(top_k_index == e)
        if tok.numel() == 0:
            continue
        cur = self._apply_gate(torch.nn.functional.linear(hidden_states[tok], self.gate_up_proj[e]))
        cur = torch.nn.functional.linear(cur, self.down_proj[e])  # rounded expert output
        cur = (cur * top_k_weights[tok, pos, None]).to(hidden_states.dtype)  # rounded w * y
        acc.index_add_(0, tok, cur.float())
    return acc.to(hidden_states.dtype)


# --------------------------------------------------------------------------
# capture
# --------------------------------------------------------------------------

def _np(t):
    return t.detach().to(torch.float32).cpu().numpy()


class Capture(m3capture.Capture):
    """The spec's activation names for one prefill: the module-name rules of
    m3capture.HF_TRANSFORMERS, plus hooks of their own for the router (ids
    sorted, weights aligned, sigmoid scores) and the MSA indexer (golden-order
    block ids and the raw block scores)."""

    def __init__(self, model):
        super().__init__(model, m3capture.HF_TRANSFORMERS)
        self.tc = model.config.text_config
        lm = model.model.language_model
        for i, layer in enumerate(lm.layers):
            pre = "layers.%d." % i
            if isinstance(layer.mlp, hfmod.MiniMaxM3VLSparseMoeBlock):
                self.handles.append(layer.mlp.gate.register_forward_hook(self._router(pre)))
            if layer.self_attn.indexer is not None:
                self.handles.append(layer.self_attn.indexer.register_forward_hook(
                    self._indexer(pre, layer.self_attn.indexer), with_kwargs=True))

    def _router(self, pre):
        def fn(_m, _a, out):
            if not self.on:
                return
            logits, weights, index = out
            scores = torch.sigmoid(logits.float())
            order = torch.argsort(index, dim=-1)
            self.out[pre + "moe.topk_index"] = index.gather(-1, order).to(torch.int32).cpu().numpy()
            self.out[pre + "moe.topk_weight"] = _np(weights.gather(-1, order))
            self.out[pre + "moe.scores"] = _np(scores)
            self.out[pre + "moe.router_logits"] = _np(logits)
        return fn

    def _indexer(self, pre, idx):
        def fn(_m, args, kwargs, out):
            if not self.on:
                return
            names = ["hidden_states", "position_embeddings", "past_key_values", "position_ids"]
            a = dict(zip(names, args))
            a.update(kwargs)
            hs, (cos, sin), pos = a["hidden_states"], a["position_embeddings"], a["position_ids"]
            G, T, K = idx.num_heads, hs.shape[1], idx.topk_blocks
            B = idx.block_size
            with torch.no_grad():
                # raw block scores, recomputed from the same modules and inputs (prefill only)
                iq = idx.q_norm(idx.q_proj(hs).view(1, T, -1, idx.head_dim)).transpose(1, 2)
                ik = idx.k_norm(idx.k_proj(hs).view(1, T, 1, idx.head_dim)).transpose(1, 2)
                iq, ik = hfmod.apply_rotary_pos_emb(iq, ik, cos[..., :idx.head_dim], sin[..., :idx.head_dim])
                s = torch.matmul(iq.float(), ik.float().transpose(-1, -2))[0]  # [G, T, T]
                kpos = torch.arange(T, device=s.device)
                s = s.masked_fill(kpos[None, None, :] > pos[0][None, :, None], float("-inf"))
                nb = -(-T // B)
                s = torch.nn.functional.pad(s, (0, nb * B - T), value=float("-inf"))
                bs = s.view(G, T, nb, B).amax(-1)
            self.out[pre + "attn.block_scores"] = _np(bs)
            sel = out[0].cpu().numpy()  # [G, T, K'] HF order
            qb = (pos[0] // B).cpu().numpy()
            nloc = idx.local_blocks
            gold = np.full((G, T, K), -1, dtype=np.int32)
            for g in range(G):
                for t in range(T):
                    forced = sorted({max(int(qb[t]) - j, 0) for j in range(nloc)})
                    rest = [int(b) for b in sel[g, t] if b >= 0 and int(b) not in forced]
                    ids = (forced + rest)[:K]
                    gold[g, t, :len(ids)] = ids
            self.out[pre + "attn.block_indices"] = gold
            self.out[pre + "attn.block_indices_hf"] = sel.astype(np.int32)
        return fn

    def finish(self, num_layers=None, scores_from_logits=False):
        """Add names derived from the captured ones (eagle3.aux)."""
        L = self.tc.num_hidden_layers
        m3capture.Capture.finish(self, L, scores_from_logits=False)
        taps = sorted([min(2, L - 1), L // 2, max(L - 3, 0)])
        self.out["eagle3.aux"] = np.concatenate([self.out["layers.%d.input" % t] for t in taps], axis=1)
        return self.out


@torch.no_grad()
def greedy(model, ids, n, use_cache=True):
    """Greedy continuation of ids (1-D LongTensor): with the KV cache token by
    token, or (use_cache False) recomputing the whole sequence each step.
    Returns (tokens, [fp32 logits row used for each step])."""
    seq = ids[None, :]
    toks, steps = [], []
    if use_cache:
        out = model(input_ids=seq, use_cache=True)
        for _ in range(n):
            steps.append(out.logits[0, -1].float())
            nxt = int(torch.argmax(steps[-1]))
            toks.append(nxt)
            if len(toks) == n:
                break
            out = model(input_ids=torch.tensor([[nxt]], device=ids.device),
                        past_key_values=out.past_key_values, use_cache=True)
    else:
        for _ in range(n):
            out = model(input_ids=seq, use_cache=False)
            steps.append(out.logits[0, -1].float())
            nxt = int(torch.argmax(steps[-1]))
            toks.append(nxt)
            seq = torch.cat([seq, torch.tensor([[nxt]], device=ids.device)], 1)
    return toks, steps


@torch.no_grad()
def dump(model, input_ids, max_new_tokens=0):
    """Prefill once with hooks; returns {name: ndarray} with the spec's names."""
    cap = Capture(model)
    cap.on = True
    out = model(input_ids=input_ids[None, :], use_cache=False)
    cap.on = False
    res = cap.finish()
    res["logits"] = _np(out.logits[0])
    cap.close()
    if max_new_tokens > 0:
        toks, _ = greedy(model, input_ids, max_new_tokens, use_cache=True)
        res["greedy_tokens"] = np.array(toks, dtype=np.int32)
    return res


def deterministic():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    try:
        torch.set_float32_matmul_precision("highest")
    except Exception:
        pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case_dir")
    ap.add_argument("--mode", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", help="comma-separated token ids (default: inputs.safetensors input_ids)")
    ap.add_argument("--max-new-tokens", type=int, default=0)
    ap.add_argument("--attn", choices=["eager", "sdpa"], default="eager")
    ap.add_argument("--router-dtype", choices=["fp32", "model"], default="fp32")
    ap.add_argument("--rounding", choices=["hf", "m3"], default="hf",
                    help="bf16 only: m3 = patch HF's three extra rounding points (see M3Rounding)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--extras", action="store_true",
                    help="also write layers.{i}.attn.block_indices_hf (HF's own order, K = min(topk, blocks)) "
                         "and layers.{i}.moe.router_logits")
    a = ap.parse_args(argv)
    deterministic()
    model, cfg, routers = load_case_model(a.case_dir, a.device, a.attn)
    set_mode(model, a.mode, routers, a.router_dtype)
    if a.tokens:
        ids = [int(x) for x in a.tokens.replace(" ", ",").split(",") if x]
    else:
        ids = st_load_torch(os.path.join(a.case_dir, "inputs.safetensors"))["input_ids"].tolist()
    V = cfg.text_config.vocab_size
    if not ids or min(ids) < 0 or max(ids) >= V:
        sys.exit("hf_dump: token ids must be non-empty and in [0, %d)" % V)
    input_ids = torch.tensor(ids, dtype=torch.long, device=a.device)
    if a.rounding == "m3" and a.mode == "bf16":
        with M3Rounding(model):
            res = dump(model, input_ids, a.max_new_tokens)
    else:
        res = dump(model, input_ids, a.max_new_tokens)
    if not a.extras:
        res = {k: v for k, v in res.items() if not k.endswith(("block_indices_hf", "router_logits"))}
    import transformers
    meta = {"generator": "transformers %s" % transformers.__version__, "torch": torch.__version__,
            "mode": a.mode, "attn_implementation": a.attn, "router_dtype": a.router_dtype, "rounding": a.rounding,
            "device": a.device}
    m3dump.write_dump(a.out, {k: np.ascontiguousarray(v) for k, v in res.items()}, mode=a.mode,
                      producer="tools/adapters/hf_dump.py", metadata=meta)
    print("hf_dump: wrote %d tensors to %s" % (len(res), a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
