//! llama.cpp's GGUF + mmproj pair of Qwen3.5 (issue 41): the tiny checkpoint converted by
//! llama.cpp's own `convert_hf_to_gguf.py` (scripts/make_gguf_pairs.sh, `qwen3_5`) into an f32
//! text GGUF (`qwen35`: Gated DeltaNet layers stored in llama.cpp's layout — `A` as −exp(A_log),
//! the conv kernel squeezed, value heads tiled over the 2 key heads rather than grouped, every
//! norm but the DeltaNet's as `1 + w` — and gated attention layers with partial, interleaved
//! M-RoPE) and an f32 mmproj (`qwen3vl_merger` without DeepStack blocks), loaded as a pair and
//! compared with transformers' reference for the same checkpoint
//! (tests/fixtures/vlm/qwen3.5-tiny/reference.*) and with tessera's run of the folder: prompt
//! ids, image features, logits and 16 greedy ids on every case (the photo, two images, an image
//! in an earlier turn, text alone); and the text GGUF alone.

mod common;
mod pairs_common;

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use candle_core::Tensor;
use serde_json::Value;
use tessera::{LoadOptions, Model, RgbImage};
use tessera_decoder::{DeltaLayout, NormStyle};

const NAME: &str = "qwen3.5-tiny";

fn pair_files() -> (PathBuf, PathBuf) {
    pairs_common::pair_files(NAME)
}

fn folder() -> Result<Model> {
    pairs_common::folder(NAME)
}

fn prompt(model: &Model, case: &Value, images: &[RgbImage]) -> Result<tessera::Prompt> {
    pairs_common::chat_prompt(model, case, images)
}

/// The pair, dequantized to f32 and as loaded by default (f32 tensors through the quantized
/// path), against transformers' reference and the folder, case by case.
#[test]
fn qwen3_5_pair_matches_transformers_and_the_folder() -> Result<()> {
    let folder = folder()?;
    let (reference, tensors) = pairs_common::reference(NAME)?;
    let (text, mmproj) = pair_files();
    for (label, opts) in [("f32", common::load_options()?), ("default", common::gguf_load_options()?)] {
        let opts = LoadOptions { mmproj: Some(mmproj.clone()), ..opts };
        let pair = Model::load(text.to_str().context("utf-8 path")?, &opts)?;
        assert_eq!((pair.config().family, pair.info().mmproj.as_deref()), ("qwen3_5", Some(mmproj.as_path())));
        let mut checked = Vec::new();
        for case in reference["cases"].as_array().context("cases")? {
            let case_name = case["name"].as_str().context("name")?;
            let what = format!("{NAME}/{label}/{case_name}");
            let images = common::case_images(case)?;
            // The GGUF's vocabulary and chat template, and smart_resize under the mmproj's
            // patch size, merge size and pixel budget, give the processor's ids.
            let prompt = prompt(&pair, case, &images)?;
            assert_eq!(prompt.ids(), common::ids(&case["input_ids"]), "{what}: prompt ids");

            if !images.is_empty() {
                let want = tensors.get(&format!("{case_name}.image_features")).context("reference features")?;
                pairs_common::features_match(&pair, &folder, &images, want, &what)?;
                let levels = pair.encode_image(&images[0])?.layer_additions().len();
                assert_eq!(levels, 0, "{what}: Qwen3.5's tower has no DeepStack levels");
            }

            let expected = tensors.get(&format!("{case_name}.logits")).context("reference logits")?;
            common::pair_logits_and_greedy_match(&pair, &folder, &prompt, &images, expected, case, &what)?;
            checked.push(case_name.to_string());
        }
        assert_eq!(checked, ["chelsea", "two_images", "earlier_turn", "text_only"], "{label}");
    }
    Ok(())
}

/// The `qwen35` text GGUF alone: a text model with the folder's hybrid decoder (three Gated
/// DeltaNet layers in llama.cpp's layout, then a gated attention layer turning 8 of 32 dims by
/// interleaved M-RoPE), whose text-only logits are the folder's.
#[test]
fn a_qwen3_5_text_gguf_alone_is_the_folders_text_model() -> Result<()> {
    let (text, _) = pair_files();
    let model = Model::load(text.to_str().context("utf-8 path")?, &common::load_options()?)?;
    let folder = folder()?;
    let (d, f) = (&model.config().decoder, &folder.config().decoder);
    ensure!(model.config().vision.is_none());
    let mrope = d.rope.mrope.context("M-RoPE")?;
    assert_eq!((mrope.section, mrope.interleaved), ([2, 1, 1], true));
    assert_eq!((d.rotary_dim, d.attn_output_gate, d.qk_norm), (Some(8), true, true));
    // llama.cpp's converter stores every norm but the DeltaNet's as 1 + w.
    assert_eq!((d.norm_style, f.norm_style), (NormStyle::Plain, NormStyle::OnePlusWeight));
    let (linear, own) = (d.linear.as_ref().context("linear layers")?, f.linear.as_ref().context("folder's")?);
    assert_eq!(linear.layers, [true, true, true, false]);
    assert_eq!((linear.delta.layout, own.delta.layout), (DeltaLayout::LlamaCpp, DeltaLayout::Checkpoint));
    // The same sizes; the file's epsilon is the config's as an f32.
    assert_eq!(linear.delta.eps as f32, own.delta.eps as f32);
    let same =
        tessera_decoder::GatedDeltaConfig { layout: own.delta.layout, eps: own.delta.eps, ..linear.delta.clone() };
    assert_eq!(same, own.delta);

    let reference = common::read_json(&common::fixtures().join("vlm").join(NAME).join("reference.json"))?;
    let case = reference["cases"]
        .as_array()
        .context("cases")?
        .iter()
        .find(|c| c["name"] == "text_only")
        .context("text_only case")?;
    let prompt = prompt(&model, case, &[])?;
    assert_eq!(prompt.ids(), common::ids(&case["input_ids"]), "text alone: prompt ids");
    let run = |m: &Model| -> Result<Tensor> {
        let hidden = m.forward(&prompt, .., &mut m.new_cache(), &mut Default::default(), &mut Default::default())?;
        Ok(m.logits(&hidden)?)
    };
    let d = common::max_abs_diff(&run(&model)?, &run(&folder)?, "logits")?;
    assert!(d < 1e-4, "text alone: logits differ from the folder's by {d}");
    Ok(())
}

/// Qwen3-VL's mmproj (the same projector type, with DeepStack blocks) beside the Qwen3.5 text
/// GGUF is refused in one line naming the mmproj.
#[test]
fn a_qwen3_vl_mmproj_beside_qwen3_5_is_refused_in_one_line() -> Result<()> {
    let (text, _) = pair_files();
    let mmproj = common::fixtures().join("vlm/qwen3-vl-tiny-gguf/mmproj-qwen3-vl-tiny-f32.gguf");
    let opts = LoadOptions { mmproj: Some(mmproj.clone()), ..common::load_options()? };
    let err = Model::load(text.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(&mmproj.display().to_string()) && err.contains("DeepStack"), "{err}");
    Ok(())
}
