"""Reference hidden states for the contextual-embedding tests, from transformers.

SmolLM2-135M-Instruct (the Q4_1 GGUF dequantized to float32), two sentences where " bank" means
different things; writes every layer's hidden states (`output_hidden_states`: embeddings, each
block, the last after the final norm) to tests/fixtures/bank_hidden_states.safetensors and the
ids plus the per-layer cosine of the two " bank" vectors to bank_hidden_states.json.

Dev-time only: /work/py/bin/python scripts/reference_embeddings.py
"""
import json
import os

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "models", "smollm2-135m-instruct")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SENTENCES = {"money": "I deposited cash at the bank", "river": "We sat on the river bank and watched the water"}


def main():
    tok = AutoTokenizer.from_pretrained(DIR, gguf_file=GGUF)
    backend = tok.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    model = AutoModelForCausalLM.from_pretrained(DIR, gguf_file=GGUF, torch_dtype=torch.float32).eval()
    tensors, meta = {}, {"transformers_version": transformers.__version__, "sentences": {}}
    bank = {}
    for name, text in SENTENCES.items():
        ids = backend.encode(text, add_special_tokens=True).ids
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_hidden_states=True)
        hs = torch.stack([h[0] for h in out.hidden_states]).numpy().astype(np.float32)  # (layers+1, t, hidden)
        tensors[name] = np.ascontiguousarray(hs)
        pos = [backend.decode([i]) for i in ids].index(" bank")
        bank[name] = hs[:, pos]
        meta["sentences"][name] = {"text": text, "ids": ids, "bank_position": pos}
    a, b = bank["money"], bank["river"]
    meta["bank_cosine_per_layer"] = [round(float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)), 6) for x, y in zip(a, b)]
    save_file(tensors, os.path.join(ROOT, "tests", "fixtures", "bank_hidden_states.safetensors"))
    with open(os.path.join(ROOT, "tests", "fixtures", "bank_hidden_states.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(meta["bank_cosine_per_layer"])


if __name__ == "__main__":
    main()
