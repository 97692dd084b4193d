//! Chat templates: the Jinja templates shipped with checkpoints, rendered by minijinja in the
//! environment transformers uses (`trim_blocks`, `lstrip_blocks`, `raise_exception`,
//! `strftime_now`, Python string methods), so a conversation renders to exactly the string
//! `tokenizer.apply_chat_template(..., tokenize=False)` produces.
//!
//! transformers' `{% generation %}…{% endgeneration %}` tag (it marks assistant tokens for
//! training masks) has no meaning at inference; it is removed before parsing and its body kept.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use minijinja::{Environment, Error as JinjaError, ErrorKind};

pub use crate::conversation::{Content, ContentPart, Conversation, Message};
use crate::error::{Result, TextError};

/// What a render passes to the template besides the messages, as transformers'
/// `apply_chat_template(messages, tools=…, **kwargs)` does.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// The tools (OpenAI's `[{"type": "function", "function": {…}}]`); absent, the template sees
    /// `tools` as none, as transformers passes it.
    pub tools: Option<serde_json::Value>,
    /// More variables (a request's `chat_template_kwargs`: `enable_thinking`, …). They may
    /// override `bos_token` / `eos_token`, not `messages`, `tools` or `add_generation_prompt`.
    pub kwargs: serde_json::Map<String, serde_json::Value>,
    /// The last message is continued, not answered (an assistant prefill: transformers'
    /// `continue_final_message=True`): rendered without the generation prompt and cut where its
    /// text ends, so the output goes on from it.
    pub continue_final: bool,
}

/// Marks the end of the continued message's text (transformers' tag, and its way of finding it).
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

pub struct ChatTemplate {
    env: Arc<Environment<'static>>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    origin: String,
    /// The template's text (after [`strip_generation_tags`]): what tool-call and reasoning
    /// formats are detected from.
    source: String,
    /// Set once a render ran out of its memory budget: later renders are refused at once
    /// (each such render leaves its stopped thread behind).
    exhausted: AtomicBool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("origin", &self.origin).finish()
    }
}

const NAME: &str = "chat";

impl ChatTemplate {
    /// Parses a template; `bos_token`/`eos_token` are visible to it as variables.
    pub fn new(source: &str, bos_token: Option<String>, eos_token: Option<String>) -> Result<Self> {
        Self::with_origin(source, bos_token, eos_token, "template".into())
    }

    /// [`new`](Self::new) with `origin` naming where the template came from in errors.
    pub fn with_origin(
        source: &str,
        bos_token: Option<String>,
        eos_token: Option<String>,
        origin: String,
    ) -> Result<Self> {
        let mut env = Environment::new();
        // Templates come with downloaded checkpoints: their work is bounded (a real chat
        // template takes a few thousand steps; nested loops over `range(100000)` would run
        // for hours).
        env.set_fuel(Some(TEMPLATE_STEPS));
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, JinjaError> {
            Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |fmt: String| -> String { strftime_now(&fmt) });
        // Python's `json.dumps` spacing and no HTML escaping, as transformers' `tojson`.
        env.add_filter("tojson", crate::pyjson::tojson);
        let source = strip_generation_tags(source);
        env.add_template_owned(NAME, source.clone())
            .map_err(|e| TextError::Template { origin: origin.clone(), reason: describe(&e) })?;
        Ok(Self { env: Arc::new(env), bos_token, eos_token, origin, source, exhausted: AtomicBool::new(false) })
    }

    /// The template's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template reads `tools` (renders tool definitions).
    pub fn supports_tools(&self) -> bool {
        self.source.contains("tools")
    }

    /// Finds a model folder's template: `chat_template.jinja`, then `chat_template.json`, then
    /// `tokenizer_config.json`'s `chat_template` (a string, or named templates of which
    /// `default` is used). BOS/EOS strings come from `tokenizer_config.json`.
    pub fn from_model_dir(dir: &Path) -> Result<Option<Self>> {
        let config_path = dir.join("tokenizer_config.json");
        let config = read_json_opt(&config_path)?;
        let token = |key: &str| -> Option<String> {
            let v = config.as_ref()?.get(key)?;
            v.as_str().map(String::from).or_else(|| v.get("content")?.as_str().map(String::from))
        };
        let (bos, eos) = (token("bos_token"), token("eos_token"));
        let jinja = dir.join("chat_template.jinja");
        if jinja.exists() {
            let src = std::fs::read_to_string(&jinja)
                .map_err(|e| TextError::Io { path: jinja.clone(), reason: e.to_string() })?;
            return Self::with_origin(&src, bos, eos, jinja.display().to_string()).map(Some);
        }
        let json_path = dir.join("chat_template.json");
        if let Some(json) = read_json_opt(&json_path)? {
            let src = json.get("chat_template").and_then(|v| v.as_str()).ok_or_else(|| TextError::Template {
                origin: json_path.display().to_string(),
                reason: "no `chat_template` string".into(),
            })?;
            return Self::with_origin(src, bos, eos, json_path.display().to_string()).map(Some);
        }
        let Some(config) = &config else { return Ok(None) };
        let origin = format!("{} chat_template", config_path.display());
        match config.get("chat_template") {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(src)) => Self::with_origin(src, bos, eos, origin).map(Some),
            Some(serde_json::Value::Array(named)) => {
                let default = named.iter().find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"));
                let src = default.and_then(|t| t.get("template")).and_then(|t| t.as_str()).ok_or_else(|| {
                    TextError::Template { origin: origin.clone(), reason: "no template named `default`".into() }
                })?;
                Self::with_origin(src, bos, eos, origin).map(Some)
            }
            Some(_) => {
                Err(TextError::Template { origin, reason: "`chat_template` is neither a string nor a list".into() })
            }
        }
    }

    /// Renders `messages`; `add_generation_prompt` appends the assistant turn's opening.
    ///
    /// The template's work is bounded in steps ([`TEMPLATE_STEPS`]), output
    /// ([`MAX_RENDERED_BYTES`]) and memory ([`TEMPLATE_MEMORY`]: a template can build strings
    /// that double at every step, which no step count catches). The memory bound holds where
    /// the binary installs `tessera_kernels::BudgetedAlloc` (the render then runs on a thread
    /// of its own); elsewhere the template renders on the calling thread without it.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, &RenderOptions::default())
    }

    /// [`render`](Self::render) with tools and more template variables.
    pub fn render_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        opts: &RenderOptions,
    ) -> Result<String> {
        let exhausted = || TextError::Template {
            origin: self.origin.clone(),
            reason: format!(
                "rendering took more than {} MiB of memory (a template that builds ever larger strings or lists)",
                TEMPLATE_MEMORY >> 20
            ),
        };
        if self.exhausted.load(Ordering::Relaxed) {
            return Err(exhausted());
        }
        let env = self.env.clone();
        let mut vars = serde_json::Map::new();
        vars.insert("bos_token".into(), self.bos_token.clone().unwrap_or_default().into());
        vars.insert("eos_token".into(), self.eos_token.clone().unwrap_or_default().into());
        vars.extend(opts.kwargs.clone());
        let tagged;
        let (messages, add_generation_prompt) = match opts.continue_final {
            false => (messages, add_generation_prompt),
            true => {
                tagged = tag_final(messages).ok_or_else(|| TextError::Template {
                    origin: self.origin.clone(),
                    reason: "the final message has no text to continue".into(),
                })?;
                (&tagged[..], false)
            }
        };
        let fixed = minijinja::context! {
            messages => messages,
            tools => opts.tools.clone(),
            add_generation_prompt => add_generation_prompt,
        };
        let ctx = minijinja::context! { ..fixed, ..minijinja::Value::from_serialize(&vars) };
        let origin = self.origin.clone();
        match tessera_kernels::with_memory_budget(TEMPLATE_MEMORY, move || render_in(&env, ctx, &origin)) {
            Ok(Ok(out)) if opts.continue_final => self.cut_at_tag(out),
            Ok(out) => out,
            Err(tessera_kernels::BudgetError::Exhausted) => {
                self.exhausted.store(true, Ordering::Relaxed);
                Err(exhausted())
            }
            Err(tessera_kernels::BudgetError::Failed) => Err(TextError::Template {
                origin: self.origin.clone(),
                reason: "rendering failed (its thread could not start or panicked)".into(),
            }),
        }
    }
}

impl ChatTemplate {
    /// The render of a tagged conversation cut where the final message's text ends: at the tag
    /// when the template kept it whole, else before it with the trailing whitespace the
    /// template trimmed.
    fn cut_at_tag(&self, out: String) -> Result<String> {
        let at = out.rfind(CONTINUE_TAG.trim_end()).ok_or_else(|| TextError::Template {
            origin: self.origin.clone(),
            reason: "the final message to continue does not appear in the rendered chat (the template drops it)".into(),
        })?;
        Ok(match out[at..].starts_with(CONTINUE_TAG) {
            true => out[..at].to_string(),
            false => out[..at].trim_end().to_string(),
        })
    }
}

/// `messages` with the tag after the final message's text (its last text part); `None` when it
/// has no text.
fn tag_final(messages: &[Message]) -> Option<Vec<Message>> {
    let (last, rest) = messages.split_last()?;
    let content = match &last.content {
        Content::Text(t) => Content::Text(format!("{t}{CONTINUE_TAG}")),
        Content::Parts(parts) => {
            let i = parts.iter().rposition(|p| matches!(p, ContentPart::Text { .. }))?;
            let mut parts = parts.clone();
            if let ContentPart::Text { text } = &mut parts[i] {
                text.push_str(CONTINUE_TAG);
            }
            Content::Parts(parts)
        }
        Content::Null => return None,
    };
    let mut out = rest.to_vec();
    out.push(last.with_content(content));
    Some(out)
}

/// Renders the template `NAME` of `env` with `ctx`, at most [`MAX_RENDERED_BYTES`] of output
/// and [`TEMPLATE_STEPS`] steps.
fn render_in(env: &Environment<'static>, ctx: minijinja::Value, origin: &str) -> Result<String> {
    let template =
        env.get_template(NAME).map_err(|e| TextError::Template { origin: origin.to_string(), reason: describe(&e) })?;
    let mut out = Limited { bytes: Vec::new(), max: MAX_RENDERED_BYTES };
    match template.render_captured_to(ctx, &mut out) {
        Ok(_) => String::from_utf8(out.bytes).map_err(|e| TextError::Template {
            origin: origin.to_string(),
            reason: format!("the template wrote invalid UTF-8: {e}"),
        }),
        Err(e) => {
            let reason = match e.kind() {
                ErrorKind::OutOfFuel => {
                    format!("rendering ran past {TEMPLATE_STEPS} steps (a loop far longer than any chat needs)")
                }
                ErrorKind::WriteFailure if out.bytes.len() >= out.max => {
                    format!("the rendered prompt passed {} MiB", MAX_RENDERED_BYTES >> 20)
                }
                _ => describe(&e),
            };
            Err(TextError::Template { origin: origin.to_string(), reason })
        }
    }
}

/// Heap a template may hold while it renders (far past any real chat template's needs: the
/// rendered prompt itself is at most [`MAX_RENDERED_BYTES`]).
pub const TEMPLATE_MEMORY: usize = 256 << 20;

/// Steps (minijinja's fuel: one per instruction) a template may take to render a chat.
pub const TEMPLATE_STEPS: u64 = 20_000_000;

/// Bytes a rendered prompt may take (far past any model's context).
pub const MAX_RENDERED_BYTES: usize = 16 << 20;

/// A writer that refuses to grow past `max` bytes.
struct Limited {
    bytes: Vec<u8>,
    max: usize,
}

impl std::io::Write for Limited {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.max {
            self.bytes.extend_from_slice(&buf[..self.max - self.bytes.len()]);
            return Err(std::io::Error::other("the rendered prompt is too long"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn describe(e: &JinjaError) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        s.push_str(&format!(": {inner}"));
        src = inner.source();
    }
    s
}

fn read_json_opt(path: &Path) -> Result<Option<serde_json::Value>> {
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|e| TextError::Io { path: path.into(), reason: e.to_string() })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| TextError::Io { path: path.into(), reason: format!("invalid JSON: {e}") })
}

/// Removes `{% generation %}` / `{% endgeneration %}` tags (with their whitespace control).
pub fn strip_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        // The tag's end after its opening `{%` (in `{%}` they would share the `%`).
        let Some(len) = rest[start + 2..].find("%}").map(|n| n + 2) else { break };
        let tag = &rest[start..start + len + 2];
        let inner = tag[2..tag.len() - 2].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        if inner == "generation" || inner == "endgeneration" {
            let mut before = &rest[..start];
            if tag.starts_with("{%-") {
                before = before.trim_end();
            }
            out.push_str(before);
            rest = &rest[start + len + 2..];
            if tag.ends_with("-%}") {
                rest = rest.trim_start();
            }
        } else {
            out.push_str(&rest[..start + len + 2]);
            rest = &rest[start + len + 2..];
        }
    }
    out.push_str(rest);
    out
}

/// Python's `strftime` for the current UTC date, for the codes chat templates use.
fn strftime_now(fmt: &str) -> String {
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let month = MONTHS[(m - 1) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y % 100)),
            Some('B') => out.push_str(month),
            Some('b') => out.push_str(&month[..3]),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

    #[test]
    fn hostile_templates_stop_at_the_step_and_size_limits() {
        let loops = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
        let start = std::time::Instant::now();
        let err = ChatTemplate::new(loops, None, None).unwrap().render(&[], false).unwrap_err().to_string();
        assert!(err.contains("steps"), "{err}");
        assert!(start.elapsed().as_secs() < 30, "the step limit took {:?}", start.elapsed());
        let big = "{% for i in range(1000) %}{{ 'x' * 100000 }}{% endfor %}";
        let err = ChatTemplate::new(big, None, None).unwrap().render(&[], false).unwrap_err().to_string();
        assert!(err.contains("16 MiB"), "{err}");
    }

    #[test]
    fn renders_chatml_with_generation_prompt() {
        let t = ChatTemplate::new(CHATML, None, None).unwrap();
        let s = t.render(&[Message::text("user", "hi")], true).unwrap();
        assert_eq!(s, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    }

    #[test]
    fn generation_tags_are_accepted() {
        let src = "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}[{{ m.content }}]{% endif %}{% endfor %}";
        let t = ChatTemplate::new(src, None, None).unwrap();
        let s = t.render(&[Message::text("user", "q"), Message::text("assistant", "a")], false).unwrap();
        assert_eq!(s, "[q]a");
        assert_eq!(strip_generation_tags("x {%- generation -%}  y{% endgeneration %}"), "xy");
        // Found by fuzzing (fuzz/fuzz_targets/chat_template.rs): `{%}` sliced the tag backwards.
        assert_eq!(strip_generation_tags("a {%} b"), "a {%} b");
        assert_eq!(strip_generation_tags("{%}generation%}x"), "{%}generation%}x");
        assert!(ChatTemplate::new("{%}", None, None).is_err());
    }

    #[test]
    fn python_string_methods_and_raise_exception() {
        let t = ChatTemplate::new("{{ messages[0].content.strip().upper() }}", None, None).unwrap();
        assert_eq!(t.render(&[Message::text("user", "  hi ")], false).unwrap(), "HI");
        let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}", None, None).unwrap();
        let err = t.render(&[], false).unwrap_err().to_string();
        assert!(err.contains("roles must alternate"), "{err}");
    }

    #[test]
    fn multimodal_parts_reach_the_template() {
        let src = "{% for m in messages %}{% for p in m.content %}{% if p.type == 'image' %}<image>{% else %}{{ p.text }}{% endif %}{% endfor %}{% endfor %}";
        let t = ChatTemplate::new(src, None, None).unwrap();
        let msg = Message::parts("user", vec![ContentPart::Image, ContentPart::Text { text: "what?".into() }]);
        assert_eq!(t.render(&[msg], false).unwrap(), "<image>what?");
    }

    #[test]
    fn named_templates_in_tokenizer_config_pick_default() {
        let dir = std::env::temp_dir().join(format!("tessera-chat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("tokenizer_config.json"),
            r#"{"bos_token": {"content": "<s>"}, "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D"}]}"#,
        )
        .unwrap();
        let t = ChatTemplate::from_model_dir(&dir).unwrap().expect("template");
        assert_eq!(t.render(&[], false).unwrap(), "<s>D");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_templates_name_their_origin() {
        let err = ChatTemplate::new("{% for %}", None, None).unwrap_err().to_string();
        assert!(err.contains("chat template"), "{err}");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_000), (2024, 10, 4));
    }
}
