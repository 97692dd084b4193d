"""llama-quantize's output for `--quantize`'s tests (issue 39), written into tests/fixtures/quant/.

1. qwen2-256.json: a Qwen2 text checkpoint whose rows are multiples of 256 (so the k-quants and
   the _M mixes' per-layer rules apply, where the tiny fixtures' 64-wide rows only reach the
   fallback types). Its values come from a generator the Rust test repeats exactly (splitmix64,
   seeded by the FNV-1a hash of the tensor's name; 23-bit integers times 2^-25, every 97th times
   4, all exact in f32). It is converted by llama.cpp's converter to an f32 GGUF and quantized by
   llama-quantize to each type; the JSON holds, per type, every quantized tensor's GGUF name,
   type and the SHA-256 of its blocks. The checkpoint itself (10 MB) is not committed.
2. The tiny SmolVLM, LLaVA, LLaVA-interleave, Qwen2-VL, Qwen2.5-VL, Gemma 3, Qwen3-VL, InternVL3, Mistral 3, MiniCPM-V 4.6 and Gemma 4 pairs
   (tests/fixtures/vlm/<name>-gguf) and the tiny Qwen2 checkpoint (tests/fixtures/tiny/qwen2-bias,
   converted here) quantized by llama-quantize to Q8_0, Q4_0 (SmolVLM and Qwen2 only) and Q4_K_M:
   <name>-<type>/{model.gguf, mmproj.gguf}, small enough to commit, for the end-to-end comparison
   with `--quantize` and `tessera quantize` on the folders.

Run by scripts/make_quant_references.sh (the converter's venv, llama-quantize's build).
Usage: python make_quant_references.py LLAMA_CPP_DIR LLAMA_QUANTIZE
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from array import array

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "quant")
LLAMA, QUANTIZE = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(LLAMA, "gguf-py"))
import gguf  # noqa: E402

M64 = (1 << 64) - 1
# The tiny pairs of tests/fixtures/vlm/<name>-gguf (scripts/make_gguf_pairs.sh) quantized whole
# (Q4_0: the first only; the others' files differ from it in the splitting and naming, not in
# the quantizers).
# crates/tessera/tests/quantize_export.rs compares `tessera quantize`'s pairs of all eleven with these (and Qwen3.5's, scripts/make_qwen3_5_quant_references.sh).
PAIRS = [
    "smolvlm-tiny",
    "llava-tiny",
    "llava-interleave-tiny",
    "qwen2-vl-tiny",
    "qwen2.5-vl-tiny",
    "gemma3-tiny",
    "qwen3-vl-tiny",
    "internvl-tiny",
    "mistral3-pair-tiny",
    "minicpm-v4.6-pair-tiny",
    "gemma4-pair-tiny",
]
MIXES = ["Q4_0", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K"]
CONFIG_256 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_act": "silu",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "vocab_size": 384,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}


def fnv1a(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def values(name, n):
    """The generator the Rust test repeats: exact f32 values."""
    out = array("f")
    s = fnv1a(name)
    for i in range(n):
        s = (s + 0x9E3779B97F4A7C15) & M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        k = (z >> 41) - (1 << 22)
        out.append(k * 2.0**-25 * (4.0 if i % 97 == 0 else 1.0))
    return out


def qwen2_shapes(c):
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h], "lm_head.weight": [v, h]}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [h, h], p + "self_attn.q_proj.bias": [h],
            p + "self_attn.k_proj.weight": [kv, h], p + "self_attn.k_proj.bias": [kv],
            p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.v_proj.bias": [kv],
            p + "self_attn.o_proj.weight": [h, h],
            p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
            p + "mlp.down_proj.weight": [h, inter],
        })
    return shapes


def write_safetensors(path, shapes):
    header, blobs, off = {}, [], 0
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        data = values(name, n).tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def convert(model_dir, outfile, *extra):
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "peers", "convert_hf.py"), LLAMA, model_dir,
                    "--outtype", "f32", "--outfile", outfile, *extra], check=True, capture_output=True)


def quantize(src, dst, mix):
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(QUANTIZE))
    subprocess.run([QUANTIZE, src, dst, mix], check=True, capture_output=True, env=env)


def with_img_break(src, dst, folder):
    """The converter's Mistral 3 mmproj `src` with `v.token_embd.img_break`, the [IMG_BREAK] row
    of the text model's token embedding, added as `LlavaVisionModel` means to (it drops the text
    tensors before it reaches the embedding, and llama.cpp's clip.cpp then refuses the file):
    what `tessera quantize` writes, so that llama-mtmd-cli loads its pair."""
    import numpy as np
    from safetensors.numpy import load_file
    tokenizer = json.load(open(os.path.join(folder, "tokenizer.json")))
    token = next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == "[IMG_BREAK]")
    weights = load_file(os.path.join(folder, "model.safetensors"))
    embed = next(v for k, v in weights.items() if k.endswith("language_model.embed_tokens.weight")
                 or k.endswith("language_model.model.embed_tokens.weight"))
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(dst, arch="clip")
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.array(t.data), raw_shape=list(t.data.shape), raw_dtype=t.tensor_type)
    writer.add_tensor("v.token_embd.img_break", np.ascontiguousarray(embed[token], dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def tensor_table(path):
    """Every quantized tensor of a GGUF: name, type, shape (rows, cols), SHA-256 of its blocks."""
    rows = []
    for t in gguf.GGUFReader(path).tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            continue
        dims = [int(d) for d in t.shape]
        rows.append({"gguf": t.name, "type": t.tensor_type.name, "shape": [dims[1], dims[0]],
                     "sha256": hashlib.sha256(bytes(t.data)).hexdigest()})
    return sorted(rows, key=lambda r: r["gguf"])


def main():
    os.makedirs(OUT, exist_ok=True)
    tiny = os.path.join(ROOT, "tests", "fixtures", "tiny", "qwen2-bias")
    with tempfile.TemporaryDirectory() as stage:
        # 1. The 256-wide checkpoint.
        ck = os.path.join(stage, "qwen2-256")
        os.makedirs(ck)
        json.dump(CONFIG_256, open(os.path.join(ck, "config.json"), "w"), indent=2)
        for f in ["tokenizer.json", "tokenizer_config.json"]:
            shutil.copy(os.path.join(tiny, f), ck)
        write_safetensors(os.path.join(ck, "model.safetensors"), qwen2_shapes(CONFIG_256))
        f32 = os.path.join(stage, "qwen2-256-f32.gguf")
        convert(ck, f32)
        mixes = {}
        for mix in MIXES:
            q = os.path.join(stage, f"qwen2-256-{mix}.gguf")
            quantize(f32, q, mix)
            mixes[mix] = tensor_table(q)
        ref = {"config": CONFIG_256, "llama_cpp": "0c1e57098 (llama-cpp-python 0.3.36)", "mixes": mixes}
        with open(os.path.join(OUT, "qwen2-256.json"), "w") as f:
            json.dump(ref, f, indent=1)
            f.write("\n")
        # 2. The tiny pairs for the end-to-end comparison.
        qwen2_f32 = os.path.join(stage, "qwen2-bias-f32.gguf")
        convert(tiny, qwen2_f32)
        for mix in ["Q8_0", "Q4_0", "Q4_K_M"]:
            for name in PAIRS if mix != "Q4_0" else PAIRS[:1]:
                pair = os.path.join(ROOT, "tests", "fixtures", "vlm", f"{name}-gguf")
                d = os.path.join(OUT, f"{name}-{mix}")
                os.makedirs(d, exist_ok=True)
                quantize(os.path.join(pair, f"{name}-f32.gguf"), os.path.join(d, "model.gguf"), mix)
                mmproj = os.path.join(pair, f"mmproj-{name}-f32.gguf")
                if name == "mistral3-pair-tiny":
                    staged = os.path.join(stage, f"mmproj-{name}-img-break-f32.gguf")
                    with_img_break(mmproj, staged, os.path.join(ROOT, "tests", "fixtures", "vlm", name))
                    mmproj = staged
                quantize(mmproj, os.path.join(d, "mmproj.gguf"), mix)
            d = os.path.join(OUT, f"qwen2-bias-{mix}")
            os.makedirs(d, exist_ok=True)
            quantize(qwen2_f32, os.path.join(d, "model.gguf"), mix)


main()
