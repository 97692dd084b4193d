"""Procedural shapes scenes and their questions, for the shapes-vlm demo model.

A scene is 1-4 non-overlapping shapes (circle, square, triangle, cross) in five colours on a white,
light-grey or lightly noisy background, drawn with PIL at 4x and downsampled (antialiased). Every
scene is a pure function of its integer seed, so the training stream, the held-out set and the
files under models/shapes-vlm/eval are reproducible.

Tasks (question -> short answer):
  caption   "Describe the image."            -> "two red circles and a blue square"
  count     "How many circles are there?"    -> "2"   (0 when absent; also "How many shapes ...")
  color     "What color is the triangle?"    -> "green"   (only when exactly one triangle)
  position  "Where is the square?"           -> "left" | "right" | "top" | "bottom"
            (only when exactly one square and its centre's offset from the image centre is
            unambiguous: the dominant axis is at least twice the other and at least 10 px)

Caption order: groups of (shape, colour), sorted by SHAPES order then COLORS order, counted with
"a", "two", "three", "four", joined as "x", "x and y", "x, y and z".

Seeds: training uses [0, TRAIN_SEEDS), the held-out set uses EVAL_SEED_BASE + i (disjoint).
"""
import random
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

SHAPES = ["circle", "square", "triangle", "cross"]
PLURALS = {"circle": "circles", "square": "squares", "triangle": "triangles", "cross": "crosses"}
COLORS = {
    "red": (220, 30, 30),
    "green": (30, 160, 50),
    "blue": (30, 70, 225),
    "yellow": (240, 200, 0),
    "purple": (145, 45, 185),
}
COLOR_NAMES = list(COLORS)
NUMBER_WORDS = {1: "a", 2: "two", 3: "three", 4: "four"}
TASKS = ["caption", "count", "color", "position"]

TRAIN_SEEDS = 1_000_000_000
EVAL_SEED_BASE = 1_000_000_000
SUPERSAMPLE = 4
MIN_HALF, MAX_HALF = 8, 12  # half-extent of a shape's bounding box, in pixels at 64x64
GAP = 2  # minimum empty pixels between two shapes' bounding boxes


@dataclass(frozen=True)
class Shape:
    kind: str
    color: str
    cx: float  # centre, pixels from the left
    cy: float  # centre, pixels from the top
    half: float  # half of the bounding box side


@dataclass(frozen=True)
class Scene:
    size: int
    background: str  # "white" | "grey" | "noise"
    shapes: tuple
    seed: int


def make_scene(seed, size=64):
    """The scene for `seed`: 1-4 shapes placed by rejection sampling, no two boxes closer than GAP."""
    rng = random.Random(seed)
    n = rng.randint(1, 4)
    background = rng.choice(["white", "grey", "noise"])
    scale = size / 64
    shapes = []
    while len(shapes) < n:
        half = rng.uniform(MIN_HALF, MAX_HALF) * scale
        lo, hi = half + 1, size - 1 - half
        cx, cy = rng.uniform(lo, hi), rng.uniform(lo, hi)
        ok = all(abs(cx - s.cx) >= half + s.half + GAP or abs(cy - s.cy) >= half + s.half + GAP
                 for s in shapes)
        if ok:
            shapes.append(Shape(rng.choice(SHAPES), rng.choice(COLOR_NAMES), cx, cy, half))
    return Scene(size, background, tuple(shapes), seed)


def render(scene):
    """The scene as an RGB PIL image of scene.size x scene.size."""
    rng = np.random.default_rng(scene.seed)
    big = scene.size * SUPERSAMPLE
    if scene.background == "white":
        bg = np.full((scene.size, scene.size, 1), 255.0)
    elif scene.background == "grey":
        bg = np.full((scene.size, scene.size, 1), float(rng.integers(200, 236)))
    else:
        bg = rng.integers(215, 250) + rng.normal(0, 8, size=(scene.size, scene.size, 1))
    bg = np.repeat(np.clip(np.round(bg), 0, 255).astype(np.uint8), 3, axis=-1)
    # Background at the final resolution, upsampled so that the downsample gives it back exactly.
    canvas = Image.fromarray(bg).resize((big, big), Image.NEAREST)
    draw = ImageDraw.Draw(canvas)
    for s in scene.shapes:
        jitter = rng.integers(-12, 13, size=3)
        fill = tuple(int(v) for v in np.clip(np.array(COLORS[s.color]) + jitter, 0, 255))
        _draw_shape(draw, s, fill)
    image = canvas.resize((scene.size, scene.size), Image.BOX)
    return image


def _draw_shape(draw, s, fill, k=SUPERSAMPLE):
    cx, cy, h = s.cx * k, s.cy * k, s.half * k
    if s.kind == "circle":
        draw.ellipse([cx - h, cy - h, cx + h, cy + h], fill=fill)
    elif s.kind == "square":
        q = 0.85 * h  # a square of the same visual weight as the circle
        draw.rectangle([cx - q, cy - q, cx + q, cy + q], fill=fill)
    elif s.kind == "triangle":
        draw.polygon([(cx, cy - h), (cx + h, cy + 0.8 * h), (cx - h, cy + 0.8 * h)], fill=fill)
    elif s.kind == "cross":
        t = 0.33 * h
        draw.rectangle([cx - h, cy - t, cx + h, cy + t], fill=fill)
        draw.rectangle([cx - t, cy - h, cx + t, cy + h], fill=fill)


def _coverage(scene, shape, patch):
    """(cells,) pixels' worth of `shape` (drawn alone, as render draws it) in each patch x patch
    cell, raster order."""
    big = scene.size * SUPERSAMPLE
    canvas = Image.new("L", (big, big), 0)
    _draw_shape(ImageDraw.Draw(canvas), shape, 255)
    cover = np.asarray(canvas, dtype=np.float64) / 255.0 / SUPERSAMPLE**2  # pixels' worth per subpixel
    g = scene.size // patch
    return cover.reshape(g, patch * SUPERSAMPLE, g, patch * SUPERSAMPLE).sum(axis=(1, 3)).flatten()


def shape_patches(scene, shape, patch):
    """Raster indices of the cells that hold at least half a pixel's worth of `shape`."""
    return [int(i) for i in np.flatnonzero(_coverage(scene, shape, patch) >= 0.5)]


N_PATCH_CLASSES = 1 + len(SHAPES) * len(COLORS)


def patch_classes(scene, patch, min_pixels=4.0):
    """(cells,) per-cell class for the training script's auxiliary loss: 0 for background, else
    1 + kind * len(COLORS) + colour of the shape covering most of the cell (at least `min_pixels`)."""
    if not scene.shapes:
        return np.zeros((scene.size // patch) ** 2, dtype=np.int64)
    cover = np.stack([_coverage(scene, s, patch) for s in scene.shapes])  # (shapes, cells)
    best = cover.argmax(0)
    classes = np.array([1 + SHAPES.index(s.kind) * len(COLORS) + COLOR_NAMES.index(s.color)
                        for s in scene.shapes])[best]
    return np.where(cover.max(0) >= min_pixels, classes, 0)


def caption(scene):
    counts = {}
    for s in scene.shapes:
        counts[(s.kind, s.color)] = counts.get((s.kind, s.color), 0) + 1
    keys = sorted(counts, key=lambda k: (SHAPES.index(k[0]), COLOR_NAMES.index(k[1])))
    parts = [f"{NUMBER_WORDS[counts[k]]} {k[1]} {k[0] if counts[k] == 1 else PLURALS[k[0]]}" for k in keys]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def position(scene, shape):
    """'left'/'right'/'top'/'bottom' for an unambiguous offset from the centre, else None."""
    c = scene.size / 2
    dx, dy = shape.cx - c, shape.cy - c
    adx, ady = abs(dx), abs(dy)
    margin = 10 * scene.size / 64
    if adx >= 2 * ady and adx >= margin:
        return "left" if dx < 0 else "right"
    if ady >= 2 * adx and ady >= margin:
        return "top" if dy < 0 else "bottom"
    return None


def questions(scene):
    """Every question the scene supports, as {task: [(question, answer), ...]}."""
    kinds = [s.kind for s in scene.shapes]
    out = {t: [] for t in TASKS}
    out["caption"].append(("Describe the image.", caption(scene)))
    for kind in SHAPES:
        out["count"].append((f"How many {PLURALS[kind]} are there?", str(kinds.count(kind))))
    out["count"].append(("How many shapes are there?", str(len(kinds))))
    for s in scene.shapes:
        if kinds.count(s.kind) == 1:
            out["color"].append((f"What color is the {s.kind}?", s.color))
            where = position(scene, s)
            if where is not None:
                out["position"].append((f"Where is the {s.kind}?", where))
    return out


def training_questions(scene, rng, limit):
    """The (task, question, answer) rows trained on for one scene, at most `limit` of them: the
    caption, the count of every kind present, the total count, ONE absent kind (counting every
    absent kind would make "0" the answer to most counting questions, a prior a model settles into
    before it learns to tell shapes apart), and every colour and position question."""
    qs = questions(scene)
    present = {s.kind for s in scene.shapes}
    absent = [k for k in SHAPES if k not in present]
    counts = [(q, a) for q, a in qs["count"] if a != "0"]
    if absent:
        kind = rng.choice(absent)
        counts.append((f"How many {PLURALS[kind]} are there?", "0"))
    rows = [("caption", *qs["caption"][0])] + [("count", q, a) for q, a in counts]
    rows += [(t, q, a) for t in ("color", "position") for q, a in qs[t]]
    rng.shuffle(rows)
    return rows[:limit]
