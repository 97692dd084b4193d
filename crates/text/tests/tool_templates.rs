//! Real chat templates with tools (tests/fixtures/chat_templates/, sources in SOURCES.md)
//! render exactly what transformers' `apply_chat_template(tools=…, **kwargs)` renders
//! (`rendered.json`, written by scripts/reference_tool_templates.py): tool definitions,
//! assistant `tool_calls`, `role: tool` results, `enable_thinking` and an assistant prefill
//! (`continue_final_message`). A conversation
//! transformers refuses (Qwen3's template on a null `content`) is refused here too.
//! Each template's tool-call and thinking formats are detected from its text.

use std::path::PathBuf;

use anyhow::{Context, Result};
use tessera_text::{ChatTemplate, Conversation, RenderOptions, ThinkingMarkers, ToolFormat};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/chat_templates")
}

fn template(name: &str, kwargs: &serde_json::Map<String, serde_json::Value>) -> Result<ChatTemplate> {
    let src = std::fs::read_to_string(dir().join(format!("{name}.jinja")))?;
    let token = |k: &str| kwargs.get(k).and_then(|v| v.as_str()).map(String::from);
    Ok(ChatTemplate::with_origin(&src, token("bos_token"), token("eos_token"), name.into())?)
}

#[test]
fn renders_equal_transformers() -> Result<()> {
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir().join("rendered.json"))?)?;
    let cases = fixture["cases"].as_array().context("cases")?;
    assert!(cases.len() >= 36, "{} cases", cases.len());
    let mut refused = 0;
    for case in cases {
        let what = format!("{} / {}", case["template"], case["case"]);
        let kwargs = case["kwargs"].as_object().cloned().unwrap_or_default();
        let t = template(case["template"].as_str().context("template")?, &kwargs)?;
        let conv = Conversation::from_json(&case["messages"]).with_context(|| what.clone())?;
        let continue_final = case["continue_final"].as_bool().unwrap_or(false);
        let opts =
            RenderOptions { tools: Some(case["tools"].clone()).filter(|t| !t.is_null()), kwargs, continue_final };
        let ours = t.render_with(&conv.messages, true, &opts);
        match case["rendered"].as_str() {
            Some(expected) => assert_eq!(ours.with_context(|| what.clone())?, expected, "{what}"),
            None => {
                assert!(ours.is_err(), "{what}: transformers refused ({}), tessera rendered", case["error"]);
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 1, "only Qwen3 on a null content is refused");
    Ok(())
}

#[test]
fn formats_are_detected_from_the_real_templates() -> Result<()> {
    let none = serde_json::Map::new();
    let expect = [
        ("qwen2.5", Some(ToolFormat::Hermes), false),
        ("qwen3", Some(ToolFormat::Hermes), true),
        ("llama-3.1", Some(ToolFormat::Llama3), false),
        ("llama-3.2", Some(ToolFormat::Llama3), false),
        ("mistral-nemo", Some(ToolFormat::Mistral), false),
        ("gemma-4", Some(ToolFormat::Gemma4), true),
    ];
    for (name, format, thinks) in expect {
        let t = template(name, &none)?;
        assert!(t.supports_tools(), "{name}");
        assert_eq!(ToolFormat::detect(t.source()), format, "{name}");
        assert_eq!(ThinkingMarkers::detect(t.source()).is_some(), thinks, "{name}");
    }
    Ok(())
}
