//! A Responses API request (OpenAI's `POST /v1/responses`, stateless), checked and translated
//! into the chat pipeline's terms: a 400 names the field at fault (`input[2].call_id`).
//!
//! - `instructions` → a system message; `input`: a string (one user message) or items:
//!   messages (`role` user / system / developer / assistant; content a string or parts
//!   `input_text` / `output_text` / `input_image` with an `image_url`), `function_call`
//!   (`call_id`, `name`, `arguments`) → the assistant turn's `tool_calls`,
//!   `function_call_output` (`call_id`, `output`) → a `tool` message, `reasoning` → the next
//!   assistant turn's `reasoning_content`.
//! - `tools[]` `{type: function, name, description, parameters}`, `tool_choice` `auto` / `none`
//!   / `required` / `{type: function, name}`; `text.format` `text` / `json_object` /
//!   `json_schema`; `reasoning.effort` → the template variable `reasoning_effort`;
//!   `max_output_tokens`, `temperature`, `top_p`.
//! - Nothing is stored: `previous_response_id` is a 400 (`store` is accepted and ignored).

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tessera::OutputFormat;

use super::front::{self, bad, FrontEnd};
use crate::api::Sampling;
use crate::error::ApiError;

#[derive(Debug, Clone, Deserialize)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    pub input: Value,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub text: Option<Value>,
    pub reasoning: Option<Value>,
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub stream: bool,
}

impl FrontEnd for ResponsesRequest {
    fn model(&self) -> &Option<String> {
        &self.model
    }

    fn sampling(&self) -> Result<Sampling, ApiError> {
        if self.previous_response_id.is_some() {
            return Err(bad(
                "previous_response_id",
                "this server stores no responses: send the whole conversation in `input`".into(),
            ));
        }
        Ok(Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            max_tokens: self.max_output_tokens,
            stream: self.stream,
            ..Default::default()
        })
    }

    /// `reasoning.effort` as a template variable.
    fn kwargs(&self) -> Result<Map<String, Value>, ApiError> {
        let mut kwargs = Map::new();
        front::effort(
            self.reasoning.as_ref().and_then(|r| r.get("effort")),
            "reasoning",
            "reasoning.effort",
            &mut kwargs,
        )?;
        Ok(kwargs)
    }

    /// `text.format` as the output's constraint.
    fn format(&self) -> Result<Option<OutputFormat>, ApiError> {
        let Some(format) = self.text.as_ref().and_then(|t| t.get("format")) else { return Ok(None) };
        match format.get("type").and_then(Value::as_str) {
            Some("text") => Ok(None),
            Some("json_object") => Ok(Some(OutputFormat::JsonObject)),
            Some("json_schema") => match format.get("schema") {
                Some(schema) if schema.is_object() => Ok(Some(OutputFormat::JsonSchema(schema.clone()))),
                _ => Err(bad("text", "`text.format` json_schema needs a `schema` object".into())),
            },
            _ => Err(bad("text", "`text.format.type` must be one of text, json_object, json_schema".into())),
        }
    }

    /// `tools` and `tool_choice` as chat's.
    fn tools(&self) -> Result<(Option<Value>, Option<Value>), ApiError> {
        let tools = match &self.tools {
            None | Some(Value::Null) => None,
            Some(Value::Array(list)) => {
                let mut out = Vec::with_capacity(list.len());
                for (i, t) in list.iter().enumerate() {
                    let at = |what: String| bad("tools", format!("tools[{i}]: {what}"));
                    match t.get("type").and_then(Value::as_str) {
                        Some("function") => {}
                        other => return Err(at(format!("type {other:?}: only `function` tools run here"))),
                    }
                    let mut function = t.as_object().cloned().unwrap_or_default();
                    function.remove("type");
                    out.push(json!({"type": "function", "function": function}));
                }
                Some(Value::Array(out))
            }
            Some(_) => return Err(bad("tools", "`tools` must be a list".into())),
        };
        let choice = match &self.tool_choice {
            Some(Value::Object(c)) => match (c.get("type").and_then(Value::as_str), c.get("name")) {
                (Some("function"), Some(name)) => Some(json!({"type": "function", "function": {"name": name}})),
                _ => {
                    return Err(bad(
                        "tool_choice",
                        "tool_choice must be auto, none, required or {type: function, name}".into(),
                    ))
                }
            },
            other => other.clone(),
        };
        Ok((tools, choice))
    }

    /// `instructions` and `input` as chat's messages.
    fn chat_messages(&self) -> Result<Value, ApiError> {
        let mut out = Vec::new();
        if let Some(i) = &self.instructions {
            out.push(json!({"role": "system", "content": i}));
        }
        let items = match &self.input {
            Value::String(s) => {
                out.push(json!({"role": "user", "content": s}));
                return Ok(Value::Array(out));
            }
            Value::Array(items) if !items.is_empty() => items,
            _ => return Err(bad("input", "`input` must be a string or a non-empty list of items".into())),
        };
        let mut reasoning = String::new();
        for (i, item) in items.iter().enumerate() {
            let at = |what: &str| bad("input", format!("input[{i}]{what}"));
            let str_field =
                |key: &str| item.get(key).and_then(Value::as_str).ok_or_else(|| at(&format!(": no `{key}` string")));
            let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
            match kind {
                "message" => {
                    let role = match str_field("role")? {
                        r @ ("user" | "system" | "developer" | "assistant") => r,
                        other => {
                            return Err(at(&format!(".role `{other}` is not user, system, developer or assistant")))
                        }
                    };
                    let content = match item.get("content") {
                        Some(s @ Value::String(_)) => s.clone(),
                        Some(Value::Array(parts)) => json!(parts_of(parts).map_err(|e| at(&e))?),
                        _ => return Err(at(".content must be a string or a list of parts")),
                    };
                    let mut m = json!({"role": role, "content": content});
                    if role == "assistant" && !reasoning.is_empty() {
                        m["reasoning_content"] = json!(std::mem::take(&mut reasoning));
                    }
                    out.push(m);
                }
                "function_call" => {
                    let call = json!({"id": str_field("call_id")?, "type": "function",
                        "function": {"name": str_field("name")?, "arguments": str_field("arguments")?}});
                    // Calls after an assistant turn (its text, or calls before) join it.
                    match out.last_mut().filter(|m| m["role"] == "assistant") {
                        Some(m) => match m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                            Some(calls) => calls.push(call),
                            None => m["tool_calls"] = json!([call]),
                        },
                        None => {
                            let mut m = json!({"role": "assistant", "content": null, "tool_calls": [call]});
                            if !reasoning.is_empty() {
                                m["reasoning_content"] = json!(std::mem::take(&mut reasoning));
                            }
                            out.push(m);
                        }
                    }
                }
                "function_call_output" => {
                    let output = match item.get("output") {
                        Some(s @ Value::String(_)) => s.clone(),
                        Some(Value::Array(parts)) => json!(parts_of(parts).map_err(|e| at(&format!(".output{e}")))?),
                        _ => return Err(at(": `output` must be a string or a list of parts")),
                    };
                    out.push(json!({"role": "tool", "tool_call_id": str_field("call_id")?, "content": output}));
                }
                "reasoning" => {
                    let texts = ["content", "summary"].iter().flat_map(|k| item.get(*k).and_then(Value::as_array));
                    for part in texts.flatten() {
                        reasoning.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                }
                other => {
                    return Err(at(&format!(
                        ": item type `{other}` is not one of message, function_call, function_call_output, reasoning"
                    )))
                }
            }
        }
        Ok(Value::Array(out))
    }
}

/// A message's parts as chat's: text parts, images as `image_url` parts.
fn parts_of(parts: &[Value]) -> Result<Vec<Value>, String> {
    let mut out = Vec::with_capacity(parts.len());
    for (j, p) in parts.iter().enumerate() {
        match p.get("type").and_then(Value::as_str) {
            Some("input_text" | "output_text" | "text") => {
                let text = p.get("text").and_then(Value::as_str);
                out.push(json!({"type": "text", "text": text.ok_or(format!(".content[{j}]: no `text` string"))?}));
            }
            Some("input_image") => {
                let url = p.get("image_url").and_then(Value::as_str);
                let url =
                    url.ok_or(format!(".content[{j}]: an input_image needs an `image_url` (file ids are not kept)"))?;
                out.push(json!({"type": "image_url", "image_url": {"url": url}}));
            }
            other => {
                return Err(match other.and_then(tessera::media_part_refusal) {
                    Some(why) => format!(".content[{j}]: {why}"),
                    None => format!(".content[{j}]: part type {other:?} is not input_text, output_text or input_image"),
                })
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_become_chat_messages() {
        let r: ResponsesRequest = serde_json::from_value(json!({"instructions": "Be brief.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"},
                                         {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
            {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{\"a\":1}"},
            {"type": "function_call", "call_id": "c2", "name": "add", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "1"}
        ]}))
        .expect("request");
        let m = r.chat_messages().expect("messages");
        assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(m[1]["content"][1]["image_url"]["url"], "data:image/png;base64,AA");
        assert_eq!(
            (m[2]["reasoning_content"].as_str(), m[2]["tool_calls"].as_array().map(Vec::len)),
            (Some("hm"), Some(2))
        );
        assert_eq!(m[3], json!({"role": "tool", "tool_call_id": "c1", "content": "1"}));
        let bad: ResponsesRequest =
            serde_json::from_value(json!({"input": [{"type": "web_search_call"}]})).expect("request");
        let e = bad.chat_messages().expect_err("an error");
        assert!(e.message.contains("input[0]: item type `web_search_call`"), "{}", e.message);
        let audio: ResponsesRequest =
            serde_json::from_value(json!({"input": [{"role": "user", "content": [{"type": "input_audio"}]}]}))
                .expect("request");
        let e = audio.chat_messages().expect_err("an error");
        assert!(
            e.message.contains("content[0]: a `input_audio` part: tessera takes text and images only"),
            "{}",
            e.message
        );
    }
}
