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

Exits 0 when every check passes, 1 with a message otherwise.
"""

import argparse
import os
import re
import sys
import time
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
    print(f"PASS: chat page ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
