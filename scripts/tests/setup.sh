#!/usr/bin/env bash
# What the Python-side tests need, installed once: a venv under target/py-tests with the pinned
# packages of scripts/tests/requirements.txt (the official openai client, Playwright's Python
# driver), and Debian's Chromium for the browser test (Playwright's own browser download is not
# used). Prints the venv's python.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/py-tests
if [ ! -x "$venv/bin/python" ] || ! cmp -s scripts/tests/requirements.txt "$venv/requirements.txt"; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r scripts/tests/requirements.txt >&2
  cp scripts/tests/requirements.txt "$venv/requirements.txt"
fi
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >&2
  else
    echo "the browser test needs Debian's chromium: sudo apt-get install chromium" >&2
    exit 1
  fi
fi
echo "$venv/bin/python"
