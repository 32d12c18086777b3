#!/usr/bin/env python3
"""tf_timing_dump.py — a residual-only dump for timing teacher-forced checks.

    tf_timing_dump.py MODEL_DIR T OUT.safetensors [--logits-rows N]

For measuring `m3-conform check --teacher-forced --model DIR` on a large
(e.g. `m3-conform synth`) checkpoint without running a forward first: every
layers.{i}.input and layers.{i}.output is the embedding rows of the first T
ids of MODEL_DIR/inputs.safetensors (read from the mapped shards, bf16 widened
exactly), final_norm is zero, and logits are given for the last N positions
(default 16) through logits.rows. The kit's work per layer is the same as for a
real port's dump (the reference layer runs from the dump's input whatever the
values); the verdict is meaningless (a failure) and is not the point.
Capabilities internals, greedy and eagle3 are declared absent. numpy only.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "adapters"))
import numpy as np  # noqa: E402
import m3dump  # noqa: E402


def rows_of(path, name, ids):
    """Rows ids of tensor name of a safetensors file, as float32 (mapped, not read whole)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    d = h[name]
    a, b = d["data_offsets"]
    dt = {"BF16": np.uint16, "F32": np.float32, "F16": np.float16}[d["dtype"]]
    m = np.memmap(path, dtype=dt, mode="r", offset=8 + n + a, shape=tuple(d["shape"]))
    r = np.asarray(m[ids])
    if d["dtype"] == "BF16":
        r = (r.astype(np.uint32) << 16).view(np.float32)
    return r.astype(np.float32)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("T", type=int)
    ap.add_argument("out")
    ap.add_argument("--logits-rows", type=int, default=16)
    a = ap.parse_args(argv)
    with open(os.path.join(a.model, "config.json")) as f:
        tc = json.load(f)["text_config"]
    L, V = tc["num_hidden_layers"], tc["vocab_size"]
    t, _ = m3dump.read_dump(os.path.join(a.model, "inputs.safetensors"))
    ids = t["input_ids"][:a.T]
    if len(ids) < a.T:
        sys.exit("tf_timing_dump: inputs.safetensors has only %d ids" % len(ids))
    with open(os.path.join(a.model, "model.safetensors.index.json")) as f:
        wm = json.load(f)["weight_map"]
    name = "language_model.model.embed_tokens.weight"
    x = rows_of(os.path.join(a.model, wm[name]), name, ids)
    d = {}
    for i in range(L):
        d["layers.%d.input" % i] = x
        d["layers.%d.output" % i] = x
    n = min(a.logits_rows, a.T)
    d["final_norm"] = np.zeros_like(x)
    d["logits"] = np.zeros((n, V), dtype=np.float32)
    m3dump.write_dump(a.out, d, unsupported=["internals", "greedy", "eagle3"],
                      row_sets={"logits": list(range(a.T - n, a.T))}, producer="tools/tf_timing_dump.py",
                      mode="bf16", T=a.T)
    print("tf_timing_dump: wrote %s (T=%d, %d layers, logits at %d rows)" % (a.out, a.T, L, n))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
