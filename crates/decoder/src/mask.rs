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

    /// The additive bias of each distinct rule in the plan, in `dtype` (the activations'), built
    /// once for a forward of `q_len` queries after `kv_len − q_len` cached positions (`None`
    /// where nothing is masked), to be looked up per layer with [`bias_of`](Self::bias_of).
    pub fn biases(&self, q_len: usize, kv_len: usize, dtype: DType, device: &Device) -> Result<MaskBiases> {
        let mut out: Vec<(AttentionMask, Option<Tensor>)> = Vec::new();
        for m in &self.layers {
            if !out.iter().any(|(seen, _)| seen == m) {
                out.push((m.clone(), m.bias(q_len, kv_len, dtype, device)?));
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
    ///
    /// Each query's visible keys are one range ([`visible_keys`](Self::visible_keys)): where
    /// tessera's CPU kernels run, the rows are filled on the host; elsewhere (CUDA, Metal, or
    /// `TESSERA_KERNELS=off`) only the ranges' bounds travel, 8 bytes a query, and the bias is
    /// made on the device: a 2048-token prompt sends 16 KiB instead of a 16 MiB matrix.
    pub fn bias_at(
        &self,
        first_q: usize,
        q_len: usize,
        kv_len: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Option<Tensor>> {
        let rows: Vec<Range<usize>> = (0..q_len).map(|i| self.visible_keys(first_q + i, kv_len)).collect();
        // Nothing to add when every query sees every key (bidirectional, one decode step).
        if rows.iter().all(|r| *r == (0..kv_len)) {
            return Ok(None);
        }
        let bias = if crate::cpu_op::kernels_run_on(device) {
            bias_on_host(&rows, kv_len, device)?
        } else {
            bias_on_device(&rows, kv_len, device)?
        };
        Ok(Some(bias.to_dtype(dtype)?))
    }
}

/// The f32 bias `(rows.len(), kv_len)`: 0 inside each row's range, −∞ elsewhere, written on
/// the host.
fn bias_on_host(rows: &[Range<usize>], kv_len: usize, device: &Device) -> Result<Tensor> {
    let mut values = vec![f32::NEG_INFINITY; rows.len() * kv_len];
    for (row, r) in values.chunks_exact_mut(kv_len.max(1)).zip(rows) {
        row[r.clone()].fill(0.0);
    }
    Ok(Tensor::from_vec(values, (rows.len(), kv_len), device)?)
}

/// [`bias_on_host`]'s values made by Candle's ops on `device` from the rows' bounds:
/// `start ≤ key < end` compared against the key positions, then selected between 0 and −∞.
fn bias_on_device(rows: &[Range<usize>], kv_len: usize, device: &Device) -> Result<Tensor> {
    let q_len = rows.len();
    let position = |p: usize| {
        u32::try_from(p)
            .map_err(|_| crate::error::DecoderError::Config(format!("position {p} is beyond the mask's u32 positions")))
    };
    let mut bounds = Vec::with_capacity(2 * q_len);
    for r in rows {
        bounds.push(position(r.start)?);
    }
    for r in rows {
        bounds.push(position(r.end)?);
    }
    let bounds = Tensor::from_vec(bounds, (2, q_len, 1), device)?;
    let keys = Tensor::arange(0u32, position(kv_len)?, device)?.reshape((1, kv_len))?;
    let shape = (q_len, kv_len);
    let zero = Tensor::zeros((), DType::F32, device)?.broadcast_as(shape)?;
    let masked = Tensor::full(f32::NEG_INFINITY, (), device)?.broadcast_as(shape)?;
    let before_end = keys.broadcast_lt(&bounds.get(1)?)?.where_cond(&zero, &masked)?;
    Ok(keys.broadcast_ge(&bounds.get(0)?)?.where_cond(&before_end, &masked)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both builders give, for every rule, offset and length, exactly `allows`' answer.
    #[test]
    fn host_and_device_biases_are_the_rules_answer() -> Result<()> {
        let blocks = |r: Vec<Range<usize>>| Blocks::new(r);
        let masks = [
            AttentionMask::Causal,
            AttentionMask::PrefixLm { prefix_len: 4 },
            AttentionMask::SlidingWindow { window: 3 },
            AttentionMask::SlidingPrefixLm { prefix_len: 4, window: 2 },
            AttentionMask::CausalBlocks { window: None, blocks: blocks(vec![1..3, 4..7])? },
            AttentionMask::CausalBlocks { window: Some(2), blocks: blocks(vec![1..3, 4..7])? },
            AttentionMask::BlockDiagonal { blocks: blocks(vec![0..2, 3..6, 8..9])? },
        ];
        let device = Device::Cpu;
        for m in &masks {
            for (first_q, q_len, kv_len) in [(0, 9, 9), (3, 6, 9), (0, 1, 5), (2, 3, 11), (0, 12, 12)] {
                let rows: Vec<Range<usize>> = (0..q_len).map(|i| m.visible_keys(first_q + i, kv_len)).collect();
                for (name, bias) in [
                    ("host", bias_on_host(&rows, kv_len, &device)?),
                    ("device", bias_on_device(&rows, kv_len, &device)?),
                ] {
                    assert_eq!(bias.dims(), [q_len, kv_len], "{name} {m:?}");
                    for (i, row) in bias.to_vec2::<f32>()?.iter().enumerate() {
                        for (k, &x) in row.iter().enumerate() {
                            let want = if m.allows(first_q + i, k) { 0.0 } else { f32::NEG_INFINITY };
                            assert_eq!(x, want, "{name} {m:?} q={} k={k} kv_len={kv_len}", first_q + i);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
