//! Running the decoder: the masks of every layer (causal, sliding windows, PaliGemma's prefix,
//! Gemma 3's image blocks) and the RoPE positions (consecutive, or Qwen2-VL's M-RoPE grid
//! positions) derived from a prompt, then the decoder over its embeddings — or over plain token
//! ids after a cache.

use std::ops::{Bound, Range, RangeBounds};

use candle_core::Tensor;
use tessera_decoder::{AttentionMask, Blocks, KvCache, LayerInputs, MaskPlan, Trace};

use crate::config::PromptStyle;
use crate::error::{Result, TesseraError};
use crate::model::Model;
use crate::prompt::{Chunk, ImageInputs, Prompt};

/// Positions per prefill block by default (see [`Model::prefill_blocks`],
/// [`crate::LoadOptions::prefill_block`]): enough rows for the GEMM kernels to read each weight
/// once for many tokens, and no more than the engine runs between two decode steps, so a long
/// prompt shares it with running streams. llama.cpp's default batch (`n_ubatch`) too. On the CPU
/// (SmolLM2 Q4_1, 2 threads, `tessera-bench --prefill-sweep`) 1024 prompt tokens ran at
/// 1822 / 1914 / 2034 / 2042 tok/s in blocks of 128 / 256 / 512 / 1024.
pub const PREFILL_BLOCK: usize = 512;

impl Model {
    /// Runs `ids` after what `cache` holds; returns f32 logits `(vocab,)` of the last position.
    pub fn forward_last(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        self.last_logits(&self.forward_ids(ids, (1, ids.len()), cache, &mut Trace::default())?)
    }

    /// The decoder over token ids, `b` rows of `t` one after the other, after what `cache`
    /// holds (one row with a cache; several from an empty one) → final-normed hidden states
    /// `(b, t, hidden)`: [`forward_embeds`](Self::forward_embeds) of their embeddings, with the
    /// per-layer inputs of models that take them.
    pub fn forward_ids(
        &self,
        ids: &[u32],
        rows: (usize, usize),
        cache: &mut KvCache,
        trace: &mut Trace,
    ) -> Result<Tensor> {
        let embeds = self.embed_id_rows(ids, rows)?;
        let per_layer = self.per_layer_inputs(ids, rows, &[], &embeds)?;
        let t = embeds.dim(1)?;
        let positions = self.decoder.consecutive_positions(Self::next_position(cache)?, t, embeds.device())?;
        self.run_decoder(
            &embeds,
            cache,
            trace,
            &[],
            &positions,
            LayerInputs { additions: &[], per_layer: per_layer.as_ref() },
        )
    }

    /// The per-layer inputs `(b, t, layers, dim)` of `ids` (`rows` = `(b, t)`) whose input
    /// embeddings are `embeds`, for a model that takes them; the positions in `images`
    /// (relative to the first) look up the pad id's row instead of their placeholder's.
    pub(crate) fn per_layer_inputs(
        &self,
        ids: &[u32],
        (b, t): (usize, usize),
        images: &[Range<usize>],
        embeds: &Tensor,
    ) -> Result<Option<Tensor>> {
        let (Some(table), Some(p)) = (&self.per_layer, self.config.per_layer_inputs) else { return Ok(None) };
        let ids: Vec<u32> = self
            .embedded_ids(ids)
            .into_iter()
            .enumerate()
            .map(|(i, id)| if images.iter().any(|r| r.contains(&(i % t.max(1)))) { p.pad_id } else { id })
            .collect();
        let ids = Tensor::from_vec(ids, (b, t), embeds.device())?;
        Ok(Some(table.forward(&ids, embeds)?))
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
        let embeds = self.embed_ids(ids)?;
        // The per-layer projection, like every matmul of the step, takes each row as it is alone.
        let per_layer = tessera_decoder::row_invariant(|| self.per_layer_inputs(ids, (1, ids.len()), &[], &embeds))?;
        let hidden = self.decoder.forward_rows_with_inputs(&embeds, caches, &masks, &positions, per_layer.as_ref())?;
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
                    (None, Some(_), None) if self.config.bidirectional_in_sliding_layers_only => AttentionMask::Causal,
                    (None, Some(blocks), window) => AttentionMask::CausalBlocks { window, blocks: blocks.clone() },
                    (None, None, Some(window)) => AttentionMask::SlidingWindow { window },
                    (None, None, None) => AttentionMask::Causal,
                })
                .collect(),
        ))
    }

    /// The decoder over embeddings `(1, t, hidden)` after what `cache` holds → final-normed
    /// hidden states, at consecutive positions; `image_runs`: the rows holding images (a
    /// prompt's [`Prompt::image_runs`](crate::Prompt::image_runs)), for the masks that treat
    /// images apart (empty for text). A model that takes per-layer inputs needs the token ids
    /// ([`forward_ids`](Self::forward_ids), [`forward`](Self::forward)).
    pub fn forward_embeds(
        &self,
        embeds: &Tensor,
        image_runs: &[Range<usize>],
        cache: &mut KvCache,
        trace: &mut Trace,
    ) -> Result<Tensor> {
        let t = embeds.dim(1)?;
        if self.per_layer.is_some() {
            return Err(TesseraError::InvalidInput(
                "this model's decoder takes per-layer inputs of the token ids: run it on ids, not embeddings".into(),
            ));
        }
        let positions = self.decoder.consecutive_positions(Self::next_position(cache)?, t, embeds.device())?;
        self.run_decoder(embeds, cache, trace, image_runs, &positions, LayerInputs::default())
    }

    /// Where `prompt`'s prefill blocks end (ascending; the last is its length). Generation runs a
    /// prompt block by block ([`forward`](Self::forward)). A block ends
    /// after each end-of-turn token (an EOS id: a chat's turns), or after the model's block size
    /// ([`PREFILL_BLOCK`] unless [`LoadOptions::prefill_block`](crate::LoadOptions) set one)
    /// positions, never inside an image that attends both ways (Gemma 3); a prefix-LM prompt
    /// (PaliGemma) is one block. The ends depend on the prompt's content alone, so a prompt
    /// computes bit for bit the same whether it runs alone, between other requests' decode
    /// steps, or after a cached prefix that ends on one of its block ends — the only places
    /// where the engine reuses a prefix. A chat's next turn shares the blocks of the turns
    /// before it, so it continues after them.
    pub fn prefill_blocks(&self, prompt: &Prompt) -> Vec<usize> {
        self.prefill_blocks_of(prompt, self.prefill_block)
    }

    /// [`prefill_blocks`](Self::prefill_blocks) with blocks of at most `block` positions (at
    /// least 1) instead of the model's: what another block size would cut (a bench's sweep).
    pub fn prefill_blocks_of(&self, prompt: &Prompt, block: usize) -> Vec<usize> {
        let block = block.max(1);
        let len = prompt.len();
        if self.config.prompt == PromptStyle::PrefixLm {
            return vec![len];
        }
        let turn_ends: Vec<usize> = prompt
            .text_positions()
            .into_iter()
            .filter(|(_, id)| self.eos_ids.contains(id))
            .map(|(at, _)| at + 1)
            .collect();
        let runs = if self.config.bidirectional_images { prompt.image_runs() } else { Vec::new() };
        let mut ends = Vec::new();
        let mut at = 0;
        while at < len {
            let mut end = at.saturating_add(block).min(len);
            if let Some(&turn) = turn_ends.iter().find(|&&e| e > at && e < end) {
                end = turn;
            }
            if let Some(r) = runs.iter().find(|r| r.start < end && end < r.end) {
                end = if r.start > at { r.start } else { r.end };
            }
            ends.push(end);
            at = end;
        }
        ends
    }

    /// The model's forward: positions `range` of `prompt` (`..` for all of it; one of its
    /// [`prefill_blocks`](Self::prefill_blocks), or several together) after `cache`, which must
    /// hold exactly the positions before `range` of this same prompt, with the prompt's masks
    /// (image blocks) and RoPE positions (M-RoPE grid positions for Qwen2-VL's images). The
    /// images with tokens in `range` are taken from `images` or encoded into it. Returns the
    /// hidden states of `range`; once the cache holds the whole prompt it knows where the next
    /// token's position is.
    pub fn forward(
        &self,
        prompt: &Prompt,
        range: impl RangeBounds<usize>,
        cache: &mut KvCache,
        images: &mut ImageInputs,
        trace: &mut Trace,
    ) -> Result<Tensor> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => prompt.len(),
        };
        let range = start..end;
        if cache.len() != range.start || range.start >= range.end || range.end > prompt.len() {
            return Err(TesseraError::InvalidInput(format!(
                "cannot run prompt positions {range:?} of {} after a cache of {} positions",
                prompt.len(),
                cache.len()
            )));
        }
        let (embeds, additions) = self.inputs(prompt, range.clone(), images)?;
        let (positions, delta) = self.positions_from(prompt, 0)?;
        let positions = positions.narrow(positions.rank() - 1, range.start, range.len())?;
        let runs: Vec<Range<usize>> = prompt
            .image_runs()
            .into_iter()
            .filter(|r| r.start < range.end && range.start < r.end)
            .map(|r| r.start.max(range.start) - range.start..r.end.min(range.end) - range.start)
            .collect();
        // (Only a decoder with per-layer inputs reads the ids: the native model's prompt places
        // its images before ids it does not hold.)
        let per_layer = match (self.per_layer.is_some(), prompt.ids.get(range.clone())) {
            (false, _) => None,
            (true, Some(ids)) => self.per_layer_inputs(ids, (1, ids.len()), &runs, &embeds)?,
            (true, None) => {
                return Err(TesseraError::InvalidInput(format!(
                    "positions {range:?} of a prompt of {} ids: per-layer inputs need every position's id",
                    prompt.ids.len()
                )))
            }
        };
        let hidden = self.run_decoder(
            &embeds,
            cache,
            trace,
            &runs,
            &positions,
            LayerInputs { additions: &additions, per_layer: per_layer.as_ref() },
        )?;
        cache.set_position_delta(delta);
        Ok(hidden)
    }

    /// Runs what `cache` does not yet hold of `prompt` (it holds none of it, or the positions
    /// up to one of its block ends) block by block, as generation does; returns the hidden
    /// states of the last block. `trace` records the last block only (its last row sees every
    /// position). Each image is taken from `images` or encoded into it once, however many blocks
    /// its tokens span.
    pub fn prefill(
        &self,
        prompt: &Prompt,
        cache: &mut KvCache,
        images: &mut ImageInputs,
        trace: &mut Trace,
    ) -> Result<Tensor> {
        let ends = self.prefill_blocks(prompt);
        let mut hidden = None;
        let cached = cache.len();
        for (i, &end) in ends.iter().enumerate().filter(|&(_, &end)| end > cached) {
            let range = cache.len()..end;
            hidden = Some(match i + 1 == ends.len() {
                true => self.forward(prompt, range, cache, images, trace)?,
                false => self.forward(prompt, range, cache, images, &mut Trace::default())?,
            });
        }
        hidden.ok_or_else(|| TesseraError::InvalidInput("empty input: no tokens to run".into()))
    }

    /// The RoPE positions of `prompt`'s rows after `cache`: consecutive, or for M-RoPE models
    /// `(3, t)` — text on one line, each image's tokens at (start, start + row, start + column)
    /// with the text after it continuing at start + max(rows, columns) (transformers'
    /// `get_rope_index`). Also the next position minus the positions cached afterwards.
    pub fn prompt_positions(&self, prompt: &Prompt, cache: &KvCache) -> Result<(Tensor, i64)> {
        let (positions, delta) = self.positions_from(prompt, cache.len() as i64 + cache.position_delta())?;
        Ok((positions, delta + cache.position_delta()))
    }

    /// [`prompt_positions`](Self::prompt_positions) with the first row at RoPE position
    /// `start`; the delta is the next position minus (`start` + the prompt's length).
    fn positions_from(&self, prompt: &Prompt, start: i64) -> Result<(Tensor, i64)> {
        let device = &self.device;
        if self.config.decoder.rope.mrope.is_none() {
            let first = usize::try_from(start).unwrap_or(0);
            return Ok((self.decoder.consecutive_positions(first, prompt.len(), device)?, 0));
        }
        let vision = self.images.as_ref();
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
                    let (rows, cols) = match vision.map(|v| v.position_grid(img)).transpose()?.flatten() {
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
        let delta = max + 1 - (start + t as i64);
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
        inputs: LayerInputs<'_>,
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
        Ok(self.decoder.forward_with_inputs(embeds, cache, &masks, positions, inputs, trace)?)
    }
}
