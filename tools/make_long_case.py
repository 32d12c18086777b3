#!/usr/bin/env python3
"""make_long_case.py — a long-prompt model case without a golden file.

    make_long_case.py CLI_HELPER OUTDIR [--T 16384] [--seed 7]

Writes OUTDIR/{config.json, model.safetensors} (a tiny random checkpoint
from `cli_helper fixture`: 2 layers, layer 0 dense attention + dense MLP,
layer 1 MSA (block 64, top-4) + MoE, H 32, vocab 256), inputs.safetensors
(T seeded random ids) and case.json with the row selectors of M3-DUMP-11:
every block boundary +-1, the rows from 2,048 to 2,112 and the last 16
(params.rows), logits for the last 16 only (params.logits_rows). There is no
expected.safetensors: `m3-conform check` computes the golden with the
reference (spec/vectors.md: the golden is optional). numpy only.
"""
import hashlib
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "adapters"))
import numpy as np  # noqa: E402
import m3dump  # noqa: E402


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("cli_helper")
    ap.add_argument("out")
    ap.add_argument("--T", type=int, default=16384)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    subprocess.run([a.cli_helper, "fixture", a.out, "--layers", "2", "--dense", "1", "--hidden", "32",
                    "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--rotary", "4", "--vocab", "256",
                    "--block", "64", "--topk", "4", "--index-dim", "8", "--max-pos", str(max(32768, a.T)),
                    "--seed", str(a.seed)], check=True, stdout=subprocess.DEVNULL)
    r = random.Random(a.seed)
    ids = np.array([r.randrange(256) for _ in range(a.T)], dtype=np.int32)
    with open(os.path.join(a.out, "inputs.safetensors"), "wb") as f:
        f.write(m3dump.encode({"input_ids": ids}))
    files = {}
    for n in ("config.json", "model.safetensors", "inputs.safetensors"):
        with open(os.path.join(a.out, n), "rb") as f:
            files[n] = hashlib.sha256(f.read()).hexdigest()
    case = {"id": "model.long_%d_fp32" % a.T, "component": "model", "mode": "fp32", "profile": "fp32",
            "description": "tiny 2-layer model (dense; MSA block 64 + MoE), %d-token prompt: row subsets "
                           "(M3-DUMP-10/11); the golden is computed by the reference" % a.T,
            "clauses": ["M3-DUMP-10", "M3-DUMP-11"],
            "params": {"T": a.T, "rows": "*blocks~1,2048:2112,-16:", "logits_rows": "-16:"},
            "files": files, "generator": "tools/make_long_case.py"}
    with open(os.path.join(a.out, "case.json"), "w") as f:
        json.dump(case, f, indent=1, sort_keys=True)
        f.write("\n")
    print("make_long_case: wrote %s (T=%d)" % (a.out, a.T))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
