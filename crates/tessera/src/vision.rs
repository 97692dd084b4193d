//! Image encoders as the assembly composes them from `tessera-vision`: preprocessing from
//! `preprocessor_config.json` (or the model config), then the model's image tower, giving image
//! tokens in the decoder's width.

use std::path::Path;

use candle_core::{Device, Tensor};
use tessera_decoder::Weights;
use tessera_vision::{preprocess, NativePatchEncoder, PreprocessConfig, RgbImage, Size};

use crate::config::VisionSpec;
use crate::error::{Result, TesseraError};

pub(crate) enum ImageEncoder {
    Native { encoder: NativePatchEncoder, preprocess: PreprocessConfig },
}

impl ImageEncoder {
    /// `dir` may hold a `preprocessor_config.json`; otherwise the model config's fields are used.
    pub fn load(spec: &VisionSpec, dir: &Path, vb: &Weights) -> Result<Self> {
        match spec {
            VisionSpec::Native { encoder, image_mean, image_std, resample } => {
                let path = dir.join("preprocessor_config.json");
                let preprocess = if path.exists() {
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| TesseraError::Config { path: path.clone(), reason: e.to_string() })?;
                    serde_json::from_str(&text)
                        .map_err(|e| TesseraError::Config { path: path.clone(), reason: e.to_string() })?
                } else {
                    PreprocessConfig {
                        do_resize: true,
                        size: Some(Size::HeightWidth { height: encoder.image_size, width: encoder.image_size }),
                        resample: *resample,
                        do_center_crop: false,
                        crop_size: None,
                        do_rescale: true,
                        rescale_factor: 1.0 / 255.0,
                        do_normalize: true,
                        image_mean: Some(image_mean.clone()),
                        image_std: Some(image_std.clone()),
                    }
                };
                Ok(Self::Native { encoder: NativePatchEncoder::new(*encoder, vb)?, preprocess })
            }
        }
    }

    pub fn tokens_per_image(&self) -> usize {
        match self {
            Self::Native { encoder, .. } => encoder.config().num_patches(),
        }
    }

    /// How many images one prompt may carry.
    pub fn max_images(&self) -> usize {
        match self {
            Self::Native { .. } => 1,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Native { encoder, .. } => {
                let c = encoder.config();
                format!(
                    "native patch embedding ({0}×{0} image, {1}×{1} patches → {2} tokens of width {3}, learned positions)",
                    c.image_size,
                    c.patch_size,
                    c.num_patches(),
                    c.hidden_size
                )
            }
        }
    }

    /// The image as the model sees it (resized, before normalization), and its patch grid.
    pub fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        match self {
            Self::Native { encoder, preprocess: cfg } => {
                let c = encoder.config();
                let s = c.image_size;
                let view = if (img.width, img.height) == (s, s) {
                    img.clone()
                } else {
                    tessera_vision::preprocess::resize(img, s, s, cfg.filter()?)
                };
                let g = s / c.patch_size;
                Ok((view, g, g))
            }
        }
    }

    /// The preprocessed image `(3, H, W)`.
    pub fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        match self {
            Self::Native { preprocess: cfg, .. } => Ok(preprocess(img, cfg, device)?),
        }
    }

    /// Image tokens `(1, N, hidden)`.
    pub fn encode(&self, img: &RgbImage, device: &Device) -> Result<Tensor> {
        let pixels = self.pixel_values(img, device)?.unsqueeze(0)?;
        match self {
            Self::Native { encoder, .. } => Ok(encoder.forward(&pixels)?),
        }
    }
}
