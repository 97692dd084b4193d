#!/usr/bin/env python3
"""The official `openai` Python client against `tessera serve` on the shipped shapes model.

Starts the server itself, then: a chat with an image as a data URL (the answer must equal the
CLI's `tessera generate` answer), the same chat streamed with usage, a raw completion, models,
embeddings, and the exception types the client raises for bad requests. Exits non-zero on any
failure.

    python3 scripts/tests/openai_client.py [--tessera target/debug/tessera]
"""

import argparse
import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import openai

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
IMAGE = os.path.join(ROOT, "models", "shapes-vlm", "examples", "three_shapes.png")
QUESTION = "How many shapes are there?"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"tessera serve exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if json.load(r)["status"] == "ok":
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("tessera serve did not become healthy in time")


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}")


def expect_error(kind, call, what):
    try:
        call()
    except kind as e:
        check(True, f"{what} raises {kind.__name__} ({e.status_code})")
        return
    except openai.APIError as e:
        raise AssertionError(f"{what}: expected {kind.__name__}, got {type(e).__name__}: {e}")
    raise AssertionError(f"{what}: no error")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=os.path.join(ROOT, "target", "debug", "tessera"))
    args = ap.parse_args()

    cli = subprocess.run(
        [args.tessera, "generate", "--image", IMAGE, "--prompt", QUESTION],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    cli_answer = cli.stdout.rstrip("\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [args.tessera, "serve", "--port", str(port), "--served-model-name", "shapes"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_healthy(base, proc)
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        with open(IMAGE, "rb") as f:
            url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
        messages = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": QUESTION},
        ]}]

        res = client.chat.completions.create(model="shapes", messages=messages, temperature=0)
        answer = res.choices[0].message.content
        check(answer == cli_answer, f"chat answer {answer!r} equals the CLI's {cli_answer!r}")
        check(res.choices[0].finish_reason == "stop", "finish_reason stop")
        check(res.usage.total_tokens == res.usage.prompt_tokens + res.usage.completion_tokens, "usage adds up")

        stream = client.chat.completions.create(
            model="shapes", messages=messages, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
        pieces, usage, finish = [], None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                finish = choice.finish_reason or finish
        check("".join(pieces) == cli_answer, f"streamed answer {''.join(pieces)!r} equals the CLI's")
        check(finish == "stop" and usage is not None and usage.completion_tokens >= 1, "stream ends with usage")

        comp = client.completions.create(model="shapes", prompt="Question: How many", max_tokens=3, temperature=0)
        check(comp.usage.completion_tokens <= 3 and comp.choices[0].text is not None, "raw completion")

        models = client.models.list()
        check([m.id for m in models.data] == ["shapes"], "models lists the served model")

        emb = client.embeddings.create(model="shapes", input=["How many shapes", "What color"])
        check(len(emb.data) == 2 and len(emb.data[0].embedding) == 192, "embeddings: 2 vectors of 192")

        bad_image = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}},
            {"type": "text", "text": QUESTION},
        ]}]
        expect_error(openai.BadRequestError,
                     lambda: client.chat.completions.create(model="shapes", messages=bad_image),
                     "an image that does not decode")
        expect_error(openai.NotFoundError,
                     lambda: client.chat.completions.create(model="gpt-4", messages=messages),
                     "an unknown model")
        expect_error(openai.BadRequestError,
                     lambda: client.chat.completions.create(model="shapes", messages=messages, n=2),
                     "n = 2")
        expect_error(openai.BadRequestError,
                     lambda: client.chat.completions.create(model="shapes", messages=messages, temperature=5),
                     "temperature 5")
        print("openai client: all checks passed")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        code = proc.returncode
        if code not in (0, -15):
            print(proc.stderr.read(), file=sys.stderr)
            raise SystemExit(f"tessera serve exited with {code} on SIGTERM")


if __name__ == "__main__":
    main()
