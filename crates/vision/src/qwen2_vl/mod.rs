//! Qwen2-VL's image side, as transformers v5.23 computes it:
//!
//! - the processor (`Qwen2VLImageProcessorPil`): `smart_resize` to multiples of
//!   `patch × merge` within `[min_pixels, max_pixels]` (bicubic), rescale and normalize, then the
//!   image cut into `patch × patch` patches laid out block-major over `merge × merge` blocks, each
//!   patch repeated over the `temporal_patch_size` frames of a still image: pixel values
//!   `(patches, C·T·P·P)` and the patch grid `(rows, cols)`;
//! - the tower (`Qwen2VisionTransformerPretrainedModel`): the Conv3d patch embedding (no bias) as
//!   one matrix, blocks of LayerNorm → attention (one `qkv` matrix, 2-D RoPE: a patch's row and
//!   column angles side by side) → LayerNorm → MLP, every patch of an image seeing every other;
//! - the merger (`PatchMerger`): LayerNorm, each `merge × merge` block of patches concatenated,
//!   Linear → GELU → Linear into the text model's width.
//!
//! Qwen2.5-VL's tower (`Qwen2_5_VisionTransformerPretrainedModel`) differs in its blocks and
//! attention: RMSNorms, a gated MLP with biases, and — except in `fullatt_block_indexes` —
//! attention within windows of `window_size` px: the merged tokens are reordered window by
//! window (raster order of windows, raster order inside; edge windows partial), every block runs
//! in that order, and the merger's output is put back in raster order.
//!
//! Qwen3-VL's (`Qwen3VLVisionModel`): a biased patch embedding plus learned position embeddings
//! (a square table resampled bilinearly, corners aligned, to each image's grid), LayerNorm blocks
//! with a plain MLP, a merger that norms before concatenating, and DeepStack: the outputs of some
//! blocks go through mergers of their own (norm after concatenating) and are added to the text
//! model's hidden states at the image's positions after its first layers.

use candle_core::{DType, Tensor};
use tessera_decoder::weights::MatrixWeight;
use tessera_decoder::{
    Activation, Attention, AttentionConfig, AttentionInput, AttentionMask, Blocks, GatedMlp, LayerNorm, Linear, Mlp,
    NormStyle, RmsNorm, Weights,
};

use crate::error::{Result, VisionError};

mod layout;
pub use layout::{patch_positions, patchify, smart_resize, window_order};

/// `vision_config` of a Qwen2-VL checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen2VisionConfig {
    pub depth: usize,
    pub embed_dim: usize,
    /// The merger's output: the text model's width.
    pub hidden_size: usize,
    pub num_heads: usize,
    pub norm: VisionNorm,
    pub mlp: VisionMlp,
    /// Qwen2.5-VL's windowed attention; `None`: every block attends over the whole image.
    pub windows: Option<Windows>,
    /// Qwen3-VL's learned positions and DeepStack.
    pub qwen3: Option<Qwen3Vision>,
    pub in_channels: usize,
    pub patch_size: usize,
    pub spatial_merge_size: usize,
    pub temporal_patch_size: usize,
    pub hidden_act: Activation,
    /// The 2-D RoPE base (`rope_parameters.rope_theta`).
    pub rope_theta: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisionNorm {
    /// LayerNorm with bias (Qwen2-VL).
    Layer,
    /// RMSNorm (Qwen2.5-VL).
    Rms,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VisionMlp {
    /// `fc1` → act → `fc2`, `embed_dim × ratio` wide (Qwen2-VL).
    Plain { ratio: usize },
    /// `linear_fc1` → act → `linear_fc2` (Qwen3-VL).
    Linear { intermediate: usize },
    /// `gate_proj`/`up_proj` → act(gate) · up → `down_proj`, with biases (Qwen2.5-VL).
    Gated { intermediate: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qwen3Vision {
    /// The learned position table's size (a square: `side²`).
    pub num_position_embeddings: usize,
    /// Blocks whose outputs feed DeepStack, in the order of the text layers they join.
    pub deepstack: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Windows {
    /// Window side in pixels.
    pub size: usize,
    /// Blocks that attend over the whole image.
    pub full_blocks: Vec<usize>,
}

impl Qwen2VisionConfig {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(VisionError::Config(m));
        if self.depth == 0 || self.num_heads == 0 || !self.embed_dim.is_multiple_of(self.num_heads) {
            return bad(format!("vision embed_dim {} must split over {} heads", self.embed_dim, self.num_heads));
        }
        if !self.head_dim().is_multiple_of(4) {
            return bad(format!("vision head_dim {} must be a multiple of 4 (2-D RoPE)", self.head_dim()));
        }
        if self.patch_size == 0 || self.spatial_merge_size == 0 || self.temporal_patch_size == 0 {
            return bad("patch_size, spatial_merge_size and temporal_patch_size must be positive".into());
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad(format!("vision rope_theta {} must be a positive number", self.rope_theta));
        }
        if let Some(w) = &self.windows {
            if w.size < self.factor() || !w.size.is_multiple_of(self.factor()) {
                return bad(format!("window_size {} must be a multiple of {} px", w.size, self.factor()));
            }
            if let Some(b) = w.full_blocks.iter().find(|&&b| b >= self.depth) {
                return bad(format!("fullatt_block_indexes names block {b} of a {}-block tower", self.depth));
            }
        }
        if let Some(q) = &self.qwen3 {
            let side = (q.num_position_embeddings as f64).sqrt() as usize;
            if side < 2 || side * side != q.num_position_embeddings {
                return bad(format!(
                    "num_position_embeddings {} is not a square of 2 or more",
                    q.num_position_embeddings
                ));
            }
            if let Some(b) = q.deepstack.iter().find(|&&b| b >= self.depth) {
                return bad(format!("deepstack_visual_indexes names block {b} of a {}-block tower", self.depth));
            }
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.embed_dim / self.num_heads
    }

    /// Values per patch: channels × frames × patch².
    pub fn patch_dim(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    /// What image sides must be multiples of.
    pub fn factor(&self) -> usize {
        self.patch_size * self.spatial_merge_size
    }
}

#[derive(Clone, Debug)]
enum Norm {
    Layer(LayerNorm),
    Rms(RmsNorm),
}

impl Norm {
    fn load(kind: VisionNorm, dim: usize, vb: &Weights) -> Result<Self> {
        Ok(match kind {
            VisionNorm::Layer => Self::Layer(LayerNorm::load(dim, 1e-6, vb)?),
            VisionNorm::Rms => Self::Rms(RmsNorm::load(dim, 1e-6, NormStyle::Plain, vb)?),
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Self::Layer(n) => n.forward(x)?,
            Self::Rms(n) => n.forward(x)?,
        })
    }
}

#[derive(Clone, Debug)]
enum BlockMlp {
    Plain(Mlp),
    Gated(GatedMlp),
}

#[derive(Clone, Debug)]
struct Block {
    norm1: Norm,
    attn: Attention,
    norm2: Norm,
    mlp: BlockMlp,
}

/// The vision transformer and its merger.
#[derive(Clone, Debug)]
pub struct Qwen2VisionTower {
    cfg: Qwen2VisionConfig,
    patch_embed: Linear,
    blocks: Vec<Block>,
    ln_q: Norm,
    merger_fc1: Linear,
    merger_fc2: Linear,
    /// Qwen3-VL: the learned position table `(side², embed_dim)`.
    pos_embed: Option<Tensor>,
    /// Qwen3-VL: DeepStack's mergers (norm over the concatenated block, then two layers).
    deepstack: Vec<(usize, LayerNorm, Linear, Linear)>,
    /// The 2-D RoPE's `head_dim/4` inverse frequencies.
    inv_freq: Vec<f32>,
    dtype: DType,
}

impl Qwen2VisionTower {
    /// `vb`: the tower's root (`visual`).
    pub fn new(cfg: &Qwen2VisionConfig, vb: &Weights) -> Result<Self> {
        cfg.validate()?;
        let e = cfg.embed_dim;
        let conv = Self::patch_kernel(cfg, &vb.pp("patch_embed.proj"))?;
        let patch_bias = match cfg.qwen3 {
            Some(_) => Some(vb.pp("patch_embed.proj").get(&[e], "bias")?),
            None => None,
        };
        let patch_embed = Linear::new(MatrixWeight::Dense(conv.reshape((e, cfg.patch_dim()))?), patch_bias)?;
        let head_dim = cfg.head_dim();
        let attn_cfg = AttentionConfig {
            hidden_size: e,
            num_heads: cfg.num_heads,
            num_kv_heads: cfg.num_heads,
            head_dim,
            qkv_bias: true,
            out_bias: true,
            scale: 1.0 / (head_dim as f64).sqrt(),
            out_name: "proj",
            output_gate: false,
            k_eq_v: false,
            v_norm: false,
            softcap: None,
            qk_norm: None,
        };
        let blocks = (0..cfg.depth)
            .map(|i| {
                let b = vb.pp("blocks").pp(i);
                let a = b.pp("attn");
                let [q, k, v] = Self::qkv(e, &a, cfg.qwen3.is_some())?;
                let attn = Attention::from_parts(&attn_cfg, q, k, v, a.linear(e, e, true, "proj")?)?;
                let mlp = match cfg.mlp {
                    VisionMlp::Linear { intermediate } => BlockMlp::Plain(Mlp::named(
                        e,
                        intermediate,
                        cfg.hidden_act,
                        &b.pp("mlp"),
                        ("linear_fc1", "linear_fc2"),
                    )?),
                    VisionMlp::Plain { ratio } => {
                        BlockMlp::Plain(Mlp::new(e, e * ratio, cfg.hidden_act, &b.pp("mlp"))?)
                    }
                    VisionMlp::Gated { intermediate } => {
                        BlockMlp::Gated(GatedMlp::new(e, intermediate, cfg.hidden_act, true, &b.pp("mlp"))?)
                    }
                };
                Ok(Block {
                    norm1: Norm::load(cfg.norm, e, &b.pp("norm1"))?,
                    attn,
                    norm2: Norm::load(cfg.norm, e, &b.pp("norm2"))?,
                    mlp,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let m = vb.pp("merger");
        let merged = e * cfg.spatial_merge_size * cfg.spatial_merge_size;
        let inv_freq = crate::rope2d::inv_freq(cfg.rope_theta, head_dim / 2);
        Ok(Self {
            cfg: cfg.clone(),
            patch_embed,
            blocks,
            ln_q: match cfg.qwen3 {
                Some(_) => Norm::Layer(LayerNorm::load(e, 1e-6, &m.pp("norm"))?),
                None => Norm::load(cfg.norm, e, &m.pp("ln_q"))?,
            },
            merger_fc1: match cfg.qwen3 {
                Some(_) => m.linear(merged, merged, true, "linear_fc1")?,
                None => m.pp("mlp").linear(merged, merged, true, "0")?,
            },
            merger_fc2: match cfg.qwen3 {
                Some(_) => m.linear(merged, cfg.hidden_size, true, "linear_fc2")?,
                None => m.pp("mlp").linear(merged, cfg.hidden_size, true, "2")?,
            },
            pos_embed: match &cfg.qwen3 {
                Some(q) => Some(vb.pp("pos_embed").get(&[q.num_position_embeddings, e], "weight")?),
                None => None,
            },
            deepstack: match &cfg.qwen3 {
                Some(q) => q
                    .deepstack
                    .iter()
                    .enumerate()
                    .map(|(i, &block)| {
                        // llama.cpp's mmproj names each merger by the block it reads.
                        let listed = vb.pp("deepstack_merger_list").pp(i);
                        let d = match listed.contains("norm.weight") {
                            true => listed,
                            false => vb.pp("blocks").pp(block).pp("deepstack_merger"),
                        };
                        Ok((
                            block,
                            LayerNorm::load(merged, 1e-6, &d.pp("norm"))?,
                            d.linear(merged, merged, true, "linear_fc1")?,
                            d.linear(merged, cfg.hidden_size, true, "linear_fc2")?,
                        ))
                    })
                    .collect::<Result<Vec<_>>>()?,
                None => Vec::new(),
            },
            inv_freq,
            dtype: vb.dtype(),
        })
    }

    /// The Conv3d patch kernel `(embed_dim, C, T, P, P)`: as the checkpoint stores it, or
    /// rebuilt from the one `(embed_dim, C, P, P)` kernel per frame that llama.cpp's converter
    /// splits it into (`weight`, `weight.1`: frames 0 and 1; it converts only `T = 2`).
    fn patch_kernel(cfg: &Qwen2VisionConfig, vb: &Weights) -> Result<Tensor> {
        let (e, c, t, p) = (cfg.embed_dim, cfg.in_channels, cfg.temporal_patch_size, cfg.patch_size);
        if !vb.contains("weight.1") {
            return Ok(vb.get(&[e, c, t, p, p], "weight")?);
        }
        if t != 2 {
            return Err(VisionError::Config(format!("a patch kernel split into 2 frames for temporal_patch_size {t}")));
        }
        let frames = [vb.get(&[e, c, p, p], "weight")?, vb.get(&[e, c, p, p], "weight.1")?];
        Ok(Tensor::stack(&frames, 2)?) // (e, c, 2, p, p)
    }

    /// A block's query, key and value projections `(e, e)` with biases: from the checkpoint's
    /// one `qkv` matrix `(3e, e)`, or the three llama.cpp's converter splits it into (Qwen2-VL,
    /// Qwen2.5-VL).
    /// `fused`: the mmproj keeps the matrix whole (Qwen3-VL).
    fn qkv(e: usize, a: &Weights, fused: bool) -> Result<[Linear; 3]> {
        if !a.contains("qkv.weight") && a.contains("q.weight") {
            return Ok([a.linear(e, e, true, "q")?, a.linear(e, e, true, "k")?, a.linear(e, e, true, "v")?]);
        }
        let qkv_b = a.get(&[3 * e], "qkv.bias")?;
        // Each part quantized (under a plan) as the converter's split `q`/`k`/`v` would be.
        let part = |k: usize, as_name: &str| -> Result<Linear> {
            let w = a.matrix_rows(3 * e, e, "qkv.weight", k * e..(k + 1) * e, as_name)?;
            Ok(Linear::new(w, Some(qkv_b.narrow(0, k * e, e)?.contiguous()?))?)
        };
        // Qwen3-VL's converter keeps `qkv` whole: its parts take the whole matrix's type (blocks
        // never straddle rows, so the parts' blocks are the whole's).
        let names = match fused {
            true => ["qkv.weight"; 3],
            false => ["q.weight", "k.weight", "v.weight"],
        };
        Ok([part(0, names[0])?, part(1, names[1])?, part(2, names[2])?])
    }

    pub fn config(&self) -> &Qwen2VisionConfig {
        &self.cfg
    }

    /// The merged-token order the blocks run in: raster order, or Qwen2.5-VL's windows; and
    /// the windows' lengths in merged tokens (`None`: no windows).
    fn order(&self, rows: usize, cols: usize) -> (Vec<usize>, Option<Vec<usize>>) {
        let m = self.cfg.spatial_merge_size;
        match &self.cfg.windows {
            Some(w) => {
                let (order, lengths) = window_order(rows / m, cols / m, w.size / self.cfg.factor());
                (order, Some(lengths))
            }
            None => ((0..rows * cols / (m * m)).collect(), None),
        }
    }

    /// The blocks' output `(patches, embed_dim)` for one image's patches `(patches, C·T·P·P)`
    /// on a `rows × cols` grid — what the merger reads, in the order the blocks run (Qwen2.5-VL:
    /// window by window).
    pub fn features(&self, pixels: &Tensor, rows: usize, cols: usize) -> Result<Tensor> {
        Ok(self.features_and_deepstack(pixels, rows, cols)?.0)
    }

    /// [`features`](Self::features) and, for Qwen3-VL, DeepStack's image tokens
    /// `(patches / merge², hidden_size)` of each DeepStack block, in raster order.
    pub fn features_and_deepstack(&self, pixels: &Tensor, rows: usize, cols: usize) -> Result<(Tensor, Vec<Tensor>)> {
        let n = pixels.dim(0)?;
        if n != rows * cols {
            return Err(VisionError::Config(format!("{n} patches for a {rows}×{cols} grid")));
        }
        let dtype = self.dtype;
        let m2 = self.cfg.spatial_merge_size * self.cfg.spatial_merge_size;
        let (order, windows) = self.order(rows, cols);
        // Patches in the blocks' order: each merged token's m² patches, tokens reordered.
        let patch_order: Vec<u32> = order.iter().flat_map(|&u| (u * m2..(u + 1) * m2).map(|p| p as u32)).collect();
        let index = Tensor::new(patch_order.as_slice(), pixels.device())?;
        let x = self.patch_embed.forward(&pixels.to_dtype(dtype)?.index_select(&index, 0)?.unsqueeze(0)?)?;
        let x = match &self.pos_embed {
            Some(table) => {
                let pos = self.learned_positions(table, rows, cols)?.index_select(&index, 0)?;
                (x + pos.to_dtype(dtype)?.unsqueeze(0)?)?
            }
            None => x,
        };
        let positions = patch_positions(rows, cols, self.cfg.spatial_merge_size);
        // Rows and columns on the same frequencies.
        let ordered = patch_order.iter().map(|&p| positions[p as usize]);
        let rope = crate::rope2d::axial_angles(
            ordered,
            (&self.inv_freq, &self.inv_freq),
            tessera_decoder::RopeStyle::Half,
            dtype,
            x.device(),
        )?;
        let windowed = match windows {
            Some(lengths) => {
                let mut at = 0;
                let ranges = lengths
                    .iter()
                    .map(|l| {
                        at += l * m2;
                        at - l * m2..at
                    })
                    .collect();
                Some(AttentionMask::BlockDiagonal { blocks: Blocks::new(ranges)? })
            }
            None => None,
        };
        let full_blocks = self.cfg.windows.as_ref().map(|w| w.full_blocks.as_slice()).unwrap_or(&[]);
        let mut deepstack = Vec::new();
        let mut x = x;
        for (i, b) in self.blocks.iter().enumerate() {
            let mask = match &windowed {
                Some(w) if !full_blocks.contains(&i) => w,
                _ => &AttentionMask::Bidirectional,
            };
            let input =
                AttentionInput { rope: Some(&rope), mask, bias: None, cache: None, capture: false, residual: Some(&x) };
            let (y, _) = b.attn.forward(&b.norm1.forward(&x)?, input)?;
            let h = b.norm2.forward(&y)?;
            x = match &b.mlp {
                BlockMlp::Plain(mlp) => mlp.forward_add(&h, Some(&y))?,
                BlockMlp::Gated(mlp) => mlp.forward_add(&h, Some(&y))?,
            };
            for (_, norm, fc1, fc2) in self.deepstack.iter().filter(|d| d.0 == i) {
                let merged = x.squeeze(0)?.reshape((n / m2, ()))?;
                let y = Activation::Gelu.apply(&fc1.forward(&norm.forward(&merged)?)?)?;
                deepstack.push(fc2.forward(&y)?);
            }
        }
        Ok((x.squeeze(0)?, deepstack))
    }

    /// Qwen3-VL's position embeddings for a `rows × cols` patch grid, in [`patchify`]'s order:
    /// the `side × side` table resampled bilinearly with corners aligned (`F.interpolate(…,
    /// align_corners=True)`, as transformers' `get_vision_interpolation_indices_and_weights`).
    fn learned_positions(&self, table: &Tensor, rows: usize, cols: usize) -> Result<Tensor> {
        let side = (table.dim(0)? as f64).sqrt() as usize;
        let taps = |i: usize, size: usize| -> [(usize, f32); 2] {
            let src = i as f32 * (side - 1) as f32 / (size.max(2) - 1) as f32;
            let floor = src.floor();
            let t0 = (floor as usize).min(side - 1);
            let t1 = (floor as usize + 1).min(side - 1);
            [(t0, (1.0 - (src - floor)).max(0.0)), (t1, (1.0 - (floor + 1.0 - src).abs()).max(0.0))]
        };
        let (mut index, mut weight) = (Vec::new(), Vec::new());
        for (r, c) in patch_positions(rows, cols, self.cfg.spatial_merge_size) {
            for (tr, wr) in taps(r, rows) {
                for (tc, wc) in taps(c, cols) {
                    index.push((tr * side + tc) as u32);
                    weight.push(wr * wc);
                }
            }
        }
        let n = rows * cols;
        let gathered = table.to_dtype(DType::F32)?.index_select(&Tensor::new(index.as_slice(), table.device())?, 0)?;
        let weights = Tensor::from_vec(weight, (n * 4, 1), table.device())?;
        Ok(gathered.broadcast_mul(&weights)?.reshape((n, 4, ()))?.sum(1)?)
    }

    /// Features `(patches, embed_dim)` from [`features`](Self::features) of a `rows × cols`
    /// grid → image tokens `(patches / merge², hidden_size)` in raster order.
    pub fn merge(&self, features: &Tensor, rows: usize, cols: usize) -> Result<Tensor> {
        let (n, e) = features.dims2()?;
        let m2 = self.cfg.spatial_merge_size * self.cfg.spatial_merge_size;
        if !n.is_multiple_of(m2) || n != rows * cols {
            return Err(VisionError::Config(format!(
                "{n} patches do not form {m2}-patch blocks of a {rows}×{cols} grid"
            )));
        }
        let x = self.ln_q.forward(features)?.reshape((n / m2, e * m2))?;
        let x = Activation::Gelu.apply(&self.merger_fc1.forward(&x)?)?;
        let x = self.merger_fc2.forward(&x)?;
        let (order, windows) = self.order(rows, cols);
        if windows.is_none() {
            return Ok(x);
        }
        // Back to raster order: token `order[i]` is row i of `x`.
        let mut inverse = vec![0u32; order.len()];
        for (i, &u) in order.iter().enumerate() {
            inverse[u] = i as u32;
        }
        Ok(x.index_select(&Tensor::new(inverse.as_slice(), x.device())?, 0)?)
    }
}
