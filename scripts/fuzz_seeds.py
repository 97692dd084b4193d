"""Seeds scripts/fuzz.sh's corpora from the files the tests already have (stdlib only).

    python3 scripts/fuzz_seeds.py fuzz/corpus

gguf: small GGUF v3 files written here (a Llama header with a 5-token vocabulary, F32 and Q8_0 tensors);
safetensors: the fixtures' files under 256 KiB and small hand-written ones; config_json: every config.json and
preprocessor_config.json; chat_template: every chat template the fixtures ship; image: the test images;
mmproj: each tiny pair's mmproj after the byte that picks its text model (fuzz_targets/mmproj.rs's PAIRS);
http_body: request bodies for each route after the byte that picks it (fuzz_targets/http_body.rs's ROUTES).
"""
import base64
import glob
import json
import os
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX = 256 * 1024


def gguf(kv, tensors, align=32):
    s = lambda b: struct.pack("<Q", len(b)) + b  # noqa: E731
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, ty, payload in kv:
        out += s(key.encode()) + struct.pack("<I", ty) + payload
    offset, blobs = 0, []
    for name, dims, ty, data in tensors:
        out += s(name.encode()) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ty, offset)
        blobs.append(data + b"\0" * ((-len(data)) % align))
        offset += len(blobs[-1])
    out += b"\0" * ((-len(out)) % align)
    return out + b"".join(blobs)


def string(v):
    return struct.pack("<Q", len(v.encode())) + v.encode()


def llama_gguf(q8):
    u32 = lambda v: struct.pack("<I", v)  # noqa: E731
    f32 = lambda v: struct.pack("<f", v)  # noqa: E731
    tokens = ["<s>", "</s>", "a", "b", "ab"]
    kv = [
        ("general.architecture", 8, string("llama")),
        ("general.alignment", 4, u32(32)),
        ("llama.context_length", 4, u32(64)),
        ("llama.embedding_length", 4, u32(32)),
        ("llama.block_count", 4, u32(1)),
        ("llama.feed_forward_length", 4, u32(64)),
        ("llama.attention.head_count", 4, u32(2)),
        ("llama.attention.head_count_kv", 4, u32(1)),
        ("llama.attention.layer_norm_rms_epsilon", 6, f32(1e-5)),
        ("llama.rope.freq_base", 6, f32(10000.0)),
        ("tokenizer.ggml.model", 8, string("gpt2")),
        ("tokenizer.ggml.tokens", 9, u32(8) + struct.pack("<Q", len(tokens)) + b"".join(string(t) for t in tokens)),
        ("tokenizer.ggml.token_type", 9, u32(5) + struct.pack("<Q", 5) + struct.pack("<5i", 3, 3, 1, 1, 1)),
        ("tokenizer.ggml.merges", 9, u32(8) + struct.pack("<Q", 1) + string("a b")),
        ("tokenizer.ggml.bos_token_id", 4, u32(0)),
        ("tokenizer.ggml.eos_token_id", 4, u32(1)),
        ("tokenizer.chat_template", 8, string("{% for m in messages %}{{ m['content'] }}{% endfor %}")),
    ]

    def dense(rows, cols):
        if q8 and cols % 32 == 0:  # Q8_0: per 32 values an f16 scale and 32 int8s
            block = struct.pack("<e", 0.01) + bytes(range(32))
            return (cols, rows), 8, block * (rows * cols // 32)
        return (cols, rows), 0, b"".join(f32(((i * 7919) % 200 - 100) / 1000) for i in range(rows * cols))

    tensors = []
    for name, rows, cols in [("token_embd.weight", 5, 32), ("blk.0.attn_q.weight", 32, 32),
                             ("blk.0.attn_k.weight", 16, 32), ("blk.0.attn_v.weight", 16, 32),
                             ("blk.0.attn_output.weight", 32, 32), ("blk.0.ffn_gate.weight", 64, 32),
                             ("blk.0.ffn_up.weight", 64, 32), ("blk.0.ffn_down.weight", 32, 64)]:
        dims, ty, data = dense(rows, cols)
        tensors.append((name, dims, ty, data))
    for name in ("blk.0.attn_norm.weight", "blk.0.ffn_norm.weight", "output_norm.weight"):
        tensors.append((name, (32,), 0, f32(1.0) * 32))
    return gguf(kv, tensors)


def safetensors(tensors):
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


# fuzz_targets/mmproj.rs's PAIRS, in its order.
PAIRS = ["smolvlm-tiny", "llava-tiny", "llava-interleave-tiny", "qwen2-vl-tiny", "qwen2.5-vl-tiny", "qwen3-vl-tiny",
         "gemma3-tiny"]
# fuzz_targets/http_body.rs's ROUTES, in its order.
ROUTES = ["chat", "completions", "embeddings", "messages", "count_tokens", "responses"]


def http_bodies(image_url):
    """A few requests of each route: text, an image, streaming, json_schema, tools, reasoning."""
    user = {"role": "user", "content": "What is in the picture?"}
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url}},
                                         {"type": "text", "text": "Describe it."}]}
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                              "parameters": {"type": "object", "properties": {
                                                  "city": {"type": "string"}}, "required": ["city"]}}}
    schema = {"type": "json_schema", "json_schema": {"name": "a", "schema": {
        "type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}}}
    b64 = image_url.split(",", 1)[1]
    anthropic_image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
    return {
        "chat": [
            {"messages": [user], "max_tokens": 3},
            {"messages": [image], "max_tokens": 2, "stream": True, "logprobs": True, "top_logprobs": 2},
            {"messages": [user], "response_format": schema, "temperature": 0.7, "seed": 1},
            {"messages": [user, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
                "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                          {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
             "tools": [tool], "tool_choice": "auto", "stop": ["\n"], "n": 2},
        ],
        "completions": [{"prompt": "Once upon a time", "max_tokens": 3, "echo": True, "logprobs": 2},
                        {"prompt": ["a", "b"], "stream": True}],
        "embeddings": [{"input": "a red circle"}, {"input": ["one", "two"], "encoding_format": "base64"}],
        "messages": [
            {"max_tokens": 3, "system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]},
            {"max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": [
                anthropic_image, {"type": "text", "text": "What shape?"}]}]},
            {"max_tokens": 3, "tools": [{"name": "get_weather", "input_schema": tool["function"]["parameters"]}],
             "messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": [
                 {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}}]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                        "content": "cold"}]}],
             "thinking": {"type": "enabled", "budget_tokens": 1024}, "stop_sequences": ["."]},
        ],
        "count_tokens": [{"messages": [{"role": "user", "content": [anthropic_image,
                                                                    {"type": "text", "text": "Hi"}]}]}],
        "responses": [
            {"input": "Say hi", "max_output_tokens": 3, "instructions": "Be brief."},
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": "What shape?"},
                                                    {"type": "input_image", "image_url": image_url}]}],
             "stream": True, "text": {"format": {"type": "json_schema", "name": "a",
                                                 "schema": schema["json_schema"]["schema"]}}},
            {"input": "Weather?", "tools": [{"type": "function", "name": "get_weather",
                                             "parameters": tool["function"]["parameters"]}]},
        ],
    }


def main():
    out = sys.argv[1]
    targets = ("gguf", "safetensors", "config_json", "chat_template", "image", "mmproj", "http_body")
    seeds = {t: [] for t in targets}
    seeds["gguf"] += [("llama_f32.gguf", llama_gguf(False)), ("llama_q8_0.gguf", llama_gguf(True))]
    seeds["safetensors"] += [
        ("small.safetensors", safetensors([("a", "F32", [2, 3], b"\0" * 24), ("b", "BF16", [4], b"\1" * 8)])),
        ("empty.safetensors", safetensors([])),
    ]
    for p in glob.glob(os.path.join(ROOT, "tests/fixtures/**/*.safetensors"), recursive=True):
        if os.path.getsize(p) <= MAX:
            seeds["safetensors"].append((os.path.relpath(p, ROOT), open(p, "rb").read()))
    for pattern in ("tests/fixtures/**/config.json", "tests/fixtures/**/preprocessor_config.json",
                    "models/shapes-vlm/*config.json"):
        for p in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            seeds["config_json"].append((os.path.relpath(p, ROOT), open(p, "rb").read()))
    for p in glob.glob(os.path.join(ROOT, "tests/fixtures/**/*.json*"), recursive=True) + \
            glob.glob(os.path.join(ROOT, "tests/fixtures/**/*.jinja"), recursive=True):
        text = open(p, encoding="utf-8", errors="replace").read()
        if p.endswith(".jinja"):
            seeds["chat_template"].append((os.path.relpath(p, ROOT), text.encode()))
            continue
        if os.path.basename(p) not in ("tokenizer_config.json", "chat_template.json"):
            continue
        template = json.loads(text).get("chat_template")
        if isinstance(template, str):
            seeds["chat_template"].append((os.path.relpath(p, ROOT), template.encode()))
    for pattern in ("tests/fixtures/images/*", "tests/fixtures/vlm/images/*", "models/shapes-vlm/examples/*.png"):
        for p in glob.glob(os.path.join(ROOT, pattern)):
            if os.path.getsize(p) <= MAX:
                seeds["image"].append((os.path.relpath(p, ROOT), open(p, "rb").read()))
    for pick, name in enumerate(PAIRS):
        for p in glob.glob(os.path.join(ROOT, f"tests/fixtures/vlm/{name}-gguf/mmproj-*.gguf")):
            seeds["mmproj"].append((os.path.relpath(p, ROOT), bytes([pick]) + open(p, "rb").read()))
    png = sorted(glob.glob(os.path.join(ROOT, "models/shapes-vlm/examples/*.png")))[0]
    image_url = "data:image/png;base64," + base64.b64encode(open(png, "rb").read()).decode()
    for pick, (route, bodies) in enumerate(http_bodies(image_url).items()):
        assert route == ROUTES[pick]
        for i, body in enumerate(bodies):
            seeds["http_body"].append((f"{route}-{i}", bytes([pick]) + json.dumps(body).encode()))
    for target, files in seeds.items():
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        for name, data in files:
            with open(os.path.join(d, "seed-" + name.replace("/", "_")), "wb") as f:
                f.write(data)
        print(f"{target}: {len(files)} seeds", file=sys.stderr)


if __name__ == "__main__":
    main()
