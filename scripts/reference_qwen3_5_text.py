"""Reference for tessera's hybrid decoder stack (crates/decoder: Gated DeltaNet layers beside full-attention
layers, as Qwen3.5's text model interleaves them): transformers' Qwen3_5TextModel with random weights.

    /work/py/bin/python scripts/reference_qwen3_5_text.py   # transformers 5.23

A 4-layer model (`layer_types` linear ×3, full), hidden 32, 4 query heads over 2 key/value heads of 32 dims
whose first quarter rotates (partial_rotary_factor 0.25, interleaved M-RoPE sections [2, 1, 1]), the full
layer's sigmoid output gate, every RMSNorm (1+w) but the DeltaNet's gated norm. Every weight is random (the
norms too), so each of these quirks moves the output.

Writes tests/fixtures/qwen3_5_text/weights.safetensors (the text model's parameters under their checkpoint
names, `layers.*`, `norm.weight`; no `embed_tokens`) and reference.safetensors: `embeds` (1, T, 32), `hidden`
(the final-normed hidden states for positions 0..T), `positions` (3, T) three distinct M-RoPE streams, and
`hidden_mrope` (the hidden states under them).
"""
import os

import torch
from safetensors.torch import save_file
from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "qwen3_5_text")
T = 13


def model():
    config = Qwen3_5TextConfig(
        vocab_size=8, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=6, linear_conv_kernel_dim=4, rms_norm_eps=1e-6,
        hidden_act="silu", max_position_embeddings=256,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True})
    config._attn_implementation = "eager"
    torch.manual_seed(3)
    m = Qwen3_5TextModel(config).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty_like(p).uniform_(0.5, 4.0)))
            elif name.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif "norm" in name:
                p.copy_(0.3 * torch.randn_like(p))  # (1 + w) norms
            else:
                p.copy_(torch.randn_like(p) * 0.3)
    return m


def main():
    os.makedirs(OUT, exist_ok=True)
    m = model()
    weights = {k: v.contiguous() for k, v in m.state_dict().items() if not k.startswith("embed_tokens")}
    torch.manual_seed(0)
    embeds = torch.randn(1, T, 32)
    text = torch.arange(T).view(1, 1, T).expand(3, 1, T)
    positions = torch.stack([torch.arange(T), torch.arange(T) // 2 + 1, torch.arange(T) % 5 + 2]).view(3, 1, T)
    with torch.no_grad():
        hidden = m(inputs_embeds=embeds, position_ids=text, use_cache=False).last_hidden_state
        hidden_mrope = m(inputs_embeds=embeds, position_ids=positions, use_cache=False).last_hidden_state
    ref = {"embeds": embeds, "hidden": hidden.contiguous(), "positions": positions.view(3, T).to(torch.int64),
           "hidden_mrope": hidden_mrope.contiguous()}
    save_file(weights, os.path.join(OUT, "weights.safetensors"))
    save_file(ref, os.path.join(OUT, "reference.safetensors"))
    print({k: tuple(v.shape) for k, v in weights.items()})
    print("differ under M-RoPE:", (hidden - hidden_mrope).abs().max().item())


if __name__ == "__main__":
    main()
