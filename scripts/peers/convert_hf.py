"""llama.cpp's convert_hf_to_gguf.py with the tiny vocabularies' pre-tokenizer named.

The converter recognizes a BPE pre-tokenizer by hashing its output on a test text against a
table of published tokenizers; the tiny test vocabularies are in no table. Their pre-tokenizer is
GPT-2's byte-level split, which llama.cpp calls `gpt-2` (llama-vocab.cpp refuses `gpt2`, the
tokenizer *model* name, as an "unknown pre-tokenizer type"), so `get_vocab_base_pre` answers that.

Usage: python convert_hf.py LLAMA_CPP_DIR MODEL_DIR [converter arguments ...]
"""
import runpy
import sys

llama = sys.argv[1]
sys.path[:0] = [llama, llama + "/gguf-py"]
import conversion.base as base  # noqa: E402

base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = [llama + "/convert_hf_to_gguf.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
