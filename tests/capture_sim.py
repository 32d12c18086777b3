#!/usr/bin/env python3
"""capture_sim.py — tools/adapters/m3capture.py on a simulated module tree.

    capture_sim.py CASE_DIR GOLDEN.safetensors MAPPING OUT.safetensors

No torch here: a stand-in module class with named_modules() and forward
hooks replays one prefill the way the mapping's framework calls its modules
(VLLM / SGLANG: the norms take (hidden, residual) and return (normed,
hidden + residual); HF_TRANSFORMERS: [1, T, H] tensors, the decoder layer
takes the stream), returning the golden values of GOLDEN for each call. The
capture's rules, tuple picking, batch-axis dropping, derived names (layer
outputs from the next input, the last from the final norm's residual,
sigmoid scores from router logits) and the numpy writer then produce OUT,
which m3-conform judges. This checks the module's logic and the mappings'
call conventions as written down, not the real vLLM or SGLang.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "adapters"))
import numpy as np  # noqa: E402
import m3capture  # noqa: E402
import m3dump  # noqa: E402


class Handle:
    def __init__(self, lst, fn):
        self.lst, self.fn = lst, fn

    def remove(self):
        self.lst.remove(self.fn)


class Mod:
    """A module stand-in: calling it returns result(args) and runs the hooks."""

    def __init__(self, result=None):
        self.result = result
        self.hooks = []
        self.children = {}

    def register_forward_hook(self, fn, with_kwargs=False):
        assert with_kwargs
        self.hooks.append(fn)
        return Handle(self.hooks, fn)

    def __call__(self, *args, **kwargs):
        out = self.result(*args, **kwargs)
        for h in list(self.hooks):
            h(self, args, kwargs, out)
        return out

    def named_modules(self, prefix=""):
        yield prefix, self
        for k, c in self.children.items():
            yield from c.named_modules(prefix + ("." if prefix else "") + k)

    def add(self, path, mod):
        node = self
        parts = path.split(".")
        for p in parts[:-1]:
            node = node.children.setdefault(p, Mod())
        old = node.children.get(parts[-1])
        if old is not None:  # a module that already holds children: give it the behaviour
            old.result = mod.result
            return old
        node.children[parts[-1]] = mod
        return mod


def main(case_dir, golden, mapping, out):
    G, _ = m3dump.read_dump(golden)
    with open(os.path.join(case_dir, "config.json")) as f:
        L = json.load(f)["text_config"]["num_hidden_layers"]
    T = G["layers.0.input"].shape[0]
    root = Mod()
    hf = mapping == "HF_TRANSFORMERS"
    base = "model.language_model" if hf else "model"
    b = (lambda a: a[None]) if hf else (lambda a: a)  # HF carries a batch axis of 1
    emb = root.add(base + ".embed_tokens", Mod(lambda ids: b(G["embeddings"])))
    layers = []
    for i in range(L):
        p = "%s.layers.%d." % (base, i)
        pre = "layers.%d." % i
        moe = pre + "moe.scores" in G
        ffn = "mlp" if (hf or mapping == "SGLANG" or not moe) else "block_sparse_moe"
        lay = {"in_norm": root.add(p + "input_layernorm", Mod(
                   (lambda pre: lambda h, r=None: b(G[pre + "attn_norm"]) if r is None or hf
                    else (G[pre + "attn_norm"], G[pre + "input"]))(pre))),
               "attn": root.add(p + "self_attn", Mod(
                   (lambda pre: lambda pos, h: (b(G[pre + "attn.output"]), None) if hf
                    else G[pre + "attn.output"])(pre))),
               "post_norm": root.add(p + "post_attention_layernorm", Mod(
                   (lambda pre: lambda h, r=None: b(G[pre + "ffn_norm"]) if hf
                    else (G[pre + "ffn_norm"], G[pre + "post_attn"]))(pre))),
               "ffn": root.add(p + ffn, Mod((lambda pre: lambda h: b(G[pre + "mlp.output"]))(pre)))}
        if moe:
            s = G[pre + "moe.scores"].astype(np.float64)
            logits = np.log(s / (1 - s)).astype(np.float32)
            lay["gate"] = root.add(p + ffn + ".gate", Mod((lambda lg: lambda h: (lg, None))(logits)))
            if mapping == "SGLANG":  # its TopK module returns an object with topk_weights / topk_ids
                class TopKOutput:
                    def __init__(self, w, ids):
                        self.topk_weights, self.topk_ids = w, ids
                r = np.random.RandomState(i)  # the rows' experts in a shuffled order: the capture sorts them
                perm = np.argsort(r.rand(*G[pre + "moe.topk_index"].shape), axis=-1)
                ids = np.take_along_axis(G[pre + "moe.topk_index"], perm, -1)
                w = np.take_along_axis(G[pre + "moe.topk_weight"], perm, -1)
                lay["topk"] = root.add(p + ffn + ".topk", Mod((lambda w, ids: lambda h, lg: TopKOutput(w, ids))(w, ids)))
        if hf:
            lay["layer"] = root.add(p[:-1], Mod((lambda pre: lambda h, **kw: b(G[pre + "output"]))(pre)))
        layers.append(lay)
    norm = root.add(base + ".norm", Mod(lambda h, r=None: b(G["final_norm"]) if hf
                                        else (G["final_norm"], G["layers.%d.output" % (L - 1)])))
    rules = getattr(m3capture, mapping)
    missing = m3capture.unmatched(root, rules)
    cap = m3capture.Capture(root, rules)
    with cap:  # one prefill, in the framework's calling convention
        h = emb(np.arange(T))
        res = None
        for i, lay in enumerate(layers):
            pre = "layers.%d." % i
            if hf:
                # the decoder layer module wraps its sub-modules: pre-hook values come from its input
                lay["in_norm"](b(G[pre + "input"]))
                lay["attn"](None, None)
                lay["post_norm"](b(G[pre + "post_attn"]))
                if "gate" in lay:
                    lay["gate"](None)
                lay["ffn"](None)
                lay["layer"](b(G[pre + "input"]))
                continue
            x = lay["in_norm"](h) if res is None else lay["in_norm"](h, res)
            res = G[pre + "input"]
            a = lay["attn"](None, x if not isinstance(x, tuple) else x[0])
            n, res = lay["post_norm"](a, res)
            if "gate" in lay:
                lg, _ = lay["gate"](n)
                if "topk" in lay:
                    lay["topk"](n, lg)
            h = lay["ffn"](n)
        if not hf:
            norm(h, res)
        else:
            norm(None)
    cap.close()
    cap.out["logits"] = G["logits"]
    caps = ["block_indices", "eagle3", "greedy"] + ([] if mapping == "SGLANG" else ["router"])
    t = cap.write(out, unsupported=caps, producer="capture_sim " + mapping,
                  num_layers=L)
    print("capture_sim %s: %d tensors, unmatched rules: %s" % (mapping, len(t), missing or "none"))
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
