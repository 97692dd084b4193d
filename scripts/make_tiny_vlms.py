"""Tiny random-weight vision-language models of real Hugging Face architectures, with transformers' reference outputs.

Writes tests/fixtures/vlm/<name>/ for
  smolvlm-tiny           Idefics3ForConditionalGeneration (Idefics3 vision, pixel-shuffle connector, Llama text,
                         tied embeddings) + Idefics3Processor (PIL image processor, image splitting)
  llava-tiny             LlavaForConditionalGeneration (CLIP vision, layer -2, "default" strategy, Llama text)
                         + LlavaProcessor (PIL CLIP image processor: resize shortest edge + center crop)
  llava-interleave-tiny  LlavaForConditionalGeneration (SigLIP vision, layer -1, "full" strategy, Qwen2 text)
                         + LlavaProcessor (PIL SigLIP image processor)
  paligemma-tiny         PaliGemmaForConditionalGeneration (SigLIP vision, Gemma text, prefix-LM mask)
                         + PaliGemmaProcessor
  paligemma2-tiny        the same wrapper over Gemma 2 text (attention and final logit soft-capping, sliding and
                         global layers alternating from a sliding one with a window shorter than the prompt,
                         query_pre_attn_scalar, post-attention and pre/post-FFN norms); its reference.json also
                         holds, per case, the greedy ids with each Gemma 2 rule removed ("ablations")
  qwen2-vl-tiny          Qwen2VLForConditionalGeneration (Conv3d patches of 4 px over 2 duplicated frames, 2-D vision
                         RoPE, 2x2 patch merger, a Qwen2 text model with M-RoPE sections [2, 3, 3]) +
                         Qwen2VLProcessor (smart_resize to multiples of 8 between 256 and 4096 pixels, the real
                         Qwen2-VL chat template); non-square images, two images, text after them
  qwen2.5-vl-tiny        Qwen2_5_VLForConditionalGeneration: the same processor; RMSNorm and gated-MLP vision blocks,
                         windowed attention (windows of 2x2 merged tokens, most photos several windows, edges partial)
                         in blocks 0 and 2, full attention in blocks 1 and 3 (fullatt_block_indexes [1, 3]), the
                         window order undone after the merger
  qwen3-vl-tiny          Qwen3VLForConditionalGeneration (biased patch embedding, learned 4x4 position table
                         interpolated to each grid, DeepStack from vision blocks 0 and 1 into text layers 0 and 1,
                         interleaved M-RoPE, a Qwen3 text model with q/k norms) + Qwen3VLProcessor (the real
                         Qwen3-VL chat template from tests/fixtures/real_configs/qwen3-vl-2b-instruct when that
                         folder exists, else Qwen2-VL's, which writes the same image markup)
  internvl-tiny          InternVLForConditionalGeneration (layer-scaled InternViT with a CLS token, pixel shuffle 0.5,
                         LayerNorm + MLP projector, Qwen2 text) + InternVLProcessor (GotOcr2 crop_to_patches: aspect-ratio
                         tile grid + thumbnail; <img><IMG_CONTEXT>...</img>); built in scripts/tiny_vlms/internvl.py
  mistral3-tiny          Mistral3ForConditionalGeneration (Pixtral tower: 2-D RoPE, gated MLP, images attending only to
                         themselves; RMSNorm + 2x2 patch merger + MLP projector, Mistral text) + PixtralProcessor ([IMG]
                         rows, [IMG_BREAK], [IMG_END]); also mistral3-pair-tiny (3 tower layers); tiny_vlms/mistral3.py
  qwen3.5-tiny           Qwen3_5ForConditionalGeneration (Qwen3-VL's tower without DeepStack; Gated DeltaNet layers
                         x3 then a gated attention layer, partial rotary, (1 + w) norms) + Qwen3VLProcessor and the
                         real Qwen3.5 chat template; scripts/tiny_vlms/qwen3_5.py
  gemma4-tiny            Gemma4ForConditionalGeneration (Gemma 4 tower, k x k pooling, PLE, shared keys and values, two head
                         sizes, proportional RoPE) + Gemma4Processor; tiny_vlms/gemma4.py; also gemma4-pair-tiny (a
                         byte-fallback BPE tokenizer as real Gemma's, for llama.cpp's pair: tiny_vlms/gemma4_pair.py)
  minicpm-v4.6-tiny      MiniCPMV4_6ForConditionalGeneration + MiniCPMV4_6Processor; scripts/tiny_vlms/minicpmv4_6.py;
                         also minicpm-v4.6-pair-tiny (9 slices, a 70x70 position table: as llama.cpp runs the pair)
  gemma3-tiny            Gemma3ForConditionalGeneration (SigLIP vision, 2x2 average pooling, mm_soft_emb_norm, a
                         Gemma 3 text model: q/k norms, 5 local : 1 global layers with their own RoPE bases and linear
                         scaling on the global one, a window of 8 under 16 image tokens, images attending to themselves
                         both ways; the image tokens are vocabulary entries and query_pre_attn_scalar is head_dim,
                         as in the real 4B) + Gemma3Processor (<start_of_image> expanded, the real Gemma 3 template);
                         ablation: causal images (no token_type_ids), prompt logits as <case>.logits_causal_images
Each folder holds exactly what `model.save_pretrained` and `processor.save_pretrained` write with the installed
transformers (config.json, generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
processor_config.json, chat_template.jinja), plus
  reference.json         per case: images, messages, prompt, rendered prompt, input_ids (token_type_ids for
                         PaliGemma), pixel_values shape, number of image tokens, 16 greedy ids (EOS ignored) and the
                         smallest top1-top2 logit margin over those 16 steps
  reference.safetensors  per case: <case>.pixel_values (as the processor returns it), <case>.vision_hidden (the
                         vision-tower output that feeds the projector/connector), <case>.image_features (the rows
                         spliced into the text embeddings, (num_image_tokens, text_hidden)), <case>.logits (the
                         last 8 prompt positions)
All outputs are float32 with eager attention, computed from the model and processor reloaded from disk.

Also writes
  tests/fixtures/vlm/smolvlm-tiny-legacy/  the same model in the transformers 4.x folder layout (flat
                         preprocessor_config.json, 4.x processor_config.json holding only image_seq_len,
                         chat_template.json); its reference.json repeats "chelsea" (checked through AutoProcessor)
  tests/fixtures/vlm/images/               small images derived from tests/fixtures/images (a 20x14 crop)
  tests/fixtures/tiny/gemma/               a text-only GemmaForCausalLM in the format of scripts/make_tiny_models.py
  tests/fixtures/tiny/gemma2/              a text-only Gemma2ForCausalLM (window 6, 12-token prompt), same format
  tests/fixtures/tiny/gemma3/              a text-only Gemma3ForCausalLM (5 local layers with a window of 6, 1 global)

Dev-time only, needs no network: /work/py/bin/python scripts/make_tiny_vlms.py [NAME ...] (default: all; names are
the folder names above, e.g. paligemma2-tiny gemma2). Each family's tokenizer and spec live in scripts/tiny_vlms/
(families.py for the first nine, then one module a family); this file builds, runs and writes them.
"""
import copy
import json
import os
import shutil
import sys

import torch
import transformers
from PIL import Image
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoImageProcessor, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor,
                          AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig, Gemma2ForCausalLM, GemmaForCausalLM,
                          PaliGemmaForConditionalGeneration, PreTrainedTokenizerFast)
from transformers.image_utils import load_image

from make_tiny_models import greedy  # the same greedy loop as the text fixtures (scripts/ is on sys.path)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "vlm")
IMAGES = "tests/fixtures/images"
DERIVED = "tests/fixtures/vlm/images"
REAL = os.path.join(ROOT, "tests", "fixtures", "real_configs")
N_NEW = 16
N_LOGITS = 8

CORPUS = """The quick brown fox jumps over the lazy dog. A small model reads the text and predicts the next token.
Images are cut into patches; each patch becomes a token. Attention mixes information between positions.
Keys and values are cached so that each new token costs one step. The capital of France is Paris.
Once upon a time there was a little robot who liked to count: one, two, three, four, five.
Describe this image. What is in this photo? The cat is sitting on a red chair next to the dog.
What color is the cat? The cat is orange, brown and white. The dog is black and the sky is blue.
A cup of coffee on a white plate. An astronaut in a white suit holds a flag. What differs between the two images?
Hello, who are you? I am a small assistant that can see images and answer questions about them.
caption en a cat looking at the camera. answer en a photo of a cup of coffee. What is this? It is a cat.
def add(a, b):\n    return a + b\n""" * 20

# Gemma's chat template (gemma-*-it); <start_of_turn>/<end_of_turn> are special tokens of the Gemma tokenizer.
GEMMA_CHAT = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
              "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
              "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
              "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
              "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
              "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")

# Qwen2-VL's chat template (Qwen/Qwen2-VL-*-Instruct): each image becomes <|vision_start|><|image_pad|><|vision_end|>.
QWEN2_VL_CHAT = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in "
    "content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == "
    "'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video "
    "{{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}"
    "{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}")

# Gemma 3's chat template (google/gemma-3-*-it): images become <start_of_image>, which the processor expands.
GEMMA3_CHAT = (
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n")

TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=2048)
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)


# ----------------------------------------------------------------------------------------------------------------
# Tokenizers: a small byte-level BPE trained on CORPUS, the family's special tokens at the ids they have in the
# real checkpoints relative to the base vocabulary (before it, or appended after it).

def bpe(first_specials, vocab_size=480):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(first_specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS.split("\n"), trainer)
    return tok


def append_special(tok, tokens):
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tokens])


def randomize(model, seed, std=0.3):
    """std-0.3 Gaussian weights; norm weights near their identity value (1, or 0 for Gemma's (1 + w) RMSNorm)."""
    g = torch.Generator().manual_seed(seed)
    sandwich = str(getattr(model.config.get_text_config(), "model_type", "")).startswith(("gemma2", "gemma3"))
    norm = {}
    for mname, m in model.named_modules():
        cls = type(m).__name__
        if isinstance(m, torch.nn.LayerNorm) or "RMSNorm" in cls:
            for pname, _ in m.named_parameters(recurse=False):
                # (1 + w) norms: Gemma's, and Qwen3.5's (not its DeltaNet's gated norm).
                norm[f"{mname}.{pname}" if mname else pname] = "Gemma" in cls or cls == "Qwen3_5RMSNorm"
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if name in norm and name.endswith("weight") and ("post_attention_layernorm" in name or
                                                              "post_feedforward_layernorm" in name) and sandwich:
                # Gemma 2/3's norms on the sublayer outputs: x4 (3 + w), or the random sublayers are drowned by the
                # sqrt(width)-scaled embeddings and the model repeats one token whatever the rules.
                p.copy_(3.0 + 0.3 * r)
            elif name in norm and name.endswith("weight"):
                p.copy_((0.0 if norm[name] else 1.0) + 0.1 * r)
            elif name in norm:
                p.copy_(0.1 * r)
            else:
                p.copy_(std * r)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------------------------------------------
# Families

def chat_case(name, images, text):
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": text}]
    return dict(name=name, images=images, messages=[{"role": "user", "content": content}], prompt=text)


def prefix_case(name, images, prompt):
    return dict(name=name, images=images, messages=None, prompt=prompt)


# ----------------------------------------------------------------------------------------------------------------
# Reference computation

def with_paths(messages, images):
    """The messages with each {"type": "image"} given the image's file, as users pass them to apply_chat_template."""
    paths = iter(os.path.join(ROOT, p) for p in images)
    out = []
    for m in messages:
        content = [dict(c, path=next(paths)) if c["type"] == "image" else dict(c) for c in m["content"]]
        out.append(dict(m, content=content))
    return out


MODEL_INPUTS = ("input_ids", "attention_mask", "pixel_values", "pixel_attention_mask", "token_type_ids", "image_grid_thw",
                "mm_token_type_ids", "image_sizes", "image_position_ids", "target_sizes")


def prepare(processor, case, family):
    images = [load_image(os.path.join(ROOT, p)) for p in case["images"]]
    if case.get("pan_and_scan"):
        # Gemma 3's pan-and-scan. Gemma3Processor.__call__ (transformers 5.23) does not pass do_pan_and_scan on to its
        # image processor (its own default, False, wins), so the processor's parts are called as it would call them:
        # the image processor with pan-and-scan on, then the processor's own replace_image_token per image.
        rendered = processor.apply_chat_template(case["messages"], add_generation_prompt=True, tokenize=False)
        pixels = processor.image_processor(images=images, do_pan_and_scan=True, return_tensors="pt")
        pieces = rendered.split(processor.boi_token)
        assert len(pieces) == len(images) + 1, case["name"]
        text = pieces[0]
        for i, piece in enumerate(pieces[1:]):
            text += processor.replace_image_token(pixels, i) + piece
        tokens = processor.tokenizer(text, add_special_tokens=False, return_tensors="pt")
        image_token_id = processor.tokenizer.convert_tokens_to_ids(processor.tokenizer.image_token)
        inputs = dict(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"],
                      pixel_values=pixels["pixel_values"],
                      token_type_ids=(tokens["input_ids"] == image_token_id).long())
        assert int(pixels["num_crops"][0]) == 2 and int(pixels["num_crops"][1]) == 0, pixels["num_crops"]
        return rendered, inputs
    if family == "paligemma":
        rendered = processor.prepare_inputs_layout(images=images[0], text=case["prompt"])[1][0]
        inputs = processor(text=case["prompt"], images=images[0], return_tensors="pt")
    else:
        rendered = processor.apply_chat_template(case["messages"], add_generation_prompt=True, tokenize=False)
        inputs = processor.apply_chat_template(with_paths(case["messages"], case["images"]),
                                               add_generation_prompt=True, tokenize=True, return_dict=True,
                                               return_tensors="pt")
        # apply_chat_template adds no special tokens of its own to a template that writes BOS (Gemma 3).
        bos = processor.tokenizer.bos_token
        direct = processor(text=rendered, images=images or None, return_tensors="pt",
                           add_special_tokens=not (bos and rendered.startswith(bos)))
        assert torch.equal(inputs["input_ids"], direct["input_ids"]), case["name"]
        if images:
            assert torch.equal(inputs["pixel_values"], direct["pixel_values"]), case["name"]
    return rendered, {k: v for k, v in inputs.items() if k in MODEL_INPUTS}


def run_case(spec, model, processor, case):
    family = "paligemma" if spec["cls"] is PaliGemmaForConditionalGeneration else "chat"
    image_token_id = model.config.image_token_id
    rendered, inputs = prepare(processor, case, family)
    ids = inputs["input_ids"]
    captured = {}

    def connector_hook(_module, args, kwargs):
        captured["vision_hidden"] = (args[0] if args else next(iter(kwargs.values()))).detach().clone()

    def text_hook(_module, _args, kwargs):
        captured["inputs_embeds"] = kwargs["inputs_embeds"].detach().clone()

    hooks = [spec["text_model"](model).register_forward_pre_hook(text_hook, with_kwargs=True)]
    if "vision_output" in spec:
        # The tower's output (picked from it) rather than the connector's input (InternVL shuffles in between).
        tower, pick = spec["vision_output"]
        hooks.append(tower(model).register_forward_hook(
            lambda _m, _a, out: captured.__setitem__("vision_hidden", pick(out).detach().clone())))
    else:
        hooks.append(spec["connector"](model).register_forward_pre_hook(connector_hook, with_kwargs=True))
    with torch.no_grad():
        out = model(**inputs)
    for h in hooks:
        h.remove()

    with torch.no_grad():
        gen = model.generate(**inputs, do_sample=False, max_new_tokens=N_NEW, output_logits=True,
                             return_dict_in_generate=True)
    new = gen.sequences[0, ids.shape[1]:]
    step_logits = torch.stack(gen.logits)[:, 0]
    assert new.shape[0] == N_NEW and torch.equal(step_logits.argmax(-1), new), case["name"]
    top = torch.topk(step_logits, 2, dim=-1).values
    margin = float((top[:, 0] - top[:, 1]).min())

    # The same 16 steps recomputed in one full forward without a cache (PaliGemma: generated tokens are suffix,
    # token_type_ids 1, exactly as generate extends them) must pick the same tokens.
    full = dict(inputs)
    full["input_ids"] = torch.cat([ids, new[None, :-1]], dim=1)
    full["attention_mask"] = torch.ones_like(full["input_ids"])
    if "token_type_ids" in full:
        # PaliGemma: generated tokens are suffix (1); Gemma 3: text (0, 1 marks image tokens).
        suffix = torch.ones_like if family == "paligemma" else torch.zeros_like
        full["token_type_ids"] = torch.cat([inputs["token_type_ids"], suffix(new[None, :-1])], dim=1)
    if "mm_token_type_ids" in full:  # Qwen2-VL: generated tokens are text (0)
        full["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], torch.zeros_like(new[None, :-1])], dim=1)
    with torch.no_grad():
        recomputed = model(**full).logits[0, ids.shape[1] - 1:]
    assert torch.equal(recomputed.argmax(-1), new), case["name"]
    assert torch.allclose(recomputed, step_logits, atol=1e-4), (case["name"], (recomputed - step_logits).abs().max())

    tensors = {f"{case['name']}.logits": out.logits[0, -N_LOGITS:]}
    n_image = int((ids[0] == image_token_id).sum())
    if "pixel_values" in inputs:
        tensors[f"{case['name']}.pixel_values"] = inputs["pixel_values"]
        tensors[f"{case['name']}.vision_hidden"] = captured["vision_hidden"]
        features = captured["inputs_embeds"][0][ids[0] == image_token_id]
        assert features.shape == (n_image, model.config.get_text_config().hidden_size)
        tensors[f"{case['name']}.image_features"] = features
    record = dict(name=case["name"], images=case["images"], messages=case["messages"], prompt=case["prompt"],
                  rendered=rendered, input_ids=ids[0].tolist())
    if case.get("pan_and_scan"):
        record["pan_and_scan"] = True
    if "token_type_ids" in inputs:
        record["token_type_ids"] = inputs["token_type_ids"][0].tolist()
    record.update(
        pixel_values_shape=list(inputs["pixel_values"].shape) if "pixel_values" in inputs else None,
        num_image_tokens=n_image, greedy_ids=new.tolist(), min_greedy_margin=round(margin, 6))
    return record, tensors


def build(spec):
    folder = os.path.join(OUT, spec["name"])
    for attempt in range(20):
        seed = spec["seed"] + attempt
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        torch.manual_seed(seed)
        model = spec["cls"](spec["config"]).eval()
        spec.get("randomize", randomize)(model, seed, std=spec.get("std", 0.3))
        for k, v in spec["generation"].items():
            setattr(model.generation_config, k, v)
        model.save_pretrained(folder)
        save_processor(spec, folder)
        params = n_params(model)

        model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32,
                                                            attn_implementation="eager").eval()
        assert type(model) is spec["cls"]
        processor = AutoProcessor.from_pretrained(folder)
        # The PIL image processor, as the engine resizes (AutoProcessor picks torchvision's where it is installed,
        # which Qwen2-VL's video processor needs).
        processor.image_processor = AutoImageProcessor.from_pretrained(folder, backend="pil")
        assert type(processor.image_processor).__name__.endswith("Pil"), type(processor.image_processor)
        image_token = spec.get("image_token", "<image>")
        assert model.config.image_token_id == processor.tokenizer.convert_tokens_to_ids(image_token)
        vocab = model.config.get_text_config().vocab_size
        assert vocab == len(processor.tokenizer)
        model.generation_config.eos_token_id = None  # EOS ignored: 16 plain argmax steps
        records, tensors = [], {}
        for case in spec["cases"]:
            record, t = run_case(spec, model, processor, case)
            records.append(record)
            tensors.update(t)
        for name, change in spec.get("ablations", {}).items():
            # The layers read these fields when built: change a copy of the config, then build.
            config = copy.deepcopy(model.config)
            for k, v in change.items():
                setattr(config.get_text_config(), k, v)
            ablated = spec["cls"](config).eval()
            ablated.load_state_dict(model.state_dict())
            ablated.generation_config.eos_token_id = None
            for record, case in zip(records, spec["cases"]):
                _, inputs = prepare(processor, case, "paligemma")
                with torch.no_grad():
                    gen = ablated.generate(**inputs, do_sample=False, max_new_tokens=N_NEW)
                record.setdefault("ablations", {})[name] = gen[0, inputs["input_ids"].shape[1]:].tolist()
            changed = [r["name"] for r in records if r["ablations"][name] != r["greedy_ids"]]
            print(f"  {spec['name']}: {name} changes the greedy ids of {changed}")
            assert changed, (spec["name"], name, "the rule must change some case's greedy ids")
        for name, dropped in spec.get("input_ablations", {}).items():
            # The prompt's last logits with the inputs that carry a rule dropped: <case>.logits_<name>.
            for record, case in zip(records, spec["cases"]):
                if not case["images"]:
                    continue
                _, inputs = prepare(processor, case, "chat")
                inputs = {k: v for k, v in inputs.items() if k not in dropped}
                with torch.no_grad():
                    logits = model(**inputs).logits[0, -N_LOGITS:]
                tensors[f"{case['name']}.logits_{name}"] = logits
                shift = float((logits - tensors[f"{case['name']}.logits"]).abs().max())
                record.setdefault("ablation_logit_shift", {})[name] = round(shift, 4)
                print(f"  {spec['name']}/{case['name']}: {name} moves the last logits by {shift:.3f}")
                assert shift > 0.1, (spec["name"], case["name"], name, "the rule must matter")
        margin = min(r["min_greedy_margin"] for r in records)
        if margin > 1e-3:
            break
        print(f"{spec['name']}: seed {seed} min margin {margin:.2e}, retrying")
    else:
        raise SystemExit(f"{spec['name']}: no seed with clear greedy margins")
    ref = dict(transformers_version=transformers.__version__, model=spec["name"],
               architecture=spec["cls"].__name__, seed=seed, param_count=params,
               image_token_id=model.config.image_token_id, eos_ignored=True, logits_positions=N_LOGITS,
               cases=records)
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    save_file({k: v.detach().to(torch.float32).contiguous() for k, v in tensors.items()},
              os.path.join(folder, "reference.safetensors"))
    return folder, ref, tensors


def save_processor(spec, folder):
    processor = spec["processor"]
    if spec["cls"] is not PaliGemmaForConditionalGeneration:
        processor.save_pretrained(folder)
        return
    # PaliGemmaProcessor switches its tokenizer's BOS off in memory (it writes <bos> into the text itself), which
    # rewrites the tokenizer's post-processor; saved like that, the tokenizer would no longer add BOS on its own.
    # The real checkpoint's tokenizer does, so save it with the post-processor prepending <bos> (transformers 5 keeps
    # this only in tokenizer.json; it never writes add_bos_token). Loading the processor switches it off again.
    processor.tokenizer.add_bos_token = True
    processor.save_pretrained(folder)
    processor.tokenizer.add_bos_token = False
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok("caption en").input_ids[0] == tok.convert_tokens_to_ids("<bos>")


# ----------------------------------------------------------------------------------------------------------------
# Legacy (transformers 4.x) folder layout for SmolVLM

def write_legacy(src, ref, tensors):
    dst = os.path.join(OUT, "smolvlm-tiny-legacy")
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for f in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), os.path.join(dst, f))
    proc = json.load(open(os.path.join(src, "processor_config.json")))
    image = dict(proc.pop("image_processor"))
    image["processor_class"] = proc["processor_class"]
    assert image["image_processor_type"] == "Idefics3ImageProcessor"
    with open(os.path.join(dst, "preprocessor_config.json"), "w") as f:
        json.dump(image, f, indent=2, sort_keys=True)
        f.write("\n")
    # 4.x wrote the processor's own arguments (here only image_seq_len) to a flat processor_config.json, as the
    # real HuggingFaceTB/SmolVLM-256M-Instruct has it; without it Idefics3Processor falls back to image_seq_len 169.
    with open(os.path.join(dst, "processor_config.json"), "w") as f:
        json.dump({"image_seq_len": proc["image_seq_len"], "processor_class": proc["processor_class"]}, f,
                  indent=2, sort_keys=True)
        f.write("\n")
    template = open(os.path.join(src, "chat_template.jinja")).read()
    with open(os.path.join(dst, "chat_template.json"), "w") as f:
        json.dump({"chat_template": template}, f, indent=2)
        f.write("\n")

    processor = AutoProcessor.from_pretrained(dst)
    processor.image_processor = AutoImageProcessor.from_pretrained(dst, backend="pil")
    assert type(processor.image_processor).__name__ == "Idefics3ImageProcessorPil"
    case = next(c for c in ref["cases"] if c["name"] == "chelsea")
    spec_case = chat_case("chelsea", case["images"], case["prompt"])
    rendered, inputs = prepare(processor, spec_case, "chat")
    assert rendered == case["rendered"]
    assert inputs["input_ids"][0].tolist() == case["input_ids"]
    assert torch.equal(inputs["pixel_values"], tensors["chelsea.pixel_values"])
    legacy_ref = dict(transformers_version=transformers.__version__, model="smolvlm-tiny-legacy", legacy_layout=True,
                      same_weights_as="smolvlm-tiny", reference_tensors="../smolvlm-tiny/reference.safetensors",
                      cases=[case])
    with open(os.path.join(dst, "reference.json"), "w") as f:
        json.dump(legacy_ref, f, indent=1)
    return dst


# ----------------------------------------------------------------------------------------------------------------
# Text-only Gemma in the tests/fixtures/tiny format (see scripts/make_tiny_models.py)

def build_gemma_text(variant="gemma"):
    from tiny_vlms.families import gemma2_text_config, gemma_raw_tokenizer, gemma_text_config  # see main()
    raw = gemma_raw_tokenizer()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                  pad_token="<pad>", mask_token="<mask>", add_bos_token=True, add_eos_token=False)
    ids = tok.convert_tokens_to_ids
    folder = os.path.join(ROOT, "tests", "fixtures", "tiny", variant)
    if variant == "gemma2":
        # A 12-token prompt and 16 new tokens under a window of 6: the sliding layers drop most of the context.
        config, cls, first_seed = gemma2_text_config(len(tok), ids, sliding_window=6), Gemma2ForCausalLM, 700
    elif variant == "gemma3":
        # 6 layers (5 local with a window of 6, 1 global), q/k norms, two RoPE bases, linear scaling on the global.
        config = Gemma3TextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                  hidden_activation="gelu_pytorch_tanh", max_position_embeddings=2048,
                                  rms_norm_eps=1e-6, query_pre_attn_scalar=24, sliding_window=6,
                                  rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                      "rope_theta": 1000000.0},
                                                   "sliding_attention": {"rope_type": "default",
                                                                         "rope_theta": 10000.0}},
                                  tie_word_embeddings=True, bos_token_id=ids("<bos>"), eos_token_id=ids("<eos>"),
                                  pad_token_id=ids("<pad>"))
        config, cls, first_seed = config, Gemma3ForCausalLM, 900
    else:
        config, cls, first_seed = gemma_text_config(len(tok), ids), GemmaForCausalLM, 500
    for attempt in range(20):
        seed = first_seed + attempt
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        torch.manual_seed(seed)
        model = cls(config).eval()
        randomize(model, seed)
        model.generation_config.bos_token_id = ids("<bos>")
        model.generation_config.eos_token_id = ids("<eos>")
        model.generation_config.pad_token_id = ids("<pad>")
        model.save_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
        prompt = tok("The capital of France is Paris. Keys and values").input_ids[:12]  # starts with <bos>
        out, margin = greedy(model, prompt, N_NEW)
        if margin > 1e-3:
            break
    else:
        raise SystemExit(f"{variant}: no seed with clear greedy margins")
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0]
    tok.backend_tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "chat_template": GEMMA_CHAT},
                  f, indent=2)
    ref = {
        "transformers_version": transformers.__version__,
        "variant": variant,
        "prompt_ids": prompt,
        "logits": [[round(float(x), 6) for x in row] for row in logits],
        "greedy_ids": out,
        "min_greedy_margin": round(margin, 6),
    }
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(f"{variant} (tests/fixtures/tiny/{variant}): params {n_params(model)}, prompt {len(prompt)} ids, greedy {out}, "
          f"margin {margin:.4f}, files {sorted(os.listdir(folder))}")


# ----------------------------------------------------------------------------------------------------------------

def derive_images():
    os.makedirs(os.path.join(ROOT, DERIVED), exist_ok=True)
    chelsea = Image.open(os.path.join(ROOT, IMAGES, "chelsea.png")).convert("RGB")
    chelsea.crop((180, 80, 200, 94)).save(os.path.join(ROOT, DERIVED, "chelsea_crop_20x14.png"))


def folder_size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main():
    # These import this module's helpers, so not at the top.
    from tiny_vlms.families import (gemma3_spec, llava_interleave_spec, llava_spec, paligemma2_spec, paligemma_spec,
                                    qwen2_5_vl_spec, qwen2_vl_spec, qwen3_vl_spec, smolvlm_spec)
    from tiny_vlms.internvl import internvl_spec
    from tiny_vlms.gemma4_pair import SPECS as gemma4_specs
    from tiny_vlms.mistral3 import SPECS as mistral3_specs
    from tiny_vlms.qwen3_5 import qwen3_5_spec
    from tiny_vlms.minicpmv4_6 import minicpmv4_6_pair_spec, minicpmv4_6_spec
    wanted = set(sys.argv[1:])
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    derive_images()
    specs = {"smolvlm-tiny": smolvlm_spec, "llava-tiny": llava_spec, "llava-interleave-tiny": llava_interleave_spec,
             "paligemma-tiny": paligemma_spec, "paligemma2-tiny": paligemma2_spec, "gemma3-tiny": gemma3_spec,
             "qwen2-vl-tiny": qwen2_vl_spec, "qwen2.5-vl-tiny": qwen2_5_vl_spec, "qwen3-vl-tiny": qwen3_vl_spec,
             "internvl-tiny": internvl_spec, **mistral3_specs, "qwen3.5-tiny": qwen3_5_spec, **gemma4_specs,
             "minicpm-v4.6-tiny": minicpmv4_6_spec, "minicpm-v4.6-pair-tiny": minicpmv4_6_pair_spec}
    for name, make in specs.items():
        if wanted and name not in wanted:
            continue
        spec = make()
        assert spec["name"] == name
        folder, ref, tensors = build(spec)
        print(f"{spec['name']}: seed {ref['seed']}, params {ref['param_count']}, "
              f"vocab {spec['config'].get_text_config().vocab_size}, files {sorted(os.listdir(folder))}")
        for c in ref["cases"]:
            print(f"  {c['name']}: {len(c['input_ids'])} input ids, {c['num_image_tokens']} image tokens, "
                  f"pixel_values {c['pixel_values_shape']}, greedy {c['greedy_ids']}, margin {c['min_greedy_margin']}")
        if "after" in spec:  # what is written from the folder (smolvlm-tiny-legacy, minicpm-v4.6-tiny's tower)
            spec["after"](folder, ref, tensors)
    for variant in ("gemma", "gemma2", "gemma3"):
        if not wanted or variant in wanted:
            build_gemma_text(variant)
    print(f"tests/fixtures/vlm: {folder_size(OUT) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
