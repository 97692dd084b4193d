//! A GGUF's embedded tokenizer against llama.cpp's own vocabulary tests: `cargo run --release -p
//! tessera-text --example gguf_vocab_check -- LLAMA_CPP/models/ggml-vocab-qwen2.gguf` encodes
//! each text of the `.gguf.inp` file beside it (texts separated by `__ggml_vocab_test__` lines)
//! and compares the ids with the `.gguf.out` file's line for it (what llama.cpp's
//! `test-tokenizer-0` expects, which `convert_hf_to_gguf_update.py` wrote from the model's
//! Hugging Face tokenizer). Prints each mismatch and the count; exits non-zero on any.
use anyhow::{bail, Context, Result};
use tessera_text::Tokenizer;

fn main() -> Result<()> {
    let path = std::env::args().nth(1).context("usage: gguf_vocab_check VOCAB.gguf")?;
    let mut file = std::fs::File::open(&path).with_context(|| path.clone())?;
    let tok = Tokenizer::from_gguf(&candle_core::quantized::gguf_file::Content::read(&mut file)?)?;
    let inp = std::fs::read_to_string(format!("{path}.inp"))?;
    let out = std::fs::read_to_string(format!("{path}.out"))?;
    // As test-tokenizer-0 reads it: each text ends at a separator (the last one too).
    let sep = "\n__ggml_vocab_test__\n";
    let texts: Vec<&str> = inp.strip_suffix(sep).unwrap_or(&inp).split(sep).collect();
    let want: Vec<&str> = out.lines().collect();
    if texts.len() != want.len() {
        bail!("{} texts but {} id lines", texts.len(), want.len());
    }
    let mut bad = 0;
    for (text, want) in texts.iter().zip(&want) {
        let got = tok.encode(text, false)?.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
        if got != want.trim() {
            bad += 1;
            println!("{text:?}\n  tessera   {got}\n  llama.cpp {}", want.trim());
        }
    }
    println!("{path}: {} of {} texts give llama.cpp's ids", texts.len() - bad, texts.len());
    if bad > 0 {
        bail!("{bad} mismatches");
    }
    Ok(())
}
