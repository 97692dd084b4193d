//! What varies from layer to layer in a decoder whose layers are not all alike (Gemma 4): each
//! layer's attention shape and MLP width, layers that reuse an earlier layer's keys and values,
//! and the per-layer inputs ("PLE") — a second, small embedding of every token for every layer,
//! mixed into the residual stream after each layer's MLP.
//!
//! Follows transformers 5.23's `modeling_gemma4.py`: `Gemma4TextModel.get_per_layer_inputs` /
//! `project_per_layer_inputs` ([`PerLayerEmbedding`]) and the end of
//! `Gemma4TextDecoderLayer.forward` ([`PerLayerGate`]).

use candle_core::{IndexOp, Tensor};

use crate::activation::Activation;
use crate::error::{DecoderError, Result};
use crate::linear::Linear;
use crate::norm::{NormStyle, RmsNorm};
use crate::weights::Weights;

/// One layer's shapes where they differ from the decoder's own fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    pub head_dim: usize,
    pub num_key_value_heads: usize,
    pub intermediate_size: usize,
    /// The values are the keys' projection (no `v_proj`; `attention_k_eq_v`).
    pub k_eq_v: bool,
    /// The earlier layer whose keys and values this one reuses (it has no `k_proj`, `v_proj`).
    pub kv_source: Option<usize>,
}

/// The decoder's per-layer variations ([`crate::DecoderConfig::variants`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerVariants {
    /// One per layer.
    pub shapes: Vec<LayerShape>,
    /// A parameter-free RMSNorm over each head's values.
    pub value_norm: bool,
    /// The width of each layer's per-layer input (`hidden_size_per_layer_input`), when the
    /// model has them.
    pub per_layer_input: Option<usize>,
    /// Each layer's output is multiplied by its stored `layer_scalar` (shape `(1,)`).
    pub layer_scalar: bool,
}

impl LayerVariants {
    /// Refuses shapes that do not fit a decoder of `layers` layers with `heads` query heads,
    /// naming the layer.
    pub fn validate(&self, layers: usize, heads: usize) -> Result<()> {
        let bad = |m: String| Err(DecoderError::Config(m));
        if self.shapes.len() != layers {
            return bad(format!("{} layer shapes for {layers} layers", self.shapes.len()));
        }
        for (i, s) in self.shapes.iter().enumerate() {
            if s.head_dim == 0 || !s.head_dim.is_multiple_of(2) || s.intermediate_size == 0 {
                return bad(format!(
                    "layer {i}: head_dim {} and intermediate_size {}",
                    s.head_dim, s.intermediate_size
                ));
            }
            if s.num_key_value_heads == 0 || !heads.is_multiple_of(s.num_key_value_heads) {
                return bad(format!("layer {i}: {} key/value heads do not group {heads} heads", s.num_key_value_heads));
            }
            if let Some(j) = s.kv_source {
                let ok = j < i && self.shapes[j].kv_source.is_none();
                let src = &self.shapes[j.min(i)];
                if !ok || (src.head_dim, src.num_key_value_heads) != (s.head_dim, s.num_key_value_heads) {
                    return bad(format!("layer {i} cannot reuse the keys and values of layer {j}"));
                }
            }
        }
        if self.per_layer_input == Some(0) {
            return bad("hidden_size_per_layer_input must be positive".into());
        }
        Ok(())
    }
}

/// The per-layer inputs of a sequence: a token's own per-layer embedding (`embed_tokens_per_layer`,
/// scaled by `√dim`) and a projection of its input embedding (`per_layer_model_projection`,
/// scaled by `hidden^-½`, then RMS-normed per layer), summed and scaled by `2^-½`.
#[derive(Clone, Debug)]
pub struct PerLayerEmbedding {
    table: Tensor,
    projection: Linear,
    norm: RmsNorm,
    layers: usize,
    dim: usize,
    hidden: usize,
}

impl PerLayerEmbedding {
    /// Loads `embed_tokens_per_layer`, `per_layer_model_projection` and
    /// `per_layer_projection_norm` from `vb` (the LM's root).
    pub fn load(vocab: usize, hidden: usize, layers: usize, dim: usize, eps: f64, vb: &Weights) -> Result<Self> {
        let width = layers * dim;
        Ok(Self {
            table: vb.get(&[vocab, width], "embed_tokens_per_layer.weight")?,
            projection: vb.linear(hidden, width, false, "per_layer_model_projection")?,
            norm: RmsNorm::load(dim, eps, NormStyle::Plain, &vb.pp("per_layer_projection_norm"))?,
            layers,
            dim,
            hidden,
        })
    }

    /// The token part alone: `ids` `(b, t)` → `(b, t, layers, dim)`. An id beyond the table is
    /// refused.
    pub fn token_part(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let vocab = self.table.dim(0)?;
        let flat = ids.flatten_all()?.to_dtype(candle_core::DType::U32)?;
        if let Some(&id) = flat.to_vec1::<u32>()?.iter().find(|&&id| id as usize >= vocab) {
            return Err(DecoderError::Config(format!(
                "token id {id} is beyond the {vocab} rows of embed_tokens_per_layer"
            )));
        }
        let rows = (self.table.index_select(&flat, 0)? * (self.dim as f64).sqrt())?;
        Ok(rows.reshape((b, t, self.layers, self.dim))?)
    }

    /// `ids` `(b, t)` and their input embeddings `embeds` `(b, t, hidden)` (as the decoder sees
    /// them, images spliced in) → the per-layer inputs `(b, t, layers, dim)`.
    pub fn forward(&self, ids: &Tensor, embeds: &Tensor) -> Result<Tensor> {
        let (b, t, _) = embeds.dims3()?;
        let projected = (self.projection.forward(embeds)? * (self.hidden as f64).powf(-0.5))?;
        let projected = self.norm.forward(&projected.reshape((b, t, self.layers, self.dim))?)?;
        Ok(((projected + self.token_part(ids)?)? * std::f64::consts::FRAC_1_SQRT_2)?)
    }
}

/// A layer's use of its per-layer input `p` `(b, t, dim)`:
/// `x + norm(per_layer_projection(act(per_layer_input_gate(x)) · p))`.
#[derive(Clone, Debug)]
pub struct PerLayerGate {
    gate: Linear,
    projection: Linear,
    norm: RmsNorm,
    act: Activation,
}

impl PerLayerGate {
    /// Loads `per_layer_input_gate`, `per_layer_projection` and `post_per_layer_input_norm` from
    /// the layer's `vb`.
    pub fn load(hidden: usize, dim: usize, eps: f64, act: Activation, vb: &Weights) -> Result<Self> {
        Ok(Self {
            gate: vb.linear(hidden, dim, false, "per_layer_input_gate")?,
            projection: vb.linear(dim, hidden, false, "per_layer_projection")?,
            norm: RmsNorm::load(hidden, eps, NormStyle::Plain, &vb.pp("post_per_layer_input_norm"))?,
            act,
        })
    }

    /// `x` `(b, t, hidden)`, `inputs` `(b, t, layers, dim)`, this layer's index → `(b, t, hidden)`.
    pub fn forward(&self, x: &Tensor, inputs: &Tensor, layer: usize) -> Result<Tensor> {
        let p = inputs.i((.., .., layer, ..))?;
        let gated = (self.gate.forward_act(x, self.act)? * p)?;
        Ok((x + self.norm.forward(&self.projection.forward(&gated)?)?)?)
    }
}
