"""port_bugs.py — docs/port-bugs.md, the catalogue of bugs that third-party
MiniMax-M3 ports shipped, with the kit's verdict on each.

  /usr/bin/python3 tools/port_bugs.py --write docs/port-bugs.md
  /usr/bin/python3 tools/port_bugs.py --check docs/port-bugs.md   (make test)

The prose of each class (where it shipped, what users saw, whether end-to-end
accuracy hid it) is the CLASSES table below. The columns that describe the
kit are not written by hand: for every class the tool runs
`bin/m3-conform check --case CASE --dump DUMP --json` on its published mutant
(vectors/mutants/*), takes the first divergence the kit reports, and fails
when it is not the one the mutant declares; the shortest input at which the
bug shows comes from the mutant's mutant.json (port_bug.visible_from_tokens,
computed by tools/gen_vectors.py). --check fails when the committed file
differs from what this run writes.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gh(ref):
    """'owner/repo#N' -> markdown link (GitHub redirects issues and pulls)."""
    repo, n = ref.split("#")
    return "[%s](https://github.com/%s/issues/%s)" % (ref, repo, n)


# title, mutant directory (vectors/mutants/), public threads, symptom, hidden by
# end-to-end accuracy, shape note (for mutants without port_bug metadata)
CLASSES = [
    ("SwiGLU-OAI alpha / beta / limit not passed to the expert kernels: the experts run plain SiLU, "
     "the dense layers stay right", "port_experts_plain_silu",
     ["vllm-project/vllm#46845", "vllm-project/vllm#49473", "vllm-project/vllm#48929", "vllm-project/vllm#46816",
      "sgl-project/sglang#29182"],
     "the model loads and serves, but quality is broken: garbled text (`\\n\\n</` repeating, CJK noise), "
     "prompt-unrelated token noise",
     "no (the text is visibly wrong); the cause was found by a single-layer comparison with a pure-torch "
     "reference: per-token cosine 0.966, and 0.966^57 = 0.14 over the MoE layers", None),
    ("the shared expert's output lost when it is fused into the routed experts", "port_shared_lost",
     ["vllm-project/vllm#51632"],
     "the fused MoE output differs from the reference in 134 of 512 elements (max difference 2.52); the "
     "separate shared path is off under fusion, so nothing adds it back",
     "not reported end to end; found by comparing the MoE output with the reference. A different fusion "
     "path passed GSM8K and looped on tool calls (sglang#36576)", None),
    ("routed_scaling_factor dropped, applied before renormalisation (where it cancels), or applied twice",
     "port_scale_dropped",
     ["flashinfer-ai/flashinfer#3499", "sgl-project/sglang-jax#1282", "sgl-project/sglang#31449",
      "vllm-project/vllm-ascend#9692"],
     "the routed sum scaled by 1.0 instead of 2.0 (a hard-coded `mRouteScale = 1.0`, a scale inside "
     "`if renormalize:`, a fused op with 1.0)",
     "the threads report affected accuracy for models with a factor other than 1.0, without numbers", None),
    ("correction bias dropped on a fused routing path (M2)", "port_bias_dropped",
     ["NVIDIA/TensorRT-LLM#13294"],
     "the fused path chooses experts by the plain sigmoid scores while the routing method adds the bias",
     "found in review, before a symptom: the fused and the reference paths disagree silently", None),
    ("router top-k initialised at -1 although biased scores can be lower (M2 kernel)", "port_topk_init_minus1",
     ["vllm-project/vllm#31478"],
     "wrong experts for a token whose biased scores are all below -1 (the kernel assumes probabilities)",
     "found in review; invisible while every biased score stays above -1", None),
    ("QK norm over all heads at once (M2 style) instead of per head", "port_qk_norm_all_heads",
     ["sgl-project/sglang#20967"],
     "an M3 port built from M2 code normalises q (64 x 128 values) and k (4 x 128) as one vector each; M2's "
     "cross-head norm also broke under tensor parallelism (TP16: repeated outputs)",
     "not measured for M3 in the threads; the formula differs in every layer", None),
    ("no token-level causal mask inside the query's own selected block", "port_block_causal_only",
     ["tenstorrent/tt-metal#48700"],
     "selection is causal per block only, so the own block is attended in full, future tokens included",
     "per-layer PCC against the reference found it: K PCC at layer 52 0.7565 -> 0.9666 after the fix, "
     "minimum over 60 layers 0.73 -> 0.947", None),
    ("top-k buffer read with the wrong layout, so a group gets another group's selection", "port_topk_layout",
     ["vllm-project/vllm#48603", "vllm-project/vllm#49149"],
     "`topk_indices_buffer` allocated [T, H, K] and sliced [H, T, K]: illegal memory access on A100; in a "
     "backport, non-causal blocks, all-masked rows, NaN and NUL-byte output",
     "no where it crashes or prints NUL bytes; decode (T = 1) reads the same memory either way, so "
     "decode-only tests pass", None),
    ("MSA block size taken from the KV page size, so the top-16 are tokens, not blocks", "port_block_is_page",
     ["sgl-project/sglang-jax#1376"],
     "with the default `--page-size 1` the backend selects the top-16 tokens instead of the top-16 "
     "128-token blocks",
     "no error is raised; accuracy collapses", None),
    ("index-K cache not carried across prefix reuse, partial cache hits or disaggregated prefill",
     "port_index_cache_lost",
     ["ROCm/ATOM#1368", "jundot/omlx#1888"],
     "decode runs top-k against a zero or stale index cache; failures only on partial cache hits that stop "
     "mid-way (a 32k smoke test reproduced it)",
     "yes: masked for short prompts, where the selection covers every block anyway; GSM8K does not "
     "exercise it", None),
    ("cross-layer top-k reuse (`index_topk_freq` 4) left on", "port_topk_reuse",
     ["vllm-project/vllm#47269", "sgl-project/sglang#36527"],
     "the skip layers attend to the blocks another layer chose",
     "yes: GSM8K 0.9515 vs 0.9522 with and without it; sglang pins it to 1 because it changes which KV "
     "blocks the skip layers attend", None),
    ("a duplicated block counted twice in the softmax, or an unguarded -1 slot read", "port_sentinel_read",
     ["vllm-project/vllm#54597", "NVIDIA/TensorRT-LLM#18008"],
     "an unused (-1) top-k slot reads before the block-table row and can form an invalid KV pointer; "
     "TensorRT-LLM's FP32 golden backend deduplicates selected blocks",
     "not reported end to end: it reaches only queries with fewer visible blocks than top-k", None),
    ("vision: 2-axis RoPE, or RoPE over all 80 dims", "vis_rope_2d",
     ["jjang-ai/vmlx#214"],
     "the old code was a 2-axis (H, W) RoPE with the wrong axis_dim",
     "not stated in the thread", "any image (every image has 2 x 2 patches or more), from the first vision layer on"),
    ("vision: pixel channel order swapped before the Conv3d", "vis_pixel_order",
     ["Blaizzy/mlx-vlm#1429"],
     "pixel_values arrive in (C, T, ph, pw) order and were fed to a channels-last Conv3d without the "
     "reshape: a pixel scramble / channel shift",
     "not stated in the thread", "any image: every patch row is permuted"),
    ("Eagle3 aux states captured one layer off", "eagle3_tap_output",
     ["vllm-project/vllm#43671"],
     "position-0 acceptance about 10% instead of about 45%: speculation slower than none",
     "yes for accuracy (drafts change speed, never the text); only acceptance shows it",
     "any length; the kit's mutant takes each tap layer's output instead of its input"),
]


def run_check(conform, suite, mdir):
    """(mutant.json, kit's first divergence {tensor, layer, component, msg})."""
    d = os.path.join(suite, "mutants", mdir)
    with open(os.path.join(d, "mutant.json")) as f:
        mj = json.load(f)
    fd, tmp = tempfile.mkstemp(suffix=".jsonl")
    os.close(fd)
    try:
        cmd = [conform, "check", "--case", os.path.join(suite, mj["case"]),
               "--dump", os.path.join(d, mj.get("dump", "dump.safetensors")),
               "--profile", mj["profile"], "--json", tmp, "--quiet"]
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if p.returncode != 1:
            raise SystemExit("port-bugs: %s: m3-conform check exited %d (a mutant must fail): %s"
                             % (mdir, p.returncode, p.stderr.strip()))
        rec = None
        with open(tmp) as f:
            for line in f:
                r = json.loads(line)
                if r.get("type") == "case":
                    rec = r
    finally:
        os.unlink(tmp)
    if rec is None or not rec.get("first_divergence"):
        raise SystemExit("port-bugs: %s: the kit reported no first divergence" % mdir)
    got = rec["first_divergence"]
    want = mj["first_divergence"]
    if got["tensor"] != want["tensor"] or got["component"] != want["component"]:
        raise SystemExit("port-bugs: %s: the kit flags %s [%s] first, the mutant declares %s [%s]"
                         % (mdir, got["tensor"], got["component"], want["tensor"], want["component"]))
    return mj, got


def render(conform, suite):
    rows = []
    for i, (title, mdir, refs, symptom, hidden, shape) in enumerate(CLASSES, 1):
        mj, got = run_check(conform, suite, mdir)
        pb = mj.get("port_bug")
        if pb:
            n = pb["visible_from_tokens"]
            vis = "%d token%s of the case's input (chunks %s); real shape: %s" % (
                n, "" if n == 1 else "s", "+".join(str(c) for c in pb["chunks"]), pb["condition"])
        else:
            vis = shape
        rows.append((i, title, mdir, refs, symptom, hidden, mj, got, vis))
    out = ["# Bugs that shipped: what the kit flags first",
           "",
           "<!-- generated by tools/port_bugs.py from the kit's own verdicts; edit that file, then",
           "     `/usr/bin/python3 tools/port_bugs.py --write docs/port-bugs.md` (make test checks it) -->",
           "",
           "Third-party MiniMax-M3 ports (and M2 code that M3 ports reuse) shipped these bugs. Each class has a",
           "published mutant in `vectors/mutants/`: the dump a port with that bug writes for the named case,",
           "produced by the independent numpy implementation (`tools/m3np.py`, `PORT_BUGS`) running the",
           "case as a port would (its chunks in order, then its greedy continuation). `make test` runs",
           "`bin/m3-conform run vectors/manifest.json`, where each must fail at the tensor listed here.",
           "",
           "To see one yourself:",
           "",
           "    bin/m3-conform check --case vectors/model/tiny_fp32 \\",
           "        --dump vectors/mutants/port_index_cache_lost/dump.safetensors --profile bf16",
           "",
           "The *flagged first* column is the kit's first divergence on the mutant (`m3-conform check --json`),",
           "taken when this file was generated. *Visible from* is the shortest prefix of the case's input",
           "(its chunks cut there) at which the bug changes that tensor decisively (NMSE 1e-3 or more against",
           "both the fp32 golden and a faithful bf16 port, or a different selected set), computed by",
           "`tools/gen_vectors.py`; the real-shape condition names the same point at the release's shapes",
           "(MSA blocks of 128 tokens, top 16, 4 index heads, 60 layers). The toy cases use blocks of 4 and",
           "top 3, so selection stops covering every block after 12 tokens.",
           "",
           "| # | bug class | where it shipped | flagged first | case (mutant) | visible from |",
           "|---|---|---|---|---|---|"]
    for i, title, mdir, refs, symptom, hidden, mj, got, vis in rows:
        out.append("| %d | %s | %s | `%s` (%s) | `%s` (`mutants/%s`) | %s |" % (
            i, title, ", ".join(gh(r) for r in refs), got["tensor"], got["component"], mj["case"], mdir, vis))
    out += ["", "## The classes", ""]
    for i, title, mdir, refs, symptom, hidden, mj, got, vis in rows:
        out += ["### %d. %s" % (i, title), "",
                "- Where it shipped: %s." % ", ".join(gh(r) for r in refs),
                "- What users saw: %s." % symptom,
                "- Hidden by end-to-end accuracy: %s." % hidden,
                "- The kit's mutant (`vectors/mutants/%s`): %s" % (mdir, mj["description"].split(" Real shape: ")[0].rstrip(".") + "."),
                "- Flagged first: `%s` (%s) on `%s`: %s" % (got["tensor"], got["component"], mj["case"],
                                                            got.get("msg", "").rstrip(".") + "."),
                "- Visible from: %s." % vis]
        if mj.get("port_bug", {}).get("hidden_under"):
            out.append("- Invisible (the dump equals a faithful port's, bit for bit, selections as sets) under: %s."
                       % "; ".join(mj["port_bug"]["hidden_under"]))
        out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description="generate or check docs/port-bugs.md")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", metavar="FILE")
    g.add_argument("--check", metavar="FILE")
    ap.add_argument("--conform", default=os.path.join(ROOT, "bin", "m3-conform"))
    ap.add_argument("--suite", default=os.path.join(ROOT, "vectors"))
    a = ap.parse_args()
    text = render(a.conform, a.suite)
    if a.write:
        with open(a.write, "w") as f:
            f.write(text)
        print("port-bugs: wrote %s (%d classes)" % (a.write, len(CLASSES)))
        return 0
    try:
        with open(a.check) as f:
            old = f.read()
    except OSError as e:
        print("port-bugs: %s: %s" % (a.check, e.strerror))
        return 1
    if old != text:
        print("port-bugs: %s is not what the kit's verdicts give; run tools/port_bugs.py --write %s"
              % (a.check, a.check))
        return 1
    print("port-bugs: %s matches the kit's verdicts on %d mutants" % (a.check, len(CLASSES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
