"""What the hostile-input cases are made of: the corpus, small file helpers, and writers of
safetensors, GGUF and image files (standard library only)."""

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


REPO = Path(__file__).resolve().parent.parent.parent
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
