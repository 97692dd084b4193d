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

REPO = Path(__file__).resolve().parent.parent
SHAPES = "models/shapes-vlm"
LLAMA = "tests/fixtures/tiny/llama-gqa"
SMOL_GGUF = "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
SHAPES_IMAGE = "{repo}/models/shapes-vlm/examples/three_shapes.png"

TIMEOUT_S = 60
ADDRESS_SPACE = 6 << 30
TOKEN_ROWS_RANDOM = 4096
# The ids above TOKEN_ROWS_RANDOM of the GGUF cases' prompt ("hi" in Smollm2's chat template,
# with its default system message), which get pseudo-random rows too.
PROMPT_IDS = (9690, 5356, 5646, 11173, 34519, 7018, 19712, 8182, 4093, 6004, 9531)

U64_MAX = 2**64 - 1


# ----------------------------------------------------------------------------------------------
# Small helpers


class Corpus:
    """Collects the cases; each case's files go to OUTDIR/<name>/."""

    def __init__(self, out: Path):
        self.out = out
        self.cases = []
        self.names = set()
        self.made = set()

    def dir(self, name: str) -> Path:
        """The case's folder, emptied the first time it is asked for (a second `generate`
        into the same OUTDIR starts afresh)."""
        d = self.out / name
        if name not in self.made:
            self.made.add(name)
            if d.is_symlink() or d.is_file():
                d.unlink()
            elif d.exists():
                shutil.rmtree(d)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def add(self, cls, name, args, expect="error", words=()):
        assert name not in self.names, name
        assert expect in ("error", "ok")
        self.names.add(name)
        self.dir(name)
        self.cases.append({"name": name, "class": cls, "args": [str(a) for a in args],
                           "expect": expect, "words": list(words)})


def link_or_copy(src: Path, dst: Path):
    """Hard link (no disk) where the file system allows it, else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def clone_model(src_rel: str, dst: Path, skip=()):
    """Copies a model folder's files (not subfolders), hard-linking the weights."""
    dst.mkdir(parents=True, exist_ok=True)
    src = REPO / src_rel
    for f in sorted(src.iterdir()):
        if f.is_file() and f.name not in skip and f.name != "reference.json":
            if f.suffix == ".safetensors":
                link_or_copy(f, dst / f.name)
            else:
                shutil.copyfile(f, dst / f.name)
    return dst


def read_json(path: Path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def fresh(path: Path):
    """Unlinks `path` first: never write through a hard link to a repository file."""
    if path.is_symlink() or path.exists():
        path.unlink()


def write_json(path: Path, value):
    fresh(path)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1)


def write_bytes(path: Path, data: bytes):
    fresh(path)
    with open(path, "wb") as f:
        f.write(data)


class Lcg:
    """Deterministic pseudo-random floats in [-scale, scale)."""

    def __init__(self, seed=12345):
        self.state = seed & 0xFFFFFFFF

    def floats(self, n, scale=0.1, center=0.0):
        out = array.array("f", bytes(4 * n))
        s = self.state
        k = 2.0 * scale / 4294967296.0
        for i in range(n):
            s = (1664525 * s + 1013904223) & 0xFFFFFFFF
            out[i] = center - scale + s * k
        self.state = s
        return out


def f32_bytes(values) -> bytes:
    a = values if isinstance(values, array.array) else array.array("f", values)
    if sys.byteorder != "little":
        a = array.array("f", a)
        a.byteswap()
    return a.tobytes()


NAN_F32 = struct.pack("<f", float("nan"))


# ----------------------------------------------------------------------------------------------
# Safetensors


def st_read(path: Path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack_from("<Q", data, 0)[0]
    header = json.loads(data[8:8 + n])
    return header, data[8 + n:]


def st_write(path: Path, header, body: bytes, header_text: bytes = None):
    text = header_text if header_text is not None else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    fresh(path)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(body)


# ----------------------------------------------------------------------------------------------
# GGUF

GT_U8, GT_I8, GT_U16, GT_I16, GT_U32, GT_I32, GT_F32, GT_BOOL, GT_STR, GT_ARR, GT_U64, GT_I64, GT_F64 = range(13)
SCALAR = {GT_U8: "B", GT_I8: "b", GT_U16: "H", GT_I16: "h", GT_U32: "I", GT_I32: "i", GT_F32: "f",
          GT_BOOL: "?", GT_U64: "Q", GT_I64: "q", GT_F64: "d"}


def gstr(s) -> bytes:
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv_val(t, v) -> bytes:
    """Type tag + value of one metadata entry."""
    if t == GT_STR:
        return struct.pack("<I", t) + gstr(v)
    if t == GT_ARR:
        et, items = v
        body = b"".join(gstr(x) if et == GT_STR else struct.pack("<" + SCALAR[et], x) for x in items)
        return struct.pack("<IIQ", GT_ARR, et, len(items)) + body
    return struct.pack("<I", t) + struct.pack("<" + SCALAR[t], v)


def gguf_read_header(path: Path):
    """(kvs as [(key, raw type+value bytes)], tensors as [(name, dims, type, offset)])."""
    with open(path, "rb") as f:
        d = f.read(8 << 20)
    p = 0

    def rd(fmt):
        nonlocal p
        v = struct.unpack_from("<" + fmt, d, p)
        p += struct.calcsize(fmt)
        return v[0]

    def rs():
        nonlocal p
        n = rd("Q")
        s = d[p:p + n]
        p += n
        return s

    def skip_val(t):
        nonlocal p
        if t == GT_STR:
            rs()
        elif t == GT_ARR:
            et, n = rd("I"), rd("Q")
            if et == GT_STR:
                for _ in range(n):
                    rs()
            else:
                p += n * struct.calcsize("<" + SCALAR[et])
        else:
            p += struct.calcsize("<" + SCALAR[t])

    assert d[:4] == b"GGUF", path
    p = 4
    version, n_t, n_kv = rd("I"), rd("Q"), rd("Q")
    assert version == 3, version
    kvs = []
    for _ in range(n_kv):
        key = rs().decode()
        start = p
        t = rd("I")
        skip_val(t)
        kvs.append((key, d[start:p]))
    tensors = []
    for _ in range(n_t):
        name = rs().decode()
        nd = rd("I")
        dims = [rd("Q") for _ in range(nd)]
        tensors.append((name, dims, rd("I"), rd("Q")))
    return kvs, tensors


class Blob:
    """Tensor data: `head` bytes, then zeros (written as a hole) up to `size` bytes."""

    def __init__(self, head: bytes, size: int = None, extra=()):
        self.head = head
        self.size = len(head) if size is None else size
        self.extra = list(extra)  # more (offset, bytes) pieces inside the zeros


class Gguf:
    def __init__(self):
        self.magic = b"GGUF"
        self.version = 3
        self.kvs = []        # [key(bytes|str), raw type+value bytes]
        self.tensors = []    # dicts: name, dims, type, data (Blob), offset (None: packed)
        self.alignment = 32  # the layout used when writing (the key may say otherwise)
        self.n_tensors = None
        self.n_kv = None
        self.patch = None    # fn(header: bytearray, pos: dict) -> None
        self.cut = None      # fn(pos: dict) -> file length

    def copy(self):
        g = Gguf()
        g.magic, g.version, g.alignment = self.magic, self.version, self.alignment
        g.kvs = [list(kv) for kv in self.kvs]
        g.tensors = [dict(t) for t in self.tensors]
        return g

    # metadata
    def index(self, key):
        for i, (k, _) in enumerate(self.kvs):
            if k == key:
                return i
        raise KeyError(key)

    def set(self, key, t, v):
        raw = kv_val(t, v)
        try:
            self.kvs[self.index(key)][1] = raw
        except KeyError:
            self.kvs.append([key, raw])

    def remove(self, key):
        del self.kvs[self.index(key)]

    def tensor(self, name):
        for t in self.tensors:
            if t["name"] == name:
                return t
        raise KeyError(name)

    def write(self, path: Path):
        fresh(path)
        a = self.alignment
        offs, o = [], 0
        for t in self.tensors:
            o += -o % a
            offs.append(o)
            o += t["data"].size
        pos = {"kv": {}, "ti": {}}
        h = bytearray()
        h += self.magic + struct.pack("<I", self.version)
        h += struct.pack("<QQ", len(self.tensors) if self.n_tensors is None else self.n_tensors,
                         len(self.kvs) if self.n_kv is None else self.n_kv)
        for k, raw in self.kvs:
            pos["kv"].setdefault(k, len(h))
            h += gstr(k) + raw
        pos["ti_start"] = len(h)
        for t, off in zip(self.tensors, offs):
            pos["ti"].setdefault(t["name"], len(h))
            h += gstr(t["name"]) + struct.pack("<I", len(t["dims"]))
            h += b"".join(struct.pack("<Q", x) for x in t["dims"])
            h += struct.pack("<IQ", t["type"], off if t.get("offset") is None else t["offset"])
        pos["ti_end"] = len(h)
        h += b"\0" * (-len(h) % a)
        pos["data"] = len(h)
        pos["tensor_data"] = {t["name"]: len(h) + off for t, off in zip(self.tensors, offs)}
        if self.patch:
            self.patch(h, pos)
        with open(path, "wb") as f:
            f.write(h)
            start = f.tell()
            for t, off in zip(self.tensors, offs):
                f.seek(start + off)
                f.write(t["data"].head)
                for at, piece in t["data"].extra:
                    f.seek(start + off + at)
                    f.write(piece)
            end = start + o
            f.truncate(end)
        if self.cut:
            os.truncate(path, self.cut(pos))
        return pos


def tiny_gguf_base() -> Gguf:
    """The Smollm2 GGUF's metadata (tokenizer, template) with a tiny F32 llama: width 64,
    2 blocks, 4 heads (2 KV), MLP 128, head_dim 16, tied output (as in the real file)."""
    kvs, real_tensors = gguf_read_header(REPO / SMOL_GGUF)
    names = [t[0] for t in real_tensors]
    assert "token_embd.weight" in names and "output.weight" not in names
    n_vocab = [t[1] for t in real_tensors if t[0] == "token_embd.weight"][0][1]
    sizes = {
        "llama.block_count": 2, "llama.context_length": 2048, "llama.embedding_length": 64,
        "llama.feed_forward_length": 128, "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2, "llama.rope.dimension_count": 16,
        "general.file_type": 0,
    }
    g = Gguf()
    for k, raw in kvs:
        if k in sizes:
            t = struct.unpack_from("<I", raw)[0]
            raw = kv_val(t, sizes[k])
        g.kvs.append([k, raw])
    rng = Lcg(20240601)
    d, ff, kv = 64, 128, 32

    def add(name, dims, norm=False):
        n = 1
        for x in dims:
            n *= x
        vals = rng.floats(n, 0.05, 1.0) if norm else rng.floats(n, 0.08)
        g.tensors.append({"name": name, "dims": dims, "type": 0, "data": Blob(f32_bytes(vals))})

    for b in range(2):
        p = f"blk.{b}."
        add(p + "attn_norm.weight", [d], True)
        add(p + "ffn_down.weight", [ff, d])
        add(p + "ffn_gate.weight", [d, ff])
        add(p + "ffn_up.weight", [d, ff])
        add(p + "ffn_norm.weight", [d], True)
        add(p + "attn_k.weight", [d, kv])
        add(p + "attn_output.weight", [d, d])
        add(p + "attn_q.weight", [d, d])
        add(p + "attn_v.weight", [d, kv])
    add("output_norm.weight", [d], True)
    head = f32_bytes(rng.floats(d * TOKEN_ROWS_RANDOM, 0.5))
    extra = [(4 * d * i, f32_bytes(rng.floats(d, 0.5))) for i in PROMPT_IDS if TOKEN_ROWS_RANDOM <= i < n_vocab]
    g.tensors.append({"name": "token_embd.weight", "dims": [d, n_vocab], "type": 0,
                      "data": Blob(head, 4 * d * n_vocab, extra)})
    return g


# ----------------------------------------------------------------------------------------------
# Images


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width, height, depth, color, rows: bytes = None, plte: bytes = None, idat: bytes = None) -> bytes:
    """A PNG; `rows`: the filtered scanlines (each with its filter byte)."""
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0))
    if plte:
        out += png_chunk(b"PLTE", plte)
    out += png_chunk(b"IDAT", idat if idat is not None else zlib.compress(rows, 9))
    return out + png_chunk(b"IEND", b"")


def png_pattern(width, height, channels, depth=8, color=2) -> bytes:
    bpp = channels * depth // 8
    rows = bytearray()
    for y in range(height):
        rows.append(0)
        for x in range(width * bpp):
            rows.append((x * 37 + y * 91) & 0xFF)
    return png(width, height, depth, color, bytes(rows))


def gif_1x1() -> bytes:
    """A 1×1 GIF89a (black), global palette of 2, LZW data: clear, 0, end."""
    return (b"GIF89a" + struct.pack("<HHBBB", 1, 1, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
            + b"," + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00" + b";")


def bmp(width, height) -> bytes:
    rows = b""
    for y in range(height):
        row = bytearray()
        for x in range(width):
            row += bytes(((x * 60) & 255, (y * 60) & 255, 128))
        row += b"\0" * (-len(row) % 4)
        rows += bytes(row)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + 40 + len(rows), 0, 0, 54) + info + rows


def zlib_bomb_png(side: int) -> bytes:
    """side×side 8-bit grayscale of zeros: a few hundred KB that inflate to side² bytes."""
    c = zlib.compressobj(9)
    parts = []
    row = b"\0" * (side + 1)
    chunk = row * max(1, (4 << 20) // len(row))
    n_chunk = len(chunk) // len(row)
    left = side
    while left > 0:
        k = min(left, n_chunk)
        parts.append(c.compress(chunk if k == n_chunk else row * k))
        left -= k
    parts.append(c.flush())
    return png(side, side, 8, 0, idat=b"".join(parts))


# ----------------------------------------------------------------------------------------------
# The cases


def gen_gguf(c: Corpus):
    cls = "gguf"
    base = tiny_gguf_base()
    base_dir = c.dir("gguf-base")
    base.write(base_dir / "model.gguf")
    run = ["generate", "--model", "{case}/model.gguf", "--prompt", "hi", "--max-new-tokens", "4"]
    c.add(cls, "gguf-base", run, "ok")

    def case(name, mutate, words, expect="error", args=run):
        g = base.copy()
        mutate(g)
        g.write(c.dir(name) / "model.gguf")
        c.add(cls, name, args, expect, words)

    def hdr(off, fmt, value):
        def m(g):
            g.patch = lambda h, pos: struct.pack_into("<" + fmt, h, off, value)
        return m

    case("gguf-magic", hdr(0, "4s", b"GGUX"), ["model.gguf", "magic"])
    case("gguf-version-1", hdr(4, "I", 1), ["version", "1"])
    case("gguf-version-999", hdr(4, "I", 999), ["version", "999"])
    case("gguf-n-tensors-max", hdr(8, "Q", U64_MAX), ["tensor", str(U64_MAX)])
    case("gguf-n-tensors-2p40", hdr(8, "Q", 2**40), ["tensor", str(2**40)])
    case("gguf-n-kv-max", hdr(16, "Q", U64_MAX), [str(U64_MAX)])
    case("gguf-n-kv-2p40", hdr(16, "Q", 2**40), [str(2**40)])
    # the first key's length (at byte 24)
    case("gguf-string-len-2p63", hdr(24, "Q", 2**63), [str(2**63)])

    def arr_count(g):
        def p(h, pos):
            at = pos["kv"]["tokenizer.ggml.tokens"] + 8 + len("tokenizer.ggml.tokens") + 8
            struct.pack_into("<Q", h, at, 2**62)
        g.patch = p
    case("gguf-array-count-2p62", arr_count, ["tokenizer.ggml.tokens"])

    def cut(f):
        def m(g):
            g.cut = f
        return m
    case("gguf-truncated-header", cut(lambda pos: 14), ["truncated"])
    case("gguf-truncated-metadata",
         cut(lambda pos: pos["kv"]["tokenizer.ggml.tokens"] + 100000), ["tokenizer.ggml.tokens"])
    case("gguf-truncated-tensor-infos",
         cut(lambda pos: pos["ti"]["blk.1.attn_q.weight"] + 8 + 10), ["truncated"])
    case("gguf-truncated-data",
         cut(lambda pos: pos["tensor_data"]["token_embd.weight"] + 1000), ["token_embd.weight", "truncated"])

    for label, v in (("0", 0), ("3", 3), ("2p31", 2**31)):
        case(f"gguf-alignment-{label}", lambda g, v=v: g.set("general.alignment", GT_U32, v),
             ["general.alignment"])

    def misalign(g):
        g.tensor("blk.0.attn_norm.weight")["offset"] = 4
    case("gguf-offset-misaligned", misalign, ["blk.0.attn_norm.weight"])

    def overlap(g):
        # attn_k (64×32 f32) placed on attn_q's bytes
        def p(h, pos):
            q = pos["tensor_data"]["blk.0.attn_q.weight"] - pos["data"]
            at = pos["ti"]["blk.0.attn_k.weight"] + 8 + len("blk.0.attn_k.weight") + 4 + 16 + 4
            struct.pack_into("<Q", h, at, q)
        g.patch = p
    case("gguf-overlapping-tensors", overlap, ["blk.0.attn_q.weight", "blk.0.attn_k.weight"])

    def past_end(g):
        g.tensor("output_norm.weight")["offset"] = 64 << 20
    case("gguf-tensor-past-end", past_end, ["output_norm.weight"])

    def dims(name, new):
        def m(g):
            g.tensor(name)["dims"] = new
        return m
    case("gguf-ndims-0", dims("blk.0.attn_norm.weight", []), ["blk.0.attn_norm.weight"])
    case("gguf-ndims-9", dims("blk.0.attn_norm.weight", [64, 1, 1, 1, 1, 1, 1, 1, 1]),
         ["blk.0.attn_norm.weight"])
    case("gguf-dims-overflow", dims("blk.0.attn_norm.weight", [2**40, 2**40, 2**40]),
         ["blk.0.attn_norm.weight"])

    def relabel(name, ty):
        def m(g):
            g.tensor(name)["type"] = ty
        return m
    case("gguf-f32-labelled-q8_0", relabel("blk.0.attn_q.weight", 8), ["blk.0.attn_q.weight"])
    case("gguf-unknown-ggml-type", relabel("blk.0.attn_q.weight", 1234), ["blk.0.attn_q.weight", "1234"])

    def dup_tensor(g):
        t = dict(g.tensor("blk.0.attn_q.weight"))
        g.tensors.insert(0, t)
    case("gguf-duplicate-tensor", dup_tensor, ["blk.0.attn_q.weight"])

    def missing_tensor(g):
        g.tensors.remove(g.tensor("blk.1.ffn_up.weight"))
    case("gguf-missing-tensor", missing_tensor, ["blk.1.ffn_up.weight"])

    def dup_key(g):
        g.kvs.append(["llama.context_length", kv_val(GT_U32, 4096)])
    case("gguf-duplicate-key", dup_key, ["llama.context_length"])

    def setter(key, t, v):
        return lambda g: g.set(key, t, v)

    case("gguf-block-count-1-with-blk1", setter("llama.block_count", GT_U32, 1), ["blk.1"])
    case("gguf-context-length-1e10", setter("llama.context_length", GT_U64, 10**10), ["llama.context_length"])
    case("gguf-context-length-2p63", setter("llama.context_length", GT_U64, 2**63), ["llama.context_length"])
    case("gguf-embedding-length-0", setter("llama.embedding_length", GT_U32, 0), ["llama.embedding_length"])
    case("gguf-head-count-0", setter("llama.attention.head_count", GT_U32, 0), ["llama.attention.head_count"])
    case("gguf-head-count-5", setter("llama.attention.head_count", GT_U32, 5), ["llama.attention.head_count"])
    case("gguf-head-count-kv-3", setter("llama.attention.head_count_kv", GT_U32, 3),
         ["llama.attention.head_count_kv"])
    eps = "llama.attention.layer_norm_rms_epsilon"
    case("gguf-rms-eps-nan", setter(eps, GT_F32, float("nan")), [eps])
    case("gguf-rms-eps-negative", setter(eps, GT_F32, -1.0), [eps])
    case("gguf-rms-eps-0", setter(eps, GT_F32, 0.0), [eps])
    case("gguf-rope-freq-base-0", setter("llama.rope.freq_base", GT_F32, 0.0), ["llama.rope.freq_base"])
    case("gguf-rope-freq-base-nan", setter("llama.rope.freq_base", GT_F32, float("nan")), ["llama.rope.freq_base"])
    case("gguf-rope-dimension-count-1000", setter("llama.rope.dimension_count", GT_U32, 1000),
         ["llama.rope.dimension_count"])
    case("gguf-no-token-list", lambda g: g.remove("tokenizer.ggml.tokens"), ["tokenizer.ggml.tokens"])

    def fewer_rows(g):
        t = g.tensor("token_embd.weight")
        t["dims"] = [64, 49000]
        t["data"] = Blob(t["data"].head, 4 * 64 * 49000)
    case("gguf-vocab-ne-embedding-rows", fewer_rows, ["token_embd.weight", "49000", "49152"])

    def zero_rows(g):
        g.remove("tokenizer.ggml.tokens")
        t = g.tensor("token_embd.weight")
        t["dims"] = [64, 0]
        t["data"] = Blob(b"")
    case("gguf-embedding-zero-rows-no-tokens", zero_rows, ["token_embd.weight"])
    case("gguf-bos-id-out-of-range", setter("tokenizer.ggml.bos_token_id", GT_U32, 10**6),
         ["tokenizer.ggml.bos_token_id", "1000000"])
    case("gguf-eos-id-out-of-range", setter("tokenizer.ggml.eos_token_id", GT_U32, 10**6),
         ["tokenizer.ggml.eos_token_id", "1000000"])
    case("gguf-tokenizer-model-unknown", setter("tokenizer.ggml.model", GT_STR, "nonsense-bpe"),
         ["tokenizer.ggml.model", "nonsense-bpe"])
    case("gguf-token-type-short", setter("tokenizer.ggml.token_type", GT_ARR, (GT_I32, [1] * 10)),
         ["tokenizer.ggml.token_type"])
    case("gguf-merges-not-strings", setter("tokenizer.ggml.merges", GT_ARR, (GT_U32, [1, 2, 3])),
         ["tokenizer.ggml.merges"])
    case("gguf-chat-template-loop", setter("tokenizer.chat_template", GT_STR,
                                           "{% for i in range(100000) %}{% for j in range(100000) %}x"
                                           "{% endfor %}{% endfor %}"), ["tokenizer.chat_template"])

    def q8_odd(g):
        t = g.tensor("blk.0.attn_q.weight")
        t["type"], t["dims"] = 8, [40, 64]
    case("gguf-q8_0-dims-not-block-multiple", q8_odd, ["blk.0.attn_q.weight"])
    case("gguf-non-utf8-string", setter("general.name", GT_STR, b"bad \xff\xfe name"), ["general.name"])

    def unknown_type(g):
        i = g.index("general.name")
        g.kvs[i][1] = struct.pack("<I", 99) + g.kvs[i][1][4:]
    case("gguf-unknown-value-type", unknown_type, ["general.name", "99"])
    case("gguf-architecture-nonsense", setter("general.architecture", GT_STR, "nonsense"), ["nonsense"])

    def all_nan(g):
        for t in g.tensors:
            t["data"] = Blob(NAN_F32 * (t["data"].size // 4))
    case("gguf-all-weights-nan", all_nan, ["nan"])


def gen_safetensors(c: Corpus):
    cls = "safetensors"
    run = ["generate", "--model", "{case}", "--prompt", "hi", "--max-new-tokens", "4"]
    src = REPO / LLAMA / "model.safetensors"
    header, body = st_read(src)
    with open(src, "rb") as f:
        raw = f.read()
    norm = "model.norm.weight"

    def case(name, make, words, expect="error"):
        d = clone_model(LLAMA, c.dir(name), skip={"model.safetensors"})
        make(d)
        c.add(cls, name, run, expect, words)

    def with_header(fn, text=None):
        def make(d):
            h = json.loads(json.dumps(header))
            fn(h)
            st_write(d / "model.safetensors", h, body, text)
        return make

    def raw_file(data):
        return lambda d: write_bytes(d / "model.safetensors", data)

    n = struct.unpack_from("<Q", raw)[0]
    case("st-header-len-max", raw_file(struct.pack("<Q", U64_MAX) + raw[8:]), ["model.safetensors"])
    case("st-header-len-past-eof", raw_file(struct.pack("<Q", len(raw) + 1000) + raw[8:]), ["model.safetensors"])
    case("st-header-not-json", raw_file(raw[:8] + b"{not json" + b" " * (n - 9) + raw[8 + n:]), ["model.safetensors"])
    case("st-header-json-array", raw_file(raw[:8] + b"[1, 2, 3]" + b" " * (n - 9) + raw[8 + n:]), ["model.safetensors"])
    case("st-empty-file", raw_file(b""), ["model.safetensors"])

    def set_field(tensor, field, value):
        def fn(h):
            h[tensor][field] = value
        return fn

    case("st-dtype-f128", with_header(set_field(norm, "dtype", "F128")), [norm, "F128"])
    case("st-shape-overflow", with_header(set_field(norm, "shape", [2**62, 2**62, 16])), [norm])
    case("st-offsets-past-eof", with_header(set_field(norm, "data_offsets", [492544, 99999999])), [norm])
    q0, o0 = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight"
    case("st-overlapping-offsets", with_header(set_field(q0, "data_offsets", header[o0]["data_offsets"])), [q0, o0])
    case("st-end-before-begin", with_header(set_field(norm, "data_offsets", [492800, 492544])), [norm])
    case("st-offsets-ne-shape", with_header(set_field(norm, "data_offsets", [492544 - 256, 492800])), [norm])
    case("st-f32-labelled-i32", with_header(set_field(norm, "dtype", "I32")), [norm, "I32"])

    def dup_key(d):
        text = json.dumps(header)
        extra = json.dumps({norm: {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]}})[1:-1]
        text = "{" + extra + ", " + text[1:]
        st_write(d / "model.safetensors", None, body, text.encode())
    case("st-duplicate-key", dup_key, [norm])

    def missing_tensor(h):
        del h[norm]
    # The header no longer names the tensor: what is left to say is that its bytes belong to none.
    case("st-missing-tensor", with_header(missing_tensor), ["model.safetensors", "no tensor"])

    def nan_tensor(d):
        b = bytearray(body)
        lo, hi = header[norm]["data_offsets"]
        b[lo:hi] = NAN_F32 * ((hi - lo) // 4)
        st_write(d / "model.safetensors", header, bytes(b))
    case("st-one-tensor-nan", nan_tensor, ["nan"])
    case("st-all-weights-nan", lambda d: st_write(d / "model.safetensors", header, NAN_F32 * (len(body) // 4)), ["nan"])
    case("st-no-weights", lambda d: None, ["safetensors"])

    shard = "model-00001-of-00001.safetensors"

    def sharded(value_of):
        def make(d):
            link_or_copy(src, d / shard)
            wm = {k: value_of(k) for k in header if k != "__metadata__"}
            write_json(d / "model.safetensors.index.json", {"metadata": {}, "weight_map": wm})
            extra = value_of(None)
            if extra:
                extra(d)
        return make

    case("st-index-values-numbers", sharded(lambda k: 1 if k else None), ["model.safetensors.index.json"])
    case("st-index-values-null", sharded(lambda k: None), ["model.safetensors.index.json"])
    case("st-index-missing-shard",
         sharded(lambda k: ("model-00002-of-00002.safetensors" if k == norm else shard) if k else None),
         ["model-00002-of-00002.safetensors"])
    case("st-index-outside-folder-passwd",
         sharded(lambda k: ("../../../../../../etc/passwd" if k == norm else shard) if k else None),
         ["etc/passwd"])
    # a valid shard, but outside the model's folder: must be refused, not loaded
    outside = c.dir("st-index-outside-target")
    if not (outside / "outside-shard.safetensors").exists():
        link_or_copy(src, outside / "outside-shard.safetensors")
    case("st-index-outside-folder-valid-shard",
         sharded(lambda k: ("../st-index-outside-target/outside-shard.safetensors" if k == norm else shard)
                 if k else None),
         ["outside-shard.safetensors"])
    case("st-index-shard-is-directory",
         sharded(lambda k: ("shard-dir.safetensors" if k == norm else shard) if k
                 else (lambda d: (d / "shard-dir.safetensors").mkdir())),
         ["shard-dir.safetensors"])
    case("st-fifo", lambda d: os.mkfifo(d / "model.safetensors"), ["model.safetensors"])


def gen_config(c: Corpus):
    cls = "config"
    run = ["generate", "--model", "{case}", "--prompt", "hi", "--max-new-tokens", "4"]
    base = read_json(REPO / LLAMA / "config.json")

    def case(name, make, words, src=LLAMA, args=run, expect="error"):
        d = clone_model(src, c.dir(name))
        make(d)
        c.add(cls, name, args, expect, words)

    def edit(**fields):
        def make(d):
            cfg = dict(base)
            for k, v in fields.items():
                if v is DELETE:
                    cfg.pop(k, None)
                else:
                    cfg[k] = v
            write_json(d / "config.json", cfg)
        return make

    case("config-not-json", lambda d: write_bytes(d / "config.json", b"{\"hidden_size\": 64,"), ["config.json"])
    case("config-json-array", lambda d: write_json(d / "config.json", [base]), ["config.json"])
    case("config-empty-object", lambda d: write_json(d / "config.json", {}), ["config.json"])
    for label, v in (("1e19", 10**19), ("u64-max", U64_MAX), ("1e10", 10**10)):
        case(f"config-max-position-{label}", edit(max_position_embeddings=v),
             ["config.json", "max_position_embeddings"])
    fields = [
        ("hidden-size-0", "hidden_size", 0),
        ("num-attention-heads-0", "num_attention_heads", 0),
        ("num-key-value-heads-0", "num_key_value_heads", 0),
        ("num-key-value-heads-3", "num_key_value_heads", 3),
        ("vocab-size-0", "vocab_size", 0),
        ("vocab-size-1e12", "vocab_size", 10**12),
        ("num-hidden-layers-1e9", "num_hidden_layers", 10**9),
        ("intermediate-size-1e12", "intermediate_size", 10**12),
        ("rms-norm-eps-negative", "rms_norm_eps", -1.0),
        ("rms-norm-eps-0", "rms_norm_eps", 0.0),
        ("rope-theta-0", "rope_theta", 0.0),
        ("rope-theta-negative", "rope_theta", -5.0),
        ("head-dim-1e9", "head_dim", 10**9),
        ("hidden-size-string", "hidden_size", "64"),
    ]
    for label, field, v in fields:
        case("config-" + label, edit(**{field: v}), ["config.json", field])
    case("config-heads-not-dividing-hidden", edit(num_attention_heads=5, head_dim=DELETE),
         ["config.json", "num_attention_heads"])
    case("config-rope-scaling-factor-0", edit(rope_scaling={"rope_type": "linear", "factor": 0.0}),
         ["config.json", "factor"])
    case("config-rope-scaling-factor-negative", edit(rope_scaling={"rope_type": "linear", "factor": -2.0}),
         ["config.json", "factor"])
    case("config-missing-hidden-size", edit(hidden_size=DELETE), ["config.json", "hidden_size"])

    shapes_run = ["generate", "--model", "{case}", "--image", SHAPES_IMAGE, "--prompt", "How many shapes are there?"]
    sbase = read_json(REPO / SHAPES / "config.json")

    def sedit(**fields):
        def make(d):
            cfg = dict(sbase)
            cfg.update(fields)
            write_json(d / "config.json", cfg)
        return make
    # `dtype` / `torch_dtype` only say what the weights were saved in; the engine reads the tensors' own
    # dtypes, so an odd value there is not an error (valid but odd: the model answers).
    case("config-dtype-int3", edit(dtype="int3"), [], expect="ok")
    case("config-torch-dtype-int3", sedit(torch_dtype="int3"), [], SHAPES, shapes_run, expect="ok")
    case("config-patch-size-0", sedit(patch_size=0), ["config.json", "patch_size"], SHAPES, shapes_run)
    case("config-image-size-0", sedit(image_size=0), ["config.json", "image_size"], SHAPES, shapes_run)


class _Delete:
    pass


DELETE = _Delete()


def gen_processor(c: Corpus):
    cls = "processor"
    run = ["generate", "--model", "{case}", "--image", SHAPES_IMAGE, "--prompt", "How many shapes are there?"]
    base = read_json(REPO / SHAPES / "preprocessor_config.json")

    def case(name, fields, words, expect="error"):
        d = clone_model(SHAPES, c.dir(name))
        cfg = dict(base)
        for k, v in fields.items():
            if v is DELETE:
                cfg.pop(k, None)
            else:
                cfg[k] = v
        write_json(d / "preprocessor_config.json", cfg)
        c.add(cls, name, run, expect, (["preprocessor_config.json"] + words) if expect == "error" else [])

    case("proc-size-0x0", {"size": {"height": 0, "width": 0}}, ["size"])
    case("proc-size-100000", {"size": {"height": 100000, "width": 100000}}, ["size"])
    case("proc-size-32-mismatch", {"size": {"height": 32, "width": 32}}, ["size"])
    case("proc-size-wrong-type", {"size": "64"}, ["size"])
    case("proc-std-0", {"image_std": [0.0, 0.0, 0.0]}, ["image_std"])
    case("proc-std-tiny", {"image_std": [1e-45, 1e-45, 1e-45]}, ["image_std"])
    case("proc-std-negative", {"image_std": [-1.0, -1.0, -1.0]}, ["image_std"])
    case("proc-mean-length-1", {"image_mean": [0.5]}, ["image_mean"])
    case("proc-rescale-factor-0", {"rescale_factor": 0.0}, ["rescale_factor"])
    case("proc-resample-99", {"resample": 99}, ["resample"])
    # The native model's processor has no `patch_size` (the model config's is used): ignored, it answers.
    case("proc-patch-size-0", {"patch_size": 0}, [], expect="ok")
    case("proc-missing-size", {"size": DELETE}, ["size"])
    d = clone_model(SHAPES, c.dir("proc-not-json"))
    write_bytes(d / "preprocessor_config.json", b"{\"size\": ")
    c.add(cls, "proc-not-json", run, "error", ["preprocessor_config.json"])


def gen_tokenizer(c: Corpus):
    cls = "tokenizer"
    run = ["generate", "--model", "{case}", "--prompt", "hi", "--max-new-tokens", "4"]
    tok = read_json(REPO / LLAMA / "tokenizer.json")
    tcfg = read_json(REPO / LLAMA / "tokenizer_config.json")

    def case(name, make, words, args=run, expect="error"):
        d = clone_model(LLAMA, c.dir(name))
        make(d)
        c.add(cls, name, args, expect, words)

    case("tok-not-json", lambda d: write_bytes(d / "tokenizer.json", b"\x00\x01 not json"), ["tokenizer.json"])
    case("tok-empty-object", lambda d: write_json(d / "tokenizer.json", {}), ["tokenizer.json"])

    def added_huge(d):
        t = json.loads(json.dumps(tok))
        t["added_tokens"].append({"id": 10**12, "content": "<|huge|>", "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": False, "special": True})
        write_json(d / "tokenizer.json", t)
    case("tok-added-token-id-1e12", added_huge, ["tokenizer.json", "1000000000000"])

    def vocab_beyond(d):
        t = json.loads(json.dumps(tok))
        vocab = t["model"]["vocab"]
        for piece in ("h", "i"):
            if piece in vocab:
                vocab[piece] = 99999 if piece == "h" else 99998
        write_json(d / "tokenizer.json", t)
    case("tok-vocab-id-beyond-vocab-size", vocab_beyond, ["tokenizer.json", "99999"])

    def added_empty(d):
        t = json.loads(json.dumps(tok))
        t["added_tokens"].append({"id": 384, "content": "", "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": False, "special": True})
        write_json(d / "tokenizer.json", t)
    case("tok-added-token-empty-content", added_empty, ["tokenizer.json", "added token id 384", "empty"])

    # A tokenizer of 320 tokens before an embedding of 384 rows (the tiny model's), as checkpoints
    # pad their embedding past the tokenizer (Qwen2-VL: 151936 rows, ~151665 tokens): valid.
    # `info` states both sizes; generation decodes an id with no token as empty text (as
    # transformers does): the second model's head is edited so that greedy decoding picks id 383
    # at every step (every embedding row's first value 100, so the final norm's first value is
    # positive, and a head whose only non-zero weight is row 383's first).
    def small_vocab(forced):
        def make(d):
            t = json.loads(json.dumps(tok))
            vocab = {k: v for k, v in t["model"]["vocab"].items() if v < 320}
            t["model"]["vocab"] = vocab
            pieces = [m.split(" ", 1) if isinstance(m, str) else m for m in t["model"]["merges"]]
            t["model"]["merges"] = [m for m in pieces if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
            t["added_tokens"] = [a for a in t["added_tokens"] if a["id"] < 320]
            write_json(d / "tokenizer.json", t)
            if forced:
                header, body = st_read(REPO / LLAMA / "model.safetensors")
                body = bytearray(body)
                rows, width = header["model.embed_tokens.weight"]["shape"]
                emb = header["model.embed_tokens.weight"]["data_offsets"][0]
                for r in range(rows):
                    struct.pack_into("<f", body, emb + 4 * width * r, 100.0)
                lo, hi = header["lm_head.weight"]["data_offsets"]
                body[lo:hi] = bytes(hi - lo)
                struct.pack_into("<f", body, lo + 4 * width * 383, 1.0)
                st_write(d / "model.safetensors", header, bytes(body))
        return make
    case("tok-vocab-smaller-than-embedding-info", small_vocab(False),
         ["320 tokens, embedding 384 rows", "64 ids have no text"], ["info", "--model", "{case}"], "ok")
    case("tok-vocab-smaller-than-embedding-generate", small_vocab(True),
         ['"generated_tokens":[383,383,383,383]', '"text":""'], run + ["--temperature", "0", "--json"], "ok")

    def template(text):
        def make(d):
            cfg = dict(tcfg)
            cfg["chat_template"] = text
            write_json(d / "tokenizer_config.json", cfg)
        return make
    case("tok-template-loop-1e10",
         template("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"),
         ["template"])
    # Values that double at every step: 2^40 bytes in 40 steps, past any step count or output
    # bound; the render's memory budget (256 MiB) stops them.
    case("tok-template-namespace-doubling",
         template('{% set ns = namespace(s="xxxxxxxx") %}{% for i in range(40) %}'
                  '{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}'),
         ["template", "MiB of memory"])
    case("tok-template-macro-doubling",
         template('{% macro grow(s, n) %}{% if n > 0 %}{{ grow(s ~ s, n - 1) }}{% else %}{{ s|length }}'
                  '{% endif %}{% endmacro %}{{ grow("xxxxxxxx", 40) }}'),
         ["template", "MiB of memory"])
    case("tok-template-replace-doubling",
         template('{% set ns = namespace(s="x") %}{% for i in range(45) %}'
                  '{% set ns.s = ns.s|replace("x", "xx") %}{% endfor %}{{ ns.s|length }}'),
         ["template", "MiB of memory"])
    case("tok-template-list-doubling",
         template('{% set ns = namespace(l=[1, 2, 3, 4]) %}{% for i in range(40) %}'
                  '{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}'),
         ["template", "MiB of memory"])
    case("tok-template-syntax-error", template("{% for message in messages %}{{ message['content'] }"),
         ["template"])
    case("tok-template-raise", template("{{ raise_exception('boom') }}"), ["boom"])
    case("tok-config-not-json", lambda d: write_bytes(d / "tokenizer_config.json", b"{\"chat_template\": "),
         ["tokenizer_config.json"])
    case("tok-missing-tokenizer", lambda d: os.remove(d / "tokenizer.json"), ["tokenizer.json"])


def gen_image(c: Corpus):
    cls = "image"
    def run(img, extra=()):
        return ["generate", "--model", "{repo}/" + SHAPES, "--image", img, "--prompt", "How many shapes are there?",
                "--max-new-tokens", "4", *extra]

    def case(name, data, expect, words, fname=None, extra=()):
        fname = fname or name + ".png"
        write_bytes(c.dir(name) / fname, data)
        c.add(cls, name, run("{case}/" + fname, extra), expect, words)

    good = png_pattern(64, 64, 3)
    case("img-truncated-png", good[:len(good) // 2], "error", ["img-truncated-png.png"])
    case("img-ihdr-0x0", png(0, 0, 8, 2, b""), "error", ["img-ihdr-0x0.png"])
    bomb = png(100000, 100000, 8, 2, idat=zlib.compress(b"\0" * 1000))
    case("img-pixel-bomb-header", bomb, "error", ["img-pixel-bomb-header.png", "max-image-pixels"])
    # With the pixel limit lifted, the decoded buffer (30 GB) is checked against the memory there
    # is before it is allocated (an allocation failure would abort the process).
    case("img-pixel-bomb-header-no-limit", bomb, "error", ["img-pixel-bomb-header-no-limit.png", "bytes"],
         extra=("--max-image-pixels", str(U64_MAX)))
    case("img-zlib-bomb", zlib_bomb_png(20000), "error", ["img-zlib-bomb.png", "max-image-pixels"])
    rnd = bytes(Lcg(7).floats(4096).tobytes())
    case("img-random-bytes", rnd, "error", ["img-random-bytes.png"])
    case("img-empty-file", b"", "error", ["img-empty-file.png"])
    case("img-bad-crc", good[:30] + bytes([good[30] ^ 0xFF]) + good[31:], "error", ["img-bad-crc.png"])
    (c.dir("img-directory") / "img-a-directory.png").mkdir(exist_ok=True)
    c.add(cls, "img-directory", run("{case}/img-a-directory.png"), "error", ["img-a-directory.png"])
    c.add(cls, "img-dev-zero", run("/dev/zero"), "error", ["/dev/zero"])
    c.add(cls, "img-missing-file", run("{case}/does-not-exist.png"), "error", ["does-not-exist.png"])
    fifo = c.dir("img-fifo") / "img-fifo.png"
    if not fifo.exists():
        os.mkfifo(fifo)
    c.add(cls, "img-fifo", run("{case}/img-fifo.png"), "error", ["img-fifo.png"])
    case("img-gif", gif_1x1(), "ok", [], "img-gif.gif")
    case("img-bmp", bmp(5, 3), "ok", [], "img-bmp.bmp")
    case("img-1x1", png_pattern(1, 1, 3), "ok", [])
    case("img-rgb16", png_pattern(8, 8, 3, 16, 2), "ok", [])
    case("img-gray-alpha", png_pattern(9, 7, 2, 8, 4), "ok", [])
    case("img-gray-1bit", png(8, 2, 1, 0, b"\0\xaa\0\x55"), "ok", [])
    plte = bytes(v for i in range(4) for v in (i * 80, 255 - i * 60, 40))
    case("img-paletted", png(4, 4, 8, 3, b"".join(b"\0" + bytes([(x + y) % 4 for x in range(4)]) for y in range(4)),
                             plte=plte), "ok", [])
    case("img-wide-1000x1", png_pattern(1000, 1, 3), "ok", [])
    # Found by fuzzing (fuzz/fuzz_targets/image.rs): a palette of 49 bytes, not whole RGB entries, made the
    # png crate (0.18.1) panic while expanding the palette; a valid CRC carries it past the chunk checks.
    case("img-palette-partial-entry", png(40, 30, 4, 3, b"".join(b"\0" + bytes(20) for _ in range(30)),
                                          plte=bytes(range(49))), "error", ["img-palette-partial-entry.png", "PLTE"])
    case("img-pixel-limit-0", good, "error", ["--max-image-pixels"], extra=("--max-image-pixels", "0"))


def gen_prompt(c: Corpus):
    cls = "prompt"
    model = "{repo}/" + LLAMA
    gen = ["generate", "--model", model, "--max-new-tokens", "4"]
    c.add(cls, "prompt-empty-chat", gen + ["--prompt", ""], "ok")
    c.add(cls, "prompt-empty-raw", gen + ["--raw", "--prompt", ""], "error", ["prompt"])
    c.add(cls, "prompt-30000-words", gen + ["--prompt", "hello " * 20000], "error", ["context", "128"])
    def messages(name, fname, value, words, model=model):
        path = c.dir(name) / fname
        if isinstance(value, bytes):
            write_bytes(path, value)
        else:
            write_json(path, value)
        c.add(cls, name, ["generate", "--model", model, "--max-new-tokens", "4", "--messages", "{case}/" + fname],
              "error", words)

    messages("prompt-messages-200000-words", "long.json", [{"role": "user", "content": "hello " * 200000}],
             ["context", "128"])
    messages("prompt-messages-not-json", "notjson.json", b"[{\"role\": \"user\", ", ["notjson.json"])
    messages("prompt-messages-object", "object.json", {"role": "user", "content": "hi"}, ["object.json"])
    messages("prompt-messages-empty-list", "empty.json", [], ["empty.json"])
    messages("prompt-messages-unknown-role", "role.json", [{"role": "wizard", "content": "hi"}], ["wizard"])
    messages("prompt-messages-content-number", "number.json", [{"role": "user", "content": 42}], ["content"])
    messages("prompt-messages-more-images-than-model-takes", "twoimages.json", [{"role": "user", "content": [
        {"type": "image", "path": "models/shapes-vlm/examples/three_shapes.png"},
        {"type": "image", "path": "models/shapes-vlm/examples/two_circles.png"},
        {"type": "text", "text": "How many shapes are there?"}]}], ["image"], "{repo}/" + SHAPES)
    messages("prompt-messages-image-without-file", "nopath.json", [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "How many shapes are there?"}]}], ["image"], "{repo}/" + SHAPES)
    messages("prompt-messages-image-missing-file", "missing.json", [{"role": "user", "content": [
        {"type": "image", "path": "no-such-image.png"}, {"type": "text", "text": "How many?"}]}],
        ["no-such-image.png"], "{repo}/" + SHAPES)
    messages("prompt-messages-bad-base64", "base64.json", [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%not-base64%%%"}},
        {"type": "text", "text": "How many?"}]}], ["base64"], "{repo}/" + SHAPES)
    c.add(cls, "prompt-two-images-flags",
          ["generate", "--model", "{repo}/" + SHAPES, "--max-new-tokens", "4", "--image", SHAPES_IMAGE,
           "--image", SHAPES_IMAGE, "--prompt", "How many shapes are there?"], "error", ["image"])
    c.add(cls, "prompt-image-on-text-model", gen + ["--image", SHAPES_IMAGE, "--prompt", "hi"], "error", ["image"])


def patched_copy(src: Path, dst: Path, key: bytes, old: bytes, new: bytes):
    """A copy of the GGUF `src` with the value `old` that follows the metadata key `key` (within
    its type and length fields) replaced by `new`, of the same length."""
    data = bytearray(src.read_bytes())
    at = data.index(key) + len(key)
    found = data.index(old, at)
    assert found - at <= 12 and len(old) == len(new), (src, key)
    data[found:found + len(new)] = new
    write_bytes(dst, bytes(data))


def gen_mmproj(c: Corpus):
    """llama.cpp's GGUF + mmproj pairs (tests/fixtures/vlm/*-gguf) put together wrongly: each
    refusal names both files where there are two."""
    cls = "mmproj"
    pairs = "tests/fixtures/vlm/"
    smol_text = "{repo}/" + pairs + "smolvlm-tiny-gguf/smolvlm-tiny-f32.gguf"
    smol_mmproj = "{repo}/" + pairs + "smolvlm-tiny-gguf/mmproj-smolvlm-tiny-f32.gguf"
    qwen2_text = "{repo}/" + pairs + "llava-interleave-tiny-gguf/llava-interleave-tiny-f32.gguf"
    image = "{repo}/tests/fixtures/images/chelsea.png"
    # Words name the fixtures by their paths below tests/fixtures/ (the Rust runner spells the
    # repository's path its own way).
    tail = lambda path: path.split("tests/fixtures/", 1)[1]

    def gen(model, mmproj=None):
        args = ["generate", "--model", model] + (["--mmproj", mmproj] if mmproj else [])
        return args + ["--image", image, "--prompt", "Describe this image.", "--max-new-tokens", "4"]

    c.add(cls, "mmproj-other-family", gen(qwen2_text, smol_mmproj), "error",
          [tail(smol_mmproj), tail(qwen2_text), "idefics3", "llama", "qwen2"])
    src = REPO / pairs / "smolvlm-tiny-gguf/mmproj-smolvlm-tiny-f32.gguf"
    patched_copy(src, c.dir("mmproj-wider-projection") / "mmproj-wide.gguf", b"clip.vision.projection_dim",
                 struct.pack("<I", 64), struct.pack("<I", 96))
    c.add(cls, "mmproj-wider-projection", gen(smol_text, "{case}/mmproj-wide.gguf"), "error",
          ["{case}/mmproj-wide.gguf", tail(smol_text), "96", "64"])
    patched_copy(src, c.dir("mmproj-unknown-projector") / "mmproj-unknown.gguf", b"clip.projector_type",
                 b"idefics3", b"resamplr")
    c.add(cls, "mmproj-unknown-projector", gen(smol_text, "{case}/mmproj-unknown.gguf"), "error",
          ["{case}/mmproj-unknown.gguf", tail(smol_text), "resamplr", "idefics3"])
    c.add(cls, "mmproj-given-as-the-model", gen(smol_mmproj), "error", [tail(smol_mmproj), "mmproj", "--mmproj"])
    link_or_copy(REPO / pairs / "smolvlm-tiny-gguf/smolvlm-tiny-f32.gguf",
                 c.dir("mmproj-missing") / "smolvlm-tiny-f32.gguf")
    c.add(cls, "mmproj-missing", gen("{case}/smolvlm-tiny-f32.gguf"), "error",
          ["{case}/smolvlm-tiny-f32.gguf", "no mmproj", "--mmproj"])
    c.add(cls, "mmproj-text-gguf-as-mmproj", gen(smol_text, smol_text), "error", [tail(smol_text), "not an mmproj"])
    c.add(cls, "mmproj-with-a-folder", gen("{repo}/" + pairs + "smolvlm-tiny", smol_mmproj), "error",
          ["GGUF text model", "smolvlm-tiny"])


def gen_cli(c: Corpus):
    cls = "cli"
    model = "{repo}/" + LLAMA
    gen = ["generate", "--model", model, "--prompt", "hi", "--max-new-tokens", "4"]
    shapes = ["generate", "--image", SHAPES_IMAGE, "--prompt", "How many shapes are there?", "--max-new-tokens", "4"]

    def flag(name, args, words, expect="error"):
        c.add(cls, name, args, expect, words)

    flag("cli-threads-0", gen + ["--threads", "0"], ["--threads"])
    flag("cli-threads-100000", gen + ["--threads", "100000"], ["--threads"])
    flag("cli-max-new-tokens-2p64", gen[:-2] + ["--max-new-tokens", "18446744073709551616"], ["--max-new-tokens"])
    for label, v in (("negative", "-1"), ("nan", "NaN"), ("inf", "inf"), ("1e-300", "1e-300")):
        flag("cli-temperature-" + label, gen + ["--temperature=" + v], ["--temperature"])
    flag("cli-top-p-2", gen + ["--top-p", "2"], ["--top-p"])
    flag("cli-top-p-nan", gen + ["--top-p", "NaN"], ["--top-p"])
    flag("cli-top-k-negative", gen + ["--top-k=-1"], ["--top-k"])
    flag("cli-min-p-negative", gen + ["--min-p=-0.5"], ["--min-p"])
    flag("cli-repetition-penalty-0", gen + ["--repetition-penalty", "0"], ["--repetition-penalty"])
    flag("cli-max-image-pixels-0", shapes + ["--max-image-pixels", "0"], ["--max-image-pixels"])
    flag("cli-device-cpu-1", gen + ["--device", "cpu:1"], ["--device", "cpu:1"])
    flag("cli-device-cuda-huge", gen + ["--device", "cuda:99999999999999999999"], ["--device", "cuda:99999999999999999999"])
    flag("cli-dtype-f8", gen + ["--dtype", "f8"], ["--dtype", "f8"])
    flag("cli-explain-scale-u64-max",
         ["explain", "--image", SHAPES_IMAGE, "--prompt", "Describe the image.", "--max-new-tokens", "2",
          "--out", "{case}/explain", "--scale", str(U64_MAX)], ["--scale"])
    flag("cli-explain-scale-0",
         ["explain", "--image", SHAPES_IMAGE, "--prompt", "Describe the image.", "--max-new-tokens", "2",
          "--out", "{case}/explain", "--scale", "0"], ["--scale"])
    c.dir("cli-explain-scale-u64-max")
    c.dir("cli-explain-scale-0")
    flag("cli-analogy-empty-word", ["analogy", "--model", "{case}/../gguf-base/model.gguf", "king", "", "woman"],
         ["empty"])
    flag("cli-embed-layer-out-of-range", ["embed", "--model", model, "--text", "hi", "--layer", "99"],
         ["--layer", "99"])
    flag("cli-embed-pool-unknown", ["embed", "--model", model, "--text", "hi", "--pool", "median"], ["--pool", "median"])
    flag("cli-embed-pool-token-absent", ["embed", "--model", model, "--text", "hi", "--pool", "token:zebra"],
         ["zebra"])
    # Server limits (refused by the argument parser, before anything is loaded or bound).
    serve = ["serve", "--model", "{repo}/" + SHAPES, "--port", "0"]
    flag("cli-serve-max-connections-0", serve + ["--max-connections", "0"], ["--max-connections"])
    for label, v in (("0", "0"), ("negative", "-1"), ("nan", "NaN"), ("inf", "inf"), ("word", "ten")):
        flag("cli-serve-header-timeout-" + label, serve + ["--header-timeout=" + v], ["--header-timeout"])
    flag("cli-serve-drain-timeout-1e9", serve + ["--drain-timeout", "1e9"], ["--drain-timeout"])
    flag("cli-model-missing", ["generate", "--model", "{case}/does-not-exist", "--prompt", "hi"], ["does-not-exist"])
    d = c.dir("cli-model-fifo")
    if not (d / "model.gguf").exists():
        os.mkfifo(d / "model.gguf")
    flag("cli-model-fifo", ["generate", "--model", "{case}/model.gguf", "--prompt", "hi"], ["model.gguf"])
    flag("cli-model-dev-zero", ["generate", "--model", "/dev/zero", "--prompt", "hi"], ["/dev/zero"])
    d = c.dir("cli-model-empty-dir")
    flag("cli-model-empty-dir", ["generate", "--model", "{case}", "--prompt", "hi"], ["config.json"])

    # Output files (embed --out, explain --out): one writer for all, which writes a temporary file
    # beside the destination and renames it over it, following a symbolic link to its target
    # (the link stays a link), and writes a device in place.
    embed = ["embed", "--model", model, "--text", "hi", "--pool", "mean", "--out"]
    for ext in ("safetensors", "npy"):
        d = c.dir(f"cli-embed-out-symlink-{ext}")
        write_bytes(d / f"data.{ext}", b"old")
        os.symlink(f"data.{ext}", d / f"link.{ext}")
        flag(f"cli-embed-out-symlink-{ext}", embed + [f"{{case}}/link.{ext}"], [], "ok")
    d = c.dir("cli-embed-out-dev-full")
    os.symlink("/dev/full", d / "full.npy")
    flag("cli-embed-out-dev-full", embed + ["{case}/full.npy"], ["full.npy", "/dev/full", "no space left"])
    c.dir("cli-embed-out-missing-folder")
    flag("cli-embed-out-missing-folder", embed + ["{case}/no-such-folder/e.npy"], ["no-such-folder/e.npy"])
    explain = ["explain", "--image", SHAPES_IMAGE, "--prompt", "Describe the image.", "--max-new-tokens", "2", "--out"]
    d = c.dir("cli-explain-out-is-a-file")
    write_bytes(d / "afile", b"not a folder")
    flag("cli-explain-out-is-a-file", explain + ["{case}/afile"], ["afile"])
    d = c.dir("cli-explain-attention-json-is-a-folder")
    (d / "attention.json").mkdir()
    flag("cli-explain-attention-json-is-a-folder", explain + ["{case}"], ["attention.json", "folder"])


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
