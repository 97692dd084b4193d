//! Structured output: at every step a grammar (a JSON schema, or any JSON object) says which
//! tokens may come next, and the others are masked out of the logits before sampling — so the
//! output parses by construction, without retries. The grammar engine is `llguidance`
//! (Microsoft's, the one vLLM and llama.cpp use), over a token trie built once per model from
//! the tokenizer's token bytes.

use std::sync::{Arc, Mutex};

use llguidance::api::TopLevelGrammar;
use llguidance::{Constraint, ParserFactory, TokenParser};
use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::error::{Result, TesseraError};
use crate::model::Model;

/// Limits which tokens may come next.
pub trait TokenConstraint: Send {
    /// Sets the logits of the tokens not allowed next to −∞; `false` when the grammar has
    /// ended (generation stops).
    fn mask(&mut self, logits: &mut [f32]) -> Result<bool>;
    /// Records the token drawn; `false` when the grammar has ended with it.
    fn commit(&mut self, token: u32) -> Result<bool>;
}

/// Makes a fresh [`TokenConstraint`] for each generation (a request's `response_format`).
pub trait ConstraintFactory: Send + Sync + std::fmt::Debug {
    fn start(&self) -> Result<Box<dyn TokenConstraint>>;
}

/// What the output must be.
#[derive(Debug, Clone)]
pub enum OutputFormat {
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// JSON valid under this schema (OpenAI's `json_schema`).
    JsonSchema(serde_json::Value),
    /// Text in this grammar (llguidance's Lark syntax; a tool-call grammar,
    /// [`tessera_text::tool_grammar`]).
    Lark(String),
}

/// The per-model part: the token trie and llguidance's parser factory (built once, shared).
pub(crate) struct Grammars {
    factory: Arc<ParserFactory>,
}

impl Grammars {
    pub(crate) fn new(model: &Model) -> Result<Self> {
        let bytes = model.tokenizer().token_bytes()?;
        // The logits may be longer than the tokenizer's vocabulary (padded embeddings).
        let n = bytes.len().max(model.config().vocab_size);
        let words: Vec<Vec<u8>> = (0..n)
            .map(|i| match bytes.get(i).cloned().flatten() {
                Some(b) if !b.is_empty() => b,
                // Special and unused ids: marked as specials, which no grammar text matches.
                _ => {
                    let mut name = format!(".<[{i}]>").into_bytes();
                    name[0] = TokTrie::SPECIAL_TOKEN_MARKER;
                    name
                }
            })
            .collect();
        let eos = model.eos_ids().first().copied().unwrap_or(0);
        let trie = TokTrie::from(&TokRxInfo::new(n as u32, eos), &words);
        let env: TokEnv = Arc::new(Env { trie, tokenizer: model.tokenizer().clone() });
        let factory = ParserFactory::new_simple(&env).map_err(grammar_err)?;
        Ok(Self { factory: Arc::new(factory) })
    }

    /// A factory of constraints for `format`, checked (a bad schema is an error here).
    pub(crate) fn constraint(&self, format: &OutputFormat) -> Result<Arc<dyn ConstraintFactory>> {
        let grammar = match format {
            OutputFormat::JsonObject => TopLevelGrammar::from_json_schema(serde_json::json!({"type": "object"})),
            OutputFormat::JsonSchema(s) => TopLevelGrammar::from_json_schema(s.clone()),
            OutputFormat::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
        };
        // Build the first parser now, so an unsupported schema fails the request, not its first
        // step; the first generation then uses it.
        let first = self.factory.create_parser(grammar.clone()).map_err(grammar_err)?;
        Ok(Arc::new(JsonFactory { factory: self.factory.clone(), grammar, first: Mutex::new(Some(first)) }))
    }
}

fn grammar_err(e: impl std::fmt::Display) -> TesseraError {
    TesseraError::InvalidInput(format!("response format: {e}"))
}

struct Env {
    trie: TokTrie,
    tokenizer: tessera_text::Tokenizer,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        // Grammar literals are text; the greedy trie split is the fallback for bytes that are not.
        match std::str::from_utf8(s).ok().and_then(|t| self.tokenizer.encode(t, false).ok()) {
            Some(ids) => ids,
            None => self.trie.greedy_tokenize(s),
        }
    }
}

struct JsonFactory {
    factory: Arc<ParserFactory>,
    grammar: TopLevelGrammar,
    /// The parser built when the format was checked, for the first generation.
    first: Mutex<Option<TokenParser>>,
}

impl std::fmt::Debug for JsonFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonFactory")
    }
}

impl ConstraintFactory for JsonFactory {
    fn start(&self) -> Result<Box<dyn TokenConstraint>> {
        let built = self.first.lock().ok().and_then(|mut f| f.take());
        let parser = match built {
            Some(p) => p,
            None => self.factory.create_parser(self.grammar.clone()).map_err(grammar_err)?,
        };
        Ok(Box::new(Guided(Constraint::new(parser))))
    }
}

struct Guided(Constraint);

impl TokenConstraint for Guided {
    fn mask(&mut self, logits: &mut [f32]) -> Result<bool> {
        let step = self.0.compute_mask().map_err(grammar_err)?;
        if step.is_stop() {
            return Ok(false);
        }
        if let Some(mask) = &step.sample_mask {
            for (i, l) in logits.iter_mut().enumerate() {
                if !mask.is_allowed(i as TokenId) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        Ok(true)
    }

    fn commit(&mut self, token: u32) -> Result<bool> {
        let res = self.0.commit_token(Some(token)).map_err(grammar_err)?;
        Ok(!res.stop)
    }
}

impl Model {
    /// Constraints that make the output follow `format` (the token trie is built on first use,
    /// then shared). A schema llguidance cannot compile is an error naming the problem.
    pub fn output_constraint(&self, format: &OutputFormat) -> Result<Arc<dyn ConstraintFactory>> {
        let grammars = self.grammars.get_or_init(|| Grammars::new(self).map(Arc::new).map_err(|e| e.to_string()));
        match grammars {
            Ok(g) => g.constraint(format),
            Err(e) => Err(TesseraError::InvalidInput(format!("structured output is unavailable for this model: {e}"))),
        }
    }
}
