//! Chat messages in the Hugging Face form a chat template reads, and conversations read from
//! OpenAI / Hugging Face chat JSON: text and image parts, and the tool-calling fields
//! (`tool_calls` on an assistant turn, `tool_call_id` / `name` on a tool result,
//! `reasoning_content`), which reach the template as transformers passes them.

use serde::{Deserialize, Serialize};

use crate::error::{Result, TextError};

/// Why a video or audio part (OpenAI's, Anthropic's or the Responses API's names for one) is
/// refused, naming its type; `None` for any other type. tessera takes text and images only.
pub fn media_part_refusal(kind: &str) -> Option<String> {
    matches!(kind, "video" | "video_url" | "input_video" | "audio" | "input_audio" | "audio_url").then(|| {
        format!(
            "a `{kind}` part: tessera takes text and images only (no video or audio inputs, whichever the model \
             takes in transformers)"
        )
    })
}

/// One part of a multimodal message, in the Hugging Face form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: String },
    Image,
}

/// A message's content: plain text, a list of parts (`[image, …, text]`), or none (`null`: an
/// assistant turn that only calls tools).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
    Null,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Content,
    /// The other fields the template sees as they were given: `name`, `tool_calls` (each
    /// call's `arguments` as a JSON object, as vLLM and llama.cpp hand them to templates),
    /// `tool_call_id`, `reasoning_content`.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Message {
    pub fn text(role: &str, text: &str) -> Self {
        Self { role: role.into(), content: Content::Text(text.into()), extra: Default::default() }
    }

    pub fn parts(role: &str, parts: Vec<ContentPart>) -> Self {
        Self { role: role.into(), content: Content::Parts(parts), extra: Default::default() }
    }

    /// The same message with `content` replaced (its other fields kept).
    pub fn with_content(&self, content: Content) -> Self {
        Self { role: self.role.clone(), content, extra: self.extra.clone() }
    }
}

/// The keys a message may carry besides `role` and `content`.
const EXTRA_KEYS: [&str; 4] = ["name", "tool_calls", "tool_call_id", "reasoning_content"];

/// A conversation read from JSON: its messages (every image part as `{"type": "image"}`, the form
/// chat templates test) and the images' sources in the order the parts appear.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    pub messages: Vec<Message>,
    /// What each image part named: a file path, a `file://` URL, a `data:` URL or an
    /// `http(s)` URL, as written (resolving it is the caller's).
    pub images: Vec<String>,
}

impl Conversation {
    /// Reads a JSON list of messages in the Hugging Face chat format: `{"role", "content"}` with
    /// `content` a string or a list of parts — `{"type": "text", "text"}`, `{"type": "image"}` with
    /// its source under `image`, `url` or `path`, or its bytes under `base64` (the keys
    /// `apply_chat_template` accepts), or
    /// OpenAI's `{"type": "image_url", "image_url": {"url"}}` (or `"image_url": "…"`).
    pub fn from_json(value: &serde_json::Value) -> Result<Self> {
        let bad = |what: String| TextError::Messages(what);
        let list = value.as_array().ok_or_else(|| bad("expected a JSON list of messages".into()))?;
        if list.is_empty() {
            return Err(bad("the list of messages is empty".into()));
        }
        let mut images = Vec::new();
        let mut messages = Vec::with_capacity(list.len());
        for (i, m) in list.iter().enumerate() {
            let at = |what: &str| bad(format!("message {i}: {what}"));
            let obj = m.as_object().ok_or_else(|| at("not an object"))?;
            let role = obj.get("role").and_then(|r| r.as_str()).ok_or_else(|| at("no `role` string"))?;
            // The roles chat templates know; another is a typo the template would render as is.
            if !matches!(role, "system" | "developer" | "user" | "assistant" | "tool" | "function" | "ipython") {
                return Err(at(&format!(
                    "unknown role `{role}` (system, developer, user, assistant, tool, function or ipython)"
                )));
            }
            if let Some(key) = obj.keys().find(|k| *k != "role" && *k != "content" && !EXTRA_KEYS.contains(&k.as_str()))
            {
                return Err(at(&format!("unknown field `{key}`")));
            }
            let mut extra = serde_json::Map::new();
            for key in EXTRA_KEYS {
                match obj.get(key) {
                    None | Some(serde_json::Value::Null) => {}
                    Some(v) if key == "tool_calls" => {
                        if role != "assistant" {
                            return Err(at("only an assistant message has `tool_calls`"));
                        }
                        extra.insert(key.into(), tool_calls_for_template(v).map_err(|e| at(&e))?);
                    }
                    Some(serde_json::Value::String(s)) => {
                        extra.insert(key.into(), serde_json::Value::String(s.clone()));
                    }
                    Some(_) => return Err(at(&format!("`{key}` must be a string"))),
                }
            }
            let content = match obj.get("content") {
                Some(serde_json::Value::String(s)) => Content::Text(s.clone()),
                Some(serde_json::Value::Array(parts)) => {
                    let mut out = Vec::with_capacity(parts.len());
                    for (j, part) in parts.iter().enumerate() {
                        let at = |what: &str| bad(format!("message {i}, part {j}: {what}"));
                        let kind = part.get("type").and_then(|t| t.as_str()).ok_or_else(|| at("no `type` string"))?;
                        let source = |keys: &[&str]| {
                            keys.iter()
                                .find_map(|k| part.get(*k).and_then(|v| v.as_str()))
                                .map(str::to_string)
                                .ok_or_else(|| at(&format!("an image part needs one of {keys:?} (a path or URL)")))
                        };
                        match kind {
                            "text" => {
                                let text =
                                    part.get("text").and_then(|t| t.as_str()).ok_or_else(|| at("no `text` string"))?;
                                out.push(ContentPart::Text { text: text.to_string() });
                            }
                            "image" => {
                                let src = match part.get("base64").and_then(|b| b.as_str()) {
                                    Some(b64) => format!("data:;base64,{b64}"),
                                    None => source(&["image", "url", "path", "base64"])?,
                                };
                                images.push(src);
                                out.push(ContentPart::Image);
                            }
                            "image_url" => {
                                let url = match part.get("image_url") {
                                    Some(serde_json::Value::String(s)) => s.clone(),
                                    Some(v) => v
                                        .get("url")
                                        .and_then(|u| u.as_str())
                                        .map(str::to_string)
                                        .ok_or_else(|| at("`image_url` needs a `url` string"))?,
                                    None => return Err(at("no `image_url`")),
                                };
                                images.push(url);
                                out.push(ContentPart::Image);
                            }
                            other => {
                                let why = media_part_refusal(other)
                                    .unwrap_or_else(|| format!("unknown part type `{other}` (text, image, image_url)"));
                                return Err(at(&why));
                            }
                        }
                    }
                    Content::Parts(out)
                }
                // An assistant turn that only calls tools has no content.
                None | Some(serde_json::Value::Null) if extra.contains_key("tool_calls") => Content::Null,
                Some(serde_json::Value::Null) => {
                    return Err(at("`content` is null (only an assistant turn with `tool_calls` may omit it)"))
                }
                Some(_) => return Err(at("`content` must be a string or a list of parts")),
                None => return Err(at("no `content`")),
            };
            messages.push(Message { role: role.to_string(), content, extra });
        }
        Ok(Self { messages, images })
    }
}

/// An assistant turn's `tool_calls` (OpenAI's `[{"id", "type": "function", "function": {"name",
/// "arguments"}}]`) as the template sees them: `arguments`, a JSON string in OpenAI's API, parsed
/// into an object (what templates written for transformers expect; a string that is not JSON is
/// kept as the string).
fn tool_calls_for_template(calls: &serde_json::Value) -> std::result::Result<serde_json::Value, String> {
    let list = calls.as_array().ok_or("`tool_calls` must be a list")?;
    let mut out = Vec::with_capacity(list.len());
    for (k, call) in list.iter().enumerate() {
        let mut call = call.as_object().cloned().ok_or(format!("tool_calls[{k}] is not an object"))?;
        let function = call
            .get_mut("function")
            .and_then(|f| f.as_object_mut())
            .ok_or(format!("tool_calls[{k}] has no `function` object"))?;
        if !function.get("name").is_some_and(|n| n.is_string()) {
            return Err(format!("tool_calls[{k}].function has no `name` string"));
        }
        match function.get("arguments") {
            Some(serde_json::Value::String(s)) => {
                if let Ok(v @ serde_json::Value::Object(_)) = serde_json::from_str::<serde_json::Value>(s) {
                    function.insert("arguments".into(), v);
                }
            }
            Some(serde_json::Value::Object(_)) => {}
            None => {
                function.insert("arguments".into(), serde_json::json!({}));
            }
            Some(_) => return Err(format!("tool_calls[{k}].function.arguments must be a JSON string")),
        }
        out.push(serde_json::Value::Object(call));
    }
    Ok(serde_json::Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversations_read_every_image_form_in_order() {
        let json = serde_json::json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [
                {"type": "image", "image": "a.png"},
                {"type": "text", "text": "What is this?"},
                {"type": "image", "url": "file:///tmp/b.png"},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
            {"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "image_url", "image_url": "c.jpg"},
                {"type": "image", "path": "d.png"},
                {"type": "image", "base64": "QUJD"},
                {"type": "text", "text": "And these?"},
            ]},
        ]);
        let c = Conversation::from_json(&json).unwrap();
        assert_eq!(
            c.images,
            ["a.png", "file:///tmp/b.png", "data:image/png;base64,AAAA", "c.jpg", "d.png", "data:;base64,QUJD"]
        );
        assert_eq!(c.messages[0], Message::text("system", "Be brief."));
        let text = |t: &str| ContentPart::Text { text: t.into() };
        assert_eq!(
            c.messages[1],
            Message::parts("user", vec![ContentPart::Image, text("What is this?"), ContentPart::Image])
        );
        assert_eq!(c.messages[2], Message::parts("assistant", vec![text("A cat.")]));
        assert_eq!(
            c.messages[3].content,
            Content::Parts(vec![ContentPart::Image; 4].into_iter().chain([text("And these?")]).collect())
        );
    }

    #[test]
    fn malformed_conversations_name_the_message_and_part() {
        let err = |v: serde_json::Value| Conversation::from_json(&v).unwrap_err().to_string();
        assert!(err(serde_json::json!({"role": "user"})).contains("a JSON list"));
        assert!(err(serde_json::json!([])).contains("empty"));
        assert!(err(serde_json::json!([{"content": "hi"}])).contains("message 0: no `role`"));
        assert!(err(serde_json::json!([{"role": "user"}])).contains("message 0: no `content`"));
        assert!(err(serde_json::json!([{"role": "user", "content": 3}])).contains("string or a list"));
        assert!(err(serde_json::json!([{"role": "user", "content": "x", "contnet": 1}]))
            .contains("unknown field `contnet`"));
        let e = err(
            serde_json::json!([{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "image"}]}]),
        );
        assert!(e.contains("message 1, part 0") && e.contains("a path or URL"), "{e}");
        let e = err(serde_json::json!([{"role": "user", "content": [{"type": "video", "video": "v.mp4"}]}]));
        assert!(e.contains("a `video` part: tessera takes text and images only"), "{e}");
        let e = err(serde_json::json!([{"role": "user", "content": [{"type": "mp3", "mp3": "v.mp3"}]}]));
        assert!(e.contains("unknown part type `mp3`"), "{e}");
        let e = err(serde_json::json!([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]));
        assert!(e.contains("`url` string"), "{e}");
    }

    #[test]
    fn tool_turns_keep_their_fields_for_the_template() {
        let json = serde_json::json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C"},
        ]);
        let c = Conversation::from_json(&json).unwrap();
        assert_eq!(c.messages[1].content, Content::Null);
        assert_eq!(c.messages[1].extra["tool_calls"][0]["function"]["arguments"], serde_json::json!({"city": "Paris"}));
        assert_eq!(c.messages[2].extra["tool_call_id"], "call_1");
        // Serialized for the template: null content, the call's arguments an object.
        let v = serde_json::to_value(&c.messages[1]).unwrap();
        assert_eq!(v["content"], serde_json::Value::Null);
        assert_eq!(v["tool_calls"][0]["id"], "call_1");
        let err = |v: serde_json::Value| Conversation::from_json(&v).unwrap_err().to_string();
        assert!(err(serde_json::json!([{"role": "user", "content": null}])).contains("null"));
        let e = err(serde_json::json!([{"role": "assistant", "content": null, "tool_calls": [{"function": {}}]}]));
        assert!(e.contains("tool_calls[0].function has no `name`"), "{e}");
        let e = err(serde_json::json!([{"role": "user", "content": "x", "tool_calls": []}]));
        assert!(e.contains("only an assistant"), "{e}");
    }
}
