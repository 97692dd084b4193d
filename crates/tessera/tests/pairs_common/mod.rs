//! What the GGUF + mmproj pair tests share (`gguf_pairs_qwen.rs`, `gguf_pairs_qwen3_5.rs`,
//! `gguf_pairs_gemma3.rs`, `gguf_pairs_mistral3.rs`, `gguf_pairs_minicpm.rs`): a tiny checkpoint's
//! pair files, loading the pair and the folder, the reference, image features compared with
//! transformers' and the folder's, the whole case-by-case comparison of a pair with the four
//! chat cases, and the converter's f16 mmproj against the folder.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use serde_json::Value;
use tessera::{LoadOptions, Message, Model, RgbImage};

/// The f32 text GGUF and mmproj of tests/fixtures/vlm/`name` (in `name-gguf/`).
pub fn pair_files(name: &str) -> (PathBuf, PathBuf) {
    let dir = super::common::fixtures().join(format!("vlm/{name}-gguf"));
    (dir.join(format!("{name}-f32.gguf")), dir.join(format!("mmproj-{name}-f32.gguf")))
}

/// `name`'s text GGUF with `mmproj`, under `opts`.
pub fn load_pair(name: &str, mmproj: PathBuf, opts: LoadOptions) -> Result<Model> {
    let (text, _) = pair_files(name);
    let opts = LoadOptions { mmproj: Some(mmproj), ..opts };
    Ok(Model::load(text.to_str().context("utf-8 path")?, &opts)?)
}

/// The checkpoint folder tests/fixtures/vlm/`name`, in f32.
pub fn folder(name: &str) -> Result<Model> {
    let dir = super::common::fixtures().join("vlm").join(name);
    Ok(Model::load(dir.to_str().context("utf-8 path")?, &super::common::load_options()?)?)
}

/// The folder's transformers reference: `reference.json` and `reference.safetensors`.
pub fn reference(name: &str) -> Result<(Value, HashMap<String, Tensor>)> {
    let dir = super::common::fixtures().join("vlm").join(name);
    let json = super::common::read_json(&dir.join("reference.json"))?;
    let tensors = candle_core::safetensors::load(dir.join("reference.safetensors"), &Device::Cpu)?;
    Ok((json, tensors))
}

/// Each image's tokens `(n, hidden)`, concatenated (the reference's `image_features` rows).
pub fn image_features(model: &Model, images: &[RgbImage]) -> Result<Tensor> {
    let each = images.iter().map(|i| model.analysis().image_embeddings(i)).collect::<tessera::Result<Vec<_>>>()?;
    Ok(Tensor::cat(&each, 0)?)
}

/// The case's prompt as the processor makes it: a chat of several turns through the chat
/// template, one user turn as its text.
pub fn chat_prompt(model: &Model, case: &Value, images: &[RgbImage]) -> Result<tessera::Prompt> {
    let messages = case["messages"].as_array().context("messages")?;
    if messages.len() > 1 {
        let messages: Vec<Message> = serde_json::from_value(Value::Array(messages.clone()))?;
        return Ok(model.encode_chat(&messages, images)?);
    }
    let parts = messages[0]["content"].as_array().context("content")?;
    let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
    Ok(model.encode_prompt(&text, None, false, images)?)
}

/// The pair's image features for `images` are transformers' (`want`) within 1e-4 and the
/// folder's within 1e-5; returns both distances.
pub fn features_match(
    pair: &Model,
    folder: &Model,
    images: &[RgbImage],
    want: &Tensor,
    what: &str,
) -> Result<(f32, f32)> {
    let got = image_features(pair, images)?;
    let d = super::common::max_abs_diff(&got, want, "image features")?;
    assert!(d < 1e-4, "{what}: image features differ from transformers' by {d}");
    let f = super::common::max_abs_diff(&got, &image_features(folder, images)?, "image features")?;
    assert!(f < 1e-5, "{what}: image features differ from the folder's by {f}");
    Ok((d, f))
}

/// The converter's f16 mmproj `f16` with `name`'s f32 text GGUF: on each image case of the
/// reference (but those `skip` names), the image features are the folder's within f16's
/// precision (relative error below 2e-3, twice f16's epsilon 2^-10, and above 0), and the 16
/// greedy ids are still transformers'. Returns the cases checked.
pub fn f16_mmproj_matches(name: &str, f16: PathBuf, skip: impl Fn(&Value) -> bool) -> Result<usize> {
    let pair = load_pair(name, f16, super::common::load_options()?)?;
    let folder = folder(name)?;
    let (reference, _) = reference(name)?;
    let mut checked = 0;
    for case in reference["cases"].as_array().context("cases")? {
        let images = super::common::case_images(case)?;
        if images.is_empty() || skip(case) {
            continue;
        }
        let case_name = case["name"].as_str().context("name")?;
        let (got, want) = (image_features(&pair, &images)?, image_features(&folder, &images)?);
        let norm = |t: &Tensor| -> Result<f32> { Ok(t.sqr()?.sum_all()?.to_scalar::<f32>()?.sqrt()) };
        let rel = norm(&(&got - &want)?)? / norm(&want)?;
        eprintln!("{case_name}: f16 mmproj image features, relative error {rel:.2e}");
        assert!(rel < 2e-3, "{case_name}: f16 image features differ from f32 by {rel:.2e} (relative)");
        assert!(rel > 0.0, "{case_name}: no difference at all: was the f16 file read?");
        let prompt = pair.prompt(super::common::ids(&case["input_ids"]), &images)?;
        let greedy = super::common::ids(&case["greedy_ids"]);
        let params = tessera::GenerateParams { max_new_tokens: greedy.len(), ignore_eos: true, ..Default::default() };
        let generated = pair.generate(&prompt, &params, &mut |_| {})?.generated_tokens;
        assert_eq!(generated, greedy, "{case_name}: greedy ids");
        checked += 1;
    }
    Ok(checked)
}

/// `name`'s f32 pair, dequantized to f32 and as loaded by default (f32 tensors through the
/// quantized path), against transformers' reference and the folder, case by case — the photo,
/// two images, an image in an earlier turn, text alone: the family `family` and the mmproj
/// named by the model; prompt ids (the GGUF's vocabulary and chat template and the family's
/// processor under the mmproj's settings); image features within 1e-4 of transformers' and 1e-5
/// of the folder's; logits and 16 greedy ids.
pub fn pair_matches_transformers_and_the_folder(name: &str, family: &str) -> Result<()> {
    pair_with_options_matches_transformers_and_the_folder(name, family, |o| o)
}

/// [`pair_matches_transformers_and_the_folder`] with the load options `options` makes of the
/// test's (what the pair's files leave to the loader, as llama.cpp's flags: Gemma 4's budget).
pub fn pair_with_options_matches_transformers_and_the_folder(
    name: &str,
    family: &str,
    options: impl Fn(LoadOptions) -> LoadOptions,
) -> Result<()> {
    let folder = folder(name)?;
    let (reference, tensors) = reference(name)?;
    let (_, mmproj) = pair_files(name);
    for (label, opts) in [("f32", super::common::load_options()?), ("default", super::common::gguf_load_options()?)] {
        let pair = load_pair(name, mmproj.clone(), options(opts))?;
        assert_eq!((pair.config().family, pair.info().mmproj.as_deref()), (family, Some(mmproj.as_path())));
        let mut checked = Vec::new();
        for case in reference["cases"].as_array().context("cases")? {
            let case_name = case["name"].as_str().context("name")?;
            let what = format!("{name}/{label}/{case_name}");
            let images = super::common::case_images(case)?;
            let prompt = chat_prompt(&pair, case, &images)?;
            assert_eq!(prompt.ids(), super::common::ids(&case["input_ids"]), "{what}: prompt ids");
            if !images.is_empty() {
                let want = tensors.get(&format!("{case_name}.image_features")).context("reference features")?;
                let (d, f) = features_match(&pair, &folder, &images, want, &what)?;
                eprintln!("{what}: image features within {d:.1e} of transformers', {f:.1e} of the folder's");
            }
            let expected = tensors.get(&format!("{case_name}.logits")).context("reference logits")?;
            super::common::pair_logits_and_greedy_match(&pair, &folder, &prompt, &images, expected, case, &what)?;
            checked.push(case_name.to_string());
        }
        assert_eq!(checked, ["chelsea", "two_images", "earlier_turn", "text_only"], "{label}");
    }
    Ok(())
}
