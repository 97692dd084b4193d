#!/usr/bin/env bash
# Writes tests/fixtures/quant/<name>-<type>/llamacpp_steps.json (issue 39, proof point 2): what
# llama.cpp computes on the tiny quantized pair (model.gguf + mmproj.gguf, from
# scripts/make_quant_references.sh) with llama-mtmd-cli's own code (build_mtmd_logits.sh's
# llama-mtmd-logits), greedy, like for like with tessera as compare_quantized_pairs.sh runs them
# (mtmd_pairs.sh's image and flags, mtmd_prompt.py's prompt): the image file, tessera's `--raw`
# prompt, llama.cpp's prompt chunks (text ids, image token counts) and per step its top-5 logits,
# top-1/top-2 margin and chosen id. crates/tessera/tests/quantized_pairs.rs checks tessera
# against them. Not run in CI; the outputs are committed.
#
# Usage: scripts/peers/make_mtmd_logits_references.sh [name…] (default: qwen3-vl-tiny qwen2-vl-tiny
#   qwen2.5-vl-tiny llava-interleave-tiny qwen3.5-tiny: the pairs quantized_pairs.rs checks). TYPES (default "Q8_0 Q4_K_M"), N (16), THREADS (2).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/llamacpp_source.sh"
source "$here/mtmd_pairs.sh"
bin="$("$here/build_mtmd_logits.sh" | tail -1)"
py="${CONVERT_VENV:-$cache/convert-venv}/bin/python"
[ -x "$py" ] || { echo "no $py (llama.cpp's converter venv: scripts/peers/convert_hf.py)" >&2; exit 1; }
question="What is in this image?"
[ $# -gt 0 ] || set -- qwen3-vl-tiny qwen2-vl-tiny qwen2.5-vl-tiny llava-interleave-tiny qwen3.5-tiny
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for name in "$@"; do
  mtmd_pair_args "$name" || { echo "$name: no like-for-like settings" >&2; exit 1; }
  image="${args[0]}" marker="${args[1]}" flags=("${args[@]:2}")
  for t in ${TYPES:-Q8_0 Q4_K_M}; do
    dir="$repo/tests/fixtures/quant/$name-$t"
    [ -f "$dir/model.gguf" ] || { echo "no $dir/model.gguf (scripts/make_quant_references.sh)" >&2; exit 1; }
    "$py" "$here/mtmd_prompt.py" "$src/vendor/llama.cpp/gguf-py" "$dir/model.gguf" "$question" "$marker" \
      "$work/ours.txt" "$work/theirs.txt"
    theirs="$(cat "$work/theirs.txt"; printf x)"
    MTMD_LOGITS_FILE="$work/steps.jsonl" LD_LIBRARY_PATH="$(dirname "$bin")" "$bin" -m "$dir/model.gguf" \
      --mmproj "$dir/mmproj.gguf" --image "$image" -p "${theirs%x}" --jinja \
      --chat-template '{{ messages[0].content }}' -n "${N:-16}" --temp 0 -t "${THREADS:-2}" "${flags[@]}" \
      >"$work/out.txt" 2>"$work/log.txt" || { tail -5 "$work/log.txt" >&2; exit 1; }
    python3 - "$work/steps.jsonl" "$work/ours.txt" "$(basename "$image")" "$name $t" "$dir/llamacpp_steps.json" <<'EOF'
import json, sys
lines, ours, image, label, out = sys.argv[1:6]
rows = [json.loads(l) for l in open(lines) if l.strip()]
chunks = [r for r in rows if "text" in r or "media" in r]
steps = [r for r in rows if "top" in r]
doc = {
    "source": "scripts/peers/make_mtmd_logits_references.sh: llama-mtmd-cli's code (llama-cpp-python 0.3.36's llama.cpp), greedy, 2 threads",
    "pair": label,
    "image": image,
    "prompt": open(ours).read(),
    "chunks": chunks,
    "steps": steps,
}
json.dump(doc, open(out, "w"), indent=1)
print(f"{label}: {len(chunks)} chunks, {len(steps)} steps, margins > 1.0 at",
      [i for i, s in enumerate(steps) if s["margin"] > 1.0])
EOF
  done
done
