"""minicpm-v4.6-tiny: MiniCPMV4_6ForConditionalGeneration with the real classes, for scripts/make_tiny_vlms.py.

The image side (3 SigLIP layers of width 32, 4-px patches, a 4x4 position table, the window-attention merger after
layer 1, the 2x2 merger MLP; MiniCPMV4_6ImageProcessorPil with scale_resolution 48 and at most 4 slices; checked view
by view by scripts/tiny_vlms/minicpmv4_6_tower.py, which runs after it) and a Qwen3_5TextModel of four layers (linear x3
then full) with 1-D positions. The chat template is MiniCPM-V 4.6's own (tests/fixtures/real_configs/minicpm-v-4_6, SOURCES.md): Qwen3.5's
turns, parts joined by newlines, thinking off unless asked; the processor expands its <|image_pad|>.
"""
import os

from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast
from transformers.models.minicpmv4_6.configuration_minicpmv4_6 import MiniCPMV4_6Config, MiniCPMV4_6VisionConfig
from transformers.models.minicpmv4_6.image_processing_pil_minicpmv4_6 import MiniCPMV4_6ImageProcessorPil
from transformers.models.minicpmv4_6.modeling_minicpmv4_6 import MiniCPMV4_6ForConditionalGeneration
from transformers.models.minicpmv4_6.processing_minicpmv4_6 import MiniCPMV4_6Processor
from transformers.models.minicpmv4_6.video_processing_minicpmv4_6 import MiniCPMV4_6VideoProcessor
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

from make_tiny_vlms import IMAGES, REAL, append_special, bpe
from tiny_vlms.minicpmv4_6_tower import main as tower
from tiny_vlms.qwen3_5 import case

NAMED = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "image_start_token": "<image>",
         "image_end_token": "</image>", "slice_start_token": "<slice>", "slice_end_token": "</slice>",
         "image_id_start_token": "<image_id>", "image_id_end_token": "</image_id>"}


def minicpm_tokenizer():
    tok = bpe([])
    append_special(tok, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                         "<|image_pad|>", "<|video_pad|>", "<image>", "</image>", "<slice>", "</slice>", "<image_id>",
                         "</image_id>"])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ["<think>", "</think>"]])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None, add_bos_token=False, add_eos_token=False,
                                   extra_special_tokens=NAMED)


def minicpmv4_6_spec(max_slice_nums=4, image_size=16):
    template = open(os.path.join(REAL, "minicpm-v-4_6", "chat_template.jinja")).read()
    tok = minicpm_tokenizer()
    ids = tok.convert_tokens_to_ids
    image_processor = MiniCPMV4_6ImageProcessorPil(max_slice_nums=max_slice_nums, scale_resolution=48, patch_size=4,
                                                   slice_mode=True, use_image_id=True, image_mean=[0.5] * 3,
                                                   image_std=[0.5] * 3)
    processor = MiniCPMV4_6Processor(image_processor=image_processor, video_processor=MiniCPMV4_6VideoProcessor(),
                                     tokenizer=tok, chat_template=template)
    tok = processor.tokenizer
    text = Qwen3_5TextConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=2048, rms_norm_eps=1e-6,
        hidden_act="silu", layer_types=["linear_attention"] * 3 + ["full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        pad_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"))
    vision = MiniCPMV4_6VisionConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                                     image_size=image_size, patch_size=4, hidden_act="gelu_pytorch_tanh")
    config = MiniCPMV4_6Config(text_config=text, vision_config=vision, insert_layer_id=1,
                               image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
                               eos_token_id=ids("<|im_end|>"), tie_word_embeddings=True)
    return dict(
        name="minicpm-v4.6-tiny", cls=MiniCPMV4_6ForConditionalGeneration, config=config, processor=processor,
        seed=4600, std=0.2, connector=lambda m: m.model.merger, text_model=lambda m: m.model.language_model,
        generation=dict(eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>")),
        image_token="<|image_pad|>", after=lambda *_: tower(),
        cases=[
            case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            case("two_images", [f"{IMAGES}/chelsea.png", f"{IMAGES}/astronaut.png"],
                 "What differs between the two images?"),
            case("earlier_turn", [f"{IMAGES}/chelsea.png"], "What is in this photo?",
                 earlier=("A cat.", "What color is the cat?")),
            case("text_only", [], "Hello, who are you?"),
        ])


def minicpmv4_6_pair_spec():
    """minicpm-v4.6-pair-tiny: minicpm-v4.6-tiny as llama.cpp runs its GGUF + mmproj pair (scripts/make_gguf_pairs.sh,
    `minicpm`). llama.cpp fixes two things the mmproj cannot state: at most 9 slices (mtmd-image.cpp's
    `max_slice_nums`, the image processor's class default) and a 70x70 table of learned positions (clip.cpp's
    buckets, `vision_config.image_size` / `patch_size` of the real checkpoint: 980 / 14). This checkpoint has both
    (max_slice_nums 9, image_size 280 = 70 patches of 4 px), so the pair and its folder agree with transformers."""
    spec = minicpmv4_6_spec(max_slice_nums=9, image_size=280)
    spec.pop("after")
    return dict(spec, name="minicpm-v4.6-pair-tiny", seed=4601)
