#!/usr/bin/env bash
# Runs every test of the workspace (the README's test command). Needs the SmolLM2 GGUF:
# scripts/fetch_smollm2.sh downloads it (tests fail, never skip, without it). Then the GPU's
# parity tests again through Candle's device-generic ops (scripts/test_generic.sh), the server's
# tests with real clients: the official openai and anthropic Python clients, and headless Chromium on the chat
# page (scripts/tests/setup.sh installs what they need).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets "$@"
cargo test --workspace --doc "$@"
bash scripts/test_generic.sh "$@"
cargo build -p tessera-cli "$@"
python=$(bash scripts/tests/setup.sh)
"$python" scripts/tests/openai_client.py --tessera target/debug/tessera
"$python" scripts/tests/anthropic_client.py --tessera target/debug/tessera
"$python" scripts/tests/chat_page.py --binary target/debug/tessera
