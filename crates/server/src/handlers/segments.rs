//! An answer's deltas (the chat pipeline's, OpenAI's delta objects: `reasoning_content`,
//! `content`, `tool_calls`) as a sequence of segments — reasoning, text, each call — that open,
//! grow and close in order: what Anthropic's content blocks and the Responses API's output items
//! both are. A delta of another kind than the open segment's closes it and opens the next.
//! Each API turns the [`Step`]s into its events and the [`Segments::items`] into its whole body.

use serde_json::Value;

use super::chat_output::ChatOutput;

/// What a segment holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Reasoning,
    Text,
    /// A call (its index among the answer's calls, id and name); its text is the arguments' JSON.
    Call {
        index: u64,
        id: String,
        name: String,
    },
}

/// A change to the segments: `index` counts them from 0.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Start { index: usize, kind: Kind },
    Delta { index: usize, kind: Kind, text: String },
    Stop { index: usize, kind: Kind },
}

#[derive(Debug, Default)]
pub struct Segments {
    /// Every segment so far with its text; the last is open while `open`.
    items: Vec<(Kind, String)>,
    open: bool,
}

impl Segments {
    /// The steps `deltas` bring.
    pub fn push(&mut self, deltas: &[Value]) -> Vec<Step> {
        let mut steps = Vec::new();
        for d in deltas {
            if let Some(t) = d.get("reasoning_content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.grow(Kind::Reasoning, t, &mut steps);
            }
            if let Some(t) = d.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                self.grow(Kind::Text, t, &mut steps);
            }
            for call in d.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    let name = call.pointer("/function/name").and_then(Value::as_str).unwrap_or("").to_string();
                    self.start(Kind::Call { index, id: id.to_string(), name }, &mut steps);
                }
                let fragment = call.pointer("/function/arguments").and_then(Value::as_str).unwrap_or("");
                let same = matches!(self.current(), Some(Kind::Call { index: i, .. }) if *i == index);
                if !fragment.is_empty() && same {
                    self.append(fragment, &mut steps);
                }
            }
        }
        steps
    }

    /// The steps of the last `deltas`, and the open segment's stop.
    pub fn finish(&mut self, deltas: &[Value]) -> Vec<Step> {
        let mut steps = self.push(deltas);
        self.close(&mut steps);
        steps
    }

    /// Every segment with its whole text.
    pub fn items(&self) -> &[(Kind, String)] {
        &self.items
    }

    fn current(&self) -> Option<&Kind> {
        self.items.last().filter(|_| self.open).map(|(k, _)| k)
    }

    /// Appends `text` to a segment of `kind` (the open one, or a new one).
    fn grow(&mut self, kind: Kind, text: &str, steps: &mut Vec<Step>) {
        if self.current() != Some(&kind) {
            self.start(kind, steps);
        }
        self.append(text, steps);
    }

    fn start(&mut self, kind: Kind, steps: &mut Vec<Step>) {
        self.close(steps);
        steps.push(Step::Start { index: self.items.len(), kind: kind.clone() });
        self.items.push((kind, String::new()));
        self.open = true;
    }

    fn append(&mut self, text: &str, steps: &mut Vec<Step>) {
        let index = self.items.len() - 1;
        if let Some((kind, all)) = self.items.last_mut() {
            all.push_str(text);
            steps.push(Step::Delta { index, kind: kind.clone(), text: text.to_string() });
        }
    }

    fn close(&mut self, steps: &mut Vec<Step>) {
        if let Some(kind) = self.current().cloned() {
            steps.push(Step::Stop { index: self.items.len() - 1, kind });
            self.open = false;
        }
    }
}

/// A streamed answer's text, through the chat output into segments.
#[derive(Debug)]
pub struct Segmented {
    output: ChatOutput,
    pub segments: Segments,
}

impl Segmented {
    pub fn new(output: ChatOutput) -> Self {
        Self { output, segments: Segments::default() }
    }

    /// The steps a piece of the answer brings.
    pub fn push(&mut self, piece: &str) -> Vec<Step> {
        let deltas = self.output.push(piece);
        self.segments.push(&deltas)
    }

    /// The last steps, and whether the answer made calls.
    pub fn finish(&mut self) -> (Vec<Step>, bool) {
        let (deltas, called) = self.output.finish();
        (self.segments.finish(&deltas), called)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deltas_become_segments_in_order() {
        let mut s = Segments::default();
        let mut steps = s.push(&[json!({"reasoning_content": "Hm"}), json!({"reasoning_content": "m."})]);
        steps.extend(s.push(&[json!({"content": "Sure."})]));
        steps.extend(s.finish(&[
            json!({"tool_calls": [{"index": 0, "id": "c0", "type": "function", "function": {"name": "f", "arguments": ""}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\": "}}]}),
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            json!({"tool_calls": [{"index": 1, "id": "c1", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}),
        ]));
        let f = Kind::Call { index: 0, id: "c0".into(), name: "f".into() };
        let g = Kind::Call { index: 1, id: "c1".into(), name: "g".into() };
        assert_eq!(
            s.items(),
            [
                (Kind::Reasoning, "Hmm.".to_string()),
                (Kind::Text, "Sure.".into()),
                (f.clone(), "{\"a\": 1}".into()),
                (g.clone(), "{}".into())
            ]
        );
        assert_eq!(
            steps[..3],
            [
                Step::Start { index: 0, kind: Kind::Reasoning },
                Step::Delta { index: 0, kind: Kind::Reasoning, text: "Hm".into() },
                Step::Delta { index: 0, kind: Kind::Reasoning, text: "m.".into() },
            ]
        );
        assert_eq!(steps[3], Step::Stop { index: 0, kind: Kind::Reasoning });
        assert_eq!(steps.last(), Some(&Step::Stop { index: 3, kind: g }));
        let starts = steps.iter().filter(|s| matches!(s, Step::Start { .. })).count();
        let stops = steps.iter().filter(|s| matches!(s, Step::Stop { .. })).count();
        assert_eq!((starts, stops), (4, 4));
        assert!(Segments::default().finish(&[]).is_empty());
    }
}
