"""Reference outputs for the real SmolLM2-135M-Instruct weights, from Hugging Face transformers.

Writes tests/fixtures/smollm2_reference.json: for several raw and chat-templated prompts, the
prompt ids, 40 greedy ids (EOS ignored) and the top-5 raw logits at every generated position,
computed in float32 from the dequantized Q4_1 GGUF; plus tokenization cases and rendered chat
templates.

transformers' GGUF loader drops SmolLM's digit pre-tokenizer, so ids come from the model's real
tokenizer layout: the GGUF vocabulary with pre_tokenizer Sequence[Digits(individual_digits),
ByteLevel] (what HuggingFaceTB/SmolLM2-135M-Instruct's tokenizer.json has).

Dev-time only (needs torch + transformers + gguf):
    scripts/fetch_smollm2.sh
    /work/py/bin/python scripts/reference_smollm2.py
"""
import json
import os
import sys

import torch
import transformers
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "models", "smollm2-135m-instruct")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(ROOT, "tests", "fixtures", "smollm2_reference.json")
NEW_TOKENS = 40

RAW = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "In 1969, the first humans landed on",
    "Water boils at a temperature of",
]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "user", "content": "List three primary colors."}],
]
TEXTS = [
    "a,\n  2.7b",
    "Hello world! 12345 apples cost $3.50.",
    "  leading spaces and\ttabs\n\nnewlines",
    "naïve café 東京 🙂",
    "def f(x):\n    return x**2",
    "<|im_start|>user\nhi<|im_end|>",
]
TEMPLATE_CASES = [
    ([{"role": "user", "content": "Hi"}], True),
    ([{"role": "user", "content": "Hi"}], False),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "How are you?"}], True),
]


def main():
    torch.manual_seed(0)
    hf_tok = AutoTokenizer.from_pretrained(DIR, gguf_file=GGUF)
    backend = hf_tok.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]
    )
    model = AutoModelForCausalLM.from_pretrained(DIR, gguf_file=GGUF, torch_dtype=torch.float32)
    model.eval()

    def encode(text, special):
        return backend.encode(text, add_special_tokens=special).ids

    prompts = []
    cases = [("raw", t, None) for t in RAW] + [("chat", None, m) for m in CHATS]
    for i, (mode, text, messages) in enumerate(cases):
        if mode == "chat":
            text = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            ids = encode(text, False)
        else:
            ids = encode(text, True)
        seq = torch.tensor([ids])
        greedy, top5 = [], []
        with torch.no_grad():
            out = model(seq, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1]
            for _ in range(NEW_TOKENS):
                vals, idx = torch.topk(logits, 5)
                top5.append([[int(a), round(float(b), 6)] for a, b in zip(idx, vals)])
                nxt = int(torch.argmax(logits))
                greedy.append(nxt)
                out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1]
        eos = hf_tok.eos_token_id
        cut = greedy.index(eos) if eos in greedy else len(greedy)
        entry = {
            "name": f"{mode}-{i}",
            "mode": mode,
            "text": text,
            "prompt_ids": ids,
            "greedy_ids": greedy,
            "greedy_text": backend.decode(greedy[:cut], skip_special_tokens=False),
            "top5": top5,
            "first_margin": round(top5[0][0][1] - top5[0][1][1], 6),
        }
        if messages is not None:
            entry["messages"] = messages
        prompts.append(entry)
        print(entry["name"], repr(entry["greedy_text"][:80]), "margin", entry["first_margin"], file=sys.stderr)

    tokenization = []
    for t in TEXTS:
        with_special = encode(t, True)
        tokenization.append({
            "text": t,
            "ids": encode(t, False),
            "ids_with_special": with_special,
            "decoded": backend.decode(with_special, skip_special_tokens=False),
        })

    templates = [
        {"messages": m, "add_generation_prompt": g,
         "rendered": hf_tok.apply_chat_template(m, tokenize=False, add_generation_prompt=g)}
        for m, g in TEMPLATE_CASES
    ]
    result = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "model": GGUF,
        "dtype": "float32 (dequantized Q4_1)",
        "bos_token_id": hf_tok.bos_token_id,
        "eos_token_id": hf_tok.eos_token_id,
        "prompts": prompts,
        "tokenization": tokenization,
        "chat_template_cases": templates,
    }
    with open(OUT, "w") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
    print("wrote", OUT, os.path.getsize(OUT), "bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
