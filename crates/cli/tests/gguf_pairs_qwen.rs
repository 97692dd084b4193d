//! `tessera generate` on llama.cpp's GGUF + mmproj pairs of the tiny Qwen2-VL, Qwen2.5-VL,
//! Qwen3-VL and Qwen3.5 (tests/fixtures/vlm/<name>-gguf, written by scripts/make_gguf_pairs.sh): the image
//! token count and the 16 greedy ids transformers gives for the same checkpoint.

use std::path::PathBuf;
use std::process::{Command, Output};

use anyhow::{ensure, Context, Result};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(path: &str) -> String {
    root().join("tests/fixtures").join(path).to_string_lossy().into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// transformers' chelsea case of the folder's reference.
fn reference_chelsea(name: &str) -> Result<serde_json::Value> {
    let path = root().join("tests/fixtures/vlm").join(name).join("reference.json");
    let reference: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let cases = reference["cases"].as_array().context("cases")?;
    cases.iter().find(|c| c["name"] == "chelsea").cloned().context("the chelsea case")
}

#[test]
fn generate_answers_from_each_qwen_pair_as_transformers_does() -> Result<()> {
    for (name, family) in [
        ("qwen2-vl-tiny", "qwen2_vl"),
        ("qwen2.5-vl-tiny", "qwen2_5_vl"),
        ("qwen3-vl-tiny", "qwen3_vl"),
        ("qwen3.5-tiny", "qwen3_5"),
    ] {
        let case = reference_chelsea(name)?;
        let model = fixture(&format!("vlm/{name}-gguf/{name}-f32.gguf"));
        let mmproj = fixture(&format!("vlm/{name}-gguf/mmproj-{name}-f32.gguf"));
        let image = fixture("images/chelsea.png");
        let o = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["generate", "--model", &model, "--mmproj", &mmproj, "--image", &image])
            .args(["--prompt", "Describe this image.", "--max-new-tokens", "16", "--ignore-eos", "--json"])
            .output()?;
        ensure!(o.status.success(), "{name}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())?;
        assert_eq!(v["image_tokens"], case["num_image_tokens"], "{name}: image tokens");
        assert_eq!(v["generated_tokens"], case["greedy_ids"], "{name}: greedy ids");

        let o = Command::new(env!("CARGO_BIN_EXE_tessera")).args(["info", "--model", &model]).output()?;
        ensure!(o.status.success(), "{name}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains(&format!("architecture:   {family} (")), "{name}: {out}");
        assert!(out.contains("mmproj:") && out.contains(&format!("mmproj-{name}-f32.gguf")), "{name}: {out}");
    }
    Ok(())
}
