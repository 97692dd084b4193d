//! llama.cpp's GGUF + mmproj pair of MiniCPM-V 4.6 (issues 39 and 41): the tiny
//! MiniCPMV4_6ForConditionalGeneration checkpoint as llama.cpp runs its pair
//! (tests/fixtures/vlm/minicpm-v4.6-pair-tiny: minicpm-v4.6-tiny with at most 9 slices and a 70×70
//! table of learned positions, the two things llama.cpp fixes and the mmproj cannot state)
//! converted by llama.cpp's own `convert_hf_to_gguf.py` (scripts/make_gguf_pairs.sh, `minicpm`)
//! into an f32 text GGUF (`qwen35`: Qwen3.5's Gated DeltaNet layers in llama.cpp's layout, no
//! output matrix: the head is the embeddings) and an f32 mmproj (`clip.projector_type =
//! minicpmv4_6`: SigLIP, the window-attention ViT merger after `clip.vision.wa_layer_indexes`,
//! the downsample MLP `mm.*`, `clip.vision.image_size` the slices' scale resolution), loaded as
//! a pair and compared with transformers' reference for the same checkpoint (reference.*) and
//! with tessera's run of the folder: prompt ids (the GGUF's vocabulary and chat template, the
//! `<image_id>` / `<image>` / `<slice>` layout), image features, logits and 16 greedy ids — on
//! the non-square photo, two images, an image in an earlier turn and text alone.

mod common;
mod pairs_common;

use anyhow::{Context, Result};
use tessera::{LoadOptions, Model};

const NAME: &str = "minicpm-v4.6-pair-tiny";

/// The pair, dequantized to f32 and as loaded by default (f32 tensors through the quantized
/// path), against transformers' reference and the folder, case by case.
#[test]
fn the_minicpm_pair_matches_transformers_and_the_folder() -> Result<()> {
    pairs_common::pair_matches_transformers_and_the_folder(NAME, "minicpmv4_6")
}

/// What the pair's files leave to llama.cpp's rules comes out as the folder's config states it:
/// plain 1-D positions (the `qwen35` GGUF states M-RoPE sections, which MiniCPM-V does not use),
/// the partial rotary dimension and base, the tower's sizes, its 70×70 position table, the
/// window merger's layer and the processor's slicing (`tessera info`'s line).
#[test]
fn the_minicpm_pair_states_what_the_folder_does() -> Result<()> {
    let (_, mmproj) = pairs_common::pair_files(NAME);
    let pair = pairs_common::load_pair(NAME, mmproj, common::load_options()?)?;
    let folder = pairs_common::folder(NAME)?;
    let (p, f) = (pair.config(), folder.config());
    assert_eq!((p.decoder.rope.mrope, f.decoder.rope.mrope), (None, None));
    assert_eq!((p.decoder.rotary_dim, p.decoder.rope.theta), (f.decoder.rotary_dim, f.decoder.rope.theta));
    let described = pair.vision_description().context("an image side")?;
    assert_eq!(Some(described), folder.vision_description());
    Ok(())
}

/// The MiniCPM-V 4.6 mmproj beside a text model of another family (the Gemma 3 pair's, whose
/// vocabulary has no `<|image_pad|>`) is refused in one line naming both files, the projector
/// type and the text model's family; beside the Qwen3.5 pair's text model (the same text
/// family, a vocabulary without MiniCPM-V's `<slice>` tokens), in one line naming the token.
#[test]
fn a_minicpm_mmproj_with_another_text_model_is_refused_in_one_line() -> Result<()> {
    let (_, mmproj) = pairs_common::pair_files(NAME);
    let opts = LoadOptions { mmproj: Some(mmproj.clone()), ..common::load_options()? };
    let gemma3 = common::fixtures().join("vlm/gemma3-tiny-gguf/gemma3-tiny-f32.gguf");
    let err = Model::load(gemma3.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    eprintln!("{err}");
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(&mmproj.display().to_string()) && err.contains(&gemma3.display().to_string()), "{err}");
    assert!(err.contains("`minicpmv4_6`") && err.contains("(gemma3_text)") && err.contains("`<|image_pad|>`"), "{err}");
    let (qwen3_5, _) = pairs_common::pair_files("qwen3.5-tiny");
    let err = Model::load(qwen3_5.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    eprintln!("{err}");
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(&mmproj.display().to_string()) && err.contains(&qwen3_5.display().to_string()), "{err}");
    Ok(())
}
