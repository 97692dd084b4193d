"""openbmb/MiniCPM-V-4_6's slicing and image placeholders, from transformers' own classes: what
crates/tessera/tests/real_configs.rs (minicpm_v_4_6*) checks.

Builds transformers 5.23's MiniCPMV4_6ImageProcessorPil from
tests/fixtures/real_configs/minicpm-v-4_6/preprocessor_config.json (its source is in SOURCES.md), runs it on the
repository's test images and on blank images of a sweep of sizes (tall, wide, around one and several slices, up to
the 9-slice cap), and writes, per size, the views' target sizes (in patches), the slice grid and the placeholder
text MiniCPMV4_6Processor.replace_image_token writes with the image-id tag of the first image (`<image_id>0</image_id>`)
to tests/fixtures/real_configs/minicpm-v-4_6/slicing_reference.json. In the texts each run of N image tokens is
written `<|image_pad|>*N` to keep the file small.

    /work/py/bin/python scripts/tiny_vlms/minicpmv4_6_real.py   # transformers 5.23, from the repository root
"""
import glob
import json
import os
import re
from types import SimpleNamespace

import transformers
from PIL import Image
from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import MiniCPMV4_6ImageProcessorPil
from transformers.models.minicpmv4_6.processing_minicpmv4_6 import MiniCPMV4_6Processor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REAL = os.path.join(ROOT, "tests", "fixtures", "real_configs", "minicpm-v-4_6")
IMAGE_TOKEN = "<|image_pad|>"

# (width, height): around one slice (448² = 200704 px), each slice count up to the cap, extreme aspects.
SWEEP = [
    (1, 1), (10, 1000), (1000, 10), (447, 448), (448, 448), (449, 448), (500, 401), (640, 480), (480, 640),
    (800, 600), (1024, 768), (768, 1024), (1000, 1000), (1280, 720), (720, 1280), (1344, 896), (1920, 1080),
    (1080, 1920), (2048, 1536), (3000, 1000), (1000, 3000), (4000, 300), (300, 4000), (2240, 2240), (5000, 5000),
    (1345, 449), (897, 897), (1400, 700), (633, 633), (634, 634),
]


def compress(text):
    return re.sub(f"(?:{re.escape(IMAGE_TOKEN)})+", lambda m: f"{IMAGE_TOKEN}*{len(m.group(0)) // len(IMAGE_TOKEN)}",
                  text)


def main():
    pre = json.load(open(os.path.join(REAL, "preprocessor_config.json")))
    settings = {k: v for k, v in pre.items() if k not in ("image_processor_type", "processor_class")}
    use_image_id = settings.pop("use_image_id")
    image_processor = MiniCPMV4_6ImageProcessorPil(**settings)
    # replace_image_token reads only these attributes (the tokenizer's special tokens of the real tokenizer.json).
    proc = SimpleNamespace(slice_mode=image_processor.slice_mode, image_token=IMAGE_TOKEN,
                           image_start_token="<image>", image_end_token="</image>",
                           slice_start_token="<slice>", slice_end_token="</slice>")
    divisor = 4 if image_processor.downsample_mode == "4x" else 16
    images = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/images/*.png"))
                       + glob.glob(os.path.join(ROOT, "tests/fixtures/vlm/images/*.png"))):
        images.append((os.path.relpath(path, os.path.join(ROOT, "tests/fixtures")), Image.open(path).convert("RGB")))
    images += [(None, Image.new("RGB", size)) for size in SWEEP]
    cases = []
    for name, image in images:
        out = image_processor(images=[image], return_tensors="np")
        text = MiniCPMV4_6Processor.replace_image_token(proc, out, image_idx=0, image_token_divisor=divisor)
        if use_image_id:
            text = "<image_id>0</image_id>" + text
        rows, cols = out["grids"][0]
        cases.append({
            "image": name, "width": image.size[0], "height": image.size[1],
            "target_sizes": out["target_sizes"].tolist(), "grid": [int(rows), int(cols)],
            "image_tokens": text.count(IMAGE_TOKEN), "text": compress(text),
        })
        if name == "images/chelsea.png":
            print(f"chelsea {image.size[0]}x{image.size[1]}: grid {rows}x{cols}, views {out['target_sizes'].tolist()}, "
                  f"{text.count(IMAGE_TOKEN)} image tokens; {compress(text)}")
    with open(os.path.join(REAL, "slicing_reference.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
