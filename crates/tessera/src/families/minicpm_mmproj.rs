//! MiniCPM-V 4.6's image side from llama.cpp's `mmproj` GGUF (projector type `minicpmv4_6`,
//! written by `conversion/minicpm.py`'s `MiniCPMV4_6VisionModel`; read by `clip.cpp`'s
//! `clip_graph_minicpmv4_6` and `mtmd.cpp`; llama.cpp 0c1e57098 as llama-cpp-python 0.3.36
//! vendors it). Its text model is a `qwen35` GGUF (`MiniCPMV4_6TextModel`, Qwen3.5's); the
//! tower, the window-attention ViT merger and the downsample MLP load from the file under the
//! root `minicpm.` ([`tessera_decoder::minicpm_names`]) and run as the folder's
//! (families/minicpmv4_6.rs).

use std::sync::Arc;

use serde_json::Value;

use super::image::{processor_stats, under_roots, ClipHeader, MmprojMetadata, MmprojTensor, ProcessorSettings};
use super::minicpmv4_6::{MiniCpmTowerConfig, MiniCpmV46Spec};
use super::mmproj::{MmprojInput, MmprojSide};
use super::text::TextFamily;

/// What `MiniCPMV4_6VisionModel.set_gguf_parameters` writes, in its order ([`from_mmproj`] reads
/// it back): the header with the processor's `scale_resolution` as `clip.vision.image_size`, the
/// merge as `projector.scale_factor` (4: "16x", 2: "4x"), the window merger's layer as
/// `wa_layer_indexes` (written under "4x" too), `clip.use_gelu`, the tower's epsilon.
pub(super) fn mmproj_metadata(
    spec: &MiniCpmV46Spec,
    settings: &ProcessorSettings,
    config: &Value,
    text_hidden: usize,
) -> MmprojMetadata {
    use tessera_decoder::gguf_write::MetaValue::{Bool, I32s, Str, F32};
    let t = &spec.tower;
    let scale = settings.image.get("scale_resolution").and_then(Value::as_u64).map(|v| v as usize);
    let layer = i32::try_from(t.insert_layer_id).map_err(|_| "insert_layer_id does not fit a GGUF i32".to_string())?;
    let eps = config["vision_config"]["layer_norm_eps"].as_f64().unwrap_or(1e-6);
    let mut md = ClipHeader {
        projection_dim: text_hidden,
        image_size: scale.unwrap_or(t.image_size),
        patch_size: t.patch_size,
        width: t.hidden_size,
        feed_forward: t.intermediate_size,
        blocks: t.num_hidden_layers,
        heads: t.num_attention_heads,
        mean: processor_stats(settings, "image_mean", [0.5; 3])?,
        std: processor_stats(settings, "image_std", [0.5; 3])?,
    }
    .keys()?;
    md.extend([
        ("clip.projector_type".into(), Str("minicpmv4_6".into())),
        ("clip.vision.projector.scale_factor".into(), super::image::gguf_u32(spec.merge)?),
        ("clip.vision.wa_layer_indexes".into(), I32s(vec![layer])),
        ("clip.use_gelu".into(), Bool(true)),
        ("clip.vision.attention.layer_norm_epsilon".into(), F32(eps as f32)),
    ]);
    Ok(md)
}

/// The checkpoint's tensors under the root `minicpm.` ([`tessera_decoder::minicpm_names`]);
/// under "4x" (merge 2) the window merger's are dropped, as the converter drops them.
pub(super) fn mmproj_tensors(spec: &MiniCpmV46Spec, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
    // `model.vision_tower.…` / `model.merger.…` (transformers 5's roots) or without `model.`.
    let rest = under_roots(stored, &["model"]).unwrap_or(stored);
    if spec.merge == 2 && rest.contains(".vit_merger.") {
        return Vec::new();
    }
    vec![MmprojTensor::named(format!("minicpm.{rest}"), dims)]
}

/// The image side of an `mmproj` GGUF of projector type `minicpmv4_6`, and its processor
/// settings in `preprocessor_config.json`'s terms. What the file states, and what llama.cpp
/// fixes where it states nothing:
/// - the tower: SigLIP from `clip.vision.{embedding_length, feed_forward_length, block_count,
///   patch_size, attention.head_count, attention.layer_norm_epsilon}`, tanh GELU
///   (`clip.use_gelu`); its table of learned positions is `v.position_embd.weight`'s rows, a
///   square grid (`clip.cpp` buckets positions into a fixed 70×70 grid, the real checkpoint's
///   980 / 14; tessera buckets into the table's own grid, as transformers does, which is the
///   same for every file whose table is 70×70);
/// - the mergers: `clip.vision.projector.scale_factor` 4 (`downsample_mode` "16x": the 2×2
///   window merger after layer `clip.vision.wa_layer_indexes[0]`, then the 2×2 downsample MLP)
///   or 2 ("4x": the MLP alone); one merger MLP (`mm.*`: the converter writes `mlp.0` only),
///   whose `mm.down` rows are the image tokens' width;
/// - the processor: `clip.vision.image_size` is the slices' `scale_resolution` (the converter
///   writes it there), `clip.vision.image_mean` / `image_std`, bicubic; at most 9 slices
///   (`mtmd-image.cpp` fixes `max_slice_nums` at 9, MiniCPMV4_6ImageProcessor's default);
///   `<image_id>N</image_id>` before each image as MiniCPMV4_6Processor writes it (llama.cpp's
///   `mtmd` writes none);
/// - the prompt: `<|image_pad|>` per token inside `<image>…</image>` / `<slice>…</slice>`, the
///   text model's tokens;
/// - positions: plain and consecutive, as for the folder (`mtmd` runs M-RoPE for Qwen's
///   projectors only): the `qwen35` GGUF's `rope.dimension_sections` are not used.
pub(crate) fn from_mmproj(input: &MmprojInput<'_>) -> std::result::Result<MmprojSide, String> {
    const TYPE: &str = "minicpmv4_6";
    let clip = &input.clip;
    if clip.bool("clip.use_gelu")? == Some(false) {
        return Err("`clip.use_gelu` is false: a minicpmv4_6 tower uses GELU".into());
    }
    let hidden_size = clip.usize("clip.vision.embedding_length")?;
    let patch_size = clip.usize("clip.vision.patch_size")?;
    let grid = match input.shape("v.position_embd.weight")? {
        [rows, d] if *d == hidden_size && rows.isqrt().pow(2) == *rows && *rows > 0 => rows.isqrt(),
        other => {
            return Err(format!(
                "`v.position_embd.weight` has shape {other:?}, not (n², {hidden_size}) for a square grid of positions"
            ))
        }
    };
    let (merge, mode) = match clip.usize_opt("clip.vision.projector.scale_factor")?.unwrap_or(4) {
        4 => (4, "16x"),
        2 => (2, "4x"),
        other => return Err(format!("`clip.vision.projector.scale_factor` is {other}: MiniCPM-V 4.6 merges 2 or 4")),
    };
    let num_hidden_layers = clip.usize("clip.vision.block_count")?;
    let insert_layer_id = match clip.ints_opt("clip.vision.wa_layer_indexes")?.as_deref() {
        None | Some([]) if merge == 2 => 0,
        Some([k]) => *k,
        None | Some([]) => {
            return Err("the metadata has no `clip.vision.wa_layer_indexes` (the window merger's layer)".into())
        }
        Some(more) => {
            return Err(format!("`clip.vision.wa_layer_indexes` is {more:?}: MiniCPM-V 4.6 has one window merger"))
        }
    };
    if merge == 4 && insert_layer_id >= num_hidden_layers {
        return Err(format!(
            "`clip.vision.wa_layer_indexes` {insert_layer_id} is past the tower's {num_hidden_layers} layers"
        ));
    }
    let width = match input.shape("mm.down.weight")? {
        [rows, _] => *rows,
        other => return Err(format!("`mm.down.weight` has shape {other:?}, not a matrix")),
    };
    let tower = MiniCpmTowerConfig {
        hidden_size,
        intermediate_size: clip.usize("clip.vision.feed_forward_length")?,
        num_hidden_layers,
        num_attention_heads: clip.usize("clip.vision.attention.head_count")?,
        image_size: grid * patch_size,
        patch_size,
        layer_norm_eps: clip.f64("clip.vision.attention.layer_norm_epsilon")?.unwrap_or(1e-6),
        insert_layer_id,
        window_kernel: (2, 2),
        drop_last_layer: false,
    };
    let image_token_id = input.token(TYPE, "<|image_pad|>")?;
    for text in ["<image>", "</image>", "<slice>", "</slice>", "<image_id>", "</image_id>"] {
        input.token(TYPE, text)?;
    }
    let spec = MiniCpmV46Spec {
        tower,
        merge,
        merge_kernel: (2, 2),
        merger_times: 1,
        image_token_id,
        video_token_id: input.tokenizer.token_to_id("<|video_pad|>"),
    };
    let image = clip.normalized(serde_json::json!({
        "scale_resolution": clip.usize("clip.vision.image_size")?,
        "patch_size": patch_size,
        "max_slice_nums": 9,
        "slice_mode": true,
        "downsample_mode": mode,
        "use_image_id": true,
        "resample": 3,
    }))?;
    Ok(MmprojSide {
        family: "minicpmv4_6",
        spec: Arc::new(spec),
        image,
        text: &[TextFamily::Qwen35],
        width,
        swapped_ffn: false,
        bidirectional_images: false,
        processor: serde_json::json!({}),
        plain_positions: true,
    })
}
