"""Writes the images scripts/peers/compare_quantized_pairs.sh feeds tessera and llama-mtmd-cli:
crops of tests/fixtures/images/chelsea.png at sizes where llama.cpp's preprocessing and the
Hugging Face processor's give the same pixels (no resize, no padding on either side):
- chelsea_square_28.png: LLaVA-interleave-tiny's SigLIP image size (28), so neither side resizes;
- chelsea_square_32.png: 32 x 32 = 16 Qwen2-VL tokens, a multiple of the tiny Qwen towers'
  8-pixel merge within both budgets (the processor's 256-4096 pixels, llama.cpp's 8-4096 tokens);
- chelsea_square_16.png: one 2 x 2-token window of the tiny Qwen2.5-VL (its window attention is
  then full attention on both sides; see the script's header);
- chelsea_160x96.png: the whole photo resized as Gemma 4's processor does at 70 soft tokens
  (bicubic, stretched to 160 x 96), a size llama.cpp then keeps (no resize, no letterbox)
  (tests/fixtures/vlm/gemma4-pair-tiny-gguf/llamacpp_steps.json).
Run with a Python that has Pillow: python scripts/peers/mtmd_images.py
"""
from pathlib import Path

from PIL import Image

repo = Path(__file__).resolve().parents[2]
src = Image.open(repo / "tests/fixtures/images/chelsea.png").convert("RGB")
out = repo / "tests/fixtures/vlm/images"
for side in (28, 32, 16):
    # A square of the cat's face, scaled down once here so that neither engine resizes it.
    src.crop((100, 20, 228, 148)).resize((side, side), Image.BICUBIC).save(out / f"chelsea_square_{side}.png")
# Gemma 4 (patch 8, pooling 2, 70 soft tokens): the size its processor stretches chelsea to.
src.resize((160, 96), Image.BICUBIC).save(out / "chelsea_160x96.png", optimize=True)
