#!/usr/bin/env python3
"""ref_dumps.py — every committed model case through bin/m3-ref, outputs kept as files.

Usage: ref_dumps.py --bin bin/m3-ref --out DIR

For each model directory (models/demo, models/tiny, vectors/model/*, vectors/hf/*) it
runs `forward --dump` in fp32 and bf16 on the case's input_ids (with pixel_values when
the case has them) and a greedy `generate --print-ids`, writing DIR/<case>.<mode>.
safetensors and DIR/<case>.<mode>.gen. Two builds are bit-identical on these cases iff
`cmp` finds every file pair equal (compare two DIRs with `diff -r`). Stdlib only.
"""
import argparse
import json
import os
import struct
import subprocess
import sys


def read_st(path):
    """name -> (dtype, shape, raw bytes) of a safetensors file."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], b[8 + n + s:8 + n + e])
    return out


def case_ids(d):
    """The prompt ids of a model directory and the pixels file (or None)."""
    p = os.path.join(d, "inputs.safetensors")
    if not os.path.exists(p):
        return [1, 2, 3, 4, 5, 6, 7, 8], None
    t = read_st(p)
    dt, shape, raw = t["input_ids"]
    ids = list(struct.unpack("<%di" % shape[0], raw))
    return ids, (p if "pixel_values" in t else None)


def run(cmd, out_path):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(out_path, "wb") as f:
        f.write(r.stdout)
        f.write(b"rc=%d\n" % r.returncode)
    if r.returncode != 0:
        sys.stderr.write("ref_dumps: %s failed: %s\n" % (" ".join(cmd[:4]), r.stderr.decode()[-400:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="bin/m3-ref")
    ap.add_argument("--out", required=True)
    ap.add_argument("--gen-tokens", type=int, default=8)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dirs = ["models/demo", "models/tiny"]
    for top in ("vectors/model", "vectors/hf"):
        dirs += sorted(os.path.join(top, x) for x in os.listdir(top))
    for d in dirs:
        if not os.path.exists(os.path.join(d, "config.json")):
            continue
        ids, pixels = case_ids(d)
        tok = ",".join(str(i) for i in ids)
        name = d.replace("/", "_")
        for mode in ("fp32", "bf16"):
            extra = ["--pixels", pixels] if pixels else []
            dump = os.path.join(a.out, "%s.%s.safetensors" % (name, mode))
            run([a.bin, "forward", "--model", d, "--tokens", tok, "--dtype", mode, "--dump", dump]
                + extra, os.path.join(a.out, "%s.%s.fwd" % (name, mode)))
            run([a.bin, "generate", "--model", d, "--tokens", tok, "--dtype", mode, "--greedy",
                 "--print-ids", "--max-new-tokens", str(a.gen_tokens)] + extra,
                os.path.join(a.out, "%s.%s.gen" % (name, mode)))
        print("ref_dumps: %s (%d tokens)" % (d, len(ids)), flush=True)


if __name__ == "__main__":
    main()
