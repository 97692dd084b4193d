//! Tokenizer files at the edges of the vocabulary: ids with no token decode as empty text (as
//! transformers decodes them), and an added token with no text is refused at load.

use std::path::PathBuf;

use anyhow::Result;
use tessera_text::Tokenizer;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn llama_tokenizer() -> PathBuf {
    root().join("tests/fixtures/tiny/llama-gqa/tokenizer.json")
}

/// A checkpoint's embedding may have more rows than its tokenizer has tokens (Qwen2-VL: 151936
/// rows, ~151665 tokens), so a model can sample an id with no token: it decodes as nothing, in a
/// whole decode and in the stream, and the text around it is unchanged.
#[test]
fn ids_past_the_vocabulary_decode_as_empty_text() -> Result<()> {
    let tok = Tokenizer::from_file(&llama_tokenizer())?;
    let past = [tok.vocab_size() as u32, tok.vocab_size() as u32 + 127, u32::MAX];
    for id in past {
        assert_eq!(tok.id_to_token(id), None, "id {id} has a token");
        assert_eq!(tok.decode(&[id], false)?, "");
        assert_eq!(tok.decode(&[id], true)?, "");
    }
    let ids = tok.encode("Hello, world! The café is naïve.", false)?;
    assert!(ids.len() > 4, "{ids:?}");
    let expected = tok.decode(&ids, true)?;
    assert!(!expected.is_empty());
    // The same ids with one id past the vocabulary after each.
    let mixed: Vec<u32> = ids.iter().zip(past.iter().cycle()).flat_map(|(&a, &b)| [a, b]).collect();
    assert_eq!(tok.decode(&mixed, true)?, expected);
    let mut stream = tok.decode_stream(true);
    let mut pieces = String::new();
    for &id in &mixed {
        let piece = stream.step(id)?;
        if past.contains(&id) {
            assert_eq!(piece, None, "id {id} gave text");
        }
        pieces.push_str(&piece.unwrap_or_default());
    }
    assert_eq!(pieces, expected);
    Ok(())
}

/// An added token whose `content` is empty would be split out of every prompt at every position;
/// loading names the file and the token's id.
#[test]
fn an_added_token_with_empty_content_is_refused() -> Result<()> {
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(llama_tokenizer())?)?;
    let added = json["added_tokens"].as_array_mut().ok_or_else(|| anyhow::anyhow!("no added_tokens"))?;
    let id = 384; // the next id after the fixture's 384 tokens
    added.push(serde_json::json!({"id": id, "content": "", "single_word": false, "lstrip": false,
                                  "rstrip": false, "normalized": false, "special": true}));
    let dir = std::env::temp_dir().join(format!("tessera-text-vocabulary-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, serde_json::to_string(&json)?)?;
    let result = Tokenizer::from_file(&path);
    std::fs::remove_dir_all(&dir)?;
    let err = result.expect_err("an empty added token was accepted").to_string();
    assert!(err.contains("tokenizer.json") && err.contains(&format!("added token id {id}")), "{err}");
    assert!(err.contains("empty"), "{err}");
    Ok(())
}
