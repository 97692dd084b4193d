"""gemma4-tiny: Gemma4ForConditionalGeneration with the real classes, for scripts/make_tiny_vlms.py.

Gemma4VisionModel (patches 2(x - 1/2) through input_proj plus learned column and row embeddings, layers with plain-weight
RMSNorms, q/k norms, a parameter-free value norm, scale 1 and a 2-D RoPE rotating each half of a head by one coordinate,
clipped linear layers, 2x2 average pooling times sqrt(width), standardization), embed_vision (parameter-free RMSNorm +
projection), and a Gemma 4 text model with every quirk of google/gemma-4-E2B: sliding layers of head size 16 and full
layers of 32 with proportional RoPE, the last two layers reusing the keys and values of layers 3 and 2 with double-wide
MLPs, per-layer inputs (PLE) of width 8, layer scalars, final logit soft-capping, and images attending both ways in
the sliding layers (use_bidirectional_attention "vision", as the larger Gemma 4 checkpoints set it).
Gemma4Processor over Gemma4ImageProcessorPil (patch 8, pooling 2, max_soft_tokens 70: the image resized keeping its
aspect to at most 280 patches, sides multiples of 16 px, bicubic, rescaled, not normalized), the chat template of
google/gemma-4-E2B-it (tests/fixtures/real_configs/gemma-4-e2b-it). The 451x300 photo takes 160x96 px: 20x12 patches,
10x6 = 60 image tokens; the square astronaut 128x128: 64.
"""
import os

import torch
from PIL import Image
from transformers import Gemma4Config, Gemma4ForConditionalGeneration, PreTrainedTokenizerFast
from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig, Gemma4VisionConfig
from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil
from transformers.models.gemma4.processing_gemma4 import Gemma4Processor
from transformers.models.gemma4.video_processing_gemma4 import Gemma4VideoProcessor

from make_tiny_vlms import IMAGES, REAL, append_special, randomize
from tiny_vlms.families import gemma_raw_tokenizer

GEMMA4_SPECIALS = ["<|turn>", "<turn|>", "<|image>", "<|image|>", "<image|>", "<|audio>", "<|audio|>", "<audio|>",
                   "<|video|>", "<|channel>", "<channel|>", "<|think|>", "<|tool>", "<tool|>", "<|tool_call>",
                   "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>']


def gemma4_tokenizer(raw=None):
    tok = raw or gemma_raw_tokenizer()
    append_special(tok, GEMMA4_SPECIALS)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<pad>",
        mask_token="<mask>", add_bos_token=True, add_eos_token=False,
        extra_special_tokens={"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
                              "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>"})


def case(name, images, text, earlier=None):
    # No system turn: the template writes a system message's content with `| trim`, which for a list of parts is
    # Python's repr of the list in transformers (a template quirk no chat front end relies on).
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    if earlier is not None:
        messages += [{"role": "assistant", "content": [{"type": "text", "text": earlier[0]}]},
                     {"role": "user", "content": [{"type": "text", "text": earlier[1]}]}]
    return dict(name=name, images=images, messages=messages, prompt=text)


def gemma4_randomize(model, seed, std=0.3):
    """randomize(), then what it cannot know: Gemma 4's RMSNorms scale by w (not 1 + w), its buffers (layer scalars,
    the clipped linears' bounds, the standardization) are random too."""
    randomize(model, seed, std)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                # x3 on the sublayer outputs' norms, as randomize() does for Gemma 2/3: otherwise the random sublayers
                # are drowned by the sqrt(width)-scaled embeddings.
                post = "post_attention_layernorm" in name or "post_feedforward_layernorm" in name
                p.copy_((3.0 if post else 1.0) + 0.1 * torch.randn(p.shape, generator=g))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
            elif name.endswith(("input_min", "output_min")):
                b.fill_(-1.5)
            elif name.endswith(("input_max", "output_max")):
                b.fill_(1.5)
            elif name.endswith("std_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
            elif name.endswith("std_scale"):
                b.copy_(1.0 + 0.1 * torch.randn(b.shape, generator=g))


def gemma4_spec(raw_tokenizer=None, kv_shared_layers=2):
    """gemma4-tiny; raw_tokenizer (the base vocabulary in place of gemma_raw_tokenizer()) and kv_shared_layers are
    gemma4-pair-tiny's changes (tiny_vlms/gemma4_pair.py)."""
    tok = gemma4_tokenizer(raw_tokenizer)
    ids = tok.convert_tokens_to_ids
    template = open(os.path.join(REAL, "gemma-4-e2b-it", "chat_template.jinja")).read()
    image_processor = Gemma4ImageProcessorPil(patch_size=8, pooling_kernel_size=2, max_soft_tokens=70,
                                              resample=Image.Resampling.BICUBIC)
    processor = Gemma4Processor(feature_extractor=Gemma4AudioFeatureExtractor(), image_processor=image_processor,
                                tokenizer=tok, video_processor=Gemma4VideoProcessor(), chat_template=template,
                                image_seq_length=70)
    tok = processor.tokenizer
    rope = {"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    text = Gemma4TextConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, global_head_dim=32, hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=2048, rms_norm_eps=1e-6, sliding_window=8, rope_parameters=rope,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2, final_logit_softcapping=30.0,
        use_bidirectional_attention="vision", vocab_size_per_layer_input=len(tok), hidden_size_per_layer_input=8,
        num_kv_shared_layers=kv_shared_layers, use_double_wide_mlp=True, tie_word_embeddings=True,
        bos_token_id=ids("<bos>"), eos_token_id=ids("<eos>"), pad_token_id=ids("<pad>"))
    vision = Gemma4VisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=4, head_dim=8, patch_size=8, pooling_kernel_size=2,
                                position_embedding_size=64, use_clipped_linears=True, standardize=True,
                                rope_parameters={"rope_type": "axial", "rope_theta": 100.0})
    config = Gemma4Config(text_config=text, vision_config=vision, audio_config=None, boi_token_id=ids("<|image>"),
                          eoi_token_id=ids("<image|>"), image_token_id=ids("<|image|>"),
                          video_token_id=ids("<|video|>"), boa_token_id=ids("<|audio>"),
                          eoa_token_index=ids("<audio|>"), audio_token_id=ids("<|audio|>"), tie_word_embeddings=True)
    return dict(
        name="gemma4-tiny", cls=Gemma4ForConditionalGeneration, config=config, processor=processor, seed=1620,
        std=0.15, randomize=gemma4_randomize,
        # The embedder's input: the pooled, standardized soft tokens of every image.
        connector=lambda m: m.model.embed_vision, text_model=lambda m: m.model.language_model,
        generation=dict(bos_token_id=ids("<bos>"), eos_token_id=[ids("<eos>"), ids("<turn|>")],
                        pad_token_id=ids("<pad>")),
        image_token="<|image|>", input_ablations={"causal_images": ["mm_token_type_ids"]},
        cases=[
            case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            case("two_images", [f"{IMAGES}/chelsea.png", f"{IMAGES}/astronaut.png"],
                 "What differs between the two images?"),
            case("earlier_turn", [f"{IMAGES}/chelsea.png"], "What is in this photo?",
                 earlier=("A cat.", "What color is the cat?")),
            case("text_only", [], "Hello, who are you?"),
        ])
