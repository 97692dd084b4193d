//! bf16 and f16 on the GPU against transformers in the same dtype on the same GPU:
//! `scripts/gpu/reference.py` writes the references there (`TESSERA_HALF_REFS` names the file;
//! without it these tests fail, they never skip). For the tiny text checkpoints and the tiny
//! VLMs' chats: the greedy ids, and each step's log-probability of the chosen token.
//!
//! Tolerance. Two engines that round to bf16 (8 significant bits) at different points of a
//! layer — fused kernels against PyTorch's, another reduction order — give logits a few bf16
//! ulps apart. So the greedy choice may flip honestly only at a step whose reference
//! top-1/top-2 margin is below `MARGIN` (the comparison of that sequence stops there: the
//! contexts differ afterwards); every other step's id must be transformers', and the chosen
//! tokens' log-probabilities must agree within `LOGPROB_TOL`. At least half of all steps must
//! be compared, or the references are too flat to test anything.
//!
//! Dry run on the CPU (Candle's bf16 against PyTorch's CPU bf16, `reference.py --device cpu
//! --dtypes bf16`): the chosen tokens' log-probabilities differed by up to 0.30 (Qwen2-VL tiny),
//! one greedy flip at a reference margin of 0.31 (Mistral tiny), 122 of 192 VLM steps compared.
//! The GPU run states what it measures there.

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use tessera::{load_image, DType, GenerateParams, LoadOptions, Model, RgbImage, DEFAULT_MAX_PIXELS};

use crate::common;

/// 8 bf16 ulps of a logit in [8, 16).
const MARGIN: f64 = 0.5;
const LOGPROB_TOL: f64 = 0.5;
/// Greedy steps per reference (scripts/gpu/reference.py).
const N_STEPS: usize = 16;

fn references() -> Result<Value> {
    let path = std::env::var("TESSERA_HALF_REFS")
        .context("TESSERA_HALF_REFS is not set: run scripts/gpu/reference.py on the GPU machine first")?;
    common::read_json(std::path::Path::new(&path))
}

fn dtype(name: &str) -> Result<DType> {
    Ok(tessera::parse_dtype(name)?)
}

/// Compares one generation with its reference entry; returns the number of steps compared.
fn compare(what: &str, model: &Model, prompt: &tessera::Prompt, reference: &Value) -> Result<usize> {
    let ids = common::ids(&reference["greedy_ids"]);
    let margins = common::floats(&reference["margins"]);
    let logprobs = common::floats(&reference["logprobs"]);
    let params =
        GenerateParams { max_new_tokens: ids.len(), ignore_eos: true, logprobs: Some(2), ..Default::default() };
    let out = model.generate(prompt, &params, &mut |_| {})?;
    let sampled = out.sampled_tokens();
    ensure!(sampled.len() == ids.len(), "{what}: {} steps, expected {}", sampled.len(), ids.len());
    for i in 0..ids.len() {
        if sampled[i].id != ids[i] {
            // A flip where the reference's margin is below MARGIN is rounding; the contexts
            // differ from here on, so the comparison stops.
            ensure!(
                f64::from(margins[i]) < MARGIN,
                "{what}: step {i}: id {} != transformers' {} (reference margin {})",
                sampled[i].id,
                ids[i],
                margins[i]
            );
            return Ok(i);
        }
        let d = f64::from((sampled[i].logprob - logprobs[i]).abs());
        ensure!(d < LOGPROB_TOL, "{what}: step {i}: log-probability differs by {d}");
    }
    Ok(ids.len())
}

fn opts(dtype: DType) -> Result<LoadOptions> {
    Ok(LoadOptions { dtype: Some(dtype), ..common::load_options()? })
}

#[test]
fn text_models_in_bf16_and_f16_match_transformers_on_the_same_gpu() -> Result<()> {
    let refs = references()?;
    let (mut compared, mut total) = (0, 0);
    for (dtype_name, models) in refs["text"].as_object().context("`text` in the references")? {
        for (name, reference) in models.as_object().context("text models")? {
            let dir = common::fixtures().join("tiny").join(name);
            let model = Model::load(dir.to_str().context("utf-8")?, &opts(dtype(dtype_name)?)?)?;
            let prompt = model.prompt(common::ids(&reference["prompt_ids"]), &[])?;
            compared += compare(&format!("{name} {dtype_name}"), &model, &prompt, reference)?;
            total += N_STEPS;
        }
    }
    eprintln!("text: {compared} of {total} greedy steps compared");
    ensure!(total > 0 && 2 * compared >= total, "text: only {compared} of {total} steps compared");
    Ok(())
}

#[test]
fn vlm_chats_in_bf16_and_f16_match_transformers_on_the_same_gpu() -> Result<()> {
    let refs = references()?;
    let (mut compared, mut total) = (0, 0);
    for (dtype_name, models) in refs["vlm"].as_object().context("`vlm` in the references")? {
        for (name, chats) in models.as_object().context("vlm models")? {
            let dir = common::fixtures().join("vlm").join(name);
            let model = Model::load(dir.to_str().context("utf-8")?, &opts(dtype(dtype_name)?)?)?;
            for chat in chats.as_array().context("chats")? {
                let conv = tessera::Conversation::from_json(&chat["messages"])?;
                let images = conv
                    .images
                    .iter()
                    .map(|src| Ok(load_image(&common::repo_root().join(src), DEFAULT_MAX_PIXELS)?))
                    .collect::<Result<Vec<RgbImage>>>()?;
                let prompt = model.encode_chat(&conv.messages, &images)?;
                if prompt.ids() != common::ids(&chat["input_ids"]).as_slice() {
                    bail!("{name} {}: prompt ids differ from the processor's", chat["name"]);
                }
                compared += compare(&format!("{name} {} {dtype_name}", chat["name"]), &model, &prompt, chat)?;
                total += N_STEPS;
            }
        }
    }
    eprintln!("VLM chats: {compared} of {total} greedy steps compared");
    ensure!(total > 0 && 2 * compared >= total, "VLM chats: only {compared} of {total} steps compared");
    Ok(())
}
