"""m3np_vision.py — independent numpy implementation of the M3 vision path.

Written from the spec notes (B.6-B.12, Decisions 1, 2, 7) and spec/model.md
M3-VIS-*, not from ref/*.c. numpy + stdlib only; also importable on the
device machine (tools/vis_device_check.py) where it is compared with the
upstream processor and tower.

Preprocessing: smart_resize (M3-VIS-PRE-1), torchvision's resize of uint8
CPU tensors with BICUBIC (PyTorch's native uint8 antialiased kernel with
int16 fixed-point weights; M3-VIS-PRE-2), fused CLIP normalisation
(M3-VIS-PRE-3), patchify (M3-VIS-PRE-4, M3-VIS-VIDEO-1).
Tower: patch embedding, LayerNorm, 3D RoPE (78 of 80 dims, T|H|W bands),
segmented non-causal attention (Decision 2; joint=True gives the HF option),
exact-erf GELU MLP, projector then 2x2 merge (M3-VIS-*).
Modes as m3np.Num: "fp32" golden; "bf16" rounds linear/LayerNorm/GELU
outputs, q/k after the fp32 rotation, attention probabilities and outputs,
residual adds and the patch embedding output.
"""
import math

import numpy as np

import m3np
from m3np import F32, Num

VERSION = "2"
# Deliberately wrong variants (negative tests of the conformance kit only).
VISION_MUTANTS = {
    "merge_before_project": "2x2 merge MLP applied to the tower rows before the projector "
                            "(needs vision hidden == text hidden)",
    "tanh_gelu": "GELU by the tanh approximation instead of the exact erf form",
    "rope_2d": "transformers 5.17.0 axial-2D vision RoPE: 20 frequencies over 40 dims on (t, h), "
               "width dropped, all 80 dims rotated (notes B.7)",
    "joint_attention": "HF joint attention over all images of the prompt (Decision 2 violated)",
    "pixel_order": "pixel_values rows, which come (c, t, py, px), read channels-last as (t, py, px, c) "
                   "before the Conv3d (the reshape a channels-last port needs is missing)",
}
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGE_TOKEN, VIDEO_TOKEN, START_TOKEN, END_TOKEN = 200025, 200026, 200029, 200030


# ---------------------------------------------------------------- preprocessing

def smart_resize(h, w, factor=28, min_pixels=4 * 28 * 28, max_pixels=451584):
    """Target (h, w) per M3-VIS-PRE-1 (Python round = half to even)."""
    if max(h, w) / min(h, w) > 200:
        raise ValueError("aspect ratio above 200")
    hb = round(h / factor) * factor
    wb = round(w / factor) * factor
    if hb * wb > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb = math.ceil(h * beta / factor) * factor
        wb = math.ceil(w * beta / factor) * factor
    return hb, wb


def _cubic(x):
    a = -0.5
    x = abs(x)
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    if x < 2.0:
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return 0.0


def aa_weights(n_in, n_out):
    """Taps [(xmin, xsize)], int16 weights [n_out, maxw] and their fraction
    bits for one axis (torch's native uint8 antialiased bicubic kernel)."""
    scale = n_in / n_out
    support = 2.0 * scale if scale >= 1.0 else 2.0
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    maxw = int(math.ceil(support)) * 2 + 1
    Wd = np.zeros((n_out, maxw), np.float64)
    xs = []
    for i in range(n_out):
        center = scale * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), n_in)
        size = min(xmax - xmin, maxw)
        ws = [_cubic((j + xmin - center + 0.5) * inv) for j in range(size)]
        tot = 0.0
        for w in ws:
            tot += w
        for j, w in enumerate(ws):
            Wd[i, j] = w / tot if tot != 0.0 else w
        xs.append((xmin, size))
    wmax = float(Wd.max())
    prec = 0
    while prec < 22 and int(0.5 + wmax * (1 << (prec + 1))) < (1 << 15):
        prec += 1
    v = Wd * (1 << prec)
    Wi = np.trunc(np.where(v < 0, v - 0.5, v + 0.5)).astype(np.int64)
    return xs, Wi, prec


def _pass(a, axis, n_out):
    """Filter uint8 array a along axis to n_out samples (fixed point)."""
    xs, W, prec = aa_weights(a.shape[axis], n_out)
    a = np.moveaxis(a, axis, 0).astype(np.int64)
    out = np.empty((n_out,) + a.shape[1:], np.uint8)
    for i, (xmin, size) in enumerate(xs):
        acc = np.full(a.shape[1:], (1 << (prec - 1)) if prec > 0 else 0, np.int64)
        for j in range(size):
            acc += a[xmin + j] * W[i, j]
        out[i] = np.clip(acc >> prec, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def resize_bicubic_u8(img, dh, dw):
    """uint8 [h, w, c] -> uint8 [dh, dw, c] (M3-VIS-PRE-2): width pass, then
    height pass through a uint8 intermediate."""
    a = np.asarray(img, np.uint8)
    if a.shape[1] != dw:
        a = _pass(a, 1, dw)
    if a.shape[0] != dh:
        a = _pass(a, 0, dh)
    return a


def normalize(u8):
    """uint8 [..., 3] -> float32, (x - fp32(mean*255)) / fp32(std*255) (M3-VIS-PRE-3)."""
    m = (np.array(CLIP_MEAN, F32) * F32(255)).astype(F32)
    s = (np.array(CLIP_STD, F32) * F32(255)).astype(F32)
    return ((np.asarray(u8).astype(F32) - m) / s).astype(F32)


def patchify(frames, patch=14, merge=2):
    """Even list of normalised float32 frames [h, w, 3] -> rows [N, 6*p*p]
    ordered (group, merge row, merge col, mh, mw), each row (c, t, py, px)."""
    f = np.stack(frames)                       # [T, h, w, 3]
    T, h, w, _ = f.shape
    gh, gw = h // patch, w // patch
    x = f.reshape(T // 2, 2, gh // merge, merge, patch, gw // merge, merge, patch, 3)
    # axes: g, t, br, mh, py, bc, mw, px, c  ->  g, br, bc, mh, mw, c, t, py, px
    x = x.transpose(0, 2, 5, 3, 6, 8, 1, 4, 7)
    return np.ascontiguousarray(x.reshape(T // 2 * gh * gw, 3 * 2 * patch * patch)), \
        [T // 2, gh, gw]


def preprocess_video(frames_u8, min_pixels=4 * 28 * 28, max_pixels=768 * 28 * 28, resize=True):
    """List of uint8 frames -> (rows, grid); all frames to the first frame's target."""
    h, w = frames_u8[0].shape[:2]
    th, tw = smart_resize(h, w, 28, min_pixels, max_pixels) if resize else (h, w)
    out = []
    for fr in frames_u8:
        if fr.shape[:2] != (th, tw):
            fr = resize_bicubic_u8(fr, th, tw)
        out.append(normalize(fr))
    if len(out) % 2:
        out.append(out[-1])
    return patchify(out)


def preprocess_image(img_u8, max_pixels=451584):
    return preprocess_video([img_u8], max_pixels=max_pixels)


def timestamp(g, nframes, fps):
    return "]<]%.1f seconds[>[" % (min(2 * g, nframes - 1) / fps)


# ---------------------------------------------------------------- tower

_ERF = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x, num, tanh=False):
    """Exact erf GELU in double, rounded to fp32 (M3-VIS-MLP-1); tanh=True is
    the wrong approximation (mutant tanh_gelu)."""
    d = np.asarray(x, F32).astype(np.float64)
    if tanh:
        y = 0.5 * d * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (d + 0.044715 * d * d * d)))
    else:
        y = 0.5 * d * (1.0 + _ERF(d / math.sqrt(2.0)))
    return num.r(y.astype(F32))


def layernorm(x, w, b, eps, num):
    """fp32 LayerNorm; mean and biased variance accumulated in double."""
    x = np.asarray(x, F32)
    mean = x.astype(np.float64).mean(-1, keepdims=True).astype(F32)
    d = x.astype(np.float64) - mean.astype(np.float64)
    var = (d * d).mean(-1, keepdims=True)
    inv = (1.0 / np.sqrt(var + float(F32(eps)))).astype(F32)
    return num.r(((x - mean) * inv * np.asarray(w, F32) + np.asarray(b, F32)).astype(F32))


def linb(x, w, b, num):
    return num.r(m3np.linear(x, w) + np.asarray(b, F32))


def coords(gt, gh, gw, merge=2):
    """(t, y, x) per patch in merge order [gt*gh*gw, 3]."""
    out = []
    for t in range(gt):
        for br in range(gh // merge):
            for bc in range(gw // merge):
                for mh in range(merge):
                    for mw in range(merge):
                        out.append((t, br * merge + mh, bc * merge + mw))
    return np.array(out, np.int64).reshape(-1, 3)


def rope_tables(cr, head_dim, theta):
    """cos, sin [N, 3*nf] for coords cr [N, 3] (M3-VIS-ROPE-1/2), fp32."""
    axis = 2 * ((head_dim // 3) // 2)
    nf = axis // 2
    inv = np.array([F32(1.0 / (float(theta) ** ((2 * i) / axis))) for i in range(nf)], F32)
    ang = np.concatenate([cr[:, a:a + 1].astype(F32) * inv[None, :] for a in range(3)], axis=1)
    d = ang.astype(np.float64)
    return np.cos(d).astype(F32), np.sin(d).astype(F32)


def rope_tables_2d(cr, head_dim, theta):
    """Mutant rope_2d: transformers 5.17.0 axial tables [N, head_dim/2] from
    columns t and h only (20 frequencies over 40 dims for head_dim 80)."""
    dim = head_dim // 2
    inv = (1.0 / (F32(theta) ** (np.arange(0, dim, 2, dtype=F32) / F32(dim)))).astype(F32)
    ang = np.concatenate([cr[:, a:a + 1].astype(F32) * inv[None, :] for a in (0, 1)], axis=1)
    d = ang.astype(np.float64)
    return np.cos(d).astype(F32), np.sin(d).astype(F32)


def rope_apply(x, cos, sin):
    """x [N, nh, hd]; rotate-half over the first 2*cos.shape[1] dims, fp32."""
    h = cos.shape[1]
    y = x.copy()
    x1, x2 = x[..., :h], x[..., h:2 * h]
    c, s = cos[:, None, :], sin[:, None, :]
    y[..., :h] = x1 * c - x2 * s
    y[..., h:2 * h] = x2 * c + x1 * s
    return y


def segments(grid, max_groups=4, joint=False, merge=2):
    """[(start, len)], coords [N, 3] per Decision 2 (or joint)."""
    segs, cs, row = [], [], 0
    for (t, h, w) in grid:
        if joint:
            cs.append(coords(t, h, w, merge))
            row += t * h * w
            continue
        for t0 in range(0, t, max_groups):
            nt = min(max_groups, t - t0)
            cs.append(coords(nt, h, w, merge))
            segs.append((row, nt * h * w))
            row += nt * h * w
    if joint:
        segs = [(0, row)]
    return segs, np.concatenate(cs, axis=0)


def attention(q, k, v, segs, num):
    """Non-causal softmax attention within each segment; q, k, v [N, nh, hd]."""
    N, nh, hd = q.shape
    out = np.zeros_like(q)
    scale = F32(1.0 / math.sqrt(hd))
    for (s0, n) in segs:
        qs, ks, vs = q[s0:s0 + n], k[s0:s0 + n], v[s0:s0 + n]
        sc = np.einsum("ihd,jhd->hij", qs, ks).astype(F32) * scale
        m = sc.max(-1, keepdims=True)
        e = m3np.exp32(sc - m)
        p = num.r(e / e.sum(-1, keepdims=True, dtype=F32))
        out[s0:s0 + n] = np.einsum("hij,jhd->ihd", p, vs).astype(F32)
    return num.r(out)


def tower(cfg, W, pixels, grid, num=Num("fp32"), joint=False, rope=True, dump=None, flags=()):
    """Vision tower; returns [N, Hv]. cfg: dict with hidden_size, num_heads,
    num_layers, layer_norm_eps, rope_theta, segment_max_frames.
    W: dict of public-layout names without the 'vision_tower.vision_model.' prefix.
    flags: VISION_MUTANTS names (negative tests only)."""
    for f in flags:
        assert f in VISION_MUTANTS, f
    joint = joint or "joint_attention" in flags
    Hv, nh = cfg["hidden_size"], cfg["num_heads"]
    hd = Hv // nh
    eps = cfg.get("layer_norm_eps", 1e-5)
    pw = np.asarray(W["embeddings.patch_embedding.weight"], F32).reshape(Hv, -1)
    if "pixel_order" in flags:
        n = len(pixels)
        p = int(round(math.sqrt(pixels.shape[1] // 6)))
        pixels = np.asarray(pixels, F32).reshape(n, 2, p, p, 3).transpose(0, 4, 1, 2, 3).reshape(n, -1)
    x = num.r(m3np.linear(pixels, pw))
    if dump is not None:
        dump["vision.patch_embed"] = x
    h = layernorm(x, W["pre_layrnorm.weight"], W["pre_layrnorm.bias"], eps, num)
    segs, cr = segments(grid, cfg.get("segment_max_frames", 4), joint)
    if "rope_2d" in flags:
        cos, sin = rope_tables_2d(cr, hd, cfg.get("rope_theta", 1e4))
    else:
        cos, sin = rope_tables(cr, hd, cfg.get("rope_theta", 1e4))
    N = h.shape[0]
    for i in range(cfg["num_layers"]):
        p = "encoder.layers.%d." % i
        a = layernorm(h, W[p + "layer_norm1.weight"], W[p + "layer_norm1.bias"], eps, num)
        q = linb(a, W[p + "self_attn.q_proj.weight"], W[p + "self_attn.q_proj.bias"], num)
        k = linb(a, W[p + "self_attn.k_proj.weight"], W[p + "self_attn.k_proj.bias"], num)
        v = linb(a, W[p + "self_attn.v_proj.weight"], W[p + "self_attn.v_proj.bias"], num)
        q, k, v = (t.reshape(N, nh, hd) for t in (q, k, v))
        if rope:
            q, k = num.r(rope_apply(q, cos, sin)), num.r(rope_apply(k, cos, sin))
        o = attention(q, k, v, segs, num).reshape(N, Hv)
        o = linb(o, W[p + "self_attn.out_proj.weight"], W[p + "self_attn.out_proj.bias"], num)
        h = num.r(h + o)
        a = layernorm(h, W[p + "layer_norm2.weight"], W[p + "layer_norm2.bias"], eps, num)
        m = gelu(linb(a, W[p + "mlp.fc1.weight"], W[p + "mlp.fc1.bias"], num), num,
                 "tanh_gelu" in flags)
        h = num.r(h + linb(m, W[p + "mlp.fc2.weight"], W[p + "mlp.fc2.bias"], num))
        if dump is not None:
            dump["vision.layers.%d.output" % i] = h
    if dump is not None:
        dump["vision.tower_output"] = h
    return h


def project_merge(P, h, num=Num("fp32"), dump=None, flags=()):
    """Projector per patch, then 2x2 merge (M3-VIS-PROJ-1, M3-VIS-MERGE-1).
    P: dict with proj1/proj1_b/proj2/proj2_b/merge1/merge1_b/merge2/merge2_b.
    flags: VISION_MUTANTS names; merge_before_project is the wrong order
    (concatenate 4 tower rows, merge MLP, then projector; its "projected"
    dump is the projector output per merged row)."""
    tg = "tanh_gelu" in flags
    if "merge_before_project" in flags:
        Hv = h.shape[1]
        if P["merge1"].shape[1] != 4 * Hv:
            raise ValueError("merge_before_project needs merge input width 4*Hv")
        t = gelu(linb(h.reshape(-1, 4 * Hv), P["merge1"], P["merge1_b"], num), num, tg)
        t = linb(t, P["merge2"], P["merge2_b"], num)
        p = gelu(linb(t, P["proj1"], P["proj1_b"], num), num, tg)
        f = linb(p, P["proj2"], P["proj2_b"], num)
        if dump is not None:
            dump["vision.projected"] = f
            dump["vision.image_features"] = f
        return f
    p = gelu(linb(h, P["proj1"], P["proj1_b"], num), num, tg)
    p = linb(p, P["proj2"], P["proj2_b"], num)
    if dump is not None:
        dump["vision.projected"] = p
    H = p.shape[1]
    cat = p.reshape(-1, 4 * H)
    t = gelu(linb(cat, P["merge1"], P["merge1_b"], num), num, tg)
    f = linb(t, P["merge2"], P["merge2_b"], num)
    if dump is not None:
        dump["vision.image_features"] = f
    return f


def scatter(embeds, ids, feats, token_ids=(IMAGE_TOKEN, VIDEO_TOKEN)):
    """Replace rows of embeds at placeholder ids by feats in order (M3-EMB-3)."""
    pos = [i for i, t in enumerate(ids) if t in token_ids]
    if len(pos) != feats.shape[0]:
        raise ValueError("placeholder count %d != feature rows %d" % (len(pos), feats.shape[0]))
    out = np.array(embeds, F32, copy=True)
    out[pos] = feats
    return out


def expand_image(ids, n_tokens_per_image, marker=IMAGE_TOKEN):
    """Each marker id -> start + N x image + end (M3-VIS-PLACE-1)."""
    out, k = [], 0
    for t in ids:
        if t == marker:
            out += [START_TOKEN] + [IMAGE_TOKEN] * n_tokens_per_image[k] + [END_TOKEN]
            k += 1
        else:
            out.append(t)
    if k != len(n_tokens_per_image):
        raise ValueError("marker count mismatch")
    return out
