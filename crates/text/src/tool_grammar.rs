//! The grammar (llguidance's Lark syntax) that holds a model's own tool calls to their schemas
//! under `tool_choice: auto` when a function is `strict`: the output is free text until the
//! format's call marker, then a call in the format, its `name` one of the tools' and its
//! arguments valid under that tool's parameter schema (when strict; any JSON object when not),
//! then free text again where the format allows it — a lazy grammar, as llama.cpp's tool
//! grammars are, triggered by the marker. Per format ([`ToolFormat`]):
//!
//! - Hermes: `<tool_call>` (text) `{"name", "arguments"}` `</tool_call>`, any number, text around.
//! - Llama 3.x and a template without tool syntax (the generic JSON the system message asks
//!   for): an output that starts with `{` (after whitespace, or Llama's `<|python_tag|>`) is
//!   calls `{"name", "parameters" | "arguments"}` joined by `;`; any other output is text.
//! - Mistral: text, then `[TOOL_CALLS]` and a JSON list of calls to the end; or, where the
//!   template shows `[ARGS]`, `[TOOL_CALLS]name[ARGS]{…}` per call.
//! - Gemma 4's calls are not JSON (`call:name{key:<|"|>…}`): no grammar, the model is free.
//!
//! A marker that is one special token is written as its id (`<[id]>`: the special token itself,
//! which free text cannot hold); a marker that is text ends a lazy lexeme (the shortest text
//! that ends with it).

use serde_json::{json, Value};

use crate::tool_calls::ToolFormat;

/// Free text, whitespace, and the lazy start of a call after text.
const COMMON: &str = "TEXT: /(.|\\n)*/\nWS: /[ \\t\\r\\n]*/\n";

/// The schema of one call: `{"name": <a tool's name>, <key>: <its arguments>}` for each of
/// `tools`, the arguments under the tool's `parameters` where it is strict (any object where not).
pub fn strict_call_schema(tools: &[Value], key: &str) -> Value {
    let alternatives: Vec<Value> = functions(tools)
        .map(|(name, params)| {
            json!({"type": "object", "properties": {"name": {"const": name}, key: params},
                   "required": ["name", key], "additionalProperties": false})
        })
        .collect();
    match <[Value; 1]>::try_from(alternatives) {
        Ok([one]) => one,
        Err(all) => json!({"anyOf": all}),
    }
}

/// Each tool's name and the schema its arguments are held to.
fn functions(tools: &[Value]) -> impl Iterator<Item = (&Value, Value)> {
    tools.iter().filter_map(|t| t.get("function")).filter_map(|f| {
        let strict = f.get("strict").and_then(Value::as_bool) == Some(true);
        let params = f.get("parameters").cloned().filter(|_| strict).unwrap_or_else(|| json!({"type": "object"}));
        Some((f.get("name")?, params))
    })
}

/// Whether any of `tools` (OpenAI's list) is `strict`.
pub fn any_strict(tools: &[Value]) -> bool {
    tools.iter().any(|t| t.pointer("/function/strict").and_then(Value::as_bool) == Some(true))
}

/// The lazy grammar for calls in `format` (`None`: a template without tool syntax, the generic
/// JSON object), or `None` where calls are not JSON (Gemma 4). `special` gives the id of a
/// marker that is one special token; `args_form`: the template shows Mistral's `[ARGS]` form.
pub fn lazy_call_grammar(
    format: Option<ToolFormat>,
    tools: &[Value],
    args_form: bool,
    special: &dyn Fn(&str) -> Option<u32>,
) -> Option<String> {
    let marker = |m: &str| match special(m) {
        Some(id) => (format!("<[{id}]>"), false),
        None => (serde_json::to_string(m).unwrap_or_default(), true),
    };
    let json_of = |v: &Value| format!("%json {}", v);
    let grammar = match format {
        Some(ToolFormat::Gemma4) => return None,
        Some(ToolFormat::Hermes) => {
            let call = json_of(&strict_call_schema(tools, "arguments"));
            let body = format!("WS {call} WS \"</tool_call>\"");
            repeated(&marker("<tool_call>"), &body)
        }
        Some(ToolFormat::Llama3) | None => {
            let key = if format.is_some() { "parameters" } else { "arguments" };
            let tag = match special("<|python_tag|>").filter(|_| format.is_some()) {
                Some(id) => format!("<[{id}]>?"),
                None => String::new(),
            };
            let call = json_of(&strict_call_schema(tools, key));
            format!(
                "start: PLAIN | {tag} WS call (WS \";\" WS call)* WS\ncall: {call}\n\
                 PLAIN: /[ \\t\\r\\n]*([^{{ \\t\\r\\n](.|\\n)*)?/\n"
            )
        }
        Some(ToolFormat::Mistral) if args_form => {
            let (tc, _) = marker("[TOOL_CALLS]");
            let (args, _) = marker("[ARGS]");
            let calls: Vec<String> = functions(tools)
                .filter_map(|(name, params)| {
                    Some(format!("{} {args} {}", serde_json::to_string(name.as_str()?).ok()?, json_of(&params)))
                })
                .collect();
            let call = calls.join(" | ");
            let body = format!("({call}) ({tc} ({call}))*");
            final_calls(&marker("[TOOL_CALLS]"), &body)
        }
        Some(ToolFormat::Mistral) => {
            let list = json!({"type": "array", "items": strict_call_schema(tools, "arguments"), "minItems": 1});
            final_calls(&marker("[TOOL_CALLS]"), &format!("WS {} WS", json_of(&list)))
        }
    };
    Some(format!("{grammar}{COMMON}"))
}

/// Calls `body` after each `marker`, with text between and after them.
fn repeated((marker, text): &(String, bool), body: &str) -> String {
    match text {
        true => format!("start: (head {body})* TEXT\nhead[lazy]: TEXT {marker}\n"),
        false => format!("start: (TEXT {marker} {body})* TEXT\n"),
    }
}

/// Text, or text then `marker` and calls `body` to the end.
fn final_calls((marker, text): &(String, bool), body: &str) -> String {
    match text {
        true => format!("start: TEXT | head {body}\nhead[lazy]: TEXT {marker}\n"),
        false => format!("start: TEXT | TEXT {marker} {body}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "add", "strict": true,
                "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}),
            json!({"type": "function", "function": {"name": "free", "parameters": {"type": "object",
                "properties": {"x": {"type": "string"}}}}}),
        ]
    }

    #[test]
    fn strict_tools_keep_their_schema_others_any_object() {
        let s = strict_call_schema(&tools(), "arguments");
        assert_eq!(s["anyOf"][0]["properties"]["arguments"]["required"], json!(["a"]));
        assert_eq!(s["anyOf"][1]["properties"]["arguments"], json!({"type": "object"}));
        assert_eq!(s["anyOf"][1]["properties"]["name"], json!({"const": "free"}));
        assert!(any_strict(&tools()) && !any_strict(&tools()[1..]));
    }

    #[test]
    fn markers_are_special_tokens_or_lazy_text() {
        let none = |_: &str| None;
        let hermes = lazy_call_grammar(Some(ToolFormat::Hermes), &tools(), false, &none).unwrap();
        assert!(hermes.starts_with("start: (head WS %json"), "{hermes}");
        assert!(hermes.contains("head[lazy]: TEXT \"<tool_call>\""), "{hermes}");
        let special = |m: &str| (m == "[TOOL_CALLS]").then_some(5);
        let mistral = lazy_call_grammar(Some(ToolFormat::Mistral), &tools(), false, &special).unwrap();
        assert!(mistral.starts_with("start: TEXT | TEXT <[5]> WS %json {\"type\":\"array\""), "{mistral}");
        let args = lazy_call_grammar(Some(ToolFormat::Mistral), &tools(), true, &special).unwrap();
        assert!(args.contains("(\"add\" \"[ARGS]\" %json"), "{args}");
        let generic = lazy_call_grammar(None, &tools(), false, &none).unwrap();
        assert!(generic.contains("\"arguments\"") && !generic.contains("<["), "{generic}");
        assert!(lazy_call_grammar(Some(ToolFormat::Gemma4), &tools(), false, &none).is_none());
    }
}
