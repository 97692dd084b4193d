"""Writes models/shapes-vlm/reference.json: PyTorch reference values for the Rust side, computed
from the saved weights, tokenizer and images reloaded from disk.

Per item (3 eval questions, a caption, a count and a position, on three images with noisy, grey
and white backgrounds; plus the 128x128 example that preprocessing resizes with PIL bicubic):
  image, question, prompt (chat-template text), prompt_ids
  pixel_values: shape (C, H, W), first16 (CHW flattened order) and sum (float64 over float32 values)
  image_token0_first8: the first 8 values of image token 0 (patch_embed + image_pos_embed)
  last_logits: the full vocab row of logits at the last prompt position (6 decimals)
  text_top5: for every text position of the prompt, the top 5 [id, logit] (6 decimals)
  greedy_ids (EOS included when produced), answer (decoded, stripped), expected (ground truth)

Dev-time only: OMP_NUM_THREADS=1 /work/py/bin/python scripts/shapes/make_fixtures.py
"""
import json
import os
import sys

import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import model as native  # noqa: E402
import text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = os.path.join(ROOT, "models", "shapes-vlm")


def pick_eval_items():
    """A caption on a noisy background, a count >= 2 on a grey one, a position on a white one: three
    different images."""
    with open(os.path.join(FOLDER, "eval", "questions.jsonl")) as f:
        rows = [json.loads(line) for line in f]

    def first(task, background, ok):
        return next(r for r in rows if r["task"] == task and ok(r["answer"])
                    and data.make_scene(r["seed"]).background == background)

    picked = [first("caption", "noise", lambda a: "," in a), first("count", "grey", lambda a: int(a) >= 2),
              first("position", "white", lambda a: True)]
    assert len({r["image"] for r in picked}) == 3
    return [{"image": "eval/" + r["image"], "question": r["question"], "expected": r["answer"]} for r in picked]


def r6(x):
    return round(float(x), 6)


def main():
    torch.set_num_threads(1)
    model = native.load(FOLDER)
    txt = text.Text.load(FOLDER)
    items = pick_eval_items() + [{"image": "examples/crosses_128px.png", "question": "How many crosses are there?",
                                  "expected": "3"}]
    out = {"model": "shapes-vlm", "num_image_tokens": model.cfg.num_patches,
           "note": "text position k of the prompt is sequence position num_image_tokens + k", "items": []}
    for it in items:
        image = Image.open(os.path.join(FOLDER, it["image"]))
        pixels = native.preprocess(image, model.cfg)  # (C, H, W)
        ids = txt.prompt_ids(it["question"])
        with torch.no_grad():
            logits = model(pixels[None], torch.tensor([ids]))[0]  # (t, vocab)
            token0 = model.embed_image(pixels[None])[0, 0, :8]
        top = logits.topk(5, dim=-1)
        greedy_ids = native.greedy(model, pixels[None], [ids], txt.eos)[0]
        out["items"].append({
            "image": it["image"],
            "image_size": list(image.size),
            "question": it["question"],
            "prompt": text.prompt(it["question"]),
            "prompt_ids": ids,
            "pixel_values": {"shape": list(pixels.shape), "first16": [r6(v) for v in pixels.flatten()[:16]],
                             "sum": r6(pixels.double().sum())},
            "image_token0_first8": [r6(v) for v in token0],
            "last_logits": [r6(v) for v in logits[-1]],
            "text_top5": [[[int(i), r6(v)] for i, v in zip(ix, vals)] for ix, vals in zip(top.indices, top.values)],
            "greedy_ids": greedy_ids,
            "answer": txt.decode(greedy_ids),
            "expected": it["expected"],
        })
        print(f"{it['image']}: {it['question']!r} -> {out['items'][-1]['answer']!r} (expected {it['expected']!r})")
    with open(os.path.join(FOLDER, "reference.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote reference.json ({os.path.getsize(os.path.join(FOLDER, 'reference.json'))} bytes)")


if __name__ == "__main__":
    main()
