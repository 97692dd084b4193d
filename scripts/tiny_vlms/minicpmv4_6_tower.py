"""minicpm-v4.6-tiny's image side against transformers 5.23, for crates/tessera/tests/minicpm_tower.rs.

Loads tests/fixtures/vlm/minicpm-v4.6-tiny (written by scripts/make_tiny_vlms.py with scripts/tiny_vlms/minicpmv4_6.py:
3 SigLIP layers of width 32, 4-px patches, a 4x4 position table, the window-attention merger after layer 1, the merger
MLP to a Qwen3.5 text model of width 64) and its processor settings (MiniCPMV4_6ImageProcessorPil, scale_resolution 48,
at most 4 slices, so the 451x300 photo is a source view and a grid of slices), and writes beside them
tower_reference.safetensors: per image its pixel_values as the processor lays them out and, per view, the view's pixels
as an image (C, H, W), the tower's output after post_layernorm and the merger's image tokens; and tower_reference.json
with the views' target sizes and grids.

    /work/py/bin/python scripts/tiny_vlms/minicpmv4_6_tower.py   # transformers 5.23, from the repository root
"""
import json
import os

import torch
from PIL import Image
from safetensors.torch import save_file
from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import MiniCPMV4_6ImageProcessorPil
from transformers.models.minicpmv4_6.modeling_minicpmv4_6 import MiniCPMV4_6ForConditionalGeneration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "vlm", "minicpm-v4.6-tiny")
IMAGES = ["images/chelsea.png", "images/astronaut.png", "vlm/images/chelsea_crop_20x14.png"]
PATCH = 4

# The processor settings the family's folder states (processor_config.json's image_processor).
SETTINGS = ["max_slice_nums", "scale_resolution", "patch_size", "slice_mode", "use_image_id", "image_mean", "image_std"]


def main():
    with open(os.path.join(OUT, "processor_config.json")) as f:
        stated = json.load(f)["image_processor"]
    settings = {k: stated[k] for k in SETTINGS}
    assert settings["patch_size"] == PATCH, settings
    image_processor = MiniCPMV4_6ImageProcessorPil(**settings)
    model = MiniCPMV4_6ForConditionalGeneration.from_pretrained(OUT).eval()
    tensors, cases = {}, []
    for i, name in enumerate(IMAGES):
        image = Image.open(os.path.join(ROOT, "tests", "fixtures", name)).convert("RGB")
        out = image_processor(images=[image], return_tensors="pt")
        pv, sizes = out["pixel_values"], out["target_sizes"]
        with torch.no_grad():
            features = model.model.get_image_features(pv, sizes)
        tensors[f"image{i}.pixel_values"] = pv.contiguous()
        start = 0
        tokens = 0
        for v, (th, tw) in enumerate(sizes.tolist()):
            n = th * tw * PATCH
            flat = pv[0, :, :, start:start + n]  # (C, p, th*tw*p): patch (i, j)'s rows dy, columns dx
            img = flat.reshape(3, PATCH, th, tw, PATCH).permute(0, 2, 1, 3, 4).reshape(3, th * PATCH, tw * PATCH)
            tensors[f"image{i}.view{v}.pixels"] = img.contiguous()
            tensors[f"image{i}.view{v}.features"] = features.pooler_output[v].contiguous()
            start += n
        # The tower's output, all views' tokens in order (post_layernorm).
        tensors[f"image{i}.tower"] = features.last_hidden_state[0].contiguous()
        tokens = sum(int(f.shape[0]) for f in features.pooler_output)
        cases.append({"image": name, "target_sizes": sizes.tolist(), "grid": [int(x) for x in out["grids"][0]],
                      "tokens": tokens})
        print(f"{name}: views {sizes.tolist()}, grid {out['grids'][0]}, {tokens} image tokens")
    save_file(tensors, os.path.join(OUT, "tower_reference.safetensors"))
    with open(os.path.join(OUT, "tower_reference.json"), "w") as f:
        json.dump({"cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
