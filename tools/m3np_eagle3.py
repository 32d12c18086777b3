"""m3np_eagle3.py — independent numpy implementation of the Eagle3 drafter and
of greedy speculative verification (spec/model.md §15: M3-EAGLE-TAP-1,
M3-EAGLE-DRAFT-1..4, M3-EAGLE-VERIFY-1). Written from the spec, not from
ref/eagle3.c. fp32 throughout (the drafter always computes in fp32); matvecs
in the fixed 8-lane order of tools/m3np.py; transcendentals in double.

Mutant flags (deliberately wrong variants, for the conformance kit):
  "tap_output"      taps are the OUTPUT of layers (2, L/2, L-3) instead of the
                    residual entering them (the off-by-one ports make)
  "prenorm_feature" the recurrent feature is the pre-final-norm hidden h2
                    instead of o = norm(h2)
"""
import json
import math
import os

import numpy as np

import m3np
from m3np import F32, Num

VERSION = "1"
MUTANTS = {
    "tap_output": "Eagle3 taps are the outputs of layers (2, L/2, L-3) instead of their inputs",
    "prenorm_feature": "the drafter's recurrent feature is the pre-norm hidden instead of norm(h2)",
}
FP32 = Num("fp32")


def default_taps(L):
    """M3-EAGLE-TAP-1: (min(2, L-1), L/2, max(L-3, 0)) ascending."""
    return sorted([min(2, L - 1), L // 2, max(L - 3, 0)])


def taps_of(dump, taps, flags=()):
    """aux [T, 3H] from a tools/m3np.py dump: residual entering each tap layer."""
    key = "layers.%d.output" if "tap_output" in flags else "layers.%d.input"
    return np.concatenate([dump[key % t] for t in taps], axis=1).astype(F32)


def norm(x, w, eps, gemma):
    """RMSNorm, fp32: x * rsqrt(mean(x^2) + eps) * (w or 1 + w)."""
    x = np.asarray(x, F32)
    ms = m3np.sum8(x * x) / F32(x.shape[-1])
    r = F32(1) / np.sqrt(ms + F32(eps))
    return ((x * r[..., None]) * ((F32(1) + w) if gemma else w)).astype(F32)


class Drafter:
    """Drafter config + weights (names of M3-EAGLE-DRAFT-1), with the target's
    embed_tokens / lm_head / final norm when the drafter does not ship them."""

    def __init__(self, conf, W, tcfg, tW):
        self.c = conf
        self.H = conf["hidden_size"]
        self.nh = conf["num_attention_heads"]
        self.nkv = conf.get("num_key_value_heads", self.nh)
        self.hd = conf.get("head_dim", self.H // self.nh)
        self.eps = conf.get("rms_norm_eps", 1e-6)
        self.theta = conf.get("rope_theta", 10000.0)
        self.rd = conf.get("rotary_dim", int(round(self.hd * conf.get("partial_rotary_factor", 1.0))))
        self.gemma = bool(conf.get("use_gemma_norm", False))
        self.nbr = bool(conf.get("norm_before_residual", False))
        self.taps = sorted(conf.get("eagle_aux_hidden_state_layer_ids", default_taps(tcfg.L)))
        g = lambda n: np.asarray(W[n], F32) if n in W else None  # noqa: E731
        self.fc = g("fc.weight")
        self.fc_norm = [g("fc_norm.%d.weight" % i) for i in range(3)]
        p = "layers.0."
        self.in_norm = g(p + "input_layernorm.weight")
        self.hid_norm = g(p + "hidden_norm.weight")
        self.post_norm = g(p + "post_attention_layernorm.weight")
        self.q, self.k, self.v, self.o = (g(p + "self_attn.%s_proj.weight" % n) for n in "qkvo")
        self.gate, self.up, self.down = (g(p + "mlp.%s_proj.weight" % n) for n in ("gate", "up", "down"))
        P = m3np.P
        self.embed = g("embed_tokens.weight")
        if self.embed is None:
            self.embed = tW[P + "embed_tokens.weight"]
        self.lm_head = g("lm_head.weight")
        if self.lm_head is None:
            self.lm_head = tW["language_model.lm_head.weight"]
        self.fnorm = g("norm.weight")
        # a borrowed final norm is the target's own: Gemma (1 + w), target eps
        self.fnorm_gemma, self.fnorm_eps = self.gemma, self.eps
        if self.fnorm is None:
            self.fnorm, self.fnorm_gemma, self.fnorm_eps = tW[P + "norm.weight"], True, tcfg.eps


def load(d, tcfg, tW):
    import st
    with open(os.path.join(d, "config.json")) as f:
        conf = json.load(f)
    W = {k: v.astype(F32) for k, v in st.load(os.path.join(d, "model.safetensors")).items()}
    return Drafter(conf, W, tcfg, tW)


def combine(D, aux):
    """g [T, H] = fc(cat(fc_norm_i(a_i))) (M3-EAGLE-DRAFT-2)."""
    H = D.H
    parts = [norm(aux[:, i * H:(i + 1) * H], D.fc_norm[i], D.eps, D.gemma)
             if D.fc_norm[i] is not None else aux[:, i * H:(i + 1) * H] for i in range(3)]
    return m3np.linear(np.concatenate(parts, axis=1), D.fc)


class State:
    def __init__(self, D):
        self.n = 0
        self.k = np.zeros((0, D.nkv, D.hd), F32)
        self.v = np.zeros((0, D.nkv, D.hd), F32)

    def truncate(self, n):
        self.n = min(self.n, n)
        self.k, self.v = self.k[:self.n], self.v[:self.n]


def step(D, s, token, f, flags=()):
    """One draft step at position s.n (M3-EAGLE-DRAFT-3): returns (logits [V],
    next feature [H])."""
    H = D.H
    f = np.asarray(f, F32)[None, :]
    e = D.embed[[int(token)]]
    z = np.concatenate([norm(e, D.in_norm, D.eps, D.gemma), norm(f, D.hid_norm, D.eps, D.gemma)], axis=1)
    q = m3np.linear(z, D.q).reshape(1, D.nh, D.hd)
    k = m3np.linear(z, D.k).reshape(1, D.nkv, D.hd)
    v = m3np.linear(z, D.v).reshape(1, D.nkv, D.hd)
    pos = np.array([s.n])
    if D.rd > 0:
        cos, sin = m3np.rope_tables(pos, D.rd, D.theta, FP32)
        q = m3np.rope_apply(q, cos, sin, D.rd, FP32)
        k = m3np.rope_apply(k, cos, sin, D.rd, FP32)
    s.k = np.concatenate([s.k, k], axis=0)
    s.v = np.concatenate([s.v, v], axis=0)
    s.n += 1
    a = m3np.attention(q, s.k, s.v, pos, FP32).reshape(1, D.nh * D.hd)
    res = z[:, H:] if D.nbr else f
    h1 = res + m3np.linear(a, D.o)
    x = norm(h1, D.post_norm, D.eps, D.gemma)
    gt = m3np.linear(x, D.gate)
    up = m3np.linear(x, D.up)
    act = (gt.astype(np.float64) / (1.0 + np.exp(-gt.astype(np.float64)))).astype(F32) * up
    h2 = h1 + m3np.linear(act.astype(F32), D.down)
    o = norm(h2, D.fnorm, D.fnorm_eps, D.fnorm_gemma)
    logits = m3np.linear(o, D.lm_head)[0]
    feat = h2[0] if "prenorm_feature" in flags else o[0]
    return logits, feat.astype(F32)


def seed_and_draft(D, tcfg, tW, prompt, last, chain_tokens, flags=()):
    """Target prefill of prompt (taps), drafter seeded at positions 0..T-1 with
    tokens prompt[1:] + [last] and the target features, then chain steps with
    chain_tokens (each fed with the previous step's feature). Returns dict:
    eagle3.aux [T,3H], eagle3.g [T,H], eagle3.logits [T+n,V], eagle3.features [T+n,H]."""
    dump = {}
    m3np.forward(tcfg, tW, np.asarray(prompt), FP32, dump=dump)
    aux = taps_of(dump, D.taps, flags)
    g = combine(D, aux)
    s = State(D)
    toks = list(prompt[1:]) + [last]
    L, Fs = [], []
    for i, t in enumerate(toks):
        lg, f = step(D, s, t, g[i], flags)
        L.append(lg)
        Fs.append(f)
    for t in chain_tokens:
        lg, f = step(D, s, t, Fs[-1], flags)
        L.append(lg)
        Fs.append(f)
    return {"eagle3.aux": aux, "eagle3.g": g, "eagle3.logits": np.stack(L).astype(F32),
            "eagle3.features": np.stack(Fs).astype(F32)}


def verify(tcfg, tW, taps, prompt, verify_tokens):
    """Greedy verification (M3-EAGLE-VERIFY-1) after a prefill of prompt:
    target over [last, d_1..d_K] at positions T..T+K; j = accepted drafts; the
    target token at the first mismatch (or after d_K) is the bonus; the target
    cache is rolled back to T + j + 1 positions and the bonus token is run at
    position T + j + 1. Returns dict of the verify rows' logits and taps,
    accepted, bonus and the next step's logits after rollback."""
    st = m3np.State(tcfg)
    m3np.forward(tcfg, tW, np.asarray(prompt), FP32, st)
    T = len(prompt)
    d = {}
    lg = m3np.forward(tcfg, tW, np.asarray(verify_tokens), FP32, st, dump=d)
    K = len(verify_tokens) - 1
    j = 0
    while j < K and int(np.argmax(lg[j])) == int(verify_tokens[j + 1]):
        j += 1
    bonus = int(np.argmax(lg[j]))
    # rollback: keep positions 0 .. T + j (prompt, last, d_1..d_j)
    n = T + j + 1
    st.n = n
    st.k = [None if a is None else a[:n] for a in st.k]
    st.v = [None if a is None else a[:n] for a in st.v]
    st.ik = [None if a is None else a[:n] for a in st.ik]
    nxt = m3np.forward(tcfg, tW, np.array([bonus]), FP32, st)
    return {"verify.logits": lg.astype(F32), "verify.aux": taps_of(d, taps),
            "accepted": np.array([j], np.int32), "bonus": np.array([bonus], np.int32),
            "next.logits": nxt.astype(F32)}


def plain_next_logits(tcfg, tW, tokens):
    """Logits of the last row of a plain forward over tokens (rollback cross-check)."""
    return m3np.forward(tcfg, tW, np.asarray(tokens), FP32)[-1:]


if __name__ == "__main__":  # compare against a torch_check.safetensors (train_demo_drafter.py)
    import sys
    import st
    tdir, ddir, chk = sys.argv[1], sys.argv[2], sys.argv[3]
    tcfg, tW = m3np.load_model(tdir)
    D = load(ddir, tcfg, tW)
    c = st.load(chk)
    toks = c["tokens"].astype(np.int64)
    dump = {}
    m3np.forward(tcfg, tW, toks, FP32, dump=dump)
    aux = taps_of(dump, D.taps)
    g = combine(D, aux[:-1])
    s = State(D)
    Ls, Fs = [], []
    for i in range(len(toks) - 1):
        lg, f = step(D, s, toks[i + 1], g[i])
        Ls.append(lg)
        Fs.append(f)
    Ls = np.stack(Ls)
    rel = lambda a, b: float(np.abs(a - b).max() / max(1e-30, np.abs(b).max()))  # noqa: E731
    print("aux    max rel diff numpy vs torch: %.3e" % rel(aux, c["aux"]))
    print("g      max rel diff: %.3e" % rel(g, c["g"]))
    print("feat   max rel diff: %.3e" % rel(np.stack(Fs), c["feature"]))
    print("logits max rel diff: %.3e; argmax agree %d/%d" %
          (rel(Ls, c["logits"]), int((Ls.argmax(1) == c["logits"].argmax(1)).sum()), len(Ls)))
