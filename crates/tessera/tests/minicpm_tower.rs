//! MiniCPM-V 4.6's tower and merger against transformers on minicpmv4_6-tiny
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
    let dir = common::fixtures().join("vlm/minicpmv4_6-tiny");
    let cfg = ModelConfig::from_config_file(&dir.join("config.json"))?;
    let spec = cfg.vision_spec::<MiniCpmV46Spec>().context("a MiniCPM image side")?;
    let weights = Weights::from_safetensors(&[dir.join("model.safetensors")], DType::F32, &Device::Cpu)?;
    let vision = MiniCpmVision::new(
        &spec.vision_config(cfg.decoder.hidden_size),
        &weights.pp("model.vision_tower"),
        &weights.pp("model.merger"),
    )?;
    let pre = dir.join("preprocessor_config.json");
    let settings =
        ProcessorSettings { image: common::read_json(&pre)?, processor: serde_json::Value::Null, origin: pre };
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
