//! The generation loop: prefill the prompt once, then decode one token at a time through the
//! KV cache, streaming text as it becomes complete and stopping at an EOS id, a stop string,
//! the token limit or the context's end.

use std::time::Instant;

use serde::Serialize;

use crate::error::{Result, TesseraError};
use crate::model::Model;
use candle_core::Tensor;
use tessera_decoder::{KvCache, Trace};

use crate::prompt::{ImageInputs, Prompt};
use crate::sampling::{log_softmax, Sampler, SamplingParams};

#[derive(Debug, Clone)]
pub struct GenerateParams {
    pub max_new_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation stops when the text contains any of these (the stop string is not returned).
    pub stop_strings: Vec<String>,
    /// Keep going past EOS ids (fixed-length runs, benchmarks).
    pub ignore_eos: bool,
    /// Record the top-K log-probabilities at every generated position.
    pub logprobs: Option<usize>,
    /// Record, for every generated token, the attention of the query that produced it over all
    /// earlier positions, averaged over layers and heads.
    pub capture_attention: bool,
    /// Structured output: only tokens the grammar allows are sampled
    /// ([`Model::output_constraint`]); generation ends where the grammar does.
    pub constraint: Option<std::sync::Arc<dyn crate::structured::ConstraintFactory>>,
    /// Special tokens whose text stays in the output (the others are skipped): markers that
    /// tool-call and reasoning parsers read ([`tessera_text::tool_calls::MARKERS`]).
    pub keep_tokens: Vec<u32>,
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self {
            max_new_tokens: 256,
            sampling: SamplingParams::default(),
            stop_strings: Vec::new(),
            ignore_eos: false,
            logprobs: None,
            capture_attention: false,
            constraint: None,
            keep_tokens: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An EOS token was generated.
    Eos,
    /// A stop string appeared.
    StopString,
    /// `max_new_tokens` was reached.
    Length,
    /// The model's context is full.
    ContextFull,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
}

/// A generated token with its log-probability and the most likely tokens at its step (what a
/// stream with `logprobs` sends as the tokens come).
#[derive(Debug, Clone, Serialize)]
pub struct SampledToken {
    pub id: u32,
    pub logprob: f32,
    pub top: Vec<TokenLogprob>,
}

impl GenerationOutput {
    /// The generated tokens with their log-probabilities (empty without `logprobs`).
    pub fn sampled_tokens(&self) -> Vec<SampledToken> {
        sampled_tokens(&self.generated_tokens, self.logprobs.as_deref(), self.sampled_logprobs.as_deref())
    }
}

fn sampled_tokens(ids: &[u32], tops: Option<&[Vec<TokenLogprob>]>, sampled: Option<&[f32]>) -> Vec<SampledToken> {
    let (Some(tops), Some(sampled)) = (tops, sampled) else { return Vec::new() };
    ids.iter()
        .zip(tops)
        .zip(sampled)
        .map(|((&id, top), &logprob)| SampledToken { id, logprob, top: top.clone() })
        .collect()
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    /// Seconds spent on the prompt: its images encoded and its forward, up to the first token's
    /// logits on the host (where the first token is sampled).
    pub prompt_s: f64,
    /// Seconds spent on every later token.
    pub generate_s: f64,
    pub prompt_tokens_per_s: f64,
    pub generated_tokens_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct GenerationOutput {
    pub prompt_tokens: Vec<u32>,
    /// Positions holding image tokens: before the prompt (native model) or among the prompt
    /// tokens, in place of the placeholders (Hugging Face families).
    pub image_tokens: usize,
    /// Positions the prompt takes in the sequence (text and image tokens, each once).
    pub prompt_positions: usize,
    pub generated_tokens: Vec<u32>,
    pub text: String,
    pub finish_reason: FinishReason,
    pub timings: Timings,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<Vec<TokenLogprob>>>,
    /// With `logprobs`: the log-probability of the token drawn at each step (which sampling
    /// may pick from outside the top K). Like `logprobs`, one more than `generated_tokens`
    /// when generation ended at an EOS id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampled_logprobs: Option<Vec<f32>>,
    /// With `capture_attention`: one row per generated token over the positions before it
    /// (images first, then prompt, then earlier generated tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<Vec<Vec<f32>>>,
}

impl Timings {
    /// The timings of `generated` tokens after a prompt of `prompt_positions`: the prompt's
    /// forward took `prompt_s` (it also gives the first token), the later tokens `generate_s`.
    pub fn new(prompt_positions: usize, generated: usize, prompt_s: f64, generate_s: f64) -> Self {
        Self {
            prompt_s,
            generate_s,
            prompt_tokens_per_s: prompt_positions as f64 / prompt_s.max(1e-9),
            generated_tokens_per_s: if generated > 1 { (generated - 1) as f64 / generate_s.max(1e-9) } else { 0.0 },
        }
    }
}

/// Top-`k` `(id, logprob)` of one row of raw logits, best first.
pub fn top_logprobs(logits: &[f32], k: usize) -> Vec<TokenLogprob> {
    top_of(&log_softmax(logits), k)
}

/// Top-`k` `(id, logprob)` of a row of log-probabilities, best first.
fn top_of(lp: &[f32], k: usize) -> Vec<TokenLogprob> {
    let mut idx: Vec<usize> = (0..lp.len()).collect();
    let k = k.min(idx.len());
    idx.select_nth_unstable_by(k.saturating_sub(1), |&a, &b| lp[b].total_cmp(&lp[a]));
    idx.truncate(k);
    idx.sort_by(|&a, &b| lp[b].total_cmp(&lp[a]));
    idx.into_iter().map(|i| TokenLogprob { id: i as u32, logprob: lp[i] }).collect()
}

/// One generation in progress, fed one row of logits at a time: sampling, EOS and stop rules,
/// limits, log-probabilities and streaming text. [`Model::generate`] runs one alone; a
/// server's scheduler ([`crate::engine`]) steps many together through batched decode steps.
pub struct Sequence<'m> {
    params: GenerateParams,
    sampler: Sampler,
    max_stop_len: usize,
    prompt_ids: Vec<u32>,
    prompt_positions: usize,
    image_positions: usize,
    max_positions: usize,
    history: Vec<u32>,
    generated: Vec<u32>,
    logprobs: Option<Vec<Vec<TokenLogprob>>>,
    sampled_logprobs: Vec<f32>,
    attention: Option<Vec<Vec<f32>>>,
    /// The text so far, built piece by piece by the streaming detokenizer.
    stream: tessera_text::TextStream<'m>,
    text: String,
    emitted: usize,
    finish: Option<FinishReason>,
    constraint: Option<Box<dyn crate::structured::TokenConstraint>>,
}

impl<'m> Sequence<'m> {
    /// Checks `prompt` against the model's context and `params`.
    pub fn new(model: &'m Model, prompt: &Prompt, params: &GenerateParams) -> Result<Self> {
        if prompt.ids().is_empty() {
            return Err(TesseraError::InvalidInput("the prompt is empty (no tokens)".into()));
        }
        let positions = prompt.len();
        if positions >= model.max_positions() {
            let extra = positions - prompt.ids().len();
            return Err(TesseraError::InvalidInput(format!(
                "the prompt has {} tokens{} but the model's context is {} tokens",
                prompt.ids().len(),
                if extra > 0 { format!(" (+ {extra} image tokens)") } else { String::new() },
                model.max_positions()
            )));
        }
        Ok(Self {
            params: params.clone(),
            sampler: Sampler::new(params.sampling.clone())?,
            max_stop_len: params.stop_strings.iter().map(String::len).max().unwrap_or(0),
            prompt_ids: prompt.ids().to_vec(),
            prompt_positions: positions,
            image_positions: prompt.image_tokens(),
            max_positions: model.max_positions(),
            history: prompt.ids().to_vec(),
            generated: Vec::new(),
            logprobs: params.logprobs.map(|_| Vec::new()),
            sampled_logprobs: Vec::new(),
            attention: params.capture_attention.then(Vec::new),
            stream: if params.keep_tokens.is_empty() {
                model.tokenizer().decode_stream(true)
            } else {
                model.tokenizer().decode_stream_keeping(&params.keep_tokens)
            },
            text: String::new(),
            emitted: 0,
            finish: None,
            constraint: params.constraint.as_ref().map(|c| c.start()).transpose()?,
        })
    }

    /// The tokens generated so far.
    pub fn generated(&self) -> &[u32] {
        &self.generated
    }

    /// The generated tokens from the `from`-th on with their log-probabilities (empty without
    /// `logprobs`).
    pub fn sampled_tokens(&self, from: usize) -> Vec<SampledToken> {
        let from = from.min(self.generated.len());
        let tops = self.logprobs.as_deref().map(|t| &t[from.min(t.len())..]);
        let sampled = &self.sampled_logprobs[from.min(self.sampled_logprobs.len())..];
        sampled_tokens(&self.generated[from..], tops, self.logprobs.as_ref().map(|_| sampled))
    }

    /// Why generation ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finish
    }

    /// Positions the sequence holds: the prompt's and the generated tokens'.
    pub fn positions(&self) -> usize {
        self.prompt_positions + self.generated.len()
    }

    /// Takes the logits of the next position (after the prompt, then after each token this
    /// returned); `attention`: that position's attention row when it was captured. Passes the
    /// newly completed text to `on_text` and returns the token to run next, or `None` when
    /// generation has ended (then [`finish`](Self::finish)). Non-finite logits are an error
    /// whose place `prompt` is re-run to find.
    pub fn accept(
        &mut self,
        model: &Model,
        prompt: &Prompt,
        row: &[f32],
        attention: Option<Vec<f32>>,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Option<u32>> {
        if self.finish.is_some() {
            return Ok(None);
        }
        if self.generated.len() >= self.params.max_new_tokens {
            self.finish = Some(FinishReason::Length);
            return Ok(None);
        }
        // Branch-free per 64 values (vectorised); the row is the vocabulary, every step.
        if row.chunks(64).any(|c| c.iter().fold(false, |bad, x| bad | !x.is_finite())) {
            // Cheap on the way (the logits only); located on failure.
            let at = model.locate_non_finite(prompt, &self.generated)?;
            return Err(TesseraError::InvalidInput(format!(
                "non-finite logits (NaN or infinity) at generation step {} (position {}): the first non-finite \
                 values appear {at}; the weights or the input are broken",
                self.generated.len(),
                self.positions()
            )));
        }
        let masked;
        let row = match self.constraint.as_mut() {
            Some(c) => {
                let mut r = row.to_vec();
                if !c.mask(&mut r)? {
                    // The grammar is complete: the output ends here, as at an EOS.
                    self.finish = Some(FinishReason::Eos);
                    self.flush(on_text);
                    return Ok(None);
                }
                masked = r;
                &masked[..]
            }
            None => row,
        };
        let log_probs = self.params.logprobs.map(|k| (k, log_softmax(row)));
        if let (Some((k, lp)), Some(tops)) = (&log_probs, self.logprobs.as_mut()) {
            tops.push(top_of(lp, *k));
        }
        let next = self.sampler.sample(row, &self.history, self.generated.len())?;
        let grammar_open = match (self.constraint.as_mut(), model.eos_ids().contains(&next)) {
            (Some(c), false) => c.commit(next)?,
            _ => true,
        };
        if let Some((_, lp)) = &log_probs {
            self.sampled_logprobs.push(lp.get(next as usize).copied().unwrap_or(f32::NEG_INFINITY));
        }
        self.history.push(next);
        if !self.params.ignore_eos && model.eos_ids().contains(&next) {
            self.finish = Some(FinishReason::Eos);
            return Ok(None);
        }
        self.generated.push(next);
        if let (Some(rows), Some(r)) = (self.attention.as_mut(), attention) {
            rows.push(r);
        }
        let stops = &self.params.stop_strings;
        if let Some(piece) = self.stream.step(next)? {
            // A stop string can only end in the new piece: search from where it could start.
            let from = self.text.len().saturating_sub(self.max_stop_len.saturating_sub(1));
            self.text.push_str(&piece);
            let from = (0..=from).rev().find(|&i| self.text.is_char_boundary(i)).unwrap_or(0);
            if let Some(cut) = find_stop(&self.text[from..], stops) {
                self.text.truncate(from + cut);
                self.finish = Some(FinishReason::StopString);
                self.flush(on_text);
                return Ok(None);
            }
        }
        // Hold back an incomplete UTF-8 character and a possible stop-string prefix.
        let ready = stable_len(&self.text, stops);
        if ready > self.emitted {
            on_text(&self.text[self.emitted..ready]);
            self.emitted = ready;
        }
        if !grammar_open {
            self.finish = Some(FinishReason::Eos);
        } else if self.generated.len() >= self.params.max_new_tokens {
            self.finish = Some(FinishReason::Length);
        } else if self.positions() >= self.max_positions {
            // The sequence (prompt + generated) may not outgrow the context.
            self.finish = Some(FinishReason::ContextFull);
        }
        Ok(if self.finish.is_some() { None } else { Some(next) })
    }

    /// Passes what the stream still holds back to `on_text`: a character cut off by the
    /// length limit is part of the answer too (the text is that of one decode of every
    /// generated id).
    fn flush(&mut self, on_text: &mut dyn FnMut(&str)) {
        if self.text.len() > self.emitted {
            on_text(&self.text[self.emitted..]);
            self.emitted = self.text.len();
        }
    }

    /// Ends the sequence (where it stands, if it had not ended): the rest of the text goes to
    /// `on_text`; `timings` are the caller's.
    pub fn finish(
        mut self,
        model: &Model,
        timings: Timings,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<GenerationOutput> {
        let finish = *self.finish.get_or_insert(FinishReason::Length);
        if finish != FinishReason::StopString {
            let full = model.tokenizer().decode(&self.generated, true)?;
            if full.starts_with(&self.text) {
                self.text = full;
            }
        }
        self.flush(on_text);
        Ok(GenerationOutput {
            prompt_tokens: self.prompt_ids,
            image_tokens: self.image_positions,
            prompt_positions: self.prompt_positions,
            generated_tokens: self.generated,
            text: self.text,
            finish_reason: finish,
            timings,
            sampled_logprobs: self.logprobs.is_some().then_some(self.sampled_logprobs),
            logprobs: self.logprobs,
            attention: self.attention,
        })
    }
}

impl Model {
    /// Generates from `prompt` (see [`Model::encode_prompt`], [`Model::encode_chat`],
    /// [`Model::prompt`]); `on_text` receives each newly completed piece of text.
    pub fn generate(
        &self,
        prompt: &Prompt,
        params: &GenerateParams,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<GenerationOutput> {
        let mut seq = Sequence::new(self, prompt, params)?;
        let mut cache = self.new_cache();
        // Buffers for the whole sequence at the prompt's first write: none regrows (a second
        // buffer beside the first, every position copied) at the first generated token.
        cache.reserve(prompt.len().saturating_add(params.max_new_tokens));
        let start = Instant::now();
        let (mut logits, mut attn_row) = self.step(StepInput::Prompt(prompt), &mut cache, params.capture_attention)?;
        let prompt_s = start.elapsed().as_secs_f64();
        let decode_start = Instant::now();
        while let Some(next) = seq.accept(self, prompt, &logits, attn_row.take(), on_text)? {
            (logits, attn_row) = self.step(StepInput::Token(next), &mut cache, params.capture_attention)?;
        }
        let timings = Timings::new(prompt.len(), seq.generated().len(), prompt_s, decode_start.elapsed().as_secs_f64());
        seq.finish(self, timings, on_text)
    }

    /// One forward over `embeds`: the last position's f32 logits `(vocab,)` and, when `capture`,
    /// that position's attention over every cached position, averaged over layers and heads.
    /// Where non-finite values first appear when `prompt` and then `generated` run: "in the
    /// input embeddings", "after decoder layer N", or "in the LM head".
    pub(crate) fn locate_non_finite(&self, prompt: &Prompt, generated: &[u32]) -> Result<String> {
        let finite = |t: &Tensor| -> Result<bool> {
            let t = t.to_dtype(candle_core::DType::F32)?;
            Ok(t.flatten_all()?.to_vec1::<f32>()?.iter().all(|x| x.is_finite()))
        };
        let mut cache = self.new_cache();
        let mut traces = Vec::new();
        let mut trace = Trace { capture_hidden: true, ..Default::default() };
        self.forward(prompt, .., &mut cache, &mut ImageInputs::default(), &mut trace)?;
        traces.push(trace.hidden_states);
        if !generated.is_empty() {
            let mut trace = Trace { capture_hidden: true, ..Default::default() };
            self.forward_ids(generated, (1, generated.len()), &mut cache, &mut trace)?;
            traces.push(trace.hidden_states);
        }
        let layers = traces.first().map(Vec::len).unwrap_or(0);
        for i in 0..layers {
            for states in &traces {
                if !finite(&states[i])? {
                    return Ok(if i == 0 {
                        "in the input embeddings".into()
                    } else {
                        format!("after decoder layer {}", i - 1)
                    });
                }
            }
        }
        Ok("in the final norm or the LM head (every layer's output is finite)".into())
    }

    /// `input`: the whole prompt (its images encoded once, its masks and positions) or the
    /// next token after what `cache` holds. The logits come back on the host: on a GPU the
    /// forward only queues its kernels, and the next token exists once they are read back, so
    /// a clock around the step measures the whole of it.
    pub(crate) fn step(
        &self,
        input: StepInput<'_>,
        cache: &mut KvCache,
        capture: bool,
    ) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
        let layers = if capture { (0..self.config().decoder.num_hidden_layers).collect() } else { Vec::new() };
        let mut trace = Trace { attention_layers: layers, ..Default::default() };
        let hidden = match input {
            StepInput::Prompt(p) => self.prefill(p, cache, &mut ImageInputs::default(), &mut trace)?,
            StepInput::Token(id) => self.forward_ids(&[id], (1, 1), cache, &mut trace)?,
        };
        let logits = self.last_logits(&hidden)?.to_vec1::<f32>()?;
        if !capture {
            return Ok((logits, None));
        }
        let mut sum: Option<Tensor> = None;
        let n = trace.attentions.len();
        for (_, w) in trace.attentions {
            // (1, heads, tq, tk) → the last query's row averaged over heads: (tk,)
            let tq = w.dim(2)?;
            let row = w.get(0)?.narrow(1, tq - 1, 1)?.squeeze(1)?.mean(0)?;
            sum = Some(match sum {
                Some(s) => (s + row)?,
                None => row,
            });
        }
        let row = match sum {
            Some(s) => (s / n as f64)?.to_vec1::<f32>()?,
            None => Vec::new(),
        };
        Ok((logits, Some(row)))
    }
}

/// What one forward of [`Model::step`] runs.
#[derive(Clone, Copy)]
pub(crate) enum StepInput<'a> {
    Prompt(&'a Prompt),
    Token(u32),
}

/// Byte offset where the first stop string starts, if any.
fn find_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops.iter().filter(|s| !s.is_empty()).filter_map(|s| text.find(s.as_str())).min()
}

/// How much of `text` can be shown now: not a trailing replacement character (a byte-level
/// token that ends mid-character) and not a suffix that may grow into a stop string.
fn stable_len(text: &str, stops: &[String]) -> usize {
    let mut end = text.len();
    if text.ends_with('\u{FFFD}') {
        end -= '\u{FFFD}'.len_utf8();
    }
    for stop in stops {
        for (i, _) in stop.char_indices().skip(1) {
            let prefix = &stop[..i];
            if text[..end].ends_with(prefix) {
                end = end.min(text[..end].len() - prefix.len());
            }
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_cut_and_hold_back() {
        let stops = vec!["\nUser:".to_string()];
        assert_eq!(find_stop("hi\nUser: x", &stops), Some(2));
        assert_eq!(stable_len("hello\nUs", &stops), 5);
        assert_eq!(stable_len("hello", &stops), 5);
        assert_eq!(stable_len("caf\u{FFFD}", &[]), 3);
    }

    #[test]
    fn top_logprobs_are_sorted_log_softmax() {
        let lp = top_logprobs(&[0.0, 2.0, 1.0], 2);
        assert_eq!(lp.iter().map(|t| t.id).collect::<Vec<_>>(), vec![1, 2]);
        let z = (1f64 + 2f64.exp() + 1f64.exp()).ln();
        assert!((lp[0].logprob as f64 - (2.0 - z)).abs() < 1e-6);
    }
}
