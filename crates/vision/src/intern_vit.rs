//! InternViT, InternVL's vision tower (Chen et al. 2024, "InternVL"), as transformers v5.23's
//! `InternVLVisionModel` runs it (`modeling_internvl.py`): patch Conv2d with bias, a CLS token
//! prepended, learned positions over CLS + patches, then pre-norm layers with **layer scale**:
//! `x + λ₁ · attn(ln_before(x))`, then `x + λ₂ · mlp(ln_after(x))`, where λ₁, λ₂ are learned
//! per-channel vectors (`lambda_1`, `lambda_2`). Bidirectional multi-head attention with
//! optional q/k/v biases (`attention_bias`) and a biased output projection
//! (`projection_layer`); `fc1 → act → fc2` MLP. With `use_mean_pooling` (InternVL3) the last
//! layer's output is the tower's output, unnormalized.
//!
//! The attention, norms, MLP and patch embedding are the workspace's shared blocks
//! (`tessera-decoder`, [`PatchEmbedding`]); what is InternViT's own is the layer scale and the
//! names. Positions are not interpolated: the processor's tiles have the tower's input size.

use candle_core::Tensor;
use tessera_decoder::{Activation, Attention, AttentionConfig, AttentionInput, AttentionMask, LayerNorm, Mlp, Weights};

use crate::error::{Result, VisionError};
use crate::patchify::PatchEmbedding;
use crate::tower::{check_heads, vit_attention};

/// An `InternVLVisionConfig` as tessera runs it (transformers' defaults filled in by the caller).
#[derive(Debug, Clone, PartialEq)]
pub struct InternVitConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_channels: usize,
    /// The (square) tile side the tower reads.
    pub image_size: usize,
    pub patch_size: usize,
    pub layer_norm_eps: f64,
    pub hidden_act: Activation,
    /// Biases on the q, k and v projections.
    pub attention_bias: bool,
}

impl InternVitConfig {
    /// Patches per side of a tile.
    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// Patch tokens per tile (without the CLS token).
    pub fn num_patches(&self) -> usize {
        self.patches_per_side().pow(2)
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(VisionError::Config(m));
        if self.patch_size == 0 || !self.image_size.is_multiple_of(self.patch_size) || self.image_size == 0 {
            return bad(format!(
                "vision image_size {} is not a whole number of patches of {}",
                self.image_size, self.patch_size
            ));
        }
        check_heads(self.hidden_size, self.num_attention_heads)
    }

    fn attention(&self) -> AttentionConfig {
        vit_attention(self.hidden_size, self.num_attention_heads, self.attention_bias, "projection_layer")
    }
}

#[derive(Clone, Debug)]
struct Layer {
    layernorm_before: LayerNorm,
    attention: Attention,
    lambda_1: Tensor,
    layernorm_after: LayerNorm,
    mlp: Mlp,
    lambda_2: Tensor,
}

impl Layer {
    fn new(cfg: &InternVitConfig, vb: &Weights) -> Result<Self> {
        let (d, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        Ok(Self {
            layernorm_before: LayerNorm::load(d, eps, &vb.pp("layernorm_before"))?,
            attention: Attention::new(&cfg.attention(), &vb.pp("attention"))?,
            lambda_1: vb.get(&[d], "lambda_1")?,
            layernorm_after: LayerNorm::load(d, eps, &vb.pp("layernorm_after"))?,
            mlp: Mlp::new(d, cfg.intermediate_size, cfg.hidden_act, &vb.pp("mlp"))?,
            lambda_2: vb.get(&[d], "lambda_2")?,
        })
    }

    /// `(b, n, d)` → `(b, n, d)`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let input = AttentionInput {
            rope: None,
            mask: &AttentionMask::Bidirectional,
            bias: None,
            cache: None,
            capture: false,
            residual: None,
        };
        let (attn, _) = self.attention.forward(&self.layernorm_before.forward(x)?, input)?;
        let x = (attn.broadcast_mul(&self.lambda_1)? + x)?;
        let mlp = self.mlp.forward(&self.layernorm_after.forward(&x)?)?;
        Ok((mlp.broadcast_mul(&self.lambda_2)? + x)?)
    }
}

/// InternVL's vision tower.
#[derive(Clone, Debug)]
pub struct InternVit {
    cfg: InternVitConfig,
    patch: PatchEmbedding,
    /// `(1, 1, d)`.
    cls_token: Tensor,
    /// `(1, 1 + N, d)`.
    position_embeddings: Tensor,
    layers: Vec<Layer>,
}

impl InternVit {
    /// Loads the tower from `vb`, its root (`model.vision_tower`).
    pub fn new(cfg: &InternVitConfig, vb: &Weights) -> Result<Self> {
        cfg.validate()?;
        let (d, c, p) = (cfg.hidden_size, cfg.num_channels, cfg.patch_size);
        let emb = vb.pp("embeddings");
        let proj = emb.pp("patch_embeddings").pp("projection");
        let patch = PatchEmbedding::new(proj.get(&[d, c, p, p], "weight")?, Some(proj.get(&[d], "bias")?))?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::new(cfg, &vb.pp("encoder.layer").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            cfg: cfg.clone(),
            patch,
            cls_token: emb.get(&[1, 1, d], "cls_token")?,
            position_embeddings: emb.get(&[1, cfg.num_patches() + 1, d], "position_embeddings")?,
            layers,
        })
    }

    pub fn config(&self) -> &InternVitConfig {
        &self.cfg
    }

    /// `pixels` `(b, C, S, S)` → the last layer's output `(b, 1 + N, d)`, CLS first.
    pub fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = pixels.dims4()?;
        let s = self.cfg.image_size;
        if (c, h, w) != (self.cfg.num_channels, s, s) {
            return Err(VisionError::Config(format!(
                "pixel values are {c}×{h}×{w}, the vision tower expects {}×{s}×{s}",
                self.cfg.num_channels
            )));
        }
        let dtype = self.position_embeddings.dtype();
        let patches = self.patch.forward_unfold(&pixels.to_dtype(dtype)?)?; // (b, N, d)
        let cls = self.cls_token.broadcast_as((b, 1, self.cfg.hidden_size))?;
        let mut x = Tensor::cat(&[&cls, &patches], 1)?.broadcast_add(&self.position_embeddings)?; // (b, 1 + N, d)
        for layer in &self.layers {
            x = layer.forward(&x)?;
        }
        Ok(x)
    }
}
