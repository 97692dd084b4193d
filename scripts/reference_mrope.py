"""Golden multimodal RoPE (M-RoPE) rotations from transformers: Qwen2-VL's sectioned layout
(`mrope_section` consecutive frequency blocks read the temporal, height and width position
streams) and Qwen3-VL's interleaved layout, applied to a random query by the models' own
`apply_rotary_pos_emb`. Positions are a (3, T) grid like `get_rope_index` writes for text, then
an image of 2x3 merged patches, then text continuing at max + 1.

Writes tests/fixtures/mrope_reference.json. Dev-time only:
/work/py/bin/python scripts/reference_mrope.py
"""
import json
import os

import torch
import transformers
from transformers.models.qwen2_vl import modeling_qwen2_vl as q2
from transformers.models.qwen3_vl import modeling_qwen3_vl as q3

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "mrope_reference.json")

HEAD_DIM, HEADS, THETA = 32, 2, 10000.0
SECTION = [4, 6, 6]  # sums to HEAD_DIM / 2

# text (3 tokens), a 2x3 image grid at t = 3, text continuing at max + 1 = 6.
t = [0, 1, 2] + [3] * 6 + [6, 7]
h = [0, 1, 2] + [3, 3, 3, 4, 4, 4] + [6, 7]
w = [0, 1, 2] + [3, 4, 5, 3, 4, 5] + [6, 7]
positions = torch.tensor([t, h, w])  # (3, T)
T = positions.shape[1]

torch.manual_seed(0)
q = torch.randn(1, HEADS, T, HEAD_DIM)

cases = {}
for name, module, cfg_cls in [
    ("qwen2_vl", q2, transformers.Qwen2VLTextConfig),
    ("qwen3_vl", q3, transformers.Qwen3VLTextConfig),
]:
    cfg = cfg_cls(
        hidden_size=HEAD_DIM * HEADS, num_attention_heads=HEADS, head_dim=HEAD_DIM,
        rope_parameters={"rope_type": "default", "rope_theta": THETA, "mrope_section": SECTION},
    )
    rotary = (module.Qwen2VLRotaryEmbedding if name == "qwen2_vl" else module.Qwen3VLTextRotaryEmbedding)(cfg)
    cos, sin = rotary(q, positions[:, None, :])  # (1, T, head_dim)
    rotated, _ = module.apply_rotary_pos_emb(q, q, cos, sin)
    cases[name] = {"rotated": rotated.flatten().tolist()}

json.dump(
    {
        "transformers": transformers.__version__,
        "head_dim": HEAD_DIM, "heads": HEADS, "theta": THETA, "mrope_section": SECTION,
        "positions": positions.tolist(), "q": q.flatten().tolist(), "cases": cases,
    },
    open(OUT, "w"),
)
print("wrote", OUT)
