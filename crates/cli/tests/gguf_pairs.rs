//! `tessera generate` on llama.cpp's GGUF + mmproj pairs of the tiny SmolVLM, LLaVA and Gemma 3
//! (tests/fixtures/vlm/*-gguf, written by scripts/make_gguf_pairs.sh): the answer transformers
//! gives for the same checkpoint, the mmproj found beside the model; bad pairs (a wrong or
//! unknown projector type, another family's mmproj, another width, an mmproj alone, a text
//! GGUF without its mmproj) refused in one line naming the files; `--quantize` on the folder
//! answering as llama-quantize's pair of it (tests/fixtures/quant,
//! scripts/make_quant_references.sh), and its bad uses.

use std::path::PathBuf;
use std::process::{Command, Output};

use anyhow::{ensure, Context, Result};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pair(file: &str) -> String {
    fixture("smolvlm-tiny-gguf", file)
}

fn fixture(dir: &str, file: &str) -> String {
    root().join("tests/fixtures/vlm").join(dir).join(file).to_string_lossy().into_owned()
}

/// The one `error:` line of a failed run, which must contain each of `words`.
fn one_line_error(o: &Output, words: &[&str]) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: ") && !err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    for w in words {
        assert!(err.contains(w), "lacks {w:?}: {err}");
    }
    err
}

/// A scratch folder of this test process.
fn scratch(tag: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("tessera-cli-pairs-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn chelsea() -> String {
    root().join("tests/fixtures/images/chelsea.png").to_string_lossy().into_owned()
}

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera")).args(args).output().expect("run tessera")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `generate` on the chelsea photo with the reference's prompt, 16 greedy tokens, JSON out.
fn describe(model: &str, mmproj: Option<&str>) -> Output {
    match mmproj {
        Some(m) => describe_with(model, &["--mmproj", m]),
        None => describe_with(model, &[]),
    }
}

/// [`describe`] with more flags.
fn describe_with(model: &str, flags: &[&str]) -> Output {
    let mut args = vec!["generate", "--model", model];
    args.extend(flags);
    let image = chelsea();
    args.extend(["--image", &image, "--prompt", "Describe this image.", "--max-new-tokens", "16"]);
    args.extend(["--ignore-eos", "--json"]);
    tessera(&args)
}

/// transformers' 16 greedy ids for the chelsea case of the folder's reference.
fn reference_greedy() -> Result<serde_json::Value> {
    reference_greedy_of("smolvlm-tiny")
}

fn reference_greedy_of(folder: &str) -> Result<serde_json::Value> {
    let path = root().join("tests/fixtures/vlm").join(folder).join("reference.json");
    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let cases = reference["cases"].as_array().context("cases")?;
    let case = cases.iter().find(|c| c["name"] == "chelsea").context("the chelsea case")?;
    Ok(case["greedy_ids"].clone())
}

#[test]
fn generate_answers_from_the_pair_as_transformers_does() -> Result<()> {
    let greedy = reference_greedy()?;
    let o = describe(&pair("smolvlm-tiny-f32.gguf"), Some(&pair("mmproj-smolvlm-tiny-f32.gguf")));
    ensure!(o.status.success(), "{}", stderr(&o));
    ensure!(!stderr(&o).contains("beside the model"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())?;
    assert_eq!(v["image_tokens"], 80);
    assert_eq!(v["generated_tokens"], greedy);

    // Without --mmproj, the one beside the model is used, and said so.
    let o = describe(&pair("smolvlm-tiny-f32.gguf"), None);
    ensure!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("using the mmproj beside the model") && err.contains("mmproj-smolvlm-tiny-f32.gguf"), "{err}");
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())?;
    assert_eq!(v["generated_tokens"], greedy);

    // `info` names the family, the decoder and the mmproj.
    let o = tessera(&["info", "--model", &pair("smolvlm-tiny-f32.gguf")]);
    ensure!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("architecture:   idefics3 (llama decoder)"), "{out}");
    assert!(out.contains("mmproj:") && out.contains("mmproj-smolvlm-tiny-f32.gguf"), "{out}");
    assert!(out.contains("vision:         Siglip tower (2 layers, width 32"), "{out}");
    Ok(())
}

#[test]
fn a_wrong_projector_type_is_refused_in_one_line() -> Result<()> {
    // The mmproj with its `clip.projector_type` string (same length) overwritten.
    let mut bytes = std::fs::read(pair("mmproj-smolvlm-tiny-f32.gguf"))?;
    let key = b"clip.projector_type";
    let at = bytes.windows(key.len()).position(|w| w == key).context("no clip.projector_type key")?;
    let value = at + key.len() + 4 + 8; // the key, the value's type (u32), the string's length (u64)
    ensure!(&bytes[value..value + 8] == b"idefics3", "unexpected layout");
    bytes[value..value + 8].copy_from_slice(b"qwen25vl");
    let dir = std::env::temp_dir().join(format!("tessera-cli-mmproj-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let bad = dir.join("mmproj-wrong.gguf");
    std::fs::write(&bad, bytes)?;

    let o = describe(&pair("smolvlm-tiny-f32.gguf"), Some(bad.to_str().context("utf-8 path")?));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.starts_with("error: ") && !err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.contains(&bad.display().to_string()) && err.contains("projector type `qwen25vl`"), "{err}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// The folder under `--quantize T` answers as llama-quantize's `T` pair of it, `info` lists the
/// types chosen, every subcommand takes the flag, and its bad uses fail in one line.
#[test]
fn quantize_on_the_folder_answers_as_llama_quantizes_pair() -> Result<()> {
    let folder = root().join("tests/fixtures/vlm/smolvlm-tiny").to_string_lossy().into_owned();
    let tokens = |o: &Output| -> Result<serde_json::Value> {
        ensure!(o.status.success(), "{}", stderr(o));
        let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())?;
        Ok(v["generated_tokens"].clone())
    };
    for mix in ["Q8_0", "Q4_K_M"] {
        let pair = root().join("tests/fixtures/quant").join(format!("smolvlm-tiny-{mix}"));
        let (model, mmproj) = (pair.join("model.gguf"), pair.join("mmproj.gguf"));
        let theirs = describe(model.to_str().context("utf-8")?, Some(mmproj.to_str().context("utf-8")?));
        let ours = describe_with(&folder, &["--quantize", mix]);
        let ours = tokens(&ours)?;
        assert_eq!(ours.as_array().map(Vec::len), Some(16), "{mix}: {ours}");
        assert_eq!(ours, tokens(&theirs)?, "{mix}");
    }
    let o = tessera(&["info", "--model", &folder, "--quantize", "q4_k_m"]);
    ensure!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Q4_K_M at load time (text Q4_K_M: Q5_0 ×12, Q8_0 ×3; image side Q4_K_M: Q5_0 ×10, Q8_0 ×3)"),
        "{out}"
    );
    for sub in ["generate", "serve", "embed", "explain", "info"] {
        let o = tessera(&[sub, "--help"]);
        assert!(String::from_utf8_lossy(&o.stdout).contains("--quantize <QUANTIZE>"), "{sub} --help lacks --quantize");
    }

    // An unknown type: the parser's one line names the flag and the accepted types.
    let o = describe_with(&folder, &["--quantize", "Q3_K_S"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let first = err.lines().next().unwrap_or_default();
    assert!(first.contains("--quantize") && first.contains("Q3_K_S"), "{err}");
    assert!(first.contains("Q4_0, Q4_K_M, Q5_K_M, Q6_K, Q8_0"), "{err}");
    // A GGUF file keeps its own types: refused in one line naming the file.
    let o = describe_with(&pair("smolvlm-tiny-f32.gguf"), &["--quantize", "Q8_0"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: ") && !err.contains("panicked"), "{err}");
    assert!(last.contains("smolvlm-tiny-f32.gguf") && last.contains("already stored in its own types"), "{err}");
    Ok(())
}

#[test]
fn generate_answers_from_the_llava_pair_as_transformers_does() -> Result<()> {
    let greedy = reference_greedy_of("llava-tiny")?;
    // The mmproj beside the model is found.
    let o = describe(&fixture("llava-tiny-gguf", "llava-tiny-f32.gguf"), None);
    ensure!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("mmproj-llava-tiny-f32.gguf"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())?;
    assert_eq!(v["image_tokens"], 25);
    assert_eq!(v["generated_tokens"], greedy);
    Ok(())
}

/// Gemma 3's pair (the mmproj found beside the model): `<start_of_image>` expanded to 16 image
/// tokens, transformers' greedy ids, and `info` naming the family and its decoder.
#[test]
fn generate_answers_from_the_gemma3_pair_as_transformers_does() -> Result<()> {
    let greedy = reference_greedy_of("gemma3-tiny")?;
    let model = fixture("gemma3-tiny-gguf", "gemma3-tiny-f32.gguf");
    let o = describe(&model, None);
    ensure!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("mmproj-gemma3-tiny-f32.gguf"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())?;
    assert_eq!(v["image_tokens"], 16);
    assert_eq!(v["generated_tokens"], greedy);
    let o = tessera(&["info", "--model", &model]);
    ensure!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("architecture:   gemma3 (gemma3_text decoder)"), "{out}");
    Ok(())
}

/// Mistral 3's pair (the mmproj found beside the model, the f16 one kept in a folder of its own):
/// 48 `[IMG]` tokens (6 rows of 8, each row closed by `[IMG_BREAK]` or `[IMG_END]`), the
/// reference's system turn, transformers' greedy ids, and `info` naming the family and decoder.
#[test]
fn generate_answers_from_the_mistral3_pair_as_transformers_does() -> Result<()> {
    let greedy = reference_greedy_of("mistral3-pair-tiny")?;
    let model = fixture("mistral3-pair-tiny-gguf", "mistral3-pair-tiny-f32.gguf");
    let o = describe_with(&model, &["--system", "You are a small assistant that can see images."]);
    ensure!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("mmproj-mistral3-pair-tiny-f32.gguf"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())?;
    assert_eq!(v["image_tokens"], 48);
    assert_eq!(v["generated_tokens"], greedy);
    let o = tessera(&["info", "--model", &model]);
    ensure!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("architecture:   mistral3 (mistral decoder)"), "{out}");
    assert!(out.contains("Pixtral tower (3 layers, width 32"), "{out}");
    Ok(())
}

/// A copy of `file` with the bytes `from` (once, after the key `key`) replaced by `to`, of the
/// same length, so the GGUF stays valid.
fn patched(file: &str, key: &str, from: &[u8], to: &[u8], out: &std::path::Path) -> Result<String> {
    let mut bytes = std::fs::read(file)?;
    let at = bytes.windows(key.len()).position(|w| w == key.as_bytes()).context("no such key")?;
    let value = at + key.len();
    let found = bytes[value..].windows(from.len()).position(|w| w == from).context("no such value")? + value;
    ensure!(found - value <= 12 && from.len() == to.len(), "unexpected layout");
    bytes[found..found + to.len()].copy_from_slice(to);
    std::fs::write(out, bytes)?;
    Ok(out.to_string_lossy().into_owned())
}

#[test]
fn bad_pairs_are_refused_in_one_line_naming_both_files() -> Result<()> {
    let dir = scratch("bad")?;
    let smol_text = pair("smolvlm-tiny-f32.gguf");
    let smol_mmproj = pair("mmproj-smolvlm-tiny-f32.gguf");
    // SmolVLM's mmproj (Idefics3, a Llama decoder) with LLaVA-interleave's Qwen2 text model.
    let qwen2_text = fixture("llava-interleave-tiny-gguf", "llava-interleave-tiny-f32.gguf");
    let o = describe(&qwen2_text, Some(&smol_mmproj));
    one_line_error(&o, &[&smol_mmproj, &qwen2_text, "does not go with", "idefics3", "llama", "qwen2"]);

    // The projection made 96 wide (`clip.vision.projection_dim`, u32) for a 64-wide text model.
    let wide = patched(
        &smol_mmproj,
        "clip.vision.projection_dim",
        &64u32.to_le_bytes(),
        &96u32.to_le_bytes(),
        &dir.join("mmproj-wide.gguf"),
    )?;
    let o = describe(&smol_text, Some(&wide));
    one_line_error(&o, &[&wide, &smol_text, "96-wide", "64 wide"]);

    // A projector type tessera does not know.
    let unknown =
        patched(&smol_mmproj, "clip.projector_type", b"idefics3", b"resamplr", &dir.join("mmproj-unknown.gguf"))?;
    let o = describe(&smol_text, Some(&unknown));
    one_line_error(&o, &[&unknown, &smol_text, "`resamplr`", "not supported", "idefics3", "mlp"]);

    // The mmproj given as the model.
    let o = describe(&smol_mmproj, None);
    one_line_error(&o, &[&smol_mmproj, "mmproj file", "--mmproj"]);

    // A vision-language model's text GGUF alone: no mmproj given, none beside it.
    let alone = dir.join("smolvlm-tiny-f32.gguf");
    std::fs::copy(&smol_text, &alone)?;
    let alone = alone.to_string_lossy().into_owned();
    let o = describe(&alone, None);
    one_line_error(&o, &[&alone, "takes no images", "no mmproj", "--mmproj"]);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
