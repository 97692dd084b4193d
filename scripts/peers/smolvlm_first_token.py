"""Image -> first token on full-size SmolVLM-256M-Instruct: tessera against transformers, side by side.

Dev-time only (needs torch + transformers, ~3 GB; not part of CI). Run with a Python that has them:
    /work/refvenv/bin/python scripts/peers/smolvlm_first_token.py [--threads 2] [--reps 3]

1. Writes (once) ~/.cache/tessera-peers/smolvlm-256m-random/: Idefics3ForConditionalGeneration built by transformers from
   the real config in tests/fixtures/real_configs/smolvlm-256m-instruct (random weights, seed 0, f32 safetensors), the
   real processor/chat-template/generation files, and a tokenizer.json rebuilt from the SmolLM2 GGUF's vocabulary and
   merges (SmolVLM's text model is SmolLM2) plus the checkpoint's 128 added tokens at their real ids.
2. The photo: scikit-image's `chelsea` (451x300), saved as PNG next to the model.
3. transformers (f32, attn_implementation="sdpa", torch threads = --threads): processor(text, image) + generate(1 token),
   best of --reps after one warm-up.
4. tessera (`target/release/tessera-bench --image --threads N`), in f32 and with `--vision-int8`: in one process as
   transformers, from the decoded image and the question (template, image preprocessing, vision tower, connector,
   prefill, the first token's logits), best of --reps after one cold run, whose time is printed beside it (what each
   `tessera generate` process pays). Neither engine's load time is counted.
Prints one table row per engine and the ratio.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CFG = REPO / "tests/fixtures/real_configs/smolvlm-256m-instruct"
OUT = Path(os.path.expanduser("~/.cache/tessera-peers/smolvlm-256m-random"))
PROMPT = "Can you describe this image?"


def gguf_reader():
    """gguf-py from the llama.cpp source that scripts/peers/build_llamacpp.sh unpacked, or PyPI's `gguf`."""
    peers = Path(os.path.expanduser("~/.cache/tessera-peers"))
    for p in sorted(peers.glob("llama-cpp-python-*/vendor/llama.cpp/gguf-py")):
        sys.path.insert(0, str(p))
        break
    try:
        from gguf import GGUFReader  # noqa: E402
    except ImportError:
        raise SystemExit("gguf-py not found: run scripts/peers/build_llamacpp.sh first, or pip install gguf")
    return GGUFReader


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def write_tokenizer(dst: Path):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    gguf = subprocess.run(["bash", str(REPO / "scripts/fetch_smollm2.sh")], capture_output=True, text=True, check=True)
    reader = gguf_reader()(gguf.stdout.strip().splitlines()[-1])
    tokens = field_strings(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field_strings(reader, "tokenizer.ggml.merges")]
    tt = reader.fields["tokenizer.ggml.token_type"]
    types = [int(tt.parts[i][0]) for i in tt.data]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t, ty in zip(tokens, types) if ty == 3])
    added = json.loads((CFG / "added_tokens.json").read_text())
    for content, idx in sorted(added.items(), key=lambda kv: kv[1]):
        assert tok.get_vocab_size() == idx, (content, idx, tok.get_vocab_size())
        tok.add_special_tokens([AddedToken(content, special=True)])
    tok.save(str(dst / "tokenizer.json"))


def build_checkpoint():
    import torch
    import transformers

    if (OUT / "model.safetensors").exists():
        write_tokenizer(OUT)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    config = transformers.AutoConfig.from_pretrained(CFG)
    model = transformers.Idefics3ForConditionalGeneration(config).eval()
    model.save_pretrained(OUT, safe_serialization=True)
    for f in CFG.iterdir():
        if f.name not in ("config.json",) and f.suffix in (".json", ".jinja"):
            shutil.copy(f, OUT / f.name)
    write_tokenizer(OUT)
    print(f"wrote {OUT}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import torch
    import transformers
    from PIL import Image
    from skimage import data

    build_checkpoint()
    photo = OUT / "chelsea.png"
    image = Image.fromarray(data.chelsea())
    image.save(photo)

    torch.set_num_threads(args.threads)
    processor = transformers.AutoProcessor.from_pretrained(OUT)
    model = transformers.AutoModelForImageTextToText.from_pretrained(
        OUT, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    times, cold, n_tokens, hf_first = [], [], 0, None
    for rep in range(args.reps + 1):
        t0 = time.perf_counter()
        inputs = processor(text=prompt, images=[image], return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=1, do_sample=False)
        (times if rep > 0 else cold).append(time.perf_counter() - t0)
        n_tokens = inputs["input_ids"].shape[1]
        hf_first = int(out[0, -1])
    hf, hf_cold = min(times), cold[0]

    exe = REPO / "target/release/tessera-bench"
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "tessera-cli", "--bin", "tessera-bench"], cwd=REPO,
                   check=True)

    def tessera(extra):
        res = subprocess.run(
            [str(exe), "--model", str(OUT), "--image", str(photo), "--image-prompt", PROMPT, "--threads",
             str(args.threads), "--reps", str(args.reps), "--json", *extra],
            capture_output=True, text=True, check=True,
        )
        j = json.loads(res.stdout.strip().splitlines()[-1])
        return j["first_token_s"], j["cold_first_token_s"], j["prompt_positions"], j["first_token"][0]

    ts, ts_cold, ts_tokens, ts_first = tessera([])
    ti, ti_cold, _, ti_first = tessera(["--vision-int8"])

    print(f"# SmolVLM-256M-Instruct (real config, random weights), {image.width}x{image.height} photo, f32, "
          f"{args.threads} threads, best of {args.reps}")
    print("| engine | prompt tokens | image -> first token (s) | first run in the process (s) | first token id |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| transformers {transformers.__version__} (torch {torch.__version__}, sdpa) | {n_tokens} | {hf:.2f} | "
          f"{hf_cold:.2f} | {hf_first} |")
    print(f"| tessera (f32) | {ts_tokens} | {ts:.2f} | {ts_cold:.2f} | {ts_first} |")
    print(f"| tessera --vision-int8 | {ts_tokens} | {ti:.2f} | {ti_cold:.2f} | {ti_first} |")
    print(f"tessera / transformers: f32 {ts / hf:.2f}, --vision-int8 {ti / hf:.2f}")


if __name__ == "__main__":
    main()
