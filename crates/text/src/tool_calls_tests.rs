//! Each format's parser on outputs written as its model writes them (the examples in the
//! models' templates and cards), malformed ones (all content, nothing lost), and the forced-call
//! helpers.

use super::*;
use serde_json::json;

fn call(name: &str, args: Value) -> ToolCall {
    ToolCall { name: name.into(), arguments: args.to_string() }
}

#[test]
fn formats_are_detected_from_the_template_text() {
    assert_eq!(ToolFormat::detect("…<tool_call>\n{\"name\": <function-name>…"), Some(ToolFormat::Hermes));
    assert_eq!(ToolFormat::detect("{{- \"[TOOL_CALLS][\" }}"), Some(ToolFormat::Mistral));
    assert_eq!(ToolFormat::detect("{{- '<|tool_call>call:' + name }}"), Some(ToolFormat::Gemma4));
    assert_eq!(ToolFormat::detect("<|start_header_id|>… <|python_tag|>"), Some(ToolFormat::Llama3));
    assert_eq!(ToolFormat::detect("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"), None);
}

#[test]
fn hermes_blocks_with_text_around_them() {
    let out = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    let p = ToolFormat::Hermes.parse(out);
    assert_eq!(p.content, "Let me check.");
    assert_eq!(p.calls, [call("get_weather", json!({"city": "Paris"})), call("get_time", json!({}))]);
    // Cut at EOS before the closing tag.
    let p = ToolFormat::Hermes.parse("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}");
    assert_eq!(p.calls, [call("f", json!({"x": 1}))]);
    // Malformed JSON inside the tags: all of it is content.
    let bad = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>";
    assert_eq!(ToolFormat::Hermes.parse(bad), ParsedOutput::text(bad));
    assert_eq!(ToolFormat::Hermes.parse("Just an answer."), ParsedOutput::text("Just an answer."));
}

#[test]
fn llama3_json_calls_with_and_without_python_tag() {
    let p = ToolFormat::Llama3.parse("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
    assert_eq!(p.calls, [call("get_weather", json!({"city": "Paris"}))]);
    assert_eq!(p.content, "");
    let p = ToolFormat::Llama3
        .parse("<|python_tag|>{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"parameters\": {}}");
    assert_eq!(p.calls, [call("a", json!({"n": 1})), call("b", json!({}))]);
    // Llama 3.2 sometimes writes the arguments as a JSON string.
    let p = ToolFormat::Llama3.parse("{\"type\": \"function\", \"name\": \"a\", \"parameters\": \"{\\\"n\\\": 2}\"}");
    assert_eq!(p.calls, [call("a", json!({"n": 2}))]);
    for text in ["{\"answer\": 42}", "{\"name\": \"a\", \"parameters\": {", "The answer is {x}."] {
        assert_eq!(ToolFormat::Llama3.parse(text), ParsedOutput::text(text), "{text}");
    }
}

#[test]
fn mistral_lists_and_args_blocks() {
    let p = ToolFormat::Mistral.parse(
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]",
    );
    assert_eq!(p.calls, [call("get_weather", json!({"city": "Paris"}))]);
    // The control token dropped by the detokenizer.
    let p = ToolFormat::Mistral
        .parse(" [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"k\": [1]}}]");
    assert_eq!(p.calls, [call("a", json!({})), call("b", json!({"k": [1]}))]);
    // Mistral Small 3.2 / Devstral.
    let p =
        ToolFormat::Mistral.parse("Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\"}[TOOL_CALLS]get_time[ARGS]{}");
    assert_eq!(p.content, "Sure.");
    assert_eq!(p.calls, [call("get_weather", json!({"city": "Oslo"})), call("get_time", json!({}))]);
    for text in ["[1, 2, 3]", "[TOOL_CALLS][{\"name\": \"a\"", "[TOOL_CALLS]a[ARGS]{oops}"] {
        assert_eq!(ToolFormat::Mistral.parse(text), ParsedOutput::text(text), "{text}");
    }
}

#[test]
fn gemma4_calls_in_its_own_syntax() {
    let out = "<|tool_call>call:get_weather{city:<|\"|>Paris, FR<|\"|>,days:3,metric:true,tags:[<|\"|>a<|\"|>,<|\"|>b<|\"|>]}<tool_call|>";
    let p = ToolFormat::Gemma4.parse(out);
    assert_eq!(
        p.calls,
        [call("get_weather", json!({"city": "Paris, FR", "days": 3, "metric": true, "tags": ["a", "b"]}))]
    );
    assert_eq!(p.content, "");
    // Nested objects, two calls, the special tokens dropped.
    let p = ToolFormat::Gemma4.parse("call:a{opt:{deep:<|\"|>x:y<|\"|>}}call:b{}");
    assert_eq!(p.calls, [call("a", json!({"opt": {"deep": "x:y"}})), call("b", json!({}))]);
    for text in ["<|tool_call>call:a{x:<|\"|>open", "call me maybe", "Hello"] {
        assert_eq!(ToolFormat::Gemma4.parse(text), ParsedOutput::text(text), "{text}");
    }
}

#[test]
fn call_start_holds_back_what_may_begin_a_marker() {
    assert_eq!(ToolFormat::Hermes.call_start("Hello <tool"), Err(5));
    assert_eq!(ToolFormat::Hermes.call_start("Hello <tool_call>{"), Ok(6));
    assert_eq!(ToolFormat::Hermes.call_start("Hello"), Err(0));
    assert_eq!(ToolFormat::Llama3.call_start("  {\"na"), Ok(2));
    assert_eq!(ToolFormat::Llama3.call_start("The {x}"), Err(0));
    assert_eq!(ToolFormat::Gemma4.call_start("cal"), Err(3));
    assert_eq!(ToolFormat::Mistral.call_start("ok [TOOL_CALLS]"), Ok(3));
}

#[test]
fn call_ids_take_each_format_s_shape() {
    let m = ToolFormat::call_id(Some(ToolFormat::Mistral), 7);
    assert!(m.len() == 9 && m.chars().all(|c| c.is_ascii_alphanumeric()), "{m}");
    let o = ToolFormat::call_id(Some(ToolFormat::Hermes), 7);
    assert!(o.starts_with("call_") && o.len() == 29, "{o}");
    assert_ne!(ToolFormat::call_id(None, 1), ToolFormat::call_id(None, 2));
}

#[test]
fn forced_calls_schema_prefix_and_whole() {
    let tools = [
        json!({"type": "function", "function": {"name": "a", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}),
        json!({"type": "function", "function": {"name": "b"}}),
    ];
    let s = call_schema(&tools, None);
    assert_eq!(s["anyOf"].as_array().map(Vec::len), Some(2));
    assert_eq!(s["anyOf"][1]["properties"]["arguments"], json!({"type": "object"}));
    let one = call_schema(&tools, Some("a"));
    assert_eq!(one["properties"]["name"], json!({"const": "a"}));

    let text = "{\"name\": \"a\", \"arguments\": {\"x\": 12, \"s\": \"}\"} }";
    assert_eq!(
        constrained_call(text),
        Some(ToolCall { name: "a".into(), arguments: "{\"x\": 12, \"s\": \"}\"}".into() })
    );
    // Every prefix of the output gives a prefix of the final arguments.
    let whole = constrained_call(text).unwrap().arguments;
    for end in 0..=text.len() {
        if let Some((name, args)) = constrained_prefix(&text[..end]) {
            assert_eq!(name, "a");
            assert!(whole.starts_with(args), "{end}: {args:?}");
        }
    }
    assert_eq!(constrained_prefix("{\"name\": \"a\", \"argu"), None);
    assert_eq!(constrained_call("{\"name\": \"a\"}"), None);
}
