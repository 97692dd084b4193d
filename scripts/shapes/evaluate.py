"""Per-task greedy exact-match accuracy of the PyTorch shapes-vlm on models/shapes-vlm/eval.

Loads the model, tokenizer and images from disk, renders each question through the prompt frame
(`<|bos|>Question: {question}\\nAnswer:`), decodes greedily up to 32 new tokens or EOS, and compares
the stripped text with the expected answer.

Dev-time only: OMP_NUM_THREADS=1 /work/py/bin/python scripts/shapes/evaluate.py [--model DIR]
               [--predictions FILE.jsonl]
"""
import argparse
import json
import os
import sys
import time

import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as native  # noqa: E402
import text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "shapes-vlm"))
    ap.add_argument("--eval", default=None, help="folder with questions.jsonl (default: MODEL/eval)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--predictions", default=None, help="write every prediction to this jsonl")
    args = ap.parse_args()
    torch.set_num_threads(1)
    eval_dir = args.eval or os.path.join(args.model, "eval")

    model = native.load(args.model)
    txt = text.Text.load(args.model)
    with open(os.path.join(eval_dir, "questions.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    # Same task together: short answers finish in a couple of steps.
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["task"], i))
    preds = [None] * len(rows)
    t0 = time.time()
    for s in range(0, len(order), args.batch):
        idx = order[s:s + args.batch]
        pixels = torch.stack([native.preprocess(Image.open(os.path.join(eval_dir, rows[i]["image"])), model.cfg)
                              for i in idx])
        prompts = [txt.prompt_ids(rows[i]["question"]) for i in idx]
        for i, new in zip(idx, native.greedy(model, pixels, prompts, txt.eos)):
            preds[i] = txt.decode(new)
    tasks = sorted({r["task"] for r in rows}, key=["caption", "count", "color", "position"].index)
    total = 0
    for task in tasks:
        ix = [i for i, r in enumerate(rows) if r["task"] == task]
        ok = sum(preds[i] == rows[i]["answer"] for i in ix)
        total += ok
        print(f"{task:9s} {ok:4d}/{len(ix):4d} = {ok / len(ix):.3f}")
    print(f"{'all':9s} {total:4d}/{len(rows):4d} = {total / len(rows):.3f}   ({time.time() - t0:.0f}s)")
    wrong = [i for i in range(len(rows)) if preds[i] != rows[i]["answer"]]
    for i in wrong[:15]:
        r = rows[i]
        print(f"  wrong: {r['image']} {r['question']!r} expected {r['answer']!r} got {preds[i]!r}")
    if args.predictions:
        with open(args.predictions, "w") as f:
            for r, p in zip(rows, preds):
                f.write(json.dumps({**r, "prediction": p}) + "\n")


if __name__ == "__main__":
    main()
