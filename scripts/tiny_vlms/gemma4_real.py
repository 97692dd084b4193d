"""The image-token count of a 451x300 photo under google/gemma-4-E2B-it's processor settings
(tests/fixtures/real_configs/gemma-4-e2b-it/processor_config.json), from transformers' own classes: what
crates/tessera/tests/real_configs.rs (gemma_4_e2b_it) asserts.

    /work/py/bin/python scripts/tiny_vlms/gemma4_real.py   # transformers 5.23
"""
import json
import os

from PIL import Image
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
settings = json.load(open(os.path.join(ROOT, "tests/fixtures/real_configs/gemma-4-e2b-it/processor_config.json")))
settings = {k: v for k, v in settings["image_processor"].items() if k != "image_processor_type"}
processor = Gemma4ImageProcessorPil(**settings)
image = Image.open(os.path.join(ROOT, "tests/fixtures/images/chelsea.png")).convert("RGB")
out = processor(images=[image], return_tensors="pt")
n = int(out["num_soft_tokens_per_image"][0])
patches = int((out["image_position_ids"][0] != -1).all(-1).sum())
print(f"{image.size[0]}x{image.size[1]}: {patches} patches, {n} soft tokens; pixel_values {tuple(out['pixel_values'].shape)}")
