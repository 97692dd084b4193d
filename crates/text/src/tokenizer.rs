//! Tokenizers: Hugging Face `tokenizer.json` (the `tokenizers` crate), or a byte-level BPE
//! built from a GGUF file's embedded vocabulary (`tokenizer.ggml.*`, as llama.cpp's
//! `llama-vocab.cpp` reads it), giving the same ids as the model's own `tokenizer.json`.

use std::path::Path;

use candle_core::quantized::gguf_file;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use crate::error::{Result, TextError};

/// Qwen2's pre-tokenizer split (Qwen2-VL-2B-Instruct's tokenizer.json; llama.cpp's
/// `LLAMA_VOCAB_PRE_TYPE_QWEN2` is the same expression with the contractions' cases spelled out):
/// contractions, letters with one leading non-letter, single digits, punctuation runs, newlines,
/// spaces. Its tokenizer.json composes the text (NFC) first; tessera does too (llama.cpp does not).
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Special token ids and strings the generation loop and templates need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub bos_token: Option<String>,
    pub eos_ids: Vec<u32>,
    pub eos_token: Option<String>,
    pub pad: Option<u32>,
}

impl SpecialTokens {
    /// Reads `bos_token`, `eos_token`, `pad_token` (a string or `{"content": …}`) from a
    /// parsed `tokenizer_config.json`, resolving ids with `tok`.
    pub fn from_tokenizer_config(json: &serde_json::Value, tok: &Tokenizer) -> Self {
        let token = |key: &str| -> Option<String> {
            let v = json.get(key)?;
            v.as_str().map(String::from).or_else(|| v.get("content")?.as_str().map(String::from))
        };
        let bos_token = token("bos_token");
        let eos_token = token("eos_token");
        let pad_token = token("pad_token");
        Self {
            bos: bos_token.as_deref().and_then(|t| tok.token_to_id(t)),
            eos_ids: eos_token.as_deref().and_then(|t| tok.token_to_id(t)).into_iter().collect(),
            pad: pad_token.as_deref().and_then(|t| tok.token_to_id(t)),
            bos_token,
            eos_token,
        }
    }
}

#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    special: SpecialTokens,
    /// `inner.get_vocab_size(true)`, which builds the whole vocabulary map on every call: read
    /// once here, not on every decode.
    vocab_size: usize,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").field("vocab_size", &self.vocab_size()).field("special", &self.special).finish()
    }
}

impl Tokenizer {
    /// Loads a Hugging Face `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        if !path.exists() {
            return Err(TextError::TokenizerFile { path: path.to_path_buf(), reason: "no such file".into() });
        }
        let file_err = |reason: String| TextError::TokenizerFile { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
        let inner: tokenizers::Tokenizer = text.parse().map_err(|e: tokenizers::Error| file_err(e.to_string()))?;
        // An added token with no text: the `tokenizers` crate drops it without a word, so its id
        // would decode as nothing and the file means something other than it says.
        if let Some(id) = empty_added_token(&text) {
            return Err(file_err(format!(
                "added token id {id} has empty `content` (a token must stand for some text)"
            )));
        }
        let vocab_size = inner.get_vocab_size(true);
        Ok(Self { inner, special: SpecialTokens::default(), vocab_size })
    }

    /// Builds the tokenizer a GGUF file describes (`tokenizer.ggml.model`: `gpt2`, byte-level BPE;
    /// `gemma4`, BPE over `▁`-spaced text with byte fallback, [`crate::gguf_gemma4`]).
    pub fn from_gguf(content: &gguf_file::Content) -> Result<Self> {
        let md = &content.metadata;
        let meta_err = |key: &str, reason: &str| TextError::GgufMetadata { key: key.into(), reason: reason.into() };
        let get_str = |key: &str| -> Result<Option<&String>> {
            match md.get(key) {
                None => Ok(None),
                Some(v) => v.to_string().map(Some).map_err(|_| meta_err(key, "not a string")),
            }
        };
        let get_id = |key: &str| -> Option<u32> { md.get(key).and_then(|v| v.to_u32().ok()) };
        let model = get_str("tokenizer.ggml.model")?
            .ok_or_else(|| meta_err("tokenizer.ggml.model", "missing: the GGUF has no embedded tokenizer"))?;
        let gemma4 = match model.as_str() {
            "gpt2" => false,
            "gemma4" => true,
            _ => {
                return Err(TextError::Unsupported(format!(
                    "GGUF tokenizer.ggml.model `{model}` (supported: byte-level BPE `gpt2`, `gemma4`)"
                )))
            }
        };
        let tokens = string_array(md, "tokenizer.ggml.tokens")?;
        let merges = string_array(md, "tokenizer.ggml.merges")?;
        let token_types: Vec<i64> = match md.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .to_vec()
                .map_err(|_| meta_err("tokenizer.ggml.token_type", "not an array"))?
                .iter()
                .map(|t| t.to_i32().map(i64::from).map_err(|_| meta_err("tokenizer.ggml.token_type", "not integers")))
                .collect::<Result<_>>()?,
            None => vec![1; tokens.len()],
        };
        if token_types.len() != tokens.len() {
            return Err(meta_err(
                "tokenizer.ggml.token_type",
                &format!("has {} entries for {} tokens", token_types.len(), tokens.len()),
            ));
        }
        let vocab: tokenizers::models::bpe::Vocab =
            tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
        let merges: Vec<(String, String)> = merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| meta_err("tokenizer.ggml.merges", &format!("bad merge `{m}`")))
            })
            .collect::<Result<_>>()?;
        let mut inner = if gemma4 {
            let unk = get_id("tokenizer.ggml.unknown_token_id").and_then(|i| tokens.get(i as usize).cloned());
            crate::gguf_gemma4::tokenizer(vocab, merges, unk)?
        } else {
            let pre_name = get_str("tokenizer.ggml.pre")?.map(String::as_str);
            byte_level_bpe(vocab, merges, pre_name)?
        };

        // Control (3) and user-defined (4) tokens are never split; an empty one (which would
        // match at every position) stays an ordinary vocabulary entry.
        let specials: Vec<AddedToken> = tokens
            .iter()
            .zip(&token_types)
            .filter(|(tok, t)| (**t == 3 || **t == 4) && !tok.is_empty())
            .map(|(tok, _)| AddedToken::from(tok.clone(), true))
            .collect();
        inner.add_special_tokens(&specials);

        let bos = get_id("tokenizer.ggml.bos_token_id");
        let eos = get_id("tokenizer.ggml.eos_token_id");
        let name = |id: Option<u32>| id.and_then(|i| tokens.get(i as usize).cloned());
        let add_bos = md.get("tokenizer.ggml.add_bos_token").and_then(|v| v.to_bool().ok()).unwrap_or(false) || gemma4; // llama.cpp forces a BOS for the gemma4 pre-type
        if add_bos {
            let (Some(bos_id), Some(bos_tok)) = (bos, name(bos)) else {
                return Err(meta_err("tokenizer.ggml.bos_token_id", "add_bos_token is set but no BOS id is given"));
            };
            let post = TemplateProcessing::builder()
                .try_single(format!("{bos_tok} $A"))
                .and_then(|b| b.try_pair(format!("{bos_tok} $A {bos_tok} $B")))
                .map_err(|e| TextError::Tokenize(e.to_string()))?
                .special_tokens(vec![(bos_tok.clone(), bos_id)])
                .build()
                .map_err(|e| TextError::Tokenize(e.to_string()))?;
            inner.with_post_processor(Some(post));
        }
        let special = SpecialTokens {
            bos,
            bos_token: name(bos),
            eos_ids: eos.into_iter().collect(),
            eos_token: name(eos),
            pad: get_id("tokenizer.ggml.padding_token_id"),
        };
        let vocab_size = inner.get_vocab_size(true);
        Ok(Self { inner, special, vocab_size })
    }

    /// Replaces the special tokens (e.g. with those of `tokenizer_config.json`).
    pub fn with_special(mut self, special: SpecialTokens) -> Self {
        self.special = special;
        self
    }

    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// The wrapped `tokenizers::Tokenizer`.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Encodes `text`; `add_special_tokens` applies the post-processor (e.g. a BOS).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, add_special_tokens).map_err(|e| TextError::Tokenize(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`. An id with no token (past the vocabulary: checkpoints pad the
    /// embedding matrix past their tokenizer, Qwen2-VL's 151936 rows for ~151665 tokens, and a
    /// model may sample such an id) decodes as empty text, as transformers decodes it; the
    /// embedding lookup, not this, refuses ids past the embedding.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner.decode(ids, skip_special_tokens).map_err(|e| TextError::Tokenize(e.to_string()))
    }

    /// A streaming detokenizer: feed generated ids one at a time and get each newly completed
    /// piece of text, decoding only the last few ids per step (not the whole text again).
    pub fn decode_stream(&self, skip_special_tokens: bool) -> TextStream<'_> {
        TextStream { tokenizer: self, ids: Vec::new(), prefix: 0, read: 0, skip_special_tokens, dropped: None }
    }

    /// [`decode_stream`](Self::decode_stream) skipping special tokens except `keep` (markers a
    /// parser reads: `[TOOL_CALLS]`, Gemma 4's `<|channel>`), whose text stays in the stream.
    pub fn decode_stream_keeping(&self, keep: &[u32]) -> TextStream<'_> {
        let dropped = self
            .inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(id, t)| t.special && !keep.contains(id))
            .map(|(id, _)| id)
            .collect();
        TextStream {
            tokenizer: self,
            ids: Vec::new(),
            prefix: 0,
            read: 0,
            skip_special_tokens: false,
            dropped: Some(dropped),
        }
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The id of `token` where it is one special token (which decoding may drop and no text
    /// holds), as a grammar names it.
    pub fn special_id(&self, token: &str) -> Option<u32> {
        let added = self.inner.get_added_tokens_decoder();
        added.into_iter().find(|(_, t)| t.special && t.content == token).map(|(id, _)| id)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The bytes each token id stands for (what constrained decoding matches against), with
    /// `None` for special tokens (and ids with no token): byte-level BPE tokens mapped back
    /// through GPT-2's byte-to-character table, SentencePiece pieces with `▁` as a space and
    /// `<0xNN>` as the byte NN. An error for a tokenizer whose decoder is neither.
    pub fn token_bytes(&self) -> Result<Vec<Option<Vec<u8>>>> {
        use tokenizers::DecoderWrapper as D;
        fn kind(d: &D, byte_level: &mut bool, fallback: &mut bool) {
            match d {
                D::ByteLevel(_) => *byte_level = true,
                D::ByteFallback(_) => *fallback = true,
                D::Sequence(seq) => seq.get_decoders().iter().for_each(|d| kind(d, byte_level, fallback)),
                _ => {}
            }
        }
        let (mut byte_level, mut fallback) = (false, false);
        if let Some(d) = self.inner.get_decoder() {
            kind(d, &mut byte_level, &mut fallback);
        }
        if !byte_level && !fallback {
            return Err(TextError::Unsupported(
                "constrained decoding needs a byte-level BPE or byte-fallback (SentencePiece) tokenizer".into(),
            ));
        }
        // GPT-2's table: printable bytes stand for themselves, the others for U+0100 onwards.
        let mut chars = std::collections::HashMap::new();
        let mut next = 0x100u32;
        for b in 0..=255u8 {
            let c = b as char;
            if matches!(c, '!'..='~' | '\u{A1}'..='\u{AC}' | '\u{AE}'..='\u{FF}') {
                chars.insert(c, b);
            } else {
                chars.insert(char::from_u32(next).unwrap_or(c), b);
                next += 1;
            }
        }
        let special: std::collections::HashSet<u32> =
            self.inner.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect();
        Ok((0..self.vocab_size as u32)
            .map(|id| {
                let token = self.inner.id_to_token(id)?;
                if special.contains(&id) {
                    return None;
                }
                if byte_level {
                    return token.chars().map(|c| chars.get(&c).copied()).collect();
                }
                let hex = token.strip_prefix("<0x").and_then(|t| t.strip_suffix('>'));
                match hex.filter(|h| h.len() == 2).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => Some(vec![b]),
                    None => Some(token.replace('\u{2581}', " ").into_bytes()),
                }
            })
            .collect())
    }
}

/// Incremental detokenization (see [`Tokenizer::decode_stream`]). Each step decodes the ids
/// since the last emitted piece twice — with and without the new id — and emits the difference,
/// so decoders that treat the first token specially (SentencePiece's leading space) and
/// byte-level tokens that end mid-character (held back until the character completes) give,
/// piece by piece, exactly the text of one decode of all ids.
#[derive(Debug)]
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    /// Start of the window decoded for context.
    prefix: usize,
    /// Ids before this one have been emitted.
    read: usize,
    skip_special_tokens: bool,
    /// With [`Tokenizer::decode_stream_keeping`]: the special ids left out of the text.
    dropped: Option<std::collections::HashSet<u32>>,
}

impl TextStream<'_> {
    /// Adds `id`; returns the text it completes, or `None` while a character is incomplete (or
    /// the id decodes to nothing, e.g. a skipped special token).
    pub fn step(&mut self, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let decode = |ids: &[u32]| match &self.dropped {
            None => self.tokenizer.decode(ids, self.skip_special_tokens),
            Some(dropped) => {
                let kept: Vec<u32> = ids.iter().copied().filter(|id| !dropped.contains(id)).collect();
                self.tokenizer.decode(&kept, false)
            }
        };
        let before = decode(&self.ids[self.prefix..self.read])?;
        let after = decode(&self.ids[self.prefix..])?;
        if after.len() <= before.len() || after.ends_with('\u{FFFD}') {
            return Ok(None);
        }
        let piece = match after.get(before.len()..) {
            Some(p) if after.starts_with(&before) => p.to_string(),
            // The new id changed earlier text (no decoder here does): emit what differs.
            _ => {
                let common = before.chars().zip(after.chars()).take_while(|(a, b)| a == b).count();
                after.chars().skip(common).collect()
            }
        };
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(Some(piece))
    }

    /// The ids fed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }
}

/// The byte-level BPE (`tokenizer.ggml.model = gpt2`) of `vocab` and `merges`, pre-tokenized as
/// `tokenizer.ggml.pre` (`pre_name`) says.
fn byte_level_bpe(
    vocab: tokenizers::models::bpe::Vocab,
    merges: Vec<(String, String)>,
    pre_name: Option<&str>,
) -> Result<tokenizers::Tokenizer> {
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| TextError::Tokenize(format!("building BPE from GGUF: {e}")))?;
    let mut inner = tokenizers::Tokenizer::new(bpe);

    let byte_level = ByteLevel::new(false, true, true);
    let qwen2 = pre_name == Some("qwen2");
    let pre: PreTokenizerWrapper = match pre_name {
        // SmolLM's own tokenizer.json splits digits one by one before the byte-level split.
        Some("smollm") => Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into(),
        // Qwen2's (Qwen2-VL, Qwen2.5-VL): its tokenizer.json's split, then bytes to symbols.
        Some("qwen2") => {
            let split = Split::new(SplitPattern::Regex(QWEN2_SPLIT.into()), SplitDelimiterBehavior::Isolated, false)
                .map_err(|e| TextError::Tokenize(format!("Qwen2's pre-tokenizer: {e}")))?;
            Sequence::new(vec![split.into(), ByteLevel::new(false, false, false).into()]).into()
        }
        None | Some("default") | Some("gpt2") | Some("gpt-2") => byte_level.into(),
        Some(other) => {
            return Err(TextError::Unsupported(format!(
                "GGUF tokenizer.ggml.pre `{other}` (supported: smollm, qwen2, gpt2, default)"
            )))
        }
    };
    inner.with_pre_tokenizer(Some(pre));
    if qwen2 {
        // Qwen2's tokenizer.json composes text (NFC) before it splits it.
        inner.with_normalizer(Some(NFC));
    }
    inner.with_decoder(Some(ByteLevelDecoder::default()));
    Ok(inner)
}

/// The id of the first entry of a `tokenizer.json`'s `added_tokens` whose `content` is empty
/// (the rest of the file is skipped over, not built).
fn empty_added_token(json: &str) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Added {
        #[serde(default)]
        added_tokens: Vec<serde_json::Value>,
    }
    let added: Added = serde_json::from_str(json).ok()?;
    added
        .added_tokens
        .iter()
        .find(|t| t.get("content").and_then(|c| c.as_str()) == Some(""))
        .map(|t| t.get("id").and_then(|i| i.as_u64()).unwrap_or_default())
}

fn string_array(md: &std::collections::HashMap<String, gguf_file::Value>, key: &str) -> Result<Vec<String>> {
    let err = |reason: &str| TextError::GgufMetadata { key: key.into(), reason: reason.into() };
    let arr = md.get(key).ok_or_else(|| err("missing"))?.to_vec().map_err(|_| err("not an array"))?;
    arr.iter().map(|v| v.to_string().cloned().map_err(|_| err("contains a non-string"))).collect()
}
