#!/usr/bin/env python3
"""synth_check.py — an independent numpy implementation of spec/synth.md (M3-SYNTH-*),
checking a checkpoint that `m3-conform synth` wrote.

Written from the spec, not from conformance/synth.c. From the directory's config.json it
derives the options (layers, dense layers, vocabulary, vision layers, shapes), then:
  * rebuilds config.json, generation_config.json and model.safetensors.index.json byte for
    byte (M3-SYNTH-9) and compares;
  * rebuilds every shard's and inputs.safetensors' header byte for byte (M3-SYNTH-8,
    M3-SYNTH-11);
  * regenerates tensor elements with the counter-based generator (M3-SYNTH-4..7) and
    compares their bits: every element of a tensor of at most --full elements, else the
    first and last --edge elements and --sample elements spread over the tensor.

usage: synth_check.py DIR [--seed S] [--prompt-len P] [--shard-size BYTES]
                          [--full N] [--edge N] [--sample N]
The seed, prompt length and shard size are not recorded in the checkpoint; pass the ones
it was written with (defaults: the command's defaults, seed required).
Exit 0 when everything matches, 1 on the first mismatch (named), 2 on bad usage.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

M64 = (1 << 64) - 1
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
VOCAB = 200064

RELEASED = dict(hidden=6144, heads=64, kv_heads=4, head_dim=128, rotary=64, inter=3072,
                dense_inter=12288, shared_inter=3072, experts=128, topk=4, idx_heads=4,
                idx_dim=128, block=128, topk_blocks=16, v_hidden=1280, v_inter=5120, v_heads=16,
                patch=14, temporal=2, merge=2, channels=3, proj_hidden=6144, grid=16)
TINY = dict(hidden=64, heads=4, kv_heads=2, head_dim=16, rotary=8, inter=32, dense_inter=64,
            shared_inter=32, experts=8, topk=2, idx_heads=2, idx_dim=16, block=4, topk_blocks=3,
            v_hidden=32, v_inter=64, v_heads=2, patch=14, temporal=2, merge=2, channels=3,
            proj_hidden=64, grid=4)

A_NORM = np.float32(0.25)
A_BIAS = np.float32(0.05)


# ---- generator (M3-SYNTH-4, -5) -------------------------------------------------------
def mix64_int(z):
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def tensor_key(seed, name):
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return mix64_int(seed ^ mix64_int(h))


def bits(key, idx):
    """64 random bits of elements idx (uint64 array) of the tensor with key."""
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (idx + np.uint64(1)) * GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def values(key, idx, a, o):
    t = (bits(key, idx) >> np.uint64(40)).astype(np.int64) - (1 << 23)
    u = t.astype(np.float32) * np.float32(2.0 ** -23)
    return (u * np.float32(a)).astype(np.float32) + np.float32(o)


def bf16_bits(x):
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def fan_amp(fan_in):
    return np.sqrt(np.float32(3.0) / np.float32(fan_in)).astype(np.float32)


# ---- the tensor list (M3-SYNTH-3, -6) ---------------------------------------------------
def weights(S, layers, dense, vocab, vlayers):
    """[(name, dtype, shape, amplitude, offset)] in canonical order."""
    out = []
    H = S["hidden"]

    def lin(name, rows, cols, dt="BF16"):
        out.append((name, dt, [rows, cols], fan_amp(cols), np.float32(0)))

    def vec(name, n, a, o=0.0, dt="BF16"):
        out.append((name, dt, [n], np.float32(a), np.float32(o)))

    out.append(("language_model.model.embed_tokens.weight", "BF16", [vocab, H],
                np.sqrt(np.float32(3.0)).astype(np.float32), np.float32(0)))
    Q, KV = S["heads"] * S["head_dim"], S["kv_heads"] * S["head_dim"]
    for L in range(layers):
        p = "language_model.model.layers.%d." % L
        moe = L >= dense
        vec(p + "input_layernorm.weight", H, A_NORM)
        lin(p + "self_attn.q_proj.weight", Q, H)
        lin(p + "self_attn.k_proj.weight", KV, H)
        lin(p + "self_attn.v_proj.weight", KV, H)
        lin(p + "self_attn.o_proj.weight", H, Q)
        vec(p + "self_attn.q_norm.weight", S["head_dim"], A_NORM)
        vec(p + "self_attn.k_norm.weight", S["head_dim"], A_NORM)
        if moe:
            lin(p + "self_attn.index_q_proj.weight", S["idx_heads"] * S["idx_dim"], H)
            lin(p + "self_attn.index_k_proj.weight", S["idx_dim"], H)
            vec(p + "self_attn.index_q_norm.weight", S["idx_dim"], A_NORM)
            vec(p + "self_attn.index_k_norm.weight", S["idx_dim"], A_NORM)
        vec(p + "post_attention_layernorm.weight", H, A_NORM)
        if not moe:
            lin(p + "mlp.gate_proj.weight", S["dense_inter"], H)
            lin(p + "mlp.up_proj.weight", S["dense_inter"], H)
            lin(p + "mlp.down_proj.weight", H, S["dense_inter"])
            continue
        lin(p + "block_sparse_moe.gate.weight", S["experts"], H, "F32")
        vec(p + "block_sparse_moe.e_score_correction_bias", S["experts"], A_BIAS, dt="F32")
        for E in range(S["experts"]):
            q = p + "block_sparse_moe.experts.%d." % E
            lin(q + "w1.weight", S["inter"], H)
            lin(q + "w3.weight", S["inter"], H)
            lin(q + "w2.weight", H, S["inter"])
        q = p + "block_sparse_moe.shared_experts."
        lin(q + "gate_proj.weight", S["shared_inter"], H)
        lin(q + "up_proj.weight", S["shared_inter"], H)
        lin(q + "down_proj.weight", H, S["shared_inter"])
    vec("language_model.model.norm.weight", H, A_NORM)
    lin("language_model.lm_head.weight", vocab, H)
    if vlayers == 0:
        return out
    Hv, I = S["v_hidden"], S["v_inter"]
    C, T, P = S["channels"], S["temporal"], S["patch"]
    out.append(("vision_tower.vision_model.embeddings.patch_embedding.weight", "F32",
                [Hv, C, T, P, P], fan_amp(C * T * P * P), np.float32(0)))

    def ln(p, n):
        vec(p + ".weight", n, A_NORM, 1.0)
        vec(p + ".bias", n, A_BIAS)

    def lb(p, rows, cols):
        lin(p + ".weight", rows, cols)
        vec(p + ".bias", rows, A_BIAS)

    ln("vision_tower.vision_model.pre_layrnorm", Hv)
    for i in range(vlayers):
        p = "vision_tower.vision_model.encoder.layers.%d." % i
        ln(p + "layer_norm1", Hv)
        for s in ("q_proj", "k_proj", "v_proj", "out_proj"):
            lb(p + "self_attn." + s, Hv, Hv)
        ln(p + "layer_norm2", Hv)
        lb(p + "mlp.fc1", I, Hv)
        lb(p + "mlp.fc2", Hv, I)
    M = S["merge"] ** 2
    lb("multi_modal_projector.linear_1", S["proj_hidden"], Hv)
    lb("multi_modal_projector.linear_2", H, S["proj_hidden"])
    lb("patch_merge_mlp.linear_1", H, M * H)
    lb("patch_merge_mlp.linear_2", H, H)
    return out


ESIZE = {"BF16": 2, "F32": 4, "I32": 4}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def header(ts):
    """(header bytes, [(begin, end)]) for [(name, dtype, shape, ...)] (M3-SYNTH-8)."""
    parts, offs, off = ['{"__metadata__":{"format":"pt"}'], [], 0
    for t in ts:
        nb = numel(t[2]) * ESIZE[t[1]]
        parts.append(',"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}' % (
            t[0], t[1], ",".join(str(d) for d in t[2]), off, off + nb))
        offs.append((off, off + nb))
        off += nb
    h = "".join(parts) + "}"
    h += " " * (-len(h) % 8)
    return h.encode(), offs


def shards(ws, cap):
    out, cur, used = [], [], 0
    for t in ws:
        nb = numel(t[2]) * ESIZE[t[1]]
        if cur and used + nb > cap:
            out.append(cur)
            cur, used = [], 0
        cur.append(t)
        used += nb
    out.append(cur)
    return out


def special(i, vocab):
    return i - (VOCAB - vocab)


def pyjson(obj):
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def config_text(S, layers, dense, vocab, vlayers, raw):
    """config.json bytes (M3-SYNTH-9). raw: the checkpoint's parsed config, only for the
    float spellings (json round-trips them exactly)."""
    pins = ", ".join("(%d, %d)" % (a, b) for a in (336, 672, 1008, 1344, 1680, 2016)
                     for b in (336, 672, 1008, 1344, 1680, 2016))
    comp = {"image_token_compression_method": "patch_merge", "spatial_merge_size": 2,
            "temporal_patch_size": 2}
    freq = [0] * dense + [1] * (layers - dense)
    text = {
        "architectures": ["MiniMaxM3SparseForCausalLM"], "attention_output_gate": False,
        "dense_intermediate_size": S["dense_inter"], "head_dim": S["head_dim"],
        "hidden_act": "swigluoai", "hidden_size": S["hidden"], "intermediate_size": S["inter"],
        "max_position_embeddings": 1048576, "moe_layer_freq": freq, "n_shared_experts": 1,
        "num_attention_heads": S["heads"], "num_experts_per_tok": S["topk"],
        "num_hidden_layers": layers, "num_key_value_heads": S["kv_heads"],
        "num_local_experts": S["experts"], "num_mtp_modules": 7, "num_nextn_predict_layers": 1,
        "partial_rotary_factor": 0.5, "qk_norm_type": "per_head", "rms_norm_eps": 1e-06,
        "rope_theta": 5000000, "rotary_dim": S["rotary"], "routed_scaling_factor": 2.0,
        "scoring_func": "sigmoid", "shared_intermediate_size": S["shared_inter"],
        "sparse_attention_config": {
            "sparse_attention_freq": freq, "sparse_block_size": S["block"],
            "sparse_disable_index_value": freq, "sparse_index_dim": S["idx_dim"],
            "sparse_init_block": 0, "sparse_local_block": 1,
            "sparse_num_index_heads": S["idx_heads"], "sparse_score_type": "max",
            "sparse_topk_blocks": S["topk_blocks"], "use_sparse_attention": True},
        "swiglu_alpha": 1.702, "swiglu_limit": 7.0, "tie_word_embeddings": False,
        "use_gemma_norm": True, "use_qk_norm": True, "use_routing_bias": True,
        "vocab_size": vocab}
    if vocab != VOCAB:
        text["bos_token_id"] = special(200034, vocab)
        text["eos_token_id"] = special(200020, vocab)
    vis = {"attention_dropout": 0.0, "hidden_act": "gelu", "hidden_size": S["v_hidden"],
           "image_size": 2016, "img_token_compression_config": comp, "initializer_factor": 1.0,
           "initializer_range": 0.02, "intermediate_size": S["v_inter"],
           "layer_norm_eps": 1e-05, "model_type": "clip_vision_model",
           "num_attention_heads": S["v_heads"], "num_channels": S["channels"],
           "num_hidden_layers": vlayers if vlayers else 32, "patch_size": S["patch"],
           "position_embedding_type": "rope", "projection_dim": S["proj_hidden"],
           "rope_mode": "3d", "rope_theta": 10000.0, "vision_segment_max_frames": 4,
           "vocab_size": 32000}
    top = {"architectures": ["MiniMaxM3SparseForConditionalGeneration"],
           "auto_map": {"AutoConfig": "configuration_minimax_m3_vl.MiniMaxM3VLConfig"},
           "image_grid_pinpoints": "[" + pins + "]", "image_seq_length": 576,
           "image_token_index": special(200025, vocab), "img_token_compression_config": comp,
           "model_type": "minimax_m3_vl", "multimodal_projector_bias": True,
           "num_reward_heads": 0, "process_image_mode": "dynamic_res",
           "projector_hidden_act": "gelu", "projector_hidden_size": S["proj_hidden"],
           "text_config": text, "torch_dtype": "bfloat16", "transformers_version": "4.52.4",
           "video_token_index": special(200026, vocab), "vision_config": vis,
           "vision_feature_layer": -1, "vision_feature_select_strategy": "full"}
    return pyjson(top)


def genconfig_text(vocab):
    return pyjson({"bos_token_id": special(200034, vocab), "do_sample": True,
                   "eos_token_id": special(200020, vocab), "temperature": 1.0, "top_k": 40,
                   "top_p": 0.95, "transformers_version": "4.52.4"})


class Mismatch(Exception):
    pass


def check_elems(path, f, base, t, seed, full, edge, sample, stats):
    name, dt, shape, a, o = t[:5]
    n = numel(shape)
    if n <= full:
        idx = np.arange(n, dtype=np.uint64)
    else:
        parts = [np.arange(edge, dtype=np.uint64), np.arange(n - edge, n, dtype=np.uint64),
                 (np.arange(sample, dtype=np.uint64) * np.uint64(n // sample + 1)) % np.uint64(n)]
        idx = np.unique(np.concatenate(parts))
    key = tensor_key(seed, name)
    es = ESIZE[dt]
    if t[5] == "ids":
        want = ((bits(key, idx) >> np.uint64(32)) % np.uint64(t[6])).astype(np.uint32)
    elif t[5] == "const":
        want = np.asarray(t[6], dtype=np.int32).view(np.uint32)[idx.astype(np.int64)]
    else:
        v = values(key, idx, a, o)
        want = bf16_bits(v) if dt == "BF16" else v.view(np.uint32)
    # read the elements: contiguous runs in one go, else one by one
    got = np.empty(len(idx), dtype=np.uint16 if es == 2 else np.uint32)
    if n <= full:
        f.seek(base)
        got[:] = np.frombuffer(f.read(n * es), dtype="<u2" if es == 2 else "<u4")
    else:
        for k, i in enumerate(idx.tolist()):
            f.seek(base + i * es)
            got[k] = np.frombuffer(f.read(es), dtype="<u2" if es == 2 else "<u4")[0]
    bad = np.nonzero(got != want)[0]
    stats[0] += len(idx)
    if len(bad):
        i = int(idx[bad[0]])
        raise Mismatch("%s: tensor %s element %d: bits 0x%x, spec gives 0x%x" % (
            path, name, i, int(got[bad[0]]), int(want[bad[0]])))


def check_file(path, ts, seed, full, edge, sample, stats):
    hb, offs = header(ts)
    with open(path, "rb") as f:
        head = f.read(8 + len(hb))
        if head[:8] != struct.pack("<Q", len(hb)) or head[8:] != hb:
            raise Mismatch("%s: header differs from M3-SYNTH-8" % path)
        size = os.fstat(f.fileno()).st_size
        if size != 8 + len(hb) + (offs[-1][1] if offs else 0):
            raise Mismatch("%s: file size %d, spec gives %d" % (path, size, 8 + len(hb) + offs[-1][1]))
        for t, (b, _) in zip(ts, offs):
            check_elems(path, f, 8 + len(hb) + b, t, seed, full, edge, sample, stats)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--prompt-len", type=int, default=2600)
    ap.add_argument("--shard-size", type=int, default=5000000000)
    ap.add_argument("--full", type=int, default=1 << 20)
    ap.add_argument("--edge", type=int, default=4096)
    ap.add_argument("--sample", type=int, default=512)
    ap.add_argument("--skip-data", action="store_true", help="headers and JSON only")
    a = ap.parse_args()
    if not 0 <= a.seed < 1 << 64:
        ap.error("--seed must be in [0, 2^64)")
    d = a.dir
    cfg_text = open(os.path.join(d, "config.json")).read()
    cfg = json.loads(cfg_text)
    tc, vc = cfg["text_config"], cfg["vision_config"]
    S = RELEASED if tc["hidden_size"] == RELEASED["hidden"] else TINY
    layers, vocab = tc["num_hidden_layers"], tc["vocab_size"]
    dense = tc["moe_layer_freq"].count(0)
    ws = [w + ("float", None) for w in weights(S, layers, dense, vocab, 0)]
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    vlayers = vc["num_hidden_layers"] if any(k.startswith("vision_tower.") for k in idx["weight_map"]) else 0
    ws = [w + ("float", None) for w in weights(S, layers, dense, vocab, vlayers)]
    stats = [0]
    try:
        if cfg_text != config_text(S, layers, dense, vocab, vlayers, cfg):
            raise Mismatch("%s/config.json differs from M3-SYNTH-9" % d)
        if open(os.path.join(d, "generation_config.json")).read() != genconfig_text(vocab):
            raise Mismatch("%s/generation_config.json differs from M3-SYNTH-9" % d)
        groups = shards(ws, a.shard_size)
        names = ["model-%05d-of-%05d.safetensors" % (i + 1, len(groups)) for i in range(len(groups))]
        wm = {t[0]: names[i] for i, g in enumerate(groups) for t in g}
        total = sum(numel(t[2]) * ESIZE[t[1]] for t in ws)
        want_idx = pyjson({"metadata": {"total_size": total}, "weight_map": wm})
        if open(os.path.join(d, "model.safetensors.index.json")).read() != want_idx:
            raise Mismatch("%s/model.safetensors.index.json differs from M3-SYNTH-9" % d)
        full = a.full if not a.skip_data else -1
        # inputs (M3-SYNTH-11)
        ins = [("input_ids", "I32", [a.prompt_len], 0, 0, "ids", vocab - 64)]
        if vlayers:
            g = S["grid"]
            nimg = g * g // (S["merge"] ** 2)
            k = tensor_key(a.seed, "image_input_ids")
            txt = ((bits(k, np.arange(16, dtype=np.uint64)) >> np.uint64(32)) %
                   np.uint64(vocab - 64)).astype(np.int64).tolist()
            ids = txt[:8] + [special(200029, vocab)] + [special(200025, vocab)] * nimg + \
                [special(200030, vocab)] + txt[8:]
            ins += [("image_grid_thw", "I32", [1, 3], 0, 0, "const", [1, g, g]),
                    ("image_input_ids", "I32", [len(ids)], 0, 0, "const", ids),
                    ("pixel_values", "F32", [g * g, S["channels"] * S["temporal"] * S["patch"] ** 2],
                     np.float32(2.0), np.float32(0), "float", None)]
        check_file(os.path.join(d, "inputs.safetensors"), ins, a.seed, a.full, a.edge, a.sample, stats)
        for nm, g in zip(names, groups):
            p = os.path.join(d, nm)
            if a.skip_data:
                hb, _ = header(g)
                with open(p, "rb") as f:
                    if f.read(8 + len(hb)) != struct.pack("<Q", len(hb)) + hb:
                        raise Mismatch("%s: header differs from M3-SYNTH-8" % p)
            else:
                check_file(p, g, a.seed, full, a.edge, a.sample, stats)
    except Mismatch as ex:
        print("synth_check: MISMATCH: %s" % ex)
        return 1
    print("synth_check: %s matches spec/synth.md: %d tensors in %d shards, %d elements compared "
          "(seed %d)" % (d, len(ws), len(groups), stats[0], a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
