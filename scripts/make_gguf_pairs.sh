#!/usr/bin/env bash
# Writes llama.cpp's GGUF + mmproj pair for the tiny SmolVLM checkpoint (issue 39), with
# llama.cpp's own converter: tests/fixtures/vlm/smolvlm-tiny → tests/fixtures/vlm/smolvlm-tiny-gguf/
# {smolvlm-tiny-f32.gguf, mmproj-smolvlm-tiny-f32.gguf}. Not run in CI; the outputs are committed.
#
# The converter is convert_hf_to_gguf.py (+ its conversion/ package and gguf-py) from the
# llama.cpp source that PyPI's llama-cpp-python==0.3.36 sdist vendors (upstream commit 0c1e57098),
# fetched as scripts/peers/build_llamacpp.sh fetches it. It runs in a venv with what it imports
# (requirements/requirements-convert_hf_to_gguf.txt: torch 2.11.0, numpy 2.2.6, sentencepiece,
# transformers 4.57.6, protobuf). torch comes from PyTorch's CPU index when that is reachable,
# else from PyPI (which also pulls its CUDA libraries, ~3 GB). Everything lives outside the repo,
# in ~/.cache/tessera-peers/ (override with TESSERA_PEERS_CACHE).
#
# The tiny checkpoint is written by transformers 5 (scripts/make_tiny_vlms.py); three things the
# converter (pinned to transformers 4) trips on are adapted in a staging copy, none touching a
# weight:
#  - config.json: `text_config.architectures = ["VLlama3ForCausalLM"]`, what real SmolVLM configs
#    carry (tests/fixtures/real_configs/smolvlm-256m-instruct); without it the text conversion
#    finds no class for Idefics3ForConditionalGeneration;
#  - tokenizer_config.json: transformers 5's `TokenizersBackend` class becomes transformers 4's
#    `PreTrainedTokenizerFast` (the same tokenizer.json), its `extra_special_tokens` list
#    `additional_special_tokens`;
#  - the converter recognizes a BPE pre-tokenizer by hashing its output on a test text against a
#    table of published tokenizers; the tiny 480-token vocabulary is in no table. Its pre-tokenizer
#    is GPT-2's byte-level split, which llama.cpp calls `gpt2`: the converter runs with
#    `get_vocab_base_pre` answering that (scripts/peers/convert_hf.py).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
# LLAMA_CPP_PYTHON_VERSION, cache, src and fetch_llamacpp_source, as build_llamacpp.sh has them.
source "$repo/scripts/peers/llamacpp_source.sh"
llama="$src/vendor/llama.cpp"
venv="$cache/convert-venv"
checkpoint="$repo/tests/fixtures/vlm/smolvlm-tiny"
out="$repo/tests/fixtures/vlm/smolvlm-tiny-gguf"

log() { echo "[make_gguf_pairs] $*" >&2; }

# --- the converter: llama-cpp-python's sdist from PyPI (as build_llamacpp.sh) ------------------
fetch_llamacpp_source

# --- the venv ------------------------------------------------------------------------------------
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, transformers, numpy, sentencepiece" 2>/dev/null; then
  log "creating the converter's venv in $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --index-url https://download.pytorch.org/whl/cpu \
    "torch==2.11.0" >&2 2>/dev/null || log "PyTorch's CPU index unreachable: torch from PyPI"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "torch==2.11.0" "numpy~=2.2.6" \
    "sentencepiece>=0.1.98,<0.3.0" "transformers==4.57.6" "protobuf>=4.21.0,<5.0.0" >&2
fi

# --- staging copy --------------------------------------------------------------------------------
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/smolvlm-tiny"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json chat_template.jinja \
  generation_config.json processor_config.json; do
  cp "$checkpoint/$f" "$stage/smolvlm-tiny/"
done
"$venv/bin/python" - "$stage/smolvlm-tiny" <<'EOF'
import json, sys
d = sys.argv[1]
c = json.load(open(f"{d}/config.json"))
c["text_config"]["architectures"] = ["VLlama3ForCausalLM"]
json.dump(c, open(f"{d}/config.json", "w"), indent=2)
t = json.load(open(f"{d}/tokenizer_config.json"))
t["tokenizer_class"] = "PreTrainedTokenizerFast"
t["additional_special_tokens"] = t.pop("extra_special_tokens")
json.dump(t, open(f"{d}/tokenizer_config.json", "w"), indent=2)
EOF
# --- convert -------------------------------------------------------------------------------------
mkdir -p "$out"
convert() { (cd "$stage" && "$venv/bin/python" "$repo/scripts/peers/convert_hf.py" "$llama" "$stage/smolvlm-tiny" --outtype f32 "$@" 2>&1 \
  | grep -E "ERROR|WARNING|successfully" >&2); }
log "text model"
convert --outfile "$out/smolvlm-tiny-f32.gguf"
log "mmproj"
convert --mmproj --outfile "$out/mmproj-smolvlm-tiny-f32.gguf"
ls -l "$out"/*.gguf >&2
