"""The text side of shapes-vlm: the prompt frame, the chat template and the byte-level BPE tokenizer.

Prompt (what the chat template renders for one user message with add_generation_prompt):
    <|bos|>Question: {question}\nAnswer:
Target (loss only here):
    ' {answer}' + <|eos|>
The image is not in the text: its patch tokens always go before the text tokens.
"""
import json
import os
import random

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import data

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIALS = [BOS, EOS, PAD]  # ids 0, 1, 2

# Jinja, for transformers' apply_chat_template and minijinja. A string content is used as is; a
# list of parts contributes its text parts (image parts are dropped: the image goes before the text).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{- bos_token + 'Question: ' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '\\nAnswer: ' + message['content'] + eos_token -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '\\nAnswer:' -}}{%- endif -%}"
)


def prompt(question):
    return f"{BOS}Question: {question}\nAnswer:"


def corpus(n=20000, seed=12345):
    """Every task's text, from n training scenes."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        scene = data.make_scene(rng.randrange(data.TRAIN_SEEDS))
        for qa in data.questions(scene).values():
            for q, a in qa:
                lines.append(f"Question: {q}\nAnswer: {a}")
    return lines


def train_tokenizer(vocab_size=512):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    return tok


class Text:
    """Encoding of prompts and targets with a trained tokenizer."""

    def __init__(self, tok):
        self.tok = tok
        self.bos, self.eos, self.pad = (tok.token_to_id(s) for s in SPECIALS)

    @classmethod
    def load(cls, folder):
        return cls(Tokenizer.from_file(os.path.join(folder, "tokenizer.json")))

    def prompt_ids(self, question):
        return self.tok.encode(prompt(question), add_special_tokens=False).ids

    def target_ids(self, answer):
        return self.tok.encode(" " + answer, add_special_tokens=False).ids + [self.eos]

    def decode(self, ids):
        ids = list(ids)
        if self.eos in ids:
            ids = ids[:ids.index(self.eos)]
        return self.tok.decode(ids).strip()


def save_tokenizer(tok, folder):
    tok.save(os.path.join(folder, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": 256,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
