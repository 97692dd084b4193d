#!/usr/bin/env bash
# Writes llama.cpp's GGUF + mmproj pair for the tiny SmolVLM checkpoint (issue 39), with
# llama.cpp's own converter: tests/fixtures/vlm/smolvlm-tiny → tests/fixtures/vlm/smolvlm-tiny-gguf/
# {smolvlm-tiny-f32.gguf, mmproj-smolvlm-tiny-f32.gguf}; likewise the Qwen2-VL, Qwen2.5-VL and
# Qwen3-VL pairs (qwen_pair, at the end). Not run in CI; the outputs are committed.
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
#    `get_vocab_base_pre` answering that (convert.py below).
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
cat > "$stage/convert.py" <<'EOF'
# convert_hf_to_gguf.py with the tiny vocabulary's pre-tokenizer named (GPT-2's byte-level split).
import runpy, sys
llama = sys.argv[1]
sys.path[:0] = [llama, llama + "/gguf-py"]
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt2"
sys.argv = [llama + "/convert_hf_to_gguf.py", *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
EOF

# --- convert -------------------------------------------------------------------------------------
mkdir -p "$out"
convert() { (cd "$stage" && "$venv/bin/python" convert.py "$llama" "$stage/smolvlm-tiny" --outtype f32 "$@" 2>&1 \
  | grep -E "ERROR|WARNING|successfully" >&2); }
log "text model"
convert --outfile "$out/smolvlm-tiny-f32.gguf"
log "mmproj"
convert --mmproj --outfile "$out/mmproj-smolvlm-tiny-f32.gguf"
ls -l "$out"/*.gguf >&2

# --- Qwen2-VL, Qwen2.5-VL, Qwen3-VL ----------------------------------------------------------------
# The tiny checkpoints are written by transformers 5 too; their staging copies take the same
# tokenizer_config.json change (no weight changes), and the converter runs through
# convert_qwen.py, which changes two things in it:
#  - the mmproj's tensor-name table is built for the tower's block count, and the merger's
#    `mlp.2` is found through it as block 2: a 2-block tower (the tiny Qwen2-VL) has none, and
#    the converter stops with "Can not map tensor 'visual.merger.mlp.2.bias'". The table is
#    built for at least 3 blocks (names of blocks the tower lacks are never asked for);
#  - it writes three keys llama.cpp's format defines but its Qwen converters leave out, because
#    the tiny checkpoints' values differ from the defaults a reader assumes:
#    `clip.vision.image_min_pixels` / `image_max_pixels` (the processor's
#    `size.shortest_edge` / `longest_edge`: 256 / 4096 pixels here, where Qwen2VLImageProcessor's
#    defaults are 56·56 / 28·28·1280 and llama.cpp's 8 / 4096 tokens) and, for Qwen2.5-VL,
#    `clip.vision.window_size` (16 px here, 112 by default).
cat > "$stage/convert_qwen.py" <<'EOF'
import runpy, sys
llama = sys.argv[1]
sys.path[:0] = [llama, llama + "/gguf-py"]
import gguf
get_map = gguf.get_tensor_name_map
gguf.get_tensor_name_map = lambda arch, n_blocks: get_map(arch, max(n_blocks, 3))
import conversion.base, conversion.qwenvl, conversion.qwen3vl
conversion.base.gguf.get_tensor_name_map = gguf.get_tensor_name_map

def with_budget(cls):
    write = cls.set_gguf_parameters
    def set_gguf_parameters(self):
        write(self)
        size = self.preprocessor_config["size"]
        self.gguf_writer.add_vision_min_pixels(int(size["shortest_edge"]))
        self.gguf_writer.add_vision_max_pixels(int(size["longest_edge"]))
        if "window_size" in self.hparams_vision:
            self.gguf_writer.add_vision_window_size(int(self.hparams_vision["window_size"]))
    cls.set_gguf_parameters = set_gguf_parameters

with_budget(conversion.qwenvl.Qwen2VLVisionModel)
with_budget(conversion.qwen3vl.Qwen3VLVisionModel)
runpy.run_path(sys.argv[0].replace("convert_qwen.py", "convert.py"), run_name="__main__")
EOF

# The pair of the tiny checkpoint tests/fixtures/vlm/$1, in tests/fixtures/vlm/$1-gguf/.
qwen_pair() {
  local name="$1" dir="$stage/$1" pair_out="$repo/tests/fixtures/vlm/$1-gguf"
  mkdir "$dir" && mkdir -p "$pair_out"
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json chat_template.jinja \
    generation_config.json processor_config.json; do
    cp "$repo/tests/fixtures/vlm/$name/$f" "$dir/"
  done
  "$venv/bin/python" - "$dir" <<'EOF'
import json, sys
d = sys.argv[1]
t = json.load(open(f"{d}/tokenizer_config.json"))
t["tokenizer_class"] = "PreTrainedTokenizerFast"
t["additional_special_tokens"] = t.pop("extra_special_tokens")
json.dump(t, open(f"{d}/tokenizer_config.json", "w"), indent=2)
EOF
  run() { (cd "$stage" && "$venv/bin/python" convert_qwen.py "$llama" "$dir" --outtype f32 "$@" 2>&1 \
    | grep -E "ERROR|WARNING|Error|successfully" >&2); }
  log "$name: text model"
  run --outfile "$pair_out/$name-f32.gguf"
  log "$name: mmproj"
  run --mmproj --outfile "$pair_out/mmproj-$name-f32.gguf"
  ls -l "$pair_out"/*.gguf >&2
}

qwen2_vl() { qwen_pair qwen2-vl-tiny; }
qwen2_5_vl() { qwen_pair qwen2.5-vl-tiny; }
qwen3_vl() { qwen_pair qwen3-vl-tiny; }

qwen2_vl
qwen2_5_vl
qwen3_vl
