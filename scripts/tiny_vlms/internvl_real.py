"""tests/fixtures/real_configs/internvl3-1b-hf/: OpenGVLab/InternVL3-1B-hf's config and processor files, rebuilt.

No copy of the Hub repository's files was found in the code index (see that folder's SOURCES.md), so they are written
here the way transformers' own converter (`models/internvl/convert_internvl_weights_to_hf.py`) writes them for
OpenGVLab/InternVL3-1B, with the installed transformers (5.23) classes:
  config.json            InternVLConfig(text_config=Qwen2Config(**llm_config), vision_config=InternVLVisionConfig(
                         **vision_config), image_token_id=151667), architectures [InternVLForConditionalGeneration];
                         llm_config is InternVL3-1B's (printed in shivangjhalani/multicoco InternVL3-1B_data.md) minus
                         the converter's UNNECESSARY_CONFIG_KEYS, with use_cache true and eos_token_id 151645 (forced
                         for InternVL3); vision_config is InternViT-300M's as the converter renames it (qkv_bias ->
                         attention_bias, qk_normalization -> use_qk_norm, use_absolute_position_embeddings true)
  processor_config.json  InternVLProcessor(GotOcr2ImageProcessor(size 448x448, ImageNet mean/std, resample bicubic,
                         crop_to_patches false as saved, min/max_patches 1/12), image_seq_length 256)
  chat_template.jinja    the converter's template (written by hand from its source)
It also prints the image token count of a 451x300 photo through the real processor classes.

Dev-time only: /work/py/bin/python scripts/tiny_vlms/internvl_real.py (from the repository root)
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from transformers import (GotOcr2ImageProcessorPil, InternVLConfig, InternVLProcessor, InternVLVisionConfig,
                          Qwen2Config)
from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "real_configs", "internvl3-1b-hf")

# InternVL3-1B's llm_config (multicoco print), the converter's UNNECESSARY_CONFIG_KEYS removed.
LLM = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643,
       "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864,
       "max_position_embeddings": 32768, "max_window_layers": 70, "model_type": "qwen2", "num_attention_heads": 14,
       "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
       "rope_scaling": {"factor": 2.0, "rope_type": "dynamic", "type": "dynamic"}, "rope_theta": 1000000.0,
       "sliding_window": None, "torch_dtype": "bfloat16", "use_sliding_window": False, "vocab_size": 151674}
# InternVL3-1B's vision_config (the same print) as the converter renames it.
VISION = {"architectures": ["InternVisionModel"], "attention_dropout": 0.0, "projection_dropout": 0.0, "dropout": 0.0,
          "hidden_act": "gelu", "hidden_size": 1024, "image_size": 448, "initializer_factor": 0.1,
          "initializer_range": 1e-10, "intermediate_size": 4096, "layer_norm_eps": 1e-06, "norm_type": "layer_norm",
          "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 24, "patch_size": 14,
          "use_qk_norm": False, "attention_bias": True, "use_absolute_position_embeddings": True}


def main():
    llm = dict(LLM, use_cache=True, eos_token_id=151645)
    config = InternVLConfig(text_config=Qwen2Config(**llm), vision_config=InternVLVisionConfig(**VISION),
                            image_token_id=151667)
    config.architectures = ["InternVLForConditionalGeneration"]
    config.save_pretrained(OUT)
    image_processor = GotOcr2ImageProcessorPil(do_resize=True, size={"height": 448, "width": 448}, do_rescale=True,
                                               rescale_factor=1 / 255, do_normalize=True,
                                               image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225],
                                               do_convert_rgb=True)
    from tiny_vlms.internvl import internvl_tokenizer  # any tokenizer with InternVL's image tokens will do
    template = open(os.path.join(OUT, "chat_template.jinja")).read()
    processor = InternVLProcessor(image_processor=image_processor, tokenizer=internvl_tokenizer(),
                                  video_processor=InternVLVideoProcessor(), chat_template=template)
    processor.save_pretrained("/tmp/internvl-real-processor")
    with open(os.path.join("/tmp/internvl-real-processor", "processor_config.json")) as f:
        proc = json.load(f)
    proc["image_processor"]["image_processor_type"] = "GotOcr2ImageProcessorFast"  # what the converter saves
    with open(os.path.join(OUT, "processor_config.json"), "w") as f:
        json.dump(proc, f, indent=2, sort_keys=True)
        f.write("\n")
    data = processor._get_num_multimodal_tokens(image_sizes=[[300, 451]])
    print("451x300:", data["num_image_patches"][0], "tiles,", data["num_image_tokens"][0] - 2,
          "<IMG_CONTEXT> tokens (+ <img> and </img>)")


if __name__ == "__main__":
    main()
