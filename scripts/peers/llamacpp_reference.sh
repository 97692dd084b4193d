#!/usr/bin/env bash
# Runs scripts/peers/llamacpp_reference.py (greedy-decode logits dump from the peer llama.cpp).
# Makes sure the peer llama.cpp is built (build_llamacpp.sh) and that the llama-cpp-python==0.3.36
# Python package is installed into python3 *without* compiling llama.cpp a second time: it is
# pip-installed from the cached sdist with -DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF (pure-Python
# wheel, no bundled lib), and pointed at the libllama.so we built through LLAMA_CPP_LIB_PATH,
# which llama_cpp/llama_cpp.py honours. Idempotent.
# Usage: scripts/peers/llamacpp_reference.sh MODEL.gguf OUT.json [extra args for the .py]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
LLAMA_CPP_PYTHON_VERSION=0.3.36
cache="${TESSERA_PEERS_CACHE:-$HOME/.cache/tessera-peers}"

bin="$("$here/build_llamacpp.sh" | tail -1)"

installed="$(python3 -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)"
if [ "$installed" != "$LLAMA_CPP_PYTHON_VERSION" ]; then
  echo "[llamacpp_reference] installing llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (Python only)" >&2
  python3 -m pip install --quiet --disable-pip-version-check \
    "numpy>=1.20.0" "diskcache>=5.6.1" "jinja2>=2.11.3" "typing-extensions>=4.5.0" >&2
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" nice -n 15 python3 -m pip install --quiet \
    --disable-pip-version-check --no-deps --only-binary cmake,ninja \
    "$cache/dl/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" >&2
fi

export LLAMA_CPP_LIB_PATH="$bin"
exec python3 "$here/llamacpp_reference.py" "$@"
