#!/usr/bin/env bash
# On the GPU machine, after `device.sh bins` (it unpacks the binaries into /tmp/tessera-gpu and
# bench.py writes SmolVLM's checkpoint under /tmp/tessera-gpu-models): SmolVLM's decode with
# tessera's CUDA allocation change undone (TESSERA_CUDA_DEFAULTS=events) and not, in two rounds of
# alternating order, so that warm-up and clock drift do not favour whichever runs later.
set -uo pipefail
libs=$(python3 -c 'import glob, os, nvidia; print(":".join(d for p in nvidia.__path__ for d in glob.glob(os.path.join(p, "*", "lib"))))')
export LD_LIBRARY_PATH=$libs:/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
m=${1:-/tmp/tessera-gpu-models/smolvlm-256m-instruct}
for order in "none events" "events none"; do
  for d in $order; do
    v=$d; [ "$v" = none ] && v=""
    tg=$(TESSERA_CUDA_DEFAULTS=$v /tmp/tessera-gpu/tessera-bench --model "$m" --device cuda --prompt-tokens 64 \
      --gen-tokens 128 --reps 3 --json 2>/dev/null | tail -1 | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tg_tok_s"],1))')
    echo "TESSERA_CUDA_DEFAULTS=${v:-(unset)} decode tok/s $tg"
  done
done
