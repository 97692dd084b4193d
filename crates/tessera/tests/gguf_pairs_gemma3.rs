//! llama.cpp's GGUF + mmproj pair of Gemma 3 (issue 39): the tiny Gemma3ForConditionalGeneration
//! checkpoint converted by llama.cpp's own `convert_hf_to_gguf.py` (scripts/make_gguf_pairs.sh,
//! `gemma3`) into an f32 text GGUF (`gemma3` architecture: norms stored as `1 + w`, four norms
//! per layer, q/k norms, 5 local : 1 global layers with their own RoPE bases, linear scaling on
//! the global ones) and an f32 mmproj (`clip.projector_type = gemma3`: SigLIP, 2x2 average
//! pooling, `mm.soft_emb_norm` stored as `1 + w`, `mm.input_projection`), loaded as a pair and
//! compared with transformers' reference for the same checkpoint
//! (tests/fixtures/vlm/gemma3-tiny/reference.*) and with tessera's run of the folder: prompt ids
//! (the GGUF's vocabulary and chat template, `<start_of_image>` expanded), pixels, image
//! features, logits, 16 greedy ids — on the non-square photo, two images in one prompt and text
//! alone.

mod common;
mod pairs_common;

use std::path::PathBuf;

use anyhow::{ensure, Context, Result};
use candle_core::Tensor;
use tessera::{LoadOptions, Model};

const NAME: &str = "gemma3-tiny";

fn pair_files() -> (PathBuf, PathBuf) {
    pairs_common::pair_files(NAME)
}

fn load_pair(opts: LoadOptions) -> Result<Model> {
    pairs_common::load_pair(NAME, pair_files().1, opts)
}

fn folder() -> Result<Model> {
    pairs_common::folder(NAME)
}

/// The pair, dequantized to f32 and as loaded by default (f32 tensors through the quantized
/// path), against transformers' reference and the folder, case by case. The pan-and-scan case
/// is the folder's alone (llama.cpp has no pan-and-scan, and the mmproj states none of its
/// settings).
#[test]
fn the_gemma3_pair_matches_transformers_and_the_folder() -> Result<()> {
    let folder = folder()?;
    let (reference, tensors) = pairs_common::reference(NAME)?;
    let (_, mmproj) = pair_files();
    for (label, opts) in [("f32", common::load_options()?), ("default", common::gguf_load_options()?)] {
        let pair = load_pair(opts)?;
        assert_eq!((pair.config().family, pair.info().mmproj.as_deref()), ("gemma3", Some(mmproj.as_path())));
        let mut checked = 0;
        for case in reference["cases"].as_array().context("cases")? {
            if case["pan_and_scan"].as_bool() == Some(true) {
                continue;
            }
            let parts = case["messages"][0]["content"].as_array().context("content")?;
            let name = case["name"].as_str().context("name")?;
            let what = format!("gemma3-tiny/{label}/{name}");
            let images = common::case_images(case)?;
            // The GGUF's vocabulary and chat template give the processor's ids, each image
            // `\n\n<start_of_image>` + 16 image tokens + `<end_of_image>\n\n`.
            let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
            let prompt = pair.encode_prompt(&text, None, false, &images)?;
            assert_eq!(prompt.ids(), common::ids(&case["input_ids"]), "{what}: prompt ids");

            if !images.is_empty() {
                let reference = |k: &str| tensors.get(&format!("{name}.{k}")).with_context(|| format!("{what}: {k}"));
                let pixels = images.iter().map(|i| pair.pixel_values(i)).collect::<tessera::Result<Vec<_>>>()?;
                let d = common::max_abs_diff(&Tensor::cat(&pixels, 0)?, reference("pixel_values")?, "pixels")?;
                assert!(d < 1e-5, "{what}: pixel values differ from transformers' by {d}");
                pairs_common::features_match(&pair, &folder, &images, reference("image_features")?, &what)?;
            }

            let expected = tensors.get(&format!("{name}.logits")).context("reference logits")?;
            common::pair_logits_and_greedy_match(&pair, &folder, &prompt, &images, expected, case, &what)?;
            checked += 1;
        }
        assert_eq!(checked, 3, "gemma3-tiny/{label}: the chelsea, two-image and text cases");
    }
    Ok(())
}

/// What the GGUF leaves to llama.cpp's `gemma3` architecture code comes out as the folder's
/// config states it: the attention scale (llama.cpp's `1/√head_dim`, the tiny model's
/// `query_pre_attn_scalar` 16 = head_dim), the 5:1 local/global pattern and window, the local
/// layers' RoPE base and the global ones' linear scaling, four norms per layer, the tanh GELU,
/// the √width embedding scale and each image's tokens attending both ways. Only the norm
/// scales' storage differs: the converter wrote `1 + w`, so the pair reads them plain.
#[test]
fn the_gemma3_gguf_follows_llama_cpps_rules_as_the_folder_states_them() -> Result<()> {
    let (pair, folder) = (load_pair(common::load_options()?)?, folder()?);
    let (p, f) = (pair.config(), folder.config());
    let (pd, fd) = (&p.decoder, &f.decoder);
    assert_eq!(fd.query_pre_attn_scalar, Some(16.0));
    assert_eq!(pd.query_pre_attn_scalar, Some(pd.head_dim as f64));
    assert_eq!((pd.rope.theta, pd.rope.scaling), (fd.rope.theta, fd.rope.scaling));
    assert_eq!(pd.local_rope, fd.local_rope);
    assert_eq!(p.layer_windows, f.layer_windows);
    assert_eq!(p.layer_windows, [Some(8), Some(8), Some(8), Some(8), Some(8), None]);
    assert_eq!((pd.sandwich_norms, pd.qk_norm, pd.hidden_act), (fd.sandwich_norms, fd.qk_norm, fd.hidden_act));
    assert_eq!((p.embed_scale, p.final_logit_softcapping), (f.embed_scale, f.final_logit_softcapping));
    assert_eq!((p.vocab_size, p.bidirectional_images), (f.vocab_size, true));
    assert_eq!(
        (pd.norm_style, fd.norm_style),
        (tessera_decoder::NormStyle::Plain, tessera_decoder::NormStyle::OnePlusWeight)
    );
    Ok(())
}

/// The pair's images attend to themselves both ways: without the blocks its prompt logits are
/// transformers' without `token_type_ids` (`<case>.logits_causal_images`), which the blocks
/// move by over a thousand times the tolerance — so the logits test above checks the rule.
#[test]
fn the_gemma3_pairs_images_attend_both_ways() -> Result<()> {
    let pair = load_pair(common::load_options()?)?;
    let (reference, tensors) = pairs_common::reference(NAME)?;
    let mut checked = 0;
    for case in reference["cases"].as_array().context("cases")? {
        let name = case["name"].as_str().context("name")?;
        let Some(causal) = tensors.get(&format!("{name}.logits_causal_images")) else { continue };
        if case["pan_and_scan"].as_bool() == Some(true) {
            continue;
        }
        let images = common::case_images(case)?;
        let prompt = pair.prompt(common::ids(&case["input_ids"]), &images)?;
        ensure!(prompt.image_runs().len() == images.len(), "{name}: one block per image");
        let embeds = pair.prompt_embeddings(&prompt)?;
        let last = |runs: &[std::ops::Range<usize>]| -> Result<Tensor> {
            let hidden = pair.forward_embeds(&embeds, runs, &mut pair.new_cache(), &mut Default::default())?;
            let logits = pair.logits(&hidden)?;
            Ok(logits.narrow(0, logits.dim(0)? - causal.dim(0)?, causal.dim(0)?)?)
        };
        let d = common::max_abs_diff(&last(&[])?, causal, "causal logits")?;
        assert!(d < 1e-4, "{name}: the pair without blocks vs transformers without token_type_ids: {d}");
        let moved = common::max_abs_diff(&last(&prompt.image_runs())?, causal, "block logits")?;
        assert!(moved > 0.1, "{name}: the blocks move the logits by only {moved}");
        checked += 1;
    }
    assert_eq!(checked, 2, "the chelsea and two-image cases");
    Ok(())
}

/// Pan-and-scan is refused on the pair in one line naming the mmproj: llama.cpp has none, and
/// the mmproj states none of its settings.
#[test]
fn pan_and_scan_is_refused_on_the_pair() -> Result<()> {
    let (_, mmproj) = pair_files();
    let err = load_pair(LoadOptions { pan_and_scan: true, ..common::load_options()? }).err().context("loaded")?;
    let err = err.to_string();
    assert!(!err.contains('\n') && err.contains(&mmproj.display().to_string()), "{err}");
    assert!(err.contains("pan-and-scan") && err.contains("has none"), "{err}");
    Ok(())
}

/// A Gemma 3 mmproj beside a text model of another family (the SmolVLM pair's Llama, whose
/// vocabulary has no `<image_soft_token>`) is refused in one line naming the mmproj.
#[test]
fn a_gemma3_mmproj_with_another_text_model_is_refused_in_one_line() -> Result<()> {
    let (_, mmproj) = pair_files();
    let smolvlm = common::fixtures().join("vlm/smolvlm-tiny-gguf/smolvlm-tiny-f32.gguf");
    let opts = LoadOptions { mmproj: Some(mmproj.clone()), ..common::load_options()? };
    let err = Model::load(smolvlm.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(&mmproj.display().to_string()), "{err}");
    assert!(err.contains("`<image_soft_token>`") || err.contains("gemma3"), "{err}");
    Ok(())
}

/// The mmproj as the converter writes it in f16 (`--outtype f16`: every matrix f16, the patch
/// kernel and position table f32; what users download), with the f32 text GGUF: the image
/// features are the folder's within f16's precision (relative error below 2e-3, twice f16's
/// epsilon 2^-10; measured 7.3e-4 and 7.7e-4), and the 16 greedy ids are still transformers'.
#[test]
fn the_converters_f16_mmproj_gives_the_folders_image_tokens_within_f16_rounding() -> Result<()> {
    let f16 = common::fixtures().join("vlm/gemma3-tiny-gguf/f16/mmproj-gemma3-tiny-f16.gguf");
    let checked = pairs_common::f16_mmproj_matches(NAME, f16, |case| case["pan_and_scan"].as_bool() == Some(true))?;
    assert_eq!(checked, 2, "the chelsea and two-image cases");
    Ok(())
}
