"""Trains shapes-vlm on CPU (one thread) from scenes generated on the fly, and saves it with its
tokenizer and HF-style configs to models/shapes-vlm/.

Each training row is one image and K questions about it, packed as
[image tokens][q1 prompt+target][q2 prompt+target]...: every text block sees the image and itself
only, and its positions restart at num_patches, so the row equals K separate causal sequences
[image][prompt][target] while the image tokens are computed once. Loss only on target tokens.
Validation: answer exact match under teacher forcing (equal to greedy exact match: greedy decoding
produces the target iff every next-token argmax along it is right, EOS included).

Dev-time only: OMP_NUM_THREADS=1 /work/py/bin/python scripts/shapes/train.py [--steps N] [--bench]
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import model as native  # noqa: E402
import text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "models", "shapes-vlm")
VAL_SEED_BASE = data.EVAL_SEED_BASE + 500_000  # held out, disjoint from the eval files' seeds


def pack(cfg, txt, items):
    """items: [(pixels (C, H, W), [(prompt_ids, target_ids), ...]), ...] -> a batch of packed rows:
    pixels (b, C, H, W), ids (b, t), positions (b, n + t), allowed (b, 1, n + t, n + t), labels (b, t)."""
    n = cfg.num_patches
    rows = []
    for _, qas in items:
        ids, pos, block, labels = [], [], [], []
        for k, (p, a) in enumerate(qas):
            seq = p + a
            ids += seq
            pos += list(range(n, n + len(seq)))
            block += [k] * len(seq)
            # Position i predicts token i+1; only tokens of the target are predicted.
            labels += [-100] * (len(p) - 1) + a + [-100]
        rows.append((ids, pos, block, labels))
    t = max(len(r[0]) for r in rows)
    b = len(items)
    ids = torch.full((b, t), txt.pad, dtype=torch.long)
    positions = torch.full((b, n + t), n, dtype=torch.long)
    positions[:, :n] = torch.arange(n)
    labels = torch.full((b, t), -100, dtype=torch.long)
    blocks = torch.full((b, n + t), -2, dtype=torch.long)  # -1: image, -2: padding
    blocks[:, :n] = -1
    for i, (r_ids, r_pos, r_block, r_labels) in enumerate(rows):
        ids[i, :len(r_ids)] = torch.tensor(r_ids)
        positions[i, n:n + len(r_pos)] = torch.tensor(r_pos)
        blocks[i, n:n + len(r_block)] = torch.tensor(r_block)
        labels[i, :len(r_labels)] = torch.tensor(r_labels)
    causal = native.causal_mask(n + t)[0, 0]  # (n+t, n+t)
    same = blocks[:, :, None] == blocks[:, None, :]  # (b, n+t, n+t)
    to_image = (blocks[:, None, :] == -1).expand(b, n + t, n + t)
    allowed = (causal & (same | to_image)) | torch.eye(n + t, dtype=torch.bool)  # padding sees itself
    pixels = torch.stack([px for px, _ in items])
    return pixels, ids, positions, allowed[:, None], labels


def make_items(cfg, txt, seeds, per_image, rng):
    items, meta = [], []
    for seed in seeds:
        scene = data.make_scene(seed, cfg.image_size)
        pixels = native.preprocess(data.render(scene), cfg)
        qas, seen = [], set()
        for _ in range(per_image * 4):
            task, q, a = data.sample_question(scene, rng)
            if q in seen:
                continue
            seen.add(q)
            qas.append((txt.prompt_ids(q), txt.target_ids(a)))
            meta.append((task, q, a))
            if len(qas) == per_image:
                break
        items.append((pixels, qas))
    return items, meta


def exact_match(model, batch, eos):
    """Per question (in packing order): True iff every target token is the argmax."""
    pixels, ids, positions, allowed, labels = batch
    with torch.no_grad():
        pred = model(pixels, ids, positions, allowed).argmax(-1)  # (b, t)
    out = []
    for i in range(ids.shape[0]):
        mask = labels[i] != -100
        ok = pred[i][mask] == labels[i][mask]
        # Split the row's target tokens back into questions: a target ends at each EOS label.
        ends = (labels[i][mask] == eos).nonzero().flatten().tolist()
        start = 0
        for e in ends:
            out.append(bool(ok[start:e + 1].all()))
            start = e + 1
    return out


def validate(model, cfg, txt, n_images=160):
    rng = random.Random(0)
    model.eval()
    per_task = {t: [] for t in data.TASKS}
    for s in range(0, n_images, 32):
        seeds = [VAL_SEED_BASE + i for i in range(s, s + 32)]
        items, meta = make_items(cfg, txt, seeds, 4, rng)
        for (task, _, _), ok in zip(meta, exact_match(model, pack(cfg, txt, items), txt.eos)):
            per_task[task].append(ok)
    model.train()
    return {t: sum(v) / max(1, len(v)) for t, v in per_task.items()}


def write_configs(cfg, folder):
    gen = {"do_sample": False, "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
           "pad_token_id": cfg.pad_token_id, "max_new_tokens": 32}
    pre = {"image_processor_type": "TesseraNativeImageProcessor", "do_convert_rgb": True, "do_resize": True,
           "size": {"height": cfg.image_size, "width": cfg.image_size}, "resample": 3, "do_rescale": True,
           "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": cfg.image_mean,
           "image_std": cfg.image_std, "patch_size": cfg.patch_size}
    for name, obj in (("generation_config.json", gen), ("preprocessor_config.json", pre)):
        with open(os.path.join(folder, name), "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=24, help="images per step")
    ap.add_argument("--per-image", type=int, default=4, help="questions per image")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--pos-scale", type=float, default=0.0, help="sin-cos init scale of image_pos_embed")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--bench", action="store_true", help="time 10 steps and exit")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    os.makedirs(args.out, exist_ok=True)
    tok = text.train_tokenizer()
    txt = text.Text(tok)
    assert (txt.bos, txt.eos, txt.pad) == (0, 1, 2)
    cfg = native.Config(hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                        num_hidden_layers=args.layers, head_dim=args.hidden // 4,
                        vocab_size=tok.get_vocab_size())
    model = native.TesseraNative(cfg)
    native.init_weights(model, seed=0, pos_scale=args.pos_scale)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params} ({n_params * 4 / 1e6:.2f} MB f32)", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and n != "image_pos_embed"]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and n != "image_pos_embed")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98))
    steps = 10 if args.bench else args.steps

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, steps - args.warmup)
        return args.lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * frac)))

    rng = random.Random(1)
    t0 = time.time()
    t_data = 0.0
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        td = time.time()
        seeds = [rng.randrange(data.TRAIN_SEEDS) for _ in range(args.batch)]
        items, _ = make_items(cfg, txt, seeds, args.per_image, rng)
        pixels, ids, positions, allowed, labels = pack(cfg, txt, items)
        t_data += time.time() - td
        logits = model(pixels, ids, positions, allowed)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            el = time.time() - t0
            print(f"step {step} loss {loss.item():.4f} lr {lr_at(step):.2e} elapsed {el:.0f}s "
                  f"({el / (step + 1):.2f}s/step, data {t_data / (step + 1):.2f}s)", flush=True)
        if not args.bench and ((step + 1) % args.eval_every == 0 or step == steps - 1):
            acc = validate(model, cfg, txt)
            print(f"step {step} val " + " ".join(f"{k} {v:.3f}" for k, v in acc.items()), flush=True)
            native.save(model, args.out)
    if args.bench:
        return
    native.save(model, args.out)
    text.save_tokenizer(tok, args.out)
    write_configs(cfg, args.out)
    print(f"trained {steps} steps in {time.time() - t0:.0f}s; saved to {args.out}", flush=True)


if __name__ == "__main__":
    main()
