//! What the vision-language parity tests share (`vlm.rs`, `vlm_families.rs`): the tiny
//! checkpoints, their reference cases (prompts, images, tensors) and comparisons.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use serde_json::Value;
use tessera::{Model, RgbImage};

pub const FAMILIES: &[&str] = &[
    "smolvlm-tiny",
    "llava-tiny",
    "llava-interleave-tiny",
    "paligemma-tiny",
    "paligemma2-tiny",
    "gemma3-tiny",
    "qwen2-vl-tiny",
    "qwen2.5-vl-tiny",
    "qwen3-vl-tiny",
    "internvl-tiny",
    "mistral3-tiny",
    "qwen3.5-tiny",
    "gemma4-tiny",
    "gemma4-pair-tiny",
    "minicpm-v4.6-tiny",
];

pub fn vlm_dir(name: &str) -> PathBuf {
    super::common::fixtures().join("vlm").join(name)
}

pub fn load(name: &str) -> Result<Model> {
    let dir = vlm_dir(name);
    Ok(Model::load(dir.to_str().context("utf-8 path")?, &super::common::load_options()?)?)
}

pub struct Case {
    pub name: String,
    pub json: Value,
    pub images: Vec<RgbImage>,
}

/// The cases of a fixture that run with the checkpoint's default settings (not the ones made
/// with pan-and-scan on: [`pan_and_scan_cases`]).
pub fn cases(name: &str) -> Result<(Vec<Case>, HashMap<String, Tensor>)> {
    let (all, tensors) = all_cases(name)?;
    Ok((all.into_iter().filter(|c| c.json.get("pan_and_scan").is_none()).collect(), tensors))
}

pub fn pan_and_scan_cases(name: &str) -> Result<(Vec<Case>, HashMap<String, Tensor>)> {
    let (all, tensors) = all_cases(name)?;
    Ok((all.into_iter().filter(|c| c.json.get("pan_and_scan").is_some()).collect(), tensors))
}

pub fn all_cases(name: &str) -> Result<(Vec<Case>, HashMap<String, Tensor>)> {
    let dir = vlm_dir(name);
    let reference = super::common::read_json(&dir.join("reference.json"))?;
    let tensors_path = match reference.get("reference_tensors").and_then(Value::as_str) {
        Some(rel) => dir.join(rel),
        None => dir.join("reference.safetensors"),
    };
    let tensors = candle_core::safetensors::load(&tensors_path, &Device::Cpu)?;
    let mut out = Vec::new();
    for c in reference["cases"].as_array().context("cases")? {
        let images = super::common::case_images(c)?;
        out.push(Case { name: c["name"].as_str().context("name")?.to_string(), json: c.clone(), images });
    }
    Ok((out, tensors))
}

/// The user text of a case (the chat families' last text part; PaliGemma's prompt).
pub fn user_text(case: &Case) -> Result<String> {
    if let Some(p) = case.json["prompt"].as_str() {
        return Ok(p.to_string());
    }
    let parts = case.json["messages"][0]["content"].as_array().context("content")?;
    Ok(parts.iter().filter_map(|p| p["text"].as_str()).collect::<String>())
}

pub fn reference_tensor<'a>(tensors: &'a HashMap<String, Tensor>, case: &str, key: &str) -> Option<&'a Tensor> {
    tensors.get(&format!("{case}.{key}"))
}

/// A copy of a fixture folder in scratch space, for tests that damage it.
pub fn scratch_copy(name: &str, tag: &str) -> Result<PathBuf> {
    let dir = super::common::scratch(&format!("vlm-{tag}"))?;
    super::common::copy_dir(&vlm_dir(name), &dir)?;
    Ok(dir)
}
