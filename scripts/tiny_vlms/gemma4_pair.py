"""gemma4-pair-tiny: gemma4-tiny with a tokenizer of real Gemma's kind, for llama.cpp's GGUF + mmproj pair
(scripts/make_gguf_pairs.sh gemma4), for scripts/make_tiny_vlms.py.

The model, processor, chat template, cases and seed logic are gemma4-tiny's (tiny_vlms/gemma4.py) but for the tokenizer
and 3 KV-shared layers in place of 2 (see gemma4_pair_spec). llama.cpp's converter reads a Gemma 4 vocabulary with
gguf.LlamaHfVocab, which takes only a BPE model with `byte_fallback: true` and a `Sequence` decoder, as google/gemma-4-*
have (gemma4-tiny's byte-level BPE stops it at "Cannot find Llama BPE tokenizer"). This one is built as real Gemma 4's
tokenizer.json is (transformers 5's GemmaTokenizer): BPE with byte fallback and `<unk>`, normalizer Replace(" ", "▁"),
the pre-tokenizer Split(" ", merged_with_previous) (a no-op after the normalizer: BPE runs over the whole text, as
llama.cpp's `gemma4` tokenizer does, which splits only at newlines), decoder Sequence[Replace("▁", " "), ByteFallback,
Fuse], <bos> prepended by the post-processor. Ids: gemma4-tiny's specials first (<pad> 0, <eos> 1, <bos> 2, <unk> 3,
<mask> 4, <start_of_turn> 5, <end_of_turn> 6), then the 256 byte tokens <0x00>..<0xFF>, "\\n" (a token of its own, in no
merge, as in Gemma's vocabulary: llama.cpp cuts the text at newlines before merging), the corpus's characters and BPE
merges trained within "▁"-led words (so no token holds "▁" past its first character), and the Gemma 4 specials appended
after the base vocabulary as in gemma4-tiny.
"""
import json

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from make_tiny_vlms import CORPUS, append_special
from tiny_vlms.families import GEMMA_SPECIALS
from tiny_vlms.gemma4 import gemma4_spec

BYTES = [f"<0x{b:02X}>" for b in range(256)]


def gemma_spm_tokenizer(n_trained=360):
    """The base vocabulary: GEMMA_SPECIALS, the byte tokens, "\\n", then n_trained characters and merges."""
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer = normalizers.Replace(" ", "▁")
    # Training only: words start at "▁", so merges never join two words (real Gemma's pieces are "▁word"-like).
    trainer_tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=n_trained, show_progress=False)
    trainer_tok.train_from_iterator(CORPUS.split("\n"), trainer)
    trained = sorted(trainer_tok.get_vocab().items(), key=lambda kv: kv[1])
    vocab = {t: i for i, t in enumerate(GEMMA_SPECIALS + BYTES + ["\n"])}
    for t, _ in trained:
        assert t not in vocab, t
        vocab[t] = len(vocab)
    merges = _merges(trainer_tok)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True,
                               dropout=None))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens(GEMMA_SPECIALS)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", vocab["<bos>"])])
    return tok


def _merges(tok):
    """The trained merges, in rank order, as (left, right) pairs (read back from the model's JSON form)."""
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]


def gemma4_pair_spec():
    # 3 KV-shared layers (gemma4-tiny: 2): llama.cpp (llama-model.cpp, create_memory) has a shared layer reuse the
    # cache of layer n_layer_kv_from_start - 2 if it is a sliding one, else - 1, which is transformers' rule (the last
    # unshared layer of the same type) only where the last unshared layer is a full one and the one before it sliding,
    # as in google/gemma-4-E2B (35 layers, the last 20 shared, layer 14 full). gemma4-tiny's [s, s, f, s, s, f] with 2
    # shared has layer 3 (sliding) last: llama.cpp would give layer 4 the full layer 2's cache and stops at
    # GGML_ASSERT(map_layer_ids.find(il_reuse) != map_layer_ids.end()). With 3 shared, layers 3 and 4 reuse layer 1's
    # keys and values and layer 5 layer 2's in both. Seeds as gemma4-tiny's, from 1620.
    spec = gemma4_spec(raw_tokenizer=gemma_spm_tokenizer(), kv_shared_layers=3)
    return dict(spec, name="gemma4-pair-tiny")


# The folders this module writes, for scripts/make_tiny_vlms.py.
SPECS = {"gemma4-tiny": gemma4_spec, "gemma4-pair-tiny": gemma4_pair_spec}
