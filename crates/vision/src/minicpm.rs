//! MiniCPM-V 4.6's vision tower and merger (transformers 5.23 `modeling_minicpmv4_6.py`), one
//! view (the source image or one slice, tessera-vision's `minicpm_slice`) at a time:
//!
//! - SigLIP's stem and encoder layers (`tower.rs`) over the view's `h × w` patches, each patch's
//!   learned position looked up at the nearest cell of the `image_size / patch_size` square
//!   table (`get_vision_nearest_position_ids`: `i / h` bucketed on `1/side` steps);
//! - after layer `insert_layer_id`, the window-attention merger: attention within each 2×2
//!   window of patches (its residual included), then the window's four tokens concatenated →
//!   LayerNorm → Linear → tanh-GELU → Linear, plus their mean: `h/2 × w/2` tokens, row-major;
//!   the remaining layers run on those (skipped under `downsample_mode` "4x");
//! - `post_layernorm`, then the merger: 2×2 neighbours concatenated → LayerNorm (1e-6) →
//!   Linear → exact GELU → Linear to the text width (`merger_times` rounds).
//!
//! Tensor names are the checkpoint's (`vision_tower.vit_merger.pre_norm`, `merger.mlp.0.linear_1`).

use candle_core::{DType, Tensor, D};
use tessera_decoder::{Activation, Attention, AttentionInput, AttentionMask, LayerNorm, Linear, Weights};

use crate::error::{Result, VisionError};
use crate::patchify::PatchEmbedding;
use crate::tower::{EncoderLayer, VisionTowerConfig};

/// The tower and merger's sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct MiniCpmVisionConfig {
    /// The SigLIP part (kind `Siglip`, tanh-GELU).
    pub tower: VisionTowerConfig,
    /// The window merger runs after this layer; `None`: not at all ("4x").
    pub insert_layer_id: Option<usize>,
    pub text_hidden: usize,
    pub merger_times: usize,
}

/// The window-attention merger.
#[derive(Debug, Clone)]
struct WindowMerger {
    layer_norm1: LayerNorm,
    self_attn: Attention,
    pre_norm: LayerNorm,
    linear_1: Linear,
    linear_2: Linear,
}

/// One round of the merger MLP (`MiniCPMV4_6DownsampleMLP`).
#[derive(Debug, Clone)]
struct DownsampleMlp {
    pre_norm: LayerNorm,
    linear_1: Linear,
    linear_2: Linear,
}

/// The loaded tower and merger.
#[derive(Debug, Clone)]
pub struct MiniCpmVision {
    cfg: MiniCpmVisionConfig,
    patch: PatchEmbedding,
    /// `(side², d)`.
    position_embedding: Tensor,
    layers: Vec<EncoderLayer>,
    post_layernorm: LayerNorm,
    vit_merger: Option<WindowMerger>,
    merger: Vec<DownsampleMlp>,
}

/// The nearest-cell position ids of an `h × w` grid on a `side × side` table, computed in f32
/// as torch does (`arange(1/side, 1, 1/side)` boundaries, `bucketize(right=True)`).
pub fn nearest_position_ids(h: usize, w: usize, side: usize) -> Vec<u32> {
    let step = 1.0 / side as f64;
    let count = ((1.0 - step) / step).ceil() as usize;
    let bounds: Vec<f32> = (0..count).map(|i| (step + i as f64 * step) as f32).collect();
    let bucket = |k: usize, n: usize| {
        let x = k as f32 / n as f32;
        bounds.iter().filter(|&&b| b <= x).count()
    };
    let rows: Vec<usize> = (0..h).map(|i| bucket(i, h)).collect();
    let cols: Vec<usize> = (0..w).map(|j| bucket(j, w)).collect();
    rows.iter().flat_map(|&r| cols.iter().map(move |&c| (r * side + c) as u32)).collect()
}

/// Tokens of an `h × w` grid in 2×2 groups: each group's four (row-major within it), groups in
/// row-major order.
fn window_order(h: usize, w: usize) -> Vec<u32> {
    let mut order = Vec::with_capacity(h * w);
    for wi in 0..h / 2 {
        for wj in 0..w / 2 {
            for (di, dj) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                order.push(((2 * wi + di) * w + 2 * wj + dj) as u32);
            }
        }
    }
    order
}

/// `x` `(h·w, d)` regrouped as 2×2 neighbours: `(h/2 · w/2, 4·d)`.
fn group_2x2(x: &Tensor, h: usize, w: usize) -> Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    Ok(x.reshape((h / 2, 2, w / 2, 2, d))?.permute((0, 2, 1, 3, 4))?.reshape((h / 2 * (w / 2), 4 * d))?)
}

impl WindowMerger {
    fn new(cfg: &VisionTowerConfig, vb: &Weights) -> Result<Self> {
        let (d, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        Ok(Self {
            layer_norm1: LayerNorm::load(d, eps, &vb.pp("layer_norm1"))?,
            self_attn: Attention::new(&cfg.attention(), &vb.pp("self_attn"))?,
            pre_norm: LayerNorm::load(4 * d, eps, &vb.pp("pre_norm"))?,
            linear_1: vb.linear(4 * d, 4 * cfg.intermediate_size, true, "linear_1")?,
            linear_2: vb.linear(4 * cfg.intermediate_size, d, true, "linear_2")?,
        })
    }

    /// `x` `(h·w, d)` → `(h/2 · w/2, d)`.
    fn forward(&self, x: &Tensor, h: usize, w: usize) -> Result<Tensor> {
        let d = x.dim(1)?;
        let order = Tensor::new(window_order(h, w), x.device())?;
        let windows = (h / 2) * (w / 2);
        let residual = x.index_select(&order, 0)?.reshape((windows, 4, d))?;
        let normed = self.layer_norm1.forward(x)?.index_select(&order, 0)?.reshape((windows, 4, d))?;
        let input = AttentionInput {
            rope: None,
            mask: &AttentionMask::Bidirectional,
            bias: None,
            cache: None,
            capture: false,
            residual: Some(&residual),
        };
        let (y, _) = self.self_attn.forward(&normed, input)?; // (windows, 4, d)
        let mean = y.mean(1)?;
        let y = self.pre_norm.forward(&y.reshape((windows, 4 * d))?)?;
        let y = self.linear_1.forward_act(&y, Activation::GeluTanh)?;
        Ok(self.linear_2.forward_add(&y, Some(&mean))?)
    }
}

impl DownsampleMlp {
    fn new(d: usize, out: usize, vb: &Weights) -> Result<Self> {
        Ok(Self {
            pre_norm: LayerNorm::load(4 * d, 1e-6, &vb.pp("pre_norm"))?,
            linear_1: vb.linear(4 * d, 4 * d, true, "linear_1")?,
            linear_2: vb.linear(4 * d, out, true, "linear_2")?,
        })
    }

    fn forward(&self, grouped: &Tensor) -> Result<Tensor> {
        let y = self.linear_1.forward_act(&self.pre_norm.forward(grouped)?, Activation::Gelu)?;
        Ok(self.linear_2.forward(&y)?)
    }
}

impl MiniCpmVision {
    /// Loads the tower from `tower` (`model.vision_tower`) and the merger from `merger`
    /// (`model.merger`).
    pub fn new(cfg: &MiniCpmVisionConfig, tower: &Weights, merger: &Weights) -> Result<Self> {
        let t = &cfg.tower;
        t.validate()?;
        if cfg.merger_times == 0 {
            return Err(VisionError::Config("merger_times must be at least 1".into()));
        }
        let (d, c, p) = (t.hidden_size, t.num_channels, t.patch_size);
        let emb = tower.pp("embeddings");
        let patch = PatchEmbedding::new(
            emb.get(&[d, c, p, p], "patch_embedding.weight")?,
            Some(emb.get(&[d], "patch_embedding.bias")?),
        )?;
        let position_embedding = emb.get(&[t.num_patches(), d], "position_embedding.weight")?;
        let layers = (0..t.num_hidden_layers)
            .map(|i| EncoderLayer::new(t, &tower.pp("encoder.layers").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        let vit_merger = match cfg.insert_layer_id {
            Some(_) => Some(WindowMerger::new(t, &tower.pp("vit_merger"))?),
            None => None,
        };
        let merger = (0..cfg.merger_times)
            .map(|i| {
                let out = if i + 1 == cfg.merger_times { cfg.text_hidden } else { d };
                DownsampleMlp::new(d, out, &merger.pp("mlp").pp(i))
            })
            .collect::<Result<Vec<_>>>()?;
        let post_layernorm = LayerNorm::load(d, t.layer_norm_eps, &tower.pp("post_layernorm"))?;
        Ok(Self { cfg: cfg.clone(), patch, position_embedding, layers, post_layernorm, vit_merger, merger })
    }

    pub fn config(&self) -> &MiniCpmVisionConfig {
        &self.cfg
    }

    fn check_grid(&self, h: usize, w: usize, unit: usize) -> Result<()> {
        if h == 0 || w == 0 || !h.is_multiple_of(unit) || !w.is_multiple_of(unit) {
            return Err(VisionError::Config(format!(
                "a MiniCPM-V view of {h}×{w} patches: both sides must be positive multiples of {unit}"
            )));
        }
        Ok(())
    }

    /// The tower's output for one view `pixels` `(1, C, H, W)` (sides multiples of the patch
    /// size): `(tokens, d)` after `post_layernorm`, and its grid `(rows, cols)`.
    pub fn tower_forward(&self, pixels: &Tensor) -> Result<(Tensor, (usize, usize))> {
        let (_, c, ph, pw) = pixels.dims4()?;
        let p = self.cfg.tower.patch_size;
        let (mut h, mut w) = (ph / p, pw / p);
        let merges = usize::from(self.vit_merger.is_some()) + self.cfg.merger_times;
        self.check_grid(h, w, 1 << merges)?;
        if c != self.cfg.tower.num_channels || !ph.is_multiple_of(p) || !pw.is_multiple_of(p) {
            return Err(VisionError::Config(format!("a MiniCPM-V view of {c}×{ph}×{pw} pixels: patches of {p}")));
        }
        let dtype = self.position_embedding.dtype();
        let x = self.patch.forward_unfold(&pixels.to_dtype(dtype)?)?.squeeze(0)?; // (h·w, d)
        let side = self.cfg.tower.patches_per_side();
        let ids = Tensor::new(nearest_position_ids(h, w, side), pixels.device())?;
        let mut x = (x + self.position_embedding.index_select(&ids, 0)?)?;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x.unsqueeze(0)?)?.squeeze(0)?;
            if let (Some(m), Some(at)) = (&self.vit_merger, self.cfg.insert_layer_id) {
                if i == at {
                    x = m.forward(&x, h, w)?;
                    (h, w) = (h / 2, w / 2);
                }
            }
        }
        Ok((self.post_layernorm.forward(&x)?, (h, w)))
    }

    /// The view's image tokens `(n, text_hidden)`.
    pub fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let (mut x, (mut h, mut w)) = self.tower_forward(pixels)?;
        for mlp in &self.merger {
            x = mlp.forward(&group_2x2(&x, h, w)?)?;
            (h, w) = (h / 2, w / 2);
        }
        Ok(x)
    }

    /// The weights' dtype.
    pub fn dtype(&self) -> DType {
        self.position_embedding.dtype()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_positions_spread_a_grid_over_the_table() {
        // 2×3 on a 4×4 table: rows 0, 1/2 → 0, 2; cols 0, 1/3, 2/3 → 0, 1, 2.
        assert_eq!(nearest_position_ids(2, 3, 4), [0, 1, 2, 8, 9, 10]);
        // A grid as large as the table maps one to one.
        assert_eq!(nearest_position_ids(4, 4, 4), (0..16).collect::<Vec<u32>>());
    }

    #[test]
    fn windows_are_2x2_groups_in_row_major_order() {
        assert_eq!(window_order(2, 4), [0, 1, 4, 5, 2, 3, 6, 7]);
    }
}
