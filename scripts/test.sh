#!/usr/bin/env bash
# Runs every test of the workspace (the README's test command). Needs the SmolLM2 GGUF:
# scripts/fetch_smollm2.sh downloads it (tests fail, never skip, without it).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets "$@"
cargo test --workspace --doc "$@"
