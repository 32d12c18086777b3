#!/usr/bin/env python3
"""check_demo.py — bin/m3-ref on the demo model against HF transformers.

models/demo/hf_expected.safetensors was written on the GPU machine by
tools/train_demo.py from HF's own MiniMax-M3 forward in fp32 on the shipped
checkpoint. This script (numpy + stdlib only) checks that bin/m3-ref, fp32:
  1. generates exactly HF's greedy ids (KV cache) for each fixed prompt, both
     from --prompt TEXT (so m3's tokenizer must give HF's prompt ids too) and
     from --tokens with HF's prompt ids;
  2. gives HF's logits for the longer prompt within --rtol, relative to the
     largest |logit| of each row;
  3. picks the same MSA blocks (as sets, per index head and query) and the same
     experts (as sets) on every sparse/MoE layer of that prompt.

    /usr/bin/python3 tools/check_demo.py [--bin bin/m3-ref] [--model models/demo]
Exit status 0 when everything agrees, 1 otherwise.
Spec clauses: M3-VEC-*, M3-TOL-* (upstream agreement on a trained checkpoint).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), p.returncode,
                                                   p.stderr.decode(errors="replace")))
    return p.stdout.decode()


def ids_of(text):
    return [int(x) for x in text.replace(",", " ").split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="bin/m3-ref")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--rtol", type=float, default=1e-4)
    a = ap.parse_args()
    path = os.path.join(a.model, "hf_expected.safetensors")
    exp = st.load(path)
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(f.read(n)).get("__metadata__", {})
    prompts = json.loads(meta["prompts"])
    bad = 0
    for i, text in enumerate(prompts):
        want = exp["prompt%d.greedy" % i].tolist()
        pid = exp["prompt%d.ids" % i].tolist()
        n_new = str(len(want))
        got_p = ids_of(run([a.bin, "generate", "--model", a.model, "--prompt", text, "--greedy",
                            "--max-new-tokens", n_new, "--print-ids"]))
        got_t = ids_of(run([a.bin, "generate", "--model", a.model, "--tokens",
                            ",".join(map(str, pid)), "--greedy", "--max-new-tokens", n_new,
                            "--print-ids"]))
        for how, got in (("--prompt", got_p), ("--tokens", got_t)):
            same = got == want
            first = next((j for j, (x, y) in enumerate(zip(got, want)) if x != y),
                         None if len(got) == len(want) else min(len(got), len(want)))
            print("greedy %-26r %-8s %d/%d ids identical%s" % (
                text, how, sum(x == y for x, y in zip(got, want)), len(want),
                "" if same else "  FIRST DIFFERENCE at %s" % first))
            bad += not same
    lid = exp["logits.ids"].tolist()
    with tempfile.TemporaryDirectory() as td:
        out = os.path.join(td, "dump.safetensors")
        run([a.bin, "forward", "--model", a.model, "--tokens", ",".join(map(str, lid)),
             "--dump", out])
        got = st.load(out)
    want = exp["logits"]
    g = got["logits"][:, :want.shape[1]]
    scale = np.abs(want).max(axis=1, keepdims=True)
    rel = float((np.abs(g - want) / scale).max())
    am = int((g.argmax(1) == want.argmax(1)).sum())
    ok = rel <= a.rtol
    print("logits  T=%d V=%d: max |m3-HF| / max|HF row| = %.3e (limit %.0e), max abs %.3e, "
          "argmax equal %d/%d %s" % (want.shape[0], want.shape[1], rel, a.rtol,
                                     float(np.abs(g - want).max()), am, want.shape[0],
                                     "ok" if ok and am == want.shape[0] else "FAIL"))
    bad += not ok or am != want.shape[0]
    sets_bad = sets_n = 0
    sparse_rows = 0
    for k in sorted(exp):
        if not k.startswith("logits.layers."):
            continue
        name = k[len("logits."):]
        e, r = exp[k], got[name]
        if name.endswith("block_indices"):
            for gi in range(e.shape[0]):
                for t in range(e.shape[1]):
                    se = set(e[gi, t][e[gi, t] >= 0].tolist())
                    sr = set(r[gi, t][r[gi, t] >= 0].tolist())
                    sets_n += 1
                    sets_bad += se != sr
                    sparse_rows += len(se) < t // int(_block_size(a.model)) + 1
        else:
            for t in range(e.shape[0]):
                sets_n += 1
                sets_bad += set(e[t].tolist()) != set(r[t].tolist())
    print("choices: %d block/expert sets compared, %d differ; %d (head, query) rows attend "
          "to fewer blocks than are visible (sparse path active)" % (sets_n, sets_bad, sparse_rows))
    bad += sets_bad > 0 or sets_n == 0
    print("demo-check: %s" % ("PASS" if not bad else "FAIL (%d)" % bad))
    return 0 if not bad else 1


def _block_size(model):
    with open(os.path.join(model, "config.json")) as f:
        c = json.load(f)
    return c["text_config"]["sparse_attention_config"]["sparse_block_size"]


if __name__ == "__main__":
    sys.exit(main())
