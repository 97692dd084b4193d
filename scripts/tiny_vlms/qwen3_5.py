"""qwen3.5-tiny: Qwen3_5ForConditionalGeneration with the real classes, for scripts/make_tiny_vlms.py.

Qwen3_5VisionModel (Qwen3-VL's tower without DeepStack: biased Conv3d patches of 4 px over 2 frames, a learned 4x4
position table interpolated to each grid, 2-D vision RoPE, a 2x2 merger) and a Qwen3_5TextModel of four layers,
`layer_types` linear ×3 then full: Gated DeltaNet layers (2 key heads shared by 4 value heads of 16 dims, a causal
conv of 4, gated RMSNorm with a plain weight) and a gated attention layer (q_proj gives each head its queries and a
sigmoid output gate; q/k norms; RoPE over the first quarter of each 32-dim head with interleaved M-RoPE sections
[2, 1, 1]); every other RMSNorm scales by (1 + w). Qwen3VLProcessor over Qwen2VLImageProcessorPil (smart_resize to
multiples of 8 between 256 and 4096 pixels) and the real Qwen3.5 chat template
(tests/fixtures/real_configs/qwen3.5-0.8b/chat_template.jinja: the answer opens with "<think>\\n"). The tokenizer
holds <think> and </think> as added tokens, as Qwen's does.

The 451x300 photo takes 72x48 px (9x6 merged tokens: 54); a chat with the image in an earlier turn, two images and
text only are the other cases.
"""
import os

from PIL import Image
from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5Config, Qwen3_5TextConfig, Qwen3_5VisionConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForConditionalGeneration
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor  # needs torchvision

from make_tiny_vlms import IMAGES, REAL, append_special, bpe


def qwen3_5_tokenizer():
    tok = bpe([])
    append_special(tok, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                         "<|image_pad|>", "<|video_pad|>"])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ["<think>", "</think>"]])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None, add_bos_token=False, add_eos_token=False,
                                   extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"})


def case(name, images, text, earlier=None):
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    if earlier is not None:
        messages += [{"role": "assistant", "content": [{"type": "text", "text": earlier[0]}]},
                     {"role": "user", "content": [{"type": "text", "text": earlier[1]}]}]
    return dict(name=name, images=images, messages=messages, prompt=text)


def qwen3_5_spec():
    template = open(os.path.join(REAL, "qwen3.5-0.8b", "chat_template.jinja")).read()
    tok = qwen3_5_tokenizer()
    ids = tok.convert_tokens_to_ids
    image_processor = Qwen2VLImageProcessorPil(min_pixels=256, max_pixels=4096, patch_size=4, merge_size=2,
                                               temporal_patch_size=2, resample=Image.Resampling.BICUBIC,
                                               image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = Qwen3VLProcessor(image_processor=image_processor, tokenizer=tok,
                                 video_processor=Qwen3VLVideoProcessor(), chat_template=template)
    tok = processor.tokenizer
    text = Qwen3_5TextConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, max_position_embeddings=2048, rms_norm_eps=1e-6,
        hidden_act="silu", layer_types=["linear_attention"] * 3 + ["full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        pad_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"))
    vision = Qwen3_5VisionConfig(depth=3, hidden_size=32, intermediate_size=48, num_heads=4, in_channels=3,
                                 patch_size=4, spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                                 num_position_embeddings=16, hidden_act="gelu_pytorch_tanh")
    config = Qwen3_5Config(text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
                           video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                           vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=True)
    return dict(
        name="qwen3.5-tiny", cls=Qwen3_5ForConditionalGeneration, config=config, processor=processor, seed=1500,
        std=0.2, connector=lambda m: m.model.visual.merger, text_model=lambda m: m.model.language_model,
        generation=dict(eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>")),
        image_token="<|image_pad|>",
        cases=[
            case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            case("two_images", [f"{IMAGES}/chelsea.png", f"{IMAGES}/astronaut.png"],
                 "What differs between the two images?"),
            case("earlier_turn", [f"{IMAGES}/chelsea.png"], "What is in this photo?",
                 earlier=("A cat.", "What color is the cat?")),
            case("text_only", [], "Hello, who are you?"),
        ])
