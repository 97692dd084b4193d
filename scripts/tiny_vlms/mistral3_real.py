"""The image token count of a 451x300 photo under mistralai/Mistral-Small-3.1-24B-Instruct-2503's processor files.

Reads tests/fixtures/real_configs/mistral-small-3.1-24b-instruct-2503/ (preprocessor_config.json and
processor_config.json; their sources are in that folder's SOURCES.md), builds transformers' PixtralImageProcessorPil
from the first and PixtralProcessor's counting (`_get_num_multimodal_tokens`, with the processor's patch_size x
spatial_merge_size) from the second, and prints the resized size, the [IMG] grid, the [IMG] count and every
placeholder token (breaks and the end included), which tests/real_configs.rs's mistral_small_3_1 checks.

Dev-time only: /work/py/bin/python scripts/tiny_vlms/mistral3_real.py (from the repository root)
"""
import json
import os
from types import SimpleNamespace

from PIL import Image
from transformers import PixtralProcessor
from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REAL = os.path.join(ROOT, "tests", "fixtures", "real_configs", "mistral-small-3.1-24b-instruct-2503")


def main():
    pre = json.load(open(os.path.join(REAL, "preprocessor_config.json")))
    proc = json.load(open(os.path.join(REAL, "processor_config.json")))
    kept = {k: v for k, v in pre.items() if v is not None and k in (
        "do_resize", "size", "resample", "do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std",
        "patch_size", "do_convert_rgb")}
    image_processor = PixtralImageProcessorPil(**kept)
    unit = proc["patch_size"] * proc["spatial_merge_size"]
    photo = Image.open(os.path.join(ROOT, "tests", "fixtures", "images", "chelsea.png")).convert("RGB")
    assert photo.size == (451, 300), photo.size
    out = image_processor(images=[photo], patch_size=unit, return_tensors="pt")
    h, w = out["image_sizes"][0].tolist()
    rows, cols = h // unit, w // unit
    # PixtralProcessor's own count for the same size, called without building a tokenizer.
    counter = SimpleNamespace(patch_size=proc["patch_size"], spatial_merge_size=proc["spatial_merge_size"],
                              image_processor=image_processor,
                              _merge_kwargs=lambda **_: {"images_kwargs": {}})
    counted = PixtralProcessor._get_num_multimodal_tokens(counter, image_sizes=[(300, 451)])
    print(f"451x300 -> {h}x{w} px, {rows}x{cols} [IMG] grid: {rows * cols} [IMG], {rows * (cols + 1)} placeholder "
          f"tokens (PixtralProcessor counts {counted['num_image_tokens'][0]})")
    assert counted["num_image_tokens"][0] == rows * (cols + 1)


if __name__ == "__main__":
    main()
