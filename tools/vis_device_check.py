"""vis_device_check.py — run on the device machine (torch, torchvision and
transformers installed there): compares the upstream MiniMaxM3VL image and
video processors and the vision tower with tools/m3np_vision.py, and saves
what the C reference is compared with afterwards (tools/vis_compare.py).

Writes to $OUT: report.txt, sources.txt (installed upstream source of the
pieces compared), resize.npz, decode.npz, tower.npz.
"""
import inspect
import io
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
import m3np_vision as V  # noqa: E402
from m3np import Num  # noqa: E402

OUT = os.environ.get("OUT", "/tmp/visout")
CDRIVER = os.environ.get("M3_RESIZE_HELPER")  # tests/resize_helper.c built on the device
CSTAT = [0, 0, 0]
PARTS = os.environ.get("M3_VIS_PARTS", "resize,decode,tower").split(",")
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "report.txt"), "w")
SRC = open(os.path.join(OUT, "sources.txt"), "w")


def P(*a):
    print(*a, flush=True)
    print(*a, file=LOG, flush=True)


def src(obj, name):
    try:
        SRC.write("\n##### %s\n%s\n" % (name, inspect.getsource(obj)))
    except Exception as ex:  # noqa: BLE001
        SRC.write("\n##### %s: no source (%s)\n" % (name, ex))
    SRC.flush()


def images(rng):
    def smooth(h, w):
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        a = np.stack([127 + 120 * np.sin(x / (3 + w / 40) + c) * np.cos(y / (5 + h / 30) - c)
                      for c in (0.0, 1.0, 2.0)], -1)
        return np.clip(a, 0, 255).astype(np.uint8)

    def edges(h, w):
        b = max(1, min(h, w) // 7)
        cells = rng.integers(0, 256, size=(h // b + 1, w // b + 1, 3), dtype=np.uint8)
        return np.repeat(np.repeat(cells, b, 0), b, 1)[:h, :w]

    def noise(h, w):
        return rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)

    cases = [("noise", 480, 640, "RGB"), ("smooth", 100, 37, "RGB"), ("edges", 1000, 1500, "RGB"),
             ("noise", 57, 333, "RGB"), ("noise", 28, 28, "RGB"), ("edges", 300, 5, "RGB"),
             ("smooth", 2000, 20, "RGB"), ("noise", 673, 671, "RGB"), ("smooth", 1080, 1920, "RGB"),
             ("noise", 9, 1500, "RGB"), ("noise", 5, 14, "RGB"), ("noise", 1, 1, "RGB"),
             ("noise", 2, 400, "RGB"), ("smooth", 2000, 2000, "RGB"), ("noise", 111, 97, "L"),
             ("edges", 333, 222, "RGBA"), ("noise", 64, 80, "P"), ("noise", 700, 701, "RGB"),
             ("edges", 56, 56, "RGB"), ("noise", 250, 1000, "RGB")]
    for kind, h, w, mode in cases:
        a = {"noise": noise, "smooth": smooth, "edges": edges}[kind](h, w)
        yield "%s_%dx%d_%s" % (kind, h, w, mode), a, mode


def part_resize():
    import torch
    from PIL import Image
    from torchvision.transforms.v2 import functional as tvF
    from transformers.models.minimax_m3_vl import image_processing_minimax_m3_vl as ipm
    src(ipm.smart_resize, "image_processing.smart_resize")
    src(ipm, "image_processing module")
    ipc = [c for n, c in vars(ipm).items() if n.endswith("ImageProcessor") and isinstance(c, type)]
    P("image processor classes:", [c.__name__ for c in ipc])
    ip = ipc[0]()
    for cls in type(ip).__mro__:
        for meth in ("resize", "rescale_and_normalize", "_rescale_and_normalize", "normalize",
                     "_fuse_mean_std_and_rescale_factor", "convert_to_rgb", "process_image"):
            if meth in vars(cls):
                src(vars(cls)[meth], "%s.%s" % (cls.__name__, meth))
    src(tvF.resize_image, "torchvision resize_image")
    rng = np.random.default_rng(1234)
    save = {}
    worst = 0
    tot = off1 = 0
    for name, a, mode in images(rng):
        pil = Image.fromarray(a, "RGB")
        if mode == "L":
            pil = pil.convert("L")
        elif mode == "RGBA":
            al = rng.integers(0, 256, size=a.shape[:2], dtype=np.uint8)
            pil = Image.fromarray(np.dstack([a, al]), "RGBA")
        elif mode == "P":
            pil = pil.convert("P")
        rgb = np.asarray(pil.convert("RGB"))
        h, w = rgb.shape[:2]
        try:
            ours = V.smart_resize(h, w)
        except ValueError as ex:
            ours = str(ex)
        try:
            hf = ipm.smart_resize(h, w, factor=28, max_pixels=451584)
        except Exception as ex:  # noqa: BLE001
            hf = "error: %s" % ex
        try:
            out = ip(images=pil, return_tensors="pt")
            pv = out["pixel_values"].numpy()
            grid = out["image_grid_thw"].numpy()
        except Exception as ex:  # noqa: BLE001
            P("%-28s processor error: %s" % (name, ex))
            continue
        th, tw = int(grid[0][1]) * 14, int(grid[0][2]) * 14
        t = torch.from_numpy(rgb.copy()).permute(2, 0, 1).contiguous()
        tv = tvF.resize(t, [th, tw], interpolation=tvF.InterpolationMode.BICUBIC,
                        antialias=True).permute(1, 2, 0).numpy()
        noaa = tvF.resize(t, [th, tw], interpolation=tvF.InterpolationMode.BICUBIC,
                          antialias=False).permute(1, 2, 0).numpy()
        emu = V.resize_bicubic_u8(rgb, th, tw) if (th, tw) != (h, w) else rgb
        if CDRIVER:
            import subprocess
            r = subprocess.run([CDRIVER], input=("%d %d %d %d 3\n" % (h, w, th, tw)).encode() +
                               rgb.tobytes(), capture_output=True, check=True)
            cres = np.frombuffer(r.stdout, np.uint8).reshape(th, tw, 3)
            dc = np.abs(cres.astype(int) - tv.astype(int))
            CSTAT[0] = max(CSTAT[0], int(dc.max()))
            CSTAT[1] += int((dc == 1).sum())
            CSTAT[2] += dc.size
            P("    C ref vs torchvision: max %d, off-by-1 %d of %d" % (dc.max(), (dc == 1).sum(), dc.size))
        d = np.abs(emu.astype(int) - tv.astype(int))
        worst = max(worst, int(d.max()))
        tot += d.size
        off1 += int((d == 1).sum())
        rows, g = V.patchify([V.normalize(tv), V.normalize(tv)])
        pvd = float(np.abs(rows - pv).max())
        P("%-28s in %4dx%-4d smart ours=%s hf=%s -> %dx%d grid=%s | numpy-vs-tv max %d, off-by-1 "
          "%d/%d | noAA differs from AA in %d px | pixel_values(from tv) max |d| %.3g"
          % (name, h, w, ours, hf, th, tw, grid.tolist(), d.max(), (d == 1).sum(), d.size,
             int((noaa != tv).sum()), pvd))
        if rgb.size <= 120000 and tv.size <= 400000:
            save[name + "/rgb"] = rgb
            save[name + "/tv"] = tv
            save[name + "/grid"] = grid.astype(np.int32)
            if pv.size <= 200 * 1176:
                save[name + "/pv"] = pv.astype(np.float32)
    P("RESIZE numpy emulation vs torchvision: worst %d LSB, off-by-1 share %.3g (%d of %d)"
      % (worst, off1 / max(1, tot), off1, tot))
    if CDRIVER:
        P("RESIZE C reference vs torchvision: worst %d LSB, off-by-1 share %.3g (%d of %d)"
          % (CSTAT[0], CSTAT[1] / max(1, CSTAT[2]), CSTAT[1], CSTAT[2]))
    np.savez_compressed(os.path.join(OUT, "resize.npz"), **save)
    # video processor
    from transformers.models.minimax_m3_vl import video_processing_minimax_m3_vl as vpm
    src(vpm, "video_processing module")
    vpc = [c for n, c in vars(vpm).items() if n.endswith("VideoProcessor") and isinstance(c, type)]
    vp = vpc[0]()
    for cls in type(vp).__mro__:
        for meth in ("rescale_and_normalize", "_rescale_and_normalize", "resize"):
            if meth in vars(cls):
                src(vars(cls)[meth], "%s.%s" % (cls.__name__, meth))
    frames = [rng.integers(0, 256, size=(90, 130, 3), dtype=np.uint8) for _ in range(5)]
    vid = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).contiguous()
    for do_resize in (True,):
        try:
            from transformers.image_utils import PILImageResampling
            o = vp(videos=[vid], do_resize=do_resize, size={"height": 672, "width": 672},
                   resample=PILImageResampling.BICUBIC, return_tensors="pt")
            pv = o["pixel_values_videos"].numpy()
            gr = o["video_grid_thw"].numpy()
            rows, g = V.preprocess_video(frames)
            P("VIDEO do_resize=%s grid hf=%s ours=%s max |d| %.3g" %
              (do_resize, gr.tolist(), g, float(np.abs(rows - pv).max()) if rows.shape == pv.shape
               else float("nan")))
            np.savez_compressed(os.path.join(OUT, "video.npz"), frames=np.stack(frames), pv=pv,
                                grid=gr.astype(np.int32))
        except Exception:  # noqa: BLE001
            P("VIDEO error:\n" + traceback.format_exc())
    try:
        from transformers.models.minimax_m3_vl import processing_minimax_m3_vl as pm
        src(pm, "processing module")
    except Exception as ex:  # noqa: BLE001
        P("processing module: %s" % ex)


def part_decode():
    from PIL import Image
    rng = np.random.default_rng(7)
    save = {}
    a = rng.integers(0, 256, size=(37, 53, 3), dtype=np.uint8)
    y, x = np.mgrid[0:37, 0:53]
    g16 = ((y * 1771 + x * 613) % 65536).astype(np.uint16)
    variants = {
        "png_rgb": (Image.fromarray(a, "RGB"), "PNG", {}),
        "png_l": (Image.fromarray(a[..., 0], "L"), "PNG", {}),
        "png_la": (Image.fromarray(np.dstack([a[..., 0], a[..., 1]]), "LA"), "PNG", {}),
        "png_rgba": (Image.fromarray(np.dstack([a, a[..., :1]]), "RGBA"), "PNG", {}),
        "png_p": (Image.fromarray(a, "RGB").convert("P"), "PNG", {}),
        "png_p_trns": (Image.fromarray(a, "RGB").convert("P"), "PNG", {"transparency": 3}),
        "png_1": (Image.fromarray(a[..., 0] > 128), "PNG", {}),
        "png_i16": (Image.fromarray(g16, "I;16"), "PNG", {}),
        "jpg_rgb": (Image.fromarray(a, "RGB"), "JPEG", {"quality": 90}),
        "jpg_prog": (Image.fromarray(a, "RGB"), "JPEG", {"quality": 85, "progressive": True}),
        "jpg_l": (Image.fromarray(a[..., 0], "L"), "JPEG", {"quality": 90}),
        "jpg_cmyk": (Image.fromarray(a, "RGB").convert("CMYK"), "JPEG", {"quality": 95}),
    }
    for k, (im, fmt, kw) in variants.items():
        try:
            b = io.BytesIO()
            im.save(b, fmt, **kw)
            data = b.getvalue()
            back = Image.open(io.BytesIO(data))
            P("DECODE %-10s PIL mode after open: %s" % (k, back.mode))
            save[k + "/bytes"] = np.frombuffer(data, np.uint8)
            save[k + "/rgb"] = np.asarray(back.convert("RGB"))
        except Exception as ex:  # noqa: BLE001
            P("DECODE %s: %s" % (k, ex))
    np.savez_compressed(os.path.join(OUT, "decode.npz"), **save)


def part_tower():
    import torch
    import transformers
    from transformers.models.minimax_m3_vl import configuration_minimax_m3_vl as C
    from transformers.models.minimax_m3_vl import modeling_minimax_m3_vl as M
    torch.manual_seed(0)
    for n, obj in vars(M).items():
        if isinstance(obj, type) and any(s in n for s in ("Vision", "Projector", "Rotary", "Merge")):
            src(obj, n)
        elif callable(obj) and any(s in n for s in ("vision", "rope", "rotate", "position")):
            src(obj, n)
    src(C.MiniMaxM3VLVisionConfig, "MiniMaxM3VLVisionConfig")
    vkw = dict(hidden_size=160, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
               patch_size=14, temporal_patch_size=2, num_channels=3, layer_norm_eps=1e-5)
    vcfg = C.MiniMaxM3VLVisionConfig(**vkw)
    vcfg._attn_implementation = "eager"
    P("vision config:", vcfg.to_dict())
    tower_cls = None
    for n, obj in vars(M).items():
        if isinstance(obj, type) and n.startswith("MiniMaxM3VLVision") and \
                any(s in n for s in ("Transformer", "Model")):
            tower_cls = obj
    P("tower class:", tower_cls)
    tower = tower_cls(vcfg).float().eval()
    with torch.no_grad():
        for name, p in tower.named_parameters():
            p.copy_(torch.randn_like(p) * (0.6 / max(1, p.shape[-1]) ** 0.5 if p.dim() > 1
                                            else 0.1) + (1.0 if "norm" in name and name.endswith("weight") else 0.0))
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in tower.state_dict().items()}
    P("tower params:", sorted(sd)[:8], "...", len(sd))

    def pub(k):
        k = k.replace("embeddings.proj.weight", "embeddings.patch_embedding.weight")
        if k.startswith("layers."):
            k = "encoder." + k
        return k
    W = {pub(k): v for k, v in sd.items()}
    rng = np.random.default_rng(3)
    grid = [[1, 4, 6], [6, 2, 2]]
    N = sum(t * h * w for t, h, w in grid)
    pix = rng.standard_normal((N, 1176)).astype(np.float32)
    caps = {}
    hooks = []
    emb = getattr(tower, "embeddings", None)
    if emb is not None:
        hooks.append(emb.register_forward_hook(lambda m, i, o: caps.__setitem__("patch_embed", o)))
    layers = None
    for n, m in tower.named_modules():
        if isinstance(m, torch.nn.ModuleList):
            layers = m
    for j, l in enumerate(layers):
        hooks.append(l.register_forward_hook(
            lambda m, i, o, j=j: caps.__setitem__("layer%d" % j, o[0] if isinstance(o, tuple) else o)))
    rot = [m for n, m in tower.named_modules() if "Rotary" in type(m).__name__]
    P("rotary modules:", [type(m).__name__ for m in rot])
    sig = inspect.signature(tower.forward)
    P("tower.forward signature:", sig)

    def run(disable_rope):
        caps.clear()
        handles = []
        if disable_rope:
            for m in rot:
                def fw(mod, inp, out):
                    if isinstance(out, tuple) and len(out) == 2:
                        return (torch.ones_like(out[0]), torch.zeros_like(out[1]))
                    return out
                handles.append(m.register_forward_hook(fw))
        with torch.no_grad():
            o = tower(torch.from_numpy(pix), torch.tensor(grid))
        for hd in handles:
            hd.remove()
        last = o.last_hidden_state if hasattr(o, "last_hidden_state") else (o[0] if isinstance(o, tuple) else o)
        res = {k: v.reshape(N, -1).numpy().copy() for k, v in caps.items()}
        res["tower"] = last.reshape(N, -1).numpy().copy()
        return res
    cfg = dict(hidden_size=160, num_heads=2, num_layers=2, layer_norm_eps=1e-5, rope_theta=1e4,
               segment_max_frames=4)
    save = {"pixels": pix, "grid": np.array(grid, np.int32)}
    for k, v in W.items():
        save["w/" + k] = v
    for dis in (True, False):
        try:
            hf = run(dis)
        except Exception:  # noqa: BLE001
            P("HF tower run (rope disabled=%s) failed:\n%s" % (dis, traceback.format_exc()))
            continue
        for joint in (True, False):
            dump = {}
            V.tower(cfg, W, pix, grid, Num("fp32"), joint=joint, rope=dis is False, dump=dump)
            diffs = []
            for k in ["patch_embed"] + ["layer%d" % j for j in range(2)] + ["tower"]:
                nk = {"patch_embed": "vision.patch_embed", "tower": "vision.tower_output"}.get(
                    k, "vision.layers.%s.output" % k[5:])
                if k in hf:
                    diffs.append("%s %.3g" % (k, float(np.abs(hf[k] - dump[nk]).max())))
            P("TOWER HF(rope %s) vs numpy(rope %s, joint=%s): %s" %
              ("disabled" if dis else "as installed", "off" if dis else "3D", joint, ", ".join(diffs)))
        for k, v in hf.items():
            save["hf_%s/%s" % ("norope" if dis else "installed", k)] = v
    # the installed rotary tables, for the record
    try:
        for m in rot:
            P("rotary module source head:", inspect.getsource(type(m))[:200].replace("\n", " | "))
    except Exception:  # noqa: BLE001
        pass
    # projector and merge through the full model's image-feature path
    try:
        tcfg = dict(hidden_size=64, intermediate_size=32, dense_intermediate_size=64,
                    shared_intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                    num_key_value_heads=1, head_dim=32, vocab_size=200064, num_local_experts=4,
                    num_experts_per_tok=2)
        full = C.MiniMaxM3VLConfig(vision_config=vkw, text_config=tcfg)
        full.vision_config._attn_implementation = "eager"
        full._attn_implementation = "eager"
        mcls = getattr(M, "MiniMaxM3VLModel")
        model = mcls(full).float().eval()
        vt = None
        for n, m in model.named_children():
            P("model child:", n, type(m).__name__)
        vt = [m for n, m in model.named_modules() if isinstance(m, tower_cls)][0]
        vt.load_state_dict(tower.state_dict())
        proj = {}
        for n, p in model.named_parameters():
            if "vision" in n or "language" in n or "embed_tokens" in n or ".layers." in n:
                continue
            P("projector param:", n, tuple(p.shape))
            with torch.no_grad():
                p.copy_(torch.randn_like(p) * (0.5 / max(1, p.shape[-1]) ** 0.5 if p.dim() > 1 else 0.1))
            proj[n] = p.detach().numpy().copy()
        rot2 = [m for n, m in vt.named_modules() if "Rotary" in type(m).__name__]
        hs = [m.register_forward_hook(lambda mod, i, o: (torch.ones_like(o[0]), torch.zeros_like(o[1])))
              for m in rot2]
        src(mcls.get_image_features, "MiniMaxM3VLModel.get_image_features")
        with torch.no_grad():
            feats = model.get_image_features(pixel_values=torch.from_numpy(pix),
                                             image_grid_thw=torch.tensor(grid))
        for hd in hs:
            hd.remove()
        if hasattr(feats, "pooler_output") and feats.pooler_output is not None:
            feats = feats.pooler_output
        if isinstance(feats, (list, tuple)):
            feats = torch.cat(list(feats), 0)
        feats = feats.reshape(-1, 64).numpy()
        for k, v in proj.items():
            save["p/" + k] = v
        save["hf_norope/features"] = feats
        P("HF image features (rope disabled):", feats.shape)
        names = sorted(proj)
        P("projector names:", names)
        pick = {}
        for k in names:
            kk = k.split("multi_modal_projector.")[-1]
            key = ("merge" if "merge" in kk else "proj") + ("1" if "linear_1" in kk else "2") + \
                ("_b" if kk.endswith("bias") else "")
            pick[key] = proj[k]
        dump = {}
        h = V.tower(cfg, W, pix, grid, Num("fp32"), joint=True, rope=False)
        f = V.project_merge(pick, h, Num("fp32"), dump)
        P("FEATURES HF(rope disabled) vs numpy(project then merge, joint, rope off): max |d| %.3g"
          % float(np.abs(f - feats).max()))
        # the wrong order: merge rows first (concat 4 tower rows), then project — shapes differ,
        # so the check is only that HF is consistent with project-then-merge above.
    except Exception:  # noqa: BLE001
        P("full-model feature path failed:\n" + traceback.format_exc())
    np.savez_compressed(os.path.join(OUT, "tower.npz"), **save)
    P("transformers", transformers.__version__, "torch", torch.__version__)


if __name__ == "__main__":
    import torch
    import torchvision
    import transformers
    P("torch", torch.__version__, "torchvision", torchvision.__version__, "transformers",
      transformers.__version__, "numpy", np.__version__)
    for part in (part_resize, part_decode, part_tower):
        if part.__name__[5:] not in PARTS:
            continue
        try:
            part()
        except Exception:  # noqa: BLE001
            P("%s failed:\n%s" % (part.__name__, traceback.format_exc()))
