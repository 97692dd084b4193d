# Sourced by build_llamacpp.sh and make_gguf_pairs.sh: where the llama.cpp source lives — the one
# PyPI's llama-cpp-python sdist vendors (vendor/llama.cpp, upstream commit 0c1e57098 per the
# sdist's CHANGELOG) — and `fetch_llamacpp_source`, which downloads and unpacks it once. Sets
# LLAMA_CPP_PYTHON_VERSION, LLAMACPP_COMMIT, cache (~/.cache/tessera-peers, or TESSERA_PEERS_CACHE) and src.
LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMACPP_COMMIT=0c1e57098
cache="${TESSERA_PEERS_CACHE:-$HOME/.cache/tessera-peers}"
src="$cache/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION"

fetch_llamacpp_source() {
  local sdist="$cache/dl/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  if [ ! -s "$sdist" ]; then
    mkdir -p "$cache/dl"
    echo "[llamacpp_source] downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist" >&2
    # --no-binary only for llama-cpp-python: with ':all:' pip would also build its build-time
    # requirements (cmake, ninja) from source just to prepare metadata, which takes ages.
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
      --no-binary llama-cpp-python --only-binary cmake,ninja \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$cache/dl" >&2
  fi
  if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ] || [ ! -f "$src/vendor/llama.cpp/convert_hf_to_gguf.py" ]; then
    echo "[llamacpp_source] extracting into $src" >&2
    rm -rf "$src.part"
    mkdir -p "$src.part"
    tar -xzf "$sdist" -C "$src.part" --strip-components=1
    rm -rf "$src"
    mv "$src.part" "$src"
  fi
}
