//! A chat answer's text as OpenAI's message fields, piece by piece: reasoning (between the
//! template's thinking markers) to `reasoning_content`, calls to `tool_calls`, the rest to
//! `content`. A streamed response sends each piece's deltas as they come; a whole response
//! joins the same deltas ([`assemble`]), so both give the same message.
//!
//! Calls, by [`Calls`]:
//! - `Auto`: content is sent until the format's call marker (text that may begin one is held
//!   back); what follows is read as calls at the end, each sent as one delta (id, name and all
//!   its arguments). Output that does not parse as calls is sent as content then, whole.
//! - `Forced`: the output is the constrained `{"name", "arguments"}` object; the call's id and
//!   name go out once the name is complete, then the arguments as the model writes them, in
//!   fragments that join to the final `arguments` string.

use serde_json::{json, Value};
use tessera::tool_calls::{constrained_call, constrained_prefix};
use tessera::{ReasoningSplitter, ToolFormat};

/// How calls are read from the answer.
#[derive(Debug, Clone, Copy)]
pub enum Calls {
    Off,
    Auto(ToolFormat),
    Forced,
}

#[derive(Debug)]
pub struct ChatOutput {
    reasoning: Option<ReasoningSplitter>,
    calls: Calls,
    /// The template's format (Mistral's call ids are 9 alphanumerics) and the ids' seed.
    id_format: Option<ToolFormat>,
    seed: u64,
    /// The answer so far (after the reasoning), and how much of it went out as content.
    text: String,
    sent: usize,
    in_call: bool,
    /// The forced call's id, once its name went out, and the bytes of its arguments sent.
    forced_id: Option<String>,
    args_sent: usize,
}

impl ChatOutput {
    pub fn new(reasoning: Option<ReasoningSplitter>, calls: Calls, id_format: Option<ToolFormat>, seed: u64) -> Self {
        Self {
            reasoning,
            calls,
            id_format,
            seed,
            text: String::new(),
            sent: 0,
            in_call: false,
            forced_id: None,
            args_sent: 0,
        }
    }

    /// The deltas `piece` of the output completes.
    pub fn push(&mut self, piece: &str) -> Vec<Value> {
        let mut deltas = Vec::new();
        let answer = match &mut self.reasoning {
            Some(r) => {
                let split = r.push(piece);
                if !split.reasoning.is_empty() {
                    deltas.push(json!({"reasoning_content": split.reasoning}));
                }
                split.content
            }
            None => piece.to_string(),
        };
        self.answer(&answer, &mut deltas);
        deltas
    }

    /// The last deltas, at the end of the output, and whether the answer made calls.
    pub fn finish(&mut self) -> (Vec<Value>, bool) {
        let mut deltas = Vec::new();
        if let Some(r) = &mut self.reasoning {
            let split = r.finish();
            if !split.reasoning.is_empty() {
                deltas.push(json!({"reasoning_content": split.reasoning}));
            }
            self.answer(&split.content, &mut deltas);
        }
        let called = match self.calls {
            Calls::Off => false,
            Calls::Auto(format) => {
                let parsed = format.parse(&self.text);
                if parsed.calls.is_empty() {
                    false
                } else {
                    // Content after the calls (or before, held back) that did not go out yet.
                    let sent = self.text[..self.sent].trim();
                    if let Some(rest) = parsed.content.strip_prefix(sent).filter(|r| !r.trim().is_empty()) {
                        deltas.push(json!({"content": rest}));
                    }
                    for (index, call) in parsed.calls.iter().enumerate() {
                        let id = ToolFormat::call_id(self.id_format, self.seed.wrapping_add(index as u64));
                        deltas.push(json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments}}]}));
                    }
                    self.sent = self.text.len();
                    true
                }
            }
            Calls::Forced => match constrained_call(&self.text) {
                Some(call) => {
                    if self.forced_id.is_none() {
                        deltas.push(self.forced_header(&call.name));
                    }
                    if let Some(rest) = call.arguments.get(self.args_sent..).filter(|r| !r.is_empty()) {
                        deltas.push(json!({"tool_calls": [{"index": 0, "function": {"arguments": rest}}]}));
                    }
                    self.sent = self.text.len();
                    true
                }
                None => false,
            },
        };
        // No calls after all: whatever was held back is content. (A forced call cut short, by
        // `max_tokens`, is sent as the text it is.)
        if !called && self.sent < self.text.len() && self.forced_id.is_none() {
            deltas.push(json!({"content": &self.text[self.sent..]}));
            self.sent = self.text.len();
        }
        (deltas, called)
    }

    fn answer(&mut self, piece: &str, deltas: &mut Vec<Value>) {
        self.text.push_str(piece);
        let ready = match self.calls {
            Calls::Off => self.text.len(),
            Calls::Auto(_) if self.in_call => self.sent,
            Calls::Auto(format) => match format.call_start(&self.text) {
                Ok(i) => {
                    self.in_call = true;
                    i.max(self.sent)
                }
                Err(held) => self.text.len() - held,
            },
            Calls::Forced => {
                if let Some((name, args)) = constrained_prefix(&self.text) {
                    let args = args.to_string();
                    if self.forced_id.is_none() {
                        deltas.push(self.forced_header(&name));
                    }
                    if args.len() > self.args_sent {
                        deltas.push(
                            json!({"tool_calls": [{"index": 0, "function": {"arguments": &args[self.args_sent..]}}]}),
                        );
                        self.args_sent = args.len();
                    }
                }
                return;
            }
        };
        if ready > self.sent {
            deltas.push(json!({"content": &self.text[self.sent..ready]}));
            self.sent = ready;
        }
    }

    fn forced_header(&mut self, name: &str) -> Value {
        let id = ToolFormat::call_id(self.id_format, self.seed);
        self.forced_id = Some(id.clone());
        json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]})
    }
}

/// The message the deltas add up to: `content` (null when there are calls and no text),
/// `reasoning_content` when there was any, `tool_calls` when there were any — the fields a
/// client that joins the stream's deltas gets.
pub fn assemble(deltas: &[Value]) -> Value {
    let (mut content, mut reasoning) = (String::new(), String::new());
    let mut calls: Vec<Value> = Vec::new();
    for d in deltas {
        content.push_str(d.get("content").and_then(Value::as_str).unwrap_or(""));
        reasoning.push_str(d.get("reasoning_content").and_then(Value::as_str).unwrap_or(""));
        for c in d.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let index = c.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            let fragment = c.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("");
            match calls.get_mut(index) {
                Some(call) => {
                    let args = call["function"]["arguments"].as_str().unwrap_or("").to_string() + fragment;
                    call["function"]["arguments"] = json!(args);
                }
                None => calls.push(json!({"id": c.get("id"), "type": "function",
                    "function": {"name": c.pointer("/function/name"), "arguments": fragment}})),
            }
        }
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        if content.is_empty() {
            message["content"] = Value::Null;
        }
        message["tool_calls"] = json!(calls);
    }
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera::ThinkingMarkers;

    /// The message from the whole text, and from the text cut into every pair of pieces.
    fn check(make: impl Fn() -> ChatOutput, text: &str) -> Value {
        let mut whole = make();
        let mut deltas = whole.push(text);
        deltas.extend(whole.finish().0);
        let expected = assemble(&deltas);
        let cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
        for &a in cuts.iter().step_by(3) {
            let mut o = make();
            let mut deltas = o.push(&text[..a]);
            deltas.extend(o.push(&text[a..]));
            deltas.extend(o.finish().0);
            assert_eq!(assemble(&deltas), expected, "cut at {a}");
        }
        expected
    }

    #[test]
    fn auto_calls_reasoning_and_content() {
        let qwen = || {
            let r = ReasoningSplitter::new(ThinkingMarkers::detect("<think></think>").unwrap(), "");
            ChatOutput::new(Some(r), Calls::Auto(ToolFormat::Hermes), Some(ToolFormat::Hermes), 1)
        };
        let m = check(
            qwen,
            "<think>\nNeed weather.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"P\"}}\n</tool_call>",
        );
        assert_eq!(m["reasoning_content"], "Need weather.");
        assert_eq!(m["content"], "Checking.\n");
        assert_eq!(m["tool_calls"][0]["function"], json!({"name": "w", "arguments": "{\"c\":\"P\"}"}));
        // No call: everything is content, nothing lost (a `<` that began like a marker too).
        let m = check(qwen, "a <tool b");
        assert_eq!((m["content"].as_str(), m.get("tool_calls")), (Some("a <tool b"), None));
        let m = check(qwen, "<tool_call>{broken");
        assert_eq!(m["content"], "<tool_call>{broken");
    }

    #[test]
    fn forced_call_arguments_stream_in_fragments() {
        let forced = || ChatOutput::new(None, Calls::Forced, Some(ToolFormat::Mistral), 5);
        let m = check(forced, "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": {\"c\": \"}\"}}}");
        assert_eq!(
            m["tool_calls"][0]["function"],
            json!({"name": "add", "arguments": "{\"a\": 1, \"b\": {\"c\": \"}\"}}"})
        );
        assert_eq!(m["content"], Value::Null);
        assert_eq!(m["tool_calls"][0]["id"].as_str().map(str::len), Some(9));
        // Cut short by max_tokens: the text, as content.
        let m = check(forced, "{\"name\": \"add\", \"argu");
        assert_eq!(m["content"], "{\"name\": \"add\", \"argu");
    }
}
