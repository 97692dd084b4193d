//! Load-time quantization (`--quantize`, `--vision-int8`): the plans that pick each matrix's
//! type as llama-quantize would, and `tessera info`'s line about them.

use std::sync::Arc;

use tessera_decoder::{QuantMix, QuantPlan, Weights};

use crate::config::ModelConfig;
use crate::model::{text_roots, LoadOptions};

/// The load-time quantization plans of a folder's text model and image side
/// ([`LoadOptions::quantize`], [`LoadOptions::vision_q8_0`]).
pub(crate) fn plans(
    config: &ModelConfig,
    vb: &Weights,
    opts: &LoadOptions,
) -> (Option<Arc<QuantPlan>>, Option<Arc<QuantPlan>>) {
    let (lm, head) = text_roots(vb);
    let text = opts.quantize.map(|mix| {
        let tied = config.tie_word_embeddings || !vb.contains(&format!("{head}.weight"));
        Arc::new(QuantPlan::text(mix, config.decoder.num_hidden_layers, tied))
    });
    let vision_mix = if opts.vision_q8_0 { Some(QuantMix::Q8_0) } else { opts.quantize };
    let vision = vision_mix.zip(config.vision.as_ref()).map(|(mix, spec)| {
        let text_prefix = format!("{}.", lm.prefix());
        let names = vb.stored_names();
        // Each matrix with the name its mmproj gives it (llama-quantize categorizes and counts
        // by it), where the mmproj holds it whole (not Qwen2-VL's fused `qkv`, split there).
        let image_side = names.into_iter().filter(|n| !n.starts_with(&text_prefix)).map(|n| {
            let dims = vb.stored_shape(&n).unwrap_or_default();
            let gguf = match spec.mmproj_tensors(&n, &dims).as_slice() {
                [whole] if whole.part.is_none() => tessera_decoder::weights::gguf_vision_name(&whole.name),
                _ => None,
            };
            (n, gguf)
        });
        Arc::new(QuantPlan::vision(mix, image_side))
    });
    (text, vision)
}

/// `tessera info`'s line for a folder quantized at load time: the mix and the types chosen.
pub(crate) fn summary(text: Option<&QuantPlan>, vision: Option<&QuantPlan>) -> Option<String> {
    let part = |what: &str, plan: &QuantPlan| format!("{what} {}: {}", plan.mix, plan.summary());
    match (text, vision) {
        (None, None) => None,
        (Some(t), None) => Some(format!("{} at load time ({})", t.mix, part("text", t))),
        (None, Some(v)) => Some(format!("image side only at load time ({})", part("image side", v))),
        (Some(t), Some(v)) => Some(format!("{} at load time ({}; {})", t.mix, part("text", t), part("image side", v))),
    }
}
