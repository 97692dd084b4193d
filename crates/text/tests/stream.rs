//! Streaming detokenization against one decode of all ids, on the tokenizers of the fixtures
//! (byte-level BPE, SentencePiece-style BPE with byte fallback, Gemma's) and the SmolLM2 GGUF's.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tessera_text::Tokenizer;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Multi-byte characters split across byte tokens, leading spaces, newlines, special-looking text.
const TEXTS: &[&str] = &[
    "Hello, world! The café is naïve — 東京 🦀🦀 done.\n\n  indented\tand tabbed",
    " leading space, then emoji at the end 👩‍🔬",
    "数学 and ∑∫√ symbols; ü ß é 😀",
];

fn check(tok: &Tokenizer, what: &str) -> Result<usize> {
    let mut checked = 0;
    for text in TEXTS {
        let ids = tok.encode(text, true)?;
        for skip in [true, false] {
            let mut stream = tok.decode_stream(skip);
            let mut pieces = String::new();
            for &id in &ids {
                if let Some(p) = stream.step(id)? {
                    assert!(!p.contains('\u{FFFD}'), "{what}: a piece with a broken character: {p:?}");
                    pieces.push_str(&p);
                }
            }
            let full = tok.decode(&ids, skip)?;
            assert_eq!(pieces, full, "{what} (skip special {skip}): streamed pieces vs one decode of {text:?}");
            assert_eq!(stream.ids(), &ids[..]);
            checked += 1;
        }
    }
    Ok(checked)
}

#[test]
fn streamed_pieces_concatenate_to_the_full_decode() -> Result<()> {
    let mut n = 0;
    for dir in [
        "tests/fixtures/vlm/smolvlm-tiny",
        "tests/fixtures/vlm/llava-tiny",
        "tests/fixtures/vlm/llava-interleave-tiny",
        "tests/fixtures/tiny/gemma",
        "tests/fixtures/tiny/llama-gqa",
    ] {
        let tok = Tokenizer::from_file(&root().join(dir).join("tokenizer.json"))?;
        n += check(&tok, dir)?;
    }
    let gguf = root().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut file =
        std::fs::File::open(&gguf).with_context(|| format!("{}: run scripts/fetch_smollm2.sh", gguf.display()))?;
    let content = candle_core::quantized::gguf_file::Content::read(&mut file)?;
    n += check(&Tokenizer::from_gguf(&content)?, "SmolLM2 GGUF")?;
    assert_eq!(n, 6 * TEXTS.len() * 2);
    Ok(())
}

/// A stream that keeps some special tokens (the markers tool-call and reasoning parsers read)
/// writes those and skips the others.
#[test]
fn kept_special_tokens_stay_in_the_stream() -> Result<()> {
    let gguf = root().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut file =
        std::fs::File::open(&gguf).with_context(|| format!("{}: run scripts/fetch_smollm2.sh", gguf.display()))?;
    let tok = Tokenizer::from_gguf(&candle_core::quantized::gguf_file::Content::read(&mut file)?)?;
    let start = tok.token_to_id("<|im_start|>").context("<|im_start|>")?;
    let ids = tok.encode("<|im_start|>user\nhi café<|im_end|>\n", false)?;
    assert!(ids.contains(&start) && ids.len() > 4, "{ids:?}");
    let mut stream = tok.decode_stream_keeping(&[start]);
    let mut text = String::new();
    for &id in &ids {
        text.push_str(&stream.step(id)?.unwrap_or_default());
    }
    assert_eq!(text, "<|im_start|>user\nhi café\n");
    let mut skipping = tok.decode_stream(true);
    let mut skipped = String::new();
    for &id in &ids {
        skipped.push_str(&skipping.step(id)?.unwrap_or_default());
    }
    assert_eq!(skipped, "user\nhi café\n");
    Ok(())
}
