//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

/// The repository's root: `TESSERA_REPO_ROOT` where set (scripts/gpu/device.sh sets it: the GPU machine
/// runs the suite in a copy of the repository that is not where it was built), else the checkout
/// this test was compiled in.
pub fn repo_root() -> PathBuf {
    match std::env::var_os("TESSERA_REPO_ROOT") {
        Some(root) => PathBuf::from(root),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."),
    }
}

pub fn fixtures() -> PathBuf {
    repo_root().join("tests/fixtures")
}

/// The real SmolLM2-135M-Instruct Q4_1 weights. Missing weights fail the test (never skip).
pub fn smollm2_gguf() -> Result<PathBuf> {
    let p = repo_root().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !p.exists() {
        bail!("{} is missing: run scripts/fetch_smollm2.sh", p.display());
    }
    Ok(p)
}

/// The tiny random-weight text checkpoints in `tests/fixtures/tiny` (scripts/make_tiny_models.py,
/// scripts/make_tiny_vlms.py), one per family and attention/config variant.
pub const TINY_TEXT_MODELS: &[&str] = &[
    "llama-gqa",
    "llama-mha",
    "llama-mqa-llama3rope",
    "qwen2-bias",
    "mistral",
    "gemma",
    "gemma2",
    "gemma3",
    "qwen3-qknorm",
];

/// Loads the tiny checkpoint `name` (one of [`TINY_TEXT_MODELS`]) on the test device.
pub fn tiny_model(name: &str) -> Result<tessera::Model> {
    let dir = fixtures().join("tiny").join(name);
    Ok(tessera::Model::load(dir.to_str().context("utf-8 path")?, &load_options()?)?)
}

/// The device the parity tests run on: `TESSERA_TEST_DEVICE` (`cpu`, the default, `cuda[:N]`,
/// `metal[:N]`). scripts/gpu/ runs the suite with `cuda`; an unknown or unavailable device
/// fails every test that asks (never a silent fallback to the CPU).
///
/// Opened once per test executable: every model of the tests shares one device (Candle's CUDA
/// devices opened twice are two devices, whose tensors do not mix).
pub fn test_device() -> Result<tessera::Device> {
    static DEVICE: std::sync::OnceLock<std::result::Result<tessera::Device, String>> = std::sync::OnceLock::new();
    let opened = DEVICE.get_or_init(|| {
        let name = std::env::var("TESSERA_TEST_DEVICE").unwrap_or_else(|_| "cpu".into());
        let choice: tessera::DeviceChoice = name.parse().map_err(|e| format!("TESSERA_TEST_DEVICE={name}: {e}"))?;
        if choice == tessera::DeviceChoice::Auto {
            return Err("TESSERA_TEST_DEVICE=auto: name the device the tests must run on".into());
        }
        choice.open().map_err(|e| format!("TESSERA_TEST_DEVICE={name}: {e}"))
    });
    opened.clone().map_err(|e| anyhow::anyhow!(e))
}

/// How the parity tests load a checkpoint folder: on the test device, in f32 (what the
/// references are; a GPU's default working dtype is bf16, which `half_precision` tests).
pub fn load_options() -> Result<tessera::LoadOptions> {
    Ok(tessera::LoadOptions { dtype: Some(tessera::DType::F32), ..gguf_load_options()? })
}

/// How the tests load a GGUF file kept quantized: on the test device, no dtype (a dtype would
/// dequantize it); the working dtype of a quantized file is f32 on every device.
pub fn gguf_load_options() -> Result<tessera::LoadOptions> {
    Ok(tessera::LoadOptions { device: test_device()?, ..Default::default() })
}

/// `t` as an f32 tensor on the CPU, where the tests compare a model's outputs (on the test
/// device) with references (read onto the CPU).
pub fn on_cpu(t: &candle_core::Tensor) -> Result<candle_core::Tensor> {
    Ok(t.to_device(&candle_core::Device::Cpu)?.to_dtype(candle_core::DType::F32)?)
}

/// The largest |a − b|, compared on the CPU in f32 (a model's outputs may be on a GPU, the
/// references are read onto the CPU); `what` names them when the sizes differ.
pub fn max_abs_diff(a: &candle_core::Tensor, b: &candle_core::Tensor, what: &str) -> Result<f32> {
    let (a, b) = (on_cpu(a)?.flatten_all()?, on_cpu(b)?.flatten_all()?);
    anyhow::ensure!(a.dims() == b.dims(), "{what}: {} values vs {}", a.dim(0)?, b.dim(0)?);
    Ok((a - b)?.abs()?.max_all()?.to_scalar::<f32>()?)
}

/// A GGUF + mmproj pair's run of `prompt` (with `images`) against transformers' reference and the
/// safetensors folder's run of the same ids: the last positions' logits within 1e-4 of the
/// reference's `expected` and of the folder's, and the reference's 16 greedy ids (`case`'s
/// `greedy_ids`). `what` names the case in failures.
pub fn pair_logits_and_greedy_match(
    pair: &tessera::Model,
    folder: &tessera::Model,
    prompt: &tessera::Prompt,
    images: &[tessera::RgbImage],
    expected: &candle_core::Tensor,
    case: &serde_json::Value,
    what: &str,
) -> Result<()> {
    let hidden = pair.forward(prompt, .., &mut pair.new_cache(), &mut Default::default(), &mut Default::default())?;
    let logits = pair.logits(&hidden)?;
    let n = expected.dim(0)?;
    let tail = logits.narrow(0, logits.dim(0)? - n, n)?;
    let d = max_abs_diff(&tail, expected, "logits")?;
    anyhow::ensure!(d < 1e-4, "{what}: logits differ from transformers' by {d}");

    let own = folder.prompt(prompt.ids().to_vec(), images)?;
    let own_hidden =
        folder.forward(&own, .., &mut folder.new_cache(), &mut Default::default(), &mut Default::default())?;
    let d = max_abs_diff(&logits, &folder.logits(&own_hidden)?, "logits")?;
    anyhow::ensure!(d < 1e-4, "{what}: logits differ from the folder's by {d}");

    let greedy = ids(&case["greedy_ids"]);
    anyhow::ensure!(greedy.len() == 16, "{what}: the reference has {} greedy ids, not 16", greedy.len());
    let params = tessera::GenerateParams { max_new_tokens: greedy.len(), ignore_eos: true, ..Default::default() };
    let out = pair.generate(prompt, &params, &mut |_| {})?;
    anyhow::ensure!(
        out.generated_tokens == greedy,
        "{what}: greedy ids {:?}, transformers' {greedy:?}",
        out.generated_tokens
    );
    Ok(())
}

/// The images a chat fixture's conversation names (paths relative to the repository), in order.
pub fn conversation_images(conv: &tessera::Conversation) -> Result<Vec<tessera::RgbImage>> {
    conv.images
        .iter()
        .map(|src| Ok(tessera::load_image(&repo_root().join(src), tessera::DEFAULT_MAX_PIXELS)?))
        .collect()
}

/// The images a reference case names (`case["images"]`: paths relative to the repository), in order.
pub fn case_images(case: &serde_json::Value) -> Result<Vec<tessera::RgbImage>> {
    case["images"]
        .as_array()
        .context("images")?
        .iter()
        .map(|p| Ok(tessera::load_image(&repo_root().join(p.as_str().context("path")?), tessera::DEFAULT_MAX_PIXELS)?))
        .collect()
}

pub fn read_json(path: &std::path::Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("id list").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

pub fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().expect("float list").iter().map(|x| x.as_f64().expect("float") as f32).collect()
}

/// A scratch folder under the target directory, emptied first.
pub fn scratch(name: &str) -> Result<PathBuf> {
    let dir = repo_root().join("target/test-scratch").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        std::fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

/// `model` against llama.cpp's greedy steps on the same file (`reference`, from
/// scripts/peers/llamacpp_reference.py): for each prompt, [`follows_llama_cpp_steps`] from the
/// prompt's last logits. Returns the largest top-5 logit difference (also printed, named `name`).
pub fn agrees_with_llama_cpp(
    model: &tessera::Model,
    reference: &serde_json::Value,
    logit_tol: f32,
    name: &str,
) -> Result<f32> {
    let mut worst = 0f32;
    for entry in reference["results"].as_array().expect("results") {
        let text = entry["prompt"].as_str().expect("prompt");
        let prompt = ids(&entry["prompt_ids"]);
        assert_eq!(model.tokenizer().encode(text, false)?, prompt, "{text:?}: prompt ids");
        let mut cache = model.new_cache();
        let logits: Vec<f32> = model.forward_last(&prompt, &mut cache)?.to_vec1()?;
        let steps = entry["steps"].as_array().expect("steps");
        worst = worst.max(follows_llama_cpp_steps(model, logits, &mut cache, steps, logit_tol, text)?);
    }
    eprintln!("{name}: largest |logit − llama.cpp| over the top-5 of every step: {worst:.4}");
    Ok(worst)
}

/// The project's criterion against llama.cpp's greedy `steps` (each `chosen`, `margin` and
/// `top`: its top-5 `[id, logit]`), from `logits` (the prompt's last, over `cache`): at each
/// step, teacher-forced with llama.cpp's choices so that one disagreement does not cascade, the
/// same top-1 id wherever llama.cpp's top-1/top-2 margin exceeds 1.0, and llama.cpp's top-5
/// logits within `logit_tol`. Returns the largest top-5 logit difference.
pub fn follows_llama_cpp_steps(
    model: &tessera::Model,
    mut logits: Vec<f32>,
    cache: &mut tessera::KvCache,
    steps: &[serde_json::Value],
    logit_tol: f32,
    what: &str,
) -> Result<f32> {
    const MARGIN: f64 = 1.0;
    let mut worst = 0f32;
    for (step, s) in steps.iter().enumerate() {
        let chosen = s["chosen"].as_u64().context("chosen")? as u32;
        let margin = s["margin"].as_f64().context("margin")?;
        if margin > MARGIN {
            let ours = tessera::sampling::argmax(&logits);
            assert_eq!(ours, chosen, "{what:?} step {step}: top-1 (llama.cpp margin {margin:.3})");
        }
        for pair in s["top"].as_array().context("top")? {
            let id = pair[0].as_u64().context("id")? as usize;
            let want = pair[1].as_f64().context("logit")? as f32;
            let diff = (logits[id] - want).abs();
            worst = worst.max(diff);
            assert!(diff < logit_tol, "{what:?} step {step}, token {id}: {} vs llama.cpp {want}", logits[id]);
        }
        logits = model.forward_last(&[chosen], cache)?.to_vec1()?;
    }
    Ok(worst)
}
