//! The vocabulary a text GGUF carries (`tokenizer.ggml.*`, `tokenizer.chat_template`), from a
//! folder's `tokenizer.json`, `tokenizer_config.json`, `config.json` and chat template files,
//! as llama.cpp's converter writes it for a byte-level BPE tokenizer: `get_vocab_base` and
//! `does_token_look_special` (`conversion/base.py`) and gguf-py's `SpecialVocab` (`vocab.py`),
//! llama.cpp 0c1e57098 as llama-cpp-python 0.3.36 vendors it.
//!
//! One difference: the converter names the pre-tokenizer (`tokenizer.ggml.pre`) by hashing
//! the ids a published tokenizer gives a test text; here it is read off the tokenizer's
//! pre-tokenizer: a lone byte-level split is `gpt-2`, digits split one by one before it (the
//! SmolLM tokenizers) `smollm`, Llama 3's and Qwen2's regex splits `llama-bpe` and `qwen2`, the
//! names `llama-vocab.cpp` accepts (it refuses `gpt2`, the tokenizer model's name). Other
//! pre-tokenizers are refused, naming the file.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;
use tessera_decoder::gguf_write::MetaValue;

use crate::error::{Result, TesseraError};

/// gguf-py's `TokenType`.
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const BYTE: i32 = 6;
const UNUSED: i32 = 5;

/// The special token kinds `SpecialVocab` looks for, in its order.
const SPECIAL_KINDS: [&str; 7] = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"];

/// The `tokenizer.*` metadata of the folder `dir`, for a model of `vocab_size` token rows.
pub(crate) fn vocab_metadata(dir: &Path, vocab_size: usize) -> Result<Vec<(String, MetaValue)>> {
    // The converter's Llama, Qwen and Gemma 3 classes read a SentencePiece model first.
    let sentencepiece = dir.join("tokenizer.model");
    if sentencepiece.is_file() {
        return Err(TesseraError::Config {
            path: sentencepiece,
            reason: "llama.cpp's converter writes this SentencePiece model's vocabulary rather than tokenizer.json's; \
                     tessera writes byte-level BPE vocabularies only"
                .into(),
        });
    }
    let path = dir.join("tokenizer.json");
    let err = |reason: String| TesseraError::Config { path: path.clone(), reason };
    let tokenizer = crate::model::read_json(&path)?;
    let model = &tokenizer["model"];
    if model["type"].as_str() != Some("BPE") {
        return Err(err(format!(
            "the tokenizer model is {}, not byte-level BPE (the only vocabulary tessera writes)",
            model["type"]
        )));
    }
    let pre = pre_tokenizer_name(&tokenizer["pre_tokenizer"]).map_err(err)?;
    let added: Vec<&Value> = tokenizer["added_tokens"].as_array().map(|a| a.iter().collect()).unwrap_or_default();

    // Token texts by id: the model's vocabulary, then the added tokens.
    let mut by_id: HashMap<usize, (String, Option<&Value>)> = HashMap::new();
    for (text, id) in model["vocab"].as_object().ok_or_else(|| err("`model.vocab` is not an object".into()))? {
        let id = id.as_u64().ok_or_else(|| err(format!("vocabulary entry `{text}` has no integer id")))?;
        by_id.insert(id as usize, (text.clone(), None));
    }
    for a in &added {
        let (Some(id), Some(text)) = (a["id"].as_u64(), a["content"].as_str()) else {
            return Err(err(format!("added token {a} lacks an id or content")));
        };
        by_id.insert(id as usize, (text.to_string(), Some(*a)));
    }
    if let Some(max) = by_id.keys().max().filter(|&&m| m >= vocab_size) {
        return Err(err(format!("token id {max} is outside the model's vocabulary of {vocab_size} rows")));
    }
    let mut tokens = Vec::with_capacity(vocab_size);
    let mut types = Vec::with_capacity(vocab_size);
    for i in 0..vocab_size {
        match by_id.remove(&i) {
            None => {
                tokens.push(format!("[PAD{i}]"));
                types.push(UNUSED);
            }
            Some((text, None)) => {
                tokens.push(text);
                types.push(NORMAL);
            }
            Some((text, Some(a))) => {
                if a["special"].as_bool() == Some(true) || looks_special(&text) {
                    tokens.push(text);
                    types.push(CONTROL);
                } else {
                    tokens.push(text.replace('\u{2581}', " "));
                    types.push(USER_DEFINED);
                }
            }
        }
    }
    let merges = merges(&model["merges"]).map_err(err)?;

    let md = vec![
        ("tokenizer.ggml.model".to_string(), MetaValue::Str("gpt2".into())),
        ("tokenizer.ggml.pre".into(), MetaValue::Str(pre.into())),
        ("tokenizer.ggml.tokens".into(), MetaValue::Strs(tokens)),
        ("tokenizer.ggml.token_type".into(), MetaValue::I32s(types)),
        ("tokenizer.ggml.merges".into(), MetaValue::Strs(merges)),
    ];
    specials_and_template(md, dir, &tokenizer, &added, vocab_size, Vec::new())
}

/// The `tokenizer.*` metadata of the folder `dir` as gguf-py's `LlamaHfVocab` and `SpecialVocab`
/// give it to a converter class that names the model `how.model` (Gemma 4's `set_vocab`): a BPE
/// with byte fallback (`<0xNN>` tokens) and a `Sequence` decoder, tokens as written, every score
/// −1000 (merges rank, not scores), `<0xNN>` BYTE, special tokens CONTROL, other added tokens
/// and `how.user_defined` USER_DEFINED; no `tokenizer.ggml.pre`; `add_bos_token` true and
/// `add_space_prefix` false as the class sets them.
pub(crate) fn llama_hf_vocab_metadata(
    dir: &Path,
    vocab_size: usize,
    how: crate::families::text::HfVocab,
) -> Result<Vec<(String, MetaValue)>> {
    let path = dir.join("tokenizer.json");
    let err = |reason: String| TesseraError::Config { path: path.clone(), reason };
    let tokenizer = crate::model::read_json(&path)?;
    let model = &tokenizer["model"];
    if model["type"].as_str() != Some("BPE")
        || model["byte_fallback"].as_bool() != Some(true)
        || tokenizer["decoder"]["type"].as_str() != Some("Sequence")
    {
        return Err(err(format!(
            "llama.cpp's `{}` vocabulary is a BPE with byte fallback and a Sequence decoder; this tokenizer's model is \
             {} (byte_fallback {}), its decoder {}",
            how.model, model["type"], model["byte_fallback"], tokenizer["decoder"]["type"]
        )));
    }
    let added: Vec<&Value> = tokenizer["added_tokens"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    let mut by_id: HashMap<usize, String> = HashMap::new();
    for (text, id) in model["vocab"].as_object().ok_or_else(|| err("`model.vocab` is not an object".into()))? {
        let id = id.as_u64().ok_or_else(|| err(format!("vocabulary entry `{text}` has no integer id")))?;
        by_id.insert(id as usize, text.clone());
    }
    let base = by_id.len();
    let mut special = std::collections::HashSet::new();
    for a in &added {
        let (Some(id), Some(text)) = (a["id"].as_u64(), a["content"].as_str()) else {
            return Err(err(format!("added token {a} lacks an id or content")));
        };
        by_id.insert(id as usize, text.to_string());
        if a["special"].as_bool() == Some(true) {
            special.insert(id as usize);
        }
    }
    let n = by_id.len();
    if n != vocab_size {
        return Err(err(format!("the tokenizer lists {n} tokens, the model has {vocab_size} token rows")));
    }
    let mut tokens = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    for i in 0..n {
        let text = by_id.remove(&i).ok_or_else(|| err(format!("no token has id {i} (of {n})")))?;
        let is_byte = text.len() == 6
            && text.starts_with("<0x")
            && text.ends_with('>')
            && text.as_bytes()[3..5].iter().all(u8::is_ascii_hexdigit);
        let ty = if how.user_defined.contains(&text.as_str()) {
            USER_DEFINED
        } else if i < base && is_byte {
            BYTE
        } else if special.contains(&i) {
            CONTROL
        } else if i < base {
            NORMAL
        } else {
            USER_DEFINED
        };
        tokens.push(text);
        types.push(ty);
    }
    let md = vec![
        ("tokenizer.ggml.model".to_string(), MetaValue::Str(how.model.into())),
        ("tokenizer.ggml.tokens".into(), MetaValue::Strs(tokens)),
        ("tokenizer.ggml.scores".into(), MetaValue::F32s(vec![-1000.0; n])),
        ("tokenizer.ggml.token_type".into(), MetaValue::I32s(types)),
        ("tokenizer.ggml.merges".into(), MetaValue::Strs(merges(&model["merges"]).map_err(err)?)),
    ];
    let class_keys = vec![
        ("tokenizer.ggml.add_space_prefix".into(), MetaValue::Bool(false)),
        ("tokenizer.ggml.add_bos_token".into(), MetaValue::Bool(true)),
    ];
    specials_and_template(md, dir, &tokenizer, &added, vocab_size, class_keys)
}

/// The tail both vocabularies share, appended to `md`: the special token ids and `add_*` flags
/// (`SpecialVocab`, from `tokenizer.json`, `tokenizer_config.json` and `config.json`), then
/// `class_keys` (what the converter class sets after them), then the chat template.
fn specials_and_template(
    mut md: Vec<(String, MetaValue)>,
    dir: &Path,
    tokenizer: &Value,
    added: &[&Value],
    vocab_size: usize,
    class_keys: Vec<(String, MetaValue)>,
) -> Result<Vec<(String, MetaValue)>> {
    let tokenizer_config = crate::model::read_json_opt(&dir.join("tokenizer_config.json"))?;
    let config = crate::model::read_json_opt(&dir.join("config.json"))?;
    let (ids, adds) = special_tokens(tokenizer, added, tokenizer_config.as_ref(), config.as_ref(), vocab_size);
    push_specials(&mut md, ids, adds);
    md.extend(class_keys);
    if let Some(template) = chat_template(dir, tokenizer_config.as_ref())? {
        md.push(("tokenizer.chat_template".into(), MetaValue::Str(template)));
    }
    Ok(md)
}

/// `SpecialVocab.add_to_gguf`'s ids (gguf-py's key names, `seperator` as spelled there) and
/// `add_*_token` flags.
fn push_specials(md: &mut Vec<(String, MetaValue)>, ids: Vec<(&str, u32)>, adds: Vec<(&str, bool)>) {
    for (kind, id) in ids {
        let name = match kind {
            "unk" => "unknown",
            "sep" => "seperator",
            "pad" => "padding",
            other => other,
        };
        md.push((format!("tokenizer.ggml.{name}_token_id"), MetaValue::U32(id)));
    }
    for (kind, on) in adds {
        md.push((format!("tokenizer.ggml.add_{kind}_token"), MetaValue::Bool(on)));
    }
}

/// How many entries the folder `dir`'s tokenizer.json lists: its model's vocabulary and its
/// added tokens, counted as `Gemma3Model` counts them (an added token that repeats a vocabulary
/// entry counts twice).
pub(crate) fn tokenizer_entries(dir: &Path) -> Result<usize> {
    let path = dir.join("tokenizer.json");
    let tokenizer = crate::model::read_json(&path)?;
    let vocab = tokenizer["model"]["vocab"]
        .as_object()
        .map(|v| v.len())
        .ok_or_else(|| TesseraError::Config { path: path.clone(), reason: "`model.vocab` is not an object".into() })?;
    Ok(vocab + tokenizer["added_tokens"].as_array().map_or(0, Vec::len))
}

/// The Split regexes of published tokenizers and llama.cpp's names for them (Llama 3's digits
/// in threes, Qwen2's one by one).
const SPLIT_REGEXES: [(&str, &str); 2] = [
    (
        "llama-bpe",
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    (
        "qwen2",
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
];

/// `tokenizer.ggml.pre` for a `tokenizer.json` pre-tokenizer (see the module docs).
fn pre_tokenizer_name(pre: &Value) -> std::result::Result<&'static str, String> {
    let byte_level = |p: &Value| p["type"] == "ByteLevel" && p["use_regex"].as_bool() != Some(false);
    let digits = |p: &Value| p["type"] == "Digits" && p["individual_digits"].as_bool() == Some(true);
    if byte_level(pre) {
        return Ok("gpt-2");
    }
    if pre["type"] == "Sequence" {
        if let Some([first, b]) = pre["pretokenizers"].as_array().map(Vec::as_slice) {
            if digits(first) && byte_level(b) {
                return Ok("smollm");
            }
            // A regex split, then byte-level without its own regex: the original regexes
            // llama-vocab.cpp quotes for the pre-tokenizer types it adapts.
            let split = first["pattern"]["Regex"].as_str().filter(|_| first["type"] == "Split");
            let named = SPLIT_REGEXES.iter().find(|(_, re)| Some(*re) == split).map(|(name, _)| *name);
            if let (Some(name), true) = (named, b["type"] == "ByteLevel") {
                return Ok(name);
            }
        }
    }
    Err(format!(
        "its pre-tokenizer {pre} is not one tessera names for llama.cpp (a byte-level split: `gpt-2`; single digits, \
         then byte-level: `smollm`)"
    ))
}

/// gguf-py's `does_token_look_special`.
fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<\u{ff5c}") && t.ends_with("\u{ff5c}>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

/// The merges as `"a b"` strings (the newer `[a, b]` pairs joined, their spaces written as
/// `Ġ`, U+0120, as gguf-py does).
fn merges(merges: &Value) -> std::result::Result<Vec<String>, String> {
    let Some(items) = merges.as_array() else { return Ok(Vec::new()) };
    items
        .iter()
        .map(|m| match m {
            Value::String(s) => Ok(s.clone()),
            Value::Array(pair) => match pair.as_slice() {
                [Value::String(a), Value::String(b)] => {
                    let enc = |s: &str| s.replace(' ', "\u{120}");
                    Ok(format!("{} {}", enc(a), enc(b)))
                }
                _ => Err(format!("merge {m} is not a pair of strings")),
            },
            _ => Err(format!("merge {m} is neither a string nor a pair")),
        })
        .collect()
}

/// Special token ids and `add_*_token` flags, by kind (`bos`, `eos`, …).
type SpecialTokens = (Vec<(&'static str, u32)>, Vec<(&'static str, bool)>);

/// `SpecialVocab`'s special ids (tokenizer_config's `{kind}_token` texts looked up among the
/// added tokens, then config.json's `{kind}_token_id`, the first found winning) and its
/// `add_{kind}_token` flags (the post-processor's, then tokenizer_config's), in its order.
fn special_tokens(
    tokenizer: &Value,
    added: &[&Value],
    tokenizer_config: Option<&Value>,
    config: Option<&Value>,
    vocab_size: usize,
) -> SpecialTokens {
    let mut ids: Vec<(&'static str, u32)> = Vec::new();
    let set = |ids: &mut Vec<(&'static str, u32)>, kind: &'static str, id: Option<u64>| {
        if let Some(id) = id.filter(|&i| (i as usize) < vocab_size) {
            if !ids.iter().any(|(k, _)| *k == kind) {
                ids.push((kind, id as u32));
            }
        }
    };
    let mut adds: Vec<(&'static str, bool)> = Vec::new();
    let bos_text = tokenizer_config.and_then(|tc| token_text(&tc["bos_token"]));
    let post = &tokenizer["post_processor"];
    let processors = post["processors"].as_array().cloned().unwrap_or_else(|| vec![post.clone()]);
    for p in &processors {
        match p["type"].as_str() {
            Some("ByteLevel") => {
                for kind in ["bos", "eos"] {
                    if !adds.iter().any(|(k, _)| *k == kind) {
                        adds.push((kind, false));
                    }
                }
            }
            Some("TemplateProcessing") => {
                let single = p["single"].as_array().map(Vec::as_slice).unwrap_or_default();
                if single.len() > 1 {
                    if let Some(first) = single[0]["SpecialToken"]["id"].as_str() {
                        let on = bos_text.as_deref().is_none_or(|b| b == first);
                        adds.retain(|(k, _)| *k != "bos");
                        adds.push(("bos", on));
                    }
                }
                let text = |kind: &str| tokenizer_config.and_then(|tc| token_text(&tc[format!("{kind}_token")]));
                if let Some(on) = pair_separator(p, text("sep").as_deref(), text("eos").as_deref()) {
                    adds.retain(|(k, _)| *k != "sep");
                    adds.push(("sep", on));
                }
            }
            _ => {}
        }
    }
    if let Some(tc) = tokenizer_config {
        for kind in SPECIAL_KINDS {
            if let Some(on) = tc[format!("add_{kind}_token")].as_bool() {
                if !adds.iter().any(|(k, _)| *k == kind) {
                    adds.push((kind, on));
                }
            }
            let Some(text) = token_text(&tc[format!("{kind}_token")]) else { continue };
            let id = added.iter().find(|a| a["content"].as_str() == Some(text.as_str())).and_then(|a| a["id"].as_u64());
            set(&mut ids, kind, id);
        }
    }
    if let Some(c) = config {
        for kind in SPECIAL_KINDS {
            let key = format!("{kind}_token_id");
            let id = c[&key].as_u64().or_else(|| c["text_config"][&key].as_u64());
            set(&mut ids, kind, id);
        }
    }
    (ids, adds)
}

/// `SpecialVocab`'s reading of a `TemplateProcessing` pair template for `add_sep_token`: with
/// the single template's leading and trailing special tokens cut from the pair's ends, a pair
/// `A … B` whose middle starts (or, of two, ends) with the sep or EOS token adds a separator
/// (the first only when the single template has no trailing special token); `None` where the
/// pair template is not of that shape.
fn pair_separator(p: &Value, sep: Option<&str>, eos: Option<&str>) -> Option<bool> {
    let special = |v: &Value| v["SpecialToken"]["id"].as_str().map(str::to_string);
    let single = p["single"].as_array().map(Vec::as_slice).unwrap_or_default();
    let (first, last) = match single {
        [a, .., b] => (special(a), special(b)),
        _ => (None, None),
    };
    let pair = p["pair"].as_array().map(Vec::as_slice).unwrap_or_default();
    let start = usize::from(first.is_some() && pair.first().and_then(special) == first);
    let stop = pair.len() - usize::from(last.is_some() && pair.last().and_then(special) == last);
    let pair = pair.get(start..stop.max(start))?;
    fn sequence(v: Option<&Value>) -> Option<&str> {
        v.and_then(|v| v["Sequence"]["id"].as_str())
    }
    if sequence(pair.first()) != Some("A") || sequence(pair.last()) != Some("B") || pair.len() < 3 {
        return None;
    }
    let middle = &pair[1..pair.len() - 1];
    let is_sep = |v: &Value| special(v).is_some_and(|id| Some(id.as_str()) == sep || Some(id.as_str()) == eos);
    let mut on = is_sep(&middle[0]) && last.is_none();
    if let [_, second] = middle {
        on |= is_sep(second);
    }
    Some(on)
}

/// A special token as tokenizer_config states it: a string or `{"content": …}`.
fn token_text(v: &Value) -> Option<String> {
    v.as_str().or_else(|| v["content"].as_str()).map(str::to_string)
}

/// The chat template gguf-py writes: tokenizer_config's `chat_template`, else
/// `chat_template.jinja`, else `chat_template.json`'s (a named list: its `default`).
fn chat_template(dir: &Path, tokenizer_config: Option<&Value>) -> Result<Option<String>> {
    let pick = |v: &Value| -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Array(named) => {
                named.iter().find(|t| t["name"] == "default").and_then(|t| t["template"].as_str()).map(str::to_string)
            }
            _ => None,
        }
    };
    // gguf-py reads the template files only when there is a tokenizer_config.json.
    let Some(tc) = tokenizer_config else { return Ok(None) };
    if let Some(t) = pick(&tc["chat_template"]) {
        return Ok(Some(t));
    }
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja)
            .map(Some)
            .map_err(|e| TesseraError::Config { path: jinja, reason: e.to_string() });
    }
    Ok(crate::model::read_json_opt(&dir.join("chat_template.json"))?.and_then(|j| pick(&j["chat_template"])))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pre_tokenizers_are_named_as_llama_cpp_names_them() {
        let bl = json!({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true});
        assert_eq!(pre_tokenizer_name(&bl), Ok("gpt-2"));
        let smol = json!({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, bl]});
        assert_eq!(pre_tokenizer_name(&smol), Ok("smollm"));
        let split = json!({"type": "Split", "pattern": {"Regex": "x"}});
        assert!(pre_tokenizer_name(&split).is_err_and(|e| e.contains("Split")));
        let qwen2 = json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_REGEXES[1].1}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]});
        assert_eq!(pre_tokenizer_name(&qwen2), Ok("qwen2"));
    }

    #[test]
    fn special_looking_tokens_and_merge_pairs_follow_gguf_py() -> std::result::Result<(), String> {
        assert!(looks_special("<|im_start|>") && looks_special("<unused12>") && !looks_special("<image>"));
        assert_eq!(merges(&json!(["a b", ["c d", "e"]]))?, ["a b", "c\u{120}d e"]);
        Ok(())
    }
}
