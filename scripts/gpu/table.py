"""The README's GPU benchmark rows from what scripts/gpu/device.sh brought back (issue 11's figures and targets).

Reads bench.json (scripts/gpu/bench.py), and when present beside it gpu.txt (the GPU, driver, versions and the
revision the binaries were built from) and gguf_quantized.json / gguf_bf16.json (tessera-bench on the GGUF file).
Prints Markdown: one table per model, tessera against transformers with the ratio and the issue's target for each
figure (decode >= 2x, prefill >= 0.9x, image -> first token <= 0.7x, peak GPU memory <= transformers'), the
decode with tessera's CUDA allocation changes undone, then the GGUF decode figures. Standard library only, so it runs on either machine:
    python3 scripts/gpu/table.py gpu-out/bench.json
"""
import json
import sys
from pathlib import Path

# figure -> (higher is better, target ratio tessera / transformers)
TARGETS = {"decode": (True, 2.0), "prefill": (True, 0.9), "memory": (False, 1.0), "first_token": (False, 0.7)}


def verdict(kind, ratio):
    higher, target = TARGETS[kind]
    met = ratio >= target if higher else ratio <= target
    return f"{'≥' if higher else '≤'} {target:g}×: {'met' if met else 'missed'}"


def rows(model):
    hf, ts = model.get("transformers", {}), model.get("tessera", {})
    out = []
    for key, theirs in hf.items():
        if key.startswith("prefill_"):
            n = key.split("_")[1]
            for mine, label in ((key, f"prefill {n} tokens (tok/s)"),
                                (f"prefill_{n}_one_block_tok_s", f"prefill {n} tokens, one block (tok/s)")):
                if mine in ts:
                    out.append((label, ts[mine], theirs, "prefill"))
        elif key == "decode_tok_s" and key in ts:
            out.append(("decode, batch 1 (tok/s)", ts[key], theirs, "decode"))
        elif key == "peak_gpu_mib" and key in ts:
            out.append(("peak GPU memory (MiB, nvidia-smi)", ts[key], theirs, "memory"))
    first = model.get("image_to_first_token")
    if first:
        out.append(("image → first token (s)", first["tessera_s"], first["transformers_s"], "first_token"))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = Path(sys.argv[1])
    report = json.loads(path.read_text())
    gpu = path.with_name("gpu.txt")
    if gpu.exists():
        print("```\n" + gpu.read_text().strip() + "\n```\n")
    print(f"{report['device']}, {report['dtype']}, torch {report['torch']}, transformers {report['transformers']}\n")
    for what in report.get("flash_attn_failed", []):
        print(f"**flash-attention failed** in `{what}`: it and every later tessera run went with "
              "TESSERA_FLASH_ATTN=off\n")
    for name, model in report["models"].items():
        print(f"**{Path(name).name}**" + (f": failed: {model['error']}" if "error" in model else ""))
        table = rows(model)
        if not table:
            print()
            continue
        print("\n| figure | tessera | transformers | ratio | target |\n| --- | --- | --- | --- | --- |")
        for label, mine, theirs, kind in table:
            fmt = "{:.3f}" if kind == "first_token" else "{:.0f}"
            if mine and theirs:
                ratio = mine / theirs
                print(f"| {label} | {fmt.format(mine)} | {fmt.format(theirs)} | {ratio:.2f} | {verdict(kind, ratio)} |")
            else:  # nvidia-smi saw no process (a CPU dry run): nothing measured
                print(f"| {label} | {fmt.format(mine)} | {fmt.format(theirs)} | – | not measured |")
        first = model.get("image_to_first_token") or {}
        if "tessera_cold_s" in first:
            print(f"\nimage → first token, {first['prompt_positions']} positions ({first['image_tokens']} of the image): "
                  f"tessera's first run in its process (what each `tessera generate` pays) {first['tessera_cold_s']:.3f} s; "
                  "both engines' figure above is the best warm run")
        torch_peak = model.get("transformers", {}).get("torch_peak_allocated_mib")
        if torch_peak:
            print(f"\ntransformers' own allocator peak (torch.cuda.max_memory_allocated): {torch_peak:.0f} MiB")
        ts = model.get("tessera", {})
        kept = [(k.removeprefix("cuda_defaults_"), r) for k, r in ts.items() if k.startswith("cuda_defaults_")]
        if kept and ts.get("decode_tok_s"):
            print("\ntessera with CUDA defaults kept (TESSERA_CUDA_DEFAULTS), decode tok/s against "
                  f"{ts['decode_tok_s']:.0f} without: "
                  + ", ".join(f"{k}: {r['decode_tok_s']:.0f} ({r['decode_tok_s'] / ts['decode_tok_s']:.2f}×)"
                              for k, r in kept))
        off = ts.get("flash_attn_off")
        if off and ts.get("flash_attn"):
            n = off["prompt_tokens"]
            on = ts.get(f"prefill_{n}_tok_s")
            print(f"\ntessera with flash-attention off (TESSERA_FLASH_ATTN=off): prefill of {n} tokens "
                  f"{off['prefill_tok_s']:.0f} tok/s against {on:.0f} with it ({off['prefill_tok_s'] / on:.2f}×), "
                  f"decode {off['decode_tok_s']:.0f} against {ts['decode_tok_s']:.0f} "
                  f"({off['decode_tok_s'] / ts['decode_tok_s']:.2f}×), peak {off['peak_gpu_mib']:.0f} MiB")
        elif "flash_attn" in ts and not ts["flash_attn"]:
            print("\ntessera-bench ran without flash-attention (built without the flash-attn feature)")
        for key, rates in ts.items():
            if key.endswith("_by_block_tok_s"):
                n = key.split("_")[1]
                print(f"\ntessera prefill of {n} tokens by block size (tok/s): "
                      + ", ".join(f"{b}: {r:.0f}" for b, r in rates.items()))
        print()
    for dt in ("quantized", "bf16"):
        g = path.with_name(f"gguf_{dt}.json")
        if g.exists() and g.read_text().strip():
            r = json.loads(g.read_text().strip().splitlines()[-1])
            print(f"GGUF ({r['weights']}): pp{r['prompt_tokens']} {r['pp_tok_s']:.0f} tok/s, "
                  f"tg{r['gen_tokens']} {r['tg_tok_s']:.0f} tok/s")


if __name__ == "__main__":
    main()
