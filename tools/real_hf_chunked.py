#!/usr/bin/env python3
"""real_hf_chunked.py — HF transformers running a chunked case as a serving port does.

A case with `params.chunks` (spec/dump.md, M3-DUMP-5) is prefilled chunk by chunk
through one HF cache (`past_key_values`), each chunk continuing the KV and
index-K caches of the ones before it. Each chunk's activations are captured with
tools/adapters/hf_dump.py's hooks, and the dump holds the rows of every chunk in
position order (M3-DUMP-2), or with `from=N` only the rows of chunks N.. and a
`rows` tensor (M3-DUMP-10): a port that serves prompt B from a cached prefix A
computes B's rows only. The raw block scores are left out (hf_dump.py recomputes
them from one chunk's inputs, which is only right for the first chunk).

`lose-index-cache` zeroes every cached index-K entry after each chunk and keeps
the KV cache: the bug of ports that lost the index-K cache across a prefix reuse
(docs/port-bugs.md, index_cache_lost), run at the released shapes to show that
the kit flags it. The index-K entries are found in the cache object by shape
(one index head of index_head_dim, one row per cached position); the script
stops when it does not find exactly one per sparse layer.

    python3 tools/real_hf_chunked.py [--mode fp32|bf16] CASE_DIR:OUT[:from=N][:lose-index-cache] ...

All specs must share one checkpoint (the model is built once). Needs torch,
transformers >= 5.17, safetensors and numpy (the GPU machine has them).
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

DROP = ("block_indices_hf", "router_logits", "block_scores")


def row_axis(name):
    return 1 if name.endswith(".block_indices") else 0


def index_k_entries(cache, T, dim, n_sparse):
    """The cached index-K tensors (shape [..., 1, T, dim] or [..., T, 1, dim] with one
    index head): found by walking the cache object's attributes."""
    found, seen = [], set()

    def walk(obj, path, depth):
        if id(obj) in seen or depth > 4:
            return
        seen.add(id(obj))
        if isinstance(obj, hf_dump.torch.Tensor):
            s = tuple(obj.shape)
            if len(s) >= 3 and s[-1] == dim and T in s[:-1] and \
                    int(np.prod(s[:-1])) == T and "key_cache" not in path.split(".")[-1]:
                found.append((path, obj))
            return
        if isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, "%s[%d]" % (path, i), depth + 1)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, "%s[%r]" % (path, k), depth + 1)
        elif hasattr(obj, "__dict__"):
            for k, v in vars(obj).items():
                walk(v, "%s.%s" % (path, k), depth + 1)

    walk(cache, "cache", 0)
    if len(found) != n_sparse:
        desc = ", ".join("%s %s" % (p, tuple(t.shape)) for p, t in found) or "none"
        sys.exit("real_hf_chunked: expected %d cached index-K tensors of %d positions x %d, found %s"
                 % (n_sparse, T, dim, desc))
    return found


def run_case(model, cfg, case_dir, out, first, lose, mode):
    torch = hf_dump.torch
    with open(os.path.join(case_dir, "case.json")) as f:
        params = json.load(f).get("params", {})
    ids = hf_dump.st_load_torch(os.path.join(case_dir, "inputs.safetensors"))["input_ids"].tolist()
    chunks = params.get("chunks")
    if not chunks or sum(chunks) != len(ids):
        sys.exit("real_hf_chunked: %s: params.chunks must be present and sum to T = %d" % (case_dir, len(ids)))
    if not 0 <= first < len(chunks):
        sys.exit("real_hf_chunked: %s: from=%d, but the case has %d chunks" % (case_dir, first, len(chunks)))
    tc = cfg.text_config
    lm = model.model.language_model
    n_sparse = sum(1 for layer in lm.layers if layer.self_attn.indexer is not None)
    dim = next(layer.self_attn.indexer.head_dim for layer in lm.layers if layer.self_attn.indexer is not None) \
        if n_sparse else 0
    parts, cache, pos, lost = [], None, 0, 0
    t0 = time.time()
    with torch.no_grad():
        for c, n in enumerate(chunks):
            x = torch.tensor([ids[pos:pos + n]], dtype=torch.long, device=model.device)
            cap = hf_dump.Capture(model)
            cap.on = c >= first
            o = model(input_ids=x, past_key_values=cache, use_cache=True)
            cap.on = False
            if c >= first:
                res = cap.finish()
                res["logits"] = hf_dump._np(o.logits[0])
                parts.append({k: v for k, v in res.items() if not k.endswith(DROP)})
            cap.close()
            cache = o.past_key_values
            pos += n
            if lose and n_sparse:
                for _path, t in index_k_entries(cache, pos, dim, n_sparse):
                    t.zero_()
                lost += 1
    names = [k for k in parts[0] if all(k in p for p in parts)]
    dump = {k: np.ascontiguousarray(np.concatenate([p[k] for p in parts], axis=row_axis(k))) for k in names}
    start = sum(chunks[:first])
    meta = {"generator": "tools/real_hf_chunked.py", "mode": mode, "chunks": ",".join(map(str, chunks)),
            "from_chunk": str(first), "lose_index_cache": "yes" if lose else "no",
            "vocab": str(tc.vocab_size)}
    m3dump.write_dump(out, dump, mode=mode, rows=list(range(start, len(ids))) if first else None,
                      producer="tools/real_hf_chunked.py (HF transformers through past_key_values)",
                      metadata=meta)
    print("real_hf_chunked: %s: %d chunks (rows %d..%d dumped)%s, %d tensors in %.1f s -> %s"
          % (case_dir, len(chunks), start, len(ids) - 1,
             ", index-K zeroed after %d chunks" % lost if lose else "", len(dump), time.time() - t0, out),
          flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("specs", nargs="+", help="CASE_DIR:OUT[:from=N][:lose-index-cache]")
    ap.add_argument("--mode", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args(argv)
    jobs = []
    for s in a.specs:
        f = s.split(":")
        if len(f) < 2:
            sys.exit("real_hf_chunked: %s: expected CASE_DIR:OUT[:from=N][:lose-index-cache]" % s)
        first, lose = 0, False
        for opt in f[2:]:
            if opt.startswith("from=") and opt[5:].isdigit():
                first = int(opt[5:])
            elif opt == "lose-index-cache":
                lose = True
            else:
                sys.exit("real_hf_chunked: %s: unknown option %r" % (s, opt))
        jobs.append((f[0], f[1], first, lose))
    hf_dump.deterministic()
    t0 = time.time()
    model, cfg, routers = hf_dump.load_case_model(jobs[0][0], a.device, "eager")
    hf_dump.set_mode(model, a.mode, routers, "fp32")
    print("real_hf_chunked: model built and loaded in %.1f s" % (time.time() - t0), flush=True)
    for case_dir, out, first, lose in jobs:
        run_case(model, cfg, case_dir, out, first, lose, a.mode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
