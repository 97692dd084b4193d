//! Tool calls in a model's output: which format a model writes them in, told by its chat
//! template's text, and the parser of each format into OpenAI's calls (a name and the arguments
//! as a JSON string). Formats, as the templates show them to the model and as llama.cpp's
//! `common/chat.cpp` and vLLM's `tool_parsers/` read them:
//!
//! - **Hermes** (Qwen2.5, Qwen3, Hermes, SmolLM3): `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`,
//!   one block per call, text around them is content.
//! - **Llama 3.x**: the whole answer is `{"name": …, "parameters": {…}}` (several joined by `;`),
//!   optionally after `<|python_tag|>`.
//! - **Mistral**: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`, or (Mistral Small 3.2, Devstral)
//!   `[TOOL_CALLS]name[ARGS]{…}` per call.
//! - **Gemma 4**: `<|tool_call>call:name{key:<|"|>text<|"|>,n:1}<tool_call|>`: keys bare, strings
//!   between `<|"|>` quotes.
//!
//! Special tokens (`[TOOL_CALLS]`, `<|python_tag|>`, Gemma's `<|tool_call>`) may be dropped from
//! the decoded text; each parser also reads its format without them. Output that does not parse
//! as calls is content, whole: no text is lost.
//!
//! When `tool_choice` forces a call, the output is constrained instead to one JSON object
//! `{"name": …, "arguments": {…}}` ([`call_schema`]; vLLM forces calls the same way), read by
//! [`constrained_call`] whatever the model's own format.

use serde_json::Value;

/// The markers the tool-call and reasoning parsers read. Where a tokenizer has one as a special
/// token (Mistral's `[TOOL_CALLS]`, Llama's `<|python_tag|>`, Gemma 4's), the detokenizer must
/// keep it ([`crate::Tokenizer::decode_stream_keeping`]) for the parser to see it.
pub const MARKERS: &[&str] = &[
    "<tool_call>",
    "</tool_call>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "<|tool_call>",
    "<tool_call|>",
    "<|\"|>",
    "<think>",
    "</think>",
    "<|channel>",
    "<channel|>",
];

/// How a model family writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    Llama3,
    Mistral,
    Gemma4,
}

/// One call: the function's name and its arguments as JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// An output split into its text and its calls.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ParsedOutput {
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl ParsedOutput {
    fn text(text: &str) -> Self {
        Self { content: text.to_string(), calls: Vec::new() }
    }
}

impl ToolFormat {
    /// The format a chat template teaches its model, from the template's text; `None` for a
    /// template that shows no tool-call syntax.
    pub fn detect(template: &str) -> Option<Self> {
        if template.contains("[TOOL_CALLS]") {
            Some(Self::Mistral)
        } else if template.contains("<|tool_call>") {
            Some(Self::Gemma4)
        } else if template.contains("<tool_call>") {
            Some(Self::Hermes)
        } else if template.contains("<|python_tag|>")
            || (template.contains("<|start_header_id|>") && template.contains("\"parameters\""))
        {
            Some(Self::Llama3)
        } else {
            None
        }
    }

    /// Markers after which the rest of the output is calls, anywhere in it.
    fn markers(self) -> &'static [&'static str] {
        match self {
            Self::Hermes => &["<tool_call>"],
            Self::Llama3 => &["<|python_tag|>"],
            Self::Mistral => &["[TOOL_CALLS]"],
            Self::Gemma4 => &["<|tool_call>"],
        }
    }

    /// Markers that start calls only at the start of the output (the format without its
    /// special tokens).
    fn leading(self) -> &'static [&'static str] {
        match self {
            Self::Hermes => &[],
            Self::Llama3 => &["{"],
            Self::Mistral => &["["],
            Self::Gemma4 => &["call:"],
        }
    }

    /// Where calls may begin in `text` (an output so far): `Ok(i)` — from byte `i` on the text
    /// may be calls (a streamed answer sends content only up to `i`); `Err(n)` — no call yet,
    /// but the last `n` bytes could begin a marker (held back until the next piece tells).
    pub fn call_start(self, text: &str) -> Result<usize, usize> {
        let lead = text.len() - text.trim_start().len();
        let rest = &text[lead..];
        for m in self.leading() {
            if rest.starts_with(m) {
                return Ok(lead);
            }
            if !rest.is_empty() && m.starts_with(rest) {
                return Err(rest.len());
            }
        }
        if let Some(i) = self.markers().iter().filter_map(|m| text.find(m)).min() {
            return Ok(i);
        }
        let held = self
            .markers()
            .iter()
            .flat_map(|m| (1..m.len()).filter(move |&k| m.is_char_boundary(k)).map(move |k| &m[..k]))
            .filter(|p| text.ends_with(p))
            .map(str::len)
            .max()
            .unwrap_or(0);
        Err(held)
    }

    /// `text`'s calls and the text around them; text that does not parse as calls of this
    /// format is all content.
    pub fn parse(self, text: &str) -> ParsedOutput {
        let parsed = match self {
            Self::Hermes => parse_hermes(text),
            Self::Llama3 => parse_llama3(text),
            Self::Mistral => parse_mistral(text),
            Self::Gemma4 => parse_gemma4(text),
        };
        parsed.filter(|p| !p.calls.is_empty()).unwrap_or_else(|| ParsedOutput::text(text))
    }

    /// A new call id: Mistral's templates take exactly 9 alphanumerics (they refuse others when
    /// the call comes back in the history); the others OpenAI's `call_` and 24.
    pub fn call_id(format: Option<Self>, random: u64) -> String {
        const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let mut x = random;
        let mut next = || {
            // splitmix64
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ALNUM[((z ^ (z >> 31)) % ALNUM.len() as u64) as usize] as char
        };
        match format {
            Some(Self::Mistral) => (0..9).map(|_| next()).collect(),
            _ => format!("call_{}", (0..24).map(|_| next()).collect::<String>()),
        }
    }
}

/// `{"name": …, "arguments"|"parameters": {…}}` as a call.
fn call_from_json(v: &Value) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = match v.get("arguments").or_else(|| v.get("parameters")) {
        None => Value::Object(Default::default()),
        // Some models write the arguments as a JSON string.
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok().filter(Value::is_object)?,
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return None,
    };
    Some(ToolCall { name, arguments: args.to_string() })
}

fn parse_hermes(text: &str) -> Option<ParsedOutput> {
    let (open, close) = ("<tool_call>", "</tool_call>");
    let mut out = ParsedOutput::default();
    let mut rest = text;
    while let Some(i) = rest.find(open) {
        out.content.push_str(&rest[..i]);
        let body = &rest[i + open.len()..];
        let (json, after) = match body.find(close) {
            Some(j) => (&body[..j], &body[j + close.len()..]),
            // The last block may end at EOS without its closing tag.
            None => (body, ""),
        };
        out.calls.push(call_from_json(&serde_json::from_str(json.trim()).ok()?)?);
        rest = after;
    }
    out.content.push_str(rest);
    out.content = out.content.trim().to_string();
    Some(out)
}

/// JSON values one after another in `text`, separated by whitespace or `sep`; `None` unless
/// all of `text` is such values.
fn json_values(text: &str, sep: char) -> Option<Vec<Value>> {
    let mut values = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        values.push(stream.next()?.ok()?);
        rest = rest[stream.byte_offset()..].trim_start().trim_start_matches(sep).trim_start();
    }
    Some(values)
}

fn parse_llama3(text: &str) -> Option<ParsedOutput> {
    let (content, calls) = match text.find("<|python_tag|>") {
        Some(i) => (text[..i].trim(), &text[i + "<|python_tag|>".len()..]),
        None => ("", text),
    };
    let calls = json_values(calls, ';')?.iter().map(call_from_json).collect::<Option<Vec<_>>>()?;
    Some(ParsedOutput { content: content.to_string(), calls })
}

fn parse_mistral(text: &str) -> Option<ParsedOutput> {
    let marker = "[TOOL_CALLS]";
    let (content, body) = match text.find(marker) {
        Some(i) => (text[..i].trim(), &text[i + marker.len()..]),
        None => ("", text),
    };
    let body = body.trim();
    let calls = if body.starts_with('[') {
        let list = serde_json::from_str::<Value>(body).ok()?;
        list.as_array()?.iter().map(call_from_json).collect::<Option<Vec<_>>>()?
    } else {
        // `name[ARGS]{…}` per call, each after its own `[TOOL_CALLS]`.
        let mut calls = Vec::new();
        for part in body.split(marker) {
            let (name, args) = part.split_once("[ARGS]")?;
            let args = serde_json::from_str::<Value>(args.trim()).ok().filter(Value::is_object)?;
            calls.push(ToolCall { name: name.trim().to_string(), arguments: args.to_string() });
        }
        calls
    };
    Some(ParsedOutput { content: content.to_string(), calls })
}

fn parse_gemma4(text: &str) -> Option<ParsedOutput> {
    let (open, close) = ("<|tool_call>", "<tool_call|>");
    let start = text
        .find(open)
        .or_else(|| text.trim_start().starts_with("call:").then(|| text.len() - text.trim_start().len()))?;
    let mut out = ParsedOutput { content: text[..start].to_string(), calls: Vec::new() };
    let mut rest = &text[start..];
    loop {
        rest = rest.trim_start();
        rest = rest.strip_prefix(open).unwrap_or(rest);
        let Some(call) = rest.strip_prefix("call:") else { break };
        let brace = call.find('{')?;
        let name = call[..brace].trim().to_string();
        let (args, used) = gemma_object(&call[brace..])?;
        out.calls.push(ToolCall { name, arguments: args.to_string() });
        rest = &call[brace + used..];
        rest = rest.trim_start();
        rest = rest.strip_prefix(close).unwrap_or(rest);
    }
    out.content.push_str(rest);
    out.content = out.content.trim().to_string();
    Some(out)
}

/// Gemma 4's argument syntax (`{key:<|"|>text<|"|>,n:1,list:[…]}`) from the start of `s` as
/// JSON, and the bytes it took.
fn gemma_object(s: &str) -> Option<(Value, usize)> {
    const QUOTE: &str = "<|\"|>";
    let mut json = String::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        if let Some(q) = rest.strip_prefix(QUOTE) {
            let end = q.find(QUOTE)?;
            json.push_str(&Value::String(q[..end].to_string()).to_string());
            i += QUOTE.len() * 2 + end;
            continue;
        }
        let c = rest.chars().next()?;
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.checked_sub(1)?,
            _ => {}
        }
        if matches!(c, '{' | '}' | '[' | ']' | ',' | ':') || c.is_whitespace() {
            json.push(c);
            i += c.len_utf8();
            if depth == 0 {
                return Some((serde_json::from_str(&json).ok()?, i));
            }
            continue;
        }
        // A bare word: a key (before `:`), a literal, or an unquoted string.
        let structural = rest.find(['{', '}', '[', ']', ',', ':']);
        let len = structural.into_iter().chain(rest.find(QUOTE)).min().unwrap_or(rest.len());
        let word = rest[..len].trim();
        let is_key = rest[len..].starts_with(':');
        let literal = !is_key && (matches!(word, "true" | "false" | "null") || word.parse::<f64>().is_ok());
        if literal {
            json.push_str(word);
        } else {
            json.push_str(&Value::String(word.to_string()).to_string());
        }
        i += len.max(1);
    }
    None
}

/// The JSON schema a forced call is constrained to: one object `{"name": <a tool's name>,
/// "arguments": <that tool's parameters>}` for each of `tools` (OpenAI's
/// `[{"type": "function", "function": {"name", "parameters"}}]`) — only `only`'s when given.
pub fn call_schema(tools: &[Value], only: Option<&str>) -> Value {
    let alternatives: Vec<Value> = tools
        .iter()
        .filter_map(|t| t.get("function"))
        .filter(|f| only.is_none_or(|n| f.get("name").and_then(Value::as_str) == Some(n)))
        .map(|f| {
            let params = f.get("parameters").cloned().unwrap_or_else(|| serde_json::json!({"type": "object"}));
            serde_json::json!({
                "type": "object",
                "properties": {"name": {"const": f.get("name").cloned().unwrap_or(Value::Null)}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    match <[Value; 1]>::try_from(alternatives) {
        Ok([one]) => one,
        Err(all) => serde_json::json!({"anyOf": all}),
    }
}

/// What of a forced call (an object `{"name": …, "arguments": {…}}`, see [`call_schema`]) the
/// output so far shows: the name, once the `arguments` key follows it, and the arguments'
/// text so far (without trailing `}` and whitespace, which may close the outer object: always
/// a prefix of the final arguments).
pub fn constrained_prefix(text: &str) -> Option<(String, &str)> {
    let start = top_level_value(text, "arguments")?;
    let name_at = top_level_value(text, "name")?;
    let mut names = serde_json::Deserializer::from_str(&text[name_at..]).into_iter::<String>();
    let name = names.next()?.ok()?;
    Some((name, text[start..].trim_end_matches(|c: char| c == '}' || c.is_whitespace())))
}

/// A whole forced call, its arguments as the model wrote them.
pub fn constrained_call(text: &str) -> Option<ToolCall> {
    let v: Value = serde_json::from_str(text).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let start = top_level_value(text, "arguments")?;
    let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    stream.next()?.ok()?;
    Some(ToolCall { name, arguments: text[start..start + stream.byte_offset()].to_string() })
}

/// The byte offset of the value of the top-level object's `key` in `text` (a JSON object, whole
/// or begun), once the key and its `:` are there.
fn top_level_value(text: &str, key: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let mut strings = serde_json::Deserializer::from_str(&text[i..]).into_iter::<String>();
                let s = strings.next()?.ok()?;
                let end = i + strings.byte_offset();
                let after = text[end..].trim_start();
                if depth == 1 && s == key && after.starts_with(':') {
                    let value = &after[1..];
                    let lead = value.len() - value.trim_start().len();
                    let at = text.len() - value.len() + lead;
                    return (at < text.len()).then_some(at);
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
#[path = "tool_calls_tests.rs"]
mod tests;
