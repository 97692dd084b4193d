"""mistral3-tiny: Mistral3ForConditionalGeneration with the real classes, for scripts/make_tiny_vlms.py.

PixtralVisionModel (patch Conv2d without bias, ln_pre RMSNorm, 2-D RoPE over (row, col) patch positions with the
row angles on the even and the column angles on the odd frequencies, RMSNorm + SiLU-gated MLP layers, a
block-diagonal mask over the images of a batch), Mistral3MultiModalProjector (RMSNorm, Mistral3PatchMerger: each 2x2
block of patches unfolded channel-major into one vector and projected back to the tower's width, then linear + GELU
+ linear), a Mistral text model with head_dim stated apart from hidden/heads as Mistral-Small-3.1's is (32 here, not
64/4); PixtralProcessor over PixtralImageProcessorPil (the image fitted within longest_edge 112 keeping its aspect,
each side then rounded up to a multiple of patch 7 x merge 2 = 14, bicubic; [IMG] per merged patch, [IMG_BREAK]
after each row, the last one replaced by [IMG_END]) and the real Mistral-Small-3.1-24B-Instruct-2503 chat template
(tests/fixtures/real_configs/mistral-small-3.1-24b-instruct-2503).

Every case starts with a system turn: without one the template writes its default system message, which holds
today's date (strftime_now), and the reference would change every day. The 451x300 photo takes 84x112 px (6x8 merged
patches: 48 image tokens + 5 breaks + the end); the square astronaut 112x112 (8x8: 64). Two images go through the
tower as one sequence, each attending only to itself, as transformers runs them.
"""
import os

from PIL import Image
from transformers import (Mistral3Config, Mistral3ForConditionalGeneration, MistralConfig, PixtralProcessor,
                          PixtralVisionConfig, PreTrainedTokenizerFast)
from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

from make_tiny_vlms import IMAGES, REAL, TEXT, bpe

# The first ids of Mistral's Tekken vocabulary (mistralai/Mistral-Small-3.1-24B-Instruct-2503): [IMG] is 10,
# [IMG_BREAK] 12, [IMG_END] 13.
MISTRAL_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
                    "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]
SYSTEM = {"role": "system", "content": [{"type": "text", "text": "You are a small assistant that can see images."}]}


def mistral_tokenizer():
    # BOS added by the post-processor, as the real tokenizer does (the template writes it too; the processor then
    # tokenizes the rendered prompt without special tokens).
    tok = bpe(MISTRAL_SPECIALS)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", add_bos_token=True, add_eos_token=False)


def case(name, images, text, earlier=None):
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
    messages = [SYSTEM, {"role": "user", "content": content}]
    if earlier is not None:
        messages += [{"role": "assistant", "content": [{"type": "text", "text": earlier[0]}]},
                     {"role": "user", "content": [{"type": "text", "text": earlier[1]}]}]
    return dict(name=name, images=images, messages=messages, prompt=text)


def mistral3_pair_spec():
    spec = mistral3_spec(vision_layers=3)
    spec["cases"] = [c for c in spec["cases"] if c["name"] != "earlier_turn"]
    return dict(spec, name="mistral3-pair-tiny", seed=1500)


def mistral3_spec(vision_layers=2):
    tok = mistral_tokenizer()
    ids = tok.convert_tokens_to_ids
    assert (ids("[IMG]"), ids("[IMG_BREAK]"), ids("[IMG_END]")) == (10, 12, 13)
    template = open(os.path.join(REAL, "mistral-small-3.1-24b-instruct-2503", "chat_template.jinja")).read()
    image_processor = PixtralImageProcessorPil(
        size={"longest_edge": 112}, patch_size={"height": 7, "width": 7}, resample=Image.Resampling.BICUBIC,
        image_mean=[0.48145466, 0.4578275, 0.40821073], image_std=[0.26862954, 0.26130258, 0.27577711])
    processor = PixtralProcessor(image_processor=image_processor, tokenizer=tok, patch_size=7, spatial_merge_size=2,
                                 chat_template=template)
    tok = processor.tokenizer
    text = MistralConfig(vocab_size=len(tok), **TEXT, head_dim=32, rms_norm_eps=1e-5, rope_theta=1000000000.0,
                         sliding_window=None, tie_word_embeddings=False, hidden_act="silu",
                         bos_token_id=ids("<s>"), eos_token_id=ids("</s>"), pad_token_id=ids("<pad>"))
    vision = PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=vision_layers,
                                 num_attention_heads=4, num_channels=3, image_size=112, patch_size=7, hidden_act="silu",
                                 rope_parameters={"rope_type": "axial", "rope_theta": 10000.0})
    config = Mistral3Config(text_config=text, vision_config=vision, image_token_index=ids("[IMG]"),
                            projector_hidden_act="gelu", vision_feature_layer=-1, multimodal_projector_bias=False,
                            spatial_merge_size=2, tie_word_embeddings=False)
    return dict(
        name="mistral3-tiny", cls=Mistral3ForConditionalGeneration, config=config, processor=processor, seed=1400,
        # Weights of std 0.2 (not 0.3): the projector's three layers otherwise make image tokens ~40x the text
        # embeddings, which carries float rounding into the logits past 1e-4.
        std=0.2,
        # The projector's input: the tower's last layer, every image's patches in one sequence.
        connector=lambda m: m.model.multi_modal_projector, text_model=lambda m: m.model.language_model,
        generation=dict(bos_token_id=ids("<s>"), eos_token_id=ids("</s>"), pad_token_id=ids("<pad>")),
        image_token="[IMG]",
        cases=[
            case("chelsea", [f"{IMAGES}/chelsea.png"], "Describe this image."),
            case("two_images", [f"{IMAGES}/chelsea.png", f"{IMAGES}/astronaut.png"],
                 "What differs between the two images?"),
            case("earlier_turn", [f"{IMAGES}/chelsea.png"], "What is in this photo?",
                 earlier=("A cat.", "What color is the cat?")),
            case("text_only", [], "Hello, who are you?"),
        ])


# The folders this module writes, for scripts/make_tiny_vlms.py.
SPECS = {"mistral3-tiny": mistral3_spec, "mistral3-pair-tiny": mistral3_pair_spec}
