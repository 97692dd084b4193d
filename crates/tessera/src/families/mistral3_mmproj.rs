//! Mistral 3's llama.cpp pair: the `pixtral` mmproj read ([`from_mmproj`]) and written
//! (`tessera quantize`: [`mmproj_metadata`], [`mmproj_tensors`], the text model as llama.cpp's
//! `mistral3` architecture).

use std::sync::Arc;

use serde_json::Value;
use tessera_decoder::{Activation, RopeStyle};
use tessera_vision::PixtralVisionConfig;

use super::image::{gguf_u32, CLIP_MEAN, CLIP_STD};
use super::image::{processor_stats, under_roots, ClipHeader, MmprojMetadata, MmprojTensor, ProcessorSettings};
use super::mistral3::Mistral3Spec;
use super::mmproj::{MmprojInput, MmprojSide};
use super::text::TextFamily;

/// The architecture `conversion/mistral3.py` writes `Mistral3ForConditionalGeneration`'s text
/// model as (`Ministral3Model`: a `LlamaModel`, so Llama's keys and q/k row order).
pub(super) const TEXT_ARCH: &str = "mistral3";

/// The checkpoint roots of the tower and the projector.
const TOWER_ROOTS: [&str; 2] = ["model.vision_tower", "vision_tower"];
const PROJECTOR_ROOTS: [&str; 2] = ["model.multi_modal_projector", "multi_modal_projector"];

/// What `LlavaVisionModel.set_gguf_parameters` writes for a Hugging Face Pixtral tower, in its
/// order ([`from_mmproj`] reads it back): the header, `pixtral`, the tower's `layer_norm_eps`
/// (1e-5 when the config omits it, as the converter fills it in), `clip.use_silu` or
/// `clip.use_gelu`, and the top-level `spatial_merge_size` where the config states it.
pub(super) fn mmproj_metadata(
    spec: &Mistral3Spec,
    settings: &ProcessorSettings,
    config: &Value,
    text_hidden: usize,
) -> MmprojMetadata {
    use tessera_decoder::gguf_write::MetaValue::{Bool, Str, F32};
    let t = &spec.tower;
    let act = match t.hidden_act {
        Activation::Silu => "clip.use_silu",
        Activation::Gelu => "clip.use_gelu",
        other => return Err(format!("llama.cpp's pixtral converter writes a SiLU or GELU tower, not {other:?}")),
    };
    let vision = &config["vision_config"];
    let image_size = vision["image_size"].as_u64().map_or(1024, |v| v as usize);
    let eps = vision["layer_norm_eps"].as_f64().unwrap_or(1e-5);
    let mut md = ClipHeader {
        projection_dim: text_hidden,
        image_size,
        patch_size: t.patch_size,
        width: t.hidden_size,
        feed_forward: t.intermediate_size,
        blocks: t.num_hidden_layers,
        heads: t.num_attention_heads,
        mean: processor_stats(settings, "image_mean", CLIP_MEAN)?,
        std: processor_stats(settings, "image_std", CLIP_STD)?,
    }
    .keys()?;
    md.extend([
        ("clip.projector_type".into(), Str("pixtral".into())),
        ("clip.vision.attention.layer_norm_epsilon".into(), F32(eps as f32)),
        (act.into(), Bool(true)),
    ]);
    if !config["spatial_merge_size"].is_null() {
        md.push(("clip.vision.spatial_merge_size".into(), gguf_u32(spec.merge)?));
    }
    Ok(md)
}

/// The checkpoint's tensors under the root `pixtral.` ([`tessera_decoder::pixtral_names`]),
/// the tower's `q_proj` / `k_proj` rows permuted for interleaved RoPE as the converter does.
pub(super) fn mmproj_tensors(spec: &Mistral3Spec, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
    let (name, permute_heads) = if let Some(rest) = under_roots(stored, &TOWER_ROOTS) {
        let qk = rest.ends_with("q_proj.weight") || rest.ends_with("k_proj.weight");
        (format!("pixtral.vision_tower.{rest}"), qk.then_some(spec.tower.num_attention_heads))
    } else if let Some(rest) = under_roots(stored, &PROJECTOR_ROOTS) {
        (format!("pixtral.multi_modal_projector.{rest}"), None)
    } else {
        (stored.to_string(), None)
    };
    vec![MmprojTensor { name, dims: dims.to_vec(), part: None, permute_heads, change: None }]
}

/// The image side of an `mmproj` GGUF of projector type `pixtral` (llama.cpp's
/// `conversion/llava.py`, `LlavaVisionModel` over a `Mistral3ForConditionalGeneration`), and its
/// processor settings in `preprocessor_config.json`'s and `processor_config.json`'s terms. What
/// llama.cpp's `clip.cpp` (`PROJECTOR_TYPE_PIXTRAL`, `clip_graph_pixtral`) makes of the file, and
/// so tessera:
/// - the tower: Pixtral from `clip.vision.{embedding_length, feed_forward_length, block_count,
///   patch_size}` and `clip.vision.attention.head_count`, SiLU (`clip.use_silu`), GELU
///   (`clip.use_gelu`) or else quick GELU, 2-D RoPE of base 10000 (fixed in `clip.cpp`; the converter writes none
///   for a Hugging Face checkpoint); its q/k rows are permuted by the converter, so it rotates
///   them interleaved;
/// - the projector: `mm.input_norm` (RMSNorm with `clip.vision.attention.layer_norm_epsilon`,
///   which `clip.cpp` uses where transformers takes the text model's `rms_norm_eps`: both 1e-5 in
///   Mistral Small 3.1), the `mm.patch_merger` over `clip.vision.spatial_merge_size` blocks, then
///   `mm.1` → GELU → `mm.2` (biases when the file has them); the image tokens are `mm.2`'s width.
///   A file without the patch merger (Pixtral-12B's) is refused;
/// - the prompt: `[IMG]` per merged patch, `[IMG_BREAK]` after each row and `[IMG_END]` last, the
///   text model's tokens (`clip.cpp` splices `v.token_embd.img_break` in, the same row of the
///   embeddings; the converter writes it only when it reaches the embeddings);
/// - the processor: PixtralImageProcessor's bicubic fit within `clip.vision.image_size` (the
///   checkpoint's `vision_config.image_size`, which is the processor's `longest_edge` in Mistral
///   Small 3.1: 1540), sides rounded up to `patch × merge`, `clip.vision.image_mean` / `image_std`
///   (llama.cpp bounds the token count to 8–1024 instead; tessera keeps transformers' rule).
pub(crate) fn from_mmproj(input: &MmprojInput<'_>) -> std::result::Result<MmprojSide, String> {
    let clip = &input.clip;
    // As `clip.cpp` reads the two flags (neither: quick GELU).
    let hidden_act = match (clip.bool("clip.use_gelu")? == Some(true), clip.bool("clip.use_silu")? == Some(true)) {
        (true, true) => return Err("both `clip.use_gelu` and `clip.use_silu` are true".into()),
        (true, false) => Activation::Gelu,
        (false, true) => Activation::Silu,
        (false, false) => Activation::QuickGelu,
    };
    let tower = PixtralVisionConfig {
        hidden_size: clip.usize("clip.vision.embedding_length")?,
        intermediate_size: clip.usize("clip.vision.feed_forward_length")?,
        num_hidden_layers: clip.usize("clip.vision.block_count")?,
        num_attention_heads: clip.usize("clip.vision.attention.head_count")?,
        num_channels: 3,
        patch_size: clip.usize("clip.vision.patch_size")?,
        hidden_act,
        rope_theta: 10_000.0,
        rope_style: RopeStyle::Interleaved,
    };
    tower.validate().map_err(|e| e.to_string())?;
    if !input.tensors.contains_key("mm.patch_merger.weight") {
        return Err("the mmproj has no `mm.patch_merger.weight`: Pixtral without Mistral 3's patch merger \
                    (Pixtral-12B) is not supported"
            .into());
    }
    let merge = clip.usize_opt("clip.vision.spatial_merge_size")?.unwrap_or(1);
    if merge == 0 {
        return Err("`clip.vision.spatial_merge_size` is 0".into());
    }
    let d = tower.hidden_size;
    match input.shape("mm.patch_merger.weight")? {
        [rows, cols] if *rows == d && *cols == d * merge * merge => {}
        other => {
            return Err(format!(
                "`mm.patch_merger.weight` has shape {other:?}, not ({d}, {}) for `clip.vision.spatial_merge_size` \
                 {merge}",
                d * merge * merge
            ))
        }
    }
    let width = match input.shape("mm.2.weight")? {
        [rows, _] => *rows,
        other => return Err(format!("`mm.2.weight` has shape {other:?}, not a matrix")),
    };
    let image_token_id = input.token("pixtral", "[IMG]")?;
    for text in ["[IMG_BREAK]", "[IMG_END]"] {
        input.token("pixtral", text)?;
    }
    let spec = Mistral3Spec {
        tower,
        merge,
        projector_act: Activation::Gelu,
        projector_bias: input.tensors.contains_key("mm.1.bias"),
        projector_eps: clip.f64("clip.vision.attention.layer_norm_epsilon")?.unwrap_or(1e-5),
        image_token_id,
    };
    let image_size = clip.usize("clip.vision.image_size")?;
    let image = clip.normalized(serde_json::json!({
        "do_resize": true,
        "size": {"longest_edge": image_size},
        "resample": 3,
    }))?;
    let patch = spec.tower.patch_size;
    let processor = serde_json::json!({"patch_size": patch, "spatial_merge_size": merge});
    Ok(MmprojSide {
        family: "mistral3",
        spec: Arc::new(spec),
        image,
        text: &[TextFamily::Mistral, TextFamily::Llama],
        width,
        swapped_ffn: false,
        plain_positions: false,
        bidirectional_images: false,
        processor,
    })
}
