//! MiniCPM-V 4.6's tower and merger against transformers on minicpm-v4.6-tiny's weights
//! (scripts/tiny_vlms/minicpmv4_6_tower.py): the processor's views of three photos (a 2×2
//! grid of slices and the source view, non-square and square grids of patches), each view's
//! tower output (after the window merger and post_layernorm) and image tokens within 1e-4.

mod common;

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};
use tessera::families::{MiniCpmV46Spec, ProcessorSettings};
use tessera::ModelConfig;
use tessera_decoder::Weights;
use tessera_vision::MiniCpmVision;

fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    Ok((a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?)
}

#[test]
fn minicpm_tower_and_merger_match_transformers() -> Result<()> {
    let dir = common::fixtures().join("vlm/minicpm-v4.6-tiny");
    let cfg = ModelConfig::from_config_file(&dir.join("config.json"))?;
    let spec = cfg.vision_spec::<MiniCpmV46Spec>().context("a MiniCPM image side")?;
    let weights = Weights::from_safetensors(&[dir.join("model.safetensors")], DType::F32, &Device::Cpu)?;
    let vision = MiniCpmVision::new(
        &spec.vision_config(cfg.decoder.hidden_size),
        &weights.pp("model.vision_tower"),
        &weights.pp("model.merger"),
    )?;
    let pre = dir.join("processor_config.json");
    let image = common::read_json(&pre)?["image_processor"].clone();
    let settings = ProcessorSettings { image, processor: serde_json::Value::Null, origin: pre };
    let rule = spec.processor(&settings)?;
    let reference = candle_core::safetensors::load(dir.join("tower_reference.safetensors"), &Device::Cpu)?;
    let cases = common::read_json(&dir.join("tower_reference.json"))?;
    let mut views = 0;
    for (i, case) in cases["cases"].as_array().context("cases")?.iter().enumerate() {
        let name = case["image"].as_str().context("image")?;
        let img = tessera::load_image(&common::fixtures().join(name), tessera::DEFAULT_MAX_PIXELS)?;
        let sizes: Vec<Vec<usize>> = serde_json::from_value(case["target_sizes"].clone())?;
        let layout = rule.layout(img.height, img.width);
        let ours: Vec<Vec<usize>> = layout.views().iter().map(|&(h, w)| vec![h / 4, w / 4]).collect();
        assert_eq!(ours, sizes, "{name}: views");
        let tower = &reference[&format!("image{i}.tower")];
        let mut row = 0;
        for (v, size) in sizes.iter().enumerate() {
            let pixels = reference[&format!("image{i}.view{v}.pixels")].unsqueeze(0)?;
            let (out, grid) = vision.tower_forward(&pixels)?;
            assert_eq!(grid, (size[0] / 2, size[1] / 2), "{name} view {v}: grid after the window merger");
            let n = grid.0 * grid.1;
            let d = max_diff(&out, &tower.narrow(0, row, n)?)?;
            assert!(d < 1e-4, "{name} view {v}: tower output off by {d}");
            row += n;
            let features = vision.forward(&pixels)?;
            let want = &reference[&format!("image{i}.view{v}.features")];
            assert_eq!(features.dims(), want.dims(), "{name} view {v}");
            let d = max_diff(&features, want)?;
            assert!(d < 1e-4, "{name} view {v}: image tokens off by {d}");
            views += 1;
        }
        assert_eq!(rule.tokens(img.height, img.width), case["tokens"].as_u64().context("tokens")? as usize);
    }
    assert_eq!(views, 11);
    Ok(())
}

/// The loaded family on minicpm-v4.6-tiny: pixel values in transformers' layout within 1e-5 of
/// its processor's, image tokens (every view's, in order) within 1e-4 of `get_image_features`,
/// the token counts and the numbered placeholder text; `tessera info`'s description names the
/// budget and refuses video.
#[test]
fn minicpm_image_side_matches_transformers() -> Result<()> {
    let dir = common::fixtures().join("vlm/minicpm-v4.6-tiny");
    let model = tessera::Model::load(dir.to_str().context("utf-8 path")?, &common::load_options()?)?;
    let reference = candle_core::safetensors::load(dir.join("tower_reference.safetensors"), &Device::Cpu)?;
    let cases = common::read_json(&dir.join("tower_reference.json"))?;
    for (i, case) in cases["cases"].as_array().context("cases")?.iter().enumerate() {
        let name = case["image"].as_str().context("image")?;
        let img = tessera::load_image(&common::fixtures().join(name), tessera::DEFAULT_MAX_PIXELS)?;
        let pixels = common::on_cpu(&model.pixel_values(&img)?)?;
        let want = &reference[&format!("image{i}.pixel_values")];
        assert_eq!(pixels.dims(), want.dims(), "{name}: pixel values");
        let d = max_diff(&pixels, want)?;
        assert!(d < 1e-5, "{name}: pixel values off by {d}");
        let features = common::on_cpu(model.encode_image(&img)?.tokens())?.squeeze(0)?;
        let views = case["target_sizes"].as_array().context("views")?.len();
        let want: Vec<Tensor> = (0..views).map(|v| reference[&format!("image{i}.view{v}.features")].clone()).collect();
        let d = max_diff(&features, &Tensor::cat(&want, 0)?)?;
        assert!(d < 1e-4, "{name}: image tokens off by {d}");
        let n = case["tokens"].as_u64().context("tokens")? as usize;
        assert_eq!(model.image_tokens(&img)?, n, "{name}");
        let text = model.image_placeholder_text(&img, 2)?.context("a placeholder")?;
        assert!(text.starts_with("<image_id>2</image_id><image><|image_pad|>"), "{text}");
        assert_eq!(text.matches("<|image_pad|>").count(), n, "{name}");
        assert_eq!(text.matches("<slice>").count(), views - 1, "{name}");
    }
    let about = model.vision_description().context("a description")?;
    assert!(about.contains("window-attention merger after layer 1") && about.contains("no video"), "{about}");
    assert!(about.contains("about 9 image tokens per view, at most about 45 per image"), "{about}");
    Ok(())
}
