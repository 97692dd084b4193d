//! The `vision_config` of the ViT towers the families use (SigLIP, CLIP, Idefics3's SigLIP),
//! with each config class's defaults as transformers v5.23 writes them.

use serde::Deserialize;
use tessera_decoder::Activation;
use tessera_vision::{TowerKind, VisionTowerConfig};

/// The vision config classes, by `vision_config.model_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum VisionClass {
    #[serde(rename = "siglip_vision_model")]
    Siglip,
    #[serde(rename = "clip_vision_model")]
    Clip,
    /// `Idefics3VisionConfig`: a SigLIP with other defaults.
    #[serde(rename = "idefics3_vision", alias = "idefics3")]
    Idefics3,
}

/// A `vision_config` as written (`null` counts as absent).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct VisionFields {
    pub model_type: Option<VisionClass>,
    pub hidden_size: Option<usize>,
    pub intermediate_size: Option<usize>,
    pub num_hidden_layers: Option<usize>,
    pub num_attention_heads: Option<usize>,
    pub hidden_act: Option<Activation>,
    pub image_size: Option<usize>,
    pub patch_size: Option<usize>,
    pub layer_norm_eps: Option<f64>,
    pub num_channels: Option<usize>,
}

impl VisionClass {
    /// The tower `f` describes under this class's defaults.
    pub fn resolve(self, f: &VisionFields) -> Result<VisionTowerConfig, String> {
        let d = match self {
            Self::Siglip => VisionTowerConfig {
                kind: TowerKind::Siglip,
                hidden_size: 768,
                intermediate_size: 3072,
                num_hidden_layers: 12,
                num_attention_heads: 12,
                num_channels: 3,
                image_size: 224,
                patch_size: 16,
                layer_norm_eps: 1e-6,
                hidden_act: Activation::GeluTanh,
            },
            Self::Clip => VisionTowerConfig {
                kind: TowerKind::Clip,
                hidden_size: 768,
                intermediate_size: 3072,
                num_hidden_layers: 12,
                num_attention_heads: 12,
                num_channels: 3,
                image_size: 224,
                patch_size: 32,
                layer_norm_eps: 1e-5,
                hidden_act: Activation::QuickGelu,
            },
            Self::Idefics3 => VisionTowerConfig {
                kind: TowerKind::Siglip,
                hidden_size: 1152,
                intermediate_size: 3072,
                num_hidden_layers: 12,
                num_attention_heads: 16,
                num_channels: 3,
                image_size: 224,
                patch_size: 32,
                layer_norm_eps: 1e-6,
                hidden_act: Activation::GeluTanh,
            },
        };
        let t = VisionTowerConfig {
            kind: d.kind,
            hidden_size: f.hidden_size.unwrap_or(d.hidden_size),
            intermediate_size: f.intermediate_size.unwrap_or(d.intermediate_size),
            num_hidden_layers: f.num_hidden_layers.unwrap_or(d.num_hidden_layers),
            num_attention_heads: f.num_attention_heads.unwrap_or(d.num_attention_heads),
            num_channels: f.num_channels.unwrap_or(d.num_channels),
            image_size: f.image_size.unwrap_or(d.image_size),
            patch_size: f.patch_size.unwrap_or(d.patch_size),
            layer_norm_eps: f.layer_norm_eps.unwrap_or(d.layer_norm_eps),
            hidden_act: f.hidden_act.unwrap_or(d.hidden_act),
        };
        t.validate().map_err(|e| e.to_string())?;
        Ok(t)
    }
}
