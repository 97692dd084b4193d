"""Checks that model.py's decoder is transformers' LlamaModel: loads the saved shapes-vlm decoder
weights (or random ones with --random) into a LlamaModel with the same config, feeds it
inputs_embeds = cat(image tokens, token embeddings), and compares the final hidden states and the
logits with model.py's (max abs difference must be under 1e-5). Also checks that patchify equals a
Conv2d with the patch_embed weight reshaped to (hidden, C, P, P).

Dev-time only: /work/py/bin/python scripts/shapes/check_llama.py [--random]
"""
import os
import sys

import torch
from transformers import LlamaConfig, LlamaModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as native  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = os.path.join(ROOT, "models", "shapes-vlm")


def main():
    torch.manual_seed(0)
    if "--random" in sys.argv or not os.path.exists(os.path.join(FOLDER, "model.safetensors")):
        m = native.TesseraNative(native.Config(vocab_size=380)).eval()
        native.init_weights(m, seed=3)
        with torch.no_grad():  # non-trivial norms and bias
            for name, p in m.named_parameters():
                if name.endswith("norm.weight") or name == "patch_embed.bias":
                    p.add_(0.1 * torch.randn_like(p))
        print("random weights")
    else:
        m = native.load(FOLDER)
        print("weights from", FOLDER)
    c = m.cfg
    llama_cfg = LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.hidden_size,
                            intermediate_size=c.intermediate_size, num_hidden_layers=c.num_hidden_layers,
                            num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
                            head_dim=c.head_dim, rope_theta=c.rope_theta, rms_norm_eps=c.rms_norm_eps,
                            max_position_embeddings=c.max_position_embeddings, hidden_act="silu",
                            attention_bias=False, mlp_bias=False, tie_word_embeddings=True)
    llama_cfg._attn_implementation = "eager"
    llama = LlamaModel(llama_cfg).eval()
    decoder = {k[len("model."):]: v for k, v in m.state_dict().items() if k.startswith("model.")}
    missing, unexpected = llama.load_state_dict(decoder, strict=False)
    missing = [k for k in missing if "rotary_emb" not in k]
    assert not missing and not unexpected, (missing, unexpected)

    b = 2
    pixels = torch.randn(b, c.num_channels, c.image_size, c.image_size)
    ids = torch.randint(0, c.vocab_size, (b, 14))
    with torch.no_grad():
        image = m.embed_image(pixels)
        embeds = torch.cat([image, m.model.embed_tokens(ids)], dim=1)
        t = embeds.shape[1]
        ours = m.model(embeds, torch.arange(t)[None].expand(b, t), native.causal_mask(t))
        theirs = llama(inputs_embeds=embeds).last_hidden_state
        hidden_diff = (ours - theirs).abs().max().item()
        logits_diff = (m(pixels, ids) - theirs[:, image.shape[1]:] @ m.model.embed_tokens.weight.T).abs().max().item()
        conv = torch.nn.functional.conv2d(
            pixels, m.patch_embed.weight.reshape(c.hidden_size, c.num_channels, c.patch_size, c.patch_size),
            m.patch_embed.bias, stride=c.patch_size)  # (b, hidden, gh, gw)
        conv = conv.flatten(2).transpose(1, 2) + m.image_pos_embed  # (b, n, hidden)
        conv_diff = (conv - image).abs().max().item()
    print(f"hidden states max |diff| {hidden_diff:.3g}, text logits {logits_diff:.3g}, conv patchify {conv_diff:.3g}")
    assert hidden_diff < 1e-5 and logits_diff < 1e-4 and conv_diff < 1e-5
    print("ok")


if __name__ == "__main__":
    main()
