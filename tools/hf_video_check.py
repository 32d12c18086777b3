#!/usr/bin/env python3
"""hf_video_check.py — compare m3's video preprocessing with the installed
transformers MiniMaxM3VL video processor (device machine; torch needed).

Our side is tools/m3np_vision.py, which `make test` holds equal to the C
reference on the committed vision vectors; so numpy == HF here means C == HF.
Prints one line per video: grids and the max |difference| of pixel values.
"""
import sys
import traceback

import numpy as np
import torch

sys.path.insert(0, "tools")
import m3np_vision as V  # noqa: E402

from transformers.models.minimax_m3_vl import video_processing_minimax_m3_vl as vpm  # noqa: E402

cls = [c for n, c in vars(vpm).items()
       if n.startswith("MiniMax") and n.endswith("VideoProcessor") and isinstance(c, type)][0]
vp = cls()
print("processor:", cls.__name__, {k: getattr(vp, k, None) for k in
      ("do_resize", "size", "min_pixels", "max_pixels", "resample", "do_sample_frames")})
rng = np.random.default_rng(11)


def video(n, h, w, smooth):
    if not smooth:
        return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(n)]
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    out = []
    for k in range(n):
        a = np.stack([127 + 120 * np.sin(x / (5 + c + k) + y / (7 + c)) for c in range(3)], -1)
        out.append(np.clip(np.rint(a + rng.normal(0, 5, a.shape)), 0, 255).astype(np.uint8))
    return out


cases = [(5, 90, 130, True), (4, 300, 500, False), (3, 40, 40, True), (2, 900, 1000, True),
         (9, 56, 84, False)]
worst = 0.0
for n, h, w, smooth in cases:
    frames = video(n, h, w, smooth)
    vid = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).contiguous()
    from transformers.image_utils import PILImageResampling
    for kw in ({"do_resize": True}, {"do_resize": True, "resample": PILImageResampling.BICUBIC,
               "size": {"shortest_edge": 3136, "longest_edge": 768 * 28 * 28}}):
        try:
            o = vp(videos=[vid], return_tensors="pt", **kw)
            keys = {k: tuple(v.shape) for k, v in o.items() if hasattr(v, "shape")}
            pk = [k for k in o if "pixel" in k][0]
            gk = [k for k in o if "grid" in k]
            pv = o[pk].float().numpy()
            gr = o[gk[0]].numpy().tolist() if gk else None
            rows, g = V.preprocess_video(frames)
            d = float(np.abs(rows - pv).max()) if rows.shape == pv.shape else float("nan")
            worst = max(worst, d) if d == d else float("inf")
            print("video %dx%dx%d %s: keys %s grid hf %s ours %s max|d| %.3g"
                  % (n, h, w, kw or "defaults", keys, gr, list(g), d))
        except Exception:  # noqa: BLE001
            print("video %dx%dx%d %s: error\n%s" % (n, h, w, kw or "defaults",
                                                     traceback.format_exc(limit=3)))
print("WORST max|d| with do_resize=True: %.3g" % worst)
