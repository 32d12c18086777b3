#!/usr/bin/env python3
"""real_suite.py — generate the real-shape suite (vectors/real/manifest.json) on demand.

For every checkpoint the manifest names, runs `m3-conform synth` (spec/synth.md) into
OUT/checkpoints/NAME (kept when it is already there from the same arguments) and, when
vectors/real/checkpoints.sha256 lists it, verifies its files' sha256. Then writes each
case directory (spec/vectors.md, M3-VEC-2/3/6): case.json, inputs.safetensors (the
case's prompt taken from the checkpoint's inputs.safetensors, M3-SYNTH-11) and links to
the checkpoint's config, index and shards; and computes each golden with the reference
(`m3-conform golden`). Cases whose one-shot run is the same (same checkpoint, prompt
and length) share one reference run; a case without greedy tokens gets that golden
with greedy_tokens left out. Prints the sha256 of every golden, writes them to
OUT/goldens.sha256 and compares them with vectors/real/goldens.sha256 when that file
exists (exit 1 on a difference). Finally writes OUT/manifest.json (suite m3-real-big)
for `m3-conform run`.

usage: real_suite.py --out DIR [--tiny] [--conform BIN] [--manifest FILE] [--only ID,...]
                     [--no-verify] [--no-golden]
  --tiny       the same cases on the tiny shapes (tiny_args): a fast self-test of the
               pipeline; no published sums apply
  --no-verify  skip the checkpoint sha256 check (it reads every shard)
Stdlib only (the inputs are sliced from safetensors by hand).
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CLAUSES = ["M3-ATTN-GQA-1", "M3-ATTN-PROJ-1", "M3-ATTN-QKNORM-1", "M3-ATTN-QKNORM-2",
           "M3-ATTN-SCORE-1", "M3-CACHE-1", "M3-CACHE-2", "M3-CFG-1", "M3-CKPT-NAMES-1",
           "M3-DUMP-3", "M3-EMB-1", "M3-MLP-DENSE-1", "M3-MLP-SWIGLU-1", "M3-MODEL-1",
           "M3-MODEL-2", "M3-MODEL-3", "M3-MODEL-4", "M3-MOE-COMBINE-1", "M3-MOE-EXPERT-1",
           "M3-MOE-ROUTER-1", "M3-MOE-ROUTER-2", "M3-MOE-ROUTER-3", "M3-MOE-SHARED-1",
           "M3-MSA-ATTN-1", "M3-MSA-CACHE-1", "M3-MSA-IDX-1", "M3-MSA-IDX-2", "M3-MSA-IDX-3",
           "M3-MSA-IDX-4", "M3-MSA-SELECT-5", "M3-NORM-1", "M3-NUM-MODE-1", "M3-ROPE-3",
           "M3-SYNTH-1", "M3-SYNTH-11"]
VISION_CLAUSES = ["M3-EMB-3", "M3-VEC-6", "M3-VIS-MERGE-1", "M3-VIS-MERGE-2", "M3-VIS-NAMES-1",
                  "M3-VIS-NUM-1", "M3-VIS-PROJ-1", "M3-VIS-SEG-1"]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 22)
            if not b:
                return h.hexdigest()
            h.update(b)


def st_read(path, names=None):
    """{name: (dtype, shape, bytes)} of a safetensors file (only `names` when given)."""
    out = {}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        for k, v in head.items():
            if k == "__metadata__" or (names is not None and k not in names):
                continue
            b, e = v["data_offsets"]
            f.seek(8 + n + b)
            out[k] = (v["dtype"], v["shape"], f.read(e - b))
    return out


def st_write(path, tensors, metadata=None):
    """Write {name: (dtype, shape, bytes)} (names sorted, header padded to 8)."""
    head, off, blobs = {}, 0, []
    if metadata:
        head["__metadata__"] = dict(metadata)
    for k in sorted(tensors):
        dt, shape, data = tensors[k]
        head[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def write_json(path, obj):
    tmp = path + ".tmp%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(json.dumps(obj, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def relink(src, dst):
    if os.path.islink(dst) or os.path.exists(dst):
        os.remove(dst)
    os.symlink(os.path.relpath(src, os.path.dirname(dst)), dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--conform", default=os.path.join(ROOT, "bin", "m3-conform"))
    ap.add_argument("--manifest", default=os.path.join(ROOT, "vectors", "real", "manifest.json"))
    ap.add_argument("--only", default="")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--no-golden", action="store_true")
    a = ap.parse_args()
    mdir = os.path.dirname(os.path.abspath(a.manifest))
    man = json.load(open(a.manifest))
    only = set(x for x in a.only.split(",") if x)
    cases = [c for c in man["cases"] if not only or c in only or c.split("/")[-1] in only]
    if only and not cases:
        sys.exit("real_suite: --only %s names no case of %s" % (a.only, a.manifest))
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)

    # ---- checkpoints
    sums = {}
    ck_sums = os.path.join(mdir, "checkpoints.sha256")
    if os.path.exists(ck_sums):
        for line in open(ck_sums):
            if line.strip() and not line.startswith("#"):
                h, p = line.split()
                sums[p] = h
    ckdir = {}
    for name in sorted(set(man["case_specs"][c]["checkpoint"] for c in cases)):
        spec = man["checkpoints"][name]
        args = spec["tiny_args"] if a.tiny else spec["synth_args"]
        d = os.path.join(out, "checkpoints", name + ("-tiny" if a.tiny else ""))
        stamp = os.path.join(d, ".synth-args")
        if not (os.path.exists(stamp) and open(stamp).read() == " ".join(args) and
                os.path.exists(os.path.join(d, "model.safetensors.index.json"))):
            if os.path.exists(stamp):
                os.remove(stamp)
            r = subprocess.run([a.conform, "synth"] + args + ["--out", d])
            if r.returncode:
                sys.exit("real_suite: m3-conform synth failed for %s (exit %d)" % (name, r.returncode))
            with open(stamp, "w") as f:
                f.write(" ".join(args))
        else:
            print("real_suite: checkpoint %s already synthesized (%s)" % (name, d))
        listed = sorted(p for p in sums if p.startswith(name + "/"))
        if a.tiny or a.no_verify or not listed:
            print("real_suite: checkpoint %s: sha256 not checked (%s)" % (
                name, "tiny shapes" if a.tiny else "--no-verify" if a.no_verify else
                "not listed in %s" % ck_sums))
        else:
            bad = [p for p in listed if sha256(os.path.join(d, p.split("/", 1)[1])) != sums[p]]
            if bad:
                sys.exit("real_suite: checkpoint %s differs from %s: %s" % (name, ck_sums, ", ".join(bad)))
            print("real_suite: checkpoint %s: %d files match %s" % (name, len(listed), ck_sums))
        ckdir[name] = d

    # ---- case directories
    groups = {}
    shard_sums = {}
    for c in cases:
        cs = man["case_specs"][c]
        d = os.path.join(out, c)
        os.makedirs(d, exist_ok=True)
        ck = ckdir[cs["checkpoint"]]
        idx = json.load(open(os.path.join(ck, "model.safetensors.index.json")))
        for f in ["config.json", "model.safetensors.index.json"] + sorted(set(idx["weight_map"].values())):
            relink(os.path.join(ck, f), os.path.join(d, f))
        src = st_read(os.path.join(ck, "inputs.safetensors"))
        if cs.get("image"):
            ids = src["image_input_ids"]
            tens = {"input_ids": ids, "pixel_values": src["pixel_values"],
                    "image_grid_thw": src["image_grid_thw"]}
            T = ids[1][0]
        else:
            T = cs["T"]
            dt, shape, data = src[cs["prompt"]]
            if T > shape[0]:
                sys.exit("real_suite: %s needs %d prompt tokens; the checkpoint has %d" % (c, T, shape[0]))
            tens = {"input_ids": (dt, [T], data[:4 * T])}
        st_write(os.path.join(d, "inputs.safetensors"), tens)
        params = {"T": T}
        if cs.get("chunks"):
            if sum(cs["chunks"]) != T:
                sys.exit("real_suite: %s: chunks sum to %d, not T = %d" % (c, sum(cs["chunks"]), T))
            params["chunks"] = cs["chunks"]
        if cs.get("max_new_tokens"):
            params["max_new_tokens"] = cs["max_new_tokens"]
        case = {"id": "real." + c.split("/")[-1] + ("_tiny" if a.tiny else ""),
                "description": cs["description"], "component": "model", "mode": "fp32",
                "profile": "fp32", "seed": 1, "generator": "tools/real_suite.py",
                "generator_version": "1", "checkpoint": cs["checkpoint"],
                "clauses": sorted(CLAUSES + (VISION_CLAUSES if cs.get("image") else []) +
                                  (["M3-SAMPLE-1"] if cs.get("max_new_tokens") else [])),
                "params": params}
        files = {f: sha256(os.path.join(d, f)) for f in
                 ("config.json", "model.safetensors.index.json", "inputs.safetensors")}
        # every payload file is listed (M3-VEC-3): the shards with the checkpoint's sums,
        # taken from vectors/real/checkpoints.sha256 where published, else computed once
        for f in sorted(set(idx["weight_map"].values())):
            key = (cs["checkpoint"], f)
            if key not in shard_sums:
                pub = None if a.tiny else sums.get("%s/%s" % (cs["checkpoint"], f))
                shard_sums[key] = pub or sha256(os.path.join(ck, f))
            files[f] = shard_sums[key]
        case["files"] = files
        write_json(os.path.join(d, "case.json"), case)
        key = (cs["checkpoint"], cs["prompt"], T, bool(cs.get("image")))
        groups.setdefault(key, []).append((c, d, case, params.get("max_new_tokens", 0)))

    # ---- goldens
    lines = []
    for key, members in groups.items():
        members.sort(key=lambda m: -m[3])
        c0, d0, case0, n0 = members[0]
        gold = os.path.join(d0, "expected.safetensors")
        stamp = os.path.join(d0, ".golden-for")
        want = json.dumps([case0["files"], n0, open(os.path.join(ckdir[key[0]], ".synth-args")).read()])
        if a.no_golden:
            continue
        # a golden computed before goldens carried their tie evidence is computed again
        # (same bytes; the evidence beside it is new, spec/vectors.md M3-VEC-11)
        evid = os.path.join(d0, "evidence.safetensors")
        if os.path.exists(gold) and os.path.exists(evid) and os.path.exists(stamp) and open(stamp).read() == want:
            print("real_suite: golden of %s already computed" % c0)
        else:
            print("real_suite: computing the golden of %s with the reference (%d tokens%s)..." % (
                c0, key[2], ", %d greedy" % n0 if n0 else ""), flush=True)
            for f in (gold, evid, stamp):  # a stale golden (another build, an interrupted run)
                if os.path.exists(f):
                    os.remove(f)
            r = subprocess.run([a.conform, "golden", "--case", d0])
            if r.returncode:
                sys.exit("real_suite: m3-conform golden failed for %s (exit %d)" % (c0, r.returncode))
            with open(stamp, "w") as f:
                f.write(want)
        for c, d, case, n in members:
            g = os.path.join(d, "expected.safetensors")
            if d != d0:
                t = st_read(gold)
                if n == 0:
                    t.pop("greedy_tokens", None)
                elif n != n0:
                    sys.exit("real_suite: %s and %s share a prompt but want %d and %d greedy tokens"
                             % (c, c0, n, n0))
                st_write(g, t)
                # its tie evidence: the shared run's, bound to this golden (M3-VEC-11)
                ev = st_read(evid)
                if n == 0:
                    ev.pop("greedy_logits", None)
                st_write(os.path.join(d, "evidence.safetensors"), ev,
                         {"m3.evidence_version": "1", "m3.golden_sha256": sha256(g)})
            case["files"]["expected.safetensors"] = sha256(g)
            case["files"]["evidence.safetensors"] = sha256(os.path.join(d, "evidence.safetensors"))
            write_json(os.path.join(d, "case.json"), case)
            lines.append("%s  %s/expected.safetensors" % (case["files"]["expected.safetensors"], c))
    write_json(os.path.join(out, "manifest.json"),
               {"suite": "m3-real-big" + ("-tiny" if a.tiny else ""), "version": man["version"],
                "cases": cases})
    if a.no_golden:
        print("real_suite: %d cases written to %s (no goldens)" % (len(cases), out))
        return 0
    lines.sort(key=lambda l: l.split()[1])
    with open(os.path.join(out, "goldens.sha256"), "w") as f:
        f.write("".join(l + "\n" for l in lines))
    for l in lines:
        print("golden sha256 %s" % l)
    pub = os.path.join(mdir, "goldens.sha256")
    if a.tiny or not os.path.exists(pub):
        print("real_suite: %d goldens written; %s" % (len(lines), "tiny shapes: no published sums apply"
              if a.tiny else "no published sums yet (%s); the lines above are the ones to publish" % pub))
        return 0
    want = {}
    for line in open(pub):
        if line.strip() and not line.startswith("#"):
            h, p = line.split()
            want[p] = h
    bad = 0
    for l in lines:
        h, p = l.split()
        if p not in want:
            print("real_suite: %s: no published sum" % p)
        elif want[p] != h:
            print("real_suite: MISMATCH %s: %s, published %s" % (p, h, want[p]))
            bad += 1
    print("real_suite: %d goldens, %d differ from %s" % (len(lines), bad, pub))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
