"""Reference hidden states for the embedding API on the hybrid tiny VLMs (issue 41, step 3).

For qwen3.5-tiny (Gated DeltaNet + full attention) and gemma4-tiny (per-layer inputs, shared KV),
runs a text through transformers' language model with `output_hidden_states` (index 0 the token
embeddings as the model scales them, the last after the final norm) and writes every layer's
states to tests/fixtures/vlm/<name>/embeddings_reference.safetensors, the ids (the tokenizer's
`encode(text, add_special_tokens=True)`, as tessera's embed does) to embeddings_reference.json.

Dev-time only: /work/py/bin/python scripts/reference_vlm_embeddings.py
"""
import json
import os

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file
from transformers import AutoModelForImageTextToText, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = "The cat sat on the mat and looked at the red ball."


def main():
    for name in ["qwen3.5-tiny", "gemma4-tiny"]:
        d = os.path.join(ROOT, "tests", "fixtures", "vlm", name)
        tok = AutoTokenizer.from_pretrained(d)
        ids = tok(TEXT, add_special_tokens=True)["input_ids"]
        model = AutoModelForImageTextToText.from_pretrained(d, dtype=torch.float32).eval()
        with torch.no_grad():
            out = model.model.language_model(input_ids=torch.tensor([ids]), output_hidden_states=True)
        hs = torch.stack([h[0] for h in out.hidden_states]).numpy().astype(np.float32)
        # The last entry must be the final norm's output (transformers replaces it in some versions).
        last = out.last_hidden_state[0].numpy()
        assert np.array_equal(hs[-1], last), f"{name}: hidden_states[-1] is not last_hidden_state"
        save_file({"hidden_states": np.ascontiguousarray(hs)},
                  os.path.join(d, "embeddings_reference.safetensors"))
        meta = {"transformers_version": transformers.__version__, "text": TEXT, "ids": ids}
        with open(os.path.join(d, "embeddings_reference.json"), "w") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")
        print(name, len(ids), "ids,", hs.shape)


if __name__ == "__main__":
    main()
