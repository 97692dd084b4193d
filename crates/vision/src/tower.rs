//! Vision transformers (Dosovitskiy et al. 2020): the SigLIP tower (Zhai et al. 2023) of
//! SmolVLM/Idefics3, PaliGemma and LLaVA-interleave, and the CLIP tower (Radford et al. 2021)
//! of LLaVA-1.5. One encoder, two embedding stems:
//!
//! - SigLIP (`siglip_vision_model`, `idefics3_vision`): patch Conv2d with bias + learned
//!   positions; encoder; `post_layernorm`.
//! - CLIP (`clip_vision_model`): patch Conv2d without bias, a class token prepended, learned
//!   positions, `pre_layrnorm` (sic, the checkpoint's name) before the encoder.
//!
//! Encoder layers are pre-norm: `x + attn(ln1(x))`, then `x + mlp(ln2(x))`, with bidirectional
//! multi-head attention (biases on q/k/v/out) from `tessera-decoder` and a `fc1 → act → fc2` MLP.
//! Follows transformers' `modeling_siglip.py` / `modeling_clip.py` (v5.23); tensor names are the
//! checkpoints' (`embeddings.patch_embedding`, `encoder.layers.{i}.self_attn.q_proj`, …).

use candle_core::Tensor;
use serde::Deserialize;
use tessera_decoder::{Activation, Attention, AttentionConfig, AttentionInput, AttentionMask, LayerNorm, Mlp, Weights};

use crate::error::{Result, VisionError};
use crate::patchify::PatchEmbedding;

/// Which embedding stem a tower has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum TowerKind {
    /// Patches + positions, post-layernorm (SigLIP, Idefics3's SigLIP).
    Siglip,
    /// Class token + patches + positions, pre-layernorm (CLIP).
    Clip,
}

/// A vision tower's `vision_config`, with transformers' defaults filled in by the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionTowerConfig {
    pub kind: TowerKind,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_channels: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub layer_norm_eps: f64,
    pub hidden_act: Activation,
}

impl VisionTowerConfig {
    /// Patches per side of the (square) input; like the reference's Conv2d (`padding="valid"`),
    /// pixels past the last whole patch are dropped (SigLIP-so400m: 384 / 14 → 27).
    pub fn patches_per_side(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// Patch tokens per image (without CLIP's class token).
    pub fn num_patches(&self) -> usize {
        self.patches_per_side().pow(2)
    }

    /// Tokens the encoder runs over: the patches, plus the class token for CLIP.
    pub fn num_positions(&self) -> usize {
        self.num_patches() + usize::from(self.kind == TowerKind::Clip)
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(VisionError::Config(m));
        if self.patch_size == 0 || self.image_size < self.patch_size {
            return bad(format!("vision image_size {} holds no whole patch of {}", self.image_size, self.patch_size));
        }
        check_heads(self.hidden_size, self.num_attention_heads)
    }

    pub(crate) fn attention(&self) -> AttentionConfig {
        vit_attention(self.hidden_size, self.num_attention_heads, true, "out_proj")
    }
}

/// A ViT's width split over its heads: refused unless whole.
pub(crate) fn check_heads(hidden_size: usize, heads: usize) -> Result<()> {
    if heads == 0 || !hidden_size.is_multiple_of(heads) {
        return Err(VisionError::Config(format!(
            "vision hidden_size {hidden_size} is not a multiple of num_attention_heads {heads}"
        )));
    }
    Ok(())
}

/// A ViT block's attention: full multi-head (as many key/value heads as query heads), softmax
/// scale 1/√head_dim, a biased output projection named `out_name`.
pub(crate) fn vit_attention(
    hidden_size: usize,
    heads: usize,
    qkv_bias: bool,
    out_name: &'static str,
) -> AttentionConfig {
    let head_dim = hidden_size / heads;
    AttentionConfig {
        hidden_size,
        num_heads: heads,
        num_kv_heads: heads,
        head_dim,
        qkv_bias,
        out_bias: true,
        scale: 1.0 / (head_dim as f64).sqrt(),
        out_name,
        output_gate: false,
        softcap: None,
        qk_norm: None,
        k_eq_v: false,
        v_norm: false,
    }
}

/// Which of the tower's hidden states a model reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureLayer {
    /// The last layer's output after `post_layernorm` (SigLIP's `last_hidden_state`: PaliGemma,
    /// Idefics3).
    PostNorm,
    /// transformers' `hidden_states[k]`: the encoder input for 0 (CLIP: after `pre_layrnorm`),
    /// the output of layer `k` otherwise; later layers are not run (LLaVA's
    /// `vision_feature_layer`, e.g. −2 → `k = layers − 1`).
    Hidden(usize),
}

#[derive(Clone, Debug)]
pub(crate) struct EncoderLayer {
    layer_norm1: LayerNorm,
    self_attn: Attention,
    layer_norm2: LayerNorm,
    mlp: Mlp,
}

impl EncoderLayer {
    pub(crate) fn new(cfg: &VisionTowerConfig, vb: &Weights) -> Result<Self> {
        let (h, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        Ok(Self {
            layer_norm1: LayerNorm::load(h, eps, &vb.pp("layer_norm1"))?,
            self_attn: Attention::new(&cfg.attention(), &vb.pp("self_attn"))?,
            layer_norm2: LayerNorm::load(h, eps, &vb.pp("layer_norm2"))?,
            mlp: Mlp::new(h, cfg.intermediate_size, cfg.hidden_act, &vb.pp("mlp"))?,
        })
    }

    /// `(b, n, d)` → `(b, n, d)`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let input = AttentionInput {
            rope: None,
            mask: &AttentionMask::Bidirectional,
            bias: None,
            cache: None,
            capture: false,
            residual: Some(x),
        };
        let (x, _) = self.self_attn.forward(&self.layer_norm1.forward(x)?, input)?;
        Ok(self.mlp.forward_add(&self.layer_norm2.forward(&x)?, Some(&x))?)
    }
}

#[derive(Clone, Debug)]
pub struct VisionTower {
    cfg: VisionTowerConfig,
    patch: PatchEmbedding,
    class_embedding: Option<Tensor>,
    /// `(num_positions, d)`.
    position_embedding: Tensor,
    pre_layrnorm: Option<LayerNorm>,
    layers: Vec<EncoderLayer>,
    post_layernorm: Option<LayerNorm>,
}

impl VisionTower {
    /// Loads a tower from `vb` (its root, e.g. `model.vision_model` or
    /// `model.vision_tower.vision_model`). `post_layernorm` is loaded only when `with_post_norm`
    /// (LLaVA never reads it; some checkpoints drop it).
    pub fn new(cfg: &VisionTowerConfig, vb: &Weights, with_post_norm: bool) -> Result<Self> {
        cfg.validate()?;
        let (d, c, p) = (cfg.hidden_size, cfg.num_channels, cfg.patch_size);
        let emb = vb.pp("embeddings");
        let weight = emb.get(&[d, c, p, p], "patch_embedding.weight")?;
        let (bias, class_embedding, pre_layrnorm) = match cfg.kind {
            TowerKind::Siglip => (Some(emb.get(&[d], "patch_embedding.bias")?), None, None),
            TowerKind::Clip => (
                None,
                Some(emb.get(&[d], "class_embedding")?),
                Some(LayerNorm::load(d, cfg.layer_norm_eps, &vb.pp("pre_layrnorm"))?),
            ),
        };
        let position_embedding = emb.get(&[cfg.num_positions(), d], "position_embedding.weight")?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| EncoderLayer::new(cfg, &vb.pp("encoder.layers").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        let post_layernorm =
            if with_post_norm { Some(LayerNorm::load(d, cfg.layer_norm_eps, &vb.pp("post_layernorm"))?) } else { None };
        Ok(Self {
            cfg: cfg.clone(),
            patch: PatchEmbedding::new(weight, bias)?,
            class_embedding,
            position_embedding,
            pre_layrnorm,
            layers,
            post_layernorm,
        })
    }

    pub fn config(&self) -> &VisionTowerConfig {
        &self.cfg
    }

    /// The embeddings the encoder reads: `pixels` `(b, C, S, S)` → `(b, num_positions, d)`.
    fn embed(&self, pixels: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = pixels.dims4()?;
        let s = self.cfg.image_size;
        if (c, h, w) != (self.cfg.num_channels, s, s) {
            return Err(VisionError::Config(format!(
                "pixel values are {c}×{h}×{w}, the vision tower expects {}×{s}×{s}",
                self.cfg.num_channels
            )));
        }
        let dtype = self.position_embedding.dtype();
        let covered = self.cfg.patches_per_side() * self.cfg.patch_size;
        let pixels = pixels.narrow(2, 0, covered)?.narrow(3, 0, covered)?.contiguous()?;
        let patches = self.patch.forward_unfold(&pixels.to_dtype(dtype)?)?; // (b, N, d)
        let x = match &self.class_embedding {
            Some(cls) => {
                let cls = cls.reshape((1, 1, ()))?.broadcast_as((b, 1, self.cfg.hidden_size))?;
                Tensor::cat(&[&cls, &patches], 1)? // (b, 1 + N, d)
            }
            None => patches,
        };
        let x = x.broadcast_add(&self.position_embedding)?;
        match &self.pre_layrnorm {
            Some(ln) => Ok(ln.forward(&x)?),
            None => Ok(x),
        }
    }

    /// `pixels` `(b, C, S, S)` → the hidden states `layer` names, `(b, num_positions, d)`.
    pub fn forward(&self, pixels: &Tensor, layer: FeatureLayer) -> Result<Tensor> {
        let run = match layer {
            FeatureLayer::PostNorm => self.layers.len(),
            FeatureLayer::Hidden(k) if k <= self.layers.len() => k,
            FeatureLayer::Hidden(k) => {
                return Err(VisionError::Config(format!(
                    "vision feature layer {k} is out of range: the tower has {} layers",
                    self.layers.len()
                )))
            }
        };
        let mut x = self.embed(pixels)?;
        for l in &self.layers[..run] {
            x = l.forward(&x)?;
        }
        match (layer, &self.post_layernorm) {
            (FeatureLayer::PostNorm, Some(ln)) => Ok(ln.forward(&x)?),
            (FeatureLayer::PostNorm, None) => {
                Err(VisionError::Config("this vision tower was loaded without its post_layernorm".into()))
            }
            (FeatureLayer::Hidden(_), _) => Ok(x),
        }
    }
}

/// Drops CLIP's class token: `(b, 1 + N, d)` → `(b, N, d)` (LLaVA's `"default"` strategy).
pub fn drop_class_token(x: &Tensor) -> Result<Tensor> {
    let n = x.dim(1)?;
    Ok(x.narrow(1, 1, n - 1)?)
}
