//! tessera's native single-stream model (ARCHITECTURE.md): a Llama-style decoder whose image
//! tokens are the image's patches projected straight into its width, placed before the text.

use serde::Deserialize;
use tessera_vision::{NativeVisionConfig, PreprocessConfig, Size};

use super::text::{TextFamily, TextFields};
use super::{ModelConfig, VisionSpec};

#[derive(Debug, Deserialize)]
pub struct NativeConfig {
    #[serde(flatten)]
    text: TextFields,
    image_size: usize,
    patch_size: usize,
    #[serde(default)]
    num_channels: Option<usize>,
    image_mean: Vec<f32>,
    image_std: Vec<f32>,
    #[serde(default)]
    resample: Option<Resample>,
}

/// Pillow's filter, by name or code.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
enum Resample {
    Code(u32),
    Name(ResampleName),
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ResampleName {
    Nearest = 0,
    Lanczos = 1,
    Bilinear = 2,
    Bicubic = 3,
}

impl NativeConfig {
    pub fn resolve(&self) -> Result<ModelConfig, String> {
        let text = TextFamily::Llama.resolve(&self.text, false)?;
        if self.patch_size == 0 || self.image_size == 0 || !self.image_size.is_multiple_of(self.patch_size) {
            return Err(format!(
                "`image_size` {} must be a positive multiple of `patch_size` {}",
                self.image_size, self.patch_size
            ));
        }
        let resample = match self.resample {
            None => 3,
            Some(Resample::Code(c)) => c,
            Some(Resample::Name(n)) => n as u32,
        };
        let encoder = NativeVisionConfig {
            image_size: self.image_size,
            patch_size: self.patch_size,
            num_channels: self.num_channels.unwrap_or(3),
            hidden_size: text.decoder.hidden_size,
        };
        // The processor's settings when the folder has none (a preprocessor_config.json wins).
        let preprocess = PreprocessConfig {
            do_resize: true,
            size: Some(Size::HeightWidth { height: self.image_size, width: self.image_size }),
            resample,
            do_center_crop: false,
            crop_size: None,
            do_rescale: true,
            rescale_factor: 1.0 / 255.0,
            do_normalize: true,
            image_mean: Some(self.image_mean.clone()),
            image_std: Some(self.image_std.clone()),
        };
        let mut cfg = ModelConfig::text_only("tessera_native", text);
        cfg.vision = Some(VisionSpec::Native { encoder, preprocess });
        Ok(cfg)
    }
}
