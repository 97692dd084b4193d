//! llama.cpp's GGUF + mmproj pair of Gemma 4 (issues 39 and 41): the tiny
//! Gemma4ForConditionalGeneration checkpoint tests/fixtures/vlm/gemma4-pair-tiny (a Gemma-style
//! byte-fallback BPE vocabulary, 3 KV-shared layers) converted by llama.cpp's own
//! `convert_hf_to_gguf.py` (scripts/make_gguf_pairs.sh, `gemma4`) into an f32 text GGUF
//! (`gemma4`: per-type head sizes, RoPE bases and the `rope_freqs` factors of proportional RoPE,
//! the sliding pattern as one flag per layer, KV-shared layers without k/v, double-wide MLPs,
//! per-layer inputs, layer output scales, norms as stored) and an f32 mmproj (`gemma4v`); see the
//! fixture's SOURCES.md. Compared with transformers' reference for the checkpoint
//! (gemma4-pair-tiny/reference.*) and with tessera's run of the folder.

mod common;
mod pairs_common;

use anyhow::{Context, Result};
use tessera::{LoadOptions, Model};

const NAME: &str = "gemma4-pair-tiny";

/// The pair, dequantized to f32 and as loaded by default, against transformers' reference and
/// the folder on the photo, two images, an image in an earlier turn and text alone: prompt ids
/// (`<|image>` + 60 `<|image|>` + `<image|>` for chelsea), image features within 1e-4 of
/// transformers' and 1e-5 of the folder's, logits within 1e-4, 16 greedy ids. The budget the
/// mmproj does not state is the checkpoint processor's 70 soft tokens, given as llama.cpp's
/// `--image-max-tokens 70` is.
#[test]
fn the_gemma4_pair_matches_transformers_and_the_folder() -> Result<()> {
    pairs_common::pair_with_options_matches_transformers_and_the_folder(NAME, "gemma4", budget_70)
}

fn budget_70(opts: LoadOptions) -> LoadOptions {
    LoadOptions { image_max_tokens: Some(70), ..opts }
}

/// The text GGUF alone (no mmproj), dequantized to f32 and as loaded by default: the text-only
/// chat renders through the GGUF's chat template and vocabulary to transformers' prompt ids,
/// the last 8 positions' logits are transformers' and the folder's within 1e-4, and the 16
/// greedy ids are transformers' (the 4th is `<|audio|>`, embedded as `<pad>` as transformers
/// does). The decoder the file describes is the folder's, layer by layer.
#[test]
fn the_gemma4_text_gguf_alone_matches_transformers_and_the_folder() -> Result<()> {
    let folder = pairs_common::folder(NAME)?;
    let (reference, tensors) = pairs_common::reference(NAME)?;
    let case = reference["cases"]
        .as_array()
        .context("cases")?
        .iter()
        .find(|c| c["name"] == "text_only")
        .context("text_only")?;
    let (text, _) = pairs_common::pair_files(NAME);
    for (label, opts) in [("f32", common::load_options()?), ("default", common::gguf_load_options()?)] {
        let what = format!("{NAME}/text GGUF/{label}");
        let gguf = Model::load(text.to_str().context("utf-8 path")?, &opts)?;
        let (g, f) = (gguf.config(), folder.config());
        // The file's epsilon is the f32 nearest 1e-6.
        assert_eq!(g.decoder.rms_norm_eps, f64::from(f.decoder.rms_norm_eps as f32), "{what}");
        let decoder = tessera_decoder::DecoderConfig { rms_norm_eps: f.decoder.rms_norm_eps, ..g.decoder.clone() };
        assert_eq!(format!("{decoder:?}"), format!("{:?}", f.decoder), "{what}: the decoder");
        assert_eq!(
            (g.embed_scale, g.vocab_size, g.tie_word_embeddings, &g.layer_windows, g.final_logit_softcapping),
            (f.embed_scale, f.vocab_size, f.tie_word_embeddings, &f.layer_windows, f.final_logit_softcapping),
            "{what}"
        );
        assert_eq!((g.per_layer_inputs, &g.embed_as), (f.per_layer_inputs, &f.embed_as), "{what}");
        // `<eos>` and `<turn|>` (the folder's generation_config; llama.cpp's end of generation).
        assert_eq!(gguf.eos_ids(), folder.eos_ids(), "{what}");
        let prompt = pairs_common::chat_prompt(&gguf, case, &[])?;
        assert_eq!(prompt.ids(), common::ids(&case["input_ids"]), "{what}: prompt ids");
        let expected = tensors.get("text_only.logits").context("reference logits")?;
        common::pair_logits_and_greedy_match(&gguf, &folder, &prompt, &[], expected, case, &what)?;
    }
    Ok(())
}

/// The Gemma 4 mmproj beside a text model of another family (the Gemma 3 pair's, whose
/// vocabulary has no `<|image|>`) is refused in one line naming both files, the projector type,
/// the text model's family and the token; another family's mmproj (Gemma 3's) beside the Gemma
/// 4 text model likewise.
#[test]
fn a_gemma4_mmproj_with_another_text_model_is_refused_in_one_line() -> Result<()> {
    let (text, mmproj) = pairs_common::pair_files(NAME);
    let refused = |model: &std::path::Path, mmproj: &std::path::Path| -> Result<String> {
        let opts = LoadOptions { mmproj: Some(mmproj.to_path_buf()), ..common::load_options()? };
        let err = Model::load(model.to_str().context("utf-8 path")?, &opts).err().context("loaded")?.to_string();
        eprintln!("{err}");
        assert!(!err.contains('\n'), "{err}");
        assert!(err.contains(&mmproj.display().to_string()) && err.contains(&model.display().to_string()), "{err}");
        Ok(err)
    };
    let (gemma3, gemma3_mmproj) = pairs_common::pair_files("gemma3-tiny");
    let err = refused(&gemma3, &mmproj)?;
    assert!(err.contains("`gemma4v`") && err.contains("(gemma3_text)") && err.contains("`<|image|>`"), "{err}");
    let err = refused(&text, &gemma3_mmproj)?;
    assert!(err.contains("`gemma3`") && err.contains("(gemma4_text)") && err.contains("`<image_soft_token>`"), "{err}");
    Ok(())
}

/// The pair against llama.cpp's own run of it (`llamacpp_steps.json`, llama-mtmd-logits: the
/// same files, chelsea resized by PIL to the 160×96 both sides then keep, `--image-max-tokens
/// 70`; see the fixture's SOURCES.md): llama.cpp's prompt chunks are tessera's ids (60 image
/// tokens), and step by step, teacher-forced with llama.cpp's choices, the project's criterion —
/// the same top-1 wherever llama.cpp's margin exceeds 1.0, its top-5 logits within 2.0. (llama.cpp
/// runs the tower's MLP with quick GELU, the converter writing no `clip.use_gelu`, and keeps an
/// f16 KV cache: the logits differ by about 0.1.)
#[test]
fn the_gemma4_pair_agrees_with_llama_mtmd_step_by_step() -> Result<()> {
    let dir = common::fixtures().join("vlm/gemma4-pair-tiny-gguf");
    let reference = common::read_json(&dir.join("llamacpp_steps.json"))?;
    let (_, mmproj) = pairs_common::pair_files(NAME);
    let image_file = reference["image"].as_str().context("image")?;
    let image =
        tessera::load_image(&common::fixtures().join("vlm/images").join(image_file), tessera::DEFAULT_MAX_PIXELS)?;
    for (label, opts) in [("f32", common::load_options()?), ("default", common::gguf_load_options()?)] {
        let what = format!("{NAME}/{label}/llama.cpp");
        let model = pairs_common::load_pair(NAME, mmproj.clone(), budget_70(opts))?;
        // llama.cpp's text chunks' ids, each image chunk as that many `<|image|>`.
        let image_id = model.tokenizer().token_to_id("<|image|>").context("<|image|>")?;
        let mut theirs = Vec::new();
        for chunk in reference["chunks"].as_array().context("chunks")? {
            match chunk["media"].as_u64() {
                Some(n) => theirs.extend(std::iter::repeat_n(image_id, n as usize)),
                None => theirs.extend(common::ids(&chunk["text"])),
            }
        }
        let text = reference["prompt"].as_str().context("prompt")?;
        let ours = model.encode_prompt(text, None, true, std::slice::from_ref(&image))?;
        assert_eq!(ours.ids(), &theirs[..], "{what}: tessera's prompt ids vs llama.cpp's");
        let mut cache = model.new_cache();
        let hidden = model.prefill(&ours, &mut cache, &mut Default::default(), &mut Default::default())?;
        let logits: Vec<f32> = model.last_logits(&hidden)?.to_vec1()?;
        let steps = reference["steps"].as_array().context("steps")?;
        assert_eq!(steps.len(), 16);
        let worst = common::follows_llama_cpp_steps(&model, logits, &mut cache, steps, 2.0, &what)?;
        eprintln!("{what}: largest |logit − llama.cpp| over the top-5 of every step: {worst:.4}");
    }
    Ok(())
}
