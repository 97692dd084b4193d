"""Trains shapes-vlm on CPU from scenes generated on the fly, and saves it with its tokenizer and
HF-style configs to models/shapes-vlm/.

Each training row is one image and K questions about it, packed as
[image tokens][q1 prompt+target][q2 prompt+target]...: every text block sees the image and itself
only, and its positions restart at num_patches, so the row equals K separate causal sequences
[image][prompt][target] while the image tokens are computed once. Loss on target tokens, plus an
auxiliary loss (training only, not in the checkpoint): a linear probe on each image token's final
hidden state names the shape (kind and colour) covering that patch. Without it the questions alone
teach the model to tell shapes apart only slowly and unreliably (a plateau near 60% counting that
some seeds never leave within an hour of CPU); with it, every patch is a labelled example.
Validation: answer exact match under teacher forcing (equal to greedy exact match: greedy decoding
produces the target iff every next-token argmax along it is right, EOS included).

The defaults are the shipped model's recipe (1800 steps of 32 images x up to 8 questions, about
35 minutes with 2 threads on the 2-core development machine).

Dev-time only: /work/py/bin/python scripts/shapes/train.py [--steps N] [--bench] [--device cuda]
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
    """items: [(pixels (C, H, W), [(prompt_ids, target_ids), ...], patch classes (n,)), ...] -> a
    batch of packed rows: pixels (b, C, H, W), ids (b, t), positions (b, n + t),
    allowed (b, 1, n + t, n + t), labels (b, t), patch classes (b, n)."""
    n = cfg.num_patches
    rows = []
    for _, qas, _ in items:
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
    pixels = torch.stack([px for px, _, _ in items])
    classes = torch.stack([torch.as_tensor(c) for _, _, c in items])
    return pixels, ids, positions, allowed[:, None], labels, classes


def make_items(cfg, txt, seeds, per_image, rng):
    items, meta = [], []
    for seed in seeds:
        scene = data.make_scene(seed, cfg.image_size)
        pixels = native.preprocess(data.render(scene), cfg)
        classes = data.patch_classes(scene, cfg.patch_size)
        qas = []
        for task, q, a in data.training_questions(scene, rng, per_image):
            qas.append((txt.prompt_ids(q), txt.target_ids(a)))
            meta.append((task, q, a))
        items.append((pixels, qas, classes))
    return items, meta


def exact_match(model, batch, eos, device="cpu"):
    """Per question (in packing order): True iff every target token is the argmax."""
    pixels, ids, positions, allowed, labels, _ = batch
    with torch.no_grad():
        pred = model(*(x.to(device) for x in (pixels, ids, positions, allowed))).argmax(-1).cpu()  # (b, t)
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


def validate(model, cfg, txt, n_images=160, device="cpu"):
    rng = random.Random(0)
    model.eval()
    per_task = {t: [] for t in data.TASKS}
    for s in range(0, n_images, 32):
        seeds = [VAL_SEED_BASE + i for i in range(s, s + 32)]
        items, meta = make_items(cfg, txt, seeds, 4, rng)
        for (task, _, _), ok in zip(meta, exact_match(model, pack(cfg, txt, items), txt.eos, device)):
            per_task[task].append(ok)
    model.train()
    return {t: sum(v) / max(1, len(v)) for t, v in per_task.items()}


class Batches(torch.utils.data.IterableDataset):
    """The training stream: batch `step` is a pure function of `step` (its own RNG), so the stream
    is the same whether one process or several workers draw it."""

    def __init__(self, cfg, txt, args, steps):
        self.cfg, self.txt, self.args, self.steps = cfg, txt, args, steps

    def batch(self, step):
        a = self.args
        rng = random.Random(1_000_003 * step + 1)
        seeds = [rng.randrange(data.TRAIN_SEEDS) for _ in range(a.batch)]
        items, _ = make_items(self.cfg, self.txt, seeds, a.per_image, rng)
        return pack(self.cfg, self.txt, items)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        k, n = (info.id, info.num_workers) if info else (0, 1)
        for step in range(k, self.steps, n):
            yield self.batch(step)


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
    ap.add_argument("--steps", type=int, default=1800)
    ap.add_argument("--batch", type=int, default=32, help="images per step")
    ap.add_argument("--per-image", type=int, default=8, help="questions per image (at most)")
    ap.add_argument("--lr", type=float, default=7e-4)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--patch", type=int, default=8, help="patch size (64 / patch must be whole)")
    ap.add_argument("--eval-every", type=int, default=300)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--aux-weight", type=float, default=0.5, help="weight of the per-patch shape loss (0: off)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the weight initialisation")
    ap.add_argument("--device", default="cpu", help="cpu (the shipped model's) or cuda, for quick experiments")
    ap.add_argument("--workers", type=int, default=1, help="processes drawing batches ahead of the trainer")
    ap.add_argument("--val-images", type=int, default=160)
    ap.add_argument("--bench", action="store_true", help="time 10 steps and exit")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    os.makedirs(args.out, exist_ok=True)
    tok = text.train_tokenizer()
    txt = text.Text(tok)
    assert (txt.bos, txt.eos, txt.pad) == (0, 1, 2)
    cfg = native.Config(hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                        num_hidden_layers=args.layers, head_dim=args.hidden // 4, patch_size=args.patch,
                        max_position_embeddings=max(256, 2 * (64 // args.patch) ** 2),
                        vocab_size=tok.get_vocab_size())
    model = native.TesseraNative(cfg)
    native.init_weights(model, seed=args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params} ({n_params * 4 / 1e6:.2f} MB f32)", flush=True)

    # Training only, not saved: a linear probe reading each image token's final hidden state,
    # trained to name the shape (kind and colour) covering that patch. Its loss gives every patch
    # a direct signal to recognise shapes, which the question answers alone give only slowly.
    patch_probe = torch.nn.Linear(cfg.hidden_size, data.N_PATCH_CLASSES)
    named = list(model.named_parameters()) + [(f"probe.{n}", p) for n, p in patch_probe.named_parameters()]
    decay = [p for n, p in named if p.dim() == 2 and n != "image_pos_embed"]
    rest = [p for n, p in named if not (p.dim() == 2 and n != "image_pos_embed")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.98))
    steps = 10 if args.bench else args.steps

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, steps - args.warmup)
        return args.lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * frac)))

    model.to(args.device)
    patch_probe.to(args.device)
    # Workers take batches step % workers == k; the loader interleaves them back in step order.
    stream = iter(torch.utils.data.DataLoader(Batches(cfg, txt, args, steps), batch_size=None,
                                              num_workers=args.workers, prefetch_factor=4 if args.workers else None))
    t0 = time.time()
    t_data = 0.0
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        td = time.time()
        pixels, ids, positions, allowed, labels, classes = (x.to(args.device) for x in next(stream))
        t_data += time.time() - td
        h = model.hidden(pixels, ids, positions, allowed)  # (b, n + t, hidden)
        n = cfg.num_patches
        logits = h[:, n:] @ model.model.embed_tokens.weight.T  # (b, t, vocab)
        probe = patch_probe(h[:, :n])  # (b, n, classes)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        if args.aux_weight > 0:
            aux = F.cross_entropy(probe.reshape(-1, probe.shape[-1]), classes.reshape(-1))
            loss = loss + args.aux_weight * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in named], 1.0)
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            el = time.time() - t0
            print(f"step {step} loss {loss.item():.4f} aux {aux.item() if args.aux_weight > 0 else 0:.4f} lr {lr_at(step):.2e} elapsed {el:.0f}s "
                  f"({el / (step + 1):.2f}s/step, data {t_data / (step + 1):.2f}s)", flush=True)
        if not args.bench and ((step + 1) % args.eval_every == 0 or step == steps - 1):
            acc = validate(model, cfg, txt, args.val_images, args.device)
            print(f"step {step} val " + " ".join(f"{k} {v:.3f}" for k, v in acc.items()), flush=True)
            native.save(model, args.out)
    if args.bench:
        return
    model.cpu()
    native.save(model, args.out)
    text.save_tokenizer(tok, args.out)
    write_configs(cfg, args.out)
    print(f"trained {steps} steps in {time.time() - t0:.0f}s; saved to {args.out}", flush=True)


if __name__ == "__main__":
    main()
