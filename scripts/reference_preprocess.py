"""Golden image preprocessing outputs from transformers' PIL-backed image processors.

Saves scikit-image's real photos (chelsea, astronaut, coffee) as lossless PNGs under
tests/fixtures/images/ and, for several processor configurations, the `pixel_values`
transformers produces from those exact pixels, into tests/fixtures/preprocess_reference.safetensors
(key `<case>/<image>`, float32 (3, H, W)) with the configurations in preprocess_reference.json.
Also writes small images in the modes PIL converts to RGB (grey, grey+alpha, RGBA, 16-bit,
palette, EXIF-rotated) with PIL's `convert("RGB")` pixels, for the decoding tests.

Dev-time only: /work/py/bin/python scripts/reference_preprocess.py
"""
import json
import os

import numpy as np
import transformers
from PIL import Image
from safetensors.numpy import save_file
from skimage import data
from transformers import CLIPImageProcessorPil, SiglipImageProcessorPil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures")
IMAGES = os.path.join(FIX, "images")

CASES = [
    # name, class, kwargs, images
    ("siglip224_bicubic", SiglipImageProcessorPil,
     dict(size={"height": 224, "width": 224}, resample=3, image_mean=[0.5] * 3, image_std=[0.5] * 3),
     ["chelsea", "astronaut", "coffee"]),
    ("clip224_shortest_edge_crop", CLIPImageProcessorPil,
     dict(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224}, resample=3,
          do_center_crop=True, image_mean=[0.48145466, 0.4578275, 0.40821073],
          image_std=[0.26862954, 0.26130258, 0.27577711]),
     ["chelsea", "astronaut", "coffee"]),
    ("bilinear_96x128", SiglipImageProcessorPil,
     dict(size={"height": 96, "width": 128}, resample=2, image_mean=[0.5] * 3, image_std=[0.5] * 3),
     ["chelsea"]),
    ("lanczos_120x160", SiglipImageProcessorPil,
     dict(size={"height": 120, "width": 160}, resample=1, image_mean=[0.5] * 3, image_std=[0.5] * 3),
     ["coffee"]),
    ("upscale_bicubic_350x480", SiglipImageProcessorPil,
     dict(size={"height": 350, "width": 480}, resample=3, image_mean=[0.5] * 3, image_std=[0.5] * 3),
     ["chelsea"]),
    ("nearest_64x64", SiglipImageProcessorPil,
     dict(size={"height": 64, "width": 64}, resample=0, image_mean=[0.5] * 3, image_std=[0.5] * 3),
     ["astronaut"]),
]


def mode_cases(photo):
    """Small images in the modes PIL's convert('RGB') handles, with their converted pixels."""
    base = Image.fromarray(photo).resize((40, 30), Image.BICUBIC)
    out = {}
    out["grey"] = base.convert("L")
    la = base.convert("LA")
    la.putalpha(Image.linear_gradient("L").resize((40, 30)))
    out["grey_alpha"] = la
    rgba = base.convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize((40, 30)))
    out["rgba"] = rgba
    out["palette"] = base.convert("P", palette=Image.ADAPTIVE, colors=16)
    return out


def main():
    os.makedirs(IMAGES, exist_ok=True)
    photos = {"chelsea": data.chelsea(), "astronaut": data.astronaut(), "coffee": data.coffee()}
    for name, arr in photos.items():
        Image.fromarray(arr).save(os.path.join(IMAGES, f"{name}.png"), optimize=True)
    tensors, configs = {}, {}
    for name, cls, kwargs, images in CASES:
        proc = cls(**kwargs)
        configs[name] = {k: v for k, v in proc.to_dict().items()
                         if k in ("do_resize", "size", "resample", "do_center_crop", "crop_size", "do_rescale",
                                  "rescale_factor", "do_normalize", "image_mean", "image_std")}
        for img in images:
            # Exactly the pixels of the saved PNG.
            arr = np.array(Image.open(os.path.join(IMAGES, f"{img}.png")).convert("RGB"))
            pv = proc(images=arr, return_tensors="np")["pixel_values"][0].astype(np.float32)
            tensors[f"{name}/{img}"] = np.ascontiguousarray(pv)
    save_file(tensors, os.path.join(FIX, "preprocess_reference.safetensors"))

    # Decoding: modes converted to RGB by PIL.
    modes = {}
    for mode_name, im in mode_cases(photos["chelsea"]).items():
        path = os.path.join(IMAGES, f"mode_{mode_name}.png")
        im.save(path)
        modes[mode_name] = np.array(Image.open(path).convert("RGB"))
    # 16-bit RGB and grey PNGs.
    rgb16 = (photos["coffee"][:30, :40].astype(np.uint16) * 257 + np.arange(40, dtype=np.uint16)[None, :, None])
    import struct, zlib

    def png16(path, arr, color_type):
        h, w = arr.shape[:2]
        raw = b"".join(b"\x00" + arr[y].astype(">u2").tobytes() for y in range(h))
        def chunk(t, d):
            return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
        ihdr = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    png16(os.path.join(IMAGES, "mode_rgb16.png"), rgb16, 2)
    modes["rgb16"] = np.array(Image.open(os.path.join(IMAGES, "mode_rgb16.png")).convert("RGB"))
    grey16 = (np.arange(30 * 40, dtype=np.uint16).reshape(30, 40) * 7)
    png16(os.path.join(IMAGES, "mode_grey16.png"), grey16, 0)
    modes["grey16"] = np.array(Image.open(os.path.join(IMAGES, "mode_grey16.png")).convert("RGB"))
    # EXIF orientation 6 (rotate 90° clockwise to display), applied as ImageOps.exif_transpose does.
    from PIL import ImageOps
    small = Image.fromarray(photos["astronaut"]).resize((48, 32), Image.BICUBIC)
    exif = Image.Exif()
    exif[0x0112] = 6
    path = os.path.join(IMAGES, "exif_orientation6.png")
    small.save(path, exif=exif)
    modes["exif_orientation6"] = np.array(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
    save_file({k: np.ascontiguousarray(v) for k, v in modes.items()}, os.path.join(FIX, "decode_reference.safetensors"))

    with open(os.path.join(FIX, "preprocess_reference.json"), "w") as f:
        json.dump({"transformers_version": transformers.__version__,
                   "pillow_version": Image.__version__,
                   "cases": {n: {"config": configs[n], "images": imgs} for n, _, _, imgs in CASES}}, f, indent=1)
    print("ok", sorted(tensors), sorted(modes))


if __name__ == "__main__":
    main()
