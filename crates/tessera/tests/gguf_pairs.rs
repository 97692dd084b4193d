//! llama.cpp's GGUF + mmproj pairs (issue 39): the tiny SmolVLM, LLaVA 1.5 and LLaVA-interleave
//! checkpoints converted by llama.cpp's own converters (scripts/make_gguf_pairs.sh) into an f32
//! text GGUF and an f32 mmproj each, loaded as a pair and compared with transformers' reference
//! for the same checkpoint (tests/fixtures/vlm/<name>/reference.*) and with the folder's own run:
//! prompt ids (the GGUF's vocabulary and chat template), pixels, image tokens, logits, greedy
//! ids.

mod common;

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use candle_core::{Device, Tensor};
use tessera::{load_image, LoadOptions, Model, DEFAULT_MAX_PIXELS};

/// One fixture pair: the checkpoint folder `tests/fixtures/vlm/<folder>` converted into
/// `<folder>-gguf/{<folder>-f32.gguf, mmproj-<folder>-f32.gguf}`, and the family it loads as.
struct Pair {
    folder: &'static str,
    family: &'static str,
}

const SMOLVLM: Pair = Pair { folder: "smolvlm-tiny", family: "idefics3" };
const LLAVA: Pair = Pair { folder: "llava-tiny", family: "llava" };
const LLAVA_INTERLEAVE: Pair = Pair { folder: "llava-interleave-tiny", family: "llava" };

impl Pair {
    fn dir(&self) -> PathBuf {
        common::fixtures().join(format!("vlm/{}-gguf", self.folder))
    }

    fn text(&self) -> PathBuf {
        self.dir().join(format!("{}-f32.gguf", self.folder))
    }

    fn mmproj(&self) -> PathBuf {
        self.dir().join(format!("mmproj-{}-f32.gguf", self.folder))
    }

    fn load(&self, opts: LoadOptions) -> Result<Model> {
        let opts = LoadOptions { mmproj: Some(self.mmproj()), ..opts };
        Ok(Model::load(self.text().to_str().context("utf-8 path")?, &opts)?)
    }
}

fn text_gguf() -> PathBuf {
    SMOLVLM.text()
}

fn mmproj_gguf() -> PathBuf {
    SMOLVLM.mmproj()
}

/// The pair (dequantized to f32, and as loaded by default: f32 tensors through the quantized
/// path) against transformers' reference and the safetensors folder, case by case: prompt ids,
/// pixel values, projected image features, logits, 16 greedy ids.
fn matches_transformers_and_the_folder(p: &Pair) -> Result<()> {
    let folder_dir = common::fixtures().join("vlm").join(p.folder);
    let folder = Model::load(folder_dir.to_str().context("utf-8 path")?, &common::load_options()?)?;
    let reference = common::read_json(&folder_dir.join("reference.json"))?;
    let tensors = candle_core::safetensors::load(folder_dir.join("reference.safetensors"), &Device::Cpu)?;
    for (label, opts) in [("f32", common::load_options()?), ("default", common::gguf_load_options()?)] {
        let pair = p.load(opts)?;
        ensure!(pair.config().vision.is_some(), "{label}: the pair has no image side");
        assert_eq!((pair.config().family, pair.info().mmproj.as_deref()), (p.family, Some(p.mmproj().as_path())));
        let (mut checked, mut with_images) = (0, 0);
        for case in reference["cases"].as_array().context("cases")? {
            let Some(parts) = case["messages"][0]["content"].as_array() else { continue };
            let name = case["name"].as_str().context("name")?;
            let what = format!("{}/{label}/{name}", p.folder);
            let images = common::case_images(case)?;
            // The GGUF's vocabulary, chat template and the mmproj's processor give the
            // processor's ids.
            let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
            let prompt = pair.encode_prompt(&text, None, false, &images)?;
            assert_eq!(prompt.ids(), common::ids(&case["input_ids"]), "{what}: prompt ids");

            // The processor's pixels and the tower + projector's image tokens.
            if !images.is_empty() {
                let reference = |k: &str| tensors.get(&format!("{name}.{k}")).with_context(|| format!("{what}: {k}"));
                if let Ok(expected) = reference("pixel_values") {
                    let pixels = images.iter().map(|i| pair.pixel_values(i)).collect::<tessera::Result<Vec<_>>>()?;
                    let d = common::max_abs_diff(&Tensor::cat(&pixels, 0)?, expected, "pixel values")?;
                    assert!(d < 1e-5, "{what}: pixel values differ from transformers' by {d}");
                }
                let tokens = |m: &Model| -> Result<Tensor> {
                    let t =
                        images.iter().map(|i| m.analysis().image_embeddings(i)).collect::<tessera::Result<Vec<_>>>()?;
                    Ok(Tensor::cat(&t, 0)?)
                };
                let ours = tokens(&pair)?;
                let d = common::max_abs_diff(&ours, &tokens(&folder)?, "image features")?;
                assert!(d < 1e-5, "{what}: image features differ from the folder's by {d}");
                let d = common::max_abs_diff(&ours, reference("image_features")?, "image features")?;
                assert!(d < 1e-4, "{what}: image features differ from transformers' by {d}");
                with_images += 1;
            }

            let expected = tensors.get(&format!("{name}.logits")).context("reference logits")?;
            common::pair_logits_and_greedy_match(&pair, &folder, &prompt, &images, expected, case, &what)?;
            checked += 1;
        }
        assert!(checked >= 2 && with_images >= 1, "{label}: only {checked} cases, {with_images} with images");
    }
    Ok(())
}

#[test]
fn the_smolvlm_pair_matches_transformers_and_the_folder() -> Result<()> {
    matches_transformers_and_the_folder(&SMOLVLM)
}

#[test]
fn the_llava_pair_matches_transformers_and_the_folder() -> Result<()> {
    matches_transformers_and_the_folder(&LLAVA)
}

#[test]
fn the_llava_interleave_pair_matches_transformers_and_the_folder() -> Result<()> {
    matches_transformers_and_the_folder(&LLAVA_INTERLEAVE)
}

/// A copy of the mmproj with its `clip.projector_type` string overwritten in place (same
/// length, so the file stays valid).
fn mmproj_with_projector(tag: &str, projector: &str) -> Result<PathBuf> {
    let mut bytes = std::fs::read(mmproj_gguf())?;
    let key = b"clip.projector_type";
    let at = bytes.windows(key.len()).position(|w| w == key).context("no clip.projector_type key")?;
    // key, value type (u32 = 8, string), string length (u64), the string.
    let value = at + key.len() + 4 + 8;
    ensure!(&bytes[value..value + 8] == b"idefics3" && projector.len() == 8, "unexpected layout");
    bytes[value..value + 8].copy_from_slice(projector.as_bytes());
    let dir = std::env::temp_dir().join(format!("tessera-mmproj-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("mmproj-test.gguf");
    std::fs::write(&path, bytes)?;
    Ok(path)
}

#[test]
fn an_unknown_projector_type_is_refused_in_one_line() -> Result<()> {
    let bad = mmproj_with_projector("unknown", "qwen25vl")?;
    let opts = LoadOptions { mmproj: Some(bad.clone()), ..common::load_options()? };
    let err = Model::load(text_gguf().to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(&bad.display().to_string()) && err.contains("`qwen25vl`"), "{err}");
    assert!(err.contains("not supported") && err.contains("idefics3"), "{err}");
    std::fs::remove_dir_all(bad.parent().context("dir")?)?;
    Ok(())
}

#[test]
fn mismatched_or_misplaced_mmproj_files_are_refused() -> Result<()> {
    // An mmproj with a model folder.
    let folder = common::fixtures().join("vlm/smolvlm-tiny");
    let opts = LoadOptions { mmproj: Some(mmproj_gguf()), ..common::load_options()? };
    let err = Model::load(folder.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    assert!(err.contains("GGUF text model"), "{err}");
    // A text GGUF given as the mmproj.
    let opts = LoadOptions { mmproj: Some(text_gguf()), ..common::load_options()? };
    let err = Model::load(text_gguf().to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    assert!(err.contains("not an mmproj file") && err.contains("`llama`"), "{err}");
    Ok(())
}

#[test]
fn the_mmproj_beside_a_model_is_found() {
    assert_eq!(tessera::mmproj_beside(&text_gguf()), Some(mmproj_gguf()));
    assert_eq!(tessera::mmproj_beside(Path::new("/nonexistent/model.gguf")), None);
    let smollm2 = common::repo_root().join("tests/fixtures/tiny/llama-gqa/model.safetensors");
    assert_eq!(tessera::mmproj_beside(&smollm2), None);
}

#[test]
fn the_text_gguf_alone_is_a_text_model() -> Result<()> {
    let model = Model::load(text_gguf().to_str().context("utf-8 path")?, &common::load_options()?)?;
    ensure!(model.config().vision.is_none());
    let chelsea = load_image(&common::fixtures().join("images/chelsea.png"), DEFAULT_MAX_PIXELS)?;
    let err = model.encode_prompt("Describe this image.", None, false, &[chelsea]).err().context("encoded")?;
    assert!(!err.to_string().is_empty());
    Ok(())
}
