"""st.py — minimal safetensors reader/writer (numpy + stdlib only).

Spec: M3-FMT-ST. Supported dtypes: F32, F16, BF16 (carried as uint16 bit
patterns; float32 input is rounded to nearest even), I32, I64.
Output is deterministic: tensors sorted by name, compact JSON header with
sorted keys, header padded with spaces to a multiple of 8 bytes.
"""
import json
import struct

import numpy as np

_NP = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
       "I32": np.dtype("<i4"), "I64": np.dtype("<i8"), "U8": np.dtype("u1")}


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bf16 bit patterns, round to nearest even (NaN kept quiet)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_bits_to_f32(b):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


class BF16:
    """Marks an array to be stored as BF16 (rounded from float32, RNE)."""

    def __init__(self, a):
        self.a = np.asarray(a, dtype=np.float32)


def _encode(v):
    if isinstance(v, BF16):
        return "BF16", list(v.a.shape), f32_to_bf16_bits(v.a).tobytes()
    a = np.asarray(v)
    if a.dtype == np.float32:
        dt = "F32"
    elif a.dtype == np.float16:
        dt = "F16"
    elif a.dtype == np.int32:
        dt = "I32"
    elif a.dtype == np.int64:
        dt = "I64"
    elif a.dtype == np.uint8:
        dt = "U8"
    else:
        raise ValueError("st: unsupported dtype %s" % a.dtype)
    return dt, list(a.shape), np.ascontiguousarray(a, dtype=_NP[dt]).tobytes()


def dumps(tensors, metadata=None):
    """Serialize {name: ndarray | BF16} to safetensors bytes."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        dt, shape, raw = _encode(tensors[name])
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    h = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def save(path, tensors, metadata=None):
    data = dumps(tensors, metadata)
    with open(path, "wb") as f:
        f.write(data)
    return data


def load(path, raw_bf16=False):
    """Read a safetensors file -> {name: ndarray}. BF16 is widened to float32
    unless raw_bf16 (then uint16 bit patterns)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[base + a:base + b], dtype=_NP[info["dtype"]]).reshape(info["shape"])
        if info["dtype"] == "BF16" and not raw_bf16:
            arr = bf16_bits_to_f32(arr)
        out[name] = np.array(arr)
    return out


def dtypes(path):
    """{name: dtype string} of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}
