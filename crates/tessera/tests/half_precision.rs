//! bf16 and f16 against transformers running the same checkpoints in the same dtype on the same
//! device: for the tiny text checkpoints and the tiny VLMs' chats, the greedy ids and each step's
//! log-probability of the chosen token. `scripts/gpu/reference.py` writes the references on the
//! device the suite runs on. On the CPU they are committed (`tests/fixtures/half_precision/cpu.json`,
//! PyTorch's CPU kernels); on a GPU (`TESSERA_TEST_DEVICE=cuda`) `TESSERA_HALF_REFS` names the
//! file `reference.py` wrote there (scripts/gpu/device.sh), and without it these tests fail,
//! never skip. References from another kind of device are refused.
//!
//! Tolerance. Two engines that round to bf16 (8 significant bits) at different points of a
//! layer — fused kernels against PyTorch's, another reduction order — give logits a few bf16
//! ulps apart. So the greedy choice may flip honestly only at a step whose reference
//! top-1/top-2 margin is below `MARGIN` (the comparison of that sequence stops there: the
//! contexts differ afterwards); every other step's id must be transformers', and the chosen
//! tokens' log-probabilities must agree within `LOGPROB_TOL`. At least half of all steps must
//! be compared, or the references are too flat to test anything.
//!
//! Measured on the CPU (Candle's bf16/f16 against PyTorch 2.15's CPU kernels, transformers
//! 5.24; the test prints the same): text 260 of 288 steps compared, log-probabilities within
//! 0.23, 4 flips at reference margins 0.008–0.31; VLM chats 294 of 384 compared, within 0.29,
//! 9 flips at margins 0–0.22. The GPU run prints what it measures there.

mod common;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use tessera::{DType, GenerateParams, LoadOptions, Model};

/// 8 bf16 ulps of a logit in [8, 16).
const MARGIN: f64 = 0.5;
const LOGPROB_TOL: f64 = 0.5;
/// Greedy steps per reference (scripts/gpu/reference.py).
const N_STEPS: usize = 16;

/// The references for the test device: `TESSERA_HALF_REFS`, or on the CPU the committed ones.
fn references() -> Result<Value> {
    let cpu = common::test_device()?.is_cpu();
    let path = match std::env::var_os("TESSERA_HALF_REFS") {
        Some(p) => std::path::PathBuf::from(p),
        None if cpu => common::fixtures().join("half_precision").join("cpu.json"),
        None => bail!("TESSERA_HALF_REFS is not set: run scripts/gpu/reference.py on the GPU machine first"),
    };
    let refs = common::read_json(&path)?;
    let made_on_cpu = refs["device"].as_str() == Some("cpu");
    ensure!(
        made_on_cpu == cpu,
        "{} holds references made on {}, the tests run on {}",
        path.display(),
        refs["device"],
        if cpu { "the CPU" } else { "a GPU" }
    );
    Ok(refs)
}

fn dtype(name: &str) -> Result<DType> {
    Ok(tessera::parse_dtype(name)?)
}

/// What the comparisons of one test found.
#[derive(Default)]
struct Tally {
    compared: usize,
    total: usize,
    /// The largest |Δ log-probability| of a compared step.
    worst: f64,
    /// Greedy flips (each at a reference margin below `MARGIN`): where, and that margin.
    flips: Vec<String>,
}

impl Tally {
    fn check(&self, what: &str) -> Result<()> {
        eprintln!(
            "{what}: {} of {} greedy steps compared, log-probabilities within {:.3}, flips: {}",
            self.compared,
            self.total,
            self.worst,
            if self.flips.is_empty() { "none".to_string() } else { self.flips.join(", ") }
        );
        ensure!(
            self.total > 0 && 2 * self.compared >= self.total,
            "{what}: only {} of {} steps compared",
            self.compared,
            self.total
        );
        Ok(())
    }
}

/// Compares one generation with its reference entry, counting into `tally`.
fn compare(what: &str, model: &Model, prompt: &tessera::Prompt, reference: &Value, tally: &mut Tally) -> Result<()> {
    let ids = common::ids(&reference["greedy_ids"]);
    let margins = common::floats(&reference["margins"]);
    let logprobs = common::floats(&reference["logprobs"]);
    let params =
        GenerateParams { max_new_tokens: ids.len(), ignore_eos: true, logprobs: Some(2), ..Default::default() };
    let out = model.generate(prompt, &params, &mut |_| {})?;
    let sampled = out.sampled_tokens();
    tally.total += N_STEPS;
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
            tally.flips.push(format!("{what} step {i} (margin {})", margins[i]));
            tally.compared += i;
            return Ok(());
        }
        let d = f64::from((sampled[i].logprob - logprobs[i]).abs());
        ensure!(d < LOGPROB_TOL, "{what}: step {i}: log-probability differs by {d}");
        tally.worst = tally.worst.max(d);
    }
    tally.compared += ids.len();
    Ok(())
}

fn opts(dtype: DType) -> Result<LoadOptions> {
    Ok(LoadOptions { dtype: Some(dtype), ..common::load_options()? })
}

#[test]
fn text_models_in_bf16_and_f16_match_transformers_on_the_same_device() -> Result<()> {
    let refs = references()?;
    let mut tally = Tally::default();
    for (dtype_name, models) in refs["text"].as_object().context("`text` in the references")? {
        for (name, reference) in models.as_object().context("text models")? {
            let dir = common::fixtures().join("tiny").join(name);
            let model = Model::load(dir.to_str().context("utf-8")?, &opts(dtype(dtype_name)?)?)?;
            let prompt = model.prompt(common::ids(&reference["prompt_ids"]), &[])?;
            compare(&format!("{name} {dtype_name}"), &model, &prompt, reference, &mut tally)?;
        }
    }
    tally.check("text")
}

#[test]
fn vlm_chats_in_bf16_and_f16_match_transformers_on_the_same_device() -> Result<()> {
    let refs = references()?;
    let mut tally = Tally::default();
    for (dtype_name, models) in refs["vlm"].as_object().context("`vlm` in the references")? {
        for (name, chats) in models.as_object().context("vlm models")? {
            let dir = common::fixtures().join("vlm").join(name);
            let model = Model::load(dir.to_str().context("utf-8")?, &opts(dtype(dtype_name)?)?)?;
            for chat in chats.as_array().context("chats")? {
                let conv = tessera::Conversation::from_json(&chat["messages"])?;
                let images = common::conversation_images(&conv)?;
                let prompt = model.encode_chat(&conv.messages, &images)?;
                if prompt.ids() != common::ids(&chat["input_ids"]).as_slice() {
                    bail!("{name} {}: prompt ids differ from the processor's", chat["name"]);
                }
                compare(&format!("{name} {} {dtype_name}", chat["name"]), &model, &prompt, chat, &mut tally)?;
            }
        }
    }
    tally.check("VLM chats")
}
