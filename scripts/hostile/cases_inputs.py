"""Hostile inputs besides model files: tokenizers, images, prompts, mmproj pairs, flags."""

from .formats import *  # noqa: F401,F403

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
    its type and length fields) replaced by `new`, of the same length. The search starts past the
    value's 4-byte type field, which can hold the same bytes (a UINT32 is type 4)."""
    data = bytearray(src.read_bytes())
    at = data.index(key) + len(key)
    found = data.index(old, at + 4)
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
    # Gemma 3's mmproj with SmolVLM's Llama (no <image_soft_token>), and SmolVLM's with Gemma 3's
    # text model (no <image>): the image token the projector needs is not in the vocabulary.
    gemma3_text = "{repo}/" + pairs + "gemma3-tiny-gguf/gemma3-tiny-f32.gguf"
    gemma3_mmproj = "{repo}/" + pairs + "gemma3-tiny-gguf/mmproj-gemma3-tiny-f32.gguf"
    c.add(cls, "mmproj-gemma3-with-a-llama", gen(smol_text, gemma3_mmproj), "error",
          [tail(gemma3_mmproj), "gemma3", "<image_soft_token>"])
    c.add(cls, "mmproj-idefics3-with-gemma3", gen(gemma3_text, smol_mmproj), "error",
          [tail(smol_mmproj), "idefics3", "<image>"])
    # Mistral 3's Pixtral mmproj with Gemma 3's text model (no [IMG]): both files, the text model's
    # family; and with its spatial_merge_size changed, which its patch merger's shape contradicts.
    pixtral = pairs + "mistral3-pair-tiny-gguf/mmproj-mistral3-pair-tiny-f32.gguf"
    c.add(cls, "mmproj-pixtral-with-gemma3", gen(gemma3_text, "{repo}/" + pixtral), "error",
          [pixtral.split("tests/fixtures/", 1)[1], tail(gemma3_text), "pixtral", "gemma3_text", "[IMG]"])
    patched_copy(REPO / pixtral, c.dir("mmproj-pixtral-merge-3") / "mmproj-merge3.gguf",
                 b"clip.vision.spatial_merge_size", struct.pack("<I", 2), struct.pack("<I", 3))
    mistral3_text = "{repo}/" + pairs + "mistral3-pair-tiny-gguf/mistral3-pair-tiny-f32.gguf"
    c.add(cls, "mmproj-pixtral-merge-3", gen(mistral3_text, "{case}/mmproj-merge3.gguf"), "error",
          ["{case}/mmproj-merge3.gguf", "mm.patch_merger.weight", "spatial_merge_size", "3"])
    # MiniCPM-V 4.6's mmproj with Gemma 3's text model (no <|image_pad|>): both files, the text
    # model's family; and with its merge factor changed to one MiniCPM-V 4.6 does not have.
    minicpm = pairs + "minicpm-v4.6-pair-tiny-gguf/mmproj-minicpm-v4.6-pair-tiny-f32.gguf"
    c.add(cls, "mmproj-minicpm-with-gemma3", gen(gemma3_text, "{repo}/" + minicpm), "error",
          [tail(minicpm), tail(gemma3_text), "minicpmv4_6", "gemma3_text", "<|image_pad|>"])
    patched_copy(REPO / minicpm, c.dir("mmproj-minicpm-scale-3") / "mmproj-scale3.gguf",
                 b"clip.vision.projector.scale_factor", struct.pack("<I", 4), struct.pack("<I", 3))
    minicpm_text = "{repo}/" + pairs + "minicpm-v4.6-pair-tiny-gguf/minicpm-v4.6-pair-tiny-f32.gguf"
    c.add(cls, "mmproj-minicpm-scale-3", gen(minicpm_text, "{case}/mmproj-scale3.gguf"), "error",
          ["{case}/mmproj-scale3.gguf", "scale_factor", "3", "2 or 4"])
    # InternVL's mmproj with Gemma 3's text model (no <IMG_CONTEXT>), and with a pixel shuffle
    # factor that does not divide its tiles' 4x4 patches.
    internvl = pairs + "internvl-tiny-gguf/mmproj-internvl-tiny-f32.gguf"
    c.add(cls, "mmproj-internvl-with-gemma3", gen(gemma3_text, "{repo}/" + internvl), "error",
          [tail(internvl), tail(gemma3_text), "internvl", "gemma3_text", "<IMG_CONTEXT>"])
    patched_copy(REPO / internvl, c.dir("mmproj-internvl-scale-3") / "mmproj-scale3.gguf",
                 b"clip.vision.projector.scale_factor", struct.pack("<I", 2), struct.pack("<I", 3))
    internvl_text = "{repo}/" + pairs + "internvl-tiny-gguf/internvl-tiny-f32.gguf"
    c.add(cls, "mmproj-internvl-scale-3", gen(internvl_text, "{case}/mmproj-scale3.gguf"), "error",
          ["{case}/mmproj-scale3.gguf", "scale_factor", "3", "4×4 patches"])
    # Gemma 4's mmproj (gemma4v) with Gemma 3's text model (no <|image|>), and Gemma 3's mmproj
    # with Gemma 4's text model (no <image_soft_token>).
    gemma4_mmproj = pairs + "gemma4-pair-tiny-gguf/mmproj-gemma4-pair-tiny-f32.gguf"
    c.add(cls, "mmproj-gemma4-with-gemma3", gen(gemma3_text, "{repo}/" + gemma4_mmproj), "error",
          [tail(gemma4_mmproj), tail(gemma3_text), "gemma4v", "gemma3_text", "<|image|>"])
    gemma4_text = pairs + "gemma4-pair-tiny-gguf/gemma4-pair-tiny-f32.gguf"
    c.add(cls, "mmproj-gemma3-with-gemma4", gen("{repo}/" + gemma4_text, gemma3_mmproj), "error",
          [tail(gemma3_mmproj), tail(gemma4_text), "gemma3", "gemma4_text", "<image_soft_token>"])
    # The budget Gemma 4's mmproj leaves open, given as one its processor does not take.
    c.add(cls, "mmproj-gemma4-budget-100",
          gen("{repo}/" + gemma4_text, "{repo}/" + gemma4_mmproj) + ["--image-max-tokens", "100"], "error",
          [tail(gemma4_mmproj), "--image-max-tokens", "100", "70, 140, 280, 560, 1120"])
    # Gemma 4's text GGUF whose every layer shares another's keys and values.
    patched_copy(REPO / gemma4_text, c.dir("mmproj-gemma4-text-shared-6") / "gemma4-shared6.gguf",
                 b"gemma4.attention.shared_kv_layers", struct.pack("<I", 3), struct.pack("<I", 6))
    c.add(cls, "mmproj-gemma4-text-shared-6", gen("{case}/gemma4-shared6.gguf", "{repo}/" + gemma4_mmproj), "error",
          ["{case}/gemma4-shared6.gguf", "gemma4.attention.shared_kv_layers", "6"])


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
