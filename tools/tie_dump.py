#!/usr/bin/python3
"""tie_dump.py — a free-running fp32 dump of a model case in which one router
row takes its runner-up expert, for tests/conform_settle.sh (M3-TOL-8).

    /usr/bin/python3 tools/tie_dump.py CASE_DIR LAYER ROW OUT.safetensors

CASE_DIR is a model vector (config.json, model.safetensors, inputs.safetensors).
The forward is tools/m3np.py's, except that in MoE layer LAYER, token row ROW
routes to its top-(k-1) experts plus the (k+1)-th best one by biased score
instead of the k-th (the routing weights are renormalised over that choice as
M3-MOE-ROUTER-2 says). Every later row and layer is computed from that choice,
so the dump is what a port whose arithmetic broke that near-tie the other way
would write. It holds no greedy_tokens (judge it with
--declare-unsupported greedy). Prints the row's margin between the two experts.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import m3np  # noqa: E402
import st  # noqa: E402


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    case, layer, row, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    cfg, W = m3np.load_model(case)
    if not (0 <= layer < cfg.L) or not cfg.moe[layer]:
        sys.exit("tie_dump.py: layer %d of %s is not a MoE layer" % (layer, case))
    moe_layers = [i for i in range(cfg.L) if cfg.moe[i]]
    calls = []
    plain = m3np.router

    def router(x, w, bias, topk, num):
        idx, wts, s = plain(x, w, bias, topk, num)
        if moe_layers[len(calls)] == layer:
            if not 0 <= row < s.shape[0]:
                sys.exit("tie_dump.py: row %d is outside the %d rows" % (row, s.shape[0]))
            c = (s[row] + np.asarray(bias, np.float32)).astype(np.float64)
            order = np.lexsort((np.arange(c.size), -c))
            pick = np.sort(np.concatenate([order[:topk - 1], order[topk:topk + 1]])).astype(np.int32)
            chosen = s[row, pick]
            tot = chosen[0]
            for j in range(1, topk):
                tot = np.float32(tot + chosen[j])
            idx = idx.copy()
            wts = wts.copy()
            idx[row] = pick
            wts[row] = (chosen / tot).astype(np.float32)
            print("layer %d row %d: expert %d instead of %d, biased scores %.6g vs %.6g "
                  "(margin %.3g of the row's largest)" %
                  (layer, row, order[topk], order[topk - 1], c[order[topk]], c[order[topk - 1]],
                   (c[order[topk - 1]] - c[order[topk]]) / np.abs(c).max()))
        calls.append(1)
        return idx, wts, s

    m3np.router = router
    ids = st.load(os.path.join(case, "inputs.safetensors"))["input_ids"].astype(np.int64)
    dump = {}
    m3np.forward(cfg, W, ids, m3np.Num("fp32"), dump=dump)
    with open(out, "wb") as f:
        f.write(st.dumps({k: np.asarray(v) for k, v in dump.items()}))


if __name__ == "__main__":
    main()
