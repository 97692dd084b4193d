#!/usr/bin/env python3
"""Writes a Llama-shaped GGUF with random f16 weights, tensor by tensor, for the bench.

The vocabulary, tokenizer (gpt2 BPE, SmolLM2's merges) and chat template are copied from a source
GGUF (models/smollm2-135m-instruct's); the shape is Llama's (tied LM head, as Llama-3.2-1B and
SmolLM2: no `output.weight`). Only one tensor is in memory at a time, so the 8B shape's 16 GB
f16 file streams: gguf-py's GGUFWriter is given every tensor's info first
(`add_tensor_info`), writes the header, the key/values and the tensor table, then each tensor's
data as it is generated (`write_tensor_data`).

Weights are N(0, 0.02) drawn from a seeded generator (norm weights 1), so a shape's files are
the same on every machine. They are meant for timing, not for text: llama-quantize and both
engines see the real tensor shapes and block types.

Usage: bench_shape_gguf.py --shape 1b|8b --vocab-from SRC.gguf --out DST.gguf
(needs numpy and gguf-py on PYTHONPATH; scripts/peers/make_bench_shapes.sh runs it.)
"""

import argparse
import sys

import numpy as np

import gguf

# (width, layers, MLP width, heads, kv heads, rope theta)
SHAPES = {
    "1b": (2048, 16, 8192, 32, 8, 500000.0),  # Llama-3.2-1B's shape
    "8b": (4096, 32, 14336, 32, 8, 500000.0),  # Llama-3-8B's shape
}
TOKENIZER_KEYS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_space_prefix",
    "tokenizer.chat_template",
)


def copy_tokenizer(src: gguf.GGUFReader, dst: gguf.GGUFWriter) -> int:
    """Copies the tokenizer key/values; returns the vocabulary size."""
    vocab = 0
    for key in TOKENIZER_KEYS:
        field = src.get_field(key)
        if field is None:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            vocab = len(value)
        dst.add_key_value(key, value, vtype, sub_type=sub)
    if vocab == 0:
        sys.exit("the source GGUF has no tokenizer.ggml.tokens")
    return vocab


def tensor_plan(shape: str, vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor's name and numpy shape (rows, columns), in file order."""
    d, layers, ff, heads, kv_heads, _ = SHAPES[shape]
    kv = d // heads * kv_heads
    plan = [("token_embd.weight", (vocab, d))]
    for i in range(layers):
        b = f"blk.{i}"
        plan += [
            (f"{b}.attn_norm.weight", (d,)),
            (f"{b}.attn_q.weight", (d, d)),
            (f"{b}.attn_k.weight", (kv, d)),
            (f"{b}.attn_v.weight", (kv, d)),
            (f"{b}.attn_output.weight", (d, d)),
            (f"{b}.ffn_norm.weight", (d,)),
            (f"{b}.ffn_gate.weight", (ff, d)),
            (f"{b}.ffn_up.weight", (ff, d)),
            (f"{b}.ffn_down.weight", (d, ff)),
        ]
    plan.append(("output_norm.weight", (d,)))
    return plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--vocab-from", required=True, help="GGUF whose tokenizer is copied")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    d, layers, ff, heads, kv_heads, theta = SHAPES[args.shape]
    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name(f"tessera bench shape llama-{args.shape} (random weights)")
    w.add_context_length(8192)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(d // heads)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    vocab = copy_tokenizer(gguf.GGUFReader(args.vocab_from), w)
    w.add_vocab_size(vocab)

    plan = tensor_plan(args.shape, vocab)
    for name, shape in plan:
        dtype = np.float32 if len(shape) == 1 else np.float16
        w.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    rng = np.random.default_rng(args.seed)
    total = 0
    for i, (name, shape) in enumerate(plan):
        if len(shape) == 1:
            data = np.ones(shape, dtype=np.float32)
        else:
            # One tensor at a time (the 8B shape's largest, the embedding, is 0.4 GB in f16);
            # drawn in row chunks so the f32 draw never holds more than 64 Mi values.
            data = np.empty(shape, dtype=np.float16)
            step = max(1, (64 << 20) // shape[1])
            for r in range(0, shape[0], step):
                chunk = rng.standard_normal((min(step, shape[0] - r), shape[1]), dtype=np.float32)
                data[r : r + step] = chunk * np.float32(0.02)
        w.write_tensor_data(data)
        total += data.nbytes
        print(f"[bench_shape_gguf] {i + 1}/{len(plan)} {name} {shape}", file=sys.stderr, flush=True)
    w.close()
    print(f"[bench_shape_gguf] wrote {args.out}: {len(plan)} tensors, {total / 1e9:.2f} GB", file=sys.stderr)


if __name__ == "__main__":
    main()
