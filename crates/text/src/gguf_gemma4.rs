//! llama.cpp's `gemma4` vocabulary (`tokenizer.ggml.model = gemma4`, `llama-vocab.cpp`): a BPE
//! over the text with every space as `▁` (`escape_whitespaces`), split only at runs of newlines
//! (`[^\n]+|[\n]+`), merged by rank over raw UTF-8 (no byte-level mapping), a piece outside the
//! vocabulary falling back to its `<0xNN>` byte tokens; decoded `▁` → space, bytes fused. The
//! same ids as the checkpoint's own `tokenizer.json` (Gemma's `GemmaTokenizer`: BPE with
//! `byte_fallback`, normalizer `Replace(" ", "▁")`).

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::Replace;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{DecoderWrapper, SplitDelimiterBehavior};

use crate::error::{Result, TextError};

/// The `gemma4` BPE of `vocab` and `merges` (rank order), unknown pieces as `unk` (the
/// `<unk>` token, where the file names one) after their bytes are tried.
pub(crate) fn tokenizer(
    vocab: Vocab,
    merges: Vec<(String, String)>,
    unk: Option<String>,
) -> Result<tokenizers::Tokenizer> {
    let mut builder = BPE::builder().vocab_and_merges(vocab, merges).byte_fallback(true).fuse_unk(true);
    if let Some(unk) = unk {
        builder = builder.unk_token(unk);
    }
    let bpe = builder.build().map_err(|e| TextError::Tokenize(format!("building gemma4 BPE from GGUF: {e}")))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);
    let space = Replace::new(" ", "▁").map_err(|e| TextError::Tokenize(format!("gemma4 space normalizer: {e}")))?;
    inner.with_normalizer(Some(space));
    let newlines = Split::new(SplitPattern::Regex(r"\n+".into()), SplitDelimiterBehavior::Isolated, false)
        .map_err(|e| TextError::Tokenize(format!("gemma4 newline split: {e}")))?;
    inner.with_pre_tokenizer(Some(newlines));
    let unspace = Replace::new("▁", " ").map_err(|e| TextError::Tokenize(format!("gemma4 space decoder: {e}")))?;
    let decoder =
        DecoderSequence::new(vec![DecoderWrapper::Replace(unspace), ByteFallback::new().into(), Fuse::new().into()]);
    inner.with_decoder(Some(decoder));
    Ok(inner)
}
