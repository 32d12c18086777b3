"""gen_vectors_decode.py — image-decoding vector cases (M3-VIS-DECODE-1).

Hooked into tools/gen_vectors.py like gen_vectors_vision.py. The expectation
comes from PIL itself — the decoder of the upstream pipeline (transformers'
load_image: PIL.Image.open, ImageOps.exif_transpose, convert("RGB")) — so
these cases pin m3's decoder to what the model saw in training, not to
another implementation of ours. Files are encoded with PIL from seeded numpy
images, so every byte is reproducible with Debian's python3-pil.

Contract (component "vision_decode"): inputs `file` u8 [n] (the file's
bytes) -> expected `rgb` [h, w, 3] (uint8 values stored as F32).
"""
import io

import numpy as np
from PIL import Image, ImageOps

import st

F32 = np.float32
GENERATOR = "tools/gen_vectors_decode.py"
GENERATOR_VERSION = "1+pil" + Image.__version__


def _rgb_pattern(seed, h, w):
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    a = np.stack([127 + 110 * np.sin(x / (2.5 + c) + y / (4 + c) + c) for c in range(3)], -1)
    a[: h // 2, : w // 3, :] = (250, 20, 30)  # a flat block: orientation is visible
    a += r.normal(0, 8, a.shape)
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def _encode(seed, kind):
    """(file bytes, description) for one kind of input file."""
    h, w = 23, 37  # odd sizes: partial JPEG MCUs and PNG rows
    rgb = _rgb_pattern(seed, h, w)
    gray = rgb[..., 1]
    buf = io.BytesIO()
    if kind == "png_rgb":
        Image.fromarray(rgb, "RGB").save(buf, "PNG")
        return buf.getvalue(), "PNG, 8-bit RGB"
    if kind == "png_rgba":
        a = np.random.default_rng(seed + 1).integers(0, 256, (h, w, 1)).astype(np.uint8)
        Image.fromarray(np.concatenate([rgb, a], -1), "RGBA").save(buf, "PNG")
        return buf.getvalue(), "PNG, 8-bit RGBA: alpha dropped without compositing"
    if kind == "png_gray":
        Image.fromarray(gray, "L").save(buf, "PNG")
        return buf.getvalue(), "PNG, 8-bit grey replicated to R, G, B"
    if kind == "png_gray16":
        g16 = (gray.astype(np.uint16) * 3 + 7)  # values 7..772: some clip, some don't
        Image.fromarray(g16, "I;16").save(buf, "PNG")
        return buf.getvalue(), "PNG, 16-bit grey (PIL mode I;16): samples above 255 clip to 255"
    if kind == "png_palette_trns":
        p = Image.fromarray(rgb, "RGB").quantize(colors=16, method=Image.Quantize.MEDIANCUT, dither=0)
        p.info["transparency"] = 3
        p.save(buf, "PNG", transparency=3)
        return buf.getvalue(), "PNG, 16-colour palette with a transparent index"
    if kind == "png_1bit":
        Image.fromarray(gray > 128).convert("1").save(buf, "PNG")
        return buf.getvalue(), "PNG, 1-bit"
    if kind == "jpeg_baseline":
        Image.fromarray(rgb, "RGB").save(buf, "JPEG", quality=90)
        return buf.getvalue(), "JPEG baseline 4:2:0, quality 90"
    if kind == "jpeg_progressive":
        Image.fromarray(rgb, "RGB").save(buf, "JPEG", quality=85, progressive=True)
        return buf.getvalue(), "JPEG progressive"
    if kind == "jpeg_gray":
        Image.fromarray(gray, "L").save(buf, "JPEG", quality=90)
        return buf.getvalue(), "JPEG greyscale"
    if kind == "jpeg_cmyk":
        Image.fromarray(rgb, "RGB").convert("CMYK").save(buf, "JPEG", quality=95)
        return buf.getvalue(), "JPEG CMYK (Adobe, inverted samples)"
    if kind.startswith("jpeg_exif"):
        o = int(kind[-1])
        ex = Image.Exif()
        ex[0x0112] = o
        Image.fromarray(rgb, "RGB").save(buf, "JPEG", quality=90, exif=ex.tobytes())
        return buf.getvalue(), "JPEG with EXIF orientation %d (exif_transpose)" % o
    raise ValueError(kind)


def _decode_case(seed, kind):
    data, desc = _encode(seed, kind)
    im = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    want = np.asarray(im.convert("RGB"), dtype=np.uint8)
    m = {"component": "vision_decode", "mode": "fp32", "profile": "fp32", "seed": seed,
         "description": desc + "; expected = PIL open, exif_transpose, convert('RGB')",
         "params": {}, "clauses": ["M3-VIS-DECODE-1"]}
    return {"meta": m, "generator": GENERATOR, "generator_version": GENERATOR_VERSION,
            "files": {"inputs.safetensors": st.dumps({"file": np.frombuffer(data, np.uint8).copy()}),
                      "expected.safetensors": st.dumps({"rgb": want.astype(F32)})}}


KINDS = ["png_rgb", "png_rgba", "png_gray", "png_gray16", "png_palette_trns", "png_1bit",
         "jpeg_baseline", "jpeg_progressive", "jpeg_gray", "jpeg_cmyk", "jpeg_exif3", "jpeg_exif6",
         "jpeg_exif8"]


def register(case):
    """Register the decode cases with gen_vectors.case."""
    for i, k in enumerate(KINDS):
        case("vision/decode_" + k)(lambda k=k, s=1501 + i: _decode_case(s, k))
