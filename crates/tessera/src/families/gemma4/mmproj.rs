//! Gemma 4's image side from llama.cpp's `mmproj` GGUF (projector type `gemma4v`, written by
//! `Gemma4VisionAudioModel` in the converter's `conversion/gemma.py`; read by `clip.cpp` and
//! `tools/mtmd/models/gemma4v.cpp`): the `clip.vision.*` sizes, and what the file states only
//! by its tensors or leaves to `clip.cpp` — clipped linears (each linear's
//! `input_min`/`input_max`/`output_min`/`output_max` present), standardization (`v.std_bias`,
//! `v.std_scale` present), the position tables' length (`v.position_embd`'s rows), the tower's
//! RoPE base (100, fixed by clip.cpp), the pooling kernel (`clip.vision.projector.scale_factor`,
//! 3 when absent, as clip.cpp). Read under the Hugging Face names of
//! [`tessera_decoder::gemma4v_names`].
//!
//! Two things the file cannot say are taken from transformers, the reference: the tower's MLP
//! activation (the converter writes no `clip.use_gelu`, so clip.cpp runs quick GELU where
//! Gemma 4's `hidden_activation` is `gelu_pytorch_tanh`), and the processor (images stretched
//! to the soft-token budget, where llama-mtmd letterboxes them). The budget, which no key
//! states, is `LoadOptions::image_max_tokens` (llama.cpp's `--image-max-tokens`), else the
//! processor's default 280.

use std::sync::Arc;

use tessera_decoder::Activation;
use tessera_vision::Gemma4VisionConfig;

use super::Gemma4Spec;
use crate::families::mmproj::{MmprojInput, MmprojSide};
use crate::families::text::TextFamily;

/// `Gemma4ImageProcessor`'s default `max_soft_tokens` (google/gemma-4-*'s processors).
const DEFAULT_SOFT_TOKENS: usize = 280;

pub(crate) fn from_mmproj(input: &MmprojInput<'_>) -> Result<MmprojSide, String> {
    let clip = &input.clip;
    let token = |text: &str| input.token("gemma4v", text);
    let hidden = clip.usize("clip.vision.embedding_length")?;
    let heads = clip.usize("clip.vision.attention.head_count")?;
    if heads == 0 || hidden % heads != 0 {
        return Err(format!("`clip.vision.embedding_length` {hidden} is not a multiple of the {heads} heads"));
    }
    let positions = match input.shape("v.position_embd.weight")? {
        [2, n, h] if *h == hidden => *n,
        other => return Err(format!("`v.position_embd.weight` has shape {other:?}, not (2, positions, {hidden})")),
    };
    let has = |name: &str| input.tensors.contains_key(name);
    let tower = Gemma4VisionConfig {
        hidden_size: hidden,
        intermediate_size: clip.usize("clip.vision.feed_forward_length")?,
        num_hidden_layers: clip.usize("clip.vision.block_count")?,
        num_attention_heads: heads,
        num_key_value_heads: heads,
        head_dim: hidden / heads,
        hidden_act: Activation::GeluTanh,
        rms_norm_eps: clip.f64("clip.vision.attention.layer_norm_epsilon")?.unwrap_or(1e-6),
        rope_theta: 100.0,
        pooling_kernel_size: clip.usize_opt("clip.vision.projector.scale_factor")?.unwrap_or(3),
        patch_size: clip.usize("clip.vision.patch_size")?,
        position_embedding_size: positions,
        use_clipped_linears: has("v.blk.0.attn_q.input_min"),
        standardize: has("v.std_bias"),
    };
    tower.validate().map_err(|e| e.to_string())?;
    // The processor does not normalize; the file's mean and std must leave pixels as they are.
    for (key, identity) in [("clip.vision.image_mean", 0.0), ("clip.vision.image_std", 1.0)] {
        if clip.floats(key).is_ok_and(|v| v.iter().any(|&x| x != identity)) {
            return Err(format!("`{key}` is not {identity}: Gemma 4's processor does not normalize pixels"));
        }
    }
    let width = match input.shape("mm.input_projection.weight")? {
        [text, vision] if *vision == hidden => *text,
        other => return Err(format!("`mm.input_projection.weight` has shape {other:?}, not (text width, {hidden})")),
    };
    let budget = input.image_max_tokens.unwrap_or(DEFAULT_SOFT_TOKENS);
    if !super::SOFT_TOKEN_BUDGETS.contains(&budget) {
        return Err(format!(
            "the image-token budget {budget} (--image-max-tokens) is not one of Gemma 4's {:?}",
            super::SOFT_TOKEN_BUDGETS
        ));
    }
    let image = serde_json::json!({
        "patch_size": tower.patch_size,
        "pooling_kernel_size": tower.pooling_kernel_size,
        "max_soft_tokens": budget,
        "do_resize": true,
        "resample": 3,
        "do_rescale": true,
        "rescale_factor": 1.0 / 255.0,
        "do_normalize": false,
    });
    let spec = Gemma4Spec {
        tower,
        image_token_id: token("<|image|>")?,
        boi_token_id: token("<|image>")?,
        eoi_token_id: token("<image|>")?,
    };
    Ok(MmprojSide {
        family: "gemma4",
        spec: Arc::new(spec),
        image,
        text: &[TextFamily::Gemma4],
        width,
        swapped_ffn: false,
        // llama.cpp decodes an image chunk both ways on the sliding layers, as transformers'
        // `use_bidirectional_attention: "vision"`.
        bidirectional_images: true,
        processor: serde_json::json!({}),
        plain_positions: false,
    })
}
