"""Reference for tessera's Gated DeltaNet layer (crates/decoder/src/gated_delta.rs): transformers'
Qwen3_5GatedDeltaNet, the linear-attention layer of Qwen3.5's text model, with random weights.

    /work/py/bin/python scripts/reference_gated_delta.py   # transformers 5.23

Writes tests/fixtures/gated_delta/weights.safetensors (the layer's parameters under their checkpoint names,
`linear_attn.*`) and reference.safetensors: `x` (1, T, hidden) and `y`, the layer's output for the whole
sequence from an empty state (transformers' chunked rule, chunk 64, over T = 11 tokens), plus `y_grouped`
for a second layer whose value heads share key heads (4 value heads over 2 key heads) and its weights under
`grouped.linear_attn.*`.
"""
import os

import torch
from safetensors.torch import save_file
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "gated_delta")
T = 11


def layer(k_heads, v_heads, seed):
    config = Qwen3_5TextConfig(hidden_size=32, linear_num_key_heads=k_heads, linear_num_value_heads=v_heads,
                               linear_key_head_dim=8, linear_value_head_dim=6, linear_conv_kernel_dim=4,
                               num_hidden_layers=1, layer_types=["linear_attention"], rms_norm_eps=1e-6,
                               hidden_act="silu")
    torch.manual_seed(seed)
    net = Qwen3_5GatedDeltaNet(config, 0).eval()
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name == "A_log":
                p.copy_(torch.log(torch.empty_like(p).uniform_(0.5, 4.0)))
            elif name == "dt_bias":
                p.copy_(torch.randn_like(p) * 0.5)
            elif name == "norm.weight":
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * 0.3)
    return net


def main():
    os.makedirs(OUT, exist_ok=True)
    weights, ref = {}, {}
    torch.manual_seed(0)
    x = torch.randn(1, T, 32)
    ref["x"] = x
    for prefix, (k_heads, v_heads, seed) in {"": (2, 2, 1), "grouped.": (2, 4, 2)}.items():
        net = layer(k_heads, v_heads, seed)
        for name, p in net.state_dict().items():
            weights[f"{prefix}linear_attn.{name}"] = p.contiguous()
        with torch.no_grad():
            y = net(x)
        ref["y_grouped" if prefix else "y"] = y.contiguous()
    save_file(weights, os.path.join(OUT, "weights.safetensors"))
    save_file(ref, os.path.join(OUT, "reference.safetensors"))
    print({k: tuple(v.shape) for k, v in weights.items()})


if __name__ == "__main__":
    main()
