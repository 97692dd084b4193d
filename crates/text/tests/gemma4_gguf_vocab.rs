//! llama.cpp's `gemma4` vocabulary (`tokenizer.ggml.model = gemma4`) read from the Gemma 4 pair's
//! text GGUF (tests/fixtures/vlm/gemma4-pair-tiny-gguf, written by llama.cpp's converter) gives
//! the ids of the checkpoint's own `tokenizer.json` (`GemmaTokenizer`: BPE over `▁`-spaced text
//! with byte fallback) on ASCII, spaces, newline runs, text outside the vocabulary (its UTF-8
//! bytes as `<0xNN>` tokens), and the special tokens (never split), with and without the BOS
//! `add_bos_token` asks for; decoding gives the text back. The rendered text-only prompt gives
//! transformers' `input_ids` (reference.json).

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use tessera_text::Tokenizer;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/vlm")
}

fn gguf_tokenizer() -> Result<Tokenizer> {
    let path = fixtures().join("gemma4-pair-tiny-gguf/gemma4-pair-tiny-f32.gguf");
    let mut file = std::fs::File::open(&path).with_context(|| path.display().to_string())?;
    Ok(Tokenizer::from_gguf(&candle_core::quantized::gguf_file::Content::read(&mut file)?)?)
}

const TEXTS: &[&str] = &[
    "Hello, who are you?",
    "Describe this image.",
    "the cat sat on the mat",
    "  two leading spaces and   three inside ",
    "line one\nline two\n\n\nafter three newlines\n",
    "\n",
    "ümlaut, naïve café — 猫 🐱",
    "x\u{7f}y\ttab",
    "<|turn>user\n<|image|>What is in this photo?<turn|>\n<|turn>model\n",
    "<bos><start_of_turn>user hi<end_of_turn><|channel>thought<channel|><|\"|>",
    "a<pad>b<unk>c<mask>d<|tool_response>e",
    "",
];

#[test]
fn gemma4_gguf_vocabulary_gives_the_folder_tokenizers_ids() -> Result<()> {
    let gguf = gguf_tokenizer()?;
    let folder = Tokenizer::from_file(&fixtures().join("gemma4-pair-tiny/tokenizer.json"))?;
    assert_eq!(gguf.vocab_size(), folder.vocab_size());
    let (mut fallback, mut specials) = (0, 0);
    for text in TEXTS {
        for add_special in [false, true] {
            let want = folder.encode(text, add_special)?;
            let got = gguf.encode(text, add_special)?;
            assert_eq!(got, want, "{text:?} (add_special_tokens {add_special})");
            if add_special {
                assert_eq!(got.first(), Some(&2), "{text:?}: the BOS");
            }
        }
        let ids = gguf.encode(text, false)?;
        fallback += ids.iter().filter(|&&i| (7..=262).contains(&i)).count();
        specials += ids.iter().filter(|&&i| i <= 6 || i >= 624).count();
        // Decoding gives the text back (specials kept).
        assert_eq!(gguf.decode(&ids, false)?, *text, "{ids:?}");
        assert_eq!(gguf.decode(&ids, false)?, folder.decode(&ids, false)?, "{text:?}");
        assert_eq!(gguf.decode(&ids, true)?, folder.decode(&ids, true)?, "{text:?}: specials skipped");
    }
    ensure!(fallback >= 10, "the texts reach the byte fallback ({fallback} byte tokens)");
    // A character outside the vocabulary is its UTF-8 bytes (`<0xNN>` is id 7 + NN).
    let cat: Vec<u32> = "🐱".bytes().map(|b| 7 + u32::from(b)).collect();
    assert_eq!(gguf.encode("🐱", false)?, cat, "the bytes of U+1F431");
    ensure!(specials >= 12, "the texts hold special tokens ({specials})");
    // Every vocabulary entry is the same id on both sides.
    for id in 0..folder.vocab_size() as u32 {
        assert_eq!(gguf.id_to_token(id), folder.id_to_token(id), "id {id}");
    }
    assert_eq!(
        (gguf.special().bos, gguf.special().eos_ids.as_slice(), gguf.special().pad),
        (Some(2), &[1][..], Some(0))
    );
    Ok(())
}

#[test]
fn the_rendered_prompt_gives_transformers_input_ids() -> Result<()> {
    let gguf = gguf_tokenizer()?;
    let path = fixtures().join("gemma4-pair-tiny/reference.json");
    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let cases = reference["cases"].as_array().context("cases")?;
    let case = cases.iter().find(|c| c["name"] == "text_only").context("text_only")?;
    let rendered = case["rendered"].as_str().context("rendered")?;
    let want: Vec<u32> = serde_json::from_value(case["input_ids"].clone())?;
    assert_eq!(gguf.encode(rendered, false)?, want);
    let without_bos = rendered.strip_prefix("<bos>").context("<bos>")?;
    assert_eq!(gguf.encode(without_bos, true)?, want, "the BOS add_bos_token adds");
    Ok(())
}
