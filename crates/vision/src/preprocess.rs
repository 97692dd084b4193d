//! Image preprocessing as pure functions, driven by a checkpoint's `preprocessor_config.json`
//! and mirroring transformers' PIL-backed image processors (`image_transforms.py`,
//! `image_processing_utils.py`): resize (Pillow's filters), center crop, rescale, normalize.
//!
//! Arithmetic follows the reference exactly: resize on 8-bit pixels, `rescale` as
//! `f32(f64(x) · factor)`, `normalize` as `(x − mean) / std` in f32.

use candle_core::{Device, Tensor};
use serde::Deserialize;

use crate::error::{Result, VisionError};
use crate::image_io::RgbImage;
use crate::resize::{resize_u8, Filter};

/// `size` in its Hugging Face forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Size {
    HeightWidth { height: usize, width: usize },
    ShortestEdge { shortest_edge: usize },
    LongestEdge { longest_edge: usize },
}

/// The fields of `preprocessor_config.json` this pipeline honours.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PreprocessConfig {
    #[serde(default = "yes")]
    pub do_resize: bool,
    pub size: Option<Size>,
    /// Pillow's filter code (0 nearest, 1 Lanczos, 2 bilinear, 3 bicubic).
    #[serde(default = "bicubic")]
    pub resample: u32,
    #[serde(default)]
    pub do_center_crop: bool,
    pub crop_size: Option<Size>,
    #[serde(default = "yes")]
    pub do_rescale: bool,
    #[serde(default = "inv255")]
    pub rescale_factor: f64,
    #[serde(default = "yes")]
    pub do_normalize: bool,
    pub image_mean: Option<Vec<f32>>,
    pub image_std: Option<Vec<f32>>,
}

fn yes() -> bool {
    true
}
fn bicubic() -> u32 {
    3
}
fn inv255() -> f64 {
    1.0 / 255.0
}

/// The smallest `image_std` accepted: smaller ones blow pixel values up past what the tower's
/// arithmetic holds (published processors use 0.2 to 0.5).
pub const MIN_STD: f32 = 1e-6;

/// The largest image side a preprocessor may produce.
pub const MAX_SIDE: usize = 16384;

impl PreprocessConfig {
    /// Refuses settings outside their domain, naming the field: sizes of 0 or over
    /// [`MAX_SIDE`], a non-finite or non-positive `rescale_factor`, `image_mean`/`image_std`
    /// without 3 finite values, a `std` under [`MIN_STD`], an unknown `resample`.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(VisionError::Config(m));
        for (name, size) in [("size", self.size), ("crop_size", self.crop_size)] {
            let sides: Vec<usize> = match size {
                Some(Size::HeightWidth { height, width }) => vec![height, width],
                Some(Size::ShortestEdge { shortest_edge }) => vec![shortest_edge],
                Some(Size::LongestEdge { longest_edge }) => vec![longest_edge],
                None => Vec::new(),
            };
            if let Some(s) = sides.iter().find(|&&s| s == 0 || s > MAX_SIDE) {
                return bad(format!("`{name}` of {s} pixels is outside 1..={MAX_SIDE}"));
            }
        }
        if !(self.rescale_factor.is_finite() && self.rescale_factor > 0.0) {
            return bad(format!("`rescale_factor` {} must be a positive number", self.rescale_factor));
        }
        for (name, v) in [("image_mean", &self.image_mean), ("image_std", &self.image_std)] {
            if let Some(v) = v {
                if v.len() != 3 || v.iter().any(|x| !x.is_finite()) {
                    return bad(format!("`{name}` needs 3 finite values, got {v:?}"));
                }
            }
        }
        if let Some(std) = &self.image_std {
            if std.iter().any(|&s| s < MIN_STD) {
                return bad(format!("`image_std` {std:?} must be at least {MIN_STD} (it divides the pixels)"));
            }
        }
        self.filter()?;
        Ok(())
    }

    pub fn filter(&self) -> Result<Filter> {
        Filter::from_pil(self.resample)
            .ok_or_else(|| VisionError::Config(format!("unsupported `resample` value {}", self.resample)))
    }
}

/// transformers' `get_resize_output_image_size` → `(height, width)`.
pub fn output_size(height: usize, width: usize, size: Size) -> (usize, usize) {
    match size {
        Size::HeightWidth { height, width } => (height, width),
        Size::ShortestEdge { shortest_edge } => {
            let (short, long) = if width <= height { (width, height) } else { (height, width) };
            let new_long = (shortest_edge as f64 * long as f64 / short as f64) as usize;
            if width <= height {
                (new_long, shortest_edge)
            } else {
                (shortest_edge, new_long)
            }
        }
        Size::LongestEdge { longest_edge } => {
            let (long, short) = if width >= height { (width, height) } else { (height, width) };
            let new_short = (longest_edge as f64 * short as f64 / long as f64) as usize;
            if width >= height {
                (new_short.max(1), longest_edge)
            } else {
                (longest_edge, new_short.max(1))
            }
        }
    }
}

/// Resizes to `(height, width)` with a Pillow filter.
pub fn resize(img: &RgbImage, height: usize, width: usize, filter: Filter) -> RgbImage {
    RgbImage::new(width, height, resize_u8(&img.data, img.width, img.height, 3, width, height, filter))
}

/// transformers' `center_crop`: a centred window, zero-padded where it exceeds the image.
pub fn center_crop(img: &RgbImage, height: usize, width: usize) -> RgbImage {
    let top = (img.height as isize - height as isize).div_euclid(2);
    let left = (img.width as isize - width as isize).div_euclid(2);
    let mut out = vec![0u8; height * width * 3];
    for y in 0..height {
        let sy = y as isize + top;
        if sy < 0 || sy >= img.height as isize {
            continue;
        }
        for x in 0..width {
            let sx = x as isize + left;
            if sx < 0 || sx >= img.width as isize {
                continue;
            }
            let s = (sy as usize * img.width + sx as usize) * 3;
            out[(y * width + x) * 3..][..3].copy_from_slice(&img.data[s..s + 3]);
        }
    }
    RgbImage::new(width, height, out)
}

/// Rescale and normalize to a `(3, H, W)` f32 tensor (channels first).
pub fn to_tensor(img: &RgbImage, cfg: &PreprocessConfig, device: &Device) -> Result<Tensor> {
    let (h, w) = (img.height, img.width);
    let mut out = vec![0f32; 3 * h * w];
    normalize_into(img, cfg, &mut out)?;
    Ok(Tensor::from_vec(out, (3, h, w), device)?)
}

/// [`to_tensor`]'s values, written into `out` (`3·H·W`, channels first): several views can
/// share one buffer and become one tensor without a copy. A channel's value depends only on
/// its byte, so each channel's 256 values are computed once, with the reference's arithmetic
/// (rescale in double precision, then normalize in single), and looked up.
pub fn normalize_into(img: &RgbImage, cfg: &PreprocessConfig, out: &mut [f32]) -> Result<()> {
    let plane = img.height * img.width;
    let mean = cfg.image_mean.clone().unwrap_or_else(|| vec![0.5; 3]);
    let std = cfg.image_std.clone().unwrap_or_else(|| vec![0.5; 3]);
    if mean.len() != 3 || std.len() != 3 {
        return Err(VisionError::Config("image_mean and image_std need 3 values".into()));
    }
    if out.len() != 3 * plane || img.data.len() != 3 * plane {
        return Err(VisionError::Config(format!(
            "a {}×{} image needs {} bytes and as many floats: it has {} bytes, the buffer {} floats",
            img.width,
            img.height,
            3 * plane,
            img.data.len(),
            out.len()
        )));
    }
    for (c, dst) in out.chunks_exact_mut(plane.max(1)).enumerate().take(3) {
        let table: [f32; 256] = std::array::from_fn(|byte| {
            let mut v = byte as f32;
            if cfg.do_rescale {
                v = (byte as f64 * cfg.rescale_factor) as f32;
            }
            if cfg.do_normalize {
                v = (v - mean[c]) / std[c];
            }
            v
        });
        for (o, px) in dst.iter_mut().zip(img.data.chunks_exact(3)) {
            *o = table[usize::from(px[c])];
        }
    }
    Ok(())
}

/// The image as the processor resizes and crops it, before rescaling: what the model "sees".
pub fn view(img: &RgbImage, cfg: &PreprocessConfig) -> Result<RgbImage> {
    cfg.validate()?;
    let mut img = img.clone();
    if cfg.do_resize {
        let size = cfg.size.ok_or_else(|| VisionError::Config("do_resize is set but `size` is missing".into()))?;
        let (h, w) = output_size(img.height, img.width, size);
        // `size` is bounded, but a shortest edge scales the long side by the image's aspect
        // ratio: a 1×1000 image at 16384 would be 16M pixels wide.
        if h == 0 || w == 0 || h > MAX_SIDE || w > MAX_SIDE {
            return Err(VisionError::Config(format!(
                "resizing the {}×{} image to `size` {size:?} gives {w}×{h} pixels, outside 1..={MAX_SIDE} a side",
                img.width, img.height
            )));
        }
        img = resize(&img, h, w, cfg.filter()?);
    }
    if cfg.do_center_crop {
        let (h, w) = match cfg.crop_size {
            Some(Size::HeightWidth { height, width }) => (height, width),
            Some(Size::ShortestEdge { shortest_edge: s }) | Some(Size::LongestEdge { longest_edge: s }) => (s, s),
            None => return Err(VisionError::Config("do_center_crop is set but `crop_size` is missing".into())),
        };
        img = center_crop(&img, h, w);
    }
    Ok(img)
}

/// The whole pipeline: resize → center crop ([`view`]) → rescale → normalize, `(3, H, W)` f32.
pub fn preprocess(img: &RgbImage, cfg: &PreprocessConfig, device: &Device) -> Result<Tensor> {
    to_tensor(&view(img, cfg)?, cfg, device)
}
