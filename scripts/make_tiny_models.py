"""Tiny random-weight text models in Hugging Face format, with transformers' reference outputs.

Writes tests/fixtures/tiny/<name>/ (config.json, model.safetensors or shards + index,
generation_config.json, tokenizer.json, tokenizer_config.json, reference.json) for config
variants users meet: Llama GQA with the older top-level `rope_theta`, Llama MHA with the nested
`rope_parameters` form, Llama MQA with llama3 RoPE scaling, an explicit head_dim and sharded
weights, Qwen2 with q/k/v biases, and Mistral. reference.json holds the prompt ids, the float32
logits at every prompt position and 16 greedy ids (EOS ignored), computed with eager attention
from the weights reloaded from disk. Also tests/fixtures/tiny/attention_reference.json
(llama-gqa: attention weights and hidden states of every layer).

Dev-time only: /work/py/bin/python scripts/make_tiny_models.py [NAME ...] (default: all)
"""
import json
import sys
import os
import shutil

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "tiny")
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CORPUS = """The quick brown fox jumps over the lazy dog. A small model reads the text and predicts the next token.
Images are cut into patches; each patch becomes a token. Attention mixes information between positions.
Keys and values are cached so that each new token costs one step. The capital of France is Paris.
Once upon a time there was a little robot who liked to count: one, two, three, four, five.
def add(a, b):\n    return a + b\n""" * 20


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS.split("\n"), trainer)
    return tok


def randomize(model, seed, std):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(std * torch.randn(p.shape, generator=g))


def greedy(model, ids, n):
    seq = list(ids)
    out = []
    margins = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(logits, 2).values
            margins.append(float(top[0] - top[1]))
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            seq.append(nxt)
    return out, min(margins)


def common(vocab):
    return dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                max_position_embeddings=128, rms_norm_eps=1e-5, bos_token_id=0, eos_token_id=2,
                attn_implementation="eager")


def to_old_rope_form(cfg):
    params = cfg.pop("rope_parameters", None) or {}
    cfg["rope_theta"] = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    rest = {k: v for k, v in params.items() if k != "rope_theta"}
    if rest and rest.get("rope_type", "default") != "default":
        cfg["rope_scaling"] = rest
    return cfg


def to_new_rope_form(cfg):
    if "rope_parameters" not in cfg:
        params = {"rope_type": "default", "rope_theta": cfg.pop("rope_theta", 10000.0)}
        scaling = cfg.pop("rope_scaling", None)
        if scaling:
            params.update(scaling)
        cfg["rope_parameters"] = params
    cfg.pop("rope_theta", None)
    cfg.pop("rope_scaling", None)
    return cfg


WANTED = set(sys.argv[1:])  # build only these (default: all)


def build(name, cls, config, seed, rope_form, shard=False):
    if WANTED and name not in WANTED:
        return None, None
    tok = train_tokenizer()
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for attempt in range(20):
        torch.manual_seed(seed + attempt)
        model = cls(config).eval()
        randomize(model, seed + attempt, std=0.3)
        model.generation_config.eos_token_id = 2
        model.generation_config.bos_token_id = 0
        kwargs = {"max_shard_size": "100KB"} if shard else {}
        model.save_pretrained(folder, safe_serialization=True, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation="eager").eval()
        prompt = tok.encode("The capital of France is Paris. Keys and values").ids[:12]
        ids, margin = greedy(model, prompt, 16)
        if margin > 1e-3:
            break
    else:
        raise SystemExit(f"{name}: no seed with clear greedy margins")
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0]
    cfg_path = os.path.join(folder, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg = to_old_rope_form(cfg) if rope_form == "old" else to_new_rope_form(cfg)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "chat_template": CHATML}, f, indent=2)
    ref = {
        "transformers_version": transformers.__version__,
        "variant": name,
        "prompt_ids": prompt,
        "logits": [[round(float(x), 6) for x in row] for row in logits],
        "greedy_ids": ids,
        "min_greedy_margin": round(margin, 6),
    }
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f)
    print(name, "greedy", ids, "margin", round(margin, 4), "files", sorted(os.listdir(folder)))
    return model, prompt


def main():
    vocab = train_tokenizer().get_vocab_size()
    os.makedirs(OUT, exist_ok=True)
    c = common(vocab)
    gqa, prompt = build("llama-gqa", LlamaForCausalLM,
                        LlamaConfig(**c, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                                    rope_theta=10000.0), 1, "old")
    build("llama-mha", LlamaForCausalLM,
          LlamaConfig(**c, num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
                      rope_theta=50000.0), 2, "new")
    build("llama-mqa-llama3rope", LlamaForCausalLM,
          LlamaConfig(**c, num_attention_heads=4, num_key_value_heads=1, head_dim=16, tie_word_embeddings=False,
                      rope_theta=500000.0,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
          3, "new", shard=True)
    build("qwen2-bias", Qwen2ForCausalLM,
          Qwen2Config(**c, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                      rope_theta=10000.0, use_sliding_window=False), 4, "old")
    build("mistral", MistralForCausalLM,
          MistralConfig(**c, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                        rope_theta=10000.0, sliding_window=None), 5, "old")
    build("qwen3-qknorm", Qwen3ForCausalLM,
          Qwen3Config(**c, num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                      rope_theta=10000.0, use_sliding_window=False), 6, "new")
    if gqa is None:
        return

    with torch.no_grad():
        out = gqa(torch.tensor([prompt]), output_attentions=True, output_hidden_states=True)
    att = {
        "prompt_ids": prompt,
        "attentions": [[[[round(float(x), 6) for x in row] for row in head] for head in layer[0]] for layer in out.attentions],
        "hidden_states": [[[round(float(x), 6) for x in row] for row in h[0]] for h in out.hidden_states],
    }
    with open(os.path.join(OUT, "attention_reference.json"), "w") as f:
        json.dump(att, f)


if __name__ == "__main__":
    main()
