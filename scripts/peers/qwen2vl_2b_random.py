"""A random-weight Qwen2-VL-2B-Instruct checkpoint for the pair bench (scripts/peers/vlm_pair_bench.sh --shape qwen2vl-2b).

Dev-time only (needs torch + transformers, /work/py or any Python with them; ~4.4 GB written, ~7 GB of memory at
peak). Writes (once) OUT (default ~/.cache/tessera-peers/qwen2-vl-2b-random/):
- config.json: Qwen/Qwen2-VL-2B-Instruct's (below, as the Hub publishes it: text 1536 wide, 28 layers, 12 / 2
  heads, MLP 8960, vocab 151936, tied embeddings; vision 32 blocks 1280 wide, 16 heads, MLP ratio 4, patch 14,
  merge 2, temporal patch 2; M-RoPE sections [16, 24, 24]);
- model-0000N-of-0000M.safetensors: Qwen2VLForConditionalGeneration built by transformers from that config, f16,
  its own random initialisation (seed 0), saved by save_pretrained in 2 GB shards;
- tokenizer.json: Qwen2's byte-level BPE (the 151643 tokens and 151387 merges of the vocabulary llama.cpp ships
  for its tokenizer tests, models/ggml-vocab-qwen2.gguf in the pinned source), Qwen2's pre-tokenizer split, and
  Qwen2-VL's 14 special tokens at their ids 151643..151656; tokenizer_config.json, chat_template.json,
  preprocessor_config.json and generation_config.json as Qwen2-VL-2B-Instruct's.

Usage: /work/py/bin/python scripts/peers/qwen2vl_2b_random.py [OUT]
"""
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/.cache/tessera-peers/qwen2-vl-2b-random"))

CONFIG = {
    "architectures": ["Qwen2VLForConditionalGeneration"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
    "vision_token_id": 151654,
    "image_token_id": 151655,
    "video_token_id": 151656,
    "hidden_act": "silu",
    "hidden_size": 1536,
    "initializer_range": 0.02,
    "intermediate_size": 8960,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "model_type": "qwen2_vl",
    "num_attention_heads": 12,
    "num_hidden_layers": 28,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.41.2",
    "use_cache": True,
    "use_sliding_window": False,
    "vision_config": {
        "depth": 32,
        "embed_dim": 1280,
        "mlp_ratio": 4,
        "num_heads": 16,
        "in_chans": 3,
        "hidden_size": 1536,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "spatial_patch_size": 14,
        "temporal_patch_size": 2,
    },
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "vocab_size": 151936,
}

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
            "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]

# Qwen2's pre-tokenizer split (its tokenizer.json), before the byte-level mapping.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")

CHAT_TEMPLATE = json.loads((REPO / "tests/fixtures/real_configs/qwen2.5-vl-3b-instruct/chat_template.json").read_text())


def write_tokenizer(dst: Path):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    peers = Path(os.path.expanduser("~/.cache/tessera-peers"))
    llama = next(iter(sorted(peers.glob("llama-cpp-python-*/vendor/llama.cpp"))), None)
    if llama is None:
        raise SystemExit("llama.cpp's source not found: run scripts/peers/build_llamacpp.sh first")
    sys.path.insert(0, str(llama / "gguf-py"))
    from gguf import GGUFReader

    reader = GGUFReader(str(llama / "models/ggml-vocab-qwen2.gguf"))
    field = lambda key: [bytes(reader.fields[key].parts[i]).decode("utf-8") for i in reader.fields[key].data]
    tokens, merges = field("tokenizer.ggml.tokens")[:151643], field("tokenizer.ggml.merges")
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[tuple(m.split(" ", 1)) for m in merges],
                               byte_fallback=False, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    for i, s in enumerate(SPECIALS):
        assert tok.get_vocab_size() == 151643 + i
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False)])
    tok.save(str(dst / "tokenizer.json"))
    (dst / "tokenizer_config.json").write_text(json.dumps({
        "add_prefix_space": False, "additional_special_tokens": SPECIALS[1:], "bos_token": None,
        "chat_template": CHAT_TEMPLATE["chat_template"], "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 32768, "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    }, indent=2))
    (dst / "chat_template.json").write_text(json.dumps(CHAT_TEMPLATE, indent=2))
    (dst / "preprocessor_config.json").write_text(json.dumps({
        "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
    }, indent=2))
    (dst / "generation_config.json").write_text(json.dumps({
        "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
        "repetition_penalty": 1.0, "temperature": 0.01, "top_p": 0.001, "top_k": 1, "transformers_version": "4.37.0",
    }, indent=2))


def main():
    import torch
    import transformers

    OUT.mkdir(parents=True, exist_ok=True)
    if not (OUT / "model.safetensors.index.json").exists():
        torch.manual_seed(0)
        config = transformers.Qwen2VLConfig.from_dict(CONFIG)
        model = transformers.Qwen2VLForConditionalGeneration._from_config(config, dtype=torch.float16).eval()
        model.save_pretrained(OUT, max_shard_size="2GB")
        del model
        (OUT / "config.json").write_text(json.dumps(CONFIG, indent=2))
    write_tokenizer(OUT)
    print(f"wrote {OUT}", file=sys.stderr)
    print(OUT)


if __name__ == "__main__":
    main()
