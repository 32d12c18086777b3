"""gen_vectors.py — generate the published M3 text vector suite (M3-VEC).

  /usr/bin/python3 tools/gen_vectors.py --out vectors            # the committed suite
  /usr/bin/python3 tools/gen_vectors.py --out build/vectors-big --big-only
        # the big cases (8,192-token selection, 2,200-token bf16 model): not
        # committed, generated on demand (make vectors-big) and run by make test
  /usr/bin/python3 tools/gen_vectors.py --check vectors          # regenerate the
        committed cases (and models/tiny) in a temp dir, compare every byte

Expectations come from tools/m3np.py (the independent numpy implementation).
Deterministic: seeded PCG64, fixed reduction order, sorted safetensors and JSON.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import m3np  # noqa: E402
import st  # noqa: E402
from m3np import F32, Num, bf16_round  # noqa: E402
import make_tiny_model as mtm  # noqa: E402

SUITE = "m3-text"
SUITE_VERSION = "1"
GENERATOR = "tools/gen_vectors.py"
GENERATOR_VERSION = "1+m3np" + m3np.VERSION

# Spec clause ids cited per component (spec/ defines them).
CL = {
    "num_fp32": "M3-NUM-MODE-1", "num_bf16": "M3-NUM-BF16-2",
    "rmsnorm": ["M3-NORM-1", "M3-NORM-2"],
    "rope": ["M3-ROPE-1", "M3-ROPE-2", "M3-ROPE-3"],
    "attention": ["M3-ATTN-GQA-1", "M3-ATTN-SCORE-1"],
    "msa_select": ["M3-MSA-SCORE-1", "M3-MSA-BLOCK-1", "M3-MSA-BLOCK-2", "M3-MSA-SELECT-1",
                   "M3-MSA-SELECT-2", "M3-MSA-SELECT-5", "M3-MSA-SELECT-6", "M3-MSA-SELECT-7"],
    "msa_attention": ["M3-MSA-ATTN-1", "M3-MSA-ATTN-2"],
    "router": ["M3-MOE-ROUTER-1", "M3-MOE-ROUTER-2", "M3-MOE-ROUTER-3"],
    "swiglu": ["M3-MLP-SWIGLU-1", "M3-MLP-SWIGLU-2"],
    "mlp": ["M3-MLP-SWIGLU-1", "M3-MLP-SWIGLU-3", "M3-MLP-DENSE-1"],
    "moe": ["M3-MOE-ROUTER-1", "M3-MOE-ROUTER-2", "M3-MOE-ROUTER-3", "M3-MOE-EXPERT-1",
            "M3-MOE-SHARED-1", "M3-MOE-COMBINE-1"],
    "model": ["M3-EMB-1", "M3-NORM-1", "M3-ATTN-PROJ-1", "M3-ATTN-QKNORM-1", "M3-ATTN-QKNORM-2",
              "M3-ROPE-3", "M3-ATTN-GQA-1", "M3-ATTN-SCORE-1", "M3-MODEL-1", "M3-MODEL-2", "M3-MODEL-3",
              "M3-MODEL-4", "M3-DUMP-3", "M3-DUMP-4", "M3-CKPT-NAMES-1", "M3-CFG-1"],
    "sparse_model": ["M3-MSA-IDX-1", "M3-MSA-IDX-2", "M3-MSA-IDX-3", "M3-MSA-IDX-4", "M3-MSA-SELECT-5",
                     "M3-MSA-ATTN-1", "M3-MSA-CACHE-1", "M3-MOE-ROUTER-1", "M3-MOE-ROUTER-2",
                     "M3-MOE-ROUTER-3", "M3-MOE-EXPERT-1", "M3-MOE-COMBINE-1", "M3-MOE-SHARED-1"],
    "dense_model": ["M3-MLP-DENSE-1", "M3-MLP-SWIGLU-1"],
    "greedy": ["M3-SAMPLE-1"],
    "chunks": ["M3-CACHE-1", "M3-CACHE-2"],
}
# Which clause each mutant violates.
MUTANT_CLAUSE = {
    "llama_norm": "M3-NORM-1", "rope_interleaved": "M3-ROPE-3", "rope_full": "M3-ROPE-3",
    "softmax_routing": "M3-MOE-ROUTER-1", "bias_in_weights": "M3-MOE-ROUTER-3",
    "no_local_block": "M3-MSA-SELECT-1", "shared_x2": "M3-MOE-COMBINE-1",
    "gqa_modulo": "M3-ATTN-GQA-1", "no_up_plus1": "M3-MLP-SWIGLU-1", "no_clamp": "M3-MLP-SWIGLU-2",
}
# Tensor (in the mutant's dump) where each mutant must first diverge on the base case.
MUTANT_FIRST = {
    "llama_norm": "layers.0.attn_norm", "rope_interleaved": "layers.0.attn.output",
    "rope_full": "layers.0.attn.output", "softmax_routing": "layers.3.moe.scores",
    "bias_in_weights": "layers.3.moe.topk_weight", "no_local_block": "layers.3.attn.block_indices",
    "shared_x2": "layers.3.mlp.output", "gqa_modulo": "layers.0.attn.output",
    "no_up_plus1": "layers.0.mlp.output", "no_clamp": "layers.0.mlp.output",
}

CASES = []  # (rel dir, big, function)


def case(rel, big=False):
    def deco(fn):
        CASES.append((rel, big, fn))
        return fn
    return deco


def rng(seed):
    return np.random.default_rng(seed)


def nrm(r, shape, std=1.0):
    return (r.standard_normal(shape) * std).astype(F32)


def clauses(comp, mode, extra=()):
    c = list(CL[comp]) + list(extra)
    c += ["M3-NUM-MODE-1", "M3-NUM-MODE-2"] if mode == "fp32" else ["M3-NUM-BF16-1", "M3-NUM-BF16-2"]
    return sorted(set(c))


def evidence_file(expected_bytes, ev):
    """evidence.safetensors (spec/vectors.md M3-VEC-11): the golden's tie
    evidence as F32, bound to the golden by its sha256."""
    return st.dumps({k: np.asarray(v, F32) for k, v in ev.items()},
                    {"m3.evidence_version": "1", "m3.golden_sha256": hashlib.sha256(expected_bytes).hexdigest()})


def with_evidence(files, ev):
    """files{} of a case plus the evidence of its expected.safetensors (none when ev is empty)."""
    if ev:
        files["evidence.safetensors"] = evidence_file(files["expected.safetensors"], ev)
    return files


def model_evidence(cfg, W, scores, greedy_rows):
    """The tie evidence of a model golden (M3-VEC-11): raw block scores of the
    sparse layers, the correction bias of the MoE layers, the logits rows the
    greedy steps took their argmax of."""
    ev = dict(scores)
    for i in range(cfg.L):
        if cfg.moe[i]:
            ev["layers.%d.moe.bias" % i] = W[m3np.P + "layers.%d.block_sparse_moe.e_score_correction_bias" % i]
    if greedy_rows:
        ev["greedy_logits"] = np.stack(greedy_rows)
    return ev


def comp_case(component, mode, seed, desc, params, inputs, expected, extra_clauses=(), evidence=None):
    return {"meta": {"component": component, "mode": mode, "profile": mode, "seed": seed,
                     "description": desc, "params": params,
                     "clauses": clauses(component, mode, extra_clauses)},
            "files": with_evidence({"inputs.safetensors": st.dumps(inputs),
                                    "expected.safetensors": st.dumps(expected)}, evidence)}


def maybe_bf16(a, mode):
    return bf16_round(a) if mode == "bf16" else np.asarray(a, F32)


# ------------------------------------------------------------------ components

def _rmsnorm(mode, seed):
    r = rng(seed)
    x = nrm(r, (7, 64), 3.0)
    x[2] = 0.0
    x[4] *= 300.0
    x[5] = nrm(r, (64,), 1e-3)
    x = maybe_bf16(x, mode)
    w = bf16_round(nrm(r, (64,), 0.3))
    y = m3np.rmsnorm(x, w, 1e-6, Num(mode))
    return comp_case("rmsnorm", mode, seed,
                     "Gemma RMSNorm x*rsqrt(mean(x^2)+eps)*(1+w); rows: random, zero, large, tiny",
                     {"eps": 1e-6}, {"x": x, "w": st.BF16(w)}, {"y": y})


for _m in ("fp32", "bf16"):
    case("rmsnorm/basic_" + _m)(lambda m=_m: _rmsnorm(m, 101))


def _rope(mode, seed, positions, nh, hd, rd, desc):
    r = rng(seed)
    pos = np.asarray(positions, np.int32)
    x = maybe_bf16(nrm(r, (len(pos), nh, hd)), mode)
    num = Num(mode)
    cos, sin = m3np.rope_tables(pos, rd, 5e6, num)
    y = m3np.rope_apply(x, cos, sin, rd, num)
    return comp_case("rope", mode, seed, desc, {"rotary_dim": rd, "theta": 5000000.0},
                     {"x": x, "positions": pos}, {"y": y, "cos": cos, "sin": sin})


BIG_POS = [0, 1, 2, 4095, 65535, 100000, 131071, 524287, 524288, 999999, 1000000, 1048575]
for _m in ("fp32", "bf16"):
    case("rope/small_" + _m)(lambda m=_m: _rope(m, 201, list(range(6)), 3, 16, 8,
                                                "partial rotate-half RoPE, positions 0..5, hd 16 rd 8"))
    case("rope/large_pos_" + _m)(lambda m=_m: _rope(m, 202, BIG_POS, 2, 16, 8,
                                                    "partial RoPE at large positions up to 1048575"))
    case("rope/m3_dims_large_pos_" + _m)(lambda m=_m: _rope(m, 203, BIG_POS, 2, 128, 64,
                                                            "M3 head dims (hd 128, rd 64), large positions"))


def _attention(mode, seed, T, nh, nkv, hd, desc):
    r = rng(seed)
    q = maybe_bf16(nrm(r, (T, nh, hd), 1.5), mode)
    k = maybe_bf16(nrm(r, (T, nkv, hd), 1.5), mode)
    v = maybe_bf16(nrm(r, (T, nkv, hd)), mode)
    out = m3np.attention(q, k, v, np.arange(T), Num(mode))
    return comp_case("attention", mode, seed, desc, {},
                     {"q": q, "k": k, "v": v}, {"out": out})


for _m in ("fp32", "bf16"):
    case("attention/gqa2_" + _m)(lambda m=_m: _attention(m, 301, 11, 4, 2, 16, "dense causal GQA 4 q heads / 2 kv heads"))
    case("attention/gqa4_" + _m)(lambda m=_m: _attention(m, 302, 9, 8, 2, 16, "dense causal GQA 8/2 (query head j -> kv j//4)"))
    case("attention/mha_" + _m)(lambda m=_m: _attention(m, 303, 5, 3, 3, 8, "dense causal, nh == nkv"))


def _msa_select(seed, T, G, d, B, topk, local, init, desc, scores=True, ints=False, extra=()):
    r = rng(seed)
    if ints:
        iq = r.integers(-1, 2, (T, G, d)).astype(F32)
        ik = r.integers(-1, 2, (T, d)).astype(F32)
    else:
        iq = nrm(r, (T, G, d))
        ik = nrm(r, (T, d))
    pos = np.arange(T)
    sel, bs = m3np.msa_select(iq, ik, pos, B, topk, local, init, Num("fp32"))
    exp = {"block_indices": sel}
    if scores:
        exp["block_scores"] = bs
    p = {"block_size": B, "topk": topk, "local_blocks": local, "init_blocks": init}
    return comp_case("msa_select", "fp32", seed, desc, p, {"iq": iq, "ik": ik}, exp, extra,
                     evidence=None if scores else {"block_scores": bs})


case("msa_select/basic")(lambda: _msa_select(401, 23, 2, 16, 4, 3, 1, 0, "random scores, B 4, top 3, local 1"))
case("msa_select/seq_lt_block")(lambda: _msa_select(402, 3, 2, 8, 4, 3, 1, 0, "sequence shorter than one block",
                                                   extra=["M3-MSA-SELECT-4"]))
case("msa_select/seq_eq_block")(lambda: _msa_select(403, 4, 2, 8, 4, 3, 1, 0, "sequence exactly one block"))
case("msa_select/block_boundary")(lambda: _msa_select(404, 9, 2, 8, 4, 2, 1, 0,
                                                      "last query at a block's first slot (pos 8, B 4)"))
case("msa_select/fewer_blocks_than_topk")(lambda: _msa_select(405, 10, 2, 8, 4, 8, 1, 0,
                                                              "3 blocks, top 8: -1 padding",
                                                              extra=["M3-MSA-SELECT-4"]))
case("msa_select/ties")(lambda: _msa_select(406, 40, 2, 4, 4, 3, 1, 0,
                                            "integer iq/ik in {-1,0,1}: exact score ties -> lower block id",
                                            ints=True, extra=["M3-MSA-SELECT-3"]))
case("msa_select/init_blocks")(lambda: _msa_select(407, 29, 2, 8, 4, 4, 1, 1, "init 1 + local 1 forced"))
case("msa_select/init2_local2")(lambda: _msa_select(408, 37, 3, 8, 4, 5, 2, 2, "init 2 + local 2 forced"))
case("msa_select/deploy_2200")(lambda: _msa_select(409, 2200, 4, 16, 128, 16, 1, 0,
                                                   "deployment MSA (B 128, top 16, 4 index heads, local 1), 2200 tokens"))
case("msa_select/deploy_8192", big=True)(lambda: _msa_select(
    410, 8192, 4, 16, 128, 16, 1, 0, "deployment MSA (B 128, top 16, 4 index heads, local 1), 8192 tokens",
    scores=False))


def _msa_attention(mode, seed, T, nh, nkv, hd, B, topk, desc):
    r = rng(seed)
    q = maybe_bf16(nrm(r, (T, nh, hd), 1.5), mode)
    k = maybe_bf16(nrm(r, (T, nkv, hd), 1.5), mode)
    v = maybe_bf16(nrm(r, (T, nkv, hd)), mode)
    iq = nrm(r, (T, nkv, 8))
    ik = nrm(r, (T, 8))
    sel, _ = m3np.msa_select(iq, ik, np.arange(T), B, topk, 1, 0, Num("fp32"))
    out = m3np.msa_attention(q, k, v, sel, np.arange(T), B, Num(mode))
    return comp_case("msa_attention", mode, seed, desc, {"block_size": B},
                     {"q": q, "k": k, "v": v, "block_indices": sel}, {"out": out})


for _m in ("fp32", "bf16"):
    case("msa_attention/basic_" + _m)(lambda m=_m: _msa_attention(m, 501, 23, 4, 2, 16, 4, 3,
                                                                  "block-sparse attention, B 4, top 3"))
case("msa_attention/deploy_2200_fp32")(lambda: _msa_attention("fp32", 502, 2200, 8, 4, 8, 128, 16,
                                                             "block-sparse attention, B 128, top 16, 2200 tokens"))


def _router(seed, T, H, E, k, desc, ties=False):
    r = rng(seed)
    x = bf16_round(nrm(r, (T, H)))
    w = nrm(r, (E, H), 1 / np.sqrt(H))
    b = (r.uniform(-0.5, 0.5, E)).astype(F32)
    if ties:
        w[5] = w[2]
        b[5] = b[2]
        w[E - 1] = w[0]
        b[E - 1] = b[0]
    idx, wt, sc = m3np.router(x, w, b, k, Num("fp32"))
    extra = ["M3-DECISION-5"] if ties else []
    return comp_case("router", "fp32", seed, desc, {"topk": k}, {"x": x, "weight": w, "bias": b},
                     {"topk_index": idx, "topk_weight": wt, "scores": sc}, extra, evidence={"bias": b})


case("router/e8_top2")(lambda: _router(601, 9, 32, 8, 2, "sigmoid router, bias for choice only, 8 experts top 2"))
case("router/e16_top4")(lambda: _router(602, 12, 32, 16, 4, "sigmoid router, 16 experts top 4"))
case("router/ties")(lambda: _router(603, 16, 32, 8, 2, "experts 2==5 and 0==7 (identical rows+bias): ties -> lower id",
                                    ties=True))


def _swiglu(mode, seed):
    r = rng(seed)
    up32 = np.nextafter(F32(7), F32(8))
    dn32 = np.nextafter(F32(7), F32(6))
    edges = [0.0, -0.0, 1.0, -1.0, 6.5, 7.0, -7.0, float(up32), float(dn32), -float(up32),
             7.03125, -7.03125, 6.96875, 8.0, -8.0, 20.0, -20.0, 100.0, -100.0, 1e4, -1e4]
    e = np.array(edges, F32)
    n = len(e)
    gate = np.repeat(e, n).reshape(n, n)
    up = np.tile(e, n).reshape(n, n)
    extra = nrm(r, (4, n), 4.0)
    gate = np.concatenate([gate, extra], 0)
    up = np.concatenate([up, nrm(r, (4, n), 4.0)], 0)
    gate = maybe_bf16(gate, mode)
    up = maybe_bf16(up, mode)
    out = m3np.swiglu(gate, up, 1.702, 7.0, 1.0, Num(mode))
    return comp_case("swiglu", mode, seed,
                     "SwiGLU-OAI on all pairs of edge values (+-7 exactly, neighbours, beyond, huge) + random",
                     {"alpha": 1.702, "limit": 7.0, "beta": 1.0}, {"gate": gate, "up": up}, {"out": out})


for _m in ("fp32", "bf16"):
    case("swiglu/edges_" + _m)(lambda m=_m: _swiglu(m, 701))


def _mlp(mode, seed):
    r = rng(seed)
    H, I = 32, 48
    x = maybe_bf16(nrm(r, (6, H)), mode)
    x[1] *= 6.0
    x[4] *= -5.0
    x = maybe_bf16(x, mode)
    g = bf16_round(nrm(r, (I, H), 1 / np.sqrt(H)))
    u = bf16_round(nrm(r, (I, H), 1 / np.sqrt(H)))
    dn = bf16_round(nrm(r, (H, I), 1 / np.sqrt(I)))
    y = m3np.mlp(x, g, u, dn, 1.702, 7.0, 1.0, Num(mode))
    return comp_case("mlp", mode, seed, "dense SwiGLU-OAI MLP (rows 1 and 4 large: clamps active)",
                     {"alpha": 1.702, "limit": 7.0, "beta": 1.0},
                     {"x": x, "gate": st.BF16(g), "up": st.BF16(u), "down": st.BF16(dn)}, {"y": y})


for _m in ("fp32", "bf16"):
    case("mlp/basic_" + _m)(lambda m=_m: _mlp(m, 801))


def _moe(mode, seed, T, H, E, I, Is, k, desc):
    r = rng(seed)
    x = maybe_bf16(nrm(r, (T, H)), mode)
    rw = nrm(r, (E, H), 1 / np.sqrt(H))
    rb = r.uniform(-0.5, 0.5, E).astype(F32)
    w1 = bf16_round(nrm(r, (E, I, H), 1 / np.sqrt(H)))
    w3 = bf16_round(nrm(r, (E, I, H), 1 / np.sqrt(H)))
    w2 = bf16_round(nrm(r, (E, H, I), 1 / np.sqrt(I)))
    sg = bf16_round(nrm(r, (Is, H), 1 / np.sqrt(H)))
    su = bf16_round(nrm(r, (Is, H), 1 / np.sqrt(H)))
    sd = bf16_round(nrm(r, (H, Is), 1 / np.sqrt(Is)))
    y, idx, wt, sc = m3np.moe(x, rw, rb, w1, w3, w2, sg, su, sd, k, 2.0, 1.702, 7.0, 1.0, Num(mode))
    return comp_case("moe", mode, seed, desc,
                     {"topk": k, "routed_scaling_factor": 2.0, "alpha": 1.702, "limit": 7.0, "beta": 1.0},
                     {"x": x, "router": rw, "bias": rb, "w1": st.BF16(w1), "w3": st.BF16(w3), "w2": st.BF16(w2),
                      "sh_gate": st.BF16(sg), "sh_up": st.BF16(su), "sh_down": st.BF16(sd)},
                     {"y": y, "topk_index": idx, "topk_weight": wt}, evidence={"bias": rb, "scores": sc})


for _m in ("fp32", "bf16"):
    case("moe/e8_top2_" + _m)(lambda m=_m: _moe(m, 901, 10, 32, 8, 24, 24, 2, "MoE 8 experts top 2 + shared, scale 2"))
    case("moe/e16_top4_" + _m)(lambda m=_m: _moe(m, 902, 12, 32, 16, 16, 32, 4, "MoE 16 experts top 4 + shared"))


# ------------------------------------------------------------------ models

_MODEL_CACHE = {}


def _model(key, cfg, seed, **kw):
    if key not in _MODEL_CACHE:
        wd = mtm.make_weights(cfg, seed, **kw)
        tensors = {k: (st.BF16(v) if dt == "BF16" else v) for k, (v, dt) in wd.items()}
        _MODEL_CACHE[key] = (m3np.Config(cfg), mtm.weights_f32(wd),
                             (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode(),
                             st.dumps(tensors, {"format": "pt"}))
    return _MODEL_CACHE[key]


def _tiny():
    return _model("tiny", mtm.tiny_config(), mtm.TINY_SEED)


_RUNS = {}
_EVIDENCE = {}


def _run_key(model, ids, mode, n_new):
    return (hashlib.sha256(model[3]).hexdigest(), np.asarray(ids).tobytes(), mode, n_new)


def run_model(model, ids, mode, n_new):
    """(full dump, greedy tokens, min greedy margin) — prefill then greedy decode
    from the same state; cached per (model, ids, mode, n_new). The run's tie
    evidence (run_evidence) is kept beside it."""
    cfg, W, cj, mst = model
    key = _run_key(model, ids, mode, n_new)
    if key not in _RUNS:
        num = Num(mode)
        state = m3np.State(cfg)
        full = {}
        lg = m3np.forward(cfg, W, ids, num, state, full, want_scores=True)
        scores = {k: full.pop(k) for k in sorted(full) if k.endswith("attn.block_scores")}
        toks, margins, rows = [], [], []
        for step in range(n_new):
            row = lg[-1]
            rows.append(np.array(row, F32))
            s = np.sort(row)
            margins.append(float(s[-1] - s[-2]))
            t = int(np.argmax(row))
            toks.append(t)
            if step + 1 < n_new:
                lg = m3np.forward(cfg, W, np.array([t]), num, state)
        _RUNS[key] = (full, np.array(toks, np.int32), min(margins) if margins else None)
        _EVIDENCE[key] = model_evidence(cfg, W, scores, rows)
    return _RUNS[key]


def run_evidence(model, ids, mode, n_new):
    """The tie evidence of run_model's golden (M3-VEC-11)."""
    run_model(model, ids, mode, n_new)
    return _EVIDENCE[_run_key(model, ids, mode, n_new)]


def pick_ids(model, seed, T, n_new, accept=None):
    """First input (by trial index) whose greedy margins are comfortable (>= 0.25
    in both modes) and whose bf16 greedy continuation equals the fp32 one."""
    cfg = model[0]
    r = rng(seed)
    for trial in range(200):
        ids = r.integers(3, cfg.V, T).astype(np.int32)
        if n_new:
            _, t32, m32 = run_model(model, ids, "fp32", n_new)
            _, t16, m16 = run_model(model, ids, "bf16", n_new)
            if m32 < 0.25 or m16 < 0.25 or not np.array_equal(t32, t16):
                continue
        if accept is not None and not accept(ids):
            continue
        return ids, trial
    raise RuntimeError("no acceptable input found (seed %d)" % seed)


def model_case(desc, mode, seed, model, ids, n_new, chunks, extra_clauses=(), trial=None):
    cfg, W, cj, mst = model
    num = Num(mode)
    full, toks, margin = run_model(model, ids, mode, n_new)
    if chunks and list(chunks) != [len(ids)]:
        ch = m3np.forward_chunks(cfg, W, ids, num, chunks)
        for k in full:
            assert np.array_equal(ch[k], full[k]), "chunked != prefill at " + k
    exp = dict(full)
    params = {"T": int(len(ids))}
    notes = {"dump_order": m3np.dump_order(cfg)}
    ec = list(extra_clauses)
    if n_new:
        exp["greedy_tokens"] = toks
        params.update({"max_new_tokens": n_new, "min_greedy_margin": round(margin, 4)})
        notes["greedy"] = "argmax of the last row, ties to the lowest id; eos does not stop; margin = min top1-top2"
        ec += CL["greedy"]
    if chunks:
        params["chunks"] = list(chunks)
        ec += CL["chunks"]
    if trial is not None:
        params["input_trial"] = trial
    ec += CL["sparse_model"] if any(cfg.sparse) else []
    ec += CL["dense_model"] if not all(cfg.moe) else []
    return {"meta": {"component": "model", "mode": mode, "profile": mode, "seed": seed, "description": desc,
                     "params": params, "clauses": clauses("model", mode, ec), "notes": notes},
            "files": with_evidence({"config.json": cj, "model.safetensors": mst,
                                    "inputs.safetensors": st.dumps({"input_ids": np.asarray(ids, np.int32)}),
                                    "expected.safetensors": st.dumps(exp)},
                                   run_evidence(model, ids, mode, n_new))}


TINY_IDS_SEED = 1001
TINY_NEW = 8
_IDS = {}


def tiny_ids():
    if "tiny" not in _IDS:
        _IDS["tiny"] = pick_ids(_tiny(), TINY_IDS_SEED, 20, TINY_NEW, accept=lambda ids: mutants_ok(ids, check=True))
    return _IDS["tiny"]


for _m in ("fp32", "bf16"):
    case("model/tiny_" + _m)(lambda m=_m: model_case(
        "models/tiny (5 layers: 3 dense, 2 MoE+MSA), 20 tokens, greedy 8, chunked prefill", m,
        TINY_IDS_SEED, _tiny(), tiny_ids()[0], TINY_NEW, [7, 1, 1, 4, 1, 6], trial=tiny_ids()[1]))
    case("model/tiny_decode_" + _m)(lambda m=_m: model_case(
        "models/tiny, 20 tokens decoded one at a time (decode == prefill)", m,
        TINY_IDS_SEED, _tiny(), tiny_ids()[0], 0, [1] * 20, trial=tiny_ids()[1]))


def _layer_model(kind):
    if kind == "dense":
        cfg = mtm.tiny_config(L=1, dense_layers=1, V=64, H=32, I_dense=64)
        return _model("layer_dense", cfg, 1101)
    cfg = mtm.tiny_config(L=1, dense_layers=0, V=64, H=32)
    return _model("layer_sparse", cfg, 1102)


for _m in ("fp32", "bf16"):
    case("model/layer_dense_" + _m)(lambda m=_m: model_case(
        "one decoder layer: dense attention + dense MLP (L=1)", m, 1111, _layer_model("dense"),
        rng(1111).integers(3, 64, 13).astype(np.int32), 0, [5, 8]))
    case("model/layer_sparse_moe_" + _m)(lambda m=_m: model_case(
        "one decoder layer: MSA (B 4, top 3, local 1) + MoE 8x top2 + shared (L=1)", m, 1112,
        _layer_model("sparse"), rng(1112).integers(3, 64, 23).astype(np.int32), 0, [9, 1, 13]))


def _deploy_model():
    cfg = mtm.tiny_config(L=2, dense_layers=1, H=16, nh=8, nkv=4, hd=16, rd=8, V=64, E=4, topk=2,
                          I=16, I_shared=16, I_dense=32, idx_dim=16, idx_heads=4, block=128, idx_topk=16,
                          local=1, init=0)
    return _model("deploy", cfg, 1201)


_DEPLOY_IDS = {}


def deploy_ids():
    if "d" not in _DEPLOY_IDS:
        _DEPLOY_IDS["d"] = pick_ids(_deploy_model(), 1211, 2200, 2)
    return _DEPLOY_IDS["d"]


for _m in ("fp32", "bf16"):
    case("model/deploy_msa_2200_" + _m, big=(_m == "bf16"))(lambda m=_m: model_case(
        "deployment MSA parameters (B 128, top 16, 4 index heads, local 1) in a 2-layer model "
        "(dense, then MSA+MoE), 2200 tokens (> 16 blocks), greedy 2", m, 1211, _deploy_model(),
        deploy_ids()[0], 2, [2100, 1, 99], trial=deploy_ids()[1]))


# ------------------------------------------------------------------ mutants

def _nmse(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return float(((a - b) ** 2).sum() / max((b ** 2).sum(), 1e-30))


def first_diff(order, a, b):
    for k in order:
        if not np.array_equal(a[k], b[k]):
            return k
    return None


def _sets_differ(a, b):
    return any(set(x.tolist()) != set(y.tolist()) for x, y in zip(a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])))


MUTANT_COMPONENT = {"attn_norm": "norm", "attn.output": "attention", "attn.block_indices": "msa-select",
                    "moe.scores": "moe-router", "moe.topk_weight": "moe-router", "moe.topk_index": "moe-router"}
MIN_NMSE = 1e-3     # a mutant's first tensor must be this far (nmse) from both golden and faithful bf16


def _dumps(ids, flags=(), mode="bf16"):
    cfg, W, _, _ = _tiny()
    d = {}
    m3np.forward(cfg, W, ids, Num(mode, flags), dump=d, want_scores=True)
    return d


def _mutant_problem(name, ids, g, f):
    """None when mutant `name` is discriminated on input ids, else why not."""
    cfg = _tiny()[0]
    order = m3np.dump_order(cfg)
    d = _dumps(ids, [name])
    k = first_diff(order, d, f)
    if k != MUTANT_FIRST[name]:
        return "first divergence %s" % k
    if d[k].dtype == F32:
        if min(_nmse(d[k], g[k]), _nmse(d[k], f[k])) < MIN_NMSE:
            return "too close at %s" % k
        return None
    # block_indices: some row must drop a block whose golden score is clearly
    # below the one that replaced it (beyond the bf16 tie tolerance)
    sc = g[k.replace("block_indices", "block_scores")]
    G, T, K = d[k].shape
    for gi in range(G):
        for t in range(T):
            a = set(d[k][gi, t].tolist()) - {-1}
            b = set(g[k][gi, t].tolist()) - {-1}
            if a != b:
                row = sc[gi, t]
                top = float(np.abs(row[np.isfinite(row)]).max())
                gap = min(row[x] for x in a - b) - max(row[x] for x in b - a)
                if gap > 0.05 * top:
                    return None
    return "no decisive set difference at %s" % k


def mutants_ok(ids, check=False):
    """Every mutant diverges first at MUTANT_FIRST, far beyond the faithful bf16
    error; faithful bf16 makes the same discrete choices as fp32."""
    order = m3np.dump_order(_tiny()[0])
    g = _dumps(ids, mode="fp32")
    f = _dumps(ids)
    for k in order:
        if g[k].dtype != F32 and _sets_differ(g[k], f[k]):
            return False
    return all(_mutant_problem(n, ids, g, f) is None for n in sorted(m3np.MUTANTS))


def mutant_case(name):
    ids = tiny_ids()[0]
    cfg = _tiny()[0]
    d = {}
    flags = [] if name == "faithful_bf16" else [name]
    num = Num("bf16", flags)
    state = m3np.State(cfg)
    lg = m3np.forward(cfg, _tiny()[1], ids, num, state, d)
    toks = []
    for step in range(TINY_NEW):   # the base case asks for a greedy continuation (M3-DUMP-5)
        toks.append(int(np.argmax(lg[-1])))
        if step + 1 < TINY_NEW:
            lg = m3np.forward(cfg, _tiny()[1], np.array([toks[-1]]), num, state)
    d["greedy_tokens"] = np.array(toks, np.int32)
    meta = {"m3.dump_version": "1", "m3.mode": "bf16",
            "m3.producer": "tools/m3np.py bf16 mode" + ("" if not flags else " + mutant " + name)}
    mj = {"id": "mutant." + name, "case": "model/tiny_fp32", "dump": "dump.safetensors", "profile": "bf16",
          "mode": "bf16", "seed": TINY_IDS_SEED}
    if name == "faithful_bf16":
        mj.update({"expect": "pass", "clauses": [CL["num_bf16"]],
                   "description": "faithful bf16-mode port (tools/m3np.py bf16 mode): must pass the bf16 profile"})
    else:
        t = MUTANT_FIRST[name]
        layer = int(t.split(".")[1])
        sub = t.split(".", 2)[2]
        comp = MUTANT_COMPONENT.get(sub, "moe" if (sub == "mlp.output" and cfg.moe[layer]) else sub.split(".")[0])
        mj.update({"expect": "fail", "first_divergence": {"layer": layer, "tensor": t, "component": comp},
                   "clauses": sorted([MUTANT_CLAUSE[name], CL["num_bf16"]]),
                   "description": "mutant: " + m3np.MUTANTS[name] + " (otherwise the faithful bf16 mode)"})
    return {"meta": mj, "json_name": "mutant.json",
            "files": {"dump.safetensors": st.dumps(bf16_store(d), meta)}}


def bf16_store(d):
    """Dump tensors for storage: floats as BF16 where exactly representable
    (M3-DUMP-1; the kit widens them exactly), the rest as they are."""
    return {n: (st.BF16(v) if v.dtype == F32 and np.array_equal(bf16_round(v), v) else v) for n, v in d.items()}


for _n in ["faithful_bf16"] + sorted(m3np.MUTANTS):
    case("mutants/" + _n)(lambda n=_n: mutant_case(n))


# ------------------------------------------------------------------ port-bug mutants
# Bugs that third-party M3 ports shipped (docs/port-bugs.md, tools/port_bugs.py).
# Each dump is what a port with that bug writes for its base case (M3-DUMP-5:
# the case's chunks in order, then its greedy continuation), in bf16 mode,
# floats stored as BF16 where exact (M3-DUMP-1) to keep the suite small.

def _negbias_model():
    """One MSA+MoE layer whose correction biases all sit 1.7 lower: the same
    choices for a faithful router (a constant shift), but biased scores below
    -1, as a load balancer leaves them on over-used experts."""
    cfg = mtm.tiny_config(L=1, dense_layers=0, V=64, H=32)
    if "negbias" not in _MODEL_CACHE:
        wd = mtm.make_weights(cfg, 1103)
        b = P_NEGBIAS
        wd[b] = ((wd[b][0] - F32(1.7)).astype(F32), wd[b][1])
        tensors = {k: (st.BF16(v) if dt == "BF16" else v) for k, (v, dt) in wd.items()}
        _MODEL_CACHE["negbias"] = (m3np.Config(cfg), mtm.weights_f32(wd),
                                   (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode(),
                                   st.dumps(tensors, {"format": "pt"}))
    return _MODEL_CACHE["negbias"]


P_NEGBIAS = m3np.P + "layers.0.block_sparse_moe.e_score_correction_bias"
NEGBIAS_CHUNKS = [9, 1, 13]
for _m in ("fp32", "bf16"):
    case("model/layer_moe_negbias_" + _m)(lambda m=_m: model_case(
        "one decoder layer: MSA (B 4, top 3, local 1) + MoE 8x top2 + shared (L=1), correction biases "
        "shifted by -1.7 so that some tokens have fewer than 2 biased router scores above -1", m, 1113, _negbias_model(),
        rng(1113).integers(3, 64, 23).astype(np.int32), 0, NEGBIAS_CHUNKS))

# name: (base case, tensor of the first divergence, clause, real-shape condition)
PORT_BUG = {
    "experts_plain_silu": ("model/tiny_fp32", "layers.3.mlp.output", "M3-MOE-EXPERT-1",
                           "any MoE layer, any length (layers 3..59 of the release; the 3 dense layers stay right)"),
    "shared_lost": ("model/tiny_fp32", "layers.3.mlp.output", "M3-MOE-SHARED-1",
                    "any MoE layer, any length"),
    "scale_dropped": ("model/tiny_fp32", "layers.3.mlp.output", "M3-MOE-COMBINE-1",
                      "any MoE layer, any length (routed_scaling_factor 2.0 in the release and here)"),
    "bias_dropped": ("model/tiny_fp32", "layers.3.moe.topk_index", "M3-MOE-ROUTER-2",
                     "any token whose top-k changes with the bias: any MoE layer, any length"),
    "topk_init_minus1": ("model/layer_moe_negbias_fp32", "layers.0.moe.topk_index", "M3-MOE-ROUTER-2",
                         "a token with fewer than k biased scores above -1 (correction biases below -1)"),
    "qk_norm_all_heads": ("model/tiny_fp32", "layers.0.attn.output", "M3-ATTN-QKNORM-1",
                          "every layer, any length (64 q heads / 4 kv heads normed as one 8192 / 512 vector)"),
    "block_causal_only": ("model/tiny_fp32", "layers.3.attn.output", "M3-MSA-ATTN-1",
                          "prefill (or a chunk) of 2+ tokens on a sparse layer: every query but a block's last "
                          "sees later tokens of its own 128-token block; decode (one token) hides it"),
    "topk_layout": ("model/tiny_fp32", "layers.3.attn.output", "M3-MSA-IDX-4",
                    "a prefill chunk of 2+ tokens with T != G (4 index heads in the release); "
                    "decode (T = 1) reads the same memory either way"),
    "block_is_page": ("model/tiny_fp32", "layers.3.attn.block_indices", "M3-MSA-BLOCK-1",
                      "any sparse layer: the selected ids are token ids from 2 tokens on; the attention output "
                      "changes once the context passes top-k tokens (17 with --page-size 1 and top 16)"),
    "index_cache_lost": ("model/tiny_fp32", "layers.3.attn.block_indices", "M3-MSA-CACHE-1",
                         "a continued cache (reused prefix, partial cache hit, disaggregated decode) and a context "
                         "past top-k blocks (16 x 128 = 2048 tokens): below that every block is selected anyway"),
    "topk_reuse": ("model/tiny_fp32", "layers.4.attn.block_indices", "M3-MSA-SELECT-9",
                   "a context past top-k blocks (2048 tokens): below that every layer selects every block"),
    "sentinel_read": ("model/tiny_fp32", "layers.3.attn.output", "M3-MSA-SELECT-4",
                      "a query with fewer visible blocks than top-k, i.e. in the first 15 blocks (1920 tokens) "
                      "of every sequence, past its first block"),
}
PORT_BUG_MODELS = {"model/tiny_fp32": lambda: (_tiny(), tiny_ids()[0], [7, 1, 1, 4, 1, 6], TINY_NEW),
                   "model/layer_moe_negbias_fp32": lambda: (
                       _negbias_model(), rng(1113).integers(3, 64, 23).astype(np.int32), NEGBIAS_CHUNKS, 0)}


_FAITHFUL_RUNS = {}


# Conditions under which a port with the bug writes the faithful dump (bit for
# bit; selections as sets, M3-DUMP-7), checked when the mutant is generated:
# where tests miss it.
TOPK_COVERS = "the first 12 tokens (top-k covers every block; 2048 tokens in the release)"
PORT_BUG_HIDDEN = {
    "block_causal_only": [("decode (chunks of 1 token)", "decode")],
    "topk_layout": [("decode (chunks of 1 token)", "decode")],
    "index_cache_lost": [("one prefill chunk (no cache boundary)", "one_chunk"), (TOPK_COVERS, "prefix12")],
    "topk_reuse": [(TOPK_COVERS, "prefix12")],
    "topk_init_minus1": [("models/tiny's router (every biased score above -1), the input of model/tiny_fp32",
                          "tiny")],
}


def _hidden_run(kind, model, ids, chunks):
    if kind == "decode":
        return model, ids, [1] * len(ids)
    if kind == "one_chunk":
        return model, ids, [len(ids)]
    if kind == "prefix12":
        return model, ids[:12], _prefix_chunks(chunks, 12)
    if kind == "tiny":
        return _tiny(), tiny_ids()[0], [7, 1, 1, 4, 1, 6]
    raise ValueError(kind)


def _port_run(model, ids, chunks, n_new, mode, flags):
    """Dump of a port run: chunks in order on one state, then greedy decode
    (faithful runs cached: every port bug compares with the same ones)."""
    if not flags:
        key = (id(model), np.asarray(ids).tobytes(), tuple(chunks), n_new, mode)
        if key not in _FAITHFUL_RUNS:
            _FAITHFUL_RUNS[key] = _port_run_(model, ids, chunks, n_new, mode, flags)
        return _FAITHFUL_RUNS[key]
    return _port_run_(model, ids, chunks, n_new, mode, flags)


def _port_run_(model, ids, chunks, n_new, mode, flags):
    cfg, W = model[0], model[1]
    num = Num(mode, flags)
    st_ = m3np.State(cfg)
    parts = []
    o = 0
    for c in chunks:
        dd = {}
        lg = m3np.forward(cfg, W, ids[o:o + c], num, st_, dd)
        parts.append(dd)
        o += c
    d = {k: (np.concatenate([p[k] for p in parts], axis=1) if k.endswith("block_indices")
             else np.concatenate([p[k] for p in parts], axis=0)) for k in parts[0]}
    if n_new:
        toks = []
        for step in range(n_new):
            toks.append(int(np.argmax(lg[-1])))
            if step + 1 < n_new:
                lg = m3np.forward(cfg, W, np.array([toks[-1]]), num, st_)
        d["greedy_tokens"] = np.array(toks, np.int32)
    return d


def _decisive(k, d, g, f):
    if d[k].dtype == F32:
        return min(_nmse(d[k], g[k]), _nmse(d[k], f[k])) >= MIN_NMSE
    return _sets_differ(d[k], g[k])


def _prefix_chunks(chunks, T):
    out, o = [], 0
    for c in chunks:
        if o >= T:
            break
        out.append(min(c, T - o))
        o += out[-1]
    return out


def port_bug_case(name):
    base, first, clause, cond = PORT_BUG[name]
    model, ids, chunks, n_new = PORT_BUG_MODELS[base]()
    cfg = model[0]
    order = m3np.dump_order(cfg)
    d = _port_run(model, ids, chunks, n_new, "bf16", [name])
    f = _port_run(model, ids, chunks, 0, "bf16", [])
    g = _port_run(model, ids, chunks, 0, "fp32", [])
    k = first_diff(order, d, f)
    assert k == first, "port bug %s: first divergence %s, declared %s" % (name, k, first)
    assert _decisive(k, d, g, f), "port bug %s: not decisive at %s" % (name, k)
    # the shortest prefix of the case's input (its chunks cut there) at which
    # the bug shows decisively at the same tensor
    vis = None
    for T in range(1, len(ids) + 1):
        ch = _prefix_chunks(chunks, T)
        dT = _port_run(model, ids[:T], ch, 0, "bf16", [name])
        fT = _port_run(model, ids[:T], ch, 0, "bf16", [])
        kT = first_diff(order, dT, fT)
        if kT == first and _decisive(kT, dT, _port_run(model, ids[:T], ch, 0, "fp32", []), fT):
            vis = T
            break
    assert vis is not None
    hidden = []
    for label, kind in PORT_BUG_HIDDEN.get(name, []):
        hm, hi, hc = _hidden_run(kind, model, ids, chunks)
        dh = _port_run(hm, hi, hc, 0, "bf16", [name])
        fh = _port_run(hm, hi, hc, 0, "bf16", [])
        same = sorted(dh) == sorted(fh) and all(
            not _sets_differ(dh[n], fh[n]) if n.endswith("block_indices") else np.array_equal(dh[n], fh[n])
            for n in fh)
        assert same, "port bug %s: not hidden under %s" % (name, label)
        hidden.append(label)
    layer = int(first.split(".")[1])
    sub = first.split(".", 2)[2]
    comp = MUTANT_COMPONENT.get(sub, "moe" if (sub == "mlp.output" and cfg.moe[layer]) else sub.split(".")[0])
    meta = {"m3.dump_version": "1", "m3.mode": "bf16", "m3.producer": "tools/m3np.py bf16 mode + port bug " + name}
    mj = {"id": "mutant.port_" + name, "case": base, "dump": "dump.safetensors", "profile": "bf16",
          "mode": "bf16", "expect": "fail", "first_divergence": {"layer": layer, "tensor": first, "component": comp},
          "clauses": sorted([clause, CL["num_bf16"]]),
          "port_bug": {"condition": cond, "visible_from_tokens": vis, "chunks": list(chunks),
                       "hidden_under": hidden},
          "description": "port bug: " + m3np.PORT_BUGS[name] + " (otherwise the faithful bf16 mode). Real shape: "
                         + cond}
    return {"meta": mj, "json_name": "mutant.json", "files": {"dump.safetensors": st.dumps(bf16_store(d), meta)}}


for _n in sorted(PORT_BUG):
    case("mutants/port_" + _n)(lambda n=_n: port_bug_case(n))


# vision cases and mutants (tools/gen_vectors_vision.py)
import gen_vectors_vision  # noqa: E402
gen_vectors_vision.register(case, sys.modules[__name__])

# image decoding cases, expectations from PIL (tools/gen_vectors_decode.py)
import gen_vectors_decode  # noqa: E402
gen_vectors_decode.register(case)

# Eagle3 drafter / verification cases and the tap mutant (tools/gen_vectors_eagle3.py)
import gen_vectors_eagle3  # noqa: E402
gen_vectors_eagle3.register(case, sys.modules[__name__])

# ------------------------------------------------------------------ driver

def write_case(out, rel, res):
    d = os.path.join(out, rel)
    os.makedirs(d, exist_ok=True)
    files = {}
    for name, data in sorted(res["files"].items()):
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        files[name] = hashlib.sha256(data).hexdigest()
    meta = dict(res["meta"])
    meta.setdefault("id", rel.replace("/", "."))
    meta.update({"generator": res.get("generator", GENERATOR),
                 "generator_version": res.get("generator_version", GENERATOR_VERSION), "files": files})
    with open(os.path.join(d, res.get("json_name", "case.json")), "w") as f:
        f.write(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def manifest(big=False):
    """The committed suite's manifest, or (big=True) the manifest of the big
    cases, which are not committed: `make vectors-big` generates them into
    build/vectors-big and `make test` runs them (they keep the committed
    suite small; spec/vectors.md M3-VEC-1)."""
    if big:
        return {"suite": SUITE + "-big", "version": SUITE_VERSION, "generator": GENERATOR,
                "generator_version": GENERATOR_VERSION,
                "cases": [r for r, b, _ in CASES if b], "mutants": []}
    return {"suite": SUITE, "version": SUITE_VERSION, "generator": GENERATOR,
            "generator_version": GENERATOR_VERSION,
            "cases": [r for r, b, _ in CASES if not b and not r.startswith("mutants/")],
            "mutants": [r for r, b, _ in CASES if not b and r.startswith("mutants/")],
            "big": [r for r, b, _ in CASES if b],
            "big_note": "not committed: `make vectors-big` generates them into build/vectors-big, "
                        "and `make test` runs them"}


def generate(out, want, verbose=True, big_suite=False):
    os.makedirs(out, exist_ok=True)
    for rel, big, fn in CASES:
        if not want(rel, big):
            continue
        t = time.time()
        if os.path.isdir(os.path.join(out, rel)):
            shutil.rmtree(os.path.join(out, rel))
        write_case(out, rel, fn())
        if verbose:
            print("%-40s %6.2fs" % (rel, time.time() - t), flush=True)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        f.write(json.dumps(manifest(big_suite), indent=1, sort_keys=True) + "\n")


def _cmp_tree(a, b, rels, problems):
    for rel in rels:
        da, db = os.path.join(a, rel), os.path.join(b, rel)
        na = sorted(os.listdir(da)) if os.path.isdir(da) else []
        nb = sorted(os.listdir(db)) if os.path.isdir(db) else []
        if na != nb:
            problems.append("%s: files differ: %s vs %s" % (rel, na, nb))
            continue
        for n in na:
            with open(os.path.join(da, n), "rb") as f1, open(os.path.join(db, n), "rb") as f2:
                if f1.read() != f2.read():
                    problems.append("%s/%s: bytes differ" % (rel, n))


def check(committed):
    t0 = time.time()
    problems = []
    tmp = tempfile.mkdtemp(prefix="m3vec-")
    try:
        generate(tmp, lambda rel, big: not big, verbose=False)
        rels = [r for r, b, _ in CASES if not b]
        _cmp_tree(tmp, committed, rels, problems)
        with open(os.path.join(tmp, "manifest.json"), "rb") as f1, \
                open(os.path.join(committed, "manifest.json"), "rb") as f2:
            if f1.read() != f2.read():
                problems.append("manifest.json: bytes differ")
        # big cases are not committed (make vectors-big); none may linger
        for rel, big, _ in CASES:
            if big and os.path.exists(os.path.join(committed, rel)):
                problems.append("%s: a big case is in the committed suite; remove it" % rel)
        # the embedded default model
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        tm = os.path.join(tmp, "_tiny")
        mtm.save_model(tm, mtm.tiny_config(), mtm.make_weights(mtm.tiny_config(), mtm.TINY_SEED))
        for n in sorted(os.listdir(tm)):
            p = os.path.join(root, "models", "tiny", n)
            if not os.path.exists(p) or open(p, "rb").read() != open(os.path.join(tm, n), "rb").read():
                problems.append("models/tiny/%s: bytes differ (run tools/make_tiny_model.py)" % n)
    finally:
        shutil.rmtree(tmp)
    for p in problems:
        print("vectors-check: " + p)
    n = len([1 for _, b, _ in CASES if not b])
    print("vectors-check: %d cases regenerated, %s (%.1fs)" % (n, "FAILED" if problems else "identical",
                                                               time.time() - t0))
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description="generate the M3 vector suite")
    ap.add_argument("--out")
    ap.add_argument("--check", metavar="DIR")
    ap.add_argument("--big-only", action="store_true")
    ap.add_argument("--only", help="substring filter on case ids (debugging)")
    a = ap.parse_args()
    if a.check:
        sys.exit(check(a.check))
    if not a.out:
        ap.error("--out or --check required")

    def want(rel, big):
        if a.only and a.only not in rel:
            return False
        if a.big_only:
            return big
        return not big  # big cases go to their own directory (--big-only)
    generate(a.out, want, big_suite=a.big_only)


if __name__ == "__main__":
    main()
