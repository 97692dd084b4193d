#!/usr/bin/env bash
# Builds llama.cpp as a peer engine to benchmark against, from the llama.cpp source that PyPI's
# llama-cpp-python==0.3.36 sdist vendors (vendor/llama.cpp, upstream commit 0c1e57098 per the
# sdist's CHANGELOG). Everything lives outside the repo, in ~/.cache/tessera-peers/ (override with
# TESSERA_PEERS_CACHE). CPU-only Release build: GGML_NATIVE=ON, shared libs, no curl/OpenSSL, and
# llama-server without its web UI (the UI is an npm build or a Hub download, neither reachable
# here; the API does not need it); builds llama-bench, llama-quantize, llama-completion,
# llama-tokenize, llama-perplexity, llama-batched-bench, llama-server (override the target list
# with LLAMACPP_TARGETS="..." or "all").
# Idempotent: if already built, just prints the bin dir. Last line of stdout: the bin directory
# (which also holds libllama.so etc., i.e. the value for LLAMA_CPP_LIB_PATH).
set -euo pipefail

# LLAMA_CPP_PYTHON_VERSION, cache, src and fetch_llamacpp_source (llama.cpp commit 0c1e57098).
source "$(dirname "$0")/llamacpp_source.sh"
JOBS="${JOBS:-2}"
TARGETS="${LLAMACPP_TARGETS:-llama-bench llama-quantize llama-completion llama-tokenize llama-perplexity llama-batched-bench llama-server}"

build="$src/build"
bin="$build/bin"
stamp="$build/.tessera-built"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$TARGETS" ] && [ -f "$bin/libllama.so" ]; then
  echo "$bin"
  exit 0
fi

log() { echo "[build_llamacpp] $*" >&2; }

# --- source: the sdist from PyPI --------------------------------------------------------------
fetch_llamacpp_source

# --- toolchain ---------------------------------------------------------------------------------
if ! command -v cmake >/dev/null 2>&1; then
  log "cmake missing: installing it with pip"
  python3 -m pip install --quiet --disable-pip-version-check --only-binary cmake cmake >&2 \
    || { apt-get update -qq >&2 && apt-get install -y -qq cmake >&2; }
  hash -r
fi
for tool in cc c++ make; do
  command -v "$tool" >/dev/null 2>&1 || { log "need $tool (apt-get install build-essential)"; exit 1; }
done

# --- configure + build -------------------------------------------------------------------------
start=$(date +%s)
log "configuring (cmake $(cmake --version | head -1 | awk '{print $3}'))"
nice -n 15 cmake -S "$src/vendor/llama.cpp" -B "$build" \
  -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON \
  -DBUILD_SHARED_LIBS=ON \
  -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_COMMON=ON \
  -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_EXAMPLES=ON \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_COMMIT="$LLAMACPP_COMMIT" \
  >"$build.configure.log" 2>&1 \
  || { tail -40 "$build.configure.log" >&2; exit 1; }

if [ "$TARGETS" = "all" ]; then
  target_args=()
else
  target_args=(--target $TARGETS)
fi
log "building ${TARGETS} with -j$JOBS (log: $build.build.log)"
nice -n 15 cmake --build "$build" --config Release -j "$JOBS" "${target_args[@]}" \
  >"$build.build.log" 2>&1 \
  || { tail -40 "$build.build.log" >&2; exit 1; }

[ -f "$bin/libllama.so" ] || { log "libllama.so not in $bin"; exit 1; }
log "built in $(( $(date +%s) - start ))s"
echo "$TARGETS" >"$stamp"
echo "$bin"
