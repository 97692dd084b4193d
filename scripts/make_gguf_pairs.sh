#!/usr/bin/env bash
# Writes llama.cpp's GGUF + mmproj pairs for the tiny VLM checkpoints (issue 39), with llama.cpp's
# own converters, into tests/fixtures/vlm/<name>-gguf/ (the outputs are committed; not run in CI):
#   smolvlm           smolvlm-tiny          → smolvlm-tiny-f32.gguf + mmproj-smolvlm-tiny-f32.gguf
#   llava             llava-tiny            → llava-tiny-f32.gguf + mmproj-llava-tiny-f32.gguf
#   llava_interleave  llava-interleave-tiny → llava-interleave-tiny-f32.gguf + mmproj-…-f32.gguf
#   qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_5  qwen2-vl-tiny, qwen2.5-vl-tiny, qwen3-vl-tiny, qwen3.5-tiny
#                     → <name>-f32.gguf + mmproj-<name>-f32.gguf
#   gemma3            gemma3-tiny           → gemma3-tiny-f32.gguf + mmproj-gemma3-tiny-f32.gguf, and
#                     f16/mmproj-gemma3-tiny-f16.gguf (the converter's f16 output, unwrapped)
#   mistral3          mistral3-pair-tiny    → mistral3-pair-tiny-f32.gguf + mmproj-mistral3-pair-tiny-f32.gguf, and
#                     f16/mmproj-mistral3-pair-tiny-f16.gguf (the converter's f16 output)
#   minicpm           minicpm-v4.6-pair-tiny → minicpm-v4.6-pair-tiny-f32.gguf + mmproj-…-f32.gguf
#   internvl          internvl-tiny         → internvl-tiny-f32.gguf + mmproj-internvl-tiny-f32.gguf
#   gemma4            gemma4-pair-tiny      → gemma4-pair-tiny-f32.gguf + mmproj-gemma4-pair-tiny-f32.gguf
# Usage: scripts/make_gguf_pairs.sh [family…] (default: all). One function per family below.
#
# The converter is convert_hf_to_gguf.py (+ its conversion/ package and gguf-py) from the
# llama.cpp source that PyPI's llama-cpp-python==0.3.36 sdist vendors (upstream commit 0c1e57098),
# fetched as scripts/peers/build_llamacpp.sh fetches it; LLaVA's mmproj comes from the same
# source's tools/mtmd/legacy-models/ scripts (convert_hf_to_gguf.py --mmproj converts only
# Pixtral under LlavaForConditionalGeneration). It runs in a venv with what it imports
# (requirements/requirements-convert_hf_to_gguf.txt: torch 2.11.0, numpy 2.2.6, sentencepiece,
# transformers 4.57.6, protobuf). torch comes from PyTorch's CPU index when that is reachable,
# else from PyPI (which also pulls its CUDA libraries, ~3 GB). Everything lives outside the repo,
# in ~/.cache/tessera-peers/ (override with TESSERA_PEERS_CACHE).
#
# The tiny checkpoints are written by transformers 5 (scripts/make_tiny_vlms.py); what the
# converter (pinned to transformers 4) trips on is adapted in a staging copy, never a weight
# (each fixture's SOURCES.md says what and why). Common to all:
#  - tokenizer_config.json: transformers 5's `TokenizersBackend` class becomes transformers 4's
#    `PreTrainedTokenizerFast` (the same tokenizer.json), its `extra_special_tokens` list
#    `additional_special_tokens`;
#  - the converter recognizes a BPE pre-tokenizer by hashing its output on a test text against a
#    table of published tokenizers; the tiny 480-token vocabularies are in no table. Their
#    pre-tokenizer is GPT-2's byte-level split, which llama.cpp calls `gpt-2`: the converter runs
#    with `get_vocab_base_pre` answering that (scripts/peers/convert_hf.py).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
# LLAMA_CPP_PYTHON_VERSION, cache, src and fetch_llamacpp_source, as build_llamacpp.sh has them.
source "$repo/scripts/peers/llamacpp_source.sh"
llama="$src/vendor/llama.cpp"
venv="$cache/convert-venv"
fixtures="$repo/tests/fixtures/vlm"

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

# --- shared: the staging directory, the converter -------------------------------------------------
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
# stage_checkpoint NAME: copies the checkpoint NAME's files into $stage/NAME, with the
# transformers-4 tokenizer_config.json.
stage_checkpoint() {
  local name="$1"
  mkdir -p "$stage/$name"
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json chat_template.jinja \
    generation_config.json processor_config.json; do
    cp "$fixtures/$name/$f" "$stage/$name/"
  done
  "$venv/bin/python" - "$stage/$name" <<'EOF'
import json, sys
d = sys.argv[1]
t = json.load(open(f"{d}/tokenizer_config.json"))
t["tokenizer_class"] = "PreTrainedTokenizerFast"
t["additional_special_tokens"] = t.pop("extra_special_tokens", [])
json.dump(t, open(f"{d}/tokenizer_config.json", "w"), indent=2)
EOF
}

# convert NAME ARGS…: convert_hf_to_gguf.py on the staged NAME, in f32.
convert() {
  local name="$1"
  shift
  (cd "$stage" && "$venv/bin/python" "$repo/scripts/peers/convert_hf.py" "$llama" "$stage/$name" --outtype f32 "$@" 2>&1 \
    | grep -E "ERROR|WARNING|successfully" >&2)
}

# --- Idefics3 / SmolVLM --------------------------------------------------------------------------
# config.json: `text_config.architectures = ["VLlama3ForCausalLM"]`, what real SmolVLM configs
# carry (tests/fixtures/real_configs/smolvlm-256m-instruct); without it the text conversion finds
# no class for Idefics3ForConditionalGeneration.
smolvlm() {
  local out="$fixtures/smolvlm-tiny-gguf"
  stage_checkpoint smolvlm-tiny
  "$venv/bin/python" - "$stage/smolvlm-tiny" <<'EOF'
import json, sys
d = sys.argv[1]
c = json.load(open(f"{d}/config.json"))
c["text_config"]["architectures"] = ["VLlama3ForCausalLM"]
json.dump(c, open(f"{d}/config.json", "w"), indent=2)
EOF
  mkdir -p "$out"
  log "smolvlm: text model"
  convert smolvlm-tiny --outfile "$out/smolvlm-tiny-f32.gguf"
  log "smolvlm: mmproj"
  convert smolvlm-tiny --mmproj --outfile "$out/mmproj-smolvlm-tiny-f32.gguf"
  ls -l "$out"/*.gguf >&2
}

# --- LLaVA (1.5: CLIP + Llama; interleave: SigLIP + Qwen2) ---------------------------------------
# The text model: convert_hf_to_gguf.py on the whole checkpoint (LlavaForConditionalGeneration is
# a Llama there; the interleave one's `text_config.architectures = ["Qwen2ForCausalLM"]`, what
# llava-interleave-qwen configs carry, makes it a qwen2). The mmproj as llama.cpp's
# docs/multimodal/llava.md makes it: llava_surgery_v2.py splits the tower (llava.clip) and the
# projector (llava.projector) out of the checkpoint, then convert_image_encoder_to_gguf.py writes
# them with the tower's config (`--clip-model-is-vision` for CLIP, `--clip-model-is-siglip`).
# Staged (see the fixtures' SOURCES.md): the tower under the transformers-4 names
# `vision_tower.vision_model.*` the surgery looks for (transformers 5 writes `vision_tower.*`);
# the tower's config.json is `vision_config` plus the checkpoint's `vision_feature_layer`; a
# SigLIP `hidden_act` of `gelu_pytorch_tanh` is written `gelu`; the script's f16 casts of the
# patch kernel and the projector's matrices are off under `--use-f32`. The processor's mean and
# std are passed as `--image-mean` / `--image-std` (the script reads no processor for a tower
# alone and would write CLIP's).
llava_pair() {
  local name="$1" tower_flags="$2" out="$fixtures/$1-gguf"
  stage_checkpoint "$name"
  "$venv/bin/python" - "$stage/$name" <<'EOF'
import json, os, sys
from safetensors.torch import load_file, save_file
d = sys.argv[1]
c = json.load(open(f"{d}/config.json"))
if c["text_config"]["model_type"] == "qwen2":
    c["text_config"]["architectures"] = ["Qwen2ForCausalLM"]
json.dump(c, open(f"{d}/config.json", "w"), indent=2)
t = load_file(f"{d}/model.safetensors")
t = {("vision_tower.vision_model." + k[len("vision_tower."):] if k.startswith("vision_tower.") else k): v
     for k, v in t.items()}
save_file(t, f"{d}/model.safetensors", metadata={"format": "pt"})
v = dict(c["vision_config"], vision_feature_layer=c.get("vision_feature_layer", -2))
if v["model_type"] == "siglip_vision_model" and v["hidden_act"] == "gelu_pytorch_tanh":
    v["hidden_act"] = "gelu"
os.makedirs(f"{d}/vit")
json.dump(v, open(f"{d}/vit/config.json", "w"), indent=2)
p = json.load(open(f"{d}/processor_config.json"))["image_processor"]
norm = ["--image-mean", *map(str, p["image_mean"]), "--image-std", *map(str, p["image_std"])]
open(f"{d}/vit/normalize.args", "w").write(" ".join(norm))
EOF
  sed -e 's/data = data.squeeze().numpy().astype(np.float16)/data = data.squeeze().numpy().astype(np.float32 if args.use_f32 else np.float16)/' \
    -e 's/    if n_dims == 4:/    if n_dims == 4 and not args.use_f32:/' \
    "$llama/tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py" >"$stage/convert_image_encoder.py"
  mkdir -p "$out"
  log "$name: text model"
  convert "$name" --outfile "$out/$name-f32.gguf"
  log "$name: mmproj"
  (
    cd "$stage"
    "$venv/bin/python" "$llama/tools/mtmd/legacy-models/llava_surgery_v2.py" -C -m "$name" >/dev/null
    mv "$name/llava.clip" "$name/vit/pytorch_model.bin"
    mv "$name/llava.projector" "$name/vit/"
    PYTHONPATH="$llama/gguf-py" "$venv/bin/python" convert_image_encoder.py -m "$name/vit" \
      --llava-projector "$name/vit/llava.projector" --output-dir "$name/vit" $tower_flags $(cat "$name/vit/normalize.args") --use-f32 >/dev/null
    mv "$name/vit/mmproj-model-f32.gguf" "$out/mmproj-$name-f32.gguf"
  )
  ls -l "$out"/*.gguf >&2
}
llava() { llava_pair llava-tiny --clip-model-is-vision; }
llava_interleave() { llava_pair llava-interleave-tiny "--clip-model-is-vision --clip-model-is-siglip"; }

# --- Qwen2-VL, Qwen2.5-VL, Qwen3-VL ----------------------------------------------------------------
# The tiny checkpoints are written by transformers 5 too; their staging copies take the same
# tokenizer_config.json change (no weight changes), and the converter runs through
# convert_qwen.py, which changes two things in it:
#  - the mmproj's tensor-name table is built for the tower's block count, and the merger's
#    `mlp.2` is found through it as block 2: a 2-block tower (the tiny Qwen2-VL) has none, and
#    the converter stops with "Can not map tensor 'visual.merger.mlp.2.bias'" (InternVL's
#    `mlp1.3`, as block 3, likewise). The table is built for at least 4 blocks (names of blocks
#    the tower lacks are never asked for);
#  - it writes three keys llama.cpp's format defines but its Qwen converters leave out, because
#    the tiny checkpoints' values differ from the defaults a reader assumes:
#    `clip.vision.image_min_pixels` / `image_max_pixels` (the processor's
#    `size.shortest_edge` / `longest_edge`: 256 / 4096 pixels here, where Qwen2VLImageProcessor's
#    defaults are 56·56 / 28·28·1280 and llama.cpp's 8 / 4096 tokens) and, for Qwen2.5-VL,
#    `clip.vision.window_size` (16 px here, 112 by default).
cat > "$stage/convert_qwen.py" <<'EOF'
# Usage: convert_qwen.py CONVERT_HF_PY LLAMA_CPP_DIR MODEL_DIR [converter arguments ...]
import runpy, sys
script = sys.argv.pop(1)
llama = sys.argv[1]
sys.path[:0] = [llama, llama + "/gguf-py"]
import gguf
get_map = gguf.get_tensor_name_map
gguf.get_tensor_name_map = lambda arch, n_blocks: get_map(arch, max(n_blocks, 4))
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
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
EOF

# The pair of the tiny checkpoint tests/fixtures/vlm/$1, in tests/fixtures/vlm/$1-gguf/; further
# arguments go to the text model's conversion.
qwen_pair() {
  local name="$1" dir="$stage/$1" pair_out="$repo/tests/fixtures/vlm/$1-gguf"
  shift
  local text_args=("$@")
  stage_checkpoint "$name"
  mkdir -p "$pair_out"
  run() { (cd "$stage" && "$venv/bin/python" convert_qwen.py "$repo/scripts/peers/convert_hf.py" "$llama" "$dir" --outtype f32 "$@" 2>&1 \
    | grep -E "ERROR|WARNING|Error|successfully" >&2); }
  log "$name: text model"
  run "${text_args[@]}" --outfile "$pair_out/$name-f32.gguf"
  log "$name: mmproj"
  run --mmproj --outfile "$pair_out/mmproj-$name-f32.gguf"
  ls -l "$pair_out"/*.gguf >&2
}

qwen2_vl() { qwen_pair qwen2-vl-tiny; }
qwen2_5_vl() { qwen_pair qwen2.5-vl-tiny; }
qwen3_vl() { qwen_pair qwen3-vl-tiny; }
# Qwen3.5 (`conversion/qwen.py`'s Qwen3_5TextModel, a `qwen35` text GGUF; its tower is Qwen3-VL's
# `qwen3vl_merger` without DeepStack blocks): --no-mtp, since the checkpoint has no
# multi-token-prediction layers (the converter otherwise counts them from the tensors it finds).
qwen3_5() { qwen_pair qwen3.5-tiny --no-mtp; }

# --- Gemma 3 ----------------------------------------------------------------------------------------
# convert_hf_to_gguf.py on the whole checkpoint: Gemma3ForConditionalGeneration's text model
# (`gemma3`: every `*norm.weight` stored as 1 + w, the embedding cut to the tokenizer's
# vocabulary, which here is the whole of it) and, with --mmproj, its tower and projector
# (`clip.projector_type = gemma3`, `mm.soft_emb_norm` stored as 1 + w,
# `clip.vision.projector.scale_factor` 2 since the tiny grid of 8×8 patches pools to 4×4).
# Staged (see the fixture's SOURCES.md), no weight changes: the tokenizer_config.json change;
# the tower under the transformers-4 names `vision_tower.vision_model.*` gguf-py's tensor map
# knows (transformers 5 writes `vision_tower.*`, as for LLaVA). And the converter runs through
# convert_gemma3.py, which keeps `mm.input_projection` in the file's type: `Gemma3VisionModel`
# forces it to f16 whatever `--outtype` says (llama.cpp issue 13025), which would leave the
# pair's image tokens an f16 rounding away from the folder's (the f32 pair is the exact check).
# The converter's own f16 mmproj, as users download it (every matrix f16, the input projection
# forced so), is written too, into f16/ (two mmproj files side by side would leave the one
# beside the model ambiguous).
cat > "$stage/convert_gemma3.py" <<'EOF'
# Usage: convert_gemma3.py CONVERT_HF_PY LLAMA_CPP_DIR MODEL_DIR [converter arguments ...]
import runpy, sys
script = sys.argv.pop(1)
llama = sys.argv[1]
sys.path[:0] = [llama, llama + "/gguf-py"]
import conversion.gemma as gemma
force = gemma.Gemma3VisionModel.tensor_force_quant
def keep_input_projection(self, name, new_name, bid, n_dims):
    return False if "input_projection" in name else force(self, name, new_name, bid, n_dims)
gemma.Gemma3VisionModel.tensor_force_quant = keep_input_projection
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
EOF

gemma3() {
  local name=gemma3-tiny out="$fixtures/gemma3-tiny-gguf"
  stage_checkpoint "$name"
  "$venv/bin/python" - "$stage/$name" <<'PY'
import sys
from safetensors.torch import load_file, save_file
d = sys.argv[1]
t = load_file(f"{d}/model.safetensors")
t = {("vision_tower.vision_model." + k[len("vision_tower."):] if k.startswith("vision_tower.") else k): v
     for k, v in t.items()}
save_file(t, f"{d}/model.safetensors", metadata={"format": "pt"})
PY
  mkdir -p "$out"
  run() { (cd "$stage" && "$venv/bin/python" convert_gemma3.py "$repo/scripts/peers/convert_hf.py" "$llama" "$stage/$name" --outtype f32 "$@" 2>&1 \
    | grep -E "ERROR|Error|successfully" >&2); }
  log "gemma3: text model"
  run --outfile "$out/$name-f32.gguf"
  log "gemma3: mmproj"
  run --mmproj --outfile "$out/mmproj-$name-f32.gguf"
  log "gemma3: mmproj in f16, as the converter writes it"
  mkdir -p "$out/f16"
  (cd "$stage" && "$venv/bin/python" "$repo/scripts/peers/convert_hf.py" "$llama" "$stage/$name" --outtype f16 --mmproj \
    --outfile "$out/f16/mmproj-$name-f16.gguf" 2>&1 | grep -E "ERROR|Error|successfully" >&2)
  ls -l "$out"/*.gguf "$out"/f16/*.gguf >&2
}

# --- Mistral 3 ------------------------------------------------------------------------------------
# convert_hf_to_gguf.py on the whole checkpoint: Mistral3ForConditionalGeneration's text model
# (`mistral3`, Llama's tensors with q/k rows permuted for interleaved RoPE) and, with --mmproj,
# its Pixtral tower and projector (`conversion/llava.py`, LlavaVisionModel: `clip.projector_type =
# pixtral`, `clip.use_silu`, `clip.vision.spatial_merge_size`, the tower's q/k rows permuted as
# the text model's, `v.token_embd.img_break` the [IMG_BREAK] row of the embeddings). The
# checkpoint is mistral3-pair-tiny, mistral3-tiny with a 3-layer tower: the mmproj's tensor map
# is sized by the tower's layer count and finds the projector's `linear_2` as block 2, so the
# 2-layer tower of mistral3-tiny stops it ("Can not map tensor
# 'multi_modal_projector.linear_2.weight'"). Staged: the tokenizer_config.json change only.
mistral3() {
  local name=mistral3-pair-tiny out="$fixtures/mistral3-pair-tiny-gguf"
  stage_checkpoint "$name"
  mkdir -p "$out"
  log "mistral3: text model"
  convert "$name" --outfile "$out/$name-f32.gguf"
  log "mistral3: mmproj"
  convert "$name" --mmproj --outfile "$out/mmproj-$name-f32.gguf"
  log "mistral3: mmproj in f16, as the converter writes it"
  mkdir -p "$out/f16"
  (cd "$stage" && "$venv/bin/python" "$repo/scripts/peers/convert_hf.py" "$llama" "$stage/$name" --outtype f16 --mmproj \
    --outfile "$out/f16/mmproj-$name-f16.gguf" 2>&1 | grep -E "ERROR|Error|successfully" >&2)
  ls -l "$out"/*.gguf "$out"/f16/*.gguf >&2
}

# --- MiniCPM-V 4.6 --------------------------------------------------------------------------------
# convert_hf_to_gguf.py on the whole checkpoint (`conversion/minicpm.py`): the text model is
# Qwen3.5's (MiniCPMV4_6TextModel, a `qwen35` text GGUF, --no-mtp as for qwen3_5) and, with
# --mmproj, MiniCPMV4_6VisionModel writes the SigLIP tower, the window-attention ViT merger and
# the DownsampleMLP merger (`clip.projector_type = minicpmv4_6`). Staged: the tokenizer_config.json
# change only.
minicpm() {
  local name=minicpm-v4.6-pair-tiny out="$fixtures/minicpm-v4.6-pair-tiny-gguf"
  stage_checkpoint "$name"
  mkdir -p "$out"
  log "minicpm: text model"
  convert "$name" --no-mtp --outfile "$out/$name-f32.gguf"
  log "minicpm: mmproj"
  convert "$name" --mmproj --outfile "$out/mmproj-$name-f32.gguf"
  ls -l "$out"/*.gguf >&2
}

# --- InternVL3 ------------------------------------------------------------------------------------
# convert_hf_to_gguf.py on the whole checkpoint: the text model is Qwen2's, and with --mmproj
# `conversion/internvl.py`'s InternVisionModel writes the InternViT tower (its CLS token, position
# table and layer scale `ls1` / `ls2`), the LayerNorm + 2-linear projector (`mm.model.mlp.*`) and
# `clip.projector_type = internvl` with `clip.vision.projector.scale_factor` 1 / downsample_ratio.
# Its tensor map already names the Hugging Face layout transformers writes (Intern-S1's). What the
# converter finds its classes by (OpenGVLab's original configs carry these) is staged:
# `text_config.architectures = ["Qwen2ForCausalLM"]`, `vision_config.architectures =
# ["InternVisionModel"]` (without them it stops at "Model InternVLForConditionalGeneration is not
# supported"), the processor's tile bounds as the original config's `min_dynamic_patch` /
# `max_dynamic_patch`, which the converter writes as `clip.vision.preproc_{min,max}_tiles`, and the
# tower's and projector's tensors under the roots `model.vision_tower.` /
# `model.multi_modal_projector.` its map knows (transformers 5 saves them without `model.`; the
# converter skips them silently, writing an mmproj with no tensors).
internvl() {
  local name=internvl-tiny out="$fixtures/internvl-tiny-gguf"
  stage_checkpoint "$name"
  "$venv/bin/python" - "$stage/$name" <<'PY'
import json, sys
d = sys.argv[1]
c = json.load(open(f"{d}/config.json"))
c["text_config"]["architectures"] = ["Qwen2ForCausalLM"]
c["vision_config"]["architectures"] = ["InternVisionModel"]
p = json.load(open(f"{d}/processor_config.json"))["image_processor"]
c["min_dynamic_patch"], c["max_dynamic_patch"] = p["min_patches"], p["max_patches"]
json.dump(c, open(f"{d}/config.json", "w"), indent=2)
from safetensors.torch import load_file, save_file
t = load_file(f"{d}/model.safetensors")
roots = ("vision_tower.", "multi_modal_projector.")
t = {("model." + k if k.startswith(roots) else k): v for k, v in t.items()}
save_file(t, f"{d}/model.safetensors", metadata={"format": "pt"})
PY
  mkdir -p "$out"
  log "internvl: text model"
  convert "$name" --outfile "$out/$name-f32.gguf"
  # Through convert_qwen.py: the tiny tower's 2 blocks leave the projector's `mlp1.3` no slot.
  log "internvl: mmproj"
  (cd "$stage" && "$venv/bin/python" convert_qwen.py "$repo/scripts/peers/convert_hf.py" "$llama" "$stage/$name" \
    --outtype f32 --mmproj --outfile "$out/mmproj-$name-f32.gguf" 2>&1 | grep -E "ERROR|Error|successfully" >&2)
  ls -l "$out"/*.gguf >&2
}

# --- Gemma 4 ---------------------------------------------------------------------------------------
# convert_hf_to_gguf.py on the whole checkpoint (`conversion/gemma.py`): Gemma4ForConditionalGeneration's
# text model (Gemma4Model, a `gemma4` text GGUF: norms stored as they are, not 1 + w; the vocabulary
# through gguf.LlamaHfVocab as tokenizer model `gemma4`) and, with --mmproj, Gemma4VisionAudioModel's
# tower and embedder (`clip.projector_type = gemma4v`). The checkpoint is gemma4-pair-tiny:
# gemma4-tiny with a byte-fallback BPE tokenizer as real Gemma's (LlamaHfVocab stops at gemma4-tiny's
# byte-level one: "Cannot find Llama BPE tokenizer") and 3 KV-shared layers, which llama.cpp's
# layer-reuse rule needs (scripts/tiny_vlms/gemma4_pair.py). Staged (see the fixture's SOURCES.md),
# no weight changes: the tokenizer_config.json change, with every special added token of tokenizer.json
# in `additional_special_tokens` (transformers 4 counts only those, and the five named ones, as
# special: the converter writes the rest USER_DEFINED, where real Gemma 4 files have `<|turn>`,
# `<|image>`, `<|image|>`… CONTROL and only its 7 "visible" tool/channel tokens USER_DEFINED); and
# the converter runs through convert_gemma4.py, which writes `clip.vision.projector.scale_factor` =
# the tower's `pooling_kernel_size` into the mmproj, a key llama.cpp's format defines and clip.cpp
# reads for gemma4v but the converter leaves out: without it clip.cpp pools 3x3 (real Gemma 4's
# kernel), not the tiny tower's 2x2, and encodes chelsea as 247 image tokens where transformers
# makes 60.
cat > "$stage/convert_gemma4.py" <<'EOF'
# Usage: convert_gemma4.py CONVERT_HF_PY LLAMA_CPP_DIR MODEL_DIR [converter arguments ...]
import runpy, sys
script = sys.argv.pop(1)
llama = sys.argv[1]
sys.path[:0] = [llama, llama + "/gguf-py"]
import conversion.gemma as gemma
write = gemma.Gemma4VisionAudioModel.set_gguf_parameters
def set_gguf_parameters(self):
    write(self)
    self.gguf_writer.add_vision_projector_scale_factor(int(self.hparams_vision["pooling_kernel_size"]))
gemma.Gemma4VisionAudioModel.set_gguf_parameters = set_gguf_parameters
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
EOF

gemma4() {
  local name=gemma4-pair-tiny out="$fixtures/gemma4-pair-tiny-gguf"
  stage_checkpoint "$name"
  "$venv/bin/python" - "$stage/$name" <<'PY'
import json, sys
d = sys.argv[1]
t = json.load(open(f"{d}/tokenizer_config.json"))
named = {t[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token")}
added = json.load(open(f"{d}/tokenizer.json"))["added_tokens"]
t["additional_special_tokens"] = [a["content"] for a in added if a["special"] and a["content"] not in named]
json.dump(t, open(f"{d}/tokenizer_config.json", "w"), indent=2)
PY
  mkdir -p "$out"
  run() { (cd "$stage" && "$venv/bin/python" convert_gemma4.py "$repo/scripts/peers/convert_hf.py" "$llama" "$stage/$name" --outtype f32 "$@" 2>&1 \
    | grep -E "ERROR|Error|successfully" >&2); }
  log "gemma4: text model"
  run --outfile "$out/$name-f32.gguf"
  log "gemma4: mmproj"
  run --mmproj --outfile "$out/mmproj-$name-f32.gguf"
  ls -l "$out"/*.gguf >&2
}

# --- run -----------------------------------------------------------------------------------------
families=("$@")
[ ${#families[@]} -gt 0 ] || families=(smolvlm llava llava_interleave qwen2_vl qwen2_5_vl qwen3_vl qwen3_5 gemma3 mistral3 minicpm internvl gemma4)
for f in "${families[@]}"; do
  case "$f" in
    smolvlm | llava | llava_interleave | qwen2_vl | qwen2_5_vl | qwen3_vl | qwen3_5 | gemma3 | mistral3 | minicpm | internvl | gemma4) "$f" ;;
    *)
      echo "unknown family \`$f\` (smolvlm, llava, llava_interleave, qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_5, gemma3, mistral3, minicpm, internvl, gemma4)" >&2
      exit 2
      ;;
  esac
done
