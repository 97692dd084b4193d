"""internvl-tiny: InternVLForConditionalGeneration with the real classes, for scripts/make_tiny_vlms.py.

InternVLVisionModel (CLS token, learned positions, layer scale lambda_1/lambda_2, LayerNorm before and after
attention, q/k/v with biases, no q/k norm: InternVL3-1B's settings), pixel shuffle by downsample_ratio 0.5, the
LayerNorm + linear + GELU + linear projector, a Qwen2 text model; InternVLProcessor over GotOcr2ImageProcessorPil
(crop_to_patches: the tile grid whose aspect ratio is closest to the image's among at most max_patches tiles, bicubic
resizes, and a thumbnail of the whole image when there is more than one tile) and the real InternVL3-1B-hf chat
template (`<IMG_CONTEXT>\\n` per image, expanded to `<img>` + `<IMG_CONTEXT>` x 4 per tile + `</img>`).

Tiles of 28 px, patches of 7 px: 4x4 patches and a CLS token per tile, 2x2 = 4 image tokens per tile after the
shuffle. max_patches 6: the 451x300 photo takes a 3x2 grid and a thumbnail (7 tiles, 28 tokens); the square
astronaut one tile and no thumbnail (4 tokens). The image processor's settings are saved with crop_to_patches
false, as the real checkpoint's are: InternVLProcessor turns it on (its images_kwargs default), which the build
checks.
"""
import os

from PIL import Image
from transformers import (GotOcr2ImageProcessorPil, InternVLConfig, InternVLForConditionalGeneration,
                          InternVLProcessor, InternVLVisionConfig, PreTrainedTokenizerFast, Qwen2Config)

from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor  # needs torchvision

from make_tiny_vlms import IMAGES, REAL, TEXT, append_special, bpe, chat_case

IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def internvl_tokenizer():
    # Qwen2.5 vocabulary: BPE, then <|endoftext|>, <|im_start|>, <|im_end|>; InternVL appends <img>, </img>,
    # <IMG_CONTEXT> (and <video>), named on the tokenizer as start/end/context image tokens.
    tok = bpe([])
    append_special(tok, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>",
                         "<video>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None, add_bos_token=False,
                                   add_eos_token=False,
                                   extra_special_tokens={"start_image_token": "<img>", "end_image_token": "</img>",
                                                         "context_image_token": "<IMG_CONTEXT>",
                                                         "video_token": "<video>"})


def earlier_turn_case():
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this photo?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        {"role": "user", "content": [{"type": "text", "text": "What color is the cat?"}]},
    ]
    return dict(name="earlier_turn", images=[f"{IMAGES}/chelsea.png"], messages=messages,
                prompt="What is in this photo?")


def internvl_spec():
    tok = internvl_tokenizer()
    ids = tok.convert_tokens_to_ids
    template = open(os.path.join(REAL, "internvl3-1b-hf", "chat_template.jinja")).read()
    image_processor = GotOcr2ImageProcessorPil(
        size={"height": 28, "width": 28}, resample=Image.Resampling.BICUBIC, image_mean=IMAGENET_MEAN,
        image_std=IMAGENET_STD, crop_to_patches=False, min_patches=1, max_patches=6)
    # InternVLProcessor insists on its video processor (which needs torchvision); videos are not used.
    processor = InternVLProcessor(image_processor=image_processor, tokenizer=tok,
                                  video_processor=InternVLVideoProcessor(), image_seq_length=4, chat_template=template)
    tok = processor.tokenizer
    text = Qwen2Config(vocab_size=len(tok), **TEXT, rms_norm_eps=1e-6, rope_theta=1000000.0,
                       tie_word_embeddings=True, use_sliding_window=False, sliding_window=None,
                       bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
                       pad_token_id=ids("<|endoftext|>"))
    vision = InternVLVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  image_size=28, patch_size=7, attention_bias=True, use_qk_norm=False,
                                  norm_type="layer_norm", layer_norm_eps=1e-6, layer_scale_init_value=0.1,
                                  use_mean_pooling=True, hidden_act="gelu")
    config = InternVLConfig(text_config=text, vision_config=vision, image_token_id=ids("<IMG_CONTEXT>"),
                            image_seq_length=4, downsample_ratio=0.5, projector_hidden_act="gelu",
                            vision_feature_layer=-1, vision_feature_select_strategy="default",
                            tie_word_embeddings=True)
    return dict(
        name="internvl-tiny", cls=InternVLForConditionalGeneration, config=config, processor=processor, seed=1300,
        # The tower's output without its CLS token, what the pixel shuffle reads.
        vision_output=(lambda m: m.model.vision_tower, lambda out: out.last_hidden_state[:, 1:]),
        connector=lambda m: m.model.multi_modal_projector, text_model=lambda m: m.model.language_model,
        generation=dict(eos_token_id=ids("<|im_end|>"), pad_token_id=ids("<|endoftext|>")),
        image_token="<IMG_CONTEXT>",
        cases=[
            chat_case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            chat_case("two_images", [f"{IMAGES}/chelsea.png", f"{IMAGES}/astronaut.png"],
                      "What differs between the two images?"),
            earlier_turn_case(),
            chat_case("text_only", [], "Hello, who are you?"),
        ])
