#!/usr/bin/env python3
"""Hostile-input corpus for the tessera binary: malformed models, configs, tokenizers, images,
prompts and flags, each of which must end in one clean `error:` line (or, for valid but odd
inputs, in success) — never a panic, an abort, a hang, a multi-line error or a silent answer.

    python3 scripts/hostile_corpus.py generate OUTDIR
    python3 scripts/hostile_corpus.py run BINARY OUTDIR [--jobs N] [--only SUBSTRING]

`generate` writes every case's files under OUTDIR/<case>/ and OUTDIR/manifest.json, a list of
    {"name", "class", "args", "expect": "error"|"ok", "words"}
`args` follow the binary's name; `{case}` stands for the case's folder and `{repo}` for the
repository root, so the corpus can move. `expect: "error"`: exit status 1 and exactly one
non-empty stderr line, starting with `error:`, that contains every one of `words`
(case-insensitively): what a good message must name (the file, the field, key, tensor or flag,
the number). `expect: "ok"`: exit status 0 and, where `words` are given, every one of them on
stdout (what a valid but odd input must be described as, e.g. by `tessera info`).

`run` generates OUTDIR first when it has no manifest.json, then runs every case (60 s timeout,
6 GiB address space, the repository as working folder, RUST_BACKTRACE and RUST_LIB_BACKTRACE
removed from the environment so that the verdicts do not depend on the caller's shell), prints one line per case and a count per class, and exits 0 only if every
case passes. The cases were written against the binary's behaviour at the time; a failing case
is a bug to fix in the binary, not a case to relax.

Sources (all in the repository): models/shapes-vlm (the default image + text model),
tests/fixtures/tiny/llama-gqa (a tiny text-only Llama), llama.cpp's GGUF + mmproj pairs of the
tiny VLMs (tests/fixtures/vlm/*-gguf) and the header of
models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf, whose metadata (vocabulary,
merges, chat template) goes into a small F32 GGUF (width 64, 2 blocks) that the GGUF cases
mutate. Its token embedding has pseudo-random rows for the first TOKEN_ROWS_RANDOM tokens and
the prompt's tokens, and zeros (a sparse hole on disk) for the rest, which keeps each GGUF case
at about 3 MB of disk.

Standard library only (python3 >= 3.9).
"""

import argparse
import array
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile.formats import *  # noqa: E402,F401,F403
from hostile.cases_files import gen_gguf, gen_safetensors, gen_config, gen_processor  # noqa: E402
from hostile.cases_inputs import gen_tokenizer, gen_image, gen_prompt, gen_mmproj, gen_cli  # noqa: E402


def generate(out: Path):
    out.mkdir(parents=True, exist_ok=True)
    c = Corpus(out)
    t0 = time.time()
    for gen in (gen_gguf, gen_safetensors, gen_config, gen_processor, gen_tokenizer, gen_image, gen_prompt, gen_mmproj,
                gen_cli):
        gen(c)
    write_json(out / "manifest.json", c.cases)
    print(f"{len(c.cases)} cases in {out} ({time.time() - t0:.1f}s)", file=sys.stderr)
    return c.cases


# ----------------------------------------------------------------------------------------------
# The runner


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    os.setsid()


def expand(arg: str, case_dir: Path) -> str:
    return arg.replace("{case}", str(case_dir)).replace("{repo}", str(REPO))


def run_case(binary: str, out: Path, case):
    case_dir = out / case["name"]
    args = [expand(a, case_dir) for a in case["args"]]
    t0 = time.time()
    env = {k: v for k, v in os.environ.items() if k not in ("RUST_BACKTRACE", "RUST_LIB_BACKTRACE")}
    proc = subprocess.Popen([binary] + args, cwd=str(REPO), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=limit_memory, env=env)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = proc.communicate()
    elapsed = time.time() - t0
    err = stderr.decode("utf-8", "replace")
    out_text = stdout.decode("utf-8", "replace")
    return judge(case, proc.returncode, err, timed_out, case_dir, out_text), proc.returncode, err, elapsed


CLAP_HINT = "For more information, try '--help'."


def judge(case, rc, err, timed_out, case_dir: Path, out: str = ""):
    """None when the case passes, else why not. The words are looked for (in stderr's line for
    an error, on stdout for success) with the case's folder and the repository's path taken out,
    so that a case's name (in its folder's path) cannot supply them."""
    lines = [l for l in err.splitlines() if l.strip()]
    if timed_out:
        return f"timeout after {TIMEOUT_S}s"
    if rc is not None and rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = str(-rc)
        return f"killed by signal {name}" + (" (panicked)" if "panicked" in err else "")
    if "panicked" in err:
        return f"panicked (exit {rc})"
    if case["expect"] == "ok":
        if rc != 0:
            return f"exit {rc}, expected 0"
        text = out.replace(str(case_dir), "{case}").replace(str(REPO), "{repo}").lower()
        missing = [w for w in case["words"] if w.lower() not in text]
        return "stdout lacks " + ", ".join(repr(w) for w in missing) if missing else None
    why = []
    # A flag's value refused by the argument parser (clap): its usage-error status 2 and its
    # pointer to --help after the one line.
    if rc == 2 and len(lines) == 2 and lines[1] == CLAP_HINT:
        rc, lines = 1, lines[:1]
    if rc != 1:
        why.append(f"exit {rc}, expected 1")
    if len(lines) != 1:
        why.append(f"{len(lines)} stderr lines, expected 1")
    if not lines or not lines[0].startswith("error:"):
        why.append("stderr does not start with 'error:'")
    text = err.replace(str(case_dir), "{case}").replace(str(REPO), "{repo}").lower()
    missing = [w for w in case["words"] if w.lower() not in text]
    if missing:
        why.append("missing words " + ", ".join(repr(w) for w in missing))
    return "; ".join(why) or None


def summary_of(err: str, n=200) -> str:
    s = " | ".join(l.strip() for l in err.splitlines() if l.strip())
    return s[:n]


def run(binary: str, out: Path, jobs: int, only: str = None, verbose: bool = False) -> int:
    binary = str(Path(binary).resolve())
    if not (out / "manifest.json").exists():
        generate(out)
    cases = read_json(out / "manifest.json")
    if only:
        cases = [c for c in cases if only in c["name"] or only == c["class"]]
    counts = {}
    failures = 0
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_case, binary, out, case) for case in cases]
        for case, fut in zip(cases, futures):
            why, rc, err, elapsed = fut.result()
            total, passed = counts.get(case["class"], (0, 0))
            counts[case["class"]] = (total + 1, passed + (why is None))
            verdict = "PASS" if why is None else "FAIL: " + why
            line = f"{case['class']:<12} {case['name']:<44} {verdict}"
            if why is not None or verbose:
                line += f"\n{'':<13}exit {rc}, {elapsed:.1f}s, stderr: {summary_of(err)!r}"
            failures += why is not None
            print(line, flush=True)
    print()
    print(f"{'class':<12} {'cases':>5} {'passed':>6}")
    for cls, (total, passed) in counts.items():
        print(f"{cls:<12} {total:>5} {passed:>6}")
    total = sum(t for t, _ in counts.values())
    print(f"{'all':<12} {total:>5} {total - failures:>6}   ({time.time() - t0:.0f}s)")
    return 0 if failures == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write the corpus and its manifest.json")
    g.add_argument("outdir", type=Path)
    r = sub.add_parser("run", help="generate (if needed) and run every case")
    r.add_argument("binary")
    r.add_argument("outdir", type=Path)
    r.add_argument("--jobs", type=int, default=4, help="cases run at once (default 4)")
    r.add_argument("--only", help="run only the cases whose name contains this (or of this class)")
    r.add_argument("-v", "--verbose", action="store_true", help="show stderr of passing cases too")
    a = ap.parse_args()
    if a.cmd == "generate":
        generate(a.outdir.resolve())
        return 0
    return run(a.binary, a.outdir.resolve(), a.jobs, a.only, a.verbose)


if __name__ == "__main__":
    sys.exit(main())
