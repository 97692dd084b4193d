"""Reference for tessera's per-layer decoder pieces (crates/decoder/src/per_layer.rs and the layer
variants of decoder.rs / attention): transformers' Gemma4TextModel with random weights.

    /work/py/bin/python scripts/reference_gemma4_text.py   # transformers 5.23

Writes tests/fixtures/gemma4_text/{weights,reference}.safetensors for two tiny text models:
- `e2b.`: the layout of google/gemma-4-E2B — sliding and full layers with different head sizes
  (8 and 16), proportional RoPE on the full layers (2 of 8 frequencies rotate), the last three
  layers reusing the keys and values of the last earlier layer of their kind, double-wide MLPs on
  those layers, per-layer inputs (PLE) and layer scalars, value norms, a sliding window of 4;
- `k_eq_v.`: the 31B's full layers — values taken from the key projection, one global key/value
  head — with no per-layer inputs and no sharing.
For each: `ids` (1, 11), `embeds` (the scaled input embeddings), `per_layer_inputs` (1, 11, L, d)
when the model has them, and `hidden` (the final-normed last hidden state).
"""
import os

import torch
from safetensors.torch import save_file
from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
from transformers.models.gemma4.modeling_gemma4 import Gemma4TextModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "gemma4_text")
T = 11
ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
}

CONFIGS = {
    "e2b.": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=6, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=8, global_head_dim=16, vocab_size=64,
                 vocab_size_per_layer_input=64, hidden_size_per_layer_input=4, num_kv_shared_layers=3,
                 use_double_wide_mlp=True, sliding_window=4, final_logit_softcapping=30.0,
                 layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2),
    "k_eq_v.": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, global_head_dim=16, num_global_key_value_heads=1,
                    attention_k_eq_v=True, vocab_size=64, hidden_size_per_layer_input=0, sliding_window=4,
                    layer_types=["sliding_attention", "full_attention"] * 2),
}


def model(kwargs, seed):
    config = Gemma4TextConfig(rope_parameters=ROPE, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                              **kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    net = Gemma4TextModel(config).eval()
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * 0.3)
        for name, b in net.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(torch.empty_like(b).uniform_(0.5, 1.5))
    return net


def main():
    os.makedirs(OUT, exist_ok=True)
    weights, ref = {}, {}
    for seed, (prefix, kwargs) in enumerate(CONFIGS.items()):
        net = model(kwargs, seed + 1)
        for name, p in net.state_dict().items():
            weights[f"{prefix}{name}"] = p.contiguous()
        ids = torch.randint(0, kwargs["vocab_size"], (1, T), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            embeds = net.embed_tokens(ids)
            if net.hidden_size_per_layer_input:
                ple = net.project_per_layer_inputs(embeds, net.get_per_layer_inputs(ids, embeds))
                ref[f"{prefix}per_layer_inputs"] = ple.contiguous()
            hidden = net(input_ids=ids, use_cache=False).last_hidden_state
        ref[f"{prefix}ids"] = ids.to(torch.int64)
        ref[f"{prefix}embeds"] = embeds.contiguous()
        ref[f"{prefix}hidden"] = hidden.contiguous()
    save_file(weights, os.path.join(OUT, "weights.safetensors"))
    save_file(ref, os.path.join(OUT, "reference.safetensors"))
    print({k: tuple(v.shape) for k, v in weights.items() if k.endswith("layers.5.self_attn.q_proj.weight")
           or "per_layer" in k or "layers.1.self_attn" in k})


if __name__ == "__main__":
    main()
