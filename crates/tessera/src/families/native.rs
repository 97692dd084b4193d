//! tessera's native single-stream model (ARCHITECTURE.md): a Llama-style decoder whose image
//! tokens are the image's patches projected straight into its width, placed before the text.

use std::sync::Arc;

use candle_core::{Device, Tensor};
use serde::Deserialize;
use tessera_vision::{preprocess, NativePatchEncoder, NativeVisionConfig, PreprocessConfig, RgbImage, Size};

use super::image::{ImageFeatures, ImageLoad, ImageSide, ImageSpec};
use super::text::{TextFamily, TextFields};
use super::ModelConfig;
use crate::error::{Result, TesseraError};

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
    pub fn resolve(&self) -> std::result::Result<ModelConfig, String> {
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
        cfg.vision = Some(Arc::new(NativeSpec { encoder, preprocess }));
        Ok(cfg)
    }
}

/// The native model's image side: its patch encoder, and the processor settings its config
/// implies (a `preprocessor_config.json` in the folder replaces them).
#[derive(Debug, Clone, PartialEq)]
pub struct NativeSpec {
    pub encoder: NativeVisionConfig,
    pub preprocess: PreprocessConfig,
}

impl ImageSpec for NativeSpec {
    fn load(&self, at: &ImageLoad<'_>) -> Result<Box<dyn ImageSide>> {
        let path = at.dir.join("preprocessor_config.json");
        let preprocess = if let Some(json) = crate::model::read_json_opt(&path)? {
            let cfg: PreprocessConfig = serde_json::from_value(json)
                .map_err(|e| TesseraError::Config { path: path.clone(), reason: e.to_string() })?;
            cfg.validate().map_err(|e| TesseraError::Config { path: path.clone(), reason: e.to_string() })?;
            let side = self.encoder.image_size;
            let (h, w) = match cfg.size {
                Some(Size::HeightWidth { height, width }) if cfg.do_resize => (height, width),
                _ => (0, 0),
            };
            if (h, w) != (side, side) {
                return Err(TesseraError::Config {
                    path,
                    reason: format!(
                        "the model takes {side}×{side} images: `size` must be {{\"height\": {side}, \"width\": \
                         {side}}} with `do_resize`"
                    ),
                });
            }
            cfg
        } else {
            self.preprocess.clone()
        };
        Ok(Box::new(NativeImages { encoder: NativePatchEncoder::new(self.encoder, at.weights)?, preprocess }))
    }
}

/// The native model's loaded image side: one image, its patches projected into the decoder's
/// width with learned positions, placed before the text.
struct NativeImages {
    encoder: NativePatchEncoder,
    preprocess: PreprocessConfig,
}

impl ImageSide for NativeImages {
    fn max_images(&self) -> usize {
        1
    }

    fn fixed_tokens(&self) -> Option<usize> {
        Some(self.encoder.config().num_patches())
    }

    fn tokens_for(&self, _img: &RgbImage) -> Result<usize> {
        Ok(self.encoder.config().num_patches())
    }

    fn placeholder(&self) -> Option<&str> {
        None
    }

    fn image_token_id(&self) -> Option<u32> {
        None
    }

    fn placeholder_text(&self, _img: &RgbImage) -> Result<Option<String>> {
        Ok(None)
    }

    fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        Ok(preprocess(img, &self.preprocess, device)?)
    }

    fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        let c = self.encoder.config();
        let g = c.image_size / c.patch_size;
        Ok((tessera_vision::preprocess::view(img, &self.preprocess)?, g, g))
    }

    fn encode(&self, img: &RgbImage, device: &Device) -> Result<ImageFeatures> {
        Ok(ImageFeatures::new(self.encoder.forward(&self.pixel_values(img, device)?.unsqueeze(0)?)?))
    }

    fn tower_features(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        Ok(self.encode(img, device)?.tokens().clone())
    }

    fn describe(&self) -> String {
        let c = self.encoder.config();
        format!(
            "native patch embedding ({0}×{0} image, {1}×{1} patches → {2} tokens of width {3}, learned positions)",
            c.image_size,
            c.patch_size,
            c.num_patches(),
            c.hidden_size
        )
    }
}
