#!/usr/bin/env python3
"""Server load bench: aggregate decode tokens/s and time to first token (p50/p99) at 1, 4, 16 and
64 concurrent streaming clients, for `tessera serve` and, with --llama-server, llama.cpp's
llama-server (started with --parallel N for N clients) on the same GGUF, side by side from one run.

Each client streams one chat completion (greedy, max_tokens fixed) over loopback; a round starts
all N clients at once. Aggregate tok/s = all completion tokens of the round / the round's wall
time. Not part of CI.

    python3 scripts/bench_server.py [--tessera target/release/tessera] [--model GGUF]
        [--llama-server PATH] [--threads 2] [--streams 1,4,16,64] [--max-tokens 64] [--rounds 3]
        [--kv-cache-dtype f16]

Both engines run with the same KV cache type (`--kv-cache-dtype`; f16 is llama-server's default).
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "tests"))
from served import Served  # noqa: E402
SMOLLM2 = os.path.join(ROOT, "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
TOPICS = ["the sea", "a lighthouse", "mountains", "a city at night", "an old clock", "the desert",
          "a forest", "a train journey"]


def one_stream(base, i, max_tokens, out):
    body = {
        "messages": [{"role": "user", "content": f"Write a long story about {TOPICS[i % len(TOPICS)]}."}],
        "temperature": 0, "max_tokens": max_tokens, "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    start = time.time()
    first, tokens = None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for c in chunk.get("choices", []):
                if c.get("delta", {}).get("content") and first is None:
                    first = time.time() - start
    out[i] = (first if first is not None else time.time() - start, tokens)


def round_of(base, n, max_tokens):
    out = [None] * n
    threads = [threading.Thread(target=one_stream, args=(base, i, max_tokens, out)) for i in range(n)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - start
    ttfts = sorted(o[0] for o in out)
    tokens = sum(o[1] for o in out)
    p99 = ttfts[min(len(ttfts) - 1, int(round(0.99 * (len(ttfts) - 1))))]
    return tokens / wall, statistics.median(ttfts), p99, tokens


def run_engine(argv, streams, max_tokens, rounds):
    """`rounds` rounds of each size in `streams` against the server `argv(port)` starts; per
    size, the round of median aggregate tok/s (the machine is noisy)."""
    with Served(argv, timeout=120) as server:
        round_of(server.base, 1, 8)  # warm-up
        out = {}
        for n in streams:
            runs = sorted((round_of(server.base, n, max_tokens) for _ in range(rounds)), key=lambda r: r[0])
            out[n] = runs[len(runs) // 2]
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "target", "release", "tessera"))
    ap.add_argument("--model", default=SMOLLM2)
    ap.add_argument("--llama-server", help="llama.cpp's llama-server binary (optional)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", default="1,4,16,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="rounds per stream count; the median is shown")
    ap.add_argument("--kv-cache-dtype", default="f16", choices=["f16", "f32"],
                    help="both engines' KV cache type (f16: llama-server's default)")
    args = ap.parse_args()
    streams = [int(s) for s in args.streams.split(",")]
    results = {}
    results["tessera"] = run_engine(
        lambda port: [args.tessera, "serve", "--model", args.model, "--port", str(port),
                      "--threads", str(args.threads), "--max-batch", str(max(streams)),
                      "--kv-cache-dtype", args.kv_cache_dtype],
        streams, args.max_tokens, args.rounds)
    if args.llama_server:
        results["llama-server"] = {
            n: run_engine(lambda port, n=n: [args.llama_server, "-m", args.model, "--port", str(port),
                                             "-t", str(args.threads), "--parallel", str(n), "-c", str(2048 * n),
                                             "-ctk", args.kv_cache_dtype, "-ctv", args.kv_cache_dtype],
                          [n], args.max_tokens, args.rounds)[n]
            for n in streams
        }
    print(f"model {os.path.basename(args.model)}, {args.threads} threads, max_tokens {args.max_tokens}, greedy, "
          f"{args.kv_cache_dtype} KV cache, median of {args.rounds} rounds")
    print(f"{'streams':>7} | " + " | ".join(f"{e:^36}" for e in results))
    print(f"{'':>7} | " + " | ".join(f"{'agg tok/s':>10} {'ttft p50':>9} {'ttft p99':>9} {'tok':>5}" for _ in results))
    for n in streams:
        cells = []
        for e in results:
            tps, p50, p99, tok = results[e][n]
            cells.append(f"{tps:>10.1f} {p50:>8.3f}s {p99:>8.3f}s {tok:>5}")
        print(f"{n:>7} | " + " | ".join(cells))
    t = results["tessera"]
    if 1 in t and 16 in t:
        print(f"tessera aggregate at 16 streams / 1 stream: {t[16][0] / t[1][0]:.2f}x")
    if "llama-server" in results:
        for n in streams:
            print(f"tessera / llama-server aggregate at {n} streams: "
                  f"{t[n][0] / results['llama-server'][n][0]:.2f}x")


if __name__ == "__main__":
    main()
