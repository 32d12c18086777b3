#!/usr/bin/env python3
"""real_hf_dumps.py — HF transformers dumps of several cases of one checkpoint.

The real-shape suite's cases (vectors/real/manifest.json, laid out by
tools/real_suite.py) share one synthetic checkpoint of about 16 GB, so building
the HF model once and dumping every case from it saves minutes per case over one
tools/adapters/hf_dump.py call each. Each case's ids come from its
inputs.safetensors, its greedy steps from case.json params.max_new_tokens; the
dump is written with the spec's names (M3-DUMP-*) exactly as hf_dump.py writes it.

    python3 tools/real_hf_dumps.py --mode fp32|bf16 CASE_DIR:OUT.safetensors ...

Needs torch, transformers >= 5.17, safetensors, numpy (the GPU machine has them).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "adapters"))

import numpy as np  # noqa: E402
import hf_dump  # noqa: E402
import m3dump  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pairs", nargs="+", help="CASE_DIR:OUT.safetensors (all cases of one checkpoint)")
    ap.add_argument("--mode", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args(argv)
    pairs = []
    for p in a.pairs:
        if ":" not in p:
            sys.exit("real_hf_dumps: %s: expected CASE_DIR:OUT.safetensors" % p)
        c, o = p.rsplit(":", 1)
        pairs.append((c, o))
    torch = hf_dump.torch
    hf_dump.deterministic()
    t0 = time.time()
    model, cfg, routers = hf_dump.load_case_model(pairs[0][0], a.device, "eager")
    hf_dump.set_mode(model, a.mode, routers, "fp32")
    print("real_hf_dumps: model of %s built and loaded in %.1f s" % (pairs[0][0], time.time() - t0), flush=True)
    V = cfg.text_config.vocab_size
    import transformers
    for case_dir, out in pairs:
        t1 = time.time()
        with open(os.path.join(case_dir, "case.json")) as f:
            params = json.load(f).get("params", {})
        ids = hf_dump.st_load_torch(os.path.join(case_dir, "inputs.safetensors"))["input_ids"].tolist()
        if not ids or min(ids) < 0 or max(ids) >= V:
            sys.exit("real_hf_dumps: %s: token ids must be non-empty and in [0, %d)" % (case_dir, V))
        n_new = int(params.get("max_new_tokens", 0))
        res = hf_dump.dump(model, torch.tensor(ids, dtype=torch.long, device=a.device), n_new)
        res = {k: v for k, v in res.items() if not k.endswith(("block_indices_hf", "router_logits"))}
        meta = {"generator": "transformers %s" % transformers.__version__, "torch": torch.__version__,
                "mode": a.mode, "attn_implementation": "eager", "router_dtype": "fp32", "rounding": "hf",
                "device": a.device}
        m3dump.write_dump(out, {k: np.ascontiguousarray(v) for k, v in res.items()}, mode=a.mode,
                          producer="tools/real_hf_dumps.py (tools/adapters/hf_dump.py)", metadata=meta)
        print("real_hf_dumps: %s: %d ids, %d greedy, %d tensors in %.1f s -> %s"
              % (case_dir, len(ids), n_new, len(res), time.time() - t1, out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
