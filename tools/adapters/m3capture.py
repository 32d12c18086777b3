#!/usr/bin/env python3
"""m3capture.py — capture an m3 activation dump from any torch port with hooks.

A mapping is a list of rules (module-name pattern, dump name, what to take):

    ("model.layers.{i}.input_layernorm", "layers.{i}.attn_norm", "out")

`{i}` matches a layer number (and fills `{i}` in the dump name); `*` matches
any run of characters inside one dotted part. What to take is "out" (the
output, or its first element when it is a tuple), "out[k]", "in" / "in[k]"
(the k-th positional input, or keyword "hidden_states"), several of these
joined by "|" (the first that exists), or a callable (module, args, kwargs,
output) -> array or None. Rows: a leading batch axis of size 1 is dropped, so
[1, T, H] and [T, H] (vLLM/SGLang token-major layouts) both give [T, H].

    import m3capture
    cap = m3capture.Capture(model, m3capture.HF_TRANSFORMERS)
    with cap:                     # hooks on, one prefill, hooks off
        model(input_ids)
    cap.write("dump.safetensors", unsupported=["block_indices"], producer="myport")

Fused kernels that hide a value (top-k ids inside a fused MoE, block indices
inside a sparse-attention kernel) are taken by wrapping the Python function
that returns them: cap.wrap(obj, "select_experts", handler) (see
docs/validating-a-port.md, "Fused-kernel ports"). Everything is converted to
numpy (float32 / int32) as it is captured, and the dump is written by
m3dump.py with numpy only. Mappings here:

  HF_TRANSFORMERS  transformers' minimax_m3_vl text model (tools/adapters/hf_dump.py
                   builds on it; run on the GPU machine by the project)
  VLLM             vLLM's MiniMax-M3 model tree (MiniMaxM3DecoderLayer:
                   input_layernorm / post_attention_layernorm called as
                   (hidden, residual) -> (normed, residual), self_attn,
                   block_sparse_moe.gate / mlp, model.norm): NOT RUN HERE
  SGLANG           SGLang's minimax_m3.py (MiniMaxM3DecoderLayer with self_attn,
                   mlp = MiniMaxM3MoE (gate, topk, experts) or MiniMaxM3MLP,
                   the residual carried by its layer boundaries): NOT RUN HERE

The two "not run here" mappings were written from the module names in those
projects' sources and have not been executed against them; check the names
with `m3capture.unmatched(model, MAPPING)` before relying on them.
"""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import m3dump  # noqa: E402

# ---- mappings ----------------------------------------------------------------------------
HF_TRANSFORMERS = [
    ("model.language_model.embed_tokens", "embeddings", "out"),
    ("model.language_model.layers.{i}", "layers.{i}.input", "in|in[0]"),
    ("model.language_model.layers.{i}", "layers.{i}.output", "out"),
    ("model.language_model.layers.{i}.input_layernorm", "layers.{i}.attn_norm", "out"),
    ("model.language_model.layers.{i}.self_attn", "layers.{i}.attn.output", "out[0]"),
    ("model.language_model.layers.{i}.post_attention_layernorm", "layers.{i}.post_attn", "in"),
    ("model.language_model.layers.{i}.post_attention_layernorm", "layers.{i}.ffn_norm", "out"),
    ("model.language_model.layers.{i}.mlp", "layers.{i}.mlp.output", "out"),
    ("model.language_model.norm", "final_norm", "out"),
]

# vLLM (not run here): the decoder layer gets (positions, hidden_states, residual)
# and returns (hidden_states, residual) unsummed; the norms fuse the add:
# input_layernorm(h, residual) -> (normed, h + residual), so its second output
# is the stream entering the layer (layer 0: its first input, no residual yet).
VLLM = [
    ("model.embed_tokens", "embeddings", "out"),
    ("model.layers.{i}.input_layernorm", "layers.{i}.attn_norm", "out[0]"),
    ("model.layers.{i}.input_layernorm", "layers.{i}.input", "out[1]|in[0]"),
    ("model.layers.{i}.self_attn", "layers.{i}.attn.output", "out"),
    ("model.layers.{i}.post_attention_layernorm", "layers.{i}.ffn_norm", "out[0]"),
    ("model.layers.{i}.post_attention_layernorm", "layers.{i}.post_attn", "out[1]"),
    ("model.layers.{i}.mlp", "layers.{i}.mlp.output", "out"),
    ("model.layers.{i}.block_sparse_moe", "layers.{i}.mlp.output", "out"),
    ("model.layers.{i}.block_sparse_moe.gate", "layers.{i}.moe.router_logits", "out[0]"),
    ("model.norm", "final_norm", "out[0]"),
    ("model.norm", "final_residual", "out[1]"),  # = layers.{L-1}.output; see finish()
]

# SGLang (not run here): same names under model.layers.{i}; MoE layers hold
# mlp = MiniMaxM3MoE with gate (router logits), topk (TopK: weights, ids) and
# experts; the norms run inside the layer boundaries, which call the modules,
# so their hooks fire; residual pairs as in vLLM.
SGLANG = [
    ("model.embed_tokens", "embeddings", "out"),
    ("model.layers.{i}.input_layernorm", "layers.{i}.attn_norm", "out[0]"),
    ("model.layers.{i}.input_layernorm", "layers.{i}.input", "out[1]|in[0]"),
    ("model.layers.{i}.self_attn", "layers.{i}.attn.output", "out"),
    ("model.layers.{i}.post_attention_layernorm", "layers.{i}.ffn_norm", "out[0]"),
    ("model.layers.{i}.post_attention_layernorm", "layers.{i}.post_attn", "out[1]"),
    ("model.layers.{i}.mlp", "layers.{i}.mlp.output", "out"),
    ("model.layers.{i}.mlp.gate", "layers.{i}.moe.router_logits", "out[0]"),
    ("model.layers.{i}.mlp.topk", "layers.{i}.moe.topk", "out"),  # a TopKOutput; see topk_from_output
    ("model.norm", "final_norm", "out[0]"),
    ("model.norm", "final_residual", "out[1]"),
]


# ---- matching ------------------------------------------------------------------------------
def _compile(pattern):
    out = ""
    for part in re.split(r"(\{i\}|\*)", pattern):
        if part == "{i}":
            out += r"(?P<i>\d+)"
        elif part == "*":
            out += r"[^.]*"
        else:
            out += re.escape(part)
    return re.compile(out + "$")


def match(names, rules):
    """[(module name, dump name, what)] for every rule that matches a module name."""
    comp = [(_compile(p), d, w) for p, d, w in rules]
    got = []
    for n in names:
        for rx, dump, what in comp:
            m = rx.match(n)
            if m:
                got.append((n, dump.replace("{i}", m.group("i")) if "i" in rx.groupindex else dump, what))
    return got


def unmatched(model_or_names, rules):
    """The patterns of rules that match no module (a renamed module, a wrong mapping)."""
    names = [n for n, _ in model_or_names.named_modules()] if hasattr(model_or_names, "named_modules") \
        else list(model_or_names)
    hit = {(d, w) for _, d, w in match(names, rules)}
    out = []
    for p, d, w in rules:
        rx = _compile(p)
        if not any(rx.match(n) for n in names):
            out.append(p)
        elif not any(dd.startswith(d.split("{i}")[0]) for dd, ww in hit if ww == w):
            out.append(p)
    return out


def _pick(what, args, kwargs, output):
    """The value a rule takes from one call, or None."""
    for alt in what.split("|"):
        m = re.fullmatch(r"(in|out)(?:\[(\d+)\])?", alt.strip())
        if not m:
            raise ValueError("m3capture: cannot read %r (want out, out[k], in, in[k])" % alt)
        k = int(m.group(2)) if m.group(2) else None
        if m.group(1) == "out":
            v = output
            if isinstance(v, (tuple, list)):
                v = v[k or 0] if len(v) > (k or 0) else None
            elif k:
                v = None
        else:
            seq = list(args)
            if k is None:
                v = seq[0] if seq else kwargs.get("hidden_states")
            else:
                v = seq[k] if len(seq) > k else None
        if v is not None:
            return v
    return None


def to_numpy(v):
    """float32 / int32 numpy of a tensor, a leading batch axis of 1 dropped."""
    if hasattr(v, "detach"):
        import torch
        v = v.detach()
        v = v.to(torch.int32 if not v.is_floating_point() else torch.float32).cpu().numpy()
    a = np.asarray(v)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    return a.astype(np.int32 if a.dtype.kind in "iub" else np.float32, copy=False)


def topk_from_output(out):
    """(weights, ids) of a top-k result object or tuple (SGLang's TopKOutput has
    topk_weights and topk_ids; vLLM's select_experts returns (weights, ids))."""
    if hasattr(out, "topk_ids"):
        return out.topk_weights, out.topk_ids
    return out[0], out[1]


class Capture:
    """Hooks for one prefill: rules (module pattern -> dump name) on model."""

    def __init__(self, model, rules, extra=()):
        self.model = model
        self.rules = list(rules) + list(extra)
        self.out = {}
        self.on = False
        self.handles = []
        self.wrapped = []
        mods = dict(model.named_modules())
        for name, dump, what in match(mods, self.rules):
            self._attach(mods[name], dump, what)

    def _attach(self, mod, dump, what):
        def fn(m, args, kwargs, output):
            if not self.on:
                return
            v = what(m, args, kwargs, output) if callable(what) else _pick(what, args, kwargs, output)
            if v is None or dump in self.out:  # the first call is the prefill
                return
            if dump.endswith(".moe.topk"):
                w, ids = topk_from_output(v)
                self.out[dump] = (to_numpy(w), to_numpy(ids))
            else:
                self.out[dump] = to_numpy(v)
        self.handles.append(mod.register_forward_hook(fn, with_kwargs=True))

    def wrap(self, owner, attr, handler):
        """Replace owner.attr (a function) by one that calls it and then
        handler(result, *args, **kwargs) while capturing; handler returns
        {dump name: array} to record. Undone by close()."""
        orig = getattr(owner, attr)

        def wrapper(*args, **kwargs):
            res = orig(*args, **kwargs)
            if self.on:
                for k, v in (handler(res, *args, **kwargs) or {}).items():
                    self.out.setdefault(k, to_numpy(v))
            return res
        setattr(owner, attr, wrapper)
        self.wrapped.append((owner, attr, orig))

    def __enter__(self):
        self.on = True
        return self

    def __exit__(self, *exc):
        self.on = False
        return False

    def close(self):
        for h in self.handles:
            h.remove()
        for owner, attr, orig in self.wrapped:
            setattr(owner, attr, orig)
        self.handles, self.wrapped = [], []

    def finish(self, num_layers=None, scores_from_logits=True):
        """Derived names: layers.{i}.output = layers.{i+1}.input when not
        captured, the last layer's output from the final norm's residual,
        moe.scores = sigmoid(router logits) (M3-MOE-ROUTER-1), moe.topk_index /
        moe.topk_weight sorted by expert id from a captured top-k result."""
        o = self.out
        L = num_layers or 1 + max([int(m.group(1)) for k in o for m in [re.match(r"layers\.(\d+)\.", k)] if m]
                                  or [-1])
        for i in range(L - 1):
            if "layers.%d.output" % i not in o and "layers.%d.input" % (i + 1) in o:
                o["layers.%d.output" % i] = o["layers.%d.input" % (i + 1)]
        if "final_residual" in o:
            o.setdefault("layers.%d.output" % (L - 1), o.pop("final_residual"))
        for k in [k for k in o if k.endswith(".moe.router_logits")]:
            pre = k[:-len("router_logits")]
            if scores_from_logits:
                o.setdefault(pre + "scores", (1.0 / (1.0 + np.exp(-o[k].astype(np.float64)))).astype(np.float32))
        for k in [k for k in o if k.endswith(".moe.topk")]:
            w, ids = o.pop(k)
            order = np.argsort(ids, axis=-1, kind="stable")
            o[k + "_index"] = np.take_along_axis(ids, order, -1).astype(np.int32)
            o[k + "_weight"] = np.take_along_axis(w, order, -1).astype(np.float32)
        return o

    def write(self, path, unsupported=(), rows=None, row_sets=None, producer="", mode="", metadata=None,
              num_layers=None):
        """finish(), then write the spec's names (extras such as router_logits are kept; the kit ignores them)."""
        self.finish(num_layers)
        t = dict(self.out)
        m3dump.write_dump(path, t, unsupported=unsupported, rows=rows, row_sets=row_sets, producer=producer,
                          mode=mode, metadata=metadata)
        return t
