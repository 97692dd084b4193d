"""The tiny checkpoints of the families scripts/make_tiny_vlms.py built first (SmolVLM, LLaVA 1.5 and interleave,
PaliGemma 1 and 2, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma 3): each family's tokenizer and its spec (config, processor,
chat template and cases) for make_tiny_vlms.build. Imported by make_tiny_vlms.main, after that module has loaded.
"""
import json
import os

from PIL import Image
from tokenizers import AddedToken
from transformers import (CLIPVisionConfig, Gemma2Config, Gemma3Config, Gemma3ForConditionalGeneration, Gemma3Processor,
                          Gemma3TextConfig, GemmaConfig, Idefics3Config, Idefics3ForConditionalGeneration,
                          Idefics3Processor, Idefics3VisionConfig, LlamaConfig, LlavaConfig,
                          LlavaForConditionalGeneration, LlavaProcessor, PaliGemmaConfig,
                          PaliGemmaForConditionalGeneration, PaliGemmaProcessor, PreTrainedTokenizerFast, Qwen2Config,
                          SiglipVisionConfig)
from transformers.image_utils import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
from transformers.models.paligemma.processing_paligemma import EXTRA_TOKENS as PALIGEMMA_EXTRA_TOKENS
from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

from make_tiny_vlms import (DERIVED, GEMMA3_CHAT, IMAGES, QWEN2_VL_CHAT, REAL, TEXT, VISION, append_special, bpe,
                            chat_case, prefix_case, write_legacy)


def smolvlm_tokenizer():
    # SmolLM2 vocabulary: <|endoftext|> 0, <|im_start|> 1, <|im_end|> 2; SmolVLM appends <global-img>, <row_i_col_j>,
    # <fake_token_around_image>, <image>, ..., <end_of_utterance>. The tokenizer adds no BOS; the template writes it.
    tok = bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    rowcol = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]
    append_special(tok, ["<global-img>"] + rowcol + ["<fake_token_around_image>", "<image>", "<end_of_utterance>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<end_of_utterance>",
                                   pad_token="<|im_end|>", unk_token="<|endoftext|>", add_bos_token=False,
                                   add_eos_token=False,
                                   extra_special_tokens=["<fake_token_around_image>", "<image>", "<end_of_utterance>"])


def llava_tokenizer():
    # Llama vocabulary: <unk> 0, <s> 1, </s> 2, BOS added by the post-processor; llava-hf appends <image>, <pad>.
    tok = bpe(["<unk>", "<s>", "</s>"])
    append_special(tok, ["<image>", "<pad>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", add_bos_token=True, add_eos_token=False,
                                   extra_special_tokens={"image_token": "<image>"})


def qwen_tokenizer():
    # Qwen vocabulary: BPE first, then <|endoftext|>, <|im_start|>, <|im_end|>; llava-interleave appends <image>.
    # No BOS token at all.
    tok = bpe([])
    append_special(tok, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None, add_bos_token=False,
                                   add_eos_token=False, extra_special_tokens={"image_token": "<image>"})


GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]


def gemma_raw_tokenizer():
    # Gemma vocabulary: <pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4, ...; BOS added by the post-processor.
    return bpe(GEMMA_SPECIALS)


def paligemma_tokenizer():
    # PaliGemma: Gemma vocabulary, then <loc0000>..<loc1023>, <seg000>..<seg127> (plain tokens), then <image>.
    tok = gemma_raw_tokenizer()
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in PALIGEMMA_EXTRA_TOKENS])
    append_special(tok, ["<image>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                   pad_token="<pad>", mask_token="<mask>", add_bos_token=True, add_eos_token=False,
                                   extra_special_tokens=["<image>"])


def qwen2_vl_tokenizer():
    # Qwen vocabulary: BPE first, then <|endoftext|>, <|im_start|>, <|im_end|>, the vision markers and pads.
    tok = bpe([])
    append_special(tok, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                         "<|image_pad|>", "<|video_pad|>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None, add_bos_token=False, add_eos_token=False,
                                   extra_special_tokens={"image_token": "<|image_pad|>", "video_token": "<|video_pad|>"})


def gemma3_tokenizer():
    # Gemma 3: Gemma vocabulary, then <start_of_image>, <end_of_image> and the image soft token.
    tok = gemma_raw_tokenizer()
    append_special(tok, ["<start_of_image>", "<end_of_image>", "<image_soft_token>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                   pad_token="<pad>", mask_token="<mask>", add_bos_token=True, add_eos_token=False,
                                   extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                                         "image_token": "<image_soft_token>"})


# ----------------------------------------------------------------------------------------------------------------
# Weights

def smolvlm_legacy(folder, ref, tensors):
    legacy = write_legacy(folder, ref, tensors)
    print(f"smolvlm-tiny-legacy: files {sorted(os.listdir(legacy))} (chelsea case checked through AutoProcessor)")


def smolvlm_spec():
    tok = smolvlm_tokenizer()
    ids = tok.convert_tokens_to_ids
    template = json.load(open(os.path.join(REAL, "smolvlm-256m-instruct", "chat_template.json")))["chat_template"]
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=True, size={"longest_edge": 64}, max_image_size={"longest_edge": 32},
        resample=Image.Resampling.LANCZOS, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    # image_seq_len = (image_size / patch_size)^2 / scale_factor^2 = (32/4)^2 / 4 = 16
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tok, image_seq_len=16,
                                  chat_template=template)
    tok = processor.tokenizer
    text = LlamaConfig(vocab_size=len(tok), **TEXT, rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
                       bos_token_id=ids("<|im_start|>"), eos_token_id=ids("<end_of_utterance>"),
                       pad_token_id=ids("<|im_end|>"))
    vision = Idefics3VisionConfig(**VISION, image_size=32, patch_size=4)
    # pad_token_id: Idefics3Config keeps a top-level pad id of its own (written as "_pad_token_id", 128002 unless given)
    config = Idefics3Config(text_config=text, vision_config=vision, scale_factor=2, image_token_id=ids("<image>"),
                            tie_word_embeddings=True, pad_token_id=ids("<|im_end|>"))
    crop = os.path.join(DERIVED, "chelsea_crop_20x14.png")
    return dict(
        name="smolvlm-tiny", cls=Idefics3ForConditionalGeneration, config=config, processor=processor, seed=100,
        after=smolvlm_legacy,
        connector=lambda m: m.model.connector, text_model=lambda m: m.model.text_model,
        generation=dict(bos_token_id=ids("<|im_start|>"), eos_token_id=ids("<end_of_utterance>"),
                        pad_token_id=ids("<|im_end|>")),
        cases=[
            chat_case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            chat_case("two_images", [f"{IMAGES}/chelsea.png", f"{IMAGES}/coffee.png"], "What differs?"),
            chat_case("small", [crop], "What color is the cat?"),
            chat_case("text_only", [], "Hello, who are you?"),
        ])


def llava_spec():
    tok = llava_tokenizer()
    ids = tok.convert_tokens_to_ids
    template = open(os.path.join(REAL, "llava-1.5-7b-hf", "chat_template.jinja")).read()
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": 30}, crop_size={"height": 30, "width": 30}, do_center_crop=True,
        resample=Image.Resampling.BICUBIC, image_mean=OPENAI_CLIP_MEAN, image_std=OPENAI_CLIP_STD)
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=6,
                               vision_feature_select_strategy="default", num_additional_image_tokens=1,
                               image_token="<image>", chat_template=template)
    text = LlamaConfig(vocab_size=len(tok), **TEXT, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                       bos_token_id=ids("<s>"), eos_token_id=ids("</s>"), pad_token_id=ids("<pad>"))
    vision = CLIPVisionConfig(**VISION, image_size=30, patch_size=6, hidden_act="quick_gelu", projection_dim=64)
    config = LlavaConfig(text_config=text, vision_config=vision, image_token_index=ids("<image>"),
                         vision_feature_layer=-2, vision_feature_select_strategy="default",
                         projector_hidden_act="gelu", tie_word_embeddings=False, image_seq_length=25)
    return dict(
        name="llava-tiny", cls=LlavaForConditionalGeneration, config=config, processor=processor, seed=200,
        connector=lambda m: m.model.multi_modal_projector, text_model=lambda m: m.model.language_model,
        generation=dict(bos_token_id=ids("<s>"), eos_token_id=ids("</s>"), pad_token_id=ids("<pad>")),
        cases=[
            chat_case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            chat_case("coffee", [f"{IMAGES}/coffee.png"], "What is in the cup?"),
            chat_case("text_only", [], "Hello, who are you?"),
        ])


def llava_interleave_spec():
    tok = qwen_tokenizer()
    ids = tok.convert_tokens_to_ids
    template = json.load(open(os.path.join(REAL, "llava-interleave-qwen-7b-hf", "chat_template.json")))["chat_template"]
    image_processor = SiglipImageProcessorPil(
        size={"height": 28, "width": 28}, resample=Image.Resampling.BICUBIC, image_mean=[0.5] * 3,
        image_std=[0.5] * 3)
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=7,
                               vision_feature_select_strategy="full", num_additional_image_tokens=0,
                               image_token="<image>", chat_template=template)
    text = Qwen2Config(vocab_size=len(tok), **TEXT, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       tie_word_embeddings=False, use_sliding_window=False, sliding_window=None,
                       bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
                       pad_token_id=ids("<|endoftext|>"))
    vision = SiglipVisionConfig(**VISION, image_size=28, patch_size=7, hidden_act="gelu_pytorch_tanh",
                                layer_norm_eps=1e-6, vision_use_head=False)
    config = LlavaConfig(text_config=text, vision_config=vision, image_token_index=ids("<image>"),
                         vision_feature_layer=-1, vision_feature_select_strategy="full",
                         projector_hidden_act="gelu", tie_word_embeddings=False, image_seq_length=16)
    return dict(
        name="llava-interleave-tiny", cls=LlavaForConditionalGeneration, config=config, processor=processor,
        seed=300, connector=lambda m: m.model.multi_modal_projector, text_model=lambda m: m.model.language_model,
        generation=dict(bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
                        pad_token_id=ids("<|endoftext|>")),
        cases=[
            chat_case("astronaut", [f"{IMAGES}/astronaut.png"], "Describe this image."),
            chat_case("two_images", [f"{IMAGES}/chelsea.png", f"{IMAGES}/astronaut.png"],
                      "What differs between the two images?"),
        ])


def gemma_text_config(vocab, ids):
    return GemmaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=1, head_dim=16, hidden_act="gelu_pytorch_tanh",
                       max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0,
                       tie_word_embeddings=True, bos_token_id=ids("<bos>"), eos_token_id=ids("<eos>"),
                       pad_token_id=ids("<pad>"))


def paligemma_spec():
    tok = paligemma_tokenizer()
    image_processor = SiglipImageProcessorPil(
        size={"height": 32, "width": 32}, resample=Image.Resampling.BICUBIC, image_mean=[0.5] * 3,
        image_std=[0.5] * 3)
    image_processor.image_seq_length = 64  # (32 / 4)^2; PaliGemmaProcessor reads it from the image processor
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=tok)
    tok = processor.tokenizer
    ids = tok.convert_tokens_to_ids
    text = gemma_text_config(len(tok), ids)
    vision = SiglipVisionConfig(**VISION, image_size=32, patch_size=4, hidden_act="gelu_pytorch_tanh",
                                layer_norm_eps=1e-6, vision_use_head=False)
    config = PaliGemmaConfig(text_config=text, vision_config=vision, image_token_index=ids("<image>"),
                             projection_dim=64, hidden_size=64, vocab_size=len(tok))
    return dict(
        name="paligemma-tiny", cls=PaliGemmaForConditionalGeneration, config=config, processor=processor, seed=400,
        connector=lambda m: m.model.multi_modal_projector, text_model=lambda m: m.model.language_model,
        generation=dict(bos_token_id=ids("<bos>"), eos_token_id=ids("<eos>"), pad_token_id=ids("<pad>")),
        cases=[
            prefix_case("caption", [f"{IMAGES}/chelsea.png"], "caption en"),
            prefix_case("image_prefix", [f"{IMAGES}/chelsea.png"], "<image>answer en What is this?"),
            prefix_case("no_prompt", [f"{IMAGES}/chelsea.png"], ""),
        ])


def gemma2_text_config(vocab, ids, sliding_window):
    # An attention soft-cap small enough to bite (scores reach several units with these weights), a query scale
    # that is not head_dim's.
    return Gemma2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_activation="gelu_pytorch_tanh",
                        max_position_embeddings=2048, rms_norm_eps=1e-6, rope_parameters={"rope_type": "default",
                        "rope_theta": 10000.0}, query_pre_attn_scalar=24, sliding_window=sliding_window,
                        attn_logit_softcapping=3.0, final_logit_softcapping=30.0, tie_word_embeddings=True,
                        bos_token_id=ids("<bos>"), eos_token_id=ids("<eos>"), pad_token_id=ids("<pad>"))


# What each Gemma 2 rule contributes: the text config changed so, greedy ids recomputed.
GEMMA2_ABLATIONS = {
    "no_attn_softcap": dict(attn_logit_softcapping=None),
    "no_sliding_window": dict(layer_types=["full_attention"] * 4),
}


def paligemma2_spec():
    spec = paligemma_spec()
    tok = spec["processor"].tokenizer
    ids = tok.convert_tokens_to_ids
    config = spec["config"]
    # 64 image tokens + the prompt: a window of 8 drops most of the image for the generated tokens.
    config.text_config = gemma2_text_config(len(tok), ids, sliding_window=8)
    spec.update(name="paligemma2-tiny", seed=600, ablations=GEMMA2_ABLATIONS, config=config)
    return spec


def qwen2_vl_spec():
    from transformers import (Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor, Qwen2VLTextConfig,
                              Qwen2VLVisionConfig)
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    tok = qwen2_vl_tokenizer()
    ids = tok.convert_tokens_to_ids
    image_processor = Qwen2VLImageProcessorPil(min_pixels=256, max_pixels=4096, patch_size=4, merge_size=2,
                                               temporal_patch_size=2, resample=Image.Resampling.BICUBIC,
                                               image_mean=list(OPENAI_CLIP_MEAN), image_std=list(OPENAI_CLIP_STD))
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor  # needs torchvision
    processor = Qwen2VLProcessor(image_processor=image_processor, tokenizer=tok, video_processor=Qwen2VLVideoProcessor(),
                                 chat_template=QWEN2_VL_CHAT)
    tok = processor.tokenizer
    text = Qwen2VLTextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                             rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                 "mrope_section": [2, 3, 3]},
                             bos_token_id=None, eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>"))
    vision = Qwen2VLVisionConfig(depth=2, embed_dim=32, hidden_size=64, num_heads=4, mlp_ratio=2, in_channels=3,
                                 patch_size=4, spatial_merge_size=2, temporal_patch_size=2, hidden_act="quick_gelu")
    config = Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
                           video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                           vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=True)
    return dict(
        name="qwen2-vl-tiny", cls=Qwen2VLForConditionalGeneration, config=config, processor=processor, seed=1000,
        connector=lambda m: m.model.visual.merger, text_model=lambda m: m.model.language_model,
        generation=dict(eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>")),
        image_token="<|image_pad|>",
        cases=[
            chat_case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            chat_case("two_images", [f"{IMAGES}/chelsea.png", f"{IMAGES}/coffee.png"],
                      "What differs between the two images?"),
            chat_case("text_only", [], "Hello, who are you?"),
        ])


def qwen2_5_vl_spec():
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor,
                              Qwen2_5_VLTextConfig, Qwen2_5_VLVisionConfig)
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor  # needs torchvision
    tok = qwen2_vl_tokenizer()
    ids = tok.convert_tokens_to_ids
    image_processor = Qwen2VLImageProcessorPil(min_pixels=256, max_pixels=4096, patch_size=4, merge_size=2,
                                               temporal_patch_size=2, resample=Image.Resampling.BICUBIC,
                                               image_mean=list(OPENAI_CLIP_MEAN), image_std=list(OPENAI_CLIP_STD))
    processor = Qwen2_5_VLProcessor(image_processor=image_processor, tokenizer=tok,
                                    video_processor=Qwen2VLVideoProcessor(), chat_template=QWEN2_VL_CHAT)
    tok = processor.tokenizer
    text = Qwen2_5_VLTextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                                rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                    "mrope_section": [2, 3, 3]},
                                bos_token_id=None, eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>"))
    # window_size 16 px = 2 merged tokens of 8 px: a 6x9 grid of merged tokens has 3x5 windows, the last row and column
    # partial.
    vision = Qwen2_5_VLVisionConfig(depth=4, hidden_size=32, intermediate_size=48, num_heads=4, in_channels=3,
                                    patch_size=4, spatial_merge_size=2, temporal_patch_size=2, window_size=16,
                                    out_hidden_size=64, fullatt_block_indexes=[1, 3], hidden_act="silu")
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
                              video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                              vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=True)
    return dict(
        name="qwen2.5-vl-tiny", cls=Qwen2_5_VLForConditionalGeneration, config=config, processor=processor,
        # std 0.2: with 0.3 the four gated-MLP vision blocks grow activations to ~50, where f32 rounding alone reaches
        # the 1e-4 tolerance of the feature tests; 0.2 keeps them in the range of the other fixtures.
        seed=1100, std=0.2, connector=lambda m: m.model.visual.merger, text_model=lambda m: m.model.language_model,
        generation=dict(eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>")),
        image_token="<|image_pad|>",
        cases=[
            chat_case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            chat_case("two_images", [f"{IMAGES}/astronaut.png", f"{IMAGES}/chelsea.png"],
                      "What differs between the two images?"),
            chat_case("text_only", [], "Hello, who are you?"),
        ])


def qwen3_vl_spec():
    from transformers import (Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor, Qwen3VLTextConfig,
                              Qwen3VLVisionConfig)
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor  # needs torchvision
    real = os.path.join(REAL, "qwen3-vl-2b-instruct")
    template_file = os.path.join(real, "chat_template.json")
    if os.path.exists(template_file):
        template = json.load(open(template_file))["chat_template"]
    elif os.path.exists(os.path.join(real, "chat_template.jinja")):
        template = open(os.path.join(real, "chat_template.jinja")).read()
    else:
        # Not obtainable offline when this was written: Qwen2-VL's template writes the same image markup.
        template = QWEN2_VL_CHAT
    tok = qwen2_vl_tokenizer()
    ids = tok.convert_tokens_to_ids
    image_processor = Qwen2VLImageProcessorPil(min_pixels=256, max_pixels=4096, patch_size=4, merge_size=2,
                                               temporal_patch_size=2, resample=Image.Resampling.BICUBIC,
                                               image_mean=[0.5] * 3, image_std=[0.5] * 3)
    processor = Qwen3VLProcessor(image_processor=image_processor, tokenizer=tok,
                                 video_processor=Qwen3VLVideoProcessor(), chat_template=template)
    tok = processor.tokenizer
    text = Qwen3VLTextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
                             rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                                                 "mrope_section": [2, 3, 3], "mrope_interleaved": True},
                             pad_token_id=ids("<|endoftext|>"))
    vision = Qwen3VLVisionConfig(depth=3, hidden_size=32, intermediate_size=48, num_heads=4, in_channels=3, patch_size=4,
                                 spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                                 num_position_embeddings=16, deepstack_visual_indexes=[0, 1],
                                 hidden_act="gelu_pytorch_tanh")
    config = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
                           video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                           vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=True)
    return dict(
        name="qwen3-vl-tiny", cls=Qwen3VLForConditionalGeneration, config=config, processor=processor, seed=1200,
        std=0.2, connector=lambda m: m.model.visual.merger, text_model=lambda m: m.model.language_model,
        generation=dict(eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>")),
        image_token="<|image_pad|>",
        cases=[
            chat_case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            chat_case("two_images", [f"{IMAGES}/astronaut.png", f"{IMAGES}/chelsea.png"],
                      "What differs between the two images?"),
            chat_case("text_only", [], "Hello, who are you?"),
        ])


def gemma3_spec():
    tok = gemma3_tokenizer()
    ids = tok.convert_tokens_to_ids
    # Pan-and-scan settings saved with the processor but off by default (do_pan_and_scan unset), as in the real
    # checkpoint; the "pan_and_scan" case turns it on.
    image_processor = Gemma3ImageProcessorPil(size={"height": 32, "width": 32}, resample=Image.Resampling.BILINEAR,
                                              image_mean=[0.5] * 3, image_std=[0.5] * 3,
                                              pan_and_scan_min_crop_size=8, pan_and_scan_max_num_crops=4,
                                              pan_and_scan_min_ratio_to_activate=1.2)
    # 8x8 patches of 4 px, pooled 2x2 into 16 tokens per image.
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tok, image_seq_length=16,
                                chat_template=GEMMA3_CHAT)
    tok = processor.tokenizer
    # The image soft token (and <start_of_image>, <end_of_image>) are vocabulary entries, as in google/gemma-3-4b-it
    # (<image_soft_token> 262144 of 262208), so llama.cpp's converter takes the checkpoint.
    # query_pre_attn_scalar is head_dim, as in the real 1B/4B/12B (llama.cpp scales by 1/sqrt(head_dim) there).
    text = Gemma3TextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            hidden_activation="gelu_pytorch_tanh", max_position_embeddings=2048, rms_norm_eps=1e-6,
                            query_pre_attn_scalar=16, sliding_window=8,
                            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                "rope_theta": 1000000.0},
                                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
                            tie_word_embeddings=True, bos_token_id=ids("<bos>"), eos_token_id=ids("<eos>"),
                            pad_token_id=ids("<pad>"))
    vision = SiglipVisionConfig(**VISION, image_size=32, patch_size=4, hidden_act="gelu_pytorch_tanh",
                                layer_norm_eps=1e-6, vision_use_head=False)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=16,
                          boi_token_index=ids("<start_of_image>"), eoi_token_index=ids("<end_of_image>"),
                          image_token_index=ids("<image_soft_token>"), tie_word_embeddings=True)
    return dict(
        name="gemma3-tiny", cls=Gemma3ForConditionalGeneration, config=config, processor=processor, seed=800,
        connector=lambda m: m.model.multi_modal_projector, text_model=lambda m: m.model.language_model,
        generation=dict(bos_token_id=ids("<bos>"), eos_token_id=[ids("<eos>"), ids("<end_of_turn>")],
                        pad_token_id=ids("<pad>")),
        image_token="<image_soft_token>", input_ablations={"causal_images": ["token_type_ids"]},
        cases=[
            chat_case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            chat_case("two_images", [f"{IMAGES}/chelsea.png", f"{IMAGES}/astronaut.png"],
                      "What differs between the two images?"),
            chat_case("text_only", [], "Hello, who are you?"),
            # 451x300: two crops of 226x300 besides the whole image; astronaut (square) is not split.
            dict(chat_case("pan_and_scan", [f"{IMAGES}/chelsea.png", f"{IMAGES}/astronaut.png"],
                           "What differs between the two images?"), pan_and_scan=True),
        ])
