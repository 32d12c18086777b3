#!/usr/bin/env python3
"""unrouted_experts.py — the reference reads only the experts a row routes to.

    unrouted_experts.py M3REF CASE_DIR WORKDIR TOKENS

Runs `m3-ref forward --dump` on CASE_DIR's checkpoint for TOKENS, takes the
experts the dump's moe.topk_index routes to in each MoE layer, writes a copy
of the checkpoint whose every other expert weight is NaN, runs the forward
again, and requires every tensor of the two dumps to be identical (a NaN read
anywhere would spread into the layer's output). This is what lets
`m3-conform check --teacher-forced --model` leave the unrouted experts of a
mapped checkpoint unread (M3-DUMP-12). numpy only.
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "adapters"))
import numpy as np  # noqa: E402
import m3dump  # noqa: E402


def forward(ref, model, tokens, out):
    subprocess.run([ref, "forward", "--model", model, "--tokens", tokens, "--dump", out, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    return m3dump.read_dump(out)[0]


def main(ref, case, work, tokens):
    os.makedirs(work, exist_ok=True)
    a = forward(ref, case, tokens, os.path.join(work, "a.safetensors"))
    routed = {int(k.split(".")[1]): set(np.unique(v).tolist()) for k, v in a.items() if k.endswith("moe.topk_index")}
    w, meta = m3dump.read_dump(os.path.join(case, "model.safetensors"))
    poisoned = 0
    for k in w:
        m = re.match(r"language_model\.model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.", k)
        if m and int(m.group(2)) not in routed[int(m.group(1))]:
            w[k] = np.full(w[k].shape, np.nan, dtype=np.float32)
            poisoned += 1
    d = os.path.join(work, "poisoned")
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(case, "config.json"), d)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(m3dump.encode(w, meta))
    b = forward(ref, d, tokens, os.path.join(work, "b.safetensors"))
    same = set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    # control: one routed expert poisoned too must change the dump (the test can fail)
    L0 = min(routed)
    k0 = "language_model.model.layers.%d.block_sparse_moe.experts.%d.w1.weight" % (L0, min(routed[L0]))
    w[k0] = np.full(w[k0].shape, np.nan, dtype=np.float32)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(m3dump.encode(w, meta))
    c = forward(ref, d, tokens, os.path.join(work, "c.safetensors"))
    control = not np.array_equal(a["logits"], c["logits"])
    print("unrouted_experts: %d expert tensors NaN (routed: %s); the dumps are %s; with a routed expert NaN "
          "too they %s" % (poisoned, {l: sorted(s) for l, s in sorted(routed.items())},
                           "identical" if same else "DIFFERENT", "differ" if control else "DO NOT differ"))
    return 0 if same and poisoned and control else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
