//! Reasoning ("thinking") in a model's output: the text between the thinking markers its chat
//! template shows (`<think>…</think>`: Qwen3, QwQ, DeepSeek-R1, SmolLM3; `<|channel>…<channel|>`:
//! Gemma 4) is the reasoning, the rest the answer — split as a stream, piece by piece, so a
//! streamed response sends each to its own field and its pieces join to the same split as the
//! whole text's (llama.cpp's `--reasoning-format deepseek`, vLLM's `deepseek_r1` / `qwen3`
//! reasoning parsers).
//!
//! Whitespace at the reasoning's two ends, and at the start of the answer after the closing
//! marker, is dropped (the templates put newlines there). A template that opens the thinking
//! block in the generation prompt (DeepSeek-R1, Qwen3-Thinking-2507) starts the output inside
//! it ([`ReasoningSplitter::new`]'s `prompt`).

/// The markers around reasoning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkingMarkers {
    pub open: String,
    pub close: String,
    /// Text that follows `open` and is not reasoning (Gemma 4's channel name, `thought`).
    pub label: String,
}

impl ThinkingMarkers {
    /// The markers a chat template shows, from its text; `None` for a template without them.
    pub fn detect(template: &str) -> Option<Self> {
        if template.contains("<think>") && template.contains("</think>") {
            Some(Self { open: "<think>".into(), close: "</think>".into(), label: String::new() })
        } else if template.contains("<|channel>") && template.contains("<channel|>") {
            Some(Self { open: "<|channel>".into(), close: "<channel|>".into(), label: "thought".into() })
        } else {
            None
        }
    }

    /// Whether `prompt` (a rendered prompt) ends by opening the thinking block, so that the
    /// output starts inside it.
    pub fn opened_by(&self, prompt: &str) -> bool {
        let tail = prompt.trim_end();
        tail.ends_with(&self.open) || tail.ends_with(&format!("{}{}", self.open, self.label))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: the output may open a thinking block.
    Start,
    /// Inside the thinking block; `started` once reasoning text (not whitespace) came.
    Thinking { started: bool },
    /// After it (or with none): the answer; `started` once answer text came after a close.
    Answer { trim: bool },
}

/// Splits an output, piece by piece, into reasoning and answer.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    markers: ThinkingMarkers,
    state: State,
    /// Text not yet given out (a possible marker, whitespace that may end the reasoning).
    pending: String,
}

/// What one piece adds to each side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub content: String,
}

impl ReasoningSplitter {
    /// A splitter for an output that follows `prompt` (the rendered prompt: when it ends with
    /// the opening marker, the output starts inside the thinking block).
    pub fn new(markers: ThinkingMarkers, prompt: &str) -> Self {
        let state = if markers.opened_by(prompt) { State::Thinking { started: false } } else { State::Start };
        Self { markers, state, pending: String::new() }
    }

    /// Adds `piece`; returns the reasoning and answer text it completes.
    pub fn push(&mut self, piece: &str) -> Split {
        self.pending.push_str(piece);
        let mut out = Split::default();
        loop {
            match self.state {
                State::Start => {
                    let text = self.pending.trim_start();
                    if let Some(rest) = text.strip_prefix(self.markers.open.as_str()) {
                        let rest = rest.strip_prefix(self.markers.label.as_str()).unwrap_or(rest);
                        self.pending = rest.to_string();
                        self.state = State::Thinking { started: false };
                    } else if self.markers.open.starts_with(text) {
                        return out;
                    } else {
                        self.state = State::Answer { trim: false };
                    }
                }
                State::Thinking { started } => {
                    if let Some(i) = self.pending.find(&self.markers.close) {
                        let reasoning = self.pending[..i].trim_end();
                        out.reasoning.push_str(if started { reasoning } else { reasoning.trim_start() });
                        self.pending = self.pending[i + self.markers.close.len()..].to_string();
                        self.state = State::Answer { trim: true };
                        continue;
                    }
                    // Hold back what may begin the closing marker, and trailing whitespace.
                    let held = (1..self.markers.close.len())
                        .filter(|&k| self.markers.close.is_char_boundary(k))
                        .filter(|&k| self.pending.ends_with(&self.markers.close[..k]))
                        .max()
                        .unwrap_or(0);
                    let ready = self.pending[..self.pending.len() - held].trim_end();
                    let ready = if started { ready } else { ready.trim_start() };
                    if !ready.is_empty() {
                        let end = self.pending.find(ready).unwrap_or(0) + ready.len();
                        out.reasoning.push_str(ready);
                        self.pending.drain(..end);
                        self.state = State::Thinking { started: true };
                    }
                    return out;
                }
                State::Answer { trim } => {
                    let text = if trim { self.pending.trim_start() } else { &self.pending };
                    if !text.is_empty() {
                        out.content.push_str(text);
                        self.state = State::Answer { trim: false };
                    }
                    self.pending.clear();
                    return out;
                }
            }
        }
    }

    /// The rest at the end of the output: an unfinished thinking block is all reasoning, an
    /// output that only began like the opening marker is answer.
    pub fn finish(&mut self) -> Split {
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Start => Split { reasoning: String::new(), content: rest },
            State::Thinking { started } => {
                let r = rest.trim_end();
                Split { reasoning: if started { r } else { r.trim_start() }.to_string(), content: String::new() }
            }
            State::Answer { .. } => Split::default(),
        }
    }

    /// The whole output split at once (the same split as its pieces give).
    pub fn split(markers: ThinkingMarkers, prompt: &str, text: &str) -> Split {
        let mut s = Self::new(markers, prompt);
        let mut a = s.push(text);
        let b = s.finish();
        a.reasoning.push_str(&b.reasoning);
        a.content.push_str(&b.content);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3() -> ThinkingMarkers {
        ThinkingMarkers::detect("{{ '<think>\\n\\n</think>\\n\\n' }}").unwrap()
    }

    fn split(m: ThinkingMarkers, prompt: &str, text: &str) -> (String, String) {
        let s = ReasoningSplitter::split(m, prompt, text);
        (s.reasoning, s.content)
    }

    #[test]
    fn qwen3_thinking_then_answer() {
        let out = "<think>\nThe user greets me.\n\nI greet back.\n</think>\n\nHello!";
        assert_eq!(split(qwen3(), "", out), ("The user greets me.\n\nI greet back.".into(), "Hello!".into()));
        // No thinking block (enable_thinking false: the template wrote an empty one).
        assert_eq!(split(qwen3(), "", "Hello!"), ("".into(), "Hello!".into()));
        // Cut off while thinking: all reasoning.
        assert_eq!(split(qwen3(), "", "<think>\nhmm, let me"), ("hmm, let me".into(), "".into()));
        // The prompt opened the block (DeepSeek-R1 style): only the closing marker comes.
        assert_eq!(
            split(qwen3(), "<|im_start|>assistant\n<think>\n", "plan\n</think>\n\nDone."),
            ("plan".into(), "Done.".into())
        );
        // Text that only starts like the marker is answer.
        assert_eq!(split(qwen3(), "", "<thin"), ("".into(), "<thin".into()));
        assert_eq!(split(qwen3(), "", "<b>bold</b>"), ("".into(), "<b>bold</b>".into()));
    }

    #[test]
    fn gemma4_channel_markers() {
        let m = ThinkingMarkers::detect("{{ '<|channel>thought\\n<channel|>' }}").unwrap();
        assert_eq!(m.label, "thought");
        assert_eq!(
            split(m.clone(), "", "<|channel>thought\nCount: 3.<channel|>Three."),
            ("Count: 3.".into(), "Three.".into())
        );
        assert_eq!(ThinkingMarkers::detect("<|im_start|>{{ m.content }}"), None);
    }

    #[test]
    fn every_cut_into_pieces_gives_the_same_split() {
        let out = "  <think>\n a < b </thin </think>\n\n x </think> y ";
        let whole = ReasoningSplitter::split(qwen3(), "", out);
        assert_eq!((whole.reasoning.as_str(), whole.content.as_str()), ("a < b </thin", "x </think> y "));
        let chars: Vec<usize> = out.char_indices().map(|(i, _)| i).chain([out.len()]).collect();
        for &a in &chars {
            for &b in chars.iter().filter(|&&b| b >= a) {
                let mut s = ReasoningSplitter::new(qwen3(), "");
                let (mut r, mut c) = (String::new(), String::new());
                for piece in [&out[..a], &out[a..b], &out[b..]] {
                    let p = s.push(piece);
                    r.push_str(&p.reasoning);
                    c.push_str(&p.content);
                }
                let p = s.finish();
                r.push_str(&p.reasoning);
                c.push_str(&p.content);
                assert_eq!(
                    (r.as_str(), c.as_str()),
                    (whole.reasoning.as_str(), whole.content.as_str()),
                    "cut at {a}, {b}"
                );
            }
        }
    }
}
