#!/usr/bin/env bash
# What one device call sends: the device tool copies this checkout's working tree (tracked and
# untracked-not-ignored files, and the paths named in its `carry`), at most 64 MiB in all, and the
# tracked tree alone is more (73 MiB on 2026-11-29, most of it test fixtures). So before a call the
# working tree is cut down to what that call reads, on a detached commit, and put back after:
#   scripts/gpu/travel.sh keep PATH...   # keep only scripts/, .gitignore and the tracked files under PATH...
#   scripts/gpu/travel.sh home           # back to the branch (or commit) it left
#   scripts/gpu/travel.sh size [CARRY...] # what would travel now, with these carried paths
#   scripts/gpu/travel.sh part NAME      # `keep` for one part of the runbook, and the device command
#                                        # to run on it (NAME: folders, pairs, bins, smollm2)
# `keep` needs a clean working tree; the files it drops come back with `home`. Nothing ignored
# (target/, .gpu/, models/smollm2-135m-instruct/) is touched.
#
# The parts (each with .gpu/ carried, ~20 MiB; scripts/gpu/README.md, "Device calls"):
#   folders  the suite but for the pairs, the quantized pairs and the 18 tests of the SmolLM2 GGUF
#            (every family's checkpoint folder, tiny text models, bf16/f16, batching), then the
#            CLI's GPU answer against the CPU's
#   pairs    the GGUF + mmproj pairs (f32/f16 pairs against their folders)
#   bins     the quantized pairs (Q8_0, Q4_K_M), then the benchmarks against transformers
#   smollm2  the 18 tests that read the SmolLM2 GGUF (98 MB): more than one call carries, so it
#            travels in two halves, .gpu-parts/smollm2.a in a first call that keeps it in /tmp,
#            .gpu-parts/smollm2.b with .gpu/ in a second while the machine is still warm
set -euo pipefail
cd "$(dirname "$0")/../.."
from=.git/tessera-travel-from
[ -f .git ] && from=$(git rev-parse --git-dir)/tessera-travel-from
limit=$((64 * 1024 * 1024))

size() { # bytes of the tracked and untracked-not-ignored files, and of the carried paths
  {
    git ls-files -z --cached --others --exclude-standard
    for c in "$@"; do [ ! -e "$c" ] || find "$c" -type f -print0; done
  } | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}'
}
report() {
  local bytes
  bytes=$(size "$@")
  awk -v b="$bytes" -v l="$limit" 'BEGIN {printf "travels: %.1f MiB of %.0f MiB%s\n", b / 1048576, l / 1048576, (b > l ? " -- TOO LARGE" : "")}'
  [ "$bytes" -le "$limit" ]
}

smollm2_tests=(smollm2:: prefix_cache::a_chats_second_turn prefix_cache::the_prefix_cache_keeps
  embeddings::bank_hidden_states embeddings::analogy_and_nearest batching::batched_decode_rows_equal_each_sequence_alone_on_quantized
  batching::batched_decode_rows_equal_each_sequence_alone_with_an_f16 batching::a_single_row_step
  batching::text_requests_through_the_engine batching::a_long_prompt_prefills batching::the_prefill_block_size
  vlm::real_smollm2_decoder)
part() { # NAME: prints the paths it keeps, then (after a line "--") the device command
  local f=tests/fixtures v=tests/fixtures/vlm
  case "$1" in
    folders)
      echo models/shapes-vlm $f/tiny $f/images $f/bank_hidden_states.json $f/bank_hidden_states.safetensors \
        $f/half_precision $f/smollm2_reference.json $f/llamacpp $v/chats.json $v/images
      for d in smolvlm-tiny smolvlm-tiny-legacy llava-tiny llava-interleave-tiny paligemma-tiny paligemma2-tiny \
        gemma3-tiny qwen2-vl-tiny qwen2.5-vl-tiny qwen3-vl-tiny internvl-tiny mistral3-tiny qwen3.5-tiny gemma4-tiny \
        gemma4-pair-tiny minicpm-v4.6-tiny; do echo "$v/$d"; done
      echo --
      echo "bash scripts/gpu/device.sh suite --skip gguf_pairs --skip quantized_pairs:: --skip quantized_qwen3_5:: $(printf -- '--skip %s ' "${smollm2_tests[@]}"); bash scripts/gpu/device.sh smoke"
      ;;
    pairs)
      echo $v $f/images
      echo --
      echo "bash scripts/gpu/device.sh suite gguf_pairs"
      ;;
    bins)
      echo models/shapes-vlm $f/quant $v/images $f/real_configs $f/images
      echo --
      echo "bash scripts/gpu/device.sh suite quantized_pairs:: quantized_qwen3_5::; TESSERA_GPU_7B=0 bash scripts/gpu/device.sh bins"
      ;;
    smollm2)
      echo $f/smollm2_reference.json $f/llamacpp $f/bank_hidden_states.json $f/bank_hidden_states.safetensors \
        $v/smolvlm-tiny $f/images
      echo --
      echo "first call (carry .gpu-parts/smollm2.a): mkdir -p /tmp/parts && cp .gpu-parts/smollm2.a /tmp/parts/"
      echo "second (carry .gpu .gpu-parts/smollm2.b): mkdir -p models/smollm2-135m-instruct && cat /tmp/parts/smollm2.a .gpu-parts/smollm2.b > models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf && bash scripts/gpu/device.sh suite ${smollm2_tests[*]}"
      ;;
    *) echo "unknown part '$1' (folders, pairs, bins, smollm2)" >&2; return 2 ;;
  esac
}

case "${1:-}" in
  part)
    [ $# = 2 ] || { echo "usage: $0 part NAME" >&2; exit 2; }
    listed=$(part "$2")
    "$0" keep $(printf '%s\n' "$listed" | sed '/^--$/,$d')
    printf '%s\n' "$listed" | sed '1,/^--$/d'
    ;;
  keep)
    shift
    [ $# -gt 0 ] || { echo "usage: $0 keep PATH..." >&2; exit 2; }
    git diff --quiet HEAD && [ -z "$(git ls-files --others --exclude-standard)" ] \
      || { echo "$0: the working tree has changes: commit or stash them first" >&2; exit 1; }
    if [ ! -f "$from" ]; then
      git symbolic-ref -q --short HEAD >"$from" || git rev-parse HEAD >"$from"
    fi
    git checkout -q --detach "$(cat "$from")"
    keep=(.gitignore scripts "$@") # .gitignore: what it ignores must not start travelling
    drop=$(git ls-files | grep -v -E "^($(printf '%s|' "${keep[@]}" | sed 's/[.]/\\./g; s/|$//'))(/|$)" || true)
    [ -z "$drop" ] || printf '%s\n' "$drop" | tr '\n' '\0' | xargs -0 git rm -q --
    git -c user.name=travel -c user.email=travel@localhost commit -q --allow-empty -m "travel: scripts $*"
    report .gpu
    ;;
  home)
    [ -f "$from" ] || { echo "$0: not travelling" >&2; exit 0; }
    git checkout -q "$(cat "$from")"
    rm -f "$from"
    echo "back on $(git symbolic-ref -q --short HEAD || git rev-parse --short HEAD)"
    ;;
  size)
    shift
    report "$@"
    ;;
  *)
    echo "usage: $0 keep PATH... | part NAME | home | size [CARRY...]" >&2
    exit 2
    ;;
esac
