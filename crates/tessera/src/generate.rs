//! The generation loop: prefill the prompt once, then decode one token at a time through the
//! KV cache, streaming text as it becomes complete and stopping at an EOS id, a stop string,
//! the token limit or the context's end.

use std::time::Instant;

use serde::Serialize;

use crate::error::{Result, TesseraError};
use crate::model::Model;
use candle_core::Tensor;
use tessera_decoder::{KvCache, Trace};

use crate::prompt::Prompt;
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

#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    /// Seconds spent on the prompt (the first forward, which also yields the first token).
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
    /// With `capture_attention`: one row per generated token over the positions before it
    /// (images first, then prompt, then earlier generated tokens).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<Vec<Vec<f32>>>,
}

/// Top-`k` `(id, logprob)` of one row of raw logits, best first.
pub fn top_logprobs(logits: &[f32], k: usize) -> Vec<TokenLogprob> {
    let lp = log_softmax(logits);
    let mut idx: Vec<usize> = (0..lp.len()).collect();
    let k = k.min(idx.len());
    idx.select_nth_unstable_by(k.saturating_sub(1), |&a, &b| lp[b].total_cmp(&lp[a]));
    idx.truncate(k);
    idx.sort_by(|&a, &b| lp[b].total_cmp(&lp[a]));
    idx.into_iter().map(|i| TokenLogprob { id: i as u32, logprob: lp[i] }).collect()
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
        if prompt.ids().is_empty() {
            return Err(TesseraError::InvalidInput("the prompt is empty (no tokens)".into()));
        }
        let image_positions = prompt.image_tokens();
        let positions = prompt.len();
        if positions >= self.max_positions() {
            let extra = positions - prompt.ids().len();
            return Err(TesseraError::InvalidInput(format!(
                "the prompt has {} tokens{} but the model's context is {} tokens",
                prompt.ids().len(),
                if extra > 0 { format!(" (+ {extra} image tokens)") } else { String::new() },
                self.max_positions()
            )));
        }
        let mut sampler = Sampler::new(params.sampling.clone())?;
        let max_stop_len = params.stop_strings.iter().map(String::len).max().unwrap_or(0);
        let mut cache = self.new_cache();
        let mut history = prompt.ids().to_vec();
        let mut generated: Vec<u32> = Vec::new();
        let mut logprobs = params.logprobs.map(|_| Vec::new());
        // The text so far, built piece by piece by the streaming detokenizer.
        let mut stream = self.tokenizer().decode_stream(true);
        let mut text = String::new();
        let mut emitted = 0usize;
        let mut finish = FinishReason::Length;
        let mut timings = Timings::default();

        let mut attention = params.capture_attention.then(Vec::new);
        let start = Instant::now();
        let embeds = self.prompt_embeddings(prompt)?;
        let (mut logits, mut attn_row) = self.step(&embeds, &mut cache, params.capture_attention, Some(prompt))?;
        timings.prompt_s = start.elapsed().as_secs_f64();
        let decode_start = Instant::now();

        while generated.len() < params.max_new_tokens {
            let row: Vec<f32> = logits.to_vec1()?;
            if row.iter().any(|x| !x.is_finite()) {
                // Cheap on the way (the logits only); located on failure.
                let at = self.locate_non_finite(prompt, &generated)?;
                return Err(TesseraError::InvalidInput(format!(
                    "non-finite logits (NaN or infinity) at generation step {} (position {}): the first non-finite \
                     values appear {at}; the weights or the input are broken",
                    generated.len(),
                    prompt.len() + generated.len()
                )));
            }
            if let (Some(k), Some(lp)) = (params.logprobs, logprobs.as_mut()) {
                lp.push(top_logprobs(&row, k));
            }
            let next = sampler.sample(&row, &history)?;
            history.push(next);
            if !params.ignore_eos && self.eos_ids().contains(&next) {
                finish = FinishReason::Eos;
                break;
            }
            generated.push(next);
            if let (Some(rows), Some(r)) = (attention.as_mut(), attn_row.take()) {
                rows.push(r);
            }
            if let Some(piece) = stream.step(next)? {
                // A stop string can only end in the new piece: search from where it could start.
                let from = text.len().saturating_sub(max_stop_len.saturating_sub(1));
                text.push_str(&piece);
                let from = (0..=from).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
                if let Some(cut) = find_stop(&text[from..], &params.stop_strings) {
                    text.truncate(from + cut);
                    finish = FinishReason::StopString;
                    break;
                }
            }
            // Hold back an incomplete UTF-8 character and a possible stop-string prefix.
            let ready = stable_len(&text, &params.stop_strings);
            if ready > emitted {
                on_text(&text[emitted..ready]);
                emitted = ready;
            }
            if generated.len() >= params.max_new_tokens {
                break;
            }
            // The sequence (prompt + generated) may not outgrow the context.
            if positions + generated.len() >= self.max_positions() {
                finish = FinishReason::ContextFull;
                break;
            }
            (logits, attn_row) = self.step(&self.embed_ids(&[next])?, &mut cache, params.capture_attention, None)?;
        }
        if finish != FinishReason::StopString {
            // What the stream still holds back (a character cut off by the length limit) is
            // part of the answer too: the text is that of one decode of every generated id.
            let full = self.tokenizer().decode(&generated, true)?;
            if full.starts_with(&text) {
                text = full;
            }
        }
        if text.len() > emitted {
            on_text(&text[emitted..]);
        }
        timings.generate_s = decode_start.elapsed().as_secs_f64();
        timings.prompt_tokens_per_s = positions as f64 / timings.prompt_s.max(1e-9);
        let decoded_steps = generated.len().saturating_sub(1).max(1);
        timings.generated_tokens_per_s =
            if generated.len() > 1 { decoded_steps as f64 / timings.generate_s.max(1e-9) } else { 0.0 };
        Ok(GenerationOutput {
            prompt_tokens: prompt.ids().to_vec(),
            image_tokens: image_positions,
            prompt_positions: prompt.len(),
            generated_tokens: generated,
            text,
            finish_reason: finish,
            timings,
            logprobs,
            attention,
        })
    }

    /// One forward over `embeds`: the last position's f32 logits `(vocab,)` and, when `capture`,
    /// that position's attention over every cached position, averaged over layers and heads.
    /// Where non-finite values first appear when `prompt` and then `generated` run: "in the
    /// input embeddings", "after decoder layer N", or "in the LM head".
    fn locate_non_finite(&self, prompt: &Prompt, generated: &[u32]) -> Result<String> {
        let finite = |t: &Tensor| -> Result<bool> {
            let t = t.to_dtype(candle_core::DType::F32)?;
            Ok(t.flatten_all()?.to_vec1::<f32>()?.iter().all(|x| x.is_finite()))
        };
        let mut cache = self.new_cache();
        let mut traces = Vec::new();
        let mut trace = Trace { capture_hidden: true, ..Default::default() };
        self.forward_prompt(prompt, &mut cache, &mut trace)?;
        traces.push(trace.hidden_states);
        if !generated.is_empty() {
            let mut trace = Trace { capture_hidden: true, ..Default::default() };
            self.forward_hidden(&self.embed_ids(generated)?, &mut cache, &mut trace)?;
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

    /// `prompt`: the prompt whose embeddings these are (its masks and positions); `None` when
    /// decoding.
    fn step(
        &self,
        embeds: &Tensor,
        cache: &mut KvCache,
        capture: bool,
        prompt: Option<&Prompt>,
    ) -> Result<(Tensor, Option<Vec<f32>>)> {
        let layers = if capture { (0..self.config().decoder.num_hidden_layers).collect() } else { Vec::new() };
        let mut trace = Trace { attention_layers: layers, ..Default::default() };
        let hidden = match prompt {
            Some(p) => self.forward_prompt(p, cache, &mut trace)?,
            None => self.forward_hidden(embeds, cache, &mut trace)?,
        };
        let t = hidden.dim(1)?;
        let logits = self.logits(&hidden.narrow(1, t - 1, 1)?)?.squeeze(0)?;
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
