#!/usr/bin/env python3
"""m3dump.py — write (and read) an m3 activation dump with numpy only.

For ports without torch (JAX, MLX, custom C++/CUDA with Python bindings, ...):
collect the activations as numpy arrays under the names of spec/dump.md
(M3-DUMP-3) and write them with `write_dump`; `bin/m3-conform check` judges
the file. One file, no dependency beyond numpy; copy it into your project if
you like.

    import numpy as np, m3dump
    m3dump.write_dump("dump.safetensors",
                      {"layers.0.input": x0, "layers.0.output": x1, ..., "logits": lg},
                      unsupported=["internals"],   # M3-DUMP-6: what the dump lacks on purpose
                      rows=[0, 1, 127, 128, 129],  # M3-DUMP-10: the positions the rows are
                      producer="myport 0.3", mode="bf16")

Floats are written as F32 (float16 as F16; bfloat16 arrays, e.g. from
ml_dtypes, as BF16, bit-exact); integers as I32 (values must fit). `rows`
becomes the int32 tensor `rows` (strictly ascending positions); a per-name
subset, e.g. logits for the last 16 positions only, goes in `row_sets`
({"logits": [...]}) and is written as `logits.rows`. Each array given with a
row subset must then have that many rows (axis 1 for `block_indices`).

Also a command line for quick edits of existing dumps (used by the tests):

    m3dump.py strip IN OUT [--residual-only] [--rows SEL --T T] [--logits-rows SEL]
                           [--declare CAP,...] [--drop NAME,...]

SEL is the row selector of spec/dump.md (M3-DUMP-11), e.g. "*4~1,2048:,-16:";
--block B gives the block size for "*blocks~D".
"""
import json
import re
import struct
import sys

import numpy as np

_DT_OUT = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32"}
_DT_IN = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "F64": np.float64,
          "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _row_axis(name):
    return 1 if name.endswith(("block_indices", "block_scores")) else 0


def _has_rows(name):
    """Whether the first (row) axis of tensor name is positions (M3-DUMP-10)."""
    return not (name in ("greedy_tokens", "rows", "input_ids") or name.startswith("vision.")
                or name.endswith(".rows"))


def _as_written(name, a):
    """(dtype code, contiguous little-endian bytes) of one array."""
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":  # ml_dtypes / jax bfloat16: keep the bits
        return "BF16", np.ascontiguousarray(a).view(np.uint16).astype("<u2").tobytes()
    if a.dtype.kind == "f":
        if a.dtype == np.float16:
            return "F16", np.ascontiguousarray(a, dtype="<f2").tobytes()
        return "F32", np.ascontiguousarray(a, dtype="<f4").tobytes()
    if a.dtype.kind in "iub":
        if a.size and (a.min() < -2**31 or a.max() >= 2**31):
            raise ValueError("%s: integer values do not fit int32" % name)
        return "I32", np.ascontiguousarray(a, dtype="<i4").tobytes()
    raise ValueError("%s: dtype %s is neither float nor integer" % (name, a.dtype))


def check_rows(name, rows, T=None):
    """Validate a row set: 1-D, non-empty, strictly ascending, in [0, T)."""
    r = np.asarray(rows)
    if r.ndim != 1 or r.size == 0 or r.dtype.kind not in "iu":
        raise ValueError("%s: a row set is a non-empty 1-D integer array" % name)
    d = np.diff(r.astype(np.int64))
    if np.any(d == 0):
        raise ValueError("%s: position %d appears twice" % (name, int(r[1:][d == 0][0])))
    if np.any(d < 0):
        raise ValueError("%s: positions must be ascending" % name)
    if r[0] < 0 or (T is not None and r[-1] >= T):
        raise ValueError("%s: position out of range [0, %s)" % (name, T))
    return r.astype(np.int32)


def encode(tensors, metadata=None):
    """The bytes of a safetensors file holding tensors {name: array}."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        code, raw = _as_written(name, tensors[name])
        shape = [int(s) for s in np.shape(tensors[name])]
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def write_dump(path, tensors, unsupported=(), rows=None, row_sets=None, producer="", mode="", T=None,
               metadata=None):
    """Write a dump (M3-DUMP-1): tensors {name: numpy array}; unsupported:
    capabilities declared absent (M3-DUMP-6); rows / row_sets: the positions
    of a row subset (M3-DUMP-10), checked against T when given; metadata:
    more __metadata__ strings (e.g. the producer's versions)."""
    out = dict(tensors)
    sets = dict(row_sets or {})
    if rows is not None:
        out["rows"] = check_rows("rows", rows, T)
    for name, r in sets.items():
        if name not in out:
            raise ValueError("%s.rows: the dump has no tensor %s" % (name, name))
        out[name + ".rows"] = check_rows(name + ".rows", r, T)
    for name, a in tensors.items():
        if not _has_rows(name):
            continue
        rs = out.get(name + ".rows", out.get("rows"))
        ax = _row_axis(name)
        if rs is not None and np.ndim(a) > ax and np.shape(a)[ax] not in (len(rs), T):
            raise ValueError("%s has %d rows; its row set has %d" % (name, np.shape(a)[ax], len(rs)))
    meta = dict(metadata or {})
    meta["m3.dump_version"] = "1"
    if unsupported:
        meta["m3.unsupported"] = ",".join(unsupported)
    if producer:
        meta["m3.producer"] = producer
    if mode:
        meta["m3.mode"] = mode
    with open(path, "wb") as f:
        f.write(encode(out, meta))


def read_dump(path):
    """({name: numpy array}, metadata dict) of a safetensors file (BF16 widened to float32)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, d in header.items():
        a, b = d["data_offsets"]
        raw = data[base + a:base + b]
        if d["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(_DT_IN[d["dtype"]]).newbyteorder("<"))
        out[name] = arr.reshape(d["shape"]).copy()
    return out, meta


def parse_selector(sel, T, block=None):
    """Positions (sorted, unique) named by a row selector (M3-DUMP-11):
    terms separated by commas: P (a position; negative counts from T),
    A:B (half-open, either end optional, negatives from T), *N~D (every
    multiple k*N, k >= 1, and the D positions either side), *blocks~D (N =
    the model's index block size)."""
    got = set()
    for term in sel.split(","):
        t = term.strip()
        if not t:
            raise ValueError("row selector %r: empty term" % sel)
        m = re.fullmatch(r"\*(\d+|blocks)(?:~(\d+))?", t)
        if m:
            n = block if m.group(1) == "blocks" else int(m.group(1))
            if not n:
                raise ValueError("row selector %r: no block size for %s" % (sel, t))
            d = int(m.group(2) or 0)
            for p in range(T):  # within D of a multiple k*N, k >= 1
                k1 = p // n
                if (k1 >= 1 and p - k1 * n <= d) or (k1 + 1) * n - p <= d:
                    got.add(p)
            continue
        m = re.fullmatch(r"(-?\d*):(-?\d*)", t)
        if m:
            a = int(m.group(1)) if m.group(1) else 0
            b = int(m.group(2)) if m.group(2) else T
            a, b = (a + T if a < 0 else a), (b + T if b < 0 else b)
            got.update(range(max(a, 0), min(b, T)))
            continue
        if re.fullmatch(r"-?\d+", t):
            p = int(t)
            p = p + T if p < 0 else p
            if not 0 <= p < T:
                raise ValueError("row selector %r: position %s outside [0, %d)" % (sel, t, T))
            got.add(p)
            continue
        raise ValueError("row selector %r: cannot read term %r" % (sel, t))
    return sorted(got)


def _main(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="m3dump.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("strip", help="rewrite a dump: drop internals, keep a row subset")
    s.add_argument("src")
    s.add_argument("dst")
    s.add_argument("--residual-only", action="store_true",
                   help="keep layers.{i}.input/output, final_norm, logits; declare internals absent")
    s.add_argument("--rows", help="row selector for every [T, ...] tensor")
    s.add_argument("--logits-rows", help="row selector for logits only")
    s.add_argument("--T", type=int, help="positions of the forward (default: rows of layers.0.input)")
    s.add_argument("--block", type=int, help="block size for *blocks~D")
    s.add_argument("--declare", default="", help="capabilities to declare absent (comma-separated)")
    s.add_argument("--drop", default="", help="tensors to leave out (comma-separated)")
    a = ap.parse_args(argv)
    t, meta = read_dump(a.src)
    caps = [c for c in (meta.get("m3.unsupported", "") + "," + a.declare).split(",") if c]
    drop = {x for x in a.drop.split(",") if x}
    if a.residual_only:
        keep = re.compile(r"layers\.\d+\.(input|output)$|final_norm$|logits$|greedy_tokens$|eagle3\.aux$")
        t = {k: v for k, v in t.items() if keep.match(k)}
        caps.append("internals")
    T = a.T or next(v.shape[0] for k, v in t.items() if k in ("layers.0.input", "embeddings", "logits"))
    t = {k: v for k, v in t.items() if k not in drop}
    rows = parse_selector(a.rows, T, a.block) if a.rows else None
    sets = {}
    if a.logits_rows:
        sets["logits"] = parse_selector(a.logits_rows, T, a.block)
    for k in list(t):
        rs = sets.get(k, rows)
        ax = _row_axis(k)
        if rs is not None and _has_rows(k) and t[k].ndim > ax and t[k].shape[ax] == T:
            t[k] = np.take(t[k], rs, axis=ax)
    write_dump(a.dst, t, unsupported=sorted(set(caps)), rows=rows, row_sets=sets,
               producer=meta.get("m3.producer", "m3dump.py strip"), mode=meta.get("m3.mode", ""), T=T)
    print("m3dump: wrote %d tensors to %s" % (len(t) + (rows is not None) + len(sets), a.dst))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
