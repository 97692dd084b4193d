"""minicpmv4_6-tiny's image side: a random-weight MiniCPMV4_6ForConditionalGeneration built with transformers 5.23's
real classes, and its image features on the test photos, for crates/tessera/tests/minicpm_tower.rs.

The tower: 3 SigLIP layers of width 32 (4 heads, tanh-GELU), 4-px patches, a 4x4 position table (image_size 16), the
window-attention merger after layer 1; the merger MLP to a Qwen3.5 text model of width 64 (4 layers, linear x3 then
full). The processor: MiniCPMV4_6ImageProcessorPil with scale_resolution 48 and at most 4 slices, so the 451x300
photo is a source view and a grid of slices. Writes tests/fixtures/vlm/minicpmv4_6-tiny/ (config.json,
model.safetensors, preprocessor_config.json, a BPE tokenizer with the real placeholder tokens) and its
tower_reference.safetensors: per image its pixel_values as the processor lays them out and, per view, the view's pixels
as an image (C, H, W), the tower's output after post_layernorm and the merger's image tokens; and tower_reference.json
with the views' target sizes and grids.

    /work/py/bin/python scripts/tiny_vlms/minicpmv4_6_tower.py   # transformers 5.23, from the repository root
"""
import json
import os
import sys

import torch
from PIL import Image
from safetensors.torch import save_file
from transformers.models.minicpmv4_6.configuration_minicpmv4_6 import MiniCPMV4_6Config, MiniCPMV4_6VisionConfig
from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import MiniCPMV4_6ImageProcessorPil
from transformers.models.minicpmv4_6.modeling_minicpmv4_6 import MiniCPMV4_6ForConditionalGeneration
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from make_tiny_vlms import append_special, bpe, randomize  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "vlm", "minicpmv4_6-tiny")
IMAGES = ["images/chelsea.png", "images/astronaut.png", "vlm/images/chelsea_crop_20x14.png"]
PATCH = 4


SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_pad|>", "<|video_pad|>", "<image>", "</image>",
            "<slice>", "</slice>", "<image_id>", "</image_id>"]


def tokenizer():
    tok = bpe([])
    append_special(tok, SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None, add_bos_token=False, add_eos_token=False)


def main():
    tok = tokenizer()
    ids = tok.convert_tokens_to_ids
    text = Qwen3_5TextConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=2048, rms_norm_eps=1e-6,
        hidden_act="silu", layer_types=["linear_attention"] * 3 + ["full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25})
    vision = MiniCPMV4_6VisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                                     image_size=16, patch_size=PATCH, hidden_act="gelu_pytorch_tanh")
    config = MiniCPMV4_6Config(text_config=text, vision_config=vision, insert_layer_id=1,
                               image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
                               eos_token_id=ids("<|im_end|>"), tie_word_embeddings=True)
    torch.manual_seed(0)
    model = MiniCPMV4_6ForConditionalGeneration(config).eval()
    randomize(model, 4600, std=0.2)
    settings = dict(max_slice_nums=4, scale_resolution=48, patch_size=PATCH, slice_mode=True, use_image_id=True,
                    image_mean=[0.5] * 3, image_std=[0.5] * 3)
    image_processor = MiniCPMV4_6ImageProcessorPil(**settings)
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT)
    tok.save_pretrained(OUT)
    with open(os.path.join(OUT, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "MiniCPMV4_6ImageProcessor", "processor_class": "MiniCPMV4_6Processor",
                   **settings}, f, indent=2)
        f.write("\n")
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
