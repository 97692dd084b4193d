//! Bad checkpoints and requests give one clear error naming what was wrong, never a panic.

mod common;

use std::path::Path;

use anyhow::Result;
use candle_core::quantized::gguf_file;
use tessera::{GenerateParams, LoadOptions, Model};

fn load_err(path: &Path) -> String {
    match Model::load(path.to_str().expect("utf-8 path"), &LoadOptions::default()) {
        Ok(_) => panic!("{} loaded but should not have", path.display()),
        Err(e) => e.to_string(),
    }
}

fn tiny_copy(name: &str) -> Result<std::path::PathBuf> {
    let dir = common::scratch(name)?;
    common::copy_dir(&common::fixtures().join("tiny/llama-gqa"), &dir)?;
    Ok(dir)
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) -> Result<()> {
    let path = dir.join("config.json");
    let mut cfg = common::read_json(&path)?;
    edit(&mut cfg);
    std::fs::write(path, serde_json::to_string_pretty(&cfg)?)?;
    Ok(())
}

/// Rewrites model.safetensors with `edit` applied to the tensor map.
fn edit_weights(
    dir: &Path,
    edit: impl FnOnce(&mut std::collections::HashMap<String, candle_core::Tensor>),
) -> Result<()> {
    let path = dir.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu)?;
    edit(&mut tensors);
    candle_core::safetensors::save(&tensors, &path)?;
    Ok(())
}

#[test]
fn missing_model_path() {
    let err = load_err(Path::new("/nonexistent/model.gguf"));
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
}

#[test]
fn missing_safetensors_file() -> Result<()> {
    let dir = tiny_copy("missing-safetensors")?;
    std::fs::remove_file(dir.join("model.safetensors"))?;
    let err = load_err(&dir);
    assert!(err.contains("model.safetensors"), "{err}");
    Ok(())
}

#[test]
fn truncated_safetensors_file() -> Result<()> {
    let dir = tiny_copy("truncated-safetensors")?;
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path)?;
    std::fs::write(&path, &bytes[..bytes.len() / 2])?;
    let err = load_err(&dir);
    assert!(err.contains("model.safetensors") && err.contains("truncated"), "{err}");
    Ok(())
}

#[test]
fn tensor_of_the_wrong_shape() -> Result<()> {
    let dir = tiny_copy("wrong-shape")?;
    edit_weights(&dir, |t| {
        let name = "model.layers.1.mlp.up_proj.weight";
        let w = t.remove(name).expect("tensor");
        t.insert(name.into(), w.narrow(0, 0, 100).expect("narrow"));
    })?;
    let err = load_err(&dir);
    assert!(
        err.contains("model.layers.1.mlp.up_proj.weight") && err.contains("[100, 64]") && err.contains("[128, 64]"),
        "{err}"
    );
    Ok(())
}

#[test]
fn missing_tensor() -> Result<()> {
    let dir = tiny_copy("missing-tensor")?;
    edit_weights(&dir, |t| {
        t.remove("model.layers.0.self_attn.k_proj.weight");
    })?;
    let err = load_err(&dir);
    assert!(err.contains("model.layers.0.self_attn.k_proj.weight") && err.contains("missing"), "{err}");
    Ok(())
}

#[test]
fn unknown_architecture() -> Result<()> {
    let dir = tiny_copy("unknown-arch")?;
    edit_config(&dir, |c| c["model_type"] = "mamba".into())?;
    let err = load_err(&dir);
    assert!(err.contains("mamba") && err.contains("config.json"), "{err}");
    Ok(())
}

#[test]
fn config_missing_a_required_field() -> Result<()> {
    let dir = tiny_copy("missing-field")?;
    edit_config(&dir, |c| {
        c.as_object_mut().expect("object").remove("hidden_size");
    })?;
    let err = load_err(&dir);
    assert!(err.contains("hidden_size") && err.contains("config.json"), "{err}");
    Ok(())
}

#[test]
fn heads_that_do_not_share_kv_heads_evenly() -> Result<()> {
    let dir = tiny_copy("bad-heads")?;
    edit_config(&dir, |c| c["num_key_value_heads"] = 3.into())?;
    let err = load_err(&dir);
    assert!(err.contains("num_key_value_heads"), "{err}");
    Ok(())
}

/// Numbers the arithmetic divides by or takes roots of, outside their domain: refused at load
/// with the field named (they used to run and answer NaN, or garbage).
#[test]
fn numeric_config_fields_outside_their_domain_are_refused_by_name() -> Result<()> {
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        ("rms_norm_eps", (-1e-5).into(), "rms_norm_eps"),
        ("rms_norm_eps", 0.0.into(), "rms_norm_eps"),
        ("rope_theta", 0.0.into(), "rope_theta"),
        ("rope_theta", (-10000.0).into(), "rope_theta"),
        ("rope_scaling", serde_json::json!({"rope_type": "linear", "factor": -2.0}), "factor"),
        ("rope_scaling", serde_json::json!({"rope_type": "linear", "factor": 0.0}), "factor"),
        ("intermediate_size", 0.into(), "intermediate_size"),
    ];
    for (i, (field, value, needle)) in cases.into_iter().enumerate() {
        let dir = tiny_copy(&format!("bad-number-{i}"))?;
        edit_config(&dir, |c| c[field] = value.clone())?;
        let err = load_err(&dir);
        assert!(err.contains(needle) && err.contains("config.json"), "{field} = {value}: {err}");
    }
    Ok(())
}

/// A FIFO where a model file is expected is refused before it is opened (reading it blocked
/// for ever).
#[cfg(unix)]
#[test]
fn a_fifo_for_a_model_file_is_refused_not_waited_on() -> Result<()> {
    let fifo = |path: &Path| -> Result<()> {
        let status = std::process::Command::new("mkfifo").arg(path).status()?;
        anyhow::ensure!(status.success(), "mkfifo {}", path.display());
        Ok(())
    };
    let dir = tiny_copy("fifo-config")?;
    std::fs::remove_file(dir.join("config.json"))?;
    fifo(&dir.join("config.json"))?;
    let err = load_err(&dir);
    assert!(err.contains("config.json") && err.contains("not a regular file"), "{err}");
    let gguf = common::scratch("fifo-gguf")?.join("model.gguf");
    fifo(&gguf)?;
    let err = load_err(&gguf);
    assert!(err.contains("model.gguf") && err.contains("not a regular file"), "{err}");
    let image = common::scratch("fifo-image")?.join("photo.png");
    fifo(&image)?;
    let err = tessera::load_image(&image, tessera::DEFAULT_MAX_PIXELS).unwrap_err().to_string();
    assert!(err.contains("photo.png") && err.contains("not a regular file"), "{err}");
    Ok(())
}

#[test]
fn missing_and_truncated_gguf() -> Result<()> {
    let dir = common::scratch("bad-gguf")?;
    let err = load_err(&dir.join("absent.gguf"));
    assert!(err.contains("absent.gguf"), "{err}");

    let not_gguf = dir.join("not.gguf");
    std::fs::write(&not_gguf, b"definitely not a gguf file")?;
    let err = load_err(&not_gguf);
    assert!(err.contains("not.gguf") && err.contains("GGUF"), "{err}");

    // The first 2 MB of the real file: header intact, tensors cut off.
    let real = common::smollm2_gguf()?;
    let truncated = dir.join("truncated.gguf");
    let bytes = std::fs::read(&real)?;
    std::fs::write(&truncated, &bytes[..2 << 20])?;
    let err = load_err(&truncated);
    assert!(err.contains("truncated.gguf") && err.contains("truncated"), "{err}");
    Ok(())
}

/// The test GGUF rewritten with `edit` applied to its metadata (tensors unchanged).
fn gguf_with(
    name: &str,
    edit: impl FnOnce(&mut std::collections::HashMap<String, gguf_file::Value>),
) -> Result<std::path::PathBuf> {
    let real = common::smollm2_gguf()?;
    let mut file = std::fs::File::open(&real)?;
    let content = gguf_file::Content::read(&mut file)?;
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let tensors = names
        .iter()
        .map(|n| Ok((n.as_str(), content.tensor(&mut file, n, &candle_core::Device::Cpu)?)))
        .collect::<Result<Vec<_>>>()?;
    let mut metadata = content.metadata.clone();
    edit(&mut metadata);
    let metadata: Vec<(&str, &gguf_file::Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let path = common::scratch(name)?.join("model.gguf");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
    let refs: Vec<(&str, &candle_core::quantized::QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    gguf_file::write(&mut out, &metadata, &refs)?;
    Ok(path)
}

/// GGUF metadata out of its domain, or disagreeing with the file's tensors, is refused naming
/// the key (the file used to run: NaN logits, or garbage from a model missing ten layers).
#[test]
fn gguf_metadata_out_of_domain_or_disagreeing_with_the_tensors_is_refused() -> Result<()> {
    use gguf_file::Value;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(-1.0),
            "`llama.attention.layer_norm_rms_epsilon` must be",
        ),
        ("llama.rope.freq_base", Value::F32(0.0), "`llama.rope.freq_base` must be"),
        ("llama.block_count", Value::U32(20), "llama.block_count` is 20 but the file holds tensors of block 29"),
    ];
    for (i, (key, value, needle)) in cases.into_iter().enumerate() {
        let path = gguf_with(&format!("bad-gguf-meta-{i}"), |m| {
            m.insert(key.to_string(), value);
        })?;
        let err = load_err(&path);
        assert!(err.contains(needle) && err.contains("model.gguf"), "{key}: {err}");
    }
    Ok(())
}

#[test]
fn prompt_longer_than_the_context() -> Result<()> {
    let dir = common::fixtures().join("tiny/llama-gqa");
    let model = Model::load(dir.to_str().expect("utf-8"), &LoadOptions::default())?;
    // A prompt past the context is refused as it is built; one that fills it leaves no
    // position to generate into.
    let n = model.max_positions() + 3;
    let err = model.prompt(vec![5u32; n], &[]).unwrap_err().to_string();
    assert!(err.contains(&format!("{n} positions")) && err.contains("context"), "{err}");
    let prompt = model.prompt(vec![5u32; model.max_positions()], &[])?;
    let err = model.generate(&prompt, &GenerateParams::default(), &mut |_| {}).unwrap_err().to_string();
    assert!(err.contains(&format!("{} tokens", prompt.len())) && err.contains("context"), "{err}");
    // Generation that runs into the end of the context stops cleanly.
    let prompt = model.prompt(vec![5u32; model.max_positions() - 2], &[])?;
    let params = GenerateParams { max_new_tokens: 10, ignore_eos: true, ..Default::default() };
    let out = model.generate(&prompt, &params, &mut |_| {})?;
    assert_eq!(out.finish_reason, tessera::FinishReason::ContextFull);
    assert_eq!(out.generated_tokens.len(), 2);
    Ok(())
}

#[test]
fn empty_prompt_and_out_of_range_token() -> Result<()> {
    let dir = common::fixtures().join("tiny/llama-gqa");
    let model = Model::load(dir.to_str().expect("utf-8"), &LoadOptions::default())?;
    let err = model.prompt(vec![], &[]).unwrap_err().to_string();
    assert!(err.contains("empty"), "{err}");
    let prompt = model.prompt(vec![100_000], &[])?;
    let err = model.generate(&prompt, &GenerateParams::default(), &mut |_| {}).unwrap_err().to_string();
    assert!(err.contains("100000"), "{err}");
    Ok(())
}

/// Weights that make the logits NaN stop generation with an error naming the step and the
/// first layer whose output is not finite — not a stream of token 0.
#[test]
fn non_finite_logits_stop_generation_and_name_the_layer() -> Result<()> {
    let dir = tiny_copy("nan-weights")?;
    edit_weights(&dir, |t| {
        if let Some(w) = t.get("model.layers.1.mlp.down_proj.weight") {
            let nan = (w.ones_like().expect("ones") * f64::NAN).expect("nan");
            t.insert("model.layers.1.mlp.down_proj.weight".into(), nan);
        }
    })?;
    let model = Model::load(dir.to_str().expect("utf-8"), &LoadOptions::default())?;
    let prompt = model.prompt(vec![1, 5, 9, 13], &[])?;
    let params = GenerateParams { max_new_tokens: 4, ignore_eos: true, ..Default::default() };
    let err = model.generate(&prompt, &params, &mut |_| {}).unwrap_err().to_string();
    assert!(err.contains("step 0") && err.contains("after decoder layer 1") && err.contains("NaN"), "{err}");
    Ok(())
}

/// A processor that lets pan-and-scan cut a thin strip into thousands of crops: the image's
/// views are counted from its size, so it is refused, naming the context, before any crop is
/// made (the embedding path once preprocessed 20000 crops, 29 s and 1.9 GB, before finding out).
#[test]
fn an_image_past_the_context_is_refused_before_its_pixels_are_touched() -> Result<()> {
    let dir = common::scratch("gemma3-many-crops")?;
    common::copy_dir(&common::fixtures().join("vlm/gemma3-tiny"), &dir)?;
    let path = dir.join("processor_config.json");
    let mut cfg = common::read_json(&path)?;
    cfg["image_processor"]["pan_and_scan_max_num_crops"] = serde_json::json!(100_000_000);
    cfg["image_processor"]["pan_and_scan_min_crop_size"] = serde_json::json!(1);
    std::fs::write(&path, serde_json::to_string_pretty(&cfg)?)?;
    let opts = LoadOptions { pan_and_scan: true, ..LoadOptions::default() };
    let model = Model::load(dir.to_str().expect("utf-8"), &opts)?;
    let strip = tessera::RgbImage::new(40_000, 2, vec![90; 40_000 * 2 * 3]);
    let tokens = model.image_tokens(&strip)?;
    assert!(tokens > model.max_positions(), "{tokens} image tokens");
    let context = format!("context of {} tokens", model.max_positions());
    for err in [
        model.analysis().image_patch_features(&strip).unwrap_err(),
        model.encode_image(&strip).unwrap_err(),
        model.pixel_values(&strip).unwrap_err(),
        model.encode_prompt("what is this?", None, false, std::slice::from_ref(&strip)).unwrap_err(),
    ] {
        let err = err.to_string();
        assert!(err.contains("context") && err.contains(&tokens.to_string()), "{err}");
        assert!(err.contains(&context) || err.contains("context is"), "{err}");
    }
    // An ordinary image still goes through.
    let square = tessera::RgbImage::new(40, 40, vec![90; 40 * 40 * 3]);
    assert_eq!(model.analysis().image_patch_features(&square)?.dim(0)?, 1);
    Ok(())
}
