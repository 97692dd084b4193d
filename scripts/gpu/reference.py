"""bf16 / f16 references for the GPU suite's `half_precision` tests: transformers runs the committed
tiny checkpoints in the same dtype on the same device that tessera's suite then uses.

For every tiny text checkpoint (tests/fixtures/tiny/*, the prompt of its reference.json) and every
tiny VLM chat of tests/fixtures/vlm/chats.json (the messages rendered and tokenized by the model's
processor, PIL image processor as the engine resizes): 16 greedy steps with EOS ignored, and per step
the chosen id, its log-probability and the top-1/top-2 margin. Writes one JSON file (--out).

On the GPU machine (scripts/gpu/device.sh calls it): python3 scripts/gpu/reference.py --device cuda
Dry run on a CPU: python3 scripts/gpu/reference.py --device cpu --dtypes bf16 --out /tmp/half.json
"""
import argparse
import json
import os
import sys

import torch
import transformers
from transformers import (AutoImageProcessor, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor,
                          AutoTokenizer)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from reference_chats import absolute  # noqa: E402  (the same image-path handling as the f32 references)

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
N_NEW = 16


def steps(model, inputs, prompt_len):
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        gen = model.generate(**inputs, do_sample=False, max_new_tokens=N_NEW, output_logits=True,
                             return_dict_in_generate=True)
    new = gen.sequences[0, prompt_len:]
    logits = torch.stack(gen.logits)[:, 0].float()
    assert torch.equal(logits.argmax(-1), new)
    top = torch.topk(logits, 2, dim=-1).values
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, new[:, None])[:, 0]
    return dict(greedy_ids=new.tolist(), margins=[round(float(m), 5) for m in top[:, 0] - top[:, 1]],
                logprobs=[round(float(x), 5) for x in logprobs])


def text_refs(dtype, device):
    out = {}
    tiny = os.path.join(ROOT, "tests", "fixtures", "tiny")
    for name in sorted(os.listdir(tiny)):
        folder = os.path.join(tiny, name)
        if not os.path.exists(os.path.join(folder, "config.json")):
            continue
        with open(os.path.join(folder, "reference.json")) as f:
            prompt = json.load(f)["prompt_ids"]
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager").to(device).eval()
        ids = torch.tensor([prompt], device=device)
        out[name] = dict(prompt_ids=prompt, **steps(model, dict(input_ids=ids), len(prompt)))
        print(f"text {name}: margins from {min(out[name]['margins']):.3f}", file=sys.stderr)
    return out


def load_processor(folder, fallback=False):
    """The checkpoint's processor with the PIL image processor (as the engine resizes). Qwen2-VL's
    processors also load a video processor, which needs torchvision; where that is missing (or
    `fallback`), the processor is built from its image processor, tokenizer and template alone."""
    image_processor = AutoImageProcessor.from_pretrained(folder, backend="pil")
    if not fallback:
        try:
            processor = AutoProcessor.from_pretrained(folder)
            processor.image_processor = image_processor
            return processor
        except ImportError as e:
            print(f"{os.path.basename(folder)}: {str(e).strip().splitlines()[0]} (still images need none of it)",
                  file=sys.stderr)
    with open(os.path.join(folder, "processor_config.json")) as f:
        config = json.load(f)
    base = getattr(transformers, config.pop("processor_class"))

    class cls(base):  # noqa: N801  (the processor, with no video processor where it asks for one)
        def check_argument_for_proper_class(self, name, arg):
            return None if arg is None else super().check_argument_for_proper_class(name, arg)

    # The processor's own settings (image_seq_len, ...), without its sub-processors' configs.
    settings = {k: v for k, v in config.items() if not isinstance(v, dict)}
    with open(os.path.join(folder, "chat_template.jinja")) as f:
        template = f.read()
    return cls(image_processor=image_processor, tokenizer=AutoTokenizer.from_pretrained(folder), chat_template=template,
               **settings)


def vlm_refs(dtype, device):
    with open(os.path.join(ROOT, "tests", "fixtures", "vlm", "chats.json")) as f:
        chats = json.load(f)["models"]
    out = {}
    for name, cases in chats.items():
        folder = os.path.join(ROOT, "tests", "fixtures", "vlm", name)
        model = AutoModelForImageTextToText.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
        model = model.to(device).eval()
        processor = load_processor(folder)
        out[name] = []
        for case in cases:
            inputs = processor.apply_chat_template(absolute(case["messages"]), add_generation_prompt=True,
                                                   tokenize=True, return_dict=True, return_tensors="pt")
            inputs = {k: (v.to(device, dtype) if v.is_floating_point() else v.to(device)) for k, v in inputs.items()}
            ids = inputs["input_ids"]
            out[name].append(dict(name=case["name"], messages=case["messages"], input_ids=ids[0].tolist(),
                                  **steps(model, inputs, ids.shape[1])))
            print(f"vlm {name} {case['name']}: margins from {min(out[name][-1]['margins']):.3f}", file=sys.stderr)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", nargs="+", default=["bf16", "f16"], choices=sorted(DTYPES))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    device = torch.device(args.device)
    result = dict(transformers_version=transformers.__version__, torch_version=torch.__version__,
                  device=torch.cuda.get_device_name(device) if device.type == "cuda" else args.device,
                  text={}, vlm={})
    for name in args.dtypes:
        result["text"][name] = text_refs(DTYPES[name], device)
        result["vlm"][name] = vlm_refs(DTYPES[name], device)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
