"""A GGUF file's header without its weights, and a runnable file with random weights made from it.

The GPU machine has no network, and what travels there is limited to 64 MiB, less than the test GGUF
(SmolLM2-135M-Instruct Q4_1, 98 MB of weights that do not compress). Speed does not depend on the
weights' values, so the header travels (metadata, vocabulary, tensor names, shapes, types and offsets:
~2 MB, ~0.6 MB packed) and the GPU machine fills in valid random blocks of each tensor's type:

    python3 scripts/gpu/gguf_skeleton.py strip models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf .gpu/smollm2.skeleton
    python3 scripts/gpu/gguf_skeleton.py fill .gpu/smollm2.skeleton /tmp/smollm2-random.gguf

`fill` writes small values (norm weights 1, other values within a few hundredths) so that activations
stay finite. Types: F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (what the test file and its llama-quantize
variants of 32-value blocks hold); another type is refused by name. `strip` needs only Python; `fill`
needs numpy.
"""
import argparse
import math
import struct
import sys

# ggml type id: (name, values per block, bytes per block)
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
         7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34)}
# GGUF metadata value types with a fixed size: (struct format, bytes)
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data, path):
        self.data, self.pos, self.path = data, 0, path

    def take(self, fmt):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise SystemExit(f"{self.path}: truncated at byte {self.pos}")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n]
        if len(s) != n:
            raise SystemExit(f"{self.path}: truncated string at byte {self.pos}")
        self.pos += n
        return s.decode("utf-8", errors="replace")

    def value(self, kind):
        if kind in SCALARS:
            return self.take(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, n = self.take("<I"), self.take("<Q")
            return [self.value(item) for _ in range(n)]
        raise SystemExit(f"{self.path}: metadata value type {kind} at byte {self.pos}")


def parse(data, path):
    """(metadata, tensors [(name, dims, type, offset)], data_start): the header of a GGUF v2/v3 file."""
    r = Reader(data, path)
    if data[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    r.pos = 4
    version = r.take("<I")
    if version not in (2, 3):
        raise SystemExit(f"{path}: GGUF version {version} (2 or 3 expected)")
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.take("<I"))
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.take("<Q") for _ in range(r.take("<I"))]
        tensors.append((name, dims, r.take("<I"), r.take("<Q")))
    align = meta.get("general.alignment", 32)
    return meta, tensors, (r.pos + align - 1) // align * align


def nbytes(name, dims, kind):
    if kind not in TYPES:
        raise SystemExit(f"tensor {name}: ggml type {kind} is not one this script fills ({sorted(TYPES)})")
    _, per_block, size = TYPES[kind]
    count = math.prod(dims)
    if count % per_block:
        raise SystemExit(f"tensor {name}: {count} values are not whole {TYPES[kind][0]} blocks")
    return count // per_block * size


def random_tensor(name, dims, kind, rng):
    """Valid bytes of `kind` for a tensor `dims`: norm weights 1, other values of a few hundredths."""
    import numpy as np

    label, per_block, size = TYPES[kind]
    count = math.prod(dims)
    if kind in (0, 1):
        values = np.ones(count) if "norm" in name else rng.normal(0, 0.02, count)
        return values.astype("<f4" if kind == 0 else "<f2").tobytes()
    blocks = count // per_block
    out = np.empty((blocks, size), dtype=np.uint8)
    scale = np.full((blocks, 1), 0.002, dtype="<f2").view(np.uint8)  # d: one step of a few thousandths
    out[:, :2] = scale
    rest = out[:, 2:]
    if label in ("Q4_1", "Q5_1"):  # d, m (minimum), then the quants
        out[:, 2:4] = np.full((blocks, 1), -0.016, dtype="<f2").view(np.uint8)
        rest = out[:, 4:]
    rest[:] = rng.integers(0, 256, rest.shape, dtype=np.uint8)
    return out.tobytes()


def strip(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    meta, tensors, start = parse(data, src)
    end = max((off + nbytes(n, d, k) for n, d, k, off in tensors), default=0)
    if start + end > len(data):
        raise SystemExit(f"{src}: the tensors need {start + end} bytes, the file has {len(data)}")
    with open(dst, "wb") as f:
        f.write(data[:start])
    print(f"{dst}: {start} header bytes of {len(data)} ({len(tensors)} tensors, {meta.get('general.architecture')})")


def fill(src, dst, seed):
    with open(src, "rb") as f:
        header = f.read()
    meta, tensors, start = parse(header, src)
    if start != len(header):
        raise SystemExit(f"{src}: {len(header)} bytes, a header of {start} expected (made by `strip`?)")
    import numpy as np

    rng = np.random.default_rng(seed)
    with open(dst, "wb") as f:
        f.write(header)
        pos = 0
        for name, dims, kind, off in sorted(tensors, key=lambda t: t[3]):
            if off < pos:
                raise SystemExit(f"{src}: tensor {name} overlaps the one before it")
            f.write(b"\0" * (off - pos))
            f.write(random_tensor(name, dims, kind, rng))
            pos = off + nbytes(name, dims, kind)
    kinds = sorted({TYPES[k][0] for _, _, k, _ in tensors})
    print(f"{dst}: {start + pos} bytes, {len(tensors)} tensors ({', '.join(kinds)}) with random values")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("strip", help="write a GGUF file's header alone")
    s.add_argument("src")
    s.add_argument("dst")
    f = sub.add_parser("fill", help="write a GGUF file from a header, with random weights")
    f.add_argument("src")
    f.add_argument("dst")
    f.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.cmd == "strip":
        strip(args.src, args.dst)
    else:
        fill(args.src, args.dst, args.seed)


if __name__ == "__main__":
    sys.exit(main())
