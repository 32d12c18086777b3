"""gen_vectors_eagle3.py — the Eagle3 cases of the M3 vector suite (M3-VEC,
M3-EAGLE-*).

Not run on its own: tools/gen_vectors.py imports this module and calls
register(case, gen_vectors_module), so `make vectors` / `make vectors-check`
generate and verify these cases with the others and one manifest.
Expectations come from tools/m3np_eagle3.py and tools/m3np.py (independent
numpy implementations), fp32 only (the drafter always computes in fp32).

Case contracts (target checkpoint config.json + model.safetensors as in model
cases; the drafter as drafter_config.json + drafter.safetensors beside it):
  eagle3_draft   inputs: input_ids i32 [T] (prompt), last i32 [1] (the token after
                 the prompt), chain_tokens i32 [n]. The target prefill gives the taps;
                 the drafter is seeded at positions 0..T-1 with tokens
                 input_ids[1:] + [last] and g of each position, then runs n chain
                 steps (token chain_tokens[k], the previous step's feature).
                 expected: eagle3.aux [T,3H], eagle3.g [T,H], eagle3.logits [T+n,V],
                 eagle3.features [T+n,H] (row r = drafter position r).
  eagle3_verify  inputs: input_ids i32 [T], verify_tokens i32 [K+1] = [last, d_1..d_K].
                 After a prefill of input_ids, the target runs verify_tokens at
                 positions T..T+K (default taps), greedy acceptance, rollback to
                 T+j+1 positions, then the bonus token at position T+j+1.
                 expected: verify.logits [K+1,V], verify.aux [K+1,3H], accepted i32 [1],
                 bonus i32 [1], next.logits [1,V].
Mutant: mutants/eagle3_tap_output — a model/tiny_fp32 dump whose eagle3.aux
holds the OUTPUT of the tap layers (the layer-numbering off-by-one).
"""
import json

import numpy as np

import m3np
import m3np_eagle3 as me
import st
from m3np import F32, Num

GENERATOR = "tools/gen_vectors_eagle3.py"
GENERATOR_VERSION = "1+m3np_eagle3" + me.VERSION
CL_DRAFT = ["M3-EAGLE-TAP-1", "M3-EAGLE-DRAFT-1", "M3-EAGLE-DRAFT-2", "M3-EAGLE-DRAFT-3",
            "M3-EAGLE-DRAFT-4", "M3-NUM-MODE-1"]
CL_VERIFY = ["M3-EAGLE-TAP-1", "M3-EAGLE-VERIFY-1", "M3-CACHE-3", "M3-SAMPLE-1", "M3-NUM-MODE-1"]


def drafter(cfg, seed, nh, nkv, hd, inter, extra):
    """A random bf16 drafter for target cfg (m3np.Config) -> (conf dict, weights f32,
    config bytes, safetensors bytes)."""
    r = np.random.default_rng(seed)
    H = cfg.H

    def mat(o, i):
        return (r.standard_normal((o, i)) / np.sqrt(i)).astype(F32)

    def vec(gemma):
        return (r.standard_normal(H) * 0.1 + (0.0 if gemma else 1.0)).astype(F32)
    gemma = bool(extra.get("use_gemma_norm", False))
    W = {"fc.weight": mat(H, 3 * H)}
    for i in range(3):
        W["fc_norm.%d.weight" % i] = vec(gemma)
    p = "layers.0."
    for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        W[p + n + ".weight"] = vec(gemma)
    W[p + "self_attn.q_proj.weight"] = mat(nh * hd, 2 * H)
    W[p + "self_attn.k_proj.weight"] = mat(nkv * hd, 2 * H)
    W[p + "self_attn.v_proj.weight"] = mat(nkv * hd, 2 * H)
    W[p + "self_attn.o_proj.weight"] = mat(H, nh * hd)
    W[p + "mlp.gate_proj.weight"] = mat(inter, H)
    W[p + "mlp.up_proj.weight"] = mat(inter, H)
    W[p + "mlp.down_proj.weight"] = mat(H, inter)
    W = {k: m3np.bf16_round(v) for k, v in W.items()}
    conf = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": H,
            "target_hidden_size": H, "num_hidden_layers": 1, "num_attention_heads": nh,
            "num_key_value_heads": nkv, "head_dim": hd, "intermediate_size": inter,
            "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "vocab_size": cfg.V, "tie_word_embeddings": False}
    conf.update(extra)
    cj = (json.dumps(conf, indent=2, sort_keys=True) + "\n").encode()
    sb = st.dumps({k: st.BF16(v) for k, v in sorted(W.items())}, {"format": "pt"})
    return conf, W, cj, sb


def _draft_case(gv, seed, extra, desc):
    tcfg, tW, tcj, tst = gv._tiny()
    ids = gv.tiny_ids()[0]
    _, toks, _ = gv.run_model(gv._tiny(), ids, "fp32", 4)
    conf, W, cj, sb = drafter(tcfg, seed, 2, extra.pop("_nkv", 2), 32, 96, extra)
    D = me.Drafter(conf, W, tcfg, tW)
    chain = np.array(toks[1:4], np.int32)
    exp = me.seed_and_draft(D, tcfg, tW, list(ids), int(toks[0]), list(chain))
    inp = {"input_ids": np.asarray(ids, np.int32), "last": np.array([toks[0]], np.int32),
           "chain_tokens": chain}
    params = {"T": int(len(ids)), "chain_steps": int(len(chain)), "taps": D.taps,
              "taps_from_config": "eagle_aux_hidden_state_layer_ids" in conf}
    return {"meta": {"component": "eagle3_draft", "mode": "fp32", "profile": "fp32", "seed": seed,
                     "description": desc, "params": params, "clauses": sorted(CL_DRAFT)},
            "generator": GENERATOR, "generator_version": GENERATOR_VERSION,
            "files": {"config.json": tcj, "model.safetensors": tst, "drafter_config.json": cj,
                      "drafter.safetensors": sb, "inputs.safetensors": st.dumps(inp),
                      "expected.safetensors": st.dumps(exp)}}


def _verify_case(gv, seed):
    tcfg, tW, tcj, tst = gv._tiny()
    ids = gv.tiny_ids()[0]
    _, toks, _ = gv.run_model(gv._tiny(), ids, "fp32", 5)
    # last, d1, d2 match the target's greedy tokens; d3 does not -> 2 accepted
    vt = np.array([toks[0], toks[1], toks[2], (int(toks[3]) + 1) % tcfg.V], np.int32)
    taps = me.default_taps(tcfg.L)
    exp = me.verify(tcfg, tW, taps, list(ids), vt)
    assert int(exp["accepted"][0]) == 2 and int(exp["bonus"][0]) == int(toks[3])
    # rollback state == a plain forward over prompt + [last, d1, d2, bonus]
    ref = me.plain_next_logits(tcfg, tW, list(ids) + [int(t) for t in toks[:4]])
    assert np.array_equal(ref, exp["next.logits"]), "rollback logits differ from plain prefill"
    params = {"T": int(len(ids)), "K": 3, "taps": taps}
    return {"meta": {"component": "eagle3_verify", "mode": "fp32", "profile": "fp32", "seed": seed,
                     "description": "verify [last, d1..d3] after a prefill (d1, d2 accepted, d3 rejected), "
                                    "roll the target caches back to T+3 positions, then decode the bonus "
                                    "token; taps (2,2,2) of the 5-layer tiny target",
                     "params": params, "clauses": sorted(CL_VERIFY),
                     "notes": {"next.logits": "equals the last row of a plain prefill of "
                                              "input_ids + [last, d1, d2, bonus] (checked by the generator)"}},
            "generator": GENERATOR, "generator_version": GENERATOR_VERSION,
            "files": {"config.json": tcj, "model.safetensors": tst, "inputs.safetensors": st.dumps(inp_v(ids, vt)),
                      "expected.safetensors": st.dumps(exp)}}


def inp_v(ids, vt):
    return {"input_ids": np.asarray(ids, np.int32), "verify_tokens": vt}


def _mutant_tap_output(gv):
    tcfg, tW, _, _ = gv._tiny()
    ids = gv.tiny_ids()[0]
    num = Num("fp32")
    d = {}
    state = m3np.State(tcfg)
    lg = m3np.forward(tcfg, tW, ids, num, state, d)
    toks = []
    for step in range(gv.TINY_NEW):
        toks.append(int(np.argmax(lg[-1])))
        if step + 1 < gv.TINY_NEW:
            lg = m3np.forward(tcfg, tW, np.array([toks[-1]]), num, state)
    d["greedy_tokens"] = np.array(toks, np.int32)
    d["eagle3.aux"] = me.taps_of(d, tcfg.taps(), ["tap_output"])
    meta = {"m3.dump_version": "1", "m3.mode": "fp32",
            "m3.producer": "tools/m3np.py fp32 mode + eagle3 mutant tap_output"}
    mj = {"id": "mutant.eagle3_tap_output", "case": "model/tiny_fp32", "dump": "dump.safetensors",
          "profile": "fp32", "mode": "fp32", "seed": gv.TINY_IDS_SEED, "expect": "fail",
          "first_divergence": {"layer": -1, "tensor": "eagle3.aux", "component": "eagle3"},
          "clauses": ["M3-EAGLE-TAP-1", "M3-NUM-MODE-1"],
          "description": "eagle3 mutant: " + me.MUTANTS["tap_output"] +
                         " (otherwise the faithful fp32 mode)"}
    return {"meta": mj, "json_name": "mutant.json", "generator": GENERATOR,
            "generator_version": GENERATOR_VERSION, "files": {"dump.safetensors": st.dumps(d, meta)}}


def register(case, gv):
    """Register the Eagle3 cases with gen_vectors.case; gv is the gen_vectors module."""
    case("eagle3/draft_config_taps_fp32")(lambda: _draft_case(
        gv, 1501, {"eagle_aux_hidden_state_layer_ids": [4, 1, 2]},
        "drafter (MHA 2x32, standard RMSNorm, full RoPE) on the 5-layer tiny target: taps from the "
        "drafter config [4,1,2] (used ascending), per-tap fc_norm -> fc, seeded over the prompt, "
        "then 3 chain steps on the post-norm recurrent feature; borrowed final norm applied Gemma-style"))
    case("eagle3/draft_default_taps_fp32")(lambda: _draft_case(
        gv, 1502, {"use_gemma_norm": True, "norm_before_residual": True, "partial_rotary_factor": 0.5,
                   "_nkv": 1},
        "drafter variants: default taps (2,2,2) for L=5 (min(2,L-1), L/2, max(L-3,0)), Gemma-style "
        "drafter norms, norm_before_residual, partial RoPE (16 of 32), GQA 2:1"))
    case("eagle3/verify_fp32")(lambda: _verify_case(gv, 1511))
    case("mutants/eagle3_tap_output")(lambda: _mutant_tap_output(gv))
