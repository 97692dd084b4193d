"""The same prompt for tessera and llama-mtmd-cli (scripts/peers/mtmd_compare.sh): renders a text
GGUF's chat template (`tokenizer.chat_template`) for one user turn — an image part, then the
question — with the assistant's turn opened, as transformers' `apply_chat_template` does, and
writes it twice: OURS as tessera's `--raw` prompt (the template's own image marker, which tessera
expands into the image's tokens) and THEIRS as llama-mtmd-cli's (that marker replaced by
`<__media__>`, where libmtmd puts the image and the tokens it wraps it in).

llama-mtmd-cli cannot be given image parts: it passes the user's message as one string with
`<__media__>` in front, so a template that renders an image part with its own separator (LLaVA's
`<image>\\n`, LLaVA-interleave's `<image>` then `\\n` before the text) renders another prompt
than the Hugging Face processor does. Run with llama.cpp's converter venv (jinja2, gguf-py).

Also writes OURS.specials.json: the text GGUF's control tokens (`tokenizer.ggml.token_type` 3) as
{text: id}, which llama-mtmd-cli prints in its answer and tessera's text leaves out.

Usage: mtmd_prompt.py GGUF_PY_DIR MODEL.gguf QUESTION MARKER OURS THEIRS
"""
import datetime
import json
import sys

import jinja2
from jinja2.ext import Extension

gguf_py, model, question, marker, ours, theirs = sys.argv[1:7]
sys.path.insert(0, gguf_py)
import gguf  # noqa: E402


class Generation(Extension):
    """transformers' `{% generation %}` block: renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


reader = gguf.GGUFReader(model)
field = reader.fields.get("tokenizer.chat_template")
if field is None:
    sys.exit(f"{model}: no tokenizer.chat_template")
template = bytes(field.parts[field.data[0]]).decode()
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", Generation])


def raise_exception(message):
    raise jinja2.TemplateError(message)


env.globals["raise_exception"] = raise_exception
# Mistral's templates date their default system prompt (transformers' `strftime_now`).
env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
text = env.from_string(template).render(messages=messages, add_generation_prompt=True, bos_token="", eos_token="")
if text.count(marker) != 1:
    sys.exit(f"{model}: the chat template rendered {text.count(marker)} image markers `{marker}`, not one")
with open(ours, "w") as f:
    f.write(text)
with open(theirs, "w") as f:
    f.write(text.replace(marker, "<__media__>"))
tokens, types = reader.fields["tokenizer.ggml.tokens"], reader.fields["tokenizer.ggml.token_type"]
specials = {
    bytes(tokens.parts[t]).decode(errors="replace"): i
    for i, (t, k) in enumerate(zip(tokens.data, types.data))
    if int(types.parts[k][0]) == 3
}
with open(ours + ".specials.json", "w") as f:
    json.dump(specials, f)
