#!/usr/bin/env python3
"""dump_edit.py — write edited copies of a safetensors dump for the m3-conform
hardening tests (tests/conform_cli.sh). Standard library only.

    dump_edit.py IN OUT OP...
      prefix:P                 prepend P to every tensor name
      shift-layers             layers.{i}.* -> layers.{i+1}.* (1-based numbering)
      drop:NAME                remove a tensor
      nan:NAME                 every element of an F32 tensor becomes NaN
      meta:KEY=VALUE           set a __metadata__ entry
      f64:NAME                 add a 1-element F64 tensor
      huge:NAME:GIB            add an F32 tensor of GIB GiB, stored sparse (zero bytes)
      nulname:NAME             add a tensor whose header name holds a \\u0000 escape
      reshape:NAME:D0,D1       declare NAME with another shape of the same byte count
"""
import json
import os
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {k: [v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]]
               for k, v in hdr.items()}
    return meta, tensors


def save(path, meta, tensors, huge=None, nulname=None):
    hdr, blobs, off = {}, [], 0
    if meta:
        hdr["__metadata__"] = meta
    for k in sorted(tensors):
        dt, shape, b = tensors[k]
        hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    huge_bytes = 0
    if huge:
        name, gib = huge
        huge_bytes = gib << 30
        hdr[name] = {"dtype": "F32", "shape": [huge_bytes // 4], "data_offsets": [off, off + huge_bytes]}
    text = json.dumps(hdr, separators=(",", ":"))
    if nulname:
        text = text[:-1] + ',"%s\\u0000x":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}' % nulname
    h = text.encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
        if huge_bytes:
            f.truncate(f.tell() + huge_bytes)  # a hole: no disk, no memory


def main():
    src, dst, ops = sys.argv[1], sys.argv[2], sys.argv[3:]
    meta, t = load(src)
    huge = nulname = None
    for op in ops:
        kind, _, arg = op.partition(":")
        if kind == "prefix":
            t = {arg + k: v for k, v in t.items()}
        elif kind == "shift-layers":
            def shift(k):
                p = k.split(".")
                if p[0] == "layers":
                    p[1] = str(int(p[1]) + 1)
                return ".".join(p)
            t = {shift(k): v for k, v in t.items()}
        elif kind == "drop":
            del t[arg]
        elif kind == "nan":
            dt, shape, b = t[arg]
            assert dt == "F32"
            t[arg] = [dt, shape, struct.pack("<f", float("nan")) * (len(b) // 4)]
        elif kind == "meta":
            k, _, v = arg.partition("=")
            meta[k] = v
        elif kind == "f64":
            t[arg] = ["F64", [1], struct.pack("<d", 1.0)]
        elif kind == "huge":
            name, gib = arg.split(":")
            huge = (name, int(gib))
        elif kind == "nulname":
            nulname = arg
        elif kind == "reshape":
            name, dims = arg.split(":")
            t[name][1] = [int(d) for d in dims.split(",")]
        else:
            sys.exit("dump_edit.py: unknown op " + op)
    save(dst, meta, t, huge, nulname)


if __name__ == "__main__":
    main()
