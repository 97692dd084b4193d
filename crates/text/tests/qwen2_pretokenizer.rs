//! A GGUF tokenizer with `tokenizer.ggml.pre` `qwen2` (Qwen2-VL, Qwen2.5-VL text GGUFs) splits and
//! normalizes text as transformers' `Qwen2Tokenizer` does: the fixture's vocabulary is Qwen2's first
//! 3000 merges and the ids are transformers' for contractions, digits, CJK, newlines, runs of spaces,
//! punctuation, decomposed accents and a special token (scripts/qwen2_tokenizer_fixture.py writes both).

use std::path::PathBuf;

use anyhow::{Context, Result};
use tessera_text::Tokenizer;

#[test]
fn qwen2_gguf_tokenizer_gives_transformers_ids() -> Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen2_tokenizer");
    let gguf = dir.join("vocab.gguf");
    let mut file = std::fs::File::open(&gguf).with_context(|| gguf.display().to_string())?;
    let tok = Tokenizer::from_gguf(&candle_core::quantized::gguf_file::Content::read(&mut file)?)?;
    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json"))?)?;
    let texts = reference["texts"].as_array().context("texts")?;
    let ids = reference["ids"].as_array().context("ids")?;
    assert_eq!(texts.len(), ids.len());
    assert!(texts.len() >= 10, "the fixture has its texts");
    for (text, want) in texts.iter().zip(ids) {
        let text = text.as_str().context("a text")?;
        let want: Vec<u32> = serde_json::from_value(want.clone())?;
        assert_eq!(tok.encode(text, false)?, want, "{text:?}");
    }
    Ok(())
}
