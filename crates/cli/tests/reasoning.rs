//! `tessera generate --reasoning show|hide` on a model whose chat template opens a thinking block
//! in its generation prompt (the tiny Llama fixture with `<think>` added to its template, as
//! DeepSeek-R1's and Qwen3-Thinking's do): the output starts inside the block, so with no
//! `</think>` all of it is reasoning — printed by `show`, left out by `hide`, and in --json's
//! `reasoning_content` (with an empty `content`).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

fn thinking_model() -> Result<PathBuf> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/llama-gqa");
    let dir = std::env::temp_dir().join(format!("tessera-thinking-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for entry in std::fs::read_dir(&src)? {
        let entry = entry?;
        std::fs::copy(entry.path(), dir.join(entry.file_name()))?;
    }
    let path = dir.join("tokenizer_config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let template = config["chat_template"].as_str().context("chat_template")?.to_string();
    // (The string literal holds a real newline.)
    let opened = template.replace("'<|im_start|>assistant\n'", "'<|im_start|>assistant\n<think>\n'");
    anyhow::ensure!(opened != template, "the fixture's template changed: {template}");
    // Both markers appear in the template (a thinking template shows how a block ends).
    config["chat_template"] = format!("{opened}{{# </think> #}}").into();
    std::fs::write(&path, config.to_string())?;
    Ok(dir)
}

fn generate(model: &std::path::Path, extra: &[&str]) -> Result<String> {
    let mut args = vec!["generate", "--model", model.to_str().context("path")?, "-p", "Hi", "--max-new-tokens", "12"];
    args.extend(["--ignore-eos", "--temperature", "0"]);
    args.extend(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_tessera")).args(&args).output()?;
    anyhow::ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?)
}

#[test]
fn reasoning_is_shown_or_hidden_and_split_in_json() -> Result<()> {
    let model = thinking_model()?;
    let json: serde_json::Value = serde_json::from_str(generate(&model, &["--json"])?.trim())?;
    let text = json["text"].as_str().context("text")?;
    assert!(!text.trim().is_empty(), "{json}");
    assert_eq!(json["reasoning_content"], text.trim(), "{json}");
    assert_eq!(json["content"], "", "{json}");
    // Not a terminal: no colour codes.
    assert_eq!(generate(&model, &["--reasoning", "show"])?, format!("{}\n", text.trim()));
    assert_eq!(generate(&model, &["--reasoning", "hide"])?, "\n");
    std::fs::remove_dir_all(&model)?;
    Ok(())
}
