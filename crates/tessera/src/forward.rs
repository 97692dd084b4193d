//! Running the decoder: the masks of every layer (causal, sliding windows, PaliGemma's prefix,
//! Gemma 3's image blocks) and the RoPE positions (consecutive, or Qwen2-VL's M-RoPE grid
//! positions) derived from a prompt, then the decoder over its embeddings — or over plain token
//! ids after a cache.

use std::ops::Range;

use candle_core::Tensor;
use tessera_decoder::{AttentionMask, Blocks, KvCache, MaskPlan, Trace};

use crate::config::PromptStyle;
use crate::error::{Result, TesseraError};
use crate::model::Model;
use crate::prompt::{Chunk, ImageFeatures, Prompt};
use tessera_vision::RgbImage;

impl Model {
    /// Runs `ids` after what `cache` holds; returns f32 logits `(t, vocab)` for every new position.
    pub fn forward_all(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let hidden = self.forward_hidden(&self.embed_ids(ids)?, cache, &mut Trace::default())?;
        self.logits(&hidden)
    }

    /// Runs `ids` after what `cache` holds; returns f32 logits `(vocab,)` of the last position.
    pub fn forward_last(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        self.last_logits(&self.forward_hidden(&self.embed_ids(ids)?, cache, &mut Trace::default())?)
    }

    /// The f32 logits `(vocab,)` of the last row of hidden states `(1, t, hidden)`.
    pub fn last_logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let t = hidden.dim(1)?;
        Ok(self.logits(&hidden.narrow(1, t - 1, 1)?)?.squeeze(0)?)
    }

    /// The RoPE position of the next token after what `cache` holds (its length, moved by the
    /// M-RoPE delta a Qwen2-VL prompt leaves).
    fn next_position(cache: &KvCache) -> Result<usize> {
        usize::try_from(cache.len() as i64 + cache.position_delta())
            .map_err(|_| TesseraError::InvalidInput("the cache's RoPE position is negative".into()))
    }

    /// One decode step of several sequences: `ids[i]` is the next token of the sequence whose
    /// cache is `caches[i]` (each prefilled). Returns f32 logits `(n, vocab)`; row `i` is what
    /// [`forward_last`](Self::forward_last) gives that sequence alone, bit for bit (the
    /// kernels' row-invariant arithmetic), while each weight is read once for all rows.
    pub fn decode_rows(&self, ids: &[u32], caches: &mut [KvCache]) -> Result<Tensor> {
        if ids.is_empty() || ids.len() != caches.len() {
            return Err(TesseraError::InvalidInput(format!(
                "a batched step takes one token per cache: {} tokens, {} caches",
                ids.len(),
                caches.len()
            )));
        }
        let starts = caches
            .iter()
            .map(|c| {
                if c.is_empty() {
                    return Err(TesseraError::InvalidInput("a batched step continues prefilled caches only".into()));
                }
                if c.len() >= self.max_positions() {
                    return Err(TesseraError::InvalidInput(format!(
                        "{} positions exceed the model's context of {} tokens",
                        c.len() + 1,
                        self.max_positions()
                    )));
                }
                Self::next_position(c)
            })
            .collect::<Result<Vec<_>>>()?;
        let positions = self.decoder.row_positions(&starts, &self.device)?;
        let masks = self.mask_plan(1, 1, &[])?;
        let hidden = self.decoder.forward_rows(&self.embed_ids(ids)?, caches, &masks, &positions)?;
        tessera_decoder::row_invariant(|| self.logits(&hidden))
    }

    /// The mask of every layer for `t` new positions after `cached` ones; `image_runs`: the
    /// positions (relative to the first new one) of the images among them. A prefix-LM prompt
    /// (PaliGemma's image + text, the first forward) attends both ways; with
    /// `bidirectional_images` (Gemma 3) each image's tokens see each other both ways; the rest
    /// is causal, within each layer's sliding window.
    pub fn mask_plan(&self, cached: usize, t: usize, image_runs: &[Range<usize>]) -> Result<MaskPlan> {
        let prefix = (self.config.prompt == PromptStyle::PrefixLm && cached == 0).then_some(t);
        let blocks = match self.config.bidirectional_images && !image_runs.is_empty() {
            true => Some(Blocks::new(image_runs.iter().map(|r| cached + r.start..cached + r.end).collect())?),
            false => None,
        };
        Ok(MaskPlan::per_layer(
            self.config
                .layer_windows
                .iter()
                .map(|&window| match (prefix, &blocks, window) {
                    (Some(prefix_len), _, None) => AttentionMask::PrefixLm { prefix_len },
                    (Some(prefix_len), _, Some(window)) => AttentionMask::SlidingPrefixLm { prefix_len, window },
                    (None, Some(blocks), window) => AttentionMask::CausalBlocks { window, blocks: blocks.clone() },
                    (None, None, Some(window)) => AttentionMask::SlidingWindow { window },
                    (None, None, None) => AttentionMask::Causal,
                })
                .collect(),
        ))
    }

    /// The decoder over embeddings `(b, t, hidden)` → final-normed hidden states.
    pub fn forward_hidden(&self, embeds: &Tensor, cache: &mut KvCache, trace: &mut Trace) -> Result<Tensor> {
        self.forward_hidden_with_images(embeds, cache, trace, &[])
    }

    /// [`forward_hidden`](Self::forward_hidden) over rows of which `image_runs` hold images
    /// (a prompt's [`Prompt::image_runs`](crate::Prompt::image_runs)), for the masks that
    /// treat images apart.
    pub fn forward_hidden_with_images(
        &self,
        embeds: &Tensor,
        cache: &mut KvCache,
        trace: &mut Trace,
        image_runs: &[Range<usize>],
    ) -> Result<Tensor> {
        let t = embeds.dim(1)?;
        let positions = self.decoder.consecutive_positions(Self::next_position(cache)?, t, embeds.device())?;
        self.run_decoder(embeds, cache, trace, image_runs, &positions, &[])
    }

    /// The decoder over `prompt` (its embeddings, see [`Model::prompt_inputs`]) after what
    /// `cache` holds, with the prompt's masks (image blocks) and RoPE positions (M-RoPE
    /// grid positions for the images of Qwen2-VL); the cache then remembers where the next
    /// token's position is.
    pub fn forward_prompt(&self, prompt: &Prompt, cache: &mut KvCache, trace: &mut Trace) -> Result<Tensor> {
        self.forward_prompt_with(prompt, cache, trace, &mut |img| self.encode_image_with_deepstack(img))
    }

    /// [`forward_prompt`](Self::forward_prompt) with each image's features from `encode` (see
    /// [`Model::prompt_inputs_with`]).
    pub fn forward_prompt_with(
        &self,
        prompt: &Prompt,
        cache: &mut KvCache,
        trace: &mut Trace,
        encode: &mut dyn FnMut(&RgbImage) -> Result<ImageFeatures>,
    ) -> Result<Tensor> {
        let (embeds, additions) = self.prompt_inputs_with(prompt, encode)?;
        let (positions, delta) = self.prompt_positions(prompt, cache)?;
        let hidden = self.run_decoder(&embeds, cache, trace, &prompt.image_runs(), &positions, &additions)?;
        cache.set_position_delta(delta);
        Ok(hidden)
    }

    /// The RoPE positions of `prompt`'s rows after `cache`: consecutive, or for M-RoPE models
    /// `(3, t)` — text on one line, each image's tokens at (start, start + row, start + column)
    /// with the text after it continuing at start + max(rows, columns) (transformers'
    /// `get_rope_index`). Also the next position minus the positions cached afterwards.
    pub fn prompt_positions(&self, prompt: &Prompt, cache: &KvCache) -> Result<(Tensor, i64)> {
        let device = &self.device;
        let start = cache.len() as i64 + cache.position_delta();
        if self.config.decoder.rope.mrope.is_none() {
            let first = usize::try_from(start).unwrap_or(0);
            return Ok((self.decoder.consecutive_positions(first, prompt.len(), device)?, cache.position_delta()));
        }
        let vision = self.image_encoder.as_ref();
        let mut streams: [Vec<i64>; 3] = Default::default();
        let mut current = start;
        let mut image_start = std::collections::HashMap::new();
        for chunk in prompt.chunks() {
            match chunk {
                Chunk::Text(r) => {
                    for i in 0..r.len() as i64 {
                        streams.iter_mut().for_each(|s| s.push(current + i));
                    }
                    current += r.len() as i64;
                }
                Chunk::Image { image, tokens } => {
                    let img = &prompt.images()[*image];
                    let (rows, cols) = match vision.map(|v| v.mrope_grid(img)).transpose()?.flatten() {
                        Some(g) => g,
                        None => (1, tokens.end.max(1)),
                    };
                    let first = *image_start.entry(*image).or_insert(current);
                    for k in tokens.clone() {
                        streams[0].push(first);
                        streams[1].push(first + (k / cols) as i64);
                        streams[2].push(first + (k % cols) as i64);
                    }
                    if tokens.end >= rows * cols {
                        current = first + rows.max(cols) as i64;
                    }
                }
            }
        }
        let t = streams[0].len();
        let max = streams.iter().flatten().copied().max().unwrap_or(start - 1);
        let delta = max + 1 - (cache.len() + t) as i64;
        let flat: Vec<u32> = streams
            .iter()
            .flatten()
            .map(|&p| {
                u32::try_from(p).map_err(|_| TesseraError::InvalidInput(format!("RoPE position {p} out of range")))
            })
            .collect::<Result<_>>()?;
        Ok((Tensor::from_vec(flat, (3, t), device)?, delta))
    }

    fn run_decoder(
        &self,
        embeds: &Tensor,
        cache: &mut KvCache,
        trace: &mut Trace,
        image_runs: &[Range<usize>],
        positions: &Tensor,
        additions: &[Tensor],
    ) -> Result<Tensor> {
        let t = embeds.dim(1)?;
        if t == 0 {
            return Err(TesseraError::InvalidInput("empty input: no tokens to run".into()));
        }
        if cache.len() + t > self.max_positions() {
            return Err(TesseraError::InvalidInput(format!(
                "{} positions exceed the model's context of {} tokens",
                cache.len() + t,
                self.max_positions()
            )));
        }
        let masks = self.mask_plan(cache.len(), t, image_runs)?;
        Ok(self.decoder.forward_with_additions(embeds, cache, &masks, positions, additions, trace)?)
    }
}
