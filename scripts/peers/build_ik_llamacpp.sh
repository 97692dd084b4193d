#!/usr/bin/env bash
# Builds ik_llama.cpp (the fastest llama.cpp fork on x86 CPUs) as the second peer of the shape
# bench (scripts/bench_shapes.sh), pinned at commit 8337e4c (2026-08-15). Only `llama-bench`, CPU,
# Release, GGML_NATIVE=ON, the server and its web UI off (some large files of a repository
# snapshot may be absent; the bench does not need them). Source: $IK_LLAMA_SRC (a checkout or a
# bare git dir holding the commit), else a clone from GitHub. Everything lives outside the repo,
# in ~/.cache/tessera-peers/ (override with TESSERA_PEERS_CACHE). Idempotent; the last line of
# stdout is the bin directory.
set -euo pipefail
commit=8337e4cd3
cache="${TESSERA_PEERS_CACHE:-$HOME/.cache/tessera-peers}"
src="$cache/ik_llama.cpp-$commit"
bin="$src/build/bin"
log() { echo "[build_ik_llamacpp] $*" >&2; }
if [ -x "$bin/llama-bench" ]; then
  echo "$bin"
  exit 0
fi
if [ ! -f "$src/CMakeLists.txt" ]; then
  mkdir -p "$src"
  repo="${IK_LLAMA_SRC:-}"
  if [ -z "$repo" ]; then
    repo="$cache/ik_llama.cpp.git"
    [ -d "$repo" ] || git clone --bare --filter=blob:none https://github.com/ikawrakow/ik_llama.cpp "$repo" >&2
  fi
  gd="$( [ -d "$repo/.git" ] && echo "$repo/.git" || echo "$repo")"
  log "exporting $commit from $repo (blobs absent from a snapshot are skipped)"
  missing=0
  while read -r mode type sha path; do
    [ "$type" = blob ] || continue
    mkdir -p "$src/$(dirname "$path")"
    git --git-dir="$gd" cat-file blob "$sha" > "$src/$path" 2>/dev/null || { rm -f "$src/$path"; missing=$((missing + 1)); }
  done < <(git --git-dir="$gd" ls-tree -r "$commit")
  log "$missing files absent"
fi
start=$(date +%s)
nice -n 15 cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF >&2
nice -n 15 cmake --build "$src/build" --target llama-bench -j "${JOBS:-2}" >&2
log "built in $(( $(date +%s) - start )) s"
echo "$bin"
