//! A cap on reasoning (Anthropic's `thinking.budget_tokens`): the tokens inside the thinking
//! block are counted, and once `budget` of them have come without the block closing, the
//! closing marker's tokens are the only ones allowed, one after the other — the model then
//! answers after them, as it would after closing the block itself. The block is the one the
//! prompt opened (a template that opens it in the generation prompt) or the first one the output
//! opens. After it, another constraint (a JSON schema for the answer) takes over where given.
//!
//! The markers are found in the output's text (each token decoded), so a marker the model
//! writes in other tokens than the forced ones still counts.

use std::sync::Arc;

use crate::error::{Result, TesseraError};
use crate::model::Model;
use crate::structured::{ConstraintFactory, TokenConstraint};
use tessera_text::{ThinkingMarkers, Tokenizer};

#[derive(Debug)]
struct Budget {
    tokenizer: Tokenizer,
    markers: ThinkingMarkers,
    /// The closing marker's tokens, forced at the budget.
    close: Vec<u32>,
    budget: usize,
    /// The prompt opened the block: the output starts inside it.
    inside: bool,
    then: Option<Arc<dyn ConstraintFactory>>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// No block yet.
    Before,
    /// `n` tokens inside the block; `forced` of the closing marker's tokens forced so far.
    Thinking { n: usize, forced: usize },
    /// The block closed.
    After,
}

struct Capped {
    spec: Arc<Budget>,
    phase: Phase,
    /// The output's last characters, where a marker is looked for.
    tail: String,
    then: Option<Box<dyn TokenConstraint>>,
}

#[derive(Debug)]
struct Factory(Arc<Budget>);

impl ConstraintFactory for Factory {
    fn start(&self) -> Result<Box<dyn TokenConstraint>> {
        let spec = self.0.clone();
        let phase = if spec.inside { Phase::Thinking { n: 0, forced: 0 } } else { Phase::Before };
        Ok(Box::new(Capped { spec, phase, tail: String::new(), then: None }))
    }
}

impl Capped {
    /// Adds the token's text to the tail; whether it now ends with `marker`.
    fn ends_with(&mut self, token: u32, marker: &str) -> Result<bool> {
        self.tail.push_str(&self.spec.tokenizer.decode(&[token], false)?);
        let keep = self.spec.markers.open.len().max(self.spec.markers.close.len());
        if self.tail.len() > 4 * keep {
            let cut = (self.tail.len() - keep..).find(|&i| self.tail.is_char_boundary(i)).unwrap_or(0);
            self.tail.drain(..cut);
        }
        Ok(self.tail.ends_with(marker))
    }

    fn close(&mut self) -> Result<()> {
        self.phase = Phase::After;
        self.tail.clear();
        self.then = self.spec.then.as_ref().map(|f| f.start()).transpose()?;
        Ok(())
    }
}

impl TokenConstraint for Capped {
    fn mask(&mut self, logits: &mut [f32]) -> Result<bool> {
        match self.phase {
            Phase::Thinking { n, forced } if n >= self.spec.budget => {
                let Some(&only) = self.spec.close.get(forced) else { return Ok(true) };
                for (i, l) in logits.iter_mut().enumerate() {
                    if i != only as usize {
                        *l = f32::NEG_INFINITY;
                    }
                }
                Ok(true)
            }
            Phase::After => match self.then.as_mut() {
                Some(c) => c.mask(logits),
                None => Ok(true),
            },
            _ => Ok(true),
        }
    }

    fn commit(&mut self, token: u32) -> Result<bool> {
        match self.phase {
            Phase::Before => {
                let open = self.spec.markers.open.clone();
                if self.ends_with(token, &open)? {
                    self.phase = Phase::Thinking { n: 0, forced: 0 };
                    self.tail.clear();
                }
            }
            Phase::Thinking { n, forced } => {
                let close = self.spec.markers.close.clone();
                let forcing = n >= self.spec.budget;
                let forced = forced + usize::from(forcing);
                if self.ends_with(token, &close)? || (forcing && forced >= self.spec.close.len()) {
                    self.close()?;
                } else {
                    self.phase = Phase::Thinking { n: n + 1, forced };
                }
            }
            Phase::After => {
                if let Some(c) = self.then.as_mut() {
                    return c.commit(token);
                }
            }
        }
        Ok(true)
    }
}

impl Model {
    /// A constraint that caps the reasoning between `markers` at `budget` tokens (the closing
    /// marker forced then); `inside`: the prompt opened the block. `then` constrains the answer
    /// after it.
    pub fn thinking_budget(
        &self,
        markers: &ThinkingMarkers,
        budget: usize,
        inside: bool,
        then: Option<Arc<dyn ConstraintFactory>>,
    ) -> Result<Arc<dyn ConstraintFactory>> {
        let close = self.tokenizer().encode(&markers.close, false)?;
        if close.is_empty() {
            return Err(TesseraError::InvalidInput(format!(
                "the thinking block's closing marker {:?} has no tokens",
                markers.close
            )));
        }
        let tokenizer = self.tokenizer().clone();
        Ok(Arc::new(Factory(Arc::new(Budget { tokenizer, markers: markers.clone(), close, budget, inside, then }))))
    }
}
