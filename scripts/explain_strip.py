"""Lays the pictures `tessera explain` writes side by side, each under its answer token, into one
PNG for the README (docs/explain_three_shapes.png).

Dev-time only:
  tessera explain --image models/shapes-vlm/examples/three_shapes.png --prompt "Describe the image." --out explain/
  /work/py/bin/python scripts/explain_strip.py explain/ docs/explain_three_shapes.png --content-words
"""
import argparse
import json
import os

from PIL import Image, ImageDraw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", help="the --out folder of tessera explain (attention.json + token_NN.png)")
    ap.add_argument("out", help="the PNG to write")
    ap.add_argument("--content-words", action="store_true",
                    help="leave out punctuation and the words a, an, and, the")
    args = ap.parse_args()
    with open(os.path.join(args.folder, "attention.json")) as f:
        attention = json.load(f)
    def content(word):
        return word.isalnum() and word.lower() not in {"a", "an", "and", "the"}

    tokens = [t for t in attention["tokens"] if not args.content_words or content(t["token"].strip())]
    pictures = [Image.open(t["picture"]).convert("RGB") for t in tokens]
    w, h = pictures[0].size
    label, gap = 24, 8
    strip = Image.new("RGB", (len(pictures) * (w + gap) - gap, h + label), "white")
    draw = ImageDraw.Draw(strip)
    for i, (t, p) in enumerate(zip(tokens, pictures)):
        x = i * (w + gap)
        draw.text((x + 4, 6), f"{t['token'].strip()!r}  ({t['image_share']:.2f} on image)", fill="black")
        strip.paste(p, (x, label))
    strip.save(args.out, optimize=True)
    print(f"{args.out}: {len(pictures)} tokens of {attention['answer']!r}")


if __name__ == "__main__":
    main()
