"""tessera_native: a single-stream image+text decoder, in plain PyTorch.

The image is cut into non-overlapping P x P patches, each flattened in (channel, row, col) order
(the order of a Conv2d weight (hidden, C, P, P) reshaped to (hidden, C*P*P)), projected by a linear
layer with bias, and given a learned position embedding per patch (raster order). The patch tokens
go before the text tokens in one sequence, [image tokens][text tokens], read by one causal
Llama-style decoder (pre-norm RMSNorm, GQA with rotate_half RoPE over positions 0..N, SwiGLU MLP,
final RMSNorm); the LM head is tied to the token embeddings and applied to the text positions.

The decoder math follows transformers' LlamaModel (models/llama/modeling_llama.py, eager
attention): RMSNorm in float32, inv_freq = 1/theta^(arange(0, d, 2)/d) in float32, scores scaled
by 1/sqrt(head_dim), keys/values repeated for GQA. scripts/shapes/check_llama.py checks it.

Parameter names equal the checkpoint keys in models/shapes-vlm/model.safetensors.
Dev-time only; nothing here is used by the Rust crates.
"""
import json
import math
import os
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import load_file, save_file
from torch import nn


@dataclass
class Config:
    image_size: int = 64
    patch_size: int = 8
    num_channels: int = 3
    image_mean: list = field(default_factory=lambda: [0.5, 0.5, 0.5])
    image_std: list = field(default_factory=lambda: [0.5, 0.5, 0.5])
    resample: str = "bicubic"
    hidden_size: int = 192
    intermediate_size: int = 576
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 48
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 256
    vocab_size: int = 512
    tie_word_embeddings: bool = True
    bos_token_id: int = 0
    eos_token_id: int = 1
    pad_token_id: int = 2
    hidden_act: str = "silu"
    torch_dtype: str = "float32"
    model_type: str = "tessera_native"
    architectures: list = field(default_factory=lambda: ["TesseraNativeForConditionalGeneration"])

    @property
    def num_patches(self):
        return (self.image_size // self.patch_size) ** 2

    def to_json(self):
        d = asdict(self)
        head = {"model_type": d.pop("model_type"), "architectures": d.pop("architectures")}
        return {**head, **d}

    @classmethod
    def from_json(cls, d):
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


def preprocess(pil_image, cfg):
    """PIL image -> (C, H, W) float32 tensor: RGB, bicubic resize to image_size if needed,
    /255, (x - mean) / std."""
    image = pil_image.convert("RGB")
    size = (cfg.image_size, cfg.image_size)
    if image.size != size:
        image = image.resize(size, Image.BICUBIC)
    x = np.asarray(image, dtype=np.float32) / 255.0  # (H, W, C)
    x = (x - np.array(cfg.image_mean, np.float32)) / np.array(cfg.image_std, np.float32)
    return torch.from_numpy(np.ascontiguousarray(x.transpose(2, 0, 1)))  # (C, H, W)


def patchify(pixels, p):
    """(b, C, H, W) -> (b, (H/p)*(W/p), C*p*p): raster order of patches, (c, row, col) inside."""
    b, c, h, w = pixels.shape
    x = pixels.reshape(b, c, h // p, p, w // p, p)  # (b, C, gh, p, gw, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (b, gh, gw, C, p, p)
    return x.reshape(b, (h // p) * (w // p), c * p * p)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(position_ids, head_dim, theta):
    """position_ids (b, t) -> cos, sin (b, t, head_dim), the halves duplicated (rotate_half layout)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=position_ids.device).float() / head_dim))
    freqs = position_ids[..., None].float() * inv_freq  # (b, t, head_dim/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (b, t, head_dim)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([-x2, x1], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, allowed):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (b, heads, t, hd)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)  # (b, kv, t, hd)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)  # (b, kv, t, hd)
        cos, sin = cos[:, None], sin[:, None]  # (b, 1, t, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)  # (b, heads, t, hd)
        v = v.repeat_interleave(group, dim=1)  # (b, heads, t, hd)
        scores = (q @ k.transpose(2, 3)) * self.head_dim**-0.5  # (b, heads, t, t)
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = (probs @ v).transpose(1, 2).reshape(b, t, self.heads * self.head_dim)  # (b, t, heads*hd)
        return self.o_proj(out)


class Mlp(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = Mlp(cfg)

    def forward(self, x, cos, sin, allowed):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    """Llama decoder over embeddings: (b, t, hidden) -> final-normed hidden states (b, t, hidden)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, embeds, position_ids, allowed):
        """allowed: bool (b, 1, t, t), True where query i may attend key j."""
        cos, sin = rope_cos_sin(position_ids, self.cfg.head_dim, self.cfg.rope_theta)
        x = embeds
        for layer in self.layers:
            x = layer(x, cos, sin, allowed)
        return self.norm(x)


def causal_mask(t, device=None):
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()[None, None]  # (1, 1, t, t)


class TesseraNative(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        p, c = cfg.patch_size, cfg.num_channels
        self.patch_embed = nn.Linear(c * p * p, cfg.hidden_size, bias=True)
        self.image_pos_embed = nn.Parameter(torch.zeros(cfg.num_patches, cfg.hidden_size))
        self.model = Decoder(cfg)

    def embed_image(self, pixels):
        """(b, C, H, W) normalized pixels -> image tokens (b, num_patches, hidden)."""
        return self.patch_embed(patchify(pixels, self.cfg.patch_size)) + self.image_pos_embed

    def forward(self, pixels, input_ids, position_ids=None, allowed=None):
        """Logits (b, t_text, vocab) at the text positions of [image tokens][text tokens].

        Defaults: positions 0..N+t-1 and a causal mask. Training passes both explicitly to pack
        several questions about one image into one row (each text block sees only the image and
        itself, positions restarting at num_patches), which equals separate causal sequences."""
        n = self.cfg.num_patches
        h = self.hidden(pixels, input_ids, position_ids, allowed)[:, n:]  # (b, t, hidden)
        return h @ self.model.embed_tokens.weight.T  # (b, t, vocab)

    def hidden(self, pixels, input_ids, position_ids=None, allowed=None):
        """Final-normed hidden states (b, n + t, hidden) of [image tokens][text tokens]."""
        image = self.embed_image(pixels)  # (b, n, hidden)
        text = self.model.embed_tokens(input_ids)  # (b, t, hidden)
        x = torch.cat([image, text], dim=1)  # (b, n + t, hidden)
        b, total = x.shape[:2]
        if position_ids is None:
            position_ids = torch.arange(total, device=x.device)[None].expand(b, total)
        if allowed is None:
            allowed = causal_mask(total, x.device)
        return self.model(x, position_ids, allowed)


def init_weights(model, seed=0):
    """GPT-2-style init."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name == "patch_embed.bias":
                p.zero_()
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
        # Residual-output projections scaled down by depth, as in GPT-2.
        for layer in model.model.layers:
            for lin in (layer.self_attn.o_proj, layer.mlp.down_proj):
                lin.weight.mul_(1 / math.sqrt(2 * model.cfg.num_hidden_layers))


def save(model, folder):
    os.makedirs(folder, exist_ok=True)
    tensors = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(model.cfg.to_json(), f, indent=2)
        f.write("\n")


def load(folder):
    """The model in `folder`; the checkpoint's key set must equal the model's."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = Config.from_json(json.load(f))
    model = TesseraNative(cfg)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    expected = set(model.state_dict())
    if set(tensors) != expected:
        raise ValueError(f"checkpoint keys differ: missing {sorted(expected - set(tensors))}, "
                         f"unexpected {sorted(set(tensors) - expected)}")
    model.load_state_dict(tensors)
    return model.eval()


def greedy(model, pixels, prompts, eos, max_new_tokens=32):
    """Greedy answers for a batch: pixels (b, C, H, W), prompts b lists of ids -> b lists of new ids
    (ending with eos unless max_new_tokens ran out). Rows are right-padded: under the causal mask,
    padding after a row's last token cannot change that row's logits. No KV cache: every step
    recomputes the whole sequence (this model is small)."""
    seqs = [list(p) for p in prompts]
    new = [[] for _ in prompts]
    done = [False] * len(prompts)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            t = max(len(s) for s in seqs)
            ids = torch.tensor([s + [eos] * (t - len(s)) for s in seqs])  # (b, t), any pad id works
            logits = model(pixels, ids)  # (b, t, vocab)
            for i, s in enumerate(seqs):
                if done[i]:
                    continue
                nxt = int(logits[i, len(s) - 1].argmax())
                s.append(nxt)
                new[i].append(nxt)
                done[i] = nxt == eos
            if all(done):
                break
    return new
