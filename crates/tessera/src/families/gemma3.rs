//! Gemma 3 (the 4B-it class): a SigLIP tower (896 px, patches of 14), its 64×64 patch grid
//! average-pooled to 16×16 = 256 tokens, `mm_soft_emb_norm` and one projection, a Gemma 3 text
//! model. The chat template writes `<start_of_image>` per image, which the processor expands to
//! `\n\n<start_of_image>` + 256 image tokens + `<end_of_image>\n\n`; the tokens of each image
//! attend to each other both ways on the prompt's forward (in the sliding-window layers within
//! the window). The image token may lie outside the text vocabulary: it embeds as id 0 before its
//! features replace it, as the reference does.

use std::sync::Arc;

use serde::Deserialize;
use tessera_decoder::{Activation, NormStyle};
use tessera_vision::{FeatureLayer, TowerKind, VisionTowerConfig};

use super::image::{
    gguf_u32, processor_stats, under_roots, ClipHeader, MmprojMetadata, MmprojTensor, ProcessorSettings,
};
use super::llava::{PROJECTOR_ROOTS, TOWER_ROOTS};
use super::mmproj::{MmprojInput, MmprojSide};
use super::text::{TensorChange, TextFamily, TextSubConfig};
use super::tower::{ConnectorConfig, Placeholder, ProcessorRule, TowerSpec, WeightRoots};
use super::vit::{VisionClass, VisionFields};
use super::{text_config, ModelConfig, PromptStyle, TokenIds};

#[derive(Debug, Deserialize)]
pub struct Gemma3Config {
    #[serde(default)]
    text_config: Option<TextSubConfig>,
    #[serde(default)]
    vision_config: VisionFields,
    #[serde(default)]
    mm_tokens_per_image: Option<usize>,
    #[serde(default)]
    boi_token_index: Option<u32>,
    #[serde(default)]
    eoi_token_index: Option<u32>,
    #[serde(default)]
    image_token_index: Option<u32>,
    #[serde(default)]
    image_token_id: Option<u32>,
    #[serde(default)]
    tie_word_embeddings: Option<bool>,
    #[serde(default)]
    eos_token_id: Option<TokenIds>,
}

impl Gemma3Config {
    pub fn resolve(&self) -> Result<ModelConfig, String> {
        let text = text_config(&self.text_config, TextFamily::Gemma3)?;
        let class = self.vision_config.model_type.unwrap_or(VisionClass::Siglip);
        let tower = class.resolve(&self.vision_config).map_err(|e| format!("vision_config: {e}"))?;
        let tokens = self.mm_tokens_per_image.unwrap_or(256);
        let per_side = (tokens as f64).sqrt() as usize;
        let patches = tower.patches_per_side();
        if per_side == 0 || per_side * per_side != tokens || !patches.is_multiple_of(per_side) {
            return Err(format!(
                "mm_tokens_per_image {tokens} is not a square that pools the tower's {patches}×{patches} patches evenly"
            ));
        }
        let spec = tower_spec(
            tower,
            ConnectorConfig::AvgPool { tokens_per_side: per_side, norm: NormStyle::OnePlusWeight },
            (
                self.image_token_index.or(self.image_token_id).unwrap_or(262_144),
                self.boi_token_index.unwrap_or(255_999),
                self.eoi_token_index.unwrap_or(256_000),
            ),
            ProcessorRule::Single { tokens, stated_len: Some("image_seq_length"), pan_and_scan: true },
            WeightRoots { tower: TOWER_ROOTS, connector: PROJECTOR_ROOTS, connector_probe: "" },
        );
        let mut cfg = ModelConfig::vlm(
            "gemma3",
            text,
            self.tie_word_embeddings,
            self.eos_token_id.as_ref(),
            PromptStyle::Chat,
            spec,
        );
        cfg.bidirectional_images = true;
        Ok(cfg)
    }
}

/// A Gemma 3 image side: the SigLIP tower's post-norm output, no class token, `connector`, each
/// image `begin` + image tokens + `end` (`(image, begin, end)` ids).
fn tower_spec(
    tower: VisionTowerConfig,
    connector: ConnectorConfig,
    (image, begin, end): (u32, u32, u32),
    processor: ProcessorRule,
    weights: WeightRoots,
) -> TowerSpec {
    TowerSpec {
        feature: FeatureLayer::PostNorm,
        drop_class_token: false,
        connector,
        image_token_id: image,
        placeholder: Placeholder::Wrapped { begin, end },
        processor,
        weights,
        tower,
    }
}

/// The image side of an `mmproj` GGUF of projector type `gemma3` (llama.cpp's
/// `conversion/gemma.py`, `Gemma3VisionModel`), and its processor settings in
/// `preprocessor_config.json`'s terms. The image, begin and end tokens are the text model's
/// `<image_soft_token>`, `<start_of_image>` and `<end_of_image>`.
///
/// What llama.cpp's `clip.cpp` (`clip_graph_siglip`, `PROJECTOR_TYPE_GEMMA3`) makes of the file,
/// and so tessera:
/// - the tower: SigLIP from `clip.vision.{embedding_length, feed_forward_length, block_count,
///   image_size, patch_size}`, `clip.vision.attention.{head_count, layer_norm_epsilon}`, the tanh
///   GELU (`clip.use_gelu`), read after `v.post_ln`;
/// - the connector: the patch grid average-pooled by `clip.vision.projector.scale_factor` per
///   side (4 when absent, what every real Gemma 3 has: 64×64 patches to 16×16 tokens), then
///   `mm.soft_emb_norm` — the converter stores `1 + w`, so it is read as a plain RMSNorm — with
///   the tower's epsilon, then `mm.input_projection` stored as the checkpoint's `(vision, text)`
///   matrix (no transpose), its columns the image tokens' width;
/// - the prompt: each image's tokens attend to each other both ways (llama.cpp's
///   `mtmd_decode_use_non_causal` for this projector), as in transformers;
/// - the processor: Gemma3ImageProcessor's bilinear resize to `image_size` square (llama.cpp's
///   `RESIZE_ALGO_BILINEAR`), with `clip.vision.image_mean` / `image_std`; no pan-and-scan
///   (llama.cpp has none, and the file states none of its settings).
pub(crate) fn from_mmproj(input: &MmprojInput<'_>) -> Result<MmprojSide, String> {
    let clip = &input.clip;
    let token = |text: &str| input.token("gemma3", text);
    let tower = clip.siglip_tower("Gemma 3")?;
    let image_size = tower.image_size;
    let patches = tower.patches_per_side();
    let merge = clip.usize_opt("clip.vision.projector.scale_factor")?.unwrap_or(4);
    if merge == 0 || !patches.is_multiple_of(merge) {
        return Err(format!(
            "`clip.vision.projector.scale_factor` {merge} does not pool the tower's {patches}×{patches} patches evenly"
        ));
    }
    let per_side = patches / merge;
    let width = match input.shape("mm.input_projection.weight")? {
        [rows, cols] if *rows == tower.hidden_size => *cols,
        other => {
            return Err(format!(
                "`mm.input_projection.weight` has shape {other:?}, not ({}, text width)",
                tower.hidden_size
            ))
        }
    };
    let spec = tower_spec(
        tower,
        ConnectorConfig::AvgPool { tokens_per_side: per_side, norm: NormStyle::Plain },
        (token("<image_soft_token>")?, token("<start_of_image>")?, token("<end_of_image>")?),
        ProcessorRule::Single { tokens: per_side * per_side, stated_len: None, pan_and_scan: false },
        WeightRoots { tower: &["model.vision_model"], connector: &["multi_modal_projector"], connector_probe: "" },
    );
    let image = clip.normalized(serde_json::json!({
        "do_resize": true,
        "size": {"height": image_size, "width": image_size},
        "resample": 2,
        "do_pan_and_scan": false,
    }))?;
    Ok(MmprojSide {
        family: "gemma3",
        spec: Arc::new(spec),
        image,
        text: &[TextFamily::Gemma3],
        width,
        swapped_ffn: false,
        plain_positions: false,
        bidirectional_images: true,
        processor: serde_json::json!({}),
    })
}

/// The `clip.*` metadata of the mmproj llama.cpp's converter writes for a Gemma 3 checkpoint
/// (`Gemma3VisionModel` over `MmprojModel`), in its order: what [`from_mmproj`] reads back.
/// `clip.vision.projector.scale_factor` (patches per side over image tokens per side) is
/// written only when it is not 4, as the converter writes it; the mean and std are the
/// processor's, else Gemma3ImageProcessor's 0.5.
pub(super) fn mmproj_metadata(spec: &TowerSpec, settings: &ProcessorSettings, text_hidden: usize) -> MmprojMetadata {
    use tessera_decoder::gguf_write::MetaValue::{Bool, Str, F32};
    let t = &spec.tower;
    if t.kind != TowerKind::Siglip || t.hidden_act != Activation::GeluTanh || spec.feature != FeatureLayer::PostNorm {
        return Err(format!(
            "llama.cpp's gemma3 projector reads a tanh-GELU SigLIP tower's post-norm output, not {:?} {:?} {:?}",
            t.kind, t.hidden_act, spec.feature
        ));
    }
    let ConnectorConfig::AvgPool { tokens_per_side, .. } = spec.connector else {
        return Err("llama.cpp's gemma3 projector average-pools the patch grid".into());
    };
    let scale = t.patches_per_side() / tokens_per_side.max(1);
    if let Some(stated) = settings.processor.get("image_seq_length").and_then(serde_json::Value::as_u64) {
        // The converter derives the pooling from the processor's `image_seq_length`.
        if stated as usize != tokens_per_side * tokens_per_side {
            return Err(format!(
                "image_seq_length {stated} disagrees with the model's {} image tokens",
                tokens_per_side * tokens_per_side
            ));
        }
    }
    let stats = |key: &str| processor_stats(settings, key, [0.5; 3]);
    let mut md = ClipHeader::of_tower(t, text_hidden, stats("image_mean")?, stats("image_std")?).keys()?;
    md.extend([
        ("clip.projector_type".into(), Str("gemma3".into())),
        ("clip.vision.attention.layer_norm_epsilon".into(), F32(t.layer_norm_eps as f32)),
        ("clip.use_gelu".into(), Bool(true)),
    ]);
    if scale != 4 {
        md.push(("clip.vision.projector.scale_factor".into(), gguf_u32(scale)?));
    }
    Ok(md)
}

/// The mmproj tensor of the checkpoint tensor `stored`, named as
/// [`gguf_vision_name`](tessera_decoder::weights::gguf_vision_name) reads it: the tower under
/// `model.vision_model.` (its SigLIP pooling head, unused, dropped as the converter drops it),
/// the projector's `mm_input_projection_weight` as the converter renames it
/// (`mm_input_projection.weight`), `mm_soft_emb_norm` stored as `1 + w`.
pub(super) fn mmproj_tensors(stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
    let (name, plus_one) = if let Some(rest) = under_roots(stored, PROJECTOR_ROOTS) {
        let rest = rest.replace("_weight", ".weight");
        let plus_one = rest == "mm_soft_emb_norm.weight";
        (format!("multi_modal_projector.{rest}"), plus_one)
    } else if let Some(rest) = under_roots(stored, TOWER_ROOTS) {
        if rest.starts_with("head.") {
            return Vec::new();
        }
        (format!("model.vision_model.{rest}"), false)
    } else {
        (stored.to_string(), false)
    };
    let mut piece = MmprojTensor::named(name, dims);
    if plus_one {
        piece.change = Some(TensorChange::plus_one(dims));
    }
    vec![piece]
}
