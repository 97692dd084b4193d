//! llama.cpp's GGUF + mmproj pair of InternVL3 (issues 39 and 41): the tiny
//! InternVLForConditionalGeneration checkpoint (tests/fixtures/vlm/internvl-tiny) converted by
//! llama.cpp's own `convert_hf_to_gguf.py` (scripts/make_gguf_pairs.sh, `internvl`) into an f32
//! text GGUF (`qwen2`, tied head) and an f32 mmproj (`clip.projector_type = internvl`: the
//! InternViT tower with its CLS token and layer scales `ls1` / `ls2`, the pixel shuffle's
//! `clip.vision.projector.scale_factor`, LayerNorm + two linears `mm.model.mlp.{0,1,3}`, the
//! processor's tile bounds as `clip.vision.preproc_{min,max}_tiles`), loaded as a pair and
//! compared with transformers' reference for the same checkpoint (reference.*) and with tessera's
//! run of the folder: prompt ids (the GGUF's vocabulary and chat template, `<img>` +
//! `<IMG_CONTEXT>` per token of each tile and the thumbnail + `</img>`), image features, logits
//! and 16 greedy ids — on the non-square photo, two images, an image in an earlier turn and text
//! alone.

mod common;
mod pairs_common;

use anyhow::{Context, Result};
use tessera::{LoadOptions, Model};

const NAME: &str = "internvl-tiny";

/// The pair, dequantized to f32 and as loaded by default (f32 tensors through the quantized
/// path), against transformers' reference and the folder, case by case.
#[test]
fn the_internvl_pair_matches_transformers_and_the_folder() -> Result<()> {
    pairs_common::pair_matches_transformers_and_the_folder(NAME, "internvl")
}

/// What the pair's files leave to llama.cpp's rules comes out as the folder's config states it:
/// the text model's RoPE base and tied head, the tower's sizes and layer scale, the shuffle, the
/// tiles' size and their bounds (`tessera info`'s line).
#[test]
fn the_internvl_pair_states_what_the_folder_does() -> Result<()> {
    let (_, mmproj) = pairs_common::pair_files(NAME);
    let pair = pairs_common::load_pair(NAME, mmproj, common::load_options()?)?;
    let folder = pairs_common::folder(NAME)?;
    let (p, f) = (pair.config(), folder.config());
    assert_eq!((p.decoder.rope.theta, p.tie_word_embeddings), (f.decoder.rope.theta, f.tie_word_embeddings));
    let described = pair.vision_description().context("an image side")?;
    assert!(described.contains("up to 6 tiles"), "{described}");
    assert_eq!(Some(described), folder.vision_description());
    Ok(())
}

/// The InternVL mmproj beside a text model of another family (the Gemma 3 pair's, whose
/// vocabulary has no `<IMG_CONTEXT>`) is refused in one line naming both files, the projector
/// type and the text model's family; beside another Qwen2 text model without InternVL's image
/// tokens (LLaVA-interleave's), in one line naming the token.
#[test]
fn an_internvl_mmproj_with_another_text_model_is_refused_in_one_line() -> Result<()> {
    let (_, mmproj) = pairs_common::pair_files(NAME);
    let opts = LoadOptions { mmproj: Some(mmproj.clone()), ..common::load_options()? };
    let gemma3 = common::fixtures().join("vlm/gemma3-tiny-gguf/gemma3-tiny-f32.gguf");
    let err = Model::load(gemma3.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    eprintln!("{err}");
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(&mmproj.display().to_string()) && err.contains(&gemma3.display().to_string()), "{err}");
    assert!(err.contains("`internvl`") && err.contains("(gemma3_text)") && err.contains("`<IMG_CONTEXT>`"), "{err}");
    let (interleave, _) = pairs_common::pair_files("llava-interleave-tiny");
    let err = Model::load(interleave.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
    eprintln!("{err}");
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(&mmproj.display().to_string()) && err.contains(&interleave.display().to_string()), "{err}");
    assert!(err.contains("`<IMG_CONTEXT>`") && err.contains("(qwen2)"), "{err}");
    Ok(())
}
