"""Hostile model files: GGUF, safetensors, config.json, processor files."""

from .formats import *  # noqa: F401,F403

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
            write_json(d / "config.json", edited(base, fields))
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


def edited(base: dict, fields: dict) -> dict:
    """A copy of `base` with `fields` set, and those given as DELETE removed."""
    out = dict(base)
    for k, v in fields.items():
        if v is DELETE:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def gen_processor(c: Corpus):
    cls = "processor"
    run = ["generate", "--model", "{case}", "--image", SHAPES_IMAGE, "--prompt", "How many shapes are there?"]
    base = read_json(REPO / SHAPES / "preprocessor_config.json")

    def case(name, fields, words, expect="error"):
        d = clone_model(SHAPES, c.dir(name))
        write_json(d / "preprocessor_config.json", edited(base, fields))
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
