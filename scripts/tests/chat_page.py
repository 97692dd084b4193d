#!/usr/bin/env python3
"""Real-browser test of the chat page that `tessera serve` serves at `/`.

Starts the server on the default model (models/shapes-vlm), opens the page in headless
Chromium (Debian's /usr/bin/chromium, driven by Playwright), uploads an example image,
asks "How many shapes are there?", waits for the streamed answer and checks it is "3",
that the user's bubble shows the image, that tokens/s is shown, and that the page has no
horizontal scroll at phone width (375 px). Saves a screenshot to docs/chat-page.png.

    python3 -m venv .venv-browser && .venv-browser/bin/pip install -r scripts/tests/requirements.txt
    apt-get install -y chromium        # if /usr/bin/chromium is missing
    cargo build -p tessera-cli
    .venv-browser/bin/python scripts/tests/chat_page.py [--binary ./target/debug/tessera] [--port N]

Then, on the tiny Llama fixture with a template that opens a thinking block when
`enable_thinking` is set (tests/fixtures/tiny/llama-gqa, copied with that template), the page's
requests get `chat_template_kwargs` and then a forced tool call added on their way (Playwright's
request routing): the first answer's reasoning is shown collapsed, equal to the
`reasoning_content` of the same request sent directly; the second shows the tool call (name and
arguments) the direct request returns.

Exits 0 when every check passes, 1 with a message otherwise.
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright
from served import Served

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "models/shapes-vlm/examples/three_shapes.png"
SCREENSHOT = ROOT / "docs/chat-page.png"
QUESTION = "How many shapes are there?"
EXPECTED = "3"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
STARTUP_TIMEOUT_S = 60
ANSWER_TIMEOUT_MS = 60_000


class TestFailure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise TestFailure(message)


def run_browser(base, chromium):
    console_errors = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            page.set_default_timeout(15_000)
            page.on("console", lambda m: m.type == "error" and console_errors.append(m.text))
            page.on("pageerror", lambda e: console_errors.append(str(e)))

            page.goto(base + "/")
            step("model name")
            try:
                page.wait_for_function(
                    "document.querySelector('#model-name').textContent.includes('shapes-vlm')", timeout=10_000)
            except PlaywrightError:
                raise TestFailure(f"#model-name shows {page.text_content('#model-name')!r}, not 'shapes-vlm'")

            step("upload image and ask")
            page.set_input_files("#file-input", str(IMAGE))
            page.wait_for_selector("#attachments img", timeout=5_000)
            page.fill("#prompt", QUESTION)
            page.click("#send")

            step("wait for the streamed answer")
            answer_sel = ".msg.assistant.done"
            try:
                page.wait_for_selector(answer_sel, timeout=ANSWER_TIMEOUT_MS)
            except PlaywrightError:
                raise TestFailure(f"no finished assistant message within {ANSWER_TIMEOUT_MS // 1000} s")
            bot = page.locator(".msg.assistant").last
            classes = bot.get_attribute("class") or ""
            text = bot.locator(".text").inner_text().strip()
            check("error" not in classes.split(), f"assistant message is an error: {text!r}")
            check(text == EXPECTED, f"answer is {text!r}, expected {EXPECTED!r}")

            step("user bubble thumbnail")
            user = page.locator(".msg.user").last
            check(user.locator(".text").inner_text().strip() == QUESTION, "user bubble lacks the question")
            check(user.locator("img").count() == 1, "user bubble has no <img> thumbnail")
            loaded = user.locator("img").evaluate("img => img.complete && img.naturalWidth > 0")
            check(loaded, "thumbnail in the user bubble did not load")
            check(page.locator("#attachments img").count() == 0, "composer still shows the sent image")

            step("tokens/s")
            stats = page.text_content("#stats") or ""
            check(re.search(r"\d+(\.\d+)?\s*tokens/s", stats), f"#stats shows no tokens/s figure: {stats!r}")
            check(page.is_visible("#send") and page.is_hidden("#stop"), "Send/Stop buttons not back to idle")

            step("screenshot")
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT))

            step("phone width")
            page.set_viewport_size({"width": 375, "height": 800})
            page.wait_for_timeout(200)
            width = page.evaluate("document.scrollingElement.scrollWidth")
            check(width <= 375, f"horizontal scroll at 375 px: scrollWidth is {width}")

            check(not console_errors, "errors in the browser console:\n  " + "\n  ".join(console_errors))
            print(f"answer {text!r}; stats {stats!r}; screenshot {SCREENSHOT.relative_to(ROOT)}")
        finally:
            browser.close()


TINY = ROOT / "tests/fixtures/tiny/llama-gqa"
ADD = {"type": "function", "function": {"name": "add", "description": "Adds two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"], "additionalProperties": False}}}


def thinking_model(dest):
    """The tiny Llama fixture with a template that opens `<think>` when `enable_thinking` is set
    (as crates/server/tests/http_common's `thinking_model`), and room for a tool's definition."""
    shutil.copytree(TINY, dest)
    path = Path(dest) / "tokenizer_config.json"
    config = json.loads(path.read_text())
    template = config["chat_template"]
    opened = template.replace("'<|im_start|>assistant\n'",
                              "'<|im_start|>assistant\n' }}{% if enable_thinking %}{{ '<think>\n' }}{% endif %}{{ ''")
    if opened == template:
        raise TestFailure(f"the fixture's template changed: {template!r}")
    config["chat_template"] = opened + "{# </think> #}"
    path.write_text(json.dumps(config))
    # A tool's definition in the system prompt takes ~430 positions; the fixture's context is 128.
    # (Plain RoPE: the context setting changes no output, only what the server admits.)
    path = Path(dest) / "config.json"
    config = json.loads(path.read_text())
    config["max_position_embeddings"] = 1024
    path.write_text(json.dumps(config))


def direct(base, body):
    """`body` sent straight to /v1/chat/completions, whole: the response's message."""
    body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["choices"][0]["message"]


def run_agent_page(base, chromium):
    """Reasoning and a tool call on the page (the requests get what the page does not send)."""
    extra = [{"chat_template_kwargs": {"enable_thinking": True}}, {"tools": [ADD], "tool_choice": "required"}]
    sent = []
    console_errors = []

    def add_fields(route):
        body = json.loads(route.request.post_data)
        body.update(extra[len(sent)])
        sent.append(body)
        route.continue_(post_data=json.dumps(body))

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            page.set_default_timeout(15_000)
            page.on("console", lambda m: m.type == "error" and console_errors.append(m.text))
            page.on("pageerror", lambda e: console_errors.append(str(e)))
            page.route("**/v1/chat/completions", add_fields)
            page.goto(base + "/")

            step("reasoning, collapsed")
            page.fill("#prompt", "Hi")
            page.click("#send")
            page.wait_for_selector(".msg.assistant.done", timeout=ANSWER_TIMEOUT_MS)
            bot = page.locator(".msg.assistant").last
            details = bot.locator("details.reasoning")
            check(details.count() == 1, "no reasoning block in the answer")
            check(not details.evaluate("d => d.open"), "the reasoning is not collapsed")
            check(details.locator("summary").inner_text().strip() == "Reasoning", "the summary is not 'Reasoning'")
            shown = details.locator(".reasoning-text").text_content()
            want = direct(base, sent[0])
            check(shown == (want.get("reasoning_content") or "").strip(),
                  f"the page shows reasoning {shown!r}, the API {want.get('reasoning_content')!r}")
            check(shown, "the reasoning is empty")
            reasoning = shown
            text = bot.locator(".text").text_content()
            check(text == (want.get("content") or "").strip(), f"content {text!r} vs {want.get('content')!r}")
            dim = details.evaluate("d => getComputedStyle(d).color") != bot.evaluate("b => getComputedStyle(b).color")
            check(dim, "the reasoning is not dimmed")

            step("a tool call")
            page.fill("#prompt", "Add 2 and 3.")
            page.click("#send")
            page.wait_for_function("document.querySelectorAll('.msg.assistant.done').length == 2",
                                   timeout=ANSWER_TIMEOUT_MS)
            bot = page.locator(".msg.assistant").last
            call = bot.locator(".tool-call")
            check(call.count() == 1, f"{call.count()} tool calls shown")
            check(call.locator(".tool-name").inner_text().strip() == "\u2192 add", "the call's name is not shown")
            want = direct(base, sent[1])["tool_calls"][0]["function"]
            shown = json.loads(call.locator(".tool-args").text_content())
            check(shown == json.loads(want["arguments"]), f"arguments {shown} vs {want['arguments']}")
            check(isinstance(shown.get("a"), int) and isinstance(shown.get("b"), int), f"arguments {shown}")
            check("called a tool" in bot.inner_text(), "no note that the model called a tool")
            check(not console_errors, "errors in the browser console:\n  " + "\n  ".join(console_errors))
            print(f"reasoning {len(reasoning)} chars; call add({shown})")
        finally:
            browser.close()


def step(name):
    print(f"  - {name}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default="./target/debug/tessera", help="the tessera binary")
    ap.add_argument("--port", type=int, default=0, help="port for tessera serve (default: a free one)")
    ap.add_argument("--chromium", default="/usr/bin/chromium", help="Chromium executable")
    args = ap.parse_args()

    binary = Path(args.binary)
    if not binary.is_absolute():
        binary = (Path.cwd() / binary).resolve()
    for path, hint in [(binary, "cargo build -p tessera-cli"), (Path(args.chromium), "apt-get install -y chromium"),
                       (IMAGE, "the shapes-vlm example image")]:
        if not path.exists():
            print(f"FAIL: {path} not found ({hint})", file=sys.stderr)
            return 1

    started = time.monotonic()
    served = Served(lambda port: [str(binary), "serve", "--port", str(port)], port=args.port,
                    timeout=STARTUP_TIMEOUT_S)
    print(f"chat page test: {binary} serve --port {served.port}", flush=True)
    try:
        with served:
            run_browser(served.base, args.chromium)
    except (TestFailure, PlaywrightError, RuntimeError) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        print(f"server log ({served.log.name}):\n{served.tail()}", file=sys.stderr)
        return 1
    os.unlink(served.log.name)

    tmp = tempfile.mkdtemp(prefix="tessera-chat-page-")
    try:
        model = os.path.join(tmp, "tiny")
        thinking_model(model)
        served = Served(lambda port: [str(binary), "serve", "-m", model, "--port", str(port)],
                        timeout=STARTUP_TIMEOUT_S)
        print(f"chat page, reasoning and tools: {binary} serve -m {model} --port {served.port}", flush=True)
        with served:
            run_agent_page(served.base, args.chromium)
    except (TestFailure, PlaywrightError, RuntimeError, OSError) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        print(f"server log ({served.log.name}):\n{served.tail()}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.unlink(served.log.name)
    print(f"PASS: chat page ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
