"""tessera against transformers on one GPU, side by side in one run (issue 11's figures).

For each real config in tests/fixtures/real_configs (default: SmolVLM-256M-Instruct and llava-1.5-7b-hf, smallest
first; llava-interleave-qwen-0.5b-hf's files could not be fetched here, only the 7B's: --models
llava-interleave-qwen-7b-hf), a
checkpoint with random weights (seed 0) is written here by transformers in --dtype, beside the real processor
and template files and a tokenizer (SmolVLM: the SmolLM2 vocabulary that scripts/gpu/build.sh packs into
.gpu/smolvlm-tokenizer.json; otherwise a word-level stand-in with the config's vocabulary size and its special
tokens at their ids: speed does not depend on which ids a prompt has). --models also takes a folder of such files.
Then, batch 1:
  - prefill tok/s at each --prompt-lengths: transformers `model(input_ids)` (attn_implementation="sdpa"), tessera
    `tessera-bench` (the same lengths, in the blocks generation runs a prompt in: 512 positions by default), and
    tessera at the longest length in blocks of 256, 512, 1024 and in one block (`--prefill-sweep`, in a process of
    its own, whose GPU memory is not counted in the peak: what the block size costs on this device);
  - on every model, tessera's longest prompt and its decode again with flash-attention off
    (TESSERA_FLASH_ATTN=off; the binaries are built with it: scripts/gpu/build.sh), to measure what it is worth;
  - on SmolVLM, tessera's first run again with its CUDA allocation change undone
    (TESSERA_CUDA_DEFAULTS=events: cudarc's per-allocation events), to measure what it is worth;
  - decode tok/s: --gen-tokens greedy tokens one at a time after a 64-token prompt (transformers: generate of
    N tokens minus generate of 1, over N - 1);
  - peak GPU memory of each engine's process (nvidia-smi, polled every 20 ms; torch's allocator peak beside it);
  - image -> first token on SmolVLM (tests/fixtures/images/chelsea.png, scikit-image's 451x300 `chelsea`), each
    engine in one process from the decoded image and the question: transformers processor + generate(1), tessera
    `tessera-bench --image` (template, preprocessing, tower, connector, prefill, the first token's logits on the
    host); its first, cold run is reported beside the best.
Best of --reps after one warm-up. Prints a table and writes JSON (--out).

On the GPU machine (scripts/gpu/device.sh bins runs it):
    python3 scripts/gpu/bench.py --tessera-bench /tmp/tessera-gpu/tessera-bench
Dry run on a CPU (small sizes; a copy of llava-1.5-7b-hf's folder with its config shrunk to 2 layers of width 64
runs the stand-in tokenizer's path in seconds):
    python scripts/gpu/bench.py --device cpu --dtype f32 --models /tmp/llava-tiny smolvlm-256m-instruct \
        --prompt-lengths 16 --gen-tokens 4 --reps 1 --tessera-bench target/debug/tessera-bench
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import torch
import transformers

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests/fixtures/real_configs"
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


class GpuPeak:
    """Peak memory.used of one process as nvidia-smi reports it (MiB), polled in a thread."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, False
        self.thread = threading.Thread(target=self.poll, daemon=True)

    def poll(self):
        while not self.stop:
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout
            except (OSError, subprocess.TimeoutExpired):
                return
            for line in out.splitlines():
                pid, mib = (x.strip() for x in line.split(","))
                if pid == str(self.pid):
                    self.peak = max(self.peak, int(mib))
            time.sleep(0.02)

    def __enter__(self):
        if shutil.which("nvidia-smi"):
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        if self.thread.is_alive():
            self.thread.join()


def word_level_tokenizer(config, folder, dst):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from tokenizers import AddedToken

    def read(name):
        return json.loads((folder / name).read_text()) if (folder / name).exists() else {}

    def content(token):
        return token.get("content") if isinstance(token, dict) else token

    size = config.get_text_config().vocab_size
    tc, stm = read("tokenizer_config.json"), read("special_tokens_map.json")
    # The special tokens at their own ids (tokenizer_config's added_tokens_decoder, added_tokens.json);
    # one only named (bos/eos/unk/pad, additional_special_tokens) at the lowest free id, so that no
    # token the processor or template writes falls past the vocabulary.
    ids = {t["content"]: int(i) for i, t in tc.get("added_tokens_decoder", {}).items()}
    ids.update(read("added_tokens.json"))
    unk = content(tc.get("unk_token") or stm.get("unk_token")) or "<unk>"
    named = [unk] + [content(m.get(k)) for m in (tc, stm) for k in ("bos_token", "eos_token", "pad_token")]
    named += [content(t) for m in (tc, stm) for t in m.get("additional_special_tokens", [])]
    used = set(ids.values())
    free = (i for i in range(size) if i not in used)
    for name in named:
        if name and name not in ids:
            ids[name] = next(free)
    ids = {c: i for c, i in ids.items() if i < size}
    names = {i: c for c, i in ids.items()}
    vocab = {names.get(i, f"w{i}"): i for i in range(size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(c, special=True) for c, _ in sorted(ids.items(), key=lambda kv: kv[1])])
    tok.save(str(dst / "tokenizer.json"))


def checkpoint(name, dtype, device, work):
    # A name from tests/fixtures/real_configs, or a folder of such files (a dry run's shrunken config).
    folder = Path(name) if "/" in name else CONFIGS / name
    dst = work / folder.name
    config = transformers.AutoConfig.from_pretrained(folder)
    if not (dst / "model.safetensors.index.json").exists() and not (dst / "model.safetensors").exists():
        dst.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        with torch.device(device):
            model = transformers.AutoModelForImageTextToText.from_config(config, dtype=dtype)
        model.save_pretrained(dst, safe_serialization=True)
        del model
        for f in folder.iterdir():
            if f.name != "config.json" and f.suffix in (".json", ".jinja"):
                shutil.copy(f, dst / f.name)
        packed = REPO / ".gpu" / f"{dst.name.split('-')[0]}-tokenizer.json"
        if packed.exists():
            shutil.copy(packed, dst / "tokenizer.json")
        else:
            word_level_tokenizer(config, folder, dst)
    return dst


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def best(fn, reps):
    times = []
    for rep in range(reps + 1):
        t0 = time.perf_counter()
        fn()
        if rep > 0 or reps == 0:
            times.append(time.perf_counter() - t0)
    return min(times)


def transformers_side(dst, args, device):
    model = transformers.AutoModelForImageTextToText.from_pretrained(
        dst, dtype=DTYPES[args.dtype], attn_implementation="sdpa").to(device).eval()
    model.generation_config.eos_token_id = None
    vocab = model.config.get_text_config().vocab_size
    gen = torch.Generator().manual_seed(0)
    result = {}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        for n in args.prompt_lengths:
            ids = torch.randint(100, vocab - 1000, (1, n), generator=gen).to(device)

            def prefill():
                model(input_ids=ids, use_cache=True)
                sync(device)
            result[f"prefill_{n}_tok_s"] = n / best(prefill, args.reps)
        ids = torch.randint(100, vocab - 1000, (1, 64), generator=gen).to(device)

        def generate(k):
            def run():
                model.generate(input_ids=ids, do_sample=False, max_new_tokens=k, min_new_tokens=k)
                sync(device)
            return run
        t_n, t_1 = best(generate(args.gen_tokens), args.reps), best(generate(1), args.reps)
        result["decode_tok_s"] = (args.gen_tokens - 1) / (t_n - t_1)
    if device.type == "cuda":
        result["torch_peak_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
    del model
    return result


# Set to TESSERA_FLASH_ATTN=off once a tessera run with flash-attention fails (it has not run on a
# GPU before): that run and every later one go again without it, so that the run still brings
# back figures, and the report says so (flash_attn_failed).
FLASH_FALLBACK = {}
FLASH_FAILURES = []


def flash_failed(env, what):
    """After a failed tessera run: whether to run it again with flash-attention off."""
    if env.get("TESSERA_FLASH_ATTN") == "off":
        return False
    FLASH_FALLBACK["TESSERA_FLASH_ATTN"] = "off"
    FLASH_FAILURES.append(what)
    print(f"{what} failed with flash-attention on: running it and the rest with TESSERA_FLASH_ATTN=off",
          file=sys.stderr)
    return True


def run_tessera(what, env, run):
    """run(env) -> (exit status, result), once more with flash-attention off if it failed with it on."""
    status, result = run(env)
    if status != 0 and flash_failed(env, what):
        status, result = run({**env, **FLASH_FALLBACK})
    return status, result


def tessera_side(dst, args, ablate=False):
    result = {}
    longest = max(args.prompt_lengths)
    sweep = sorted({b for b in (256, 512, 1024) if b < longest} | {longest})
    # (prompt tokens, --prefill-sweep blocks, the report's key for an ablation, its environment)
    runs = [(n, None, None, {}) for n in args.prompt_lengths] + [(longest, sweep, None, {})]
    # The longest prompt and its decode again without flash-attention (TESSERA_FLASH_ATTN=off:
    # Candle's matmul, masked scores and softmax): what it is worth here, on every model.
    runs += [(longest, None, "flash_attn_off", {"TESSERA_FLASH_ATTN": "off"})]
    if ablate:
        # The first run again with each of tessera's CUDA allocation changes undone
        # (TESSERA_CUDA_DEFAULTS, crates/tessera/src/device.rs): what each is worth here.
        runs += [(args.prompt_lengths[0], None, f"cuda_defaults_{keep}", {"TESSERA_CUDA_DEFAULTS": keep})
                 for keep in ("events",)]
    for i, (n, blocks, ablation, extra) in enumerate(runs):
        first = i == 0 or ablation is not None
        cmd = [args.tessera_bench, "--model", str(dst), "--device", args.device, "--dtype", args.dtype,
               "--prompt-tokens", str(n), "--gen-tokens", str(args.gen_tokens if first else 1),
               "--depth", "64" if first else "0", "--reps", str(args.reps), "--json"]
        if blocks:
            cmd += ["--prefill-sweep", ",".join(map(str, blocks))]
        if args.device == "cpu":
            cmd += ["--threads", str(os.cpu_count())]
        def bench(env):
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
            with GpuPeak(proc.pid) as peak:
                out, _ = proc.communicate()
            return proc.returncode, (out, peak)

        env = {**os.environ, "TESSERA_CUDA_DEFAULTS": "", **FLASH_FALLBACK, **extra}
        status, (out, peak) = run_tessera(f"tessera-bench {' '.join(cmd[1:])}", env, bench)
        if status != 0:
            setting = " ".join(f"{k}={v}" for k, v in extra.items())
            raise SystemExit(f"tessera-bench failed: {setting} {' '.join(cmd)}")
        row = json.loads(out)
        if ablation:
            result[ablation] = {"prompt_tokens": n, "prefill_tok_s": row["pp_tok_s"],
                                "decode_tok_s": row["tg_tok_s"], "peak_gpu_mib": peak.peak,
                                "flash_attn": row.get("flash_attn")}
            continue
        if i == 0:
            result["flash_attn"] = row.get("flash_attn")
        if blocks:
            result[f"prefill_{n}_by_block_tok_s"] = row["pp_by_block"]
            result[f"prefill_{n}_one_block_tok_s"] = row["pp_by_block"][str(longest)]
            result["peak_gpu_mib_sweep"] = peak.peak
            continue
        result[f"prefill_{n}_tok_s"] = row["pp_tok_s"]
        if i == 0:
            result["decode_tok_s"] = row["tg_tok_s"]
        result["peak_gpu_mib"] = max(result.get("peak_gpu_mib", 0), peak.peak)
    return result


def transformers_peak(dst, args):
    """transformers' prefill + decode again in a child process, for its nvidia-smi peak."""
    code = (f"import sys; sys.argv=['bench.py','--child',{str(dst)!r},'--device',{args.device!r},'--dtype',"
            f"{args.dtype!r},'--prompt-lengths',{','.join(map(str, args.prompt_lengths))!r},'--gen-tokens',"
            f"'{args.gen_tokens}','--reps','0']; sys.path.insert(0,{str(Path(__file__).parent)!r}); "
            "import bench; bench.main()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL)
    with GpuPeak(proc.pid) as peak:
        proc.wait()
    return peak.peak


def first_token(dst, args, device):
    from PIL import Image

    photo = REPO / "tests/fixtures/images/chelsea.png"
    processor = transformers.AutoProcessor.from_pretrained(dst)
    model = transformers.AutoModelForImageTextToText.from_pretrained(
        dst, dtype=DTYPES[args.dtype], attn_implementation="sdpa").to(device).eval()
    question = "Can you describe this image?"
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    image = Image.open(photo).convert("RGB")

    def hf():
        inputs = processor(text=prompt, images=[image], return_tensors="pt").to(device)
        inputs["pixel_values"] = inputs["pixel_values"].to(DTYPES[args.dtype])
        with torch.no_grad():
            model.generate(**inputs, max_new_tokens=1, do_sample=False)
        sync(device)
    hf_s = best(hf, args.reps)
    del model
    # tessera in one process as transformers is (tessera-bench --image): a cold run, then best of
    # --reps, each from the decoded image and the question to the first token's logits on the host.
    # The CLI's per-process start-up on a GPU (cuBLAS handles, kernel modules, the memory pool) is
    # the cold figure, reported beside it; CPU threads as `tessera generate` has them, all cores.
    cmd = [args.tessera_bench, "--model", str(dst), "--image", str(photo), "--image-prompt",
           question, "--device", args.device, "--dtype", args.dtype,
           "--threads", str(os.cpu_count()), "--reps", str(args.reps), "--json"]

    def generate(env):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        return done.returncode, done

    status, done = run_tessera(f"tessera-bench {' '.join(cmd[1:])}", {**os.environ, **FLASH_FALLBACK}, generate)
    if status != 0:
        raise SystemExit(f"tessera-bench failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {"transformers_s": hf_s, "tessera_s": out["first_token_s"], "tessera_cold_s": out["cold_first_token_s"],
            "image_tokens": out["image_tokens"], "prompt_positions": out["prompt_positions"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smolvlm-256m-instruct", "llava-1.5-7b-hf"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--prompt-lengths", default="512,2048")
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tessera-bench", default=str(REPO / "target/release/tessera-bench"))
    ap.add_argument("--work", default="/tmp/tessera-gpu-models")
    ap.add_argument("--out", default=None)
    ap.add_argument("--append", action="store_true", help="add these models to the report already at --out")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.prompt_lengths = [int(x) for x in str(args.prompt_lengths).split(",")]
    device = torch.device(args.device)
    if args.child:
        transformers_side(Path(args.child), args, device)
        return
    report = dict(device=torch.cuda.get_device_name(device) if device.type == "cuda" else args.device,
                  torch=torch.__version__, transformers=transformers.__version__, dtype=args.dtype, models={})
    if args.append and args.out and Path(args.out).exists():
        # Another model into the report an earlier run wrote (the same machine and settings).
        earlier = json.loads(Path(args.out).read_text())
        if {k: earlier.get(k) for k in ("device", "dtype")} != {k: report[k] for k in ("device", "dtype")}:
            raise SystemExit(f"--append: {args.out} was measured on {earlier.get('device')} in {earlier.get('dtype')}")
        report["models"] = earlier.get("models", {})
        if earlier.get("flash_attn_failed"):  # this run goes without it from the start
            FLASH_FAILURES.extend(earlier["flash_attn_failed"])
            FLASH_FALLBACK["TESSERA_FLASH_ATTN"] = "off"
    for name in args.models:
        # Smallest first, and the report rewritten after each model: a run cut off by its time
        # limit still brings back what it measured; a model that fails is recorded, not fatal.
        # Within a model, each engine's figures are written as soon as they are measured.
        t0 = time.perf_counter()
        smolvlm = Path(name).name.startswith("smolvlm")
        row = report["models"][name] = {}
        try:
            dst = checkpoint(name, DTYPES[args.dtype], device, Path(args.work))
            row["transformers"] = transformers_side(dst, args, device)
            write(args.out, report)
            row["tessera"] = tessera_side(dst, args, ablate=smolvlm)
            write(args.out, report)
            row["transformers"]["peak_gpu_mib"] = transformers_peak(dst, args)
            if smolvlm:
                row["image_to_first_token"] = first_token(dst, args, device)
        except (Exception, SystemExit) as e:  # noqa: BLE001  (reported, and the next model runs)
            row["error"] = str(e)
            traceback.print_exc()
            print(f"\n{name}: FAILED: {e}", file=sys.stderr)
            write(args.out, report)
            continue
        row["seconds"] = round(time.perf_counter() - t0, 1)
        write(args.out, report)
        print(f"\n{name} ({args.dtype}, {report['device']})")
        for key in row["transformers"]:
            for mine in dict.fromkeys([key, key.replace("_tok_s", "_one_block_tok_s")]):
                if mine in row["tessera"]:
                    a, b = row["tessera"][mine], row["transformers"][key]
                    print(f"  {mine:32} tessera {a:10.1f}  transformers {b:10.1f}  ratio {a / b if b else float('nan'):.2f}")
        if "image_to_first_token" in row:
            r = row["image_to_first_token"]
            print(f"  image -> first token (s) tessera {r['tessera_s']:.3f}  transformers {r['transformers_s']:.3f}  "
                  f"ratio {r['tessera_s'] / r['transformers_s']:.2f}  (tessera cold {r['tessera_cold_s']:.3f})")
    write(args.out, report)


def write(path, report):
    if FLASH_FAILURES:
        report["flash_attn_failed"] = FLASH_FAILURES
    if path:
        Path(path).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
