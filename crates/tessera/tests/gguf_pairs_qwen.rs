//! llama.cpp's GGUF + mmproj pairs of Qwen2-VL, Qwen2.5-VL and Qwen3-VL (issue 39): the tiny
//! checkpoints converted by llama.cpp's own `convert_hf_to_gguf.py` (scripts/make_gguf_pairs.sh,
//! `qwen_pair`) into an f32 text GGUF (`qwen2vl` / `qwen3vl` architecture: M-RoPE sections, q/k
//! norms) and an f32 mmproj (`qwen2vl_merger`, `qwen2.5vl_merger`, `qwen3vl_merger`: q/k/v and
//! the Conv3d patch kernel split by the converter), loaded as a pair and compared with
//! transformers' reference for the same checkpoint (tests/fixtures/vlm/<name>/reference.*) and
//! with tessera's run of the folder: prompt ids (the GGUF's vocabulary and chat template, the
//! image token counts of `smart_resize`), image features, logits, 16 greedy ids — on the
//! non-square photo, two images in one prompt and text alone.

mod common;
mod pairs_common;

use anyhow::{ensure, Context, Result};
use tessera::{LoadOptions, Model};

/// The pair of tests/fixtures/vlm/`name` (model family `family`; `deepstack`: Qwen3-VL's
/// DeepStack levels per image), dequantized to f32 and as loaded by default (f32 tensors
/// through the quantized path), against transformers' reference and the folder, case by case.
fn pair_matches_transformers_and_the_folder(name: &str, family: &str, deepstack: usize) -> Result<()> {
    let folder = pairs_common::folder(name)?;
    let (reference, tensors) = pairs_common::reference(name)?;
    let (_, mmproj) = pairs_common::pair_files(name);
    for (label, opts) in [("f32", common::load_options()?), ("default", common::gguf_load_options()?)] {
        let pair = pairs_common::load_pair(name, mmproj.clone(), opts)?;
        assert_eq!((pair.config().family, pair.info().mmproj.as_deref()), (family, Some(mmproj.as_path())));
        let mut checked = 0;
        for case in reference["cases"].as_array().context("cases")? {
            let parts = case["messages"][0]["content"].as_array().context("content")?;
            let case_name = case["name"].as_str().context("name")?;
            let what = format!("{name}/{label}/{case_name}");
            let images = common::case_images(case)?;
            // The GGUF's vocabulary and chat template, and smart_resize under the mmproj's
            // patch size, merge size and pixel budget, give the processor's ids.
            let prompt_text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
            let prompt = pair.encode_prompt(&prompt_text, None, false, &images)?;
            assert_eq!(prompt.ids(), common::ids(&case["input_ids"]), "{what}: prompt ids");

            if !images.is_empty() {
                let want = tensors.get(&format!("{case_name}.image_features")).context("reference features")?;
                pairs_common::features_match(&pair, &folder, &images, want, &what)?;
                let levels = pair.encode_image(&images[0])?.layer_additions().len();
                assert_eq!(levels, deepstack, "{what}: DeepStack levels");
            }

            let expected = tensors.get(&format!("{case_name}.logits")).context("reference logits")?;
            common::pair_logits_and_greedy_match(&pair, &folder, &prompt, &images, expected, case, &what)?;
            checked += 1;
        }
        assert_eq!(checked, 3, "{name}/{label}: the chelsea, two-image and text cases");
    }
    Ok(())
}

#[test]
fn qwen2_vl_pair_matches_transformers_and_the_folder() -> Result<()> {
    pair_matches_transformers_and_the_folder("qwen2-vl-tiny", "qwen2_vl", 0)
}

#[test]
fn qwen2_5_vl_pair_matches_transformers_and_the_folder() -> Result<()> {
    pair_matches_transformers_and_the_folder("qwen2.5-vl-tiny", "qwen2_5_vl", 0)
}

#[test]
fn qwen3_vl_pair_matches_transformers_and_the_folder() -> Result<()> {
    pair_matches_transformers_and_the_folder("qwen3-vl-tiny", "qwen3_vl", 2)
}

/// A Qwen2-VL text GGUF alone is a text model whose decoder keeps its M-RoPE sections (every
/// stream at the text position, so text alone matches the folder's logits).
#[test]
fn a_qwen2_vl_text_gguf_alone_is_a_text_model() -> Result<()> {
    let (text, _) = pairs_common::pair_files("qwen2-vl-tiny");
    let model = Model::load(text.to_str().context("utf-8 path")?, &common::load_options()?)?;
    ensure!(model.config().vision.is_none());
    let mrope = model.config().decoder.rope.mrope.context("M-RoPE")?;
    assert_eq!((mrope.section, mrope.interleaved), ([2, 3, 3], false));
    let (text, _) = pairs_common::pair_files("qwen3-vl-tiny");
    let model = Model::load(text.to_str().context("utf-8 path")?, &common::load_options()?)?;
    let mrope = model.config().decoder.rope.mrope.context("M-RoPE")?;
    assert_eq!((mrope.section, mrope.interleaved, model.config().decoder.qk_norm), ([2, 3, 3], true, true));
    Ok(())
}

/// A Qwen mmproj beside a text model whose vocabulary has no `<|image_pad|>` (the SmolVLM
/// pair's, as wide) is refused in one line naming the mmproj and the missing token.
#[test]
fn a_qwen_mmproj_with_another_text_model_is_refused_in_one_line() -> Result<()> {
    let (_, mmproj) = pairs_common::pair_files("qwen2-vl-tiny");
    let smolvlm = common::fixtures().join("vlm/smolvlm-tiny-gguf/smolvlm-tiny-f32.gguf");
    let opts = LoadOptions { mmproj: Some(mmproj.clone()), ..common::load_options()? };
    let err = Model::load(smolvlm.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(&mmproj.display().to_string()) && err.contains("`<|image_pad|>`"), "{err}");
    Ok(())
}
