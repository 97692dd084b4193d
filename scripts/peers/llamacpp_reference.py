#!/usr/bin/env python3
"""Greedy-decode logits reference from the peer llama.cpp (llama-cpp-python==0.3.36 bindings on
the llama.cpp that scripts/peers/build_llamacpp.sh builds; run it via llamacpp_reference.sh, which
installs the bindings and sets LLAMA_CPP_LIB_PATH).

For one GGUF file and fixed raw prompts (no chat template; BOS added only if the GGUF's
tokenizer.ggml.add_bos_token says so), evaluates with logits_all=True, n_threads=2, then decodes
16 steps greedily (temperature 0 = argmax, lowest id on ties, as llama.cpp's greedy sampler) and
writes JSON: file name, versions, per prompt the prompt token ids, the top-5 (id, logit) at every
prompt position, and per step the chosen id, the top-5 (id, logit) and the top-1/top-2 margin.

Usage: llamacpp_reference.py MODEL.gguf OUT.json [--steps 16] [--top 5] [--threads 2]
"""
import argparse
import ctypes
import json
import os
import re
import sys

import numpy as np

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village at the edge of a quiet forest, there lived an old "
    "clockmaker who spent his days repairing watches for the farmers and their families. One "
    "morning, a stranger knocked on his door and",
]


def top_k(row: np.ndarray, k: int):
    # stable sort on -logit: equal logits keep ascending id order (matches argmax tie-breaking)
    idx = np.argsort(-row, kind="stable")[:k]
    return [[int(i), float(row[i])] for i in idx]


def lib_versions(lib_dir):
    out = {}
    try:
        ggml = ctypes.CDLL(os.path.join(lib_dir, "libggml-base.so"))
        for name in ("ggml_version", "ggml_commit"):
            fn = getattr(ggml, name)
            fn.restype = ctypes.c_char_p
            out[name] = fn().decode()
    except (OSError, AttributeError):
        pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--n-batch", type=int, default=None,
                    help="prompt tokens per llama.cpp batch (default: the whole prompt at once; 1 runs the "
                    "prompt token by token through the decode kernels, to measure llama.cpp against itself)")
    ap.add_argument("--prompt", action="append", help="replace the default prompts (repeatable)")
    ap.add_argument("--kv", choices=["f32", "f16"], default="f32", help="KV cache type (f16: llama.cpp default, with flash attention)")
    args = ap.parse_args()

    lib_dir = os.environ.get("LLAMA_CPP_LIB_PATH")
    if not lib_dir:
        sys.exit("LLAMA_CPP_LIB_PATH is not set: run this through scripts/peers/llamacpp_reference.sh")

    import llama_cpp  # after the env check: importing it loads libllama.so

    llm = llama_cpp.Llama(
        model_path=args.model,
        n_ctx=args.n_ctx,
        n_batch=args.n_batch or args.n_ctx,
        n_ubatch=args.n_batch or args.n_ctx,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        logits_all=True,
        seed=0,
        # tessera keeps its KV cache and attention in f32: so does the reference, so that the
        # comparison isolates the quantized matmuls (llama.cpp's default is an f16 cache and
        # f16 flash attention on the CPU).
        type_k=0 if args.kv == "f32" else 1,
        type_v=0 if args.kv == "f32" else 1,
        flash_attn=args.kv != "f32",
        verbose=False,
    )
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    versions = lib_versions(lib_dir)

    results = []
    for prompt in args.prompt or PROMPTS:
        llm.reset()
        # add_bos=True here is llama_tokenize's add_special: BOS/EOS only where the vocab asks.
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=False)
        if len(ids) + args.steps > args.n_ctx:
            sys.exit(f"prompt too long for --n-ctx {args.n_ctx}")
        llm.eval(ids)
        prompt_top = [top_k(llm.scores[i], args.top) for i in range(len(ids))]
        steps = []
        generated = []
        for _ in range(args.steps):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            top = top_k(row, max(args.top, 2))
            chosen = top[0][0]
            assert chosen == int(np.argmax(row))
            steps.append({
                "chosen": chosen,
                "top": top[: args.top],
                "margin": top[0][1] - top[1][1],
            })
            generated.append(chosen)
            llm.eval([chosen])
        results.append({
            "prompt": prompt,
            "prompt_ids": [int(t) for t in ids],
            "prompt_top": prompt_top,
            "steps": steps,
            "generated_text": llm.detokenize(generated).decode("utf-8", errors="replace"),
        })

    doc = {
        "file": os.path.basename(args.model),
        "engine": "llama.cpp",
        "llama_cpp_python": llama_cpp.__version__,
        # the sdist ships a partial git checkout, so ggml's CMake reports "<commit>-dirty"
        "llama_cpp_commit": versions.get("ggml_commit", "unknown").removesuffix("-dirty"),
        "ggml_version": versions.get("ggml_version", "unknown"),
        "n_threads": args.threads,
        "kv_cache": args.kv,
        "add_bos": add_bos,
        "bos_id": int(llm.token_bos()),
        "n_vocab": int(llm.n_vocab()),
        "results": results,
    }
    text = json.dumps(doc, indent=1)
    # one line per [id, logit] pair instead of four
    text = re.sub(r"\[\n\s+(-?\d+),\n\s+(\S+)\n\s+\]", r"[\1, \2]", text)
    with open(args.out, "w") as f:
        f.write(text + "\n")
    for r in results:
        print(f"{len(r['prompt_ids'])} prompt tokens -> {r['generated_text']!r} "
              f"(min margin {min(s['margin'] for s in r['steps']):.4f})", file=sys.stderr)


if __name__ == "__main__":
    main()
