"""m3np.py — independent numpy implementation of the MiniMax-M3 text model.

Written from spec notes and the team numerics contract (not from ref/*.c).
Two numeric modes (M3-NUM-MODE-1, M3-NUM-BF16-2):
  "fp32": every op in float32, nothing rounded (golden);
  "bf16": values rounded to bf16 (round to nearest even) at the contract's points.
All reductions use one fixed order (8 interleaved fp32 partial sums over
c = l (mod 8), ascending c, combined ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7))), so
results do not depend on BLAS, thread count or how rows are batched:
prefill, chunked prefill and decode agree bit for bit.
Transcendentals are evaluated in double (math/np float64) and rounded to fp32.

Mutants (deliberately broken variants for the conformance kit) are selected
with Num(mode, flags={...}); see MUTANTS.
"""
import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import math  # noqa: E402

import numpy as np  # noqa: E402

F32 = np.float32
VERSION = "1"

MUTANTS = {
    "llama_norm": "RMSNorm scales by w instead of (1 + w)",
    "rope_interleaved": "RoPE rotates interleaved pairs (2i, 2i+1) instead of (j, j + rd/2)",
    "rope_full": "RoPE rotates the whole head (rotary_dim = head_dim)",
    "softmax_routing": "router scores are softmax(logits) instead of sigmoid(logits)",
    "bias_in_weights": "expert weights use the biased scores (sigmoid + correction bias)",
    "no_local_block": "the local (own) MSA block is not forced into the selection",
    "shared_x2": "shared expert output multiplied by 2.0 (routed_scaling_factor)",
    "gqa_modulo": "query head j uses KV head j % num_kv_heads instead of j // (nh / nkv)",
    "no_up_plus1": "SwiGLU-OAI without the +1 (beta) on up",
    "no_clamp": "SwiGLU-OAI without the clamps on gate and up",
}

# Bugs that third-party ports shipped (docs/port-bugs.md), one mechanism each.
# Kept apart from MUTANTS: the tiny case's input is chosen so that every
# MUTANTS entry is discriminated on it; these are checked where they are used.
PORT_BUGS = {
    "experts_plain_silu": "routed experts run SwiGLU with alpha 1 and beta 0 (the SwiGLU-OAI parameters are not "
                          "passed to the expert kernels; the limit is); dense MLPs and the shared expert stay right",
    "shared_lost": "the shared expert's output is lost (fused into the routed experts, its ids dropped as invalid)",
    "scale_dropped": "routed_scaling_factor not applied (a fused routing op hard-codes 1.0)",
    "bias_dropped": "experts chosen by the sigmoid scores without the correction bias (a fused routing path drops it)",
    "topk_init_minus1": "router top-k starts each pick at (expert 0, value -1): where fewer than k biased scores "
                        "exceed -1, expert 0 is taken (again) with its unbiased score",
    "qk_norm_all_heads": "QK norm over all heads of the projection at once (M2 style) instead of per head",
    "block_causal_only": "MSA attention causal only per block: a query sees the later tokens of its own block",
    "topk_layout": "the MSA top-k buffer written token-major [T, G, K] and read head-major [G, T, K] by the "
                   "attention: a (group, row) takes another one's selection (the dumped selection is right)",
    "block_is_page": "MSA block size taken from a KV page size of 1: the top-k picks tokens, not blocks",
    "index_cache_lost": "the index-K cache of the tokens before a cache boundary (reused prefix, partial cache hit, "
                        "disaggregated prefill) is not carried: it reads as zeros; the KV cache is carried",
    "topk_reuse": "cross-layer top-k reuse (index_topk_freq 4) left on: only every 4th sparse layer selects, the "
                  "others reuse the last selection",
    "sentinel_read": "-1 top-k slots not guarded: each is read as block 0 and counted in the softmax (a block named "
                     "twice counts twice)",
}


# ---------------------------------------------------------------- numerics

def bf16_round(x):
    """Round float32 values to the bf16 grid (RNE), returned as float32."""
    x = np.ascontiguousarray(x, dtype=F32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(F32)
    nan = np.isnan(x)
    if nan.any():
        r = r.copy()
        r[nan] = x[nan]
    return r.reshape(x.shape)


class Num:
    """Numeric mode plus mutant flags."""

    def __init__(self, mode="fp32", flags=()):
        assert mode in ("fp32", "bf16")
        self.mode = mode
        self.flags = frozenset(flags)
        for f in self.flags:
            assert f in MUTANTS or f in PORT_BUGS, f

    def r(self, x):
        """Round per mode (M3-NUM-BF16-2)."""
        return bf16_round(x) if self.mode == "bf16" else np.asarray(x, dtype=F32)

    def has(self, f):
        return f in self.flags


def _combine8(p):
    return ((p[..., 0] + p[..., 1]) + (p[..., 2] + p[..., 3])) + \
           ((p[..., 4] + p[..., 5]) + (p[..., 6] + p[..., 7]))


def _pad8(a):
    C = a.shape[-1]
    pad = (-C) % 8
    if pad:
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (pad,), F32)], axis=-1)
    return a.reshape(a.shape[:-1] + (a.shape[-1] // 8, 8))


def sum8(a):
    """Sum over the last axis in the fixed 8-lane order."""
    a = _pad8(np.asarray(a, dtype=F32))
    p = a[..., 0, :].copy()
    for j in range(1, a.shape[-2]):
        p += a[..., j, :]
    return _combine8(p)


def dot8(a, b):
    """sum_c a[..., c] * b[..., c] (broadcasting) in the fixed 8-lane order."""
    a = _pad8(np.asarray(a, dtype=F32))
    b = _pad8(np.asarray(b, dtype=F32))
    p = a[..., 0, :] * b[..., 0, :]
    for j in range(1, max(a.shape[-2], b.shape[-2])):
        p = p + a[..., j, :] * b[..., j, :]
    return _combine8(p)


def linear(x, w):
    """y[t, n] = sum_c x[t, c] * w[n, c] (fp32, fixed order; no rounding)."""
    x = np.asarray(x, F32)
    w = np.asarray(w, F32)
    T = x.shape[0]
    N = w.shape[0]
    out = np.empty((T, N), F32)
    step = max(1, (1 << 22) // max(1, N * 8))
    for t0 in range(0, T, step):
        out[t0:t0 + step] = dot8(x[t0:t0 + step, None, :], w[None, :, :])
    return out


def exp32(x):
    """fp32(exp(double(x))) (overflow to +inf is intended)."""
    with np.errstate(over="ignore"):
        return np.exp(np.asarray(x, F32).astype(np.float64)).astype(F32)


def sigmoid32(x):
    """fp32 sigmoid: 1 / (1 + exp(-x)) with exp evaluated in double."""
    x = np.asarray(x, F32)
    return (F32(1) / (F32(1) + exp32(-x))).astype(F32)


# ---------------------------------------------------------------- components

def rmsnorm(x, w, eps, num):
    """Gemma RMSNorm over the last axis: x * rsqrt(mean(x^2) + eps) * (1 + w). [M3-NORM]"""
    x = np.asarray(x, F32)
    w = np.asarray(w, F32)
    n = x.shape[-1]
    ms = sum8(x * x) / F32(n)
    r = F32(1) / np.sqrt(ms + F32(eps))
    scale = w if num.has("llama_norm") else (F32(1) + w)
    return num.r((x * r[..., None]) * scale)


def rope_tables(positions, rotary_dim, theta, num):
    """cos, sin [T, rotary_dim/2] (rounded in bf16 mode). [M3-ROPE]"""
    h = rotary_dim // 2
    inv = np.array([F32(1.0 / (float(theta) ** ((2 * i) / rotary_dim))) for i in range(h)], F32)
    ang = np.asarray(positions).astype(F32)[:, None] * inv[None, :]
    flat = ang.astype(np.float64).ravel().tolist()
    cos = np.array([math.cos(a) for a in flat], np.float64).astype(F32).reshape(ang.shape)
    sin = np.array([math.sin(a) for a in flat], np.float64).astype(F32).reshape(ang.shape)
    return num.r(cos), num.r(sin)


def rope_apply(x, cos, sin, rotary_dim, num):
    """Rotate-half RoPE on the first rotary_dim dims of x [T, nh, hd]. [M3-ROPE]"""
    x = np.asarray(x, F32)
    h = rotary_dim // 2
    if num.has("rope_interleaved"):
        i1 = np.arange(0, rotary_dim, 2)
        i2 = i1 + 1
    else:
        i1 = np.arange(h)
        i2 = i1 + h
    x1 = x[..., i1]
    x2 = x[..., i2]
    c = cos[:, None, :]
    s = sin[:, None, :]
    y = x.copy()
    if num.mode == "bf16":
        y[..., i1] = num.r(num.r(x1 * c) - num.r(x2 * s))
        y[..., i2] = num.r(num.r(x2 * c) + num.r(x1 * s))
    else:
        y[..., i1] = x1 * c - x2 * s
        y[..., i2] = x2 * c + x1 * s
    return y


def head_groups(nh, nkv, num):
    if num.has("gqa_modulo"):
        return np.arange(nh) % nkv
    return np.arange(nh) // (nh // nkv)


def attention(q, k, v, positions, num, key_mask_fn=None, token_causal=True):
    """Softmax attention. q [T, nh, hd]; k, v [Tk, nkv, hd] (key slot = absolute
    position); key k visible to query t iff k <= positions[t] (and, if given,
    key_mask_fn(t0, t1) -> bool [G, t1-t0, Tk] for query group g). Output
    [T, nh, hd], rounded in bf16 mode. [M3-ATTN-GQA, M3-ATTN-SCORE, M3-MSA-ATTN]
    Port-bug mechanisms only: token_causal=False drops the per-token causal
    mask (every cached key the block mask allows is visible); an integer
    key_mask_fn gives key multiplicities (a key counted n times in the softmax)."""
    q = np.asarray(q, F32)
    k = np.asarray(k, F32)
    v = np.asarray(v, F32)
    T, nh, hd = q.shape
    Tk, nkv, _ = k.shape
    grp = head_groups(nh, nkv, num)
    scale = F32(1.0 / math.sqrt(hd))
    kh = k[:, grp, :].transpose(1, 0, 2)          # [nh, Tk, hd]
    vT = v[:, grp, :].transpose(1, 2, 0)          # [nh, hd, Tk]
    kidx = np.arange(Tk)
    out = np.empty((T, nh, hd), F32)
    step = max(1, (1 << 21) // max(1, nh * Tk))
    for t0 in range(0, T, step):
        t1 = min(T, t0 + step)
        pos = np.asarray(positions[t0:t1])
        kmax = int(pos.max()) + 1 if token_causal else Tk   # keys beyond are invisible to all rows
        s = dot8(q[t0:t1, :, None, :], kh[None, :, :kmax, :]) * scale   # [Tc, nh, kmax]
        if token_causal:
            vis = kidx[None, :kmax] <= pos[:, None]                    # [Tc, kmax]
        else:
            vis = np.ones((t1 - t0, kmax), bool)
        vis = np.broadcast_to(vis[:, None, :], s.shape)
        cnt = None
        if key_mask_fn is not None:
            gm = key_mask_fn(t0, t1)[:, :, :kmax]                      # [G, Tc, kmax]
            if gm.dtype != bool:
                cnt = gm[grp].transpose(1, 0, 2).astype(F32)
                gm = gm > 0
            vis = vis & gm[grp].transpose(1, 0, 2)
        s = np.where(vis, s, F32(-np.inf))
        m = s.max(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore"):    # a fully masked row (port bugs only) gives NaN
            e = np.where(vis, exp32(s - m), F32(0))
            if cnt is not None:
                e = e * cnt
            p = e / sum8(e)[..., None]
        p = num.r(p)
        out[t0:t1] = dot8(p[:, :, None, :], vT[None, :, :, :kmax])
    return num.r(out)


def msa_block_scores(iq, ik, positions, block_size):
    """Raw block scores [G, T, NB]: max over visible keys of iq . ik (fp32,
    unscaled), -inf where no key is visible. [M3-MSA-SCORE, M3-MSA-BLOCK]"""
    iq = np.asarray(iq, F32)
    ik = np.asarray(ik, F32)
    T, G, d = iq.shape
    Tk = ik.shape[0]
    B = block_size
    NB = -(-Tk // B)
    out = np.full((G, T, NB), -np.inf, F32)
    kidx = np.arange(Tk)
    step = max(1, (1 << 21) // max(1, G * Tk))
    positions = np.asarray(positions)
    for t0 in range(0, T, step):
        t1 = min(T, t0 + step)
        pos = positions[t0:t1]
        kmax = int(pos.max()) + 1
        nbc = -(-kmax // B)
        s = dot8(iq[t0:t1, :, None, :], ik[None, None, :kmax, :])        # [Tc, G, kmax]
        s = np.where(kidx[None, None, :kmax] <= pos[:, None, None], s, F32(-np.inf))
        pad = nbc * B - kmax
        if pad:
            s = np.concatenate([s, np.full(s.shape[:2] + (pad,), -np.inf, F32)], axis=-1)
        bs = s.reshape(s.shape[0], G, nbc, B).max(axis=-1)               # [Tc, G, nbc]
        out[:, t0:t1, :nbc] = bs.transpose(1, 0, 2)
    return out


def msa_select_from_scores(bscores, positions, block_size, topk, local_blocks, init_blocks, num):
    """Golden-order selection [G, T, topk] int32 from raw block scores. [M3-MSA-SELECT]"""
    G, T, NB = bscores.shape
    if num.has("no_local_block"):
        local_blocks = 0
    qb = (np.asarray(positions) // block_size)[None, :, None]
    b = np.arange(NB)[None, None, :]
    forced = ((b < init_blocks) | ((b > qb - local_blocks) & (b <= qb))) & (b <= qb)
    forced = np.broadcast_to(forced, bscores.shape)
    valid = forced | (bscores > F32(-np.inf))
    key = np.where(forced, np.inf, bscores.astype(np.float64))
    key = np.where(valid, key, -np.inf)
    ids = np.broadcast_to(b, bscores.shape)
    order = np.lexsort((ids, -key), axis=-1)
    order = order[..., :topk]
    ok = np.take_along_axis(valid, order, axis=-1)
    sel = np.where(ok, order, -1).astype(np.int32)
    if sel.shape[-1] < topk:
        sel = np.concatenate([sel, np.full((G, T, topk - sel.shape[-1]), -1, np.int32)], axis=-1)
    return sel


def msa_select(iq, ik, positions, block_size, topk, local_blocks, init_blocks, num):
    bs = msa_block_scores(iq, ik, positions, block_size)
    return msa_select_from_scores(bs, positions, block_size, topk, local_blocks, init_blocks, num), bs


def block_mask_fn(sel, block_size, Tk, sentinel_read=False):
    """key_mask_fn for attention() from block_indices [G, T, K]. sentinel_read
    (port bug): -1 entries read as block 0, keys counted once per entry."""
    G, T, K = sel.shape
    NB = -(-Tk // block_size)
    blk = np.arange(Tk) // block_size

    def fn(t0, t1):
        s = sel[:, t0:t1, :]
        if sentinel_read:
            c = np.zeros((G, t1 - t0, NB), np.int32)
            gi, ti, _ = np.indices(s.shape)
            np.add.at(c, (gi, ti, np.where(s >= 0, s, 0)), 1)
            return c[:, :, blk]
        m = np.zeros((G, t1 - t0, NB + 1), bool)
        gi, ti, _ = np.indices(s.shape)
        m[gi, ti, np.where(s >= 0, s, NB)] = True
        return m[:, :, blk]
    return fn


def msa_attention(q, k, v, sel, positions, block_size, num):
    return attention(q, k, v, positions, num,
                     block_mask_fn(sel, block_size, k.shape[0], num.has("sentinel_read")),
                     token_causal=not num.has("block_causal_only"))


def swiglu(gate, up, alpha, limit, beta, num):
    """SwiGLU-OAI: (clamp(up) + beta) * g * sigmoid(alpha * g), g = min(gate, limit). [M3-MLP-SWIGLU]"""
    gate = np.asarray(gate, F32)
    up = np.asarray(up, F32)
    if num.has("no_clamp"):
        g, u = gate, up
    else:
        g = np.minimum(gate, F32(limit))
        u = np.clip(up, F32(-limit), F32(limit))
    if num.has("no_up_plus1"):
        beta = 0.0
    out = ((u + F32(beta)) * g) * sigmoid32(F32(alpha) * g)
    return num.r(out)


def mlp(x, wg, wu, wd, alpha, limit, beta, num):
    """Gated MLP: down(swiglu(gate(x), up(x))). [M3-MLP-DENSE, M3-MOE-EXPERT]"""
    g = num.r(linear(x, wg))
    u = num.r(linear(x, wu))
    return num.r(linear(swiglu(g, u, alpha, limit, beta, num), wd))


def router(x, w, bias, topk, num):
    """Sigmoid router with correction bias for choice only. Returns
    (topk_index [T,k] ascending int32, topk_weight [T,k], scores [T,E]). [M3-MOE-ROUTER]"""
    logits = linear(x, w)
    if num.has("softmax_routing"):
        m = logits.max(axis=-1, keepdims=True)
        e = exp32(logits - m)
        s = e / sum8(e)[..., None]
    else:
        s = sigmoid32(logits)
    c = s if num.has("bias_dropped") else s + np.asarray(bias, F32)[None, :]
    E = s.shape[1]
    if num.has("topk_init_minus1"):
        idx = _topk_from_minus1(c, topk)
    else:
        ids = np.broadcast_to(np.arange(E), s.shape)
        order = np.lexsort((ids, -c.astype(np.float64)), axis=-1)[:, :topk]
        idx = np.sort(order, axis=-1).astype(np.int32)
    src = c if num.has("bias_in_weights") else s
    chosen = np.take_along_axis(src, idx, axis=-1)
    tot = chosen[:, 0].copy()
    for j in range(1, topk):
        tot = tot + chosen[:, j]
    w_ = chosen / tot[:, None]
    return idx, w_.astype(F32), s.astype(F32)


def _topk_from_minus1(c, topk):
    """Port bug topk_init_minus1: k argmax passes, each starting from (expert 0,
    value -1) and taking an expert only when its biased score is above the
    current best; the chosen score is then cleared to -inf."""
    c = np.array(c, np.float64)
    T, E = c.shape
    idx = np.zeros((T, topk), np.int32)
    for t in range(T):
        for j in range(topk):
            best, val = 0, -1.0
            for e in range(E):
                if c[t, e] > val:
                    best, val = e, c[t, e]
            idx[t, j] = best
            c[t, best] = -np.inf
    return np.sort(idx, axis=-1)


def moe(x, rw, rb, w1, w3, w2, sg, su, sd, topk, scale, alpha, limit, beta, num):
    """MoE block: scale * sum_k w_k E_k(x) (ascending expert id) + shared(x). [M3-MOE-*]"""
    x = np.asarray(x, F32)
    idx, wts, scores = router(x, rw, rb, topk, num)
    T, H = x.shape
    acc = np.zeros((T, H), F32)
    ea, eb = (1.0, 0.0) if num.has("experts_plain_silu") else (alpha, beta)
    for e in range(w1.shape[0]):
        rows, slot = np.nonzero(idx == e)
        if rows.size == 0:
            continue
        y = mlp(x[rows], w1[e], w3[e], w2[e], ea, limit, eb, num)
        if num.has("topk_init_minus1"):     # an expert may be chosen twice: one add per slot
            for j in np.unique(slot):
                r = slot == j
                acc[rows[r]] = acc[rows[r]] + num.r(wts[rows[r], j][:, None] * y[r])
            continue
        acc[rows] = acc[rows] + num.r(wts[rows, slot][:, None] * y)
    routed = num.r(acc)
    if not num.has("scale_dropped"):
        routed = num.r(F32(scale) * routed)
    sh = mlp(x, sg, su, sd, alpha, limit, beta, num)
    if num.has("shared_x2"):
        sh = sh * F32(2)
    if num.has("shared_lost"):
        sh = np.zeros_like(sh)
    return num.r(routed + sh), idx, wts, scores


# ---------------------------------------------------------------- model

P = "language_model.model."


class Config:
    """Text config from a config.json dict (released dialect, or flat)."""

    def __init__(self, d):
        t = d.get("text_config", d)
        self.raw = d
        self.H = t["hidden_size"]
        self.I = t["intermediate_size"]
        self.I_dense = t.get("dense_intermediate_size", self.I)
        self.I_shared = t.get("shared_intermediate_size", self.I)
        self.L = t["num_hidden_layers"]
        self.nh = t["num_attention_heads"]
        self.nkv = t["num_key_value_heads"]
        self.hd = t["head_dim"]
        self.V = t["vocab_size"]
        self.eps = t.get("rms_norm_eps", 1e-6)
        self.theta = t.get("rope_theta", 5e6)
        self.rd = t.get("rotary_dim", int(self.hd * t.get("partial_rotary_factor", 1.0)))
        self.E = t["num_local_experts"]
        self.topk = t["num_experts_per_tok"]
        self.n_shared = t.get("n_shared_experts", 1)
        self.scale = t.get("routed_scaling_factor", 1.0)
        self.alpha = t.get("swiglu_alpha", 1.702)
        self.limit = t.get("swiglu_limit", 7.0)
        self.beta = t.get("swiglu_beta", 1.0)
        self.moe = [int(v) for v in t["moe_layer_freq"]]
        s = t["sparse_attention_config"]
        self.sparse = [int(v) for v in s["sparse_attention_freq"]] if s.get("use_sparse_attention") \
            else [0] * self.L
        self.idx_dim = s["sparse_index_dim"]
        self.idx_heads = s["sparse_num_index_heads"]
        self.idx_topk = s["sparse_topk_blocks"]
        self.idx_block = s["sparse_block_size"]
        self.idx_init = s.get("sparse_init_block", 0)
        self.idx_local = s.get("sparse_local_block", 1)
        self.bos = t.get("bos_token_id", 200034)
        self.eos = t.get("eos_token_id", 200020)

    def taps(self):
        L = self.L
        return sorted([min(2, L - 1), L // 2, max(L - 3, 0)])


class State:
    """Per-layer caches (rounded values in bf16 mode) and the current length."""

    def __init__(self, cfg):
        self.n = 0
        self.k = [None] * cfg.L
        self.v = [None] * cfg.L
        self.ik = [None] * cfg.L
        self.ik_lost = [False] * cfg.L     # port bug index_cache_lost: prefix index-K dropped once


def _cat(a, b):
    return b if a is None else np.concatenate([a, b], axis=0)


def forward(cfg, W, ids, num, state=None, dump=None, want_scores=False, embeds=None):
    """Run tokens ids at positions state.n.. ; returns logits [T, V]. dump (dict)
    receives the activation names of the team contract (M3-DUMP). embeds [T, H]
    (optional) replaces the embedding lookup (multimodal rows scattered in)."""
    if state is None:
        state = State(cfg)
    ids = np.asarray(ids, np.int64)
    T = ids.shape[0]
    pos = np.arange(state.n, state.n + T)
    d = dump if dump is not None else {}
    rd = cfg.hd if num.has("rope_full") else cfg.rd
    cos, sin = rope_tables(pos, rd, cfg.theta, num)
    ird = cfg.idx_dim if num.has("rope_full") else cfg.rd
    icos, isin = (cos, sin) if ird == rd else rope_tables(pos, ird, cfg.theta, num)
    h = num.r(W[P + "embed_tokens.weight"][ids] if embeds is None else embeds)
    d["embeddings"] = h
    taps = cfg.taps()
    n_sparse, last_sel = 0, None
    for i in range(cfg.L):
        lp = P + "layers.%d." % i
        d["layers.%d.input" % i] = h
        a = rmsnorm(h, W[lp + "input_layernorm.weight"], cfg.eps, num)
        d["layers.%d.attn_norm" % i] = a
        q = num.r(linear(a, W[lp + "self_attn.q_proj.weight"])).reshape(T, cfg.nh, cfg.hd)
        k = num.r(linear(a, W[lp + "self_attn.k_proj.weight"])).reshape(T, cfg.nkv, cfg.hd)
        v = num.r(linear(a, W[lp + "self_attn.v_proj.weight"])).reshape(T, cfg.nkv, cfg.hd)
        if num.has("qk_norm_all_heads"):
            q = rmsnorm(q.reshape(T, -1), np.tile(W[lp + "self_attn.q_norm.weight"], cfg.nh),
                        cfg.eps, num).reshape(q.shape)
            k = rmsnorm(k.reshape(T, -1), np.tile(W[lp + "self_attn.k_norm.weight"], cfg.nkv),
                        cfg.eps, num).reshape(k.shape)
        else:
            q = rmsnorm(q, W[lp + "self_attn.q_norm.weight"], cfg.eps, num)
            k = rmsnorm(k, W[lp + "self_attn.k_norm.weight"], cfg.eps, num)
        q = rope_apply(q, cos, sin, rd, num)
        k = rope_apply(k, cos, sin, rd, num)
        state.k[i] = _cat(state.k[i], k)
        state.v[i] = _cat(state.v[i], v)
        if cfg.sparse[i]:
            iq = num.r(linear(a, W[lp + "self_attn.index_q_proj.weight"])).reshape(T, cfg.idx_heads, cfg.idx_dim)
            ik = num.r(linear(a, W[lp + "self_attn.index_k_proj.weight"])).reshape(T, 1, cfg.idx_dim)
            iq = rmsnorm(iq, W[lp + "self_attn.index_q_norm.weight"], cfg.eps, num)
            ik = rmsnorm(ik, W[lp + "self_attn.index_k_norm.weight"], cfg.eps, num)
            iq = rope_apply(iq, icos, isin, ird, num)
            ik = rope_apply(ik, icos, isin, ird, num)[:, 0, :]
            state.ik[i] = _cat(state.ik[i], ik)
            if num.has("index_cache_lost") and state.n > 0 and not state.ik_lost[i]:
                state.ik[i][:state.n] = 0
                state.ik_lost[i] = True
            blk = 1 if num.has("block_is_page") else cfg.idx_block
            if num.has("topk_reuse") and n_sparse % 4 != 0:
                sel = last_sel
            else:
                sel, bsc = msa_select(iq, state.ik[i], pos, blk, cfg.idx_topk,
                                      cfg.idx_local, cfg.idx_init, num)
                if want_scores:
                    d["layers.%d.attn.block_scores" % i] = bsc
            last_sel = sel
            n_sparse += 1
            d["layers.%d.attn.block_indices" % i] = sel
            if num.has("topk_layout"):      # written [T, G, K], read as [G, T, K]
                sel = np.ascontiguousarray(sel.transpose(1, 0, 2)).reshape(sel.shape)
            o = msa_attention(q, state.k[i], state.v[i], sel, pos, blk, num)
        else:
            o = attention(q, state.k[i], state.v[i], pos, num)
        o = num.r(linear(o.reshape(T, cfg.nh * cfg.hd), W[lp + "self_attn.o_proj.weight"]))
        d["layers.%d.attn.output" % i] = o
        h = num.r(h + o)
        d["layers.%d.post_attn" % i] = h
        f = rmsnorm(h, W[lp + "post_attention_layernorm.weight"], cfg.eps, num)
        d["layers.%d.ffn_norm" % i] = f
        if cfg.moe[i]:
            mp = lp + "block_sparse_moe."
            if "_w1" not in W.get(mp + "_stack", {}):
                W[mp + "_stack"] = {
                    "_w1": np.stack([W[mp + "experts.%d.w1.weight" % e] for e in range(cfg.E)]),
                    "_w3": np.stack([W[mp + "experts.%d.w3.weight" % e] for e in range(cfg.E)]),
                    "_w2": np.stack([W[mp + "experts.%d.w2.weight" % e] for e in range(cfg.E)])}
            st_ = W[mp + "_stack"]
            m, idx, wts, scores = moe(
                f, W[mp + "gate.weight"], W[mp + "e_score_correction_bias"],
                st_["_w1"], st_["_w3"], st_["_w2"],
                W[mp + "shared_experts.gate_proj.weight"], W[mp + "shared_experts.up_proj.weight"],
                W[mp + "shared_experts.down_proj.weight"],
                cfg.topk, cfg.scale, cfg.alpha, cfg.limit, cfg.beta, num)
            d["layers.%d.moe.topk_index" % i] = idx
            d["layers.%d.moe.topk_weight" % i] = wts
            d["layers.%d.moe.scores" % i] = scores
        else:
            m = mlp(f, W[lp + "mlp.gate_proj.weight"], W[lp + "mlp.up_proj.weight"],
                    W[lp + "mlp.down_proj.weight"], cfg.alpha, cfg.limit, cfg.beta, num)
        d["layers.%d.mlp.output" % i] = m
        h = num.r(h + m)
        d["layers.%d.output" % i] = h
    fin = rmsnorm(h, W[P + "norm.weight"], cfg.eps, num)
    d["final_norm"] = fin
    logits = num.r(linear(fin, W["language_model.lm_head.weight"]))
    d["logits"] = logits
    d["eagle3.aux"] = np.concatenate([d["layers.%d.input" % t] for t in taps], axis=1)
    state.n += T
    return logits


def forward_chunks(cfg, W, ids, num, chunks):
    """Prefill in chunks (decode = chunks of 1); concatenated dump."""
    st = State(cfg)
    parts = []
    o = 0
    for c in chunks:
        dd = {}
        forward(cfg, W, ids[o:o + c], num, st, dd)
        parts.append(dd)
        o += c
    assert o == len(ids)
    return {k: (np.concatenate([p[k] for p in parts], axis=1) if k.endswith("block_indices")
                else np.concatenate([p[k] for p in parts], axis=0)) for k in parts[0]}


def greedy(cfg, W, ids, num, n_new):
    """Greedy continuation (argmax, ties to the lowest id; eos does not stop)."""
    st = State(cfg)
    logits = forward(cfg, W, ids, num, st)
    out = []
    for _ in range(n_new):
        t = int(np.argmax(logits[-1]))
        out.append(t)
        logits = forward(cfg, W, np.array([t]), num, st)
    return np.array(out, np.int32)


def dump_order(cfg):
    """Canonical order of dump names (computation order within each layer)."""
    names = ["embeddings"]
    for i in range(cfg.L):
        p = "layers.%d." % i
        names += [p + "input", p + "attn_norm"]
        if cfg.sparse[i]:
            names.append(p + "attn.block_indices")
        names += [p + "attn.output", p + "post_attn", p + "ffn_norm"]
        if cfg.moe[i]:
            names += [p + "moe.scores", p + "moe.topk_index", p + "moe.topk_weight"]
        names += [p + "mlp.output", p + "output"]
    return names + ["final_norm", "logits", "eagle3.aux"]


def load_model(d):
    """Load config.json + model.safetensors from directory d -> (Config, weights f32)."""
    import json
    import st
    with open(os.path.join(d, "config.json")) as f:
        cfg = Config(json.load(f))
    W = st.load(os.path.join(d, "model.safetensors"))
    W = {k: v.astype(F32) for k, v in W.items()}
    return cfg, W
