#!/usr/bin/env bash
# Runs on the GPU machine (it has CUDA, PyTorch and transformers; no Rust, no network), in the
# repository root of the copy the device tool sends, with what scripts/gpu/build.sh packed into
# .gpu/ carried along. Writes logs and JSON under $OUT (or ./gpu-out).
#   scripts/gpu/device.sh suite [FILTER...]   # bf16/f16 references by transformers on this GPU, then
#                                 # the parity suite (and its half-precision attention test again with
#                                 # flash-attention off); FILTERs (test-name filters, as cargo test takes)
#                                 # run a part of it, in a call that carries only that part's fixtures
#                                 # (scripts/gpu/travel.sh; the references only when half_precision runs)
#   scripts/gpu/device.sh smoke   # the CLI on the GPU against the CPU's answer, alone
#   scripts/gpu/device.sh bins    # the CLI on the GPU (smoke), then scripts/gpu/bench.py on SmolVLM, an
#                                 # Nsight Systems summary of its decode where nsys is installed, the GGUF
#                                 # decode figure (random weights in the test file's layout,
#                                 # gguf_skeleton.py), and bench.py on llava-1.5-7b
# From the machine without a GPU (device tool):
#   run(command="bash scripts/gpu/device.sh suite; bash scripts/gpu/device.sh bins", carry=[".gpu"], timeout_s=600)
# (`;`, not `&&`: a failing parity test must not cost the run its figures; suite.log keeps its verdict.)
# TESSERA_GPU_DRY_RUN=1 runs the same steps on this machine's CPU first, so that a slip in this
# script does not cost device time: the packed binaries (with LD_LIBRARY_PATH reaching the CUDA 13
# libraries and the libcuda stub that scripts/gpu/build.sh installs: L=~/.cache/cuda-13.0.88/venv/
# lib/python3.11/site-packages/nvidia/cu13/lib; LD_LIBRARY_PATH=$L:$L/stubs), python3 with torch and
# transformers first on PATH, f32 and short prompts, SmolVLM only (no llava-1.5-7b, no nsys).
# Its figures mean nothing; its failures are the script's or the CPU's.
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:?usage: $0 suite [FILTER...]|bins|smoke}
shift
filters=("$@") # suite: libtest's arguments, name filters and `--skip NAME`s (all tests when none)
runs() { # whether the filters may select tests whose names contain $1
  local names=() skips=() f skip=""
  for f in "${filters[@]}"; do
    if [ -n "$skip" ]; then skips+=("$f"); skip=""
    elif [ "$f" = --skip ]; then skip=1
    elif [[ $f != -* ]]; then names+=("$f")
    fi
  done
  for f in "${skips[@]}"; do [[ $1 == *"$f"* ]] && return 1; done
  [ ${#names[@]} = 0 ] && return 0
  for f in "${names[@]}"; do [[ $1 == *"$f"* || $f == *"$1"* ]] && return 0; done
  return 1
}
out=${OUT:-$PWD/gpu-out}
bin=/tmp/tessera-gpu
mkdir -p "$out" "$bin"
dry=${TESSERA_GPU_DRY_RUN:-}
dev=cuda
[ -z "$dry" ] || dev=cpu
[ -f .gpu/binaries.tar.xz ] || { echo "no .gpu/binaries.tar.xz: run scripts/gpu/build.sh here first and carry .gpu" >&2; exit 1; }
xz -dc .gpu/binaries.tar.xz | tar -C "$bin" -xf -
unpacked=()
for f in .gpu/*.json.xz .gpu/*.skeleton.xz; do
  if [ -e "$f" ]; then xz -dc "$f" >"${f%.xz}" && unpacked+=("${f%.xz}"); fi # data, read from .gpu/
done
# A dry run leaves .gpu/ as it was: unpacked, these files would travel beside the archive.
[ -z "$dry" ] || trap 'rm -f "${unpacked[@]}"' EXIT
# cuBLAS / cuRAND / cudart 13: the system toolkit's, or the nvidia-* wheels PyTorch brought; and libcuda.
libs=$(python3 - <<'PY'
import glob, os
dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
try:
    import nvidia
    for p in nvidia.__path__:
        dirs += glob.glob(os.path.join(p, "*", "lib")) + glob.glob(os.path.join(p, "cu13", "lib"))
except ImportError:
    pass
# libcuda.so.1 is the driver's: where containers mount it, should the loader's path not have it.
dirs += [d for d in ("/usr/local/nvidia/lib64", "/usr/local/nvidia/lib") if os.path.exists(os.path.join(d, "libcuda.so.1"))]
print(":".join(d for d in dirs if os.path.isdir(d)))
PY
)
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The driver JIT-compiles Candle's PTX at each process's first use of a module (ptxas 13.0 takes
# ~12 s for the nine modules on one core here) and keeps the result in its compute cache, so only
# the run's first process pays, not each of its dozen: a folder that is surely writable, and room
# for the ~8 MB of machine code (the default folder is under $HOME).
export TESSERA_REPO_ROOT=$PWD # the suite finds its fixtures here, not where it was built
export CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-$bin/nv-compute-cache} CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-1073741824}
unset CUDA_CACHE_DISABLE
if [ -n "$dry" ]; then
  echo "dry run on the CPU (TESSERA_GPU_DRY_RUN): no GPU, figures mean nothing" | tee "$out/gpu.txt"
else
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
fi
echo "binaries built from $(cat .gpu/REVISION 2>/dev/null || echo 'an unknown revision (no .gpu/REVISION)')" | tee -a "$out/gpu.txt"
# Candle's kernels travel as PTX, which this driver compiles only up to its own CUDA version's ISA:
# binaries from a newer toolkit than the driver's fail at their first kernel.
driver=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\.[0-9]*\).*/\1/p' | head -1 || true)
built=$(sed -n 's/.*CUDA \([0-9]*\.[0-9]*\).*/\1/p' .gpu/REVISION 2>/dev/null | head -1 || true)
echo "driver's CUDA: ${driver:-unknown}; toolkit of the binaries: ${built:-unknown}" | tee -a "$out/gpu.txt"
if [ -n "$driver" ] && [ -n "$built" ] && [ "$(printf '%s\n%s\n' "$built" "$driver" | sort -V | tail -1)" != "$driver" ]; then
  echo "WARNING: built with CUDA $built, newer than this driver's $driver: Candle's PTX will not load; rebuild with CUDA_TOOLKIT=$driver.x (scripts/gpu/build.sh)" | tee -a "$out/gpu.txt"
fi
python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' | tee -a "$out/gpu.txt"
for b in "$bin"/*; do
  missing=$(ldd "$b" | grep "not found" || true)
  [ -z "$missing" ] || { echo "$b: $missing" >&2; exit 1; }
done

case "$what" in
  suite)
    if runs half_precision; then
      python3 scripts/gpu/reference.py --device "$dev" --out "$out/half_refs.json" 2>"$out/reference.log"
    fi
    set +e
    TESSERA_TEST_DEVICE=$dev TESSERA_HALF_REFS="$out/half_refs.json" RUST_BACKTRACE=0 \
      "$bin/device_suite" --test-threads 1 "${filters[@]}" 2>&1 | tee "$out/suite.log"
    rc=${PIPESTATUS[0]}
    # libtest lists the failed tests' names, indented, at the end.
    failed=($(sed -n 's/^    \([a-z0-9_:]*\)$/\1/p' "$out/suite.log" | sort -u))
    if [ "$rc" != 0 ] && [ ${#failed[@]} -gt 0 ] && grep -q "flash-attn" .gpu/REVISION 2>/dev/null; then
      # Whether flash-attention is what fails: the failed tests again without it.
      TESSERA_TEST_DEVICE=$dev TESSERA_HALF_REFS="$out/half_refs.json" TESSERA_FLASH_ATTN=off RUST_BACKTRACE=0 \
        "$bin/device_suite" --test-threads 1 --exact "${failed[@]}" >"$out/suite_flash_off.log" 2>&1
      echo "the ${#failed[@]} failed tests with TESSERA_FLASH_ATTN=off: exit $? ($(grep '^test result' "$out/suite_flash_off.log"))"
    fi
    # The half-precision attention test again, printing its errors: on flash-attention (where the
    # binaries have it, as the suite ran it), then on Candle's ops (TESSERA_FLASH_ATTN=off).
    flashes="on off"
    grep -q "flash-attn" .gpu/REVISION 2>/dev/null || flashes=off # built without it (FEATURES=cuda)
    runs half_attention || flashes=""
    for flash in $flashes; do
      TESSERA_TEST_DEVICE=$dev TESSERA_FLASH_ATTN=$flash RUST_BACKTRACE=0 \
        "$bin/device_suite" half_attention --nocapture 2>&1 | tee -a "$out/suite.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    done
    set -e
    echo "device_suite exit $rc"
    exit "$rc"
    ;;
  bins | smoke)
    t=$bin/tessera
    # The main command on the GPU, and the same on the CPU: the same answer.
    q=(generate --model models/shapes-vlm --image models/shapes-vlm/examples/three_shapes.png --prompt "How many shapes are there?")
    "$t" "${q[@]}" --device "$dev" --dtype f32 | tee "$out/generate_cuda_f32.txt"
    "$t" "${q[@]}" --device cpu | tee "$out/generate_cpu_f32.txt"
    cmp "$out/generate_cuda_f32.txt" "$out/generate_cpu_f32.txt" && echo "cuda f32 answer = cpu answer"
    "$t" "${q[@]}" --device "$dev" | tee "$out/generate_cuda_bf16.txt" # the default dtype: bf16 on a GPU
    "$t" "${q[@]}" --device cuda:7 2>&1 | tee "$out/missing_device.txt" || true
    [ "$what" = bins ] || exit 0 # smoke: the CLI's answers alone, no bench
    # Cheapest and most telling first, so that a run cut short by its time limit keeps the most:
    # SmolVLM against transformers, then where its decode step's time goes, the GGUF path, and
    # last llava-1.5-7b (14 GB of weights written and loaded by each engine), added to the same
    # report. table.py prints the README's rows after each part.
    work=/tmp/tessera-gpu-models # bench.py writes its checkpoints here
    bench=(python3 scripts/gpu/bench.py --tessera-bench "$bin/tessera-bench" --work "$work"
      --out "$out/bench.json" --device "$dev")
    [ -z "$dry" ] || bench+=(--dtype f32 --prompt-lengths 16 --gen-tokens 8 --reps 1)
    table() { python3 scripts/gpu/table.py "$out/bench.json" >"$out/table.md" && cat "$out/table.md" || echo "table.py failed"; }
    "${bench[@]}" --models smolvlm-256m-instruct 2>&1 | tee "$out/bench.log" || echo "bench.py failed"
    table
    # Where a decode step's time goes (launches, allocations, copies, synchronisations): Nsight
    # Systems' CUDA API and kernel summaries of SmolVLM's 64-token prompt and 65 greedy tokens, a
    # warm-up and one timed repetition (132 forwards in all), when this machine has nsys.
    nsys=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1 || true)
    m=$work/smolvlm-256m-instruct
    # TESSERA_GPU_NSYS=0 leaves it out.
    if [ -z "$dry" ] && [ -n "$nsys" ] && [ -d "$m" ] && [ "${TESSERA_GPU_NSYS:-1}" != 0 ]; then
      { timeout 180 "$nsys" profile --trace cuda --force-overwrite true -o /tmp/decode \
          "$bin/tessera-bench" --model "$m" --device cuda --prompt-tokens 64 --gen-tokens 64 --reps 1 --json \
        && timeout 120 "$nsys" stats --report cuda_api_sum,cuda_gpu_kern_sum --format csv \
          --output "$out/nsys_decode" /tmp/decode.nsys-rep; } >"$out/nsys.log" 2>&1 || echo "nsys failed: see nsys.log"
    else
      echo "no nsys on this machine (or no SmolVLM checkpoint): no per-step API and kernel counts"
    fi
    # The GGUF path on the GPU (Candle's quantized CUDA matmul), kept quantized and dequantized to
    # bf16: SmolLM2-135M's real file layout (Q4_1, Q8_0 embeddings) with random weights.
    if [ -f .gpu/smollm2.skeleton ]; then
      python3 scripts/gpu/gguf_skeleton.py fill .gpu/smollm2.skeleton /tmp/smollm2-random.gguf
      for dt in quantized bf16; do
        flags=(--model /tmp/smollm2-random.gguf --device "$dev" --prompt-tokens 512 --gen-tokens 128 --depth 64 --reps 3 --json)
        [ "$dt" = quantized ] || flags+=(--dtype "$dt")
        "$bin/tessera-bench" "${flags[@]}" | tee "$out/gguf_$dt.json" || echo "tessera-bench on the GGUF ($dt) failed"
      done
    fi
    # TESSERA_GPU_7B=0 leaves it out (a lease of 15 minutes holds the suite and SmolVLM, not the 7B's 14 GB).
    if [ -z "$dry" ] && [ "${TESSERA_GPU_7B:-1}" != 0 ]; then
      "${bench[@]}" --models llava-1.5-7b-hf --append 2>&1 | tee -a "$out/bench.log" || echo "bench.py failed"
      table
    fi
    ;;
  *) echo "usage: $0 suite [FILTER...]|bins|smoke" >&2; exit 2 ;;
esac
