"""Writes the held-out evaluation set and the example images of shapes-vlm.

models/shapes-vlm/eval/images/eval_NNNN.png  300 scenes from seeds data.EVAL_SEED_BASE + NNNN
                                             (disjoint from the training seeds), 64x64 PNG
models/shapes-vlm/eval/questions.jsonl       per image: the caption question, one counting question,
                                             one colour question (if any shape kind appears once)
                                             and every unambiguous position question; fields
                                             image, question, answer, task, seed, and for colour
                                             and position questions named_patches: the patches
                                             (raster order, the model's patch size) covered by the
                                             shape the question names (for `tessera eval --attention`)
models/shapes-vlm/examples/*.png             hand-placed scenes; examples/README.md lists them

Dev-time only: /work/py/bin/python scripts/shapes/make_eval.py
"""
import json
import os
import random
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
from data import Scene, Shape  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDER = os.path.join(ROOT, "models", "shapes-vlm")
N_IMAGES = 300

# name -> (scene at 64x64 coordinates, rendered size). One is rendered at 128x128 so that the
# bicubic resize of preprocessing is exercised.
EXAMPLES = {
    "three_shapes": (Scene(64, "white", (Shape("circle", "red", 14, 32, 8), Shape("square", "blue", 48, 16, 8),
                                         Shape("triangle", "green", 44, 50, 9)), 1), 64),
    "two_circles": (Scene(64, "grey", (Shape("circle", "yellow", 18, 20, 9), Shape("circle", "yellow", 44, 42, 8)),
                          2), 64),
    "one_triangle_top": (Scene(64, "white", (Shape("triangle", "purple", 32, 13, 9),), 3), 64),
    "four_shapes_noise": (Scene(64, "noise", (Shape("cross", "red", 14, 14, 8), Shape("circle", "blue", 48, 14, 8),
                                              Shape("square", "green", 14, 48, 8),
                                              Shape("triangle", "yellow", 48, 48, 8)), 4), 64),
    "crosses_128px": (Scene(64, "grey", (Shape("cross", "blue", 16, 32, 9), Shape("cross", "blue", 48, 20, 8),
                                         Shape("cross", "red", 44, 50, 8)), 5), 128),
}


def scaled(scene, size):
    k = size / scene.size
    shapes = tuple(replace(s, cx=s.cx * k, cy=s.cy * k, half=s.half * k) for s in scene.shapes)
    return replace(scene, size=size, shapes=shapes)


def write_eval():
    images = os.path.join(FOLDER, "eval", "images")
    os.makedirs(images, exist_ok=True)
    rng = random.Random(2024)
    with open(os.path.join(FOLDER, "config.json")) as f:
        patch = json.load(f)["patch_size"]
    rows = []
    for i in range(N_IMAGES):
        seed = data.EVAL_SEED_BASE + i
        scene = data.make_scene(seed)
        name = f"eval_{i:04d}.png"
        data.render(scene).save(os.path.join(images, name), optimize=True)
        qs = data.questions(scene)
        picked = [("caption", *qs["caption"][0]), ("count", *rng.choice(qs["count"]))]
        if qs["color"]:
            picked.append(("color", *rng.choice(qs["color"])))
        picked += [("position", q, a) for q, a in qs["position"]]
        for task, q, a in picked:
            row = {"image": f"images/{name}", "question": q, "answer": a, "task": task, "seed": seed}
            if task in ("color", "position"):
                named = next(s for s in scene.shapes if q.rstrip("?").endswith(f" {s.kind}"))
                row["named_patches"] = data.shape_patches(scene, named, patch)
            rows.append(row)
    with open(os.path.join(FOLDER, "eval", "questions.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    counts = {t: sum(r["task"] == t for r in rows) for t in data.TASKS}
    print(f"eval: {N_IMAGES} images, {len(rows)} questions {counts}")


def write_examples():
    folder = os.path.join(FOLDER, "examples")
    os.makedirs(folder, exist_ok=True)
    lines = ["# shapes-vlm examples", "",
             "Hand-placed scenes (scripts/shapes/make_eval.py) and the answers the data generator gives them.",
             "`crosses_128px.png` is 128x128: preprocessing resizes it (PIL bicubic) to 64x64.", "",
             "| file | size | caption | other questions |", "| --- | --- | --- | --- |"]
    for name, (scene, size) in EXAMPLES.items():
        data.render(scaled(scene, size)).save(os.path.join(folder, f"{name}.png"), optimize=True)
        qs = data.questions(scene)
        others = [f"{q} → {a}" for t in ("color", "position") for q, a in qs[t]]
        others += [f"{q} → {a}" for q, a in qs["count"] if a != "0"]
        lines.append(f"| `{name}.png` | {size}x{size} | {data.caption(scene)} | {'; '.join(others)} |")
    with open(os.path.join(folder, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"examples: {len(EXAMPLES)}")


if __name__ == "__main__":
    write_eval()
    write_examples()
