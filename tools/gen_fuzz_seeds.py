#!/usr/bin/python3
"""gen_fuzz_seeds.py - write the small seed corpora under fuzz/corpus/<target>/.

Valid (and a few deliberately broken) inputs for every fuzz target: tiny
safetensors files and shard indexes, both config.json dialects (copied from
tests/data and models/tiny), PNGs of every colour type / bit depth (plus one
Adam7-interlaced) written here with zlib, JPEGs (grey, RGB 4:4:4 / 4:2:0,
progressive, CMYK) made by fuzz/gen_jpeg_seeds.c (libjpeg),
case.json / manifest.json / tolerances.json texts, token lists, regex
patterns and conversation files (the vectors/chat cases and two more). Stdlib only. Usage: /usr/bin/python3 tools/gen_fuzz_seeds.py [ROOT]
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors ----------------------------------------------------------
DT = {"F32": ("<f", 4), "BF16": (None, 2), "F16": ("<e", 2), "I32": ("<i", 4),
      "I64": ("<q", 8), "U8": ("<B", 1), "BOOL": ("<B", 1), "F64": ("<d", 8),
      "I16": ("<h", 2), "I8": ("<b", 1)}


def st_file(tensors, meta=None):
    """tensors: list of (name, dtype, shape, list of values)."""
    hdr, blobs, off = {}, [], 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, vals in tensors:
        fmt, size = DT[dt]
        if dt == "BF16":
            raw = b"".join(struct.pack("<f", v)[2:] for v in vals)
        else:
            raw = b"".join(struct.pack(fmt, v) for v in vals)
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def gen_safetensors():
    seeds = {
        "f32_2x3": st_file([("w", "F32", [2, 3], [1, 2, 3, 4, 5, 6])]),
        "mixed_meta": st_file([("a.weight", "BF16", [4], [1, -2, 0.5, 3]),
                               ("b.bias", "F16", [2], [1, 2]),
                               ("ids", "I32", [3], [0, 7, 2**31 - 1]),
                               ("pos", "I64", [2], [0, -1])],
                              meta={"format": "pt", "note": "seed"}),
        "scalar_and_empty": st_file([("s", "F32", [], [3.5]), ("e", "F32", [0, 4], [])]),
        "all_small_dtypes": st_file([("u", "U8", [2], [1, 255]), ("b", "BOOL", [2], [0, 1]),
                                     ("h", "I16", [1], [-3]), ("c", "I8", [1], [-1]),
                                     ("d", "F64", [1], [2.0])]),
        "header_only": struct.pack("<Q", 2) + b"{}",
    }
    full = seeds["f32_2x3"]
    seeds["truncated_data"] = full[:-5]
    seeds["len_past_eof"] = struct.pack("<Q", 1000) + full[8:]
    for k, v in seeds.items():
        put("fuzz_safetensors", k + ".safetensors", v)
    dumps = {
        "acts": st_file([("embeddings", "F32", [2, 2], [1, 2, 3, 4]),
                         ("layers.0.attn.block_indices", "I32", [1, 2, 2], [0, -1, 0, 1]),
                         ("layers.0.moe.topk_index", "I64", [2, 1], [3, 1]),
                         ("logits", "BF16", [2, 3], [0, 1, 2, 3, 4, 5])],
                        meta={"format": "m3-dump", "port": "seed"}),
        "ints_out_of_range": st_file([("greedy_tokens", "I64", [2], [1, 2**40])]),
    }
    for k, v in dumps.items():
        put("fuzz_dump", k + ".safetensors", v)
    put("fuzz_dump", "f32_2x3.safetensors", seeds["f32_2x3"])
    # m3-conform plot: block selections and routing of two layers, and bad ids
    T, G, K, E, k = 5, 2, 2, 4, 2
    sel = [b if b <= t // 2 else -1 for g in range(G) for t in range(T) for b in (t // 2, g)]
    plots = {
        "two_layers": st_file([("layers.1.attn.block_indices", "I32", [G, T, K], sel),
                               ("layers.3.attn.block_indices", "I64", [G, T, K], sel),
                               ("layers.1.moe.topk_index", "I32", [T, k], [0, 1, 2, 3, 0, 2, 1, 3, 0, 3]),
                               ("layers.1.moe.scores", "F32", [T, E], [0.5] * (T * E)),
                               ("layers.3.moe.topk_index", "I64", [T, k], [3, 2, 1, 0, 3, 1, 2, 0, 3, 3])]),
        "bad_ids": st_file([("layers.0.attn.block_indices", "I32", [1, 2, 2], [0, 7, -2, 1]),
                            ("layers.0.moe.topk_index", "I32", [2, 1], [-1, 5])]),
    }
    for k2, v in plots.items():
        put("fuzz_plot", k2 + ".safetensors", v)
    put("fuzz_plot", "acts.safetensors", dumps["acts"])


def gen_index():
    good = {"metadata": {"total_size": 12}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}}
    put("fuzz_index", "two_shards.json", json.dumps(good, indent=1))
    put("fuzz_index", "one_shard.json", json.dumps({"weight_map": {"x": "a.safetensors"}}))
    put("fuzz_index", "missing_tensor.json",
        json.dumps({"weight_map": {"x": "a.safetensors", "z": "a.safetensors"}}))
    put("fuzz_index", "wrong_shard.json", json.dumps({"weight_map": {"x": "b.safetensors", "y": "b.safetensors"}}))
    put("fuzz_index", "path_escape.json", json.dumps({"weight_map": {"x": "../a.safetensors"}}))


# ---- config ---------------------------------------------------------------
def gen_config():
    for src, name in (("tests/data/m3-config.json", "legacy.json"),
                      ("tests/data/m3-config-hfv5.json", "hfv5.json"),
                      ("models/tiny/config.json", "tiny.json")):
        p = os.path.join(ROOT, src)
        if os.path.exists(p):
            with open(p, "rb") as f:
                put("fuzz_config", name, f.read())
    put("fuzz_config", "empty_object.json", "{}")


# ---- PNG ------------------------------------------------------------------
def chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def pack_row(samples, depth):
    if depth >= 8:
        fmt = ">B" if depth == 8 else ">H"
        return b"".join(struct.pack(fmt, s) for s in samples)
    out, acc, nbits = bytearray(), 0, 0
    for s in samples:
        acc = (acc << depth) | s
        nbits += depth
        if nbits == 8:
            out.append(acc)
            acc, nbits = 0, 0
    if nbits:
        out.append(acc << (8 - nbits))
    return bytes(out)


CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png(w, h, ctype, depth, interlace=False, palette=None, trns=None):
    ch = CHANNELS[ctype]
    maxv = (1 << depth) - 1

    def px(x, y):
        return [((x * 7 + y * 13 + c * 5) % (maxv + 1)) if ctype != 3 else ((x + y) % len(palette))
                for c in range(ch)]

    raw = bytearray()
    if not interlace:
        for y in range(h):
            raw.append(0)  # filter type None
            raw += pack_row([s for x in range(w) for s in px(x, y)], depth)
    else:
        for x0, y0, dx, dy in ADAM7:
            xs = list(range(x0, w, dx))
            if not xs:
                continue
            for y in range(y0, h, dy):
                raw.append(0)
                raw += pack_row([s for x in xs for s in px(x, y)], depth)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 1 if interlace else 0))
    if palette:
        out += chunk(b"PLTE", b"".join(bytes(c) for c in palette))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    out += chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b"")
    return out


def gen_png():
    pal = [(0, 0, 0), (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)]
    put("fuzz_png", "gray1.png", png(9, 3, 0, 1))
    put("fuzz_png", "gray8.png", png(5, 4, 0, 8))
    put("fuzz_png", "gray16.png", png(3, 3, 0, 16))
    put("fuzz_png", "rgb8.png", png(4, 3, 2, 8))
    put("fuzz_png", "rgb16.png", png(2, 2, 2, 16))
    put("fuzz_png", "pal4_trns.png", png(5, 2, 3, 4, palette=pal, trns=b"\x00\x80"))
    put("fuzz_png", "pal8.png", png(3, 3, 3, 8, palette=pal))
    put("fuzz_png", "graya8.png", png(3, 2, 4, 8))
    put("fuzz_png", "rgba8.png", png(3, 3, 6, 8))
    put("fuzz_png", "rgba16.png", png(2, 2, 6, 16))
    put("fuzz_png", "rgb8_adam7.png", png(9, 9, 2, 8, interlace=True))
    put("fuzz_png", "truncated.png", png(4, 3, 2, 8)[:40])


def gen_jpeg():
    """JPEGs from fuzz/gen_jpeg_seeds.c (libjpeg), compiled here with cc."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        print("gen_fuzz_seeds: no C compiler; JPEG seeds not regenerated")
        return
    d = os.path.join(CORPUS, "fuzz_jpeg")
    os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory() as t:
        exe = os.path.join(t, "gen_jpeg_seeds")
        subprocess.run([cc, "-O1", "-o", exe, os.path.join(ROOT, "fuzz", "gen_jpeg_seeds.c"), "-ljpeg"], check=True)
        subprocess.run([exe, d], check=True)
    with open(os.path.join(d, "rgb420.jpg"), "rb") as f:
        data = f.read()
    put("fuzz_jpeg", "truncated.jpg", data[: len(data) // 2])


# ---- conformance texts ----------------------------------------------------
def gen_evidence():
    """fuzz_evidence: tie evidence files (M3-VEC-11) for fuzz/fuzz_evidence.c's golden
    (block_indices [1, 2, 2], 4 experts, 3 greedy tokens over 8)."""
    inf = float("-inf")
    meta = {"m3.evidence_version": "1", "m3.golden_sha256": "0" * 64}
    good = [("layers.0.attn.block_scores", "F32", [1, 2, 2], [0.5, inf, 0.25, 0.75]),
            ("layers.0.moe.bias", "F32", [4], [0.0, 0.1, -0.1, 0.0]),
            ("greedy_logits", "F32", [3, 8], [0.125 * i for i in range(24)])]
    put("fuzz_evidence", "good.safetensors", st_file(good, meta))
    put("fuzz_evidence", "other_golden.safetensors", st_file(good, dict(meta, **{"m3.golden_sha256": "1" * 64})))
    put("fuzz_evidence", "no_version.safetensors", st_file(good, {"m3.golden_sha256": "0" * 64}))
    put("fuzz_evidence", "missing_bias.safetensors", st_file([good[0], good[2]], meta))
    put("fuzz_evidence", "missing_greedy.safetensors", st_file(good[:2], meta))
    put("fuzz_evidence", "bad_shape.safetensors",
        st_file([good[0], ("layers.0.moe.bias", "F32", [5], [0.0] * 5), good[2]], meta))
    put("fuzz_evidence", "unknown_name.safetensors", st_file(good + [("layers.0.extra", "F32", [1], [0.0])], meta))
    put("fuzz_evidence", "bf16.safetensors",
        st_file([("layers.0.attn.block_scores", "BF16", [1, 2, 2], [0.5, 0.5, 0.25, 0.75])] + good[1:], meta))


def gen_conformance():
    case = {"id": "rmsnorm-fp32-001", "description": "seed", "clauses": ["M3-NORM-1"],
            "component": "rmsnorm", "mode": "fp32", "profile": "fp32", "seed": 1,
            "generator": "tools/gen_vectors.py", "generator_version": "1", "params": {"eps": 1e-6},
            "files": {"inputs.safetensors": "0" * 64, "expected.safetensors": "f" * 64}}
    put("fuzz_case", "rmsnorm.json", json.dumps(case, indent=1))
    model = dict(case, id="model-bf16-001", component="model", mode="bf16",
                 params={"max_new_tokens": 4, "chunks": [2, 1, 3], "theta": "0x1.8p+3"})
    put("fuzz_case", "model.json", json.dumps(model, indent=1))
    put("fuzz_case", "bad_mode.json", json.dumps(dict(case, mode="fp8")))
    put("fuzz_manifest", "manifest.json", json.dumps({"suite": "m3", "version": "1", "cases": ["c1"]}))
    put("fuzz_manifest", "mutants.json", json.dumps({"suite": "m3", "version": 2, "cases": ["c1"], "mutants": ["c1"]}))
    put("fuzz_manifest", "escape.json", json.dumps({"suite": "m3", "cases": ["../c1", "/etc"]}))
    p = os.path.join(ROOT, "spec", "tolerances.json")
    if os.path.exists(p):
        with open(p, "rb") as f:
            put("fuzz_tolerances", "spec.json", f.read())
    tol = {"version": 1, "profiles": {"fp32": {"tie_tolerance": 1e-4, "rules": [
        {"match": "model/logits", "nmse": 1e-9, "max_abs": 1e-3, "cos_min": 0.999999, "why": "x"},
        {"match": "*/*", "nmse": 1e-10, "max_abs": 1e-4, "why": "y"}]}}}
    put("fuzz_tolerances", "small.json", json.dumps(tol))


def gen_port():
    """Row sets (M3-DUMP-10), selectors and ranges (M3-DUMP-11/12), slice results."""
    f = [0.5] * 8
    put("fuzz_rows", "subset.safetensors", st_file([
        ("rows", "I32", [2], [3, 7]), ("layers.0.output", "F32", [2, 4], f),
        ("logits", "F32", [1, 4], f[:4]), ("logits.rows", "I32", [1], [19]),
        ("layers.0.input", "F32", [20, 1], [0.0] * 20)]))
    put("fuzz_rows", "dup.safetensors", st_file([("rows", "I32", [3], [1, 1, 2]),
                                                 ("final_norm", "F32", [3, 1], [1.0, 2.0, 3.0])]))
    put("fuzz_rows", "range.safetensors", st_file([("rows", "I64", [2], [0, 25]),
                                                   ("final_norm", "F32", [2, 1], [1.0, 2.0])]))
    put("fuzz_rows", "blocks.safetensors", st_file([
        ("rows", "I32", [2], [0, 9]), ("layers.1.attn.block_indices", "I32", [2, 2, 2], [0, -1, 1, 2, 0, -1, 1, 2])]))
    put("fuzz_rows", "orphan.safetensors", st_file([("x.rows", "I32", [1], [0])]))
    for i, s in enumerate(["*blocks~1,2048:,-16:\n0-59\n64", "*7~2,-3:,5\n3\n1", ":\n59-59\n0",
                           "-301,1:-1\n4-3\n1025", "*0~1\n-1\nx", "*99999999999~1,--5\n0-60\n2"]):
        put("fuzz_select", "s%d.txt" % i, s)
    rec = {"tensor": "layers.0.output", "key": "model/layers.0.output", "component": "residual", "layer": 0,
           "order": 21, "kind": 0, "result": "Fail", "msg": "NMSE 0.1 > 0.0002", "not_judged": "",
           "rule": "model/*",
           "metrics": {"nmse": 0.1, "max_abs": 2.0, "max_rel": "inf", "cos": 0.9, "n_nan": 0, "n_inf_bad": 0,
                       "n_ref_nan": 0, "first_bad": 3,
                       "worst": [{"index": 3, "out": 1.5, "ref": -0.5}] + [{"index": -1, "out": 0, "ref": 0}] * 3},
           "set": {"counts": [0, 0, 0, 0, -1, 0, 0, -1, -1], "why": "", "why_masked": ""},
           "ties": {"rows": [0, -1, 0, -1, -1, -1], "excl_tie": "", "reach_tie": ""}}
    head = dict(rec, tensor="logits", key="model/logits", component="lm-head", layer=-1, order=1000001,
                result="Pass", msg="", rule="model/logits")
    sl = {"format": "m3-conform-slice-1", "kit": "1.1", "protocol": "1", "case": "ab" * 32,
          "case_id": "checkpoint.x", "profile": "bf16", "mode": "fp32",
          "layers": {"from": 0, "to": 0, "of": 1}, "head": True, "rows_total": 20, "rows_judged": 20,
          "seconds": 0.5, "records": [rec, head]}
    put("fuzz_slice", "whole.json", json.dumps(sl, indent=1))
    put("fuzz_slice", "part.json", json.dumps(dict(sl, layers={"from": 1, "to": 2, "of": 4}, head=False,
                                                   records=[dict(rec, layer=1)])))
    put("fuzz_slice", "kit.json", json.dumps(dict(sl, kit="0.9")))
    put("fuzz_slice", "rule.json", json.dumps(dict(sl, records=[dict(rec, rule="model/other")])))


def gen_text():
    for i, s in enumerate(["1,2,3", "1 2 3", " 0, 2147483647 ,5\n", "7", "1,,2", "-1", "2147483648", ""]):
        put("fuzz_tokens", "t%d.txt" % i, s)
    synth_args = [
        "--layers\n2\n--seed\n1\n--out\n/tmp/x",
        "--layers\n2\n--dense-layers\n1\n--vocab\n16384\n--seed\n18446744073709551615\n--out\nd",
        "--shape\ntiny\n--layers\n3\n--vision-layers\n2\n--prompt-len\n40\n--shard-size\n300K\n--seed\n7\n--out\nd",
        "--layers\n60\n--seed\n18446744073709551616\n--out\nd",
        "--layers\n2\n--dense-layers\n3\n--seed\n1\n--out\nd\n--dry-run",
        "--shard-size\n4095\n--layers\n1\n--seed\n0\n--out\nd",
        "--help",
    ]
    for i, s in enumerate(synth_args):
        put("fuzz_synth_args", "a%d.txt" % i, s)
    pats = [
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""" + "\nHello world's 123456 ... \n\n  done",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t)?|\p{N}{1,3}""" + "\nÉcole naïve 東京 12345 İstanbul",
        r"""a{2,5}?b|(x|y)*z|[^a-c\d]+$""" + "\naaab xyz q9",
        r"""\x{1F600}|\u00e9|.""" + "\n\U0001F600é!",
        r"""(?=ab)a(?!c)""" + "\nabac",
    ]
    for i, s in enumerate(pats):
        put("fuzz_regex", "p%d.txt" % i, s)


def gen_tokenizer():
    src = os.path.join(ROOT, "vectors", "tokenizer", "minimax_300", "tokenizer.json")
    if os.path.exists(src):
        with open(src, "rb") as f:
            raw = f.read()
        put("fuzz_tokenizer", "minimax_300.json", raw)
        # the same structure (pre-tokenizer, decoder, model options, special
        # tokens) over a 102-entry vocabulary with 6 merges: ~5x cheaper per fuzz input
        tok = json.loads(raw)
        keep = {k: v for k, v in tok["model"]["vocab"].items() if v < 96}
        merges = [["H", "e"], ["l", "l"], ["He", "ll"], ["o", "r"], ["w", "or"], ["i", "t"]]
        for a, b in merges:
            keep[a + b] = len(keep)
        tok["model"]["vocab"] = keep
        tok["model"]["merges"] = merges
        added = tok["added_tokens"][:4]
        for i, a in enumerate(added):
            a["id"] = len(keep) + i
        tok["added_tokens"] = added
        put("fuzz_tokenizer", "small.json", json.dumps(tok, ensure_ascii=False, indent=1))
    put("fuzz_prompt", "ascii.txt", "Hello, world!")
    put("fuzz_prompt", "utf8.txt", "caf\u00e9 \u6771\u4eac \U0001F600")
    put("fuzz_prompt", "invalid.txt", b"bad \xff\xfe \xc3 \xe6\x9d \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end")
    put("fuzz_prompt", "special.txt", "<|im_start|>user\nhi<|im_end|>")


def gen_conversation():
    cases = os.path.join(ROOT, "vectors", "chat", "cases")
    if os.path.isdir(cases):
        for n in sorted(os.listdir(cases)):
            with open(os.path.join(cases, n), "rb") as f:
                put("fuzz_conversation", n, f.read())
    put("fuzz_conversation", "min.json", '{"messages":[{"role":"user","content":"hi"}]}')
    put("fuzz_conversation", "numbers.json", '[1, -0, 1.5e-7, 1e400, "\\ud83d\\ude00", {"a": null}]')


if __name__ == "__main__":
    gen_safetensors()
    gen_index()
    gen_config()
    gen_png()
    gen_jpeg()
    gen_conformance()
    gen_evidence()
    gen_port()
    gen_text()
    gen_tokenizer()
    gen_conversation()
    print("gen_fuzz_seeds: wrote", CORPUS)
