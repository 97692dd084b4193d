//! One block of the decoder stack: a token mixer — grouped-query attention, or (Qwen3.5's
//! hybrid stack) a Gated DeltaNet linear-attention layer — and a gated MLP, each pre-normed
//! with a residual add. Follows transformers' `modeling_llama.py` (`x + attn(norm(x))`, then
//! `x + mlp(norm(x))`), Gemma 2/3's sandwich norms, and `Qwen3_5DecoderLayer`, which picks the
//! mixer per layer from `layer_types`.

use candle_core::Tensor;

use crate::attention::{Attention, AttentionInput};
use crate::decoder::DecoderConfig;
use crate::error::{DecoderError, Result};
use crate::gated_delta::GatedDeltaNet;
use crate::mlp::GatedMlp;
use crate::norm::RmsNorm;
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
}

impl DecoderLayer {
    /// Layer `index` of the stack, from `vb` (its `layers.{index}` prefix).
    pub(crate) fn new(cfg: &DecoderConfig, index: usize, vb: &Weights) -> Result<Self> {
        let (h, eps, style) = (cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_style);
        let norm = |name: &str| RmsNorm::load(h, eps, style, &vb.pp(name));
        let mixer = match cfg.linear_layer(index) {
            Some(delta) => Mixer::Delta(GatedDeltaNet::new(delta, &vb.pp("linear_attn"))?),
            None => Mixer::Attention(Attention::new(&cfg.attention(), &vb.pp("self_attn"))?),
        };
        Ok(Self {
            input_layernorm: norm("input_layernorm")?,
            mixer,
            post_attention_layernorm: norm("post_attention_layernorm")?,
            mlp: GatedMlp::new(h, cfg.intermediate_size, cfg.hidden_act, false, &vb.pp("mlp"))?,
            feedforward_norms: match cfg.sandwich_norms {
                true => Some((norm("pre_feedforward_layernorm")?, norm("post_feedforward_layernorm")?)),
                false => None,
            },
        })
    }

    /// `x` `(b, t, hidden)` → the layer's output, and the attention weights when `input.capture`.
    pub(crate) fn forward(&self, x: &Tensor, input: AttentionInput<'_>) -> Result<(Tensor, Option<Tensor>)> {
        let h = self.input_layernorm.forward(x)?;
        let Some((pre_ff, post_ff)) = &self.feedforward_norms else {
            let x = match &self.mixer {
                // The residual add runs inside the output projection's pass.
                Mixer::Attention(attn) => {
                    let (x, weights) = attn.forward(&h, AttentionInput { residual: Some(x), ..input })?;
                    let x = self.mlp.forward_add(&self.post_attention_layernorm.forward(&x)?, Some(&x))?;
                    return Ok((x, weights));
                }
                Mixer::Delta(net) => (x + delta(net, &h, input)?)?,
            };
            let x = self.mlp.forward_add(&self.post_attention_layernorm.forward(&x)?, Some(&x))?;
            return Ok((x, None));
        };
        let (a, weights) = match &self.mixer {
            Mixer::Attention(attn) => attn.forward(&h, input)?,
            Mixer::Delta(net) => (delta(net, &h, input)?, None),
        };
        let x = (x + self.post_attention_layernorm.forward(&a)?)?;
        let m = self.mlp.forward_add(&pre_ff.forward(&x)?, None)?;
        let x = (&x + post_ff.forward(&m)?)?;
        Ok((x, weights))
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
