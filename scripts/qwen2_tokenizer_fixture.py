"""Writes tests/fixtures/qwen2_tokenizer/: a GGUF whose embedded tokenizer is Qwen2's (`tokenizer.ggml.pre`
`qwen2`) and transformers' ids for tricky texts, for crates/text/tests/qwen2_pretokenizer.rs.

The vocabulary is Qwen2's own, cut to its first MERGES merges: the 256 byte symbols, the tokens those merges
make (a BPE's first merges only ever join bytes and earlier merges' tokens, so the cut is a complete BPE) and
`<|endoftext|>`, re-numbered in Qwen2's order. Source: llama.cpp's models/ggml-vocab-qwen2.gguf (the pinned
source, scripts/peers/build_llamacpp.sh; its tokens and merges are Qwen/Qwen2's tokenizer.json's).
- vocab.gguf: tokenizer.ggml.{model gpt2, pre qwen2, tokens, token_type, merges, eos_token_id}, no tensors,
  written by llama.cpp's gguf-py;
- reference.json: {"texts": [...], "ids": [[...], ...]} from transformers' Qwen2Tokenizer (its NFC normalizer,
  its pre-tokenizer split, byte-level BPE) over the same vocabulary and merges, add_special_tokens=False.

Usage: /work/py/bin/python scripts/qwen2_tokenizer_fixture.py   (transformers 5.23.0; byte-for-byte reproducible)
"""
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "tests/fixtures/qwen2_tokenizer"
MERGES = 3000

TEXTS = [
    "I'm sure they'LL say it's fine, don't you THINK? We'd've gone; you're right, she's 'quoted'.",
    "12345 and 3.14159, 1,000,000 apples; 2026-11-28T13:10Z, x=42y7",
    "你好世界，这是一个测试。日本語のテキストも少し。한국어 문장",
    "line one\nline two\n\n\nafter blanks\r\nwindows\r\n \n \t\n",
    "a   b    c     d\t\te  \u00a0 f      ",
    "   leading spaces and trailing   ",
    "!!! ... ??? --- *** ((nested)) [brackets] {braces} ->=> <<>>",
    "café naïve résumé cafe\u0301 Åström",
    "Hello123world foo_bar camelCaseWord HTTPServer ALLCAPS",
    "def f(x):\n    return x**2  # square\n\tif x:\n\t\tpass\n",
    "emoji 🚀🔥👍🏽 and symbols ©®™ ± × ÷ — “quotes” ‘single’",
    "<|endoftext|>after the special<|endoftext|>",
    " ",
    "\n\n",
    "",
]


def main():
    peers = Path(os.path.expanduser("~/.cache/tessera-peers"))
    llama = next(iter(sorted(peers.glob("llama-cpp-python-*/vendor/llama.cpp"))), None)
    if llama is None:
        raise SystemExit("llama.cpp's source not found: run scripts/peers/build_llamacpp.sh first")
    sys.path.insert(0, str(llama / "gguf-py"))
    import gguf
    from transformers import Qwen2Tokenizer

    reader = gguf.GGUFReader(str(llama / "models/ggml-vocab-qwen2.gguf"))
    field = lambda key: [bytes(reader.fields[key].parts[i]).decode("utf-8") for i in reader.fields[key].data]
    tokens, merges = field("tokenizer.ggml.tokens"), field("tokenizer.ggml.merges")[:MERGES]
    ids = {t: i for i, t in enumerate(tokens)}
    byte_symbols = [t for t in tokens[:256]]
    assert len(set(byte_symbols)) == 256 and all(len(t) == 1 for t in byte_symbols), "the first 256 tokens are bytes"
    keep = set(byte_symbols)
    for m in merges:
        a, b = m.split(" ", 1)
        assert a in keep and b in keep, f"merge {m} joins a token past the cut"
        keep.add(a + b)
    vocab_tokens = sorted(keep, key=lambda t: ids[t]) + ["<|endoftext|>"]
    vocab = {t: i for i, t in enumerate(vocab_tokens)}

    OUT.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(OUT / "vocab.gguf"), "qwen2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(vocab_tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * (len(vocab_tokens) - 1) + [gguf.TokenType.CONTROL])
    w.add_token_merges(merges)
    w.add_eos_token_id(vocab["<|endoftext|>"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    tok = Qwen2Tokenizer(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges])
    want = [tok.encode(t, add_special_tokens=False) for t in TEXTS]
    for t, i in zip(TEXTS, want):
        assert tok.decode(i) == __import__("unicodedata").normalize("NFC", t), t
    (OUT / "reference.json").write_text(json.dumps({"texts": TEXTS, "ids": want}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUT}: {len(vocab_tokens)} tokens, {len(merges)} merges, {len(TEXTS)} texts", file=sys.stderr)


if __name__ == "__main__":
    main()
