//! The lazy tool-call grammar (`tool_choice: auto` with a strict function), token by token on
//! a real tokenizer: text before a call is free (JSON-looking text too), a call after the
//! format's marker is held to the strict function's schema (a string where an integer goes, a
//! name that is no tool's, are masked out), a non-strict function's arguments are any object,
//! and text may follow the call. On SmolLM2-135M-Instruct, which writes a call against the
//! schema when free, the grammar holds the same call to it.

mod common;

use anyhow::Result;
use serde_json::{json, Value};
use tessera::tool_grammar::lazy_call_grammar;
use tessera::{Model, OutputFormat, TokenConstraint, ToolFormat};

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "add", "strict": true, "parameters": {"type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"],
            "additionalProperties": false}}}),
        json!({"type": "function", "function": {"name": "note", "parameters": {"type": "object",
            "properties": {"x": {"type": "string"}}}}}),
    ]
}

/// Feeds `text`'s tokens through `c`; the index of the first token the grammar masks out, or
/// `None` when it takes them all.
fn first_refused(model: &Model, c: &mut dyn TokenConstraint, text: &str) -> Result<Option<usize>> {
    let ids = model.tokenizer().encode(text, false)?;
    let n = model.tokenizer().vocab_size().max(model.config().vocab_size);
    for (i, &id) in ids.iter().enumerate() {
        let mut logits = vec![0f32; n];
        assert!(c.mask(&mut logits)?, "the grammar ended before token {i} of {text:?}");
        if logits[id as usize] == f32::NEG_INFINITY {
            return Ok(Some(i));
        }
        c.commit(id)?;
    }
    Ok(None)
}

#[test]
fn calls_after_the_marker_are_held_to_strict_schemas() -> Result<()> {
    let model = common::tiny_model("llama-gqa")?;
    let none = |_: &str| None;
    let hermes = lazy_call_grammar(Some(ToolFormat::Hermes), &tools(), false, &none).expect("a grammar");
    let factory = model.output_constraint(&OutputFormat::Lark(hermes))?;
    let valid = "I'll add {\"a\": \"x\"} now.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n\
                 <tool_call>\n{\"name\": \"note\", \"arguments\": {\"x\": 5}}\n</tool_call> Done.";
    assert_eq!(first_refused(&model, &mut *factory.start()?, valid)?, None, "{valid}");
    let before = "Sure.\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": ";
    let at = model.tokenizer().encode(before, false)?.len();
    for (bad, what) in [("\"1\"", "a string for an integer"), ("1, \"c\": 2", "a key the schema has not")] {
        let refused = first_refused(&model, &mut *factory.start()?, &format!("{before}{bad}"))?;
        assert!(refused.is_some_and(|i| i >= at), "{what}: refused at {refused:?} (the call starts at {at})");
    }
    let wrong = "<tool_call>\n{\"name\": \"sub\"";
    assert!(first_refused(&model, &mut *factory.start()?, wrong)?.is_some(), "a name that is no tool's");

    // The generic JSON form (a template without tool syntax): text, or a call from the start.
    let generic = lazy_call_grammar(None, &tools(), false, &none).expect("a grammar");
    let factory = model.output_constraint(&OutputFormat::Lark(generic))?;
    let call = " {\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}";
    assert_eq!(first_refused(&model, &mut *factory.start()?, call)?, None);
    assert_eq!(first_refused(&model, &mut *factory.start()?, "The sum is {\"a\": \"x\"}.")?, None);
    let bad = "{\"name\": \"add\", \"arguments\": {\"a\": true";
    assert!(first_refused(&model, &mut *factory.start()?, bad)?.is_some(), "{bad}");
    Ok(())
}

/// SmolLM2-135M-Instruct, shown calls whose arguments are words, writes one too when free; held
/// to the strict schema by the grammar it writes integers.
#[test]
fn a_real_model_that_breaks_the_schema_free_keeps_it_held() -> Result<()> {
    let model = Model::load(common::smollm2_gguf()?.to_str().unwrap_or_default(), &common::gguf_load_options()?)?;
    let shot = |q: &str, a: &str, b: &str| {
        format!(
            "User: {q}\nAssistant: <tool_call>\n{{\"name\": \"add\", \"arguments\": {{\"a\": \"{a}\", \"b\": \"{b}\"}}}}\n</tool_call>\n"
        )
    };
    let text = format!(
        "{}{}User: Add seven and nine.\nAssistant:",
        shot("Add one and two.", "one", "two"),
        shot("Add three and four.", "three", "four")
    );
    let prompt = model.prompt(model.tokenizer().encode(&text, false)?, &[])?;
    let mut params = tessera::GenerateParams { max_new_tokens: 40, ..Default::default() };
    params.sampling.temperature = 0.0;
    params.stop_strings = vec!["\nUser:".into()];
    let free = model.generate(&prompt, &params, &mut |_| {})?.text;
    let none = |_: &str| None;
    let grammar = lazy_call_grammar(Some(ToolFormat::Hermes), &tools(), false, &none).expect("a grammar");
    params.constraint = Some(model.output_constraint(&OutputFormat::Lark(grammar))?);
    let held = model.generate(&prompt, &params, &mut |_| {})?.text;
    let args = |text: &str| -> Result<Value> {
        let parsed = ToolFormat::Hermes.parse(text);
        let call = parsed.calls.first().ok_or_else(|| anyhow::anyhow!("no call in {text:?}"))?;
        assert_eq!(call.name, "add", "{text:?}");
        Ok(serde_json::from_str(&call.arguments)?)
    };
    // Free, the model copies the examples: words where the schema asks for integers.
    let free = args(&free)?;
    assert!(free["a"].is_string() && free["b"].is_string(), "free: {free}");
    let held = args(&held)?;
    assert!(held["a"].is_i64() && held["b"].is_i64(), "held: {held}");
    assert_eq!(held.as_object().map(|o| o.len()), Some(2), "{held}");
    Ok(())
}
