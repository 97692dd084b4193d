//! `tessera generate` on llama.cpp's GGUF + mmproj pair of the tiny SmolVLM
//! (tests/fixtures/vlm/smolvlm-tiny-gguf, written by scripts/make_gguf_pairs.sh): the answer
//! transformers gives for the same checkpoint, the mmproj found beside the model, a wrong
//! projector type refused in one line.

use std::path::PathBuf;
use std::process::{Command, Output};

use anyhow::{ensure, Context, Result};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pair(file: &str) -> String {
    root().join("tests/fixtures/vlm/smolvlm-tiny-gguf").join(file).to_string_lossy().into_owned()
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
    let mut args = vec!["generate", "--model", model];
    if let Some(m) = mmproj {
        args.extend(["--mmproj", m]);
    }
    let image = chelsea();
    args.extend(["--image", &image, "--prompt", "Describe this image.", "--max-new-tokens", "16"]);
    args.extend(["--ignore-eos", "--json"]);
    tessera(&args)
}

/// transformers' 16 greedy ids for the chelsea case of the folder's reference.
fn reference_greedy() -> Result<serde_json::Value> {
    let path = root().join("tests/fixtures/vlm/smolvlm-tiny/reference.json");
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
