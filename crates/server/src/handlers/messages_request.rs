//! An Anthropic Messages request, checked and translated into the chat pipeline's terms
//! (OpenAI's messages and tools, template variables, sampling fields), as llama.cpp's server
//! does (`server_chat_convert_anthropic_to_oai`, tools/server/server-chat.cpp) with the blocks
//! kept in order and every field checked: a bad one is a 400 naming it
//! (`messages[1].content[0].source.media_type`).
//!
//! - `system`: a string, or text blocks joined by blank lines → the first message, `system`.
//! - `messages[].content`: a string, or blocks: `text`; `image` with `source` `{type: base64,
//!   media_type, data}` (a `data:` URL) or `{type: url, url}` (fetched under chat's media rules);
//!   `tool_use` (assistant) → the turn's `tool_calls`; `tool_result` (user) → a `tool` message
//!   (its content a string or text and image blocks; `is_error` is not shown to the model);
//!   `thinking` (assistant) → the turn's `reasoning_content`; `redacted_thinking` is dropped.
//! - `tools[]` `{name, description, input_schema}` → functions; `tool_choice` `auto`, `any`
//!   (OpenAI's `required`), `tool` (a named function), `none`.
//! - `tools[].strict` → the function's `strict` (its arguments follow its schema when called).
//! - `thinking` `{type: enabled}` / `{type: disabled}` → the template variable
//!   `enable_thinking`; `budget_tokens` caps the thinking block (after that many tokens in it,
//!   the template's closing marker is forced and the answer follows); `adaptive` and
//!   `between_tools` leave the template's default. `output_config` `effort` →
//!   `reasoning_effort`, `format` (a JSON schema) → the output's constraint, as chat's
//!   `response_format`.
//! - A last `assistant` message is a prefill: the answer continues its text (the template
//!   rendered as transformers' `continue_final_message=True` does) and holds only the new text.
//! - `cache_control` (on blocks, tools and the system prompt) is accepted and ignored: the
//!   server's prefix cache reuses a shared prompt start by itself.

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tessera::OutputFormat;

use super::front::{self, bad, FrontEnd};
use crate::api::{Sampling, Stop};
use crate::error::ApiError;

/// The fields of `POST /v1/messages` (and `/v1/messages/count_tokens`) the server reads; others
/// (`metadata`, `service_tier`, `container`, …) are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct MessagesRequest {
    pub model: Option<String>,
    pub messages: Value,
    pub system: Option<Value>,
    pub max_tokens: Option<u64>,
    pub stop_sequences: Option<Vec<String>>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub thinking: Option<Value>,
    /// `{effort, format: {type: json_schema, schema}}`.
    pub output_config: Option<Value>,
    #[serde(default)]
    pub stream: bool,
}

impl FrontEnd for MessagesRequest {
    fn model(&self) -> &Option<String> {
        &self.model
    }

    /// The sampling fields, checked as Anthropic's API states them.
    fn sampling(&self) -> Result<Sampling, ApiError> {
        let max_tokens = self.max_tokens.ok_or_else(|| bad("max_tokens", "`max_tokens` is required".into()))?;
        if let Some(t) = self.temperature.filter(|t| !(0.0..=1.0).contains(t)) {
            return Err(bad("temperature", format!("`temperature` must be in [0, 1], got {t}")));
        }
        let stop = self.stop_sequences.clone().unwrap_or_default();
        if stop.len() > 4 {
            return Err(bad("stop_sequences", format!("at most 4 `stop_sequences`, got {}", stop.len())));
        }
        Ok(Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            max_tokens: Some(max_tokens),
            stop: Some(Stop::Many(stop)),
            stream: self.stream,
            ..Default::default()
        })
    }

    /// The template variables `thinking` and `output_config.effort` ask for.
    fn kwargs(&self) -> Result<Map<String, Value>, ApiError> {
        let mut kwargs = Map::new();
        let effort = self.output_config.as_ref().and_then(|c| c.get("effort"));
        front::effort(effort, "output_config", "output_config.effort", &mut kwargs)?;
        match &self.thinking {
            None | Some(Value::Null) => {}
            Some(t) => match t.get("type").and_then(Value::as_str) {
                Some("enabled") => {
                    kwargs.insert("enable_thinking".into(), json!(true));
                }
                Some("disabled") => {
                    kwargs.insert("enable_thinking".into(), json!(false));
                }
                // The model decides: the template's default.
                Some("adaptive" | "between_tools") => {}
                _ => {
                    return Err(bad(
                        "thinking",
                        "`thinking.type` must be one of enabled, disabled, adaptive, between_tools".into(),
                    ))
                }
            },
        }
        Ok(kwargs)
    }

    /// `thinking.budget_tokens` (with `type: enabled`): at least 1 and under `max_tokens`, as
    /// Anthropic's API asks (its floor of 1024 is not kept: small models think in fewer).
    fn thinking_budget(&self) -> Result<Option<usize>, ApiError> {
        let Some(t) = self.thinking.as_ref().filter(|t| t.get("type").and_then(Value::as_str) == Some("enabled"))
        else {
            return Ok(None);
        };
        match t.get("budget_tokens") {
            None | Some(Value::Null) => Ok(None),
            Some(b) => match b.as_u64().filter(|&b| b >= 1) {
                Some(b) if self.max_tokens.is_none_or(|m| b < m) => Ok(Some(b as usize)),
                Some(b) => Err(bad(
                    "thinking",
                    format!("`thinking.budget_tokens` ({b}) must be less than `max_tokens` ({:?})", self.max_tokens),
                )),
                None => Err(bad("thinking", "`thinking.budget_tokens` must be a positive integer".into())),
            },
        }
    }

    /// A last assistant message is a prefill: the answer continues it.
    fn continue_final(&self) -> bool {
        let last = self.messages.as_array().and_then(|l| l.last());
        last.and_then(|m| m.get("role")).and_then(Value::as_str) == Some("assistant")
    }

    /// `output_config.format` as the output's constraint.
    fn format(&self) -> Result<Option<OutputFormat>, ApiError> {
        let Some(format) = self.output_config.as_ref().and_then(|c| c.get("format")).filter(|f| !f.is_null()) else {
            return Ok(None);
        };
        match (format.get("type").and_then(Value::as_str), format.get("schema")) {
            (Some("json_schema"), Some(schema)) if schema.is_object() => {
                Ok(Some(OutputFormat::JsonSchema(schema.clone())))
            }
            _ => Err(bad(
                "output_config",
                "`output_config.format` must be {\"type\": \"json_schema\", \"schema\": {…}}".into(),
            )),
        }
    }

    /// `tools` and `tool_choice` as OpenAI's, for [`super::tools::Tools::read`].
    fn tools(&self) -> Result<(Option<Value>, Option<Value>), ApiError> {
        let tools = match &self.tools {
            None | Some(Value::Null) => None,
            Some(Value::Array(list)) => {
                let mut out = Vec::with_capacity(list.len());
                for (i, t) in list.iter().enumerate() {
                    let at = |what: &str| bad("tools", format!("tools[{i}]: {what}"));
                    match t.get("type").and_then(Value::as_str) {
                        None | Some("custom") => {}
                        Some(other) => {
                            return Err(at(&format!(
                                "`type` `{other}` is a server tool, which this server does not run"
                            )))
                        }
                    }
                    let name = t.get("name").and_then(Value::as_str).filter(|n| !n.is_empty());
                    let name = name.ok_or_else(|| at("`name` must be a non-empty string"))?;
                    let schema = t.get("input_schema").filter(|s| s.is_object());
                    let schema = schema.ok_or_else(|| at("`input_schema` must be a JSON schema object"))?;
                    let mut function = json!({"name": name, "parameters": schema});
                    match t.get("description") {
                        None | Some(Value::Null) => {}
                        Some(d @ Value::String(_)) => function["description"] = d.clone(),
                        Some(_) => return Err(at("`description` must be a string")),
                    }
                    match t.get("strict") {
                        None | Some(Value::Null) => {}
                        Some(s @ Value::Bool(_)) => function["strict"] = s.clone(),
                        Some(_) => return Err(at("`strict` must be a boolean")),
                    }
                    out.push(json!({"type": "function", "function": function}));
                }
                Some(Value::Array(out))
            }
            Some(_) => return Err(bad("tools", "`tools` must be a list of {\"name\", \"input_schema\"}".into())),
        };
        let choice = match &self.tool_choice {
            None | Some(Value::Null) => None,
            Some(c) => Some(match (c.get("type").and_then(Value::as_str), c.get("name").and_then(Value::as_str)) {
                (Some("auto"), _) => json!("auto"),
                (Some("any"), _) => json!("required"),
                (Some("none"), _) => json!("none"),
                (Some("tool"), Some(name)) => json!({"type": "function", "function": {"name": name}}),
                (Some("tool"), None) => return Err(bad("tool_choice", "tool_choice `tool` needs a `name`".into())),
                _ => {
                    return Err(bad(
                        "tool_choice",
                        "`tool_choice.type` must be one of auto, any, tool (with a name), none".into(),
                    ))
                }
            }),
        };
        Ok((tools, choice))
    }

    /// `system` and `messages` as OpenAI's list of messages.
    fn chat_messages(&self) -> Result<Value, ApiError> {
        let mut out = Vec::new();
        match &self.system {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => out.push(json!({"role": "system", "content": s})),
            Some(Value::Array(blocks)) => {
                let mut texts = Vec::with_capacity(blocks.len());
                for (j, b) in blocks.iter().enumerate() {
                    match (b.get("type").and_then(Value::as_str), b.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => texts.push(t),
                        _ => {
                            return Err(bad("system", format!("system[{j}] must be {{\"type\": \"text\", \"text\"}}")))
                        }
                    }
                }
                out.push(json!({"role": "system", "content": texts.join("\n\n")}));
            }
            Some(_) => return Err(bad("system", "`system` must be a string or a list of text blocks".into())),
        }
        let list = self.messages.as_array().filter(|l| !l.is_empty());
        let list =
            list.ok_or_else(|| bad("messages", "`messages` must be a non-empty list of {role, content}".into()))?;
        for (i, m) in list.iter().enumerate() {
            translate_message(i, m, &mut out)?;
        }
        Ok(Value::Array(out))
    }
}

/// Appends message `i`'s OpenAI messages to `out`: one for the turn, and one per tool result
/// (in the order of the blocks).
fn translate_message(i: usize, m: &Value, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let at = |what: String| bad("messages", format!("messages[{i}]{what}"));
    let role = m.get("role").and_then(Value::as_str);
    let role = match role {
        Some(r @ ("user" | "assistant")) => r,
        _ => return Err(at(".role must be \"user\" or \"assistant\"".into())),
    };
    let blocks = match m.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        _ => return Err(at(".content must be a string or a list of content blocks".into())),
    };
    let (mut turn, mut results) = (Turn::default(), false);
    for (j, b) in blocks.iter().enumerate() {
        let at = |what: &str| at(format!(".content[{j}]{what}"));
        let str_field =
            |key: &str| b.get(key).and_then(Value::as_str).ok_or_else(|| at(&format!(": no `{key}` string")));
        match b.get("type").and_then(Value::as_str) {
            Some("text") => turn.parts.push(json!({"type": "text", "text": str_field("text")?})),
            Some("image") => turn.parts.push(image_part(b).map_err(|e| at(&e))?),
            Some("thinking") if role == "assistant" => turn.reasoning.push_str(str_field("thinking")?),
            Some("redacted_thinking") if role == "assistant" => {}
            Some("tool_use") if role == "assistant" => {
                let input =
                    b.get("input").filter(|v| v.is_object()).ok_or_else(|| at(": `input` must be an object"))?;
                turn.calls.push(json!({"id": str_field("id")?, "type": "function",
                    "function": {"name": str_field("name")?, "arguments": input.to_string()}}));
            }
            Some("tool_result") if role == "user" => {
                let id = str_field("tool_use_id")?;
                let content = match b.get("content") {
                    None | Some(Value::Null) => json!(""),
                    Some(s @ Value::String(_)) => s.clone(),
                    Some(Value::Array(parts)) => result_parts(parts).map_err(|e| at(&e))?,
                    Some(_) => return Err(at(".content must be a string or a list of text and image blocks")),
                };
                if !turn.is_empty() {
                    turn.flush(role, out);
                }
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                results = true;
            }
            Some(t @ ("tool_use" | "thinking" | "redacted_thinking")) => {
                return Err(at(&format!(": a `{t}` block belongs in an assistant turn")))
            }
            Some("tool_result") => return Err(at(": a `tool_result` block belongs in a user turn")),
            Some(other) => {
                let why = tessera::media_part_refusal(other).unwrap_or_else(|| {
                    format!("unknown block type `{other}` (text, image, tool_use, tool_result, thinking)")
                });
                return Err(at(&format!(": {why}")));
            }
            None => return Err(at(": no `type` string")),
        }
    }
    // A turn of tool results alone adds no empty user message.
    if !turn.is_empty() || !results {
        turn.flush(role, out);
    }
    Ok(())
}

/// The blocks of a turn not yet written out.
#[derive(Default)]
struct Turn {
    parts: Vec<Value>,
    calls: Vec<Value>,
    reasoning: String,
}

impl Turn {
    fn is_empty(&self) -> bool {
        self.parts.is_empty() && self.calls.is_empty() && self.reasoning.is_empty()
    }

    /// Writes the turn's message (an empty one as `""`) and starts a new one.
    fn flush(&mut self, role: &str, out: &mut Vec<Value>) {
        let mut m = json!({"role": role, "content": std::mem::take(&mut self.parts)});
        if !self.calls.is_empty() {
            if m["content"].as_array().is_some_and(Vec::is_empty) {
                m["content"] = Value::Null;
            }
            m["tool_calls"] = json!(std::mem::take(&mut self.calls));
        }
        if !self.reasoning.is_empty() {
            m["reasoning_content"] = json!(std::mem::take(&mut self.reasoning));
        }
        if m["content"].as_array().is_some_and(Vec::is_empty) {
            m["content"] = json!("");
        }
        out.push(m);
    }
}

/// A `tool_result`'s blocks: their text joined, or the parts when there are images.
fn result_parts(blocks: &[Value]) -> Result<Value, String> {
    let mut parts = Vec::with_capacity(blocks.len());
    for (k, b) in blocks.iter().enumerate() {
        match (b.get("type").and_then(Value::as_str), b.get("text").and_then(Value::as_str)) {
            (Some("text"), Some(t)) => parts.push(json!({"type": "text", "text": t})),
            (Some("image"), _) => parts.push(image_part(b).map_err(|e| format!(".content[{k}]{e}"))?),
            _ => return Err(format!(".content[{k}] must be a text or an image block")),
        }
    }
    if parts.iter().all(|p| p["type"] == "text") {
        return Ok(json!(parts.iter().filter_map(|p| p["text"].as_str()).collect::<String>()));
    }
    Ok(json!(parts))
}

/// The media types Anthropic's API takes for images.
const MEDIA_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// An `image` block as an `image_url` part: base64 data as a `data:` URL, a URL as it is.
fn image_part(block: &Value) -> Result<Value, String> {
    let source = block.get("source").ok_or(": an image block needs a `source`")?;
    let url = match source.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let media = source.get("media_type").and_then(Value::as_str).unwrap_or("");
            if !MEDIA_TYPES.contains(&media) {
                return Err(format!(".source.media_type `{media}` is not one of {}", MEDIA_TYPES.join(", ")));
            }
            let data = source.get("data").and_then(Value::as_str).ok_or(".source: no `data` string")?;
            format!("data:{media};base64,{data}")
        }
        Some("url") => source.get("url").and_then(Value::as_str).ok_or(".source: no `url` string")?.to_string(),
        _ => return Err(".source.type must be \"base64\" or \"url\"".into()),
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> MessagesRequest {
        serde_json::from_value(body).expect("a request")
    }

    #[test]
    fn blocks_become_openai_messages_in_order() {
        let r =
            request(json!({"max_tokens": 8, "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": ""},
                    {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "4"}, {"type": "text", "text": "2"}]}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"},
                    {"type": "text", "text": "thanks"}]}
            ]}));
        let m = r.chat_messages().expect("messages");
        assert_eq!(m[0], json!({"role": "system", "content": "A\n\nB"}));
        assert_eq!(
            m[1]["content"][1],
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}})
        );
        assert_eq!(m[2]["content"], Value::Null);
        assert_eq!(m[2]["reasoning_content"], "hm");
        assert_eq!(m[2]["tool_calls"][0]["function"], json!({"name": "add", "arguments": "{\"a\":1}"}));
        assert_eq!(m[3], json!({"role": "tool", "tool_call_id": "t1", "content": "42"}));
        assert_eq!(m[4], json!({"role": "tool", "tool_call_id": "t1", "content": "x"}));
        assert_eq!(m[5], json!({"role": "user", "content": [{"type": "text", "text": "thanks"}]}));
        assert_eq!(m.as_array().map(Vec::len), Some(6));
    }

    #[test]
    fn bad_fields_are_named() {
        let err = |body: Value| {
            let r = request(body);
            r.sampling().and(r.chat_messages()).and(r.tools().map(|_| Value::Null)).expect_err("an error")
        };
        let e = err(json!({"messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!((e.param.as_deref(), e.message.as_str()), (Some("max_tokens"), "`max_tokens` is required"));
        let e = err(json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "video"}]}]}));
        assert!(
            e.message.contains("messages[0].content[0]: a `video` part: tessera takes text and images only"),
            "{}",
            e.message
        );
        let e = err(json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "sound"}]}]}));
        assert!(e.message.contains("messages[0].content[0]: unknown block type `sound`"), "{}", e.message);
        let e = err(json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image",
            "source": {"type": "base64", "media_type": "image/tiff", "data": ""}}]}]}));
        assert!(e.message.contains("messages[0].content[0].source.media_type `image/tiff`"), "{}", e.message);
        let e = err(json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_use",
            "id": "t", "name": "f", "input": {}}]}]}));
        assert!(e.message.contains("assistant turn"), "{}", e.message);
        let e = err(json!({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}],
            "tools": [{"name": "f"}]}));
        assert_eq!((e.param.as_deref(), e.message.contains("tools[0]: `input_schema`")), (Some("tools"), true));
        let e = err(json!({"max_tokens": 4, "temperature": 1.5, "messages": []}));
        assert_eq!(e.param.as_deref(), Some("temperature"));
    }
}
