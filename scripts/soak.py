#!/usr/bin/env python3
"""Soak test of `tessera serve` (issue 43, point 2; not run in CI): many concurrent clients for a
long time, with the server's resources recorded per interval.

    python3 scripts/soak.py --binary target/debug/tessera --minutes 30 --out soak-out/
    python3 scripts/soak.py --minutes 3 --interval 15 --clients 64 --out /tmp/soak   # a short proof

Clients (64 by default) loop over a mix of requests, each client with its own seeded choice:
chats without images (streamed and not), chats with an image (when the model takes images; a
model that refuses them is noted and the kind skipped), `response_format: json_schema`, long
prompts that share a long prefix (so they fill the prefix cache and continue from it), and
greedy chats from a fixed set whose answers must equal the answers each got alone before the
soak began. A tenth of the streamed requests hang up after their first events.

Per interval (60 s by default) it records the server's RSS, open file descriptors and threads
(/proc), the prefix and image caches' bytes and open connections (/metrics), the requests
completed, p50 / p99 latency, errors that were not the client's doing (5xx, broken connections),
hang-ups and greedy mismatches; writes OUT/soak.csv and OUT/soak.svg (RSS and p99 over time) and
prints a verdict: PASS when no server error and no greedy mismatch happened, the server exited 0
on SIGTERM, and (on runs of 10 minutes or more) RSS and descriptors after warm-up (the first
third of the run) stay within --rss-slack of their warm-up-end values.

Standard library only (python3 >= 3.9); Linux (/proc).
"""

import argparse
import base64
import csv
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SMOL = REPO / "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
IMAGES = sorted((REPO / "models/shapes-vlm/examples").glob("*.png"))

GREEDY_PROMPTS = [
    "What is the capital of France?",
    "Name three colours.",
    "Count from one to five.",
    "What is 12 times 12?",
    "Say hello in Spanish.",
    "What do bees make?",
]


def long_prefix(sections):
    """A long system prompt that every long-prefix request shares (about 22 tokens a section)."""
    return " ".join(f"Section {i}: the lighthouse keeper logs the weather, the ships that pass, and the state "
                    f"of the lamp." for i in range(sections))


# Connections in flight, so that the end of the run can hang up on them (the drain then ends at
# once instead of waiting for every running request).
OPEN, OPEN_LOCK = set(), threading.Lock()
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


class Stats:
    """What the clients report, per interval; the sampler takes and resets it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()
        self.total = {"requests": 0, "errors": 0, "mismatches": 0, "hangups": 0, "client_errors": 0}
        self.error_samples = []

    def reset(self):
        self.latencies, self.requests, self.errors = [], 0, 0
        self.hangups, self.mismatches, self.client_errors, self.skipped = 0, 0, 0, 0

    def add(self, kind, latency=None, error=None, client_error=None, hangup=False, mismatch=None):
        with self.lock:
            if error:
                self.errors += 1
                self.total["errors"] += 1
                if len(self.error_samples) < 20:
                    self.error_samples.append(f"{kind}: {error}")
            elif client_error:
                self.client_errors += 1
                self.total["client_errors"] += 1
            elif hangup:
                self.hangups += 1
                self.total["hangups"] += 1
            else:
                self.requests += 1
                self.total["requests"] += 1
                self.latencies.append(latency)
            if mismatch:
                self.mismatches += 1
                self.total["mismatches"] += 1
                if len(self.error_samples) < 20:
                    self.error_samples.append(f"{kind}: greedy mismatch {mismatch}")

    def take(self):
        with self.lock:
            out = (self.latencies, self.requests, self.errors, self.hangups, self.mismatches, self.client_errors)
            self.reset()
            return out


def post(port, path, body, timeout=600, stream=False, hang_up_after=None):
    """POSTs JSON; returns (status, parsed body or streamed text, hung_up). Streams are read to
    their end (or hung up on after `hang_up_after` events)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    with OPEN_LOCK:
        OPEN.add(conn)
    try:
        conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
        res = conn.getresponse()
        if res.status != 200 or not stream:
            data = res.read()
            try:
                return res.status, json.loads(data), False
            except ValueError:
                return res.status, data.decode(errors="replace"), False
        text, events, done = [], 0, False
        for raw in res:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            events += 1
            chunk = json.loads(data)
            for choice in chunk.get("choices", []):
                text.append(choice.get("delta", {}).get("content") or "")
            if hang_up_after is not None and events >= hang_up_after:
                return 200, "".join(text), True
        if not done:
            raise ConnectionError("stream ended without [DONE]")
        return 200, "".join(text), False
    finally:
        with OPEN_LOCK:
            OPEN.discard(conn)
        conn.close()


def hang_up_all():
    with OPEN_LOCK:
        for conn in OPEN:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except (OSError, AttributeError):
                pass


def chat(messages, **extra):
    return {"messages": messages, **extra}


def image_message(path, question):
    url = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": question}]}]


def client(i, port, stop, stats, solo, images_ok, max_tokens, prefix):
    rng = random.Random(1000 + i)
    kinds = ["text", "text-stream", "json-schema", "long-prefix", "greedy", "greedy-stream"]
    if images_ok:
        kinds += ["image", "image-stream"]
    while not stop.is_set():
        kind = rng.choice(kinds)
        stream = kind.endswith("stream")
        hang_up = 2 if stream and rng.random() < 0.1 else None
        expect = None
        if kind.startswith("text"):
            body = chat([{"role": "user", "content": f"Write a short note about topic {rng.randint(0, 10**6)}."}],
                        temperature=0.8, seed=rng.randint(0, 2**31), max_tokens=max_tokens)
        elif kind == "json-schema":
            body = chat([{"role": "user", "content": "Invent a person; answer as JSON with name and age."}],
                        temperature=0.7, seed=rng.randint(0, 2**31), max_tokens=max_tokens,
                        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}})
        elif kind == "long-prefix":
            body = chat([{"role": "system", "content": prefix},
                         {"role": "user", "content": f"What happened in section {rng.randint(0, 59)}?"}],
                        temperature=0.8, seed=rng.randint(0, 2**31), max_tokens=max_tokens)
        elif kind.startswith("image"):
            body = chat(image_message(rng.choice(IMAGES), "How many shapes are there?"),
                        temperature=0.8, seed=rng.randint(0, 2**31), max_tokens=max_tokens)
        else:  # greedy
            prompt = rng.choice(GREEDY_PROMPTS)
            body = chat([{"role": "user", "content": prompt}], temperature=0, max_tokens=max_tokens)
            expect = solo[prompt]
        if stream:
            body["stream"] = True
        start = time.monotonic()
        try:
            status, out, hung_up = post(port, "/v1/chat/completions", body, stream=stream, hang_up_after=hang_up)
        except Exception as e:  # a broken connection is the server's doing: the client did not hang up
            if not stop.is_set():
                stats.add(kind, error=f"{type(e).__name__}: {e}")
            continue
        latency = time.monotonic() - start
        if status == 429:  # the queue is full: back-pressure, counted with the client's
            stats.add(kind, client_error=f"429")
            time.sleep(0.5)
            continue
        if status >= 500:
            if not stop.is_set():  # a 503 once the run stops is the drain's
                stats.add(kind, error=f"HTTP {status}: {str(out)[:200]}")
            continue
        if status != 200:
            stats.add(kind, client_error=f"HTTP {status}")
            continue
        if hung_up:
            stats.add(kind, hangup=True)
            continue
        text = out if stream else out["choices"][0]["message"]["content"]
        mismatch = None
        if expect is not None and text != expect:
            mismatch = f"{body['messages'][0]['content']!r}: {text[:60]!r} alone {expect[:60]!r}"
        # An answer cut by max_tokens is a prefix of valid JSON; a whole one must parse.
        if kind == "json-schema" and out["choices"][0].get("finish_reason") == "stop":
            try:
                parsed = json.loads(text)
                if not isinstance(parsed.get("age"), int):
                    raise ValueError("no integer age")
            except ValueError as e:
                stats.add(kind, error=f"json_schema answer {text[:80]!r}: {e}")
                continue
        stats.add(kind, latency=latency, mismatch=mismatch)


def proc_status(pid):
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return {"rss_mib": int(out["VmRSS"].split()[0]) / 1024, "threads": int(out["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    values = {}
    for line in text.splitlines():
        if line.startswith("tessera_"):
            name, _, value = line.partition(" ")
            values[name[len("tessera_"):]] = float(value)
    return values


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def svg_plot(rows, path):
    """Two panels over time: RSS (MiB) and p99 latency (s)."""
    w, h, pad = 720, 220, 50
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{2 * h + 20}" font-family="sans-serif" '
             f'font-size="12">', f'<rect width="{w}" height="{2 * h + 20}" fill="white"/>']
    for panel, (key, label, colour) in enumerate([("rss_mib", "RSS (MiB)", "#1f77b4"),
                                                  ("p99_s", "p99 latency (s)", "#d62728")]):
        y0 = panel * (h + 20)
        pts = [(r["t_min"], r[key]) for r in rows if r[key] == r[key]]  # NaN-free
        if not pts:
            continue
        tmax = max(max(t for t, _ in pts), 1e-9)
        vmax = max(v for _, v in pts) * 1.1 or 1
        sx = lambda t: pad + (w - 2 * pad) * t / tmax
        sy = lambda v: y0 + h - pad / 2 - (h - pad) * v / vmax
        parts.append(f'<text x="{pad}" y="{y0 + 15}">{label}, max {vmax / 1.1:.1f}</text>')
        parts.append(f'<line x1="{pad}" y1="{sy(0)}" x2="{w - pad}" y2="{sy(0)}" stroke="#888"/>')
        parts.append(f'<line x1="{pad}" y1="{sy(0)}" x2="{pad}" y2="{sy(vmax)}" stroke="#888"/>')
        for frac in (0.5, 1.0):
            parts.append(f'<text x="5" y="{sy(vmax * frac / 1.1) + 4}">{vmax * frac / 1.1:.0f}</text>')
        parts.append(f'<text x="{w - pad - 60}" y="{sy(0) + 18}">{tmax:.1f} min</text>')
        line = " ".join(f"{sx(t):.1f},{sy(v):.1f}" for t, v in pts)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
    parts.append("</svg>")
    path.write_text("\n".join(parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=str(REPO / "target/debug/tessera"))
    ap.add_argument("--model", default=str(SMOL))
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--interval", type=float, default=60, help="seconds between samples")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--long-sections", type=int, default=60, help="sections of the long shared prompt (~22 tokens each)")
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--rss-slack", type=float, default=0.10, help="allowed growth of RSS/fds after warm-up")
    ap.add_argument("--out", default="soak-out")
    ap.add_argument("serve_args", nargs="*", help="more `tessera serve` flags (after --)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    log = open(out / "serve.log", "w")
    server = subprocess.Popen([args.binary, "serve", "--model", args.model, "--port", str(args.port),
                               "--max-connections", str(max(512, 2 * args.clients)), *args.serve_args],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                metrics(args.port)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"tessera serve did not start: see {out / 'serve.log'}")
                time.sleep(0.2)
        # Greedy answers alone, before the soak; and whether the model takes images.
        solo = {}
        for p in GREEDY_PROMPTS:
            status, body, _ = post(args.port, "/v1/chat/completions",
                                   chat([{"role": "user", "content": p}], temperature=0, max_tokens=args.max_tokens))
            if status != 200:
                sys.exit(f"a solo greedy request failed: {status} {body}")
            solo[p] = body["choices"][0]["message"]["content"]
        status, body, _ = post(args.port, "/v1/chat/completions",
                               chat(image_message(IMAGES[0], "What is this?"), max_tokens=2))
        images_ok = status == 200
        if not images_ok:
            print(f"image chats skipped: the model refuses images ({status}: {str(body)[:120]})")

        stats, stop = Stats(), threading.Event()
        threads = [threading.Thread(target=client, args=(i, args.port, stop, stats, solo, images_ok, args.max_tokens,
                                          long_prefix(args.long_sections)),
                                    daemon=True) for i in range(args.clients)]
        for t in threads:
            t.start()
        rows, start = [], time.monotonic()
        end = start + args.minutes * 60
        fields = ["t_min", "rss_mib", "fds", "threads", "prefix_cache_mib", "image_cache_mib", "connections_open",
                  "requests", "errors", "client_errors", "hangups", "mismatches", "p50_s", "p99_s"]
        with open(out / "soak.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            while time.monotonic() < end and server.poll() is None:
                time.sleep(min(args.interval, max(0.0, end - time.monotonic())))
                lat, n, errors, hangups, mismatches, client_errors = stats.take()
                m = metrics(args.port)
                row = {"t_min": round((time.monotonic() - start) / 60, 3), **proc_status(server.pid),
                       "prefix_cache_mib": m.get("prefix_cache_bytes", 0) / 2**20,
                       "image_cache_mib": m.get("image_cache_bytes", 0) / 2**20,
                       "connections_open": m.get("connections_open", 0), "requests": n, "errors": errors,
                       "client_errors": client_errors, "hangups": hangups, "mismatches": mismatches,
                       "p50_s": percentile(lat, 0.5), "p99_s": percentile(lat, 0.99)}
                row = {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}
                rows.append(row)
                writer.writerow(row)
                f.flush()
                print(" ".join(f"{k}={row[k]}" for k in fields), flush=True)
        stop.set()
        hang_up_all()
        if server.poll() is not None:
            sys.exit(f"tessera serve exited during the soak ({server.returncode}): see {out / 'serve.log'}")
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=180)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        log.close()

    svg_plot(rows, out / "soak.svg")
    t = stats.total
    print(f"totals: {t}; server exit {server.returncode} after SIGTERM")
    for e in stats.error_samples:
        print("  " + e)
    warm = [r for r in rows if r["t_min"] >= args.minutes / 3] or rows
    verdict = []
    if t["errors"]:
        verdict.append(f"{t['errors']} server errors")
    if t["mismatches"]:
        verdict.append(f"{t['mismatches']} greedy answers differ from their solo answers")
    # Until the caches fill and the running sequences' KV caches reach their steady size, memory
    # grows by design: flatness is judged only on runs long enough to have a steady state.
    if args.minutes >= 10:
        for key in ("rss_mib", "fds"):
            base, last = warm[0][key], max(r[key] for r in warm)
            if last > base * (1 + args.rss_slack) + (2 if key == "fds" else 0):
                verdict.append(f"{key} grew after warm-up: {base} -> {last}")
    else:
        print(f"RSS / descriptors not judged: {args.minutes} min is too short for a steady state (>= 10 min)")
    if server.returncode != 0:
        verdict.append(f"exit status {server.returncode} after SIGTERM")
    print("PASS" if not verdict else "FAIL: " + "; ".join(verdict))
    print(f"wrote {out / 'soak.csv'} and {out / 'soak.svg'}")
    sys.exit(0 if not verdict else 1)


if __name__ == "__main__":
    main()
