//! A chat request's `tools` and `tool_choice`, checked (a 400 naming the field and entry at
//! fault), and what they ask of the prompt and of generation:
//!
//! - the tools reach the chat template as transformers passes them (`tools=`); a template that
//!   shows no tools (SmolLM2's) gets them described in a system message instead, with the
//!   instruction to answer a call as one JSON object `{"name", "arguments"}` (llama.cpp's
//!   generic tool format), and the assistant calls in the history written that way (also under
//!   `tool_choice: none`, which leaves the tools out);
//! - the output's calls are read in the format the template teaches ([`ToolFormat::detect`]),
//!   that JSON object for a template without one;
//! - `tool_choice: "required"` or a named function constrains the output to a call of those
//!   tools, valid under the function's parameter schema (llguidance, as `response_format`);
//!   `auto` leaves the model free, but for the calls of a `strict` function, held to its schema
//!   once the model starts a call ([`strict_grammar`]); `none` parses nothing (the tools still
//!   reach the template).

use serde_json::{json, Value};
use tessera::{tool_grammar, Content, Message, OutputFormat, ToolFormat};

use crate::error::ApiError;

/// What `tool_choice` asks.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// No tools given, or `none`.
    Off,
    Auto,
    /// A call is forced: any of the tools (`required`) or the named one.
    Forced(Option<String>),
}

/// A request's tools, checked.
#[derive(Debug, Clone)]
pub struct Tools {
    pub list: Vec<Value>,
    pub choice: Choice,
}

impl Tools {
    /// Reads `tools` and `tool_choice`.
    pub fn read(tools: Option<&Value>, choice: Option<&Value>) -> Result<Self, ApiError> {
        let bad = |param: &str, msg: String| ApiError::bad_request(msg).param(param);
        let list = match tools {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => list.clone(),
            Some(_) => {
                return Err(bad(
                    "tools",
                    "`tools` must be a list of {\"type\": \"function\", \"function\": {…}}".into(),
                ))
            }
        };
        let mut names = Vec::with_capacity(list.len());
        for (i, t) in list.iter().enumerate() {
            let at = |what: &str| bad("tools", format!("tools[{i}]: {what}"));
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(at("`type` must be \"function\""));
            }
            let f = t.get("function").and_then(Value::as_object).ok_or_else(|| at("no `function` object"))?;
            let name = f.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
            let name = name.ok_or_else(|| at("`function.name` must be a non-empty string"))?;
            if names.contains(&name) {
                return Err(at(&format!("the function name `{name}` is given twice")));
            }
            if f.get("parameters").is_some_and(|p| !p.is_object()) {
                return Err(at("`function.parameters` must be a JSON schema object"));
            }
            if f.get("description").is_some_and(|d| !d.is_string() && !d.is_null()) {
                return Err(at("`function.description` must be a string"));
            }
            names.push(name);
        }
        let choice = match choice {
            None | Some(Value::Null) => Choice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "auto" => Choice::Auto,
                "none" => Choice::Off,
                "required" => Choice::Forced(None),
                other => {
                    return Err(bad(
                        "tool_choice",
                        format!("tool_choice `{other}` is not one of auto, none, required or a function"),
                    ))
                }
            },
            Some(v @ Value::Object(_)) => {
                let name = v.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
                let name = name.ok_or_else(|| {
                    bad("tool_choice", "tool_choice must be {\"type\": \"function\", \"function\": {\"name\"}}".into())
                })?;
                if !names.contains(&name) {
                    return Err(bad("tool_choice", format!("tool_choice names `{name}`, which is not in `tools`")));
                }
                Choice::Forced(Some(name.to_string()))
            }
            Some(_) => return Err(bad("tool_choice", "tool_choice must be a string or an object".into())),
        };
        let choice = match choice {
            Choice::Forced(_) if list.is_empty() => {
                return Err(bad("tool_choice", "tool_choice asks for a call but no `tools` are given".into()))
            }
            Choice::Auto if list.is_empty() => Choice::Off,
            c => c,
        };
        Ok(Self { list, choice })
    }

    /// The constraint's schema when a call is forced.
    pub fn forced_schema(&self) -> Option<Value> {
        match &self.choice {
            Choice::Forced(only) => Some(tessera::tool_calls::call_schema(&self.list, only.as_deref())),
            _ => None,
        }
    }
}

/// Under `tool_choice: auto` with a `strict` function: the grammar that holds the model's own
/// calls (in `format`, the template's; `None`: the generic JSON object) to the functions'
/// schemas once it starts one ([`tessera::tool_grammar`]). `None` where no tool is strict or
/// the format's calls are not JSON (Gemma 4).
pub fn strict_grammar(
    tools: &Tools,
    format: Option<ToolFormat>,
    template: &str,
    tokenizer: &tessera::Tokenizer,
) -> Option<OutputFormat> {
    if tools.choice != Choice::Auto || !tool_grammar::any_strict(&tools.list) {
        return None;
    }
    let args_form = template.contains("[ARGS]");
    let special = |m: &str| tokenizer.special_id(m);
    tool_grammar::lazy_call_grammar(format, &tools.list, args_form, &special).map(OutputFormat::Lark)
}

/// The messages and `tools` for a template that shows no tools: the tools described in the
/// system message (the first one, or a new one) and assistant calls in the history written as
/// the JSON the model is asked for.
pub fn describe_in_system(messages: &[Message], tools: &[Value]) -> Vec<Message> {
    let list: Vec<Value> = tools.iter().filter_map(|t| t.get("function").cloned()).collect();
    let text = format!(
        "You can call these tools (JSON schemas):\n{}\nTo call a tool, answer with only a JSON object: \
         {{\"name\": <the tool's name>, \"arguments\": <its arguments>}}.",
        serde_json::to_string_pretty(&list).unwrap_or_default()
    );
    let mut out: Vec<Message> = messages.iter().map(calls_as_text).collect();
    match out.first_mut() {
        Some(first) if first.role == "system" => {
            let joined = match &first.content {
                Content::Text(t) => format!("{t}\n\n{text}"),
                _ => text,
            };
            *first = first.with_content(Content::Text(joined));
        }
        _ => out.insert(0, Message::text("system", &text)),
    }
    out
}

/// An assistant turn's `tool_calls` as its content (the JSON objects, one a line), for a
/// template that does not render calls; other messages as they are.
pub fn calls_as_text(m: &Message) -> Message {
    let Some(Value::Array(calls)) = m.extra.get("tool_calls") else { return m.clone() };
    let text: Vec<String> = calls
        .iter()
        .filter_map(|c| c.get("function"))
        .map(|f| json!({"name": f.get("name"), "arguments": f.get("arguments")}).to_string())
        .collect();
    let mut out = m.with_content(Content::Text(text.join("\n")));
    out.extra.remove("tool_calls");
    out
}

/// How the output's calls are read: the template's format, or (for a template without one)
/// whole-output JSON objects, which the Llama 3 reader takes (`"arguments"` or `"parameters"`).
pub fn output_format(template_format: Option<ToolFormat>) -> ToolFormat {
    template_format.unwrap_or(ToolFormat::Llama3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(tools: Value, choice: Value) -> Result<Tools, ApiError> {
        Tools::read(Some(&tools), Some(&choice))
    }

    #[test]
    fn bad_tools_name_the_field() {
        let f = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
        let err = |t: Value, c: Value| read(t, c).unwrap_err();
        let e = err(json!({"type": "function"}), json!("auto"));
        assert_eq!(e.param.as_deref(), Some("tools"));
        let e = err(json!([{"type": "function", "function": {}}]), json!("auto"));
        assert!(e.message.contains("tools[0]") && e.message.contains("name"), "{}", e.message);
        let e = err(json!([{"type": "retrieval"}]), json!("auto"));
        assert!(e.message.contains("tools[0]: `type`"), "{}", e.message);
        let e = err(f.clone(), json!({"type": "function", "function": {"name": "g"}}));
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
        assert!(e.message.contains("`g`"), "{}", e.message);
        let e = err(f.clone(), json!("sometimes"));
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
        let e = err(json!([]), json!("required"));
        assert!(e.message.contains("no `tools`"), "{}", e.message);
        assert_eq!(read(f.clone(), json!("none")).unwrap().choice, Choice::Off);
        assert_eq!(read(f.clone(), json!("required")).unwrap().choice, Choice::Forced(None));
        let named = read(f, json!({"type": "function", "function": {"name": "f"}})).unwrap();
        assert_eq!(named.choice, Choice::Forced(Some("f".into())));
        assert_eq!(named.forced_schema().unwrap()["properties"]["name"], json!({"const": "f"}));
    }

    #[test]
    fn tools_without_template_support_go_to_the_system_message() {
        let tools = [json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}})];
        let mut call = Message { role: "assistant".into(), content: Content::Null, extra: Default::default() };
        call.extra.insert("tool_calls".into(), json!([{"id": "x", "function": {"name": "f", "arguments": {"a": 1}}}]));
        let out =
            describe_in_system(&[Message::text("system", "Be brief."), Message::text("user", "hi"), call], &tools);
        let Content::Text(system) = &out[0].content else { panic!("{:?}", out[0]) };
        assert!(system.starts_with("Be brief.\n\nYou can call these tools") && system.contains("\"name\": \"f\""));
        assert_eq!(out[2].content, Content::Text(r#"{"name":"f","arguments":{"a":1}}"#.into()));
        assert!(!out[2].extra.contains_key("tool_calls"));
        let out = describe_in_system(&[Message::text("user", "hi")], &tools);
        assert_eq!((out.len(), out[0].role.as_str()), (2, "system"));
    }
}
