"""The comparison of scripts/peers/mtmd_compare.sh: tessera's `generate --json` output against
llama-mtmd-cli's printed answer.

- The texts: llama-mtmd-cli's bytes as UTF-8, each invalid sequence replaced by U+FFFD (tessera's
  JSON text holds the same replacement), the newlines framing its answer dropped; NUL characters
  dropped from tessera's (llama-mtmd-cli prints each token with printf's `%s`, which stops at a
  NUL byte, so a token decoding to NUL prints as nothing).
- Control tokens (`<|im_start|>`, `[IMG]`…): llama-mtmd-cli prints them, tessera's text leaves
  them out; they are taken out of llama-mtmd-cli's text where they are the ones tessera generated
  (its `generated_tokens`), in the same order (SPECIALS.json: mtmd_prompt.py's {text: id}).
- The image: the tokens llama.cpp decodes for it (`n_tokens_batch` in its -v log) must be
  tessera's `image_tokens`.
- Greedy ids agree wherever llama.cpp's top-1 margin exceeds 1.0 (issue 39): llama-mtmd-cli
  prints no logits, so where the texts part, the token at which they part is found from tessera's
  texts after its first k tokens (the first k whose text llama.cpp's does not extend), and
  tessera's top-1 margin there (its log-probabilities: the logit gap) stands for llama.cpp's —
  both computed the same ids up to there. A parting at a margin below 1.0 is a near tie that
  either engine's rounding decides; one above it fails.

Usage: mtmd_texts.py same OURS.json THEIRS.out SPECIALS.json (status 0 when the texts are equal)
       mtmd_texts.py report OURS.json THEIRS.out SPECIALS.json THEIRS.log PREFIXES.jsonl LABEL
"""
import json
import re
import sys

MARGIN = 1.0


def texts(ours_json, theirs_out, specials_json):
    """tessera's answer and llama-mtmd-cli's, with the control tokens llama-mtmd-cli prints (and
    tessera's text leaves out) taken out of its text — where they are the ones tessera generated,
    in the same order; otherwise its text stays as printed, and so differs."""
    ours = json.load(open(ours_json))
    theirs = open(theirs_out, "rb").read().decode("utf-8", "replace").strip("\n")
    specials = json.load(open(specials_json))
    ids = set(specials.values())
    generated = [i for i in ours["generated_tokens"] if i in ids]
    if specials:
        pattern = "|".join(re.escape(t) for t in sorted(specials, key=len, reverse=True))
        printed = [specials[m] for m in re.findall(pattern, theirs)]
        if printed == generated:
            theirs = re.sub(pattern, "", theirs)
    return ours, ours["text"].replace("\0", ""), theirs


def report(ours_json, theirs_out, specials_json, log, prefixes, label):
    ours, mine, theirs = texts(ours_json, theirs_out, specials_json)
    image = sum(int(k) for k in re.findall(r"n_tokens_batch = (\d+)", open(log, errors="replace").read()))
    print(f"{label} llama-mtmd-cli: {json.dumps(theirs, ensure_ascii=False)} ({image} image tokens)")
    print(f"{label} tessera:        {json.dumps(mine, ensure_ascii=False)} ({ours['image_tokens']} image tokens)")
    if image != ours["image_tokens"]:
        print(f"{label}: DIFFERENT image token counts")
        return 1
    if mine == theirs:
        print(f"{label}: same greedy text ({len(ours['generated_tokens'])} tokens)")
        return 0
    runs = [json.loads(line) for line in open(prefixes) if line.strip()]
    at = next(
        (k for k, r in enumerate(runs) if not theirs.startswith(r["text"].replace("\0", "").rstrip("\ufffd"))),
        None,
    )
    if at is None:
        print(f"{label}: DIFFERENT, though each of tessera's prefixes is llama.cpp's (a shorter answer: EOS?)")
        return 1
    top = ours["logprobs"][at]
    margin = top[0]["logprob"] - top[1]["logprob"]
    verdict = "a near tie, allowed" if margin < MARGIN else "DIFFERENT"
    print(f"{label}: the texts part at generated token {at} where tessera's top-1 margin is {margin:.3f}: {verdict}")
    return 0 if margin < MARGIN else 1


if __name__ == "__main__":
    if sys.argv[1] == "same":
        _, a, b = texts(*sys.argv[2:5])
        sys.exit(0 if a == b else 1)
    sys.exit(report(*sys.argv[2:8]))
