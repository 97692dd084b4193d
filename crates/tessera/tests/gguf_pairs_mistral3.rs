//! llama.cpp's GGUF + mmproj pair of Mistral 3 (issues 39 and 41): the tiny
//! Mistral3ForConditionalGeneration checkpoint with a 3-layer Pixtral tower
//! (tests/fixtures/vlm/mistral3-pair-tiny; llama.cpp's converter cannot write the mmproj of a
//! 2-layer one) converted by llama.cpp's own `convert_hf_to_gguf.py` (scripts/make_gguf_pairs.sh,
//! `mistral3`) into an f32 text GGUF (`mistral3` architecture: Llama's tensors, q/k rows permuted
//! for interleaved RoPE, head_dim 32 stated apart from width / heads) and an f32 mmproj
//! (`clip.projector_type = pixtral`: the tower's q/k rows permuted too, SiLU, RMSNorm + 2x2 patch
//! merger + two linears), loaded as a pair and compared with transformers' reference for the same
//! checkpoint (reference.*) and with tessera's run of the folder: prompt ids (the GGUF's vocabulary
//! and chat template, `[IMG]` rows closed by `[IMG_BREAK]` and `[IMG_END]`), pixels, image features,
//! logits, 16 greedy ids — on the non-square photo, two images in one prompt and text alone.

mod common;
mod pairs_common;

use std::path::PathBuf;

use anyhow::{Context, Result};
use tessera::{LoadOptions, Model, RgbImage};

const NAME: &str = "mistral3-pair-tiny";

fn pair_files() -> (PathBuf, PathBuf) {
    pairs_common::pair_files(NAME)
}

fn load_pair(mmproj: PathBuf, opts: LoadOptions) -> Result<Model> {
    pairs_common::load_pair(NAME, mmproj, opts)
}

fn folder() -> Result<Model> {
    pairs_common::folder(NAME)
}

/// A case's prompt as the chat it is: the system turn's text, then the user turn's text after
/// its images.
fn encode(model: &Model, case: &serde_json::Value, images: &[RgbImage]) -> Result<tessera::Prompt> {
    let text = |turn: &serde_json::Value| -> Result<String> {
        let parts = turn["content"].as_array().context("content")?;
        Ok(parts.iter().filter_map(|p| p["text"].as_str()).collect())
    };
    let messages = case["messages"].as_array().context("messages")?;
    assert_eq!((messages.len(), messages[0]["role"].as_str()), (2, Some("system")), "a system and a user turn");
    let system = text(&messages[0])?;
    Ok(model.encode_prompt(&text(&messages[1])?, Some(&system), false, images)?)
}

/// The f32 pair, dequantized to f32 and as loaded by default (f32 tensors through the quantized
/// path), against transformers' reference and the folder, case by case.
#[test]
fn the_mistral3_pair_matches_transformers_and_the_folder() -> Result<()> {
    let folder = folder()?;
    let (reference, tensors) = pairs_common::reference(NAME)?;
    let (_, mmproj) = pair_files();
    for (label, opts) in [("f32", common::load_options()?), ("default", common::gguf_load_options()?)] {
        let pair = load_pair(mmproj.clone(), opts)?;
        assert_eq!((pair.config().family, pair.info().mmproj.as_deref()), ("mistral3", Some(mmproj.as_path())));
        let mut checked = 0;
        for case in reference["cases"].as_array().context("cases")? {
            let name = case["name"].as_str().context("name")?;
            let what = format!("{NAME}/{label}/{name}");
            let images = common::case_images(case)?;
            let prompt = encode(&pair, case, &images)?;
            assert_eq!(prompt.ids(), common::ids(&case["input_ids"]), "{what}: prompt ids");

            if !images.is_empty() {
                let reference = |k: &str| tensors.get(&format!("{name}.{k}")).with_context(|| format!("{what}: {k}"));
                // The processor pads a batch to its largest image: one image's pixels are its own.
                if let [image] = images.as_slice() {
                    let d = common::max_abs_diff(&pair.pixel_values(image)?, reference("pixel_values")?, "pixels")?;
                    assert!(d < 1e-5, "{what}: pixel values differ from transformers' by {d}");
                }
                let want = reference("image_features")?;
                let (d, f) = pairs_common::features_match(&pair, &folder, &images, want, &what)?;
                eprintln!("{what}: image features within {d:.1e} of transformers', {f:.1e} of the folder's");
            }

            let expected = tensors.get(&format!("{name}.logits")).context("reference logits")?;
            common::pair_logits_and_greedy_match(&pair, &folder, &prompt, &images, expected, case, &what)?;
            checked += 1;
        }
        assert_eq!(checked, 3, "{NAME}/{label}: the chelsea, two-image and text cases");
    }
    Ok(())
}

/// The mmproj as the converter writes it in f16 (`--outtype f16`: every matrix f16, norms and
/// the patch kernel f32), with the f32 text GGUF: the image features are the folder's within
/// f16's precision (relative error below 2e-3, twice f16's epsilon 2^-10), and the 16 greedy
/// ids are still transformers'.
#[test]
fn the_converters_f16_mmproj_gives_the_folders_image_tokens_within_f16_rounding() -> Result<()> {
    let f16 = common::fixtures().join(format!("vlm/{NAME}-gguf/f16/mmproj-{NAME}-f16.gguf"));
    let checked = pairs_common::f16_mmproj_matches(NAME, f16, |_| false)?;
    assert_eq!(checked, 2, "the chelsea and two-image cases");
    Ok(())
}

/// What the pair's files leave to llama.cpp's rules comes out as the folder's config states it:
/// the text model's head_dim 32 (stated apart from 64 / 4 heads), RoPE base 1e9 turned
/// interleaved (the converter permuted q/k), untied head; the tower's sizes, SiLU, 2-D RoPE base
/// 1e4 (clip.cpp's fixed value), merge 2, the processor's longest edge (`tessera info`'s line).
#[test]
fn the_mistral3_pair_states_what_the_folder_does() -> Result<()> {
    let (_, mmproj) = pair_files();
    let pair = load_pair(mmproj, common::load_options()?)?;
    let folder = folder()?;
    let (p, f) = (pair.config(), folder.config());
    assert_eq!(p.decoder.head_dim, 32);
    assert_eq!((p.decoder.head_dim, p.decoder.rope.theta), (f.decoder.head_dim, f.decoder.rope.theta));
    assert_eq!(p.decoder.rope.style, tessera_decoder::RopeStyle::Interleaved);
    assert_eq!((p.tie_word_embeddings, p.decoder.num_key_value_heads), (f.tie_word_embeddings, 2));
    let described = pair.vision_description().context("an image side")?;
    assert_eq!(Some(described), folder.vision_description());
    Ok(())
}

/// The Pixtral mmproj beside a text model of another family (the Gemma 3 pair's, as wide) is
/// refused in one line naming both files, the projector type, the text model's family and the
/// image token its vocabulary lacks.
#[test]
fn a_pixtral_mmproj_with_another_text_model_is_refused_in_one_line() -> Result<()> {
    let (_, mmproj) = pair_files();
    let gemma3 = common::fixtures().join("vlm/gemma3-tiny-gguf/gemma3-tiny-f32.gguf");
    let opts = LoadOptions { mmproj: Some(mmproj.clone()), ..common::load_options()? };
    let err = Model::load(gemma3.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(&mmproj.display().to_string()) && err.contains(&gemma3.display().to_string()), "{err}");
    assert!(err.contains("`pixtral`") && err.contains("(gemma3_text)") && err.contains("`[IMG]`"), "{err}");
    eprintln!("{err}");
    // A Llama text GGUF (a family Mistral 3 GGUFs were also written as) without Mistral's image
    // tokens: the same line.
    let smolvlm = common::fixtures().join("vlm/smolvlm-tiny-gguf/smolvlm-tiny-f32.gguf");
    let err = Model::load(smolvlm.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(&mmproj.display().to_string()) && err.contains(&smolvlm.display().to_string()), "{err}");
    assert!(err.contains("`[IMG]`") && err.contains("(llama)"), "{err}");
    eprintln!("{err}");
    Ok(())
}
