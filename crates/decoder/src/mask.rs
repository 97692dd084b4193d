//! Attention masks, stated by intent. One rule (`allows`) decides visibility; the additive
//! bias tensor the attention kernel uses is built from it.

use std::ops::Range;
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};

use crate::error::Result;

/// Which keys each query may attend to. Positions are absolute (0 = first token in the cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttentionMask {
    /// Each position sees itself and everything before it (decoder LMs).
    Causal,
    /// Every position sees every position (vision towers, encoders).
    Bidirectional,
    /// Positions `< prefix_len` see each other both ways; later positions are causal
    /// (PaliGemma: image + prompt bidirectional, generated text causal).
    PrefixLm { prefix_len: usize },
    /// Causal, limited to the last `window` positions (Mistral's sliding window).
    SlidingWindow { window: usize },
    /// [`PrefixLm`](Self::PrefixLm) in a sliding-window layer (PaliGemma 2): the prefix sees
    /// itself both ways, whatever its length; later positions see the last `window`.
    SlidingPrefixLm { prefix_len: usize, window: usize },
    /// Causal — limited to the last `window` positions when given — except that the positions
    /// of each block see each other both ways, within the window too (Gemma 3: each image's
    /// tokens attend to the whole image; later text and other images see it causally).
    CausalBlocks { window: Option<usize>, blocks: Blocks },
    /// Each position sees exactly the positions of its own block, both ways (Qwen2.5-VL's
    /// windowed vision attention); positions outside every block see nothing.
    BlockDiagonal { blocks: Blocks },
}

/// Disjoint position ranges, in order (the image runs of a prompt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks(Arc<[Range<usize>]>);

impl Blocks {
    /// `ranges` sorted by start; empty and overlapping ranges are refused.
    pub fn new(mut ranges: Vec<Range<usize>>) -> Result<Self> {
        ranges.sort_by_key(|r| r.start);
        for (i, r) in ranges.iter().enumerate() {
            if r.is_empty() || (i > 0 && ranges[i - 1].end > r.start) {
                return Err(crate::error::DecoderError::Config(format!(
                    "attention blocks must be non-empty and disjoint, got {ranges:?}"
                )));
            }
        }
        Ok(Self(ranges.into()))
    }

    /// The block holding position `q`.
    pub fn of(&self, q: usize) -> Option<&Range<usize>> {
        let i = self.0.partition_point(|r| r.end <= q);
        self.0.get(i).filter(|r| r.contains(&q))
    }
}

/// The attention rule of every layer for one forward, decided once by the model: most
/// decoders use one rule throughout; those whose layers differ (sliding-window and global
/// layers) give one per layer, so a family's rule is data, not a branch in the layers.
#[derive(Debug, Clone, PartialEq)]
pub struct MaskPlan {
    layers: Vec<AttentionMask>,
}

impl MaskPlan {
    /// The same rule in each of `layers` layers.
    pub fn uniform(mask: AttentionMask, layers: usize) -> Self {
        Self { layers: vec![mask; layers] }
    }

    /// One rule per layer.
    pub fn per_layer(layers: Vec<AttentionMask>) -> Self {
        Self { layers }
    }

    /// Layer `i`'s rule.
    pub fn layer(&self, i: usize) -> Result<&AttentionMask> {
        self.layers.get(i).ok_or_else(|| {
            crate::error::DecoderError::Config(format!("the mask plan has {} layers, no layer {i}", self.layers.len()))
        })
    }

    pub fn len(&self) -> usize {
        self.layers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The additive bias of each distinct rule in the plan, built once for a forward of `q_len`
    /// queries after `kv_len − q_len` cached positions (`None` where nothing is masked), to be
    /// looked up per layer with [`bias_of`](Self::bias_of).
    pub fn biases(&self, q_len: usize, kv_len: usize, device: &Device) -> Result<MaskBiases> {
        let mut out: Vec<(AttentionMask, Option<Tensor>)> = Vec::new();
        for m in &self.layers {
            if !out.iter().any(|(seen, _)| seen == m) {
                out.push((m.clone(), m.bias(q_len, kv_len, DType::F32, device)?));
            }
        }
        Ok(MaskBiases(out))
    }
}

/// The biases of a [`MaskPlan`]'s rules for one forward ([`MaskPlan::biases`]).
#[derive(Debug, Clone, Default)]
pub struct MaskBiases(Vec<(AttentionMask, Option<Tensor>)>);

impl MaskBiases {
    /// The bias of `mask`, when it was built and masks something.
    pub fn bias_of(&self, mask: &AttentionMask) -> Option<&Tensor> {
        self.0.iter().find(|(m, _)| m == mask).and_then(|(_, b)| b.as_ref())
    }
}

impl AttentionMask {
    /// Whether the query at absolute position `q` may attend to the key at `k`.
    pub fn allows(&self, q: usize, k: usize) -> bool {
        match *self {
            Self::Causal => k <= q,
            Self::Bidirectional => true,
            Self::PrefixLm { prefix_len } => k <= q || (q < prefix_len && k < prefix_len),
            Self::SlidingWindow { window } => k <= q && q - k < window,
            Self::SlidingPrefixLm { prefix_len, window } => {
                (k <= q && q - k < window) || (q < prefix_len && k < prefix_len)
            }
            Self::CausalBlocks { window, ref blocks } => {
                let in_window = window.is_none_or(|w| k + w > q);
                in_window && (k <= q || blocks.of(q).is_some_and(|b| b.contains(&k)))
            }
            Self::BlockDiagonal { ref blocks } => blocks.of(q).is_some_and(|b| b.contains(&k)),
        }
    }

    /// The keys the query at absolute position `q` sees among `0..kv_len`: always one range
    /// (the same answer as [`allows`](Self::allows), which the tests check).
    pub fn visible_keys(&self, q: usize, kv_len: usize) -> std::ops::Range<usize> {
        let r = match *self {
            Self::BlockDiagonal { ref blocks } => blocks.of(q).cloned().unwrap_or(0..0),
            Self::CausalBlocks { window, ref blocks } => {
                let start = window.map_or(0, |w| q.saturating_add(1).saturating_sub(w));
                start..blocks.of(q).map_or(q.saturating_add(1), |b| b.end.max(q.saturating_add(1)))
            }
            Self::Causal => 0..q.saturating_add(1),
            Self::Bidirectional => 0..kv_len,
            Self::PrefixLm { prefix_len } if q < prefix_len => 0..prefix_len,
            Self::PrefixLm { .. } => 0..q.saturating_add(1),
            Self::SlidingPrefixLm { prefix_len, .. } if q < prefix_len => 0..prefix_len,
            Self::SlidingWindow { window } | Self::SlidingPrefixLm { window, .. } => {
                q.saturating_add(1).saturating_sub(window)..q.saturating_add(1)
            }
        };
        r.start.min(kv_len)..r.end.min(kv_len)
    }

    /// The additive bias `(q_len, kv_len)` (0 where allowed, −∞ elsewhere) for `q_len` new
    /// queries following `kv_len − q_len` cached positions; `None` when nothing is masked.
    pub fn bias(&self, q_len: usize, kv_len: usize, dtype: DType, device: &Device) -> Result<Option<Tensor>> {
        self.bias_at(kv_len.saturating_sub(q_len), q_len, kv_len, dtype, device)
    }

    /// The additive bias `(q_len, kv_len)` for `q_len` queries at absolute positions
    /// `first_q ..` (a slice of the rows of [`bias`](Self::bias)).
    pub fn bias_at(
        &self,
        first_q: usize,
        q_len: usize,
        kv_len: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Option<Tensor>> {
        let offset = first_q;
        // Nothing to add when every query sees every key (bidirectional, one decode step).
        if (0..q_len).all(|i| self.visible_keys(offset + i, kv_len) == (0..kv_len)) {
            return Ok(None);
        }
        let mut any_masked = false;
        let mut values = Vec::with_capacity(q_len * kv_len);
        for i in 0..q_len {
            for j in 0..kv_len {
                if self.allows(offset + i, j) {
                    values.push(0f32);
                } else {
                    any_masked = true;
                    values.push(f32::NEG_INFINITY);
                }
            }
        }
        if !any_masked {
            return Ok(None);
        }
        Ok(Some(Tensor::from_vec(values, (q_len, kv_len), device)?.to_dtype(dtype)?))
    }
}
