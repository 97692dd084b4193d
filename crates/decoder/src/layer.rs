//! One block of the decoder stack: a token mixer — grouped-query attention, or (Qwen3.5's
//! hybrid stack) a Gated DeltaNet linear-attention layer — and a gated MLP, each pre-normed
//! with a residual add. Follows transformers' `modeling_llama.py` (`x + attn(norm(x))`, then
//! `x + mlp(norm(x))`), Gemma 2/3's sandwich norms, and `Qwen3_5DecoderLayer`, which picks the
//! mixer per layer from `layer_types`, and Gemma 4's layers that differ (`Gemma4TextDecoderLayer`:
//! per-layer shapes, reused keys and values, a per-layer input's gate, a layer scalar).

use candle_core::Tensor;

use crate::attention::{Attention, AttentionInput, ProjectedKv};
use crate::decoder::DecoderConfig;
use crate::error::{DecoderError, Result};
use crate::gated_delta::GatedDeltaNet;
use crate::mlp::GatedMlp;
use crate::norm::RmsNorm;
use crate::per_layer::PerLayerGate;
use crate::weights::Weights;

/// How a layer mixes positions.
#[derive(Clone, Debug)]
enum Mixer {
    /// Softmax attention over the cached keys and values (`self_attn`).
    Attention(Attention),
    /// Gated DeltaNet over the sequence's recurrent state (`linear_attn`).
    Delta(GatedDeltaNet),
}

#[derive(Clone, Debug)]
pub(crate) struct DecoderLayer {
    input_layernorm: RmsNorm,
    mixer: Mixer,
    /// Llama: the MLP's input norm. With sandwich norms: the mixer output's norm.
    post_attention_layernorm: RmsNorm,
    mlp: GatedMlp,
    /// Sandwich norms: `pre_feedforward_layernorm` and `post_feedforward_layernorm`.
    feedforward_norms: Option<(RmsNorm, RmsNorm)>,
    /// The per-layer input's gate, after the MLP ([`crate::LayerVariants::per_layer_input`]).
    per_layer: Option<PerLayerGate>,
    /// `layer_scalar`, multiplying the layer's output.
    scalar: Option<Tensor>,
    /// The layer whose keys and values this one reuses.
    pub(crate) kv_source: Option<usize>,
}

/// What one layer's forward needs besides its input rows.
pub(crate) struct LayerCall<'a> {
    pub(crate) attention: AttentionInput<'a>,
    /// The keys and values of the layer this one reuses ([`DecoderLayer::kv_source`]).
    pub(crate) reused: Option<ProjectedKv>,
    /// The per-layer inputs `(b, t, layers, dim)` and this layer's index in them.
    pub(crate) per_layer: Option<(&'a Tensor, usize)>,
}

impl DecoderLayer {
    /// Layer `index` of the stack, from `vb` (its `layers.{index}` prefix), given the layers
    /// before it (a layer may reuse an earlier one's keys and values).
    pub(crate) fn new(cfg: &DecoderConfig, index: usize, earlier: &[DecoderLayer], vb: &Weights) -> Result<Self> {
        let (h, eps, style) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_style);
        let norm = |name: &str| RmsNorm::load(h, eps, style, &vb.pp(name));
        let shape = cfg.shape(index);
        let mixer = match (cfg.linear_layer(index), shape.kv_source.and_then(|j| earlier.get(j))) {
            (Some(delta), _) => Mixer::Delta(GatedDeltaNet::new(delta, &vb.pp("linear_attn"))?),
            (None, Some(DecoderLayer { mixer: Mixer::Attention(source), .. })) => {
                Mixer::Attention(Attention::reusing(&cfg.attention_of(index), &vb.pp("self_attn"), source)?)
            }
            (None, Some(_)) => {
                return Err(DecoderError::Config(format!(
                    "layer {index} reuses the keys and values of a layer without attention"
                )))
            }
            (None, None) => Mixer::Attention(Attention::new(&cfg.attention_of(index), &vb.pp("self_attn"))?),
        };
        let variants = cfg.variants.as_ref();
        Ok(Self {
            input_layernorm: norm("input_layernorm")?,
            mixer,
            post_attention_layernorm: norm("post_attention_layernorm")?,
            mlp: GatedMlp::new(h, shape.intermediate_size, cfg.hidden_act, false, &vb.pp("mlp"))?,
            feedforward_norms: match cfg.sandwich_norms {
                true => Some((norm("pre_feedforward_layernorm")?, norm("post_feedforward_layernorm")?)),
                false => None,
            },
            per_layer: match variants.and_then(|v| v.per_layer_input) {
                Some(dim) => Some(PerLayerGate::load(h, dim, eps, cfg.hidden_act, vb)?),
                None => None,
            },
            scalar: match variants.is_some_and(|v| v.layer_scalar) {
                true => Some(vb.get(&[1], "layer_scalar")?),
                false => None,
            },
            kv_source: shape.kv_source,
        })
    }

    /// `x` `(b, t, hidden)` → the layer's output, the attention weights when `input.capture`,
    /// and the keys and values its attention used (`None` for a linear-attention layer).
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        call: LayerCall<'_>,
    ) -> Result<(Tensor, Option<Tensor>, Option<ProjectedKv>)> {
        let LayerCall { attention: input, reused, per_layer } = call;
        let h = self.input_layernorm.forward(x)?;
        let Some((pre_ff, post_ff)) = &self.feedforward_norms else {
            let (x, weights, kv) = match &self.mixer {
                // The residual add runs inside the output projection's pass.
                Mixer::Attention(attn) => {
                    let (x, w, kv) = attn.forward_kv(&h, AttentionInput { residual: Some(x), ..input }, reused)?;
                    (x, w, Some(kv))
                }
                Mixer::Delta(net) => ((x + delta(net, &h, input)?)?, None, None),
            };
            let x = self.mlp.forward_add(&self.post_attention_layernorm.forward(&x)?, Some(&x))?;
            return Ok((self.finish(x, per_layer)?, weights, kv));
        };
        let (a, weights, kv) = match &self.mixer {
            Mixer::Attention(attn) => {
                let (a, w, kv) = attn.forward_kv(&h, input, reused)?;
                (a, w, Some(kv))
            }
            Mixer::Delta(net) => (delta(net, &h, input)?, None, None),
        };
        let x = (x + self.post_attention_layernorm.forward(&a)?)?;
        let m = self.mlp.forward_add(&pre_ff.forward(&x)?, None)?;
        let x = (&x + post_ff.forward(&m)?)?;
        Ok((self.finish(x, per_layer)?, weights, kv))
    }

    /// The per-layer input's gate and the layer scalar, when the layer has them.
    fn finish(&self, mut x: Tensor, per_layer: Option<(&Tensor, usize)>) -> Result<Tensor> {
        match (&self.per_layer, per_layer) {
            (Some(gate), Some((inputs, i))) => x = gate.forward(&x, inputs, i)?,
            (Some(_), None) => {
                return Err(DecoderError::Config("this decoder's layers need their per-layer inputs".into()))
            }
            (None, _) => {}
        }
        if let Some(s) = &self.scalar {
            x = x.broadcast_mul(s)?;
        }
        Ok(x)
    }
}

/// The Gated DeltaNet mixer over `h` `(1, t, hidden)` with the states its caches hold for this
/// layer: one cache continued by all `t` rows, or one row for each of several caches.
fn delta(net: &GatedDeltaNet, h: &Tensor, input: AttentionInput<'_>) -> Result<Tensor> {
    let (caches, layer) =
        input.cache.ok_or_else(|| DecoderError::Config("a linear-attention layer runs over a cache".into()))?;
    if input.capture {
        return Err(DecoderError::Config(format!(
            "layer {layer} is a linear-attention layer: it has no attention weights"
        )));
    }
    let per_cache = if caches.len() == 1 { h.dim(1)? } else { 1 };
    let mut states =
        caches.iter_mut().map(|c| c.delta_state(layer, per_cache, || net.new_state())).collect::<Result<Vec<_>>>()?;
    net.forward_sequences(h, &mut states)
}
