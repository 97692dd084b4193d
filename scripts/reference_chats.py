"""Multi-turn chats with images through transformers, on the committed tiny VLM checkpoints (`tessera generate
--messages` and `Model::encode_chat` are tested against this).

For each model below, conversations in the Hugging Face chat format (system, user, assistant and user turns, images
in an earlier turn and in the last one, the image sources written in the forms a user writes them: `image`, `url`,
`path`) are run through `processor.apply_chat_template(..., add_generation_prompt=True)` (rendered string and
token ids) and `model.generate` (16 greedy steps, EOS ignored, f32, eager attention). Writes
tests/fixtures/vlm/chats.json: per model and chat, the messages exactly as given (image paths relative to the
repository root), the rendered prompt, its ids, the 16 greedy ids and their smallest top-1/top-2 margin.

Dev-time only, no network: /work/py/bin/python scripts/reference_chats.py
"""
import json
import os

import torch
import transformers
from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoProcessor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VLM = os.path.join(ROOT, "tests", "fixtures", "vlm")
N_NEW = 16


def chats():
    chelsea, coffee = "tests/fixtures/images/chelsea.png", "tests/fixtures/images/coffee.png"
    crop = "tests/fixtures/vlm/images/chelsea_crop_20x14.png"
    return {
        # The image in the first user turn only; the question that generation answers is text.
        "image_in_earlier_turn": [
            {"role": "system", "content": [{"type": "text", "text": "You are a careful assistant."}]},
            {"role": "user", "content": [{"type": "image", "path": crop},
                                         {"type": "text", "text": "What animal is this?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
            {"role": "user", "content": [{"type": "text", "text": "What color is it?"}]},
        ],
        # Images in two turns, the second given by `url` (a file path, as apply_chat_template accepts), text before
        # the image in the last turn.
        "images_in_two_turns": [
            {"role": "user", "content": [{"type": "image", "image": chelsea},
                                         {"type": "text", "text": "Describe it."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "A tabby cat on a rug."}]},
            {"role": "user", "content": [{"type": "text", "text": "And this one?"},
                                         {"type": "image", "url": coffee}]},
        ],
    }


def absolute(messages):
    out = []
    for m in messages:
        content = [dict(c, **{k: os.path.join(ROOT, c[k]) for k in ("image", "url", "path") if k in c})
                   for c in m["content"]]
        out.append(dict(m, content=content))
    return out


def run(model_name, name, messages):
    folder = os.path.join(VLM, model_name)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32,
                                                        attn_implementation="eager").eval()
    processor = AutoProcessor.from_pretrained(folder)
    # The PIL image processor, as the engine resizes (AutoProcessor picks torchvision's where installed).
    processor.image_processor = AutoImageProcessor.from_pretrained(folder, backend="pil")
    model.generation_config.eos_token_id = None
    rendered = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor.apply_chat_template(absolute(messages), add_generation_prompt=True, tokenize=True,
                                           return_dict=True, return_tensors="pt")
    ids = inputs["input_ids"]
    with torch.no_grad():
        gen = model.generate(**inputs, do_sample=False, max_new_tokens=N_NEW, output_logits=True,
                             return_dict_in_generate=True)
    new = gen.sequences[0, ids.shape[1]:]
    logits = torch.stack(gen.logits)[:, 0]
    assert torch.equal(logits.argmax(-1), new), name
    top = torch.topk(logits, 2, dim=-1).values
    margin = float((top[:, 0] - top[:, 1]).min())
    n_images = sum(c["type"] == "image" for m in messages for c in m["content"])
    print(f"{model_name} {name}: {ids.shape[1]} prompt tokens, {n_images} images, min margin {margin:.4f}")
    return dict(name=name, messages=messages, rendered=rendered, input_ids=ids[0].tolist(), greedy_ids=new.tolist(),
                min_greedy_margin=round(margin, 6))


def main():
    out = dict(transformers_version=transformers.__version__, eos_ignored=True, models={})
    for model_name in ("smolvlm-tiny", "llava-interleave-tiny", "gemma3-tiny", "qwen2-vl-tiny", "qwen2.5-vl-tiny",
                       "qwen3-vl-tiny"):
        out["models"][model_name] = [run(model_name, name, m) for name, m in chats().items()]
    with open(os.path.join(VLM, "chats.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
